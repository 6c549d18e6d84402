// The FP32 CUDA-core GEMM kernel (f32 without TF32).
#include "core/cuda_check.h"
#include "cuda/device_info.h"
#include "gemm/launch.h"
#include "gemm/simt_gemm.cuh"

namespace rudnn::gemm::kernels {

void run_simt(const GemmArgs& args, const LaunchSite& site) {
  auto kernel = simt_gemm_kernel<RuntimeActivation>;
  static cuda::PerDevice<int> occupancy;
  const int per_sm = occupancy.get(site.device, [&] {
    int blocks = 0;
    detail::check_cuda(cudaOccupancyMaxActiveBlocksPerMultiprocessor(
                           &blocks, kernel, SimtTraits::kThreads, SimtTraits::kSharedBytes),
                       "cudaOccupancyMaxActiveBlocksPerMultiprocessor");
    return blocks < 1 ? 1 : blocks;
  });
  const int grid = persistent_grid(args, SimtTraits::kBlockM, SimtTraits::kBlockN, per_sm, site);
  kernel<<<grid, SimtTraits::kThreads, SimtTraits::kSharedBytes, site.stream>>>(
      args, RuntimeActivation{args.activation});
  detail::check_launch("simt_gemm_kernel");
}

}  // namespace rudnn::gemm::kernels
