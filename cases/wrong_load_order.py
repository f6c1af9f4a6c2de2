"""The order of a resume: which orders of the four steps break, and why.

**Symptom** (at `optimizer.step()`, on any accelerator, for the orders that break):
`RuntimeError: Expected all tensors to be on the same device, but found at least two devices, cuda:0 and cpu!`

**Cause**: a resume does four things: build the optimizer, load the model state, load the optimizer
state, `model.to(device)`. `model.to` moves parameters in place, so an optimizer built before it
still points at the right tensors; but state that already exists stays where it is. So an order
breaks when optimizer state exists on CPU at the time of `model.to`: (1) the optimizer state was
loaded before it (state is cast to the parameters' device at load time), or (2) with no state to
load, an optimizer that creates its state in its constructor (Adagrad: `sum`) was built before it.
Loading the model state is a copy into the parameters and works in any position.

**Fix**: the one order that is always safe: `model.to(device)`, build the optimizer, load the model
state, load the optimizer state. The articles' rule "build the optimizer after model.to" is
sufficient but not necessary: for a lazily initialised optimizer (SGD) and whenever the optimizer
state is loaded after `model.to`, building it first is harmless (see the table on the docs page).
"""

from pathlib import Path

import torch

from samedevice import harness
from samedevice.harness import BUILD, LOAD_MODEL, LOAD_OPTIMIZER, TO_DEVICE

ORDER = (BUILD, LOAD_MODEL, LOAD_OPTIMIZER, TO_DEVICE)  # BUG: the 000 article's "方案二" order


def make_optimizer(params):
    return torch.optim.SGD(params, lr=harness.LR, momentum=0.9)


def run(device: torch.device, workdir: Path) -> dict[str, torch.Tensor]:
    path = harness.write_checkpoint(workdir, make_optimizer)
    model, optimizer = harness.resume_in_order(ORDER, path, device, make_optimizer)
    return harness.finish(model, optimizer, device)


def reference() -> dict[str, torch.Tensor]:
    return harness.reference(make_optimizer)
