"""2. Memory accounting, like torch.cuda.memory_allocated & co., with a capacity past which an
allocation raises torch.OutOfMemoryError (before allocating, as CUDA's caching allocator does)."""

from __future__ import annotations

from typing import Any

import torch

from samedevice.emulator.registration import DEVICE_COUNT, NAME, index_of

_allocated = [0] * DEVICE_COUNT
_peak = [0] * DEVICE_COUNT
_capacity: list[int | None] = [None] * DEVICE_COUNT


class Allocation:
    """One block of emulated device memory; freed when the last tensor viewing it dies."""

    __slots__ = ("index", "nbytes")

    def __init__(self, index: int, nbytes: int) -> None:
        self.index, self.nbytes = index, 0  # nothing to free if the allocation fails
        cap = _capacity[index]
        if cap is not None and _allocated[index] + nbytes > cap:
            raise torch.OutOfMemoryError(
                f"{NAME}:{index} out of memory. Tried to allocate {_mib(nbytes)}. "
                f"Device {index} has a total capacity of {_mib(cap)} of which "
                f"{_mib(_allocated[index])} is allocated."
            )
        self.nbytes = nbytes
        _allocated[index] += nbytes
        if _allocated[index] > _peak[index]:
            _peak[index] = _allocated[index]

    def __del__(self) -> None:
        _allocated[self.index] -= self.nbytes

    def __deepcopy__(self, memo: dict[int, Any]) -> Allocation:
        return self


def allocation_of(elem: torch.Tensor, index: int) -> Allocation:
    """The block of device memory behind elem's storage (views and reloads share one)."""
    storage = elem.untyped_storage()
    alloc = getattr(storage, "_samedevice_alloc", None)
    if alloc is None or alloc.index != index:
        alloc = Allocation(index, storage.nbytes())
        storage._samedevice_alloc = alloc  # type: ignore[attr-defined]
    return alloc


def _mib(nbytes: int) -> str:
    return f"{nbytes / 2**20:.2f} MiB"


def memory_allocated(dev: torch.device | str | int | None = None) -> int:
    return _allocated[index_of(dev)]


def max_memory_allocated(dev: torch.device | str | int | None = None) -> int:
    return _peak[index_of(dev)]


def reset_peak_memory_stats(dev: torch.device | str | int | None = None) -> None:
    i = index_of(dev)
    _peak[i] = _allocated[i]


def set_capacity(dev: torch.device | str | int | None, nbytes: int | None) -> None:
    """Limit the emulated device's memory; None removes the limit."""
    _capacity[index_of(dev)] = nbytes
