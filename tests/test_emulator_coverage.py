"""What real models need from the emulated device beyond the device rules: the transformer fast path
(nested tensors), storages and addresses, and the smaller ops user code meets."""

from __future__ import annotations

import io
import re
import warnings
from collections.abc import Callable

import pytest
import torch
import torch.nn.functional as F
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


# ---- storages and addresses --------------------------------------------------------------------


def test_addresses_are_distinct_and_views_keep_their_offsets(accelerator: torch.device) -> None:
    """Device tensors have distinct non-zero addresses; a view's address is its base's plus its offset,
    and views share their base's storage."""
    a, b = torch.arange(12.0, device=accelerator).reshape(3, 4), torch.zeros(5, device=accelerator)
    assert 0 not in (a.data_ptr(), b.data_ptr())
    assert a.data_ptr() != b.data_ptr()
    assert a.untyped_storage().data_ptr() != b.untyped_storage().data_ptr()
    for view in (a[1], a[1:, 2], a.T, a.view(-1)[-1], a.flatten()):
        assert view.data_ptr() - a.data_ptr() == view.storage_offset() * a.element_size()
        assert view.untyped_storage().data_ptr() == a.untyped_storage().data_ptr()
        assert view.untyped_storage().nbytes() == 48
    assert a.untyped_storage().device == accelerator
    assert a.clone().data_ptr() != a.data_ptr()


def _shared_groups(state: dict[str, torch.Tensor]) -> list[set[str]]:
    """safetensors' shared-tensor detection (_find_shared_tensors): names grouped by (storage address,
    storage size), kept where their byte ranges overlap."""
    by_storage: dict[tuple[torch.device, int, int], set[str]] = {}
    for name, t in state.items():
        key = (t.device, t.untyped_storage().data_ptr(), t.untyped_storage().nbytes())
        by_storage.setdefault(key, set()).add(name)
    groups = []
    for names in by_storage.values():
        spans = sorted((state[n].data_ptr(), state[n].data_ptr() + state[n].nbytes, n) for n in names)
        groups.append({spans[0][2]})
        last_stop = spans[0][1]
        for start, stop, name in spans[1:]:
            if start >= last_stop:
                groups.append({name})
            else:
                groups[-1].add(name)
            last_stop = max(last_stop, stop)
    return groups


class TiedLM(nn.Module):
    """An embedding and an output head sharing one weight, as language models tie them."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(10, 8)
        self.mix = nn.Linear(8, 8)
        self.head = nn.Linear(8, 10, bias=False)
        self.head.weight = self.embed.weight

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.head(torch.tanh(self.mix(self.embed(ids))))


def _train_tied(where: torch.device) -> TiedLM:
    torch.manual_seed(0)
    model = TiedLM().to(where)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.05)
    ids = torch.tensor([[1, 2, 3, 4], [5, 6, 7, 8]]).to(where)
    for _ in range(3):
        optimizer.zero_grad()
        nn.functional.cross_entropy(model(ids).flatten(0, 1), ids.roll(1, 1).flatten()).backward()
        optimizer.step()
    return model


def test_tied_weights_train_and_the_tie_is_visible(accelerator: torch.device) -> None:
    """A model with tied weights trains on the device as on CPU, and a shared-tensor check by storage
    address (safetensors' rule) sees the tie, and only it."""
    expected, got = _train_tied(torch.device("cpu")), _train_tied(accelerator)
    assert got.head.weight is got.embed.weight
    for (name, p_cpu), p_dev in zip(expected.named_parameters(), got.parameters()):
        assert p_dev.device == accelerator
        torch.testing.assert_close(p_dev.detach().cpu(), p_cpu.detach(), msg=name)
    state = got.state_dict()
    shared = [g for g in _shared_groups(state) if len(g) > 1]
    assert shared == [{"embed.weight", "head.weight"}]
    assert _shared_groups(state) == _shared_groups(expected.state_dict())
    from safetensors.torch import _find_shared_tensors

    assert [g for g in _find_shared_tensors(state) if len(g) > 1] == shared


def test_set_shares_a_device_storage() -> None:
    """`t.set_(storage, offset, size)` with another device tensor's storage shares its memory, as on CUDA."""
    dev = emulator.device()
    a = torch.arange(6.0, device=dev)
    b = torch.empty(0, device=dev).set_(a.untyped_storage(), 2, (3,), (1,))
    assert b.data_ptr() == a.data_ptr() + 2 * a.element_size()
    assert b.is_set_to(a[2:5])
    b.mul_(10)
    assert a.cpu().tolist() == [0.0, 1.0, 20.0, 30.0, 40.0, 5.0]
    whole = torch.empty(0, device=dev).set_(a.untyped_storage())
    assert whole.cpu().tolist() == a.cpu().tolist()


def test_device_storages_copy_index_and_save() -> None:
    """A device storage copies to CPU, reads an element, and saves and loads as an emulated storage."""
    dev = emulator.device(1)
    a = torch.arange(4, dtype=torch.uint8, device=dev)
    storage = a.untyped_storage()
    assert storage.cpu().tolist() == [0, 1, 2, 3]
    assert storage.cpu().device.type == "cpu"
    assert storage[2] == 2
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "TypedStorage is deprecated"
        assert a.storage().tolist() == [0, 1, 2, 3]
    buf = io.BytesIO()
    torch.save(storage, buf)
    buf.seek(0)
    loaded = torch.load(buf, weights_only=True)
    assert loaded.device == dev
    assert loaded.cpu().tolist() == [0, 1, 2, 3]
    assert loaded.data_ptr() != storage.data_ptr()


def test_a_storage_taken_before_a_resize_reads_safely() -> None:
    """A storage taken before its tensor grew answers with the new memory or a clear error, never stale
    memory."""
    dev = emulator.device()
    a = torch.arange(4.0, device=dev)
    before = a.untyped_storage()
    a.resize_(1000)
    assert a.untyped_storage().nbytes() == 4000
    assert a.untyped_storage().data_ptr() == a.data_ptr()
    assert before.nbytes() == 4000  # one storage, grown in place, as CUDA's
    assert before.data_ptr() == a.data_ptr()


# ---- smaller ones: gradcheck's zero tensors, ctc_loss's gradients, DLPack ---------------------------


# forward AD loads PyTorch's jvp decompositions through torch.jit.script, which warns on any device
@pytest.mark.filterwarnings("ignore:`torch.jit.script` is deprecated:DeprecationWarning")
def test_gradcheck_with_forward_ad_runs_on_the_device(accelerator: torch.device) -> None:
    """gradcheck and gradgradcheck pass on the device with forward AD (which makes efficient zero tensors)."""
    x = torch.randn(3, dtype=torch.float64, device=accelerator, requires_grad=True)
    y = torch.randn(3, dtype=torch.float64, device=accelerator, requires_grad=True)
    assert torch.autograd.gradcheck(lambda a, b: (a.sin() * b, a.sum()), (x, y), check_forward_ad=True)
    assert torch.autograd.gradgradcheck(torch.sin, (x,))


def test_ctc_loss_gradients_match_cpu_with_cpu_lengths(accelerator: torch.device) -> None:
    """F.ctc_loss on the device with CPU length tensors gives CPU's loss and gradients, under autograd and
    under inference_mode."""
    torch.manual_seed(0)
    log_probs, targets = torch.randn(6, 3, 5).log_softmax(2), torch.tensor([[1, 2, 3], [4, 4, 0], [2, 0, 0]])
    lengths = (torch.tensor([6, 5, 4]), torch.tensor([3, 2, 1]))
    results = []
    for where in (torch.device("cpu"), accelerator):
        x = log_probs.clone().to(where).requires_grad_()
        loss = F.ctc_loss(x, targets.to(where), *lengths)
        loss.backward()
        with torch.inference_mode():
            again = F.ctc_loss(log_probs.to(where), targets.to(where), *lengths)
        results.append((loss.detach().cpu(), x.grad.cpu(), again.cpu()))
    for got, want in zip(results[1], results[0]):
        torch.testing.assert_close(got, want)
    with pytest.raises(RuntimeError, match="input_lengths must be integral"):
        F.ctc_loss(log_probs.to(accelerator), targets.to(accelerator), lengths[0].float(), lengths[1])


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_ctc_loss_of_an_unbatched_sample(accelerator: torch.device, reduction: str) -> None:
    """One unbatched sample (log_probs (T, C), 0-dim length tensors, on CPU or with the log_probs) gives
    CPU's loss and gradient on the device."""
    torch.manual_seed(0)
    log_probs, targets = torch.randn(12, 5).log_softmax(1), torch.tensor([1, 3, 3, 2])
    lengths = (torch.tensor(12), torch.tensor(4))
    results = []
    for where, lengths_on in ((torch.device("cpu"),) * 2, (accelerator, accelerator),
                              (accelerator, torch.device("cpu"))):
        x = log_probs.clone().to(where).requires_grad_()
        loss = F.ctc_loss(x, targets.to(where), *(n.to(lengths_on) for n in lengths), reduction=reduction)
        loss.sum().backward()
        results.append((loss.detach().cpu(), x.grad.cpu()))
    for got in results[1:]:
        torch.testing.assert_close(got, results[0])


def test_kernels_and_their_dtypes_are_cpus() -> None:
    """Departure: the device computes with CPU's kernels, so where CUDA's differ the emulator says what
    CPU says: integer fmod by zero raises (CUDA returns an undefined bit pattern, all ones for int32), and
    a half tensor to a complex power fails for ComplexHalf (CUDA computes it)."""
    dev = emulator.device()
    ints = torch.tensor([3, -3], dtype=torch.int32, device=dev)
    for fn in (torch.fmod, torch.remainder):
        with pytest.raises(RuntimeError, match="ZeroDivisionError"):
            fn(ints, torch.zeros_like(ints))
    with pytest.raises(NotImplementedError, match="\"pow\" not implemented for 'ComplexHalf'"):
        torch.pow(torch.full((2,), 2.0, dtype=torch.half, device=dev), 1j)


