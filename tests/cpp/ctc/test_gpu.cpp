// The CUDA kernels of CTC loss against the float64 CPU reference (run on the same rounded
// inputs): every reduction, padded and concatenated targets, random lengths, repeated labels,
// blank not 0, zero_infinity on impossible alignments, long targets and large vocabularies;
// the device-side checks of lengths and labels (NaN for the sample); determinism; devices.
// Fresh random inputs each run (the seed is printed on failure), outputs poisoned before the
// op. Skipped without a GPU.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "rudnn/ctc.h"
#include "support/test_support.h"

#if RUDNN_CTC_TUNING
#include "ctc/cuda/tuning.h"
#endif

namespace rudnn::test {
namespace {

constexpr Device kGpu = Device::cuda(0);

struct CtcCase {
  int64_t T = 0, N = 0, C = 0, S = 0;
  bool padded = true;
  CtcLossOptions o;
  Tensor lp, tg, il, tl;  // host
};

std::string describe(const CtcCase& k, DType dt) {
  static const char* const kReductions[] = {"none", "mean", "sum"};
  return (::testing::Message() << dtype_name(dt) << " T " << k.T << " N " << k.N << " C " << k.C
                               << " S " << k.S << (k.padded ? " padded" : " concatenated")
                               << " blank " << k.o.blank << " reduction "
                               << kReductions[static_cast<int>(k.o.reduction)] << " zero_infinity "
                               << k.o.zero_infinity)
      .GetString();
}

// log_softmax of N(0, spread) logits over C, rounded to dt.
Tensor random_log_probs(Rng& rng, int64_t T, int64_t N, int64_t C, DType dt, float spread = 2.0f) {
  std::vector<double> v(static_cast<size_t>(T * N * C));
  for (int64_t r = 0; r < T * N; ++r) {
    double* row = v.data() + r * C;
    double m = -INFINITY, sum = 0.0;
    for (int64_t c = 0; c < C; ++c) {
      row[c] = rng.normal(0.0f, spread);
      m = std::max(m, row[c]);
    }
    for (int64_t c = 0; c < C; ++c) sum += std::exp(row[c] - m);
    for (int64_t c = 0; c < C; ++c) row[c] = row[c] - m - std::log(sum);
  }
  return host_tensor(v, {T, N, C}, dt);
}

// Random lengths (some inputs shorter than T, some targets empty, the longest S) and labels
// (one in `repeat_every` repeating the label before, so that the skip rule matters; a target
// of S labels with S / repeat_every repeats needs that many more steps to be alignable).
CtcCase make_case(Rng& rng, DType dt, int64_t T, int64_t N, int64_t C, int64_t S, bool padded,
                  CtcLossOptions o, int64_t repeat_every = 2) {
  CtcCase k{T, N, C, S, padded, o, {}, {}, {}, {}};
  k.lp = random_log_probs(rng, T, N, C, dt);
  std::vector<int64_t> in_len(N), tg_len(N), labels;
  for (int64_t n = 0; n < N; ++n) {
    in_len[n] = n == 0 ? T : rng.integer(std::max<int64_t>(0, T / 2), T);
    tg_len[n] = n == 0 ? S : rng.integer(0, S);
    if (n == 1) tg_len[n] = 0;
  }
  auto label = [&](int64_t previous) {
    if (previous >= 0 && rng.integer(1, repeat_every) == 1) return previous;
    int64_t l = rng.integer(0, C - 2);
    return l >= o.blank ? l + 1 : l;
  };
  for (int64_t n = 0; n < N; ++n) {
    const int64_t stored = padded ? S : tg_len[n];
    int64_t previous = -1;
    for (int64_t i = 0; i < stored; ++i) {
      // Padding past the target's length holds anything: a label the op must not read.
      const int64_t l = i < tg_len[n] ? label(previous) : (i % 2 == 0 ? o.blank : C + 7);
      labels.push_back(l);
      previous = l;
    }
  }
  k.tg = padded ? Tensor::from_host(labels, {N, S})
                : Tensor::from_host(labels, {static_cast<int64_t>(labels.size())});
  k.il = Tensor::from_host(in_len, {N});
  k.tl = Tensor::from_host(tg_len, {N});
  return k;
}

Tensor grad_loss_for(Rng& rng, const CtcCase& k, DType dt) {
  if (k.o.reduction == CtcReduction::none) return random_tensor(rng, {k.N}, dt);
  return host_tensor({0.5 + rng.uniform(0.0f, 1.0f)}, {}, dt);
}

// The gradient's relative L2 bound. FP32 log-space recursions carry an absolute error in
// alpha + beta that grows like sqrt(T) FP32 roundings of the rows' values, which becomes the
// relative error of the target classes' terms: at T = 1000 it reached 1.13e-4 (round 60, seed
// 7744118664397343588, the recursion of alpha over every step), so f32 is held to 2e-4; the
// 16-bit types are bound by their own rounding.
double grad_tolerance(DType dt) { return dt == DType::f32 ? 2e-4 : tolerance(dt); }

void check_case(Rng& rng, const CtcCase& k, DType dt) {
  SCOPED_TRACE(describe(k, dt));
  const Tensor expected_loss = ctc_loss(k.lp, k.tg, k.il, k.tl, k.o);
  const Tensor g = grad_loss_for(rng, k, dt);
  const Tensor expected_grad = ctc_loss_backward(k.lp, k.tg, k.il, k.tl, g, k.o);

  const Tensor lp = k.lp.to(kGpu), tg = k.tg.to(kGpu), il = k.il.to(kGpu), tl = k.tl.to(kGpu),
               dg = g.to(kGpu);
  const Tensor loss = poisoned(expected_loss.shape(), dt, kGpu);
  ctc_loss_into(loss, lp, tg, il, tl, k.o);
  EXPECT_TRUE(all_close(loss.to_host(), expected_loss)) << "loss";
  const Tensor grad = poisoned(k.lp.shape(), dt, kGpu);
  ctc_loss_backward_into(grad, lp, tg, il, tl, dg, k.o);
  EXPECT_TRUE(all_close(grad.to_host(), expected_grad, grad_tolerance(dt))) << "gradient";
  // The functional forms run the same code.
  EXPECT_TRUE(bit_equal(ctc_loss(lp, tg, il, tl, k.o).to_host(), loss.to_host()));
  EXPECT_TRUE(bit_equal(k.lp, lp.to_host())) << "log_probs modified";
  EXPECT_TRUE(bit_equal(k.tg, tg.to_host())) << "targets modified";
}

TEST(CtcGpu, MatchesReferenceEveryReductionAndTargetForm) {
  RUDNN_REQUIRE_CUDA();
  RUDNN_SEEDED_RNG(rng);
  for (DType dt : {DType::f32, DType::f16, DType::bf16}) {
    for (CtcReduction r : {CtcReduction::none, CtcReduction::mean, CtcReduction::sum}) {
      for (bool padded : {true, false}) {
        const int64_t C = 13;
        for (int64_t blank : {int64_t{0}, C - 1, int64_t{5}}) {
          CtcLossOptions o{blank, r, false};
          check_case(rng, make_case(rng, dt, 40, 6, C, 7, padded, o), dt);
        }
      }
    }
  }
}

// Targets too long for their inputs (more labels than steps, or repeats needing a blank
// between them): infinite loss and NaN gradient, or 0 and 0 with zero_infinity.
void check_impossible_alignments(Rng& rng) {
  const int64_t T = 6, N = 4, C = 5;
  // Sample 0: [1 1 1] in 4 steps (needs 5); 1: 7 labels in 6 steps; 2: fine; 3: [2 2] in 3
  // steps (exactly one alignment: 2, blank, 2).
  const std::vector<int64_t> labels = {1, 1, 1, 0, 0, 0, 0, 1, 2, 3, 4, 1, 2, 3,
                                       3, 4, 0, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 0};
  for (bool zero_infinity : {false, true}) {
    for (CtcReduction r : {CtcReduction::none, CtcReduction::mean, CtcReduction::sum}) {
      CtcCase k{T, N, C, 7, true, CtcLossOptions{0, r, zero_infinity}, {}, {}, {}, {}};
      k.lp = random_log_probs(rng, T, N, C, DType::f32);
      k.tg = Tensor::from_host(labels, {N, 7});
      k.il = Tensor::from_host(std::vector<int64_t>{4, 6, 6, 3}, {N});
      k.tl = Tensor::from_host(std::vector<int64_t>{3, 7, 2, 2}, {N});
      check_case(rng, k, DType::f32);
    }
  }
}

TEST(CtcGpu, ImpossibleAlignmentsAndZeroInfinity) {
  RUDNN_REQUIRE_CUDA();
  RUDNN_SEEDED_RNG(rng);
  check_impossible_alignments(rng);
}

// S up to 1024 (2049 states: two per thread of a 1024-thread block) and C >= 5000 (the
// coalesced pass over classes), and a long input (T = 1000: the error bound of the FP32
// recursion).
TEST(CtcGpu, LongTargetsLargeVocabularies) {
  RUDNN_REQUIRE_CUDA();
  RUDNN_SEEDED_RNG(rng);
  const CtcLossOptions mean{0, CtcReduction::mean, false};
  check_case(rng, make_case(rng, DType::f32, 1100, 2, 40, 1024, true, mean, 32), DType::f32);
  check_case(rng,
             make_case(rng, DType::f32, 120, 3, 5003, 40, false, {17, CtcReduction::sum, false}),
             DType::f32);
  check_case(rng, make_case(rng, DType::bf16, 200, 4, 5000, 64, true, mean), DType::bf16);
  check_case(rng, make_case(rng, DType::f32, 1000, 2, 64, 200, true, {3, CtcReduction::none, true}),
             DType::f32);
}

TEST(CtcGpu, ZeroSizes) {
  RUDNN_REQUIRE_CUDA();
  RUDNN_SEEDED_RNG(rng);
  for (CtcReduction r : {CtcReduction::none, CtcReduction::mean, CtcReduction::sum}) {
    const CtcLossOptions o{0, r, false};
    check_case(rng, make_case(rng, DType::f32, 5, 0, 4, 3, true, o), DType::f32);  // N = 0
    CtcCase k = make_case(rng, DType::f32, 0, 2, 4, 3, true, o);                   // T = 0
    k.il = Tensor::from_host(std::vector<int64_t>{0, 0}, {2});
    check_case(rng, k, DType::f32);
    check_case(rng, make_case(rng, DType::f32, 5, 2, 4, 0, true, o), DType::f32);  // S = 0
  }
}

// Non-contiguous log_probs (a [N, T, C] tensor seen as [T, N, C]) and I32 lengths and labels.
TEST(CtcGpu, StridedLogProbsAndI32Indices) {
  RUDNN_REQUIRE_CUDA();
  RUDNN_SEEDED_RNG(rng);
  CtcCase k = make_case(rng, DType::f32, 30, 5, 11, 6, true, {2, CtcReduction::mean, false});
  const Tensor ntc = k.lp.transpose(0, 1).contiguous();
  const Tensor lp_view = ntc.to(kGpu).transpose(0, 1);
  ASSERT_FALSE(lp_view.is_contiguous());
  auto as_i32 = [](const Tensor& t) {
    std::vector<int32_t> v;
    for (double x : to_doubles(t)) v.push_back(static_cast<int32_t>(x));
    return Tensor::from_host(v, t.shape());
  };
  const Tensor tg32 = as_i32(k.tg), il32 = as_i32(k.il);
  const Tensor expected = ctc_loss(k.lp, k.tg, k.il, k.tl, k.o);
  const Tensor g = host_tensor({1.0}, {}, DType::f32);
  const Tensor expected_grad = ctc_loss_backward(k.lp, k.tg, k.il, k.tl, g, k.o);
  EXPECT_TRUE(all_close(
      ctc_loss(lp_view, tg32.to(kGpu), il32.to(kGpu), k.tl.to(kGpu), k.o).to_host(), expected));
  EXPECT_TRUE(all_close(
      ctc_loss_backward(lp_view, tg32.to(kGpu), il32.to(kGpu), k.tl.to(kGpu), g.to(kGpu), k.o)
          .to_host(),
      expected_grad, grad_tolerance(DType::f32)));
}

// Lengths and labels live on the device, so the GPU checks them there: a bad sample gets a
// NaN loss and a NaN gradient at every step, and the other samples are unaffected.
void check_invalid_samples(Rng& rng) {
  const int64_t T = 8, C = 6, S = 3;
  struct Bad {
    const char* what;
    int64_t in_len, tg_len;
    std::vector<int64_t> labels;
  };
  const std::vector<Bad> bads = {
      {"input length > T", T + 1, 2, {1, 2, 0}},    {"negative input length", -1, 2, {1, 2, 0}},
      {"negative target length", T, -2, {1, 2, 0}}, {"target length > S", T, S + 1, {1, 2, 3}},
      {"label == blank", T, 2, {1, 0, 0}},          {"label >= C", T, 2, {C, 1, 0}},
      {"negative label", T, 3, {1, 2, -4}}};
  const CtcLossOptions none{0, CtcReduction::none, false};
  const Tensor good_lp = random_log_probs(rng, T, 1, C, DType::f32);
  const Tensor good_tg = Tensor::from_host(std::vector<int64_t>{2, 2, 3}, {1, S});
  const Tensor good_il = Tensor::from_host(std::vector<int64_t>{T}, {1});
  const Tensor good_tl = Tensor::from_host(std::vector<int64_t>{3}, {1});
  const Tensor g1 = host_tensor({0.7}, {1}, DType::f32);
  const Tensor good_loss = ctc_loss(good_lp, good_tg, good_il, good_tl, none);
  const Tensor good_grad = ctc_loss_backward(good_lp, good_tg, good_il, good_tl, g1, none);
  for (const Bad& bad : bads) {
    SCOPED_TRACE(bad.what);
    // Sample 0 is the good one, sample 1 the bad one.
    const Tensor bad_lp = random_log_probs(rng, T, 1, C, DType::f32);
    std::vector<double> lp = to_doubles(good_lp), other = to_doubles(bad_lp), both;
    for (int64_t t = 0; t < T; ++t) {
      both.insert(both.end(), lp.begin() + t * C, lp.begin() + (t + 1) * C);
      both.insert(both.end(), other.begin() + t * C, other.begin() + (t + 1) * C);
    }
    const Tensor d_lp = host_tensor(both, {T, 2, C}, DType::f32).to(kGpu);
    std::vector<int64_t> labels = {2, 2, 3};
    labels.insert(labels.end(), bad.labels.begin(), bad.labels.end());
    const Tensor tg = Tensor::from_host(labels, {2, S}).to(kGpu);
    const Tensor il = Tensor::from_host(std::vector<int64_t>{T, bad.in_len}, {2}).to(kGpu);
    const Tensor tl = Tensor::from_host(std::vector<int64_t>{3, bad.tg_len}, {2}).to(kGpu);
    const std::vector<double> loss = to_doubles(ctc_loss(d_lp, tg, il, tl, none));
    EXPECT_NEAR(loss[0], to_doubles(good_loss)[0], 1e-5 * std::fabs(to_doubles(good_loss)[0]));
    EXPECT_TRUE(std::isnan(loss[1])) << loss[1];
    const Tensor g = host_tensor({0.7, 1.0}, {2}, DType::f32).to(kGpu);
    const std::vector<double> grad = to_doubles(ctc_loss_backward(d_lp, tg, il, tl, g, none));
    const std::vector<double> good = to_doubles(good_grad);
    for (int64_t t = 0; t < T; ++t) {
      for (int64_t c = 0; c < C; ++c) {
        EXPECT_NEAR(grad[(t * 2) * C + c], good[t * C + c], 1e-4) << "t " << t << " c " << c;
        EXPECT_TRUE(std::isnan(grad[(t * 2 + 1) * C + c])) << "t " << t << " c " << c;
      }
    }
    const CtcLossOptions mean{0, CtcReduction::mean, false};
    EXPECT_TRUE(std::isnan(to_doubles(ctc_loss(d_lp, tg, il, tl, mean))[0]));
  }
  // Concatenated targets shorter than the lengths ask: the sample that runs past them is bad.
  const Tensor lp = random_log_probs(rng, T, 2, C, DType::f32).to(kGpu);
  const Tensor tg = Tensor::from_host(std::vector<int64_t>{1, 2, 3}, {3}).to(kGpu);
  const Tensor il = Tensor::from_host(std::vector<int64_t>{T, T}, {2}).to(kGpu);
  const Tensor tl = Tensor::from_host(std::vector<int64_t>{2, 2}, {2}).to(kGpu);
  const std::vector<double> loss = to_doubles(ctc_loss(lp, tg, il, tl, none));
  EXPECT_TRUE(std::isfinite(loss[0]));
  EXPECT_TRUE(std::isnan(loss[1]));
}

TEST(CtcGpu, InvalidLengthsAndLabelsGiveNaNForTheirSample) {
  RUDNN_REQUIRE_CUDA();
  RUDNN_SEEDED_RNG(rng);
  check_invalid_samples(rng);
}

#if RUDNN_CTC_TUNING
// The launch choices as they were before the test, put back when it ends (pass or fail).
struct TuningRestored {
  ctc::cuda::KernelTuning saved = ctc::cuda::kernel_tuning();
  ~TuningRestored() { ctc::cuda::kernel_tuning() = saved; }
};

// The backward's two paths (ctc/cuda/tuning.h): overlapped (the recursions and the pass over
// every class in one launch, then the target's classes and the non-finite samples' rows
// rewritten) and sequential (the recursions, then one gradient pass), each against the
// reference: the vector pass (F32, C % 4 == 0) and the scalar one (odd C, 16-bit types),
// more units of rows than stream blocks (each block takes several from the counter), more
// recursion blocks than the GPU holds at once (the stream blocks start behind them),
// impossible alignments with and without zero_infinity, invalid lengths and labels.
TEST(CtcGpu, BackwardPathsMatchReference) {
  RUDNN_REQUIRE_CUDA();
  RUDNN_SEEDED_RNG(rng);
  const TuningRestored restore;
  const CtcReduction none = CtcReduction::none, mean = CtcReduction::mean,
                     sum = CtcReduction::sum;
  for (bool overlapped : {true, false}) {
    SCOPED_TRACE(overlapped ? "overlapped backward" : "sequential backward");
    ctc::cuda::kernel_tuning() = restore.saved;
    ctc::cuda::kernel_tuning().overlapped_backward = overlapped;
    check_case(rng, make_case(rng, DType::f32, 60, 5, 36, 9, true, {0, none, false}), DType::f32);
    check_case(rng, make_case(rng, DType::f32, 45, 3, 37, 8, false, {36, mean, false}),
               DType::f32);
    check_case(rng, make_case(rng, DType::f16, 50, 4, 13, 6, false, {4, mean, false}),
               DType::f16);
    check_case(rng, make_case(rng, DType::bf16, 40, 3, 20, 5, true, {19, sum, false}),
               DType::bf16);
    check_case(rng, make_case(rng, DType::f32, 300, 160, 40, 5, true, {0, sum, false}),
               DType::f32);
    check_case(rng, make_case(rng, DType::f32, 16, 2500, 8, 3, true, {7, none, true}),
               DType::f32);
    check_case(rng, make_case(rng, DType::f32, 400, 3, 5000, 120, true, {0, none, false}),
               DType::f32);
    check_impossible_alignments(rng);
    check_invalid_samples(rng);
  }
}

// The forward's two paths (ctc/cuda/tuning.h split_forward): alpha and beta over half of the
// steps each, joined at the middle, and alpha over every step, each against the reference:
// input lengths 1 (beta runs no step), 2 and 3 (odd: alpha takes the extra step), targets
// empty, of one label, longer than the input, with repeats; long inputs (T = 1000: the rows
// renormalised many times on both sides of the join); invalid samples.
TEST(CtcGpu, ForwardPathsMatchReference) {
  RUDNN_REQUIRE_CUDA();
  RUDNN_SEEDED_RNG(rng);
  const TuningRestored restore;
  const CtcReduction none = CtcReduction::none, mean = CtcReduction::mean;
  for (bool split : {true, false}) {
    SCOPED_TRACE(split ? "split forward" : "alpha over every step");
    ctc::cuda::kernel_tuning() = restore.saved;
    ctc::cuda::kernel_tuning().split_forward = split;
    for (bool zero_infinity : {false, true}) {
      // Samples: 1 step, no label; 1 step, 1 label; 2 steps, 1 label; 3 steps, [2 2] (one
      // alignment); 2 steps, 3 labels (impossible); 3 steps, 2 labels.
      CtcCase k{3, 6, 5, 3, true, CtcLossOptions{0, none, zero_infinity}, {}, {}, {}, {}};
      k.lp = random_log_probs(rng, 3, 6, 5, DType::f32);
      k.tg = Tensor::from_host(
          std::vector<int64_t>{1, 0, 0, 3, 0, 0, 4, 0, 0, 2, 2, 0, 1, 2, 3, 4, 1, 0}, {6, 3});
      k.il = Tensor::from_host(std::vector<int64_t>{1, 1, 2, 3, 2, 3}, {6});
      k.tl = Tensor::from_host(std::vector<int64_t>{0, 1, 1, 2, 3, 2}, {6});
      check_case(rng, k, DType::f32);
    }
    check_case(rng, make_case(rng, DType::f32, 41, 7, 13, 9, false, {4, none, false}), DType::f32);
    check_case(rng, make_case(rng, DType::bf16, 30, 5, 11, 6, true, {0, mean, false}),
               DType::bf16);
    check_case(rng, make_case(rng, DType::f32, 1000, 3, 50, 200, true, {0, none, false}, 4),
               DType::f32);
    check_impossible_alignments(rng);
    check_invalid_samples(rng);
  }
}
#endif

// The mean and sum are fixed-order reductions and no kernel uses atomics: identical bits.
TEST(CtcGpu, RunsAreBitIdentical) {
  RUDNN_REQUIRE_CUDA();
  RUDNN_SEEDED_RNG(rng);
  const CtcCase k =
      make_case(rng, DType::f32, 80, 37, 50, 12, false, {0, CtcReduction::mean, false});
  const Tensor lp = k.lp.to(kGpu), tg = k.tg.to(kGpu), il = k.il.to(kGpu), tl = k.tl.to(kGpu);
  const Tensor g = host_tensor({1.0}, {}, DType::f32).to(kGpu);
  EXPECT_TRUE(
      bit_equal(ctc_loss(lp, tg, il, tl, k.o).to_host(), ctc_loss(lp, tg, il, tl, k.o).to_host()));
  EXPECT_TRUE(bit_equal(ctc_loss_backward(lp, tg, il, tl, g, k.o).to_host(),
                        ctc_loss_backward(lp, tg, il, tl, g, k.o).to_host()));
}

TEST(CtcGpu, F64IsRefusedOnTheGpu) {
  RUDNN_REQUIRE_CUDA();
  const Tensor lp = Tensor::zeros({4, 2, 3}, DType::f64, kGpu);
  const Tensor tg = Tensor::full({2, 1}, 1.0, DType::i64, kGpu);
  const Tensor len = Tensor::full({2}, 1.0, DType::i64, kGpu);
  EXPECT_TRUE(throws_error([&] { ctc_loss(lp, tg, len, len); }, ErrorCode::DTypeMismatch,
                           {"ctc_loss: ", "log_probs", "f64 runs on the CPU only"}));
}

TEST(CtcGpu, MixedDevicesAreRefused) {
  RUDNN_REQUIRE_CUDA();
  const Tensor lp = Tensor::zeros({4, 2, 3}, DType::f64);
  const Tensor tg = Tensor::full({2, 1}, 1.0, DType::i64);
  const Tensor len = Tensor::full({2}, 1.0, DType::i64);
  const Tensor len_gpu = Tensor::full({2}, 1.0, DType::i64, kGpu);
  EXPECT_TRUE(throws_error([&] { ctc_loss(lp, tg, len_gpu, len); }, ErrorCode::DeviceMismatch,
                           {"ctc_loss: ", "input_lengths"}));
  EXPECT_TRUE(throws_error([&] { ctc_loss(lp, tg.to(kGpu), len, len); }, ErrorCode::DeviceMismatch,
                           {"ctc_loss: ", "targets"}));
  const Tensor lp_gpu = Tensor::zeros({4, 2, 3}, DType::f32, kGpu);
  const Tensor g = Tensor::full({}, 1.0, DType::f32);
  EXPECT_TRUE(throws_error([&] { ctc_loss_backward(lp_gpu, tg.to(kGpu), len_gpu, len_gpu, g); },
                           ErrorCode::DeviceMismatch, {"ctc_loss_backward: ", "grad_loss"}));
}

}  // namespace
}  // namespace rudnn::test
