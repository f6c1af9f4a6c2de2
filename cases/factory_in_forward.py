"""Tensors created inside `forward` without a device: positions, gates, masks.

**Symptom** (at the first forward pass, on any accelerator):
`RuntimeError: Expected all tensors to be on the same device, but found at least two devices, cuda:0 and cpu!`
(a mask made with `torch.from_numpy` gives `expected self and mask to be on the same device, but got
mask on cpu and self on cuda:0`; an RNN's `h0 = torch.zeros(...)` gives `Input and hidden tensors
are not at the same device, found input tensor at cuda:0 and hidden tensor at cpu`.)

**Cause**: `torch.arange`, `torch.zeros`, `torch.ones` and `torch.from_numpy` create their tensor on
CPU unless told otherwise. Inside `forward` nothing tells them: `model.to(device)` moved the
parameters, but it cannot reach a tensor that is made anew at every call.

**Fix**: take the device from the input: `torch.arange(n, device=h.device)`, or `h.new_ones(n)`
(device and dtype of `h`). A constant that does not depend on the input (a fixed mask) is better
made once, in `__init__`, as a non-persistent buffer: `.to(device)` moves it and checkpoints
leave it out.
"""

from pathlib import Path

import numpy as np
import torch
from torch import nn

from samedevice import harness

KEEP_OUT = np.arange(16) % 4 == 3  # hidden units this model never uses: a mask, as NumPy gives it


class PositionNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.fc1 = nn.Linear(8, 16)
        self.fc2 = nn.Linear(16, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.fc1(x))
        positions = torch.arange(h.shape[1]) / h.shape[1]  # BUG: made on CPU
        gate = torch.ones(h.shape[1]) * 0.5  # BUG: made on CPU
        h = (h + positions * gate).masked_fill(torch.from_numpy(KEEP_OUT), 0.0)  # BUG: the mask is on CPU
        return self.fc2(h)


def run(device: torch.device, workdir: Path) -> dict[str, torch.Tensor]:
    model = PositionNet().to(device)
    harness.train(model, harness.sgd(model.parameters()), harness.batches(), device)
    return harness.cpu_state(model)
