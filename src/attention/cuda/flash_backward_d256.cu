// Flash backward, D = Dv = 256, f16 and bf16 (flash_backward_launch.cuh).
#include "attention/cuda/flash_backward_launch.cuh"

namespace rudnn::attn::cuda {
template void flash_backward<__half, 256, 256>(const AttentionBackward&, const Stream&);
template void flash_backward<__nv_bfloat16, 256, 256>(const AttentionBackward&, const Stream&);
}  // namespace rudnn::attn::cuda
