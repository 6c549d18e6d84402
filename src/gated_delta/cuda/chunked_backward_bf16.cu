// The chunked backward kernels for bf16 inputs (one file per dtype keeps the compile parallel;
// the forward's kernels are chunked_bf16.cu's).
#include "gated_delta/cuda/chunked_backward.cuh"

namespace rudnn::gdn::cuda::chunk {
extern template void launch<__nv_bfloat16>(const Chunked&, void*, const Stream&);
template void launch_backward<__nv_bfloat16>(const ChunkedBackward&, void*, const Stream&);
}  // namespace rudnn::gdn::cuda::chunk
