// The pooling family's rows of the op contract (tests/support/op_contract.h). The rows are
// batch entries: input [rows, 2, 4, cols] pooled 2x1 with stride 2x1 (or adaptively to
// 2 x cols) to [rows, 2, 2, cols].
#include "support/op_contract.h"

namespace rudnn::test {
namespace {

using contract::Args;
using contract::Operand;
using contract::OpRow;

const PoolOptions kOptions = [] {
  PoolOptions o;
  o.kernel = {2, 1};
  return o;
}();

// The contract also passes undefined and wrongly shaped inputs: any size then (the op refuses).
std::vector<int64_t> adaptive_size(const Tensor& input) {
  return {2, input.dim() == 4 ? input.shape()[3] : 1};
}
constexpr double kNorm = 2.0;

Shape in_shape(int64_t r, int64_t cols) { return {r, 2, 4, cols}; }
Shape out_shape(int64_t r, int64_t cols) { return {r, 2, 2, cols}; }

Operand operand(const char* name) { return {name}; }

std::vector<OpRow> make_rows() {
  std::vector<OpRow> rows;
  rows.push_back({
      .name = "max_pool",
      .inputs = {operand("input")},
      .outputs = {operand("out"), operand("indices_out")},
      .make =
          [](Rng& rng, DType dt, int64_t r, int64_t cols) {
            return Args{{random_tensor(rng, in_shape(r, cols), dt)},
                        {Tensor::empty(out_shape(r, cols), dt),
                         Tensor::empty(out_shape(r, cols), DType::i64)}};
          },
      .functional =
          [](const Args& a, const Stream& s) {
            MaxPoolResult m = max_pool(a.inputs[0], kOptions, s);
            return std::vector<Tensor>{m.out, m.indices};
          },
      .into =
          [](const Args& a, const Stream& s) {
            max_pool_into(a.outputs[0], a.outputs[1], a.inputs[0], kOptions, s);
          },
  });
  rows.push_back({
      .name = "max_pool_backward",
      .inputs = {operand("dout"), {"indices", DType::f32}, operand("input")},
      .outputs = {operand("dinput_out")},
      .make =
          [](Rng& rng, DType dt, int64_t r, int64_t cols) {
            const Tensor input = random_tensor(rng, in_shape(r, cols), dt);
            return Args{{random_tensor(rng, out_shape(r, cols), dt),
                         max_pool(input, kOptions).indices, input},
                        {Tensor::empty(in_shape(r, cols), dt)}};
          },
      .functional =
          [](const Args& a, const Stream& s) {
            return std::vector<Tensor>{
                max_pool_backward(a.inputs[0], a.inputs[1], a.inputs[2], kOptions, s)};
          },
      .into =
          [](const Args& a, const Stream& s) {
            max_pool_backward_into(a.outputs[0], a.inputs[0], a.inputs[1], a.inputs[2], kOptions,
                                   s);
          },
  });
  rows.push_back({
      .name = "avg_pool",
      .inputs = {operand("input")},
      .outputs = {operand("out")},
      .make =
          [](Rng& rng, DType dt, int64_t r, int64_t cols) {
            return Args{{random_tensor(rng, in_shape(r, cols), dt)},
                        {Tensor::empty(out_shape(r, cols), dt)}};
          },
      .functional =
          [](const Args& a, const Stream& s) {
            return std::vector<Tensor>{avg_pool(a.inputs[0], kOptions, s)};
          },
      .into = [](const Args& a,
                 const Stream& s) { avg_pool_into(a.outputs[0], a.inputs[0], kOptions, s); },
  });
  rows.push_back({
      .name = "avg_pool_backward",
      .inputs = {operand("dout"), operand("input")},
      .outputs = {operand("dinput_out")},
      .make =
          [](Rng& rng, DType dt, int64_t r, int64_t cols) {
            return Args{{random_tensor(rng, out_shape(r, cols), dt),
                         random_tensor(rng, in_shape(r, cols), dt)},
                        {Tensor::empty(in_shape(r, cols), dt)}};
          },
      .functional =
          [](const Args& a, const Stream& s) {
            return std::vector<Tensor>{avg_pool_backward(a.inputs[0], a.inputs[1], kOptions, s)};
          },
      .into =
          [](const Args& a, const Stream& s) {
            avg_pool_backward_into(a.outputs[0], a.inputs[0], a.inputs[1], kOptions, s);
          },
  });
  rows.push_back({
      .name = "adaptive_max_pool",
      .inputs = {operand("input")},
      .outputs = {operand("out"), operand("indices_out")},
      .make =
          [](Rng& rng, DType dt, int64_t r, int64_t cols) {
            return Args{{random_tensor(rng, in_shape(r, cols), dt)},
                        {Tensor::empty(out_shape(r, cols), dt),
                         Tensor::empty(out_shape(r, cols), DType::i64)}};
          },
      .functional =
          [](const Args& a, const Stream& s) {
            MaxPoolResult m = adaptive_max_pool(a.inputs[0], adaptive_size(a.inputs[0]), s);
            return std::vector<Tensor>{m.out, m.indices};
          },
      .into =
          [](const Args& a, const Stream& s) {
            adaptive_max_pool_into(a.outputs[0], a.outputs[1], a.inputs[0],
                                   adaptive_size(a.inputs[0]), s);
          },
  });
  rows.push_back({
      .name = "adaptive_max_pool_backward",
      .inputs = {operand("dout"), {"indices", DType::f32}, operand("input")},
      .outputs = {operand("dinput_out")},
      .make =
          [](Rng& rng, DType dt, int64_t r, int64_t cols) {
            const Tensor input = random_tensor(rng, in_shape(r, cols), dt);
            return Args{{random_tensor(rng, out_shape(r, cols), dt),
                         adaptive_max_pool(input, adaptive_size(input)).indices, input},
                        {Tensor::empty(in_shape(r, cols), dt)}};
          },
      .functional =
          [](const Args& a, const Stream& s) {
            return std::vector<Tensor>{adaptive_max_pool_backward(
                a.inputs[0], a.inputs[1], a.inputs[2], adaptive_size(a.inputs[2]), s)};
          },
      .into =
          [](const Args& a, const Stream& s) {
            adaptive_max_pool_backward_into(a.outputs[0], a.inputs[0], a.inputs[1], a.inputs[2],
                                            adaptive_size(a.inputs[2]), s);
          },
  });
  rows.push_back({
      .name = "adaptive_avg_pool",
      .inputs = {operand("input")},
      .outputs = {operand("out")},
      .make =
          [](Rng& rng, DType dt, int64_t r, int64_t cols) {
            return Args{{random_tensor(rng, in_shape(r, cols), dt)},
                        {Tensor::empty(out_shape(r, cols), dt)}};
          },
      .functional =
          [](const Args& a, const Stream& s) {
            return std::vector<Tensor>{
                adaptive_avg_pool(a.inputs[0], adaptive_size(a.inputs[0]), s)};
          },
      .into =
          [](const Args& a, const Stream& s) {
            adaptive_avg_pool_into(a.outputs[0], a.inputs[0], adaptive_size(a.inputs[0]), s);
          },
  });
  rows.push_back({
      .name = "adaptive_avg_pool_backward",
      .inputs = {operand("dout"), operand("input")},
      .outputs = {operand("dinput_out")},
      .make =
          [](Rng& rng, DType dt, int64_t r, int64_t cols) {
            return Args{{random_tensor(rng, out_shape(r, cols), dt),
                         random_tensor(rng, in_shape(r, cols), dt)},
                        {Tensor::empty(in_shape(r, cols), dt)}};
          },
      .functional =
          [](const Args& a, const Stream& s) {
            return std::vector<Tensor>{adaptive_avg_pool_backward(
                a.inputs[0], a.inputs[1], adaptive_size(a.inputs[1]), s)};
          },
      .into =
          [](const Args& a, const Stream& s) {
            adaptive_avg_pool_backward_into(a.outputs[0], a.inputs[0], a.inputs[1],
                                            adaptive_size(a.inputs[1]), s);
          },
  });
  rows.push_back({
      .name = "lp_pool",
      .inputs = {operand("input")},
      .outputs = {operand("out")},
      .make =
          [](Rng& rng, DType dt, int64_t r, int64_t cols) {
            return Args{{random_tensor(rng, in_shape(r, cols), dt)},
                        {Tensor::empty(out_shape(r, cols), dt)}};
          },
      .functional =
          [](const Args& a, const Stream& s) {
            return std::vector<Tensor>{lp_pool(a.inputs[0], kNorm, kOptions, s)};
          },
      .into = [](const Args& a,
                 const Stream& s) { lp_pool_into(a.outputs[0], a.inputs[0], kNorm, kOptions, s); },
  });
  rows.push_back({
      .name = "lp_pool_backward",
      .inputs = {operand("dout"), operand("input"), operand("out")},
      .outputs = {operand("dinput_out")},
      .make =
          [](Rng& rng, DType dt, int64_t r, int64_t cols) {
            const Tensor input = random_tensor(rng, in_shape(r, cols), dt);
            return Args{{random_tensor(rng, out_shape(r, cols), dt), input,
                         lp_pool(input, kNorm, kOptions)},
                        {Tensor::empty(in_shape(r, cols), dt)}};
          },
      .functional =
          [](const Args& a, const Stream& s) {
            return std::vector<Tensor>{
                lp_pool_backward(a.inputs[0], a.inputs[1], a.inputs[2], kNorm, kOptions, s)};
          },
      .into =
          [](const Args& a, const Stream& s) {
            lp_pool_backward_into(a.outputs[0], a.inputs[0], a.inputs[1], a.inputs[2], kNorm,
                                  kOptions, s);
          },
  });
  return rows;
}

const std::vector<OpRow>& pooling_rows() {
  static const std::vector<OpRow> rows = make_rows();
  return rows;
}

RUDNN_OP_CONTRACT_SUITE(PoolingContract, pooling_rows);

}  // namespace
}  // namespace rudnn::test
