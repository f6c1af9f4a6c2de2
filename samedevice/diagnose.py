"""Paste your error, get the lesson: a device error (a message, a traceback, the code around it) read
into facts, and the catalog's scenarios ranked by those facts, each with why it fits, the one check
that confirms it and the fix. Imports no torch: it answers at once.

    samedevice diagnose "RuntimeError: Expected all tensors to be on the same device, ..."
    python train.py 2>&1 | samedevice diagnose
    samedevice diagnose --file error.txt --code train.py --format json

A diagnosis is a small model that says why, rule by rule (after a linter's rule set):
1. the message: TEMPLATES, one regex for each wording PyTorch has used (0.4 to 2.13) for each kind
   of error: a device mismatch, a checkpoint saved on a device this host lacks, an RNG state moved to
   the device, ... and not-device errors that look alike (a dtype mismatch);
2. the frames: FRAMES, which PyTorch code the traceback passes through (an optimizer's step, a loss,
   an embedding, torch.load, the DataLoader's sampler);
3. the code: SIGNALS, what the pasted code does (a factory without `device=` inside `forward`, an
   optimizer state loaded before `.to`), read with `ast` where it parses and as text where it does not;
4. the scores: each scenario's `clues` in the registry (samedevice/registry.py) are matched against
   those facts; every match adds its weight and one line of why. A new scenario diagnoses itself.
What PyTorch fixed in a later release (UPSTREAM) is said as such, and a device error that no
scenario fits is "not in the catalog", with the facts and no invented lesson.
"""

from __future__ import annotations

import ast
import bisect
import dataclasses
import functools
import json
import re
import textwrap
import warnings
from collections.abc import Iterable, Iterator
from typing import TypeVar

from samedevice import registry

T = TypeVar("T")

# ---- 1. the message ------------------------------------------------------------------------------

DEVICE = r"(?:cuda|mps|xpu|xla|emulated|npu|hpu|privateuseone|meta|cpu)(?::\d+)?"


@dataclasses.dataclass(frozen=True)
class Template:
    name: str
    kind: str  # mismatch, deserialize, rng, generator, meta, meta_copy, oom, capturable, dataparallel, ddp, collective,
    # numpy, dtype, assert
    pattern: re.Pattern[str]
    why: str


def _t(name: str, kind: str, pattern: str, why: str) -> Template:
    return Template(name, kind, re.compile(pattern, re.I), why)


# first match wins: the specific wordings before the generic ones
TEMPLATES = (
    _t("deserialize_index", "deserialize_index", r"Attempting to deserialize object on (?P<a>\w+) device \d+ but "
       r"torch\.\w+\.device_count\(\) is \d+", "torch.load met a device index this host does not have"),
    _t("deserialize", "deserialize", r"Attempting to deserialize object on (?:a )?(?P<a>\w+) device"
       r"|If you are running on a CPU-only machine, please use torch\.load with map_location"
       r"|'to map your storages to the CPU\.'\)",  # the message's last line as torch/serialization.py's source has it
       "torch.load met a location this host does not have (torch/serialization.py, _validate_device)"),
    # a location tag this PyTorch has no restore function for: a device its build or version lacks (an mps:0 or a
    # backend's checkpoint on an older or other build), torch/serialization.py's default_restore_location
    # a device named by a string no PyTorch has ('gpu'): a map_location or a torch.device written wrong
    # (or a bare index, `map_location=0` kept as the tag '0', where 'cuda:0' was meant)
    _t("device_name", "device_name", r"don't know how to restore data location of [\w.]+ \(tagged with (?:gpu(?::?\d+)?"
       r"|\d+)\)|device type at start of device string: (?P<name>\w+)", "a device string PyTorch has no device for"),
    # a typed constructor (torch.LongTensor, torch.FloatTensor) makes CPU tensors only (torch/csrc/utils/tensor_new.cpp)
    _t("legacy_constructor", "legacy_constructor", r"legacy constructor expects device type: (?P<b>\w+) but device "
       r"type: (?P<a>\w+) was passed", "a typed constructor (torch.LongTensor) given a device"),
    # and given a tensor of another device (`torch.FloatTensor(x_on_cuda)`): the check of its options against the
    # tensor's, tensor_new.cpp (the same message for another dtype on the CPU is no device error: devices must differ)
    _t("legacy_constructor_tensor", "legacy_constructor_tensor",
       r"expected TensorOptions\(dtype=[\w :<>]+, device=(?P<b>cpu)\b(?:[^()]|\([^()]*\))*\) \(got TensorOptions\("
       r"dtype=[\w :<>]+, device=(?P<a>(?!cpu\b)" + DEVICE + ")",
       "a typed constructor (torch.FloatTensor) given a tensor on another device than the CPU"),
    # a build without the backend a storage is restored to (2.x's UntypedStorage: a checkpoint from a Mac on Linux)
    _t("storage_device", "deserialize", r"Storage device not recognized: (?P<a>\w+)",
       "torch.load met a device this build does not have"),
    _t("unknown_location", "deserialize", r"don't know how to restore data location of [\w.]+ \(tagged with "
       r"(?P<a>[\w]+)(?::\d+)?\)", "torch.load met a location tag this PyTorch cannot restore"),
    _t("rng_state", "rng",
       r"RNG state must be a torch\.ByteTensor|expected a torch\.ByteTensor, but got torch\.\w+\.ByteTensor",
       "torch.set_rng_state was given a tensor that is not a CPU ByteTensor"),
    _t("generator", "generator",
       r"Expected a '(?P<a>[\w:]+)' (?:device type for )?generator(?: device)? but found '(?P<b>[\w:]+)'",
       "a random op's generator is on another device than the tensor it fills"),
    # either way round: the op's first tensor sets the expected device (torch/_prims_common, check_same_device)
    _t("meta", "meta", r"Tensor on device (?:meta is not on the expected device (?P<a>" + DEVICE + ")|(?P<b>"
       + DEVICE + ") is not on the expected device meta\\b)",
       "a meta tensor (no data) met a real one: weights never materialized"),
    # a meta tensor copied to a real device: `module.to(device)` of a model built on meta, or a tensor made on a
    # device read from meta (offloaded) weights (aten/src/ATen/native/Copy.cpp, copy_impl)
    _t("meta_copy", "meta_copy", r"Cannot copy out of meta tensor; no data",
       "a meta tensor (no data) was copied to a real device"),
    # a device tensor handed to numpy, which reads host memory (torch/_tensor.py, Tensor.numpy's check)
    _t("numpy", "numpy", r"can't convert (?:(?P<a>" + DEVICE + r") device type|(?P<a2>CUDA)) tensor to numpy",
       "a device tensor handed to numpy"),
    _t("capturable_attribute", "capturable", r"object has no attribute '_warned_capturable_if_run_uncaptured'",
       "an optimizer whose state was loaded lacks an attribute PyTorch 1.12.0's Adam reads"),
    # torch/cuda/__init__.py: _lazy_init's assert, and _exchange_device's (`with torch.cuda.device(i)`) on that build
    _t("not_compiled", "no_cuda", r"Torch not compiled with CUDA enabled|PyTorch was compiled without CUDA support",
       "a PyTorch built without CUDA was asked for CUDA (torch/cuda/__init__.py, _lazy_init)"),
    _t("capturable_false", "capturable", r"If capturable=False, state_steps should not be CUDA tensors",
       "Adam's `step` is on the device while the optimizer is not capturable"),
    _t("capturable_true", "capturable",
       r"If capturable=True, params and state_steps must be (?:on supported devices|CUDA tensors)",
       "a capturable optimizer's `step` and parameters are on different devices"),
    _t("oom", "oom", r"\b(?:CUDA|MPS|XPU|\w+:\d+)(?: backend| error:)? out of memory|OutOfMemoryError",
       "the device ran out of memory"),
    _t("device0_memory", "oom",
       # within one sentence, whole words (not `memory_format=` of a quoted call)
       r"(?:GPU ?0|cuda:0|(?:main|primary|first) GPU)\b[^.!]{0,80}\b(?:memory|space)\b"
       r"|\b(?:memory|space)\b[^.!]{0,80}(?:GPU ?0|cuda:0|(?:main|primary|first) GPU)\b",
       "device 0 holds more memory than the others"),
    _t("dataparallel", "dataparallel",
       r"module must have its parameters and buffers on device (?P<a>" + DEVICE + r") \(device_ids\[0\]\) but found "
       r"one of them on device: (?P<b>" + DEVICE + ")",
       "nn.DataParallel's module is not on device_ids[0]"),
    # before 1.1, DataParallel's broadcast of a module left on the CPU (torch/nn/parallel/_functions.py, Broadcast)
    _t("dataparallel_cpu", "dataparallel", r"Broadcast function not implemented for CPU tensors",
       "nn.DataParallel broadcast a module left on the CPU (before 1.1's device_ids[0] check)"),
    # broadcast_coalesced's check (torch/csrc/cuda/comm.cpp): what replicates a module copies it from devices[0], so
    # before 1.1's device_ids[0] check a DataParallel module on another GPU (`.cuda()` onto the current device, 0,
    # and device_ids=[1, 2]) met it there; so did 1.x's single-process DDP over several GPUs (diagnose, below)
    _t("broadcast_devices", "dataparallel", r"all tensors must be on devices\[0\]",
       "a module replicated from device_ids[0] is not there (torch/csrc/cuda/comm.cpp, broadcast_coalesced)"),
    # FSDP's check of the module it wraps (torch/distributed/fsdp/_init_utils.py, _check_single_device_module)
    _t("fsdp_single_device", "fsdp_devices", r"FSDP only supports single device modules,? but got params on",
       "FSDP was given a module whose parameters are on several devices"),
    # FSDP's invariant of its flat parameter (torch/distributed/fsdp/_flat_param.py, _check_on_compute_device): the
    # compute device is device_id's, and FSDP makes tensors on the current device; 2.x adds "was on <device>"
    _t("fsdp_compute", "compute_device", r"Expects tensor to be on the compute device (?P<a>" + DEVICE + r")"
       r"(?:, was on (?P<b>" + DEVICE + r"))?", "FSDP found a tensor off its compute device"),
    # DDP given device_ids for a module on several devices (its parameters' set names two): device_ids=None
    _t("ddp_multi_device", "ddp_multi", r"device_ids and output_device arguments only work with single-device"
       r"[^{}]{0,300}module parameters \{device\([^)]*\), device\(", "DDP was given device_ids for a module on "
       "several devices"),
    _t("ddp_device_ids", "ddp", r"device_ids and output_device arguments only work with single-device",
       "DistributedDataParallel was given device_ids for a module that is not on that device"),
    _t("collective", "collective",
       r"No backend type associated with device type (?P<a>\w+)|Tensors must be CUDA and dense",
       "a process group was given a tensor on a device its backend does not serve"),
    _t("dtype", "dtype", r"expected (?:object of )?scalar type \w+ but (?:found|got) (?:scalar type )?\w+"
       r"|expected (?:m1|mat1) and (?:m2|mat2) to have "
       r"the same "
       r"dtype|must have the same dtype|Found dtype \w+ but expected \w+",
       "two tensors of different dtypes, not devices"),
    # torchmetrics' words for PyTorch's mismatch in a metric's update (Metric._wrap_update raises it from that
    # one): read before PyTorch's own, which a chained traceback shows above it
    _t("metric_devices", "mismatch", r"Encountered different devices in metric calculation",
       "torchmetrics says a metric's update met tensors on two devices: its state and its inputs"),
    # (a paste that cut its first words still has both types: "nput type (torch.cuda.FloatTensor) and weight type")
    _t("input_weight", "mismatch", r"(?:(?<!\w)\w*put type )?\((?P<a>[\w.:]+)\) and weight type \((?P<b>[\w.:]+)\)"
       r"(?: should be the same)?", "convolution's check of the input's type against the weight's"),
    # apex's amp.initialize (apex/amp/_initialize.py, check_params_fp32) wants every floating parameter and buffer a
    # CUDA FloatTensor: a CPU type is one the model never moved (a CUDA HalfTensor, a `.half()` call, is no device's)
    _t("apex_param", "mismatch", r"Found (?:param|buffer) \S+ with type (?P<b>torch\.(?!cuda\.)\w+), expected "
       r"(?P<a>torch\.cuda\.FloatTensor)", "apex's amp.initialize found a parameter or buffer of the model off CUDA"),
    # as printed (`on cpu`), or retyped (`on the CPU`)
    _t("indices", "mismatch", r"indices should be either on (?:the )?cpu or on the same device as the indexed tensor"
       r"(?: \((?P<a>" + DEVICE + r")\))?", "advanced indexing with indices on another device than the indexed tensor"),
    _t("codegen_named", "mismatch", r"(?:Expected all tensors to be on the same device,? but got )?\b(?P<arg>\w+) "
       r"(?:is )?on "
       r"(?P<a>" + DEVICE + r"), different from other tensors on (?P<b>" + DEVICE + r")"
       r"(?: \(when checking argument in method (?P<op>\w+)\))?",
       "an op's generated device check (PyTorch 2.8+ wording, with the argument)"),
    # ("at least", or as a paste retyped it: "at leaset")
    _t("codegen", "mismatch", r"Expected all tensors to be on the same device,? but found at \w+ two devices, "
       r"(?P<a>" + DEVICE + r") and (?P<b>" + DEVICE + r")!?"
       r"(?: \(when checking ar[a-z]* for argument (?P<arg>\w+) in method (?P<op>\w+)\))?",
       "an op's generated device check (TensorIterator or the codegen's common-device check)"),
    _t("legacy_device_type", "mismatch",
       r"Expected (?:object of )?device type (?P<a>\w+) but got device type(?: (?P<b>\w+)|\s*$)"
       r"(?: for argument #\d+ ?'(?P<arg>\w+)')?(?: in call to (?P<op>\w+))?",
       "a pre-1.5 TH kernel's argument check"),
    _t("legacy_backend", "mismatch", r"Expected object of backend (?P<a>\w+) but got backend (?P<b>\w+)"
       r"(?: for argument #\d+ ?'(?P<arg>\w+)')?"
       r"|expected backend (?P<a2>\w+) and dtype \w+ but got backend (?P<b2>\w+)",
       "a pre-1.5 kernel's backend check"),
    # before 0.4 the argument parser named the tensors' types: a CUDA tensor given where the CPU self's method
    # expects a CPU one ("add_ received an invalid combination of arguments - got (int, torch.cuda.FloatTensor)")
    _t("invalid_combination", "mismatch", r"\b(?P<op>\w+) received an invalid combination of arguments - got "
       r"\([^)]{0,300}?(?P<b>torch\.cuda\.\w{0,40}Tensor)[^)]{0,300}\), but expected one of:.{0,600}?"
       r"\((?:float value, )?(?P<a>torch\.(?!cuda)\w+Tensor) (?P<arg>other)\)",
       "a pre-0.4 method's argument parser: a CUDA tensor where the CPU tensor's method wants a CPU one"),
    # ... and a function's parser gave the types it got beside the ones it expected, where they differ in device
    # alone (`got (torch.cuda.FloatTensor, int, torch.LongTensor), but expected (torch.cuda.FloatTensor source, int
    # dim, torch.cuda.LongTensor index)`); _typed_argument reads which argument
    _t("invalid_signature", "mismatch", r"\b(?:torch\.)?(?P<op>\w+) received an invalid combination of arguments - "
       # (bounded: a lookahead over an unclosed list must not backtrack without end; 0.3 marks the wrong one `!T!`)
       r"got (?=\((?:[^)]{0,300}?(?<![.\w])torch\.(?P<t>[A-Z]\w{0,40}Tensor)[^)]{0,300}\).{0,400}?torch\.cuda\.(?P=t)\b"
       r"|[^)]{0,300}?torch\.cuda\.(?P<u>\w{0,40}Tensor)[^)]{0,300}\).{0,400}?(?<![.\w])torch\.(?P=u)\b))"
       r"\((?P<got>[^)]{0,300})\),? but expected (?P<sig>(?:one of:)?(?:\s*\*?\s*\([^)]{0,300}\)){1,12})",
       "a pre-0.4 function's argument parser: an argument of the right type on the wrong device"),
    # 1.x's TensorUtils checks (checkSameGPU, checkDeviceType), kept by cuDNN's and a few other kernels
    _t("same_gpu", "mismatch", r"Tensor for (?:argument #\d+ )?'(?P<arg>\w+)' is on (?P<b>CPU), "
       r"(?:Tensor for (?:argument #\d+ )?'\w+' is on CPU, )?but expected (?:it|them) to be on (?P<a>GPU|MPS) "
       r"\(while checking arguments for (?P<op>\w+)\)",
       "a 1.x kernel's check that its arguments are on the GPU (TensorUtils.cpp, checkSameGPU)"),
    _t("same_gpu_index", "mismatch", r"Expected tensor for argument #\d+ ?'(?P<arg>\w+)' to have the same device as "
       r"tensor for argument #\d+ '\w+'; but device (?P<a>\d+) does not equal (?P<b>\d+)"
       r"(?: \(while checking arguments for (?P<op>\w+)\))?",
       "a 1.x kernel's check that its arguments are on one GPU (TensorUtils.cpp, checkSameGPU)"),
    _t("device_type", "mismatch", r"Expect(?:ed)? tensor(?: for argument #\d+ ?'(?P<arg>\w+)')? to have (?P<a>\w+) "
       r"(?:DeviceType|Backend), but got tensor with (?P<b>\w+) (?:DeviceType|Backend)"
       r"(?: \(while checking arguments for (?P<op>\w+))?",
       "a 1.x kernel's check of a tensor's device type (TensorUtils.cpp, checkDeviceType, checkBackend)"),
    # before 0.4 a CUDA THNN function (a loss's, a layer's) named the types it got: a CPU one among them
    _t("thnn_cpu_argument", "mismatch", r"Cuda(?P<op>\w+?)_update\w+ received an invalid combination of arguments - "
       r"got \((?=[^)]{0,600}?torch\.cuda\.\w{0,40}Tensor)(?=[^)]{0,600}?(?<![.\w])(?P<b>torch\.(?!cuda)[A-Z]\w*))",
       "a pre-0.4 CUDA THNN function given a CPU tensor"),
    _t("different_gpus", "mismatch", r"arguments are located on different GPUs",
       "a pre-1.0 THC kernel's check: two GPUs"),
    # (0.4's pre-releases wrapped the names: "Variable[torch.cuda.LongTensor]")
    _t("legacy_type", "mismatch", r"[Ee]xpected (?:object of )?type (?:Variable\[)?(?P<a>torch(?:\.\w+)+)\]? but "
       r"(?:found|got) (?:type )?(?:Variable\[)?(?P<b>torch(?:\.\w+)+)\]?(?: for argument #\d+ ?'(?P<arg>\w+)')?",
       "a pre-0.4 kernel's tensor-type check"),
    # TensorIterator lets a CUDA kernel read one 0-dim CPU tensor as a scalar, not two
    # (aten/src/ATen/TensorIterator.cpp, compute_types): two 0-dim CPU tensors, a running sum or count, met a CUDA op.
    # Before it skipped outputs (1.6 to 1.x: "CUDA kernel"), a 0-dim CPU tensor written in place counted as one
    _t("cpu_scalars", "mismatch", r"Trying to pass too many CPU scalars to CUDA kernel",
       "a CUDA op given more than one 0-dim CPU tensor (TensorIterator reads only one as a scalar)"),
    # today's wording counts inputs only: two 0-dim CPU tensors given to one op on the device
    _t("cpu_scalar_inputs", "cpu_scalars", r"Trying to pass too many CPU scalars to non-CPU kernel",
       "an op on the device given two 0-dim CPU tensors"),
    # a _foreach op's list of scalars packed in a tensor must be on the CPU (aten/src/ATen/native/ForeachUtils.h,
    # convert_tensor_to_scalar_list): an optimizer's hyperparameters turned into device tensors
    _t("foreach_scalars", "foreach_scalars", r"Expected scalars to be on CPU, got (?P<a>" + DEVICE + r") instead",
       "a _foreach op given its scalars as a tensor on the device"),
    # Triton's launcher (triton/backends/nvidia/driver.py) asks CUDA for each pointer in the current device's context:
    # a CPU tensor fails, and so does one on another GPU than the current device, which the kernel is launched on
    _t("triton_pointer", "triton_pointer", r"Pointer argument \(at \d+\) cannot be accessed from Triton",
       "a Triton kernel was given a tensor it cannot reach from the current device (a CPU one, or another GPU's)"),
    _t("rnn_hidden", "mismatch", r"Input and hidden tensors are not at the same device, found input tensor at "
       r"(?P<a>" + DEVICE + r") and hidden tensor at (?P<b>" + DEVICE + ")",
       "an RNN's input and its initial hidden state on different devices"),
    # an RNN's check of its input against its weights (aten/src/ATen/native/RNN.cpp, check_attributes): the
    # parameters on the CPU are the layer's weights left there
    _t("rnn_parameters", "mismatch", r"Input and parameter tensors are not at the same device, found input tensor "
       r"at (?P<a>" + DEVICE + r") and parameter tensor at (?P<b>" + DEVICE + ")",
       "an RNN's input and its weights on different devices"),
    # pack_padded_sequence's lengths, which it reads on the host by design since 1.7 (torch/nn/utils/rnn.py)
    _t("lengths", "lengths", r"'lengths' argument should be a 1D CPU int64 tensor(?:, but got 1D (?P<a>" + DEVICE
       + r") \w+ tensor)?", "pack_padded_sequence was given its lengths on a device"),
    # an out= or in-place result whose device or dtype differs from what the op computes (TensorIterator)
    _t("output_desired", "mismatch", r"output with device (?P<a>" + DEVICE + r")(?: and dtype \w+)? doesn't match "
       r"the desired device (?P<b>" + DEVICE + r")",
       "an op's output of another device or dtype than it computes"),
    _t("expected_device", "mismatch", r"expected device (?P<a>" + DEVICE + r")(?: and dtype \w+)? but got device "
       r"(?P<b>" + DEVICE + ")",
       "an op that checks one tensor's device against another's"),
    _t("all_input_tensors", "mismatch", r"All input tensors must be on the same device\. Received (?P<a>" + DEVICE
       + r") and (?P<b>" + DEVICE + ")", "torch.cat's own check"),
    # THC's indexing kernels (index_select, index_add, embedding's renorm) before 1.x's ATen ports
    _t("thc_current_device", "mismatch", r"Input, output and indices must be on the current device",
       "a THC indexing kernel given a tensor on another device than the current one"),
    # set_ of a storage (TensorImpl's set_storage_keep_dtype, c10/core/TensorImpl.h): since 1.x a tensor cannot take
    # another device's storage
    _t("set_storage", "mismatch", r"Attempted to set the storage of a tensor on device \"(?P<a>" + DEVICE + r")\" to a "
       r"storage on different device \"(?P<b>" + DEVICE + r")\"", "a tensor given the storage of another device's"),
    # diffusers' randn_tensor (diffusers/utils/torch_utils.py): the latents are made on the pipeline's device (its
    # model's, or its execution device) and the generator given is CUDA's: a pipeline whose weights are on the CPU
    _t("diffusers_generator", "mismatch", r"Cannot generate a (?P<a>" + DEVICE + r") tensor from a generator of type "
       r"(?P<b>\w+)", "diffusers made latents on the pipeline's device with a generator on another"),
    _t("mps_placeholder", "mismatch", r"Placeholder storage has not been allocated on MPS device",
       "an MPS kernel given a CPU tensor"),
    # a sparse tensor's constructor checks (aten/src/ATen/native/sparse/SparseTensor.cpp, SparseCsrTensor.cpp): COO
    # prints get_device() (a CUDA index, -1 for the CPU), the compressed layouts print the devices (`=cpu`) and name
    # their indices (crow_indices, ccol_indices, col_indices...); 2.x's Python constructor says it without devices.
    # Before `same_device`, whose wording the last one shares
    _t("sparse_devices", "sparse", r"device of \w*indices \(=?(?P<a>" + DEVICE + r"|-?\d+)\) must match device of "
       r"(?:values|\w*indices) \(=?(?P<b>" + DEVICE + r"|-?\d+)\)"
       r"|Values and (?:\w*indices|compressed (?:sparse )?tensor instance) need to (?:be on|have) the same device",
       "a sparse tensor given its indices and its values on two devices"),
    # an op's own check naming its two tensors and their devices (stft's input and window, masked_fill's self and
    # mask): "... must be on the same device but got self on cuda:0 and window on cpu"
    # 1.0-1.4's TensorIterator-less binary ops (aten/src/ATen/native/cuda/BinaryOpsKernel.cu's checks)
    _t("binary_op", "mismatch", r"expected both inputs to be on same device, but input a is on (?P<a>" + DEVICE
       + r") and input b is on (?P<b>" + DEVICE + ")", "an old binary op's check of its two inputs"),
    # DGL's own check: a feature tensor set on a graph (a batch) that stayed on another device
    _t("dgl_graph", "mismatch", r"Cannot assign (?:node|edge) feature \"?\w+\"? on device (?P<a>" + DEVICE
       + r") to a graph on device (?P<b>" + DEVICE + ")", "DGL's check that a feature is on its graph's device"),
    # MPS's convolution given one tensor on the CPU (aten/src/ATen/native/mps/MPSFallback.mm, slow_conv2d_forward_mps:
    # "input(device='cpu') and weight(device=mps:0')  must be on the same device", its quote missing as it prints it)
    _t("mps_conv", "mismatch", r"input\(device='?(?P<a>" + DEVICE + r")'?\) and weight\(device='?(?P<b>" + DEVICE
       + r")'?\)\s*must be on the same device", "MPS's convolution given its input and weight on two devices"),
    # torch.compile's tracing runs each op on fake tensors (torch/_subclasses/fake_tensor.py) and checks their devices
    # as eager's kernels would: "Unhandled FakeTensor Device Propagation for aten.add.Tensor, found two different
    # devices cuda:0, cpu". The first device is the one met first, so it tells no side
    _t("fake_devices", "mismatch", r"Unhandled FakeTensor Device Propagation for (?:aten\.)?(?P<op>\w+)(?:\.\w+)?, "
       r"found two different devices (?P<a>" + DEVICE + r"), (?P<b>" + DEVICE + ")",
       "torch.compile's tracing met two devices in one op, as eager's kernel would"),
    # and a linear solve's (solve, lu_solve, cholesky_solve, triangular_solve: LinearAlgebraUtils.h's
    # linearSolveCheckInputs, "Expected b and A to be on the same device, but found b on cpu and A on cuda:1
    # instead."; 1.0's said GPU or CPU)
    _t("named_pair", "mismatch", r"(?:\b(?P<op>i?stft) input and window )?(?:to be|must be) on the same device,? "
       r"but (?:got|found) (?P<n1>\w+) on (?P<a>" + DEVICE + r"|[CG]PU\b) and (?P<n2>\w+) on (?P<b>" + DEVICE
       + r"|[CG]PU\b)", "an op's check of two tensors it names"),
    _t("device_pair", "mismatch", r"(?:to be|must be) on the same device,? but got (?P<a>" + DEVICE + r") and (?P<b>"
       + DEVICE + r")\b", "an op's check that names the two devices"),
    _t("same_device", "mismatch", r"(?:to be|are not|must be) (?:on|at) the same (?:devices?|GPUs?)\b|same device as",
       "a device check whose wording names no devices"),
    # MPS's own argument check (aten/src/ATen/native/mps): "Tensor for argument weight is on cpu but expected on mps"
    _t("mps_argument", "mismatch", r"Tensor for argument (?:#\d+ )?'?(?P<arg>\w+)'? is on (?P<b>" + DEVICE
       + r") but expected on (?P<a>" + DEVICE + ")", "an MPS kernel's check that its argument is on MPS"),
    # 0.1-0.3's TH check of a CPU op given a CUDA tensor, or the reverse
    _t("th_expected_tensor", "mismatch", r"expected (?P<a>CPU|CUDA) tensor \(got (?P<b>CPU|CUDA) tensor\)",
       "a pre-0.4 kernel given a tensor of the other device"),
    # a C++/CUDA extension's own check, as PyTorch's extension tutorial writes it (CHECK_CUDA: "x must be a CUDA
    # tensor"): an argument left on the CPU
    # (vLLM's kernels raise "b_q_weight is not on GPU": read as the error itself, not a log's "VAE is not on GPU")
    _t("extension_cuda", "mismatch", r"\b(?P<arg>\w+) must be (?:a )?CUDA tensor"
       r"|(?:Error|Exception):\s*(?P<arg2>\w+) is not on GPU\b",
       "a CUDA extension's check that its argument is a CUDA tensor"),
    # ... and a CPU kernel's (torch_sparse's spmm_cpu: "mat must be CPU tensor"; AMP's CPU kernels): the kernel was
    # chosen by another argument, on the CPU, and the one it names is on the device. One tensor: a library's "q, k,
    # and v must be CPU tensors" asks for the CPU by design
    _t("extension_cpu", "mismatch", r"\b(?P<arg>\w+) must be (?:a )?CPU tensor(?!s)",
       "a CPU kernel's check that its argument is on the CPU (a C++ extension's, AMP's), given one on the device"),
    # torch.load calling map_location as a function: 0.4.0 took no torch.device (its type printed as torch.Device)
    _t("device_not_callable", "map_location", r"'torch\.Device' object is not callable",
       "torch.load called a torch.device as a function"),
    _t("map_location_not_callable", "map_location",  # within torch.load's frame: not a later one's (a lambda's)
       r"map_location\(storage, location\)(?:(?!File ).){0,300}?'(?P<obj>\w+)' object is not callable",
       "torch.load called map_location, which is no string, device, dict or function"),
    # a device index the process cannot see: more ranks than GPUs, a global rank used as a local index
    _t("invalid_ordinal", "ordinal", r"invalid device ordinal", "a process asked for a device index it does not have"),
    # a PyTorch build without kernels for this GPU's architecture: nothing is misplaced
    _t("no_kernel_image", "build", r"no kernel image is available for execution on the device",
       "this PyTorch build has no kernels for this GPU"),
    # an op with no kernel for the tensor's device in this release (TH's: "randperm is only implemented for CPU")
    # the dispatcher finding no kernel of an op for an accelerator's tensors, in its three wordings (1.3's dispatch
    # key, 1.3's schema, and today's backend); a quantized or sparse backend is a layout, not a device
    _t("no_kernel", "cpu_only", r"Could not run '(?P<op>[\w:.]+)' with arguments from the '(?:CUDA|MPS|XPU|HIP|XLA)' "
       r"backend|Didn't find kernel to dispatch to for operator '(?P<op2>[\w:.]+)'\. Tried to look up kernel for "
       r"dispatch key 'CUDATensorId'|No function is registered for schema (?P<op3>[\w:.]+)\([^\n]{0,600}? on tensor "
       r"type CUDATensorId", "the op has no kernel for the device in this build"),
    _t("cpu_only", "cpu_only", r"\b(?P<op>\w+) is only implemented for CPU",
       "an op with no kernel for the device in this PyTorch"),
    _t("cudnn_failed", "cudnn", r"cuDNN error: CUDNN_STATUS_EXECUTION_FAILED", "cuDNN failed to run a kernel"),
    # aten/src/ATen/native/cudnn/RNN.cpp: TORCH_CHECK(fn_train, ...) in the backward of cuDNN's fused RNN
    _t("cudnn_rnn_eval", "cudnn_rnn_eval", r"cudnn RNN backward can only be called in training mode",
       "cuDNN's RNN kernels keep what backward needs only in training mode"),
    # torch_directml's unboxing of an op's inputs (torch_directml/csrc/dml/DMLTensor.cpp): an input that is no DML
    # tensor, one left on the CPU
    _t("dml_input", "mismatch", r"unbox expects Dml at::Tensor as inputs",
       "a DirectML op given a tensor that is not on the DML device"),
    # DGL's feature storage (dgl/storages/pytorch_tensor.py, fetch): indices on the GPU into features on the CPU
    _t("dgl_fetch", "mismatch", r"Got indices on device (?P<a>" + DEVICE + r") whereas the feature tensor is on "
       r"(?P<b>" + DEVICE + ")", "DGL's check that a feature tensor is read with indices on its device"),
    # the argument parser's check of a device index (torch/csrc/utils/python_arg_parser.h; checked by running torch:
    # `.to(-1)`, `.cuda(-1)`, torch.device('cuda', -1)): -1 is what Tensor.get_device() returns for a CPU tensor, and
    # the local_rank a script gets when no launcher set it
    _t("negative_index", "negative_index", r"Device index must not be negative",
       "a device index of -1 was given where a GPU's is wanted"),
    # torch/cuda/random.py's set_rng_state (and get_rng_state) reads the generator of its index
    # (`default_generator = torch.cuda.default_generators[idx]`); set_rng_state_all gives one index per state saved:
    # a checkpoint from more GPUs than this host has asks for a generator it lacks. (IPython prints lines between the
    # code and the error; torch.cuda's lazy call wraps it in DeferredCudaCallError)
    _t("rng_devices", "rng_devices",
       r"torch\.\w+\.default_generators\[idx\].{0,400}?IndexError: tuple index out of range"
       # (torch.xpu's and the emulator's too: a traceback through set_rng_state_all that ends in the IndexError, in
       # that one traceback: no other error's line nor a new traceback between them)
       r"|in set_rng_state_all\b(?:(?!Traceback \(|Error: |Exception: ).){0,1500}?"
       r"(?P<m>IndexError: tuple index out of range)"
       r"|DeferredCudaCallError: CUDA call failed lazily at initialization with error: tuple index out of range",
       "a CUDA RNG state restored onto (or read from) a GPU index this host does not have"),
    # cudaErrorDevicesUnavailable, in CUDA's two wordings: the GPU would not take this process (exclusive-process
    # compute mode and another process on it, or a driver or container that does not give it)
    _t("devices_busy", "busy", r"CUDA-capable device\(s\) is/are busy or unavailable"
       r"|all CUDA-capable devices are busy or unavailable", "the GPU would not take this process"),
    # xformers' check of its attention bias against the query (xformers/ops/fmha): a bias made without a device is
    # made on the current device ('cuda', index-less) or on the CPU
    _t("attn_bias", "mismatch", r"Attention bias and Query/Key/Value should be on the same device"
       r"(?: query\.device: (?P<a>" + DEVICE + r") attn_bias\s*: (?P<b>" + DEVICE + r"))?",
       "xformers' check of its attention bias against the query"),
    # torch_xla's check of an op's input: a CPU tensor met XLA's (the message names the CPU tensor's type)
    _t("xla_input", "mismatch", r"Input tensor is not an XLA tensor(?:: (?P<b>CPU)\w*Type|(?!:\s*\w))",
       "torch_xla's check that an op's input is an XLA tensor"),
    # NCCL refusing a communicator whose ranks share a GPU (ncclInvalidUsage)
    _t("duplicate_gpu", "duplicate_gpu", r"Duplicate GPU detected ?: rank \d+ and rank \d+ both on CUDA device",
       "NCCL found two ranks of one process group on one GPU"),
    # CUDA touched in a forked process (a DataLoader worker's transform, a CUDA default tensor type), which CUDA refuses
    # (the emulated device words it with its own name)
    _t("cuda_in_fork", "fork", r"Cannot re-initialize (?:CUDA|\w+) in forked subprocess",
       "CUDA used in a forked process, a DataLoader worker"),
    # cudaErrorInitializationError's text: CUDA failed to start in this process, a forked one that inherited a
    # parent's CUDA (a DataLoader worker calling .cuda() where torch's own fork check was not met) or a driver's fault
    # (the emulated device's words in a forked child for an op on a tensor its parent made)
    _t("cuda_init", "cuda_init", r"(?:CUDA|emulated) error: initialization error",
       "CUDA failed to start in this process"),
    # ATen's dispatch finding no kernel of the op for the tensor's dtype (`"abs_cpu" not implemented for
    # 'UInt16'`, checked by running torch; `"flip_cuda" not implemented for 'Bool'`; in an exception's repr the quotes
    # are escaped): one tensor, its dtype. After the device checks: a log that also holds one is read by it
    _t("kernel_dtype", "dtype", r"\"(?P<op>\w+)\" not implemented for \\?'(?P<dtype>\w+)\\?'",
       "an op with no kernel for the tensor's dtype on the device it ran on"),
    # a kernel's own assert (an index past the end: a token id past the embedding, a class past the classes), which
    # CUDA reports at a later call: no placement problem (cudaErrorAssert's text). Last: a log that also holds a
    # device check is read by that check
    _t("device_assert", "assert", r"device-side assert(?:ion)? triggered",
       "a CUDA kernel's own assert failed (an index out of range), not a device check"),
    # cudaErrorIllegalAddress: a kernel read memory it may not. Last, as the assert: a log's device check comes first
    _t("illegal_access", "illegal", r"an illegal memory access was encountered",
       "a CUDA kernel read memory it may not"),
)
TEMPLATE_WHY = {t.name: t.why for t in TEMPLATES}
# an error the templates did not read, as Python, pytest (`E   `) and torchrun (`[rank0]: `) print it
ERROR_LINE = re.compile(r"^[^\S\n]*(?:E[^\S\n]+|\[rank\d+\]:[^\S\n]*)?\w+(?:Error|Exception)\b", re.M)


@dataclasses.dataclass(frozen=True)
class Facts:
    """What the input says: the message's template and kind, the devices and argument it names, the
    frames that matter, what the code does, and the PyTorch version where the input shows one."""

    template: str | None = None
    kind: str | None = None
    message: str = ""
    devices: tuple[str, ...] = ()
    argument: str | None = None
    op: str | None = None
    frames: tuple[str, ...] = ()
    code: tuple[str, ...] = ()
    torch_version: str | None = None
    # what is on the CPU: "input" (the batch), "weights" (the model's), "state" (updated in place), "table" (the
    # tensor a gather reads from, its index on the device)
    side: str | None = None
    site: str | None = None  # the deepest frame of RAISE_SITES: where the error was raised
    run: tuple[str, ...] = ()  # what the paste says of the run, outside the code it shows: "resumed" from a checkpoint

    @property
    def pair(self) -> str | None:
        """accelerator_cpu, two_accelerators, accelerator_meta, or None where the devices are unknown."""
        kinds = {d.split(":")[0] for d in self.devices}
        if len(self.devices) < 2 and len(kinds) < 2:
            return None
        if "meta" in kinds:
            return "accelerator_meta"
        return "accelerator_cpu" if "cpu" in kinds else "two_accelerators"


def _normalize(text: str) -> str:
    """One line: pytest's `E   ` margins and log prefixes dropped, wrapped lines joined."""
    lines = [re.sub(r"^(?:E\s{2,}|>\s+|\[rank\d+\]:\s*)", "", line.strip()) for line in text.splitlines()]
    return re.sub(r"\s+", " ", " ".join(lines))


INPUT_ARGUMENTS = ("mat1", "input", "index", "indices")
WEIGHT_ARGUMENTS = ("mat2", "weight", "bias")
# the ops a layer raises from (nn.Linear's addmm/mm, a convolution, an embedding's index_select): there mat2, weight
# and bias are the layer's weights; in another op (bmm of two activations) they are not
LAYER_OPS = (r"(?:^|_)(?:addmm|mm|linear|matmul|conv|cudnn|mkldnn|embedding|index_select|native_layer_norm|"
             r"layer_norm|native_batch_norm|batch_norm|native_group_norm|group_norm|instance_norm|rms_norm|prelu)")


# the ops that update a state in place (an optimizer's step, an EMA): elementwise math, whole words of the op's name
# (before 2.0 Adamax and amsgrad also took max and cat)
UPDATE_OPS = (r"(?:^|_)(?:add|sub|mul|div|addcmul|addcdiv|lerp|sqrt|copy|max|maximum|cat|foreach|"
              r"fused_(?:adamw?|sgd|adagrad))(?:_|$)")


def op_is(op: str, name: str) -> bool:
    """Whether the op a message names (`wrapper_CUDA_addmm`, `_th_bmm`, `wrapper_CUDA__foreach_add_`) is `name` or
    a variant of it: the name at the start of one of the op's words (`mm` is not `bmm`, nor `addmm`)."""
    return re.search(r"(?:^|_)" + re.escape(name), op) is not None


def _side(template: Template | None, groups: dict[str, str | None]) -> str | None:
    """Which side of a layer is on the CPU, where the message tells: the argument it names and its device."""
    if template is None:
        return None
    a, b, arg = (groups.get("a") or "").lower(), (groups.get("b") or "").lower(), groups.get("arg")
    if template.name == "input_weight":
        return "weights" if _device_of_legacy(groups.get("b") or "") == "cpu" else "input"
    if template.name == "apex_param":
        return "weights"  # the model's own parameter or buffer
    if template.name == "diffusers_generator":
        return "weights"  # the pipeline's device is its weights': on the CPU, or read as the CPU (offloaded)
    if template.name == "dgl_graph":
        return "input"  # a graph and its features: the batch, one part of it left behind
    if template.name == "mps_conv":  # the input's device, then the weight's
        return "input" if a == "cpu" else "weights"
    if template.name == "rnn_parameters":  # the input's device, then the weights'
        return "weights" if b == "cpu" else "input"
    # a CUDA extension's own check names the argument it found on the CPU (CHECK_CUDA(weight)): a layer's weight or
    # bias is the module's, which was not moved. Its input tells no side: the activation a layer gets inside the
    # model is on the CPU for an input never moved and for a layer before it never moved alike
    named = arg or groups.get("arg2")
    if template.name == "extension_cuda" and named and re.fullmatch(r"weights?|bias", named, re.I):
        return "weights"
    # stft's and istft's own check (aten/src/ATen/native/SpectralOps.cpp) names the signal `self` and the window.
    # A signal on the CPU is what the transform was given: the input's side. A window on the CPU tells no side: a
    # transform's buffer never moved, a plain attribute, or a `hann_window(n)` made in forward without device=
    if template.name == "named_pair" and {groups.get("n1"), groups.get("n2")} == {"self", "window"} and arg == "self" \
            and "cpu" in (a, b) and a != b:
        return "input"
    if template.name in ("legacy_type", "invalid_combination") and arg == "other" and _device_of_legacy(a) == "cpu":
        return "state"  # an in-place update (`buf.add_(other)`) of a CPU tensor with a device one
    # the named argument's device: 2.8+ says it ("got mat1 is on A"); the older codegen form and the TH
    # checks name the common device first and the argument's second ("found ... A and B", "got device B")
    op = groups.get("op")
    if template.name == "same_gpu" and arg == "out" and op == "addmm":
        return "weights"  # 1.x's addmm makes `out` with the bias's options: a CPU `out` is a CPU bias, the layer's
    if arg in INPUT_ARGUMENTS + WEIGHT_ARGUMENTS and (not op or re.search(LAYER_OPS, op)):
        named = {"codegen_named": a, "codegen": groups.get("b"), "legacy_device_type": groups.get("b"),
                 "legacy_backend": groups.get("b"), "same_gpu": groups.get("b"),
                 "device_type": groups.get("b"), "mps_argument": groups.get("b"),
                 "invalid_signature": _device_of_legacy(groups.get("b") or "")}.get(template.name)
        if named:
            return "input" if (arg in INPUT_ARGUMENTS) == (named.lower() == "cpu") else "weights"
    # a gather's (or take's) index on the device and the tensor it reads from on the CPU: a table left behind
    if arg in ("index", "indices") and op and re.search(r"(?:^|_)(?:gather|take)(?:_out|_along_dim)?$", op):
        named = {"codegen_named": a, "codegen": groups.get("b")}.get(template.name)
        if named and named.lower() != "cpu" and "cpu" in (a, b):
            return "table"
    return None


def _typed_argument(got: str, signatures: str) -> dict[str, str | None]:
    """Where a pre-0.4 parser's message gave the types it got and the signatures it expected: the argument whose
    type differs only in its device (`torch.LongTensor` given for `torch.cuda.LongTensor index`), the device the
    signature wanted (a) and the one given (b)."""
    given = [t.strip().strip("!") for t in got.split(",")]  # 0.3 marks the argument it refused: `!torch.LongTensor!`
    for signature in re.findall(r"\(([^)]*)\)", signatures):
        params = [p.strip().split(" ") for p in signature.split(",")]
        if len(params) != len(given):
            continue
        for typ, param in zip(given, params):
            if typ != param[0] and typ.replace(".cuda.", ".") == param[0].replace(".cuda.", "."):
                return {"a": param[0], "b": typ, "arg": param[-1] if len(param) > 1 else None}
    return {"a": "torch.cuda.Tensor", "b": "torch.Tensor", "arg": None}  # a device differs; the message hides where


def _device_of_legacy(name: str) -> str:
    """The device of a legacy type name: `torch.cuda.FloatTensor` is cuda's, `torch.FloatTensor` CPU's."""
    if name.startswith("MPS"):  # MPS writes its own type names (MPSFloatType)
        return "mps"
    aten = re.fullmatch(r"(CUDA|CPU|XPU)[A-Z]\w*(?:Tensor|Type)", name)  # 1.0's ATen names: CUDAFloatTensor
    if aten:
        return aten.group(1).lower()
    parts = name.split(".")
    return parts[1].lower() if len(parts) >= 3 and parts[1] != "sparse" else "cpu"


# what follows an error's message in a log and is no part of it: another traceback or a chained one, a warning, a
# logger's or a tool's line (wandb, torchrun's elastic agent, make)
AFTER_MESSAGE = re.compile(r" (?:Traceback \(most recent call last\)|The above exception was|During handling of the "
                           r"above exception|\S+\.py:\d+: \w*Warning:|wandb: |(?:ERROR|WARNING|INFO):\S|"
                           r"[\w.-]+: \*\*\* )")


def read_message(text: str) -> tuple[Template | None, dict[str, str | None], str]:
    flat = _normalize(text)
    for template in TEMPLATES:
        match = template.pattern.search(flat)
        if match:
            after = AFTER_MESSAGE.search(flat, match.end())
            end = min((i for i in (flat.find(" File ", match.end()), flat.find(" =====", match.end()),
                                   after.start() if after else -1) if i > 0),
                      default=-1)  # the next frame, pytest's next part (its summary), or the log's next line
            start = match.start("m") if match.groupdict().get("m") else match.start()  # the message, not what led to it
            return template, match.groupdict(), flat[start: end if end > 0 else match.end() + 200].strip()
    return None, {}, ""


# the devices of a message that names none, or not all: where its op runs, then where the tensor it refused is
FIXED_DEVICES = {
    "thnn_cpu_argument": ("cuda", "cpu"), "cpu_scalars": ("cuda", "cpu"), "dataparallel_cpu": ("cuda", "cpu"),
    "extension_cuda": ("cuda", "cpu"),  # the extension runs on CUDA; the argument it names is on the CPU
    "extension_cpu": ("cpu", "cuda"),  # the kernel runs on the CPU; the argument it names is on the GPU
    "xla_input": ("xla", "cpu"),  # the op runs on XLA; its input is a CPU tensor
    "mps_placeholder": ("mps", "cpu"),  # an MPS kernel reading a tensor that has no MPS storage: a CPU one
    "dml_input": ("privateuseone", "cpu"),  # a DML op (PrivateUse1's) given an input on the CPU
    "different_gpus": ("cuda:0", "cuda:1"),  # two GPUs, which the message does not say
}


def _devices(template: Template, groups: dict[str, str | None]) -> tuple[str, ...]:
    found = [groups.get(k) for k in ("a", "b", "a2", "b2")]
    names = [n for n in found if n]
    if template.name in ("input_weight", "legacy_type", "invalid_combination", "invalid_signature", "apex_param"):
        names = [_device_of_legacy(n) for n in names]
    if template.name == "same_gpu":  # the GPU (or MPS, whose kernels kept the check) the op runs on; no index
        names = ["mps" if groups.get("a") == "MPS" else "cuda", "cpu"]
    names = list(FIXED_DEVICES.get(template.name, names))
    if template.name == "same_gpu_index":
        names = [f"cuda:{n}" for n in names]
    if template.name == "sparse_devices":  # COO's get_device(): a CUDA index, or -1 for the CPU
        names = [("cpu" if n == "-1" else f"cuda:{n}") if re.fullmatch(r"-?\d+", n) else n for n in names]
    if template.name == "legacy_backend":  # SparseCUDA is CUDA's device, a sparse layout: no other device
        names = [re.sub(r"^(?:Sparse|Mkldnn|Quantized)", "", n) for n in names]
    if template.name == "named_pair":  # 1.0's linear solve said GPU or CPU
        names = [{"GPU": "cuda", "CPU": "cpu"}.get(n, n) for n in names]
    names = [n.lower() for n in names]
    if template.name in ("meta", "meta_copy"):
        names.append("meta")
    return tuple(dict.fromkeys(names))


# ---- 2. the frames -------------------------------------------------------------------------------

# a frame line as Python, IPython 7 (a file or a cell; Colab links it: `[<ipython-input-9-60e6>](https://...) in
# forward(self, x)`), IPython 8 (a file or a cell) and pytest print it
FRAME = re.compile(r'File "(?P<path>[^"]+)", line \d+, in (?P<func>[\w<>]+)'
                   r"|(?<!\S)\[?(?P<ipath>[^\s\[\]()]+\.py|<ipython-input-[\w-]+>)(?:\]\([^)\s]*\))? in "
                   r"(?P<ifunc>\w+\(|<module>|<cell line: \d+>)"
                   r"|File (?P<jpath>[^\s\",]+\.py):\d+, in (?P<jfunc>[\w.<>]+)"
                   r"|(?P<cell>Cell In\[\d+\]), line \d+, in (?P<cfunc>[\w.<>]+)"
                   r"|(?<!\S)(?P<ppath>\S+\.py):\d+: in (?P<pfunc>\w+)"
                   # a frame whose `File "` the paste cut off: `[...]/site-packages/lib/m.py", line 457, in f`
                   r'|(?<!\S)(?P<tpath>[^\s"]+\.py)", line \d+, in (?P<tfunc>[\w<>]+)')


def _frame(match: re.Match[str]) -> tuple[str, str]:
    """A frame line's file (with `/` separators) and function."""
    path = next((match.group(g) for g in ("path", "ipath", "jpath", "cell", "ppath", "tpath") if match.group(g)), "")
    func = next((match.group(g) for g in ("func", "ifunc", "jfunc", "cfunc", "pfunc", "tfunc") if match.group(g)), "")
    return path.replace("\\", "/"), func.rstrip("(").split(".")[-1]  # IPython 8 qualifies it: Net.forward
# frame kind -> (path regex, function regex or None), each a place a scenario's error is raised from
FRAMES = {
    # not the scheduler's wrapper of an optimizer's step (lr_scheduler.py's), which wraps any optimizer's
    "optimizer_step": (r"torch[/\\]optim[/\\](?!optimizer\.py|lr_scheduler\.py)", None),
    "sgd_step": (r"torch[/\\]optim[/\\]sgd\.py", None),
    "adam_step": (r"torch[/\\]optim[/\\]adamw?\.py", None),
    "optimizer_load": (r"torch[/\\]optim[/\\]optimizer\.py", r"load_state_dict"),
    "loss": (r"torch[/\\]nn[/\\](?:modules[/\\]loss\.py|functional\.py)",
             r"cross_entropy|nll_loss|binary_cross_entropy\w*|forward|mse_loss|kl_div|l1_loss"),
    "embedding": (r"torch[/\\]nn[/\\](?:modules[/\\]sparse\.py|functional\.py)", r"embedding|forward"),
    "layer": (r"torch[/\\]nn[/\\]modules[/\\](?:linear|conv|batchnorm|normalization)\.py", None),
    "rnn": (r"torch[/\\]nn[/\\]modules[/\\]rnn\.py", None),
    "serialization": (r"torch[/\\]serialization\.py", None),
    "rng": (r"torch[/\\](?:random|cuda[/\\]random)\.py", r"set_rng_state"),
    "sampler": (r"torch[/\\]utils[/\\]data[/\\](?:sampler|dataloader|distributed)\.py", None),
    "generate": (r"transformers[/\\]generation[/\\]", None),
    "ddp": (r"torch[/\\]nn[/\\]parallel[/\\]distributed\.py", None),
    "dataparallel": (r"torch[/\\]nn[/\\]parallel[/\\](?:data_parallel|scatter_gather)\.py", None),
    "collective": (r"torch[/\\]distributed[/\\]distributed_c10d\.py", None),
    "ema": (r"ema", r"\w*ema\w*|update|step"),
    # the step of an optimizer outside torch.optim: a file or package named for one, not torch's own (torch/amp's
    # scaler); one that hands on to torch.optim's step (accelerate's, Lightning's wrapper) is no optimizer: read_frames
    "custom_optimizer_step": (r"^(?!.*\btorch[/\\](?:optim|amp|cuda|nn|utils|autograd|_dynamo|distributed)[/\\])"
                              r"(?:.*optim\w*[/\\].*|.*(?:optim|prodigy|adam|sgd|lion|lamb|novograd|dadapt|adafactor|"
                              r"sophia|schedule_?free)\w*\.py)$", r"step"),
    # a loss of the user's or a library's own (a file or package named for losses), not torch.nn's
    "user_loss": (r"^(?!.*\btorch[/\\]nn[/\\]).*(?:\bloss\w*[/\\][^/\\]+|\w*loss\w*\.py)$",
                  r"forward|__call__|\w*loss\w*"),
    # an exported program run as a module (ExportedProgram.module() is an fx GraphModule)
    "exported": (r"torch[/\\](?:fx[/\\]graph_module\.py|export[/\\])", None),
    # pack_sequence makes its lengths with torch.as_tensor and no device=: on the default device
    "pack_sequence": (r"torch[/\\]nn[/\\]utils[/\\]rnn\.py", r"pack_sequence"),
    # a Distribution keeps the parameters it was built from (Python numbers: CPU tensors) and has no .to()
    "distributions": (r"torch[/\\]distributions[/\\]", None),
    # a graph torch.compile traced and Inductor compiled: its kernels are Inductor's, not the user's ops
    "compiled": (r"torch[/\\]_(?:dynamo|inductor)[/\\]", None),
    # a DataLoader's worker process, which runs the Dataset, its transforms and collate_fn (and re-raises their error)
    "dataloader_worker": (r"torch[/\\]utils[/\\]data[/\\]_utils[/\\](?:worker|fetch)\.py", None),
    # a metric's update in torchmetrics (its modular metric or its functional update): the metric's state meets its
    # inputs there
    "metric": (r"torchmetrics[/\\]", None),
    # a Hugging Face library's frame (a model's modeling file, accelerate's hooks that move each block's inputs)
    "hf_library": (r"[/\\](?:transformers|accelerate|peft)[/\\]", None),
}
# what a user frame's code line shows (`optimizer.step()`, `loss = criterion(...)`)
CALL_SKIPPED = re.compile(r"\s*(?:File |Traceback|\w*Error)")  # a frame's line, an error's: no call quoted
CALL_LINES = {
    # an optimizer's step by the name that holds it (`optimizer.step()`, `opt_g.step()`, `self.optimizers().step()`,
    # `optimizers[0].step()`, `self.adam.step()`), a scaler's or DeepSpeed's engine's (`self._scaler.step(optimizer)`,
    # `model_engine.step()`), not any step (`self.step()` of a trainer, `env.step(action)`)
    "optimizer_step": r"\b\w*(?:opt|adam|sgd)\w*(?:\(\)|\[[^\]\n]*\])?\.step\(|\b\w*(?:scaler|engine)\.step\("
                      r"|scheduler\.step",
    "loss": r"\bcriterion\(|\bloss_fn\(|\bloss\w* = \w*(?:loss|criterion)\w*\(|F\.(?:cross_entropy|nll_loss)",
    "generate": r"\.generate\(",
    "serialization": r"torch\.load\(",
    "rng": r"set_rng_state\(",
    "ema": r"\b\w*ema\w*\.(?:py\b|\w+\()",
    "embedding": r"\bembed\w*\(|input_ids",
    "sgd_step": r"\bmomentum_buffer|\bbuf\.mul_\(momentum",
    "adam_step": r"\bexp_avg",
}


# where an error can be raised: the deepest of these frames in a traceback is where this one was
RAISE_SITES = ("optimizer_step", "custom_optimizer_step", "loss", "layer", "embedding", "rnn", "serialization", "rng",
               "sampler", "ema")


@functools.lru_cache(maxsize=4)  # several readings ask for the frames of one paste
def _frames(text: str) -> tuple[tuple[str, str], ...]:
    """Each frame line's file and function, in the order of the paste."""
    return tuple(_frame(match) for match in FRAME.finditer(text))


def raise_site(text: str) -> str | None:
    site = None
    for path, func in _frames(text):
        for kind in RAISE_SITES:
            path_rx, func_rx = FRAMES[kind]
            if re.search(path_rx, path) and (func_rx is None or re.fullmatch(func_rx, func)):
                site = kind
    return site


# a library's file, not the user's: installed packages, Python's own, torch's wherever it lives (a source checkout)
LIBRARY = re.compile(r"[/\\](?:site|dist)-packages[/\\]|[/\\]lib[/\\]python\d[\d.]*[/\\]|[/\\]Lib[/\\]|^<frozen "
                     r"|[/\\]torch[/\\]")


def _serialized(path: str) -> bool:
    """A frame of TorchScript's serialized code (`code/__torch__/...`): the graph a trace or a script recorded."""
    return path.startswith("code/__torch__")


def read_frames(text: str) -> tuple[str, ...]:
    kinds: list[str] = []
    frames = _frames(text)
    for path, func in frames:
        for kind, (path_rx, func_rx) in FRAMES.items():
            if re.search(path_rx, path) and (func_rx is None or re.fullmatch(func_rx, func)):
                kinds.append(kind)
    last = frames[-1:]
    # raised in a forward of the user's own code, by the code of that forward; not TorchScript's serialized code
    # (`code/__torch__/...`), which is the graph a trace or a script recorded, not a forward run as written
    if last and last[0][1] == "forward" and not LIBRARY.search(last[0][0]) and not _serialized(last[0][0]):
        kinds.append("user_forward")
    if "optimizer_step" in kinds and "custom_optimizer_step" in kinds:
        kinds = [k for k in kinds if k != "custom_optimizer_step"]  # a trainer's wrapper of torch.optim's step
    # each kind once, where its first line is (a megabyte's log is searched once per kind, not once per line)
    body = "\n".join(line for line in text.splitlines() if not CALL_SKIPPED.match(line))
    firsts = [(body.count("\n", 0, match.start()), i, kind) for i, (kind, rx) in enumerate(CALL_LINES.items())
              if (match := re.search(rx, body))]
    kinds += [kind for _, _, kind in sorted(firsts)]
    if re.search(r"TorchScript interpreter|operation failed in (?:the TorchScript )?interpreter", text):
        kinds.append("torchscript")

    return tuple(dict.fromkeys(kinds))


# a release (2.0.1), a pre-release or nightly (2.6.0.dev20241102, 0.5.0a0, 2.1.0rc1) or a local build (+cu124, +git...)
PRE = r"(?:(?:a|b|rc|\.dev|\.post)\d+)?"
VERSION = re.compile(r"\b(?:py)?torch(?:==| version:? ?| )v?(?P<v>\d+\.\d+\.\d+" + PRE + ")"
                     r"|\b(?P<w>\d+\.\d+\.\d+" + PRE + r")\+(?:cu\d+|rocm[\d.]+|cpu\b|git[0-9a-f]+|[0-9a-f]{7,})",
                     re.I)


def read_version(text: str) -> str | None:
    """The PyTorch release the input shows: one named as torch's (`torch==2.0.1`, `PyTorch version: 2.1.0`), else a
    bare local build (`2.1.2+cu121`, as torch.__version__ prints it) that no other package's name precedes
    (`torchaudio 2.0.2+cpu`, `xformers 0.0.20+a1b2c3d`). Two releases named as torch's (an upgrade told in
    words) place the input at neither."""
    named, bare = set(), []
    for match in VERSION.finditer(text):
        if match.group("v"):
            named.add(match.group("v"))
        elif not re.search(r"[A-Za-z][\w-]*\s*(?:==|=|:)?\s*v?$", text[max(0, match.start() - 40):match.start()]):
            bare.append(match.group("w"))
    if named:
        return named.pop() if len(named) == 1 else None
    return bare[0] if bare else None


def release(version: str | None) -> tuple[int, ...] | None:
    """A version's release as numbers to compare (2.0.1 -> (2, 0, 1)), or None where it does not place the input
    before or after a fix: no version, or a pre-release or nightly, built from whatever the main branch had then."""
    match = re.fullmatch(r"(\d+)\.(\d+)\.(\d+)(?:\.post\d+)?", version or "")
    return tuple(int(n) for n in match.groups()) if match else None


# ---- 3. the code ---------------------------------------------------------------------------------

FACTORIES = {"zeros", "ones", "arange", "rand", "randn", "randint", "empty", "full", "tensor", "Tensor",
             "FloatTensor", "LongTensor", "linspace", "eye", "from_numpy", "as_tensor",
             "hann_window", "hamming_window", "blackman_window", "bartlett_window", "kaiser_window"}
# a factory call without device=: the tensor it makes is on the CPU (or the default device)
FACTORY_CALL = r"\b(?:torch|np)\.(?:" + "|".join(sorted(FACTORIES)) + r")\((?![^\n]*device\s*=)"
# torch's own (numpy has no device; as_tensor keeps the device of a tensor it is given)
TORCH_FACTORY_CALL = r"\btorch\.(?:" + "|".join(sorted(FACTORIES - {"as_tensor"})) + r")\((?![^\n]*device\s*=)"
DISTRIBUTION = (r"(?:Normal|Uniform|Bernoulli|Categorical|Beta|Gamma|Laplace|Exponential|Poisson|Dirichlet|LogNormal"
                r"|Cauchy|StudentT|Binomial|MultivariateNormal)")
# what follows `device_map=` when it names one device, the whole model there (accelerate places a device string, an
# index, a torch.device or `{"": device}` so; "auto", "balanced", "sequential" or a dict of modules spread it)
NOT_ONE_DEVICE = (r"""(?!\s*(?:f?['"](?:cuda|cpu|mps|xpu|npu|hpu|xla)\b|\d+\b|None\b|torch\.device\("""
                  # `{"": device}` alone, its value with calls or an f-string in it (`{"": f"cuda:{rank}"}`); a
                  # variable or attribute holding a device or a rank (`device`, `DEVICE`, `local_rank`,
                  # `accelerator.process_index`, `Accelerator().device`)
                  r"""|\{\s*['"]{2}\s*:(?:[^,{}()]|\((?:[^()]|\([^()]*\))*\)|\{[^{}]*\})*\}"""
                  r"""|(?:[\w.()]*\.)?(?:\w*_)?(?i:device|rank|process_index)\b))""")
# signal -> regex over the code's text, where no ast rule decides it (snippets are often fragments)
SIGNALS = {
    "optimizer_load": r"\b\w*optim\w*\.load_state_dict\(",
    "sgd": r"\bSGD\(", "adam": r"\bAdam[W]?\(", "adagrad": r"\bAdagrad\(",
    "tokenizer": r"\btokenizer\w*\(|return_tensors\s*=\s*['\"]pt|\.encode\(|\.batch_encode_plus\(",
    "pos_weight": r"\bpos_weight\s*=",
    "class_weight": r"(?:CrossEntropyLoss|NLLLoss)\([^)]*\bweight\s*=",
    "torch_load": r"\btorch\.load\(|\.load_from_checkpoint\(",  # Lightning's loads through torch.load
    "map_location_device": r"map_location\s*=\s*(?:device|['\"](?:cuda|mps|xpu)|torch\.device\(['\"](?:cuda|mps))",
    "set_rng_state": r"set_rng_state\(",
    "rng_state_all": r"\b(?:get|set)_rng_state_all\(",  # one state per device of the host
    # DataLoader workers: a loader given some (`num_workers=4`, `num_workers=args.workers`), or a worker's re-raise
    "dataloader_worker": r"\bnum_workers\s*=\s*(?!0\b)\w",
    # torch.load told to put the storages on the CPU ('cpu', a device, a function or a dict of them): no rank's
    # tensors land on device 0
    "map_location_cpu": r"(?m)^[^#\n]*\bmap_location\s*=\s*(?:['\"]cpu['\"]|torch\.device\(\s*['\"]cpu['\"]"
                        r"|lambda\s+\w+\s*,\s*\w+\s*:\s*\w+\s*[,)]|\{[^}\n]*:\s*['\"]cpu['\"])",
    # a default device set to an accelerator (not the CPU, not a CPU tensor type), on a line that is no comment
    "default_device": r"(?m)^[^#\n]*(?:set_default_device\(\s*(?!['\"]cpu['\"]|None\b|torch\.device\(\s*['\"]cpu)"
                      r"|set_default_tensor_type\([^)\n]*cuda)",
    "shuffle": r"\bshuffle\s*=\s*True",
    # a generator made on a device (`torch.Generator(device="mps")`), not the CPU's
    "device_generator": r"(?m)^[^#\n]*\bGenerator\(\s*device\s*=\s*(?!(?:torch\.device\(\s*)?[\"']cpu[\"'])",
    "dataparallel": r"\bDataParallel\(", "ddp": r"\bDistributedDataParallel\(",
    "jit_trace": r"\bjit\.trace(?:_module)?\(|\bexport\.export\w*\(|\bexport_for_\w+\(|\btorch\.onnx\.export\("
                 r"|from torch\.export import[^\n]*\bexport\b[\s\S]*?(?<![\w.])export\(",
    "meta": r"device\s*=\s*['\"]meta|torch\.device\(\s*['\"]meta|init_empty_weights|low_cpu_mem_usage|\.to_empty\(",
    "assign_true": r"\bassign\s*=\s*True", "ema": r"\bema\b|\bEMA\w*|shadow",
    # a device map given by keyword or in a dict of keywords (`{"device_map": "auto"}`); one that names a single device
    # (`device_map="cuda:0"`, `=0`, `=torch.device(...)`, `={"": 0}`, `=device`) puts the whole model there
    "device_map": r"\bdevice_map['\"]?\s*[=:]" + NOT_ONE_DEVICE,
    "offload": r"cpu_offload\(|enable_\w*cpu_offload\(|AlignDevicesHook|execution_device"
               r"|offload_(?:folder|state_dict|buffers)\s*=",
    # parts of one model placed on devices of their own: a device map, or a submodule moved by itself
    "split_model": r"\bdevice_map['\"]?\s*[=:]" + NOT_ONE_DEVICE + r"|\b(?:no_split_module_classes|max_memory)['\"]?"
                   r"\s*[=:]|\b(?:self|model)\.\w+\.to\(",
    # a Hugging Face model loaded or run
    "hf_model": r"\.from_pretrained\(|\.generate\(|\bpipeline\(",
    # 'cuda' without an index, and the legacy CUDA types (`torch.cuda.FloatTensor(n, k)`, `Tensor =
    # torch.cuda.FloatTensor`, `.type(torch.cuda.FloatTensor)`) unless a call gives `device=`: they allocate on the
    # current device as `.cuda()` does (torch/csrc/utils/tensor_new.cpp, legacy_tensor_generic_ctor_new: its
    # options come from the dispatch key, a device type with no index)
    "index_less": r"\.cuda\(\)|\.to\(['\"]cuda['\"]\)|device\s*=\s*['\"]cuda['\"]"
                  r"|\btorch\.cuda\.[A-Z]\w*Tensor\b(?!\s*\((?:[^()]|\([^()]*\))*\bdevice\s*=)",
    "ranks": r"local_rank|\brank\b|set_device\(|cuda:[1-9]",
    # several processes shown, not only a device index: a process group, a launcher's rank variables, DDP
    "processes": r"init_process_group\(|LOCAL_RANK|\blocal_rank\b|environ\[\s*['\"]RANK|DistributedDataParallel\(|"
                 r"\bmp\.spawn\(|multiprocessing\.spawn\(|torchrun",
    # the host runs on CPU by design: a load mapped to the CPU, a device chosen as the CPU
    # the device chosen as the CPU (`device = "cpu"`): a run on the CPU by design
    "cpu_device": r"(?m)^[ \t]*(?:self\.)?device\s*=\s*(?:['\"]cpu['\"]|torch\.device\(\s*['\"]cpu['\"]\s*\))\s*$",
    "cpu_host": r"(?m)(?:map_location\s*=|^[ \t]*device\s*=)\s*(?:['\"]cpu['\"]|torch\.device\(\s*['\"]cpu['\"]\s*\))",
    "mps": r"['\"]mps(?::\d+)?['\"]|\bbackends\.mps\b|\btorch\.mps\b",
    # a tensor put in an optimizer's param group, and an optimizer of one's own
    "group_tensor": r"(?:\b\w*group\w*|param_groups\[[^\]]*\])\[\s*['\"]\w+['\"]\s*\]\s*=\s*torch\.(?:"
                    + "|".join(FACTORIES) + r")\((?![^\n]*\bdevice\s*=)",
    "custom_optimizer": r"\bclass\s+\w+\(\s*(?:torch\.optim\.|optim\.)?Optimizer\s*\)",
    "capturable_fused": r"\b(?:capturable|fused)\s*=\s*True",
    "head_replaced": r"\b(?!self\b)\w+\.(?:fc|classifier|head|lm_head)\s*=\s*(?:nn|torch\.nn)\.",  # on a built model
    "lookup_table": r"\b(?:alphas\w*|betas|sigmas|schedule\w*|timesteps?)\[",
    "batch_loop": r"for\s+[\w, ()]+\s+in\s+(?:[\w.]+\()*\w*(?:loader|batches)\w*",  # tqdm(enumerate(loader)) too
    "device_check": r"check_device_consistency|next\(\w+\.parameters\(\)\)\.device",
    "moves_inputs": r"\b(?:x|inputs?|images?|data|batch|labels?|targets?)\w*\s*=\s*\w+\.(?:to\(|cuda\()",
    # lerp's weight a 0-dim tensor made on the CPU: `torch.lerp(a, b, torch.tensor(0.5))`, `a.lerp_(b, weight=...)`
    # pack_padded_sequence's lengths given as a list (`[2, 1]`, `lens.tolist()`), which it turns into a tensor; the ast
    # reads a name bound to one too
    "lengths_list": r"(?m)^[^#\n]*\bpack_padded_sequence\([^,\n]+,\s*(?:lengths\s*=\s*)?"
                    r"(?:\[|[\w.]+\.tolist\(\)|list\()",
    "pack_sequence": r"(?m)^[^#\n]*\bpack_sequence\(",
    "pack_padded": r"(?m)^[^#\n]*\bpack_padded_sequence\(",
    # its lengths taken to the CPU in the call (`lengths.cpu()`, `.to("cpu")`): the lesson's fix, shown
    "lengths_cpu": r"(?m)^[^#\n]*\bpack_padded_sequence\([^,\n]+,\s*(?:lengths\s*=\s*)?[\w.\[\]]+"
                   r"\.(?:cpu\(\)|to\(\s*(?:torch\.device\()?[\"']cpu[\"'])",
    "compiled": r"(?m)^[^#\n]*\btorch\.compile\b",
    # a Distribution built from a tensor of one or more dimensions made without device=: its parameters on the CPU.
    # Built from Python numbers (0-dim), they pass as scalars beside device tensors since 1.x; before, they did not
    "distribution_cpu": r"(?m)^[^#\n]*\b" + DISTRIBUTION + r"\(\s*(?:\w+\s*=\s*)?torch\.(?:zeros|ones|randn|rand|"
                        r"eye|Tensor|FloatTensor|tensor\(\s*\[)(?![^\n]*device\s*=)",
    "distribution_scalar": r"(?m)^[^#\n]*\b" + DISTRIBUTION + r"\(\s*(?:\w+\s*=\s*)?(?:-?\d[\d.]*\s*[,)]"
                           r"|torch\.tensor\(\s*-?\d)",
    "lerp_cpu_scalar": r"(?m)^[^#\n]*?\blerp_?\([^\n]{0,300}?,\s*(?:weight\s*=\s*)?"
                       r"torch\.tensor\(\s*-?[\d.]+(?:e-?\d+)?\s*\)\s*\)",
}


# a model run (`model(x)`, `self.net(x)`, `encoder.forward(x)`) or defined (`class Net(nn.Module)`)
RUNS_A_MODEL = r"(?i)(?<![\w.])(?:self\.)?\w*(?:model|net|encoder|decoder|classifier)\w*(?:\.forward)?\s*\("


def _parsed(code: str) -> ast.AST | None:
    """The code's syntax tree, or None where it does not parse: a fragment, a null byte, code nested too deep. The
    parser's SyntaxWarnings (an invalid escape in a pasted string) are not shown."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return ast.parse(code)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None


def read_code(code: str) -> tuple[str, ...]:
    """The signals the code shows: `ast` for what needs structure (a factory inside forward, a plain
    tensor attribute, layers in a plain list, the order of a load and a move), text for the rest."""
    code = _clean(code, paste=False)
    found = [name for name, rx in SIGNALS.items() if re.search(rx, code)]
    # a method pasted from inside its class keeps the class's indent; a session keeps its prompts
    tree = _parsed(textwrap.dedent(_without_prompts(code)))
    try:
        parsed = _ast_signals(tree) if tree is not None else None
    except (RecursionError, MemoryError):  # a tree nested too deep to walk
        parsed = None
    found += parsed if parsed is not None else _text_signals(code)
    if "cpu_device" in found and re.search(r"cuda|is_available\(|['\"](?:mps|xpu)", code):
        found.remove("cpu_device")  # the CPU is the fallback of a choice (`if torch.cuda.is_available(): ...`)
    if "batch_moved" in found and "batch_loop" in found:
        found.remove("batch_loop")  # a loop whose batch is moved whole tells of no batch left behind
    if "moves_inputs" in found and not re.search(RUNS_A_MODEL, code):
        found.remove("moves_inputs")  # inputs moved beside no model: nothing says which tensor stayed behind
    if "tokenizer" in found:  # its outputs moved whole, or not
        found.append("tokenizer_moved" if _tokenizer_outputs_moved(code) else "tokenizer_not_moved")
    # a layer called out of a dict by a tuple key (`self.convs[("upconv", i, 0)](x)`, not `self.blocks[(i - 1)](x)`):
    # a ModuleDict takes only strings, so the dict is a plain one, whose layers .to() skips unless they are also
    # registered another way (DataParallel's replicas miss them even then)
    if re.search(r"(?m)^[^#\n]*\bself\.\w+\[\s*\([^\]\n,]{0,200},[^\]\n]{0,200}\)\s*\]\s*\(", code):
        found.append("plain_list_layers")
    # a layer put in an item of a container attribute (`self.metrics["acc"] = Accuracy()`): a plain dict's item is
    # no submodule, unless the code shows the container made a ModuleDict, ModuleList or Sequential
    registered = set(re.findall(r"(?m)^[^#\n]*\bself\.(\w+)\s*(?::[^=\n]*)?=\s*(?:\w+\.)*"
                                r"(?:ModuleDict|ModuleList|Sequential)\(", code))
    for name, cls in re.findall(r"(?m)^[^#\n]*\bself\.(\w+)\[[^\]\n]{1,200}\]\s*=\s*((?:\w+\.){0,3}[A-Z]\w*)\(", code):
        if name not in registered and (re.fullmatch(LAYER, cls) or re.fullmatch(MODULE_CLASS, cls.split(".")[-1])):
            found.append("plain_list_layers")
    return tuple(dict.fromkeys(found))


TYPOGRAPHIC = str.maketrans({"\u2018": "'", "\u2019": "'", "\u201c": '"', "\u201d": '"'})


def _tokenizer_outputs_moved(code: str) -> bool:
    """A tokenizer's outputs moved whole: `tokenizer(...).to(device)` on its line, a name bound to a tokenizer's call
    moved (`enc = tokenizer(...)`, then `enc.to(device)`), or every value moved (`{k: v.to(device) for ...}`). Not
    a model's move (`from_pretrained(name).to(device)`), nor one of its tensors (`enc["input_ids"].to(device)`)."""
    if re.search(r"\btokenizer\w*\([^\n]*\)\.to\(|\{\s*\w+\s*:\s*\w+\.to\(", code):
        return True
    # bound to the call, or to a tensor made of its ids (`ids = torch.tensor([tokenizer.encode(text)])`)
    bound = re.findall(r"(?m)^[ \t]*(\w+)\s*=\s*(?:torch\.(?:tensor|as_tensor|LongTensor)\(\s*\[?\s*)?"
                       r"(?:[\w.]*\.)?\w*tokenizer\w*(?:\.\w+)?\(", code)
    return bool(set(bound) & set(re.findall(r"\b(\w+)\.(?:to|cuda)\(", code)))


# a terminal's escape sequences: colours and styles (CSI: `ESC[1;31m`), links (OSC 8: `ESC]8;;file://...ESC\`)
ESCAPES = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)|[@-Z\\-_])")
# the same colours with their ESC lost in a copy (`[0;31mRuntimeError[0m: ...`, as issues show notebooks' errors)
BARE_COLOURS = re.compile(r"\[\d{1,3}(?:;\d{1,3})*m")
# a web page's escapes of what a traceback holds (quotes, brackets of `<module>`, `&`), by name or number
ENTITIES = {"&quot;": '"', "&apos;": "'", "&lt;": "<", "&gt;": ">", "&amp;": "&", "&#39;": "'", "&#039;": "'",
            "&#x27;": "'", "&#34;": '"', "&#x22;": '"'}
HTML_ENTITIES = re.compile("|".join(ENTITIES))


# a CI log's time on each line (GitHub Actions' `2026-12-03T10:11:12.3456789Z `, a timestamper's `[...]`)
LOG_TIME = re.compile(r"(?m)^\[?\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?\]?[ \t]?")


def _without_log_times(text: str) -> str:
    """A paste without the time a CI log puts before each of its lines (where most lines have it: not a logger's
    line before a traceback it does not prefix)."""
    stamped = LOG_TIME.findall(text)
    if len(stamped) > 1 and 2 * len(stamped) >= text.count("\n") + 1 - text.count("\n\n"):
        text = LOG_TIME.sub("", text)
    return text


def _unescaped(text: str) -> str:
    """A paste without a terminal's colours (also where a copy lost their ESC) and a web page's escapes."""
    text = ESCAPES.sub("", text)
    # (a reset among them: of all, `[0m`, or of the colours, `[39m`, `[49m`, as IPython 9 writes it)
    if re.search(r"\[(?:0|39|49)(?:;\d{1,3})*m", text) and len(BARE_COLOURS.findall(text)) > 1:
        text = BARE_COLOURS.sub("", text)
    return HTML_ENTITIES.sub(lambda m: ENTITIES[m.group(0)], text)


def _plain(text: str) -> str:
    """What pytest printed, from a paste of it: unescaped, its quote (`> `, on every line) and a CI log's times taken
    off; pytest's own `>` (the line that ran) kept."""
    text = _unescaped(text)
    if all(re.match(r"[ \t]*>", line) for line in text.splitlines() if line.strip()):
        text = re.sub(r"(?m)^[ \t]*> ?", "", text)
    return _without_log_times(text)


@functools.lru_cache(maxsize=4)  # diagnose() and read() clean the same paste: a log of megabytes is cleaned once
def _clean(text: str, paste: bool = True) -> str:
    """The input as text Python can parse and print: a lone surrogate (bytes that were not UTF-8, read with
    surrogateescape) becomes '?', typographic quotes (a forum's, a word processor's) plain ones, and a quoted
    block's markers and Markdown's fences are dropped. A paste (not code, whose `"&quot;"` or `x[0m]` is its own)
    loses a terminal's colours and a web page's escapes (`&quot;`), and a traceback drawn in a box (rich's) is
    written as Python prints one."""
    text = text.encode("utf-8", "replace").decode("utf-8").translate(TYPOGRAPHIC)
    if paste:
        text = _unescaped(text)
    # a block quoted as a forum or an issue quotes it (`> Traceback ...`, `> > ...`), not Python's prompt `>>>`
    text = re.sub(r"(?m)^(?:[ \t]*>(?!>>)[ \t]?)+", "", text)
    text = re.sub(r"(?m)^[ \t]*(?:```|~~~)[\w+-]*[ \t]*(?:\n|$)", "", text)  # Markdown's fences around a block
    if paste:
        text = _without_log_times(text)  # (once quoted, the times begin the lines)
    if paste and "\u2502" in text and ("\u256d" in text or "\u2771" in text):  # a box's side, its corner or ❱
        text = _unboxed(text)
    text = _frames_joined(text)
    if paste and IPYTHON_RAN.search(text):  # (its frame lines joined first: they start the lines it leaves out)
        text = _ipython_ran(text)
    return text


IPYTHON_RAN = re.compile(r"(?m)^-+>[ \t]*\d+(?:[ \t](?P<code>.*))?$")  # IPython's `---> 12     out = model(x)`
IPYTHON_CONTEXT = re.compile(r"[ \t]*\d+(?:[ \t].*)?")  # the lines it shows around it: `     13     loss = ...`


def _ipython_ran(text: str) -> str:
    """A traceback IPython or Jupyter printed, as Python prints one: under each frame only the line that ran (marked
    `--->`), not the lines around it, which did not run (a `loss = criterion(...)` after the failing line is no loss
    frame)."""
    out, in_frame = [], False
    for line in text.splitlines():
        ran = IPYTHON_RAN.match(line)
        if ran:
            out.append("    " + (ran["code"] or "").strip())
            in_frame = True
            continue
        if in_frame and IPYTHON_CONTEXT.fullmatch(line):
            continue  # a line around the one that ran
        if in_frame and out and FRAME.search(out[-1]) and out[-1].count("(") > out[-1].count(")"):
            out[-1] += " " + line.strip()  # the frame's arguments, wrapped (`in f(self,` then `x, y)`)
            continue
        # a frame's first line (a cell run at the top level names no function: `Cell In[5], line 12`); a blank line
        # ends its lines
        in_frame = bool(FRAME.search(line) or re.match(r"Cell In\[\d+\], line \d+", line)) \
            or (in_frame and bool(line.strip()))
        out.append(line)
    return "\n".join(out) + ("\n" if text.endswith("\n") else "")


CODE_LINE = re.compile(r"(?P<at>\u2771)?[ \t]*\d+(?: (?P<code>.*))?$")  # `9 opt.step()`, `❱ 12 opt.step()`


def _rich_frame(header: str) -> str | None:
    """A frame's header as rich writes it, joined as it was folded (a path cut anywhere; a wrap at a space loses the
    space: `x.py:80 in` + `_use_grad`): `path.py:12 in func` as Python's frame line; or `in func:8`, rich's header
    for code with no file (a notebook's cell, `python -c`), as a cell's. Read by partition, not a pattern that could
    retry from each `.py:` of a long one."""
    path, dot_py, rest = header.rpartition(".py:")
    frame = re.fullmatch(r"(?P<line>\d+)\s*in\s*(?P<func>\S+)", rest) if dot_py else None
    if frame:
        return f'  File "{path}.py", line {frame["line"]}, in {frame["func"]}'
    name, colon, line = header.rpartition(":")
    if colon and line.isdigit() and re.fullmatch(r"in\s*[\w<>.]+", name):
        return f"Cell In[1], line {line}, in {name[2:].strip()}"
    return None


def _unboxed(text: str) -> str:
    """A traceback as rich draws it (`rich.traceback.install()`, typer's and other tools' errors): each frame a
    header `path.py:12 in func` (folded over lines where the box is narrow), the lines around the one that ran, that
    one marked `❱`, and a panel of locals, all in a box. Written as Python prints it: `File "path.py", line 12, in
    func` and the line that ran; the lines around it and the locals are left out (they ran no op)."""
    out: list[str] = []
    header: list[str] = []
    in_locals = False

    def flush() -> None:
        if header:
            frame = _rich_frame("".join(header)) if sum(map(len, header)) < 2000 else None  # a header, not a log
            out.extend([frame] if frame else [])
            header.clear()

    for line in text.splitlines():
        boxed = line.strip(" \t")  # `│ inner │` (a string's strip, not a regex's: no backtracking over spaces)
        if len(boxed) < 2 or boxed[0] != "\u2502" or boxed[-1] != "\u2502":
            flush()
            if re.match(r"[ \t]*\u256d\u2500.*Traceback", line):
                out.append("Traceback (most recent call last):")
            elif not re.match(r"[ \t]*[\u256d\u2570]\u2500", line):  # not a box's top or bottom
                out.append(line)
            continue
        inner = boxed[1:-1].strip(" \t")
        if in_locals or re.match(r"\u256d\u2500.*locals", inner):
            in_locals = not inner.startswith("\u2570")  # the panel ends at its bottom corner
            continue
        code = None if header else CODE_LINE.match(inner)  # (a header folded before its line number goes on)
        if not inner or code:
            flush()
            if code and code["at"]:  # the line that ran, without rich's indent guides
                out.append("    " + re.sub(r"^(?:\u2502[ \t]{0,3})+", "", (code["code"] or "").strip()))
            continue
        header.append(inner)
    flush()
    return "\n".join(out) + ("\n" if text.endswith("\n") else "")


def _frames_joined(text: str) -> str:
    """A traceback's frame line wrapped over two to four (`File "/.../module.py",` then `line 541, in f`), as a
    narrow terminal or an e-mail wraps it, joined again."""
    lines, out, i = text.splitlines(), [], 0
    while i < len(lines):
        line = lines[i]
        # (every form of a frame line has the word `in` before its function: lines without it join into none)
        if re.search(r"(?<!\w)File(?:\s|$)|\.py\b|<ipython-input|Cell In\[", line) \
                and re.search(r"\bin\b", " ".join(lines[i: i + 4])) and not FRAME.search(line):
            for j in range(i + 1, min(i + 4, len(lines))):
                if FRAME.search(lines[j]):
                    break  # the next frame: this line was no frame cut in two
                joined = " ".join([line, *(part.strip() for part in lines[i + 1: j + 1])])
                match = FRAME.search(joined)
                if match and match.start() < len(line) < match.end():
                    line, i = joined, j
                    break
        out.append(line)
        i += 1
    return "\n".join(out) + ("\n" if text.endswith("\n") else "")


def _without_prompts(code: str) -> str:
    """Code pasted from an interactive session: Python's prompts (`>>> `, `... `) dropped, IPython's line magics
    (`%time expr`) reduced to their statement, and shell escapes (`!pip ...`) and other magics left out."""
    if not re.search(r"(?m)^[ \t]*(?:>>>|%|!)", code):
        return code
    lines, prompted = [], False
    for line in code.splitlines():
        # a prompt, indented too (a docstring's example); `...` only as a prompt's continuation, not an Ellipsis body
        prompt = re.match(r"[ \t]*>>>(?: |$)", line) or (prompted and re.match(r"[ \t]*\.\.\.(?: |$)", line))
        prompted = bool(prompt)
        line = line[prompt.end():] if prompt else line
        magic = re.match(r"\s*%+(?:time|timeit|prun)\s+(?P<stmt>.+)", line)
        if magic:
            line = magic.group("stmt")
        elif re.match(r"\s*[%!]", line):
            continue
        lines.append(line)
    return "\n".join(lines)


def _call_name(node: ast.AST) -> str:
    if isinstance(node, ast.Call):
        node = node.func
    if isinstance(node, ast.Attribute):
        return f"{_call_name(node.value)}.{node.attr}"
    return node.id if isinstance(node, ast.Name) else ""


def _attribute_signals(node: ast.AST) -> list[str]:
    """What an assignment to `self.<name>` in __init__ keeps: a plain tensor, or layers in a plain list or dict."""
    if not isinstance(node, ast.Assign) or not any(
            isinstance(t, ast.Attribute) and _call_name(t.value) == "self" for t in node.targets):
        return []
    value = node.value
    if isinstance(value, ast.Call) and _call_name(value).split(".")[-1] in FACTORIES:
        return ["plain_tensor_attr"]
    chooser = value.func if isinstance(value, ast.Call) and isinstance(value.func, ast.Call) else None
    if chooser is not None and _call_name(chooser) == "getattr" and len(chooser.args) == 2 \
            and _call_name(chooser.args[0]) == "torch" and (not isinstance(chooser.args[1], ast.Constant)
                                                            or chooser.args[1].value in FACTORIES):
        return ["plain_tensor_attr"]  # a factory chosen by name: `getattr(torch, window)(n)`, not `torch.device`
    # layers of torch.nn, or instances of classes named as modules are (`metrics.Accuracy()`, `ResBlock()`); not a
    # list of paths, transforms or meters
    if isinstance(value, (ast.List, ast.ListComp, ast.Dict, ast.DictComp)) and any(
            isinstance(c, ast.Call) and (_call_name(c).startswith(("nn.", "torch.nn.")) or (
                re.fullmatch(MODULE_CLASS, _call_name(c).split(".")[-1])
                and not _call_name(c).startswith(("torch.", "np.")))) for c in ast.walk(value)):
        return ["plain_list_layers"]
    return []


def _ast_signals(tree: ast.AST) -> list[str]:
    found = []
    # a `self.<name> = ...` outside any function: lines of a method (of __init__) pasted on their own
    for node in getattr(tree, "body", []):
        found += _attribute_signals(node)
    # a factory moved as it is made (`torch.ones(n).cuda()`, `.to(x.device)`, `torch.zeros(n).float().cuda()`) is not
    # left on the CPU
    moved_at_once = set()
    for n in ast.walk(tree):
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr in ("to", "cuda", "type") \
                and (_to_a_device(n) if n.func.attr != "type" else any(
                    re.fullmatch(DEVICE_TYPED, ast.unparse(a)) for a in n.args)):
            receiver: ast.AST = n.func.value
            while isinstance(receiver, ast.Call) and isinstance(receiver.func, ast.Attribute):
                moved_at_once.add(id(receiver))
                receiver = receiver.func.value
            moved_at_once.add(id(receiver))
    for fn in (n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)):
        for node in ast.walk(fn):
            name = _call_name(node) if isinstance(node, ast.Call) else ""
            if fn.name == "forward" and isinstance(node, ast.Call) and name.startswith(("torch.", "np.")) \
                    and name.split(".")[-1] in FACTORIES and not any(k.arg == "device" for k in node.keywords) \
                    and id(node) not in moved_at_once and not re.fullmatch(DEVICE_TYPED, name):
                found.append("factory_in_forward")
            if fn.name == "forward" and re.fullmatch(LAYER, name):
                found.append("factory_in_forward")  # a layer made in forward: its weights are made on the CPU
            if fn.name == "__init__":
                found += _attribute_signals(node)
    # `self.heads = []` and then `self.heads.append(nn.Linear(...))`: layers in a plain list, built one by one
    lists = {t.attr for n in ast.walk(tree) if isinstance(n, ast.Assign) and isinstance(n.value, ast.List)
             for t in n.targets if isinstance(t, ast.Attribute) and _call_name(t.value) == "self"}
    if any(isinstance(n, ast.Call) and _call_name(n) in {f"self.{a}.append" for a in lists} and n.args
           and re.match(r"(?:torch\.)?nn\.", _call_name(n.args[0])) for n in ast.walk(tree)):
        found.append("plain_list_layers")
    loads = [n.lineno for n in ast.walk(tree) if isinstance(n, ast.Call) and _call_name(n).endswith("load_state_dict")]
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call)]
    built = _modules_built_and_called(tree, calls) | _models_loaded(tree)
    # (a metric's move is not the model's: `Accuracy().to(device)`, `acc.to(device)`)
    metrics, imported = _metric_names(tree), _imported_from_torchmetrics(tree)
    moves = [n.lineno for n in calls if (_placed_at_load(n) or _moves_a_module(n, built))
             and not (isinstance(n.func, ast.Attribute) and (_is_metric(n.func.value, imported) or (
                 isinstance(n.func.value, ast.Name) and n.func.value.id in metrics)))]
    # a draw given its generator and its device at once (`torch.randn(s, generator=g, device=d)`): no default device
    if any({"generator", "device"} <= {k.arg for k in n.keywords} for n in calls):
        found.append("draw_device_given")
    if any(_lengths_given_as_list(tree, n) for n in calls if _call_name(n).endswith("pack_padded_sequence")):
        found.append("lengths_list")
    # its lengths taken to the CPU in the call (`lengths.cpu()`, `batch["lengths"].detach().cpu()`, `.to("cpu")`)
    if any(re.search(r"\.cpu\(\)$|\.to\((?:device=)?(?:torch\.device\()?['\"]cpu['\"]", ast.unparse(lengths))
           for n in calls if _call_name(n).endswith("pack_padded_sequence")
           for lengths in [*n.args[1:2], *(k.value for k in n.keywords if k.arg == "lengths")]):
        found.append("lengths_cpu")
    found += _metric_signals(tree)
    if _device_picked_in_forward(tree):
        found.append("device_picked")
    if _accumulates_on_the_cpu(tree):
        found.append("cpu_accumulator")
    if _device_scalar_beside_a_cpu_tensor(tree):
        found.append("device_scalar_operand")
    if moves:
        found.append("model_moved")
    modules = _bound_to_a_module(tree)
    if any(_move_discarded(n, modules) for n in ast.walk(tree)):
        found.append("move_discarded")
    assigns = sorted((n for n in ast.walk(tree) if isinstance(n, ast.Assign)), key=lambda n: n.lineno)
    events = _bindings(assigns, calls, built)
    if _called_on_device(tree, calls, assigns, events, built):
        found.append("called_on_device")
    if _run_on_a_cpu_input(calls, built, assigns, events):
        found.append("cpu_input")
    if loads and moves and min(loads) < min(moves):
        found.append("load_before_move")
    # inputs moved to the device (or made there) and a model in the code (one called, built or loaded) that never is
    # (not what a forward makes or moves: the model's own tensors, no input a script prepared)
    in_forward = {id(n) for fn in ast.walk(tree) if isinstance(fn, ast.FunctionDef) and fn.name == "forward"
                  for n in ast.walk(fn)}
    prepared = [n for n in calls if id(n) not in in_forward]
    on_device = any(_call_name(n).split(".")[-1] in ("to", "cuda") and _to_a_device(n) for n in prepared) or any(
        _call_name(n).split(".")[-1] in FACTORIES and any(k.arg == "device" and _to_a_device(n) for k in n.keywords)
        for n in prepared)
    unmoved = built - metrics  # (a metric never moved is its own lesson, not the model's)
    if not moves and on_device and (unmoved or any(_is_a_model(n) for n in calls)):
        found.append("model_never_moved")
    if _batch_moved(tree):
        found.append("batch_moved")
    # a loss of one's own (a class named as losses are: not a model that holds one, `ModelWithLoss`) keeping a tensor
    # made without device= as a plain attribute in its __init__
    if any(isinstance(c, ast.ClassDef) and re.fullmatch(LOSS_CLASS, c.name) and any(
            isinstance(f, ast.FunctionDef) and f.name == "__init__" and any(
                "plain_tensor_attr" in _attribute_signals(n) and not _given_a_device(n) for n in ast.walk(f))
            for f in c.body) for c in ast.walk(tree)):
        found.append("loss_attr")
    # a tensor put in each of an optimizer's param groups: `for g in optimizer.param_groups: g["d"] = torch.tensor(..)`
    if any(isinstance(loop, ast.For) and isinstance(loop.target, ast.Name)
           and ast.unparse(loop.iter).endswith("param_groups") and any(
               isinstance(n, ast.Assign) and any(isinstance(t, ast.Subscript) and isinstance(t.value, ast.Name)
                                                 and t.value.id == loop.target.id for t in n.targets)
               and _made_on_the_cpu(n.value) for n in ast.walk(loop))
           for loop in ast.walk(tree)):
        found.append("group_tensor")
    return found


LOSS_CLASS = r"(?!\w*(?:Model|Net|With))\w*(?:Loss|Criterion)"  # a loss's class, not a model's that holds one


# a device named in the code, not taken from a tensor: "cuda", "cuda:1", torch.device("mps"), `"cuda" if
# torch.cuda.is_available() else "cpu"`, the accelerator this host has (torch.accelerator.current_accelerator())
PICKED_DEVICE = (r"""^(?:['"](?:cuda|mps|xpu)(?::\d+)?['"]|torch\.device\(\s*['"](?:cuda|mps|xpu)[^)]*\)"""
                 r"|.*\bis_available\(\).*|.*\bcurrent_accelerator\(.*)$")
# a legacy typed constructor of a device's (`torch.cuda.FloatTensor(...)`): made on that device whatever the input
DEVICE_TYPED = r"torch\.cuda\.\w*Tensor"


def _device_picked_in_forward(tree: ast.AST) -> bool:
    """A forward that puts what it makes on a device it names itself, not its input's: `.cuda()` (no device given,
    or a number), `.to("cuda")`, `device="cuda:0"`, `torch.cuda.FloatTensor(...)`, or a device picked by
    availability (`torch.device("cuda" if torch.cuda.is_available() else "cpu")`) in the forward itself, or bound
    at the top of the file to a name the forward reads and nothing else in the code moves a model or an input to
    (a script that moves its model there too runs its forward on that device). A run on another device than the
    pick (the CPU on a GPU host, a second GPU) mixes the two."""
    forwards = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == "forward"]
    in_forward = {id(n) for fn in forwards for n in ast.walk(fn)}
    top = {t.id for n in getattr(tree, "body", []) if isinstance(n, ast.Assign)
           and re.fullmatch(PICKED_DEVICE, ast.unparse(n.value), re.S) for t in n.targets if isinstance(t, ast.Name)}
    # a module's own attribute set to such a pick (`self.device = torch.device("cuda" if ... else "cpu")`)
    kept = {ast.unparse(t) for n in ast.walk(tree) if isinstance(n, ast.Assign)
            and re.fullmatch(PICKED_DEVICE, ast.unparse(n.value), re.S) for t in n.targets
            if isinstance(t, ast.Attribute) and _call_name(t.value) == "self"}
    # a pick the script also moves its model or inputs to (`model.to(device)`): the forward's device is theirs
    followed = {a.id for n in ast.walk(tree) if isinstance(n, ast.Call) and id(n) not in in_forward
                and _call_name(n).split(".")[-1] in ("to", "cuda") for a in n.args if isinstance(a, ast.Name)}
    followed |= {k.value.id for n in ast.walk(tree) if isinstance(n, ast.Call) and id(n) not in in_forward
                 for k in n.keywords if k.arg == "device" and isinstance(k.value, ast.Name)}
    for fn in forwards:
        local = {a.arg for a in [*fn.args.posonlyargs, *fn.args.args, *fn.args.kwonlyargs]} | {
            n.id for n in ast.walk(fn) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
        picks = {t.id for n in ast.walk(fn) if isinstance(n, ast.Assign)
                 and re.fullmatch(PICKED_DEVICE, ast.unparse(n.value), re.S) for t in n.targets
                 if isinstance(t, ast.Name)} | ((top - followed) - local)

        for node in ast.walk(fn):
            if not isinstance(node, ast.Call):
                continue
            name = _call_name(node)
            if (name.endswith(".cuda") and all(isinstance(a, ast.Constant) for a in node.args)) \
                    or re.fullmatch(DEVICE_TYPED, name) \
                    or (name.endswith(".type") and any(re.fullmatch(DEVICE_TYPED, ast.unparse(a)) for a in node.args)):
                return True
            given = [node.args[0]] if name.endswith(".to") and node.args else []
            given += [k.value for k in node.keywords if k.arg == "device"]
            if any((isinstance(g, ast.Name) and g.id in picks) or ast.unparse(g) in kept
                   or re.fullmatch(PICKED_DEVICE, ast.unparse(g), re.S) for g in given):
                return True
    return False


def _is_metric(node: ast.AST, imported: set[str]) -> bool:
    """A call that builds a torchmetrics metric: a class (capitalized) reached through a name imported from
    torchmetrics (`F1Score(...)`, `torchmetrics.MeanSquaredError()`, `classification.BinaryAccuracy()`); not one of
    its functions (`torchmetrics.functional.accuracy(...)`)."""
    parts = _call_name(node).split(".") if isinstance(node, ast.Call) else []
    return bool(parts) and parts[0] in imported and parts[-1][:1].isupper()


def _imported_from_torchmetrics(tree: ast.AST) -> set[str]:
    """The names the code imports from torchmetrics (`import torchmetrics as tm`, `from torchmetrics import F1`)."""
    names = set()
    for n in ast.walk(tree):
        if isinstance(n, (ast.Import, ast.ImportFrom)):
            for alias in n.names:
                source = (n.module or "") if isinstance(n, ast.ImportFrom) else alias.name
                if source.split(".")[0] == "torchmetrics":
                    names.add(alias.asname or alias.name.split(".")[0])
    return names


def _metric_names(tree: ast.AST) -> set[str]:
    """Names bound to a torchmetrics metric built in the code (`acc = Accuracy(task="binary")`, `acc: Accuracy =
    ...`)."""
    imported = _imported_from_torchmetrics(tree)
    return {t.id for n in ast.walk(tree) if isinstance(n, (ast.Assign, ast.AnnAssign)) and n.value is not None
            and _is_metric(n.value, imported)
            for t in (n.targets if isinstance(n, ast.Assign) else [n.target]) if isinstance(t, ast.Name)}


METRIC_USES = ("update", "compute", "forward", "reset", "to", "cuda")  # what a metric used on its own is asked


def _used_on_its_own(tree: ast.AST, name: str) -> bool:
    """Every read of the name runs the metric or asks it (`acc(p, y)`, `acc.update(...)`, `acc.to(device)`): it is
    not handed on, to an attribute (`self.acc = acc`, `acc.clone()`) or a module (`Model(metric=acc)`), which a
    move of that owner moves."""
    calls = {id(n.func) for n in ast.walk(tree) if isinstance(n, ast.Call)}
    asked = {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Attribute) and n.attr in METRIC_USES}
    reads = [n for n in ast.walk(tree) if isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Load)]
    return all(id(n) in calls or id(n) in asked for n in reads)


def _metric_signals(tree: ast.AST) -> list[str]:
    """A torchmetrics metric built by the code and never moved: run as it is built (`F1(...)(preds, y)`, in a step),
    or bound to a name no `.to(device)` or `.cuda()` is called on; or one that is moved (`Accuracy().to(device)`, or
    its name's `.to(device)`). A metric kept as an attribute (`self.acc = Accuracy()`, a child of the module that is
    moved) says neither."""
    imported = _imported_from_torchmetrics(tree)
    if not imported:
        return []
    moves = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
             and n.func.attr in ("to", "cuda") and _to_a_device(n)]
    moved_names = {n.func.value.id for n in moves if isinstance(n.func, ast.Attribute)
                   and isinstance(n.func.value, ast.Name)}
    found = ["metric_moved" for n in moves if isinstance(n.func, ast.Attribute) and _is_metric(n.func.value, imported)]
    found += ["metric_never_moved" for n in ast.walk(tree) if isinstance(n, ast.Call) and _is_metric(n.func, imported)]
    found += ["metric_moved" if name in moved_names else "metric_never_moved" for name in _metric_names(tree)
              if _used_on_its_own(tree, name)]
    return found


def _batch_moved(tree: ast.AST) -> bool:
    """Every loop over a loader moves its batch whole: each tensor it binds (not enumerate's count, not `_`) is first
    rebound to its move, by a statement of the loop's own (`x, y = x.to(device), y.to(device)`) and never rebound to
    anything else after, or moved wherever the loop reads it (`loss_fn(model(x.cuda()), y.cuda())`). A batch bound
    whole (`for batch in loader`) moved by a dict or a helper is not read here; nor is a move under a branch."""
    loops = [n for n in ast.walk(tree) if isinstance(n, ast.For)  # read as the text's batch_loop reads one
             and re.search(SIGNALS["batch_loop"], f"for {ast.unparse(n.target)} in {ast.unparse(n.iter)}")]
    return bool(loops) and all(_loop_moves_its_batch(loop) for loop in loops)


def _loop_moves_its_batch(loop: ast.For) -> bool:
    target = loop.target
    counted = any(isinstance(n, ast.Call) and _call_name(n) == "enumerate" for n in ast.walk(loop.iter))
    if counted and isinstance(target, (ast.Tuple, ast.List)) and len(target.elts) == 2:
        target = target.elts[1]  # (i, batch): i counts
    names = {n.id for n in ast.walk(target) if isinstance(n, ast.Name) and n.id != "_"}
    return bool(names) and all(_rebound_to_its_move(loop.body, name) or _read_moved(loop.body, name)
                               for name in names)


def _given_a_device(node: ast.AST) -> bool:
    """An assignment whose value is a call given device= (`torch.tensor(w, device=device)`)."""
    return isinstance(node, ast.Assign) and isinstance(node.value, ast.Call) \
        and any(k.arg == "device" for k in node.value.keywords)


def _is_move_of(node: ast.AST, name: str) -> bool:
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in ("to", "cuda") \
        and isinstance(node.func.value, ast.Name) and node.func.value.id == name and _to_a_device(node)


def _stores(node: ast.AST, name: str) -> list[ast.Name]:
    return [n for n in ast.walk(node) if isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Store)]


def _rebound_to_its_move(body: list[ast.stmt], name: str) -> bool:
    """The loop's own statement rebinds the name to its move before anything reads it, and nothing rebinds it after."""
    for i, statement in enumerate(body):
        if isinstance(statement, ast.Assign) and len(statement.targets) == 1:
            target, value = statement.targets[0], statement.value
            pairs = list(zip(target.elts, value.elts)) if isinstance(target, (ast.Tuple, ast.List)) \
                and isinstance(value, (ast.Tuple, ast.List)) and len(target.elts) == len(value.elts) \
                else [(target, value)]
            if any(isinstance(t, ast.Name) and t.id == name and _is_move_of(v, name) for t, v in pairs):
                return not any(_stores(later, name) for later in body[i + 1:])
        if any(isinstance(n, ast.Name) and n.id == name for n in ast.walk(statement)):
            return False  # read (or rebound) before its move
    return False


def _read_moved(body: list[ast.stmt], name: str) -> bool:
    """Each read of the name in the loop is the receiver of its move, and nothing rebinds it."""
    module = ast.Module(body=body, type_ignores=[])
    reads = [n for n in ast.walk(module) if isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Load)]
    moved = {id(n.func.value) for n in ast.walk(module)
             if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and _is_move_of(n, name)}
    return bool(reads) and all(id(n) in moved for n in reads) and not _stores(module, name)


# the names inputs go by (`x`, `inputs`, `img`, `labels`): tensors, not modules
# (not `batch` or `data`: a tokenizer's BatchEncoding and a PyG Data move in place; not a prefix: `target_net`)
DATA_NAME = r"(?:x|inputs?|images?|imgs?|labels?|targets?|input_ids|masks?)(?:_?\d+)?"
# a move to a device: not a cast (`.to(torch.float16)`, `.to(dtype)`), not the CPU, not `.to()`
MOVED = r"(?:cuda\(|to\((?!\s*(?:torch\.(?:float|half|bfloat|double|int|long|bool)|\w*dtype\b|['\"]cpu|\))))"


def _move_discarded(node: ast.AST, modules: set[str]) -> bool:
    """`img.to(device)` on a line of its own: Tensor.to returns the moved tensor and leaves the one it was called on
    where it was (only a module's .to moves in place), so an input whose move is not assigned stays on the CPU."""
    if not (isinstance(node, ast.Expr) and isinstance(node.value, ast.Call)
            and isinstance(node.value.func, ast.Attribute) and isinstance(node.value.func.value, ast.Name)):
        return False
    call, method, receiver = node.value, node.value.func.attr, node.value.func.value.id
    return method in ("to", "cuda") and re.fullmatch(DATA_NAME, receiver) is not None and receiver not in modules \
        and _to_a_device(call)


def _bound_to_a_module(tree: ast.AST) -> set[str]:
    """Names bound to a module built or loaded (`x = nn.Linear(4, 2)`, `img = Encoder()`, `m = from_pretrained(...)`):
    their `.to` moves them in place."""
    return {t.id for n in ast.walk(tree) if isinstance(n, ast.Assign) and isinstance(n.value, ast.Call)
            and (_call_name(n.value).split(".")[-1][:1].isupper() or _loads_a_model(_call_name(n.value)))
            and not _call_name(n.value).startswith(("torch.", "np.")) for t in n.targets if isinstance(t, ast.Name)}


def _models_loaded(tree: ast.AST) -> set[str]:
    """Names bound to a loaded model (`pipe = DiffusionPipeline.from_pretrained(...)`, `m = torch.hub.load(...)`):
    `pipe.to("cuda")` moves a model, not an input."""
    return {t.id for n in ast.walk(tree) if isinstance(n, ast.Assign) and isinstance(n.value, ast.Call)
            and _loads_a_model(_call_name(n.value)) for t in n.targets if isinstance(t, ast.Name)}


def _lengths_given_as_list(tree: ast.AST, call: ast.Call) -> bool:
    """pack_padded_sequence's lengths (its second argument) given as a list: written as one, or a name every
    assignment of the code binds to one (`lens = [len(s) for s in seqs]`)."""
    def a_list(node: ast.AST) -> bool:
        return isinstance(node, (ast.List, ast.ListComp)) or (
            isinstance(node, ast.Call) and (_call_name(node) == "list" or _call_name(node).endswith(".tolist")))

    given = call.args[1] if len(call.args) > 1 else next((k.value for k in call.keywords if k.arg == "lengths"), None)
    if not isinstance(given, ast.Name):
        return given is not None and a_list(given)
    bound = [n.value for n in ast.walk(tree) if isinstance(n, ast.Assign)
             and any(isinstance(t, ast.Name) and t.id == given.id for t in n.targets)]
    return bool(bound) and all(a_list(value) for value in bound)


def _modules_built_and_called(tree: ast.AST, calls: list[ast.Call]) -> set[str]:
    """Names bound to an instance of a class (`effect = PitchShift(...)`, `m = CubicBSplineGrid3d(...)`) that the
    code then calls (`effect(waveform)`): a module, whatever its name. Not torch's factories nor numpy's. And an
    exported program's module, `a = exported.module()`."""
    augmenting = {a.asname or a.name for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom))
                  for a in n.names if "augment" in f"{getattr(n, 'module', '') or ''}.{a.name}"}
    bound = {t.id for n in ast.walk(tree) if isinstance(n, ast.Assign) and isinstance(n.value, ast.Call)
             for t in n.targets if isinstance(t, ast.Name)
             and (name := _call_name(n.value)).split(".")[-1][:1].isupper()
             and not name.startswith(("torch.", "np.", "numpy.", "t.")) and name.split(".")[-1] not in FACTORIES
             and not _an_augmentation(name, augmenting)}
    # an exported program's module (`a = exported.module()`) is a module whatever the code does with it
    exported = {t.id for n in ast.walk(tree) if isinstance(n, ast.Assign) and isinstance(n.value, ast.Call)
                and _call_name(n.value).endswith(".module") for t in n.targets if isinstance(t, ast.Name)}
    return {n.func.id for n in calls if isinstance(n.func, ast.Name) and n.func.id in bound} | exported


def _an_augmentation(name: str, augmenting: set[str]) -> bool:
    """A data augmentation (`RandomSolarize(0.5)`, `K.augmentation.ColorJitter()`, a class imported from kornia's or
    audiomentations' augmentations). Left unmoved, it names no lesson alone: one that keeps a table as a buffer moves
    it with `.to`, but most draw their parameters as they run, on the CPU, whether or not they were moved."""
    parts = name.split(".")
    return re.fullmatch(r"Rand(?:om)?[A-Z]\w*", parts[-1]) is not None or parts[0] in augmenting \
        or any("augment" in part for part in parts[:-1])


# the calls that run a model on its inputs: `model(x)`, `model.forward(x)`, `model.generate(x)`
MODEL_RUNS = ("forward", "generate", "predict", "infer", "sample", "__call__")


def _called_on_device(tree: ast.AST, calls: list[ast.Call], assigns: list[ast.Assign],
                      events: list[tuple[Position, str, bool]], built: set[str]) -> bool:
    """The moved model run only on inputs on the device (`m = Net().cuda()`, then `m(x.cuda(), 1.3)`; an input made
    with device= or moved before): both are there, so the CPU tensor is one the model makes or keeps out of `.to`'s
    reach. Every run counts, in the order of the lines: one before the move, after the model is rebound unmoved, on
    an input left as it is (`model(x)`, `mask=mask`, `**batch`), or in a loop (whose batch has more than the model's
    inputs: the labels) is the batch's case again; a run of a module built and never moved (`head(feats)`), its
    weights'."""
    models = {name for _, name, moved in events if moved}
    moves = _in_order(events)
    placed: set[str] = set()  # names bound to a tensor on the device
    for n in assigns:
        if _on_device(n.value, placed):
            placed |= {t.id for t in n.targets if isinstance(t, ast.Name)}
    looped = {id(c) for loop in ast.walk(tree) if isinstance(loop, (ast.For, ast.While)) for c in ast.walk(loop)}
    runs = 0
    for call in calls:
        if isinstance(call.func, ast.Call) and _moves_a_model(call.func):
            moved = True  # built, moved and run at once: `Net().to(device)(x)`
        else:
            name = _run_model_name(call)
            if name not in models:
                if name in built:
                    return False  # a module built and never moved, run (`head(feats)`): its weights on the CPU
                continue
            moved = bool(_moved_by(moves, name, _at(call)))
        runs += 1
        if not moved or id(call) in looped or not _inputs_on_device(call, placed):
            return False
    return runs > 0


MODEL_NAME = r"(?i)\w*(?:model|net|encoder|decoder|classifier|module)\w*"  # a name that says it holds a model
Position = tuple[int, int]  # a node's line and column: on one line, `m = load(...); out = m(x)` binds before it runs


def _own_nodes(scope: ast.AST) -> Iterator[ast.AST]:
    """A scope's nodes (a module's, a function's), not those of a function or class defined inside it."""
    for child in ast.iter_child_nodes(scope):
        if not isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            yield child
            yield from _own_nodes(child)


def _scopes(tree: ast.AST) -> list[ast.AST]:
    """The module and each function in it: where names are bound."""
    return [tree] + [fn for fn in ast.walk(tree) if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef))]


INPLACE_UPDATES = ("add_", "sub_", "mul_", "div_")


def _accumulates_on_the_cpu(tree: ast.AST) -> bool:
    """A running total: a name bound to a tensor made on the CPU (`total = torch.zeros(())`) and updated in place
    with another tensor (`total += loss.detach()`, `total.add_(loss)`), in a loop of one function (not a forward,
    where a tensor made without device= is the factory's lesson; not a helper's one-off update) or in lines pasted at
    the top level. Not updated with a number (`counts += 1`, `x /= 255.0`, `total += loss.item()`), nor with itself
    (`w /= w.sum()`)."""
    def another_tensor(value: ast.expr, name: str) -> bool:  # (a number read out of a tensor is no tensor)
        if any(isinstance(n, ast.Call) and (_call_name(n) in ("float", "int")
                                            or _call_name(n).endswith((".item", ".tolist"))) for n in ast.walk(value)):
            return False
        return any(isinstance(n, ast.Name) and n.id != name for n in ast.walk(value))

    for scope in _scopes(tree):
        if getattr(scope, "name", "") == "forward":
            continue
        nodes = list(_own_nodes(scope))
        looped = {n for loop in nodes if isinstance(loop, (ast.For, ast.While)) for n in _own_nodes(loop)}
        made = {t.id for n in nodes if isinstance(n, ast.Assign) and _made_on_the_cpu(n.value)
                for t in n.targets if isinstance(t, ast.Name)}
        if any(isinstance(n, ast.AugAssign) and isinstance(n.target, ast.Name) and n.target.id in made
               and (scope is tree or n in looped)
               and isinstance(n.op, (ast.Add, ast.Sub, ast.Mult, ast.Div)) and another_tensor(n.value, n.target.id)
               for n in nodes):
            return True
        # the same update by its method (`total.add_(loss)`, `hist.mul_(w)`)
        if any(isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr in INPLACE_UPDATES
               and isinstance(n.func.value, ast.Name) and n.func.value.id in made and (scope is tree or n in looped)
               and any(another_tensor(arg, n.func.value.id) for arg in n.args[:1]) for n in nodes):
            return True
    return False


def _device_scalar_beside_a_cpu_tensor(tree: ast.AST) -> bool:
    """An arithmetic op or comparison of a 0-dim tensor on the device (`torch.tensor(2.).cuda()`, `torch.ones((),
    device="cuda")`) and a tensor of one or more dimensions made on the CPU (`torch.randn(3, 3)`), written in the op
    or bound to the names it reads: CUDA takes a 0-dim CPU tensor as a scalar, never a 0-dim device tensor."""
    def dims(call: ast.Call) -> str | None:  # "zero", "some" (one or more), or None where the call does not show
        name = _call_name(call).split(".")[-1]
        shape = call.args[0] if call.args else next((k.value for k in call.keywords if k.arg == "size"), None)
        if name in ("tensor", "as_tensor", "scalar_tensor"):
            return "zero" if isinstance(shape, (ast.Constant, ast.UnaryOp)) else \
                "some" if isinstance(shape, (ast.List, ast.Tuple)) and name != "scalar_tensor" else None
        if name in ("zeros", "ones", "empty", "full", "rand", "randn"):
            if isinstance(shape, (ast.Tuple, ast.List)):
                return "some" if shape.elts else "zero"
            if name == "full":  # (its second argument is the value)
                return "some" if isinstance(shape, ast.Constant) else None
            return "some" if isinstance(shape, ast.Constant) or len(call.args) > 1 else None
        return "some" if name in ("arange", "linspace", "eye", "randperm") else None

    def kind(node: ast.AST, bound: dict[str, str]) -> str | None:
        if isinstance(node, ast.Name):
            return bound.get(node.id)
        if not isinstance(node, ast.Call):
            return None
        moved = isinstance(node.func, ast.Attribute) and node.func.attr in ("cuda", "to") and _to_a_device(node)
        made = node.func.value if moved and isinstance(node.func, ast.Attribute) else node
        if moved and isinstance(made, ast.Name):  # a name bound to a 0-dim CPU tensor, moved in the op
            return "device_scalar" if bound.get(made.id) == "cpu_scalar" else None
        if not (isinstance(made, ast.Call) and _call_name(made).startswith("torch.")
                and _call_name(made).split(".")[-1] in FACTORIES):
            return None
        on_device = moved or any(k.arg == "device" and _names_a_device(k.value) for k in made.keywords)
        shown = dims(made)
        if shown == "zero":
            return "device_scalar" if on_device else "cpu_scalar"
        return "cpu_tensor" if shown == "some" and not on_device else None

    for scope in _scopes(tree):  # each function's names its own (its parameters unknown), read in the order it runs
        bound: dict[str, str] = {}
        nodes = [n for n in _own_nodes(scope) if isinstance(n, (ast.Assign, ast.BinOp, ast.Compare))]
        # an assignment binds after its value ran: at its end; an op is read where it starts
        for node in sorted(nodes, key=lambda n: (n.end_lineno or n.lineno, n.end_col_offset or 0)
                           if isinstance(n, ast.Assign) else (n.lineno, n.col_offset)):
            if isinstance(node, ast.Assign):
                found = kind(node.value, bound)
                for target in node.targets:
                    if isinstance(target, ast.Name):
                        bound.pop(target.id, None)
                        if found:
                            bound[target.id] = found
                continue
            operands = [node.left, node.right] if isinstance(node, ast.BinOp) else [node.left, *node.comparators]
            if {"device_scalar", "cpu_tensor"} <= {kind(operand, bound) for operand in operands}:
                return True
    return False


def _made_on_the_cpu(node: ast.AST) -> bool:
    """A tensor made by torch's factory without device= (`torch.LongTensor(ids)`, `torch.from_numpy(a)`): on the CPU.
    Not a legacy CUDA constructor's (`torch.cuda.FloatTensor(n)`): on the current GPU."""
    return isinstance(node, ast.Call) and _call_name(node).startswith("torch.") \
        and not _call_name(node).startswith("torch.cuda.") \
        and _call_name(node).split(".")[-1] in FACTORIES - {"as_tensor"} and not any(k.arg == "device"
                                                                                        for k in node.keywords)


def _at(node: ast.expr | ast.stmt) -> Position:
    return node.lineno, node.col_offset


MOVES = ("to", "cuda", "to_empty")  # a module's methods that put it on a device (to_empty: without its values)


def _moves_a_module(call: ast.Call, built: set[str]) -> bool:
    """A model's move (`model.to(device)`), or the move of a name the code built from a class and runs
    (`enc = TabNetEncoder(...)`, `enc = enc.to(device)`, `enc(x)`): a module, whatever its name."""
    return _moves_a_model(call) or (_call_name(call).split(".")[-1] in MOVES
                                    and _call_name(call).split(".")[0] in built and _to_a_device(call))


def _binding_moved(value: ast.expr, built: set[str]) -> bool | None:
    """What a binding says of the model it binds: moved (`Net().to(device)`, a load placed on a device), not moved (a
    class built, a model loaded as it is), or nothing (a helper's return, `torch.compile(model)`, `DDP(model)`)."""
    if not isinstance(value, ast.Call):
        return None
    if _moves_a_module(value, built) or _placed_at_load(value):
        return True
    name = _call_name(value)
    wraps = any(isinstance(arg, ast.Name) and re.fullmatch(MODEL_NAME, arg.id) for arg in value.args[:1])
    if (name.split(".")[-1][:1].isupper() and not wraps) or _loads_a_model(name):
        return False
    return None


def _bindings(assigns: list[ast.Assign], calls: list[ast.Call],
              built: set[str]) -> list[tuple[Position, str, bool]]:
    """(where, name, moved or not): each binding of a name that says whether it holds a moved model, and each
    statement that moves a model by its name."""
    events = [(_at(n), t.id, moved) for n in assigns for t in n.targets if isinstance(t, ast.Name)
              if (moved := _binding_moved(n.value, built)) is not None]
    return events + [(_at(c), c.func.value.id, True) for c in calls if _moves_a_module(c, built)
                     and isinstance(c.func, ast.Attribute) and isinstance(c.func.value, ast.Name)]


def _in_order(entries: Iterable[tuple[Position, str, T]]) -> dict[str, tuple[list[Position], list[T]]]:
    """Each name's entries (a binding's move, a value) in the order of the code, for a bisection by position."""
    ordered: dict[str, tuple[list[Position], list[T]]] = {}
    for at, name, entry in sorted(entries, key=lambda item: item[0]):
        ordered.setdefault(name, ([], []))[0].append(at)
        ordered[name][1].append(entry)
    return ordered


def _moved_by(moves: dict[str, tuple[list[Position], list[bool]]], name: str, at: Position) -> bool | None:
    """Whether the last binding or move of `name` before `at` left it moved (None: nothing before it says), found by
    bisection: a log that quotes thousands of lines is read in n log n, not n squared."""
    positions, moved = moves.get(name, ([], []))
    index = bisect.bisect_left(positions, at)
    return moved[index - 1] if index else None


def _run_on_a_cpu_input(calls: list[ast.Call], built: set[str], assigns: list[ast.Assign],
                        events: list[tuple[Position, str, bool]]) -> bool:
    """A model run on an input the code makes on the CPU and never moves (`ids = torch.LongTensor(ids)`, then
    `model(ids)`): the input is the tensor left behind, not one the model makes. Not a run of a model the code
    built or loaded and had not moved by then: that one runs on the CPU (a demonstration that the CPU works)."""
    moves = _in_order(events)
    values = _in_order((_at(n), t.id, n.value) for n in assigns for t in n.targets if isinstance(t, ast.Name))
    for call in calls:
        name = _run_model_name(call)
        if name is None or not (name in built or re.fullmatch(MODEL_NAME, name)):
            continue
        if _moved_by(moves, name, _at(call)) is False:
            continue
        for arg in [*call.args, *(k.value for k in call.keywords if k.arg is not None)]:
            if _made_on_the_cpu(arg):
                return True
            if isinstance(arg, ast.Name):  # the last binding of the name before the run
                positions, value = values.get(arg.id, ([], []))
                index = bisect.bisect_left(positions, _at(call))
                if index and _made_on_the_cpu(value[index - 1]):
                    return True
    return False


def _run_model_name(call: ast.Call) -> str | None:
    """The name of the model a call runs: `model(x)`, `model.forward(x)`, `model.generate(x)`."""
    if isinstance(call.func, ast.Name):
        return call.func.id
    if isinstance(call.func, ast.Attribute) and call.func.attr in MODEL_RUNS and isinstance(call.func.value, ast.Name):
        return call.func.value.id
    return None


def _inputs_on_device(call: ast.Call, placed: set[str]) -> bool:
    """Every input of the call is on the device (constants aside); `*args` and `**batch` are not known to be."""
    if any(isinstance(a, ast.Starred) for a in call.args) or any(k.arg is None for k in call.keywords):
        return False
    given = [a for a in [*call.args, *(k.value for k in call.keywords)] if not isinstance(a, ast.Constant)]
    return bool(given) and all(_on_device(a, placed) for a in given)


def _on_device(node: ast.AST, placed: set[str]) -> bool:
    """A tensor the code puts on an accelerator: moved there (`x.cuda()`, `x.to(device)`, not `x.to(dtype)`), made
    there (`torch.rand(3, device="mps")`), or a name bound to one of those."""
    if isinstance(node, ast.Name):
        return node.id in placed
    if not isinstance(node, ast.Call):
        return False
    last = _call_name(node).split(".")[-1]
    if last == "cuda":
        return True
    target = node.args[0] if last == "to" and node.args else next(
        (k.value for k in node.keywords if k.arg == "device"), None)
    return (last == "to" or last in FACTORIES) and target is not None and _names_a_device(target)


def _names_a_device(node: ast.AST) -> bool:
    """An expression that reads as an accelerator: 'cuda:1', 'mps', torch.device('cuda'), a name or attribute of a
    device (`device`, `dev`, `x.device`, `args.device`); not 'cpu', nor a dtype (`weight_dtype`)."""
    text = ast.unparse(node)
    if re.search(r"['\"]cpu", text):
        return False
    if isinstance(node, ast.Constant):
        return isinstance(node.value, str) and re.fullmatch(r"(?:cuda|mps|xpu|npu|hpu|xla)(?::\d+)?", node.value) \
            is not None
    return re.search(r"(?i)(?:^|[._])dev(?:ice)?(?:_\w+)?$|^torch\.device\(", text) is not None


def _to_a_device(call: ast.Call) -> bool:
    """`.cuda()`, `.to(device)`, `.to("cuda:1")`: a move to an accelerator, not to the CPU nor a cast
    (`.to(torch.float16)`, `.to(dtype=...)`)."""
    if _call_name(call).endswith(".cuda"):
        return True
    for arg in [*call.args, *(k.value for k in call.keywords if k.arg == "device")]:
        text = ast.unparse(arg)
        # (a dtype: torch.short, `x.dtype`, `torch.get_default_dtype()`; the CPU: "cpu", a name that says it)
        if re.fullmatch(r"torch\.(?:float|half|bfloat|double|int|long|short|char|bool|uint|complex|cfloat|cdouble)\w*"
                        r"|[\w.]*dtype(?:\(\))?", text) \
                or re.search(r"['\"]cpu['\"]|(?<![a-z])cpu(?![a-z])", text, re.I):
            return False
    return bool(call.args) or any(k.arg == "device" for k in call.keywords)


# a layer of torch.nn that has weights, built by a call (`nn.BatchNorm2d(64)`; not `nn.ReLU()`, `nn.functional.relu`)
LAYER = (r"(?:torch\.)?nn\.(?!(?:ReLU|ReLU6|LeakyReLU|GELU|SiLU|ELU|SELU|CELU|Sigmoid|Tanh|Softmax\w*|LogSoftmax"
         r"|Softplus|Softsign|Tanhshrink|Hard\w+|Mish|Threshold|Dropout\w*|Identity|Flatten|Unflatten|\w*Pool\w*|Upsample\w*"
         r"|\w*Pad\w*|Pixel\w*Shuffle|ChannelShuffle|Unfold|Fold|CosineSimilarity|PairwiseDistance|Sequential"
         r"|ModuleList|ModuleDict|\w*Loss)\b)[A-Z]\w*")
# a class named as modules are: a layer, a block, a head, a metric (torchmetrics' are modules with state)
MODULE_CLASS = (r"(?=[A-Z])\w*(?:Layer|Block|Net|Network|Module|Model|Head|Encoder|Decoder|Attention|Embedding|Conv\w*"
                r"|Linear|Norm|LSTM|GRU|RNN|Transformer|MLP|Metric|Accuracy|Precision|Recall|F1Score|AUROC|Loss)")
BUILDER = r"(?:new|build|get|create|make|load|init|setup)_\w*(?:model|net|network|module)"  # a function making a model


def _moves_a_model(call: ast.Call) -> bool:
    """`model.to(device)`, `self.to(device)` in a module's method, `Net(...).to(device)`: a model's move to an
    accelerator (a tensor's move, `x.to(device)`, `torch.Tensor(b).to(device)`, `model_inputs.to(device)`, is not;
    nor is `model.to(torch.float16)` or `model.to("cpu")`)."""
    if not isinstance(call.func, ast.Attribute) or call.func.attr not in MOVES or not _to_a_device(call):
        return False  # (not `model.train(True)`, `model.load_state_dict(sd)`)
    receiver = call.func.value
    if isinstance(receiver, ast.Call):  # built and moved at once: a class (capitalized) or a builder of a model
        name = _call_name(receiver)
        last = name.split(".")[-1]
        if re.fullmatch(r"(?:torch\.)?nn\.(?!Parameter$|Buffer$)[A-Z]\w*", name):
            return True  # a layer of torch.nn, or a Sequential of them, built and moved at once
        if name.endswith(".module"):
            return True  # an exported program's module: `ep.module().to(device)`
        if _loads_a_model(name) or re.search(r"(?:^|\.)models\.\w+$", name):
            return True  # AutoModel.from_pretrained(n), torch.hub.load(...), torchvision.models.resnet50()
        if re.fullmatch(BUILDER, last.lower()) and not name.startswith("torch."):
            return True  # new_model(), build_model(cfg), get_net(); not model(x), the model's output
        return last[:1].isupper() and not name.startswith(("torch.", "np.", "numpy.")) \
            and last not in FACTORIES | {"Variable", "Parameter"}
    name = _call_name(receiver).lower()
    return name == "self" or re.search(r"(?:^|[._])(?:model|net|network|module)$", name) is not None


def _loads_a_model(name: str) -> bool:
    """`AutoModel.from_pretrained`, `Model.load_from_checkpoint`, `torch.hub.load`: a call that returns a model."""
    return name.split(".")[-1] in ("from_pretrained", "load_from_checkpoint") or name.endswith("hub.load")


DEVICE_MAPS = ("auto", "balanced", "balanced_low_0", "sequential")  # accelerate's strategies: the model on the GPUs


def _placed_at_load(call: ast.Call) -> bool:
    """A model loaded onto the accelerator (`from_pretrained(name, device_map="cuda")`, `device_map="auto"`,
    `device=device`): the load places it, as a `.to` would."""
    return _loads_a_model(_call_name(call)) and any(
        k.arg in ("device_map", "device") and (_names_a_device(k.value) or (
            isinstance(k.value, ast.Constant) and k.value.value in DEVICE_MAPS)) for k in call.keywords)


def _is_a_model(call: ast.Call) -> bool:
    """`model(x)`, `net(x)`, a model loaded (`from_pretrained(...)`, `hub.load(...)`) or built (`build_model()`)."""
    name = _call_name(call)
    return re.search(r"(?:^|[._])(?:model|net|network|module)$", name.lower()) is not None \
        or _loads_a_model(name) or re.fullmatch(BUILDER, name.split(".")[-1].lower()) is not None


def _text_signals(code: str) -> list[str]:
    found = []
    forward = re.search(r"def forward\(.*?(?=\n\S|\n\s*def |\Z)", code, flags=re.S)
    if forward and (re.search(FACTORY_CALL, forward.group(0))
                    or re.search(r"(?<![\w.])" + LAYER + r"\(", forward.group(0))):
        found.append("factory_in_forward")
    if forward and re.search(r"""\.cuda\(|\bdevice\s*=\s*['"](?:cuda|mps|xpu)|\.to\(\s*['"](?:cuda|mps|xpu)|"""
                             + DEVICE_TYPED + r"\(", forward.group(0)):
        found.append("device_picked")
    if any(re.search(rf"self\.{name}\.append\(\s*(?:torch\.)?nn\.", code)
           for name in re.findall(r"self\.(\w+)\s*=\s*\[\s*\]", code)):
        found.append("plain_list_layers")
    # a factory chosen by name: `getattr(torch, window)(n)`, a name given as a string one of the factories
    by_name = r"getattr\(\s*torch\s*,\s*(?:\w+|['\"](?:" + "|".join(FACTORIES) + r")['\"])\s*\)"
    if re.search(r"self\.\w+\s*=\s*(?:torch\.(?:" + "|".join(FACTORIES) + r")|" + by_name + r")\(", code):
        found.append("plain_tensor_attr")
    if re.search(r"self\.\w+\s*=\s*[\[{][^\n]*nn\.", code):
        found.append("plain_list_layers")
    # a model's move as the ast rule reads it (_moves_a_model): `self`, a name ending in model/net/module or a class
    # built and moved at once, moved to something that is neither a dtype nor the CPU
    load = re.search(r"load_state_dict\(", code)
    move = re.search(r"(?:\bself|\b\w*(?:model|net|network|module)|\b" + BUILDER + r"\([^()\n]*\)"
                     r"|\b(?:torch\.)?nn\.(?!Parameter\b|Buffer\b)[A-Z]\w*\((?:[^()\n]|\([^()\n]*\))*\)"
                     r"|(?<![\w.])(?!Variable\b|Parameter\b|\w*Tensor\b)[A-Z]\w*\([^()\n]*\))"
                     r"\." + MOVED, code)
    if move is not None:
        found.append("model_moved")
    # as the ast rule reads it (_move_discarded): the whole statement on its line, not the end of a call begun above
    lines = code.splitlines()
    if any(re.fullmatch(r"[ \t`>]*" + DATA_NAME + r"\." + MOVED + r"(?:[^()\n]|\([^()\n]*\))*\)[ \t`;]*(?:#.*)?", line)
           and not (i and re.search(r"[,(\[{\\]\s*$", lines[i - 1])) for i, line in enumerate(lines)):
        found.append("move_discarded")
    if load and move is not None and load.start() < move.start():
        found.append("load_before_move")
    return found


# ---- 4. the scores -------------------------------------------------------------------------------

# frames that decide the mechanism on their own, where no scenario claims one: none applies. A frame inside
# torch.distributions decides only where the code shows the parameters made on the CPU: its op meets the parameters
# and the value alike (`value - self.loc`), and a value left on the CPU is a batch never moved
DECISIVE = {"torchscript": None, "distributions": "distribution_cpu"}
# the wordings of releases (0.x) whose CUDA kernels refused a 0-dim CPU tensor, which later ones read as a scalar
SCALARS_REFUSED = ("legacy_type", "invalid_combination", "th_expected_tensor")
# a Distribution has no .to(): its parameters stay where they were made (0-dim CPU ones pass as scalars since 1.x)
DECISIVE_NOTES = {"distributions": ": a Distribution keeps its parameters where they were made and has no .to(), so "
                                   "parameters made on the CPU meet a value on the device; build it from tensors on "
                                   "the device (`Normal(torch.zeros(3, device=d), torch.ones(3, device=d))`)"}
WEIGHTS = {"kind": 3.0, "pair": 1.0, "frame": 2.0, "argument": 3.0, "op": 1.5, "code": 2.5, "prior": 1.0, "lean": 1.0}
FOUND = WEIGHTS["kind"] + 2.0  # below it, only the message's kind fits: the scenarios are candidates


@dataclasses.dataclass(frozen=True)
class Match:
    slug: str
    score: float
    why: tuple[str, ...]
    confirm: str
    fix: str


@dataclasses.dataclass(frozen=True)
class Upstream:
    """A PyTorch bug a later release fixed, told by its message and, where one message has other causes too, by the
    call that raised it, a signal of the code, or the version the input shows."""

    kind: str
    template: str
    since: str  # the first release that had it
    fixed_in: str  # an input showing a release outside [since, fixed_in) is not it
    why: str
    side: str | None = None  # where the message must show this side on CPU
    same_kind: bool = False  # the two devices are one kind, one with an index and one without (cuda:0, cuda)
    # a function the input shows raising (_calls); where it shows none, the code's signal must show the call instead
    call: str | None = None
    code: str | None = None  # a signal the code must show
    needs: tuple[str, ...] = ()  # one of these code signals or frames: the case the bug needs (a load)
    unless: tuple[str, ...] = ()  # code signals or frames of another case of the same message
    shown: bool = False  # only where the input shows a release it had: without one, the message has a modern cause
    message: str | None = None  # a part of the message that marks the bug (a location tag)

    def fits(self, facts: Facts, calls: tuple[str, ...]) -> bool:
        seen, first, fixed = release(facts.torch_version), release(self.since), release(self.fixed_in)
        if seen is not None and first is not None and fixed is not None and not first <= seen < fixed:
            return False
        kinds = {d.split(":")[0] for d in facts.devices}
        index_only = len(facts.devices) == 2 and len(kinds) == 1 and sum(":" in d for d in facts.devices) == 1
        return (facts.template == self.template and self.side in (None, facts.side)
                and (not self.same_kind or index_only) and (not self.shown or seen is not None)
                and (self.call is None or any(re.fullmatch(self.call, c) for c in calls)
                     or (not calls and self.code is not None))
                and (self.code is None or self.code in facts.code)
                and (not self.needs or bool(set(self.needs) & set(facts.code + facts.frames)))
                and not set(self.unless) & set(facts.code + facts.frames)
                and (self.message is None or re.search(self.message, facts.message) is not None))


SAMPLER_NUMPY = ("PyTorch 2.1.0's RandomSampler turned its permutation into a NumPy array (pytorch/pytorch#103339): "
                 "a shuffling DataLoader whose permutation was drawn on the device (its generator there, under a "
                 "default device there) failed in NumPy. 2.1.1 reverted it (pytorch/pytorch#112187): upgrade")
SAMPLER_OR_YOURS = ("the code shuffles a DataLoader with a generator on the device: on PyTorch 2.1.0 its "
                    "RandomSampler handed the permutation to NumPy (fixed in 2.1.1: upgrade); on another release a "
                    "tensor of yours reached NumPy on the device (the scenario below). What tells them apart: the "
                    "release (python -c 'import torch; print(torch.__version__)'), or the traceback's last frame "
                    "(torch/utils/data/sampler.py is 2.1.0's bug)")
STEP_LEFT = ("from 1.12.1 to 2.0, Optimizer.load_state_dict left `step` where torch.load put it (the CPU, with "
             "map_location='cpu') for a fused or capturable optimizer too, whose kernel takes it on the parameter's "
             "device (pytorch/pytorch#103256); 2.1.0 moves it (pytorch/pytorch#102619). On those releases, move each "
             "state's `step` to its parameter's device after load_state_dict")
UPSTREAM = (
    # the wording is itself the version: 0.4 merged Variable and Tensor, and the parser stopped naming CUDA types
    Upstream("mismatch", "invalid_combination", "0.1.12", "0.4.0",
             "before 0.4, Optimizer.load_state_dict left the loaded state where torch.load put it; since 0.4 it casts "
             "each state tensor to its parameter's device (pytorch/pytorch#3658, issue #2830): a state updated in "
             "place on CPU with a CUDA gradient", side="state"),
    # PyTorch 0.4.0 had no CUDA randperm: under set_default_tensor_type('torch.cuda.FloatTensor') it refused
    Upstream("cpu_only", "cpu_only", "0.1.12", "0.4.1",
             "torch.randperm had no CUDA kernel before 0.4.1 (pytorch/pytorch#6874); 0.4.1 added one "
             "(pytorch/pytorch#7606). On an older release, make the permutation on the CPU and move it",
             call=r"randperm"),
    Upstream("capturable", "capturable_attribute", "1.12.0", "1.12.1",
             "PyTorch 1.12.0's Adam read an attribute that an optimizer restored by load_state_dict lacked "
             "(pytorch/pytorch#80831); 1.12.1 sets it (pytorch/pytorch#80345)"),
    Upstream("capturable", "capturable_false", "1.12.0", "1.12.1",
             "PyTorch 1.12.0's Optimizer.load_state_dict moved Adam's `step` onto the parameter's device, and "
             "the non-capturable step asserted it was not (pytorch/pytorch#80809); 1.12.1 keeps `step` on CPU"),
    Upstream("generator", "generator", "1.7.0", "1.9.0",
             "CUDA's randperm compared its generator's device with its result's exactly, so a generator made with "
             "device='cuda' (no index) was refused against cuda:0 (pytorch/pytorch#58545); 1.9.0 compares the device "
             "types (pytorch/pytorch#59352)", same_kind=True),
    Upstream("map_location", "device_not_callable", "0.4.0", "0.4.1",
             "PyTorch 0.4.0's torch.load took map_location as a string, a dict or a function, and called a "
             "torch.device as one (pytorch/pytorch#10622); 0.4.1 takes a torch.device (pytorch/pytorch#7339). On "
             "0.4.0, pass map_location='cpu' or str(device)"),
    # 1.12.1 kept every `step` on the CPU at load, the fused and capturable ones too; 2.1.0 moves theirs. Without a
    # version the same message is capturable_step's: a rescue loop that skips `step`
    Upstream("mismatch", "codegen", "1.12.1", "2.1.0", STEP_LEFT, call=r"_fused_\w+", shown=True),
    # a capturable optimizer's step on the CPU without a load is the user's own (params left on the CPU)
    Upstream("mismatch", "capturable_true", "1.12.1", "2.1.0", STEP_LEFT, shown=True,
             needs=("optimizer_load", "torch_load", "serialization")),
    # torch.load restores a location tag through the function registered for it (torch/serialization.py,
    # register_package): MPS came in 1.12 without one, then with one that took "mps" but not "mps:0"
    Upstream("deserialize", "unknown_location", "1.12.0", "1.13.0",
             "PyTorch 1.12 (and its nightlies) had no restore function for the `mps` location tag, so torch.load "
             "refused a checkpoint saved on MPS or mapped to it (pytorch/pytorch#77874, #78551); 1.13.0 has one. "
             "On 1.12, load with map_location='cpu' and move the model to mps", message=r"tagged with mps\)"),
    Upstream("deserialize", "unknown_location", "1.12.0", "2.1.0",
             "before 2.1, torch.load's restore function for MPS took the tag `mps` but not `mps:0`, which a tensor "
             "moved with .to('mps') is saved with (pytorch/pytorch#98834); 2.1.0 takes both. On an older release, "
             "load with map_location='cpu' and move the model to mps", message=r"tagged with mps:\d+\)"),
    # sparse_coo_tensor built its indices on the current device before 1.7 (#41984, merged July 2020, keeps each
    # input's device; #40648, which aimed at it, was closed unmerged); indices given as a list kept the bug for a few
    # releases after (#54075), which this entry leaves out
    Upstream("sparse", "sparse_devices", "1.0.0", "1.7.0",
             "before 1.7, torch.sparse_coo_tensor without device= made its indices on the current device, not "
             "their own (pytorch/pytorch#28500), so values on cuda:1 were refused with the indices there too; 1.7.0 "
             "keeps each input tensor on its own device (pytorch/pytorch#41984). On an older release, give the "
             "constructor its device (`device=values.device`)", shown=True),
    # CUDA's lerp read its weight as a device tensor; other ops take a 0-dim CPU tensor as a scalar
    Upstream("mismatch", "codegen", "1.1.0", "2.6.0",
             "CUDA's torch.lerp refused a 0-dim CPU tensor as its weight, which other ops take as a scalar "
             "(pytorch/pytorch#141811); 2.6.0 takes it (pytorch/pytorch#141820). On an older release, pass the "
             "weight as a float (`weight.item()`) or make it on the device", code="lerp_cpu_scalar",
             call=r"(?:[\w.]+\.)?lerp_?|\w*_lerp\w*"),
    # pack_padded_sequence made a tensor of a list of lengths with torch.as_tensor, on the default device; 2.1.0
    # makes it on the CPU (torch/nn/utils/rnn.py: `torch.as_tensor(lengths, dtype=torch.int64, device="cpu")`)
    Upstream("lengths", "lengths", "1.0.0", "2.1.0",
             "before 2.1, pack_padded_sequence made its tensor of a list of lengths on the default device, so under "
             "torch.set_default_device('cuda') (or set_default_tensor_type('torch.cuda.FloatTensor')) a list was "
             "refused (pytorch/pytorch#103964); 2.1.0 makes it on the CPU (pytorch/pytorch#103967). On an older "
             "release a CPU tensor was moved there too: call it inside `with torch.device('cpu'):` (2.0) or with "
             "the CPU set back as the default", code="lengths_list",
             call=r"(?:[\w.]+\.)?pack_padded_sequence", unless=("pack_sequence",)),
    # 2.1.0's RandomSampler handed its permutation to NumPy (torch/utils/data/sampler.py, pytorch/pytorch#103339):
    # drawn with a DataLoader's generator on a device, it was made there, and NumPy refused it
    Upstream("numpy", "numpy", "2.1.0", "2.1.1", SAMPLER_NUMPY, needs=("sampler_raised",)),
    Upstream("numpy", "numpy", "2.1.0", "2.1.1", SAMPLER_NUMPY, code="device_generator", needs=("shuffle",),
             shown=True),
    # torch.compile's fake tensors merged the devices of every op's inputs, and 2.0 refused copy_ (copy,
    # slice_scatter) between two, which eager allows: a copy moves the data (fake_tensor.py's handlers, 2.1.0)
    Upstream("mismatch", "fake_devices", "2.0.0", "2.1.0",
             "PyTorch 2.0's fake tensors (torch.compile's tracing) refused copy_, copy and slice_scatter between two "
             "devices, which eager allows since a copy moves the data (pytorch/pytorch#102677, #106172); 2.1.0 "
             "handles them. On 2.0, move the source first (`dst.copy_(src.to(dst.device))`)",
             message=r"aten\.(?:copy_?|slice_scatter)\b"),
    # 2.5 moved CTC loss to cuDNN v8's, which read the lengths on the device: CPU (int32) lengths failed inside cuDNN
    Upstream("cudnn", "cudnn_failed", "2.5.0", "2.8.0",
             "from 2.5, cuDNN's CTC loss (v8 API) read input_lengths and target_lengths as device tensors and failed "
             "on CPU ones (pytorch/pytorch#152421); 2.8.0 handles them (pytorch/pytorch#152745). On 2.5 to 2.7, pass "
             "int64 targets and lengths (the native CUDA kernel) or torch.backends.cudnn.flags(enabled=False)",
             call=r"(?:torch\.|F\.|(?:torch\.)?nn\.functional\.)?ctc_loss"),
)


@dataclasses.dataclass(frozen=True)
class Elsewhere:
    """A cause outside the catalog that gives a scenario's message word for word, with the one check that tells
    them apart, unless the input shows the scenario's case: said first and the scenario second where it is the
    likelier cause, said as a caveat of the scenario where the scenario is."""

    template: str
    scenarios: tuple[str, ...]  # what the same message teaches in their own case
    unless: tuple[str, ...]  # code signals (or frames) that show the scenario's case
    why: str
    devices: tuple[str, ...] = ()  # the device kinds whose message it is (none: any)
    first: bool = True  # the likelier cause: said first; or a caveat of the scenario


ELSEWHERE = (
    # CUDA's older words for its refusal in a forked child (a DataLoader worker) are also what a driver or a
    # container that would not start CUDA prints: said after the lesson, unless the input shows the workers
    Elsewhere("cuda_init", ("device_in_dataloader_worker",), ("dataloader_worker",),
              "in a process forked after its parent used CUDA (a DataLoader worker whose Dataset, transform or "
              "collate_fn moves tensors to the GPU) it is this lesson. Outside a fork it is the driver or the "
              "container, and no lesson of the catalog applies: nvidia-smi, and a driver that matches the CUDA build",
              first=False),
    # the message gives the CPU host's fix itself ("If you are running on a CPU-only machine, please use
    # map_location"); what it does not say is that a host with a GPU gets it too when PyTorch cannot see that GPU.
    # The CPU host is the likelier: of the 21 reports of this message (the 70 and the held out), 17 are labelled
    # with the lesson, 4 had a GPU that PyTorch could not see
    Elsewhere("deserialize", ("cuda_checkpoint_on_cpu_host",), ("cpu_host", "mps"),
              "a host without the accelerator is this lesson's case. If this host has one (a GPU machine, a worker "
              "meant to get one), PyTorch cannot see it, and no lesson of the catalog applies: python -c 'import "
              "torch; print(torch.version.cuda, torch.cuda.is_available())' prints None for a CPU-only PyTorch build "
              "(install the CUDA build), or a version and False for a driver PyTorch cannot use, CUDA_VISIBLE_DEVICES "
              "hiding the GPU, or a process started without it",
              devices=("cuda",), first=False),
    # an old torch.load restored a GPU checkpoint with .cuda(), which a CPU-only build refuses in these words; so
    # does every other .cuda() on that build
    Elsewhere("not_compiled", ("cuda_checkpoint_on_cpu_host",), ("torch_load", "serialization"),
              "this PyTorch is a CPU-only build and something asked it for CUDA (`.cuda()`, device='cuda'): on a "
              "host with a GPU, install the CUDA build (python -c 'import torch; print(torch.version.cuda)' prints "
              "None); on a CPU host, ask for the CPU. Raised while loading a checkpoint saved on a GPU, the scenario "
              "below is the lesson"),
    # a GPU that takes one process (exclusive-process compute mode) refuses the second: where several ranks run,
    # every rank touching GPU 0 is two lessons' case; elsewhere another process, the driver or a container is
    Elsewhere("devices_busy", ("ddp_rank_map_location", "index_less_device"),
              ("processes", "ddp", "collective", "rank_log"),
              "CUDA would not give this process the GPU: most often its compute mode is Exclusive_Process and "
              "another process holds it (`nvidia-smi --query-gpu=compute_mode --format=csv`; nvidia-smi lists the "
              "processes), or the driver or a container does not give it to PyTorch; no lesson of the catalog covers "
              "that. Where several processes (DDP ranks) share the node, every rank touching GPU 0 is the catalog's: a "
              "torch.load without map_location or an index-less 'cuda', below"),
)


@dataclasses.dataclass(frozen=True)
class Diagnosis:
    facts: Facts
    verdict: str  # scenario, ambiguous, not_device_error, fixed_upstream, not_in_catalog, unknown
    matches: tuple[Match, ...] = ()
    note: str = ""

    @property
    def found(self) -> bool:
        return self.verdict in ("scenario", "ambiguous")

    def to_json(self) -> dict[str, object]:
        return {"verdict": self.verdict, "note": self.note, "facts": {**dataclasses.asdict(self.facts),
                                                                      "pair": self.facts.pair},
                "scenarios": [dataclasses.asdict(m) for m in self.matches]}


def _notebook(text: str) -> tuple[str, str] | None:
    """A Jupyter notebook (its .ipynb JSON, or an output of it, as a file or pasted): the tracebacks of its error
    outputs as the paste, and its code cells as the code, in the order they ran (their execution counts). None when
    the text is no notebook. A cell not run (no count, in a notebook whose other cells show theirs) is left out."""
    if not text.lstrip().startswith(("{", "[")):
        return None
    try:
        data = json.loads(text)
    except (ValueError, RecursionError):  # no JSON, or brackets nested deeper than a notebook's
        return None
    errors: list[str] = []
    streams: list[str] = []  # what the cells printed: a traceback printed or logged, a script run with `!python`
    cells: list[tuple[int | None, str]] = []

    def lines(value: object, sep: str = "") -> str:  # nbformat keeps a string as a list of lines, or as one string
        return sep.join(v for v in value if isinstance(v, str)) if isinstance(value, list) \
            else value if isinstance(value, str) else ""

    def walk(node: object) -> None:
        if isinstance(node, list):
            for item in node:
                walk(item)
        elif isinstance(node, dict):
            if node.get("output_type") in ("error", "pyerr"):  # nbformat 4's, and 3's
                errors.append(lines(node.get("traceback"), "\n")
                              or f"{node.get('ename', 'Error')}: {node.get('evalue', '')}")
            if node.get("output_type") == "stream":
                streams.append(lines(node.get("text")))
            if node.get("cell_type") == "code":  # nbformat 4 keeps it in source, 3 in input
                count = node.get("execution_count", node.get("prompt_number"))
                cells.append((count if isinstance(count, int) else None,
                               _as_ipython_ran(lines(node.get("source", node.get("input"))))))
            for value in node.values():
                if isinstance(value, (list, dict)):
                    walk(value)

    try:
        walk(data)
    except RecursionError:
        return None
    if not errors and not streams and not cells:
        return None
    ran = sorted((count, source) for count, source in cells if count is not None)  # a cell never run ran nothing
    return "\n\n".join(errors or streams), "\n\n".join(source for _, source in ran or cells if source)


def _as_ipython_ran(cell: str) -> str:
    """A notebook's cell as the Python IPython ran: its prompts and magics as `_without_prompts` reads them, a cell
    magic's cell (`%%bash`) and a shell's or help's line (`files = !ls`, `model?`) left out, and nothing of a cell
    that does not parse (it raised SyntaxError and ran nothing)."""
    first = cell.lstrip().split("\n", 1)
    if first[0].startswith("%%"):
        if not re.match(r"%%(?:time|timeit|capture|prun)\b", first[0]):
            return ""  # another language's cell
        cell = first[1] if len(first) > 1 else ""
    cell = "\n".join(line for line in cell.splitlines() if not re.match(
        r"\s*(?:[\w, ]+=\s*[!%]|\?\??[\w.]|[\w.\[\]()]+\?\??\s*$)", line))
    cell = _without_prompts(cell)
    return cell if _parsed(cell) is not None else ""


# pytest's report of a failure: each entry's place (`path.py:12: in f` after its line, short; `path.py:12: ` or
# `path.py:12: RuntimeError` after the function's source, long; `path.py:12: RuntimeError: message`, --tb=line).
# (Each part a run of one kind of character, so no line is retried from each of its characters.)
PYTEST_PLACE = re.compile(r"(?P<path>(?:[A-Za-z]:)?[^\s:>][^:\n]*?\.py):(?P<line>\d+): ?(?:in (?P<func>[\w<>.]+)"
                          r"|(?P<error>[A-Za-z_][\w.]*)(?:: (?P<message>.*))?)?[ \t]*$")
PYTEST_ERROR = re.compile(r"E(?: {3,}|\t)(?P<line>.*)$")  # `E       RuntimeError: ...`, each line of the message
PYTEST_BREAK = re.compile(r"(?:_ ){5,}_?[ \t]*$|_{3,} \S.* _{3,}$|={5,}(?: .* =+)?$")  # between entries, tests, parts
PYTEST_FAILURE = re.compile(r"_{3,} \S.* _{3,}$")  # a failure's header: `____ test_forward ____`, `____ ERROR at ...`
PYTEST_CAPTURED = re.compile(r"-{5,} Captured .* -{5,}$")  # what the test printed or logged, after its entries
PYTEST_RAN = re.compile(r">(?: {3,}|\t)(?P<code>.*)$")  # the line of an entry's source that ran
DEFINES = re.compile(r"\s*(?:async )?def (?P<name>\w+)\(")


def _pytest_report(text: str) -> tuple[str, str] | None:
    """A failure as pytest reports it (`--tb=auto`, its default, `long`, `short`, `line`), written as Python prints a
    traceback, and the source pytest shows of the user's own functions (not a library's): the code around the
    error. Of several failures, the first whose message is a device error's (a template's). None when the text is
    no such report, or none of its failures shows such a message (an assertion on a script's exit, whose traceback
    is in what the test captured, reads better as it was pasted)."""
    lines = text.splitlines()
    if not any(PYTEST_ERROR.match(line) or PYTEST_BREAK.match(line) for line in lines) \
            or not any(PYTEST_PLACE.match(line) for line in lines):
        return None
    heads = [i for i, line in enumerate(lines) if PYTEST_FAILURE.match(line)]
    for a, b in zip([0, *heads], [*heads, len(lines)]):
        failure = _pytest_failure(lines[a:b])
        if failure is not None and read_message(failure[0])[0] is not None:
            return failure
    return None


def _pytest_failure(lines: list[str]) -> tuple[str, str] | None:
    """One failure of pytest's report as a traceback, and the source of its entries in the user's own files."""
    out: list[str] = []
    source: list[str] = []  # a long entry's lines, up to its place
    errors: list[str] = []  # its E lines, written after its frame
    code: list[str] = []
    mode = "source"  # a long entry's source; or after a short entry's place its line (carets follow); or captured
    for line in lines:  # (the summary that ends a report, its message cut short, is no entry's: left out)
        if PYTEST_CAPTURED.match(line):
            mode = "captured"
            continue
        error = PYTEST_ERROR.match(line)
        place = None if error or mode == "captured" else PYTEST_PLACE.match(line)
        if place and (place["error"] or "").endswith("Warning"):
            place = None  # a warning's place (`x.py:3: UserWarning: ...`), no entry's
        if error:
            errors.append(error["line"])
            if mode == "short":  # (its message follows the short entry's line)
                out += errors
                errors.clear()
        elif place and place["func"]:
            out += errors
            errors.clear()
            out.append(f'  File "{place["path"]}", line {place["line"]}, in {place["func"].split(".")[-1]}')
            source, mode = [], "short"
        elif place:
            func, ran, shown = _pytest_entry(source)
            out.append(f'  File "{place["path"]}", line {place["line"]}, in {func}')
            out += ["    " + ran] if ran else []
            out += errors or ([f"{place['error']}: {place['message']}"] if place["message"] else [])
            if shown and not LIBRARY.search(place["path"]):
                code.append(shown)
            source, errors, mode = [], [], "source"
        elif PYTEST_BREAK.match(line):
            source, mode = [], "source"
        elif mode == "short" and not re.match(r" {8,}[\w.]+ += ", line):  # its line and carets, not its locals (-l)
            out.append(line)
        elif mode == "source":
            source.append(line)
    out += errors
    if not out:
        return None
    return "Traceback (most recent call last):\n" + "\n".join(out), "\n\n".join(code)


def _pytest_entry(source: list[str]) -> tuple[str, str, str]:
    """A long entry's function, the line that ran (marked `>`), and its source up to that line (carets and E lines
    taken off, dedented) where it parses alone: the function is the nearest `def` above that line and less indented
    than it (not one nested before it); a line at the module's indent ran in `<module>`, its source from the top.
    No source where what is shown does not parse (a `try:` shown without its `except`), nor for a lambda's line."""
    marked = [i for i, line in enumerate(source) if PYTEST_RAN.match(line)]
    if not marked:
        return "<module>", "", ""
    at = marked[-1]
    ran = source[at][1:].strip()
    column = len(source[at]) - len(source[at][1:].lstrip(" \t"))  # where its code begins (pytest indents by 4)
    start = next((i for i in range(at - 1, -1, -1) if DEFINES.match(source[i])
                  and len(source[i]) - len(source[i].lstrip(" ")) < column), None)
    if start is None and column > 4:
        return "<module>", ran, ""  # a lambda's or a comprehension's line, shown alone: no function to read
    defined = DEFINES.match(source[start]) if start is not None else None
    shown = [" " + line[1:] if i == at else line for i, line in enumerate(source[: at + 1]) if i >= (start or 0)
             and not re.fullmatch(r"\s*[~^]+\s*", line)]
    block = textwrap.dedent("\n".join(shown))
    return (defined["name"] if defined else "<module>"), ran, block if _parsed(block) is not None else ""


@functools.lru_cache(maxsize=4)
def _inputs(text: str, code: str) -> tuple[str, str]:
    """The paste and the code as read: a notebook given as either is its errors and its code cells; pytest's report
    of a failure is its traceback and the source it shows of the user's functions."""
    if (book := _notebook(text)) is not None:
        text, code = book[0], "\n\n".join(part for part in (book[1], code) if part)
    if (book := _notebook(code)) is not None:
        code = book[1]
    if (report := _pytest_report(_plain(text))) is not None:  # (`--color=yes`, a CI log's times: read through them)
        text, code = report[0], "\n\n".join(part for part in (code, report[1]) if part)
    return text, code


def read(text: str, code: str = "") -> Facts:
    text, code = _inputs(text, code)
    text = _clean(text)
    template, groups, message = read_message(text)
    if template is not None and template.name == "named_pair":  # the argument is the tensor on the CPU
        groups = {**groups, "arg": groups["n1"] if (groups["a"] or "").lower() == "cpu" else groups["n2"]}
    if template is not None and template.name == "invalid_signature":
        groups = {**groups, **_typed_argument(groups["got"] or "", groups["sig"] or "")}
    devices = _devices(template, groups) if template else ()
    version = read_version(text + "\n" + code)
    frames = read_frames(text) + (("mps_device",) if any(d.startswith("mps") for d in devices) else ()) \
        + (("rank_log",) if re.search(r"(?m)^[^\S\n]*\[rank\d+\]:", text) else ())  # torchrun's prefix: ranks ran
    if template is not None and template.name == "thnn_cpu_argument" and (groups.get("op") or "").endswith("Criterion"):
        frames += ("loss",)  # THNN's criteria are the losses (ClassNLLCriterion: nll_loss)
    if _frames(text) and re.search(r"torch[/\\]utils[/\\]data[/\\]sampler\.py", _frames(text)[-1][0]):
        frames += ("sampler_raised",)  # raised in torch's own sampler (not in a sampler of the user's it calls)
    # the pasted code and the lines the traceback quotes, each read on its own: a quoted line cut mid-call does not
    # spoil the parse of the code
    # a model that never moves is read from what the code lacks: the lines a traceback quotes, one per frame and from
    # several files, lack every move they do not quote
    quoted = tuple(s for s in read_code(_code_lines(text)) if s != "model_never_moved")
    signals = tuple(dict.fromkeys(read_code(code) + _fragment(code) + quoted
                                  + _raised(text, template.name if template else None)))
    if {"cpu_accumulator", "device_scalar_operand"} & set(signals):  # the lines' tensor made without device= is the
        # running total, or the CPU tensor beside a device scalar: that reading, not the factory's
        signals = tuple(signal for signal in signals if signal != "factory_no_device")
    if "attribute_raised" in signals and _registered(raising_line(text), code):
        signals = tuple(signal for signal in signals if signal != "attribute_raised")
    kind = template.kind if template else None
    if template is not None and template.name == "numpy" and devices == ("meta",):
        kind = "meta_copy"  # a meta tensor has no data to read: a model left on meta, or offloaded weights
    if template is not None and template.name == "fsdp_compute" and "cpu" in devices:
        kind = "mismatch"  # a flat parameter on the CPU, its module moved off the device: not the current device's
    if template is not None and template.name == "invalid_ordinal" and "serialization" in frames \
            and "map_location_device" not in signals:
        # an old torch.load restored with .cuda(N) unchecked: a saved index the host lacks (not one it was mapped to)
        kind = "deserialize_index"
    return Facts(template=template.name if template else None, kind=kind,
                 message=message, devices=devices, argument=groups.get("arg") or groups.get("arg2"),
                 op=groups.get("op") or _kernel(text),
                 frames=frames, side=_side(template, groups), site=raise_site(text), code=signals,
                 torch_version=version, run=("resumed",) if RESUMED.search(text + "\n" + code) else ())


# the run resumed from a checkpoint, as the paste says it: a flag given (`--resume`, `--resume path`,
# `--continue_path d`), a keyword given a path or True (`resume_from_checkpoint="ckpt/"`, `resume=True`), a load of the
# resume path (`torch.load(args.resume)`, `resume_dict = torch.load(p)`), or the reporter's words ("resumed from epoch
# 12", "resume training"). Not a flag or keyword turned off or left empty (`resume=False`, `--no-resume`,
# `resume_from_checkpoint=None`), a keyword given a variable (Hugging Face's scripts pass
# `resume_from_checkpoint=checkpoint` on every run), wandb's resume of a logging run (`resume="allow"`), nor a file of
# torch's own (`_dynamo/resume_execution.py`)
RESUMED = re.compile(
    r"(?<![\w-])--(?:resume|continue[_-]path)\w*(?!\w)(?!\s*[=\s]\s*(?:False|None|0|''|\"\")(?!\w))"
    r"|\bresume\w*\s*=\s*(?:True\b|['\"](?!(?:allow|never|must|auto)['\"])[^'\"\s]+['\"])"
    r"|\bload\w*\([^\n#)]*\bresume|\bresume\w*\s*=\s*(?:torch\.)?load\("
    r"|(?<![\w/\\.])resum(?:e|ed|ing)\s+(?:the\s+|my\s+|a\s+)?(?:training|from|checkpoint|ckpt|run)\b",
    re.I)


ARROW = re.compile(r"^\s*-*>\s*\d+\s(?P<code>.*)$")  # IPython's arrow at the line that ran: `---> 68 idx = ...`


def _kernel(text: str) -> str | None:
    """The fused or foreach kernel the line that raised calls (`torch._fused_adamw_(`), where the message names no
    op: an optimizer's own kernel, which takes every state tensor on the parameter's device."""
    match = re.search(r"\btorch\.(_fused_\w+|_foreach_\w+)\(", raising_line(text))
    return match.group(1) if match else None


@functools.lru_cache(maxsize=4)  # read() and diagnose() ask it of the same paste
def raising_line(text: str) -> str:
    """The source line a traceback quotes under its deepest frame: the line that raised."""
    lines, last = text.splitlines(), ""
    framed = [FRAME.search(line) is not None for line in lines]
    for i, line in enumerate(lines):
        arrow = ARROW.match(line)
        if arrow:
            last = _statement([arrow.group("code"), *lines[i + 1:]], 0, [False, *framed[i + 1:]])
        elif framed[i] and i + 1 < len(lines) and not framed[i + 1]:
            last = _statement(lines, i + 1, framed)
        elif i and re.match(r"\s*~+\s*<--- HERE", line):
            last = lines[i - 1]  # TorchScript marks the line that raised in its serialized code
    return last.strip()


def _statement(lines: list[str], start: int, framed: list[bool]) -> str:
    """The source line under a frame (or at IPython's arrow), and the lines that continue it while a bracket stays
    open or it ends in an operator: a statement over several lines as Python 3.13 prints it, or a long line a
    terminal wrapped."""
    text = lines[start]
    for j in range(start + 1, min(start + 4, len(lines))):
        open_brackets = sum(text.count(c) for c in "([{") - sum(text.count(c) for c in ")]}")
        if (open_brackets <= 0 and not re.search(r"[-+*/%@,=(\[{\\]\s*$", text)) or framed[j] \
                or not lines[j].strip() or ERROR_LINE.match(lines[j]) or re.match(r"\s*[~^]+\s*$", lines[j]) \
                or re.match(r"\s*(?:-*>\s*)?\d+\s", lines[j]):  # IPython's next numbered line
            break
        text += " " + lines[j].strip()
    return text


def _fragment(code: str) -> tuple[str, ...]:
    """A few lines pasted as the culprit, outside any function or class, that make a tensor without device= and
    move nothing: the tensor made on the CPU (kept as `self.<name>`, it is a plain attribute's: read_code's)."""
    made = [line for line in code.splitlines() if re.search(TORCH_FACTORY_CALL, line.split("#")[0])
            and not re.match(r"\s*self\.\w+\s*=", line) and "**" not in line]
    # a move to or from the device (`.cpu()` too: the lines switch devices) places the tensors itself
    elsewhere = (r"(?m)^[ \t]*(?:def|class)\s|\.(?:to|cuda|cpu)\(|set_default_device|with torch\.device\("
                 r"|Data(?:set|Loader)\(")
    if made and not re.search(elsewhere, code):
        return ("factory_no_device",)
    return ()


def _raised(text: str, template: str | None = None) -> tuple[str, ...]:
    """What the line that raised shows: a tensor made there without device=, or a tensor attribute of the module
    read as an operand (`(x - self.mean) / self.std`; not a call of a layer, `self.fc(x)`, nor a method's). Where a
    CPU tensor was indexed by device indices, a local one indexed (`t = t[mask]`) is no attribute's: a tensor made
    on the CPU or a batch never moved, not a table kept as an attribute."""
    line = raising_line(text)
    frames = _frames(text)
    if frames and re.search(r"(?:^|/)torch/", frames[-1][0]):
        return ()  # torch's own line (`F.linear(input, self.weight, self.bias)`): its attributes are the layer's
    keyword = r"(?:return|in|if|else|and|or|not|is|yield|await|lambda|for|assert)\b"  # `return [...]` indexes nothing
    subscripted = template == "indices" and re.search(rf"(?<![\w.\])])(?!{keyword})[A-Za-z_]\w*\s*\[", line) is not None
    local = subscripted and re.search(r"(?<![\w.])self(?:\.\w+)+\s*\[", line) is None
    # and a module's attribute indexed there, alone (`self.logvar[t]`, `self.scheduler.alphas[:, t]`), is the table
    # kept as a plain attribute on the CPU, its index on the device: a lookup table's case, whatever the table's name.
    # Not a reshaping subscript (`self.mean[None, ...]`, slices), nor a layer of a ModuleList called
    # (`self.blocks[i](x)`) or one of its own attributes (`self.layers[i].emb[idx]`; a tensor's method is the table's:
    # `self.logvar[t].to(device)`), nor beside a local tensor indexed on the same line (`x[mask] + self.table[idx]`)
    subscripts = re.findall(r"(?<![\w.])self(?:\.\w+)+\s*\[([^\[\]]*)\](?!\s*\(|\s*\.(?!(?:to|cuda|cpu|float|double"
                            r"|half|long|int|bool|type_as|view|reshape|unsqueeze|squeeze|expand|expand_as|clone|detach"
                            r"|contiguous)\b)\w+\s*[(\[])", line)
    items = [item.strip() for found in subscripts for item in found.split(",")]
    indexed = template == "indices" and not subscripted and any(
        item not in ("", "None", "...") and ":" not in item for item in items)
    given = re.search(r"\.(?:to|cuda|type_as)\(|\*\*\w+", line) or line.count("(") > line.count(")")
    found: tuple[str, ...] = ("factory_raised",) if re.search(TORCH_FACTORY_CALL, line) and not given else ()
    # an attribute read as an operand of arithmetic: `x - self.mean`, `self.scale * attn`, not `p=self.p`,
    # `if self.training:`, `view(b, self.heads)`, `for layer in self.layers`
    # (reshaped by a subscript of None, ... and slices: `self.mean[None, ...]`, not a lookup: `self.table[idx]`)
    # (each item None, an ellipsis or a slice, whose bounds are any expression without brackets: `[:, :x.size(1)]`)
    item = r"\s*(?:None|\.\.\.)\s*|[^\[\],:]*:[^\[\],:]*(?::[^\[\],:]*)?"
    attr = rf"self\.\w+\b(?:\[(?:{item})(?:,(?:{item}))*,?\s*\])?(?!\s*[(.\[\w])"
    operand = rf"[-+*/@%]\s*\(?\s*{attr}|\b{attr}\s*\)?\s*(?:[-+*/@%](?!=))"
    # or an operand of a torch function, among its first two arguments (`th.mm(latent, self.exploration_mat)`), or
    # the tensor a method that reads another is called on (`self.weights.index_select(0, ids)`); not a layer's own
    # weight or bias, which a custom layer keeps as registered parameters (`F.conv2d(x, self.weight, ...)`)
    attr_operand = r"self\.(?!(?:weight|bias)\b)\w+\s*[,)]"
    factory = "|".join(sorted(FACTORIES))  # whose arguments are sizes (`torch.zeros(self.n, d)`), not operands
    function = rf"\b(?:torch\.nn\.functional|torch|th|F)\.(?!(?:{factory})\()\w+\(\s*(?:[^(),\n]+,\s*)?{attr_operand}"
    method = (r"(?<![\w.])self\.(?!(?:weight|bias)\b)\w+\.(?:index_select|gather|take|take_along_dim|mm|bmm|matmul"
              r"|mul|add|sub|div|masked_fill|where|scatter|index_add)\(")
    if re.search(operand, re.sub(r"^\s*self\.\w+\s*[-+*/]?=", "", line)) or re.search(function, line) \
            or re.search(method, line):
        found += ("attribute_raised",)
    # TorchScript's serialized code reading a tensor the trace recorded, or a device it recorded as a constant
    # (`device=torch.device("cpu")`: a traced `device=x.device` is written so, a scripted one reads the input's)
    serialized = bool(frames) and _serialized(frames[-1][0])
    recorded_device = serialized and re.search(r"\bdevice=torch\.device\(\s*[\"']", line) is not None
    if re.search(r"\bCONSTANTS\.c\d+\b", line) or recorded_device:
        found += ("constant_raised",)
    return found + (("local_indexed",) if local else ()) + (("attribute_indexed",) if indexed else ())


def _registered(line: str, code: str) -> bool:
    """Whether the code registers an attribute the line reads (`self.W = nn.Parameter(...)`, `register_buffer("W",
    ...)`): `.to` moves it, so it is no plain attribute."""
    read = set(re.findall(r"(?<![\w.])self\.(\w+)", line))
    registered = set(re.findall(r"\bself\.(\w+)\s*=\s*(?:torch\.)?(?:nn\.)?Parameter\(", code)) \
        | set(re.findall(r"\bregister_(?:buffer|parameter)\(\s*['\"](\w+)", code))
    return bool(read & registered)


def _code_lines(text: str) -> str:
    """The source lines a traceback quotes under its frames: code the user did not paste on purpose."""
    lines = text.splitlines()
    return "\n".join(lines[i + 1].strip() for i, line in enumerate(lines[:-1]) if FRAME.search(line))


def score(facts: Facts, scenario: registry.Scenario) -> Match | None:
    clues = scenario.clues
    if facts.kind is not None and facts.kind not in clues.kinds:
        return None
    if facts.pair is not None and clues.pairs and facts.pair not in clues.pairs:
        return None
    if clues.pairs == ("two_accelerators",) and facts.pair is None and facts.kind in (None, "mismatch") \
            and not {"ranks", "split_model", "device_map"} & set(facts.code):
        return None  # a second accelerator, which neither the message nor the code shows (`.cuda()` is everywhere)
    # on MPS, two device pickers leave either side on the CPU: the model is the one where the CUDA-only picker placed it
    if facts.side is not None and clues.sides and facts.side not in clues.sides \
            and not ("mps_device" in facts.frames and "mps_device" in clues.frames):
        return None
    # its broken code raises nothing on this accelerator (two pickers agree on CUDA: both say cuda), unless the code
    # shows its case (a picker that knows only MPS, on a CUDA machine)
    if facts.kind == "mismatch" and any(scenario.symptoms.get(d.split(":")[0]) == "none"
                                        for d in facts.devices if not d.startswith("cpu")) \
            and not set(clues.code) & set(facts.code):
        return None
    if "state" in clues.sides and facts.op and not re.search(UPDATE_OPS, facts.op):
        return None  # state updated in place raises in the update's op, and the message names another
    sites = [f for f in clues.frames if f in RAISE_SITES]
    # an optimizer of its own whose step updates Adam's moments (`exp_avg`: transformers' AdamW before 4.x) is an
    # Adam: its moments are in optimizer.state, which the load casts as it does torch.optim's
    adam_of_its_own = facts.site == "custom_optimizer_step" and "adam_step" in facts.frames \
        and "adam_step" in clues.frames
    if facts.site is not None and sites and facts.site not in sites and not adam_of_its_own:
        return None  # it raises elsewhere than this scenario's broken code does
    total, why = 0.0, []
    if facts.kind is not None:
        total += WEIGHTS["kind"]
        why.append(f"the message is a {facts.kind} error ({facts.template})")
    if facts.pair is not None and clues.pairs:
        total += WEIGHTS["pair"]
        why.append(f"the devices are {' and '.join(facts.devices)}")
    if facts.side is not None and facts.side in clues.sides:
        total += WEIGHTS["pair"]
        why.append(f"the {facts.side} side is on cpu")
    if facts.template in clues.templates:
        total += WEIGHTS["frame"]
        why.append(f"the message's wording: {TEMPLATE_WHY[facts.template]}")
    elif facts.side == "table" and "indices" in clues.templates:  # what the indices message says, in a gather's words
        total += WEIGHTS["frame"]
        why.append("the tensor read from (a table) is on cpu, its index on the device")
    for frame in facts.frames:
        if frame in clues.frames:
            total += WEIGHTS["frame"]
            why.append(f"the traceback passes through {frame.replace('_', ' ')}")
    # an argument counts in the scenario's ops (mat2 of nn.Linear's addmm is its weight; of a bmm it is not)
    op_fits = not (facts.op and clues.ops) or any(op_is(facts.op, op) for op in clues.ops)
    # a wording older than the mechanism: the op and the argument it names do not count for it; nor for a scenario
    # of a layer's weights where the line that raised reads a module's tensor attribute (`th.mm(latent,
    # self.exploration_mat)`): the op is that line's, and its argument no layer's weight
    unfit = ""
    if facts.template in clues.older:
        unfit = ", but the message's wording is an older release's than this mechanism"
    elif "attribute_raised" in facts.code and clues.sides == ("weights",):
        unfit = ", but the line that raised reads a module's tensor attribute, not a layer's weight"
    # (a kernel's own check names its own parameter, no ATen op's argument a scenario knows)
    if facts.argument and facts.argument in clues.arguments and op_fits \
            and facts.template not in ("extension_cuda", "extension_cpu"):  # one scenario's argument counts double
        if not unfit:
            total += WEIGHTS["argument"] * (2 if sum(facts.argument in s.clues.arguments
                                                     for s in registry.SCENARIOS) == 1 else 1)
        why.append(f"the argument is `{facts.argument}`" + unfit)
    if facts.op and clues.ops and op_fits and not unfit:
        total += WEIGHTS["op"]
        why.append(f"the op is `{facts.op}`")
    for signal in facts.code:
        if signal in clues.code:  # a signal only one scenario shows is the stronger evidence
            total += WEIGHTS["code"] * (2 if _claimed(signal) == 1 else 1)
            why.append(f"the code: {CODE_WHY.get(signal, signal)}")
    for lean in dict.fromkeys(facts.code + facts.frames + facts.run):
        if lean in clues.leans:  # weighs as a prior: it orders the candidates, never names one alone (shown)
            total += WEIGHTS["lean"]
            why.append(f"leaning to it: {CODE_WHY.get(lean, 'the traceback passes through ' + lean.replace('_', ' '))}")
    for signal in set(clues.against) & set(facts.code + facts.frames):  # the input shows what its broken code lacks
        total -= 2 * WEIGHTS["code"]
        why.append(f"but the code: {CODE_WHY.get(signal, signal)}" if signal in facts.code
                   else f"but the traceback passes through {signal.replace('_', ' ')}")
    total += WEIGHTS["prior"] * clues.prior
    return Match(scenario.slug, round(total, 2), tuple(why), clues.confirm, f"samedevice show {scenario.slug}")


def _claimed(signal: str) -> int:
    return sum(signal in s.clues.code for s in registry.SCENARIOS)


CODE_WHY = {
    "load_before_move": "a state dict is loaded before the model is moved",
    "optimizer_load": "an optimizer's state is loaded", "factory_in_forward": "a tensor is made inside forward "
    "without device=", "plain_tensor_attr": "a tensor is kept as a plain attribute in __init__",
    "plain_list_layers": "layers are kept in a plain list or dict", "tokenizer": "a tokenizer's output",
    "tokenizer_not_moved": "the tokenizer's output is not moved", "model_never_moved": "inputs are moved, the "
    "model is not", "model_moved": "the model is moved to the device",
    "called_on_device": "the moved model is called on inputs moved in the call",
    "local_indexed": "the line that raised indexes a local tensor, not an attribute",
    "attribute_indexed": "the line that raised indexes a tensor attribute of the module (`self.<name>[index]`)",
    "cpu_input": "the model is run on an input made on the CPU and never moved",
    "group_tensor": "a tensor is put in an optimizer's param group",
    "factory_raised": "the line that raised makes a tensor without device=",
    "constant_raised": "the line that raised reads a constant the trace recorded (`CONSTANTS.c0`, "
                       "`device=torch.device(\"cpu\")` in TorchScript's serialized code)",
    "factory_no_device": "the lines pasted make a tensor without device= and move nothing",
    "resumed": "the run resumed from a checkpoint",
    "attribute_raised": "the line that raised reads a tensor attribute of the module (`self.<name>`)",
    "custom_optimizer": "an optimizer of its own",
    "torch_load": "torch.load", "map_location_device": "torch.load(map_location=<a device>)",
    "hf_model": "a Hugging Face model is loaded or run (from_pretrained, generate, pipeline)",
    "sgd": "an SGD optimizer", "adam": "an Adam or AdamW optimizer", "adagrad": "an Adagrad optimizer",
    "tokenizer_moved": "the tokenizer's output is moved whole", "pos_weight": "a loss is given pos_weight=",
    "class_weight": "CrossEntropyLoss or NLLLoss is given weight=",
    "map_location_cpu": "torch.load(map_location=<the CPU>)", "set_rng_state": "an RNG state is restored",
    "rng_state_all": "the RNG states of all the devices are saved or restored (get_rng_state_all, set_rng_state_all)",
    "dataloader_worker": "a DataLoader runs worker processes (num_workers > 0)",
    "device_picked": "a forward makes a tensor on a device the code names itself (\"cuda\", .cuda()), not its input's",
    "metric_never_moved": "a torchmetrics metric is built and never moved to the device",
    "metric_moved": "the torchmetrics metric is moved to the device",
    "default_device": "a default device is set to an accelerator (set_default_device, set_default_tensor_type)",
    "shuffle": "a DataLoader shuffles (shuffle=True)",
    "device_generator": "a generator is made on a device",
    "cpu_accumulator": "a tensor made on the CPU is updated in place (a running total)",
    "device_scalar_operand": "a 0-dim tensor on the device meets a tensor made on the CPU in one op",
    "lengths_cpu": "pack_padded_sequence is given its lengths taken to the CPU",
    "dataparallel": "the model is wrapped in nn.DataParallel",
    "ddp": "the model is wrapped in DistributedDataParallel",
    "jit_trace": "the model is traced or exported (torch.jit.trace, torch.export, torch.onnx.export)",
    "meta": "a model is built on the meta device (device='meta', init_empty_weights, low_cpu_mem_usage, to_empty)",
    "assign_true": "a state dict is loaded with assign=True", "ema": "an EMA (shadow) copy of the weights",
    "device_map": "a model is loaded with a device map", "offload": "parts of the model are offloaded to the CPU "
    "(cpu_offload, enable_*_cpu_offload, an execution device)",
    "split_model": "parts of one model are placed on devices of their own (a device map, a submodule moved alone)",
    "index_less": "'cuda' without an index (`.cuda()`, `.to('cuda')`, `torch.cuda.FloatTensor(...)`): the current "
                  "device, cuda:0 unless set",
    "ranks": "ranks or a device index past 0 (local_rank, set_device, cuda:1)",
    "processes": "several processes (init_process_group, LOCAL_RANK, DistributedDataParallel, spawn, torchrun)",
    "cpu_device": "the device is chosen as the CPU", "cpu_host": "the CPU is chosen as the device or the load's map",
    "mps": "Apple's MPS device", "capturable_fused": "an optimizer made with capturable=True or fused=True",
    "head_replaced": "a model's head (fc, classifier, head) is replaced by a new layer",
    "lookup_table": "a schedule's table (alphas, betas, sigmas, timesteps) is indexed",
    "batch_loop": "batches are read from a loader in a loop", "device_check": "the code reads a module's device "
    "from its parameters (`next(model.parameters()).device`)",
    "moves_inputs": "the inputs are moved to the device", "lengths_list": "pack_padded_sequence is given its lengths "
    "as a list", "pack_sequence": "pack_sequence is called",
    "pack_padded": "pack_padded_sequence is called", "compiled": "the model is compiled (torch.compile)",
    "distribution_cpu": "a Distribution is built from a tensor made without device=",
    "distribution_scalar": "a Distribution is built from Python numbers",
    "lerp_cpu_scalar": "lerp's weight is a 0-dim tensor made on the CPU",
    "draw_device_given": "a random draw is given its generator and its device",
    "loss_attr": "a loss of its own keeps a tensor as a plain attribute in __init__",
    "batch_moved": "the loop's batch is moved whole (each tensor it binds is moved where it is read, or rebound to its "
                   "move)",
    "move_discarded": "an input's move is not assigned (`img.to(device)` on its own line): Tensor.to returns the "
                      "moved tensor and leaves the one it was called on where it was",
}


# device errors of a kind no scenario raises, and what they mean
# what runs only on the device, met by code that chose the CPU (`device = "cpu"`): nothing was left behind
ON_THE_DEVICE_ONLY = {
    "extension_cuda": "this extension has only a CUDA kernel and the code runs on the CPU by design (device = 'cpu'): "
                      "run it on a GPU, or use the library's CPU implementation if it has one; no lesson of the "
                      "catalog covers this",
    "ddp_device_ids": "DistributedDataParallel of a module on the CPU (a run on the CPU by design, gloo) takes "
                      "device_ids=None and output_device=None; no lesson of the catalog covers this",
}
# torch/nn/utils/rnn.py: pack_sequence makes its lengths with `torch.as_tensor([v.size(0) for v in sequences])`, no
# device=, and hands that tensor on; pack_padded_sequence moves only a list to the CPU. Still so in 2.13 (its test)
PACK_SEQUENCE = ("pack_sequence makes its tensor of lengths on the default device itself, which PyTorch has not "
                 "fixed as of 2.13 (pytorch/pytorch#88643): besides scoping the default device, call pack_sequence "
                 "inside `with torch.device('cpu'):`, or pass the lengths as a list, "
                 "`pack_padded_sequence(pad_sequence(seqs), [len(s) for s in seqs], enforce_sorted=False)` (made on "
                 "the CPU since 2.1)")
NOT_TAUGHT = {
    "cpu_scalars": "an op on the device was given more 0-dim CPU tensors than its kernel takes as scalars (most take "
                   "one): make the others on the device, or pass Python numbers (`.item()`); no lesson of the "
                   "catalog covers this",
    "device_name": "'{name}' is no device of this PyTorch, in a map_location or a torch.device: a name PyTorch never "
                   "had ('gpu' is none, nor a bare index: write 'cuda', 'cuda:0', 'mps' or 'cpu'), or a backend whose "
                   "package was not imported (torch_npu registers 'npu'); no lesson of the catalog covers this",
    "legacy_constructor": "a typed constructor (torch.LongTensor, torch.FloatTensor) makes CPU tensors only: write "
                          "`torch.tensor(data, dtype=torch.long, device=device)` (or torch.empty(..., device=device)); "
                          "no lesson of the catalog covers this",
    "legacy_constructor_tensor": "a typed constructor (torch.FloatTensor, torch.LongTensor) makes CPU tensors only "
                                 "and refuses a tensor on another device: convert the tensor where it is, to the "
                                 "dtype the constructor names (`x.float()` for FloatTensor, `x.long()` for "
                                 "LongTensor, or `x.to(dtype)`, `torch.as_tensor(x, dtype=dtype)`); no lesson of the "
                                 "catalog covers this",
    "generator": "a random op drew on one device with a generator of another: a generator serves only its own "
                 "device's draws. Make it there (`torch.Generator(device=...)`), or draw on the generator's device "
                 "and move the result; no lesson of the catalog covers this",
    "ddp_multi": "DistributedDataParallel takes device_ids for a module on one GPU; a module spread over several "
                 "(a device map, a model split by hand) takes device_ids=None and output_device=None, and each rank "
                 "keeps its own devices; no lesson of the catalog covers this",
    "duplicate_gpu": "two ranks of one process group use one GPU: each rank picks its own before "
                     "init_process_group (`torch.cuda.set_device(int(os.environ['LOCAL_RANK']))`, DDP's "
                     "`device_ids=[local_rank]`), not a device written in the script, nor one CUDA_VISIBLE_DEVICES "
                     "for every rank, nor more ranks than GPUs; no lesson of the catalog covers this (where the ranks "
                     "never set their device and ask for 'cuda', index_less_device shows how they all land on 0)",
    "illegal": "a CUDA kernel read memory it may not. It is a device error where the kernel does not check its "
               "inputs' devices (a CUDA extension's, apex's fused optimizers) and is given a tensor on the CPU or on "
               "another GPU than the current one, which it launches on; otherwise the kernel's own bug. Rerun with "
               "CUDA_LAUNCH_BLOCKING=1 for the op, then print its inputs' devices and torch.cuda.current_device(). "
               "No lesson of the catalog teaches this message; where a fused optimizer of its own (apex's) meets it "
               "after load_state_dict, param_group_tensor shows how an optimizer's tensor stays on the CPU",
    "build": "this build has no kernels for this GPU's architecture (a PyTorch build older than the card, or a card "
             "older than the build supports; or a CUDA extension compiled without the card's architecture, "
             "TORCH_CUDA_ARCH_LIST): compare torch.cuda.get_arch_list() with torch.cuda.get_device_capability() "
             "and install (or compile) a build made for the card; nothing is misplaced",
    "ordinal": "a process asked for a device index this host, or its CUDA_VISIBLE_DEVICES, does not have: more ranks "
               "than GPUs, or a global rank used as a local index (`torch.cuda.set_device(rank)` on a second "
               "machine). Use LOCAL_RANK, and as many processes per node as it has GPUs; no lesson of the catalog "
               "covers this",
    "fsdp_devices": "FSDP wraps a module whose parameters are all on one device (or all on the CPU, with "
                    "device_id): here they are on several. A part built on meta and never materialized (to_empty, "
                    "param_init_fn; a layer swapped in on a real device), or a part moved by itself: materialize or "
                    "move the whole module before the wrap; no lesson of the catalog covers this "
                    "(meta_param_not_materialized shows a model left on meta)",
    "foreach_scalars": "a _foreach op takes a list of scalars packed in a tensor on the CPU only, and got one on the "
                       "device: most often an optimizer's hyperparameters (lr, betas, weight_decay in param_groups) "
                       "turned into tensors and moved with its state by a restore or a rescue loop. Move "
                       "optimizer.state only (fixes/optimizer_to.py), and keep param_groups' numbers as Python numbers "
                       "or CPU tensors; no lesson of the catalog covers this",
    "sparse": "a sparse tensor's indices and values are on two devices: make them on one device before the "
              "constructor (`torch.sparse_coo_tensor(indices.to(values.device), values, size)`). Before PyTorch 1.7, "
              "torch.sparse_coo_tensor without device= made its indices on the current device (pytorch/pytorch"
              "#28500, fixed by #41984), so values on cuda:1 were refused even with the indices there too, and "
              "indices given as a list were for a few releases more (#54075): there, pass `device=values.device`; "
              "no lesson of the catalog covers this",
    "map_location": "torch.load calls map_location for each storage unless it is a string ('cpu', 'cuda:0'), a "
                    "torch.device (since 0.4.1), or a dict of location tags: pass one of those, not a list or a "
                    "number; no lesson of the catalog covers this",
    "cpu_only": "this build has no kernel for the op on the device (PyTorch's quantized ops run on the CPU; an op of "
                "torchvision or an extension needs a build for this CUDA): run the op on the CPU and move its result, "
                "or use a release or build that has one; no lesson of the catalog covers this",
    "negative_index": "a device index of -1 was given where a GPU's is wanted: -1 is what Tensor.get_device() returns "
                      "for a CPU tensor (`.cuda(x.get_device())` on a run on the CPU), and the local_rank a script "
                      "gets when no launcher (torchrun) set it. Move to a tensor's device with `.to(x.device)`, and "
                      "pick the device from local_rank only when it is 0 or more; no lesson of the catalog covers "
                      "this",
}


# eager PyTorch lets a 0-dim CPU tensor join a CUDA op as a scalar (TensorIterator); Inductor has compiled such a
# tensor into a Triton kernel as a pointer in several releases (pytorch/pytorch#100191, #121374, #140457; #151737 open)
INDUCTOR_SCALAR = ("a kernel torch.compile generated was given a CPU tensor. Eager PyTorch lets a 0-dim CPU tensor "
                   "(`b[0]`, `t.sum()`, `torch.tensor(2.0)`) join a GPU op as a scalar; Inductor has compiled some of "
                   "these into its Triton kernel as a pointer, which the kernel cannot read (pytorch/pytorch#121374, "
                   "#140457, fixed; #151737 open). Run it uncompiled: where eager passes, make that scalar on the "
                   "device (or pass a Python number, `.item()`), or try a newer release; where eager raises too, the "
                   "message eager gives names the lesson")
# torch/nn/parallel/distributed.py before 1.9: no device_ids and several visible GPUs, a module replicated per GPU
DDP_REPLICATES = ("1.x's DistributedDataParallel without device_ids in a process that sees several GPUs: it "
                  "replicates the module over all of them from the first, and a module on the rank's own GPU is not "
                  "there. Pass device_ids=[local_rank] (or let each process see one GPU)")


def _calls(text: str, facts: Facts) -> tuple[str, ...]:
    """Where the input shows it raised: the op its message names, the functions of torch's frames in its traceback,
    and the calls on the line that raised, as written (`torch.ctc_loss`, `self.ctc_loss`). Not the code's other
    calls: a call elsewhere in a script did not raise."""
    frames = [func for path, func in _frames(text) if re.search(r"[/\\]torch[/\\]", path)]
    called = re.findall(r"(?<![\w.])([A-Za-z_][\w.]*)\(", raising_line(text))
    return tuple(dict.fromkeys(([facts.op] if facts.op else []) + frames + called))


def diagnose(text: str, code: str = "") -> Diagnosis:
    facts = read(text, code)
    text = _clean(_inputs(text, code)[0])  # as read() cleaned it
    # a message that names two devices and dtypes, and the devices are one: the dtypes differ
    one_device = facts.template in ("expected_device", "output_desired") and len(facts.devices) == 1
    if facts.template == "legacy_backend" and len(facts.devices) < 2 \
            and re.search(r"backend (?:Sparse|Mkldnn|Quantized)", facts.message):
        return Diagnosis(facts, "not_device_error", note="one device, two layouts: a sparse, MKL-DNN or quantized "
                         "tensor met a plain one. Make it plain (`.to_dense()`, `.dequantize()`) or use the op made "
                         "for it (`torch.sparse.mm`); no device lesson applies")
    if facts.template == "kernel_dtype":
        # half precision in a kernel that is not CUDA's: the CPU's, which lacked most of them before 2.x
        half_on_cpu = not re.search(r"(?i)cuda", facts.op or "") and re.search(r"'(?:Half|BFloat16)", facts.message)
        return Diagnosis(facts, "not_device_error", note="the op has no kernel for this dtype on the device it ran on: "
                         "cast the tensor to one it takes (`.float()`, `.to(torch.uint8)` for a bool mask), or run "
                         "the op where it has one; no device lesson applies" + (
                             ". Where it ran on the CPU in half precision (older releases lacked most half kernels "
                             "there): if the model was meant to run on the GPU, it never got there (print "
                             "next(model.parameters()).device); on the CPU, compute in float32 (`model.float()`)"
                             if half_on_cpu else ""))
    if facts.template == "lengths" and re.search(r"but got \d+D cpu\b", facts.message):
        return Diagnosis(facts, "not_device_error", note="the lengths are on the CPU but not one-dimensional (a 0-D "
                         "tensor: `lengths.squeeze()` of a batch of one): pass a 1-D tensor (`lengths.view(-1)`) or a "
                         "list; no device lesson applies")
    if facts.kind == "dtype" or one_device or (facts.template in ("input_weight", "legacy_type", "legacy_backend")
                                               and len(facts.devices) < 2):
        return Diagnosis(facts, "not_device_error", note="the tensors are on one device and differ in dtype: cast "
                         "one (`.float()`, `.to(other.dtype)`); no device lesson applies")
    if facts.op and re.search(r"cudnn_ctc_loss", facts.op):
        return Diagnosis(facts, "not_in_catalog", note="cuDNN's CTC loss takes its targets and both lengths on the "
                         "CPU (int32) and only log_probs on the GPU; F.ctc_loss picks it for int32 targets (with "
                         "blank 0 and targets of at most 256 labels). Pass int64 targets to keep the native CUDA "
                         "kernel, or hand the targets and lengths to it on the CPU; no device lesson of the catalog "
                         "covers this")
    if facts.kind == "assert":
        return Diagnosis(facts, "not_device_error", note="a CUDA kernel's own check failed, most often an index out "
                         "of range (a token id past the embedding's size, a class id past the classes, a label of "
                         "-1); CUDA reports it at a later call. Rerun with CUDA_LAUNCH_BLOCKING=1, or on the CPU, for "
                         "the op and the real message; no device lesson applies")
    calls = _calls(text, facts)
    if facts.template in ON_THE_DEVICE_ONLY and "cpu_device" in facts.code:
        return Diagnosis(facts, "not_in_catalog", note=ON_THE_DEVICE_ONLY[facts.template])
    for bug in UPSTREAM:
        if bug.fits(facts, calls):
            return Diagnosis(facts, "fixed_upstream", note=f"fixed upstream in PyTorch {bug.fixed_in}: {bug.why}")
    if facts.template == "numpy" and {"device_generator", "shuffle"} <= set(facts.code) and not _frames(text) \
            and facts.torch_version is None:  # 2.1.0's sampler, or a NumPy call of the user's: neither shown
        return Diagnosis(facts, "ambiguous", tuple(m for m in (score(facts, registry.get("device_tensor_to_numpy")),)
                                                   if m is not None), note=SAMPLER_OR_YOURS)
    if facts.kind == "cudnn_rnn_eval":
        return Diagnosis(facts, "not_device_error", note="a backward through an LSTM or GRU in eval mode on the GPU "
                         "(importance estimates, saliency, attacks run backward on a model in eval()): cuDNN's RNN "
                         "keeps what backward needs only in training mode. Put the RNN in train() for that pass (with "
                         "dropout 0), or run it under `with torch.backends.cudnn.flags(enabled=False):`; no device "
                         "lesson applies")
    if facts.kind == "cudnn":
        return Diagnosis(facts, "not_device_error", note="cuDNN failed to run a kernel: most often memory, an input "
                         "shape or dtype its kernel does not take, or the driver. Run it once with "
                         "torch.backends.cudnn.flags(enabled=False) to see whether cuDNN is the cause; no device "
                         "lesson applies")
    plain = _other_error(text) if facts.kind is None else None
    if plain:
        return Diagnosis(facts, "not_device_error", note=f"the error shown (`{plain[:200]}`) says nothing of devices "
                         "and its traceback passes through none of torch's device code: no device lesson applies. If "
                         "the log holds a device error before it, paste that one")
    if facts.kind is None and (not facts.code or _error_shown(text)):
        return Diagnosis(facts, "unknown", note="no device error found in the input")
    claimed = {frame for s in registry.SCENARIOS for frame in s.clues.frames}
    # a Distribution's 0-dim CPU parameters decide only in a message of a release that refused them
    old_scalars = facts.template in SCALARS_REFUSED and "distribution_scalar" in facts.code
    unclaimed = [frame for frame in facts.frames if frame in DECISIVE and frame not in claimed
                 and (DECISIVE[frame] in (None, *facts.code) or (frame == "distributions" and old_scalars))]
    if unclaimed:
        return Diagnosis(facts, "not_in_catalog", note=f"the error is raised inside {unclaimed[0]}, which no scenario "
                         "of the catalog teaches" + DECISIVE_NOTES.get(unclaimed[0], ""))
    matches = sorted((m for s in registry.SCENARIOS if (m := score(facts, s)) is not None),
                     key=lambda m: -m.score)
    matches = [m for m in matches if m.score > 0]
    if "constant_raised" in facts.code:  # the operand that raised is a constant the trace recorded, on its device
        matches.sort(key=lambda m: m.slug != "traced_device_constant")
    if not matches or (facts.kind is not None and matches[0].score < WEIGHTS["kind"]):
        named = re.search(r"device string: (\w+)|tagged with (\w+)", facts.message)
        return Diagnosis(facts, "not_in_catalog", note=NOT_TAUGHT.get(facts.kind or "", "a device error the catalog "
                         "does not teach; the facts above are what it shows").replace(
                             "{name}", next((g for g in named.groups() if g), "") if named else ""))
    if facts.kind is None and matches[0].score < FOUND:
        return Diagnosis(facts, "unknown", tuple(matches[:3]), note="no device error found in the input; the code "
                         "alone suggests the scenarios below")
    if facts.kind is None:  # frames or code without the message: what raised, and what it said, is not shown
        return Diagnosis(facts, "ambiguous", tuple(matches[:3]), note="no error message was read (the paste ends "
                         "before it?): the traceback and the code suggest the scenarios below; paste the error's "
                         "last line to tell them apart")
    caveat = ""
    for other in ELSEWHERE:
        # the emulator's absent host lacks its device by design: the scenario's case
        kinds = {d.split(":")[0] for d in facts.devices}
        if facts.template == other.template and (not other.devices or kinds <= set(other.devices)) \
                and not set(other.unless) & set(facts.code + facts.frames):
            if not other.first:
                caveat = other.why
                continue
            return Diagnosis(facts, "not_in_catalog", tuple(m for m in matches if m.slug in other.scenarios),
                             note=other.why)
    if facts.template == "lengths" and "pack_sequence" in facts.code + facts.frames:
        caveat = PACK_SEQUENCE
    top = tuple(matches[:3])
    if facts.kind == "triton_pointer" and "compiled" in facts.code + facts.frames:
        return Diagnosis(facts, "not_in_catalog", note=INDUCTOR_SCALAR)
    if facts.kind == "triton_pointer":
        return Diagnosis(facts, "ambiguous", top, note="a Triton kernel was given a tensor it cannot reach from the "
                         "current device: one on the CPU, or one on another GPU. Under torch.compile the kernel is "
                         "Inductor's and the tensor most often a 0-dim CPU one that eager takes as a scalar (no lesson "
                         "covers that: run it uncompiled); in a library's own Triton kernel, the scenarios below. What "
                         "tells them apart: is torch.compile on, and is the tensor on the CPU or on another GPU than "
                         "torch.cuda.current_device()?")
    if facts.template == "broadcast_devices" and not {"dataparallel"} & set(facts.code + facts.frames):
        if {"ddp", "processes"} & set(facts.code + facts.frames):
            return Diagnosis(facts, "not_in_catalog", note=DDP_REPLICATES + "; no lesson of the catalog covers this "
                             "(dataparallel_device_ids shows the same check met by nn.DataParallel)")
        return Diagnosis(facts, "ambiguous", top, note="nn.DataParallel meets this check with a module off "
                         "device_ids[0] (the scenario below). So does " + DDP_REPLICATES + "; no lesson covers that. "
                         "What tells them apart: is the model wrapped in nn.DataParallel or in "
                         "DistributedDataParallel?")
    # ambiguous: only the message's kind fits, the first two differ by no more than their priors, or nothing but the
    # message speaks for the first. A message names the op and the tensor on the wrong device, not how it got there:
    # an embedding's `index` on CPU is a tokenizer's output, a batch never moved, an index built by hand, an
    # offloaded encoder's device read. Only the traceback's frames or the code show the case.
    # and a lesson the code speaks against (its fix shown) is never named alone
    against = set(registry.get(top[0].slug).clues.against) & set(facts.code + facts.frames)
    if against or (len(top) > 1 and (top[0].score < FOUND or top[0].score - top[1].score <= WEIGHTS["prior"]
                                     or not shown(facts, registry.get(top[0].slug), registry.get(top[1].slug)))):
        scenario = registry.get(top[0].slug)
        if against and len(top) == 1:
            return Diagnosis(facts, "ambiguous", top, note="only this scenario fits the message, and the code speaks "
                             f"against it; what would confirm it: {scenario.clues.question}")
        more = "" if facts.frames or facts.code else ("; or paste the whole traceback and the code around it: the "
                                                         "frame that raises tells most of them apart")
        question = scenario.clues.question
        if question == registry.FORWARD_QUESTION and facts.side in registry.SIDE_QUESTIONS:
            question = registry.SIDE_QUESTIONS[facts.side]  # the message told the side: ask within it
        site, left = registry.SHOWN_QUESTIONS.get(question, ("", ""))
        if facts.site == site:  # the traceback shows it raised there: ask what is left (the resume's order, the tensor)
            question = left
        return Diagnosis(facts, "ambiguous", top, note=f"the message fits several scenarios; what tells them apart: "
                         f"{question}{more}")
    return Diagnosis(facts, "scenario", top, note=caveat)


def _error_shown(text: str) -> bool:
    """Whether the paste shows an error's line: not TorchScript's "The following operation failed in the TorchScript
    interpreter.", which announces the error its traceback ends with (a paste cut before that end shows none)."""
    return any(not INTERPRETER_FAILED.match(text, m.end()) for m in ERROR_LINE.finditer(text))


INTERPRETER_FAILED = re.compile(r":\s*The following operation failed in the TorchScript interpreter")
# the last error a paste shows, with its message (`TypeError: ... must be Tensor, not numpy.float64`)
LAST_ERROR = re.compile(r"^[^\S\n]*(?:E[^\S\n]+|\[rank\d+\]:[^\S\n]*)?(?:\w+\.)*\w+(?:Error|Exception):[^\S\n]*"
                        r"(?P<message>\S.*)$", re.M)
# words a device's error has, whole or cut short (`Expected all tensors to`, `Input type (torch.`), and the GPU's
# stack (its driver, CUDA's libraries: cuBLAS, cuDNN, NVRTC, THC's checks); not a dtype's message that shares some
# (`Input type (double) and bias type (float)`, `Expected tensor for argument #1 'indices' to have one of the
# following scalar types`)
DEVICE_WORDS = (r"(?i)cuda|cpu|gpu|device|\b(?:mps|xpu|npu|hpu|xla|meta|hip|rocm|nccl|thc)\b|backend|storage|located"
                r"|map_location|deseriali|placeholder|\btensors? (?:to be )?on\b|same device|TorchScript interpreter"
                r"|nvidia|driver|\bcu(?:blas|dnn|fft|solver|sparse|rand)|nvrtc|triton"
                r"|expected (?:all tensors|object of)"
                r"|expected tensor for argument #\d+ '\w+' to have the same(?! (?:dtype|size|shape|type))"
                r"|(?:input|weight) type \(torch\.|indices should")
# an error that wraps the real one, which comes after it or not at all: a DataLoader worker's, a replica's, a
# launcher's or a CI step's exit
WRAPPER = r"Caught \w+ in |Original Traceback|non-zero exit status|exit code|ChildFailedError"


def _error_words(text: str) -> str:
    """The paste from its first traceback on (or its first error, where it shows no traceback), without the frames'
    lines and the code they quote: the messages of the error and of its chain. Not a log's header before it
    (`GPU available: True (cuda)`), nor a quoted `batch.to(device)`."""
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.lstrip().startswith("Traceback")
                  or LAST_ERROR.match(line)), 0)
    kept, quoted = [], False
    for line in lines[start:]:
        if FRAME.search(line):
            quoted = True  # the indented lines under a frame quote its code (and its carets)
        elif not (quoted and line[:1].isspace()):
            quoted = False
            kept.append(line)
    return "\n".join(kept)


def _other_error(text: str) -> str | None:
    """The last error a paste shows, where it is plainly no device's: no device word in its message or its chain's
    (the message's later lines, an earlier error of a chain), no wrapper of another error, and no frame in torch's
    device code (`torch/cuda/random.py` restoring the RNG states of GPUs the host lacks raises an IndexError)."""
    errors = list(LAST_ERROR.finditer(text))
    if not errors:
        return None
    words = _error_words(text)
    if re.search(WRAPPER, words) or re.search(DEVICE_WORDS, words):
        return None
    if any(re.search(r"[/\\]torch[/\\](?:cuda|distributed|serialization|random)", path)
           for path, _ in _frames(text)):
        return None
    return errors[-1].group(0).strip()


def shown(facts: Facts, scenario: registry.Scenario, other: registry.Scenario) -> bool:
    """Whether the input shows the scenario's case, beyond its message, and not the other's as well: a frame it
    raises in or a signal of its code that the runner-up does not claim (an embedding's frame is a tokenizer's
    output and a batch never moved alike)."""
    # mps_device is read from the message's devices: a Mac, not how a tensor got where it is; torchscript says the
    # error was raised inside a scripted or traced graph, where an input never moved raises too (a recorded device
    # is shown by the serialized line, constant_raised, or by the code's trace)
    frames = set(scenario.clues.frames) - set(other.clues.frames) - {"mps_device", "torchscript"}
    # (a signal four or more scenarios claim, a moved model run on device inputs, narrows the candidates to them:
    # it shows none of their cases)
    code = {signal for signal in set(scenario.clues.code) - set(other.clues.code) if _claimed(signal) < 4}
    return bool(set(facts.frames) & frames or set(facts.code) & code)


# ---- the command line's text ---------------------------------------------------------------------


# the side the message shows on the CPU, in words
SIDE_WORDS = {"input": "the input's side (the data the op was given)",
              "weights": "the model's side (a layer's weights)",
              "state": "the updated tensor (an optimizer's or an EMA's state)",
              "table": "the tensor read from (a table), its index on the device"}


def render(d: Diagnosis) -> str:
    f = d.facts
    lines = ["Facts:"]
    for label, value in (("message", f.message), ("template", f.template), ("devices", " and ".join(f.devices)),
                         ("argument", f.argument), ("op", f.op), ("on the CPU", SIDE_WORDS.get(f.side or "")),
                         ("frames", ", ".join(f.frames)),
                         ("code", ", ".join(f.code)), ("the paste says", ", ".join(CODE_WHY[r] for r in f.run)),
                         ("torch", f.torch_version)):
        if value:
            lines.append(f"  {label}: {value}")
    if len(lines) == 1:
        lines = ["Facts: none read (no device error's message, frame or code)"]
    headline = {"scenario": "The likeliest scenarios:", "ambiguous": "Candidate scenarios:",
                "not_device_error": "Not a device error.", "fixed_upstream": "Fixed upstream.",
                "not_in_catalog": "Not in the catalog.", "unknown": "Not a device error I can read."}[d.verdict]
    lines += ["", headline]
    if d.note and d.verdict != "scenario":
        lines.append(f"  {d.note}")
    for i, m in enumerate(d.matches, 1):
        lines.append(f"{i}. {m.slug} (score {m.score:g}): {registry.get(m.slug).title}")
        lines += [f"     why: {w}" for w in m.why]
        if m.confirm:
            lines.append(f"     check: {m.confirm}")
        lines.append(f"     fix: {m.fix}")
    if d.note and d.verdict == "scenario":  # a caveat of the lesson: another cause of the same message
        lines += ["", f"But: {d.note}"]
    return "\n".join(lines)


def summary(d: Diagnosis) -> str:
    """A few lines for a failing test's report: the likeliest scenario, why, and the command that shows it (or the
    cause outside the catalog said first, and the lesson for the other case)."""
    if d.verdict == "not_in_catalog" and d.matches:
        return f"not in the catalog, first: {d.note}\nthe lesson: samedevice show {d.matches[0].slug}"
    if not d.found:
        return ""
    top = d.matches[0]
    lines = [f"likeliest scenario: {top.slug}: {registry.get(top.slug).title}", f"why: {'; '.join(top.why)}"]
    if d.verdict == "ambiguous" and len(d.matches) > 1:
        lines.append(f"also fits: {', '.join(m.slug for m in d.matches[1:])} ({d.note})")
    elif d.note:
        lines.append(f"but: {d.note}")
    lines.append(f"the lesson: samedevice show {top.slug}")
    return "\n".join(lines)


def as_json(d: Diagnosis) -> str:
    return json.dumps(d.to_json(), indent=2)

