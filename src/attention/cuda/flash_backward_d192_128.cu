// Flash backward, D = 192, Dv = 128, f16 and bf16 (flash_backward_launch.cuh).
#include "attention/cuda/flash_backward_launch.cuh"

namespace rudnn::attn::cuda {
template void flash_backward<__half, 192, 128>(const AttentionBackward&, const Stream&);
template void flash_backward<__nv_bfloat16, 192, 128>(const AttentionBackward&, const Stream&);
}  // namespace rudnn::attn::cuda
