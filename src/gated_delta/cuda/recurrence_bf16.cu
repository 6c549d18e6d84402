// The recurrence kernels for bf16 q/k/v (one file per dtype keeps the CI compile parallel).
#include "gated_delta/cuda/recurrence.cuh"

namespace rudnn::gdn::cuda {
template void launch_recurrence<__nv_bfloat16>(const Recurrence&, const Stream&);
}  // namespace rudnn::gdn::cuda
