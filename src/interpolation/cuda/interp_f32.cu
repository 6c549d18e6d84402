#include "interpolation/cuda/kernels.cuh"

namespace rudnn::interpolation_detail::cuda {
template void forward_typed<float>(const Forward& p, cudaStream_t stream, int multiprocessors);
template void backward_typed<float>(const Backward& p, cudaStream_t stream,
                                              int multiprocessors);
}  // namespace rudnn::interpolation_detail::cuda
