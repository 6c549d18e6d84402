// General pooling kernels, every op, rank and layout. Forward: one thread per output, threads
// in memory order of the output (for channels-last, consecutive threads take consecutive
// channels, so every window tap is a coalesced read of C-contiguous data). Backward: one
// thread per input element gathering the outputs whose windows cover it, so every gradient is
// written once, in a fixed order, without atomics. All offsets are 64-bit. The common 2-D
// NCHW bench shapes go to the strip kernels of pool_strip.cu first, channels-last max and
// average to pool_nhwc.cu, global pooling to a block-per-plane reduction.
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

enum class Op { max, avg, lp };

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

// The plane and coordinates of the element at memory position `flat` of a tensor whose
// spatial extent is `extent`, in the problem's layout.
__device__ __forceinline__ void locate(const PoolShape& s, int64_t flat, int64_t total,
                                       const int64_t extent[3], int64_t& plane, int64_t pos[3]) {
  if (!s.channels_last) {
    split(flat, total, extent, plane, pos);
    return;
  }
  const int64_t rest = flat / s.channels, c = flat - rest * s.channels;
  int64_t n;
  split(rest, total / s.channels, extent, n, pos);
  plane = n * s.channels + c;
}

template <Op kOp, class T>
__global__ void forward_kernel(PoolShape s, const T* __restrict__ input, T* __restrict__ out,
                               int64_t* __restrict__ indices) {
  const int64_t total = s.planes * s.out_plane();
  const int64_t in_step = s.channels_last ? s.channels : 1;
  const float norm = static_cast<float>(s.norm);
  for (int64_t flat = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; flat < total;
       flat += int64_t{gridDim.x} * blockDim.x) {
    int64_t plane, o[3], start[3], count[3];
    locate(s, flat, total, s.out, plane, o);
    for (int a = 0; a < 3; ++a) axis_window(s, a, o[a], start[a], count[a]);
    const T* in = input + element(s, plane, 0, s.in_plane());
    if constexpr (kOp == Op::max) {
      int64_t first[3];
      for (int a = 0; a < 3; ++a) {
        first[a] = start[a];
        while (first[a] < 0) first[a] += s.dilation[a];
      }
      float best = -INFINITY;
      int64_t best_index = (first[0] * s.in[1] + first[1]) * s.in[2] + first[2];
      for (int64_t kz = 0; kz < count[0]; ++kz) {
        const int64_t z = start[0] + kz * s.dilation[0];
        if (z < 0 || z >= s.in[0]) continue;
        for (int64_t ky = 0; ky < count[1]; ++ky) {
          const int64_t y = start[1] + ky * s.dilation[1];
          if (y < 0 || y >= s.in[1]) continue;
          const int64_t row = (z * s.in[1] + y) * s.in[2];
          for (int64_t kx = 0; kx < count[2]; ++kx) {
            const int64_t x = start[2] + kx * s.dilation[2];
            if (x < 0 || x >= s.in[2]) continue;
            const float v = to_float(in[(row + x) * in_step]);
            if (v > best || isnan(v)) {
              best = v;
              best_index = row + x;
            }
          }
        }
      }
      out[flat] = from_float<T>(best);
      indices[flat] = best_index;
    } else {
      // Average and LP windows have no dilation: clip the window to the input once.
      const int64_t z0 = max(start[0], int64_t{0}), z1 = min(start[0] + count[0], s.in[0]);
      const int64_t y0 = max(start[1], int64_t{0}), y1 = min(start[1] + count[1], s.in[1]);
      const int64_t x0 = max(start[2], int64_t{0}), x1 = min(start[2] + count[2], s.in[2]);
      float sum = 0.0f;
      for (int64_t z = z0; z < z1; ++z)
        for (int64_t y = y0; y < y1; ++y) {
          const int64_t row = (z * s.in[1] + y) * s.in[2];
          for (int64_t x = x0; x < x1; ++x) {
            const float v = to_float(in[(row + x) * in_step]);
            sum += kOp == Op::avg ? v : powf(v, norm);
          }
        }
      const float divisor = static_cast<float>(avg_divisor(s, start, count));
      if constexpr (kOp == Op::avg) {
        out[flat] = from_float<T>(sum / divisor);
      } else {
        const float scaled = sum / divisor * static_cast<float>(s.kernel_size());
        out[flat] = from_float<T>(powf(scaled, 1.0f / norm));
      }
    }
  }
}

// kOp max: gather dout where the output's index is this element; avg: the average share;
// lp: dout * out^(1-p) * K / divisor, times x^(p-1) at the end.
template <Op kOp, class T>
__global__ void backward_kernel(PoolShape s, const T* __restrict__ dout,
                                const int64_t* __restrict__ indices, const T* __restrict__ input,
                                const T* __restrict__ forward_out, T* __restrict__ dinput) {
  const int64_t total = s.planes * s.in_plane();
  const int64_t out_step = s.channels_last ? s.channels : 1;
  const float norm = static_cast<float>(s.norm);
  for (int64_t flat = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; flat < total;
       flat += int64_t{gridDim.x} * blockDim.x) {
    int64_t plane, pos[3], lo[3], hi[3];
    locate(s, flat, total, s.in, plane, pos);
    for (int a = 0; a < 3; ++a) covering_outputs(s, a, pos[a], lo[a], hi[a]);
    const int64_t self = (pos[0] * s.in[1] + pos[1]) * s.in[2] + pos[2];
    const int64_t out_base = element(s, plane, 0, s.out_plane());
    float sum = 0.0f;
    for (int64_t z = lo[0]; z < hi[0]; ++z) {
      if (!covers(s, 0, pos[0], z)) continue;
      for (int64_t y = lo[1]; y < hi[1]; ++y) {
        if (!covers(s, 1, pos[1], y)) continue;
        for (int64_t x = lo[2]; x < hi[2]; ++x) {
          if (!covers(s, 2, pos[2], x)) continue;
          const int64_t o = out_base + ((z * s.out[1] + y) * s.out[2] + x) * out_step;
          if constexpr (kOp == Op::max) {
            if (indices[o] == self) sum += to_float(dout[o]);
          } else {
            int64_t start[3], count[3];
            axis_window(s, 0, z, start[0], count[0]);
            axis_window(s, 1, y, start[1], count[1]);
            axis_window(s, 2, x, start[2], count[2]);
            const float divisor = static_cast<float>(avg_divisor(s, start, count));
            if constexpr (kOp == Op::avg) {
              sum += to_float(dout[o]) / divisor;
            } else {
              const float y_out = to_float(forward_out[o]);
              if (y_out != 0.0f) {
                sum += to_float(dout[o]) * powf(y_out, 1.0f - norm) *
                       static_cast<float>(s.kernel_size()) / divisor;
              }
            }
          }
        }
      }
    }
    if constexpr (kOp == Op::lp) sum *= powf(to_float(input[flat]), norm - 1.0f);
    dinput[flat] = from_float<T>(sum);
  }
}

// Global pooling (adaptive to one output per plane, NCHW): a block per plane, its threads
// striding over the plane (coalesced) and combining in a fixed tree, so results do not
// depend on scheduling. Max combines (value, index) pairs by torch's scan rule made
// order-free: any NaN beats every number, the later of two NaNs wins, else the greater value,
// else the earlier index.
struct Best {
  float v;
  int64_t i;
};

__device__ __forceinline__ Best better(Best a, Best b) {
  const bool an = isnan(a.v), bn = isnan(b.v);
  if (an || bn) {
    if (an && bn) return a.i > b.i ? a : b;
    return an ? a : b;
  }
  if (a.v != b.v) return a.v > b.v ? a : b;
  return a.i < b.i ? a : b;
}

constexpr int kGlobalThreads = 256;

template <bool kMax, class T>
__global__ void __launch_bounds__(kGlobalThreads)
    global_kernel(const T* __restrict__ input, T* __restrict__ out,
                  int64_t* __restrict__ indices, int64_t plane_size, float divisor) {
  const T* in = input + blockIdx.x * plane_size;
  float sum = 0.0f;
  // Identity: -inf at an index past the plane, so an all -inf plane reports index 0 as torch.
  Best best{-INFINITY, plane_size};
  int64_t i = threadIdx.x;
  for (; i + 3 * kGlobalThreads < plane_size; i += 4 * kGlobalThreads) {
    float v[4];
#pragma unroll
    for (int k = 0; k < 4; ++k) v[k] = to_float(in[i + k * kGlobalThreads]);
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      if constexpr (kMax) {
        best = better(best, Best{v[k], i + k * kGlobalThreads});
      } else {
        sum += v[k];
      }
    }
  }
  for (; i < plane_size; i += kGlobalThreads) {
    const float v = to_float(in[i]);
    if constexpr (kMax) {
      best = better(best, Best{v, i});
    } else {
      sum += v;
    }
  }
  __shared__ float sums[kGlobalThreads / 32];
  __shared__ Best bests[kGlobalThreads / 32];
  for (int offset = 16; offset > 0; offset /= 2) {
    if constexpr (kMax) {
      const Best other{__shfl_down_sync(0xffffffffu, best.v, offset),
                       static_cast<int64_t>(__shfl_down_sync(
                           0xffffffffu, static_cast<long long>(best.i), offset))};
      best = better(best, other);
    } else {
      sum += __shfl_down_sync(0xffffffffu, sum, offset);
    }
  }
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) {
    if constexpr (kMax) {
      bests[warp] = best;
    } else {
      sums[warp] = sum;
    }
  }
  __syncthreads();
  if (threadIdx.x != 0) return;
  if constexpr (kMax) {
    Best total = bests[0];
    for (int w = 1; w < kGlobalThreads / 32; ++w) total = better(total, bests[w]);
    out[blockIdx.x] = from_float<T>(total.v);
    indices[blockIdx.x] = total.i;
  } else {
    float total = sums[0];
    for (int w = 1; w < kGlobalThreads / 32; ++w) total += sums[w];
    out[blockIdx.x] = from_float<T>(total / divisor);
  }
}

// Whether the global kernel takes the problem: NCHW, one output per plane, planes that fill
// the grid's x dimension, and planes large enough for a block to beat a thread.
bool global_problem(const PoolShape& s) {
  return s.adaptive && !s.channels_last && s.out_plane() == 1 && s.in_plane() >= 256 &&
         s.planes <= 0x7fffffff;
}

template <bool kMax>
void launch_global(const PoolShape& s, const void* input, void* out, int64_t* indices,
                   const Stream& stream, const char* what) {
  const rudnn::cuda::LaunchContext ctx(stream);
  rudnn::cuda::with_float_type(s.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    global_kernel<kMax, T><<<static_cast<unsigned>(s.planes), kGlobalThreads, 0, ctx.stream>>>(
        static_cast<const T*>(input), static_cast<T*>(out), indices, s.in_plane(),
        static_cast<float>(s.in_plane()));
  });
  detail::check_launch(what);
}

template <Op kOp>
void launch_forward(const PoolShape& s, const void* input, void* out, int64_t* indices,
                    const Stream& stream, const char* what) {
  const rudnn::cuda::LaunchContext ctx(stream);
  rudnn::cuda::with_float_type(s.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    forward_kernel<kOp, T><<<blocks_for(s.planes * s.out_plane()), kThreads, 0, ctx.stream>>>(
        s, static_cast<const T*>(input), static_cast<T*>(out), indices);
  });
  detail::check_launch(what);
}

template <Op kOp>
void launch_backward(const PoolShape& s, const void* dout, const int64_t* indices,
                     const void* input, const void* out, void* dinput, const Stream& stream,
                     const char* what) {
  const rudnn::cuda::LaunchContext ctx(stream);
  rudnn::cuda::with_float_type(s.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    backward_kernel<kOp, T><<<blocks_for(s.planes * s.in_plane()), kThreads, 0, ctx.stream>>>(
        s, static_cast<const T*>(dout), indices, static_cast<const T*>(input),
        static_cast<const T*>(out), static_cast<T*>(dinput));
  });
  detail::check_launch(what);
}

}  // namespace

void max_forward(const MaxForward& p, const Stream& stream) {
  {
    const rudnn::cuda::LaunchContext ctx(stream);
    if (strip_max_forward(p, ctx.stream) || nhwc_max_forward(p, ctx.stream)) {
      detail::check_launch("max_pool forward");
      return;
    }
  }
  if (global_problem(p.s)) {
    launch_global<true>(p.s, p.input, p.out, p.indices, stream, "max_pool forward");
    return;
  }
  launch_forward<Op::max>(p.s, p.input, p.out, p.indices, stream, "max_pool forward");
}

void avg_forward(const AvgForward& p, const Stream& stream) {
  {
    const rudnn::cuda::LaunchContext ctx(stream);
    if (strip_avg_forward(p, ctx.stream) || nhwc_avg_forward(p, ctx.stream)) {
      detail::check_launch("avg_pool forward");
      return;
    }
  }
  if (global_problem(p.s)) {
    launch_global<false>(p.s, p.input, p.out, nullptr, stream, "avg_pool forward");
    return;
  }
  launch_forward<Op::avg>(p.s, p.input, p.out, nullptr, stream, "avg_pool forward");
}

void lp_forward(const LpForward& p, const Stream& stream) {
  launch_forward<Op::lp>(p.s, p.input, p.out, nullptr, stream, "lp_pool forward");
}

void max_backward(const MaxBackward& p, const Stream& stream) {
  launch_backward<Op::max>(p.s, p.dout, p.indices, nullptr, nullptr, p.dinput, stream,
                           "max_pool backward");
}

void avg_backward(const AvgBackward& p, const Stream& stream) {
  launch_backward<Op::avg>(p.s, p.dout, nullptr, nullptr, nullptr, p.dinput, stream,
                           "avg_pool backward");
}

void lp_backward(const LpBackward& p, const Stream& stream) {
  launch_backward<Op::lp>(p.s, p.dout, nullptr, p.input, p.out, p.dinput, stream,
                          "lp_pool backward");
}

}  // namespace rudnn::pooling_detail::cuda
