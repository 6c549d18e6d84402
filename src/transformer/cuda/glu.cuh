// SwiGLU and GeGLU, forward and backward: one pass over rows of gate, up (and dy), W
// elements per access, in FP32.
#pragma once

#include "transformer/cuda/elementwise.cuh"
#include "transformer/cuda/launch.h"

namespace rudnn::transformer::cuda {

struct ActValue {
  float value, slope;  // act(g), act'(g)
};

constexpr float kSqrtHalf = 0.70710678118654752f;
constexpr float kInvSqrt2Pi = 0.39894228040143268f;
constexpr float kTanhK0 = 0.79788456080286536f;  // sqrt(2 / pi)
constexpr float kTanhK1 = 0.044715f;

// 2u of the tanh approximation, u = sqrt(2/pi) (g + 0.044715 g^3), clamped to [-80, 80]:
// (1 + tanh u) / 2 is evaluated as the logistic 1 / (1 + e^(-2u)), which keeps its relative
// accuracy where 1 + tanh u would cancel (g < -3), and e^80 stays finite.
__device__ __forceinline__ float tanh_arg2(float g) {
  return fminf(fmaxf(2.0f * kTanhK0 * (g + kTanhK1 * g * g * g), -80.0f), 80.0f);
}

// act(g). Φ(g) is taken as erfc(-g/sqrt 2) / 2, accurate in the lower tail too. The
// divisions are the fast ones (2 ulp): a denominator past 2^126 (g < -87, where the exact
// result is below 1e-36) gives 0.
template <GluKind K>
__device__ __forceinline__ float act(float g) {
  if constexpr (K == GluKind::swiglu) {
    return __fdividef(g, 1.0f + __expf(-g));
  } else if constexpr (K == GluKind::geglu_erf) {
    return 0.5f * g * erfcf(-g * kSqrtHalf);
  } else {
    return __fdividef(g, 1.0f + __expf(-tanh_arg2(g)));
  }
}

// act(g) and act'(g).
template <GluKind K>
__device__ __forceinline__ ActValue act_slope(float g) {
  if constexpr (K == GluKind::swiglu) {
    const float sig = __fdividef(1.0f, 1.0f + __expf(-g));
    return {g * sig, sig * (1.0f + g * (1.0f - sig))};
  } else if constexpr (K == GluKind::geglu_erf) {
    const float cdf = 0.5f * erfcf(-g * kSqrtHalf);
    return {g * cdf, cdf + g * kInvSqrt2Pi * __expf(-0.5f * g * g)};
  } else {
    // s = (1 + tanh u) / 2, 1 - s = e s, 1 - tanh^2 u = 4 s (1 - s).
    const float e = __expf(-tanh_arg2(g));
    const float s = __fdividef(1.0f, 1.0f + e);
    return {g * s, s + 2.0f * g * s * (e * s) * kTanhK0 * (1.0f + 3.0f * kTanhK1 * g * g)};
  }
}

template <class T, int W, GluKind K>
__global__ void __launch_bounds__(256) glu_forward_kernel(const GluForward p) {
  const int64_t units = p.cols / W;
  for (int64_t r = static_cast<int64_t>(blockIdx.x) * blockDim.y + threadIdx.y; r < p.rows;
       r += static_cast<int64_t>(gridDim.x) * blockDim.y) {
    const T* gate = static_cast<const T*>(p.gate.data) + r * p.gate.stride;
    const T* up = static_cast<const T*>(p.up.data) + r * p.up.stride;
    T* y = static_cast<T*>(p.y.data) + r * p.y.stride;
    for (int64_t u = threadIdx.x; u < units; u += blockDim.x) {
      float g[W], v[W];
      load_n<T, W, (W > 1)>(gate + u * W, g);
      load_n<T, W, (W > 1)>(up + u * W, v);
#pragma unroll
      for (int k = 0; k < W; ++k) v[k] *= act<K>(g[k]);
      store_n<T, W, (W > 1)>(y + u * W, v);
    }
  }
}

template <class T, int W, GluKind K>
__global__ void __launch_bounds__(256) glu_backward_kernel(const GluBackward p) {
  const int64_t units = p.cols / W;
  for (int64_t r = static_cast<int64_t>(blockIdx.x) * blockDim.y + threadIdx.y; r < p.rows;
       r += static_cast<int64_t>(gridDim.x) * blockDim.y) {
    const T* dy = static_cast<const T*>(p.dy.data) + r * p.dy.stride;
    const T* gate = static_cast<const T*>(p.gate.data) + r * p.gate.stride;
    const T* up = static_cast<const T*>(p.up.data) + r * p.up.stride;
    T* dgate = static_cast<T*>(p.dgate.data) + r * p.dgate.stride;
    T* dup = static_cast<T*>(p.dup.data) + r * p.dup.stride;
    for (int64_t u = threadIdx.x; u < units; u += blockDim.x) {
      float d[W], g[W], v[W];
      load_n<T, W, (W > 1)>(dy + u * W, d);
      load_n<T, W, (W > 1)>(gate + u * W, g);
      load_n<T, W, (W > 1)>(up + u * W, v);
#pragma unroll
      for (int k = 0; k < W; ++k) {
        const ActValue a = act_slope<K>(g[k]);
        g[k] = d[k] * v[k] * a.slope;
        v[k] = d[k] * a.value;
      }
      store_n<T, W, (W > 1)>(dgate + u * W, g);
      store_n<T, W, (W > 1)>(dup + u * W, v);
    }
  }
}

// Calls f(std::integral_constant<GluKind, K>{}) for the problem's kind.
template <class F>
void with_glu_kind(GluKind kind, F&& f) {
  switch (kind) {
    case GluKind::swiglu:
      return f(std::integral_constant<GluKind, GluKind::swiglu>{});
    case GluKind::geglu_erf:
      return f(std::integral_constant<GluKind, GluKind::geglu_erf>{});
    case GluKind::geglu_tanh:
      return f(std::integral_constant<GluKind, GluKind::geglu_tanh>{});
  }
}

// The launch shape of a row problem of `units` accesses a row: (block, grid). A block per
// block.y rows rather than a capped grid, so that the block scheduler balances the rows
// over the SMs (not measured against a capped grid yet); the kernels still stride over
// rows, for row counts past the grid's limit.
struct GluLaunch {
  dim3 block, grid;
};
inline GluLaunch glu_launch(int64_t rows, int64_t units) {
  const dim3 block = row_block(units);
  return {block, dim3(row_blocks(rows, block, int64_t{1} << 30))};
}

}  // namespace rudnn::transformer::cuda
