// The launcher of the tensor-core backward (flash_backward.cuh) for one (D, Dv): zero rows
// (varlen), D_i and the sink terms (the CUDA-core backward's row_stats kernel), dq, dk/dv,
// then dsinks; the scratch is the plan's (attention/plan.h backward_layout). Both dtypes are
// instantiated in flash_backward_d<D>.cu.
#pragma once

#include <algorithm>

#include "attention/cuda/flash_backward.cuh"
#include "attention/cuda/kernels.h"
#include "attention/cuda/loads.cuh"
#include "attention/cuda/scalar_backward.cuh"
#include "attention/plan.h"
#include "cuda/launch.cuh"

namespace rudnn::attn::cuda {

namespace flash_backward_detail {

template <class Kernel>
void allow_shared(Kernel kernel, size_t bytes, Device device,
                  rudnn::cuda::PerDevice<signed char>& done) {
  done.get(device, [&]() -> signed char {
    detail::check_cuda(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                            static_cast<int>(bytes)),
                       "cudaFuncSetAttribute(flash backward)");
    return 1;
  });
}

template <class T, int D, int DV, bool kRules>
void launch(const flash::FlashBackwardArgs& a, const rudnn::cuda::LaunchContext& ctx) {
  using C = flash::BackwardConfig<D, DV>;
  const AttentionSizes& sz = a.sizes;
  {
    auto kernel = flash::flash_dq_kernel<T, D, DV, kRules>;
    static rudnn::cuda::PerDevice<signed char> configured;
    allow_shared(kernel, C::kDqShared, ctx.device, configured);
    const int64_t blocks = sz.batch * sz.heads_q * a.q_blocks;
    if (blocks > 0) {
      kernel<<<static_cast<unsigned>(blocks), flash::kThreads, C::kDqShared, ctx.stream>>>(a);
      detail::check_launch("flash_dq_kernel");
    }
  }
  {
    auto kernel = flash::flash_dkv_kernel<T, D, DV, kRules>;
    static rudnn::cuda::PerDevice<signed char> configured;
    allow_shared(kernel, C::kDkvShared, ctx.device, configured);
    const int64_t blocks = sz.batch * sz.heads_kv * a.k_blocks;
    if (blocks > 0) {
      kernel<<<static_cast<unsigned>(blocks), flash::kThreads, C::kDkvShared, ctx.stream>>>(a);
      detail::check_launch("flash_dkv_kernel");
    }
  }
}

}  // namespace flash_backward_detail

// The mma.sync kernels (flash_backward.cuh): dq, then dk and dv.
template <class T, int D, int DV>
void flash_mma_backward(const AttentionBackward& p, const float* row_dot,
                        const rudnn::cuda::LaunchContext& ctx) {
  const AttentionSizes& sz = p.sizes;
  constexpr int64_t esize = sizeof(T);
  flash::FlashBackwardArgs a;
  a.sizes = sz;
  a.q = p.q;
  a.k = p.k;
  a.v = p.v;
  a.dout = p.dout;
  a.dq = p.dq;
  a.dk = p.dk;
  a.dv = p.dv;
  a.lse = static_cast<const float*>(p.lse);
  a.row_dot = row_dot;
  a.stats = p.lse_layout;
  a.rules = p.rules;
  a.group = static_cast<int>(sz.heads_q / sz.heads_kv);
  a.q_blocks = (sz.len_q + flash::kBlockM - 1) / flash::kBlockM;
  a.k_blocks =
      (sz.len_k + flash::BackwardConfig<D, DV>::kKeys - 1) / flash::BackwardConfig<D, DV>::kKeys;
  a.scale_log2 = p.rules.scale * flash::kLog2e;
  auto vec = [&](const auto& view) {
    return aligned_for(view.data, esize, 16,
                       {view.batch_stride, view.seq_stride, view.head_stride});
  };
  a.vec_q = vec(p.q);
  a.vec_k = vec(p.k);
  a.vec_v = vec(p.v);
  a.vec_dout = vec(p.dout);
  a.vec_dq = vec(p.dq);
  a.vec_dk = vec(p.dk);
  a.vec_dv = vec(p.dv);
  const ScoreRules& rules = p.rules;
  if (rules.softcap > 0.0f || rules.alibi || rules.bias.data || rules.mask.data) {
    flash_backward_detail::launch<T, D, DV, true>(a, ctx);
  } else {
    flash_backward_detail::launch<T, D, DV, false>(a, ctx);
  }
}

template <class T, int D, int DV>
void flash_backward(const AttentionBackward& p, const Stream& stream) {
  const rudnn::cuda::LaunchContext ctx(stream);
  const AttentionSizes& sz = p.sizes;
  const int64_t stat_rows = sz.varlen ? sz.heads_q * sz.total_q : sz.batch * sz.heads_q * sz.len_q;
  // The D_i and sink-term offsets do not depend on the Hopper dQ workspace behind them.
  const BackwardLayout layout = backward_layout(stat_rows, p.rules.sinks != nullptr, 0);
  char* const scratch = static_cast<char*>(p.scratch);

  // Varlen: rows outside every sequence get zero gradients (nothing else writes them).
  if (sz.varlen) {
    const BshdOut* views[3] = {&p.dq, &p.dk, &p.dv};
    for (const BshdOut* view : views) {
      const int64_t n = view->shape.seq * view->shape.heads * view->shape.dim;
      if (n == 0) continue;
      const int64_t blocks = std::min<int64_t>((n + 255) / 256, int64_t{1} << 20);
      zero_rows_kernel<T><<<static_cast<unsigned>(blocks), 256, 0, ctx.stream>>>(*view);
      detail::check_launch("attention zero_rows_kernel");
    }
  }
  if (sz.heads_q == 0 || sz.batch == 0) return;

  // D_i (and the sink terms) by the CUDA-core backward's row kernel.
  ScalarBackwardArgs r;
  r.sizes = sz;
  r.out = p.out;
  r.dout = p.dout;
  r.lse = static_cast<const float*>(p.lse);
  r.stats = p.lse_layout;
  r.rules = p.rules;
  r.row_dot = reinterpret_cast<float*>(scratch + layout.row_dot);
  if (layout.has_sink_terms) r.sink_terms = reinterpret_cast<float*>(scratch + layout.sink_terms);
  const int64_t rows = sz.batch * sz.heads_q * sz.len_q;
  if (rows > 0) {
    row_stats_kernel<T>
        <<<static_cast<unsigned>((rows + kWarps - 1) / kWarps), kThreads, 0, ctx.stream>>>(r);
    detail::check_launch("attention row_stats_kernel");
  }

  if (p.plan.flash_wgmma) {
    // The plan chose the Hopper kernel only for D = Dv = 128.
    if constexpr (D == 128 && DV == 128) flash_hopper_backward<T, D>(p, r.row_dot, stream);
  } else {
    flash_mma_backward<T, D, DV>(p, r.row_dot, ctx);
  }

  if (p.dsinks) {
    SinkSumArgs s;
    s.sizes = sz;
    s.stats = p.lse_layout;
    s.sink_terms = r.sink_terms;
    s.dsinks = p.dsinks;
    s.dtype = p.rules.sinks_dtype;
    sum_sink_terms(s, ctx.stream);
  }
}

}  // namespace rudnn::attn::cuda
