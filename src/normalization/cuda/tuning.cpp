#include "normalization/cuda/tuning.h"

#include <cstddef>
#include <cstdint>
#include <cstdio>

namespace rudnn::norm::cuda {

KernelTuning& kernel_tuning() {
  static KernelTuning tuning;
  return tuning;
}

void trace_launch(const char* kernel, unsigned grid, int block, size_t shared, int64_t resident,
                  int cluster) {
  if (!kernel_tuning().trace) return;
  std::fprintf(stderr,
               "rudnn trace: %s grid %u block %d cluster %d dynamic shared %zu B, resident %lld\n",
               kernel, grid, block, cluster, shared, static_cast<long long>(resident));
}

}  // namespace rudnn::norm::cuda
