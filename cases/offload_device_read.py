"""Offloaded weights asked for "the model's device": a parameter says cpu, the model runs on the accelerator.

**Symptom** (where the model's output meets a tensor made on "the model's device", on any accelerator):
`RuntimeError: Expected all tensors to be on the same device, but found at least two devices, cuda:0 and cpu!`
(`Tensor on device meta is not on the expected device cuda:0!` where the offload keeps its weights on meta,
as accelerate's `cpu_offload` does).

**Cause**: with CPU offload (diffusers' `enable_model_cpu_offload`, accelerate's `cpu_offload`, a
hook of your own) the weights live on CPU between calls; a hook brings them, and the call's inputs,
to the execution device for each forward, and the output comes out there. Code that asks a parameter
where the model is (`next(model.parameters()).device`, a pipeline's `self.device`) is told `cpu`, and
the tensors it makes there (noise, masks, positions) meet the output on the accelerator.

**Fix**: ask where the model runs, not where its weights rest: the offload's execution device
(accelerate's `module._hf_hook.execution_device`, diffusers' `pipe._execution_device`), or the device
of the output the tensor meets (`noise = torch.randn_like(out)`, `device=out.device`).
"""

from pathlib import Path

import torch
from torch import nn

from samedevice import harness


def offload(model: nn.Module, execution_device: torch.device) -> nn.Module:
    """CPU offload, as accelerate's hooks do it: the weights rest on CPU; for each call they and the
    inputs go to the execution device, and the weights go back after."""
    def before(module: nn.Module, args: tuple) -> tuple:
        module.to(execution_device)
        return tuple(a.to(execution_device) for a in args)

    def after(module: nn.Module, args: tuple, output: torch.Tensor) -> torch.Tensor:
        module.to("cpu")
        return output

    model.register_forward_pre_hook(before)
    model.register_forward_hook(after)
    model.execution_device = execution_device
    return model


@torch.no_grad()
def run(device: torch.device, workdir: Path) -> dict[str, torch.Tensor]:
    """A few denoising steps of a sampler's loop with an offloaded model."""
    model = offload(harness.new_model(), device)
    where = next(model.parameters()).device  # BUG: a resting weight's device, cpu, not where the model runs
    g = torch.Generator().manual_seed(3)
    sample = torch.zeros(4, 2, device=where)
    for x, _ in harness.batches()[:3]:
        noise = torch.randn(4, 2, generator=g).to(where)
        sample = model(x) - 0.1 * noise + 0.5 * sample
    return {"sample": sample.cpu()}
