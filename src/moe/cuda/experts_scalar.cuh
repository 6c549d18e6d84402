// The Scalar expert strategy: an FP32-accumulating CUDA-core grouped GEMM over rows grouped
// by expert, C[r, n] = sum_k A[r, k] * B_e[n, k] (A the dispatched rows or activations,
// B_e expert e's [N, K] weight, row-major), in 64 x 64 tiles staged through shared memory,
// each thread holding a 4 x 4 block of C. A tile never spans two experts: block b takes the
// b-th (expert, row tile) pair in expert order; the grid is sized for the worst case
// (rows / 64 + E tiles) because the counts live on the device. With two weights (gate, up)
// the tile computes both and writes round(round(SiLU(round(gate))) * round(up)), the value
// native_swiglu gives for the stored projections (so training and inference agree).
#pragma once

#include <cstdint>

#include "core/cuda_check.h"
#include "cuda/launch.cuh"
#include "moe/cuda/launch.h"

namespace rudnn::moe::cuda {

namespace scalar {

using ::rudnn::cuda::from_float;
using ::rudnn::cuda::round_to;
using ::rudnn::cuda::to_float;

constexpr int kTile = 64, kDepth = 16, kThreads = 256;

// What a tile writes.
enum class Out {
  Plain,         // C (T), or C_f32 (F32, added to when accumulate)
  SwiGlu,        // C = round(round(SiLU(round(gate))) * round(up))
  SwiGluStored,  // gate_pre, up_pre rounded; C = round(round(SiLU(gate_pre)) * up_pre)
};

struct GroupedGemm {
  int64_t experts = 0, n = 0, k = 0;
  const int32_t* offsets = nullptr;
  const void* a = nullptr;  // [rows, k]
  // Expert e's B: element (n, k) at b + e * n * k + n * b_n + k * b_k ([n, k] row-major by
  // default; b_n = 1, b_k = n reads a [k, n] row-major matrix).
  const void* b = nullptr;
  const void* b_second = nullptr;  // the up weight of the SwiGLU forms
  int64_t b_n = 0, b_k = 1;
  void* c = nullptr;  // [rows, n]
  float* c_f32 = nullptr;
  bool accumulate = false;
  void* gate_pre = nullptr;  // SwiGluStored
  void* up_pre = nullptr;
};

template <class T, Out kOut>
__global__ void __launch_bounds__(kThreads) grouped_gemm_kernel(GroupedGemm p) {
  constexpr bool kSwiGlu = kOut != Out::Plain;
  __shared__ float a_tile[kDepth][kTile];
  __shared__ float b_tile[kDepth][kTile];
  __shared__ float b2_tile[kSwiGlu ? kDepth : 1][kSwiGlu ? kTile : 1];
  __shared__ int64_t owner[3];  // expert, first row, end row

  if (threadIdx.x == 0) {
    int64_t index = blockIdx.x;
    owner[0] = -1;
    for (int64_t e = 0; e < p.experts; ++e) {
      const int64_t begin = p.offsets[e], end = p.offsets[e + 1];
      const int64_t tiles = (end - begin + kTile - 1) / kTile;
      if (index < tiles) {
        owner[0] = e;
        owner[1] = begin + index * kTile;
        owner[2] = end;
        break;
      }
      index -= tiles;
    }
  }
  __syncthreads();
  const int64_t expert = owner[0];
  if (expert < 0) return;
  const int64_t row0 = owner[1], row_end = owner[2];
  const int64_t n0 = static_cast<int64_t>(blockIdx.y) * kTile;
  const int64_t n = p.n, k = p.k;
  const T* a = static_cast<const T*>(p.a);
  const T* b = static_cast<const T*>(p.b) + expert * n * k;
  const T* b2 = kSwiGlu ? static_cast<const T*>(p.b_second) + expert * n * k : nullptr;
  const int64_t b_n = p.b_n, b_k = p.b_k;

  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
  float acc[4][4] = {}, acc2[kSwiGlu ? 4 : 1][kSwiGlu ? 4 : 1] = {};
  for (int64_t k0 = 0; k0 < k; k0 += kDepth) {
#pragma unroll
    for (int q = 0; q < kTile * kDepth / kThreads; ++q) {
      const int l = threadIdx.x + kThreads * q;
      const int m = l / kDepth, kk = l % kDepth;
      const bool in_k = k0 + kk < k;
      a_tile[kk][m] = in_k && row0 + m < row_end ? to_float(a[(row0 + m) * k + k0 + kk]) : 0.0f;
      const bool in_n = in_k && n0 + m < n;
      const int64_t b_at = (n0 + m) * b_n + (k0 + kk) * b_k;
      b_tile[kk][m] = in_n ? to_float(b[b_at]) : 0.0f;
      if constexpr (kSwiGlu) b2_tile[kk][m] = in_n ? to_float(b2[b_at]) : 0.0f;
    }
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < kDepth; ++kk) {
      float av[4], bv[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        av[i] = a_tile[kk][ty + 16 * i];
        bv[i] = b_tile[kk][tx + 16 * i];
      }
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) acc[i][j] = fmaf(av[i], bv[j], acc[i][j]);
      if constexpr (kSwiGlu) {
#pragma unroll
        for (int j = 0; j < 4; ++j) bv[j] = b2_tile[kk][tx + 16 * j];
#pragma unroll
        for (int i = 0; i < 4; ++i)
#pragma unroll
          for (int j = 0; j < 4; ++j) acc2[i][j] = fmaf(av[i], bv[j], acc2[i][j]);
      }
    }
    __syncthreads();
  }
  T* c = static_cast<T*>(p.c);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int64_t r = row0 + ty + 16 * i;
    if (r >= row_end) continue;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int64_t col = n0 + tx + 16 * j;
      if (col >= n) continue;
      float v = acc[i][j];
      if constexpr (kOut == Out::Plain) {
        if (p.c_f32) {
          float* out = p.c_f32 + r * n + col;
          *out = p.accumulate ? *out + v : v;
          continue;
        }
      } else if constexpr (kOut == Out::SwiGlu) {
        const float g = round_to<T>(v);
        v = round_to<T>(g / (1.0f + expf(-g))) * round_to<T>(acc2[i][j]);
      } else {
        const float g = round_to<T>(v), u = round_to<T>(acc2[i][j]);
        static_cast<T*>(p.gate_pre)[r * n + col] = from_float<T>(g);
        static_cast<T*>(p.up_pre)[r * n + col] = from_float<T>(u);
        v = round_to<T>(g / (1.0f + expf(-g))) * u;
      }
      c[r * n + col] = from_float<T>(v);
    }
  }
}

template <class T, Out kOut>
void launch(GroupedGemm g, int64_t rows, cudaStream_t stream) {
  if (g.b_n == 0) g.b_n = g.k;
  const dim3 grid(static_cast<unsigned>((rows + kTile - 1) / kTile + g.experts),
                  static_cast<unsigned>((g.n + kTile - 1) / kTile));
  grouped_gemm_kernel<T, kOut><<<grid, kThreads, 0, stream>>>(g);
}

// Weight gradients: D_e[m, n] = sum over expert e's rows r of A[r, m] * B[r, n] (A [rows, M],
// B [rows, N] row-major, D F32 [E, M, N]), 64 x 64 tiles of D per block, the rows walked in
// order 16 at a time: a fixed summation order, no atomics. An expert without rows gets 0.
template <class T>
__global__ void __launch_bounds__(kThreads)
    grouped_k_kernel(const int32_t* offsets, int64_t m_size, int64_t n_size, const T* a, const T* b,
                     float* d) {
  __shared__ float a_tile[kDepth][kTile];
  __shared__ float b_tile[kDepth][kTile];
  const int64_t expert = blockIdx.z;
  const int64_t n0 = static_cast<int64_t>(blockIdx.x) * kTile,
                m0 = static_cast<int64_t>(blockIdx.y) * kTile;
  const int64_t begin = offsets[expert], end = offsets[expert + 1];
  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
  float acc[4][4] = {};
  for (int64_t r0 = begin; r0 < end; r0 += kDepth) {
#pragma unroll
    for (int q = 0; q < kTile * kDepth / kThreads; ++q) {
      const int l = threadIdx.x + kThreads * q;
      const int kk = l / kTile, col = l % kTile;
      const bool in_r = r0 + kk < end;
      a_tile[kk][col] =
          in_r && m0 + col < m_size ? to_float(a[(r0 + kk) * m_size + m0 + col]) : 0.0f;
      b_tile[kk][col] =
          in_r && n0 + col < n_size ? to_float(b[(r0 + kk) * n_size + n0 + col]) : 0.0f;
    }
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < kDepth; ++kk) {
      float av[4], bv[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        av[i] = a_tile[kk][ty + 16 * i];
        bv[i] = b_tile[kk][tx + 16 * i];
      }
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) acc[i][j] = fmaf(av[i], bv[j], acc[i][j]);
    }
    __syncthreads();
  }
  float* out = d + expert * m_size * n_size;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int64_t m = m0 + ty + 16 * i;
    if (m >= m_size) continue;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int64_t n = n0 + tx + 16 * j;
      if (n < n_size) out[m * n_size + n] = acc[i][j];
    }
  }
}

template <class T>
void launch_grouped_k(const int32_t* offsets, int64_t experts, int64_t m, int64_t n, const void* a,
                      const void* b, float* d, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>((n + kTile - 1) / kTile),
                  static_cast<unsigned>((m + kTile - 1) / kTile), static_cast<unsigned>(experts));
  grouped_k_kernel<T><<<grid, kThreads, 0, stream>>>(offsets, m, n, static_cast<const T*>(a),
                                                     static_cast<const T*>(b), d);
}

}  // namespace scalar

template <class T>
void experts_scalar(const ExpertsForward& p, void* act, const Stream& stream) {
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
    scalar::launch<T, scalar::Out::SwiGluStored>(gate_up, p.rows, ctx.stream);
  } else {
    scalar::launch<T, scalar::Out::SwiGlu>(gate_up, p.rows, ctx.stream);
  }
  scalar::GroupedGemm down;
  down.experts = p.experts;
  down.n = p.hidden;
  down.k = p.inter;
  down.offsets = p.offsets;
  down.a = act;
  down.b = p.down;
  down.c = p.y;
  scalar::launch<T, scalar::Out::Plain>(down, p.rows, ctx.stream);
  detail::check_launch("forward_dispatched (Scalar)");
}

// The Scalar backward; scratch: dact, dgate_pre, dup_pre [rows, inter] (T) and an F32
// [rows, hidden] accumulator for dx, all allocated by the caller (experts.cu).
template <class T>
void experts_scalar_backward(const ExpertsBackward& p, const BackwardScratch& s,
                             const Stream& stream) {
  const ::rudnn::cuda::LaunchContext ctx(stream);
  if (p.ddown) {
    scalar::launch_grouped_k<T>(p.offsets, p.experts, p.hidden, p.inter, p.dy, p.act, p.ddown,
                                ctx.stream);
  }
  if (p.dx || p.dgate || p.dup) {
    scalar::GroupedGemm g;  // dact = dy . down_e, down_e read as [hidden, inter] = [k, n]
    g.experts = p.experts;
    g.n = p.inter;
    g.k = p.hidden;
    g.offsets = p.offsets;
    g.a = p.dy;
    g.b = p.down;
    g.b_n = 1;
    g.b_k = p.inter;
    g.c = s.dact;
    scalar::launch<T, scalar::Out::Plain>(g, p.rows, ctx.stream);
    swiglu_backward_rows(p, s, stream);
    if (p.dx) {
      g.n = p.hidden;  // dx = dgate_pre . gate_e + dup_pre . up_e, gate_e as [inter, hidden]
      g.k = p.inter;
      g.a = s.dgate_pre;
      g.b = p.gate;
      g.b_k = p.hidden;
      g.c = nullptr;
      g.c_f32 = s.dx_f32;
      scalar::launch<T, scalar::Out::Plain>(g, p.rows, ctx.stream);
      g.a = s.dup_pre;
      g.b = p.up;
      g.accumulate = true;
      scalar::launch<T, scalar::Out::Plain>(g, p.rows, ctx.stream);
      convert_rows(p, s, stream);
    }
    if (p.dgate) {
      scalar::launch_grouped_k<T>(p.offsets, p.experts, p.inter, p.hidden, s.dgate_pre, p.x,
                                  p.dgate, ctx.stream);
    }
    if (p.dup) {
      scalar::launch_grouped_k<T>(p.offsets, p.experts, p.inter, p.hidden, s.dup_pre, p.x, p.dup,
                                  ctx.stream);
    }
  }
  detail::check_launch("ExpertTrainingCache::backward (Scalar)");
}

}  // namespace rudnn::moe::cuda
