"""Lightning (Trainer) and Fabric on the emulated device: `import samedevice.integrations.lightning`, then

    L.Trainer(accelerator="emulated", strategy="emulated", devices=1, precision="bf16-mixed")
    L.Trainer(accelerator="emulated", strategy="emulated_ddp", devices=2)
    L.Fabric(accelerator="emulated", strategy="emulated")

Importing this module registers, in Lightning's and Fabric's registries, an accelerator and a strategy both
named "emulated". Both names are needed: Lightning's connector builds a single-device strategy only for the
accelerators it knows (`_choose_strategy` in accelerator_connector.py and fabric/connector.py gives any other
one `SingleDeviceStrategy(device="cpu")`), so an "emulated" accelerator alone would train on CPU; it says so
in one line instead. The strategy also gives the mixed-precision plugin the device's autocast: the connector
builds `MixedPrecision(device="cuda")` for every accelerator but cpu and mps, whose autocast would never touch
an emulated tensor.

Two devices: `strategy="emulated_ddp"` (Lightning's DDP, one spawned process per device, with the emulated
device's process-group backend "eccl"). Fabric takes one device.
Lightning saves no RNG state in its checkpoints, for any device (a resumed fit with dropout differs from an
uninterrupted one on CPU too).
"""

from __future__ import annotations

from typing import Any

import torch
from lightning.fabric.accelerators import ACCELERATOR_REGISTRY as FABRIC_ACCELERATORS
from lightning.fabric.accelerators.accelerator import Accelerator as FabricAccelerator
from lightning.fabric.plugins.precision.amp import MixedPrecision as FabricMixedPrecision
from lightning.fabric.strategies import STRATEGY_REGISTRY as FABRIC_STRATEGIES
from lightning.fabric.strategies.single_device import SingleDeviceStrategy as FabricSingleDevice
from lightning.pytorch.accelerators import Accelerator, AcceleratorRegistry
from lightning.pytorch.plugins.precision.amp import MixedPrecision
from lightning.pytorch.strategies import DDPStrategy, SingleDeviceStrategy, StrategyRegistry
from torch.nn.parallel import DistributedDataParallel

from samedevice import emulator
from samedevice.errors import IntegrationError
from samedevice.integrations import check_version

check_version("lightning")
NAME = emulator.NAME


def _parse(devices: Any) -> list[int]:
    if isinstance(devices, list):
        if devices and all(isinstance(d, int) and 0 <= d < emulator.DEVICE_COUNT for d in devices):
            return sorted(set(devices))
    else:
        count = {"auto": 1, -1: emulator.DEVICE_COUNT, "-1": emulator.DEVICE_COUNT}.get(devices, devices)
        if isinstance(count, str) and count.isdigit():
            count = int(count)
        if isinstance(count, int) and 1 <= count <= emulator.DEVICE_COUNT:
            return list(range(count))
    raise IntegrationError(f"Lightning on the emulated device: devices={devices!r} does not name devices the "
                           f"emulator has ({NAME}:0 and {NAME}:1: devices=1, 2, or a list of those indices)")


class _Device:
    """What Lightning's and Fabric's accelerators share."""

    def setup_device(self, device: torch.device) -> None:
        if device.type != NAME:
            raise IntegrationError(
                f"Lightning chose a strategy on {device} for accelerator='{NAME}': its connector builds a device "
                f"strategy only for the accelerators it knows; pass strategy='{NAME}' too")
        emulator.device(device.index or 0)
        torch.emulated.set_device(device)  # type: ignore[attr-defined]

    def teardown(self) -> None:
        pass

    @staticmethod
    def parse_devices(devices: Any) -> list[int]:
        return _parse(devices)

    @staticmethod
    def get_parallel_devices(devices: Any) -> list[torch.device]:
        return [emulator.device(i) for i in _parse(devices)]

    @staticmethod
    def auto_device_count() -> int:
        return 1

    @staticmethod
    def is_available() -> bool:
        return emulator.unavailable_reason() is None

    @staticmethod
    def name() -> str:
        return NAME

    def get_device_stats(self, device: Any) -> dict[str, Any]:
        dev = torch.device(device)
        return {"allocated_bytes": emulator.memory_allocated(dev),
                "max_allocated_bytes": emulator.max_memory_allocated(dev)}


class EmulatedAccelerator(_Device, Accelerator):
    """Lightning's accelerator for the emulated device."""

    def setup(self, trainer: Any) -> None:
        asked = trainer._accelerator_connector._parallel_devices  # the devices asked for; a single strategy has 1
        if len(asked) > 1 and not isinstance(trainer.strategy, DDPStrategy):
            raise IntegrationError(f"Lightning on the emulated device: devices={len(asked)} needs "
                                   f"strategy='{NAME}_ddp' (one process per device, the backend 'eccl'), not "
                                   f"{type(trainer.strategy).__name__}")
        if len(asked) == 1 and asked[0] != trainer.strategy.root_device:
            raise IntegrationError(f"Lightning on the emulated device: devices asks for {asked[0]}, the strategy runs "
                                   f"on {trainer.strategy.root_device}; for {asked[0]} pass "
                                   f"strategy=EmulatedStrategy(device='{asked[0]}') (or trainer_kwargs('{asked[0]}'))")

    @classmethod
    def register_accelerators(cls, accelerator_registry: Any) -> None:
        accelerator_registry.register(NAME, cls, description=cls.__name__)


class FabricEmulatedAccelerator(_Device, FabricAccelerator):
    """Fabric's accelerator for the emulated device: one device (Fabric's DDP is not set up here)."""

    @staticmethod
    def parse_devices(devices: Any) -> list[int]:
        parsed = _parse(devices)
        if parsed != [0]:
            raise IntegrationError(f"Fabric on the emulated device: devices={devices!r} is not supported; use "
                                   f"devices=1 ({NAME}:0; Fabric's DDP over the emulated devices is not set up yet, "
                                   "and the 'emulated' strategy runs on emulated:0)")
        return parsed

    @staticmethod
    def get_parallel_devices(devices: Any) -> list[torch.device]:
        return [emulator.device(i) for i in FabricEmulatedAccelerator.parse_devices(devices)]

    @classmethod
    def register_accelerators(cls, accelerator_registry: Any) -> None:
        accelerator_registry.register(NAME, cls, description=cls.__name__)


def _on_device(plugin: Any, mixed: Any) -> Any:
    # the connector's MixedPrecision(device="cuda"): the same precision with the device's autocast and GradScaler
    if isinstance(plugin, mixed) and plugin.device != NAME:
        scaler = torch.amp.GradScaler(NAME) if plugin.precision == "16-mixed" else None
        return mixed(plugin.precision, NAME, scaler=scaler)
    return plugin


class EmulatedStrategy(SingleDeviceStrategy):
    """Lightning's single-device strategy on emulated:0, with the device's autocast for mixed precision."""

    strategy_name = NAME

    def __init__(self, device: Any = None, **kwargs: Any) -> None:
        super().__init__(device=emulator.device(0) if device is None else device, **kwargs)

    @SingleDeviceStrategy.precision_plugin.setter  # type: ignore[attr-defined, untyped-decorator]
    def precision_plugin(self, plugin: Any) -> None:
        self._precision_plugin = _on_device(plugin, MixedPrecision)

    @classmethod
    def register_strategies(cls, strategy_registry: Any) -> None:
        strategy_registry.register(NAME, cls, description=cls.__name__)


class EmulatedDDPStrategy(DDPStrategy):
    """Lightning's DDP over the emulated devices, one spawned process each, with the device's process-group
    backend ("eccl", as NCCL for CUDA). Lightning's DDP wraps the model inside a CUDA stream whenever it has
    device ids (strategies/ddp.py, _setup_model); this does it in the device's own stream, as that does for CUDA."""

    strategy_name = f"{NAME}_ddp"

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("process_group_backend", "eccl")
        kwargs.setdefault("start_method", "spawn")
        super().__init__(**kwargs)

    def _setup_model(self, model: Any) -> Any:
        device_ids = self.determine_ddp_device_ids()
        with torch.emulated.stream(torch.emulated.Stream()):  # type: ignore[attr-defined]
            return DistributedDataParallel(module=model, device_ids=device_ids, **self._ddp_kwargs)

    @classmethod
    def register_strategies(cls, strategy_registry: Any) -> None:
        strategy_registry.register(cls.strategy_name, cls, description=cls.__name__)


class FabricEmulatedStrategy(FabricSingleDevice):
    """Fabric's single-device strategy on emulated:0, with the device's autocast for mixed precision."""

    strategy_name = NAME

    def __init__(self, device: Any = None, **kwargs: Any) -> None:
        super().__init__(device=emulator.device(0) if device is None else device, **kwargs)

    @FabricSingleDevice.precision.setter  # type: ignore[attr-defined, untyped-decorator]
    def precision(self, plugin: Any) -> None:
        self._precision = _on_device(plugin, FabricMixedPrecision)

    @classmethod
    def register_strategies(cls, strategy_registry: Any) -> None:
        strategy_registry.register(NAME, cls, description=cls.__name__)


def register() -> None:
    """Register the "emulated" accelerator and strategy with Lightning and Fabric (idempotent)."""
    emulator.device()
    for cls, registry in ((EmulatedAccelerator, AcceleratorRegistry), (FabricEmulatedAccelerator, FABRIC_ACCELERATORS)):
        if NAME not in registry:
            cls.register_accelerators(registry)
    for strategy, strategies in ((EmulatedStrategy, StrategyRegistry), (EmulatedDDPStrategy, StrategyRegistry),
                                 (FabricEmulatedStrategy, FABRIC_STRATEGIES)):
        if strategy.strategy_name not in strategies:
            strategy.register_strategies(strategies)


def trainer_kwargs(device: torch.device | str) -> dict[str, Any]:
    """The keyword arguments that put `L.Trainer` (or `L.Fabric`) on `device`: cpu, emulated, cuda or mps."""
    device = torch.device(device)
    if device.type == NAME:
        if device.index:  # emulated:1: a strategy on that device, as the connector cannot be told
            return {"accelerator": NAME, "strategy": EmulatedStrategy(device=device), "devices": [device.index]}
        return {"accelerator": NAME, "strategy": NAME, "devices": 1}
    return {"accelerator": device.type, "devices": [device.index] if device.index is not None else 1}


register()
