"""The catalog: one entry per scenario, read by the tests, the CLI and the docs checks.

A scenario's slug names its broken module `cases/<slug>.py`, its fixed module `fixes/<slug>.py`,
its page `docs/<slug>.md`, its test ids and its CLI argument. Its `symptoms` say what the broken
module does on each device kind.

`ROOT` is the folder that holds `cases/`, `fixes/` and `docs/`: the checkout when running from one,
else the copy installed inside the package (`samedevice/_catalog/`, see pyproject.toml), so the
catalog works the same after a plain `pip install`.

Reading the catalog (slugs, titles, symptoms, lessons, diffs) needs no torch, so `samedevice list`
and `show` answer at once; running a scenario (`case()`, `fix()`, `expected_error`) imports it.
"""

from __future__ import annotations

import ast
import difflib
import importlib
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

from samedevice import devices

if TYPE_CHECKING:
    import torch


def _catalog_root() -> Path:
    installed = Path(__file__).resolve().parent / "_catalog"
    if (installed / "cases").is_dir():
        return installed  # a wheel: pyproject.toml maps cases/, fixes/, docs/ into samedevice/_catalog/
    return Path(__file__).resolve().parent.parent  # a checkout (or an editable install of one)


ROOT = _catalog_root()

# symptom kind -> (exception type's name, regex its message must match); None: the broken code runs.
SYMPTOMS: dict[str, tuple[str, str] | None] = {
    # MPS words it its own way (pytorch/pytorch#130790: one of the tensors was allocated on CPU)
    # and convolution's composite checks the parameters' type against the input's (Convolution.cpp);
    # advanced indexing checks its indices itself (TensorAdvancedIndexing.cpp,
    # check_indices_on_cpu_or_selfdevice)
    "mismatch": ("RuntimeError", r"Expected all tensors to be on the same device"
                               r"|Placeholder storage has not been allocated on MPS device"
                               r"|Input type \(.*\) and (weight|bias) type \(.*\) should be the same"
                               r"|indices should be either on cpu or on the same device as the indexed tensor"),
    "deserialize": ("RuntimeError", r"Attempting to deserialize object on"),
    "rng": ("TypeError", r"RNG state must be a torch\.ByteTensor"),
    "oom": ("torch.OutOfMemoryError", r"out of memory"),
    "silent": None,
    "none": None,
}
DEVICE_KINDS = ("cpu", "emulated", "cuda", "mps", "xpu")


def expected(symptom: str) -> tuple[type[BaseException], str] | None:
    """The exception type and message pattern of a symptom kind (SYMPTOMS, with the type itself)."""
    entry = SYMPTOMS[symptom]
    if entry is None:
        return None
    name, pattern = entry
    if name.startswith("torch."):
        import torch

        return getattr(torch, name.removeprefix("torch.")), pattern
    return {"RuntimeError": RuntimeError, "TypeError": TypeError}[name], pattern


@dataclass(frozen=True)
class Scenario:
    slug: str
    title: str
    source: str
    symptoms: dict[str, str] = field(default_factory=dict)
    min_devices: int = 1  # a two-device scenario shows its symptom only where the host has two of the kind

    def symptom(self, device_kind: str) -> str:
        """What the broken module does on this device kind, on this host."""
        if device_kind != "cpu" and self.min_devices > 1 and devices.count(device_kind) < self.min_devices:
            return "none"
        return self.symptoms[device_kind]

    def expected_error(self, device_kind: str) -> tuple[type[BaseException], str] | None:
        return expected(self.symptom(device_kind))

    def case(self) -> ModuleType:
        return _load("cases", self.slug)

    def fix(self) -> ModuleType:
        return _load("fixes", self.slug)

    def diff(self) -> str:
        """`diff -u cases/<slug>.py fixes/<slug>.py`: the fix and nothing else."""
        a, b = (ROOT / d / f"{self.slug}.py" for d in ("cases", "fixes"))
        return "".join(
            difflib.unified_diff(
                a.read_text().splitlines(keepends=True),
                b.read_text().splitlines(keepends=True),
                f"cases/{self.slug}.py",
                f"fixes/{self.slug}.py",
            )
        )

    def unavailable_reason(self, device: torch.device) -> str | None:
        """None when the scenario can run on `device` here, else one line saying why not (a case may
        define `unavailable_reason(device)`, e.g. when it needs two devices)."""
        check = getattr(self.case(), "unavailable_reason", None)
        return check(device) if check is not None else None

    def lesson(self) -> str:
        """The broken module's docstring: Symptom, Cause, Fix (read from the file, not imported)."""
        return (ast.get_docstring(ast.parse(_path("cases", self.slug).read_text())) or "").strip()


def _accelerators(symptom: str, **overrides: str) -> dict[str, str]:
    kinds = {"cpu": "none", "emulated": symptom, "cuda": symptom, "mps": symptom, "xpu": symptom}
    kinds.update(overrides)
    return kinds


SCENARIOS: tuple[Scenario, ...] = (
    Scenario("sgd_momentum", "SGD momentum buffers left on CPU: optimizer state loaded before model.to(device)",
             "002 seed", _accelerators("mismatch")),
    Scenario("adam_exp_avg", "Adam/AdamW moments left on CPU; `step` stays on CPU by design",
             "002 seed, FAQ 3", _accelerators("mismatch")),
    Scenario("wrong_load_order", "Every order of the four resume steps, predicted and checked",
             "002 seed table, 000 seed", _accelerators("mismatch")),
    Scenario("bce_pos_weight", "BCEWithLogitsLoss built with a CPU pos_weight and never moved",
             "000 seed", _accelerators("mismatch")),
    Scenario("custom_loss_weight", "A loss weight kept as a plain attribute: criterion.to(device) skips it",
             "000 seed", _accelerators("mismatch")),
    Scenario("tokenizer_outputs", "Tokenizer outputs left on CPU; moving only input_ids is not enough",
             "000 seed", _accelerators("mismatch")),
    Scenario("mps_device_pick", "Model placed by a full device picker, batches by 'cuda if available else cpu'",
             "000 seed", _accelerators("mismatch", cuda="none")),
    Scenario("batch_not_moved", "DataLoader batches never moved, nested dicts and tuples included",
             "both seeds", _accelerators("mismatch")),
    # Beyond the articles: model code
    Scenario("factory_in_forward", "torch.arange / ones / from_numpy(mask) inside forward, made on CPU",
             "user reports", _accelerators("mismatch")),
    Scenario("plain_list_layers", "Layers in a plain list or dict: .to, .parameters() and state_dict skip them",
             "user reports", _accelerators("mismatch", cpu="silent")),
    Scenario("loss_class_weights", "CrossEntropyLoss / NLLLoss class weights made on CPU, or targets left on CPU",
             "user reports", _accelerators("mismatch")),
    Scenario("cpu_lookup_table", "A schedule kept as a plain CPU tensor, indexed by timesteps on the device",
             "user reports", _accelerators("mismatch")),
    Scenario("head_replaced_after_to", "A new head assigned after model.to(device) and after the optimizer",
             "user reports", _accelerators("mismatch", cpu="silent")),
    Scenario("seed_device_check", "The 000 article's device check says all clear; its recovery misses the optimizer",
             "000 seed (best practices)", _accelerators("mismatch")),
    Scenario("index_less_device", "A worker on device 1 makes tensors with an index-less device: they land on 0",
             "user reports (multi-device)", _accelerators("mismatch", mps="none"), min_devices=2),
    # Beyond the articles: checkpoints
    # deserialize where the host that resumes can be played without the device (the emulator's absent
    # host); a real accelerator cannot be hidden from its own process, so there the resume runs
    Scenario("cuda_checkpoint_on_cpu_host", "A checkpoint saved on an accelerator, loaded on a host without one",
             "002 seed (torch.load keeps the saved device)",
             _accelerators("deserialize", cuda="none", mps="none", xpu="none")),
    Scenario("rng_state_map_location", "map_location=device moves the saved RNG state; set_rng_state refuses it",
             "beyond the articles", _accelerators("rng")),
    Scenario("assign_true_load", "load_state_dict(cpu_state, assign=True) after model.to: parameters back on CPU",
             "beyond the articles", _accelerators("mismatch", cpu="silent")),
    Scenario("orphaned_params", "Optimizer built before assign=True replaces the Parameters: no error, no training",
             "beyond the articles", _accelerators("silent", cpu="silent")),
    Scenario("ema_shadow", "EMA weights kept in a plain dict, restored from a CPU checkpoint",
             "beyond the articles", _accelerators("mismatch")),
    Scenario("capturable_step", "A fused optimizer's step left on CPU by a rescue loop that skips step",
             "beyond the articles (trainer rescue loops)", _accelerators("mismatch")),
    # oom where a budget can be set (the emulator's capacity, CUDA's memory fraction); elsewhere it runs
    Scenario("resume_oom", "A device checkpoint loaded beside the model: a second copy of the weights",
             "beyond the articles", _accelerators("oom", mps="none", xpu="none")),
    # oom where each rank's budget on the other ranks' devices can be set; needs two devices of a kind
    Scenario("ddp_rank_map_location", "Two DDP ranks resume without map_location: every rank loads onto device 0",
             "002 seed (DDP note)", _accelerators("oom", mps="none", xpu="none")),
)


def slugs() -> list[str]:
    return [s.slug for s in SCENARIOS]


def get(slug: str) -> Scenario:
    for s in SCENARIOS:
        if s.slug == slug:
            return s
    near = [s for s in slugs() if slug and slug in s] or difflib.get_close_matches(slug, slugs(), n=3, cutoff=0.6)
    hint = f"did you mean {' or '.join(near)}? " if near else ""
    raise KeyError(f"unknown scenario {slug!r}; {hint}`samedevice list` shows all {len(SCENARIOS)}")


def _path(folder: str, name: str) -> Path:
    path = ROOT / folder / f"{name}.py"
    if not re.fullmatch(r"[a-z0-9_]+", name) or not path.exists():
        raise FileNotFoundError(f"{folder}/{name}.py does not exist in the catalog ({ROOT})")
    return path


def _load(folder: str, name: str) -> ModuleType:
    """cases/<name>.py or fixes/<name>.py, imported as `cases.<name>` / `fixes.<name>` from the
    catalog root (so a fix reads `from fixes.optimizer_to import optimizer_to`, as a user would)."""
    _path(folder, name)
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    return importlib.import_module(f"{folder}.{name}")


def helper(name: str) -> ModuleType:
    """A copyable helper from fixes/ (optimizer_to, checkpoint)."""
    return _load("fixes", name)
