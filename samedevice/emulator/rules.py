"""4. The device rules, each copied from a CUDA rule in PyTorch's C++ (cited beside it), and the
dispatch that picks one per op from CUDA's kernel table (kernels.py):

- an op with a CUDA kernel of its own gets torchgen's whole-op check (`check_and_update_common_device`)
  unless it is marked `device_check: NoCheck`, in which case the kernel's own check is copied
  (TensorIterator's, mostly);
- an op whose only kernel is CompositeExplicitAutograd runs that composite, as on CUDA, so each op
  inside it checks devices (torch.stack names `cat`, torch.allclose ends in `eq`'s TensorIterator);
- an op with neither (a CPU-only kernel) fails as PyTorch's dispatcher fails for CUDA;
- a few ops whose CUDA kernels check devices their own way are special (SPECIAL, below).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import torch

from samedevice.emulator import rng
from samedevice.emulator import tensor as _tensor
from samedevice.emulator.kernels import Kernels, table
from samedevice.emulator.registration import NAME
from samedevice.emulator.tensor import EmulatedTensor, emulated_index, run_on_cpu, same_index, tensors, tree_map, unwrap

_COMPOSITE_KEYS = (torch._C.DispatchKey.CompositeExplicitAutograd,
                   torch._C.DispatchKey.CompositeExplicitAutogradNonFunctional,
                   torch._C.DispatchKey.CompositeImplicitAutograd)


class Plan(NamedTuple):
    rule: str  # "special", "composite", "direct", "missing", "foreach", "iterator" or "common"
    outputs: tuple[tuple[str, int], ...]  # (name, position) of written arguments: in-place self, out=
    inputs: tuple[tuple[str, int], ...]  # (name, position) of positional arguments
    structured: bool
    # a random op whose CPU kernel runs here: its `Generator? generator` argument's (name, position),
    # or rng.SEEDED for one that draws from the default generator; None for every other op
    random: tuple[str, int] | None = None


_PLANS: dict[int, Plan] = {}  # by id(func): OpOverloads live as long as the process, and hash slowly


def dispatch(func: Any, args: Any, kwargs: Any, plan: Plan | None = None) -> Any:
    plan = plan or _PLANS.get(id(func)) or _plan(func)
    if plan.random is not None:  # it draws from its device's generator, not the CPU's (rng.py)
        plain = plan._replace(random=None)
        return rng.draw(plan.random, _random_index(args, kwargs), args, kwargs,
                        lambda a, k: dispatch(func, a, k, plain))
    rule = plan.rule
    if rule == "direct":
        return run_on_cpu(func, args, kwargs, _first_index(args, kwargs))
    if rule == "composite":
        # CUDA has no kernel of its own: it runs PyTorch's composite kernel, whose parts each check
        return func._op_dk(_composite_key(func), *args, **kwargs)
    if rule == "missing":
        raise NotImplementedError(
            f"Could not run '{func._schema.name}' with arguments from the '{NAME}' backend: it has no dense CUDA "
            "kernel in native_functions.yaml (a CPU-only op fails on CUDA too; sparse, quantized and nested "
            "kernels are not emulated: the emulator holds dense, strided tensors only)"
        )
    try:
        if rule == "special":
            return SPECIAL[func](func, args, kwargs)
        index = check_devices(func, plan, args, kwargs)
    except RuntimeError as e:
        # a device error with a meta tensor among the arguments is not CUDA's: its Meta kernel runs
        # (NotImplementedError & co. are the op's own answer, as meta.to(device)'s "no data")
        if type(e) is not RuntimeError or not _has_meta(args, kwargs):
            raise
        return with_meta(func, args, kwargs)
    try:
        return run_on_cpu(func, args, kwargs, index)
    except RuntimeError:
        sibling = scalar_overload(func, args)
        if sibling is None:
            raise
        return run_on_cpu(sibling, args, kwargs, index)


def scalar_overload(func: Any, args: Any) -> Any:
    """The overload that takes a Scalar where `func` takes a Tensor and got a Python number, or None.
    A composite that wraps a scalar (fmod.Scalar_out: `at::fmod_out(out, self, wrapped_scalar_tensor(
    other))`) hands its inner op a wrapped-number tensor, which reaches Python as a plain number
    (torch/csrc/jit/python/pybind_utils.cpp, toPyObject), and most ops' Python binding refuses a number
    for a Tensor. The Scalar overload on CPU wraps it again, in C++, as CUDA's composite did."""
    numbers = {i for i, (a, v) in enumerate(zip(func._schema.arguments, args))
               if str(a.type) == "Tensor" and type(v) in (int, float, bool, complex)}
    if not numbers:
        return None
    for name in func.overloadpacket.overloads():
        other = getattr(func.overloadpacket, name)
        mine, theirs = func._schema.arguments, other._schema.arguments
        if len(mine) == len(theirs) and all(
            a.name == b.name and (str(b.type) == "number" if i in numbers else str(a.type) == str(b.type))
            for i, (a, b) in enumerate(zip(mine, theirs))
        ):
            return other
    return None


def _has_meta(args: Any, kwargs: Any) -> bool:
    return any(t.device.type == "meta" for t in tensors((args, kwargs)))


def with_meta(func: Any, args: Any, kwargs: Any) -> Any:
    """An op with a meta tensor among its arguments. Meta is the highest backend key (c10/core/
    DispatchKey.h: C10_FORALL_BACKEND_COMPONENTS ends with Meta), so on CUDA such an op runs its Meta
    kernel, which has no codegen device check: `x @ meta_weight` goes through (a deferred-init module's
    forward), and a TensorIterator op raises "Tensor on device meta is not on the expected device
    cuda:0!". CPU's tensors take the same kernel, so the op runs as CPU runs it, with the device where
    CPU's result and message say cpu."""
    originals = {id(t.elem): t for t in tensors((args, kwargs)) if type(t) is EmulatedTensor}
    index = next(iter(originals.values())).device_index
    try:
        out = func(*tree_map(unwrap, args), **tree_map(unwrap, kwargs))
    except RuntimeError as e:
        if "device cpu" not in str(e):
            raise
        raise type(e)(str(e).replace("device cpu", f"device {NAME}:{index}")) from None

    def wrap(t: Any) -> Any:
        if not isinstance(t, torch.Tensor) or t.device.type != "cpu":
            return t
        return originals[id(t)] if id(t) in originals else EmulatedTensor(t, index)

    return tree_map(wrap, out)


def _first_index(args: Any, kwargs: Any) -> int | None:
    """The emulated index of an op's first tensor argument (None for CPU): its only tensor, for the
    one-tensor ops the "direct" rule runs."""
    for a in args:
        if type(a) is EmulatedTensor:
            return a.device_index  # the hot path: a plain int, no torch.device built
        if isinstance(a, torch.Tensor) or type(a) in (list, tuple):
            break
    return next((emulated_index(t.device) for t in tensors((args, kwargs))), None)


def _random_index(args: Any, kwargs: Any) -> int:
    """The device a random op draws on: its `device=` (rand_like(x, device=...)), else its first
    emulated tensor's (CUDA's kernel runs under that device's guard, and takes the current device's
    default generator: getDefaultCUDAGenerator)."""
    if kwargs.get("device") is not None and torch.device(kwargs["device"]).type == NAME:
        return _tensor.resolve(kwargs["device"])
    return next(t.device_index for t in tensors((args, kwargs)) if isinstance(t, EmulatedTensor))


def _composite_key(func: Any) -> Any:
    return next(k for k in _COMPOSITE_KEYS if torch._C._dispatch_has_kernel_for_dispatch_key(func.name(), k))


def yaml_name(func: Any) -> str:
    packet, overload = func._schema.name.split("::")[1], func._overloadname
    return packet if overload == "default" else f"{packet}.{overload}"


def _plan(func: Any) -> Plan:
    outputs, inputs, n_tensors, generator = [], [], 0, None
    for i, a in enumerate(func._schema.arguments):
        if "Generator" in str(a.type):
            generator = (a.name, i)
        if a.alias_info is not None and a.alias_info.is_write:
            outputs.append((a.name, i))
        if not a.kwarg_only:  # the codegen leaves keyword-only inputs unchecked
            inputs.append((a.name, i))
        kind = str(a.type)  # Tensor, Optional[Tensor], List[Tensor], List[Optional[Tensor]]
        if "Tensor" in kind:
            n_tensors += 2 if kind.startswith("List[") else 1
    found = table().get(yaml_name(func)) if func.namespace == "aten" else None
    rule = _rule(func, found, n_tensors)
    if generator is None and torch.Tag.nondeterministic_seeded in func.tags:
        generator = rng.SEEDED
    if rule in ("composite", "missing", "special"):
        generator = None  # a composite's parts draw, each on its own; the others run no random kernel
    plan = Plan(rule, tuple(outputs), tuple(inputs), bool(found and found.structured), generator)
    _PLANS[id(func)] = plan
    return plan


def _rule(func: Any, found: Kernels | None, n_tensors: int) -> str:
    if func in SPECIAL:
        return "special"
    if found is None:
        # not an aten op PyTorch's table knows (prims, torch.library's custom ops): torchgen's whole-op
        # check lives only in native ops' generated wrappers, so on CUDA one with a composite kernel runs
        # it, each part checking on its own (prims.add ends in add's TensorIterator); one with backend
        # kernels only is checked as a whole here, the closest stand-in for a kernel the emulator lacks
        if not any(torch._C._dispatch_has_kernel_for_dispatch_key(func.name(), k) for k in _COMPOSITE_KEYS):
            return "common"
    elif not found.composite:
        if not found.cuda:
            return "missing"
        if yaml_name(func).startswith("_foreach_"):
            return "foreach"
        return "iterator" if found.no_check else "common"
    # with one tensor argument there is nothing to mix, and the composite's parts would only cost
    # dispatches: run it whole
    return "composite" if n_tensors >= 2 else "direct"


def check_devices(func: Any, plan: Plan, args: Any, kwargs: Any) -> int | None:
    """Raise CUDA's error for tensors on two devices; return the emulated index the op runs on."""
    if plan.rule == "foreach":
        return _check_foreach(func, args, kwargs)

    def value(name: str, i: int) -> Any:
        return args[i] if i < len(args) else kwargs.get(name)

    if plan.rule == "iterator" and not plan.outputs and not kwargs:
        # the hot path: a functional TensorIterator op, its tensors in args
        ins = [a for a in args if isinstance(a, torch.Tensor)]
        index = same_index(ins)
        if index is not None:
            return index
        if len(ins) == len(args) or not any(type(a) in (list, tuple) for a in args):
            allow = len(ins) == 2 or func._schema.name in _ALLOW_CPU_SCALAR
            return check_tensor_iterator([], ins, allow_cpu_scalar=allow)
    if not kwargs and not any(type(a) in (list, tuple) for a in args):
        index = same_index([a for a in args if isinstance(a, torch.Tensor)])
        if index is not None:
            return index  # every argument is a tensor on one emulated device: no rule can object
    outputs = [(n, value(n, i)) for n, i in plan.outputs]
    inputs = [(n, value(n, i)) for n, i in plan.inputs]
    if plan.rule == "iterator":
        in_tensors = tensors([v for _, v in inputs])
        out_tensors = tensors([v for _, v in outputs])
        # BINARY_OP_CONFIG, BINARY_FLOAT_OP_CONFIG and the comparison config allow one CPU scalar, as
        # does lerp's config (Lerp.cpp: .allow_cpu_scalars(true)); unary and ternary ones do not.
        allow = len(in_tensors) == 2 or func._schema.name in _ALLOW_CPU_SCALAR
        return check_tensor_iterator(out_tensors, [t for t in in_tensors if not any(t is o for o in out_tensors)],
                                     allow_cpu_scalar=allow)
    written = {n for n, _ in outputs}
    return check_common_device(func, plan, outputs + [(n, v) for n, v in inputs if n not in written])


_ALLOW_CPU_SCALAR = {"aten::lerp", "aten::lerp_"}


def check_tensor_iterator(outputs: list[torch.Tensor], inputs: list[torch.Tensor],
                          allow_cpu_scalar: bool = True) -> int | None:
    # TensorIteratorBase::compute_types (aten/src/ATen/TensorIterator.cpp): the common device is the
    # first non-CPU operand's, outputs first; one 0-dim CPU *input* is allowed as a scalar when the
    # config allows CPU scalars (binary and comparison ops); any other operand elsewhere raises,
    # printing the common device first.
    operands = outputs + inputs if outputs else inputs
    common = None
    for t in operands:
        if t.device.type != "cpu":
            common = t.device
            break
    if common is None:
        return None
    scalars = 1 if allow_cpu_scalar else 0
    for t in operands:
        if t.device == common:
            continue
        if scalars and t.device.type == "cpu" and t.dim() == 0 and not any(t is o for o in outputs):
            scalars -= 1
            continue
        raise RuntimeError(
            "Expected all tensors to be on the same device, but found at least two devices, "
            f"{common} and {t.device}!"
        )
    return emulated_index(common)


def check_common_device(func: Any, plan: Plan | None, operands: list[tuple[str, Any]]) -> int | None:
    # check_and_update_common_device (aten/src/ATen/core/op_registration/adaption.h/.cpp), which the
    # codegen calls for the out arguments, then the positional tensor arguments, of every CUDA
    # kernel without `device_check: NoCheck`: the first defined tensor sets the common device (even
    # a CPU one) and nothing is exempt, not even a 0-dim CPU tensor. Lists are checked per element
    # under the list's name.
    common: torch.device | None = None
    for name, value in operands:
        for t in tensors(value):
            if common is None:
                common = t.device
            elif t.device != common:
                raise RuntimeError(
                    "Expected all tensors to be on the same device, but got "
                    f"{name} is on {t.device}, different from other tensors on {common} "
                    f"(when checking argument in method {_wrapper_name(func, plan)})"
                )
    return emulated_index(common)


def _check_foreach(func: Any, args: Any, kwargs: Any) -> int | None:
    # A foreach op whose tensors are not all on one device leaves CUDA's fast path for the slow one,
    # which runs the per-tensor op index by index (aten/src/ATen/native/ForeachOpsKernels.cpp); each
    # of those is a TensorIterator op with its own device check.
    # A `scalars` tensor (the .Tensor overloads, e.g. _foreach_add_(self, scalars)) holds one number per
    # tensor and must be on CPU (convert_tensor_to_scalar_list): it is not an operand.
    names = _arg_names(func)
    values = [v for name, v in zip(names, args) if name != "scalars"]
    values += [v for name, v in kwargs.items() if name != "scalars"]
    lists = [a for a in values if type(a) in (list, tuple) and any(isinstance(t, torch.Tensor) for t in a)]
    scalars = [a for a in values if isinstance(a, torch.Tensor)]
    index = same_index([t for group in lists for t in group if t is not None] + scalars)
    if index is not None:
        return index  # all on one device: CUDA's fast path, nothing to check
    for row in zip(*lists):
        row_tensors = tensors(list(row))
        found = check_tensor_iterator(row_tensors[:1], row_tensors[1:] + scalars)
        index = found if index is None else index
    return index


_ARG_NAMES: dict[int, tuple[str, ...]] = {}


def _arg_names(func: Any) -> tuple[str, ...]:
    names = _ARG_NAMES.get(id(func))
    if names is None:
        names = _ARG_NAMES[id(func)] = tuple(a.name for a in func._schema.arguments)
    return names


def _wrapper_name(func: Any, plan: Plan | None) -> str:
    # torchgen's names: structured kernels wrapper_CUDA_<name>, others wrapper_CUDA_<overload>_<name>
    base, overload = func._schema.name.split("::")[1], func._overloadname
    overload = "" if overload == "default" else overload
    if plan is not None and plan.structured:
        return f"wrapper_{NAME.upper()}_{base}" + (f"_{overload}" if overload else "")
    return f"wrapper_{NAME.upper()}_{overload}_{base}"


# ---- ops whose CUDA kernels check devices their own way ----------------------------------------


def _index_tensor(func: Any, args: Any, kwargs: Any) -> Any:
    # check_indices_on_cpu_or_selfdevice (aten/src/ATen/native/TensorAdvancedIndexing.cpp):
    # "Only allow: `dev_tensor[{cpu,dev}_tensor]`"; CPU indices are then moved to self's device.
    self, indices = args
    for i in indices:
        if i is not None and i.device.type != "cpu" and i.device != self.device:
            raise RuntimeError(
                f"indices should be either on cpu or on the same device as the indexed tensor ({self.device})"
            )
    return run_on_cpu(func, args, kwargs, emulated_index(self.device))


def _index_put(func: Any, args: Any, kwargs: Any) -> Any:
    # index_put_ (TensorAdvancedIndexing.cpp): indices on any device are moved to self's; a 0-dim
    # CPU value is moved too; any other value goes through a TensorIterator without CPU scalars.
    self, _, values = args[0], args[1], args[2]
    if not (values.device.type == "cpu" and values.dim() == 0):
        check_tensor_iterator([self], [values], allow_cpu_scalar=False)
    if self.device.type == "cpu":
        return func(*tree_map(unwrap, args), **kwargs)
    return run_on_cpu(func, args, kwargs, emulated_index(self.device))


def _where(func: Any, args: Any, kwargs: Any) -> Any:
    # where_self_out (aten/src/ATen/native/TensorCompare.cpp): "allow CPU scalars on non-cpu device":
    # a 0-dim CPU condition, self or other is moved to the device first, any number of them.
    operands = tensors((args, kwargs))
    out = tensors(kwargs.get("out"))
    rest = [t for t in operands if not (t.device.type == "cpu" and t.dim() == 0 and not any(t is o for o in out))]
    index = check_tensor_iterator(out, [t for t in rest if not any(t is o for o in out)], allow_cpu_scalar=False)
    return run_on_cpu(func, args, kwargs, index)


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
    return run_on_cpu(func, args, kwargs, emulated_index(self.device))


def _convolution(func: Any, args: Any, kwargs: Any) -> Any:
    # convolution has no CUDA kernel of its own (CompositeExplicitAutograd); its composite checks the
    # parameters' type against the input's (check_input_same_type_as_parameters, Convolution.cpp),
    # then picks a backend by the input's device, which a CPU-backed tensor cannot follow: the
    # check is copied here and CPU's convolution runs.
    inputs, weight, bias = args[0], args[1], args[2]
    for name, param in (("weight", weight), ("bias", bias)):
        if param is not None and (param.device.type, param.dtype) != (inputs.device.type, inputs.dtype):
            raise RuntimeError(
                f"Input type ({inputs.type()}) and {name} type ({param.type()}) should be the same"
            )
    index = check_common_device(func, None, [("input", inputs), ("weight", weight), ("bias", bias)])
    return run_on_cpu(func, args, kwargs, index)


_C10_NAMES = {torch.float32: "Float", torch.float64: "Double", torch.float16: "Half", torch.bfloat16: "BFloat16"}


def _fused_adam(func: Any, args: Any, kwargs: Any) -> Any:
    # CUDA's fused Adam and AdamW take float32 params and grads with bfloat16 states, the mixed-
    # precision path (aten/src/ATen/native/cuda/fused_adam_impl.cu and fused_adamw_impl.cu: when
    # params[0] and exp_avgs[0] differ in dtype, validate_mixed_precision_dtypes, then
    # FusedAdamMathFunctorMP, which computes in float32 and rounds each state back to bfloat16).
    # CPU's fused kernel takes one dtype, so the emulator validates as CUDA does, then runs CPU's
    # kernel on float32 copies of the states and rounds them back.
    named = dict(zip((a.name for a in func._schema.arguments), args)) | kwargs
    params, grads = named["self"], named["grads"]
    states = [named["exp_avgs"], named["exp_avg_sqs"], named["max_exp_avg_sqs"]]
    plan = _PLANS.get(id(func)) or _plan(func)
    if not params or params[0].dtype == states[0][0].dtype:
        return run_on_cpu(func, args, kwargs, check_devices(func, plan, args, kwargs))
    op_name = "Mixed-precision fused " + ("AdamW" if "adamw" in func._schema.name else "Adam")
    for what, found, wanted in (("float32 params", params, torch.float32), ("float32 grads", grads, torch.float32),
                                *(("bfloat16 optimizer states", s, torch.bfloat16) for s in states if s)):
        if found[0].dtype != wanted:
            raise RuntimeError(f"{op_name} requires {what}, got {_C10_NAMES.get(found[0].dtype, found[0].dtype)}")
    wide = [[t.float() for t in s] for s in states]
    names = ("exp_avgs", "exp_avg_sqs", "max_exp_avg_sqs")
    positional = [a.name for a in func._schema.arguments][:len(args)]
    wide_named = dict(zip(positional, args)) | kwargs | dict(zip(names, wide))
    new_args = tuple(wide_named[n] for n in positional)
    new_kwargs = {k: v for k, v in wide_named.items() if k not in positional}
    run_on_cpu(func, new_args, new_kwargs, check_devices(func, plan, new_args, new_kwargs))
    for narrow, widened in zip(states, wide):
        for t, w in zip(narrow, widened):
            unwrap(t).copy_(unwrap(w))
    return None


def _device_free(func: Any, args: Any, kwargs: Any) -> Any:
    """Ops that read metadata or a value only (`item()`, `is_pinned`)."""
    return func(*tree_map(unwrap, args), **tree_map(unwrap, kwargs))


aten = torch.ops.aten
SPECIAL: dict[Any, Any] = {
    aten.index.Tensor: _index_tensor,
    aten.index_put_.default: _index_put,
    aten.index_put.default: _index_put,
    aten._index_put_impl_.default: _index_put,
    aten.where.self: _where,
    aten.where.self_out: _where,
    aten.masked_fill_.Scalar: _masked_fill,
    aten.masked_fill_.Tensor: _masked_fill,
    aten.masked_fill.Scalar: _masked_fill,
    aten.masked_fill.Tensor: _masked_fill,
    aten.convolution.default: _convolution,
    aten._local_scalar_dense.default: _device_free,
    aten.is_pinned.default: _device_free,
    aten._fused_adam_.default: _fused_adam,
    aten._fused_adam_.tensor_lr: _fused_adam,
    aten._fused_adamw_.default: _fused_adam,
    aten._fused_adamw_.tensor_lr: _fused_adam,
}

_tensor.dispatch = dispatch  # EmulatedTensor.__torch_dispatch__ calls the rules from here on


# ---- the native core's plans (native.py, csrc/fallback.cpp) -------------------------------------
# The same rules for the native core: its C++ fallback asks once per op which check to make (the numbers are
# fallback.cpp's `Rule`s), and takes by name the ops that have a CUDA kernel of their own beside a composite one.

class NativePlan(NamedTuple):
    rule: int
    allow_cpu_scalar: bool
    random: int  # -1: draws nothing; -2: a seeded op without a generator argument; else that argument's position
    text: str  # the wrapper's name for the common check, the error for a missing op
    nested: bool  # CUDA has a NestedTensorCUDA kernel for it: a nested tensor on the device may take it
    nested_text: str  # that kernel's wrapper name, or the error of a nested tensor given to an op without one


COMMON, ITERATOR, FOREACH, MISSING, INDEX, INDEX_PUT, WHERE, MASKED_FILL, UNCHECKED = range(9)
NATIVE_SPECIAL = {
    "index.Tensor": INDEX, "index_put_": INDEX_PUT, "index_put": INDEX_PUT, "_index_put_impl_": INDEX_PUT,
    "where.self": WHERE, "where.self_out": WHERE, "masked_fill_.Scalar": MASKED_FILL,
    "masked_fill_.Tensor": MASKED_FILL, "masked_fill.Scalar": MASKED_FILL, "masked_fill.Tensor": MASKED_FILL,
    "is_pinned": UNCHECKED,
}
# the native core's own kernels and the copies across devices (csrc/kernels.cpp): never the fallback's
_NATIVE_OWN = {"copy_", "_to_copy", "_copy_from", "_copy_from_and_resize", "_local_scalar_dense", "empty.memory_format",
               "empty_strided", "as_strided", "view", "_reshape_alias", "resize_", "set_.source_Tensor",
               "set_.source_Storage", "set_.source_Storage_storage_offset", "_has_compatible_shallow_copy_type"}


def native_plan(op: str) -> NativePlan:
    """The plan for `op` ("aten::add.Tensor", "aten::mm"), as `_plan` makes it for the subclass core."""
    qualified, _, overload = op.partition(".")
    namespace, packet = qualified.split("::")
    func = getattr(getattr(getattr(torch.ops, namespace), packet), overload or "default")
    name = packet + (f".{overload}" if overload else "")
    found = table().get(name) if namespace == "aten" else None
    if name in NATIVE_SPECIAL:
        rule = NATIVE_SPECIAL[name]
    else:
        kind = _rule(func, found, n_tensors=2)
        rule = {"missing": MISSING, "foreach": FOREACH, "iterator": ITERATOR}.get(kind, COMMON)
    plan = _plan(func)
    random = -1 if plan.random is None else (-2 if plan.random is rng.SEEDED else plan.random[1])
    if rule == MISSING:
        text = (f"Could not run '{op}' with arguments from the '{NAME}' backend: it has no dense CUDA kernel in "
                "native_functions.yaml (a CPU-only op fails on CUDA too)")
    else:
        text = _wrapper_name(func, plan)
    if found and found.nested_cuda:
        # torchgen gives NestedTensorCUDA kernels CUDA's device check, named by their dispatch key
        nested_text = text.replace(f"wrapper_{NAME.upper()}_", f"wrapper_NestedTensor{NAME.upper()}_")
    else:
        nested_text = (f"Could not run '{op}' with arguments from the 'NestedTensor' backend on {NAME}: it has no "
                       "NestedTensorCUDA kernel in native_functions.yaml")
    return NativePlan(rule, func._schema.name in _ALLOW_CPU_SCALAR, random, text,
                      bool(found and found.nested_cuda), nested_text)


# the ops whose rule is Python's SPECIAL kernel on the native core too: CUDA-only kernels (cuda_only.py), CUDA's own
# dtype checks (cuda_paths.py), fused Adam's mixed precision (above); registered on PrivateUse1 (native.py)
NATIVE_PYTHON = (
    "_thnn_fused_lstm_cell", "_thnn_fused_lstm_cell_backward_impl", "_thnn_fused_gru_cell",
    "_thnn_fused_gru_cell_backward", "upsample_bilinear2d", "_upsample_bilinear2d_aa", "_upsample_bicubic2d_aa",
    "upsample_bicubic2d", "_embedding_bag", "_embedding_bag_forward_only", "_fused_adam_", "_fused_adam_.tensor_lr",
    "_fused_adamw_", "_fused_adamw_.tensor_lr",
)


def native_by_name() -> list[str]:
    """The ops the native core's fallback takes by name: a CUDA kernel of their own beside a composite kernel
    (a structured op's functional and in-place variants), which the dispatcher would otherwise give the device."""
    names = []
    for name, found in table().items():
        if not found.cuda or name in _NATIVE_OWN or name in NATIVE_PYTHON:
            continue
        qualified = "aten::" + name
        if not torch._C._dispatch_has_kernel(qualified):
            continue
        if any(torch._C._dispatch_has_kernel_for_dispatch_key(qualified, k) for k in _COMPOSITE_KEYS):
            names.append(name)
    return names
