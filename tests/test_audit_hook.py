"""The pytest hook that adds the device audit to a failing test's report."""

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


def test_mismatch_failure_names_the_tensor(pytester: pytest.Pytester) -> None:
    """A test failing with a device mismatch gets a 'device audit' section naming the CPU tensor."""
    pytester.makeconftest((registry.ROOT / "conftest.py").read_text())
    pytester.makepyfile(test_inner=FAILING_TEST)
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider", "--devices=cpu")
    result.assert_outcomes(failed=1)
    result.stdout.re_match_lines([r".*device audit.*", r"\s+batch\['x'\] is on cpu"])
