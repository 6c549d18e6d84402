// Dispatch of the chunked prefill and its backward on q's dtype (the kernels live in
// chunked_<dtype>.cu and chunked_backward_<dtype>.cu).
#include "gated_delta/cuda/chunked_backward.cuh"

namespace rudnn::gdn::cuda {

namespace chunk {
extern template void launch<float>(const Chunked&, void*, const Stream&);
extern template void launch<__half>(const Chunked&, void*, const Stream&);
extern template void launch<__nv_bfloat16>(const Chunked&, void*, const Stream&);
extern template void launch_backward<float>(const ChunkedBackward&, void*, const Stream&);
extern template void launch_backward<__half>(const ChunkedBackward&, void*, const Stream&);
extern template void launch_backward<__nv_bfloat16>(const ChunkedBackward&, void*,
                                                     const Stream&);
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

ChunkedTuning& chunked_tuning() {
  static ChunkedTuning tuning;
  return tuning;
}

void chunked(const Chunked& p, void* workspace, const Stream& stream) {
  if (p.batch == 0 || p.value_heads == 0) return;
  rudnn::cuda::with_float_type(p.dtype, [&](auto tag) {
    chunk::launch<typename decltype(tag)::type>(p, workspace, stream);
  });
}

namespace {
Chunked backward_forward(const Chunked& f) {
  Chunked p = f;
  p.keep_wy = true;
  return p;
}
}  // namespace

int64_t chunked_backward_shared_bytes(const Chunked& f) {
  const Chunked p = backward_forward(f);
  const chunk::Geometry geo(p);
  int64_t bytes = chunked_shared_bytes(p);
  for (const int64_t b : {chunk::dstate_layout(geo, chunk::kSlab).bytes(1),
                          chunk::grad_v_layout(geo).bytes, chunk::grad_qk_layout(geo).bytes})
    bytes = b > bytes ? b : bytes;
  return bytes;
}

int64_t chunked_backward_workspace_bytes(const Chunked& f) {
  const Chunked p = backward_forward(f);
  const chunk::Geometry geo(p);
  return chunk::BackwardGeometry(geo, geo.slots * p.value_heads).bytes;
}

void chunked_backward(const ChunkedBackward& p, void* workspace, const Stream& stream) {
  if (p.f.batch == 0 || p.f.value_heads == 0) return;
  rudnn::cuda::with_float_type(p.f.dtype, [&](auto tag) {
    chunk::launch_backward<typename decltype(tag)::type>(p, workspace, stream);
  });
}

}  // namespace rudnn::gdn::cuda
