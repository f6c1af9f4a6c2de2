"""One training step of each training stack on the emulated device against the same step on CPU.

    python benchmarks/bench_stacks.py [--quick] [--save]

Per stack (samedevice.integrations): a Lightning Trainer fit of a tiny MLP, and a Hugging Face Trainer run of
a tiny GPT-2 built from its config (dropout on, the emulated RNG callback installed). Each run trains a fixed
number of steps after one warm-up run; the time of a step is the run's wall time over its steps, so it
includes what the stack does around a step (logging, callbacks), as a user's run does. cpu and emulated runs
alternate, so the machine's drift hits both alike; medians of the rounds, with the spread of the ratio.
A stack that is not installed is left out, saying so. Results go to benchmarks/out/ unless --save.
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.common import arguments, write  # noqa: E402
from samedevice import emulator  # noqa: E402


def lightning_run(device: str, steps: int) -> Callable[[], float]:
    import lightning as L
    from torch import nn

    from samedevice.integrations import lightning as sl

    class Module(L.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 8))

        def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], index: int) -> torch.Tensor:
            x, y = batch
            return nn.functional.mse_loss(self.net(x), y)

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.Adam(self.parameters(), lr=1e-3)

    data = torch.utils.data.TensorDataset(torch.randn(steps * 8, 32), torch.randn(steps * 8, 8))

    def run() -> float:
        trainer = L.Trainer(**sl.trainer_kwargs(device), max_steps=steps, logger=False, enable_checkpointing=False,
                            enable_progress_bar=False, enable_model_summary=False)
        start = time.perf_counter()
        trainer.fit(Module(), torch.utils.data.DataLoader(data, batch_size=8))
        return (time.perf_counter() - start) / steps

    return run


def hf_run(device: str, steps: int) -> Callable[[], float]:
    from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments

    from samedevice.integrations import hf

    ids = torch.randint(0, 64, (steps * 4, 16), generator=torch.Generator().manual_seed(0))
    dataset = [{"input_ids": row, "labels": row} for row in ids]

    def run() -> float:
        hf.reset()
        hf.use_device(device)
        model = GPT2LMHeadModel(GPT2Config(n_layer=2, n_embd=32, n_head=2, vocab_size=64, n_positions=16))
        with tempfile.TemporaryDirectory() as out:
            args = TrainingArguments(out, max_steps=steps, per_device_train_batch_size=4, report_to=[],
                                     save_strategy="no", logging_steps=10_000, disable_tqdm=True,
                                     use_cpu=device == "cpu")
            trainer = Trainer(model=model, args=args, train_dataset=dataset, callbacks=hf.callbacks())
            start = time.perf_counter()
            trainer.train()
            elapsed = time.perf_counter() - start
        hf.reset()
        return elapsed / steps

    return run


STACKS = {"lightning": (("lightning",), lightning_run), "hf_trainer": (("transformers", "accelerate"), hf_run)}


def main() -> None:
    args = arguments(__doc__)
    steps, rounds = (4, 1) if args.quick else (30, 5)
    emulator.device()
    warnings.simplefilter("ignore")  # the stacks' notices on a host without a GPU
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    result: dict[str, object] = {"torch": torch.__version__, "threads": torch.get_num_threads(), "steps": steps,
                                 "rounds": rounds}
    for name, (needs, make) in STACKS.items():
        missing = [m for m in needs if not _installed(m)]
        if missing:
            print(f"{name}: left out ({', '.join(missing)} not installed)")
            continue
        runs = {device: make(device, steps) for device in ("cpu", emulator.NAME)}
        for run in runs.values():
            run()  # warm-up: imports, first allocations
        times: dict[str, list[float]] = {"cpu": [], emulator.NAME: []}
        for _ in range(rounds):
            for device, run in runs.items():
                times[device].append(run())
        cpu, emu = statistics.median(times["cpu"]), statistics.median(times[emulator.NAME])
        ratios = [e / c for c, e in zip(times["cpu"], times[emulator.NAME], strict=True)]
        result[name] = {"step_cpu_ms": round(cpu * 1e3, 2), "step_emulated_ms": round(emu * 1e3, 2),
                        "ratio": round(emu / cpu, 3), "ratio_spread": [round(min(ratios), 3), round(max(ratios), 3)]}
        print(f"{name}: one step on emulated {emu * 1e3:.1f} ms, on cpu {cpu * 1e3:.1f} ms, "
              f"ratio {emu / cpu:.2f}x ({min(ratios):.2f}-{max(ratios):.2f})")
    write("stacks", result, args.save)


def _installed(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


if __name__ == "__main__":
    main()
