"""This repository's own test wiring: Hypothesis profiles, an offline hub, and the emulator registered
even when `--devices` leaves it out (the suite's emulator tests use it directly). The device matrix,
`--require`, `--explain` and the audit come from the installed plugin, samedevice/pytest_plugin.py."""

from __future__ import annotations

import atexit
import gc
import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from hypothesis import HealthCheck, settings

from samedevice import emulator

# The plugin by its module name, which is also its entry point's name: loaded once whether or not
# this checkout is installed. pytester: tests/test_pytest_plugin.py runs inner sessions.
pytest_plugins = ["samedevice.pytest_plugin", "pytester"]

settings.register_profile("ci", max_examples=25, deadline=None, derandomize=True,
                          suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("dev", max_examples=60, deadline=None)
settings.register_profile("deep", max_examples=1000, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci" if os.environ.get("CI") else "dev"))


def pytest_configure(config: pytest.Config) -> None:
    # the emulator's built C++ part, for the inner sessions too (pytester gives them a HOME of their own): one
    # build per run, not one per inner session
    from samedevice.emulator.guard import cache_dir

    os.environ.setdefault("SAMEDEVICE_CACHE", str(cache_dir().parent))
    # before any test runs a backward pass (see samedevice/emulator.py), whatever --devices says
    if emulator.unavailable_reason() is None:
        emulator.device()
    # At exit (after pytest's own last collections), the objects left are torch's and torch._dynamo's
    # modules: frozen, the interpreter's final garbage collection skips them instead of walking them,
    # about 0.7 s of every run's exit here (benchmarks/bench_startup.py). atexit runs this before the
    # emulator's exit drain, which was registered above.
    atexit.register(gc.freeze)
