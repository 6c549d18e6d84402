#include "grid_sample/cuda/sample.cuh"

namespace rudnn::grid_sample_detail::cuda {
template void sample_forward_typed<__half>(const SampleForward& p, cudaStream_t stream);
template void sample_backward_typed<__half>(const SampleBackward& p, cudaStream_t stream);
}  // namespace rudnn::grid_sample_detail::cuda
