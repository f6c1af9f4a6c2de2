// The minimal kernels a PrivateUse1 backend registers itself, after PyTorch's own example backend (openreg,
// test/cpp_extensions/open_registration_extension, aten/native/Minimal.cpp): allocation, views and geometry,
// copies across devices, reading one number. Every other op reaches the fallback (fallback.cpp) or, for an op
// whose only kernel is a composite, PyTorch's composite kernel, whose parts arrive here.
#include "core.h"

#include <ATen/EmptyTensor.h>
#include <ATen/core/op_registration/adaption.h>
#include <ATen/native/Resize.h>
#include <ATen/ops/_local_scalar_dense_native.h>
#include <ATen/ops/_reshape_alias_native.h>
#include <ATen/ops/as_strided_cpu_dispatch.h>
#include <ATen/ops/copy_native.h>
#include <ATen/ops/set_cpu_dispatch.h>
#include <ATen/ops/set_native.h>
#include <ATen/ops/view_native.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include <algorithm>

namespace samedevice {
namespace {

bool is_device(const at::Tensor& t) { return t.defined() && t.device().type() == c10::DeviceType::PrivateUse1; }

void check_options(std::optional<c10::Layout> layout, std::optional<bool> pin_memory) {
  TORCH_CHECK_NOT_IMPLEMENTED(c10::layout_or_default(layout) == c10::Layout::Strided, "emulated accelerator: ",
                              c10::layout_or_default(layout), " tensors are not supported on ",
                              c10::get_privateuse1_backend(), " devices (only dense, strided tensors are)");
  // empty_cuda (aten/src/ATen/native/cuda/EmptyTensor.cpp): "Only dense CPU tensors can be pinned"
  TORCH_CHECK(!c10::pinned_memory_or_default(pin_memory), "Only dense CPU tensors can be pinned");
}

// The device an op on `device` lands on: an index-less one is the current device, as CUDA's guard resolves it.
c10::Device resolved(std::optional<c10::Device> device) {
  auto d = c10::device_or_default(device);
  d = d.has_index() ? d : c10::Device(d.type(), current_device());
  check_present(d.index());  // before the guard, which would refuse the index in its own words
  return d;
}

at::Tensor empty_memory_format(c10::IntArrayRef size, std::optional<c10::ScalarType> dtype,
                               std::optional<c10::Layout> layout, std::optional<c10::Device> device,
                               std::optional<bool> pin_memory, std::optional<c10::MemoryFormat> memory_format) {
  check_options(layout, pin_memory);
  const c10::DeviceGuard guard(resolved(device));
  return at::detail::empty_generic(size, device_allocator(), kDeviceKeys, c10::dtype_or_default(dtype),
                                   memory_format);
}

at::Tensor empty_strided(c10::IntArrayRef size, c10::IntArrayRef stride, std::optional<c10::ScalarType> dtype,
                         std::optional<c10::Layout> layout, std::optional<c10::Device> device,
                         std::optional<bool> pin_memory) {
  check_options(layout, pin_memory);
  const c10::DeviceGuard guard(resolved(device));
  return at::detail::empty_strided_generic(size, stride, device_allocator(), kDeviceKeys,
                                           c10::dtype_or_default(dtype));
}

at::Tensor as_strided(const at::Tensor& self, c10::SymIntArrayRef size, c10::SymIntArrayRef stride,
                      std::optional<c10::SymInt> storage_offset) {
  return at::cpu::as_strided_symint(self, size, stride, std::move(storage_offset));
}

at::Tensor view(const at::Tensor& self, c10::SymIntArrayRef size) {
  return at::native::view(self, C10_AS_INTARRAYREF_SLOW(size));
}

at::Tensor reshape_alias(const at::Tensor& self, c10::SymIntArrayRef size, c10::SymIntArrayRef stride) {
  return at::native::_reshape_alias(self, C10_AS_INTARRAYREF_SLOW(size), C10_AS_INTARRAYREF_SLOW(stride));
}

const at::Tensor& resize_(const at::Tensor& self, c10::SymIntArrayRef size,
                          std::optional<at::MemoryFormat> memory_format) {
  // the storage's allocator is the device's: a larger size allocates (and counts) on the tensor's device
  const c10::DeviceGuard guard(self.device());
  return at::native::resize_(self, C10_AS_INTARRAYREF_SLOW(size), memory_format);
}

// set_ resizes the storage it is given when the geometry needs more: on the storage's device, as CUDA's guard does
at::Tensor& set_source_tensor(at::Tensor& self, const at::Tensor& source) {
  const c10::DeviceGuard guard(source.device());
  return at::native::set_tensor_(self, source);
}
at::Tensor& set_source_storage(at::Tensor& self, at::Storage source) {
  const c10::DeviceGuard guard(source.device());
  return at::native::set_(self, source);
}
at::Tensor& set_source_storage_offset(at::Tensor& self, at::Storage source, int64_t offset, c10::IntArrayRef size,
                                      c10::IntArrayRef stride) {
  const c10::DeviceGuard guard(source.device());
  return at::cpu::set_(self, source, offset, size, stride);
}
// `t.set_()`: an empty storage on the tensor's device (set_cuda_ in aten/src/ATen/native/cuda/TensorFactories.cu)
at::Tensor& set_empty(at::Tensor& self) {
  const c10::DeviceGuard guard(self.device());
  c10::Storage storage(c10::Storage::use_byte_size_t(), 0, device_allocator(), /*resizable=*/true);
  return at::cpu::set_(self, storage, 0, {0}, {});
}

// `.to(device)`, `.cpu()`, `copy_` across devices: CUDA allows them all (copy_impl in aten/src/ATen/native/Copy.cpp
// sends any copy that involves a PrivateUse1 tensor here). The bytes move on the host, converting dtypes as CPU's
// copy_ does.
at::Tensor copy_from(const at::Tensor& self, const at::Tensor& dst, bool non_blocking) {
  auto host_dst = dst.is_cpu() ? dst : host_alias(dst);
  auto host_src = self.is_cpu() ? self : host_alias(self);
  at::native::copy_(host_dst, host_src, non_blocking);
  return dst;
}

at::Tensor copy_from_and_resize(const at::Tensor& self, const at::Tensor& dst) {
  resize_(dst, self.sym_sizes(), std::nullopt);
  return copy_from(self, dst, false);
}

at::Scalar local_scalar_dense(const at::Tensor& self) { return at::native::_local_scalar_dense_cpu(host_alias(self)); }

// Module._apply keeps a Parameter (`param.data = moved`) when torch._has_compatible_shallow_copy_type holds, which
// PyTorch's TensorImpl answers for its built-in dense backends only; a PrivateUse1 backend answers for itself
// (c10/core/TensorImpl.h, has_compatible_shallow_copy_type). CUDA's answer: two dense tensors of CPU or the
// accelerator are compatible, whatever their devices; so here, with this device standing for CUDA.
bool has_compatible_shallow_copy_type(const at::Tensor& self, const at::Tensor& from) {
  auto as_cuda = [](c10::DispatchKeySet ks) {
    if (!ks.has_backend(c10::BackendComponent::PrivateUse1Bit)) return ks;
    return ks.remove_backend(c10::BackendComponent::PrivateUse1Bit) |
           c10::DispatchKeySet(c10::BackendComponent::CUDABit);
  };
  auto probe = at::detail::make_tensor<c10::TensorImpl>(c10::TensorImpl::VIEW, c10::Storage(self.storage()),
                                                        as_cuda(self.key_set()), self.dtype());
  return probe.unsafeGetTensorImpl()->has_compatible_shallow_copy_type(as_cuda(from.key_set()));
}

// A convolution whose input is on the device: PyTorch's composite (_convolution, aten/src/ATen/native/Convolution.cpp)
// picks the backend by the input's device, and gives a PrivateUse1 input ConvBackend::Overrideable, i.e. these two
// kernels. CUDA's input takes cuDNN there, which first makes check_input_same_type_as_parameters (copied below with
// its message); then CPU's convolution runs on the host aliases.
// (toString names a CUDA tensor's type as Python does, "torch.cuda.FloatTensor", and a PrivateUse1 one otherwise:
// the device's is written here as CUDA's would be)
std::string type_name(const at::Tensor& t) {
  if (!is_device(t)) return t.toString();
  return "torch." + c10::get_privateuse1_backend() + "." + c10::toString(t.scalar_type()) + "Tensor";
}

void check_input_same_type_as_parameters(const at::Tensor& input, const at::Tensor& weight, const at::Tensor& bias) {
  TORCH_CHECK(input.options().type_equal(weight.options()), "Input type (", type_name(input), ") and weight type (",
              type_name(weight), ") should be the same");
  TORCH_CHECK(!bias.defined() || input.options().type_equal(bias.options()), "Input type (", type_name(input),
              ") and bias type (", type_name(bias), ") should be the same");
}

at::Tensor host_or_undefined(const at::Tensor& t) { return t.defined() ? host_alias(t) : t; }

at::Tensor convolution_overrideable(const at::Tensor& input, const at::Tensor& weight,
                                    const std::optional<at::Tensor>& bias_opt, c10::IntArrayRef stride,
                                    c10::IntArrayRef padding, c10::IntArrayRef dilation, bool transposed,
                                    c10::IntArrayRef output_padding, int64_t groups) {
  const at::Tensor bias = bias_opt.value_or(at::Tensor());
  check_input_same_type_as_parameters(input, weight, bias);
  // then cudnn_convolution's codegen check (the type check compares device types, not indices): emulated:0 and
  // emulated:1 mix as cuda:0 and cuda:1 do; the bias, added afterwards, meets a TensorIterator
  std::optional<c10::Device> common;
  std::string backend = c10::get_privateuse1_backend();
  std::transform(backend.begin(), backend.end(), backend.begin(), ::toupper);
  const std::string wrapper = "wrapper_" + backend + "__cudnn_convolution";
  c10::impl::check_and_update_common_device(common, input, wrapper.c_str(), "self");
  c10::impl::check_and_update_common_device(common, weight, wrapper.c_str(), "weight");
  TORCH_CHECK(!bias.defined() || bias.device() == input.device(), "Expected all tensors to be on the same device, "
              "but found at least two devices, ", input.device(), " and ", bias.device(), "!");
  auto out = at::convolution(host_alias(input), host_alias(weight), host_or_undefined(bias), stride, padding, dilation,
                             transposed, output_padding, groups);
  return device_result(out, input.device().index());
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> convolution_backward_overrideable(
    const at::Tensor& grad_output, const at::Tensor& input, const at::Tensor& weight, c10::IntArrayRef stride,
    c10::IntArrayRef padding, c10::IntArrayRef dilation, bool transposed, c10::IntArrayRef output_padding,
    int64_t groups, std::array<bool, 3> output_mask) {
  check_input_same_type_as_parameters(input, weight, at::Tensor());
  std::vector<int64_t> bias_sizes{transposed ? weight.size(1) * groups : weight.size(0)};
  auto [gi, gw, gb] = at::convolution_backward(host_alias(grad_output), host_alias(input), host_alias(weight),
                                               c10::IntArrayRef(bias_sizes), stride, padding, dilation, transposed,
                                               output_padding, groups, output_mask);
  auto index = input.device().index();
  auto back = [&](const at::Tensor& t) { return t.defined() ? device_result(t, index) : t; };
  return {back(gi), back(gw), back(gb)};
}

}  // namespace

void register_kernels(torch::Library& m) {
  m.impl("convolution_overrideable", TORCH_FN(convolution_overrideable));
  m.impl("convolution_backward_overrideable", TORCH_FN(convolution_backward_overrideable));
  m.impl("empty.memory_format", TORCH_FN(empty_memory_format));
  m.impl("empty_strided", TORCH_FN(empty_strided));
  m.impl("as_strided", TORCH_FN(as_strided));
  m.impl("view", TORCH_FN(view));
  m.impl("_reshape_alias", TORCH_FN(reshape_alias));
  m.impl("resize_", TORCH_FN(resize_));
  m.impl("set_.source_Tensor", TORCH_FN(set_source_tensor));
  m.impl("set_.source_Storage", TORCH_FN(set_source_storage));
  m.impl("set_.source_Storage_storage_offset", TORCH_FN(set_source_storage_offset));
  m.impl("set_", TORCH_FN(set_empty));
  m.impl("_copy_from", TORCH_FN(copy_from));
  m.impl("_copy_from_and_resize", TORCH_FN(copy_from_and_resize));
  m.impl("_local_scalar_dense", TORCH_FN(local_scalar_dense));
  m.impl("_has_compatible_shallow_copy_type", TORCH_FN(has_compatible_shallow_copy_type));
}

}  // namespace samedevice
