"""Name every tensor that is not on the device you meant, by a path you can paste back into Python.

PyTorch's error says that two devices met, never which tensor was on the wrong one:

    RuntimeError: Expected all tensors to be on the same device, but found at least two devices, cuda:0 and cpu!

After a resume the culprit is usually state that `model.to(device)` never touches: an optimizer's
momentum buffers loaded before the move, a loss weight kept as a plain attribute, a batch key that was
not moved. This module walks what you hand it and lists each such tensor:

    >>> from samedevice import audit
    >>> for item in audit.misplaced(dev, model=model, optimizer=optimizer, batch=batch):
    ...     print(item)
    optimizer.state[model.fc.weight]['momentum_buffer'] is on cpu (shape (2, 3))

What it walks, for each keyword `name=obj`:
- a torch.nn.Module: parameters, buffers and submodules, then the plain attributes of every module
  (a tensor kept as `self.weight = torch.tensor(...)`, which `module.to` does not move), and the
  lists, tuples, dicts and dataclasses of modules or tensors held there;
- a torch.optim.Optimizer: every per-parameter state entry at any depth (LBFGS keeps lists), keyed by
  the parameter's path among the other objects passed (`optimizer.state[model.fc.weight]`), else by
  `optimizer.param_groups[g]['params'][i]`; and the tensors in `param_groups` (a tensor `lr`);
- anything else: tensors, and any nesting of mappings (dict, transformers' BatchEncoding and
  ModelOutput), lists, tuples, namedtuples and dataclasses.
A tensor reachable by two paths is reported once, at the first (objects in the order given, each walked
depth first); cycles are walked once. The one exemption is PyTorch's own: an optimizer's `step` stays
on CPU unless the optimizer is capturable or fused.

`annotate(device, **objects)` adds this report to a device-mismatch error raised inside it;
`register(request, device, **objects)` and `take(item)` let a pytest hook do the same for a failed test.
"""

from __future__ import annotations

import contextlib
import dataclasses
import keyword
import re
import weakref
from collections.abc import Iterator, Mapping
from typing import Any, NamedTuple

import torch

__all__ = ["Misplaced", "annotate", "is_device_mismatch", "misplaced", "register", "report", "take"]


@dataclasses.dataclass(frozen=True)
class Misplaced:
    """A tensor that is not on the audited device: where it was found, where it lives, its shape."""

    path: str
    device: torch.device
    shape: tuple[int, ...] | None  # None for a lazy module's uninitialized parameter

    def __str__(self) -> str:
        shape = "" if self.shape is None else f" (shape {self.shape})"
        return f"{self.path} is on {self.device}{shape}"


def misplaced(device: torch.device | str, /, **objects: object) -> list[Misplaced]:
    """Every tensor reachable from `objects` that is not on `device`, in the order it is first reached."""
    target = _normalize(torch.device(device))
    # First pass: a name for every tensor outside optimizers, so that optimizer state can be keyed by
    # the parameter's path (optimizer.state[model.fc.weight]) whatever order the objects come in.
    names = {id(t): path for path, t in _Walker({}, into_optimizers=False).roots(objects)}
    found = []
    for path, t in _Walker(names, into_optimizers=True).roots(objects):
        if _normalize(t.device) != target:
            found.append(Misplaced(path, t.device, _shape(t)))
    return found


def report(device: torch.device | str, /, **objects: object) -> str:
    """`misplaced` as text, one tensor a line under a heading; empty when every tensor is on `device`."""
    found = misplaced(device, **objects)
    if not found:
        return ""
    target = _normalize(torch.device(device))
    heading = f"{len(found)} tensor{'s' if len(found) > 1 else ''} not on {target}:"
    return "\n".join([heading, *(f"    {item}" for item in found)])


# ---------------------------------------------------------------------------------------------
# Devices
# ---------------------------------------------------------------------------------------------


def _normalize(dev: torch.device) -> torch.device:
    """Compare devices as PyTorch places tensors: `cpu:3` is cpu, and an index-less accelerator is its
    current device (`torch.zeros(1, device="cuda")` lands on `torch.cuda.current_device()`)."""
    if dev.type in ("cpu", "meta"):
        return torch.device(dev.type)
    if dev.index is not None:
        return dev
    index = 0
    backend = getattr(torch, dev.type, None)  # torch.cuda, torch.mps, torch.xpu, torch.emulated
    current = getattr(backend, "current_device", None)
    initialized = getattr(backend, "is_initialized", None)
    # before the backend is initialized the current device is 0; asking earlier would initialize it
    if callable(current) and (initialized is None or initialized()):
        with contextlib.suppress(RuntimeError, AssertionError):
            index = int(current())
    return torch.device(dev.type, index)


def _shape(t: torch.Tensor) -> tuple[int, ...] | None:
    if torch.nn.parameter.is_lazy(t):
        return None  # a lazy module's parameter has no shape until its first forward
    return tuple(t.shape)


# ---------------------------------------------------------------------------------------------
# The walk
# ---------------------------------------------------------------------------------------------


class _Found(NamedTuple):
    path: str
    tensor: torch.Tensor


# What every nn.Module keeps in its __dict__ (hooks, the three registries, flags): never user data.
# Other attributes, `_private` ones included, are walked: `self._scale = torch.tensor(2.0)` is
# exactly the kind of tensor `module.to` leaves behind.
_MODULE_INTERNALS = frozenset(vars(torch.nn.Module()))


class _Walker:
    """One depth-first walk; each tensor and each container is visited once (shared ones and cycles)."""

    def __init__(self, names: dict[int, str], *, into_optimizers: bool) -> None:
        self.names = names
        self.into_optimizers = into_optimizers
        self.seen: set[int] = set()  # every object walked is reachable from the roots, so ids are stable

    def roots(self, objects: Mapping[str, object]) -> Iterator[_Found]:
        for name, obj in objects.items():
            yield from self.walk(obj, name)

    def walk(self, obj: object, path: str, step_rule: bool = False) -> Iterator[_Found]:
        if id(obj) in self.seen:
            return
        if isinstance(obj, torch.Tensor):
            self.seen.add(id(obj))
            yield _Found(path, obj)
        elif isinstance(obj, torch.nn.Module):
            self.seen.add(id(obj))
            yield from self._module(obj, path)
        elif isinstance(obj, torch.optim.Optimizer):
            if self.into_optimizers:
                self.seen.add(id(obj))
                yield from self._optimizer(obj, path)
        elif isinstance(obj, Mapping):
            self.seen.add(id(obj))
            for key, value in list(obj.items()):
                if step_rule and key == "step" and _is_cpu_step(value):
                    continue
                yield from self.walk(value, f"{path}[{self._key(key)}]", step_rule)
        elif isinstance(obj, tuple) and hasattr(obj, "_fields"):  # a namedtuple
            self.seen.add(id(obj))
            for field in obj._fields:
                yield from self.walk(getattr(obj, field), f"{path}.{field}", step_rule)
        elif isinstance(obj, (list, tuple)):
            self.seen.add(id(obj))
            for i, value in enumerate(obj):
                yield from self.walk(value, f"{path}[{i}]", step_rule)
        elif dataclasses.is_dataclass(obj) and not isinstance(obj, type):
            self.seen.add(id(obj))
            for field in dataclasses.fields(obj):
                yield from self.walk(getattr(obj, field.name, None), f"{path}.{field.name}", step_rule)

    def _module(self, module: torch.nn.Module, path: str) -> Iterator[_Found]:
        # registered structure first, so a parameter also held in a plain list is named by its
        # registered path (model.fc.weight), as named_parameters() would name it
        for registry in ("_parameters", "_buffers", "_modules"):
            for name, value in getattr(module, registry).items():
                if value is not None:
                    yield from self.walk(value, _member(module, registry, name, path))
        for name, value in vars(module).items():
            if name not in _MODULE_INTERNALS:
                yield from self.walk(value, _attribute(path, name))

    def _optimizer(self, optimizer: torch.optim.Optimizer, path: str) -> Iterator[_Found]:
        group_of: dict[int, tuple[int, int, dict[str, Any]]] = {}
        for g, group in enumerate(optimizer.param_groups):
            for i, p in enumerate(group["params"]):
                group_of.setdefault(id(p), (g, i, group))
        for key, state in list(optimizer.state.items()):
            where = group_of.get(id(key))
            if isinstance(key, torch.Tensor) and where is not None:
                g, i, group = where
                name = self.names.get(id(key), f"{path}.param_groups[{g}]['params'][{i}]")
                # PyTorch keeps `step` wherever it is, on CPU by default, unless the group is capturable
                # or fused: torch/optim/optimizer.py, Optimizer._process_value_according_to_param_policy
                # ("if key == 'step': if capturable or fused: return value.to(..., device=param.device)
                # else: return value"), which load_state_dict applies to every dict entry at any depth.
                step_rule = not (group.get("capturable") or group.get("fused"))
            else:  # state for a tensor no group holds, or a raw id left by load_state_dict
                name, step_rule = self._key(key), False
            yield from self.walk(state, f"{path}.state[{name}]", step_rule)
        for g, group in enumerate(optimizer.param_groups):
            yield from self.walk(group, f"{path}.param_groups[{g}]")

    def _key(self, key: object) -> str:
        if isinstance(key, torch.Tensor):
            return self.names.get(id(key), f"<tensor of shape {_shape(key)}>")
        return repr(key)


def _is_cpu_step(value: object) -> bool:
    # the scalar step PyTorch creates on CPU: torch.tensor(0.0, dtype=_get_scalar_dtype())
    return isinstance(value, torch.Tensor) and value.device.type == "cpu" and value.numel() == 1


def _attribute(path: str, name: str) -> str:
    return f"{path}.{name}" if name.isidentifier() and not keyword.iskeyword(name) else f"{path}.__dict__[{name!r}]"


def _member(module: torch.nn.Module, registry: str, name: str, path: str) -> str:
    """A pasteable path to a registered parameter, buffer or submodule: `.fc`, `[0]`, `['a']`."""
    if isinstance(module, (torch.nn.ModuleDict, torch.nn.ParameterDict)):
        return f"{path}[{name!r}]"
    if name.isdigit() and isinstance(module, (torch.nn.Sequential, torch.nn.ModuleList, torch.nn.ParameterList)):
        return f"{path}[{name}]"
    if name.isidentifier() and not keyword.iskeyword(name):
        return f"{path}.{name}"
    return f"{path}.{registry}[{name!r}]"


# ---------------------------------------------------------------------------------------------
# Attaching the report to the error
# ---------------------------------------------------------------------------------------------

# The wordings of PyTorch's device-mismatch errors (TensorIterator, the codegen's common-device
# check, convolution's type check, MPS placeholders, indexing).
_MISMATCH = re.compile(
    r"same device|weight type \(|Placeholder storage has not been allocated on MPS"
    r"|to be on GPU|to have the same device|same device as the indexed tensor|expected self and mask"
)


def is_device_mismatch(error: BaseException) -> bool:
    """Whether `error` is one of PyTorch's errors about tensors on two devices."""
    return isinstance(error, RuntimeError) and _MISMATCH.search(str(error)) is not None


def _add_note(error: BaseException, text: str) -> None:
    if hasattr(error, "add_note"):  # Python 3.11+
        error.add_note(text)
    elif error.args and isinstance(error.args[0], str):
        error.args = (f"{error.args[0]}\n{text}", *error.args[1:])


@contextlib.contextmanager
def annotate(device: torch.device | str, /, **objects: object) -> Iterator[None]:
    """On a device-mismatch error inside the block, add the names of the misplaced tensors to it:

        with audit.annotate(dev, model=model, optimizer=optimizer, batch=batch):
            train_step(...)
    """
    try:
        yield
    except RuntimeError as error:
        if is_device_mismatch(error):
            text = report(device, **objects)
            if text:
                _add_note(error, text)
        raise


# For a pytest hook: objects registered by a test (or a fixture, through its `request`) are audited if
# that test fails with a device mismatch. Held strongly until taken, keyed weakly by the test item.
_registered: weakref.WeakKeyDictionary[Any, list[tuple[torch.device | str, dict[str, object]]]] = (
    weakref.WeakKeyDictionary()
)


def register(node: object, device: torch.device | str, /, **objects: object) -> None:
    """Keep `objects` to audit against `device` if the test behind `node` (a pytest item, or a
    FixtureRequest, whose `.node` is used) fails with a device mismatch; see `take`."""
    _registered.setdefault(getattr(node, "node", node), []).append((device, objects))


def take(node: object) -> str:
    """The report for everything registered on `node`, now (empty when nothing is misplaced), and
    forget it. A pytest hook calls this once per test, after the call phase, failed or not."""
    entries = _registered.pop(getattr(node, "node", node), [])
    return "\n".join(text for device, objects in entries if (text := report(device, **objects)))
