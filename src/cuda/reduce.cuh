// Warp and thread-group reductions in FP32. Every reduction here combines values in a fixed
// order, so a kernel's result does not depend on scheduling.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "cuda/vec.cuh"

namespace rudnn::cuda {

constexpr unsigned kFullMask = 0xffffffffu;

// A reduction is a state type S and a merge functor: `S operator()(S, S)`, `static S
// identity()`, and kLanesAgree, whether a butterfly leaves every lane with the same bits
// (true when the merge is commutative bit for bit; false for Welford's, after which lane 0's
// state is handed to all so that every thread of a row goes on with the same statistics).

struct SumOp {
  static constexpr bool kLanesAgree = true;
  __host__ __device__ static constexpr float identity() { return 0.0f; }
  __device__ __forceinline__ float operator()(float a, float b) const { return a + b; }
};

// Maximum that propagates NaN (fmaxf would drop it): softmax and log-sum-exp must turn a NaN
// anywhere in a row into NaN.
struct MaxOp {
  static constexpr bool kLanesAgree = true;
  __host__ __device__ static constexpr float identity() { return -__builtin_huge_valf(); }
  __device__ __forceinline__ float operator()(float a, float b) const {
    return (a > b || a != a) ? a : b;
  }
};

// Two sums reduced together (one pair of barriers instead of two).
struct PairSumOp {
  static constexpr bool kLanesAgree = true;
  __host__ __device__ static float2 identity() { return make_float2(0.0f, 0.0f); }
  __device__ __forceinline__ float2 operator()(float2 a, float2 b) const {
    return make_float2(a.x + b.x, a.y + b.y);
  }
};

// Shuffles a state of 32-bit words: from lane (this lane ^ offset), or from `lane`.
template <class S>
__device__ __forceinline__ S shuffle_xor(const S& s, int offset) {
  static_assert(sizeof(S) % 4 == 0, "a reduction state is made of 32-bit words");
  uint32_t w[sizeof(S) / 4];
  memcpy(w, &s, sizeof(S));
#pragma unroll
  for (int i = 0; i < static_cast<int>(sizeof(S) / 4); ++i)
    w[i] = __shfl_xor_sync(kFullMask, w[i], offset);
  S r;
  memcpy(&r, w, sizeof(S));
  return r;
}
template <class S>
__device__ __forceinline__ S shuffle_from(const S& s, int lane) {
  uint32_t w[sizeof(S) / 4];
  memcpy(w, &s, sizeof(S));
#pragma unroll
  for (int i = 0; i < static_cast<int>(sizeof(S) / 4); ++i)
    w[i] = __shfl_sync(kFullMask, w[i], lane);
  S r;
  memcpy(&r, w, sizeof(S));
  return r;
}

// Reduces over a warp (butterfly) and returns the result to every lane.
template <class S, class Merge>
__device__ __forceinline__ S warp_reduce(S s, Merge merge) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) s = merge(s, shuffle_xor(s, offset));
  if constexpr (!Merge::kLanesAgree) s = shuffle_from(s, 0);
  return s;
}

// A float's sum over the warp (butterfly), every lane getting the same bits.
__device__ __forceinline__ float warp_sum(float v) { return warp_reduce(v, SumOp{}); }

// Reduces over the kThreads threads that share a row and returns the result to all of
// them. kThreads is 32 (one warp: no shared memory, no barrier; `scratch` is unused) or a
// multiple of 32 up to 1024 covering the whole block; then `scratch` holds 32 states, and
// the function has a barrier on both sides so that calls can follow one another with the
// same scratch.
template <int kThreads, class S, class Merge>
__device__ __forceinline__ S group_reduce(S s, Merge merge, S* scratch) {
  s = warp_reduce(s, merge);
  if constexpr (kThreads > 32) {
    constexpr int kWarps = kThreads / 32;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0) scratch[warp] = s;
    __syncthreads();
    s = lane < kWarps ? scratch[lane] : Merge::identity();
    s = warp_reduce(s, merge);  // every warp folds the same partials in the same order
    __syncthreads();
  }
  return s;
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
struct alignas(8) SoftmaxState {  // 8-byte aligned: one 64-bit shared-memory access per state
  float max;
  float sum;
};

struct SoftmaxMerge {
  static constexpr bool kLanesAgree = true;
  __host__ __device__ static SoftmaxState identity() { return {MaxOp::identity(), 0.0f}; }
  __device__ __forceinline__ SoftmaxState operator()(SoftmaxState a, SoftmaxState b) const {
    const float m = MaxOp{}(a.max, b.max);
    const float sa = a.max == m ? a.sum : a.sum * __expf(a.max - m);
    const float sb = b.max == m ? b.sum : b.sum * __expf(b.max - m);
    return {m, sa + sb};
  }
};

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
__device__ __forceinline__ float log_sum_exp(SoftmaxState s) {
  return isfinite(s.max) ? s.max + __logf(s.sum) : s.max;
}

// Welford / Chan running (count, mean, M2) for a numerically stable variance in one pass.
struct WelfordState {
  float count;
  float mean;
  float m2;
};

// Chan's merge is not symmetric bit for bit: after a butterfly the lanes hold slightly
// different states, so the reductions hand lane 0's to all.
struct WelfordMerge {
  static constexpr bool kLanesAgree = false;
  __host__ __device__ static WelfordState identity() { return {0.0f, 0.0f, 0.0f}; }
  __device__ __forceinline__ WelfordState operator()(WelfordState a, WelfordState b) const {
    const float n = a.count + b.count;
    if (n == 0.0f) return a;
    const float delta = b.mean - a.mean;
    const float wb = b.count / n;
    return {n, a.mean + delta * wb, a.m2 + b.m2 + delta * delta * a.count * wb};
  }
};

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

}  // namespace rudnn::cuda
