"""5. Ops that move data between devices, which CUDA allows across devices: `_to_copy` (`.to`,
`.cpu()`), `copy_`, and `set_` (how torch.load rebuilds a tensor on its saved device)."""

from __future__ import annotations

from typing import Any

import torch

from samedevice.emulator.memory import allocation_of
from samedevice.emulator.registration import NAME
from samedevice.emulator.rules import SPECIAL
from samedevice.emulator.storage import host
from samedevice.emulator.tensor import EmulatedTensor, resolve, set_geometry, unwrap

aten = torch.ops.aten


def _to_copy(func: Any, args: Any, kwargs: Any) -> Any:
    src = args[0]
    target = torch.device(kwargs.get("device") or src.device)
    cpu_kwargs = dict(kwargs, device=torch.device("cpu"))
    if target.type == NAME:
        index = resolve(target)  # an index-less "emulated" is the current device, as for "cuda"
        copy = EmulatedTensor(aten._to_copy.default(unwrap(src), **cpu_kwargs), index)
        copy.is_copy = True
        return copy
    return aten._to_copy.default(unwrap(src), **cpu_kwargs)


def _copy_(func: Any, args: Any, kwargs: Any) -> Any:
    dst, src = args[0], args[1]
    unwrap(dst).copy_(unwrap(src), **kwargs)
    if isinstance(dst, EmulatedTensor):
        dst.is_copy = True  # `.to(device)` of a CPU tensor: CPU's _to_copy allocates here, then copies
    return dst


def _set_storage(func: Any, args: Any, kwargs: Any) -> Any:
    # torch.load's _rebuild_tensor: torch.empty((0,), device=emulated:N).set_(storage, offset, size, stride)
    # set_ works in place and its caller keeps `self`, so the wrapper itself takes the new geometry.
    self, storage, *rest = args
    # a device storage (`t.set_(other.untyped_storage())`, a loaded checkpoint's) shares its CPU memory
    elem = torch.empty(0, dtype=self.dtype).set_(host(storage), *rest, **kwargs)
    self._alloc = allocation_of(elem, self.device.index or 0)
    set_geometry(self, elem)
    return self


SPECIAL.update({
    aten._to_copy.default: _to_copy,
    aten.copy_.default: _copy_,
    aten.set_.source_Storage_storage_offset: _set_storage,
    aten.set_.source_Storage: _set_storage,
})
