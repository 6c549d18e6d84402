// The caching allocator behind Tensor storage.
//
// CUDA memory comes from one stream-ordered pool per device (cudaMallocFromPoolAsync on a
// pool whose release threshold keeps freed blocks cached): allocation and release are
// ordered on a stream and cost no device synchronisation once the pool is warm. Host memory
// is 64-byte aligned heap memory. Allocation inside CUDA stream capture becomes a graph
// memory node; ops that must be captured and replayed take preallocated outputs (the
// `_into` forms).
#pragma once

#include <cstddef>
#include <cstdint>

#include "rudnn/device.h"

namespace rudnn {

struct AllocatorStats {
  size_t bytes_in_use = 0;       // held by live tensors and op scratch
  size_t peak_bytes_in_use = 0;  // since start or the last reset_peak_memory_stats
  size_t bytes_reserved = 0;     // held by the pool, in use or cached (CUDA only)
  uint64_t allocations = 0;      // count of allocations served
};

AllocatorStats allocator_stats(Device device);
void reset_peak_memory_stats(Device device);

// Returns cached, unused device memory of `device`'s pool to the driver.
void release_cached_memory(Device device);

// Test aid: when on, every new allocation (host or device) is filled with 0xFF bytes, a NaN
// in f32, f16 and bf16, so that an element an op forgets to write reads as NaN. Off by
// default; on at start when the environment variable RUDNN_POISON_ALLOCATIONS=1.
void set_poison_allocations(bool enabled) noexcept;
bool poison_allocations() noexcept;

}  // namespace rudnn
