// norm_rope's kernels for f32 (one file per dtype keeps each compilation small).
#include "transformer/cuda/norm_rope.cuh"

namespace rudnn::transformer::cuda {
template void launch_norm_rope<float>(const NormRope& q, const LaunchContext& ctx);
}  // namespace rudnn::transformer::cuda
