// The chunked prefill kernels for bf16 inputs (one file per dtype keeps the compile parallel).
#include "gated_delta/cuda/chunked.cuh"

namespace rudnn::gdn::cuda::chunk {
template void launch<__nv_bfloat16>(const Chunked&, void*, const Stream&);
}  // namespace rudnn::gdn::cuda::chunk
