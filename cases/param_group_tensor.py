"""An optimizer's tensor kept in its param_groups stays on CPU after a resume done in the right order.

**Symptom** (at `optimizer.step()`, on any accelerator):
`RuntimeError: Expected all tensors to be on the same device, but found at least two devices, cuda:0 and cpu!`

**Cause**: `Optimizer.load_state_dict` casts the per-parameter `state` to each parameter's device (`step` aside), but
takes `param_groups` as they were saved: a tensor there is never moved. Optimizers that adapt one step
size per group keep a running tensor in the group (Prodigy's and D-Adaptation's `d` sums, apex's
FusedNovoGrad moments; here AdaGrad-Norm's sum of squared gradient norms). Loaded with
`map_location="cpu"` (the advice against a doubled peak and for DDP ranks), that tensor comes back on
CPU, even though the model was moved and the optimizer built and loaded in the order that is right for
`torch.optim`; the first step updates it from the device's gradients and raises. A 0-dim tensor raises
too: a CPU scalar may be read by a device op, but not written by one. On CPU nothing fails.

**Fix**: move the group's tensors to its parameters' device after every load, with a
`register_load_state_dict_post_hook`, as long as you cannot change the optimizer. The optimizer's author
fixes it for everyone by moving them in `step` (`group["d"].to(p.device)`), as Prodigy's did.
"""

from pathlib import Path

import torch

from samedevice import harness


class AdaGradNorm(torch.optim.Optimizer):
    """AdaGrad-Norm (Ward et al., 2019): one step size per group, lr / sqrt(b0^2 + the sum of the squared
    gradient norms so far). The sum is one number per group, so it is kept in the group."""

    def __init__(self, params, lr: float, b0: float = 1.0):
        super().__init__(params, {"lr": lr, "b0": b0})

    @torch.no_grad()
    def step(self):
        for group in self.param_groups:
            params = [p for p in group["params"] if p.grad is not None]
            if "sum_sq" not in group:
                group["sum_sq"] = torch.full((1,), group["b0"] ** 2, device=params[0].device)
            group["sum_sq"].add_(torch.stack([p.grad.square().sum() for p in params]).sum())
            step_size = group["lr"] / group["sum_sq"].sqrt()
            for p in params:
                p.sub_(step_size * p.grad)


def make_optimizer(params):
    return AdaGradNorm(params, lr=harness.LR)


def resume(path: Path, device: torch.device):
    model = harness.new_model().to(device)
    optimizer = make_optimizer(model.parameters())
    checkpoint = torch.load(path, map_location="cpu", weights_only=True)
    model.load_state_dict(checkpoint["model"])
    optimizer.load_state_dict(checkpoint["optimizer"])  # BUG: param_groups come as saved: sum_sq on CPU
    return model, optimizer


def run(device: torch.device, workdir: Path) -> dict[str, torch.Tensor]:
    model, optimizer = resume(harness.write_checkpoint(workdir, make_optimizer, device), device)
    return harness.finish(model, optimizer, device)


def reference() -> dict[str, torch.Tensor]:
    return harness.reference(make_optimizer)
