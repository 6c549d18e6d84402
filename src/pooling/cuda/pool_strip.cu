// Strip kernels for the 2-D NCHW pooling windows that dominate networks (max 3x3 stride 2
// padding 1, max and average 2x2 stride 2): memory-bound, so every input byte is read once
// with 16-byte loads and every output byte written with vector stores. An average thread owns
// eight adjacent input columns (four outputs along W). A max thread owns 16 bytes of input
// columns (4 F32 or 8 F16/BF16: half as many outputs) over kRows output rows, loads every row
// of those windows at once (the row two 3x3 stride-2 windows share once), and writes its
// values and I64 indices with one store each per row, so a warp's stores are contiguous. The
// column left of the strip (3x3 only) comes from a scalar load that the neighbouring strip's
// vector load brings into L1.
//
// NaN and tie rules are torch's, as the general kernel: each reduction starts from its first
// in-bounds tap and takes a later value when it is greater or NaN. Reducing rows first and
// then columns keeps that result: the last NaN in scan order if any, else the first maximum.
#include <cuda_runtime.h>

#include <cstdint>
#include <limits>

#include "cuda/launch.cuh"
#include "cuda/types.cuh"
#include "cuda/vec.cuh"
#include "pooling/cuda/launch.h"

namespace rudnn::pooling_detail::cuda {

using rudnn::cuda::load_pack;
using rudnn::cuda::store_pack;
using rudnn::cuda::to_float;

namespace {

constexpr int kThreads = 256;
constexpr int kRows = 4;  // output rows per max thread (K = 3 reloads 1 row in 2 kRows + 1)

// Eight elements at p (16-byte aligned) as floats.
template <class T>
__device__ __forceinline__ void load8(const T* p, float (&v)[8]) {
  if constexpr (sizeof(T) == 4) {
    float a[4], b[4];
    load_pack<T, 4>(p, a);
    load_pack<T, 4>(p + 4, b);
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      v[j] = a[j];
      v[4 + j] = b[j];
    }
  } else {
    load_pack<T, 8>(p, v);
  }
}

// The kOut horizontal maxima of one input row: output column j of the strip takes columns
// 2j - P .. 2j - P + K - 1 relative to the strip's first column (P = K / 2 for K = 3, else 0).
template <int kOut>
struct RowMax {
  float v[kOut];
  int col[kOut];  // relative to the strip's first column (-1: the column left of it)
};

__device__ __forceinline__ void take(float v, int i, float& best, int& best_i) {
  if (v > best || isnan(v)) {
    best = v;
    best_i = i;
  }
}

// v: the strip's 2 kOut columns; left: the column before it (K = 3, when has_left).
template <int K, int kOut>
__device__ __forceinline__ RowMax<kOut> row_max(const float (&v)[2 * kOut], float left,
                                                bool has_left) {
  RowMax<kOut> r;
  if constexpr (K == 3) {
#pragma unroll
    for (int j = 0; j < kOut; ++j) {
      if (j == 0) {
        r.v[0] = has_left ? left : v[0];
        r.col[0] = has_left ? -1 : 0;
        if (has_left) take(v[0], 0, r.v[0], r.col[0]);
      } else {
        r.v[j] = v[2 * j - 1];
        r.col[j] = 2 * j - 1;
        take(v[2 * j], 2 * j, r.v[j], r.col[j]);
      }
      take(v[2 * j + 1], 2 * j + 1, r.v[j], r.col[j]);
    }
  } else {
#pragma unroll
    for (int j = 0; j < kOut; ++j) {
      r.v[j] = v[2 * j];
      r.col[j] = 2 * j;
      take(v[2 * j + 1], 2 * j + 1, r.v[j], r.col[j]);
    }
  }
  return r;
}

// id = (outer * middle + m) * inner + i, in 32-bit division when the grid allows (64-bit
// division costs several times more; the branch is uniform across the launch).
__device__ __forceinline__ void split_id(int64_t id, int64_t threads, int inner, int middle,
                                         int& i, int& m, int64_t& outer) {
  if (threads <= int64_t{0xffffffff}) {
    const uint32_t u = static_cast<uint32_t>(id), rest = u / static_cast<uint32_t>(inner);
    i = static_cast<int>(u - rest * static_cast<uint32_t>(inner));
    const uint32_t o = rest / static_cast<uint32_t>(middle);
    m = static_cast<int>(rest - o * static_cast<uint32_t>(middle));
    outer = o;
    return;
  }
  const int64_t rest = id / inner;
  i = static_cast<int>(id - rest * inner);
  outer = rest / middle;
  m = static_cast<int>(rest - outer * middle);
}

// Thread (plane, row group g, strip t): output rows [g kRows, g kRows + kRows) x columns
// [kOut t, kOut t + kOut), from the 2 kOut input columns (16 bytes) under them. Every input row
// the thread needs is loaded before any is reduced, so its loads are in flight together; a warp's
// loads and its value and index stores each cover one contiguous span (no store writes part of
// a sector that another instruction completes).
template <int K, class T>
__global__ void __launch_bounds__(kThreads)
    max_strip_kernel(const T* __restrict__ input, T* __restrict__ out,
                     int64_t* __restrict__ indices, int64_t threads, int H, int W, int Ho,
                     int groups) {
  constexpr int kIn = 16 / sizeof(T), kOut = kIn / 2;
  constexpr int kSpan = K == 3 ? 2 * kRows + 1 : 2 * kRows;  // input rows of kRows windows
  const int64_t id = blockIdx.x * int64_t{kThreads} + threadIdx.x;
  if (id >= threads) return;
  int t, g;
  int64_t plane;
  split_id(id, threads, W / kIn, groups, t, g, plane);
  const int Wo = W / 2;
  const int c0 = kIn * t;
  const T* in = input + plane * H * int64_t{W} + c0;
  const bool has_left = K == 3 && t > 0;
  const int y_begin = g * kRows;
  const int first_row = K == 3 ? 2 * y_begin - 1 : 2 * y_begin;

  RowMax<kOut> rows[kSpan];
  {
    float raw[kSpan][kIn], left[kSpan];
#pragma unroll
    for (int i = 0; i < kSpan; ++i) {
      // Rows outside the plane are never reduced; clamping keeps their loads in bounds.
      const T* row = in + min(max(first_row + i, 0), H - 1) * int64_t{W};
      if constexpr (kIn == 8) {
        load8(row, raw[i]);
      } else {
        load_pack<T, kIn>(row, raw[i]);
      }
      left[i] = has_left ? to_float(row[-1]) : 0.0f;
    }
#pragma unroll
    for (int i = 0; i < kSpan; ++i) rows[i] = row_max<K, kOut>(raw[i], left[i], has_left);
  }
#pragma unroll
  for (int k = 0; k < kRows; ++k) {
    const int y = y_begin + k;
    if (y >= Ho) break;
    float best[kOut];
    int col[kOut], best_row[kOut];
    bool started = false;
    // The window's rows in scan order; the first in the plane starts the reduction.
#pragma unroll
    for (int kr = 0; kr < K; ++kr) {
      const int i = 2 * k + kr, r = first_row + i;
      if (r < 0 || r >= H) continue;
#pragma unroll
      for (int j = 0; j < kOut; ++j) {
        if (!started || rows[i].v[j] > best[j] || isnan(rows[i].v[j])) {
          best[j] = rows[i].v[j];
          col[j] = rows[i].col[j];
          best_row[j] = r;
        }
      }
      started = true;
    }
    const int64_t o = (plane * Ho + y) * int64_t{Wo} + kOut * t;
    store_pack<T, kOut>(out + o, best);
#pragma unroll
    for (int j = 0; j < kOut; j += 2) {
      longlong2 pair;
      pair.x = best_row[j] * int64_t{W} + c0 + col[j];
      pair.y = best_row[j + 1] * int64_t{W} + c0 + col[j + 1];
      *reinterpret_cast<longlong2*>(indices + o + j) = pair;
    }
  }
}

// Thread (plane, output row, strip): two rows of eight inputs, four outputs.
template <class T>
__global__ void __launch_bounds__(kThreads)
    avg_strip_kernel(const T* __restrict__ input, T* __restrict__ out, int64_t threads, int H,
                     int W, int Ho, float divisor) {
  const int64_t id = blockIdx.x * int64_t{kThreads} + threadIdx.x;
  if (id >= threads) return;
  int t, y;
  int64_t plane;
  split_id(id, threads, W / 8, Ho, t, y, plane);
  const T* in = input + (plane * H + 2 * y) * int64_t{W} + 8 * t;
  float a[8], b[8], o[4];
  load8(in, a);
  load8(in + W, b);
#pragma unroll
  for (int j = 0; j < 4; ++j) o[j] = ((a[2 * j] + a[2 * j + 1]) + (b[2 * j] + b[2 * j + 1])) / divisor;
  store_pack<T, 4>(out + (plane * Ho + y) * int64_t{W / 2} + 4 * t, o);
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// A 2-D (or 1-D seen as H = 1) NCHW problem with window K x K, stride 2, padding K / 2 for
// K = 3 and 0 for K = 2, dilation 1, W a multiple of 8 with Wo = W / 2, sizes in int range.
bool strip_shape(const PoolShape& s, int K) {
  const int64_t pad = K == 3 ? 1 : 0;
  if (s.channels_last || s.adaptive || s.in[0] != 1 || s.kernel[0] != 1) return false;
  if (s.kernel[1] != K || s.kernel[2] != K || s.stride[1] != 2 || s.stride[2] != 2) return false;
  if (s.padding[1] != pad || s.padding[2] != pad || s.dilation[1] != 1 || s.dilation[2] != 1)
    return false;
  const int64_t limit = std::numeric_limits<int>::max() / 4;
  if (s.in[1] > limit || s.in[2] > limit) return false;
  return s.in[2] % 8 == 0 && s.out[2] * 2 == s.in[2];
}

unsigned blocks(int64_t threads) { return static_cast<unsigned>((threads + kThreads - 1) / kThreads); }

}  // namespace

bool strip_max_forward(const MaxForward& p, cudaStream_t stream) {
  const PoolShape& s = p.s;
  const int K = s.kernel[2];
  if ((K != 2 && K != 3) || !strip_shape(s, K)) return false;
  if (!aligned16(p.input) || !aligned16(p.out) || !aligned16(p.indices)) return false;
  const int H = static_cast<int>(s.in[1]), W = static_cast<int>(s.in[2]);
  const int Ho = static_cast<int>(s.out[1]);
  const int groups = (Ho + kRows - 1) / kRows;
  bool launched = false;
  rudnn::cuda::with_float_type(s.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const int64_t threads = s.planes * groups * (W / (16 / static_cast<int>(sizeof(T))));
    if ((threads + kThreads - 1) / kThreads > std::numeric_limits<int>::max()) return;
    const T* in = static_cast<const T*>(p.input);
    T* out = static_cast<T*>(p.out);
    if (K == 3) {
      max_strip_kernel<3, T>
          <<<blocks(threads), kThreads, 0, stream>>>(in, out, p.indices, threads, H, W, Ho, groups);
    } else {
      max_strip_kernel<2, T>
          <<<blocks(threads), kThreads, 0, stream>>>(in, out, p.indices, threads, H, W, Ho, groups);
    }
    launched = true;
  });
  return launched;
}

bool strip_avg_forward(const AvgForward& p, cudaStream_t stream) {
  const PoolShape& s = p.s;
  // Every window whole (Ho * 2 <= H), so the divisor is 4 or the override.
  if (!strip_shape(s, 2) || s.out[1] * 2 > s.in[1]) return false;
  if (!aligned16(p.input) || !aligned16(p.out)) return false;
  const int H = static_cast<int>(s.in[1]), W = static_cast<int>(s.in[2]);
  const int Ho = static_cast<int>(s.out[1]);
  const int64_t threads = s.planes * Ho * (W / 8);
  if ((threads + kThreads - 1) / kThreads > std::numeric_limits<int>::max()) return false;
  const float divisor = static_cast<float>(s.divisor_override != 0 ? s.divisor_override : 4);
  bool launched = false;
  rudnn::cuda::with_float_type(s.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    avg_strip_kernel<T><<<blocks(threads), kThreads, 0, stream>>>(
        static_cast<const T*>(p.input), static_cast<T*>(p.out), threads, H, W, Ho, divisor);
    launched = true;
  });
  return launched;
}

}  // namespace rudnn::pooling_detail::cuda
