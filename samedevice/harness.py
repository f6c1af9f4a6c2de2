"""The tiny model, training loop and checkpoint round trip that every resume scenario shares.

Resume equivalence: STEPS_TOTAL uninterrupted steps on CPU (the reference) must give the same
parameters as STEPS_BEFORE steps on CPU, a checkpoint, a resume on the device, and the rest.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from samedevice import devices

STEPS_TOTAL = 6
STEPS_BEFORE = 3
LR = 0.05

Batch = tuple[torch.Tensor, torch.Tensor]
InputsBatch = tuple[torch.Tensor | tuple[torch.Tensor, ...], torch.Tensor]  # (input or inputs, target)
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


def class_batches() -> list[Batch]:
    """Batches with class-index targets (0 or 1), for CrossEntropyLoss and NLLLoss."""
    return [(x, y.argmax(dim=1)) for x, y in batches()]


def timestep_batches(steps: int) -> list[InputsBatch]:
    """Batches whose input is `(x, t)`, with a timestep `t` in `range(steps)` per sample, as a
    diffusion model's training loop draws them."""
    g = torch.Generator().manual_seed(2)
    return [((x, torch.randint(0, steps, (len(x),), generator=g)), y) for x, y in batches()]


def train(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    data: Sequence[InputsBatch],
    device: torch.device,
    loss_fn: Loss = F.mse_loss,
) -> None:
    for x, y in data:
        inputs = tuple(t.to(device) for t in x) if isinstance(x, tuple) else (x.to(device),)
        optimizer.zero_grad()
        loss_fn(model(*inputs), y.to(device)).backward()
        optimizer.step()


def sgd(params: Iterable[nn.Parameter]) -> torch.optim.Optimizer:
    """The optimizer of the scenarios that are not about optimizers."""
    return torch.optim.SGD(params, lr=LR)


def cpu_state(model: nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().cpu() for k, v in model.state_dict().items()}


def write_checkpoint(workdir: Path, make_optimizer: MakeOptimizer) -> Path:
    """Train STEPS_BEFORE steps on CPU and save model and optimizer state, as a training run would."""
    model = new_model()
    optimizer = make_optimizer(model.parameters())
    train(model, optimizer, batches()[:STEPS_BEFORE], torch.device("cpu"))
    path = Path(workdir) / "checkpoint.pt"
    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict()}, path)
    return path


def finish(model: nn.Module, optimizer: torch.optim.Optimizer, device: torch.device) -> dict[str, torch.Tensor]:
    """The steps after the resume, on the device; returns the final parameters on CPU."""
    train(model, optimizer, batches()[STEPS_BEFORE:], device)
    return cpu_state(model)


def reference(make_optimizer: MakeOptimizer) -> dict[str, torch.Tensor]:
    """STEPS_TOTAL uninterrupted steps on CPU."""
    model = new_model()
    optimizer = make_optimizer(model.parameters())
    train(model, optimizer, batches(), torch.device("cpu"))
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


def second_device(device: torch.device) -> torch.device:
    """Index 1 of `device`'s kind where this host can train on two devices of it, else `device`: a
    worker given the second device, as a DDP rank 1 is."""
    if device.type == "cpu" or devices.count(device.type) < 2:
        return device
    return torch.device(device.type, 1)


def host_with(device: torch.device) -> Callable[[str], bool]:
    """An availability probe for a host whose one accelerator is `device` (none for cpu), so a
    device picker can be run as it would run on that host."""
    return lambda kind: device.type != "cpu" and kind == device.type
