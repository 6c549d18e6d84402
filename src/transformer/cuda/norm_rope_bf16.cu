// norm_rope's kernels for bf16 (one file per dtype keeps each compilation small).
#include "transformer/cuda/norm_rope.cuh"

namespace rudnn::transformer::cuda {
template void launch_norm_rope<__nv_bfloat16>(const NormRope& q, const LaunchContext& ctx);
}  // namespace rudnn::transformer::cuda
