// Tensor storage: one allocation (or wrapped foreign memory) and how to release it.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>

#include "rudnn/device.h"
#include "rudnn/stream.h"

namespace rudnn::detail {

struct Storage {
  void* data = nullptr;
  size_t bytes = 0;
  Device device;
  Stream allocation_stream;       // default Stream for host and foreign memory
  std::function<void()> release;  // frees `data`; empty when nothing is owned

  Storage() = default;
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;
  ~Storage() {
    if (release) release();
  }
};

// Allocates `bytes` on `device`, stream-ordered on `stream` (already resolved for device),
// poisoned when poison_allocations() is on.
std::shared_ptr<Storage> allocate_storage(size_t bytes, Device device, const Stream& stream);

}  // namespace rudnn::detail
