// What the native core's files share: the device's memory (allocator.cpp), the host view of device memory that
// lets CPU's kernels run on it (fallback.cpp), and the device guard's state (guard.cpp).
//
// A device tensor is a plain at::Tensor whose storage lives in host memory, counted per device, and whose dispatch
// key is PrivateUse1. A CPU kernel runs on it through a host alias: a CPU tensor over the same bytes (no copy).
#pragma once

#include <ATen/ATen.h>
#include <c10/core/Allocator.h>
#include <c10/core/StorageImpl.h>

#include <string>

namespace samedevice {

constexpr c10::DeviceIndex kDeviceCount = 2;
constexpr c10::DispatchKeySet kDeviceKeys{c10::DispatchKey::PrivateUse1};

// guard.cpp
c10::DeviceIndex current_device();
bool host_is_absent();
// How many of the devices the host shows (samedevice.emulator.visible): kDeviceCount unless it plays fewer.
int visible_devices();
// The refusal of an allocation on an absent host or past the device count (registration.py's check_present).
void check_present(c10::DeviceIndex index);
// An op's result on the device, in a process forked after its parent used it: CUDA's kernel launch there fails with
// cudaErrorInitializationError ("CUDA error: initialization error").
void check_not_forked();
// Whether the device has started (a tensor allocated on it, its current device set, its generator or a stream
// used): CUDA's lazy init, after which its allocator counts as initialized.
bool device_started();

// allocator.cpp: the device allocator (at::GetAllocator(kPrivateUse1)) allocates on the current device.
c10::Allocator* device_allocator();
// Host memory allocated elsewhere (a CPU kernel's fresh result) becomes device memory on `index`: counted there
// (torch.OutOfMemoryError past the capacity) and freed with it.
c10::DataPtr adopt(c10::DataPtr host, size_t nbytes, c10::DeviceIndex index);
// The allocator of a host alias's storage: when a CPU kernel resizes a device tensor (an out= result, resize_), the
// new memory is device memory on the current device, handed back to the device storage afterwards.
c10::Allocator* host_alias_allocator();
// The device `data` is counted on, when it is device memory already (what the allocators above hand out: a host
// alias a CPU kernel resized holds some); nullopt for any other memory.
std::optional<c10::DeviceIndex> counted_on(const c10::DataPtr& data);

// fallback.cpp
// A CPU tensor over `t`'s memory, with its sizes, strides and offset (one host storage per device storage).
at::Tensor host_alias(const at::Tensor& t);
// A CPU kernel's fresh result as a device tensor on `index`, its memory taken over (counted there).
at::Tensor device_result(const at::Tensor& host, c10::DeviceIndex index);

}  // namespace samedevice
