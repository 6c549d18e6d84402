// Interpolation kernels, instantiated once per dtype (interp_{f32,f16,bf16}.cu).
//
// Forward (tap rules): a thread owns 1 or 4 consecutive outputs of a row and computes their
// column taps once, then walks rows (plane, z, y) with a grid stride, computing each row's
// taps once (uniform across the warp: a warp covers one row). Consecutive threads write
// consecutive outputs (16-byte stores for F32 when the row length allows), and the input
// rows a row reads are neighbours of the previous row's, so they come from L1/L2.
// Exact 2x upsampling of 2-D planes (bilinear forward and backward, nearest forward) and
// area 1/2 forward: x2.cuh.
// Antialiased bilinear and bicubic, forward and backward: antialias.cuh.
// Forward (area): one thread per output summing its window.
// Backward (default): one thread per input element gathering, in a fixed order, the outputs
// whose taps reach it (found by binary search on the forward's own index arithmetic): each
// gradient element is written once, deterministically, without atomics. Backward (F32,
// deterministic = false): one thread per output scattering FP32 atomic adds.
// All offsets are 64-bit; per-axis indices fit 32 bits (sizes < 2^31, validated).
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "core/cuda_check.h"
#include "cuda/launch.cuh"
#include "cuda/types.cuh"
#include "cuda/vec.cuh"
#include "interpolation/cuda/antialias.cuh"
#include "interpolation/cuda/launch.h"
#include "interpolation/cuda/x2.cuh"
#include "interpolation/taps.h"

namespace rudnn::interpolation_detail::cuda {

using rudnn::cuda::from_float;
using rudnn::cuda::to_float;

constexpr int kThreads = 256;

inline unsigned blocks_for(int64_t items) {
  const int64_t blocks = (items + kThreads - 1) / kThreads;
  return static_cast<unsigned>(std::min<int64_t>(std::max<int64_t>(blocks, 1), int64_t{1} << 30));
}

// Splits a flat position of a [planes, e0, e1, e2] grid. Grids below 2^32 positions divide
// in 32 bits (several times cheaper); the branch is uniform across the launch.
__device__ __forceinline__ void split4(int64_t flat, int64_t total, int64_t e0, int64_t e1,
                                       int64_t e2, int64_t& plane, int64_t pos[3]) {
  if (total <= int64_t{0xffffffff}) {
    uint32_t f = static_cast<uint32_t>(flat);
    const uint32_t u2 = static_cast<uint32_t>(e2), u1 = static_cast<uint32_t>(e1),
                   u0 = static_cast<uint32_t>(e0);
    pos[2] = f % u2;
    f /= u2;
    pos[1] = f % u1;
    f /= u1;
    pos[0] = f % u0;
    plane = f / u0;
    return;
  }
  pos[2] = flat % e2;
  flat /= e2;
  pos[1] = flat % e1;
  flat /= e1;
  pos[0] = flat % e0;
  plane = flat / e0;
}

// Rows of [planes, Do, Ho] split into (plane, z, y).
__device__ __forceinline__ void split_row(int64_t r, int64_t rows, int64_t d, int64_t h,
                                          int64_t& plane, int64_t& z, int64_t& y) {
  if (rows <= int64_t{0xffffffff}) {
    uint32_t f = static_cast<uint32_t>(r);
    const uint32_t uh = static_cast<uint32_t>(h), ud = static_cast<uint32_t>(d);
    y = f % uh;
    f /= uh;
    z = f % ud;
    plane = f / ud;
    return;
  }
  y = r % h;
  r /= h;
  z = r % d;
  plane = r / d;
}

// The rule of axis a (0 = z) of a kDims-dimensional problem: the leading axes it lacks are
// identities (compile-time, so their tap loops have one iteration).
template <int kRule, int kDims, int kAxis>
constexpr Rule kAxisRule = kAxis < 3 - kDims ? kIdentity : static_cast<Rule>(kRule);

template <class T, int kRule, int kDims, int kVec>
__global__ void __launch_bounds__(kThreads)
    forward_taps_kernel(InterpShape s, const T* __restrict__ input, T* __restrict__ out) {
  constexpr Rule rz = kAxisRule<kRule, kDims, 0>, ry = kAxisRule<kRule, kDims, 1>,
                 rx = static_cast<Rule>(kRule);
  constexpr int Kz = taps_of(rz), Ky = taps_of(ry), Kx = taps_of(rx);
  const Axis az = s.axis[0], ay = s.axis[1], ax = s.axis[2];
  const int64_t x0 = (int64_t{blockIdx.x} * blockDim.x + threadIdx.x) * kVec;
  if (x0 >= ax.out) return;

  int xi[kVec][Kx];
  float xw[kVec][Kx];
#pragma unroll
  for (int v = 0; v < kVec; ++v) {
    int64_t index[4];
    float weight[4];
    axis_taps<float>(rx, ax, s.align_corners, min(x0 + v, ax.out - 1), index, weight);
#pragma unroll
    for (int k = 0; k < Kx; ++k) {
      xi[v][k] = static_cast<int>(index[k]);
      xw[v][k] = weight[k];
    }
  }

  const int64_t rows = s.planes * az.out * ay.out;
  const int64_t in_plane = s.in_plane();
  for (int64_t r = int64_t{blockIdx.y} * blockDim.y + threadIdx.y; r < rows;
       r += int64_t{gridDim.y} * blockDim.y) {
    int64_t plane, oz, oy;
    split_row(r, rows, az.out, ay.out, plane, oz, oy);
    int64_t zi[4], yi[4];
    float zw[4], yw[4];
    axis_taps<float>(rz, az, s.align_corners, oz, zi, zw);
    axis_taps<float>(ry, ay, s.align_corners, oy, yi, yw);
    const T* base = input + plane * in_plane;
    float acc[kVec];
#pragma unroll
    for (int kz = 0; kz < Kz; ++kz) {
#pragma unroll
      for (int ky = 0; ky < Ky; ++ky) {
        const T* row = base + (zi[kz] * ay.in + yi[ky]) * ax.in;
        const float wzy = zw[kz] * yw[ky];
#pragma unroll
        for (int v = 0; v < kVec; ++v) {
          // Starting from the first product keeps a lone tap exact (a copy keeps -0).
          float sx = xw[v][0] * to_float(row[xi[v][0]]);
#pragma unroll
          for (int kx = 1; kx < Kx; ++kx) sx += xw[v][kx] * to_float(row[xi[v][kx]]);
          acc[v] = (kz == 0 && ky == 0) ? wzy * sx : acc[v] + wzy * sx;
        }
      }
    }
    T* dst = out + r * ax.out + x0;
    if constexpr (kVec > 1) {
      rudnn::cuda::store_pack<T, kVec>(dst, acc);  // rows are whole packs (launch checks)
    } else {
      dst[0] = from_float<T>(acc[0]);
    }
  }
}

template <class T>
__global__ void __launch_bounds__(kThreads)
    area_forward_kernel(InterpShape s, const T* __restrict__ input, T* __restrict__ out) {
  const Axis* ax = s.axis;
  const int64_t total = s.planes * s.out_plane();
  for (int64_t flat = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; flat < total;
       flat += int64_t{gridDim.x} * blockDim.x) {
    int64_t plane, o[3], start[3], end[3];
    split4(flat, total, ax[0].out, ax[1].out, ax[2].out, plane, o);
    for (int a = 0; a < 3; ++a) area_window(ax[a], o[a], start[a], end[a]);
    const T* in = input + plane * s.in_plane();
    float sum = 0.0f;
    for (int64_t z = start[0]; z < end[0]; ++z)
      for (int64_t y = start[1]; y < end[1]; ++y) {
        const T* row = in + (z * ax[1].in + y) * ax[2].in;
        for (int64_t x = start[2]; x < end[2]; ++x) sum += to_float(row[x]);
      }
    const float count =
        static_cast<float>((end[0] - start[0]) * (end[1] - start[1]) * (end[2] - start[2]));
    out[flat] = from_float<T>(sum / count);
  }
}

template <class T, int kRule, int kDims>
__global__ void __launch_bounds__(kThreads)
    backward_gather_kernel(InterpShape s, const T* __restrict__ dout, T* __restrict__ dinput) {
  constexpr Rule rz = kAxisRule<kRule, kDims, 0>, ry = kAxisRule<kRule, kDims, 1>,
                 rx = static_cast<Rule>(kRule);
  const Axis az = s.axis[0], ay = s.axis[1], ax = s.axis[2];
  const bool ac = s.align_corners;
  const int64_t total = s.planes * s.in_plane();
  for (int64_t flat = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; flat < total;
       flat += int64_t{gridDim.x} * blockDim.x) {
    int64_t plane, pos[3];
    split4(flat, total, az.in, ay.in, ax.in, plane, pos);
    int64_t z0, z1, y0, y1, x0, x1;
    covering_outputs(rz, az, ac, pos[0], z0, z1);
    covering_outputs(ry, ay, ac, pos[1], y0, y1);
    covering_outputs(rx, ax, ac, pos[2], x0, x1);
    const T* g = dout + plane * s.out_plane();
    float sum = 0.0f;
    for (int64_t oz = z0; oz < z1; ++oz) {
      const float wz = weight_to<float>(rz, az, ac, oz, pos[0]);
      for (int64_t oy = y0; oy < y1; ++oy) {
        const float wzy = wz * weight_to<float>(ry, ay, ac, oy, pos[1]);
        const T* row = g + (oz * ay.out + oy) * ax.out;
        for (int64_t ox = x0; ox < x1; ++ox)
          sum += wzy * weight_to<float>(rx, ax, ac, ox, pos[2]) * to_float(row[ox]);
      }
    }
    dinput[flat] = from_float<T>(sum);
  }
}

template <int kRule, int kDims>
__global__ void __launch_bounds__(kThreads)
    backward_scatter_kernel(InterpShape s, const float* __restrict__ dout, float* dinput) {
  constexpr Rule rz = kAxisRule<kRule, kDims, 0>, ry = kAxisRule<kRule, kDims, 1>,
                 rx = static_cast<Rule>(kRule);
  constexpr int Kz = taps_of(rz), Ky = taps_of(ry), Kx = taps_of(rx);
  const Axis az = s.axis[0], ay = s.axis[1], ax = s.axis[2];
  const int64_t total = s.planes * s.out_plane();
  for (int64_t flat = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; flat < total;
       flat += int64_t{gridDim.x} * blockDim.x) {
    int64_t plane, o[3];
    split4(flat, total, az.out, ay.out, ax.out, plane, o);
    int64_t zi[4], yi[4], xi[4];
    float zw[4], yw[4], xw[4];
    axis_taps<float>(rz, az, s.align_corners, o[0], zi, zw);
    axis_taps<float>(ry, ay, s.align_corners, o[1], yi, yw);
    axis_taps<float>(rx, ax, s.align_corners, o[2], xi, xw);
    const float g = dout[flat];
    float* base = dinput + plane * s.in_plane();
#pragma unroll
    for (int kz = 0; kz < Kz; ++kz)
#pragma unroll
      for (int ky = 0; ky < Ky; ++ky) {
        float* row = base + (zi[kz] * ay.in + yi[ky]) * ax.in;
        const float wzy = zw[kz] * yw[ky] * g;
#pragma unroll
        for (int kx = 0; kx < Kx; ++kx) atomicAdd(row + xi[kx], wzy * xw[kx]);
      }
  }
}

template <class T, int kRule, int kDims>
void launch_forward_taps(const Forward& p, cudaStream_t stream, int multiprocessors) {
  const InterpShape& s = p.s;
  const int64_t cols = s.axis[2].out;
  const bool vec = cols % 4 == 0 && reinterpret_cast<uintptr_t>(p.out) % (4 * sizeof(T)) == 0;
  const int64_t groups = vec ? cols / 4 : cols;
  int tx = 32;
  while (tx < groups && tx < 128) tx *= 2;
  const int ty = kThreads / tx;
  const int64_t gx = (groups + tx - 1) / tx;
  const int64_t rows = s.planes * s.axis[0].out * s.axis[1].out;
  // Two waves of resident blocks; each thread then walks rows reusing its column taps.
  const int64_t wanted = std::max<int64_t>(1, int64_t{multiprocessors} * 16 / gx);
  const int64_t gy = std::min<int64_t>({(rows + ty - 1) / ty, wanted, 65535});
  const dim3 grid(static_cast<unsigned>(gx), static_cast<unsigned>(std::max<int64_t>(gy, 1)));
  const dim3 block(tx, ty);
  const T* in = static_cast<const T*>(p.input);
  T* out = static_cast<T*>(p.out);
  if (vec) {
    forward_taps_kernel<T, kRule, kDims, 4><<<grid, block, 0, stream>>>(s, in, out);
  } else {
    forward_taps_kernel<T, kRule, kDims, 1><<<grid, block, 0, stream>>>(s, in, out);
  }
}

template <class T>
void forward_typed(const Forward& p, cudaStream_t stream, int multiprocessors) {
  const InterpShape& s = p.s;
  if (s.antialias) {
    aa::forward<T>(p, stream, multiprocessors);
    detail::check_launch("interpolate forward (antialias)");
    return;
  }
  if (x2::try_forward<T>(p, stream)) {
    detail::check_launch("interpolate forward (2x)");
    return;
  }
  switch (s.rule) {
    case kIdentity:
      launch_forward_taps<T, kIdentity, 3>(p, stream, multiprocessors);
      break;
    case kNearest:  // identity leading axes (in = out = 1) pick index 0 under this rule too
      launch_forward_taps<T, kNearest, 3>(p, stream, multiprocessors);
      break;
    case kNearestExact:
      launch_forward_taps<T, kNearestExact, 3>(p, stream, multiprocessors);
      break;
    case kLinear:
      if (s.dims == 1) launch_forward_taps<T, kLinear, 1>(p, stream, multiprocessors);
      if (s.dims == 2) launch_forward_taps<T, kLinear, 2>(p, stream, multiprocessors);
      if (s.dims == 3) launch_forward_taps<T, kLinear, 3>(p, stream, multiprocessors);
      break;
    case kCubic:  // 2-D only (validated)
      launch_forward_taps<T, kCubic, 2>(p, stream, multiprocessors);
      break;
    case kArea:  // identity axes have in = out = 1: their window is [0, 1)
      area_forward_kernel<T><<<blocks_for(s.planes * s.out_plane()), kThreads, 0, stream>>>(
          s, static_cast<const T*>(p.input), static_cast<T*>(p.out));
      break;
  }
  detail::check_launch("interpolate forward");
}

template <class T, int kRule, int kDims>
void launch_gather(const Backward& p, cudaStream_t stream) {
  backward_gather_kernel<T, kRule, kDims>
      <<<blocks_for(p.s.planes * p.s.in_plane()), kThreads, 0, stream>>>(
          p.s, static_cast<const T*>(p.dout), static_cast<T*>(p.dinput));
}

template <int kRule, int kDims>
void launch_scatter(const Backward& p, cudaStream_t stream) {
  detail::check_cuda(
      cudaMemsetAsync(p.dinput, 0, static_cast<size_t>(p.s.planes * p.s.in_plane()) * 4, stream),
      "cudaMemsetAsync");
  backward_scatter_kernel<kRule, kDims>
      <<<blocks_for(p.s.planes * p.s.out_plane()), kThreads, 0, stream>>>(
          p.s, static_cast<const float*>(p.dout), static_cast<float*>(p.dinput));
}

template <class T>
void backward_typed(const Backward& p, cudaStream_t stream, int multiprocessors) {
  const InterpShape& s = p.s;
  if (s.antialias) {
    aa::backward<T>(p, stream, multiprocessors);
    detail::check_launch("interpolate backward (antialias)");
    return;
  }
  if (x2::try_backward<T>(p, stream)) {
    detail::check_launch("interpolate backward (2x)");
    return;
  }
  if constexpr (std::is_same_v<T, float>) {
    if (!p.deterministic && s.rule != kArea && s.rule != kIdentity) {
      switch (s.rule) {
        case kNearest:
          launch_scatter<kNearest, 3>(p, stream);
          break;
        case kNearestExact:
          launch_scatter<kNearestExact, 3>(p, stream);
          break;
        case kLinear:
          if (s.dims == 1) launch_scatter<kLinear, 1>(p, stream);
          if (s.dims == 2) launch_scatter<kLinear, 2>(p, stream);
          if (s.dims == 3) launch_scatter<kLinear, 3>(p, stream);
          break;
        default:  // kCubic
          launch_scatter<kCubic, 2>(p, stream);
          break;
      }
      detail::check_launch("interpolate backward (atomic)");
      return;
    }
  }
  switch (s.rule) {
    case kIdentity:
      launch_gather<T, kIdentity, 3>(p, stream);
      break;
    case kNearest:
      launch_gather<T, kNearest, 3>(p, stream);
      break;
    case kNearestExact:
      launch_gather<T, kNearestExact, 3>(p, stream);
      break;
    case kLinear:
      if (s.dims == 1) launch_gather<T, kLinear, 1>(p, stream);
      if (s.dims == 2) launch_gather<T, kLinear, 2>(p, stream);
      if (s.dims == 3) launch_gather<T, kLinear, 3>(p, stream);
      break;
    case kCubic:
      launch_gather<T, kCubic, 2>(p, stream);
      break;
    case kArea:
      launch_gather<T, kArea, 3>(p, stream);
      break;
  }
  detail::check_launch("interpolate backward");
}

}  // namespace rudnn::interpolation_detail::cuda
