// The recurrence kernels for f32 q/k/v (one file per dtype keeps the CI compile parallel).
#include "gated_delta/cuda/recurrence.cuh"

namespace rudnn::gdn::cuda {
template void launch_recurrence<float>(const Recurrence&, const Stream&);
}  // namespace rudnn::gdn::cuda
