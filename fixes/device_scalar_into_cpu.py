"""A running total kept as a CPU tensor, the device's loss added into it: the scalar exemption runs one way.

**Symptom** (at the first step's bookkeeping, on any accelerator):
`RuntimeError: Expected all tensors to be on the same device, but found at least two devices, cuda:0 and cpu!`

**Cause**: a 0-dim CPU tensor may join an elementwise op on the device (arithmetic, comparisons): CUDA's
kernels take it as a scalar, by value (`x_on_gpu * torch.tensor(2.0)` runs). The other way round there is no
exemption: a 0-dim *device* tensor is an ordinary device tensor, and reading its value would take a copy from the
device. The loss is one. So `total = torch.zeros(())` and then `total += loss.detach()` fails on the device: the
op writes into the CPU tensor, which no exemption covers. So does a CPU tensor of one or more dimensions met by a
device scalar (`history * loss`, a best score restored with `map_location="cpu"` as `tensor([0.31])` compared
with today's), out of place too. On CPU every tensor is the CPU's: a CPU-only CI never sees it.

**Fix**: take the number out of the device for bookkeeping: `total += loss.item()` (shown). Or keep the total
on the device (`torch.zeros((), device=device)`) and read it once at the end of the epoch, which spares a
wait for the device at every step.
"""

from pathlib import Path

import torch
import torch.nn.functional as F

from samedevice import harness


def run(device: torch.device, workdir: Path) -> dict[str, torch.Tensor]:
    model = harness.new_model().to(device)
    optimizer = harness.sgd(model.parameters())
    total = torch.zeros(())  # the loss summed over the epoch, for the log: a CPU tensor
    for x, y in harness.batches():
        optimizer.zero_grad()
        loss = F.mse_loss(model(x.to(device)), y.to(device))
        loss.backward()
        optimizer.step()
        total += loss.item()  # FIX: a Python number, which any tensor takes
    return {**harness.cpu_state(model), "total": total}
