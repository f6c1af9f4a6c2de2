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
# Most scenarios run on CPU ("none" or "silent" there); one whose broken code fails on CPU as well
# records that error for cpu too.
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
    # a device's RNG state restored by index onto a host without that device: torch/cuda/random.py's
    # `torch.cuda.default_generators[idx]`, a tuple of one generator per device the host has
    "rng_devices": ("IndexError", r"^tuple index out of range$"),
    # a device kernel's draw refuses a generator of another device (CUDAGeneratorImpl's check_generator)
    "generator": ("RuntimeError", r"Expected a '\w+' device type for generator but found '\w+'"),
    # a meta tensor (no data) met a real one in an op's meta function (torch/_prims_common, check_same_device)
    "meta": ("RuntimeError", r"Tensor on device meta is not on the expected device"),
    # a process group with no backend for the tensor's device (ProcessGroup::getBackend; NCCL before 2.0)
    "collective": ("RuntimeError", r"No backend type associated with device type \w+|Tensors must be CUDA and dense"),
    # DataParallel's own check of the module against device_ids[0] (torch/nn/parallel/data_parallel.py)
    "dataparallel": ("RuntimeError", r"module must have its parameters and buffers on device \S+ \(device_ids\[0\]\) "
                                     r"but found one of them on device: \S+"),
    # pack_padded_sequence's own check of its lengths (aten/src/ATen/native/PackedSequence.cpp, checkLongTensor)
    "lengths": ("RuntimeError", r"'lengths' argument should be a 1D CPU int64 tensor"),
    # a device tensor handed to NumPy (torch/csrc/utils/tensor_numpy.cpp, tensor_to_numpy's check of the device)
    "numpy": ("TypeError", r"can't convert \S+ device type tensor to numpy"),
    # torchmetrics' words for a device mismatch in a metric's update (torchmetrics/metric.py, Metric._wrap_update)
    "metric": ("RuntimeError", r"Encountered different devices in metric calculation"),
    # a device used in a process forked after its parent used it: torch.cuda._lazy_init's refusal (DataLoader's
    # worker re-raises it as "Caught RuntimeError in DataLoader worker process 0.", the original below)
    "fork": ("RuntimeError", r"Cannot re-initialize \w+ in forked subprocess"),
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
    return {"RuntimeError": RuntimeError, "TypeError": TypeError, "IndexError": IndexError}[name], pattern


@dataclass(frozen=True)
class Clues:
    """What `samedevice diagnose` (samedevice/diagnose.py) matches a pasted error against: the kinds of
    message the broken code raises, the device pairs, the frames and op arguments where it raises, the
    signals its code shows, a prior (how often users report it, 0 to 1), the one check that confirms it
    and the question that tells it from its neighbours."""

    kinds: tuple[str, ...] = ("mismatch",)
    pairs: tuple[str, ...] = ("accelerator_cpu",)
    templates: tuple[str, ...] = ()
    sides: tuple[str, ...] = ()  # what its broken code leaves on CPU: "input", "weights" or "state" (updated in place)
    frames: tuple[str, ...] = ()
    arguments: tuple[str, ...] = ()
    ops: tuple[str, ...] = ()
    code: tuple[str, ...] = ()
    against: tuple[str, ...] = ()  # code signals or frames that speak against it (the model moved, for "never moved")
    leans: tuple[str, ...] = ()  # code signals or frames that order the candidates but never name it alone
    older: tuple[str, ...] = ()  # message templates of releases older than its mechanism: the message's own evidence
    # for it (the op, the argument) counts for less there
    prior: float = 0.0
    confirm: str = ""
    question: str = ""


@dataclass(frozen=True)
class Scenario:
    slug: str
    title: str
    source: str
    symptoms: dict[str, str] = field(default_factory=dict)
    min_devices: int = 1  # a two-device scenario shows its symptom only where the host has two of the kind
    clues: Clues = field(default_factory=Clues)

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
                a.read_text(encoding="utf-8").splitlines(keepends=True),
                b.read_text(encoding="utf-8").splitlines(keepends=True),
                f"cases/{self.slug}.py",
                f"fixes/{self.slug}.py",
            )
        )

    def unavailable_reason(self, device: torch.device) -> str | None:
        """None when the scenario can run on `device` here, else one line saying why not (a case may
        define `unavailable_reason(device)`, e.g. when it needs two devices)."""
        check = getattr(self.case(), "unavailable_reason", None)
        return check(device) if check is not None else None

    def fix_unavailable_reason(self, device: torch.device) -> str | None:
        """None when the fixed module can run on `device` here, else why not: the scenario's own reason, or,
        where the fix needs what the device lacks (a case may define `fix_unavailable_reason(device)`), that."""
        check = getattr(self.case(), "fix_unavailable_reason", None)
        return self.unavailable_reason(device) or (check(device) if check is not None else None)

    def lesson(self) -> str:
        """The broken module's docstring: Symptom, Cause, Fix (read from the file, not imported)."""
        return (ast.get_docstring(ast.parse(_path("cases", self.slug).read_text(encoding="utf-8"))) or "").strip()


OPTIMIZER_CHECK = "audit.misplaced(device, model=model, optimizer=optimizer) names the optimizer state left behind"
CRITERION_CHECK = "audit.misplaced(device, criterion=criterion) names the loss's tensor"
STEP_QUESTION = "does it raise in optimizer.step(), after a resume, with SGD momentum or Adam moments?"
LOSS_QUESTION = "does it raise in the loss: a weight of the criterion, or the targets?"
# where the traceback shows it raised where a question asks, the question is what is left to ask
STEP_ORDER_QUESTION = ("was the optimizer's state loaded (optimizer.load_state_dict), or the optimizer built (Adagrad "
                       "makes its state then), before the model was moved (model.to(device))? That state stays on the "
                       "CPU")
LOSS_PART_QUESTION = ("which of the loss's tensors is on the CPU: a weight the criterion was built with (weight=, "
                      "pos_weight=, a tensor it keeps), or the targets?")
SHOWN_QUESTIONS = {STEP_QUESTION: ("optimizer_step", STEP_ORDER_QUESTION), LOSS_QUESTION: ("loss", LOSS_PART_QUESTION)}
FORWARD_QUESTION = ("which tensor is on the CPU: the batch, the model's weights (a layer kept out of .to's reach "
                    "included), or one made during forward without device=?")
# where the message names the side on the CPU (an argument of a layer's op), the question is asked within it
SIDE_QUESTIONS = {
    "input": "where was the input on the CPU made: a batch never moved (or moved without keeping the result), a "
             "tokenizer's output, or a tensor made during forward without device=?",
    "weights": "which of the model's tensors is on the CPU: the whole model never moved, a layer kept out of .to's "
               "reach (a plain list, a head replaced after .to), or a tensor kept as a plain attribute?",
}


def _accelerators(symptom: str, **overrides: str) -> dict[str, str]:
    kinds = {"cpu": "none", "emulated": symptom, "cuda": symptom, "mps": symptom, "xpu": symptom}
    kinds.update(overrides)
    return kinds


SCENARIOS: tuple[Scenario, ...] = (
    Scenario("sgd_momentum", "SGD momentum buffers left on CPU: optimizer state loaded before model.to(device)",
             "002 seed", _accelerators("mismatch"),
             clues=Clues(leans=("resumed",), sides=("state",), frames=("optimizer_step", "sgd_step"),
                   code=("optimizer_load", "load_before_move", "sgd"), prior=0.5,
                   confirm=OPTIMIZER_CHECK, question=STEP_QUESTION)),
    Scenario("adam_exp_avg", "Adam/AdamW moments left on CPU; `step` stays on CPU by design",
             "002 seed, FAQ 3", _accelerators("mismatch"),
             clues=Clues(leans=("resumed",), sides=("state",), frames=("optimizer_step", "adam_step"),
                   code=("optimizer_load", "load_before_move", "adam"), prior=0.45,
                   confirm=OPTIMIZER_CHECK, question=STEP_QUESTION)),
    Scenario("wrong_load_order", "Every order of the four resume steps, predicted and checked",
             "002 seed table, 000 seed", _accelerators("mismatch"),
             clues=Clues(leans=("resumed",), sides=("state",),
                   frames=("optimizer_step", "sgd_step", "adam_step", "optimizer_load", "custom_optimizer_step"),
                   code=("optimizer_load", "load_before_move", "sgd", "adam", "adagrad"), prior=0.4,
                   confirm=OPTIMIZER_CHECK, question=STEP_QUESTION)),
    Scenario("bce_pos_weight", "BCEWithLogitsLoss built with a CPU pos_weight and never moved",
             "000 seed", _accelerators("mismatch"),
             clues=Clues(frames=("loss",), ops=("binary_cross_entropy",), arguments=("pos_weight",),
                   code=("pos_weight",),
                   prior=0.1, confirm=CRITERION_CHECK, question=LOSS_QUESTION)),
    Scenario("custom_loss_weight", "A loss weight kept as a plain attribute: criterion.to(device) skips it",
             "000 seed", _accelerators("mismatch"),
             clues=Clues(frames=("loss", "user_forward", "user_loss"),
                         code=("plain_tensor_attr", "plain_list_layers", "attribute_raised", "loss_attr"),
                         against=("local_indexed",), prior=0.1,
                   confirm=CRITERION_CHECK,
                   question=LOSS_QUESTION)),
    Scenario("tokenizer_outputs", "Tokenizer outputs left on CPU; moving only input_ids is not enough",
             "000 seed", _accelerators("mismatch"),
             clues=Clues(sides=("input",), frames=("embedding", "generate"), arguments=("index",),
                   ops=("index_select", "embedding"),
                   code=("tokenizer", "tokenizer_not_moved"), against=("tokenizer_moved",), prior=0.5,
                   # a tokenizer's output as a dict of tensors moved by `.to` (BatchEncoding) came with transformers
                   # 3 (2020), in PyTorch 1.5's time; an index in an older release's wording is most often a batch
                   # never moved (7 of the 10 such reports of the 70 and the held out, a tokenizer's output 1)
                   older=("legacy_backend", "legacy_device_type", "legacy_type", "invalid_combination",
                          "invalid_signature", "thnn_cpu_argument"),
                   confirm="audit.misplaced(device, inputs=enc) names input_ids and attention_mask",
                   question="is the index on the CPU a tokenizer's output (input_ids, attention_mask: each "
                   "key moved?), or a batch from a DataLoader, or indices built by hand?")),
    Scenario("mps_device_pick", "Model placed by a full device picker, batches by 'cuda if available else cpu'",
             "000 seed", _accelerators("mismatch", cuda="none"),
             clues=Clues(sides=("input",), frames=("mps_device", "layer"), arguments=("mat1",), ops=("addmm",),
                   code=("mps",), against=("called_on_device",),
                   prior=0.2,
                   confirm="print the device of the model and of one batch: mps and cpu",
                   question="is the machine a Mac (MPS), with a CUDA-only device picker somewhere?")),
    Scenario("batch_not_moved", "DataLoader batches never moved, nested dicts and tuples included",
             "both seeds", _accelerators("mismatch"),
             clues=Clues(sides=("input",), frames=("layer", "embedding"), arguments=("mat1", "mat2", "input"),
                   ops=("addmm", "mm", "conv"),
                   code=("batch_loop", "local_indexed", "cpu_input", "move_discarded"),
                   against=("called_on_device", "batch_moved"),
                   prior=0.7,
                   confirm="audit.misplaced(device, batch=batch) names each key",
                   question=FORWARD_QUESTION)),
    Scenario("model_not_moved", "The batches are moved, the model never is: its weights stay on CPU",
             "000 seed (root cause 1), user reports", _accelerators("mismatch"),
             # DDP's check of a module left on the CPU at the wrap is this bug's too (its page and
             # test_model_not_moved_under_ddp)
             clues=Clues(kinds=("mismatch", "ddp"), templates=("input_weight", "ddp_device_ids"), sides=("weights",),
                         frames=("layer", "embedding"),
                         arguments=("mat1", "mat2", "input", "index"), ops=("addmm", "mm", "conv", "index_select"),
                         code=("model_never_moved", "moves_inputs"), against=("model_moved",), prior=0.6,
                         confirm="print(next(model.parameters()).device) beside the batch's device",
                         question=FORWARD_QUESTION)),
    # Beyond the articles: model code
    Scenario("factory_in_forward", "torch.arange / ones / from_numpy(mask) inside forward, made on CPU",
             "user reports", _accelerators("mismatch"),
             # a Triton kernel (a library's, or Inductor's) given a tensor made on the CPU
             clues=Clues(kinds=("mismatch", "triton_pointer"), templates=("rnn_hidden", "all_input_tensors"),
                         frames=("user_forward",),
                         # the commonest cause of a bare "found at least two devices" in public reports (20 of the
                         # 72 bare ones of the 70 and the held out, batch_not_moved 15), most of them a library's
                         # own forward: the first candidate of a bare message
                         code=("factory_in_forward", "factory_raised", "factory_no_device", "called_on_device",
                               "local_indexed"), prior=0.8,
                   confirm="audit.misplaced(device, model=model, batch=batch) "
                   "finds nothing: the tensor is made during the call", question=FORWARD_QUESTION)),
    Scenario("plain_list_layers", "Layers in a plain list or dict: .to, .parameters() and state_dict skip them",
             "user reports", _accelerators("mismatch", cpu="silent"),
             clues=Clues(templates=("input_weight",), sides=("weights",), frames=("layer",), arguments=("mat1", "mat2"),
                   ops=("addmm", "mm", "conv"), code=("plain_list_layers", "called_on_device"),
                   prior=0.2, confirm="audit.structure(model=model) names the stranded layers",
                   question=FORWARD_QUESTION)),
    Scenario("plain_tensor_attribute", "A model's constant tensor kept as a plain attribute: model.to(device) "
             "skips it", "user reports", _accelerators("mismatch"),
             clues=Clues(frames=("user_forward",), code=("plain_tensor_attr", "attribute_raised", "called_on_device"),
                         against=("local_indexed",), prior=0.3,
                         confirm="audit.misplaced(device, model=model) names the attribute (kind 'attribute')",
                         question="does the model keep a tensor as a plain attribute (self.x = torch.… in __init__), "
                         "not registered as a buffer?")),
    Scenario("loss_class_weights", "CrossEntropyLoss / NLLLoss class weights made on CPU, or targets left on CPU",
             "user reports", _accelerators("mismatch"),
             clues=Clues(frames=("loss",), arguments=("weight", "target"), ops=("nll_loss", "cross_entropy"),
                   code=("class_weight",), prior=0.3, confirm=CRITERION_CHECK, question=LOSS_QUESTION)),
    Scenario("cpu_lookup_table", "A schedule kept as a plain CPU tensor, indexed by timesteps on the device",
             "user reports", _accelerators("mismatch"),
             clues=Clues(templates=("indices",), frames=("user_forward",),
                         code=("lookup_table", "plain_tensor_attr", "attribute_indexed"),
                         against=("local_indexed",), prior=0.2,
                   confirm="audit.misplaced(device, model=model) names the plain tensor attribute",
                   question="is a plain tensor attribute (a schedule, a table) indexed by device indices?")),
    Scenario("head_replaced_after_to", "A new head assigned after model.to(device) and after the optimizer",
             "user reports", _accelerators("mismatch", cpu="silent"),
             # its broken code runs the moved model on device inputs: the new head is the CPU tensor
             clues=Clues(sides=("weights",), frames=("layer",), arguments=("mat1", "mat2"), ops=("addmm", "mm", "conv"),
                   code=("head_replaced", "called_on_device"),
                   prior=0.1,
                   confirm="audit.structure(model=model, optimizer=optimizer) names the head as missing",
                   question=FORWARD_QUESTION)),
    Scenario("seed_device_check", "The 000 article's device check says all clear; its recovery misses the optimizer",
             "000 seed (best practices)", _accelerators("mismatch"),
             clues=Clues(frames=("optimizer_step", "loss"), code=("device_check", "pos_weight"),
                   confirm=OPTIMIZER_CHECK,
                   question=STEP_QUESTION)),
    Scenario("index_less_device", "A worker on device 1 makes tensors with an index-less device: they land on 0",
             "user reports (multi-device)", _accelerators("mismatch", mps="none"), min_devices=2,
             # on a GPU in exclusive-process compute mode, a second process's touch of device 0 is refused as busy
             # xformers' attention bias made without a device: on the current device, 0, beside a query on device 1
             # FSDP's compute device is device_id's, the tensors it makes are on the current device; a Triton kernel
             # is launched on the current device and cannot reach another GPU's tensor
             clues=Clues(kinds=("mismatch", "busy", "compute_device", "triton_pointer"), pairs=("two_accelerators",),
                         templates=("attn_bias",),
                         code=("index_less", "ranks"),
                         prior=0.3,
                   confirm="print torch.accelerator.current_device_index() in each worker",
                   question="is it two devices of one kind, with `.cuda()` or \"cuda\" in a process for device 1?")),
    Scenario("model_split_across_devices", "A model split over two devices whose loss mixes its two ends: the "
             "labels on the first device, the logits on the last", "user reports (device maps)",
             _accelerators("mismatch", mps="none"), min_devices=2,
             # the commoner cause of two GPUs in a message (of such reports in the 70 and the held out, 25 are it and
             # 20 a worker's index-less device; of the 30 bare "found at least two devices", 15 against 6): first
             # among bare ones, by its prior
             # a Hugging Face model loaded or run (from_pretrained, generate, accelerate's hooks) beside two GPUs is
             # most often a device map's split (of the reports of two GPUs, 6 such were this lesson's, none a
             # worker's index-less device), but a library's own split too: it orders, it does not decide
             clues=Clues(pairs=("two_accelerators",), frames=("loss",), code=("split_model", "device_map"), prior=0.4,
                         leans=("hf_model", "generate", "hf_library"),
                         confirm="audit.misplaced(first_device, model=model) names the layers on the last device; "
                         "print the devices of the output and the labels",
                         question="is the model split over two devices (device_map, a submodule moved by itself)?")),
    Scenario("offload_device_read", "Offloaded weights asked for the model's device: a parameter says cpu, the "
             "model runs on the accelerator", "user reports (offload)", _accelerators("mismatch"),
             clues=Clues(kinds=("mismatch", "meta", "meta_copy"), pairs=("accelerator_cpu", "accelerator_meta"),
                         code=("offload", "device_check"), prior=0.2,
                         confirm="print(next(model.parameters()).device) beside the output's device: cpu (or meta) "
                         "and the accelerator",
                         question="are the weights offloaded (cpu_offload, enable_model_cpu_offload, a device map "
                         "with cpu or disk)?")),
    Scenario("traced_device_constant", "A module exported or traced on CPU, run on the device: device=x.device "
             "was recorded as cpu", "user reports", _accelerators("mismatch"),
             # exported or traced on device 0 and run on device 1, the constant is device 0's: two of a kind
             clues=Clues(pairs=("accelerator_cpu", "two_accelerators"), frames=("torchscript", "exported"),
                         code=("jit_trace", "constant_raised", "called_on_device"), prior=0.2,
                         confirm="print the exported graph (exported.graph_module.code, traced.code): "
                         "device=cpu among its constants",
                         question="was the model exported or traced (torch.export, torch.jit.trace) on another "
                         "device than the one it runs on?")),
    Scenario("meta_param_not_materialized", "A model built on meta and loaded without assign=True: its weights "
             "stay on meta (on CPU too)", "user reports", _accelerators("meta", cpu="meta"),
             clues=Clues(kinds=("meta", "meta_copy"), pairs=("accelerator_meta",), code=("meta", "optimizer_load"),
                         prior=0.5,
                         confirm="print({p.device for p in model.parameters()}): meta among them",
                         question="was the model built on meta (torch.device('meta'), init_empty_weights, "
                         "low_cpu_mem_usage) and loaded without assign=True?")),
    Scenario("dataparallel_device_ids", "nn.DataParallel of a module left on CPU (or on another device than "
             "device_ids[0])", "user reports", _accelerators("dataparallel"), min_devices=2,
             clues=Clues(kinds=("dataparallel",), pairs=(), frames=("dataparallel",), code=("dataparallel",),
                         prior=0.5, confirm="print({p.device for p in model.parameters()}, model.device_ids)",
                         question="is the model wrapped in nn.DataParallel before it is moved to device_ids[0]?")),
    Scenario("collective_on_cpu_tensor", "A CPU tensor given to a process group whose backend serves only the "
             "accelerator (NCCL)", "user reports", _accelerators("collective", mps="none"),
             clues=Clues(kinds=("collective",), pairs=(), frames=("collective",), code=("ranks",), prior=0.5,
                         confirm="print(dist.get_backend(), tensor.device) before the collective",
                         question="is the process group NCCL's (or another accelerator-only backend), given a "
                         "CPU tensor?")),
    Scenario("global_default_device", "torch.set_default_device(device) and a shuffling DataLoader: its sampler "
             "draws on the device with a CPU generator", "user reports", _accelerators("generator"),
             # and any library's factory under it: pack_sequence's lengths, which pack_padded_sequence refuses
             clues=Clues(kinds=("generator", "lengths"), pairs=(), frames=("sampler", "pack_sequence"),
                         code=("default_device", "shuffle", "pack_sequence"),
                         against=("draw_device_given",),  # the draw's device written in the call: no default's
                         prior=0.5, confirm="print(torch.get_default_device()) where the loader is iterated",
                         question="is a default device set (torch.set_default_device, set_default_tensor_type)?")),
    # a 0-dim CPU tensor joins a device op as a scalar (TensorIterator's rule); a 0-dim device tensor is no scalar to
    # the CPU's ops: in place in a CPU tensor, or beside a CPU tensor of one or more dimensions, it is a mismatch
    Scenario("device_scalar_into_cpu", "A running total kept as a CPU tensor, the device's loss added into it: the "
             "scalar exemption runs one way", "user reports", _accelerators("mismatch"),
             # (1.6 to 1.x counted a CPU scalar written in place as one of the CPU scalars a CUDA kernel takes)
             clues=Clues(templates=("cpu_scalars",), code=("cpu_accumulator", "device_scalar_operand"), prior=0.1,
                         confirm="print the devices of the line's tensors: a CPU tensor (a total, a restored best "
                         "score) beside a 0-dim device tensor (a loss, a metric)",
                         question="is a CPU tensor (a running total, a best score restored with map_location='cpu') "
                         "combined with a 0-dim device tensor (a loss, a metric)?")),
    Scenario("device_in_dataloader_worker", "Samples moved to the device inside the Dataset: DataLoader's forked "
             "workers cannot use it", "user reports", _accelerators("fork"),
             # CUDA's old words for the same refusal ("CUDA error: initialization error") also fit a driver that
             # would not start: only a candidate there
             clues=Clues(kinds=("fork", "cuda_init"), pairs=(), templates=("cuda_in_fork",),
                         frames=("dataloader_worker",), code=("dataloader_worker",), prior=0.5,
                         confirm="run with DataLoader(..., num_workers=0): the error goes away",
                         question="does it fail in a DataLoader worker (num_workers > 0) whose Dataset, transform or "
                         "collate_fn moves tensors to the GPU?")),
    Scenario("hardcoded_device", "Model code that picks a device of its own (\"cuda\" if available, .cuda()): a "
             "CPU run on a GPU host fails", "user reports", _accelerators("mismatch"),
             # (its symptom is the host's: the broken code runs on the CPU of a host that has the accelerator)
             clues=Clues(pairs=("accelerator_cpu", "two_accelerators"), code=("device_picked",), prior=0.1,
                         confirm="run the model on the CPU on the machine with the GPU: the mismatch is a tensor the "
                         "forward makes on the GPU",
                         question="does the model's code pick a device itself (\"cuda\" if torch.cuda.is_available(), "
                         ".cuda(), device=\"cuda:0\") where it should take its input's (x.device)?")),
    Scenario("metric_not_moved", "A metric (torchmetrics) built beside the model and never moved: its state stays "
             "on the CPU", "user reports", _accelerators("metric"),
             # torchmetrics' message names the metric's placement, but a metric of one's own that makes a tensor
             # without device= in its update gets it too (factory_in_forward's lesson, in update)
             clues=Clues(templates=("metric_devices",), frames=("metric",), code=("metric_never_moved",),
                         against=("metric_moved",),
                         prior=0.2,
                         confirm="print the devices of the metric's state (metric.metric_state) beside its inputs'",
                         question="was the metric built outside the model (or inside a step) and never moved "
                         "with .to(device)?")),
    # the one input PyTorch takes on the CPU whatever the device: the message is its own, and so is the lesson, unless
    # a default device made the lengths there (the scenario above: pack_sequence's own tensor of lengths)
    Scenario("pack_padded_lengths", "A padded batch's lengths moved to the device with it: pack_padded_sequence "
             "takes them on the CPU", "user reports", _accelerators("lengths"),
             clues=Clues(kinds=("lengths",), pairs=(), templates=("lengths",), code=("pack_padded",),
                         against=("default_device", "pack_sequence", "lengths_list", "lengths_cpu"), prior=0.6,
                         confirm="print(lengths.device) where pack_padded_sequence is called: it must say cpu",
                         question="are the lengths your batch's, moved to the device with it (this scenario), or made "
                         "while a default device is set (torch.set_default_device, set_default_tensor_type)?")),
    # and where a tensor leaves PyTorch: NumPy reads host memory
    Scenario("device_tensor_to_numpy", "Model outputs on the device handed to NumPy: it reads host memory",
             "user reports", _accelerators("numpy"),
             clues=Clues(kinds=("numpy",), pairs=(), templates=("numpy",), prior=0.5,
                         confirm="print(t.device) of the tensor handed to NumPy (np.*, .numpy(), sklearn, "
                         "matplotlib): it must say cpu",
                         question="which tensor reaches NumPy on the device: an output, a loss, a metric's state?")),
    # Beyond the articles: checkpoints
    # deserialize where the host that resumes can be played without the device (the emulator's absent
    # host); a real accelerator cannot be hidden from its own process, so there the resume runs
    Scenario("cuda_checkpoint_on_cpu_host", "A checkpoint saved on an accelerator, loaded on a host without one",
             "002 seed (torch.load keeps the saved device)",
             _accelerators("deserialize", cuda="none", mps="none", xpu="none"),
             # torch.load's refusals: no such backend here, no such index (a checkpoint from cuda:3), and an old
             # torch.load's .cuda() on a CPU-only build
             clues=Clues(kinds=("deserialize", "deserialize_index", "no_cuda"), pairs=(), frames=("serialization",),
                   code=("torch_load",), prior=0.5,
                   confirm="python -c 'import torch; print(torch.cuda.is_available(), torch.version.cuda)': "
                   "None is a CPU-only PyTorch build",
                   question="should this host have the GPU? A CPU-only PyTorch build says so too: "
                   "install the CUDA build")),
    Scenario("rng_state_map_location", "map_location=device moves the saved RNG state; set_rng_state refuses it",
             "beyond the articles", _accelerators("rng"),
             clues=Clues(kinds=("rng",), pairs=(), frames=("rng", "serialization"),
                   code=("map_location_device", "set_rng_state"), prior=0.5,
                   confirm="print(type(state), state.device) before torch.set_rng_state",
                   question="was the RNG state loaded with map_location=<a device>?")),
    Scenario("rng_state_device_count", "The RNG states of every device restored on a host with fewer devices",
             "user reports (resume on another host)",
             # a real accelerator cannot hide its devices from its own process: there the host that resumes is the
             # host that saved; the emulator plays one with fewer (emulator.visible)
             _accelerators("rng_devices", cuda="none", mps="none", xpu="none"),
             clues=Clues(kinds=("rng_devices",), pairs=(), frames=("rng",), code=("rng_state_all",), prior=0.5,
                         # the states restored by index (set_rng_state_all) over the CPU's (torch.set_rng_state), where
                         # the message does not tell: rng_state_map_location's TypeError is the CPU state's first
                         leans=("rng_state_all",),
                         confirm="print(len(states), torch.cuda.device_count()) before set_rng_state_all",
                         question="was the checkpoint saved on a host with more GPUs than this one has (or shows)?")),
    Scenario("assign_true_load", "load_state_dict(cpu_state, assign=True) after model.to: parameters back on CPU",
             "beyond the articles", _accelerators("mismatch", cpu="silent"),
             clues=Clues(sides=("weights",), frames=("layer",), arguments=("mat1", "mat2"), ops=("addmm", "mm", "conv"),
                   code=("assign_true",),
                   prior=0.1,
                   confirm="audit.misplaced(device, model=model) after the load", question=FORWARD_QUESTION)),
    Scenario("orphaned_params", "Optimizer built before assign=True replaces the Parameters: no error, no training",
             "beyond the articles", _accelerators("silent", cpu="silent"),
             clues=Clues(kinds=())),
    Scenario("ema_shadow", "EMA weights kept in a plain dict, restored from a CPU checkpoint",
             "beyond the articles", _accelerators("mismatch"),
             clues=Clues(leans=("resumed",), sides=("state",), frames=("ema",), code=("ema",), prior=0.2,
                   confirm="audit.misplaced(device, ema=ema) names the shadow weights",
                   question="does it raise in the EMA update?")),
    Scenario("param_group_tensor", "An optimizer's tensor kept in param_groups: load_state_dict never moves it",
             "user reports (Prodigy, D-Adaptation, apex)", _accelerators("mismatch"),
             clues=Clues(leans=("resumed",), sides=("state",), frames=("custom_optimizer_step",),
                   code=("group_tensor", "custom_optimizer"),
                   prior=0.1,
                   confirm="audit.misplaced(device, optimizer=optimizer) names optimizer.param_groups[g]['<key>']",
                   question="is the optimizer a third-party one (Prodigy, D-Adaptation, apex), keeping a tensor in "
                   "its param_groups rather than in optimizer.state?")),
    Scenario("capturable_step", "A fused optimizer's step left on CPU by a rescue loop that skips step",
             "beyond the articles (trainer rescue loops)", _accelerators("mismatch"),
             clues=Clues(kinds=("mismatch", "capturable"),
                   templates=("capturable_true",), frames=("optimizer_step",), arguments=("state_steps",),
                   ops=("_fused_adam", "_fused_sgd", "_foreach"), code=("capturable_fused",), prior=0.1,
                   confirm=OPTIMIZER_CHECK,
                   question="is the optimizer fused or capturable, and `step` on another device than its parameter?")),
    # oom where a budget can be set (the emulator's capacity, CUDA's memory fraction); elsewhere it runs
    Scenario("resume_oom", "A device checkpoint loaded beside the model: a second copy of the weights",
             "beyond the articles", _accelerators("oom", mps="none", xpu="none"),
             clues=Clues(leans=("resumed",), kinds=("oom",), pairs=(), frames=("serialization",), code=("torch_load",
                   "map_location_device"),
                   prior=0.3, confirm="torch.cuda.max_memory_allocated() around the load",
                   question="does it run out of memory in torch.load, with the model already on the device?")),
    # oom where each rank's budget on the other ranks' devices can be set; needs two devices of a kind
    Scenario("ddp_rank_map_location", "Two DDP ranks resume without map_location: every rank loads onto device 0",
             "002 seed (DDP note)", _accelerators("oom", mps="none", xpu="none"),
             # device 0 full, or (loaded with assign=True, or a plain tensor of the state) a rank's tensors meeting
             # the ones torch.load put on device 0: "cuda:1 and cuda:0", as its page shows
             # or, on GPUs in exclusive-process compute mode, the ranks after the first refused device 0 as busy
             clues=Clues(leans=("resumed",), kinds=("oom", "mismatch", "busy"), templates=("device0_memory",),
                   pairs=("two_accelerators",),
                   frames=("ddp", "serialization"), code=("ddp", "torch_load", "ranks"),
                   against=("map_location_cpu",),  # the lesson's first fix shown: a load mapped to the CPU
                   prior=0.2, confirm="nvidia-smi while resuming: device 0 holds a process of every rank",
                   question="is it a multi-GPU (DDP) resume, every rank loading without map_location?")),
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
