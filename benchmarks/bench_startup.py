"""What a learner waits for: the command line's answers, `pytest -k sgd`, and the default suite.

    python benchmarks/bench_startup.py [--quick] [--save] [--rounds N] [--suite]

Each command is a fresh process (as a person starts it), timed by the wall clock from start to exit,
run round after round, the commands interleaved, so the machine's drift hits all alike; medians with
min/max. Beside them, the floors no code of same-device can go below, measured the same way:
- `import torch`: the interpreter starting, importing torch and exiting;
- `torch + optimizer`: the same plus the first `torch.optim` optimizer a process builds, which
  imports torch._dynamo (PyTorch's `_disable_dynamo` does, on first use): any test of a training
  step pays it, on CPU as much as on the device.
`--suite` adds one run of the default suite (`python -m pytest -q`), its wall clock and the time
pytest reports. The commands run from the repository root, bytecode caching on (as on a user's
machine: PYTHONDONTWRITEBYTECODE is cleared for them), after one warm-up run each.
Results go to benchmarks/out/ (ignored by git) unless --save writes benchmarks/results/startup.json.
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.common import arguments, write  # noqa: E402

PY = sys.executable
COMMANDS = {
    "samedevice --help": [PY, "-m", "samedevice", "--help"],
    "samedevice list": [PY, "-m", "samedevice", "list"],
    "samedevice show sgd_momentum": [PY, "-m", "samedevice", "show", "sgd_momentum"],
    "usage error (show sgd)": [PY, "-m", "samedevice", "show", "sgd"],
    "samedevice copy optimizer_to": [PY, "-m", "samedevice", "copy", "optimizer_to", "--force",
                                     str(ROOT / "benchmarks" / "out" / "copied")],
    "pytest -k sgd": [PY, "-m", "pytest", "-q", "-k", "sgd"],
    "floor: import torch": [PY, "-c", "import torch"],
    "floor: torch + optimizer": [PY, "-c", "import torch; torch.optim.SGD([torch.zeros(1, requires_grad=True)])"],
}
QUICK = ["samedevice --help", "samedevice list", "floor: import torch"]
GOALS = {"samedevice --help": 0.5, "samedevice list": 0.5, "samedevice show sgd_momentum": 0.5,
         "usage error (show sgd)": 0.5, "samedevice copy optimizer_to": 0.5, "pytest -k sgd": 5.0}


def environment() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["HF_HUB_OFFLINE"] = "1"
    return env


def timed(argv: list[str]) -> float:
    start = time.perf_counter()
    run = subprocess.run(argv, cwd=ROOT, env=environment(), capture_output=True, text=True, timeout=600)
    elapsed = time.perf_counter() - start
    if run.returncode not in (0, 2):  # 2: the usage error, on purpose
        raise SystemExit(f"{' '.join(argv)} failed ({run.returncode}):\n{run.stdout[-2000:]}{run.stderr[-2000:]}")
    return elapsed


def suite() -> dict[str, float]:
    start = time.perf_counter()
    run = subprocess.run([PY, "-m", "pytest", "-q"], cwd=ROOT, env=environment(), capture_output=True, text=True,
                         timeout=1800)
    wall = time.perf_counter() - start
    last = run.stdout.strip().splitlines()[-1] if run.stdout.strip() else ""
    reported = re.search(r" in ([\d.]+)s", last)
    if run.returncode != 0 or reported is None:
        raise SystemExit(f"the suite failed ({run.returncode}): {last}\n{run.stderr[-2000:]}")
    return {"wall_s": round(wall, 1), "pytest_s": float(reported.group(1)), "summary": last}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5, help="rounds of every command (default 5)")
    parser.add_argument("--suite", action="store_true", help="also time one run of the default suite")
    args = arguments(__doc__, parser)
    names = QUICK if args.quick else list(COMMANDS)
    rounds = 1 if args.quick else args.rounds
    (ROOT / "benchmarks" / "out").mkdir(parents=True, exist_ok=True)
    for name in names:  # warm-up: bytecode caches written, the emulator's guard built
        timed(COMMANDS[name])
    times: dict[str, list[float]] = {name: [] for name in names}
    for r in range(rounds):
        order = names[r % len(names):] + names[:r % len(names)]
        for name in order:
            times[name].append(timed(COMMANDS[name]))
    result: dict[str, object] = {
        "host": f"{os.cpu_count()} cores, {platform.machine()}, Python {platform.python_version()}",
        "load_average_at_start": os.getloadavg()[0] if hasattr(os, "getloadavg") else None,
        "rounds": rounds,
        "commands": {name: {"median_s": round(statistics.median(ts), 3), "min_s": round(min(ts), 3),
                            "max_s": round(max(ts), 3), "goal_s": GOALS.get(name)} for name, ts in times.items()},
    }
    print(f"{'command':34} {'median':>8} {'min':>7} {'max':>7}  goal")
    for name, row in result["commands"].items():  # type: ignore[union-attr]
        goal = f"<= {row['goal_s']} s" if row["goal_s"] else ""
        print(f"{name:34} {row['median_s']:7.2f}s {row['min_s']:6.2f}s {row['max_s']:6.2f}s  {goal}")
    if args.suite and not args.quick:
        result["suite"] = suite()
        print(f"default suite: {result['suite']['wall_s']} s wall ({result['suite']['summary']})")  # type: ignore[index]
    write("startup", result, args.save)


if __name__ == "__main__":
    main()
