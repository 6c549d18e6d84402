// The Hopper GEMM kernel for f16, column-major A, column-major B (A MN-major), 128 x 128 tiles.
#include "gemm/hopper_launch.cuh"

namespace rudnn::gemm::kernels {
template void run_hopper<__half, 128, false, true>(const GemmArgs&, const LaunchSite&);
}  // namespace rudnn::gemm::kernels
