#include "normalization/cuda/norm_forward.cuh"

namespace rudnn::norm::cuda {
template void norm_forward_typed<float>(const NormForward& p, cudaStream_t stream);
}  // namespace rudnn::norm::cuda
