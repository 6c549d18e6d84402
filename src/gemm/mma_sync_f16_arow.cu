// The mma.sync GEMM kernel for f16, row-major A (both layouts of B).
#include "gemm/mma_sync_launch.cuh"

namespace rudnn::gemm::kernels {
template void run_mma_sync<__half, true, true>(const GemmArgs&, bool, bool, const LaunchSite&);
template void run_mma_sync<__half, true, false>(const GemmArgs&, bool, bool, const LaunchSite&);
}  // namespace rudnn::gemm::kernels
