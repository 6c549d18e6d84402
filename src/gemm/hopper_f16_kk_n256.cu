// The Hopper GEMM kernel for f16, row-major A, column-major B (both K-major), 128 x 256 tiles.
#include "gemm/hopper_launch.cuh"

namespace rudnn::gemm::kernels {
template void run_hopper<__half, 256, true, true>(const GemmArgs&, const LaunchSite&);
}  // namespace rudnn::gemm::kernels
