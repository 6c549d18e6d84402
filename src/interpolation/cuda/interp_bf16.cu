#include "interpolation/cuda/kernels.cuh"

namespace rudnn::interpolation_detail::cuda {
template void forward_typed<__nv_bfloat16>(const Forward& p, cudaStream_t stream, int multiprocessors);
template void backward_typed<__nv_bfloat16>(const Backward& p, cudaStream_t stream,
                                              int multiprocessors);
}  // namespace rudnn::interpolation_detail::cuda
