// The float64 CPU reference against hand values (torch's documented results), independent
// formulas (Keys' cubic kernel, linear functions reproduced exactly), the scale-factor rules,
// and the backward as the forward's adjoint (<A x, y> = <x, A^T y>) and against finite
// differences.
#include <cmath>
#include <vector>

#include "options.h"
#include "support/test_support.h"

namespace rudnn::test {
namespace {

using Mode = InterpolateMode;

Tensor row(const std::vector<double>& v) {
  return host_tensor(v, {1, 1, static_cast<int64_t>(v.size())}, DType::f64);
}

void expect_values(const Tensor& got, const std::vector<double>& expected) {
  const std::vector<double> g = to_doubles(got);
  ASSERT_EQ(g.size(), expected.size());
  for (size_t i = 0; i < g.size(); ++i) EXPECT_NEAR(g[i], expected[i], 1e-12) << "element " << i;
}

TEST(InterpolationReference, Nearest1dHandValues) {
  const Tensor x = row({1, 2, 3, 4});
  expect_values(interpolate(x, by_size(Mode::nearest, {8})), {1, 1, 2, 2, 3, 3, 4, 4});
  expect_values(interpolate(x, by_size(Mode::nearest, {3})), {1, 2, 3});
  expect_values(interpolate(x, by_size(Mode::nearest_exact, {3})), {1, 3, 4});
  expect_values(interpolate(x, by_size(Mode::nearest_exact, {8})), {1, 1, 2, 2, 3, 3, 4, 4});
  expect_values(interpolate(x, by_size(Mode::nearest, {5})), {1, 1, 2, 3, 4});
  expect_values(interpolate(x, by_size(Mode::nearest_exact, {5})), {1, 2, 3, 3, 4});
}

TEST(InterpolationReference, Linear1dHandValues) {
  const Tensor x = row({1, 2, 3, 4});
  expect_values(interpolate(x, by_size(Mode::linear, {8})),
                {1, 1.25, 1.75, 2.25, 2.75, 3.25, 3.75, 4});
  expect_values(interpolate(x, by_size(Mode::linear, {7}, true)), {1, 1.5, 2, 2.5, 3, 3.5, 4});
  expect_values(interpolate(x, by_size(Mode::linear, {1}, true)), {1});
  // Downsampling without align_corners: src = 2 (o + 0.5) - 0.5 = 0.5, 2.5.
  expect_values(interpolate(x, by_size(Mode::linear, {2})), {1.5, 3.5});
}

TEST(InterpolationReference, AreaIsAdaptiveAveragePooling) {
  expect_values(interpolate(row({1, 2, 3, 4, 5}), by_size(Mode::area, {2})), {2, 4});
  expect_values(interpolate(row({1, 2, 3, 4}), by_size(Mode::area, {2})), {1.5, 3.5});
  expect_values(interpolate(row({1, 2, 3}), by_size(Mode::area, {5})), {1, 1.5, 2, 2.5, 3});
  std::vector<double> v(16);
  for (int i = 0; i < 16; ++i) v[i] = i;
  expect_values(interpolate(host_tensor(v, {1, 1, 4, 4}, DType::f64), by_size(Mode::area, {2, 2})),
                {2.5, 4.5, 10.5, 12.5});
}

// Keys' cubic convolution kernel with A = -0.75, written as a function of distance.
double keys(double d) {
  const double A = -0.75, x = std::fabs(d);
  if (x <= 1) return (A + 2) * x * x * x - (A + 3) * x * x + 1;
  if (x < 2) return A * x * x * x - 5 * A * x * x + 8 * A * x - 4 * A;
  return 0;
}

TEST(InterpolationReference, BicubicMatchesKeysKernelWithClampedTaps) {
  const std::vector<double> v = {1, 2, 4, 8, -3, 5};
  const int64_t W = 6;
  const Tensor x = host_tensor(v, {1, 1, 1, W}, DType::f64);
  for (bool align : {false, true}) {
    for (int64_t Wo : {4, 9, 13}) {
      SCOPED_TRACE(::testing::Message() << "align_corners " << align << " Wo " << Wo);
      const std::vector<double> got =
          to_doubles(interpolate(x, by_size(Mode::bicubic, {1, Wo}, align)));
      const double r = align ? double(W - 1) / double(Wo - 1) : double(W) / double(Wo);
      for (int64_t o = 0; o < Wo; ++o) {
        const double src = align ? r * o : r * (o + 0.5) - 0.5;
        const int64_t i0 = static_cast<int64_t>(std::floor(src));
        double expected = 0;
        for (int64_t k = -1; k <= 2; ++k) {
          const int64_t i = std::min<int64_t>(std::max<int64_t>(i0 + k, 0), W - 1);
          expected += keys(src - double(i0 + k)) * v[i];
        }
        EXPECT_NEAR(got[o], expected, 1e-12) << "output " << o;
      }
    }
  }
}

// With align_corners the linear modes reproduce a linear function of the coordinates exactly.
TEST(InterpolationReference, LinearModesReproduceLinearFunctions) {
  const int64_t D = 3, H = 4, W = 5, Do = 7, Ho = 6, Wo = 9;
  std::vector<double> v;
  for (int64_t z = 0; z < D; ++z)
    for (int64_t y = 0; y < H; ++y)
      for (int64_t x = 0; x < W; ++x) v.push_back(1.0 + z - 2.0 * y + 0.5 * x);
  const std::vector<double> got = to_doubles(
      interpolate(host_tensor(v, {1, 1, D, H, W}, DType::f64), by_size(Mode::trilinear, {Do, Ho, Wo}, true)));
  size_t i = 0;
  for (int64_t z = 0; z < Do; ++z)
    for (int64_t y = 0; y < Ho; ++y)
      for (int64_t x = 0; x < Wo; ++x, ++i) {
        const double sz = z * double(D - 1) / (Do - 1), sy = y * double(H - 1) / (Ho - 1),
                     sx = x * double(W - 1) / (Wo - 1);
        EXPECT_NEAR(got[i], 1.0 + sz - 2.0 * sy + 0.5 * sx, 1e-12) << "output " << i;
      }
  // Bicubic's interior taps reproduce it too (its weights sum to 1 with first moment t).
  const std::vector<double> plane(v.begin(), v.begin() + H * W);
  const std::vector<double> cubic = to_doubles(interpolate(
      host_tensor(plane, {1, 1, H, W}, DType::f64), by_size(Mode::bicubic, {7, 9}, true)));
  const int64_t y = 3, x = 4;  // src (1.5, 2): every tap inside
  EXPECT_NEAR(cubic[y * 9 + x], 1.0 - 2.0 * 1.5 + 0.5 * 2.0, 1e-12);
}

TEST(InterpolationReference, ScaleFactorGivesOneOverScaleUnlessRecomputed) {
  // in 5, scale 2.3: 11 outputs; nearest at o = 9 is floor(9 / 2.3) = 3 with the scale,
  // floor(9 * 5 / 11) = 4 with recompute_scale_factor (as size 11).
  const Tensor x = row({0, 1, 2, 3, 4});
  EXPECT_EQ(interpolate_output_shape(x.shape(), by_scale(Mode::nearest, {2.3})), (Shape{1, 1, 11}));
  expect_values(interpolate(x, by_scale(Mode::nearest, {2.3})),
                {0, 0, 0, 1, 1, 2, 2, 3, 3, 3, 4});
  expect_values(interpolate(x, by_scale(Mode::nearest, {2.3}, true)),
                {0, 0, 0, 1, 1, 2, 2, 3, 3, 4, 4});
  expect_values(interpolate(x, by_size(Mode::nearest, {11})), {0, 0, 0, 1, 1, 2, 2, 3, 3, 4, 4});
  // Linear: src = (o + 0.5) / 2.3 - 0.5 at o = 10 is 4.065... -> the last pixel.
  const std::vector<double> lin = to_doubles(interpolate(x, by_scale(Mode::linear, {2.3})));
  EXPECT_NEAR(lin[1], 1.5 / 2.3 - 0.5, 1e-12);
  EXPECT_NEAR(lin[10], 4.0, 1e-12);
  const std::vector<double> rec = to_doubles(interpolate(x, by_scale(Mode::linear, {2.3}, true)));
  EXPECT_NEAR(rec[1], 1.5 * 5.0 / 11.0 - 0.5, 1e-12);
  // Output sizes round down; one entry stands for every axis.
  EXPECT_EQ(interpolate_output_shape({2, 3, 5, 7}, by_scale(Mode::bilinear, {0.5})),
            (Shape{2, 3, 2, 3}));
  EXPECT_EQ(interpolate_output_shape({2, 3, 5, 7}, by_scale(Mode::nearest, {1.5, 0.3})),
            (Shape{2, 3, 7, 2}));
  EXPECT_EQ(interpolate_output_shape({2, 3, 4, 5, 6}, by_size(Mode::area, {3})),
            (Shape{2, 3, 3, 3, 3}));
}

TEST(InterpolationReference, SameSizeLinearCopiesNearestFollowsTheScale) {
  // scale 1.0001 on 10 pixels keeps 10: torch's linear kernels copy, its nearest rule
  // samples at floor(o / 1.0001) (9 -> 8).
  std::vector<double> v(10);
  for (int i = 0; i < 10; ++i) v[i] = i;
  const Tensor x = row(v);
  expect_values(interpolate(x, by_scale(Mode::linear, {1.0001})), v);
  // floor(o * 0.9999) = o - 1 for o >= 1.
  std::vector<double> nearest = {0, 0, 1, 2, 3, 4, 5, 6, 7, 8};
  expect_values(interpolate(x, by_scale(Mode::nearest, {1.0001})), nearest);
  expect_values(interpolate(x, by_size(Mode::nearest, {10})), v);
}

TEST(InterpolationReference, NonFiniteValuesPropagate) {
  const double inf = INFINITY;
  const std::vector<double> near = to_doubles(interpolate(row({1, inf, 3}), by_size(Mode::nearest, {6})));
  EXPECT_TRUE(std::isinf(near[2]) && std::isinf(near[3]));
  EXPECT_EQ(near[0], 1.0);
  // A zero linear weight on an infinite neighbour gives NaN, as in torch (0 * inf).
  const std::vector<double> lin =
      to_doubles(interpolate(row({1, 2, inf}), by_size(Mode::linear, {5}, true)));
  EXPECT_EQ(lin[0], 1.0);
  EXPECT_TRUE(std::isnan(lin[2]));
  // The last pixel is read twice (weights 1 and 0, as torch's kernels do): NaN as well.
  EXPECT_TRUE(std::isnan(lin[4]));
  EXPECT_TRUE(std::isinf(lin[3]));
}

struct Case {
  Shape in;
  InterpolateOptions o;
};

std::vector<Case> adjoint_cases() {
  std::vector<Case> cases;
  for (Mode m : {Mode::nearest, Mode::nearest_exact, Mode::area}) {
    cases.push_back({{2, 3, 7}, by_size(m, {12})});
    cases.push_back({{2, 3, 13}, by_size(m, {5})});
    cases.push_back({{1, 2, 5, 7}, by_scale(m, {1.7, 0.6})});
    cases.push_back({{1, 2, 3, 4, 5}, by_size(m, {5, 3, 9})});
  }
  for (bool align : {false, true}) {
    cases.push_back({{2, 3, 7}, by_size(Mode::linear, {12}, align)});
    cases.push_back({{2, 3, 13}, by_size(Mode::linear, {5}, align)});
    cases.push_back({{1, 2, 5, 7}, by_scale(Mode::bilinear, {1.7, 0.6}, false, align)});
    cases.push_back({{1, 2, 5, 7}, by_scale(Mode::bicubic, {2.5, 0.7}, false, align)});
    cases.push_back({{1, 2, 9, 4}, by_size(Mode::bicubic, {4, 11}, align)});
    cases.push_back({{1, 2, 3, 4, 5}, by_size(Mode::trilinear, {5, 3, 9}, align)});
  }
  cases.push_back({{1, 2, 4, 6}, by_scale(Mode::bilinear, {2.3}, true)});
  return cases;
}

double dot(const std::vector<double>& a, const std::vector<double>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

TEST(InterpolationReference, BackwardIsTheAdjoint) {
  RUDNN_SEEDED_RNG(rng);
  for (const Case& c : adjoint_cases()) {
    SCOPED_TRACE(::testing::Message() << "mode " << static_cast<int>(c.o.mode) << " input "
                                      << shape_str(c.in));
    const Tensor x = random_tensor(rng, c.in, DType::f64);
    const Tensor ax = interpolate(x, c.o);
    const Tensor y = random_tensor(rng, ax.shape(), DType::f64);
    const Tensor aty = interpolate_backward(y, c.in, c.o);
    ASSERT_EQ(aty.shape(), c.in);
    const double lhs = dot(to_doubles(ax), to_doubles(y)), rhs = dot(to_doubles(x), to_doubles(aty));
    EXPECT_NEAR(lhs, rhs, 1e-10 * (1 + std::fabs(lhs)));
  }
}

TEST(InterpolationReference, BackwardMatchesFiniteDifferences) {
  RUDNN_SEEDED_RNG(rng);
  for (const Case& c : {Case{{1, 2, 4, 5}, by_size(Mode::bicubic, {7, 3})},
                        Case{{1, 1, 3, 4, 3}, by_scale(Mode::trilinear, {1.5, 0.75, 2.0})},
                        Case{{2, 1, 6}, by_size(Mode::area, {4})}}) {
    const Tensor x = random_tensor(rng, c.in, DType::f64);
    const Tensor dout = random_tensor(rng, interpolate_output_shape(c.in, c.o), DType::f64);
    const std::vector<double> grad = to_doubles(interpolate_backward(dout, c.in, c.o));
    const std::vector<double> d = to_doubles(dout);
    std::vector<double> xv = to_doubles(x);
    const double h = 1e-6;
    for (size_t i = 0; i < xv.size(); ++i) {
      auto objective = [&](double delta) {
        std::vector<double> moved = xv;
        moved[i] += delta;
        return dot(to_doubles(interpolate(host_tensor(moved, c.in, DType::f64), c.o)), d);
      };
      EXPECT_NEAR(grad[i], (objective(h) - objective(-h)) / (2 * h), 1e-6) << "element " << i;
    }
  }
}

TEST(InterpolationReference, BackwardHandValues) {
  // Linear 4 -> 8 (no align): input 0 gets outputs 0, 1 (0.75), 2 (0.25), ...
  expect_values(interpolate_backward(row({1, 1, 1, 1, 1, 1, 1, 1}), {1, 1, 4}, by_size(Mode::linear, {8})),
                {2, 2, 2, 2});
  expect_values(interpolate_backward(row({1, 10, 100, 1000, 1e4, 1e5, 1e6, 1e7}), {1, 1, 4},
                                     by_size(Mode::nearest, {8})),
                {11, 1100, 110000, 11000000});
  expect_values(interpolate_backward(row({3, 6}), {1, 1, 5}, by_size(Mode::area, {2})),
                {1, 1, 3, 2, 2});
}

TEST(InterpolationReference, OtherDtypesAndLayouts) {
  RUDNN_SEEDED_RNG(rng);
  const InterpolateOptions o = by_scale(Mode::bilinear, {1.6, 2.2});
  for (DType dt : {DType::f32, DType::f16, DType::bf16}) {
    SCOPED_TRACE(dtype_name(dt));
    const Tensor x = random_tensor(rng, {2, 3, 5, 6}, dt);
    const Tensor expected = interpolate(host_tensor(to_doubles(x), x.shape(), DType::f64), o);
    const Tensor got = interpolate(x, o);
    EXPECT_EQ(got.dtype(), dt);
    EXPECT_TRUE(all_close(host_tensor(to_doubles(got), got.shape(), DType::f64), expected,
                          tolerance(dt)));
  }
  // A non-contiguous input (W and H swapped, then swapped back by the options) reads as its
  // logical values.
  const Tensor t = random_tensor(rng, {2, 3, 6, 5}, DType::f64).transpose(2, 3);
  EXPECT_TRUE(bit_equal(interpolate(t, o), interpolate(t.contiguous(), o)));
  const Tensor dout = random_tensor(rng, {2, 3, 8, 13}, DType::f64).transpose(2, 3);
  const InterpolateOptions ob = by_size(Mode::bilinear, {13, 8});
  EXPECT_TRUE(bit_equal(interpolate_backward(dout, {2, 3, 5, 6}, ob),
                        interpolate_backward(dout.contiguous(), {2, 3, 5, 6}, ob)));
}

TEST(InterpolationReference, EmptyBatchAndIntoForms) {
  const Tensor x = Tensor::empty({0, 3, 4, 4}, DType::f32);
  EXPECT_EQ(interpolate(x, by_size(Mode::bilinear, {8, 8})).shape(), (Shape{0, 3, 8, 8}));
  EXPECT_EQ(interpolate_backward(Tensor::empty({0, 3, 8, 8}, DType::f32), {0, 3, 4, 4},
                                 by_size(Mode::bilinear, {8, 8}))
                .shape(),
            (Shape{0, 3, 4, 4}));
  RUDNN_SEEDED_RNG(rng);
  const Tensor y = random_tensor(rng, {1, 2, 3, 5}, DType::f32);
  const InterpolateOptions o = by_size(Mode::bicubic, {4, 7});
  const Tensor out = poisoned({1, 2, 4, 7}, DType::f32, Device::cpu());
  interpolate_into(out, y, o);
  EXPECT_TRUE(bit_equal(out, interpolate(y, o)));
  const Tensor dout = random_tensor(rng, {1, 2, 4, 7}, DType::f32);
  const Tensor dx = poisoned({1, 2, 3, 5}, DType::f32, Device::cpu());
  interpolate_backward_into(dx, dout, y.shape(), o);
  EXPECT_TRUE(bit_equal(dx, interpolate_backward(dout, y.shape(), o)));
}

}  // namespace
}  // namespace rudnn::test
