"""A small training module with a device bug that a CPU-only CI never sees.

`Classifier` keeps its class weights as a plain tensor attribute. `model.to(device)` moves parameters
and buffers only, so on a GPU the weighted loss mixes a CUDA batch with CPU weights:

    RuntimeError: Expected all tensors to be on the same device, but found at least two devices, cuda:0 and cpu!

On CPU everything is on CPU and the bug stays hidden. tests/test_train.py runs on the emulated
accelerator too (same-device's pytest plugin), so it fails on a laptop, and the device audit names
`model.class_weights`. The fix is one line: `self.register_buffer("class_weights", torch.tensor(...))`.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class Classifier(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
        self.class_weights = torch.tensor([1.0, 3.0])  # BUG: a plain attribute, which model.to(device) skips

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def loss(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(self(x), y, weight=self.class_weights)


def train_step(model: Classifier, optimizer: torch.optim.Optimizer, x: torch.Tensor, y: torch.Tensor) -> float:
    optimizer.zero_grad()
    loss = model.loss(x, y)
    loss.backward()
    optimizer.step()
    return loss.item()
