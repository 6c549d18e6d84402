// rope's kernels for f32 (one file per dtype keeps each compilation small).
#include "transformer/cuda/rope.cuh"

namespace rudnn::transformer::cuda {
template void launch_rope<float>(const Rope& p, const LaunchContext& ctx);
}  // namespace rudnn::transformer::cuda
