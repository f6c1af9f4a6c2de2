"""Hugging Face Trainer and accelerate on the emulated device:

    from samedevice.integrations import hf
    hf.use_device("emulated")                     # before TrainingArguments / Accelerator: both run there
    trainer = Trainer(..., callbacks=hf.callbacks())   # the device's RNG state saved with each checkpoint
    accelerator.register_for_checkpointing(hf.RNGState())   # the same for accelerate's save_state

accelerate picks its device once per process, when its shared state (PartialState) is first made, from the
environment variable ACCELERATE_TORCH_DEVICE or else from the accelerators it knows (CUDA, MPS, XPU, NPU...),
never PrivateUse1. `use_device` sets that variable, after registering the emulator (before it,
`torch.device("emulated:0")` does not parse), and refuses in one line when the state already exists on another
device: the ordering trap made impossible to miss.

Trainer and accelerate save the RNG state of the devices they know with each checkpoint and restore it on
resume; not the emulated device's, so a resumed run with dropout would draw other masks than the
uninterrupted one, where on CUDA it repeats it. `callbacks()` (a TrainerCallback) and `RNGState` (for
`register_for_checkpointing`) save and restore it.

Not here: mixed precision. Trainer refuses `bf16=True` on a device it does not know, accelerate refuses
`mixed_precision="fp16"` and runs `"bf16"` without autocast (their device lists). Use a `torch.autocast`
loop, or Lightning (samedevice.integrations.lightning), for AMP on the emulated device.
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path
from typing import Any

import torch
from accelerate.state import AcceleratorState, PartialState
from transformers import TrainerCallback

from samedevice import emulator
from samedevice.errors import IntegrationError
from samedevice.integrations import check_version

check_version("transformers")
check_version("accelerate")
DEVICE_ENV = "ACCELERATE_TORCH_DEVICE"
RNG_FILE = "emulated_rng_state.pth"


def use_device(device: torch.device | str) -> torch.device:
    """Make accelerate (and so Trainer) run on `device` in this process: cpu, emulated[:N] or an accelerator."""
    device = torch.device(device)
    if device.type == emulator.NAME:
        device = emulator.device(0 if device.index is None else device.index)
    made = PartialState._shared_state.get("device")  # accelerate's one process-wide state
    if made is not None and made != device:
        raise IntegrationError(f"accelerate's state already runs on {made} in this process: call "
                               f"hf.use_device({str(device)!r}) before the first TrainingArguments or Accelerator "
                               "(or hf.reset() first)")
    _previous.setdefault(DEVICE_ENV, os.environ.get(DEVICE_ENV))  # what to give back at reset()
    os.environ[DEVICE_ENV] = str(device)
    return device


_previous: dict[str, str | None] = {}


def reset() -> None:
    """Forget accelerate's process-wide state and the device use_device chose (the variable it set goes back to
    what it was), so the next one is made afresh."""
    AcceleratorState._reset_state(reset_partial_state=True)
    if DEVICE_ENV in _previous:
        before = _previous.pop(DEVICE_ENV)
        if before is None:
            os.environ.pop(DEVICE_ENV, None)
        else:
            os.environ[DEVICE_ENV] = before


class RNGState:
    """The emulated devices' RNG states as a Stateful object, for accelerate's register_for_checkpointing."""

    def state_dict(self) -> dict[str, Any]:
        return {"states": torch.emulated.get_rng_state_all()}  # type: ignore[attr-defined]

    def load_state_dict(self, state: dict[str, Any]) -> None:
        torch.emulated.set_rng_state_all([s.cpu() for s in state["states"]])  # type: ignore[attr-defined]


class EmulatedRNGCallback(TrainerCallback):
    """Saves the emulated devices' RNG states in each checkpoint folder, and restores them when Trainer resumes
    from one, as Trainer does for the devices it knows (its _save_rng_state / _load_rng_state). A callback is
    not told where a resume comes from: Trainer's own layout, `<output_dir>/checkpoint-<step>`, is assumed
    unless `resume_from` names the folder."""

    def __init__(self, resume_from: str | Path | None = None) -> None:
        self.resume_from = resume_from

    def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        folder = Path(args.output_dir) / f"checkpoint-{state.global_step}"
        torch.save(RNGState().state_dict(), folder / RNG_FILE)

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if not state.global_step:  # a fresh run; a resumed one starts at its checkpoint's step
            return
        folder = Path(self.resume_from or Path(args.output_dir) / f"checkpoint-{state.global_step}")
        if not (folder / RNG_FILE).exists():
            warnings.warn(f"samedevice: no {RNG_FILE} in {folder}: the resumed run draws other random numbers on "
                          f"the emulated device than the uninterrupted run (pass hf.callbacks(resume_from=...) "
                          "for a checkpoint outside output_dir)", stacklevel=2)
            return
        RNGState().load_state_dict(torch.load(folder / RNG_FILE, weights_only=True))


def callbacks(resume_from: str | Path | None = None) -> list[TrainerCallback]:
    """The callbacks a Trainer on the emulated device needs: its RNG state saved and restored."""
    return [EmulatedRNGCallback(resume_from)]
