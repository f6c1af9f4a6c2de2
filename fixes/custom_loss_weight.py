"""A custom loss that keeps its weight as a plain tensor attribute.

**Symptom** (in the loss, on any accelerator, even after `criterion.to(device)`):
`RuntimeError: Expected all tensors to be on the same device, but found at least two devices, cuda:0 and cpu!`

**Cause**: `Module.to` moves parameters, buffers and submodules, nothing else. A tensor assigned as
`self.weight = torch.tensor(...)` is neither: it stays on CPU, so the 000 article's advice,
`CustomLoss().to(device)`, does not help. The same holds for criteria kept in a plain Python list:
`.to` never looks inside it.

**Fix**: `self.register_buffer("weight", ...)` (moves with `.to`, is saved in `state_dict`; pass
`persistent=False` to keep it out of checkpoints), and `nn.ModuleList` for a list of criteria.
"""

from pathlib import Path

import torch
from torch import nn

from samedevice import harness


class WeightedMSE(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("weight", torch.tensor([1.0, 2.0]))  # FIX: a buffer moves with .to

    def forward(self, input: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return (self.weight * (input - target) ** 2).mean()


class ScaledL1(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("scale", torch.tensor([0.5, 0.5]))

    def forward(self, input: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return (self.scale * (input - target).abs()).mean()


class SumOfLosses(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.parts = nn.ModuleList([ScaledL1(), nn.SmoothL1Loss()])  # FIX: .to reaches into it

    def forward(self, input: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return sum(part(input, target) for part in self.parts)


def train_with(criterion: nn.Module, device: torch.device) -> dict[str, torch.Tensor]:
    model = harness.new_model().to(device)
    optimizer = harness.sgd(model.parameters())
    harness.train(model, optimizer, harness.batches(), device, criterion.to(device))
    return harness.cpu_state(model)


def run(device: torch.device, workdir: Path) -> dict[str, torch.Tensor]:
    return train_with(WeightedMSE(), device)


def run_list_of_criteria(device: torch.device, workdir: Path) -> dict[str, torch.Tensor]:
    return train_with(SumOfLosses(), device)
