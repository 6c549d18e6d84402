// rope's entry point: the dtype picks the instantiation (rope_{f32,f16,bf16}.cu).
#include "transformer/cuda/rope.cuh"

namespace rudnn::transformer::cuda {

extern template void launch_rope<float>(const Rope& p, const LaunchContext& ctx);
extern template void launch_rope<__half>(const Rope& p, const LaunchContext& ctx);
extern template void launch_rope<__nv_bfloat16>(const Rope& p, const LaunchContext& ctx);

void rope(const Rope& p, const Stream& stream) {
  const LaunchContext ctx(stream);
  with_float_type(p.dtype, [&](auto tag) { launch_rope<typename decltype(tag)::type>(p, ctx); });
}

}  // namespace rudnn::transformer::cuda
