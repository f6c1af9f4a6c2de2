"""Adam/AdamW moments left on CPU after a resume.

**Symptom** (at `optimizer.step()`, on any accelerator):
`RuntimeError: Expected all tensors to be on the same device, but found at least two devices, cuda:0 and cpu!`

**Cause**: as with SGD momentum: loading the optimizer state while the model is on CPU casts
`exp_avg`, `exp_avg_sq` (and `max_exp_avg_sq` with `amsgrad`) to CPU; `model.to(device)` leaves
them there. `step` is different: PyTorch keeps it on CPU on purpose (a CPU scalar costs no device
sync), and on the device only when the optimizer is `capturable` or `fused`.

**Fix**: two valid ones. (1) Move the model, build the optimizer, then load (see sgd_momentum): the
clean way, when you control the resume code. (2) When the optimizer is already loaded, move its
state with `fixes/optimizer_to.py` (shown here): every moment to its parameter's device, `step`
by PyTorch's rule. The 002 article's rescue loop moves `step` to the device too: training still
works, but every step reads `step` back to the host (a sync) unless the optimizer is capturable.
"""

from pathlib import Path

import torch

from samedevice import harness


def make_optimizer(params):
    return torch.optim.AdamW(params, lr=harness.LR, amsgrad=True)


def resume(path: Path, device: torch.device):
    model = harness.new_model()
    optimizer = make_optimizer(model.parameters())
    checkpoint = torch.load(path, weights_only=True)
    model.load_state_dict(checkpoint["model"])
    optimizer.load_state_dict(checkpoint["optimizer"])
    model.to(device)  # BUG: exp_avg, exp_avg_sq and max_exp_avg_sq stay on CPU
    return model, optimizer


def run(device: torch.device, workdir: Path) -> dict[str, torch.Tensor]:
    model, optimizer = resume(harness.write_checkpoint(workdir, make_optimizer), device)
    return harness.finish(model, optimizer, device)


def reference() -> dict[str, torch.Tensor]:
    return harness.reference(make_optimizer)
