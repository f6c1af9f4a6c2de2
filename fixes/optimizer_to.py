"""optimizer_to: move an optimizer's state to its parameters' device. Copy this file as it is.

When to use it: you have an optimizer whose state is on the wrong device and you cannot rebuild it
in the right order (move the model, build the optimizer, then `load_state_dict`, which is what to do
when you can). Typical case: an old training script loaded the optimizer state before
`model.to(device)`, or a checkpoint was loaded with `map_location="cpu"` into an optimizer whose
parameters were already moved and its state then edited by hand. PyTorch has no `Optimizer.to`
(pytorch/pytorch issue 41839).

    optimizer_to(optimizer)          # every state tensor to its parameter's device
    optimizer_to(optimizer, "cpu")   # everything to one device, e.g. to free GPU memory

It moves every tensor in `optimizer.state`, recursing into lists, tuples and dicts (LBFGS keeps lists
of tensors), keeps dtypes and values, keeps tensors that were shared shared, and puts `step` where
PyTorch's optimizers want it: on CPU (read as a number without a device sync), unless the
parameter's group is `capturable` or `fused`, whose kernels read it on the device (this is where
`Optimizer.load_state_dict` moves such a `step`, `_process_value_according_to_param_policy`; it
also casts it to float32, which this helper does not: it keeps dtypes). Moving an already-placed
optimizer again changes nothing. Returns the optimizer.
"""

from __future__ import annotations

from typing import Any

import torch


def optimizer_to(optimizer: torch.optim.Optimizer, device: torch.device | str | None = None) -> torch.optim.Optimizer:
    """Move every tensor in `optimizer.state` to its parameter's device, or to `device` if given.

    Recurses into lists, tuples and dicts; keeps dtypes, values and shared tensors shared. `step`
    goes where PyTorch wants it: CPU, unless the parameter's group is capturable or fused. A second
    call changes nothing. Returns the optimizer, so `optimizer_to(opt, "cuda").step()` reads well.
    """
    target = None if device is None else torch.device(device)
    cpu = torch.device("cpu")
    step_on_device = {id(p) for group in optimizer.param_groups if group.get("capturable") or group.get("fused")
                      for p in group["params"]}
    moved: dict[int, torch.Tensor] = {}  # id of an original tensor -> its moved copy (keeps sharing)
    for param, state in optimizer.state.items():
        to = target if target is not None else _device_of(param)
        if to is None:
            continue  # state keyed by something that is not a tensor and no device given: leave it
        step_to = to if id(param) in step_on_device else cpu
        for key, value in state.items():
            dest = step_to if key == "step" else to
            if isinstance(value, torch.Tensor) and value.device == dest:
                continue  # already there (`.to` would return it as it is, after a trip through the dispatcher)
            state[key] = _move(value, dest, moved)
    return optimizer


def _device_of(param: Any) -> torch.device | None:
    return param.device if isinstance(param, torch.Tensor) else None


def _move(value: Any, device: torch.device, moved: dict[int, torch.Tensor]) -> Any:
    if isinstance(value, torch.Tensor):
        if id(value) not in moved:
            moved[id(value)] = value.to(device)  # no copy when it is already there
        return moved[id(value)]
    if isinstance(value, dict):
        items = {k: _move(v, device, moved) for k, v in value.items()}
        return value if all(items[k] is v for k, v in value.items()) else items
    if isinstance(value, (list, tuple)):
        items = [_move(v, device, moved) for v in value]
        if all(a is b for a, b in zip(items, value)):
            return value  # nothing moved: keep the very container (a second call changes nothing)
        if isinstance(value, list):
            return items
        return type(value)(*items) if hasattr(value, "_fields") else tuple(items)
    return value
