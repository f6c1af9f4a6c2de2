"""`load_state_dict(..., assign=True)` puts the checkpoint's CPU tensors in the model.

**Symptom** (at the first forward pass after the resume, on any accelerator):
`RuntimeError: Expected all tensors to be on the same device, but got mat1 is on cuda:0, different from other tensors on cpu (when checking argument in method wrapper_CUDA_addmm)`

**Cause**: `assign=True` does not copy the loaded values into the model's parameters: it makes
new Parameters out of the loaded tensors, which keep their device. The model was moved first, the
checkpoint was loaded on CPU, so every parameter is back on CPU, silently. And the optimizer, built
before the load, still holds the old Parameters: on a CPU-only runner nothing raises, but every
step updates tensors the model no longer uses, and the model never trains.

**Fix**: drop `assign=True`: the default copies the values into the existing parameters, on their
device, and the optimizer keeps pointing at them. `assign=True` is for a model built on the meta
device (no memory to copy into); then load with `map_location=device` and build the optimizer after
the load, from the final Parameters.
"""

from pathlib import Path

import torch

from samedevice import harness


def make_optimizer(params):
    return torch.optim.SGD(params, lr=harness.LR, momentum=0.9)


def resume(path: Path, device: torch.device):
    model = harness.new_model().to(device)
    optimizer = make_optimizer(model.parameters())
    checkpoint = torch.load(path, weights_only=True)
    model.load_state_dict(checkpoint["model"])  # FIX: copied into the parameters, on their device
    optimizer.load_state_dict(checkpoint["optimizer"])
    return model, optimizer


def run(device: torch.device, workdir: Path) -> dict[str, torch.Tensor]:
    model, optimizer = resume(harness.write_checkpoint(workdir, make_optimizer), device)
    return harness.finish(model, optimizer, device)


def reference() -> dict[str, torch.Tensor]:
    return harness.reference(make_optimizer)
