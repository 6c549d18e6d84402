// Storage allocation: aligned host memory, and the stream-ordered CUDA pools.
#include "rudnn/allocator.h"

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <new>
#include <vector>

#include "core/check.h"
#include "core/cuda_api.h"
#include "core/storage.h"

namespace rudnn {

namespace {

struct Counters {
  std::atomic<size_t> in_use{0};
  std::atomic<size_t> peak{0};
  std::atomic<uint64_t> allocations{0};

  void add(size_t bytes) {
    const size_t now = in_use.fetch_add(bytes) + bytes;
    size_t old_peak = peak.load();
    while (now > old_peak && !peak.compare_exchange_weak(old_peak, now)) {
    }
    allocations.fetch_add(1);
  }
  void remove(size_t bytes) { in_use.fetch_sub(bytes); }
};

constexpr int kMaxDevices = 64;

Counters& counters(Device device) {
  // Index 0 is the host, 1 + ordinal a CUDA device. Never destroyed: storage may be
  // released during static destruction.
  static Counters* all = new Counters[kMaxDevices + 1];
  return all[device.is_cpu() ? 0 : 1 + device.index];
}

bool poison_from_environment() {
  const char* value = std::getenv("RUDNN_POISON_ALLOCATIONS");
  return value != nullptr && std::strcmp(value, "1") == 0;
}

std::atomic<bool> g_poison{poison_from_environment()};

constexpr size_t kHostAlignment = 64;

}  // namespace

void set_poison_allocations(bool enabled) noexcept { g_poison.store(enabled); }
bool poison_allocations() noexcept { return g_poison.load(); }

AllocatorStats allocator_stats(Device device) {
  detail::cuda::require_device(device, "allocator_stats");
  Counters& c = counters(device);
  AllocatorStats stats;
  stats.bytes_in_use = c.in_use.load();
  stats.peak_bytes_in_use = c.peak.load();
  stats.allocations = c.allocations.load();
  stats.bytes_reserved =
      device.is_cpu() ? stats.bytes_in_use : detail::cuda::pool_reserved_bytes(device);
  return stats;
}

void reset_peak_memory_stats(Device device) {
  detail::cuda::require_device(device, "reset_peak_memory_stats");
  Counters& c = counters(device);
  c.peak.store(c.in_use.load());
}

void release_cached_memory(Device device) {
  detail::cuda::require_device(device, "release_cached_memory");
  if (device.is_cuda()) detail::cuda::pool_trim(device);
}

namespace detail {

std::shared_ptr<Storage> allocate_storage(size_t bytes, Device device, const Stream& stream) {
  auto storage = std::make_shared<Storage>();
  storage->bytes = bytes;
  storage->device = device;
  if (bytes == 0) return storage;  // nothing to hold; data stays null
  if (device.is_cpu()) {
    const size_t rounded = (bytes + kHostAlignment - 1) / kHostAlignment * kHostAlignment;
    void* p = std::aligned_alloc(kHostAlignment, rounded);
    if (p == nullptr)
      fail(ErrorCode::OutOfMemory, cat("allocator: cannot allocate ", bytes, " bytes on the host"));
    if (poison_allocations()) std::memset(p, 0xff, bytes);
    storage->data = p;
    storage->release = [p, bytes] {
      std::free(p);
      counters(Device::cpu()).remove(bytes);
    };
  } else {
    void* p = cuda::pool_allocate(bytes, device, stream.handle());
    storage->data = p;
    storage->allocation_stream = stream;
    // The lambda holds the Stream, so an owned stream outlives every block allocated on it.
    storage->release = [p, bytes, device, stream] {
      cuda::pool_free(p, device, stream.handle());
      counters(device).remove(bytes);
    };
    counters(device).add(bytes);  // before the fill: if it throws, release() uncounts
    if (poison_allocations()) cuda::memset_async(p, 0xff, bytes, device, stream.handle());
    return storage;
  }
  counters(device).add(bytes);
  return storage;
}

}  // namespace detail

}  // namespace rudnn
