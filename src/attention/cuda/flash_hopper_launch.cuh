// The launcher of the Hopper forward (flash_hopper.cuh) for one head size D = Dv: both 16-bit
// dtypes are instantiated in flash_hopper_d<D>.cu, one file per head size.
#pragma once

#include "attention/cuda/flash_hopper.cuh"
#include "attention/cuda/kernels.h"
#include "attention/cuda/loads.cuh"
#include "attention/plan.h"
#include "cuda/launch.cuh"
#include "cuda/tensor_core/tensor_map.h"

namespace rudnn::attn::cuda {

namespace hopper_detail {

// The 4-d map of a [batch, seq, heads, D] view, boxes of 64 features x `rows` rows:
// [D, seq, head, batch] innermost first, the two middle axes in the order of their strides
// (head_inner: [D, head, seq, batch]). A size-1 axis takes a packed stride (its coordinate
// is always 0), so that views with an arbitrary stride there encode too. The attention
// entry point made the view TMA-readable (flash_hopper_view_ok) before planning the launch.
inline CUtensorMap view_map(const BshdIn& v, int64_t dim, DType dtype, int rows,
                            bool& head_inner) {
  head_inner = v.shape.heads > 1 && v.shape.seq > 1 && v.head_stride < v.seq_stride;
  const int64_t esize = 2;
  rudnn::cuda::tc::TensorMapSpec s;
  s.type = rudnn::cuda::tc::tensor_map_type(dtype);
  s.rank = 4;
  s.base = v.data;
  const int64_t ext[3] = {head_inner ? v.shape.heads : v.shape.seq,
                          head_inner ? v.shape.seq : v.shape.heads, v.shape.batch};
  const int64_t str[3] = {head_inner ? v.head_stride : v.seq_stride,
                          head_inner ? v.seq_stride : v.head_stride, v.batch_stride};
  s.dims[0] = static_cast<cuuint64_t>(dim);
  int64_t packed = dim * esize;  // bytes spanned by the axes inside the current one
  for (int i = 0; i < 3; ++i) {
    s.dims[i + 1] = static_cast<cuuint64_t>(ext[i]);
    const int64_t bytes = ext[i] == 1 ? (packed + 15) / 16 * 16 : str[i] * esize;
    s.strides[i] = static_cast<cuuint64_t>(bytes);
    packed = bytes * ext[i];
  }
  s.box[0] = 64;
  s.box[1] = static_cast<cuuint32_t>(head_inner ? 1 : rows);
  s.box[2] = static_cast<cuuint32_t>(head_inner ? rows : 1);
  s.box[3] = 1;
  s.swizzle = CU_TENSOR_MAP_SWIZZLE_128B;
  return rudnn::cuda::tc::encode_tensor_map(s);
}

}  // namespace hopper_detail

template <class T, int D>
void flash_hopper_forward(const AttentionForward& p, const Stream& stream) {
  using Tr = hopper::Traits<D>;
  const rudnn::cuda::LaunchContext ctx(stream);
  const AttentionSizes& sz = p.sizes;
  hopper::HopperForwardArgs a;
  a.batch = sz.batch;
  a.heads_q = static_cast<int>(sz.heads_q);
  a.group = static_cast<int>(sz.heads_q / sz.heads_kv);
  a.len_q = static_cast<int>(sz.len_q);
  a.len_k = static_cast<int>(sz.len_k);
  a.m_blocks = static_cast<int>((sz.len_q + Tr::kBlockM - 1) / Tr::kBlockM);
  a.causal = p.rules.causal;
  a.scale_log2 = p.rules.scale * hopper::kLog2e;
  a.out = p.out.data;
  a.out_batch_stride = p.out.batch_stride;
  a.out_seq_stride = p.out.seq_stride;
  a.out_head_stride = p.out.head_stride;
  a.vec_out = aligned_for(p.out.data, int64_t{sizeof(T)}, 16,
                          {p.out.batch_stride, p.out.seq_stride, p.out.head_stride});
  a.lse = static_cast<float*>(p.lse);
  a.lse_stride_b = p.lse_layout.stride_b;
  a.lse_stride_h = p.lse_layout.stride_h;
  const int64_t blocks = sz.batch * sz.heads_q * a.m_blocks;
  if (blocks == 0) return;
  if (sz.len_k == 0) {
    // No keys: nothing for the tensor-core kernel to do (and a map cannot describe an empty
    // axis); zeros and -inf by a plain kernel on the same stream, every element written.
    const int64_t n = sz.batch * sz.heads_q * sz.len_q * D;
    hopper::no_keys_kernel<T><<<static_cast<unsigned>(std::min<int64_t>((n + 255) / 256, 4096)),
                                256, 0, ctx.stream>>>(a, D);
    detail::check_launch("attention no_keys_kernel");
    return;
  }
  if (a.causal && a.m_blocks > 1) {
    // Heads whose K and V (together, a GQA group's counted once per query head) fit in
    // half the L2 form a section; at least one.
    const int64_t l2 = rudnn::cuda::device_info(ctx.device).l2_bytes;
    const int64_t kv_per_head = std::max<int64_t>(1, 2 * sz.len_k * D * 2 / a.group);
    const int64_t fit = std::max<int64_t>(1, l2 / 2 / kv_per_head);
    a.section_heads = static_cast<int>(std::min<int64_t>(fit, sz.batch * sz.heads_q));
  }
  const DType dtype = std::is_same_v<T, __half> ? DType::f16 : DType::bf16;
  const CUtensorMap map_q = hopper_detail::view_map(p.q, D, dtype, Tr::kBlockM, a.q_head_inner);
  const CUtensorMap map_k = hopper_detail::view_map(p.k, D, dtype, Tr::kBlockN, a.k_head_inner);
  const CUtensorMap map_v = hopper_detail::view_map(p.v, D, dtype, Tr::kBlockN, a.v_head_inner);

  auto kernel = hopper::flash_hopper_kernel<T, D>;
  static rudnn::cuda::PerDevice<signed char> configured;
  configured.get(ctx.device, [&]() -> signed char {
    detail::check_cuda(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                            Tr::kSharedBytes),
                       "cudaFuncSetAttribute(flash_hopper_kernel)");
    return 1;
  });
  kernel<<<static_cast<unsigned>(blocks), Tr::kThreads, Tr::kSharedBytes, ctx.stream>>>(
      map_q, map_k, map_v, a);
  detail::check_launch("flash_hopper_kernel");
}

}  // namespace rudnn::attn::cuda
