// Dispatch of the chunked prefill on q's dtype (the kernels live in chunked_<dtype>.cu).
#include "gated_delta/cuda/chunked.cuh"

namespace rudnn::gdn::cuda {

namespace chunk {
extern template void launch<float>(const Chunked&, void*, const Stream&);
extern template void launch<__half>(const Chunked&, void*, const Stream&);
extern template void launch<__nv_bfloat16>(const Chunked&, void*, const Stream&);
}  // namespace chunk

int64_t chunked_shared_bytes(const Chunked& p) {
  const chunk::Geometry geo(p);
  return geo.prep_bytes > geo.scan_bytes ? geo.prep_bytes : geo.scan_bytes;
}

int64_t chunked_workspace_bytes(const Chunked& p) { return chunk::Geometry(p).ws_bytes; }

void chunked(const Chunked& p, void* workspace, const Stream& stream) {
  if (p.sequences == 0 || p.heads == 0) return;
  rudnn::cuda::with_float_type(p.dtype, [&](auto tag) {
    chunk::launch<typename decltype(tag)::type>(p, workspace, stream);
  });
}

}  // namespace rudnn::gdn::cuda
