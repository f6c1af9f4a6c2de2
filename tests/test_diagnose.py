"""`samedevice diagnose` as a person uses it: the wordings it reads, what it extracts, the verdicts it
gives, its command line, and its accuracy on the real reports in tests/data (the yardstick)."""

from __future__ import annotations

import html
import json
import os
import re
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, note
from hypothesis import strategies as st
from pytest_parametrize_cases import Case, parametrize_cases

from benchmarks.bench_diagnose import HELD_OUT_PATH, ceiling, evaluate, expected_verdict, load
from samedevice import cli, diagnose, registry
from tests.strategies import pasted

WORDINGS = parametrize_cases(
    Case("codegen_with_argument", text="RuntimeError: Expected all tensors to be on the same device, but found at least "
         "two devices, cuda:0 and cpu! (when checking argument for argument index in method wrapper_CUDA__index_select)",
         template="codegen", devices=("cuda:0", "cpu"), argument="index"),
    Case("codegen_bare", text="Expected all tensors to be on the same device, but found at least two devices, mps:0 and "
         "cpu!", template="codegen", devices=("mps:0", "cpu"), argument=None),
    Case("codegen_2_8", text="RuntimeError: Expected all tensors to be on the same device, but got mat1 is on cpu, "
         "different from other tensors on cuda:0 (when checking argument in method wrapper_CUDA_addmm)",
         template="codegen_named", devices=("cpu", "cuda:0"), argument="mat1"),
    Case("wrapped_over_lines", text="E   RuntimeError: Expected all tensors to be on the same device, but found at\nE   "
         "least two devices, cuda:1 and cuda:0!", template="codegen", devices=("cuda:1", "cuda:0"), argument=None),
    Case("th_era", text="Expected object of device type cuda but got device type cpu for argument #1 'self' in call to "
         "_th_addmm", template="legacy_device_type", devices=("cuda", "cpu"), argument="self"),
    Case("pre_0_4", text="RuntimeError: expected type torch.FloatTensor but got torch.cuda.FloatTensor",
         template="legacy_type", devices=("cpu", "cuda"), argument=None),
    Case("conv_types", text="RuntimeError: Input type (torch.cuda.FloatTensor) and weight type (torch.FloatTensor) "
         "should be the same", template="input_weight", devices=("cuda", "cpu"), argument=None),
    Case("indexing", text="RuntimeError: indices should be either on cpu or on the same device as the indexed tensor (cpu)",
         template="indices", devices=("cpu",), argument=None),
    Case("apex_amp", text="RuntimeError: Found param block_one.conv.0.weight with type torch.FloatTensor, expected "
         "torch.cuda.FloatTensor.", template="apex_param", devices=("cuda", "cpu"), argument=None),
    Case("indexing_retyped", text="RuntimeError: indices should be either on the CPU or on the same device as the "
         "indexed tensor (CPU)", template="indices", devices=("cpu",), argument=None),
    Case("deserialize", text="RuntimeError: Attempting to deserialize object on a CUDA device but "
         "torch.cuda.is_available() is False.", template="deserialize", devices=("cuda",), argument=None),
    Case("rng", text="TypeError: RNG state must be a torch.ByteTensor", template="rng_state", devices=(), argument=None),
    Case("generator", text="RuntimeError: Expected a 'cuda' device type for generator but found 'cpu'",
         template="generator", devices=("cuda", "cpu"), argument=None),
    Case("meta", text="NotImplementedError: Tensor on device meta is not on the expected device cuda:0!",
         template="meta", devices=("cuda:0", "meta"), argument=None),
    # the meta tensor first in the op (`meta_activations * torch.ones(2)`): the CPU one is not on the expected device
    Case("meta_first", text="RuntimeError: Tensor on device cpu is not on the expected device meta!",
         template="meta", devices=("cpu", "meta"), argument=None),
    Case("codegen_typo", text="RuntimeError: Expected all tensors to be on the same device, but found at least two devices, cuda:0 and cpu! (when checking arugment for argument target in method wrapper_nll_loss_forward)",
         template="codegen", devices=("cuda:0", "cpu"), argument="target"),
    Case("mps_conv_types", text="RuntimeError: Input type (MPSFloatType) and weight type (torch.FloatTensor) should be the same or input should be a MKLDNN tensor",
         template="input_weight", devices=("mps", "cpu"), argument=None),
    Case("pre_0_4_with_period", text="RuntimeError: expected type torch.FloatTensor but got torch.cuda.FloatTensor.",
         template="legacy_type", devices=("cpu", "cuda"), argument=None),
    Case("mps_oom", text="RuntimeError: MPS backend out of memory (MPS allocated: 1.20 GB)", template="oom", devices=(),
         argument=None),
    Case("library_prefix", text="[rank0]: accelerate: RuntimeError: Expected all tensors to be on the same device, but "
         "found at least two devices, cuda:0 and cpu!", template="codegen", devices=("cuda:0", "cpu"), argument=None),
    Case("pre_0_4_argument_parser", text="TypeError: add_ received an invalid combination of arguments - got (int, "
         "torch.cuda.FloatTensor), but expected one of:\n * (float value)\n * (torch.FloatTensor other)\n * (float "
         "value, torch.FloatTensor other)", template="invalid_combination", devices=("cpu", "cuda"), argument="other"),
    Case("pre_0_4_typed_signature", text="TypeError: torch.index_select received an invalid combination of arguments "
         "- got (torch.cuda.FloatTensor, int, torch.LongTensor), but expected (torch.cuda.FloatTensor source, int dim, "
         "torch.cuda.LongTensor index)", template="invalid_signature", devices=("cuda", "cpu"), argument="index"),
    Case("pre_0_4_typed_signatures", text="TypeError: torch.mm received an invalid combination of arguments - got "
         "(torch.FloatTensor, torch.cuda.FloatTensor), but expected one of:\n * (torch.FloatTensor source, "
         "torch.FloatTensor mat2)\n * (torch.SparseFloatTensor source, torch.FloatTensor mat2)",
         template="invalid_signature", devices=("cpu", "cuda"), argument="mat2"),
    Case("aten_type_names", text="RuntimeError: Input type (CUDAFloatTensor) and weight type (CPUFloatTensor) should "
         "be the same", template="input_weight", devices=("cuda", "cpu"), argument=None),
    Case("mps_placeholder", text="RuntimeError: Placeholder storage has not been allocated on MPS device!",
         template="mps_placeholder", devices=("mps", "cpu"), argument=None),
    Case("diffusers_generator", text="ValueError: Cannot generate a cpu tensor from a generator of type cuda.",
         template="diffusers_generator", devices=("cpu", "cuda"), argument=None),
    Case("mps_argument", text="RuntimeError: Tensor for argument input is on cpu but expected on mps",
         template="mps_argument", devices=("mps", "cpu"), argument="input"),
    Case("th_expected_tensor", text="RuntimeError: expected CPU tensor (got CUDA tensor)",
         template="th_expected_tensor", devices=("cpu", "cuda"), argument=None),
    Case("extension_check", text="    output = scc_cuda.forward(input, weights, output, overlap)[0]\nRuntimeError: "
         "weights must be a CUDA tensor", template="extension_cuda", devices=("cuda", "cpu"), argument="weights"),
    Case("extension_check_without_article", text="RuntimeError: src must be CUDA tensor", template="extension_cuda",
         devices=("cuda", "cpu"), argument="src"),
    Case("extension_cpu_kernel", text='RuntimeError: mat.device().is_cpu() INTERNAL ASSERT FAILED at "csrc/cpu/'
         'spmm_cpu.cpp":14, please report a bug to PyTorch. mat must be CPU tensor', template="extension_cpu",
         devices=("cpu", "cuda"), argument="mat"),
    Case("extension_not_on_gpu", text="RuntimeError: b_q_weight is not on GPU", template="extension_cuda",
         devices=("cuda", "cpu"), argument="b_q_weight"),
    Case("library_same_gpu", text="TypeError: Input and filter must be on the same GPU", template="same_device",
         devices=(), argument=None),
    Case("library_same_devices", text="ValueError: Point clouds must be on the same devices. Device Dr1: cuda:0 and "
         "device Dr2: cpu", template="same_device", devices=(), argument=None),
    Case("xla_input_without_type", text="RuntimeError: Input tensor is not an XLA tensor", template="xla_input",
         devices=("xla", "cpu"), argument=None),
    Case("directml_unbox", text='RuntimeError: tensor.device().type() == at::DeviceType::PrivateUse1 INTERNAL ASSERT '
         'FAILED at "torch_directml/csrc/dml/DMLTensor.cpp":30, please report a bug to PyTorch. unbox expects Dml '
         "at::Tensor as inputs", template="dml_input", devices=("privateuseone", "cpu"), argument=None),
    Case("dgl_feature_fetch", text="ValueError: Got indices on device cuda:0 whereas the feature tensor is on cpu. "
         "Please either (1) move the graph to GPU with to() method, or (2) pin the graph with pin_memory_() method.",
         template="dgl_fetch", devices=("cuda:0", "cpu"), argument=None),
    Case("th_cut_at_the_end", text="RuntimeError: Expected object of device type cuda but got device type",
         template="legacy_device_type", devices=("cuda",), argument=None),
    Case("variable_wrapped_types", text="RuntimeError: Expected object of type Variable[torch.LongTensor] but found "
         "type Variable[torch.cuda.LongTensor] for argument #1 'other'", template="legacy_type", devices=("cpu", "cuda"),
         argument="other"),
    Case("device_pair", text="RuntimeError: Expect q/k/v and block_mask to be on the same device but got cpu and cuda:0.",
         template="device_pair", devices=("cpu", "cuda:0"), argument=None),
    Case("sparse_backend", text="RuntimeError: Expected object of backend CPU but got backend SparseCUDA for argument "
         "#1 'self'", template="legacy_backend", devices=("cpu", "cuda"), argument="self"),
    Case("thc_two_gpus", text="RuntimeError: arguments are located on different GPUs at /pytorch/torch/lib/THC/generic/"
         "THCTensorMathPointwise.cu:533", template="different_gpus", devices=("cuda:0", "cuda:1"), argument=None),
    Case("cpu_only_build", text="AssertionError: Torch not compiled with CUDA enabled", template="not_compiled",
         devices=(), argument=None),
    Case("tensor_utils_same_gpu", text="RuntimeError: Tensor for argument #1 'input' is on CPU, Tensor for argument #2 "
         "'weight' is on CPU, but expected them to be on GPU (while checking arguments for cudnn_convolution)",
         template="same_gpu", devices=("cuda", "cpu"), argument="input"),
    Case("tensor_utils_gpu_index", text="RuntimeError: Expected tensor for argument #1 'input' to have the same device "
         "as tensor for argument #2 'weight'; but device 1 does not equal 0 (while checking arguments for "
         "cudnn_convolution)", template="same_gpu_index", devices=("cuda:1", "cuda:0"), argument="input"),
    Case("tensor_utils_device_type", text="RuntimeError: Expected tensor for argument #1 'indices' to have cuda "
         "DeviceType, but got tensor with cpu DeviceType (while checking arguments for embedding_backward)",
         template="device_type", devices=("cuda", "cpu"), argument="indices"),
    Case("tensor_utils_out", text="RuntimeError: Tensor for 'out' is on CPU, Tensor for argument #1 'self' is on CPU, "
         "but expected them to be on GPU (while checking arguments for addmm)", template="same_gpu",
         devices=("cuda", "cpu"), argument="out"),
    Case("numpy_before_1_5", text="TypeError: can't convert CUDA tensor to numpy. Use Tensor.cpu() to copy the tensor "
         "to host memory first.", template="numpy", devices=("cuda",), argument=None),
    Case("no_comma", text="RuntimeError: Expected all tensors to be on the same device but found at least two "
         "devices, cuda:0 and cuda:2!", template="codegen", devices=("cuda:0", "cuda:2"), argument=None),
    Case("thc_indexing", text="RuntimeError: Input, output and indices must be on the current device",
         template="thc_current_device", devices=(), argument=None),
    Case("set_storage", text='RuntimeError: Attempted to set the storage of a tensor on device "cuda:1" to a storage '
         'on different device "cuda:0".  This is no longer allowed; the devices must match.', template="set_storage",
         devices=("cuda:1", "cuda:0"), argument=None),
    Case("deserialize_second_sentence", text="If you are running on a CPU-only machine, please use torch.load with "
         "map_location=torch.device('cpu') to map your storages to the CPU.", template="deserialize", devices=(),
         argument=None),
    Case("binary_op", text="RuntimeError: binary_op(): expected both inputs to be on same device, but input a is on "
         "cuda:1 and input b is on cuda:0", template="binary_op", devices=("cuda:1", "cuda:0"), argument=None),
    Case("dgl_graph", text='dgl._ffi.base.DGLError: Cannot assign node feature "h" on device cuda:0 to a graph on '
         "device cpu. Call DGLGraph.to() to copy the graph to the same device.", template="dgl_graph",
         devices=("cuda:0", "cpu"), argument=None),
    Case("check_backend", text="RuntimeError: Expected tensor to have CPU Backend, but got tensor with CUDA Backend "
         "(while checking arguments for cudnn_ctc_loss)", template="device_type", devices=("cpu", "cuda"),
         argument=None),
    Case("conv_types_cut", text="RuntimeError: Input type (torch.cuda.FloatTensor) and weight type (torch.FloatTensor) "
         "should be the sam", template="input_weight", devices=("cuda", "cpu"), argument=None),
    Case("conv_types_cut_first", text="nput type (torch.cuda.FloatTensor) and weight type (torch.FloatTensor) should be "
         "the same", template="input_weight", devices=("cuda", "cpu"), argument=None),
    Case("codegen_2_8_cut", text="mat2 is on cpu, different from other tensors on cuda:0", template="codegen_named",
         devices=("cpu", "cuda:0"), argument="mat2"),
    Case("expected_device_dtype", text="RuntimeError: expected device cuda:0 and dtype Float but got device cpu and "
         "dtype Float", template="expected_device", devices=("cuda:0", "cpu"), argument=None),
    Case("unknown_location", text="RuntimeError: don't know how to restore data location of "
         "torch.storage.UntypedStorage (tagged with mps:0)", template="unknown_location", devices=("mps",),
         argument=None),
    Case("output_desired", text="RuntimeError: output with device cuda:0 and dtype Float doesn't match the desired "
         "device cpu and dtype Float", template="output_desired", devices=("cuda:0", "cpu"), argument=None),
    Case("dataparallel_cpu", text="TypeError: Broadcast function not implemented for CPU tensors",
         template="dataparallel_cpu", devices=("cuda", "cpu"), argument=None),
    Case("codegen_2_8_tensors", text="RuntimeError: Expected all tensors to be on the same device, but got tensors on "
         "cuda:0, different from other tensors on cpu", template="codegen_named", devices=("cuda:0", "cpu"),
         argument="tensors"),
    Case("named_pair", text="RuntimeError: stft input and window must be on the same device but got self on cuda:0 "
         "and window on cpu", template="named_pair", devices=("cuda:0", "cpu"), argument="window"),
    Case("cpu_scalars", text="RuntimeError: Trying to pass too many CPU scalars to CUDA kernel!",
         template="cpu_scalars", devices=("cuda", "cpu"), argument=None),
    Case("broadcast_devices", text="RuntimeError: All tensors must be on devices[0]: 0", template="broadcast_devices",
         devices=(), argument=None),
    Case("fsdp_compute", text="AssertionError: Expects tensor to be on the compute device cuda:1, was on cuda:0",
         template="fsdp_compute", devices=("cuda:1", "cuda:0"), argument=None),
    Case("fsdp_compute_2_0", text="AssertionError: Expects tensor to be on the compute device cuda:1",
         template="fsdp_compute", devices=("cuda:1",), argument=None),
    Case("foreach_scalars", text="RuntimeError: Expected scalars to be on CPU, got cuda:0 instead.",
         template="foreach_scalars", devices=("cuda:0",), argument=None),
    Case("triton_pointer", text="ValueError: Pointer argument (at 1) cannot be accessed from Triton (cpu tensor?)",
         template="triton_pointer", devices=(), argument=None),
    Case("rnn_parameters", text="RuntimeError: Input and parameter tensors are not at the same device, found input "
         "tensor at cuda:0 and parameter tensor at cpu", template="rnn_parameters", devices=("cuda:0", "cpu"),
         argument=None),
    Case("same_gpu_mps", text="RuntimeError: Tensor for argument #2 'mat2' is on CPU, but expected it to be on MPS "
         "(while checking arguments for mm)", template="same_gpu", devices=("mps", "cpu"), argument="mat2"),
    Case("thnn_criterion", text="TypeError: CudaBCECriterion_updateOutput received an invalid combination of arguments "
         "- got (int, torch.cuda.FloatTensor, torch.cuda.FloatTensor, torch.cuda.FloatTensor, bool, torch.FloatTensor)",
         template="thnn_cpu_argument", devices=("cuda", "cpu"), argument=None),
)


@WORDINGS
def test_each_wording_is_read(text: str, template: str, devices: tuple[str, ...], argument: str | None) -> None:
    """Every wording PyTorch has used is read into its template, the devices it names and the argument."""
    facts = diagnose.read(text)
    assert (facts.template, facts.devices, facts.argument) == (template, devices, argument)


OPTIMIZER_TRACEBACK = """Traceback (most recent call last):
  File "train.py", line 88, in <module>
    optimizer.step()
  File "/usr/lib/python3.11/site-packages/torch/optim/optimizer.py", line 493, in wrapper
    out = func(*args, **kwargs)
  File "/usr/lib/python3.11/site-packages/torch/optim/sgd.py", line 125, in step
    sgd(params, d_p_list, momentum_buffer_list)
RuntimeError: Expected all tensors to be on the same device, but found at least two devices, cuda:0 and cpu!
"""
RESUME_CODE = """model = Net()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
ckpt = torch.load("last.pt")
model.load_state_dict(ckpt["model"])
optimizer.load_state_dict(ckpt["optimizer"])
model.to(device)
"""


def test_a_traceback_and_its_code_name_the_scenario_and_say_why() -> None:
    """A traceback through SGD's step, with code that loads before it moves, names sgd_momentum first,
    with the frame and the code among its reasons, the check that confirms it and the fix; wrong_load_order
    (the same mechanism, taught as the table of orders) is named beside it."""
    result = diagnose.diagnose(OPTIMIZER_TRACEBACK, RESUME_CODE)
    assert [m.slug for m in result.matches[:2]] == ["sgd_momentum", "wrong_load_order"]
    top = result.matches[0]
    assert top.slug == "sgd_momentum"
    assert "the traceback passes through sgd step" in top.why
    assert "the code: a state dict is loaded before the model is moved" in top.why
    assert top.confirm.startswith("audit.misplaced(")
    assert top.fix == "samedevice show sgd_momentum"


def test_every_signal_of_the_code_is_given_in_words() -> None:
    """A reason reads as words ("the model is traced or exported"), never as a signal's name ("jit_trace"): every
    signal the code is read for (the text rules, the ast rules' names) and every one a scenario claims, leans to or
    counts against has its words; a lean that is a frame reads as the frame it passes through."""
    source = Path(diagnose.__file__).read_text()
    produced = set(diagnose.SIGNALS) | set(re.findall(r'(?:found|signals)\.append\("(\w+)"\)', source)) \
        | set(re.findall(r'return \["(\w+)"\]', source))
    claimed = {signal for s in registry.SCENARIOS for signal in (*s.clues.code, *s.clues.against)} \
        | {lean for s in registry.SCENARIOS for lean in s.clues.leans if lean not in diagnose.FRAMES}
    assert {"jit_trace", "plain_tensor_attr", "load_before_move"} <= produced | claimed  # the scan reads them
    assert sorted((produced | claimed) - set(diagnose.CODE_WHY) - set(diagnose.FRAMES)) == []
    traced = diagnose.diagnose("RuntimeError: Expected all tensors to be on the same device, but found at least two "
                               "devices, cuda:0 and cpu!", "traced = torch.jit.trace(model, example)\n")
    assert traced.matches[0].slug == "traced_device_constant"
    assert "the code: the model is traced or exported (torch.jit.trace, torch.export, torch.onnx.export)" \
        in traced.matches[0].why


def test_a_run_resumed_from_a_checkpoint_leans_to_the_resume_lessons_and_names_none_alone() -> None:
    """A resume the paste shows (a flag given, a keyword given a path, a load of the resume path, the reporter's
    words) orders the optimizer's state lessons first: a bare message still names no lesson alone. It is what the
    paste says of the run, not code shown: it does not stop the advice to paste the traceback."""
    message = ("RuntimeError: Expected all tensors to be on the same device, but found at least two devices, cuda:0 "
               "and cpu!")
    for paste in ("$ python train.py --resume runs/last.pth\n" + message, "Training resumed from epoch 12.\n" + message,
                  "$ python TTS/bin/train.py --continue_path ../checkpoints/run-1/\n" + message):
        result = diagnose.diagnose(paste)
        assert result.facts.run == ("resumed",)
        assert result.facts.code == ()
        assert result.verdict == "ambiguous"
        assert [m.slug for m in result.matches] == ["sgd_momentum", "adam_exp_avg", "wrong_load_order"]
        assert "leaning to it: the run resumed from a checkpoint" in result.matches[0].why
        assert "paste the whole traceback" in result.note
        assert "the paste says: the run resumed from a checkpoint" in diagnose.render(result)
    for code in ('trainer.train(resume_from_checkpoint="ckpt/checkpoint-500")\n',
                 "checkpoint = torch.load(args.resume, map_location='cpu')\n",
                 "resume_dict = torch.load(self.configer.get('network', 'resume'), map_location='cpu')\n"):
        assert diagnose.read(message, code).run == ("resumed",)
    assert diagnose.diagnose(message).matches[0].slug == "factory_in_forward"


@pytest.mark.parametrize("paste", [
    "train: weights=yolov5s.pt, rect=False, resume=False, nosave=False, device=0",  # YOLOv5's arguments at each start
    "    train_result = trainer.train(resume_from_checkpoint=checkpoint)",  # every run of Hugging Face's scripts
    "resume_from_checkpoint=None,", "python train.py --no-resume", "python train.py --resume False", "if not resume:",
    'wandb.init(resume="allow")',
    '  File "/x/site-packages/torch/_dynamo/resume_execution.py", line 9, in f', "presumed on the GPU",
])
def test_a_resume_turned_off_or_not_taken_is_no_resume(paste: str) -> None:
    """A flag or keyword turned off or left empty, a keyword given a variable (taken on every run), wandb's resume
    of a logging run, torch's own file: none shows a run resumed from a checkpoint, and a bare message keeps its
    candidates."""
    message = ("RuntimeError: Expected all tensors to be on the same device, but found at least two devices, cuda:0 "
               "and cpu!")
    result = diagnose.diagnose(paste + "\n" + message)
    assert result.facts.run == ()
    assert result.matches[0].slug == "factory_in_forward"


@pytest.mark.parametrize("argument", ["mat1 in method wrapper_addmm", "index in method wrapper__index_select"])
def test_a_resume_does_not_pull_a_fused_optimizer_s_step_into_a_layer_s_message(argument: str) -> None:
    """The input's side on the CPU in a layer's op: a resume orders no optimizer lesson into it."""
    result = diagnose.diagnose("$ python train.py --resume last.pth\nRuntimeError: Expected all tensors to be on the "
                               "same device, but found at least two devices, cuda:0 and cpu! (when checking argument "
                               f"for argument {argument})")
    assert result.facts.side == "input"
    assert not {"capturable_step", "sgd_momentum", "adam_exp_avg"} & {m.slug for m in result.matches}


@pytest.mark.parametrize(("argument", "side", "asks"), [
    ("mat2 in method wrapper_mm", "the model's side", "which of the model's tensors is on the CPU"),
    ("mat1 in method wrapper_addmm", "the input's side", "where was the input on the CPU made"),
])
def test_a_message_that_names_the_side_on_the_cpu_asks_within_it(argument: str, side: str, asks: str) -> None:
    """Where the message names the side on the CPU (an argument of a layer's op), the facts say it and the question
    asks which tensor of that side, not which side."""
    result = diagnose.diagnose("RuntimeError: Expected all tensors to be on the same device, but found at least two "
                               f"devices, cuda:0 and cpu! (when checking argument for argument {argument})")
    assert result.verdict == "ambiguous"
    assert asks in result.note
    assert f"\n  on the CPU: {side}" in diagnose.render(result)
    bare = diagnose.diagnose("RuntimeError: Expected all tensors to be on the same device, but found at least two "
                             "devices, cuda:0 and cpu!")
    assert "which tensor is on the CPU: the batch, the model's weights" in bare.note
    assert "\n  on the CPU:" not in diagnose.render(bare)


def test_a_bare_message_that_fits_several_says_so_and_asks() -> None:
    """A message alone that several scenarios produce is ambiguous, with the question that tells them apart."""
    result = diagnose.diagnose("Expected all tensors to be on the same device, but found at least two devices, "
                               "cuda:0 and cpu!")
    assert result.verdict == "ambiguous"
    assert len(result.matches) == 3
    assert "what tells them apart" in result.note
    assert "paste the whole traceback" in result.note  # nothing but the message: the frames would decide


def test_diffusers_latents_on_the_pipeline_s_cpu_are_its_weights_left_there_or_offloaded() -> None:
    """diffusers makes the latents on the pipeline's device, its weights': the CPU there with a CUDA generator is a
    pipeline never moved, or one offloaded, whose weights rest on the CPU (the code that offloads tells)."""
    text = "ValueError: Cannot generate a cpu tensor from a generator of type cuda."
    assert [m.slug for m in diagnose.diagnose(text).matches][:1] == ["model_not_moved"]
    offloaded = diagnose.diagnose(text, "pipe.enable_model_cpu_offload()\nimage = pipe(prompt, generator=g)\n")
    assert offloaded.verdict == "scenario"
    assert offloaded.matches[0].slug == "offload_device_read"


@pytest.mark.parametrize("text", [
    # a log's warning that a part is not on the GPU is no kernel's check: the error after it is read
    "[Tiled VAE] warn: VAE is not on GPU, check 'Move VAE to GPU' if possible.\nRuntimeError: \"addmm_impl_cpu_\" "
    "not implemented for 'Half'",
    # an XLA tensor of a type XLA's op does not take is no CPU tensor
    "RuntimeError: Check failed: xtensor: Input tensor is not an XLA tensor: XLAComplexFloatType",
    # a library that asks for CPU tensors by design
    "ValueError: q, k, and v must be CPU tensors",
])
def test_what_only_looks_like_a_kernel_s_device_check_is_not_read_as_one(text: str) -> None:
    assert diagnose.read(text).template not in ("extension_cuda", "extension_cpu", "xla_input")


def test_an_extension_s_check_names_the_side_by_its_argument() -> None:
    """A CUDA extension's CHECK_CUDA names the argument it found on the CPU: its weight is the module's, left there
    with the model. Its input, an activation inside the model, tells no side, nor does another name."""
    weights = diagnose.diagnose("RuntimeError: weights must be a CUDA tensor")
    assert weights.facts.side == "weights"
    assert weights.matches[0].slug == "model_not_moved"
    assert diagnose.diagnose("RuntimeError: bias must be a CUDA tensor").facts.side == "weights"
    # the extension's parameter is its own name: `weight` is no loss's argument, `index` no embedding's
    assert diagnose.diagnose("RuntimeError: weight must be a CUDA tensor").matches[0].slug == "model_not_moved"
    for text in ("RuntimeError: index must be CPU tensor", "RuntimeError: weight must be CPU tensor"):
        ranked = [m.slug for m in diagnose.diagnose(text).matches]
        assert not {"tokenizer_outputs", "loss_class_weights"} & set(ranked), ranked
    for name in ("input", "overlap"):
        assert diagnose.diagnose(f"RuntimeError: {name} must be a CUDA tensor").facts.side is None


def test_a_negative_device_index_is_no_lesson_and_says_where_minus_one_comes_from() -> None:
    """-1 is a CPU tensor's get_device() and an unlaunched script's local_rank: given as a device index, PyTorch
    refuses it (checked by running torch, below). No lesson teaches it; the answer says both sources."""
    import torch

    with pytest.raises(RuntimeError, match="Device index must not be negative") as raised:
        torch.zeros(1).to(torch.zeros(1).get_device())
    result = diagnose.diagnose(f"RuntimeError: {raised.value}")
    assert (result.verdict, result.matches) == ("not_in_catalog", ())
    assert "get_device()" in result.note
    assert "local_rank" in result.note


def test_torchmetrics_words_for_a_metric_s_mismatch_name_the_metric_first() -> None:
    """torchmetrics raises its own message from PyTorch's mismatch in a metric's update (checked by running it,
    below): the metric not moved first; a tensor its update makes without device= gets the same message, so the
    factory's lesson stays a candidate."""
    import torch
    import torchmetrics

    from samedevice import emulator

    device = emulator.device()
    with pytest.raises(RuntimeError, match="Encountered different devices in metric calculation") as raised:
        torchmetrics.MeanSquaredError().update(torch.ones(2, device=device), torch.ones(2, device=device))
    result = diagnose.diagnose(f"RuntimeError: {raised.value}")
    assert result.facts.template == "metric_devices"
    assert [m.slug for m in result.matches][:2] == ["metric_not_moved", "factory_in_forward"]


METRIC_CODE = {
    # built and run in a step: never a child of the module that is moved
    "in a step": ("from torchmetrics.classification import F1Score\n"
                  "def validation_step(self, batch, batch_idx):\n    x, y = batch\n    preds = self(x).argmax(1)\n"
                  "    return F1Score(task='binary')(preds, y)\n", "metric_never_moved"),
    "a name never moved": ("import torch, torchmetrics\npsnr = torchmetrics.PeakSignalNoiseRatio()\n"
                           "print(psnr(torch.rand(3).cuda(), torch.rand(3).cuda()))\n", "metric_never_moved"),
    "a doctest's": ("        >>> from torchmetrics import PearsonCorrCoef\n        >>> p = PearsonCorrCoef()\n"
                    "        >>> p(preds.to('cuda'), target.to('cuda'))\n", "metric_never_moved"),
    "moved at once": ("from torchmetrics import Accuracy\nacc = Accuracy(task='binary').to(device)\n", "metric_moved"),
    "its name moved": ("import torchmetrics as tm\nacc = tm.Accuracy(task='binary')\nacc.to(device)\n", "metric_moved"),
}


@pytest.mark.parametrize("name", list(METRIC_CODE))
def test_a_metric_never_moved_is_read_from_the_code(name: str) -> None:
    code, signal = METRIC_CODE[name]
    assert signal in diagnose.read("", code).code
    other = {"metric_never_moved": "metric_moved", "metric_moved": "metric_never_moved"}[signal]
    assert other not in diagnose.read("", code).code
    if signal == "metric_never_moved":
        result = diagnose.diagnose(MISMATCH, code)
        assert (result.verdict, result.matches[0].slug) == ("scenario", "metric_not_moved")


def test_a_metric_kept_as_an_attribute_or_a_function_of_torchmetrics_is_no_metric_left_behind() -> None:
    """A metric set as an attribute in __init__ moves with its module; torchmetrics' functions keep no state; and a
    metric never moved is not a model never moved."""
    attribute = ("import torchmetrics\nclass Model(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
                 "        self.acc = torchmetrics.Accuracy(task='binary')\n")
    functional = "from torchmetrics.functional import accuracy\nacc = accuracy(preds.cuda(), y.cuda(), task='binary')\n"
    for code in (attribute, functional):
        assert not {"metric_never_moved", "metric_moved"} & set(diagnose.read("", code).code)
    unmoved = ("import torch\nfrom torchmetrics import PeakSignalNoiseRatio\npsnr = PeakSignalNoiseRatio()\n"
               "print(psnr(torch.rand(3).cuda(), torch.rand(3).cuda()))\n")
    assert "model_never_moved" not in diagnose.read("", unmoved).code
    # built in a local name and handed on: to an attribute (a clone of it too) or to a module, which moves it
    handed_on = [
        "from torchmetrics import MetricCollection\nfrom torchmetrics.classification import MulticlassAccuracy\n"
        "class M(L.LightningModule):\n    def __init__(self, n):\n        super().__init__()\n"
        "        metrics = MetricCollection([MulticlassAccuracy(n)])\n"
        "        self.train_metrics = metrics.clone(prefix='train_')\n",
        "from torchmetrics import Accuracy\nacc = Accuracy(task='binary')\nself.acc = acc\n",
        "from torchmetrics import Accuracy\nmetric = Accuracy(task='binary')\nmodel = LitModel(metric=metric)\n"]
    for code in handed_on:
        assert not {"metric_never_moved", "metric_moved"} & set(diagnose.read("", code).code), code
    # a metric's move is not the model's: the model never moved is still read
    both = ("from torchmetrics import Accuracy\nmodel = Net()\nmetric = Accuracy(task='binary').to(device)\n"
            "out = model(x.to(device))\n")
    assert {"metric_moved", "model_never_moved"} <= set(diagnose.read("", both).code)


PICKED = {
    "cuda() on what it makes": ("class N(nn.Module):\n    def forward(self, x):\n"
                                "        return x * torch.ones(x.shape[1]).cuda()\n"),
    "a device written in": ("class N(nn.Module):\n    def forward(self, x):\n"
                            "        return x + torch.zeros(3, device='cuda:1')\n"),
    "a module-level DEVICE": ("DEVICE = torch.device('cuda' if torch.cuda.is_available() else 'cpu')\n"
                              "class N(nn.Module):\n    def forward(self, x):\n"
                              "        return x + torch.arange(3, device=DEVICE)\n"),
    "a typed constructor": ("class N(nn.Module):\n    def forward(self, x):\n"
                            "        return x + torch.cuda.FloatTensor(3)\n"),
    "a module's own pick": ("class N(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
                            "        self.device = torch.device('cuda' if torch.cuda.is_available() else 'cpu')\n"
                            "    def forward(self, x):\n        return x + torch.ones(3, device=self.device)\n"),
    "a cast to a CUDA type": ("class N(nn.Module):\n    def forward(self, x):\n"
                              "        return x + torch.zeros(3).float().type(torch.cuda.FloatTensor)\n"),
    "to a picked device": ("class N(nn.Module):\n    def forward(self, x):\n"
                           "        d = 'cuda' if torch.cuda.is_available() else 'cpu'\n"
                           "        return x + torch.ones(3).to(d)\n"),
}


@pytest.mark.parametrize("name", list(PICKED))
def test_a_forward_that_names_its_device_is_read(name: str) -> None:
    """A forward that makes a tensor on a device the code names (not its input's) names hardcoded_device alone with
    the bare mismatch; a factory moved as it is made is no factory left on the CPU, and what a forward makes on
    the device is no input a script moved."""
    code = PICKED[name]
    signals = diagnose.read("", code).code
    assert "device_picked" in signals
    assert not {"factory_in_forward", "model_never_moved"} & set(signals)
    result = diagnose.diagnose(MISMATCH, code)
    assert (result.verdict, result.matches[0].slug) == ("scenario", "hardcoded_device")


def test_a_forward_that_follows_its_input_names_no_device() -> None:
    followed = ("class N(nn.Module):\n    def forward(self, x):\n"
                "        return x + torch.arange(3, device=x.device) + torch.ones(3).to(x.device)\n")
    assert "device_picked" not in diagnose.read("", followed).code
    script = "model = Net().cuda()\nout = model(x.cuda())\n"  # a script's moves are no forward's pick
    assert "device_picked" not in diagnose.read("", script).code
    pick = "device = torch.device('cuda' if torch.cuda.is_available() else 'cpu')\n"
    not_picked = {
        # the tutorial's script: the model and its inputs are moved to the pick the forward reads
        "followed": pick + ("class Net(nn.Module):\n    def forward(self, x):\n"
                            "        return self.gru(x, torch.zeros(1, x.size(0), 8, device=device))\n"
                            "model = Net().to(device)\nout = model(x.to(device))\n"),
        "rebound in forward": pick + ("class N(nn.Module):\n    def forward(self, x):\n        device = x.device\n"
                                      "        return torch.ones(3, device=device)\n"),
        "forward's parameter": pick + ("class N(nn.Module):\n    def forward(self, x, device):\n"
                                       "        return torch.ones(3, device=device)\n"),
        "cuda(x.device)": "class N(nn.Module):\n    def forward(self, x):\n        return torch.ones(3).cuda(x.device)\n",
        "an attribute given": ("class N(nn.Module):\n    def __init__(self, device):\n        super().__init__()\n"
                               "        self.device = device\n    def forward(self, x):\n"
                               "        return x + torch.ones(3, device=self.device)\n"),
    }
    for name, code in not_picked.items():
        assert not {"device_picked", "factory_in_forward"} & set(diagnose.read("", code).code), name
    unparsable = "    def forward(self, x):\n        m = torch.ones(3).cuda()\n    return x *\n"
    assert "device_picked" in diagnose.read("", unparsable).code  # the text's reading of a forward


def test_a_device_used_in_a_forked_worker_names_its_lesson() -> None:
    """The refusal names device_in_dataloader_worker alone, in CUDA's words and the emulator's; the older "CUDA
    error: initialization error" names it with the driver's caveat, unless a worker's frame or num_workers shows."""
    for backend in ("CUDA", "emulated"):
        result = diagnose.diagnose(f"RuntimeError: Cannot re-initialize {backend} in forked subprocess. To use "
                                   f"{backend} with multiprocessing, you must use the 'spawn' start method")
        assert (result.verdict, [m.slug for m in result.matches]) == ("scenario", ["device_in_dataloader_worker"])
    old = "RuntimeError: CUDA error: initialization error"
    bare = diagnose.diagnose(old)
    assert [m.slug for m in bare.matches] == ["device_in_dataloader_worker"]
    assert "Outside a fork it is the driver" in bare.note
    worker = ("RuntimeError: Caught RuntimeError in DataLoader worker process 0.\nOriginal Traceback (most recent "
              'call last):\n  File "/venv/lib/python3.11/site-packages/torch/utils/data/_utils/worker.py", line 308, '
              "in _worker_loop\n    data = fetcher.fetch(index)\n" + old)
    for shown in (diagnose.diagnose(worker), diagnose.diagnose(old, "loader = DataLoader(ds, num_workers=4)")):
        assert [m.slug for m in shown.matches] == ["device_in_dataloader_worker"]
        assert "driver" not in shown.note
    assert "dataloader_worker" not in diagnose.read("", "loader = DataLoader(ds, num_workers=0)").code


def test_an_ellipsis_body_is_no_prompt() -> None:
    """In a paste with a shell escape or a prompt, a body of `...` (Ellipsis) is code, not a continuation prompt:
    the code still parses and what it shows is read."""
    code = ("!pip install torchmetrics\nimport torch\nfrom torchmetrics import Accuracy\n"
            "class Base(torch.nn.Module):\n    def forward(self, x):\n        ...\n\n"
            "acc = Accuracy(task='binary')\nacc(p.cuda(), y.cuda())\n")
    assert "metric_never_moved" in diagnose.read("", code).code
    assert "metric_never_moved" in diagnose.read("", code.replace("!pip", "%pip")).code


def test_cuda_rng_states_of_more_gpus_than_the_host_has_name_their_lesson() -> None:
    """torch.cuda.set_rng_state_all restores each saved state onto the generator of its index: a checkpoint from
    more GPUs than this host has asks for one it lacks (rng_state_device_count). An IndexError elsewhere is not
    this."""
    text = ('  File "/venv/lib/python3.10/site-packages/torch/cuda/random.py", line 72, in cb\n'
            "    default_generator = torch.cuda.default_generators[idx]\n"
            "                        ~~~~~~~~~~~~~~~~~~~~~~~~~~~~^^^^^\n"
            "IndexError: tuple index out of range")
    result = diagnose.diagnose(text)
    assert (result.facts.template, result.verdict) == ("rng_devices", "scenario")
    assert [m.slug for m in result.matches] == ["rng_state_device_count"]
    assert diagnose.read('  File "train.py", line 3, in <module>\n    x = sizes[idx]\nIndexError: tuple index out '
                         "of range").template is None
    # as IPython prints it (lines between the code and the error), and as torch.cuda's lazy call wraps it
    ipython = ("/venv/lib/python3.10/site-packages/torch/cuda/random.py in cb()\n     72         default_generator = "
               "torch.cuda.default_generators[idx]\n     73         default_generator.set_state(new_state)\n\n"
               "IndexError: tuple index out of range")
    lazy = ("torch.cuda.DeferredCudaCallError: CUDA call failed lazily at initialization with error: tuple index out "
            "of range")
    # and through another backend's set_rng_state_all (torch.xpu's, the emulator's), which ends in the IndexError
    emulated = ('  File "train.py", line 40, in resume\n    torch.emulated.set_rng_state_all(states)\n'
                '  File "/venv/lib/python3.12/site-packages/samedevice/emulator/rng.py", line 63, in '
                "set_rng_state_all\n    set_rng_state(state, i)\n"
                '  File "/venv/lib/python3.12/site-packages/samedevice/emulator/rng.py", line 44, in _generator\n'
                '    raise IndexError("tuple index out of range")\nIndexError: tuple index out of range')
    for other in (ipython, lazy, emulated):
        assert [m.slug for m in diagnose.diagnose(other).matches][:1] == ["rng_state_device_count"]
        assert diagnose.read(other).template == "rng_devices"
    elsewhere = ('  File "train.py", line 3, in <module>\n    torch.cuda.set_rng_state_all(states)\n'
                 '  File "train.py", line 9, in <module>\n    x = sizes[idx]\nIndexError: tuple index out of range')
    assert diagnose.read(elsewhere).template is None  # raised in the user's line, not in set_rng_state_all's frame
    # nor an IndexError of a later traceback, after set_rng_state_all failed otherwise (a log of both)
    later = ('  File "/venv/lib/python3.12/site-packages/torch/cuda/random.py", line 85, in set_rng_state_all\n'
             "    set_rng_state(state, i)\nAttributeError: 'NoneType' object has no attribute 'clone'\n"
             'Traceback (most recent call last):\n  File "train.py", line 9, in <module>\n    h = x.shape[2]\n'
             "IndexError: tuple index out of range")
    assert diagnose.read(later).template is None


def test_a_frame_the_traceback_shows_is_not_asked_about_again() -> None:
    """Where the traceback shows the optimizer's step (or the loss), asking whether it raised there says nothing new:
    the question left is the order of the resume (or which of the loss's tensors)."""
    message = ("RuntimeError: Expected all tensors to be on the same device, but found at least two devices, cuda:0 "
               "and cpu!")
    frame = ('  File "/env/lib/python3.10/site-packages/torch/optim/sgd.py", line 75, in step\n'
             "    sgd(params_with_grad,\n")
    shown = diagnose.diagnose(frame + message)
    assert shown.verdict == "ambiguous"
    assert shown.matches[0].slug == "sgd_momentum"
    assert registry.STEP_ORDER_QUESTION in shown.note
    assert registry.STEP_QUESTION not in shown.note
    unshown = diagnose.diagnose(message, "opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)\n")
    assert unshown.matches[0].slug == "sgd_momentum"
    assert registry.STEP_QUESTION in unshown.note  # the code shows the optimizer, not where it raised
    loss = diagnose.diagnose('  File "/env/lib/python3.10/site-packages/torch/nn/modules/loss.py", line 1174, in '
                             "forward\n    return F.cross_entropy(input, target, weight=self.weight,\n" + message)
    assert loss.matches[0].slug == "loss_class_weights"
    assert registry.LOSS_PART_QUESTION in loss.note
    assert registry.LOSS_QUESTION not in loss.note
    # a frame read from a call line, not the frame that raised (a scheduler's step, a loop pasted above): still asked
    scheduler = diagnose.diagnose('  File "train.py", line 80, in <module>\n    scheduler.step()\n  File "/env/lib/'
                                  'python3.10/site-packages/torch/optim/lr_scheduler.py", line 150, in step\n'
                                  "    values = self.get_lr()\n" + message)
    assert "optimizer_step" in scheduler.facts.frames
    assert registry.STEP_ORDER_QUESTION not in scheduler.note


LOOP_MESSAGE = "RuntimeError: Expected all tensors to be on the same device, but found at least two devices, cuda:0 and cpu!"


@pytest.mark.parametrize(("code", "first", "moved"), [
    # the batch moved in the calls: the criterion's weight made on the CPU is what is left
    ("criterion = nn.CrossEntropyLoss(weight=torch.tensor([1.0, 2.0]))\nmodel.to(device)\nfor x, y in loader:\n"
     "    loss = criterion(model(x.to(device)), y.to(device))\n", "loss_class_weights", True),
    # the batch rebound to its move at once, the model never moved
    ("model = Net()\nfor x, y in loader:\n    x, y = x.to(device), y.to(device)\n    out = model(x)\n",
     "model_not_moved", True),
    # enumerate's count is no tensor; both tensors moved
    ("model = Net().to(device)\nfor i, (x, y) in enumerate(train_loader):\n    x = x.cuda()\n    y = y.cuda()\n"
     "    loss = F.cross_entropy(model(x), y)\n", None, True),
    # the labels read as they came: the batch's case
    ("model = Net().to(device)\nfor i, (x, y) in enumerate(train_loader):\n    x = x.to(device)\n"
     "    loss = F.cross_entropy(model(x), y)\n", "batch_not_moved", False),
    # a batch bound whole and moved by a comprehension is not read as moved
    ("model = Net().to(device)\nfor batch in loader:\n    batch = {k: v.to(device) for k, v in batch.items()}\n"
     "    out = model(**batch)\n", None, False),
])
def test_a_loop_whose_batch_is_moved_whole_tells_of_no_batch_left(code: str, first: str | None, moved: bool) -> None:
    """A loop over a loader says the batch may be left behind, unless each tensor it binds is moved where it is read
    or rebound to its move: then the tensor on the CPU is another (the model, the criterion's weight)."""
    result = diagnose.diagnose(LOOP_MESSAGE, code)
    assert ("batch_moved" in result.facts.code) == moved
    assert ("batch_loop" in result.facts.code) != moved
    if first:
        assert result.matches[0].slug == first
    if moved:
        assert result.matches[0].slug != "batch_not_moved"


MOVED_MODEL = "model = Net().to(device)\n"


@pytest.mark.parametrize("loops", [
    # one loop moves its batch, the other does not: the loop that does speaks for no other
    "for x, y in train_loader:\n    loss = criterion(model(x), y)\nfor x, y in val_loader:\n"
    "    x, y = x.to(device), y.to(device)\n    out = model(x)\n",
    # moved after it was read
    "for x, y in loader:\n    out = model(x)\n    loss = criterion(out, y)\n    x, y = x.to(device), y.to(device)\n",
    # moved, then rebound to another tensor
    "for x, y in loader:\n    x, y = x.to(device), y.to(device)\n    y = torch.tensor(remap[y])\n"
    "    loss = criterion(model(x), y)\n",
    # moved inside a function of its own, or under a branch
    "for x, y in loader:\n    def f(x):\n        x = x.to(device)\n        return x\n    loss = criterion(model(x), y)\n",
    "for x, y in loader:\n    if use_gpu:\n        x, y = x.to(device), y.to(device)\n    loss = criterion(model(x), y)\n",
    # a loader wrapped in a progress bar is a loader still
    "for i, (x, y) in tqdm(enumerate(loader)):\n    x = x.to(device)\n    loss = criterion(model(x), y)\n",
    # a cast, or a move to the CPU, is no move to the device
    "for x, y in loader:\n    x = x.to(device)\n    y = y.to(torch.short)\n    loss = criterion(model(x), y)\n",
    "for x, y in loader:\n    x = x.to(device)\n    y = y.to(cpu_device)\n    loss = criterion(model(x), y)\n",
])
def test_a_batch_moved_in_part_or_out_of_order_is_still_a_batch_left(loops: str) -> None:
    result = diagnose.diagnose(LOOP_MESSAGE, MOVED_MODEL + loops)
    assert "batch_moved" not in result.facts.code
    assert (result.verdict, result.matches[0].slug) == ("scenario", "batch_not_moved")


@pytest.mark.parametrize("loop", [
    "for x, _ in loader:\n    x = x.to(device)\n    out = model(x)\n",  # `_` is no tensor read
    "for i, (x, y) in tqdm(enumerate(loader)):\n    x, y = x.to(device), y.to(device)\n    out = model(x)\n",
    "for x, y in loader:\n    [x, y] = [x.to(device), y.to(device)]\n    out = model(x)\n",
])
def test_a_batch_moved_whole_is_read_in_its_other_shapes(loop: str) -> None:
    result = diagnose.diagnose(LOOP_MESSAGE, MOVED_MODEL + loop)
    assert "batch_moved" in result.facts.code
    assert "batch_not_moved" not in [m.slug for m in result.matches][:1]


def test_a_loss_of_one_s_own_with_a_plain_tensor_is_the_custom_loss_lesson() -> None:
    """A plain tensor attribute kept by a class named as losses are is the custom loss's case; kept by a model, the
    plain attribute's."""
    loss = ("class WeightedLoss(nn.Module):\n    def __init__(self, w):\n        super().__init__()\n"
            "        self.w = torch.tensor(w)\n    def forward(self, pred, y):\n"
            "        return ((pred - y) ** 2 * self.w).mean()\ncriterion = WeightedLoss([1.0, 2.0])\n"
            "model = Net().to(device)\nloss = criterion(model(x.to(device)), y.to(device))\n")
    result = diagnose.diagnose(LOOP_MESSAGE, loss)
    assert "loss_attr" in result.facts.code
    assert result.matches[0].slug == "custom_loss_weight"
    model = diagnose.diagnose(LOOP_MESSAGE, loss.replace("WeightedLoss", "Scaled"))
    assert "loss_attr" not in model.facts.code
    assert model.matches[0].slug == "plain_tensor_attribute"
    # a model that holds its loss is a model; a loss's tensor made on the device is no tensor left on the CPU
    assert "loss_attr" not in diagnose.read(LOOP_MESSAGE, loss.replace("WeightedLoss", "ModelWithLoss")).code
    placed = loss.replace("torch.tensor(w)", "torch.tensor(w, device=device)")
    assert "loss_attr" not in diagnose.read(LOOP_MESSAGE, placed).code


def test_a_tensor_put_in_each_param_group_by_a_loop_is_read() -> None:
    """`for g in optimizer.param_groups: g["d"] = torch.tensor(...)` puts a CPU tensor in every group, as
    `optimizer.param_groups[0]["d"] = ...` does."""
    code = ("optimizer = Prodigy(model.parameters())\nmodel.to(device)\noptimizer.load_state_dict(ckpt['opt'])\n"
            "for g in optimizer.param_groups:\n    g['d'] = torch.tensor([1.0])\n")
    result = diagnose.diagnose(LOOP_MESSAGE, code)
    assert "group_tensor" in result.facts.code
    assert result.matches[0].slug == "param_group_tensor"
    for value in ("1.0", "torch.tensor([1.0], device=device)"):  # a number, or a tensor made on the device
        assert "group_tensor" not in diagnose.read(LOOP_MESSAGE, code.replace("torch.tensor([1.0])", value)).code
    assert "group_tensor" not in diagnose.read(
        LOOP_MESSAGE, "optimizer.param_groups[0]['d'] = torch.tensor([1.0], device=device)\n").code


def test_ddp_s_check_of_a_module_on_the_cpu_is_the_model_never_moved() -> None:
    """DDP checks the module at the wrap: one left on the CPU with device_ids given is model_not_moved's bug, as
    its page says and test_model_not_moved_under_ddp runs."""
    result = diagnose.diagnose("ValueError: DistributedDataParallel device_ids and output_device arguments only work "
                               "with single-device/multiple-device GPU modules or CPU modules, but got device_ids [1], "
                               "output_device None, and module parameters {device(type='cpu')}")
    assert result.verdict == "scenario"
    assert result.matches[0].slug == "model_not_moved"


def test_an_mps_message_alone_ranks_the_picker_first_and_names_it_only_with_its_code() -> None:
    """mps:0 in a message tells a Mac, not how the tensor got to the CPU: the picker comes first among the
    candidates, and is named alone where the code shows it (a CUDA-only picker beside an MPS model)."""
    text = "RuntimeError: Expected all tensors to be on the same device, but found at least two devices, mps:0 and cpu!"
    bare = diagnose.diagnose(text)
    assert bare.verdict == "ambiguous"
    assert bare.matches[0].slug == "mps_device_pick"
    named = diagnose.diagnose(text, "device = 'cuda' if torch.cuda.is_available() else 'cpu'\n"
                                    "model.to(torch.device('mps'))\n")
    assert named.verdict == "scenario"
    assert named.matches[0].slug == "mps_device_pick"


def test_ranks_meeting_device_0_after_a_load_are_the_ranks_map_location() -> None:
    """Every rank's checkpoint put on device 0 (no map_location): a rank's tensor meets it, cuda:1 and cuda:0,
    as ddp_rank_map_location's page shows; a DDP resume in the code names it."""
    result = diagnose.diagnose("RuntimeError: Expected all tensors to be on the same device, but found at least two "
                               "devices, cuda:1 and cuda:0!", "model = DistributedDataParallel(model, device_ids="
                               "[local_rank])\nckpt = torch.load(path)\n")
    assert result.verdict == "scenario"
    assert result.matches[0].slug == "ddp_rank_map_location"


def test_an_error_that_names_no_device_is_no_device_error() -> None:
    """The last error a paste shows, whose message names no device and whose traceback passes through none of torch's
    device code, is no device error. Not so where the paste names a device anywhere but in a frame's path (the
    message cut short in a device's words, its later lines, an earlier error of a chain, the GPU's driver or CUDA's
    libraries), where the error wraps another (a worker's, a launcher's), or where it was raised restoring GPUs' RNG
    states."""
    text = ('  File "train.py", line 84, in train\n    loss = norm * F.binary_cross_entropy_with_logits(a, b, '
            "pos_weight=pos_weight)\nTypeError: binary_cross_entropy_with_logits(): argument 'pos_weight' (position 4) "
            "must be Tensor, not numpy.float64")
    plain = diagnose.diagnose(text)
    assert (plain.verdict, plain.matches) == ("not_device_error", ())
    assert "TypeError: binary_cross_entropy_with_logits()" in plain.note
    assert "\n\nNot a device error.\n" in diagnose.render(plain)
    pytest_style = diagnose.diagnose("E       ValueError: too many values to unpack (expected 2)")
    assert pytest_style.verdict == "not_device_error"
    assert diagnose.render(pytest_style).startswith("Facts: none read (no device error's message, frame or code)\n\n"
                                                    "Not a device error.\n")
    for dtype_or_key in (
            # dtype messages that share a device's words
            "RuntimeError: Expected tensor for argument #1 'indices' to have one of the following scalar types: Long, "
            "Int; but got torch.FloatTensor instead (while checking arguments for embedding)",
            "RuntimeError: Input type (double) and bias type (float) should be the same",
            # a log's header before the traceback, and the code a frame quotes, are not the error's words
            "GPU available: True (cuda), used: True\nTraceback (most recent call last):\n  File \"train.py\", line 5, in "
            "<module>\n    y = batch['labels']\nKeyError: 'labels'",
            'Traceback (most recent call last):\n  File "train.py", line 5, in <module>\n    batch = {k: v.to(device) '
            "for k, v in batch.items()}\nKeyError: 'labels'"):
        assert diagnose.diagnose(dtype_or_key).verdict == "not_device_error", dtype_or_key
    rnn = diagnose.diagnose("RuntimeError: cudnn RNN backward can only be called in training mode")
    assert (rnn.facts.template, rnn.verdict) == ("cudnn_rnn_eval", "not_device_error")
    assert "train()" in rnn.note
    assert "cudnn.flags(enabled=False)" in rnn.note
    indented = diagnose.diagnose("E" + "\u00a0" * 7 + "TypeError: 'list' object is not callable")  # a web page's spaces
    assert indented.verdict == "not_device_error"
    for other in ("RuntimeError: Expected all tensors to be on the s", "TypeError: Input and filter must be on the same GPU",
                  "RuntimeError: b_q_weight is not on GPU", "RuntimeError: Expected all tensors to",
                  "RuntimeError: Input type (torch.FloatTensor) and weight type (torch.",
                  "RuntimeError: The following operation failed in the TorchScript interpreter.",
                  # the message's later lines name the device
                  "NotImplementedError: No operator found for `memory_efficient_attention_forward` with inputs:\n"
                  "     device=cpu (supported: {'cuda'})",
                  # a wrapper of the real error: a worker's, a launcher's, a CI step's
                  "RuntimeError: Caught RuntimeError in DataLoader worker process 0.",
                  "RuntimeError: Caught KeyError in DataLoader worker process 0.\nOriginal Traceback (most recent call "
                  'last):\n  File "/x/torch/utils/data/_utils/worker.py", line 302, in _worker_loop\n    data = '
                  "fetcher.fetch(index)\nKeyError: 'labels'",
                  "subprocess.CalledProcessError: Command '['python', 'train.py']' returned non-zero exit status 1.",
                  "Error: Process completed with exit code 1.",
                  # an earlier error of a chain names it
                  "RuntimeError: CUDA error: CUBLAS_STATUS_EXECUTION_FAILED when calling `cublasSgemm`\n\nDuring "
                  "handling of the above exception, another exception occurred:\n\nValueError: oops",
                  # the GPU's stack: its driver, CUDA's libraries
                  "RuntimeError: Found no NVIDIA driver on your system.",
                  "RuntimeError: nvrtc: error: failed to open libnvrtc-builtins.so.11.1.",
                  "RuntimeError: cuFFT error: CUFFT_INTERNAL_ERROR",
                  "RuntimeError: Unable to find a valid cuDNN algorithm to run convolution"):
        assert diagnose.diagnose(other).verdict != "not_device_error", other


def test_an_error_under_torchrun_s_rank_prefix_is_read_as_an_error() -> None:
    """`[rank0]: IndexError: ...` is an error the templates do not read, not a device error; a frame of
    set_rng_state above it names no lesson."""
    result = diagnose.diagnose('[rank0]:   File "/venv/lib/python3.10/site-packages/torch/cuda/random.py", line 75, '
                               "in set_rng_state\n[rank0]:     set_rng_state(state, i)\n"
                               "[rank0]: IndexError: tuple index out of range")
    assert result.verdict == "unknown"


def test_a_constant_torchscript_recorded_on_the_line_that_raised_puts_the_trace_first() -> None:
    """TorchScript's serialized code marks the line that raised (`~~~ <--- HERE`); a `CONSTANTS.cN` read there is a
    tensor the trace recorded on the device it ran on: the traced constant comes first, whatever the op."""
    text = ("RuntimeError: The following operation failed in the TorchScript interpreter.\n"
            "Traceback of TorchScript, serialized code (most recent call last):\n"
            '  File "code/__torch__/model.py", line 40, in forward\n'
            "    input4 = torch.add(distance0, CONSTANTS.c23)\n"
            "    positional_embedding = torch.embedding(CONSTANTS.c24, input4)\n"
            "                           ~~~~~~~~~~~~~~~ <--- HERE\n"
            "RuntimeError: Expected all tensors to be on the same device, but found at least two devices, cuda:0 and "
            "cpu! (when checking argument for argument index in method wrapper_CUDA__index_select)")
    assert diagnose.raising_line(text) == "positional_embedding = torch.embedding(CONSTANTS.c24, input4)"
    assert diagnose.diagnose(text).matches[0].slug == "traced_device_constant"


SERIALIZED = ("RuntimeError: The following operation failed in the TorchScript interpreter.\n"
              "Traceback of TorchScript, serialized code (most recent call last):\n"
              '  File "code/__torch__/rnn.py", line 14, in forward\n'
              '    _3 = torch.zeros([1, 128], dtype=6, layout=0, device=torch.device("cpu"), pin_memory=False)\n'
              '    hidden = torch.to(_3, dtype=6, layout=0, device=torch.device("cuda:0"), pin_memory=False, '
              "non_blocking=False, copy=False, memory_format=None)\n"
              "             ~~~~~~~~ <--- HERE\n")


@pytest.mark.parametrize("end", [
    "RuntimeError: Expected all tensors to be on the same device, but found at least two devices, cuda:0 and cpu!",
    "",  # the paste cut before the error the interpreter announced
])
def test_a_device_the_trace_recorded_on_the_line_that_raised_puts_the_trace_first(end: str) -> None:
    """A trace writes `device=x.device` into its serialized code as the constant it saw (`device=torch.device(
    "cuda:0")`); on the line that raised, the traced constant comes first. The interpreter's "The following
    operation failed" announces the error at the traceback's end: cut before it, the frames' candidates come with a
    note that no message was read. `memory_format=` in the code is no memory message."""
    result = diagnose.diagnose(SERIALIZED + end)
    assert "constant_raised" in result.facts.code
    assert result.facts.kind == ("mismatch" if end else None)
    assert result.matches[0].slug == "traced_device_constant"
    if not end:
        assert result.verdict == "ambiguous"
        assert "no error message was read" in result.note
    # a device written in the user's own Python line is a choice, not a recorded constant
    own = ('  File "model.py", line 9, in forward\n    h = torch.zeros(1, 128, device=torch.device("cpu"))\n' + end)
    assert "constant_raised" not in diagnose.read(own).code


def test_a_distribution_s_parameters_are_no_lesson() -> None:
    """torch.distributions keeps the parameters a Distribution was built from (Python numbers: CPU tensors) and
    has no .to(): raised inside it with such parameters in the code, no lesson of the catalog applies."""
    text = ('  File "/env/lib/python3.6/site-packages/torch/distributions/normal.py", line 72, in cdf\n'
            "    return 0.5 * (1 + torch.erf((value - self.loc) * self.scale.reciprocal() / math.sqrt(2)))\n"
            "RuntimeError: Expected object of type torch.cuda.FloatTensor but found type torch.FloatTensor for "
            "argument #3 'other'")
    result = diagnose.diagnose(text, "m = torch.distributions.Normal(0, 1)\nm.cdf(torch.tensor(.5, device='cuda'))\n")
    assert result.verdict == "not_in_catalog"
    assert "distributions" in result.note
    # the frame alone, or parameters made from the model's outputs: the value may be the CPU side (a batch never
    # moved), as likely as the parameters
    for code in ("", "mu, std = policy(obs)\ndist = Normal(mu, std)\nlogp = dist.log_prob(batch['actions'])\n"):
        result = diagnose.diagnose(text, code)
        assert result.verdict == "ambiguous"
        assert "batch_not_moved" in [m.slug for m in result.matches]


def test_a_tokenizer_s_outputs_moved_whole_speak_against_its_lesson() -> None:
    """`tokenizer(...).to(model.device)` moves every output: the tokenizer lesson (only input_ids moved) is not
    named on it alone."""
    text = ("RuntimeError: Expected all tensors to be on the same device, but got mat2 is on cpu, different from "
            "other tensors on cuda:0 (when checking argument in method wrapper_CUDA_bmm)")
    moved = diagnose.diagnose(text, 'inputs = tokenizer("Hi", return_tensors="pt").to(model.device)\n'
                                    "model.generate(**inputs)\n")
    assert "tokenizer_moved" in moved.facts.code
    assert moved.verdict == "ambiguous"
    assert not moved.matches or moved.matches[0].slug != "tokenizer_outputs"
    # its ids made a tensor, bound to a name, and that name moved
    wrapped = 'ids = torch.tensor([tokenizer.encode("Hi")])\nids = ids.to("cuda")\nmodel(ids)\n'
    assert "tokenizer_moved" in diagnose.read_code(wrapped)
    assert "tokenizer_not_moved" in diagnose.read_code(wrapped.replace('ids = ids.to("cuda")\n', ""))
    assert "tokenizer_moved" in diagnose.read_code(wrapped.replace('ids.to("cuda")', "ids.cuda()"))
    # a model sized by the tokenizer is no output of it
    sized = ('model = Classifier(len(tokenizer.get_vocab()), 256)\nmodel.to(device)\n'
             'enc = tokenizer(t, return_tensors="pt")\nmodel(enc["input_ids"])\n')
    assert "tokenizer_not_moved" in diagnose.read_code(sized)


def test_a_layer_called_by_a_tuple_key_is_in_a_plain_dict() -> None:
    """ModuleDict takes only string keys: `self.convs[("upconv", i, 0)](x)` calls a layer of a plain dict."""
    assert "plain_list_layers" in diagnose.read_code('x = self.convs[("upconv", i, 0)](x)\n')
    assert "plain_list_layers" not in diagnose.read_code('x = self.convs["upconv_0"](x)\n')


@pytest.mark.parametrize(("code", "plain"), [
    ("self.metrics['accuracy'] = Accuracy()\n", True),
    ("self.heads[name] = nn.Linear(16, 2)\n", True),
    ("self.metrics = nn.ModuleDict()\nself.metrics['accuracy'] = Accuracy()\n", False),
    ("self.blocks: nn.ModuleList = nn.ModuleList(blocks)\nself.blocks[0] = ResBlock(64)\n", False),
    ("self.cache[key] = torch.zeros(3)\n", False),  # a tensor in a dict: no layer
    ("# self.metrics = nn.ModuleDict()\nself.metrics['accuracy'] = Accuracy()\n", True),  # commented out
    ("self.weights[0] = Tensor(3)\n", False),
])
def test_a_layer_put_in_an_item_of_a_plain_container_is_no_submodule(code: str, plain: bool) -> None:
    """`self.metrics["acc"] = Accuracy()` puts a module in a dict's item: unless the code shows that dict made a
    ModuleDict (or the list a ModuleList), it is a plain one, and `.to()` never reaches the module."""
    assert ("plain_list_layers" in diagnose.read_code(code)) is plain


@pytest.mark.parametrize(("code", "discarded"), [
    ("img = tfms(Image.open(path)).unsqueeze(0)\nimg.to(device)\nmodel.to(device)\nout = model(img)\n", True),
    ("`img.to(device)`\n`model.to(device)`\n`outputs = model(img)`", True),  # a fragment: read as text
    ("inputs = inputs.to(device)\nmodel.to(device)\n", False),  # assigned
    ("criterion.cuda()\nmodel.to(device)\n", False),  # a module's move is in place
    ("feature_extractor = torchvision.models.resnet50()\nfeature_extractor.to(device)\n", False),
    ("target_net.to(device)\n", False),  # named as no input is
    ("input_layer = nn.Linear(4, 2)\ninput_layer.cuda()\n", False),  # bound to a module
    ("batch.to(device)\n", False),  # a tokenizer's BatchEncoding (a PyG Data) moves in place
    ("x.to(torch.float16)\n", False),  # a cast
    ("x.to(dtype)\n", False),
    ("`loss = criterion(model(x.cuda()),`\n`    labels.cuda())`", False),  # the end of a call begun above
])
def test_an_input_s_move_not_assigned_leaves_the_input_behind(code: str, discarded: bool) -> None:
    """`img.to(device)` on a line of its own returns the moved tensor and drops it: the input stays on the CPU, a
    batch never moved (a module's `.to` moves in place, and a cast moves nothing)."""
    assert ("move_discarded" in diagnose.read_code(code)) is discarded
    if discarded:
        result = diagnose.diagnose("RuntimeError: Input type (torch.FloatTensor) and weight type "
                                   "(torch.cuda.FloatTensor) should be the same", code)
        assert (result.verdict, result.matches[0].slug) == ("scenario", "batch_not_moved")


@pytest.mark.parametrize("message", [
    # c10's common_device_check_failure: the common device first, the argument's second; 2.8+ names the argument's
    "Expected all tensors to be on the same device, but found at least two devices, cpu and cuda:0! (when checking "
    "argument for argument index in method wrapper_gather)",
    "Expected all tensors to be on the same device, but got index is on cuda:0, different from other tensors on cpu "
    "(when checking argument in method wrapper_CUDA_gather)",
], ids=["codegen", "codegen_2_8"])
def test_a_gather_s_index_on_the_device_reads_a_table_left_on_the_cpu(message: str) -> None:
    """A gather whose index is on the device and whose source is on the CPU reads a table left behind (a schedule
    indexed by timesteps): the lookup table's lesson first, and no lesson whose input stayed on the CPU. The index
    on the CPU is no table's case."""
    result = diagnose.diagnose(message)
    assert result.facts.side == "table"
    assert "the tensor read from (a table) is on cpu, its index on the device" in result.matches[0].why
    assert [m.slug for m in result.matches][:1] == ["cpu_lookup_table"]
    assert not {"batch_not_moved", "tokenizer_outputs"} & {m.slug for m in result.matches}
    flipped = diagnose.diagnose(message.replace("cpu and cuda:0", "cuda:0 and cpu").replace(
        "index is on cuda:0, different from other tensors on cpu", "index is on cpu, different from other tensors on "
        "cuda:0"))
    assert flipped.facts.side != "table"
    assert "cpu_lookup_table" not in [m.slug for m in flipped.matches][:1]


def test_a_lookup_table_read_by_index_select_keeps_its_lesson() -> None:
    """index_select's `index` on the device and its source on the CPU is an embedding's weights (the model's side) or
    a table: where the code shows the table (`self.sigmas[t]` of a plain attribute), the lookup table's lesson is
    first; only a gather's wording makes the table the side."""
    message = ("Expected all tensors to be on the same device, but found at least two devices, cpu and cuda:0! (when "
               "checking argument for argument index in method wrapper_CUDA__index_select)")
    result = diagnose.diagnose(message, "self.sigmas = torch.linspace(0, 1, 10)\ns = self.sigmas[t]\n")
    assert (result.facts.side, result.verdict, result.matches[0].slug) == ("weights", "scenario", "cpu_lookup_table")


def test_a_module_traced_by_trace_module_is_traced() -> None:
    """torch.jit.trace_module records the devices it saw as torch.jit.trace does."""
    assert "jit_trace" in diagnose.read_code("m = torch.jit.trace_module(Net(), dict(forward=(x,)))\n")


def test_an_exported_program_moved_to_the_device_is_the_traced_constant_s_case() -> None:
    """torch.export's entry points (`export_for_training`) are an export, and the module an exported program gives
    (`a = exported.module()`), moved with `.to`, is a model moved: a CPU hidden state is the recorded constant."""
    code = ("from torch.export import export_for_training\nexported = export_for_training(Net(), args=(x,))\n"
            "a = exported.module()\nb = a.to(torch.device('cuda:0'))\nb.forward(x.cuda())\n")
    result = diagnose.diagnose("RuntimeError: Input and hidden tensors are not at the same device, found input tensor "
                               "at cuda:0 and hidden tensor at cpu", code)
    assert {"jit_trace", "model_moved"} <= set(result.facts.code)
    assert result.verdict == "scenario"
    assert result.matches[0].slug == "traced_device_constant"


def test_a_frame_two_scenarios_share_names_neither_alone() -> None:
    """An embedding's frame is where a tokenizer's output left on the CPU raises, and a batch of token ids never
    moved alike: it ranks them, and names neither on its own; the code that shows the tokenizer does."""
    text = ('  File "/env/lib/python3.8/site-packages/torch/nn/modules/sparse.py", line 117, in forward\n'
            "    self.norm_type, self.scale_grad_by_freq, self.sparse)\n"
            '  File "/env/lib/python3.8/site-packages/torch/nn/functional.py", line 1506, in embedding\n'
            "    return torch.embedding(weight, input, padding_idx, scale_grad_by_freq, sparse)\n"
            "RuntimeError: Expected object of backend CUDA but got backend CPU for argument #3 'index'")
    result = diagnose.diagnose(text)
    assert result.verdict == "ambiguous"
    assert {"tokenizer_outputs", "batch_not_moved"} <= {m.slug for m in result.matches}
    code = "enc = tokenizer(texts, return_tensors='pt')\nout = model(enc['input_ids'])\n"
    named = diagnose.diagnose(text, code)
    assert named.verdict == "scenario"
    assert named.matches[0].slug == "tokenizer_outputs"


@pytest.mark.parametrize(("text", "verdict", "note"), [
    ("RuntimeError: expected scalar type Float but found Double", "not_device_error", "differ in dtype"),
    ("RuntimeError: Input type (torch.cuda.FloatTensor) and weight type (torch.cuda.HalfTensor) should be the same",
     "not_device_error", "differ in dtype"),
    ("AssertionError: If capturable=False, state_steps should not be CUDA tensors.", "fixed_upstream",
     "fixed upstream in PyTorch 1.12.1"),
    ("AttributeError: 'Adam' object has no attribute '_warned_capturable_if_run_uncaptured'", "fixed_upstream",
     "fixed upstream in PyTorch 1.12.1"),
    ("TypeError: add_ received an invalid combination of arguments - got (int, torch.cuda.FloatTensor), but expected "
     "one of:\n * (float value)\n * (torch.FloatTensor other)", "fixed_upstream", "fixed upstream in PyTorch 0.4.0"),
    ("ValueError: too many values to unpack", "not_device_error", "says nothing of devices"),
    # the parser's types differ in dtype alone: no device in it
    ("TypeError: torch.mm received an invalid combination of arguments - got (torch.cuda.FloatTensor, "
     "torch.cuda.LongTensor), but expected (torch.cuda.FloatTensor source, torch.cuda.FloatTensor mat2)", "unknown",
     "no device error"),
    ("output with device cuda:0 and dtype Long doesn't match the desired device cuda:0 and dtype Float",
     "not_device_error", "differ in dtype"),
    ("RuntimeError: expected device cuda:0 and dtype Float but got device cuda:0 and dtype Long", "not_device_error",
     "differ in dtype"),
    ("RuntimeError: Expected a 'cuda:0' generator device but found 'cuda'", "fixed_upstream",
     "fixed upstream in PyTorch 1.9.0"),
    ("RuntimeError: CUDA error: device-side assert triggered\nCUDA kernel errors might be asynchronously reported at "
     "some other API call, so the stacktrace below might be incorrect.", "not_device_error", "an index out of range"),
    ("RuntimeError: Expected object of type torch.cuda.FloatTensor but found type torch.cuda.DoubleTensor for argument #2 'mat2'",
     "not_device_error", "differ in dtype"),
    ("RuntimeError: Expected object of scalar type Float but got scalar type Double for argument #2 'target'",
     "not_device_error", "differ in dtype"),
    # SparseCUDA is CUDA's device in a sparse layout: one device, no second accelerator
    ("RuntimeError: Expected object of backend CUDA but got backend SparseCUDA for argument #2 'mat2'",
     "not_device_error", "one device, two layouts"),
    ("RuntimeError: Expected object of backend CPU but got backend MkldnnCPU for argument #2 'weight'",
     "not_device_error", ".to_dense()"),
    ("RuntimeError: expected backend CUDA and dtype Float but got backend CUDA and dtype Long", "not_device_error",
     "differ in dtype"),
    ("RuntimeError: randperm is only implemented for CPU", "fixed_upstream", "fixed upstream in PyTorch 0.4.1"),
    ("TypeError: 'torch.Device' object is not callable", "fixed_upstream", "fixed upstream in PyTorch 0.4.1"),
    # map_location given a list: torch.load called it as a function (a pytest traceback's quoted line)
    (">       result = map_location(storage, location)\nE       TypeError: 'list' object is not callable",
     "not_in_catalog", "not a list or a number"),
    # the same Python error without torch.load's line is no device error
    ("TypeError: 'list' object is not callable", "not_device_error", "says nothing of devices"),
    ("RuntimeError: CUDA error: invalid device ordinal", "not_in_catalog", "LOCAL_RANK"),
    ("RuntimeError: CUDA error: no kernel image is available for execution on the device", "not_in_catalog",
     "get_arch_list"),
    # a kernel reading memory it may not: an unchecked kernel given another device's tensor, or its own bug
    ("RuntimeError: CUDA error: an illegal memory access was encountered", "not_in_catalog",
     "torch.cuda.current_device()"),
    # NCCL's communicator refused: two ranks on one GPU
    ("ncclInvalidUsage: This usually reflects invalid usage of NCCL library.\nLast error:\nDuplicate GPU detected : "
     "rank 0 and rank 1 both on CUDA device 2000", "not_in_catalog", "LOCAL_RANK"),
    # an op without a kernel for the device, in the dispatcher's three wordings (quantized ops run on the CPU)
    ("NotImplementedError: Could not run 'quantized::embedding_byte' with arguments from the 'CUDA' backend. This "
     "could be because the operator doesn't exist for this backend", "not_in_catalog", "quantized ops run on the CPU"),
    ("RuntimeError: Didn't find kernel to dispatch to for operator 'quantized::conv_prepack'. Tried to look up kernel "
     "for dispatch key 'CUDATensorId'. Registered dispatch keys are:[QuantizedCPUTensorId]", "not_in_catalog",
     "run the op on the CPU"),
    ("RuntimeError: No function is registered for schema aten::quantize_per_channel(Tensor self, Tensor scales, Tensor "
     "zero_points, int axis, ScalarType dtype) -> Tensor on tensor type CUDATensorId; available functions are "
     "CPUTensorId, VariableTensorId", "not_in_catalog", "run the op on the CPU"),
    # a CPU-only build asked for a CUDA device by torch.cuda.device (torch/cuda/__init__.py's _exchange_device)
    ("RuntimeError: PyTorch was compiled without CUDA support", "not_in_catalog", "CPU-only build"),
    # FSDP given a module on several devices; a _foreach op given its scalars on the device
    ("RuntimeError: FSDP only supports single device modules but got params on {device(type='cuda', index=0), "
     "device(type='cpu')}", "not_in_catalog", "materialize or move the whole module"),
    ("RuntimeError: Expected scalars to be on CPU, got cuda:0 instead.", "not_in_catalog",
     "Move optimizer.state only"),
])
def test_what_the_catalog_does_not_teach_gets_no_lesson(text: str, verdict: str, note: str) -> None:
    """A dtype error, a bug PyTorch fixed, and device errors no scenario teaches get their verdict and no lesson."""
    result = diagnose.diagnose(text)
    assert result.verdict == verdict
    assert note in result.note
    assert not result.found


FUSED_STEP = ('  File "/env/lib/python3.10/site-packages/torch/optim/adamw.py", line 616, in _fused_adamw\n'
              "    torch._fused_adamw_(\nRuntimeError: Expected all tensors to be on the same device, but found at "
              "least two devices, cuda:0 and cpu!")
CTC_CUDNN = ('  File "/env/lib/python3.10/site-packages/torch/nn/functional.py", line 3069, in ctc_loss\n'
             "    return torch.ctc_loss(\nRuntimeError: cuDNN error: CUDNN_STATUS_EXECUTION_FAILED")
LERP = "import torch\ntorch.lerp(torch.randn(10).cuda(), torch.randn(10).cuda(), torch.tensor(0.5))\n"
TWO_DEVICES = "RuntimeError: Expected all tensors to be on the same device, but found at least two devices, cuda:0 and cpu!"
LENGTHS = "RuntimeError: 'lengths' argument should be a 1D CPU int64 tensor, but got 1D cuda:0 Long tensor"
NUMPY_MPS = ("TypeError: can't convert mps:0 device type tensor to numpy. Use Tensor.cpu() to copy the tensor to host "
             "memory first.")
DEVICE_GENERATOR = ('gen = torch.Generator(device=torch.device("mps:0"))\n'
                    "loader = DataLoader(dataset, batch_size=8, shuffle=True, generator=gen)\n")
PACK_LIST = "lens = [len(s) for s in seqs]\npacked = pack_padded_sequence(padded, lens, enforce_sorted=False)\n"
SPARSE = "RuntimeError: device of indices (0) must match device of values (5)"
SPARSE_CODE = ('device = torch.device("cuda:5" if torch.cuda.is_available() else "cpu")\n'
               "index = torch.tensor([[0, 1, 2, 3], [0, 1, 2, 3]]).to(device)\n"
               "data = torch.tensor([3, 2, 2, 2]).to(device)\nprint(torch.sparse_coo_tensor(index, data))\n")


@pytest.mark.parametrize(("text", "code", "fixed_in"), [
    ("RuntimeError: randperm is only implemented for CPU", "", "0.4.1"),
    (CTC_CUDNN, "", "2.8.0"),
    (CTC_CUDNN + "\ntorch 2.6.0", "", "2.8.0"),
    (TWO_DEVICES, LERP, "2.6.0"),
    (TWO_DEVICES + "\ntorch 2.6.0.dev20241102+cu124", LERP, "2.6.0"),  # a nightly: its fixes are unknown
    (FUSED_STEP + "\ntorch==2.0.1", "", "2.1.0"),
    ("RuntimeError: don't know how to restore data location of torch.storage._UntypedStorage (tagged with mps)", "",
     "1.13.0"),
    ("RuntimeError: don't know how to restore data location of torch.storage.UntypedStorage (tagged with mps:0)", "",
     "2.1.0"),
    ("AssertionError: If capturable=True, params and state_steps must be CUDA tensors.\ntorch==1.13.1",
     "ckpt = torch.load(path, map_location='cpu')\noptimizer.load_state_dict(ckpt['optimizer'])\n", "2.1.0"),
    # sparse_coo_tensor made its indices on the current device before 1.7 (a report's, pytorch/pytorch#33814)
    (SPARSE + "\n - PyTorch Version: 1.4.0", SPARSE_CODE, "1.7.0"),
    # pack_padded_sequence given its lengths as a list, which it made on the CUDA default device before 2.1
    (LENGTHS, PACK_LIST, "2.1.0"),
    (LENGTHS, "x = pack_padded_sequence(emb, [2, 1], batch_first=True)\n", "2.1.0"),
    # typographic quotes, as a forum renders them, in the message and the code
    (LENGTHS.replace("'", "\u2018", 1).replace("'", "\u2019", 1),
     "torch.set_default_device(\u2018cuda\u2019)\nlens = [2, 1]\npack_padded_sequence(seq, lens)\n", "2.1.0"),
    (LENGTHS + "\ntorch==2.0.1", "out = nn.utils.rnn.pack_padded_sequence(emb, lengths=lens.tolist())\n", "2.1.0"),
    # 2.1.0's RandomSampler handed a permutation drawn on a DataLoader's device generator to NumPy
    (NUMPY_MPS + "\ntorch==2.1.0", DEVICE_GENERATOR, "2.1.1"),
    ('  File "model.py", line 12, in forward\n    x = pack_padded_sequence(x, lengths.tolist(), batch_first=True)\n'
     '  File "/env/lib/python3.8/site-packages/torch/nn/utils/rnn.py", line 249, in pack_padded_sequence\n'
     "    _VF._pack_padded_sequence(input, lengths, batch_first)\n" + LENGTHS, "", "2.1.0"),
])
def test_a_bug_fixed_upstream_is_told_by_its_call_its_code_or_its_version(text: str, code: str,
                                                                         fixed_in: str) -> None:
    """Where a message has causes of today too, what marks the bug of an old release decides: the call that raised
    (randperm, ctc_loss), the code's own line (lerp given a 0-dim CPU weight), or a release the input shows."""
    result = diagnose.diagnose(text, code)
    assert result.verdict == "fixed_upstream"
    assert f"fixed upstream in PyTorch {fixed_in}" in result.note


@pytest.mark.parametrize(("text", "code", "verdict"), [
    # another op without a CUDA kernel, in any release: no lesson, and no fix upstream to name
    ("RuntimeError: cumsum is only implemented for CPU", "", "not_in_catalog"),
    # cuDNN failing in a convolution, or in CTC loss on a release with the fix: no device error
    ("RuntimeError: cuDNN error: CUDNN_STATUS_EXECUTION_FAILED", "", "not_device_error"),
    (CTC_CUDNN + "\ntorch 2.8.0", "", "not_device_error"),
    # lerp on a release that takes the CPU weight, or a weight that is no 0-dim tensor: a device error of today
    (TWO_DEVICES + "\ntorch 2.7.0", LERP, "ambiguous"),
    (TWO_DEVICES, LERP.replace("torch.tensor(0.5)", "torch.tensor([0.5])"), "ambiguous"),
    # another backend's tag this build lacks (a TPU's checkpoint): the host lacks the device, the lesson's case; and an
    # mps:0 tag on a release that restores it cannot raise this, so a version past the fix is not the bug
    ("RuntimeError: don't know how to restore data location of torch.storage.UntypedStorage (tagged with xla:0)", "",
     "scenario"),
    ("RuntimeError: don't know how to restore data location of torch.storage.UntypedStorage (tagged with mps:0)\n"
     "torch==2.4.1", "", "scenario"),
    # the code calls the old bug's op, but the message names another, or the traceback raised elsewhere
    ("RuntimeError: cumsum is only implemented for CPU", "idx = torch.randperm(10)\n", "not_in_catalog"),
    ('  File "/env/lib/python3.10/site-packages/torch/nn/modules/rnn.py", line 879, in forward\n'
     "    result = _VF.lstm(input, hx, self._flat_weights)\nRuntimeError: cuDNN error: CUDNN_STATUS_EXECUTION_FAILED",
     "loss = F.ctc_loss(log_probs, targets, input_lengths, target_lengths)\n", "not_device_error"),
    ('  File "train.py", line 40, in step\n    loss = self.ctc_loss(log_probs, targets, il, tl)\n'
     "RuntimeError: cuDNN error: CUDNN_STATUS_EXECUTION_FAILED", "", "not_device_error"),
    # a lerp in the code that did not raise: the traceback raised in a layer, or the lerp line is commented out
    ('  File "/env/lib/python3.11/site-packages/torch/nn/modules/linear.py", line 125, in forward\n'
     "    return F.linear(input, self.weight, self.bias)\n" + TWO_DEVICES
     + " (when checking argument for argument mat1 in method wrapper_CUDA_addmm)",
     "ema = torch.lerp(ema, cur, torch.tensor(0.9))\n", "scenario"),
    (TWO_DEVICES, "# a.lerp_(b, torch.tensor(0.5))\nout = model(x)\n", "ambiguous"),
    # a capturable optimizer on a shown 1.13 without a load: its parameters left on the CPU, the user's own
    ("AssertionError: If capturable=True, params and state_steps must be CUDA tensors.\ntorch==1.13.1",
     "opt = torch.optim.Adam(model.parameters(), capturable=True)\n", "scenario"),
    # another package's local build is no torch release
    (FUSED_STEP + "\ntorchaudio 2.0.2+cpu", "", "ambiguous"),
    # a fused kernel without a version: a cause of today (its `step` or its moments on the CPU), not the bug of 2.0
    (FUSED_STEP, "", "ambiguous"),
    (FUSED_STEP + "\ntorch==2.1.0", "", "ambiguous"),
    # lengths made a tensor by the user (on the device, or rebound after the list): the lengths moved, the scenario's
    # case; a list on a release that makes it on the CPU: not its case either (its code gives a tensor), candidates
    (LENGTHS, "lens = torch.tensor([len(s) for s in seqs])\npacked = pack_padded_sequence(padded, lens)\n",
     "scenario"),
    (LENGTHS, PACK_LIST.replace("\npacked", "\nlens = torch.tensor(lens).cuda()\npacked"), "scenario"),
    (LENGTHS + "\ntorch==2.1.2", PACK_LIST, "ambiguous"),
    # a sparse tensor's indices and values on two devices without an old release shown, or with a later one: the
    # user's own two devices, which no lesson teaches (the note names the old bug for an older release)
    (SPARSE, SPARSE_CODE, "not_in_catalog"),
    (SPARSE + "\ntorch==1.7.1", SPARSE_CODE, "not_in_catalog"),
    ("RuntimeError: device of ccol_indices (=cpu) must match device of values (=cuda:0)", "", "not_in_catalog"),
    ("RuntimeError: device of crow_indices (=cpu) must match device of col_indices (=cuda:0)", "", "not_in_catalog"),
    ("RuntimeError: Values and crow_indices need to be on the same device.", "", "not_in_catalog"),
    (LENGTHS, "x = pack_padded_sequence(emb[:, 1:], lens, batch_first=True)\n", "scenario"),
    # a device tensor handed to NumPy on a release after the sampler's, or by code with a CPU generator: the lesson
    (NUMPY_MPS + "\ntorch==2.1.1", DEVICE_GENERATOR, "scenario"),
    (NUMPY_MPS, DEVICE_GENERATOR.replace('torch.device("mps:0")', '"cpu"'), "scenario"),
    (NUMPY_MPS, "preds = np.concatenate([model(x) for x in batches])\n", "scenario"),
])
def test_the_same_messages_without_the_old_bugs_mark_are_not_called_fixed(text: str, code: str,
                                                                          verdict: str) -> None:
    result = diagnose.diagnose(text, code)
    assert result.verdict == verdict, result.note
    if text.startswith(FUSED_STEP) or "capturable=True" in code:
        assert "capturable_step" in [m.slug for m in result.matches]
    if text.startswith(LENGTHS):
        assert result.matches[0].slug == "pack_padded_lengths"
    if text.startswith(NUMPY_MPS):
        assert result.matches[0].slug == "device_tensor_to_numpy"


@pytest.mark.parametrize(("text", "devices"), [
    ("device of indices (0) must match device of values (5)", ("cuda:0", "cuda:5")),  # COO prints get_device()
    ("device of crow_indices (-1) must match device of values (0)", ("cpu", "cuda:0")),  # -1: the CPU's
    ("device of ccol_indices (=cpu) must match device of values (=cuda:0)", ("cpu", "cuda:0")),
])
def test_a_sparse_tensor_s_check_names_its_two_devices(text: str, devices: tuple[str, ...]) -> None:
    facts = diagnose.read(f"RuntimeError: {text}")
    assert (facts.template, facts.devices) == ("sparse_devices", devices)


@pytest.mark.parametrize(("text", "version", "release"), [
    ("torch==2.0.1", "2.0.1", (2, 0, 1)),
    ("PyTorch version: 2.6.0.dev20241102+cu124", "2.6.0.dev20241102", None),
    ("0.5.0a0+b8ada73", "0.5.0a0", None),
    ("2.1.2+cu121", "2.1.2", (2, 1, 2)),
    ("no version here, 1.2.3 alone", None, None),
])
def test_a_version_places_the_input_only_where_it_is_a_release(text: str, version: str | None,
                                                               release: tuple[int, ...] | None) -> None:
    """A nightly or a source build carries whatever the main branch had that day: it places the input neither
    before nor after a fix."""
    assert diagnose.read_version(text) == version
    assert diagnose.release(version) == release


CPU_HOST_MESSAGE = ("RuntimeError: Attempting to deserialize object on a CUDA device but torch.cuda.is_available() is "
                    "False. If you are running on a CPU-only machine, please use torch.load with "
                    "map_location=torch.device('cpu') to map your storages to the CPU.")


def test_a_checkpoint_on_a_missing_gpu_is_the_lesson_with_the_unseen_gpu_as_its_caveat() -> None:
    """The message alone cannot tell a CPU host (the lesson, and the likelier: 17 of the 21 reports of it) from a
    GPU host whose PyTorch cannot see the GPU (a CPU-only build, a driver: no lesson of the catalog): the lesson
    comes first, and the other cause after it, with the check that tells them apart."""
    result = diagnose.diagnose(CPU_HOST_MESSAGE)
    assert result.verdict == "scenario"
    assert [m.slug for m in result.matches] == ["cuda_checkpoint_on_cpu_host"]
    assert "torch.version.cuda" in result.note
    assert "CPU-only PyTorch build" in result.note
    text = diagnose.render(result)
    assert text.index("1. cuda_checkpoint_on_cpu_host") < text.index("But: a host without the accelerator")
    lines = diagnose.summary(result).splitlines()  # what a failing test's report shows
    assert lines[0].startswith("likeliest scenario: cuda_checkpoint_on_cpu_host")
    assert lines[-2].startswith("but: a host without the accelerator is this lesson's case. If this host has one")
    assert lines[-1] == "the lesson: samedevice show cuda_checkpoint_on_cpu_host"


@pytest.mark.parametrize(("text", "code"), [
    (CPU_HOST_MESSAGE, 'device = torch.device("cpu")\nmodel.load_state_dict(torch.load("last.pt"))\n'),
    (CPU_HOST_MESSAGE.replace("CUDA", "EMULATED").replace("cuda", "emulated"), ""),
    ("RuntimeError: Attempting to deserialize object on CUDA device 1 but torch.cuda.device_count() is 1. Please use "
     "torch.load with map_location to map your storages to an existing device.", ""),
], ids=["code_on_a_cpu_host", "the_emulator_s_absent_host", "an_index_the_host_lacks"])
def test_a_checkpoint_on_a_missing_device_is_the_lesson_where_the_host_lacks_it(text: str, code: str) -> None:
    """Code that runs on CPU by design, the emulator's absent host (no device by design), and an index past the
    host's device count (a checkpoint from cuda:1 on a one-GPU box: the page's second message) are the lesson."""
    result = diagnose.diagnose(text, code)
    assert result.verdict == "scenario"
    assert result.matches[0].slug == "cuda_checkpoint_on_cpu_host"


def test_a_cpu_only_build_asked_for_cuda_is_the_lesson_only_in_a_load() -> None:
    """"Torch not compiled with CUDA enabled" is any .cuda() on a CPU-only build (no lesson: install the CUDA build
    or ask for the CPU) and, from an old torch.load, a GPU checkpoint on that build (the lesson)."""
    message = "AssertionError: Torch not compiled with CUDA enabled"
    bare = diagnose.diagnose(message)
    assert bare.verdict == "not_in_catalog"
    assert "CPU-only build" in bare.note
    assert [m.slug for m in bare.matches] == ["cuda_checkpoint_on_cpu_host"]
    loading = diagnose.diagnose(message, 'model = Model.load_from_checkpoint("gpu.ckpt")\n')
    assert loading.verdict == "scenario"
    assert loading.matches[0].slug == "cuda_checkpoint_on_cpu_host"


def test_1_x_addmm_s_cpu_out_is_the_layer_s_side() -> None:
    """1.x's addmm made `out` with the bias's options: "Tensor for 'out' is on CPU" is a layer left on CPU, where
    "argument #2 'mat1' is on CPU" is its input."""
    out = diagnose.diagnose("RuntimeError: Tensor for 'out' is on CPU, Tensor for argument #1 'self' is on CPU, but "
                            "expected them to be on GPU (while checking arguments for addmm)")
    assert out.facts.side == "weights"
    assert out.matches[0].slug == "model_not_moved"
    mat1 = diagnose.diagnose("RuntimeError: Tensor for argument #2 'mat1' is on CPU, but expected it to be on GPU "
                             "(while checking arguments for addmm)")
    assert mat1.facts.side == "input"
    assert mat1.matches[0].slug == "batch_not_moved"


FORWARD_RAISES = """Traceback (most recent call last):
  File "train.py", line 40, in <module>
    output = model(x)
  File "/opt/venv/lib/python3.11/site-packages/torch/nn/modules/module.py", line 1789, in _call_impl
    return forward_call(*args, **kwargs)
  File "/home/me/project/net.py", line 21, in forward
    return self.fc(x) * self.scale
RuntimeError: Expected all tensors to be on the same device, but found at least two devices, cuda:0 and cpu!"""


def test_a_raise_in_the_user_s_forward_is_read_there() -> None:
    """A raise in a forward of the user's own code is a frame of its own, which the scenarios whose broken code raises
    there claim; the code and the call that led there decide among them: a model's plain attribute, or a loss's."""
    facts = diagnose.read(FORWARD_RAISES)
    assert "user_forward" in facts.frames
    result = diagnose.diagnose(FORWARD_RAISES, "self.scale = torch.linspace(0.5, 1.5, 16)\n")
    assert result.matches[0].slug == "plain_tensor_attribute"
    in_a_loss = FORWARD_RAISES.replace("output = model(x)", "loss = criterion(model(x), y)").replace(
        "self.fc(x) * self.scale", "(self.weight * (input - target) ** 2).mean()")
    result = diagnose.diagnose(in_a_loss, "self.weight = torch.tensor([1.0, 2.0])\n")
    assert result.matches[0].slug == "custom_loss_weight"
    for library in ("/opt/venv/lib/python3.11/site-packages/torch/nn/modules/linear.py",
                    "/home/me/pytorch/torch/nn/modules/linear.py"):  # torch's own, installed or a source checkout
        deeper = FORWARD_RAISES.replace("RuntimeError", f'  File "{library}", line 125, in forward\n'
                                        "    return F.linear(input, self.weight, self.bias)\nRuntimeError", 1)
        assert "user_forward" not in diagnose.read(deeper).frames
    assert "model_moved" in diagnose.read_code("model = harness.new_model(Net).to(device)\n")
    assert "model_moved" not in diagnose.read_code("out = model(x).to(device)\n")  # the output's move


def test_a_bmm_s_second_argument_is_not_a_layer_s_weight() -> None:
    """mat2 is nn.Linear's weight in addmm; in a bmm of two activations it says nothing of the model's weights, and
    the op words match whole (`mm` is not `bmm`)."""
    facts = diagnose.read("RuntimeError: Expected object of device type cuda but got device type cpu for argument #2 "
                          "'mat2' in call to _th_bmm")
    assert facts.side is None
    assert diagnose.op_is("wrapper_CUDA_addmm", "addmm")
    assert not diagnose.op_is("_th_bmm", "mm")
    assert diagnose.op_is("wrapper_CUDA__foreach_add_", "_foreach")
    linear = diagnose.read("RuntimeError: Expected object of device type cuda but got device type cpu for argument #2 "
                           "'mat2' in call to _th_addmm")
    assert linear.side == "weights"


def test_a_state_updated_in_place_raises_in_its_update_s_op() -> None:
    """An optimizer's or an EMA's state left on CPU raises in the update's elementwise op (add_, lerp_, a foreach);
    a message naming a bmm is no such update, and code that moves the model rules out "the model is never moved"."""
    bmm = "RuntimeError: Expected object of device type cuda but got device type cpu for argument #2 'mat2' in call to _th_bmm"
    slugs = [m.slug for m in diagnose.diagnose(bmm, "mps = MPS(input_dim=784).to(device)\n").matches]
    assert not {"sgd_momentum", "adam_exp_avg", "wrong_load_order", "ema_shadow", "model_not_moved"} & set(slugs)
    assert "factory_in_forward" in slugs
    update = ("RuntimeError: Expected all tensors to be on the same device, but found at least two devices, cuda:0 "
              "and cpu! (when checking argument for argument tensors in method wrapper_CUDA___foreach_add_)")
    assert diagnose.score(diagnose.read(update), registry.get("sgd_momentum")) is not None
    assert diagnose.score(diagnose.read(bmm), registry.get("sgd_momentum")) is None


@pytest.mark.parametrize(("code", "moved"), [
    ("model.to(device)\n", True), ("net = Net().to(device)\n", True), ("self.cuda()\n", True),
    ("x = torch.Tensor(batch).to(device)\n", False), ("x = Variable(x).cuda()\n", False),
    ("model_inputs = model_inputs.to(device)\n", False), ("model.to(torch.float16)\n", False),
    ("model.to('cpu')\n", False), ("model = torch.nn.Linear(200, 1, bias=True).to(device)\n", True),
    ("self.pos = nn.Parameter(torch.zeros(1, 16, 64)).to(device)\n", False),
    ("head = nn.Sequential(nn.Linear(4, 2)).cuda()\n", True),
])
@pytest.mark.parametrize("fragment", [False, True], ids=["parsed", "read_as_text"])
def test_a_model_s_move_is_told_from_a_tensor_s_and_a_cast(code: str, moved: bool, fragment: bool) -> None:
    """Only a model moved to an accelerator counts against "the model is never moved": a tensor built and moved, a
    name that merely starts with model, a cast and a move to the CPU do not; alike where the code parses and in a
    fragment read as text."""
    assert ("model_moved" in diagnose.read_code(code + ("if ready:\n" if fragment else ""))) is moved


def test_a_bare_meta_message_is_the_meta_model_s_or_the_offload_s() -> None:
    """A model built on meta and loaded without assign=True, and an offload that rests its weights on meta, both
    give it (offload_device_read's own test asserts it): alone, the message names neither; the code tells."""
    text = "NotImplementedError: Tensor on device meta is not on the expected device cuda:0!"
    result = diagnose.diagnose(text)
    assert result.verdict == "ambiguous"
    assert {m.slug for m in result.matches} == {"meta_param_not_materialized", "offload_device_read"}
    offloaded = diagnose.diagnose(text, "pipe.enable_sequential_cpu_offload()\n")
    assert offloaded.verdict == "scenario"
    assert offloaded.matches[0].slug == "offload_device_read"


@pytest.mark.parametrize("op", ["wrapper_CUDA__native_layer_norm", "wrapper_CUDA___prelu_kernel",
                                "wrapper_CUDA___fused_rms_norm", "wrapper_CUDA__addmm"])
def test_a_norm_layer_s_weight_is_a_layer_s_weight(op: str) -> None:
    """A norm layer's or PReLU's `weight` on CPU is the model's weights (and `_fused_rms_norm` is no fused optimizer)."""
    result = diagnose.diagnose("RuntimeError: Expected all tensors to be on the same device, but got weight is on cpu, "
                               f"different from other tensors on cuda:0 (when checking argument in method {op})")
    assert result.facts.side == "weights"
    assert "capturable_step" not in [m.slug for m in result.matches]


def test_the_unseen_gpu_note_is_cuda_s_and_a_cpu_host_is_read_from_the_load() -> None:
    """The CPU-only-build note is about CUDA: an MPS checkpoint on a host without MPS is the lesson. A `device='cpu'`
    keyword on one tensor does not make a GPU script a CPU host's; `map_location='cpu'` or `device = 'cpu'` does."""
    mps = diagnose.diagnose(CPU_HOST_MESSAGE.replace("CUDA", "MPS").replace("cuda", "mps"))
    assert mps.verdict == "scenario"
    assert not mps.note
    gpu_script = "device = torch.device('cuda')\nmask = torch.zeros(10, device='cpu')\nckpt = torch.load('last.pt')\n"
    assert "PyTorch cannot see it" in diagnose.diagnose(CPU_HOST_MESSAGE, gpu_script).note
    assert not diagnose.diagnose(CPU_HOST_MESSAGE, "device = 'cpu'\nckpt = torch.load('last.pt')\n").note


@pytest.mark.parametrize("code", [
    "self.heads = [nn.Linear(8, 1) for _ in range(3)]\nself.to(device)\n",
    "class Critic(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
    "        self.heads = [nn.Linear(8, 1) for _ in range(3)]\n",
], ids=["lines_of_a_method", "a_whole_class"])
def test_layers_in_a_plain_list_are_read_in_a_fragment_too(code: str) -> None:
    """`self.heads = [nn.Linear(...)]` pasted on its own (lines of __init__, no def around them) is read as in a
    class; `self.to(device)` is the module's own move, not a tensor's."""
    signals = diagnose.read_code(code)
    assert "plain_list_layers" in signals
    assert "model_never_moved" not in signals


def test_a_layer_built_in_forward_and_layers_appended_to_a_plain_list() -> None:
    """A layer built inside forward is built on the CPU, as a factory there is (an activation, which has no
    weights, is not); layers appended one by one to a list assigned in __init__ are a plain list's. Both read in a
    method pasted with its class's indent."""
    method = ("    def forward(self, x):\n        x = self.conv(x)\n        x = nn.BatchNorm2d(self.features)(x)\n"
              "        return nn.ReLU()(x)\n")
    assert "factory_in_forward" in diagnose.read_code(method)
    assert "factory_in_forward" in diagnose.read_code(method + "  )")  # no parse: the text's rule
    harmless = "    def forward(self, x):\n        return nn.ReLU()(nn.functional.relu(x))\n"
    assert "factory_in_forward" not in diagnose.read_code(harmless)
    appended = ("    def __init__(self):\n        super().__init__()\n        self.convs = []\n"
                "        for i in range(3):\n            self.convs.append(nn.Conv1d(1, 1, 3))\n")
    assert "plain_list_layers" in diagnose.read_code(appended)
    assert "plain_list_layers" in diagnose.read_code(appended + "  )")
    module_list = appended.replace("self.convs = []", "self.convs = nn.ModuleList()")
    assert "plain_list_layers" not in diagnose.read_code(module_list)


IPYTHON_ARROWS = """.../torch_geometric/utils/coalesce.py in coalesce(edge_index, edge_attr, num_nodes, reduce)
     67     dim_size = edge_index.size(1)
---> 68     idx = torch.arange(0, nnz).sub_(mask.logical_not_().cumsum(dim=0))
     69

RuntimeError: Expected all tensors to be on the same device, but found at least two devices, cuda:0 and cpu!"""


def test_the_line_that_raised_making_a_tensor_without_device_is_a_factory() -> None:
    """The line under the deepest frame (Python's quoted line, IPython's `--->` arrow) is the one that raised: a
    factory on it without device= made the CPU tensor, whichever function it is in."""
    assert diagnose.raising_line(IPYTHON_ARROWS).startswith("idx = torch.arange(0, nnz)")
    assert diagnose.raising_line(OPTIMIZER_TRACEBACK) == "sgd(params, d_p_list, momentum_buffer_list)"
    result = diagnose.diagnose(IPYTHON_ARROWS)
    assert "factory_raised" in result.facts.code
    assert result.matches[0].slug == "factory_in_forward"
    assert "the code: the line that raised makes a tensor without device=" in result.matches[0].why
    with_device = IPYTHON_ARROWS.replace("torch.arange(0, nnz)", "torch.arange(0, nnz, device=mask.device)")
    assert "factory_raised" not in diagnose.read(with_device).code


def test_a_tensor_attribute_read_on_the_line_that_raised_is_a_plain_attribute() -> None:
    """A module's tensor attribute read as an operand on the line that raised (`(x - self.mean) / self.std`) is one
    that `.to` skipped: a plain attribute, in a loss of one's own (a loss file or package) the loss weight's lesson.
    A layer's call (`self.fc(x)`) or an attribute's update (`self.count += 1`) is not."""
    loss = ('  File "/w/srgan/loss.py", line 156, in forward\n    source = (source - self.mean) / self.std\n'
            "RuntimeError: Expected all tensors to be on the same device, but found at least two devices, cuda:0 and "
            "cpu!")
    result = diagnose.diagnose(loss)
    assert "attribute_raised" in result.facts.code
    assert "user_loss" in result.facts.frames
    assert result.matches[0].slug == "custom_loss_weight"
    model = loss.replace("srgan/loss.py", "sam/tiny_vit.py").replace(
        "source = (source - self.mean) / self.std", "attn = (q @ k.transpose(-2, -1)) * self.scale")
    assert diagnose.diagnose(model).matches[0].slug == "plain_tensor_attribute"
    for line in ("x = self.fc(x)", "self.count += 1", "return self.layers[0](x)"):
        assert "attribute_raised" not in diagnose.read(loss.replace("source = (source - self.mean) / self.std",
                                                                    line)).code


@pytest.mark.parametrize(("line", "read"), [
    ("self.window = getattr(torch, window)(win_length)", True), ('self.w = getattr(torch, "hann_window")(400)', True),
    ("self.act = getattr(nn, act)()", False), ("self.fn = getattr(torch, name)", False),
    ('self.device = getattr(torch, "device")("cuda")', False), ('self.g = getattr(torch, "Generator")()', False),
])
def test_a_factory_chosen_by_name_kept_as_an_attribute_is_a_plain_tensor(line: str, read: bool) -> None:
    """`getattr(torch, "hann_window")(n)` is a factory called by name (audio code picks its window so): kept as
    `self.<name>`, it is a plain tensor attribute, in parsed code and in a fragment alike; a layer or a function
    looked up by name is not."""
    code = f"class STFT:\n    def __init__(self, window, win_length):\n        {line}\n"
    assert ("plain_tensor_attr" in diagnose.read_code(code)) is read
    assert ("plain_tensor_attr" in diagnose.read_code(code + "    def broken(:\n")) is read


def test_modules_in_a_plain_dict_and_a_tensor_made_in_a_pasted_fragment() -> None:
    """Instances of module classes kept in a plain dict (`{"acc": metrics.Accuracy()}`) are a plain container's, as
    torch.nn's layers are; a few lines pasted outside any function that make a tensor without device= and move
    nothing point at that tensor (kept as `self.<name>`, at a plain attribute instead)."""
    metrics = 'def __init__(self):\n    self.train_metrics = {"top1": metrics.Accuracy(top_k=1)}\n'
    assert "plain_list_layers" in diagnose.read_code(metrics)
    assert "plain_list_layers" not in diagnose.read_code("def __init__(self):\n    self.w = [torch.ones(3)]\n")
    message = ("RuntimeError: Expected all tensors to be on the same device, but found at least two devices, cuda:0 "
               "and cpu!")
    fragment = "threshold = torch.tensor([threshold], dtype=preds.dtype)\nhyp = (preds > threshold).float()\n"
    result = diagnose.diagnose(message, fragment)
    assert "factory_no_device" in result.facts.code
    assert result.matches[0].slug == "factory_in_forward"
    for other in (fragment + "preds = preds.to(device)\n", "def f(p):\n    " + fragment.replace("\n", "\n    "),
                  "self.threshold = torch.tensor([0.5])\n", fragment + "loader.cpu()\n"):
        assert "factory_no_device" not in diagnose.read(message, other).code


MISMATCH = "RuntimeError: Expected all tensors to be on the same device, but found at least two devices, cuda:0 and cpu!"


def _raising(line: str, path: str = "/home/me/net.py") -> str:
    return f'  File "train.py", line 9, in <module>\n    out = model(x)\n  File "{path}", line 21, in forward\n' \
           f"    {line}\n{MISMATCH}"


@pytest.mark.parametrize("line", [
    "if self.training:", "x = F.dropout(x, p=self.p, training=self.training)", "x = x.view(b, n, self.num_heads, -1)",
    "for layer in self.layers:", "self.h, self.c = self.lstm(x)", "x = self.fc(x)",
])
def test_an_attribute_that_is_no_operand_is_no_plain_attribute(line: str) -> None:
    """A flag, a size, a loop over layers, a layer's call: `self.<name>` on the line that raised is an operand of
    arithmetic before it speaks for a plain tensor attribute."""
    assert "attribute_raised" not in diagnose.read(_raising(line)).code


@pytest.mark.parametrize(("line", "read"), [
    ("x = (x - self.min[None, ...]) / self.denominator[None, ...]", True),
    ("y = x * self.scale[:, None] + 1", True), ("y = self.mean[1:-1] - x", True),
    ("x = x + self.pe[:, :x.size(1)]", True), ("att = att + self.bias[:, :, :T, :T]", True),
    ("y = x + self.table[idx]", False), ("y = x + self.table[0]", False), ("y = x + self.blocks[i](x)", False),
    ("y = x + self.table[idx, :]", False), ("x = x + self.a[" + ": " * 40 + "?", False),  # an unclosed subscript
])
def test_an_attribute_reshaped_by_a_subscript_is_still_an_operand(line: str, read: bool) -> None:
    """`self.mean[None, ...]` (None, an ellipsis, slices) reshapes the attribute: it is still the attribute read as
    an operand. A lookup by an index (`self.table[idx]`, `self.blocks[i](x)`) reads something else."""
    assert ("attribute_raised" in diagnose.read(_raising(line)).code) is read


@pytest.mark.parametrize(("line", "read"), [
    ("return th.mm(latent_sde, self.exploration_mat)", True), ("y = torch.matmul(self.proj, x)", True),
    ("x = self.weights.index_select(0, ids.view(-1))", True), ("y = torch.where(mask, self.fill, x)", True),
    ("x = F.conv2d(x, self.weight, self.bias, self.stride)", False), ("y = self.weight.mm(x)", False),
    ("y = torch.cat([x, self.cls_token], dim=1)", False), ("y = torch.clamp(x, min=self.lo)", False),
    ("h = self.encoder.forward(x)", False), ("h = torch.zeros(self.num_layers, b, d)", False),
    ("y = torch.arange(self.max_len)", False), ("return torch.nn.functional.linear(x, self.w)", True),
])
def test_an_attribute_given_to_a_torch_function_is_an_operand(line: str, read: bool) -> None:
    """A module's tensor attribute among a torch function's first two arguments, or the tensor a method that reads
    another is called on, is an operand too; a custom layer's own weight and bias (registered parameters) are not."""
    assert ("attribute_raised" in diagnose.read(_raising(line)).code) is read


def test_a_layer_s_argument_does_not_count_where_the_line_reads_a_module_s_attribute() -> None:
    """`th.mm(latent, self.exploration_mat)` failing on `mat2`: the second operand is the module's attribute, not a
    layer's weight, so the argument and the op do not speak for a model left on the CPU; the plain attribute leads."""
    message = ("RuntimeError: Expected all tensors to be on the same device, but found at least two devices, cuda:0 "
               "and cpu! (when checking argument for argument mat2 in method wrapper_CUDA_mm)")
    text = _raising("return th.mm(latent_sde, self.exploration_mat)", "/x/site-packages/sb/distributions.py")
    result = diagnose.diagnose(text.replace(MISMATCH, message))
    assert [m.slug for m in result.matches] == ["plain_tensor_attribute", "custom_loss_weight", "model_not_moved"]
    assert "the argument is `mat2`, but the line that raised reads a module's tensor attribute, not a layer's " \
           "weight" in result.matches[2].why
    # a parameter the code registers is moved by `.to`: no plain attribute
    registered = diagnose.diagnose(text.replace(MISMATCH, message),
                                   "class P(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
                                   "        self.exploration_mat = nn.Parameter(torch.zeros(4, 4))\n")
    assert "attribute_raised" not in registered.facts.code
    # the input's side on the CPU (`mat2` named on the device): the batch's scenarios keep the argument
    input_side = diagnose.diagnose(_raising("return torch.matmul(x, self.W)").replace(
        MISMATCH, message.replace("cuda:0 and cpu!", "cpu and cuda:0!")))
    assert input_side.matches[0].slug == "batch_not_moved"
    layer = diagnose.diagnose(_raising("return F.linear(input, self.weight, self.bias)",
                                       "/x/site-packages/torch/nn/modules/linear.py").replace(MISMATCH, message))
    assert layer.matches[0].slug == "model_not_moved"


def test_a_trainer_s_own_step_is_no_optimizer_step() -> None:
    """A quoted `self.step()` (a trainer's loop) or `env.step(action)` is no optimizer's step; `opt_g.step()` and
    `scaler.step(optimizer)` are."""
    for line, read in (("self.step()", False), ("obs, r, done, info = env.step(action)", False),
                       ("opt_g.step()", True), ("scaler.step(optimizer)", True), ("optimizer.step()", True),
                       ("self.optimizers().step()", True), ("optimizers[0].step()", True), ("self.adam.step()", True),
                       ("self._scaler.step(self.optimizer)", True), ("model_engine.step()", True)):
        text = f'  File "train.py", line 9, in train\n    {line}\n{MISMATCH}'
        assert ("optimizer_step" in diagnose.read(text).frames) is read, line


def test_torch_s_own_line_is_no_user_attribute_nor_factory() -> None:
    """The deepest frame in torch's own files (`F.cross_entropy(input, target, weight=self.weight)`) reads the
    layer's attributes, which `.to` moves: no plain attribute, and the loss's usual causes stay first."""
    text = _raising("return F.cross_entropy(input, target, weight=self.weight,",
                    "/x/site-packages/torch/nn/modules/loss.py").replace("out = model(x)", "loss = criterion(out, y)")
    result = diagnose.diagnose(text)
    assert "attribute_raised" not in result.facts.code
    assert result.matches[0].slug == "loss_class_weights"


@pytest.mark.parametrize("line", [
    "mask = torch.tensor(mask).to(x.device)", "pos = torch.arange(n).cuda()", "pos = torch.arange(n).type_as(x)",
    "buf = torch.empty(n, **factory_kwargs)", "idx = np.arange(n)", "y = x + torch.zeros(",
])
def test_a_factory_given_its_device_on_the_line_that_raised_is_no_cpu_tensor(line: str) -> None:
    """Moved on the same line, given the device by `**kwargs` or `type_as`, numpy's (no device), or a call cut at
    the line's end (its `device=` on the next line, which Python does not quote): no factory made on the CPU."""
    assert "factory_raised" not in diagnose.read(_raising(line)).code


@pytest.mark.parametrize("code", [
    "arr = np.zeros((10, 3))\nds = TensorDataset(torch.from_numpy(arr))\nloader = DataLoader(ds, batch_size=4)\n",
    "torch.set_default_device('cuda')\nx = torch.randn(4, 3)\n",
    "with torch.device('cuda'):\n    x = torch.randn(4, 3)\n",
    "mask = torch.ones(3, 3, **kw)\n",
    "idx = np.arange(10)\n",
])
def test_a_fragment_that_places_its_tensors_is_no_factory_left_on_the_cpu(code: str) -> None:
    """A data pipeline (the batch's lesson), a default device, `**kw`, numpy: no tensor made on the CPU by
    mistake."""
    assert "factory_no_device" not in diagnose.read(MISMATCH, code).code


@pytest.mark.parametrize("value", ["[T.RandomCrop(32), T.ToTensor()]", "[Path(p) for p in glob(root)]",
                                   "{'loss': AverageMeter()}"])
def test_a_list_of_transforms_paths_or_meters_is_no_list_of_layers(value: str) -> None:
    """Only instances of classes named as modules are (a layer, a block, a metric) count as layers in a plain
    container."""
    assert "plain_list_layers" not in diagnose.read_code(f"def __init__(self):\n    self.items = {value}\n")


@pytest.mark.parametrize("code", ["model = AutoModel.from_pretrained(n).to(device)\nx = x.to(device)\nout = model(x)\n",
                                  "model = torchvision.models.resnet50().cuda()\nx = x.cuda()\nout = model(x)\n"])
def test_a_model_loaded_and_moved_at_once_is_moved(code: str) -> None:
    assert "model_moved" in diagnose.read_code(code)
    assert "model_never_moved" not in diagnose.read_code(code)


def test_a_device_map_shows_the_second_accelerator() -> None:
    """A message cut before its devices, with code that splits the model by a device map: the split model is a
    candidate (a second accelerator shows in the code)."""
    result = diagnose.diagnose("RuntimeError: Expected all tensors to be on the same device, but found at least two "
                               "devices", 'model = AutoModelForCausalLM.from_pretrained(name, device_map="auto")\n')
    assert "model_split_across_devices" in [m.slug for m in result.matches]


@pytest.mark.parametrize("code", ["path = 'caf\udce9'", "y = " + "+".join(["a"] * 3000),
                                  "x" + ".a" * 1200 + ".to(device)", "for " + "a " * 10000, "s = '\\d'\n"])
def test_code_the_parser_cannot_take_falls_back_without_a_crash(code: str) -> None:
    """Bytes that were not UTF-8, code nested past the recursion limit or the parser's memory, an invalid escape
    (a SyntaxWarning, kept quiet): the diagnosis answers."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        result = diagnose.diagnose(MISMATCH, code)
    assert result.verdict == "ambiguous"


def test_the_rules_the_parse_alone_reads_and_their_details() -> None:
    """An indented method parses (a module built and called is read only by the parse), a window function is a
    factory, and DGL's graph check is the batch's side."""
    indented = "    effect = PitchShift(16000, 1)\n    effect(torch.randn(3, device='cuda'))\n"
    assert "model_never_moved" in diagnose.read_code(indented)
    forward = "class M(nn.Module):\n    def forward(self, x):\n        return torch.stft(x, 400, window=torch.hann_window(400))\n"
    assert "factory_in_forward" in diagnose.read_code(forward)
    dgl = diagnose.read('DGLError: Cannot assign node feature "h" on device cuda:0 to a graph on device cpu.')
    assert dgl.side == "input"


def test_cudnn_s_ctc_loss_wants_its_targets_on_the_cpu() -> None:
    """cuDNN's CTC loss takes targets and lengths on the CPU: a device error that no lesson teaches, said so with
    what to do."""
    result = diagnose.diagnose("RuntimeError: Expected tensor to have CPU Backend, but got tensor with CUDA Backend "
                               "(while checking arguments for cudnn_ctc_loss)")
    assert (result.verdict, result.matches) == ("not_in_catalog", ())
    assert "int64 targets" in result.note


def test_a_module_built_and_called_but_never_moved_is_read_from_a_session() -> None:
    """An instance of a class that the code then calls is a module, whatever its name (`effect = PitchShift()`);
    with its input made on the device and no move of it, the model is left behind. A session's `>>>` prompts and
    `%time` are read as the code they hold; the traceback's own cut lines do not spoil the parse of the code."""
    session = (">>> import torch as t\n>>> m = CubicBSplineGrid3d(resolution=(6, 10, 10))\n"
               ">>> %time m(t.rand(50, 3, device='cuda'))\n")
    assert "model_never_moved" in diagnose.read_code(session)
    script = 'waveform = torch.randn(1600, device="cuda")\neffect = PitchShift(16000, 1)\nout = effect(waveform)\n'
    assert "model_never_moved" in diagnose.read_code(script)
    moved = script.replace("out = effect", "effect.to(device)\nout = effect")
    assert "model_never_moved" not in diagnose.read_code(moved)
    assert "model_moved" in diagnose.read_code(moved)
    traceback = ('  File "/x/torch/functional.py", line 641, in stft\n    return _VF.stft(input, n_fft, hop_length,\n'
                 "RuntimeError: stft input and window must be on the same device but got self on cuda:0 and window "
                 "on cpu")
    result = diagnose.diagnose(traceback, script)
    assert "model_never_moved" in result.facts.code
    assert result.matches[0].slug == "model_not_moved"


def test_the_scheduler_s_wrapper_is_no_step_and_an_adam_of_its_own_is_an_adam() -> None:
    """lr_scheduler.py's wrapper of `optimizer.step` is not torch.optim's step; an optimizer of its own whose step
    updates `exp_avg` (transformers' old AdamW) is an Adam, whose moments the load casts as torch.optim's."""
    text = ('  File "/x/site-packages/torch/optim/lr_scheduler.py", line 67, in wrapper\n'
            "    return wrapped(*args, **kwargs)\n"
            '  File "/x/site-packages/transformers/optimization.py", line 155, in step\n'
            "    exp_avg.mul_(beta1).add_(1.0 - beta1, grad)\n"
            "RuntimeError: expected device cpu but got device cuda:0")
    facts = diagnose.read(text)
    assert facts.site == "custom_optimizer_step"
    assert "optimizer_step" not in facts.frames
    assert "adam_exp_avg" in [m.slug for m in diagnose.diagnose(text).matches]
    assert "adam_exp_avg" not in [m.slug for m in diagnose.diagnose(THIRD_PARTY_STEP).matches]


def test_code_does_not_turn_another_error_into_a_device_one() -> None:
    """An error the templates do not read stays no device error, whatever the pasted code suggests."""
    result = diagnose.diagnose("ValueError: too many values to unpack", "for x, y in loader:\n    x = x.to(device)\n")
    assert result.verdict == "not_device_error"
    assert not result.found


def test_what_pytorch_raises_on_a_meta_model_s_move_and_a_device_tensor_s_numpy_is_read() -> None:
    """The messages as PyTorch raises them: `.to(device)` of a model built on meta (meta_param_not_materialized's
    mechanism, or offloaded weights), and `.numpy()` of a device tensor (device_tensor_to_numpy's message, which
    no other scenario gives: named alone)."""
    import torch

    from samedevice import emulator

    with torch.device("meta"):
        model = torch.nn.Linear(2, 2)
    with pytest.raises(NotImplementedError, match="Cannot copy out of meta tensor") as meta:
        model.to(emulator.device())
    result = diagnose.diagnose(f"{meta.type.__name__}: {meta.value}")
    assert result.facts.template == "meta_copy"
    assert result.matches[0].slug == "meta_param_not_materialized"
    assert {m.slug for m in result.matches} == {"meta_param_not_materialized", "offload_device_read"}
    with pytest.raises(TypeError, match="numpy") as numpy:
        torch.ones(2, device=emulator.device()).numpy()
    result = diagnose.diagnose(f"{numpy.type.__name__}: {numpy.value}")
    assert (result.verdict, result.facts.devices) == ("scenario", ("emulated:0",))
    assert [m.slug for m in result.matches] == ["device_tensor_to_numpy"]


THIRD_PARTY_STEP = """Traceback (most recent call last):
  File "train.py", line 88, in <module>
    optimizer.step()
  File "/usr/lib/python3.10/site-packages/torch/optim/optimizer.py", line 487, in wrapper
    out = func(*args, **kwargs)
  File "/usr/lib/python3.10/site-packages/dadaptation/dadapt_adam.py", line 153, in step
    d_numerator.add_(torch.dot(grad, s))
RuntimeError: Expected all tensors to be on the same device, but found at least two devices, cuda:0 and cpu!"""


def test_a_third_party_optimizer_s_step_is_not_torch_optim_s() -> None:
    """Raised in the step of an optimizer outside torch.optim: its state left behind by the load order, or a tensor
    in its param groups that no load moves; never SGD's or Adam's own. Code that puts a tensor in a group decides."""
    facts = diagnose.read(THIRD_PARTY_STEP)
    assert facts.site == "custom_optimizer_step"
    slugs = [m.slug for m in diagnose.diagnose(THIRD_PARTY_STEP).matches]
    assert {"wrong_load_order", "param_group_tensor"} <= set(slugs)
    assert not {"sgd_momentum", "adam_exp_avg"} & set(slugs)
    code = ("class Prodigy(torch.optim.Optimizer):\n    def step(self, closure=None):\n        group = self.param_groups[0]\n"
            "        if 'd_numerator' not in group:\n            group['d_numerator'] = torch.tensor([0.0])\n")
    for text in (THIRD_PARTY_STEP, THIRD_PARTY_STEP.splitlines()[-1]):
        result = diagnose.diagnose(text, code)
        assert (result.verdict, result.matches[0].slug) == ("scenario", "param_group_tensor")
    assert "param group" in " ".join(result.matches[0].why)
    gym = diagnose.read(THIRD_PARTY_STEP.replace("dadaptation/dadapt_adam.py", "gym/core.py"))
    assert gym.site is None  # a step that is not an optimizer's
    assert diagnose.read_code("param_group['d'] = torch.tensor([0.0])\n") == ("group_tensor",)


def test_a_trainer_s_wrapper_of_torch_optim_s_step_is_no_optimizer_of_its_own() -> None:
    """accelerate's and Lightning's optimizer wrappers (a `step` in an optimizer.py) hand on to torch.optim's step: the
    traceback is torch.optim's, and counts for no third-party optimizer."""
    for wrapper in ("accelerate/optimizer.py", "lightning/pytorch/core/optimizer.py"):
        text = THIRD_PARTY_STEP.replace("dadaptation/dadapt_adam.py", wrapper).replace(
            "RuntimeError", '  File "/usr/lib/python3.10/site-packages/torch/optim/adamw.py", line 220, in step\n'
            "    adamw(\nRuntimeError", 1)
        facts = diagnose.read(text)
        assert "custom_optimizer_step" not in facts.frames
        assert (facts.site, "adam_step" in facts.frames) == ("optimizer_step", True)


def test_pytest_frames_are_read() -> None:
    """Frames as pytest prints them (`path.py:116: in forward`) count as frames and as the raise site."""
    text = ("../site-packages/torch/nn/modules/linear.py:116: in forward\n    return F.linear(input, self.weight)\n"
            "E   RuntimeError: Expected all tensors to be on the same device, but found at least two devices, cuda:0 and cpu!")
    facts = diagnose.read(text)
    assert facts.frames == ("layer",)
    assert facts.site == "layer"


IPYTHON_7 = """RuntimeError                              Traceback (most recent call last)
<ipython-input-7-3f1c2a9d8b7e> in <module>
----> 1 loss = criterion(model(x), y)

/usr/local/lib/python3.7/dist-packages/torch/nn/modules/module.py in _call_impl(self, *input, **kwargs)
-> 1051             return forward_call(*input, **kwargs)

/usr/local/lib/python3.7/dist-packages/torch/nn/modules/linear.py in forward(self, input)
---> 96         return F.linear(input, self.weight, self.bias)

RuntimeError: Expected all tensors to be on the same device, but found at least two devices, cuda:0 and cpu!"""
IPYTHON_8 = """Cell In[5], line 3
----> 3 out = model(x)

File ~/.venv/lib/python3.11/site-packages/torch/nn/modules/module.py:1789, in Module._call_impl(self, *args, **kwargs)

Cell In[2], line 9, in Net.forward(self, x)
----> 9     return self.fc(x) * self.scale

RuntimeError: Expected all tensors to be on the same device, but found at least two devices, cuda:0 and cpu!"""


def test_a_moved_model_called_on_inputs_moved_in_the_call_points_inside_the_model() -> None:
    """`m = Net().cuda()` then `m(x.cuda())`: the model and its input are both on the device, so the CPU tensor is
    one the model makes (a factory in forward) or keeps out of `.to`'s reach (a plain attribute, a plain list), not
    the batch. A call on an input left as it is, or moved to the CPU, is the batch's case again."""
    code = "m = TimeStretch().cuda()\nout = m(torch.randn(1, 201, 400).cuda(), 1.3)\n"
    result = diagnose.diagnose(MISMATCH, code)
    assert "called_on_device" in result.facts.code
    ranked = [m.slug for m in result.matches]
    assert ranked == ["factory_in_forward", "plain_tensor_attribute", "plain_list_layers"]
    for other in (code + "out = m(x)\n", code.replace(".cuda(), 1.3", ".to('cpu'), 1.3"),
                  "model = Net().to(device)\nout = model(batch)\n"):
        assert "called_on_device" not in diagnose.read(MISMATCH, other).code, other
    # an input made on the device, or moved before the call, and a module built, moved and called at once; on MPS
    # too, where it speaks against a batch placed by a CUDA-only picker
    made = 'x = torch.rand(8, 3, 64, 64, device="mps")\nK.RandomLinearIllumination(p=1.0).to(x.device)(x)\n'
    mps = MISMATCH.replace("cuda:0", "mps:0")
    result = diagnose.diagnose(mps, made)
    assert "called_on_device" in result.facts.code
    assert result.verdict == "ambiguous"
    assert [m.slug for m in result.matches][:2] == ["factory_in_forward", "plain_tensor_attribute"]
    assert "called_on_device" in diagnose.read(MISMATCH, "net = Net().cuda()\nx = x.cuda()\nnet(x)\n").code
    # the layer's input on the CPU (`mat1` of addmm) puts the batch first, unless the code shows it on the device
    mat1 = MISMATCH + " (when checking argument for argument mat1 in method wrapper_CUDA_addmm)"
    assert diagnose.diagnose(mat1).matches[0].slug == "batch_not_moved"
    ranked = [m.slug for m in diagnose.diagnose(mat1, "m = Net().cuda()\nout = m(x.cuda())\n").matches]
    assert "batch_not_moved" not in ranked
    assert "mps_device_pick" not in ranked
    assert "called_on_device" not in diagnose.read(MISMATCH, "net = Net().cuda()\nx = x.cpu()\nnet(x)\n").code
    # a model built and moved in a helper, then bound to its return: the binding says nothing of where it is, the
    # move in the helper does; rebound to a class built anew, it is unmoved again
    helper = "def build():\n    model = Net()\n    model = model.to(device)\n    return model\nmodel = build()\n" \
             "x = x.to(device)\nout = model(x)\n"
    assert "called_on_device" in diagnose.read(MISMATCH, helper).code
    rebuilt = "model = Net()\nmodel.cuda()\nmodel = Net()\nx = x.cuda()\nout = model(x)\n"
    assert "called_on_device" not in diagnose.read(MISMATCH, rebuilt).code


def test_a_module_the_code_builds_and_runs_is_moved_whatever_its_name() -> None:
    """`enc = TabNetEncoder(...)`, `enc = enc.to(device)`, `enc(x)` on a moved input: the name says no model, but the
    code builds it from a class and runs it, so its move is a model's (as `model_moved` reads it). With the weights'
    side on the CPU, the tensor left behind is inside the model: a layer out of `.to`'s reach or a plain attribute,
    and the question says so; no one of them is named alone, the code shows none of their cases."""
    code = ("enc = TabNetEncoder(input_dim=4)\nx = torch.randn(2, 4)\nenc = enc.to(device)\nx = x.to(device)\n"
            "out = enc(x)\n")
    mat2 = "RuntimeError: Tensor for argument #2 'mat2' is on CPU, but expected it to be on GPU (while checking " \
           "arguments for mm)"
    result = diagnose.diagnose(mat2, code)
    assert {"model_moved", "called_on_device"} <= set(result.facts.code)
    assert result.verdict == "ambiguous"
    assert "a tensor kept as a plain attribute" in result.note
    # moved by a statement of its own, not a binding: the same
    bare = code.replace("enc = enc.to(device)", "enc.to(device)")
    assert "called_on_device" in diagnose.read(mat2, bare).code
    # a second module built and never moved, run on the first's output: its weights are the case again
    head = ("backbone = ResNetBackbone()\nbackbone.to(device)\nhead = ClassifierHead(512, 10)\n"
            "feats = backbone(x.to(device))\nout = head(feats)\n")
    assert "called_on_device" not in diagnose.read(MISMATCH, head).code
    # a module's other methods are no move, whatever their argument: `model.train(True)`, `model.load_state_dict(sd)`
    for call in ("model.train(True)", "model.load_state_dict(sd)"):
        unmoved = f"model = Net()\n{call}\nx = x.to(device)\nout = model(x)\n"
        assert "called_on_device" not in diagnose.read(MISMATCH, unmoved).code, call


def test_a_signal_four_or_more_scenarios_claim_names_none_of_them_alone() -> None:
    """A moved model run on device inputs speaks for the lessons of a tensor the model makes or keeps (a factory in
    forward, a plain attribute, a plain list, a new head, a traced constant) and against the rest: it shows none
    of their cases, on one device or two. Code that shows one (a plain tensor attribute made in __init__) names
    it alone."""
    assert sum("called_on_device" in s.clues.code for s in registry.SCENARIOS) >= 4
    run = "model = Net().to(device)\nout = model(x.to(device))\n"
    two_gpus = MISMATCH.replace("cuda:0 and cpu", "cuda:6 and cuda:0")
    for text in (MISMATCH, two_gpus):
        assert diagnose.diagnose(text, run).verdict == "ambiguous", text
    attribute = ("class Net(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
                 "        self.fc = nn.Linear(4, 2)\n        self.scale = torch.ones(2)\n\n"
                 "    def forward(self, x):\n        return self.fc(x) * self.scale\n\n" + run)
    result = diagnose.diagnose(MISMATCH, attribute)
    assert (result.verdict, result.matches[0].slug) == ("scenario", "plain_tensor_attribute")


def test_an_exported_module_moved_and_run_on_the_device_is_the_traced_constant_s_case() -> None:
    """A module exported on the CPU, moved with `.to` and run on device inputs: the constants its trace recorded
    stay on the CPU. The moved run speaks for it as it does for a tensor made in forward."""
    code = ("exported = torch.export.export(Net(), (torch.randn(2, 9),))\na = exported.module()\n"
            "b = a.to(torch.device('cuda:0'))\nb.forward(torch.randn(2, 9, device=torch.device('cuda:0')))\n")
    rnn = "RuntimeError: Input and hidden tensors are not at the same device, found input tensor at cuda:0 and " \
          "hidden tensor at cpu"
    result = diagnose.diagnose(rnn, code)
    assert "called_on_device" in result.facts.code
    assert [m.slug for m in result.matches][:2] == ["traced_device_constant", "factory_in_forward"]


@pytest.mark.parametrize("code", [
    "model = Net().cuda()\nfor x, y in loader:\n    out = model(x.cuda())\n    loss = criterion(out, y)\n",
    "model = Net().cuda()\nout = model(x.cuda(), mask=mask)\n",
    "model = Net().cuda()\nout = model(x.cuda(), **batch)\n",
    "model = Net().cuda()\nout = model(x.cuda())\nids = model.generate(y)\n",
    "model = Net().cuda()\nout = model(x.to(weight_dtype))\n",
    "model = Net()\nout = model(x.cuda())\nmodel = model.cuda()\n",
    "model = Net().cuda()\nout = model(x.cuda())\nmodel = Net()\nout = model(x.cuda())\n",
])
def test_a_model_run_on_an_input_not_shown_on_the_device_is_the_batch_s_case(code: str) -> None:
    """A run of the model on an input left as it is (a keyword, `**batch`, another call, a cast to a dtype), before
    the model's move or after it is rebound unmoved, or in a loop whose batch holds more (the labels): the batch
    never moved stays a candidate."""
    result = diagnose.diagnose(MISMATCH, code)
    assert "called_on_device" not in result.facts.code
    assert "batch_not_moved" in [m.slug for m in result.matches]


def test_a_model_run_by_forward_or_by_keyword_on_device_inputs_counts() -> None:
    for code in ("model = Net().cuda()\nout = model.forward(x.cuda())\n",
                 "model = Net().to(device)\nout = model(input_ids=ids.to(device), mask=m.to(x.device))\n"):
        assert "called_on_device" in diagnose.read(MISMATCH, code).code, code


def test_a_local_tensor_indexed_by_device_indices_is_no_attribute_s() -> None:
    """"indices should be either on cpu or on the same device as the indexed tensor (cpu)" raised on a line that
    indexes a local tensor (`t = t[mask]`) is a tensor made on the CPU or a batch never moved, not a table or a loss
    weight kept as an attribute, even in a loss's frame; `self.table[t]` still is an attribute's."""
    indices = "RuntimeError: indices should be either on cpu or on the same device as the indexed tensor (cpu)"
    text = ('  File "train.py", line 363, in train\n    loss = compute_loss(pred, targets.to(device))\n'
            '  File "/w/yolo/utils/loss.py", line 759, in build_targets\n    layer = layer[fg_mask]\n' + indices)
    result = diagnose.diagnose(text)
    assert "local_indexed" in result.facts.code
    assert result.verdict == "ambiguous"
    assert [m.slug for m in result.matches][:2] == ["factory_in_forward", "batch_not_moved"]
    table = text.replace("layer = layer[fg_mask]", "a = self.alphas_cumprod[t]")
    assert "local_indexed" not in diagnose.read(table).code
    assert "local_indexed" not in diagnose.read(text.replace(indices, MISMATCH)).code  # another message: no table


INDICES = "RuntimeError: indices should be either on cpu or on the same device as the indexed tensor (cpu)"
# a traceback's last frame, its raising line to fill in, and the indices message
RAISED_IN_P_LOSSES = '  File "/w/ldm/models/diffusion/ddpm.py", line 1031, in p_losses\n    {}\n' + INDICES


def test_a_module_s_attribute_indexed_by_device_indices_is_the_lookup_table_s() -> None:
    """The indices message raised on a line that indexes a module's attribute (`self.logvar[t]`) is a table kept as
    a plain attribute on the CPU, its index on the device: `cpu_lookup_table`, named alone, whatever the table's
    name. A reshaping subscript (`self.mean[None]`) or another message is not a lookup."""
    named = diagnose.diagnose(RAISED_IN_P_LOSSES.format("logvar_t = self.logvar[t].to(self.device)"))
    assert (named.verdict, named.matches[0].slug) == ("scenario", "cpu_lookup_table")
    assert "attribute_indexed" in named.facts.code
    for line in ("a = self.table[:, t]", "a = self.table[..., t]", "a = self.table[-t]",
                 "a = self.scheduler.alphas_cumprod[timestep]", "return [self.table[t] for t in ts]",
                 "a = self.table[t] if t in [0, 1] else 0", "a = self.table[t].float()",
                 "self." * 40000 + "x[t]"):  # a chain of 40000 attributes, read in one pass, not from each link
        assert "attribute_indexed" in diagnose.read(RAISED_IN_P_LOSSES.format(line)).code, line[:40]
    # a reshaping subscript, a local tensor indexed, a layer of a ModuleList called, a local beside the attribute
    for line in ("m = self.mean[None, :]", "layer = layer[fg_mask]", "x = self.blocks[i](x)",
                 "out = self.heads[k](feats)[idx]", "y = x[mask] + self.table[idx]", "y = self.blocks[i].attn(x)",
                 "h = self.layers[i].emb[idx]"):
        assert "attribute_indexed" not in diagnose.read(RAISED_IN_P_LOSSES.format(line)).code, line
    another = RAISED_IN_P_LOSSES.format("logvar_t = self.logvar[t]").replace(INDICES, MISMATCH)
    assert "attribute_indexed" not in diagnose.read(another).code


def test_broadcast_s_check_is_dataparallel_s_unless_the_code_shows_ddp() -> None:
    """"All tensors must be on devices[0]" is what replicating a module off device_ids[0] met: nn.DataParallel's
    before its own check (the lesson), or 1.x's DDP over several GPUs (no lesson). Alone it says both; the code tells."""
    message = "RuntimeError: All tensors must be on devices[0]: 0"
    alone = diagnose.diagnose(message)
    assert (alone.verdict, [m.slug for m in alone.matches]) == ("ambiguous", ["dataparallel_device_ids"])
    assert "DistributedDataParallel" in alone.note
    wrapped = diagnose.diagnose(message, "model = nn.DataParallel(Net(), device_ids=[1, 2]).cuda()\n")
    assert (wrapped.verdict, wrapped.matches[0].slug) == ("scenario", "dataparallel_device_ids")
    ddp = diagnose.diagnose(message, "model = DistributedDataParallel(Net().cuda(local_rank))\n")
    assert (ddp.verdict, ddp.matches) == ("not_in_catalog", ())
    assert "device_ids=[local_rank]" in ddp.note


def test_fsdp_s_compute_device_check_is_the_current_device_s_unless_the_tensor_is_on_the_cpu() -> None:
    """FSDP makes tensors on the current device: one found off its compute device on another GPU is an index-less
    device's lesson; one on the CPU is a tensor left there, whose candidates the message cannot tell apart."""
    other_gpu = diagnose.diagnose("AssertionError: Expects tensor to be on the compute device cuda:1, was on cuda:0")
    assert (other_gpu.verdict, other_gpu.matches[0].slug) == ("scenario", "index_less_device")
    on_cpu = diagnose.diagnose("AssertionError: Expects tensor to be on the compute device cuda:0, was on cpu")
    assert on_cpu.verdict == "ambiguous"
    assert "index_less_device" not in [m.slug for m in on_cpu.matches]


def test_a_triton_kernel_s_pointer_is_inductor_s_under_compile_and_candidates_alone() -> None:
    """Triton cannot reach a CPU tensor nor another GPU's: under torch.compile the kernel is Inductor's (a 0-dim CPU
    tensor eager takes as a scalar, no lesson); alone, a tensor made on the CPU or on another GPU, never one lesson."""
    message = "ValueError: Pointer argument (at 1) cannot be accessed from Triton (cpu tensor?)"
    alone = diagnose.diagnose(message)
    assert alone.verdict == "ambiguous"
    assert [m.slug for m in alone.matches] == ["factory_in_forward", "index_less_device"]
    assert "torch.compile" in alone.note
    compiled = diagnose.diagnose(message, "@torch.compile\ndef f(a, b):\n    return a + b[0]\n")
    assert (compiled.verdict, compiled.matches) == ("not_in_catalog", ())
    assert "Run it uncompiled" in compiled.note
    frames = diagnose.diagnose('  File "/env/lib/python3.11/site-packages/torch/_dynamo/eval_frame.py", line 632, '
                               "in _fn\n    return fn(*args, **kwargs)\n" + message)
    assert frames.verdict == "not_in_catalog"


def test_a_hugging_face_model_beside_two_gpus_leans_to_the_split_and_names_it_only_with_a_device_map() -> None:
    """Two GPUs in the message: a device map's split comes before a worker's index-less device (the commoner cause
    in public reports), as a candidate; a Hugging Face model loaded or run leans further to it, still a candidate; a
    device map in the code, given in a dict of keywords too, names it."""
    message = ("RuntimeError: Expected all tensors to be on the same device, but found at least two devices, cuda:1 "
               "and cuda:0!")
    alone = diagnose.diagnose(message)
    assert alone.verdict == "ambiguous"
    assert [m.slug for m in alone.matches][:2] == ["model_split_across_devices", "index_less_device"]
    frame = ('  File "/env/lib/python3.10/site-packages/transformers/models/llama/modeling_llama.py", line 310, in '
             "forward\n    attn = torch.matmul(q, k)\n")
    for text, code in ((frame + message, ""), (message, "model = AutoModelForCausalLM.from_pretrained(name)\n")):
        leaning = diagnose.diagnose(text, code)
        assert leaning.verdict == "ambiguous"
        assert [m.slug for m in leaning.matches][:2] == ["model_split_across_devices", "index_less_device"]
        assert any(w.startswith("leaning to it") for w in leaning.matches[0].why)
        assert leaning.matches[0].score > alone.matches[0].score
    mapped = diagnose.diagnose(message, 'kwargs = {"device_map": "auto"}\nmodel = AutoModel.from_pretrained(n, **kwargs)\n')
    assert (mapped.verdict, mapped.matches[0].slug) == ("scenario", "model_split_across_devices")


@pytest.mark.parametrize(("code", "read"), [
    ("def loss(model, ids):\n    ids = torch.LongTensor(ids)\n    return model(ids)\n", True),
    ("net = Net().cuda()\nout = net(torch.from_numpy(batch))\n", True),
    ("net = Net().cuda()\nx = torch.tensor(data)\nx = x.cuda()\nout = net(x)\n", False),
    # the CPU run first (a model built and not moved yet), then the device's: no input left behind in the code
    ("t = Blur()\nx = torch.rand(1, 3, 8, 8)\nt(x)\nt = Blur().to('cuda')\nx = torch.rand(1, 3, 8, 8, "
     "device='cuda')\nt(x)\n", False),
    ("ids = torch.tensor(ids)\nprint(ids)\n", False),
    # the model rebound unmoved after a move: its run is on the CPU, by the last binding before it
    ("model = Net()\nmodel.cuda()\nmodel = Net()\nout = model(torch.LongTensor(ids))\n", False),
    ("model = Net()\nmodel = Net()\nmodel.cuda()\nout = model(torch.LongTensor(ids))\n", True),
    # a legacy CUDA constructor makes its tensor on the GPU
    ("model = Net().cuda()\nx = torch.cuda.FloatTensor(batch, nz)\nout = model(x)\n", False),
    # loaded as it is on the line of the run, before it: a run on the CPU
    ("model = AutoModel.from_pretrained(n); out = model(torch.LongTensor(ids))\n", False),
])
def test_a_model_run_on_an_input_made_on_the_cpu_is_the_batch_s_case(code: str, read: bool) -> None:
    """An input made on the CPU by torch's factory and handed to a model unmoved is a batch never moved, not a tensor
    the model makes; a CPU run before the model is moved, a moved input or a call of no model is none."""
    assert ("cpu_input" in diagnose.read("", code).code) is read
    if read:
        message = ("RuntimeError: Expected all tensors to be on the same device, but found at least two devices, "
                   "cuda:0 and cpu! (when checking argument for argument index in method wrapper_CUDA__index_select)")
        assert diagnose.diagnose(message, code).matches[0].slug == "batch_not_moved"


@pytest.mark.parametrize(("devices", "side", "first"), [
    ("input tensor at cuda:0 and parameter tensor at cpu", "weights", "model_not_moved"),
    ("input tensor at cpu and parameter tensor at cuda:0", "input", "batch_not_moved"),
])
def test_an_rnn_s_check_of_its_input_against_its_weights_tells_the_side(devices: str, side: str, first: str) -> None:
    """An RNN names its input's device and its weights': weights on the CPU are a model left there, an input on the
    CPU a batch."""
    result = diagnose.diagnose(f"RuntimeError: Input and parameter tensors are not at the same device, found {devices}")
    assert (result.facts.side, result.matches[0].slug) == (side, first)


def test_apex_s_check_of_the_model_s_parameters_is_the_model_s_side() -> None:
    """apex's amp.initialize names a parameter or buffer that is no CUDA FloatTensor: a CPU type is the model's side
    left on the CPU, the model never moved first; a CUDA HalfTensor (a `.half()` call) is no device error."""
    result = diagnose.diagnose("RuntimeError: Found buffer bn.running_mean with type torch.FloatTensor, expected "
                               "torch.cuda.FloatTensor.\nWhen using amp.initialize, you need to provide a model with "
                               "buffers\nlocated on a CUDA device before passing it")
    assert (result.facts.template, result.facts.side) == ("apex_param", "weights")
    assert result.matches[0].slug == "model_not_moved"
    half = diagnose.diagnose("Found param fc.weight with type torch.cuda.HalfTensor, expected torch.cuda.FloatTensor.")
    assert half.facts.template is None
    assert not half.found


def test_stft_s_signal_on_the_cpu_is_the_input_s_side_its_window_no_side() -> None:
    """stft names the signal (`self`) and the window. A signal on the CPU is what the transform was given (a batch);
    a window on the CPU is the transform's buffer never moved, a plain attribute, or a window made in forward
    without device=: no side, each stays a candidate."""
    message = "RuntimeError: stft input and window must be on the same device but got {}"
    signal = diagnose.diagnose(message.format("self on cpu and window on cuda:0"))
    assert (signal.facts.side, signal.matches[0].slug) == ("input", "batch_not_moved")
    assert diagnose.read(message.format("self on cpu and window on cpu")).side is None  # one device: no side
    window = diagnose.diagnose(message.format("self on cuda:0 and window on cpu"))
    assert window.facts.side is None
    assert window.verdict == "ambiguous"
    assert {"factory_in_forward", "model_not_moved"} <= {m.slug for m in window.matches[:3]}


def test_a_traceback_cut_before_its_message_names_no_lesson_alone() -> None:
    """Frames without the message (the paste ends inside the traceback): what raised and what it said are not shown,
    so the candidates the frames suggest, and a request for the last line; the same frames with the message decide."""
    frames = ('  File "/env/lib/python3.8/site-packages/transformers/trainer.py", line 1529, in _load_rng_state\n'
              '    torch.cuda.random.set_rng_state_all(checkpoint_rng_state["cuda"])\n'
              '  File "/env/lib/python3.8/site-packages/torch/cuda/random.py", line 73, in set_rng_state_all\n'
              "    set_rng_state(state, i)\n")
    cut = diagnose.diagnose(frames)
    assert cut.facts.kind is None
    # both RNG lessons restore through these frames; states restored by index (set_rng_state_all) lean to the
    # device count's, whose call it is, over the state moved by map_location, whose first site is torch.set_rng_state
    assert cut.verdict == "ambiguous"
    assert [m.slug for m in cut.matches[:2]] == ["rng_state_device_count", "rng_state_map_location"]
    assert "no error message was read" in cut.note
    whole = diagnose.diagnose(frames + "TypeError: RNG state must be a torch.ByteTensor")
    assert (whole.verdict, whole.matches[0].slug) == ("scenario", "rng_state_map_location")
    whole = diagnose.diagnose(frames + "IndexError: tuple index out of range")
    assert (whole.verdict, [m.slug for m in whole.matches]) == ("scenario", ["rng_state_device_count"])


def test_the_checkpoint_message_s_last_line_as_its_source_quotes_it_is_read() -> None:
    """A notebook's traceback that elides the middle shows torch/serialization.py's source line, the message's last
    line in quotes: it is the checkpoint refusal's."""
    text = ('File ~/env/lib/python3.10/site-packages/torch/serialization.py:254, in validate_cuda_device(location)\n'
            "                        'to map your storages to the CPU.')")
    assert diagnose.read(text).template == "deserialize"


def test_a_frame_whose_file_prefix_was_cut_is_read() -> None:
    """A paste that starts mid-frame (`[...]/site-packages/lib/m.py", line 457, in f`, its `File "` cut off) still
    shows the frame and the line that raised under it; Python 3.11's carets under that line are not the line."""
    text = ('[...]/python3.12/site-packages/lib/modules.py", line 457, in forward_kernel\n    P = P + self.lim // 2\n'
            f"        ~~^~~~~~~~~~~~~~~\n{MISMATCH}")
    assert diagnose.raising_line(text) == "P = P + self.lim // 2"
    cut = 'ject/model.py", line 40, in forward\n    x = x * self.scale\n' + MISMATCH
    assert diagnose.read(cut).frames == ("user_forward",)  # the frame's file and function are read, not only seen
    assert [m.group(0) for m in diagnose.FRAME.finditer('  File "/a b/m.py", line 3, in f\n')] == [
        'File "/a b/m.py", line 3, in f']  # a whole frame is read once, by its own pattern
    result = diagnose.diagnose(text)
    assert "attribute_raised" in result.facts.code
    assert result.matches[0].slug == "plain_tensor_attribute"
    assert diagnose.raising_line(text.replace('modules.py", line 457', "modules.py line 457")) == ""


def test_ipython_frames_are_read() -> None:
    """Frames as IPython 7 (`file.py in f(...)`, a cell `<ipython-input-…> in f`) and IPython 8 (`File path:N, in f`,
    `Cell In[N], line M, in f`) print them: a layer's forward is the raise site, a cell's forward the user's."""
    facts = diagnose.read(IPYTHON_7)
    assert facts.site == "layer"
    assert "user_forward" not in facts.frames
    facts = diagnose.read(IPYTHON_8)
    assert "user_forward" in facts.frames


# IPython 8 in a notebook: the cell's loop failed in the model's forward; the lines around the one that ran (a loss,
# the optimizer's step, after it) did not run
JUPYTER_LOOP = """\
---------------------------------------------------------------------------
RuntimeError                              Traceback (most recent call last)
Cell In[5], line 12
     10 for x, y in loader:
     11     optimizer.zero_grad()
---> 12     out = model(x)
     13     loss = criterion(out, y)
     14     optimizer.step()

File /opt/env/lib/python3.11/site-packages/torch/nn/modules/module.py:1736, in Module._call_impl(self, *args, **kwargs)
   1734     return self._compiled_call_impl(*args, **kwargs)
-> 1736 return forward_call(*args, **kwargs)

Cell In[3], line 9, in Net.forward(self, x)
      8 def forward(self, x):
----> 9     return self.fc(x) + self.bias

RuntimeError: Expected all tensors to be on the same device, but found at least two devices, cuda:0 and cpu!
"""


@pytest.mark.parametrize("after", [
    "wandb: Waiting for W&B process to finish... (failed 1).\nERROR:torch.distributed.elastic.multiprocessing.api:"
    "failed (exitcode: 1) local_rank: 0 (pid: 1234)",
    "make: *** [Makefile:12: train] Error 1",
    "\nThe above exception was the direct cause of the following exception:\n\nTraceback (most recent call last):\n"
    '  File "run.py", line 3, in main\n    raise SystemExit("training failed") from e\nSystemExit: training failed',
    "/env/lib/python3.11/site-packages/torch/optim/lr_scheduler.py:139: UserWarning: Detected call of "
    "`lr_scheduler.step()` before `optimizer.step()`.",
], ids=["loggers", "make", "chained", "warning"])
def test_the_message_ends_where_the_log_goes_on(after: str) -> None:
    """The lines a log prints after the error (a logger's, a tool's, a chained traceback, a warning) are no part of
    its message; they used to be read into it."""
    message = ("Expected all tensors to be on the same device, but found at least two devices, cuda:0 and cpu! "
               "(when checking argument for argument mat1 in method wrapper_CUDA_addmm)")
    assert diagnose.read(f"RuntimeError: {message}\n{after}\n").message == message


def test_ipython_reads_only_the_lines_that_ran() -> None:
    """Under each frame IPython shows the lines around the one that ran (`---> 12`); only that one is read, as Python
    quotes it: a loss or a step printed after it is no frame of the traceback. They used to be read as a loss frame
    and put a loss's lesson first."""
    facts = diagnose.read(JUPYTER_LOOP)
    assert facts.frames == ("user_forward",)
    assert "attribute_raised" in facts.code  # `self.bias`, in the line that raised
    assert diagnose.raising_line(JUPYTER_LOOP) == "return self.fc(x) + self.bias"
    assert diagnose.diagnose(JUPYTER_LOOP).matches[0].slug == "plain_tensor_attribute"


# rich's traceback (`rich.traceback.install(show_locals=True)`) of an SGD step after `model.to(device)`, as a
# 64-column terminal drew it: a frame header folded mid-path, the lines around the one that ran, panels of locals
RICH = """\
╭───────────── Traceback (most recent call last) ──────────────╮
│ /home/user/project/train.py:12 in <module>                   │
│                                                              │
│   10 model.to(dev)                                           │
│   11 model(torch.randn(3, 4, device=dev)).sum().backward()   │
│ ❱ 12 opt.step()                                              │
│   13                                                         │
│                                                              │
│ ╭───────────────────────── locals ─────────────────────────╮ │
│ │      dev = device(type='emulated', index=0)              │ │
│ │    model = Linear(in_features=4, out_features=2, bias=True)│ │
│ ╰──────────────────────────────────────────────────────────╯ │
│                                                              │
│ /home/user/.venv/lib/python3.11/site-packages/torch/optim/sg │
│ d.py:364 in _single_tensor_sgd                               │
│                                                              │
│   363 │   │   │   else:                                      │
│ ❱ 364 │   │   │   │   buf.mul_(momentum).add_(grad, alpha=1  │
│   365 │   │   │                                              │
│                                                              │
│ ╭───────────────────────── locals ─────────────────────────╮ │
│ │                  buf = tensor([[-1.7078,  1.4048,        │ │
│ │                        │   │   [-1.7078,  1.4048]])      │ │
│ │               params = [Parameter containing:            │ │
│ │                        device='emulated:0',              │ │
│ ╰──────────────────────────────────────────────────────────╯ │
╰──────────────────────────────────────────────────────────────╯
RuntimeError: Expected all tensors to be on the same device, but
found at least two devices, emulated:0 and cpu!"""


def test_a_traceback_drawn_in_a_box_reads_as_python_prints_it() -> None:
    """rich's boxed traceback (typer's, a tool's `rich.traceback.install()`) is read as Python's: each header a frame
    (a path folded over two lines, or wrapped at the space before `in`), the line marked ❱ the line that ran, the
    lines around it and the panels of locals left out; so the step of SGD is where it raised."""
    plain = diagnose.read(RICH)
    assert plain.site == "optimizer_step"
    assert plain.frames[:2] == ("optimizer_step", "sgd_step")
    assert diagnose.raising_line(diagnose._clean(RICH)) == "buf.mul_(momentum).add_(grad, alpha=1"
    assert "Traceback (most recent call last):" in diagnose._clean(RICH)
    assert "emulated', index=0" not in diagnose._clean(RICH)  # no local is read as a line that ran
    wrapped = RICH.replace("│ d.py:364 in _single_tensor_sgd                               │",
                           "│ d.py:364 in                                                  │\n"
                           "│ _single_tensor_sgd                                           │")
    assert diagnose.read(wrapped).site == "optimizer_step"
    assert diagnose.diagnose(RICH).note == diagnose.diagnose(PLAIN_SGD).note
    # folded before its line number (`module.py:177` + `8 in f`, as 80 columns fold torch's paths); cut above its top
    at_number = RICH.replace("│ /home/user/.venv/lib/python3.11/site-packages/torch/optim/sg │\n"
                             "│ d.py:364 in _single_tensor_sgd                               │",
                             "│ /home/user/.venv/lib/python3.11/site-packages/torch/optim/sgd.py: │\n"
                             "│ 364 in _single_tensor_sgd                               │")
    assert diagnose.read(at_number).site == "optimizer_step"
    assert diagnose.read(RICH.split("\n", 1)[1]).site == "optimizer_step"
    # code with no file (a notebook's cell, `python -c`): `in forward:8`
    cell = ("╭─ Traceback (most recent call last) ─╮\n│ in forward:8                         │\n│                                      │\n"
            "│ ❱ 8 │   return self.fc(x) * mask        │\n╰──────────────────────────────────────╯\n" + MISMATCH)
    assert "user_forward" in diagnose.read(cell).frames


PLAIN_SGD = """Traceback (most recent call last):
  File "/home/user/project/train.py", line 12, in <module>
    opt.step()
  File "/home/user/.venv/lib/python3.11/site-packages/torch/optim/sgd.py", line 364, in _single_tensor_sgd
    buf.mul_(momentum).add_(grad, alpha=1
RuntimeError: Expected all tensors to be on the same device, but found at least two devices, emulated:0 and cpu!"""


# the SGD step's frame as IPython 9 colours it (a notebook's output, a terminal's IPython)
IPYTHON_9 = ("\x1b[31mRuntimeError\x1b[39m                              Traceback (most recent call last)\n"
             "\x1b[36mFile \x1b[39m\x1b[32m/home/user/.venv/lib/python3.11/site-packages/torch/optim/sgd.py:364\x1b[39m, in "
             "\x1b[36m_single_tensor_sgd\x1b[39m\x1b[34m(params, grads)\x1b[39m\n\x1b[32m--> \x1b[39m\x1b[32m364\x1b[39m "
             "buf.mul_(momentum).add_(grad, alpha=\x1b[32m1\x1b[39m)\n\x1b[31mRuntimeError\x1b[39m: Expected all tensors to "
             "be on the same device, but found at least two devices, cuda:0 and cpu!")


def test_a_terminal_s_colours_and_a_web_page_s_escapes_are_read_through() -> None:
    """Colours as a terminal sends them (IPython 9's `ESC[36m`, a link's OSC 8), as a copy leaves them when it loses
    ESC (`[31mRuntimeError[39m`), and a web page's escapes (`&quot;`) read as the plain traceback; each of them hides
    the frame of SGD's step where it stays."""
    plain = re.sub("\x1b\\[[\\d;]*m", "", IPYTHON_9)
    assert diagnose.read(plain).site == "optimizer_step"
    linked = IPYTHON_9.replace("/home/", "\x1b]8;;file:///home/user\x1b\\/home/")
    for coloured in (IPYTHON_9, linked, IPYTHON_9.replace("\x1b", "")):
        assert _reading(diagnose.diagnose(coloured)) == _reading(diagnose.diagnose(plain))
    assert _reading(diagnose.diagnose(html.escape(PLAIN_SGD))) == _reading(diagnose.diagnose(PLAIN_SGD))
    assert diagnose.diagnose(html.escape(PLAIN_SGD)).facts.site == "optimizer_step"
    # brackets that are no colours are kept (an index `[0]`, `x[mask]`); an entity of 5,000 digits is no crash
    indexed = "  File \"train.py\", line 40, in <module>\n    loss = criterion(logits[mask], labels[mask])\n" + INDICES
    assert "logits[mask]" in diagnose._clean(indexed)
    assert "local_indexed" in diagnose.read(indexed).code
    assert "[0]" in diagnose._clean("x = y[0]\nz = [1]")
    assert diagnose.diagnose("&amp;&#" + "1" * 5000 + ";").verdict == "unknown"
    # code is code: its `"&quot;"` and `x[0m]` are its own
    code = 'def clean(s):\n    return s.replace("&quot;", \'"\')\nmodel = Net().to(device)\nout = model(x.to(device))\n'
    assert "called_on_device" in diagnose.read(MISMATCH, code).code


# a notebook as Jupyter saves it (nbformat 4): cells, and an error output whose traceback IPython 9 coloured
NOTEBOOK = {"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": [
    {"cell_type": "code", "execution_count": 2, "metadata": {}, "outputs": [], "source": [
        "class Net(nn.Module):\n", "    def __init__(self):\n", "        super().__init__()\n",
        "        self.fc = nn.Linear(4, 2)\n", "\n", "    def forward(self, x):\n", "        mask = torch.ones(2)\n",
        "        return self.fc(x) * mask\n", "\n", "model = Net().to(device)"]},
    {"cell_type": "markdown", "metadata": {}, "source": ["Run it on the device:"]},
    {"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [],  # never run: it ran nothing
     "source": "model.load_state_dict(torch.load('last.pt'))"},
    {"cell_type": "code", "execution_count": 1, "metadata": {}, "outputs": [],
     "source": "import torch\nfrom torch import nn\ndevice = torch.device('cuda')"},
    {"cell_type": "code", "execution_count": 3, "metadata": {}, "source": [
        "!nvidia-smi\n", "out = model(torch.randn(3, 4, device=device))"], "outputs": [
        {"output_type": "error", "ename": "RuntimeError", "evalue": "Expected all tensors to be on the same device, "
         "but found at least two devices, cuda:0 and cpu!", "traceback": [
             "\x1b[31m---------------------------------------------------------------------------\x1b[39m",
             "\x1b[31mRuntimeError\x1b[39m                              Traceback (most recent call last)",
             "\x1b[36mCell\x1b[39m\x1b[36m \x1b[39m\x1b[32mIn[3]\x1b[39m\x1b[32m, line 2\x1b[39m\n\x1b[32m      1\x1b[39m "
             "get_ipython().system(\x1b[33m'nvidia-smi'\x1b[39m)\n\x1b[32m----> \x1b[39m\x1b[32m2\x1b[39m out = "
             "model(torch.randn(\x1b[32m3\x1b[39m, \x1b[32m4\x1b[39m, device=device))\n",
             "\x1b[36mFile \x1b[39m\x1b[32m/opt/conda/lib/python3.11/site-packages/torch/nn/modules/module.py:1789"
             "\x1b[39m, in \x1b[36mModule._call_impl\x1b[39m\x1b[34m(self, *args, **kwargs)\x1b[39m\n\x1b[32m-> \x1b[39m"
             "\x1b[32m1789\x1b[39m     \x1b[38;5;28;01mreturn\x1b[39;00m forward_call(*args, **kwargs)\n",
             "\x1b[36mCell\x1b[39m\x1b[36m \x1b[39m\x1b[32mIn[2]\x1b[39m\x1b[32m, line 8\x1b[39m, in \x1b[36mNet.forward"
             "\x1b[39m\x1b[34m(self, x)\x1b[39m\n\x1b[32m      7\x1b[39m         mask = torch.ones(\x1b[32m2\x1b[39m)\n"
             "\x1b[32m----> \x1b[39m\x1b[32m8\x1b[39m         \x1b[38;5;28;01mreturn\x1b[39;00m self.fc(x) * mask\n",
             "\x1b[31mRuntimeError\x1b[39m: Expected all tensors to be on the same device, but found at least two "
             "devices, cuda:0 and cpu!"]}]}]}


def test_a_notebook_is_read_as_its_errors_and_the_code_it_ran(tmp_path: Path) -> None:
    """A notebook (its .ipynb file, or its JSON piped in) is read as the tracebacks of its error outputs and its
    code cells in the order they ran: the factory in the cell's forward is found, and the moved model run on a
    moved input; one output pasted alone, and nbformat 3's `pyerr`, read too."""
    text = json.dumps(NOTEBOOK, indent=1)
    result = diagnose.diagnose(text)
    assert result.facts.message.endswith("cuda:0 and cpu!")
    assert "user_forward" in result.facts.frames
    assert {"factory_in_forward", "called_on_device"} <= set(result.facts.code)
    assert "torch_load" in diagnose.read_code("model.load_state_dict(torch.load('last.pt'))")
    assert "torch_load" not in result.facts.code
    assert (result.verdict, result.matches[0].slug) == ("scenario", "factory_in_forward")
    assert diagnose._inputs(text, "")[1].startswith("import torch")  # the first cell run first
    (tmp_path / "analysis.ipynb").write_text(text)
    run = _run("--file", str(tmp_path / "analysis.ipynb"), "--format", "json")
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout)["scenarios"][0]["slug"] == "factory_in_forward"
    output = NOTEBOOK["cells"][4]["outputs"][0]  # type: ignore[index]
    assert diagnose.read(json.dumps(output)).frames == result.facts.frames
    old = {"nbformat": 3, "worksheets": [{"cells": [{"cell_type": "code", "input": "model = Net().to(device)\n"
                                                     "out = model(x.cuda())", "prompt_number": 1,
                                                     "outputs": [{"output_type": "pyerr", "ename": "RuntimeError",
                                                                  "evalue": "x", "traceback": [output["traceback"][-1]]}]}]}]}
    assert diagnose.read(json.dumps(old)).template == "codegen"
    assert "called_on_device" in diagnose.read(json.dumps(old)).code
    # what IPython runs of a cell: a cell of another language, a shell's or help's line, a cell that does not parse
    # (it ran nothing) are left out, so the rest still parses
    cells = NOTEBOOK["cells"]  # type: ignore[index]
    for other in ("%%bash\npip install -q timm", "files = !ls data\nmodel?", "def f(:\n    pass"):
        book = {**NOTEBOOK, "cells": [*cells, {"cell_type": "code", "execution_count": 4, "source": other}]}
        assert "called_on_device" in diagnose.read(json.dumps(book)).code, other
    # a traceback the cells printed (`!python train.py`, `traceback.print_exc()`), where no error output shows one
    printed = {**NOTEBOOK, "cells": [{**cells[4], "outputs": [{"output_type": "stream", "name": "stderr", "text": [
        'Traceback (most recent call last):\n', '  File "train.py", line 8, in forward\n', "    return x * mask\n",
        MISMATCH]}]}]}
    assert "user_forward" in diagnose.read(json.dumps(printed)).frames
    # items that are no text (a number in a traceback's list, in a source's) are no crash
    assert diagnose.diagnose('{"output_type": "error", "traceback": [1]}').verdict == "unknown"
    assert diagnose.diagnose('{"cell_type": "code", "execution_count": 1, "source": [1]}', "").verdict == "unknown"
    # brackets nested deeper than JSON's reader goes are no notebook, nor a crash
    assert diagnose.diagnose("[" * 100000).verdict == "unknown"
    # JSON that is no notebook is read as text; a notebook given as the code (`--code a.ipynb`) is its code cells
    assert diagnose.read('{"error": "Expected all tensors to be on the same device"}').template is not None
    assert diagnose._inputs("no JSON", text) == ("no JSON", diagnose._inputs(text, "")[1])


# pytest's report of a test that fails in a model's forward (its default --tb=auto: the first and last entries long,
# with their function's source; the others short), without the space pytest prints after a place and a separator
PYTEST_REPORT = """\
=================================== FAILURES ===================================
_________________________________ test_forward _________________________________

    def test_forward():
        dev = torch.device("cuda")
        model = Net().to(dev)
>       model(torch.randn(3, 4, device=dev))

test_f.py:19:
_ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _
/home/user/.venv/lib/python3.11/site-packages/torch/nn/modules/module.py:1778: in _wrapped_call_impl
    return self._call_impl(*args, **kwargs)
           ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
/home/user/.venv/lib/python3.11/site-packages/torch/nn/modules/module.py:1789: in _call_impl
    return forward_call(*args, **kwargs)
           ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
_ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _

self = Net(
  (fc): Linear(in_features=4, out_features=2, bias=True)
)
x = tensor([[ 0.9773,  1.1569, -0.3807,  1.2525]], device='cuda:0')

    def forward(self, x):
        mask = torch.ones(2)
>       return self.fc(x) * mask
               ^^^^^^^^^^^^^^^^^
E       RuntimeError: Expected all tensors to be on the same device, but found at least two devices, cuda:0 and cpu!

test_f.py:13: RuntimeError
=========================== short test summary info ============================
FAILED test_f.py::test_forward - RuntimeError: Expected all tensors to be on ...
1 failed in 2.21s"""


def test_a_pytest_report_reads_as_its_traceback_and_the_source_it_shows() -> None:
    """pytest's report of a failure (a regression suite's log) reads as Python's traceback: the long entries' frames
    (their function read from the source shown), the message from its E lines and not from the summary that cuts it
    short, and the source shown of the test's own functions as the code: a factory in forward, the moved model run
    on a moved input. Its short form and `--color=yes` read alike; a library's source shown is no code of the user's."""
    result = diagnose.diagnose(PYTEST_REPORT)
    as_printed = re.sub(r"(?m)(\.py:\d+:|_ _)$", r"\1 ", PYTEST_REPORT)
    assert _reading(diagnose.diagnose(as_printed)) == _reading(result)
    assert result.facts.message.endswith("cuda:0 and cpu!")
    assert "user_forward" in result.facts.frames
    assert {"factory_in_forward", "called_on_device"} <= set(result.facts.code)
    assert (result.verdict, result.matches[0].slug) == ("scenario", "factory_in_forward")
    assert diagnose.raising_line(diagnose._inputs(PYTEST_REPORT, "")[0]) == "return self.fc(x) * mask"
    short = ("test_f.py:19: in test_forward\n    model(torch.randn(3, 4, device=dev))\ntest_f.py:13: in forward\n"
             "    return self.fc(x) * mask\n           ^^^^^^^^^^^^^^^^^\nE   RuntimeError: Expected all tensors to be "
             "on the same device, but found at least two devices, cuda:0 and cpu!\n" + PYTEST_REPORT.split("\n")[-3])
    assert diagnose.read(short).frames == result.facts.frames
    coloured = PYTEST_REPORT.replace("E       Runtime", "\x1b[1m\x1b[31mE       Runtime").replace(
        "test_f.py:13: RuntimeError", "\x1b[1m\x1b[31mtest_f.py\x1b[0m:13: RuntimeError")
    assert _reading(diagnose.diagnose(coloured)) == _reading(result)
    # as a CI log keeps it (GitHub Actions stamps each line with its time); a logger's one stamped line is its own
    stamped = "\n".join(f"2026-12-03T10:11:{i % 60:02d}.{i:07d}Z {line}" for i, line in
                         enumerate(PYTEST_REPORT.split("\n")))
    assert _reading(diagnose.diagnose(stamped)) == _reading(result)
    logged = "2026-12-03 10:11:12,345 ERROR step failed\n" + PLAIN_SGD
    assert diagnose._clean(logged).startswith("2026-12-03 10:11:12,345 ERROR")
    library = PYTEST_REPORT.replace("test_f.py:13:", "/home/user/.venv/lib/python3.11/site-packages/net/m.py:13:")
    assert "factory_in_forward" not in diagnose.read(library).code
    # one line a failure (--tb=line): its place and its message
    line = "/home/user/.venv/lib/python3.11/site-packages/torch/optim/sgd.py:364: RuntimeError: Expected all " \
           "tensors to be on the same device, but found at least two devices, cuda:0 and cpu!\n" \
           "=========================== short test summary info ============================"
    assert diagnose.read(line).site == "optimizer_step"


def test_a_pytest_report_s_parts_are_read_as_what_they_are() -> None:
    """Each failure of a report read alone (the first whose message is a device error's: its frames, its code); a
    report whose message is no device error's (an assertion on a script's exit) read as pasted, so the traceback the
    test captured is read; the locals `-l` shows, a function nested before the line that ran, a `try:` shown
    without its `except`, and a failure named as no error (`BackendCompilerFailed`)."""
    forward = diagnose.diagnose(PYTEST_REPORT)
    other = ("_________________________________ test_step _________________________________\n\n"
             "    def test_step():\n        opt = torch.optim.SGD(model.parameters(), lr=0.1)\n>       opt.step()\n"
             "E       AttributeError: 'NoneType' object has no attribute 'mul_'\n\n"
             "/home/user/.venv/lib/python3.11/site-packages/torch/optim/sgd.py:364: AttributeError\n")
    both = PYTEST_REPORT.replace("=========================== short test summary", other + "=========== short test summary")
    assert _reading(diagnose.diagnose(both)) == _reading(forward)
    assert _reading(diagnose.diagnose(other + PYTEST_REPORT.split("test_forward _", 1)[0] + "test_forward _"
                                      + PYTEST_REPORT.split("test_forward _", 1)[1])) == _reading(forward)
    captured = ("____________________________ test_script_runs ____________________________\n\n"
                "    def test_script_runs():\n        proc = subprocess.run([sys.executable, 'train.py'])\n"
                ">       assert proc.returncode == 0\nE       AssertionError: assert 1 == 0\n\n"
                "test_sub.py:6: AssertionError\n------------------------- Captured stderr call -------------------------\n"
                + PLAIN_SGD + "\n=========================== short test summary info ============================\n"
                "FAILED test_sub.py::test_script_runs - AssertionError: assert 1 == 0")
    assert diagnose.read(captured).site == "optimizer_step"
    shown = PYTEST_REPORT.replace("        mask = torch.ones(2)\n", "        def scale(y):\n            return y * 2\n\n"
                                  "        mask = torch.ones(2)\n").replace(
        "               ^^^^^^^^^^^^^^^^^\nE", "               ^^^^^^^^^^^^^^^^^\n\nmask       = tensor([1., 1.])\n"
        "self       = Net()\nE")
    assert _reading(diagnose.diagnose(shown)) == _reading(forward)  # in forward, not scale; no local read as code
    tried = PYTEST_REPORT.replace("        mask = torch.ones(2)\n>       return", "        mask = torch.ones(2)\n"
                                  "        try:\n>           return").replace("test_f.py:13:", "test_f.py:14:")
    assert "user_forward" in diagnose.read(tried).frames  # the line that ran, though its source does not parse
    compiled = PYTEST_REPORT.replace("test_f.py:13: RuntimeError", "test_f.py:13: BackendCompilerFailed")
    assert diagnose.read(compiled).frames == forward.facts.frames
    # quoted as a forum quotes it, escaped as a web page does
    quoted = "\n".join("> " + line for line in PYTEST_REPORT.split("\n"))
    assert _reading(diagnose.diagnose(quoted)) == _reading(forward)
    assert _reading(diagnose.diagnose(html.escape(PYTEST_REPORT))) == _reading(forward)
    # a CI log whose blank lines carry no time (half its lines are blank): its times still read through
    sparse = "\n\n".join(f"2026-12-03T10:11:{i % 60:02d}.{i:07d}Z {line}" if line else ""
                         for i, line in enumerate(PYTEST_REPORT.split("\n")))
    assert _reading(diagnose.diagnose(sparse)) == _reading(forward)


def test_code_without_a_parse_falls_back_to_text() -> None:
    """A fragment that does not parse still shows its signals (a factory without device= in forward)."""
    fragment = "    def forward(self, x):\n        mask = torch.arange(x.shape[1])\n        return x * mask\n  )"
    assert "factory_in_forward" in diagnose.read_code(fragment)
    parsed = "class M:\n    def forward(self, x):\n        return x + torch.zeros(3, device=x.device)\n"
    assert "factory_in_forward" not in diagnose.read_code(parsed)


# ---- the command line -----------------------------------------------------------------------------

MESSAGE = ("RuntimeError: Expected all tensors to be on the same device, but got index is on cpu, different from other "
           "tensors on cuda:0 (when checking argument in method wrapper_CUDA__index_select)")


def _run(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "samedevice", "diagnose", *args], input=stdin, capture_output=True,
                          text=True, timeout=60, cwd=registry.ROOT)


def test_diagnose_reads_an_argument_stdin_or_a_file(tmp_path: Path) -> None:
    """The same answer from an argument, from a pipe and from --file; JSON for tools; exit 0 when a scenario fits."""
    (tmp_path / "err.txt").write_text(MESSAGE)
    runs = [_run(MESSAGE), _run(stdin=MESSAGE), _run("--file", str(tmp_path / "err.txt"))]
    assert [r.returncode for r in runs] == [0, 0, 0]
    assert runs[0].stdout == runs[1].stdout == runs[2].stdout
    assert "1. tokenizer_outputs" in runs[0].stdout
    data = json.loads(_run(MESSAGE, "--format", "json").stdout)
    assert data["scenarios"][0]["slug"] == "tokenizer_outputs"
    assert data["facts"]["argument"] == "index"


@pytest.mark.parametrize("encoding", ["utf-8-sig", "utf-16", "utf-16-le", "utf-16-be", "utf-32"])
def test_diagnose_reads_a_log_whatever_wrote_it(tmp_path: Path, encoding: str) -> None:
    """Windows PowerShell's `python train.py > log.txt` writes UTF-16 with a BOM; a log may also carry UTF-8's BOM,
    or be UTF-16 without one. Each gives, from --file and from a pipe, the answer the plain text gives."""
    log = "Traceback (most recent call last):\r\n  File \"C:\\训练\\train.py\", line 3, in <module>\r\n" + MESSAGE + "\r\n"
    (tmp_path / "log.txt").write_bytes(log.encode(encoding))
    plain = _run(log.replace("\r\n", "\n"))
    from_file = _run("--file", str(tmp_path / "log.txt"))
    piped = subprocess.run([sys.executable, "-m", "samedevice", "diagnose"], input=log.encode(encoding),
                           capture_output=True, timeout=60, cwd=registry.ROOT)
    assert plain.returncode == from_file.returncode == piped.returncode == 0
    assert "1. tokenizer_outputs" in plain.stdout
    assert from_file.stdout == plain.stdout == piped.stdout.decode("utf-8")


def test_decode_never_fails_on_bytes_that_are_no_text() -> None:
    """Bytes that are not text in any encoding are replaced, not an error; plain UTF-8 passes as it is."""
    assert cli.decode(b"\xff\x00\xfe\x00\x00\x01\xc3") != ""
    assert cli.decode("cuda:0 und Gerät\r\n".encode()) == "cuda:0 und Gerät\n"


def test_diagnose_writes_to_a_console_that_cannot_show_the_paste() -> None:
    """A paste whose message ends in characters the console's code page lacks (cp1252, a Windows console's or a
    redirect's: here a log line's note, `推理失败`, run on) is echoed escaped; it used to stop the answer with a
    UnicodeEncodeError."""
    result = subprocess.run([sys.executable, "-m", "samedevice", "diagnose", MESSAGE + " 推理失败"],
                            capture_output=True, timeout=60, cwd=registry.ROOT,
                            env={**os.environ, "PYTHONIOENCODING": "cp1252"})
    assert result.returncode == 0, result.stderr
    out = result.stdout.decode("cp1252")
    assert "wrapper_CUDA__index_select) \\u63a8\\u7406" in out
    assert "1. tokenizer_outputs" in out


def test_diagnose_exit_codes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Exit 1 when no scenario fits; 2, with one line, for an empty input or an unreadable file."""
    assert cli.main(["diagnose", "RuntimeError: expected scalar type Float but found Double"]) == 1
    assert "Not a device error." in capsys.readouterr().out
    assert cli.main(["diagnose", "   "]) == 2
    assert capsys.readouterr().err == "error: diagnose: the input is empty\n"
    assert cli.main(["diagnose", "--file", str(tmp_path / "none.txt")]) == 2
    assert "none.txt: cannot be read (No such file or directory)" in capsys.readouterr().err
    assert cli.main(["diagnose", "--code", "-"]) == 2
    assert "cannot both come from stdin" in capsys.readouterr().err
    (tmp_path / "train.py").write_text("def forward(self, x):\n    return x + torch.arange(3)\n")
    assert cli.main(["diagnose", "--code", str(tmp_path / "train.py")]) == 0  # the code alone can name it
    assert "1. factory_in_forward" in capsys.readouterr().out


# ---- the yardstick: real reports --------------------------------------------------------------------

REPORTS = load()
HELD_OUT = load(HELD_OUT_PATH)


def test_the_reports_are_labelled_with_what_exists() -> None:
    """Every report names its source and a label that is a scenario of the catalog's table (or a verdict)."""
    known = set(registry.slugs()) | {"not_in_catalog", "fixed_upstream", "not_device_error"}
    table = (Path(__file__).parent / "data" / "README.md").read_text()
    for field in ("id", "source"):  # each thread once
        values = [r[field].rstrip("/").lower() for r in REPORTS + HELD_OUT]
        assert len(values) == len(set(values)), sorted(v for v in set(values) if values.count(v) > 1)
    for r in REPORTS + HELD_OUT:
        assert r["source"].startswith(("https://github.com/", "https://discuss.pytorch.org/")), r["id"]
        assert r["error"].strip(), r["id"]
        assert r["label"] in known or f"`{r['label']}`" in table, r["id"]
        if r["label"] == "fixed_upstream":
            assert r["fixed_in"], r["id"]


@pytest.mark.parametrize("with_code", [True, False], ids=["error_and_code", "error_only"])
def test_accuracy_on_the_reports_does_not_fall(with_code: bool) -> None:
    """The accuracy measured on the reports (benchmarks/bench_diagnose.py prints it) does not fall below
    what this version reaches: a change of the rules that loses reports shows here."""
    result: dict[str, Any] = evaluate(REPORTS, with_code)
    # 55 covered reports. A bare message's first candidate is factory_in_forward, the commonest cause of it over the
    # 70 and the held-out reports (20 of 72 against batch_not_moved's 15): the 70 lose one report by it (two bare
    # batches, against one bare factory), the held-out ones gain ten with the code and nineteen without. The label
    # audit (tests/data/README.md) moved three of the rest into lessons and three lessons out to the rest
    floor = {True: (0.81, 0.98), False: (0.76, 0.92)}[with_code]
    assert result["top1"] >= floor[0], result["misses"]
    assert result["top3"] >= floor[1], result["misses"]
    # the rest (reports the catalog does not teach) is 15 now: the two checkpoints from a device index the host
    # lacks are the cuda_checkpoint_on_cpu_host page's second message, labelled so. Three of the rest are the bare
    # checkpoint message on a GPU host PyTorch cannot see: the lesson comes first for it (17 of its 21 reports
    # are a host without the GPU), the unseen GPU after it, so they are answered wrong
    assert result["rest_right"] >= 0.53
    # a verdict that names one lesson is right this often (the rest are candidates): 19 of 24, 13 of 17 (20 of 24
    # before the audit: two EMA bugs of a library's own and a forced `capturable=True` are labelled no lesson now)
    assert result["confident_right"] >= {True: 0.79, False: 0.76}[with_code], result["misses"]


def test_the_ceiling_gives_reports_alike_in_their_message_one_answer() -> None:
    """The benchmark's upper bound: reports whose errors read alike get one ranking, the commonest labels first; a
    report of the rest is answered right only where no covered report reads like it, and its set gets one verdict.
    A traceback's quoted line is read too: it parts a report from the bare message."""
    oom = "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 MiB"
    quoted = '  File "/w/m.py", line 3, in forward\n    x = x + torch.ones(3)\n' + MISMATCH
    reports = [{"error": MISMATCH, "label": label} for label in
               ("factory_in_forward", "factory_in_forward", "batch_not_moved", "model_not_moved", "plain_list_layers",
                "not_in_catalog")] + [{"error": oom, "label": label} for label in ("not_in_catalog", "fixed_upstream")]
    reports.append({"error": quoted, "label": "factory_in_forward"})
    result = ceiling(reports)
    assert result["groups"] == 3
    assert (result["top1"], result["top3"]) == (round(3 / 6, 3), round(5 / 6, 3))
    assert result["rest_apart"] == round(1 / 3, 3)  # one verdict for the out-of-memory two; the bare one reads like
    # five lessons


@pytest.mark.parametrize("with_code", [True, False], ids=["error_and_code", "error_only"])
def test_accuracy_on_the_held_out_reports_does_not_fall(with_code: bool) -> None:
    """The held-out reports (tests/data/diagnose_heldout.jsonl, labelled without running the diagnosis): what this
    version reaches on them. Each batch was measured on arrival (tests/data/README.md); the misses of the later ones
    prompted rules since, so these floors guard against a fall, not a claim of reports unseen."""
    result: dict[str, Any] = evaluate(HELD_OUT, with_code)
    # 631 covered reports, forty-one batches (354 of the first seventeen before the label audit, 367 after); six
    # that were "not in the catalog" name the mechanism of a scenario that landed since, param_group_tensor's (three
    # bare messages and a fused kernel's crash) or plain_tensor_attribute's (a library's own module): they stay misses.
    # Eighteen more were relabelled when their scenario landed: six of pack_padded_sequence given its lengths on the
    # device (pack_padded_lengths), nine of a device tensor handed to NumPy (device_tensor_to_numpy), three of a 0-dim
    # device tensor met by a CPU tensor (device_scalar_into_cpu; a fourth was factory_in_forward's). Two more of
    # every GPU's RNG state restored on a host with fewer GPUs (rng_state_device_count), and three of a torchmetrics
    # metric never moved (metric_not_moved; one was model_not_moved's), and thirteen of model code that picks its own
    # device (hardcoded_device; two were factory_in_forward's), whose pastes show neither that code nor its frame:
    # misses all, which took top-3 from 0.88 to 0.862 with the code and from 0.845 to 0.827 without. Two more of CUDA
    # used in a forked DataLoader worker (device_in_dataloader_worker), which it answered "not in the catalog" before
    floor = {True: (0.67, 0.85), False: (0.63, 0.82)}[with_code]
    assert result["top1"] >= floor[0], result["misses"]
    assert result["top3"] >= floor[1], result["misses"]
    # the rest: 59 of 203 with the code, 55 without (of the tenth to forty-first batches' 184, 16 were right on
    # arrival: the thirty-first brought 7, none right on arrival, mostly web UIs' own placement of offloaded models;
    # one it answered right, "not in the catalog" for a GPU's RNG state, is rng_state_device_count's now)
    assert result["rest_right"] >= {True: 0.275, False: 0.26}[with_code], result["misses"]
    # the others were given candidates and a question, but these few were given one lesson, a wrong one: three a
    # checkpoint's message on a GPU host PyTorch could not see (the lesson first, the caveat after it), the others a
    # library's own code that does what a lesson shows (a device map, an offload hook, a trace, an augmentation that
    # hands the batch back on the CPU) and breaks elsewhere; without its code, 2.1.0's sampler handing a device
    # generator's permutation to NumPy reads as the NumPy lesson (the code shows the generator: candidates)
    assert result["rest_named"] <= {True: 9, False: 7}[with_code], result["misses"]
    # one lesson named: 197 of 211 right with the code, 147 of 157 without (a traceback cut before its message
    # names no lesson alone: of the five it named so, one was right) (on the first four batches it was 23 of 49
    # and 20 of 42 before a lesson needed the traceback or the code to show its case)
    assert result["confident_right"] >= {True: 0.90, False: 0.93}[with_code], result["misses"]


def test_a_message_alone_names_candidates_and_the_code_names_the_lesson() -> None:
    """A message names the op and the tensor on the wrong device, not how it got there: an embedding's `index` on
    the CPU is a tokenizer's output, a batch never moved or an index built by hand. Alone it gets candidates, the
    likeliest first; the code that shows the tokenizer's output makes it one lesson."""
    message = ("RuntimeError: Expected all tensors to be on the same device, but found at least two devices, cuda:0 "
               "and cpu! (when checking argument for argument index in method wrapper_CUDA__index_select)")
    alone = diagnose.diagnose(message)
    assert (alone.verdict, alone.matches[0].slug) == ("ambiguous", "tokenizer_outputs")
    assert "batch_not_moved" in [m.slug for m in alone.matches]
    assert "paste the whole traceback and the code" in alone.note
    code = "inputs = tokenizer(text, return_tensors='pt')\nout = model.generate(inputs['input_ids'])\n"
    shown = diagnose.diagnose(message, code)
    assert (shown.verdict, shown.matches[0].slug) == ("scenario", "tokenizer_outputs")
    assert any("tokenizer" in why for why in shown.matches[0].why)


def test_a_second_accelerator_must_show_for_the_index_less_lesson() -> None:
    """`.cuda()` is in most scripts; it speaks for index_less_device only where a second accelerator shows (the
    message's devices, or ranks in the code)."""
    message = "RuntimeError: indices should be either on cpu or on the same device as the indexed tensor (cpu)"
    plain = diagnose.diagnose(message, "mask = mask.cuda()\n")
    assert "index_less_device" not in [m.slug for m in plain.matches]
    ranked = diagnose.diagnose(message, "torch.cuda.set_device(local_rank)\nmask = mask.cuda()\n")
    assert "index_less_device" in [m.slug for m in ranked.matches]


def test_a_legacy_cuda_constructor_is_an_index_less_device() -> None:
    """`torch.cuda.FloatTensor(n, k)` allocates on the current device as `.cuda()` does: beside two GPUs in the
    message it names the index-less device; given `device=` it says nothing."""
    message = "RuntimeError: expected device cuda:0 but got device cuda:2"
    legacy = diagnose.diagnose(message, "    z = torch.cuda.FloatTensor(batch_size, nz)\n    z.normal_()\n")
    assert (legacy.verdict, legacy.matches[0].slug) == ("scenario", "index_less_device")
    assert any("torch.cuda.FloatTensor" in why for why in legacy.matches[0].why)
    assert "index_less" not in diagnose.read_code("z = torch.cuda.FloatTensor(2, 3, device=rank)\n")
    assert "index_less" not in diagnose.read_code("z = torch.cuda.FloatTensor(\n    2, 3, device=rank)\n")
    for alias in ("Tensor = torch.cuda.FloatTensor if cuda else torch.FloatTensor\n", "x = x.type(torch.cuda.FloatTensor)\n"):
        assert "index_less" in diagnose.read_code(alias), alias
    assert diagnose.diagnose(message).verdict == "ambiguous"


def test_inputs_moved_speak_against_the_model_only_where_the_code_has_a_model() -> None:
    """model_not_moved's signal needs a model in the code: a script that moves a tensor and makes a window on the
    CPU, with no model, is no model left behind; a model moved to the CPU on purpose is no input moved."""
    script = "x = torch.from_numpy(x).cuda()\nwindow = torch.hann_window(400)\ntorch.stft(x, 400, window=window)\n"
    assert "model_never_moved" not in diagnose.read_code(script)
    assert "model_never_moved" not in diagnose.read_code("model = torch.hub.load('a', 'b')\nmodel.to('cpu')\n")
    assert "model_never_moved" in diagnose.read_code("model = Net()\nx = x.to(device)\nout = model(x)\n")


def test_inputs_moved_beside_no_model_name_no_lesson() -> None:
    """A line that moves the inputs, with no model run or defined in the code, does not say the model stayed
    behind: the tensor left on the CPU may be any other. With a model run in a fragment that does not parse, it
    still speaks for the model."""
    message = "RuntimeError: Expected all tensors to be on the same device, but found at least two devices, cuda:0 and cpu!"
    alone = "reals, labels = reals.to(device), labels.type_as(reals).to(device)\n"
    assert "moves_inputs" not in diagnose.read_code(alone)
    result = diagnose.diagnose(message, alone)
    assert result.verdict == "ambiguous"
    fragment = "inputs = inputs.to(device)\n    outputs = model(inputs)\n  loss = criterion(outputs, labels)\n"
    assert "moves_inputs" in diagnose.read_code(fragment)
    assert diagnose.diagnose(message, fragment).matches[0].slug == "model_not_moved"


def test_a_model_loaded_onto_the_device_is_a_model_moved() -> None:
    """`from_pretrained(..., device_map=...)` or `hub.load(..., device=...)` puts the model on the device as a `.to`
    would: a model placed so, run on inputs made on the device, is no model never moved. Loaded onto the CPU, it is."""
    placed = ('model = Pipeline.from_pretrained("m", device_map=device)\n'
              'x = torch.tensor(values, device=device)\nout = model.predict(x)\n')
    signals = diagnose.read_code(placed)
    assert "model_never_moved" not in signals
    assert "model_moved" in signals
    assert "model_moved" in diagnose.read_code(placed.replace("device_map=device", 'device_map="auto"'))
    on_the_cpu = placed.replace("device_map=device", 'device_map="cpu"')
    assert "model_never_moved" in diagnose.read_code(on_the_cpu)


def test_an_augmentation_left_unmoved_names_no_lesson_alone() -> None:
    """A data augmentation built and called on a device input, never moved, is no model left behind on its own
    (most draw their parameters on the CPU as they run, moved or not): the message's candidates answer."""
    message = "RuntimeError: Expected all tensors to be on the same device, but found at least two devices, cuda:0 and cpu!"
    for code in ("from kornia import augmentation as augs\naug = augs.ColorJiggle(0.1)\nx = x.to('cuda')\naug(x)\n",
                 "import kornia.augmentation as K\naug = K.ColorJiggle(0.1)\nx = x.to('cuda')\naug(x)\n",
                 "aug = RandomSolarize(0.5, 0.1)\nx = torch.randn(2, 3, 8, 8).cuda()\naug(x)\n"):
        assert "model_never_moved" not in diagnose.read_code(code), code
        assert diagnose.diagnose(message, code).verdict == "ambiguous", code
    model = "net = ColorNet(0.1)\nx = x.to('cuda')\nnet(x)\n"
    assert "model_never_moved" in diagnose.read_code(model)


def _traceback(*frames: tuple[str, str, str], message: str = MISMATCH) -> str:
    """A traceback of the given frames (file, function, the line it quotes) ending in the message."""
    return "".join(f'  File "{path}", line 9, in {func}\n    {line}\n' for path, func, line in frames) + message


def test_the_lines_a_traceback_quotes_show_no_model_that_never_moves() -> None:
    """A model called in one frame and a tensor moved in another, as a traceback quotes them: the quoted lines lack
    every move they do not quote, so they show no model left behind; the same lines pasted as the code do."""
    text = _traceback(("/w/textual_inversion.py", "train_embedding", "loss = shared.sd_model(x, c)[0] / gradient_step"),
                      ("/w/ldm/models/diffusion/ddpm.py", "p_losses", "logvar_t = self.logvar[t].to(self.device)"),
                      message="RuntimeError: indices should be either on cpu or on the same device as the indexed "
                      "tensor (cpu)")
    result = diagnose.diagnose(text)
    assert "model_never_moved" not in result.facts.code
    assert result.matches[0].slug == "cpu_lookup_table"
    code = "loss = sd_model(x, c)\nlogvar_t = logvar[t].to(device)\n"
    assert "model_never_moved" in diagnose.read_code(code)


def test_torchscript_s_serialized_forward_is_no_forward_of_the_user_s_code() -> None:
    """`code/__torch__/.../head.py, in forward` is the graph a trace or a script recorded, not a forward run as
    written: it does not speak for a tensor that forward makes, and the trace's recorded device comes first."""
    text = "RuntimeError: The following operation failed in the TorchScript interpreter.\n" + _traceback(
        ("code/__torch__/ultralytics/nn/modules/head.py", "forward", "x1y1 = torch.sub(anchor_points, lt)"))
    result = diagnose.diagnose(text)
    assert "user_forward" not in result.facts.frames
    assert result.matches[0].slug == "traced_device_constant"
    # raised inside the graph is no recorded device shown: an input never moved raises there too (`jit.load(p).cuda()`)
    assert result.verdict == "ambiguous"
    conv = text.replace("x1y1 = torch.sub(anchor_points, lt)", "input = torch._convolution(x, weight, bias)")
    assert diagnose.diagnose(conv).verdict == "ambiguous"
    recorded = text.replace("x1y1 = torch.sub(anchor_points, lt)",
                            'x1y1 = torch.sub(anchor_points, torch.zeros([1], device=torch.device("cpu")))')
    assert diagnose.diagnose(recorded).verdict == "scenario"  # the recorded device on the serialized line
    eager = text.replace("code/__torch__/ultralytics", "/home/me/ultralytics").replace(
        "RuntimeError: The following operation failed in the TorchScript interpreter.\n", "")
    assert "user_forward" in diagnose.read(eager).frames


def test_a_device_error_inside_torchscript_points_at_the_recorded_device() -> None:
    """An RNN's hidden state on another device than its input, raised inside the TorchScript interpreter: a
    state made in forward, whose device a trace recorded as a constant; both lessons are offered."""
    result = diagnose.diagnose("RuntimeError: Input and hidden tensors are not at the same device, found input "
                               "tensor at cpu and hidden tensor at cuda:0\nThe above operation failed in interpreter.")
    assert result.verdict == "ambiguous"
    assert {m.slug for m in result.matches[:2]} == {"factory_in_forward", "traced_device_constant"}
    assert "torchscript" in result.facts.frames


def test_expected_verdicts() -> None:
    """A report labelled with a verdict expects that verdict; every other label of the yardstick is a scenario of
    the catalog (counted as covered), none is a slug the catalog lacks."""
    for verdict in ("not_in_catalog", "fixed_upstream", "not_device_error"):
        assert expected_verdict(verdict) == verdict
    slugs = set(registry.slugs())
    labels = {r["label"] for r in REPORTS}
    assert labels - slugs <= {"not_in_catalog", "fixed_upstream", "not_device_error"}, labels - slugs


def test_pack_sequence_under_a_device_default_is_the_default_s_lesson_and_a_list_of_lengths_no_longer_is() -> None:
    """What PyTorch does today, on the emulated device as the default: pack_sequence makes its lengths on it and
    pack_padded_sequence refuses them (pytorch/pytorch#88643, open): global_default_device's mechanism, a library's
    factory under the default device, with the caveat of the bug and the two ways around it, which pass here. A list
    handed to pack_padded_sequence is made on the CPU (fixed in 2.1.0), so only an older release raises on it."""
    import traceback

    import torch
    from torch.nn.utils.rnn import pack_padded_sequence, pack_sequence, pad_sequence

    from samedevice import emulator

    seqs = [torch.ones(3, device=emulator.device()), torch.ones(2, device=emulator.device())]
    with torch.device(emulator.device()):
        with pytest.raises(RuntimeError, match="'lengths' argument should be a 1D CPU int64 tensor") as raised:
            pack_sequence(seqs)
        with torch.device("cpu"):
            assert pack_sequence(seqs).data.device == emulator.device()
        packed = pack_padded_sequence(pad_sequence(seqs), [len(s) for s in seqs], enforce_sorted=False)
    assert (packed.data.device, packed.batch_sizes.device.type) == (emulator.device(), "cpu")
    pasted = "".join(traceback.format_exception(raised.type, raised.value, raised.tb))
    result = diagnose.diagnose(pasted)
    assert (result.verdict, result.matches[0].slug) == ("scenario", "global_default_device")
    assert "pytorch/pytorch#88643" in result.note
    assert "with torch.device('cpu')" in result.note
    # the message alone with the code's call of it, or with a default device set and the lengths made as a tensor
    assert "pytorch/pytorch#88643" in diagnose.diagnose(LENGTHS, "packed = pack_sequence(seqs)\n").note
    made = diagnose.diagnose(LENGTHS, "torch.set_default_device('cuda')\nlens = torch.tensor([3, 2])\n"
                             "packed = pack_padded_sequence(padded, lens)\n")
    assert (made.verdict, made.matches[0].slug, made.note) == ("scenario", "global_default_device", "")


BUSY = "RuntimeError: CUDA error: CUDA-capable device(s) is/are busy or unavailable"


@pytest.mark.parametrize("text", [BUSY, "RuntimeError: CUDA error: all CUDA-capable devices are busy or unavailable",
                                  "THCudaCheck FAIL file=THCStorage.cu line=66 error=46 : all CUDA-capable devices "
                                  "are busy or unavailable"])
def test_a_busy_gpu_is_another_process_s_unless_ranks_ran_and_then_it_is_every_rank_on_device_0(text: str) -> None:
    """CUDA refuses a second process a GPU in exclusive-process compute mode, and a GPU the driver or a container
    does not give: no lesson, said so with the check. Where ranks ran (the code, DDP's frames, torchrun's prefix),
    every rank touching GPU 0 is two lessons' case: a load without map_location, an index-less 'cuda'."""
    both = {"ddp_rank_map_location", "index_less_device"}
    alone = diagnose.diagnose(text)
    assert (alone.verdict, {m.slug for m in alone.matches}) == ("not_in_catalog", both)
    assert "compute_mode" in alone.note
    ranked = diagnose.diagnose("[rank1]: " + text)
    assert (ranked.verdict, {m.slug for m in ranked.matches}) == ("ambiguous", both)
    loaded = diagnose.diagnose(text, "rank = int(os.environ['RANK'])\nckpt = torch.load('last.pt')\n"
                               "model = DistributedDataParallel(model, device_ids=[rank])\n")
    assert loaded.matches[0].slug == "ddp_rank_map_location"
    moved = diagnose.diagnose(text, "rank = int(os.environ['RANK'])\nx = batch.cuda()\n")
    assert moved.matches[0].slug == "index_less_device"


def test_other_libraries_checks_name_their_devices() -> None:
    """xformers' check of its attention bias names the query's device and the bias's: a bias made without a device,
    on the current device 0, beside a query on another (index_less_device first). torch_xla's check of an input names
    the CPU tensor's type; XLA's devices are read in PyTorch's own messages too."""
    bias = ("ValueError: Attention bias and Query/Key/Value should be on the same device\n  query.device: cuda:7\n"
            "  attn_bias   : cuda:0")
    result = diagnose.diagnose(bias)
    assert (result.facts.devices, result.matches[0].slug) == (("cuda:7", "cuda:0"), "index_less_device")
    assert diagnose.read("Attention bias and Query/Key/Value should be on the same device").template == "attn_bias"
    xla = diagnose.read("RuntimeError: Check failed: xtensor: Input tensor is not an XLA tensor: CPUFloatType")
    assert (xla.template, xla.devices, xla.pair) == ("xla_input", ("xla", "cpu"), "accelerator_cpu")
    found = diagnose.read(f"{TWO_DEVICES.replace('cuda:0', 'xla:0')}")
    assert (found.devices, found.pair) == (("xla:0", "cpu"), "accelerator_cpu")
    # a log whose device check came before a later illegal access is read by the check
    log = TWO_DEVICES + "\nRuntimeError: CUDA error: an illegal memory access was encountered"
    assert diagnose.read(log).template == "codegen"


TWO_GPUS = "RuntimeError: Expected all tensors to be on the same device, but found at least two devices, cuda:1 and cuda:0!"
ORDINAL_IN_LOAD = '''Traceback (most recent call last):
  File "test.py", line 12, in <module>
    model.load_state_dict(torch.load('checkpoint.pth'))
  File "/usr/local/lib/python3.6/dist-packages/torch/serialization.py", line 88, in default_restore_location
    result = fn(storage, location)
  File "/usr/local/lib/python3.6/dist-packages/torch/serialization.py", line 70, in _cuda_deserialize
    return obj.cuda(device)
RuntimeError: cuda runtime error (10) : invalid device ordinal at torch/csrc/cuda/Module.cpp:32'''
DDP_PARAMS = ("ValueError: DistributedDataParallel device_ids and output_device arguments only work with "
              "single-device/multiple-device GPU modules or CPU modules, but got device_ids [0], output_device None, "
              "and module parameters {%s}.")


@pytest.mark.parametrize(("text", "code", "verdict", "first"), [
    # an old torch.load restoring a saved index the host lacks: the checkpoint lesson, not a rank's index
    (ORDINAL_IN_LOAD, "", "scenario", "cuda_checkpoint_on_cpu_host"),
    # DDP given device_ids for a module on two GPUs: device_ids=None, no lesson; on the CPU, a module never moved,
    # unless the code runs on the CPU by design
    (DDP_PARAMS % "device(type='cuda', index=0), device(type='cuda', index=1)", "", "not_in_catalog", None),
    (DDP_PARAMS % "device(type='cpu')", "", "scenario", "model_not_moved"),
    (DDP_PARAMS % "device(type='cpu')", "device = 'cpu'\nmodel = DDP(Net(), device_ids=[0])\n", "not_in_catalog", None),
    # a CUDA extension's check, met by code that chose the CPU: the extension has no CPU kernel
    ("RuntimeError: input must be a CUDA tensor", "device = 'cpu'\nmodel = Net()\nx = x.to(device)\nout = model(x)\n",
     "not_in_catalog", None),
    # a DDP resume whose load is mapped to the CPU: the lesson's fix is there, so it is not named alone
    (TWO_GPUS, "model = DistributedDataParallel(model, device_ids=[local_rank])\n"
     "ckpt = torch.load(path, map_location='cpu')\nmodel.load_state_dict(ckpt)\n", "ambiguous", "ddp_rank_map_location"),
    # diffusers' generator message with the pipeline moved: not a model never moved
    ("ValueError: Cannot generate a cpu tensor from a generator of type cuda.",
     "pipe = DiffusionPipeline.from_pretrained(mid)\npipe = pipe.to('cuda')\ng = torch.Generator('cuda')\n"
     "image = pipe(prompt, generator=g).images[0]\n", "ambiguous", None),
    # only input_ids moved, the model moved at its load: the tokenizer lesson's own case
    (TWO_DEVICES, "model = AutoModel.from_pretrained(name).to(device)\nenc = tokenizer(texts, return_tensors='pt')\n"
     "out = model(enc['input_ids'].to(device), attention_mask=enc['attention_mask'])\n", "scenario",
     "tokenizer_outputs"),
])
def test_what_an_independent_review_found_named_with_confidence(text: str, code: str, verdict: str,
                                                                first: str | None) -> None:
    """Inputs a third review found answered with a confident wrong verdict, each answered as its mechanism says."""
    result = diagnose.diagnose(text, code)
    assert result.verdict == verdict, (result.note, [m.slug for m in result.matches])
    if first is not None:
        assert result.matches[0].slug == first
    if verdict == "ambiguous" and "generator" in text:
        assert result.matches[0].slug != "model_not_moved"


def test_signals_the_review_found_too_broad() -> None:
    """An import of torch.export is no export of the model's, its call is (the documented `export(model, args)`); a
    commented-out tuple key and a parenthesized index (`self.blocks[(i - 1)](x)`) are no plain dict of layers; a
    model moved on its load line is no tokenizer output moved; an exported program's module moved at once is a model
    moved."""
    assert "jit_trace" not in diagnose.read_code("from torch.export import export\nmodel = Net()\n")
    assert "jit_trace" in diagnose.read_code("from torch.export import export\nep = export(model, (x,))\n")
    assert "plain_list_layers" not in diagnose.read_code(
        "def forward(self, x):\n    # x = self.convs[('upconv', i, 0)](x)\n    x = self.blocks[(i - 1)](x)\n")
    assert "plain_list_layers" in diagnose.read_code("def forward(self, x):\n    x = self.convs[('upconv', i, 0)](x)\n")
    moved = diagnose.read_code("model = AutoModel.from_pretrained(n).to(device)\nenc = tokenizer(t, return_tensors='pt')\n")
    assert "tokenizer_not_moved" in moved
    assert "tokenizer_moved" in diagnose.read_code("enc = tokenizer(t, return_tensors='pt')\nenc = enc.to(device)\n")
    assert "model_moved" in diagnose.read_code("ep = torch.export.export(model, (x,))\nm = ep.module().to(device)\n")


def test_what_the_fifteenth_batch_showed_unread() -> None:
    """A device string PyTorch has no device for ('gpu'), raised by torch.device as PyTorch words it or by torch.load
    as a location tag; a build without the backend a storage is restored to; an argument whose space a wrapped line
    lost (`#4'other'`); Colab's linked frames; and a draw given a CPU generator and a device in its own call, raised
    as PyTorch raises it on the emulated device: no default device's doing."""
    import torch

    from samedevice import emulator

    with pytest.raises(RuntimeError, match="device string: gpu") as named:
        torch.device("gpu")
    for text in (f"RuntimeError: {named.value}",
                 "RuntimeError: don't know how to restore data location of torch.FloatStorage (tagged with gpu)"):
        result = diagnose.diagnose(text)
        assert (result.verdict, result.matches) == ("not_in_catalog", ())
        assert "'gpu' is none" in result.note
    mac = diagnose.diagnose("torch.UntypedStorage(): Storage device not recognized: mps")
    assert (mac.verdict, mac.matches[0].slug) == ("scenario", "cuda_checkpoint_on_cpu_host")
    wrapped = diagnose.read("Expected object of type torch.FloatTensor but found type torch.cuda.FloatTensor for\n"
                            " argument #4'other'")
    assert (wrapped.argument, wrapped.side) == ("other", "state")
    colab = ("[<ipython-input-9-60e69670aa0f>](https://localhost:8080/#) in forward(self, x, t)\n"
             "---> 13         xt = torch.cat([x, t], dim=1)\n\n" + TWO_DEVICES)
    assert diagnose.read(colab).frames == ("user_forward",)
    with pytest.raises(RuntimeError, match="generator") as drawn:
        torch.randn(3, generator=torch.Generator().manual_seed(0), device=emulator.device())
    text = f"RuntimeError: {drawn.value}".replace(emulator.device().type, "cuda")
    code = "latents = torch.randn(\n    (1, 4, 64, 64),\n    generator=generator,\n    device=torch_device,\n)\n"
    given = diagnose.diagnose(text, code)
    assert (given.verdict, given.matches) == ("not_in_catalog", ())
    assert "torch.Generator(device=" in given.note
    assert diagnose.diagnose(text, "torch.set_default_device('cuda')\n").matches[0].slug == "global_default_device"


def test_a_quantized_or_sparse_backend_without_a_kernel_is_a_layout_not_a_device() -> None:
    """The dispatcher's "Could not run" names a backend: an accelerator's is an op without a kernel there; a quantized
    CPU one (a quantized tensor met a float op, as PyTorch raises it here) is not read as a device's."""
    import warnings

    import torch

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # quantized tensors are deprecated in recent releases, and still raise this
        quantized = torch.quantize_per_tensor(torch.randn(2, 2), 1.0, 0, torch.qint8)
    with pytest.raises(NotImplementedError, match="'QuantizedCPU' backend") as raised:
        quantized + quantized
    assert diagnose.read(f"NotImplementedError: {raised.value}").kind != "cpu_only"


BUSY_SCRIPT = "dev_2 = torch.device('cuda:1')\nprint(torch.rand(3, 3).cuda())\n"
CHOICE = ('if torch.cuda.is_available():\n    device = torch.device("cuda")\nelse:\n    device = torch.device("cpu")\n'
          "model = Net()\nfor images, targets in loader:\n    images = images.to(device)\n    out = model(images)\n")


@pytest.mark.parametrize(("text", "code", "verdict", "first"), [
    # a CPU fallback of a device choice is no run on the CPU by design: the model never moved is
    ("RuntimeError: input must be a CUDA tensor", CHOICE, "scenario", "model_not_moved"),
    (DDP_PARAMS % "device(type='cpu')", CHOICE.replace("model = Net()", "model = DDP(Net(), device_ids=[0])"),
     "scenario", "model_not_moved"),
    # a busy GPU with a device index in the code but one process: no rank ran
    (BUSY, BUSY_SCRIPT, "not_in_catalog", "index_less_device"),
    (BUSY, "torch.cuda.set_device(0)\nmodel = Net().cuda()\n", "not_in_catalog", "index_less_device"),
    # a prior of 0-dim parameters (Python numbers pass as scalars since 1.x) beside a value from a buffer: candidates
    ('  File "/env/lib/python3.11/site-packages/torch/distributions/normal.py", line 98, in log_prob\n'
     "    -((value - self.loc) ** 2) / (2 * var)\n" + TWO_DEVICES,
     "prior = Normal(0, 1)\nmu, std = policy(obs.cuda())\ndist = Normal(mu, std)\nlogp = dist.log_prob(batch['a'])\n",
     "ambiguous", None),
    # a CPU default tensor type, or a commented-out default device: the lengths are the user's, moved to the device
    (LENGTHS, "torch.set_default_tensor_type(torch.DoubleTensor)\nlens = lengths.to(device)\n"
     "packed = pack_padded_sequence(emb, lens)\n", "scenario", "pack_padded_lengths"),
    (LENGTHS, "# torch.set_default_device('cuda')\npacked = pack_padded_sequence(emb, lens.cuda())\n", "scenario",
     "pack_padded_lengths"),
    # commented-out calls are no code: not a list of lengths, not pack_sequence
    (LENGTHS, "# packed = pack_padded_sequence(x, [2, 1])\npacked = pack_padded_sequence(x, lengths)\n",
     "scenario", "pack_padded_lengths"),
    (LENGTHS, "# packed = pack_sequence(seqs)\nlens = torch.tensor(lens).cuda()\npacked = pack_padded_sequence(p, lens)\n",
     "scenario", "pack_padded_lengths"),
    # the only lesson that fits, spoken against by the code (the draw's device written in its call): not named alone
    ("RuntimeError: Expected a 'cuda' device type for generator but found 'cpu'",
     "torch.set_default_device('cuda')\nloader = DataLoader(ds, batch_size=8, shuffle=True)\n"
     "noise = torch.randn((1, 4), generator=g, device=device)\n", "ambiguous", "global_default_device"),
])
def test_what_a_fourth_review_found(text: str, code: str, verdict: str, first: str | None) -> None:
    """Inputs a fourth review found answered wrong: each as its mechanism says."""
    result = diagnose.diagnose(text, code)
    assert result.verdict == verdict, (result.note, [m.slug for m in result.matches])
    if first is not None:
        assert result.matches[0].slug == first
    if verdict == "ambiguous" and "normal.py" in text:
        assert "batch_not_moved" in [m.slug for m in result.matches]


def test_a_device_name_no_backend_has_is_told_by_its_name() -> None:
    """'gpu' is a name PyTorch never had; 'npu' is a backend whose package was not imported: the note says the name."""
    template = ("RuntimeError: Expected one of cpu, cuda, ipu, xpu, mkldnn, opengl, opencl, ideep, hip, ve, fpga, maia, "
                "xla, lazy, vulkan, mps, meta, hpu, mtia, privateuseone device type at start of device string: %s")
    npu = diagnose.diagnose(template % "npu")
    assert npu.verdict == "not_in_catalog"
    assert npu.note.startswith("'npu' is no device")
    assert "torch_npu" in npu.note


def test_rules_a_review_found_unguarded() -> None:
    """A fragment that does not parse still shows a list of lengths (the text rule); a traceback through torch's own
    pack_sequence frame names the default device's lesson and keeps the list rule off; xformers' wording is why the
    worker's lesson comes first; device 0's memory wording stops at a sentence's end either way; torch.load's
    map_location message stops at the next frame."""
    fragment = "for x in xs:\n    packed = pack_padded_sequence(x, [2, 1]\n"  # cut mid-call
    assert "lengths_list" in diagnose.read_code(fragment)
    assert diagnose.diagnose(LENGTHS, fragment).verdict == "fixed_upstream"
    through = ('  File "/env/lib/python3.8/site-packages/torch/nn/utils/rnn.py", line 484, in pack_sequence\n'
               "    return pack_padded_sequence(pad_sequence(sequences), lengths, enforce_sorted=enforce_sorted)\n"
               '  File "/env/lib/python3.8/site-packages/torch/nn/utils/rnn.py", line 264, in pack_padded_sequence\n'
               "    _VF._pack_padded_sequence(input, lengths, batch_first)\n" + LENGTHS)
    result = diagnose.diagnose(through, "packed = pack_padded_sequence(x, [2, 1])\n")
    assert (result.verdict, result.matches[0].slug) == ("scenario", "global_default_device")
    bias = ("ValueError: Attention bias and Query/Key/Value should be on the same device\n  query.device: cuda:7\n"
            "  attn_bias   : cuda:0")
    assert any("xformers" in why for why in diagnose.diagnose(bias).matches[0].why)
    assert diagnose.read("RuntimeError: out of memory! Expected all tensors on cuda:0 and cpu").template != "device0_memory"
    lambda_frame = ('  File "/env/lib/python3.6/site-packages/torch/serialization.py", line 88, in default_restore_location\n'
                    "    result = map_location(storage, location)\n"
                    '  File "train.py", line 40, in <lambda>\n    ckpt = torch.load(p, map_location=lambda s, l: s.cuda(dev()))\n'
                    "TypeError: 'int' object is not callable")
    assert diagnose.read(lambda_frame).template != "map_location_not_callable"


def test_what_the_seventeenth_batch_showed_unread() -> None:
    """A typed constructor given a device, raised as PyTorch raises it on the emulated device; and a location tag that
    is a bare index ('0' where 'cuda:0' was meant): no lesson, each with what to write."""
    import torch

    from samedevice import emulator

    with pytest.raises(RuntimeError, match="legacy constructor") as raised:
        torch.LongTensor([1, 2], device=emulator.device())
    typed = diagnose.diagnose(f"RuntimeError: {raised.value}")
    assert (typed.verdict, typed.matches) == ("not_in_catalog", ())
    assert "torch.tensor(data, dtype=torch.long, device=device)" in typed.note
    bare = diagnose.diagnose("RuntimeError: don't know how to restore data location of torch.HalfStorage (tagged with 0)")
    assert (bare.verdict, bare.matches) == ("not_in_catalog", ())
    assert bare.note.startswith("'0' is no device")


def test_fake_tensors_refusing_a_copy_between_devices_is_fixed_upstream() -> None:
    """2.0's fake tensors refused copy_ between two devices, which eager allows; this PyTorch's take it (run here on
    the emulated device), and the 2.0 message says which release fixed it. Another op's refusal is a device error."""
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode

    from samedevice import emulator

    with FakeTensorMode():
        on_device, on_cpu = torch.empty(3, device=emulator.device()), torch.empty(3)
        assert on_device.copy_(on_cpu).device == emulator.device()
        assert on_cpu.copy_(on_device).device.type == "cpu"
    old = diagnose.diagnose("RuntimeError: Unhandled FakeTensor Device Propagation for aten.copy_.default, found two "
                            "different devices cpu, cuda:0")
    assert old.verdict == "fixed_upstream"
    assert old.note.startswith("fixed upstream in PyTorch 2.1.0: ")
    add = diagnose.diagnose("RuntimeError: Unhandled FakeTensor Device Propagation for aten.add.Tensor, found two "
                            "different devices cpu, cuda:0")
    assert add.verdict == "ambiguous"


def test_a_typed_constructor_given_a_tensor_of_another_device_is_no_lesson() -> None:
    """`torch.FloatTensor(x)` of a tensor off the CPU: the typed constructor's check of its options, raised as PyTorch
    raises it (on meta here), no lesson, with what to write; the same check failed by a dtype alone is no device's."""
    import torch

    with pytest.raises(TypeError, match="expected TensorOptions") as raised:
        torch.FloatTensor(torch.zeros(2, device="meta"))
    typed = diagnose.diagnose(f"TypeError: {raised.value}".replace("device=meta", "device=cuda:0"))
    assert (typed.verdict, typed.facts.template, typed.facts.devices) == \
        ("not_in_catalog", "legacy_constructor_tensor", ("cuda:0", "cpu"))
    assert "`x.float()`" in typed.note
    half = diagnose.read(f"TypeError: {raised.value}".replace("device=meta", "device=cuda:0")
                         .replace("dtype=float", "dtype=c10::Half"))
    assert half.template == "legacy_constructor_tensor"  # dtypes print as C++ names: c10::Half, c10::complex<float>
    assert "`x.long()` for LongTensor" in typed.note
    flooded = "expected TensorOptions(dtype=float, device=cpu, " * 4000 + f"\nTypeError: {raised.value}"
    assert diagnose.read(flooded.replace("device=meta", "device=cuda:0")).template == "legacy_constructor_tensor"
    with pytest.raises(TypeError, match="expected TensorOptions") as dtype_only:
        torch.LongTensor(torch.zeros(2))
    assert diagnose.read(f"TypeError: {dtype_only.value}").template is None


def test_a_retyped_found_at_least_is_read() -> None:
    """A paste retyped with a typo ("found at leaset two devices") reads as the codegen message it was."""
    facts = diagnose.read("RuntimeError:Expected all tensors to be on the same device, but found at leaset two devices, "
                          "cuda:0 and cuda:1")
    assert (facts.template, facts.devices) == ("codegen", ("cuda:0", "cuda:1"))


def _reading(result: diagnose.Diagnosis) -> tuple[object, ...]:
    """All a diagnosis concludes, and the facts it concludes from (not the message's text as flattened)."""
    facts = result.facts
    return (result.verdict, [m.slug for m in result.matches], facts.template, facts.kind, facts.devices,
            facts.argument, facts.op, facts.frames, facts.code, facts.side, facts.site, facts.torch_version)


PASTED_REPORTS = load() + load(HELD_OUT_PATH)


@given(st.data())
def test_a_paste_quoted_fenced_or_with_its_frames_wrapped_reads_as_the_traceback(data: st.DataObject) -> None:
    """A real report's error reads the same quoted (`> `), inside Markdown's fences, with Windows' line ends, or
    with its frame lines wrapped at their spaces, as a forum, an issue or a narrow terminal gives it."""
    report = data.draw(st.sampled_from(PASTED_REPORTS), label="report")
    text = data.draw(pasted(report["error"]), label="pasted")
    note(report["id"])
    assert _reading(diagnose.diagnose(text)) == _reading(diagnose.diagnose(report["error"]))


@given(st.data())
def test_a_report_s_error_as_a_notebook_s_output_reads_as_the_error(data: st.DataObject) -> None:
    """A real report's error, as a notebook keeps it (an error output whose traceback is a list of lines, in a
    notebook whose cells ran nothing else, or the output alone), reads as the error pasted."""
    report = data.draw(st.sampled_from(PASTED_REPORTS), label="report")
    note(report["id"])
    output = {"output_type": "error", "ename": "RuntimeError", "evalue": "",
              "traceback": report["error"].split("\n")}
    book = {"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": [
        {"cell_type": "code", "execution_count": 1, "metadata": {}, "source": "", "outputs": [output]}]}
    shown = json.dumps(data.draw(st.sampled_from([book, output]), label="as"), indent=data.draw(st.sampled_from([None, 1])))
    assert _reading(diagnose.diagnose(shown)) == _reading(diagnose.diagnose(report["error"]))


def test_a_statement_over_several_lines_under_its_frame_is_read_whole() -> None:
    """The line that raised is the statement under the deepest frame, its continuation lines included (Python 3.13
    prints a statement over several lines; a narrow terminal wraps a long one), up to the caret line or the error."""
    traceback = ('  File "train.py", line 9, in forward\n    scale = (x.std() +\n      torch.tensor(1e-6))\n'
                 "    ~~~~~~~~^~~\nRuntimeError: Expected all tensors to be on the same device, but found at least "
                 "two devices, cuda:0 and cpu!")
    assert diagnose.raising_line(traceback) == "scale = (x.std() + torch.tensor(1e-6))"
    assert "factory_raised" in diagnose.read(traceback).code
    ipython = ("---> 68     idx = torch.arange(0,\n nnz).sub_(mask.cumsum(dim=0))\n     69 \n\nRuntimeError: "
               "Expected all tensors to be on the same device, but found at least two devices, cuda:0 and cpu!")
    assert diagnose.raising_line(ipython) == "idx = torch.arange(0, nnz).sub_(mask.cumsum(dim=0))"
    whole = '  File "a.py", line 2, in f\n    return g(x)\n  File "b.py", line 5, in g\n    y = x + 1\nValueError: no'
    assert diagnose.raising_line(whole) == "y = x + 1"


VERDICTS = {"scenario", "ambiguous", "not_device_error", "fixed_upstream", "not_in_catalog", "unknown"}
# text with the pieces a diagnosis reads: messages' words, devices, frames, quotes, fences, brackets, code
PIECES = st.sampled_from(["Expected all tensors to be on the same device", " cuda:0", " cpu", "!", "\n", "> ", "```",
                          'File "a.py", line 3, in forward', "    x = torch.zeros(3)", "---> 12 ", "(", ")", "[",
                          "self.w * x", "def forward(self, x):", "model.to(device)", "Traceback", "RuntimeError: ",
                          "\r\n", "\t", "\\", '"', "'", "\ud800", "mps", "meta", "argument mat1", "wrapper_CUDA_addmm"])


@given(st.lists(st.one_of(PIECES, st.text(max_size=8)), max_size=25).map("".join),
       st.lists(st.one_of(PIECES, st.text(max_size=8)), max_size=15).map("".join))
def test_any_text_gets_a_verdict_its_json_and_its_rendering(text: str, code: str) -> None:
    """Whatever is pasted (fragments of messages, frames and code in any order, lone surrogates, control
    characters), the diagnosis answers with one of its verdicts, JSON that parses, and text to print."""
    result = diagnose.diagnose(text, code)
    assert result.verdict in VERDICTS
    assert json.loads(diagnose.as_json(result))["verdict"] == result.verdict
    assert diagnose.render(result).strip()


def test_mps_s_convolution_check_names_the_side_left_on_the_cpu() -> None:
    """MPS's convolution fallback names its input's and its weight's devices (its quote missing as PyTorch prints
    it): the side on the CPU, and on a Mac the two device pickers first, either way round."""
    batch = diagnose.read("RuntimeError: slow_conv2d_forward_mps: input(device='cpu') and weight(device=mps:0')  "
                          "must be on the same device")
    assert (batch.template, batch.devices, batch.side) == ("mps_conv", ("cpu", "mps:0"), "input")
    model = "RuntimeError: slow_conv2d_forward_mps: input(device='mps:0') and weight(device=cpu')  must be on the same device"
    assert diagnose.read(model).side == "weights"
    for text in (batch.message, model):
        assert diagnose.diagnose(text).matches[0].slug == "mps_device_pick", text
    legacy = diagnose.diagnose("Input type (MPSFloatType) and weight type (torch.FloatTensor) should be the same")
    assert legacy.verdict == "ambiguous"
    assert "mps_device_pick" in [m.slug for m in legacy.matches[:3]]
    cuda = "Input type (torch.cuda.FloatTensor) and weight type (torch.FloatTensor) should be the same"
    assert "mps_device_pick" not in [m.slug for m in diagnose.diagnose(cuda).matches]


def test_a_lesson_whose_broken_code_raises_nothing_on_the_message_s_accelerator_is_no_candidate() -> None:
    """Two device pickers agree on a CUDA machine (both say cuda): mps_device_pick's broken code raises there on
    MPS and XPU alone (its registry symptoms), so a CUDA message never offers it; the same message on MPS or XPU
    does."""
    assert registry.get("mps_device_pick").symptoms["cuda"] == "none"
    mat1 = MISMATCH + " (when checking argument for argument mat1 in method wrapper_CUDA_addmm)"
    assert "mps_device_pick" not in [m.slug for m in diagnose.diagnose(mat1).matches]
    for device in ("mps:0", "xpu:0"):
        assert "mps_device_pick" in [m.slug for m in diagnose.diagnose(mat1.replace("cuda:0", device)).matches[:3]]
    # unless the code shows the lesson's case: a picker that knows only MPS, on a CUDA machine
    mps_only = ('device = torch.device("mps" if torch.backends.mps.is_available() else "cpu")\n'
                "model.to(device)\nout = model(x.cuda())\n")
    assert "mps_device_pick" in [m.slug for m in diagnose.diagnose(mat1, mps_only).matches]
    # a device the registry does not list (an NPU) excludes nothing
    npu = mat1.replace("cuda:0", "npu:0").replace("CUDA", "NPU")
    assert "mps_device_pick" in [m.slug for m in diagnose.diagnose(npu).matches]


def test_a_pre_0_4_signature_names_the_argument_given_on_the_wrong_device() -> None:
    """Before 0.4 a function's parser printed the types it got beside the signature it expected: the argument whose
    type differs in its device alone is the one on the wrong device (an embedding's index on the CPU: the batch)."""
    text = ("TypeError: torch.index_select received an invalid combination of arguments - got (torch.cuda.FloatTensor, "
            "int, torch.LongTensor), but expected (torch.cuda.FloatTensor source, int dim, torch.cuda.LongTensor index)")
    facts = diagnose.read(text)
    assert (facts.op, facts.argument, facts.side) == ("index_select", "index", "input")
    assert {"tokenizer_outputs", "batch_not_moved"} <= {m.slug for m in diagnose.diagnose(text).matches[:3]}
    assert diagnose.diagnose(text).verdict != "fixed_upstream"  # no optimizer's state: 0.4's fix is not this
    # 0.3 marked the argument it refused with `!`
    marked = diagnose.read(text.replace("int, torch.LongTensor)", "int, !torch.LongTensor!)"))
    assert (marked.template, marked.argument, marked.side) == ("invalid_signature", "index", "input")


@pytest.mark.parametrize("types", ["torch.FloatTensor, ", "torch.cuda.FloatTensor, ", "torch.cuda.FloatTensor, int, "])
@pytest.mark.parametrize("parser", ["torch.index_select", "CudaClassNLLCriterion_updateOutput", "add_"])
def test_a_parser_s_list_of_types_left_unclosed_is_read_in_one_pass(parser: str, types: str) -> None:
    """The parser's templates look ahead over the list of types it got: bounded, so a list pasted without its end
    (or a log that repeats a type for 300 KB) is read at once, not backtracked over for minutes."""
    text = f"TypeError: {parser} received an invalid combination of arguments - got (" + types * 12000
    assert diagnose.diagnose(text).verdict in VERDICTS


def test_torch_compile_s_fake_tensor_device_check_is_a_mismatch_of_its_two_devices() -> None:
    """Tracing under torch.compile runs each op on fake tensors and checks their devices as the kernel would:
    the devices and the op are read (the first device is the one met first, so no side), and the candidates are a
    device mismatch's."""
    text = ("torch._dynamo.exc.TorchRuntimeError: Dynamo failed to run FX node with fake tensors: call_function "
            "<built-in function add>(...): got RuntimeError('Unhandled FakeTensor Device Propagation for "
            "aten.add.Tensor, found two different devices cuda:0, cpu')")
    facts = diagnose.read(text)
    assert (facts.template, facts.kind, facts.devices, facts.op, facts.side) == (
        "fake_devices", "mismatch", ("cuda:0", "cpu"), "add", None)
    assert diagnose.diagnose(text).verdict == "ambiguous"
    assert diagnose.read("Unhandled FakeTensor Device Propagation for aten.mm.default, found two different devices "
                         "cuda:0, cuda:1").devices == ("cuda:0", "cuda:1")


def test_a_kernel_missing_for_a_dtype_is_no_device_error() -> None:
    """ATen's `"<kernel>" not implemented for '<dtype>'` (this PyTorch's wording, run here) is one tensor's dtype on
    the device it ran on, not two devices: answered so. A CPU kernel refusing half precision adds that the model
    may never have reached the GPU."""
    import torch

    with pytest.raises(NotImplementedError, match="not implemented for 'UInt16'") as raised:
        torch.zeros(3, dtype=torch.uint16).abs()
    for text in (f"NotImplementedError: {raised.value}", "RuntimeError: \"flip_cuda\" not implemented for 'Bool'"):
        result = diagnose.diagnose(text)
        assert (result.facts.template, result.verdict) == ("kernel_dtype", "not_device_error"), text
        assert "never got there" not in result.note
    half = diagnose.diagnose("RuntimeError: \"addmm_impl_cpu_\" not implemented for 'Half'")
    assert (half.verdict, half.facts.op) == ("not_device_error", "addmm_impl_cpu_")
    assert "if the model was meant to run on the GPU, it never got there" in half.note
    layer_norm = diagnose.diagnose("RuntimeError: \"LayerNormKernelImpl\" not implemented for 'Half'")
    assert "never got there" in layer_norm.note  # a kernel that is not CUDA's
    assert diagnose.read(f"NotImplementedError({str(raised.value)!r})").template == "kernel_dtype"  # an exception's repr
    # a log that also holds a device check is read by that check, in either order
    for log in (MISMATCH + "\n" + text, text + "\n" + MISMATCH):
        assert diagnose.diagnose(log).facts.template == "codegen"


@pytest.mark.parametrize(("device_map", "split"), [
    ('"auto"', True), ('"balanced"', True), ('{"model.embed_tokens": 0, "lm_head": 1}', True), ("args.device_map", True),
    ('{"": 0, "lm_head": 1}', True), ("device_map", True),
    ('torch.device("cuda:0")', False), ('"cuda:1"', False), ('"cuda"', False), ('"hpu"', False), ("0", False),
    ('{"": 0}', False), ("{'': accelerator.process_index}", False), ("accelerator.process_index", False),
    ('f"cuda:{rank}"', False), ("local_rank", False), ("device", False), ("DEVICE", False), ("self.device", False),
    ("Accelerator().device", False), ('{"": torch.cuda.current_device()}', False)])
def test_a_device_map_that_names_one_device_splits_nothing(device_map: str, split: bool) -> None:
    """A device map naming one device (a device string, an index, a torch.device, `{"": device}`, a variable that
    holds a device) puts the whole model there: no split, so two GPUs in the message name no split model alone."""
    code = f"model = AutoModelForCausalLM.from_pretrained(name, device_map={device_map})\n"
    assert ("split_model" in diagnose.read_code(code)) is split
    assert ("device_map" in diagnose.read_code(code)) is split
    result = diagnose.diagnose("RuntimeError: Expected all tensors to be on the same device, but found at least two "
                               "devices, cuda:0 and cuda:1!", code)
    assert (result.verdict == "scenario") is split


def test_a_linear_solve_s_check_names_its_two_devices() -> None:
    """linearSolveCheckInputs's "Expected b and A to be on the same device, but found b on cpu and A on <device>
    instead." (run here on the emulated device; 1.0 said GPU or CPU) names the devices: a CPU and an accelerator,
    so no worker's index-less device, whatever `cuda:1` in the code suggests."""
    import torch

    from samedevice import emulator

    with pytest.raises(RuntimeError, match="Expected b and A to be on the same device") as raised:
        torch.cholesky_solve(torch.ones(3, 1), torch.eye(3, device=emulator.device()))
    result = diagnose.diagnose(f"RuntimeError: {raised.value}", "lu = LULinear(4)\nlu.to('cuda:1')\n"
                                                                 "lu.weight_inverse()\n")
    assert (result.facts.template, result.facts.devices) == ("named_pair", ("cpu", str(emulator.device())))
    assert "index_less_device" not in [m.slug for m in result.matches]
    assert result.matches[0].slug == "factory_in_forward"
    old = diagnose.read("RuntimeError: Expected b and A to be on the same device, but found b on GPU and A on CPU "
                        "instead.")
    assert old.devices == ("cuda", "cpu")


def test_an_index_in_an_older_release_s_wording_is_a_batch_before_a_tokenizer_s_output() -> None:
    """A tokenizer's output moved as a dict came with transformers 3, in PyTorch 1.5's time: an embedding's index
    on the CPU in the wording of an older release lists a batch never moved first, the tokenizer's output after it;
    the same index in today's wording lists the tokenizer's output first."""
    for message in ("RuntimeError: Expected object of device type cuda but got device type cpu for argument #3 "
                    "'index' in call to _th_index_select",
                    "RuntimeError: Expected object of backend CUDA but got backend CPU for argument #3 'index'"):
        old = diagnose.diagnose(message)
        assert [m.slug for m in old.matches][:2] == ["batch_not_moved", "tokenizer_outputs"], message
        assert "the argument is `index`, but the message's wording is an older release's than this mechanism" \
            in old.matches[1].why
    # the code that shows a tokenizer's output never moved still names it
    code = "ids = torch.tensor([tokenizer.encode(text)])\nout = model(ids)\n"
    assert diagnose.diagnose(message, code).matches[0].slug == "tokenizer_outputs"
    new = diagnose.diagnose("RuntimeError: Expected all tensors to be on the same device, but found at least two "
                            "devices, cuda:0 and cpu! (when checking argument for argument index in method "
                            "wrapper_CUDA__index_select)")
    assert [m.slug for m in new.matches][:2] == ["tokenizer_outputs", "batch_not_moved"]


@pytest.mark.parametrize("text", ["a" * 200000 + "[", '"' + "a" * 200000 + '" not implemented', "self.a[" + "x" * 200000,
                                  "\n" * 200000, " \n" * 100000])
def test_a_long_run_of_word_characters_is_read_in_one_pass(text: str) -> None:
    """A message's optional start (convolution's "Input type", cut to "nput type") is tried only where a word begins,
    so 200 KB of one word is read at once, not retried from each of its letters; a line's indent is read within its
    line, so 200 KB of blank lines is too."""
    assert diagnose.diagnose(RAISED_IN_P_LOSSES.format(text)).facts.template == "indices"
    assert diagnose.diagnose(text).verdict == "unknown"


@pytest.mark.parametrize(("code", "accumulates"), [
    ("model = Net().cuda()\ntotal = torch.zeros(())\nfor x, y in loader:\n"
     "    total += loss_fn(model(x.cuda()), y.cuda()).detach()\n", True),
    ("total_norm = torch.tensor(0.0)\nfor p in params:\n    total_norm += p.grad.norm() ** 2\n", True),
    # by its in-place method, as often as by +=
    ("model = Net().cuda()\ntotal = torch.zeros(())\nfor x, y in loader:\n"
     "    total.add_(criterion(model(x.cuda()), y.cuda()).detach())\n", True),
    ("total = torch.zeros(())\nfor x, y in loader:\n    total.add_(loss.item())\n", False),
    # on the device, or a Python number: no CPU total
    ("total = torch.zeros((), device=device)\ntotal += loss.detach()\n", False),
    ("total = 0.0\ntotal += loss.item()\n", False),
    # made and updated inside forward: a tensor made without device= during the call, the factory's lesson
    ("class Net(nn.Module):\n    def forward(self, x):\n        acc = torch.zeros(x.shape[0])\n        acc += x.sum(1)\n"
     "        return acc\n", False),
    # updated with a number, with itself, or once in a helper (no loop): no running total; the forward's factory
    # keeps its lesson
    ("counts = torch.zeros(10)\nfor label in labels:\n    counts += 1\nclass Net(nn.Module):\n"
     "    def forward(self, x):\n        return x + torch.randn(x.shape)\nmodel = Net().cuda()\nout = model(x.cuda())\n",
     False),
    ("img = torch.from_numpy(a)\nimg /= 255.0\n", False),
    ("weights = torch.tensor(counts)\nweights /= weights.sum()\n", False),
    ("def make_mask(n):\n    m = torch.zeros(n)\n    m += torch.rand(n) > 0.5\n    return m\n", False),
    # the scenario's fix: a Python number
    ("total = torch.zeros(())\nfor x, y in loader:\n    total += loss.item()\n", False),
    ("total = torch.zeros(())\nfor x, y in loader:\n    total += loss.item() * x.size(0)\n", False),
])
def test_a_running_total_on_the_cpu_names_the_one_way_scalar_lesson(code: str, accumulates: bool) -> None:
    """A tensor made on the CPU and updated in place outside forward is a running total: with the bare mismatch it
    names device_scalar_into_cpu alone, before the factory's lesson; a total on the device, a Python number, or a
    tensor made in forward is no such total."""
    assert ("cpu_accumulator" in diagnose.read_code(code)) is accumulates
    result = diagnose.diagnose(TWO_DEVICES, code)
    if accumulates:
        assert (result.verdict, result.matches[0].slug) == ("scenario", "device_scalar_into_cpu")
    else:
        assert "device_scalar_into_cpu" not in [m.slug for m in result.matches[:1]]
    if "def forward" in code and "randn" in code:
        assert (result.verdict, result.matches[0].slug) == ("scenario", "factory_in_forward")


def test_old_cpu_scalars_message_puts_the_one_way_scalar_lesson_first() -> None:
    """1.6 to 1.x counted a CPU scalar written in place among the CPU scalars a CUDA kernel takes: its message puts
    device_scalar_into_cpu first, a candidate (several CPU scalars in one op give it too). Today's wording counts
    inputs only: two 0-dim CPU tensors given to one op, no lesson, said so with what to do."""
    result = diagnose.diagnose("RuntimeError: Trying to pass too many CPU scalars to CUDA kernel!")
    assert (result.verdict, result.matches[0].slug) == ("ambiguous", "device_scalar_into_cpu")
    today = diagnose.diagnose("RuntimeError: Trying to pass too many CPU scalars to non-CPU kernel!")
    assert (today.verdict, today.matches) == ("not_in_catalog", ())
    assert "more 0-dim CPU tensors than its kernel takes" in today.note


@pytest.mark.parametrize(("text", "code", "verdict", "first"), [
    # lengths on the CPU of another shape: no device error
    ("RuntimeError: 'lengths' argument should be a 1D CPU int64 tensor, but got 0D cpu Long tensor",
     "packed = pack_padded_sequence(x, lengths)\n", "not_device_error", None),
    # the lengths taken to the CPU in the call: the fix shown, not the lesson's case alone
    (LENGTHS, "packed = pack_padded_sequence(emb, lengths.cpu(), batch_first=True)\n", "ambiguous",
     "pack_padded_lengths"),
    (LENGTHS, 'packed = pack_padded_sequence(emb, lengths.to("cpu"), batch_first=True)\n', "ambiguous",
     "pack_padded_lengths"),
    (LENGTHS, "packed = pack_padded_sequence(\n    emb,\n    batch['lengths'].detach().cpu(),\n    batch_first=True,\n)\n",
     "ambiguous", "pack_padded_lengths"),
    # a meta tensor handed to NumPy has no data: the meta lessons, not the NumPy one
    ("TypeError: can't convert meta device type tensor to numpy. Use Tensor.cpu() to copy the tensor to host memory "
     "first.", "", "ambiguous", "meta_param_not_materialized"),
    # 2.1.0's sampler shown by its frame, without code; a device generator without the release shown is no proof:
    # candidates, the question the release and the last frame answer
    ('  File "/env/lib/python3.11/site-packages/torch/utils/data/sampler.py", line 165, in __iter__\n'
     "    yield from map(int, torch.randperm(n, generator=generator).numpy())\n" + NUMPY_MPS, "", "fixed_upstream", None),
    (NUMPY_MPS, DEVICE_GENERATOR, "ambiguous", "device_tensor_to_numpy"),
    (NUMPY_MPS + "\ntorch==2.4.0", DEVICE_GENERATOR, "scenario", "device_tensor_to_numpy"),
    # raised in a sampler of the user's that torch's BatchSampler iterates, or in a dataset the DataLoader reads:
    # the user's own NumPy call, not the sampler's
    ('  File "/env/lib/python3.11/site-packages/torch/utils/data/sampler.py", line 287, in __iter__\n'
     "    for idx in self.sampler:\n"
     '  File "mysampler.py", line 9, in __iter__\n    return iter(np.asarray(self.weights).argsort())\n' + NUMPY_MPS,
     "", "scenario", "device_tensor_to_numpy"),
    ('  File "/env/lib/python3.11/site-packages/torch/utils/data/dataloader.py", line 631, in __next__\n'
     "    data = self._next_data()\n"
     '  File "train.py", line 5, in __getitem__\n    return np.asarray(self.x[i])\n' + NUMPY_MPS,
     "", "scenario", "device_tensor_to_numpy"),
    (NUMPY_MPS + "\ntorch==2.1.0", DEVICE_GENERATOR.replace('torch.device("mps:0")', 'torch.device("cpu")'),
     "scenario", "device_tensor_to_numpy"),
    (NUMPY_MPS + "\ntorch==2.1.0", "# " + DEVICE_GENERATOR, "scenario", "device_tensor_to_numpy"),
])
def test_what_a_review_of_the_new_lessons_found(text: str, code: str, verdict: str, first: str | None) -> None:
    """Inputs a review of pack_padded_lengths, device_tensor_to_numpy and their rules found answered wrong."""
    result = diagnose.diagnose(text, code)
    assert result.verdict == verdict, (result.note, [m.slug for m in result.matches])
    if first is not None:
        assert result.matches[0].slug == first
    if verdict == "ambiguous" and text.startswith(NUMPY_MPS):
        assert "2.1.0" in result.note


@pytest.mark.parametrize(("code", "beside"), [
    ("x = torch.randn(3, 3)\ny = torch.tensor(2.)\nx + y.cuda()\n", True),
    ("s = torch.tensor(2., device='cuda')\nv = torch.zeros(4)\nprint(v > s)\n", True),
    ("torch.ones(1) + torch.ones(()).cuda()\n", True),
    # a 0-dim CPU tensor beside a device tensor is the scalar CUDA takes; two 0-dim tensors run too
    ("x = torch.randn(3, device='cuda')\ny = x * torch.tensor(2.0)\n", False),
    ("a = torch.tensor(1.)\nb = torch.tensor(2.).cuda()\nc = a + b\n", False),
    # the name rebound to a tensor of one dimension before the move: a tensor moved whole; rebound after the op, the
    # op still met the CPU tensor
    ("y = torch.tensor(2.)\ny = torch.randn(3)\nx = torch.randn(3)\nx + y.cuda()\n", False),
    ("x = torch.randn(3)\ny = torch.tensor(2.).cuda()\nprint(x + y)\nx = x.cuda()\n", True),
    # each function's names are its own: a CPU tensor of another function, or a parameter, is none of them
    ("def f(device):\n    w = torch.ones(3, device=device)\n    s = torch.tensor(2.0, device=device)\n    return w * s\n"
     "\ndef g():\n    w = torch.ones(3)\n    return w\n", False),
    ("def init(device):\n    best = torch.tensor(0.0, device=device)\n    return best\n\ndef make():\n"
     "    scores = torch.zeros(5)\n    return scores\n\ndef improved(scores, best):\n    return scores > best\n", False),
    # 0-dim tensors however made (rand, full, size=): two scalars, no CPU tensor of one dimension
    ("s = torch.tensor(2., device='cuda')\nprint(torch.rand(()) + s, torch.full((), 3.) * s, torch.zeros(size=()) - s)\n",
     False),
])
def test_a_device_scalar_beside_a_cpu_tensor_names_the_one_way_scalar_lesson(code: str, beside: bool) -> None:
    """A 0-dim tensor on the device met in one op by a tensor of one or more dimensions made on the CPU: the one-way
    scalar rule's case, named alone with the bare mismatch; a 0-dim CPU tensor beside a device tensor is no case."""
    assert ("device_scalar_operand" in diagnose.read_code(code)) is beside
    result = diagnose.diagnose(TWO_DEVICES, code)
    assert ((result.verdict, result.matches[0].slug) == ("scenario", "device_scalar_into_cpu")) is beside
