"""A checkpoint saved on an accelerator, loaded on a host without one, with no `map_location`.

**Symptom** (in `torch.load`, on the CPU-only host):
`RuntimeError: Attempting to deserialize object on a CUDA device but torch.cuda.is_available() is False. If you are running on a CPU-only machine, please use torch.load with map_location=torch.device('cpu') to map your storages to the CPU.`

**Cause**: `torch.save` records, for every tensor, the device it was on ("cuda:0"), and
`torch.load` without `map_location` puts each one back there. The training ran on a GPU; the
resume (an evaluation box, a laptop, a CPU CI job) has none, and PyTorch's own check refuses. On
the host that trained, or any host with the device, the same code runs. A checkpoint saved on
CPU loads anywhere, which is why a CPU-only CI never sees it.

**Fix**: `map_location`, chosen by the host that loads: "cpu" here, or the device that host
picked for training; `load_state_dict` then copies into the parameters wherever they are. The
checkpoint helper (`fixes/checkpoint.py`) always loads with `map_location="cpu"`.
"""

from pathlib import Path

import torch

from samedevice import harness


def make_optimizer(params):
    return torch.optim.SGD(params, lr=harness.LR, momentum=0.9)


def resume(path: Path):
    model = harness.new_model()
    optimizer = make_optimizer(model.parameters())
    checkpoint = torch.load(path, map_location="cpu", weights_only=True)  # FIX: where this host wants it
    model.load_state_dict(checkpoint["model"])
    optimizer.load_state_dict(checkpoint["optimizer"])
    return model, optimizer


def run(device: torch.device, workdir: Path) -> dict[str, torch.Tensor]:
    path = harness.write_checkpoint(workdir, make_optimizer, device)  # trained and saved on `device`
    with harness.host_without(device):  # resumed on a host without that accelerator
        model, optimizer = resume(path)
        return harness.finish(model, optimizer, torch.device("cpu"))


def reference() -> dict[str, torch.Tensor]:
    return harness.reference(make_optimizer)
