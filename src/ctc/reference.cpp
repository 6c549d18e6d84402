// The float64 CPU definition of CTC loss: alpha and beta recursions in log space over the
// 2L+1 states of the blank-extended target (even states blank, odd states the labels).
#include <cmath>
#include <limits>
#include <vector>

#include "common/host_values.h"
#include "ctc/problem.h"

namespace rudnn::ctc::reference {

namespace {

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

double log_add(double a, double b) {
  if (a == kNegInf) return b;
  if (b == kNegInf) return a;
  const double m = a > b ? a : b;
  return m + std::log1p(std::exp(-std::fabs(a - b)));
}

struct Sample {
  int64_t input_length = 0, target_length = 0;
  std::vector<int64_t> labels;
};

// The label of extended state s: blank for even s, the (s-1)/2-th target label for odd s.
int64_t state_label(const Sample& smp, int64_t blank, int64_t s) {
  return (s % 2 == 0) ? blank : smp.labels[(s - 1) / 2];
}

// T: the dtype of log_probs, grad_loss, the loss and the gradient (all read as double).
template <class T>
void ctc_loss_typed(const CtcProblem& p) {
  using common::load_value;
  using common::store_value;
  const int64_t N = p.batch, C = p.classes;
  auto lp = [&](int64_t t, int64_t n, int64_t c) {
    return load_value<T>(p.log_probs, (t * N + n) * C + c);
  };
  auto set_grad = [&](int64_t t, int64_t n, int64_t c, double v) {
    store_value<T>(p.grad, (t * N + n) * C + c, v);
  };

  std::vector<double> nll(N);
  std::vector<double> factor(N, 1.0);  // the reduction's weight of sample n's loss
  int64_t concat_offset = 0;
  for (int64_t n = 0; n < N; ++n) {
    Sample smp;
    smp.input_length = index_at(p.input_lengths, p.input_length_dtype, n);
    smp.target_length = index_at(p.target_lengths, p.target_length_dtype, n);
    const int64_t first = p.padded ? n * p.padded_stride : concat_offset;
    concat_offset += smp.target_length;
    for (int64_t i = 0; i < smp.target_length; ++i)
      smp.labels.push_back(index_at(p.targets, p.target_dtype, first + i));
    if (p.reduction == CtcReduction::mean)
      factor[n] = 1.0 / (static_cast<double>(N) *
                         static_cast<double>(smp.target_length > 0 ? smp.target_length : 1));

    const int64_t Tn = smp.input_length, states = 2 * smp.target_length + 1;
    std::vector<double> alpha(static_cast<size_t>(Tn * states), kNegInf);
    auto A = [&](int64_t t, int64_t s) -> double& { return alpha[t * states + s]; };
    if (Tn == 0) {
      nll[n] = smp.target_length == 0 ? 0.0 : std::numeric_limits<double>::infinity();
    } else {
      A(0, 0) = lp(0, n, p.blank);
      if (states > 1) A(0, 1) = lp(0, n, smp.labels[0]);
      for (int64_t t = 1; t < Tn; ++t) {
        for (int64_t s = 0; s < states; ++s) {
          const int64_t c = state_label(smp, p.blank, s);
          double a = A(t - 1, s);
          if (s >= 1) a = log_add(a, A(t - 1, s - 1));
          if (s >= 2 && c != state_label(smp, p.blank, s - 2)) a = log_add(a, A(t - 1, s - 2));
          A(t, s) = a == kNegInf ? kNegInf : a + lp(t, n, c);
        }
      }
      double ll = A(Tn - 1, states - 1);
      if (states > 1) ll = log_add(ll, A(Tn - 1, states - 2));
      nll[n] = -ll;
    }
    const bool zeroed = p.zero_infinity && std::isinf(nll[n]);
    if (zeroed) nll[n] = 0.0;

    if (p.grad == nullptr) continue;
    const double g =
        load_value<T>(p.grad_loss, p.reduction == CtcReduction::none ? n : 0) * factor[n];
    for (int64_t t = 0; t < p.steps; ++t)
      for (int64_t c = 0; c < C; ++c) set_grad(t, n, c, 0.0);
    if (zeroed || Tn == 0) continue;

    // beta(t, s) includes lp(t, label(s)), as torch's, hence the "- lp" below.
    std::vector<double> beta(static_cast<size_t>(Tn * states), kNegInf);
    auto B = [&](int64_t t, int64_t s) -> double& { return beta[t * states + s]; };
    B(Tn - 1, states - 1) = lp(Tn - 1, n, state_label(smp, p.blank, states - 1));
    if (states > 1) B(Tn - 1, states - 2) = lp(Tn - 1, n, state_label(smp, p.blank, states - 2));
    for (int64_t t = Tn - 2; t >= 0; --t) {
      for (int64_t s = 0; s < states; ++s) {
        const int64_t c = state_label(smp, p.blank, s);
        double b = B(t + 1, s);
        if (s + 1 < states) b = log_add(b, B(t + 1, s + 1));
        if (s + 2 < states && c != state_label(smp, p.blank, s + 2))
          b = log_add(b, B(t + 1, s + 2));
        B(t, s) = b == kNegInf ? kNegInf : b + lp(t, n, c);
      }
    }
    std::vector<double> occupancy(C);
    for (int64_t t = 0; t < Tn; ++t) {
      std::fill(occupancy.begin(), occupancy.end(), kNegInf);
      for (int64_t s = 0; s < states; ++s) {
        const int64_t c = state_label(smp, p.blank, s);
        occupancy[c] = log_add(occupancy[c], A(t, s) + B(t, s));
      }
      for (int64_t c = 0; c < C; ++c) {
        const double x = lp(t, n, c);
        set_grad(t, n, c, g * (std::exp(x) - std::exp(occupancy[c] - x + nll[n])));
      }
    }
  }

  if (p.loss == nullptr) return;
  if (p.reduction == CtcReduction::none) {
    for (int64_t n = 0; n < N; ++n) store_value<T>(p.loss, n, nll[n]);
    return;
  }
  double total = 0.0;
  for (int64_t n = 0; n < N; ++n)
    total += nll[n] * (p.reduction == CtcReduction::mean ? factor[n] : 1.0);
  if (p.reduction == CtcReduction::mean && N == 0) total = std::numeric_limits<double>::quiet_NaN();
  store_value<T>(p.loss, 0, total);
}

}  // namespace

void ctc_loss(const CtcProblem& p) {
  common::with_host_float_type(p.dtype, [&](auto tag) { ctc_loss_typed<decltype(tag)>(p); });
}

}  // namespace rudnn::ctc::reference
