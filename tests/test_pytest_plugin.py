"""The suite's pytest wiring, run in inner sessions: the device audit in a failing test's report,
and the device-matrix options."""

from __future__ import annotations

import pytest

from samedevice import registry

FAILING_TEST = '''
import torch
from samedevice import audit, emulator


def test_forward_with_cpu_batch(request):
    device = emulator.device()
    model = torch.nn.Linear(2, 2).to(device)
    batch = {"x": torch.ones(1, 2)}
    audit.register(request, device, model=model, batch=batch)
    model(batch["x"])
'''


@pytest.mark.emulator
def test_mismatch_failure_names_the_tensor(pytester: pytest.Pytester) -> None:
    """A test failing with a device mismatch gets a 'device audit' section naming the CPU tensor."""
    pytester.makeconftest((registry.ROOT / "conftest.py").read_text())
    pytester.makepyfile(test_inner=FAILING_TEST)
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider", "--devices=cpu")
    result.assert_outcomes(failed=1)
    result.stdout.re_match_lines([r".*device audit.*", r"\s+batch\['x'\] is on cpu"])


PASSING_TEST = """
def test_uses_devices(device):
    assert device.type in ("cpu", "emulated", "cuda", "mps", "xpu")
"""


def _inner(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    pytester.makeconftest((registry.ROOT / "conftest.py").read_text())
    pytester.makepyfile(test_inner=PASSING_TEST)
    return pytester.runpytest_inprocess("-p", "no:cacheprovider", *args)


def test_unknown_device_is_a_usage_error(pytester: pytest.Pytester) -> None:
    """--devices=gpu0 stops the run with a usage error listing the valid names."""
    result = _inner(pytester, "--devices=gpu0")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--devices: unknown device 'gpu0'; valid names: cpu, emulated, cuda, mps, xpu*"])


def test_require_missing_device_fails(pytester: pytest.Pytester) -> None:
    """--require=<absent accelerator> fails the run with one clear line instead of skipping."""
    from samedevice import devices

    absent = next((name for name in ("cuda", "mps", "xpu") if devices.unavailable_reason(name)), None)
    if absent is None:
        pytest.skip("every accelerator kind is present on this host")
    result = _inner(pytester, f"--require={absent}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*--require={absent}: {absent.upper()} is not available on this host*"])


@pytest.mark.emulator
def test_devices_option_selects_the_matrix(pytester: pytest.Pytester) -> None:
    """--devices restricts the device fixture to the named kinds, with the kind as the test id."""
    result = _inner(pytester, "--devices=emulated", "-v")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*test_uses_devices?emulated? PASSED*"])


TAKEN = """
import sys
from torch.utils.backend_registration import _setup_privateuseone_for_python_backend

_setup_privateuseone_for_python_backend("npu")  # another out-of-tree backend owns PrivateUse1
import pytest

sys.exit(pytest.main(["-q", "-rs", "-p", "no:cacheprovider", "tests/test_emulator.py", "tests/test_catalog.py"]))
"""


def test_privateuse1_taken_skips_cleanly() -> None:
    """Where another backend owns PrivateUse1, the emulator's tests skip with its one-line reason and
    the CPU tests still run and pass."""
    import subprocess
    import sys

    run = subprocess.run([sys.executable, "-c", TAKEN], cwd=registry.ROOT, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert "already taken by 'npu'" in run.stdout
    assert " passed" in run.stdout.splitlines()[-1]
