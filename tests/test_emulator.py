"""The emulated accelerator against its contract (DESIGN.md), and the device-rule table that also
runs on every real accelerator present, so a GPU runner judges the emulator's fidelity."""

from __future__ import annotations

import gc
import inspect
import io
import warnings
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
import torch._refs
import torch.nn.functional as F
from pytest_parametrize_cases import Case, parametrize_cases

from samedevice import devices, emulator
from samedevice.emulator import memory
from tests.helpers import closure_step, run_python

pytestmark = pytest.mark.emulator

SAME = "Expected all tensors to be on the same device"
Op = Callable[[torch.device, Callable[[], torch.device]], object]


def ones(dev: torch.device, *shape: int) -> torch.Tensor:
    return torch.ones(*shape or (3,), device=dev)


def fast_path(module: torch.nn.Module, *inputs: torch.Tensor, **masks: torch.Tensor) -> object:
    """Run an eval-mode transformer layer under no_grad: the fused fast path (CPU weights here)."""
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "The PyTorch API of nested tensors is in prototype stage"
        return module.eval()(*inputs, **masks)


def encoder_layer() -> torch.nn.TransformerEncoderLayer:
    return torch.nn.TransformerEncoderLayer(8, 2, 16, batch_first=True)


def padding(dev: torch.device) -> torch.Tensor:
    return torch.tensor([[False] * 3, [False, False, True]], device=dev)


def image(dev: torch.device, dtype: torch.dtype) -> torch.Tensor:
    """A 1x3x8x8 image batch on `dev`, values 0..191."""
    return torch.arange(192).reshape(1, 3, 8, 8).to(dev, dtype)


def ctc(dev: torch.device, lengths_on: torch.device | None = None, targets_on: torch.device | None = None) -> object:
    """F.ctc_loss on `dev` with its length and target tensors where the row puts them."""
    log_probs = torch.arange(40.0).reshape(5, 2, 4).div(40).log_softmax(2).to(dev)
    lengths = [torch.tensor(n).to(lengths_on or dev) for n in ([5, 4], [2, 1])]
    return F.ctc_loss(log_probs, torch.tensor([[1, 2], [1, 1]]).to(targets_on or dev), *lengths)


# One row per device rule: the op, where its inputs live, and what CUDA does with it.
# `second()` gives a second device of the same kind (cuda:1, emulated:1); rows using it skip on
# hosts with one GPU.
RULE_CASES = [
    Case("add_cpu_tensor", op=lambda d, s: ones(d) + torch.ones(3), raises=f"{SAME}, but found at least two devices, {{d}} and cpu!"),
    Case("add_cpu_tensor_first", op=lambda d, s: torch.ones(3) + ones(d), raises=f"{SAME}, but found at least two devices, {{d}} and cpu!"),
    Case("add_cpu_0dim_scalar", op=lambda d, s: ones(d) + torch.tensor(2.0), raises=None),
    Case("mul_cpu_0dim_scalar_first", op=lambda d, s: torch.tensor(2.0) * ones(d), raises=None),
    Case("compare_cpu_0dim_scalar", op=lambda d, s: ones(d) > torch.tensor(0.5), raises=None),
    Case("add_cpu_one_element_1d", op=lambda d, s: ones(d) + torch.ones(1), raises=SAME),
    Case("inplace_into_cpu_scalar", op=lambda d, s: torch.tensor(1.0).add_(ones(d, 1).squeeze()), raises=SAME),
    Case("ternary_cpu_0dim_scalar", op=lambda d, s: torch.addcmul(ones(d), ones(d), torch.tensor(2.0)), raises=SAME),
    Case("add_out_on_cpu", op=lambda d, s: torch.add(ones(d), ones(d), out=torch.empty(3)), raises=f"{SAME}, but found at least two devices, {{d}} and cpu!"),
    Case("mm_cpu_mat2", op=lambda d, s: ones(d, 2, 3) @ torch.ones(3, 2), raises=f"{SAME}, but got mat2 is on cpu, different from other tensors on {{d}}"),
    Case("mm_cpu_first", op=lambda d, s: torch.ones(2, 3) @ ones(d, 3, 2), raises=f"{SAME}, but got mat2 is on {{d}}, different from other tensors on cpu"),
    Case("linear_cpu_weight", op=lambda d, s: F.linear(ones(d, 2, 3), torch.ones(4, 3)), raises=SAME),
    Case("cat_cpu_tensor", op=lambda d, s: torch.cat([ones(d), torch.ones(3)]), raises=f"{SAME}, but got tensors is on cpu"),
    Case("embedding_cpu_indices", op=lambda d, s: F.embedding(torch.tensor([0, 1]), ones(d, 4, 2)), raises=f"{SAME}, but got index is on cpu, different from other tensors on {{d}}"),
    Case("cross_entropy_cpu_target", op=lambda d, s: F.cross_entropy(ones(d, 2, 3), torch.tensor([0, 1])), raises=f"{SAME}, but got target is on cpu"),
    Case("bce_logits_cpu_0dim_pos_weight", op=lambda d, s: F.binary_cross_entropy_with_logits(ones(d), ones(d), pos_weight=torch.tensor(3.0)), raises=None),
    Case("bce_logits_cpu_1d_pos_weight", op=lambda d, s: F.binary_cross_entropy_with_logits(ones(d), ones(d), pos_weight=torch.tensor([3.0])), raises=f"{SAME}, but found at least two devices, {{d}} and cpu!"),
    Case("index_cpu_indices", op=lambda d, s: ones(d, 4)[torch.tensor([0, 2])], raises=None),
    Case("index_cpu_bool_mask", op=lambda d, s: ones(d, 4)[torch.tensor([True, False, True, False])], raises=None),
    Case("index_other_accelerator", op=lambda d, s: ones(d, 4)[torch.tensor([0], device=s())], raises="indices should be either on cpu or on the same device as the indexed tensor"),
    Case("index_put_cpu_indices_0dim_value", op=lambda d, s: ones(d, 4).index_put_((torch.tensor([1]),), torch.tensor(5.0)), raises=None),
    Case("index_put_cpu_values", op=lambda d, s: ones(d, 4, 2).index_put_((torch.tensor([1]),), torch.ones(1, 2)), raises=SAME),
    Case("setitem_basic_cpu_value", op=lambda d, s: ones(d, 2, 3).__setitem__(0, torch.zeros(3)), raises=None),
    Case("where_cpu_condition", op=lambda d, s: torch.where(torch.tensor([True, False, True]), ones(d), ones(d)), raises=SAME),
    Case("where_cpu_0dim_operands", op=lambda d, s: torch.where(ones(d) > 0, torch.tensor(1.0), torch.tensor(0.0)), raises=None),
    Case("lerp_cpu_0dim_weight", op=lambda d, s: torch.lerp(ones(d), ones(d) * 3, torch.tensor(0.5)), raises=None),
    Case("masked_fill_cpu_0dim_value", op=lambda d, s: ones(d).masked_fill(ones(d) > 0, torch.tensor(2.0)), raises=None),
    Case("masked_fill_cpu_mask", op=lambda d, s: ones(d).masked_fill(torch.tensor([True, False, True]), 2.0), raises="expected self and mask to be on the same device, but got mask on cpu and self on {d}"),
    # a CPU input takes CPU's convolution backend (mkldnn for this batch), whose check names both types
    Case("conv2d_cpu_input", op=lambda d, s: F.conv2d(torch.ones(2, 3, 8, 8), ones(d, 4, 3, 3, 3)), raises="Input type (torch.FloatTensor) and weight type ("),
    Case("foreach_addcmul_cpu_scalars_list", op=lambda d, s: torch._foreach_addcmul_([ones(d)], [ones(d)], [ones(d)], torch.tensor([2.0])), raises=None),
    Case("copy_from_cpu", op=lambda d, s: ones(d).copy_(torch.arange(3.0)), raises=None),
    Case("to_cpu_and_back", op=lambda d, s: ones(d).cpu().to(d), raises=None),
    Case("add_two_accelerators", op=lambda d, s: ones(d) + ones(s()), raises=f"{SAME}, but found at least two devices, {{d}} and {{s}}!"),
    Case("copy_between_accelerators", op=lambda d, s: ones(d).copy_(ones(s())), raises=None),
    Case("foreach_add_cpu_member", op=lambda d, s: torch._foreach_add_([ones(d), ones(d)], [ones(d), torch.ones(3)]), raises=SAME),
    # the transformer fast path: every tensor argument on a supported device type (CPU included) passes
    # the module's check; the fused kernel's codegen check then refuses (NestedTensorCUDA for a packed batch)
    Case("encoder_layer_fast_path_cpu_weights", op=lambda d, s: fast_path(encoder_layer(), ones(d, 2, 3, 8)), raises=f"{SAME}, but got qkv_weight is on cpu, different from other tensors on {{d}} (when checking argument in method wrapper_{{K}}___transformer_encoder_layer_fwd)"),
    Case("encoder_nested_fast_path_cpu_weights", op=lambda d, s: fast_path(torch.nn.TransformerEncoder(encoder_layer(), 2), ones(d, 2, 3, 8), src_key_padding_mask=padding(d)), raises=f"{SAME}, but got qkv_weight is on cpu, different from other tensors on {{d}} (when checking argument in method wrapper_NestedTensor{{K}}___transformer_encoder_layer_fwd)"),
    Case("multihead_attention_fast_path_cpu_weights", op=lambda d, s: fast_path(torch.nn.MultiheadAttention(8, 2, batch_first=True), *[ones(d, 2, 3, 8)] * 3, key_padding_mask=padding(d)), raises=f"{SAME}, but got qkv_weight is on cpu, different from other tensors on {{d}} (when checking argument in method wrapper_{{K}}___native_multi_head_attention)"),
    # ctc_loss reads its length tensors on the host wherever they are, and moves CPU targets to the device
    # (LossCTC.cpp: ctc_loss's fast path, `.to(kCPU, kLong)`; ctc_loss_impl, `targets.to(log_probs.device())`)
    Case("ctc_loss_cpu_lengths", op=lambda d, s: ctc(d, lengths_on=torch.device("cpu")), raises=None),
    Case("ctc_loss_cpu_targets", op=lambda d, s: ctc(d, targets_on=torch.device("cpu")), raises=None),
    # CUDA's kernel checks the index dtype under its own name (cuda/EmbeddingBag.cu: _embedding_bag_cuda)
    Case("embedding_bag_float_indices", op=lambda d, s: F.embedding_bag(torch.tensor([0.0, 1.0], device=d), ones(d, 3, 2), torch.tensor([0], device=d)), raises="Expected tensor for argument #1 'indices' to have one of the following scalar types: Long, Int; but got torch.{t}.FloatTensor instead (while checking arguments for embedding_bag_cuda)"),
    Case("efficient_zero_tensor", op=lambda d, s: torch._efficientzerotensor((2, 3), device=d) + 1, raises=None),
    Case("item_of_reduction", op=lambda d, s: ones(d).sum().item(), raises=None),
    # CUDA's resizing kernels take floating types only (cuda/UpSampleBilinear2d.cu, UpSampleBicubic2d.cu:
    # AT_DISPATCH_FLOATING_TYPES_AND2(Half, BFloat16, ...)); CPU's take uint8 images too
    Case("interpolate_uint8_bilinear", op=lambda d, s: F.interpolate(image(d, torch.uint8), (4, 4), mode="bilinear"), raises="\"upsample_bilinear2d_out_frame\" not implemented for 'Byte'"),
    Case("interpolate_uint8_bicubic", op=lambda d, s: F.interpolate(image(d, torch.uint8), (4, 4), mode="bicubic"), raises="\"upsample_bicubic2d_out_frame\" not implemented for 'Byte'"),
    Case("interpolate_uint8_bicubic_antialias", op=lambda d, s: F.interpolate(image(d, torch.uint8), (4, 4), mode="bicubic", antialias=True), raises="\"upsample_bilinear2d_out_frame\" not implemented for 'Byte'"),
    Case("interpolate_float_bilinear_antialias", op=lambda d, s: F.interpolate(image(d, torch.float32), (4, 4), mode="bilinear", antialias=True), raises=None),
]
RULES = parametrize_cases(*RULE_CASES)

# Ops with no CUDA kernel of their own (native_functions.yaml: CompositeExplicitAutograd or
# CompositeImplicitAutograd only): CUDA runs the composite, so the message is that of the first op
# inside it that checks devices. Each row names that op (aten/src/ATen/native/*.cpp).
COMPOSITE_CASES = [
    # stack -> at::cat (TensorShape.cpp); cat is structured: wrapper_CUDA_cat
    Case("composite_stack", op=lambda d, s: torch.stack([ones(d), torch.ones(3)]), raises=f"{SAME}, but got tensors is on cpu, different from other tensors on {{d}} (when checking argument in method wrapper_{{K}}_cat)"),
    Case("composite_hstack", op=lambda d, s: torch.hstack([ones(d), torch.ones(3)]), raises=f"{SAME}, but got tensors is on cpu, different from other tensors on {{d}} (when checking argument in method wrapper_{{K}}_cat)"),
    # allclose -> isclose -> eq/abs/sub (TensorCompare.cpp): TensorIterator
    Case("composite_allclose", op=lambda d, s: torch.allclose(ones(d), torch.ones(3)), raises=f"{SAME}, but found at least two devices, {{d}} and cpu!"),
    # mv -> at::empty(.., vec.options()) then addmv_(result, self, vec) (LinearAlgebra.cpp)
    Case("composite_mv_cpu_vec", op=lambda d, s: torch.mv(ones(d, 2, 3), torch.ones(3)), raises=f"{SAME}, but got mat is on {{d}}, different from other tensors on cpu (when checking argument in method wrapper_{{K}}_addmv_)"),
    Case("composite_mv_cpu_mat", op=lambda d, s: torch.mv(torch.ones(2, 3), ones(d, 3)), raises=f"{SAME}, but got mat is on cpu, different from other tensors on {{d}} (when checking argument in method wrapper_{{K}}_addmv_)"),
    # block_diag checks devices itself (TensorShape.cpp)
    Case("composite_block_diag", op=lambda d, s: torch.block_diag(ones(d, 2, 2), torch.ones(2, 2)), raises="torch.block_diag: input tensors must all be on the same device. Input 0 is on device {d} and input 1 is on device cpu"),
    # masked_scatter -> clone, then masked_scatter_ (codegen check, not structured)
    Case("composite_masked_scatter", op=lambda d, s: ones(d).masked_scatter(torch.tensor([True, False, True]), ones(d)), raises=f"{SAME}, but got mask is on cpu, different from other tensors on {{d}} (when checking argument in method wrapper_{{K}}__masked_scatter_)"),
    # put -> clone, then put_ (codegen check)
    Case("composite_put", op=lambda d, s: ones(d).put(torch.tensor([0]), ones(d, 1)), raises=f"{SAME}, but got index is on cpu, different from other tensors on {{d}} (when checking argument in method wrapper_{{K}}__put_)"),
    # cholesky_solve checks b and A itself (BatchLinearAlgebra.cpp: linearSolveCheckInputs)
    Case("composite_cholesky_solve", op=lambda d, s: torch.cholesky_solve(ones(d, 2, 2), torch.eye(2)), raises="Expected b and A to be on the same device, but found b on {d} and A on cpu instead."),
    # complex and polar -> their out= kernels (codegen check on the out variant)
    Case("composite_complex", op=lambda d, s: torch.complex(ones(d), torch.ones(3)), raises=f"{SAME}, but got imag is on cpu, different from other tensors on {{d}} (when checking argument in method wrapper_{{K}}_out_complex)"),
    Case("composite_polar", op=lambda d, s: torch.polar(ones(d), torch.ones(3)), raises=f"{SAME}, but got angle is on cpu, different from other tensors on {{d}} (when checking argument in method wrapper_{{K}}_out_polar)"),
    # ldexp -> mul(self, pow(2, other)) (BinaryOps.cpp): TensorIterator
    Case("composite_ldexp", op=lambda d, s: torch.ldexp(ones(d), torch.ones(3)), raises=f"{SAME}, but found at least two devices, {{d}} and cpu!"),
    # soft_margin_loss, margin_ranking_loss, kl_div: elementwise parts (Loss.cpp): TensorIterator
    Case("composite_soft_margin_loss", op=lambda d, s: F.soft_margin_loss(ones(d), torch.ones(3)), raises=f"{SAME}, but found at least two devices, {{d}} and cpu!"),
    Case("composite_margin_ranking_loss", op=lambda d, s: F.margin_ranking_loss(ones(d), ones(d), torch.ones(3)), raises=f"{SAME}, but found at least two devices, {{d}} and cpu!"),
    Case("composite_kl_div", op=lambda d, s: F.kl_div(ones(d), torch.ones(3), reduction="sum"), raises=f"{SAME}, but found at least two devices, {{d}} and cpu!"),
    # inner checks device types itself (LinearAlgebra.cpp: checkDeviceType("inner()", ...))
    Case("composite_inner", op=lambda d, s: torch.inner(ones(d), torch.ones(3)), raises="Expected tensor to have {t} DeviceType, but got tensor with cpu DeviceType (while checking arguments for inner())"),
    # tensordot -> mm (structured)
    Case("composite_tensordot", op=lambda d, s: torch.tensordot(ones(d, 2, 3), torch.ones(3, 2), dims=1), raises=f"{SAME}, but got mat2 is on cpu, different from other tensors on {{d}} (when checking argument in method wrapper_{{K}}_mm)"),
    # matmul of two vectors -> dot (codegen check, not structured)
    Case("composite_matmul_1d", op=lambda d, s: torch.matmul(ones(d), torch.ones(3)), raises=f"{SAME}, but got tensor is on cpu, different from other tensors on {{d}} (when checking argument in method wrapper_{{K}}__dot)"),
    # layer_norm -> native_layer_norm (codegen check)
    Case("composite_layer_norm_cpu_weight", op=lambda d, s: F.layer_norm(ones(d, 2, 3), (3,), torch.ones(3)), raises=f"{SAME}, but got weight is on cpu, different from other tensors on {{d}} (when checking argument in method wrapper_{{K}}__native_layer_norm)"),
    # fmod.Scalar_out -> at::fmod_out(out, self, wrapped_scalar_tensor(other)) (BinaryOps.cpp): TensorIterator,
    # whose scalar reaches the emulator as a Python number (the Scalar overload takes it back)
    Case("composite_fmod_scalar_out", op=lambda d, s: torch.fmod(ones(d), 2, out=torch.empty(3, device=d)), raises=None),
    Case("composite_remainder_scalar_out", op=lambda d, s: torch.remainder(ones(d), 2, out=torch.empty(3, device=d)), raises=None),
    Case("composite_fmod_scalar_cpu_out", op=lambda d, s: torch.fmod(ones(d), 2, out=torch.empty(3)), raises=f"{SAME}, but found at least two devices, {{d}} and cpu!"),
    # prims have no native wrapper, so no whole-op check: prims.add runs its composite, torch.add, whose
    # TensorIterator takes a CPU scalar (torch/_prims/__init__.py); the refs check devices first, in Python
    # (torch/_prims_common/__init__.py: check_same_device)
    Case("composite_prims_add_cpu_scalar", op=lambda d, s: torch._refs.add(ones(d), torch.tensor(2.0)), raises=None),
    Case("composite_refs_add_cpu_tensor", op=lambda d, s: torch._refs.add(ones(d), torch.ones(3)), raises="Tensor on device cpu is not on the expected device {d}!"),
    Case("composite_stack_same_device", op=lambda d, s: torch.stack([ones(d), ones(d)]), raises=None),
    Case("composite_mv_same_device", op=lambda d, s: torch.mv(ones(d, 2, 3), ones(d)), raises=None),
]
COMPOSITES = parametrize_cases(*COMPOSITE_CASES)


def second_device(dev: torch.device) -> torch.device:
    if dev.type == emulator.NAME:
        return emulator.device(1)
    backend = getattr(torch, dev.type)
    if backend.device_count() < 2:
        pytest.skip(f"this row needs two {dev.type.upper()} devices; the host has one")
    return torch.device(dev.type, 1)


@COMPOSITES
def test_composite_rule(op: Op, raises: str | None, accelerator: torch.device) -> None:
    """An op without a CUDA kernel of its own fails where its composite's parts fail, as on CUDA."""
    test_device_rule(op, raises, accelerator)


def test_composite_section_has_fifteen_ops() -> None:
    """The composite section covers at least fifteen ops that raise."""
    assert len([c for c in COMPOSITE_CASES if c.kwargs["raises"]]) >= 15


def test_kernel_table_matches_native_functions_yaml() -> None:
    """The emulator's set of ops with a CUDA kernel of their own is the one native_functions.yaml
    gives, read here without torchgen: a `CUDA` dispatch key, a `ufunc_inner_loop` (torchgen generates
    CPU and CUDA kernels from it), or a structured delegate that has one of those."""
    import yaml

    from samedevice.emulator import kernels

    entries = yaml.load(kernels.yaml_path().read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    cuda_keys = {}
    for e in entries:
        name = e["func"].split("(")[0]
        keys = [k.strip() for key in e.get("dispatch", {}) for k in key.split(",")]
        cuda_keys[name] = ("CUDA" in keys or "ufunc_inner_loop" in e, e.get("structured_delegate"))
    expected = {n for n, (own, delegate) in cuda_keys.items() if own or (delegate and cuda_keys[delegate][0])}
    table = kernels.table()
    assert {n for n, k in table.items() if k.cuda} == expected
    assert {"stack", "allclose", "mv", "embedding", "ldexp.Tensor"} <= {n for n, k in table.items() if k.composite}
    assert {"cat", "mm", "add.Tensor", "_fused_adagrad_"} <= expected


@RULES
def test_device_rule(op: Op, raises: str | None, accelerator: torch.device) -> None:
    """Each device rule behaves on the accelerator as it does on CUDA."""
    second = lambda: second_device(accelerator)  # noqa: E731
    if raises is None:
        result = op(accelerator, second)
        expected = op(torch.device("cpu"), lambda: torch.device("cpu"))  # the same op, all on CPU
        if isinstance(result, torch.Tensor):
            assert result.device == accelerator
            torch.testing.assert_close(result.cpu(), expected)
        elif isinstance(result, list):
            for got, want in zip(result, expected):
                torch.testing.assert_close(got.cpu(), want)
        else:
            assert result == expected
        return
    pattern = raises.format(d=accelerator, s=f"{accelerator.type}:1", K=accelerator.type.upper(), t=accelerator.type)
    with pytest.raises(RuntimeError, match=_literal(pattern)):
        op(accelerator, second)


def _literal(text: str) -> str:
    import re

    return re.escape(text)


def test_rule_table_has_twenty_rows() -> None:
    """The rule table covers at least twenty rules."""
    assert len(RULE_CASES) >= 20


# ---- registration and bad input -------------------------------------------------------------


def test_device_indices() -> None:
    """emulated:0 and emulated:1 exist; another index is refused with a clear error."""
    assert emulator.device() == torch.device("emulated", 0)
    assert emulator.device(1) == torch.device("emulated", 1)
    with pytest.raises(ValueError, match="emulated device index 7 is out of range"):
        emulator.device(7)


def test_active_is_a_context_manager() -> None:
    """`active()` exists and leaves the emulated device usable inside it."""
    with emulator.active():
        assert torch.zeros(2, device=emulator.device()).device.type == "emulated"


def test_privateuse1_taken_gives_one_line_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    """Where another backend owns PrivateUse1, the emulator says so in one line and is unavailable."""
    monkeypatch.setattr(torch._C, "_get_privateuse1_backend_name", lambda: "npu")
    reason = emulator.unavailable_reason()
    assert reason is not None
    assert "'npu'" in reason
    assert "\n" not in reason
    assert devices.unavailable_reason("emulated") == reason


def test_unknown_device_name() -> None:
    """An unknown device kind is refused with the list of valid names."""
    with pytest.raises(ValueError, match="valid names: cpu, emulated, cuda, mps, xpu"):
        devices.unavailable_reason("gpu0")


# ---- factories, modules, autograd -----------------------------------------------------------


def test_factories_take_the_device() -> None:
    """Factories with device= put their result on the emulated device with CPU's values."""
    dev = emulator.device()
    made = {
        "tensor": torch.tensor([1.0, 2.0], device=dev),
        "zeros": torch.zeros(2, 3, device=dev),
        "ones": torch.ones(4, device=dev),
        "arange": torch.arange(5, device=dev),
        "full": torch.full((2,), 7.0, device=dev),
        "eye": torch.eye(3, device=dev),
        "linspace": torch.linspace(0, 1, 5, device=dev),
        "zeros_like": torch.zeros_like(torch.ones(2), device=dev),
        "ones_like": torch.ones_like(torch.ones(2, device=dev)),
    }
    cpu = {
        "tensor": torch.tensor([1.0, 2.0]), "zeros": torch.zeros(2, 3), "ones": torch.ones(4),
        "arange": torch.arange(5), "full": torch.full((2,), 7.0), "eye": torch.eye(3),
        "linspace": torch.linspace(0, 1, 5), "zeros_like": torch.zeros(2), "ones_like": torch.ones(2),
    }
    for name, t in made.items():
        assert t.device == dev, name
        assert torch.equal(t.cpu(), cpu[name]), name


def test_module_to_keeps_parameter_identity(accelerator: torch.device) -> None:
    """module.to(accelerator) moves parameters in place (`.data =` on CUDA, swap_tensors on the emulator)."""
    model = torch.nn.Linear(3, 2)
    weight = model.weight
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model.to(accelerator)
    assert model.weight is weight
    assert isinstance(model.weight, torch.nn.Parameter)
    assert optimizer.param_groups[0]["params"][0] is model.weight
    assert model.weight.device.type == accelerator.type


def test_autograd_matches_cpu() -> None:
    """Forward and backward on the emulated device give CPU's numbers."""
    torch.manual_seed(0)
    cpu_model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
    dev_model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
    dev_model.load_state_dict(cpu_model.state_dict())
    dev_model.to(emulator.device())
    x = torch.randn(5, 4)
    cpu_model(x).pow(2).sum().backward()
    dev_model(x.to(emulator.device())).pow(2).sum().backward()
    for p_cpu, p_dev in zip(cpu_model.parameters(), dev_model.parameters()):
        assert p_dev.grad is not None
        assert p_dev.grad.device.type == "emulated"
        assert torch.equal(p_dev.grad.cpu(), p_cpu.grad)


@parametrize_cases(
    Case("mse", loss=torch.nn.MSELoss(), target=lambda: torch.randn(4, 3)),
    Case("l1", loss=torch.nn.L1Loss(), target=lambda: torch.randn(4, 3)),
    Case("smooth_l1", loss=torch.nn.SmoothL1Loss(), target=lambda: torch.randn(4, 3)),
    Case("cross_entropy", loss=torch.nn.CrossEntropyLoss(), target=lambda: torch.tensor([0, 2, 1, 0])),
    Case("nll", loss=torch.nn.NLLLoss(), target=lambda: torch.tensor([0, 2, 1, 0])),
    Case("bce_with_logits", loss=torch.nn.BCEWithLogitsLoss(pos_weight=torch.ones(3)), target=lambda: torch.rand(4, 3)),
    Case("kl_div", loss=torch.nn.KLDivLoss(reduction="batchmean"), target=lambda: torch.rand(4, 3)),
    Case("huber", loss=torch.nn.HuberLoss(), target=lambda: torch.randn(4, 3)),
)
def test_losses_match_cpu(loss: torch.nn.Module, target: Callable[[], torch.Tensor]) -> None:
    """torch.nn losses run on the emulated device with CPU's values."""
    torch.manual_seed(0)
    x, y = torch.randn(4, 3), target()
    expected = loss(x, y)
    dev = emulator.device()
    moved = loss.to(dev)
    got = moved(x.to(dev), y.to(dev))
    loss.to("cpu")
    assert got.device == dev
    torch.testing.assert_close(got.cpu(), expected)


# ---- every torch.optim optimizer on its accelerator paths -----------------------------------


def _optimizers() -> list[type[torch.optim.Optimizer]]:
    found = [
        cls for _, cls in inspect.getmembers(torch.optim, inspect.isclass)
        if issubclass(cls, torch.optim.Optimizer) and cls is not torch.optim.Optimizer
    ]
    return sorted(found, key=lambda c: c.__name__)


def _flags(cls: type[torch.optim.Optimizer]) -> list[Case]:
    params = inspect.signature(cls).parameters
    cases = [Case(f"{cls.__name__}-default", cls=cls, flags={})]
    if "foreach" in params:
        cases.append(Case(f"{cls.__name__}-for_loop", cls=cls, flags={"foreach": False}))
    if "fused" in params:
        cases.append(Case(f"{cls.__name__}-fused", cls=cls, flags={"fused": True}))
    if "capturable" in params:
        cases.append(Case(f"{cls.__name__}-capturable", cls=cls, flags={"capturable": True}))
    return cases


# Muon takes 2-D parameters only: it gets its own test below. SparseAdam needs sparse gradients,
# which the emulator does not hold (dense, strided tensors only).
DENSE = [c for cls in _optimizers() if cls.__name__ not in ("SparseAdam", "Muon") for c in _flags(cls)]


def _steps(cls: type[torch.optim.Optimizer], flags: dict[str, bool], dev: torch.device) -> torch.nn.Module:
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 3).to(dev)
    optimizer = cls(model.parameters(), **flags)
    x = torch.randn(6, 4).to(dev)
    for _ in range(3):
        closure_step(model, optimizer, x)
    return model


@parametrize_cases(*DENSE)
def test_optimizer_matches_cpu(cls: type[torch.optim.Optimizer], flags: dict[str, bool]) -> None:
    """Every torch.optim optimizer steps on the emulated device as it does on CPU."""
    dev = emulator.device()
    expected = _steps(cls, {k: v for k, v in flags.items() if k != "capturable"}, torch.device("cpu"))
    got = _steps(cls, flags, dev)
    assert got.weight.device == dev
    for p_dev, p_cpu in zip(got.parameters(), expected.parameters()):
        torch.testing.assert_close(p_dev.detach().cpu(), p_cpu.detach(), rtol=1e-5, atol=1e-6)


def test_default_path_is_foreach() -> None:
    """As on CUDA, optimizers default to the foreach implementation on the emulated device."""
    from torch.optim.optimizer import _default_to_fused_or_foreach

    params = [torch.nn.Parameter(torch.ones(2, device=emulator.device()))]
    assert _default_to_fused_or_foreach(params, differentiable=False, use_fused=False) == (False, True)


def test_muon() -> None:
    """Muon (2-D parameters only) steps on the emulated device as on CPU. (SparseAdam needs sparse
    gradients, which the emulator does not hold: it emulates dense, strided tensors only.)"""
    dev = emulator.device()
    results = []
    for where in (torch.device("cpu"), dev):
        torch.manual_seed(0)
        w = torch.nn.Parameter(torch.randn(4, 4).to(where))
        muon = torch.optim.Muon([w], lr=0.02)
        for _ in range(2):
            muon.zero_grad()
            (w @ torch.ones(4, 1).to(where)).pow(2).sum().backward()
            muon.step()
        results.append(w.detach().cpu())
    torch.testing.assert_close(results[1], results[0])


# ---- serialization --------------------------------------------------------------------------


def _saved(obj: object) -> io.BytesIO:
    buf = io.BytesIO()
    torch.save(obj, buf)
    buf.seek(0)
    return buf


def test_save_records_the_location() -> None:
    """torch.save records 'emulated:N' as the storage location, as it records 'cuda:N'."""
    seen: list[str] = []

    def record(storage: torch.UntypedStorage, location: str) -> torch.UntypedStorage:
        seen.append(location)
        return storage

    torch.load(_saved({"a": ones(emulator.device(1)), "b": torch.ones(2)}), map_location=record, weights_only=True)
    assert sorted(seen) == ["cpu", "emulated:1"]


@parametrize_cases(
    Case("none", map_location=lambda: None, expect="emulated:0", expect_cpu="cpu"),
    Case("cpu_string", map_location=lambda: "cpu", expect="cpu", expect_cpu="cpu"),
    Case("device_string", map_location=lambda: "emulated:1", expect="emulated:1", expect_cpu="emulated:1"),
    Case("torch_device", map_location=lambda: emulator.device(1), expect="emulated:1", expect_cpu="emulated:1"),
    Case("dict_to_cpu", map_location=lambda: {"emulated:0": "cpu"}, expect="cpu", expect_cpu="cpu"),
    Case("dict_to_other_index", map_location=lambda: {"emulated:0": "emulated:1"}, expect="emulated:1",
         expect_cpu="cpu"),
    Case("callable_keep_storage", map_location=lambda: lambda storage, loc: storage, expect="cpu",
         expect_cpu="cpu"),
)
def test_load_map_location(map_location: Callable[[], object], expect: str, expect_cpu: str) -> None:
    """torch.load restores or remaps emulated storages for every map_location form, as for CUDA."""
    emulator.device()
    original = torch.arange(6.0).reshape(2, 3).to(emulator.device())
    state = {"w": original, "row": original[1], "cpu": torch.ones(2)}
    loaded = torch.load(_saved(state), map_location=map_location(), weights_only=True)
    assert str(loaded["w"].device) == expect
    assert torch.equal(loaded["w"].cpu(), original.cpu())
    assert str(loaded["cpu"].device) == expect_cpu  # a device map_location moves CPU storages too
    loaded["row"].add_(1)  # views saved together load as views of one storage
    assert loaded["w"][1].cpu().tolist() == [4.0, 5.0, 6.0]


def test_load_mmap(tmp_path: Path) -> None:
    """mmap=True loads work for emulated checkpoints."""
    path = tmp_path / "ckpt.pt"
    torch.save({"w": ones(emulator.device(), 4)}, path)
    loaded = torch.load(path, mmap=True, weights_only=True)
    assert loaded["w"].device == emulator.device()
    assert torch.equal(loaded["w"].cpu(), torch.ones(4))


def test_load_beyond_device_count() -> None:
    """A location past the device count fails like CUDA's 'Attempting to deserialize' error."""
    with pytest.raises(RuntimeError, match="Attempting to deserialize object on EMULATED device 7"):
        torch.load(_saved(ones(emulator.device())), map_location={"emulated:0": "emulated:7"}, weights_only=True)


def test_state_dict_round_trip() -> None:
    """A model's state_dict saved on the device loads into a model on the device."""
    dev = emulator.device()
    model = torch.nn.Linear(3, 2).to(dev)
    other = torch.nn.Linear(3, 2).to(dev)
    other.load_state_dict(torch.load(_saved(model.state_dict()), weights_only=True))
    assert torch.equal(other.weight.cpu(), model.weight.cpu())


# ---- memory accounting ----------------------------------------------------------------------


def test_memory_accounting() -> None:
    """memory_allocated, max_memory_allocated and reset_peak_memory_stats follow torch.cuda."""
    dev = emulator.device(1)
    gc.collect()
    gc.disable()  # no other test's garbage may be freed while the counters are compared
    try:
        _check_memory_accounting(dev)
    finally:
        gc.enable()


def _check_memory_accounting(dev: torch.device) -> None:
    base = emulator.memory_allocated(dev)
    emulator.reset_peak_memory_stats(dev)
    t = torch.zeros(256, device=dev)
    view = t[10:20]
    assert emulator.memory_allocated(dev) == base + 1024
    u = torch.zeros(512, device=dev)
    assert emulator.max_memory_allocated(dev) == base + 1024 + 2048
    del t, u
    gc.collect()
    assert emulator.memory_allocated(dev) == base + 1024  # the view keeps its block alive
    del view
    gc.collect()
    assert emulator.memory_allocated(dev) == base
    emulator.reset_peak_memory_stats(dev)
    assert emulator.max_memory_allocated(dev) == base


def test_torch_accelerator_memory_functions() -> None:
    """torch.accelerator's memory functions reach the emulator's allocator, a c10::DeviceAllocator as CUDA's is
    (they used to stop at an internal assert, "Allocator for emulated is not a DeviceAllocator"), with CUDA's
    counting: a block rounded up to 512 bytes, requested_bytes what was asked for, a block of at most 1 MiB in the
    small pool; with no cache, reserved is allocated. torch.emulated has torch.cuda's names for them."""
    dev = emulator.device(0)
    if torch.accelerator.current_accelerator() != torch.device(dev.type):
        pytest.skip("torch.accelerator is another backend's here")
    gc.collect()
    gc.disable()  # no other test's garbage may be freed while the counters are compared
    try:
        torch.ones(1, device=dev)  # the device has started: its allocator counts as initialized
        assert torch._C._accelerator_isAllocatorInitialized()
        torch.accelerator.reset_peak_memory_stats()
        torch.accelerator.reset_accumulated_memory_stats()
        before = torch.accelerator.memory_stats()
        small, large = torch.empty(100, device=dev), torch.empty(2**20, device=dev)  # 400 bytes, 4 MiB
        stats = torch.accelerator.memory_stats()
        assert stats["allocated_bytes.all.current"] - before["allocated_bytes.all.current"] == 512 + 2**22
        assert stats["requested_bytes.all.current"] - before["requested_bytes.all.current"] == 400 + 2**22
        assert stats["allocated_bytes.small_pool.allocated"] == 512
        assert stats["allocated_bytes.large_pool.allocated"] == 2**22
        assert stats["allocation.all.current"] - before["allocation.all.current"] == 2
        assert torch.accelerator.memory_allocated() == torch.accelerator.memory_reserved() == emulator.memory_allocated(dev)
        emulated = torch.emulated  # type: ignore[attr-defined]
        assert emulated.memory_allocated(dev) == torch.accelerator.memory_allocated()
        del small, large
        torch.accelerator.empty_cache()
        stats = torch.accelerator.memory_stats()
        assert stats["active_bytes.all.current"] == before["active_bytes.all.current"]
        assert stats["active_bytes.all.freed"] == 512 + 2**22
        assert torch.accelerator.max_memory_allocated() == before["allocated_bytes.all.current"] + 512 + 2**22
        torch.accelerator.reset_peak_memory_stats()
        assert torch.accelerator.max_memory_allocated() == before["allocated_bytes.all.current"]
        torch.accelerator.reset_accumulated_memory_stats()
        assert torch.accelerator.memory_stats()["active_bytes.all.freed"] == 0
        emulator.set_capacity(dev, 2**30)
        free, total = torch.accelerator.get_memory_info()
        assert total == 2**30
        assert free == 2**30 - emulator.memory_allocated(dev)
        assert emulated.mem_get_info(dev) == (free, total)
        with emulator.visible(1), pytest.raises(RuntimeError, match=r"^Invalid device argument 1: did you call init"):
            torch.accelerator.memory_stats(1)  # a device the host does not show, as CUDA's check refuses it
        emulator.set_capacity(dev, None)
        free, total = torch.accelerator.get_memory_info()
        assert 0 < free <= total  # the host's memory, which the emulated device's is
    finally:
        emulator.set_capacity(dev, None)
        gc.enable()


def test_a_device_tensor_is_not_shared_with_another_process() -> None:
    """A departure: CUDA shares a device tensor with another process through its IPC handles; the emulator's
    cannot be pickled for one (torch.multiprocessing's reduction reaches the CPU-only shared-memory path)."""
    from multiprocessing.reduction import ForkingPickler

    import torch.multiprocessing  # registers its reductions

    with pytest.raises(RuntimeError, match=r"^_share_fd_: only available on CPU$"):
        ForkingPickler.dumps(torch.ones(3, device=emulator.device()))


def test_capacity_raises_out_of_memory() -> None:
    """Past the capacity, an allocation raises torch.OutOfMemoryError and allocates nothing."""
    dev = emulator.device(1)
    gc.collect()
    base = emulator.memory_allocated(dev)
    emulator.set_capacity(dev, base + 4096)
    try:
        kept = torch.zeros(512, device=dev)
        with pytest.raises(torch.OutOfMemoryError, match=r"emulated:1 out of memory\. Tried to allocate"):
            torch.zeros(1024, device=dev)
        with pytest.raises(torch.OutOfMemoryError):
            kept * 2 + torch.ones(512, device=dev)
        assert emulator.memory_allocated(dev) == base + 2048
    finally:
        emulator.set_capacity(dev, None)
    torch.zeros(4096, device=dev)


@pytest.mark.parametrize(("nbytes", "text"), [(0, "0 bytes"), (1024, "1024 bytes"), (1025, "1.00 KiB"),
                                             (2**20, "1024.00 KiB"), (3 * 2**20 // 2, "1.50 MiB"),
                                             (2**30, "1024.00 MiB"), (79 * 2**30 // 2, "39.50 GiB")])
def test_sizes_are_written_as_cuda_writes_them(nbytes: int, text: str) -> None:
    """The out-of-memory message's sizes follow CUDACachingAllocator.cpp's format_size."""
    assert memory.format_size(nbytes) == text


def test_out_of_memory_message_reads_as_cuda_s() -> None:
    """The message names what CUDA's names: the segment CUDA would request (2 MiB for a small tensor,
    20 MiB below 10 MiB, else rounded to 2 MiB), the total, what is free, other processes' share and this
    process's allocation."""
    dev = emulator.device(1)
    gc.collect()
    base = emulator.memory_allocated(dev)
    emulator.set_capacity(dev, 8 * 2**30, used_elsewhere=8 * 2**30 - base)
    try:
        pattern = (r"^emulated:1 out of memory\. Tried to allocate 2\.00 MiB\. Device 1 has a total capacity of "
                   r"8\.00 GiB of which 0 bytes is free\. Other processes have .* GiB memory in use\. "
                   r"Of the allocated memory .* is allocated by PyTorch\.$")
        with pytest.raises(torch.OutOfMemoryError, match=pattern):
            torch.zeros(10, device=dev)
        for floats, segment in [(2**20, "20.00 MiB"), (3 * 2**20 + 1, "14.00 MiB")]:
            with pytest.raises(torch.OutOfMemoryError, match=f"Tried to allocate {segment}\\."):
                torch.empty(floats, device=dev)
    finally:
        emulator.set_capacity(dev, None)
    with pytest.raises(ValueError, match="used_elsewhere=9 must lie between 0 and the capacity, 8"):
        emulator.set_capacity(dev, 8, used_elsewhere=9)


# ---- a transformers model ----------------------------------------------------------------


def test_transformers_forward_and_generate() -> None:
    """A tiny transformers model runs forward and generate on the emulated device."""
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    config = GPT2Config(vocab_size=40, n_positions=16, n_embd=16, n_layer=2, n_head=2,
                        bos_token_id=0, eos_token_id=0, pad_token_id=0)
    model = GPT2LMHeadModel(config).eval()
    ids = torch.tensor([[1, 2, 3, 4]])
    mask = torch.ones_like(ids)
    with torch.no_grad():
        logits = model(ids).logits
        generated = model.generate(ids, attention_mask=mask, max_new_tokens=4, do_sample=False)
        dev = emulator.device()
        model.to(dev)
        torch.testing.assert_close(model(ids.to(dev)).logits.cpu(), logits)
        assert torch.equal(model.generate(ids.to(dev), attention_mask=mask.to(dev), max_new_tokens=4,
                                          do_sample=False).cpu(), generated)
        with pytest.raises(RuntimeError, match=SAME):
            model(ids)


# ---- known departures from CUDA, pinned so that a change shows -------------------------------


# The compiler-less fallback (PyTorch's Python device guard and hooks) in one process, each departure's
# snippet run in turn and its outcome printed: "[name] ran" or "[name] ErrorType: message".
NO_COMPILER = """
from samedevice import emulator
print("reason:", emulator.unavailable_reason())
try:
    emulator.device()
except emulator.EmulatorUnavailableError as e:
    print("refused:", e)
"""


def test_without_a_compiler_the_emulator_says_what_to_install(tmp_path: Path) -> None:
    """On a host where the C++ part cannot be built (no compiler, nothing cached), the emulator is unavailable
    and says so in one line naming what to install; the rest of the package imports and runs."""
    run = run_python(NO_COMPILER, CXX=str(tmp_path / "no-such-compiler"), SAMEDEVICE_CACHE=str(tmp_path / "cache"))
    assert run.returncode == 0, run.stderr[-3000:]
    expected = (f"the emulated accelerator needs its C++ part, which cannot be built here: no C++ compiler found "
                f"(CXX={tmp_path / 'no-such-compiler'} is not a program): install g++ or clang++, or set CXX")
    assert run.stdout.splitlines() == [f"reason: {expected}", f"refused: {expected}"]


def test_unsupported_op_fails_loudly_with_its_name(tmp_path: Path) -> None:
    """An op the emulator has no kernel for raises, naming the op and the device, never computing elsewhere."""
    empty = tmp_path / "empty.bin"
    empty.write_bytes(b"")
    with pytest.raises(NotImplementedError, match=r"Could not run 'aten::from_file' with arguments from the 'emulated'"):
        torch.from_file(str(empty), size=0, device=emulator.device())


def test_pinned_memory_as_on_cuda() -> None:
    """pin_memory(), pin_memory=True factories and DataLoader(pin_memory=True) give pinned host memory
    (the C++ hooks' pinned allocator, guard.cpp): is_pinned() holds for views inside it, not for other
    CPU tensors, and a copy to the device with non_blocking=True lands. A host without the accelerator
    has none, as a CUDA host without a GPU."""
    pinned = torch.arange(6.0).pin_memory()
    assert pinned.is_pinned()
    assert pinned[2:].is_pinned()
    assert pinned.device.type == "cpu"
    assert not torch.arange(6.0).is_pinned()
    assert torch.empty(3, pin_memory=True).is_pinned()
    assert torch.equal(pinned.to(emulator.device(), non_blocking=True).cpu(), torch.arange(6.0))
    data = torch.utils.data.TensorDataset(torch.arange(10.0))
    assert all(batch.is_pinned() for (batch,) in torch.utils.data.DataLoader(data, batch_size=4, pin_memory=True))
    with emulator.absent():
        assert not pinned.is_pinned()
        with pytest.raises(RuntimeError, match="Found no emulated device on this host: pinned memory needs"):
            torch.ones(2).pin_memory()
    assert pinned.is_pinned()


def test_torch_accelerator_prefers_the_emulator() -> None:
    """Departure: once registered, torch.accelerator reports the emulated device even on a CUDA host
    (PyTorch prefers a registered PrivateUse1 backend, aten/src/ATen/DeviceAccelerator.cpp)."""
    assert torch.accelerator.current_accelerator() == torch.device("emulated")


def test_fused_adagrad_steps_as_on_cuda() -> None:
    """Adagrad(fused=True) steps on the device as on CPU: PyTorch 2.13 has a CUDA kernel for it
    (native_functions.yaml: _fused_adagrad_, CUDA: _fused_adagrad_kernel_cuda_)."""
    results = []
    for where in (torch.device("cpu"), emulator.device()):
        param = torch.nn.Parameter(torch.arange(3.0).to(where))
        optimizer = torch.optim.Adagrad([param], lr=0.1, fused=True)
        for _ in range(2):
            optimizer.zero_grad()
            param.pow(2).sum().backward()
            optimizer.step()
        results.append(param.detach().cpu())
    torch.testing.assert_close(results[1], results[0])
