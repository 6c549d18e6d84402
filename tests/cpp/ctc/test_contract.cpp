// CTC loss's rows of the op contract (tests/support/op_contract.h). The rows are samples
// (N = rows) of T = 12 steps; `cols` is the vocabulary C, so that the graph-capture case
// runs the gradient's pass over 40000 classes.
#include <algorithm>
#include <cmath>

#include "rudnn/ctc.h"
#include "support/op_contract.h"

namespace rudnn::test {
namespace {

using contract::Args;
using contract::Operand;
using contract::OpRow;

constexpr int64_t kSteps = 12, kLabels = 4;

Operand integers(const char* name) { return {name, DType::f32}; }

// log_softmax of random logits [T, N, C] in dt, padded targets [N, S] (I64, blank 0, labels
// repeating now and then), input lengths [N] (I32, at least 2 S) and target lengths [N] (I64).
Args make_inputs(Rng& rng, DType dt, int64_t n, int64_t c) {
  std::vector<double> lp(static_cast<size_t>(kSteps * n * c));
  for (int64_t r = 0; r < kSteps * n; ++r) {
    double* row = lp.data() + r * c;
    double m = -INFINITY, sum = 0.0;
    for (int64_t k = 0; k < c; ++k) m = std::max(m, row[k] = rng.normal(0.0f, 2.0f));
    for (int64_t k = 0; k < c; ++k) sum += std::exp(row[k] - m);
    for (int64_t k = 0; k < c; ++k) row[k] -= m + std::log(sum);
  }
  std::vector<int64_t> labels, tg_len;
  std::vector<int32_t> in_len;
  for (int64_t s = 0; s < n; ++s) {
    int64_t previous = 1;
    for (int64_t i = 0; i < kLabels; ++i) {
      previous = rng.integer(0, 3) == 0 ? previous : rng.integer(1, c - 1);
      labels.push_back(previous);
    }
    in_len.push_back(static_cast<int32_t>(rng.integer(2 * kLabels, kSteps)));
    tg_len.push_back(rng.integer(0, kLabels));
  }
  return Args{{host_tensor(lp, {kSteps, n, c}, dt), Tensor::from_host(labels, {n, kLabels}),
               Tensor::from_host(in_len, {n}), Tensor::from_host(tg_len, {n})},
              {}};
}

const CtcLossOptions kSum{0, CtcReduction::sum, false};
const CtcLossOptions kMean{0, CtcReduction::mean, true};

std::vector<OpRow> make_rows() {
  std::vector<OpRow> rows;
  rows.push_back({
      .name = "ctc_loss",
      .inputs = {{"log_probs"},
                 integers("targets"),
                 integers("input_lengths"),
                 integers("target_lengths")},
      .outputs = {{"loss_out", DType::i32, Shape{3}}},
      .make =
          [](Rng& rng, DType dt, int64_t r, int64_t cols) {
            Args a = make_inputs(rng, dt, r, cols);
            a.outputs.push_back(Tensor::empty({}, dt));
            return a;
          },
      .functional =
          [](const Args& a, const Stream& s) {
            return std::vector<Tensor>{
                ctc_loss(a.inputs[0], a.inputs[1], a.inputs[2], a.inputs[3], kSum, s)};
          },
      .into =
          [](const Args& a, const Stream& s) {
            ctc_loss_into(a.outputs[0], a.inputs[0], a.inputs[1], a.inputs[2], a.inputs[3], kSum,
                          s);
          },
      // log_probs is [T, N, C]: its leading axis is not the rows; the > 2^31-element indexing
      // is covered by the kernels' int64 offsets, not by this check.
      .takes_big = false,
  });
  rows.push_back({
      .name = "ctc_loss_backward",
      .inputs = {{"log_probs"},
                 integers("targets"),
                 integers("input_lengths"),
                 integers("target_lengths"),
                 {"grad_loss", DType::i32, Shape{2}}},
      .outputs = {{"grad_out"}},
      .make =
          [](Rng& rng, DType dt, int64_t r, int64_t cols) {
            Args a = make_inputs(rng, dt, r, cols);
            a.inputs.push_back(host_tensor({0.5 + rng.uniform(0.0f, 1.0f)}, {}, dt));
            a.outputs.push_back(Tensor::empty({kSteps, r, cols}, dt));
            return a;
          },
      .functional =
          [](const Args& a, const Stream& s) {
            return std::vector<Tensor>{ctc_loss_backward(a.inputs[0], a.inputs[1], a.inputs[2],
                                                         a.inputs[3], a.inputs[4], kMean, s)};
          },
      .into =
          [](const Args& a, const Stream& s) {
            ctc_loss_backward_into(a.outputs[0], a.inputs[0], a.inputs[1], a.inputs[2], a.inputs[3],
                                   a.inputs[4], kMean, s);
          },
      .takes_big = false,
  });
  return rows;
}

const std::vector<OpRow>& ctc_rows() {
  static const std::vector<OpRow> rows = make_rows();
  return rows;
}

RUDNN_OP_CONTRACT_SUITE(CtcContract, ctc_rows);

}  // namespace
}  // namespace rudnn::test
