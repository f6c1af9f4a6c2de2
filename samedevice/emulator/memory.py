"""Memory accounting, like torch.cuda.memory_allocated & co., with a capacity past which an allocation raises
torch.OutOfMemoryError (before allocating, as CUDA's caching allocator does). The counting and the message are
the device allocator's (csrc/allocator.cpp); the message follows CUDA's (c10/cuda/CUDACachingAllocator.cpp): the
same figures in the same units and order, with the device named as the emulator's ("emulated:0 ... Device 0");
other processes are one figure (CUDA names each by its pid), and the cache's parts (reserved but unallocated, the
advice on fragmentation) are left out: the emulator keeps no cache."""

from __future__ import annotations

import torch

from samedevice.emulator import native, registration
from samedevice.emulator.registration import DEVICE_COUNT, index_of, is_absent, visible_count

_ALLOCATED, _PEAK, _FREE, _TOTAL = 0, 1, 2, 3


def _index(dev: torch.device | str | int | None) -> int:
    index = index_of(dev)
    # CUDACachingAllocator.cpp's check of the device argument, in its words, against the devices the host has (an
    # absent host's figures are read as CUDA's are before it starts: torch.cuda.memory_stats gives none, no error)
    if not 0 <= index < (DEVICE_COUNT if is_absent() else visible_count()):
        raise RuntimeError(f"Invalid device argument {index}: did you call init?")
    return index


def memory_allocated(dev: torch.device | str | int | None = None) -> int:
    return native.memory(_index(dev), _ALLOCATED)


def max_memory_allocated(dev: torch.device | str | int | None = None) -> int:
    return native.memory(_index(dev), _PEAK)


def reset_peak_memory_stats(dev: torch.device | str | int | None = None) -> None:
    native.reset_peak(_index(dev))


def memory_reserved(dev: torch.device | str | int | None = None) -> int:
    return memory_allocated(dev)  # no cache: what is reserved is allocated


def max_memory_reserved(dev: torch.device | str | int | None = None) -> int:
    return max_memory_allocated(dev)


def empty_cache() -> None:
    """The emulator keeps no cache: nothing to release."""


def mem_get_info(dev: torch.device | str | int | None = None) -> tuple[int, int]:
    """(free, total) bytes: the capacity where one is set (less what is allocated and used elsewhere), else the
    host's memory, which the emulated device's is."""
    index = _index(dev)
    return native.memory(index, _FREE), native.memory(index, _TOTAL)


def set_capacity(dev: torch.device | str | int | None, nbytes: int | None, used_elsewhere: int = 0) -> None:
    """Limit the emulated device's memory to `nbytes` (None removes the limit), of which other processes
    hold `used_elsewhere` (another rank training on that device): this process may allocate the rest."""
    if nbytes is not None and not 0 <= used_elsewhere <= nbytes:
        raise ValueError(f"used_elsewhere={used_elsewhere} must lie between 0 and the capacity, {nbytes}")
    native.set_capacity(_index(dev), nbytes, used_elsewhere if nbytes is not None else 0)


format_size = native.format_size


# torch.emulated's memory functions, as torch.cuda's (torch.accelerator's reach the allocator, allocator.cpp)
for _fn in (memory_allocated, max_memory_allocated, reset_peak_memory_stats, memory_reserved, max_memory_reserved,
            empty_cache, mem_get_info):
    setattr(registration._DeviceModule, _fn.__name__, staticmethod(_fn))
