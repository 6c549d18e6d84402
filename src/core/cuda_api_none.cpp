// The core's CUDA interface in a CPU-only build: no devices, and every device call fails.
#include "core/check.h"
#include "core/cuda_api.h"

namespace rudnn::detail::cuda {

namespace {
[[noreturn]] void no_cuda(const char* what) {
  fail(ErrorCode::Unsupported, cat(what, ": ruDNN was built without CUDA (RUDNN_CUDA=OFF)"));
}
}  // namespace

int device_count() noexcept { return 0; }
void require_device(Device device, const char* op) {
  if (device.is_cuda()) {
    fail(ErrorCode::Unsupported,
         cat(op, ": ", device.str(),
             " requested, but ruDNN was built without CUDA (RUDNN_CUDA=OFF)"));
  }
}
DeviceGuard::DeviceGuard(int) { no_cuda("DeviceGuard"); }
DeviceGuard::~DeviceGuard() = default;
void* pool_allocate(size_t, Device, cuda_stream_t) { no_cuda("allocator"); }
void pool_free(void*, Device, cuda_stream_t) noexcept {}
size_t pool_reserved_bytes(Device) noexcept { return 0; }
void pool_trim(Device) { no_cuda("release_cached_memory"); }
cuda_stream_t stream_create(Device) { no_cuda("Stream::create"); }
void stream_destroy(Device, cuda_stream_t) noexcept {}
void stream_synchronize(Device, cuda_stream_t) { no_cuda("Stream::synchronize"); }
void stream_wait(Device, cuda_stream_t, cuda_stream_t) { no_cuda("Stream::wait"); }
bool stream_capturing(Device, cuda_stream_t) { no_cuda("cudaStreamIsCapturing"); }
double time_on_stream_ms(Device, cuda_stream_t, const std::function<void()>&, int) {
  no_cuda("autotune timing");
}
const std::string& device_description(Device) { no_cuda("device_description"); }
void copy_to_device(void*, const void*, size_t, Device, cuda_stream_t) {
  no_cuda("copy to device");
}
void copy_to_host(void*, const void*, size_t, Device, cuda_stream_t) { no_cuda("copy to host"); }
void copy_device_to_device(void*, const void*, size_t, Device, cuda_stream_t) {
  no_cuda("device copy");
}
void copy_peer(void*, Device, const void*, Device, size_t, cuda_stream_t) { no_cuda("peer copy"); }
void memset_async(void*, int, size_t, Device, cuda_stream_t) { no_cuda("memset"); }
void strided_copy(void*, const int64_t*, const void*, const int64_t*, const int64_t*, int, size_t,
                  Device, cuda_stream_t) {
  no_cuda("strided copy");
}
void fill_pattern(void*, int64_t, size_t, uint64_t, Device, cuda_stream_t) { no_cuda("fill"); }

}  // namespace rudnn::detail::cuda
