// The device's memory: host memory counted per device, as torch.cuda counts its allocations
// (c10/cuda/CUDACachingAllocator.cpp), with a capacity past which an allocation raises torch.OutOfMemoryError
// before allocating. The message follows CUDA's: the same figures in the same units and order, the device named
// as the emulator's; other processes are one figure (CUDA names each by its pid), and the cache's parts (reserved
// but unallocated, the advice on fragmentation) are left out: the emulator keeps no cache.
#include "core.h"

#include <c10/core/CPUAllocator.h>
#include <c10/util/Exception.h>

#include <array>
#include <atomic>
#include <cstdio>

namespace samedevice {
namespace {

struct Counters {
  std::atomic<int64_t> allocated{0};
  std::atomic<int64_t> peak{0};
  std::atomic<int64_t> capacity{-1};  // -1: no limit
  std::atomic<int64_t> elsewhere{0};  // bytes other processes hold on the device (set_capacity's used_elsewhere)
};
std::array<Counters, kDeviceCount> counters;

// CUDACachingAllocator.cpp's format_size: bytes up to 1 KiB, then KiB, MiB, GiB with two decimals.
std::string format_size(int64_t n) {
  char text[64];
  if (n <= 1024) {
    std::snprintf(text, sizeof text, "%lld bytes", static_cast<long long>(n));
  } else if (n <= 1048576) {
    std::snprintf(text, sizeof text, "%.2f KiB", n / 1024.0);
  } else if (n <= 1073741824) {
    std::snprintf(text, sizeof text, "%.2f MiB", n / 1048576.0);
  } else {
    std::snprintf(text, sizeof text, "%.2f GiB", n / 1073741824.0);
  }
  return text;
}

// What CUDA's allocator asks the driver for when a request finds no free block (get_allocation_size of
// round_size, with kMinBlockSize 512, kSmallSize 1 MiB, kSmallBuffer 2 MiB, kMinLargeAlloc 10 MiB, kLargeBuffer
// 20 MiB, kRoundLarge 2 MiB): the figure its "Tried to allocate" names.
int64_t segment(int64_t n) {
  int64_t size = std::max<int64_t>(512, (n + 511) / 512 * 512);
  if (size <= (1 << 20)) return 2 << 20;
  if (size < 10 * (1 << 20)) return 20 << 20;
  return (size + (2 << 20) - 1) / (2 << 20) * (2 << 20);
}

void reserve(c10::DeviceIndex index, int64_t n) {
  auto& c = counters.at(index);
  int64_t cap = c.capacity, elsewhere = c.elsewhere, allocated = c.allocated;
  // the check and the count in one step, so that threads allocating at once cannot pass the capacity together
  while (!(cap >= 0 && elsewhere + allocated + n > cap) && !c.allocated.compare_exchange_weak(allocated, allocated + n)) {
  }
  if (cap >= 0 && elsewhere + allocated + n > cap) {
    int64_t free = std::max<int64_t>(0, cap - elsewhere - allocated);
    std::string others = elsewhere ? "Other processes have " + format_size(elsewhere) + " memory in use. " : "";
    TORCH_CHECK_WITH(OutOfMemoryError, false, c10::get_privateuse1_backend(), ":", int(index),
                     " out of memory. Tried to allocate ", format_size(segment(n)), ". Device ", int(index),
                     " has a total capacity of ", format_size(cap), " of which ", format_size(free), " is free. ",
                     others, "Of the allocated memory ", format_size(allocated), " is allocated by PyTorch.");
  }
  int64_t now = allocated + n;
  int64_t peak = c.peak;
  while (now > peak && !c.peak.compare_exchange_weak(peak, now)) {
  }
}

// One block of device memory: the host memory it lives in, and where it is counted.
struct Block {
  c10::DataPtr host;
  int64_t nbytes;
  c10::DeviceIndex index;
};

void free_block(void* ctx) {
  auto block = static_cast<Block*>(ctx);
  counters[block->index].allocated -= block->nbytes;
  delete block;  // frees the host memory
}

c10::DataPtr device_block(c10::DataPtr host, int64_t nbytes, c10::DeviceIndex index) {
  void* data = host.get();
  auto block = new Block{std::move(host), nbytes, index};
  return {data, block, &free_block, c10::Device(c10::DeviceType::PrivateUse1, index)};
}

c10::DataPtr allocate_on(c10::DeviceIndex index, size_t n) {
  check_present(index);
  reserve(index, static_cast<int64_t>(n));  // before allocating, as CUDA's allocator refuses
  try {
    return device_block(c10::GetDefaultCPUAllocator()->allocate(n), static_cast<int64_t>(n), index);
  } catch (...) {
    counters[index].allocated -= static_cast<int64_t>(n);
    throw;
  }
}

struct DeviceAllocator final : public c10::Allocator {
  c10::DataPtr allocate(size_t n) override { return allocate_on(current_device(), n); }
  void copy_data(void* dest, const void* src, std::size_t count) const override { default_copy_data(dest, src, count); }
};

struct HostAliasAllocator final : public c10::Allocator {
  c10::DataPtr allocate(size_t n) override {
    auto data = allocate_on(current_device(), n);
    data.unsafe_set_device(c10::Device(c10::kCPU));  // the alias is a CPU tensor; its storage goes back to the device
    return data;
  }
  void copy_data(void* dest, const void* src, std::size_t count) const override { default_copy_data(dest, src, count); }
};

DeviceAllocator the_device_allocator;
HostAliasAllocator the_host_alias_allocator;

}  // namespace

c10::Allocator* device_allocator() { return &the_device_allocator; }
c10::Allocator* host_alias_allocator() { return &the_host_alias_allocator; }

std::optional<c10::DeviceIndex> counted_on(const c10::DataPtr& data) {
  if (data.get_deleter() != &free_block) return std::nullopt;
  return static_cast<const Block*>(data.get_context())->index;
}

c10::DataPtr adopt(c10::DataPtr host, size_t nbytes, c10::DeviceIndex index) {
  check_not_forked();
  reserve(index, static_cast<int64_t>(nbytes));  // the host memory is freed with `host` if this raises
  return device_block(std::move(host), static_cast<int64_t>(nbytes), index);
}

}  // namespace samedevice

// memory.py's figures (it checks the index first: nothing here may throw into ctypes). what: 0 allocated, 1 peak.
extern "C" int64_t samedevice_memory(int index, int what) {
  if (index < 0 || index >= samedevice::kDeviceCount) return -1;
  auto& c = samedevice::counters[index];
  return what == 0 ? c.allocated.load() : c.peak.load();
}

extern "C" void samedevice_reset_peak(int index) {
  if (index < 0 || index >= samedevice::kDeviceCount) return;
  auto& c = samedevice::counters[index];
  c.peak = c.allocated.load();
}

extern "C" void samedevice_format_size(int64_t nbytes, char* out, size_t size) {
  std::snprintf(out, size, "%s", samedevice::format_size(nbytes).c_str());
}

extern "C" void samedevice_set_capacity(int index, int64_t capacity, int64_t elsewhere) {
  if (index < 0 || index >= samedevice::kDeviceCount) return;
  auto& c = samedevice::counters[index];
  c.capacity = capacity;
  c.elsewhere = elsewhere;
}
