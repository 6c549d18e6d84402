// Channels-last max and average pooling (windows of fixed size, any rank): a thread owns 16
// bytes of channels (4 F32 or 8 F16/BF16) of one output position and reads each window tap
// with one 16-byte load, so a warp's tap is a few contiguous runs of channels and every output
// (and each pair of I64 indices) is one vector store. 2x2 and 3x3 windows unroll their taps. The position arithmetic is 32-bit and
// done once per thread, not per tap and channel as in the general kernel, which takes the
// shapes left over (channels not a multiple of the pack, misaligned pointers, planes or grids
// past 32-bit positions).
//
// Tie and NaN rules are the general kernel's (torch's): per channel, the reduction starts at
// -inf with the first in-bounds tap's index and takes a later tap that is greater or NaN.
#include <cuda_runtime.h>

#include <cstdint>
#include <limits>

#include "cuda/launch.cuh"
#include "cuda/types.cuh"
#include "cuda/vec.cuh"
#include "pooling/cuda/launch.h"
#include "pooling/windows.h"

namespace rudnn::pooling_detail::cuda {

namespace {

constexpr int kThreads = 256;

// Sizes the kernel indexes with 32-bit integers, passed by value.
struct Geometry {
  int in[3], out[3], kernel[3], stride[3], padding[3], dilation[3];
  int groups;  // channel packs per position: C / kC
};

// Thread flat = (n * out_plane + position) * groups + pack: consecutive threads take
// consecutive channel packs of one output position, then the next position. K > 0: a 2-D
// K x K window known at compile time, so the tap loop unrolls and every tap's load is issued
// before the first is reduced (a runtime loop would wait for each load in turn); K = 0: any
// window.
template <bool kMax, class T, int K>
__global__ void __launch_bounds__(kThreads)
    nhwc_kernel(PoolShape s, Geometry g, const T* __restrict__ input, T* __restrict__ out,
                int64_t* __restrict__ indices, uint32_t threads) {
  constexpr int kC = 16 / sizeof(T);
  const uint32_t flat = blockIdx.x * kThreads + threadIdx.x;
  if (flat >= threads) return;
  uint32_t rest = flat / static_cast<uint32_t>(g.groups);
  const int pack = static_cast<int>(flat - rest * static_cast<uint32_t>(g.groups));
  int o[3];
#pragma unroll
  for (int a = 2; a >= 0; --a) {
    const uint32_t next = rest / static_cast<uint32_t>(g.out[a]);
    o[a] = static_cast<int>(rest - next * static_cast<uint32_t>(g.out[a]));
    rest = next;
  }
  const uint32_t n = rest;
  const int C = g.groups * kC;
  const int in_plane = g.in[0] * g.in[1] * g.in[2];
  const T* in = input + (static_cast<int64_t>(n) * in_plane) * C + pack * kC;
  int start[3];
#pragma unroll
  for (int a = 0; a < 3; ++a) start[a] = o[a] * g.stride[a] - g.padding[a];
  const int kz_count = g.kernel[0], ky_count = g.kernel[1], kx_count = g.kernel[2];
  // Average windows have dilation 1 (validated), so one tap loop serves both ops; it visits
  // the in-bounds taps in the general kernel's order (z, then y, then x, ascending).
  const int dz = g.dilation[0], dy = g.dilation[1], dx = g.dilation[2];

  float acc[kC];
  [[maybe_unused]] int best[kC];  // max: each channel's index
  if constexpr (kMax) {
    int first[3];
#pragma unroll
    for (int a = 0; a < 3; ++a) {
      first[a] = start[a];
      while (first[a] < 0) first[a] += g.dilation[a];
    }
    const int first_index = (first[0] * g.in[1] + first[1]) * g.in[2] + first[2];
#pragma unroll
    for (int j = 0; j < kC; ++j) {
      acc[j] = -INFINITY;
      best[j] = first_index;
    }
  } else {
#pragma unroll
    for (int j = 0; j < kC; ++j) acc[j] = 0.0f;
  }
  // One tap: reduce the pack v of input position `index` into the accumulators.
  auto reduce = [&](const float (&v)[kC], int index) {
#pragma unroll
    for (int j = 0; j < kC; ++j) {
      if constexpr (kMax) {
        if (v[j] > acc[j] || isnan(v[j])) {
          acc[j] = v[j];
          best[j] = index;
        }
      } else {
        acc[j] += v[j];
      }
    }
  };
  if constexpr (K > 0) {
    // Every tap's load first (in-bounds ones), then the reduction in scan order.
    float v[K * K][kC];
#pragma unroll
    for (int ky = 0; ky < K; ++ky) {
      const int y = start[1] + ky * dy;
#pragma unroll
      for (int kx = 0; kx < K; ++kx) {
        const int x = start[2] + kx * dx;
        if (y >= 0 && y < g.in[1] && x >= 0 && x < g.in[2]) {
          rudnn::cuda::load_pack<T, kC>(in + static_cast<int64_t>(y * g.in[2] + x) * C,
                                        v[ky * K + kx]);
        }
      }
    }
#pragma unroll
    for (int ky = 0; ky < K; ++ky) {
      const int y = start[1] + ky * dy;
#pragma unroll
      for (int kx = 0; kx < K; ++kx) {
        const int x = start[2] + kx * dx;
        if (y >= 0 && y < g.in[1] && x >= 0 && x < g.in[2]) reduce(v[ky * K + kx], y * g.in[2] + x);
      }
    }
  } else {
    for (int kz = 0; kz < kz_count; ++kz) {
      const int z = start[0] + kz * dz;
      if (z < 0 || z >= g.in[0]) continue;
      for (int ky = 0; ky < ky_count; ++ky) {
        const int y = start[1] + ky * dy;
        if (y < 0 || y >= g.in[1]) continue;
        const int row = (z * g.in[1] + y) * g.in[2];
        for (int kx = 0; kx < kx_count; ++kx) {
          const int x = start[2] + kx * dx;
          if (x < 0 || x >= g.in[2]) continue;
          float v[kC];
          rudnn::cuda::load_pack<T, kC>(in + static_cast<int64_t>(row + x) * C, v);
          reduce(v, row + x);
        }
      }
    }
  }
  if constexpr (kMax) {
    int64_t* idx = indices + static_cast<int64_t>(flat) * kC;
#pragma unroll
    for (int j = 0; j < kC; j += 2) {
      longlong2 pair;
      pair.x = best[j];
      pair.y = best[j + 1];
      *reinterpret_cast<longlong2*>(idx + j) = pair;
    }
  } else {
    int64_t wstart[3], wcount[3];
#pragma unroll
    for (int a = 0; a < 3; ++a) {
      wstart[a] = start[a];
      wcount[a] = g.kernel[a];
    }
    const float divisor = static_cast<float>(avg_divisor(s, wstart, wcount));
#pragma unroll
    for (int j = 0; j < kC; ++j) acc[j] = acc[j] / divisor;
  }
  rudnn::cuda::store_pack<T, kC>(out + static_cast<int64_t>(flat) * kC, acc);
}

bool aligned16(const void* p) { return p == nullptr || reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// Launches when the problem is the kernel's: channels-last, fixed windows, channels a whole
// number of packs, 16-byte aligned operands, every size and position within 32 bits.
template <bool kMax>
bool launch_nhwc(const PoolShape& s, const void* input, void* out, int64_t* indices,
                 cudaStream_t stream) {
  if (!s.channels_last || s.adaptive) return false;
  if (!aligned16(input) || !aligned16(out) || !aligned16(indices)) return false;
  const int64_t limit = std::numeric_limits<int32_t>::max();
  if (s.planes * s.in_plane() > limit || s.in_plane() > limit) return false;
  Geometry g;
  for (int a = 0; a < 3; ++a) {
    // Window extents are bounded by the padded input (validated), the rest by the input.
    if (s.out[a] > limit || s.kernel[a] > limit || s.stride[a] > limit) return false;
    g.in[a] = static_cast<int>(s.in[a]);
    g.out[a] = static_cast<int>(s.out[a]);
    g.kernel[a] = static_cast<int>(s.kernel[a]);
    g.stride[a] = static_cast<int>(s.stride[a]);
    g.padding[a] = static_cast<int>(s.padding[a]);
    g.dilation[a] = static_cast<int>(s.dilation[a]);
    // Window positions o * stride + k * dilation stay below 2^31.
    if ((s.out[a] - 1) * s.stride[a] + (s.kernel[a] - 1) * s.dilation[a] > limit) return false;
  }
  bool launched = false;
  rudnn::cuda::with_float_type(s.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    constexpr int kC = 16 / sizeof(T);
    if (s.channels % kC != 0) return;
    g.groups = static_cast<int>(s.channels / kC);
    const int64_t threads = s.planes * s.out_plane() / kC;
    if (threads > limit) return;
    const auto blocks = static_cast<unsigned>((threads + kThreads - 1) / kThreads);
    const auto* in = static_cast<const T*>(input);
    auto* o = static_cast<T*>(out);
    const auto n = static_cast<uint32_t>(threads);
    // The square 2-D windows networks use get an unrolled tap loop.
    const bool square = s.kernel[0] == 1 && s.kernel[1] == s.kernel[2];
    if (square && s.kernel[2] == 2) {
      nhwc_kernel<kMax, T, 2><<<blocks, kThreads, 0, stream>>>(s, g, in, o, indices, n);
    } else if (square && s.kernel[2] == 3) {
      nhwc_kernel<kMax, T, 3><<<blocks, kThreads, 0, stream>>>(s, g, in, o, indices, n);
    } else {
      nhwc_kernel<kMax, T, 0><<<blocks, kThreads, 0, stream>>>(s, g, in, o, indices, n);
    }
    launched = true;
  });
  return launched;
}

}  // namespace

bool nhwc_max_forward(const MaxForward& p, cudaStream_t stream) {
  return launch_nhwc<true>(p.s, p.input, p.out, p.indices, stream);
}

bool nhwc_avg_forward(const AvgForward& p, cudaStream_t stream) {
  return launch_nhwc<false>(p.s, p.input, p.out, nullptr, stream);
}

}  // namespace rudnn::pooling_detail::cuda
