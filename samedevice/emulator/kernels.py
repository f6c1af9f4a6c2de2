"""CUDA's kernel table, read from the native_functions.yaml that PyTorch ships in torchgen, the way
torchgen reads it when it generates CUDA's registrations (torchgen.gen.parse_native_yaml and the
CUDA BackendIndex). For each op overload it records:

- `cuda`: CUDA has a kernel of its own (a `dispatch:` entry for CUDA, or, for a structured op's
  functional and in-place variants, a `structured_delegate` whose out= variant has one). Only such
  ops get torchgen's whole-op device check;
- `composite`: the op's kernel for every backend is a composite one (CompositeExplicitAutograd,
  its NonFunctional variant, or CompositeImplicitAutograd): CUDA runs it, and each op inside it
  checks devices;
- `no_check`: `device_check: NoCheck`, the kernel checks devices itself (TensorIterator & co.);
- `structured`: names the codegen wrapper in the error message (wrapper_CUDA_<op> vs
  wrapper_CUDA_<overload>_<op>);
- `nested_cuda`: CUDA has a kernel for nested tensors (a `NestedTensorCUDA` dispatch entry), which
  the emulator's nested tensors (nested.py) need.

Parsing takes a second or two, so the table is cached as JSON beside the device guard, per
PyTorch version.
"""

from __future__ import annotations

import functools
import json
import os
import tempfile
from pathlib import Path
from typing import NamedTuple

import torch

from samedevice.emulator.guard import cache_dir


class Kernels(NamedTuple):
    cuda: bool
    composite: bool
    no_check: bool
    structured: bool
    nested_cuda: bool


def yaml_path() -> Path:
    import torchgen

    return Path(torchgen.__file__).parent / "packaged" / "ATen" / "native" / "native_functions.yaml"


def parse() -> dict[str, Kernels]:
    """The table, straight from torchgen (slow: use `table()`)."""
    from torchgen.gen import parse_native_yaml
    from torchgen.model import DeviceCheckType, DispatchKey

    path = yaml_path()
    parsed = parse_native_yaml(str(path), str(path.with_name("tags.yaml")))
    cuda = parsed.backend_indices[DispatchKey.CUDA]
    nested_cuda = parsed.backend_indices[DispatchKey.NestedTensorCUDA]
    composites = [parsed.backend_indices[k] for k in (DispatchKey.CompositeExplicitAutograd,
                                                      DispatchKey.CompositeExplicitAutogradNonFunctional)]
    by_name = {str(f.func.name): f for f in parsed.native_functions}
    table = {}
    for name, f in by_name.items():
        delegate = by_name.get(str(f.structured_delegate)) if f.structured_delegate else None
        own = cuda.has_kernel(f) or (delegate is not None and cuda.has_kernel(delegate))
        table[name] = Kernels(
            cuda=own,
            # an implicit composite reaches the emulator when another composite calls it below autograd
            composite=not own and (any(c.has_kernel(f) for c in composites)
                                   or f.has_composite_implicit_autograd_kernel),
            no_check=f.device_check == DeviceCheckType.NoCheck,
            structured=f.structured or f.structured_delegate is not None,
            nested_cuda=nested_cuda.has_kernel(f),
        )
    return table


@functools.cache
def table() -> dict[str, Kernels]:
    stat = yaml_path().stat()
    cached = cache_dir() / f"kernels-{len(Kernels._fields)}-{torch.__version__.replace('+', '_')}-{stat.st_size}.json"
    try:
        return {k: Kernels(*v) for k, v in json.loads(cached.read_text(encoding="utf-8")).items()}
    except (OSError, ValueError, TypeError):
        pass
    found = parse()
    try:
        cached.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(suffix=".json", dir=cached.parent)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump({k: list(v) for k, v in found.items()}, f)
        os.replace(tmp, cached)  # a whole file or none, for processes that start at once
    except OSError:
        pass  # an unwritable cache only costs the parse next time
    return found
