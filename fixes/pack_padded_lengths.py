"""The lengths of a padded batch moved to the device with the rest of it: `pack_padded_sequence` takes them on the CPU.

**Symptom** (at the first forward pass, on any accelerator):
`RuntimeError: 'lengths' argument should be a 1D CPU int64 tensor, but got 1D cuda:0 Long tensor`

**Cause**: the training loop does the right thing with a batch, it moves every tensor of it to the device,
and the lengths go with the padded sequences. But `pack_padded_sequence` reads the lengths on the host (they
decide how many sequences are left at each step: the packed batch's `batch_sizes`, which PyTorch keeps on the
CPU whatever the device), and since PyTorch 1.7 it refuses them on a device instead of copying them back
itself (pytorch/pytorch#43227, closed as intended). On CPU everything is on the CPU: a CPU-only CI never sees it.

**Fix**: hand it `lengths.cpu()` (or a list, `lengths.tolist()`). Only the lengths go back: the packed data
stays on the device, and so does what the RNN returns.
"""

from pathlib import Path

import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence

from samedevice import harness


class SequenceNet(nn.Module):
    """An LSTM over padded sequences, its last hidden state into a linear head."""

    def __init__(self) -> None:
        super().__init__()
        self.rnn = nn.LSTM(8, 8, batch_first=True)
        self.head = nn.Linear(8, 2)

    def forward(self, x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        packed = pack_padded_sequence(x, lengths.cpu(), batch_first=True, enforce_sorted=False)  # FIX: on the CPU
        _, (h, _) = self.rnn(packed)
        return self.head(h[-1])


def run(device: torch.device, workdir: Path) -> dict[str, torch.Tensor]:
    model = harness.new_model(SequenceNet).to(device)
    # harness.train moves each input to the device, (x, lengths) alike, as a training loop moves a batch
    harness.train(model, harness.sgd(model.parameters()), harness.padded_batches(), device)
    return harness.cpu_state(model)
