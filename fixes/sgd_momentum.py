"""SGD momentum buffers left on CPU after a resume.

**Symptom** (at `optimizer.step()`, on any accelerator):
`RuntimeError: Expected all tensors to be on the same device, but found at least two devices, cuda:0 and cpu!`

**Cause**: `optimizer.load_state_dict` casts each loaded state tensor to the device of its parameter
*at the time of loading*. Loading while the model is still on CPU puts every `momentum_buffer` on
CPU; `model.to(device)` then moves the parameters but not the optimizer state (an optimizer has no
`.to`). The first step mixes CUDA parameters with CPU buffers. On a CPU-only runner nothing fails.

**Fix**: move the model first, build the optimizer on the moved parameters, then load the optimizer
state (it follows the parameters). For an optimizer that is already loaded: `fixes/optimizer_to.py`.
"""

from pathlib import Path

import torch

from samedevice import harness


def make_optimizer(params):
    return torch.optim.SGD(params, lr=harness.LR, momentum=0.9)


def resume(path: Path, device: torch.device):
    model = harness.new_model().to(device)  # FIX: move the model before the optimizer sees it
    optimizer = make_optimizer(model.parameters())
    checkpoint = torch.load(path, weights_only=True)
    model.load_state_dict(checkpoint["model"])
    optimizer.load_state_dict(checkpoint["optimizer"])  # FIX: state is cast to the moved params
    return model, optimizer


def run(device: torch.device, workdir: Path) -> dict[str, torch.Tensor]:
    model, optimizer = resume(harness.write_checkpoint(workdir, make_optimizer), device)
    return harness.finish(model, optimizer, device)


def reference() -> dict[str, torch.Tensor]:
    return harness.reference(make_optimizer)
