// grid_sample kernels: one thread per output location. The thread reads its grid entry
// once, turns it into at most 16 (offset, weight) pairs within a channel plane (taps.h), then
// walks the channels, so the grid and the tap arithmetic are paid once per location and
// consecutive threads write consecutive outputs of each channel.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
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
  // The source coordinate is worked out in FP64, as the reference does, and only the weights
  // are rounded to FP32. In FP32 a pixel coordinate near 32768 is only known to 2^-8, which
  // put the forward off the reference by 1e-3 at W = 40000; and a coordinate one FP32 ulp
  // below an integer floors to the other pixel, where the grid gradient jumps (the bilinear
  // slope is v[i0 + 1] - v[i0]): a few such locations put the grid gradient of the
  // [32, 64, 128, 128] bench 3.6e-3 off. In FP64 the floors are the reference's own.
  const auto axis = [&](T coord, int64_t size) {
    return axis_taps(static_cast<double>(to_float(coord)), size, kMode, s.padding, s.align_corners);
  };
  const Taps<double> tx = axis(g[0], s.in_w);
  const Taps<double> ty = axis(g[1], s.in_h);
  Taps<double> tz;
  if constexpr (kDims == 3) {
    tz = axis(g[2], s.in_d);
  } else {
    tz.index[0] = 0;
    tz.weight[0] = 1.0;
    tz.dweight[0] = 0.0;
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
        const float wx = static_cast<float>(tx.weight[i]), wy = static_cast<float>(ty.weight[j]),
                    wz = static_cast<float>(tz.weight[k]);
        t.offset[at] = inside ? (tz.index[k] * s.in_h + ty.index[j]) * s.in_w + tx.index[i] : 0;
        t.weight[at] = inside ? wx * wy * wz : 0.0f;
        if (with_derivatives) {
          t.dx[at] = inside ? static_cast<float>(tx.dweight[i]) * wy * wz : 0.0f;
          t.dy[at] = inside ? wx * static_cast<float>(ty.dweight[j]) * wz : 0.0f;
          t.dz[at] = inside ? wx * wy * static_cast<float>(tz.dweight[k]) : 0.0f;
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

// ---- Deterministic input gradient ---------------------------------------------------------
// Every (location, tap) pair is an entry e = location * kCount + tap: its key is the input
// cell it feeds (batch * in_spatial + offset; outside taps get the sentinel n * in_spatial,
// which sorts last), its value e. A stable radix sort by key (deterministic.cu) groups the
// entries of each cell in increasing e; each cell's segment [begin, end) of the sorted order
// is then summed in that order for every channel: no atomics, the same bits every run.

// Where the pieces live in SampleBackward::scratch (256-byte aligned).
struct DeterministicLayout {
  int64_t entries = 0;  // locations * taps per location
  int64_t cells = 0;    // n * in_spatial: the sentinel key
  int end_bit = 1;      // key bits the sort looks at
  int64_t keys_in = 0, keys_out = 0, ids_in = 0, ids_out = 0, weights = 0, begin = 0, end = 0;
  int64_t sort_temp = 0;
  size_t sort_temp_bytes = 0;
  int64_t bytes = 0;
};
DeterministicLayout deterministic_layout(const SampleShape& s);
// Sorts (keys_in, ids_in) into (keys_out, ids_out) on `stream`.
void sort_contributions(const DeterministicLayout& l, char* scratch, cudaStream_t stream);
// begin/end of each cell's run of keys in keys_out (cells with no entry keep 0 / 0).
void mark_segments(const DeterministicLayout& l, char* scratch, cudaStream_t stream);

template <int kMode, int kDims>
constexpr int taps_per_location() {
  return LocationTaps<kMode, kDims>::kCount;
}

template <class T, int kMode, int kDims>
__global__ void __launch_bounds__(kThreads)
    contributions_kernel(SampleShape s, const T* __restrict__ grid, uint64_t* __restrict__ keys,
                         uint64_t* __restrict__ ids, float* __restrict__ weights) {
  constexpr int kCount = taps_per_location<kMode, kDims>();
  const int64_t location = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (location >= s.locations()) return;
  const int64_t in_spatial = s.in_spatial();
  const int64_t b = location / s.out_spatial();
  const auto t = location_taps<kMode, kDims>(s, grid, location, false);
  const uint64_t sentinel = static_cast<uint64_t>(s.n * in_spatial);
#pragma unroll
  for (int k = 0; k < kCount; ++k) {
    const int64_t e = location * kCount + k;
    keys[e] =
        (t.inside & (1u << k)) ? static_cast<uint64_t>(b * in_spatial + t.offset[k]) : sentinel;
    ids[e] = static_cast<uint64_t>(e);
    weights[e] = t.weight[k];
  }
}

// Each thread owns one input cell and kGatherChannels channels at a time, so that an entry's
// id and weight are read once for those channels; consecutive threads write consecutive cells.
constexpr int kGatherChannels = 8;

template <class T, int kCount>
__global__ void __launch_bounds__(kThreads)
    gather_kernel(SampleShape s, const T* __restrict__ dout, const uint64_t* __restrict__ ids,
                  const float* __restrict__ weights, const int64_t* __restrict__ begin,
                  const int64_t* __restrict__ end, T* __restrict__ dinput) {
  const int64_t in_spatial = s.in_spatial(), out_spatial = s.out_spatial();
  const int64_t cells = s.n * in_spatial;
  for (int64_t at = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; at < cells;
       at += static_cast<int64_t>(gridDim.x) * kThreads) {
    const int64_t b = at / in_spatial, cell = at - b * in_spatial;
    const int64_t lo = begin[at], hi = end[at];
    for (int64_t c0 = static_cast<int64_t>(blockIdx.y) * kGatherChannels; c0 < s.c;
         c0 += static_cast<int64_t>(gridDim.y) * kGatherChannels) {
      const int64_t count = s.c - c0 < kGatherChannels ? s.c - c0 : kGatherChannels;
      const T* src = dout + (b * s.c + c0) * out_spatial;
      const int64_t first_location = b * out_spatial;
      float acc[kGatherChannels];
#pragma unroll
      for (int j = 0; j < kGatherChannels; ++j) acc[j] = 0.0f;
      for (int64_t i = lo; i < hi; ++i) {
        const uint64_t e = ids[i];
        const float w = weights[e];
        const int64_t o = static_cast<int64_t>(e / kCount) - first_location;
#pragma unroll
        for (int j = 0; j < kGatherChannels; ++j) {
          if (j < count) acc[j] += w * to_float(src[j * out_spatial + o]);
        }
      }
      T* dst = dinput + (b * s.c + c0) * in_spatial + cell;
#pragma unroll
      for (int j = 0; j < kGatherChannels; ++j) {
        if (j < count) dst[j * in_spatial] = from_float<T>(acc[j]);
      }
    }
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
void deterministic_dinput(const SampleBackward& p, cudaStream_t stream) {
  const SampleShape& s = p.s;
  const DeterministicLayout l = deterministic_layout(s);
  char* base = static_cast<char*>(p.scratch);
  auto at = [&](int64_t offset) { return base + offset; };
  with_mode(s, [&](auto mode, auto dims) {
    constexpr int kMode = decltype(mode)::value, kDims = decltype(dims)::value;
    if (l.entries > 0) {
      contributions_kernel<T, kMode, kDims><<<blocks_for(s.locations()), kThreads, 0, stream>>>(
          s, static_cast<const T*>(p.grid), reinterpret_cast<uint64_t*>(at(l.keys_in)),
          reinterpret_cast<uint64_t*>(at(l.ids_in)), reinterpret_cast<float*>(at(l.weights)));
      detail::check_launch("grid_sample backward (deterministic: contributions)");
      sort_contributions(l, base, stream);
    }
    mark_segments(l, base, stream);
    const int64_t cell_blocks = std::min<int64_t>(blocks_for(l.cells), 1 << 20);
    const int64_t channel_blocks =
        std::min<int64_t>((s.c + kGatherChannels - 1) / kGatherChannels, 65535);
    gather_kernel<T, taps_per_location<kMode, kDims>()>
        <<<dim3(static_cast<unsigned>(cell_blocks), static_cast<unsigned>(channel_blocks)),
           kThreads, 0, stream>>>(
            s, static_cast<const T*>(p.dout), reinterpret_cast<const uint64_t*>(at(l.ids_out)),
            reinterpret_cast<const float*>(at(l.weights)),
            reinterpret_cast<const int64_t*>(at(l.begin)),
            reinterpret_cast<const int64_t*>(at(l.end)), static_cast<T*>(p.dinput));
    detail::check_launch("grid_sample backward (deterministic: gather)");
  });
}

template <class T>
void sample_backward_typed(const SampleBackward& p, cudaStream_t stream) {
  const SampleShape& s = p.s;
  const int64_t input_count = s.n * s.c * s.in_spatial();
  if (p.deterministic && p.dinput != nullptr && input_count > 0) {
    deterministic_dinput<T>(p, stream);
    if (p.dgrid == nullptr || s.locations() == 0) return;
    with_mode(s, [&](auto mode, auto dims) {
      sample_backward_kernel<T, decltype(mode)::value, decltype(dims)::value>
          <<<blocks_for(s.locations()), kThreads, 0, stream>>>(
              s, static_cast<const T*>(p.dout), static_cast<const T*>(p.input),
              static_cast<const T*>(p.grid), nullptr, static_cast<T*>(p.dgrid));
    });
    detail::check_launch("grid_sample backward");
    return;
  }
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
