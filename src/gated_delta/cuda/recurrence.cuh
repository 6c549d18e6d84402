// The gated delta recurrence on the GPU. Rows of a value head's state are independent
// (S_v <- g S_v; S_v += beta (v_v - S_v.k) k; y_v = S_v.q), so each warp owns kRowsPerWarp
// rows of one (sequence, value head), its lanes splitting Dk: the FP32 state lives in
// registers across the whole time loop, read once and written once (plus once per step
// for the every-step form). The arithmetic is the same for every T, so T one-step calls
// through an F32 state give bit-identical results.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "cuda/launch.cuh"
#include "cuda/types.cuh"
#include "gated_delta/cuda/launch.h"

namespace rudnn::gdn::cuda {

using rudnn::cuda::from_float;
using rudnn::cuda::to_float;

constexpr int kRowsPerWarp = 4;
constexpr int kWarpsPerBlock = 4;
constexpr int kRowsPerBlock = kRowsPerWarp * kWarpsPerBlock;

__device__ __forceinline__ float load_any(const void* p, int64_t i, DType dt) {
  switch (dt) {
    case DType::f16:
      return __half2float(static_cast<const __half*>(p)[i]);
    case DType::bf16:
      return __bfloat162float(static_cast<const __nv_bfloat16*>(p)[i]);
    default:
      return static_cast<const float*>(p)[i];
  }
}
__device__ __forceinline__ void store_any(void* p, int64_t i, DType dt, float v) {
  switch (dt) {
    case DType::f16:
      static_cast<__half*>(p)[i] = __float2half_rn(v);
      break;
    case DType::bf16:
      static_cast<__nv_bfloat16*>(p)[i] = __float2bfloat16_rn(v);
      break;
    default:
      static_cast<float*>(p)[i] = v;
      break;
  }
}

__device__ __forceinline__ float warp_sum(float x) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
  return x;
}

// grid (B * Hv, ceil(Dv / kRowsPerBlock)), block 32 * kWarpsPerBlock.
template <class T, int kPerLane>
__global__ void __launch_bounds__(32 * kWarpsPerBlock) recurrence_kernel(const Recurrence p) {
  const int64_t h = int64_t(blockIdx.x) % p.value_heads, b = int64_t(blockIdx.x) / p.value_heads;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int64_t row0 = int64_t(blockIdx.y) * kRowsPerBlock + int64_t(warp) * kRowsPerWarp;
  if (row0 >= p.value_dim) return;
  const int64_t Dk = p.key_dim, Dv = p.value_dim;
  const int64_t kh = h / (p.value_heads / p.key_heads);
  int64_t seq_state = b;
  if (p.slots != nullptr) {
    seq_state = p.slot_dtype == DType::i32 ? int64_t(static_cast<const int32_t*>(p.slots)[b])
                                           : static_cast<const int64_t*>(p.slots)[b];
  }
  const int64_t state_base = (seq_state * p.value_heads + h) * Dv * Dk;
  auto state_index = [&](int64_t row, int64_t col) {
    return state_base + (p.state_transposed ? col * Dv + row : row * Dk + col);
  };

  float s[kRowsPerWarp][kPerLane];
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) {
#pragma unroll
    for (int j = 0; j < kPerLane; ++j) {
      const int64_t col = lane + 32 * j, row = row0 + r;
      s[r][j] = (row < Dv && col < Dk) ? load_any(p.state_in, state_index(row, col), p.state_dtype)
                                       : 0.0f;
    }
  }

  const T* q = static_cast<const T*>(p.q);
  const T* k = static_cast<const T*>(p.k);
  const T* v = static_cast<const T*>(p.v);
  T* y = static_cast<T*>(p.y);
  for (int64_t t = 0; t < p.steps; ++t) {
    const int64_t qk_off = b * p.qk_b + t * p.qk_t + kh * p.qk_h;
    const int64_t v_off = b * p.v_b + t * p.v_t + h * p.v_h;
    const int64_t g_off = b * p.g_b + t * p.g_t + h * p.g_h;
    float g = load_any(p.gate, g_off, p.gate_dtype);
    if (p.log_gate) g = expf(g);
    const float beta = load_any(p.beta, g_off, p.beta_dtype);
    float kk[kPerLane], qq[kPerLane];
#pragma unroll
    for (int j = 0; j < kPerLane; ++j) {
      const int64_t col = lane + 32 * j;
      kk[j] = col < Dk ? to_float(k[qk_off + col]) : 0.0f;
      qq[j] = col < Dk ? to_float(q[qk_off + col]) * p.scale : 0.0f;
    }
#pragma unroll
    for (int r = 0; r < kRowsPerWarp; ++r) {
      const int64_t row = row0 + r;
      if (row >= Dv) break;  // warp-uniform
      float sk = 0.0f;
#pragma unroll
      for (int j = 0; j < kPerLane; ++j) {
        s[r][j] *= g;
        sk = fmaf(s[r][j], kk[j], sk);
      }
      sk = warp_sum(sk);
      const float delta = beta * (to_float(v[v_off + row]) - sk);
      float sq = 0.0f;
#pragma unroll
      for (int j = 0; j < kPerLane; ++j) {
        s[r][j] = fmaf(delta, kk[j], s[r][j]);
        sq = fmaf(s[r][j], qq[j], sq);
      }
      sq = warp_sum(sq);
      if (lane == 0) y[v_off + row] = from_float<T>(sq);
      if (p.every_step != nullptr) {
        const int64_t base = (((b * p.steps + t) * p.value_heads + h) * Dv + row) * Dk;
#pragma unroll
        for (int j = 0; j < kPerLane; ++j) {
          const int64_t col = lane + 32 * j;
          if (col < Dk) store_any(p.every_step, base + col, p.state_dtype, s[r][j]);
        }
      }
    }
  }

#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) {
#pragma unroll
    for (int j = 0; j < kPerLane; ++j) {
      const int64_t col = lane + 32 * j, row = row0 + r;
      if (row < Dv && col < Dk)
        store_any(p.state_out, state_index(row, col), p.state_dtype, s[r][j]);
    }
  }
}

template <class T>
void launch_recurrence(const Recurrence& p, const Stream& stream) {
  rudnn::cuda::LaunchContext ctx(stream);
  const dim3 grid(unsigned(p.batch * p.value_heads),
                  unsigned((p.value_dim + kRowsPerBlock - 1) / kRowsPerBlock));
  const dim3 block(32 * kWarpsPerBlock);
  const int64_t per_lane = (p.key_dim + 31) / 32;
  if (per_lane <= 1)
    recurrence_kernel<T, 1><<<grid, block, 0, ctx.stream>>>(p);
  else if (per_lane <= 2)
    recurrence_kernel<T, 2><<<grid, block, 0, ctx.stream>>>(p);
  else if (per_lane <= 4)
    recurrence_kernel<T, 4><<<grid, block, 0, ctx.stream>>>(p);
  else
    recurrence_kernel<T, 8><<<grid, block, 0, ctx.stream>>>(p);
  detail::check_cuda(cudaGetLastError(), "gated_delta recurrence launch");
}

}  // namespace rudnn::gdn::cuda
