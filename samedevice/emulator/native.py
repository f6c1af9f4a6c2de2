"""2. The native core (csrc/), a PrivateUse1 backend in C++ after PyTorch's own example backend (openreg): device
tensors are plain `torch.Tensor`s whose storages live in host memory, counted per device (allocator.cpp); the
minimal kernels allocate, view and copy (kernels.cpp); every other op reaches a fallback that runs CPU's kernel on
host aliases of the device memory, after the device check CUDA's kernel makes (fallback.cpp).

The rules stay in Python: the fallback asks `rules.native_plan` once per op which check CUDA makes, and this
module tells it which ops to take by name. The few kernels that stay Python (rules.NATIVE_PYTHON) run CPU's
kernel on host aliases here (`run_on_host`), as the fallback does.
"""

from __future__ import annotations

import ctypes
from typing import Any

import torch

# int (*)(const char* op, int* rule, int* allow_cpu_scalar, int* random, int* nested, char* text, size_t size),
# fallback.cpp's PlanFunction
_INT = ctypes.POINTER(ctypes.c_int)
_PLAN_FUNCTION = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_char_p, _INT, _INT, _INT, _INT, ctypes.c_void_p,
                                  ctypes.c_size_t)
_kept: list[Any] = []  # the callback lives as long as the library calls it


def _plan(op: bytes, rule: Any, allow: Any, random: Any, nested: Any, text: int, size: int) -> int:
    from samedevice.emulator import rules

    try:
        found = rules.native_plan(op.decode())
        rule[0], random[0] = found.rule, found.random
        allow[0], nested[0] = int(found.allow_cpu_scalar), int(found.nested)
        texts = f"{found.text}\n{found.nested_text}".encode()[: size - 1] + b"\0"
        ctypes.memmove(text, texts, len(texts))
    except Exception as e:  # an exception cannot cross into C++: the fallback raises naming the op
        print(f"samedevice: planning {op.decode()} failed: {e!r}")
        return 1
    return 0


def is_device(x: Any) -> bool:
    return isinstance(x, torch.Tensor) and x.device.type == torch._C._get_privateuse1_backend_name()


# Op arguments nest at most lists of tensors (Tensor[], Tensor?[]) in tuples and dicts: these two walkers do what
# torch.utils._pytree would, several times faster.
def tree_map(fn: Any, x: Any) -> Any:
    if isinstance(x, (list, tuple)):
        return type(x)(tree_map(fn, v) for v in x)
    if isinstance(x, dict):
        return {k: tree_map(fn, v) for k, v in x.items()}
    return fn(x)


def tensors(x: Any) -> list[torch.Tensor]:
    """Every tensor in an op's arguments."""
    found: list[torch.Tensor] = []
    tree_map(lambda v: found.append(v) if isinstance(v, torch.Tensor) else None, x)
    return found


def host(x: Any) -> Any:
    """A device tensor's host alias (a CPU tensor over its memory), anything else as it is."""
    return torch.ops.samedevice._host(x) if is_device(x) else x


def run_on_host(func: Any, args: Any, kwargs: Any, index: int | None) -> Any:
    """Run CPU's kernel for `func` on host aliases, as the C++ fallback does, for the kernels that stay in Python
    (rules.py's NATIVE_PYTHON): an in-place result is the caller's device tensor, a fresh one is taken over."""
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
    """A CPU kernel's results on the device: an argument's own device tensor, or fresh memory taken over."""

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
    _refuse_inductor()


INDUCTOR_REFUSAL = (
    "emulated accelerator: torch.compile's inductor backend cannot generate code for emulated devices; "
    "compile with backend='eager' or 'aot_eager' (they run the model on the device), or compile on cpu"
)


class _Refusing(type):
    def __getattr__(cls, name: str) -> Any:  # inductor asks the scheduling class itself (supports_caching & co.)
        if name.startswith("__"):
            raise AttributeError(name)  # introspection (hasattr(cls, "__code__")) is not inductor
        raise RuntimeError(INDUCTOR_REFUSAL)


class _InductorRefusal(metaclass=_Refusing):
    """What inductor finds as the emulated device's op overrides, scheduling and wrapper code generator: the first
    use refuses in one line (else inductor fails with "KeyError: 'emulated'" or "Device emulated not supported")."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise RuntimeError(INDUCTOR_REFUSAL)

    @classmethod
    def create(cls, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError(INDUCTOR_REFUSAL)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        raise RuntimeError(INDUCTOR_REFUSAL)


def _refuse_inductor() -> None:
    """Register the refusal with inductor's device tables (torch/_inductor/codegen/common.py:
    register_device_op_overrides, register_backend_for_device) once that module is imported: importing it here
    would cost every process about two seconds, so a finder on sys.meta_path waits for inductor's own import."""
    import importlib.abc
    import importlib.util
    import sys

    target = "torch._inductor.codegen.common"

    def register(module: Any) -> None:
        name = torch._C._get_privateuse1_backend_name()
        module.register_device_op_overrides(name, _InductorRefusal.__new__(_InductorRefusal))
        module.register_backend_for_device(name, _InductorRefusal, _InductorRefusal)

    if target in sys.modules:
        register(sys.modules[target])
        return

    class AfterImport(importlib.abc.MetaPathFinder):
        def find_spec(self, name: str, path: Any, target_module: Any = None) -> Any:
            if name != target:
                return None
            sys.meta_path.remove(self)
            spec = importlib.util.find_spec(name)
            if spec is None or spec.loader is None:
                return spec
            load = spec.loader.exec_module

            def exec_module(module: Any) -> None:
                load(module)
                register(module)

            spec.loader.exec_module = exec_module  # type: ignore[method-assign]
            return spec

    sys.meta_path.insert(0, AfterImport())


def _special(func: Any) -> Any:
    from samedevice.emulator import rules

    def kernel(*args: Any, **kwargs: Any) -> Any:
        return rules.SPECIAL[func](func, args, kwargs)

    return kernel


_loaded: list[ctypes.CDLL] = []


def memory(index: int, what: int) -> int:
    """allocator.cpp's figures: 0 allocated, 1 peak, 2 free, 3 total."""
    return int(_loaded[0].samedevice_memory(index, what))


def reset_peak(index: int) -> None:
    _loaded[0].samedevice_reset_peak(index)


def set_capacity(index: int, capacity: int | None, elsewhere: int) -> None:
    _loaded[0].samedevice_set_capacity(index, ctypes.c_int64(-1 if capacity is None else capacity),
                                       ctypes.c_int64(elsewhere))


def active() -> bool:
    return bool(_loaded)


def format_size(nbytes: int) -> str:
    """allocator.cpp's sizes, as CUDACachingAllocator.cpp's format_size writes them."""
    text = ctypes.create_string_buffer(64)
    _loaded[0].samedevice_format_size(ctypes.c_int64(nbytes), text, ctypes.c_size_t(len(text)))
    return text.value.decode()
