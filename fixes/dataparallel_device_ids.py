"""`nn.DataParallel` of a module that is not on `device_ids[0]`: still on CPU, or on another device.

**Symptom** (at the first forward, on a host with two devices of a kind):
`RuntimeError: module must have its parameters and buffers on device cuda:0 (device_ids[0]) but found one of them on device: cpu`

**Cause**: DataParallel keeps the module where it is and copies it to every device in `device_ids` at
each forward, from `device_ids[0]`, which it calls the source device; it refuses a module that is not
there. (Given one device id, it moves the module there itself, so the bug waits for two GPUs.) On a
machine without an accelerator DataParallel wraps nothing, so the same script runs on CPU.

**Fix**: move the module to `device_ids[0]` first: `model.to(f"cuda:{device_ids[0]}")`, then wrap. (Or
use DistributedDataParallel, one process per device, which PyTorch recommends over DataParallel.)
"""

from pathlib import Path

import torch
from torch._utils import _get_available_device_type

from samedevice import devices, harness


def unavailable_reason(device: torch.device) -> str | None:
    with harness.as_on_a_host_of(device):
        found = _get_available_device_type()  # what DataParallel asks for its devices
    if device.type == "cpu" and found is not None:
        return f"this host has {found}, which DataParallel takes for a CPU run too: not a CPU-only host"
    if device.type != "cpu" and devices.count(device.type) < 2:
        return f"device_ids=[0, 1] needs two {device.type} devices; this host has {devices.count(device.type)}"
    return None


def fix_unavailable_reason(device: torch.device) -> str | None:
    if device.type not in ("cpu", "cuda"):
        return (f"DataParallel's scatter and gather are CUDA's own C++ (torch._C._scatter, _gather, "
                f"_broadcast_coalesced): no other device, {device.type} included, can run the wrapped module")
    return None


def run(device: torch.device, workdir: Path) -> dict[str, torch.Tensor]:
    source = device if device.type == "cpu" else torch.device(device.type, 0)  # device_ids[0]
    with harness.as_on_a_host_of(device):
        model = harness.new_model().to(source)  # FIX: on device_ids[0] before the wrap
        parallel = torch.nn.DataParallel(model, device_ids=[0, 1])
        optimizer = harness.sgd(parallel.parameters())
        harness.train(parallel, optimizer, harness.batches(), source)
    return harness.cpu_state(model)
