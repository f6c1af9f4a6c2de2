"""The tiny model, training loop and checkpoint round trip that every resume scenario shares.

Resume equivalence: STEPS_TOTAL uninterrupted steps on CPU (the reference) must give the same
parameters as STEPS_BEFORE steps on CPU, a checkpoint, a resume on the device, and the rest.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

STEPS_TOTAL = 6
STEPS_BEFORE = 3
LR = 0.05

Batch = tuple[torch.Tensor, torch.Tensor]
MakeOptimizer = Callable[[Iterable[nn.Parameter]], torch.optim.Optimizer]
Loss = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


class TinyNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(8, 16)
        self.fc2 = nn.Linear(16, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(torch.relu(self.fc1(x)))


def new_model() -> TinyNet:
    """The same initial weights every time (seeded), built on CPU."""
    torch.manual_seed(0)
    return TinyNet()


def batches() -> list[Batch]:
    g = torch.Generator().manual_seed(1)
    return [(torch.randn(4, 8, generator=g), torch.randn(4, 2, generator=g)) for _ in range(STEPS_TOTAL)]


def binary_batches() -> list[Batch]:
    """Batches with 0/1 targets, for the binary-classification losses."""
    return [(x, (y > 0).float()) for x, y in batches()]


def noisy(data: list[Batch]) -> list[Batch]:
    """The batches with noise drawn now from the global CPU generator, as data augmentation does:
    the numbers a run sees depend on the RNG state it resumes with."""
    return [(x + 0.1 * torch.randn(x.shape), y) for x, y in data]


def train(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    data: list[Batch],
    device: torch.device,
    loss_fn: Loss = F.mse_loss,
    after_step: Callable[[], None] | None = None,
) -> None:
    for x, y in data:
        x, y = x.to(device), y.to(device)
        optimizer.zero_grad()
        loss_fn(model(x), y).backward()
        optimizer.step()
        if after_step is not None:
            after_step()


def sgd(params: Iterable[nn.Parameter]) -> torch.optim.Optimizer:
    """The optimizer of the scenarios that are not about optimizers."""
    return torch.optim.SGD(params, lr=LR)


def cpu_state(model: nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().cpu() for k, v in model.state_dict().items()}


def write_checkpoint(workdir: Path, make_optimizer: MakeOptimizer, device: torch.device | None = None) -> Path:
    """Train STEPS_BEFORE steps on `device` (CPU by default) and save model and optimizer state, as a
    training run would: the file records the device each tensor was on."""
    device = device or torch.device("cpu")
    model = new_model().to(device)
    optimizer = make_optimizer(model.parameters())
    train(model, optimizer, batches()[:STEPS_BEFORE], device)
    path = Path(workdir) / "checkpoint.pt"
    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict()}, path)
    return path


def finish(model: nn.Module, optimizer: torch.optim.Optimizer, device: torch.device,
           data: list[Batch] | None = None) -> dict[str, torch.Tensor]:
    """The steps after the resume (`data`, by default the rest of `batches()`), on the device;
    returns the final parameters on CPU."""
    train(model, optimizer, batches()[STEPS_BEFORE:] if data is None else data, device)
    return cpu_state(model)


def reference(
    make_optimizer: MakeOptimizer, data: Callable[[list[Batch]], list[Batch]] = list
) -> dict[str, torch.Tensor]:
    """STEPS_TOTAL uninterrupted steps on CPU (on `data(batches())`, e.g. `noisy`)."""
    model = new_model()
    optimizer = make_optimizer(model.parameters())
    train(model, optimizer, data(batches()), torch.device("cpu"))
    return cpu_state(model)


# The four steps of a resume, for the scenarios that are about their order.
BUILD, LOAD_MODEL, LOAD_OPTIMIZER, TO_DEVICE = (
    "build optimizer",
    "load model state",
    "load optimizer state",
    "model.to(device)",
)


def resume_in_order(
    order: tuple[str, ...], path: Path | None, device: torch.device, make_optimizer: MakeOptimizer
) -> tuple[nn.Module, torch.optim.Optimizer]:
    """Resume by doing the steps of `order` in that order (no checkpoint: a fresh start)."""
    model = new_model()
    checkpoint = torch.load(path, weights_only=True) if path is not None else None
    optimizer: torch.optim.Optimizer | None = None
    for step in order:
        if step == BUILD:
            optimizer = make_optimizer(model.parameters())
        elif step == LOAD_MODEL and checkpoint is not None:
            model.load_state_dict(checkpoint["model"])
        elif step == LOAD_OPTIMIZER and checkpoint is not None:
            assert optimizer is not None, f"{order}: the optimizer state is loaded before the optimizer exists"
            optimizer.load_state_dict(checkpoint["optimizer"])
        elif step == TO_DEVICE:
            model.to(device)
    assert optimizer is not None, f"{order} never builds the optimizer"
    return model, optimizer


def host_with(device: torch.device) -> Callable[[str], bool]:
    """An availability probe for a host whose one accelerator is `device` (none for cpu), so a
    device picker can be run as it would run on that host."""
    return lambda kind: device.type != "cpu" and kind == device.type
