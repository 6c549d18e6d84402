// Window arithmetic and addressing shared by the CPU reference and the CUDA kernels.
#pragma once

#include <cstdint>

#include "pooling/problem.h"

#if defined(__CUDACC__)
#define RUDNN_POOL_HD __host__ __device__ __forceinline__
#else
#define RUDNN_POOL_HD inline
#endif

namespace rudnn::pooling_detail {

// Where element `pos` (flat within its plane of `plane_size`) of `plane` lives, in elements.
RUDNN_POOL_HD int64_t element(const PoolShape& s, int64_t plane, int64_t pos,
                              int64_t plane_size) {
  if (!s.channels_last) return plane * plane_size + pos;
  const int64_t n = plane / s.channels, c = plane - n * s.channels;
  return (n * plane_size + pos) * s.channels + c;
}

// The window of output o along axis a: taps start + k * dilation for k < count, before
// clipping to the input (padding taps fall outside [0, in)).
RUDNN_POOL_HD void axis_window(const PoolShape& s, int a, int64_t o, int64_t& start,
                               int64_t& count) {
  if (s.adaptive) {
    start = o * s.in[a] / s.out[a];
    count = ((o + 1) * s.in[a] + s.out[a] - 1) / s.out[a] - start;
  } else {
    start = o * s.stride[a] - s.padding[a];
    count = s.kernel[a];
  }
}

// torch's average divisor for the window (start, count) per axis (dilation is 1 here).
RUDNN_POOL_HD int64_t avg_divisor(const PoolShape& s, const int64_t start[3],
                                  const int64_t count[3]) {
  if (s.divisor_override != 0) return s.divisor_override;
  int64_t padded = 1, inside = 1;
  for (int a = 0; a < 3; ++a) {
    const int64_t lo = start[a];
    int64_t hi = lo + count[a];
    if (hi > s.in[a] + s.padding[a]) hi = s.in[a] + s.padding[a];
    padded *= hi - lo;
    const int64_t clo = lo < 0 ? 0 : lo;
    const int64_t chi = hi > s.in[a] ? s.in[a] : hi;
    inside *= chi - clo;
  }
  return s.count_include_pad ? padded : inside;
}

// The outputs along axis a whose windows may cover input position i: o in [lo, hi). For
// dilated windows `covers` still has to be asked per output.
RUDNN_POOL_HD void covering_outputs(const PoolShape& s, int a, int64_t i, int64_t& lo,
                                    int64_t& hi) {
  if (s.adaptive) {
    // start(o) <= i  <=>  o < ceil((i + 1) * out / in);  end(o) > i  <=>  o >= floor(i * out / in)
    lo = i * s.out[a] / s.in[a];
    hi = ((i + 1) * s.out[a] + s.in[a] - 1) / s.in[a];
    if (hi > s.out[a]) hi = s.out[a];
    return;
  }
  const int64_t reach = (s.kernel[a] - 1) * s.dilation[a];
  const int64_t p = i + s.padding[a];
  // o * stride in [p - reach, p]
  const int64_t first = p - reach <= 0 ? 0 : (p - reach + s.stride[a] - 1) / s.stride[a];
  int64_t last = p / s.stride[a];
  if (last > s.out[a] - 1) last = s.out[a] - 1;
  lo = first;
  hi = last + 1 > first ? last + 1 : first;
}

// Whether output o's window along axis a has a tap on input position i (o from
// covering_outputs): only dilation can leave a gap.
RUDNN_POOL_HD bool covers(const PoolShape& s, int a, int64_t i, int64_t o) {
  return s.adaptive || (i + s.padding[a] - o * s.stride[a]) % s.dilation[a] == 0;
}

}  // namespace rudnn::pooling_detail
