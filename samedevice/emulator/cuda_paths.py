"""4b. Where CUDA's kernels check what CPU's do not, the check copied (the source cited beside it), then CPU's
kernel runs on the device's memory: embedding_bag's index dtype, and the resizing kernels' dtypes (CPU's take
uint8 images, CUDA's do not). Registered on the device as Python kernels (rules.NATIVE_PYTHON)."""

from __future__ import annotations

from typing import Any

import torch

from samedevice.emulator import native
from samedevice.emulator.rules import _PLANS, SPECIAL, _plan, check_devices

aten = torch.ops.aten


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
    return native.run_on_host(func, args, kwargs, index)


def _upsample(name: str) -> Any:
    def kernel(func: Any, args: Any, kwargs: Any) -> Any:
        # CUDA's resizing kernels dispatch on AT_DISPATCH_FLOATING_TYPES_AND2(Half, BFloat16, ...), under
        # `name` (cuda/UpSampleBilinear2d.cu: the antialiased ones reuse "upsample_bilinear2d_out_frame";
        # cuda/UpSampleBicubic2d.cu); CPU's take uint8 images too, so F.interpolate of a uint8 batch
        # works on CPU and fails on CUDA
        index = check_devices(func, _PLANS.get(id(func)) or _plan(func), args, kwargs)
        if args[0].dtype == torch.uint8:
            raise NotImplementedError(f'"{name}" not implemented for \'Byte\'')
        return native.run_on_host(func, args, kwargs, index)

    return kernel


SPECIAL.update({
    aten.upsample_bilinear2d.default: _upsample("upsample_bilinear2d_out_frame"),
    aten._upsample_bilinear2d_aa.default: _upsample("upsample_bilinear2d_out_frame"),
    aten._upsample_bicubic2d_aa.default: _upsample("upsample_bilinear2d_out_frame"),
    aten.upsample_bicubic2d.default: _upsample("upsample_bicubic2d_out_frame"),
    aten._embedding_bag.default: _embedding_bag,
    aten._embedding_bag_forward_only.default: _embedding_bag,
})
