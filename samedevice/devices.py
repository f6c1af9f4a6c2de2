"""Device discovery: which of cpu, the emulated accelerator and the real accelerators this host has.

The names and `parse` need no torch (the command line checks `--devices` before it loads torch);
every question about the host imports it."""

from __future__ import annotations

import os
import platform
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

KNOWN = ("cpu", "emulated", "cuda", "mps", "xpu")
ACCELERATORS = ("cuda", "mps", "xpu")


def _check_known(name: str) -> None:
    if name not in KNOWN:
        raise ValueError(f"unknown device {name!r}; valid names: {', '.join(KNOWN)}")


def unavailable_reason(name: str) -> str | None:
    """None when the device kind `name` works here, else one line saying why not."""
    _check_known(name)
    if name == "cpu":
        return None
    if name == "emulated":
        from samedevice import emulator

        return emulator.unavailable_reason()
    import torch

    backend = getattr(torch, name, None)
    if backend is None or not backend.is_available():
        return f"{name.upper()} is not available on this host"
    return None


def parse(value: str) -> list[str]:
    """Comma-separated device kinds ("cpu,emulated"), each one known; ValueError naming an unknown one,
    and for a value that names none (`--devices=` would otherwise read as the default matrix)."""
    names = [n.strip() for n in value.split(",") if n.strip()]
    if not names:
        raise ValueError(f"no device named in {value!r}; give one or more of {', '.join(KNOWN)}, comma-separated")
    for name in names:
        _check_known(name)
    return names


def describe(name: str) -> str:
    """What the device of kind `name` is, in words: the GPU's model, the CPU's architecture."""
    if name == "cpu":
        return f"CPU ({platform.machine() or 'unknown architecture'})"
    if name == "emulated":
        return "the emulated accelerator (CPU-backed)"
    if name == "mps":
        return "Apple GPU (MPS)"
    import torch

    backend = getattr(torch, name)
    return str(backend.get_device_name(0)) if hasattr(backend, "get_device_name") else name


def present() -> list[str]:
    """Every device kind that works here, cpu first."""
    return [name for name in KNOWN if unavailable_reason(name) is None]


def resolve(name: str) -> torch.device:
    """The torch.device for a device kind name (index 0)."""
    import torch

    from samedevice import emulator

    reason = unavailable_reason(name)
    if reason:
        raise RuntimeError(reason)
    if name == "emulated":
        return emulator.device(0)
    return torch.device(name, 0) if name != "cpu" else torch.device("cpu")


def count(name: str) -> int:
    """How many devices of the kind `name` this host can train on (0 where it has none)."""
    import torch

    from samedevice import emulator

    if unavailable_reason(name) is not None:
        return 0
    if name == "cpu":
        return 1
    module = torch.get_device_module(resolve(name))  # resolve registers the emulator on first use
    if name == "emulated":
        return emulator.trainable_device_count()
    return int(module.device_count())


def kind(dev: torch.device) -> str:
    """The device kind of a torch.device: 'cuda', 'emulated', ..."""
    return dev.type


def best() -> str:
    """The best device here: a real accelerator if there is one, else the emulated one."""
    forced = os.environ.get("SAMEDEVICE_DEVICE")
    if forced:
        return forced
    for name in (*ACCELERATORS, "emulated"):
        if unavailable_reason(name) is None:
            return name
    return "cpu"
