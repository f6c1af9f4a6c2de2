"""The three test families, for every scenario in the registry on every selected device."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from pytest_parametrize_cases import Case, parametrize_cases

from samedevice import registry
from samedevice.pytest_plugin import record_error
from tests.helpers import assert_diagnoses_itself, assert_same_params

SCENARIOS = parametrize_cases(*(Case(s.slug, scenario=s) for s in registry.SCENARIOS))


def _skip_unavailable(scenario: registry.Scenario, device: torch.device) -> None:
    """A scenario that cannot start here (two devices needed, one present) skips with its reason."""
    reason = scenario.unavailable_reason(device)
    if reason:
        pytest.skip(reason)


def _reference(scenario: registry.Scenario, workdir: Path) -> dict[str, torch.Tensor]:
    fix = scenario.fix()
    return fix.reference() if hasattr(fix, "reference") else fix.run(torch.device("cpu"), workdir)


@SCENARIOS
def test_broken_raises(
    scenario: registry.Scenario, accelerator: torch.device, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """The broken module shows its recorded symptom on every accelerator."""
    _skip_unavailable(scenario, accelerator)
    symptom = scenario.symptom(accelerator.type)
    expected = registry.expected(symptom)
    if expected is not None:
        error, pattern = expected
        with pytest.raises(error, match=pattern) as info:
            scenario.case().run(accelerator, tmp_path)
        record_error(request, scenario.slug, f"{info.type.__name__}: {info.value}")
        assert_diagnoses_itself(scenario, info.value)
        return
    result = scenario.case().run(accelerator, tmp_path)
    if symptom == "silent":
        with pytest.raises(AssertionError):
            assert_same_params(result, _reference(scenario, tmp_path / "ref"), exact=False)
    else:
        assert_same_params(result, _reference(scenario, tmp_path / "ref"), exact=False)


@SCENARIOS
def test_broken_passes_on_cpu(scenario: registry.Scenario, tmp_path: Path) -> None:
    """On CPU the broken module runs without error: a CPU-only CI hides the bug. Where the registry records
    that it fails on CPU too (a meta tensor fails everywhere), it raises that error on CPU."""
    _skip_unavailable(scenario, torch.device("cpu"))
    expected = scenario.expected_error("cpu")
    if expected is not None:
        error, pattern = expected
        with pytest.raises(error, match=pattern):
            scenario.case().run(torch.device("cpu"), tmp_path)
        return
    result = scenario.case().run(torch.device("cpu"), tmp_path)
    (tmp_path / "ref").mkdir()
    if scenario.symptom("cpu") == "silent":  # no error, but the numbers are wrong
        with pytest.raises(AssertionError):
            assert_same_params(result, _reference(scenario, tmp_path / "ref"), exact=False)
    else:
        assert scenario.symptom("cpu") == "none"
        assert_same_params(result, _reference(scenario, tmp_path / "ref"), exact=True)


@SCENARIOS
def test_fixed_matches_reference(scenario: registry.Scenario, device: torch.device, tmp_path: Path) -> None:
    """The fixed module runs on every device and reproduces the CPU reference (where the fix needs what a
    device lacks, a CUDA-only API, the registry says so and the test skips with that reason)."""
    reason = scenario.fix_unavailable_reason(device)
    if reason:
        pytest.skip(reason)
    result = scenario.fix().run(device, tmp_path)
    (tmp_path / "ref").mkdir()
    assert_same_params(result, _reference(scenario, tmp_path / "ref"), exact=device.type == "cpu")
