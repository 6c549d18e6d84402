// FlashScalar backward for f16 (scalar_backward_launch.cuh).
#include "attention/cuda/scalar_backward_launch.cuh"

namespace rudnn::attn::cuda {
template void scalar_backward<__half>(const AttentionBackward&, const Stream&);
}  // namespace rudnn::attn::cuda
