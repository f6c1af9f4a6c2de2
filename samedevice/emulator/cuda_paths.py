"""4c. Where the emulator's tensors would take another path than CUDA's through PyTorch's C++, each
set back on CUDA's (the source cited beside it): ctc_loss's length tensors, embedding_bag's index
check, efficient zero tensors, and the resizing kernels' dtypes (CPU's take uint8 images, CUDA's do
not). (DLPack, which cannot carry an emulated tensor, is refused in storage.py.)"""

from __future__ import annotations

from typing import Any

import torch

from samedevice.emulator.memory import Allocation
from samedevice.emulator.rules import _PLANS, SPECIAL, _plan, check_devices
from samedevice.emulator.tensor import EmulatedTensor, _nbytes, resolve, run_on_cpu, unwrap

aten = torch.ops.aten


def ctc_loss(log_probs: Any, targets: Any, input_lengths: Any, target_lengths: Any, blank: int = 0,
             reduction: int = 1, zero_infinity: bool = False) -> Any:
    # ctc_loss with length tensors (aten/src/ATen/native/LossCTC.cpp): a tensor subclass takes the
    # composite-compliant path, _ctc_loss.Tensor, whose CUDA kernel refuses CPU lengths; CUDA's own
    # tensors take the fast path, which reads the lengths on the host (`.to(kCPU, kLong)`, so CPU and
    # device lengths both work) and calls ctc_loss with int lists, moving CPU targets to the device.
    for name, lengths in (("input_lengths", input_lengths), ("target_lengths", target_lengths)):
        if lengths.dtype.is_floating_point or lengths.dtype.is_complex or lengths.dtype == torch.bool:
            raise RuntimeError(f"{name} must be integral")
    # (IntArrayRef(ilc.const_data_ptr<int64_t>(), ilc.numel()): a 0-dim length, an unbatched sample's, is a list of one)
    il = unwrap(input_lengths).to("cpu", torch.long).reshape(-1).tolist()
    tl = unwrap(target_lengths).to("cpu", torch.long).reshape(-1).tolist()
    return aten.ctc_loss.IntList(log_probs, targets, il, tl, blank, reduction, zero_infinity)


def _ctc_loss_special(func: Any, args: Any, kwargs: Any) -> Any:
    return ctc_loss(*args, **kwargs)  # under inference_mode the composite reaches the Python key whole


def _embedding_bag(func: Any, args: Any, kwargs: Any) -> Any:
    # _embedding_bag_cuda (aten/src/ATen/native/cuda/EmbeddingBag.cu), after the codegen's device check:
    # promoteIndicesAndOffsets, then checkScalarTypes("embedding_bag_cuda", indices, {kLong, kInt}); CPU's
    # kernel names itself "embedding_bag".
    index = check_devices(func, _PLANS.get(id(func)) or _plan(func), args, kwargs)
    indices, offsets = args[1], args[2]
    common = torch.promote_types(offsets.dtype, indices.dtype)
    if common not in (torch.long, torch.int):
        promoted = torch.empty(0, dtype=common, device=indices.device).type()
        raise RuntimeError(
            "Expected tensor for argument #1 'indices' to have one of the following scalar types: Long, Int; "
            f"but got {promoted} instead (while checking arguments for embedding_bag_cuda)"
        )
    return run_on_cpu(func, args, kwargs, index)


def efficientzerotensor(size: Any, dtype: Any = None, layout: Any = None, device: Any = None,
                        pin_memory: Any = None) -> EmulatedTensor:
    # _efficientzerotensor_cuda (aten/src/ATen/native/TensorFactories.cpp) makes a zero tensor that holds
    # no memory and refuses writes; CPU's, wrapped, crashes PyTorch at its first op inside the wrapper's
    # dispatch, so the device gets plain zeros (a departure: they take memory and accept writes).
    index = resolve(device)
    Allocation(index, _nbytes(size, dtype))  # OOM before allocating, like any allocation here
    return EmulatedTensor(torch.zeros(size, dtype=dtype), index)


def _upsample(name: str) -> Any:
    def kernel(func: Any, args: Any, kwargs: Any) -> Any:
        # CUDA's resizing kernels dispatch on AT_DISPATCH_FLOATING_TYPES_AND2(Half, BFloat16, ...), under
        # `name` (cuda/UpSampleBilinear2d.cu: the antialiased ones reuse "upsample_bilinear2d_out_frame";
        # cuda/UpSampleBicubic2d.cu); CPU's take uint8 images too, so F.interpolate of a uint8 batch
        # works on CPU and fails on CUDA
        index = check_devices(func, _PLANS.get(id(func)) or _plan(func), args, kwargs)
        if args[0].dtype == torch.uint8:
            raise NotImplementedError(f'"{name}" not implemented for \'Byte\'')
        return run_on_cpu(func, args, kwargs, index)

    return kernel


SPECIAL.update({
    aten.upsample_bilinear2d.default: _upsample("upsample_bilinear2d_out_frame"),
    aten._upsample_bilinear2d_aa.default: _upsample("upsample_bilinear2d_out_frame"),
    aten._upsample_bicubic2d_aa.default: _upsample("upsample_bilinear2d_out_frame"),
    aten.upsample_bicubic2d.default: _upsample("upsample_bicubic2d_out_frame"),
    aten.ctc_loss.Tensor: _ctc_loss_special,
    aten._embedding_bag.default: _embedding_bag,
    aten._embedding_bag_forward_only.default: _embedding_bag,
})


_libs: list[torch.library.Library] = []


def register() -> None:
    lib = torch.library.Library("aten", "IMPL")
    lib.impl("ctc_loss.Tensor", ctc_loss, "AutogradPrivateUse1")
    lib.impl("_efficientzerotensor", efficientzerotensor, "PrivateUse1")
    _libs.append(lib)
