"""Model outputs on the device handed to NumPy: it reads host memory, and refuses them.

**Symptom** (at the evaluation after training, on any accelerator):
`TypeError: can't convert cuda:0 device type tensor to numpy. Use Tensor.cpu() to copy the tensor to host memory first.`

**Cause**: the evaluation collects the model's outputs and hands them to NumPy (`np.concatenate`, `np.mean`,
`np.sqrt`, sklearn's metrics, matplotlib). NumPy reads the tensor's memory directly, through `Tensor.__array__`,
and a device tensor's memory is not the host's: PyTorch refuses rather than copy it in secret. On CPU a tensor
and its NumPy array share memory, so a CPU-only CI never sees it.

**Fix**: bring each output to the host where it leaves PyTorch: `.cpu()` (shown), `.cpu().numpy()`, or
`.tolist()`; a scalar for a log or a best-loss record, `.item()`. Add `.detach()` where the tensor needs grad.
"""

from pathlib import Path

import numpy as np
import torch

from samedevice import harness


def evaluate(model: torch.nn.Module, device: torch.device) -> np.ndarray:
    outputs = []
    with torch.no_grad():
        for x, _ in harness.batches():
            outputs.append(model(x.to(device)))  # BUG: the output stays on the device, for NumPy below
    return np.concatenate(outputs)  # NumPy reads each tensor's memory: the host's only


def run(device: torch.device, workdir: Path) -> dict[str, torch.Tensor]:
    model = harness.new_model().to(device)
    harness.train(model, harness.sgd(model.parameters()), harness.batches(), device)
    return {**harness.cpu_state(model), "predictions": torch.from_numpy(evaluate(model, device))}
