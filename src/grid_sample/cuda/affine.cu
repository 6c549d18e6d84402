// affine_grid and its backward. Forward: one thread per grid location. Backward: one block
// per batch entry sums dgrid x base point over the locations in a fixed order (each thread a
// strided subset, then a fixed tree), so dtheta is deterministic.
#include <cuda_runtime.h>

#include "core/cuda_check.h"
#include "cuda/launch.cuh"
#include "cuda/types.cuh"
#include "grid_sample/cuda/launch.h"

namespace rudnn::grid_sample_detail::cuda {

namespace {

using rudnn::cuda::from_float;
using rudnn::cuda::to_float;

constexpr int kThreads = 256;

__device__ __forceinline__ float base(int64_t i, int64_t steps, bool align_corners) {
  if (steps <= 1) return 0.0f;
  const float c = -1.0f + 2.0f * static_cast<float>(i) / static_cast<float>(steps - 1);
  return align_corners ? c : c * static_cast<float>(steps - 1) / static_cast<float>(steps);
}

// The base point [x, y, (z,) 1] of location `at` within one batch entry.
template <int kDims>
__device__ __forceinline__ void base_point(const AffineShape& s, int64_t at, float point[4]) {
  const int64_t w = at % s.w, rest = at / s.w;
  const int64_t h = rest % s.h, d = rest / s.h;
  point[0] = base(w, s.w, s.align_corners);
  point[1] = base(h, s.h, s.align_corners);
  if constexpr (kDims == 3) {
    point[2] = base(d, s.d, s.align_corners);
    point[3] = 1.0f;
  } else {
    point[2] = 1.0f;
  }
}

template <class T, int kDims>
__global__ void __launch_bounds__(kThreads)
    affine_forward_kernel(AffineShape s, const T* __restrict__ theta, T* __restrict__ grid) {
  const int64_t per_batch = s.d * s.h * s.w;
  const int64_t location = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (location >= s.n * per_batch) return;
  const int64_t b = location / per_batch;
  float point[4];
  base_point<kDims>(s, location - b * per_batch, point);
  const T* m = theta + b * kDims * (kDims + 1);
#pragma unroll
  for (int r = 0; r < kDims; ++r) {
    float acc = 0.0f;
#pragma unroll
    for (int k = 0; k <= kDims; ++k) acc += to_float(m[r * (kDims + 1) + k]) * point[k];
    grid[location * kDims + r] = from_float<T>(acc);
  }
}

template <class T, int kDims>
__global__ void __launch_bounds__(kThreads)
    affine_backward_kernel(AffineShape s, const T* __restrict__ dgrid, T* __restrict__ dtheta) {
  constexpr int kTerms = kDims * (kDims + 1);
  __shared__ float partial[kTerms][kThreads];
  const int64_t per_batch = s.d * s.h * s.w;
  const int64_t b = blockIdx.x;
  float acc[kTerms] = {};
  for (int64_t at = threadIdx.x; at < per_batch; at += kThreads) {
    float point[4];
    base_point<kDims>(s, at, point);
    const T* g = dgrid + (b * per_batch + at) * kDims;
#pragma unroll
    for (int r = 0; r < kDims; ++r) {
      const float gr = to_float(g[r]);
#pragma unroll
      for (int k = 0; k <= kDims; ++k) acc[r * (kDims + 1) + k] += gr * point[k];
    }
  }
#pragma unroll
  for (int t = 0; t < kTerms; ++t) partial[t][threadIdx.x] = acc[t];
  __syncthreads();
  for (int half = kThreads / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) {
#pragma unroll
      for (int t = 0; t < kTerms; ++t) partial[t][threadIdx.x] += partial[t][threadIdx.x + half];
    }
    __syncthreads();
  }
  if (threadIdx.x < kTerms) {
    dtheta[b * kTerms + threadIdx.x] = from_float<T>(partial[threadIdx.x][0]);
  }
}

}  // namespace

void affine_forward(const AffineForward& p, const Stream& stream) {
  const rudnn::cuda::LaunchContext ctx(stream);
  const int64_t count = p.s.n * p.s.d * p.s.h * p.s.w;
  if (count == 0) return;
  const auto blocks = static_cast<unsigned>((count + kThreads - 1) / kThreads);
  rudnn::cuda::with_float_type(p.s.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const auto* theta = static_cast<const T*>(p.theta);
    auto* grid = static_cast<T*>(p.grid);
    if (p.s.dims == 2) {
      affine_forward_kernel<T, 2><<<blocks, kThreads, 0, ctx.stream>>>(p.s, theta, grid);
    } else {
      affine_forward_kernel<T, 3><<<blocks, kThreads, 0, ctx.stream>>>(p.s, theta, grid);
    }
  });
  detail::check_launch("affine_grid");
}

void affine_backward(const AffineBackward& p, const Stream& stream) {
  const rudnn::cuda::LaunchContext ctx(stream);
  if (p.s.n == 0) return;
  rudnn::cuda::with_float_type(p.s.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const auto* dgrid = static_cast<const T*>(p.dgrid);
    auto* dtheta = static_cast<T*>(p.dtheta);
    const auto blocks = static_cast<unsigned>(p.s.n);
    if (p.s.dims == 2) {
      affine_backward_kernel<T, 2><<<blocks, kThreads, 0, ctx.stream>>>(p.s, dgrid, dtheta);
    } else {
      affine_backward_kernel<T, 3><<<blocks, kThreads, 0, ctx.stream>>>(p.s, dgrid, dtheta);
    }
  });
  detail::check_launch("affine_grid_backward");
}

}  // namespace rudnn::grid_sample_detail::cuda
