// The forward norms' entry point: picks the dtype's instantiation (norm_forward_<dtype>.cu).
#include "cuda/launch.cuh"
#include "normalization/cuda/launch.h"

namespace rudnn::norm::cuda {

using rudnn::cuda::LaunchContext;
using rudnn::cuda::with_float_type;

// Defined in norm_forward.cuh, instantiated in norm_forward_{f32,f16,bf16}.cu.
template <class T>
void norm_forward_typed(const NormForward& p, cudaStream_t stream);

void norm_forward(const NormForward& p, const Stream& stream) {
  const LaunchContext ctx(stream);
  with_float_type(
      p.dtype, [&](auto tag) { norm_forward_typed<typename decltype(tag)::type>(p, ctx.stream); });
}

}  // namespace rudnn::norm::cuda
