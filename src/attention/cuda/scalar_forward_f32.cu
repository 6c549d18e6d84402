// FlashScalar and SplitKv forward for f32 (scalar_forward_launch.cuh).
#include "attention/cuda/scalar_forward_launch.cuh"

namespace rudnn::attn::cuda {
template void scalar_forward<float>(const AttentionForward&, const Stream&);
}  // namespace rudnn::attn::cuda
