"""A CPU tensor given to a process group whose backend serves only the accelerator (NCCL).

**Symptom** (at the collective, on CUDA and the emulated device):
`RuntimeError: No backend type associated with device type cpu`
(older PyTorch: `RuntimeError: Tensors must be CUDA and dense`).

**Cause**: `init_process_group("nccl")` makes a group with one backend, NCCL, which moves CUDA tensors
only. A tensor made on the CPU for a metric or a log line (`torch.tensor(losses)`, a count, a value
gathered with `.item()`) has no backend to go to. A CPU run picks gloo, which serves CPU tensors, and
the same code passes there.

**Fix**: make the tensor on the rank's device (`torch.tensor(losses, device=device)`), as here. Or give
the group a backend for CPU tensors too, `init_process_group("cpu:gloo,cuda:nccl")`, or keep a
second, gloo group for CPU-side collectives (`dist.new_group(backend="gloo")`).
"""

from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F

from samedevice import harness

BACKENDS = {"cpu": "gloo", "cuda": "nccl", "xpu": "xccl", "emulated": "eccl"}  # as training scripts pick it


def unavailable_reason(device: torch.device) -> str | None:
    return None if device.type in BACKENDS else f"no process-group backend serves {device.type} tensors"


def run(device: torch.device, workdir: Path) -> dict[str, torch.Tensor]:
    """One rank (the refusal does not depend on how many there are) trains, then averages its losses."""
    dist.init_process_group(BACKENDS[device.type], init_method=(Path(workdir) / "rendezvous").as_uri(),
                            rank=0, world_size=1)
    try:
        model = harness.new_model().to(device)
        optimizer = harness.sgd(model.parameters())
        losses = []
        for x, y in harness.batches():
            loss = F.mse_loss(model(x.to(device)), y.to(device))
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
        mean = torch.tensor(losses, device=device)  # FIX: on the rank's device, where the backend serves it
        dist.all_reduce(mean)
        return {**harness.cpu_state(model), "mean_loss": (mean / dist.get_world_size()).cpu()}
    finally:
        dist.destroy_process_group()
