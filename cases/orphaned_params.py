"""The optimizer built before the model's Parameters are replaced: it trains orphans.

**Symptom**: none. No error on any device; the loss simply stops improving after the resume. Only
a comparison with an uninterrupted run (resume equivalence) shows that the model never trains.

**Cause**: an optimizer holds the Parameter *objects* it was given. Code that replaces them after
the optimizer exists (`load_state_dict(..., assign=True)`, which wraps each loaded tensor in a new
Parameter; on CUDA also `module.to_empty(device=...)` on a meta-device model) leaves the optimizer
holding the old ones. `backward` fills the new Parameters' `.grad`; `step` updates the old ones,
which the model no longer uses. The devices agree (`map_location=device`), so nothing raises.

**Fix**: build the optimizer after the final Parameters exist, then load its state. A check that
catches it: every Parameter of the model is in `optimizer.param_groups`, compared by identity.
"""

from pathlib import Path

import torch

from samedevice import harness


def make_optimizer(params):
    return torch.optim.SGD(params, lr=harness.LR, momentum=0.9)


def resume(path: Path, device: torch.device):
    model = harness.new_model().to(device)
    optimizer = make_optimizer(model.parameters())  # BUG: holds the Parameters that assign=True replaces
    checkpoint = torch.load(path, map_location=device, weights_only=True)
    model.load_state_dict(checkpoint["model"], assign=True)
    optimizer.load_state_dict(checkpoint["optimizer"])
    return model, optimizer


def resume_meta_init(path: Path, device: torch.device):
    """The other way to replace them: a model built on the meta device, then `to_empty`."""
    with torch.device("meta"):
        model = harness.TinyNet()
    optimizer = make_optimizer(model.parameters())  # BUG: holds the meta Parameters that to_empty replaces
    model.to_empty(device=device)
    checkpoint = torch.load(path, map_location=device, weights_only=True)
    model.load_state_dict(checkpoint["model"])
    optimizer.load_state_dict(checkpoint["optimizer"])
    return model, optimizer


def run(device: torch.device, workdir: Path, resume=resume) -> dict[str, torch.Tensor]:
    model, optimizer = resume(harness.write_checkpoint(workdir, make_optimizer), device)
    return harness.finish(model, optimizer, device)


def reference() -> dict[str, torch.Tensor]:
    return harness.reference(make_optimizer)
