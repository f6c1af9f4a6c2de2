"""The package as a user gets it: built as a wheel, installed (not editable) into a fresh virtual
environment outside the repository, and run from a folder that is not the checkout.

The environment sees this interpreter's packages (torch, pytest) through a .pth file, so nothing is
downloaded; same-device itself is built from a copy of the checkout and installed with --no-deps.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
import torch

from samedevice import registry

pytestmark = [pytest.mark.slow, pytest.mark.emulator]

CHECKOUT = Path(__file__).resolve().parent.parent
FIX = 'self.register_buffer("class_weights", torch.tensor([1.0, 3.0]))'


def _run(*args: str | Path, cwd: Path, check: bool = True) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTEST_ADDOPTS", "SAMEDEVICE_DEVICE")}
    env.update(HF_HUB_OFFLINE="1", COLUMNS="100")
    done = subprocess.run([str(a) for a in args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
    if check:
        assert done.returncode == 0, f"{args}: exit {done.returncode}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done


@pytest.fixture(scope="module")
def venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh virtual environment with same-device installed from a wheel; returns its bin folder."""
    root = tmp_path_factory.mktemp("installed")
    source = root / "source"
    shutil.copytree(CHECKOUT, source, ignore=shutil.ignore_patterns(
        ".git", ".venv", "__pycache__", "build", "dist", "*.egg-info", ".*_cache", ".hypothesis", "site"))
    # the wheel is built by this interpreter (its setuptools), then installed by its pip into the bare venv
    _run(sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation", "--no-index",
         "--wheel-dir", root / "dist", source, cwd=root)
    [wheel] = (root / "dist").glob("same_device-*.whl")
    _run(sys.executable, "-m", "venv", "--without-pip", root / "venv", cwd=root)
    bin_dir = root / "venv" / ("Scripts" if os.name == "nt" else "bin")
    python = bin_dir / "python"
    _run(sys.executable, "-m", "pip", "--python", python, "install", "--quiet", "--no-deps", "--no-index", wheel,
         cwd=root)
    site = _run(python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])", cwd=root).stdout.strip()
    # torch and pytest from this interpreter, after the environment's own packages
    outer = dict.fromkeys([sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]])
    (Path(site) / "outer.pth").write_text("\n".join(outer) + "\n")
    return bin_dir


@pytest.fixture
def elsewhere(tmp_path: Path) -> Path:
    """A working folder that is not the checkout."""
    assert CHECKOUT not in tmp_path.parents
    return tmp_path


def test_installed_package_is_the_wheel(venv: Path, elsewhere: Path) -> None:
    """The environment imports same-device from its own site-packages, with the catalog inside the package."""
    code = "import samedevice, samedevice.registry as r; print(samedevice.__file__); print(r.ROOT)"
    module, root = _run(venv / "python", "-c", code, cwd=elsewhere).stdout.splitlines()
    assert Path(module).is_relative_to(venv.parent)
    assert Path(root).name == "_catalog"
    pages = {p.relative_to(Path(root) / "docs").as_posix() for p in (Path(root) / "docs").rglob("*.md")}
    checkout = {p.relative_to(registry.ROOT / "docs").as_posix() for p in (registry.ROOT / "docs").rglob("*.md")}
    assert pages == checkout  # every page, the scenarios' and the guides'
    assert {f"{slug}.md" for slug in registry.slugs()} <= pages


def test_catalog_commands_work_from_any_folder(venv: Path, elsewhere: Path) -> None:
    """list, show, docs --check, copy and tour run from a folder outside the checkout."""
    # one interpreter for the quick commands (each would pay torch's import), the console script for the tour
    commands = [["list"], ["show", "sgd_momentum"], ["docs", "--check"], ["copy", "checkpoint"]]
    script = f"from samedevice.cli import main\nfor argv in {commands!r}:\n    assert main(argv) == 0, argv\n"
    out = _run(venv / "python", "-c", script, cwd=elsewhere).stdout
    assert all(f"\n{slug} " in out for slug in registry.slugs())
    assert "--- cases/sgd_momentum.py" in out
    assert "docs are up to date\n" in out
    assert f"wrote {elsewhere / 'checkpoint.py'}" in out
    assert (elsewhere / "checkpoint.py").is_file()
    tour = _run(venv / "samedevice", "tour", "--device", "emulated", cwd=elsewhere).stdout
    not_run = sum(registry.get(slug).fix_unavailable_reason(torch.device("emulated", 0)) is not None
                  for slug in registry.slugs())
    assert not_run == 1  # dataparallel_device_ids: DataParallel's scatter is CUDA's own C++
    assert (f"{len(registry.slugs())} scenarios on emulated:0: every symptom reproduced and every fix verified but "
            f"{not_run} this device cannot run (n/a).") in tour
    assert re.search(r"\ndataparallel_device_ids +n/a +RuntimeError", tour)


def test_report_runs_installed(venv: Path, elsewhere: Path) -> None:
    """`samedevice report --format json` writes a report of every scenario that agrees with the registry."""
    _run(venv / "samedevice", "report", "--devices", "emulated", "--format", "json", "--out", "r.json", cwd=elsewhere)
    data = json.loads((elsewhere / "r.json").read_text())
    assert [r["scenario"] for r in data["records"]] == registry.slugs()
    assert data["divergences"] == 0


def test_example_project_catches_its_bug_and_passes_once_fixed(venv: Path, tmp_path: Path) -> None:
    """examples/user_project's tests, through the installed plugin, fail on the emulated device with the
    audit naming model.class_weights, pass on CPU, and all pass once the marked line is fixed."""
    project = tmp_path / "user_project"
    shutil.copytree(CHECKOUT / "examples" / "user_project", project)
    broken = _run(venv / "python", "-m", "pytest", "-p", "no:cacheprovider", "-v", cwd=project, check=False)
    assert broken.returncode == 1, broken.stdout[-3000:] + broken.stderr[-3000:]
    out = broken.stdout
    assert "test_training_step_lowers_the_loss[cpu] PASSED" in out
    assert "test_training_step_lowers_the_loss[emulated] FAILED" in out
    assert "Expected all tensors to be on the same device, but got weight is on cpu" in out
    assert "device audit" in out
    assert "model.class_weights is on cpu (shape (2,))" in out

    train = project / "train.py"
    lines = train.read_text().splitlines(keepends=True)
    [bug] = [i for i, line in enumerate(lines) if "# BUG:" in line]
    lines[bug] = lines[bug][: len(lines[bug]) - len(lines[bug].lstrip())] + FIX + "\n"
    train.write_text("".join(lines))
    fixed = _run(venv / "python", "-m", "pytest", "-p", "no:cacheprovider", cwd=project, check=False)
    assert fixed.returncode == 0, fixed.stdout[-3000:]
    assert "2 passed" in fixed.stdout
