// The float64 CPU definition of CTC loss: hand cases, a brute-force sum over every alignment,
// the reductions, and the gradient against finite differences through log_softmax.
#include <cmath>
#include <limits>
#include <vector>

#include "rudnn/ctc.h"
#include "support/test_support.h"

namespace rudnn::test {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

Tensor i64(const std::vector<int64_t>& v, const Shape& shape) {
  return Tensor::from_host(v, shape);
}

// log_softmax over the last axis of a [T, N, C] row-major vector.
std::vector<double> log_softmax(const std::vector<double>& z, int64_t C) {
  std::vector<double> out(z.size());
  for (size_t r = 0; r < z.size() / C; ++r) {
    double m = -kInf;
    for (int64_t c = 0; c < C; ++c) m = std::max(m, z[r * C + c]);
    double s = 0;
    for (int64_t c = 0; c < C; ++c) s += std::exp(z[r * C + c] - m);
    for (int64_t c = 0; c < C; ++c) out[r * C + c] = z[r * C + c] - m - std::log(s);
  }
  return out;
}

std::vector<double> random_log_probs(Rng& rng, int64_t T, int64_t N, int64_t C) {
  std::vector<double> z(T * N * C);
  for (double& v : z) v = rng.normal();
  return log_softmax(z, C);
}

double loss_of(const std::vector<double>& lp, const Shape& shape, const std::vector<int64_t>& tg,
               const Shape& tg_shape, const std::vector<int64_t>& in_len,
               const std::vector<int64_t>& tg_len, CtcLossOptions o) {
  Tensor l =
      ctc_loss(host_tensor(lp, shape, DType::f64), i64(tg, tg_shape),
               i64(in_len, {(int64_t)in_len.size()}), i64(tg_len, {(int64_t)tg_len.size()}), o);
  return to_doubles(l)[0];
}

TEST(CtcReference, HandCases) {
  const double half = std::log(0.5);
  CtcLossOptions none{0, CtcReduction::none, false};
  // Empty target, T = 1: the only path is one blank.
  EXPECT_NEAR(loss_of({std::log(0.3), std::log(0.7)}, {1, 1, 2}, {}, {0}, {1}, {0}, none),
              -std::log(0.3), 1e-12);
  // Target [1] in T = 2, two classes at 1/2: paths "1-", "-1", "11".
  EXPECT_NEAR(loss_of({half, half, half, half}, {2, 1, 2}, {1}, {1}, {2}, {1}, none),
              -std::log(0.75), 1e-12);
  // T equal to the target length: the labels themselves are the only path.
  const std::vector<double> lp = {std::log(0.2), std::log(0.5), std::log(0.3),
                                  std::log(0.1), std::log(0.6), std::log(0.3)};
  EXPECT_NEAR(loss_of(lp, {2, 1, 3}, {1, 2}, {1, 2}, {2}, {2}, none),
              -(std::log(0.5) + std::log(0.3)), 1e-12);
  // Repeated labels need a blank between them: [1, 1] cannot fit in T = 2 ...
  EXPECT_EQ(loss_of({half, half, half, half}, {2, 1, 2}, {1, 1}, {2}, {2}, {2}, none), kInf);
  // ... and in T = 3 only "1-1" fits.
  EXPECT_NEAR(loss_of(std::vector<double>(6, half), {3, 1, 2}, {1, 1}, {2}, {3}, {2}, none),
              3 * std::log(2.0), 1e-12);
  // zero_infinity replaces the impossible alignment's loss by 0.
  EXPECT_EQ(loss_of({half, half, half, half}, {2, 1, 2}, {1, 1}, {2}, {2}, {2},
                    {0, CtcReduction::none, true}),
            0.0);
  // Input length 0: loss 0 for an empty target, infinite otherwise.
  EXPECT_EQ(loss_of({half, half}, {1, 1, 2}, {}, {0}, {0}, {0}, none), 0.0);
  EXPECT_EQ(loss_of({half, half}, {1, 1, 2}, {1}, {1}, {0}, {1}, none), kInf);
}

// Collapses a path (merge repeats, then drop blanks).
std::vector<int64_t> collapse(const std::vector<int64_t>& path, int64_t blank) {
  std::vector<int64_t> out;
  for (size_t i = 0; i < path.size(); ++i)
    if (path[i] != blank && (i == 0 || path[i] != path[i - 1])) out.push_back(path[i]);
  return out;
}

TEST(CtcReference, MatchesSumOverAllAlignments) {
  RUDNN_SEEDED_RNG(rng);
  const int64_t C = 3;
  for (int trial = 0; trial < 20; ++trial) {
    const int64_t T = rng.integer(1, 5), blank = rng.integer(0, C - 1);
    const int64_t L = rng.integer(0, 3);
    std::vector<int64_t> target;
    for (int64_t i = 0; i < L; ++i) {
      int64_t c = rng.integer(0, C - 2);
      target.push_back(c >= blank ? c + 1 : c);  // never the blank; repeats happen often
    }
    const std::vector<double> lp = random_log_probs(rng, T, 1, C);
    double prob = 0;
    std::vector<int64_t> path(T, 0);
    for (int64_t code = 0; code < static_cast<int64_t>(std::pow(C, T)); ++code) {
      double logp = 0;
      for (int64_t t = 0, k = code; t < T; ++t, k /= C) {
        path[t] = k % C;
        logp += lp[t * C + path[t]];
      }
      if (collapse(path, blank) == target) prob += std::exp(logp);
    }
    const double got =
        loss_of(lp, {T, 1, C}, target, {L}, {T}, {L}, {blank, CtcReduction::none, false});
    if (prob == 0) {
      EXPECT_EQ(got, kInf) << "T " << T << " L " << L;
    } else {
      EXPECT_NEAR(got, -std::log(prob), 1e-10) << "T " << T << " L " << L;
    }
  }
}

TEST(CtcReference, ReductionsAndTargetLayouts) {
  RUDNN_SEEDED_RNG(rng);
  const int64_t T = 12, N = 4, C = 6, S = 5;
  const Tensor lp = host_tensor(random_log_probs(rng, T, N, C), {T, N, C}, DType::f64);
  const std::vector<int64_t> tg_len = {5, 0, 3, 1}, in_len = {12, 7, 8, 10};
  std::vector<int64_t> padded(N * S, 0), concat;  // padding 0 = blank: never read
  for (int64_t n = 0; n < N; ++n)
    for (int64_t i = 0; i < tg_len[n]; ++i) {
      padded[n * S + i] = rng.integer(1, C - 1);
      concat.push_back(padded[n * S + i]);
    }
  const Tensor il = i64(in_len, {N}),
               tl = Tensor::from_host(std::vector<int32_t>(tg_len.begin(), tg_len.end()), {N});
  const Tensor tg_padded = i64(padded, {N, S});
  const Tensor tg_concat = Tensor::from_host(std::vector<int32_t>(concat.begin(), concat.end()),
                                             {(int64_t)concat.size()});
  const std::vector<unsigned char> lp_before = bytes_of(lp);
  const std::vector<double> none =
      to_doubles(ctc_loss(lp, tg_padded, il, tl, {0, CtcReduction::none}));
  EXPECT_EQ(none, to_doubles(ctc_loss(lp, tg_concat, il, tl, {0, CtcReduction::none})));
  double sum = 0, mean = 0;
  for (int64_t n = 0; n < N; ++n) {
    ASSERT_TRUE(std::isfinite(none[n]) && none[n] > 0) << n;
    sum += none[n];
    mean += none[n] / std::max<int64_t>(tg_len[n], 1) / N;
  }
  const Tensor s = ctc_loss(lp, tg_padded, il, tl, {0, CtcReduction::sum});
  EXPECT_EQ(s.shape(), Shape{});
  EXPECT_NEAR(to_doubles(s)[0], sum, 1e-12);
  EXPECT_NEAR(to_doubles(ctc_loss(lp, tg_concat, il, tl, {0, CtcReduction::mean}))[0], mean, 1e-12);
  // Inputs are never modified; _into writes the same values.
  EXPECT_EQ(bytes_of(lp), lp_before);
  const Tensor out = Tensor::full({N}, std::nan(""), DType::f64);
  ctc_loss_into(out, lp, tg_padded, il, tl, {0, CtcReduction::none});
  EXPECT_EQ(to_doubles(out), none);
}

// The loss as a function of logits z (log_probs = log_softmax(z)): torch's gradient formula
// is this derivative, which the reference must reproduce.
TEST(CtcReference, GradientMatchesFiniteDifferencesThroughLogSoftmax) {
  RUDNN_SEEDED_RNG(rng);
  const int64_t T = 6, N = 3, C = 4, S = 3;
  std::vector<double> z(T * N * C);
  for (double& v : z) v = rng.normal();
  // Sample 1 repeats a label; sample 2 has an empty target and a short input.
  const std::vector<int64_t> tg = {1, 2, 3, 2, 2, 0, 0, 0, 0}, tg_len = {3, 2, 0},
                             in_len = {6, 5, 2};
  for (CtcReduction red : {CtcReduction::none, CtcReduction::sum, CtcReduction::mean}) {
    SCOPED_TRACE(static_cast<int>(red));
    const CtcLossOptions o{0, red, false};
    // Upstream gradient: distinct per sample for none, 0.7 otherwise.
    const Tensor g = red == CtcReduction::none ? host_tensor({0.5, -1.25, 2.0}, {N}, DType::f64)
                                               : host_tensor({0.7}, {}, DType::f64);
    const std::vector<double> gv = to_doubles(g);
    auto objective = [&](const std::vector<double>& zz) {
      const std::vector<double> l =
          to_doubles(ctc_loss(host_tensor(log_softmax(zz, C), {T, N, C}, DType::f64),
                              i64(tg, {N, S}), i64(in_len, {N}), i64(tg_len, {N}), o));
      double v = 0;
      for (size_t i = 0; i < l.size(); ++i) v += l[i] * gv[i];
      return v;
    };
    const std::vector<double> grad =
        to_doubles(ctc_loss_backward(host_tensor(log_softmax(z, C), {T, N, C}, DType::f64),
                                     i64(tg, {N, S}), i64(in_len, {N}), i64(tg_len, {N}), g, o));
    for (size_t i = 0; i < z.size(); ++i) {
      std::vector<double> zp = z, zm = z;
      zp[i] += 1e-6;
      zm[i] -= 1e-6;
      const double fd = (objective(zp) - objective(zm)) / 2e-6;
      EXPECT_NEAR(grad[i], fd, 1e-6) << "element " << i;
    }
    // Steps past a sample's input length get no gradient.
    for (int64_t t = in_len[2]; t < T; ++t)
      for (int64_t c = 0; c < C; ++c) EXPECT_EQ(grad[(t * N + 2) * C + c], 0.0);
  }
}

TEST(CtcReference, ZeroInfinityZeroesGradientsOfImpossibleTargets) {
  const double half = std::log(0.5);
  const Tensor lp = host_tensor(std::vector<double>(4, half), {2, 1, 2}, DType::f64);
  const Tensor tg = i64({1, 1}, {1, 2}), il = i64({2}, {1}), tl = i64({2}, {1});
  const Tensor g = host_tensor({1.0}, {}, DType::f64);
  for (double v : to_doubles(ctc_loss_backward(lp, tg, il, tl, g, {0, CtcReduction::sum, true})))
    EXPECT_EQ(v, 0.0);
  for (double v : to_doubles(ctc_loss_backward(lp, tg, il, tl, g, {0, CtcReduction::sum, false})))
    EXPECT_TRUE(std::isnan(v));
}

TEST(CtcReference, EmptyBatchAndZeroSteps) {
  // N = 0: an empty [0] loss, a NaN mean (as torch), an empty gradient.
  const Tensor lp0 = Tensor::zeros({3, 0, 4}, DType::f64), none0 = i64({}, {0});
  EXPECT_EQ(ctc_loss(lp0, i64({}, {0, 2}), none0, none0, {0, CtcReduction::none}).shape(),
            Shape{0});
  EXPECT_TRUE(std::isnan(to_doubles(ctc_loss(lp0, i64({}, {0, 2}), none0, none0))[0]));
  EXPECT_EQ(ctc_loss_backward(lp0, i64({}, {0}), none0, none0, host_tensor({1.0}, {}, DType::f64))
                .shape(),
            (Shape{3, 0, 4}));
  // T = 0: every input length is 0; an empty target costs 0, any other is impossible.
  const Tensor lp = Tensor::zeros({0, 2, 3}, DType::f64);
  EXPECT_EQ(to_doubles(ctc_loss(lp, i64({0, 1}, {2, 1}), i64({0, 0}, {2}), i64({0, 1}, {2}),
                                {0, CtcReduction::none})),
            (std::vector<double>{0.0, kInf}));
}

// F32, F16 and BF16 log-probabilities run through the same float64 recursions: the results
// are the F64 results on the same (rounded) values, rounded once to the dtype.
TEST(CtcReference, EveryFloatDtypeIsTheF64ResultRoundedOnce) {
  RUDNN_SEEDED_RNG(rng);
  const int64_t T = 9, N = 3, C = 5;
  const std::vector<double> lp = random_log_probs(rng, T, N, C);
  const Tensor tg = i64({1, 2, 2, 3, 4, 0, 1, 1, 1}, {N, 3});
  const Tensor il = i64({9, 7, 8}, {N}), tl = i64({3, 2, 3}, {N});
  for (DType dt : {DType::f32, DType::f16, DType::bf16}) {
    SCOPED_TRACE(dtype_name(dt));
    for (CtcReduction r : {CtcReduction::none, CtcReduction::mean, CtcReduction::sum}) {
      const CtcLossOptions o{0, r, false};
      const Tensor x = host_tensor(lp, {T, N, C}, dt);
      const Tensor x64 = host_tensor(to_doubles(x), {T, N, C}, DType::f64);
      const Shape g_shape = r == CtcReduction::none ? Shape{N} : Shape{};
      const Tensor g =
          host_tensor(std::vector<double>(r == CtcReduction::none ? N : 1, 0.75), g_shape, dt);
      const Tensor g64 = host_tensor(to_doubles(g), g_shape, DType::f64);
      const Tensor loss = ctc_loss(x, tg, il, tl, o);
      ASSERT_EQ(loss.dtype(), dt);
      EXPECT_TRUE(
          bit_equal(loss, host_tensor(to_doubles(ctc_loss(x64, tg, il, tl, o)), loss.shape(), dt)));
      const Tensor grad = ctc_loss_backward(x, tg, il, tl, g, o);
      ASSERT_EQ(grad.dtype(), dt);
      EXPECT_TRUE(bit_equal(
          grad,
          host_tensor(to_doubles(ctc_loss_backward(x64, tg, il, tl, g64, o)), grad.shape(), dt)));
    }
  }
}

}  // namespace
}  // namespace rudnn::test
