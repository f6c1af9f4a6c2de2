"""The training step on every device: `device` comes from same-device's pytest plugin (cpu, the
emulated accelerator, and every GPU present), and the device audit names a misplaced tensor."""

from __future__ import annotations

import pytest
import torch
from train import Classifier, train_step

from samedevice import audit


def test_training_step_lowers_the_loss(device: torch.device, request: pytest.FixtureRequest) -> None:
    """Two training steps run on the device and the second loss is lower than the first."""
    torch.manual_seed(0)
    model = Classifier().to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.randn(16, 4).to(device), torch.randint(0, 2, (16,)).to(device)
    audit.register(request, device, model=model, x=x, y=y)  # named in the report if the step mixes devices
    first = train_step(model, optimizer, x, y)
    assert train_step(model, optimizer, x, y) < first
