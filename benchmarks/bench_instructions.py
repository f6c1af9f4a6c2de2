"""The emulator's own cost in instructions, which a busy machine does not blur.

    python benchmarks/bench_instructions.py [--quick] [--save] [--functions]

Timings on a shared machine spread run to run (bench_dispatch.py's medians moved by half between runs);
callgrind counts the instructions a piece of code executes, the same on every run. This script runs itself
under `valgrind --tool=callgrind` (one process) and counts, between client requests (valgrind/callgrind.h,
through a tiny C helper compiled here), each region repeated `steps` times after a warm-up:
- one small add (two 16-element tensors): CPU's, and the emulated device's;
- one Adam step of a tiny MLP (bench_dispatch.tiny_step), with the autograd engine's thread hand-off taken
  out of both sides (`torch.autograd.set_multithreading_enabled(False)`): CPU's, and the emulated device's;
- the same for bench_step.py's ~1M-parameter MLP (a quarter of the repetitions).
All on one intra-op thread: OpenMP's idle workers spin while one works, and under callgrind their spin-waits,
which depend on timing, would count as instructions.
The ratios are the emulator's own work beside CPU's. Instructions are not time: cache misses, a thread's
wake-up (the hand-off a device's backward takes, as CUDA's does) and a busy machine's waits are not
counted, so these ratios say what the emulator's code costs, and bench_dispatch.py what a run takes.
`--functions` prints the emulated step's costliest functions (callgrind_annotate), where the work goes.

Needs valgrind, its headers and a C compiler; without them it says so in one line and exits 0.
Results go to benchmarks/out/instructions.json unless --save writes benchmarks/results/instructions.json.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.common import arguments, write  # noqa: E402

HELPER = r"""
#include <valgrind/callgrind.h>
void sd_start(void) { CALLGRIND_ZERO_STATS; CALLGRIND_TOGGLE_COLLECT; }
void sd_stop(const char* label) { CALLGRIND_TOGGLE_COLLECT; CALLGRIND_DUMP_STATS_AT(label); }
"""
REGIONS = ("add_cpu", "add_emulated", "step_cpu", "step_emulated", "step_1m_cpu", "step_1m_emulated")


def measure(helper: str, steps: int) -> None:
    """Under callgrind: count each region, `steps` repetitions after a warm-up."""
    import torch

    from benchmarks.bench_dispatch import tiny_step
    from benchmarks.bench_step import README_WIDTH, make_step
    from samedevice import emulator

    torch.set_num_threads(1)
    lib = ctypes.CDLL(helper)
    device = emulator.device()
    a, b = torch.randn(16), torch.randn(16)
    da, db = a.to(device), b.to(device)
    with torch.autograd.set_multithreading_enabled(False):
        work = {"add_cpu": lambda: a + b, "add_emulated": lambda: da + db,
                "step_cpu": tiny_step(torch.device("cpu")), "step_emulated": tiny_step(device),
                "step_1m_cpu": make_step(README_WIDTH, torch.device("cpu"))[1],
                "step_1m_emulated": make_step(README_WIDTH, device)[1]}
        for name in REGIONS:
            run = work[name]
            for _ in range(3):
                run()
            lib.sd_start()
            for _ in range(_repeats(name, steps)):
                run()
            lib.sd_stop(name.encode())


def _repeats(region: str, steps: int) -> int:
    """The 1M-parameter step is a thousand times the tiny one's work: a quarter of the repetitions."""
    return max(1, steps // 4) if region.startswith("step_1m") else steps


def _build_helper(folder: Path) -> str | None:
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None or not Path("/usr/include/valgrind/callgrind.h").exists():
        return None
    source = folder / "helper.c"
    source.write_text(HELPER)
    library = folder / "helper.so"
    subprocess.run([compiler, "-O1", "-shared", "-fPIC", "-o", str(library), str(source)], check=True)
    return str(library)


def _counts(folder: Path) -> dict[str, dict[str, Any]]:
    """The instructions of each region's dump (callgrind writes one file per client request's dump)."""
    found: dict[str, dict[str, Any]] = {}
    for path in folder.glob("callgrind.out.*"):
        text = path.read_text(errors="replace")
        label = re.search(r"^desc: Trigger: Client Request: (\w+)", text, flags=re.M)
        total = re.search(r"^(?:summary|totals): (\d+)", text, flags=re.M)
        if label and total and label.group(1) in REGIONS:
            found[label.group(1)] = {"instructions": int(total.group(1)), "file": path}
    return found


def main() -> None:
    if "--inner" in sys.argv:
        measure(sys.argv[sys.argv.index("--helper") + 1], int(sys.argv[sys.argv.index("--steps") + 1]))
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--functions", action="store_true", help="print the emulated step's costliest functions")
    args = arguments(__doc__, parser)
    steps = 2 if args.quick else 20
    if shutil.which("valgrind") is None:
        print("bench_instructions: valgrind is not installed here; nothing measured")
        return
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        helper = _build_helper(folder)
        if helper is None:
            print("bench_instructions: no C compiler or no valgrind/callgrind.h here; nothing measured")
            return
        command = ["valgrind", "--tool=callgrind", "--collect-atstart=no",
                   f"--callgrind-out-file={folder / 'callgrind.out.%p'}",
                   sys.executable, __file__, "--inner", "--helper", helper, "--steps", str(steps)]
        # one intra-op thread: under callgrind OpenMP's idle workers spin, and their spin-waits, which depend on
        # timing, would count as instructions
        env = dict(os.environ, PYTHONHASHSEED="0", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
        done = subprocess.run(command, capture_output=True, text=True, env=env, cwd=ROOT)
        if done.returncode != 0:
            sys.exit(f"bench_instructions: the measured process failed:\n{done.stderr[-3000:]}")
        counts = _counts(folder)
        missing = [r for r in REGIONS if r not in counts]
        if missing:
            sys.exit(f"bench_instructions: no count for {missing} (callgrind's dumps: {sorted(folder.iterdir())})")
        per = {r: counts[r]["instructions"] / _repeats(r, steps) for r in REGIONS}
        result = {
            "steps": steps,
            "add_cpu_instructions": round(per["add_cpu"]),
            "add_emulated_instructions": round(per["add_emulated"]),
            "add_ratio": round(per["add_emulated"] / per["add_cpu"], 3),
            "step_cpu_instructions": round(per["step_cpu"]),
            "step_emulated_instructions": round(per["step_emulated"]),
            "step_ratio": round(per["step_emulated"] / per["step_cpu"], 3),
            "step_1m_cpu_instructions": round(per["step_1m_cpu"]),
            "step_1m_emulated_instructions": round(per["step_1m_emulated"]),
            "step_1m_ratio": round(per["step_1m_emulated"] / per["step_1m_cpu"], 3),
        }
        print(f"small add:  cpu {result['add_cpu_instructions']:>9,} instructions, emulated "
              f"{result['add_emulated_instructions']:>9,}: {result['add_ratio']:.2f}x (target 2x)")
        print(f"tiny step:  cpu {result['step_cpu_instructions']:>9,} instructions, emulated "
              f"{result['step_emulated_instructions']:>9,}: {result['step_ratio']:.2f}x (target 1.5x; the autograd "
              "hand-off out of both sides)")
        print(f"1M step:    cpu {result['step_1m_cpu_instructions']:>11,} instructions, emulated "
              f"{result['step_1m_emulated_instructions']:>11,}: {result['step_1m_ratio']:.2f}x (target 1.05x)")
        if args.functions and shutil.which("callgrind_annotate"):
            table = subprocess.run(["callgrind_annotate", "--inclusive=no", str(counts["step_emulated"]["file"])],
                                   capture_output=True, text=True).stdout
            print("\n".join(table.splitlines()[:60]))
    write("instructions", result, args.save)


if __name__ == "__main__":
    main()
