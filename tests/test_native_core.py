"""The native core (SAMEDEVICE_EMULATOR_CORE=native, csrc/): what it does that the subclass core cannot.

The core is chosen once per process, so the tests that need it run in a child process (the last test here runs this
file and tests/test_emulator.py there); in a process on the subclass core they are skipped with that reason.
"""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch import nn

from samedevice import emulator
from samedevice.emulator import native

ROOT = Path(__file__).resolve().parent.parent
on_native = pytest.mark.skipif(not native.requested(), reason="runs in the child process on the native core "
                               "(test_the_native_core_runs_these_tests_and_the_emulator_suite)")

# tests/test_emulator.py's tests that the native core does not pass yet, each with why (issue 18's next slices)
KNOWN_GAPS = {
    # the subclass's special gives every mismatched convolution "Input type ..."; PyTorch's composite picks the
    # backend by the input's device, and for this CPU input (1x1 kernel, batch 1) CPU's slow path, whose codegen
    # check names slow_conv2d_forward: the native core runs that composite as CUDA does
    "test_device_rule[conv2d_cpu_input-emulated]",
    # nested tensors (the transformer fast path) need a NestedTensorPrivateUse1 fallback
    "test_device_rule[encoder_nested_fast_path_cpu_weights-emulated]",
    # cuda_paths.py's CUDA-only checks (embedding_bag's index dtype, the resizing kernels' dtypes) are not ported
    "test_device_rule[embedding_bag_float_indices-emulated]",
    "test_device_rule[interpolate_uint8_bilinear-emulated]",
    "test_device_rule[interpolate_uint8_bicubic-emulated]",
    "test_device_rule[interpolate_uint8_bicubic_antialias-emulated]",
    # departures of the subclass core that the native core removes (these tests pin the departure)
    "test_moving_back_to_cpu_replaces_parameters",
    "test_set_data_across_devices_is_refused",
    "test_storages_cannot_move_to_the_device",
    # the no-compiler fallback is the subclass core's: the native core needs its C++ part
    "test_backward_on_the_guard_less_fallback_is_limited_to_index_0",
    "test_generators_and_pinned_memory_need_the_cpp_hooks[device_generator]",
    "test_generators_and_pinned_memory_need_the_cpp_hooks[pin_memory]",
    "test_autocast_without_the_cpp_part_fails_in_one_line",
}


@on_native
def test_device_tensors_are_plain_tensors() -> None:
    """A device tensor is a plain torch.Tensor on emulated:0, with its own storage there."""
    dev = emulator.device()
    t = torch.ones(3, device=dev)
    assert type(t) is torch.Tensor
    assert t.device == dev
    assert t.untyped_storage().device == dev
    assert torch._C._is_alias_of(t, t.view(3, 1))
    assert not torch._C._is_alias_of(t, t.clone())


@on_native
def test_parameters_keep_their_identity_both_ways() -> None:
    """module.to(device) and back keeps each Parameter, ties and the optimizer's link, as on CUDA."""
    dev = emulator.device()
    model = nn.Sequential(nn.Embedding(4, 3), nn.Linear(3, 4, bias=False))
    model[1].weight = model[0].weight  # tied
    weight = model[0].weight
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model.to(dev)
    assert model[0].weight is weight
    assert model[1].weight is weight
    assert weight.device == dev
    before = weight.detach().cpu().clone()
    model(torch.tensor([1, 2], device=dev)).sum().backward()
    optimizer.step()
    assert not torch.equal(weight.detach().cpu(), before)  # the optimizer built before .to trains the model
    model.cpu()
    assert model[0].weight is weight
    assert model[1].weight is weight
    assert weight.device.type == "cpu"


@on_native
def test_set_data_moves_a_parameter() -> None:
    """`param.data = t.to(device)` works as on CUDA (pytorch/pytorch#8741's snippet)."""
    dev = emulator.device()
    p = nn.Parameter(torch.ones(2))
    p.data = p.data.to(dev)
    assert p.device == dev
    assert isinstance(p, nn.Parameter)
    (p * 2).sum().backward()
    assert p.grad is not None
    assert p.grad.device == dev


@on_native
def test_a_module_moves_while_a_graph_holds_its_weights() -> None:
    """A module moves to the device while an autograd graph and a view still hold its CPU weights."""
    model = nn.Linear(2, 2)
    out = model(torch.ones(1, 2)).sum()
    view = model.weight[0]
    model.to(emulator.device())
    out.backward()  # the graph's saved CPU tensors are still whole
    assert model.weight.grad is not None
    assert view.device.type == "cpu"


@on_native
def test_storages_live_on_the_device() -> None:
    """Storages allocate on the device, and a map_location callable that moves storages works."""
    dev = emulator.device()
    storage = torch.UntypedStorage(8, device=dev)
    assert storage.device == dev
    assert storage.nbytes() == 8
    buffer = io.BytesIO()
    torch.save({"w": torch.arange(4.0)}, buffer)
    buffer.seek(0)
    loaded = torch.load(buffer, weights_only=True, map_location=lambda s, _: s.to(device=dev))
    assert loaded["w"].device == dev
    assert loaded["w"].cpu().tolist() == [0.0, 1.0, 2.0, 3.0]


@on_native
def test_save_and_load_keep_the_device() -> None:
    """torch.save records emulated:1, torch.load restores it, map_location='cpu' remaps it."""
    dev = emulator.device(1)
    buffer = io.BytesIO()
    torch.save({"w": torch.arange(3.0, device=dev)}, buffer)
    buffer.seek(0)
    assert torch.load(buffer, weights_only=True)["w"].device == dev
    buffer.seek(0)
    assert torch.load(buffer, weights_only=True, map_location="cpu")["w"].device.type == "cpu"


@on_native
def test_memory_is_counted_and_limited() -> None:
    """Allocations count on their device, a result resized through out= too, and past the capacity
    torch.OutOfMemoryError names the device."""
    dev = emulator.device()
    start = emulator.memory_allocated(dev)
    t = torch.empty(256, device=dev)
    assert emulator.memory_allocated(dev) == start + 1024
    out = torch.empty(0, device=dev)
    torch.add(t, t, out=out)
    assert out.shape == (256,)
    assert emulator.memory_allocated(dev) == start + 2048
    del t, out
    assert emulator.memory_allocated(dev) == start
    emulator.set_capacity(dev, start + 4096)
    try:
        with pytest.raises(torch.OutOfMemoryError, match=r"emulated:0 out of memory\. Tried to allocate 2\.00 MiB"):
            torch.empty(2048, device=dev)
    finally:
        emulator.set_capacity(dev, None)


@on_native
def test_device_draws_have_their_own_stream() -> None:
    """A draw on the device comes from the device's generator and leaves the CPU's untouched."""
    dev = emulator.device()
    torch.manual_seed(1)
    cpu_state = torch.get_rng_state()
    torch.emulated.manual_seed(0)  # type: ignore[attr-defined]
    a = torch.rand(4, device=dev)
    torch.emulated.manual_seed(0)  # type: ignore[attr-defined]
    b = torch.rand(4, device=dev)
    assert torch.equal(a.cpu(), b.cpu())
    assert torch.equal(torch.get_rng_state(), cpu_state)
    with pytest.raises(RuntimeError, match="Expected a 'emulated' device type for generator but found 'cpu'"):
        torch.rand(2, device=dev).uniform_(generator=torch.Generator())


@on_native
def test_a_cpu_only_op_fails_naming_it() -> None:
    """An op with no CUDA kernel fails on the device naming the op, as the dispatcher fails for CUDA."""
    with pytest.raises(NotImplementedError, match="Could not run 'aten::_mkldnn_transpose'"):
        torch.ops.aten._mkldnn_transpose(torch.ones(2, 2, device=emulator.device()), 0, 1)


def test_the_native_core_runs_these_tests_and_the_emulator_suite(tmp_path: Path) -> None:
    """In a process on the native core, the tests above pass, and so does tests/test_emulator.py but for the
    known gaps listed here, each failing."""
    if native.requested():
        pytest.skip("this is the child process")
    report = tmp_path / "report.xml"
    env = dict(os.environ, SAMEDEVICE_EMULATOR_CORE="native", HF_HUB_OFFLINE="1")
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly", f"--junitxml={report}",
         str(ROOT / "tests" / "test_native_core.py"), str(ROOT / "tests" / "test_emulator.py")],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600,
    )
    import xml.etree.ElementTree as ET

    cases = ET.parse(report).getroot().iter("testcase")
    failed = {c.get("name") for c in cases if c.find("failure") is not None or c.find("error") is not None}
    assert failed == KNOWN_GAPS, done.stdout[-3000:]
    assert "passed" in done.stdout.splitlines()[-1]
