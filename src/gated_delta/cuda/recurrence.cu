// Dispatch of the recurrence on q's dtype (the kernels live in recurrence_<dtype>.cu).
#include "gated_delta/cuda/recurrence.cuh"

namespace rudnn::gdn::cuda {

extern template void launch_recurrence<float>(const Recurrence&, const Stream&);
extern template void launch_recurrence<__half>(const Recurrence&, const Stream&);
extern template void launch_recurrence<__nv_bfloat16>(const Recurrence&, const Stream&);

void recurrence(const Recurrence& p, const Stream& stream) {
  if (p.batch == 0) return;
  rudnn::cuda::with_float_type(
      p.dtype, [&](auto tag) { launch_recurrence<typename decltype(tag)::type>(p, stream); });
}

}  // namespace rudnn::gdn::cuda
