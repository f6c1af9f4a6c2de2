"""A noise schedule kept as a plain CPU tensor, indexed by timesteps on the device.

**Symptom** (at the first forward pass, on any accelerator):
`RuntimeError: indices should be either on cpu or on the same device as the indexed tensor (cpu)`
The same on CUDA, word for word: the message names the table's device, not the timesteps'. Where
the timesteps are made on CPU instead, the lookup succeeds and the next multiplication raises
`Expected all tensors to be on the same device, but found at least two devices, cuda:0 and cpu!`.

**Cause**: diffusion models precompute their schedule (`betas`, `alphas_cumprod`) once and look it up
per sample: `self.alphas_cumprod[t]`. Assigned as a plain attribute, the table is neither parameter
nor buffer, so `model.to(device)` leaves it on CPU. A CPU tensor may be indexed by CPU indices only,
and a device tensor by CPU or device indices: device timesteps into a CPU table break.
(A Python-int lookup, `self.alphas_cumprod[i]` in a sampling loop, gives a 0-dim CPU tensor, which
the device accepts as a scalar: sampling works, training breaks.)

**Fix**: `self.register_buffer("alphas_cumprod", table, persistent=False)`: `.to` moves it, and
checkpoints need not carry a value derived from the config. Or index on the table's device and move
the result: `self.alphas_cumprod[t.cpu()].to(t.device)` (a copy per step).
"""

from pathlib import Path

import torch
from torch import nn

from samedevice import harness

STEPS = 10


class ScheduledNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = harness.new_model()
        alphas_cumprod = torch.cumprod(1 - torch.linspace(1e-4, 0.2, STEPS), dim=0)
        self.register_buffer("alphas_cumprod", alphas_cumprod, persistent=False)  # FIX: a buffer: .to moves it

    def forward(self, x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        a = self.alphas_cumprod[t].unsqueeze(1)
        return self.net(a.sqrt() * x)


def run(device: torch.device, workdir: Path) -> dict[str, torch.Tensor]:
    model = ScheduledNet().to(device)
    harness.train(model, harness.sgd(model.parameters()), harness.timestep_batches(STEPS), device)
    return harness.cpu_state(model)
