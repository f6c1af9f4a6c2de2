"""same-device's pytest plugin: run your tests on every device, the emulated accelerator included.

Installed with the package (entry point `pytest11`), so any project that installs same-device gets:
- the `device` fixture, parametrized over cpu, the emulated accelerator and every real accelerator
  present, and the `accelerator` fixture, the same without cpu; the device kind is the test id
  (`test_step[emulated]`), so `pytest -k emulated` picks one; the run's header names the matrix, and
  an emulator that cannot run here (no compiler) stays in it, its tests skipping with the reason;
- `--devices=cpu,cuda` to restrict the matrix, `--require=cuda` to fail, not skip, when a device
  is missing (a GPU runner that lost its GPU must not pass green);
- the device audit: a test that registers its objects (`audit.register(request, device, model=...)`)
  and fails with a device mismatch gets a "device audit" section naming each misplaced tensor;
- `--explain`: after a run of the catalog's tests, each selected scenario's lesson;
- the diagnosis: a test that fails with a device error gets a "device error diagnosis" section, the
  scenario `samedevice diagnose` finds likeliest, why, and the command that shows its lesson;
- `lightning_kwargs`: the keyword arguments that put `L.Trainer` or `L.Fabric` on the test's `device`
  (`L.Trainer(**lightning_kwargs, max_epochs=1)`), so a Lightning test runs on every device unchanged;
  Lightning is imported only by a test that asks for it, and one without it skips saying so;
- `hf_device`: accelerate, and so a Hugging Face `Trainer`, runs on the test's device for that test
  (give the Trainer `samedevice.integrations.hf.callbacks()` so a resume restores the device's RNG).

The emulated backend is registered at configure time, before any test runs a backward pass (PyTorch
sizes its autograd device queues at the first backward of a process), when "emulated" is among the
selected devices. `--devices` without it leaves PyTorch untouched; `-p no:samedevice.pytest_plugin`
turns the whole plugin off.
"""

from __future__ import annotations

import argparse
import ast
import inspect
import sys
import textwrap
import traceback
from collections.abc import Callable, Generator, Iterable
from pathlib import Path
from types import CodeType, TracebackType

import pytest
import torch

from samedevice import audit, compat, devices, diagnose, emulator, registry

_SELECTED = pytest.StashKey[list[str]]()
_ERRORS = pytest.StashKey[dict[str, str]]()  # slug -> the broken run's captured error, for --explain


def device_list(value: str) -> list[str]:
    """argparse type of --devices and --require: comma-separated device kinds, each one known."""
    try:
        return devices.parse(value)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("same-device", "device matrix and device audit (same-device)")
    group.addoption("--devices", type=device_list, default=[], metavar="KINDS",
                    help=f"comma-separated device kinds to test on ({', '.join(devices.KNOWN)}); "
                         "default: cpu, emulated and every accelerator present")
    group.addoption("--require", type=device_list, default=[], metavar="KINDS",
                    help="comma-separated device kinds that must be present: fail instead of skip")
    group.addoption("--explain", action="store_true",
                    help="after the run, print each selected catalog scenario's lesson")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "emulator: needs the emulated accelerator; skipped with its one-line "
                                       "reason where PrivateUse1 is taken")
    required: list[str] = config.getoption("require")
    # the default matrix keeps the emulated accelerator where it cannot run here (no compiler, PrivateUse1 taken):
    # its tests skip saying why, where leaving it out would pass a suite green that never ran on an accelerator
    selected = config.getoption("devices") or [*devices.present(), "emulated"]
    for name in required:
        reason = devices.unavailable_reason(name)
        if reason:
            raise pytest.UsageError(f"--require={name}: {reason}")
    selected = sorted(set(selected) | set(required), key=devices.KNOWN.index)
    if "emulated" in selected and emulator.unavailable_reason() is None:
        try:
            emulator.device()  # before any backward pass: see the module docstring
        except compat.UnsupportedTorchError as e:
            raise pytest.UsageError(str(e)) from None
        # torch.random.fork_rng() without `devices` warns once per process where the current accelerator has more
        # than one device (initializing many GPUs is slow). The emulator's two devices are this plugin's, not the
        # project's: a CPU-only suite run with warnings as errors must pass as it does without the plugin
        if hasattr(torch.random, "_fork_rng_warned_already"):
            torch.random._fork_rng_warned_already = True
    config.stash[_SELECTED] = selected
    config.stash[_ERRORS] = {}
    _hide_emulator_frames()


def pytest_report_header(config: pytest.Config) -> list[str]:
    """The device matrix, and why a device in it cannot run here, at the top of the run."""
    selected = config.stash[_SELECTED]
    lines = [f"same-device: devices {', '.join(selected)}"]
    for name in selected:
        reason = devices.unavailable_reason(name)
        if reason:
            lines.append(f"same-device: {name} tests skip: {reason}")
    return lines


def _hide_emulator_frames() -> None:
    """Leave the emulator's own frames out of a failing test's traceback, so that it ends, as on CUDA,
    at the PyTorch call that raised: pytest skips the frames of a module whose globals hold a true
    `__tracebackhide__`. `--fulltrace` shows them."""
    for name, module in list(sys.modules.items()):
        if name == "samedevice.emulator" or name.startswith("samedevice.emulator."):
            module.__tracebackhide__ = True  # type: ignore[attr-defined]


def _ours(metafunc: pytest.Metafunc, name: str) -> bool:
    """True when the fixture `name` a test uses is this plugin's, not one the project defines itself."""
    definitions = getattr(metafunc, "_arg2fixturedefs", {}).get(name)  # the closest definition is last
    return not definitions or getattr(definitions[-1].func, "__module__", None) == __name__


def _parametrized(metafunc: pytest.Metafunc, name: str) -> bool:
    """True when the test parametrizes `name` itself (`@pytest.mark.parametrize("device", ["emulated"],
    indirect=True)`, or a conftest's `metafunc.parametrize`): its own values are the matrix, each given to the
    fixture."""
    if any(name in call.params for call in getattr(metafunc, "_calls", ())):  # a project's pytest_generate_tests
        return True
    for marker in metafunc.definition.iter_markers("parametrize"):
        names = marker.args[0] if marker.args else marker.kwargs.get("argnames", ())
        if isinstance(names, str):
            names = [n.strip() for n in names.split(",")]
        if name in names:
            return True
    return False


@pytest.hookimpl(trylast=True)
def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    # trylast: the device id comes after the scenario id, e.g. test_x[sgd_momentum-emulated]
    selected = metafunc.config.stash[_SELECTED]
    if "device" in metafunc.fixturenames and _ours(metafunc, "device") and not _parametrized(metafunc, "device"):
        metafunc.parametrize("device", selected, indirect=True, ids=selected)
    if ("accelerator" in metafunc.fixturenames and _ours(metafunc, "accelerator")
            and not _parametrized(metafunc, "accelerator")):
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
    name = request.param  # a device kind: this plugin's matrix, or a test's own indirect parametrization
    if name not in devices.KNOWN:
        pytest.fail(f"the {request.fixturename} fixture was given {name!r}; give it a device kind: "
                    f"{', '.join(devices.KNOWN)}", pytrace=False)
    if name not in request.config.stash[_SELECTED]:  # the emulator is registered at start-up only when selected
        pytest.skip(devices.unavailable_reason(name) or f"{name} is not among the devices selected for this run "
                    "(--devices)")
    reason = devices.unavailable_reason(name)
    if reason:
        pytest.skip(reason)
    return devices.resolve(name)


@pytest.fixture
def device(request: pytest.FixtureRequest) -> torch.device:
    """Every device kind selected for this run: cpu, emulated, and the accelerators present."""
    return _device(request)


@pytest.fixture
def accelerator(request: pytest.FixtureRequest) -> torch.device:
    """Every selected device kind but cpu."""
    return _device(request)


@pytest.fixture
def lightning_kwargs(device: torch.device) -> dict[str, object]:
    """`L.Trainer(**lightning_kwargs)` / `L.Fabric(**lightning_kwargs)` on the test's device."""
    pytest.importorskip("lightning", reason="lightning is not installed (pip install 'same-device[stacks]')")
    from samedevice.integrations import lightning

    return lightning.trainer_kwargs(device)


@pytest.fixture
def hf_device(device: torch.device) -> Generator[torch.device, None, None]:
    """accelerate's (and Trainer's) device is the test's device during the test, then forgotten."""
    for stack in ("transformers", "accelerate"):
        pytest.importorskip(stack, reason=f"{stack} is not installed (pip install 'same-device[stacks]')")
    from samedevice.integrations import hf

    hf.reset()
    yield hf.use_device(device)
    hf.reset()


def record_error(request: pytest.FixtureRequest, slug: str, error: str) -> None:
    """Keep the first error a scenario's broken run raised, for the --explain lesson."""
    request.config.stash[_ERRORS].setdefault(slug, error)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, exitstatus: int, config: pytest.Config) -> None:
    if not config.getoption("explain"):
        return
    ran = [report.nodeid for key in ("passed", "failed") for report in terminalreporter.stats.get(key, [])]
    for slug in registry.slugs():
        if not any(f"[{slug}" in nodeid for nodeid in ran):
            continue
        scenario = registry.get(slug)
        error = config.stash[_ERRORS].get(slug, "(no accelerator run in this session)")
        terminalreporter.write_sep("=", f"lesson: {slug}")
        found = diagnose.summary(diagnose.diagnose(error)) or "(no diagnosis)"
        for line in (scenario.title, "", "Captured error of the broken run:", f"    {error}", "",
                     "What `samedevice diagnose` makes of that message alone:", textwrap.indent(found, "    "), "",
                     scenario.lesson(), "", scenario.diff()):
            terminalreporter.write_line(line)


DIAGNOSED_CHARS = 20_000  # of a failing test's traceback, the end the diagnosis reads; as much of its code
PACKAGE = Path(__file__).resolve().parent


def _own(code: CodeType) -> bool:
    """Code of the user's own: not a library's (site-packages, torch), nor this package's, nor code with no file."""
    if diagnose.LIBRARY.search(code.co_filename):
        return False
    path = Path(code.co_filename)
    return path.is_file() and PACKAGE not in path.resolve().parents


def _fixtures(item: pytest.Item) -> list[Callable[..., object]]:
    """The functions of the fixtures the test used, in the order pytest set them up: for each of the test's fixture
    names, the fixtures it requests first (an override that requests its own name, the definition it overrides),
    then itself. pytest lists a test's fixture definitions only in its own `_fixtureinfo`: where that is missing, or
    reading it fails, none."""
    order: list[Callable[..., object]] = []
    done: set[tuple[str, int]] = set()

    def set_up(name: str, which: int) -> None:  # which: -1 the definition the test sees, -2 the one it overrides...
        chain = defs.get(name) or ()
        if len(chain) < -which or (name, which) in done:
            return
        done.add((name, which))
        for requested in chain[which].argnames:
            set_up(requested, which - 1 if requested == name else -1)
        order.append(chain[which].func)

    try:
        defs = item._fixtureinfo.name2fixturedefs  # type: ignore[attr-defined]
        for name in item.fixturenames:  # type: ignore[attr-defined]
            set_up(name, -1)
    except Exception:  # no Python test (a doctest, another plugin's item), or pytest's private names changed
        return []
    return order


def _setup_source(function: Callable[..., object]) -> str | None:
    """A fixture's source as the diagnosis reads it: its setup, up to its first `yield` (its teardown runs after the
    test), the function under its decorators; None where it does not parse on its own (a string at the column of
    its class's method), which would spoil the reading of the code it is read with."""
    source = textwrap.dedent(inspect.getsource(function))
    tree = diagnose._parsed(source)
    if tree is None:
        return None
    yields = [n.end_lineno for n in ast.walk(tree) if isinstance(n, (ast.Yield, ast.YieldFrom)) and n.end_lineno]
    setup = "\n".join(source.splitlines()[:min(yields)]) + "\n" if yields else source
    return setup if diagnose._parsed(setup) is not None else source  # (a yield inside `try:` cut there: all of it)


def _user_code(tb: TracebackType | None, before: Iterable[Callable[..., object]] = ()) -> str:
    """The code of the user's own frames the traceback passes through, as `--code` gives it to the diagnosis: a
    module's method, its class's whole source (its `__init__` keeps the tensors `forward` reads: the class that
    defines the method, not a subclass); another function, its own source (a test's, not its test class's). Not a
    library's frames (site-packages, torch), nor this package's, nor code with no file. Whole sources, nearest the
    error first, up to DIAGNOSED_CHARS; a frame whose source cannot be read is left out. Then, with what the budget
    leaves, the functions that ran `before` the test's frames (its fixtures, which build and load what the test
    runs), read first as they ran first."""
    frames = []
    while tb is not None:
        frames.append(tb.tb_frame)
        tb = tb.tb_next
    parts: dict[str, None] = {}
    seen: set[object] = set()
    for frame in reversed(frames):  # nearest the error first: what a budget keeps
        code = frame.f_code
        if code in seen:
            continue
        seen.add(code)
        try:
            if not _own(code):
                continue
            owner = frame.f_locals.get("self") if code.co_varnames[:1] == ("self",) else None
            defining = next((c for c in type(owner).__mro__ if any(getattr(f, "__code__", None) is code
                                                                  for f in vars(c).values())), None) \
                if isinstance(owner, torch.nn.Module) else None
            if defining is not None and defining in seen:
                continue  # (another method of a class already read)
            seen.add(defining or code)
            source = inspect.getsource(defining or code)
        except Exception:  # a file changed since it ran, a name too long for the disk: no code from this frame
            continue
        if len(seen) > 64:
            break  # (at most 64 functions and classes: a recursion repeats one, read once)
        if sum(map(len, parts)) + len(source) <= DIAGNOSED_CHARS:  # (one too long for what is left is left out)
            parts[textwrap.dedent(source)] = None
    ran_before: dict[str, None] = {}
    for function in before:
        try:
            function = inspect.unwrap(function)  # the fixture's own function, under its decorators
            made = getattr(function, "__code__", None)
            if not isinstance(made, CodeType) or made in seen or not _own(made):
                continue
            seen.add(made)
            setup = _setup_source(function)
        except Exception:  # as for a frame: no code from a fixture whose source cannot be read
            continue
        if setup is not None and sum(map(len, parts)) + sum(map(len, ran_before)) + len(setup) <= DIAGNOSED_CHARS:
            ran_before[setup] = None
    return "\n\n".join([*ran_before, *reversed(parts)])


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """When a test fails with a device-mismatch error, add what the device audit finds among the
    objects the test registered (`audit.register(request, device, model=..., optimizer=...)`):
    PyTorch's message never names the tensor. A device error in the test or in a fixture it set up gets
    the diagnosis."""
    report = yield
    if call.when == "call":
        found = audit.take(item)  # always take, so the registered objects are released
        if report.failed and call.excinfo is not None and audit.is_device_mismatch(call.excinfo.value) and found:
            report.sections.append(("device audit", found))
    if report.failed and call.excinfo is not None and call.when in ("setup", "call"):
        section = _diagnosis(item, call.excinfo)
        if section:
            report.sections.append(("device error diagnosis", section))
    return report


def _diagnosis(item: pytest.Item, excinfo: pytest.ExceptionInfo[BaseException]) -> str:
    """The diagnosis of a device error (the likeliest scenario, why, its lesson), or "" for another failure."""
    # the end of the traceback: the error and the frames nearest it (a huge message is not read whole)
    text = "".join(traceback.format_exception(excinfo.value))[-DIAGNOSED_CHARS:]
    try:  # (the code only for a device error: another failure gets no section, and no time spent on it)
        code = _user_code(excinfo.tb, _fixtures(item)) if diagnose.read(text).kind is not None else ""
        diagnosis = diagnose.diagnose(text, code)
    except Exception as e:  # the test's own failure is the report; the diagnosis is extra
        return f"(the diagnosis failed: {e!r})"
    return diagnose.summary(diagnosis) if diagnosis.facts.kind is not None else ""  # device errors only
