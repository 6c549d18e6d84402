// The paged forward for f32 (forward_launch.cuh).
#include "paged_attention/cuda/forward_launch.cuh"

namespace rudnn::paged::cuda {
template void forward_typed<float>(const PagedForward&, const Stream&);
}  // namespace rudnn::paged::cuda
