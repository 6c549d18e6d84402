#include "interpolation/cuda/kernels.cuh"

namespace rudnn::interpolation_detail::cuda {
template void forward_typed<__half>(const Forward& p, cudaStream_t stream, int multiprocessors);
template void backward_typed<__half>(const Backward& p, cudaStream_t stream,
                                              int multiprocessors);
}  // namespace rudnn::interpolation_detail::cuda
