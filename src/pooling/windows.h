// Window arithmetic shared by the CPU reference and the CUDA kernels (host and device).
#pragma once

#include <cstdint>

#include "pooling/problem.h"

#if defined(__CUDACC__)
#define RUDNN_POOL_HD __host__ __device__ __forceinline__
#else
#define RUDNN_POOL_HD inline
#endif

namespace rudnn::pooling_detail {

// torch's avg divisor for the window starting at `start` (per axis, before clamping).
RUDNN_POOL_HD int64_t avg_divisor(const PoolShape& s, const int64_t start[3]) {
  if (s.divisor_override != 0) return s.divisor_override;
  int64_t padded = 1, inside = 1;
  for (int a = 0; a < 3; ++a) {
    const int64_t lo = start[a];
    int64_t hi = lo + s.kernel[a];
    if (hi > s.in[a] + s.padding[a]) hi = s.in[a] + s.padding[a];
    padded *= hi - lo;
    const int64_t clo = lo < 0 ? 0 : lo;
    const int64_t chi = hi > s.in[a] ? s.in[a] : hi;
    inside *= chi - clo;
  }
  return s.count_include_pad ? padded : inside;
}

// The outputs along one axis whose windows cover input position `i`: o in [lo, hi) with
// (i + pad - o * stride) a multiple of dilation below kernel * dilation.
RUDNN_POOL_HD void covering_outputs(const PoolShape& s, int a, int64_t i, int64_t& lo,
                                    int64_t& hi) {
  const int64_t reach = (s.kernel[a] - 1) * s.dilation[a];
  const int64_t p = i + s.padding[a];
  // o * stride in [p - reach, p]
  const int64_t first = p - reach <= 0 ? 0 : (p - reach + s.stride[a] - 1) / s.stride[a];
  int64_t last = p / s.stride[a];
  if (last > s.out[a] - 1) last = s.out[a] - 1;
  lo = first;
  hi = last + 1 > first ? last + 1 : first;
}

}  // namespace rudnn::pooling_detail
