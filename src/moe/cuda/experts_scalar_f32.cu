// The Scalar expert kernels for f32 (one dtype per file keeps each compile small).
#include "moe/cuda/experts_decode.cuh"
#include "moe/cuda/experts_scalar.cuh"

namespace rudnn::moe::cuda {
template void experts_scalar<float>(const ExpertsForward&, void*, const Stream&);
template void experts_scalar_backward<float>(const ExpertsBackward&, const BackwardScratch&,
                                             const Stream&);
template void experts_decode<float>(const ExpertsForward&, void*, const Stream&);
}  // namespace rudnn::moe::cuda
