// How one output location of grid_sample reads its input, one spatial axis at a time: the
// normalised grid coordinate becomes up to four taps (an input index, its weight and the
// weight's derivative with respect to the grid coordinate). Every mode is a product of
// per-axis taps, so forward, the input gradient and the grid gradient of 2-D and 3-D
// sampling share these rules. Written once for R = double (the CPU reference) and R = float
// (the CUDA kernels), so both follow torch's rules, including its corner cases (NaN and huge
// coordinates read as -100, i.e. outside for zeros padding).
#pragma once

#include <cmath>
#include <cstdint>

#if defined(__CUDACC__)
#define RUDNN_GS_HD __host__ __device__ __forceinline__
#else
#define RUDNN_GS_HD inline
#endif

namespace rudnn::grid_sample_detail {

enum Mode : int { kBilinear = 0, kNearest = 1, kBicubic = 2 };
enum Padding : int { kZeros = 0, kBorder = 1, kReflection = 2 };

template <class R>
struct Taps {
  int count = 0;
  int64_t index[4];  // -1: outside (reads 0, receives no gradient)
  R weight[4];
  R dweight[4];  // d weight / d (normalised grid coordinate)
};

// a * b rounded on its own. nvcc would fuse the product with the subtraction after it into
// one FMA (the host compiler does not), and a coordinate one ulp off the reference's can
// floor to the other pixel, where the grid gradient jumps.
template <class R>
RUDNN_GS_HD R separate_product(R a, R b) {
#if defined(__CUDA_ARCH__)
  if constexpr (sizeof(R) == sizeof(double)) {
    return __dmul_rn(a, b);
  } else {
    return __fmul_rn(a, b);
  }
#else
  return a * b;
#endif
}

// Pixel coordinate of a normalised one; *mult is its derivative.
template <class R>
RUDNN_GS_HD R unnormalize(R coord, int64_t size, bool align_corners, R* mult) {
  if (align_corners) {
    *mult = R(size - 1) / R(2);
    return (coord + R(1)) / R(2) * R(size - 1);
  }
  *mult = R(size) / R(2);
  return (separate_product(coord + R(1), R(size)) - R(1)) / R(2);
}

template <class R>
RUDNN_GS_HD R clip(R in, int64_t size, R* grad) {
  if (in <= R(0)) {
    *grad = R(0);
    return R(0);
  }
  const R top = R(size - 1);
  if (in >= top) {
    *grad = R(0);
    return top;
  }
  *grad = R(1);
  return in;
}

// Reflects `in` into [twice_low / 2, twice_high / 2] (torch's reflect_coordinates).
template <class R>
RUDNN_GS_HD R reflect(R in, int64_t twice_low, int64_t twice_high, R* grad) {
  if (twice_low == twice_high) {
    *grad = R(0);
    return R(0);
  }
  const R low = R(twice_low) / R(2);
  const R span = R(twice_high - twice_low) / R(2);
  in = in - low;
  R sign = R(1);
  if (in < R(0)) {
    sign = R(-1);
    in = -in;
  }
  const R extra = std::fmod(in, span);
  // The parity of the number of flips, taken in R: converting floor(in / span) to an integer
  // overflows for huge coordinates (torch's CPU and CUDA kernels disagree there: one wraps,
  // the other saturates). Huge quotients are even in both float and double.
  const bool odd_flips = std::fmod(std::floor(in / span), R(2)) != R(0);
  if (!odd_flips) {
    *grad = sign;
    return extra + low;
  }
  *grad = -sign;
  return span - extra + low;
}

// NaN, infinities and coordinates beyond the int range read as -100 (outside), as in torch.
template <class R>
RUDNN_GS_HD R safe_coordinate(R x) {
  if (!(x == x) || !(x < R(2147483646.0)) || !(x >= R(-2147483648.0))) return R(-100);
  return x;
}

// The padded source coordinate of a pixel coordinate; *grad is its derivative.
template <class R>
RUDNN_GS_HD R apply_padding(R x, int64_t size, int padding, bool align_corners, R* grad) {
  *grad = R(1);
  if (padding == kBorder) {
    x = clip(x, size, grad);
  } else if (padding == kReflection) {
    R g_reflect, g_clip;
    x = align_corners ? reflect(x, 0, 2 * (size - 1), &g_reflect)
                      : reflect(x, -1, 2 * size - 1, &g_reflect);
    x = clip(x, size, &g_clip);
    *grad = g_reflect * g_clip;
  }
  return safe_coordinate(x);
}

template <class R>
RUDNN_GS_HD int64_t inside_or_minus_one(int64_t i, int64_t size) {
  return (i >= 0 && i < size) ? i : -1;
}

template <class R>
RUDNN_GS_HD R cubic_inner(R x, R a) {
  return ((a + R(2)) * x - (a + R(3))) * x * x + R(1);
}
template <class R>
RUDNN_GS_HD R cubic_outer(R x, R a) {
  return ((a * x - R(5) * a) * x + R(8) * a) * x - R(4) * a;
}
template <class R>
RUDNN_GS_HD R cubic_inner_slope(R x, R a) {
  return R(3) * (a + R(2)) * x * x - R(2) * (a + R(3)) * x;
}
template <class R>
RUDNN_GS_HD R cubic_outer_slope(R x, R a) {
  return R(3) * a * x * x - R(10) * a * x + R(8) * a;
}

// The taps of normalised coordinate `coord` along an axis of `size` (>= 1) pixels.
template <class R>
RUDNN_GS_HD Taps<R> axis_taps(R coord, int64_t size, int mode, int padding, bool align_corners) {
  Taps<R> t;
  R unnorm_mult;
  R x = unnormalize(coord, size, align_corners, &unnorm_mult);
  if (mode == kBicubic) {
    // Taps at floor(x) - 1 .. floor(x) + 2, each index padded on its own (torch's
    // get_value_bounded); the weights see the unpadded coordinate only.
    x = safe_coordinate(x);
    const R x0 = std::floor(x);
    const R frac = x - x0;
    const R a = R(-0.75);
    t.count = 4;
    t.weight[0] = cubic_outer(frac + R(1), a);
    t.weight[1] = cubic_inner(frac, a);
    t.weight[2] = cubic_inner(R(1) - frac, a);
    t.weight[3] = cubic_outer(R(2) - frac, a);
    t.dweight[0] = cubic_outer_slope(frac + R(1), a) * unnorm_mult;
    t.dweight[1] = cubic_inner_slope(frac, a) * unnorm_mult;
    t.dweight[2] = -cubic_inner_slope(R(1) - frac, a) * unnorm_mult;
    t.dweight[3] = -cubic_outer_slope(R(2) - frac, a) * unnorm_mult;
    for (int i = 0; i < 4; ++i) {
      R unused;
      const R padded = apply_padding(x0 - R(1) + R(i), size, padding, align_corners, &unused);
      t.index[i] = inside_or_minus_one<R>(static_cast<int64_t>(padded), size);
    }
    return t;
  }
  R pad_grad;
  x = apply_padding(x, size, padding, align_corners, &pad_grad);
  if (mode == kNearest) {
    t.count = 1;
    t.index[0] = inside_or_minus_one<R>(static_cast<int64_t>(std::nearbyint(x)), size);
    t.weight[0] = R(1);
    t.dweight[0] = R(0);
    return t;
  }
  const R x0 = std::floor(x);
  const R frac = x - x0;
  const R mult = unnorm_mult * pad_grad;
  const int64_t i0 = static_cast<int64_t>(x0);
  t.count = 2;
  t.index[0] = inside_or_minus_one<R>(i0, size);
  t.index[1] = inside_or_minus_one<R>(i0 + 1, size);
  t.weight[0] = R(1) - frac;
  t.weight[1] = frac;
  t.dweight[0] = -mult;
  t.dweight[1] = mult;
  return t;
}

}  // namespace rudnn::grid_sample_detail
