"""Model code that picks a device of its own (`"cuda" if available`, `.cuda()`): a CPU run on a GPU host fails.

**Symptom** (at the first forward pass, on a host that has an accelerator, with the model and data on the CPU):
`RuntimeError: Expected all tensors to be on the same device, but found at least two devices, cuda:0 and cpu!`
(a `device="cuda:1"` written into the code, on a run on `cuda:0`: `... cuda:0 and cuda:1!`)

**Cause**: the model makes a tensor during `forward` on the device the *host* has, picked by the code
itself (`torch.device("cuda" if torch.cuda.is_available() else "cpu")`, a module-level `DEVICE` constant,
`.cuda()` when CUDA is available, `device="cuda:0"` written in), not on the device of its input. The caller
chose another: the CPU for a test or an evaluation on a machine with a GPU, a second GPU, a model moved back
with `model.to("cpu")`. On a CPU-only machine (CPU CI) an availability pick is the CPU and all is well; on
the GPU the code was written on, the pick is that GPU and all is well too.

**Fix**: take the device from the input, as `factory_in_forward` does: `device=x.device` (shown), or
`x.new_ones(...)`. A library function that takes a `device=` defaulting to "cuda" (torchsummary's `summary`,
flex_attention's `create_block_mask`) is given the input's device.
"""

from pathlib import Path

import torch

from samedevice import harness


class ScaledNet(harness.TinyNet):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # FIX: the input's device, whatever the host has
        device = x.device
        return super().forward(x * torch.full((x.shape[-1],), 0.5, device=device))


def unavailable_reason(device: torch.device) -> str | None:
    with harness.as_on_a_host_of(device):
        picked = harness.current_accelerator()
    if device.type == "cpu" and picked.type != "cpu":
        return f"this host has {picked.type}, which the code picks for a CPU run too: not a CPU-only host"
    return None


def run(device: torch.device, workdir: Path) -> dict[str, torch.Tensor]:
    with harness.as_on_a_host_of(device):  # a host with device's accelerator (for cpu: a CPU-only host)
        model = harness.new_model(ScaledNet)  # a run on the CPU: a test, an evaluation on the CPU
        harness.train(model, harness.sgd(model.parameters()), harness.batches(), torch.device("cpu"))
        return harness.cpu_state(model)
