// The ping-pong Hopper GEMM kernel for bf16, row-major A, column-major B (both K-major), one
// 64 x 192 tile per consumer warpgroup.
#include "gemm/hopper_launch.cuh"

namespace rudnn::gemm::kernels {
template void run_hopper_pingpong<__nv_bfloat16, 64, 192, true, true>(const GemmArgs&,
                                                                      const LaunchSite&);
}  // namespace rudnn::gemm::kernels
