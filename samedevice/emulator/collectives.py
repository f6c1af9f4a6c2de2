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


class EmulatedProcessGroup(dist.ProcessGroup):
    """A process group whose one backend serves the emulated device, as a NCCL group serves CUDA."""

    def __init__(self, store: Any, rank: int, size: int, timeout: timedelta) -> None:
        super().__init__(rank, size)  # type: ignore[call-arg]
        self._gloo: Any = dist.ProcessGroupGloo(store, rank, size, timeout)
        # what c10d (init_process_group(device_id=...)) and Lightning look up per device; the collectives
        # themselves come to this group's methods below
        self._register_backend(torch.device(NAME), dist.ProcessGroup.BackendType.CUSTOM, self._gloo)

    def getBackendName(self) -> str:
        return BACKEND

    # c10d calls each with the options of the call (AllreduceOptions & co.), which gloo takes as they are. A
    # collective gloo lacks fails with gloo's own message.
    def allreduce(self, tensors: list[torch.Tensor], opts: Any) -> Any:  # type: ignore[override]
        return self._gloo.allreduce(_host(tensors), opts)

    def allreduce_coalesced(self, tensors: list[torch.Tensor], opts: Any) -> Any:  # type: ignore[override]
        return self._gloo.allreduce_coalesced(_host(tensors), opts)

    def broadcast(self, tensors: list[torch.Tensor], opts: Any) -> Any:  # type: ignore[override]
        return self._gloo.broadcast(_host(tensors), opts)

    def reduce(self, tensors: list[torch.Tensor], opts: Any) -> Any:  # type: ignore[override]
        return self._gloo.reduce(_host(tensors), opts)

    def allgather(self, outputs: list[list[torch.Tensor]], inputs: list[torch.Tensor],  # type: ignore[override]
                  opts: Any) -> Any:
        return self._gloo.allgather(_nested(outputs), _host(inputs), opts)

    def _allgather_base(self, output: torch.Tensor, input: torch.Tensor, opts: Any) -> Any:  # type: ignore[override]
        return self._gloo._allgather_base(*_host([output, input]), opts)

    def all_gather_single(self, output: torch.Tensor, input: torch.Tensor, opts: Any) -> Any:  # type: ignore[override]
        return self._gloo._allgather_base(*_host([output, input]), opts)  # all_gather_into_tensor

    def reduce_scatter_single(self, output: torch.Tensor, input: torch.Tensor, opts: Any) -> Any:
        return self._gloo._reduce_scatter_base(*_host([output, input]), opts)  # reduce_scatter_tensor

    def allgather_coalesced(self, outputs: list[list[torch.Tensor]],  # type: ignore[override]
                            inputs: list[torch.Tensor], opts: Any) -> Any:
        return self._gloo.allgather_coalesced(_nested(outputs), _host(inputs), opts)

    def gather(self, outputs: list[list[torch.Tensor]], inputs: list[torch.Tensor],  # type: ignore[override]
               opts: Any) -> Any:
        return self._gloo.gather(_nested(outputs), _host(inputs), opts)

    def scatter(self, outputs: list[torch.Tensor], inputs: list[list[torch.Tensor]],  # type: ignore[override]
                opts: Any) -> Any:
        return self._gloo.scatter(_host(outputs), _nested(inputs), opts)

    def reduce_scatter(self, outputs: list[torch.Tensor], inputs: list[list[torch.Tensor]],  # type: ignore[override]
                       opts: Any) -> Any:
        return self._gloo.reduce_scatter(_host(outputs), _nested(inputs), opts)

    def _reduce_scatter_base(self, output: torch.Tensor, input: torch.Tensor, opts: Any) -> Any:
        return self._gloo._reduce_scatter_base(*_host([output, input]), opts)

    def alltoall_base(self, output: torch.Tensor, input: torch.Tensor,  # type: ignore[override]
                      output_split_sizes: list[int],
                      input_split_sizes: list[int], opts: Any) -> Any:
        return self._gloo.alltoall_base(*_host([output, input]), output_split_sizes, input_split_sizes, opts)

    def alltoall(self, outputs: list[torch.Tensor], inputs: list[torch.Tensor],  # type: ignore[override]
                 opts: Any) -> Any:
        return self._gloo.alltoall(_host(outputs), _host(inputs), opts)

    def send(self, tensors: list[torch.Tensor], dst: int, tag: int) -> Any:
        return self._gloo.send(_host(tensors), dst, tag)

    def recv(self, tensors: list[torch.Tensor], src: int, tag: int) -> Any:
        return self._gloo.recv(_host(tensors), src, tag)

    def barrier(self, opts: Any) -> Any:  # type: ignore[override]
        return self._gloo.barrier(opts)


def _create(store: Any, rank: int, size: int, timeout: timedelta) -> EmulatedProcessGroup:
    return EmulatedProcessGroup(store, rank, size, timeout)


def register() -> None:
    """Make "eccl" a c10d backend for the emulated device (where torch.distributed and gloo are built)."""
    if dist.is_available() and dist.is_gloo_available() and BACKEND.upper() not in dist.Backend._plugins:
        dist.Backend.register_backend(BACKEND, _create, devices=[NAME])
