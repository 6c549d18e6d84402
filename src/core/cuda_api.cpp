// CUDA runtime calls of the core (built when RUDNN_CUDA is on).
#include "core/cuda_api.h"

#include <cuda_runtime_api.h>

#include <array>
#include <limits>
#include <mutex>

#include "core/cuda_check.h"

namespace rudnn::detail::cuda {

namespace {

cudaStream_t native(cuda_stream_t s) { return reinterpret_cast<cudaStream_t>(s); }

constexpr int kMaxDevices = 64;

struct Pools {
  std::mutex mutex;
  std::array<cudaMemPool_t, kMaxDevices> pool{};
};

Pools& pools() {
  static Pools* p = new Pools();  // never destroyed: tensors may be released at exit
  return *p;
}

cudaMemPool_t pool_for(Device device) {
  Pools& p = pools();
  std::lock_guard<std::mutex> lock(p.mutex);
  cudaMemPool_t& pool = p.pool[device.index];
  if (pool == nullptr) {
    cudaMemPoolProps props{};
    props.allocType = cudaMemAllocationTypePinned;
    props.handleTypes = cudaMemHandleTypeNone;
    props.location.type = cudaMemLocationTypeDevice;
    props.location.id = device.index;
    check_cuda(cudaMemPoolCreate(&pool, &props), "allocator: cudaMemPoolCreate");
    // Keep freed blocks cached in the pool instead of returning them at each synchronisation.
    uint64_t threshold = std::numeric_limits<uint64_t>::max();
    check_cuda(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold),
               "allocator: cudaMemPoolSetAttribute");
  }
  return pool;
}

}  // namespace

int device_count() noexcept {
  static const int count = [] {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
      cudaGetLastError();  // no driver or no device: clear the error, report none
      return 0;
    }
    return n < kMaxDevices ? n : kMaxDevices;
  }();
  return count;
}

void require_device(Device device, const char* op) {
  if (!device.is_cuda()) return;
  const int n = device_count();
  if (n == 0)
    fail(ErrorCode::Unsupported,
         cat(op, ": ", device.str(), " requested, but no CUDA device is available"));
  if (device.index < 0 || device.index >= n) {
    fail(ErrorCode::InvalidArgument,
         cat(op, ": ", device.str(), " does not exist (", n, " CUDA device(s))"));
  }
}

DeviceGuard::DeviceGuard(int index) {
  int current = 0;
  check_cuda(cudaGetDevice(&current), "cudaGetDevice");
  if (current != index) {
    check_cuda(cudaSetDevice(index), "cudaSetDevice");
    previous_ = current;
  }
}

DeviceGuard::~DeviceGuard() {
  if (previous_ >= 0) cudaSetDevice(previous_);
}

void* pool_allocate(size_t bytes, Device device, cuda_stream_t stream) {
  DeviceGuard guard(device.index);
  void* ptr = nullptr;
  const cudaError_t status = cudaMallocFromPoolAsync(&ptr, bytes, pool_for(device), native(stream));
  if (status != cudaSuccess) {
    cudaGetLastError();
    fail(status == cudaErrorMemoryAllocation ? ErrorCode::OutOfMemory : ErrorCode::Cuda,
         cat("allocator: cannot allocate ", bytes, " bytes on ", device.str(), ": ",
             cudaGetErrorString(status)));
  }
  return ptr;
}

void pool_free(void* ptr, Device device, cuda_stream_t stream) noexcept {
  if (ptr == nullptr) return;
  int current = 0;
  cudaGetDevice(&current);
  if (current != device.index) cudaSetDevice(device.index);
  // Errors here (e.g. the runtime unloading at process exit) have nobody to report to.
  if (cudaFreeAsync(ptr, native(stream)) != cudaSuccess) cudaGetLastError();
  if (current != device.index) cudaSetDevice(current);
}

size_t pool_reserved_bytes(Device device) noexcept {
  Pools& p = pools();
  std::lock_guard<std::mutex> lock(p.mutex);
  cudaMemPool_t pool = p.pool[device.index];
  if (pool == nullptr) return 0;
  uint64_t reserved = 0;
  if (cudaMemPoolGetAttribute(pool, cudaMemPoolAttrReservedMemCurrent, &reserved) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return static_cast<size_t>(reserved);
}

void pool_trim(Device device) {
  DeviceGuard guard(device.index);
  // Blocks freed on a stream return to the pool only when the stream reaches the free.
  check_cuda(cudaDeviceSynchronize(), "release_cached_memory: cudaDeviceSynchronize");
  check_cuda(cudaMemPoolTrimTo(pool_for(device), 0), "release_cached_memory: cudaMemPoolTrimTo");
}

cuda_stream_t stream_create(Device device) {
  DeviceGuard guard(device.index);
  cudaStream_t s = nullptr;
  check_cuda(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "Stream::create");
  return reinterpret_cast<cuda_stream_t>(s);
}

void stream_destroy(Device device, cuda_stream_t stream) noexcept {
  int current = 0;
  cudaGetDevice(&current);
  if (current != device.index) cudaSetDevice(device.index);
  if (cudaStreamDestroy(native(stream)) != cudaSuccess) cudaGetLastError();
  if (current != device.index) cudaSetDevice(current);
}

void stream_synchronize(Device device, cuda_stream_t stream) {
  DeviceGuard guard(device.index);
  check_cuda(cudaStreamSynchronize(native(stream)), "Stream::synchronize");
}

void stream_wait(Device device, cuda_stream_t waiter, cuda_stream_t producer) {
  DeviceGuard guard(device.index);
  cudaEvent_t event = nullptr;
  check_cuda(cudaEventCreateWithFlags(&event, cudaEventDisableTiming),
             "Stream::wait: cudaEventCreateWithFlags");
  const cudaError_t recorded = cudaEventRecord(event, native(producer));
  const cudaError_t waited =
      recorded == cudaSuccess ? cudaStreamWaitEvent(native(waiter), event, 0) : recorded;
  cudaEventDestroy(event);  // released once the wait is satisfied
  check_cuda(waited, "Stream::wait");
}

bool stream_capturing(Device device, cuda_stream_t stream) {
  DeviceGuard guard(device.index);
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  check_cuda(cudaStreamIsCapturing(native(stream), &status), "cudaStreamIsCapturing");
  return status != cudaStreamCaptureStatusNone;
}

double time_on_stream_ms(Device device, cuda_stream_t stream, const std::function<void()>& work,
                         int repeats) {
  DeviceGuard guard(device.index);
  cudaEvent_t events[2] = {nullptr, nullptr};
  check_cuda(cudaEventCreate(&events[0]), "autotune: cudaEventCreate");
  const cudaError_t second = cudaEventCreate(&events[1]);
  const auto destroy = [&] {
    for (cudaEvent_t e : events) {
      if (e != nullptr) cudaEventDestroy(e);
    }
  };
  if (second != cudaSuccess) {
    destroy();
    check_cuda(second, "autotune: cudaEventCreate");
  }
  float ms = 0.0f;
  try {
    check_cuda(cudaEventRecord(events[0], native(stream)), "autotune: cudaEventRecord");
    for (int r = 0; r < repeats; ++r) work();
    check_cuda(cudaEventRecord(events[1], native(stream)), "autotune: cudaEventRecord");
    check_cuda(cudaEventSynchronize(events[1]), "autotune: cudaEventSynchronize");
    check_cuda(cudaEventElapsedTime(&ms, events[0], events[1]), "autotune: cudaEventElapsedTime");
  } catch (...) {
    destroy();
    throw;
  }
  destroy();
  return static_cast<double>(ms) / repeats;
}

const std::string& device_description(Device device) {
  static std::once_flag once[kMaxDevices];
  static std::string descriptions[kMaxDevices];
  check(device.is_cuda() && device.index >= 0 && device.index < kMaxDevices,
        ErrorCode::InvalidArgument, "device_description: ", device.str(),
        " is not a CUDA device with an index below ", kMaxDevices);
  std::call_once(once[device.index], [&] {
    cudaDeviceProp prop{};
    check_cuda(cudaGetDeviceProperties(&prop, device.index), "cudaGetDeviceProperties");
    descriptions[device.index] = cat(prop.name, ", sm_", prop.major, prop.minor, ", ",
                                     prop.multiProcessorCount, " SMs");
  });
  return descriptions[device.index];
}

void copy_to_device(void* dst, const void* src, size_t bytes, Device device, cuda_stream_t stream) {
  if (bytes == 0) return;
  DeviceGuard guard(device.index);
  check_cuda(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, native(stream)),
             "copy to device");
  // From pageable memory the call returns once `src` is staged; from pinned memory it
  // returns at once, so wait for the source to be read before the caller reuses it.
  cudaPointerAttributes attributes{};
  if (cudaPointerGetAttributes(&attributes, src) == cudaSuccess &&
      attributes.type == cudaMemoryTypeHost) {
    check_cuda(cudaStreamSynchronize(native(stream)), "copy to device: cudaStreamSynchronize");
  }
  cudaGetLastError();
}

void copy_to_host(void* dst, const void* src, size_t bytes, Device device, cuda_stream_t stream) {
  if (bytes == 0) return;
  DeviceGuard guard(device.index);
  check_cuda(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, native(stream)),
             "copy to host");
  check_cuda(cudaStreamSynchronize(native(stream)), "copy to host: cudaStreamSynchronize");
}

void copy_device_to_device(void* dst, const void* src, size_t bytes, Device device,
                           cuda_stream_t stream) {
  if (bytes == 0) return;
  DeviceGuard guard(device.index);
  check_cuda(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, native(stream)),
             "device copy");
}

void copy_peer(void* dst, Device dst_device, const void* src, Device src_device, size_t bytes,
               cuda_stream_t dst_stream) {
  if (bytes == 0) return;
  DeviceGuard guard(dst_device.index);
  check_cuda(
      cudaMemcpyPeerAsync(dst, dst_device.index, src, src_device.index, bytes, native(dst_stream)),
      "peer copy");
}

void memset_async(void* dst, int byte, size_t bytes, Device device, cuda_stream_t stream) {
  if (bytes == 0) return;
  DeviceGuard guard(device.index);
  check_cuda(cudaMemsetAsync(dst, byte, bytes, native(stream)), "cudaMemsetAsync");
}

}  // namespace rudnn::detail::cuda
