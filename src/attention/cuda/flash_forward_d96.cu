// Flash forward, D = 96, Dv = 96, f16 and bf16 (flash_forward_launch.cuh).
#include "attention/cuda/flash_forward_launch.cuh"

namespace rudnn::attn::cuda {
template void flash_forward<__half, 96, 96>(const AttentionForward&, const Stream&);
template void flash_forward<__nv_bfloat16, 96, 96>(const AttentionForward&, const Stream&);
}  // namespace rudnn::attn::cuda
