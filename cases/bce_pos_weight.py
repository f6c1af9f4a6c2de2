"""A loss built with a CPU `pos_weight` and never moved.

**Symptom** (in the loss, on any accelerator):
`RuntimeError: Expected all tensors to be on the same device, but found at least two devices, cuda:0 and cpu!`

**Cause**: `nn.BCEWithLogitsLoss(pos_weight=torch.tensor([3.0, 3.0]))` keeps `pos_weight` as a
registered buffer created on CPU. The model and the batches were moved; the criterion was not.
(The 000 article's example, `torch.Tensor([3])`, is a 1-element 1-D tensor: not a CPU scalar, so it
breaks too. A 0-dim `torch.tensor(3.0)` happens to work: each part of the loss takes it as a CPU
scalar, which CUDA allows.)

**Fix**: either create `pos_weight` on the device (shown here: the 000 article's fix), or call
`criterion.to(device)`, which moves it because it is a buffer. The second also survives code that
builds the criterion far from where the device is known.
"""

from pathlib import Path

import torch
from torch import nn

from samedevice import harness


def make_criterion(device: torch.device) -> nn.Module:
    return nn.BCEWithLogitsLoss(pos_weight=torch.tensor([3.0, 3.0]))  # BUG: pos_weight stays on CPU


def run(device: torch.device, workdir: Path) -> dict[str, torch.Tensor]:
    model = harness.new_model().to(device)
    optimizer = harness.sgd(model.parameters())
    criterion = make_criterion(device)
    harness.train(model, optimizer, harness.binary_batches(), device, criterion)
    return harness.cpu_state(model)
