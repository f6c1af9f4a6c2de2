"""The native core (csrc/): device tensors as plain `torch.Tensor`s on PrivateUse1, with storages in host memory
counted per device, and a C++ fallback that runs CPU's kernel on host aliases of them after CUDA's device check.

The default core. SAMEDEVICE_EMULATOR_CORE=subclass selects the first design (tensor.py's wrapper subclass) instead,
which is also what runs where the C++ part cannot be built (no compiler: the emulator says so in one line).
The rules stay in Python: the fallback asks `rules.native_plan` once per op which check CUDA makes, and this
module tells it which ops to take by name.
"""

from __future__ import annotations

import ctypes
import os
from typing import Any

import torch

CORE_ENV = "SAMEDEVICE_EMULATOR_CORE"

# int (*)(const char* op, int* rule, int* allow_cpu_scalar, int* random, int* nested, char* text, size_t size),
# fallback.cpp's PlanFunction
_INT = ctypes.POINTER(ctypes.c_int)
_PLAN_FUNCTION = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_char_p, _INT, _INT, _INT, _INT, ctypes.c_void_p,
                                  ctypes.c_size_t)
_kept: list[Any] = []  # the callback lives as long as the library calls it


def requested() -> bool:
    """Whether this process asks for the native core (the default)."""
    return os.environ.get(CORE_ENV, "native") != "subclass"


def demanded() -> bool:
    """Whether this process insists on it (SAMEDEVICE_EMULATOR_CORE=native): no fallback to the subclass core."""
    return os.environ.get(CORE_ENV) == "native"


def _plan(op: bytes, rule: Any, allow: Any, random: Any, nested: Any, text: int, size: int) -> int:
    from samedevice.emulator import rules

    try:
        found = rules.native_plan(op.decode())
    except Exception as e:  # an exception cannot cross into C++: the fallback raises naming the op
        print(f"samedevice: planning {op.decode()} failed: {e!r}")
        return 1
    rule[0], allow[0], random[0], nested[0] = found.rule, int(found.allow_cpu_scalar), found.random, int(found.nested)
    texts = f"{found.text}\n{found.nested_text}".encode()[: size - 1] + b"\0"
    ctypes.memmove(text, texts, len(texts))
    return 0


def is_device(x: Any) -> bool:
    return (isinstance(x, torch.Tensor) and x.device.type == "privateuseone") or (
        isinstance(x, torch.Tensor) and x.device.type == torch._C._get_privateuse1_backend_name())


def host(x: Any) -> Any:
    """A device tensor's host alias (a CPU tensor over its memory), anything else as it is."""
    return torch.ops.samedevice._host(x) if is_device(x) else x


def run_on_host(func: Any, args: Any, kwargs: Any, index: int | None) -> Any:
    """Run CPU's kernel for `func` on host aliases, as the C++ fallback does, for the kernels that stay in Python
    (rules.py's NATIVE_PYTHON): an in-place result is the caller's device tensor, a fresh one is taken over."""
    from samedevice.emulator.tensor import tree_map

    same: dict[int, torch.Tensor] = {}
    aliases: list[torch.Tensor] = []  # alive until the results are mapped, so their ids stay theirs

    def to_host(x: Any) -> Any:
        if not is_device(x):
            return x
        alias = torch.ops.samedevice._host(x)
        aliases.append(alias)
        same[id(alias)] = x
        return alias

    out = func(*tree_map(to_host, args), **tree_map(to_host, kwargs))
    return wrap(out, same, index)


def wrap(out: Any, same: dict[int, torch.Tensor], index: int | None) -> Any:
    from samedevice.emulator.tensor import tree_map

    def back(t: Any) -> Any:
        if not isinstance(t, torch.Tensor) or index is None or t.device.type != "cpu":
            return t
        return same[id(t)] if id(t) in same else torch.ops.samedevice._device(t, index)

    return tree_map(back, out)


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
    python_kernels = torch.library.Library("aten", "IMPL")
    for name in rules.NATIVE_PYTHON:
        packet, _, overload = name.partition(".")
        func = getattr(getattr(torch.ops.aten, packet), overload or "default")
        python_kernels.impl(name, _special(func), "PrivateUse1")
    _kept.append(python_kernels)
    _loaded.append(lib)
    from samedevice.emulator import tensor

    tensor.NATIVE = True


def _special(func: Any) -> Any:
    from samedevice.emulator import rules

    def kernel(*args: Any, **kwargs: Any) -> Any:
        return rules.SPECIAL[func](func, args, kwargs)

    return kernel


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
