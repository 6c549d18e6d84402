// norm_rope's entry point: the dtype picks the instantiation (norm_rope_{f32,f16,bf16}.cu).
#include "transformer/cuda/norm_rope.cuh"

namespace rudnn::transformer::cuda {

extern template void launch_norm_rope<float>(const NormRope& q, const LaunchContext& ctx);
extern template void launch_norm_rope<__half>(const NormRope& q, const LaunchContext& ctx);
extern template void launch_norm_rope<__nv_bfloat16>(const NormRope& q, const LaunchContext& ctx);

void norm_rope(const NormRope& p, const Stream& stream) {
  const LaunchContext ctx(stream);
  with_float_type(p.rope.dtype,
                  [&](auto tag) { launch_norm_rope<typename decltype(tag)::type>(p, ctx); });
}

bool norm_rope_available(Device device) {
  static ::rudnn::cuda::PerDevice<signed char> known;
  const detail::cuda::DeviceGuard guard(device.index);
  return ::rudnn::cuda::built_for_hopper(norm_rope_kernel<float, 32, 1, false>, device, known);
}

}  // namespace rudnn::transformer::cuda
