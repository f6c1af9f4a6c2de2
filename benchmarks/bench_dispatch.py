"""The emulator's dispatch cost against the floor, in one process.

    python benchmarks/bench_dispatch.py [--quick] [--save]

The floor is a trivial `__torch_dispatch__` wrapper written below (unwrap, run, rewrap, nothing
else): what any Python tensor subclass pays per op. Two measurements, interleaved so the machine's
drift hits both alike, medians of repeated runs:
- per small op (an add of two 16-element tensors): emulated vs the floor.
- one Adam step of a tiny MLP (4 -> 8 -> 2): emulated vs CPU. Target: at most 1.5x. The same step with
  the trivial wrapper's tensors as parameters and data is measured too: what any Python tensor
  subclass pays for that step, the floor under the emulated one.
- one op inside autocast (a bfloat16 linear of float32 inputs, so autocast casts both): under
  torch.autocast("emulated") on the device vs under torch.autocast("cpu") on CPU, each backend's policy
  casting the same inputs.
- per small op against CPU's own add: the target is at most 2x CPU (and a tiny step at most 1.5x).
- the tiny step again with the autograd engine's thread hand-off taken out of both sides
  (`torch.autograd.set_multithreading_enabled(False)`: the backward runs on the calling thread, on CPU
  and on the device alike): the emulator's own cost, against every CPU sample (on CPU the toggle
  changes nothing). Each CPU/device pair alternates its order round by round. With the hand-off in,
  PyTorch's engine hands a device's backward to that device's worker thread and back, as it does for
  CUDA; a trivial backward on both devices shows that cost, and the machine's own thread round trip
  (two threads passing a condition variable, C++, when a compiler is there) its order of magnitude.
Results go to benchmarks/out/ (ignored by git) unless --save writes the recorded
benchmarks/results/dispatch_native.json (dispatch.json is the first design's last record).
"""

from __future__ import annotations

import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
from torch import nn

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # this checkout's samedevice, and benchmarks.common

from benchmarks.common import arguments, write  # noqa: E402
from samedevice import emulator  # noqa: E402


class Floor(torch.Tensor):
    """The trivial wrapper: unwrap, run CPU's kernel, rewrap (no __torch_function__ layer either, as
    the emulated tensor has none)."""

    __torch_function__ = torch._C._disabled_torch_function_impl  # type: ignore[assignment]

    @staticmethod
    def __new__(cls, elem: torch.Tensor) -> Floor:
        r = torch.Tensor._make_wrapper_subclass(cls, elem.size(), strides=elem.stride(), dtype=elem.dtype,
                                                device=elem.device, requires_grad=elem.requires_grad)
        r.elem = elem
        return r

    @classmethod
    def __torch_dispatch__(cls, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        unwrap = lambda x: x.elem if isinstance(x, Floor) else x  # noqa: E731
        out = func(*[unwrap(a) for a in args], **{k: unwrap(v) for k, v in (kwargs or {}).items()})
        return Floor(out) if isinstance(out, torch.Tensor) else out


def per_call(fn: Any, n: int) -> float:
    """Median seconds per call of fn over 5 batches of n calls."""
    fn()
    batches = []
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        batches.append((time.perf_counter() - t0) / n)
    return statistics.median(batches)


def tiny_step(device: torch.device | None) -> Any:
    """One Adam step of a tiny MLP on `device`, or with the trivial wrapper's tensors when None (on
    CPU, so Adam takes its per-tensor loop, as on CPU)."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    x, y = torch.randn(16, 4), torch.randn(16, 2)
    if device is None:
        for module in model.modules():
            for name, p in list(module.named_parameters(recurse=False)):
                setattr(module, name, nn.Parameter(Floor(p.detach().clone())))
        x, y = Floor(x), Floor(y)
    else:
        model.to(device)
        x, y = x.to(device), y.to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)

    def step() -> None:
        optimizer.zero_grad()
        nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()

    return step


ROUND_TRIP = r"""
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <thread>
int main() {
  std::mutex m; std::condition_variable cv; int turn = 0; const int n = 20000;
  std::thread other([&] { for (int i = 0; i < n; i++) { std::unique_lock<std::mutex> l(m);
    cv.wait(l, [&] { return turn == 1; }); turn = 0; cv.notify_all(); } });
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < n; i++) { std::unique_lock<std::mutex> l(m); turn = 1; cv.notify_all();
    cv.wait(l, [&] { return turn == 0; }); }
  auto t1 = std::chrono::steady_clock::now();
  other.join();
  std::printf("%.2f\n", std::chrono::duration<double, std::micro>(t1 - t0).count() / n);
}
"""


def thread_round_trip_us() -> float | None:
    """Microseconds for one thread to wake another and be woken back (a condition variable each way,
    as the autograd engine's ready queues do), or None without a C++ compiler."""
    if shutil.which("g++") is None:
        return None
    with tempfile.TemporaryDirectory() as tmp:
        source, binary = Path(tmp, "round_trip.cpp"), Path(tmp, "round_trip")
        source.write_text(ROUND_TRIP)
        subprocess.run(["g++", "-O2", "-pthread", str(source), "-o", str(binary)], check=True)
        return float(subprocess.run([str(binary)], capture_output=True, text=True, check=True).stdout)


def trivial_backward(device: torch.device) -> Any:
    leaf = torch.ones(3, device=device, requires_grad=True)
    return lambda: leaf.sum().backward()


def main() -> None:
    args = arguments(__doc__)
    n_ops, n_steps, rounds = (200, 20, 1) if args.quick else (5000, 300, 5)

    dev = emulator.device()
    a, b = torch.ones(16, device=dev), torch.ones(16, device=dev)
    ca, cb = torch.ones(16), torch.ones(16)
    fa, fb = Floor(torch.ones(16)), Floor(torch.ones(16))
    cpu_step, emu_step, floor_step = tiny_step(torch.device("cpu")), tiny_step(dev), tiny_step(None)
    op, floor, step_cpu, step_emu, step_floor, op_cpu = [], [], [], [], [], []
    amp_cpu, amp_emu = [], []
    own_cpu, own_emu, bwd_cpu, bwd_emu = [], [], [], []
    cpu_bwd, emu_bwd = trivial_backward(torch.device("cpu")), trivial_backward(dev)
    x, w = torch.randn(8, 16), torch.randn(16, 16)
    xd, wd = x.to(dev), w.to(dev)

    def amp_linear(device_type: str, *tensors: torch.Tensor) -> Any:
        def op() -> None:
            with torch.autocast(device_type, dtype=torch.bfloat16):
                nn.functional.linear(*tensors)
        return op

    def pair(first: tuple[list[float], Any, int], second: tuple[list[float], Any, int], flip: bool) -> None:
        """Both measurements, in an order that alternates round by round (what runs second pays any warm-up)."""
        for samples, fn, n in (second, first) if flip else (first, second):
            samples.append(per_call(fn, n))

    for r in range(rounds):
        flip = r % 2 == 1
        op.append(per_call(lambda: a + b, n_ops))
        floor.append(per_call(lambda: fa + fb, n_ops))
        op_cpu.append(per_call(lambda: ca + cb, n_ops))
        pair((step_cpu, cpu_step, n_steps), (step_emu, emu_step, n_steps), flip)
        step_floor.append(per_call(floor_step, n_steps))
        pair((amp_cpu, amp_linear("cpu", x, w), n_ops), (amp_emu, amp_linear(emulator.NAME, xd, wd), n_ops), flip)
        pair((bwd_cpu, cpu_bwd, n_steps), (bwd_emu, emu_bwd, n_steps), flip)
        with torch.autograd.set_multithreading_enabled(False):
            pair((own_cpu, cpu_step, n_steps), (own_emu, emu_step, n_steps), flip)
    med = statistics.median
    # on CPU the engine runs the backward on the calling thread either way: both CPU samples are one baseline
    cpu_all = step_cpu + own_cpu
    result = {
        "op_us": round(med(op) * 1e6, 2), "floor_us": round(med(floor) * 1e6, 2),
        "op_ratio": round(med(op) / med(floor), 3),
        "op_ratio_spread": [round(min(op) / max(floor), 3), round(max(op) / min(floor), 3)],
        "op_cpu_us": round(med(op_cpu) * 1e6, 2), "op_cpu_ratio": round(med(op) / med(op_cpu), 3),
        "op_cpu_ratio_spread": [round(min(op) / max(op_cpu), 3), round(max(op) / min(op_cpu), 3)],
        "tiny_step_cpu_us": round(med(step_cpu) * 1e6, 1), "tiny_step_emulated_us": round(med(step_emu) * 1e6, 1),
        "tiny_step_ratio": round(med(step_emu) / med(step_cpu), 3),
        "tiny_step_ratio_spread": [round(min(step_emu) / max(step_cpu), 3), round(max(step_emu) / min(step_cpu), 3)],
        "tiny_step_floor_us": round(med(step_floor) * 1e6, 1),
        "tiny_step_floor_ratio": round(med(step_floor) / med(step_cpu), 3),
        "tiny_step_floor_ratio_spread": [round(min(step_floor) / max(step_cpu), 3),
                                         round(max(step_floor) / min(step_cpu), 3)],
        "tiny_step_own_cpu_us": round(med(cpu_all) * 1e6, 1), "tiny_step_own_emulated_us": round(med(own_emu) * 1e6, 1),
        "tiny_step_own_ratio": round(med(own_emu) / med(cpu_all), 3),
        "tiny_step_own_ratio_spread": [round(min(own_emu) / max(cpu_all), 3), round(max(own_emu) / min(cpu_all), 3)],
        "trivial_backward_cpu_us": round(med(bwd_cpu) * 1e6, 1),
        "trivial_backward_emulated_us": round(med(bwd_emu) * 1e6, 1),
        "thread_round_trip_us": thread_round_trip_us(),
        "autocast_op_cpu_us": round(med(amp_cpu) * 1e6, 2), "autocast_op_emulated_us": round(med(amp_emu) * 1e6, 2),
        "autocast_op_ratio": round(med(amp_emu) / med(amp_cpu), 3),
        "torch": torch.__version__, "threads": torch.get_num_threads(), "rounds": rounds, "core": "native",
    }
    write("dispatch_native", result, args.save)
    print(f"small op (add, 16 elements): emulated {result['op_us']} us, CPU's {result['op_cpu_us']} us, ratio "
          f"{result['op_cpu_ratio']}x (target <= 2x); the trivial wrapper: {result['floor_us']} us")
    print(f"tiny MLP Adam step: emulated {result['tiny_step_emulated_us']} us, cpu {result['tiny_step_cpu_us']} us, "
          f"ratio {result['tiny_step_ratio']}x (target <= 1.5x)")
    print(f"  the emulator's own cost (the engine's thread hand-off out of both sides): emulated "
          f"{result['tiny_step_own_emulated_us']} us, cpu {result['tiny_step_own_cpu_us']} us, ratio "
          f"{result['tiny_step_own_ratio']}x (target <= 1.5x; runs {result['tiny_step_own_ratio_spread'][0]}x to "
          f"{result['tiny_step_own_ratio_spread'][1]}x)")
    print(f"  the hand-off: a trivial backward takes {result['trivial_backward_emulated_us']} us on the device, "
          f"{result['trivial_backward_cpu_us']} us on CPU; this machine's thread round trip: "
          f"{result['thread_round_trip_us']} us")
    print(f"  the same step with the trivial wrapper: {result['tiny_step_floor_us']} us, "
          f"{result['tiny_step_floor_ratio']}x cpu")
    print(f"a linear under autocast (bfloat16): emulated {result['autocast_op_emulated_us']} us, cpu "
          f"{result['autocast_op_cpu_us']} us, ratio {result['autocast_op_ratio']}x")


if __name__ == "__main__":
    main()
