"""Hugging Face Trainer and accelerate on the emulated device (samedevice.integrations.hf), run for real and
offline with a tiny GPT-2 built from its config: a resumed run with dropout repeats the uninterrupted one."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from samedevice import emulator
from samedevice.errors import IntegrationError

transformers = pytest.importorskip("transformers", reason="transformers is not installed")
pytest.importorskip("accelerate", reason="accelerate is not installed (pip install 'same-device[stacks]')")
from accelerate import Accelerator  # noqa: E402
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments  # noqa: E402

from samedevice.integrations import hf  # noqa: E402

pytestmark = pytest.mark.skipif(emulator.unavailable_reason() is not None, reason=str(emulator.unavailable_reason()))


class Tokens(torch.utils.data.Dataset):
    """Sixteen fixed sequences of token ids, labels = inputs (language modelling)."""

    def __init__(self) -> None:
        self.ids = torch.randint(0, 32, (16, 8), generator=torch.Generator().manual_seed(0))

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


def _train(device: torch.device, output: Path, resume: Path | None = None, callbacks: list[Any] | None = None
           ) -> dict[str, torch.Tensor]:
    """Four steps of a tiny GPT-2 with dropout (checkpoints at steps 2 and 4), or the last two from a resume."""
    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=16, n_head=2, vocab_size=32, n_positions=8))
    args = TrainingArguments(str(output), max_steps=4, save_steps=2, per_device_train_batch_size=2, seed=0,
                             report_to=[], logging_steps=100, disable_tqdm=True, use_cpu=device.type == "cpu")
    assert args.device == device
    trainer = Trainer(model=model, args=args, train_dataset=Tokens(), callbacks=callbacks)
    trainer.train(resume_from_checkpoint=str(resume) if resume else None)
    return {k: v.detach().cpu() for k, v in model.state_dict().items()}


def test_trainer_resume_with_dropout_repeats_the_uninterrupted_run(hf_device: torch.device, tmp_path: Path) -> None:
    """Trainer on the test's device (the plugin's hf_device), GPT-2's dropout on: resumed from the step-2
    checkpoint, the run ends with the uninterrupted run's weights, on cpu (Trainer restores CPU's RNG) and on
    the emulated device (hf.callbacks() restores the device's, as Trainer does for CUDA's)."""
    full = _train(hf_device, tmp_path, callbacks=hf.callbacks())
    resumed = _train(hf_device, tmp_path, resume=tmp_path / "checkpoint-2", callbacks=hf.callbacks())
    for name, value in full.items():
        assert torch.equal(resumed[name], value), name


def test_without_the_callback_a_resume_on_the_device_draws_other_dropout(tmp_path: Path) -> None:
    """Trainer saves no RNG state for the emulated device: resumed without hf.callbacks(), the dropout masks
    differ from the uninterrupted run's, and the weights with them (on CUDA Trainer restores the device's RNG)."""
    hf.reset()
    device = hf.use_device("emulated")
    try:
        full = _train(device, tmp_path, callbacks=hf.callbacks())
        resumed = _train(device, tmp_path, resume=tmp_path / "checkpoint-2")
        assert any(not torch.equal(resumed[name], value) for name, value in full.items())
        with pytest.warns(UserWarning, match=r"no emulated_rng_state\.pth in .*elsewhere"):
            _train(device, tmp_path, resume=tmp_path / "checkpoint-2", callbacks=hf.callbacks(tmp_path / "elsewhere"))
    finally:
        hf.reset()


def test_use_device_refuses_once_accelerate_runs_elsewhere() -> None:
    """The ordering trap: once accelerate's state exists on cpu, choosing the emulated device is refused in one
    line that says what to do; hf.reset() then lets it through."""
    hf.reset()
    try:
        hf.use_device("cpu")
        assert TrainingArguments(tempfile.mkdtemp(), report_to=[], use_cpu=True).device == torch.device("cpu")
        with pytest.raises(IntegrationError, match=r"already runs on cpu.*before the first TrainingArguments"):
            hf.use_device("emulated")
        hf.reset()
        assert hf.use_device("emulated") == emulator.device()
        assert TrainingArguments(tempfile.mkdtemp(), report_to=[]).device == emulator.device()
    finally:
        hf.reset()


def test_accelerate_save_state_restores_the_device_rng(tmp_path: Path) -> None:
    """Accelerator on the emulated device, with hf.RNGState() registered for checkpointing: after load_state the
    device draws what it drew after save_state (accelerate saves the RNG of the devices it knows only)."""
    hf.reset()
    try:
        hf.use_device("emulated")
        accelerator = Accelerator()
        assert accelerator.device == emulator.device()
        model = accelerator.prepare(nn.Linear(2, 2))
        accelerator.register_for_checkpointing(hf.RNGState())
        torch.manual_seed(0)
        accelerator.save_state(str(tmp_path / "state"))
        after_save = torch.rand(4, device=accelerator.device)
        torch.rand(4, device=accelerator.device)  # the stream moves on
        accelerator.load_state(str(tmp_path / "state"))
        assert torch.equal(torch.rand(4, device=accelerator.device), after_save)
        assert next(model.parameters()).device == emulator.device()
    finally:
        hf.reset()


def test_mixed_precision_is_refused_or_off_in_the_stacks() -> None:
    """What the stacks do with AMP on a device they do not know (pinned, so a release that changes it shows):
    Trainer refuses bf16, accelerate refuses fp16 and runs bf16 without autocast."""
    hf.reset()
    try:
        hf.use_device("emulated")
        with pytest.raises(ValueError, match="doesn't support bf16"):
            TrainingArguments(tempfile.mkdtemp(), report_to=[], bf16=True)
        with pytest.raises(ValueError, match="fp16 mixed precision requires a device in"):
            Accelerator(mixed_precision="fp16")
        hf.reset()
        hf.use_device("emulated")
        accelerator = Accelerator(mixed_precision="bf16")
        model = accelerator.prepare(nn.Linear(2, 2))
        with accelerator.autocast():
            assert model(torch.ones(1, 2, device=accelerator.device)).dtype == torch.float32
    finally:
        hf.reset()


class CPUShadowEMA(transformers.TrainerCallback):
    """A broken callback: an EMA of the weights kept in a dict made on CPU (`.cpu()` to save device memory),
    updated after each step from the weights on the device."""

    def on_train_begin(self, args: Any, state: Any, control: Any, model: Any = None, **kwargs: Any) -> None:
        self.shadow = {k: v.detach().clone().cpu() for k, v in model.state_dict().items()}

    def on_step_end(self, args: Any, state: Any, control: Any, model: Any = None, **kwargs: Any) -> None:
        for name, value in model.state_dict().items():
            self.shadow[name].mul_(0.9).add_(value.detach(), alpha=0.1)


def test_a_device_bug_in_a_trainer_callback_raises_on_the_device(hf_device: torch.device, tmp_path: Path) -> None:
    """The broken twin: a Trainer callback that keeps its EMA on CPU trains on cpu and raises on the emulated
    device, where the audit names the shadow tensors left on CPU."""
    from samedevice import audit

    callback = CPUShadowEMA()
    if hf_device.type == "cpu":
        _train(hf_device, tmp_path, callbacks=[callback])
        assert callback.shadow["transformer.wte.weight"].device.type == "cpu"
        return
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
        _train(hf_device, tmp_path, callbacks=[callback])
    found = audit.misplaced(hf_device, ema=callback.shadow)
    assert "ema['transformer.wte.weight']" in [item.path for item in found]
