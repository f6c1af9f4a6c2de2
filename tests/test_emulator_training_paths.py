"""The paths real training code takes on the emulated device, each as CUDA takes it: autocast and GradScaler,
streams and events (and DCP, which uses them), torch.compile, and an emulator registered too late."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F

from samedevice import emulator
from tests.helpers import ROOT, dispatched_ops

pytestmark = pytest.mark.skipif(emulator.unavailable_reason() is not None,
                                reason=str(emulator.unavailable_reason()))

LOW = (torch.float16, torch.bfloat16)


def _dev() -> torch.device:
    return emulator.device()


# ---- autocast: CUDA's policy -----------------------------------------------------------------------------
# The expected dtypes are CUDA's registration (aten/src/ATen/autocast_mode.cpp with the lists in
# ATen/autocast_mode.h), written out here, not read back from the emulator: "low" is the autocast dtype,
# float32 where CUDA casts to float32 or promotes to the widest input. Each op gets inputs that tell the
# policies apart: float32 inputs for the ops that cast down, low-precision inputs for those that cast up,
# one of each for those that promote.

def _f32(*shape: int) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(len(shape)), device="cpu").to(_dev())


AUTOCAST_OPS = {
    # lower_precision_fp (AT_FORALL_LOWER_PRECISION_FP)
    "mm": ("low", lambda low: torch.mm(_f32(3, 4), _f32(4, 5))),
    "linear": ("low", lambda low: F.linear(_f32(3, 4), _f32(5, 4), _f32(5))),
    "conv2d": ("low", lambda low: F.conv2d(_f32(1, 2, 5, 5), _f32(3, 2, 3, 3))),
    "bmm": ("low", lambda low: torch.bmm(_f32(2, 3, 4), _f32(2, 4, 5))),
    "baddbmm": ("low", lambda low: torch.baddbmm(_f32(2, 3, 5), _f32(2, 3, 4), _f32(2, 4, 5))),
    "matmul": ("low", lambda low: _f32(3, 4) @ _f32(4, 2)),
    # fp32_set_opt_dtype (AT_FORALL_FP32_SET_OPT_DTYPE): low-precision input, float32 output
    "softmax": (torch.float32, lambda low: torch.softmax(_f32(3, 4).to(low), -1)),
    "log_softmax": (torch.float32, lambda low: torch.log_softmax(_f32(3, 4).to(low), -1)),
    "sum": (torch.float32, lambda low: _f32(3, 4).to(low).sum()),
    # fp32 (AT_FORALL_FP32)
    "layer_norm": (torch.float32, lambda low: F.layer_norm(_f32(3, 4).to(low), (4,))),
    "exp": (torch.float32, lambda low: torch.exp(_f32(3).to(low))),
    "pow": (torch.float32, lambda low: torch.pow(_f32(3).to(low), 2)),
    "mse_loss": (torch.float32, lambda low: F.mse_loss(_f32(3).to(low), _f32(3).to(low))),
    # cross_entropy has no entry of its own on CUDA: its log_softmax and nll_loss are float32 ones
    "cross_entropy": (torch.float32, lambda low: F.cross_entropy(_f32(3, 4).to(low),
                                                                 torch.tensor([0, 1, 3], device=_dev()))),
    # promote (AT_FORALL_PROMOTE): the widest input
    "addcmul": (torch.float32, lambda low: torch.addcmul(_f32(3), _f32(3).to(low), _f32(3).to(low))),
    # no entry: cat promotes by itself (CUDA registers nothing; CPU's autocast registers it, a difference)
    "cat": (torch.float32, lambda low: torch.cat([_f32(3), _f32(3).to(low)])),
    "add_of_a_low_result": (torch.float32, lambda low: torch.mm(_f32(2, 2), _f32(2, 2)) + _f32(2, 2)),
}


@pytest.mark.parametrize("low", LOW, ids=["float16", "bfloat16"])
@pytest.mark.parametrize("op", sorted(AUTOCAST_OPS))
def test_autocast_output_dtype_is_cudas(op: str, low: torch.dtype) -> None:
    """Under torch.autocast("emulated"), each op's output dtype is the one CUDA's autocast registration gives."""
    expected, run = AUTOCAST_OPS[op]
    with torch.autocast("emulated", dtype=low):
        out = run(low)
    assert out.device == _dev()
    assert out.dtype == (low if expected == "low" else expected)


def test_autocast_registers_the_ops_cuda_registers() -> None:
    """Every op PyTorch registers an autocast kernel for on CUDA (AutocastCUDA, in this build too) has one on
    the emulated device, and no other: CUDA's set less cudnn's two convolutions, which the device never reaches."""
    cuda, emulated = set(), set()
    for name in torch._C._dispatch_get_all_op_names():
        if torch._C._dispatch_has_kernel_for_dispatch_key(name, "AutocastCUDA"):
            cuda.add(name)
        if torch._C._dispatch_has_kernel_for_dispatch_key(name, "AutocastPrivateUse1"):
            emulated.add(name)
    assert len(cuda) > 100
    assert emulated == cuda - {"aten::cudnn_convolution", "aten::cudnn_convolution_transpose"}


@pytest.mark.parametrize("low", LOW, ids=["float16", "bfloat16"])
def test_binary_cross_entropy_is_refused_under_autocast_as_on_cuda(low: torch.dtype) -> None:
    """binary_cross_entropy under autocast raises CUDA's message (it is unsafe in low precision)."""
    probs, target = torch.sigmoid(_f32(3)), torch.rand(3).to(_dev())
    with torch.autocast("emulated", dtype=low), pytest.raises(RuntimeError, match="unsafe to autocast"):
        F.binary_cross_entropy(probs, target)
    assert F.binary_cross_entropy(probs, target).dtype == torch.float32  # outside autocast it runs


def test_autocast_numbers_are_the_cast_inputs_cpu_numbers() -> None:
    """A cast op's result is CPU's kernel on the cast inputs, bit for bit: autocast adds the casts only."""
    x, w, b = _f32(3, 4), _f32(5, 4), _f32(5)
    with torch.autocast("emulated", dtype=torch.bfloat16):
        out = F.linear(x, w, b)
    expected = F.linear(*(t.cpu().bfloat16() for t in (x, w, b)))
    assert torch.equal(out.cpu(), expected)


def test_autocast_off_on_cpu_tensors_and_cpu_autocast_unchanged() -> None:
    """Autocast on "emulated" leaves CPU tensors alone, and CPU's own autocast keeps its own policy."""
    x = torch.randn(2, 2)
    with torch.autocast("emulated", dtype=torch.float16):
        assert torch.mm(x, x).dtype == torch.float32
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert torch.mm(x, x).dtype == torch.bfloat16


def test_nested_autocast_regions() -> None:
    """An inner region that disables autocast, or picks another dtype, wins inside and ends with its block."""
    x = _f32(2, 2)
    with torch.autocast("emulated", dtype=torch.float16):
        with torch.autocast("emulated", enabled=False):
            assert torch.mm(x, x).dtype == torch.float32
        with torch.autocast("emulated", dtype=torch.bfloat16):
            assert torch.mm(x, x).dtype == torch.bfloat16
        assert torch.mm(x, x).dtype == torch.float16


@pytest.mark.parametrize(("cache_enabled", "casts"), [(True, 1), (False, 2)])
def test_autocast_caches_the_weight_cast_unless_told_not_to(cache_enabled: bool, casts: int) -> None:
    """With cache_enabled (the default), a float32 weight that requires grad is cast once per region, as
    PyTorch's cached_cast does for CUDA; with cache_enabled=False it is cast at each use."""
    layer = torch.nn.Linear(4, 4, bias=False).to(_dev())
    x = _f32(2, 4).half()  # already in the autocast dtype: only the weight needs a cast
    with torch.autocast("emulated", dtype=torch.float16, cache_enabled=cache_enabled), dispatched_ops() as log:
        layer(x)
        layer(x)
    assert log.names.count("aten::_to_copy") == casts


def _amp_run(steps: int, resume: dict | None = None
             ) -> tuple[torch.nn.Module, torch.optim.Optimizer, torch.amp.GradScaler]:
    torch.default_generator.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1)).to(_dev())
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    scaler = torch.amp.GradScaler("emulated", init_scale=2.0**12, growth_interval=2)
    start = 0
    if resume is not None:
        model.load_state_dict(resume["model"])
        optimizer.load_state_dict(resume["optimizer"])
        scaler.load_state_dict(resume["scaler"])
        start = resume["step"]
    g = torch.Generator().manual_seed(1)
    batches = [(torch.randn(4, 8, generator=g), torch.randn(4, 1, generator=g)) for _ in range(steps)]
    for x, y in batches[start:]:
        with torch.autocast("emulated", dtype=torch.float16):
            loss = F.mse_loss(model(x.to(_dev())), y.to(_dev()))
        optimizer.zero_grad()
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
    return model, optimizer, scaler


def test_amp_resume_with_gradscaler_repeats_the_uninterrupted_run(tmp_path: Path) -> None:
    """autocast + GradScaler("emulated"), saved at step 3 and resumed: the resumed run's weights and scale
    equal the uninterrupted run's, bit for bit."""
    model, _, scaler = _amp_run(6)
    first_model, first_optimizer, first_scaler = _amp_run(3)
    torch.save({"model": first_model.state_dict(), "optimizer": first_optimizer.state_dict(),
                "scaler": first_scaler.state_dict(), "step": 3}, tmp_path / "amp.pt")
    resumed_model, _, resumed_scaler = _amp_run(6, torch.load(tmp_path / "amp.pt", weights_only=True))
    assert resumed_scaler.get_scale() == scaler.get_scale() != 2.0**12  # the scale moved, and resumed
    for name, value in model.state_dict().items():
        assert value.device == _dev()
        assert torch.equal(resumed_model.state_dict()[name], value), name


# ---- streams and events ----------------------------------------------------------------------------------

def test_streams_as_torch_cuda_has_them() -> None:
    """torch.emulated's streams: a default stream per device, new ones distinct, the stream context switches
    the current stream (and device) and restores both, and torch.accelerator sees the same stream."""
    mod = torch.emulated  # type: ignore[attr-defined]
    assert mod.current_stream() == mod.default_stream() == torch.accelerator.current_stream(_dev())
    assert mod.default_stream(1).device == emulator.device(1)
    s = mod.Stream()
    assert isinstance(s, torch.Stream)
    assert s != mod.default_stream()
    assert s.device == _dev()
    with mod.stream(s):
        assert mod.current_stream() == s == torch.accelerator.current_stream()
    assert mod.current_stream() == mod.default_stream()
    s1 = mod.Stream(device=1)
    with mod.stream(s1):
        assert mod.current_device() == 1
        assert mod.current_stream(1) == s1
    assert mod.current_device() == 0
    assert mod.current_stream(1) == mod.default_stream(1)
    s.wait_stream(mod.current_stream())
    s.synchronize()
    assert s.query()
    mod.synchronize()
    torch.accelerator.synchronize()


def test_events_record_time_on_the_host() -> None:
    """Events: recorded, queried and waited on at once (every op has finished when it returns); elapsed_time
    is the host time between two timed records, and is refused as torch.cuda.Event refuses it (ValueError,
    the timing checked before the recording: c10/cuda/CUDAEvent.h), for torch.Event too."""
    mod = torch.emulated  # type: ignore[attr-defined]
    start, end = mod.Event(enable_timing=True), mod.Event(enable_timing=True)
    start.record()
    torch.ones(1000, device=_dev()).sum()
    end.record()
    end.synchronize()
    assert start.query()
    assert end.query()
    assert 0 <= start.elapsed_time(end) < 10_000
    mod.current_stream().wait_event(end)
    with pytest.raises(ValueError, match="Both events must be recorded"):
        mod.Event(enable_timing=True).elapsed_time(start)
    with pytest.raises(ValueError, match="Both events must be created with argument 'enable_timing=True'"):
        mod.Event().elapsed_time(start)  # neither recorded nor timed: the timing is checked first
    untimed = mod.Event()
    untimed.record()
    with pytest.raises(ValueError, match="enable_timing=True"):
        untimed.elapsed_time(start)
    plain_start, plain_end = (torch.Event(_dev(), enable_timing=True) for _ in range(2))
    plain_start.record()
    plain_end.record()
    assert plain_start.elapsed_time(plain_end) >= 0
    assert start.elapsed_time(plain_end) >= 0  # a torch.emulated.Event and a torch.Event mix
    assert torch.Stream(device=emulator.NAME).device == _dev()  # index-less: the current device, as CUDA's


@pytest.mark.parametrize("on_device", [False, True], ids=["cpu_state", "emulated_state"])
def test_dcp_saves_and_loads_with_the_emulator_registered(tmp_path: Path, on_device: bool) -> None:
    """torch.distributed.checkpoint save, async_save and load, with get_state_dict/set_state_dict, for a model and
    optimizer on cpu or on the device (DCP's writer takes the device's streams once the emulator is there)."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

    where = _dev() if on_device else torch.device("cpu")
    torch.default_generator.manual_seed(0)
    model = torch.nn.Linear(4, 3).to(where)
    optimizer = torch.optim.Adam(model.parameters())
    model(torch.randn(2, 4, device=where)).sum().backward()
    optimizer.step()
    model_sd, optim_sd = get_state_dict(model, optimizer)
    with pytest.warns(UserWarning, match="single process"):
        dcp.save({"model": model_sd, "optim": optim_sd}, checkpoint_id=tmp_path / "sync")
    with pytest.warns(UserWarning, match="single process"):
        dcp.async_save({"model": model_sd, "optim": optim_sd}, checkpoint_id=tmp_path / "async").result()
    for folder in ("sync", "async"):
        fresh = torch.nn.Linear(4, 3).to(where)
        fresh_optimizer = torch.optim.Adam(fresh.parameters())
        fresh(torch.randn(2, 4, device=where)).sum().backward()
        fresh_optimizer.step()
        state = dict(zip(("model", "optim"), get_state_dict(fresh, fresh_optimizer), strict=True))
        with pytest.warns(UserWarning, match="single process"):
            dcp.load(state, checkpoint_id=tmp_path / folder)
        set_state_dict(fresh, fresh_optimizer, model_state_dict=state["model"], optim_state_dict=state["optim"])
        assert fresh.weight.device == where
        assert torch.equal(fresh.weight, model.weight)
        assert torch.equal(fresh_optimizer.state[fresh.weight]["exp_avg"], optimizer.state[model.weight]["exp_avg"])


# ---- code that works on CPU keeps working once the emulator is registered --------------------------------
# Each snippet prints what it saw; the same snippets run in a process without the emulator and in one that
# registers it first, as the pytest plugin does, and both must print the same.
CPU_SNIPPETS = '''
import tempfile, torch, torch.distributed.checkpoint as dcp, warnings
warnings.simplefilter("ignore")
model = torch.nn.Linear(3, 2)
with tempfile.TemporaryDirectory() as folder:
    dcp.save({"model": model.state_dict()}, checkpoint_id=folder)
    state = {"model": torch.nn.Linear(3, 2).state_dict()}
    dcp.load(state, checkpoint_id=folder)
    print("dcp", torch.equal(state["model"]["weight"], model.weight))
loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.arange(8.0)), batch_size=4,
                                     num_workers=2, pin_memory=True)
print("loader", [batch[0].tolist() for batch in loader])
torch.manual_seed(0)
with torch.random.fork_rng():
    torch.rand(3)
print("fork_rng", torch.rand(2).tolist())
with torch.autocast("cpu", dtype=torch.bfloat16):
    print("cpu autocast", torch.mm(torch.ones(2, 2), torch.ones(2, 2)).dtype)
torch.manual_seed(0)
layer, dropout, x = torch.nn.Linear(3, 3), torch.nn.Dropout(0.5), torch.randn(4, 3, requires_grad=True)
out = torch.utils.checkpoint.checkpoint(lambda t: dropout(layer(t)), x, use_reentrant=False)
out.sum().backward()
print("activation checkpoint", out.sum().item(), x.grad.sum().item())
with torch.profiler.profile() as prof:
    layer(x)
print("profiler", "aten::addmm" in {event.key for event in prof.key_averages()})
'''
REGISTER_FIRST = "from samedevice import emulator; emulator.device()\n"


def test_cpu_code_behaves_the_same_with_the_emulator_registered() -> None:
    """DCP save/load, a DataLoader with workers and pin_memory, fork_rng, CPU autocast, activation checkpointing
    with dropout and the profiler print the same with and without the emulator registered (the plugin
    registers it in every session)."""
    runs = [subprocess.Popen([sys.executable, "-c", prefix + CPU_SNIPPETS], cwd=ROOT, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True) for prefix in ("", REGISTER_FIRST)]
    (plain, plain_err), (registered, registered_err) = (run.communicate(timeout=300) for run in runs)
    assert runs[0].returncode == 0, plain_err[-2000:]
    assert runs[1].returncode == 0, registered_err[-2000:]
    assert "dcp True" in plain
    assert "cpu autocast torch.bfloat16" in plain
    assert registered == plain


def test_init_process_group_without_a_backend_picks_eccl(tmp_path: Path) -> None:
    """Registered, the emulator is the accelerator c10d finds, so init_process_group() without a backend picks its
    backend, "eccl", as it picks NCCL on a GPU host, and a CPU tensor is refused as there (on a host without an
    accelerator it asks for a backend instead)."""
    import torch.distributed as dist
    from torch._utils import _get_available_device_type

    if _get_available_device_type() != emulator.NAME:
        pytest.skip(f"this host's accelerator is {_get_available_device_type()}: c10d picks its backend")
    dist.init_process_group(init_method=(tmp_path / "rendezvous").as_uri(), rank=0, world_size=1)
    try:
        assert dist.get_backend_config() == f"{emulator.NAME}:eccl"
        assert dist.group.WORLD.name() == "eccl"
        with pytest.raises(RuntimeError, match="No backend type associated with device type cpu"):
            dist.all_reduce(torch.ones(2))
    finally:
        dist.destroy_process_group()


def test_data_parallel_of_a_cpu_module_fails_as_on_a_gpu_host() -> None:
    """Registered, the emulator is an accelerator with two devices, so `nn.DataParallel(model)` of a CPU module
    takes them as a two-GPU host does, and fails as it does there (the dataparallel_device_ids lesson); on a
    host without an accelerator it passes the call through."""
    from torch._utils import _get_available_device_type

    model = torch.nn.Linear(3, 2)
    taken = _get_available_device_type()  # CUDA before the emulator, on a host that has it
    with pytest.raises(RuntimeError, match=rf"module must have its parameters and buffers on device {taken}:0 "
                                           r"\(device_ids\[0\]\) but found one of them on device: cpu"):
        torch.nn.DataParallel(model)(torch.randn(4, 3))


# ---- torch.compile ---------------------------------------------------------------------------------------


# ---- registering late ------------------------------------------------------------------------------------

LATE = ("import torch\n{first}from samedevice import emulator\ndev = emulator.device()\n"
        "w = torch.ones(2, device=dev, requires_grad=True)\n"
        "try:\n    (w * 2).sum().backward(); print('backward ran')\n"
        "except RuntimeError as e:\n    print('backward failed:', str(e).splitlines()[0])\n")
CPU_BACKWARD_FIRST = "a = torch.ones(2, requires_grad=True); (a * 2).sum().backward()\n"


@pytest.mark.skipif(torch.cuda.is_available() or (hasattr(torch, "xpu") and torch.xpu.is_available()),
                    reason="on a host with CUDA or XPU, their guard sizes the autograd engine's device queues")
def test_registering_after_a_backward_warns_in_one_line() -> None:
    """Registered after the process's first backward, the emulator warns in one line naming the cause and the fix;
    the device's backward then fails as PyTorch makes it (an internal assert). Registered first, no warning."""
    runs = [subprocess.Popen([sys.executable, "-c", LATE.format(first=first)], cwd=ROOT, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True) for first in (CPU_BACKWARD_FIRST, "")]
    (late_out, late_err), (first_out, first_err) = (run.communicate(timeout=300) for run in runs)
    assert runs[0].returncode == 0, late_err[-2000:]
    assert runs[1].returncode == 0, first_err[-2000:]
    late = [line for line in late_err.splitlines() if "registered after this process's first backward" in line]
    assert len(late) == 1
    assert "register it before any backward (samedevice.emulator.device(); in pytest the plugin does)" in late[0]
    assert "backward failed:" in late_out
    assert "device_ready_queues_" in late_out
    assert "first backward" not in first_err
    assert "backward ran" in first_out


# ---- collectives: "eccl" ---------------------------------------------------------------------------------
TWO_RANKS = """
import sys, torch, torch.distributed as dist
from samedevice import emulator
rank = int(sys.argv[1])
device = emulator.device(rank)
torch.emulated.set_device(rank)
dist.init_process_group("eccl", init_method=sys.argv[2], rank=rank, world_size=2)
t = torch.full((3,), float(rank + 1), device=device)
dist.all_reduce(t)
gathered = [torch.zeros(1, device=device) for _ in range(2)]
dist.all_gather(gathered, torch.full((1,), float(rank), device=device))
flat = torch.zeros(2, device=device)
dist.all_gather_single(flat, torch.full((1,), float(rank), device=device))
assert flat.tolist() == [0.0, 1.0], flat
mine = torch.zeros(1, device=device)
dist.reduce_scatter_single(mine, torch.tensor([1.0, 2.0], device=device))
assert mine.tolist() == [2.0 * (rank + 1)], mine
try:
    dist.all_reduce(torch.ones(1))
    refused = "no"
except RuntimeError as e:
    refused = str(e)
dist.barrier()
print(rank, t.device, t.tolist(), [g.item() for g in gathered], refused)
dist.destroy_process_group()
"""


def test_eccl_collectives_across_two_ranks(tmp_path: Path) -> None:
    """Two processes, each on its own emulated device, all-reduce and all-gather through "eccl" (results in
    place, on the device), and each refuses a CPU tensor with c10d's message, as an NCCL group does."""
    rendezvous = (tmp_path / "rendezvous").as_uri()
    ranks = [subprocess.Popen([sys.executable, "-c", TWO_RANKS, str(rank), rendezvous], cwd=ROOT,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for rank in (0, 1)]
    outputs = [rank.communicate(timeout=300) for rank in ranks]
    for rank, (_, err) in zip(ranks, outputs, strict=True):
        assert rank.returncode == 0, err[-2000:]
    lines = sorted(out.strip().splitlines()[-1] for out, _ in outputs)
    cpu_refused = "No backend type associated with device type cpu"
    assert lines == [f"0 emulated:0 [3.0, 3.0, 3.0] [0.0, 1.0] {cpu_refused}",
                     f"1 emulated:1 [3.0, 3.0, 3.0] [0.0, 1.0] {cpu_refused}"]


@pytest.mark.filterwarnings("ignore:.*all_reduce_coalesced.* will be deprecated:FutureWarning")
def test_eccl_runs_the_collectives_nccl_runs(tmp_path: Path) -> None:
    """Every collective of torch.distributed runs on emulated tensors through "eccl" (as NCCL runs them on CUDA
    tensors), its result on the device; a non-contiguous tensor is refused as NCCL refuses it."""
    import torch.distributed as dist

    dev = _dev()

    def ones() -> torch.Tensor:
        return torch.ones(4, device=dev)

    dist.init_process_group("eccl", init_method=(tmp_path / "rendezvous").as_uri(), rank=0, world_size=1)
    try:
        def into(collective: Any) -> torch.Tensor:
            out = torch.zeros(4, device=dev)
            collective(out)
            return out

        def in_place(collective: Any) -> torch.Tensor:
            tensor = ones()
            collective(tensor)
            return tensor

        results = {
            "all_reduce": in_place(dist.all_reduce), "reduce": in_place(lambda t: dist.reduce(t, 0)),
            "broadcast": in_place(lambda t: dist.broadcast(t, 0)),
            "all_gather": into(lambda o: dist.all_gather([o], ones())),
            "all_gather_single": into(lambda o: dist.all_gather_single(o, ones())),
            "reduce_scatter": into(lambda o: dist.reduce_scatter(o, [ones()])),
            "reduce_scatter_single": into(lambda o: dist.reduce_scatter_single(o, ones())),
            "all_to_all_single": into(lambda o: dist.all_to_all_single(o, ones())),
            "all_to_all": into(lambda o: dist.all_to_all([o], [ones()])),
            "gather": into(lambda o: dist.gather(ones(), [o], dst=0)),
            "scatter": into(lambda o: dist.scatter(o, [ones()], src=0)),
        }
        for name, result in results.items():
            assert result.device == dev, name
            assert result.tolist() == [1.0] * 4, name
        objects: list[Any] = [None]
        dist.all_gather_object(objects, {"step": 1})
        assert objects == [{"step": 1}]
        pair = [ones(), ones()]
        dist.all_reduce_coalesced(pair)  # deprecated, still NCCL's
        assert pair[1].device == dev
        with pytest.raises(ValueError, match="Tensors must be contiguous"):
            dist.all_reduce(torch.ones(4, 4, device=dev).t()[0])
    finally:
        dist.destroy_process_group()


def test_a_gloo_group_beside_eccl_takes_cpu_tensors(tmp_path: Path) -> None:
    """A second group, dist.new_group(backend="gloo"), takes CPU tensors beside an "eccl" default group.
    Departure: "cpu:gloo,eccl" in one group leaves CPU tensors refused (c10d lets a backend written in Python
    replace the whole group, where "cpu:gloo,cuda:nccl" serves both)."""
    import torch.distributed as dist

    dist.init_process_group("eccl", init_method=(tmp_path / "one").as_uri(), rank=0, world_size=1)
    try:
        side = dist.new_group(backend="gloo")
        metric = torch.ones(2)
        dist.all_reduce(metric, group=side)
        assert metric.tolist() == [1.0, 1.0]
    finally:
        dist.destroy_process_group()
    dist.init_process_group(f"cpu:gloo,{emulator.NAME}:eccl", init_method=(tmp_path / "two").as_uri(), rank=0,
                            world_size=1)
    try:
        with pytest.raises(RuntimeError, match="No backend type associated with device type cpu"):
            dist.all_reduce(torch.ones(2))
        on_device = torch.ones(2, device=_dev())
        dist.all_reduce(on_device)
        assert on_device.device == _dev()
    finally:
        dist.destroy_process_group()


def test_dcp_resume_repeats_the_uninterrupted_run(device: torch.device, tmp_path: Path) -> None:
    """Three steps, a DCP checkpoint of model and optimizer (get_state_dict), a fresh model and optimizer loaded
    from it (set_state_dict), three more steps: the uninterrupted six steps' weights, on cpu and the device."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

    from samedevice import harness

    def make() -> tuple[torch.nn.Module, torch.optim.Optimizer]:
        model = harness.new_model().to(device)
        return model, torch.optim.Adam(model.parameters(), lr=harness.LR)

    model, optimizer = make()
    harness.train(model, optimizer, harness.batches()[:harness.STEPS_BEFORE], device)
    model_sd, optim_sd = get_state_dict(model, optimizer)
    with pytest.warns(UserWarning, match="single process"):
        dcp.save({"model": model_sd, "optim": optim_sd}, checkpoint_id=tmp_path)
    resumed, resumed_optimizer = make()
    resumed(torch.zeros(1, 8, device=device)).sum().backward()  # Adam's state exists before the load fills it
    resumed_optimizer.step()
    state = dict(zip(("model", "optim"), get_state_dict(resumed, resumed_optimizer), strict=True))
    with pytest.warns(UserWarning, match="single process"):
        dcp.load(state, checkpoint_id=tmp_path)
    set_state_dict(resumed, resumed_optimizer, model_state_dict=state["model"], optim_state_dict=state["optim"])
    harness.train(resumed, resumed_optimizer, harness.batches()[harness.STEPS_BEFORE:], device)
    uninterrupted, uninterrupted_optimizer = make()
    harness.train(uninterrupted, uninterrupted_optimizer, harness.batches(), device)
    for name, value in uninterrupted.state_dict().items():
        assert torch.equal(resumed.state_dict()[name].cpu(), value.cpu()), name
