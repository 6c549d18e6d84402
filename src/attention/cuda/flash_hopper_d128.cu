// Hopper flash forward, D = Dv = 128, f16 and bf16 (flash_hopper_launch.cuh).
#include "attention/cuda/flash_hopper_launch.cuh"

namespace rudnn::attn::cuda {
template void flash_hopper_forward<__half, 128>(const AttentionForward&, const Stream&);
template void flash_hopper_forward<__nv_bfloat16, 128>(const AttentionForward&, const Stream&);
}  // namespace rudnn::attn::cuda

#include "attention/cuda/launch.h"

namespace rudnn::attn::cuda {
// RUDNN_ATTN_SM90A (CMakeLists): whether RUDNN_CUDA_ARCHS holds sm_90a, the only code in
// which the kernel's body exists; an sm_90 image alone has the right binary version but a
// trap for a body.
bool flash_hopper_built(Device device) {
#if RUDNN_ATTN_SM90A
  static rudnn::cuda::PerDevice<signed char> known;
  const detail::cuda::DeviceGuard guard(device.index);
  return rudnn::cuda::built_for_hopper(hopper::flash_hopper_kernel<__nv_bfloat16, 128>, device,
                                       known);
#else
  (void)device;
  return false;
#endif
}
}  // namespace rudnn::attn::cuda
