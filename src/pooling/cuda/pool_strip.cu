// Strip kernels for the 2-D NCHW pooling windows that dominate networks (max 3x3 stride 2
// padding 1, max and average 2x2 stride 2): memory-bound, so every input byte is read once
// with 16-byte loads and every output byte written with vector stores. A thread owns eight
// adjacent input columns (four outputs along W); a max thread walks down kRows output rows
// and keeps the horizontal maxima of the row two windows share (3x3 stride 2) in registers,
// so each input row is loaded once. The column left of the strip (3x3 only) comes from a
// scalar load that the neighbouring strip's vector load has just brought into L1.
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
constexpr int kRows = 4;  // output rows per max thread

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

// The four horizontal maxima of one input row: output column j of the strip takes columns
// 2j - P .. 2j - P + K - 1 relative to the strip's first column (P = K / 2 for K = 3, else 0).
struct RowMax {
  float v[4];
  int col[4];  // relative to the strip's first column (-1: the column left of it)
};

__device__ __forceinline__ void take(float v, int i, float& best, int& best_i) {
  if (v > best || isnan(v)) {
    best = v;
    best_i = i;
  }
}

template <int K, class T>
__device__ __forceinline__ RowMax row_max(const T* row, bool has_left) {
  float v[8];
  load8(row, v);
  RowMax r;
  if constexpr (K == 3) {
    const float left = has_left ? to_float(row[-1]) : 0.0f;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
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
    for (int j = 0; j < 4; ++j) {
      r.v[j] = v[2 * j];
      r.col[j] = 2 * j;
      take(v[2 * j + 1], 2 * j + 1, r.v[j], r.col[j]);
    }
  }
  return r;
}

// Folds a later row's maxima into the running result (rows in scan order).
__device__ __forceinline__ void fold(const RowMax& r, int row, float (&best)[4], int (&col)[4],
                                     int (&best_row)[4]) {
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    if (r.v[j] > best[j] || isnan(r.v[j])) {
      best[j] = r.v[j];
      col[j] = r.col[j];
      best_row[j] = row;
    }
  }
}

__device__ __forceinline__ void start(const RowMax& r, int row, float (&best)[4], int (&col)[4],
                                      int (&best_row)[4]) {
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    best[j] = r.v[j];
    col[j] = r.col[j];
    best_row[j] = row;
  }
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

// Thread (plane, row group, strip): outputs rows [g * kRows, ...) x columns [4t, 4t + 4).
template <int K, class T>
__global__ void __launch_bounds__(kThreads)
    max_strip_kernel(const T* __restrict__ input, T* __restrict__ out,
                     int64_t* __restrict__ indices, int64_t threads, int H, int W, int Ho,
                     int groups) {
  const int64_t id = blockIdx.x * int64_t{kThreads} + threadIdx.x;
  if (id >= threads) return;
  int t, g;
  int64_t plane;
  split_id(id, threads, W / 8, groups, t, g, plane);
  const int Wo = W / 2;
  const T* in = input + plane * H * int64_t{W} + 8 * t;
  const int64_t out_plane = plane * Ho * int64_t{Wo} + 4 * t;
  const bool has_left = K == 3 && t > 0;

  const int y_begin = g * kRows, y_end = min(y_begin + kRows, Ho);
  RowMax carry;  // 3x3: row 2y - 1, shared with the previous output row
  bool have_carry = false;
  if constexpr (K == 3) {
    if (2 * y_begin - 1 >= 0) {
      carry = row_max<K>(in + (2 * y_begin - 1) * int64_t{W}, has_left);
      have_carry = true;
    }
  }
  for (int y = y_begin; y < y_end; ++y) {
    const int r0 = 2 * y, r1 = 2 * y + 1;  // the window's rows besides the carried one
    const bool has0 = r0 < H, has1 = r1 < H;
    RowMax a, b;
    if (has0) a = row_max<K>(in + r0 * int64_t{W}, has_left);
    if (has1) b = row_max<K>(in + r1 * int64_t{W}, has_left);
    float best[4];
    int col[4], row[4];
    if (have_carry) {
      start(carry, r0 - 1, best, col, row);
      if (has0) fold(a, r0, best, col, row);
    } else {
      start(a, r0, best, col, row);
    }
    if (has1) fold(b, r1, best, col, row);
    if constexpr (K == 3) {
      carry = b;
      have_carry = has1;
    }
    const int64_t o = out_plane + y * int64_t{Wo};
    store_pack<T, 4>(out + o, best);
    longlong2 i01, i23;
    const int64_t c0 = 8 * t;
    i01.x = row[0] * int64_t{W} + c0 + col[0];
    i01.y = row[1] * int64_t{W} + c0 + col[1];
    i23.x = row[2] * int64_t{W} + c0 + col[2];
    i23.y = row[3] * int64_t{W} + c0 + col[3];
    *reinterpret_cast<longlong2*>(indices + o) = i01;
    *reinterpret_cast<longlong2*>(indices + o + 2) = i23;
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
  const int64_t threads = s.planes * groups * (W / 8);
  if ((threads + kThreads - 1) / kThreads > std::numeric_limits<int>::max()) return false;
  bool launched = false;
  rudnn::cuda::with_float_type(s.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
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
