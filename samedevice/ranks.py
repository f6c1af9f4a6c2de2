"""Real ranks for the multi-device scenarios: one fresh Python process per rank, torch.distributed
with the gloo engine, every wait bounded by a timeout.

    results = ranks.launch("cases.ddp_rank_map_location:train", world_size=2, kind="emulated",
                           workdir=tmp)   # [rank 0's return value, rank 1's]

Each rank, a fresh interpreter (`python -m samedevice.ranks ...`), runs
`function(rank, world_size, device, workdir)` with the default process group initialised, `device`
being `<kind>:<rank>` (CPU for "cpu"). The ranks meet through a FileStore in `workdir`, so no port
can be taken. When a rank raises, the others are stopped and `launch`
raises the same exception type with the rank's message; a run that cannot start (too few devices,
a rank that dies, a timeout) raises `UnavailableError` or `RuntimeError` with one line saying why.

Gloo moves CPU and CUDA tensors. For the emulated device, a thin backend (`EmulatedGloo`,
registered for the device type through `torch.distributed.Backend.register_backend`) hands gloo
the CPU tensor under each emulated one: gloo does every collective, on the very memory of the
emulated tensors.
"""

from __future__ import annotations

import datetime
import importlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import torch
import torch._C._distributed_c10d as c10d

from samedevice import emulator, registry

TIMEOUT_S = 60.0
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


def launch(target: str, world_size: int, kind: str, workdir: Path, timeout: float = TIMEOUT_S) -> list[Any]:
    """Run `target` ("module:function") on `world_size` ranks; returns each rank's result."""
    reason = unavailable_reason(kind, world_size)
    if reason:
        raise UnavailableError(reason)
    workdir = Path(workdir)
    procs = []
    for rank in range(world_size):
        args = [sys.executable, "-m", "samedevice.ranks", target, str(rank), str(world_size), kind, str(workdir)]
        with (workdir / f"rank{rank}.log").open("w") as log:
            procs.append(subprocess.Popen(args, cwd=registry.ROOT, stdout=log, stderr=subprocess.STDOUT))
    deadline = time.monotonic() + timeout
    try:
        while any(p.poll() is None for p in procs):
            if any(p.poll() not in (None, 0) for p in procs):
                break  # one rank failed: the others would wait for it until their own timeout
            if time.monotonic() > deadline:
                raise RuntimeError(f"{target}: the ranks did not finish in {timeout:.0f} s")
            time.sleep(0.02)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
            p.wait()
    for rank in range(world_size):
        error = workdir / f"rank{rank}.error.json"
        if error.exists():
            info = json.loads(error.read_text())
            raise _ERRORS.get(info["type"], RuntimeError)(info["message"])
    for rank, p in enumerate(procs):
        if p.returncode != 0:
            lines = (workdir / f"rank{rank}.log").read_text().strip().splitlines() or ["(no output)"]
            raise RuntimeError(f"{target}: rank {rank} exited with {p.returncode}: {lines[-1]}")
    return [torch.load(workdir / f"rank{rank}.pt", weights_only=True) for rank in range(world_size)]


def _loopback() -> str:
    names = os.listdir("/sys/class/net") if os.path.isdir("/sys/class/net") else []
    return "lo" if "lo" in names or not names else names[0]


# ---- the emulated device's backend: gloo on the CPU tensors under the emulated ones -----------------


class EmulatedGloo(torch.distributed.ProcessGroup):  # the stubs type only the C++ overloads
    """The collectives DDP uses, each handed to a gloo process group with the CPU tensors under the
    emulated ones (gloo writes its results into them, so the emulated tensors see them)."""

    def __init__(self, store: Any, rank: int, size: int, timeout: datetime.timedelta) -> None:
        super().__init__(rank, size)  # type: ignore[call-arg]  # the Python-backend constructor
        self.gloo: Any = c10d.ProcessGroupGloo(store, rank, size, timeout)

    @staticmethod
    def _cpu(tensors: Any) -> Any:
        if isinstance(tensors, (list, tuple)):
            return [EmulatedGloo._cpu(t) for t in tensors]
        # the emulator keeps an emulated tensor's data in a CPU tensor, `elem`, sharing its memory
        return getattr(tensors, "elem", tensors)

    def allreduce(self, tensors: Any, opts: Any = None) -> Any:  # type: ignore[override]
        return self.gloo.allreduce(self._cpu(tensors), opts or c10d.AllreduceOptions())

    def broadcast(self, tensors: Any, opts: Any = None) -> Any:  # type: ignore[override]
        return self.gloo.broadcast(self._cpu(tensors), opts or c10d.BroadcastOptions())

    def allgather(self, outputs: Any, inputs: Any, opts: Any = None) -> Any:
        return self.gloo.allgather(self._cpu(outputs), self._cpu(inputs), opts or c10d.AllgatherOptions())

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


def _rank_main(target: str, rank: int, world_size: int, kind: str, workdir: Path) -> None:
    os.environ.setdefault("GLOO_SOCKET_IFNAME", _loopback())
    timeout = datetime.timedelta(seconds=TIMEOUT_S)
    try:
        device = emulator.device(rank) if kind == "emulated" else torch.device(kind, rank) if kind != "cpu" else None
        store = c10d.FileStore(str(workdir / "store"), world_size)
        torch.distributed.init_process_group(_backend(kind), store=store, rank=rank, world_size=world_size,
                                             timeout=timeout)
        module, name = target.split(":")
        if str(registry.ROOT) not in sys.path:
            sys.path.insert(0, str(registry.ROOT))
        result = getattr(importlib.import_module(module), name)(rank, world_size, device or torch.device("cpu"),
                                                                  workdir)
        torch.save(result, workdir / f"rank{rank}.pt")
    except Exception as e:  # reported to the parent, which raises it as its own type
        (workdir / f"rank{rank}.error.json").write_text(
            json.dumps({"type": type(e).__name__, "message": f"rank {rank}: {str(e).splitlines()[0]}"}))
        sys.exit(1)
    finally:
        if torch.distributed.is_initialized():
            torch.distributed.destroy_process_group()


if __name__ == "__main__":
    _target, _rank, _world, _kind, _workdir = sys.argv[1:6]
    _rank_main(_target, int(_rank), int(_world), _kind, Path(_workdir))
