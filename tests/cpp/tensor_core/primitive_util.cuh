// Plumbing of the primitive test kernels: CUDA error checks and device buffers of host
// vectors (the test binary's own CUDA runtime; no ruDNN tensors needed at this level).
#pragma once

#include <cuda_runtime.h>

#include <stdexcept>
#include <string>
#include <vector>

namespace rudnn::test::tc {

inline void check(cudaError_t status, const char* what) {
  if (status != cudaSuccess)
    throw std::runtime_error(std::string(what) + ": " + cudaGetErrorName(status) + " (" +
                             cudaGetErrorString(status) + ")");
}
#define RUDNN_TC_CHECK(call) ::rudnn::test::tc::check((call), #call)

// A device copy of a host vector (or `count` elements, zero-filled), freed with the object.
template <class T>
class DeviceBuffer {
 public:
  explicit DeviceBuffer(const std::vector<T>& host) : count_(host.size()) {
    RUDNN_TC_CHECK(cudaMalloc(&data_, bytes()));
    if (count_) RUDNN_TC_CHECK(cudaMemcpy(data_, host.data(), bytes(), cudaMemcpyHostToDevice));
  }
  explicit DeviceBuffer(size_t count) : count_(count) {
    RUDNN_TC_CHECK(cudaMalloc(&data_, bytes()));
    RUDNN_TC_CHECK(cudaMemset(data_, 0, bytes()));
  }
  ~DeviceBuffer() { cudaFree(data_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  T* get() const { return data_; }
  size_t bytes() const { return count_ * sizeof(T) > 0 ? count_ * sizeof(T) : 16; }
  std::vector<T> to_host() const {
    std::vector<T> out(count_);
    if (count_)
      RUDNN_TC_CHECK(cudaMemcpy(out.data(), data_, count_ * sizeof(T), cudaMemcpyDeviceToHost));
    return out;
  }

 private:
  T* data_ = nullptr;
  size_t count_ = 0;
};

// After a launch: the launch error, then the kernel's.
inline void finish(const char* kernel) {
  check(cudaGetLastError(), kernel);
  check(cudaDeviceSynchronize(), kernel);
}

}  // namespace rudnn::test::tc
