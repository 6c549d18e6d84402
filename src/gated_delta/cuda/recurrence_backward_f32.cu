// The backward kernels for f32 q/k/v (one file per dtype keeps the CI compile parallel).
#include "gated_delta/cuda/recurrence_backward.cuh"

namespace rudnn::gdn::cuda {
template void launch_backward<float>(const RecurrenceBackward&, const Stream&);
}  // namespace rudnn::gdn::cuda
