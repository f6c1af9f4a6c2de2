"""samedevice.audit names every misplaced tensor by a path that evaluates back to it: optimizer state,
plain module attributes, modules in plain containers, nested batches, tokenizer outputs."""

from __future__ import annotations

import dataclasses
import io
from typing import Any, NamedTuple

import pytest
import torch
from torch import nn

from samedevice import audit, emulator
from samedevice.audit import Misplaced
from tests.helpers import closure_step

pytestmark = pytest.mark.emulator

SAME = "Expected all tensors to be on the same device"
CPU = torch.device("cpu")


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(3, 4)
        self.blocks = nn.Sequential(nn.Linear(4, 4), nn.ReLU())
        self.heads = nn.ModuleDict({"out": nn.Linear(4, 2)})
        self.register_buffer("scale", torch.ones(2))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.heads["out"](self.blocks(self.fc(x))) * self.scale


def _step(model: nn.Module, optimizer: torch.optim.Optimizer, dev: torch.device) -> None:
    closure_step(model, optimizer, torch.randn(5, 3).to(dev))


def _checkpoint(model: nn.Module, make: Any) -> dict[str, Any]:
    """One step on CPU, saved and loaded back, as a training run writes and a resume reads it."""
    optimizer = make(model.parameters())
    _step(model, optimizer, CPU)
    buf = io.BytesIO()
    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict()}, buf)
    buf.seek(0)
    return torch.load(buf, weights_only=True)


def _resume(model: nn.Module, make: Any, dev: torch.device, *, broken: bool) -> torch.optim.Optimizer:
    ckpt = _checkpoint(model, make)
    model.load_state_dict(ckpt["model"])
    if broken:  # the classic order: optimizer state loaded, then the model moved
        optimizer = make(model.parameters())
        optimizer.load_state_dict(ckpt["optimizer"])
        model.to(dev)
    else:
        model.to(dev)
        optimizer = make(model.parameters())
        optimizer.load_state_dict(ckpt["optimizer"])
    return optimizer


def sgd(params: Any) -> torch.optim.Optimizer:
    return torch.optim.SGD(params, lr=0.1, momentum=0.9)


def _stepped_on_cpu() -> tuple[nn.Linear, torch.optim.Optimizer]:
    fc = nn.Linear(3, 2)
    optimizer = sgd(fc.parameters())
    _step(fc, optimizer, CPU)
    return fc, optimizer


def _assert_pasteable(found: list[Misplaced], **objects: object) -> None:
    for item in found:
        tensor = eval(item.path, {}, dict(objects))
        assert isinstance(tensor, torch.Tensor), item.path
        assert tensor.device == item.device, item.path


# ---- optimizer state ------------------------------------------------------------------------


def test_sgd_state_loaded_before_to_names_every_momentum_buffer() -> None:
    """After the classic wrong resume order, every momentum buffer is named, on CPU."""
    dev = emulator.device()
    fc = nn.Linear(3, 2)
    optimizer = _resume(fc, sgd, dev, broken=True)
    assert audit.misplaced(dev, fc=fc, optimizer=optimizer) == [
        Misplaced("optimizer.state[fc.weight]['momentum_buffer']", CPU, (2, 3)),
        Misplaced("optimizer.state[fc.bias]['momentum_buffer']", CPU, (2,)),
    ]
    with pytest.raises(RuntimeError, match=SAME):  # what the audit explains
        _step(fc, optimizer, dev)


def test_correct_resume_reports_nothing() -> None:
    """Moving the model before building the optimizer and loading its state leaves nothing misplaced."""
    dev = emulator.device()
    fc = nn.Linear(3, 2)
    optimizer = _resume(fc, sgd, dev, broken=False)
    assert audit.misplaced(dev, fc=fc, optimizer=optimizer) == []
    _step(fc, optimizer, dev)
    assert audit.misplaced(dev, fc=fc, optimizer=optimizer) == []


def test_paths_evaluate_to_the_misplaced_tensors() -> None:
    """Every reported path is code that evaluates to the tensor it names, submodules and containers included."""
    dev = emulator.device()
    model = Net()
    optimizer = _resume(model, sgd, dev, broken=True)
    found = audit.misplaced(dev, model=model, optimizer=optimizer)
    assert [m.path for m in found] == [
        f"optimizer.state[model.{name}]['momentum_buffer']"
        for name in ("fc.weight", "fc.bias", "blocks[0].weight", "blocks[0].bias",
                     "heads['out'].weight", "heads['out'].bias")
    ]
    _assert_pasteable(found, model=model, optimizer=optimizer)


def test_parameters_of_no_module_passed_are_named_through_param_groups() -> None:
    """Without the model, a parameter is named by its place in param_groups, and reported itself if misplaced."""
    dev = emulator.device()
    _, optimizer = _stepped_on_cpu()
    found = audit.misplaced(dev, optimizer=optimizer)
    assert [m.path for m in found] == [
        "optimizer.state[optimizer.param_groups[0]['params'][0]]['momentum_buffer']",
        "optimizer.state[optimizer.param_groups[0]['params'][1]]['momentum_buffer']",
        "optimizer.param_groups[0]['params'][0]",
        "optimizer.param_groups[0]['params'][1]",
    ]
    _assert_pasteable(found, optimizer=optimizer)


def test_adam_step_on_cpu_is_not_misplaced() -> None:
    """Adam's `step` stays on CPU by PyTorch's rule, so the audit does not report it."""
    dev = emulator.device()
    fc = nn.Linear(3, 2).to(dev)
    optimizer = torch.optim.Adam(fc.parameters())
    _step(fc, optimizer, dev)
    assert optimizer.state[fc.weight]["step"].device == CPU
    assert audit.misplaced(dev, fc=fc, optimizer=optimizer) == []


def test_capturable_adam_step_on_cpu_is_misplaced() -> None:
    """A capturable Adam keeps `step` on the device, so a CPU `step` is reported."""
    dev = emulator.device()
    fc = nn.Linear(3, 2).to(dev)
    optimizer = torch.optim.Adam(fc.parameters(), capturable=True)
    _step(fc, optimizer, dev)
    assert audit.misplaced(dev, fc=fc, optimizer=optimizer) == []
    optimizer.state[fc.weight]["step"] = optimizer.state[fc.weight]["step"].cpu()
    assert audit.misplaced(dev, fc=fc, optimizer=optimizer) == [
        Misplaced("optimizer.state[fc.weight]['step']", CPU, ()),
    ]


def test_lbfgs_nested_list_state_is_named_by_index() -> None:
    """LBFGS's lists of history tensors are walked: each entry is named by its index."""
    dev = emulator.device()
    model = nn.Linear(3, 2)

    def lbfgs(params: Any) -> torch.optim.Optimizer:
        return torch.optim.LBFGS(params, history_size=3, max_iter=4)

    optimizer = _resume(model, lbfgs, dev, broken=True)
    state = optimizer.state[model.weight]
    found = audit.misplaced(dev, model=model, optimizer=optimizer)
    paths = [m.path for m in found]
    for name in ("old_dirs", "old_stps", "ro"):
        assert len(state[name]) > 0
        for i in range(len(state[name])):
            assert f"optimizer.state[model.weight][{name!r}][{i}]" in paths
    assert "optimizer.state[model.weight]['d']" in paths
    assert "optimizer.state[model.weight]['prev_flat_grad']" in paths
    assert {m.device for m in found} == {CPU}
    _assert_pasteable(found, model=model, optimizer=optimizer)
    fixed = nn.Linear(3, 2)
    assert audit.misplaced(dev, model=fixed, optimizer=_resume(fixed, lbfgs, dev, broken=False)) == []


def test_tensor_lr_in_param_groups_is_walked() -> None:
    """A tensor learning rate in param_groups is reported where it lives."""
    dev = emulator.device()
    fc = nn.Linear(3, 2).to(dev)
    optimizer = torch.optim.SGD(fc.parameters(), lr=torch.tensor(0.1))
    assert audit.misplaced(dev, fc=fc, optimizer=optimizer) == [
        Misplaced("optimizer.param_groups[0]['lr']", CPU, ()),
    ]


# ---- modules --------------------------------------------------------------------------------


class WeightedMSE(nn.Module):
    def __init__(self, weight: torch.Tensor, *, buffer: bool) -> None:
        super().__init__()
        if buffer:
            self.register_buffer("weight", weight)
        else:
            self.weight = weight  # a plain attribute: module.to never moves it

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return ((x - y).pow(2) * self.weight).mean()


def test_plain_tensor_attribute_survives_module_to() -> None:
    """A loss's plain tensor attribute is reported even after criterion.to(dev)."""
    dev = emulator.device()
    criterion = WeightedMSE(torch.tensor([1.0, 2.0]), buffer=False).to(dev)
    assert audit.misplaced(dev, criterion=criterion) == [Misplaced("criterion.weight", CPU, (2,))]


def test_registered_buffer_moves_with_the_module() -> None:
    """A weight registered as a buffer moves with criterion.to(dev) and is not reported."""
    dev = emulator.device()
    criterion = WeightedMSE(torch.tensor([1.0, 2.0]), buffer=True)
    assert audit.misplaced(dev, criterion=criterion) == [Misplaced("criterion.weight", CPU, (2,))]
    assert audit.misplaced(dev, criterion=criterion.to(dev)) == []


def test_modules_and_tensors_in_plain_containers() -> None:
    """Modules in a plain list and tensors in a plain dict, which model.to skips, are reported."""
    dev = emulator.device()
    model = Net()
    model.criteria = [nn.BCEWithLogitsLoss(pos_weight=torch.ones(2)), nn.MSELoss()]
    model.table = {"a": torch.zeros(3), "b": (torch.zeros(1),)}
    model._scale = torch.tensor(2.0)
    model.to(dev)
    found = audit.misplaced(dev, model=model)
    assert [m.path for m in found] == [
        "model.criteria[0].pos_weight", "model.table['a']", "model.table['b'][0]", "model._scale",
    ]
    _assert_pasteable(found, model=model)


def test_lazy_parameters_have_no_shape() -> None:
    """A lazy module's uninitialized parameters are reported with shape None."""
    dev = emulator.device()
    assert audit.misplaced(dev, lazy=nn.LazyLinear(2)) == [
        Misplaced("lazy.weight", CPU, None), Misplaced("lazy.bias", CPU, None),
    ]


# ---- batches --------------------------------------------------------------------------------


class Pair(NamedTuple):
    input_ids: torch.Tensor
    labels: torch.Tensor


@dataclasses.dataclass
class Sample:
    pixels: torch.Tensor
    meta: dict[str, Any]


def test_nested_batch_paths() -> None:
    """Dicts, tuples, lists, namedtuples and dataclasses nest into paths like batch['inputs'][0]."""
    dev = emulator.device()
    on_dev = torch.ones(2, device=dev)
    batch = {
        "inputs": (torch.ones(2), on_dev),
        "labels": [on_dev, {"mask": torch.ones(2, dtype=torch.bool)}],
        "pair": Pair(torch.ones(1, 3, dtype=torch.long), torch.ones(1, device=dev)),
        "sample": Sample(torch.ones(1, 4, 4), {"ids": [torch.arange(3)], "name": "x"}),
    }
    found = audit.misplaced(dev, batch=batch)
    assert found == [
        Misplaced("batch['inputs'][0]", CPU, (2,)),
        Misplaced("batch['labels'][1]['mask']", CPU, (2,)),
        Misplaced("batch['pair'].input_ids", CPU, (1, 3)),
        Misplaced("batch['sample'].pixels", CPU, (1, 4, 4)),
        Misplaced("batch['sample'].meta['ids'][0]", CPU, (3,)),
    ]
    _assert_pasteable(found, batch=batch)
    assert audit.misplaced(dev, pair=Pair(torch.ones(1), on_dev)) == [Misplaced("pair.input_ids", CPU, (1,))]


def test_tokenizer_output_keys() -> None:
    """A BatchEncoding's tensors are named by key; moving only input_ids leaves the rest reported."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"[UNK]": 0, "[PAD]": 1, "the": 2, "device": 3, "moved": 4}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", pad_token="[PAD]")
    enc = tokenizer(["the device moved", "the device"], padding=True, return_tensors="pt")
    dev = emulator.device()
    assert [m.path for m in audit.misplaced(dev, enc=enc)] == [f"enc[{k!r}]" for k in enc]
    assert "attention_mask" in enc
    enc["input_ids"] = enc["input_ids"].to(dev)  # the partial fix
    assert "enc['attention_mask']" in [m.path for m in audit.misplaced(dev, enc=enc)]
    assert "enc['input_ids']" not in [m.path for m in audit.misplaced(dev, enc=enc)]
    assert audit.misplaced(dev, enc=enc.to(dev)) == []


# ---- walking rules --------------------------------------------------------------------------


def test_shared_tensor_reported_once_at_first_path() -> None:
    """A tensor reachable twice is reported once, at the first path in the order of the objects."""
    dev = emulator.device()
    shared = torch.zeros(2)
    fc = nn.Linear(2, 2)
    fc.alias = [fc.weight]  # the registered path still comes first
    found = audit.misplaced(dev, batch={"x": shared}, again=[shared], fc=fc)
    assert [m.path for m in found] == ["batch['x']", "fc.weight", "fc.bias"]


def test_cycles_terminate() -> None:
    """Self-referencing dicts, lists and modules are walked once and do not hang."""
    dev = emulator.device()
    d: dict[str, Any] = {"t": torch.ones(1)}
    d["self"] = d
    loop: list[Any] = [d]
    loop.append(loop)
    model = nn.Linear(1, 1).to(dev)
    model.back = [model, loop]
    found = audit.misplaced(dev, model=model, loop=loop)
    assert found == [Misplaced("model.back[1][0]['t']", CPU, (1,))]


def test_other_accelerator_index_is_misplaced() -> None:
    """A tensor on emulated:1 is reported when auditing against emulated:0, or the index-less 'emulated'."""
    batch = {"a": torch.ones(2, device=emulator.device(0)), "b": torch.ones(2, device=emulator.device(1))}
    expected = [Misplaced("batch['b']", emulator.device(1), (2,))]
    assert audit.misplaced(emulator.device(0), batch=batch) == expected
    assert audit.misplaced("emulated", batch=batch) == expected
    assert audit.misplaced("emulated:1", batch=batch) == [Misplaced("batch['a']", emulator.device(0), (2,))]


def test_cpu_index_is_ignored() -> None:
    """cpu, 'cpu' and cpu:0 are one device."""
    assert audit.misplaced("cpu:0", x=torch.ones(1)) == []
    assert audit.misplaced(torch.device("cpu"), x=torch.ones(1)) == []


# ---- on every device of the run ---------------------------------------------------------------


def test_wrong_resume_order_is_reported_only_off_cpu(device: torch.device) -> None:
    """The wrong resume order leaves CPU state on every accelerator, and nothing on CPU (why CPU CI misses it)."""
    fc = nn.Linear(3, 2)
    optimizer = _resume(fc, sgd, device, broken=True)
    found = audit.misplaced(device, fc=fc, optimizer=optimizer)
    if device.type == "cpu":
        assert found == []
    else:
        assert [m.path for m in found] == [
            "optimizer.state[fc.weight]['momentum_buffer']", "optimizer.state[fc.bias]['momentum_buffer']",
        ]


def test_training_setup_built_on_the_device_is_clean(device: torch.device) -> None:
    """Model, Adam state, loss and batch all built on the device: nothing is reported."""
    model = Net().to(device)
    optimizer = torch.optim.Adam(model.parameters())
    criterion = WeightedMSE(torch.tensor([1.0, 2.0]), buffer=True).to(device)
    batch = {"x": torch.randn(5, 3).to(device), "y": torch.randn(5, 2).to(device)}
    optimizer.zero_grad()
    criterion(model(batch["x"]), batch["y"]).backward()
    optimizer.step()
    assert audit.misplaced(device, model=model, optimizer=optimizer, criterion=criterion, batch=batch) == []


# ---- reporting ------------------------------------------------------------------------------


MOVE_BATCH = ("move it where it is made: batch = move_to(batch, device), which moves every tensor at every level "
              "(`samedevice show batch_not_moved` prints it)")


def test_report_lists_one_tensor_a_line_with_its_fix() -> None:
    """report() gives a heading, a line per misplaced tensor and its fix below, and nothing when all is well."""
    dev = emulator.device()
    assert audit.report(dev, x=torch.ones(2, device=dev)) == ""
    assert audit.report(dev, batch={"x": torch.ones(2, 3)}) == (
        f"1 tensor not on emulated:0:\n    batch['x'] is on cpu (shape (2, 3))\n        fix: {MOVE_BATCH}"
    )


def test_report_groups_the_tensors_that_share_a_fix() -> None:
    """A wrong-order Adam resume leaves every moment on CPU: the report names a few, counts the rest and
    says the fix once, by a command that puts the helper into the user's project."""
    dev = emulator.device()
    model = nn.Sequential(nn.Linear(3, 4), *[nn.Linear(4, 4) for _ in range(4)])
    optimizer = _resume(model, lambda params: torch.optim.Adam(params, lr=0.1), dev, broken=True)
    found = audit.misplaced(dev, model=model, optimizer=optimizer)
    assert len(found) == 20  # exp_avg and exp_avg_sq of ten parameters; `step` stays on CPU by PyTorch's rule
    lines = audit.report(dev, model=model, optimizer=optimizer).splitlines()
    assert lines[0] == "20 tensors not on emulated:0:"
    assert lines[1:5] == [f"    {item}" for item in found[:audit.SHOWN]]
    assert lines[5] == "    ... and 16 more with the same fix (audit.misplaced lists each)"
    assert lines[6] == f"        fix for these 20: {audit.OPTIMIZER_TO}"
    assert len(lines) == 7
    assert "`samedevice copy optimizer_to`" in audit.OPTIMIZER_TO


def test_no_fix_names_a_file_of_this_repository() -> None:
    """A fix names code the user has or can get (`samedevice copy`, `samedevice show`), never a path here."""
    dev = emulator.device()
    fc, optimizer = _stepped_on_cpu()
    with torch.device("meta"):
        meta = nn.Linear(2, 2)
    found = audit.misplaced(dev, fc=fc, optimizer=optimizer, batch={"x": torch.ones(1)}, x=torch.ones(1),
                            meta=meta, model=Stranded())
    assert {item.kind for item in found} >= {"module", "batch", "stranded"}
    for item in found:
        assert "fixes/" not in item.fix, item
        assert "cases/" not in item.fix, item


def test_annotate_says_what_it_cannot_see() -> None:
    """When every tensor passed is in place, the note says the culprit was made during the call, as a
    factory without device= in forward makes it, and names the scenario."""
    dev = emulator.device()
    fc = nn.Linear(3, 3).to(dev)
    with pytest.raises(RuntimeError, match=SAME) as info, audit.annotate(dev, fc=fc):
        fc(torch.ones(2, 3, device=dev)) + torch.arange(3.0)  # the arange is made on cpu, inside the call
    notes = "\n".join(info.value.__notes__)
    assert notes.startswith("every tensor the audit was given is on emulated:0.")
    assert "`samedevice show factory_in_forward`" in notes


def test_annotate_adds_the_audit_to_the_mismatch_error() -> None:
    """A device-mismatch error raised inside annotate() carries the names of the misplaced tensors."""
    dev = emulator.device()
    fc = nn.Linear(3, 2)
    optimizer = _resume(fc, sgd, dev, broken=True)
    with pytest.raises(RuntimeError, match=SAME) as info, audit.annotate(dev, fc=fc, optimizer=optimizer):
        _step(fc, optimizer, dev)
    assert audit.is_device_mismatch(info.value)
    notes = "\n".join(getattr(info.value, "__notes__", [info.value.args[0]]))
    assert "optimizer.state[fc.weight]['momentum_buffer'] is on cpu (shape (2, 3))" in notes


def test_annotate_leaves_other_errors_alone() -> None:
    """Errors that are not device mismatches pass through annotate() unchanged."""
    with pytest.raises(RuntimeError, match="unrelated") as info, audit.annotate("cpu", x=torch.ones(1)):
        raise RuntimeError("unrelated")
    assert not hasattr(info.value, "__notes__")
    assert not audit.is_device_mismatch(info.value)


def test_register_and_take(request: pytest.FixtureRequest) -> None:
    """Objects registered through a test's request are audited when taken, once."""
    dev = emulator.device()
    batch = {"x": torch.ones(2)}
    audit.register(request, dev, batch=batch)
    batch["y"] = torch.ones(1)  # audited when taken, as the test left things
    assert audit.take(request.node) == (
        f"2 tensors not on emulated:0:\n    batch['x'] is on cpu (shape (2,))"
        f"\n    batch['y'] is on cpu (shape (1,))\n        fix for these 2: {MOVE_BATCH}"
    )
    assert audit.take(request.node) == ""


# ---- fixes, structure and repair --------------------------------------------------------------


class Stranded(nn.Module):
    """Layers in a plain list and a plain dict, a plain tensor attribute, and one registered layer."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(2, 2)
        self.blocks = [nn.Linear(2, 2)]
        self.heads = {"cls": nn.Sequential(nn.Linear(2, 2))}
        self.scale = torch.ones(2)


def test_stranded_layers_are_named_with_the_container_to_fix() -> None:
    """A layer in a plain list or dict is reported as stranded; its fix names the container and the nn class."""
    dev = emulator.device()
    model = Stranded().to(dev)
    found = audit.misplaced(dev, model=model)
    assert [(m.path, m.kind) for m in found] == [
        ("model.blocks[0].weight", "stranded"), ("model.blocks[0].bias", "stranded"),
        ("model.heads['cls'][0].weight", "stranded"), ("model.heads['cls'][0].bias", "stranded"),
        ("model.scale", "attribute"),
    ]
    assert found[0].fix.startswith("make model.blocks an nn.ModuleList")
    assert found[2].fix.startswith("make model.heads an nn.ModuleDict")
    assert found[4].fix == "register it in Stranded.__init__: self.register_buffer('scale', ...)"
    _assert_pasteable(found, model=model)


def test_structure_finds_stranded_layers_on_cpu() -> None:
    """On CPU, where nothing is misplaced, structure() still names each stranded layer: what CPU CI can catch."""
    model = Stranded()
    assert audit.misplaced("cpu", model=model) == []
    found = audit.structure(model=model)
    assert [(f.path, f.problem) for f in found] == [("model.blocks[0]", "stranded"), ("model.heads['cls']", "stranded")]
    assert "nn.ModuleList" in found[0].fix
    assert "nn.ModuleDict" in found[1].fix
    assert audit.structure(model=nn.Sequential(nn.Linear(2, 2), nn.ModuleList([nn.Linear(2, 2)]))) == []


def test_structure_finds_orphaned_and_missing_parameters() -> None:
    """A head replaced after the optimizer was built: the old head's parameters are orphaned, the new one's missing."""
    model = Net()
    model.fc.weight.requires_grad_(False)  # frozen: not missing
    optimizer = sgd([p for p in model.parameters() if p.requires_grad])
    model.heads["out"] = nn.Linear(4, 2)
    found = audit.structure(model=model, optimizer=optimizer)
    assert [(f.path, f.problem) for f in found] == [
        ("optimizer.param_groups[0]['params'][3]", "orphaned"), ("optimizer.param_groups[0]['params'][4]", "orphaned"),
        ("model.heads['out'].weight", "missing"), ("model.heads['out'].bias", "missing"),
    ]
    assert "build the optimizer last" in found[0].fix
    assert "add_param_group" in found[2].fix
    assert audit.structure(optimizer=optimizer) == []  # no module passed: nothing to call orphaned
    assert audit.structure(model=model) == []  # no optimizer passed: nothing to call missing
    assert audit.structure(model=model, optimizer=sgd(model.parameters())) == []


def test_modules_passed_by_keyword_are_moved_as_one() -> None:
    """A criterion, or modules in a list, passed by any keyword: their fix is `<keyword>.to(device)`."""
    dev = emulator.device()
    criterion = nn.BCEWithLogitsLoss(pos_weight=torch.ones(2))
    extra = [nn.Linear(1, 1).to(dev), nn.CrossEntropyLoss(weight=torch.ones(2))]
    found = audit.misplaced(dev, criterion=criterion, losses=extra)
    assert [(m.path, m.kind, m.fix) for m in found] == [
        ("criterion.pos_weight", "module", "criterion.to(device)"),
        ("losses[1].weight", "module", "losses[1].to(device)"),
    ]
    result = audit.repair(dev, criterion=criterion, losses=extra)
    assert (result.moved, result.refused) == (found, [])
    assert criterion.pos_weight.device == dev
    assert extra[1].weight.device == dev


def test_parameters_are_named_by_their_module_whatever_the_order() -> None:
    """Passed before the model, the optimizer's parameters are still named (and moved) by the model."""
    dev = emulator.device()
    fc = nn.Linear(3, 2)
    optimizer = sgd(fc.parameters())
    assert [(m.path, m.kind) for m in audit.misplaced(dev, optimizer=optimizer, fc=fc)] == [
        ("fc.weight", "module"), ("fc.bias", "module"),
    ]
    assert [(m.path, m.kind) for m in audit.misplaced(dev, optimizer=optimizer)] == [
        ("optimizer.param_groups[0]['params'][0]", "param"), ("optimizer.param_groups[0]['params'][1]", "param"),
    ]


def test_repair_moves_model_criterion_and_state_and_refuses_code_changes() -> None:
    """repair moves the model, the criterion and the optimizer state; it refuses stranded layers, plain
    attributes, batches and tensor settings, each with the code change to make, and leaves them as they were."""
    dev = emulator.device()
    model = Stranded()
    optimizer = torch.optim.SGD(model.parameters(), lr=torch.tensor(0.1), momentum=0.9)
    model.fc(torch.ones(1, 2)).sum().backward()
    optimizer.step()
    criterion = nn.CrossEntropyLoss(weight=torch.ones(2))
    batch = {"x": torch.ones(1, 2)}
    before = audit.misplaced(dev, model=model, optimizer=optimizer, criterion=criterion, batch=batch)
    result = audit.repair(dev, model=model, optimizer=optimizer, criterion=criterion, batch=batch)
    assert [m.path for m in result.moved] == [
        "model.fc.weight", "model.fc.bias", "criterion.weight",
        "optimizer.state[model.fc.weight]['momentum_buffer']", "optimizer.state[model.fc.bias]['momentum_buffer']",
    ]
    assert [(m.path, m.kind) for m in result.refused] == [
        ("model.blocks[0].weight", "stranded"), ("model.blocks[0].bias", "stranded"),
        ("model.heads['cls'][0].weight", "stranded"), ("model.heads['cls'][0].bias", "stranded"),
        ("model.scale", "attribute"), ("optimizer.param_groups[0]['lr']", "param_group"), ("batch['x']", "batch"),
    ]
    assert all(m.fix for m in result.refused)
    assert sorted(m.path for m in before) == sorted(m.path for m in result.moved + result.refused)
    assert audit.misplaced(dev, model=model, optimizer=optimizer, criterion=criterion, batch=batch) == result.refused
    assert optimizer.state[model.fc.weight]["momentum_buffer"].device == dev
    assert "refused model.scale: register it in Stranded.__init__" in str(result)


def test_repair_refuses_state_whose_parameter_stays_behind() -> None:
    """State of a parameter no module passed holds is refused while that parameter is off the device."""
    dev = emulator.device()
    fc, optimizer = _stepped_on_cpu()
    result = audit.repair(dev, optimizer=optimizer)
    assert result.moved == []
    assert [m.kind for m in result.refused] == ["state", "state", "param", "param"]
    assert result.refused[0].fix.startswith("its parameter is on cpu: optimizer_to(optimizer)")
    fc.to(dev)  # the model moved: now the state can follow its parameters
    assert [m.kind for m in audit.repair(dev, optimizer=optimizer).moved] == ["state", "state"]
    assert audit.misplaced(dev, fc=fc, optimizer=optimizer) == []


def test_repair_repoints_the_optimizer_when_to_gives_new_parameters() -> None:
    """Where module.to gives new Parameter objects (emulated to CPU here; CUDA too under PyTorch's
    overwrite-on-conversion flag), repair points the optimizer and its state at the new ones."""
    dev = emulator.device()
    fc = nn.Linear(3, 2).to(dev)
    optimizer = sgd(fc.parameters())
    _step(fc, optimizer, dev)
    result = audit.repair("cpu", fc=fc, optimizer=optimizer)
    assert [m.path for m in result.refused] == []
    assert optimizer.param_groups[0]["params"] == [fc.weight, fc.bias]
    assert optimizer.param_groups[0]["params"][0] is fc.weight
    assert set(map(id, optimizer.state)) == {id(fc.weight), id(fc.bias)}
    assert audit.misplaced("cpu", fc=fc, optimizer=optimizer) == []
    assert audit.structure(fc=fc, optimizer=optimizer) == []
    _step(fc, optimizer, CPU)


def test_repair_refuses_meta_tensors() -> None:
    """A module on the meta device has no data to move: repair refuses it and says to use to_empty."""
    with torch.device("meta"):
        fc = nn.Linear(2, 2)
    result = audit.repair(emulator.device(), fc=fc)
    assert [m.path for m in result.refused] == ["fc.weight", "fc.bias"]
    assert "to_empty" in result.refused[0].fix


def test_report_lists_structural_problems() -> None:
    """report() adds the structural problems, each with its fix, after the misplaced tensors."""
    text = audit.report("cpu", model=Stranded())
    assert text.splitlines()[0] == "2 structural problems:"
    assert "    model.blocks[0] is stranded" in text.splitlines()
