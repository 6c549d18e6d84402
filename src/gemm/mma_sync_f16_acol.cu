// The mma.sync GEMM kernel for f16, col-major A (both layouts of B).
#include "gemm/mma_sync_launch.cuh"

namespace rudnn::gemm::kernels {
template void run_mma_sync<__half, false, true>(const GemmArgs&, bool, bool, const LaunchSite&);
template void run_mma_sync<__half, false, false>(const GemmArgs&, bool, bool, const LaunchSite&);
}  // namespace rudnn::gemm::kernels
