// Dispatch of the recurrence and its backward on q's dtype (the kernels live in
// recurrence_<dtype>.cu and recurrence_backward_<dtype>.cu).
#include "gated_delta/cuda/recurrence.cuh"
#include "gated_delta/cuda/recurrence_backward.cuh"

namespace rudnn::gdn::cuda {

extern template void launch_recurrence<float>(const Recurrence&, const Stream&);
extern template void launch_recurrence<__half>(const Recurrence&, const Stream&);
extern template void launch_recurrence<__nv_bfloat16>(const Recurrence&, const Stream&);
extern template void launch_backward<float>(const RecurrenceBackward&, const Stream&);
extern template void launch_backward<__half>(const RecurrenceBackward&, const Stream&);
extern template void launch_backward<__nv_bfloat16>(const RecurrenceBackward&, const Stream&);

void recurrence(const Recurrence& p, const Stream& stream) {
  if (p.batch == 0) return;
  rudnn::cuda::with_float_type(
      p.dtype, [&](auto tag) { launch_recurrence<typename decltype(tag)::type>(p, stream); });
}

void recurrence_backward(const RecurrenceBackward& p, const Stream& stream) {
  if (p.f.batch == 0) return;
  rudnn::cuda::with_float_type(
      p.f.dtype, [&](auto tag) { launch_backward<typename decltype(tag)::type>(p, stream); });
}

int64_t backward_workspace_floats(const Recurrence& f) { return BackwardLayout(f).total; }

}  // namespace rudnn::gdn::cuda
