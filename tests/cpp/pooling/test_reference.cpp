// The float64 CPU reference against hand values (torch's documented behaviour), finite
// differences for both backwards, and the ceil_mode / NaN / dilation rules.
#include <cmath>
#include <limits>

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
void check_finite_differences(Rng& rng, const Shape& shape, Forward forward, Backward backward) {
  const Tensor x = random_tensor(rng, shape, DType::f64);
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
