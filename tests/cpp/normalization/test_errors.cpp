// Every argument rule of the normalization family: bad input is a rudnn::Error that names
// the op, the argument and the rule. That a rejected call leaves its outputs untouched, and
// that every error starts with the op's name, the contract suite checks for every op
// (test_contract.cpp). Device and stream mismatches need a GPU and live in test_gpu.cpp.
#include <cmath>
#include <limits>

#include "support/test_support.h"

namespace rudnn::test {
namespace {

const Tensor kX = Tensor::full({4, 8}, 0.5, DType::bf16);
const Tensor kG = Tensor::full({8}, 1.0, DType::f32);

TEST(NormErrors, EpsMustBeFiniteAndPositive) {
  for (float eps : {0.0f, -1e-5f, std::numeric_limits<float>::infinity(),
                    std::numeric_limits<float>::quiet_NaN()}) {
    EXPECT_TRUE(throws_error([&] { layer_norm(kX, kG, {}, eps); }, ErrorCode::InvalidArgument,
                             {"layer_norm", "eps"}));
    EXPECT_TRUE(throws_error([&] { rms_norm(kX, kG, eps); }, ErrorCode::InvalidArgument,
                             {"rms_norm", "eps"}));
    EXPECT_TRUE(throws_error([&] { add_rms_norm(kX, kX, kG, eps); }, ErrorCode::InvalidArgument,
                             {"add_rms_norm", "eps"}));
    EXPECT_TRUE(throws_error([&] { layer_norm_backward(kX, kX, kG, {}, eps); },
                             ErrorCode::InvalidArgument, {"layer_norm_backward", "eps"}));
    EXPECT_TRUE(throws_error([&] { rms_norm_backward(kX, kX, kG, eps); },
                             ErrorCode::InvalidArgument, {"rms_norm_backward", "eps"}));
  }
}

TEST(NormErrors, RowInputShapeRules) {
  const Tensor empty_axis = Tensor::empty({3, 0}, DType::f32);
  const Tensor scalar = Tensor::full({}, 1.0, DType::f32);
  EXPECT_TRUE(throws_error([&] { rms_norm(empty_axis, {}, 1e-6f); }, ErrorCode::InvalidArgument,
                           {"rms_norm", "x", "empty last axis", "[3, 0]"}));
  EXPECT_TRUE(throws_error([&] { softmax_last_axis(empty_axis); }, ErrorCode::InvalidArgument,
                           {"softmax_last_axis", "x"}));
  EXPECT_TRUE(throws_error([&] { logsumexp(scalar); }, ErrorCode::ShapeMismatch,
                           {"logsumexp", "x", "0-d"}));
  EXPECT_TRUE(throws_error([&] { cross_entropy(empty_axis, Tensor::zeros({3}, DType::i64)); },
                           ErrorCode::InvalidArgument,
                           {"cross_entropy", "logits", "empty last axis"}));
  EXPECT_TRUE(throws_error([&] { layer_norm(Tensor(), {}, {}, 1e-5f); }, ErrorCode::InvalidArgument,
                           {"layer_norm", "x", "undefined"}));
  // The functional forms name a missing first operand too (it decides the device).
  EXPECT_TRUE(throws_error([&] { rms_norm(Tensor(), {}, 1e-5f); }, ErrorCode::InvalidArgument,
                           {"rms_norm: x is an undefined tensor"}));
  EXPECT_TRUE(throws_error([&] { softmax_backward(kX, Tensor()); }, ErrorCode::InvalidArgument,
                           {"softmax_backward: y is an undefined tensor"}));
  EXPECT_TRUE(throws_error([&] { cross_entropy(Tensor(), Tensor::zeros({3}, DType::i64)); },
                           ErrorCode::InvalidArgument,
                           {"cross_entropy: logits is an undefined tensor"}));
}

TEST(NormErrors, UnsupportedDtypes) {
  for (DType dt : {DType::i32, DType::u8, DType::i64}) {
    const Tensor x = Tensor::zeros({2, 4}, dt);
    EXPECT_TRUE(throws_error([&] { rms_norm(x, {}, 1e-6f); }, ErrorCode::DTypeMismatch,
                             {"rms_norm", "x", dtype_name(dt), "f32, f16 or bf16"}));
    EXPECT_TRUE(throws_error([&] { softmax_last_axis(x); }, ErrorCode::DTypeMismatch,
                             {"softmax_last_axis", dtype_name(dt)}));
    EXPECT_TRUE(throws_error([&] { cross_entropy(x, Tensor::zeros({2}, DType::i64)); },
                             ErrorCode::DTypeMismatch, {"cross_entropy", "logits"}));
  }
}

TEST(NormErrors, AffineParameterRules) {
  EXPECT_TRUE(throws_error([&] { rms_norm(kX, Tensor::zeros({7}, DType::f32), 1e-6f); },
                           ErrorCode::ShapeMismatch,
                           {"rms_norm", "gamma has shape [7]", "expected [H] = [8]"}));
  EXPECT_TRUE(throws_error(
      [&] {
        rms_norm(kX, Tensor::zeros({1, 8}, DType::f32), 1e-6f);
      },
      ErrorCode::ShapeMismatch, {"gamma has shape [1, 8]"}));
  EXPECT_TRUE(throws_error([&] { rms_norm(kX, Tensor::zeros({8}, DType::f16), 1e-6f); },
                           ErrorCode::DTypeMismatch,
                           {"rms_norm", "gamma", "f16", "f32 or x's dtype bf16"}));
  EXPECT_TRUE(throws_error([&] { layer_norm(kX, kG, Tensor::zeros({9}, DType::f32), 1e-5f); },
                           ErrorCode::ShapeMismatch, {"layer_norm", "beta has shape [9]"}));
  EXPECT_TRUE(throws_error([&] { layer_norm(kX, kG, Tensor::zeros({8}, DType::i32), 1e-5f); },
                           ErrorCode::DTypeMismatch, {"layer_norm", "beta"}));
  EXPECT_TRUE(
      throws_error([&] { layer_norm_backward(kX, kX, kG, Tensor::zeros({3}, DType::f32), 1e-5f); },
                   ErrorCode::ShapeMismatch, {"layer_norm_backward", "beta"}));
  EXPECT_TRUE(
      throws_error([&] { rms_norm_backward(kX, kX, Tensor::zeros({8}, DType::f16), 1e-5f); },
                   ErrorCode::DTypeMismatch, {"rms_norm_backward", "gamma"}));
}

TEST(NormErrors, SecondOperandMustMatch) {
  EXPECT_TRUE(throws_error(
      [&] {
        add_rms_norm(kX, Tensor::zeros({4, 8}, DType::f32), kG, 1e-6f);
      },
      ErrorCode::DTypeMismatch, {"add_rms_norm", "residual", "f32", "bf16"}));
  EXPECT_TRUE(throws_error(
      [&] {
        add_rms_norm(kX, Tensor::zeros({2, 8}, DType::bf16), kG, 1e-6f);
      },
      ErrorCode::ShapeMismatch, {"add_rms_norm", "residual has shape [2, 8]", "[4, 8]"}));
  EXPECT_TRUE(throws_error(
      [&] {
        rms_norm_backward(Tensor::zeros({4, 9}, DType::bf16), kX, {}, 1e-6f);
      },
      ErrorCode::ShapeMismatch, {"rms_norm_backward", "dy"}));
  EXPECT_TRUE(throws_error(
      [&] {
        softmax_backward(Tensor::zeros({4, 8}, DType::f16), kX);
      },
      ErrorCode::DTypeMismatch, {"softmax_backward", "dy"}));
}

TEST(NormErrors, CrossEntropyArguments) {
  const Tensor logits = Tensor::zeros({4, 8}, DType::f32);
  const Tensor targets = Tensor::zeros({4}, DType::i64);
  EXPECT_TRUE(throws_error([&] { cross_entropy(logits, Tensor::zeros({4}, DType::f32)); },
                           ErrorCode::DTypeMismatch, {"cross_entropy", "targets", "integer"}));
  EXPECT_TRUE(throws_error([&] { cross_entropy(logits, Tensor::zeros({4}, DType::boolean)); },
                           ErrorCode::DTypeMismatch, {"targets"}));
  EXPECT_TRUE(throws_error(
      [&] {
        cross_entropy(logits, Tensor::zeros({4, 1}, DType::i64));
      },
      ErrorCode::ShapeMismatch,
      {"cross_entropy", "targets has shape [4, 1]", "logits.shape[:-1] = [4]"}));
  EXPECT_TRUE(throws_error([&] { cross_entropy(logits, Tensor()); }, ErrorCode::InvalidArgument,
                           {"targets", "undefined"}));
  EXPECT_TRUE(throws_error(
      [&] { cross_entropy_backward(logits, targets, Tensor::zeros({4}, DType::bf16)); },
      ErrorCode::DTypeMismatch, {"cross_entropy_backward", "dloss", "f32"}));
  EXPECT_TRUE(
      throws_error([&] { cross_entropy_backward(logits, targets, Tensor::zeros({3}, DType::f32)); },
                   ErrorCode::ShapeMismatch, {"cross_entropy_backward", "dloss has shape [3]"}));
  for (float s :
       {std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN()}) {
    EXPECT_TRUE(throws_error([&] { cross_entropy_with_grad(logits, targets, s); },
                             ErrorCode::InvalidArgument,
                             {"cross_entropy_with_grad", "grad_scale"}));
  }
}

TEST(NormErrors, OutputRulesOfTheIntoForms) {
  const Tensor x = Tensor::full({4, 8}, 1.0, DType::f32);
  EXPECT_TRUE(throws_error(
      [&] {
        rms_norm_into(Tensor::empty({4, 7}, DType::f32), x, {}, 1e-6f);
      },
      ErrorCode::ShapeMismatch, {"rms_norm", "out has shape [4, 7]"}));
  EXPECT_TRUE(throws_error(
      [&] {
        rms_norm_into(Tensor::empty({4, 8}, DType::bf16), x, {}, 1e-6f);
      },
      ErrorCode::DTypeMismatch, {"rms_norm", "out has dtype bf16"}));
  EXPECT_TRUE(throws_error([&] { rms_norm_into(Tensor(), x, {}, 1e-6f); },
                           ErrorCode::InvalidArgument, {"out", "undefined"}));
  // A transposed output has no dense last axis.
  EXPECT_TRUE(throws_error(
      [&] {
        softmax_last_axis_into(Tensor::empty({8, 4}, DType::f32).transpose(0, 1), x);
      },
      ErrorCode::InvalidArgument, {"softmax_last_axis", "out", "dense last axis"}));
  // Rows that overlap each other (stride 0 broadcast).
  EXPECT_TRUE(throws_error(
      [&] {
        rms_norm_into(Tensor::empty({8}, DType::f32).as_strided({4, 8}, {0, 1}, 0), x, {}, 1e-6f);
      },
      ErrorCode::InvalidArgument, {"rms_norm", "out"}));
  EXPECT_TRUE(throws_error([&] { rms_norm_into(x, x, {}, 1e-6f); }, ErrorCode::InvalidArgument,
                           {"rms_norm", "out overlaps x"}));
  const Tensor wide = Tensor::full({4, 16}, 1.0, DType::f32);
  EXPECT_TRUE(
      throws_error([&] { softmax_last_axis_into(wide.slice(1, 4, 12), wide.slice(1, 0, 8)); },
                   ErrorCode::InvalidArgument, {"overlaps x"}));
  const Tensor s = Tensor::empty({4, 8}, DType::f32);
  EXPECT_TRUE(throws_error([&] { add_rms_norm_into(s, s, x, x, {}, 1e-6f); },
                           ErrorCode::InvalidArgument, {"add_rms_norm", "overlaps sum_out"}));
  EXPECT_TRUE(
      throws_error([&] { logsumexp_into(Tensor::empty({8}, DType::f32).slice(0, 0, 8, 2), x); },
                   ErrorCode::InvalidArgument, {"logsumexp", "contiguous"}));
  EXPECT_TRUE(throws_error(
      [&] {
        cross_entropy_into(Tensor::empty({4}, DType::bf16), x, Tensor::zeros({4}, DType::i32));
      },
      ErrorCode::DTypeMismatch, {"cross_entropy", "loss_out", "f32"}));
  // Parameter gradients exactly when the parameters are given.
  const Tensor dx = Tensor::empty({4, 8}, DType::f32), dg = Tensor::empty({8}, DType::f32);
  EXPECT_TRUE(throws_error([&] { rms_norm_backward_into(dx, dg, x, x, {}, 1e-6f); },
                           ErrorCode::InvalidArgument,
                           {"rms_norm_backward", "dgamma_out", "exactly when gamma"}));
  EXPECT_TRUE(throws_error([&] { rms_norm_backward_into(dx, {}, x, x, kG, 1e-6f); },
                           ErrorCode::InvalidArgument, {"dgamma_out"}));
  EXPECT_TRUE(throws_error([&] { layer_norm_backward_into(dx, dg, dg, x, x, kG, kG, 1e-6f); },
                           ErrorCode::InvalidArgument,
                           {"layer_norm_backward", "dbeta_out overlaps dgamma_out"}));
  EXPECT_TRUE(throws_error(
      [&] { rms_norm_backward_into(dx, Tensor::empty({8}, DType::bf16), x, x, kG, 1e-6f); },
      ErrorCode::DTypeMismatch, {"dgamma_out has dtype bf16"}));
}

TEST(NormErrors, CrossEntropyPerRowUpstreamGradientAndScaleUnlessOne) {
  const Tensor x = Tensor::full({4, 8}, 1.0, DType::f32);
  const Tensor t = Tensor::zeros({4}, DType::i64);
  EXPECT_TRUE(throws_error(
      [&] { cross_entropy_with_grad(x, t, Tensor::full({4}, 1.0, DType::bf16)); },
      ErrorCode::DTypeMismatch, {"cross_entropy_with_grad", "dloss has dtype bf16", "f32"}));
  EXPECT_TRUE(
      throws_error([&] { cross_entropy_with_grad(x, t, Tensor::full({5}, 1.0, DType::f32)); },
                   ErrorCode::ShapeMismatch, {"cross_entropy_with_grad", "dloss has shape [5]"}));
  EXPECT_TRUE(throws_error([&] { cross_entropy_with_grad(x, t, Tensor()); },
                           ErrorCode::InvalidArgument,
                           {"cross_entropy_with_grad", "dloss", "undefined"}));
  const Tensor one = Tensor::full({1}, 1.0, DType::f32);
  EXPECT_TRUE(throws_error([&] { scale_unless_one(x, Tensor::full({2}, 1.0, DType::f32)); },
                           ErrorCode::InvalidArgument,
                           {"scale_unless_one", "scale", "one f32 element"}));
  EXPECT_TRUE(throws_error([&] { scale_unless_one(x, Tensor::full({1}, 1.0, DType::f16)); },
                           ErrorCode::InvalidArgument, {"scale_unless_one", "scale"}));
  EXPECT_TRUE(throws_error([&] { scale_unless_one(Tensor::zeros({4}, DType::i32), one); },
                           ErrorCode::DTypeMismatch, {"scale_unless_one", "x has dtype i32"}));
  EXPECT_TRUE(throws_error([&] { scale_unless_one(x.transpose(0, 1), one); },
                           ErrorCode::InvalidArgument,
                           {"scale_unless_one", "x", "dense last axis"}));
  EXPECT_TRUE(throws_error([&] { scale_unless_one(x, x.view({32}).slice(0, 0, 1)); },
                           ErrorCode::InvalidArgument, {"scale_unless_one", "x overlaps scale"}));
  EXPECT_TRUE(throws_error([&] { scale_unless_one(x, Tensor()); }, ErrorCode::InvalidArgument,
                           {"scale_unless_one", "scale", "undefined"}));
}

}  // namespace
}  // namespace rudnn::test
