"""The model is never moved to the device: the batches are, its weights stay on CPU.

**Symptom** (at the model's first layer, on any accelerator):
`RuntimeError: Expected all tensors to be on the same device, but got mat1 is on cuda:0, different from other tensors on cpu (when checking argument in method wrapper_CUDA_addmm)`
(an embedding first: `... but got index is on cuda:0, different from other tensors on cpu (when checking argument in method wrapper_CUDA__index_select)`;
a convolution first: `Input type (torch.cuda.FloatTensor) and weight type (torch.FloatTensor) should be the same`).

**Cause**: the training loop moves every batch with `x.to(device)`, and nothing moves the model:
its parameters stay where they were made, on CPU. A resume makes it easy to miss: the checkpoint is
read with `map_location="cpu"` (rightly, so that any host can read it), `load_state_dict` copies the
weights into a model built on CPU, and the `model.to(device)` of the first run was never written
into the resume path. On CPU the batches are on CPU too, and nothing shows.

**Fix**: `model.to(device)` once, right after the model is built (or loaded), before the optimizer
is built from its parameters and before `DistributedDataParallel` wraps it.
"""

from pathlib import Path

import torch

from samedevice import harness


def make_optimizer(params):
    return torch.optim.SGD(params, lr=harness.LR, momentum=0.9)


def resume(path: Path, device: torch.device):
    model = harness.new_model()  # BUG: built on CPU and never moved to the device
    optimizer = make_optimizer(model.parameters())
    checkpoint = torch.load(path, map_location="cpu", weights_only=True)
    model.load_state_dict(checkpoint["model"])
    optimizer.load_state_dict(checkpoint["optimizer"])
    return model, optimizer


def run(device: torch.device, workdir: Path) -> dict[str, torch.Tensor]:
    """The first run trained on the device and saved there; the resume trains on batches it moves."""
    path = harness.write_checkpoint(workdir, make_optimizer, device)
    model, optimizer = resume(path, device)
    return harness.finish(model, optimizer, device)


def reference() -> dict[str, torch.Tensor]:
    return harness.reference(make_optimizer)
