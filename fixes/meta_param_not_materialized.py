"""A model built on meta (no memory) and loaded without `assign=True`: its weights never get data.

**Symptom** (at the first layer, on every device, CPU included):
`RuntimeError: Tensor on device meta is not on the expected device cuda:0!` (`... device cpu!` on CPU),
after PyTorch's warning at the load: `for fc1.weight: copying from a non-meta parameter in the checkpoint
to a meta parameter in the current model, which is a no-op. (Did you mean to pass assign=True ...?)`

**Cause**: `with torch.device("meta"):` builds a model without memory for its weights (quick to build,
as `init_empty_weights` and `low_cpu_mem_usage` do). `load_state_dict` copies the saved values into
the parameters that exist, and a copy into a meta tensor keeps nothing: the parameters stay on meta,
and so does the optimizer state loaded for them. The first layer meets the input on a real device.

**Fix**: let the load put the saved tensors in place of the meta ones: `load_state_dict(state,
assign=True)`, with the state read onto the device (`map_location=device`), and build the optimizer
after, from the parameters that now exist. Or give the model memory first, `model.to_empty(device=device)`,
then load as usual (a buffer the checkpoint lacks is then garbage: recompute it).
"""

from pathlib import Path

import torch

from samedevice import harness


def make_optimizer(params):
    return torch.optim.SGD(params, lr=harness.LR, momentum=0.9)


def resume(path: Path, device: torch.device):
    with torch.device("meta"):
        model = harness.TinyNet()  # no memory for the weights yet
    checkpoint = torch.load(path, map_location=device, weights_only=True)
    model.load_state_dict(checkpoint["model"], assign=True)  # FIX: the loaded tensors become the parameters
    optimizer = make_optimizer(model.parameters())
    optimizer.load_state_dict(checkpoint["optimizer"])
    return model, optimizer


def run(device: torch.device, workdir: Path) -> dict[str, torch.Tensor]:
    path = harness.write_checkpoint(workdir, make_optimizer, device)
    model, optimizer = resume(path, device)
    return harness.finish(model, optimizer, device)


def reference() -> dict[str, torch.Tensor]:
    return harness.reference(make_optimizer)
