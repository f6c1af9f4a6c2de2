"""Layers kept in a plain Python list: `model.to(device)` never sees them.

**Symptom** (at the first forward pass, on any accelerator):
`RuntimeError: Expected all tensors to be on the same device, but got mat1 is on cuda:0, different from other tensors on cpu (when checking argument in method wrapper_CUDA_addmm)`
On CPU nothing is raised, and nothing warns: the listed layers simply never train.

**Cause**: a module registers a submodule only when it is assigned directly (`self.fc = nn.Linear(...)`)
or held by `nn.ModuleList` / `nn.ModuleDict` / `nn.Sequential`. Layers in a plain `list` or `dict`
attribute are invisible to everything that walks the registry: `.to(device)`, `.parameters()` (so
the optimizer never updates them), `state_dict()` (so checkpoints lose them), `.train()`/`.eval()`.

**Fix**: `nn.ModuleList([...])` for a list, `nn.ModuleDict({...})` for a dict; indexing and
iteration work as before. `samedevice.audit.structure(model=model)` names every layer still
stranded in a plain container.
"""

from pathlib import Path

import torch
from torch import nn

from samedevice import harness


class BlockNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.fc1 = nn.Linear(8, 16)
        self.blocks = [nn.Linear(16, 16) for _ in range(2)]  # BUG: a plain list: .to and .parameters() skip it
        self.fc2 = nn.Linear(16, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.fc1(x))
        for block in self.blocks:
            h = torch.relu(block(h))
        return self.fc2(h)


def run(device: torch.device, workdir: Path) -> dict[str, torch.Tensor]:
    model = BlockNet().to(device)
    harness.train(model, harness.sgd(model.parameters()), harness.batches(), device)
    return harness.cpu_state(model)
