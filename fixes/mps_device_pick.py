"""Two device pickers: the model goes where one says, the batches where the other says.

**Symptom** (at the forward pass, on MPS, XPU and the emulated accelerator; CUDA and CPU hosts run fine):
`RuntimeError: Expected all tensors to be on the same device, but got mat1 is on cpu, different from other tensors on emulated:0 (when checking argument in method wrapper_EMULATED_addmm)`;
MPS says `RuntimeError: Placeholder storage has not been allocated on MPS device!`

**Cause**: the 000 article's "方案四" picks MPS for the model, but the rest of the script still
says `"cuda" if torch.cuda.is_available() else "cpu"`. On a CUDA host both answers agree, so the
bug ships; on a Mac (or any non-CUDA accelerator) the batches stay on CPU.

**Fix**: one picker for everything, asked once: `torch.accelerator.current_accelerator()` where the
torch version has it (2.6+; it prefers a registered out-of-tree backend), else CUDA, MPS, XPU and
the out-of-tree backend in turn; with an environment override (`PICK_DEVICE=cpu`) for debugging.
"""

import os
from collections.abc import Callable
from pathlib import Path

import torch

from samedevice import harness

Available = Callable[[str], bool]


def pick_device(available: Available | None = None) -> torch.device:
    override = os.environ.get("PICK_DEVICE")
    if override:
        return torch.device(override)
    if available is None and hasattr(torch, "accelerator"):
        accelerator = torch.accelerator.current_accelerator()
        return accelerator if accelerator is not None else torch.device("cpu")
    available = available or (lambda kind: hasattr(torch, kind) and getattr(torch, kind).is_available())
    for kind in ("cuda", "mps", "xpu", torch._C._get_privateuse1_backend_name()):
        if available(kind):
            return torch.device(kind)
    return torch.device("cpu")


def batch_device(available: Available) -> torch.device:
    return pick_device(available)  # FIX: the one picker, for the batches too


def run(device: torch.device, workdir: Path) -> dict[str, torch.Tensor]:
    available = harness.host_with(device)
    model = harness.new_model().to(pick_device(available))
    optimizer = harness.sgd(model.parameters())
    harness.train(model, optimizer, harness.batches(), batch_device(available))
    return harness.cpu_state(model)
