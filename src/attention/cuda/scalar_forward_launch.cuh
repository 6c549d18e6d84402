// The launcher of the CUDA-core forward (scalar_forward.cuh) for one dtype: the value-size
// bucket (features per lane, rows per warp), the arrangement the plan names (FlashScalar or
// SplitKv with its partitions, SplitKv on tensor cores where the plan says so:
// split_kv_tc.cuh), the aligned-access flags, and the merge pass. Included by
// scalar_forward_{f32,f16,bf16}.cu, one instantiation each.
#pragma once

#include <algorithm>

#include "attention/cuda/kernels.h"
#include "attention/cuda/scalar_forward.cuh"
#include "attention/cuda/split_kv_tc.cuh"
#include "attention/plan.h"
#include "cuda/launch.cuh"

namespace rudnn::attn::cuda {

namespace scalar_detail {

// The most dynamic shared memory the kernel may use on this device, opted into once.
template <class Kernel>
void allow_shared(Kernel kernel, Device device, rudnn::cuda::PerDevice<signed char>& done) {
  done.get(device, [&]() -> signed char {
    const int optin =
        static_cast<int>(rudnn::cuda::device_info(device).shared_bytes_per_block_optin);
    detail::check_cuda(
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, optin),
        "cudaFuncSetAttribute(scalar_forward_kernel)");
    return 1;
  });
}

template <class T, int kChunks, int kRows>
void launch(ScalarForwardArgs a, const AttentionForward& p, const rudnn::cuda::LaunchContext& ctx) {
  auto kernel = scalar_forward_kernel<T, kChunks, kRows>;
  static rudnn::cuda::PerDevice<signed char> configured;
  allow_shared(kernel, ctx.device, configured);
  const AttentionSizes& sz = p.sizes;
  a.rows_per_block = a.decode ? kRows : kWarps * kRows;
  a.row_groups = (a.group * sz.len_q + a.rows_per_block - 1) / a.rows_per_block;
  const int64_t blocks = sz.batch * sz.heads_kv * a.row_groups * a.splits;
  if (blocks == 0) return;
  const size_t shared =
      scalar_forward_shared_bytes(a.rows_per_block, a.q_stride, kChunks, kRows, a.decode);
  kernel<<<static_cast<unsigned>(blocks), kThreads, shared, ctx.stream>>>(a);
  detail::check_launch("scalar_forward_kernel");
}

// SplitKv on tensor cores: blocks of 16 rows of each (batch, KV head).
template <class T, int D>
void launch_tc(ScalarForwardArgs a, const AttentionForward& p,
               const rudnn::cuda::LaunchContext& ctx) {
  const ScoreRules& r = p.rules;
  const bool rules = r.softcap > 0.0f || r.alibi || r.bias.data || r.mask.data;
  auto kernel = rules ? split_kv_tc_kernel<T, D, true> : split_kv_tc_kernel<T, D, false>;
  static rudnn::cuda::PerDevice<signed char> configured[2];
  allow_shared(kernel, ctx.device, configured[rules ? 1 : 0]);
  const AttentionSizes& sz = p.sizes;
  a.rows_per_block = kTcRows;
  a.row_groups = (a.group * sz.len_q + kTcRows - 1) / kTcRows;
  const int64_t blocks = sz.batch * sz.heads_kv * a.row_groups * a.splits;
  if (blocks == 0) return;
  const size_t shared = split_kv_tc_shared_bytes(D, split_kv_tc_stages<D>());
  kernel<<<static_cast<unsigned>(blocks), kThreads, shared, ctx.stream>>>(a);
  detail::check_launch("split_kv_tc_kernel");
}

}  // namespace scalar_detail

template <class T>
void scalar_forward(const AttentionForward& p, const Stream& stream) {
  using scalar_detail::launch;
  const rudnn::cuda::LaunchContext ctx(stream);
  const AttentionSizes& sz = p.sizes;
  const bool decode = p.plan.kernel == AttentionKernel::SplitKv;
  const int64_t esize = sizeof(T);

  ScalarForwardArgs a;
  a.sizes = sz;
  a.q = p.q;
  a.k = p.k;
  a.v = p.v;
  a.out = p.out;
  a.lse = static_cast<float*>(p.lse);
  a.lse_layout = p.lse_layout;
  a.rules = p.rules;
  a.group = static_cast<int>(sz.heads_q / sz.heads_kv);
  a.decode = decode;
  a.split_keys = decode ? static_cast<int>(p.plan.split_keys) : 0;
  a.splits = decode ? static_cast<int>(p.plan.splits) : 1;
  const bool two_passes = decode && p.plan.passes == 2;
  const SplitKvLayout partial_layout =
      split_kv_layout(sz.batch * sz.heads_q * sz.len_q, a.splits, sz.dim_v);
  if (two_passes) {
    a.partials = static_cast<float*>(p.scratch);
    a.record = static_cast<int>(partial_layout.record);
  }
  a.vec_k = sz.dim_qk % kVec16<T> == 0 &&
            aligned_for(p.k.data, esize, 16, {p.k.batch_stride, p.k.seq_stride, p.k.head_stride});
  a.vec_v = sz.dim_v % 4 == 0 && aligned_for(p.v.data, esize, 4 * esize,
                                             {p.v.batch_stride, p.v.seq_stride, p.v.head_stride});
  a.vec_out =
      sz.dim_v % 4 == 0 && aligned_for(p.out.data, esize, 4 * esize,
                                       {p.out.batch_stride, p.out.seq_stride, p.out.head_stride});
  a.q_stride = static_cast<int>((sz.dim_qk + 7) / 8 * 8);

  if (decode && p.plan.split_tensor_cores) {
    if constexpr (sizeof(T) == 2) {
      a.vec_tiles =
          aligned_for(p.k.data, esize, 16, {p.k.batch_stride, p.k.seq_stride, p.k.head_stride}) &&
          aligned_for(p.v.data, esize, 16, {p.v.batch_stride, p.v.seq_stride, p.v.head_stride});
      switch (sz.dim_qk) {
        case 64:
          scalar_detail::launch_tc<T, 64>(a, p, ctx);
          break;
        case 128:
          scalar_detail::launch_tc<T, 128>(a, p, ctx);
          break;
        default:
          scalar_detail::launch_tc<T, 256>(a, p, ctx);
          break;
      }
    }
  } else if (sz.dim_v <= 128) {
    launch<T, 1, 4>(a, p, ctx);
  } else if (sz.dim_v <= 256) {
    launch<T, 2, 4>(a, p, ctx);
  } else if (sz.dim_v <= 512) {
    launch<T, 4, 2>(a, p, ctx);
  } else {
    launch<T, 8, 1>(a, p, ctx);
  }

  if (two_passes) {
    SplitMergeArgs m;
    m.sizes = sz;
    m.out = p.out;
    m.lse = a.lse;
    m.lse_layout = p.lse_layout;
    m.rules = p.rules;
    m.partials = a.partials;
    m.record = a.record;
    m.splits = a.splits;
    m.split_keys = a.split_keys;
    m.vec_out = a.vec_out;
    const int64_t rows = sz.batch * sz.heads_q * sz.len_q;
    const int64_t blocks = (rows + kWarps - 1) / kWarps;
    if (blocks > 0) {
      split_merge_kernel<T><<<static_cast<unsigned>(blocks), kThreads, 0, ctx.stream>>>(m);
      detail::check_launch("split_merge_kernel");
    }
  }
}

}  // namespace rudnn::attn::cuda
