// Exact 2x upsampling of 2-D NCHW planes (bilinear without align_corners, nearest and
// nearest-exact; the scale each axis uses is exactly 1/2), the decoder case that dominates
// networks. Memory-bound: an output element costs 4 B written (F32) and 1 B of input read, so
// the kernels are shaped around the stores. A thread owns kC input columns (8 bytes: 2 F32 or
// 4 F16/BF16) and writes the 2 kC output columns they produce with one 16-byte store per output
// row; consecutive threads own consecutive columns, so a warp's stores cover 512 contiguous
// bytes. Bilinear: a thread walks kRows input rows (2 kRows output rows), loading all of them
// plus one halo row above and below up front (no load waits on an earlier one), and reuses
// each row's horizontal interpolation for the four output rows it feeds. The column left and
// right of the strip are scalar loads of bytes the neighbours' vector loads bring into L1.
//
// With the scale exactly 1/2 torch's source coordinate of output 2c is c - 1/4 and of 2c + 1
// is c + 1/4 (exact in FP32 below 2^21, which the launch checks), so the weights are 1/4 and
// 3/4 except at the first output, which torch clamps to weights (1, 0) on pixels (0, 1); the
// last input pixel's right neighbour is itself (torch's clamped index). Nearest: outputs 2c
// and 2c + 1 both copy input c. Also here: the bilinear 2x backward (a gather) and area
// downsampling by exactly 2 (2 x 2 windows).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <limits>

#include "cuda/types.cuh"
#include "cuda/vec.cuh"
#include "interpolation/problem.h"

namespace rudnn::interpolation_detail::cuda {

namespace x2 {

constexpr int kThreads = 256;
constexpr int kRows = 8;  // input rows per bilinear thread (halo rows cost 2 / kRows extra)

// id = (outer * middle + m) * inner + i, dividing in 32 bits when the grid allows (64-bit
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

// One input row's kC columns and their left and right neighbours (clamped at the plane's
// edges: the first column's left is unused, the last column's right is itself).
template <class T, int kC>
struct Row {
  float left, mid[kC], right;
};

template <class T, int kC>
__device__ __forceinline__ Row<T, kC> load_row(const T* row, int c0, int W) {
  Row<T, kC> r;
  rudnn::cuda::load_pack<T, kC>(row, r.mid);
  r.left = c0 > 0 ? rudnn::cuda::to_float(row[-1]) : r.mid[0];
  r.right = c0 + kC < W ? rudnn::cuda::to_float(row[kC]) : r.mid[kC - 1];
  return r;
}

// The row's 2 kC horizontally interpolated values: torch's w0 * x[i0] + w1 * x[i1].
template <class T, int kC>
__device__ __forceinline__ void horizontal(const Row<T, kC>& r, bool first_column,
                                           float (&h)[2 * kC]) {
#pragma unroll
  for (int j = 0; j < kC; ++j) {
    const float before = j == 0 ? r.left : r.mid[j - 1];
    const float after = j == kC - 1 ? r.right : r.mid[j + 1];
    h[2 * j] = 0.25f * before + 0.75f * r.mid[j];
    h[2 * j + 1] = 0.75f * r.mid[j] + 0.25f * after;
  }
  if (first_column) h[0] = 1.0f * r.mid[0] + 0.0f * r.mid[1];
}

// Thread (plane, row group g, strip t): input rows [g kRows, g kRows + kRows) x columns
// [t kC, t kC + kC); output rows twice those, output columns [2 t kC, 2 t kC + 2 kC).
template <class T>
__global__ void __launch_bounds__(kThreads)
    bilinear_kernel(const T* __restrict__ input, T* __restrict__ out, int64_t threads, int H,
                    int W, int groups) {
  constexpr int kC = 8 / sizeof(T);
  const int64_t id = blockIdx.x * int64_t{kThreads} + threadIdx.x;
  if (id >= threads) return;
  int t, g;
  int64_t plane;
  split_id(id, threads, W / kC, groups, t, g, plane);
  const int c0 = t * kC, y0 = g * kRows;
  const T* src = input + plane * H * int64_t{W} + c0;
  T* dst = out + plane * 4 * H * int64_t{W} + 2 * c0;
  const int64_t out_row = 2 * int64_t{W};

  // Rows y0 - 1 .. y0 + kRows, clamped into the plane (the clamped ones are torch's indices
  // for the first and last rows, or unused past the last row).
  float h[kRows + 2][2 * kC];
  {
    Row<T, kC> rows[kRows + 2];
#pragma unroll
    for (int i = 0; i < kRows + 2; ++i) {
      const int y = min(max(y0 - 1 + i, 0), H - 1);
      rows[i] = load_row<T, kC>(src + y * int64_t{W}, c0, W);
    }
#pragma unroll
    for (int i = 0; i < kRows + 2; ++i) horizontal<T, kC>(rows[i], c0 == 0, h[i]);
  }
#pragma unroll
  for (int i = 1; i <= kRows; ++i) {
    const int y = y0 + i - 1;
    if (y >= H) break;
    float even[2 * kC], odd[2 * kC];
#pragma unroll
    for (int j = 0; j < 2 * kC; ++j) {
      even[j] = y == 0 ? 1.0f * h[i][j] + 0.0f * h[i + 1][j] : 0.25f * h[i - 1][j] + 0.75f * h[i][j];
      odd[j] = 0.75f * h[i][j] + 0.25f * h[i + 1][j];
    }
    rudnn::cuda::store_pack<T, 2 * kC>(dst + 2 * y * out_row, even);
    rudnn::cuda::store_pack<T, 2 * kC>(dst + (2 * y + 1) * out_row, odd);
  }
}

// Thread (plane, input row y, strip t): one load, two 16-byte stores.
template <class T>
__global__ void __launch_bounds__(kThreads)
    nearest_kernel(const T* __restrict__ input, T* __restrict__ out, int64_t threads, int H,
                   int W) {
  constexpr int kC = 8 / sizeof(T);
  const int64_t id = blockIdx.x * int64_t{kThreads} + threadIdx.x;
  if (id >= threads) return;
  int t, y;
  int64_t plane;
  split_id(id, threads, W / kC, H, t, y, plane);
  const int c0 = t * kC;
  // A copy: move the raw elements (no FP32 round trip, so NaN payloads and -0 survive).
  using InPack = rudnn::cuda::Pack<T, kC>;
  using OutPack = rudnn::cuda::Pack<T, 2 * kC>;
  const InPack v = *reinterpret_cast<const InPack*>(input + (plane * H + y) * int64_t{W} + c0);
  OutPack o;
#pragma unroll
  for (int j = 0; j < kC; ++j) {
    o.v[2 * j] = v.v[j];
    o.v[2 * j + 1] = v.v[j];
  }
  T* dst = out + (plane * 2 * H + 2 * y) * 2 * int64_t{W} + 2 * c0;
  *reinterpret_cast<OutPack*>(dst) = o;
  *reinterpret_cast<OutPack*>(dst + 2 * int64_t{W}) = o;
}

// Area with every window 2 x 2 (input exactly twice the output on both axes): thread (plane,
// output row y, strip t) reads 16 bytes of input columns (kIn) from each of the window's two
// rows and writes kIn / 2 outputs. The sum runs in the general kernel's order (row by row,
// from 0), so both give the same bits.
template <class T>
__global__ void __launch_bounds__(kThreads)
    area_half_kernel(const T* __restrict__ input, T* __restrict__ out, int64_t threads, int Ho,
                     int W) {
  constexpr int kIn = 16 / sizeof(T), kOut = kIn / 2;
  const int64_t id = blockIdx.x * int64_t{kThreads} + threadIdx.x;
  if (id >= threads) return;
  int t, y;
  int64_t plane;
  split_id(id, threads, W / kIn, Ho, t, y, plane);
  const T* src = input + (plane * 2 * Ho + 2 * y) * int64_t{W} + kIn * t;
  float a[kIn], b[kIn], o[kOut];
  rudnn::cuda::load_pack<T, kIn>(src, a);
  rudnn::cuda::load_pack<T, kIn>(src + W, b);
#pragma unroll
  for (int j = 0; j < kOut; ++j) {
    float sum = 0.0f;
    sum += a[2 * j];
    sum += a[2 * j + 1];
    sum += b[2 * j];
    sum += b[2 * j + 1];
    o[j] = sum / 4.0f;
  }
  rudnn::cuda::store_pack<T, kOut>(out + (plane * Ho + y) * int64_t{W / 2} + kOut * t, o);
}

// Backward of the bilinear 2x: the total weight output o gives input c along an axis of n
// inputs (torch's taps of o, summed where both are c), 0 for outputs that do not reach c.
__device__ __forceinline__ float weight_x2(int o, int c, int n) {
  const int k = o >> 1;  // floor, also for the o < 0 the callers never load
  int i0, i1;
  float w0, w1;
  if ((o & 1) == 0) {
    i0 = k == 0 ? 0 : k - 1;
    i1 = k == 0 ? min(1, n - 1) : k;
    w0 = k == 0 ? 1.0f : 0.25f;
    w1 = k == 0 ? 0.0f : 0.75f;
  } else {
    i0 = k;
    i1 = min(k + 1, n - 1);
    w0 = 0.75f;
    w1 = 0.25f;
  }
  return (i0 == c ? w0 : 0.0f) + (i1 == c ? w1 : 0.0f);
}

constexpr int kBackRows = 8;  // input rows per backward thread (2 kBackRows + 4 output rows)

// Thread (plane, row group g, strip t): the gradient of input rows [g kBackRows, + kBackRows)
// x columns [t kC, t kC + kC), gathered (deterministically, without atomics) from output
// columns [2 t kC - 2, 2 t kC + 2 kC + 2) of output rows [2 g kBackRows - 2, ...): the outputs
// 2c - 2 .. 2c + 2 are the only ones whose taps reach input c (2c - 2 with weight 0, only for
// c = 1, as torch's kernel adds it). Each output row is loaded once (16 bytes and two 2-element
// pairs), reduced along W, then combined along H.
template <class T>
__global__ void __launch_bounds__(kThreads)
    bilinear_backward_kernel(const T* __restrict__ dout, T* __restrict__ dinput,
                             int64_t threads, int H, int W, int groups) {
  constexpr int kC = 8 / sizeof(T);
  constexpr int kSpan = 2 * kBackRows + 4;  // output rows read
  const int64_t id = blockIdx.x * int64_t{kThreads} + threadIdx.x;
  if (id >= threads) return;
  int t, g;
  int64_t plane;
  split_id(id, threads, W / kC, groups, t, g, plane);
  const int c0 = t * kC, y0 = g * kBackRows;
  const int Wo = 2 * W, Ho = 2 * H;
  const T* src = dout + plane * Ho * int64_t{Wo} + 2 * c0;
  const bool has_left = c0 > 0, has_right = c0 + kC < W;

  float hs[kSpan][kC];  // output row r's contribution to each of the kC columns
#pragma unroll
  for (int i = 0; i < kSpan; ++i) {
    const int r = 2 * y0 - 2 + i;
    const bool row_ok = r >= 0 && r < Ho;
    const T* row = src + min(max(r, 0), Ho - 1) * int64_t{Wo};
    // v[q] is output column 2 c0 - 2 + q; columns outside the plane read as 0.
    float v[2 * kC + 4];
    float mid[2 * kC], pair[2];
    rudnn::cuda::load_pack<T, 2 * kC>(row, mid);
#pragma unroll
    for (int q = 0; q < 2 * kC; ++q) v[q + 2] = row_ok ? mid[q] : 0.0f;
    v[0] = v[1] = 0.0f;
    if (has_left) {
      rudnn::cuda::load_pack<T, 2>(row - 2, pair);
      v[0] = row_ok ? pair[0] : 0.0f;
      v[1] = row_ok ? pair[1] : 0.0f;
    }
    v[2 * kC + 2] = v[2 * kC + 3] = 0.0f;
    if (has_right) {
      rudnn::cuda::load_pack<T, 2>(row + 2 * kC, pair);
      v[2 * kC + 2] = row_ok ? pair[0] : 0.0f;
      v[2 * kC + 3] = row_ok ? pair[1] : 0.0f;
    }
#pragma unroll
    for (int j = 0; j < kC; ++j) {
      const int c = c0 + j;
      float sum = 0.0f;
#pragma unroll
      for (int d = -2; d <= 2; ++d) sum += weight_x2(2 * c + d, c, W) * v[2 * j + d + 2];
      hs[i][j] = sum;
    }
  }
  T* dst = dinput + plane * H * int64_t{W} + c0;
#pragma unroll
  for (int k = 0; k < kBackRows; ++k) {
    const int y = y0 + k;
    if (y >= H) break;
    float result[kC];
#pragma unroll
    for (int j = 0; j < kC; ++j) {
      float sum = 0.0f;
#pragma unroll
      for (int d = -2; d <= 2; ++d) sum += weight_x2(2 * y + d, y, H) * hs[2 * k + d + 2][j];
      result[j] = sum;
    }
    rudnn::cuda::store_pack<T, kC>(dst + y * int64_t{W}, result);
  }
}

inline bool aligned(const void* p, size_t bytes) {
  return reinterpret_cast<uintptr_t>(p) % bytes == 0;
}

// Launches the 2x kernel when the problem is one of theirs; false (nothing launched) leaves
// it to the general kernels.
template <class T>
bool try_area_half(const Forward& p, cudaStream_t stream) {
  const InterpShape& s = p.s;
  constexpr int kIn = 16 / sizeof(T);
  const Axis &ay = s.axis[1], &ax = s.axis[2];
  constexpr int64_t kMaxSide = int64_t{1} << 30;
  if (s.dims != 2 || ay.in != 2 * ay.out || ax.in != 2 * ax.out || ax.in > kMaxSide ||
      ay.in > kMaxSide || ax.in % kIn != 0)
    return false;
  if (!aligned(p.input, 16) || !aligned(p.out, 8)) return false;
  const int Ho = static_cast<int>(ay.out), W = static_cast<int>(ax.in);
  const int64_t threads = s.planes * Ho * (W / kIn);
  const int64_t blocks = (threads + kThreads - 1) / kThreads;
  if (blocks > std::numeric_limits<int>::max()) return false;
  area_half_kernel<T><<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(
      static_cast<const T*>(p.input), static_cast<T*>(p.out), threads, Ho, W);
  return true;
}

// Launches the 2x kernel when the problem is one of theirs; false (nothing launched) leaves
// it to the general kernels.
template <class T>
bool try_forward(const Forward& p, cudaStream_t stream) {
  const InterpShape& s = p.s;
  if (s.rule == kArea) return try_area_half<T>(p, stream);
  constexpr int kC = 8 / sizeof(T);
  const bool bilinear = s.rule == kLinear && !s.align_corners;
  const bool nearest = s.rule == kNearest || s.rule == kNearestExact;
  if (s.dims != 2 || !(bilinear || nearest)) return false;
  const Axis &ay = s.axis[1], &ax = s.axis[2];
  // Below 2^20 every coordinate the general path computes in FP32 is exact, so both agree.
  constexpr int64_t kMaxSide = int64_t{1} << 20;
  if (ay.out != 2 * ay.in || ax.out != 2 * ax.in || ay.ratio != 0.5f || ax.ratio != 0.5f ||
      ay.in > kMaxSide || ax.in > kMaxSide || ax.in % kC != 0)
    return false;
  if (!aligned(p.input, 8) || !aligned(p.out, 16)) return false;
  const int H = static_cast<int>(ay.in), W = static_cast<int>(ax.in);
  const int groups = bilinear ? (H + kRows - 1) / kRows : H;
  const int64_t threads = s.planes * groups * (W / kC);
  const int64_t blocks = (threads + kThreads - 1) / kThreads;
  if (blocks > std::numeric_limits<int>::max()) return false;
  const T* in = static_cast<const T*>(p.input);
  T* out = static_cast<T*>(p.out);
  if (bilinear) {
    bilinear_kernel<T><<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(in, out, threads,
                                                                               H, W, groups);
  } else {
    nearest_kernel<T><<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(in, out, threads,
                                                                              H, W);
  }
  return true;
}

// The backward of the bilinear 2x (both modes: the gather is deterministic and faster than
// the scatter here); false leaves the problem to the general kernels.
template <class T>
bool try_backward(const Backward& p, cudaStream_t stream) {
  const InterpShape& s = p.s;
  constexpr int kC = 8 / sizeof(T);
  if (s.dims != 2 || s.rule != kLinear || s.align_corners) return false;
  const Axis &ay = s.axis[1], &ax = s.axis[2];
  constexpr int64_t kMaxSide = int64_t{1} << 20;
  if (ay.out != 2 * ay.in || ax.out != 2 * ax.in || ay.ratio != 0.5f || ax.ratio != 0.5f ||
      ay.in > kMaxSide || ax.in > kMaxSide || ax.in % kC != 0)
    return false;
  if (!aligned(p.dout, 16) || !aligned(p.dinput, 8)) return false;
  const int H = static_cast<int>(ay.in), W = static_cast<int>(ax.in);
  const int groups = (H + kBackRows - 1) / kBackRows;
  const int64_t threads = s.planes * groups * (W / kC);
  const int64_t blocks = (threads + kThreads - 1) / kThreads;
  if (blocks > std::numeric_limits<int>::max()) return false;
  bilinear_backward_kernel<T><<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(
      static_cast<const T*>(p.dout), static_cast<T*>(p.dinput), threads, H, W, groups);
  return true;
}

}  // namespace x2

}  // namespace rudnn::interpolation_detail::cuda
