"""3b. Nested tensors on the device, as the transformer fast path makes them: with a padding mask,
an eval-mode nn.TransformerEncoder under no_grad packs its input into a nested tensor
(torch._nested_tensor_from_mask), runs each layer's fused kernel on it
(torch._transformer_encoder_layer_fwd) and pads it back (to_padded_tensor), on CPU, CUDA and a
PrivateUse1 device alike (torch/nn/modules/transformer.py, TransformerEncoder.forward).

A nested tensor has no sizes or strides of its own (NestedTensorImpl raises "doesn't support sizes"),
so a dense wrapper cannot hold one. An emulated nested tensor is a wrapper whose metadata queries go
to its CPU nested tensor (`elem`): `dim()` and `numel()` answer, `size()` and `stride()` raise as on
CUDA. An op on it runs when CUDA has a NestedTensorCUDA kernel for it (native_functions.yaml, kernels.py),
after the device check CUDA's codegen makes (torchgen gives NestedTensorCUDA kernels the device check
of CUDA ones: is_cuda_dispatch_key); otherwise it fails naming the op."""

from __future__ import annotations

from typing import Any

import torch

from samedevice.emulator import tensor as _tensor
from samedevice.emulator.kernels import table
from samedevice.emulator.memory import Allocation, allocation_of
from samedevice.emulator.registration import NAME
from samedevice.emulator.tensor import _DEVICES, EmulatedTensor, tensors, tree_map, unwrap, wrap_outputs

aten = torch.ops.aten

# The queries a wrapper made with dispatch_sizes_strides_policy="sizes" sends to __torch_dispatch__:
# each is answered by the nested tensor itself.
_METADATA = {
    aten.sym_size.default, aten.sym_stride.default, aten.sym_numel.default, aten.sym_storage_offset.default,
    aten.dim.default, aten.numel.default, aten.is_contiguous.default, aten.is_contiguous.memory_format,
    aten.is_strides_like_format.default, aten.is_non_overlapping_and_dense.default,
}


_MOVES = {aten._to_copy.default, aten.copy_.default}


class EmulatedNestedTensor(EmulatedTensor):
    """A nested tensor on `emulated:N` whose data lives in the CPU nested tensor `elem`."""

    @staticmethod
    def __new__(cls, elem: torch.Tensor, index: int, alloc: Allocation | None = None) -> EmulatedNestedTensor:
        # the padded size stands in for the sizes a nested tensor lacks; every query reads `elem`
        padded = [elem.size(0), *elem._nested_tensor_size().amax(0).tolist()] if elem.size(0) else [0]
        r = torch.Tensor._make_wrapper_subclass(
            cls, padded, dtype=elem.dtype, device=_DEVICES[index], requires_grad=elem.requires_grad,
            dispatch_sizes_strides_policy="sizes",
        )
        r.elem = elem
        r._alloc = alloc or allocation_of(elem, index)
        r.device_index = index
        return r

    @property
    def is_nested(self) -> bool:  # type: ignore[override]
        return True

    def size(self, dim: Any = None) -> Any:
        # a nested tensor answers size(d) for a regular dimension d and raises for a ragged one
        return self.elem.size() if dim is None else self.elem.size(dim)

    def __repr__(self, *, tensor_contents: Any = None) -> str:  # type: ignore[override]
        return repr(self.elem).replace("nested_tensor(", f"nested_tensor(device='{self.device}', ", 1)

    @classmethod
    def __torch_dispatch__(  # type: ignore[override]
        cls, func: Any, types: Any, args: Any = (), kwargs: Any = None
    ) -> Any:
        return dispatch(func, args, kwargs or {})


def dispatch(func: Any, args: Any, kwargs: Any) -> Any:
    if func in _METADATA:
        return func(*tree_map(unwrap, args), **tree_map(unwrap, kwargs))
    from samedevice.emulator import rules

    found = table().get(rules.yaml_name(func)) if func.namespace == "aten" else None
    if found is None or not found.nested_cuda:
        raise NotImplementedError(
            f"Could not run '{func._schema.name}' with arguments from the 'NestedTensor' backend on {NAME}: "
            "it has no NestedTensorCUDA kernel in native_functions.yaml"
        )
    if func in _MOVES:
        return rules.SPECIAL[func](func, args, kwargs)  # `.cpu()`, `.to(...)`, `copy_` (transfers.py)
    plan = rules._PLANS.get(id(func)) or rules._plan(func)
    try:
        index = rules.check_devices(func, plan, args, kwargs)
    except RuntimeError as e:
        # torchgen names the kernel wrapper by its dispatch key: wrapper_NestedTensorCUDA__<op>
        dense, nested = f"method wrapper_{NAME.upper()}_", f"method wrapper_NestedTensor{NAME.upper()}_"
        raise RuntimeError(str(e).replace(dense, nested)) from None
    out = func(*tree_map(unwrap, args), **tree_map(unwrap, kwargs))
    if func._schema.is_mutable:
        # in-place and out= ops return their input: hand back the caller's emulated tensor
        originals = {id(t.elem): t for t in tensors((args, kwargs)) if isinstance(t, EmulatedTensor)}
        out = tree_map(lambda t: originals.get(id(t), t), out)
    return wrap_outputs(out, {}, index)


_tensor.nested_tensor = EmulatedNestedTensor
