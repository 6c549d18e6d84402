// FlashScalar backward for bf16 (scalar_backward_launch.cuh).
#include "attention/cuda/scalar_backward_launch.cuh"

namespace rudnn::attn::cuda {
template void scalar_backward<__nv_bfloat16>(const AttentionBackward&, const Stream&);
}  // namespace rudnn::attn::cuda
