"""Two ranks resume without `map_location`: every rank's checkpoint lands on device 0.

**Symptom** (in `torch.load` on rank 1, when device 0 has no room for a second copy):
`torch.OutOfMemoryError: CUDA out of memory. Tried to allocate ...`

**Cause**: rank 0 saved the checkpoint while training on cuda:0, so the file records "cuda:0" for
every tensor, and `torch.load` without `map_location` puts them back there, on every rank. Rank
1's model is on cuda:1 and `load_state_dict` copies across devices, so nothing complains: device 0
simply holds every rank's copy of the checkpoint (and, on CUDA, every rank's context). On a
device 0 that rank 0's own training fills, the load fails. With `load_state_dict(...,
assign=True)` rank 1's parameters would move to cuda:0 instead: a cuda:1/cuda:0 mismatch at the
forward. On CPU every rank is on the same device and nothing shows.

**Fix**: give each rank its own mapping, `map_location={"cuda:0": f"cuda:{rank}"}` (PyTorch's DDP
tutorial), or `map_location="cpu"` and let `load_state_dict` copy to the rank's device.
"""

from pathlib import Path

import torch
from torch.nn.parallel import DistributedDataParallel

from samedevice import harness, ranks

WORLD_SIZE = 2


def make_optimizer(params):
    return torch.optim.SGD(params, lr=harness.LR, momentum=0.9)


def train(rank: int, world_size: int, device: torch.device, workdir: Path) -> dict[str, torch.Tensor]:
    """One rank of the resumed run: every rank trains on the same batches, so the run equals one process's."""
    model = harness.new_model().to(device)
    optimizer = make_optimizer(model.parameters())
    with ranks.own_device_only(device, world_size):  # the other ranks' devices are full
        checkpoint = torch.load(workdir / "checkpoint.pt", weights_only=True)  # BUG: lands on device 0, where rank 0 saved it
        model.load_state_dict(checkpoint["model"])
        optimizer.load_state_dict(checkpoint["optimizer"])
        harness.train(DistributedDataParallel(model), optimizer, harness.batches()[harness.STEPS_BEFORE :], device)
    return harness.cpu_state(model)


def unavailable_reason(device: torch.device) -> str | None:
    return ranks.unavailable_reason(device.type, WORLD_SIZE)


def run(device: torch.device, workdir: Path) -> dict[str, torch.Tensor]:
    """Rank 0 trains on device 0 and saves; then WORLD_SIZE ranks resume. Returns rank 1's parameters."""
    harness.write_checkpoint(workdir, make_optimizer, ranks.device_of(device.type, 0))
    return ranks.launch(f"{__name__}:train", WORLD_SIZE, device.type, workdir)[1]


def reference() -> dict[str, torch.Tensor]:
    return harness.reference(make_optimizer)
