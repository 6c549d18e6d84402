// The convolution family's rows of the op contract (tests/support/op_contract.h). The rows
// are batch entries: conv2d input [rows, 2, 3, cols], weight [4, 2, 3, 3], padding 1, output
// [rows, 4, 3, cols]; causal conv1d x [rows, cols, 4] with weight [4, 3] (no carried state:
// the state is updated in place, which this suite's unchanged-input check does not allow;
// test_reference.cpp and test_gpu.cpp cover it).
#include "support/op_contract.h"

namespace rudnn::test {
namespace {

using contract::Args;
using contract::Operand;
using contract::OpRow;

const ConvOptions<2> kOptions = [] {
  ConvOptions<2> o;
  o.padding = {1, 1};
  return o;
}();
const Shape kWeight{4, 2, 3, 3};

Shape in_shape(int64_t r, int64_t cols) { return {r, 2, 3, cols}; }
Shape out_shape(int64_t r, int64_t cols) { return {r, 4, 3, cols}; }

Operand operand(const char* name) { return {name}; }
Operand optional(const char* name) {
  Operand o{name};
  o.optional = true;
  return o;
}

std::vector<OpRow> make_rows() {
  std::vector<OpRow> rows;
  rows.push_back({
      .name = "conv_forward",
      .inputs = {operand("input"), operand("weight"), optional("bias")},
      .outputs = {operand("out")},
      .make =
          [](Rng& rng, DType dt, int64_t r, int64_t cols) {
            return Args{{random_tensor(rng, in_shape(r, cols), dt), random_tensor(rng, kWeight, dt),
                         random_tensor(rng, {4}, dt)},
                        {Tensor::empty(out_shape(r, cols), dt)}};
          },
      .functional =
          [](const Args& a, const Stream& s) {
            return std::vector<Tensor>{conv_forward<2>(a.inputs[0], a.inputs[1], a.inputs[2],
                                                       kOptions, ConvStrategy::Auto, {}, s)};
          },
      .into =
          [](const Args& a, const Stream& s) {
            conv_forward_into<2>(a.outputs[0], a.inputs[0], a.inputs[1], a.inputs[2], kOptions,
                                 ConvStrategy::Auto, {}, s);
          },
  });
  rows.push_back({
      .name = "conv_data_backward",
      .inputs = {operand("dout"), operand("weight")},
      .outputs = {operand("dinput_out")},
      .make =
          [](Rng& rng, DType dt, int64_t r, int64_t cols) {
            return Args{{random_tensor(rng, out_shape(r, cols), dt),
                         random_tensor(rng, kWeight, dt)},
                        {Tensor::empty(in_shape(r, cols), dt)}};
          },
      .functional =
          [](const Args& a, const Stream& s) {
            return std::vector<Tensor>{conv_data_backward<2>(
                a.inputs[0], a.inputs[1], a.outputs[0].shape(), kOptions, ConvStrategy::Auto, s)};
          },
      .into =
          [](const Args& a, const Stream& s) {
            conv_data_backward_into<2>(a.outputs[0], a.inputs[0], a.inputs[1], kOptions,
                                       ConvStrategy::Auto, s);
          },
  });
  rows.push_back({
      .name = "conv_weight_backward",
      .inputs = {operand("dout"), operand("input")},
      .outputs = {operand("dweight_out"), optional("dbias_out")},
      .make =
          [](Rng& rng, DType dt, int64_t r, int64_t cols) {
            return Args{{random_tensor(rng, out_shape(r, cols), dt),
                         random_tensor(rng, in_shape(r, cols), dt)},
                        {Tensor::empty(kWeight, dt), Tensor::empty({4}, dt)}};
          },
      .functional =
          [](const Args& a, const Stream& s) {
            const ConvWeightGrads g = conv_weight_backward<2>(a.inputs[0], a.inputs[1], kWeight,
                                                              kOptions, true, ConvStrategy::Auto, s);
            return std::vector<Tensor>{g.dweight, g.dbias};
          },
      .into =
          [](const Args& a, const Stream& s) {
            conv_weight_backward_into<2>(a.outputs[0], a.outputs[1], a.inputs[0], a.inputs[1],
                                         kOptions, ConvStrategy::Auto, s);
          },
      // One warp per weight element reduces over every batch position: 2^31 elements take
      // minutes on the Direct kernel (the tensor-core weight gradient is not built yet).
      .takes_big = false,
  });
  rows.push_back({
      .name = "causal_conv1d",
      .inputs = {operand("x"), operand("weight"), optional("bias")},
      .outputs = {operand("out")},
      .make =
          [](Rng& rng, DType dt, int64_t r, int64_t cols) {
            return Args{{random_tensor(rng, {r, cols, 4}, dt), random_tensor(rng, {4, 3}, dt),
                         random_tensor(rng, {4}, dt)},
                        {Tensor::empty({r, cols, 4}, dt)}};
          },
      .functional =
          [](const Args& a, const Stream& s) {
            return std::vector<Tensor>{
                causal_conv1d(a.inputs[0], a.inputs[1], a.inputs[2], {}, {}, true, s)};
          },
      .into =
          [](const Args& a, const Stream& s) {
            causal_conv1d_into(a.outputs[0], a.inputs[0], a.inputs[1], a.inputs[2], {}, {}, true,
                               s);
          },
  });
  rows.push_back({
      .name = "causal_conv1d_backward",
      .inputs = {operand("dout"), operand("x"), operand("weight"), optional("bias")},
      .outputs = {operand("dx_out"), operand("dweight_out"), operand("dbias_out")},
      .make =
          [](Rng& rng, DType dt, int64_t r, int64_t cols) {
            return Args{{random_tensor(rng, {r, cols, 4}, dt), random_tensor(rng, {r, cols, 4}, dt),
                         random_tensor(rng, {4, 3}, dt), random_tensor(rng, {4}, dt)},
                        {Tensor::empty({r, cols, 4}, dt), Tensor::empty({4, 3}, dt),
                         Tensor::empty({4}, dt)}};
          },
      .functional =
          [](const Args& a, const Stream& s) {
            const CausalConv1dGrads g = causal_conv1d_backward(a.inputs[0], a.inputs[1],
                                                               a.inputs[2], a.inputs[3], {}, {},
                                                               true, s);
            return std::vector<Tensor>{g.dx, g.dweight, g.dbias};
          },
      .into =
          [](const Args& a, const Stream& s) {
            causal_conv1d_backward_into(a.outputs[0], a.outputs[1], a.outputs[2], {}, a.inputs[0],
                                        a.inputs[1], a.inputs[2], a.inputs[3], {}, {}, true, s);
          },
      // The weight gradient is one block per 32 channels: 4 channels over 2^31 elements
      // would be one block's serial walk.
      .takes_big = false,
  });
  return rows;
}

const std::vector<OpRow>& conv_rows() {
  static const std::vector<OpRow> rows = make_rows();
  return rows;
}

RUDNN_OP_CONTRACT_SUITE(ConvContract, conv_rows);

}  // namespace
}  // namespace rudnn::test
