"""The emulated accelerator: a CPU-backed device that PyTorch treats as an accelerator.

Every runner, a laptop and CPU-only CI included, reproduces the real device errors with it:

    >>> from samedevice import emulator
    >>> dev = emulator.device()           # torch.device("emulated:0")
    >>> torch.ones(3, device=dev) + torch.ones(3)
    RuntimeError: Expected all tensors to be on the same device, but found at least two devices, emulated:0 and cpu!

How it works, one module per numbered section (after albanD/subclass_zoo's new_device.py):
1. registration.py: PrivateUse1 renamed "emulated", its C++ device guard and hooks (guard.cpp,
   guard.py), the device module `torch.emulated`, the current device, and the absent host;
2. memory.py: accounting like torch.cuda's, with a capacity past which allocation raises OutOfMemoryError;
3. tensor.py: a wrapper subclass whose data is a CPU tensor (`elem`) and whose device is emulated:N;
   nested.py: the nested tensors of the transformer fast path, wrapping CPU nested tensors;
   storage.py: storages and addresses, one device storage over each CPU storage's memory;
4. rules.py: the device rules, each copied from a CUDA rule in PyTorch's C++ (cited beside it), picked
   per op from CUDA's kernel table in native_functions.yaml (kernels.py); cuda_only.py: the kernels
   CUDA has and CPU lacks (the fused LSTM and GRU cells), in CUDA's math; cuda_paths.py: where the
   emulator's tensors would take another path than CUDA's (ctc_loss's lengths, embedding_bag's check,
   the resizing kernels' dtypes);
5. transfers.py: ops that move data between devices (`_to_copy`, `copy_`, `set_`);
6. rng.py: each device's own default generator, as CUDA's, and torch.emulated's seeding and RNG state;
7. serialization.py: torch.save records "emulated:N", torch.load restores it, map_location remaps it;
8. streams.py: torch.cuda's streams and events, host-synchronous, kept by the C++ guard; autocast.cpp:
   CUDA's autocast policy, registered for the device from ATen's own op lists;
9. collectives.py: "eccl", the device's process-group backend (as NCCL is CUDA's), gloo underneath.
Numerics are CPU's: every op runs the CPU kernel on `elem`.

Known departures from CUDA (each pinned by a test in tests/test_emulator*.py, listed in the README):
- register (`device()`) before the process's first backward: PyTorch sizes its autograd device
  queues then (registered later, it warns in one line);
- without a C++ compiler the emulator falls back to PyTorch's Python device guard and hooks (it says
  so in one line): one current device, backward on emulated:0 only, no device generators, no pinned
  memory, no autocast (refused in one line);
- torch.compile does not compile device code: fullgraph=True raises one line naming the emulator;
  otherwise Dynamo breaks the graph at the first emulated tensor and runs the code eagerly;
- "eccl" (collectives.py) is a whole process group: "cpu:gloo,emulated:eccl" still refuses CPU tensors;
- a device error inside the TorchScript interpreter loses its message (PyTorch reads an unfetched
  Python error);
- moving a module from the emulated device back to CPU, or `to_empty` from CPU onto it, gives it new
  Parameters (CUDA keeps them);
- `param.data = t.to(emulated)` is refused, and so is moving a module whose weights an autograd graph
  or a live view still holds;
- once registered, `torch.accelerator` reports the emulator even on a CUDA host (pin_memory pins for it);
- random numbers on the device are CPU's numbers (each device's default generator is a CPU generator),
  in a stream of each device's own as on CUDA (rng.py); a device generator given to a CPU draw fails
  naming the op;
- storages cannot be allocated on the device (`UntypedStorage(n, device=...)`, `storage.to(emulated)`,
  a map_location callable that moves storages): a clear error; a device tensor's own storage works
  (`untyped_storage()`, `data_ptr()`, `set_`, `.cpu()`, `torch.save`), and map_location strings,
  devices and dicts work;
- PyTorch's C++ alias check (`torch._C._is_alias_of`) sees a view and its base as unrelated;
- nested tensors work as the transformer fast path makes them (`torch._nested_tensor_from_mask`);
  one built by `torch.nested.nested_tensor(..., device=emulated)` or moved there from CPU is PyTorch's
  own nested tensor over an emulated buffer, and its first op fails naming the op;
- `torch._efficientzerotensor` on the device gives ordinary zeros (memory, writes allowed);
- DLPack (`torch.from_dlpack`, `__dlpack__`) refuses device tensors, naming the limit: PyTorch
  exchanges a PrivateUse1 device only under the name "privateuse1"; a capsule made past them
  (`torch.utils.dlpack.to_dlpack`) has no memory, and a tensor made from it fails at its first op;
- numerics and dtype coverage are CPU's: integer division by zero raises (CUDA returns a bit pattern),
  ComplexHalf pow fails (CUDA has it); only the resizing kernels refuse uint8 as CUDA's do;
- sparse tensors are refused.
"""

from __future__ import annotations

from samedevice.emulator import (  # noqa: F401 (rules)
    collectives,
    cuda_only,
    cuda_paths,
    nested,
    registration,
    rng,
    serialization,
    streams,
    tensor,
    transfers,
)
from samedevice.emulator.memory import (
    max_memory_allocated,
    memory_allocated,
    reset_peak_memory_stats,
    set_capacity,
)
from samedevice.emulator.registration import (
    ABSENT_ENV,
    DEVICE_COUNT,
    NAME,
    EmulatorUnavailableError,
    absent,
    active,
    device,
    is_absent,
    is_emulated,
    trainable_device_count,
    unavailable_reason,
)
from samedevice.emulator.tensor import EmulatedTensor

registration._on_register.extend([tensor._register_kernels, cuda_paths.register, rng.register, serialization.register,
                                streams.register, collectives.register])
registration._on_register_native.extend([streams.register, collectives.register])

__all__ = [
    "ABSENT_ENV", "DEVICE_COUNT", "NAME", "EmulatedTensor", "EmulatorUnavailableError", "absent", "active",
    "device", "is_absent", "is_emulated", "max_memory_allocated", "memory_allocated", "reset_peak_memory_stats",
    "set_capacity", "trainable_device_count", "unavailable_reason",
]
