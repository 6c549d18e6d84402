// The launcher of the CUDA-core backward (scalar_backward.cuh) for one dtype: row
// statistics, dq, dk/dv, then the dsinks and dbias sums, in the scratch the plan reports.
// Included by scalar_backward_{f32,f16,bf16}.cu, one instantiation each.
#pragma once

#include <algorithm>

#include "attention/cuda/kernels.h"
#include "attention/cuda/scalar_backward.cuh"
#include "attention/plan.h"
#include "cuda/launch.cuh"

namespace rudnn::attn::cuda {

namespace scalar_backward_detail {

template <class Kernel>
void allow_shared(Kernel kernel, Device device, rudnn::cuda::PerDevice<signed char>& done) {
  done.get(device, [&]() -> signed char {
    const int optin =
        static_cast<int>(rudnn::cuda::device_info(device).shared_bytes_per_block_optin);
    detail::check_cuda(
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, optin),
        "cudaFuncSetAttribute(attention backward)");
    return 1;
  });
}

template <class T, int kChunks, int kRows>
void launch_kernels(ScalarBackwardArgs a, const AttentionBackward& p,
                    const rudnn::cuda::LaunchContext& ctx) {
  const AttentionSizes& sz = p.sizes;
  {
    auto kernel = dq_kernel<T, kChunks, kRows>;
    static rudnn::cuda::PerDevice<signed char> configured;
    allow_shared(kernel, ctx.device, configured);
    a.rows_per_block = kWarps * kRows;
    a.row_groups = (a.group * sz.len_q + a.rows_per_block - 1) / a.rows_per_block;
    const int64_t blocks = sz.batch * sz.heads_kv * a.row_groups;
    if (blocks > 0) {
      kernel<<<static_cast<unsigned>(blocks), kThreads,
               dq_shared_bytes(a.rows_per_block, a.stride_qk, a.stride_v), ctx.stream>>>(a);
      detail::check_launch("attention dq_kernel");
    }
  }
  {
    auto kernel = dkv_kernel<T, kChunks, kRows>;
    static rudnn::cuda::PerDevice<signed char> configured;
    allow_shared(kernel, ctx.device, configured);
    constexpr int kKeysPerBlock = kWarps * kRows;
    const int64_t blocks =
        sz.batch * sz.heads_kv * ((sz.len_k + kKeysPerBlock - 1) / kKeysPerBlock);
    if (blocks > 0) {
      kernel<<<static_cast<unsigned>(blocks), kThreads,
               dkv_shared_bytes(kKeysPerBlock, a.stride_qk, a.stride_v), ctx.stream>>>(a);
      detail::check_launch("attention dkv_kernel");
    }
  }
}

inline int64_t grid_for(int64_t items, int per_block) {
  return std::min<int64_t>((items + per_block - 1) / per_block, int64_t{1} << 20);
}

}  // namespace scalar_backward_detail

template <class T>
void scalar_backward(const AttentionBackward& p, const Stream& stream) {
  using namespace scalar_backward_detail;
  const rudnn::cuda::LaunchContext ctx(stream);
  const AttentionSizes& sz = p.sizes;
  const int64_t esize = sizeof(T);
  const int64_t stat_rows = sz.varlen ? sz.heads_q * sz.total_q : sz.batch * sz.heads_q * sz.len_q;
  const int64_t score_elements = p.dbias ? sz.batch * sz.heads_q * sz.len_q * sz.len_k : 0;
  const BackwardLayout layout =
      backward_layout(stat_rows, p.rules.sinks != nullptr, score_elements);
  char* const scratch = static_cast<char*>(p.scratch);

  // Varlen: rows outside every sequence get zero gradients (nothing else writes them).
  if (sz.varlen) {
    const BshdOut* views[3] = {&p.dq, &p.dk, &p.dv};
    for (const BshdOut* view : views) {
      const int64_t n = view->shape.seq * view->shape.heads * view->shape.dim;
      if (n == 0) continue;
      zero_rows_kernel<T><<<static_cast<unsigned>(grid_for(n, 256)), 256, 0, ctx.stream>>>(*view);
      detail::check_launch("attention zero_rows_kernel");
    }
  }

  ScalarBackwardArgs a;
  a.sizes = sz;
  a.q = p.q;
  a.k = p.k;
  a.v = p.v;
  a.out = p.out;
  a.dout = p.dout;
  a.lse = static_cast<const float*>(p.lse);
  a.stats = p.lse_layout;
  a.dq = p.dq;
  a.dk = p.dk;
  a.dv = p.dv;
  a.rules = p.rules;
  if (layout.bytes > 0) {
    a.row_dot = reinterpret_cast<float*>(scratch + layout.row_dot);
    if (layout.has_sink_terms) a.sink_terms = reinterpret_cast<float*>(scratch + layout.sink_terms);
    if (layout.has_dscores) a.dscores = reinterpret_cast<float*>(scratch + layout.dscores);
  }
  a.group = sz.heads_kv > 0 ? static_cast<int>(sz.heads_q / sz.heads_kv) : 1;
  auto vec16 = [&](const auto& view, int64_t dim) {
    return (dim * esize) % 16 == 0 &&
           aligned_for(view.data, esize, 16,
                       {view.batch_stride, view.seq_stride, view.head_stride});
  };
  auto vec4 = [&](const auto& view, int64_t dim) {
    return dim % 4 == 0 && aligned_for(view.data, esize, 4 * esize,
                                       {view.batch_stride, view.seq_stride, view.head_stride});
  };
  a.vec_q = vec16(p.q, sz.dim_qk);
  a.vec_k = vec16(p.k, sz.dim_qk);
  a.vec_v = vec16(p.v, sz.dim_v);
  a.vec_dout = vec16(p.dout, sz.dim_v);
  a.vec_dq = vec4(p.dq, sz.dim_qk);
  a.vec_dk = vec4(p.dk, sz.dim_qk);
  a.vec_dv = vec4(p.dv, sz.dim_v);
  a.stride_qk = static_cast<int>((sz.dim_qk + 7) / 8 * 8);
  a.stride_v = static_cast<int>((sz.dim_v + 7) / 8 * 8);

  if (a.dscores) {
    detail::check_cuda(
        cudaMemsetAsync(a.dscores, 0, static_cast<size_t>(score_elements) * 4, ctx.stream),
        "cudaMemsetAsync(attention dS)");
  }
  const int64_t rows = sz.batch * sz.heads_q * sz.len_q;
  if (rows > 0 && a.row_dot) {
    row_stats_kernel<T>
        <<<static_cast<unsigned>((rows + kWarps - 1) / kWarps), kThreads, 0, ctx.stream>>>(a);
    detail::check_launch("attention row_stats_kernel");
  }
  if (sz.heads_kv > 0) {
    const int64_t widest = std::max(sz.dim_qk, sz.dim_v);
    if (widest <= 128) {
      launch_kernels<T, 1, 4>(a, p, ctx);
    } else if (widest <= 256) {
      launch_kernels<T, 2, 2>(a, p, ctx);
    } else if (widest <= 512) {
      launch_kernels<T, 4, 1>(a, p, ctx);
    } else {
      launch_kernels<T, 8, 1>(a, p, ctx);
    }
  }
  if (p.dsinks && sz.heads_q > 0) {
    SinkSumArgs s;
    s.sizes = sz;
    s.stats = p.lse_layout;
    s.sink_terms = a.sink_terms;
    s.dsinks = p.dsinks;
    s.dtype = p.rules.sinks_dtype;
    sum_sink_terms(s, ctx.stream);
  }
  if (p.dbias && p.dbias_numel > 0) {
    BiasSumArgs s;
    s.dscores = a.dscores;
    s.target[0] = sz.batch;
    s.target[1] = sz.heads_q;
    s.target[2] = sz.len_q;
    s.target[3] = sz.len_k;
    s.strides[0] = p.dbias_strides.stride_b;
    s.strides[1] = p.dbias_strides.stride_h;
    s.strides[2] = p.dbias_strides.stride_i;
    s.strides[3] = p.dbias_strides.stride_j;
    s.numel = p.dbias_numel;
    s.dbias = p.dbias;
    s.dtype = p.dbias_dtype;
    sum_bias_gradient(s, ctx.stream);
  }
}

}  // namespace rudnn::attn::cuda
