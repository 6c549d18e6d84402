// Warp and thread-group reductions in FP32. Every reduction here combines values in a fixed
// order, so a kernel's result does not depend on scheduling.
#pragma once

#include <cuda_runtime.h>

#include <type_traits>

#include "cuda/vec.cuh"

namespace rudnn::cuda {

constexpr unsigned kFullMask = 0xffffffffu;

struct SumOp {
  __host__ __device__ static constexpr float identity() { return 0.0f; }
  __device__ __forceinline__ float operator()(float a, float b) const { return a + b; }
};

// Maximum that propagates NaN (fmaxf would drop it): softmax and log-sum-exp must turn a NaN
// anywhere in a row into NaN.
struct MaxOp {
  __host__ __device__ static constexpr float identity() { return -__builtin_huge_valf(); }
  __device__ __forceinline__ float operator()(float a, float b) const { return (a > b || a != a) ? a : b; }
};

template <class Op>
__device__ __forceinline__ float warp_reduce(float v, Op op) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) v = op(v, __shfl_xor_sync(kFullMask, v, offset));
  return v;
}

// Reduces over the kThreads threads that share a row and returns the result to all of
// them. kThreads is 32 (one warp: no shared memory, no barrier) or a multiple of 32 up to
// 1024 covering the whole block; then `scratch` holds 32 floats, and the function has a
// barrier on both sides so that calls can follow one another with the same scratch.
template <int kThreads, class Op>
__device__ __forceinline__ float group_reduce(float v, Op op, float* scratch) {
  v = warp_reduce(v, op);
  if constexpr (kThreads > 32) {
    constexpr int kWarps = kThreads / 32;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    v = lane < kWarps ? scratch[lane] : Op::identity();
    v = warp_reduce(v, op);  // every warp folds the same partials in the same order
    __syncthreads();
  }
  return v;
}

// Two sums reduced together (one pair of barriers instead of two).
template <int kThreads>
__device__ __forceinline__ float2 group_reduce_pair(float2 v, float2* scratch) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) {
    v.x += __shfl_xor_sync(kFullMask, v.x, offset);
    v.y += __shfl_xor_sync(kFullMask, v.y, offset);
  }
  if constexpr (kThreads > 32) {
    constexpr int kWarps = kThreads / 32;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    v = lane < kWarps ? scratch[lane] : make_float2(0.0f, 0.0f);
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) {
      v.x += __shfl_xor_sync(kFullMask, v.x, offset);
      v.y += __shfl_xor_sync(kFullMask, v.y, offset);
    }
    __syncthreads();
  }
  return v;
}

constexpr float kLog2e = 1.4426950408889634f;

// exp(x - shift) given shift_log2e = shift * log2(e): one FFMA and one ex2.approx, where
// __expf(x - shift) spends an FADD and an FMUL. For kernels that take an exponential of every
// element and are bound by instruction issue (the cross-entropy gradient).
__device__ __forceinline__ float exp_shifted(float x, float shift_log2e) {
  float r;
  asm("ex2.approx.f32 %0, %1;" : "=f"(r) : "f"(fmaf(x, kLog2e, -shift_log2e)));
  return r;
}

// (max, sum of exp(x - max)) pairs, the state of an online softmax. Merging is exact for
// -inf maxima: a side whose max is the merged max keeps its sum unscaled, so -inf - -inf
// never reaches exp.
struct SoftmaxState {
  float max;
  float sum;
};

__device__ __forceinline__ SoftmaxState merge(SoftmaxState a, SoftmaxState b) {
  const float m = MaxOp{}(a.max, b.max);
  const float sa = a.max == m ? a.sum : a.sum * __expf(a.max - m);
  const float sb = b.max == m ? b.sum : b.sum * __expf(b.max - m);
  return {m, sa + sb};
}

// Folds W values into an online softmax state, with one rescale of the running sum per
// call rather than per value.
template <int W>
__device__ __forceinline__ void fold(SoftmaxState& s, const float (&v)[W]) {
  float m = s.max;
#pragma unroll
  for (int j = 0; j < W; ++j) m = MaxOp{}(m, v[j]);
  if (m == -__builtin_huge_valf()) return;  // everything so far is -inf: the sum stays 0
  float sum = s.max == m ? s.sum : s.sum * __expf(s.max - m);
#pragma unroll
  for (int j = 0; j < W; ++j) sum += __expf(v[j] - m);
  s = {m, sum};
}

// The NaN-propagating maximum of a packed vector. 16-bit types compare pairs in one
// instruction (__hmax2_nan; exact, as the maximum is one of the values).
template <class T, int W>
__device__ __forceinline__ float pack_max(const Pack<T, W>& x) {
  if constexpr (std::is_same_v<T, float> || W % 2 != 0) {
    float m = to_float(x.v[0]);
#pragma unroll
    for (int j = 1; j < W; ++j) m = MaxOp{}(m, to_float(x.v[j]));
    return m;
  } else {
    using T2 = std::conditional_t<std::is_same_v<T, __half>, __half2, __nv_bfloat162>;
    const T2* pairs = reinterpret_cast<const T2*>(x.v);
    T2 m = pairs[0];
#pragma unroll
    for (int j = 1; j < W / 2; ++j) m = __hmax2_nan(m, pairs[j]);
    return MaxOp{}(to_float(m.x), to_float(m.y));
  }
}

// Folds a packed vector into an online softmax state: one rescale of the running sum per
// vector, the maximum on packed pairs for 16-bit types.
template <class T, int W>
__device__ __forceinline__ void fold(SoftmaxState& s, const Pack<T, W>& x) {
  const float m = MaxOp{}(s.max, pack_max(x));
  if (m == -__builtin_huge_valf()) return;  // everything so far is -inf: the sum stays 0
  float sum = s.max == m ? s.sum : s.sum * __expf(s.max - m);
#pragma unroll
  for (int j = 0; j < W; ++j) sum += __expf(to_float(x.v[j]) - m);  // exactly 1 for the maximum
  s = {m, sum};
}

// log(sum(exp(x))) of a merged state. A max of -inf (all -inf), +inf or NaN is the result
// itself, as in PyTorch.
__device__ __forceinline__ float log_sum_exp(SoftmaxState s) { return isfinite(s.max) ? s.max + __logf(s.sum) : s.max; }

template <int kThreads>
__device__ __forceinline__ SoftmaxState group_reduce(SoftmaxState s, float2* scratch) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) {
    SoftmaxState other{__shfl_xor_sync(kFullMask, s.max, offset), __shfl_xor_sync(kFullMask, s.sum, offset)};
    s = merge(s, other);
  }
  if constexpr (kThreads > 32) {
    constexpr int kWarps = kThreads / 32;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0) scratch[warp] = make_float2(s.max, s.sum);
    __syncthreads();
    s = lane < kWarps ? SoftmaxState{scratch[lane].x, scratch[lane].y} : SoftmaxState{MaxOp::identity(), 0.0f};
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) {
      SoftmaxState other{__shfl_xor_sync(kFullMask, s.max, offset), __shfl_xor_sync(kFullMask, s.sum, offset)};
      s = merge(s, other);
    }
    __syncthreads();
  }
  return s;
}

// Welford / Chan running (count, mean, M2) for a numerically stable variance in one pass.
struct WelfordState {
  float count;
  float mean;
  float m2;
};

__device__ __forceinline__ WelfordState merge(WelfordState a, WelfordState b) {
  const float n = a.count + b.count;
  if (n == 0.0f) return a;
  const float delta = b.mean - a.mean;
  const float wb = b.count / n;
  return {n, a.mean + delta * wb, a.m2 + b.m2 + delta * delta * a.count * wb};
}

// Chan's merge is not symmetric bit for bit, so after a butterfly the lanes hold slightly
// different states: lane 0's is handed to all, so that every thread of a row normalises
// with the same statistics.
__device__ __forceinline__ WelfordState broadcast_lane0(WelfordState s) {
  return {__shfl_sync(kFullMask, s.count, 0), __shfl_sync(kFullMask, s.mean, 0), __shfl_sync(kFullMask, s.m2, 0)};
}

// (count, mean, M2) of `count` values held in registers (two passes over them).
template <int N>
__device__ __forceinline__ WelfordState local_welford(const float (&v)[N], int count) {
  if (count <= 0) return {0.0f, 0.0f, 0.0f};
  float mean = 0.0f;
#pragma unroll
  for (int j = 0; j < N; ++j) mean += j < count ? v[j] : 0.0f;
  mean /= static_cast<float>(count);
  float m2 = 0.0f;
#pragma unroll
  for (int j = 0; j < N; ++j) m2 += j < count ? (v[j] - mean) * (v[j] - mean) : 0.0f;
  return {static_cast<float>(count), mean, m2};
}

template <int kThreads>
__device__ __forceinline__ WelfordState group_reduce(WelfordState s, float4* scratch) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) {
    WelfordState other{__shfl_xor_sync(kFullMask, s.count, offset), __shfl_xor_sync(kFullMask, s.mean, offset),
                       __shfl_xor_sync(kFullMask, s.m2, offset)};
    s = merge(s, other);
  }
  s = broadcast_lane0(s);
  if constexpr (kThreads > 32) {
    constexpr int kWarps = kThreads / 32;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0) scratch[warp] = make_float4(s.count, s.mean, s.m2, 0.0f);
    __syncthreads();
    s = lane < kWarps ? WelfordState{scratch[lane].x, scratch[lane].y, scratch[lane].z} : WelfordState{0.0f, 0.0f, 0.0f};
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) {
      WelfordState other{__shfl_xor_sync(kFullMask, s.count, offset), __shfl_xor_sync(kFullMask, s.mean, offset),
                         __shfl_xor_sync(kFullMask, s.m2, offset)};
      s = merge(s, other);
    }
    s = broadcast_lane0(s);
    __syncthreads();
  }
  return s;
}

}  // namespace rudnn::cuda
