"""The training stacks on the emulated device (samedevice.integrations), run for real: Lightning's Trainer and
Fabric train, save, resume, and a resumed run repeats the uninterrupted one on cpu and on the device."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from samedevice import audit, emulator
from samedevice.errors import IntegrationError

L = pytest.importorskip("lightning", reason="lightning is not installed (pip install 'same-device[stacks]')")
from samedevice import integrations  # noqa: E402
from samedevice.integrations import lightning as sl  # noqa: E402

pytestmark = [
    pytest.mark.skipif(emulator.unavailable_reason() is not None, reason=str(emulator.unavailable_reason())),
    # Lightning's own notices on a machine without a GPU (its tips, an idle DataLoader, no logger's folder)
    pytest.mark.filterwarnings("ignore::UserWarning:lightning"),
    pytest.mark.filterwarnings("ignore::UserWarning:lightning_utilities"),
    # Lightning 2.6 builds torch's LeafSpec, which torch 2.13 deprecates
    pytest.mark.filterwarnings("ignore:`isinstance\\(treespec, LeafSpec\\)` is deprecated:FutureWarning"),
]


class TinyModule(L.LightningModule):
    """A tiny regression model; no dropout: Lightning's checkpoints carry no RNG state, on any device."""

    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2))
        self.seen: torch.dtype | None = None

    def training_step(self, batch: Any, index: int) -> torch.Tensor:
        x, y = batch
        out = self.net(x)
        self.seen = out.dtype
        return F.mse_loss(out.float(), y)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.Adam(self.parameters(), lr=0.01)


def _loader() -> torch.utils.data.DataLoader:
    g = torch.Generator().manual_seed(1)
    data = torch.utils.data.TensorDataset(torch.randn(24, 8, generator=g), torch.randn(24, 2, generator=g))
    return torch.utils.data.DataLoader(data, batch_size=4)


def _fit(kwargs: dict[str, Any], epochs: int, *, module: type[L.LightningModule] = TinyModule,
         resume: Path | None = None, save: Path | None = None, **options: Any) -> L.LightningModule:
    torch.default_generator.manual_seed(0)
    model = module()
    trainer = L.Trainer(max_epochs=epochs, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False, **kwargs, **options)
    trainer.fit(model, _loader(), ckpt_path=resume)
    if save is not None:
        trainer.save_checkpoint(save)
    return model


def _weights(model: nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().cpu() for k, v in model.state_dict().items()}


def test_trainer_resume_repeats_the_uninterrupted_fit(device: torch.device, tmp_path: Path,
                                                      lightning_kwargs: dict[str, Any]) -> None:
    """L.Trainer on the test's device (the plugin's lightning_kwargs): one epoch, a checkpoint, a resumed
    second epoch equal the two epochs in one go, and on the emulated device they equal CPU's bit for bit."""
    full = _fit(lightning_kwargs, 2)
    _fit(lightning_kwargs, 1, save=tmp_path / "epoch1.ckpt")
    resumed = _fit(lightning_kwargs, 2, resume=tmp_path / "epoch1.ckpt")
    assert full.trainer.strategy.root_device.type == device.type
    for name, value in _weights(full).items():
        assert torch.equal(_weights(resumed)[name], value), name
    cpu = _weights(_fit(sl.trainer_kwargs("cpu"), 2))
    for name, value in _weights(full).items():
        assert torch.equal(cpu[name], value), name


@pytest.mark.parametrize(("precision", "dtype"), [("bf16-mixed", torch.bfloat16), ("16-mixed", torch.float16)])
def test_trainer_mixed_precision_autocasts_on_the_device(precision: str, dtype: torch.dtype) -> None:
    """precision="bf16-mixed" / "16-mixed" autocast on the emulated device (the connector built them for
    "cuda"), and 16-mixed scales with a GradScaler of the device."""
    kwargs = sl.trainer_kwargs("emulated")
    if precision == "16-mixed" and not torch.cuda.is_available():  # the connector's CUDA GradScaler warns first
        with pytest.warns(UserWarning, match="CUDA is not available"):
            model = _fit(kwargs, 1, precision=precision)
    else:
        model = _fit(kwargs, 1, precision=precision)
    assert model.seen == dtype
    plugin = model.trainer.precision_plugin
    assert plugin.device == emulator.NAME
    if precision == "16-mixed":
        assert plugin.scaler is not None
        assert plugin.scaler._device == emulator.NAME


def test_fabric_resume_with_mixed_precision(tmp_path: Path) -> None:
    """L.Fabric(accelerator="emulated", strategy="emulated", precision="bf16-mixed"): autocast on the device,
    and a run saved with fabric.save and resumed with fabric.load repeats the uninterrupted one."""
    def run(steps: int, save: Path | None = None, resume: Path | None = None) -> dict[str, torch.Tensor]:
        fabric = L.Fabric(**sl.trainer_kwargs("emulated"), precision="bf16-mixed")
        torch.default_generator.manual_seed(0)
        module = nn.Linear(4, 2)
        model, optimizer = fabric.setup(module, torch.optim.SGD(module.parameters(), lr=0.1, momentum=0.9))
        state = {"model": model, "optimizer": optimizer, "step": 0}
        if resume is not None:
            fabric.load(resume, state)
        g = torch.Generator().manual_seed(1)
        batches = [(torch.randn(3, 4, generator=g), torch.randn(3, 2, generator=g)) for _ in range(steps)]
        for x, y in batches[state["step"]:]:
            x, y = fabric.to_device((x, y))
            with fabric.autocast():
                assert module(x).dtype == torch.bfloat16
                loss = F.mse_loss(model(x), y)
            optimizer.zero_grad()
            fabric.backward(loss)
            optimizer.step()
            state["step"] += 1
        assert fabric.device == emulator.device()
        if save is not None:
            fabric.save(save, state)
        return _weights(module)

    full = run(6)
    run(3, save=tmp_path / "step3.ckpt")
    resumed = run(6, resume=tmp_path / "step3.ckpt")
    for name, value in full.items():
        assert torch.equal(resumed[name], value), name


class BrokenModule(TinyModule):
    """A LightningModule with a resume-time bug: class weights kept as a plain tensor attribute, which
    Lightning's model.to(device) does not move."""

    def __init__(self) -> None:
        super().__init__()
        self.scale = torch.ones(2)  # a plain attribute: not a buffer

    def training_step(self, batch: Any, index: int) -> torch.Tensor:
        x, y = batch
        return F.mse_loss(self.net(x) * self.scale, y)


def test_a_device_bug_in_a_lightning_module_raises_on_the_device(device: torch.device,
                                                                  lightning_kwargs: dict[str, Any]) -> None:
    """The broken twin: the same LightningModule trains on cpu and raises on the emulated device, where the
    audit names the plain tensor attribute."""
    if device.type == "cpu":
        model = _fit(lightning_kwargs, 1, module=BrokenModule)
        assert model.scale.device.type == "cpu"
        return
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
        _fit(lightning_kwargs, 1, module=BrokenModule)
    model = BrokenModule().to(device)
    assert [item.path for item in audit.misplaced(device, model=model)] == ["model.scale"]


def test_the_accelerator_alone_says_which_strategy_is_missing() -> None:
    """accelerator="emulated" without strategy="emulated": Lightning would give it a CPU strategy; the
    accelerator refuses in one line naming the missing argument."""
    with pytest.raises(IntegrationError, match="pass strategy='emulated' too"):
        _fit({"accelerator": "emulated", "devices": 1}, 1)


@pytest.mark.parametrize("devices", [2, [0, 1]])
def test_two_devices_need_the_ddp_strategy(devices: Any) -> None:
    """devices=2 with the single-device strategy is refused in one line naming strategy='emulated_ddp'."""
    with pytest.raises(IntegrationError, match="devices=2 needs strategy='emulated_ddp'"):
        _fit({"accelerator": "emulated", "strategy": "emulated", "devices": devices}, 1)


@pytest.mark.parametrize("devices", [3, [0, 2], "two"])
def test_devices_the_emulator_lacks_are_refused(devices: Any) -> None:
    """A device count or index the emulator does not have: one line naming what it has."""
    with pytest.raises(IntegrationError, match=re.escape(f"devices={devices!r} does not name devices the emulator")):
        L.Trainer(accelerator="emulated", strategy="emulated_ddp", devices=devices, logger=False)


def test_the_device_index_is_kept_or_refused() -> None:
    """devices=[1] with the "emulated" strategy (which runs on emulated:0) is refused in one line naming the way
    to emulated:1; trainer_kwargs("emulated:1") trains there. Lightning makes its root device the current one and
    leaves it so, as with CUDA (torch.cuda.set_device in setup_device)."""
    with pytest.raises(IntegrationError, match=r"devices asks for emulated:1, the strategy runs on emulated:0"):
        _fit({"accelerator": "emulated", "strategy": "emulated", "devices": [1]}, 1)
    try:
        model = _fit(sl.trainer_kwargs(emulator.device(1)), 1)
        assert model.trainer.strategy.root_device == emulator.device(1)
        assert torch.accelerator.current_device_index() == 1
    finally:
        torch.accelerator.set_device_index(0)  # the tests after this one run where they expect, on emulated:0


def test_fabric_takes_one_device() -> None:
    """Fabric's DDP over the emulated devices is not set up: devices=2 is one line saying so."""
    for devices in (2, [1]):
        refusal = re.escape(f"Fabric on the emulated device: devices={devices!r} is not")
        with pytest.raises(IntegrationError, match=refusal):
            L.Fabric(accelerator="emulated", strategy="emulated", devices=devices)


class DDPModule(TinyModule):
    """TinyModule with plain SGD (importable, as DDP's spawned processes need)."""

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.05)


@pytest.mark.slow
def test_ddp_over_the_two_emulated_devices_matches_cpu_ddp() -> None:
    """strategy="emulated_ddp", devices=2: two spawned processes, one per emulated device, with "eccl" as their
    backend, train to the weights Lightning's DDP gives on CPU (ddp_spawn, gloo), bit for bit."""
    from lightning.pytorch.strategies import DDPStrategy

    g = torch.Generator().manual_seed(1)
    data = torch.utils.data.TensorDataset(torch.randn(24, 8, generator=g), torch.randn(24, 2, generator=g))
    options = {"devices": 2, "max_epochs": 1, "logger": False, "enable_checkpointing": False,
               "enable_progress_bar": False, "enable_model_summary": False}
    results = {}
    for accelerator, strategy in (("emulated", "emulated_ddp"), ("cpu", "ddp_spawn")):
        torch.default_generator.manual_seed(0)
        model = DDPModule()
        initial = {k: v.detach().clone() for k, v in model.state_dict().items()}
        trainer = L.Trainer(accelerator=accelerator, strategy=strategy, **options)
        trainer.fit(model, torch.utils.data.DataLoader(data, batch_size=4))
        assert isinstance(trainer.strategy, DDPStrategy)
        if accelerator == "emulated":
            assert trainer.strategy.parallel_devices == [emulator.device(0), emulator.device(1)]
        results[accelerator] = {k: v.detach().clone().cpu() for k, v in model.state_dict().items()}
        assert any(not torch.equal(initial[k], results[accelerator][k].to(initial[k].device)) for k in initial)
    for name, value in results["cpu"].items():
        assert torch.equal(results["emulated"][name], value), name


def test_unknown_stack_and_untested_version(monkeypatch: pytest.MonkeyPatch) -> None:
    """An unknown stack name, and a stack version outside the tested range, are one line each."""
    with pytest.raises(IntegrationError, match=r"'keras'.*knows accelerate, lightning, transformers"):
        integrations.load("keras")
    assert integrations.load("lightning") is sl
    monkeypatch.setattr(integrations.metadata, "version", lambda name: "3.0.1")
    with pytest.raises(IntegrationError, match=r"lightning 3\.0\.1 is outside the tested range \(2\.6 up to"):
        integrations.check_version("lightning")
    monkeypatch.setenv(integrations.UNTESTED_ENV, "1")
    with pytest.warns(UserWarning, match=r"lightning 3\.0\.1 is outside the tested range"):
        integrations.check_version("lightning")
