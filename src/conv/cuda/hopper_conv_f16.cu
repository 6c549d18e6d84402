// The f16 kernels of the Hopper implicit-GEMM convolution (hopper_conv.cuh; the bf16 ones and
// the host side are in hopper_conv.cu), in a file of their own so that builds stay parallel.
#include "conv/cuda/hopper_conv.cuh"

namespace rudnn::conv_detail::cuda {
template void run_hopper_conv<__half, 64>(const HopperConvCall&, cudaStream_t, Device);
template void run_hopper_conv<__half, 128>(const HopperConvCall&, cudaStream_t, Device);
template void run_hopper_conv<__half, 256>(const HopperConvCall&, cudaStream_t, Device);
}  // namespace rudnn::conv_detail::cuda
