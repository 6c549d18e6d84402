// Flash forward, D = 128, Dv = 128, f16 and bf16 (flash_forward_launch.cuh).
#include "attention/cuda/flash_forward_launch.cuh"

namespace rudnn::attn::cuda {
template void flash_forward<__half, 128, 128>(const AttentionForward&, const Stream&);
template void flash_forward<__nv_bfloat16, 128, 128>(const AttentionForward&, const Stream&);
}  // namespace rudnn::attn::cuda
