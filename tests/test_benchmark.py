"""benchmarks/bench_step.py leaves the checkout clean unless asked to record its figures."""

from __future__ import annotations

import importlib.util
import json
import shutil
from pathlib import Path
from types import ModuleType

import pytest

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"


def _bench(folder: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_step", BENCHMARKS / "bench_step.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.HERE = folder  # a copy of benchmarks/, so the test writes nowhere in the checkout
    return module


@pytest.mark.emulator
def test_results_go_to_the_ignored_folder_unless_saved(tmp_path: Path) -> None:
    """A plain run writes out/step.json and leaves the recorded results/step.json as it was; --save replaces it."""
    shutil.copytree(BENCHMARKS / "results", tmp_path / "results")
    recorded = (tmp_path / "results" / "step.json").read_bytes()
    bench = _bench(tmp_path)

    assert bench.main(["--quick"]) == tmp_path / "out" / "step.json"
    assert json.loads((tmp_path / "out" / "step.json").read_text())["parameters"] > 1_000_000
    assert (tmp_path / "results" / "step.json").read_bytes() == recorded

    assert bench.main(["--quick", "--save"]) == tmp_path / "results" / "step.json"
    assert (tmp_path / "results" / "step.json").read_bytes() != recorded


def test_plain_results_folder_is_ignored_by_git() -> None:
    """benchmarks/out/, where a plain run writes, is listed in .gitignore."""
    ignored = (BENCHMARKS.parent / ".gitignore").read_text().splitlines()
    assert "benchmarks/out/" in ignored
