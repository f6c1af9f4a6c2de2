"""A model's constant tensor kept as a plain attribute: `model.to(device)` leaves it on CPU.

**Symptom** (in the model's forward, on any accelerator, after `model.to(device)`):
`RuntimeError: Expected all tensors to be on the same device, but found at least two devices, cuda:0 and cpu!`

**Cause**: `Module.to` moves parameters, buffers and submodules, nothing else. A constant the forward
reads (a positional encoding, a mask, anchors, a fixed scale) assigned as `self.scale = torch.…` in
`__init__` is none of them: it stays on CPU while the weights move, and the first op that mixes them
raises. `state_dict()` skips it too, so a checkpoint neither saves nor restores it. On CPU nothing
fails. (A loss's plain weight is the same mistake: see custom_loss_weight.)

**Fix**: `self.register_buffer("scale", ..., persistent=False)`: a buffer moves with `.to`. Keep it
non-persistent when it is a constant the code rebuilds: a persistent buffer is a new key of
`state_dict`, and a strict `load_state_dict` of a checkpoint saved before the change fails with
"Missing key(s) in state_dict".
"""

from pathlib import Path

import torch
from torch import nn

from samedevice import harness


class ScaledNet(nn.Module):
    """TinyNet whose hidden features are scaled by a fixed vector: any constant tensor a forward reads."""

    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(8, 16)
        self.fc2 = nn.Linear(16, 2)
        self.scale = torch.linspace(0.5, 1.5, 16)  # BUG: a plain attribute: .to(device) and state_dict skip it

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(torch.relu(self.fc1(x) * self.scale))


def resume(path: Path, device: torch.device):
    model = harness.new_model(ScaledNet).to(device)
    optimizer = harness.sgd(model.parameters())
    checkpoint = torch.load(path, weights_only=True)
    model.load_state_dict(checkpoint["model"])
    optimizer.load_state_dict(checkpoint["optimizer"])
    return model, optimizer


def run(device: torch.device, workdir: Path) -> dict[str, torch.Tensor]:
    model, optimizer = resume(harness.write_checkpoint(workdir, harness.sgd, net=ScaledNet), device)
    return harness.finish(model, optimizer, device)


def reference() -> dict[str, torch.Tensor]:
    return harness.reference(harness.sgd, net=ScaledNet)
