// Hopper flash backward, D = Dv = 128, f16 and bf16 (flash_hopper_backward_launch.cuh).
#include "attention/cuda/flash_hopper_backward_launch.cuh"

namespace rudnn::attn::cuda {
template void flash_hopper_backward<__half, 128>(const AttentionBackward&, const float*,
                                                 const Stream&);
template void flash_hopper_backward<__nv_bfloat16, 128>(const AttentionBackward&, const float*,
                                                        const Stream&);
}  // namespace rudnn::attn::cuda
