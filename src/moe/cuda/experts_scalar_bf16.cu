// The Scalar expert kernels for bf16 (one dtype per file keeps each compile small).
#include "moe/cuda/experts_decode.cuh"
#include "moe/cuda/experts_scalar.cuh"

namespace rudnn::moe::cuda {
template void experts_scalar<__nv_bfloat16>(const ExpertsForward&, void*, const Stream&);
template void experts_scalar_backward<__nv_bfloat16>(const ExpertsBackward&, const BackwardScratch&,
                                                     const Stream&);
template void experts_decode<__nv_bfloat16>(const ExpertsForward&, void*, const Stream&);
}  // namespace rudnn::moe::cuda
