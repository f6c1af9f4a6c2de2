"""Name every tensor that is not on the device you meant, by a path you can paste back into Python,
with the one-line change that puts it right; move what can safely be moved.

PyTorch's error says that two devices met, never which tensor was on the wrong one:

    RuntimeError: Expected all tensors to be on the same device, but found at least two devices, cuda:0 and cpu!

After a resume the culprit is usually state that `model.to(device)` never touches: an optimizer's
momentum buffers loaded before the move, a loss weight kept as a plain attribute, a layer kept in a
plain list, a batch key that was not moved. This module walks what you hand it and lists each such tensor:

    >>> from samedevice import audit
    >>> for item in audit.misplaced(dev, model=model, optimizer=optimizer, criterion=criterion, batch=batch):
    ...     print(item, "->", item.fix)
    optimizer.state[model.fc.weight]['momentum_buffer'] is on cpu (shape (2, 3)) -> optimizer_to(optimizer) ...

What it walks, for each keyword `name=obj`:
- a torch.nn.Module (a model, a criterion, an EMA copy: any keyword): parameters, buffers and
  submodules, then the plain attributes of every module (a tensor kept as `self.weight =
  torch.tensor(...)`, which `module.to` does not move), and the lists, tuples, dicts and dataclasses of
  modules or tensors held there (layers stranded in a plain list: `.to` skips them too);
- a torch.optim.Optimizer: every per-parameter state entry at any depth (LBFGS keeps lists), keyed by
  the parameter's path among the other objects passed (`optimizer.state[model.fc.weight]`), else by
  `optimizer.param_groups[g]['params'][i]`; and the tensors in `param_groups` (a tensor `lr`);
- anything else: tensors, and any nesting of mappings (dict, transformers' BatchEncoding and
  ModelOutput), lists, tuples, namedtuples and dataclasses; a module found there is moved as one.
A tensor reachable by two paths is reported once, at the first (objects in the order given, each walked
depth first; a parameter that a module passed holds is named by the module, not the optimizer);
cycles are walked once. The one exemption is PyTorch's own: an optimizer's `step` stays on CPU unless
the optimizer is capturable or fused.

`structure(**objects)` finds, on any device, what will put tensors on two devices or leave them
untrained: layers stranded in plain containers, parameters an optimizer holds that no module passed
has (orphaned: the layer was replaced after the optimizer was built), and parameters that train but
no optimizer passed holds (missing). `repair(device, **objects)` moves what can safely move (modules
by `.to`, optimizer state next to its parameter) and refuses, with the code change to make, the rest.

`annotate(device, **objects)` adds the report to a device-mismatch error raised inside it;
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

__all__ = ["Finding", "Misplaced", "Repair", "annotate", "is_device_mismatch", "misplaced", "nothing_misplaced",
           "register", "repair", "report", "structure", "take"]

OPTIMIZER_TO = ("optimizer_to(optimizer) (`samedevice copy optimizer_to` writes it into your project), "
                "or load the optimizer state after model.to(device)")
SHOWN = 4  # a report names this many tensors of those that share a fix, then counts the rest


@dataclasses.dataclass(frozen=True)
class Misplaced:
    """A tensor that is not on the audited device: where it was found, where it lives, its shape, how
    it is held (`kind`) and the one-line change that puts it right (`fix`)."""

    path: str
    device: torch.device
    shape: tuple[int, ...] | None  # None for a lazy module's uninitialized parameter
    # module (a parameter or buffer: moves with its module), state (optimizer state), attribute (a plain
    # tensor attribute of a module), stranded (in a layer kept in a plain container), param (a parameter
    # only an optimizer holds), param_group (a tensor lr, an optimizer's running sum), batch (anything else)
    kind: str = dataclasses.field(default="", compare=False)
    fix: str = dataclasses.field(default="", compare=False)

    def __str__(self) -> str:
        shape = "" if self.shape is None else f" (shape {self.shape})"
        return f"{self.path} is on {self.device}{shape}"


@dataclasses.dataclass(frozen=True)
class Finding:
    """A structural problem, on any device: `problem` is stranded, orphaned or missing."""

    path: str
    problem: str
    fix: str

    def __str__(self) -> str:
        return f"{self.path} is {self.problem}"


@dataclasses.dataclass(frozen=True)
class Repair:
    """What `repair` did: the tensors it moved, and those it refused (each `.fix` says the code change)."""

    moved: list[Misplaced]
    refused: list[Misplaced]

    def __str__(self) -> str:
        lines = [f"moved {len(self.moved)}, refused {len(self.refused)}"]
        lines += [f"    moved {item.path}" for item in self.moved]
        lines += [f"    refused {item.path}: {item.fix}" for item in self.refused]
        return "\n".join(lines)


def misplaced(device: torch.device | str, /, **objects: object) -> list[Misplaced]:
    """Every tensor reachable from `objects` that is not on `device`, in the order it is first reached."""
    return [item for item, _ in _misplaced(_normalize(torch.device(device)), objects)[0]]


def structure(**objects: object) -> list[Finding]:
    """Layers stranded in plain containers; with a module and an optimizer passed, parameters the
    optimizers hold that no module has (orphaned) and trainable ones no optimizer holds (missing)."""
    walker = _Walker(_names(objects), into_optimizers=True)
    for _ in walker.roots(objects):
        pass
    findings = list(walker.stranded)
    held: set[int] = set()
    for opt_path, optimizer in walker.optimizers:
        for g, group in enumerate(optimizer.param_groups):
            for i, p in enumerate(group["params"]):
                held.add(id(p))
                if walker.module_params and id(p) not in walker.names:
                    findings.append(Finding(
                        f"{opt_path}.param_groups[{g}]['params'][{i}]", "orphaned",
                        "no module passed has this parameter (was a layer replaced or a model reloaded with "
                        "assign=True after the optimizer was built?): build the optimizer last"))
    if walker.optimizers:
        for path, p in walker.module_params.values():
            if p.requires_grad and id(p) not in held:
                findings.append(Finding(path, "missing", "no optimizer passed updates it: build the optimizer after "
                                        "the last layer change, or optimizer.add_param_group({'params': [...]})"))
    return findings


def report(device: torch.device | str, /, **objects: object) -> str:
    """`misplaced` and `structure` as text under a heading each: the tensors that share a fix in one
    group (the first SHOWN named, the rest counted), the fix said once below the group; empty when
    every tensor is on `device` and nothing is stranded, orphaned or missing."""
    found = misplaced(device, **objects)
    lines = []
    if found:
        target = _normalize(torch.device(device))
        lines.append(f"{len(found)} tensor{'s' if len(found) > 1 else ''} not on {target}:")
        groups: dict[str, list[Misplaced]] = {}
        for item in found:
            groups.setdefault(item.fix, []).append(item)
        for fix, items in groups.items():
            lines += [f"    {item}" for item in items[:SHOWN]]
            if len(items) > SHOWN:
                lines.append(f"    ... and {len(items) - SHOWN} more with the same fix (audit.misplaced lists each)")
            lines.append(f"        fix{f' for these {len(items)}' if len(items) > 1 else ''}: {fix}")
    problems = structure(**objects)
    if problems:
        lines.append(f"{len(problems)} structural problem{'s' if len(problems) > 1 else ''}:")
        lines += [f"    {item}\n        fix: {item.fix}" for item in problems]
    return "\n".join(lines)


def repair(device: torch.device | str, /, **objects: object) -> Repair:
    """Move what `misplaced` finds, where that is safe: a module passed (or found in a container passed)
    by `.to(device)`, optimizer state whose parameter is on `device`. Refuse the rest, each with the
    code change to make: a layer in a plain list, a plain tensor attribute, a batch (repair cannot
    rebind your variables), a parameter no module passed holds, a `param_groups` entry, a meta tensor.
    An optimizer whose parameters a move replaced (`.to` may give new Parameter objects) is re-pointed."""
    target = _normalize(torch.device(device))
    found, walker = _misplaced(target, objects)
    moved: list[Misplaced] = []
    refused: list[Misplaced] = []
    anchors: dict[int, tuple[torch.nn.Module, list[Misplaced]]] = {}
    replaced: dict[int, torch.nn.Parameter] = {}
    for item, f in found:
        if item.kind == "module" and item.device.type != "meta":
            anchors.setdefault(id(f.held.anchor), (f.held.anchor, []))[1].append(item)
    for module, items in anchors.values():
        try:
            replaced |= _move_module(module, target, walker.optimizers)
        except RuntimeError as error:  # e.g. swap_tensors refusing a parameter an autograd graph holds
            first = str(error).splitlines()[0]
            refused += [dataclasses.replace(item, fix=f"moving the module failed ({first}): {item.fix}")
                        for item in items]
        else:
            moved += items
    state_moves: dict[int, torch.Tensor] = {}
    for item, f in found:
        param = None if f.held.param is None else replaced.get(id(f.held.param), f.held.param)
        if item.kind == "module" and item.device.type == "meta":
            refused.append(dataclasses.replace(
                item, fix="a meta tensor has no data: module.to_empty(device=device), then load the weights"))
        elif item.kind == "state" and param is not None and _normalize(param.device) == target:
            state_moves[id(f.tensor)] = f.tensor.to(target)
            moved.append(item)
        elif item.kind == "state":
            where = "" if param is None else f" is on {param.device}"
            refused.append(dataclasses.replace(item, fix=f"its parameter{where or ' is gone'}: {item.fix}"))
        elif item.kind != "module":
            refused.append(item)
    if state_moves:
        for _, optimizer in walker.optimizers:
            for key, state in list(optimizer.state.items()):
                optimizer.state[key] = _replace(state, state_moves)
    # a refused tensor may have moved with something else (a batch holding a module's parameter)
    still = {item.path for item in misplaced(target, **objects)}
    moved += [item for item in refused if item.path not in still]
    return Repair(moved, [item for item in refused if item.path in still])


def _misplaced(target: torch.device, objects: Mapping[str, object]) -> tuple[list[tuple[Misplaced, _Found]], _Walker]:
    walker = _Walker(_names(objects), into_optimizers=True)
    found = []
    for f in walker.roots(objects):
        if _normalize(f.tensor.device) != target:
            found.append((Misplaced(f.path, f.tensor.device, _shape(f.tensor), f.held.kind, f.held.fix), f))
    return found, walker


def _names(objects: Mapping[str, object]) -> dict[int, str]:
    """A name for every tensor outside optimizers, so that optimizer state can be keyed by the
    parameter's path (optimizer.state[model.fc.weight]) whatever order the objects come in."""
    return {id(f.tensor): f.path for f in _Walker({}, into_optimizers=False).roots(objects)}


def _move_module(
    module: torch.nn.Module, target: torch.device, optimizers: list[tuple[str, Any]]
) -> dict[int, torch.nn.Parameter]:
    """`module.to(target)`; where that gave new Parameter objects (PyTorch does for some conversions,
    and always under torch.__future__.set_overwrite_module_params_on_conversion(True)), point the
    optimizers at the new ones, state included. Returns {id(old): new}."""
    before = [(sub, name, p) for sub in module.modules() for name, p in sub._parameters.items() if p is not None]
    module.to(target)
    replaced = {id(p): new for sub, name, p in before if (new := sub._parameters[name]) is not p and new is not None}
    for _, optimizer in optimizers:
        for group in optimizer.param_groups:
            group["params"] = [replaced.get(id(p), p) for p in group["params"]]
        for key in [k for k in optimizer.state if id(k) in replaced]:
            optimizer.state[replaced[id(key)]] = optimizer.state.pop(key)
    return replaced


def _replace(obj: Any, new: dict[int, torch.Tensor]) -> Any:
    """`obj` with each tensor whose id is in `new` replaced, in place for dicts and lists (so sharing
    between entries is kept), rebuilt for tuples."""
    if isinstance(obj, torch.Tensor):
        return new.get(id(obj), obj)
    if isinstance(obj, dict):
        for key, value in obj.items():
            obj[key] = _replace(value, new)
    elif isinstance(obj, list):
        obj[:] = [_replace(value, new) for value in obj]
    elif isinstance(obj, tuple):
        values = [_replace(value, new) for value in obj]
        return type(obj)(*values) if hasattr(obj, "_fields") else tuple(values)
    return obj


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


class _Held(NamedTuple):
    """How the object being walked is held, which decides what `repair` may do with its tensors."""

    kind: str  # as Misplaced.kind
    fix: str
    anchor: Any = None  # kind module: the module whose .to(device) moves it
    param: Any = None  # kind state: the parameter the state belongs to


class _Found(NamedTuple):
    path: str
    tensor: torch.Tensor
    held: _Held


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
        self.optimizers: list[tuple[str, Any]] = []
        self.stranded: list[Finding] = []
        self.module_params: dict[int, tuple[str, torch.nn.Parameter]] = {}  # registered in a module passed

    def roots(self, objects: Mapping[str, object]) -> Iterator[_Found]:
        for name, obj in objects.items():
            fix = (f"{name} = {name}.to(device)" if isinstance(obj, torch.Tensor)
                   else f"move it where it is made: {name} = move_to({name}, device), which moves every tensor at "
                        "every level (`samedevice show batch_not_moved` prints it)")
            yield from self.walk(obj, name, _Held("batch", fix))

    def walk(self, obj: object, path: str, held: _Held, step_rule: bool = False) -> Iterator[_Found]:
        if id(obj) in self.seen:
            return
        if isinstance(obj, torch.Tensor):
            self.seen.add(id(obj))
            if held.kind == "module" and isinstance(obj, torch.nn.Parameter):
                self.module_params[id(obj)] = (path, obj)
            yield _Found(path, obj, held)
        elif isinstance(obj, torch.nn.Module):
            self.seen.add(id(obj))
            if held.kind == "batch":  # passed, or found in a container passed: moved as one
                held = _Held("module", f"{path}.to(device)", anchor=obj)
            elif held.kind == "attribute":  # in a plain container attribute of a module
                container = held.anchor
                kind = "nn.ModuleDict" if isinstance(container[1], Mapping) else "nn.ModuleList"
                fix = (f"make {container[0]} an {kind}: .to, .parameters() and state_dict skip a plain "
                       f"{type(container[1]).__name__}")
                held = _Held("stranded", fix)
                self.stranded.append(Finding(path, "stranded", fix))
            yield from self._module(obj, path, held)
        elif isinstance(obj, torch.optim.Optimizer):
            if self.into_optimizers:
                self.seen.add(id(obj))
                self.optimizers.append((path, obj))
                yield from self._optimizer(obj, path)
        elif isinstance(obj, Mapping):
            self.seen.add(id(obj))
            for key, value in list(obj.items()):
                if step_rule and key == "step" and _is_cpu_step(value):
                    continue
                yield from self.walk(value, f"{path}[{self._key(key)}]", held, step_rule)
        elif isinstance(obj, tuple) and hasattr(obj, "_fields"):  # a namedtuple
            self.seen.add(id(obj))
            for field in obj._fields:
                yield from self.walk(getattr(obj, field), f"{path}.{field}", held, step_rule)
        elif isinstance(obj, (list, tuple)):
            self.seen.add(id(obj))
            for i, value in enumerate(obj):
                yield from self.walk(value, f"{path}[{i}]", held, step_rule)
        elif dataclasses.is_dataclass(obj) and not isinstance(obj, type):
            self.seen.add(id(obj))
            for field in dataclasses.fields(obj):
                yield from self.walk(getattr(obj, field.name, None), f"{path}.{field.name}", held, step_rule)

    def _module(self, module: torch.nn.Module, path: str, held: _Held) -> Iterator[_Found]:
        # registered structure first, so a parameter also held in a plain list is named by its
        # registered path (model.fc.weight), as named_parameters() would name it
        for registry in ("_parameters", "_buffers", "_modules"):
            for name, value in getattr(module, registry).items():
                if value is not None:
                    yield from self.walk(value, _member(module, registry, name, path), held)
        for name, value in vars(module).items():
            if name not in _MODULE_INTERNALS:
                attribute = _attribute(path, name)
                inner = held if held.kind == "stranded" else _plain(module, name, attribute, value)
                yield from self.walk(value, attribute, inner)

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
                param: torch.Tensor | None = key
            else:  # state for a tensor no group holds, or a raw id left by load_state_dict
                name, step_rule, param = self._key(key), False, None
            yield from self.walk(state, f"{path}.state[{name}]", _Held("state", OPTIMIZER_TO, param=param), step_rule)
        orphan = _Held("param", "no module passed holds this parameter: pass its module, or build the optimizer "
                                "from the model's final parameters, after model.to(device)")
        setting = _Held("param_group", "optimizer.load_state_dict never moves a param_groups entry (it casts only "
                                       "optimizer.state): a setting of yours, give a float or a tensor made on the "
                                       "device; an optimizer's own running tensor (Prodigy's d), move it to the "
                                       "params' device after each load (samedevice show param_group_tensor)")
        for g, group in enumerate(optimizer.param_groups):
            for entry, value in group.items():
                if entry == "params":  # a parameter a module passed holds is named (and moved) by the module
                    for i, p in enumerate(value):
                        if id(p) not in self.names:
                            yield from self.walk(p, f"{path}.param_groups[{g}]['params'][{i}]", orphan)
                else:
                    yield from self.walk(value, f"{path}.param_groups[{g}][{entry!r}]", setting)

    def _key(self, key: object) -> str:
        if isinstance(key, torch.Tensor):
            return self.names.get(id(key), f"<tensor of shape {_shape(key)}>")
        return repr(key)


def _plain(module: torch.nn.Module, name: str, attribute: str, value: object) -> _Held:
    """How a plain (unregistered) attribute of a module is held: `.to` skips it."""
    if isinstance(value, torch.Tensor):
        fix = f"register it in {type(module).__name__}.__init__: self.register_buffer({name!r}, ...)"
    else:
        fix = (f"{attribute} is a plain {type(value).__name__}, which .to skips: register its tensors as "
               "buffers, or hold them in an nn.ParameterList / nn.ParameterDict")
    return _Held("attribute", fix, anchor=(attribute, value))


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
            _add_note(error, report(device, **objects) or nothing_misplaced(device))
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
    """The report for everything registered on `node`, now, and forget it: empty when nothing was
    registered; `nothing_misplaced` when all of it is in place. A pytest hook calls this once per test,
    after the call phase, failed or not."""
    entries = _registered.pop(getattr(node, "node", node), [])
    text = "\n".join(text for device, objects in entries if (text := report(device, **objects)))
    return text or (nothing_misplaced(entries[0][0]) if entries else "")


def nothing_misplaced(device: torch.device | str) -> str:
    """What to say when a device mismatch was raised but every tensor the audit was given is in place:
    what it cannot see, and the likeliest cause of that."""
    target = _normalize(torch.device(device))
    return (f"every tensor the audit was given is on {target}. It cannot see a tensor made during the failing "
            "call: a factory without device= inside forward (torch.zeros, torch.arange, torch.tensor, "
            "torch.from_numpy) makes it on cpu; `samedevice show factory_in_forward` shows the fix. Else the "
            "tensor is held by an object not passed to the audit.")
