"""A metric (torchmetrics) built beside the model and never moved: its state stays on the CPU.

**Symptom** (at the metric's first update, on any accelerator):
`RuntimeError: Encountered different devices in metric calculation (see stacktrace for details). This could be due to the metric class not being on the same device as input. ...`

**Cause**: a torchmetrics metric is an `nn.Module` whose running state (a sum, a count) is tensors made when
it is built, on the CPU, which its own `.to` moves. `model.to(device)` moves the model and its children, nothing
else: a metric built
beside the model in a training script, or inside a step (`F1(...)(preds, y)` in a LightningModule's
`validation_step`), is nobody's child and stays where it was made. Its first `update` adds the model's outputs,
on the device, into that CPU state; PyTorch's "Expected all tensors to be on the same device" is raised inside,
and torchmetrics words it again as above. Lightning moves a metric only when it is an attribute of the
LightningModule set before the module is moved (in `__init__`, `setup` or `configure_model`; a plain dict of
them is plain_list_layers' lesson). On CPU all of it is on the CPU.

**Fix**: move the metric to the device of its inputs when it is built: `MeanSquaredError().to(device)`
(shown). Or make it a child of a module that is moved: an attribute of the model or of the LightningModule.
"""

from pathlib import Path

import torch
import torch.nn.functional as F
import torchmetrics

from samedevice import harness


def run(device: torch.device, workdir: Path) -> dict[str, torch.Tensor]:
    model = harness.new_model().to(device)
    optimizer = harness.sgd(model.parameters())
    metric = torchmetrics.MeanSquaredError().to(device)  # FIX: its state on the device of its inputs
    for x, y in harness.batches():
        optimizer.zero_grad()
        output = model(x.to(device))
        F.mse_loss(output, y.to(device)).backward()
        optimizer.step()
        metric.update(output.detach(), y.to(device))
    return {**harness.cpu_state(model), "mse": metric.compute().cpu()}
