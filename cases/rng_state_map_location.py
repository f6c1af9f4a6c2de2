"""The saved RNG state moved to the device by `map_location`.

**Symptom** (at `torch.set_rng_state`, on any accelerator):
`TypeError: RNG state must be a torch.ByteTensor`

**Cause**: a checkpoint that resumes a run exactly holds the CPU generator's state,
`torch.get_rng_state()`: a CPU uint8 tensor. `torch.load(path, map_location=device)` moves every
tensor in the file, that one too, and a generator takes its state only from a CPU ByteTensor
(`check_rng_state`, ATen/core/Generator.h), so `torch.set_rng_state` refuses the moved copy. On a CPU-only runner
`map_location` names CPU and the resume works.

**Fix**: load the checkpoint on CPU (`map_location="cpu"`): `load_state_dict` copies the weights
into the device parameters and casts the optimizer state to them, and the RNG state stays where a
generator takes it. Or keep `map_location=device` and restore `checkpoint["rng"].cpu()`. A device
generator's state (`torch.cuda.get_rng_state()`) is a CPU ByteTensor too: the same rule holds for
its own `torch.cuda.set_rng_state`.
"""

from pathlib import Path

import torch

from samedevice import harness


def make_optimizer(params):
    return torch.optim.SGD(params, lr=harness.LR, momentum=0.9)


def write_checkpoint(workdir: Path) -> Path:
    """Train on CPU with augmentation noise; save the generator's state with the weights."""
    model = harness.new_model()
    optimizer = make_optimizer(model.parameters())
    harness.train(model, optimizer, harness.noisy(harness.batches()[: harness.STEPS_BEFORE]), torch.device("cpu"))
    path = Path(workdir) / "checkpoint.pt"
    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "rng": torch.get_rng_state()}, path)
    return path


def resume(path: Path, device: torch.device):
    model = harness.new_model().to(device)
    optimizer = make_optimizer(model.parameters())
    checkpoint = torch.load(path, map_location=device, weights_only=True)  # BUG: the RNG state moves too
    model.load_state_dict(checkpoint["model"])
    optimizer.load_state_dict(checkpoint["optimizer"])
    torch.set_rng_state(checkpoint["rng"])
    return model, optimizer


def run(device: torch.device, workdir: Path) -> dict[str, torch.Tensor]:
    model, optimizer = resume(write_checkpoint(workdir), device)
    return harness.finish(model, optimizer, device, harness.noisy(harness.batches()[harness.STEPS_BEFORE :]))


def reference() -> dict[str, torch.Tensor]:
    return harness.reference(make_optimizer, harness.noisy)
