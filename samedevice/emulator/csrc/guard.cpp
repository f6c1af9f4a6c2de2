// The emulated device's C++ device guard, registered for PrivateUse1 before PyTorch's Python one.
//
// PyTorch's Python device guard (torch/csrc/acc/Module.cpp, PythonDeviceGuard) reports device 0
// from getDevice, ignores setDevice, reports one device, and calls into Python from noexcept
// methods (an abort when an error is pending or the interpreter is exiting). This guard copies
// what CUDA's guard (c10/cuda/impl/CUDAGuardImpl.h) does, for a device whose work runs on the host:
// - the current device is per host thread, as cudaSetDevice's is;
// - deviceCount() reports both emulated devices, so the autograd engine keeps a ready queue for each
//   (engine.cpp sizes device_ready_queues_ from the largest count of any guard);
// - streams as CUDA's guard keeps them (CUDAStream.cpp): each device has its default stream (id 0)
//   and a pool of 32 more handed out round robin; the current stream is per host thread and device,
//   and exchangeStream switches it. Every op runs synchronously on the host, so a stream has always
//   finished its work and an event has completed when it is recorded; events with timing record the
//   host clock, so elapsed_time is the host time between two records.
// It also registers an allocator that refuses, with a clear message, the one path that would
// allocate emulated memory in C++ (a storage made on the device), instead of a null allocator crash,
// and the backend's hooks (PrivateUse1HooksInterface, in place of the Python ones), which give the
// device what CUDA's hooks give CUDA: its generator type and pinned host memory.
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <c10/core/Allocator.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/core/impl/alloc_cpu.h>
#include <c10/util/Exception.h>
#include <torch/csrc/autograd/engine.h>

#include <pthread.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>

namespace {
using namespace c10;

constexpr DeviceIndex kDeviceCount = 2;
thread_local DeviceIndex current_index = 0;
thread_local std::array<StreamId, kDeviceCount> current_stream{};  // 0: the default stream
constexpr StreamId kStreamsPerPool = 32;  // CUDAStream.cpp's kStreamsPerPool
std::array<std::atomic<StreamId>, kDeviceCount> next_pool_stream{};

// An event, made at its first record (CUDAGuardImpl::record creates its cudaEvent_t lazily, with timing
// only for EventFlag::BACKEND_DEFAULT, i.e. torch.Event(enable_timing=True)).
struct EmulatedEvent {
  bool timing;
  std::chrono::steady_clock::time_point recorded;
};
// how many devices the host shows (registration.py): all of them; 0 plays a host without the accelerator, fewer a
// host with fewer GPUs than the one that saved a checkpoint
std::atomic<int> visible{kDeviceCount};

// CUDA's fork rule (torch/csrc/cuda/Module.cpp, poison_fork and forked_child): a process forked after CUDA started
// in its parent cannot use CUDA ("Cannot re-initialize CUDA in forked subprocess"). Here the device has started
// once a tensor was allocated on it; a child forked after that is in a bad fork.
std::atomic<bool> started{false};
std::atomic<bool> bad_fork{false};
void forked_child() {
  if (started) bad_fork = true;
}
const int fork_watch = pthread_atfork(nullptr, nullptr, forked_child);

// The checks and messages of c10/cuda/CUDAEvent.h (elapsed_time) and c10/core/impl/InlineEvent.h, in their order:
// timing first, then recorded; both ValueErrors in Python.
double elapsed_ms(void* start, void* end) {
  auto a = static_cast<EmulatedEvent*>(start), b = static_cast<EmulatedEvent*>(end);
  TORCH_CHECK_VALUE(!(a && !a->timing) && !(b && !b->timing),
                    "Both events must be created with argument 'enable_timing=True'.");
  TORCH_CHECK_VALUE(a && b, "Both events must be recorded before calculating elapsed time.");
  return std::chrono::duration<double, std::milli>(b->recorded - a->recorded).count();
}

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
  Stream getStream(Device d) const override {
    return Stream(Stream::UNSAFE, resolved(d), current_stream.at(checked(d)));
  }
  Stream getDefaultStream(Device d) const override { return Stream(Stream::DEFAULT, resolved(d)); }
  Stream getNewStream(Device d, int /*priority*/) const override {
    return Stream(Stream::UNSAFE, resolved(d), 1 + next_pool_stream[checked(d)]++ % kStreamsPerPool);
  }
  Stream getStreamFromGlobalPool(Device d, bool /*high_priority*/) const override { return getNewStream(d, 0); }
  Stream exchangeStream(Stream s) const override {
    Stream old = getStream(s.device());
    current_stream[checked(s.device())] = s.id();
    return old;
  }
  DeviceIndex deviceCount() const noexcept override { return kDeviceCount; }
  void record(void** event, const Stream& stream, const DeviceIndex device_index, const EventFlag flag) const override {
    // CUDAGuardImpl::record's check, with its message
    TORCH_CHECK(device_index == -1 || device_index == stream.device_index(), "Event device index ",
                int(device_index), " does not match recording stream's device index ", int(stream.device_index()), ".");
    if (*event == nullptr) *event = new EmulatedEvent{flag == EventFlag::BACKEND_DEFAULT, {}};
    static_cast<EmulatedEvent*>(*event)->recorded = std::chrono::steady_clock::now();
  }
  void block(void*, const Stream&) const override {}
  bool queryEvent(void*) const override { return true; }
  void destroyEvent(void* event, const DeviceIndex) const noexcept override { delete static_cast<EmulatedEvent*>(event); }
  bool queryStream(const Stream&) const override { return true; }
  void synchronizeStream(const Stream&) const override {}
  void synchronizeEvent(void*) const override {}
  void synchronizeDevice(const DeviceIndex) const override {}
  double elapsedTime(void* start, void* end, const DeviceIndex) const override { return elapsed_ms(start, end); }

 private:
  static Device resolved(Device d) { return Device(DeviceType::PrivateUse1, static_cast<DeviceIndex>(checked(d))); }
  static size_t checked(Device d) {
    if (d.index() == -1) return static_cast<size_t>(current_index);  // index-less: the current device, as CUDA's
    TORCH_CHECK(d.index() >= 0 && d.index() < kDeviceCount, "emulated device index ", int(d.index()),
                " is out of range: the emulator has ", int(kDeviceCount), " devices, indices 0 to ",
                int(kDeviceCount) - 1);
    return static_cast<size_t>(d.index());
  }
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

// torch.Generator(device="emulated:N"): the device's numbers are CPU's, so the state is a CPU
// generator's (mt19937); the device and dispatch key are the device's, as CUDAGeneratorImpl's are
// (CUDAGeneratorImpl.cpp: Device(CUDA, device_index) with the index as given, -1 included, and
// DispatchKeySet(DispatchKey::CUDA)). A random op on the device lends this state to a CPU generator
// (rng.py); a CPU kernel refuses the generator by its device type, as it refuses a CUDA one.
struct EmulatedGenerator final : public at::CPUGeneratorImpl {
  explicit EmulatedGenerator(DeviceIndex index) {
    device_ = Device(DeviceType::PrivateUse1, index);
    key_set_ = DispatchKeySet(DispatchKey::PrivateUse1);
  }
  EmulatedGenerator* clone_impl() const override {
    auto copy = new EmulatedGenerator(device_.index());
    copy->set_state(*get_state());
    return copy;
  }
};

at::Generator make_generator(DeviceIndex index) {
  TORCH_CHECK(index >= -1 && index < kDeviceCount, "emulated device index ", int(index),
              " is out of range: the emulator has ", int(kDeviceCount), " devices, indices 0 to ",
              int(kDeviceCount) - 1);
  return at::make_generator<EmulatedGenerator>(index);
}

// Pinned host memory (x.pin_memory(), torch.empty(..., pin_memory=True), DataLoader(pin_memory=True)):
// host memory from the CPU allocator, remembered so that is_pinned() is true for any address inside a
// block, as cudaPointerGetAttributes answers for cudaHostAlloc'd memory (CUDAHooks::isPinnedPtr, which
// answers false on a host without a device). Copies from it to the device are synchronous, as all are.
auto* pinned_mutex = new std::mutex();  // both never destroyed: pinned blocks may die at exit
auto* pinned_blocks = new std::map<const char*, size_t>();

void free_pinned(void* p) {
  {
    std::lock_guard<std::mutex> lock(*pinned_mutex);
    pinned_blocks->erase(static_cast<const char*>(p));
  }
  c10::free_cpu(p);
}

bool is_pinned(const void* ptr) {
  auto p = static_cast<const char*>(ptr);
  std::lock_guard<std::mutex> lock(*pinned_mutex);
  auto next = pinned_blocks->upper_bound(p);
  if (next == pinned_blocks->begin()) return false;
  --next;
  return p < next->first + next->second;
}

struct PinnedAllocator final : public Allocator {
  DataPtr allocate(size_t n) override {
    if (n == 0) return {nullptr, nullptr, &c10::detail::deleteNothing, Device(DeviceType::CPU)};
    void* p = c10::alloc_cpu(n);
    {
      std::lock_guard<std::mutex> lock(*pinned_mutex);
      (*pinned_blocks)[static_cast<const char*>(p)] = n;
    }
    return {p, p, &free_pinned, Device(DeviceType::CPU)};
  }
  void copy_data(void* dest, const void* src, std::size_t count) const override { std::memcpy(dest, src, count); }
};
PinnedAllocator pinned_allocator;

// The hooks, as CUDAHooks (aten/src/ATen/cuda/detail/CUDAHooks.cpp) for what the emulator has: the
// device count is the devices the host shows and the current device is the guard's; on a host that plays absent
// the device is not available, pinned memory cannot be had, and no pointer is pinned.
struct EmulatedHooks final : public at::PrivateUse1HooksInterface {
  bool isBuilt() const override { return true; }
  bool isAvailable() const override { return visible > 0; }
  bool hasPrimaryContext(DeviceIndex) const override { return true; }
  void init() const override {}
  DeviceIndex deviceCount() const override { return static_cast<DeviceIndex>(visible.load()); }
  void setCurrentDevice(DeviceIndex d) const override { EmulatedGuard().setDevice(Device(DeviceType::PrivateUse1, d)); }
  DeviceIndex getCurrentDevice() const override { return current_index; }
  DeviceIndex exchangeDevice(DeviceIndex d) const override {
    return EmulatedGuard().exchangeDevice(Device(DeviceType::PrivateUse1, d)).index();
  }
  DeviceIndex maybeExchangeDevice(DeviceIndex d) const override { return exchangeDevice(d); }
  at::Generator getNewGenerator(DeviceIndex index) const override {
    TORCH_CHECK(visible > 0, "Found no emulated device on this host: a device generator needs the accelerator");
    // createCUDAGenerator's check (CUDAGeneratorImpl.cpp) against the devices the host has
    TORCH_CHECK(index < visible, "The device_index is invalid.");
    return make_generator(index);
  }
  bool isPinnedPtr(const void* data) const override { return visible > 0 && is_pinned(data); }
  Allocator* getPinnedMemoryAllocator() const override {
    TORCH_CHECK(visible > 0, "Found no emulated device on this host: pinned memory needs the accelerator "
                "(samedevice.emulator.absent() or SAMEDEVICE_EMULATOR_ABSENT=1 plays a host without it)");
    return &pinned_allocator;
  }
};
}  // namespace

namespace samedevice {
c10::DeviceIndex current_device() { return current_index; }
bool host_is_absent() { return visible == 0; }
// registration.py's check_present, in its words
void check_present(c10::DeviceIndex index) {
  // torch.cuda._lazy_init's refusal, in its words with the backend's name
  TORCH_CHECK(!bad_fork, "Cannot re-initialize ", c10::get_privateuse1_backend(), " in forked subprocess. To use ",
              c10::get_privateuse1_backend(), " with multiprocessing, you must use the 'spawn' start method");
  TORCH_CHECK(visible > 0, "Found no ", c10::get_privateuse1_backend(), " device on this host: torch.",
              c10::get_privateuse1_backend(), ".is_available() is False (samedevice.emulator.absent() or "
              "SAMEDEVICE_EMULATOR_ABSENT=1 plays a host without the accelerator)");
  TORCH_CHECK(index >= 0 && index < kDeviceCount, c10::get_privateuse1_backend(), ":", int(index),
              " does not exist: the emulator has ", int(kDeviceCount), " devices, indices 0 to ", int(kDeviceCount) - 1);
  const int shown = visible;
  TORCH_CHECK(index < shown, c10::get_privateuse1_backend(), ":", int(index), " does not exist on this host: it has ",
              shown, " of the emulator's ", int(kDeviceCount), " devices (samedevice.emulator.visible(", shown,
              ") or SAMEDEVICE_EMULATOR_VISIBLE=", shown, " plays a host with fewer devices)");
  if (!started) started = true;
}
void check_not_forked() {
  TORCH_CHECK(!bad_fork, c10::get_privateuse1_backend(), " error: initialization error");
}
bool device_started() { return started; }
int visible_devices() { return visible; }
}  // namespace samedevice

extern "C" void samedevice_set_visible(int count) { visible = count; }
// a use of the device outside an allocation (the current device, its generator, a stream): it has started
extern "C" void samedevice_mark_started() { started = true; }
extern "C" int samedevice_in_bad_fork() { return bad_fork ? 1 : 0; }

// torch.emulated.Event.elapsed_time: PyTorch's binding takes only an exact torch.Event as the end event, so the
// subclass asks here, by the events' handles (event_id). 0 and the time in *out, or the error in *out_error and
// 1 for a ValueError, 2 for another error.
extern "C" int samedevice_elapsed_time(void* start, void* end, double* out, char* out_error, size_t error_size) {
  try {
    *out = elapsed_ms(start, end);
    return 0;
  } catch (const c10::ValueError& e) {
    std::snprintf(out_error, error_size, "%s", e.what_without_backtrace());
    return 1;
  } catch (const c10::Error& e) {
    std::snprintf(out_error, error_size, "%s", e.what_without_backtrace());
    return 2;
  }
}

// Registering late: the autograd engine sizes its device queues once, at the process's first backward, from the
// largest device count of the guards registered then (engine.cpp, Engine::start_device_threads, which also makes
// thread_pool_shared_ at that moment). A backward on the device after a backward without the emulator's guard
// then fails with "device_ready_queues_ ... INTERNAL ASSERT FAILED". Read here (the members are protected):
// -1 when the engine has not started its device threads yet, else how many device queues it made.
struct EnginePeek : torch::autograd::Engine {
  static int device_queues(torch::autograd::Engine& engine) {
    if (!(engine.*(&EnginePeek::thread_pool_shared_))) return -1;
    return static_cast<int>((engine.*(&EnginePeek::device_ready_queues_)).size());
  }
};

extern "C" int samedevice_autograd_device_queues() {
  return EnginePeek::device_queues(torch::autograd::Engine::get_default_engine());
}

// 1: the guard and the hooks are registered; 0: another guard was there first (nothing registered).
extern "C" int samedevice_register_guard() {
  if (impl::hasDeviceGuardImpl(DeviceType::PrivateUse1)) return 0;  // first wins
  impl::registerDeviceGuard(DeviceType::PrivateUse1, new EmulatedGuard());
  SetAllocator(DeviceType::PrivateUse1, &refusing_allocator);
  if (!at::isPrivateUse1HooksRegistered()) at::RegisterPrivateUse1HooksInterface(new EmulatedHooks());
  return 1;
}
