// What launch choices need to know of a CUDA device, queried once per device and process.
// Host code, CUDA builds only. Thread-safe: the first call for a device queries it under a
// once-flag; later calls read the cached copy.
#pragma once

#include <atomic>
#include <cstddef>

#include "core/check.h"
#include "rudnn/device.h"

namespace rudnn::cuda {

// The most devices one process addresses; a larger index is an error, never an unchecked
// slot.
constexpr int kMaxDevices = 64;

struct DeviceInfo {
  int multiprocessors = 0;
  int l2_bytes = 0;
  int compute_major = 0, compute_minor = 0;
  size_t shared_bytes_per_block_optin = 0;  // the most dynamic shared memory a block can opt into
  int max_threads_per_multiprocessor = 0;
};

const DeviceInfo& device_info(Device device);

// A value per device, computed on first use (a kernel's occupancy, whether it was compiled
// for Hopper). Races between first uses are harmless: each computes the same value. T is an
// integer type whose zero means "not known yet"; `compute` must not return zero.
template <class T>
class PerDevice {
 public:
  template <class Compute>
  T get(Device device, Compute&& compute) {
    detail::check(device.index >= 0 && device.index < kMaxDevices, ErrorCode::InvalidArgument,
                  "CUDA device index ", device.index, " is out of range [0, ", kMaxDevices, ")");
    std::atomic<T>& slot = slots_[device.index];
    T value = slot.load(std::memory_order_relaxed);
    if (value == T{}) {
      value = compute();
      slot.store(value, std::memory_order_relaxed);
    }
    return value;
  }

 private:
  std::atomic<T> slots_[kMaxDevices] = {};
};

}  // namespace rudnn::cuda
