// Entry points of the CUDA backend: the device and dtype picked here, the kernels in
// sample.cuh instantiated once per dtype (sample_{f32,f16,bf16}.cu).
#include "grid_sample/cuda/sample.cuh"

namespace rudnn::grid_sample_detail::cuda {

extern template void sample_forward_typed<float>(const SampleForward&, cudaStream_t);
extern template void sample_forward_typed<__half>(const SampleForward&, cudaStream_t);
extern template void sample_forward_typed<__nv_bfloat16>(const SampleForward&, cudaStream_t);
extern template void sample_backward_typed<float>(const SampleBackward&, cudaStream_t);
extern template void sample_backward_typed<__half>(const SampleBackward&, cudaStream_t);
extern template void sample_backward_typed<__nv_bfloat16>(const SampleBackward&, cudaStream_t);

void sample_forward(const SampleForward& p, const Stream& stream) {
  const rudnn::cuda::LaunchContext ctx(stream);
  rudnn::cuda::with_float_type(p.s.dtype, [&](auto tag) {
    sample_forward_typed<typename decltype(tag)::type>(p, ctx.stream);
  });
}

void sample_backward(const SampleBackward& p, const Stream& stream) {
  const rudnn::cuda::LaunchContext ctx(stream);
  rudnn::cuda::with_float_type(p.s.dtype, [&](auto tag) {
    sample_backward_typed<typename decltype(tag)::type>(p, ctx.stream);
  });
}

}  // namespace rudnn::grid_sample_detail::cuda
