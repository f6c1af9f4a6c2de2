"""One Adam training step on the emulated device vs on CPU, for MLPs from ~1K to ~50M parameters.

    python benchmarks/bench_step.py [--quick] [--repeats N] [--save]

Each model is `Linear(w, 2w) -> ReLU -> Linear(2w, w) -> ReLU -> Linear(w, 10)` on a batch of 64
(w = 512 is the ~1M-parameter model the README quotes). For each size the same step runs on CPU and
on the emulated device in one process, one step of each in turn (which goes first alternates), so
the machine's drift hits both alike. Each round times N steps of each (default: as many as fit in
about half a second, 3 to 30) and keeps their medians; the ratio of a round is emulated over CPU.
Reported: the median over rounds, with the lowest and highest round's ratio.
--quick measures three small sizes in two rounds of two steps: it checks that the script works.
Results go to benchmarks/out/step.json (ignored by git) unless --save replaces the recorded
benchmarks/results/step.json. Its top-level figures are the ~1M model's (target: at most 1.05x CPU).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import nn

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # this checkout's samedevice

from samedevice import emulator  # noqa: E402

WIDTHS = [16, 48, 156, 512, 1580, 3536]  # ~1.2K, ~10K, ~100K, ~1.06M, ~10M, ~50M parameters
QUICK_WIDTHS = [16, 156, 512]
README_WIDTH = 512  # the model whose figures stay at the top level of step.json


def make_step(width: int, device: torch.device) -> tuple[int, Callable[[], None]]:
    """The number of parameters of the MLP of this width, and one Adam step of it on `device`."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(width, 2 * width), nn.ReLU(), nn.Linear(2 * width, width), nn.ReLU(),
                          nn.Linear(width, 10)).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    x = torch.randn(64, width).to(device)
    y = torch.randint(0, 10, (64,)).to(device)

    def step() -> None:
        optimizer.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        optimizer.step()

    return sum(p.numel() for p in model.parameters()), step


def timed(step: Callable[[], None]) -> float:
    t0 = time.perf_counter()
    step()
    return time.perf_counter() - t0


def measure(width: int, rounds: int, repeats: int | None) -> dict[str, Any]:
    """One size: `rounds` rounds of `repeats` steps on each device, one after the other (CPU first
    in even steps, emulated first in odd ones); per round the median of each and their ratio."""
    n_params, cpu_step = make_step(width, torch.device("cpu"))
    _, emu_step = make_step(width, emulator.device())
    for step in (cpu_step, emu_step, cpu_step, emu_step):  # warm-up: optimizer state, allocator
        step()
    if repeats is None:  # as many steps as fit in about half a second, 3 to 30
        repeats = max(3, min(30, int(0.5 / max(timed(emu_step), 1e-6))))
    cpu, emu = [], []
    for _ in range(rounds):
        times: dict[Callable[[], None], list[float]] = {cpu_step: [], emu_step: []}
        for i in range(repeats):
            for step in (cpu_step, emu_step) if i % 2 == 0 else (emu_step, cpu_step):
                times[step].append(timed(step))
        cpu.append(statistics.median(times[cpu_step]))
        emu.append(statistics.median(times[emu_step]))
    ratios = [e / c for e, c in zip(emu, cpu)]
    return {
        "width": width, "parameters": n_params, "repeats": repeats,
        "cpu_ms": round(statistics.median(cpu) * 1e3, 3),
        "emulated_ms": round(statistics.median(emu) * 1e3, 3),
        "ratio": round(statistics.median(ratios), 3),
        "ratio_spread": [round(min(ratios), 3), round(max(ratios), 3)],
    }


def main(argv: list[str] | None = None) -> Path:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="three small sizes, two rounds: checks the script works")
    parser.add_argument("--repeats", type=int, help="steps timed per round and device (default: about 0.5 s' worth)")
    parser.add_argument("--save", action="store_true", help="replace the recorded results/step.json")
    args = parser.parse_args(argv)
    widths, rounds = (QUICK_WIDTHS, 2) if args.quick else (WIDTHS, 7)
    repeats = args.repeats or (2 if args.quick else None)
    rows = []
    print(f"one Adam step, emulated / CPU, median of {rounds} interleaved rounds (lowest-highest round):")
    for width in widths:
        row = measure(width, rounds, repeats)
        rows.append(row)
        print(f"  {row['parameters']:>11,} parameters: cpu {row['cpu_ms']:9.3f} ms, emulated "
              f"{row['emulated_ms']:9.3f} ms, ratio {row['ratio']:.3f}x ({row['ratio_spread'][0]:.3f}-"
              f"{row['ratio_spread'][1]:.3f})")
    readme = next(row for row in rows if row["width"] == README_WIDTH)
    result = {
        **{key: readme[key] for key in ("parameters", "cpu_ms", "emulated_ms", "ratio")},
        "sizes": rows, "rounds": rounds,
        "torch": torch.__version__, "threads": torch.get_num_threads(), "cpus": os.cpu_count(),
    }
    out = HERE / ("results" if args.save else "out") / "step.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"the {readme['parameters']:,}-parameter model: ratio {readme['ratio']:.3f}x (target <= 1.05x)")
    print(f"wrote {out}")
    return out


if __name__ == "__main__":
    main()
