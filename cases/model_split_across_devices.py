"""A model split over two devices (a device map, a pipeline by hand) whose loss mixes its two ends:
the labels stay on the first device, the logits come out of the last.

**Symptom** (at the loss, on a host with two devices of a kind):
`RuntimeError: Expected all tensors to be on the same device, but found at least two devices, cuda:1 and cuda:0!`
On a host with one device of the kind (and on MPS, which has one) nothing is raised: the bug waits
for the first machine with two GPUs.

**Cause**: a model too big for one device is placed in pieces, its first layers on the first device
and its last ones on the last (`device_map="auto"`, `model.fc2.to("cuda:1")`). Its own code moves the
activations across the seam, so its forward runs, and its output comes out on the last device. The
batch goes to the first device, where the first layer is, and the labels go with it. The same happens
inside a model whose code mixes tensors of two blocks that the split put on different devices (a
residual added across the seam).

**Fix**: move at the seam: a tensor goes to the device of the one it meets (`y.to(out.device)`, as
Hugging Face's models do with `labels.to(logits.device)`). Inside a model, keep a block whose code mixes
its tensors on one device (`no_split_module_classes`, a model's `_no_split_modules`).
"""

from pathlib import Path

import torch
import torch.nn.functional as F

from samedevice import harness


class SplitNet(harness.TinyNet):
    """TinyNet over two devices: fc1 on the first, fc2 on the last; forward crosses the seam itself."""

    def place(self, first: torch.device, last: torch.device) -> "SplitNet":
        self.fc1.to(first)
        self.fc2.to(last)
        return self

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.fc1(x))
        return self.fc2(h.to(self.fc2.weight.device))


def run(device: torch.device, workdir: Path) -> dict[str, torch.Tensor]:
    first, last = device, harness.second_device(device)  # one device where the host has one of the kind
    model = harness.new_model(SplitNet).place(first, last)
    optimizer = harness.sgd(model.parameters())
    for x, y in harness.batches():
        x, y = x.to(first), y.to(first)  # the batch goes where the first layer is
        out = model(x)
        optimizer.zero_grad()
        F.mse_loss(out, y).backward()  # BUG: the logits are on the last device, the labels on the first
        optimizer.step()
    return harness.cpu_state(model)
