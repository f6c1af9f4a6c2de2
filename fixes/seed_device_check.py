"""The 000 article's device check and its "recovery", after a resume in the wrong order.

**Symptom**: the check reports all clear; then the first step raises, in the loss
(`pos_weight` is on CPU), on any accelerator:
`RuntimeError: Expected all tensors to be on the same device, but found at least two devices, cuda:0 and cpu!`
With the criterion moved, `optimizer.step()` raises the same next (the momentum buffers are on CPU).

**Cause**: `check_device_consistency(model, data, criterion)` compares the model's *first parameter*
with the data, and nothing else: not the other parameters, not the optimizer state, not the
criterion it is handed. Its recovery runs only when that one comparison fails, and even then
(`model.to(device)`, `criterion.to(device)`) cannot move optimizer state, nor the data it found on
the wrong device.

**Fix**: check every tensor: `samedevice.audit.misplaced(device, model=..., optimizer=...,
criterion=..., batch=...)` names each one off the device. Recover with `optimizer_to(optimizer)`
(fixes/optimizer_to.py) besides `model.to` and `criterion.to`, or with `audit.repair`, which also
refuses, with the code change to make, what no move can fix.
"""

from pathlib import Path

import torch
from torch import nn

from fixes.optimizer_to import optimizer_to  # FIX: the recovery for optimizer state
from samedevice import harness
from samedevice.audit import misplaced  # FIX: the check

WRONG_ORDER = (harness.BUILD, harness.LOAD_MODEL, harness.LOAD_OPTIMIZER, harness.TO_DEVICE)


def make_optimizer(params):
    return torch.optim.SGD(params, lr=harness.LR, momentum=0.9)


def check_device_consistency(device: torch.device, model, optimizer, criterion, data) -> bool:
    found = misplaced(device, model=model, optimizer=optimizer, criterion=criterion, data=data)  # FIX: every tensor
    return not found  # FIX: of every object


def recover(device: torch.device, model, optimizer, criterion) -> None:
    model.to(device)
    optimizer_to(optimizer)  # FIX: the optimizer state too
    criterion.to(device)


def resume(path: Path, device: torch.device):
    """The wrong order of sgd_momentum (its buffers stay on CPU), and the criterion of bce_pos_weight."""
    model, optimizer = harness.resume_in_order(WRONG_ORDER, path, device, make_optimizer)
    return model, optimizer, nn.BCEWithLogitsLoss(pos_weight=torch.tensor([3.0, 3.0]))


def run(device: torch.device, workdir: Path) -> dict[str, torch.Tensor]:
    model, optimizer, criterion = resume(harness.write_checkpoint(workdir, make_optimizer), device)
    data = harness.binary_batches()[harness.STEPS_BEFORE:]
    if not check_device_consistency(device, model, optimizer, criterion, data[0][0].to(device)):
        recover(device, model, optimizer, criterion)
    harness.train(model, optimizer, data, device, criterion)
    return harness.cpu_state(model)
