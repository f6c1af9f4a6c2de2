"""fixes/optimizer_to.py's `optimizer_to` against the floor and the loops people write, in one process.

    python benchmarks/bench_optimizer_to.py [--quick] [--save] [--clock cpu|wall]

An Adam's state (`step`, `exp_avg`, `exp_avg_sq` per parameter) is put on the wrong device and moved
to its parameters' device, both ways: CPU state to emulated parameters, and emulated state to CPU
parameters. Four movers, timed interleaved (a different order each round), medians with min/max:
- floor:   a plain `[t.to(device) for t in moments]` over the same moment tensors, nothing else
- helper:  optimizer_to(optimizer)
- article: the 002 article's rescue loop, every tensor to the device, `step` included
- trainer: the same loop skipping `step` (what training libraries do)
States from 1 MiB to 256 MiB of moments, in 10 to 10,000 moment tensors, 5 rounds or as many more
(up to 100) as fit in 10 s (a round includes its garbage collections). Goal: helper <= 1.1x floor.
A run's time is the process's CPU time by default (all its threads): on a machine shared with other
work, the wall clock also counts the time the process waited for a core, which swamps differences of
a few percent; `--clock wall` measures that instead. PyTorch runs on one thread here (the same copies
for every mover, and no idle workers spinning).
Results go to benchmarks/out/ (ignored by git) unless --save writes benchmarks/results/optimizer_to.json.
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


from benchmarks.common import arguments, write  # noqa: E402
from fixes.optimizer_to import optimizer_to  # noqa: E402
from samedevice import emulator  # noqa: E402


def setup(total: int, count: int, state_on: torch.device, params_on: torch.device) -> tuple[Any, Callable[[], None]]:
    """An Adam whose `count` moment tensors (`total` bytes) sit on `state_on`, and a reset that puts
    the very same tensors back after a mover has replaced them."""
    numel = max(1, total // (4 * count))
    params = [torch.zeros(numel, device=params_on, requires_grad=True) for _ in range(count // 2)]
    optimizer = torch.optim.Adam(params, lr=1e-3)
    original = {p: {"step": torch.tensor(1.0), "exp_avg": torch.zeros(numel, device=state_on),
                    "exp_avg_sq": torch.zeros(numel, device=state_on)} for p in params}

    def reset() -> None:
        for p, state in original.items():
            optimizer.state[p] = dict(state)

    reset()
    return optimizer, reset


def movers(optimizer: torch.optim.Optimizer, device: torch.device) -> dict[str, Callable[[], Any]]:
    moments = [t for state in optimizer.state.values() for k, t in state.items() if k != "step"]

    def floor() -> Any:
        return [t.to(device) for t in moments]

    def article() -> None:
        for p_state in optimizer.state.values():
            for k, v in p_state.items():
                if torch.is_tensor(v):
                    p_state[k] = v.to(device)

    def trainer() -> None:
        for p_state in optimizer.state.values():
            for k, v in p_state.items():
                if k != "step" and torch.is_tensor(v):
                    p_state[k] = v.to(device)

    return {"floor": floor, "helper": lambda: optimizer_to(optimizer), "article": article, "trainer": trainer}


def measure(total: int, count: int, state_on: torch.device, params_on: torch.device, rounds: int,
            seconds: float, clock: Callable[[], float]) -> dict[str, Any]:
    """At least `rounds` rounds, more (up to 100) where they fit in `seconds`: a state of a few
    milliseconds is at the mercy of every other process on the machine, and many rounds' median is not."""
    optimizer, reset = setup(total, count, state_on, params_on)
    runs = movers(optimizer, params_on)
    times: dict[str, list[float]] = {name: [] for name in runs}
    names = list(runs)
    r, warm_up = 0, time.perf_counter()
    while r <= rounds:  # round 0 warms up and is dropped
        if r == 1:
            rounds = max(rounds, min(100, int(seconds / (time.perf_counter() - warm_up))))
        for name in names[r % len(names):] + names[: r % len(names)]:
            reset()
            gc.collect()
            gc.disable()  # as timeit does: a collection would land in whichever mover runs then
            t0 = clock()
            moved = runs[name]()  # held until the clock stops: freeing the floor's copies is not moving them
            elapsed = clock() - t0
            del moved
            gc.enable()
            if r:
                times[name].append(elapsed)
        r += 1
    reset()
    optimizer_to(optimizer)
    assert all(t.device == params_on for s in optimizer.state.values() for k, t in s.items() if k != "step")
    med = statistics.median
    row: dict[str, Any] = {"mib": total / 2**20, "tensors": count, "rounds": rounds}
    for name, values in times.items():
        row[f"{name}_ms"] = round(med(values) * 1e3, 3)
        row[f"{name}_ratio"] = round(med(values) / med(times["floor"]), 3)
        row[f"{name}_ratio_spread"] = [round(min(values) / max(times["floor"]), 3),
                                       round(max(values) / min(times["floor"]), 3)]
    return row


CLOCKS = {"cpu": time.process_time, "wall": time.perf_counter}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clock", choices=sorted(CLOCKS), default="cpu",
                        help="what a run's time is: the process's CPU time (default) or the wall clock")
    args = arguments(__doc__, parser)
    # one thread: the movers make the same copies, and worker threads spinning between ops would count
    # in the process's CPU time
    torch.set_num_threads(1)
    sizes, counts, rounds, seconds = ([1, 8], [10, 1000], 3, 0.0) if args.quick else \
        ([1, 16, 256], [10, 100, 10_000], 5, 10.0)
    cpu, dev = torch.device("cpu"), emulator.device()
    result: dict[str, Any] = {"torch": torch.__version__, "cpus": os.cpu_count(), "rounds": rounds,
                              "clock": args.clock, "threads": torch.get_num_threads()}
    for label, state_on, params_on in (("to_emulated", cpu, dev), ("to_cpu", dev, cpu)):
        rows = []
        for mib in sizes:
            for count in counts:
                row = measure(mib * 2**20, count, state_on, params_on, rounds, seconds, CLOCKS[args.clock])
                rows.append(row)
                ratios = ", ".join(f"{n} {row[f'{n}_ratio']:.3f}x" for n in ("helper", "article", "trainer"))
                print(f"{label:12} {mib:4} MiB {count:6} tensors: floor {row['floor_ms']:9.3f} ms, {ratios}"
                      "  (goal helper <= 1.1x)")
        result[label] = rows
    write("optimizer_to", result, args.save)


if __name__ == "__main__":
    main()
