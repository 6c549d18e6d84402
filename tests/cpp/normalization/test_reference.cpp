// Contract tests of the normalization family on the CPU (the reference backend): known
// values, the special-value rules, layouts, and backward passes against finite differences
// of the forward ops. These run everywhere, CI included.
#include <cmath>
#include <limits>

#include <sys/resource.h>
#include <unistd.h>

#include <fstream>
#include <functional>

#include "support/test_support.h"

namespace rudnn::test {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

Tensor f32(const std::vector<double>& v, const Shape& shape) {
  return host_tensor(v, shape, DType::f32);
}

TEST(NormReference, RmsNormKnownValues) {
  const Tensor y = rms_norm(f32({1, 2, 3, 4}, {2, 2}), {}, 1e-5f);
  const auto v = to_doubles(y);
  // Row [1, 2]: mean square 2.5; row [3, 4]: 12.5.
  EXPECT_NEAR(v[0], 1 / std::sqrt(2.5 + 1e-5), 1e-6);
  EXPECT_NEAR(v[1], 2 / std::sqrt(2.5 + 1e-5), 1e-6);
  EXPECT_NEAR(v[2], 3 / std::sqrt(12.5 + 1e-5), 1e-6);
  EXPECT_NEAR(v[3], 4 / std::sqrt(12.5 + 1e-5), 1e-6);
  EXPECT_EQ(y.dtype(), DType::f32);
  EXPECT_EQ(y.shape(), (Shape{2, 2}));
}

// F64 rows run on the CPU in float64 throughout (what gradcheck-style tests need): results
// in F64, a cross-entropy loss in F64, and no rounding to FP32 on the way.
TEST(NormReference, Float64RowsStayInFloat64) {
  const double tiny = 1e-12;  // lost in FP32 next to 1
  const Tensor x = host_tensor({1 + tiny, 2, 3, 4}, {2, 2}, DType::f64);
  const Tensor y = rms_norm(x, {}, 1e-5f);
  EXPECT_EQ(y.dtype(), DType::f64);
  const auto v = to_doubles(y);
  const double ms = ((1 + tiny) * (1 + tiny) + 4) / 2;
  EXPECT_EQ(v[0], (1 + tiny) / std::sqrt(ms + static_cast<double>(1e-5f)));
  const Tensor targets = host_tensor({0, 1}, {2}, DType::i64);
  const Tensor loss = cross_entropy(x, targets);
  EXPECT_EQ(loss.dtype(), DType::f64);
  EXPECT_NEAR(to_doubles(loss)[0], std::log(std::exp(1 + tiny) + std::exp(2.0)) - (1 + tiny),
              1e-15);
  const Tensor dloss = host_tensor({1, 2}, {2}, DType::f64);
  const Tensor dlogits = cross_entropy_backward(x, targets, dloss);
  EXPECT_EQ(dlogits.dtype(), DType::f64);
  EXPECT_TRUE(throws_error(
      [&] {
        cross_entropy_backward(x, targets, host_tensor({1, 2}, {2}, DType::f32));
      },
      ErrorCode::DTypeMismatch, {"cross_entropy_backward", "dloss", "f64"}));
  const auto sum = add_rms_norm(x, x, {}, 1e-5f).sum;
  EXPECT_EQ(to_doubles(sum)[0], 2 * (1 + tiny));  // formed in float64, not FP32
}

TEST(NormReference, LayerNormKnownValuesWithAffine) {
  const float eps = 1e-3f;
  const Tensor x = f32({1, 2, 3, 4}, {1, 4});
  const Tensor gamma = f32({1, -2, 0.5, 3}, {4});
  const Tensor beta = f32({0, 1, 2, -1}, {4});
  const auto v = to_doubles(layer_norm(x, gamma, beta, eps));
  const double rstd = 1 / std::sqrt(1.25 + static_cast<double>(eps));  // mean 2.5, variance 1.25
  const double g[] = {1, -2, 0.5, 3}, b[] = {0, 1, 2, -1};
  for (int c = 0; c < 4; ++c)
    EXPECT_NEAR(v[c], (c + 1 - 2.5) * rstd * g[c] + b[c], 1e-5) << "column " << c;
}

TEST(NormReference, ZeroRowIsFiniteThanksToEps) {
  const auto rms = to_doubles(rms_norm(f32({0, 0, 0}, {1, 3}), {}, 1e-6f));
  const auto ln = to_doubles(layer_norm(f32({5, 5, 5}, {1, 3}), {}, {}, 1e-6f));
  for (double v : rms) EXPECT_EQ(v, 0.0);
  for (double v : ln) EXPECT_EQ(v, 0.0);
}

TEST(NormReference, AffineParametersAsF32OrInputDtypeAgree) {
  RUDNN_SEEDED_RNG(rng);
  for (DType dt : {DType::f16, DType::bf16}) {
    const Tensor x = random_tensor(rng, {5, 24}, dt);
    // Parameters exactly representable in the input dtype, stored both ways.
    const Tensor g_low = random_tensor(rng, {24}, dt), b_low = random_tensor(rng, {24}, dt);
    const Tensor g32 = host_tensor(to_doubles(g_low), {24}, DType::f32);
    const Tensor b32 = host_tensor(to_doubles(b_low), {24}, DType::f32);
    EXPECT_TRUE(bit_equal(layer_norm(x, g32, b32, 1e-5f), layer_norm(x, g_low, b_low, 1e-5f)))
        << dtype_name(dt);
    EXPECT_TRUE(bit_equal(rms_norm(x, g32, 1e-5f), rms_norm(x, g_low, 1e-5f))) << dtype_name(dt);
    EXPECT_EQ(rms_norm(x, g32, 1e-5f).dtype(), dt);
  }
}

TEST(NormReference, LeadingAxesAreRows) {
  RUDNN_SEEDED_RNG(rng);
  const Tensor x = random_tensor(rng, {2, 3, 7}, DType::f32);
  const Tensor g = random_tensor(rng, {7}, DType::f32);
  const Tensor y3 = rms_norm(x, g, 1e-6f);
  EXPECT_EQ(y3.shape(), (Shape{2, 3, 7}));
  EXPECT_TRUE(bit_equal(y3.view({6, 7}), rms_norm(x.view({6, 7}), g, 1e-6f)));
  EXPECT_EQ(logsumexp(x).shape(), (Shape{2, 3}));
  EXPECT_EQ(logsumexp(random_tensor(rng, {5}, DType::f32)).shape(), Shape{});
}

TEST(NormReference, AddRmsNormEqualsTheTwoOpsComposed) {
  RUDNN_SEEDED_RNG(rng);
  for (DType dt : {DType::f32, DType::f16, DType::bf16}) {
    const Tensor x = random_tensor(rng, {9, 40}, dt), r = random_tensor(rng, {9, 40}, dt);
    const Tensor g = random_tensor(rng, {40}, DType::f32);
    const AddRmsNormResult out = add_rms_norm(x, r, g, 1e-6f);
    // The sum is formed in FP32 and rounded once to the dtype.
    const auto xs = to_doubles(x), rs = to_doubles(r);
    std::vector<double> sum(xs.size());
    for (size_t i = 0; i < xs.size(); ++i)
      sum[i] = static_cast<float>(xs[i]) + static_cast<float>(rs[i]);
    EXPECT_TRUE(bit_equal(out.sum, host_tensor(sum, {9, 40}, dt))) << dtype_name(dt);
    EXPECT_TRUE(bit_equal(out.normed, rms_norm(out.sum, g, 1e-6f))) << dtype_name(dt);
  }
}

TEST(NormReference, SoftmaxRowsSumToOneAndIgnoreShifts) {
  RUDNN_SEEDED_RNG(rng);
  const Tensor x = random_tensor(rng, {4, 33}, DType::f32, 0, 3);
  auto shifted = to_doubles(x);
  for (double& v : shifted) v += 1000.0;  // large values must not overflow
  const auto p = to_doubles(softmax_last_axis(x));
  const auto q = to_doubles(softmax_last_axis(f32(shifted, {4, 33})));
  for (int r = 0; r < 4; ++r) {
    double s = 0;
    for (int c = 0; c < 33; ++c) s += p[r * 33 + c];
    EXPECT_NEAR(s, 1.0, 1e-5);
  }
  // Adding 1000 in f32 rounds x itself (ulp 6e-5), so compare loosely.
  for (size_t i = 0; i < p.size(); ++i) EXPECT_NEAR(p[i], q[i], 1e-3);
}

TEST(NormReference, SoftmaxAndLogSumExpSpecialRows) {
  const Tensor x = f32({-kInf, -kInf, -kInf,      // all -inf
                        1.0, kInf, 2.0,           // a +inf
                        1.0, kNaN, 2.0,           // a NaN
                        -kInf, 0.0, 0.0,          // -inf with finite values
                        1000.0, 1000.0, 1000.0},  // large and equal
                       {5, 3});
  const auto p = to_doubles(softmax_last_axis(x));
  for (int c = 0; c < 9; ++c) EXPECT_TRUE(std::isnan(p[c])) << c;
  EXPECT_EQ(p[9], 0.0);
  EXPECT_NEAR(p[10], 0.5, 1e-7);
  for (int c = 12; c < 15; ++c) EXPECT_NEAR(p[c], 1.0 / 3.0, 1e-7);

  const auto l = to_doubles(logsumexp(x));
  EXPECT_EQ(l[0], -kInf);
  EXPECT_EQ(l[1], kInf);
  EXPECT_TRUE(std::isnan(l[2]));
  EXPECT_NEAR(l[3], std::log(2.0), 1e-6);
  EXPECT_NEAR(l[4], 1000.0 + std::log(3.0), 1e-3);
}

TEST(NormReference, LogSumExpMatchesDefinition) {
  RUDNN_SEEDED_RNG(rng);
  for (DType dt : {DType::f32, DType::f16, DType::bf16}) {
    const Tensor x = random_tensor(rng, {6, 50}, dt);
    const auto xs = to_doubles(x);
    std::vector<double> expected(6);
    for (int r = 0; r < 6; ++r) {
      double s = 0;
      for (int c = 0; c < 50; ++c) s += std::exp(xs[r * 50 + c]);
      expected[r] = std::log(s);
    }
    EXPECT_TRUE(all_close(logsumexp(x), host_tensor(expected, {6}, dt))) << dtype_name(dt);
  }
}

TEST(NormReference, CrossEntropyTargetsRules) {
  RUDNN_SEEDED_RNG(rng);
  const int64_t rows = 7, classes = 11;
  const Tensor logits = random_tensor(rng, {rows, classes}, DType::f32, 0, 2);
  const auto lse = to_doubles(logsumexp(logits));
  const auto xs = to_doubles(logits);
  // In range, negative (from the end), out of range on both sides, huge, and the ignore value.
  const std::vector<double> targets = {3, -1, -11, 11, -12, 4e9, -100};
  const auto loss = to_doubles(cross_entropy(logits, host_tensor(targets, {rows}, DType::i64),
                                             CrossEntropyOptions{}.set_ignore_index(-100)));
  EXPECT_NEAR(loss[0], lse[0] - xs[0 * classes + 3], 1e-5);
  EXPECT_NEAR(loss[1], lse[1] - xs[1 * classes + 10], 1e-5);  // -1 -> class 10
  EXPECT_NEAR(loss[2], lse[2] - xs[2 * classes + 0], 1e-5);   // -11 -> class 0
  EXPECT_TRUE(std::isnan(loss[3]));
  EXPECT_TRUE(std::isnan(loss[4]));
  EXPECT_TRUE(std::isnan(loss[5]));
  EXPECT_EQ(loss[6], 0.0);  // ignored: compared before the negative wrap
  // Without ignore_index, -100 is just out of range for 11 classes.
  EXPECT_TRUE(
      std::isnan(to_doubles(cross_entropy(logits, host_tensor(targets, {rows}, DType::i64)))[6]));

  const Tensor grad = cross_entropy_backward(logits, host_tensor(targets, {rows}, DType::i64),
                                             Tensor::full({rows}, 1.0, DType::f32),
                                             CrossEntropyOptions{}.set_ignore_index(-100));
  const auto g = to_doubles(grad);
  for (int c = 0; c < classes; ++c) {
    EXPECT_TRUE(std::isnan(g[3 * classes + c]));
    EXPECT_EQ(g[6 * classes + c], 0.0);
  }
}

TEST(NormReference, CrossEntropyAcceptsEveryIntegerTargetDtype) {
  RUDNN_SEEDED_RNG(rng);
  const Tensor logits = random_tensor(rng, {3, 2, 9}, DType::bf16);
  const Tensor t64 = random_integers(rng, {3, 2}, DType::i64, 0, 8);
  const Tensor expected = cross_entropy(logits, t64);
  EXPECT_EQ(expected.dtype(), DType::f32);
  EXPECT_EQ(expected.shape(), (Shape{3, 2}));
  for (DType dt : {DType::i32, DType::u32, DType::u8}) {
    EXPECT_TRUE(
        bit_equal(cross_entropy(logits, host_tensor(to_doubles(t64), {3, 2}, dt)), expected))
        << dtype_name(dt);
  }
}

TEST(NormReference, CrossEntropyWithGradEqualsForwardAndBackward) {
  RUDNN_SEEDED_RNG(rng);
  const Tensor logits = random_tensor(rng, {13, 17}, DType::f32);
  const Tensor targets = random_integers(rng, {13}, DType::i32, -17, 16);
  const float scale = 1.0f / 13;
  const CrossEntropyWithGrad both = cross_entropy_with_grad(logits, targets, scale);
  EXPECT_TRUE(bit_equal(both.loss, cross_entropy(logits, targets)));
  EXPECT_TRUE(bit_equal(both.dlogits, cross_entropy_backward(
                                          logits, targets, Tensor::full({13}, scale, DType::f32))));
  // With an upstream gradient per row.
  const Tensor dloss = random_tensor(rng, {13}, DType::f32);
  const CrossEntropyWithGrad per_row = cross_entropy_with_grad(logits, targets, dloss);
  EXPECT_TRUE(bit_equal(per_row.loss, cross_entropy(logits, targets)));
  EXPECT_TRUE(bit_equal(per_row.dlogits, cross_entropy_backward(logits, targets, dloss)));
}

TEST(NormReference, ScaleUnlessOne) {
  RUDNN_SEEDED_RNG(rng);
  for (DType dt : {DType::f32, DType::f16, DType::bf16}) {
    const Tensor x = random_tensor(rng, {5, 7}, dt);
    Tensor untouched = Tensor::empty(x.shape(), dt);
    untouched.copy_from(x);
    scale_unless_one(x, Tensor::full({1}, 1.0, DType::f32));
    EXPECT_TRUE(bit_equal(x, untouched)) << dtype_name(dt);
    scale_unless_one(x, Tensor::full({1}, -0.5, DType::f32));
    const auto before = to_doubles(untouched), after = to_doubles(x);
    for (size_t i = 0; i < before.size(); ++i) {
      // Exact: a product by -0.5 in FP32, then rounded to the dtype it came from.
      ASSERT_EQ(after[i], -0.5 * before[i]) << dtype_name(dt) << " element " << i;
    }
  }
  // Rows of a strided view are scaled in place, the rows between untouched.
  const Tensor base = Tensor::full({6, 4}, 2.0, DType::f32);
  scale_unless_one(base.slice(0, 0, 6, 2), Tensor::full({1}, 3.0, DType::f32));
  const auto v = to_doubles(base);
  for (int64_t r = 0; r < 6; ++r)
    for (int64_t c = 0; c < 4; ++c) ASSERT_EQ(v[r * 4 + c], r % 2 ? 2.0 : 6.0);
}

TEST(NormReference, StridedInputsEqualContiguousOnes) {
  RUDNN_SEEDED_RNG(rng);
  const Tensor base = random_tensor(rng, {6, 5, 12}, DType::f32);
  const Tensor g = random_tensor(rng, {12}, DType::f32);
  // Leading axes permuted (copied first), rows stepped (read in place), last axis strided.
  const Tensor views[] = {base.transpose(0, 1), base.slice(0, 0, 6, 2), base.slice(2, 0, 12, 2),
                          base.slice(1, 1, 4), base.view({30, 12}).slice(0, 1, 30, 3)};
  for (const Tensor& v : views) {
    const Tensor dense = v.contiguous();
    const Tensor gv = g.slice(0, 0, v.shape().back());
    EXPECT_TRUE(bit_equal(rms_norm(v, gv, 1e-6f), rms_norm(dense, gv.contiguous(), 1e-6f)))
        << shape_str(v.strides());
    EXPECT_TRUE(bit_equal(softmax_last_axis(v), softmax_last_axis(dense)))
        << shape_str(v.strides());
    EXPECT_TRUE(bit_equal(layer_norm(v, {}, {}, 1e-5f), layer_norm(dense, {}, {}, 1e-5f)));
  }
  // A strided gamma (every other element of a longer vector) is taken as well.
  const Tensor g2 = random_tensor(rng, {24}, DType::f32).slice(0, 0, 24, 2);
  EXPECT_TRUE(bit_equal(rms_norm(base, g2, 1e-6f), rms_norm(base, g2.contiguous(), 1e-6f)));
}

TEST(NormReference, ZeroRows) {
  const Tensor x = Tensor::empty({0, 8}, DType::bf16);
  EXPECT_EQ(rms_norm(x, {}, 1e-6f).shape(), (Shape{0, 8}));
  EXPECT_EQ(logsumexp(x).shape(), (Shape{0}));
  const Tensor gamma = Tensor::full({8}, 2.0, DType::f32);
  const RmsNormGrads g = rms_norm_backward(x, x, gamma, 1e-6f);
  EXPECT_EQ(g.dx.shape(), (Shape{0, 8}));
  for (double v : to_doubles(g.dgamma)) EXPECT_EQ(v, 0.0);  // a sum over no rows
}

TEST(NormReference, IntoFormsWriteOnlyTheirOutput) {
  RUDNN_SEEDED_RNG(rng);
  const Tensor x = random_tensor(rng, {4, 10}, DType::f32);
  // The output is every other row of a larger poisoned buffer: the rows between stay poisoned.
  const Tensor buffer = poisoned({8, 10}, DType::f32, Device::cpu());
  const Tensor out = buffer.slice(0, 0, 8, 2);
  rms_norm_into(out, x, {}, 1e-6f);
  EXPECT_TRUE(bit_equal(out, rms_norm(x, {}, 1e-6f)));
  const auto all = to_doubles(buffer);
  for (int r = 1; r < 8; r += 2)
    for (int c = 0; c < 10; ++c) EXPECT_TRUE(std::isnan(all[r * 10 + c]));
}

// ---- Backward passes against central differences of the forward ops -----------------------

// d/dv of sum(f(v) * weight) by central differences, in double on f32 tensors.
std::vector<double> numeric_gradient(const std::function<Tensor(const Tensor&)>& f, const Tensor& v,
                                     const Tensor& weight, double h) {
  const std::vector<double> base = to_doubles(v), w = to_doubles(weight);
  std::vector<double> grad(base.size());
  for (size_t i = 0; i < base.size(); ++i) {
    auto eval = [&](double delta) {
      std::vector<double> moved = base;
      moved[i] += delta;
      const auto y = to_doubles(f(host_tensor(moved, v.shape(), DType::f32)));
      double s = 0;
      for (size_t k = 0; k < y.size(); ++k) s += y[k] * w[k];
      return s;
    };
    grad[i] = (eval(h) - eval(-h)) / (2 * h);
  }
  return grad;
}

::testing::AssertionResult gradient_close(const Tensor& analytic,
                                          const std::vector<double>& numeric) {
  return all_close(analytic, host_tensor(numeric, analytic.shape(), DType::f32), 2e-3);
}

TEST(NormReference, LayerNormBackwardMatchesFiniteDifferences) {
  RUDNN_SEEDED_RNG(rng);
  const float eps = 1e-3f;
  const Tensor x = random_tensor(rng, {3, 7}, DType::f32, 0.5f, 1.0f);
  const Tensor gamma = random_tensor(rng, {7}, DType::f32),
               beta = random_tensor(rng, {7}, DType::f32);
  const Tensor dy = random_tensor(rng, {3, 7}, DType::f32);
  const LayerNormGrads g = layer_norm_backward(dy, x, gamma, beta, eps);
  EXPECT_TRUE(gradient_close(
      g.dx, numeric_gradient([&](const Tensor& v) { return layer_norm(v, gamma, beta, eps); }, x,
                             dy, 1e-2)));
  EXPECT_TRUE(gradient_close(
      g.dgamma, numeric_gradient([&](const Tensor& v) { return layer_norm(x, v, beta, eps); },
                                 gamma, dy, 1e-2)));
  EXPECT_TRUE(gradient_close(
      g.dbeta, numeric_gradient([&](const Tensor& v) { return layer_norm(x, gamma, v, eps); }, beta,
                                dy, 1e-2)));
  // Without parameters only dx comes back, equal to the one with gamma = 1.
  const LayerNormGrads plain = layer_norm_backward(dy, x, {}, {}, eps);
  EXPECT_FALSE(plain.dgamma.defined());
  EXPECT_FALSE(plain.dbeta.defined());
  EXPECT_TRUE(all_close(
      plain.dx, layer_norm_backward(dy, x, Tensor::full({7}, 1.0, DType::f32), {}, eps).dx, 1e-6));
}

TEST(NormReference, RmsNormBackwardMatchesFiniteDifferences) {
  RUDNN_SEEDED_RNG(rng);
  const float eps = 1e-3f;
  const Tensor x = random_tensor(rng, {4, 6}, DType::f32);
  const Tensor gamma = random_tensor(rng, {6}, DType::f32);
  const Tensor dy = random_tensor(rng, {4, 6}, DType::f32);
  const RmsNormGrads g = rms_norm_backward(dy, x, gamma, eps);
  EXPECT_TRUE(gradient_close(
      g.dx,
      numeric_gradient([&](const Tensor& v) { return rms_norm(v, gamma, eps); }, x, dy, 1e-2)));
  EXPECT_TRUE(gradient_close(
      g.dgamma,
      numeric_gradient([&](const Tensor& v) { return rms_norm(x, v, eps); }, gamma, dy, 1e-2)));
}

TEST(NormReference, SoftmaxBackwardMatchesFiniteDifferences) {
  RUDNN_SEEDED_RNG(rng);
  const Tensor x = random_tensor(rng, {3, 9}, DType::f32);
  const Tensor dy = random_tensor(rng, {3, 9}, DType::f32);
  const Tensor dx = softmax_backward(dy, softmax_last_axis(x));
  EXPECT_TRUE(gradient_close(
      dx, numeric_gradient([](const Tensor& v) { return softmax_last_axis(v); }, x, dy, 1e-2)));
}

TEST(NormReference, CrossEntropyBackwardMatchesFiniteDifferences) {
  RUDNN_SEEDED_RNG(rng);
  const Tensor logits = random_tensor(rng, {5, 8}, DType::f32);
  const Tensor targets = random_integers(rng, {5}, DType::i64, -8, 7);
  const Tensor dloss = random_tensor(rng, {5}, DType::f32);
  const Tensor dlogits = cross_entropy_backward(logits, targets, dloss);
  EXPECT_TRUE(gradient_close(
      dlogits, numeric_gradient([&](const Tensor& v) { return cross_entropy(v, targets); }, logits,
                                dloss, 1e-2)));
}

TEST(NormReference, OpsLeaveTheirInputsUnchanged) {
  RUDNN_SEEDED_RNG(rng);
  const Tensor x = random_tensor(rng, {3, 16}, DType::bf16),
               r = random_tensor(rng, {3, 16}, DType::bf16);
  const Tensor g = random_tensor(rng, {16}, DType::f32), b = random_tensor(rng, {16}, DType::bf16);
  const Tensor dy = random_tensor(rng, {3, 16}, DType::bf16);
  const Tensor t = random_integers(rng, {3}, DType::i64, 0, 15);
  const Tensor dloss = random_tensor(rng, {3}, DType::f32);
  const Tensor inputs[] = {x, r, g, b, dy, t, dloss};
  std::vector<std::vector<unsigned char>> before;
  for (const Tensor& in : inputs) before.push_back(bytes_of(in));
  layer_norm(x, g, b, 1e-5f);
  rms_norm(x, g, 1e-5f);
  add_rms_norm(x, r, g, 1e-5f);
  softmax_last_axis(x);
  logsumexp(x);
  cross_entropy(x, t);
  layer_norm_backward(dy, x, g, b, 1e-5f);
  rms_norm_backward(dy, x, g, 1e-5f);
  softmax_backward(dy, x);
  cross_entropy_backward(x, t, dloss);
  cross_entropy_with_grad(x, t, 0.5f);
  for (size_t i = 0; i < before.size(); ++i)
    EXPECT_EQ(bytes_of(inputs[i]), before[i]) << "input " << i;
}

// The reference streams its rows: a row costs no scratch of its own length (a float64 copy of
// a 2^31-element row would need 16 GiB). Checked in a child process whose address space is
// capped at what it holds plus the outputs and 192 MiB: a row-sized float64 scratch (1 GiB
// here) cannot be had there.
void run_with_address_space_headroom(size_t headroom_bytes, const std::function<void()>& body) {
  std::ifstream statm("/proc/self/statm");
  size_t pages = 0;
  statm >> pages;
  const rlim_t cap = pages * static_cast<size_t>(sysconf(_SC_PAGESIZE)) + headroom_bytes;
  const rlimit limit{cap, cap};
  if (setrlimit(RLIMIT_AS, &limit) != 0) _exit(3);
  try {
    body();
  } catch (...) {
    _exit(1);
  }
  _exit(0);
}

constexpr int64_t kLongRow = int64_t{1} << 27;  // 256 MiB in bf16, 1 GiB in float64
constexpr size_t kLongRowBytes = kLongRow * 2, kSlack = size_t{192} << 20;

void layer_norm_of_a_long_row() {
  const Tensor x = Tensor::full({1, kLongRow}, 0.5, DType::bf16),
               gamma = Tensor::full({kLongRow}, 2.0, DType::bf16);
  run_with_address_space_headroom(kLongRowBytes + kSlack, [&] {
    const Tensor y = layer_norm(x, gamma, {}, 1e-5f);
    if (to_doubles(y.slice(1, 0, 1))[0] != 0.0) _exit(2);  // a constant row normalises to beta = 0
  });
}

void rms_norm_backward_of_a_long_row() {
  const Tensor x = Tensor::full({1, kLongRow}, 0.5, DType::bf16),
               gamma = Tensor::full({kLongRow}, 2.0, DType::bf16);
  const Tensor dy = Tensor::full({1, kLongRow}, 1.0, DType::bf16);
  run_with_address_space_headroom(2 * kLongRowBytes + kSlack,
                                  [&] { rms_norm_backward(dy, x, gamma, 1e-5f); });
}

TEST(NormReferenceDeathTest, LongRowsNeedNoRowSizedScratch) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(layer_norm_of_a_long_row(), testing::ExitedWithCode(0), "");
  EXPECT_EXIT(rms_norm_backward_of_a_long_row(), testing::ExitedWithCode(0), "");
}

}  // namespace
}  // namespace rudnn::test
