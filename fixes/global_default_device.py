"""A global default device: the DataLoader's shuffling draws on it, with a CPU generator.

**Symptom** (at the first `iter(loader)` after the resume, on any accelerator):
`RuntimeError: Expected a 'cuda' device type for generator but found 'cpu'`
(raised by `torch.randperm` in `RandomSampler.__iter__`, torch/utils/data/sampler.py).

**Cause**: `torch.set_default_device(device)` (or the older `torch.set_default_tensor_type(torch.cuda.FloatTensor)`)
makes every factory call without a `device=` make its tensor on the device, in your code and in
every library's. `DataLoader(shuffle=True)`'s sampler calls `torch.randperm(n, generator=g)`: the
permutation is now made on the device, and a device's kernel takes only that device's generator, not
the CPU `torch.Generator()` a reproducible loader is given (nor the one the sampler makes itself).
On CPU the default device is the CPU, and nothing shows.

**Fix**: scope the default device to the code that should build on the device,
`with torch.device(device): model = Net()`, and leave the data pipeline on CPU. Or keep the global
default and give the loader a generator of the device, `generator=torch.Generator(device=device)`:
the permutation then comes from the device's random stream, which on CUDA differs from CPU's.
"""

from pathlib import Path

import torch
from torch.utils.data import DataLoader

from samedevice import harness


def make_optimizer(params):
    return torch.optim.SGD(params, lr=harness.LR, momentum=0.9)


def loader() -> DataLoader:
    """The batches after the resume, shuffled reproducibly: a seeded CPU generator, as people write it."""
    samples = [(x, y) for xs, ys in harness.batches()[harness.STEPS_BEFORE:] for x, y in zip(xs, ys)]
    return DataLoader(samples, batch_size=4, shuffle=True, generator=torch.Generator().manual_seed(0))


def run(device: torch.device, workdir: Path) -> dict[str, torch.Tensor]:
    path = harness.write_checkpoint(workdir, make_optimizer)
    checkpoint = torch.load(path, map_location=device, weights_only=True)
    with torch.device(device):  # FIX: the default device for building the model only, not the data pipeline
        model = harness.TinyNet()
        model.load_state_dict(checkpoint["model"])
        optimizer = make_optimizer(model.parameters())
        optimizer.load_state_dict(checkpoint["optimizer"])
    harness.train(model, optimizer, list(loader()), device)
    return harness.cpu_state(model)


def reference() -> dict[str, torch.Tensor]:
    model = harness.new_model()
    optimizer = make_optimizer(model.parameters())
    harness.train(model, optimizer, harness.batches()[: harness.STEPS_BEFORE], torch.device("cpu"))
    harness.train(model, optimizer, list(loader()), torch.device("cpu"))
    return harness.cpu_state(model)
