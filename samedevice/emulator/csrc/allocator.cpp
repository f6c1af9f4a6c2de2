// The device's memory: host memory counted per device, as torch.cuda counts its allocations
// (c10/cuda/CUDACachingAllocator.cpp), with a capacity past which an allocation raises torch.OutOfMemoryError
// before allocating. The message follows CUDA's: the same figures in the same units and order, the device named
// as the emulator's; other processes are one figure (CUDA names each by its pid), and the cache's parts (reserved
// but unallocated, the advice on fragmentation) are left out: the emulator keeps no cache.
//
// The allocator is a c10::DeviceAllocator, as CUDA's is, so torch.accelerator's memory functions (memory_stats,
// memory_allocated, empty_cache, get_memory_info...) work on it. Its statistics are CUDA's (DeviceStats), counted
// as CUDA's allocator counts them: each block rounded up to 512 bytes (round_size's kMinBlockSize), requested_bytes
// the size asked for, a block of at most 1 MiB in the small pool (kSmallSize), a zero-size request no block at all.
// With no cache, every block is its own segment: reserved is allocated, active is allocated, nothing is inactive.
#include "core.h"

#include <c10/core/CPUAllocator.h>
#include <c10/core/CachingDeviceAllocator.h>
#include <c10/util/Exception.h>
#include <pthread.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cstdio>
#include <mutex>

namespace samedevice {
namespace {

using c10::CachingDeviceAllocator::DeviceStats;

// With no cache, CUDA's block, segment and active figures are one figure: `blocks` counts them, `bytes` their bytes
// (allocated, reserved and active), `requested` the bytes asked for; each for all, the small and the large pool.
struct Counters {
  std::mutex lock;  // guards the rest; an allocation's check against the capacity and its count are one step
  c10::CachingAllocator::StatArray blocks, bytes, requested;
  int64_t ooms = 0, device_allocs = 0, device_frees = 0;
  int64_t capacity = -1;  // -1: no limit
  int64_t elsewhere = 0;  // bytes other processes hold on the device (set_capacity's used_elsewhere)
};
std::array<Counters, kDeviceCount> counters;

// A fork while another thread holds a device's lock would leave the child a lock nobody releases, and its first
// free of a device tensor would wait for ever: the locks are taken around the fork, as glibc does its malloc's.
void lock_all() {
  for (auto& c : counters) c.lock.lock();
}
void unlock_all() {
  for (auto& c : counters) c.lock.unlock();
}
const int fork_guard = pthread_atfork(lock_all, unlock_all, unlock_all);

constexpr int64_t kMinBlockSize = 512, kSmallSize = 1 << 20;  // CUDACachingAllocator.cpp's
int64_t block_size(int64_t n) { return n == 0 ? 0 : (n + kMinBlockSize - 1) / kMinBlockSize * kMinBlockSize; }
c10::CachingAllocator::StatTypes pools(int64_t size) {
  return {true, size <= kSmallSize, size > kSmallSize};  // all, small_pool, large_pool
}
int64_t allocated_now(Counters& c) { return c.bytes[0].current; }  // the lock held

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

// Counts a block of `n` bytes asked for on `index`, or raises torch.OutOfMemoryError past the capacity.
void reserve(c10::DeviceIndex index, int64_t n) {
  auto& c = counters.at(index);
  const int64_t size = block_size(n);
  std::lock_guard<std::mutex> hold(c.lock);
  const int64_t allocated = allocated_now(c);
  if (c.capacity >= 0 && c.elsewhere + allocated + size > c.capacity) {
    int64_t free = std::max<int64_t>(0, c.capacity - c.elsewhere - allocated);
    std::string others = c.elsewhere ? "Other processes have " + format_size(c.elsewhere) + " memory in use. " : "";
    c.ooms += 1;
    TORCH_CHECK_WITH(OutOfMemoryError, false, c10::get_privateuse1_backend(), ":", int(index),
                     " out of memory. Tried to allocate ", format_size(segment(n)), ". Device ", int(index),
                     " has a total capacity of ", format_size(c.capacity), " of which ", format_size(free), " is free. ",
                     c10::str(others), "Of the allocated memory ", format_size(allocated), " is allocated by PyTorch.");
  }
  if (size == 0) return;  // CUDA's allocator hands out no block for nothing
  c.device_allocs += 1;
  c10::CachingAllocator::for_each_selected_stat_type(pools(size), [&](size_t t) {
    c.blocks[t].increase(1);
    c.bytes[t].increase(size);
    c.requested[t].increase(n);
  });
}

void release(c10::DeviceIndex index, int64_t n) {
  auto& c = counters.at(index);
  const int64_t size = block_size(n);
  if (size == 0) return;
  std::lock_guard<std::mutex> hold(c.lock);
  c.device_frees += 1;
  c10::CachingAllocator::for_each_selected_stat_type(pools(size), [&](size_t t) {
    c.blocks[t].decrease(1);
    c.bytes[t].decrease(size);
    c.requested[t].decrease(n);
  });
}

// One block of device memory: the host memory it lives in, and where it is counted.
struct Block {
  c10::DataPtr host;
  int64_t nbytes;
  c10::DeviceIndex index;
};

void free_block(void* ctx) {
  auto block = static_cast<Block*>(ctx);
  release(block->index, block->nbytes);
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
    release(index, static_cast<int64_t>(n));
    throw;
  }
}

struct EmulatedAllocator final : public c10::DeviceAllocator {
  c10::DataPtr allocate(size_t n) override { return allocate_on(current_device(), n); }
  void copy_data(void* dest, const void* src, std::size_t count) const override { default_copy_data(dest, src, count); }
  // CUDA's: initialized by the device's lazy init (here, its first use); before it, torch.accelerator's figures are
  // none (memory_stats an empty dict) and empty_cache does nothing
  bool initialized() override { return device_started(); }
  void emptyCache(c10::MempoolId_t) override {}                   // no cache to empty
  void recordStream(const c10::DataPtr&, c10::Stream) override {}  // a block is freed when its last user is done
  DeviceStats getDeviceStats(c10::DeviceIndex index) override {
    auto& c = counters.at(checked(index));
    std::lock_guard<std::mutex> hold(c.lock);
    DeviceStats stats;
    stats.allocation = stats.segment = stats.active = c.blocks;
    stats.allocated_bytes = stats.reserved_bytes = stats.active_bytes = c.bytes;
    stats.requested_bytes = c.requested;
    stats.num_ooms = c.ooms;
    stats.num_device_alloc = c.device_allocs;
    stats.num_device_free = c.device_frees;
    return stats;
  }
  void resetAccumulatedStats(c10::DeviceIndex index) override {
    auto& c = counters.at(checked(index));
    std::lock_guard<std::mutex> hold(c.lock);
    for (auto* array : {&c.blocks, &c.bytes, &c.requested}) {
      for (auto& stat : *array) stat.reset_accumulated();
    }
    c.ooms = c.device_allocs = c.device_frees = 0;
  }
  void resetPeakStats(c10::DeviceIndex index) override {
    auto& c = counters.at(checked(index));
    std::lock_guard<std::mutex> hold(c.lock);
    for (auto* array : {&c.blocks, &c.bytes, &c.requested}) {
      for (auto& stat : *array) stat.reset_peak();
    }
  }
  // (free, total): the capacity where one is set, else the host's memory, which the emulated device's is
  std::pair<size_t, size_t> getMemoryInfo(c10::DeviceIndex index) override {
    auto& c = counters.at(checked(index));
    std::lock_guard<std::mutex> hold(c.lock);
    if (c.capacity >= 0) {
      return {static_cast<size_t>(std::max<int64_t>(0, c.capacity - c.elsewhere - allocated_now(c))),
              static_cast<size_t>(c.capacity)};
    }
    const auto page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    return {static_cast<size_t>(sysconf(_SC_AVPHYS_PAGES)) * page, static_cast<size_t>(sysconf(_SC_PHYS_PAGES)) * page};
  }

 private:
  // CUDACachingAllocator.cpp's check of a device argument, in its words, against the devices the host shows (an
  // absent host's figures are read as CUDA's are before it starts: no error)
  static c10::DeviceIndex checked(c10::DeviceIndex index) {
    const int shown = host_is_absent() ? kDeviceCount : visible_devices();
    TORCH_CHECK(index >= 0 && index < shown, "Invalid device argument ", int(index), ": did you call init?");
    return index;
  }
};

struct HostAliasAllocator final : public c10::Allocator {
  c10::DataPtr allocate(size_t n) override {
    auto data = allocate_on(current_device(), n);
    data.unsafe_set_device(c10::Device(c10::kCPU));  // the alias is a CPU tensor; its storage goes back to the device
    return data;
  }
  void copy_data(void* dest, const void* src, std::size_t count) const override { default_copy_data(dest, src, count); }
};

EmulatedAllocator the_device_allocator;
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

// memory.py's figures (it checks the index first: nothing here may throw into ctypes). what: 0 allocated, 1 peak,
// 2 free, 3 total.
extern "C" int64_t samedevice_memory(int index, int what) {
  if (index < 0 || index >= samedevice::kDeviceCount) return -1;
  if (what >= 2) {  // 2 free, 3 total: torch.emulated.mem_get_info's
    auto info = samedevice::the_device_allocator.getMemoryInfo(static_cast<c10::DeviceIndex>(index));
    return static_cast<int64_t>(what == 2 ? info.first : info.second);
  }
  auto& c = samedevice::counters[index];
  std::lock_guard<std::mutex> hold(c.lock);
  return what == 0 ? c.bytes[0].current : c.bytes[0].peak;
}

extern "C" void samedevice_reset_peak(int index) {
  if (index < 0 || index >= samedevice::kDeviceCount) return;
  samedevice::the_device_allocator.resetPeakStats(static_cast<c10::DeviceIndex>(index));
}

extern "C" void samedevice_format_size(int64_t nbytes, char* out, size_t size) {
  std::snprintf(out, size, "%s", samedevice::format_size(nbytes).c_str());
}

extern "C" void samedevice_set_capacity(int index, int64_t capacity, int64_t elsewhere) {
  if (index < 0 || index >= samedevice::kDeviceCount) return;
  auto& c = samedevice::counters[index];
  std::lock_guard<std::mutex> hold(c.lock);
  c.capacity = capacity;
  c.elsewhere = elsewhere;
}
