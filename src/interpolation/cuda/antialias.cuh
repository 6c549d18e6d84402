// Antialiased bilinear and bicubic (torch's _upsample_{bilinear,bicubic}2d_aa), 2-D NCHW
// planes, forward and backward.
//
// A first small kernel writes, for every output row and column, its window (start, count)
// and its normalised FP32 weights into the workspace (aa_workspace_bytes: 4 x (Ho x (2 +
// Ky) + Wo x (2 + Kx)) bytes, K = the axis's aa_taps), computed with torch's CUDA arithmetic
// (taps.h, aa_window<float>). The forward and backward kernels then read the tables instead
// of re-evaluating the filter and its normalisation per tap; a window is at most aa_taps
// long, so the tables stay small (outputs x taps per axis).
//
// Forward: a thread owns an output column (its window and, when it has at most kCached taps,
// its weights in registers) and walks output rows with a grid stride; every row's window is
// uniform across the warp. out = sum_ky wy[ky] * (sum_kx wx[kx] * in[ys + ky, xs + kx]), FP32.
// Backward (deterministic gather, no atomics; also when options.deterministic is false): a
// thread owns an input column, finds once the outputs whose windows hold it (binary search on
// the monotone window ends of the table), walks input rows likewise, and sums
// wy(oy, iy) * wx(ox, ix) * dout over those outputs in a fixed order; each gradient element is
// written once.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "cuda/types.cuh"
#include "interpolation/problem.h"
#include "interpolation/taps.h"

namespace rudnn::interpolation_detail::cuda {

namespace aa {

using rudnn::cuda::from_float;
using rudnn::cuda::to_float;

constexpr int kThreads = 256;
constexpr int kCached = 8;  // window lengths kept in registers (2x..3x downscaling, bilinear)

// The tables of one axis, carved out of the workspace.
struct Table {
  int* start;
  int* count;
  float* weight;  // [out, taps]
  int64_t taps;
};

struct Tables {
  Table y, x;
};

inline Tables carve(const InterpShape& s, void* workspace) {
  const Axis& ay = s.axis[1];
  const Axis& ax = s.axis[2];
  int* ints = static_cast<int*>(workspace);
  float* floats = reinterpret_cast<float*>(ints + 2 * (ay.out + ax.out));
  Tables t;
  t.y = {ints, ints + ay.out, floats, ay.aa_taps};
  t.x = {ints + 2 * ay.out, ints + 2 * ay.out + ax.out, floats + ay.out * ay.aa_taps, ax.aa_taps};
  return t;
}

// One thread per output row or column of the two axes (rows first). (A template, as every
// kernel of this header: four translation units include it.)
template <bool kCubic>
__global__ void __launch_bounds__(kThreads) table_kernel(InterpShape s, Tables t) {
  const int64_t id = int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  const bool is_y = id < s.axis[1].out;
  const int64_t o = is_y ? id : id - s.axis[1].out;
  const Axis& a = s.axis[is_y ? 1 : 2];
  if (o >= a.out) return;
  const Table& tab = is_y ? t.y : t.x;
  const AaWindow<float> w = aa_window<float>(kCubic, a, o, tab.taps);
  float total = 0.0f;
  for (int64_t k = 0; k < w.count; ++k) total += w.weight(k);
  // torch leaves a window whose weights sum to 0 unnormalised.
  const float norm = total != 0.0f ? 1.0f / total : 1.0f;
  float* dst = tab.weight + o * tab.taps;
  for (int64_t k = 0; k < tab.taps; ++k) dst[k] = k < w.count ? w.weight(k) * norm : 0.0f;
  tab.start[o] = static_cast<int>(w.start);
  tab.count[o] = static_cast<int>(w.count);
}

// Rows of [planes, H] split into (plane, y), in 32 bits when the count allows.
__device__ __forceinline__ void split_plane_row(int64_t r, int64_t rows, int64_t h, int64_t& plane,
                                                int64_t& y) {
  if (rows <= int64_t{0xffffffff}) {
    const uint32_t u = static_cast<uint32_t>(r), uh = static_cast<uint32_t>(h);
    plane = u / uh;
    y = u - static_cast<uint32_t>(plane) * uh;
    return;
  }
  plane = r / h;
  y = r - plane * h;
}

// kFixed: every x window has at most kCached taps (the launch checks the table's stride).
template <class T, bool kFixed>
__global__ void __launch_bounds__(kThreads)
    forward_kernel(InterpShape s, Tables t, const T* __restrict__ input, T* __restrict__ out) {
  const Axis ay = s.axis[1], ax = s.axis[2];
  const int64_t ox = int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  if (ox >= ax.out) return;
  const int xs = t.x.start[ox], xc = t.x.count[ox];
  const float* wx = t.x.weight + ox * t.x.taps;
  float wreg[kCached];
  if constexpr (kFixed) {
#pragma unroll
    for (int k = 0; k < kCached; ++k) wreg[k] = k < xc ? wx[k] : 0.0f;
  }
  const int64_t rows = s.planes * ay.out;
  const int64_t in_plane = ay.in * ax.in;
  for (int64_t r = int64_t{blockIdx.y} * blockDim.y + threadIdx.y; r < rows;
       r += int64_t{gridDim.y} * blockDim.y) {
    int64_t plane, oy;
    split_plane_row(r, rows, ay.out, plane, oy);
    const int ys = t.y.start[oy], yc = t.y.count[oy];
    const float* wy = t.y.weight + oy * t.y.taps;
    const T* base = input + plane * in_plane + int64_t{ys} * ax.in + xs;
    float acc = 0.0f;
    for (int ky = 0; ky < yc; ++ky) {
      const T* row = base + int64_t{ky} * ax.in;
      float sx = 0.0f;
      if constexpr (kFixed) {
#pragma unroll
        for (int k = 0; k < kCached; ++k) {
          if (k < xc) sx += wreg[k] * to_float(row[k]);
        }
      } else {
        for (int k = 0; k < xc; ++k) sx += wx[k] * to_float(row[k]);
      }
      acc += wy[ky] * sx;
    }
    out[r * ax.out + ox] = from_float<T>(acc);
  }
}

// The outputs [first, last) whose windows hold input i: the window starts and ends (start +
// count) are non-decreasing in the output index.
__device__ __forceinline__ void covering(const Table& tab, int64_t outs, int64_t i, int64_t& first,
                                         int64_t& last) {
  int64_t lo = 0, hi = outs;  // first o with end > i
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo) / 2;
    if (int64_t{tab.start[mid]} + tab.count[mid] > i) {
      hi = mid;
    } else {
      lo = mid + 1;
    }
  }
  first = lo;
  hi = outs;  // first o with start > i
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo) / 2;
    if (tab.start[mid] > i) {
      hi = mid;
    } else {
      lo = mid + 1;
    }
  }
  last = lo;
}

template <class T>
__global__ void __launch_bounds__(kThreads)
    backward_kernel(InterpShape s, Tables t, const T* __restrict__ dout, T* __restrict__ dinput) {
  const Axis ay = s.axis[1], ax = s.axis[2];
  const int64_t ix = int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  if (ix >= ax.in) return;
  int64_t x0, x1;
  covering(t.x, ax.out, ix, x0, x1);
  const int64_t rows = s.planes * ay.in;
  const int64_t out_plane = ay.out * ax.out;
  for (int64_t r = int64_t{blockIdx.y} * blockDim.y + threadIdx.y; r < rows;
       r += int64_t{gridDim.y} * blockDim.y) {
    int64_t plane, iy;
    split_plane_row(r, rows, ay.in, plane, iy);
    int64_t y0, y1;
    covering(t.y, ay.out, iy, y0, y1);
    const T* g = dout + plane * out_plane;
    float sum = 0.0f;
    for (int64_t oy = y0; oy < y1; ++oy) {
      const float wy = t.y.weight[oy * t.y.taps + (iy - t.y.start[oy])];
      const T* row = g + oy * ax.out;
      float sx = 0.0f;
      for (int64_t ox = x0; ox < x1; ++ox) {
        sx += t.x.weight[ox * t.x.taps + (ix - t.x.start[ox])] * to_float(row[ox]);
      }
      sum += wy * sx;
    }
    dinput[r * ax.in + ix] = from_float<T>(sum);
  }
}

inline void build_tables(const InterpShape& s, const Tables& t, cudaStream_t stream) {
  const int64_t n = s.axis[1].out + s.axis[2].out;
  const unsigned blocks = static_cast<unsigned>((n + kThreads - 1) / kThreads);
  if (s.rule == kCubic) {
    table_kernel<true><<<blocks, kThreads, 0, stream>>>(s, t);
  } else {
    table_kernel<false><<<blocks, kThreads, 0, stream>>>(s, t);
  }
}

// Blocks of tx columns by ty rows: tx covers the row (up to 128), about two waves of blocks.
inline void shape_grid(int64_t cols, int64_t rows, int multiprocessors, dim3& grid, dim3& block) {
  int tx = 32;
  while (tx < cols && tx < 128) tx *= 2;
  const int ty = kThreads / tx;
  const int64_t gx = (cols + tx - 1) / tx;
  const int64_t wanted = std::max<int64_t>(1, int64_t{multiprocessors} * 16 / gx);
  const int64_t gy = std::min<int64_t>({(rows + ty - 1) / ty, wanted, 65535});
  grid = dim3(static_cast<unsigned>(gx), static_cast<unsigned>(std::max<int64_t>(gy, 1)));
  block = dim3(tx, ty);
}

template <class T>
void forward(const Forward& p, cudaStream_t stream, int multiprocessors) {
  const InterpShape& s = p.s;
  const Tables t = carve(s, p.workspace);
  build_tables(s, t, stream);
  dim3 grid, block;
  shape_grid(s.axis[2].out, s.planes * s.axis[1].out, multiprocessors, grid, block);
  const T* in = static_cast<const T*>(p.input);
  T* out = static_cast<T*>(p.out);
  if (t.x.taps <= kCached) {
    forward_kernel<T, true><<<grid, block, 0, stream>>>(s, t, in, out);
  } else {
    forward_kernel<T, false><<<grid, block, 0, stream>>>(s, t, in, out);
  }
}

template <class T>
void backward(const Backward& p, cudaStream_t stream, int multiprocessors) {
  const InterpShape& s = p.s;
  const Tables t = carve(s, p.workspace);
  build_tables(s, t, stream);
  dim3 grid, block;
  shape_grid(s.axis[2].in, s.planes * s.axis[1].in, multiprocessors, grid, block);
  backward_kernel<T>
      <<<grid, block, 0, stream>>>(s, t, static_cast<const T*>(p.dout), static_cast<T*>(p.dinput));
}

}  // namespace aa

}  // namespace rudnn::interpolation_detail::cuda
