// The emulated device's C++ device guard, registered for PrivateUse1 before PyTorch's Python one.
//
// PyTorch's Python device guard (torch/csrc/acc/Module.cpp, PythonDeviceGuard) reports device 0
// from getDevice, ignores setDevice, reports one device, and calls into Python from noexcept
// methods (an abort when an error is pending or the interpreter is exiting). This guard copies
// what CUDA's guard (c10/cuda/impl/CUDAGuardImpl.h) does, for a device whose work runs on the host:
// - the current device is per host thread, as cudaSetDevice's is;
// - deviceCount() reports both emulated devices, so the autograd engine keeps a ready queue for each
//   (engine.cpp sizes device_ready_queues_ from the largest count of any guard);
// - every op runs synchronously on the host, so streams are the default one and events have
//   completed when they are recorded.
// It also registers an allocator that refuses, with a clear message, the one path that would
// allocate emulated memory in C++ (a storage made on the device), instead of a null allocator crash.
#include <c10/core/Allocator.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/util/Exception.h>

namespace {
using namespace c10;

constexpr DeviceIndex kDeviceCount = 2;
thread_local DeviceIndex current_index = 0;

struct EmulatedGuard final : public impl::DeviceGuardImplInterface {
  DeviceType type() const override { return DeviceType::PrivateUse1; }
  Device exchangeDevice(Device d) const override {
    Device old = getDevice();
    setDevice(d);
    return old;
  }
  Device getDevice() const override { return Device(DeviceType::PrivateUse1, current_index); }
  void setDevice(Device d) const override {
    TORCH_CHECK(d.index() >= 0 && d.index() < kDeviceCount, "emulated device index ", int(d.index()),
                " is out of range: the emulator has ", int(kDeviceCount), " devices, indices 0 to ",
                int(kDeviceCount) - 1);
    current_index = d.index();
  }
  void uncheckedSetDevice(Device d) const noexcept override {
    if (d.index() >= 0 && d.index() < kDeviceCount) current_index = d.index();
  }
  Stream getStream(Device d) const override { return Stream(Stream::DEFAULT, d); }
  Stream getNewStream(Device d, int /*priority*/) const override { return Stream(Stream::DEFAULT, d); }
  Stream exchangeStream(Stream s) const override { return Stream(Stream::DEFAULT, s.device()); }
  DeviceIndex deviceCount() const noexcept override { return kDeviceCount; }
  void record(void** event, const Stream&, const DeviceIndex, const EventFlag) const override { *event = nullptr; }
  void block(void*, const Stream&) const override {}
  bool queryEvent(void*) const override { return true; }
  void destroyEvent(void*, const DeviceIndex) const noexcept override {}
  bool queryStream(const Stream&) const override { return true; }
  void synchronizeStream(const Stream&) const override {}
  void synchronizeEvent(void*) const override {}
  void synchronizeDevice(const DeviceIndex) const override {}
};

struct RefusingAllocator final : public Allocator {
  DataPtr allocate(size_t) override {
    TORCH_CHECK_NOT_IMPLEMENTED(false,
        "emulated accelerator: storages cannot be allocated on emulated devices (UntypedStorage(..., "
        "device=...), storage.to(...), a map_location callable that moves storages); load with "
        "map_location='emulated:N' or a dict such as {'cpu': 'emulated:1'} instead");
  }
  void copy_data(void*, const void*, std::size_t) const override {}
};
RefusingAllocator refusing_allocator;
}  // namespace

extern "C" int samedevice_register_guard() {
  if (impl::hasDeviceGuardImpl(DeviceType::PrivateUse1)) return 0;  // first wins
  impl::registerDeviceGuard(DeviceType::PrivateUse1, new EmulatedGuard());
  SetAllocator(DeviceType::PrivateUse1, &refusing_allocator);
  return 1;
}
