"""DataLoader batches that are never moved to the device, nested ones included.

**Symptom** (at the forward pass, on any accelerator):
`RuntimeError: Expected all tensors to be on the same device, but got mat1 is on cpu, different from other tensors on cuda:0 (when checking argument in method wrapper_CUDA_addmm)`

**Cause**: a DataLoader builds its batches on CPU (pinned memory at most); nothing moves them. Both
articles show `x, y = x.to(device), y.to(device)`, which covers a flat `(x, y)` pair only: a batch
that is a dict of tensors, or a tuple holding a list of tensors, needs every tensor moved, at every
level; moving the top level alone still leaves the inner tensors on CPU.

**Fix**: move the whole batch with a function that walks dicts, lists and tuples (named tuples
included) and moves every tensor it finds (`move_to` below), once per batch, before the forward.
"""

from pathlib import Path

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

from samedevice import harness


class NestedPairs(Dataset):
    """Samples shaped like a multi-input model's: {"inputs": (x, [x_scale]), "target": y}."""

    def __init__(self) -> None:
        self.pairs = harness.batches()

    def __len__(self) -> int:
        return len(self.pairs) * 4

    def __getitem__(self, i: int) -> dict:
        x, y = self.pairs[i // 4][0][i % 4], self.pairs[i // 4][1][i % 4]
        return {"inputs": (x, [x.abs().mean(dim=0, keepdim=True)]), "target": y}


class TwoInputNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = harness.new_model()

    def forward(self, inputs: tuple) -> torch.Tensor:
        x, (scale,) = inputs
        return self.body(x) * scale


def move_to(batch, device: torch.device):  # FIX: every tensor, at every level of the batch
    if isinstance(batch, torch.Tensor):
        return batch.to(device, non_blocking=True)
    if isinstance(batch, dict):
        return {key: move_to(value, device) for key, value in batch.items()}
    if isinstance(batch, tuple) and hasattr(batch, "_fields"):  # a named tuple
        return type(batch)(*(move_to(value, device) for value in batch))
    if isinstance(batch, (list, tuple)):
        return type(batch)(move_to(value, device) for value in batch)
    return batch


def run(device: torch.device, workdir: Path) -> dict[str, torch.Tensor]:
    model = TwoInputNet().to(device)
    optimizer = harness.sgd(model.parameters())
    for batch in DataLoader(NestedPairs(), batch_size=4):
        batch = move_to(batch, device)  # FIX: before the forward
        optimizer.zero_grad()
        nn.functional.mse_loss(model(batch["inputs"]), batch["target"]).backward()
        optimizer.step()
    return harness.cpu_state(model)
