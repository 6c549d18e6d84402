// Every rule of the pooling family's entry points: a rudnn::Error naming the op, the argument
// and the rule.
#include <limits>

#include "layouts.h"
#include "support/test_support.h"

namespace rudnn::test {
namespace {

Tensor zeros(const Shape& s, DType dt = DType::f32) { return Tensor::zeros(s, dt); }

PoolOptions opts(std::vector<int64_t> kernel, std::vector<int64_t> stride = {},
                 std::vector<int64_t> padding = {}, std::vector<int64_t> dilation = {}) {
  PoolOptions o;
  o.kernel = std::move(kernel);
  o.stride = std::move(stride);
  o.padding = std::move(padding);
  o.dilation = std::move(dilation);
  return o;
}

TEST(PoolingErrors, Input) {
  const PoolOptions o = opts({2, 2});
  EXPECT_TRUE(throws_error([&] { max_pool(Tensor{}, o); }, ErrorCode::InvalidArgument,
                           {"max_pool: input", "undefined"}));
  EXPECT_TRUE(throws_error(
      [&] {
        avg_pool(zeros({1, 1, 4, 4}, DType::i32), o);
      },
      ErrorCode::DTypeMismatch, {"avg_pool: input", "i32"}));
  EXPECT_TRUE(throws_error(
      [&] {
        max_pool(zeros({4, 4}), o);
      },
      ErrorCode::ShapeMismatch, {"max_pool: input", "3-d [N, C, L]"}));
  EXPECT_TRUE(throws_error(
      [&] {
        max_pool(zeros({1, 1, 1, 1, 1, 1}), o);
      },
      ErrorCode::ShapeMismatch, {"max_pool: input", "5-d"}));
  EXPECT_TRUE(throws_error(
      [&] {
        avg_pool(zeros({1, 1, 0, 4}), o);
      },
      ErrorCode::InvalidArgument, {"avg_pool: input", "empty axis"}));
  EXPECT_TRUE(throws_error(
      [&] {
        avg_pool(zeros({1, 0, 4, 4}), o);
      },
      ErrorCode::InvalidArgument, {"avg_pool: input", "empty axis"}));
}

TEST(PoolingErrors, OptionLists) {
  const Tensor x = zeros({1, 1, 4, 4});
  EXPECT_TRUE(throws_error([&] { max_pool(x, opts({2})); }, ErrorCode::InvalidArgument,
                           {"max_pool: options.kernel", "1 entries", "expected 2"}));
  EXPECT_TRUE(throws_error([&] { max_pool(x, opts({})); }, ErrorCode::InvalidArgument,
                           {"max_pool: options.kernel", "0 entries"}));
  EXPECT_TRUE(throws_error(
      [&] {
        max_pool(x, opts({2, 2}, {1, 1, 1}));
      },
      ErrorCode::InvalidArgument, {"max_pool: options.stride", "3 entries"}));
  EXPECT_TRUE(throws_error(
      [&] {
        avg_pool(x, opts({2, 2}, {}, {1}));
      },
      ErrorCode::InvalidArgument, {"avg_pool: options.padding", "1 entries"}));
  EXPECT_TRUE(throws_error(
      [&] {
        max_pool(x, opts({2, 2}, {}, {}, {1}));
      },
      ErrorCode::InvalidArgument, {"max_pool: options.dilation"}));
}

TEST(PoolingErrors, NonPositiveKernelStrideDilation) {
  const Tensor x = zeros({1, 1, 4, 4});
  EXPECT_TRUE(throws_error(
      [&] {
        max_pool(x, opts({0, 2}));
      },
      ErrorCode::InvalidArgument, {"max_pool: options.kernel 0", "expected each > 0"}));
  EXPECT_TRUE(throws_error(
      [&] {
        max_pool(x, opts({2, 2}, {2, 0}));
      },
      ErrorCode::InvalidArgument, {"max_pool: options.kernel", "stride 0"}));
  EXPECT_TRUE(throws_error(
      [&] {
        avg_pool(x, opts({2, 2}, {2, -1}));
      },
      ErrorCode::InvalidArgument, {"avg_pool: options.kernel", "stride -1"}));
  EXPECT_TRUE(throws_error(
      [&] {
        max_pool(x, opts({2, 2}, {}, {}, {1, 0}));
      },
      ErrorCode::InvalidArgument, {"max_pool: options.kernel", "dilation 0"}));
}

TEST(PoolingErrors, Padding) {
  const Tensor x = zeros({1, 1, 8});
  EXPECT_TRUE(throws_error([&] { max_pool(x, opts({3}, {}, {2})); }, ErrorCode::InvalidArgument,
                           {"max_pool: options.padding is 2", "kernel / 2 = 1"}));
  EXPECT_TRUE(throws_error([&] { avg_pool(x, opts({3}, {}, {-1})); }, ErrorCode::InvalidArgument,
                           {"avg_pool: options.padding is -1"}));
}

TEST(PoolingErrors, KernelLargerThanPaddedInput) {
  EXPECT_TRUE(throws_error(
      [&] {
        max_pool(zeros({1, 1, 3}), opts({4}));
      },
      ErrorCode::InvalidArgument, {"max_pool: input", "output size 0", "output size >= 1"}));
  EXPECT_TRUE(throws_error(
      [&] {
        max_pool(zeros({1, 1, 3}), opts({2}, {}, {}, {3}));
      },
      ErrorCode::InvalidArgument, {"max_pool: input", "dilation 3"}));
  EXPECT_TRUE(throws_error(
      [&] {
        avg_pool(zeros({1, 1, 2, 2, 2}), opts({1, 1, 3}));
      },
      ErrorCode::InvalidArgument, {"avg_pool: input", "output size"}));
}

TEST(PoolingErrors, AverageOptions) {
  const Tensor x = zeros({1, 1, 8});
  EXPECT_TRUE(throws_error([&] { avg_pool(x, opts({2}, {}, {}, {2})); }, ErrorCode::InvalidArgument,
                           {"avg_pool: options.dilation is 2", "no dilation"}));
  PoolOptions o = opts({2});
  o.divisor_override = -1;
  EXPECT_TRUE(throws_error([&] { avg_pool(x, o); }, ErrorCode::InvalidArgument,
                           {"avg_pool: options.divisor_override is -1"}));
}

TEST(PoolingErrors, BackwardOperands) {
  const Tensor x = zeros({1, 2, 4, 4});
  const PoolOptions o = opts({2, 2});
  const Tensor dy = zeros({1, 2, 2, 2});
  const Tensor idx = Tensor::zeros({1, 2, 2, 2}, DType::i64);
  EXPECT_TRUE(throws_error([&] { max_pool_backward(Tensor{}, idx, x, o); },
                           ErrorCode::InvalidArgument, {"max_pool_backward: dout", "undefined"}));
  EXPECT_TRUE(throws_error(
      [&] {
        max_pool_backward(zeros({1, 2, 2, 2}, DType::f64), idx, x, o);
      },
      ErrorCode::DTypeMismatch, {"max_pool_backward: dout", "f64"}));
  EXPECT_TRUE(throws_error(
      [&] {
        max_pool_backward(zeros({1, 2, 3, 2}), idx, x, o);
      },
      ErrorCode::ShapeMismatch, {"max_pool_backward: dout"}));
  EXPECT_TRUE(throws_error([&] { max_pool_backward(dy, Tensor{}, x, o); },
                           ErrorCode::InvalidArgument,
                           {"max_pool_backward: indices", "undefined"}));
  EXPECT_TRUE(throws_error(
      [&] {
        max_pool_backward(dy, zeros({1, 2, 2, 2}), x, o);
      },
      ErrorCode::DTypeMismatch, {"max_pool_backward: indices", "f32"}));
  EXPECT_TRUE(throws_error(
      [&] {
        max_pool_backward(dy, Tensor::zeros({1, 2, 2, 1}, DType::i64), x, o);
      },
      ErrorCode::ShapeMismatch, {"max_pool_backward: indices"}));
  EXPECT_TRUE(throws_error(
      [&] {
        avg_pool_backward(zeros({1, 2, 2, 3}), x, o);
      },
      ErrorCode::ShapeMismatch, {"avg_pool_backward: dout"}));
  EXPECT_TRUE(throws_error(
      [&] {
        avg_pool_backward(zeros({1, 2, 2, 2}, DType::f16), x, o);
      },
      ErrorCode::DTypeMismatch, {"avg_pool_backward: dout", "f16"}));
}

TEST(PoolingErrors, IntoOutputs) {
  const Tensor x = zeros({1, 2, 4, 4});
  const PoolOptions o = opts({2, 2});
  EXPECT_TRUE(throws_error(
      [&] {
        avg_pool_into(zeros({1, 2, 2, 3}), x, o);
      },
      ErrorCode::ShapeMismatch, {"avg_pool: out"}));
  EXPECT_TRUE(throws_error(
      [&] {
        max_pool_into(zeros({1, 2, 2, 2}), zeros({1, 2, 2, 2}), x, o);
      },
      ErrorCode::DTypeMismatch, {"max_pool: indices_out"}));
  EXPECT_TRUE(throws_error(
      [&] {
        avg_pool_into(x, x, opts({1, 1}));
      },
      ErrorCode::InvalidArgument, {"avg_pool: out", "overlaps"}));
}

TEST(PoolingErrors, AdaptiveOutputSize) {
  const Tensor x = zeros({1, 2, 4, 4});
  EXPECT_TRUE(throws_error([&] { adaptive_avg_pool(x, {2}); }, ErrorCode::InvalidArgument,
                           {"adaptive_avg_pool: output_size has 1 entries", "expected 2"}));
  EXPECT_TRUE(throws_error([&] { adaptive_max_pool(x, {2, 2, 2}); }, ErrorCode::InvalidArgument,
                           {"adaptive_max_pool: output_size has 3 entries"}));
  EXPECT_TRUE(throws_error([&] { adaptive_max_pool(x, {2, 0}); }, ErrorCode::InvalidArgument,
                           {"adaptive_max_pool: output_size[1] is 0", "expected >= 1"}));
  EXPECT_TRUE(throws_error([&] { adaptive_avg_pool(x, {-1, 2}); }, ErrorCode::InvalidArgument,
                           {"adaptive_avg_pool: output_size[0] is -1"}));
  EXPECT_TRUE(throws_error([&] { adaptive_avg_pool(zeros({4, 4}), {2}); },
                           ErrorCode::ShapeMismatch, {"adaptive_avg_pool: input", "3-d"}));
  EXPECT_TRUE(throws_error([&] { adaptive_max_pool(zeros({1, 2, 4, 4}, DType::i64), {2, 2}); },
                           ErrorCode::DTypeMismatch, {"adaptive_max_pool: input", "i64"}));
  EXPECT_TRUE(throws_error([&] { adaptive_avg_pool(zeros({1, 2, 0}), {2}); },
                           ErrorCode::InvalidArgument, {"adaptive_avg_pool: input", "empty axis"}));
}

TEST(PoolingErrors, AdaptiveBackwardOperands) {
  const Tensor x = zeros({1, 2, 4, 4});
  const Tensor dy = zeros({1, 2, 3, 3});
  const Tensor idx = Tensor::zeros({1, 2, 3, 3}, DType::i64);
  EXPECT_TRUE(throws_error([&] { adaptive_max_pool_backward(zeros({1, 2, 2, 3}), idx, x, {3, 3}); },
                           ErrorCode::ShapeMismatch, {"adaptive_max_pool_backward: dout"}));
  EXPECT_TRUE(throws_error([&] { adaptive_max_pool_backward(dy, zeros({1, 2, 3, 3}), x, {3, 3}); },
                           ErrorCode::DTypeMismatch, {"adaptive_max_pool_backward: indices"}));
  EXPECT_TRUE(throws_error([&] { adaptive_max_pool_backward(dy, idx, x, {3, 0}); },
                           ErrorCode::InvalidArgument,
                           {"adaptive_max_pool_backward: output_size[1] is 0"}));
  EXPECT_TRUE(throws_error([&] { adaptive_avg_pool_backward(dy, x, {2, 3}); },
                           ErrorCode::ShapeMismatch, {"adaptive_avg_pool_backward: dout"}));
  EXPECT_TRUE(throws_error([&] { adaptive_avg_pool_backward(zeros({1, 2, 3, 3}, DType::bf16), x, {3, 3}); },
                           ErrorCode::DTypeMismatch, {"adaptive_avg_pool_backward: dout", "bf16"}));
  EXPECT_TRUE(throws_error([&] { adaptive_avg_pool_backward_into(zeros({1, 2, 4, 3}), dy, x, {3, 3}); },
                           ErrorCode::ShapeMismatch, {"adaptive_avg_pool_backward: dinput_out"}));
}

TEST(PoolingErrors, LpOptions) {
  const Tensor x = zeros({1, 2, 6, 6});
  EXPECT_TRUE(throws_error([&] { lp_pool(x, 2.0, opts({2, 2}, {}, {1, 1})); },
                           ErrorCode::InvalidArgument,
                           {"lp_pool: options.padding is 1", "LP pooling has no padding"}));
  EXPECT_TRUE(throws_error([&] { lp_pool(x, 2.0, opts({2, 2}, {}, {}, {2, 2})); },
                           ErrorCode::InvalidArgument,
                           {"lp_pool: options.dilation is 2", "LP pooling has no dilation"}));
  PoolOptions o = opts({2, 2});
  o.divisor_override = 3;
  EXPECT_TRUE(throws_error([&] { lp_pool(x, 2.0, o); }, ErrorCode::InvalidArgument,
                           {"lp_pool: options.divisor_override is 3", "LP pooling has none"}));
  for (double p : {0.0, -1.0, std::numeric_limits<double>::infinity(),
                   std::numeric_limits<double>::quiet_NaN()}) {
    EXPECT_TRUE(throws_error([&] { lp_pool(x, p, opts({2, 2})); }, ErrorCode::InvalidArgument,
                             {"lp_pool: norm_type must be finite and > 0"}));
  }
  EXPECT_TRUE(throws_error([&] { lp_pool(x, 2.0, opts({7, 7})); }, ErrorCode::InvalidArgument,
                           {"lp_pool: input", "output size 0"}));
  EXPECT_TRUE(throws_error([&] { lp_pool(x, 2.0, opts({2})); }, ErrorCode::InvalidArgument,
                           {"lp_pool: options.kernel has 1 entries"}));
}

TEST(PoolingErrors, LpBackwardOperands) {
  const Tensor x = zeros({1, 2, 6, 6});
  const PoolOptions o = opts({2, 2});
  const Tensor dy = zeros({1, 2, 3, 3});
  EXPECT_TRUE(throws_error([&] { lp_pool_backward(dy, x, Tensor{}, 2.0, o); },
                           ErrorCode::InvalidArgument, {"lp_pool_backward: out", "undefined"}));
  EXPECT_TRUE(throws_error([&] { lp_pool_backward(dy, x, zeros({1, 2, 3, 2}), 2.0, o); },
                           ErrorCode::ShapeMismatch, {"lp_pool_backward: out"}));
  EXPECT_TRUE(throws_error([&] { lp_pool_backward(dy, x, zeros({1, 2, 3, 3}, DType::f16), 2.0, o); },
                           ErrorCode::DTypeMismatch, {"lp_pool_backward: out", "f16"}));
  EXPECT_TRUE(throws_error([&] { lp_pool_backward(zeros({1, 2, 2, 3}), x, dy, 2.0, o); },
                           ErrorCode::ShapeMismatch, {"lp_pool_backward: dout"}));
  EXPECT_TRUE(throws_error([&] { lp_pool_backward(dy, x, dy, -2.0, o); },
                           ErrorCode::InvalidArgument, {"lp_pool_backward: norm_type"}));
  EXPECT_TRUE(throws_error([&] { lp_pool_backward_into(dy, dy, x, dy, 2.0, opts({1, 1})); },
                           ErrorCode::ShapeMismatch, {"lp_pool_backward: dout"}));
  const Tensor dx = zeros({1, 2, 6, 6});
  EXPECT_TRUE(throws_error([&] { lp_pool_backward_into(dx, dy, x, dx.slice(2, 0, 3).slice(3, 0, 3), 2.0, o); },
                           ErrorCode::InvalidArgument, {"lp_pool_backward: dinput_out", "overlaps"}));
}

TEST(PoolingErrors, OutputLayoutFollowsTheInput) {
  const Tensor x = channels_last(zeros({1, 2, 4, 4}));
  const PoolOptions o = opts({2, 2});
  EXPECT_TRUE(throws_error([&] { avg_pool_into(zeros({1, 2, 2, 2}), x, o); },
                           ErrorCode::InvalidArgument,
                           {"avg_pool: out", "expected channels-last dense"}));
  EXPECT_TRUE(throws_error(
      [&] {
        max_pool_into(channels_last(zeros({1, 2, 2, 2})), Tensor::zeros({1, 2, 2, 2}, DType::i64),
                      x, o);
      },
      ErrorCode::InvalidArgument, {"max_pool: indices_out", "channels-last"}));
  EXPECT_TRUE(throws_error([&] { avg_pool_backward_into(zeros({1, 2, 4, 4}), zeros({1, 2, 2, 2}), x, o); },
                           ErrorCode::InvalidArgument, {"avg_pool_backward: dinput_out", "channels-last"}));
  // An NCHW problem takes contiguous outputs only.
  EXPECT_TRUE(throws_error(
      [&] {
        adaptive_avg_pool_into(channels_last(zeros({1, 2, 2, 2})), zeros({1, 2, 4, 4}), {2, 2});
      },
      ErrorCode::InvalidArgument, {"adaptive_avg_pool: out", "must be contiguous"}));
}

TEST(PoolingErrors, DeviceMismatch) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device: device mismatch needs two devices";
  const Tensor x = zeros({1, 2, 4, 4});
  const PoolOptions o = opts({2, 2});
  const Tensor dy_gpu = zeros({1, 2, 2, 2}).to(Device::cuda(0));
  EXPECT_TRUE(throws_error([&] { avg_pool_backward(dy_gpu, x, o); }, ErrorCode::DeviceMismatch,
                           {"avg_pool_backward: dout"}));
  EXPECT_TRUE(throws_error(
      [&] {
        max_pool(Tensor::zeros({1, 2, 4, 4}, DType::f64, Device::cuda(0)), o);
      },
      ErrorCode::DTypeMismatch, {"max_pool: input", "f64"}));
  EXPECT_TRUE(throws_error(
      [&] {
        lp_pool_backward(zeros({1, 2, 2, 2}), x, dy_gpu, 2.0, o);
      },
      ErrorCode::DeviceMismatch, {"lp_pool_backward: out"}));
  EXPECT_TRUE(throws_error(
      [&] {
        adaptive_max_pool_backward(zeros({1, 2, 2, 2}),
                                   Tensor::zeros({1, 2, 2, 2}, DType::i64, Device::cuda(0)), x,
                                   {2, 2});
      },
      ErrorCode::DeviceMismatch, {"adaptive_max_pool_backward: indices"}));
}

}  // namespace
}  // namespace rudnn::test
