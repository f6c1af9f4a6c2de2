"""Real ranks for the multi-device scenarios: one process per rank, torch.distributed with the gloo
engine, every wait bounded by a timeout.

    results = ranks.launch("cases.ddp_rank_map_location:train", world_size=2, kind="emulated",
                           workdir=tmp)   # [rank 0's return value, rank 1's]

Each rank, a process forked from a server that has imported torch once, runs
`function(rank, world_size, device, workdir)` with the default process group initialised, `device`
being `<kind>:<rank>` (CPU for "cpu"). The ranks meet through a FileStore in `workdir`, so no port
can be taken. When a rank raises, the others are stopped at once and `launch` raises the first
failure's exception type with its message. A run that cannot start says why in one line:
`UnavailableError` for too few devices, `RuntimeError` for a rank that dies or a run past its
timeout (`TIMEOUT_S`, which also bounds every collective).

Gloo moves CPU and CUDA tensors. For the emulated device, a thin backend (`EmulatedGloo`,
registered for the device type through `torch.distributed.Backend.register_backend`) hands gloo
the CPU tensor under each emulated one: gloo does every collective, on the very memory of the
emulated tensors. Each rank's output goes to `workdir/rank<N>.log`.
"""

from __future__ import annotations

import contextlib
import datetime
import functools
import importlib
import json
import multiprocessing
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
import torch._C._distributed_c10d as c10d

from samedevice import emulator, harness, registry

TIMEOUT_S = 60.0
# an emulated peer device's size in own_device_only: its out-of-memory message then reads as a real
# GPU's that another rank fills ("total capacity of 8.00 GiB of which 0 bytes is free")
PEER_DEVICE_SIZE = 8 * 2**30
_ERRORS: dict[str, type[BaseException]] = {
    "OutOfMemoryError": torch.OutOfMemoryError,
    "RuntimeError": RuntimeError,
    "TypeError": TypeError,
    "ValueError": ValueError,
    "AssertionError": AssertionError,
}


class UnavailableError(RuntimeError):
    """The run cannot start on this host (e.g. one device where two are needed)."""


def unavailable_reason(kind: str, world_size: int) -> str | None:
    """None when `world_size` ranks of device kind `kind` can run here, else one line saying why."""
    if kind == "cpu":
        return None
    if kind == "emulated":
        return emulator.unavailable_reason()
    count = torch.get_device_module(kind).device_count() if hasattr(torch, kind) else 0
    if count < world_size:
        return f"{world_size} ranks on {kind} need {world_size} {kind} devices; this host has {count}"
    return None


def device_of(kind: str, rank: int) -> torch.device:
    """Rank `rank`'s device: `<kind>:<rank>`, or CPU for every rank of a CPU run."""
    if kind == "cpu":
        return torch.device("cpu")
    return emulator.device(rank) if kind == emulator.NAME else torch.device(kind, rank)


@contextlib.contextmanager
def own_device_only(device: torch.device, world_size: int) -> Iterator[None]:
    """Inside this block, the devices of the other ranks have no memory for this one: an allocation
    there raises torch.OutOfMemoryError, as on a GPU that another rank's training fills. (Each
    process accounts for its own allocations, on CUDA as on the emulator, so this is the budget of
    this process on those devices.)"""
    with contextlib.ExitStack() as stack:
        if device.type != "cpu":
            for rank in range(world_size):
                if rank != device.index:
                    stack.enter_context(harness.memory_budget(device_of(device.type, rank), 0, PEER_DEVICE_SIZE))
        yield


def launch(target: str, world_size: int, kind: str, workdir: Path, timeout: float = TIMEOUT_S) -> list[Any]:
    """Run `target` ("module:function") on `world_size` ranks; returns each rank's result."""
    reason = unavailable_reason(kind, world_size)
    if reason:
        raise UnavailableError(reason)
    workdir = Path(workdir)
    for stale in [*workdir.glob("rank*.error.json"), *workdir.glob("rank*.pt"), workdir / "store"]:
        stale.unlink(missing_ok=True)  # a previous run's in the same folder
    procs = [_context().Process(target=_rank_main, args=(target, rank, world_size, kind, str(workdir)))
             for rank in range(world_size)]
    for p in procs:
        p.start()
    deadline = time.monotonic() + timeout
    try:
        while any(p.is_alive() for p in procs):
            if any(p.exitcode not in (None, 0) for p in procs):
                break  # one rank failed: the others would wait for it until their own timeout
            if time.monotonic() > deadline:
                raise RuntimeError(f"{target}: the ranks did not finish in {timeout:.0f} s")
            procs[0].join(0.02)
    finally:
        for p in procs:
            if p.is_alive():
                p.kill()
            p.join()
    errors = [json.loads(e.read_text(encoding="utf-8")) for e in workdir.glob("rank*.error.json")]
    if errors:  # the first to fail; the others fail because it is gone
        first = min(errors, key=lambda info: info["time"])
        raise _ERRORS.get(first["type"], RuntimeError)(first["message"])
    for rank, p in enumerate(procs):
        if p.exitcode != 0:
            log = workdir / f"rank{rank}.log"
            text = log.read_text(encoding="utf-8", errors="replace") if log.exists() else ""
            lines = text.strip().splitlines() or ["(no output)"]
            raise RuntimeError(f"{target}: rank {rank} exited with {p.exitcode}: {lines[-1]}")
    return [torch.load(workdir / f"rank{rank}.pt", weights_only=True) for rank in range(world_size)]


@functools.cache
def _context() -> Any:
    """Ranks start as forks of one server process that has imported torch once, so a run does not
    pay for it (a fresh interpreter takes seconds to import torch; forking the caller, which may have
    run autograd threads, is unsafe). The server starts with the first launch and lives as long as
    the caller. It also imports what every rank would otherwise import on its own, seconds each:
    torch.distributed.tensor (a tensor subclass's first op), torch.nn.parallel (DDP) and torch._dynamo
    (an optimizer's first call imports it, through `torch._disable_dynamo`)."""
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(
        ["samedevice.ranks", "torch.distributed.tensor", "torch.nn.parallel", "torch._dynamo"])
    return context


def _loopback() -> str:
    names = os.listdir("/sys/class/net") if os.path.isdir("/sys/class/net") else []
    return "lo" if "lo" in names or not names else names[0]


# ---- the emulated device's backend: gloo on the CPU tensors under the emulated ones -----------------


class EmulatedGloo(torch.distributed.ProcessGroup):  # the stubs type only the C++ overloads
    """The collectives DDP uses, each handed to a gloo process group with the CPU tensors under the
    emulated ones (gloo writes its results into them, so the emulated tensors see them)."""

    def __init__(self, store: Any, rank: int, size: int, timeout: datetime.timedelta) -> None:
        from samedevice.emulator.collectives import HeldAliases

        super().__init__(rank, size)  # type: ignore[call-arg]  # the Python-backend constructor
        self.gloo: Any = c10d.ProcessGroupGloo(store, rank, size, timeout)
        self.aliases = HeldAliases()  # held until gloo's worker is done with them (see HeldAliases)

    def _cpu(self, tensors: Any) -> Any:
        # CPU tensors over the emulated tensors' memory
        from samedevice.emulator import native

        if isinstance(tensors, (list, tuple)):
            return self.aliases.made([native.host(t) if not isinstance(t, (list, tuple)) else self._cpu(t)
                                      for t in tensors])
        return self.aliases.made(native.host(tensors))

    def allreduce(self, tensors: Any, opts: Any = None) -> Any:  # type: ignore[override]
        return self.aliases.hold(self.gloo.allreduce(self._cpu(tensors), opts or c10d.AllreduceOptions()))

    def broadcast(self, tensors: Any, opts: Any = None) -> Any:  # type: ignore[override]
        return self.aliases.hold(self.gloo.broadcast(self._cpu(tensors), opts or c10d.BroadcastOptions()))

    def allgather(self, outputs: Any, inputs: Any, opts: Any = None) -> Any:
        return self.aliases.hold(self.gloo.allgather(self._cpu(outputs), self._cpu(inputs),
                                                     opts or c10d.AllgatherOptions()))

    def barrier(self, opts: Any = None) -> Any:
        return self.gloo.barrier(opts or c10d.BarrierOptions())

    def getBackendName(self) -> str:
        return "emulated_gloo"


def _backend(kind: str) -> str:
    if kind != "emulated":
        return "gloo"
    if "emulated_gloo" not in torch.distributed.Backend.backend_list:
        torch.distributed.Backend.register_backend(
            "emulated_gloo", lambda store, rank, size, timeout: EmulatedGloo(store, rank, size, timeout),
            devices=[emulator.NAME],
        )
    return "cpu:gloo,emulated:emulated_gloo"


def _rank_main(target: str, rank: int, world_size: int, kind: str, workdir_name: str) -> None:
    workdir = Path(workdir_name)
    log = os.open(workdir / f"rank{rank}.log", os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.environ.setdefault("GLOO_SOCKET_IFNAME", _loopback())
    try:
        device = device_of(kind, rank)
        store = c10d.FileStore(str(workdir / "store"), world_size)
        torch.distributed.init_process_group(_backend(kind), store=store, rank=rank, world_size=world_size,
                                             timeout=datetime.timedelta(seconds=TIMEOUT_S))
        module, name = target.split(":")
        if str(registry.ROOT) not in sys.path:
            sys.path.insert(0, str(registry.ROOT))
        result = getattr(importlib.import_module(module), name)(rank, world_size, device, workdir)
        torch.save(result, workdir / f"rank{rank}.pt")
    except Exception as e:  # reported to the parent, which raises it as its own type
        first_line = str(e).partition("\n")[0] or type(e).__name__  # a bare `assert` has no message
        error = {"type": type(e).__name__, "message": f"rank {rank}: {first_line}", "time": time.time()}
        (workdir / f"rank{rank}.error.json").write_text(json.dumps(error), encoding="utf-8")
        sys.exit(1)
    finally:
        if torch.distributed.is_initialized():
            torch.distributed.destroy_process_group()
