"""3. The tensor: a wrapper subclass whose data is a CPU tensor (`elem`) and whose device is
emulated:N. Every op unwraps to `elem`, runs CPU's kernel, and wraps the result (numerics are CPU's);
the device rules (rules.py) decide first whether CUDA would have refused the call."""

from __future__ import annotations

import functools
from typing import Any

import torch

from samedevice.emulator import native
from samedevice.emulator.memory import Allocation, allocation_of
from samedevice.emulator.registration import DEVICE_COUNT, NAME, check_present, index_of
from samedevice.emulator.storage import device_storage, dlpack_error, host_tensor

aten = torch.ops.aten


def resolve(dev: Any) -> int:
    """The index an op on `dev` lands on: an index-less "emulated" means the current device, as an
    index-less "cuda" does (c10::cuda::current_device via the device guard)."""
    index = index_of(torch.device(dev))
    check_present(index)
    return index


_DEVICES: list[torch.device] = []  # emulated:0, emulated:1, once the name is registered


class EmulatedTensor(torch.Tensor):
    """A tensor on `emulated:N` whose data lives in the CPU tensor `elem`."""

    elem: torch.Tensor
    device_index: int
    _alloc: Allocation

    __torch_function__ = torch._C._disabled_torch_function_impl  # type: ignore[assignment]

    @staticmethod
    def __new__(cls, elem: torch.Tensor, index: int, alloc: Allocation | None = None) -> EmulatedTensor:
        if type(elem) is not torch.Tensor and _traced(elem):
            raise compile_refusal()
        if elem.is_nested:
            return nested_tensor(elem, index, alloc)  # the transformer fast path's packed batch (nested.py)
        if elem.layout != torch.strided:
            # fail loudly: PyTorch cannot wrap a sparse tensor this way (it would crash the process)
            raise NotImplementedError(
                f"emulated accelerator: {elem.layout} tensors are not supported on {NAME} devices "
                "(only dense, strided tensors are)"
            )
        if alloc is None:
            alloc = allocation_of(elem, index)
        r = torch.Tensor._make_wrapper_subclass(
            cls,
            elem.size(),
            strides=elem.stride(),
            storage_offset=elem.storage_offset(),
            dtype=elem.dtype,
            layout=elem.layout,
            device=_DEVICES[index],
            requires_grad=elem.requires_grad,
        )
        r.elem = elem
        r._alloc = alloc
        r.device_index = index  # a plain int: device checks read it without building a torch.device
        return r

    def __repr__(self, *, tensor_contents: Any = None) -> str:  # type: ignore[override]
        text = repr(self.elem)
        suffix = f", device='{self.device}'"
        if self.grad_fn is not None:
            suffix += f", grad_fn=<{type(self.grad_fn).__name__}>"
        elif self.requires_grad:
            suffix += ", requires_grad=True"
        return text[:-1] + suffix + ")" if text.startswith("tensor(") else text

    # Parameter identity across Module._apply (torch/nn/modules/module.py): PyTorch keeps a Parameter
    # (swap_tensors) when the new tensor is a traceable wrapper subclass, i.e. has __tensor_flatten__.
    # CUDA keeps it (by `.data =`) when torch._has_compatible_shallow_copy_type holds, i.e. when the
    # new tensor is a copy of a dense one (`.to`, `.cuda()`, `.half()`), and makes a new Parameter
    # when it is not (`to_empty` from meta). So only a copy (copy_from, _to_copy) offers the protocol.
    is_copy = False

    @property
    def __tensor_flatten__(self) -> Any:
        if torch._guards.TracingContext.try_get() is not None:
            # torch.compile's first look at an input (VariableBuilder.wrap_tensor -> is_fake ->
            # is_traceable_wrapper_subclass) asks for this attribute: refuse there, in one line (below)
            raise compile_refusal()
        if not self.is_copy:
            raise AttributeError("__tensor_flatten__")
        return self._flatten

    def _flatten(self) -> tuple[list[str], int]:
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
        from samedevice.emulator.serialization import reduce

        return reduce(self)

    # storages and addresses (storage.py): the device storage over elem's memory, and its address
    def untyped_storage(self) -> torch.UntypedStorage:
        return device_storage(self.elem.untyped_storage(), self.device_index)

    def data_ptr(self) -> int:
        return self.elem.data_ptr()

    def __dlpack__(self, *args: Any, **kwargs: Any) -> Any:
        raise BufferError(dlpack_error(self))

    def __dlpack_device__(self) -> Any:
        raise ValueError(dlpack_error(self))

    def tolist(self) -> Any:
        # PyTorch refuses tolist() on tensor subclasses; on CUDA it copies to the host and converts
        return self.elem.tolist()

    def numpy(self, *, force: bool = False) -> Any:
        # tensor_to_numpy (torch/csrc/utils/tensor_numpy.cpp): TORCH_CHECK_TYPE(device is CPU, ...);
        # with force=True it copies to the host first. __array__ calls numpy(), so it refuses too.
        if force:
            return self.elem.detach().numpy(force=True)
        raise TypeError(
            f"can't convert {self.device} device type tensor to numpy. Use Tensor.cpu() to copy the "
            "tensor to host memory first."
        )

    @classmethod
    def __torch_dispatch__(  # type: ignore[override]
        cls, func: Any, types: Any, args: Any = (), kwargs: Any = None
    ) -> Any:
        return dispatch(func, args, kwargs or {})


_META = torch._C.DispatchKeySet(torch._C.DispatchKey.Meta)


# torch.compile: Dynamo makes fake copies of its inputs (FakeTensor, FunctionalTensor) and runs the ops on them;
# a wrapper subclass's Python dispatch then meets data it cannot reach, and Dynamo reports "Cannot access data
# pointer ... report a bug to PyTorch" (or "'property' object is not callable") from deep inside. So the
# emulator says in one line what does not work, where Dynamo first looks at an emulated tensor (the
# __tensor_flatten__ above, while a TracingContext is active) and, for other tracers (FakeTensorMode,
# functionalization), where a fake copy would be wrapped. It raises a UserError, which Dynamo passes on as it
# is (convert_frame.py re-raises UserError, and wraps any other exception in InternalTorchDynamoError).
COMPILE_REFUSAL = (
    f"emulated accelerator: torch.compile cannot trace tensors on {NAME} devices (the emulator is a Python "
    "tensor subclass, whose dispatch Dynamo's fake tensors cannot run); run the model eagerly on the device, "
    "or compile it on cpu"
)


def _traced(elem: torch.Tensor) -> bool:
    from torch._subclasses.fake_tensor import FakeTensor
    from torch._subclasses.functional_tensor import FunctionalTensor

    return isinstance(elem, (FakeTensor, FunctionalTensor))


def compile_refusal() -> Exception:
    from torch._dynamo.exc import UserError, UserErrorType

    return UserError(UserErrorType.INVALID_INPUT, COMPILE_REFUSAL)


def set_geometry(wrapper: EmulatedTensor, elem: torch.Tensor) -> None:
    """Give the wrapper elem's sizes, strides and offset, in place (the Meta kernel of set_ touches
    metadata only), and make elem its data."""
    aten.set_.source_Storage_storage_offset.redispatch(
        _META, wrapper, torch.Tensor.untyped_storage(wrapper), elem.storage_offset(), elem.size(), elem.stride()
    )
    wrapper.elem = elem


NATIVE = False  # the native core (native.py) runs this process: device tensors are plain tensors


def unwrap(x: Any) -> Any:
    if NATIVE:
        return native.host(x)
    return x.elem if isinstance(x, EmulatedTensor) else x


# Op arguments nest at most lists of tensors (Tensor[], Tensor?[]) in tuples and dicts: these two
# walkers do what torch.utils._pytree would, several times faster (the dispatch is hot).
def tree_map(fn: Any, x: Any) -> Any:
    if isinstance(x, (list, tuple)):
        return type(x)(tree_map(fn, v) for v in x)
    if isinstance(x, dict):
        return {k: tree_map(fn, v) for k, v in x.items()}
    return fn(x)


def leaves(x: Any, out: list[Any]) -> list[Any]:
    if isinstance(x, (list, tuple)):
        for v in x:
            leaves(v, out)
    elif isinstance(x, dict):
        for v in x.values():
            leaves(v, out)
    else:
        out.append(x)
    return out


def tensors(x: Any) -> list[torch.Tensor]:
    return [t for t in leaves(x, []) if isinstance(t, torch.Tensor)]


def same_index(tensors: Any) -> int | None:
    """The index all of `tensors` share when every one is an emulated tensor on it (the common case,
    which needs no device check), else None."""
    index = None
    for t in tensors:
        if type(t) is not EmulatedTensor or (index is not None and t.device_index != index):
            return None
        index = t.device_index
    return index


def emulated_index(dev: torch.device | None) -> int | None:
    return (dev.index or 0) if dev is not None and dev.type == NAME else None


def _unwrap_flat(args: Any) -> list[Any] | None:
    """The args with each emulated tensor replaced by its CPU data, when no argument is a list
    (the common case, and the hot path); None otherwise."""
    out = []
    for a in args:
        if type(a) is EmulatedTensor:
            out.append(a.elem)
        elif type(a) in (list, tuple):
            return None
        else:
            out.append(a)
    return out


def _unwrap_arg(a: Any) -> Any:
    """One op argument with its emulated tensors replaced by their CPU data: op arguments are at
    most lists of tensors (Tensor[], Tensor?[]), so one level is all there is."""
    t = type(a)
    if t is EmulatedTensor:
        return a.elem
    if t is list or t is tuple:
        return [x.elem if type(x) is EmulatedTensor else x for x in a]
    return a


def run_on_cpu(func: Any, args: Any, kwargs: Any, index: int | None) -> Any:
    if NATIVE:
        return native.run_on_host(func, args, kwargs, index)
    flat = None if kwargs else _unwrap_flat(args)
    if flat is not None and not _is_mutable(func):
        out = func._op(*flat)  # OpOverload.__call__ without its Python frame
        if type(out) is torch.Tensor:
            return out if index is None else EmulatedTensor(out, index)
        return wrap_outputs(out, {}, index)
    cpu_args = [_unwrap_arg(a) for a in args]
    cpu_kwargs = {k: _unwrap_arg(v) for k, v in kwargs.items()}
    if kwargs.get("device") is not None:
        # new_empty_strided, empty_like(..., device=...) & co.: the result goes where `device` says
        target = torch.device(kwargs["device"])
        index = resolve(target) if target.type == NAME else None
        if index is not None:
            cpu_kwargs["device"] = torch.device("cpu")  # elsewhere (meta, cpu) it stays as asked
    out = func(*cpu_args, **cpu_kwargs)
    if out is None or (type(out) in (list, tuple) and not out):
        return out  # in-place foreach ops return nothing
    same: dict[int, EmulatedTensor] = {}
    if _is_mutable(func):
        # in-place and out= ops return their input: hand back the caller's emulated tensor
        originals = leaves((args, kwargs), [])
        unwrapped = leaves((cpu_args, cpu_kwargs), [])
        same = {id(u): o for u, o in zip(unwrapped, originals) if isinstance(o, EmulatedTensor)}
    return wrap_outputs(out, same, index)


_MUTABLE: dict[int, bool] = {}  # by id(func), as rules._PLANS


def _is_mutable(func: Any) -> bool:
    found = _MUTABLE.get(id(func))
    if found is None:
        found = _MUTABLE[id(func)] = func._schema.is_mutable
    return found


def wrap_outputs(out: Any, same: dict[int, EmulatedTensor], index: int | None) -> Any:
    if NATIVE:
        return native.wrap(out, same, index)  # type: ignore[arg-type]

    def wrap(t: Any) -> Any:
        if not isinstance(t, torch.Tensor) or isinstance(t, EmulatedTensor) or index is None:
            return t
        if id(t) in same:
            orig = same[id(t)]
            if orig.shape != t.shape or orig.stride() != t.stride():
                set_geometry(orig, t)  # resize_, squeeze_, out= resized: follow the CPU result
            return orig
        # views share their base's block of device memory; anything else is a new allocation
        return EmulatedTensor(t, index)

    return tree_map(wrap, out)


# ---- factories: device="emulated:N" reaches these kernels (registered for PrivateUse1) ------------


def empty_memory_format(size: Any, dtype: Any = None, layout: Any = None, device: Any = None,
                        pin_memory: Any = None, memory_format: Any = None) -> EmulatedTensor:
    index = resolve(device)
    Allocation(index, _nbytes(size, dtype))  # OOM before allocating, like CUDA
    elem = torch.empty(size, dtype=dtype, layout=layout, memory_format=memory_format)
    return EmulatedTensor(elem, index)


def empty_strided(size: Any, stride: Any, dtype: Any = None, layout: Any = None, device: Any = None,
                  pin_memory: Any = None) -> EmulatedTensor:
    index = resolve(device)
    elem = torch.empty_strided(size, stride, dtype=dtype, layout=layout)
    return EmulatedTensor(elem, index)



def _nbytes(size: Any, dtype: Any) -> int:
    n = 1
    for s in size:
        n *= int(s)
    return n * torch.empty((), dtype=dtype or torch.get_default_dtype()).element_size()


# Composite factories that fill a resized `out=` tensor (arange & co.) run on CPU and are wrapped
# (randperm, which draws, is rng.py's).
RESIZING_FACTORIES = (
    "arange", "arange.start", "arange.start_step", "linspace", "logspace",
    "eye", "eye.m", "range", "tril_indices", "triu_indices",
)


def cpu_factory(packet: Any, *args: Any, **kwargs: Any) -> EmulatedTensor:
    index = resolve(kwargs["device"])
    out = packet(*args, **dict(kwargs, device=torch.device("cpu")))
    return EmulatedTensor(out, index)


def copy_from(src: torch.Tensor, dst: torch.Tensor, non_blocking: bool = False) -> torch.Tensor:
    # `.to(device)` of a CPU tensor: CPU's _to_copy allocates on the device, then copies here
    host_tensor(dst).copy_(host_tensor(src))  # a plain tensor over a device storage too (storage.py)
    if isinstance(dst, EmulatedTensor):
        dst.is_copy = True
    return dst


def local_scalar_dense(t: torch.Tensor) -> Any:
    # torch.tensor([x, y]) of 0-dim device tensors reads each with Python dispatch off
    # (internal_new_from_data), so `.item()` needs a PrivateUse1 kernel, as _copy_from does
    return host_tensor(t).item()


def _register_kernels() -> None:
    _DEVICES[:] = [torch.device(NAME, i) for i in range(DEVICE_COUNT)]
    lib = torch.library.Library("aten", "IMPL")
    lib.impl("empty.memory_format", empty_memory_format, "PrivateUse1")
    lib.impl("empty_strided", empty_strided, "PrivateUse1")
    # torch.tensor(data, device=...) copies with the Python key excluded, so it lands here
    lib.impl("_copy_from", copy_from, "PrivateUse1")
    lib.impl("_local_scalar_dense", local_scalar_dense, "PrivateUse1")
    for name in RESIZING_FACTORIES:
        lib.impl(name, functools.partial(cpu_factory, getattr(aten, name.split(".")[0])), "PrivateUse1")
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


_libs: list[torch.library.Library] = []


def nested_tensor(elem: torch.Tensor, index: int, alloc: Allocation | None) -> EmulatedTensor:
    """Replaced by nested.EmulatedNestedTensor when nested.py is imported (it subclasses the one above)."""
    raise RuntimeError("samedevice.emulator.nested is not loaded")


def dispatch(func: Any, args: Any, kwargs: Any) -> Any:
    """Replaced by rules.dispatch when rules.py is imported (it needs the tensor class above)."""
    raise RuntimeError("samedevice.emulator.rules is not loaded")
