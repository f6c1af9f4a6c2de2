"""3. The device rules, each copied from a CUDA rule in PyTorch's C++ (cited beside it), picked per op from CUDA's
kernel table (kernels.py) and handed to the native core's fallback as a plan (`native_plan`):

- an op with a CUDA kernel of its own gets torchgen's whole-op check (`check_and_update_common_device`)
  unless it is marked `device_check: NoCheck`, in which case the kernel's own check is copied
  (TensorIterator's, mostly; a foreach op's fast and slow paths);
- an op whose only kernel is a composite one runs that composite, as on CUDA, so each op inside it checks
  devices (torch.stack names `cat`, torch.allclose ends in `eq`'s TensorIterator): the dispatcher does this
  by itself, and the ops that have a CUDA kernel beside a composite are taken by name (`native_by_name`);
- an op with neither (a CPU-only kernel) fails as PyTorch's dispatcher fails for CUDA;
- a few ops whose CUDA kernels check devices their own way get their own check (NATIVE_SPECIAL; the code is
  fallback.cpp's, each citing CUDA's), and a few CUDA-only paths stay Python kernels (NATIVE_PYTHON: fused
  Adam's mixed precision here, cuda_only.py, cuda_paths.py), which check with the functions below.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import torch

from samedevice.emulator import native, rng
from samedevice.emulator.kernels import Kernels, table
from samedevice.emulator.native import tensors
from samedevice.emulator.registration import NAME

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


def emulated_index(dev: torch.device | None) -> int | None:
    return (dev.index or 0) if dev is not None and dev.type == NAME else None


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
    """Raise CUDA's error for tensors on two devices; return the emulated index the op runs on (for the kernels
    that stay Python: fallback.cpp makes the same checks for every other op)."""

    def value(name: str, i: int) -> Any:
        return args[i] if i < len(args) else kwargs.get(name)

    outputs = [(n, value(n, i)) for n, i in plan.outputs]
    inputs = [(n, value(n, i)) for n, i in plan.inputs]
    if plan.rule == "iterator":
        in_tensors = tensors([v for _, v in inputs])
        out_tensors = tensors([v for _, v in outputs])
        # BINARY_OP_CONFIG, BINARY_FLOAT_OP_CONFIG and the comparison config allow one CPU scalar, as does lerp's
        # config (Lerp.cpp: .allow_cpu_scalars(true)); unary and ternary ones do not.
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
        return native.run_on_host(func, args, kwargs, check_devices(func, plan, args, kwargs))
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
    native.run_on_host(func, new_args, new_kwargs, check_devices(func, plan, new_args, new_kwargs))
    for narrow, widened in zip(states, wide):
        for t, w in zip(narrow, widened):
            t.copy_(w)
    return None


aten = torch.ops.aten
SPECIAL: dict[Any, Any] = {  # the kernels that stay Python, by op (cuda_only.py and cuda_paths.py add theirs)
    aten._fused_adam_.default: _fused_adam,
    aten._fused_adam_.tensor_lr: _fused_adam,
    aten._fused_adamw_.default: _fused_adam,
    aten._fused_adamw_.tensor_lr: _fused_adam,
}

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
    # check_indices_on_cpu_or_selfdevice (TensorAdvancedIndexing.cpp): `dev_tensor[{cpu,dev}_tensor]` only
    "index.Tensor": INDEX,
    # index_put_ (TensorAdvancedIndexing.cpp): indices anywhere, a 0-dim CPU value moved, other values checked
    # by a TensorIterator without CPU scalars
    "index_put_": INDEX_PUT, "index_put": INDEX_PUT, "_index_put_impl_": INDEX_PUT,
    # where_self_out (TensorCompare.cpp): any number of 0-dim CPU operands are moved to the device
    "where.self": WHERE, "where.self_out": WHERE,
    # masked_fill__cuda (cuda/Indexing.cu): self and mask on one device, a 0-dim value read wherever it lives
    "masked_fill_.Scalar": MASKED_FILL, "masked_fill_.Tensor": MASKED_FILL, "masked_fill.Scalar": MASKED_FILL,
    "masked_fill.Tensor": MASKED_FILL,
    "is_pinned": UNCHECKED,  # reads where the memory is, nothing to mix
}
# the native core's own kernels and the copies across devices (csrc/kernels.cpp): never the fallback's
_NATIVE_OWN = {"copy_", "_to_copy", "_copy_from", "_copy_from_and_resize", "_local_scalar_dense", "empty.memory_format",
               "empty_strided", "as_strided", "view", "_reshape_alias", "resize_", "set_.source_Tensor",
               "set_.source_Storage", "set_.source_Storage_storage_offset", "_has_compatible_shallow_copy_type"}


def native_plan(op: str) -> NativePlan:
    """The plan for `op` ("aten::add.Tensor", "aten::mm"): which check fallback.cpp makes, and what it needs."""
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
