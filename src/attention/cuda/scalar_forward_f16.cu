// FlashScalar and SplitKv forward for f16 (scalar_forward_launch.cuh).
#include "attention/cuda/scalar_forward_launch.cuh"

namespace rudnn::attn::cuda {
template void scalar_forward<__half>(const AttentionForward&, const Stream&);
}  // namespace rudnn::attn::cuda
