// The normalization family's rows of the op contract (tests/support/op_contract.h): every
// op, functional and _into form, through the checks every op must pass.
#include <cmath>

#include "support/op_contract.h"

namespace rudnn::test {
namespace {

using contract::Args;
using contract::Operand;
using contract::OpRow;

constexpr float kLayerNormEps = 1e-5f, kRmsNormEps = 1e-6f;
const CrossEntropyOptions kIgnorePadding = CrossEntropyOptions{}.set_ignore_index(-100);

Operand input(const char* name) { return {name}; }
Operand optional_parameter(const char* name) { return {name, DType::i32, Shape{}, true}; }
Operand output(const char* name) { return {name}; }
Tensor empty_rows(int64_t rows, int64_t cols, DType dtype) {
  return Tensor::empty({rows, cols}, dtype);
}

// Classes in [0, cols), one padding row (ignored) when there are two rows or more.
Tensor random_targets(Rng& rng, int64_t rows, int64_t cols, DType dtype) {
  std::vector<double> t = to_doubles(random_integers(rng, {rows}, DType::i64, 0, cols - 1));
  if (rows > 1) t[1] = -100;
  return host_tensor(t, {rows}, dtype);
}

std::vector<OpRow> make_rows() {
  std::vector<OpRow> rows;

  rows.push_back({
      .name = "layer_norm",
      .inputs = {input("x"), optional_parameter("gamma"), optional_parameter("beta")},
      .outputs = {output("out")},
      .make =
          [](Rng& rng, DType dt, int64_t r, int64_t h) {
            return Args{{random_tensor(rng, {r, h}, dt, 1.0f, 2.0f),
                         random_tensor(rng, {h}, DType::f32), random_tensor(rng, {h}, dt)},
                        {empty_rows(r, h, dt)}};
          },
      .functional =
          [](const Args& a, const Stream& s) {
            return std::vector<Tensor>{
                layer_norm(a.inputs[0], a.inputs[1], a.inputs[2], kLayerNormEps, s)};
          },
      .into =
          [](const Args& a, const Stream& s) {
            layer_norm_into(a.outputs[0], a.inputs[0], a.inputs[1], a.inputs[2], kLayerNormEps, s);
          },
  });

  rows.push_back({
      .name = "layer_norm_with_stats",
      .inputs = {input("x"), optional_parameter("gamma"), optional_parameter("beta")},
      .outputs = {output("out"), output("mean_out"), output("rstd_out")},
      .make =
          [](Rng& rng, DType dt, int64_t r, int64_t h) {
            return Args{{random_tensor(rng, {r, h}, dt, 1.0f, 2.0f),
                         random_tensor(rng, {h}, DType::f32), random_tensor(rng, {h}, dt)},
                        {empty_rows(r, h, dt), Tensor::empty({r}, DType::f32),
                         Tensor::empty({r}, DType::f32)}};
          },
      .functional =
          [](const Args& a, const Stream& s) {
            const LayerNormWithStats r =
                layer_norm_with_stats(a.inputs[0], a.inputs[1], a.inputs[2], kLayerNormEps, s);
            return std::vector<Tensor>{r.y, r.stats.mean, r.stats.rstd};
          },
      .into =
          [](const Args& a, const Stream& s) {
            layer_norm_with_stats_into(a.outputs[0], a.outputs[1], a.outputs[2], a.inputs[0],
                                       a.inputs[1], a.inputs[2], kLayerNormEps, s);
          },
  });

  rows.push_back({
      .name = "rms_norm",
      .inputs = {input("x"), optional_parameter("gamma")},
      .outputs = {output("out")},
      .make =
          [](Rng& rng, DType dt, int64_t r, int64_t h) {
            return Args{{random_tensor(rng, {r, h}, dt), random_tensor(rng, {h}, DType::f32)},
                        {empty_rows(r, h, dt)}};
          },
      .functional =
          [](const Args& a, const Stream& s) {
            return std::vector<Tensor>{rms_norm(a.inputs[0], a.inputs[1], kRmsNormEps, s)};
          },
      .into =
          [](const Args& a, const Stream& s) {
            rms_norm_into(a.outputs[0], a.inputs[0], a.inputs[1], kRmsNormEps, s);
          },
  });

  rows.push_back({
      .name = "add_rms_norm",
      .inputs = {input("x"), input("residual"), optional_parameter("gamma")},
      .outputs = {output("sum_out"), output("normed_out")},
      .make =
          [](Rng& rng, DType dt, int64_t r, int64_t h) {
            return Args{{random_tensor(rng, {r, h}, dt), random_tensor(rng, {r, h}, dt),
                         random_tensor(rng, {h}, dt)},
                        {empty_rows(r, h, dt), empty_rows(r, h, dt)}};
          },
      .functional =
          [](const Args& a, const Stream& s) {
            const AddRmsNormResult result =
                add_rms_norm(a.inputs[0], a.inputs[1], a.inputs[2], kRmsNormEps, s);
            return std::vector<Tensor>{result.sum, result.normed};
          },
      .into =
          [](const Args& a, const Stream& s) {
            add_rms_norm_into(a.outputs[0], a.outputs[1], a.inputs[0], a.inputs[1], a.inputs[2],
                              kRmsNormEps, s);
          },
  });

  rows.push_back({
      .name = "softmax_last_axis",
      .inputs = {input("x")},
      .outputs = {output("out")},
      .make =
          [](Rng& rng, DType dt, int64_t r, int64_t h) {
            return Args{{random_tensor(rng, {r, h}, dt, 0.0f, 3.0f)}, {empty_rows(r, h, dt)}};
          },
      .functional =
          [](const Args& a, const Stream& s) {
            return std::vector<Tensor>{softmax_last_axis(a.inputs[0], s)};
          },
      .into = [](const Args& a,
                 const Stream& s) { softmax_last_axis_into(a.outputs[0], a.inputs[0], s); },
  });

  rows.push_back({
      .name = "logsumexp",
      .inputs = {input("x")},
      .outputs = {output("out")},
      .make =
          [](Rng& rng, DType dt, int64_t r, int64_t h) {
            return Args{{random_tensor(rng, {r, h}, dt, 0.0f, 3.0f)}, {Tensor::empty({r}, dt)}};
          },
      .functional = [](const Args& a,
                       const Stream& s) { return std::vector<Tensor>{logsumexp(a.inputs[0], s)}; },
      .into = [](const Args& a, const Stream& s) { logsumexp_into(a.outputs[0], a.inputs[0], s); },
  });

  // Cross entropy: vocabulary-sized rows for the > 2^31 case (the loop and cluster kernels).
  const Operand targets{"targets", DType::f32};
  rows.push_back({
      .name = "cross_entropy",
      .inputs = {input("logits"), targets},
      .outputs = {output("loss_out")},
      .make =
          [](Rng& rng, DType dt, int64_t r, int64_t c) {
            return Args{
                {random_tensor(rng, {r, c}, dt, 0.0f, 2.0f), random_targets(rng, r, c, DType::i32)},
                {Tensor::empty({r}, DType::f32)}};
          },
      .functional =
          [](const Args& a, const Stream& s) {
            return std::vector<Tensor>{cross_entropy(a.inputs[0], a.inputs[1], kIgnorePadding, s)};
          },
      .into =
          [](const Args& a, const Stream& s) {
            cross_entropy_into(a.outputs[0], a.inputs[0], a.inputs[1], kIgnorePadding, s);
          },
      .big_cols = 131072,
  });

  rows.push_back({
      .name = "cross_entropy_backward",
      .inputs = {input("logits"), targets, input("dloss")},
      .outputs = {output("dlogits_out")},
      .make =
          [](Rng& rng, DType dt, int64_t r, int64_t c) {
            return Args{
                {random_tensor(rng, {r, c}, dt, 0.0f, 2.0f), random_targets(rng, r, c, DType::i64),
                 random_tensor(rng, {r}, DType::f32)},
                {empty_rows(r, c, dt)}};
          },
      .functional =
          [](const Args& a, const Stream& s) {
            return std::vector<Tensor>{
                cross_entropy_backward(a.inputs[0], a.inputs[1], a.inputs[2], kIgnorePadding, s)};
          },
      .into =
          [](const Args& a, const Stream& s) {
            cross_entropy_backward_into(a.outputs[0], a.inputs[0], a.inputs[1], a.inputs[2],
                                        kIgnorePadding, s);
          },
      .big_cols = 131072,
  });

  rows.push_back({
      .name = "cross_entropy_with_grad",
      .inputs = {input("logits"), targets},
      .outputs = {output("loss_out"), output("dlogits_out")},
      .make =
          [](Rng& rng, DType dt, int64_t r, int64_t c) {
            return Args{
                {random_tensor(rng, {r, c}, dt, 0.0f, 2.0f), random_targets(rng, r, c, DType::i64)},
                {Tensor::empty({r}, DType::f32), empty_rows(r, c, dt)}};
          },
      .functional =
          [](const Args& a, const Stream& s) {
            const CrossEntropyWithGrad r =
                cross_entropy_with_grad(a.inputs[0], a.inputs[1], 0.25f, kIgnorePadding, s);
            return std::vector<Tensor>{r.loss, r.dlogits};
          },
      .into =
          [](const Args& a, const Stream& s) {
            cross_entropy_with_grad_into(a.outputs[0], a.outputs[1], a.inputs[0], a.inputs[1],
                                         0.25f, kIgnorePadding, s);
          },
      .big_cols = 131072,
  });

  rows.push_back({
      .name = "cross_entropy_with_grad",
      .label = "cross_entropy_with_grad_dloss",  // the per-row upstream gradient overload
      .inputs = {input("logits"), targets, input("dloss")},
      .outputs = {output("loss_out"), output("dlogits_out")},
      .make =
          [](Rng& rng, DType dt, int64_t r, int64_t c) {
            return Args{
                {random_tensor(rng, {r, c}, dt, 0.0f, 2.0f), random_targets(rng, r, c, DType::i64),
                 random_tensor(rng, {r}, DType::f32)},
                {Tensor::empty({r}, DType::f32), empty_rows(r, c, dt)}};
          },
      .functional =
          [](const Args& a, const Stream& s) {
            const CrossEntropyWithGrad r =
                cross_entropy_with_grad(a.inputs[0], a.inputs[1], a.inputs[2], kIgnorePadding, s);
            return std::vector<Tensor>{r.loss, r.dlogits};
          },
      .into =
          [](const Args& a, const Stream& s) {
            cross_entropy_with_grad_into(a.outputs[0], a.outputs[1], a.inputs[0], a.inputs[1],
                                         a.inputs[2], kIgnorePadding, s);
          },
      .big_cols = 131072,
  });

  // In place: x is the output and holds the values it scales. Any shape of x is valid, and a
  // one-element scale of any shape (so its rejected shape has two elements). A scale of 1
  // skips the pass, so 0.5 here: the op must write.
  rows.push_back({
      .name = "scale_unless_one",
      .inputs = {Operand{"scale", DType::i32, Shape{2}}},
      .outputs = {Operand{"x", DType::i32, std::nullopt}},
      .make =
          [](Rng& rng, DType dt, int64_t r, int64_t h) {
            return Args{{Tensor::full({1}, 0.5, DType::f32)}, {random_tensor(rng, {r, h}, dt)}};
          },
      .into = [](const Args& a,
                 const Stream& s) { scale_unless_one(a.outputs[0], a.inputs[0], s); },
      .in_place = true,
  });

  rows.push_back({
      .name = "layer_norm_backward",
      .inputs = {input("dy"), input("x"), optional_parameter("gamma"), optional_parameter("beta")},
      .outputs = {output("dx_out"), output("dgamma_out"), output("dbeta_out")},
      .make =
          [](Rng& rng, DType dt, int64_t r, int64_t h) {
            return Args{
                {random_tensor(rng, {r, h}, dt), random_tensor(rng, {r, h}, dt, 0.5f),
                 random_tensor(rng, {h}, DType::f32), random_tensor(rng, {h}, dt)},
                {empty_rows(r, h, dt), Tensor::empty({h}, DType::f32), Tensor::empty({h}, dt)}};
          },
      .functional =
          [](const Args& a, const Stream& s) {
            const LayerNormGrads g = layer_norm_backward(a.inputs[0], a.inputs[1], a.inputs[2],
                                                         a.inputs[3], kLayerNormEps, s);
            return std::vector<Tensor>{g.dx, g.dgamma, g.dbeta};
          },
      .into =
          [](const Args& a, const Stream& s) {
            layer_norm_backward_into(a.outputs[0], a.outputs[1], a.outputs[2], a.inputs[0],
                                     a.inputs[1], a.inputs[2], a.inputs[3], kLayerNormEps, s);
          },
  });

  rows.push_back({
      .name = "layer_norm_backward",
      .label = "layer_norm_backward_saved_stats",
      .inputs = {input("dy"), input("x"), input("mean"), input("rstd"), optional_parameter("gamma"),
                 optional_parameter("beta")},
      .outputs = {output("dx_out"), output("dgamma_out"), output("dbeta_out")},
      .make =
          [](Rng& rng, DType dt, int64_t r, int64_t h) {
            const Tensor x = random_tensor(rng, {r, h}, dt, 0.5f);
            const LayerNormStats s = layer_norm_with_stats(x, {}, {}, kLayerNormEps).stats;
            return Args{
                {random_tensor(rng, {r, h}, dt), x, s.mean, s.rstd,
                 random_tensor(rng, {h}, DType::f32), random_tensor(rng, {h}, dt)},
                {empty_rows(r, h, dt), Tensor::empty({h}, DType::f32), Tensor::empty({h}, dt)}};
          },
      .functional =
          [](const Args& a, const Stream& s) {
            const LayerNormGrads g = layer_norm_backward(
                a.inputs[0], a.inputs[1], {a.inputs[2], a.inputs[3]}, a.inputs[4], a.inputs[5], s);
            return std::vector<Tensor>{g.dx, g.dgamma, g.dbeta};
          },
      .into =
          [](const Args& a, const Stream& s) {
            layer_norm_backward_into(a.outputs[0], a.outputs[1], a.outputs[2], a.inputs[0],
                                     a.inputs[1], {a.inputs[2], a.inputs[3]}, a.inputs[4],
                                     a.inputs[5], s);
          },
  });

  rows.push_back({
      .name = "rms_norm_backward",
      .inputs = {input("dy"), input("x"), optional_parameter("gamma")},
      .outputs = {output("dx_out"), output("dgamma_out")},
      .make =
          [](Rng& rng, DType dt, int64_t r, int64_t h) {
            return Args{{random_tensor(rng, {r, h}, dt), random_tensor(rng, {r, h}, dt),
                         random_tensor(rng, {h}, dt)},
                        {empty_rows(r, h, dt), Tensor::empty({h}, dt)}};
          },
      .functional =
          [](const Args& a, const Stream& s) {
            const RmsNormGrads g =
                rms_norm_backward(a.inputs[0], a.inputs[1], a.inputs[2], kRmsNormEps, s);
            return std::vector<Tensor>{g.dx, g.dgamma};
          },
      .into =
          [](const Args& a, const Stream& s) {
            rms_norm_backward_into(a.outputs[0], a.outputs[1], a.inputs[0], a.inputs[1],
                                   a.inputs[2], kRmsNormEps, s);
          },
  });

  rows.push_back({
      .name = "softmax_backward",
      .inputs = {input("dy"), input("y")},
      .outputs = {output("dx_out")},
      .make =
          [](Rng& rng, DType dt, int64_t r, int64_t h) {
            return Args{
                {random_tensor(rng, {r, h}, dt), softmax_last_axis(random_tensor(rng, {r, h}, dt))},
                {empty_rows(r, h, dt)}};
          },
      .functional =
          [](const Args& a, const Stream& s) {
            return std::vector<Tensor>{softmax_backward(a.inputs[0], a.inputs[1], s)};
          },
      .into =
          [](const Args& a, const Stream& s) {
            softmax_backward_into(a.outputs[0], a.inputs[0], a.inputs[1], s);
          },
  });

  return rows;
}

const std::vector<OpRow>& normalization_rows() {
  static const std::vector<OpRow> rows = make_rows();
  return rows;
}

RUDNN_OP_CONTRACT_SUITE(NormContract, normalization_rows);

}  // namespace
}  // namespace rudnn::test
