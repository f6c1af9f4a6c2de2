"""Properties over fuzzed optimizer state layouts, on the emulated device, checked against CPU.

Profiles: `ci` (the default under CI=true), `dev`, `deep` (HYPOTHESIS_PROFILE=deep) in conftest.py.
"""

from __future__ import annotations

import io
import re

import pytest
import torch
from hypothesis import find, given, note

from samedevice import audit, emulator, registry
from tests.helpers import closure_step
from tests.strategies import FuzzNet, Layout, layouts, module_trees, training_setups

optimizer_to = registry.helper("optimizer_to").optimizer_to
pytestmark = pytest.mark.emulator
DEVICE = emulator.device() if emulator.unavailable_reason() is None else torch.device("cpu")
STEPS_TOTAL = 4


def _train(model: FuzzNet, optimizer: torch.optim.Optimizer, steps: range, device: torch.device) -> None:
    g = torch.Generator().manual_seed(3)
    data = [torch.randn(5, 3, generator=g) for _ in range(STEPS_TOTAL)]
    for i in steps:
        closure_step(model, optimizer, data[i].to(device=device, dtype=next(model.parameters()).dtype))


def _model(layout: Layout) -> FuzzNet:
    return FuzzNet(tied=layout.tied, frozen=layout.frozen, dtype=layout.dtype)


def _checkpoint(layout: Layout) -> dict:
    """The optimizer state after `steps_before` steps on the device, as a CPU host reads it back."""
    model = _model(layout).to(DEVICE)
    optimizer = layout.make_optimizer(model.param_groups(layout.groups))
    _train(model, optimizer, range(layout.steps_before), DEVICE)
    buf = io.BytesIO()
    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict()}, buf)
    buf.seek(0)
    return torch.load(buf, map_location="cpu", weights_only=True)


def _reference(layout: Layout) -> dict[str, torch.Tensor]:
    model = _model(layout)
    optimizer = layout.make_optimizer(model.param_groups(layout.groups), on_cpu=True)
    _train(model, optimizer, range(STEPS_TOTAL), torch.device("cpu"))
    return {k: v.detach() for k, v in model.state_dict().items()}


def _broken_resume(layout: Layout) -> tuple[FuzzNet, torch.optim.Optimizer]:
    """The pitfall order, then a partial migration: some state tensors already moved by hand."""
    checkpoint = _checkpoint(layout)
    model = _model(layout)
    optimizer = layout.make_optimizer(model.param_groups(layout.groups))
    model.load_state_dict(checkpoint["model"])
    optimizer.load_state_dict(checkpoint["optimizer"])
    model.to(DEVICE)
    i = 0
    for state in optimizer.state.values():
        for key, value in state.items():
            if torch.is_tensor(value):
                if layout.migrate_mask >> i & 1:
                    state[key] = value.to(DEVICE)
                i += 1
    return model, optimizer


def _rule_step_on_device(optimizer: torch.optim.Optimizer, param: torch.Tensor) -> bool:
    group = next(g for g in optimizer.param_groups if any(p is param for p in g["params"]))
    return bool(group.get("capturable") or group.get("fused"))


def _off_device(optimizer: torch.optim.Optimizer) -> list[tuple[str, torch.Tensor]]:
    """(key, tensor) of the state tensors not where PyTorch's rule wants them: each on its
    parameter's device, except `step`, on CPU unless capturable or fused."""
    off = []
    for param, state in optimizer.state.items():
        for key, value in state.items():
            tensors = value if isinstance(value, list) else [value]
            for t in tensors:
                if not torch.is_tensor(t):
                    continue
                if key == "step" and not _rule_step_on_device(optimizer, param):
                    continue
                if t.device != param.device:
                    off.append((key, t))
    return off


def _must_raise(layout: Layout, optimizer: torch.optim.Optimizer, off: list[tuple[str, torch.Tensor]]) -> bool:
    """Whether the next step must fail with this state off its device: every off-device state tensor
    takes part in device arithmetic (or, for a capturable/fused `step`, PyTorch's own check refuses
    it), except where an optimizer never reads it. Hypothesis found those exceptions:
    - ASGD's for-loop implementation (foreach=False) reads `eta` and `mu` as Python numbers and,
      while mu == 1 (its first t0 = 1e6 steps), only copies the parameters into `ax` (a cross-device
      copy_ is allowed). Its foreach implementation, the accelerator default, does raise.
    LBFGS is not covered by this equivalence (its test checks one direction only): it reads its
    history (`old_dirs`, `old_stps`, `ro`) only when the curvature test of the current iteration
    fails to refresh it, and a full history drops its oldest entry first, so whether CPU history
    raises depends on the data. Hypothesis found both outcomes.
    """
    if layout.optimizer == "ASGD" and layout.flags.get("foreach") is False and not layout.flags.get("capturable"):
        off = [(k, t) for k, t in off if k not in ("eta", "mu", "ax")]
    return bool(off)


def _assert_matches(model: FuzzNet, expected: dict[str, torch.Tensor]) -> None:
    for key, value in model.state_dict().items():
        tol = {"rtol": 1.6e-2, "atol": 1e-2} if value.dtype == torch.bfloat16 else {"rtol": 1e-4, "atol": 1e-5}
        torch.testing.assert_close(value.cpu(), expected[key], **tol, msg=lambda m, k=key: f"{k}: {m}")


@given(layouts())
def test_broken_resume_raises_iff_state_is_off_device(layout: Layout) -> None:
    """The broken resume raises exactly when a state tensor the next step reads is off its
    parameter's device, and the audit names every off-device state tensor."""
    model, optimizer = _broken_resume(layout)
    off = _off_device(optimizer)
    must_raise = _must_raise(layout, optimizer, off)
    found = audit.misplaced(DEVICE, model=model, optimizer=optimizer)
    note(f"off device: {[k for k, _ in off]}; audit: {[m.path for m in found]}")
    named = [eval(m.path, {}, {"model": model, "optimizer": optimizer}) for m in found]  # paths are code
    assert sorted(map(id, named)) == sorted(id(t) for _, t in off)
    raised: BaseException | None = None
    try:
        _train(model, optimizer, range(layout.steps_before, STEPS_TOTAL), DEVICE)
    except (RuntimeError, AssertionError) as e:
        raised = e
    note(f"raised: {raised!r}")
    if raised is not None:  # a device error, or PyTorch's own check of a capturable optimizer's CPU step
        capturable_check = re.search(r"If capturable=True, params.* must be on supported devices", str(raised))
        assert audit.is_device_mismatch(raised) or (isinstance(raised, AssertionError) and capturable_check)
    if layout.optimizer == "LBFGS":
        assert raised is None or off  # it raises only when something is off its device
    else:
        assert (raised is not None) == must_raise


@given(layouts())
def test_fixes_match_the_cpu_run(layout: Layout) -> None:
    """The fixed order and optimizer_to after the broken one both continue exactly like an
    uninterrupted CPU run."""
    expected = _reference(layout)
    checkpoint = _checkpoint(layout)
    model = _model(layout).to(DEVICE)  # the fixed order: move, build, load
    optimizer = layout.make_optimizer(model.param_groups(layout.groups))
    model.load_state_dict(checkpoint["model"])
    optimizer.load_state_dict(checkpoint["optimizer"])
    _train(model, optimizer, range(layout.steps_before, STEPS_TOTAL), DEVICE)
    _assert_matches(model, expected)

    model, optimizer = _broken_resume(layout)
    optimizer_to(optimizer)
    assert _off_device(optimizer) == []
    _train(model, optimizer, range(layout.steps_before, STEPS_TOTAL), DEVICE)
    _assert_matches(model, expected)


@given(layouts())
def test_optimizer_to_is_idempotent_and_keeps_values(layout: Layout) -> None:
    """optimizer_to keeps dtypes, values and sharing, follows the step rule, and a second call
    changes nothing."""
    _, optimizer = _broken_resume(layout)
    for state in optimizer.state.values():
        for key in [k for k, v in state.items() if torch.is_tensor(v) and k != "step"][:1]:
            state["alias_of_" + key] = state[key]  # sharing to keep
    before = {(id(p), k): (v.dtype, v.cpu().clone()) for p, s in optimizer.state.items()
              for k, v in s.items() if torch.is_tensor(v)}
    optimizer_to(optimizer)
    assert _off_device(optimizer) == []
    for param, state in optimizer.state.items():
        for key, value in state.items():
            if not torch.is_tensor(value):
                continue
            dtype, values = before[(id(param), key)]
            assert value.dtype == dtype
            assert torch.equal(value.cpu(), values)
            if key.startswith("alias_of_"):
                assert value is state[key.removeprefix("alias_of_")]
    placed = {(id(p), k): v for p, s in optimizer.state.items() for k, v in s.items()}
    optimizer_to(optimizer)
    assert all(v is placed[(id(p), k)] for p, s in optimizer.state.items() for k, v in s.items())


checkpoint = registry.helper("checkpoint")


def _state_equal(a: torch.optim.Optimizer, b: torch.optim.Optimizer) -> None:
    """Same state, value for value and dtype for dtype; devices as PyTorch's load rule puts them.
    Found by Hypothesis: ASGD creates `step` on the parameter's device, but load_state_dict leaves a
    non-capturable `step` where the checkpoint put it (CPU here); and it casts ASGD's float32 `eta`
    and `mu` to a float64 parameter's dtype. So PyTorch's load rule, not the original placement and
    dtype, is what any resume can promise: every state tensor but `step` takes its parameter's
    floating dtype."""
    assert _off_device(b) == []
    assert len(a.state) == len(b.state)
    for (_, sa), (pb, sb) in zip(a.state.items(), b.state.items()):
        assert sa.keys() == sb.keys()
        for key in sa:
            va, vb = sa[key], sb[key]
            for x, y in zip(va if isinstance(va, list) else [va], vb if isinstance(vb, list) else [vb]):
                if torch.is_tensor(x):
                    cast = key != "step" and x.is_floating_point() and pb.is_floating_point()
                    assert y.dtype == (pb.dtype if cast else x.dtype), key
                    assert torch.equal(x.to(y.dtype).cpu(), y.cpu()), key
                else:
                    assert x == y, key


@given(layouts())
def test_checkpoint_round_trips_every_layout(layout: Layout) -> None:
    """save_checkpoint then resume restores every layout exactly, and training goes on like an
    uninterrupted CPU run."""
    import tempfile
    from pathlib import Path

    model = _model(layout).to(DEVICE)
    optimizer = layout.make_optimizer(model.param_groups(layout.groups))
    _train(model, optimizer, range(layout.steps_before), DEVICE)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "ckpt.pt"
        checkpoint.save_checkpoint(path, model=model, optimizer=optimizer, steps=layout.steps_before)
        fresh = _model(layout)
        fresh_optimizer = layout.make_optimizer(fresh.param_groups(layout.groups))
        extra = checkpoint.resume(path, model=fresh, optimizer=fresh_optimizer, device=DEVICE)
    assert extra == {"steps": layout.steps_before}
    for key, value in model.state_dict().items():
        assert torch.equal(fresh.state_dict()[key].cpu(), value.cpu())
    _state_equal(optimizer, fresh_optimizer)
    _train(fresh, fresh_optimizer, range(layout.steps_before, STEPS_TOTAL), DEVICE)
    _assert_matches(fresh, _reference(layout))


@given(training_setups(devices=["cpu", "emulated:0", "emulated:1"]))
def test_repair_moves_or_refuses_every_misplaced_tensor(setup: tuple[torch.device, dict[str, object]]) -> None:
    """Whatever misplaced reports, repair moves it (values kept) or refuses it with a reason; after
    repair, misplaced reports exactly the refused tensors, and a second repair moves nothing."""
    target, objects = setup
    before = audit.misplaced(target, **objects)
    values = {m.path: eval(m.path, {}, dict(objects)).detach().cpu().clone() for m in before}
    note(f"target {target}; misplaced: {[str(m) for m in before]}")
    result = audit.repair(target, **objects)
    note(str(result))
    assert sorted(m.path for m in result.moved + result.refused) == sorted(values)
    assert all(m.fix for m in result.refused)
    assert audit.misplaced(target, **objects) == result.refused
    for m in before:
        tensor = eval(m.path, {}, dict(objects))
        assert torch.equal(tensor.detach().cpu(), values[m.path]), m.path
        if m in result.moved:
            assert tensor.device == target, m.path
    again = audit.repair(target, **objects)
    assert (again.moved, again.refused) == ([], result.refused)


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: module_trees(devices=[]), "module_trees: devices must name at least one device"),
        (lambda: module_trees(devices=["cpu"], max_depth=-1), "module_trees: max_depth must be at least 0, got -1"),
        (lambda: training_setups(devices=[]), "training_setups: devices must name at least one device"),
    ],
)
def test_tree_strategies_name_bad_arguments(make, message: str) -> None:
    """The module-tree strategies refuse bad arguments with an error naming the strategy and the argument."""
    with pytest.raises(ValueError, match=re.escape(message)):
        find(make(), lambda _: True)
