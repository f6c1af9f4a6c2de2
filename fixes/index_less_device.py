"""A worker given device 1 that moves its batches with an index-less device: they land on device 0.

**Symptom** (at the first forward pass, on a host with two devices of a kind):
`RuntimeError: Expected all tensors to be on the same device, but got mat1 is on cuda:0, different from other tensors on cuda:1 (when checking argument in method wrapper_CUDA_addmm)`
On a host with one device of the kind (and on MPS, which has one) nothing is raised: the bug waits
for the first two-GPU machine.

**Cause**: a device without an index (`"cuda"`, `.cuda()`, `torch.device("cuda")`) means the
*current* device, which is 0 in every process until the process sets it. A worker (a DDP rank, one
process per GPU) that puts its model on its own device by full name, `cuda:1`, and its batches on
`"cuda"`, puts them on device 0.

**Fix**: pass the full device everywhere (`x.to(device)` with `device = torch.device("cuda", rank)`,
`device=x.device`); shown here. Or make the worker's device the current one once, at the start of
the process: `torch.accelerator.set_device_index(local_rank)` (`torch.cuda.set_device`): then
index-less names, and libraries that use them, mean the worker's device.
"""

from pathlib import Path

import torch

from samedevice import harness


def run(device: torch.device, workdir: Path) -> dict[str, torch.Tensor]:
    worker = harness.second_device(device)  # the device this worker was given: index 1 of the kind
    model = harness.new_model().to(worker)
    optimizer = harness.sgd(model.parameters())
    harness.train(model, optimizer, harness.batches(), worker)  # FIX: the full device, index included
    return harness.cpu_state(model)
