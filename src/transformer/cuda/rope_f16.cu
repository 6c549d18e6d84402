// rope's kernels for f16 (one file per dtype keeps each compilation small).
#include "transformer/cuda/rope.cuh"

namespace rudnn::transformer::cuda {
template void launch_rope<__half>(const Rope& p, const LaunchContext& ctx);
}  // namespace rudnn::transformer::cuda
