"""fixes/checkpoint.py: the atomic save and the all-or-nothing resume, on every device.

The round trips train on CPU, save, resume on each device and compare with an uninterrupted CPU run;
the bad-file cases check that every refusal names the file and the key and touches nothing; the kill
test runs a real process and SIGKILLs it in the middle of a save.
"""

from __future__ import annotations

import copy
import os
import pickle
import random
import re
import stat
import subprocess
import sys
import time
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from pytest_parametrize_cases import Case, parametrize_cases
from torch import nn

from samedevice import harness, registry
from tests.helpers import assert_same_params

HELPER = registry.ROOT / "fixes" / "checkpoint.py"
checkpoint = registry.helper("checkpoint")
CheckpointError = checkpoint.CheckpointError
CPU = torch.device("cpu")


def adam(model: nn.Module, **flags: Any) -> torch.optim.Optimizer:
    return torch.optim.Adam(model.parameters(), lr=harness.LR, **flags)


def trained(steps: int = harness.STEPS_BEFORE, device: torch.device = CPU, **flags: Any):
    """The harness's tiny model and an Adam, trained `steps` steps on `device`."""
    model = harness.new_model().to(device)
    optimizer = adam(model, **flags)
    harness.train(model, optimizer, harness.batches()[:steps], device)
    return model, optimizer


def assert_same(actual: Any, expected: Any, where: str = "") -> None:
    """Equal nested structures: same keys and lengths, tensors equal bit for bit on the same device."""
    assert type(actual) is type(expected), f"{where}: {type(actual)} != {type(expected)}"
    if isinstance(expected, torch.Tensor):
        assert actual.device == expected.device, f"{where}: on {actual.device}, was on {expected.device}"
        assert torch.equal(actual.cpu(), expected.cpu()), f"{where}: values differ"
    elif isinstance(expected, dict):
        assert list(actual) == list(expected), f"{where}: keys differ"
        for k in expected:
            assert_same(actual[k], expected[k], f"{where}.{k}")
    elif isinstance(expected, (list, tuple)):
        assert len(actual) == len(expected), f"{where}: lengths differ"
        for i, (a, e) in enumerate(zip(actual, expected)):
            assert_same(a, e, f"{where}.{i}")
    else:
        assert actual == expected, f"{where}: {actual!r} != {expected!r}"


def message(path: Path, key: str | None, detail: str) -> str:
    """The pattern of a CheckpointError for `path` and `key` whose detail matches `detail`."""
    where = "the file" if key is None else f"key {key!r}"
    return re.escape(f"checkpoint {path}: {where}: ") + detail


# ---- round trips ------------------------------------------------------------------------------


def test_resume_on_device_matches_uninterrupted_cpu_run(device: torch.device, tmp_path: Path) -> None:
    """Training resumed on the device from a CPU checkpoint ends where the uninterrupted CPU run does."""
    model, optimizer = trained()
    checkpoint.save_checkpoint(tmp_path / "ckpt.pt", model=model, optimizer=optimizer)

    model = harness.new_model()
    optimizer = adam(model)
    params = list(model.parameters())
    checkpoint.resume(tmp_path / "ckpt.pt", model=model, optimizer=optimizer, device=device)

    assert all(a is b for a, b in zip(model.parameters(), params))
    for param, state in optimizer.state.items():
        assert param.device == device
        assert state["exp_avg"].device == state["exp_avg_sq"].device == device
        assert state["step"].device == CPU  # PyTorch keeps `step` on CPU unless capturable or fused
    harness.train(model, optimizer, harness.batches()[harness.STEPS_BEFORE:], device)

    reference, _ = trained(harness.STEPS_TOTAL)
    assert_same_params(harness.cpu_state(model), harness.cpu_state(reference), exact=device.type == "cpu")


@pytest.mark.parametrize(
    ("flags", "step_on_device"),
    [({}, False), ({"capturable": True}, True), ({"fused": True}, True)],
    ids=["plain", "capturable", "fused"],
)
def test_step_follows_capturable_and_fused(
    flags: dict[str, bool], step_on_device: bool, device: torch.device, tmp_path: Path
) -> None:
    """Optimizer state lands on the params' device; `step` joins it only for capturable or fused Adam."""
    if flags.get("capturable") and device.type in ("cpu", "mps"):
        pytest.skip(f"PyTorch's capturable Adam refuses {device.type} params (torch/optim/optimizer.py)")
    model, optimizer = trained(2, device, **flags)
    checkpoint.save_checkpoint(tmp_path / "ckpt.pt", model=model, optimizer=optimizer)

    model = harness.new_model()
    optimizer = adam(model, **flags)
    checkpoint.resume(tmp_path / "ckpt.pt", model=model, optimizer=optimizer, device=device)

    for state in optimizer.state.values():
        assert state["exp_avg"].device == state["exp_avg_sq"].device == device
        assert state["step"].device == (device if step_on_device else CPU)
    harness.train(model, optimizer, harness.batches()[2:4], device)
    reference, _ = trained(4, device, **flags)
    exact = device.type in ("cpu", "emulated")  # the emulator runs CPU's kernels
    assert_same_params(harness.cpu_state(model), harness.cpu_state(reference), exact=exact)


OPTIMIZERS = [
    "Adadelta", "Adafactor", "Adagrad", "Adam", "AdamW", "Adamax", "ASGD", "LBFGS",
    "Muon", "NAdam", "RAdam", "RMSprop", "Rprop", "SGD",
]


@pytest.mark.parametrize("name", OPTIMIZERS)
def test_every_torch_optim_layout_resumes(name: str, tmp_path: Path) -> None:
    """Each torch.optim optimizer's state (factored, flat, scalar) passes the checks and round-trips."""
    def build() -> tuple[nn.Module, torch.optim.Optimizer]:
        model = harness.new_model()
        params = [p for p in model.parameters() if p.dim() == 2] if name == "Muon" else model.parameters()
        kwargs = {"momentum": 0.9} if name == "SGD" else {}
        return model, getattr(torch.optim, name)(params, **kwargs)

    model, optimizer = build()
    x, y = harness.batches()[0]

    def closure() -> torch.Tensor:
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        return loss

    for _ in range(2):
        optimizer.step(closure)
    checkpoint.save_checkpoint(tmp_path / "ckpt.pt", model=model, optimizer=optimizer)
    resumed_model, resumed = build()
    checkpoint.resume(tmp_path / "ckpt.pt", model=resumed_model, optimizer=resumed)
    assert_same(resumed.state_dict(), optimizer.state_dict(), "optimizer")
    assert_same(resumed_model.state_dict(), model.state_dict(), "model")


def test_rng_state_round_trips(device: torch.device, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """After a resume, torch.rand draws what it drew right after the save; the state is set from CPU."""
    model, optimizer = trained()
    torch.manual_seed(1234)
    checkpoint.save_checkpoint(tmp_path / "ckpt.pt", model=model, optimizer=optimizer)
    expected = torch.rand(8)

    model = harness.new_model()  # (seeds the generator itself)
    optimizer = adam(model)
    set_from: list[torch.device] = []
    set_rng_state = torch.set_rng_state
    monkeypatch.setattr(torch, "set_rng_state", lambda state: (set_from.append(state.device), set_rng_state(state)))
    torch.manual_seed(99)
    checkpoint.resume(tmp_path / "ckpt.pt", model=model, optimizer=optimizer, device=device)
    assert torch.equal(torch.rand(8), expected)
    assert set_from == [CPU]  # torch.set_rng_state takes a CPU ByteTensor only, whatever the device


def test_device_rng_state_round_trips(accelerator: torch.device, tmp_path: Path) -> None:
    """After a resume, a draw on the accelerator repeats the draw made right after the save: each device
    has its own generator (as each CUDA device does), and the helper keeps its state beside the CPU's."""
    model, optimizer = trained()
    torch.manual_seed(1234)
    torch.rand(1, device=accelerator)  # this run uses the device (an unused CUDA is not asked for state)
    checkpoint.save_checkpoint(tmp_path / "ckpt.pt", model=model, optimizer=optimizer)
    expected = torch.rand(8, device=accelerator).cpu()

    torch.manual_seed(99)
    torch.rand(8, device=accelerator)
    checkpoint.resume(tmp_path / "ckpt.pt", model=model, optimizer=optimizer, device=accelerator)
    assert torch.equal(torch.rand(8, device=accelerator).cpu(), expected)


def test_extras_come_back(tmp_path: Path) -> None:
    """The extra entries are returned as saved: numbers, strings, containers, tensors, sizes."""
    model, optimizer = trained()
    extras = {
        "epoch": 3, "loss": 0.25, "name": "run-7", "done": False, "none": None,
        "history": [1.0, 0.5], "cfg": {"lr": 0.05, "betas": (0.9, 0.999)},
        "ema": torch.arange(4.0), "shape": torch.Size([2, 3]), "dtype": torch.float16,
    }
    checkpoint.save_checkpoint(tmp_path / "ckpt.pt", model=model, optimizer=optimizer, **extras)
    got = checkpoint.resume(tmp_path / "ckpt.pt", model=harness.new_model())
    assert_same(got, extras, "extra")


class NotAllowlisted:
    """A class torch.load(weights_only=True) does not know."""


@pytest.mark.parametrize(
    ("value", "kind"),
    [(NotAllowlisted(), "NotAllowlisted"), ({"when": [__import__("datetime").date(2024, 1, 1)]}, "datetime.date"),
     (lambda: 0, "function")],
    ids=["custom_class", "nested_date", "lambda"],
)
def test_unloadable_extras_are_refused_before_writing(value: Any, kind: str, tmp_path: Path) -> None:
    """An extra that weights_only=True would refuse raises TypeError, and the old checkpoint stays."""
    path = tmp_path / "ckpt.pt"
    model, optimizer = trained()
    checkpoint.save_checkpoint(path, model=model, optimizer=optimizer, epoch=1)
    before = path.read_bytes()
    with pytest.raises(TypeError, match=rf"save_checkpoint: extra\.bad.* is a .*{kind}.*weights_only=True"):
        checkpoint.save_checkpoint(path, model=model, optimizer=optimizer, epoch=2, bad=value)
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["ckpt.pt"]


def test_legacy_format_resumes_without_mmap(tmp_path: Path) -> None:
    """A checkpoint in torch's pre-zip format (which cannot be mmapped) still resumes."""
    model, optimizer = trained()
    checkpoint.save_checkpoint(tmp_path / "ckpt.pt", model=model, optimizer=optimizer, epoch=3)
    payload = torch.load(tmp_path / "ckpt.pt", weights_only=True)
    torch.save(payload, tmp_path / "legacy.pt", _use_new_zipfile_serialization=False)
    resumed = harness.new_model()
    assert checkpoint.resume(tmp_path / "legacy.pt", model=resumed, optimizer=adam(resumed)) == {"epoch": 3}
    assert_same(resumed.state_dict(), model.state_dict())


@pytest.mark.skipif(not Path("/proc/self/maps").exists(), reason="reads the memory maps from /proc/self/maps")
def test_resume_leaves_no_mapping_of_the_file(tmp_path: Path) -> None:
    """Nothing left after a resume (not even a 0-dim `step`) keeps the mmapped checkpoint alive."""
    path = tmp_path / "ckpt.pt"
    model, optimizer = trained()
    checkpoint.save_checkpoint(path, model=model, optimizer=optimizer, ema=torch.ones(3))
    model, optimizer = harness.new_model(), None
    optimizer = adam(model)
    extra = checkpoint.resume(path, model=model, optimizer=optimizer)
    assert extra["ema"].sum() == 3
    assert str(path) not in Path("/proc/self/maps").read_text()


# ---- atomic save ------------------------------------------------------------------------------

CHILD = r"""
import os, sys, time, importlib.util
from pathlib import Path
import torch

helper, target, marker, stage = sys.argv[1:]
spec = importlib.util.spec_from_file_location("checkpoint", helper)
checkpoint = importlib.util.module_from_spec(spec)
spec.loader.exec_module(checkpoint)

def stall():
    Path(marker).touch()
    time.sleep(60)

if stage == "mid_write":  # stall with the temporary file half written
    real_save = torch.save

    class Halfway:
        def __init__(self, f):
            self.f, self.written = f, 0
        def write(self, b):
            n = self.f.write(b)
            self.written += len(b)
            if self.written > 100 * 2**20:
                self.f.flush()
                stall()
            return n
        def flush(self):
            self.f.flush()

    torch.save = lambda obj, f, **kw: real_save(obj, Halfway(f), **kw)
else:  # "before_rename": stall with the temporary file complete, at its fsync
    os.fsync = lambda fd: stall()

torch.manual_seed(1)
checkpoint.save_checkpoint(target, model=torch.nn.Linear(4, 2), tag="new", blob=torch.zeros(50_000_000))
"""


@pytest.mark.parametrize("stage", ["mid_write", "before_rename"])
def test_kill_during_save_keeps_last_good_checkpoint(stage: str, tmp_path: Path) -> None:
    """A process SIGKILLed while saving 200 MB leaves the previous checkpoint whole and resumable."""
    folder = tmp_path / "ckpts"
    folder.mkdir()
    path, marker = folder / "ckpt.pt", tmp_path / "saving"
    torch.manual_seed(0)
    old = nn.Linear(4, 2)
    checkpoint.save_checkpoint(path, model=old, tag="old")

    child = subprocess.Popen([sys.executable, "-c", CHILD, str(HELPER), str(path), str(marker), stage],
                             stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while not marker.exists() and child.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    child.kill()
    _, stderr = child.communicate()
    assert marker.exists(), f"the child never reached its save: {stderr}"

    assert child.returncode == -9, "the child was not killed mid-save"  # it stalls inside save_checkpoint

    resumed = nn.Linear(4, 2)
    extra = checkpoint.resume(path, model=resumed)
    assert extra["tag"] == "old"
    assert_same(resumed.state_dict(), old.state_dict())
    leftovers = [p for p in folder.iterdir() if p != path]
    assert leftovers
    assert all(re.fullmatch(r"\.ckpt\.pt\..+\.tmp", p.name) for p in leftovers)
    assert list(folder.glob("*.pt")) == [path]  # a "latest *.pt" picker never picks the leftover
    if stage == "mid_write":
        with pytest.raises(CheckpointError, match=message(leftovers[0], None, ".*truncated")):
            checkpoint.resume(leftovers[0], model=nn.Linear(4, 2))


def test_failed_save_removes_its_temporary_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An exception while writing leaves the old checkpoint and no temporary file behind."""
    path = tmp_path / "ckpt.pt"
    model, optimizer = trained()
    checkpoint.save_checkpoint(path, model=model, optimizer=optimizer)
    before = path.read_bytes()
    real_save = torch.save

    def fail_halfway(obj: Any, f: Any, **kwargs: Any) -> None:
        f.write(b"PK\x03\x04 half a checkpoint")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(torch, "save", fail_halfway)
    with pytest.raises(OSError, match="No space left"):
        checkpoint.save_checkpoint(path, model=model, optimizer=optimizer)
    monkeypatch.setattr(torch, "save", real_save)
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["ckpt.pt"]


@pytest.mark.skipif(os.name == "nt", reason="POSIX permission bits")
def test_saved_file_has_plain_permissions(tmp_path: Path) -> None:
    """A new checkpoint gets the umask's permissions (not mkstemp's 0600); a replaced one keeps its own."""
    umask = os.umask(0o022)
    try:
        checkpoint.save_checkpoint(tmp_path / "ckpt.pt", model=nn.Linear(2, 2))
        assert stat.S_IMODE((tmp_path / "ckpt.pt").stat().st_mode) == 0o644
        (tmp_path / "ckpt.pt").chmod(0o640)
        checkpoint.save_checkpoint(tmp_path / "ckpt.pt", model=nn.Linear(2, 2))
        assert stat.S_IMODE((tmp_path / "ckpt.pt").stat().st_mode) == 0o640
    finally:
        os.umask(umask)


# ---- bad checkpoints: refused, named, and nothing touched ------------------------------------


def write_good(path: Path) -> None:
    model, optimizer = trained()
    checkpoint.save_checkpoint(path, model=model, optimizer=optimizer, epoch=3)


def truncated(path: Path) -> None:
    write_good(path)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def flip_tensor_bytes(path: Path) -> None:
    """Flip 16 bytes inside a tensor record of a good checkpoint, as bit rot would."""
    write_good(path)
    with zipfile.ZipFile(path) as archive:
        record = next(i for i in archive.infolist() if "/data/" in i.filename and i.file_size >= 64)
    data = bytearray(path.read_bytes())
    at = record.header_offset  # the data follows the local header: 30 bytes, the name, the extra field
    start = at + 30 + int.from_bytes(data[at + 26:at + 28], "little") + int.from_bytes(data[at + 28:at + 30], "little")
    data[start:start + 16] = bytes(b ^ 0xFF for b in data[start:start + 16])
    path.write_bytes(bytes(data))


def random_bytes(path: Path) -> None:
    path.write_bytes(random.Random(0).randbytes(4096))


def plain_tensor(path: Path) -> None:
    torch.save(torch.ones(3), path)


def dict_without_model(path: Path) -> None:
    torch.save({"state_dict": harness.new_model().state_dict(), "epoch": 3}, path)


def hand_written(path: Path) -> None:
    model, optimizer = trained()
    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict()}, path)


def saved_from(change_model: Callable[[nn.Module], Any] = lambda m: None,
               optimizer: Callable[[nn.Module], torch.optim.Optimizer | None] = adam) -> Callable[[Path], None]:
    """A writer of a good checkpoint of a changed model or a differently built optimizer."""
    def write(path: Path) -> None:
        model = harness.new_model()
        change_model(model)
        opt = optimizer(model)
        if opt is not None:
            harness.train(model, opt, harness.batches()[:1], CPU)
        checkpoint.save_checkpoint(path, model=model, optimizer=opt)
    return write


def _set(name: str, value: Any) -> Callable[[nn.Module], None]:
    return lambda model: setattr(model, name, value)


def narrower(model: nn.Module) -> None:
    model.fc1, model.fc2 = nn.Linear(8, 12), nn.Linear(12, 2)


BAD = parametrize_cases(
    Case("truncated", write=truncated, key=None, detail="is not a complete zip archive, it is truncated"),
    Case("flipped_tensor_bytes", write=flip_tensor_bytes, key=None,
         detail=r"record '.*/data/\d+' fails its CRC-32 check, the file is corrupt"),
    Case("random_bytes", write=random_bytes, key=None,
         detail=r"torch\.load\(weights_only=True\) refuses it .*: it is not a checkpoint"),
    Case("plain_tensor", write=plain_tensor, key=None, detail="holds a Tensor, not a checkpoint"),
    Case("dict_without_model", write=dict_without_model, key="model",
         detail=r"missing: the file holds a dict with keys \['epoch', 'state_dict'\]"),
    Case("hand_written_torch_save", write=hand_written, key="format_version",
         detail="missing: this is a plain torch.save checkpoint, .*; to read it, pass plain=True to resume"),
    Case("missing_model_key", write=saved_from(_set("fc2", nn.Linear(16, 2, bias=False))), key="model.fc2.bias",
         detail="missing from the checkpoint; the model has it"),
    Case("unexpected_model_key", write=saved_from(lambda m: m.register_buffer("scale", torch.ones(1))),
         key="model.scale", detail="in the checkpoint but not in the model"),
    Case("wrong_shape", write=saved_from(narrower),
         key="model.fc1.weight", detail=re.escape("shape [12, 8] in the checkpoint, [16, 8] in the model")),
    Case("no_optimizer_saved", write=saved_from(optimizer=lambda m: None), key="optimizer",
         detail="missing: the checkpoint was saved without an optimizer"),
    Case("two_param_groups", key="optimizer.param_groups",
         write=saved_from(optimizer=lambda m: torch.optim.Adam([{"params": m.fc1.parameters()},
                                                                {"params": m.fc2.parameters()}])),
         detail="2 param groups in the checkpoint, 1 in the optimizer"),
    Case("fewer_params_in_group", key="optimizer.param_groups.0",
         write=saved_from(optimizer=lambda m: torch.optim.Adam(list(m.parameters())[:3])),
         detail="3 params in the checkpoint, 4 in the optimizer's group"),
    Case("params_in_another_order", key="optimizer.state.0.exp_avg",
         write=saved_from(optimizer=lambda m: torch.optim.Adam(list(m.parameters())[::-1])),
         detail=re.escape("shape [2] in the checkpoint, [16, 8] for its param")),
)


@BAD
def test_bad_checkpoint_is_refused_untouched(
    write: Callable[[Path], None], key: str | None, detail: str, tmp_path: Path
) -> None:
    """A bad checkpoint raises CheckpointError naming the file and the key, and changes nothing."""
    path = tmp_path / "ckpt.pt"
    write(path)
    model, optimizer = trained(1)
    params = list(model.parameters())
    model_before, optimizer_before = copy.deepcopy(model.state_dict()), copy.deepcopy(optimizer.state_dict())
    rng_before = torch.get_rng_state()

    with pytest.raises(CheckpointError, match=message(path, key, detail)) as info:
        checkpoint.resume(path, model=model, optimizer=optimizer)

    assert (info.value.path, info.value.key) == (path, key)
    assert all(a is b for a, b in zip(model.parameters(), params))
    assert_same(model.state_dict(), model_before, "model")
    assert_same(optimizer.state_dict(), optimizer_before, "optimizer")
    assert torch.equal(torch.get_rng_state(), rng_before)


def test_torch_load_alone_misses_flipped_bytes(tmp_path: Path) -> None:
    """torch.load does not check CRC-32: flipped tensor bytes load silently (hence the helper's check)."""
    good, bad = tmp_path / "good.pt", tmp_path / "bad.pt"
    flip_tensor_bytes(bad)
    write_good(good)  # the same bytes, unflipped: the harness seeds its model
    for mmap in (False, True):
        loaded = torch.load(bad, weights_only=True, mmap=mmap)
        with pytest.raises(AssertionError):
            assert_same(loaded, torch.load(good, weights_only=True))


def test_failure_while_applying_rolls_back(
    accelerator: torch.device, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """If applying fails after the checks, the model returns to its device and values, the optimizer to its state."""
    path = tmp_path / "ckpt.pt"
    write_good(path)
    model, optimizer = trained(1)
    params = list(model.parameters())
    model_before, state_before = copy.deepcopy(model.state_dict()), copy.deepcopy(optimizer.state_dict())
    rng_before = torch.get_rng_state()

    def broken_load(state_dict: Any) -> None:
        raise RuntimeError("simulated failure inside optimizer.load_state_dict")

    monkeypatch.setattr(optimizer, "load_state_dict", broken_load)
    with pytest.raises(CheckpointError, match=message(path, "optimizer", "could not be applied .*simulated failure")):
        checkpoint.resume(path, model=model, optimizer=optimizer, device=accelerator)

    assert all(a is b for a, b in zip(model.parameters(), params))
    assert_same(model.state_dict(), model_before, "model")  # back on CPU, old values
    assert_same(optimizer.state_dict(), state_before, "optimizer")
    assert torch.equal(torch.get_rng_state(), rng_before)


def test_move_that_replaces_params_is_refused(tmp_path: Path) -> None:
    """With PyTorch's overwrite-on-conversion flag, model.to would orphan the optimizer: refused, rolled back."""
    path = tmp_path / "ckpt.pt"
    write_good(path)
    model, optimizer = trained(1)
    params = list(model.parameters())
    model_before = copy.deepcopy(model.state_dict())
    torch.__future__.set_overwrite_module_params_on_conversion(True)
    try:
        with pytest.raises(CheckpointError, match=message(path, "model", r".*replaced the Parameter 'weight'")):
            checkpoint.resume(path, model=model, optimizer=optimizer, device="cpu")
    finally:
        torch.__future__.set_overwrite_module_params_on_conversion(False)
    assert all(a is b for a, b in zip(model.parameters(), params))
    assert all(a is b for a, b in zip(optimizer.param_groups[0]["params"], params))
    assert_same(model.state_dict(), model_before, "model")


# ---- pickles that would run code --------------------------------------------------------------


class Touch:
    """Unpickling this creates `marker`: a stand-in for any code a pickle can run."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, ...]:
        return (Path.touch, (self.marker,))


class System:
    """Unpickling this runs a shell command."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, ...]:
        return (os.system, (f"touch '{self.marker}'",))


@pytest.mark.parametrize("payload", [Touch, System], ids=["path_touch", "os_system"])
@pytest.mark.parametrize("container", ["raw_pickle", "torch_save"])
def test_pickle_that_runs_code_is_refused(payload: type, container: str, tmp_path: Path) -> None:
    """A checkpoint whose pickle would run code is refused by weights_only=True; its code never runs."""
    control, marker, path = tmp_path / "control", tmp_path / "pwned", tmp_path / "ckpt.pt"
    pickle.loads(pickle.dumps(payload(control), protocol=2))
    assert control.exists(), "the payload is live: plain pickle runs it"
    evil = {"model": payload(marker), "format_version": 1}
    if container == "raw_pickle":
        path.write_bytes(pickle.dumps(evil, protocol=2))
    else:
        torch.save(evil, path)

    model = harness.new_model()
    with pytest.raises(CheckpointError, match=message(path, None, r".*refuses it .*(?i:unsupported global)")):
        checkpoint.resume(path, model=model)
    assert not marker.exists()


# ---- any number of Stateful objects -----------------------------------------------------------


def gan_like(lr: float = harness.LR, enabled: bool = True) -> dict[str, Any]:
    """Two models' worth of state in one: a model, two optimizers, an LR scheduler and a GradScaler."""
    model = harness.new_model()
    objects: dict[str, Any] = {
        "model": model,
        "optimizer": torch.optim.Adam(model.fc1.parameters(), lr=lr),
        "optimizer_head": torch.optim.SGD(model.fc2.parameters(), lr=lr, momentum=0.9),
        "scaler": torch.amp.GradScaler("cpu", init_scale=2.0**10, enabled=enabled),
    }
    objects["scheduler"] = torch.optim.lr_scheduler.StepLR(objects["optimizer"], step_size=1, gamma=0.5)
    return objects


def train_gan_like(objects: dict[str, Any], steps: int) -> None:
    for x, y in harness.batches()[:steps]:
        for name in ("optimizer", "optimizer_head"):
            objects[name].zero_grad()
        objects["scaler"].scale(nn.functional.mse_loss(objects["model"](x), y)).backward()
        objects["scaler"].step(objects["optimizer"])
        objects["scaler"].step(objects["optimizer_head"])
        objects["scaler"].update()
        objects["scheduler"].step()


def state_of(objects: dict[str, Any]) -> dict[str, Any]:
    return copy.deepcopy({name: obj.state_dict() for name, obj in objects.items()})


def test_stateful_objects_round_trip(tmp_path: Path) -> None:
    """Two optimizers, an LR scheduler and a GradScaler are saved by name and restored by name, extras apart."""
    saved = gan_like()
    train_gan_like(saved, 3)
    checkpoint.save_checkpoint(tmp_path / "ckpt.pt", **saved, epoch=3)

    resumed = gan_like(lr=1.0)
    extra = checkpoint.resume(tmp_path / "ckpt.pt", **resumed)
    assert extra == {"epoch": 3}
    assert_same(state_of(resumed), state_of(saved))
    assert resumed["scheduler"].get_last_lr() == saved["scheduler"].get_last_lr()
    assert resumed["scaler"].get_scale() == saved["scaler"].get_scale()


def test_failing_stateful_object_rolls_back_all(tmp_path: Path) -> None:
    """When the last object refuses its state (a disabled GradScaler's into an enabled one), the model, both
    optimizers and the scheduler, already loaded, are put back as they were."""
    saved = gan_like(enabled=False)
    train_gan_like(saved, 3)
    checkpoint.save_checkpoint(tmp_path / "ckpt.pt", **saved)

    resumed = gan_like(lr=1.0)
    train_gan_like(resumed, 1)
    before = state_of(resumed)
    with pytest.raises(CheckpointError, match=message(tmp_path / "ckpt.pt", "stateful.scaler",
                                                      r"could not be applied \(RuntimeError: The source state dict "
                                                      r"is empty.*every other object are as they were")):
        checkpoint.resume(tmp_path / "ckpt.pt", **resumed)
    assert_same(state_of(resumed), before)


def test_stateful_object_missing_from_checkpoint(tmp_path: Path) -> None:
    """Asking to restore an object the checkpoint does not have names it and changes nothing."""
    model, optimizer = trained()
    checkpoint.save_checkpoint(tmp_path / "ckpt.pt", model=model, optimizer=optimizer)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1)
    with pytest.raises(CheckpointError, match=message(tmp_path / "ckpt.pt", "stateful.scheduler",
                                                      "missing: the checkpoint was saved without it")):
        checkpoint.resume(tmp_path / "ckpt.pt", model=model, optimizer=optimizer, scheduler=scheduler)


def test_resume_refuses_an_object_without_state(tmp_path: Path) -> None:
    """An extra passed to resume, which cannot be restored into, is a TypeError naming the keyword."""
    with pytest.raises(TypeError, match=r"resume: epoch= is a int, which has no state_dict and load_state_dict"):
        checkpoint.resume(tmp_path / "ckpt.pt", model=harness.new_model(), epoch=3)


def test_plain_torch_save_checkpoint_resumes_with_plain(device: torch.device, tmp_path: Path) -> None:
    """A plain torch.save({"model", "optimizer", "scheduler", "epoch"}) file resumes with plain=True on every
    device: state restored by name, the other keys handed back, and training ends where the CPU run does."""
    model, optimizer = trained()
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=2)
    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                "scheduler": scheduler.state_dict(), "epoch": 3}, tmp_path / "plain.pt")

    resumed = harness.new_model()
    resumed_optimizer = adam(resumed)
    resumed_scheduler = torch.optim.lr_scheduler.StepLR(resumed_optimizer, step_size=5)
    extra = checkpoint.resume(tmp_path / "plain.pt", model=resumed, optimizer=resumed_optimizer,
                              scheduler=resumed_scheduler, device=device, plain=True)
    assert extra == {"epoch": 3}
    assert resumed_scheduler.step_size == 2
    harness.train(resumed, resumed_optimizer, harness.batches()[harness.STEPS_BEFORE:], device)
    harness.train(model, optimizer, harness.batches()[harness.STEPS_BEFORE:], CPU)
    assert_same_params(harness.cpu_state(resumed), harness.cpu_state(model), exact=device.type == "cpu")
