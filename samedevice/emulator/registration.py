"""1. Registration: PrivateUse1 renamed "emulated", the C++ part (guard.py builds it: the device guard,
hooks, autocast policy and the native core), the device module that PyTorch finds as `torch.emulated`
(like `torch.cuda`), the current device, and the absent host."""

from __future__ import annotations

import atexit
import contextlib
import os
import re
import sys
import time
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import torch

from samedevice.errors import EmulatorUnavailableError as EmulatorUnavailableError

NAME = "emulated"
DEVICE_COUNT = 2
ABSENT_ENV = "SAMEDEVICE_EMULATOR_ABSENT"  # "1": this process plays a host without the accelerator
VISIBLE_ENV = "SAMEDEVICE_EMULATOR_VISIBLE"  # "1": this process plays a host with that many of the devices


# ---- the absent host, and a host with fewer devices ----------------------------------------------

_absent_depth = 0
_visible_limits: list[int] = []  # the counts of the visible() blocks the process is in
_draining = False  # the exit's drain (below) uses the devices even on a host that plays absent


def is_absent() -> bool:
    return not _draining and (_absent_depth > 0 or os.environ.get(ABSENT_ENV) == "1" or _shown() == 0)


def _shown() -> int:
    """How many devices the visible() blocks and SAMEDEVICE_EMULATOR_VISIBLE leave this host (all by default)."""
    counts = [DEVICE_COUNT, *_visible_limits]
    shown = os.environ.get(VISIBLE_ENV, "").strip()
    if shown:
        if not re.fullmatch(r"[0-9]+", shown, re.ASCII) or int(shown) > DEVICE_COUNT:
            raise ValueError(f"{VISIBLE_ENV}={os.environ[VISIBLE_ENV]!r}: give how many of the emulator's "
                             f"{DEVICE_COUNT} devices this host has, 0 to {DEVICE_COUNT}")
        counts.append(int(shown))
    return min(counts)


@contextlib.contextmanager
def absent() -> Iterator[None]:
    """Inside this block the process behaves like a host without the accelerator: the backend stays
    registered (locations such as "emulated:0" still parse) but `torch.emulated.is_available()` is
    False, `device_count()` is 0, allocating on it fails, and `torch.load` of an emulated checkpoint
    without `map_location` raises PyTorch's own "Attempting to deserialize object on a ... device"
    error. For a subprocess, set the environment variable SAMEDEVICE_EMULATOR_ABSENT=1."""
    global _absent_depth
    register()
    _absent_depth += 1
    _sync_absent()
    try:
        yield
    finally:
        _absent_depth -= 1
        _sync_absent()


@contextlib.contextmanager
def visible(count: int) -> Iterator[None]:
    """Inside this block the process plays a host with `count` of the emulator's devices, the first ones, as
    CUDA_VISIBLE_DEVICES=0 shows a process one GPU of a larger machine: `torch.emulated.device_count()` and
    `torch.accelerator.device_count()` are `count`, allocating on a higher index fails, and the RNG functions have
    no generator for it (`torch.emulated.set_rng_state(state, 1)` raises torch.cuda's IndexError). A checkpoint
    written by a run that had all the devices meets, here, the host that resumes it with fewer. `visible(0)` is
    `absent()`. For a subprocess, set the environment variable SAMEDEVICE_EMULATOR_VISIBLE=<count>. Unlike CUDA,
    `torch.accelerator.set_device_index` still takes a hidden index (the C++ guard's own count is fixed, for the
    autograd engine's device threads); allocating there is refused."""
    if not isinstance(count, int) or isinstance(count, bool) or not 0 <= count <= DEVICE_COUNT:
        raise ValueError(f"visible({count!r}): the emulator has {DEVICE_COUNT} devices, a host can show 0 to "
                         f"{DEVICE_COUNT} of them")
    register()
    _visible_limits.append(count)
    _sync_absent()
    try:
        yield
    finally:
        _visible_limits.remove(count)
        _sync_absent()


def visible_count() -> int:
    """How many emulated devices this host has: all of them, none where it plays absent, fewer in `visible(n)`."""
    if is_absent():
        return 0
    return DEVICE_COUNT if _draining else _shown()


def _sync_absent() -> None:
    # the C++ hooks (guard.cpp) answer is_available, the device count, is_pinned and pin_memory without calling Python
    if _registered or _registering:
        from samedevice.emulator import guard

        guard.set_visible(visible_count())


def check_present(index: int | None = None) -> None:
    """Refuse to allocate on an absent device, as CUDA does on a host without a GPU (where
    torch.cuda._lazy_init raises "Found no NVIDIA driver on your system"), and in a process forked after its parent
    used the device (torch.cuda._lazy_init's "Cannot re-initialize CUDA in forked subprocess")."""
    if _DeviceModule._is_in_bad_fork():
        raise RuntimeError(f"Cannot re-initialize {NAME} in forked subprocess. To use {NAME} with multiprocessing, "
                           "you must use the 'spawn' start method")
    if is_absent():
        raise RuntimeError(
            f"Found no {NAME} device on this host: torch.{NAME}.is_available() is False "
            f"(samedevice.emulator.absent() or {ABSENT_ENV}=1 plays a host without the accelerator)"
        )
    if index is not None and not 0 <= index < DEVICE_COUNT:
        raise RuntimeError(
            f"{NAME}:{index} does not exist: the emulator has {DEVICE_COUNT} devices, "
            f"indices 0 to {DEVICE_COUNT - 1}"
        )
    shown = visible_count()
    if index is not None and index >= shown:
        raise RuntimeError(
            f"{NAME}:{index} does not exist on this host: it has {shown} of the emulator's {DEVICE_COUNT} devices "
            f"(samedevice.emulator.visible({shown}) or {VISIBLE_ENV}={shown} plays a host with fewer devices)"
        )
    if _registered:  # the current device, a generator, a stream: a use of the device, as CUDA's lazy init is
        from samedevice.emulator import guard

        guard.mark_started()


# ---- the current device -------------------------------------------------------------------------
# The current device is the C++ guard's (per host thread, like cudaSetDevice), so
# torch.accelerator.set_device_index, torch.emulated.set_device and the autograd engine's device
# threads all agree.


def current_index() -> int:
    return torch.accelerator.current_device_index()


def set_index(index: int) -> None:
    check_present(index)
    torch.accelerator.set_device_index(index)


def index_of(dev: Any) -> int:
    """The emulated index `dev` names: an int, "emulated:N", or an index-less "emulated" (the current device)."""
    if dev is None:
        return current_index()
    if isinstance(dev, int):
        return dev
    dev = torch.device(dev)
    if dev.type != NAME:
        raise ValueError(f"{dev} is not an {NAME} device")
    return current_index() if dev.index is None else dev.index


class _DeviceContext:
    """`with torch.emulated.device(i):` like torch.cuda.device: switch, then restore; -1 or None is a no-op."""

    def __init__(self, dev: Any) -> None:
        self.index = -1 if dev is None else index_of(dev)
        self.previous = -1

    def __enter__(self) -> None:
        if self.index != -1:
            self.previous = current_index()
            set_index(self.index)

    def __exit__(self, *exc: object) -> None:
        if self.index != -1:
            set_index(self.previous)


class _DeviceModule:
    """What PyTorch looks up as `torch.emulated` (like `torch.cuda`)."""

    @staticmethod
    def is_available() -> bool:
        return visible_count() > 0

    @staticmethod
    def is_initialized() -> bool:
        return not _DeviceModule._is_in_bad_fork()  # torch.cuda.is_initialized: not in a bad fork

    @staticmethod
    def device_count() -> int:
        return visible_count()

    current_device = staticmethod(current_index)

    @staticmethod
    def set_device(dev: Any) -> None:
        index = index_of(dev)
        if index >= 0:
            set_index(index)

    device = _DeviceContext

    @staticmethod
    def synchronize(dev: Any = None) -> None:
        """Every op runs synchronously on the host: there is nothing to wait for."""

    @staticmethod
    def _is_in_bad_fork() -> bool:
        from samedevice.emulator import guard

        return guard.in_bad_fork()

    # manual_seed, get_rng_state & co. are rng.py's (each device's own generator), set on this class there

    @staticmethod
    def get_amp_supported_dtype() -> list[torch.dtype]:
        return [torch.float16, torch.bfloat16]


# ---- a clean exit ---------------------------------------------------------------------------------
# PyTorch starts the autograd worker threads at the process's first backward, one per device its device
# guards report (engine.cpp, Engine::start_device_threads): two here, as on a two-GPU host. Each new
# thread takes the GIL once, to make its Python thread state (python_engine.cpp, PythonEngine::thread_init),
# and the engine waits only until the threads exist, not until they have the GIL. A thread with no work
# yet (emulated:1's, in a script that only uses emulated:0), or one the OS has not run yet (a busy
# machine), may first ask for the GIL after the interpreter has begun to finalize; CPython then ends it
# with pthread_exit, which unwinds through PyTorch's thread routine and aborts ("terminate called without
# an active exception"), or, when it does not, leaves the engine waiting 10 s at exit for a thread that
# is gone. So at exit, before finalizing, the emulator hands each device's worker one tiny graph and waits
# for it: a worker runs it only after it has its thread state, and then sleeps in C++ without Python.
# tests/test_emulator_host.py reproduces the race on demand, by delaying the workers' start.
# The same abort has a second way in, caught with a backtrace at abort() (Engine::thread_main ->
# TensorImpl::decref_pyobject -> PyEval_AcquireThread): a worker marks its graph done, the caller
# resumes, and only then, at the end of its loop's turn, does the worker drop its GraphTask, whose
# future holds the gradients `torch.autograd.grad` returned. A tensor whose C++ count falls to the one
# reference its Python object holds hands that object back (decref_pyobject), which takes the GIL: on a
# busy machine, during the finalization. So the gradient gets one more C++ reference, as the leaf's
# `.grad`: the worker's late drop then leaves two, and touches no Python object. The GraphTask also
# holds the caller's thread-local state, whose Python objects (SafePyObject) its disposal releases
# under the GIL (~ThreadLocalState); no interface says when a worker has finished its turn, so the
# drain ends with a short wait, the GIL released, in which a worker descheduled at its turn's end runs.

_last_graph: list[Any] = []
DRAIN_WAIT_S = 0.05


def _drain_autograd_workers() -> None:
    # A host that plays absent drains too: a CPU backward starts the device workers all the same.
    global _draining
    _draining = True
    _sync_absent()
    for index in range(DEVICE_COUNT):
        try:
            leaf = torch.ones((), device=torch.device(NAME, index), requires_grad=True)
            seed = torch.ones((), device=torch.device(NAME, index))
            out = leaf * 1.0
            grads = torch.autograd.grad(out, leaf, seed)
            leaf.grad = grads[0]  # a second C++ reference to the gradient: see above
            _last_graph.append((leaf, seed, out, grads))
        except Exception:  # never fail an exit over this
            return
    time.sleep(DRAIN_WAIT_S)


# ---- registration -------------------------------------------------------------------------------

_registered = False
_registering = False
_on_register: list[Callable[[], None]] = []  # the other sections' registrations, in section order


def unavailable_reason() -> str | None:
    """One line saying why the emulator cannot run in this process, or None when it can (without a compiler
    and no built library cached, the reason says what to install). Builds nothing: registering does."""
    taken = torch._C._get_privateuse1_backend_name()
    if taken not in ("privateuseone", NAME):
        return (
            f"the emulated accelerator needs PyTorch's PrivateUse1 backend, "
            f"but it is already taken by {taken!r}"
        )
    if _registered:
        return None
    from samedevice.emulator import guard

    why = guard.missing()
    if why is not None:
        return f"the emulated accelerator needs its C++ part, which cannot be built here: {why}"
    return None


def register() -> None:
    """Register the backend (idempotent)."""
    global _registered, _registering
    if _registered:
        return
    reason = unavailable_reason()
    if reason:
        raise EmulatorUnavailableError(reason)
    _shown()  # a SAMEDEVICE_EMULATOR_VISIBLE it cannot read is refused before anything is installed
    from samedevice import compat

    compat.check()  # one line naming a missing private API; one warning on an untested torch
    from torch.utils.backend_registration import generate_methods_for_privateuse1_backend, rename_privateuse1_backend

    from samedevice.emulator import guard, native

    _registering = True
    # the C++ guard and hooks first: PyTorch keeps the first guard registered for a device type, and takes the
    # hooks once (what _setup_privateuseone_for_python_backend does, with C++ in place of its Python guard)
    why = guard.install()
    if why is not None:
        raise EmulatorUnavailableError(f"the emulated accelerator could not register its C++ part: {why}")
    rename_privateuse1_backend(NAME)
    generate_methods_for_privateuse1_backend()
    torch._register_device_module(NAME, _DeviceModule())
    native.install(guard.library())
    for hook in _on_register:
        hook()
    _hide_from_dynamo()
    _warn_if_registered_late()
    _sync_absent()
    atexit.register(_drain_autograd_workers)
    _registered = True


def _hide_from_dynamo() -> None:
    """torch.compile's frame hook stays set while a compiled function runs eagerly (after a graph break), and
    would compile the emulator's own Python (its dispatch, its kernels) as user code. Every function of the
    emulator is marked as Dynamo marks its own (torch._dynamo.eval_frame.skip_code, recursively: what it calls
    is skipped too), through the C entry point, so registering imports nothing of Dynamo."""
    from torch._C._dynamo.eval_frame import _FrameAction, _FrameExecStrategy, set_code_exec_strategy

    skip = _FrameExecStrategy(_FrameAction.SKIP, _FrameAction.SKIP)
    seen: set[int] = set()

    def mark(code: Any) -> None:
        if id(code) in seen:
            return
        seen.add(id(code))
        set_code_exec_strategy(code, skip)
        for const in code.co_consts:
            if hasattr(const, "co_code"):
                mark(const)

    def visit(obj: Any, depth: int = 0) -> None:
        if isinstance(obj, (staticmethod, classmethod)):
            obj = obj.__func__
        if isinstance(obj, property):
            for fn in (obj.fget, obj.fset, obj.fdel):
                if fn is not None:
                    visit(fn)
        elif hasattr(obj, "__code__") and getattr(obj, "__module__", "").startswith(__package__):
            mark(obj.__code__)
        elif isinstance(obj, type) and obj.__module__.startswith(__package__) and depth == 0:
            for member in vars(obj).values():
                visit(member, 1)

    for name, module in list(sys.modules.items()):
        if name.startswith(__package__):
            for obj in list(vars(module).values()):
                visit(obj)


def _warn_if_registered_late() -> None:
    """PyTorch's autograd engine makes its device queues once, at the process's first backward, for the devices
    registered then (engine.cpp, Engine::start_device_threads); a later backward on an emulated device beyond
    them fails with PyTorch's "INTERNAL ASSERT FAILED ... please report a bug". Say so now, in one line."""
    from samedevice.emulator import guard

    queues = guard.autograd_device_queues()
    if 0 <= queues < DEVICE_COUNT:
        first = f"{NAME}:{queues}" if queues else f"any {NAME} device"
        warnings.warn(
            f"samedevice: the emulated accelerator was registered after this process's first backward pass, when "
            f"PyTorch's autograd engine made queues for {queues} device(s): a backward on {first} will fail with "
            "an INTERNAL ASSERT; register it before any backward (samedevice.emulator.device(); in pytest the "
            "plugin does)", RuntimeWarning, stacklevel=4)


def device(index: int = 0) -> torch.device:
    """The emulated device `emulated:<index>`; registers the backend on first use."""
    if not isinstance(index, int) or not 0 <= index < DEVICE_COUNT:
        raise ValueError(
            f"emulated device index {index!r} is out of range: "
            f"the emulator has {DEVICE_COUNT} devices, indices 0 to {DEVICE_COUNT - 1}"
        )
    register()
    return torch.device(NAME, index)


@contextlib.contextmanager
def active() -> Iterator[None]:
    """Inside this block the emulated devices work like any accelerator.

    The emulator needs no mode (it is a registered backend), so this only registers it; it exists
    so that code written against the contract keeps working if a mode is ever needed.
    """
    register()
    yield


def trainable_device_count() -> int:
    """How many emulated devices run backward here (none on a host that plays absent, fewer in `visible(n)`)."""
    register()
    return visible_count()


def is_emulated(dev: torch.device | str) -> bool:
    return torch.device(dev).type == NAME
