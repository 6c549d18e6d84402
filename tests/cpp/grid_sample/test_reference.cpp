// The CPU reference of grid_sample and affine_grid: hand-computed values for every option,
// identities (an identity affine grid samples the input back), and the backward passes
// against central finite differences in float64.
#include <cmath>
#include <limits>
#include <vector>

#include "support/test_support.h"

namespace rudnn::test {
namespace {

GridSampleOptions options(GridSampleMode mode, GridSamplePadding padding, bool align_corners) {
  GridSampleOptions o;
  o.mode = mode;
  o.padding = padding;
  o.align_corners = align_corners;
  return o;
}

double sample_one(const std::vector<double>& image, int64_t h, int64_t w, double x, double y,
                  const GridSampleOptions& o) {
  const Tensor input = host_tensor(image, {1, 1, h, w}, DType::f64);
  const Tensor grid = host_tensor({x, y}, {1, 1, 1, 2}, DType::f64);
  return to_doubles(grid_sample(input, grid, o))[0];
}

TEST(GridSampleReference, BilinearHandValues) {
  const std::vector<double> img = {1, 2, 3, 4};
  using M = GridSampleMode;
  using P = GridSamplePadding;
  for (bool ac : {false, true}) {
    EXPECT_DOUBLE_EQ(sample_one(img, 2, 2, 0, 0, options(M::bilinear, P::zeros, ac)), 2.5);
  }
  EXPECT_DOUBLE_EQ(sample_one(img, 2, 2, -1, -1, options(M::bilinear, P::zeros, true)), 1.0);
  // Without align_corners, -1 is the outer edge: half a pixel outside on each axis.
  EXPECT_DOUBLE_EQ(sample_one(img, 2, 2, -1, -1, options(M::bilinear, P::zeros, false)), 0.25);
  EXPECT_DOUBLE_EQ(sample_one(img, 2, 2, -1, -1, options(M::bilinear, P::border, false)), 1.0);
  EXPECT_DOUBLE_EQ(sample_one(img, 2, 2, -1, -1, options(M::bilinear, P::reflection, false)), 1.0);
  // x = 2 with align_corners is pixel 1.5: border clamps it to pixel 1, reflection about
  // pixel 1 gives pixel 0.5, zeros padding weighs pixel 1 by 0.5.
  EXPECT_DOUBLE_EQ(sample_one(img, 2, 2, 2.0, -1, options(M::bilinear, P::border, true)), 2.0);
  EXPECT_DOUBLE_EQ(sample_one(img, 2, 2, 2.0, -1, options(M::bilinear, P::reflection, true)), 1.5);
  EXPECT_DOUBLE_EQ(sample_one(img, 2, 2, 2.0, -1, options(M::bilinear, P::zeros, true)), 1.0);
}

TEST(GridSampleReference, NearestRoundsHalfToEven) {
  const std::vector<double> row = {10, 11, 12, 13};
  const auto o = options(GridSampleMode::nearest, GridSamplePadding::zeros, false);
  // Without align_corners on W = 4, x = -0.5 is pixel 0.5 and x = 0 is pixel 1.5.
  EXPECT_DOUBLE_EQ(sample_one(row, 1, 4, -0.5, 0, o), 10.0);
  EXPECT_DOUBLE_EQ(sample_one(row, 1, 4, 0.0, 0, o), 12.0);
  EXPECT_DOUBLE_EQ(sample_one(row, 1, 4, 0.01, 0, o), 12.0);
  EXPECT_DOUBLE_EQ(sample_one(row, 1, 4, -0.01, 0, o), 11.0);
}

TEST(GridSampleReference, BicubicKeepsConstantsAndHitsPixels) {
  std::vector<double> flat(5 * 6, 7.0);
  RUDNN_SEEDED_RNG(rng);
  for (int i = 0; i < 20; ++i) {
    const double x = rng.uniform(-1, 1), y = rng.uniform(-1, 1);
    EXPECT_NEAR(sample_one(flat, 5, 6, x, y,
                           options(GridSampleMode::bicubic, GridSamplePadding::border, true)),
                7.0, 1e-12);
  }
  std::vector<double> img(5 * 6);
  for (size_t i = 0; i < img.size(); ++i) img[i] = std::sin(static_cast<double>(i));
  // With align_corners, x = -1 + 2 * j / (W - 1) is pixel column j exactly.
  EXPECT_NEAR(sample_one(img, 5, 6, -1 + 2.0 * 2 / 5, -1 + 2.0 * 3 / 4,
                         options(GridSampleMode::bicubic, GridSamplePadding::zeros, true)),
              img[3 * 6 + 2], 1e-12);
}

TEST(GridSampleReference, NonFiniteCoordinatesSampleZero) {
  const std::vector<double> img = {1, 2, 3, 4};
  const double nan = std::numeric_limits<double>::quiet_NaN();
  for (auto pad : {GridSamplePadding::zeros, GridSamplePadding::border}) {
    EXPECT_EQ(sample_one(img, 2, 2, nan, 0, options(GridSampleMode::bilinear, pad, false)), 0.0);
  }
}

TEST(GridSampleReference, IdentityAffineGridSamplesTheInput) {
  RUDNN_SEEDED_RNG(rng);
  for (bool ac : {false, true}) {
    const Tensor input = random_tensor(rng, {2, 3, 5, 7}, DType::f64);
    const Tensor theta = host_tensor({1, 0, 0, 0, 1, 0, 1, 0, 0, 0, 1, 0}, {2, 2, 3}, DType::f64);
    const Tensor grid = affine_grid(theta, {2, 3, 5, 7}, ac);
    for (auto mode : {GridSampleMode::bilinear, GridSampleMode::nearest, GridSampleMode::bicubic}) {
      EXPECT_TRUE(all_close(grid_sample(input, grid, options(mode, GridSamplePadding::zeros, ac)),
                            input, 1e-12));
    }
    const Tensor input3 = random_tensor(rng, {1, 2, 3, 4, 5}, DType::f64);
    const Tensor theta3 = host_tensor({1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0}, {1, 3, 4}, DType::f64);
    const Tensor grid3 = affine_grid(theta3, {1, 2, 3, 4, 5}, ac);
    for (auto mode : {GridSampleMode::bilinear, GridSampleMode::nearest}) {
      EXPECT_TRUE(all_close(grid_sample(input3, grid3, options(mode, GridSamplePadding::zeros, ac)),
                            input3, 1e-12));
    }
  }
}

TEST(GridSampleReference, StridedInputsReadAsDense) {
  RUDNN_SEEDED_RNG(rng);
  const Tensor input = random_tensor(rng, {2, 3, 6, 5}, DType::f64).transpose(2, 3);
  const Tensor grid = random_tensor(rng, {2, 4, 3, 2}, DType::f64, 0.0f, 0.7f);
  EXPECT_TRUE(bit_equal(grid_sample(input, grid), grid_sample(input.contiguous(), grid)));
}

TEST(GridSampleReference, AffineGridHandValues) {
  const Tensor theta = host_tensor({2, 0, 0.5, 0, 1, -1}, {1, 2, 3}, DType::f64);
  // Without align_corners, W = 2 has base x = -0.5, 0.5; H = 1 has base y = 0.
  EXPECT_EQ(to_doubles(affine_grid(theta, {1, 1, 1, 2}, false)),
            (std::vector<double>{-0.5, -1, 1.5, -1}));
  // With align_corners, W = 3 has base x = -1, 0, 1.
  EXPECT_EQ(to_doubles(affine_grid(theta, {1, 1, 1, 3}, true)),
            (std::vector<double>{-1.5, -1, 0.5, -1, 2.5, -1}));
}

double dot(const Tensor& a, const Tensor& b) {
  const auto x = to_doubles(a), y = to_doubles(b);
  double s = 0;
  for (size_t i = 0; i < x.size(); ++i) s += x[i] * y[i];
  return s;
}

TEST(GridSampleReference, AffineGridBackwardIsTheAdjoint) {
  RUDNN_SEEDED_RNG(rng);
  for (bool ac : {false, true}) {
    for (const Shape& size : {Shape{3, 1, 4, 5}, Shape{2, 1, 3, 4, 2}}) {
      const int64_t dims = static_cast<int64_t>(size.size()) - 2;
      const Tensor theta = random_tensor(rng, {size[0], dims, dims + 1}, DType::f64);
      Shape grid_shape = {size[0]};
      for (size_t i = 2; i < size.size(); ++i) grid_shape.push_back(size[i]);
      grid_shape.push_back(dims);
      const Tensor dgrid = random_tensor(rng, grid_shape, DType::f64);
      EXPECT_NEAR(dot(affine_grid(theta, size, ac), dgrid),
                  dot(theta, affine_grid_backward(dgrid, size, ac)), 1e-10);
    }
  }
}

// sum(grid_sample(input, grid) * dout), the scalar whose gradients backward returns.
double loss(const Tensor& input, const Tensor& grid, const Tensor& dout,
            const GridSampleOptions& o) {
  return dot(grid_sample(input, grid, o), dout);
}

Tensor perturbed(const Tensor& t, size_t i, double delta) {
  auto v = to_doubles(t);
  v[i] += delta;
  return host_tensor(v, t.shape(), DType::f64);
}

void check_finite_differences(Rng& rng, const Shape& in_shape, const Shape& grid_shape,
                              const GridSampleOptions& o) {
  SCOPED_TRACE(::testing::Message()
               << "mode " << static_cast<int>(o.mode) << " padding " << static_cast<int>(o.padding)
               << " align_corners " << o.align_corners << " rank " << in_shape.size());
  const Tensor input = random_tensor(rng, in_shape, DType::f64);
  std::vector<double> g(static_cast<size_t>(shape_numel(grid_shape)));
  for (double& v : g) v = rng.uniform(-1.3f, 1.3f);
  const Tensor grid = host_tensor(g, grid_shape, DType::f64);
  const Tensor out = grid_sample(input, grid, o);
  const Tensor dout = random_tensor(rng, out.shape(), DType::f64);
  const GridSampleGrads grads = grid_sample_backward(dout, input, grid, o);
  const double h = 1e-6;
  const auto dinput = to_doubles(grads.dinput);
  for (size_t i = 0; i < dinput.size(); ++i) {
    // The loss is linear in the input: the difference is exact up to rounding.
    const double fd = (loss(perturbed(input, i, h), grid, dout, o) -
                       loss(perturbed(input, i, -h), grid, dout, o)) /
                      (2 * h);
    EXPECT_NEAR(dinput[i], fd, 1e-6) << "dinput[" << i << "]";
  }
  const auto dgrid = to_doubles(grads.dgrid);
  for (size_t i = 0; i < dgrid.size(); ++i) {
    const double fd = (loss(input, perturbed(grid, i, h), dout, o) -
                       loss(input, perturbed(grid, i, -h), dout, o)) /
                      (2 * h);
    EXPECT_NEAR(dgrid[i], fd, 1e-5 * (1 + std::abs(fd))) << "dgrid[" << i << "]";
  }
}

TEST(GridSampleReference, BackwardMatchesFiniteDifferences) {
  RUDNN_SEEDED_RNG(rng);
  for (auto pad :
       {GridSamplePadding::zeros, GridSamplePadding::border, GridSamplePadding::reflection}) {
    for (bool ac : {false, true}) {
      for (auto mode :
           {GridSampleMode::bilinear, GridSampleMode::nearest, GridSampleMode::bicubic}) {
        check_finite_differences(rng, {2, 2, 3, 4}, {2, 2, 3, 2}, options(mode, pad, ac));
      }
      for (auto mode : {GridSampleMode::bilinear, GridSampleMode::nearest}) {
        check_finite_differences(rng, {1, 2, 3, 2, 4}, {1, 2, 2, 2, 3}, options(mode, pad, ac));
      }
    }
  }
}

TEST(GridSampleReference, NearestHasZeroGridGradient) {
  RUDNN_SEEDED_RNG(rng);
  const Tensor input = random_tensor(rng, {1, 2, 3, 4}, DType::f64);
  const Tensor grid = random_tensor(rng, {1, 3, 3, 2}, DType::f64, 0.0f, 0.6f);
  const auto o = options(GridSampleMode::nearest, GridSamplePadding::border, false);
  const Tensor dout = random_tensor(rng, {1, 2, 3, 3}, DType::f64);
  for (double v : to_doubles(grid_sample_backward(dout, input, grid, o).dgrid)) EXPECT_EQ(v, 0.0);
}

}  // namespace
}  // namespace rudnn::test
