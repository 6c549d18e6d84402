// The launcher of the Hopper backward (flash_hopper_backward.cuh) for D = Dv: clears the dQ
// workspace and its counters (the plan's scratch, backward_layout), runs the kernel over
// (batch, KV head, key tile), then rounds the workspace into dq. D_i is already in the
// scratch (flash_backward_launch.cuh ran the row kernel). Both dtypes are instantiated in
// flash_hopper_backward_d<D>.cu.
#pragma once

#include <algorithm>
#include <type_traits>

#include "attention/cuda/flash_hopper_backward.cuh"
#include "attention/cuda/flash_hopper_launch.cuh"
#include "attention/cuda/kernels.h"
#include "attention/cuda/loads.cuh"
#include "attention/plan.h"
#include "cuda/launch.cuh"

namespace rudnn::attn::cuda {

template <class T, int D>
void flash_hopper_backward(const AttentionBackward& p, const float* row_dot,
                           const Stream& stream) {
  using Tr = hopper::BackwardTraits<D>;
  const rudnn::cuda::LaunchContext ctx(stream);
  const AttentionSizes& sz = p.sizes;
  const int64_t stat_rows = sz.batch * sz.heads_q * sz.len_q;
  const BackwardLayout layout =
      backward_layout(stat_rows, p.rules.sinks != nullptr, 0,
                      hopper_dq_sizes(sz.batch, sz.heads_q, sz.len_q, D));
  char* const scratch = static_cast<char*>(p.scratch);
  detail::check_cuda(
      cudaMemsetAsync(scratch + layout.dq_accum, 0, layout.dq_clear_bytes, ctx.stream),
      "cudaMemsetAsync(attention dq workspace)");

  hopper::HopperBackwardArgs a;
  a.batch = sz.batch;
  a.heads_q = static_cast<int>(sz.heads_q);
  a.heads_kv = static_cast<int>(sz.heads_kv);
  a.group = static_cast<int>(sz.heads_q / sz.heads_kv);
  a.len_q = static_cast<int>(sz.len_q);
  a.len_k = static_cast<int>(sz.len_k);
  a.n_blocks = static_cast<int>((sz.len_k + Tr::kBlockN - 1) / Tr::kBlockN);
  a.m_blocks = static_cast<int>((sz.len_q + Tr::kBlockM - 1) / Tr::kBlockM);
  a.causal = p.rules.causal;
  a.deterministic = p.deterministic;
  a.scale_log2 = p.rules.scale * hopper::kLog2e;
  a.lse = static_cast<const float*>(p.lse);
  a.row_dot = row_dot;
  a.stats_b = p.lse_layout.stride_b;
  a.stats_h = p.lse_layout.stride_h;
  a.dq_accum = reinterpret_cast<float*>(scratch + layout.dq_accum);
  a.semaphores = reinterpret_cast<int*>(scratch + layout.dq_counters);
  a.dk_scale = p.rules.scale;
  a.dk = p.dk.data;
  a.dk_batch_stride = p.dk.batch_stride;
  a.dk_seq_stride = p.dk.seq_stride;
  a.dk_head_stride = p.dk.head_stride;
  a.dv = p.dv.data;
  a.dv_batch_stride = p.dv.batch_stride;
  a.dv_seq_stride = p.dv.seq_stride;
  a.dv_head_stride = p.dv.head_stride;
  constexpr int64_t esize = sizeof(T);
  a.pair_dk = aligned_for(p.dk.data, esize, 4,
                          {p.dk.batch_stride, p.dk.seq_stride, p.dk.head_stride});
  a.pair_dv = aligned_for(p.dv.data, esize, 4,
                          {p.dv.batch_stride, p.dv.seq_stride, p.dv.head_stride});

  {
    // Pairs whose Q, dO (every query head of the group), K and V fit in half the L2 form a
    // section; at least one.
    const int64_t l2 = rudnn::cuda::device_info(ctx.device).l2_bytes;
    const int64_t per_pair =
        std::max<int64_t>(1, (a.group * sz.len_q + sz.len_k) * D * 2 * int64_t{sizeof(T)});
    const int64_t fit = std::max<int64_t>(1, l2 / 2 / per_pair);
    a.section_pairs = static_cast<int>(std::min<int64_t>(fit, sz.batch * sz.heads_kv));
  }
  const DType dtype = std::is_same_v<T, __half> ? DType::f16 : DType::bf16;
  const CUtensorMap map_q =
      hopper_detail::view_map(p.q, D, dtype, Tr::kBlockM, a.q_head_inner);
  const CUtensorMap map_do =
      hopper_detail::view_map(p.dout, D, dtype, Tr::kBlockM, a.do_head_inner);
  const CUtensorMap map_k =
      hopper_detail::view_map(p.k, D, dtype, Tr::kBlockN, a.k_head_inner);
  const CUtensorMap map_v =
      hopper_detail::view_map(p.v, D, dtype, Tr::kBlockN, a.v_head_inner);

  auto kernel = hopper::flash_hopper_backward_kernel<T, D>;
  static rudnn::cuda::PerDevice<signed char> configured;
  configured.get(ctx.device, [&]() -> signed char {
    detail::check_cuda(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                            Tr::kSharedBytes),
                       "cudaFuncSetAttribute(flash_hopper_backward_kernel)");
    return 1;
  });
  const int64_t blocks = sz.batch * sz.heads_kv * a.n_blocks;
  kernel<<<static_cast<unsigned>(blocks), Tr::kThreads, Tr::kSharedBytes, ctx.stream>>>(
      map_q, map_k, map_v, map_do, a);
  detail::check_launch("flash_hopper_backward_kernel");

  const int64_t chunks = sz.batch * sz.heads_q * sz.len_q * (D / 8);
  const bool vec = aligned_for(p.dq.data, esize, 16,
                               {p.dq.batch_stride, p.dq.seq_stride, p.dq.head_stride});
  hopper::dq_convert_kernel<T, D>
      <<<static_cast<unsigned>(std::min<int64_t>((chunks + 255) / 256, int64_t{1} << 16)), 256, 0,
         ctx.stream>>>(a.dq_accum, p.dq.data, sz.batch, a.heads_q, a.len_q,
                       a.m_blocks, p.dq.batch_stride, p.dq.seq_stride,
                       p.dq.head_stride, p.rules.scale, vec);
  detail::check_launch("attention dq_convert_kernel");
}

}  // namespace rudnn::attn::cuda
