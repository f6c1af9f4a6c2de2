"""Which PyTorch this package was tested with, and the private PyTorch APIs the emulator relies on.

The emulator is built on PyTorch's extension points, but three of the pieces it needs are private
and may change in any release. `check()` runs once, when the emulator registers:
- on a torch outside TESTED it warns once, naming the tested versions (the emulator may still work);
- where a private API is missing it raises `UnsupportedTorchError`, one line naming the API, instead
  of a traceback from deep inside the emulator.
"""

from __future__ import annotations

import functools
import importlib
import warnings
from pathlib import Path

import torch

from samedevice.errors import UnsupportedTorchError as UnsupportedTorchError

TESTED = ("2.13",)  # the minor versions the test suite ran on; pyproject.toml declares the same range

# (module, attribute) pairs the emulator reaches into, and why
PRIVATE_APIS = (
    ("torch._C", "_get_privateuse1_backend_name"),  # is PrivateUse1 free?
    ("torch._C", "_dispatch_has_kernel_for_dispatch_key"),  # which composite kernel an op has (rules.py)
    ("torch._C", "_dispatch_has_kernel"),  # whether an op exists in this build (rules.py)
    ("torch._C", "_GLIBCXX_USE_CXX11_ABI"),  # how PyTorch's C++ was built: the emulator's must match (guard.py)
    ("torch._C._dynamo.eval_frame", "set_code_exec_strategy"),  # Dynamo skips the emulator's own Python
)
NATIVE_FUNCTIONS = Path("packaged", "ATen", "native", "native_functions.yaml")  # inside torchgen


class UntestedTorchWarning(UserWarning):
    """This torch is outside the versions the package was tested with."""


def tested(version: str) -> bool:
    """True when `version` (e.g. '2.13.0+cpu') is one of the TESTED minor versions."""
    major_minor = ".".join(version.split("+")[0].split(".")[:2])
    return major_minor in TESTED


def missing_private_api() -> str | None:
    """The dotted name of the first private API this torch lacks, or None."""
    for module_name, attribute in PRIVATE_APIS:
        try:
            module = importlib.import_module(module_name)
        except ImportError:
            return module_name
        if not hasattr(module, attribute):
            return f"{module_name}.{attribute}"
    try:
        import torchgen
    except ImportError:
        return "torchgen"
    if not (Path(torchgen.__file__).parent / NATIVE_FUNCTIONS).is_file():
        return f"torchgen/{NATIVE_FUNCTIONS.as_posix()}"
    return None


@functools.cache
def check() -> None:
    """Warn once on an untested torch; raise UnsupportedTorchError where a private API is missing."""
    missing = missing_private_api()
    if missing:
        raise UnsupportedTorchError(
            f"the emulated accelerator needs {missing}, which torch {torch.__version__} does not have "
            f"(tested with torch {', '.join(TESTED)})"
        )
    if not tested(torch.__version__):
        warnings.warn(
            f"same-device was tested with torch {', '.join(TESTED)}; this is torch {torch.__version__}, "
            "where the emulated accelerator may differ from CUDA",
            UntestedTorchWarning,
            stacklevel=2,
        )
