#include "cuda/device_info.h"

#include <cuda_runtime_api.h>

#include <mutex>

#include "core/cuda_check.h"

namespace rudnn::cuda {

namespace {

DeviceInfo query(int index) {
  using detail::check_cuda;
  DeviceInfo info;
  auto attribute = [index](cudaDeviceAttr what) {
    int value = 0;
    check_cuda(cudaDeviceGetAttribute(&value, what, index), "cudaDeviceGetAttribute");
    return value;
  };
  info.multiprocessors = attribute(cudaDevAttrMultiProcessorCount);
  info.l2_bytes = attribute(cudaDevAttrL2CacheSize);
  info.compute_major = attribute(cudaDevAttrComputeCapabilityMajor);
  info.compute_minor = attribute(cudaDevAttrComputeCapabilityMinor);
  info.shared_bytes_per_block_optin =
      static_cast<size_t>(attribute(cudaDevAttrMaxSharedMemoryPerBlockOptin));
  info.max_threads_per_multiprocessor = attribute(cudaDevAttrMaxThreadsPerMultiProcessor);
  return info;
}

}  // namespace

const DeviceInfo& device_info(Device device) {
  static std::once_flag once[kMaxDevices];
  static DeviceInfo infos[kMaxDevices];
  detail::check(device.is_cuda() && device.index >= 0 && device.index < kMaxDevices,
                ErrorCode::InvalidArgument, "device_info: ", device.str(),
                " is not a CUDA device with an index below ", kMaxDevices);
  // A failed query throws out of call_once, which leaves the flag unset for the next caller.
  std::call_once(once[device.index], [&] { infos[device.index] = query(device.index); });
  return infos[device.index];
}

}  // namespace rudnn::cuda
