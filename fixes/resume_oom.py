"""The checkpoint loaded straight onto the device, beside the model: a second copy of the weights.

**Symptom** (in `torch.load`, on a device with little memory to spare):
`torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 16.00 MiB. ...`

**Cause**: the checkpoint was saved during training on the device, so `torch.load` without
`map_location` restores every tensor to the device it was saved from. The model is already there:
the loaded weights are a second full copy, and `load_state_dict` copies them in without freeing
them; they live as long as `checkpoint` does (a training script keeps it to read its epoch and
step). Peak device memory is the model plus the checkpoint. Fine-tuning a frozen backbone, whose
training needs little beyond the weights, hits this first: the resume needs twice what the
training does. A CPU-only runner never sees it.

**Fix**: `torch.load(path, map_location="cpu", mmap=True)`: the file is mapped, not read into
memory, and `load_state_dict` copies each tensor into the parameters where they are; the
optimizer's `load_state_dict` moves its state to the parameters' device. Or the checkpoint helper
(`fixes/checkpoint.py`), which loads this way.
"""

from pathlib import Path

import torch

from samedevice import harness

FREE = 24 * 2**20  # the device memory this run has to itself: the fine-tuning needs 16 MiB


def make_optimizer(params):
    return torch.optim.SGD(params, lr=harness.LR, momentum=0.9)


def run(device: torch.device, workdir: Path) -> dict[str, torch.Tensor]:
    path = harness.write_checkpoint(workdir, make_optimizer, device, harness.FineTuneNet)
    with harness.memory_budget(device, FREE):
        model = harness.new_model(harness.FineTuneNet).to(device)
        optimizer = make_optimizer(model.parameters())
        checkpoint = torch.load(path, map_location="cpu", mmap=True, weights_only=True)  # FIX: mapped, copied in place
        model.load_state_dict(checkpoint["model"])
        optimizer.load_state_dict(checkpoint["optimizer"])
        return harness.finish(model, optimizer, device)


def reference() -> dict[str, torch.Tensor]:
    return harness.reference(make_optimizer, net=harness.FineTuneNet)
