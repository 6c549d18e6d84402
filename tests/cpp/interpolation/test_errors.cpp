// Every rule of the interpolation family's entry points: a rudnn::Error naming the op, the
// argument and the rule, thrown before any output is written.
#include <cmath>
#include <limits>

#include "options.h"
#include "support/test_support.h"

namespace rudnn::test {
namespace {

using Mode = InterpolateMode;

Tensor zeros(const Shape& s, DType dt = DType::f32) { return Tensor::zeros(s, dt); }

TEST(InterpolationErrors, Input) {
  const InterpolateOptions o = by_size(Mode::nearest, {4, 4});
  EXPECT_TRUE(throws_error([&] { interpolate(Tensor{}, o); }, ErrorCode::InvalidArgument,
                           {"interpolate: input", "undefined"}));
  EXPECT_TRUE(throws_error([&] { interpolate(zeros({1, 1, 4, 4}, DType::i32), o); },
                           ErrorCode::DTypeMismatch, {"interpolate: input", "i32"}));
  EXPECT_TRUE(throws_error([&] { interpolate(zeros({4, 4}), o); }, ErrorCode::ShapeMismatch,
                           {"interpolate: input has shape [4, 4]", "3-d [N, C, L]"}));
  EXPECT_TRUE(throws_error([&] { interpolate(zeros({1, 1, 1, 1, 1, 1}), o); },
                           ErrorCode::ShapeMismatch, {"interpolate: input", "5-d"}));
  EXPECT_TRUE(throws_error([&] { interpolate(zeros({1, 1, 0, 4}), o); },
                           ErrorCode::InvalidArgument, {"interpolate: input", "empty axis"}));
  EXPECT_TRUE(throws_error([&] { interpolate(zeros({1, 0, 4, 4}), o); },
                           ErrorCode::InvalidArgument, {"interpolate: input", "empty axis"}));
}

TEST(InterpolationErrors, ModeAndRank) {
  EXPECT_TRUE(throws_error([&] { interpolate(zeros({1, 1, 4, 4}), by_size(Mode::linear, {8})); },
                           ErrorCode::InvalidArgument,
                           {"interpolate: options.mode linear takes 3-d input", "[1, 1, 4, 4]"}));
  EXPECT_TRUE(throws_error([&] { interpolate(zeros({1, 1, 4}), by_size(Mode::bilinear, {8})); },
                           ErrorCode::InvalidArgument,
                           {"interpolate: options.mode bilinear takes 4-d input"}));
  EXPECT_TRUE(throws_error(
      [&] { interpolate(zeros({1, 1, 4, 4}), by_size(Mode::trilinear, {8})); },
      ErrorCode::InvalidArgument, {"interpolate: options.mode trilinear takes 5-d input"}));
  EXPECT_TRUE(throws_error(
      [&] { interpolate(zeros({1, 1, 2, 4, 4}), by_size(Mode::bicubic, {8})); },
      ErrorCode::InvalidArgument, {"interpolate: options.mode bicubic takes 4-d input"}));
  InterpolateOptions bad = by_size(Mode::nearest, {8});
  bad.mode = static_cast<Mode>(42);
  EXPECT_TRUE(throws_error([&] { interpolate(zeros({1, 1, 4}), bad); },
                           ErrorCode::InvalidArgument, {"interpolate: options.mode is 42"}));
}

TEST(InterpolationErrors, AlignCornersOnlyForLinearAndCubic) {
  for (Mode m : {Mode::nearest, Mode::nearest_exact, Mode::area}) {
    for (bool value : {false, true}) {
      EXPECT_TRUE(throws_error([&] { interpolate(zeros({1, 1, 4}), by_size(m, {8}, value)); },
                               ErrorCode::InvalidArgument,
                               {"interpolate: options.align_corners is set with mode"}));
    }
  }
  EXPECT_NO_THROW(interpolate(zeros({1, 1, 4}), by_size(Mode::linear, {8}, false)));
  EXPECT_NO_THROW(interpolate(zeros({1, 1, 4, 4}), by_size(Mode::bicubic, {8}, true)));
}

TEST(InterpolationErrors, SizeAndScaleFactor) {
  const Tensor x = zeros({1, 1, 4, 4});
  InterpolateOptions both = by_size(Mode::nearest, {8});
  both.scale_factor = {2.0};
  EXPECT_TRUE(throws_error([&] { interpolate(x, both); }, ErrorCode::InvalidArgument,
                           {"interpolate: options.size and options.scale_factor are both given",
                            "exactly one"}));
  EXPECT_TRUE(throws_error([&] { interpolate(x, InterpolateOptions{}); },
                           ErrorCode::InvalidArgument,
                           {"interpolate: options.size and options.scale_factor are both empty"}));
  InterpolateOptions recompute = by_size(Mode::nearest, {8});
  recompute.recompute_scale_factor = true;
  EXPECT_TRUE(throws_error([&] { interpolate(x, recompute); }, ErrorCode::InvalidArgument,
                           {"interpolate: options.recompute_scale_factor", "explicit"}));
  EXPECT_TRUE(throws_error([&] { interpolate(x, by_size(Mode::nearest, {8, 8, 8})); },
                           ErrorCode::InvalidArgument,
                           {"interpolate: options.size has 3 entries", "or 2 (one per spatial axis)"}));
  EXPECT_TRUE(throws_error([&] { interpolate(zeros({1, 1, 4}), by_scale(Mode::nearest, {2, 2})); },
                           ErrorCode::InvalidArgument,
                           {"interpolate: options.scale_factor has 2 entries", "expected 1"}));
}

TEST(InterpolationErrors, OutputSizes) {
  const Tensor x = zeros({1, 1, 4, 4});
  for (int64_t bad : {int64_t{0}, int64_t{-3}, int64_t{1} << 31}) {
    EXPECT_TRUE(throws_error([&] { interpolate(x, by_size(Mode::bilinear, {8, bad})); },
                             ErrorCode::InvalidArgument,
                             {"interpolate: options.size is", "spatial axis 1", "0 < size < 2^31"}));
  }
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = INFINITY;
  for (double bad : {0.0, -2.0, nan, inf, -inf}) {
    EXPECT_TRUE(throws_error([&] { interpolate(x, by_scale(Mode::nearest, {bad})); },
                             ErrorCode::InvalidArgument,
                             {"interpolate: options.scale_factor is", "finite and > 0"}));
  }
  EXPECT_TRUE(throws_error([&] { interpolate(x, by_scale(Mode::nearest, {1.0, 0.2})); },
                           ErrorCode::InvalidArgument,
                           {"interpolate: input has shape [1, 1, 4, 4]", "output size 0",
                            "0 < output size < 2^31"}));
  EXPECT_TRUE(throws_error([&] { interpolate(x, by_scale(Mode::nearest, {1e300})); },
                           ErrorCode::InvalidArgument, {"interpolate: input", "output size"}));
  EXPECT_TRUE(throws_error(
      [&] { interpolate_output_shape({1, 1, int64_t{1} << 31}, by_size(Mode::nearest, {4})); },
      ErrorCode::InvalidArgument, {"interpolate: input_shape", "spatial size < 2^31"}));
  EXPECT_TRUE(throws_error(
      [&] {
        interpolate_backward(zeros({1, 1, 4}), {1, 1, int64_t{1} << 31}, by_size(Mode::nearest, {4}));
      },
      ErrorCode::InvalidArgument, {"interpolate_backward: input_shape", "spatial size < 2^31"}));
}

TEST(InterpolationErrors, Backward) {
  const InterpolateOptions o = by_size(Mode::bilinear, {8, 6});
  EXPECT_TRUE(throws_error([&] { interpolate_backward(Tensor{}, {1, 1, 4, 4}, o); },
                           ErrorCode::InvalidArgument, {"interpolate_backward: dout", "undefined"}));
  EXPECT_TRUE(throws_error(
      [&] { interpolate_backward(zeros({1, 1, 8, 6}, DType::i64), {1, 1, 4, 4}, o); },
      ErrorCode::DTypeMismatch, {"interpolate_backward: dout", "i64"}));
  EXPECT_TRUE(throws_error([&] { interpolate_backward(zeros({1, 1, 6, 8}), {1, 1, 4, 4}, o); },
                           ErrorCode::ShapeMismatch,
                           {"interpolate_backward: dout has shape [1, 1, 6, 8]", "[1, 1, 8, 6]"}));
  EXPECT_TRUE(throws_error([&] { interpolate_backward(zeros({2, 1, 8, 6}), {1, 1, 4, 4}, o); },
                           ErrorCode::ShapeMismatch, {"interpolate_backward: dout"}));
  EXPECT_TRUE(throws_error([&] { interpolate_backward(zeros({1, 1, 8, 6}), {1, 4, 4}, o); },
                           ErrorCode::InvalidArgument,
                           {"interpolate_backward: options.mode bilinear", "input_shape"}));
  EXPECT_TRUE(throws_error([&] { interpolate_backward(zeros({1, 1, 8, 6}), {4, 4}, o); },
                           ErrorCode::ShapeMismatch, {"interpolate_backward: input_shape"}));
  EXPECT_TRUE(throws_error([&] { interpolate_backward(zeros({1, 1, 8, 6}), {1, 1, 0, 4}, o); },
                           ErrorCode::InvalidArgument,
                           {"interpolate_backward: input_shape", "empty axis"}));
}

TEST(InterpolationErrors, IntoOutputs) {
  const Tensor x = zeros({1, 2, 4, 4});
  const InterpolateOptions o = by_size(Mode::nearest, {8, 8});
  EXPECT_TRUE(throws_error([&] { interpolate_into(zeros({1, 2, 8, 7}), x, o); },
                           ErrorCode::ShapeMismatch, {"interpolate: out has shape"}));
  EXPECT_TRUE(throws_error([&] { interpolate_into(zeros({1, 2, 8, 8}, DType::f16), x, o); },
                           ErrorCode::DTypeMismatch, {"interpolate: out has dtype f16"}));
  EXPECT_TRUE(throws_error([&] { interpolate_into(zeros({1, 2, 8, 8}).transpose(2, 3), x, o); },
                           ErrorCode::InvalidArgument, {"interpolate: out must be contiguous"}));
  EXPECT_TRUE(throws_error([&] { interpolate_into(Tensor{}, x, o); }, ErrorCode::InvalidArgument,
                           {"interpolate: out", "undefined"}));
  // The output aliasing the input (same size: identity shapes).
  const Tensor same = zeros({1, 2, 4, 4});
  EXPECT_TRUE(throws_error([&] { interpolate_into(same, same, by_size(Mode::nearest, {4, 4})); },
                           ErrorCode::InvalidArgument, {"interpolate: out overlaps input"}));
  const Tensor dout = zeros({1, 2, 8, 8});
  EXPECT_TRUE(throws_error([&] { interpolate_backward_into(zeros({1, 2, 4, 5}), dout, x.shape(), o); },
                           ErrorCode::ShapeMismatch, {"interpolate_backward: dinput_out"}));
  EXPECT_TRUE(throws_error(
      [&] { interpolate_backward_into(dout, dout, {1, 2, 8, 8}, by_size(Mode::nearest, {8, 8})); },
      ErrorCode::InvalidArgument, {"interpolate_backward: dinput_out overlaps dout"}));
}

TEST(InterpolationErrors, OutputUntouchedAfterError) {
  RUDNN_SEEDED_RNG(rng);
  const Tensor out = random_tensor(rng, {1, 1, 8}, DType::f32);
  const std::vector<unsigned char> before = bytes_of(out);
  EXPECT_THROW(interpolate_into(out, zeros({1, 1, 4}), by_size(Mode::nearest, {8}, true)), Error);
  EXPECT_THROW(interpolate_into(out, zeros({1, 1, 4}), by_scale(Mode::nearest, {-2.0})), Error);
  EXPECT_EQ(bytes_of(out), before);
}

TEST(InterpolationErrors, GpuDtypeAndDevices) {
  RUDNN_REQUIRE_CUDA();
  const Device gpu = Device::cuda(0);
  const InterpolateOptions o = by_size(Mode::bilinear, {8, 8});
  EXPECT_TRUE(throws_error([&] { interpolate(zeros({1, 1, 4, 4}, DType::f64).to(gpu), o); },
                           ErrorCode::DTypeMismatch, {"interpolate: input", "f64 runs on the CPU only"}));
  EXPECT_TRUE(throws_error([&] { interpolate_into(zeros({1, 1, 8, 8}), zeros({1, 1, 4, 4}).to(gpu), o); },
                           ErrorCode::DeviceMismatch, {"interpolate: out is on cpu"}));
  EXPECT_TRUE(throws_error(
      [&] {
        interpolate_backward_into(zeros({1, 1, 4, 4}), zeros({1, 1, 8, 8}).to(gpu), {1, 1, 4, 4}, o);
      },
      ErrorCode::DeviceMismatch, {"interpolate_backward: dinput_out is on cpu"}));
}

}  // namespace
}  // namespace rudnn::test
