// The Hopper GEMM kernel for bf16, row-major A, column-major B (both K-major), 128 x 128 tiles.
#include "gemm/hopper_launch.cuh"

namespace rudnn::gemm::kernels {
template void run_hopper<__nv_bfloat16, 128, true, true>(const GemmArgs&, const LaunchSite&);

// Whether the Hopper kernels can run on `device`: built for sm_90a (RUDNN_GEMM_SM90A, from
// RUDNN_CUDA_ARCHS), a device of compute capability 9.0 (sm_90a code runs there only), and
// the runtime finds sm_90 code for the kernel.
bool hopper_kernel_usable(Device device) {
#if RUDNN_GEMM_SM90A
  static cuda::PerDevice<signed char> usable;
  return usable.get(device, [&]() -> signed char {
    const cuda::DeviceInfo& info = cuda::device_info(device);
    if (info.compute_major != 9 || info.compute_minor != 0) return -1;
    cudaFuncAttributes attributes{};
    auto kernel = hopper_gemm_kernel<__nv_bfloat16, HopperTraits<__nv_bfloat16, 128, true, true>,
                                     RuntimeActivation>;
    if (cudaFuncGetAttributes(&attributes, kernel) != cudaSuccess) {
      (void)cudaGetLastError();
      return -1;
    }
    return attributes.binaryVersion == 90 ? 1 : -1;
  }) > 0;
#else
  (void)device;
  return false;
#endif
}
}  // namespace rudnn::gemm::kernels
