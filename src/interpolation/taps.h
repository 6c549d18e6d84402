// How interpolate reads its input along one spatial axis: output o becomes up to four taps
// (an input index in [0, in) and its weight), or, for area, a window. Every mode is a product
// of per-axis taps, so the forward pass, the scatter of the reference's backward and the
// kernels' gather share these rules. Written for R = double (the CPU reference) and R =
// float (the kernels), following torch's index arithmetic: the nearest indices are FP32 in
// both (torch computes them so on every device), so the pixels chosen agree bit for bit.
#pragma once

#include <cmath>
#include <cstdint>

#include "interpolation/problem.h"

#if defined(__CUDACC__)
#define RUDNN_INTERP_HD __host__ __device__ __forceinline__
#else
#define RUDNN_INTERP_HD inline
#endif

namespace rudnn::interpolation_detail {

// Taps per output along an axis of the rule (area: a window, not taps).
RUDNN_INTERP_HD constexpr int taps_of(Rule rule) { return rule == kLinear ? 2 : rule == kCubic ? 4 : 1; }

template <class R>
RUDNN_INTERP_HD R ratio_of(const Axis& a) {
  if constexpr (sizeof(R) == sizeof(float)) {
    return a.ratio;
  } else {
    return a.ratio64;
  }
}

RUDNN_INTERP_HD int64_t min_index(int64_t a, int64_t b) { return a < b ? a : b; }
RUDNN_INTERP_HD int64_t clamp_index(int64_t i, int64_t in) {
  return i < 0 ? 0 : (i > in - 1 ? in - 1 : i);
}

template <class R>
RUDNN_INTERP_HD R cubic_inner(R x) {  // |x| <= 1, A = -0.75
  const R A = R(-0.75);
  return ((A + R(2)) * x - (A + R(3))) * x * x + R(1);
}
template <class R>
RUDNN_INTERP_HD R cubic_outer(R x) {  // 1 < |x| < 2
  const R A = R(-0.75);
  return ((A * x - R(5) * A) * x + R(8) * A) * x - R(4) * A;
}

// The taps of output o along an axis with a tap rule (not kArea); returns their count
// (taps_of(rule)). Taps may repeat an index (clamped cubic taps, the last linear pixel).
template <class R>
RUDNN_INTERP_HD int axis_taps(Rule rule, const Axis& a, bool align_corners, int64_t o,
                              int64_t index[4], R weight[4]) {
  switch (rule) {
    case kNearest: {
      // torch: floorf(dst * scale) with dst converted to float.
      const float src = floorf(static_cast<float>(o) * a.ratio);
      index[0] = min_index(static_cast<int64_t>(src), a.in - 1);
      weight[0] = R(1);
      return 1;
    }
    case kNearestExact: {
      // torch: (dst + 0.5) is a double, the product too; floorf takes it as a float.
      const float src = floorf(
          static_cast<float>((static_cast<double>(o) + 0.5) * static_cast<double>(a.ratio)));
      index[0] = min_index(static_cast<int64_t>(src), a.in - 1);
      weight[0] = R(1);
      return 1;
    }
    case kLinear: {
      const R r = ratio_of<R>(a);
      R src = align_corners ? r * static_cast<R>(o) : r * (static_cast<R>(o) + R(0.5)) - R(0.5);
      if (src < R(0)) src = R(0);
      const int64_t i0 = static_cast<int64_t>(src);
      const R l1 = src - static_cast<R>(i0);
      index[0] = i0;
      index[1] = i0 + (i0 < a.in - 1 ? 1 : 0);
      weight[0] = R(1) - l1;
      weight[1] = l1;
      return 2;
    }
    case kCubic: {
      const R r = ratio_of<R>(a);
      const R src =
          align_corners ? r * static_cast<R>(o) : r * (static_cast<R>(o) + R(0.5)) - R(0.5);
      R fl;
      if constexpr (sizeof(R) == sizeof(float)) {
        fl = floorf(src);
      } else {
        fl = ::floor(src);
      }
      const R t = src - fl;
      const int64_t i0 = static_cast<int64_t>(fl);
      for (int k = 0; k < 4; ++k) index[k] = clamp_index(i0 - 1 + k, a.in);
      weight[0] = cubic_outer(t + R(1));
      weight[1] = cubic_inner(t);
      weight[2] = cubic_inner(R(1) - t);
      weight[3] = cubic_outer(R(2) - t);
      return 4;
    }
    default:  // kIdentity
      index[0] = o;
      weight[0] = R(1);
      return 1;
  }
}

// Area (adaptive average pooling): the window [start, end) of output o, without overflow
// for sizes up to 2^31.
RUDNN_INTERP_HD void area_window(const Axis& a, int64_t o, int64_t& start, int64_t& end) {
  start = (o / a.out) * a.in + ((o % a.out) * a.in) / a.out;
  end = 1 + ((o + 1) * a.in - 1) / a.out;
}

// The lowest and highest input index output o reads along the axis (both monotone in o).
RUDNN_INTERP_HD void reach(Rule rule, const Axis& a, bool align_corners, int64_t o, int64_t& lo,
                           int64_t& hi) {
  if (rule == kArea) {
    area_window(a, o, lo, hi);
    hi -= 1;
    return;
  }
  int64_t index[4];
  float weight[4];
  const int n = axis_taps<float>(rule, a, align_corners, o, index, weight);
  lo = index[0];
  hi = index[n - 1];
}

// The outputs [first, last) whose taps (or window) reach input i along the axis: a binary
// search on the monotone reach of o, so it agrees with the forward's own index arithmetic.
RUDNN_INTERP_HD void covering_outputs(Rule rule, const Axis& a, bool align_corners, int64_t i,
                                      int64_t& first, int64_t& last) {
  if (rule == kIdentity) {
    first = i;
    last = i + 1;
    return;
  }
  int64_t lo = 0, hi = a.out;  // first o with reach.hi >= i
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo) / 2;
    int64_t r0, r1;
    reach(rule, a, align_corners, mid, r0, r1);
    if (r1 >= i) {
      hi = mid;
    } else {
      lo = mid + 1;
    }
  }
  first = lo;
  hi = a.out;  // first o with reach.lo > i
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo) / 2;
    int64_t r0, r1;
    reach(rule, a, align_corners, mid, r0, r1);
    if (r0 > i) {
      hi = mid;
    } else {
      lo = mid + 1;
    }
  }
  last = lo;
}

// The total weight output o gives input i along the axis (0 when none of its taps is i).
template <class R>
RUDNN_INTERP_HD R weight_to(Rule rule, const Axis& a, bool align_corners, int64_t o, int64_t i) {
  if (rule == kArea) {
    int64_t start, end;
    area_window(a, o, start, end);
    return (i >= start && i < end) ? R(1) / static_cast<R>(end - start) : R(0);
  }
  int64_t index[4];
  R weight[4];
  const int n = axis_taps<R>(rule, a, align_corners, o, index, weight);
  R w = R(0);
  for (int k = 0; k < n; ++k) w += index[k] == i ? weight[k] : R(0);
  return w;
}


// ---- Antialias (torch's _upsample_{bilinear,bicubic}2d_aa) ------------------------------------
// Output o of an axis with scale r (the ratio above) reads the inputs j in [start, start +
// count) around center = r * (o + 0.5), with weight filter((j - center + 0.5) * inv) / total:
// the filter is stretched by r when downsampling (support = size / 2 * r, inv = 1 / r) and the
// weights of the window are normalised to sum 1, so the window's clipping at the borders is
// renormalised instead of clamped. Filters: the triangle (bilinear, size 2) and Keys' cubic
// with A = -0.5 (bicubic, size 4; not the -0.75 of plain bicubic).

template <class R>
RUDNN_INTERP_HD R aa_filter(bool cubic, R x) {
  if (x < R(0)) x = -x;
  if (!cubic) return x < R(1) ? R(1) - x : R(0);
  const R A = R(-0.5);
  if (x < R(1)) return ((A + R(2)) * x - (A + R(3))) * x * x + R(1);
  if (x < R(2)) return (((x - R(5)) * x + R(8)) * x - R(4)) * A;
  return R(0);
}

// support, in input pixels, for the axis scale r.
template <class R>
RUDNN_INTERP_HD R aa_support(bool cubic, R r) {
  const R half_size = cubic ? R(2) : R(1);
  return r >= R(1) ? half_size * r : half_size;
}

// The window of output o: start and count (count <= max_taps, which clips it as torch's CPU
// kernel does when rounding makes it one longer), and the unnormalised weight of its k-th
// input. R = float follows torch's CUDA arithmetic (FP32 center and truncations).
template <class R>
struct AaWindow {
  int64_t start = 0, count = 0;
  R start_minus_center = R(0), inv = R(1);
  bool cubic = false;

  RUDNN_INTERP_HD R weight(int64_t k) const {
    return aa_filter(cubic, (static_cast<R>(k) + start_minus_center + R(0.5)) * inv);
  }
};

template <class R>
RUDNN_INTERP_HD AaWindow<R> aa_window(bool cubic, const Axis& a, int64_t o, int64_t max_taps) {
  const R r = ratio_of<R>(a);
  const R support = aa_support(cubic, r);
  const R center = r * (static_cast<R>(o) + R(0.5));
  AaWindow<R> w;
  w.cubic = cubic;
  w.inv = r >= R(1) ? R(1) / r : R(1);
  // C++ truncation toward zero as torch's static_cast<int>; the max makes it a floor anyway.
  const int64_t lo = static_cast<int64_t>(center - support + R(0.5));
  const int64_t hi = static_cast<int64_t>(center + support + R(0.5));
  w.start = lo > 0 ? lo : 0;
  int64_t count = (hi < a.in ? hi : a.in) - w.start;
  count = count < 0 ? 0 : (count > max_taps ? max_taps : count);
  w.count = count;
  w.start_minus_center = static_cast<R>(w.start) - center;
  return w;
}

// 2 * ceil(support) + 1 (torch's interp_size for antialias) for the axis scale.
template <class R>
inline int64_t aa_max_taps(bool cubic, R r) {
  const R support = aa_support(cubic, r);
  return 2 * static_cast<int64_t>(std::ceil(support)) + 1;
}

}  // namespace rudnn::interpolation_detail
