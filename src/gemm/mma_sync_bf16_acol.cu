// The mma.sync GEMM kernel for bf16, col-major A (both layouts of B).
#include "gemm/mma_sync_launch.cuh"

namespace rudnn::gemm::kernels {
template void run_mma_sync<__nv_bfloat16, false, true>(const GemmArgs&, bool, bool,
                                                       const LaunchSite&);
template void run_mma_sync<__nv_bfloat16, false, false>(const GemmArgs&, bool, bool,
                                                        const LaunchSite&);
}  // namespace rudnn::gemm::kernels
