"""The tested PyTorch versions and the private APIs the emulator needs: one warning outside the tested
range, one line naming a missing API."""

from __future__ import annotations

import importlib
import subprocess
import sys
import warnings
from collections.abc import Iterator

import pytest
import torch

from samedevice import compat, registry


@pytest.fixture
def fresh_check() -> Iterator[None]:
    """compat.check runs once per process; let a test run it again, and forget that run afterwards."""
    compat.check.cache_clear()
    yield
    compat.check.cache_clear()


@pytest.mark.parametrize(("version", "tested"), [("2.13.0", True), ("2.13.1+cpu", True), ("2.12.1", False),
                                                 ("2.14.0.dev20260101+cu130", False), ("3.13.0", False)])
def test_tested_versions(version: str, tested: bool) -> None:
    """A version is tested when its major.minor is one the suite ran on."""
    assert compat.tested(version) is tested


def test_pyproject_declares_the_tested_range() -> None:
    """pyproject.toml's torch requirement is the tested minor version, no wider."""
    text = (registry.ROOT / "pyproject.toml").read_text()
    assert '"torch>=2.13,<2.14"' in text
    assert compat.TESTED == ("2.13",)


def test_readme_installs_torch_in_the_tested_range() -> None:
    """Every `pip install ... torch` line in the README pins the tested range, as a user would type it."""
    lines = [line for line in (registry.ROOT / "README.md").read_text().splitlines()
             if "pip install" in line and "torch" in line]
    assert lines
    for line in lines:
        assert '"torch>=2.13,<2.14"' in line, line


def test_untested_torch_warns_once(fresh_check: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """On a torch outside the tested range, the first check warns, naming the tested versions; later ones are quiet."""
    monkeypatch.setattr(torch, "__version__", "2.14.0")
    with pytest.warns(compat.UntestedTorchWarning,
                      match=r"^same-device was tested with torch 2\.13; this is torch 2\.14\.0, where the emulated"):
        compat.check()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        compat.check()


def test_tested_torch_is_quiet(fresh_check: None) -> None:
    """On the tested torch the check neither warns nor raises."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        compat.check()


@pytest.mark.parametrize(("module", "attribute"), [(m, a) for m, a in compat.PRIVATE_APIS if m != "torch._C"])
def test_missing_private_api_is_named(fresh_check: None, monkeypatch: pytest.MonkeyPatch,
                                      module: str, attribute: str) -> None:
    """Without one of the private APIs, the check raises one line naming it and the tested versions."""
    monkeypatch.delattr(importlib.import_module(module), attribute)
    with pytest.raises(compat.UnsupportedTorchError,
                       match=rf"^the emulated accelerator needs {module}\.{attribute}, which torch \S+ does not "
                             r"have \(tested with torch 2\.13\)$"):
        compat.check()


MISSING = """
import torch._C._dynamo.eval_frame as eval_frame
del eval_frame.set_code_exec_strategy
from samedevice.cli import main
raise SystemExit(main(["tour", "--device", "emulated"]))
"""


def test_cli_names_a_missing_private_api_in_one_line() -> None:
    """The command line turns a missing private API into one line on stderr and exit code 2."""
    run = subprocess.run([sys.executable, "-c", MISSING], cwd=registry.ROOT, capture_output=True, text=True,
                         timeout=120)
    assert run.returncode == 2, run.stderr
    assert run.stderr.splitlines() == [
        "error: the emulated accelerator needs torch._C._dynamo.eval_frame.set_code_exec_strategy"
        f", which torch {torch.__version__} does not have (tested with torch 2.13)"
    ]
