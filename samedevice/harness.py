"""The tiny model, training loop and checkpoint round trip that every resume scenario shares.

Resume equivalence: STEPS_TOTAL uninterrupted steps on CPU (the reference) must give the same
parameters as STEPS_BEFORE steps on CPU, a checkpoint, a resume on the device, and the rest.
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from samedevice import devices, emulator

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


class WideNet(nn.Module):
    """TinyNet with a 2048x2048 layer in the middle: 16 MiB of float32 weights in one tensor, for the
    scenarios about device memory (on CUDA a tensor over 10 MiB gets a segment of its own, so the
    caching allocator's reserve follows the tensors)."""

    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(8, 2048)
        self.mid = nn.Linear(2048, 2048, bias=False)
        self.fc2 = nn.Linear(2048, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(torch.relu(self.mid(torch.relu(self.fc1(x)))))


class FineTuneNet(WideNet):
    """WideNet being fine-tuned: the backbone (fc1, mid) frozen, only the head (fc2) trains, so
    training adds almost nothing to the weights' memory."""

    def __init__(self) -> None:
        super().__init__()
        self.fc1.requires_grad_(False)
        self.mid.requires_grad_(False)


def new_model(net: type[nn.Module] = TinyNet) -> nn.Module:
    """The same initial weights every time (seeded), built on CPU."""
    # the CPU generator the layers draw their initial weights from; torch.manual_seed would also queue
    # a seeding of each lazily initialized accelerator module (CUDA, XPU, MTIA), a stack trace each,
    # about 5 ms a call on a host without them
    torch.default_generator.manual_seed(0)
    return net()


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


def padded_batches(longest: int = 5) -> list[InputsBatch]:
    """Batches whose input is `(x, lengths)`: sequences padded to `longest` steps of 8 features, and each one's
    own length (1 to `longest`), as a DataLoader's collate of variable-length samples gives them."""
    g = torch.Generator().manual_seed(3)
    return [((torch.randn(len(x), longest, 8, generator=g), torch.randint(1, longest + 1, (len(x),), generator=g)), y)
            for x, y in batches()]


def noisy(data: list[Batch]) -> list[Batch]:
    """The batches with noise drawn now from the global CPU generator, as data augmentation does:
    the numbers a run sees depend on the RNG state it resumes with."""
    return [(x + 0.1 * torch.randn(x.shape), y) for x, y in data]


def train(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    data: Sequence[InputsBatch],
    device: torch.device,
    loss_fn: Loss = F.mse_loss,
    after_step: Callable[[], None] | None = None,
) -> None:
    for x, y in data:
        inputs = tuple(t.to(device) for t in x) if isinstance(x, tuple) else (x.to(device),)
        optimizer.zero_grad()
        output = model(*inputs)  # its own line: a traceback tells the model's forward from the loss's
        loss_fn(output, y.to(device)).backward()
        optimizer.step()
        if after_step is not None:
            after_step()


def sgd(params: Iterable[nn.Parameter]) -> torch.optim.Optimizer:
    """The optimizer of the scenarios that are not about optimizers."""
    return torch.optim.SGD(params, lr=LR)


def cpu_state(model: nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().cpu() for k, v in model.state_dict().items()}


def write_checkpoint(workdir: Path, make_optimizer: MakeOptimizer, device: torch.device | None = None,
                     net: type[nn.Module] = TinyNet) -> Path:
    """Train STEPS_BEFORE steps on `device` (CPU by default) and save model and optimizer state, as a
    training run would: the file records the device each tensor was on."""
    device = device or torch.device("cpu")
    model = new_model(net).to(device)
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
    make_optimizer: MakeOptimizer, data: Callable[[list[Batch]], list[Batch]] = list, net: type[nn.Module] = TinyNet
) -> dict[str, torch.Tensor]:
    """STEPS_TOTAL uninterrupted steps on CPU (on `data(batches())`, e.g. `noisy`)."""
    model = new_model(net)
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


def host_without(device: torch.device) -> AbstractContextManager[None]:
    """Play, in this process, a host that lacks `device`'s accelerator: the emulator's absent host
    for the emulated device. A real accelerator cannot be hidden from its own process: there the
    block is the host that has it."""
    return emulator.absent() if device.type == emulator.NAME else nullcontext()


def current_accelerator() -> torch.device:
    """The accelerator this host has, as code that picks one by availability finds it (`torch.device("cuda" if
    torch.cuda.is_available() else "cpu")`, `torch.accelerator.current_accelerator(check_available=True)`), else the
    CPU: a real accelerator first, CUDA, then MPS and XPU (the order of PyTorch's own `_get_available_device_type`),
    then the emulated device (which `torch.accelerator` would put first once registered). Index-less: the current
    device."""
    found = [torch.cuda.is_available(), torch.backends.mps.is_available(),
             hasattr(torch, "xpu") and torch.xpu.is_available(),
             torch._C._get_privateuse1_backend_name() == emulator.NAME and emulator.visible_count() > 0]
    return next((torch.device(kind) for kind, there in zip(("cuda", "mps", "xpu", emulator.NAME), found) if there),
                torch.device("cpu"))


def host_with_one_device(device: torch.device) -> AbstractContextManager[None]:
    """Play, in this process, a host with one device of `device`'s kind, fewer than the emulator's two: its
    `visible(1)`, as CUDA_VISIBLE_DEVICES=0 shows one GPU. A real accelerator cannot hide its devices from its own
    process: there the block is the host as it is, the host that saved."""
    return emulator.visible(1) if device.type == emulator.NAME else nullcontext()


def as_on_a_host_of(device: torch.device) -> AbstractContextManager[None]:
    """Run as on a machine whose accelerators are `device`'s: for cpu, a host without any (the emulator plays
    absent, as a CPU-only CI machine is, where library code that asks for "the available accelerator", such as
    DataParallel, finds none); for an accelerator, the host as it is."""
    registered = torch._C._get_privateuse1_backend_name() == emulator.NAME
    return emulator.absent() if device.type == "cpu" and registered else nullcontext()


# Device memory, for the scenarios about it: the emulator's accounting, or torch.cuda's.


def allocated(device: torch.device) -> int | None:
    """Bytes allocated on the device now; None where it is not measured."""
    if device.type == "emulated":
        return emulator.memory_allocated(device)
    if device.type == "cuda":
        return torch.cuda.memory_allocated(device)
    return None


def reset_peak(device: torch.device) -> None:
    if device.type == "emulated":
        emulator.reset_peak_memory_stats(device)
    elif device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)


def peak(device: torch.device) -> int | None:
    """Bytes: the most allocated on the device since `reset_peak`; None where it is not measured."""
    if device.type == "emulated":
        return emulator.max_memory_allocated(device)
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device)
    return None


@contextmanager
def memory_budget(device: torch.device, free: int, device_size: int | None = None) -> Iterator[None]:
    """A device with only `free` more bytes for this block: past it, torch.OutOfMemoryError. On the
    emulated device a capacity (of `device_size` bytes, the rest held by other processes, when given);
    on CUDA the caching allocator's per-process fraction (its reserve counts, so the cache is emptied
    first); elsewhere no limit."""
    gc.collect()  # tensors that only a dead traceback's frames still hold are not the run's to count
    if device.type == "emulated":
        mine = emulator.memory_allocated(device) + free
        size = mine if device_size is None else max(device_size, mine)
        emulator.set_capacity(device, size, used_elsewhere=size - mine)
        try:
            yield
        finally:
            emulator.set_capacity(device, None)
    elif device.type == "cuda":
        torch.cuda.empty_cache()
        total = torch.cuda.get_device_properties(device).total_memory
        torch.cuda.set_per_process_memory_fraction((torch.cuda.memory_reserved(device) + free) / total, device)
        try:
            yield
        finally:
            torch.cuda.set_per_process_memory_fraction(1.0, device)
            torch.cuda.empty_cache()
    else:
        yield
