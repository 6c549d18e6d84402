// The chunked prefill kernels for f32 inputs (one file per dtype keeps the compile parallel).
#include "gated_delta/cuda/chunked.cuh"

namespace rudnn::gdn::cuda::chunk {
template void launch<float>(const Chunked&, void*, const Stream&);
}  // namespace rudnn::gdn::cuda::chunk
