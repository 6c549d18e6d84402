// MoE family entry points: validation once, into the problems of problem.h. The shared
// checks (common/op_call.h) and views (common/views.h) do the plumbing; this file keeps the
// family's own rules (top-k and group limits, the expert shapes, the plan's consistency).
#include "rudnn/moe.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <utility>

#include "common/op_call.h"
#include "common/views.h"
#include "moe/problem.h"
#include "moe/reference.h"
#if RUDNN_WITH_CUDA
#include "cuda/device_info.h"
#include "moe/cuda/launch.h"
#endif

namespace rudnn::moe {

using common::OpCall;
using common::run_backend;
using detail::cat;
using detail::fail;

// Builds the plan and token objects the public classes keep private.
struct Internal {
  static ExpertProjectionForward projection_forward(const Tensor& input, const Tensor& ids,
                                                    const Tensor& weights,
                                                    const ExpertProjectionOptions& o,
                                                    const Stream& stream);
  static ExpertProjectionGradients projection_backward(const ExpertProjectionState& st,
                                                       const Tensor& grad,
                                                       const ExpertProjectionSelection& which,
                                                       const Stream& stream);
  static MoeState& state_of(MoeForward& f) { return f.state; }
  static void fill(MoeState& st, RoutingPlan selection, RouterTrainingPlan training,
                   DispatchedTokens tokens, Tensor expert_out, ExpertTrainingCache cache,
                   bool has_caches, const MoeOptions& options) {
    st.selection_ = std::move(selection);
    st.training_.emplace(std::move(training));
    st.tokens_ = std::move(tokens);
    st.expert_out_ = std::move(expert_out);
    st.cache_ = std::move(cache);
    st.has_caches_ = has_caches;
    st.options_ = options;
  }
  static const MoeState& check(const MoeState& st, const char* op) {
    if (!st.training_) {
      fail(ErrorCode::InvalidArgument,
           cat(op,
               ": the state is empty; expected one made by moe_forward or moe_forward_selected"));
    }
    return st;
  }
  static MoeGradients backward(const MoeState& st, const Tensor& grad_output,
                               const MoeGradientSelection& which, const Stream& stream);
  static Tensor indices(const MoeState& st) {
    return check(st, "moe_route_indices").selection_.expert_indices();
  }
  static RoutingPlan plan(Tensor indices, Tensor weights, int64_t experts) {
    RoutingPlan p;
    p.indices_ = std::move(indices);
    p.weights_ = std::move(weights);
    p.experts_ = experts;
    return p;
  }
  static ExpertTrainingCache cache(const SwiGluExperts& x, const DispatchedTokens& tokens,
                                   Tensor gate_pre, Tensor up_pre, Tensor act) {
    ExpertTrainingCache c;
    c.rows_ = tokens.rows();
    c.offsets_ = tokens.offsets();
    c.gate_pre_ = std::move(gate_pre);
    c.up_pre_ = std::move(up_pre);
    c.act_ = std::move(act);
    c.gate_ = x.gate();
    c.up_ = x.up();
    c.down_ = x.down();
    return c;
  }
  static DispatchedTokens tokens(const RoutingPlan& plan, Tensor rows, Tensor offsets,
                                 Tensor token_of_row, Tensor row_of_slot) {
    DispatchedTokens d;
    d.rows_ = std::move(rows);
    d.offsets_ = std::move(offsets);
    d.token_of_row_ = std::move(token_of_row);
    d.row_of_slot_ = std::move(row_of_slot);
    d.weights_ = plan.weights();
    d.indices_ = plan.expert_indices();
    d.tokens_ = plan.tokens();
    d.top_k_ = plan.top_k();
    d.experts_ = plan.experts();
    return d;
  }
};

namespace {

// The dispatch keeps one 32-bit counter per expert in a block's shared memory.
constexpr int64_t kMaxDispatchExperts = 8192;
// Offsets and row ids are int32 (the grouped GEMM's form).
constexpr int64_t kMaxSlots = std::numeric_limits<int32_t>::max();

// logits [T, E] of a float dtype with E >= 1.
void require_logits(const OpCall& call, const Tensor& logits) {
  common::require_float(call, "logits", logits);
  if (logits.dim() != 2) {
    fail(ErrorCode::ShapeMismatch, cat(call.op, ": logits has shape ", shape_str(logits.shape()),
                                       "; expected 2 axes [T, E]"));
  }
  if (logits.size(1) < 1) {
    fail(ErrorCode::InvalidArgument,
         cat(call.op, ": logits has shape ", shape_str(logits.shape()), "; expected E >= 1"));
  }
}

void require_range(const OpCall& call, const char* name, int64_t value, int64_t lo, int64_t hi,
                   const char* what = "") {
  if (value < lo || value > hi) {
    fail(ErrorCode::InvalidArgument, cat(call.op, ": ", name, " is ", value, "; expected ", lo,
                                         " <= ", name, " <= ", hi, what));
  }
}

}  // namespace

// ===========================================================================================
// Routing
// ===========================================================================================

namespace {

// Every check of route; the outputs (functional: undefined, allocated after the checks).
void route_run(OpCall& call, const Tensor& logits, const RoutingOptions& options, Tensor& indices,
               Tensor& weights) {
  require_logits(call, logits);
  const int64_t tokens = logits.size(0), experts = logits.size(1);
  require_range(call, "top_k", options.top_k, 1, experts, " (E)");
  const Shape out_shape{tokens, options.top_k};
  RouteSoftmax p;
  if (indices.defined() || weights.defined()) {
    p.indices = static_cast<uint32_t*>(
        common::dense_out(call, "indices_out", indices, out_shape, DType::u32));
    p.weights = common::dense_out(call, "weights_out", weights, out_shape, logits.dtype());
    common::require_no_overlap(call, "indices_out", indices,
                               {{"logits", &logits}, {"weights_out", &weights}});
    common::require_no_overlap(call, "weights_out", weights, {{"logits", &logits}});
  } else {
    indices = call.empty(out_shape, DType::u32);
    weights = call.empty(out_shape, logits.dtype());
    p.indices = static_cast<uint32_t*>(indices.data());
    p.weights = weights.data();
  }
  p.tokens = tokens;
  p.experts = experts;
  p.top_k = options.top_k;
  p.renormalize = options.renormalize;
  p.dtype = logits.dtype();
  p.logits = common::dense_in(call, logits);
  run_backend(call, p, RUDNN_BACKENDS(moe, route_softmax));
}

}  // namespace

RoutingPlan route(const Tensor& logits, const RoutingOptions& options, const Stream& stream) {
  OpCall call("route", "logits", logits, stream);
  Tensor indices, weights;
  route_run(call, logits, options, indices, weights);
  return Internal::plan(std::move(indices), std::move(weights), logits.size(1));
}

void route_into(const Tensor& indices_out, const Tensor& weights_out, const Tensor& logits,
                const RoutingOptions& options, const Stream& stream) {
  OpCall call("route", "logits", logits, stream);
  Tensor indices = indices_out, weights = weights_out;
  common::require_defined(call, "indices_out", indices);
  common::require_defined(call, "weights_out", weights);
  route_run(call, logits, options, indices, weights);
}

namespace {

void route_sigmoid_grouped_run(OpCall& call, const Tensor& logits, const Tensor& bias,
                               const GroupRoutingOptions& o, Tensor& indices, Tensor& weights) {
  require_logits(call, logits);
  const int64_t tokens = logits.size(0), experts = logits.size(1);
  if (experts > 1024) {
    fail(ErrorCode::InvalidArgument,
         cat(call.op, ": logits has E = ", experts, " experts; expected 1 <= E <= 1024"));
  }
  if (bias.defined()) {
    common::require_dtype(call, "bias", bias, {DType::f32});
    common::require_shape(call, "bias", bias, {experts}, "[E]");
  }
  require_range(call, "groups", o.groups, 1, 128);
  if (experts % o.groups != 0) {
    fail(ErrorCode::InvalidArgument,
         cat(call.op, ": groups is ", o.groups, "; expected a divisor of E = ", experts,
             " (experts split evenly into groups)"));
  }
  require_range(call, "selected_groups", o.selected_groups, 1, o.groups, " (groups)");
  const int64_t per_group = experts / o.groups;
  require_range(call, "top_k", o.top_k, 1, 64);
  if (o.top_k > o.selected_groups * per_group) {
    fail(ErrorCode::InvalidArgument,
         cat(call.op, ": top_k is ", o.top_k, "; expected at most selected_groups * E / groups = ",
             o.selected_groups * per_group, " (the experts of the selected groups)"));
  }
  if (o.group_top_two && per_group < 2) {
    fail(ErrorCode::InvalidArgument,
         cat(call.op, ": group_top_two needs at least 2 experts per group; ", "groups has ",
             per_group));
  }
  common::require_finite_positive(call, "scale", o.scale);
  RouteSigmoidGrouped p;
  p.tokens = tokens;
  p.experts = experts;
  p.top_k = o.top_k;
  p.groups = o.groups;
  p.selected_groups = o.selected_groups;
  p.group_top_two = o.group_top_two;
  p.renormalize = o.renormalize;
  p.scale = o.scale;
  p.dtype = logits.dtype();
  p.logits = common::dense_in(call, logits);
  p.bias = bias.defined() ? static_cast<const float*>(common::dense_in(call, bias)) : nullptr;
  const Shape out_shape{tokens, o.top_k};
  if (indices.defined() || weights.defined()) {
    p.indices = static_cast<uint32_t*>(
        common::dense_out(call, "indices_out", indices, out_shape, DType::u32));
    p.weights = common::dense_out(call, "weights_out", weights, out_shape, logits.dtype());
    common::require_no_overlap(call, "indices_out", indices,
                               {{"logits", &logits}, {"bias", &bias}, {"weights_out", &weights}});
    common::require_no_overlap(call, "weights_out", weights,
                               {{"logits", &logits}, {"bias", &bias}});
  } else {
    indices = call.empty(out_shape, DType::u32);
    weights = call.empty(out_shape, logits.dtype());
    p.indices = static_cast<uint32_t*>(indices.data());
    p.weights = weights.data();
  }
  run_backend(call, p, RUDNN_BACKENDS(moe, route_sigmoid_grouped));
}

}  // namespace

RoutingPlan route_sigmoid_grouped(const Tensor& logits, const Tensor& bias,
                                  const GroupRoutingOptions& o, const Stream& stream) {
  OpCall call("route_sigmoid_grouped", "logits", logits, stream);
  Tensor indices, weights;
  route_sigmoid_grouped_run(call, logits, bias, o, indices, weights);
  return Internal::plan(std::move(indices), std::move(weights), logits.size(1));
}

void route_sigmoid_grouped_into(const Tensor& indices_out, const Tensor& weights_out,
                                const Tensor& logits, const Tensor& bias,
                                const GroupRoutingOptions& options, const Stream& stream) {
  OpCall call("route_sigmoid_grouped", "logits", logits, stream);
  Tensor indices = indices_out, weights = weights_out;
  common::require_defined(call, "indices_out", indices);
  common::require_defined(call, "weights_out", weights);
  route_sigmoid_grouped_run(call, logits, bias, options, indices, weights);
}

// ===========================================================================================
// Dispatch and combine
// ===========================================================================================

DispatchedTokens RoutingPlan::dispatch(const Tensor& input, const Stream& stream) const {
  OpCall call("dispatch", "input", input, stream);
  common::require_float(call, "input", input);
  if (!indices_.defined()) {
    fail(ErrorCode::InvalidArgument,
         cat(call.op,
             ": the routing plan is empty; expected one made by route or route_sigmoid_grouped"));
  }
  common::require_device(call, "the routing plan", indices_);
  const int64_t tokens = this->tokens(), k = top_k();
  if (input.dim() != 2 || input.size(0) != tokens || input.size(1) < 1) {
    fail(ErrorCode::ShapeMismatch, cat(call.op, ": input has shape ", shape_str(input.shape()),
                                       "; expected [T, H] with T = ", tokens, " and H >= 1"));
  }
  if (experts_ > kMaxDispatchExperts) {
    fail(ErrorCode::InvalidArgument, cat(call.op, ": the plan has E = ", experts_,
                                         " experts; expected E <= ", kMaxDispatchExperts));
  }
  if (tokens * k > kMaxSlots) {
    fail(ErrorCode::InvalidArgument, cat(call.op, ": T * top_k is ", tokens * k,
                                         "; expected at most 2^31 - 1 (int32 row ids)"));
  }
  const int64_t hidden = input.size(1);
  Dispatch p;
  p.tokens = tokens;
  p.top_k = k;
  p.experts = experts_;
  p.hidden = hidden;
  p.dtype = input.dtype();
  p.indices = static_cast<const uint32_t*>(indices_.data());
  p.input = common::dense_in(call, input);
  Tensor rows = call.empty({tokens * k, hidden}, input.dtype());
  Tensor offsets = call.empty({experts_ + 1}, DType::i32);
  Tensor token_of_row = call.empty({tokens * k}, DType::i32);
  Tensor row_of_slot = call.empty({tokens, k}, DType::i32);
  p.rows = rows.data();
  p.offsets = static_cast<int32_t*>(offsets.data());
  p.token_of_row = static_cast<int32_t*>(token_of_row.data());
  p.row_of_slot = static_cast<int32_t*>(row_of_slot.data());
  run_backend(call, p, RUDNN_BACKENDS(moe, dispatch));
  return Internal::tokens(*this, std::move(rows), std::move(offsets), std::move(token_of_row),
                          std::move(row_of_slot));
}

Tensor DispatchedTokens::combine(const Tensor& expert_out, const Stream& stream) const {
  OpCall call("combine", "expert_out", expert_out, stream);
  common::require_float(call, "expert_out", expert_out);
  if (!rows_.defined()) {
    fail(ErrorCode::InvalidArgument,
         cat(call.op, ": the dispatched tokens are empty; expected ones made by dispatch"));
  }
  common::require_device(call, "the dispatch", row_of_slot_);
  const int64_t slots = tokens_ * top_k_;
  if (expert_out.dim() != 2 || expert_out.size(0) != slots || expert_out.size(1) < 1) {
    fail(ErrorCode::ShapeMismatch,
         cat(call.op, ": expert_out has shape ", shape_str(expert_out.shape()),
             "; expected [T * top_k, H] with T * top_k = ", slots, " and H >= 1"));
  }
  const int64_t hidden = expert_out.size(1);
  Combine p;
  p.tokens = tokens_;
  p.top_k = top_k_;
  p.hidden = hidden;
  p.dtype = expert_out.dtype();
  p.weight_dtype = weights_.dtype();
  p.expert_out = common::dense_in(call, expert_out);
  p.weights = weights_.data();
  p.row_of_slot = static_cast<const int32_t*>(row_of_slot_.data());
  Tensor out = call.empty({tokens_, hidden}, expert_out.dtype());
  p.out = out.data();
  run_backend(call, p, RUDNN_BACKENDS(moe, combine));
  return out;
}

namespace {

// The dispatched tokens' own checks, and a [T*k, H'] operand named `name`.
int64_t require_slot_rows(const OpCall& call, const DispatchedTokens& d, const Tensor& rows_of,
                          const char* name) {
  common::require_float(call, name, rows_of);
  if (!d.rows().defined()) {
    fail(ErrorCode::InvalidArgument,
         cat(call.op, ": the dispatched tokens are empty; expected ones made by dispatch"));
  }
  common::require_device(call, "the dispatch", d.row_of_slot());
  const int64_t slots = d.tokens() * d.top_k();
  if (rows_of.dim() != 2 || rows_of.size(0) != slots || rows_of.size(1) < 1) {
    fail(ErrorCode::ShapeMismatch,
         cat(call.op, ": ", name, " has shape ", shape_str(rows_of.shape()),
             "; expected [T * top_k, H] with T * top_k = ", slots, " and H >= 1"));
  }
  return rows_of.size(1);
}

}  // namespace

Tensor DispatchedTokens::dispatch_backward(const Tensor& drows, const Stream& stream) const {
  OpCall call("dispatch_backward", "drows", drows, stream);
  const int64_t hidden = require_slot_rows(call, *this, drows, "drows");
  Combine p;
  p.tokens = tokens_;
  p.top_k = top_k_;
  p.hidden = hidden;
  p.dtype = drows.dtype();
  p.expert_out = common::dense_in(call, drows);
  p.weights = nullptr;  // a plain sum: the weights were applied by combine
  p.row_of_slot = static_cast<const int32_t*>(row_of_slot_.data());
  Tensor out = call.empty({tokens_, hidden}, drows.dtype());
  p.out = out.data();
  run_backend(call, p, RUDNN_BACKENDS(moe, combine));
  return out;
}

CombineGradients DispatchedTokens::combine_backward(const Tensor& expert_out,
                                                    const Tensor& grad_output,
                                                    const Stream& stream) const {
  return combine_backward_with_strategy(expert_out, grad_output, CombineGradientStrategy::Serial,
                                        stream);
}

CombineGradients DispatchedTokens::combine_backward_with_strategy(const Tensor& expert_out,
                                                                  const Tensor& grad_output,
                                                                  CombineGradientStrategy strategy,
                                                                  const Stream& stream) const {
  OpCall call("combine_backward", "expert_out", expert_out, stream);
  const int64_t hidden = require_slot_rows(call, *this, expert_out, "expert_out");
  common::require_defined(call, "grad_output", grad_output);
  if (grad_output.dtype() != expert_out.dtype()) {
    fail(ErrorCode::DTypeMismatch,
         cat(call.op, ": grad_output has dtype ", dtype_name(grad_output.dtype()),
             "; expected expert_out's dtype ", dtype_name(expert_out.dtype())));
  }
  common::require_device(call, "grad_output", grad_output);
  common::require_shape(call, "grad_output", grad_output, {tokens_, hidden}, "[T, H]");
  CombineBackward p;
  p.tokens = tokens_;
  p.top_k = top_k_;
  p.hidden = hidden;
  p.dtype = expert_out.dtype();
  p.weight_dtype = weights_.dtype();
  p.plane = strategy == CombineGradientStrategy::Plane;
  p.expert_out = common::dense_in(call, expert_out);
  p.grad_out = common::dense_in(call, grad_output);
  p.weights = weights_.data();
  p.row_of_slot = static_cast<const int32_t*>(row_of_slot_.data());
  CombineGradients g;
  g.dexpert = call.empty({tokens_ * top_k_, hidden}, expert_out.dtype());
  g.dweights = call.empty({tokens_, top_k_}, DType::f32);
  p.dexpert = g.dexpert.data();
  p.dweights = static_cast<float*>(g.dweights.data());
  run_backend(call, p, RUDNN_BACKENDS(moe, combine_backward));
  return g;
}

// ===========================================================================================
// Router training
// ===========================================================================================

namespace {

SelectedRouter selected_router_problem(OpCall& call, const Tensor& logits, const Tensor& indices,
                                       const RouterWeightOptions& o) {
  require_logits(call, logits);
  common::require_dtype(call, "indices", indices, {DType::u32, DType::i32, DType::i64});
  const int64_t tokens = logits.size(0), experts = logits.size(1);
  if (indices.dim() != 2 || indices.size(0) != tokens) {
    fail(ErrorCode::ShapeMismatch, cat(call.op, ": indices has shape ", shape_str(indices.shape()),
                                       "; expected [T, top_k] with T = ", tokens));
  }
  const int64_t k = indices.size(1);
  if (k < 1 || k > std::min<int64_t>(experts, 64)) {
    fail(ErrorCode::InvalidArgument,
         cat(call.op, ": indices has top_k = ", k,
             "; expected 1 <= top_k <= min(E, 64) = ", std::min<int64_t>(experts, 64)));
  }
  common::require_finite_positive(call, "scale", o.scale);
  SelectedRouter p;
  p.tokens = tokens;
  p.experts = experts;
  p.top_k = k;
  p.dtype = logits.dtype();
  p.index_dtype = indices.dtype();
  p.sigmoid = o.scoring == RouterScoring::Sigmoid;
  p.renormalize = o.renormalize;
  p.scale = o.scale;
  p.logits = common::dense_in(call, logits);
  p.indices = common::dense_in(call, indices);
  return p;
}

}  // namespace

Tensor selected_router_weights(const Tensor& logits, const Tensor& indices,
                               const RouterWeightOptions& options, const Stream& stream) {
  OpCall call("selected_router_weights", "logits", logits, stream);
  SelectedRouter p = selected_router_problem(call, logits, indices, options);
  Tensor weights = call.empty({p.tokens, p.top_k}, DType::f32);
  p.weights = static_cast<float*>(weights.data());
  run_backend(call, p, RUDNN_BACKENDS(moe, selected_router));
  return weights;
}

void selected_router_weights_into(const Tensor& weights_out, const Tensor& logits,
                                  const Tensor& indices, const RouterWeightOptions& options,
                                  const Stream& stream) {
  OpCall call("selected_router_weights", "logits", logits, stream);
  SelectedRouter p = selected_router_problem(call, logits, indices, options);
  p.weights = static_cast<float*>(
      common::dense_out(call, "weights_out", weights_out, {p.tokens, p.top_k}, DType::f32));
  common::require_no_overlap(call, "weights_out", weights_out,
                             {{"logits", &logits}, {"indices", &indices}});
  run_backend(call, p, RUDNN_BACKENDS(moe, selected_router));
}

namespace {

void selected_router_backward_run(OpCall& call, SelectedRouter& p, const Tensor& grad_weights) {
  common::require_dtype(call, "grad_weights", grad_weights, {DType::f32});
  common::require_shape(call, "grad_weights", grad_weights, {p.tokens, p.top_k}, "[T, top_k]");
  p.grad_weights = static_cast<const float*>(common::dense_in(call, grad_weights));
}

}  // namespace

Tensor selected_router_backward(const Tensor& logits, const Tensor& indices,
                                const Tensor& grad_weights, const RouterWeightOptions& options,
                                const Stream& stream) {
  OpCall call("selected_router_backward", "logits", logits, stream);
  SelectedRouter p = selected_router_problem(call, logits, indices, options);
  selected_router_backward_run(call, p, grad_weights);
  Tensor dlogits = call.empty({p.tokens, p.experts}, logits.dtype());
  p.dlogits = dlogits.data();
  run_backend(call, p, RUDNN_BACKENDS(moe, selected_router));
  return dlogits;
}

void selected_router_backward_into(const Tensor& dlogits_out, const Tensor& logits,
                                   const Tensor& indices, const Tensor& grad_weights,
                                   const RouterWeightOptions& options, const Stream& stream) {
  OpCall call("selected_router_backward", "logits", logits, stream);
  SelectedRouter p = selected_router_problem(call, logits, indices, options);
  selected_router_backward_run(call, p, grad_weights);
  p.dlogits =
      common::dense_out(call, "dlogits_out", dlogits_out, {p.tokens, p.experts}, logits.dtype());
  common::require_no_overlap(
      call, "dlogits_out", dlogits_out,
      {{"logits", &logits}, {"indices", &indices}, {"grad_weights", &grad_weights}});
  run_backend(call, p, RUDNN_BACKENDS(moe, selected_router));
}

RouterTrainingPlan::RouterTrainingPlan(const RoutingPlan& selection, const Tensor& logits,
                                       const RouterWeightOptions& options, const Stream& stream)
    : logits_(logits), options_(options) {
  if (!selection.expert_indices().defined()) {
    fail(ErrorCode::InvalidArgument,
         "into_training: the routing plan is empty; expected one made by route or "
         "route_sigmoid_grouped");
  }
  if (logits.defined() && logits.dim() == 2 && logits.size(1) != selection.experts()) {
    fail(ErrorCode::ShapeMismatch,
         cat("into_training: logits has shape ", shape_str(logits.shape()),
             "; expected E = ", selection.experts(), " (the plan's)"));
  }
  Tensor weights = selected_router_weights(logits, selection.expert_indices(), options, stream);
  routing_ = Internal::plan(selection.expert_indices(), std::move(weights), selection.experts());
}

Tensor RouterTrainingPlan::backward(const Tensor& grad_weights, const Stream& stream) const {
  return selected_router_backward(logits_, routing_.expert_indices(), grad_weights, options_,
                                  stream);
}

RouterTrainingPlan RoutingPlan::into_training(const Tensor& logits,
                                              const RouterWeightOptions& options,
                                              const Stream& stream) const {
  return RouterTrainingPlan(*this, logits, options, stream);
}

// ===========================================================================================
// Native SwiGLU
// ===========================================================================================

namespace {

NativeSwiGlu native_swiglu_problem(OpCall& call, const Tensor& gate, const Tensor& up) {
  common::require_float(call, "gate", gate);
  common::require_like(call, "up", up, "gate", gate);
  NativeSwiGlu p;
  p.count = gate.numel();
  p.dtype = gate.dtype();
  p.gate = common::dense_in(call, gate);
  p.up = common::dense_in(call, up);
  return p;
}

}  // namespace

Tensor native_swiglu(const Tensor& gate, const Tensor& up, const Stream& stream) {
  OpCall call("native_swiglu", "gate", gate, stream);
  NativeSwiGlu p = native_swiglu_problem(call, gate, up);
  Tensor out = call.empty(gate.shape(), gate.dtype());
  p.out = out.data();
  run_backend(call, p, RUDNN_BACKENDS(moe, native_swiglu));
  return out;
}

void native_swiglu_into(const Tensor& out, const Tensor& gate, const Tensor& up,
                        const Stream& stream) {
  OpCall call("native_swiglu", "gate", gate, stream);
  NativeSwiGlu p = native_swiglu_problem(call, gate, up);
  p.out = common::dense_out(call, "out", out, gate.shape(), gate.dtype());
  common::require_no_overlap(call, "out", out, {{"gate", &gate}, {"up", &up}});
  run_backend(call, p, RUDNN_BACKENDS(moe, native_swiglu));
}

NativeSwiGluGradients native_swiglu_backward(const Tensor& gate, const Tensor& up,
                                             const Tensor& grad,
                                             const NativeSwiGluSelection& selection,
                                             const Stream& stream) {
  OpCall call("native_swiglu_backward", "gate", gate, stream);
  NativeSwiGlu p = native_swiglu_problem(call, gate, up);
  common::require_like(call, "grad", grad, "gate", gate);
  p.grad = common::dense_in(call, grad);
  NativeSwiGluGradients g;
  if (selection.gate) {
    g.gate = call.empty(gate.shape(), gate.dtype());
    p.dgate = g.gate.data();
  }
  if (selection.up) {
    g.up = call.empty(gate.shape(), gate.dtype());
    p.dup = g.up.data();
  }
  if (p.dgate || p.dup) run_backend(call, p, RUDNN_BACKENDS(moe, native_swiglu));
  return g;
}

void native_swiglu_backward_into(const Tensor& dgate_out, const Tensor& dup_out, const Tensor& gate,
                                 const Tensor& up, const Tensor& grad, const Stream& stream) {
  OpCall call("native_swiglu_backward", "gate", gate, stream);
  NativeSwiGlu p = native_swiglu_problem(call, gate, up);
  common::require_like(call, "grad", grad, "gate", gate);
  p.grad = common::dense_in(call, grad);
  const std::initializer_list<std::pair<const char*, const Tensor*>> inputs = {
      {"gate", &gate}, {"up", &up}, {"grad", &grad}};
  if (dgate_out.defined()) {
    p.dgate = common::dense_out(call, "dgate_out", dgate_out, gate.shape(), gate.dtype());
    common::require_no_overlap(call, "dgate_out", dgate_out, inputs);
  }
  if (dup_out.defined()) {
    p.dup = common::dense_out(call, "dup_out", dup_out, gate.shape(), gate.dtype());
    common::require_no_overlap(call, "dup_out", dup_out, inputs);
    common::require_no_overlap(call, "dup_out", dup_out, {{"dgate_out", &dgate_out}});
  }
  if (p.dgate || p.dup) run_backend(call, p, RUDNN_BACKENDS(moe, native_swiglu));
}

// ===========================================================================================
// SwiGLU experts
// ===========================================================================================

SwiGluExperts::SwiGluExperts(const Tensor& gate, const Tensor& up, const Tensor& down) {
  OpCall call("SwiGluExperts", "gate", gate, {});
  common::require_float(call, "gate", gate);
  if (gate.dim() != 3 || gate.size(0) < 1 || gate.size(1) < 1 || gate.size(2) < 1) {
    fail(ErrorCode::ShapeMismatch, cat(call.op, ": gate has shape ", shape_str(gate.shape()),
                                       "; expected [E, I, H] with E, I, H >= 1"));
  }
  common::require_like(call, "up", up, "gate", gate);
  common::require_defined(call, "down", down);
  if (down.dtype() != gate.dtype()) {
    fail(ErrorCode::DTypeMismatch, cat(call.op, ": down has dtype ", dtype_name(down.dtype()),
                                       "; expected gate's dtype ", dtype_name(gate.dtype())));
  }
  common::require_device(call, "down", down);
  const int64_t e = gate.size(0), i = gate.size(1), h = gate.size(2);
  common::require_shape(call, "down", down, {e, h, i}, "[E, H, I]");
  gate_ = gate;
  up_ = up;
  down_ = down;
}

Tensor SwiGluExperts::forward_dispatched(const DispatchedTokens& tokens,
                                         const Stream& stream) const {
  return forward_dispatched_with_strategy(tokens, GroupedStrategy::Scalar, stream);
}

namespace {

// The expert operands' checks against dispatched rows (`rows`, named `rows_name`), and the
// path the strategy resolves to (by capability only).
// Whether the grouped tensor-core GEMMs serve these experts on `device`.
bool tensor_cores_serve(const SwiGluExperts& x, Device device) {
  const bool half_type = x.gate().dtype() == DType::f16 || x.gate().dtype() == DType::bf16;
  bool tensor_core_device = false;
#if RUDNN_WITH_CUDA
  if (device.is_cuda()) tensor_core_device = ::rudnn::cuda::device_info(device).compute_major >= 8;
#endif
  return half_type && tensor_core_device && x.experts() <= 1024;
}

// Auto's choice of the decode kernels for `rows` dispatched rows on a CUDA device.
bool auto_decode(const SwiGluExperts& x, Device device, int64_t rows) {
  return rows <= (tensor_cores_serve(x, device) ? kDecodeRowsWithTensorCores : kDecodeRows);
}

ExpertPath expert_path(const OpCall& call, const SwiGluExperts& x, const Tensor& rows,
                       const char* rows_name, GroupedStrategy strategy) {
  common::require_device(call, "gate", x.gate());
  if (rows.dtype() != x.gate().dtype()) {
    fail(ErrorCode::DTypeMismatch,
         cat(call.op, ": ", rows_name, " has dtype ", dtype_name(rows.dtype()),
             "; expected the experts' dtype ", dtype_name(x.gate().dtype())));
  }
  const bool tensor_core_ok = tensor_cores_serve(x, call.device);
  if (strategy == GroupedStrategy::TensorCore) {
    if (!tensor_core_ok) {
      fail(
          ErrorCode::Unsupported,
          cat(call.op, ": strategy TensorCore needs f16 or bf16 experts (have ",
              dtype_name(x.gate().dtype()), "), a CUDA device of compute capability 8.0 or newer (",
              call.device.str(), ") and E <= 1024 (", x.experts(), ")"));
    }
    return ExpertPath::TensorCore;
  }
  return strategy == GroupedStrategy::Auto && tensor_core_ok ? ExpertPath::TensorCore
                                                             : ExpertPath::Scalar;
}

ExpertsForward experts_problem(OpCall& call, const SwiGluExperts& x, const DispatchedTokens& tokens,
                               GroupedStrategy strategy) {
  const Tensor& rows = tokens.rows();
  const ExpertPath path = expert_path(call, x, rows, "tokens", strategy);
  if (tokens.experts() != x.experts()) {
    fail(ErrorCode::ShapeMismatch, cat(call.op, ": tokens were routed over E = ", tokens.experts(),
                                       " experts; expected the experts' E = ", x.experts()));
  }
  if (tokens.hidden() != x.hidden()) {
    fail(ErrorCode::ShapeMismatch, cat(call.op, ": tokens have H = ", tokens.hidden(),
                                       "; expected the experts' H = ", x.hidden()));
  }
  ExpertsForward p;
  p.rows = rows.size(0);
  // Auto, small batches (decode): the weights are the traffic; stream them once.
  p.path = strategy == GroupedStrategy::Auto && call.device.is_cuda() &&
                   auto_decode(x, call.device, p.rows)
               ? ExpertPath::Decode
               : path;
  p.experts = x.experts();
  p.hidden = x.hidden();
  p.inter = x.inter();
  p.dtype = x.gate().dtype();
  p.x = rows.data();
  p.offsets = static_cast<const int32_t*>(tokens.offsets().data());
  p.gate = common::dense_in(call, x.gate());
  p.up = common::dense_in(call, x.up());
  p.down = common::dense_in(call, x.down());
  return p;
}

}  // namespace

Tensor SwiGluExperts::forward_dispatched_with_strategy(const DispatchedTokens& tokens,
                                                       GroupedStrategy strategy,
                                                       const Stream& stream) const {
  OpCall call("forward_dispatched", "tokens", tokens.rows(), stream);
  ExpertsForward p = experts_problem(call, *this, tokens, strategy);
  Tensor y = call.empty({p.rows, p.hidden}, p.dtype);
  p.y = y.data();
  run_backend(call, p, RUDNN_BACKENDS(moe, experts_forward));
  return y;
}

ExpertTrainingForward SwiGluExperts::forward_dispatched_training(const DispatchedTokens& tokens,
                                                                 GroupedStrategy strategy,
                                                                 const Stream& stream) const {
  OpCall call("forward_dispatched_training", "tokens", tokens.rows(), stream);
  ExpertsForward p = experts_problem(call, *this, tokens, strategy);
  ExpertTrainingForward r;
  r.output = call.empty({p.rows, p.hidden}, p.dtype);
  p.y = r.output.data();
  Tensor gate_pre = call.empty({p.rows, p.inter}, p.dtype);
  Tensor up_pre = call.empty({p.rows, p.inter}, p.dtype);
  Tensor act = call.empty({p.rows, p.inter}, p.dtype);
  p.gate_pre = gate_pre.data();
  p.up_pre = up_pre.data();
  p.act = act.data();
  run_backend(call, p, RUDNN_BACKENDS(moe, experts_forward));
  r.cache = Internal::cache(*this, tokens, std::move(gate_pre), std::move(up_pre), std::move(act));
  return r;
}

ExpertGradients ExpertTrainingCache::backward(const Tensor& dexpert, const Stream& stream) const {
  return backward_selected(dexpert, {}, GroupedStrategy::Scalar, stream);
}

ExpertGradients ExpertTrainingCache::backward_with_strategy(const Tensor& dexpert,
                                                            GroupedStrategy strategy,
                                                            const Stream& stream) const {
  return backward_selected(dexpert, {}, strategy, stream);
}

ExpertGradients ExpertTrainingCache::backward_selected(const Tensor& dexpert,
                                                       const ExpertGradientSelection& which,
                                                       GroupedStrategy strategy,
                                                       const Stream& stream) const {
  OpCall call("ExpertTrainingCache::backward", "dexpert", dexpert, stream);
  if (!rows_.defined()) {
    fail(ErrorCode::InvalidArgument,
         cat(call.op, ": the cache is empty; expected one made by forward_dispatched_training"));
  }
  const SwiGluExperts experts(gate_, up_, down_);
  const ExpertPath path = expert_path(call, experts, dexpert, "dexpert", strategy);
  common::require_shape(call, "dexpert", dexpert, rows_.shape(), "[T * top_k, H]");
  ExpertsBackward p;
  p.rows = rows_.size(0);
  p.experts = experts.experts();
  p.hidden = experts.hidden();
  p.inter = experts.inter();
  p.dtype = gate_.dtype();
  p.path = path;
  p.x = rows_.data();
  p.offsets = static_cast<const int32_t*>(offsets_.data());
  p.gate = common::dense_in(call, gate_);
  p.up = common::dense_in(call, up_);
  p.down = common::dense_in(call, down_);
  p.gate_pre = gate_pre_.data();
  p.up_pre = up_pre_.data();
  p.act = act_.data();
  p.dy = common::dense_in(call, dexpert);
  ExpertGradients g;
  if (which.input) {
    g.dinput = call.empty({p.rows, p.hidden}, p.dtype);
    p.dx = g.dinput.data();
  }
  const auto weight_grad = [&](bool wanted, const Tensor& like, Tensor& out) -> float* {
    if (!wanted) return nullptr;
    out = call.empty(like.shape(), DType::f32);
    return static_cast<float*>(out.data());
  };
  p.dgate = weight_grad(which.gate, gate_, g.dgate);
  p.dup = weight_grad(which.up, up_, g.dup);
  p.ddown = weight_grad(which.down, down_, g.ddown);
  if (p.dx || p.dgate || p.dup || p.ddown)
    run_backend(call, p, RUDNN_BACKENDS(moe, experts_backward));
  return g;
}

namespace {

void require_forward_operands(const char* op, const SwiGluExperts& experts, const Tensor& input,
                              const Tensor& logits, const Stream& stream) {
  OpCall call(op, "input", input, stream);
  common::require_float(call, "input", input);
  require_logits(call, logits);
  common::require_device(call, "logits", logits);
  common::require_device(call, "gate", experts.gate());
  if (input.dim() != 2 || input.size(1) != experts.hidden()) {
    fail(ErrorCode::ShapeMismatch,
         cat(op, ": input has shape ", shape_str(input.shape()),
             "; expected [T, H] with the experts' H = ", experts.hidden()));
  }
  if (logits.size(0) != input.size(0) || logits.size(1) != experts.experts()) {
    fail(ErrorCode::ShapeMismatch,
         cat(op, ": logits has shape ", shape_str(logits.shape()), "; expected [T, E] = [",
             input.size(0), ", ", experts.experts(), "]"));
  }
  if (input.dtype() != experts.gate().dtype()) {
    fail(ErrorCode::DTypeMismatch,
         cat(op, ": input has dtype ", dtype_name(input.dtype()), "; expected the experts' dtype ",
             dtype_name(experts.gate().dtype())));
  }
}

// The forward after routing. Auto on a CUDA device with a decode-sized batch (T * top_k rows
// as auto_decode allows, E <= kDecodeMaxExperts) runs straight from the plan (decode.cu): no
// dispatch, the combine folded in up to kDecodeFusedTokens tokens. Its kernels compute what
// dispatch -> forward_dispatched(Auto) -> combine computes, in the same order: the same bits.
Tensor experts_after_routing(const char* op, const SwiGluExperts& x, const Tensor& input,
                             const RoutingPlan& plan, GroupedStrategy strategy,
                             const Stream& stream) {
  // Anything the dispatch would refuse takes that path, which names the rule.
  const int64_t top_k = plan.top_k();
  const bool decode =
      strategy == GroupedStrategy::Auto && input.defined() && input.device().is_cuda() &&
      input.dim() == 2 && input.dtype() == x.gate().dtype() &&
      input.device() == x.gate().device() && input.size(1) == x.hidden() &&
      input.size(0) == plan.expert_indices().size(0) &&
      plan.expert_indices().device() == input.device() && input.size(0) > 0 &&
      auto_decode(x, input.device(), input.size(0) * top_k) && x.experts() <= kDecodeMaxExperts;
  std::optional<OpCall> call;
  const void* data = nullptr;
  if (decode) {
    call.emplace(op, "input", input, stream);
    data = common::dense_in(*call, input);
  }
  // The dispatched kernels read fresh (16-byte aligned) rows; an offset view takes that path.
  if (!decode || reinterpret_cast<uintptr_t>(data) % 16 != 0) {
    const DispatchedTokens dispatched = plan.dispatch(input, stream);
    return dispatched.combine(x.forward_dispatched_with_strategy(dispatched, strategy, stream),
                              stream);
  }
  const int64_t tokens = input.size(0);
  DecodeForward p;
  p.tokens = tokens;
  p.top_k = top_k;
  p.experts = x.experts();
  p.hidden = x.hidden();
  p.inter = x.inter();
  p.dtype = x.gate().dtype();
  p.weight_dtype = plan.weights().dtype();
  p.input = data;
  p.indices = static_cast<const uint32_t*>(common::dense_in(*call, plan.expert_indices()));
  p.weights = common::dense_in(*call, plan.weights());
  p.gate = common::dense_in(*call, x.gate());
  p.up = common::dense_in(*call, x.up());
  p.down = common::dense_in(*call, x.down());
  Tensor out = call->empty({tokens, p.hidden}, p.dtype);
  p.out = out.data();
#if RUDNN_WITH_CUDA
  cuda::decode_forward(p, call->stream);
#endif
  return out;
}

}  // namespace

Tensor SwiGluExperts::forward(const Tensor& input, const Tensor& logits,
                              const RoutingOptions& options, const Stream& stream) const {
  return forward_with_strategy(input, logits, options, GroupedStrategy::Scalar, stream);
}

Tensor SwiGluExperts::forward_with_strategy(const Tensor& input, const Tensor& logits,
                                            const RoutingOptions& options, GroupedStrategy strategy,
                                            const Stream& stream) const {
  require_forward_operands("forward", *this, input, logits, stream);
  const RoutingPlan plan = route(logits, options, stream);
  return experts_after_routing("forward", *this, input, plan, strategy, stream);
}

Tensor SwiGluExperts::forward_sigmoid_grouped(const Tensor& input, const Tensor& logits,
                                              const Tensor& bias,
                                              const GroupRoutingOptions& options,
                                              GroupedStrategy strategy,
                                              const Stream& stream) const {
  require_forward_operands("forward_sigmoid_grouped", *this, input, logits, stream);
  const RoutingPlan plan = route_sigmoid_grouped(logits, bias, options, stream);
  return experts_after_routing("forward_sigmoid_grouped", *this, input, plan, strategy, stream);
}

// ===========================================================================================
// Expert projections
// ===========================================================================================

namespace {

ExpertPath projection_path(const OpCall& call, const Tensor& weights, GroupedStrategy strategy) {
  const bool half_type = weights.dtype() == DType::f16 || weights.dtype() == DType::bf16;
  bool tensor_core_device = false;
#if RUDNN_WITH_CUDA
  if (call.device.is_cuda())
    tensor_core_device = ::rudnn::cuda::device_info(call.device).compute_major >= 8;
#endif
  const bool ok = half_type && tensor_core_device && weights.size(0) <= 1024;
  if (strategy == GroupedStrategy::TensorCore && !ok) {
    fail(ErrorCode::Unsupported,
         cat(call.op, ": strategy TensorCore needs f16 or bf16 weights (have ",
             dtype_name(weights.dtype()), "), a CUDA device of compute capability 8.0 or newer (",
             call.device.str(), ") and E <= 1024 (", weights.size(0), ")"));
  }
  return strategy != GroupedStrategy::Scalar && ok ? ExpertPath::TensorCore : ExpertPath::Scalar;
}

}  // namespace

ExpertProjectionForward Internal::projection_forward(const Tensor& input, const Tensor& ids,
                                                     const Tensor& weights,
                                                     const ExpertProjectionOptions& o,
                                                     const Stream& stream) {
  OpCall call("expert_projection_forward", "input", input, stream);
  common::require_float(call, "input", input);
  if (input.dim() != 2 || input.size(1) < 1) {
    fail(ErrorCode::ShapeMismatch, cat(call.op, ": input has shape ", shape_str(input.shape()),
                                       "; expected [R, K] with K >= 1"));
  }
  const int64_t rows = input.size(0), k = input.size(1);
  common::require_dtype(call, "global_ids", ids, {DType::u32});
  common::require_shape(call, "global_ids", ids, {rows}, "[R]");
  common::require_defined(call, "weights", weights);
  if (weights.dtype() != input.dtype()) {
    fail(ErrorCode::DTypeMismatch, cat(call.op, ": weights has dtype ", dtype_name(weights.dtype()),
                                       "; expected input's dtype ", dtype_name(input.dtype())));
  }
  common::require_device(call, "weights", weights);
  if (weights.dim() != 3 || weights.size(0) < 1 || weights.size(1) < 1 || weights.size(2) != k) {
    fail(ErrorCode::ShapeMismatch,
         cat(call.op, ": weights has shape ", shape_str(weights.shape()),
             "; expected [E, N, K] with E, N >= 1 and K = ", k, " (input's)"));
  }
  if (o.expert_start < 0) {
    fail(ErrorCode::InvalidArgument,
         cat(call.op, ": expert_start is ", o.expert_start, "; expected >= 0"));
  }
  if (rows > kMaxSlots) {
    fail(ErrorCode::InvalidArgument,
         cat(call.op, ": input has R = ", rows, " rows; expected at most 2^31 - 1"));
  }
  ExpertProjection p;
  p.rows = rows;
  p.experts = weights.size(0);
  p.n = weights.size(1);
  p.k = k;
  p.expert_start = o.expert_start;
  p.dtype = input.dtype();
  p.path = projection_path(call, weights, o.forward);
  if (o.backward == GroupedStrategy::TensorCore) projection_path(call, weights, o.backward);
  p.x = common::dense_in(call, input);
  p.ids = static_cast<const uint32_t*>(common::dense_in(call, ids));
  p.weights = common::dense_in(call, weights);
  ExpertProjectionForward f;
  f.output = call.empty({rows, p.n}, input.dtype());
  p.y = f.output.data();
  run_backend(call, p, RUDNN_BACKENDS(moe, expert_projection));
  f.state.input_ = input;
  f.state.ids_ = ids;
  f.state.weights_ = weights;
  f.state.options_ = o;
  return f;
}

ExpertProjectionGradients Internal::projection_backward(const ExpertProjectionState& st,
                                                        const Tensor& grad,
                                                        const ExpertProjectionSelection& which,
                                                        const Stream& stream) {
  OpCall call("expert_projection_backward", "grad", grad, stream);
  if (!st.input_.defined()) {
    fail(ErrorCode::InvalidArgument,
         cat(call.op, ": the state is empty; expected one made by expert_projection_forward"));
  }
  const Tensor& input = st.input_;
  const Tensor& weights = st.weights_;
  const int64_t rows = input.size(0);
  common::require_defined(call, "grad", grad);
  if (grad.dtype() != input.dtype()) {
    fail(ErrorCode::DTypeMismatch,
         cat(call.op, ": grad has dtype ", dtype_name(grad.dtype()),
             "; expected the output's dtype ", dtype_name(input.dtype())));
  }
  common::require_device(call, "the state", input);
  common::require_shape(call, "grad", grad, {rows, weights.size(1)}, "[R, N]");
  ExpertProjection p;
  p.rows = rows;
  p.experts = weights.size(0);
  p.n = weights.size(1);
  p.k = input.size(1);
  p.expert_start = st.options_.expert_start;
  p.dtype = input.dtype();
  p.path = projection_path(call, weights, st.options_.backward);
  p.x = common::dense_in(call, input);
  p.ids = static_cast<const uint32_t*>(common::dense_in(call, st.ids_));
  p.weights = common::dense_in(call, weights);
  p.dy = common::dense_in(call, grad);
  ExpertProjectionGradients g;
  if (which.input) {
    g.input = call.empty(input.shape(), input.dtype());
    p.dx = g.input.data();
  }
  if (which.weights) {
    g.weights = call.empty(weights.shape(), DType::f32);
    p.dweights = static_cast<float*>(g.weights.data());
  }
  if (p.dx || p.dweights) run_backend(call, p, RUDNN_BACKENDS(moe, expert_projection));
  return g;
}

ExpertProjectionForward expert_projection_forward(const Tensor& input, const Tensor& global_ids,
                                                  const Tensor& weights,
                                                  const ExpertProjectionOptions& options,
                                                  const Stream& stream) {
  return Internal::projection_forward(input, global_ids, weights, options, stream);
}

ExpertProjectionGradients expert_projection_backward(const ExpertProjectionState& state,
                                                     const Tensor& grad,
                                                     const ExpertProjectionSelection& selection,
                                                     const Stream& stream) {
  return Internal::projection_backward(state, grad, selection, stream);
}

// ===========================================================================================
// The one-call contract
// ===========================================================================================

namespace {

RoutingPlan select(const char* op, const Tensor& logits, const Tensor& bias, const MoeOptions& o,
                   const Stream& stream) {
  if (o.selection.kind == MoeSelection::Kind::Softmax) {
    if (bias.defined()) {
      fail(ErrorCode::InvalidArgument,
           cat(op,
               ": bias is given to a softmax selection; expected none (a correction bias "
               "belongs to the SigmoidGrouped selection)"));
    }
    return route(logits, o.selection.softmax, stream);
  }
  return route_sigmoid_grouped(logits, bias, o.selection.grouped, stream);
}

struct Branch {
  RoutingPlan selection;
  std::optional<RouterTrainingPlan> training;
  DispatchedTokens tokens;
  ExpertTrainingForward experts;
  Tensor output;
};

Branch run_branch(const char* op, const Tensor& input, const Tensor& logits, const Tensor& bias,
                  const Tensor& gate, const Tensor& up, const Tensor& down, const MoeOptions& o,
                  bool keep_caches, const Stream& stream) {
  const SwiGluExperts experts(gate, up, down);
  Branch b;
  b.selection = select(op, logits, bias, o, stream);
  b.training.emplace(b.selection, logits, o.weights, stream);
  b.tokens = b.training->routing().dispatch(input, stream);
  if (keep_caches) {
    b.experts = experts.forward_dispatched_training(b.tokens, o.forward, stream);
  } else {  // the same bits, without the caches' memory
    b.experts.output = experts.forward_dispatched_with_strategy(b.tokens, o.forward, stream);
  }
  b.output = b.tokens.combine(b.experts.output, stream);
  return b;
}

}  // namespace

MoeForward moe_forward(const Tensor& input, const Tensor& logits, const Tensor& bias,
                       const Tensor& gate, const Tensor& up, const Tensor& down,
                       const MoeOptions& options, const Stream& stream) {
  return moe_forward_selected(input, logits, bias, gate, up, down, options, {}, stream);
}

MoeForward moe_forward_selected(const Tensor& input, const Tensor& logits, const Tensor& bias,
                                const Tensor& gate, const Tensor& up, const Tensor& down,
                                const MoeOptions& options, const MoeGradientSelection& selection,
                                const Stream& stream) {
  // Without expert or input gradients no caches are made: the logits gradient needs only
  // the expert output.
  const bool keep = selection.experts_or_input();
  Branch b = run_branch("moe_forward", input, logits, bias, gate, up, down, options, keep, stream);
  MoeForward f;
  f.output = b.output;
  Internal::fill(Internal::state_of(f), std::move(b.selection), std::move(*b.training),
                 std::move(b.tokens), b.experts.output,
                 keep ? b.experts.cache : ExpertTrainingCache{}, keep, options);
  return f;
}

Tensor moe_inference(const Tensor& input, const Tensor& logits, const Tensor& bias,
                     const Tensor& gate, const Tensor& up, const Tensor& down,
                     const MoeOptions& options, const Stream& stream) {
  const SwiGluExperts experts(gate, up, down);
  const RoutingPlan selection = select("moe_inference", logits, bias, options, stream);
  const RouterTrainingPlan weights(selection, logits, options.weights, stream);
  return experts_after_routing("moe_inference", experts, input, weights.routing(), options.forward,
                               stream);
}

Tensor moe_route_indices(const MoeState& state) { return Internal::indices(state); }

MoeGradients Internal::backward(const MoeState& st, const Tensor& grad_output,
                                const MoeGradientSelection& which, const Stream& stream) {
  const char* op = "moe_backward";
  check(st, op);
  const bool expert_side = which.experts_or_input();
  if (expert_side && !st.has_caches_) {
    fail(ErrorCode::InvalidArgument,
         cat(op,
             ": input or expert-weight gradients were requested, but the forward kept no "
             "expert caches (moe_forward_selected without them); expected only logits"));
  }
  MoeGradients g;
  if (!expert_side && !which.logits) return g;
  const CombineGradients cg = st.tokens_.combine_backward_with_strategy(
      st.expert_out_, grad_output, st.options_.combine_backward, stream);
  if (expert_side) {
    const ExpertGradients eg = st.cache_.backward_selected(
        cg.dexpert, {which.input, which.gate, which.up, which.down}, st.options_.backward, stream);
    if (which.input) g.input = st.tokens_.dispatch_backward(eg.dinput, stream);
    g.gate = eg.dgate;
    g.up = eg.dup;
    g.down = eg.ddown;
  }
  if (which.logits) g.logits = st.training_->backward(cg.dweights, stream);
  return g;
}

MoeGradients moe_backward(const MoeState& state, const Tensor& grad_output, const Stream& stream) {
  return Internal::backward(state, grad_output, {}, stream);
}

MoeGradients moe_backward_selected(const MoeState& state, const Tensor& grad_output,
                                   const MoeGradientSelection& selection, const Stream& stream) {
  return Internal::backward(state, grad_output, selection, stream);
}

}  // namespace rudnn::moe
