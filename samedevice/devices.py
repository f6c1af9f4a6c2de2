"""Device discovery: which of cpu, the emulated accelerator and the real accelerators this host has."""

from __future__ import annotations

import os
import platform

import torch

from samedevice import emulator

KNOWN = ("cpu", "emulated", "cuda", "mps", "xpu")
ACCELERATORS = ("cuda", "mps", "xpu")


def unavailable_reason(name: str) -> str | None:
    """None when the device kind `name` works here, else one line saying why not."""
    if name not in KNOWN:
        raise ValueError(f"unknown device {name!r}; valid names: {', '.join(KNOWN)}")
    if name == "cpu":
        return None
    if name == "emulated":
        return emulator.unavailable_reason()
    backend = getattr(torch, name, None)
    if backend is None or not backend.is_available():
        return f"{name.upper()} is not available on this host"
    return None


def parse(value: str) -> list[str]:
    """Comma-separated device kinds ("cpu,emulated"), each one known; ValueError naming an unknown one."""
    names = [n.strip() for n in value.split(",") if n.strip()]
    for name in names:
        if name not in KNOWN:
            raise ValueError(f"unknown device {name!r}; valid names: {', '.join(KNOWN)}")
    return names


def describe(name: str) -> str:
    """What the device of kind `name` is, in words: the GPU's model, the CPU's architecture."""
    if name == "cpu":
        return f"CPU ({platform.machine() or 'unknown architecture'})"
    if name == "emulated":
        return "the emulated accelerator (CPU-backed)"
    if name == "mps":
        return "Apple GPU (MPS)"
    backend = getattr(torch, name)
    return str(backend.get_device_name(0)) if hasattr(backend, "get_device_name") else name


def present() -> list[str]:
    """Every device kind that works here, cpu first."""
    return [name for name in KNOWN if unavailable_reason(name) is None]


def resolve(name: str) -> torch.device:
    """The torch.device for a device kind name (index 0)."""
    reason = unavailable_reason(name)
    if reason:
        raise RuntimeError(reason)
    if name == "emulated":
        return emulator.device(0)
    return torch.device(name, 0) if name != "cpu" else torch.device("cpu")


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
