"""checkpoint: save a training checkpoint atomically and resume from it safely. Copy this file as it is.

When to use it: in place of a bare `torch.save` / `torch.load` pair in a training script that must
survive being killed mid-save and must never resume from a bad file, or resume with state on the
wrong device. It needs only the standard library and torch.

    save_checkpoint(path, model=model, optimizer=optimizer, scheduler=scheduler, scaler=scaler, epoch=epoch)
    ...
    extra = resume(path, model=model, optimizer=optimizer, scheduler=scheduler, scaler=scaler, device=device)
    # extra == {"epoch": ...}

Besides the model and `optimizer`, any keyword whose value is Stateful (has `state_dict` and
`load_state_dict`, as in torch.distributed.checkpoint: a second optimizer, an LR scheduler, a
GradScaler, an EMA module) is saved by its state_dict and restored by name; every other keyword is
an extra, handed back by `resume`. A checkpoint from a plain `torch.save({"model": ..., "optimizer":
...})` is read with `resume(..., plain=True)`: its other keys are restored by name or handed back.

`save_checkpoint` writes a temporary file next to `path`, fsyncs it, renames it over `path` and
fsyncs the folder: a crash at any moment leaves the last good checkpoint in place (and at worst a
stray `.<name>.*.tmp` file, never a half-written `path`). It refuses, before writing, any value
that `torch.load(weights_only=True)` would refuse.

`resume` loads with `weights_only=True` (a pickle that would run code is refused, its code never
runs), `map_location="cpu"` (nothing lands on a device by accident) and `mmap=True` (tensors are
read from the file as they are copied, not held in memory twice). It checks every record's CRC-32
(`torch.load` does not: flipped bytes in tensor data load silently), then the whole checkpoint
against the model and every Stateful object, and applies it only if all of it fits: the model moved to `device`
first, its state copied into the existing parameters (the optimizer keeps pointing at them), then
the optimizer state, which PyTorch casts to each parameter's device (`step` stays on CPU unless the
group is capturable or fused), then the other Stateful objects, then the RNG state, from a CPU tensor. The optimizer takes the
checkpoint's hyperparameters, `capturable` and `fused` included: load_state_dict keeps only each
group's params, so an Adam built with capturable=True resumes a plain Adam's checkpoint as plain.

Every problem is one `CheckpointError` naming the file and the key; after one, the model, the
optimizer and every other object are as they were. A missing file is not a bad checkpoint: it raises FileNotFoundError.
"""

from __future__ import annotations

import contextlib
import copy
import io
import os
import pickle
import re
import tempfile
import zipfile
from collections import OrderedDict
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Protocol

import torch

FORMAT_VERSION = 1
_Fail = Callable[["str | None", str], "CheckpointError"]  # makes the error for a key and a detail
_ZIP_MAGIC = b"PK\x03\x04"  # torch.save's default (zip) format; the only one torch.load can mmap


class Stateful(Protocol):
    """What `save_checkpoint` and `resume` take besides the model: optimizers, LR schedulers, a GradScaler."""

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state_dict: dict[str, Any], /) -> Any: ...


def _is_stateful(value: Any) -> bool:
    return not isinstance(value, type) and all(
        callable(getattr(value, name, None)) for name in ("state_dict", "load_state_dict"))


class CheckpointError(Exception):
    """A checkpoint that cannot be resumed: truncated, corrupt, not a checkpoint, or not this model's.

    `path` is the file; `key` the entry at fault (`'model.fc.weight'`, `'optimizer.param_groups'`), or
    None when the file as a whole is bad.
    """

    def __init__(self, path: str | os.PathLike[str], key: str | None, detail: str) -> None:
        self.path, self.key, self.detail = Path(path), key, detail
        where = "the file" if key is None else f"key {key!r}"
        super().__init__(f"checkpoint {path}: {where}: {detail}")

    def __reduce__(self) -> tuple[Any, ...]:
        return type(self), (self.path, self.key, self.detail)


# ---- saving ----------------------------------------------------------------------------------


def save_checkpoint(
    path: str | os.PathLike[str],
    *,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer | None = None,
    **objects: Any,
) -> None:
    """Write the model, the optimizer, every other Stateful object in `objects` (by its state_dict),
    the RNG states and the remaining `objects` (the extras) to `path`, atomically."""
    path = Path(path)
    payload: dict[str, Any] = {
        "format_version": FORMAT_VERSION,
        "model": model.state_dict(),
        "rng": _rng_states(),
        "stateful": {name: obj.state_dict() for name, obj in objects.items() if _is_stateful(obj)},
        "extra": {name: obj for name, obj in objects.items() if not _is_stateful(obj)},
    }
    if optimizer is not None:
        payload["optimizer"] = optimizer.state_dict()
    for key in ("model", "optimizer", "stateful", "extra"):
        if key in payload:
            _refuse_unloadable(payload[key], key)

    folder = path.parent
    mode = _mode_for(path)
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            torch.save(payload, f)
            f.flush()
            os.fsync(f.fileno())  # the data is on disk before the name points at it
        os.chmod(tmp, mode)  # mkstemp creates 0600; give the checkpoint the mode a plain open() would
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    _fsync_folder(folder)  # and the rename itself survives a power cut


def _rng_states() -> dict[str, Any]:
    """The CPU generator's state and, under each accelerator's type, its devices' (one each)."""
    states: dict[str, Any] = {"cpu": torch.get_rng_state()}
    for kind, module in _accelerators():
        # torch.mps has one device and no *_all functions
        states[kind] = module.get_rng_state_all() if hasattr(module, "get_rng_state_all") else [module.get_rng_state()]
    return states


def _accelerators() -> list[tuple[str, Any]]:
    """The accelerators whose RNG state is worth keeping: CUDA when this run used it (asking would
    initialize it), and the current accelerator (MPS, XPU, ...): each device has its own generator."""
    found = []
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        found.append(("cuda", torch.cuda))
    current = torch.accelerator.current_accelerator() if torch.accelerator.is_available() else None
    if current is not None and current.type != "cuda":
        found.append((current.type, torch.get_device_module(current)))
    return found


def _set_rng_states(states: dict[str, Any]) -> None:
    torch.set_rng_state(states["cpu"].cpu())  # torch.set_rng_state takes a CPU ByteTensor only
    for kind, module in _accelerators():
        saved = states.get(kind)
        if saved is None:
            continue  # saved on another kind of host: left out
        if hasattr(module, "set_rng_state_all"):
            for index, state in enumerate(saved[: module.device_count()]):
                module.set_rng_state(state.cpu(), index)
        else:
            module.set_rng_state(saved[0].cpu())  # torch.mps: one device


_PLAIN = (type(None), bool, int, float, str, bytes, torch.Tensor, torch.nn.Parameter)


def _refuse_unloadable(value: Any, where: str) -> None:
    """Raise TypeError for anything in `value` that torch.load(weights_only=True) would refuse."""
    kind = type(value)
    if kind in _PLAIN:
        return
    if kind in (dict, OrderedDict):
        for k, v in value.items():
            _refuse_unloadable(k, f"{where} (a key)")
            _refuse_unloadable(v, f"{where}.{k}")
        return
    if kind in (list, tuple):
        for i, v in enumerate(value):
            _refuse_unloadable(v, f"{where}.{i}")
        return
    # Anything else (torch.Size, dtypes, sets, tensor subclasses, classes allowlisted with
    # torch.serialization.add_safe_globals): ask the weights-only unpickler itself, on this value alone.
    buffer = io.BytesIO()
    try:
        torch.save(value, buffer)
        buffer.seek(0)
        torch.load(buffer, map_location="cpu", weights_only=True)
    except Exception as e:
        raise TypeError(
            f"save_checkpoint: {where} is a {kind.__module__}.{kind.__qualname__}, which "
            f"torch.load(weights_only=True) would refuse ({_reason(e)}); save plain Python values and "
            "tensors, or allowlist the type with torch.serialization.add_safe_globals"
        ) from e


def _mode_for(path: Path) -> int:
    try:
        return path.stat().st_mode & 0o7777  # replacing a checkpoint keeps its permissions
    except FileNotFoundError:
        umask = os.umask(0)  # the umask can only be read by setting it
        os.umask(umask)
        return 0o666 & ~umask


def _fsync_folder(folder: Path) -> None:
    if not hasattr(os, "O_DIRECTORY"):
        return  # Windows cannot open a folder; its rename is as durable as it gets
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


# ---- resuming --------------------------------------------------------------------------------


def resume(
    path: str | os.PathLike[str],
    *,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer | None = None,
    device: torch.device | str | None = None,
    plain: bool = False,
    **objects: Stateful,
) -> dict[str, Any]:
    """Load `path` into `model` (moved to `device` if given), `optimizer` and each Stateful object in
    `objects` (by the name it was saved under); return the extras. With `plain`, also read a file
    written by a plain `torch.save({"model": ..., "optimizer": ..., ...})`."""
    path = Path(path)
    for name, obj in objects.items():
        if not _is_stateful(obj):
            raise TypeError(f"resume: {name}= is a {type(obj).__name__}, which has no state_dict and "
                            "load_state_dict; pass only objects to restore (extras come back as the result)")
    targets: dict[str, Stateful] = {"optimizer": optimizer} if optimizer is not None else {}
    targets.update({f"stateful.{name}": obj for name, obj in objects.items()})
    checkpoint = _load(path)
    if plain:
        checkpoint = _from_plain(checkpoint, list(objects))
    _check(checkpoint, path, model, targets)
    _apply(checkpoint, path, model, targets, device)
    # A tensor loaded with mmap=True keeps a mapping of the whole file alive: hand back copies.
    return _copy_tensors(checkpoint["extra"])


def _load(path: Path) -> Any:
    with open(path, "rb") as f:  # a missing file raises FileNotFoundError here
        zipped = f.read(len(_ZIP_MAGIC)) == _ZIP_MAGIC
    if zipped:
        _check_crc(path)
    try:
        return torch.load(path, map_location="cpu", weights_only=True, mmap=zipped)
    except pickle.UnpicklingError as e:
        raise CheckpointError(
            path, None,
            f"torch.load(weights_only=True) refuses it ({_reason(e)}): it is not a checkpoint, "
            "or it holds code that would run on load",
        ) from e
    except Exception as e:  # the zip reader's RuntimeError, EOFError, ...
        raise CheckpointError(path, None, f"cannot be read, it is truncated or corrupt ({_reason(e)})") from e


def _check_crc(path: Path) -> None:
    try:
        with zipfile.ZipFile(path) as archive:
            bad = _first_bad_record(archive)
    except Exception as e:  # BadZipFile for a truncated file (no central directory), zlib errors, ...
        raise CheckpointError(path, None, f"is not a complete zip archive, it is truncated or corrupt ({e})") from e
    if bad is not None:
        raise CheckpointError(path, None, f"record {bad!r} fails its CRC-32 check, the file is corrupt")


def _first_bad_record(archive: zipfile.ZipFile) -> str | None:
    """zipfile's testzip, 64 KiB at a time: its 1 MiB reads are a resume's largest host allocation."""
    for info in archive.infolist():
        try:
            with archive.open(info) as f:
                while f.read(2**16):  # reading to the end checks the CRC-32
                    pass
        except zipfile.BadZipFile:
            return info.filename
    return None


def _reason(e: BaseException) -> str:
    """The gist of an exception from torch.load: what the unpickler refused, not its advice around it."""
    text = str(e)
    found = re.search(r"WeightsUnpickler error:\s*(.+?)(?:\n\n|\n\t|$)", text, re.DOTALL)
    if found:
        gist = found.group(1)
    else:  # e.g. "Trying to load unsupported GLOBAL posix.system ...": the last paragraph but the link
        paragraphs = [p for p in re.split(r"\n\s*\n", text) if p.strip() and not p.startswith("Check the doc")]
        gist = paragraphs[-1] if paragraphs else text
    return f"{type(e).__name__}: {' '.join(gist.split())}"


def _from_plain(checkpoint: Any, names: list[str]) -> Any:
    """A plain `torch.save({"model": ..., "optimizer": ..., ...})` dict in save_checkpoint's layout
    (without RNG states, which such a file does not have); anything else as it is."""
    if not isinstance(checkpoint, dict) or "format_version" in checkpoint:
        return checkpoint
    converted = {key: checkpoint[key] for key in ("model", "optimizer") if key in checkpoint}
    converted.update(format_version=FORMAT_VERSION, plain=True,
                     stateful={name: checkpoint[name] for name in names if name in checkpoint},
                     extra={k: v for k, v in checkpoint.items() if k not in ("model", "optimizer", *names)})
    return converted


_MISSING = object()


def _saved(checkpoint: dict[str, Any], key: str) -> Any:
    """The saved state of a target: "optimizer" at the top, "stateful.<name>" under "stateful"."""
    if key == "optimizer":
        return checkpoint.get("optimizer", _MISSING)
    stateful = checkpoint.get("stateful", {})
    return stateful.get(key.split(".", 1)[1], _MISSING) if isinstance(stateful, dict) else _MISSING


def _check(checkpoint: Any, path: Path, model: torch.nn.Module, targets: dict[str, Stateful]) -> None:
    """Raise CheckpointError for the first thing in `checkpoint` that does not fit; touch nothing."""

    def fail(key: str | None, detail: str) -> CheckpointError:
        return CheckpointError(path, key, detail)

    if not isinstance(checkpoint, dict):
        raise fail(None, f"holds a {type(checkpoint).__name__}, not a checkpoint (a dict written by save_checkpoint)")
    if "model" not in checkpoint:
        raise fail("model", f"missing: the file holds a dict with keys {sorted(map(str, checkpoint))}, "
                            "not a checkpoint written by save_checkpoint")
    if "format_version" not in checkpoint:
        raise fail("format_version", "missing: this is a plain torch.save checkpoint, not one written by "
                                     "save_checkpoint; to read it, pass plain=True to resume")
    if checkpoint["format_version"] != FORMAT_VERSION:
        version = checkpoint["format_version"]
        raise fail("format_version", f"is {version!r}; this code reads version {FORMAT_VERSION}")
    for key in ("model", "extra") if checkpoint.get("plain") else ("model", "rng", "extra"):
        if key not in checkpoint:
            raise fail(key, "missing: the checkpoint was not written by save_checkpoint")
        if not isinstance(checkpoint[key], dict):
            raise fail(key, f"should be a dict, is a {type(checkpoint[key]).__name__}")

    _check_model(checkpoint["model"], model, fail)
    for key, obj in targets.items():
        saved = _saved(checkpoint, key)
        if saved is _MISSING:
            raise fail(key, f"missing: the checkpoint was saved without {'an optimizer' if key == 'optimizer' else 'it'}")
        if isinstance(obj, torch.optim.Optimizer):
            _check_optimizer(saved, obj, fail, key)
        elif not isinstance(saved, dict):
            raise fail(key, f"should be a state_dict (a dict), is a {type(saved).__name__}")
    if "rng" in checkpoint:
        _check_rng(checkpoint["rng"], fail)


def _check_model(saved: dict[str, Any], model: torch.nn.Module, fail: _Fail) -> None:
    expected = model.state_dict()
    for name in expected:
        if name not in saved:
            raise fail(f"model.{name}", "missing from the checkpoint; the model has it")
    for name in saved:
        if name not in expected:
            raise fail(f"model.{name}", "in the checkpoint but not in the model")
    for name, want in expected.items():
        got = saved[name]
        if isinstance(want, torch.Tensor):
            if not isinstance(got, torch.Tensor):
                raise fail(f"model.{name}", f"should be a tensor, is a {type(got).__name__}")
            if got.shape != want.shape:
                raise fail(f"model.{name}",
                           f"shape {list(got.shape)} in the checkpoint, {list(want.shape)} in the model")


def _check_optimizer(saved: Any, optimizer: torch.optim.Optimizer, fail: _Fail, where: str = "optimizer") -> None:
    if not (isinstance(saved, dict) and isinstance(saved.get("state"), dict)
            and isinstance(saved.get("param_groups"), list)):
        raise fail(where, "should be an optimizer state_dict, a dict with 'state' and 'param_groups'")
    groups, saved_groups = optimizer.param_groups, saved["param_groups"]
    if len(saved_groups) != len(groups):
        raise fail(f"{where}.param_groups",
                   f"{len(saved_groups)} param groups in the checkpoint, {len(groups)} in the optimizer")
    params: dict[Any, torch.Tensor] = {}  # saved param id -> the optimizer's param
    for i, (saved_group, group) in enumerate(zip(saved_groups, groups)):
        ids = saved_group.get("params") if isinstance(saved_group, dict) else None
        if not isinstance(ids, list):
            raise fail(f"{where}.param_groups.{i}", "should be a dict with a 'params' list")
        if len(ids) != len(group["params"]):
            raise fail(f"{where}.param_groups.{i}",
                       f"{len(ids)} params in the checkpoint, {len(group['params'])} in the optimizer's group")
        params.update(zip(ids, group["params"]))
    for pid, state in saved["state"].items():
        key = f"{where}.state.{pid}"
        if pid not in params:
            raise fail(key, "belongs to no param group")
        if not isinstance(state, dict):
            raise fail(key, f"should be a dict, is a {type(state).__name__}")
        if isinstance(optimizer, torch.optim.LBFGS):
            # LBFGS keeps flat vectors over all the params of its (only) group, keyed by the first
            flat = sum(p.numel() for p in optimizer.param_groups[0]["params"])
            _check_flat(state, flat, key, fail)
            continue
        if type(optimizer).__module__.split(".")[:2] != ["torch", "optim"]:
            continue  # another library's state layout is its own: only the groups are checked
        param = params[pid]
        for name, value in state.items():
            if isinstance(value, torch.Tensor) and value.dim() > 0:
                want = _state_shape(optimizer, name, param)
                if value.shape != want:
                    raise fail(f"{key}.{name}",
                               f"shape {list(value.shape)} in the checkpoint, {list(want)} for its param")


def _state_shape(optimizer: torch.optim.Optimizer, name: str, param: torch.Tensor) -> torch.Size:
    """The shape torch.optim gives the state tensor `name` of `param` (torch/optim/*.py)."""
    shape = list(param.shape)
    if isinstance(optimizer, getattr(torch.optim, "Adafactor", ())) and name in ("row_var", "col_var"):
        shape[-1 if name == "row_var" else -2] = 1  # factored second moments (_adafactor.py)
    return torch.Size(shape)


def _check_flat(value: Any, numel: int, key: str, fail: _Fail) -> None:
    if isinstance(value, torch.Tensor):
        if value.dim() > 0 and value.shape != (numel,):
            raise fail(key, f"shape {list(value.shape)} in the checkpoint, [{numel}] for the flattened params")
    elif isinstance(value, dict):
        for k, v in value.items():
            _check_flat(v, numel, f"{key}.{k}", fail)
    elif isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            _check_flat(v, numel, f"{key}.{i}", fail)


def _check_rng(rng: dict[str, Any], fail: _Fail) -> None:
    want = torch.get_rng_state()
    cpu = rng.get("cpu")
    if not (isinstance(cpu, torch.Tensor) and cpu.dtype == torch.uint8 and cpu.shape == want.shape):
        raise fail("rng.cpu", f"should be a ByteTensor of {want.numel()} bytes (torch.get_rng_state()), "
                              f"is {_describe(cpu)}")
    for kind, states in rng.items():
        if kind != "cpu" and not (isinstance(states, list) and all(
                isinstance(s, torch.Tensor) and s.dtype == torch.uint8 for s in states)):
            raise fail(f"rng.{kind}", f"should be a list of ByteTensors (torch.{kind}.get_rng_state_all()), "
                                      f"is {_describe(states)}")


def _describe(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        return f"a {value.dtype} tensor of shape {list(value.shape)}"
    return f"a {type(value).__name__}"


def _apply(
    checkpoint: dict[str, Any],
    path: Path,
    model: torch.nn.Module,
    targets: dict[str, Stateful],
    device: torch.device | str | None,
) -> None:
    """Apply a checked checkpoint; if anything still fails, put everything back and raise."""
    # The snapshot: the model's values, its Parameter objects and device, each optimizer's own state
    # and groups (load_state_dict replaces those two, it never writes into them), and a copy of every
    # other object's state_dict. The model's values are copied to CPU only when load_state_dict would
    # write over them: a model.to that changes every tensor's device type gives each new memory and
    # leaves the old tensors as they were, so holding those (no copy, no extra host memory) is enough.
    params_before = [(module, name, param) for module in model.modules()
                     for name, param in module.named_parameters(recurse=False)]
    devices_before = {t.device for t in (*model.parameters(), *model.buffers())}
    moving = device is not None and all(d.type != torch.device(device).type for d in devices_before)
    model_before = model.state_dict() if moving else _copy_tensors(model.state_dict(), to="cpu")
    optimizers = {key: obj for key, obj in targets.items() if isinstance(obj, torch.optim.Optimizer)}
    optimizers_before = {key: (opt.state, opt.param_groups) for key, opt in optimizers.items()}
    others_before = {key: copy.deepcopy(obj.state_dict()) for key, obj in targets.items() if key not in optimizers}
    rng_before = _rng_states()
    stage = "model"
    try:
        if device is not None:
            model.to(device)  # first: the optimizer state is cast to where the params are when it loads
            for optimizer in optimizers.values():
                _check_still_held(params_before, optimizer)
        model.load_state_dict(checkpoint["model"])  # copies into the existing params, which the optimizer holds
        for stage, obj in targets.items():  # `stage` names the one that fails, below
            saved = _saved(checkpoint, stage)
            if stage in optimizers:
                obj.load_state_dict(saved)
                _unmap(optimizers[stage], saved)
            else:
                obj.load_state_dict(_copy_tensors(saved))  # copies: nothing keeps the file's mmap alive
        stage = "rng"
        if "rng" in checkpoint:  # a plain torch.save checkpoint has none
            _set_rng_states(checkpoint["rng"])
    except Exception as e:
        for module, name, param in params_before:
            if getattr(module, name) is not param:
                setattr(module, name, param)  # model.to made a new Parameter: put the original back
        if device is not None and len(devices_before) == 1:
            with _swapping_params():
                model.to(next(iter(devices_before)))
        model.load_state_dict(model_before)
        for key, (state, groups) in optimizers_before.items():
            optimizers[key].state, optimizers[key].param_groups = state, groups
        for key, state_dict in others_before.items():
            targets[key].load_state_dict(state_dict)
        _set_rng_states(rng_before)
        raise CheckpointError(
            path, stage, f"could not be applied ({type(e).__name__}: {e}); the model, optimizer and every other "
                         "object are as they were"
        ) from e


def _check_still_held(params_before: list[tuple[torch.nn.Module, str, Any]], optimizer: torch.optim.Optimizer) -> None:
    # model.to keeps each Parameter object (it sets .data or swaps contents) unless
    # torch.__future__.set_overwrite_module_params_on_conversion(True) is on: then the optimizer
    # would be left holding the old parameters and silently never train the model.
    held = {id(p) for group in optimizer.param_groups for p in group["params"]}
    for module, name, param in params_before:
        if getattr(module, name) is not param and id(param) in held:
            raise RuntimeError(
                f"model.to(device) replaced the Parameter {name!r} of {type(module).__name__} "
                "(torch.__future__.set_overwrite_module_params_on_conversion is on), so the optimizer holds "
                "the old one; build the optimizer after moving the model, or turn that flag off"
            )


@contextlib.contextmanager
def _swapping_params() -> Iterator[None]:
    """module.to swaps tensor contents, so every Parameter object stays the one the optimizer holds.

    A plain .to keeps them too when both devices are plain tensors (CUDA to CPU), but makes new ones
    when leaving a tensor-subclass device for CPU (torch/nn/modules/module.py, _apply).
    """
    previous = torch.__future__.get_swap_module_params_on_conversion()
    torch.__future__.set_swap_module_params_on_conversion(True)
    try:
        yield
    finally:
        torch.__future__.set_swap_module_params_on_conversion(previous)


def _unmap(optimizer: torch.optim.Optimizer, saved: dict[str, Any]) -> None:
    """Copy the optimizer state tensors that still share memory with the loaded file.

    load_state_dict keeps a loaded tensor as it is when no cast is needed (CPU params; `step`
    outside capturable/fused), and one such tensor, even a 0-dim `step`, keeps the mmap of the
    whole file alive for as long as the optimizer lives.
    """
    loaded = {t.untyped_storage().data_ptr() for t in _tensors(saved["state"])} - {0}
    for state in optimizer.state.values():
        for name, value in state.items():
            state[name] = _copy_tensors(value, only=loaded)


def _tensors(value: Any) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, dict):
        return [t for v in value.values() for t in _tensors(v)]
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in _tensors(v)]
    return []


def _copy_tensors(value: Any, *, to: str | None = None, only: set[int] | None = None) -> Any:
    """`value` with its tensors copied (to `to` if given; only those whose memory is in `only` if given)."""
    if isinstance(value, torch.Tensor):
        if only is not None and (value.device.type != "cpu" or value.untyped_storage().data_ptr() not in only):
            return value
        copy = value.detach().to(to or value.device, copy=True).requires_grad_(value.requires_grad)
        return torch.nn.Parameter(copy, value.requires_grad) if isinstance(value, torch.nn.Parameter) else copy
    if type(value) in (dict, OrderedDict):
        return type(value)((k, _copy_tensors(v, to=to, only=only)) for k, v in value.items())
    if type(value) in (list, tuple):
        return type(value)(_copy_tensors(v, to=to, only=only) for v in value)
    return value
