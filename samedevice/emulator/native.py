"""The native core (csrc/): device tensors as plain `torch.Tensor`s on PrivateUse1, with storages in host memory
counted per device, and a C++ fallback that runs CPU's kernel on host aliases of them after CUDA's device check.

Selected per process with SAMEDEVICE_EMULATOR_CORE=native (the default is still the subclass core, tensor.py,
until the native core runs the whole suite). The rules stay here in Python: the fallback asks `rules.native_plan`
once per op which check CUDA makes, and this module tells it which ops to take by name.
"""

from __future__ import annotations

import ctypes
import os
from typing import Any

import torch

CORE_ENV = "SAMEDEVICE_EMULATOR_CORE"

# int (*)(const char* op, int* rule, int* allow_cpu_scalar, int* random, char* text, size_t size), fallback.cpp
_PLAN_FUNCTION = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_char_p, ctypes.POINTER(ctypes.c_int),
                                  ctypes.POINTER(ctypes.c_int), ctypes.POINTER(ctypes.c_int), ctypes.c_void_p,
                                  ctypes.c_size_t)
_kept: list[Any] = []  # the callback lives as long as the library calls it


def requested() -> bool:
    """Whether this process asks for the native core."""
    return os.environ.get(CORE_ENV, "subclass") == "native"


def _plan(op: bytes, rule: Any, allow: Any, random: Any, text: int, size: int) -> int:
    from samedevice.emulator import rules

    try:
        found = rules.native_plan(op.decode())
    except Exception as e:  # an exception cannot cross into C++: the fallback raises naming the op
        print(f"samedevice: planning {op.decode()} failed: {e!r}")
        return 1
    rule[0], allow[0], random[0] = found.rule, int(found.allow_cpu_scalar), found.random
    ctypes.memmove(text, found.text.encode()[: size - 1] + b"\0", min(len(found.text.encode()) + 1, size))
    return 0


def install(lib: ctypes.CDLL) -> None:
    """Register the native core from the loaded library: kernels, fallback, the ops it takes by name, and each
    device's default generator (rng.py's)."""
    from samedevice.emulator import rng, rules

    lib.samedevice_memory.restype = ctypes.c_int64
    callback = _PLAN_FUNCTION(_plan)
    _kept.append(callback)
    lib.samedevice_register_core(callback)
    lib.samedevice_register_by_name("\n".join(rules.native_by_name()).encode())
    for index, generator in enumerate(rng._generators):
        torch.ops.samedevice._set_default_generator(index, generator)
    _loaded.append(lib)


_loaded: list[ctypes.CDLL] = []


def memory(index: int, what: int) -> int:
    """allocator.cpp's figures: 0 allocated, 1 peak."""
    return int(_loaded[0].samedevice_memory(index, what))


def reset_peak(index: int) -> None:
    _loaded[0].samedevice_reset_peak(index)


def set_capacity(index: int, capacity: int | None, elsewhere: int) -> None:
    _loaded[0].samedevice_set_capacity(index, ctypes.c_int64(-1 if capacity is None else capacity),
                                       ctypes.c_int64(elsewhere))


def active() -> bool:
    return bool(_loaded)
