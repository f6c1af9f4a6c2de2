"""A fused optimizer's `step` left on CPU by a rescue loop that skips `step`.

**Symptom** (at `optimizer.step()`, on any accelerator):
`RuntimeError: Expected all tensors to be on the same device, but got state_steps is on cpu, different from other tensors on cuda:0 (when checking argument in method wrapper_CUDA___fused_adam_)`

**Cause**: PyTorch keeps `step` on CPU for the default (foreach and for-loop) implementations, so
reading it costs no device sync, but a `fused` or `capturable` optimizer reads it on the device
(`Optimizer._process_value_according_to_param_policy` puts it on the parameter's device at load
time). Loaded while the model was on CPU, `step` is on CPU; a hand-written rescue loop that moves
"everything but `step`", a rule learned from the default optimizers, leaves it there. The fused
kernel's argument check refuses it; with `capturable=True` Adam's own check raises an
`AssertionError` instead. The opposite loop, one that moves everything, puts a default
optimizer's `step` on the device: no error, the same numbers, but the optimizer reads `step`
back to the host every step (on CUDA a sync: two per parameter with the default foreach Adam).

**Fix**: `fixes/optimizer_to.py`, which follows PyTorch's rule: `step` on the parameter's device
for fused and capturable optimizers, on CPU for the others. Better still, when you control the
resume: move the model, build the optimizer, then load (see sgd_momentum).
"""

from pathlib import Path

import torch

from fixes.optimizer_to import optimizer_to
from samedevice import harness


def make_optimizer(params):
    return torch.optim.Adam(params, lr=harness.LR, fused=True)


def resume(path: Path, device: torch.device):
    model = harness.new_model()
    optimizer = make_optimizer(model.parameters())
    checkpoint = torch.load(path, weights_only=True)
    model.load_state_dict(checkpoint["model"])
    optimizer.load_state_dict(checkpoint["optimizer"])
    model.to(device)
    optimizer_to(optimizer)  # FIX: step too, where the fused kernel reads it
    return model, optimizer


def run(device: torch.device, workdir: Path) -> dict[str, torch.Tensor]:
    model, optimizer = resume(harness.write_checkpoint(workdir, make_optimizer), device)
    return harness.finish(model, optimizer, device)


def reference() -> dict[str, torch.Tensor]:
    return harness.reference(make_optimizer)
