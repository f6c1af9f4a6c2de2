"""What real models need from the emulated device beyond the device rules: the transformer fast path
(nested tensors), storages and addresses, and the smaller ops user code meets."""

from __future__ import annotations

import re
import warnings
from collections.abc import Callable

import pytest
import torch
from pytest_parametrize_cases import Case, parametrize_cases
from torch import nn

from samedevice import emulator
from tests.helpers import dispatched_ops

pytestmark = pytest.mark.emulator

# ---- the transformer fast path: nested tensors on the device -------------------------------------

PADDING = torch.tensor([[False] * 5, [False, False, False, True, True]])  # the second row ends in padding


def _encoder(**layer: object) -> nn.Module:
    return nn.TransformerEncoder(nn.TransformerEncoderLayer(8, 2, 16, batch_first=True, **layer), 2)


def _run_on(model: nn.Module, call: Callable[..., object], where: torch.device) -> list[torch.Tensor]:
    torch.manual_seed(0)
    x = torch.randn(2, 5, 8)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "The PyTorch API of nested tensors is in prototype stage"
        out = call(model.to(where), x.to(where), PADDING.to(where))
    outs = out if isinstance(out, tuple) else (out,)
    return [o.cpu() for o in outs if o is not None]


@parametrize_cases(
    Case("encoder", make=_encoder, call=lambda m, x, k: m(x, src_key_padding_mask=k),
         fused="aten::_transformer_encoder_layer_fwd"),
    Case("encoder_gelu_norm", make=lambda: nn.TransformerEncoder(
        nn.TransformerEncoderLayer(8, 2, 16, batch_first=True, activation="gelu"), 2, norm=nn.LayerNorm(8)),
        call=lambda m, x, k: m(x, src_key_padding_mask=k), fused="aten::_transformer_encoder_layer_fwd"),
    Case("encoder_layer", make=lambda: nn.TransformerEncoderLayer(8, 2, 16, batch_first=True),
         call=lambda m, x, k: m(x, src_key_padding_mask=k), fused="aten::_transformer_encoder_layer_fwd"),
    Case("multihead_attention", make=lambda: nn.MultiheadAttention(8, 2, batch_first=True),
         call=lambda m, x, k: m(x, x, x, key_padding_mask=k, need_weights=False),
         fused="aten::_native_multi_head_attention"),
    Case("multihead_attention_weights", make=lambda: nn.MultiheadAttention(8, 2, batch_first=True),
         call=lambda m, x, k: m(x, x, x, key_padding_mask=k), fused="aten::_native_multi_head_attention"),
)
def test_transformer_fast_path_matches_cpu(make: Callable[[], nn.Module], call: Callable[..., object], fused: str,
                                           accelerator: torch.device) -> None:
    """Eval-mode transformer layers with a padding mask take the fused fast path on the device, as on
    CPU and CUDA, with CPU's outputs."""
    torch.manual_seed(0)
    model = make().eval()
    expected = _run_on(model, call, torch.device("cpu"))
    with dispatched_ops() as log:
        got = _run_on(model, call, accelerator)
    assert fused in log.names
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        torch.testing.assert_close(g, e)


def test_encoder_pads_with_zeros_as_the_fast_path_does() -> None:
    """The encoder packs the batch into a nested tensor and pads it back with zeros, as CUDA does
    (the slow path would leave values at padded positions)."""
    model = _encoder().eval()
    with dispatched_ops() as log:
        got = _run_on(model, lambda m, x, k: m(x, src_key_padding_mask=k), emulator.device())[0]
    assert {"aten::_nested_tensor_from_mask", "aten::to_padded_tensor"} <= set(log.names)
    assert torch.equal(got[1, 3:], torch.zeros(2, 8))
    assert got[0].abs().sum() > 0


def _nested(where: torch.device) -> torch.Tensor:
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return torch._nested_tensor_from_mask(torch.randn(2, 5, 8).to(where), PADDING.logical_not().to(where))


def test_nested_tensor_on_the_device_answers_as_a_nested_tensor() -> None:
    """A nested tensor on the device is nested, has no sizes or strides (the same errors as CPU's and
    CUDA's), answers dim, numel and regular sizes, and moves back to CPU whole."""
    dev, cpu = _nested(emulator.device()), _nested(torch.device("cpu"))
    assert dev.is_nested
    assert dev.device == emulator.device()
    assert (dev.dim(), dev.numel(), dev.size(0), dev.size(2)) == (cpu.dim(), cpu.numel(), 2, 8)
    for query in (lambda t: t.size(), lambda t: t.stride(), lambda t: t.size(1)):
        with pytest.raises(RuntimeError) as expected:
            query(cpu)
        with pytest.raises(RuntimeError, match=re.escape(expected.value.args[0])):
            query(dev)
    back = dev.cpu()
    assert back.is_nested
    assert back.device.type == "cpu"
    for got, want in zip(back.unbind(), cpu.unbind()):
        assert torch.equal(got, want)
    assert [t.device for t in dev.unbind()] == [emulator.device()] * 2
    torch.testing.assert_close(dev.relu().to_padded_tensor(0.0).cpu(), cpu.relu().to_padded_tensor(0.0))


def test_nested_op_without_a_cuda_kernel_fails_naming_it() -> None:
    """An op that has no NestedTensorCUDA kernel fails on a nested device tensor, naming the op."""
    with pytest.raises(NotImplementedError, match=r"'aten::exp' .* no NestedTensorCUDA kernel"):
        _nested(emulator.device()).exp()


def test_nested_tensors_come_from_the_fast_path_only() -> None:
    """Departure: nested tensors work on the device as the fast path makes them (from a dense batch and
    a mask); one built from a list on the device, or moved there from CPU, is PyTorch's own nested
    tensor over an emulated buffer, and its first op fails naming the op and the backend."""
    dev = emulator.device()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        built = torch.nested.nested_tensor([torch.ones(2), torch.ones(3)], device=dev)
        with pytest.raises(NotImplementedError, match=r"'aten::to_padded_tensor' .* 'NestedTensoremulated' backend"):
            built.to_padded_tensor(0.0)
        with pytest.raises(NotImplementedError, match=r"'aten::_to_copy' .* 'NestedTensoremulated' backend"):
            torch.nested.nested_tensor([torch.ones(2), torch.ones(3)]).to(dev)
