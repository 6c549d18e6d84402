// rope's kernels for bf16 (one file per dtype keeps each compilation small).
#include "transformer/cuda/rope.cuh"

namespace rudnn::transformer::cuda {
template void launch_rope<__nv_bfloat16>(const Rope& p, const LaunchContext& ctx);
}  // namespace rudnn::transformer::cuda
