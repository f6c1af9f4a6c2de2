"""The RNG states of every device, saved on a host with more devices than the one that resumes.

**Symptom** (at `set_rng_state_all`, on the host with fewer devices):
`IndexError: tuple index out of range`

**Cause**: a run that resumes exactly saves every generator's state, each device's too:
`torch.cuda.get_rng_state_all()` (as Hugging Face's Trainer and many training scripts do) is a list with one
state per device of the host that saved. `torch.cuda.set_rng_state_all(states)` puts state i on device i, by
`torch.cuda.default_generators[i]`: a tuple of one generator per device of the host that resumes. A checkpoint
from an 8-GPU node resumed on a 4-GPU one, or behind a `CUDA_VISIBLE_DEVICES` that shows fewer, asks for a
generator that is not there, and all Python's tuple says is "index out of range". The devices it did have
got their states first. On CPU no device states are saved, and a host with the devices of the one that saved
resumes: neither shows it.

**Fix**: restore the states of the devices this host has, each onto its own (shown). Better still, a process
that trains on one device saves and restores that device's state alone, `get_rng_state(device)` and
`set_rng_state(state, device)`: a resume on any number of devices has it.
"""

from pathlib import Path

import torch

from samedevice import harness


def make_optimizer(params):
    return torch.optim.SGD(params, lr=harness.LR, momentum=0.9)


def write_checkpoint(workdir: Path, device: torch.device) -> Path:
    """Train on the device with augmentation noise; save every generator's state with the weights."""
    model = harness.new_model().to(device)
    optimizer = make_optimizer(model.parameters())
    harness.train(model, optimizer, harness.noisy(harness.batches()[: harness.STEPS_BEFORE]), device)
    rng = {"cpu": torch.get_rng_state()}
    if device.type != "cpu":
        rng["device"] = torch.get_device_module(device).get_rng_state_all()  # one state per device of this host
    path = Path(workdir) / "checkpoint.pt"
    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "rng": rng}, path)
    return path


def resume(path: Path, device: torch.device):
    model = harness.new_model().to(device)
    optimizer = make_optimizer(model.parameters())
    checkpoint = torch.load(path, map_location="cpu", weights_only=True)
    model.load_state_dict(checkpoint["model"])
    optimizer.load_state_dict(checkpoint["optimizer"])
    torch.set_rng_state(checkpoint["rng"]["cpu"])
    if "device" in checkpoint["rng"]:
        module = torch.get_device_module(device)
        module.set_rng_state_all(checkpoint["rng"]["device"])  # BUG: one per device of the host that saved
    return model, optimizer


def unavailable_reason(device: torch.device) -> str | None:
    if device.type != "cpu" and not hasattr(torch.get_device_module(device), "get_rng_state_all"):
        return f"torch.{device.type} has one generator and no get_rng_state_all: a state per device is CUDA's API"
    return None


def run(device: torch.device, workdir: Path) -> dict[str, torch.Tensor]:
    path = write_checkpoint(workdir, device)  # on a host with all its devices (the emulator has two)
    with harness.host_with_one_device(device):  # resumed on a host with one
        model, optimizer = resume(path, device)
        return harness.finish(model, optimizer, device, harness.noisy(harness.batches()[harness.STEPS_BEFORE :]))


def reference() -> dict[str, torch.Tensor]:
    return harness.reference(make_optimizer, harness.noisy)
