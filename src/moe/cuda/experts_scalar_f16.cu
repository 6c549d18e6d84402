// The Scalar expert kernels for f16 (one dtype per file keeps each compile small).
#include "moe/cuda/experts_decode.cuh"
#include "moe/cuda/experts_scalar.cuh"

namespace rudnn::moe::cuda {
template void experts_scalar<__half>(const ExpertsForward&, void*, const Stream&);
template void experts_scalar_backward<__half>(const ExpertsBackward&, const BackwardScratch&,
                                              const Stream&);
template void experts_decode<__half>(const ExpertsForward&, void*, const Stream&);
}  // namespace rudnn::moe::cuda
