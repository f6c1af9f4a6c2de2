"""Resume memory: fixes/checkpoint.py's `resume` against the loads people write, on the emulated device.

    python benchmarks/bench_resume.py [--quick] [--save]

An Adam-trained MLP at three sizes is saved once with `save_checkpoint`; then each pattern resumes it
into a freshly built model (on CPU) and a fresh Adam, ending with everything on the emulated device:
- helper:       resume(path, model=..., optimizer=..., device=dev)
- map_device:   model.to(dev); torch.load(map_location=dev); load_state_dict x2
- map_cpu:      model.to(dev); torch.load(map_location="cpu"); load_state_dict x2
- map_cpu_mmap: the same with mmap=True
Two figures per run:
- device peak over the final state: emulator.max_memory_allocated / memory_allocated after the resume.
- host peak anonymous memory over the baseline taken just before the resume, in MiB: RssAnon from
  /proc/self/status minus the emulated device's allocated bytes (the emulator keeps device memory in
  host memory, and that part is the device's), sampled every millisecond by a thread. RssAnon leaves
  out file-backed pages, which the kernel can drop (an mmap'd checkpoint), so they are not counted.
Each run is a fresh process (no allocator reuse from an earlier pattern), and the runs are interleaved
pattern by pattern, round after round, so the machine's drift hits all alike; medians with min/max.
Results go to benchmarks/out/ (ignored by git) unless --save writes benchmarks/results/resume.json.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import torch
from torch import nn

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


from benchmarks.common import arguments, write  # noqa: E402
from fixes.checkpoint import resume, save_checkpoint  # noqa: E402
from samedevice import emulator  # noqa: E402

PATTERNS = ["helper", "map_device", "map_cpu", "map_cpu_mmap"]


def mlp(width: int) -> nn.Module:
    return nn.Sequential(nn.Linear(width, width), nn.ReLU(), nn.Linear(width, width), nn.ReLU(),
                         nn.Linear(width, width))


def rss_anon() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("RssAnon:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no RssAnon in /proc/self/status")


class HostPeak:
    """Peak of RssAnon minus emulated device memory, sampled every millisecond in a thread."""

    def __init__(self, dev: torch.device) -> None:
        self.dev, self.peak, self._stop = dev, 0, threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def host(self) -> int:
        return rss_anon() - emulator.memory_allocated(self.dev)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, self.host())
            time.sleep(0.001)

    def __enter__(self) -> HostPeak:
        self.peak = self.host()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.peak = max(self.peak, self.host())
        self._stop.set()
        self._thread.join()


def apply(pattern: str, path: Path, model: nn.Module, dev: torch.device) -> torch.optim.Optimizer:
    """Resume `path` into `model` and a fresh Adam by `pattern`, ending on `dev`; return the Adam."""
    if pattern == "helper":
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
        resume(path, model=model, optimizer=optimizer, device=dev)
        return optimizer
    model.to(dev)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    location = dev if pattern == "map_device" else "cpu"
    checkpoint = torch.load(path, map_location=location, weights_only=True, mmap=pattern == "map_cpu_mmap")
    model.load_state_dict(checkpoint["model"])
    optimizer.load_state_dict(checkpoint["optimizer"])
    return optimizer


def run_pattern(pattern: str, path: Path, width: int) -> dict[str, float]:
    """One resume in this process; returns the device ratio and the host peak in MiB."""
    dev = emulator.device()
    with tempfile.TemporaryDirectory() as folder:  # warm-up: lazy imports and first-use tables
        make_checkpoint(Path(folder) / "warm.pt", 8)
        apply(pattern, Path(folder) / "warm.pt", mlp(8), dev)
    torch.manual_seed(1)
    model = mlp(width)
    gc.collect()
    baseline = rss_anon() - emulator.memory_allocated(dev)
    emulator.reset_peak_memory_stats(dev)
    with HostPeak(dev) as host:
        optimizer = apply(pattern, path, model, dev)
        gc.collect()
    final = emulator.memory_allocated(dev)
    assert final >= 3 * sum(p.nbytes for p in model.parameters()), "the model and Adam's two moments on the device"
    del optimizer
    return {"device_ratio": emulator.max_memory_allocated(dev) / final,
            "host_peak_mib": (host.peak - baseline) / 2**20, "final_mib": final / 2**20}


def make_checkpoint(path: Path, width: int) -> int:
    torch.manual_seed(0)
    model = mlp(width)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    model(torch.randn(4, width)).square().mean().backward()
    optimizer.step()  # Adam's state: step, exp_avg, exp_avg_sq for every parameter
    save_checkpoint(path, model=model, optimizer=optimizer)
    return path.stat().st_size


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--child", nargs=3, metavar=("PATTERN", "PATH", "WIDTH"), help=argparse.SUPPRESS)
    args = arguments(__doc__, parser)
    if args.child:
        pattern, path, width = args.child
        print(json.dumps(run_pattern(pattern, Path(path), int(width))))
        return
    widths, rounds = ([64, 128, 256], 1) if args.quick else ([512, 1448, 2896], 2)
    med = statistics.median
    sizes: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as folder:
        for width in widths:
            path = Path(folder) / f"mlp{width}.pt"
            nbytes = make_checkpoint(path, width)
            runs: dict[str, list[dict[str, float]]] = {p: [] for p in PATTERNS}
            for _ in range(rounds):
                for pattern in PATTERNS:
                    out = subprocess.run([sys.executable, __file__, "--child", pattern, str(path), str(width)],
                                         check=True, capture_output=True, text=True, env={**os.environ}).stdout
                    runs[pattern].append(json.loads(out.splitlines()[-1]))
            row: dict[str, Any] = {"width": width, "params": sum(p.numel() for p in mlp(width).parameters()),
                                   "checkpoint_mib": round(nbytes / 2**20, 2)}
            for pattern, results in runs.items():
                for key in ("device_ratio", "host_peak_mib"):
                    values = [r[key] for r in results]
                    row[f"{pattern}.{key}"] = round(med(values), 3)
                    row[f"{pattern}.{key}_spread"] = [round(min(values), 3), round(max(values), 3)]
            sizes.append(row)
            naive = min(row[f"{p}.host_peak_mib"] for p in PATTERNS[1:])
            print(f"{row['checkpoint_mib']:8.1f} MiB checkpoint: " + ", ".join(
                f"{p} device {row[f'{p}.device_ratio']:.3f}x host {row[f'{p}.host_peak_mib']:+.1f} MiB"
                for p in PATTERNS) + f"  | goal: helper device <= 1.02x, host <= {naive:.1f} MiB")
    result = {"sizes": sizes, "rounds": rounds, "torch": torch.__version__, "cpus": os.cpu_count()}
    write("resume", result, args.save)


if __name__ == "__main__":
    main()
