"""EMA weights kept in a plain dict of tensors, restored from a CPU checkpoint.

**Symptom** (at the first EMA update after the resume, on any accelerator):
`RuntimeError: Expected all tensors to be on the same device, but found at least two devices, cuda:0 and cpu!`

**Cause**: the exponential moving average of the weights lives in a dict of tensors. Nothing in
PyTorch knows about it: `model.to(device)` does not move it, `model.state_dict()` does not save
it, `load_state_dict` does not copy into it. The resume takes the dict straight from the
checkpoint, which was loaded on CPU, so the shadow weights are CPU tensors while the model is on
the device, and the in-place `lerp_` of a CPU tensor towards a device tensor raises. On a CPU-only
runner everything is on CPU and the run matches an uninterrupted one.

**Fix**: keep the EMA in a module (here a frozen copy of the model, as timm's `ModelEmaV2` does;
or `torch.optim.swa_utils.AveragedModel` with `get_ema_multi_avg_fn`): it moves with `.to`, saves
with `state_dict()` and `load_state_dict` copies into it on its device.
"""

import copy
from pathlib import Path

import torch

from samedevice import harness

DECAY = 0.9


def new_ema(model: torch.nn.Module):
    return copy.deepcopy(model.state_dict())  # BUG: a dict of tensors: nothing moves, saves or loads it


def shadow(ema) -> dict[str, torch.Tensor]:
    return ema  # BUG: the dict is all there is


@torch.no_grad()
def update_ema(ema, model: torch.nn.Module) -> None:
    for k, t in model.state_dict().items():
        shadow(ema)[k].lerp_(t, 1 - DECAY)


def train(model, optimizer, ema, data, device: torch.device) -> dict[str, torch.Tensor]:
    harness.train(model, optimizer, data, device, after_step=lambda: update_ema(ema, model))
    return {**harness.cpu_state(model), **{f"ema.{k}": v.cpu() for k, v in shadow(ema).items()}}


def resume(path: Path, device: torch.device):
    model = harness.new_model().to(device)
    optimizer = harness.sgd(model.parameters())
    ema = new_ema(model)
    checkpoint = torch.load(path, weights_only=True)
    model.load_state_dict(checkpoint["model"])
    optimizer.load_state_dict(checkpoint["optimizer"])
    ema = checkpoint["ema"]  # BUG: the CPU tensors of the file replace the device ones
    return model, optimizer, ema


def run(device: torch.device, workdir: Path) -> dict[str, torch.Tensor]:
    model = harness.new_model()
    optimizer, ema = harness.sgd(model.parameters()), new_ema(model)
    train(model, optimizer, ema, harness.batches()[: harness.STEPS_BEFORE], torch.device("cpu"))
    path = Path(workdir) / "checkpoint.pt"
    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "ema": shadow(ema)}, path)
    model, optimizer, ema = resume(path, device)
    return train(model, optimizer, ema, harness.batches()[harness.STEPS_BEFORE :], device)


def reference() -> dict[str, torch.Tensor]:
    model = harness.new_model()
    optimizer, ema = harness.sgd(model.parameters()), new_ema(model)
    return train(model, optimizer, ema, harness.batches(), torch.device("cpu"))
