"""Assertion helpers shared by the tests."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

ROOT = Path(__file__).resolve().parent.parent


def assert_same_params(actual: dict[str, torch.Tensor], expected: dict[str, torch.Tensor], *, exact: bool) -> None:
    """Same keys and values: bit for bit when `exact`, else within torch.testing's float tolerance."""
    assert actual.keys() == expected.keys()
    for key in expected:
        assert actual[key].device.type == "cpu", f"{key} should be returned on CPU"
        if exact:
            assert torch.equal(actual[key], expected[key]), f"{key} differs from the CPU reference"
        else:
            torch.testing.assert_close(actual[key], expected[key], msg=lambda m, k=key: f"{k}: {m}")


def closure_step(model: torch.nn.Module, optimizer: torch.optim.Optimizer, x: torch.Tensor) -> None:
    """One optimizer step on the mean squared output, through a closure (LBFGS needs one)."""

    def closure() -> torch.Tensor:
        optimizer.zero_grad()
        loss = model(x).pow(2).mean()
        loss.backward()
        return loss

    optimizer.step(closure)


class _DeviceScalarReads(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        if func is torch.ops.aten._local_scalar_dense.default and args[0].device.type != "cpu":
            self.count += 1
        return func(*args, **(kwargs or {}))


@contextmanager
def device_scalar_reads() -> Iterator[_DeviceScalarReads]:
    """Count the reads of a device tensor's value to the host (`.item()`, `float(t)`): on CUDA each is
    a sync that waits for the device. `.count` holds the number when the block ends."""
    with _DeviceScalarReads() as reads:
        yield reads


class _OpLog(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.names: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        self.names.append(func.name())
        return func(*args, **(kwargs or {}))


@contextmanager
def dispatched_ops() -> Iterator[_OpLog]:
    """Record the name of every op dispatched in the block (`aten::to_padded_tensor`) in `.names`."""
    with _OpLog() as log:
        yield log


def run_python(code: str, **env: str) -> subprocess.CompletedProcess[str]:
    """Run `python -c code` in a fresh process from the checkout, with extra environment variables."""
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env={**os.environ, **env})


def assert_diagnoses_itself(scenario: Any, error: BaseException) -> None:
    """`samedevice diagnose`, given the broken run's traceback and the broken module's code, names the
    scenario first, or, where the evidence cannot separate it from a scenario of the same mechanism,
    among the first with a score that differs from the top's by no more than the priors (ambiguous)."""
    import traceback

    from samedevice import diagnose

    text = "".join(traceback.format_exception(error))
    code = (ROOT / "cases" / f"{scenario.slug}.py").read_text()
    result = diagnose.diagnose(text, code)
    scores = {m.slug: m.score for m in result.matches}
    assert result.found, f"{scenario.slug}: {result.verdict}: {result.note}"
    top = result.matches[0]
    assert top.slug == scenario.slug or (
        result.verdict == "ambiguous" and top.score - scores.get(scenario.slug, -99.0) <= diagnose.WEIGHTS["prior"]
    ), f"{scenario.slug} diagnosed as {[(m.slug, m.score) for m in result.matches]}"
