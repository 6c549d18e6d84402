#include "rudnn/device.h"

#include "core/cuda_api.h"

namespace rudnn {

std::string Device::str() const {
  return is_cpu() ? std::string("cpu") : "cuda:" + std::to_string(index);
}

bool built_with_cuda() noexcept {
#if RUDNN_WITH_CUDA
  return true;
#else
  return false;
#endif
}

int cuda_device_count() noexcept { return detail::cuda::device_count(); }

}  // namespace rudnn
