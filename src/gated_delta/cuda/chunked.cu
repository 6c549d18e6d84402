// Dispatch of the chunked prefill on q's dtype (the kernels live in chunked_<dtype>.cu).
#include "gated_delta/cuda/chunked.cuh"

namespace rudnn::gdn::cuda {

namespace chunk {
extern template void launch<float>(const Chunked&, void*, const Stream&);
extern template void launch<__half>(const Chunked&, void*, const Stream&);
extern template void launch<__nv_bfloat16>(const Chunked&, void*, const Stream&);
}  // namespace chunk

int64_t chunked_shared_bytes(const Chunked& p) {
  // Each kernel at its smallest configuration: one operand stage for the state pass, 16 value
  // columns a block for the output.
  const chunk::Geometry geo(p);
  int64_t bytes = geo.prep_bytes;
  for (const int64_t b : {geo.state_layout(chunk::kSlab).bytes(1), geo.out_layout(16).bytes})
    bytes = b > bytes ? b : bytes;
  return bytes;
}

int64_t chunked_workspace_bytes(const Chunked& p) { return chunk::Geometry(p).ws_bytes; }

void chunked(const Chunked& p, void* workspace, const Stream& stream) {
  if (p.batch == 0 || p.value_heads == 0) return;
  rudnn::cuda::with_float_type(p.dtype, [&](auto tag) {
    chunk::launch<typename decltype(tag)::type>(p, workspace, stream);
  });
}

}  // namespace rudnn::gdn::cuda
