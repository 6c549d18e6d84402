// The chunked backward kernels for f32 inputs (one file per dtype keeps the compile parallel;
// the forward's kernels are chunked_f32.cu's).
#include "gated_delta/cuda/chunked_backward.cuh"

namespace rudnn::gdn::cuda::chunk {
extern template void launch<float>(const Chunked&, void*, const Stream&);
template void launch_backward<float>(const ChunkedBackward&, void*, const Stream&);
}  // namespace rudnn::gdn::cuda::chunk
