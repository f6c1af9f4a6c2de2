"""A module exported (or traced) on CPU, run on the device: `device=x.device` was recorded as `cpu`.

**Symptom** (its first call on the device, on any accelerator):
`RuntimeError: Expected all tensors to be on the same device, but found at least two devices, cuda:0 and cpu!`
(a `torch.jit.trace`d one says it inside `The following operation failed in the TorchScript interpreter.`)

**Cause**: `torch.export` (and `torch.jit.trace` before it) runs the code once on an example and
records the ops it ran with the values they got: `device=x.device` was `cpu` then, so the graph makes
its tensor on `cpu` every time, whatever device its inputs are on later; nothing warns. A model or a
post-processing step exported on a CPU machine and run on a GPU fails at its first call there.

**Fix**: retarget the program's devices: `torch.export.passes.move_to_device_pass(exported, device)`
rewrites every recorded device (a `torch.jit.trace`d module: trace it on the device it will run on,
or `torch.jit.script` it, which keeps `x.device` a run-time value).
"""

from pathlib import Path

import torch
import torch.export.passes
import torch.nn.functional as F
from torch import nn

from samedevice import harness


class WithPositions(nn.Module):
    """Post-processing: each output column gets its position added, a tensor made where the output is."""

    def forward(self, out: torch.Tensor) -> torch.Tensor:
        return out + torch.arange(out.shape[-1], device=out.device, dtype=out.dtype)


def run(device: torch.device, workdir: Path) -> dict[str, torch.Tensor]:
    exported = torch.export.export(WithPositions(), (torch.zeros(4, 2),))  # made on a CPU machine
    post = exported.module()  # BUG: its arange still says device=cpu
    model = harness.new_model().to(device)
    optimizer = harness.sgd(model.parameters())
    harness.train(model, optimizer, harness.batches(), device, loss_fn=lambda out, y: F.mse_loss(post(out), y))
    return harness.cpu_state(model)
