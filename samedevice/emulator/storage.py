"""3c. Storages and addresses: `untyped_storage()` and `data_ptr()` of a device tensor.

A wrapper subclass gets a storage of its own with no memory behind it (data_ptr 0, and every copy out
of it fails), so views would not share one and tied-weight checks (safetensors' shared-tensor
detection, dedup by address) would go wrong. Each CPU storage behind device tensors gets one device
storage instead: an emulated:N storage over the same memory (torch._C._construct_storage_from_data_pointer,
which does not own it) that keeps the CPU storage alive. Every device tensor whose data lives in that
CPU storage, views and reloads included, answers with it, so addresses are the host memory's: distinct,
non-zero, `view.data_ptr() - base.data_ptr() == offset * itemsize`, as on CUDA.

The memory is reached only through the CPU storage (`host`), never through the device storage's
pointer: a storage that outlives a resize of its tensor still reads the current memory."""

from __future__ import annotations

import weakref
from typing import Any

import torch

from samedevice.emulator.registration import NAME

_HOST = "_samedevice_host"  # on a device storage: the CPU storage it stands for
_DEVICE = "_samedevice_device_storage"  # on a CPU storage: a weak reference to its device storage


def device_storage(cpu: torch.UntypedStorage, index: int) -> torch.UntypedStorage:
    """The one emulated:`index` storage over `cpu`'s memory (made on first use)."""
    ref = getattr(cpu, _DEVICE, None)
    found = ref() if ref is not None else None
    if found is not None and (found.device.index, found.data_ptr(), found.nbytes()) == (index, cpu.data_ptr(),
                                                                                         cpu.nbytes()):
        return found  # the same memory: a resize_ that reallocated gets a new device storage
    made: Any = torch._C._construct_storage_from_data_pointer(cpu.data_ptr(), torch.device(NAME, index), cpu.nbytes())
    setattr(made, _HOST, cpu)
    setattr(cpu, _DEVICE, weakref.ref(made))
    return made


def host(storage: Any) -> Any:
    """The CPU storage behind an emulated storage; any other storage as it is. An emulated storage the
    emulator did not make has no memory: refuse it clearly."""
    if storage.device.type != NAME or not isinstance(storage, torch.UntypedStorage):
        return storage
    cpu = getattr(storage, _HOST, None)
    if cpu is None:
        raise RuntimeError(f"emulated accelerator: this {storage.device} storage has no memory behind it "
                           "(storages cannot be allocated on emulated devices)")
    return cpu


def host_tensor(t: torch.Tensor) -> torch.Tensor:
    """The CPU tensor over a tensor's memory: an emulated tensor's data, a plain tensor PyTorch's C++
    made over a device storage (`storage.cpu()` copies through one), or a CPU tensor itself."""
    elem = getattr(t, "elem", None)
    if elem is not None:
        return elem
    if t.device.type != NAME:
        return t
    cpu = getattr(t.untyped_storage(), _HOST, None)
    if cpu is None:
        raise RuntimeError(f"emulated accelerator: this {t.device} tensor was made outside the emulator (by "
                           "PyTorch's C++ code, e.g. from a DLPack capsule) and has no memory behind it")
    return torch.empty(0, dtype=t.dtype).set_(cpu, t.storage_offset(), t.size(), t.stride())


def dlpack_error(t: torch.Tensor) -> str:
    # Tensor.__dlpack_device__ (torch/_tensor.py) maps a PrivateUse1 device to kDLExtDev only under the
    # name "privateuse1", so every renamed backend gets "Unknown device type"; and a capsule of a wrapper
    # would carry the wrapper's own storage, which has no memory behind it.
    return (
        f"Unknown device type {t.device.type} for Dlpack: an {NAME} tensor cannot be shared through DLPack "
        "(PyTorch exchanges a PrivateUse1 tensor only under the name 'privateuse1', and the emulated "
        "device's memory is host memory that no DLPack consumer could address as the device's); copy it "
        "with .cpu() first"
    )
