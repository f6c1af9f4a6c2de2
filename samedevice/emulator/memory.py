"""2. Memory accounting, like torch.cuda.memory_allocated & co., with a capacity past which an
allocation raises torch.OutOfMemoryError (before allocating, as CUDA's caching allocator does). Its
message follows CUDA's (c10/cuda/CUDACachingAllocator.cpp): the same figures in the same units and
order, with the device named as the emulator's ("emulated:0 ... Device 0"); other processes are one
figure (CUDA names each by its pid), and the cache's parts (reserved but unallocated, the advice on
fragmentation) are left out: the emulator keeps no cache."""

from __future__ import annotations

from typing import Any

import torch

from samedevice.emulator import native
from samedevice.emulator.registration import DEVICE_COUNT, NAME, index_of

_allocated = [0] * DEVICE_COUNT
_peak = [0] * DEVICE_COUNT
_capacity: list[int | None] = [None] * DEVICE_COUNT
_elsewhere = [0] * DEVICE_COUNT  # bytes other processes hold on the device (set_capacity's used_elsewhere)

# CUDACachingAllocator.cpp's block and segment sizes
_MIN_BLOCK = 512  # kMinBlockSize: every request is rounded up to a multiple of it (round_size)
_SMALL_SIZE = 2**20  # kSmallSize: up to it, a request takes a new segment of kSmallBuffer (2 MiB)
_MIN_LARGE_ALLOC = 10 * 2**20  # kMinLargeAlloc: below it, a segment of kLargeBuffer (20 MiB)
_ROUND_LARGE = 2 * 2**20  # kRoundLarge: above it, the request rounded up to 2 MiB


class Allocation:
    """One block of emulated device memory; freed when the last tensor viewing it dies."""

    __slots__ = ("index", "nbytes")

    def __init__(self, index: int, nbytes: int) -> None:
        self.index, self.nbytes = index, 0  # nothing to free if the allocation fails
        cap = _capacity[index]
        if cap is not None and _elsewhere[index] + _allocated[index] + nbytes > cap:
            raise torch.OutOfMemoryError(_out_of_memory(index, nbytes, cap))
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


def _segment(nbytes: int) -> int:
    """What CUDA's allocator asks the driver for when `nbytes` finds no free block (get_allocation_size
    of round_size): the figure its "Tried to allocate" names, 2.00 MiB for any small tensor."""
    size = max(_MIN_BLOCK, -(-nbytes // _MIN_BLOCK) * _MIN_BLOCK)
    if size <= _SMALL_SIZE:
        return 2 * 2**20
    if size < _MIN_LARGE_ALLOC:
        return 20 * 2**20
    return -(-size // _ROUND_LARGE) * _ROUND_LARGE


def format_size(nbytes: int) -> str:
    """CUDACachingAllocator.cpp's format_size: bytes up to 1 KiB, then KiB, MiB, GiB with two decimals."""
    for unit, scale in (("bytes", 1), ("KiB", 2**10), ("MiB", 2**20)):
        if nbytes <= scale * 1024:
            return f"{nbytes} bytes" if scale == 1 else f"{nbytes / scale:.2f} {unit}"
    return f"{nbytes / 2**30:.2f} GiB"


def _out_of_memory(index: int, nbytes: int, cap: int) -> str:
    """CUDA's message (the CUDA caching allocator's OutOfMemoryError), device named as the emulator's;
    CUDA's advice on fragmentation is left out: the emulator keeps no cache to fragment."""
    free = max(0, cap - _elsewhere[index] - _allocated[index])
    others = f"Other processes have {format_size(_elsewhere[index])} memory in use. " if _elsewhere[index] else ""
    return (f"{NAME}:{index} out of memory. Tried to allocate {format_size(_segment(nbytes))}. Device {index} has a "
            f"total capacity of {format_size(cap)} of which {format_size(free)} is free. {others}"
            f"Of the allocated memory {format_size(_allocated[index])} is allocated by PyTorch.")


def memory_allocated(dev: torch.device | str | int | None = None) -> int:
    if native.active():
        return native.memory(index_of(dev), 0)
    return _allocated[index_of(dev)]


def max_memory_allocated(dev: torch.device | str | int | None = None) -> int:
    if native.active():
        return native.memory(index_of(dev), 1)
    return _peak[index_of(dev)]


def reset_peak_memory_stats(dev: torch.device | str | int | None = None) -> None:
    i = index_of(dev)
    if native.active():
        native.reset_peak(i)
    _peak[i] = _allocated[i]


def set_capacity(dev: torch.device | str | int | None, nbytes: int | None, used_elsewhere: int = 0) -> None:
    """Limit the emulated device's memory to `nbytes` (None removes the limit), of which other processes
    hold `used_elsewhere` (another rank training on that device): this process may allocate the rest."""
    if nbytes is not None and not 0 <= used_elsewhere <= nbytes:
        raise ValueError(f"used_elsewhere={used_elsewhere} must lie between 0 and the capacity, {nbytes}")
    i = index_of(dev)
    _capacity[i], _elsewhere[i] = nbytes, used_elsewhere if nbytes is not None else 0
    if native.active():
        native.set_capacity(i, nbytes, _elsewhere[i])
