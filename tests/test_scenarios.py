"""What each scenario teaches beyond its three test families: controls, variants, the articles'
claims, and the copyable optimizer_to helper."""

from __future__ import annotations

import itertools
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import torch.export.passes
import torch.nn.functional as F
from pytest_parametrize_cases import Case, parametrize_cases
from torch import nn

from samedevice import audit, devices, diagnose, harness, orders, registry, tiny
from samedevice.harness import BUILD, LOAD_MODEL, LOAD_OPTIMIZER, TO_DEVICE
from tests.helpers import assert_same_params, closure_step

SAME = "Expected all tensors to be on the same device"
optimizer_to = registry.helper("optimizer_to").optimizer_to


def _resume_and_finish(scenario: str, make_optimizer, device: torch.device, workdir: Path, *, rescue=None):
    case = registry.get(scenario).case()
    path = harness.write_checkpoint(workdir, make_optimizer)
    case.make_optimizer, original = make_optimizer, case.make_optimizer
    try:
        model, optimizer = case.resume(path, device)
    finally:
        case.make_optimizer = original
    if rescue is not None:
        rescue(optimizer, device)
    return harness.finish(model, optimizer, device), optimizer


# ---- sgd_momentum ------------------------------------------------------------------------------


def test_sgd_momentum_zero_keeps_no_buffer(accelerator: torch.device, tmp_path: Path) -> None:
    """With momentum=0 SGD keeps no buffer, so the same wrong order trains fine (002 FAQ 1)."""
    def plain_sgd(params):
        return torch.optim.SGD(params, lr=harness.LR)

    result, optimizer = _resume_and_finish("sgd_momentum", plain_sgd, accelerator, tmp_path)
    assert all("momentum_buffer" not in s or s["momentum_buffer"] is None for s in optimizer.state.values())
    assert_same_params(result, harness.reference(plain_sgd), exact=False)


def test_sgd_momentum_rescue_with_optimizer_to(accelerator: torch.device, tmp_path: Path) -> None:
    """The 002 article's rescue for an already-loaded optimizer, as optimizer_to, fixes the wrong order."""
    case = registry.get("sgd_momentum").case()
    result, _ = _resume_and_finish("sgd_momentum", case.make_optimizer, accelerator, tmp_path,
                                   rescue=lambda opt, dev: optimizer_to(opt))
    assert_same_params(result, case.reference(), exact=False)


@parametrize_cases(
    Case("foreach", flags={}, message=f"{SAME}, but found at least two devices"),
    Case("for_loop", flags={"foreach": False}, message=f"{SAME}, but found at least two devices"),
    Case("fused", flags={"fused": True}, message=f"{SAME}, but got momentum_buffer_list is on cpu"),
)
def test_sgd_momentum_message_by_implementation(flags: dict, message: str, accelerator: torch.device,
                                                tmp_path: Path) -> None:
    """Which error the pitfall order gives depends on SGD's implementation, not on the bug."""
    from torch.utils._foreach_utils import _get_fused_kernels_supported_devices

    if flags.get("fused") and accelerator.type not in _get_fused_kernels_supported_devices():
        pytest.skip(f"PyTorch's fused SGD does not support {accelerator.type}")

    def make(params):
        return torch.optim.SGD(params, lr=harness.LR, momentum=0.9, **flags)

    with pytest.raises(RuntimeError, match=message):
        _resume_and_finish("sgd_momentum", make, accelerator, tmp_path)


# ---- adam_exp_avg ------------------------------------------------------------------------------

ADAMS = parametrize_cases(*(
    Case(f"{cls.__name__}-amsgrad_{amsgrad}", cls=cls, amsgrad=amsgrad)
    for cls, amsgrad in itertools.product((torch.optim.Adam, torch.optim.AdamW), (False, True))
))


@ADAMS
def test_adam_exp_avg_broken_order_raises(cls, amsgrad: bool, accelerator: torch.device, tmp_path: Path) -> None:
    """Adam and AdamW, with and without amsgrad, raise after the pitfall order."""
    def make(params):
        return cls(params, lr=harness.LR, amsgrad=amsgrad)

    with pytest.raises(RuntimeError, match=SAME):
        _resume_and_finish("adam_exp_avg", make, accelerator, tmp_path)


@parametrize_cases(
    Case("default", flags={}, step_on_device=False),
    Case("capturable", flags={"capturable": True}, step_on_device=True),
    Case("fused", flags={"fused": True}, step_on_device=True),
)
def test_adam_exp_avg_step_stays_on_cpu(flags: dict, step_on_device: bool, accelerator: torch.device,
                                        tmp_path: Path) -> None:
    """After a correct resume, step is on CPU unless the optimizer is capturable or fused; optimizer_to agrees."""
    def make(params):
        return torch.optim.Adam(params, lr=harness.LR, **flags)

    from torch.optim.optimizer import _get_capturable_supported_devices
    from torch.utils._foreach_utils import _get_fused_kernels_supported_devices

    supported = {"fused": _get_fused_kernels_supported_devices(), "capturable": _get_capturable_supported_devices()}
    for flag in flags:  # PyTorch's own lists of devices for each implementation
        if accelerator.type not in supported[flag]:
            pytest.skip(f"PyTorch's Adam({flag}=True) does not support {accelerator.type}")
    model = harness.new_model().to(accelerator)
    optimizer = make(model.parameters())
    harness.train(model, optimizer, harness.batches()[:2], accelerator)
    torch.save(optimizer.state_dict(), tmp_path / "opt.pt")
    saved = torch.load(tmp_path / "opt.pt", map_location="cpu", weights_only=True)  # as a CPU host reads it
    optimizer = make(model.parameters())
    optimizer.load_state_dict(saved)
    expected = accelerator.type if step_on_device else "cpu"
    before = {id(p): {k: v.device for k, v in s.items()} for p, s in optimizer.state.items()}
    for state in optimizer.state.values():
        assert state["step"].device.type == expected
        assert state["exp_avg"].device.type == accelerator.type
        assert state["exp_avg_sq"].device.type == accelerator.type
    optimizer_to(optimizer)
    assert {id(p): {k: v.device for k, v in s.items()} for p, s in optimizer.state.items()} == before


def test_adam_exp_avg_article_rescue_loop_moves_step(accelerator: torch.device, tmp_path: Path) -> None:
    """The 002 article's loop moves step to the device too; training still matches the CPU run."""
    case = registry.get("adam_exp_avg").case()

    def article_loop(optimizer, device):
        for p_state in optimizer.state.values():
            for k, v in p_state.items():
                if torch.is_tensor(v):
                    p_state[k] = v.to(device)

    result, optimizer = _resume_and_finish("adam_exp_avg", case.make_optimizer, accelerator, tmp_path,
                                           rescue=article_loop)
    assert {s["step"].device.type for s in optimizer.state.values()} == {accelerator.type}
    assert_same_params(result, case.reference(), exact=False)


# ---- wrong_load_order ----------------------------------------------------------------------------

SHORT = {BUILD: "build", LOAD_MODEL: "model", LOAD_OPTIMIZER: "opt", TO_DEVICE: "to"}
ORDER_CASES = parametrize_cases(*(
    Case(f"{'-'.join(SHORT[step] for step in order)}{'' if LOAD_OPTIMIZER in order else '-fresh'}-{name.split('(')[0]}",
         order=order, optimizer=name)
    for order in orders.RESUME_ORDERS + orders.FRESH_ORDERS
    for name in orders.OPTIMIZERS
))


@ORDER_CASES
def test_wrong_load_order_table(order: tuple[str, ...], optimizer: str, accelerator: torch.device,
                                tmp_path: Path) -> None:
    """Each order of the resume steps raises on an accelerator exactly when the rule predicts it."""
    _, eager = orders.OPTIMIZERS[optimizer]
    error = orders.observe(order, optimizer, accelerator, tmp_path)
    if orders.predicted_to_raise(order, eager):
        assert error is not None
        assert SAME in error
    else:
        assert error is None


def test_wrong_load_order_on_cpu(tmp_path: Path) -> None:
    """On CPU no order of the resume steps fails."""
    for i, (order, name) in enumerate(itertools.product(orders.RESUME_ORDERS + orders.FRESH_ORDERS, orders.OPTIMIZERS)):
        (tmp_path / str(i)).mkdir()
        assert orders.observe(order, name, torch.device("cpu"), tmp_path / str(i)) is None


# ---- bce_pos_weight ----------------------------------------------------------------------------


def test_bce_pos_weight_criterion_to_fixes_it(accelerator: torch.device) -> None:
    """criterion.to(device) moves pos_weight (a buffer): the second fix matches the CPU reference."""
    def train(device: torch.device) -> dict[str, torch.Tensor]:
        model = harness.new_model().to(device)
        criterion = nn.BCEWithLogitsLoss(pos_weight=torch.tensor([3.0, 3.0])).to(device)
        harness.train(model, harness.sgd(model.parameters()), harness.binary_batches(), device, criterion)
        return harness.cpu_state(model)

    assert_same_params(train(accelerator), train(torch.device("cpu")), exact=False)


def test_bce_pos_weight_zero_dim_is_a_cpu_scalar(accelerator: torch.device) -> None:
    """A 0-dim CPU pos_weight passes as a CPU scalar; the 000 article's 1-element 1-D one raises."""
    logits, target = torch.zeros(4, 2, device=accelerator), torch.ones(4, 2, device=accelerator)
    loss = nn.BCEWithLogitsLoss(pos_weight=torch.tensor(3.0))(logits, target)
    assert loss.device == accelerator
    with pytest.raises(RuntimeError, match=SAME):
        nn.BCEWithLogitsLoss(pos_weight=torch.Tensor([3]))(logits, target)


# ---- custom_loss_weight --------------------------------------------------------------------------


def test_custom_loss_weight_list_of_criteria(accelerator: torch.device, tmp_path: Path) -> None:
    """Criteria in a plain list are skipped by .to and raise; in an nn.ModuleList they train right."""
    scenario = registry.get("custom_loss_weight")
    with pytest.raises(RuntimeError, match=SAME):
        scenario.case().run_list_of_criteria(accelerator, tmp_path)
    expected = scenario.fix().run_list_of_criteria(torch.device("cpu"), tmp_path)
    assert_same_params(scenario.fix().run_list_of_criteria(accelerator, tmp_path), expected, exact=False)


# ---- tokenizer_outputs ---------------------------------------------------------------------------


def test_tokenizer_outputs_partial_fixes(accelerator: torch.device) -> None:
    """Moving only input_ids: fine for a mask (transformers moves it), raises with token_type_ids,
    and without the mask gives silently different logits for padded rows."""
    prompts = registry.get("tokenizer_outputs").case().PROMPTS
    tokenizer, model = tiny.tokenizer(), tiny.causal_lm().to(accelerator)
    enc = tokenizer(prompts, return_tensors="pt", padding=True)
    with torch.no_grad():
        full = model(**enc.to(accelerator)).logits.cpu()
        enc = tokenizer(prompts, return_tensors="pt", padding=True)
        mask_on_cpu = model(input_ids=enc["input_ids"].to(accelerator), attention_mask=enc["attention_mask"])
        torch.testing.assert_close(mask_on_cpu.logits.cpu(), full)
        ids_only = model(enc["input_ids"].to(accelerator)).logits.cpu()
        torch.testing.assert_close(ids_only[0], full[0])  # the longest prompt has no padding
        assert not torch.allclose(ids_only[1], full[1])  # the padded one attends to its padding

        bert_tokenizer, bert = tiny.tokenizer(token_type_ids=True), tiny.encoder().to(accelerator)
        enc = bert_tokenizer(prompts, return_tensors="pt", padding=True)
        with pytest.raises(RuntimeError, match=SAME):
            bert(**{**enc, "input_ids": enc["input_ids"].to(accelerator)})


# ---- mps_device_pick -----------------------------------------------------------------------------

BACKENDS = ("cuda", "mps", "xpu", torch._C._get_privateuse1_backend_name())  # "emulated" unless taken


@parametrize_cases(*(
    Case("+".join(combo) or "none", available=set(combo))
    for r in range(len(BACKENDS) + 1) for combo in itertools.combinations(BACKENDS, r)
))
def test_mps_device_pick_choices(available: set[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """The fixed picker takes CUDA, then MPS, then XPU, then the out-of-tree backend, then CPU;
    the broken batch picker knows only CUDA."""
    monkeypatch.delenv("PICK_DEVICE", raising=False)
    scenario = registry.get("mps_device_pick")
    expected = next((torch.device(k) for k in BACKENDS if k in available), torch.device("cpu"))
    probe = available.__contains__
    assert scenario.fix().pick_device(probe) == expected
    assert scenario.fix().batch_device(probe) == expected
    assert scenario.case().batch_device(probe) == torch.device("cuda" if "cuda" in available else "cpu")


def test_mps_device_pick_override_and_accelerator(monkeypatch: pytest.MonkeyPatch) -> None:
    """PICK_DEVICE overrides the picker; without a probe it takes torch.accelerator's answer, or CPU."""
    pick = registry.get("mps_device_pick").fix().pick_device
    monkeypatch.setenv("PICK_DEVICE", "cpu")
    assert pick(lambda kind: True) == torch.device("cpu")
    monkeypatch.delenv("PICK_DEVICE")
    monkeypatch.setattr(torch.accelerator, "current_accelerator", lambda: torch.device("mps"))
    assert pick() == torch.device("mps")
    monkeypatch.setattr(torch.accelerator, "current_accelerator", lambda: None)
    assert pick() == torch.device("cpu")


# ---- batch_not_moved -----------------------------------------------------------------------------


def test_batch_not_moved_top_level_is_not_enough(accelerator: torch.device) -> None:
    """Moving the batch's top-level tensors leaves the nested ones on CPU, and the forward raises."""
    case = registry.get("batch_not_moved").case()
    batch = next(iter(torch.utils.data.DataLoader(case.NestedPairs(), batch_size=4)))
    top_level = {k: v.to(accelerator) if torch.is_tensor(v) else v for k, v in batch.items()}
    model = case.TwoInputNet().to(accelerator)
    with pytest.raises(RuntimeError, match=SAME):
        model(top_level["inputs"])
    moved = registry.get("batch_not_moved").fix().move_to(batch, accelerator)
    assert model(moved["inputs"]).device == accelerator


# ---- model_not_moved -----------------------------------------------------------------------------


@pytest.mark.parametrize(("layer", "inputs", "wording"), [
    (lambda: nn.Linear(4, 2), lambda: torch.randn(3, 4),
     r"but got mat1 is on {dev}, different from other tensors on cpu \(when checking argument in method "
     r"wrapper_{KEY}_addmm\)"),
    (lambda: nn.Embedding(10, 4), lambda: torch.tensor([[1, 2]]),
     r"but got index is on {dev}, different from other tensors on cpu \(when checking argument in method "
     r"wrapper_{KEY}__index_select\)"),
    (lambda: nn.Conv2d(1, 2, 3), lambda: torch.randn(1, 1, 5, 5),
     r"Input type \(torch\.{kind}\.FloatTensor\) and weight type \(torch\.FloatTensor\) should be the same"),
], ids=["linear", "embedding", "conv"])
def test_model_not_moved_first_layer_wordings(accelerator: torch.device, layer: Any, inputs: Any, wording: str) -> None:
    """A model left on CPU fed a batch on the device raises at its first layer, in the wording of that
    layer's check (the page's table, CUDA's with cuda:0); the diagnosis names model_not_moved; the audit
    names the parameters."""
    model, x = layer(), inputs().to(accelerator)
    with pytest.raises(RuntimeError) as info:
        model(x)
    if accelerator.type in ("emulated", "cuda"):
        pattern = wording.format(dev=re.escape(str(accelerator)), KEY=accelerator.type.upper(), kind=accelerator.type)
        assert re.search(pattern, str(info.value)), str(info.value)
    result = diagnose.diagnose(f"RuntimeError: {info.value}")
    assert result.matches[0].slug == "model_not_moved", result
    assert {m.path for m in audit.misplaced(accelerator, model=model)} == {f"model.{n}" for n, _ in
                                                                           model.named_parameters()}


# ---- optimizer_to --------------------------------------------------------------------------------


def _stepped(make, device: torch.device) -> tuple[nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(0)
    model = nn.Linear(4, 3)
    optimizer = make(model.parameters())
    closure_step(model, optimizer, torch.randn(5, 4))
    model.to(device)
    return model, optimizer


def test_optimizer_to_lbfgs_nested_state(accelerator: torch.device) -> None:
    """optimizer_to moves LBFGS's lists of tensors, keeping dtypes and values."""
    model, optimizer = _stepped(lambda p: torch.optim.LBFGS(p, history_size=3, max_iter=4), accelerator)
    state = optimizer.state[model.weight]
    before = {k: [t.clone() for t in v] if isinstance(v, list) else v for k, v in state.items()}
    assert optimizer_to(optimizer) is optimizer
    for key, value in state.items():
        for old, new in zip(before[key] if isinstance(value, list) else [before[key]],
                            value if isinstance(value, list) else [value]):
            if torch.is_tensor(new):
                assert new.device.type == accelerator.type, key
                assert new.dtype == old.dtype
                assert torch.equal(new.cpu(), old.cpu())


def test_optimizer_to_keeps_sharing_and_is_idempotent(accelerator: torch.device) -> None:
    """A tensor shared by two state entries stays shared; a second call changes nothing."""
    model, optimizer = _stepped(lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9), accelerator)
    shared = optimizer.state[model.weight]["momentum_buffer"]
    optimizer.state[model.weight]["alias"] = shared
    optimizer_to(optimizer)
    state = optimizer.state[model.weight]
    assert state["alias"] is state["momentum_buffer"]
    assert state["momentum_buffer"].device.type == accelerator.type
    first = {k: v for k, v in state.items()}
    optimizer_to(optimizer)
    assert all(state[k] is first[k] for k in first)


def test_optimizer_to_explicit_device_and_custom_state(accelerator: torch.device) -> None:
    """With a device argument everything goes there; custom state keys and non-tensors are handled."""
    model, optimizer = _stepped(lambda p: torch.optim.Adam(p, lr=0.1), accelerator)
    optimizer_to(optimizer)
    optimizer.state[model.weight]["history"] = {"norms": (torch.ones(2), 3.0), "note": "kept"}
    optimizer_to(optimizer, "cpu")
    state = optimizer.state[model.weight]
    assert state["exp_avg"].device.type == "cpu"
    assert state["history"]["norms"][0].device.type == "cpu"
    assert state["history"]["norms"][1] == 3.0
    assert state["history"]["note"] == "kept"
    optimizer_to(optimizer)
    state = optimizer.state[model.weight]
    assert state["exp_avg"].device == model.weight.device
    assert state["history"]["norms"][0].device == model.weight.device
    assert state["step"].device.type == "cpu"


class SignMomentum(torch.optim.Optimizer):
    """A custom optimizer keeping its own state layout: a tensor, a nested dict, a list, a number."""

    def __init__(self, params, lr: float = 0.01) -> None:
        super().__init__(params, {"lr": lr})

    @torch.no_grad()
    def step(self, closure=None):  # type: ignore[override]
        if closure is not None:
            with torch.enable_grad():
                closure()
        for group in self.param_groups:
            for p in group["params"]:
                state = self.state[p]
                if not state:
                    state["buf"] = torch.zeros_like(p)
                    state["stats"] = {"seen": torch.zeros((), device=p.device), "history": [torch.zeros_like(p)]}
                    state["count"] = 0
                state["buf"].mul_(0.9).add_(p.grad.sign())
                state["stats"]["seen"].add_(1)
                state["stats"]["history"][0].copy_(state["buf"])
                state["count"] += 1
                p.add_(state["buf"], alpha=-group["lr"])


def test_optimizer_to_custom_optimizer(accelerator: torch.device) -> None:
    """optimizer_to moves a custom optimizer's own state layout, nested entries included."""
    model, optimizer = _stepped(lambda p: SignMomentum(p), accelerator)
    model(torch.ones(1, 4, device=accelerator)).sum().backward()
    with pytest.raises(RuntimeError, match=SAME):
        optimizer.step()
    optimizer_to(optimizer)
    state = optimizer.state[model.weight]
    assert {state["buf"].device.type, state["stats"]["seen"].device.type,
            state["stats"]["history"][0].device.type} == {accelerator.type}
    assert state["count"] == 1
    optimizer.step()
    assert state["count"] == 2


# ---- factory_in_forward --------------------------------------------------------------------------


@parametrize_cases(
    Case("arange", make=lambda h: h + torch.arange(h.shape[1]), message=f"{SAME}, but found at least two devices"),
    Case("ones", make=lambda h: h * torch.ones(h.shape[1]), message=f"{SAME}, but found at least two devices"),
    Case("from_numpy_mask", make=lambda h: h.masked_fill(torch.from_numpy(np.eye(2, 16, dtype=bool)), 0.0),
         message="expected self and mask to be on the same device, but got mask on cpu and self on "),
    Case("cat_zeros", make=lambda h: torch.cat([h, torch.zeros(2, 1)], dim=1),
         message=f"{SAME}, but got tensors is on cpu, different from other tensors on .* "
                 r"\(when checking argument in method wrapper_\w+_cat\)"),
)
def test_factory_in_forward_messages(make, message: str, accelerator: torch.device) -> None:
    """Each factory left on CPU inside forward raises on an accelerator, each with its own wording."""
    h = torch.ones(2, 16, device=accelerator)
    with pytest.raises(RuntimeError, match=message):
        make(h)
    assert make(h.cpu()).device.type == "cpu"


class GRUNet(nn.Module):
    def __init__(self, *, hidden_from_input: bool) -> None:
        super().__init__()
        self.rnn = nn.GRU(3, 4, batch_first=True)
        self.hidden_from_input = hidden_from_input

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h0 = x.new_zeros(1, x.shape[0], 4) if self.hidden_from_input else torch.zeros(1, x.shape[0], 4)
        return self.rnn(x, h0)[0]


def test_factory_in_forward_rnn_initial_hidden_state(accelerator: torch.device) -> None:
    """An RNN's h0 made with torch.zeros raises RNN's own message; x.new_zeros puts it on x's device."""
    x = torch.randn(2, 5, 3)
    broken, fixed = GRUNet(hidden_from_input=False), GRUNet(hidden_from_input=True)
    fixed.load_state_dict(broken.state_dict())
    with torch.no_grad():  # no graph holds the weights: the emulator's .to swaps them in place
        expected = broken(x)  # on CPU the broken model runs
    with pytest.raises(RuntimeError, match=rf"Input and hidden tensors are not at the same device, "
                                           rf"found input tensor at {accelerator} and hidden tensor at cpu"):
        broken.to(accelerator)(x.to(accelerator))
    torch.testing.assert_close(fixed.to(accelerator)(x.to(accelerator)).cpu(), expected)


def test_factory_in_forward_new_zeros_keeps_dtype(accelerator: torch.device) -> None:
    """x.new_zeros takes x's dtype as well as its device; torch.zeros(..., device=x.device) takes the default dtype."""
    x = torch.ones(2, 3, dtype=torch.float64, device=accelerator)
    assert (x.new_zeros(3).device, x.new_zeros(3).dtype) == (x.device, torch.float64)
    assert torch.zeros(3, device=x.device).dtype == torch.float32


def test_factory_in_forward_mask_buffer_moves_and_stays_out_of_checkpoints(accelerator: torch.device) -> None:
    """The fixed model's mask is a non-persistent buffer: .to moves it, state_dict leaves it out."""
    model = registry.get("factory_in_forward").fix().PositionNet()
    assert "keep_out" not in model.state_dict()
    assert model.to(accelerator).keep_out.device == accelerator


# ---- plain_list_layers ---------------------------------------------------------------------------


def test_plain_list_layers_never_train_on_cpu(tmp_path: Path) -> None:
    """On CPU the listed layers run but never train, and neither parameters() nor state_dict has them."""
    case = registry.get("plain_list_layers").case()
    model = case.BlockNet()
    before = [block.weight.detach().clone() for block in model.blocks]
    assert len(list(model.parameters())) == 4  # fc1 and fc2 only
    harness.train(model, harness.sgd(model.parameters()), harness.batches(), torch.device("cpu"))
    assert all(torch.equal(block.weight, w) for block, w in zip(model.blocks, before))
    assert not any(key.startswith("blocks") for key in model.state_dict())
    fixed = registry.get("plain_list_layers").fix().run(torch.device("cpu"), tmp_path)
    assert {"blocks.0.weight", "blocks.1.bias"} <= fixed.keys()


class HeadsNet(nn.Module):
    def __init__(self, *, registered: bool) -> None:
        super().__init__()
        torch.manual_seed(0)
        heads = {"left": nn.Linear(3, 2), "right": nn.Linear(3, 2)}
        self.heads = nn.ModuleDict(heads) if registered else heads

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.heads["left"](x) + self.heads["right"](x)


def test_plain_list_layers_plain_dict(accelerator: torch.device) -> None:
    """Layers in a plain dict are skipped by .to like a plain list's; nn.ModuleDict moves them."""
    x = torch.randn(4, 3)
    with pytest.raises(RuntimeError, match=rf"{SAME}, but got mat1 is on {accelerator}, different from other "
                                           r"tensors on cpu \(when checking argument in method wrapper_\w+_addmm\)"):
        HeadsNet(registered=False).to(accelerator)(x.to(accelerator))
    with torch.no_grad():
        expected = HeadsNet(registered=True)(x)
        moved = HeadsNet(registered=True).to(accelerator)(x.to(accelerator))
    torch.testing.assert_close(moved.cpu(), expected)


def test_plain_list_layers_convolution_message(accelerator: torch.device) -> None:
    """A convolution left on CPU by a plain list raises convolution's own type check instead."""
    convs = [nn.Conv1d(2, 2, 1)]
    with pytest.raises(RuntimeError, match=r"Input type \(.*\) and weight type \(torch\.FloatTensor\) should be"):
        convs[0](torch.ones(1, 2, 3, device=accelerator))


def test_plain_list_layers_audit_names_the_stranded_layers(device: torch.device) -> None:
    """The audit names the listed layers on any device; repair refuses them with the ModuleList change."""
    model = registry.get("plain_list_layers").case().BlockNet().to(device)
    assert [(f.path, f.problem) for f in audit.structure(model=model)] == [
        ("model.blocks[0]", "stranded"), ("model.blocks[1]", "stranded"),
    ]
    assert audit.structure(model=registry.get("plain_list_layers").fix().BlockNet()) == []
    result = audit.repair(device, model=model)
    if device.type == "cpu":
        assert result.refused == []
    else:
        paths = [f"model.blocks[{i}].{n}" for i in (0, 1) for n in ("weight", "bias")]
        assert [m.path for m in result.refused] == paths
        assert all(m.fix.startswith("make model.blocks an nn.ModuleList") for m in result.refused)


# ---- plain_tensor_attribute ----------------------------------------------------------------------


def test_plain_tensor_attribute_is_neither_moved_nor_saved(accelerator: torch.device) -> None:
    """A plain tensor attribute stays on CPU through model.to and is not in state_dict; audit.misplaced names it as an
    attribute. The fix's non-persistent buffer moves with .to and stays out of state_dict."""
    case, fix = (getattr(registry.get("plain_tensor_attribute"), kind)() for kind in ("case", "fix"))
    broken = case.ScaledNet().to(accelerator)
    assert broken.scale.device == torch.device("cpu")
    assert "scale" not in broken.state_dict()
    found = audit.misplaced(accelerator, model=broken)
    assert [(item.path, item.kind) for item in found] == [("model.scale", "attribute")]
    fixed = fix.ScaledNet().to(accelerator)
    assert fixed.scale.device.type == accelerator.type
    assert "scale" not in fixed.state_dict()


def test_plain_tensor_attribute_a_persistent_buffer_breaks_old_checkpoints() -> None:
    """A persistent buffer is a new key of state_dict: a strict load of a checkpoint saved before the change fails
    with "Missing key(s)"; the non-persistent buffer of the fix loads it, and no load writes it."""
    case, fix = (getattr(registry.get("plain_tensor_attribute"), kind)() for kind in ("case", "fix"))
    old = case.ScaledNet().state_dict()

    class Persistent(case.ScaledNet):
        def __init__(self) -> None:
            super().__init__()
            scale = self.scale
            del self.scale
            self.register_buffer("scale", scale)  # persistent, the default

    with pytest.raises(RuntimeError, match=r'Missing key\(s\) in state_dict: "scale"'):
        Persistent().load_state_dict(old)
    fixed = fix.ScaledNet()
    fixed.load_state_dict(old)  # strict, as by default
    fixed.scale.zero_()
    fixed.load_state_dict(old | {"scale": torch.ones(16)}, strict=False)  # even a file that has one
    assert not fixed.scale.any()  # a non-persistent buffer: no load writes it


# ---- loss_class_weights --------------------------------------------------------------------------

NAMED = SAME + r", but got {} is on cpu, different from other tensors on {} " \
        r"\(when checking argument in method wrapper_\w+_nll_loss_forward\)"
CE, NLL = nn.CrossEntropyLoss, nn.NLLLoss


@parametrize_cases(
    # names: the argument the message names; None: the two-devices message, which names none
    Case("ce-weight", loss=CE, flags={}, weight="cpu", target="index", names="weight"),
    Case("ce-targets", loss=CE, flags={}, weight="device", target="index_cpu", names="target"),
    Case("ce-both", loss=CE, flags={}, weight="cpu", target="index_cpu", names="target"),
    Case("ce-label_smoothing-weight", loss=CE, flags={"label_smoothing": 0.1}, weight="cpu", target="index",
         names="weight"),
    Case("nll-weight", loss=NLL, flags={}, weight="cpu", target="index", names="weight"),
    Case("nll-targets", loss=NLL, flags={}, weight="device", target="index_cpu", names="target"),
    Case("ce-probabilities-weight", loss=CE, flags={}, weight="cpu", target="probs", names=None),
    Case("ce-probabilities-targets", loss=CE, flags={}, weight="device", target="probs_cpu", names=None),
)
def test_loss_class_weights_messages(loss, flags: dict, weight: str, target: str, names: str | None,
                                     accelerator: torch.device) -> None:
    """The message names the target when it is on CPU, else the weight; probability targets take
    another path, whose message names no argument."""
    logits = torch.randn(4, 2, device=accelerator).log_softmax(dim=1)
    y = {"index": torch.tensor([0, 1, 1, 0]), "probs": torch.full((4, 2), 0.5)}[target.removesuffix("_cpu")]
    y = y if target.endswith("_cpu") else y.to(accelerator)
    w = torch.tensor([1.0, 3.0], device=accelerator if weight == "device" else "cpu")
    pattern = f"{SAME}, but found at least two devices, {accelerator} and cpu!" if names is None else \
        NAMED.format(names, accelerator)
    with pytest.raises(RuntimeError, match=pattern):
        loss(weight=w, **flags)(logits, y)


def test_loss_class_weights_audit_and_repair(accelerator: torch.device) -> None:
    """The audit names the criterion's weight, fix `criterion.to(device)`; repair moves it and the loss runs."""
    criterion = registry.get("loss_class_weights").case().make_criterion(accelerator)
    [item] = audit.misplaced(accelerator, criterion=criterion)
    assert (item.path, item.kind, item.fix) == ("criterion.weight", "module", "criterion.to(device)")
    assert [m.path for m in audit.repair(accelerator, criterion=criterion).moved] == ["criterion.weight"]
    loss = criterion(torch.zeros(4, 2, device=accelerator), torch.tensor([0, 1, 1, 0], device=accelerator))
    assert loss.device == accelerator


# ---- cpu_lookup_table ----------------------------------------------------------------------------

TABLE = torch.linspace(1.0, 0.1, 10)


@parametrize_cases(
    Case("index-device-timesteps", look_up=lambda t: TABLE[t], on_device=True,
         message=r"indices should be either on cpu or on the same device as the indexed tensor \(cpu\)"),
    Case("gather-device-timesteps", look_up=lambda t: TABLE.gather(-1, t), on_device=True,
         message=SAME + r", but got index is on {}, different from other tensors on cpu "
                        r"\(when checking argument in method wrapper_\w+_gather\)"),
    Case("index-cpu-timesteps", look_up=lambda t: TABLE[t], on_device=False,
         message=SAME + ", but found at least two devices, {} and cpu!"),
)
def test_cpu_lookup_table_messages(look_up, on_device: bool, message: str, accelerator: torch.device) -> None:
    """Device timesteps fail at the lookup itself; CPU timesteps succeed there and fail in the next product."""
    t = torch.tensor([1, 5, 9])
    x = torch.ones(3, device=accelerator)
    with pytest.raises(RuntimeError, match=message.format(accelerator)):
        look_up(t.to(accelerator) if on_device else t) * x


def test_cpu_lookup_table_python_int_is_a_scalar(accelerator: torch.device) -> None:
    """A lookup by Python int (a sampling loop) gives a 0-dim CPU tensor, which the device takes as a scalar."""
    x = torch.ones(3, device=accelerator)
    assert TABLE[4].dim() == 0
    assert (TABLE[4] * x).device == accelerator


def test_cpu_lookup_table_index_on_cpu_then_move(accelerator: torch.device) -> None:
    """The second fix, index on the table's device and move the result, gives the buffer fix's numbers."""
    t = torch.tensor([1, 5, 9], device=accelerator)
    moved = TABLE[t.cpu()].to(t.device)
    assert moved.device == accelerator
    torch.testing.assert_close(moved.cpu(), TABLE.to(accelerator)[t].cpu())


def test_cpu_lookup_table_audit_refuses_the_plain_attribute(accelerator: torch.device) -> None:
    """The audit names the table as a plain attribute to register as a buffer; repair refuses to move it."""
    model = registry.get("cpu_lookup_table").case().ScheduledNet().to(accelerator)
    result = audit.repair(accelerator, model=model)
    assert [(m.path, m.kind) for m in result.refused] == [("model.alphas_cumprod", "attribute")]
    assert result.refused[0].fix == "register it in ScheduledNet.__init__: self.register_buffer('alphas_cumprod', ...)"
    fixed = registry.get("cpu_lookup_table").fix().ScheduledNet().to(accelerator)
    assert audit.misplaced(accelerator, model=fixed) == []


# ---- head_replaced_after_to ----------------------------------------------------------------------


def test_head_replaced_after_to_never_trains_on_cpu() -> None:
    """On CPU the case runs, but the new head keeps its initial weights: the optimizer never held it."""
    case = registry.get("head_replaced_after_to").case()
    result = case.run(torch.device("cpu"), Path())
    head = case.new_head()
    assert torch.equal(result["fc2.weight"], head.weight.detach())
    assert torch.equal(result["fc2.bias"], head.bias.detach())


def test_head_replaced_after_to_with_the_optimizer_built_after(accelerator: torch.device) -> None:
    """Built after the new head, the optimizer holds it, and the head made on CPU still raises on the device."""
    case = registry.get("head_replaced_after_to").case()
    model = harness.new_model().to(accelerator)
    model.fc2 = case.new_head()
    optimizer = harness.sgd(model.parameters())
    assert audit.structure(model=model, optimizer=optimizer) == []
    with pytest.raises(RuntimeError, match=SAME):
        harness.train(model, optimizer, harness.batches(), accelerator)


def test_head_replaced_after_to_moving_the_head_is_not_enough(accelerator: torch.device, tmp_path: Path) -> None:
    """Moving the new head silences the error, but the head never trains; the audit names the orphaned and
    missing parameters, which no device move repairs."""
    case = registry.get("head_replaced_after_to").case()
    model = harness.new_model().to(accelerator)
    optimizer = harness.sgd(model.parameters())
    model.fc2 = case.new_head()
    found = audit.structure(model=model, optimizer=optimizer)
    assert [(f.path, f.problem) for f in found] == [
        ("optimizer.param_groups[0]['params'][2]", "orphaned"), ("optimizer.param_groups[0]['params'][3]", "orphaned"),
        ("model.fc2.weight", "missing"), ("model.fc2.bias", "missing"),
    ]
    assert [m.path for m in audit.repair(accelerator, model=model, optimizer=optimizer).moved] == [
        "model.fc2.weight", "model.fc2.bias",
    ]
    assert audit.structure(model=model, optimizer=optimizer) == found
    harness.train(model, optimizer, harness.batches(), accelerator)
    assert torch.equal(model.fc2.weight.detach().cpu(), case.new_head().weight.detach())
    expected = registry.get("head_replaced_after_to").fix().run(torch.device("cpu"), tmp_path)
    with pytest.raises(AssertionError):
        assert_same_params(harness.cpu_state(model), expected, exact=False)


# ---- seed_device_check ---------------------------------------------------------------------------


def _seed_resume(device: torch.device, workdir: Path):
    case = registry.get("seed_device_check").case()
    model, optimizer, criterion = case.resume(harness.write_checkpoint(workdir, case.make_optimizer), device)
    return case, model, optimizer, criterion, harness.binary_batches()[harness.STEPS_BEFORE:]


def test_seed_device_check_says_all_clear(accelerator: torch.device, tmp_path: Path) -> None:
    """The article's check passes while the audit names the criterion's weight and every momentum buffer."""
    case, model, optimizer, criterion, data = _seed_resume(accelerator, tmp_path)
    assert case.check_device_consistency(accelerator, model, optimizer, criterion, data[0][0].to(accelerator))
    found = audit.misplaced(accelerator, model=model, optimizer=optimizer, criterion=criterion)
    names = ("fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias")
    assert [m.path for m in found] == [f"optimizer.state[model.{n}]['momentum_buffer']" for n in names] + [
        "criterion.pos_weight",
    ]


def test_seed_device_check_recovery_leaves_the_optimizer(accelerator: torch.device, tmp_path: Path) -> None:
    """Even run unconditionally, the article's recovery fixes the loss, and the optimizer step raises next."""
    case, model, optimizer, criterion, data = _seed_resume(accelerator, tmp_path)
    case.recover(accelerator, model, optimizer, criterion)
    x, y = data[0][0].to(accelerator), data[0][1].to(accelerator)
    criterion(model(x), y).backward()
    with pytest.raises(RuntimeError, match=SAME):
        optimizer.step()


def test_seed_device_check_data_on_cpu(accelerator: torch.device, tmp_path: Path) -> None:
    """With the data left on CPU the check does fail, and the recovery, which does not move data, leaves it failing."""
    case, model, optimizer, criterion, data = _seed_resume(accelerator, tmp_path)
    x = data[0][0]
    assert not case.check_device_consistency(accelerator, model, optimizer, criterion, x)
    case.recover(accelerator, model, optimizer, criterion)
    with pytest.raises(RuntimeError, match=SAME):
        model(x)


def test_seed_device_check_repair_as_the_recovery(accelerator: torch.device, tmp_path: Path) -> None:
    """audit.repair moves the model, the criterion and the optimizer state; training then matches the reference."""
    _, model, optimizer, criterion, data = _seed_resume(accelerator, tmp_path)
    result = audit.repair(accelerator, model=model, optimizer=optimizer, criterion=criterion)
    assert (len(result.moved), result.refused) == (5, [])
    harness.train(model, optimizer, data, accelerator, criterion)
    (tmp_path / "ref").mkdir()
    expected = registry.get("seed_device_check").fix().run(torch.device("cpu"), tmp_path / "ref")
    assert_same_params(harness.cpu_state(model), expected, exact=False)


# ---- index_less_device ---------------------------------------------------------------------------


def _two_devices(accelerator: torch.device) -> torch.device:
    """The second device of the accelerator's kind; skips where the host cannot train on two."""
    count = devices.count(accelerator.type)
    if count < 2:
        pytest.skip(f"this scenario needs two {accelerator.type} devices; this host can train on {count}")
    return torch.device(accelerator.type, 1)


def test_index_less_device_means_the_current_device(accelerator: torch.device) -> None:
    """A device without an index, in a factory, in .to() or in a module's .to(), is the current device:
    0 until it is set, the set one inside the device context."""
    second = _two_devices(accelerator)
    kind = accelerator.type
    x = torch.ones(2, device=second)
    made = [torch.zeros(1, device=kind), x.to(kind), nn.Linear(1, 1).to(kind).weight]
    assert {t.device.index for t in made} == {0}
    with torch.get_device_module(kind).device(1):
        made = [torch.zeros(1, device=kind), x.cpu().to(kind), nn.Linear(1, 1).to(kind).weight]
        assert {t.device.index for t in made} == {1}
    with pytest.raises(RuntimeError, match=f"{SAME}, but found at least two devices, {second} and {kind}:0!"):
        x + torch.ones(2, device=kind)


def test_index_less_device_fixed_by_the_current_device(accelerator: torch.device, tmp_path: Path) -> None:
    """The other fix: the broken worker's own code, run with its device made the current one, trains right."""
    _two_devices(accelerator)
    scenario = registry.get("index_less_device")
    with torch.get_device_module(accelerator.type).device(1):
        result = scenario.case().run(accelerator, tmp_path)
    assert_same_params(result, scenario.fix().run(torch.device("cpu"), tmp_path), exact=False)


def test_index_less_device_audit_names_the_batch(accelerator: torch.device) -> None:
    """Audited against the worker's device, the batch moved with an index-less device is named, on device 0."""
    second = _two_devices(accelerator)
    model = nn.Linear(2, 2).to(second)
    batch = {"x": torch.ones(1, 2).to(accelerator.type)}
    assert audit.misplaced(second, model=model, batch=batch) == [
        audit.Misplaced("batch['x']", torch.device(accelerator.type, 0), (1, 2)),
    ]


def test_index_less_device_is_harmless_with_one_device(monkeypatch: pytest.MonkeyPatch) -> None:
    """On a host with one device of the kind, index-less and indexed names agree: the symptom is none."""
    scenario = registry.get("index_less_device")
    assert scenario.symptom("cuda") == ("mismatch" if devices.count("cuda") >= 2 else "none")
    assert scenario.symptom("mps") == "none"
    monkeypatch.setattr(devices, "count", lambda kind: 1)
    assert scenario.symptom("emulated") == "none"
    assert harness.second_device(torch.device("emulated", 0)) == torch.device("emulated", 0)


# ---- model_split_across_devices ------------------------------------------------------------------


def test_model_split_across_devices_output_is_on_the_last_device(accelerator: torch.device) -> None:
    """The split model's own code crosses the seam, so its forward runs; the output is on the last device,
    the labels moved with the batch on the first: the loss is where the two ends meet."""
    last = _two_devices(accelerator)
    case = registry.get("model_split_across_devices").case()
    model = harness.new_model(case.SplitNet).place(accelerator, last)
    x, y = harness.batches()[0]
    out = model(x.to(accelerator))
    assert out.device == last
    with pytest.raises(RuntimeError, match=f"{SAME}, but found at least two devices, {last} and "
                                           f"{torch.device(accelerator.type, 0)}!"):
        F.mse_loss(out, y.to(accelerator))
    assert F.mse_loss(out, y.to(out.device)).device == last


def test_model_split_across_devices_audit_names_the_last_layers(accelerator: torch.device) -> None:
    """Asked about the device the batch goes to, the audit names the layers the split put on the last one."""
    last = _two_devices(accelerator)
    case = registry.get("model_split_across_devices").case()
    model = harness.new_model(case.SplitNet).place(accelerator, last)
    found = audit.misplaced(accelerator, model=model)
    assert [(item.path, item.device) for item in found] == [("model.fc2.weight", last), ("model.fc2.bias", last)]


# ---- offload_device_read -------------------------------------------------------------------------


_CPU_OFFLOAD = registry.get("offload_device_read").fix().offload


def _offload_to_meta(model: nn.Module, execution_device: torch.device) -> nn.Module:
    """An offload that leaves meta tensors in the module between calls (accelerate's cpu_offload keeps the
    weights in a map): the CPU offload's hooks, with the weights made on the device before each call and dropped
    to meta after it."""
    weights = {k: v.clone() for k, v in model.state_dict().items()}

    def materialize(module: nn.Module, args: tuple) -> None:
        module.to_empty(device=execution_device)
        module.load_state_dict(weights)

    def drop(module: nn.Module, args: tuple, output: torch.Tensor) -> None:
        module.to("meta")

    model.register_forward_pre_hook(materialize)  # runs before the offload's own hooks
    _CPU_OFFLOAD(model, execution_device)
    model.register_forward_hook(drop)  # after the offload's move back to CPU
    return model.to("meta")


def test_offload_device_read_with_weights_on_meta(accelerator: torch.device, tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """With the resting weights on meta, a parameter answers meta, and the same loop fails naming meta; the
    fix (the execution device) still reproduces the CPU numbers."""
    scenario = registry.get("offload_device_read")
    monkeypatch.setattr(scenario.case(), "offload", _offload_to_meta)
    with pytest.raises(RuntimeError, match=f"Tensor on device meta is not on the expected device {accelerator}"):
        scenario.case().run(accelerator, tmp_path)
    monkeypatch.setattr(scenario.fix(), "offload", _offload_to_meta)
    assert_same_params(scenario.fix().run(accelerator, tmp_path), scenario.fix().run(torch.device("cpu"), tmp_path),
                       exact=False)


@torch.no_grad()
def test_offload_device_read_output_device_fix(accelerator: torch.device, tmp_path: Path) -> None:
    """The other fix: each new tensor made on the device of the output it meets reproduces the CPU numbers."""
    fix = registry.get("offload_device_read").fix()
    model = fix.offload(harness.new_model(), accelerator)
    g = torch.Generator().manual_seed(3)
    sample = None
    for x, _ in harness.batches()[:3]:
        out = model(x)
        noise = torch.randn(4, 2, generator=g).to(out.device)
        sample = out - 0.1 * noise + 0.5 * (torch.zeros_like(out) if sample is None else sample)
    assert sample is not None
    assert_same_params({"sample": sample.cpu()}, fix.run(torch.device("cpu"), tmp_path), exact=False)


# ---- traced_device_constant ----------------------------------------------------------------------


class _Masked(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(3, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        mask = torch.ones(x.shape[0], 3, device=x.device)
        return self.fc(x) * mask


def test_traced_device_constant_jit_trace_on_the_emulator(accelerator: torch.device) -> None:
    """torch.jit.trace on CPU records device("cpu"), and the traced function fails on the device inside the
    TorchScript interpreter; traced on the device, or scripted, it runs. On the emulated device the inner
    message is empty (a departure: PyTorch's interpreter reads a Python error it has not fetched), where CUDA
    ends with the device error."""
    def masked(x: torch.Tensor) -> torch.Tensor:
        return x * torch.ones(x.shape[0], 3, device=x.device)

    with pytest.warns(DeprecationWarning, match="torch.jit.trace"):
        traced = torch.jit.trace(masked, torch.zeros(2, 3))
    assert 'device=torch.device("cpu")' in traced.code
    with pytest.raises(RuntimeError, match="The following operation failed in the TorchScript interpreter") as info:
        traced(torch.ones(2, 3, device=accelerator))
    last = str(info.value).rstrip("\n").splitlines()[-1]
    assert last.startswith(f"RuntimeError: {SAME}")
    with pytest.warns(DeprecationWarning, match="torch.jit.trace"):
        on_device = torch.jit.trace(masked, torch.zeros(2, 3, device=accelerator))
    assert on_device(torch.ones(2, 3, device=accelerator)).device == accelerator
    with pytest.warns(DeprecationWarning, match="torch.jit.script"):
        scripted = torch.jit.script(masked)
    assert scripted(torch.ones(2, 3, device=accelerator)).device == accelerator


def test_traced_device_constant_move_to_device_pass_moves_weights(accelerator: torch.device) -> None:
    """move_to_device_pass retargets an exported module's weights as well as its recorded devices."""
    torch.default_generator.manual_seed(0)
    module = _Masked()
    x = torch.randn(2, 3)
    exported = torch.export.export(module, (x,))
    moved = torch.export.passes.move_to_device_pass(exported, accelerator).module()
    assert {p.device for p in moved.parameters()} == {accelerator}
    assert_same_params({"out": moved(x.to(accelerator)).detach().cpu()}, {"out": module(x).detach()}, exact=False)


def test_traced_device_constant_between_two_devices_of_a_kind(accelerator: torch.device) -> None:
    """Exported on device 0 and run on device 1 (a server's copy on its second GPU), the recorded device is 0's:
    the same mistake between two devices of one kind, which the diagnosis reads with the export in the code."""
    second = _two_devices(accelerator)
    exported = torch.export.export(_Masked().to(accelerator), (torch.zeros(2, 3, device=accelerator),))
    program = exported.module().to(second)
    two = f"{SAME}, but found at least two devices, {second} and {accelerator}"
    with pytest.raises(RuntimeError, match=two) as info:
        program(torch.ones(2, 3, device=second))
    code = "exported = torch.export.export(model, (x,))\nprogram = exported.module().to('cuda:1')\n"
    result = diagnose.diagnose(f"RuntimeError: {info.value}", code)
    assert result.matches[0].slug == "traced_device_constant"


# ---- meta_param_not_materialized -----------------------------------------------------------------


def test_meta_param_not_materialized_to_empty_fix(device: torch.device, tmp_path: Path) -> None:
    """The other fix: memory first (to_empty on the device), then an ordinary load, the optimizer after."""
    scenario = registry.get("meta_param_not_materialized")
    case = scenario.case()
    path = harness.write_checkpoint(tmp_path, case.make_optimizer, device)
    with torch.device("meta"):
        model = harness.TinyNet()
    model.to_empty(device=device)
    checkpoint = torch.load(path, map_location=device, weights_only=True)
    model.load_state_dict(checkpoint["model"])
    optimizer = case.make_optimizer(model.parameters())
    optimizer.load_state_dict(checkpoint["optimizer"])
    assert_same_params(harness.finish(model, optimizer, device), case.reference(), exact=device.type == "cpu")


def test_meta_param_not_materialized_without_bias_is_silent(device: torch.device) -> None:
    """Without a bias, a layer on meta weights raises nothing: its meta kernel makes the output from the input
    (new_empty), an uninitialized tensor on the input's device, on CPU as on the accelerator."""
    with torch.device("meta"):
        layer = nn.Linear(4, 2, bias=False)
    out = layer(torch.ones(3, 4, device=device))
    assert out.device == device
    assert out.shape == (3, 2)


def test_model_not_moved_under_ddp(device: torch.device, tmp_path: Path) -> None:
    """DistributedDataParallel(model, device_ids=[rank]) of a model left on CPU raises at the wrap, on every
    device, CPU (gloo) included; moved first, the DDP model trains on the device (one rank, "eccl" standing in
    for NCCL on the emulated device)."""
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    backend = {"cpu": "gloo", "cuda": "nccl", "emulated": "eccl"}.get(device.type)
    if backend is None:
        pytest.skip(f"no process-group backend serves {device.type} tensors")
    dist.init_process_group(backend, init_method=(tmp_path / "rendezvous").as_uri(), rank=0, world_size=1)
    try:
        model = harness.new_model()
        with pytest.raises(ValueError, match=r"device_ids and output_device arguments only work with "
                                             r"single-device/multiple-device GPU modules or CPU modules, but got "
                                             r"device_ids \[0\], output_device None, and module parameters "
                                             r"\{device\(type='cpu'\)\}") as raised:
            DistributedDataParallel(model, device_ids=[0])
        # the message as PyTorch raises it diagnoses to this lesson (samedevice diagnose)
        assert diagnose.diagnose(str(raised.value)).matches[0].slug == "model_not_moved"
        ddp = DistributedDataParallel(model.to(device), device_ids=[0] if device.type != "cpu" else None)
        optimizer = harness.sgd(ddp.parameters())
        harness.train(ddp, optimizer, harness.batches(), device)
        assert_same_params(harness.cpu_state(model), harness.reference(harness.sgd), exact=device.type == "cpu")
    finally:
        dist.destroy_process_group()


# ---- dataparallel_device_ids ---------------------------------------------------------------------


def test_dataparallel_device_ids_on_the_wrong_device(accelerator: torch.device) -> None:
    """A module on the second device is refused too, naming it; given one device id, DataParallel moves the
    module there itself (why a one-GPU machine never sees the error)."""
    second = _two_devices(accelerator)
    with pytest.raises(RuntimeError, match=rf"on device {accelerator.type}:0 \(device_ids\[0\]\) but found one of "
                                           rf"them on device: {second}"):
        nn.DataParallel(nn.Linear(4, 2).to(second), device_ids=[0, 1])(torch.ones(2, 4, device=second))
    model = nn.Linear(4, 2)
    nn.DataParallel(model, device_ids=[0])
    assert model.weight.device == torch.device(accelerator.type, 0)


# ---- pack_padded_lengths -------------------------------------------------------------------------


@parametrize_cases(
    Case("a_list", given=lambda lengths: lengths.tolist()),
    Case("never_moved", given=lambda lengths: lengths),
)
def test_pack_padded_lengths_list_or_unmoved_fixes_it(given, accelerator: torch.device) -> None:
    """The lengths as a list, or never moved to the device, pack as `lengths.cpu()` does: the packed data on the
    device, its batch sizes on the CPU, and the RNN's output on the device."""
    from torch.nn.utils.rnn import pack_padded_sequence

    x, lengths = harness.padded_batches()[0][0]
    packed = pack_padded_sequence(x.to(accelerator), given(lengths), batch_first=True, enforce_sorted=False)
    expected = pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
    assert (packed.data.device, packed.batch_sizes.device) == (accelerator, torch.device("cpu"))
    assert torch.equal(packed.batch_sizes, expected.batch_sizes)
    output, _ = nn.GRU(8, 3, batch_first=True).to(accelerator)(packed)
    assert output.data.device == accelerator


@pytest.mark.parametrize(("lengths", "enforce_sorted"), [([4, 3, 1], True), ([1, 4, 3], False)],
                         ids=["sorted", "unsorted"])
def test_pack_padded_lengths_sorted_or_not(lengths: list[int], enforce_sorted: bool, accelerator: torch.device) -> None:
    """Lengths on the device are refused sorted (enforce_sorted=True) or not (False, which sorts them first): the
    check is of their device, not their order; on the CPU both pack."""
    from torch.nn.utils.rnn import pack_padded_sequence

    x = torch.ones(3, 4, 2, device=accelerator)
    with pytest.raises(RuntimeError, match=rf"'lengths' argument should be a 1D CPU int64 tensor, but got 1D "
                                           rf"{accelerator} Long tensor"):
        pack_padded_sequence(x, torch.tensor(lengths, device=accelerator), batch_first=True,
                             enforce_sorted=enforce_sorted)
    packed = pack_padded_sequence(x, torch.tensor(lengths), batch_first=True, enforce_sorted=enforce_sorted)
    assert packed.batch_sizes.tolist() == [3, 2, 2, 1]


# ---- device_tensor_to_numpy ----------------------------------------------------------------------


@parametrize_cases(
    Case("asarray", into=lambda t: np.asarray(t)),
    Case("mean_of_a_list", into=lambda t: np.mean([t, t])),
    Case("isclose", into=lambda t: np.isclose(t, 1.0)),
    Case("numpy", into=lambda t: t.numpy()),
)
def test_device_tensor_to_numpy_every_way_in(into, accelerator: torch.device) -> None:
    """Whichever way a device tensor reaches NumPy, it is refused in the scenario's words; on the host, by `.cpu()`,
    `.item()` or `.tolist()`, it gives NumPy the CPU's numbers."""
    cpu = torch.tensor([0.5, 1.5])
    with pytest.raises(TypeError, match=rf"can't convert {accelerator} device type tensor to numpy"):
        into(cpu.to(accelerator))
    assert np.array_equal(np.asarray(into(cpu.to(accelerator).cpu())), np.asarray(into(cpu)))


def test_device_tensor_to_numpy_a_scalar_by_item_a_list_by_tolist(accelerator: torch.device) -> None:
    """A loss for the log is a Python number by `.item()`, outputs a list by `.tolist()`: NumPy takes both, and they
    hold the device's numbers."""
    on_device = torch.tensor([0.5, 1.5], device=accelerator)
    assert np.mean([on_device[0].item(), on_device[1].item()]) == np.mean(on_device.tolist()) == 1.0


# ---- device_scalar_into_cpu ----------------------------------------------------------------------


@parametrize_cases(
    Case("cpu_scalar_into_a_device_op", op=lambda dev, cpu: dev(3) * cpu(0), raises=False),
    Case("cpu_scalar_beside_a_device_scalar", op=lambda dev, cpu: cpu(0) + dev(0), raises=False),
    Case("device_total_updated_with_a_cpu_scalar", op=lambda dev, cpu: dev(0).add_(cpu(0)), raises=False),
    Case("cpu_total_updated_in_place", op=lambda dev, cpu: cpu(0).add_(dev(0)), raises=True),
    Case("cpu_vector_beside_a_device_scalar", op=lambda dev, cpu: cpu(3) + dev(0), raises=True),
    Case("cpu_vector_compared_with_a_device_scalar", op=lambda dev, cpu: cpu(1) > dev(0), raises=True),
    Case("cpu_vector_updated_in_place", op=lambda dev, cpu: cpu(3).add_(dev(0)), raises=True),
    Case("device_scalar_first_beside_a_cpu_vector", op=lambda dev, cpu: dev(0) * cpu(3), raises=True),
)
def test_device_scalar_into_cpu_one_way(op, raises: bool, accelerator: torch.device) -> None:
    """A 0-dim CPU tensor joins a device op as a scalar; a 0-dim device tensor joins no CPU op: not in place in a
    CPU tensor, not beside a CPU tensor of one dimension (CUDA's TensorIterator rule, which the emulator copies)."""
    def dev(n: int) -> torch.Tensor:
        return torch.ones(n, device=accelerator) if n else torch.tensor(1.0, device=accelerator)

    def cpu(n: int) -> torch.Tensor:
        return torch.ones(n) if n else torch.tensor(1.0)

    if raises:  # (MPS words its mismatches its own way: the registry's pattern for them)
        message = registry.SYMPTOMS["mismatch"][1] if accelerator.type == "mps" else \
            rf"{SAME}, but found at least two devices, {accelerator} and cpu!"
        with pytest.raises(RuntimeError, match=message):
            op(dev, cpu)
    else:
        assert op(dev, cpu).device == accelerator


# ---- metric_not_moved ----------------------------------------------------------------------------


class _WithMetrics(nn.Module):
    """A model that keeps one metric as its child and one in a plain dict, as LightningModules keep them."""

    def __init__(self) -> None:
        super().__init__()
        import torchmetrics

        self.net = nn.Linear(8, 2)
        self.child = torchmetrics.MeanSquaredError()
        self.in_a_dict = {"mse": torchmetrics.MeanSquaredError()}


def test_metric_not_moved_a_child_metric_moves_with_its_module(accelerator: torch.device) -> None:
    """The second fix: a metric that is an attribute of the moved module (a LightningModule's, set in __init__) moves
    with it; one in a plain dict does not (plain_list_layers' lesson), and its update fails as the case's does."""
    model = _WithMetrics().to(accelerator)
    x, y = torch.randn(4, 8, device=accelerator), torch.randn(4, 2, device=accelerator)
    output = model.net(x).detach()
    model.child.update(output, y)
    assert model.child.compute().device == accelerator
    torch.testing.assert_close(model.child.compute().cpu(), F.mse_loss(output, y).cpu())
    expected = registry.expected(registry.get("metric_not_moved").symptom(accelerator.type))
    assert expected is not None
    with pytest.raises(expected[0], match=expected[1]):
        model.in_a_dict["mse"].update(output, y)


def test_metric_not_moved_state_is_made_on_the_cpu_and_moved_by_its_own_to(accelerator: torch.device) -> None:
    """What the lesson rests on: a metric's running state is tensors made when it is built, on the CPU; they are no
    buffers and stay out of its state_dict, but the metric's own .to moves them (torchmetrics' Metric._apply)."""
    import torchmetrics

    metric = torchmetrics.MeanSquaredError()
    assert {t.device.type for t in metric.metric_state.values()} == {"cpu"}
    assert (dict(metric.named_buffers()), dict(metric.state_dict())) == ({}, {})
    metric.to(accelerator)
    assert {t.device for t in metric.metric_state.values()} == {torch.device(accelerator.type, 0)}


# ---- hardcoded_device ----------------------------------------------------------------------------


def test_hardcoded_device_fix_follows_its_input(device: torch.device) -> None:
    """The fixed model, trained on each device (the accelerators too, which the catalog's CPU runs are not), gives
    the CPU reference's parameters: its tensor is made where its input is."""
    fix = registry.get("hardcoded_device").fix()
    model = harness.new_model(fix.ScaledNet).to(device)
    harness.train(model, harness.sgd(model.parameters()), harness.batches(), device)
    reference = harness.new_model(fix.ScaledNet)
    harness.train(reference, harness.sgd(reference.parameters()), harness.batches(), torch.device("cpu"))
    assert_same_params(harness.cpu_state(model), harness.cpu_state(reference), exact=device.type == "cpu")


def test_hardcoded_device_runs_only_where_the_pick_is(accelerator: torch.device) -> None:
    """The broken model makes its tensor on the host's accelerator, index-less: the current device. There it runs;
    on the CPU of that host, and on a second device of the kind, it fails (the pick is the current device, 0)."""
    case = registry.get("hardcoded_device").case()
    model, x = harness.new_model(case.ScaledNet), torch.randn(4, 8)
    with harness.as_on_a_host_of(accelerator):
        picked = harness.current_accelerator()
        if picked.type != accelerator.type:
            pytest.skip(f"the code's pick on this host is {picked.type}, not {accelerator.type}")
        home = torch.device(accelerator.type, 0)
        assert model.to(home)(x.to(home)).device == home
        mismatch = registry.SYMPTOMS["mismatch"][1]
        with pytest.raises(RuntimeError, match=mismatch):
            model.cpu()(x)
        if devices.count(accelerator.type) >= 2:
            second = torch.device(accelerator.type, 1)
            with pytest.raises(RuntimeError, match=rf"{SAME}, but found at least two devices, "
                                                   rf"(?:{second} and {home}|{home} and {second})!"):
                model.to(second)(x.to(second))


# ---- device_in_dataloader_worker ---------------------------------------------------------------


def test_device_in_dataloader_worker_runs_without_workers(accelerator: torch.device) -> None:
    """With num_workers=0 the broken Dataset runs in the training process, which may use the device: it trains
    there and matches the reference. The workers are what fails."""
    from torch.utils.data import DataLoader

    case = registry.get("device_in_dataloader_worker").case()
    model = harness.new_model().to(accelerator)
    loader = DataLoader(case.Samples(accelerator), batch_size=4, num_workers=0)
    harness.train(model, harness.sgd(model.parameters()), list(loader), accelerator)
    reference = harness.new_model()
    harness.train(reference, harness.sgd(reference.parameters()), harness.batches(), torch.device("cpu"))
    assert_same_params(harness.cpu_state(model), harness.cpu_state(reference), exact=False)
