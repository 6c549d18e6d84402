// The Hopper GEMM kernel for f16, row-major A, row-major B (B MN-major: the input gradient), 128 x
// 128 tiles.
#include "gemm/hopper_launch.cuh"

namespace rudnn::gemm::kernels {
template void run_hopper<__half, 128, true, false>(const GemmArgs&, const LaunchSite&);
}  // namespace rudnn::gemm::kernels
