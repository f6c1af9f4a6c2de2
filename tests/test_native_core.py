"""The native core (csrc/): what a PrivateUse1 backend in C++ does that the first design, a Python tensor subclass,
could not (each item was a departure of that design), and the bugs running PyTorch's own test data found."""

from __future__ import annotations

import gc
import io
import re
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from samedevice import emulator
from samedevice.emulator import native

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def no_gc() -> Any:
    """The memory counters compared, with no other test's garbage freed meanwhile by the collector."""
    gc.collect()
    gc.disable()
    yield
    gc.enable()


def test_device_tensors_are_plain_tensors() -> None:
    """A device tensor is a plain torch.Tensor on emulated:0, with its own storage there."""
    dev = emulator.device()
    t = torch.ones(3, device=dev)
    assert type(t) is torch.Tensor
    assert t.device == dev
    assert t.untyped_storage().device == dev
    assert torch._C._is_alias_of(t, t.view(3, 1))
    assert not torch._C._is_alias_of(t, t.clone())


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


def test_a_module_moves_while_a_graph_holds_its_weights() -> None:
    """A module moves to the device while an autograd graph and a view still hold its CPU weights."""
    model = nn.Linear(2, 2)
    out = model(torch.ones(1, 2)).sum()
    view = model.weight[0]
    model.to(emulator.device())
    out.backward()  # the graph's saved CPU tensors are still whole
    assert model.weight.grad is not None
    assert view.device.type == "cpu"


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


def test_save_and_load_keep_the_device() -> None:
    """torch.save records emulated:1, torch.load restores it, map_location='cpu' remaps it."""
    dev = emulator.device(1)
    buffer = io.BytesIO()
    torch.save({"w": torch.arange(3.0, device=dev)}, buffer)
    buffer.seek(0)
    assert torch.load(buffer, weights_only=True)["w"].device == dev
    buffer.seek(0)
    assert torch.load(buffer, weights_only=True, map_location="cpu")["w"].device.type == "cpu"


@pytest.mark.usefixtures("no_gc")
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


def test_device_draws_have_their_own_stream() -> None:
    """A draw on the device comes from the device's generator and leaves the CPU's untouched."""
    dev = emulator.device()
    torch.manual_seed(1)
    cpu_state = torch.get_rng_state()
    torch.emulated.manual_seed_all(0)  # type: ignore[attr-defined]
    a = torch.rand(4, device=dev)
    torch.emulated.manual_seed_all(0)  # type: ignore[attr-defined]
    b = torch.rand(4, device=dev)
    assert torch.equal(a.cpu(), b.cpu())
    assert torch.equal(torch.get_rng_state(), cpu_state)
    with pytest.raises(RuntimeError, match="Expected a 'emulated' device type for generator but found 'cpu'"):
        torch.rand(2, device=dev).uniform_(generator=torch.Generator())


def test_conjugate_and_negative_views_read_as_on_cpu() -> None:
    """Ops on conjugate and negative views compute with the bit as CPU's do: a copy, a clone, a matmul that reads
    the bit itself, and an op PyTorch's math-bit fallback resolves first (hfft, on a clone only the call holds)."""
    dev = emulator.device()
    x = torch.randn(5, dtype=torch.complex64)
    m = torch.randn(3, 3, dtype=torch.complex64)
    xd, md = x.to(dev), m.to(dev)
    assert torch.equal(xd.conj().cpu(), x.conj().resolve_conj())
    assert torch.equal(xd.conj().clone().cpu(), x.conj().clone().resolve_conj())
    assert torch.equal(xd._neg_view().clone().cpu(), x._neg_view().clone().resolve_neg())
    torch.testing.assert_close((md.conj() @ md).cpu(), m.conj() @ m)
    assert torch.equal(torch.fft.hfft(xd).cpu(), torch.fft.hfft(x))


def test_a_type_name_pytorch_renders_for_the_device_departs() -> None:
    """Departure: where PyTorch's own code renders a device tensor's type (CPU's mkldnn convolution check, for a CPU
    input on device weights) it reads emulatedFloatType, where CUDA's reads torch.cuda.FloatTensor; the check the
    emulator makes for a device input writes torch.emulated.FloatTensor, as CUDA's would."""
    dev = emulator.device()
    rendered = "Input type (torch.FloatTensor) and weight type (emulatedFloatType) should be the same"
    with pytest.raises(RuntimeError, match=re.escape(rendered)):
        nn.functional.conv2d(torch.ones(2, 3, 8, 8), torch.ones(4, 3, 3, 3, device=dev))
    with pytest.raises(RuntimeError, match=re.escape("Input type (torch.emulated.FloatTensor) and weight type "
                                                     "(torch.FloatTensor) should be the same")):
        nn.functional.conv2d(torch.ones(2, 3, 8, 8, device=dev), torch.ones(4, 3, 3, 3))


def test_a_cpu_only_op_fails_naming_it() -> None:
    """An op with no CUDA kernel fails on the device naming the op, as the dispatcher fails for CUDA."""
    with pytest.raises(NotImplementedError, match="Could not run 'aten::_mkldnn_transpose'"):
        torch.ops.aten._mkldnn_transpose(torch.ones(2, 2, device=emulator.device()), 0, 1)


def test_compile_runs_on_the_device_and_still_checks_devices() -> None:
    """torch.compile with the eager and aot_eager backends runs a model on the device (as compiled, the same
    numbers), and a device mismatch still raises under compile."""
    dev = emulator.device()
    model = nn.Linear(4, 2).to(dev)
    x = torch.randn(3, 4, device=dev)
    for backend in ("eager", "aot_eager"):
        compiled = torch.compile(model, backend=backend, fullgraph=True)
        torch.testing.assert_close(compiled(x).cpu(), model(x).cpu())
        torch._dynamo.reset()
    add = torch.compile(lambda a, b: a + b, backend="aot_eager", fullgraph=True)
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device, but found at least two "
                                           "devices, emulated:0 and cpu!"):
        add(x, torch.ones(4))
    torch._dynamo.reset()


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # PyTorch's own, while it imports inductor
def test_inductor_is_refused_in_one_line() -> None:
    """torch.compile's default backend (inductor) cannot generate code for the device: it says so in one line."""
    dev = emulator.device()
    compiled = torch.compile(nn.Linear(4, 2).to(dev))
    with pytest.raises(Exception, match=re.escape(native.INDUCTOR_REFUSAL)):
        compiled(torch.randn(3, 4, device=dev))
    torch._dynamo.reset()


def test_nested_tensors_work_on_the_device() -> None:
    """A nested tensor built on the device, or moved there, runs the ops CUDA has nested kernels for."""
    dev = emulator.device()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # PyTorch's prototype warning for nested tensors
        built = torch.nested.nested_tensor([torch.ones(2), torch.ones(3)], device=dev)
        moved = torch.nested.nested_tensor([torch.ones(2), torch.ones(3)]).to(dev)
    for nested in (built, moved):
        assert nested.is_nested
        assert nested.device == dev
        assert nested.relu().to_padded_tensor(0.0).cpu().tolist() == [[1.0, 1.0, 0.0], [1.0, 1.0, 1.0]]


def test_efficient_zero_tensors_are_cuda_s() -> None:
    """torch._efficientzerotensor on the device holds no memory, reads as zeros and refuses writes, as CUDA's."""
    zeros = torch._efficientzerotensor((2, 3), device=emulator.device())
    assert torch._is_zerotensor(zeros)
    assert (zeros + 1).cpu().tolist() == [[1.0] * 3] * 2
    with pytest.raises(RuntimeError, match="ZeroTensors are immutable"):
        zeros.add_(1)


def test_dlpack_refuses_the_device_in_pytorch_s_words() -> None:
    """Departure: DLPack exchanges no PrivateUse1 tensor (PyTorch's own refusal); a copy on CPU goes through."""
    a = torch.arange(3.0, device=emulator.device())
    with pytest.raises(ValueError, match="Unknown device type emulated for Dlpack"):
        torch.from_dlpack(a)
    assert torch.from_dlpack(a.cpu()).tolist() == [0.0, 1.0, 2.0]


def test_nested_metadata_stays_on_cpu_and_the_tensor_whole() -> None:
    """A nested tensor's size and stride tensors come back as they are, on CPU (as CUDA's), and the nested tensor
    stays readable after."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # PyTorch's prototype warning for nested tensors
        nested = torch.nested.nested_tensor([torch.ones(2, 3), torch.ones(4, 3)]).to(emulator.device())
    assert nested._nested_tensor_size().device.type == "cpu"
    assert nested._nested_tensor_size().tolist() == [[2, 3], [4, 3]]
    assert nested._nested_tensor_strides().tolist() == [[3, 1], [3, 1]]
    assert nested.cpu().to_padded_tensor(0.0).sum().item() == 18.0


def test_seeded_draws_from_several_threads_stay_apart() -> None:
    """Dropout on the device from four threads at once draws distinct masks from the device's stream and leaves
    the CPU's generator as it was (each lend of the device's state to the CPU kernel is whole)."""
    from concurrent.futures import ThreadPoolExecutor

    dev = emulator.device()
    x = torch.ones(256, device=dev)
    before = torch.get_rng_state()

    def masks(_: int) -> list[bytes]:
        return [torch.ops.aten.native_dropout(x, 0.5, True)[1].cpu().numpy().tobytes() for _ in range(20)]

    with ThreadPoolExecutor(4) as pool:
        drawn = [m for ms in pool.map(masks, range(4)) for m in ms]
    assert len(set(drawn)) == len(drawn)
    assert torch.equal(torch.get_rng_state(), before)


def test_set_and_memory_figures_follow_the_storage_s_device() -> None:
    """`set_` to a larger geometry grows the storage on the storage's device; `set_()` gives back an empty one;
    the memory figures refuse an index the emulator does not have, in CUDA's words."""
    on_one = torch.empty(0, device=emulator.device(1))
    start = [emulator.memory_allocated(emulator.device(i)) for i in (0, 1)]
    on_one.set_(on_one.untyped_storage(), 0, (1000,), (1,))
    assert on_one.untyped_storage().device == emulator.device(1)
    # 4000 bytes asked for: a block of 4096, as CUDA's allocator rounds up to 512
    assert [emulator.memory_allocated(emulator.device(i)) for i in (0, 1)] == [start[0], start[1] + 4096]
    on_one.set_()
    assert on_one.untyped_storage().nbytes() == 0
    assert emulator.memory_allocated(emulator.device(1)) == start[1]
    with pytest.raises(RuntimeError, match="Invalid device argument 2: did you call init"):
        emulator.memory_allocated("emulated:2")


def test_a_host_alias_keeps_its_device_memory() -> None:
    """A host alias (what eccl hands gloo) keeps the device memory alive after the device tensor is gone."""
    x = torch.full((1000,), 7.0, device=emulator.device())
    alias = torch.ops.samedevice._host(x)
    del x
    gc.collect()
    torch.ones(1000, device=emulator.device()).mul_(5)  # memory freed now would be reused here
    assert alias[:3].tolist() == [7.0, 7.0, 7.0]


@pytest.mark.usefixtures("no_gc")
def test_a_view_of_a_host_alias_comes_back_as_a_view_of_the_device_tensor() -> None:
    """A Python kernel (run_on_host) that returns a view of its argument's host alias gets, through `_device`, a view
    of the device tensor: the same memory, counted once (it came back as a CPU tensor before)."""
    dev = emulator.device()
    t = torch.arange(6.0, device=dev)
    start = emulator.memory_allocated(dev)
    view = torch.ops.samedevice._device(torch.ops.samedevice._host(t)[2:4], 0)
    assert view.device == dev
    assert torch._C._is_alias_of(view, t)
    assert view.data_ptr() == t.data_ptr() + 2 * t.element_size()
    view.mul_(10)
    assert t.tolist() == [0.0, 1.0, 20.0, 30.0, 4.0, 5.0]
    assert emulator.memory_allocated(dev) == start


@pytest.mark.usefixtures("no_gc")
def test_a_resized_host_alias_comes_back_counted_once() -> None:
    """A host alias a CPU kernel resized holds device memory already: `_device` hands that memory over (counted once)
    and the alias stays valid while Python holds it."""
    dev = emulator.device()
    start = emulator.memory_allocated(dev)
    alias = torch.ops.samedevice._host(torch.arange(4.0, device=dev))
    alias.resize_(100)
    back = torch.ops.samedevice._device(alias, 0)
    assert back.device == dev
    assert back.data_ptr() == alias.data_ptr()
    assert emulator.memory_allocated(dev) - start == 512  # 400 bytes: one block, rounded up to 512 as on CUDA
    del back
    alias.fill_(2.0)  # still its memory
    assert emulator.memory_allocated(dev) - start == 512
    del alias
    assert emulator.memory_allocated(dev) == start


@pytest.mark.usefixtures("no_gc")
def test_a_stale_host_alias_is_refused_its_way_back() -> None:
    """A host alias whose device tensor was resized since views memory the resize freed: `_device` refuses it rather
    than take the freed block over as a device tensor."""
    dev = emulator.device()
    t = torch.arange(4.0, device=dev)
    alias = torch.ops.samedevice._host(t)
    t.resize_(4096)  # new memory: the alias's is freed
    with pytest.raises(RuntimeError, match="resized since views freed memory"):
        torch.ops.samedevice._device(alias, 0)


def test_out_lists_resized_by_the_kernel_take_their_new_memory() -> None:
    """An op writing a list of out= tensors that its CPU kernel resizes (unbind_copy, a foreach out=): each element
    takes the new memory on the device, counted there, as on CPU."""
    dev = emulator.device()
    x = torch.arange(6.0, device=dev)
    start = emulator.memory_allocated(dev)
    outs = [torch.empty(0, device=dev) for _ in range(3)]
    torch.unbind_copy(x.view(3, 2), 0, out=outs)
    assert [o.tolist() for o in outs] == [[0.0, 1.0], [2.0, 3.0], [4.0, 5.0]]
    assert all(o.untyped_storage().device == dev for o in outs)
    doubled = [torch.empty(0, device=dev)]
    torch.ops.aten._foreach_add.List_out([x], [x], out=doubled)
    assert doubled[0].tolist() == [0.0, 2.0, 4.0, 6.0, 8.0, 10.0]
    assert emulator.memory_allocated(dev) == start + 4 * 512  # four blocks, each rounded up to 512 bytes as on CUDA


def test_a_convolution_across_two_device_indices_raises() -> None:
    """An input on emulated:0 with a weight on emulated:1 raises as cuDNN's wrapper check raises for two GPUs."""
    with pytest.raises(RuntimeError, match=r"but got weight is on emulated:1, different from other tensors on "
                                           r"emulated:0 \(when checking argument in method "
                                           r"wrapper_EMULATED__cudnn_convolution\)"):
        nn.functional.conv2d(torch.ones(1, 1, 4, 4, device=emulator.device(0)),
                             torch.ones(1, 1, 3, 3, device=emulator.device(1)))
