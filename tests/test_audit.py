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
    fc = nn.Linear(3, 2)
    optimizer = sgd(fc.parameters())
    _step(fc, optimizer, CPU)
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


def test_report_lists_one_tensor_a_line() -> None:
    """report() gives a heading and one line per misplaced tensor, and nothing when all is well."""
    dev = emulator.device()
    assert audit.report(dev, x=torch.ones(2, device=dev)) == ""
    assert audit.report(dev, batch={"x": torch.ones(2, 3)}) == (
        "1 tensor not on emulated:0:\n    batch['x'] is on cpu (shape (2, 3))"
    )


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
        "2 tensors not on emulated:0:\n    batch['x'] is on cpu (shape (2,))\n    batch['y'] is on cpu (shape (1,))"
    )
    assert audit.take(request.node) == ""
