// norm_rope's kernels for f16 (one file per dtype keeps each compilation small).
#include "transformer/cuda/norm_rope.cuh"

namespace rudnn::transformer::cuda {
template void launch_norm_rope<__half>(const NormRope& q, const LaunchContext& ctx);
}  // namespace rudnn::transformer::cuda
