"""What each checkpoint-level scenario teaches beyond its three test families: controls, variants,
and every claim its docs page makes."""

from __future__ import annotations

import functools
import gc
import io
import tempfile
from pathlib import Path

import pytest
import torch
from pytest_parametrize_cases import Case, parametrize_cases

from samedevice import harness, registry
from tests.helpers import assert_same_params, device_scalar_reads

CPU = torch.device("cpu")
RNG = "RNG state must be a torch.ByteTensor"


# ---- cuda_checkpoint_on_cpu_host -----------------------------------------------------------------

DESERIALIZE = "Attempting to deserialize object on a .* device but torch\\..*\\.is_available\\(\\) is False"


def test_cuda_checkpoint_on_cpu_host_runs_where_the_device_is(accelerator: torch.device, tmp_path: Path) -> None:
    """On a host that has the device, the broken resume loads the state there and matches the reference."""
    case = registry.get("cuda_checkpoint_on_cpu_host").case()
    path = harness.write_checkpoint(tmp_path, case.make_optimizer, accelerator)
    model, optimizer = case.resume(path)
    assert {s["momentum_buffer"].device.type for s in optimizer.state.values()} == {"cpu"}  # cast to the params
    assert_same_params(harness.finish(model, optimizer, CPU), case.reference(), exact=False)


@pytest.mark.emulator
def test_cuda_checkpoint_on_cpu_host_message_and_file(tmp_path: Path) -> None:
    """The file records the device; on the absent host PyTorch's message suggests map_location, and
    a device index past the host's count gets its own message."""
    from samedevice import emulator

    case = registry.get("cuda_checkpoint_on_cpu_host").case()
    path = harness.write_checkpoint(tmp_path, case.make_optimizer, emulator.device(1))
    with emulator.absent(), pytest.raises(RuntimeError, match=DESERIALIZE) as info:
        torch.load(path, weights_only=True)
    assert "map_location=torch.device('cpu')" in str(info.value)
    past_count = r"Attempting to deserialize object on EMULATED device 5 but torch.emulated.device_count\(\) is 2"
    with pytest.raises(RuntimeError, match=past_count):
        torch.load(path, map_location={"emulated:1": "emulated:5"}, weights_only=True)


@pytest.mark.emulator
def test_cuda_checkpoint_on_cpu_host_checkpoint_helper(tmp_path: Path) -> None:
    """fixes/checkpoint.py resumes a device checkpoint on the absent host (it loads with map_location="cpu")."""
    from samedevice import emulator

    helper = registry.helper("checkpoint")
    model = harness.new_model().to(emulator.device())
    optimizer = harness.sgd(model.parameters())
    harness.train(model, optimizer, harness.batches()[:1], emulator.device())
    helper.save_checkpoint(tmp_path / "ckpt.pt", model=model, optimizer=optimizer, epoch=1)
    with emulator.absent():
        fresh = harness.new_model()
        assert helper.resume(tmp_path / "ckpt.pt", model=fresh, optimizer=harness.sgd(fresh.parameters()),
                             device=CPU) == {"epoch": 1}
    assert_same_params(harness.cpu_state(fresh), harness.cpu_state(model), exact=True)


# ---- rng_state_map_location ----------------------------------------------------------------------


def test_rng_state_map_location_moves_the_byte_tensor(accelerator: torch.device, tmp_path: Path) -> None:
    """map_location=device moves the saved CPU RNG state to the device, and set_rng_state refuses it."""
    case = registry.get("rng_state_map_location").case()
    checkpoint = torch.load(case.write_checkpoint(tmp_path), map_location=accelerator, weights_only=True)
    assert checkpoint["rng"].device.type == accelerator.type
    assert checkpoint["rng"].dtype == torch.uint8
    with pytest.raises(TypeError, match=RNG):
        torch.set_rng_state(checkpoint["rng"])
    with pytest.raises(TypeError, match=RNG):
        torch.Generator().set_state(checkpoint["rng"])


def test_rng_state_map_location_cpu_copy_restores(accelerator: torch.device, tmp_path: Path) -> None:
    """The second fix: keep map_location=device and restore the state's CPU copy; the run matches."""
    case = registry.get("rng_state_map_location").case()
    checkpoint = torch.load(case.write_checkpoint(tmp_path), map_location=accelerator, weights_only=True)
    model = harness.new_model().to(accelerator)
    optimizer = case.make_optimizer(model.parameters())
    model.load_state_dict(checkpoint["model"])
    optimizer.load_state_dict(checkpoint["optimizer"])
    torch.set_rng_state(checkpoint["rng"].cpu())
    result = harness.finish(model, optimizer, accelerator, harness.noisy(harness.batches()[harness.STEPS_BEFORE:]))
    assert_same_params(result, case.reference(), exact=False)


def test_rng_state_map_location_state_matters(tmp_path: Path) -> None:
    """Control: a resume that skips set_rng_state draws other noise and ends elsewhere."""
    case = registry.get("rng_state_map_location").case()
    checkpoint = torch.load(case.write_checkpoint(tmp_path), weights_only=True)
    model = harness.new_model()  # seeds the generator, as a fresh process's model init would
    optimizer = case.make_optimizer(model.parameters())
    model.load_state_dict(checkpoint["model"])
    optimizer.load_state_dict(checkpoint["optimizer"])
    result = harness.finish(model, optimizer, CPU, harness.noisy(harness.batches()[harness.STEPS_BEFORE:]))
    with pytest.raises(AssertionError):
        assert_same_params(result, case.reference(), exact=False)


def test_rng_state_map_location_device_generator(accelerator: torch.device, tmp_path: Path) -> None:
    """A device generator's saved state is a CPU ByteTensor too, and its set_rng_state refuses a moved one."""
    module = torch.get_device_module(accelerator)
    state = module.get_rng_state()
    assert (state.device.type, state.dtype) == ("cpu", torch.uint8)
    torch.save(state, tmp_path / "rng.pt")
    moved = torch.load(tmp_path / "rng.pt", map_location=accelerator, weights_only=True)
    with pytest.raises(TypeError, match=RNG):
        module.set_rng_state(moved)  # get_rng_state initialised the device: no lazy deferral


def test_set_rng_state_all_with_more_states_than_devices(accelerator: torch.device) -> None:
    """A list of states from a host with one device more than this one: set_rng_state_all sets each device's in
    turn and fails at the first index the host lacks, with Python's IndexError (torch.cuda.default_generators[idx])."""
    module = torch.get_device_module(accelerator)
    if not hasattr(module, "set_rng_state_all"):
        pytest.skip(f"torch.{accelerator.type} has one generator and no get_rng_state_all")
    states = module.get_rng_state_all()  # get_rng_state_all initialised the device: no lazy deferral
    with pytest.raises(IndexError, match=r"^tuple index out of range$"):
        module.set_rng_state_all([*states, states[0]])


@pytest.mark.emulator
@pytest.mark.parametrize("module", ["case", "fix"])
def test_rng_state_device_count_restores_the_devices_it_has(module: str, tmp_path: Path) -> None:
    """On a host with one of the two devices, the fixed resume gives device 0 the state saved for it; the broken one
    does too, before it fails at device 1, as CUDA's loop does."""
    from samedevice import emulator

    scenario = registry.get("rng_state_device_count")
    code = scenario.case() if module == "case" else scenario.fix()
    for index in (0, 1):  # each device's generator somewhere of its own
        torch.emulated.set_rng_state(torch.Generator().manual_seed(10 + index).get_state(), index)
    saved = torch.load(code.write_checkpoint(tmp_path, emulator.device()), weights_only=True)["rng"]["device"]
    assert len(saved) == 2
    assert not torch.equal(saved[0], saved[1])
    torch.rand(7, device=emulator.device())  # moved on since the save
    with emulator.visible(1):
        if module == "case":
            with pytest.raises(IndexError, match=r"^tuple index out of range$"):
                code.resume(tmp_path / "checkpoint.pt", emulator.device())
        else:
            code.resume(tmp_path / "checkpoint.pt", emulator.device())
        assert torch.equal(torch.emulated.get_rng_state(0), saved[0])


def test_rng_state_map_location_device_draws_need_the_device_state(accelerator: torch.device) -> None:
    """A device draw has its device's own generator: the CPU state does not repeat it, the device's does."""
    module = torch.get_device_module(accelerator)
    cpu_state, device_state = torch.get_rng_state(), module.get_rng_state()
    first = torch.rand(64, device=accelerator).cpu()
    torch.set_rng_state(cpu_state)
    assert not torch.equal(torch.rand(64, device=accelerator).cpu(), first)
    module.set_rng_state(device_state)
    assert torch.equal(torch.rand(64, device=accelerator).cpu(), first)


# ---- assign_true_load ----------------------------------------------------------------------------


def test_assign_true_load_replaces_the_parameters(accelerator: torch.device, tmp_path: Path) -> None:
    """assign=True makes new Parameters from the CPU tensors: back on CPU, and not the optimizer's."""
    case = registry.get("assign_true_load").case()
    checkpoint = torch.load(harness.write_checkpoint(tmp_path, case.make_optimizer), weights_only=True)
    model = harness.new_model().to(accelerator)
    before = list(model.parameters())
    model.load_state_dict(checkpoint["model"], assign=True)
    after = list(model.parameters())
    assert {p.device.type for p in after} == {"cpu"}
    assert {p.device.type for p in before} == {accelerator.type}
    assert all(isinstance(p, torch.nn.Parameter) and p.requires_grad for p in after)
    assert not any(a is b for a, b in zip(after, before))


def test_assign_true_load_on_cpu_never_trains(tmp_path: Path) -> None:
    """On CPU the broken resume runs, but the optimizer steps the old Parameters: the model keeps
    the checkpoint's weights exactly."""
    case = registry.get("assign_true_load").case()
    result = case.run(CPU, tmp_path)
    checkpoint = torch.load(tmp_path / "checkpoint.pt", weights_only=True)
    assert_same_params(result, checkpoint["model"], exact=True)


def test_assign_true_load_meta_model(device: torch.device, tmp_path: Path) -> None:
    """What assign=True is for: a model built on the meta device, loaded with map_location=device,
    and the optimizer built after the load; it matches the CPU reference."""
    case = registry.get("assign_true_load").case()
    path = harness.write_checkpoint(tmp_path, case.make_optimizer)
    with torch.device("meta"):
        model = harness.TinyNet()
    checkpoint = torch.load(path, map_location=device, weights_only=True)
    model.load_state_dict(checkpoint["model"], assign=True)
    optimizer = case.make_optimizer(model.parameters())
    optimizer.load_state_dict(checkpoint["optimizer"])
    assert {p.device for p in model.parameters()} == {device}
    assert_same_params(harness.finish(model, optimizer, device), case.reference(), exact=device.type == "cpu")


# ---- orphaned_params -----------------------------------------------------------------------------


def _held(optimizer: torch.optim.Optimizer) -> set[int]:
    return {id(p) for group in optimizer.param_groups for p in group["params"]}


def test_orphaned_params_never_trains(device: torch.device, tmp_path: Path) -> None:
    """On every device the broken resume runs and ends with the checkpoint's weights exactly."""
    result = registry.get("orphaned_params").case().run(device, tmp_path)
    checkpoint = torch.load(tmp_path / "checkpoint.pt", weights_only=True)
    assert_same_params(result, checkpoint["model"], exact=True)


def test_orphaned_params_identity_check(device: torch.device, tmp_path: Path) -> None:
    """The page's check, by identity, finds the orphans in the broken resume and none in the fixed one."""
    scenario = registry.get("orphaned_params")
    path = harness.write_checkpoint(tmp_path, scenario.case().make_optimizer)
    model, optimizer = scenario.case().resume(path, device)
    assert not {id(p) for p in model.parameters()} & _held(optimizer)
    assert len(optimizer.state) == 4  # the momentum buffers were loaded, into the orphans
    model, optimizer = scenario.fix().resume(path, device)
    assert {id(p) for p in model.parameters()} == _held(optimizer)


def test_orphaned_params_meta_init(device: torch.device, tmp_path: Path) -> None:
    """The meta-device variant: to_empty makes new Parameters (a meta tensor is shallow-copy compatible
    with no dense device's), so an optimizer built before it trains nothing; built after, it matches."""
    scenario = registry.get("orphaned_params")
    case, fix = scenario.case(), scenario.fix()
    with torch.device("meta"):
        model = harness.TinyNet()
    before = list(model.parameters())  # kept alive, so ids are not reused
    model.to_empty(device=device)
    assert not any(a is b for a, b in zip(before, model.parameters()))
    (tmp_path / "broken").mkdir()
    (tmp_path / "fixed").mkdir()
    result = case.run(device, tmp_path / "broken", resume=case.resume_meta_init)
    checkpoint = torch.load(tmp_path / "broken" / "checkpoint.pt", weights_only=True)
    assert_same_params(result, checkpoint["model"], exact=True)
    result = fix.run(device, tmp_path / "fixed", resume=fix.resume_meta_init)
    assert_same_params(result, fix.reference(), exact=device.type == "cpu")


# ---- ema_shadow ----------------------------------------------------------------------------------


def test_ema_shadow_module_moves_with_to(accelerator: torch.device) -> None:
    """The fix's EMA is a module: .to moves it, and it saves under the model's own keys."""
    fix = registry.get("ema_shadow").fix()
    model = harness.new_model()
    ema = fix.new_ema(model).to(accelerator)
    assert {t.device.type for t in ema.state_dict().values()} == {accelerator.type}
    assert ema.state_dict().keys() == model.state_dict().keys()
    assert not any(p.requires_grad for p in ema.parameters())


def test_ema_shadow_dict_is_left_behind(accelerator: torch.device) -> None:
    """The broken EMA, a dict made before model.to, stays on CPU: .to has never heard of it."""
    case = registry.get("ema_shadow").case()
    model = harness.new_model()
    ema = case.new_ema(model)
    model.to(accelerator)
    assert {t.device.type for t in ema.values()} == {"cpu"}
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
        case.update_ema(ema, model)


def test_ema_shadow_averaged_model(accelerator: torch.device, tmp_path: Path) -> None:
    """The other fix, AveragedModel with get_ema_multi_avg_fn: a resume on the device from a CPU
    checkpoint matches the uninterrupted CPU run."""
    from torch.optim.swa_utils import AveragedModel, get_ema_multi_avg_fn

    def run(device: torch.device, data: list[harness.Batch], checkpoint: dict | None) -> AveragedModel:
        model = harness.new_model().to(device)
        optimizer = harness.sgd(model.parameters())
        ema = AveragedModel(model, multi_avg_fn=get_ema_multi_avg_fn(0.9))
        if checkpoint is not None:
            model.load_state_dict(checkpoint["model"])
            optimizer.load_state_dict(checkpoint["optimizer"])
            ema.load_state_dict(checkpoint["ema"])
        harness.train(model, optimizer, data, device, after_step=lambda: ema.update_parameters(model))
        torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "ema": ema.state_dict()},
                   tmp_path / "checkpoint.pt")
        return ema

    reference = harness.cpu_state(run(CPU, harness.batches(), None))
    run(CPU, harness.batches()[:harness.STEPS_BEFORE], None)
    checkpoint = torch.load(tmp_path / "checkpoint.pt", weights_only=True)
    resumed = run(accelerator, harness.batches()[harness.STEPS_BEFORE:], checkpoint)
    assert {p.device.type for p in resumed.module.parameters()} == {accelerator.type}
    assert_same_params(harness.cpu_state(resumed), reference, exact=False)


def test_ema_shadow_averaged_model_first_update_copies() -> None:
    """AveragedModel's first update_parameters copies the weights; the second one averages."""
    from torch.optim.swa_utils import AveragedModel, get_ema_multi_avg_fn

    model = harness.new_model()
    ema = AveragedModel(model, multi_avg_fn=get_ema_multi_avg_fn(0.9))
    with torch.no_grad():
        model.fc1.weight.add_(1.0)
    ema.update_parameters(model)
    assert torch.equal(ema.module.fc1.weight, model.fc1.weight)
    with torch.no_grad():
        model.fc1.weight.add_(1.0)
    ema.update_parameters(model)
    torch.testing.assert_close(ema.module.fc1.weight, model.fc1.weight - 0.9)


# ---- param_group_tensor --------------------------------------------------------------------------


def test_param_group_tensor_load_casts_state_not_groups(accelerator: torch.device) -> None:
    """One load from a CPU-mapped file: the momentum buffers go to their parameters' device, the group's
    tensor stays as the file had it, on CPU (Optimizer.load_state_dict's update_group)."""
    model = harness.new_model().to(accelerator)
    optimizer = torch.optim.SGD(model.parameters(), lr=harness.LR, momentum=0.9)
    harness.train(model, optimizer, harness.batches()[:1], accelerator)
    optimizer.param_groups[0]["d"] = torch.ones(1, device=accelerator)
    buffer = io.BytesIO()
    torch.save(optimizer.state_dict(), buffer)
    buffer.seek(0)
    optimizer.load_state_dict(torch.load(buffer, map_location="cpu", weights_only=True))
    assert {s["momentum_buffer"].device.type for s in optimizer.state.values()} == {accelerator.type}
    assert optimizer.param_groups[0]["d"].device == CPU


def test_param_group_tensor_zero_dim_still_raises(accelerator: torch.device, tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """A 0-dim CPU tensor is a scalar a device op may read, but not one it may write: a 0-dim running sum
    fails the resume as well, at its in-place update."""
    case = registry.get("param_group_tensor").case()
    norm = torch.ones(3, device=accelerator).square().sum()
    assert (norm * torch.ones(())).device.type == accelerator.type  # read: it mixes
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
        torch.ones(()).add_(norm)  # written: it does not

    class ZeroDim(case.AdaGradNorm):
        def step(self):
            for group in self.param_groups:
                group.setdefault("sum_sq", torch.full((), group["b0"] ** 2, device=group["params"][0].device))
            super().step()

    monkeypatch.setattr(case, "make_optimizer", lambda params: ZeroDim(params, lr=harness.LR))
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
        case.run(accelerator, tmp_path)


def test_param_group_tensor_no_map_location(accelerator: torch.device, tmp_path: Path) -> None:
    """Loaded without map_location, the group's tensor returns to the device it was saved on, and the broken
    optimizer resumes there and matches the reference: the bug shows once the file is loaded elsewhere."""
    case = registry.get("param_group_tensor").case()
    path = harness.write_checkpoint(tmp_path, case.make_optimizer, accelerator)
    model = harness.new_model().to(accelerator)
    optimizer = case.make_optimizer(model.parameters())
    checkpoint = torch.load(path, weights_only=True)
    model.load_state_dict(checkpoint["model"])
    optimizer.load_state_dict(checkpoint["optimizer"])
    assert optimizer.param_groups[0]["sum_sq"].device.type == accelerator.type
    assert_same_params(harness.finish(model, optimizer, accelerator), case.reference(), exact=False)


def test_param_group_tensor_hook_runs_on_every_load(accelerator: torch.device, tmp_path: Path) -> None:
    """The fix's post-hook moves the group's tensor after each load, a second one (a trainer's) included."""
    fix = registry.get("param_group_tensor").fix()
    path = harness.write_checkpoint(tmp_path, fix.make_optimizer, accelerator)
    _, optimizer = fix.resume(path, accelerator)
    assert optimizer.param_groups[0]["sum_sq"].device.type == accelerator.type
    optimizer.param_groups[0]["sum_sq"] = optimizer.param_groups[0]["sum_sq"].cpu()
    optimizer.load_state_dict(torch.load(path, map_location="cpu", weights_only=True)["optimizer"])
    assert optimizer.param_groups[0]["sum_sq"].device.type == accelerator.type


def test_param_group_tensor_hook_takes_empty_groups_and_lists(accelerator: torch.device) -> None:
    """The hook leaves a group without parameters as it is (a no-decay split may be empty) and moves tensors a group
    keeps in a list (apex's FusedNovoGrad keeps one)."""
    fix = registry.get("param_group_tensor").fix()
    model = harness.new_model().to(accelerator)
    optimizer = torch.optim.SGD([{"params": list(model.parameters())}, {"params": [], "weight_decay": 0.0}],
                                lr=harness.LR)
    optimizer.register_load_state_dict_post_hook(fix.group_tensors_to_params)
    optimizer.param_groups[0]["moments"] = [torch.ones(2), torch.ones(3)]
    optimizer.load_state_dict(optimizer.state_dict())
    assert [t.device.type for t in optimizer.param_groups[0]["moments"]] == [accelerator.type] * 2
    assert optimizer.param_groups[1]["params"] == []


# ---- capturable_step -----------------------------------------------------------------------------

optimizer_to = registry.helper("optimizer_to").optimizer_to


def _supports(device: torch.device, flag: str) -> None:
    from torch.optim.optimizer import _get_capturable_supported_devices
    from torch.utils._foreach_utils import _get_fused_kernels_supported_devices

    supported = {"fused": _get_fused_kernels_supported_devices(), "capturable": _get_capturable_supported_devices()}
    if device.type not in supported[flag]:  # PyTorch's own lists of devices for each implementation
        pytest.skip(f"PyTorch's Adam({flag}=True) does not support {device.type}")


def _resumed(flags: dict, device: torch.device, workdir: Path, monkeypatch: pytest.MonkeyPatch,
             saved_on: torch.device = CPU):
    """The case's resume (load, model.to, the loop that skips step) for an Adam with these flags,
    from a checkpoint saved by the same Adam on `saved_on` (load_state_dict restores the saved
    groups' flags, so the checkpoint decides fused, capturable and foreach)."""
    case = registry.get("capturable_step").case()
    monkeypatch.setattr(case, "make_optimizer", lambda params: torch.optim.Adam(params, lr=harness.LR, **flags))
    path = harness.write_checkpoint(workdir, case.make_optimizer, saved_on)
    return case.resume(path, device)


@parametrize_cases(Case("foreach", flags={}), Case("for_loop", flags={"foreach": False}))
def test_capturable_step_capturable_adam(flags: dict, accelerator: torch.device, tmp_path: Path,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """With capturable=True the step left on CPU fails Adam's own check, an AssertionError;
    optimizer_to puts step on the device and the run matches the CPU reference."""
    _supports(accelerator, "capturable")
    flags = {"capturable": True, **flags}
    model, optimizer = _resumed(flags, accelerator, tmp_path, monkeypatch, saved_on=accelerator)
    assert {s["step"].device.type for s in optimizer.state.values()} == {"cpu"}
    with pytest.raises(AssertionError, match="If capturable=True, params and state_steps must be on supported devices"):
        harness.finish(model, optimizer, accelerator)
    model, optimizer = _resumed(flags, accelerator, tmp_path, monkeypatch, saved_on=accelerator)
    optimizer_to(optimizer)
    assert {s["step"].device.type for s in optimizer.state.values()} == {accelerator.type}
    result = harness.finish(model, optimizer, accelerator)
    assert_same_params(result, harness.reference(lambda params: torch.optim.Adam(params, lr=harness.LR)),
                       exact=False)


def test_capturable_step_checkpoint_decides_the_implementation(tmp_path: Path) -> None:
    """load_state_dict restores the saved param groups' settings: an Adam built plain runs fused
    after loading a fused Adam's state."""
    saved = torch.load(harness.write_checkpoint(tmp_path, registry.get("capturable_step").case().make_optimizer),
                       weights_only=True)
    model = harness.new_model()
    optimizer = torch.optim.Adam(model.parameters(), lr=1.0, foreach=False)
    optimizer.load_state_dict(saved["optimizer"])
    assert optimizer.param_groups[0]["fused"] is True
    assert optimizer.param_groups[0]["foreach"] is None
    assert optimizer.param_groups[0]["lr"] == harness.LR


def test_capturable_step_fused_step_on_cpu(accelerator: torch.device, tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """The broken resume leaves a fused Adam's step on CPU and every other state tensor on the device."""
    _supports(accelerator, "fused")
    _, optimizer = _resumed({"fused": True}, accelerator, tmp_path, monkeypatch)
    for state in optimizer.state.values():
        assert state["step"].device.type == "cpu"
        assert state["step"].dtype == torch.float32
        assert {state["exp_avg"].device.type, state["exp_avg_sq"].device.type} == {accelerator.type}


def _move_everything(optimizer: torch.optim.Optimizer, device: torch.device) -> None:
    for state in optimizer.state.values():
        for key, value in state.items():
            if torch.is_tensor(value):
                state[key] = value.to(device)


@parametrize_cases(Case("foreach", flags={}, per_step=8), Case("for_loop", flags={"foreach": False}, per_step=4))
def test_capturable_step_plain_step_on_device(flags: dict, per_step: int, accelerator: torch.device,
                                              tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A default Adam whose step a move-everything loop put on the device trains to the same numbers,
    but reads step back to the host twice per parameter and step (foreach; once with the for-loop);
    after optimizer_to it reads nothing."""
    model, optimizer = _resumed(flags, accelerator, tmp_path, monkeypatch)
    _move_everything(optimizer, accelerator)
    steps = harness.STEPS_TOTAL - harness.STEPS_BEFORE
    with device_scalar_reads() as reads:
        result = harness.finish(model, optimizer, accelerator)
    assert reads.count == steps * per_step
    reference = harness.reference(lambda params: torch.optim.Adam(params, lr=harness.LR, **flags))
    assert_same_params(result, reference, exact=False)
    model, optimizer = _resumed(flags, accelerator, tmp_path, monkeypatch)
    _move_everything(optimizer, accelerator)
    optimizer_to(optimizer)
    with device_scalar_reads() as reads:
        harness.finish(model, optimizer, accelerator)
    assert reads.count == 0


# ---- resume_oom ----------------------------------------------------------------------------------

MiB = 2**20


def _peaks(device: torch.device, net: type[torch.nn.Module]) -> tuple[int, int]:
    """Peak device memory of the broken and of the fixed run, above what was allocated before, with
    no budget, for `net` in place of the fine-tuned model (measured once per device and net: the
    page's numbers and the tests' bounds read the same run)."""
    if harness.peak(device) is None:
        pytest.skip(f"the scenario measures no memory on {device.type}")
    return _measured_peaks(str(device), net)


@functools.cache
def _measured_peaks(device_name: str, net: type[torch.nn.Module]) -> tuple[int, int]:
    device = torch.device(device_name)
    scenario = registry.get("resume_oom")
    peaks = []
    with pytest.MonkeyPatch.context() as monkeypatch, tempfile.TemporaryDirectory() as tmp:
        monkeypatch.setattr(harness, "FineTuneNet", net)
        for i, module in enumerate((scenario.case(), scenario.fix())):
            monkeypatch.setattr(module, "FREE", 2**40)
            gc.collect()  # what earlier tests left for the collector is not this run's
            base = harness.allocated(device)
            harness.reset_peak(device)
            (Path(tmp) / str(i)).mkdir()
            module.run(device, Path(tmp) / str(i))
            peaks.append(harness.peak(device) - base)
    return peaks[0], peaks[1]


def test_resume_oom_fine_tuning_peak_doubles(accelerator: torch.device) -> None:
    """Fine-tuning: the broken resume peaks at two copies of the weights (the model and the
    checkpoint), the fixed one at one; the scenario's budget lies between the two."""
    budget = registry.get("resume_oom").case().FREE
    broken, fixed = _peaks(accelerator, harness.FineTuneNet)
    weights = sum(t.numel() * t.element_size() for t in harness.FineTuneNet().state_dict().values())
    assert broken >= 2 * weights
    assert weights <= fixed < 1.1 * weights
    assert fixed < budget < broken


def test_resume_oom_full_training_peak(accelerator: torch.device) -> None:
    """Full training: the copy comes on top of weights, momentum and gradients, one weights' worth."""
    broken, fixed = _peaks(accelerator, harness.WideNet)
    weights = sum(t.numel() * t.element_size() for t in harness.WideNet().state_dict().values())
    assert broken >= 4 * weights
    assert 3 * weights <= fixed < 3.1 * weights


@pytest.mark.emulator
def test_resume_oom_page_numbers() -> None:
    """The peaks on the docs page are the emulated device's, measured now."""
    from samedevice import emulator

    page = (registry.ROOT / "docs" / "resume_oom.md").read_text()
    for name, net in (("fine-tuning", harness.FineTuneNet), ("full training", harness.WideNet)):
        broken, fixed = _peaks(emulator.device(), net)
        assert f"| {name} | {broken / MiB:.2f} MiB | {fixed / MiB:.2f} MiB |" in page


# ---- ddp_rank_map_location -----------------------------------------------------------------------


def _rank0_checkpoint(workdir: Path) -> Path:
    from samedevice import emulator

    case = registry.get("ddp_rank_map_location").case()
    return harness.write_checkpoint(workdir, case.make_optimizer, emulator.device(0))


@pytest.mark.emulator
def test_ddp_rank_map_location_every_rank_loads_onto_device_0(tmp_path: Path) -> None:
    """Rank 1's torch.load puts the checkpoint on device 0, which grows by its size; the fix's
    mapping puts it on rank 1's device and leaves device 0 alone."""
    from samedevice import emulator

    path = _rank0_checkpoint(tmp_path)
    saved = torch.load(path, map_location="cpu", weights_only=True)
    tensors = [*saved["model"].values(), *(t for s in saved["optimizer"]["state"].values() for t in s.values())]
    nbytes = sum(-(-t.nbytes // 512) * 512 for t in tensors)  # one block each, rounded up to 512 bytes as on CUDA
    device0, device1 = emulator.device(0), emulator.device(1)
    before = emulator.memory_allocated(device0)
    checkpoint = torch.load(path, weights_only=True)
    assert {t.device for t in checkpoint["model"].values()} == {device0}
    assert emulator.memory_allocated(device0) - before == nbytes
    del checkpoint
    checkpoint = torch.load(path, map_location={"emulated:0": str(device1)}, weights_only=True)
    assert {t.device for t in checkpoint["model"].values()} == {device1}
    assert emulator.memory_allocated(device0) == before


@pytest.mark.emulator
def test_ddp_rank_map_location_assign_true(tmp_path: Path) -> None:
    """With assign=True rank 1's parameters move to device 0: an emulated:1/emulated:0 mismatch."""
    from samedevice import emulator

    checkpoint = torch.load(_rank0_checkpoint(tmp_path), weights_only=True)
    model = harness.new_model().to(emulator.device(1))
    model.load_state_dict(checkpoint["model"], assign=True)
    assert {p.device for p in model.parameters()} == {emulator.device(0)}
    with pytest.raises(RuntimeError, match="but got mat1 is on emulated:1, different from other tensors on emulated:0"):
        model(torch.ones(2, 8, device=emulator.device(1)))


def test_ddp_rank_map_location_needs_two_devices() -> None:
    """Where a kind has fewer than two devices the scenario says why in one line (and its tests skip)."""
    scenario = registry.get("ddp_rank_map_location")
    count = torch.cuda.device_count()
    expected = None if count >= 2 else f"2 ranks on cuda need 2 cuda devices; this host has {count}"
    assert scenario.unavailable_reason(torch.device("cuda")) == expected
    assert scenario.unavailable_reason(CPU) is None


def test_ranks_report_the_first_failure(tmp_path: Path) -> None:
    """A rank that fails stops the run at once; its own error comes back, not its peer's."""
    from samedevice import ranks

    with pytest.raises(ValueError, match=r"^rank 1: this rank cannot start: nothing to load$"):
        ranks.launch("tests.rank_targets:fail_on_rank_1", 2, "cpu", tmp_path)


def test_ranks_report_an_error_without_a_message(tmp_path: Path) -> None:
    """A bare `assert` in a rank comes back named by its type; it used to leave only 'exited with 1' and a log line."""
    from samedevice import ranks

    with pytest.raises(AssertionError, match=r"^rank 1: AssertionError$"):
        ranks.launch("tests.rank_targets:assert_on_rank_1", 2, "cpu", tmp_path)


def test_ranks_time_out(tmp_path: Path) -> None:
    """Ranks that do not finish are killed at the timeout, with one line saying so."""
    from samedevice import ranks

    with pytest.raises(RuntimeError, match=r"^tests.rank_targets:hang: the ranks did not finish in 1 s$"):
        ranks.launch("tests.rank_targets:hang", 2, "cpu", tmp_path, timeout=1)


# ---- the catalog as a whole ----------------------------------------------------------------------


def test_every_symptom_kind_is_recorded() -> None:
    """Each symptom kind the registry knows is what some scenario records on some device."""
    used = {kind for s in registry.SCENARIOS for kind in s.symptoms.values()}
    assert used == set(registry.SYMPTOMS)


def test_show_covers_every_scenario(capsys: pytest.CaptureFixture[str]) -> None:
    """`show` prints each scenario's lesson and diff."""
    from samedevice import cli

    for scenario in registry.SCENARIOS:
        assert cli.main(["show", scenario.slug]) == 0
        out = capsys.readouterr().out
        assert out.startswith(f"{scenario.slug}: {scenario.title}")
        assert f"--- cases/{scenario.slug}.py" in out


@pytest.mark.emulator
def test_tour_and_report_skip_what_cannot_run(capsys: pytest.CaptureFixture[str],
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """A scenario that cannot start on a device is listed as skipped with its reason, not run."""
    from samedevice import cli, report

    scenario = registry.get("ddp_rank_map_location")
    monkeypatch.setattr(registry, "SCENARIOS", (scenario,))
    monkeypatch.setattr(scenario.case(), "unavailable_reason", lambda device: "2 ranks need 2 devices; 1 here")
    data = report.run(["emulated"])
    assert data["records"] == []
    assert data["skipped"] == [{"scenario": scenario.slug, "device": "emulated:0",
                                "reason": "2 ranks need 2 devices; 1 here"}]
    assert cli.main(["tour", "--device", "emulated"]) == 0
    out = capsys.readouterr().out
    assert "ddp_rank_map_location  skipped   2 ranks need 2 devices; 1 here" in out
    assert "1 skipped" in out
