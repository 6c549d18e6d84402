// Every argument rule of CTC loss: bad input is a rudnn::Error naming the op, the argument
// and the rule. Device rules need a GPU and live in test_gpu.cpp.
#include <vector>

#include "rudnn/ctc.h"
#include "support/test_support.h"

namespace rudnn::test {
namespace {

constexpr int64_t T = 5, N = 2, C = 4, S = 3;

Tensor i64(const std::vector<int64_t>& v, const Shape& shape) {
  return Tensor::from_host(v, shape);
}

struct Args {
  Tensor lp = Tensor::full({T, N, C}, -1.3862943611198906, DType::f64);
  Tensor tg = i64({1, 2, 3, 3, 1, 0}, {N, S});
  Tensor il = i64({5, 4}, {N});
  Tensor tl = i64({3, 2}, {N});
  Tensor g = Tensor::full({}, 1.0, DType::f64);
  CtcLossOptions o{};
};

// Both ops (forward and backward) refuse `a` with `code` and a message holding `fragments`,
// and so does ctc_loss_check (the host rules for log_probs of a.lp's shape) unless the rule
// is about the log_probs tensor itself (`host_check` false).
void expect_both_refuse(const Args& a, ErrorCode code, std::initializer_list<std::string> frags,
                        bool host_check = true) {
  std::vector<std::string> f(frags);
  std::vector<std::string> fwd = f, bwd = f, chk = f;
  fwd.insert(fwd.begin(), "ctc_loss: ");
  bwd.insert(bwd.begin(), "ctc_loss_backward: ");
  chk.insert(chk.begin(), "ctc_loss_check: ");
  auto check = [&](const std::function<void()>& fn, const std::vector<std::string>& v) {
    switch (v.size()) {
      case 2:
        return throws_error(fn, code, {v[0], v[1]});
      case 3:
        return throws_error(fn, code, {v[0], v[1], v[2]});
      default:
        return throws_error(fn, code, {v[0], v[1], v[2], v[3]});
    }
  };
  EXPECT_TRUE(check([&] { ctc_loss(a.lp, a.tg, a.il, a.tl, a.o); }, fwd));
  EXPECT_TRUE(check([&] { ctc_loss_backward(a.lp, a.tg, a.il, a.tl, a.g, a.o); }, bwd));
  if (host_check)
    EXPECT_TRUE(check([&] { ctc_loss_check(a.lp.shape(), a.tg, a.il, a.tl, a.o); }, chk));
}

TEST(CtcErrors, ValidCallsPass) {
  Args a;
  EXPECT_NO_THROW(ctc_loss(a.lp, a.tg, a.il, a.tl, a.o));
  EXPECT_NO_THROW(ctc_loss_backward(a.lp, a.tg, a.il, a.tl, a.g, a.o));
  EXPECT_NO_THROW(ctc_loss_check(a.lp.shape(), a.tg, a.il, a.tl, a.o));
  // Concatenated targets and I32 lengths pass too.
  EXPECT_NO_THROW(ctc_loss_check({T, N, C}, i64({1, 2, 3, 3, 1}, {5}),
                                 Tensor::from_host(std::vector<int32_t>{5, 4}, {N}),
                                 Tensor::from_host(std::vector<int32_t>{3, 2}, {N}), a.o));
}

// ctc_loss_check wants the lengths on the host; targets on a device are checked for shape
// and dtype only (GPU part: skipped without a device).
TEST(CtcErrorsGpu, HostCheckDevices) {
  RUDNN_REQUIRE_CUDA();
  Args a;
  const Device gpu = Device::cuda(0);
  EXPECT_TRUE(throws_error([&] { ctc_loss_check({T, N, C}, a.tg, a.il.to(gpu), a.tl, a.o); },
                           ErrorCode::DeviceMismatch,
                           {"ctc_loss_check: ", "input_lengths is on cuda:0"}));
  EXPECT_TRUE(throws_error([&] { ctc_loss_check({T, N, C}, a.tg, a.il, a.tl.to(gpu), a.o); },
                           ErrorCode::DeviceMismatch, {"ctc_loss_check: ", "target_lengths"}));
  // Labels on the device are not read: a bad one passes, a bad length does not.
  const Tensor bad_labels = i64({1, 2, 3, 3, 9, 0}, {N, S}).to(gpu);
  EXPECT_NO_THROW(ctc_loss_check({T, N, C}, bad_labels, a.il, a.tl, a.o));
  EXPECT_TRUE(throws_error(
      [&] { ctc_loss_check({T, N, C}, bad_labels, i64({6, 4}, {N}), a.tl, a.o); },
      ErrorCode::InvalidArgument, {"ctc_loss_check: ", "input_lengths[0]", "<= T = 5"}));
}

TEST(CtcErrors, UndefinedOperands) {
  Args a;
  a.lp = Tensor();
  expect_both_refuse(a, ErrorCode::InvalidArgument, {"log_probs", "undefined"}, false);
  a = Args();
  a.tg = Tensor();
  expect_both_refuse(a, ErrorCode::InvalidArgument, {"targets", "undefined"});
  a = Args();
  a.tl = Tensor();
  expect_both_refuse(a, ErrorCode::InvalidArgument, {"target_lengths", "undefined"});
  a = Args();
  a.g = Tensor();
  EXPECT_TRUE(throws_error([&] { ctc_loss_backward(a.lp, a.tg, a.il, a.tl, a.g, a.o); },
                           ErrorCode::InvalidArgument, {"ctc_loss_backward: ", "grad_loss"}));
}

TEST(CtcErrors, Dtypes) {
  for (DType dt : {DType::i64, DType::i32, DType::u8}) {
    Args a;
    a.lp = Tensor::zeros({T, N, C}, dt);
    expect_both_refuse(a, ErrorCode::DTypeMismatch, {"log_probs", dtype_name(dt)}, false);
  }
  // Every float dtype runs on the CPU (the reference reads it as float64); grad_loss and the
  // results take log_probs' dtype.
  for (DType dt : {DType::f32, DType::bf16, DType::f16}) {
    Args a;
    a.lp = Tensor::full({T, N, C}, -1.3862943611198906, dt);
    a.g = Tensor::full({}, 1.0, dt);
    EXPECT_EQ(ctc_loss(a.lp, a.tg, a.il, a.tl, a.o).dtype(), dt);
    EXPECT_EQ(ctc_loss_backward(a.lp, a.tg, a.il, a.tl, a.g, a.o).dtype(), dt);
    a.g = Tensor::full({}, 1.0, DType::f64);
    EXPECT_TRUE(throws_error([&] { ctc_loss_backward(a.lp, a.tg, a.il, a.tl, a.g, a.o); },
                             ErrorCode::DTypeMismatch, {"ctc_loss_backward: ", "grad_loss"}));
  }
  Args a;
  a.tg = Tensor::zeros({N, S}, DType::f32);
  expect_both_refuse(a, ErrorCode::DTypeMismatch, {"targets", "f32"});
  a = Args();
  a.il = Tensor::zeros({N}, DType::f64);
  expect_both_refuse(a, ErrorCode::DTypeMismatch, {"input_lengths", "f64"});
  a = Args();
  a.tl = Tensor::zeros({N}, DType::u8);
  expect_both_refuse(a, ErrorCode::DTypeMismatch, {"target_lengths"});
  a = Args();
  a.g = Tensor::zeros({}, DType::f32);
  EXPECT_TRUE(throws_error([&] { ctc_loss_backward(a.lp, a.tg, a.il, a.tl, a.g, a.o); },
                           ErrorCode::DTypeMismatch, {"ctc_loss_backward: ", "grad_loss"}));
}

TEST(CtcErrors, Shapes) {
  Args a;
  a.lp = Tensor::zeros({T, N * C}, DType::f64);
  expect_both_refuse(a, ErrorCode::ShapeMismatch, {"log_probs", "[T, N, C]"});
  a = Args();
  a.tg = i64({1, 2, 3}, {1, 3});
  expect_both_refuse(a, ErrorCode::ShapeMismatch, {"targets", "[N, S]"});
  a = Args();
  a.tg = Tensor::zeros({N, S, 1}, DType::i64);
  expect_both_refuse(a, ErrorCode::ShapeMismatch, {"targets", "concatenated"});
  a = Args();
  a.il = i64({5, 4, 4}, {3});
  expect_both_refuse(a, ErrorCode::ShapeMismatch, {"input_lengths", "[N]"});
  a = Args();
  a.tl = i64({3}, {1});
  expect_both_refuse(a, ErrorCode::ShapeMismatch, {"target_lengths", "[N]"});
  a = Args();
  a.tg = i64({1, 2, 3, 3}, {4});  // concatenated, one label short of 3 + 2
  expect_both_refuse(a, ErrorCode::ShapeMismatch, {"targets", "sum(target_lengths)"});
  a = Args();
  a.g = Tensor::zeros({N}, DType::f64);  // mean reduction: 0-d
  EXPECT_TRUE(throws_error([&] { ctc_loss_backward(a.lp, a.tg, a.il, a.tl, a.g, a.o); },
                           ErrorCode::ShapeMismatch, {"ctc_loss_backward: ", "grad_loss", "0-d"}));
  a.o.reduction = CtcReduction::none;
  a.g = Tensor::zeros({}, DType::f64);
  EXPECT_TRUE(throws_error([&] { ctc_loss_backward(a.lp, a.tg, a.il, a.tl, a.g, a.o); },
                           ErrorCode::ShapeMismatch, {"ctc_loss_backward: ", "grad_loss", "[N]"}));
}

TEST(CtcErrors, BlankOutOfRange) {
  for (int64_t blank : {int64_t{-1}, C, C + 7}) {
    Args a;
    a.o.blank = blank;
    expect_both_refuse(a, ErrorCode::InvalidArgument, {"blank", "0 <= blank < C"});
  }
}

TEST(CtcErrors, Lengths) {
  Args a;
  a.il = i64({T + 1, 4}, {N});
  expect_both_refuse(a, ErrorCode::InvalidArgument, {"input_lengths[0]", "<= T = 5"});
  a.il = i64({5, -1}, {N});
  expect_both_refuse(a, ErrorCode::InvalidArgument, {"input_lengths[1]", "0 <="});
  a = Args();
  a.tl = i64({3, S + 1}, {N});
  expect_both_refuse(a, ErrorCode::InvalidArgument, {"target_lengths[1]", "<= S = 3"});
  a.tl = i64({-2, 1}, {N});
  expect_both_refuse(a, ErrorCode::InvalidArgument, {"target_lengths[0]", ">= 0"});
  a.tg = i64({1, 2, 3, 3, 1}, {5});
  expect_both_refuse(a, ErrorCode::InvalidArgument, {"target_lengths[0]", ">= 0"});
}

TEST(CtcErrors, Labels) {
  for (int64_t bad : {int64_t{-1}, C, int64_t{0}}) {  // 0 is the blank
    Args a;
    a.tg = i64({1, 2, 3, 3, bad, 0}, {N, S});
    expect_both_refuse(a, ErrorCode::InvalidArgument, {"targets", "label != blank"});
    a.tg = i64({1, 2, 3, 3, bad}, {5});
    expect_both_refuse(a, ErrorCode::InvalidArgument, {"targets", "sample 1"});
  }
  // Padding past a target's length is never read.
  Args a;
  a.tg = i64({1, 2, 3, 3, 1, -99}, {N, S});
  EXPECT_NO_THROW(ctc_loss(a.lp, a.tg, a.il, a.tl, a.o));
}

TEST(CtcErrors, Outputs) {
  Args a;
  EXPECT_TRUE(throws_error(
      [&] { ctc_loss_into(Tensor::zeros({N}, DType::f64), a.lp, a.tg, a.il, a.tl, a.o); },
      ErrorCode::ShapeMismatch, {"ctc_loss: ", "loss_out"}));
  EXPECT_TRUE(throws_error(
      [&] { ctc_loss_into(Tensor::zeros({}, DType::f32), a.lp, a.tg, a.il, a.tl, a.o); },
      ErrorCode::DTypeMismatch, {"ctc_loss: ", "loss_out"}));
  EXPECT_TRUE(throws_error(
      [&] {
        ctc_loss_backward_into(Tensor::zeros({T, N}, DType::f64), a.lp, a.tg, a.il, a.tl, a.g, a.o);
      },
      ErrorCode::ShapeMismatch, {"ctc_loss_backward: ", "grad_out"}));
  const Tensor lp_copy = a.lp.contiguous();
  EXPECT_TRUE(
      throws_error([&] { ctc_loss_backward_into(lp_copy, lp_copy, a.tg, a.il, a.tl, a.g, a.o); },
                   ErrorCode::InvalidArgument, {"ctc_loss_backward: ", "grad_out", "log_probs"}));
}

}  // namespace
}  // namespace rudnn::test
