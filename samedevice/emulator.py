"""The emulated accelerator: a CPU-backed device that PyTorch treats as an accelerator.

Every runner, a laptop and CPU-only CI included, reproduces the real device errors with it:

    >>> from samedevice import emulator
    >>> dev = emulator.device()           # torch.device("emulated:0")
    >>> torch.ones(3, device=dev) + torch.ones(3)
    RuntimeError: Expected all tensors to be on the same device, but found at least two devices, emulated:0 and cpu!

How it works, in numbered sections (after albanD/subclass_zoo's new_device.py):
1. registration: PrivateUse1 renamed to "emulated", a device module, factory kernels via torch.library;
2. memory accounting like torch.cuda's, with a capacity past which allocation raises OutOfMemoryError;
3. the tensor: a wrapper subclass whose data is a CPU tensor (`elem`) and whose device is emulated:N;
4. the device rules, each copied from a CUDA rule in PyTorch's C++ (cited beside it);
5. ops that move data between devices (`_to_copy`, `copy_`, `set_`), which CUDA allows across devices;
6. serialization: torch.save records "emulated:N", torch.load restores it, map_location remaps it.
Numerics are CPU's: every op runs the CPU kernel on `elem`.

Known departures from CUDA (each pinned by a test): register (`device()`) before the process's first
backward, since PyTorch sizes its autograd device queues then; backward works on emulated:0 only (the
Python device guard PyTorch provides reports one device); moving a module back to CPU creates new
Parameters; sparse tensors are refused.
"""

from __future__ import annotations

import contextlib
import functools
import re
import weakref
from collections import OrderedDict
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

import torch

NAME = "emulated"
DEVICE_COUNT = 2
aten = torch.ops.aten


class EmulatorUnavailableError(RuntimeError):
    """PrivateUse1 is already taken by another backend, so the emulator cannot register."""


# ---------------------------------------------------------------------------------------------
# 1. Registration
# ---------------------------------------------------------------------------------------------


class _DeviceModule:
    """What PyTorch looks up as `torch.emulated` (like `torch.cuda`)."""

    @staticmethod
    def is_available() -> bool:
        return True

    @staticmethod
    def is_initialized() -> bool:
        return True

    @staticmethod
    def device_count() -> int:
        return DEVICE_COUNT

    @staticmethod
    def current_device() -> int:
        return 0

    @staticmethod
    def _is_in_bad_fork() -> bool:
        return False

    @staticmethod
    def manual_seed_all(seed: int) -> None:
        # Emulated ops draw from the CPU generator (numerics are CPU's), which torch.manual_seed seeds.
        pass

    @staticmethod
    def get_amp_supported_dtype() -> list[torch.dtype]:
        return [torch.float16, torch.bfloat16]

    @staticmethod
    def device(dev: Any) -> Any:
        # torch.cuda.device(i) switches the current device; PyTorch enters it before allocating a
        # storage on the device (UntypedStorage.to, a map_location callable's `storage.to(...)`),
        # which the emulator cannot do: its data lives in CPU tensors, not in storages of its own.
        raise NotImplementedError(
            f"emulated accelerator: storages cannot be moved to {NAME} devices (UntypedStorage.to); "
            f"load with map_location='{NAME}:N' or a dict such as {{'cpu': '{NAME}:1'}} instead"
        )


_registered = False
_libs: list[torch.library.Library] = []


def unavailable_reason() -> str | None:
    """One line saying why the emulator cannot run in this process, or None when it can."""
    taken = torch._C._get_privateuse1_backend_name()
    if taken not in ("privateuseone", NAME):
        return (
            f"the emulated accelerator needs PyTorch's PrivateUse1 backend, "
            f"but it is already taken by {taken!r}"
        )
    return None


def _register() -> None:
    global _registered
    if _registered:
        return
    reason = unavailable_reason()
    if reason:
        raise EmulatorUnavailableError(reason)
    from samedevice import compat

    compat.check()  # one line naming a missing private API; one warning on an untested torch
    from torch.utils.backend_registration import _setup_privateuseone_for_python_backend

    if torch._C._get_privateuse1_backend_name() == "privateuseone":
        _setup_privateuseone_for_python_backend(NAME, backend_module=_DeviceModule())

    lib = torch.library.Library("aten", "IMPL")
    lib.impl("empty.memory_format", _empty_memory_format, "PrivateUse1")
    lib.impl("empty_strided", _empty_strided, "PrivateUse1")
    # torch.tensor(data, device=...) copies with the Python key excluded, so it lands here
    lib.impl("_copy_from", _copy_from, "PrivateUse1")
    # Composite factories that fill a resized `out=` tensor (arange & co.) run on CPU and are wrapped.
    for name in _RESIZING_FACTORIES:
        lib.impl(name, functools.partial(_cpu_factory, getattr(aten, name.split(".")[0])), "PrivateUse1")
    _libs.append(lib)

    # PyTorch's optimizers take their accelerator default path (foreach, and fused where asked)
    # only for tensor types listed here; it has no public registration, and a CUDA tensor is a
    # plain torch.Tensor, so the emulated tensor type joins the list to get CUDA's defaults.
    # (torch/optim/optimizer.py: _default_to_fused_or_foreach; torch/utils/_foreach_utils.py)
    import torch.optim.optimizer as optimizer_module
    import torch.utils._foreach_utils as foreach_utils

    for supported in (optimizer_module._foreach_supported_types, foreach_utils._foreach_supported_types):
        if EmulatedTensor not in supported:
            supported.append(EmulatedTensor)  # type: ignore[arg-type]

    # Tagger before CPU's (priority 10): an emulated storage must not be recorded as "cpu".
    torch.serialization.register_package(5, _location_tag, _restore_location)
    _registered = True


def device(index: int = 0) -> torch.device:
    """The emulated device `emulated:<index>`; registers the backend on first use."""
    if not isinstance(index, int) or not 0 <= index < DEVICE_COUNT:
        raise ValueError(
            f"emulated device index {index!r} is out of range: "
            f"the emulator has {DEVICE_COUNT} devices, indices 0 to {DEVICE_COUNT - 1}"
        )
    _register()
    return torch.device(NAME, index)


@contextlib.contextmanager
def active() -> Iterator[None]:
    """Inside this block the emulated devices work like any accelerator.

    The emulator needs no mode (it is a registered backend), so this only registers it; it exists
    so that code written against the contract keeps working if a mode is ever needed.
    """
    _register()
    yield


def is_emulated(dev: torch.device | str) -> bool:
    return torch.device(dev).type == NAME


# ---------------------------------------------------------------------------------------------
# 2. Memory accounting, like torch.cuda.memory_allocated & co.
# ---------------------------------------------------------------------------------------------

_allocated = [0] * DEVICE_COUNT
_peak = [0] * DEVICE_COUNT
_capacity: list[int | None] = [None] * DEVICE_COUNT


def _index(dev: torch.device | str | int | None) -> int:
    if dev is None:
        return 0
    if isinstance(dev, int):
        return dev
    dev = torch.device(dev)
    if dev.type != NAME:
        raise ValueError(f"{dev} is not an emulated device")
    return dev.index or 0


class _Allocation:
    """One block of emulated device memory; freed when the last tensor viewing it dies."""

    __slots__ = ("__weakref__", "index", "nbytes")

    def __init__(self, index: int, nbytes: int) -> None:
        cap = _capacity[index]
        if cap is not None and _allocated[index] + nbytes > cap:
            raise torch.OutOfMemoryError(
                f"{NAME}:{index} out of memory. Tried to allocate {_mib(nbytes)}. "
                f"Device {index} has a total capacity of {_mib(cap)} of which "
                f"{_mib(_allocated[index])} is allocated."
            )
        self.index, self.nbytes = index, nbytes
        _allocated[index] += nbytes
        _peak[index] = max(_peak[index], _allocated[index])
        weakref.finalize(self, _free, index, nbytes)

    def __deepcopy__(self, memo: dict[int, Any]) -> _Allocation:
        return self


def _allocation_of(elem: torch.Tensor, index: int) -> _Allocation:
    """The block of device memory behind elem's storage (views and reloads share one)."""
    storage = elem.untyped_storage()
    alloc = getattr(storage, "_samedevice_alloc", None)
    if alloc is None or alloc.index != index:
        alloc = _Allocation(index, storage.nbytes())
        storage._samedevice_alloc = alloc  # type: ignore[attr-defined]
    return alloc


def _free(index: int, nbytes: int) -> None:
    _allocated[index] -= nbytes


def _mib(nbytes: int) -> str:
    return f"{nbytes / 2**20:.2f} MiB"


def memory_allocated(dev: torch.device | str | int | None = None) -> int:
    return _allocated[_index(dev)]


def max_memory_allocated(dev: torch.device | str | int | None = None) -> int:
    return _peak[_index(dev)]


def reset_peak_memory_stats(dev: torch.device | str | int | None = None) -> None:
    i = _index(dev)
    _peak[i] = _allocated[i]


def set_capacity(dev: torch.device | str | int | None, nbytes: int | None) -> None:
    """Limit the emulated device's memory; None removes the limit."""
    _capacity[_index(dev)] = nbytes


# ---------------------------------------------------------------------------------------------
# 3. The tensor
# ---------------------------------------------------------------------------------------------


class EmulatedTensor(torch.Tensor):
    """A tensor on `emulated:N` whose data lives in the CPU tensor `elem`."""

    elem: torch.Tensor
    _alloc: _Allocation

    __torch_function__ = torch._C._disabled_torch_function_impl  # type: ignore[assignment]

    @staticmethod
    def __new__(cls, elem: torch.Tensor, index: int, alloc: _Allocation | None = None) -> EmulatedTensor:
        if elem.layout != torch.strided:
            # fail loudly: PyTorch cannot wrap a sparse tensor this way (it would crash the process)
            raise NotImplementedError(
                f"emulated accelerator: {elem.layout} tensors are not supported on {NAME} devices "
                "(only dense, strided tensors are)"
            )
        if alloc is None:
            alloc = _allocation_of(elem, index)
        r = torch.Tensor._make_wrapper_subclass(
            cls,
            elem.size(),
            strides=elem.stride(),
            storage_offset=elem.storage_offset(),
            dtype=elem.dtype,
            layout=elem.layout,
            device=torch.device(NAME, index),
            requires_grad=elem.requires_grad,
        )
        r.elem = elem
        r._alloc = alloc
        return r

    def __repr__(self, *, tensor_contents: Any = None) -> str:  # type: ignore[override]
        text = repr(self.elem)
        suffix = f", device='{self.device}'"
        if self.grad_fn is not None:
            suffix += f", grad_fn=<{type(self.grad_fn).__name__}>"
        elif self.requires_grad:
            suffix += ", requires_grad=True"
        return text[:-1] + suffix + ")" if text.startswith("tensor(") else text

    def __tensor_flatten__(self) -> tuple[list[str], int]:
        return ["elem"], self.device.index or 0

    @staticmethod
    def __tensor_unflatten__(inner: dict[str, torch.Tensor], index: int, size: Any, stride: Any) -> EmulatedTensor:
        return EmulatedTensor(inner["elem"], index)

    def __deepcopy__(self, memo: dict[int, Any]) -> EmulatedTensor:
        with torch.no_grad():
            copy = self.clone()
        copy.requires_grad_(self.requires_grad)
        if getattr(self, "_is_param", False):
            copy._is_param = True
        memo[id(self)] = copy
        return copy  # type: ignore[return-value]

    def __reduce_ex__(self, proto: Any) -> Any:
        return _reduce(self)

    def tolist(self) -> Any:
        # PyTorch refuses tolist() on tensor subclasses; on CUDA it copies to the host and converts
        return self.elem.tolist()

    @classmethod
    def __torch_dispatch__(  # type: ignore[override]
        cls, func: Any, types: Any, args: Any = (), kwargs: Any = None
    ) -> Any:
        kwargs = kwargs or {}
        special = _SPECIAL.get(func)
        if special is not None:
            return special(func, args, kwargs)
        if _decomposes(func):
            # CUDA has no kernel of its own for a composite op (embedding, binary_cross_entropy_with_
            # logits, zeros_like, ...): it runs PyTorch's CompositeExplicitAutograd kernel, whose
            # parts each check devices. So does the emulator.
            return func._op_dk(torch._C.DispatchKey.CompositeExplicitAutograd, *args, **kwargs)
        index = _check_devices(func, args, kwargs)
        return _run_on_cpu(func, args, kwargs, index)


_META = torch._C.DispatchKeySet(torch._C.DispatchKey.Meta)


# CUDA has no kernel of its own for a composite op: it runs PyTorch's CompositeExplicitAutograd
# kernel, whose parts each check devices. Where that gives other device rules than checking the op
# as a whole, the emulator runs the composite kernel too. An allowlist, because some composite
# kernels build tensors in C++ directly (_unsafe_view), which a wrapper subclass cannot follow.
_COMPOSITES = {
    # embedding -> index_select(weight, 0, indices): the codegen check names the argument `index`
    "aten::embedding",
    # (pos_weight - 1).mul(target)...: a 0-dim CPU pos_weight is a CPU scalar in each part, allowed
    "aten::binary_cross_entropy_with_logits",
}


def _decomposes(func: Any) -> bool:
    return func.name() in _COMPOSITES


def _set_geometry(wrapper: EmulatedTensor, elem: torch.Tensor) -> None:
    """Give the wrapper elem's sizes, strides and offset, in place (the Meta kernel of set_ touches
    metadata only), and make elem its data."""
    aten.set_.source_Storage_storage_offset.redispatch(
        _META, wrapper, wrapper.untyped_storage(), elem.storage_offset(), elem.size(), elem.stride()
    )
    wrapper.elem = elem


def _unwrap(x: Any) -> Any:
    return x.elem if isinstance(x, EmulatedTensor) else x


# Op arguments nest at most lists of tensors (Tensor[], Tensor?[]) in tuples and dicts: these two
# walkers do what torch.utils._pytree would, several times faster (the dispatch is hot).
def _map(fn: Any, x: Any) -> Any:
    if isinstance(x, (list, tuple)):
        return type(x)(_map(fn, v) for v in x)
    if isinstance(x, dict):
        return {k: _map(fn, v) for k, v in x.items()}
    return fn(x)


def _leaves(x: Any, out: list[Any]) -> list[Any]:
    if isinstance(x, (list, tuple)):
        for v in x:
            _leaves(v, out)
    elif isinstance(x, dict):
        for v in x.values():
            _leaves(v, out)
    else:
        out.append(x)
    return out


def _run_on_cpu(func: Any, args: Any, kwargs: Any, index: int | None) -> Any:
    cpu_args, cpu_kwargs = _map(_unwrap, (args, kwargs))
    if kwargs.get("device") is not None:
        # new_empty_strided, empty_like(..., device=...) & co.: the result goes where `device` says
        index = _emulated_index(torch.device(kwargs["device"]))
        cpu_kwargs["device"] = torch.device("cpu")
    out = func(*cpu_args, **cpu_kwargs)
    same: dict[int, EmulatedTensor] = {}
    if func._schema.is_mutable:
        # in-place and out= ops return their input: hand back the caller's emulated tensor
        originals = _leaves((args, kwargs), [])
        unwrapped = _leaves((cpu_args, cpu_kwargs), [])
        same = {id(u): o for u, o in zip(unwrapped, originals) if isinstance(o, EmulatedTensor)}
    return _wrap_outputs(out, same, index)


def _wrap_outputs(out: Any, same: dict[int, EmulatedTensor], index: int | None) -> Any:

    def wrap(t: Any) -> Any:
        if not isinstance(t, torch.Tensor) or isinstance(t, EmulatedTensor) or index is None:
            return t
        if id(t) in same:
            orig = same[id(t)]
            if orig.shape != t.shape or orig.stride() != t.stride():
                _set_geometry(orig, t)  # resize_, squeeze_, out= resized: follow the CPU result
            return orig
        # views share their base's block of device memory; anything else is a new allocation
        return EmulatedTensor(t, index)

    return _map(wrap, out)


# Factories called with device="emulated:N" reach these kernels (registered for PrivateUse1).
def _empty_memory_format(size: Any, dtype: Any = None, layout: Any = None, device: Any = None,
                         pin_memory: Any = None, memory_format: Any = None) -> EmulatedTensor:
    _Allocation(device.index or 0, _nbytes(size, dtype))  # OOM before allocating, like CUDA
    elem = torch.empty(size, dtype=dtype, layout=layout, memory_format=memory_format)
    return EmulatedTensor(elem, device.index or 0)


def _empty_strided(size: Any, stride: Any, dtype: Any = None, layout: Any = None, device: Any = None,
                   pin_memory: Any = None) -> EmulatedTensor:
    elem = torch.empty_strided(size, stride, dtype=dtype, layout=layout)
    return EmulatedTensor(elem, device.index or 0)


def _nbytes(size: Any, dtype: Any) -> int:
    n = 1
    for s in size:
        n *= int(s)
    return n * torch.empty((), dtype=dtype or torch.get_default_dtype()).element_size()


_RESIZING_FACTORIES = (
    "arange", "arange.start", "arange.start_step", "linspace", "logspace", "randperm",
    "eye", "eye.m", "range", "tril_indices", "triu_indices",
)


def _cpu_factory(packet: Any, *args: Any, **kwargs: Any) -> EmulatedTensor:
    target = torch.device(kwargs["device"])
    out = packet(*args, **dict(kwargs, device=torch.device("cpu")))
    return EmulatedTensor(out, target.index or 0)


def _copy_from(src: torch.Tensor, dst: torch.Tensor, non_blocking: bool = False) -> torch.Tensor:
    _unwrap(dst).copy_(_unwrap(src))
    return dst


# ---------------------------------------------------------------------------------------------
# 4. Device rules, copied from CUDA
# ---------------------------------------------------------------------------------------------

@functools.cache
def _native_functions() -> tuple[frozenset[str], frozenset[str]]:
    """From the native_functions.yaml PyTorch ships in torchgen: the ops marked
    `device_check: NoCheck` (TensorIterator ops and others that check devices themselves), and the
    structured ones (which decides the codegen wrapper's name in the error message)."""
    import torchgen

    path = Path(torchgen.__file__).parent / "packaged" / "ATen" / "native" / "native_functions.yaml"
    no_check: set[str] = set()
    structured: set[str] = set()
    current = ""
    for line in path.read_text().splitlines():
        m = re.match(r"- func: ([\w.]+)\(", line)
        if m:
            current = m.group(1)
        elif "device_check: NoCheck" in line:
            no_check.add(current)
        elif re.match(r"\s+structured(_delegate)?:", line) and "False" not in line:
            structured.add(current)
    return frozenset(no_check), frozenset(structured)


def _yaml_name(func: Any) -> str:
    packet, overload = func._schema.name.split("::")[1], func._overloadname
    return packet if overload == "default" else f"{packet}.{overload}"


def _tensors(x: Any) -> list[torch.Tensor]:
    return [t for t in _leaves(x, []) if isinstance(t, torch.Tensor)]


class _Plan(NamedTuple):
    rule: str  # "foreach", "iterator" (TensorIterator) or "common" (codegen check)
    outputs: tuple[tuple[str, int], ...]  # (name, position) of written arguments: in-place self, out=
    inputs: tuple[tuple[str, int], ...]  # (name, position) of positional arguments


@functools.cache
def _plan(func: Any) -> _Plan:
    name = _yaml_name(func)
    no_check, _ = _native_functions()
    rule = "foreach" if name.startswith("_foreach_") else "iterator" if name in no_check else "common"
    outputs, inputs = [], []
    for i, a in enumerate(func._schema.arguments):
        if a.alias_info is not None and a.alias_info.is_write:
            outputs.append((a.name, i))
        if not a.kwarg_only:  # the codegen leaves keyword-only inputs unchecked
            inputs.append((a.name, i))
    return _Plan(rule, tuple(outputs), tuple(inputs))


def _check_devices(func: Any, args: Any, kwargs: Any) -> int | None:
    """Raise CUDA's error for tensors on two devices; return the emulated index the op runs on."""
    plan = _plan(func)
    if plan.rule == "foreach":
        return _check_foreach(func, args, kwargs)
    def value(name: str, i: int) -> Any:
        return args[i] if i < len(args) else kwargs.get(name)

    outputs = [(n, value(n, i)) for n, i in plan.outputs]
    inputs = [(n, value(n, i)) for n, i in plan.inputs]
    if plan.rule == "iterator":
        in_tensors = _tensors([v for _, v in inputs])
        out_tensors = _tensors([v for _, v in outputs])
        # BINARY_OP_CONFIG, BINARY_FLOAT_OP_CONFIG and the comparison config allow one CPU scalar, as
        # does lerp's config (Lerp.cpp: .allow_cpu_scalars(true)); unary and ternary ones do not.
        allow = len(in_tensors) == 2 or func._schema.name in _ALLOW_CPU_SCALAR
        return _check_tensor_iterator(out_tensors, [t for t in in_tensors if not any(t is o for o in out_tensors)],
                                      allow_cpu_scalar=allow)
    written = {n for n, _ in outputs}
    return _check_common_device(func, outputs + [(n, v) for n, v in inputs if n not in written])


_ALLOW_CPU_SCALAR = {"aten::lerp", "aten::lerp_"}


def _check_tensor_iterator(outputs: list[torch.Tensor], inputs: list[torch.Tensor],
                           allow_cpu_scalar: bool = True) -> int | None:
    # TensorIteratorBase::compute_types (aten/src/ATen/TensorIterator.cpp): the common device is the
    # first non-CPU operand's, outputs first; one 0-dim CPU *input* is allowed as a scalar when the
    # config allows CPU scalars (binary and comparison ops); any other operand elsewhere raises,
    # printing the common device first.
    common = next((t.device for t in outputs + inputs if t.device.type != "cpu"), None)
    if common is None:
        return None
    scalars = 1 if allow_cpu_scalar else 0
    for t in outputs + inputs:
        if t.device == common:
            continue
        if scalars and t.device.type == "cpu" and t.dim() == 0 and not any(t is o for o in outputs):
            scalars -= 1
            continue
        raise RuntimeError(
            "Expected all tensors to be on the same device, but found at least two devices, "
            f"{common} and {t.device}!"
        )
    return _emulated_index(common)


def _check_common_device(func: Any, operands: list[tuple[str, Any]]) -> int | None:
    # check_and_update_common_device (aten/src/ATen/core/op_registration/adaption.h/.cpp), which the
    # codegen calls for the out arguments, then the positional tensor arguments, of every CUDA
    # kernel without `device_check: NoCheck`: the first defined tensor sets the common device (even
    # a CPU one) and nothing is exempt, not even a 0-dim CPU tensor. Lists are checked per element
    # under the list's name.
    common: torch.device | None = None
    for name, value in operands:
        for t in _tensors(value):
            if common is None:
                common = t.device
            elif t.device != common:
                raise RuntimeError(
                    "Expected all tensors to be on the same device, but got "
                    f"{name} is on {t.device}, different from other tensors on {common} "
                    f"(when checking argument in method {_wrapper_name(func)})"
                )
    return _emulated_index(common)


def _check_foreach(func: Any, args: Any, kwargs: Any) -> int | None:
    # A foreach op whose tensors are not all on one device leaves CUDA's fast path for the slow one,
    # which runs the per-tensor op index by index (aten/src/ATen/native/ForeachOpsKernels.cpp); each
    # of those is a TensorIterator op with its own device check.
    # A `scalars` tensor (the .Tensor overloads, e.g. _foreach_add_(self, scalars)) holds one number per
    # tensor and must be on CPU (convert_tensor_to_scalar_list): it is not an operand.
    named = dict(zip((a.name for a in func._schema.arguments), args)) | kwargs
    values = [v for name, v in named.items() if name != "scalars"]
    lists = [a for a in values if isinstance(a, (list, tuple)) and _tensors(a)]
    scalars = _tensors([a for a in values if isinstance(a, torch.Tensor)])
    index = None
    for row in zip(*lists):
        row_tensors = _tensors(list(row))
        found = _check_tensor_iterator(row_tensors[:1], row_tensors[1:] + scalars)
        index = found if index is None else index
    return index


def _emulated_index(dev: torch.device | None) -> int | None:
    return (dev.index or 0) if dev is not None and dev.type == NAME else None


def _wrapper_name(func: Any) -> str:
    # torchgen's names: structured kernels wrapper_CUDA_<name>, others wrapper_CUDA_<overload>_<name>
    _, structured = _native_functions()
    base, overload = func._schema.name.split("::")[1], func._overloadname
    overload = "" if overload == "default" else overload
    if _yaml_name(func) in structured:
        return f"wrapper_{NAME.upper()}_{base}" + (f"_{overload}" if overload else "")
    return f"wrapper_{NAME.upper()}_{overload}_{base}"


# ---------------------------------------------------------------------------------------------
# 5. Ops that move data between devices (CUDA allows these across devices)
# ---------------------------------------------------------------------------------------------


def _to_copy(func: Any, args: Any, kwargs: Any) -> Any:
    src = args[0]
    target = kwargs.get("device") or src.device
    cpu_kwargs = dict(kwargs, device=torch.device("cpu"))
    out = aten._to_copy.default(_unwrap(src), **cpu_kwargs)
    if torch.device(target).type == NAME:
        return EmulatedTensor(out, torch.device(target).index or 0)
    return out


def _copy_(func: Any, args: Any, kwargs: Any) -> Any:
    dst, src = args[0], args[1]
    _unwrap(dst).copy_(_unwrap(src), **kwargs)
    return dst


def _set_storage(func: Any, args: Any, kwargs: Any) -> Any:
    # torch.load's _rebuild_tensor: torch.empty((0,), device=emulated:N).set_(storage, offset, size, stride)
    # set_ works in place and its caller keeps `self`, so the wrapper itself takes the new geometry.
    self, storage, *rest = args
    elem = torch.empty(0, dtype=self.dtype).set_(storage, *rest, **kwargs)
    self._alloc = _allocation_of(elem, self.device.index or 0)
    _set_geometry(self, elem)
    return self


def _index_tensor(func: Any, args: Any, kwargs: Any) -> Any:
    # check_indices_on_cpu_or_selfdevice (aten/src/ATen/native/TensorAdvancedIndexing.cpp):
    # "Only allow: `dev_tensor[{cpu,dev}_tensor]`"; CPU indices are then moved to self's device.
    self, indices = args
    for i in indices:
        if i is not None and i.device.type != "cpu" and i.device != self.device:
            raise RuntimeError(
                f"indices should be either on cpu or on the same device as the indexed tensor ({self.device})"
            )
    return _run_on_cpu(func, args, kwargs, _emulated_index(self.device))


def _index_put(func: Any, args: Any, kwargs: Any) -> Any:
    # index_put_ (TensorAdvancedIndexing.cpp): indices on any device are moved to self's; a 0-dim
    # CPU value is moved too; any other value goes through a TensorIterator without CPU scalars.
    self, _, values = args[0], args[1], args[2]
    if not (values.device.type == "cpu" and values.dim() == 0):
        _check_tensor_iterator([self], [values], allow_cpu_scalar=False)
    if self.device.type == "cpu":
        return func(*_map(_unwrap, args), **kwargs)
    return _run_on_cpu(func, args, kwargs, _emulated_index(self.device))


def _where(func: Any, args: Any, kwargs: Any) -> Any:
    # where_self_out (aten/src/ATen/native/TensorCompare.cpp): "allow CPU scalars on non-cpu device":
    # a 0-dim CPU condition, self or other is moved to the device first, any number of them.
    operands = _tensors((args, kwargs))
    out = _tensors(kwargs.get("out"))
    rest = [t for t in operands if not (t.device.type == "cpu" and t.dim() == 0 and not any(t is o for o in out))]
    index = _check_tensor_iterator(out, [t for t in rest if not any(t is o for o in out)], allow_cpu_scalar=False)
    return _run_on_cpu(func, args, kwargs, index)


def _masked_fill(func: Any, args: Any, kwargs: Any) -> Any:
    # masked_fill__cuda (aten/src/ATen/native/cuda/Indexing.cu) checks self and mask itself; a 0-dim
    # value tensor is read as a number (`value.item()`) wherever it lives.
    self, mask, value = args[0], args[1], args[2]
    if self.device != mask.device:
        raise RuntimeError(
            f"expected self and mask to be on the same device, but got mask on {mask.device} and self on {self.device}"
        )
    if isinstance(value, torch.Tensor) and value.dim() != 0:
        raise RuntimeError(
            f"masked_fill_ only supports a 0-dimensional value tensor, but got tensor with {value.dim()} dimension(s)."
        )
    return _run_on_cpu(func, args, kwargs, _emulated_index(self.device))


def _convolution(func: Any, args: Any, kwargs: Any) -> Any:
    # convolution has no CUDA kernel of its own (CompositeExplicitAutograd); its composite checks the
    # parameters' type against the input's (check_input_same_type_as_parameters, Convolution.cpp).
    inputs, weight, bias = args[0], args[1], args[2]
    for name, param in (("weight", weight), ("bias", bias)):
        if param is not None and (param.device.type, param.dtype) != (inputs.device.type, inputs.dtype):
            raise RuntimeError(
                f"Input type ({inputs.type()}) and {name} type ({param.type()}) should be the same"
            )
    index = _check_common_device(func, [("input", inputs), ("weight", weight), ("bias", bias)])
    return _run_on_cpu(func, args, kwargs, index)


def _device_free(func: Any, args: Any, kwargs: Any) -> Any:
    """Ops that read metadata or a value only (`item()`, `is_pinned`)."""
    return func(*_map(_unwrap, args), **_map(_unwrap, kwargs))


_SPECIAL = {
    aten._to_copy.default: _to_copy,
    aten.copy_.default: _copy_,
    aten.set_.source_Storage_storage_offset: _set_storage,
    aten.index.Tensor: _index_tensor,
    aten.index_put_.default: _index_put,
    aten.where.self: _where,
    aten.where.self_out: _where,
    aten.masked_fill_.Scalar: _masked_fill,
    aten.masked_fill_.Tensor: _masked_fill,
    aten.masked_fill.Scalar: _masked_fill,
    aten.masked_fill.Tensor: _masked_fill,
    aten.convolution.default: _convolution,
    aten.index_put.default: _index_put,
    aten._index_put_impl_.default: _index_put,
    aten._local_scalar_dense.default: _device_free,
    aten.is_pinned.default: _device_free,
}


# ---------------------------------------------------------------------------------------------
# 6. Serialization: the location tag "emulated:N", restored like CUDA's "cuda:N"
# ---------------------------------------------------------------------------------------------

_LOCATION_ATTR = "_samedevice_location"


def _reduce(t: EmulatedTensor) -> Any:
    # Saved like a CUDA tensor: _rebuild_tensor_v2 over a storage whose location tag is the device.
    storage = t.elem.untyped_storage()
    setattr(storage, _LOCATION_ATTR, str(t.device))
    typed = torch.storage.TypedStorage(wrap_storage=storage, dtype=t.dtype, _internal=True)
    return (
        torch._utils._rebuild_tensor_v2,
        (typed, t.elem.storage_offset(), tuple(t.size()), t.stride(), t.requires_grad, OrderedDict()),
    )


def _location_tag(storage: Any) -> str | None:
    return getattr(storage, _LOCATION_ATTR, None)


class _RestoredStorage(torch.UntypedStorage):
    """A CPU storage that torch.load is about to rebuild as an emulated tensor."""

    @property
    def device(self) -> torch.device:  # type: ignore[override]
        return torch.device(getattr(self, _LOCATION_ATTR))


def _restore_location(storage: Any, location: str) -> Any:
    m = re.fullmatch(rf"{NAME}(?::(\d+))?", location)
    if m is None:
        return None
    index = int(m.group(1) or 0)
    if index >= DEVICE_COUNT:
        # the rule of torch/serialization.py's _validate_device for CUDA
        raise RuntimeError(
            f"Attempting to deserialize object on {NAME.upper()} device {index} but "
            f"torch.{NAME}.device_count() is {DEVICE_COUNT}. Please use torch.load with "
            "map_location to map your storages to an existing device."
        )
    storage.__class__ = _RestoredStorage
    setattr(storage, _LOCATION_ATTR, f"{NAME}:{index}")
    return storage
