// Every rule of the grid_sample family's entry points: a rudnn::Error naming the op, the
// argument and the rule.
#include "support/test_support.h"

namespace rudnn::test {
namespace {

Tensor zeros(const Shape& s, DType dt = DType::f32) { return Tensor::zeros(s, dt); }

TEST(GridSampleErrors, Input) {
  EXPECT_TRUE(throws_error(
      [] {
        grid_sample(Tensor{}, zeros({1, 2, 2, 2}));
      },
      ErrorCode::InvalidArgument, {"grid_sample: input", "undefined"}));
  EXPECT_TRUE(throws_error(
      [] {
        grid_sample(zeros({1, 1, 2, 2}, DType::i32), zeros({1, 2, 2, 2}));
      },
      ErrorCode::DTypeMismatch, {"grid_sample: input", "i32"}));
  EXPECT_TRUE(throws_error(
      [] {
        grid_sample(zeros({1, 2, 2}), zeros({1, 2, 2, 2}));
      },
      ErrorCode::ShapeMismatch, {"grid_sample: input", "4-d"}));
  EXPECT_TRUE(throws_error(
      [] {
        grid_sample(zeros({1, 1, 0, 2}), zeros({1, 2, 2, 2}));
      },
      ErrorCode::InvalidArgument, {"grid_sample: input", "non-empty spatial"}));
}

TEST(GridSampleErrors, Grid) {
  const Tensor x = zeros({2, 1, 3, 3});
  EXPECT_TRUE(throws_error([&] { grid_sample(x, Tensor{}); }, ErrorCode::InvalidArgument,
                           {"grid_sample: grid", "undefined"}));
  EXPECT_TRUE(throws_error(
      [&] {
        grid_sample(x, zeros({2, 2, 2, 2}, DType::f16));
      },
      ErrorCode::DTypeMismatch, {"grid_sample: grid", "input's dtype"}));
  EXPECT_TRUE(throws_error(
      [&] {
        grid_sample(x, zeros({1, 2, 2, 2}));
      },
      ErrorCode::ShapeMismatch, {"grid_sample: grid", "[N, Ho, Wo, 2]", "N = 2"}));
  EXPECT_TRUE(throws_error(
      [&] {
        grid_sample(x, zeros({2, 2, 2, 3}));
      },
      ErrorCode::ShapeMismatch, {"grid_sample: grid", "[N, Ho, Wo, 2]"}));
  EXPECT_TRUE(throws_error(
      [&] {
        grid_sample(x, zeros({2, 1, 2, 2, 2}));
      },
      ErrorCode::ShapeMismatch, {"grid_sample: grid"}));
  EXPECT_TRUE(throws_error(
      [] {
        grid_sample(zeros({1, 1, 2, 2, 2}), zeros({1, 2, 2, 2, 2}));
      },
      ErrorCode::ShapeMismatch, {"grid_sample: grid", "[N, Do, Ho, Wo, 3]"}));
}

TEST(GridSampleErrors, Options) {
  const Tensor x = zeros({1, 1, 3, 3}), g = zeros({1, 2, 2, 2});
  GridSampleOptions o;
  o.mode = static_cast<GridSampleMode>(7);
  EXPECT_TRUE(throws_error([&] { grid_sample(x, g, o); }, ErrorCode::InvalidArgument,
                           {"grid_sample: options.mode is 7"}));
  o = {};
  o.padding = static_cast<GridSamplePadding>(-1);
  EXPECT_TRUE(throws_error([&] { grid_sample(x, g, o); }, ErrorCode::InvalidArgument,
                           {"grid_sample: options.padding is -1"}));
  o = {};
  o.mode = GridSampleMode::bicubic;
  EXPECT_TRUE(throws_error(
      [&] {
        grid_sample(zeros({1, 1, 2, 2, 2}), zeros({1, 1, 1, 1, 3}), o);
      },
      ErrorCode::InvalidArgument, {"grid_sample: options.mode", "bicubic", "2-D"}));
}

TEST(GridSampleErrors, Outputs) {
  const Tensor x = zeros({1, 2, 3, 3}), g = zeros({1, 4, 5, 2});
  EXPECT_TRUE(throws_error(
      [&] {
        grid_sample_into(zeros({1, 2, 4, 4}), x, g);
      },
      ErrorCode::ShapeMismatch, {"grid_sample: out", "[1, 2, 4, 5]"}));
  EXPECT_TRUE(throws_error(
      [&] {
        grid_sample_into(zeros({1, 2, 4, 5}, DType::f16), x, g);
      },
      ErrorCode::DTypeMismatch, {"grid_sample: out", "f16"}));
  const Tensor strided = zeros({1, 2, 5, 4}).transpose(2, 3);
  EXPECT_TRUE(throws_error([&] { grid_sample_into(strided, x, g); }, ErrorCode::InvalidArgument,
                           {"grid_sample: out", "contiguous"}));
}

TEST(GridSampleErrors, Backward) {
  const Tensor x = zeros({1, 2, 3, 3}), g = zeros({1, 4, 5, 2});
  EXPECT_TRUE(throws_error([&] { grid_sample_backward(Tensor{}, x, g); },
                           ErrorCode::InvalidArgument,
                           {"grid_sample_backward: dout", "undefined"}));
  EXPECT_TRUE(throws_error(
      [&] {
        grid_sample_backward(zeros({1, 2, 4, 4}), x, g);
      },
      ErrorCode::ShapeMismatch, {"grid_sample_backward: dout"}));
  EXPECT_TRUE(throws_error(
      [&] {
        grid_sample_backward(zeros({1, 2, 4, 5}, DType::bf16), x, g);
      },
      ErrorCode::DTypeMismatch, {"grid_sample_backward: dout", "input's dtype"}));
  EXPECT_TRUE(throws_error(
      [&] {
        grid_sample_backward_into(zeros({1, 2, 3, 4}), Tensor{}, zeros({1, 2, 4, 5}), x, g);
      },
      ErrorCode::ShapeMismatch, {"grid_sample_backward: dinput_out"}));
  EXPECT_TRUE(throws_error(
      [&] {
        grid_sample_backward_into(Tensor{}, zeros({1, 4, 5, 3}), zeros({1, 2, 4, 5}), x, g);
      },
      ErrorCode::ShapeMismatch, {"grid_sample_backward: dgrid_out"}));
  const Tensor dout = zeros({1, 2, 4, 5});
  EXPECT_TRUE(throws_error([&] { grid_sample_backward_into(Tensor{}, g, dout, x, g); },
                           ErrorCode::InvalidArgument,
                           {"grid_sample_backward: dgrid_out", "overlaps"}));
}

TEST(GridSampleErrors, AffineGrid) {
  const Tensor theta = zeros({2, 2, 3});
  EXPECT_TRUE(throws_error(
      [&] {
        affine_grid(Tensor{}, {2, 1, 3, 3});
      },
      ErrorCode::InvalidArgument, {"affine_grid: theta", "undefined"}));
  EXPECT_TRUE(throws_error(
      [&] {
        affine_grid(zeros({2, 2, 3}, DType::i64), {2, 1, 3, 3});
      },
      ErrorCode::DTypeMismatch, {"affine_grid: theta"}));
  EXPECT_TRUE(throws_error(
      [&] {
        affine_grid(theta, {2, 3, 3});
      },
      ErrorCode::InvalidArgument, {"affine_grid: size", "4 entries"}));
  EXPECT_TRUE(throws_error(
      [&] {
        affine_grid(theta, {2, 1, -3, 3});
      },
      ErrorCode::InvalidArgument, {"affine_grid: size", "negative"}));
  EXPECT_TRUE(throws_error(
      [&] {
        affine_grid(theta, {3, 1, 3, 3});
      },
      ErrorCode::ShapeMismatch, {"affine_grid: theta", "[N, 2, 3]"}));
  EXPECT_TRUE(throws_error(
      [&] {
        affine_grid(theta, {2, 1, 3, 3, 3});
      },
      ErrorCode::ShapeMismatch, {"affine_grid: theta", "[N, 3, 4]"}));
  EXPECT_TRUE(throws_error(
      [&] {
        affine_grid_into(zeros({2, 3, 3, 3}), theta, {2, 1, 3, 3});
      },
      ErrorCode::ShapeMismatch, {"affine_grid: out"}));
  EXPECT_TRUE(throws_error(
      [&] {
        affine_grid_backward(zeros({2, 3, 4, 2}), {2, 1, 3, 3});
      },
      ErrorCode::ShapeMismatch, {"affine_grid_backward: dgrid"}));
  EXPECT_TRUE(throws_error(
      [&] {
        affine_grid_backward(zeros({2, 3, 3, 2}), {2, 1, 3});
      },
      ErrorCode::InvalidArgument, {"affine_grid_backward: size"}));
  EXPECT_TRUE(throws_error(
      [&] {
        affine_grid_backward_into(zeros({2, 2, 4}), zeros({2, 3, 3, 2}), {2, 1, 3, 3});
      },
      ErrorCode::ShapeMismatch, {"affine_grid_backward: dtheta_out"}));
}

}  // namespace
}  // namespace rudnn::test
