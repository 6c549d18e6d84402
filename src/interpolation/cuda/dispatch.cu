// Entry points of the CUDA backend: the device and dtype picked here, the kernels of
// kernels.cuh instantiated once per dtype (interp_{f32,f16,bf16}.cu).
#include "interpolation/cuda/kernels.cuh"

namespace rudnn::interpolation_detail::cuda {

extern template void forward_typed<float>(const Forward&, cudaStream_t, int);
extern template void forward_typed<__half>(const Forward&, cudaStream_t, int);
extern template void forward_typed<__nv_bfloat16>(const Forward&, cudaStream_t, int);
extern template void backward_typed<float>(const Backward&, cudaStream_t, int);
extern template void backward_typed<__half>(const Backward&, cudaStream_t, int);
extern template void backward_typed<__nv_bfloat16>(const Backward&, cudaStream_t, int);

void forward(const Forward& p, const Stream& stream) {
  const rudnn::cuda::LaunchContext ctx(stream);
  const int multiprocessors = rudnn::cuda::device_info(ctx.device).multiprocessors;
  rudnn::cuda::with_float_type(p.s.dtype, [&](auto tag) {
    forward_typed<typename decltype(tag)::type>(p, ctx.stream, multiprocessors);
  });
}

void backward(const Backward& p, const Stream& stream) {
  const rudnn::cuda::LaunchContext ctx(stream);
  const int multiprocessors = rudnn::cuda::device_info(ctx.device).multiprocessors;
  rudnn::cuda::with_float_type(p.s.dtype, [&](auto tag) {
    backward_typed<typename decltype(tag)::type>(p, ctx.stream, multiprocessors);
  });
}

}  // namespace rudnn::interpolation_detail::cuda
