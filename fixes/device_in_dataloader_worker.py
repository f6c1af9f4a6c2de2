"""Samples moved to the device inside the Dataset: DataLoader's forked workers cannot use it.

**Symptom** (at the first batch, on CUDA and the emulated device, where workers are forked, Linux's default):
`RuntimeError: Caught RuntimeError in DataLoader worker process 0.` whose original traceback ends in
`RuntimeError: Cannot re-initialize CUDA in forked subprocess. To use CUDA with multiprocessing, you must use the 'spawn' start method`

**Cause**: with `num_workers > 0`, `__getitem__` runs in worker processes, which Linux makes by forking the
training process. The training process has used the GPU already (`model.to(device)`), and CUDA cannot start again
in a child forked after that: a `.to(device)` in the Dataset (or in a transform, a `collate_fn`, under a CUDA
default device) fails in every worker. With `num_workers=0` the same code runs in the training process and works,
and on CPU nothing needs CUDA: neither shows it. (A worker started with 'spawn' could use the GPU, but then every
worker holds a CUDA context of its own, and the batches cross processes through CUDA IPC.)

**Fix**: keep the Dataset on the CPU and move each batch in the training loop (shown); `pin_memory=True` makes
that copy faster.
"""

import multiprocessing
from pathlib import Path

import torch
from torch.utils.data import DataLoader, Dataset

from samedevice import harness


class Samples(Dataset):
    """harness.batches(), one sample per item: batches of 4 put them back together."""

    def __init__(self, device: torch.device) -> None:
        self.samples = [(x[i], y[i]) for x, y in harness.batches() for i in range(len(x))]
        self.device = device

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        x, y = self.samples[i]
        return x, y  # FIX: on the CPU; the training loop moves each batch


def unavailable_reason(device: torch.device) -> str | None:
    if "fork" not in multiprocessing.get_all_start_methods():
        return "this platform cannot fork: its DataLoader workers are spawned, and a spawned worker may use the device"
    if device.type == "mps":
        return "PyTorch refuses CUDA and XPU in a forked child, not MPS: what Metal does there is the platform's"
    return None


def run(device: torch.device, workdir: Path) -> dict[str, torch.Tensor]:
    model = harness.new_model().to(device)  # the training process uses the device first
    loader = DataLoader(Samples(device), batch_size=4, num_workers=2, multiprocessing_context="fork")
    harness.train(model, harness.sgd(model.parameters()), list(loader), device)
    return harness.cpu_state(model)
