// run_mma_sync: the persistent grid sized by occupancy. Included by the
// mma_sync_<type>_a<layout>.cu files, each instantiating both layouts of B.
#pragma once

#include "core/cuda_check.h"
#include "cuda/device_info.h"
#include "gemm/launch.h"
#include "gemm/mma_sync_gemm.cuh"

namespace rudnn::gemm::kernels {

template <class T, bool kARowMajor, bool kBRowMajor>
void run_mma_sync(const GemmArgs& args, bool a_vector, bool b_vector, const LaunchSite& site) {
  using Traits = MmaSyncTraits<T>;
  auto kernel = mma_sync_gemm_kernel<T, kARowMajor, kBRowMajor, RuntimeActivation>;
  static cuda::PerDevice<int> occupancy;
  const int per_sm = occupancy.get(site.device, [&] {
    detail::check_cuda(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                            Traits::kSharedBytes),
                       "cudaFuncSetAttribute(mma_sync_gemm_kernel)");
    int blocks = 0;
    detail::check_cuda(cudaOccupancyMaxActiveBlocksPerMultiprocessor(
                           &blocks, kernel, Traits::kThreads, Traits::kSharedBytes),
                       "cudaOccupancyMaxActiveBlocksPerMultiprocessor");
    return blocks < 1 ? 1 : blocks;
  });
  const int grid = persistent_grid(args, Traits::kBlockM, Traits::kBlockN, per_sm, site);
  kernel<<<grid, Traits::kThreads, Traits::kSharedBytes, site.stream>>>(
      args, RuntimeActivation{args.activation}, a_vector, b_vector);
  detail::check_launch("mma_sync_gemm_kernel");
}

}  // namespace rudnn::gemm::kernels
