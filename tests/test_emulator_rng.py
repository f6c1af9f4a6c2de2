"""Random numbers on the emulated device as on CUDA: each device has its own default generator,
independent of the CPU's and of each other, with torch.cuda's seeding and state functions."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
import torch
import torch.nn.functional as F
from pytest_parametrize_cases import Case, parametrize_cases
from torch.testing._utils import freeze_rng_state  # what torch.testing._internal.common_utils re-exports

from samedevice import emulator

pytestmark = pytest.mark.emulator


@pytest.fixture
def dev() -> Iterator[torch.device]:
    """emulated:0, the current device before and after the test."""
    yield emulator.device(0)
    torch.accelerator.set_device_index(0)


def _states() -> list[torch.Tensor]:
    """The CPU generator's state, then each device's."""
    return [torch.get_rng_state(), *torch.emulated.get_rng_state_all()]


def _same(a: torch.Tensor | tuple[torch.Tensor, ...], b: torch.Tensor | tuple[torch.Tensor, ...]) -> bool:
    a, b = (a,) if isinstance(a, torch.Tensor) else a, (b,) if isinstance(b, torch.Tensor) else b
    return all(torch.equal(x.cpu(), y.cpu()) for x, y in zip(a, b, strict=True))


# Every way user code draws on the device that these tests know of: factories, in-place samplers,
# seeded ops without a generator argument (dropout), and nn.init.
def _x(dev: torch.device) -> torch.Tensor:
    return torch.full((4, 4), 0.5, device=dev)


DRAWS: dict[str, Callable[[torch.device], torch.Tensor | tuple[torch.Tensor, ...]]] = {
    "randn": lambda d: torch.randn(3, device=d),
    "rand": lambda d: torch.rand(3, device=d),
    "randint": lambda d: torch.randint(0, 9, (5,), device=d),
    "randperm": lambda d: torch.randperm(6, device=d),
    "normal": lambda d: torch.normal(0.0, 1.0, (3,), device=d),
    "normal of tensors": lambda d: torch.normal(_x(d), _x(d)),
    "rand_like": lambda d: torch.rand_like(_x(d)),
    "randn_like": lambda d: torch.randn_like(_x(d)),
    "randint_like": lambda d: torch.randint_like(_x(d), 0, 9),
    "bernoulli": lambda d: torch.bernoulli(_x(d)),
    "bernoulli_": lambda d: _x(d).bernoulli_(0.3),
    "multinomial": lambda d: torch.multinomial(_x(d), 2),
    "poisson": lambda d: torch.poisson(_x(d)),
    "normal_": lambda d: _x(d).normal_(),
    "uniform_": lambda d: _x(d).uniform_(),
    "exponential_": lambda d: _x(d).exponential_(),
    "geometric_": lambda d: _x(d).geometric_(0.3),
    "random_": lambda d: _x(d).random_(0, 9),
    "dropout": lambda d: F.dropout(_x(d), 0.5, training=True),
    "dropout in place": lambda d: F.dropout(_x(d), 0.5, training=True, inplace=True),
    "dropout2d": lambda d: F.dropout2d(torch.ones(2, 3, 4, 4, device=d), 0.5, training=True),
    "alpha_dropout": lambda d: F.alpha_dropout(_x(d), 0.5, training=True),
    "nn.Dropout in train mode": lambda d: torch.nn.Dropout(0.3).train()(_x(d)),
    "rrelu": lambda d: F.rrelu(_x(d) - 1, training=True),
    "gumbel_softmax": lambda d: F.gumbel_softmax(_x(d)),
    "attention dropout": lambda d: F.scaled_dot_product_attention(*[torch.ones(1, 2, 3, 4, device=d)] * 3,
                                                                  dropout_p=0.5),
    "init.kaiming_uniform_": lambda d: torch.nn.init.kaiming_uniform_(torch.empty(3, 3, device=d)),
    "init.trunc_normal_": lambda d: torch.nn.init.trunc_normal_(torch.empty(3, 3, device=d)),
    "init.orthogonal_": lambda d: torch.nn.init.orthogonal_(torch.empty(3, 3, device=d)),
    "nn.Linear(device=)": lambda d: torch.nn.Linear(3, 3, device=d).weight.detach(),
}


@pytest.mark.parametrize("name", list(DRAWS))
def test_each_draw_uses_the_device_stream(dev: torch.device, name: str) -> None:
    """A draw on the device advances that device's generator only, and repeats after set_rng_state."""
    draw = DRAWS[name]
    before = _states()
    first = draw(dev)
    after = _states()
    assert torch.equal(after[0], before[0]), "the CPU generator moved"
    assert not torch.equal(after[1], before[1]), "emulated:0's generator did not move"
    assert torch.equal(after[2], before[2]), "emulated:1's generator moved"
    torch.emulated.set_rng_state(before[1])
    torch.rand(4)  # a CPU draw in between changes nothing on the device
    assert _same(draw(dev), first)


def test_cpu_draws_do_not_move_the_device_stream(dev: torch.device) -> None:
    """The brief's CUDA example: a CPU draw between two seeded device draws changes nothing."""
    torch.manual_seed(0)
    a = torch.randn(3, device=dev)
    torch.manual_seed(0)
    torch.randn(3)
    assert torch.equal(torch.randn(3, device=dev).cpu(), a.cpu())


def test_device_draws_do_not_move_the_cpu_stream(dev: torch.device) -> None:
    """A device draw between two seeded CPU draws changes nothing on CPU."""
    torch.manual_seed(0)
    a = torch.randn(3)
    torch.manual_seed(0)
    torch.randn(3, device=dev)
    assert torch.equal(torch.randn(3), a)


def test_each_device_has_its_own_stream(dev: torch.device) -> None:
    """emulated:0 and emulated:1 draw from separate generators: seeded alike, they draw alike."""
    torch.emulated.manual_seed_all(5)
    on_0 = torch.randn(3, device=dev)
    on_1 = torch.randn(3, device=emulator.device(1))
    assert torch.equal(on_0.cpu(), on_1.cpu())
    assert torch.emulated.initial_seed() == 5


def test_a_draw_lands_on_the_stream_of_its_device(dev: torch.device) -> None:
    """rand_like(x, device=emulated:1) draws from emulated:1's generator, not x's."""
    state_0 = torch.emulated.get_rng_state(0)
    torch.emulated.manual_seed_all(2)
    state_1 = torch.emulated.get_rng_state(1)
    torch.emulated.set_rng_state(state_0, 0)
    out = torch.rand_like(_x(dev), device=emulator.device(1))
    assert out.device == emulator.device(1)
    assert torch.equal(torch.emulated.get_rng_state(0), state_0)
    assert not torch.equal(torch.emulated.get_rng_state(1), state_1)


def test_torch_manual_seed_seeds_every_device(dev: torch.device) -> None:
    """torch.manual_seed seeds the CPU and, through torch.emulated.manual_seed_all, both devices."""
    torch.manual_seed(3)
    seeded = torch.Generator().manual_seed(3).get_state()
    assert all(torch.equal(state, seeded) for state in _states())
    with torch.emulated.device(1):
        assert torch.emulated.initial_seed() == 3


def test_manual_seed_seeds_the_current_device_only(dev: torch.device) -> None:
    """torch.emulated.manual_seed seeds the current device, as torch.cuda.manual_seed does."""
    torch.manual_seed(0)
    torch.randn(2, device=dev)
    torch.randn(2, device=emulator.device(1))
    state_0 = torch.emulated.get_rng_state(0)
    with torch.emulated.device(1):
        torch.emulated.manual_seed(9)
        assert torch.emulated.initial_seed() == 9
    assert torch.equal(torch.emulated.get_rng_state(0), state_0)
    assert torch.equal(torch.emulated.get_rng_state(1), torch.Generator().manual_seed(9).get_state())


def test_index_less_rng_calls_mean_the_current_device(dev: torch.device) -> None:
    """get_rng_state() and set_rng_state(s) without a device act on the current device."""
    torch.emulated.manual_seed_all(0)
    torch.randn(2, device=emulator.device(1))
    torch.accelerator.set_device_index(1)
    assert torch.equal(torch.emulated.get_rng_state(), torch.emulated.get_rng_state(1))
    torch.emulated.set_rng_state(torch.emulated.get_rng_state(0))
    assert torch.equal(torch.emulated.get_rng_state(1), torch.emulated.get_rng_state(0))


def test_seed_and_seed_all(dev: torch.device) -> None:
    """seed() reseeds the current device at random; seed_all() gives both devices one random seed."""
    torch.emulated.manual_seed_all(0)
    torch.emulated.seed()
    assert torch.emulated.initial_seed() != 0
    assert torch.emulated.get_rng_state(1).equal(torch.Generator().manual_seed(0).get_state())
    torch.emulated.seed_all()
    assert torch.emulated.get_rng_state(0).equal(torch.emulated.get_rng_state(1))


def test_all_states_round_trip(dev: torch.device) -> None:
    """get_rng_state_all / set_rng_state_all restore both devices' draws."""
    states = torch.emulated.get_rng_state_all()
    first = [torch.randn(3, device=emulator.device(i)).cpu() for i in range(2)]
    torch.emulated.set_rng_state_all(states)
    assert all(torch.equal(torch.randn(3, device=emulator.device(i)).cpu(), first[i]) for i in range(2))


def test_fork_rng_restores_both_devices(dev: torch.device) -> None:
    """fork_rng(device_type="emulated") restores the CPU's and every listed device's state."""
    before = _states()
    with torch.random.fork_rng(devices=[0, 1], device_type=emulator.NAME):
        torch.randn(3, device=dev)
        torch.randn(3, device=emulator.device(1))
        torch.randn(3)
    assert all(torch.equal(a, b) for a, b in zip(_states(), before, strict=True))


def test_fork_rng_of_all_devices_warns_as_for_cuda(dev: torch.device, monkeypatch: pytest.MonkeyPatch) -> None:
    """fork_rng without devices forks both devices and warns that it did, as on a two-GPU host."""
    monkeypatch.setattr(torch.random, "_fork_rng_warned_already", False)  # it warns once per process
    before = _states()
    with (pytest.warns(UserWarning, match="EMULATED reports that you have 2 available devices"),
          torch.random.fork_rng(device_type=emulator.NAME)):
        torch.randn(3, device=emulator.device(1))
    assert torch.equal(_states()[2], before[2])


def test_freeze_rng_state_restores_the_device(dev: torch.device) -> None:
    """PyTorch's own test helper freeze_rng_state saves and restores the device's stream."""
    before = _states()
    with freeze_rng_state():
        torch.randn(3, device=dev)
    assert torch.equal(_states()[1], before[1])


def test_dropout_training_reproduces_after_set_rng_state(dev: torch.device) -> None:
    """A train step with dropout repeats exactly once the device state is restored; restoring the
    CPU state alone does not repeat it (as on CUDA)."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Dropout(0.5), torch.nn.Linear(8, 1)).to(dev).train()
    x = torch.ones(16, 8, device=dev)

    def grads() -> list[torch.Tensor]:
        model.zero_grad()
        model(x).sum().backward()
        return [p.grad.cpu() for p in model.parameters() if p.grad is not None]

    cpu_state, device_state = torch.get_rng_state(), torch.emulated.get_rng_state()
    first = grads()
    torch.set_rng_state(cpu_state)
    assert not _same(tuple(grads()), tuple(first))
    torch.emulated.set_rng_state(device_state)
    assert _same(tuple(grads()), tuple(first))


def test_non_random_ops_leave_the_generators_alone(dev: torch.device) -> None:
    """Ops that draw nothing (arithmetic, a train step, dropout in eval mode) move no generator."""
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Dropout(0.5)).to(dev).eval()
    optimizer = torch.optim.Adam(model.parameters())
    before = _states()
    x = torch.arange(8.0, device=dev).reshape(2, 4)
    loss = (model(x).softmax(-1) @ x.T + x.sum()).mean()
    loss.backward()
    optimizer.step()
    assert all(torch.equal(a, b) for a, b in zip(_states(), before, strict=True))


GENERATOR_DRAWS = [
    Case("randn", draw=lambda d, g: torch.randn(3, device=d, generator=g)),
    Case("uniform_", draw=lambda d, g: torch.ones(3, device=d).uniform_(generator=g)),
    Case("randperm", draw=lambda d, g: torch.randperm(4, device=d, generator=g)),
    Case("multinomial", draw=lambda d, g: torch.ones(3, device=d).multinomial(2, generator=g)),
]


@parametrize_cases(*GENERATOR_DRAWS)
def test_a_cpu_generator_is_refused(dev: torch.device, draw: Callable[..., torch.Tensor]) -> None:
    """An explicit CPU generator for a draw on the device is refused with CUDA's message."""
    with pytest.raises(RuntimeError, match="Expected a 'emulated' device type for generator but found 'cpu'"):
        draw(dev, torch.Generator())


@parametrize_cases(*GENERATOR_DRAWS)
def test_a_device_generator_draws_as_a_cpu_one(dev: torch.device, draw: Callable[..., torch.Tensor]) -> None:
    """torch.Generator(device="emulated") (the C++ hooks make it, guard.cpp): seeded alike, it draws what
    a CPU generator draws and advances as it does; the default generators, the CPU's and the devices', stay."""
    before = _states()
    device_generator, cpu_generator = torch.Generator(device=dev), torch.Generator()
    device_generator.manual_seed(11)
    cpu_generator.manual_seed(11)
    for _ in range(2):
        assert _same(draw(dev, device_generator), draw(torch.device("cpu"), cpu_generator))
    assert torch.equal(device_generator.get_state(), cpu_generator.get_state())
    assert all(torch.equal(a, b) for a, b in zip(_states(), before, strict=True))


def test_device_generators_are_made_as_cuda_makes_them(dev: torch.device) -> None:
    """As torch.Generator(device="cuda"): the device kept as given (an index-less one stays index-less, as
    CUDAGeneratorImpl keeps it), the default seed, clone_state, an unknown index refused; a draw checks
    the generator's device type only (check_generator), so emulated:1's generator draws on emulated:0."""
    assert torch.Generator(device=emulator.NAME).device == torch.device(emulator.NAME)
    second = torch.Generator(device=emulator.device(1))
    assert second.device == emulator.device(1)
    assert second.initial_seed() == torch.Generator().initial_seed()
    assert torch.randn(2, device=dev, generator=second).device == dev
    clone = second.clone_state()
    assert clone.device == second.device
    assert torch.equal(clone.get_state(), second.get_state())
    with pytest.raises(RuntimeError, match=r"^The device_index is invalid\.$"):  # createCUDAGenerator's words
        torch.Generator(device="emulated:2")


def test_a_device_generator_for_a_cpu_draw_fails_naming_the_op(dev: torch.device) -> None:
    """Departure: a device generator passed to a draw on the CPU fails, naming the op and the emulated
    backend (the generator's dispatch key picks the device's kernel, as on CUDA, where what follows
    depends on the op and the PyTorch version)."""
    with pytest.raises(NotImplementedError, match=r"'aten::randperm\.generator_out' with arguments from the 'emulated"):
        torch.randperm(4, generator=torch.Generator(device=dev))


def test_rng_state_needs_the_device(dev: torch.device) -> None:
    """A host without the accelerator has no device generator to read, as CUDA's lazy init fails."""
    with emulator.absent(), pytest.raises(RuntimeError, match="Found no emulated device on this host"):
        torch.emulated.get_rng_state()
    # torch/cuda/random.py indexes torch.cuda.default_generators, one per device: past them, Python's IndexError
    with pytest.raises(IndexError, match=r"^tuple index out of range$"):
        torch.emulated.get_rng_state(2)


def test_a_host_with_fewer_devices_has_fewer_generators(dev: torch.device) -> None:
    """Inside visible(1) the host has one device: the count says so, the second device's generator is not there
    (CUDA's IndexError, from set_rng_state_all after it has set the first), nor is its memory."""
    saved = torch.emulated.get_rng_state_all()
    assert len(saved) == emulator.DEVICE_COUNT == 2
    first = torch.rand(8, device=dev).cpu()
    with emulator.visible(1):
        assert (torch.emulated.device_count(), torch.accelerator.device_count()) == (1, 1)
        assert torch.emulated.is_available()
        assert len(torch.emulated.get_rng_state_all()) == 1
        with pytest.raises(IndexError, match=r"^tuple index out of range$"):
            torch.emulated.set_rng_state_all(saved)
        assert torch.equal(torch.rand(8, device=dev).cpu(), first)  # device 0's state was set before the raise
        with pytest.raises(IndexError, match=r"^tuple index out of range$"):
            torch.emulated.get_rng_state(1)
        with pytest.raises(RuntimeError, match=r"emulated:1 does not exist on this host: it has 1 of the "
                                               r"emulator's 2 devices \(samedevice\.emulator\.visible\(1\)"):
            torch.zeros(1, device="emulated:1")
        with pytest.raises(RuntimeError, match="emulated:1 does not exist on this host"):
            torch.ones(1, device=dev).to("emulated:1")
        with pytest.raises(RuntimeError, match="emulated:1 does not exist on this host"):
            torch.emulated.set_device(1)
        with pytest.raises(RuntimeError, match="The device_index is invalid"):  # createCUDAGenerator's check
            torch.Generator(device="emulated:1")
        with pytest.raises(RuntimeError, match="Invalid device argument 1: did you call init"):
            emulator.memory_allocated(1)
        torch.accelerator.set_device_index(1)  # departure (README): CUDA refuses a hidden index here
        with pytest.raises(RuntimeError, match="emulated:1 does not exist on this host"):
            torch.zeros(1, device=emulator.NAME)
        torch.accelerator.set_device_index(0)
        torch.emulated.manual_seed_all(5)  # seeds the devices the host has, as torch.cuda's does
        assert torch.equal(torch.emulated.get_rng_state(0), torch.Generator().manual_seed(5).get_state())
        torch.emulated.set_rng_state(saved[0], 0)  # the devices it has work as before
        assert torch.equal(torch.rand(8, device=dev).cpu(), first)
    assert torch.emulated.device_count() == torch.accelerator.device_count() == 2
    assert not torch.equal(torch.emulated.get_rng_state(1), torch.Generator().manual_seed(5).get_state())  # hidden
    torch.emulated.set_rng_state_all(saved)
    assert torch.zeros(1, device="emulated:1").device == emulator.device(1)


def test_visible_takes_a_count_of_the_devices(dev: torch.device) -> None:
    with pytest.raises(ValueError, match=r"visible\(3\): the emulator has 2 devices, a host can show 0 to 2"), \
            emulator.visible(3):
        pass
    with emulator.visible(0):  # none: a host without the accelerator, as absent() plays it
        assert not torch.emulated.is_available()
        assert emulator.is_absent()
        with pytest.raises(RuntimeError, match="Found no emulated device on this host"):
            torch.zeros(1, device=dev)
        with pytest.raises(RuntimeError, match="Found no emulated device on this host"):
            torch.emulated.get_rng_state()
    with emulator.visible(2), emulator.visible(1):  # nested: the fewer wins
        assert torch.emulated.device_count() == 1
    assert torch.emulated.device_count() == 2


def test_the_numbers_are_cpu_numbers(dev: torch.device) -> None:
    """Departure: a device generator is a CPU generator, so seeded alike it draws the CPU's numbers
    (CUDA's Philox draws others, and its state is 16 bytes, not the CPU's 5056)."""
    torch.manual_seed(7)
    assert torch.equal(torch.randn(3, device=dev).cpu(), torch.randn(3))
    assert torch.emulated.get_rng_state().numel() == torch.get_rng_state().numel() == 5056


def test_the_plan_marks_only_random_ops() -> None:
    """Each op's cached plan says once whether and how it draws: by its generator argument, by the
    default generator (nondeterministic_seeded), or not at all (the hot path)."""
    from samedevice.emulator import rng, rules

    aten = torch.ops.aten
    emulator.device()
    assert rules._plan(aten.normal_.default).random == ("generator", 3)
    assert rules._plan(aten.multinomial.default).random == ("generator", 3)
    assert rules._plan(aten.native_dropout.default).random is rng.SEEDED
    assert rules._plan(aten.rand_like.default).random is rng.SEEDED
    for op in (aten.add.Tensor, aten.mm.default, aten.sum.default, aten._softmax.default, aten.clone.default):
        assert rules._plan(op).random is None, op
