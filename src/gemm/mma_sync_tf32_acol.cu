// The mma.sync GEMM kernel for f32 on TF32 tensor cores, col-major A (both layouts of B).
#include "gemm/mma_sync_launch.cuh"

namespace rudnn::gemm::kernels {
template void run_mma_sync<float, false, true>(const GemmArgs&, bool, bool, const LaunchSite&);
template void run_mma_sync<float, false, false>(const GemmArgs&, bool, bool, const LaunchSite&);
}  // namespace rudnn::gemm::kernels
