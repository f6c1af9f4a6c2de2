"""The pytest plugin as another project's test run sees it, through inner sessions: the device matrix,
its options and their errors, the device audit in a failing test's report, and --explain."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

import samedevice
from samedevice import devices, diagnose, registry

# how an inner session gets the plugin; an installed package gets it from its pytest11 entry point
# (tests/test_installed.py proves that one), which has this same name
PLUGIN = ("-p", "samedevice.pytest_plugin", "-p", "no:cacheprovider")

FAILING_TEST = '''
import torch
from samedevice import audit


def test_forward_with_cpu_batch(device, request):
    model = torch.nn.Linear(2, 2).to(device)
    batch = {"x": torch.ones(1, 2)}
    audit.register(request, device, model=model, batch=batch)
    model(batch["x"])
'''


def _inner(pytester: pytest.Pytester, source: str, *args: str) -> pytest.RunResult:
    pytester.makepyfile(test_inner=source)
    return pytester.runpytest_inprocess(*PLUGIN, *args)


@pytest.mark.emulator
def test_mismatch_failure_names_the_tensor(pytester: pytest.Pytester) -> None:
    """On the emulated device a test failing with a device mismatch gets a 'device audit' section
    naming the CPU tensor; the same test passes on CPU."""
    result = _inner(pytester, FAILING_TEST, "--devices=cpu,emulated", "-v")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*test_forward_with_cpu_batch?cpu? PASSED*",
                                 "*test_forward_with_cpu_batch?emulated? FAILED*"])
    result.stdout.re_match_lines([r".*Expected all tensors to be on the same device.*",
                                  r"-+ device audit -+",
                                  r"1 tensor not on emulated:0:",
                                  r"\s+batch\['x'\] is on cpu \(shape \(1, 2\)\)"])


FACTORY_TEST = '''
import torch
from samedevice import audit


class Shifted(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(3, 3)

    def forward(self, x):
        return self.fc(x) + torch.arange(3.0)


def test_forward(device, request):
    model = Shifted().to(device)
    x = torch.ones(2, 3, device=device)
    audit.register(request, device, model=model, x=x)
    model(x)
'''


@pytest.mark.emulator
def test_audit_of_a_tensor_made_inside_forward_says_what_it_cannot_see(pytester: pytest.Pytester) -> None:
    """When the culprit is made inside forward, the device audit says every registered tensor is in place,
    that it cannot see one made during the call, and points at factory_in_forward."""
    result = _inner(pytester, FACTORY_TEST, "--devices=cpu,emulated")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.re_match_lines([r"-+ device audit -+",
                                  r"every tensor the audit was given is on emulated:0\. It cannot see a tensor made "
                                  r"during the failing call.*`samedevice show factory_in_forward`.*"])


NOT_A_DEVICE_ERROR = '''
def test_plain_failure(device):
    optimizer_state = {"step": 1}
    assert optimizer_state["step"] == 2
'''


def test_a_failure_that_is_no_device_error_gets_no_diagnosis(pytester: pytest.Pytester) -> None:
    """Only a device error gets the diagnosis section; a plain assertion failure does not."""
    result = _inner(pytester, NOT_A_DEVICE_ERROR, "--devices=cpu")
    result.assert_outcomes(failed=1)
    assert "device error diagnosis" not in result.stdout.str()


@pytest.mark.emulator
def test_mismatch_failure_gets_the_diagnosis(pytester: pytest.Pytester) -> None:
    """A device mismatch gets a diagnosis section: the likeliest scenario and the command for its lesson."""
    result = _inner(pytester, FAILING_TEST, "--devices=emulated")
    result.stdout.re_match_lines([r"-+ device error diagnosis -+", r"likeliest scenario: batch_not_moved: .*",
                                  r"the lesson: samedevice show batch_not_moved"])


ATTRIBUTE_TEST = '''
import torch
from torch import nn


class ScaledNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(2, 2)
        self.scale = torch.ones(2)

    def forward(self, x):
        return self.fc(x) * self.scale


def test_scaled(device):
    model = ScaledNet().to(device)
    model(torch.ones(1, 2, device=device))
'''


@pytest.mark.emulator
def test_the_diagnosis_reads_the_code_of_the_test_s_own_frames(pytester: pytest.Pytester) -> None:
    """The diagnosis reads the code of the frames the traceback passes through in the test's own files, a module's
    method its whole class: the plain tensor attribute that __init__ keeps is among its reasons, which the message
    and the frames alone do not show."""
    result = _inner(pytester, ATTRIBUTE_TEST, "--devices=emulated")
    result.stdout.re_match_lines([r"-+ device error diagnosis -+", r"likeliest scenario: plain_tensor_attribute: .*"])
    section = result.stdout.str().split("device error diagnosis", 1)[1].split("the lesson:", 1)[0]
    assert "the code: a tensor is kept as a plain attribute in __init__" in section
    alone = diagnose.diagnose("  File \"test_inner.py\", line 12, in forward\n    return self.fc(x) * self.scale\n"
                              "RuntimeError: Expected all tensors to be on the same device, but found at least two "
                              "devices, emulated:0 and cpu!")
    assert alone.verdict == "ambiguous"


FIXTURE_TEST = '''
import pytest
import torch
from torch import nn


@pytest.fixture
def resumed(tmp_path):
    model = nn.Linear(4, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    model(torch.ones(1, 4)).sum().backward()
    optimizer.step()
    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict()}, tmp_path / "ckpt.pt")
    checkpoint = torch.load(tmp_path / "ckpt.pt", map_location="cpu", weights_only=True)
    model = nn.Linear(4, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    model.load_state_dict(checkpoint["model"])
    optimizer.load_state_dict(checkpoint["optimizer"])
    return model, optimizer


def test_resume_step(resumed, device):
    model, optimizer = resumed
    model.to(device)
    model(torch.ones(1, 4, device=device)).sum().backward()
    optimizer.step()
'''


@pytest.fixture(scope="module")  # a wider scope than pytester's: set up before its snapshot
def dynamo_imported() -> None:
    """torch._dynamo imported before pytester's snapshot of sys.modules: an optimizer's step imports it, and an
    in-process run that first imports it has it dropped after, so the next import registers torch._inductor's
    operator namespaces a second time, which torch refuses (as with Lightning, below)."""
    import torch._dynamo  # noqa: F401


@pytest.mark.emulator
@pytest.mark.usefixtures("dynamo_imported")
def test_the_diagnosis_reads_the_fixtures_the_test_used(pytester: pytest.Pytester) -> None:
    """A fixture that loads a checkpoint ran before the test, outside its traceback: the diagnosis reads its code
    first, so the load before the test's move is among its reasons (not this plugin's own `device` fixture, nor
    pytest's `tmp_path`)."""
    result = _inner(pytester, FIXTURE_TEST, "--devices=emulated")
    result.assert_outcomes(failed=1)
    section = result.stdout.str().split("device error diagnosis", 1)[1].split("the lesson:", 1)[0]
    assert "likeliest scenario: sgd_momentum" in section
    assert "the code: a state dict is loaded before the model is moved" in section
    assert "the code: an optimizer's state is loaded" in section  # (the test's own code loads nothing)


FIXTURE_ORDER_TEST = '''
import functools

import pytest
import torch
from torch import nn


def logged(fn):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        return fn(*args, **kwargs)
    return wrapper


@pytest.fixture
@logged
def model(device):
    return nn.Linear(4, 2).to(device)


@pytest.fixture
@logged
def trained(model, tmp_path):
    torch.save(nn.Linear(4, 2).state_dict(), tmp_path / "m.pt")
    model.load_state_dict(torch.load(tmp_path / "m.pt", map_location="cpu", weights_only=True))
    yield model
    model.cpu()


class TestModel:
    @pytest.fixture
    def vocab(self, tmp_path):
        path = tmp_path / "vocab.txt"
        path.write_text("""a
b
""")
        return path

    def test_step(self, trained, vocab, device):
        trained(torch.ones(1, 4, device=device))
'''


def test_fixtures_are_read_as_they_were_set_up(pytester: pytest.Pytester) -> None:
    """The fixtures are read in the order pytest set them up (a fixture after those it requests), each under its
    decorators (two behind one wrapper are two), up to its `yield` (its teardown runs after the test); a fixture whose
    source does not parse on its own (a string at its class's column) is left out, not the rest with it."""
    from samedevice import pytest_plugin

    pytester.makepyfile(test_inner=FIXTURE_ORDER_TEST)
    items, _ = pytester.inline_genitems(*PLUGIN)
    item = next(i for i in items if "emulated" in i.name)
    fixtures = [f.__name__ for f in pytest_plugin._fixtures(item)]
    assert fixtures.index("model") < fixtures.index("trained")
    code = pytest_plugin._user_code(None, pytest_plugin._fixtures(item))
    assert code.index("def model(device)") < code.index("def trained(model, tmp_path)")
    assert "yield model" in code
    assert "model.cpu()" not in code
    assert "def vocab" not in code
    assert "load_before_move" not in diagnose.read_code(code)  # the model was moved before the load


CLASS_TESTS = '''
import torch
from torch import nn


class Stack(nn.Module):
    def __init__(self, depth=2):
        super().__init__()
        self.blocks = [nn.Linear(2, 2) for _ in range(depth)]

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        return x


class DeepStack(Stack):
    def __init__(self):
        super().__init__(depth=4)


class TestModels:
    def test_deep_stack(self, device):
        model = DeepStack().to(device)
        model(torch.ones(1, 2, device=device))

    def test_new_head(self, device):
        model = Stack().to(device)
        model.head = nn.Linear(2, 3).to(device)
        assert model.head(torch.ones(1, 2, device=device)).shape == (1, 3)
'''


@pytest.mark.emulator
def test_the_diagnosis_reads_the_class_that_defines_the_method_and_only_the_test_s_function(
        pytester: pytest.Pytester) -> None:
    """A subclass's forward is its parent's: the class read is the one that defines the method (its plain list of
    layers), not the subclass; a test method is read alone, not its test class, whose other tests would speak of
    code that did not run (a head replaced)."""
    result = _inner(pytester, CLASS_TESTS, "--devices=emulated")
    result.assert_outcomes(passed=1, failed=1)
    section = result.stdout.str().split("device error diagnosis", 1)[1].split("the lesson:", 1)[0]
    assert "likeliest scenario: plain_list_layers" in section
    assert "layers are kept in a plain list" in section
    assert "head" not in section


@pytest.mark.emulator
def test_failure_traceback_ends_at_pytorch_not_in_the_emulator(pytester: pytest.Pytester) -> None:
    """A failing test's traceback ends, as on CUDA, at the PyTorch call that raised (linear.py's
    forward): the emulator's checks are C++, so it adds no frame, --fulltrace or not."""
    result = _inner(pytester, FAILING_TEST, "--devices=emulated")
    result.assert_outcomes(failed=1)
    out = result.stdout.str()
    assert "samedevice/emulator" not in out
    result.stdout.re_match_lines([r".*torch/nn/modules/linear\.py:\d+: RuntimeError$"])
    full = _inner(pytester, FAILING_TEST, "--devices=emulated", "--fulltrace")
    assert "samedevice/emulator" not in full.stdout.str()  # the device checks are C++: no Python frame at all


PASSING_TEST = """
def test_uses_devices(device):
    assert device.type in ("cpu", "emulated", "cuda", "mps", "xpu")
"""


@pytest.mark.parametrize("option", ["--devices", "--require"])
def test_unknown_device_is_a_usage_error(pytester: pytest.Pytester, option: str) -> None:
    """An unknown device name stops the run with one line naming the option, the name and the valid names."""
    result = _inner(pytester, PASSING_TEST, f"{option}=cpu,gpu0")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [f"*argument {option}: unknown device 'gpu0'; valid names: cpu, emulated, cuda, mps, xpu"]
    )
    assert "Traceback" not in result.stderr.str()


@pytest.mark.parametrize("value", ["", ",", " "])
def test_devices_naming_nothing_is_a_usage_error(pytester: pytest.Pytester, value: str) -> None:
    """`--devices=` with no name is refused with one line, not taken as the default matrix."""
    result = _inner(pytester, PASSING_TEST, f"--devices={value}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*argument --devices: no device named in *; give one or more of cpu, emulated*"])
    assert "Traceback" not in result.stderr.str()


def test_require_missing_device_fails(pytester: pytest.Pytester) -> None:
    """--require=<absent accelerator> fails the run with one clear line instead of skipping."""
    absent = next((name for name in devices.ACCELERATORS if devices.unavailable_reason(name)), None)
    if absent is None:
        pytest.skip("every accelerator kind is present on this host")
    result = _inner(pytester, PASSING_TEST, f"--require={absent}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"ERROR: --require={absent}: {absent.upper()} is not available on this host"])


@pytest.mark.emulator
def test_devices_option_selects_the_matrix(pytester: pytest.Pytester) -> None:
    """--devices restricts the device fixture to the named kinds, with the kind as the test id."""
    result = _inner(pytester, PASSING_TEST, "--devices=emulated", "-v")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*test_uses_devices?emulated? PASSED*"])


@pytest.mark.emulator
def test_the_header_names_the_matrix(pytester: pytest.Pytester) -> None:
    """The run's header names the devices the tests run on."""
    result = _inner(pytester, PASSING_TEST, "--devices=cpu,emulated")
    result.stdout.fnmatch_lines(["same-device: devices cpu, emulated"])
    assert "tests skip" not in result.stdout.str()


def test_an_emulator_that_cannot_run_here_skips_saying_why(pytester: pytest.Pytester,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """Where the emulator cannot be built (no compiler, nothing cached), the default matrix keeps it: its tests
    skip with the reason, which the header also gives. They used to vanish from the matrix, so a suite that
    never ran on an accelerator passed green without a word."""
    monkeypatch.setenv("PYTHONPATH", str(Path(samedevice.__file__).parent.parent))  # this samedevice, not another
    monkeypatch.setenv("CXX", str(pytester.path / "no-such-compiler"))
    monkeypatch.setenv("SAMEDEVICE_CACHE", str(pytester.path / "empty-cache"))
    pytester.makepyfile(test_inner=PASSING_TEST)
    result = pytester.runpytest_subprocess(*PLUGIN, "-rs")
    result.assert_outcomes(passed=1, skipped=1)
    reason = "the emulated accelerator needs its C++ part, which cannot be built here: no C++ compiler found"
    result.stdout.fnmatch_lines(["same-device: devices cpu, emulated", f"same-device: emulated tests skip: {reason}*",
                                 f"SKIPPED*{reason}*"])


BACKWARD_TESTS = """
import torch

def test_on_device(device):
    w = torch.ones(2, requires_grad=True, device=device)
    (w * 2).sum().backward()

def test_on_accelerator(accelerator):
    w = torch.ones(2, requires_grad=True, device=accelerator)
    (w * 2).sum().backward()
"""


def test_an_accelerator_left_out_by_devices_is_not_used(pytester: pytest.Pytester,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """With --devices=cpu the `accelerator` fixture skips, saying the emulated device was not selected. It used
    to register the emulator there after the CPU test's backward pass, which PyTorch's autograd engine refuses
    (an internal assert), or run the test on a device the run had left out."""
    monkeypatch.setenv("PYTHONPATH", str(Path(samedevice.__file__).parent.parent))  # this samedevice, not another
    pytester.makepyfile(test_inner=BACKWARD_TESTS)
    result = pytester.runpytest_subprocess(*PLUGIN, "--devices=cpu", "-rs")
    result.assert_outcomes(passed=1, skipped=1)
    result.stdout.fnmatch_lines(["SKIPPED*emulated is not among the devices selected for this run (--devices)"])


OWN_PARAMETRIZATION = """
import pytest
import torch

@pytest.mark.parametrize("device", ["emulated"], indirect=True)
def test_only_emulated(device):
    assert device.type == "emulated"

@pytest.mark.parametrize(("steps", "device"), [(1, "cpu"), (2, "emulated")], indirect=["device"])
def test_pairs(steps, device):
    assert torch.ones(steps, device=device).sum().item() == steps

@pytest.mark.parametrize("device", ["cuda:1"], indirect=True)
def test_not_a_kind(device):
    pass

@pytest.mark.parametrize("device", ["xpu"], indirect=True)
def test_absent_kind(device):
    pass

def test_the_matrix(device):
    pass
"""


@pytest.mark.emulator
def test_a_test_may_parametrize_the_device_itself(pytester: pytest.Pytester) -> None:
    """A test's own indirect parametrization of `device` is its matrix, each value given to the fixture; a value
    that is no device kind is that test's error, naming it. It used to abort the collection of every test with
    "duplicate parametrization of 'device'"."""
    result = _inner(pytester, OWN_PARAMETRIZATION, "--devices=cpu,emulated", "-v", "-rs")
    result.assert_outcomes(passed=5, errors=1, skipped=1)
    result.stdout.fnmatch_lines(["SKIPPED*XPU is not available on this host"])  # why, not "not selected"
    result.stdout.fnmatch_lines(["*test_only_emulated?emulated? PASSED*", "*test_pairs?1-cpu? PASSED*",
                                 "*test_pairs?2-emulated? PASSED*", "*test_not_a_kind?cuda:1? ERROR*",
                                 "*test_the_matrix?cpu? PASSED*", "*test_the_matrix?emulated? PASSED*"])
    result.stdout.fnmatch_lines(["*the device fixture was given 'cuda:1'; give it a device kind: cpu, emulated, "
                                 "cuda, mps, xpu"])


CONFTEST_PARAMETRIZATION = """
def pytest_generate_tests(metafunc):
    if "device" in metafunc.fixturenames:
        metafunc.parametrize("device", ["cpu"], indirect=True)
"""


def test_a_conftest_may_parametrize_the_device(pytester: pytest.Pytester) -> None:
    """A project's own pytest_generate_tests that parametrizes `device` is its matrix (the plugin's hook runs last
    and adds none); it used to abort the collection with "duplicate parametrization of 'device'"."""
    pytester.makeconftest(CONFTEST_PARAMETRIZATION)
    result = _inner(pytester, PASSING_TEST, "-v")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*test_uses_devices?cpu? PASSED*"])


SETUP_ERROR_TEST = """
import pytest
import torch
from torch import nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 2)
        self.scale = torch.ones(2)

    def forward(self, x):
        return self.fc(x) * self.scale


@pytest.fixture
def trained(device):
    return Net().to(device)(torch.ones(1, 4, device=device))


def test_uses(trained):
    assert trained.shape == (1, 2)
"""


@pytest.mark.emulator
def test_a_device_error_in_a_fixture_gets_the_diagnosis(pytester: pytest.Pytester) -> None:
    """A fixture that fails with a device error is the test's error at setup; it gets the diagnosis as a failure
    in the test does (it used to get none)."""
    result = _inner(pytester, SETUP_ERROR_TEST, "--devices=cpu,emulated")
    result.assert_outcomes(passed=1, errors=1)
    section = result.stdout.str().split("device error diagnosis", 1)[1]
    assert "likeliest scenario: plain_tensor_attribute" in section


def test_options_are_listed_in_their_group(pytester: pytest.Pytester) -> None:
    """`pytest --help` lists the plugin's three options under their own heading."""
    result = _inner(pytester, PASSING_TEST, "--help")
    result.stdout.fnmatch_lines(["device matrix and device audit (same-device):",
                                 "*--devices=KINDS*", "*--require=KINDS*", "*--explain*"])


OWN_FIXTURE = """
import pytest

@pytest.fixture
def device():
    return "the project's own"

def test_own_device(device):
    assert device == "the project's own"
"""


def test_project_fixture_named_device_is_left_alone(pytester: pytest.Pytester) -> None:
    """A project that defines its own `device` fixture keeps it: the plugin does not parametrize it."""
    result = _inner(pytester, OWN_FIXTURE, "-v")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*test_own_device PASSED*"])


EXPLAINED = """
import pytest
from samedevice.pytest_plugin import record_error

@pytest.mark.parametrize("slug", ["sgd_momentum"])
def test_scenario(slug, request):
    record_error(request, slug, "RuntimeError: as captured")
"""


def test_explain_prints_the_lesson(pytester: pytest.Pytester) -> None:
    """--explain prints, for each scenario that ran, its title, captured error, lesson and diff."""
    scenario = registry.get("sgd_momentum")
    result = _inner(pytester, EXPLAINED, "--explain")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*= lesson: sgd_momentum =*", scenario.title, "Captured error of the broken run:",
                                 "    RuntimeError: as captured", "*Symptom*", "--- cases/sgd_momentum.py"])


UNTOUCHED = """
import torch

def test_backend_left_alone(device):
    assert torch._C._get_privateuse1_backend_name() == "privateuseone"
"""


def test_emulator_not_registered_when_not_selected(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    """With --devices leaving out the emulated accelerator, PyTorch's PrivateUse1 backend is left as it was."""
    monkeypatch.setenv("PYTHONPATH", str(Path(samedevice.__file__).parent.parent))  # this samedevice, not another
    pytester.makepyfile(test_inner=UNTOUCHED)
    result = pytester.runpytest_subprocess(*PLUGIN, "--devices=cpu")
    result.assert_outcomes(passed=1)


FORK_RNG = """
import torch

def test_fork_rng():
    with torch.random.fork_rng():
        torch.manual_seed(0)
        assert torch.rand(2).shape == (2,)
"""


def test_a_cpu_suite_with_warnings_as_errors_passes_as_without_the_plugin(pytester: pytest.Pytester,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """The emulator's two devices are the plugin's: fork_rng() without `devices`, which warns where the current
    accelerator has more than one, stays quiet, so a CPU-only suite run under `-W error` passes with the plugin
    as it does without (a fresh process: the warning is once per process)."""
    monkeypatch.setenv("PYTHONPATH", str(Path(samedevice.__file__).parent.parent))  # this samedevice, not another
    pytester.makepyfile(test_user=FORK_RNG)
    pytester.runpytest_subprocess(*PLUGIN, "-W", "error").assert_outcomes(passed=1)
    pytester.runpytest_subprocess("-p", "no:samedevice.pytest_plugin", "-W", "error").assert_outcomes(passed=1)


TAKEN = """
import sys
from torch.utils.backend_registration import _setup_privateuseone_for_python_backend

_setup_privateuseone_for_python_backend("npu")  # another out-of-tree backend owns PrivateUse1
import pytest

# a test of the emulator module (all marked `emulator`) and one scenario's catalog tests, on every device
sys.exit(pytest.main(["-q", "-rs", "-p", "no:cacheprovider", "tests/test_emulator.py::test_memory_accounting",
                      "tests/test_catalog.py", "-k", "test_memory_accounting or sgd_momentum"]))
"""


def test_privateuse1_taken_skips_cleanly() -> None:
    """Where another backend owns PrivateUse1, the emulator's tests skip with its one-line reason and
    the CPU tests still run and pass."""
    run = subprocess.run([sys.executable, "-c", TAKEN], cwd=registry.ROOT, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert "already taken by 'npu'" in run.stdout
    last = run.stdout.splitlines()[-1]
    # sgd_momentum on cpu ran; the emulated ones skipped: test_memory_accounting, and in the default matrix the
    # broken and the fixed module on the emulated device
    assert re.fullmatch(r"=* ?2 passed, 3 skipped.*", last), last


LIGHTNING_TEST = '''
import lightning as L
import torch
import torch.nn.functional as F


class Regressor(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Linear(4, 1)

    def training_step(self, batch, index):
        x, y = batch
        return F.mse_loss(self.net(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def test_one_epoch(lightning_kwargs, device):
    data = torch.utils.data.TensorDataset(torch.randn(8, 4), torch.randn(8, 1))
    trainer = L.Trainer(**lightning_kwargs, max_epochs=1, logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False)
    trainer.fit(Regressor(), torch.utils.data.DataLoader(data, batch_size=4))
    assert trainer.strategy.root_device.type == device.type
'''


@pytest.fixture(scope="module")  # a wider scope than pytester's: set up before its snapshot
def lightning_imported() -> None:
    """Lightning imported before pytester's snapshot of sys.modules. pytester drops the modules an in-process run
    first imports; imported again, torch._inductor.test_operators (which Lightning's import brings) registers its
    operator namespace a second time, which torch refuses, and every later torch.compile or export in this process
    fails (the tour, the report)."""
    pytest.importorskip("lightning", reason="lightning is not installed (pip install 'same-device[stacks]')")


@pytest.mark.emulator
@pytest.mark.usefixtures("lightning_imported")
def test_lightning_kwargs_runs_a_users_lightning_test_on_every_device(pytester: pytest.Pytester) -> None:
    """A user's Lightning test that takes lightning_kwargs runs on cpu and on the emulated device unchanged."""
    result = _inner(pytester, LIGHTNING_TEST, "--devices=cpu,emulated", "-v", "-W", "ignore::UserWarning",
                    "-W", "ignore::FutureWarning")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["*test_one_epoch?cpu? PASSED*", "*test_one_epoch?emulated? PASSED*"])
