"""The emulated device against PyTorch's own test databases, which ship in its wheel (torch.testing._internal):

    python benchmarks/bench_fidelity.py [--quick] [--save]          # needs `pip install expecttest`

- every OpInfo of `op_db` (common_methods_invocations): its first four float32 samples run on CPU and on the
  emulated device; the same result (or the same exception type on both) is a pass (the `empty` factories,
  whose memory is uninitialized, are not compared);
- every OptimizerInfo of `optim_db` (common_optimizers): each input test_optim builds for CUDA, with each
  implementation it supports (for-loop, foreach, fused), three steps on CPU and on the device from the same
  parameters and gradients; the same parameters are a pass, a configuration CPU refuses (capturable) and the
  device runs is counted apart.
The ops run in chunks, each in a process of its own, so a crash is counted, not fatal. Reported: the counts, and
every check that does not pass with its reason. Nothing here is timed. --quick runs the first 40 ops and two
optimizers. Results go to benchmarks/out/fidelity.json unless --save writes benchmarks/results/fidelity.json.
"""

from __future__ import annotations

import collections
import copy
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.common import arguments, write  # noqa: E402

CHUNK = 50


def run_ops(start: int, stop: int) -> dict[str, str]:
    import torch
    from torch.testing._internal.common_methods_invocations import op_db

    from samedevice import emulator

    dev = emulator.device()
    moved = lambda t: t.to(dev) if isinstance(t, torch.Tensor) and t.device.type == "cpu" else t  # noqa: E731
    results = {}
    for op in op_db[start:stop]:
        key = f"{op.name}.{op.variant_test_name}".rstrip(".")
        if op.name.startswith(("empty", "new_empty")):
            results[key] = "not compared (uninitialized memory)"
            continue
        try:
            samples = list(op.sample_inputs("cpu", torch.float32, requires_grad=False))[:4]
        except Exception:  # PyTorch's own sample generator: nothing of the device's
            results[key] = "no samples"
            continue
        results[key] = "pass"
        for s in samples:
            want, want_error = _call(op, s)
            got, got_error = _call(op, s.transform(moved))
            if want_error or got_error:
                if type(want_error) is not type(got_error):
                    results[key] = f"error: {got_error!r}"[:200] if got_error else "no error where CPU raised"
                    break
                continue
            try:
                on_cpu = torch.utils._pytree.tree_map(lambda t: t.cpu() if isinstance(t, torch.Tensor) else t, got)
                torch.testing.assert_close(on_cpu, want, equal_nan=True, check_device=False, atol=1e-4, rtol=1e-4)
            except Exception as e:
                results[key] = f"mismatch: {e}"[:200]
                break
    return results


def _call(op: Any, sample: Any) -> tuple[Any, Exception | None]:
    try:
        return op(sample.input, *sample.args, **sample.kwargs), None
    except Exception as e:
        return None, e


def run_optimizers(limit: int | None) -> dict[str, str]:
    import torch
    from torch.testing._internal.common_optimizers import optim_db

    from samedevice import emulator

    dev = emulator.device()

    def steps(cls: Any, kwargs: dict[str, Any], device: Any) -> list[Any]:
        torch.manual_seed(0)
        params = [torch.randn(shape, device=device, requires_grad=True) for shape in ((4, 3), (3,))]
        optimizer = cls(params, **kwargs)
        for step in range(3):
            torch.manual_seed(step)
            for p in params:
                p.grad = torch.randn(p.shape).to(device)
            optimizer.step((lambda: sum((p * p).sum() for p in params)) if cls.__name__ == "LBFGS" else None)
        return [p.detach().cpu() for p in params]

    results = {}
    for info in optim_db[:limit]:
        for i, given in enumerate(info.optim_inputs_func(device="cuda", dtype=torch.float32)):
            for impl in (None, *(x for x in ("foreach", "fused") if x in (info.supported_impls or ()))):
                kwargs = dict(given.kwargs, **({impl: True} if impl else {}))
                key = f"{info.optim_cls.__name__}[{i}: {given.desc}]" + (f" {impl}" if impl else "")
                try:
                    want, want_error = steps(info.optim_cls, copy.deepcopy(kwargs), "cpu"), None
                except Exception as e:
                    want, want_error = None, e
                try:
                    got, got_error = steps(info.optim_cls, copy.deepcopy(kwargs), dev), None
                except Exception as e:
                    got, got_error = None, e
                if want_error and not got_error:
                    results[key] = "cpu refuses, device runs"
                elif want_error or got_error:
                    same = type(want_error) is type(got_error)
                    results[key] = "pass" if same else f"error: {got_error!r}"[:200]
                else:
                    try:
                        torch.testing.assert_close(got, want)
                        results[key] = "pass"
                    except AssertionError as e:
                        results[key] = f"mismatch: {e}"[:200]
    return results


def child(kind: str, a: int, b: int) -> None:
    import warnings

    warnings.simplefilter("ignore")
    found = run_ops(a, b) if kind == "ops" else run_optimizers(None if b < 0 else b)
    print(json.dumps(found))


def measure(n_ops: int, n_optimizers: int | None) -> dict[str, str]:
    found: dict[str, str] = {}
    jobs = [("ops", a, min(a + CHUNK, n_ops)) for a in range(0, n_ops, CHUNK)]
    jobs.append(("optimizers", 0, -1 if n_optimizers is None else n_optimizers))
    for kind, a, b in jobs:
        done = subprocess.run([sys.executable, __file__, "--child", kind, str(a), str(b)], capture_output=True,
                              text=True, timeout=1800)
        if done.returncode != 0:  # a crash: the chunk counts as crashed, named by its range
            found[f"{kind}[{a}:{b}]"] = f"crash: exit {done.returncode}: {done.stderr.strip()[-200:]}"
        else:
            found.update(json.loads(done.stdout.strip().splitlines()[-1]))
    return found


def main() -> None:
    if sys.argv[1:2] == ["--child"]:
        child(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
        return
    args = arguments(__doc__)
    from torch.testing._internal.common_methods_invocations import op_db

    n_ops, n_optimizers = (40, 2) if args.quick else (len(op_db), None)
    found = measure(n_ops, n_optimizers)
    counts = collections.Counter(v.split(":")[0] for v in found.values())
    summary = {"counts": dict(counts),
               "not_passing": {k: v for k, v in found.items() if v not in ("pass", "cpu refuses, device runs")}}
    print(f"{len(found)} checks: " + ", ".join(f"{n} {k}" for k, n in counts.most_common()))
    for key, why in summary["not_passing"].items():
        print(f"  {key}: {why[:150]}")
    write("fidelity", summary, args.save)


if __name__ == "__main__":
    main()
