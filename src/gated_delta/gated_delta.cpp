// Gated delta rule entry points: the family's argument rules, then the backend: the float64
// reference on the CPU, the recurrence kernel (gated_delta/cuda) on a CUDA device.
#include "rudnn/gated_delta.h"

#include <cmath>
#include <cstdint>
#include <utility>
#include <vector>

#include "common/op_call.h"
#include "common/views.h"
#include "gated_delta/problem.h"
#include "gated_delta/reference.h"
#if RUDNN_WITH_CUDA
#include "gated_delta/cuda/launch.h"
#endif

namespace rudnn {

namespace {

using common::OpCall;
using detail::cat;
using detail::fail;
using Dims = gdn::reference::Dims;

// ---- The family's rules ---------------------------------------------------------------------

void require_rank(const OpCall& call, const char* name, const Tensor& t, int64_t rank,
                  const char* layout) {
  if (t.dim() != rank) {
    fail(ErrorCode::ShapeMismatch,
         cat(call.op, ": ", name, " has shape ", shape_str(t.shape()), "; expected ", layout));
  }
}

void require_same_dtype(const OpCall& call, const char* name, const Tensor& t, const char* ref_name,
                        const Tensor& ref) {
  if (t.dtype() != ref.dtype()) {
    fail(ErrorCode::DTypeMismatch,
         cat(call.op, ": ", name, " has dtype ", dtype_name(t.dtype()), "; expected ", ref_name,
             "'s dtype ", dtype_name(ref.dtype())));
  }
}

void require_nonempty_axis(const OpCall& call, const char* name, const Tensor& t, int64_t axis,
                           const char* what) {
  if (t.shape()[axis] < 1) {
    fail(ErrorCode::InvalidArgument, cat(call.op, ": ", name, " has shape ", shape_str(t.shape()),
                                         "; expected ", what, " >= 1"));
  }
}

// Spec 003's q, k, v, g, beta: [B,T,Hk,Dk] twice, [B,T,Hv,Dv], [B,T,Hv] twice.
Dims check_bthd_inputs(const OpCall& call, const Tensor& q, const Tensor& k, const Tensor& v,
                       const Tensor& g, const Tensor& beta) {
  for (auto [name, t] : {std::pair<const char*, const Tensor*>{"q", &q},
                         {"k", &k},
                         {"v", &v},
                         {"g", &g},
                         {"beta", &beta}}) {
    common::require_float(call, name, *t);
  }
  require_rank(call, "q", q, 4, "[B, T, Hk, Dk]");
  require_nonempty_axis(call, "q", q, 2, "Hk");
  require_nonempty_axis(call, "q", q, 3, "Dk");
  common::require_shape(call, "k", k, q.shape(), "q's shape [B, T, Hk, Dk]");
  require_same_dtype(call, "k", k, "q", q);
  require_rank(call, "v", v, 4, "[B, T, Hv, Dv]");
  require_same_dtype(call, "v", v, "q", q);
  Dims d;
  d.batch = q.shape()[0];
  d.steps = q.shape()[1];
  d.key_heads = q.shape()[2];
  d.key_dim = q.shape()[3];
  if (v.shape()[0] != d.batch || v.shape()[1] != d.steps) {
    fail(ErrorCode::ShapeMismatch,
         cat(call.op, ": v has shape ", shape_str(v.shape()),
             "; expected [B, T, Hv, Dv] with B = ", d.batch, ", T = ", d.steps, " (q's)"));
  }
  require_nonempty_axis(call, "v", v, 2, "Hv");
  require_nonempty_axis(call, "v", v, 3, "Dv");
  d.value_heads = v.shape()[2];
  d.value_dim = v.shape()[3];
  if (d.value_heads % d.key_heads != 0) {
    fail(ErrorCode::InvalidArgument,
         cat(call.op, ": v has Hv = ", d.value_heads,
             " value heads; expected a multiple of q's Hk = ", d.key_heads));
  }
  const Shape gate_shape{d.batch, d.steps, d.value_heads};
  common::require_shape(call, "g", g, gate_shape, "[B, T, Hv]");
  common::require_shape(call, "beta", beta, gate_shape, "[B, T, Hv]");
  return d;
}

// ---- The CPU backend: the float64 reference over dense host copies ----------------------------

std::vector<double> host_doubles(const Tensor& t) {
  const Tensor c = t.contiguous();
  std::vector<double> out(static_cast<size_t>(c.numel()));
  for (size_t i = 0; i < out.size(); ++i) {
    switch (c.dtype()) {
      case DType::f32:
        out[i] = c.data_as<float>()[i];
        break;
      case DType::f16:
        out[i] = static_cast<float>(c.data_as<half>()[i]);
        break;
      case DType::bf16:
        out[i] = static_cast<float>(c.data_as<bfloat16>()[i]);
        break;
      case DType::f64:
        out[i] = c.data_as<double>()[i];
        break;
      default:
        break;  // validated away
    }
  }
  return out;
}

// Stores `values` (dense, row-major) into the dense host tensor `t`, rounded once to its
// dtype (through FP32 for the 16-bit types).
void store_doubles(const Tensor& t, const std::vector<double>& values, size_t offset = 0) {
  for (size_t i = 0; i < values.size(); ++i) {
    const size_t j = offset + i;
    switch (t.dtype()) {
      case DType::f32:
        t.data_as<float>()[j] = static_cast<float>(values[i]);
        break;
      case DType::f16:
        t.data_as<half>()[j] = half(static_cast<float>(values[i]));
        break;
      case DType::bf16:
        t.data_as<bfloat16>()[j] = bfloat16(static_cast<float>(values[i]));
        break;
      case DType::f64:
        t.data_as<double>()[j] = values[i];
        break;
      default:
        break;
    }
  }
}

// ---- The CUDA backend --------------------------------------------------------------------------

// The GPU kernel keeps a lane's share of a state row in registers: Dk up to 256.
void require_gpu_key_dim(const OpCall& call, int64_t key_dim) {
  constexpr int64_t kMaxKeyDim = 256;
  if (key_dim > kMaxKeyDim) {
    fail(ErrorCode::Unsupported,
         cat(call.op, ": key dim Dk = ", key_dim,
             " is not supported on the GPU yet; expected Dk <= ", kMaxKeyDim));
  }
}

void run_gpu(const OpCall& call, const gdn::Recurrence& p) {
#if RUDNN_WITH_CUDA
  gdn::cuda::recurrence(p, call.stream);
#else
  fail(ErrorCode::Unsupported, cat(call.op, ": ruDNN was built without CUDA"));
#endif
}

// Spec 003's dense [B,T,H,D] operands.
gdn::Recurrence bthd_problem(OpCall& call, const Dims& d, const Tensor& q, const Tensor& k,
                             const Tensor& v, const Tensor& g, const Tensor& beta) {
  gdn::Recurrence p;
  p.batch = d.batch;
  p.steps = d.steps;
  p.key_heads = d.key_heads;
  p.value_heads = d.value_heads;
  p.key_dim = d.key_dim;
  p.value_dim = d.value_dim;
  p.dtype = q.dtype();
  p.q = common::dense_in(call, q);
  p.k = common::dense_in(call, k);
  p.v = common::dense_in(call, v);
  p.qk_h = d.key_dim;
  p.qk_t = d.key_heads * d.key_dim;
  p.qk_b = d.steps * p.qk_t;
  p.v_h = d.value_dim;
  p.v_t = d.value_heads * d.value_dim;
  p.v_b = d.steps * p.v_t;
  p.gate = common::dense_in(call, g);
  p.beta = common::dense_in(call, beta);
  p.gate_dtype = g.dtype();
  p.beta_dtype = beta.dtype();
  p.g_h = 1;
  p.g_t = d.value_heads;
  p.g_b = d.steps * d.value_heads;
  return p;
}

GatedDeltaResult gated_delta_impl(OpCall& call, const Tensor& q, const Tensor& k, const Tensor& v,
                                  const Tensor& g, const Tensor& beta, const Tensor& state,
                                  bool every_step) {
  const Dims d = check_bthd_inputs(call, q, k, v, g, beta);
  common::require_float(call, "state", state);
  common::require_shape(call, "state", state, {d.batch, d.value_heads, d.value_dim, d.key_dim},
                        "[B, Hv, Dv, Dk]");
  if (!call.device.is_cpu()) {
    require_gpu_key_dim(call, d.key_dim);
    gdn::Recurrence p = bthd_problem(call, d, q, k, v, g, beta);
    GatedDeltaResult r;
    r.y = call.empty({d.batch, d.steps, d.value_heads, d.value_dim}, q.dtype());
    r.state = call.empty(state.shape(), state.dtype());
    p.y = r.y.data();
    p.state_in = common::dense_in(call, state);
    p.state_out = r.state.data();
    p.state_dtype = state.dtype();
    if (every_step) {
      Tensor steps =
          call.empty({d.batch, d.steps, d.value_heads, d.value_dim, d.key_dim}, state.dtype());
      p.every_step = steps.data();
      run_gpu(call, p);
      // The last step's state is already in every_step; the final-state buffer is scratch.
      r.state = steps;
      return r;
    }
    run_gpu(call, p);
    return r;
  }
  std::vector<double> s = host_doubles(state), y, steps;
  gdn::reference::gated_delta_bthd(d, host_doubles(q), host_doubles(k), host_doubles(v),
                                   host_doubles(g), host_doubles(beta), s, y,
                                   every_step ? &steps : nullptr);
  GatedDeltaResult r;
  r.y = call.empty({d.batch, d.steps, d.value_heads, d.value_dim}, q.dtype());
  store_doubles(r.y, y);
  if (every_step) {
    r.state = call.empty({d.batch, d.steps, d.value_heads, d.value_dim, d.key_dim}, state.dtype());
    store_doubles(r.state, steps);
  } else {
    r.state = call.empty(state.shape(), state.dtype());
    store_doubles(r.state, s);
  }
  return r;
}

}  // namespace

GatedDeltaResult gated_delta(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g,
                             const Tensor& beta, const Tensor& state, const Stream& stream) {
  OpCall call("gated_delta", "q", q, stream);
  return gated_delta_impl(call, q, k, v, g, beta, state, false);
}

GatedDeltaResult gated_delta_steps(const Tensor& q, const Tensor& k, const Tensor& v,
                                   const Tensor& g, const Tensor& beta, const Tensor& state,
                                   const Stream& stream) {
  OpCall call("gated_delta_steps", "q", q, stream);
  return gated_delta_impl(call, q, k, v, g, beta, state, true);
}

Tensor gated_delta_slots(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g,
                         const Tensor& beta, const Tensor& pool, const Tensor& slots,
                         const Stream& stream) {
  OpCall call("gated_delta_slots", "q", q, stream);
  const Dims d = check_bthd_inputs(call, q, k, v, g, beta);
  common::require_float(call, "pool", pool);
  require_rank(call, "pool", pool, 4, "[slots, Hv, Dv, Dk]");
  const int64_t pool_slots = pool.shape()[0];
  common::require_shape(call, "pool", pool, {pool_slots, d.value_heads, d.value_dim, d.key_dim},
                        "[slots, Hv, Dv, Dk]");
  common::require_dtype(call, "slots", slots, {DType::i32, DType::i64});
  common::require_shape(call, "slots", slots, {d.batch}, "[B]");
  // In place: the pool must be one dense block so that each slot's state is a dense row.
  if (!pool.is_contiguous()) {
    fail(ErrorCode::InvalidArgument,
         cat(call.op,
             ": pool is not contiguous; expected a contiguous pool (it is updated in "
             "place)"));
  }
  common::require_no_overlap(
      call, "pool", pool,
      {{"q", &q}, {"k", &k}, {"v", &v}, {"g", &g}, {"beta", &beta}, {"slots", &slots}});
  std::vector<int64_t> ids(static_cast<size_t>(d.batch));
  if (slots.device().is_cpu()) {
    const Tensor c = slots.contiguous();
    std::vector<bool> seen(static_cast<size_t>(pool_slots), false);
    for (int64_t b = 0; b < d.batch; ++b) {
      const int64_t id =
          slots.dtype() == DType::i32 ? c.data_as<int32_t>()[b] : c.data_as<int64_t>()[b];
      if (id < 0 || id >= pool_slots) {
        fail(ErrorCode::InvalidArgument, cat(call.op, ": slots[", b, "] = ", id,
                                             "; expected a slot id in [0, ", pool_slots, ")"));
      }
      if (seen[static_cast<size_t>(id)]) {
        fail(ErrorCode::InvalidArgument,
             cat(call.op, ": slots[", b, "] = ", id, " is repeated; expected distinct slot ids"));
      }
      seen[static_cast<size_t>(id)] = true;
      ids[static_cast<size_t>(b)] = id;
    }
  }
  if (!call.device.is_cpu()) {
    require_gpu_key_dim(call, d.key_dim);
    gdn::Recurrence p = bthd_problem(call, d, q, k, v, g, beta);
    Tensor y = call.empty({d.batch, d.steps, d.value_heads, d.value_dim}, q.dtype());
    p.y = y.data();
    p.state_in = pool.data();
    p.state_out = pool.data();
    p.state_dtype = pool.dtype();
    p.slots = common::dense_in(call, slots);
    p.slot_dtype = slots.dtype();
    run_gpu(call, p);
    return y;
  }

  // One sequence at a time through the reference: each sequence's result is, by construction,
  // gated_delta's on its state alone.
  const int64_t state_elems = d.value_heads * d.value_dim * d.key_dim;
  const std::vector<double> qd = host_doubles(q), kd = host_doubles(k), vd = host_doubles(v),
                            gd = host_doubles(g), bd = host_doubles(beta);
  const std::vector<double> pd = host_doubles(pool);
  Tensor y = call.empty({d.batch, d.steps, d.value_heads, d.value_dim}, q.dtype());
  Dims one = d;
  one.batch = 1;
  const int64_t qk_per = d.steps * d.key_heads * d.key_dim;
  const int64_t v_per = d.steps * d.value_heads * d.value_dim;
  const int64_t gate_per = d.steps * d.value_heads;
  auto part = [](const std::vector<double>& all, int64_t b, int64_t n) {
    return std::vector<double>(all.begin() + b * n, all.begin() + (b + 1) * n);
  };
  std::vector<std::vector<double>> finals(static_cast<size_t>(d.batch));
  for (int64_t b = 0; b < d.batch; ++b) {
    const int64_t slot = ids[static_cast<size_t>(b)];
    std::vector<double> s = part(pd, slot, state_elems), yb;
    gdn::reference::gated_delta_bthd(one, part(qd, b, qk_per), part(kd, b, qk_per),
                                     part(vd, b, v_per), part(gd, b, gate_per),
                                     part(bd, b, gate_per), s, yb);
    store_doubles(y, yb, static_cast<size_t>(b * v_per));
    finals[static_cast<size_t>(b)] = std::move(s);
  }
  // Written back only once every sequence has read its state (the ids are distinct anyway).
  for (int64_t b = 0; b < d.batch; ++b) {
    store_doubles(pool, finals[static_cast<size_t>(b)],
                  static_cast<size_t>(ids[static_cast<size_t>(b)] * state_elems));
  }
  return y;
}

GatedDeltaOutput gated_delta_rule(const GatedDeltaInput& in, const Stream& stream) {
  OpCall call("gated_delta_rule", "query", in.query, stream);
  for (auto [name, t] : {std::pair<const char*, const Tensor*>{"query", &in.query},
                         {"key", &in.key},
                         {"value", &in.value},
                         {"beta", &in.beta}}) {
    common::require_float(call, name, *t);
  }
  common::require_dtype(call, "log_decay", in.log_decay, {DType::f32});
  common::require_dtype(call, "initial_state", in.initial_state, {DType::f32});
  require_rank(call, "query", in.query, 4, "[B, H, T, K]");
  require_nonempty_axis(call, "query", in.query, 1, "H");
  require_nonempty_axis(call, "query", in.query, 3, "K");
  common::require_shape(call, "key", in.key, in.query.shape(), "query's shape [B, H, T, K]");
  require_same_dtype(call, "key", in.key, "query", in.query);
  require_same_dtype(call, "value", in.value, "query", in.query);
  require_same_dtype(call, "beta", in.beta, "query", in.query);
  require_rank(call, "value", in.value, 4, "[B, H, T, V]");
  Dims d;
  d.batch = in.query.shape()[0];
  d.key_heads = d.value_heads = in.query.shape()[1];
  d.steps = in.query.shape()[2];
  d.key_dim = in.query.shape()[3];
  const Shape& vs = in.value.shape();
  if (vs[0] != d.batch || vs[1] != d.key_heads || vs[2] != d.steps) {
    fail(ErrorCode::ShapeMismatch, cat(call.op, ": value has shape ", shape_str(vs),
                                       "; expected [B, H, T, V] with B = ", d.batch,
                                       ", H = ", d.key_heads, ", T = ", d.steps, " (query's)"));
  }
  require_nonempty_axis(call, "value", in.value, 3, "V");
  d.value_dim = vs[3];
  common::require_shape(call, "beta", in.beta, {d.batch, d.key_heads, d.steps}, "[B, H, T]");
  common::require_shape(call, "log_decay", in.log_decay, {d.batch, d.key_heads, d.steps},
                        "[B, H, T]");
  common::require_shape(call, "initial_state", in.initial_state,
                        {d.batch, d.key_heads, d.key_dim, d.value_dim}, "[B, H, K, V]");
  common::require_finite(call, "query_scale", in.query_scale);
  if (!call.device.is_cpu()) {
    require_gpu_key_dim(call, d.key_dim);
    gdn::Recurrence p;
    p.batch = d.batch;
    p.steps = d.steps;
    p.key_heads = p.value_heads = d.key_heads;
    p.key_dim = d.key_dim;
    p.value_dim = d.value_dim;
    p.dtype = in.query.dtype();
    p.q = common::dense_in(call, in.query);
    p.k = common::dense_in(call, in.key);
    p.v = common::dense_in(call, in.value);
    p.qk_t = d.key_dim;
    p.qk_h = d.steps * d.key_dim;
    p.qk_b = d.key_heads * p.qk_h;
    p.v_t = d.value_dim;
    p.v_h = d.steps * d.value_dim;
    p.v_b = d.key_heads * p.v_h;
    p.gate = common::dense_in(call, in.log_decay);
    p.gate_dtype = DType::f32;
    p.log_gate = true;
    p.beta = common::dense_in(call, in.beta);
    p.beta_dtype = in.beta.dtype();
    p.g_t = 1;
    p.g_h = d.steps;
    p.g_b = d.key_heads * d.steps;
    p.scale = in.query_scale;
    GatedDeltaOutput out;
    out.output = call.empty({d.batch, d.key_heads, d.steps, d.value_dim}, in.query.dtype());
    out.final_state = call.empty(in.initial_state.shape(), DType::f32);
    p.y = out.output.data();
    p.state_in = common::dense_in(call, in.initial_state);
    p.state_out = out.final_state.data();
    p.state_dtype = DType::f32;
    p.state_transposed = true;
    run_gpu(call, p);
    return out;
  }
  std::vector<double> s = host_doubles(in.initial_state), y;
  gdn::reference::gated_delta_bhtd(d, host_doubles(in.query), host_doubles(in.key),
                                   host_doubles(in.value), host_doubles(in.beta),
                                   host_doubles(in.log_decay), in.query_scale, s, y);
  GatedDeltaOutput out;
  out.output = call.empty({d.batch, d.key_heads, d.steps, d.value_dim}, in.query.dtype());
  store_doubles(out.output, y);
  out.final_state = call.empty(in.initial_state.shape(), DType::f32);
  store_doubles(out.final_state, s);
  return out;
}

}  // namespace rudnn
