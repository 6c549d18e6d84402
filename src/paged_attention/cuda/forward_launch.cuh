// The launcher of the paged forward (forward.cuh) for one dtype: the value-size bucket
// (features per lane, rows per block), the aligned-access flags, and the merge pass of a
// split history. Included by forward_{f32,f16,bf16}.cu, one instantiation each.
#pragma once

#include "attention/cuda/loads.cuh"
#include "cuda/launch.cuh"
#include "paged_attention/cuda/decode.cuh"
#include "paged_attention/cuda/decode_tc.cuh"
#include "paged_attention/cuda/forward.cuh"
#include "paged_attention/cuda/tuning.h"

namespace rudnn::paged::cuda {

namespace forward_detail {

template <class T, int kChunks, int kRows>
void launch(ForwardArgs a, const rudnn::cuda::LaunchContext& ctx) {
  const PagedForward& p = a.p;
  a.row_tiles = (static_cast<int64_t>(a.group) * p.sched.max_item_queries + kRows - 1) / kRows;
  const int64_t blocks = p.sched.items * p.heads_kv * a.row_tiles * p.splits;
  if (blocks == 0) return;
  const size_t shared = forward_shared_bytes(kRows, a.q_stride, kChunks);
  paged_forward_kernel<T, kChunks, kRows>
      <<<static_cast<unsigned>(blocks), kThreads, shared, ctx.stream>>>(a);
  detail::check_launch("paged_forward_kernel");
}

template <class T, int D, int G, bool kPipelined>
void launch_decode_as(const ForwardArgs& a, const rudnn::cuda::LaunchContext& ctx, unsigned grid) {
  // Eight heads need every register they can get: one residency only.
  if (G <= 4 && kernel_tuning().decode_min_blocks >= 3) {
    paged_decode_kernel<T, D, G, (G <= 4 ? 3 : 1), kPipelined>
        <<<grid, kThreads, 0, ctx.stream>>>(a);
  } else {
    paged_decode_kernel<T, D, G, 1, kPipelined><<<grid, kThreads, 0, ctx.stream>>>(a);
  }
}

template <class T, int D, int G, int kStages>
void launch_decode_tc(ForwardArgs a, const rudnn::cuda::LaunchContext& ctx) {
  a.decode_heads = tc_decode_heads(kernel_tuning(), a.p.heads_kv);
  a.heads_fastest = kernel_tuning().decode_heads_fastest;
  const unsigned grid =
      static_cast<unsigned>(a.p.sched.items * (a.p.heads_kv / a.decode_heads) * a.p.splits);
  // A block's table entries: its keys' pages, plus one where its range starts mid-page.
  const int64_t keys = a.p.splits > 1 ? a.p.split_keys : a.p.max_keys;
  const int64_t entries = keys / a.p.sched.page_size + 2;
  a.page_cache = static_cast<int>(entries < kDecodePageCache ? entries : kDecodePageCache);
  a.pipeline_bytes = static_cast<int>(decode_tc_pipeline_bytes(D, G, kStages, sizeof(T)));
  const size_t shared = static_cast<size_t>(a.pipeline_bytes) + a.page_cache * sizeof(int);
  // Above the 48 KiB default; set per launch, as the setting belongs to the current device.
  detail::check_cuda(
      cudaFuncSetAttribute(paged_decode_tc_kernel<T, D, G, kStages>,
                           cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(shared)),
      "paged_decode_tc_kernel: cudaFuncSetAttribute");
  paged_decode_tc_kernel<T, D, G, kStages><<<grid, kThreads, shared, ctx.stream>>>(a);
  detail::check_launch("paged_decode_tc_kernel");
}

template <class T, int D, int G>
void launch_decode(const ForwardArgs& a, const rudnn::cuda::LaunchContext& ctx) {
  const int64_t blocks = a.p.sched.items * a.p.heads_kv * a.p.splits;
  if (blocks == 0) return;
  const unsigned grid = static_cast<unsigned>(blocks);
  if constexpr (sizeof(T) == 2) {
    if (kernel_tuning().decode_tensor_cores) {
      // Stages per warp: about 100 KiB of pipelines per block (two blocks per multiprocessor).
      if constexpr (D == 64) return launch_decode_tc<T, D, G, 4>(a, ctx);
      if constexpr (D == 256) return launch_decode_tc<T, D, G, 2>(a, ctx);
      if constexpr (D == 128) {
        if (kernel_tuning().decode_stages >= 4) return launch_decode_tc<T, D, G, 4>(a, ctx);
        if (kernel_tuning().decode_stages <= 2) return launch_decode_tc<T, D, G, 2>(a, ctx);
        return launch_decode_tc<T, D, G, 3>(a, ctx);
      }
    }
  }
  if (kernel_tuning().decode_pipelined) {
    launch_decode_as<T, D, G, true>(a, ctx, grid);
  } else {
    launch_decode_as<T, D, G, false>(a, ctx, grid);
  }
  detail::check_launch("paged_decode_kernel");
}

template <class T, int D>
void launch_decode_heads(const ForwardArgs& a, const rudnn::cuda::LaunchContext& ctx) {
  switch (a.group) {
    case 1:
      return launch_decode<T, D, 1>(a, ctx);
    case 2:
      return launch_decode<T, D, 2>(a, ctx);
    case 4:
      return launch_decode<T, D, 4>(a, ctx);
    default:
      return launch_decode<T, D, 8>(a, ctx);
  }
}

// The decode kernel for the problem's head size (decode_takes admitted it).
template <class T>
void launch_decode_dims(const ForwardArgs& a, const rudnn::cuda::LaunchContext& ctx) {
  if (a.p.dim_qk == 64) return launch_decode_heads<T, 64>(a, ctx);
  if constexpr (sizeof(T) == 2) {
    if (a.p.dim_qk == 256) return launch_decode_heads<T, 256>(a, ctx);
  }
  launch_decode_heads<T, 128>(a, ctx);
}

}  // namespace forward_detail

template <class T>
void forward_typed(const PagedForward& p, const Stream& stream) {
  using attn::cuda::aligned_for;
  using attn::cuda::kVec16;
  using forward_detail::launch;
  const rudnn::cuda::LaunchContext ctx(stream);
  const int64_t esize = sizeof(T);
  ForwardArgs a;
  a.p = p;
  a.group = static_cast<int>(p.heads_q / p.heads_kv);
  a.qp_offset = static_cast<int>((p.dim_qk + 7) / 8 * 8);
  a.q_stride = a.qp_offset + static_cast<int>((p.dim_pos + 7) / 8 * 8);
  a.vec_k = p.dim_qk % kVec16<T> == 0 &&
            aligned_for(p.k.data, esize, 16, {p.k.page_stride, p.k.row_stride, p.k.head_stride});
  a.vec_kp = p.dim_pos > 0 && p.dim_pos % kVec16<T> == 0 &&
             aligned_for(p.kp.data, esize, 16,
                         {p.kp.page_stride, p.kp.row_stride, p.kp.head_stride});
  a.vec_v = p.dim_v % 4 == 0 && aligned_for(p.v.data, esize, 4 * esize,
                                            {p.v.page_stride, p.v.row_stride, p.v.head_stride});
  a.vec_out = p.dim_v % 4 == 0 &&
              aligned_for(p.out.data, esize, 4 * esize,
                          {p.out.batch_stride, p.out.seq_stride, p.out.head_stride});
  if (p.decode) {
    forward_detail::launch_decode_dims<T>(a, ctx);
  } else if (p.dim_v <= 128) {
    launch<T, 1, 4>(a, ctx);
  } else if (p.dim_v <= 256) {
    launch<T, 2, 4>(a, ctx);
  } else if (p.dim_v <= 512) {
    launch<T, 4, 2>(a, ctx);
  } else {
    launch<T, 8, 1>(a, ctx);
  }
  if (p.splits > 1) {
    const int64_t rows = p.queries * p.heads_q;
    const int64_t blocks = (rows + kWarps - 1) / kWarps;
    if (blocks > 0) {
      paged_merge_kernel<T><<<static_cast<unsigned>(blocks), kThreads, 0, ctx.stream>>>(a);
      detail::check_launch("paged_merge_kernel");
    }
  }
}

}  // namespace rudnn::paged::cuda
