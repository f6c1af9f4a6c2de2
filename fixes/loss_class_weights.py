"""CrossEntropyLoss (or NLLLoss) with class weights made on CPU and never moved.

**Symptom** (in the loss, on any accelerator):
`RuntimeError: Expected all tensors to be on the same device, but got weight is on cpu, different from other tensors on cuda:0 (when checking argument in method wrapper_CUDA_nll_loss_forward)`
With the targets left on CPU it says `but got target is on cpu` instead (and names the target first
when both are); with probability targets, `found at least two devices, cuda:0 and cpu!`.

**Cause**: class weights are usually computed from the dataset's label counts, on CPU (NumPy,
scikit-learn's `compute_class_weight`, `torch.bincount` of CPU labels), then handed to the loss:
`nn.CrossEntropyLoss(weight=w)` stores `w` as a registered buffer where it was made. The model and
the inputs were moved; the criterion was not. The loss's kernel checks all its tensor arguments,
so the weight is named in the message.

**Fix**: `criterion.to(device)` (shown here: `weight` is a buffer, so it moves), or make `w` on the
device. And move the targets with the inputs: `y.to(device)`, every batch.
"""

from pathlib import Path

import torch
from torch import nn

from samedevice import harness

CLASS_WEIGHTS = [1.0, 3.0]  # the rarer class counts three times as much


def make_criterion(device: torch.device) -> nn.Module:
    return nn.CrossEntropyLoss(weight=torch.tensor(CLASS_WEIGHTS)).to(device)  # FIX: weight is a buffer: .to moves it


def run(device: torch.device, workdir: Path) -> dict[str, torch.Tensor]:
    model = harness.new_model().to(device)
    optimizer = harness.sgd(model.parameters())
    harness.train(model, optimizer, harness.class_batches(), device, make_criterion(device))
    return harness.cpu_state(model)
