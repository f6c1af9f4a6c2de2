"""The emulated accelerator: a CPU-backed device that PyTorch treats as an accelerator.

Every runner, a laptop and CPU-only CI included, reproduces the real device errors with it:

    >>> from samedevice import emulator
    >>> dev = emulator.device()           # torch.device("emulated:0")
    >>> torch.ones(3, device=dev) + torch.ones(3)
    RuntimeError: Expected all tensors to be on the same device, but found at least two devices, emulated:0 and cpu!

How it works, one module per numbered section (after albanD/subclass_zoo's new_device.py):
1. registration.py: PrivateUse1 renamed "emulated", the C++ part (guard.py builds it once, cached:
   csrc/guard.cpp's device guard and hooks, csrc/autocast.cpp, the core), the device module `torch.emulated`, the
   current device, the absent host and a host with fewer devices; memory.py: torch.cuda's memory figures and a capacity;
2. native.py and csrc/: the native core, a PrivateUse1 backend in C++ after PyTorch's openreg:
   allocator.cpp (host memory counted per device, OutOfMemoryError past a capacity),
   kernels.cpp (allocation, views, copies across devices, convolution's overrideable kernels),
   fallback.cpp (every other op: CPU's kernel on host aliases of the device memory, after the check the
   plan names);
3. rules.py: the device rules, each copied from a CUDA rule in PyTorch's C++ (cited beside it), picked
   per op from CUDA's kernel table in native_functions.yaml (kernels.py): the plan the fallback asks for;
4. cuda_only.py: the kernels CUDA has and CPU lacks (the fused LSTM and GRU cells), in CUDA's math;
   cuda_paths.py: where CUDA's kernels check dtypes CPU's do not (embedding_bag, the resizing kernels);
5. rng.py: each device's own default generator, as CUDA's, and torch.emulated's seeding and RNG state;
6. streams.py: torch.cuda's streams and events, host-synchronous, kept by the C++ guard; csrc/autocast.cpp:
   CUDA's autocast policy, registered for the device from ATen's own op lists;
7. collectives.py: "eccl", the device's process-group backend (as NCCL is CUDA's), gloo underneath.
Numerics are CPU's: every op runs a CPU kernel on the device's memory. The C++ part needs a C++ compiler
(g++ or clang++) the first time; without one the emulator is unavailable and says what to install.

Known departures from CUDA (each pinned by a test in tests/test_emulator*.py or tests/test_native_core.py,
listed in the README):
- register (`device()`) before the process's first backward: PyTorch sizes its autograd device
  queues then (registered later, it warns in one line);
- "eccl" (collectives.py) is a whole process group: "cpu:gloo,emulated:eccl" still refuses CPU tensors;
- torch.compile runs on the device with the eager and aot_eager backends; inductor refuses in one line;
- once registered, `torch.accelerator` reports the emulator even on a CUDA host (pin_memory pins for it);
- random numbers on the device are CPU's numbers (each device's default generator is a CPU generator),
  in a stream of each device's own as on CUDA (rng.py); a device generator given to a CPU draw fails
  naming the op;
- a type name PyTorch renders for a device tensor reads "emulatedFloatType" (CUDA's: torch.cuda.FloatTensor);
- DLPack: torch.from_dlpack refuses a device tensor with PyTorch's "Unknown device type emulated";
- numerics and dtype coverage are CPU's: integer division by zero raises (CUDA returns a bit pattern),
  ComplexHalf pow fails (CUDA has it); only the resizing kernels refuse uint8 as CUDA's do;
- sparse tensors are refused.
"""

from __future__ import annotations

from samedevice.emulator import (  # noqa: F401 (the kernels that stay Python)
    collectives,
    cuda_only,
    cuda_paths,
    native,
    registration,
    rng,
    rules,
    streams,
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
    VISIBLE_ENV,
    EmulatorUnavailableError,
    absent,
    active,
    device,
    is_absent,
    is_emulated,
    trainable_device_count,
    unavailable_reason,
    visible,
    visible_count,
)

registration._on_register.extend([streams.register, collectives.register])

__all__ = [
    "ABSENT_ENV", "DEVICE_COUNT", "NAME", "VISIBLE_ENV", "EmulatorUnavailableError", "absent", "active",
    "device", "is_absent", "is_emulated", "max_memory_allocated", "memory_allocated", "reset_peak_memory_stats",
    "set_capacity", "trainable_device_count", "unavailable_reason", "visible", "visible_count",
]
