"""Random numbers: each emulated device has its own default generator, as each CUDA device has
(torch.cuda.default_generators), independent of the CPU's and of each other. The numbers are CPU's
(a CPU generator per device: CUDA's Philox numbers differ, as all numerics here are CPU's), but the
streams are CUDA's: a draw on the device never moves `torch.default_generator`, and a run that saves
and restores only `torch.get_rng_state()` does not reproduce its device draws, as on CUDA.

A random op on the device draws from its device's generator (rules.py picks the way once per op):
- an op with a `Generator? generator` argument gets the device's generator when the caller passed
  none; a generator of another device type is refused as CUDA refuses it; a device generator made by
  `torch.Generator(device="emulated")` (guard.cpp) lends its state to a CPU generator for the kernel;
- a seeded op without one (`nondeterministic_seeded`: native_dropout, rand_like, ...) runs its CPU
  kernel with the CPU default generator holding the device's state, which is then put back.

`torch.emulated.manual_seed`, `get_rng_state` & co. follow torch/cuda/random.py.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import torch

from samedevice.emulator import registration
from samedevice.emulator.registration import DEVICE_COUNT, NAME, check_present, current_index, index_of

# CUDA's default generators start from default_rng_seed_val, as a new CPU generator does
_generators = [torch.Generator() for _ in range(DEVICE_COUNT)]

SEEDED = ("", -1)  # the plan of a seeded op without a generator argument (rules.Plan.random)


def draw(how: tuple[str, int], index: int, args: Any, kwargs: Any, run: Callable[[Any, Any], Any]) -> Any:
    """Run a random op on emulated:`index` (`run(args, kwargs)`) so that it draws from that device's
    generator; `how` is the op's generator argument (name, position), or SEEDED."""
    device_generator = _generators[index]
    if how is SEEDED:
        return _lend(device_generator, torch.default_generator, lambda _: run(args, kwargs))
    name, i = how
    given = args[i] if i < len(args) else kwargs.get(name)
    if given is not None:
        # check_generator<CUDAGeneratorImpl> (aten/src/ATen/core/DistributionsHelper.h & co.): a random
        # op on the device takes a generator of the device's type only; a CPU generator is refused.
        if given.device.type != NAME:
            raise RuntimeError(f"Expected a '{NAME}' device type for generator but found '{given.device.type}'")
        return _lend(given, torch.Generator(), lambda cpu: run(*_with(name, i, cpu, args, kwargs)))
    return run(*_with(name, i, device_generator, args, kwargs))


def _with(name: str, i: int, generator: torch.Generator, args: Any, kwargs: Any) -> tuple[Any, Any]:
    if i < len(args):
        return (*args[:i], generator, *args[i + 1:]), kwargs
    return args, {**kwargs, name: generator}


def _lend(device_generator: torch.Generator, cpu: torch.Generator, kernel: Callable[[torch.Generator], Any]) -> Any:
    """Run `kernel(cpu)` with the CPU generator `cpu` holding `device_generator`'s state, take the advanced
    state back, and leave `cpu` as it was. CPU kernels draw from CPU generators only: the seeded ops from
    torch.default_generator, the others from the one they are given (a device generator made by
    torch.Generator(device="emulated"), guard.cpp, keeps a CPU state but the device's type)."""
    saved = cpu.get_state()
    cpu.set_state(device_generator.get_state())
    try:
        return kernel(cpu)
    finally:
        device_generator.set_state(cpu.get_state())
        cpu.set_state(saved)


def randperm(n: int, *, device: Any = None, generator: torch.Generator | None = None, **options: Any) -> torch.Tensor:
    """torch.randperm(n, device=emulated), a factory with no tensor to dispatch on (and without the
    `out=` path, by which cpu_factory would draw from the CPU generator)."""
    from samedevice.emulator.tensor import EmulatedTensor, resolve

    index = resolve(device)
    options = {k: v for k, v in options.items() if v is not None}
    out = draw(("generator", 1), index, (n, generator), options, lambda a, k: torch.randperm(a[0], generator=a[1], **k))
    return EmulatedTensor(out, index)


# ---- torch.emulated's RNG functions, as torch/cuda/random.py's ------------------------------------


def _generator(device: Any) -> torch.Generator:
    index = index_of(device)
    check_present(index)  # CUDA's _lazy_init: no device, no generator
    return _generators[index]


def get_rng_state(device: int | str | torch.device = NAME) -> torch.Tensor:
    """The RNG state of `device` (index-less: the current device) as a CPU ByteTensor."""
    return _generator(device).get_state()


def set_rng_state(new_state: torch.Tensor, device: int | str | torch.device = NAME) -> None:
    # Generator::set_state refuses anything but a CPU ByteTensor, with CUDA's message (check_rng_state)
    _generator(device).set_state(new_state)


def get_rng_state_all() -> list[torch.Tensor]:
    return [get_rng_state(i) for i in range(registration._DeviceModule.device_count())]


def set_rng_state_all(new_states: Iterable[torch.Tensor]) -> None:
    for i, state in enumerate(new_states):
        set_rng_state(state, i)


def manual_seed(seed: int) -> None:
    """Seed the current device's generator (torch.manual_seed seeds every device, by manual_seed_all)."""
    _generators[current_index()].manual_seed(int(seed))


def manual_seed_all(seed: int) -> None:
    # CUDA queues the seed until the devices exist; the emulator's generators always exist
    for g in _generators:
        g.manual_seed(int(seed))


def seed() -> None:
    _generators[current_index()].seed()


def seed_all() -> None:
    # torch.cuda.seed_all: one random seed, the same on every device
    _generators[0].seed()
    for g in _generators[1:]:
        g.manual_seed(_generators[0].initial_seed())


def initial_seed() -> int:
    return _generator(None).initial_seed()


for _fn in (get_rng_state, set_rng_state, get_rng_state_all, set_rng_state_all, manual_seed, manual_seed_all,
            seed, seed_all, initial_seed):
    setattr(registration._DeviceModule, _fn.__name__, staticmethod(_fn))


def register() -> None:
    lib = torch.library.Library("aten", "IMPL")
    lib.impl("randperm", randperm, "PrivateUse1")
    lib.impl("randperm.generator", randperm, "PrivateUse1")
    _libs.append(lib)


_libs: list[torch.library.Library] = []
