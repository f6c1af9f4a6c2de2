"""The wrong_load_order table: every order of the resume steps, its predicted and its observed outcome.

Two optimizers: SGD with momentum creates its state lazily (at the first step or the load), Adagrad
eagerly (its `sum` exists from the constructor, on the device the parameters are on then). Resume
orders are the orders of the four steps in which the optimizer is built before its state is loaded;
fresh-start orders have no checkpoint (only build and model.to).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from pathlib import Path

import torch

from samedevice import harness
from samedevice.harness import BUILD, LOAD_MODEL, LOAD_OPTIMIZER, TO_DEVICE


def sgd_momentum(params: Iterable[torch.nn.Parameter]) -> torch.optim.Optimizer:
    return torch.optim.SGD(params, lr=harness.LR, momentum=0.9)


def adagrad(params: Iterable[torch.nn.Parameter]) -> torch.optim.Optimizer:
    return torch.optim.Adagrad(params, lr=harness.LR)


OPTIMIZERS = {"SGD(momentum=0.9)": (sgd_momentum, False), "Adagrad": (adagrad, True)}  # name: (factory, eager)

RESUME_ORDERS = [
    order for order in itertools.permutations((BUILD, LOAD_MODEL, LOAD_OPTIMIZER, TO_DEVICE))
    if order.index(BUILD) < order.index(LOAD_OPTIMIZER)
]
FRESH_ORDERS = list(itertools.permutations((BUILD, TO_DEVICE)))


def predicted_to_raise(order: tuple[str, ...], eager: bool) -> bool:
    """An order breaks when optimizer state exists on CPU when the model moves: state loaded before
    model.to, or, with nothing to load, an eager optimizer built before it."""
    moved = order.index(TO_DEVICE)
    if LOAD_OPTIMIZER in order:
        return order.index(LOAD_OPTIMIZER) < moved
    return eager and order.index(BUILD) < moved


def observe(order: tuple[str, ...], optimizer_name: str, device: torch.device, workdir: Path) -> str | None:
    """Run the order and train; the first line of the error it raised, or None."""
    make_optimizer, _ = OPTIMIZERS[optimizer_name]
    path = harness.write_checkpoint(workdir, make_optimizer) if LOAD_OPTIMIZER in order else None
    try:
        model, optimizer = harness.resume_in_order(order, path, device, make_optimizer)
        harness.finish(model, optimizer, device)
    except RuntimeError as e:
        return str(e).splitlines()[0]
    return None


def table(device: torch.device, workdir: Path) -> str:
    """The table as markdown: each outcome predicted by the rule, and observed on `device`."""
    heads = [f"{name} {what}" for name in OPTIMIZERS for what in ("predicted", "observed")]
    lines = ["| order | " + " | ".join(heads) + " |", "|---|" + "---|" * len(heads)]
    for i, order in enumerate(RESUME_ORDERS + FRESH_ORDERS):
        cells = []
        for name, (_, eager) in OPTIMIZERS.items():
            folder = Path(workdir) / f"{i}-{name}"
            folder.mkdir(parents=True, exist_ok=True)
            cells.append("raises" if predicted_to_raise(order, eager) else "ok")
            cells.append("raises" if observe(order, name, device, folder) else "ok")
        label = " → ".join(order) + ("" if LOAD_OPTIMIZER in order else " (fresh start)")
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"
