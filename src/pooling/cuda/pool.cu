// Pooling kernels. Forward: one thread per output, consecutive threads on consecutive outputs
// of a plane (coalesced writes, neighbouring windows share cache lines). Backward: one thread
// per input element gathering the outputs whose windows cover it, so every gradient is
// written once, in a fixed order, without atomics. All offsets are 64-bit.
#include <cuda_runtime.h>

#include <algorithm>

#include "core/cuda_check.h"
#include "cuda/launch.cuh"
#include "cuda/types.cuh"
#include "pooling/cuda/launch.h"
#include "pooling/windows.h"

namespace rudnn::pooling_detail::cuda {

using rudnn::cuda::from_float;
using rudnn::cuda::to_float;

namespace {

constexpr int kThreads = 256;

unsigned blocks_for(int64_t items) {
  const int64_t blocks = (items + kThreads - 1) / kThreads;
  return static_cast<unsigned>(std::min<int64_t>(blocks, int64_t{1} << 30));
}

// Splits a flat position of a [planes, a, b, c] grid into its plane and 3-D coordinates. 64-bit
// division costs several times 32-bit, so grids below 2^32 positions (all but the largest)
// divide in 32 bits; the branch is uniform across the launch.
__device__ __forceinline__ void split(int64_t flat, int64_t total, const int64_t extent[3],
                                      int64_t& plane, int64_t pos[3]) {
  if (total <= int64_t{0xffffffff}) {
    uint32_t f = static_cast<uint32_t>(flat);
    const uint32_t e2 = static_cast<uint32_t>(extent[2]), e1 = static_cast<uint32_t>(extent[1]),
                   e0 = static_cast<uint32_t>(extent[0]);
    pos[2] = f % e2;
    f /= e2;
    pos[1] = f % e1;
    f /= e1;
    pos[0] = f % e0;
    plane = f / e0;
    return;
  }
  pos[2] = flat % extent[2];
  flat /= extent[2];
  pos[1] = flat % extent[1];
  flat /= extent[1];
  pos[0] = flat % extent[0];
  plane = flat / extent[0];
}

template <class T>
__global__ void max_forward_kernel(PoolShape s, const T* __restrict__ input, T* __restrict__ out,
                                   int64_t* __restrict__ indices) {
  const int64_t total = s.planes * s.out_plane();
  for (int64_t flat = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; flat < total;
       flat += int64_t{gridDim.x} * blockDim.x) {
    int64_t plane, o[3], start[3], first[3];
    split(flat, total, s.out, plane, o);
    for (int a = 0; a < 3; ++a) {
      start[a] = o[a] * s.stride[a] - s.padding[a];
      first[a] = start[a];
      while (first[a] < 0) first[a] += s.dilation[a];
    }
    const T* in = input + plane * s.in_plane();
    float best = -INFINITY;
    int64_t best_index = (first[0] * s.in[1] + first[1]) * s.in[2] + first[2];
    for (int64_t kz = 0; kz < s.kernel[0]; ++kz) {
      const int64_t z = start[0] + kz * s.dilation[0];
      if (z < 0 || z >= s.in[0]) continue;
      for (int64_t ky = 0; ky < s.kernel[1]; ++ky) {
        const int64_t y = start[1] + ky * s.dilation[1];
        if (y < 0 || y >= s.in[1]) continue;
        const int64_t row = (z * s.in[1] + y) * s.in[2];
        for (int64_t kx = 0; kx < s.kernel[2]; ++kx) {
          const int64_t x = start[2] + kx * s.dilation[2];
          if (x < 0 || x >= s.in[2]) continue;
          const float v = to_float(in[row + x]);
          if (v > best || isnan(v)) {
            best = v;
            best_index = row + x;
          }
        }
      }
    }
    out[flat] = from_float<T>(best);
    indices[flat] = best_index;
  }
}

template <class T>
__global__ void avg_forward_kernel(PoolShape s, const T* __restrict__ input, T* __restrict__ out) {
  const int64_t total = s.planes * s.out_plane();
  for (int64_t flat = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; flat < total;
       flat += int64_t{gridDim.x} * blockDim.x) {
    int64_t plane, o[3], start[3];
    split(flat, total, s.out, plane, o);
    for (int a = 0; a < 3; ++a) start[a] = o[a] * s.stride[a] - s.padding[a];
    const T* in = input + plane * s.in_plane();
    const int64_t z0 = max(start[0], int64_t{0}), z1 = min(start[0] + s.kernel[0], s.in[0]);
    const int64_t y0 = max(start[1], int64_t{0}), y1 = min(start[1] + s.kernel[1], s.in[1]);
    const int64_t x0 = max(start[2], int64_t{0}), x1 = min(start[2] + s.kernel[2], s.in[2]);
    float sum = 0.0f;
    for (int64_t z = z0; z < z1; ++z)
      for (int64_t y = y0; y < y1; ++y) {
        const int64_t row = (z * s.in[1] + y) * s.in[2];
        for (int64_t x = x0; x < x1; ++x) sum += to_float(in[row + x]);
      }
    out[flat] = from_float<T>(sum / static_cast<float>(avg_divisor(s, start)));
  }
}

// kMax: gather dout where the output's index is this element; else the average share.
template <bool kMax, class T>
__global__ void backward_kernel(PoolShape s, const T* __restrict__ dout,
                                const int64_t* __restrict__ indices, T* __restrict__ dinput) {
  const int64_t total = s.planes * s.in_plane();
  for (int64_t flat = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; flat < total;
       flat += int64_t{gridDim.x} * blockDim.x) {
    int64_t plane, pos[3], lo[3], hi[3];
    split(flat, total, s.in, plane, pos);
    for (int a = 0; a < 3; ++a) covering_outputs(s, a, pos[a], lo[a], hi[a]);
    const int64_t self = (pos[0] * s.in[1] + pos[1]) * s.in[2] + pos[2];
    const int64_t out_base = plane * s.out_plane();
    float sum = 0.0f;
    for (int64_t z = lo[0]; z < hi[0]; ++z) {
      if ((pos[0] + s.padding[0] - z * s.stride[0]) % s.dilation[0] != 0) continue;
      for (int64_t y = lo[1]; y < hi[1]; ++y) {
        if ((pos[1] + s.padding[1] - y * s.stride[1]) % s.dilation[1] != 0) continue;
        for (int64_t x = lo[2]; x < hi[2]; ++x) {
          if ((pos[2] + s.padding[2] - x * s.stride[2]) % s.dilation[2] != 0) continue;
          const int64_t o = out_base + (z * s.out[1] + y) * s.out[2] + x;
          if constexpr (kMax) {
            if (indices[o] == self) sum += to_float(dout[o]);
          } else {
            const int64_t start[3] = {z * s.stride[0] - s.padding[0],
                                      y * s.stride[1] - s.padding[1],
                                      x * s.stride[2] - s.padding[2]};
            sum += to_float(dout[o]) / static_cast<float>(avg_divisor(s, start));
          }
        }
      }
    }
    dinput[flat] = from_float<T>(sum);
  }
}

}  // namespace

void max_forward(const MaxForward& p, const Stream& stream) {
  const rudnn::cuda::LaunchContext ctx(stream);
  rudnn::cuda::with_float_type(p.s.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    max_forward_kernel<T><<<blocks_for(p.s.planes * p.s.out_plane()), kThreads, 0, ctx.stream>>>(
        p.s, static_cast<const T*>(p.input), static_cast<T*>(p.out), p.indices);
  });
  detail::check_launch("max_pool forward");
}

void avg_forward(const AvgForward& p, const Stream& stream) {
  const rudnn::cuda::LaunchContext ctx(stream);
  rudnn::cuda::with_float_type(p.s.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    avg_forward_kernel<T><<<blocks_for(p.s.planes * p.s.out_plane()), kThreads, 0, ctx.stream>>>(
        p.s, static_cast<const T*>(p.input), static_cast<T*>(p.out));
  });
  detail::check_launch("avg_pool forward");
}

void max_backward(const MaxBackward& p, const Stream& stream) {
  const rudnn::cuda::LaunchContext ctx(stream);
  rudnn::cuda::with_float_type(p.s.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    backward_kernel<true, T><<<blocks_for(p.s.planes * p.s.in_plane()), kThreads, 0, ctx.stream>>>(
        p.s, static_cast<const T*>(p.dout), p.indices, static_cast<T*>(p.dinput));
  });
  detail::check_launch("max_pool backward");
}

void avg_backward(const AvgBackward& p, const Stream& stream) {
  const rudnn::cuda::LaunchContext ctx(stream);
  rudnn::cuda::with_float_type(p.s.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    backward_kernel<false, T><<<blocks_for(p.s.planes * p.s.in_plane()), kThreads, 0, ctx.stream>>>(
        p.s, static_cast<const T*>(p.dout), nullptr, static_cast<T*>(p.dinput));
  });
  detail::check_launch("avg_pool backward");
}

}  // namespace rudnn::pooling_detail::cuda
