"""Test-session wiring: the device matrix (--devices, --require), the lesson printer (--explain),
Hypothesis profiles, and an offline hub."""

from __future__ import annotations

import os

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from hypothesis import HealthCheck, settings

from samedevice import audit, devices, emulator, registry
from tests.helpers import LESSONS

pytest_plugins = ["pytester"]  # tests/test_pytest_plugin.py runs inner sessions

settings.register_profile("ci", max_examples=25, deadline=None, derandomize=True,
                          suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("dev", max_examples=60, deadline=None)
settings.register_profile("deep", max_examples=1000, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci" if os.environ.get("CI") else "dev"))


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("same-device")
    group.addoption("--devices", default=None,
                    help=f"comma-separated device kinds to test on ({', '.join(devices.KNOWN)}); "
                         "default: cpu, emulated and every accelerator present")
    group.addoption("--require", default="",
                    help="comma-separated device kinds that must be present: fail instead of skip")
    group.addoption("--explain", action="store_true",
                    help="after the run, print each selected scenario's lesson")


def _names(config: pytest.Config, option: str) -> list[str]:
    raw = config.getoption(option) or ""
    names = [n.strip() for n in raw.split(",") if n.strip()]
    unknown = [n for n in names if n not in devices.KNOWN]
    if unknown:
        raise pytest.UsageError(
            f"--{option}: unknown device {unknown[0]!r}; valid names: {', '.join(devices.KNOWN)}"
        )
    return names


def pytest_configure(config: pytest.Config) -> None:
    # Register the emulated backend before any test runs a backward pass: PyTorch's autograd engine
    # sizes its per-device queues at the first backward of the process (see samedevice/emulator.py).
    if emulator.unavailable_reason() is None:
        emulator.device()
    selected = _names(config, "devices") or devices.present()
    required = _names(config, "require")
    for name in required:
        reason = devices.unavailable_reason(name)
        if reason:
            raise pytest.UsageError(f"--require={name}: {reason}")
    config.stash[_SELECTED] = sorted(set(selected) | set(required), key=devices.KNOWN.index)


_SELECTED = pytest.StashKey[list[str]]()


@pytest.hookimpl(trylast=True)
def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    # trylast: the device id comes after the scenario id, e.g. test_x[sgd_momentum-emulated]
    selected = metafunc.config.stash[_SELECTED]
    if "device" in metafunc.fixturenames:
        metafunc.parametrize("device", selected, indirect=True, ids=selected)
    if "accelerator" in metafunc.fixturenames:
        # none selected or present: still list the emulated one, whose fixture skips saying why
        accelerators = [n for n in selected if n != "cpu"] or ["emulated"]
        metafunc.parametrize("accelerator", accelerators, indirect=True, ids=accelerators)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    reason = emulator.unavailable_reason()
    if reason:
        for item in items:
            if item.get_closest_marker("emulator"):
                item.add_marker(pytest.mark.skip(reason=reason))


def _device(request: pytest.FixtureRequest) -> torch.device:
    reason = devices.unavailable_reason(request.param)
    if reason:
        pytest.skip(reason)
    return devices.resolve(request.param)


@pytest.fixture
def device(request: pytest.FixtureRequest) -> torch.device:
    """Every device kind selected for this run: cpu, emulated, and the accelerators present."""
    return _device(request)


@pytest.fixture
def accelerator(request: pytest.FixtureRequest) -> torch.device:
    """Every selected device kind but cpu."""
    return _device(request)


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    if not config.getoption("explain"):
        return
    seen = []
    for item in terminalreporter.stats.get("passed", []) + terminalreporter.stats.get("failed", []):
        for slug in registry.slugs():
            if f"[{slug}" in item.nodeid and slug not in seen:
                seen.append(slug)
    for slug in seen:
        scenario = registry.get(slug)
        terminalreporter.write_sep("=", f"lesson: {slug}")
        terminalreporter.write_line(scenario.title)
        terminalreporter.write_line("")
        terminalreporter.write_line("Captured error of the broken run:")
        terminalreporter.write_line("    " + LESSONS.get(slug, "(no accelerator run in this session)"))
        terminalreporter.write_line("")
        terminalreporter.write_line(scenario.lesson())
        terminalreporter.write_line("")
        terminalreporter.write_line(scenario.diff())


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):  # type: ignore[no-untyped-def]
    """When a test fails with a device-mismatch error, add what the device audit finds among the
    objects the test registered (`audit.register(request, device, model=..., optimizer=...)`):
    PyTorch's message never names the tensor."""
    report = yield
    if call.when == "call":
        found = audit.take(item)  # always take, so the registered objects are released
        if report.failed and call.excinfo is not None and audit.is_device_mismatch(call.excinfo.value) and found:
            report.sections.append(("device audit", found))
    return report
