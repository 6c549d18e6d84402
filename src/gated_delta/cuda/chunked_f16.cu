// The chunked prefill kernels for f16 inputs (one file per dtype keeps the compile parallel).
#include "gated_delta/cuda/chunked.cuh"

namespace rudnn::gdn::cuda::chunk {
template void launch<__half>(const Chunked&, void*, const Stream&);
}  // namespace rudnn::gdn::cuda::chunk
