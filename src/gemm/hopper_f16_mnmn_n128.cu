// The Hopper GEMM kernel for f16, column-major A, row-major B (both MN-major: the weight gradient),
// 128 x 128 tiles.
#include "gemm/hopper_launch.cuh"

namespace rudnn::gemm::kernels {
template void run_hopper<__half, 128, false, false>(const GemmArgs&, const LaunchSite&);
}  // namespace rudnn::gemm::kernels
