// The recurrence kernels for f16 q/k/v (one file per dtype keeps the CI compile parallel).
#include "gated_delta/cuda/recurrence.cuh"

namespace rudnn::gdn::cuda {
template void launch_recurrence<__half>(const Recurrence&, const Stream&);
}  // namespace rudnn::gdn::cuda
