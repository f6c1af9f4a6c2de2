"""One training step of a ~1M-parameter MLP on the emulated device vs on CPU, in one process.

    python benchmarks/bench_step.py [--repeats 30] [--save]

Prints the median step time of each and their ratio (target: emulated at most 1.5x CPU), and
writes the figures to benchmarks/out/step.json, which git ignores. With --save they replace the
recorded figures, benchmarks/results/step.json, which docs and the README quote.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch
from torch import nn

from samedevice import emulator


def make_step(device: torch.device):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(512, 1024), nn.ReLU(), nn.Linear(1024, 512), nn.ReLU(), nn.Linear(512, 10))
    model.to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    x = torch.randn(64, 512).to(device)
    y = torch.randint(0, 10, (64,)).to(device)

    def step() -> None:
        optimizer.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        optimizer.step()

    return model, step


def median_seconds(step, repeats: int) -> float:
    for _ in range(3):
        step()  # warm-up: optimizer state, allocator
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


HERE = Path(__file__).parent


def main(argv: list[str] | None = None) -> Path:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--save", action="store_true", help="replace the recorded results/step.json")
    args = parser.parse_args(argv)
    torch.set_num_threads(max(1, torch.get_num_threads()))
    model, cpu_step = make_step(torch.device("cpu"))
    n_params = sum(p.numel() for p in model.parameters())
    _, emu_step = make_step(emulator.device())
    # interleave the two measurements so machine noise hits both alike
    cpu, emu = [], []
    for _ in range(3):
        cpu.append(median_seconds(cpu_step, args.repeats))
        emu.append(median_seconds(emu_step, args.repeats))
    result = {
        "parameters": n_params,
        "cpu_ms": round(statistics.median(cpu) * 1e3, 3),
        "emulated_ms": round(statistics.median(emu) * 1e3, 3),
        "ratio": round(statistics.median(emu) / statistics.median(cpu), 3),
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
    }
    out = HERE / ("results" if args.save else "out") / "step.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"MLP with {n_params:,} parameters, one Adam step, median of {args.repeats} x 3:")
    print(f"  cpu       {result['cpu_ms']:8.3f} ms")
    print(f"  emulated  {result['emulated_ms']:8.3f} ms")
    print(f"  ratio     {result['ratio']:8.3f}x   (target <= 1.5x)")
    print(f"wrote {out}")
    return out


if __name__ == "__main__":
    main()
