// Flash backward, D = Dv = 64, f16 and bf16 (flash_backward_launch.cuh).
#include "attention/cuda/flash_backward_launch.cuh"

namespace rudnn::attn::cuda {
template void flash_backward<__half, 64, 64>(const AttentionBackward&, const Stream&);
template void flash_backward<__nv_bfloat16, 64, 64>(const AttentionBackward&, const Stream&);
}  // namespace rudnn::attn::cuda
