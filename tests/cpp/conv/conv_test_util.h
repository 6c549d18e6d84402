// Helpers of the convolution tests: option builders and host layout conversions.
#pragma once

#include <vector>

#include "support/test_support.h"

namespace rudnn::test::conv {

template <int N>
ConvOptions<N> opts(std::array<int64_t, N> stride, std::array<int64_t, N> padding,
                    std::array<int64_t, N> dilation, int64_t groups = 1) {
  ConvOptions<N> o;
  o.stride = stride;
  o.padding = padding;
  o.dilation = dilation;
  o.groups = groups;
  return o;
}

// [N, C, spatial...] (any layout) as a contiguous host [N, spatial..., C] tensor, and back.
inline Tensor to_nhwc(const Tensor& t) {
  const Shape& s = t.shape();
  const std::vector<double> v = to_doubles(t);
  const int64_t n = s[0], c = s[1], space = t.numel() / (n * c == 0 ? 1 : n * c);
  Shape shape{n};
  for (size_t a = 2; a < s.size(); ++a) shape.push_back(s[a]);
  shape.push_back(c);
  std::vector<double> out(v.size());
  for (int64_t i = 0; i < n; ++i)
    for (int64_t k = 0; k < c; ++k)
      for (int64_t p = 0; p < space; ++p) out[(i * space + p) * c + k] = v[(i * c + k) * space + p];
  return host_tensor(out, shape, t.dtype());
}
inline Tensor from_nhwc(const Tensor& t) {
  const Shape& s = t.shape();
  const std::vector<double> v = to_doubles(t);
  const int64_t n = s[0], c = s.back(), space = t.numel() / (n * c == 0 ? 1 : n * c);
  Shape shape{n, c};
  for (size_t a = 1; a + 1 < s.size(); ++a) shape.push_back(s[a]);
  std::vector<double> out(v.size());
  for (int64_t i = 0; i < n; ++i)
    for (int64_t k = 0; k < c; ++k)
      for (int64_t p = 0; p < space; ++p) out[(i * c + k) * space + p] = v[(i * space + p) * c + k];
  return host_tensor(out, shape, t.dtype());
}

// The same logical [N, C, spatial...] values stored channels-last (torch's channels_last),
// on `device`.
inline Tensor channels_last_view(const Tensor& t, Device device = Device::cpu()) {
  const Tensor nhwc = to_nhwc(t).to(device);
  const Shape& s = t.shape();
  Shape strides(s.size());
  int64_t step = 1;
  strides[1] = step;
  step *= s[1];
  for (size_t a = s.size() - 1; a >= 2; --a) {
    strides[a] = step;
    step *= s[a];
  }
  strides[0] = step;
  return nhwc.as_strided(s, strides, 0);
}

inline double dot(const Tensor& a, const Tensor& b) {
  const std::vector<double> x = to_doubles(a), y = to_doubles(b);
  double sum = 0.0;
  for (size_t i = 0; i < x.size(); ++i) sum += x[i] * y[i];
  return sum;
}

}  // namespace rudnn::test::conv
