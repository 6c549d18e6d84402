// Layout helpers of the pooling tests.
#pragma once

#include "support/test_support.h"

namespace rudnn::test {

// x's values in a new channels-last dense tensor ([N, spatial..., C] storage seen as
// [N, C, spatial...]) on x's device.
inline Tensor channels_last(const Tensor& x) {
  const Shape& shape = x.shape();
  Shape stored{shape[0]};
  for (size_t a = 2; a < shape.size(); ++a) stored.push_back(shape[a]);
  stored.push_back(shape[1]);
  Shape strides(shape.size());
  int64_t step = shape[1];
  strides[1] = 1;
  for (size_t a = shape.size() - 1; a >= 2; --a) {
    strides[a] = step;
    step *= shape[a];
  }
  strides[0] = step;
  const Tensor t = Tensor::empty(stored, x.dtype(), x.device()).as_strided(shape, strides, 0);
  t.copy_from(x);
  return t;
}

// Whether t's strides are channels-last dense (size-1 axes aside).
inline bool is_channels_last(const Tensor& t) {
  int64_t expected = 1;
  auto fits = [&](size_t axis) {
    const bool ok = t.shape()[axis] == 1 || t.strides()[axis] == expected;
    expected *= t.shape()[axis];
    return ok;
  };
  if (!fits(1)) return false;
  for (size_t a = t.shape().size() - 1; a >= 2; --a) {
    if (!fits(a)) return false;
  }
  return fits(0);
}

}  // namespace rudnn::test
