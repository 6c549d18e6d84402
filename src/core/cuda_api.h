// The core's narrow interface to the CUDA runtime. Implemented by cuda_api.cpp when ruDNN
// is built with CUDA, and by cuda_api_none.cpp (every call fails with Unsupported, the
// device count is 0) in a CPU-only build, so that the rest of the core has no #ifdefs.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

#include "rudnn/device.h"
#include "rudnn/stream.h"

namespace rudnn::detail::cuda {

int device_count() noexcept;
// Throws (Unsupported / InvalidArgument) unless `device` is a usable CUDA device.
void require_device(Device device, const char* op);

// Makes `index` the calling thread's current CUDA device for its lifetime.
class DeviceGuard {
 public:
  explicit DeviceGuard(int index);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = -1;
};

// Stream-ordered allocation from the device's caching pool. Throws OutOfMemory.
void* pool_allocate(size_t bytes, Device device, cuda_stream_t stream);
void pool_free(void* ptr, Device device, cuda_stream_t stream) noexcept;
size_t pool_reserved_bytes(Device device) noexcept;
void pool_trim(Device device);

cuda_stream_t stream_create(Device device);
void stream_destroy(Device device, cuda_stream_t stream) noexcept;
void stream_synchronize(Device device, cuda_stream_t stream);
// Work queued on `waiter` after this call waits for the work queued on `producer` so far.
void stream_wait(Device device, cuda_stream_t waiter, cuda_stream_t producer);

// Whether `stream` is capturing into a CUDA graph (work queued now is recorded, not run).
bool stream_capturing(Device device, cuda_stream_t stream);
// Queues `work` (which queues its kernels on `stream`) `repeats` times between two timing
// events and returns the mean milliseconds of one run. The host waits for the stream: for
// measuring (Autotune) only, never on an op's ordinary path.
double time_on_stream_ms(Device device, cuda_stream_t stream, const std::function<void()>& work,
                         int repeats);
// The device's name and generation, e.g. "NVIDIA H100 80GB HBM3, sm_90, 132 SMs"; queried
// once per device and process.
const std::string& device_description(Device device);

// Asynchronous copies and fills on `stream` (the current device is set to `device`).
// copy_to_device returns once `src` has been read (it waits when `src` is pinned memory).
void copy_to_device(void* dst, const void* src, size_t bytes, Device device, cuda_stream_t stream);
// Waits for the copy to land in `dst`.
void copy_to_host(void* dst, const void* src, size_t bytes, Device device, cuda_stream_t stream);
void copy_device_to_device(void* dst, const void* src, size_t bytes, Device device,
                           cuda_stream_t stream);
void copy_peer(void* dst, Device dst_device, const void* src, Device src_device, size_t bytes,
               cuda_stream_t dst_stream);
void memset_async(void* dst, int byte, size_t bytes, Device device, cuda_stream_t stream);

// Kernels of the core (cuda/copy.cu). Shapes and strides in elements, `dims` <= 12.
void strided_copy(void* dst, const int64_t* dst_strides, const void* src,
                  const int64_t* src_strides, const int64_t* shape, int dims, size_t element_size,
                  Device device, cuda_stream_t stream);
// Writes `element_size` bytes of `pattern` (its low bytes) to each of `count` elements.
void fill_pattern(void* dst, int64_t count, size_t element_size, uint64_t pattern, Device device,
                  cuda_stream_t stream);

}  // namespace rudnn::detail::cuda
