"""6. Serialization: torch.save records the location tag "emulated:N", torch.load restores it and
map_location remaps it, as for CUDA's "cuda:N" (torch/serialization.py)."""

from __future__ import annotations

import re
from collections import OrderedDict
from typing import Any

import torch

from samedevice.emulator.registration import NAME
from samedevice.emulator.storage import device_storage

_LOCATION_ATTR = "_samedevice_location"


def reduce(t: Any) -> Any:
    # Saved like a CUDA tensor: _rebuild_tensor_v2 over a storage whose location tag is the device.
    storage = t.elem.untyped_storage()
    setattr(storage, _LOCATION_ATTR, str(t.device))
    typed = torch.storage.TypedStorage(wrap_storage=storage, dtype=t.dtype, _internal=True)
    return (
        torch._utils._rebuild_tensor_v2,
        (typed, t.elem.storage_offset(), tuple(t.size()), t.stride(), t.requires_grad, OrderedDict()),
    )


def _location_tag(storage: Any) -> str | None:
    found = getattr(storage, _LOCATION_ATTR, None)
    if found is None and storage.device.type == NAME:  # a device storage itself (storage.py)
        found = str(storage.device)
    return found


def _restore_location(storage: Any, location: str) -> Any:
    if re.fullmatch(rf"{NAME}(:\d+)?", location) is None:
        return None
    # PyTorch's own check for a device it is about to deserialize onto, as for "cuda:N": on a host
    # without the device (emulator.absent()) "Attempting to deserialize object on a EMULATED device
    # but torch.emulated.is_available() is False ...", past the device count "... device 7 but
    # torch.emulated.device_count() is 2 ..." (torch/serialization.py, _validate_device)
    index = torch.serialization._validate_device(location, NAME).index or 0
    return device_storage(storage, index)  # the loaded memory, as a storage on the device


def register() -> None:
    # Tagger before CPU's (priority 10): an emulated storage must not be recorded as "cpu".
    torch.serialization.register_package(5, _location_tag, _restore_location)
