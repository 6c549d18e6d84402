// The paged forward for f16 (forward_launch.cuh).
#include "paged_attention/cuda/forward_launch.cuh"

namespace rudnn::paged::cuda {
template void forward_typed<__half>(const PagedForward&, const Stream&);
}  // namespace rudnn::paged::cuda
