// Hopper flash forward, D = Dv = 64, f16 and bf16 (flash_hopper_launch.cuh).
#include "attention/cuda/flash_hopper_launch.cuh"

namespace rudnn::attn::cuda {
template void flash_hopper_forward<__half, 64>(const AttentionForward&, const Stream&);
template void flash_hopper_forward<__nv_bfloat16, 64>(const AttentionForward&, const Stream&);
}  // namespace rudnn::attn::cuda
