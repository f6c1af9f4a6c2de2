"""The training stacks on the emulated device, one small module each, imported only when asked for:

    import samedevice.integrations.lightning      # Lightning and Fabric: accelerator and strategy "emulated"
    from samedevice.integrations import hf        # Hugging Face Trainer and accelerate: device and RNG state

`samedevice.integrations.load(name)` imports one by name. Each module checks the stack's version against the
range tested here, and says in one line when it is outside.
"""

from __future__ import annotations

import importlib
import os
import warnings
from importlib import metadata
from types import ModuleType

from samedevice.errors import IntegrationError

# stack -> (distribution, lowest tested version, first version not tested)
TESTED = {
    "lightning": ("lightning", (2, 6), (2, 7)),
    "transformers": ("transformers", (5, 0), (6, 0)),
    "accelerate": ("accelerate", (1, 15), (1, 16)),
}
# the module that integrates each stack (Trainer's needs transformers and accelerate both)
MODULES = {"lightning": "lightning", "transformers": "hf", "accelerate": "hf"}


UNTESTED_ENV = "SAMEDEVICE_UNTESTED_STACKS"


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split("+")[0].split(".")[:2] if part.isdigit())


def check_version(stack: str) -> None:
    """One line naming the stack, its version and the tested range when it is not in that range."""
    distribution, low, high = TESTED[stack]
    try:
        found = metadata.version(distribution)
    except metadata.PackageNotFoundError:
        raise IntegrationError(f"samedevice.integrations.{stack}: {distribution} is not installed "
                               f"(pip install 'same-device[stacks]')") from None
    if not low <= _version(found) < high:
        tested = f"{'.'.join(map(str, low))} up to (not including) {'.'.join(map(str, high))}"
        message = f"samedevice.integrations.{stack}: {distribution} {found} is outside the tested range ({tested})"
        if os.environ.get(UNTESTED_ENV) == "1":
            warnings.warn(message, stacklevel=3)
            return
        raise IntegrationError(f"{message}; pin {distribution} to it, or set {UNTESTED_ENV}=1 to try it anyway")


def load(name: str) -> ModuleType:
    """The integration module for a stack by name ("lightning", "transformers", "accelerate"); an unknown name
    is one line naming the known."""
    if name not in MODULES:
        raise IntegrationError(f"unknown training stack {name!r}: samedevice.integrations knows "
                               f"{', '.join(sorted(MODULES))}")
    return importlib.import_module(f"samedevice.integrations.{MODULES[name]}")
