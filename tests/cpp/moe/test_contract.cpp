// The MoE family's rows of the op contract (tests/support/op_contract.h): the row-wise ops
// with `_into` forms. The suite's rows are tokens: logits [rows, E] with E = cols (grouped
// routing: E = min(cols, 1024), its limit), native SwiGLU's gate/up [rows, cols].
// Dispatch, combine and the experts work on plans and dispatched tokens rather than rows and
// have their own tests (test_gpu.cpp: capture, determinism, inputs unchanged).
#include <algorithm>
#include <cstdint>
#include <vector>

#include "support/op_contract.h"

namespace rudnn::test {
namespace {

using contract::Args;
using contract::Operand;
using contract::OpRow;

constexpr int64_t kTopK = 2;

Operand operand(const char* name, DType rejected = DType::i32) { return {name, rejected}; }

int64_t grouped_experts(int64_t cols) { return std::min<int64_t>(cols, 1024); }

moe::GroupRoutingOptions grouped_options(int64_t experts) {
  moe::GroupRoutingOptions o;
  o.groups = experts % 8 == 0 ? 8 : 1;
  o.selected_groups = o.groups == 8 ? 3 : 1;
  o.group_top_two = o.groups == 8;
  o.top_k = 4;
  o.renormalize = true;
  o.scale = 2.5f;
  return o;
}

// E of a call: the logits' last axis when they are well formed (a bad call breaks one
// argument at a time; the options must not depend on the broken one).
int64_t experts_of(const Args& a) {
  const Tensor& l = a.inputs[0];
  return l.defined() && l.dim() == 2 ? l.size(1) : 8;
}

moe::RouterWeightOptions weight_options(bool sigmoid) {
  moe::RouterWeightOptions o;
  o.scoring = sigmoid ? moe::RouterScoring::Sigmoid : moe::RouterScoring::Softmax;
  o.renormalize = true;
  o.scale = 1.5f;
  return o;
}

const std::vector<OpRow>& moe_rows() {
  static const std::vector<OpRow> rows = [] {
    std::vector<OpRow> r;
    r.push_back({
        .name = "route",
        .inputs = {operand("logits")},
        .outputs = {operand("indices_out"), operand("weights_out")},
        .make =
            [](Rng& rng, DType dt, int64_t n, int64_t cols) {
              return Args{{random_tensor(rng, {n, cols}, dt)},
                          {Tensor::empty({n, kTopK}, DType::u32), Tensor::empty({n, kTopK}, dt)}};
            },
        .functional =
            [](const Args& a, const Stream& s) {
              const auto plan = moe::route(a.inputs[0], {kTopK, true}, s);
              return std::vector<Tensor>{plan.expert_indices(), plan.weights()};
            },
        .into =
            [](const Args& a, const Stream& s) {
              moe::route_into(a.outputs[0], a.outputs[1], a.inputs[0], {kTopK, true}, s);
            },
    });
    r.push_back({
        .name = "route_sigmoid_grouped",
        .inputs = {operand("logits"), {"bias", DType::bf16, Shape{}, true}},
        .outputs = {operand("indices_out"), operand("weights_out")},
        .make =
            [](Rng& rng, DType dt, int64_t n, int64_t cols) {
              const int64_t e = grouped_experts(cols), k = grouped_options(e).top_k;
              return Args{
                  {random_tensor(rng, {n, e}, dt), random_tensor(rng, {e}, DType::f32, 0, 0.1f)},
                  {Tensor::empty({n, k}, DType::u32), Tensor::empty({n, k}, dt)}};
            },
        .functional =
            [](const Args& a, const Stream& s) {
              const auto plan = moe::route_sigmoid_grouped(a.inputs[0], a.inputs[1],
                                                           grouped_options(experts_of(a)), s);
              return std::vector<Tensor>{plan.expert_indices(), plan.weights()};
            },
        .into =
            [](const Args& a, const Stream& s) {
              moe::route_sigmoid_grouped_into(a.outputs[0], a.outputs[1], a.inputs[0], a.inputs[1],
                                              grouped_options(experts_of(a)), s);
            },
        .big_cols = 1024,
    });
    for (bool sigmoid : {false, true}) {
      r.push_back({
          .name = "selected_router_weights",
          .label = sigmoid ? "selected_router_weights_sigmoid" : "selected_router_weights_softmax",
          .inputs = {operand("logits"), operand("indices", DType::f32)},
          .outputs = {operand("weights_out", DType::bf16)},
          .make =
              [](Rng& rng, DType dt, int64_t n, int64_t cols) {
                return Args{{random_tensor(rng, {n, cols}, dt),
                             random_integers(rng, {n, 3}, DType::i64, 0, cols - 1)},
                            {Tensor::empty({n, 3}, DType::f32)}};
              },
          .functional =
              [sigmoid](const Args& a, const Stream& s) {
                return std::vector<Tensor>{moe::selected_router_weights(
                    a.inputs[0], a.inputs[1], weight_options(sigmoid), s)};
              },
          .into =
              [sigmoid](const Args& a, const Stream& s) {
                moe::selected_router_weights_into(a.outputs[0], a.inputs[0], a.inputs[1],
                                                  weight_options(sigmoid), s);
              },
      });
      r.push_back({
          .name = "selected_router_backward",
          .label =
              sigmoid ? "selected_router_backward_sigmoid" : "selected_router_backward_softmax",
          .inputs = {operand("logits"), operand("indices", DType::f32),
                     operand("grad_weights", DType::bf16)},
          .outputs = {operand("dlogits_out")},
          .make =
              [](Rng& rng, DType dt, int64_t n, int64_t cols) {
                return Args{{random_tensor(rng, {n, cols}, dt),
                             random_integers(rng, {n, 3}, DType::u32, 0, cols - 1),
                             random_tensor(rng, {n, 3}, DType::f32)},
                            {Tensor::empty({n, cols}, dt)}};
              },
          .functional =
              [sigmoid](const Args& a, const Stream& s) {
                return std::vector<Tensor>{moe::selected_router_backward(
                    a.inputs[0], a.inputs[1], a.inputs[2], weight_options(sigmoid), s)};
              },
          .into =
              [sigmoid](const Args& a, const Stream& s) {
                moe::selected_router_backward_into(a.outputs[0], a.inputs[0], a.inputs[1],
                                                   a.inputs[2], weight_options(sigmoid), s);
              },
      });
    }
    r.push_back({
        .name = "native_swiglu",
        .inputs = {operand("gate"), operand("up")},
        .outputs = {operand("out")},
        .make =
            [](Rng& rng, DType dt, int64_t n, int64_t cols) {
              return Args{
                  {random_tensor(rng, {n, cols}, dt, 0, 2), random_tensor(rng, {n, cols}, dt)},
                  {Tensor::empty({n, cols}, dt)}};
            },
        .functional =
            [](const Args& a, const Stream& s) {
              return std::vector<Tensor>{moe::native_swiglu(a.inputs[0], a.inputs[1], s)};
            },
        .into =
            [](const Args& a, const Stream& s) {
              moe::native_swiglu_into(a.outputs[0], a.inputs[0], a.inputs[1], s);
            },
    });
    r.push_back({
        .name = "native_swiglu_backward",
        .inputs = {operand("gate"), operand("up"), operand("grad")},
        // Undefined outputs are valid: that gradient is not requested.
        .outputs = {{"dgate_out", DType::i32, Shape{}, true},
                    {"dup_out", DType::i32, Shape{}, true}},
        .make =
            [](Rng& rng, DType dt, int64_t n, int64_t cols) {
              return Args{{random_tensor(rng, {n, cols}, dt, 0, 2),
                           random_tensor(rng, {n, cols}, dt), random_tensor(rng, {n, cols}, dt)},
                          {Tensor::empty({n, cols}, dt), Tensor::empty({n, cols}, dt)}};
            },
        .functional =
            [](const Args& a, const Stream& s) {
              const auto g =
                  moe::native_swiglu_backward(a.inputs[0], a.inputs[1], a.inputs[2], {}, s);
              return std::vector<Tensor>{g.gate, g.up};
            },
        .into =
            [](const Args& a, const Stream& s) {
              moe::native_swiglu_backward_into(a.outputs[0], a.outputs[1], a.inputs[0], a.inputs[1],
                                               a.inputs[2], s);
            },
    });
    return r;
  }();
  return rows;
}

RUDNN_OP_CONTRACT_SUITE(MoeContract, moe_rows);

}  // namespace
}  // namespace rudnn::test
