"""The emulator's C++ part, compiled at first use into one library, cached, loaded before PyTorch's Python guard and
hooks, all of csrc/: the device guard and hooks (guard.cpp), CUDA's autocast policy (autocast.cpp), and the
native core (allocator.cpp, kernels.cpp, fallback.cpp).

Why at first use rather than at install (a torch C++ extension in the package build, the ecosystem's usual way):
the package stays one pure-Python wheel that installs anywhere PyTorch does, a new PyTorch needs no rebuild of
the wheel (the cache is per PyTorch version and source), and where no compiler is, everything but the emulator
(the catalog, `diagnose`, the helpers, the plugin's CPU runs) still works and the emulator says in one line
what to install.

The build takes about 30 s of CPU with g++ against the headers that PyTorch's wheel ships, one compiler per
source at once; the library is cached per PyTorch version and sources under $SAMEDEVICE_CACHE (default
~/.cache/samedevice), written to a temporary name and renamed, so processes that build at once never see half
a file.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

import torch

_HERE = Path(__file__).parent
SOURCES = tuple(sorted((_HERE / "csrc").glob("*.cpp")))
HEADERS = tuple(sorted((_HERE / "csrc").glob("*.h")))
_loaded: list[ctypes.CDLL] = []  # kept alive: the registered guard lives in this library


def cache_dir() -> Path:
    root = os.environ.get("SAMEDEVICE_CACHE") or Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
    return Path(root) / "samedevice"


def library_path() -> Path:
    sources = b"".join(source.read_bytes() for source in (*SOURCES, *HEADERS))
    digest = hashlib.sha256(sources + torch.__version__.encode() + sys.version.encode()).hexdigest()
    return cache_dir() / f"emulator-{torch.__version__.replace('+', '_')}-{digest[:16]}.so"


def _compiler() -> str:
    compiler = os.environ.get("CXX") or shutil.which("c++") or shutil.which("g++") or shutil.which("clang++")
    if compiler is None or shutil.which(compiler) is None:
        named = f" (CXX={compiler} is not a program)" if compiler else ""
        raise RuntimeError(f"no C++ compiler found{named}: install g++ or clang++, or set CXX")
    return compiler


def _headers() -> Path:
    include = Path(torch.__file__).parent / "include"
    if not (include / "c10" / "core" / "impl" / "DeviceGuardImplInterface.h").exists():
        raise RuntimeError(f"PyTorch's C++ headers are not installed (no {include.name}/c10 beside torch)")
    return include


def missing() -> str | None:
    """Why the library cannot be had here (one line), or None: it is built already, or a compiler and PyTorch's
    headers are there to build it. Cheap: builds nothing."""
    if _loaded or library_path().exists():
        return None
    try:
        _compiler()
        _headers()
    except RuntimeError as e:
        return str(e)
    return None


def _build(target: Path) -> None:
    include, lib = _headers(), Path(torch.__file__).parent / "lib"
    compiler = _compiler()
    target.parent.mkdir(parents=True, exist_ok=True)
    abi = int(torch._C._GLIBCXX_USE_CXX11_ABI)
    flags = ["-std=c++17", "-O1", "-fPIC", "-w", f"-D_GLIBCXX_USE_CXX11_ABI={abi}",
             f"-I{include}", f"-I{include / 'torch' / 'csrc' / 'api' / 'include'}"]
    with tempfile.TemporaryDirectory(dir=target.parent) as work:
        # one compiler per source, all at once (the headers dominate: each file takes seconds), then one link
        objects = [Path(work) / f"{source.stem}.o" for source in SOURCES]
        _run_all([[compiler, *flags, "-c", str(source), "-o", str(obj)] for source, obj in zip(SOURCES, objects)])
        tmp = Path(work) / target.name
        link = [compiler, "-shared", *map(str, objects), f"-L{lib}", "-lc10", "-ltorch_cpu", f"-Wl,-rpath,{lib}",
                "-o", str(tmp)]
        if sysconfig.get_platform().startswith("macosx"):
            link[1:1] = ["-undefined", "dynamic_lookup"]
        _run_all([link])
        os.replace(tmp, target)  # a whole file or none, for processes that build at once


def _run_all(commands: list[list[str]]) -> None:
    running = [subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True) for cmd in commands]
    failures = []
    for process in running:
        _, err = process.communicate(timeout=600)
        if process.returncode != 0:
            lines = err.strip().splitlines() or ["(no output)"]
            failures.append(next((line for line in lines if "error" in line), lines[-1]).strip())
    if failures:
        raise RuntimeError(f"compiling the emulator's C++ part failed: {failures[0]}")


def set_visible(count: int) -> None:
    """Tell the C++ hooks how many devices this host has (0: it plays a host without the accelerator)."""
    _loaded[0].samedevice_set_visible(int(count))


def mark_started() -> None:
    """The device was used in this process (as CUDA's lazy init): a child forked from now on cannot use it."""
    if _loaded:
        _loaded[0].samedevice_mark_started()


def in_bad_fork() -> bool:
    """This process was forked after its parent used the device, which it then cannot use (CUDA's rule)."""
    return bool(_loaded) and bool(_loaded[0].samedevice_in_bad_fork())


def elapsed_time(start_event_id: int, end_event_id: int) -> float:
    """Milliseconds between two recorded events, by their handles (see samedevice_elapsed_time in guard.cpp)."""
    out, error = ctypes.c_double(), ctypes.create_string_buffer(512)
    failed = _loaded[0].samedevice_elapsed_time(ctypes.c_void_p(start_event_id), ctypes.c_void_p(end_event_id),
                                                ctypes.byref(out), error, ctypes.c_size_t(len(error)))
    if failed:
        raise (ValueError if failed == 1 else RuntimeError)(error.value.decode())
    return out.value


def autograd_device_queues() -> int:
    """How many device queues PyTorch's autograd engine made at the process's first backward; -1: none yet."""
    return int(_loaded[0].samedevice_autograd_device_queues())


def load() -> str | None:
    """Build (once) and load the library. None when it is loaded, else why not (one line)."""
    if _loaded:
        return None
    try:
        path = library_path()
        if not path.exists():
            _build(path)
        _loaded.append(ctypes.CDLL(str(path)))
    except (OSError, RuntimeError, subprocess.SubprocessError) as e:
        return str(e).splitlines()[0] if str(e) else type(e).__name__
    return None


def library() -> ctypes.CDLL:
    return _loaded[0]


def install() -> str | None:
    """Register the C++ guard, hooks and autocast policy from the loaded library. None when they are in place, else
    why not (one line)."""
    why = load()
    if why is not None:
        return why
    lib = _loaded[0]
    if not lib.samedevice_register_guard():
        return "another device guard was registered for PrivateUse1 first"
    if not lib.samedevice_register_autocast():
        return "CUDA's autocast policy could not be registered for the emulated device (another one is there)"
    return None
