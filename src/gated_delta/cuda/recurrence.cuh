// The gated delta recurrence on the GPU. Rows of a value head's state are independent
// (S_v <- g S_v; S_v += beta (v_v - S_v.k) k; y_v = S_v.q), so each warp owns kRowsPerWarp
// rows of one (sequence, value head), its lanes splitting Dk: the FP32 state lives in
// registers across the whole time loop, read once and written once (plus once per step
// for the every-step form); the row reductions (S k, S q) are warp shuffles. For Dk = 128
// or 256 a lane holds four consecutive columns per 128, so that an F32 state row moves in
// 16-byte loads and stores (when the buffers are 16-byte aligned: the arithmetic is the
// same either way). The arithmetic is the same for every T, so T one-step calls through an
// F32 state give bit-identical results.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "cuda/launch.cuh"
#include "cuda/reduce.cuh"
#include "cuda/types.cuh"
#include "gated_delta/cuda/launch.h"
#include "gated_delta/cuda/scalars.cuh"
#include "gated_delta/cuda/slots.cuh"

namespace rudnn::gdn::cuda {

using rudnn::cuda::from_float;
using rudnn::cuda::to_float;

constexpr int kRowsPerWarp = 4;
constexpr int kWarpsPerBlock = 4;
constexpr int kRowsPerBlock = kRowsPerWarp * kWarpsPerBlock;

using rudnn::cuda::warp_sum;

// The column of element j of a lane's share of a row: with kQuads (Dk a multiple of 128)
// four consecutive columns per 128 (one 16-byte load of an F32 state row), else every 32nd.
// The mapping fixes the order of the per-lane partial sums; it depends on Dk alone, so every
// form (steps, slots, varlen, one step or many) adds in the same order.
template <bool kQuads>
__device__ __forceinline__ int column(int lane, int j) {
  return kQuads ? 128 * (j / 4) + 4 * lane + j % 4 : lane + 32 * j;
}

// grid (B * Hv, ceil(Dv / kRowsPerBlock)), block 32 * kWarpsPerBlock. The rows past Dv of
// the last warp compute on zeros (kept branch-free so that each step's loads are issued
// together, ahead of the row loop) and store nothing.
template <class T, int kPerLane, bool kQuads>
__global__ void __launch_bounds__(32 * kWarpsPerBlock) recurrence_kernel(const Recurrence p) {
  const unsigned heads = unsigned(p.value_heads);
  const int64_t h = blockIdx.x % heads, b = blockIdx.x / heads;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int64_t row0 = int64_t(blockIdx.y) * kRowsPerBlock + int64_t(warp) * kRowsPerWarp;
  if (row0 >= p.value_dim) return;
  const int64_t Dk = p.key_dim, Dv = p.value_dim;
  const int64_t kh = unsigned(h) / unsigned(p.value_heads / p.key_heads);
  // Sequence b's batch entry and steps: with cu_seqlens, steps [first, last) of entry 0.
  int64_t entry = b, first = 0, last = p.steps;
  if (p.cu_seqlens != nullptr) {
    entry = 0;
    first = min(max(int64_t(p.cu_seqlens[b]), int64_t(0)), p.steps);
    last = min(max(int64_t(p.cu_seqlens[b + 1]), first), p.steps);
  }
  const bool row_lane = lane < kRowsPerWarp && row0 + lane < Dv;
  int64_t seq_state = b;
  if (p.slots != nullptr) {
    seq_state = slot_at(p, b);
    if (!slot_usable(p, seq_state)) {
      if (row_lane) {
        const T nan = from_float<T>(__int_as_float(0x7fc00000));
        T* y = static_cast<T*>(p.y);
        for (int64_t t = first; t < last; ++t)
          y[entry * p.v_b + t * p.v_t + h * p.v_h + row0 + lane] = nan;
      }
      return;
    }
  }
  const int64_t state_base = (seq_state * p.value_heads + h) * Dv * Dk;
  auto state_index = [&](int64_t row, int64_t col) {
    return state_base + (p.state_transposed ? col * Dv + row : row * Dk + col);
  };
  // 16-byte loads and stores of an F32 row-major state (the launch checked the alignment).
  const bool vector_state = kQuads && p.state_dtype == DType::f32 && !p.state_transposed &&
                            p.vector_state;

  float s[kRowsPerWarp][kPerLane];
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) {
    const int64_t row = row0 + r;
    if (vector_state) {
#pragma unroll
      for (int j = 0; j < kPerLane; j += 4) {
        float4 x = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        if (row < Dv)
          x = *reinterpret_cast<const float4*>(static_cast<const float*>(p.state_in) +
                                               state_index(row, column<kQuads>(lane, j)));
        s[r][j] = x.x;
        s[r][j + 1] = x.y;
        s[r][j + 2] = x.z;
        s[r][j + 3] = x.w;
      }
    } else {
#pragma unroll
      for (int j = 0; j < kPerLane; ++j) {
        const int64_t col = column<kQuads>(lane, j);
        s[r][j] = (row < Dv && col < Dk)
                      ? load_any(p.state_in, state_index(row, col), p.state_dtype)
                      : 0.0f;
      }
    }
  }

  const T* q = static_cast<const T*>(p.q);
  const T* k = static_cast<const T*>(p.k);
  const T* v = static_cast<const T*>(p.v);
  T* y = static_cast<T*>(p.y);
  // Lane r < kRowsPerWarp (row_lane) loads and stores row row0 + r's v and y.
  for (int64_t t = first; t < last; ++t) {
    const int64_t qk_off = entry * p.qk_b + t * p.qk_t + kh * p.qk_h;
    const int64_t v_off = entry * p.v_b + t * p.v_t + h * p.v_h;
    const int64_t g_off = entry * p.g_b + t * p.g_t + h * p.g_h;
    float g = load_any(p.gate, g_off, p.gate_dtype);
    const float beta = load_any(p.beta, g_off, p.beta_dtype);
    const float v_mine = row_lane ? to_float(v[v_off + row0 + lane]) : 0.0f;
    float kk[kPerLane], qq[kPerLane];
#pragma unroll
    for (int j = 0; j < kPerLane; ++j) {
      const int64_t col = column<kQuads>(lane, j);
      kk[j] = col < Dk ? to_float(k[qk_off + col]) : 0.0f;
      qq[j] = col < Dk ? to_float(q[qk_off + col]) * p.scale : 0.0f;
    }
    if (p.log_gate) g = expf(g);
    float y_mine = 0.0f;
#pragma unroll
    for (int r = 0; r < kRowsPerWarp; ++r) {
      float sk = 0.0f;
#pragma unroll
      for (int j = 0; j < kPerLane; ++j) {
        s[r][j] *= g;
        sk = fmaf(s[r][j], kk[j], sk);
      }
      sk = warp_sum(sk);
      const float delta = beta * (__shfl_sync(0xffffffffu, v_mine, r) - sk);
      float sq = 0.0f;
#pragma unroll
      for (int j = 0; j < kPerLane; ++j) {
        s[r][j] = fmaf(delta, kk[j], s[r][j]);
        sq = fmaf(s[r][j], qq[j], sq);
      }
      sq = warp_sum(sq);
      if (lane == r) y_mine = sq;
    }
    if (row_lane) y[v_off + row0 + lane] = from_float<T>(y_mine);
    if (p.every_step != nullptr) {
#pragma unroll
      for (int r = 0; r < kRowsPerWarp; ++r) {
        const int64_t row = row0 + r;
        if (row >= Dv) break;  // warp-uniform
        const int64_t base = (((entry * p.steps + t) * p.value_heads + h) * Dv + row) * Dk;
#pragma unroll
        for (int j = 0; j < kPerLane; ++j) {
          const int64_t col = column<kQuads>(lane, j);
          if (col < Dk) store_any(p.every_step, base + col, p.state_dtype, s[r][j]);
        }
      }
    }
  }

  if (p.state_out == nullptr) return;  // gated_delta_steps: the last step holds it
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) {
    const int64_t row = row0 + r;
    if (row >= Dv) break;  // warp-uniform
    if (vector_state) {
#pragma unroll
      for (int j = 0; j < kPerLane; j += 4) {
        *reinterpret_cast<float4*>(static_cast<float*>(p.state_out) +
                                   state_index(row, column<kQuads>(lane, j))) =
            make_float4(s[r][j], s[r][j + 1], s[r][j + 2], s[r][j + 3]);
      }
    } else {
#pragma unroll
      for (int j = 0; j < kPerLane; ++j) {
        const int64_t col = column<kQuads>(lane, j);
        if (col < Dk) store_any(p.state_out, state_index(row, col), p.state_dtype, s[r][j]);
      }
    }
  }
}

template <class T>
void launch_recurrence(const Recurrence& problem, const Stream& stream) {
  rudnn::cuda::LaunchContext ctx(stream);
  Recurrence p = problem;
  auto aligned = [](const void* ptr) { return reinterpret_cast<uintptr_t>(ptr) % 16 == 0; };
  p.vector_state = aligned(p.state_in) && aligned(p.state_out) && aligned(p.every_step);
  const dim3 grid(unsigned(p.batch * p.value_heads),
                  unsigned((p.value_dim + kRowsPerBlock - 1) / kRowsPerBlock));
  const dim3 block(32 * kWarpsPerBlock);
  const int64_t per_lane = (p.key_dim + 31) / 32;
  if (p.key_dim == 128)
    recurrence_kernel<T, 4, true><<<grid, block, 0, ctx.stream>>>(p);
  else if (p.key_dim == 256)
    recurrence_kernel<T, 8, true><<<grid, block, 0, ctx.stream>>>(p);
  else if (per_lane <= 1)
    recurrence_kernel<T, 1, false><<<grid, block, 0, ctx.stream>>>(p);
  else if (per_lane <= 2)
    recurrence_kernel<T, 2, false><<<grid, block, 0, ctx.stream>>>(p);
  else if (per_lane <= 4)
    recurrence_kernel<T, 4, false><<<grid, block, 0, ctx.stream>>>(p);
  else
    recurrence_kernel<T, 8, false><<<grid, block, 0, ctx.stream>>>(p);
  detail::check_cuda(cudaGetLastError(), "gated_delta recurrence launch");
}

}  // namespace rudnn::gdn::cuda
