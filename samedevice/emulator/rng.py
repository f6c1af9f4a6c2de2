"""5. Random numbers: each emulated device has its own default generator, as each CUDA device has
(torch.cuda.default_generators), independent of the CPU's and of each other. The numbers are CPU's
(a CPU generator per device: CUDA's Philox numbers differ, as all numerics here are CPU's), but the
streams are CUDA's: a draw on the device never moves `torch.default_generator`, and a run that saves
and restores only `torch.get_rng_state()` does not reproduce its device draws, as on CUDA.

A random op on the device draws from its device's generator (the native core's fallback, fallback.cpp, does the
drawing; the plan, rules.native_plan, says which argument is the generator):
- an op with a `Generator? generator` argument gets the device's generator when the caller passed
  none; a generator of another device type is refused as CUDA refuses it; a device generator made by
  `torch.Generator(device="emulated")` (guard.cpp) lends its state to a CPU generator for the kernel;
- a seeded op without one (`nondeterministic_seeded`: native_dropout, rand_like, ...) runs its CPU
  kernel with the CPU default generator holding the device's state, which is then put back.

`torch.emulated.manual_seed`, `get_rng_state` & co. follow torch/cuda/random.py.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch

from samedevice.emulator import registration
from samedevice.emulator.registration import DEVICE_COUNT, NAME, check_present, current_index, index_of

# CUDA's default generators start from default_rng_seed_val, as a new CPU generator does; the native core holds
# these same objects (torch.ops.samedevice._set_default_generator)
_generators = [torch.Generator() for _ in range(DEVICE_COUNT)]

SEEDED = ("", -1)  # the plan of a seeded op without a generator argument (rules.Plan.random)


# ---- torch.emulated's RNG functions, as torch/cuda/random.py's ------------------------------------


def _generator(device: Any) -> torch.Generator:
    index = index_of(device)
    check_present()  # CUDA's _lazy_init: no device, no generator
    # torch/cuda/random.py takes `torch.cuda.default_generators[idx]`, a tuple of one generator per device the host
    # has: an index past them (a checkpoint's state of a GPU this host lacks) is Python's IndexError
    if index >= registration.visible_count():
        raise IndexError("tuple index out of range")
    check_present(index)  # a negative index
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
    # CUDA seeds each device the host has (queued until they exist: the emulator's always do; an absent host's too)
    for g in _generators[: registration.visible_count() or DEVICE_COUNT]:
        g.manual_seed(int(seed))


def seed() -> None:
    _generators[current_index()].seed()


def seed_all() -> None:
    # torch.cuda.seed_all: one random seed, the same on every device
    _generators[0].seed()
    for g in _generators[1: registration.visible_count() or DEVICE_COUNT]:
        g.manual_seed(_generators[0].initial_seed())


def initial_seed() -> int:
    return _generator(None).initial_seed()


for _fn in (get_rng_state, set_rng_state, get_rng_state_all, set_rng_state_all, manual_seed, manual_seed_all,
            seed, seed_all, initial_seed):
    setattr(registration._DeviceModule, _fn.__name__, staticmethod(_fn))
