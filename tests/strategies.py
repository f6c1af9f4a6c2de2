"""Hypothesis strategies for optimizer state layouts (every torch.optim optimizer with its flags,
param groups, frozen and tied parameters, zero or more steps before the checkpoint, partial
migrations of the state, and dtypes) and for module trees to audit (registered layers, containers,
buffers, plain attributes and layers stranded in plain lists and dicts, each tensor on a drawn device)."""

from __future__ import annotations

import html
import inspect
import re
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch
from hypothesis import strategies as st
from torch import nn

from samedevice.diagnose import FRAME

# optimizer -> the flags it may take (each drawn independently where legal together)
FLAGS: dict[str, dict[str, st.SearchStrategy]] = {
    "SGD": {"momentum": st.sampled_from([0.0, 0.9]), "nesterov": st.booleans(), "maximize": st.booleans()},
    "Adam": {"amsgrad": st.booleans(), "maximize": st.booleans()},
    "AdamW": {"amsgrad": st.booleans(), "maximize": st.booleans()},
    "Adagrad": {"maximize": st.booleans()},
    "Adadelta": {"maximize": st.booleans()},
    "Adamax": {"maximize": st.booleans()},
    "ASGD": {"maximize": st.booleans()},
    "NAdam": {"maximize": st.booleans()},
    "RAdam": {"maximize": st.booleans()},
    "RMSprop": {"centered": st.booleans(), "momentum": st.sampled_from([0.0, 0.9]), "maximize": st.booleans()},
    "Rprop": {"maximize": st.booleans()},
    "Adafactor": {"maximize": st.booleans()},
    # LBFGS runs up to max_iter closures a step (20 by default, most of these properties' time); 2 to 6
    # still fill every history size drawn, or leave it part-filled
    "LBFGS": {"history_size": st.integers(1, 4), "max_iter": st.integers(2, 6)},
    "Muon": {"nesterov": st.booleans()},
}
WEIGHT_DECAY = {"SGD", "Adam", "AdamW", "Adagrad", "Adadelta", "Adamax", "ASGD", "NAdam", "RAdam", "RMSprop",
                "Adafactor", "Muon"}
DECOUPLED = {"Adam", "NAdam", "RAdam"}  # decoupled_weight_decay
# which implementation: PyTorch allows fused for these and capturable for those on CUDA (fused
# Adagrad is CPU-only on CUDA builds, so it is left out although the emulator would take it)
FUSED = {"SGD", "Adam", "AdamW"}
CAPTURABLE = {"Adam", "AdamW", "Adadelta", "Adamax", "ASGD", "NAdam", "RAdam", "RMSprop", "Rprop"}
LR = {"SGD": 0.05, "Adagrad": 0.05, "Adadelta": 0.5, "Rprop": 0.01, "LBFGS": 0.2, "Adafactor": 0.01, "Muon": 0.02}


@dataclass(frozen=True)
class Layout:
    optimizer: str
    flags: dict[str, object]
    dtype: torch.dtype
    groups: int
    frozen: bool
    tied: bool
    steps_before: int
    migrate_mask: int  # bit i set: the i-th state tensor is already on the device before the fix
    kwargs: dict[str, object] = field(default_factory=dict)

    def make_optimizer(self, params: list[list[nn.Parameter]], *, on_cpu: bool = False) -> torch.optim.Optimizer:
        cls = getattr(torch.optim, self.optimizer)
        flags = dict(self.flags)
        if on_cpu:
            flags.pop("capturable", None)  # PyTorch refuses capturable on CPU (same math, other kernels)
            if "foreach" in inspect.signature(cls).parameters and not flags.get("fused"):
                # an accelerator defaults to foreach, CPU to the for-loop: take the same kernels, so
                # the reference differs from the device run by nothing but the device
                flags.setdefault("foreach", True)
        if self.optimizer == "LBFGS":
            return cls([p for group in params for p in group], lr=LR["LBFGS"], **flags)
        if self.optimizer == "Muon":  # Muon takes 2-D parameters only
            params = [[p for p in group if p.dim() == 2] for group in params]
            params = [group for group in params if group]
        groups = [{"params": group, "lr": LR.get(self.optimizer, 0.01) * (1 + i)} for i, group in enumerate(params)]
        return cls(groups, **flags)


class FuzzNet(nn.Module):
    def __init__(self, *, tied: bool, frozen: bool, dtype: torch.dtype) -> None:
        super().__init__()
        torch.default_generator.manual_seed(0)  # the CPU draws of the layers' init (harness.new_model)
        self.a = nn.Linear(3, 4)
        self.b = nn.Linear(4, 4)
        self.c = nn.Linear(4, 4)
        self.head = nn.Linear(4, 2)
        if tied:
            self.c.weight = self.b.weight  # one Parameter in two modules
        if frozen:
            self.a.bias.requires_grad_(False)
        self.to(dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.tanh(self.c(torch.tanh(self.b(torch.tanh(self.a(x)))))))

    def param_groups(self, n: int) -> list[list[nn.Parameter]]:
        params = list(self.parameters())  # tied parameters appear once
        return [params[i::n] for i in range(n) if params[i::n]]


@st.composite
def layouts(draw: st.DrawFn) -> Layout:
    name = draw(st.sampled_from(sorted(FLAGS)))
    flags = {k: draw(v) for k, v in FLAGS[name].items()}
    if name in WEIGHT_DECAY:
        flags["weight_decay"] = draw(st.sampled_from([0.0, 0.01]))
    if name in DECOUPLED:
        flags["decoupled_weight_decay"] = draw(st.booleans())
    if name == "SGD" and flags["momentum"] == 0.0:
        flags["nesterov"] = False  # PyTorch: nesterov needs momentum
    implementation = draw(st.sampled_from(
        ["default", "for_loop"] + (["fused"] if name in FUSED else []) + (["capturable"] if name in CAPTURABLE else [])
    ))
    if name not in ("LBFGS", "Muon"):
        if implementation == "for_loop":
            flags["foreach"] = False
        elif implementation in ("fused", "capturable"):
            flags[implementation] = True
    dtype = draw(st.sampled_from([torch.float32, torch.float64, torch.bfloat16]))
    if implementation == "capturable" and dtype == torch.bfloat16:
        dtype = torch.float32  # capturable's kernels round bfloat16 differently from the CPU reference's
    return Layout(
        optimizer=name,
        flags=flags,
        dtype=dtype,
        groups=1 if name == "LBFGS" else draw(st.integers(1, 3)),
        frozen=draw(st.booleans()),
        tied=draw(st.booleans()),
        steps_before=draw(st.integers(0, 2)),
        migrate_mask=draw(st.integers(0, 2**12 - 1)),
    )


# ---- module trees, for the audit ---------------------------------------------------------------

MEMBERS = ("layer", "module_list", "module_dict", "buffer", "parameter", "plain_tensor", "plain_list",
           "plain_dict", "plain_tensors")


def _check_devices(devices: Sequence[str], name: str) -> None:
    if not devices:
        raise ValueError(f"{name}: devices must name at least one device")
    for d in devices:
        torch.device(d)  # a named error for a device string PyTorch cannot parse


@st.composite
def module_trees(draw: st.DrawFn, *, devices: Sequence[str], max_depth: int = 2) -> nn.Module:
    """A module whose members are drawn from MEMBERS, nested up to `max_depth` modules deep, each
    tensor on a device drawn from `devices`. A leaf is an nn.Linear(2, 2)."""
    _check_devices(devices, "module_trees")
    if max_depth < 0:
        raise ValueError(f"module_trees: max_depth must be at least 0, got {max_depth}")

    def leaf() -> nn.Module:
        return nn.Linear(2, 2).to(draw(st.sampled_from(devices)))

    def child() -> nn.Module:
        return draw(module_trees(devices=devices, max_depth=max_depth - 1)) if max_depth > 0 else leaf()

    def tensor() -> torch.Tensor:
        return torch.full((2,), float(draw(st.integers(0, 9))), device=draw(st.sampled_from(devices)))

    module = nn.Module()
    for i, member in enumerate(draw(st.lists(st.sampled_from(MEMBERS), max_size=4))):
        name = f"m{i}"
        if member == "layer":
            setattr(module, name, child())
        elif member == "module_list":
            setattr(module, name, nn.ModuleList([child() for _ in range(draw(st.integers(1, 2)))]))
        elif member == "module_dict":
            setattr(module, name, nn.ModuleDict({"a": child()}))
        elif member == "buffer":
            module.register_buffer(name, tensor())
        elif member == "parameter":
            setattr(module, name, nn.Parameter(tensor()))
        elif member == "plain_tensor":
            setattr(module, name, tensor())  # neither parameter nor buffer: .to skips it
        elif member == "plain_list":
            setattr(module, name, [leaf()])  # a layer stranded in a plain list
        elif member == "plain_dict":
            setattr(module, name, {"a": leaf()})
        else:
            setattr(module, name, {"t": tensor()})
    return module


@st.composite
def training_setups(draw: st.DrawFn, *, devices: Sequence[str]) -> tuple[torch.device, dict[str, object]]:
    """A target device and the objects of a training step to audit: a module tree, and maybe an
    optimizer over its parameters with momentum buffers on drawn devices, a criterion with a weight,
    and a batch."""
    _check_devices(devices, "training_setups")
    model = draw(module_trees(devices=devices))
    objects: dict[str, object] = {"model": model}
    params = list(model.parameters())
    if params and draw(st.booleans()):
        optimizer = torch.optim.SGD(params, lr=0.1, momentum=0.9)
        for p in params:
            if draw(st.booleans()):
                optimizer.state[p]["momentum_buffer"] = torch.ones(p.shape, device=draw(st.sampled_from(devices)))
        objects["optimizer"] = optimizer
    if draw(st.booleans()):
        objects["criterion"] = nn.CrossEntropyLoss(weight=torch.ones(2, device=draw(st.sampled_from(devices))))
    if draw(st.booleans()):
        objects["batch"] = {"x": torch.ones(3, 2, device=draw(st.sampled_from(devices)))}
    return torch.device(draw(st.sampled_from(devices))), objects


# ---- pastes: an error as people paste it ------------------------------------------------------------

@st.composite
def pasted(draw: st.DrawFn, text: str) -> str:
    """`text` as a person may paste it: maybe in a terminal's colours (as Python 3.13 colours a traceback: each
    frame's file, line and function, and the error's name), each frame line wrapped at one or two of its spaces (a
    narrow terminal, an e-mail), maybe each line stamped with a CI log's time, maybe the whole quoted (`> `, as a
    forum or an issue quotes it), maybe inside
    Markdown's fences, maybe with Windows' line ends, maybe escaped as a web page's source escapes it (`&quot;`)."""
    if draw(st.booleans()):
        text = re.sub(r'(File ")([^"\n]+)(", line )(\d+)(, in )(\S+)', "\\1\x1b[35m\\2\x1b[0m\\3\x1b[35m\\4\x1b[0m\\5"
                      "\x1b[35m\\6\x1b[0m", text)
        text = re.sub(r"(?m)^(\w+(?:Error|Exception))(?=:)", "\x1b[1;35m\\1\x1b[0m", text)
    lines = []
    for line in text.split("\n"):
        spaces = [i for i, c in enumerate(line) if c == " " and line[:i].strip()]
        if FRAME.search(line) and spaces and draw(st.booleans()):
            cuts = sorted(draw(st.lists(st.sampled_from(spaces), min_size=1, max_size=2, unique=True)))
            starts, ends = [0, *(c + 1 for c in cuts)], [*cuts, len(line)]
            lines += [line[a:b] for a, b in zip(starts, ends)]
        else:
            lines.append(line)
    if draw(st.booleans()):  # as a CI log (GitHub Actions') stamps each line
        lines = [f"2026-12-03T10:11:{i % 60:02d}.{i:07d}Z {line}" for i, line in enumerate(lines)]
    if draw(st.booleans()):
        lines = ["> " + line if line else ">" for line in lines]
    if draw(st.booleans()):
        fence = draw(st.sampled_from(["```", "~~~"]))
        lines = [fence + draw(st.sampled_from(["", "python", "text"])), *lines, fence]
    text = draw(st.sampled_from(["\n", "\r\n"])).join(lines)
    return html.escape(text) if draw(st.booleans()) else text
