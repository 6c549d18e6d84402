// The small-batch (decode) expert path: at most kDecodeRows dispatched rows in all, so each
// expert holds a few rows and the projections are matrix-vector products bound by reading
// the weights. One warp owns one output feature n of one expert: it streams that weight row
// once, in 16-byte packs, against every row of the expert (eight at a time, from L1/L2), and
// folds each dot product over the warp in a fixed order (deterministic). Blocks of experts
// without rows return at once (the counts live on the device, so the grid covers all E).
#pragma once

#include <cstdint>

#include "core/cuda_check.h"
#include "cuda/launch.cuh"
#include "cuda/vec.cuh"
#include "moe/cuda/experts_scalar.cuh"
#include "moe/cuda/launch.h"

namespace rudnn::moe::cuda {

namespace decode {

constexpr int kWarps = 8, kRowsPerPass = 8;

__device__ __forceinline__ float warp_fold(float v) {
#pragma unroll
  for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// C[r, n] = sum_k A[r, k] * B_e[n, k] (B_e [n, k] row-major); with kOut != Plain, B2 too and
// the SwiGLU of the two (as scalar::grouped_gemm_kernel writes it). W: elements per load.
template <class T, scalar::Out kOut, int W>
__global__ void __launch_bounds__(kWarps * 32) gemv_kernel(scalar::GroupedGemm p) {
  constexpr bool kTwo = kOut != scalar::Out::Plain;
  const int lane = threadIdx.x % 32;
  const int64_t expert = blockIdx.y;
  const int64_t n = static_cast<int64_t>(blockIdx.x) * kWarps + threadIdx.x / 32;
  const int64_t begin = p.offsets[expert], end = p.offsets[expert + 1];
  if (begin == end || n >= p.n) return;
  const int64_t k = p.k;
  const T* a = static_cast<const T*>(p.a);
  const T* b = static_cast<const T*>(p.b) + (expert * p.n + n) * k;
  const T* b2 = kTwo ? static_cast<const T*>(p.b_second) + (expert * p.n + n) * k : nullptr;
  T* c = static_cast<T*>(p.c);
  for (int64_t r0 = begin; r0 < end; r0 += kRowsPerPass) {
    float acc[kRowsPerPass] = {}, acc2[kTwo ? kRowsPerPass : 1] = {};
    for (int64_t h = static_cast<int64_t>(lane) * W; h < k; h += 32 * W) {
      float wv[W], w2[W], xv[W];
      ::rudnn::cuda::load_pack<T, W>(b + h, wv);
      if constexpr (kTwo) ::rudnn::cuda::load_pack<T, W>(b2 + h, w2);
#pragma unroll
      for (int j = 0; j < kRowsPerPass; ++j) {
        if (r0 + j < end) {  // a guard, not a break: acc stays in registers
          ::rudnn::cuda::load_pack<T, W>(a + (r0 + j) * k + h, xv);
#pragma unroll
          for (int q = 0; q < W; ++q) {
            acc[j] = fmaf(wv[q], xv[q], acc[j]);
            if constexpr (kTwo) acc2[j] = fmaf(w2[q], xv[q], acc2[j]);
          }
        }
      }
    }
#pragma unroll
    for (int j = 0; j < kRowsPerPass; ++j) {
      if (r0 + j >= end) continue;  // uniform over the warp
      const float v = warp_fold(acc[j]);
      float v2 = 0.0f;
      if constexpr (kTwo) v2 = warp_fold(acc2[j]);
      if (lane != 0) continue;
      const int64_t at = (r0 + j) * p.n + n;
      if constexpr (kOut == scalar::Out::Plain) {
        c[at] = ::rudnn::cuda::from_float<T>(v);
      } else {
        const float g = ::rudnn::cuda::round_to<T>(v), u = ::rudnn::cuda::round_to<T>(v2);
        if constexpr (kOut == scalar::Out::SwiGluStored) {
          static_cast<T*>(p.gate_pre)[at] = ::rudnn::cuda::from_float<T>(g);
          static_cast<T*>(p.up_pre)[at] = ::rudnn::cuda::from_float<T>(u);
        }
        c[at] = ::rudnn::cuda::from_float<T>(::rudnn::cuda::round_to<T>(g / (1.0f + expf(-g))) * u);
      }
    }
  }
}

inline bool aligned16(const void* ptr) { return reinterpret_cast<uintptr_t>(ptr) % 16 == 0; }

template <class T, scalar::Out kOut>
void launch(const scalar::GroupedGemm& g, cudaStream_t stream) {
  constexpr int kW = 16 / sizeof(T);
  const dim3 grid(static_cast<unsigned>((g.n + kWarps - 1) / kWarps),
                  static_cast<unsigned>(g.experts));
  const bool packed = g.k % kW == 0 && aligned16(g.a) && aligned16(g.b) &&
                      (g.b_second == nullptr || aligned16(g.b_second));
  if (packed) {
    gemv_kernel<T, kOut, kW><<<grid, kWarps * 32, 0, stream>>>(g);
  } else {
    gemv_kernel<T, kOut, 1><<<grid, kWarps * 32, 0, stream>>>(g);
  }
}

}  // namespace decode

template <class T>
void experts_decode(const ExpertsForward& p, void* act, const Stream& stream) {
  const ::rudnn::cuda::LaunchContext ctx(stream);
  scalar::GroupedGemm gate_up;
  gate_up.experts = p.experts;
  gate_up.n = p.inter;
  gate_up.k = p.hidden;
  gate_up.offsets = p.offsets;
  gate_up.a = p.x;
  gate_up.b = p.gate;
  gate_up.b_second = p.up;
  gate_up.c = act;
  gate_up.gate_pre = p.gate_pre;
  gate_up.up_pre = p.up_pre;
  if (p.gate_pre) {
    decode::launch<T, scalar::Out::SwiGluStored>(gate_up, ctx.stream);
  } else {
    decode::launch<T, scalar::Out::SwiGlu>(gate_up, ctx.stream);
  }
  scalar::GroupedGemm down;
  down.experts = p.experts;
  down.n = p.hidden;
  down.k = p.inter;
  down.offsets = p.offsets;
  down.a = act;
  down.b = p.down;
  down.c = p.y;
  decode::launch<T, scalar::Out::Plain>(down, ctx.stream);
  detail::check_launch("forward_dispatched (decode)");
}

}  // namespace rudnn::moe::cuda
