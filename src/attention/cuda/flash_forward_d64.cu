// Flash forward, D = 64, Dv = 64, f16 and bf16 (flash_forward_launch.cuh).
#include "attention/cuda/flash_forward_launch.cuh"
#include "attention/cuda/launch.h"
#include "core/cuda_api.h"

namespace rudnn::attn::cuda {
template void flash_forward<__half, 64, 64>(const AttentionForward&, const Stream&);
template void flash_forward<__nv_bfloat16, 64, 64>(const AttentionForward&, const Stream&);

bool flash_kernels_built(Device device) {
  static rudnn::cuda::PerDevice<signed char> known;
  return known.get(device, [&]() -> signed char {
    const detail::cuda::DeviceGuard guard(device.index);
    cudaFuncAttributes attributes{};
    detail::check_cuda(cudaFuncGetAttributes(
                           &attributes, flash::flash_forward_kernel<__nv_bfloat16, 64, 64, false>),
                       "cudaFuncGetAttributes(flash_forward_kernel)");
    return attributes.binaryVersion >= 80 ? 1 : -1;
  }) > 0;
}
}  // namespace rudnn::attn::cuda
