// The mma.sync GEMM kernel for f32 on TF32 tensor cores, row-major A (both layouts of B).
#include "gemm/mma_sync_launch.cuh"

namespace rudnn::gemm::kernels {
template void run_mma_sync<float, true, true>(const GemmArgs&, bool, bool, const LaunchSite&);
template void run_mma_sync<float, true, false>(const GemmArgs&, bool, bool, const LaunchSite&);
}  // namespace rudnn::gemm::kernels
