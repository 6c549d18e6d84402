// The launcher of the tensor-core forward (flash_forward.cuh) for one (D, Dv): both dtypes
// are instantiated in flash_forward_d<D>[_<Dv>].cu, one file per head size so that each
// compile stays small.
#pragma once

#include "attention/cuda/flash_forward.cuh"
#include "attention/cuda/kernels.h"
#include "attention/cuda/loads.cuh"
#include "cuda/launch.cuh"

namespace rudnn::attn::cuda {

namespace flash_detail {

template <class Kernel>
void allow_shared(Kernel kernel, size_t bytes, Device device,
                  rudnn::cuda::PerDevice<signed char>& done) {
  done.get(device, [&]() -> signed char {
    detail::check_cuda(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                            static_cast<int>(bytes)),
                       "cudaFuncSetAttribute(flash_forward_kernel)");
    return 1;
  });
}

template <class T, int D, int DV, bool kRules>
void launch(const flash::FlashForwardArgs& a, int64_t blocks,
            const rudnn::cuda::LaunchContext& ctx) {
  auto kernel = flash::flash_forward_kernel<T, D, DV, kRules>;
  constexpr size_t kShared = flash::Config<D, DV, kRules>::kSharedBytes;
  static rudnn::cuda::PerDevice<signed char> configured;
  allow_shared(kernel, kShared, ctx.device, configured);
  kernel<<<static_cast<unsigned>(blocks), flash::kThreads, kShared, ctx.stream>>>(a);
  detail::check_launch("flash_forward_kernel");
}

}  // namespace flash_detail

template <class T, int D, int DV>
void flash_forward(const AttentionForward& p, const Stream& stream) {
  const rudnn::cuda::LaunchContext ctx(stream);
  const AttentionSizes& sz = p.sizes;
  constexpr int64_t esize = sizeof(T);
  flash::FlashForwardArgs a;
  a.sizes = sz;
  a.q = p.q;
  a.k = p.k;
  a.v = p.v;
  a.out = p.out;
  a.lse = static_cast<float*>(p.lse);
  a.lse_layout = p.lse_layout;
  a.rules = p.rules;
  a.group = static_cast<int>(sz.heads_q / sz.heads_kv);
  a.m_blocks = (sz.len_q + flash::kBlockM - 1) / flash::kBlockM;
  a.scale_log2 = p.rules.scale * flash::kLog2e;
  auto vec = [&](const void* data, int64_t bs, int64_t ss, int64_t hs) {
    return aligned_for(data, esize, 16, {bs, ss, hs});
  };
  a.vec_q = vec(p.q.data, p.q.batch_stride, p.q.seq_stride, p.q.head_stride);
  a.vec_k = vec(p.k.data, p.k.batch_stride, p.k.seq_stride, p.k.head_stride);
  a.vec_v = vec(p.v.data, p.v.batch_stride, p.v.seq_stride, p.v.head_stride);
  a.vec_out = vec(p.out.data, p.out.batch_stride, p.out.seq_stride, p.out.head_stride);
  const int64_t blocks = sz.batch * sz.heads_q * a.m_blocks;
  if (blocks == 0) return;
  const ScoreRules& r = p.rules;
  const bool rules = r.softcap > 0.0f || r.alibi || r.bias.data || r.mask.data;
  if (rules) {
    flash_detail::launch<T, D, DV, true>(a, blocks, ctx);
  } else {
    flash_detail::launch<T, D, DV, false>(a, blocks, ctx);
  }
}

}  // namespace rudnn::attn::cuda
