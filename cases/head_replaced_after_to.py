"""A new classifier head assigned after `model.to(device)` and after the optimizer was built.

**Symptom** (at the first forward pass, on any accelerator):
`RuntimeError: Expected all tensors to be on the same device, but got mat1 is on cuda:0, different from other tensors on cpu (when checking argument in method wrapper_CUDA_addmm)`
On CPU nothing is raised, and the new head never trains. Moving the head as well (`model.to(device)`
again) silences the error on accelerators too, and the head still never trains.

**Cause**: fine-tuning replaces the last layer: `model.fc = nn.Linear(features, n_classes)`. A new
layer is made on CPU, and `model.to(device)` ran before it existed. The optimizer, built earlier
from `model.parameters()`, holds the old head's parameters, which no longer take part in the forward;
the new head's parameters get gradients that no optimizer applies.

**Fix**: do it in this order: replace the head, `model.to(device)`, build the optimizer (the diff).
`samedevice.audit.structure(model=model, optimizer=optimizer)` names the orphaned and the missing
parameters of code that got the order wrong.
"""

from pathlib import Path

import torch
from torch import nn

from samedevice import harness


def new_head() -> nn.Linear:
    """The fine-tuning head: two new classes, the same weights every time."""
    torch.manual_seed(1)
    return nn.Linear(16, 2)


def run(device: torch.device, workdir: Path) -> dict[str, torch.Tensor]:
    model = harness.new_model().to(device)  # BUG: moved before the head is replaced
    optimizer = harness.sgd(model.parameters())  # BUG: built before the head is replaced
    model.fc2 = new_head()  # BUG: made on CPU, and the optimizer does not hold it
    harness.train(model, optimizer, harness.batches(), device)
    return harness.cpu_state(model)
