// grid_sample kernels: one thread per output location. The thread reads its grid entry
// once, turns it into at most 16 (offset, weight) pairs within a channel plane (taps.h), then
// walks the channels, so the grid and the tap arithmetic are paid once per location and
// consecutive threads write consecutive outputs of each channel.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <type_traits>

#include "core/cuda_check.h"
#include "cuda/launch.cuh"
#include "cuda/types.cuh"
#include "grid_sample/cuda/launch.h"
#include "grid_sample/taps.h"

namespace rudnn::grid_sample_detail::cuda {

using rudnn::cuda::from_float;
using rudnn::cuda::to_float;

constexpr int kThreads = 256;

// The taps of one location: offsets in a channel plane and weights; a tap outside the input
// has weight 0, derivative 0, offset 0 (a harmless read) and its bit clear in `inside`.
template <int kMode, int kDims>
struct LocationTaps {
  static constexpr int kPerAxis = kMode == kBicubic ? 4 : (kMode == kNearest ? 1 : 2);
  static constexpr int kCount = kDims == 3 ? kPerAxis * kPerAxis * kPerAxis : kPerAxis * kPerAxis;
  int64_t offset[kCount];
  float weight[kCount];
  float dx[kCount], dy[kCount], dz[kCount];
  unsigned inside = 0;
};

template <int kMode, int kDims, class T>
__device__ __forceinline__ LocationTaps<kMode, kDims> location_taps(const SampleShape& s,
                                                                    const T* grid, int64_t location,
                                                                    bool with_derivatives) {
  using L = LocationTaps<kMode, kDims>;
  const T* g = grid + location * kDims;
  const Taps<float> tx = axis_taps(to_float(g[0]), s.in_w, kMode, s.padding, s.align_corners);
  const Taps<float> ty = axis_taps(to_float(g[1]), s.in_h, kMode, s.padding, s.align_corners);
  Taps<float> tz;
  if constexpr (kDims == 3) {
    tz = axis_taps(to_float(g[2]), s.in_d, kMode, s.padding, s.align_corners);
  } else {
    tz.index[0] = 0;
    tz.weight[0] = 1.0f;
    tz.dweight[0] = 0.0f;
  }
  L t;
  constexpr int kZ = kDims == 3 ? L::kPerAxis : 1;
#pragma unroll
  for (int k = 0; k < kZ; ++k) {
#pragma unroll
    for (int j = 0; j < L::kPerAxis; ++j) {
#pragma unroll
      for (int i = 0; i < L::kPerAxis; ++i) {
        const int at = (k * L::kPerAxis + j) * L::kPerAxis + i;
        const bool inside = tx.index[i] >= 0 && ty.index[j] >= 0 && tz.index[k] >= 0;
        const float wx = tx.weight[i], wy = ty.weight[j], wz = tz.weight[k];
        t.offset[at] = inside ? (tz.index[k] * s.in_h + ty.index[j]) * s.in_w + tx.index[i] : 0;
        t.weight[at] = inside ? wx * wy * wz : 0.0f;
        if (with_derivatives) {
          t.dx[at] = inside ? tx.dweight[i] * wy * wz : 0.0f;
          t.dy[at] = inside ? wx * ty.dweight[j] * wz : 0.0f;
          t.dz[at] = inside ? wx * wy * tz.dweight[k] : 0.0f;
        }
        if (inside) t.inside |= 1u << at;
      }
    }
  }
  return t;
}

template <class T, int kMode, int kDims>
__global__ void __launch_bounds__(kThreads)
    sample_forward_kernel(SampleShape s, const T* __restrict__ input, const T* __restrict__ grid,
                          T* __restrict__ out) {
  const int64_t location = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (location >= s.locations()) return;
  const int64_t out_spatial = s.out_spatial(), in_spatial = s.in_spatial();
  const int64_t b = location / out_spatial, o = location - b * out_spatial;
  const auto t = location_taps<kMode, kDims>(s, grid, location, false);
  const T* plane = input + b * s.c * in_spatial;
  T* dst = out + b * s.c * out_spatial + o;
  // Unrolled so that several channels' gathers are in flight at once.
#pragma unroll 4
  for (int64_t ch = 0; ch < s.c; ++ch) {
    float acc = 0.0f;
#pragma unroll
    for (int k = 0; k < t.kCount; ++k) {
      // Outside taps are skipped, not weighted by 0: an inf or NaN at offset 0 must not leak.
      if (t.inside & (1u << k)) acc += t.weight[k] * to_float(__ldg(plane + t.offset[k]));
    }
    *dst = from_float<T>(acc);
    plane += in_spatial;
    dst += out_spatial;
  }
}

// dgrid per location (no atomics); dinput scattered with FP32 atomics into `dinput_f32`.
template <class T, int kMode, int kDims>
__global__ void __launch_bounds__(kThreads)
    sample_backward_kernel(SampleShape s, const T* __restrict__ dout, const T* __restrict__ input,
                           const T* __restrict__ grid, float* __restrict__ dinput_f32,
                           T* __restrict__ dgrid) {
  const int64_t location = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (location >= s.locations()) return;
  const int64_t out_spatial = s.out_spatial(), in_spatial = s.in_spatial();
  const int64_t b = location / out_spatial, o = location - b * out_spatial;
  const bool want_dgrid = dgrid != nullptr && kMode != kNearest;
  const auto t = location_taps<kMode, kDims>(s, grid, location, want_dgrid);
  const int64_t first_plane = b * s.c * in_spatial;
  const T* g = dout + b * s.c * out_spatial + o;
  float gx = 0.0f, gy = 0.0f, gz = 0.0f;
  for (int64_t ch = 0; ch < s.c; ++ch) {
    const float go = to_float(__ldg(g));
    const int64_t plane = first_plane + ch * in_spatial;
    if (dinput_f32 != nullptr && go != 0.0f) {
#pragma unroll
      for (int k = 0; k < t.kCount; ++k) {
        if (t.inside & (1u << k)) atomicAdd(dinput_f32 + plane + t.offset[k], t.weight[k] * go);
      }
    }
    if (want_dgrid) {
#pragma unroll
      for (int k = 0; k < t.kCount; ++k) {
        if (!(t.inside & (1u << k))) continue;
        const float v = to_float(__ldg(input + plane + t.offset[k])) * go;
        gx += v * t.dx[k];
        gy += v * t.dy[k];
        if constexpr (kDims == 3) gz += v * t.dz[k];
      }
    }
    g += out_spatial;
  }
  if (dgrid != nullptr) {
    T* dst = dgrid + location * kDims;
    dst[0] = from_float<T>(gx);
    dst[1] = from_float<T>(gy);
    if constexpr (kDims == 3) dst[2] = from_float<T>(gz);
  }
}

template <class T>
__global__ void __launch_bounds__(kThreads)
    round_accumulator_kernel(const float* __restrict__ from, T* __restrict__ to, int64_t count) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kThreads;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; i < count;
       i += stride) {
    to[i] = from_float<T>(from[i]);
  }
}

inline unsigned blocks_for(int64_t items) {
  return static_cast<unsigned>((items + kThreads - 1) / kThreads);
}

// Calls f(mode constant, dims constant) for the problem's mode and rank.
template <class F>
void with_mode(const SampleShape& s, F&& f) {
  using M = std::integral_constant<int, kBilinear>;
  using N = std::integral_constant<int, kNearest>;
  using B = std::integral_constant<int, kBicubic>;
  using D2 = std::integral_constant<int, 2>;
  using D3 = std::integral_constant<int, 3>;
  if (s.dims == 2) {
    if (s.mode == kBilinear) return f(M{}, D2{});
    if (s.mode == kNearest) return f(N{}, D2{});
    return f(B{}, D2{});
  }
  if (s.mode == kNearest) return f(N{}, D3{});
  return f(M{}, D3{});  // bicubic 3-D is refused by the entry point
}

template <class T>
void sample_forward_typed(const SampleForward& p, cudaStream_t stream) {
  const SampleShape& s = p.s;
  if (s.locations() == 0) return;
  with_mode(s, [&](auto mode, auto dims) {
    sample_forward_kernel<T, decltype(mode)::value, decltype(dims)::value>
        <<<blocks_for(s.locations()), kThreads, 0, stream>>>(s, static_cast<const T*>(p.input),
                                                             static_cast<const T*>(p.grid),
                                                             static_cast<T*>(p.out));
  });
  detail::check_launch("grid_sample forward");
}

template <class T>
void sample_backward_typed(const SampleBackward& p, cudaStream_t stream) {
  const SampleShape& s = p.s;
  const int64_t input_count = s.n * s.c * s.in_spatial();
  float* dinput_f32 = nullptr;
  if (p.dinput != nullptr) {
    dinput_f32 =
        p.dinput_accumulator != nullptr ? p.dinput_accumulator : static_cast<float*>(p.dinput);
    detail::check_cuda(cudaMemsetAsync(dinput_f32, 0, input_count * sizeof(float), stream),
                       "cudaMemsetAsync");
  }
  if (s.locations() > 0) {
    with_mode(s, [&](auto mode, auto dims) {
      sample_backward_kernel<T, decltype(mode)::value, decltype(dims)::value>
          <<<blocks_for(s.locations()), kThreads, 0, stream>>>(
              s, static_cast<const T*>(p.dout), static_cast<const T*>(p.input),
              static_cast<const T*>(p.grid), dinput_f32, static_cast<T*>(p.dgrid));
    });
    detail::check_launch("grid_sample backward");
  }
  if (p.dinput != nullptr && p.dinput_accumulator != nullptr && input_count > 0) {
    const int64_t blocks = std::min<int64_t>(blocks_for(input_count), 65536);
    round_accumulator_kernel<T><<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(
        p.dinput_accumulator, static_cast<T*>(p.dinput), input_count);
    detail::check_launch("grid_sample backward (rounding dinput)");
  }
}

}  // namespace rudnn::grid_sample_detail::cuda
