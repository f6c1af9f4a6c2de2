"""7. Collectives: "eccl", the emulated device's process-group backend, as NCCL is CUDA's.

    dist.init_process_group("eccl", ...)      # after samedevice.emulator.device()

NCCL serves CUDA tensors only: a process group made with it has no backend for any other device, and c10d
refuses a CPU tensor with "No backend type associated with device type cpu" (ProcessGroup::getBackend,
torch/csrc/distributed/c10d/ProcessGroup.hpp). "eccl" does the same for emulated tensors. Its collectives
run gloo's, on the CPU memory the emulated tensors live in, in place, so their results land on the device.
c10d takes a backend written in Python only as a whole ProcessGroup (distributed_c10d.py: a creator that
returns a ProcessGroup subclass replaces the group), so the per-device refusal is this group's own, with
c10d's message.
"""

from __future__ import annotations

import threading
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

from samedevice.emulator import native
from samedevice.emulator.registration import NAME

BACKEND = "eccl"


def _host(tensors: list[torch.Tensor]) -> list[torch.Tensor]:
    """The CPU tensors the emulated ones live in; any other device is refused as c10d refuses it, and a
    non-contiguous tensor as NCCL refuses it (ProcessGroupNCCL.cpp, check_gpu_single_tensor)."""
    hosts = []
    for t in tensors:
        if t.device.type != NAME:
            raise RuntimeError(f"No backend type associated with device type {t.device.type}")
        if not any(t.is_contiguous(memory_format=f) for f in (torch.contiguous_format, torch.channels_last,
                                                               torch.channels_last_3d)):
            raise ValueError("Tensors must be contiguous")
        hosts.append(native.host(t))
    return hosts


def _nested(lists: list[list[torch.Tensor]]) -> list[list[torch.Tensor]]:
    return [_host(inner) for inner in lists]


class HeldAliases:
    """The host aliases handed to gloo, held until gloo's worker thread is done with them.

    A host alias is a tensor Python made (torch.ops.samedevice._host); dropped by Python while gloo's work still
    holds it, its last release falls to gloo's worker thread, which must then take the GIL to free the Python
    object (TensorImpl::decref_pyobject); a process group destroyed from Python at that moment joins that thread
    while holding the GIL: both wait for ever (seen under load). So each collective's aliases are held until
    its work was found completed at an earlier call, by which time the worker has let go of it."""

    def __init__(self) -> None:
        self._held: list[tuple[Any, Any]] = []
        self._done: list[tuple[Any, Any]] = []
        self._lock = threading.Lock()
        self._local = threading.local()

    def made(self, aliases: Any) -> Any:
        """Note aliases made for the collective this thread is about to start."""
        self._local.__dict__.setdefault("pending", []).append(aliases)
        return aliases

    def hold(self, work: Any) -> Any:
        """Hold the aliases this thread made for `work` (DDP's reducer calls from the autograd threads too)."""
        aliases, self._local.pending = self._local.__dict__.get("pending", []), []
        with self._lock:
            self._done = [(w, a) for w, a in self._held if w.is_completed()]  # let go at the next call, not now
            self._held = [(w, a) for w, a in self._held if not w.is_completed()] + [(work, aliases)]
        return work


class EmulatedProcessGroup(dist.ProcessGroup):
    """A process group whose one backend serves the emulated device, as a NCCL group serves CUDA."""

    def __init__(self, store: Any, rank: int, size: int, timeout: timedelta) -> None:
        super().__init__(rank, size)  # type: ignore[call-arg]
        self._gloo: Any = dist.ProcessGroupGloo(store, rank, size, timeout)
        # what c10d (init_process_group(device_id=...)) and Lightning look up per device; the collectives
        # themselves come to this group's methods below
        self._register_backend(torch.device(NAME), dist.ProcessGroup.BackendType.CUSTOM, self._gloo)
        self._aliases = HeldAliases()

    def getBackendName(self) -> str:
        return BACKEND

    def _host(self, tensors: list[torch.Tensor]) -> list[torch.Tensor]:
        return self._aliases.made(_host(tensors))

    def _nested(self, lists: list[list[torch.Tensor]]) -> list[list[torch.Tensor]]:
        return self._aliases.made(_nested(lists))

    def _held(self, work: Any) -> Any:
        return self._aliases.hold(work)

    # c10d calls each with the options of the call (AllreduceOptions & co.), which gloo takes as they are. A
    # collective gloo lacks fails with gloo's own message.
    def allreduce(self, tensors: list[torch.Tensor], opts: Any) -> Any:  # type: ignore[override]
        return self._held(self._gloo.allreduce(self._host(tensors), opts))

    def allreduce_coalesced(self, tensors: list[torch.Tensor], opts: Any) -> Any:  # type: ignore[override]
        return self._held(self._gloo.allreduce_coalesced(self._host(tensors), opts))

    def broadcast(self, tensors: list[torch.Tensor], opts: Any) -> Any:  # type: ignore[override]
        return self._held(self._gloo.broadcast(self._host(tensors), opts))

    def reduce(self, tensors: list[torch.Tensor], opts: Any) -> Any:  # type: ignore[override]
        return self._held(self._gloo.reduce(self._host(tensors), opts))

    def allgather(self, outputs: list[list[torch.Tensor]], inputs: list[torch.Tensor],  # type: ignore[override]
                  opts: Any) -> Any:
        return self._held(self._gloo.allgather(self._nested(outputs), self._host(inputs), opts))

    def _allgather_base(self, output: torch.Tensor, input: torch.Tensor, opts: Any) -> Any:  # type: ignore[override]
        return self._held(self._gloo._allgather_base(*self._host([output, input]), opts))

    def all_gather_single(self, output: torch.Tensor, input: torch.Tensor, opts: Any) -> Any:  # type: ignore[override]
        return self._held(self._gloo._allgather_base(*self._host([output, input]), opts))  # all_gather_into_tensor

    def reduce_scatter_single(self, output: torch.Tensor, input: torch.Tensor, opts: Any) -> Any:
        return self._held(self._gloo._reduce_scatter_base(*self._host([output, input]), opts))  # reduce_scatter_tensor

    def allgather_coalesced(self, outputs: list[list[torch.Tensor]],  # type: ignore[override]
                            inputs: list[torch.Tensor], opts: Any) -> Any:
        return self._held(self._gloo.allgather_coalesced(self._nested(outputs), self._host(inputs), opts))

    def gather(self, outputs: list[list[torch.Tensor]], inputs: list[torch.Tensor],  # type: ignore[override]
               opts: Any) -> Any:
        return self._held(self._gloo.gather(self._nested(outputs), self._host(inputs), opts))

    def scatter(self, outputs: list[torch.Tensor], inputs: list[list[torch.Tensor]],  # type: ignore[override]
                opts: Any) -> Any:
        return self._held(self._gloo.scatter(self._host(outputs), self._nested(inputs), opts))

    def reduce_scatter(self, outputs: list[torch.Tensor], inputs: list[list[torch.Tensor]],  # type: ignore[override]
                       opts: Any) -> Any:
        return self._held(self._gloo.reduce_scatter(self._host(outputs), self._nested(inputs), opts))

    def _reduce_scatter_base(self, output: torch.Tensor, input: torch.Tensor, opts: Any) -> Any:
        return self._held(self._gloo._reduce_scatter_base(*self._host([output, input]), opts))

    def alltoall_base(self, output: torch.Tensor, input: torch.Tensor,  # type: ignore[override]
                      output_split_sizes: list[int],
                      input_split_sizes: list[int], opts: Any) -> Any:
        hosts = self._host([output, input])
        return self._held(self._gloo.alltoall_base(*hosts, output_split_sizes, input_split_sizes, opts))

    def alltoall(self, outputs: list[torch.Tensor], inputs: list[torch.Tensor],  # type: ignore[override]
                 opts: Any) -> Any:
        return self._held(self._gloo.alltoall(self._host(outputs), self._host(inputs), opts))

    def send(self, tensors: list[torch.Tensor], dst: int, tag: int) -> Any:
        return self._held(self._gloo.send(self._host(tensors), dst, tag))

    def recv(self, tensors: list[torch.Tensor], src: int, tag: int) -> Any:
        return self._held(self._gloo.recv(self._host(tensors), src, tag))

    def barrier(self, opts: Any) -> Any:  # type: ignore[override]
        return self._gloo.barrier(opts)


def _create(store: Any, rank: int, size: int, timeout: timedelta) -> EmulatedProcessGroup:
    return EmulatedProcessGroup(store, rank, size, timeout)


def register() -> None:
    """Make "eccl" a c10d backend for the emulated device (where torch.distributed and gloo are built)."""
    if dist.is_available() and dist.is_gloo_available() and BACKEND.upper() not in dist.Backend._plugins:
        dist.Backend.register_backend(BACKEND, _create, devices=[NAME])
