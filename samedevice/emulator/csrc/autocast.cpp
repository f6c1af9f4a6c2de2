// CUDA's autocast policy for the emulated device (AutocastPrivateUse1), registered when the emulator registers.
//
// PyTorch registers autocast kernels for CUDA, CPU, XPU, MPS and MTIA (aten/src/ATen/autocast_mode.cpp) and none
// for PrivateUse1, whose backend must register its own: without them the first op under
// torch.autocast("emulated") fails with "Could not run 'aten::linear' with arguments from the 'Autocastemulated'
// backend". This file registers, for AutocastPrivateUse1, what autocast_mode.cpp registers for CUDA, from the same op
// lists in ATen/autocast_mode.h (AT_FORALL_LOWER_PRECISION_FP, AT_FORALL_FP32, AT_FORALL_FP32_SET_OPT_DTYPE,
// AT_FORALL_DIFFERENT_REDISPATCH_SIGNATURE, AT_FORALL_PROMOTE), the ban on binary_cross_entropy, and a fallthrough
// for every other op. Left out: CUDA's cudnn_convolution and cudnn_convolution_transpose, which the emulated device
// never reaches (convolution has already been cast above them). The casts themselves are PyTorch's (WrapFunction,
// cached_cast with its weight cache, the nesting and cache_enabled of torch.autocast).
#include <ATen/autocast_mode.h>
#include <torch/library.h>

#include <memory>

namespace {
using at::Tensor;

// autocast_mode.cpp's binary_cross_entropy_banned (static there), with its message
Tensor binary_cross_entropy_banned(const Tensor&, const Tensor&, const std::optional<Tensor>&, int64_t) {
  TORCH_CHECK(false,
      "torch.nn.functional.binary_cross_entropy and torch.nn.BCELoss are unsafe to autocast.\n"
      "Many models use a sigmoid layer right before the binary cross entropy layer.\n"
      "In this case, combine the two layers using torch.nn.functional.binary_cross_entropy_with_logits\n"
      "or torch.nn.BCEWithLogitsLoss.  binary_cross_entropy_with_logits and BCEWithLogits are\n"
      "safe to autocast.");
}

std::unique_ptr<torch::Library> fallthrough_lib, kernels_lib;  // kept: a registration lives as long as its Library

int register_autocast() {
  if (kernels_lib) return 1;
  fallthrough_lib = std::make_unique<torch::Library>(
      torch::Library::IMPL, "_", c10::DispatchKey::AutocastPrivateUse1, __FILE__, __LINE__);
  fallthrough_lib->fallback(torch::CppFunction::makeFallthrough());
  kernels_lib = std::make_unique<torch::Library>(
      torch::Library::IMPL, "aten", c10::DispatchKey::AutocastPrivateUse1, __FILE__, __LINE__);
  torch::Library& m = *kernels_lib;  // the KERNEL_* macros register on `m`
  using namespace at;  // the op lists name Scalar, ScalarType, IntArrayRef as inside at::autocast

#define _KERNEL_EMULATED_LOW_PRECISION_FP(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, lower_precision_fp)
  AT_FORALL_LOWER_PRECISION_FP(_KERNEL_EMULATED_LOW_PRECISION_FP)
#define _KERNEL_EMULATED_FP32(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, fp32)
  AT_FORALL_FP32(_KERNEL_EMULATED_FP32)
#define _KERNEL_EMULATED_FP32_SET_OPT_DTYPE(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, fp32_set_opt_dtype)
  AT_FORALL_FP32_SET_OPT_DTYPE(_KERNEL_EMULATED_FP32_SET_OPT_DTYPE)
  AT_FORALL_DIFFERENT_REDISPATCH_SIGNATURE(KERNEL_DIFFERENT_REDISPATCH_SIGNATURE_PRIVATEUSEONE)
#define _KERNEL_EMULATED_PROMOTE(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, promote)
  AT_FORALL_PROMOTE(_KERNEL_EMULATED_PROMOTE)
  m.impl(TORCH_SELECTIVE_NAME("aten::binary_cross_entropy"), TORCH_FN(binary_cross_entropy_banned));
  return 1;
}
}  // namespace

// Registers the policy (once); called from Python after the device guard, so that it follows the guard's fate.
// 1: registered; 0: PyTorch refused (another autocast fallback or kernel for the key): no exception crosses
// into ctypes, which would end the process.
extern "C" int samedevice_register_autocast() {
  try {
    return register_autocast();
  } catch (const c10::Error&) {
    return 0;
  }
}
