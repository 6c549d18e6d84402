// The Hopper GEMM kernel for bf16, row-major A, row-major B (B MN-major: the input gradient), 128 x
// 256 tiles.
#include "gemm/hopper_launch.cuh"

namespace rudnn::gemm::kernels {
template void run_hopper<__nv_bfloat16, 256, true, false>(const GemmArgs&, const LaunchSite&);
}  // namespace rudnn::gemm::kernels
