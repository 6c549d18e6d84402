// The float64 CPU reference against hand values (torch's documented behaviour), finite
// differences for every backward, the ceil_mode / NaN / dilation rules, adaptive windows,
// LP pooling, and channels-last and strided inputs against contiguous ones.
#include <cmath>
#include <limits>

#include "layouts.h"
#include "support/test_support.h"

namespace rudnn::test {
namespace {

PoolOptions opts(std::vector<int64_t> kernel, std::vector<int64_t> stride = {},
                 std::vector<int64_t> padding = {}, std::vector<int64_t> dilation = {}) {
  PoolOptions o;
  o.kernel = std::move(kernel);
  o.stride = std::move(stride);
  o.padding = std::move(padding);
  o.dilation = std::move(dilation);
  return o;
}

std::vector<int64_t> ints(const Tensor& t) { return t.to_vector<int64_t>(); }

TEST(PoolingReference, MaxPool1dHandValues) {
  const Tensor x = host_tensor({1, 3, 2, 5, 4}, {1, 1, 5}, DType::f64);
  const MaxPoolResult r = max_pool(x, opts({2}, {1}));
  EXPECT_EQ(r.out.shape(), (Shape{1, 1, 4}));
  EXPECT_EQ(to_doubles(r.out), (std::vector<double>{3, 3, 5, 5}));
  EXPECT_EQ(ints(r.indices), (std::vector<int64_t>{1, 1, 3, 3}));
}

TEST(PoolingReference, MaxAndAvgPool2dHandValues) {
  std::vector<double> v(16);
  for (int i = 0; i < 16; ++i) v[i] = i;
  const Tensor x = host_tensor(v, {1, 1, 4, 4}, DType::f64);
  const MaxPoolResult r = max_pool(x, opts({2, 2}));
  EXPECT_EQ(to_doubles(r.out), (std::vector<double>{5, 7, 13, 15}));
  EXPECT_EQ(ints(r.indices), (std::vector<int64_t>{5, 7, 13, 15}));
  EXPECT_EQ(to_doubles(avg_pool(x, opts({2, 2}))), (std::vector<double>{2.5, 4.5, 10.5, 12.5}));
}

TEST(PoolingReference, MaxPool3dIndexIsFlatInPlane) {
  std::vector<double> v(2 * 2 * 2 * 2, 0.0);
  v[8 + 6] = 9.0;  // channel 1, (d, h, w) = (1, 1, 0)
  const Tensor x = host_tensor(v, {1, 2, 2, 2, 2}, DType::f64);
  const MaxPoolResult r = max_pool(x, opts({2, 2, 2}));
  EXPECT_EQ(to_doubles(r.out), (std::vector<double>{0, 9}));
  EXPECT_EQ(ints(r.indices), (std::vector<int64_t>{0, 6}));
}

TEST(PoolingReference, AvgPaddingCountIncludePadAndDivisorOverride) {
  const Tensor x = host_tensor({1, 2, 3}, {1, 1, 3}, DType::f64);
  PoolOptions o = opts({3}, {1}, {1});
  std::vector<double> got = to_doubles(avg_pool(x, o));
  EXPECT_DOUBLE_EQ(got[0], 1.0);
  EXPECT_DOUBLE_EQ(got[1], 2.0);
  EXPECT_DOUBLE_EQ(got[2], 5.0 / 3.0);
  o.count_include_pad = false;
  EXPECT_EQ(to_doubles(avg_pool(x, o)), (std::vector<double>{1.5, 2.0, 2.5}));
  o.divisor_override = 2;
  EXPECT_EQ(to_doubles(avg_pool(x, o)), (std::vector<double>{1.5, 3.0, 2.5}));
}

TEST(PoolingReference, CeilModeFollowsTorchsRule) {
  const Tensor x = host_tensor({1, 2, 3, 4, 5}, {1, 1, 5}, DType::f64);
  PoolOptions o = opts({2}, {2});
  EXPECT_EQ(to_doubles(avg_pool(x, o)), (std::vector<double>{1.5, 3.5}));
  o.ceil_mode = true;
  // The extra window [4, 6) is clipped to the input: its divisor is 1 (torch: [1.5, 3.5, 5]).
  EXPECT_EQ(to_doubles(avg_pool(x, o)), (std::vector<double>{1.5, 3.5, 5.0}));
  EXPECT_EQ(to_doubles(max_pool(x, o).out), (std::vector<double>{2, 4, 5}));
  // L = 2, kernel 1, stride 3: rounding up gives 2 windows, but the second would start at 3,
  // past the input, so torch keeps 1.
  const Tensor y = host_tensor({7, 8}, {1, 1, 2}, DType::f64);
  PoolOptions c = opts({1}, {3});
  c.ceil_mode = true;
  EXPECT_EQ(max_pool(y, c).out.shape(), (Shape{1, 1, 1}));
}

TEST(PoolingReference, NanWinsAndLaterNanReplaces) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const Tensor x = host_tensor({1, nan, 3, nan, 2, nan}, {1, 1, 6}, DType::f64);
  const MaxPoolResult r = max_pool(x, opts({3}));
  const std::vector<double> out = to_doubles(r.out);
  EXPECT_TRUE(std::isnan(out[0]));
  EXPECT_TRUE(std::isnan(out[1]));
  EXPECT_EQ(ints(r.indices), (std::vector<int64_t>{1, 5}));
}

TEST(PoolingReference, DilationAndPaddingNeverWins) {
  const Tensor x = host_tensor({5, 1, 2, 3, 4}, {1, 1, 5}, DType::f64);
  const MaxPoolResult r = max_pool(x, opts({2}, {1}, {}, {2}));
  EXPECT_EQ(to_doubles(r.out), (std::vector<double>{5, 3, 4}));
  EXPECT_EQ(ints(r.indices), (std::vector<int64_t>{0, 3, 4}));
  const Tensor neg = host_tensor({-3, -1, -2}, {1, 1, 3}, DType::f64);
  const MaxPoolResult p = max_pool(neg, opts({3}, {1}, {1}));
  EXPECT_EQ(to_doubles(p.out), (std::vector<double>{-1, -1, -1}));
  EXPECT_EQ(ints(p.indices), (std::vector<int64_t>{1, 1, 1}));
}

TEST(PoolingReference, MaxBackwardRoutesToIndices) {
  const Tensor x = host_tensor({1, 3, 2, 5, 4}, {1, 1, 5}, DType::f64);
  const PoolOptions o = opts({2}, {1});
  const MaxPoolResult r = max_pool(x, o);
  const Tensor dout = host_tensor({1, 10, 100, 1000}, {1, 1, 4}, DType::f64);
  EXPECT_EQ(to_doubles(max_pool_backward(dout, r.indices, x, o)),
            (std::vector<double>{0, 11, 0, 1100, 0}));
}

// d/dx of sum(dout * pool(x)) by central differences, against the backward.
template <class Forward, class Backward>
void check_finite_differences(Rng& rng, const Shape& shape, Forward forward, Backward backward,
                              float mean = 0.0f) {
  SCOPED_TRACE(::testing::Message() << "input " << shape_str(shape));
  const Tensor x = random_tensor(rng, shape, DType::f64, mean);
  const Tensor y = forward(x);
  const Tensor dout = random_tensor(rng, y.shape(), DType::f64);
  const std::vector<double> grad = to_doubles(backward(dout, x));
  const std::vector<double> d = to_doubles(dout);
  std::vector<double> xv = to_doubles(x);
  const double h = 1e-6;
  for (size_t i = 0; i < xv.size(); ++i) {
    auto objective = [&](double delta) {
      std::vector<double> moved = xv;
      moved[i] += delta;
      const std::vector<double> out = to_doubles(forward(host_tensor(moved, shape, DType::f64)));
      double sum = 0.0;
      for (size_t j = 0; j < out.size(); ++j) sum += out[j] * d[j];
      return sum;
    };
    const double numeric = (objective(h) - objective(-h)) / (2 * h);
    EXPECT_NEAR(grad[i], numeric, 1e-6) << "element " << i;
  }
}

TEST(PoolingReference, AvgBackwardMatchesFiniteDifferences) {
  RUDNN_SEEDED_RNG(rng);
  std::vector<PoolOptions> cases;
  cases.push_back(opts({3, 2}, {2, 1}, {1, 1}));
  PoolOptions c = opts({3, 3}, {2, 2}, {1, 1});
  c.ceil_mode = true;
  c.count_include_pad = false;
  cases.push_back(c);
  PoolOptions d = opts({2, 3}, {1, 2}, {0, 1});
  d.divisor_override = 5;
  cases.push_back(d);
  for (const PoolOptions& o : cases) {
    check_finite_differences(
        rng, {2, 2, 5, 6}, [&](const Tensor& x) { return avg_pool(x, o); },
        [&](const Tensor& dy, const Tensor& x) { return avg_pool_backward(dy, x, o); });
  }
  const PoolOptions o3 = opts({2, 3, 2}, {1, 2, 2}, {1, 1, 0});
  check_finite_differences(
      rng, {1, 2, 3, 5, 4}, [&](const Tensor& x) { return avg_pool(x, o3); },
      [&](const Tensor& dy, const Tensor& x) { return avg_pool_backward(dy, x, o3); });
}

TEST(PoolingReference, MaxBackwardMatchesFiniteDifferences) {
  RUDNN_SEEDED_RNG(rng);
  for (const PoolOptions& o :
       {opts({3, 3}, {2, 2}, {1, 1}), opts({2, 2}, {1, 2}, {1, 0}, {2, 1})}) {
    check_finite_differences(
        rng, {2, 2, 6, 7}, [&](const Tensor& x) { return max_pool(x, o).out; },
        [&](const Tensor& dy, const Tensor& x) {
          return max_pool_backward(dy, max_pool(x, o).indices, x, o);
        });
  }
  const PoolOptions o1 = opts({3}, {2}, {1}, {2});
  check_finite_differences(
      rng, {2, 3, 9}, [&](const Tensor& x) { return max_pool(x, o1).out; },
      [&](const Tensor& dy, const Tensor& x) {
        return max_pool_backward(dy, max_pool(x, o1).indices, x, o1);
      });
}

TEST(PoolingReference, EmptyBatchGivesEmptyOutputs) {
  const Tensor x = Tensor::empty({0, 3, 4, 4}, DType::f32);
  EXPECT_EQ(max_pool(x, opts({2, 2})).out.shape(), (Shape{0, 3, 2, 2}));
  EXPECT_EQ(avg_pool(x, opts({2, 2})).shape(), (Shape{0, 3, 2, 2}));
}

}  // namespace
}  // namespace rudnn::test

namespace rudnn::test {
namespace {

TEST(PoolingReference, AdaptiveWindowsFollowTorch) {
  // in 5 -> out 3: windows [0, 2), [1, 4), [3, 5).
  const Tensor x = host_tensor({1, 2, 3, 4, 5}, {1, 1, 5}, DType::f64);
  EXPECT_EQ(to_doubles(adaptive_avg_pool(x, {3})), (std::vector<double>{1.5, 3.0, 4.5}));
  const MaxPoolResult m = adaptive_max_pool(x, {3});
  EXPECT_EQ(to_doubles(m.out), (std::vector<double>{2, 4, 5}));
  EXPECT_EQ(ints(m.indices), (std::vector<int64_t>{1, 3, 4}));
  // in 2 -> out 3 (upsampling): windows [0, 1), [0, 2), [1, 2).
  const Tensor y = host_tensor({1, 5}, {1, 1, 2}, DType::f64);
  EXPECT_EQ(to_doubles(adaptive_avg_pool(y, {3})), (std::vector<double>{1, 3, 5}));
  const MaxPoolResult u = adaptive_max_pool(y, {3});
  EXPECT_EQ(to_doubles(u.out), (std::vector<double>{1, 5, 5}));
  EXPECT_EQ(ints(u.indices), (std::vector<int64_t>{0, 1, 1}));
}

TEST(PoolingReference, AdaptiveOfADivisorIsPlainPooling) {
  RUDNN_SEEDED_RNG(rng);
  const Tensor x2 = random_tensor(rng, {2, 3, 6, 8}, DType::f64);
  EXPECT_TRUE(all_close(adaptive_avg_pool(x2, {3, 2}), avg_pool(x2, opts({2, 4})), 1e-14));
  EXPECT_TRUE(bit_equal(adaptive_max_pool(x2, {3, 2}).indices, max_pool(x2, opts({2, 4})).indices));
  const Tensor x3 = random_tensor(rng, {1, 2, 4, 6, 3}, DType::f64);
  EXPECT_TRUE(all_close(adaptive_avg_pool(x3, {2, 3, 1}), avg_pool(x3, opts({2, 2, 3})), 1e-14));
  EXPECT_TRUE(bit_equal(adaptive_max_pool(x3, {2, 3, 1}).out, max_pool(x3, opts({2, 2, 3})).out));
}

TEST(PoolingReference, GlobalPoolingIsAdaptiveToOne) {
  RUDNN_SEEDED_RNG(rng);
  const Tensor x = random_tensor(rng, {2, 3, 5, 7}, DType::f64);
  const std::vector<double> v = to_doubles(x);
  const std::vector<double> mean = to_doubles(adaptive_avg_pool(x, {1, 1}));
  const MaxPoolResult m = adaptive_max_pool(x, {1, 1});
  ASSERT_EQ(mean.size(), 6u);
  for (size_t plane = 0; plane < 6; ++plane) {
    double sum = 0.0;
    size_t arg = 0;
    for (size_t i = 0; i < 35; ++i) {
      sum += v[plane * 35 + i];
      if (v[plane * 35 + i] > v[plane * 35 + arg]) arg = i;
    }
    EXPECT_NEAR(mean[plane], sum / 35, 1e-14);
    EXPECT_EQ(to_doubles(m.out)[plane], v[plane * 35 + arg]);
    EXPECT_EQ(ints(m.indices)[plane], static_cast<int64_t>(arg));
  }
}

TEST(PoolingReference, LpPoolHandValues) {
  const Tensor x = host_tensor({3, 4, 1, 2, 2}, {1, 1, 5}, DType::f64);
  PoolOptions o = opts({2}, {2});
  std::vector<double> got = to_doubles(lp_pool(x, 2.0, o));
  ASSERT_EQ(got.size(), 2u);
  EXPECT_DOUBLE_EQ(got[0], 5.0);
  EXPECT_DOUBLE_EQ(got[1], std::sqrt(5.0));
  // ceil_mode: the clipped window [4, 6) holds one tap, scaled by K / 1 = 2 as torch's
  // avg_pool(x^p) * K does: sqrt(2 * 4).
  o.ceil_mode = true;
  got = to_doubles(lp_pool(x, 2.0, o));
  ASSERT_EQ(got.size(), 3u);
  EXPECT_DOUBLE_EQ(got[2], std::sqrt(8.0));
  // p = 1 is the plain sum, signs kept; p = 3 of a negative sum is NaN (torch's pow).
  const Tensor n = host_tensor({-3, 1}, {1, 1, 2}, DType::f64);
  EXPECT_EQ(to_doubles(lp_pool(n, 1.0, opts({2}))), (std::vector<double>{-2.0}));
  EXPECT_TRUE(std::isnan(to_doubles(lp_pool(n, 3.0, opts({2})))[0]));
  EXPECT_NEAR(to_doubles(lp_pool(host_tensor({1, 2}, {1, 1, 2}, DType::f64), 3.0, opts({2})))[0],
              std::cbrt(9.0), 1e-15);
}

TEST(PoolingReference, LpBackwardOfAZeroWindowIsZero) {
  const Tensor x = host_tensor({0, 0, 1, 2}, {1, 1, 4}, DType::f64);
  const PoolOptions o = opts({2});
  const Tensor y = lp_pool(x, 2.0, o);
  const std::vector<double> dx =
      to_doubles(lp_pool_backward(host_tensor({1, 1}, {1, 1, 2}, DType::f64), x, y, 2.0, o));
  EXPECT_EQ(dx[0], 0.0);
  EXPECT_EQ(dx[1], 0.0);
  EXPECT_NEAR(dx[2], 1.0 / std::sqrt(5.0), 1e-15);
  EXPECT_NEAR(dx[3], 2.0 / std::sqrt(5.0), 1e-15);
}

TEST(PoolingReference, AdaptiveBackwardsMatchFiniteDifferences) {
  RUDNN_SEEDED_RNG(rng);
  const std::vector<std::pair<Shape, std::vector<int64_t>>> cases = {
      {{2, 2, 7}, {3}}, {{1, 2, 5, 7}, {3, 4}}, {{1, 1, 2, 3}, {3, 5}}, {{1, 2, 3, 4, 2}, {2, 3, 3}}};
  for (const auto& [shape, size] : cases) {
    check_finite_differences(
        rng, shape, [&](const Tensor& x) { return adaptive_avg_pool(x, size); },
        [&](const Tensor& dy, const Tensor& x) { return adaptive_avg_pool_backward(dy, x, size); });
    check_finite_differences(
        rng, shape, [&](const Tensor& x) { return adaptive_max_pool(x, size).out; },
        [&](const Tensor& dy, const Tensor& x) {
          return adaptive_max_pool_backward(dy, adaptive_max_pool(x, size).indices, x, size);
        });
  }
}

TEST(PoolingReference, LpBackwardMatchesFiniteDifferences) {
  RUDNN_SEEDED_RNG(rng);
  PoolOptions ceil = opts({3, 2}, {2, 2});
  ceil.ceil_mode = true;
  for (double p : {1.0, 1.5, 2.0, 3.0}) {
    SCOPED_TRACE(::testing::Message() << "p " << p);
    for (const PoolOptions& o : {opts({2, 2}), opts({3, 2}, {1, 2}), ceil}) {
      // Positive inputs: x^p of a negative x is NaN for p = 1.5.
      check_finite_differences(
          rng, {2, 2, 5, 6}, [&](const Tensor& x) { return lp_pool(x, p, o); },
          [&](const Tensor& dy, const Tensor& x) {
            return lp_pool_backward(dy, x, lp_pool(x, p, o), p, o);
          },
          5.0f);
    }
  }
  const PoolOptions o1 = opts({3}, {2});
  check_finite_differences(
      rng, {2, 3, 9}, [&](const Tensor& x) { return lp_pool(x, 2.0, o1); },
      [&](const Tensor& dy, const Tensor& x) {
        return lp_pool_backward(dy, x, lp_pool(x, 2.0, o1), 2.0, o1);
      });
  const PoolOptions o3 = opts({2, 2, 2}, {1, 2, 1});
  check_finite_differences(
      rng, {1, 2, 3, 4, 3}, [&](const Tensor& x) { return lp_pool(x, 3.0, o3); },
      [&](const Tensor& dy, const Tensor& x) {
        return lp_pool_backward(dy, x, lp_pool(x, 3.0, o3), 3.0, o3);
      },
      5.0f);
}

// Every op on a channels-last input and on a strided (neither layout) input gives the
// contiguous input's results, channels-last results for channels-last problems.
void check_layouts(Rng& rng, const Shape& shape, const PoolOptions& o,
                   const std::vector<int64_t>& size) {
  SCOPED_TRACE(::testing::Message() << "input " << shape_str(shape));
  const Tensor x = random_tensor(rng, shape, DType::f64, 2.0f);
  const Tensor cl = channels_last(x);
  ASSERT_FALSE(cl.is_contiguous());
  // A strided input: every other element of a wider last axis.
  Shape wide = shape;
  wide.back() *= 2;
  const Tensor strided = Tensor::zeros(wide, DType::f64).slice(-1, 0, wide.back(), 2);
  strided.copy_from(x);

  const MaxPoolResult m = max_pool(x, o);
  const MaxPoolResult am = adaptive_max_pool(x, size);
  const Tensor avg = avg_pool(x, o), aavg = adaptive_avg_pool(x, size), lp = lp_pool(x, 2.0, o);
  const Tensor dm = random_tensor(rng, m.out.shape(), DType::f64);
  const Tensor dam = random_tensor(rng, am.out.shape(), DType::f64);
  for (const Tensor* in : {&cl, &strided}) {
    const bool is_cl = in == &cl;
    SCOPED_TRACE(is_cl ? "channels-last" : "strided");
    auto layout_ok = [&](const Tensor& t) {
      return is_cl ? is_channels_last(t) : t.is_contiguous();
    };
    const MaxPoolResult m2 = max_pool(*in, o);
    EXPECT_TRUE(bit_equal(m2.out, m.out));
    EXPECT_TRUE(bit_equal(m2.indices, m.indices));
    EXPECT_TRUE(layout_ok(m2.out) && layout_ok(m2.indices));
    const MaxPoolResult am2 = adaptive_max_pool(*in, size);
    EXPECT_TRUE(bit_equal(am2.out, am.out));
    EXPECT_TRUE(bit_equal(am2.indices, am.indices));
    const Tensor avg2 = avg_pool(*in, o);
    EXPECT_TRUE(bit_equal(avg2, avg));
    EXPECT_TRUE(layout_ok(avg2));
    EXPECT_TRUE(bit_equal(adaptive_avg_pool(*in, size), aavg));
    EXPECT_TRUE(bit_equal(lp_pool(*in, 2.0, o), lp));

    // Backwards: the layout is the input's; dout / indices / out in either layout.
    const Tensor dx = max_pool_backward(channels_last(dm), m.indices, *in, o);
    EXPECT_TRUE(bit_equal(dx, max_pool_backward(dm, m.indices, x, o)));
    EXPECT_TRUE(layout_ok(dx));
    EXPECT_TRUE(bit_equal(adaptive_max_pool_backward(dam, channels_last(am.indices), *in, size),
                          adaptive_max_pool_backward(dam, am.indices, x, size)));
    EXPECT_TRUE(bit_equal(avg_pool_backward(dm, *in, o), avg_pool_backward(dm, x, o)));
    EXPECT_TRUE(bit_equal(adaptive_avg_pool_backward(dam, *in, size),
                          adaptive_avg_pool_backward(dam, x, size)));
    const Tensor dlp = lp_pool_backward(dm, *in, channels_last(lp), 2.0, o);
    EXPECT_TRUE(bit_equal(dlp, lp_pool_backward(dm, x, lp, 2.0, o)));
    EXPECT_TRUE(layout_ok(dlp));
  }
  // _into with a channels-last output.
  const Tensor out = channels_last(Tensor::zeros(avg.shape(), DType::f64));
  avg_pool_into(out, cl, o);
  EXPECT_TRUE(bit_equal(out, avg));
}

TEST(PoolingReference, ChannelsLastAndStridedInputsMatchContiguous) {
  RUDNN_SEEDED_RNG(rng);
  check_layouts(rng, {2, 3, 9}, opts({3}, {2}), {4});
  check_layouts(rng, {2, 3, 6, 7}, opts({2, 3}, {2, 2}), {4, 3});
  check_layouts(rng, {1, 4, 4, 5, 3}, opts({2, 2, 2}, {2, 1, 1}), {3, 2, 2});
}

}  // namespace
}  // namespace rudnn::test
