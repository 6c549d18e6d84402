// The ping-pong Hopper GEMM kernel for f16, row-major A, column-major B (both K-major), one
// 128 x 128 tile per consumer warpgroup.
#include "gemm/hopper_launch.cuh"

namespace rudnn::gemm::kernels {
template void run_hopper_pingpong<__half, 128, 128, true, true>(const GemmArgs&, const LaunchSite&);
}  // namespace rudnn::gemm::kernels
