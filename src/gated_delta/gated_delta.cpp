// Gated delta rule entry points: the family's argument rules, then the backend: the float64
// reference on the CPU, the recurrence kernel (gated_delta/cuda) on a CUDA device.
#include "rudnn/gated_delta.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <utility>
#include <vector>

#include "common/op_call.h"
#include "common/views.h"
#include "gated_delta/problem.h"
#include "gated_delta/reference.h"
#if RUDNN_WITH_CUDA
#include "cuda/device_info.h"
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

// ---- Variable-length packed sequences ---------------------------------------------------------

// cu_seqlens [N + 1] i32 on the call's device, for inputs of batch 1 whose T axis packs N
// sequences. On the host its values are checked (0 first, non-decreasing, T last) and
// returned; on a device they are never read here (that would synchronise): the kernel clamps
// each sequence's range into [0, T], so bad offsets give wrong results, never a stray access.
gdn::reference::SeqLens check_cu_seqlens(const OpCall& call, const Tensor& cu, int64_t sequences,
                                         int64_t batch, int64_t steps, const char* layout) {
  common::require_dtype(call, "cu_seqlens", cu, {DType::i32});
  common::require_shape(call, "cu_seqlens", cu, {sequences + 1},
                        "[N + 1], N the number of states");
  if (batch != 1) {
    fail(ErrorCode::ShapeMismatch,
         cat(call.op, ": ", layout, " has B = ", batch,
             " with cu_seqlens; expected B = 1 (the sequences packed along T)"));
  }
  gdn::reference::SeqLens out;
  if (!cu.device().is_cpu()) return out;
  const Tensor c = cu.contiguous();
  out.resize(static_cast<size_t>(sequences + 1));
  for (int64_t i = 0; i <= sequences; ++i) out[size_t(i)] = c.data_as<int32_t>()[i];
  if (out[0] != 0) {
    fail(ErrorCode::InvalidArgument,
         cat(call.op, ": cu_seqlens[0] = ", out[0], "; expected 0"));
  }
  for (int64_t i = 1; i <= sequences; ++i) {
    if (out[size_t(i)] < out[size_t(i - 1)]) {
      fail(ErrorCode::InvalidArgument,
           cat(call.op, ": cu_seqlens[", i, "] = ", out[size_t(i)], " < cu_seqlens[", i - 1,
               "] = ", out[size_t(i - 1)], "; expected non-decreasing offsets"));
    }
  }
  if (out.back() != steps) {
    fail(ErrorCode::InvalidArgument, cat(call.op, ": cu_seqlens[", sequences, "] = ", out.back(),
                                         "; expected T = ", steps, " (the packed length)"));
  }
  return out;
}

// The number of states N of a [N, ...] state or pool of the given rank.
int64_t leading(const OpCall& call, const char* name, const Tensor& t, int64_t rank,
                const char* layout) {
  common::require_float(call, name, t);
  require_rank(call, name, t, rank, layout);
  return t.shape()[0];
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

// A recurrence problem of d's sizes (batch: the sequences) in q's dtype, its operands unset.
gdn::Recurrence sized_problem(const Dims& d, DType dtype) {
  gdn::Recurrence p;
  p.batch = d.batch;
  p.steps = d.steps;
  p.key_heads = d.key_heads;
  p.value_heads = d.value_heads;
  p.key_dim = d.key_dim;
  p.value_dim = d.value_dim;
  p.dtype = dtype;
  return p;
}

// Spec 003's dense [B,T,H,D] operands.
gdn::Recurrence bthd_problem(OpCall& call, const Dims& d, const Tensor& q, const Tensor& k,
                             const Tensor& v, const Tensor& g, const Tensor& beta) {
  gdn::Recurrence p = sized_problem(d, q.dtype());
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

// Spec 000's [B,H,T,D] operands (H = Hk = Hv), log decay, transposed state.
gdn::Recurrence bhtd_problem(OpCall& call, const Dims& d, const GatedDeltaInput& in) {
  gdn::Recurrence p = sized_problem(d, in.query.dtype());
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
  p.state_in = common::dense_in(call, in.initial_state);
  p.state_dtype = DType::f32;
  p.state_transposed = true;
  return p;
}

// The batch (or, with cu_seqlens, the sequence count N taken from the state) and the checked
// offsets of a call; `d.batch` becomes N.
gdn::reference::SeqLens resolve_sequences(const OpCall& call, Dims& d, const Tensor& cu,
                                          int64_t states, const char* layout) {
  if (!cu.defined()) return {};
  gdn::reference::SeqLens seqs = check_cu_seqlens(call, cu, states, d.batch, d.steps, layout);
  d.batch = states;
  return seqs;
}

// The outputs of one call: allocated (the functional forms) or given (the _into forms, each
// checked for its shape, dtype, device and a contiguous layout, then for overlaps), all
// resolved before anything is written.
class Outputs {
 public:
  Outputs(OpCall& call, const std::vector<Tensor>* given) : call_(call), given_(given) {}

  Tensor take(const char* name, const Shape& shape, DType dtype) {
    if (given_ == nullptr) return call_.empty(shape, dtype);
    const Tensor& t = (*given_)[taken_.size()];
    common::dense_out(call_, name, t, shape, dtype);
    taken_.push_back({name, t});
    return t;
  }

  // No output may share memory with an input or with another output.
  void check_overlaps(std::initializer_list<std::pair<const char*, const Tensor*>> inputs) const {
    for (size_t i = 0; i < taken_.size(); ++i) {
      for (const auto& input : inputs) {
        common::require_no_overlap(call_, taken_[i].first, taken_[i].second, {input});
      }
      for (size_t j = i + 1; j < taken_.size(); ++j) {
        common::require_no_overlap(call_, taken_[i].first, taken_[i].second,
                                   {{taken_[j].first, &taken_[j].second}});
      }
    }
  }

 private:
  OpCall& call_;
  const std::vector<Tensor>* given_;
  std::vector<std::pair<const char*, Tensor>> taken_;
};

void check_chunk_size(const OpCall& call, int64_t chunk_size);
void require_gpu_chunked(const OpCall& call, const Dims& d, int64_t chunk_size, DType dtype);
void run_gpu_chunked(OpCall& call, const gdn::Recurrence& r, int64_t chunk_size);

// What the GPU kernels of spec 003's forms do not take, before any output is taken: the
// chunked kernels' limits, or the recurrence's key dim.
void require_gpu_kernels(const OpCall& call, const Dims& d, bool chunked, int64_t chunk_size,
                         DType dtype) {
  if (chunked)
    require_gpu_chunked(call, d, chunk_size, dtype);
  else
    require_gpu_key_dim(call, d.key_dim);
}

// chunk_size 0: the recurrence (gated_delta*); positive: the chunked algorithm
// (chunk_gated_delta*), chunk_size validated once the shapes are.
GatedDeltaResult gated_delta_impl(OpCall& call, Outputs& outs, const Tensor& q, const Tensor& k,
                                  const Tensor& v, const Tensor& g, const Tensor& beta,
                                  const Tensor& state, bool every_step, const Tensor& cu,
                                  int64_t chunk_size = 0, bool chunked = false) {
  Dims d = check_bthd_inputs(call, q, k, v, g, beta);
  const int64_t entries = d.batch;
  const int64_t states = leading(call, "state", state, 4, "[B, Hv, Dv, Dk]");
  const gdn::reference::SeqLens seqs =
      resolve_sequences(call, d, cu, states, "q [B, T, Hk, Dk]");
  common::require_shape(call, "state", state, {d.batch, d.value_heads, d.value_dim, d.key_dim},
                        cu.defined() ? "[N, Hv, Dv, Dk]" : "[B, Hv, Dv, Dk]");
  if (chunked) check_chunk_size(call, chunk_size);
  if (!call.device.is_cpu()) require_gpu_kernels(call, d, chunked, chunk_size, q.dtype());
  GatedDeltaResult r;
  r.y = outs.take("y_out", {entries, d.steps, d.value_heads, d.value_dim}, q.dtype());
  r.state = every_step ? outs.take("states_out",
                                   {entries, d.steps, d.value_heads, d.value_dim, d.key_dim},
                                   state.dtype())
                       : outs.take("state_out", state.shape(), state.dtype());
  outs.check_overlaps({{"q", &q},
                       {"k", &k},
                       {"v", &v},
                       {"g", &g},
                       {"beta", &beta},
                       {"state", &state},
                       {"cu_seqlens", &cu}});
  if (chunked && !call.device.is_cpu()) {
    gdn::Recurrence p = bthd_problem(call, d, q, k, v, g, beta);
    p.y = r.y.data();
    p.state_in = common::dense_in(call, state);
    p.state_dtype = state.dtype();
    p.state_out = r.state.data();
    if (cu.defined()) p.cu_seqlens = static_cast<const int32_t*>(cu.data());
    run_gpu_chunked(call, p, chunk_size);
    return r;
  }
  if (chunked) {
    std::vector<double> s = host_doubles(state), y;
    gdn::reference::gated_delta_bthd_chunked(d, host_doubles(q), host_doubles(k),
                                             host_doubles(v), host_doubles(g),
                                             host_doubles(beta), chunk_size, s, y, seqs);
    store_doubles(r.y, y);
    store_doubles(r.state, s);
    return r;
  }
  if (!call.device.is_cpu()) {
    gdn::Recurrence p = bthd_problem(call, d, q, k, v, g, beta);
    p.y = r.y.data();
    p.state_in = common::dense_in(call, state);
    p.state_dtype = state.dtype();
    // gated_delta_steps: the last step's state is in every_step; no final state is written.
    if (every_step)
      p.every_step = r.state.data();
    else
      p.state_out = r.state.data();
    if (cu.defined()) p.cu_seqlens = static_cast<const int32_t*>(cu.data());
    run_gpu(call, p);
    return r;
  }
  std::vector<double> s = host_doubles(state), y, all;
  gdn::reference::gated_delta_bthd(d, host_doubles(q), host_doubles(k), host_doubles(v),
                                   host_doubles(g), host_doubles(beta), s, y,
                                   every_step ? &all : nullptr, seqs);
  store_doubles(r.y, y);
  store_doubles(r.state, every_step ? all : s);
  return r;
}

Tensor gated_delta_slots_impl(OpCall& call, Outputs& outs, const Tensor& q, const Tensor& k,
                              const Tensor& v, const Tensor& g, const Tensor& beta,
                              const Tensor& pool, const Tensor& slots, const Tensor& cu,
                              int64_t chunk_size = 0, bool chunked = false) {
  Dims d = check_bthd_inputs(call, q, k, v, g, beta);
  const int64_t entries = d.batch;
  const int64_t pool_slots = leading(call, "pool", pool, 4, "[slots, Hv, Dv, Dk]");
  common::require_shape(call, "pool", pool, {pool_slots, d.value_heads, d.value_dim, d.key_dim},
                        "[slots, Hv, Dv, Dk]");
  common::require_dtype(call, "slots", slots, {DType::i32, DType::i64});
  require_rank(call, "slots", slots, 1, cu.defined() ? "[N]" : "[B]");
  const gdn::reference::SeqLens seqs =
      resolve_sequences(call, d, cu, slots.shape()[0], "q [B, T, Hk, Dk]");
  common::require_shape(call, "slots", slots, {d.batch}, cu.defined() ? "[N]" : "[B]");
  // In place: the pool must be one dense block so that each slot's state is a dense row.
  if (!pool.is_contiguous()) {
    fail(ErrorCode::InvalidArgument,
         cat(call.op,
             ": pool is not contiguous; expected a contiguous pool (it is updated in "
             "place)"));
  }
  common::require_no_overlap(call, "pool", pool,
                             {{"q", &q},
                              {"k", &k},
                              {"v", &v},
                              {"g", &g},
                              {"beta", &beta},
                              {"slots", &slots},
                              {"cu_seqlens", &cu}});
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
  if (chunked) check_chunk_size(call, chunk_size);
  if (!call.device.is_cpu()) require_gpu_kernels(call, d, chunked, chunk_size, q.dtype());
  Tensor y = outs.take("y_out", {entries, d.steps, d.value_heads, d.value_dim}, q.dtype());
  outs.check_overlaps({{"q", &q},
                       {"k", &k},
                       {"v", &v},
                       {"g", &g},
                       {"beta", &beta},
                       {"pool", &pool},
                       {"slots", &slots},
                       {"cu_seqlens", &cu}});
  if (!call.device.is_cpu()) {
    gdn::Recurrence p = bthd_problem(call, d, q, k, v, g, beta);
    p.y = y.data();
    p.state_in = pool.data();
    p.state_out = pool.data();
    p.state_dtype = pool.dtype();
    p.slots = common::dense_in(call, slots);
    p.slot_dtype = slots.dtype();
    p.pool_slots = pool_slots;
    if (cu.defined()) p.cu_seqlens = static_cast<const int32_t*>(cu.data());
    if (chunked)
      run_gpu_chunked(call, p, chunk_size);
    else
      run_gpu(call, p);
    return y;
  }

  // The named states gathered, run through the reference (which treats each sequence on its
  // own state), and scattered back: each sequence's result is gated_delta's on its state alone.
  const int64_t state_elems = d.value_heads * d.value_dim * d.key_dim;
  const std::vector<double> pd = host_doubles(pool);
  std::vector<double> s(static_cast<size_t>(d.batch * state_elems)), ys;
  for (int64_t b = 0; b < d.batch; ++b) {
    std::copy_n(pd.begin() + ids[size_t(b)] * state_elems, state_elems,
                s.begin() + b * state_elems);
  }
  if (chunked) {
    gdn::reference::gated_delta_bthd_chunked(d, host_doubles(q), host_doubles(k),
                                             host_doubles(v), host_doubles(g),
                                             host_doubles(beta), chunk_size, s, ys, seqs);
  } else {
    gdn::reference::gated_delta_bthd(d, host_doubles(q), host_doubles(k), host_doubles(v),
                                     host_doubles(g), host_doubles(beta), s, ys, nullptr, seqs);
  }
  store_doubles(y, ys);
  for (int64_t b = 0; b < d.batch; ++b) {
    store_doubles(pool,
                  std::vector<double>(s.begin() + b * state_elems,
                                      s.begin() + (b + 1) * state_elems),
                  static_cast<size_t>(ids[size_t(b)] * state_elems));
  }
  return y;
}

Dims check_rule_input(OpCall& call, const GatedDeltaInput& in, const Tensor& cu,
                      gdn::reference::SeqLens& seqs) {
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
  require_rank(call, "initial_state", in.initial_state, 4, "[B, H, K, V]");
  seqs = resolve_sequences(call, d, cu, in.initial_state.shape()[0], "query [B, H, T, K]");
  common::require_shape(call, "initial_state", in.initial_state,
                        {d.batch, d.key_heads, d.key_dim, d.value_dim},
                        cu.defined() ? "[N, H, K, V]" : "[B, H, K, V]");
  common::require_finite(call, "query_scale", in.query_scale);
  return d;
}


GatedDeltaOutput gated_delta_rule_impl(OpCall& call, Outputs& outs, const GatedDeltaInput& in,
                                       const Tensor& cu) {
  gdn::reference::SeqLens seqs;
  const int64_t entries = in.query.defined() && in.query.dim() == 4 ? in.query.shape()[0] : 0;
  const Dims d = check_rule_input(call, in, cu, seqs);
  if (!call.device.is_cpu()) require_gpu_key_dim(call, d.key_dim);
  GatedDeltaOutput out;
  out.output =
      outs.take("output_out", {entries, d.key_heads, d.steps, d.value_dim}, in.query.dtype());
  out.final_state = outs.take("final_state_out", in.initial_state.shape(), DType::f32);
  outs.check_overlaps({{"query", &in.query},
                       {"key", &in.key},
                       {"value", &in.value},
                       {"beta", &in.beta},
                       {"log_decay", &in.log_decay},
                       {"initial_state", &in.initial_state},
                       {"cu_seqlens", &cu}});
  if (!call.device.is_cpu()) {
    gdn::Recurrence p = bhtd_problem(call, d, in);
    p.y = out.output.data();
    p.state_out = out.final_state.data();
    if (cu.defined()) p.cu_seqlens = static_cast<const int32_t*>(cu.data());
    run_gpu(call, p);
    return out;
  }
  std::vector<double> s = host_doubles(in.initial_state), y;
  gdn::reference::gated_delta_bhtd(d, host_doubles(in.query), host_doubles(in.key),
                                   host_doubles(in.value), host_doubles(in.beta),
                                   host_doubles(in.log_decay), in.query_scale, s, y, seqs);
  store_doubles(out.output, y);
  store_doubles(out.final_state, s);
  return out;
}

// ---- The chunked prefill ----------------------------------------------------------------------

// Hopper's opt-in per-block shared memory: the limit the chunk-size rule uses on the host.
constexpr int64_t kHostSharedLimit = 227 * 1024;

// chunk_size positive, and its triangular workspace 4 (c^2 + c) bytes within the per-block
// shared-memory limit of the call's device.
void check_chunk_size(const OpCall& call, int64_t chunk_size) {
  if (chunk_size < 1) {
    fail(ErrorCode::InvalidArgument, cat(call.op, ": chunk_size = ", chunk_size,
                                         "; expected a positive chunk size"));
  }
  int64_t limit = kHostSharedLimit;
  const char* what = "the host's limit, Hopper's opt-in maximum";
#if RUDNN_WITH_CUDA
  if (!call.device.is_cpu()) {
    limit = int64_t(cuda::device_info(call.device).shared_bytes_per_block_optin);
    what = "the device's opt-in limit";
  }
#endif
  // Compared in floating point first: chunk_size^2 overflows int64 long before any limit.
  const double bytes = 4.0 * (double(chunk_size) * double(chunk_size) + double(chunk_size));
  if (bytes > double(limit)) {
    fail(ErrorCode::InvalidArgument,
         cat(call.op, ": chunk_size = ", chunk_size, " needs a triangular workspace of 4 x (",
             chunk_size, "^2 + ", chunk_size, ") = ", bytes,
             " bytes; expected at most the per-block shared-memory limit of ", limit, " bytes (",
             what, ")"));
  }
}

// Why the GPU chunked kernels (the forward's, or with `backward` the backward's) do not take p,
// after the contract's checks passed; empty when they do. The one list of their limits: the
// forward fails with the reason, the backward falls back to the recurrence's kernels.
std::string gpu_chunked_gap(const OpCall& call, const gdn::Chunked& p, bool backward) {
#if RUDNN_WITH_CUDA
  if (p.chunk > gdn::cuda::kMaxChunk) {
    return cat("chunk_size = ", p.chunk, " is not supported on the GPU yet; expected chunk_size <= ",
               gdn::cuda::kMaxChunk);
  }
  if (p.key_dim > gdn::cuda::kMaxChunkDim || p.value_dim > gdn::cuda::kMaxChunkDim) {
    return cat("K = ", p.key_dim, ", V = ", p.value_dim,
               " are not supported by the GPU chunked kernels yet; expected K, V <= ",
               gdn::cuda::kMaxChunkDim);
  }
  // The recurrence's backward writes the zero gradients of an empty K or V.
  if (backward && (p.key_dim == 0 || p.value_dim == 0)) return "K = 0 or V = 0";
  const int64_t need = backward ? gdn::cuda::chunked_backward_shared_bytes(p)
                                : gdn::cuda::chunked_shared_bytes(p);
  const int64_t limit = int64_t(cuda::device_info(call.device).shared_bytes_per_block_optin);
  if (need > limit) {
    return cat("chunk_size = ", p.chunk, " with K = ", p.key_dim, ", V = ", p.value_dim, " in ",
               dtype_name(p.dtype), " needs ", need,
               " bytes of shared memory per block in the GPU kernels; expected at most the "
               "device's opt-in limit of ",
               limit, " bytes (use a smaller chunk_size)");
  }
  // The kernels address a chunk's rows with 32-bit offsets (rows x step stride: D in spec
  // 000's layout, H x D in spec 003's).
  const int64_t rows = (p.chunk + 15) / 16 * 16, stride = std::max(p.qk_t, p.v_t);
  if (rows * stride > int64_t(std::numeric_limits<int32_t>::max())) {
    return cat("steps ", stride, " elements apart with chunk_size = ", p.chunk,
               " pass the GPU kernels' 32-bit offsets inside a chunk; expected ", rows, " x ",
               stride, " < 2^31");
  }
  return {};
#else
  (void)call;
  (void)p;
  (void)backward;
  return "ruDNN was built without CUDA";
#endif
}

// What the GPU forward kernels do not take, from d's sizes in q's dtype (before any output is
// taken); run_gpu_chunked checks the real strides again.
void require_gpu_chunked(const OpCall& call, const Dims& d, int64_t chunk_size, DType dtype) {
  const std::string gap = gpu_chunked_gap(call, gdn::Chunked{sized_problem(d, dtype), chunk_size},
                                          false);
  if (!gap.empty()) fail(ErrorCode::Unsupported, cat(call.op, ": ", gap));
}

// The chunked forward kernels over a recurrence problem (both forms), with their workspace
// allocated on the call's stream; Unsupported, before anything is written, where they do not
// take it.
void run_gpu_chunked(OpCall& call, const gdn::Recurrence& r, int64_t chunk_size) {
  const gdn::Chunked p{r, chunk_size};
  const std::string gap = gpu_chunked_gap(call, p, false);
  if (!gap.empty()) fail(ErrorCode::Unsupported, cat(call.op, ": ", gap));
#if RUDNN_WITH_CUDA
  const Tensor& workspace = call.keep(
      call.empty({std::max<int64_t>(gdn::cuda::chunked_workspace_bytes(p), 1)}, DType::u8));
  gdn::cuda::chunked(p, workspace.data(), call.stream);
#endif
}

GatedDeltaOutput chunk_rule_impl(OpCall& call, Outputs& outs, const GatedDeltaInput& in,
                                 int64_t chunk_size, const Tensor& cu) {
  gdn::reference::SeqLens seqs;
  const int64_t entries = in.query.defined() && in.query.dim() == 4 ? in.query.shape()[0] : 0;
  const Dims d = check_rule_input(call, in, cu, seqs);
  check_chunk_size(call, chunk_size);
  if (!call.device.is_cpu()) require_gpu_chunked(call, d, chunk_size, in.query.dtype());
  GatedDeltaOutput out;
  out.output =
      outs.take("output_out", {entries, d.key_heads, d.steps, d.value_dim}, in.query.dtype());
  out.final_state = outs.take("final_state_out", in.initial_state.shape(), DType::f32);
  outs.check_overlaps({{"query", &in.query},
                       {"key", &in.key},
                       {"value", &in.value},
                       {"beta", &in.beta},
                       {"log_decay", &in.log_decay},
                       {"initial_state", &in.initial_state},
                       {"cu_seqlens", &cu}});
  if (!call.device.is_cpu()) {
    gdn::Recurrence p = bhtd_problem(call, d, in);
    p.y = out.output.data();
    p.state_out = out.final_state.data();
    if (cu.defined()) p.cu_seqlens = static_cast<const int32_t*>(cu.data());
    run_gpu_chunked(call, p, chunk_size);
    return out;
  }
  std::vector<double> s = host_doubles(in.initial_state), y;
  gdn::reference::gated_delta_bhtd_chunked(d, host_doubles(in.query), host_doubles(in.key),
                                           host_doubles(in.value), host_doubles(in.beta),
                                           host_doubles(in.log_decay), in.query_scale,
                                           chunk_size, s, y, seqs);
  store_doubles(out.output, y);
  store_doubles(out.final_state, s);
  return out;
}

// ---- Backward ------------------------------------------------------------------------------

void run_gpu_backward(OpCall& call, gdn::RecurrenceBackward& p, const Tensor& dy,
                      const Tensor& dfinal) {
  p.dy = common::dense_in(call, dy);
  p.dy_dtype = dy.dtype();
  if (dfinal.defined()) {
    p.dfinal = common::dense_in(call, dfinal);
    p.dfinal_dtype = dfinal.dtype();
  }
#if RUDNN_WITH_CUDA
  const Tensor& workspace =
      call.keep(call.empty({gdn::cuda::backward_workspace_floats(p.f)}, DType::f32));
  p.workspace = static_cast<float*>(workspace.data());
  gdn::cuda::recurrence_backward(p, call.stream);
#else
  fail(ErrorCode::Unsupported, cat(call.op, ": ruDNN was built without CUDA"));
#endif
}

// An upstream gradient: like `ref` in shape, any floating dtype; the final-state gradient is
// optional (undefined: zero).
void require_grad(const OpCall& call, const char* name, const Tensor& t, const Shape& shape,
                  const char* layout, bool optional) {
  if (optional && !t.defined()) return;
  common::require_float(call, name, t);
  common::require_shape(call, name, t, shape, layout);
}


GatedDeltaGrads gated_delta_backward_impl(OpCall& call, Outputs& outs, const Tensor& dy,
                                          const Tensor& dstate, const Tensor& q, const Tensor& k,
                                          const Tensor& v, const Tensor& g, const Tensor& beta,
                                          const Tensor& state, const Tensor& cu) {
  Dims d = check_bthd_inputs(call, q, k, v, g, beta);
  const int64_t entries = d.batch;
  const int64_t states = leading(call, "state", state, 4, "[B, Hv, Dv, Dk]");
  const gdn::reference::SeqLens seqs =
      resolve_sequences(call, d, cu, states, "q [B, T, Hk, Dk]");
  common::require_shape(call, "state", state, {d.batch, d.value_heads, d.value_dim, d.key_dim},
                        cu.defined() ? "[N, Hv, Dv, Dk]" : "[B, Hv, Dv, Dk]");
  require_grad(call, "dy", dy, {entries, d.steps, d.value_heads, d.value_dim},
               "y's shape [B, T, Hv, Dv]", false);
  require_grad(call, "dstate", dstate, state.shape(), "the state's shape", true);
  if (!call.device.is_cpu()) require_gpu_key_dim(call, d.key_dim);
  GatedDeltaGrads out;
  out.dq = outs.take("dq_out", q.shape(), q.dtype());
  out.dk = outs.take("dk_out", k.shape(), k.dtype());
  out.dv = outs.take("dv_out", v.shape(), v.dtype());
  out.dg = outs.take("dg_out", g.shape(), g.dtype());
  out.dbeta = outs.take("dbeta_out", beta.shape(), beta.dtype());
  out.dstate = outs.take("dstate_out", state.shape(), state.dtype());
  outs.check_overlaps({{"dy", &dy},
                       {"dstate", &dstate},
                       {"q", &q},
                       {"k", &k},
                       {"v", &v},
                       {"g", &g},
                       {"beta", &beta},
                       {"state", &state},
                       {"cu_seqlens", &cu}});
  if (!call.device.is_cpu()) {
    gdn::RecurrenceBackward p;
    p.f = bthd_problem(call, d, q, k, v, g, beta);
    p.f.state_in = common::dense_in(call, state);
    p.f.state_dtype = state.dtype();
    if (cu.defined()) p.f.cu_seqlens = static_cast<const int32_t*>(cu.data());
    p.dq = out.dq.data();
    p.dk = out.dk.data();
    p.dv = out.dv.data();
    p.dgate = out.dg.data();
    p.dbeta = out.dbeta.data();
    p.dstate = out.dstate.data();
    p.dgate_dtype = g.dtype();
    p.dbeta_dtype = beta.dtype();
    p.dstate_dtype = state.dtype();
    run_gpu_backward(call, p, dy, dstate);
    return out;
  }
  const gdn::reference::Grads gr = gdn::reference::gated_delta_bthd_backward(
      d, host_doubles(q), host_doubles(k), host_doubles(v), host_doubles(g), host_doubles(beta),
      host_doubles(state), host_doubles(dy),
      dstate.defined() ? host_doubles(dstate) : std::vector<double>{}, seqs);
  store_doubles(out.dq, gr.dq);
  store_doubles(out.dk, gr.dk);
  store_doubles(out.dv, gr.dv);
  store_doubles(out.dg, gr.dgate);
  store_doubles(out.dbeta, gr.dbeta);
  store_doubles(out.dstate, gr.dstate);
  return out;
}

// No chunk_size: gated_delta_rule_backward*; one: chunk_gated_delta_rule_backward*, whose GPU
// path runs the chunked backward kernels where they take the problem and the recurrence's
// backward otherwise (the same gradients up to rounding).
GatedDeltaInputGrads gated_delta_rule_backward_impl(OpCall& call, Outputs& outs,
                                                    const Tensor& doutput,
                                                    const Tensor& dfinal_state,
                                                    const GatedDeltaInput& in, const Tensor& cu,
                                                    std::optional<int64_t> chunk_size = {}) {
  gdn::reference::SeqLens seqs;
  const int64_t entries = in.query.defined() && in.query.dim() == 4 ? in.query.shape()[0] : 0;
  const Dims d = check_rule_input(call, in, cu, seqs);
  if (chunk_size) check_chunk_size(call, *chunk_size);
  require_grad(call, "doutput", doutput, {entries, d.key_heads, d.steps, d.value_dim},
               "output's shape [B, H, T, V]", false);
  require_grad(call, "dfinal_state", dfinal_state, in.initial_state.shape(),
               "final_state's shape [B, H, K, V]", true);
  if (!call.device.is_cpu()) require_gpu_key_dim(call, d.key_dim);
  GatedDeltaInputGrads out;
  out.dquery = outs.take("dquery_out", in.query.shape(), in.query.dtype());
  out.dkey = outs.take("dkey_out", in.key.shape(), in.key.dtype());
  out.dvalue = outs.take("dvalue_out", in.value.shape(), in.value.dtype());
  out.dbeta = outs.take("dbeta_out", in.beta.shape(), in.beta.dtype());
  out.dlog_decay = outs.take("dlog_decay_out", in.log_decay.shape(), DType::f32);
  out.dinitial_state = outs.take("dinitial_state_out", in.initial_state.shape(), DType::f32);
  outs.check_overlaps({{"doutput", &doutput},
                       {"dfinal_state", &dfinal_state},
                       {"query", &in.query},
                       {"key", &in.key},
                       {"value", &in.value},
                       {"beta", &in.beta},
                       {"log_decay", &in.log_decay},
                       {"initial_state", &in.initial_state},
                       {"cu_seqlens", &cu}});
  if (!call.device.is_cpu()) {
    // One forward problem (its dense operand copies made once) for either backward.
    gdn::Recurrence f = bhtd_problem(call, d, in);
    if (cu.defined()) f.cu_seqlens = static_cast<const int32_t*>(cu.data());
    gdn::ChunkedBackward p;
    p.f = gdn::Chunked{f, chunk_size.value_or(0)};
    if (chunk_size && gpu_chunked_gap(call, p.f, true).empty()) {
      p.dy = common::dense_in(call, doutput);
      p.dy_dtype = doutput.dtype();
      if (dfinal_state.defined()) {
        p.dfinal = common::dense_in(call, dfinal_state);
        p.dfinal_dtype = dfinal_state.dtype();
      }
      p.dq = out.dquery.data();
      p.dk = out.dkey.data();
      p.dv = out.dvalue.data();
      p.dbeta = out.dbeta.data();
      p.dlog_decay = out.dlog_decay.data();
      p.dstate = out.dinitial_state.data();
      p.dbeta_dtype = in.beta.dtype();
#if RUDNN_WITH_CUDA
      const Tensor& workspace = call.keep(call.empty(
          {std::max<int64_t>(gdn::cuda::chunked_backward_workspace_bytes(p.f), 1)}, DType::u8));
      gdn::cuda::chunked_backward(p, workspace.data(), call.stream);
#endif
      return out;
    }
    gdn::RecurrenceBackward r;
    r.f = f;
    r.dq = out.dquery.data();
    r.dk = out.dkey.data();
    r.dv = out.dvalue.data();
    r.dgate = out.dlog_decay.data();
    r.dbeta = out.dbeta.data();
    r.dstate = out.dinitial_state.data();
    r.dgate_dtype = DType::f32;
    r.dbeta_dtype = in.beta.dtype();
    r.dstate_dtype = DType::f32;
    run_gpu_backward(call, r, doutput, dfinal_state);
    return out;
  }
  const gdn::reference::Grads gr = gdn::reference::gated_delta_bhtd_backward(
      d, host_doubles(in.query), host_doubles(in.key), host_doubles(in.value),
      host_doubles(in.beta), host_doubles(in.log_decay), in.query_scale,
      host_doubles(in.initial_state), host_doubles(doutput),
      dfinal_state.defined() ? host_doubles(dfinal_state) : std::vector<double>{}, seqs);
  store_doubles(out.dquery, gr.dq);
  store_doubles(out.dkey, gr.dk);
  store_doubles(out.dvalue, gr.dv);
  store_doubles(out.dbeta, gr.dbeta);
  store_doubles(out.dlog_decay, gr.dgate);
  store_doubles(out.dinitial_state, gr.dstate);
  return out;
}

}  // namespace

// ---- Public entry points: each functional form and its _into form share one implementation.

GatedDeltaResult gated_delta(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g,
                             const Tensor& beta, const Tensor& state, const Stream& stream) {
  OpCall call("gated_delta", "q", q, stream);
  Outputs outs(call, nullptr);
  return gated_delta_impl(call, outs, q, k, v, g, beta, state, false, Tensor());
}

void gated_delta_into(const Tensor& y_out, const Tensor& state_out, const Tensor& q,
                      const Tensor& k, const Tensor& v, const Tensor& g, const Tensor& beta,
                      const Tensor& state, const Stream& stream) {
  OpCall call("gated_delta", "q", q, stream);
  const std::vector<Tensor> given{y_out, state_out};
  Outputs outs(call, &given);
  gated_delta_impl(call, outs, q, k, v, g, beta, state, false, Tensor());
}

GatedDeltaResult gated_delta_steps(const Tensor& q, const Tensor& k, const Tensor& v,
                                   const Tensor& g, const Tensor& beta, const Tensor& state,
                                   const Stream& stream) {
  OpCall call("gated_delta_steps", "q", q, stream);
  Outputs outs(call, nullptr);
  return gated_delta_impl(call, outs, q, k, v, g, beta, state, true, Tensor());
}

void gated_delta_steps_into(const Tensor& y_out, const Tensor& states_out, const Tensor& q,
                            const Tensor& k, const Tensor& v, const Tensor& g, const Tensor& beta,
                            const Tensor& state, const Stream& stream) {
  OpCall call("gated_delta_steps", "q", q, stream);
  const std::vector<Tensor> given{y_out, states_out};
  Outputs outs(call, &given);
  gated_delta_impl(call, outs, q, k, v, g, beta, state, true, Tensor());
}

Tensor gated_delta_slots(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g,
                         const Tensor& beta, const Tensor& pool, const Tensor& slots,
                         const Stream& stream) {
  OpCall call("gated_delta_slots", "q", q, stream);
  Outputs outs(call, nullptr);
  return gated_delta_slots_impl(call, outs, q, k, v, g, beta, pool, slots, Tensor());
}

void gated_delta_slots_into(const Tensor& y_out, const Tensor& q, const Tensor& k,
                            const Tensor& v, const Tensor& g, const Tensor& beta,
                            const Tensor& pool, const Tensor& slots, const Stream& stream) {
  OpCall call("gated_delta_slots", "q", q, stream);
  const std::vector<Tensor> given{y_out};
  Outputs outs(call, &given);
  gated_delta_slots_impl(call, outs, q, k, v, g, beta, pool, slots, Tensor());
}

GatedDeltaResult chunk_gated_delta(const Tensor& q, const Tensor& k, const Tensor& v,
                                   const Tensor& g, const Tensor& beta, const Tensor& state,
                                   int64_t chunk_size, const Stream& stream) {
  OpCall call("chunk_gated_delta", "q", q, stream);
  Outputs outs(call, nullptr);
  return gated_delta_impl(call, outs, q, k, v, g, beta, state, false, Tensor(), chunk_size, true);
}

void chunk_gated_delta_into(const Tensor& y_out, const Tensor& state_out, const Tensor& q,
                            const Tensor& k, const Tensor& v, const Tensor& g, const Tensor& beta,
                            const Tensor& state, int64_t chunk_size, const Stream& stream) {
  OpCall call("chunk_gated_delta", "q", q, stream);
  const std::vector<Tensor> given{y_out, state_out};
  Outputs outs(call, &given);
  gated_delta_impl(call, outs, q, k, v, g, beta, state, false, Tensor(), chunk_size, true);
}

Tensor chunk_gated_delta_slots(const Tensor& q, const Tensor& k, const Tensor& v,
                               const Tensor& g, const Tensor& beta, const Tensor& pool,
                               const Tensor& slots, int64_t chunk_size, const Stream& stream) {
  OpCall call("chunk_gated_delta_slots", "q", q, stream);
  Outputs outs(call, nullptr);
  return gated_delta_slots_impl(call, outs, q, k, v, g, beta, pool, slots, Tensor(), chunk_size,
                                true);
}

void chunk_gated_delta_slots_into(const Tensor& y_out, const Tensor& q, const Tensor& k,
                                  const Tensor& v, const Tensor& g, const Tensor& beta,
                                  const Tensor& pool, const Tensor& slots, int64_t chunk_size,
                                  const Stream& stream) {
  OpCall call("chunk_gated_delta_slots", "q", q, stream);
  const std::vector<Tensor> given{y_out};
  Outputs outs(call, &given);
  gated_delta_slots_impl(call, outs, q, k, v, g, beta, pool, slots, Tensor(), chunk_size, true);
}

GatedDeltaResult chunk_gated_delta_varlen(const Tensor& q, const Tensor& k, const Tensor& v,
                                          const Tensor& g, const Tensor& beta, const Tensor& state,
                                          const Tensor& cu_seqlens, int64_t chunk_size,
                                          const Stream& stream) {
  OpCall call("chunk_gated_delta_varlen", "q", q, stream);
  common::require_defined(call, "cu_seqlens", cu_seqlens);
  Outputs outs(call, nullptr);
  return gated_delta_impl(call, outs, q, k, v, g, beta, state, false, cu_seqlens, chunk_size,
                          true);
}

void chunk_gated_delta_varlen_into(const Tensor& y_out, const Tensor& state_out, const Tensor& q,
                                   const Tensor& k, const Tensor& v, const Tensor& g,
                                   const Tensor& beta, const Tensor& state,
                                   const Tensor& cu_seqlens, int64_t chunk_size,
                                   const Stream& stream) {
  OpCall call("chunk_gated_delta_varlen", "q", q, stream);
  common::require_defined(call, "cu_seqlens", cu_seqlens);
  const std::vector<Tensor> given{y_out, state_out};
  Outputs outs(call, &given);
  gated_delta_impl(call, outs, q, k, v, g, beta, state, false, cu_seqlens, chunk_size, true);
}

Tensor chunk_gated_delta_slots_varlen(const Tensor& q, const Tensor& k, const Tensor& v,
                                      const Tensor& g, const Tensor& beta, const Tensor& pool,
                                      const Tensor& slots, const Tensor& cu_seqlens,
                                      int64_t chunk_size, const Stream& stream) {
  OpCall call("chunk_gated_delta_slots_varlen", "q", q, stream);
  common::require_defined(call, "cu_seqlens", cu_seqlens);
  Outputs outs(call, nullptr);
  return gated_delta_slots_impl(call, outs, q, k, v, g, beta, pool, slots, cu_seqlens,
                                chunk_size, true);
}

void chunk_gated_delta_slots_varlen_into(const Tensor& y_out, const Tensor& q, const Tensor& k,
                                         const Tensor& v, const Tensor& g, const Tensor& beta,
                                         const Tensor& pool, const Tensor& slots,
                                         const Tensor& cu_seqlens, int64_t chunk_size,
                                         const Stream& stream) {
  OpCall call("chunk_gated_delta_slots_varlen", "q", q, stream);
  common::require_defined(call, "cu_seqlens", cu_seqlens);
  const std::vector<Tensor> given{y_out};
  Outputs outs(call, &given);
  gated_delta_slots_impl(call, outs, q, k, v, g, beta, pool, slots, cu_seqlens, chunk_size, true);
}

GatedDeltaOutput gated_delta_rule(const GatedDeltaInput& in, const Stream& stream) {
  OpCall call("gated_delta_rule", "query", in.query, stream);
  Outputs outs(call, nullptr);
  return gated_delta_rule_impl(call, outs, in, Tensor());
}

void gated_delta_rule_into(const Tensor& output_out, const Tensor& final_state_out,
                           const GatedDeltaInput& in, const Stream& stream) {
  OpCall call("gated_delta_rule", "query", in.query, stream);
  const std::vector<Tensor> given{output_out, final_state_out};
  Outputs outs(call, &given);
  gated_delta_rule_impl(call, outs, in, Tensor());
}

GatedDeltaOutput chunk_gated_delta_rule(const GatedDeltaInput& in, int64_t chunk_size,
                                        const Stream& stream) {
  OpCall call("chunk_gated_delta_rule", "query", in.query, stream);
  Outputs outs(call, nullptr);
  return chunk_rule_impl(call, outs, in, chunk_size, Tensor());
}

void chunk_gated_delta_rule_into(const Tensor& output_out, const Tensor& final_state_out,
                                 const GatedDeltaInput& in, int64_t chunk_size,
                                 const Stream& stream) {
  OpCall call("chunk_gated_delta_rule", "query", in.query, stream);
  const std::vector<Tensor> given{output_out, final_state_out};
  Outputs outs(call, &given);
  chunk_rule_impl(call, outs, in, chunk_size, Tensor());
}

GatedDeltaOutput chunk_gated_delta_rule_varlen(const GatedDeltaInput& in,
                                               const Tensor& cu_seqlens, int64_t chunk_size,
                                               const Stream& stream) {
  OpCall call("chunk_gated_delta_rule_varlen", "query", in.query, stream);
  common::require_defined(call, "cu_seqlens", cu_seqlens);
  Outputs outs(call, nullptr);
  return chunk_rule_impl(call, outs, in, chunk_size, cu_seqlens);
}

void chunk_gated_delta_rule_varlen_into(const Tensor& output_out, const Tensor& final_state_out,
                                        const GatedDeltaInput& in, const Tensor& cu_seqlens,
                                        int64_t chunk_size, const Stream& stream) {
  OpCall call("chunk_gated_delta_rule_varlen", "query", in.query, stream);
  common::require_defined(call, "cu_seqlens", cu_seqlens);
  const std::vector<Tensor> given{output_out, final_state_out};
  Outputs outs(call, &given);
  chunk_rule_impl(call, outs, in, chunk_size, cu_seqlens);
}

GatedDeltaResult gated_delta_steps_varlen(const Tensor& q, const Tensor& k, const Tensor& v,
                                          const Tensor& g, const Tensor& beta, const Tensor& state,
                                          const Tensor& cu_seqlens, const Stream& stream) {
  OpCall call("gated_delta_steps_varlen", "q", q, stream);
  common::require_defined(call, "cu_seqlens", cu_seqlens);
  Outputs outs(call, nullptr);
  return gated_delta_impl(call, outs, q, k, v, g, beta, state, true, cu_seqlens);
}

void gated_delta_steps_varlen_into(const Tensor& y_out, const Tensor& states_out,
                                   const Tensor& q, const Tensor& k, const Tensor& v,
                                   const Tensor& g, const Tensor& beta, const Tensor& state,
                                   const Tensor& cu_seqlens, const Stream& stream) {
  OpCall call("gated_delta_steps_varlen", "q", q, stream);
  common::require_defined(call, "cu_seqlens", cu_seqlens);
  const std::vector<Tensor> given{y_out, states_out};
  Outputs outs(call, &given);
  gated_delta_impl(call, outs, q, k, v, g, beta, state, true, cu_seqlens);
}

GatedDeltaResult gated_delta_varlen(const Tensor& q, const Tensor& k, const Tensor& v,
                                    const Tensor& g, const Tensor& beta, const Tensor& state,
                                    const Tensor& cu_seqlens, const Stream& stream) {
  OpCall call("gated_delta_varlen", "q", q, stream);
  common::require_defined(call, "cu_seqlens", cu_seqlens);
  Outputs outs(call, nullptr);
  return gated_delta_impl(call, outs, q, k, v, g, beta, state, false, cu_seqlens);
}

void gated_delta_varlen_into(const Tensor& y_out, const Tensor& state_out, const Tensor& q,
                             const Tensor& k, const Tensor& v, const Tensor& g,
                             const Tensor& beta, const Tensor& state, const Tensor& cu_seqlens,
                             const Stream& stream) {
  OpCall call("gated_delta_varlen", "q", q, stream);
  common::require_defined(call, "cu_seqlens", cu_seqlens);
  const std::vector<Tensor> given{y_out, state_out};
  Outputs outs(call, &given);
  gated_delta_impl(call, outs, q, k, v, g, beta, state, false, cu_seqlens);
}

Tensor gated_delta_slots_varlen(const Tensor& q, const Tensor& k, const Tensor& v,
                                const Tensor& g, const Tensor& beta, const Tensor& pool,
                                const Tensor& slots, const Tensor& cu_seqlens,
                                const Stream& stream) {
  OpCall call("gated_delta_slots_varlen", "q", q, stream);
  common::require_defined(call, "cu_seqlens", cu_seqlens);
  Outputs outs(call, nullptr);
  return gated_delta_slots_impl(call, outs, q, k, v, g, beta, pool, slots, cu_seqlens);
}

void gated_delta_slots_varlen_into(const Tensor& y_out, const Tensor& q, const Tensor& k,
                                   const Tensor& v, const Tensor& g, const Tensor& beta,
                                   const Tensor& pool, const Tensor& slots,
                                   const Tensor& cu_seqlens, const Stream& stream) {
  OpCall call("gated_delta_slots_varlen", "q", q, stream);
  common::require_defined(call, "cu_seqlens", cu_seqlens);
  const std::vector<Tensor> given{y_out};
  Outputs outs(call, &given);
  gated_delta_slots_impl(call, outs, q, k, v, g, beta, pool, slots, cu_seqlens);
}

GatedDeltaOutput gated_delta_rule_varlen(const GatedDeltaInput& in, const Tensor& cu_seqlens,
                                         const Stream& stream) {
  OpCall call("gated_delta_rule_varlen", "query", in.query, stream);
  common::require_defined(call, "cu_seqlens", cu_seqlens);
  Outputs outs(call, nullptr);
  return gated_delta_rule_impl(call, outs, in, cu_seqlens);
}

void gated_delta_rule_varlen_into(const Tensor& output_out, const Tensor& final_state_out,
                                  const GatedDeltaInput& in, const Tensor& cu_seqlens,
                                  const Stream& stream) {
  OpCall call("gated_delta_rule_varlen", "query", in.query, stream);
  common::require_defined(call, "cu_seqlens", cu_seqlens);
  const std::vector<Tensor> given{output_out, final_state_out};
  Outputs outs(call, &given);
  gated_delta_rule_impl(call, outs, in, cu_seqlens);
}

GatedDeltaGrads gated_delta_backward(const Tensor& dy, const Tensor& dstate, const Tensor& q,
                                     const Tensor& k, const Tensor& v, const Tensor& g,
                                     const Tensor& beta, const Tensor& state,
                                     const Tensor& cu_seqlens, const Stream& stream) {
  OpCall call("gated_delta_backward", "q", q, stream);
  Outputs outs(call, nullptr);
  return gated_delta_backward_impl(call, outs, dy, dstate, q, k, v, g, beta, state, cu_seqlens);
}

void gated_delta_backward_into(const GatedDeltaGrads& out, const Tensor& dy, const Tensor& dstate,
                               const Tensor& q, const Tensor& k, const Tensor& v,
                               const Tensor& g, const Tensor& beta, const Tensor& state,
                               const Tensor& cu_seqlens, const Stream& stream) {
  OpCall call("gated_delta_backward", "q", q, stream);
  const std::vector<Tensor> given{out.dq, out.dk, out.dv, out.dg, out.dbeta, out.dstate};
  Outputs outs(call, &given);
  gated_delta_backward_impl(call, outs, dy, dstate, q, k, v, g, beta, state, cu_seqlens);
}

GatedDeltaInputGrads gated_delta_rule_backward(const Tensor& doutput, const Tensor& dfinal_state,
                                               const GatedDeltaInput& in,
                                               const Tensor& cu_seqlens, const Stream& stream) {
  OpCall call("gated_delta_rule_backward", "query", in.query, stream);
  Outputs outs(call, nullptr);
  return gated_delta_rule_backward_impl(call, outs, doutput, dfinal_state, in, cu_seqlens);
}

void gated_delta_rule_backward_into(const GatedDeltaInputGrads& out, const Tensor& doutput,
                                    const Tensor& dfinal_state, const GatedDeltaInput& in,
                                    const Tensor& cu_seqlens, const Stream& stream) {
  OpCall call("gated_delta_rule_backward", "query", in.query, stream);
  const std::vector<Tensor> given{out.dquery, out.dkey,       out.dvalue,
                                  out.dbeta,  out.dlog_decay, out.dinitial_state};
  Outputs outs(call, &given);
  gated_delta_rule_backward_impl(call, outs, doutput, dfinal_state, in, cu_seqlens);
}

GatedDeltaInputGrads chunk_gated_delta_rule_backward(const Tensor& doutput,
                                                     const Tensor& dfinal_state,
                                                     const GatedDeltaInput& in,
                                                     int64_t chunk_size, const Tensor& cu_seqlens,
                                                     const Stream& stream) {
  OpCall call("chunk_gated_delta_rule_backward", "query", in.query, stream);
  Outputs outs(call, nullptr);
  return gated_delta_rule_backward_impl(call, outs, doutput, dfinal_state, in, cu_seqlens,
                                        chunk_size);
}

void chunk_gated_delta_rule_backward_into(const GatedDeltaInputGrads& out, const Tensor& doutput,
                                          const Tensor& dfinal_state, const GatedDeltaInput& in,
                                          int64_t chunk_size, const Tensor& cu_seqlens,
                                          const Stream& stream) {
  OpCall call("chunk_gated_delta_rule_backward", "query", in.query, stream);
  const std::vector<Tensor> given{out.dquery, out.dkey,       out.dvalue,
                                  out.dbeta,  out.dlog_decay, out.dinitial_state};
  Outputs outs(call, &given);
  gated_delta_rule_backward_impl(call, outs, doutput, dfinal_state, in, cu_seqlens, chunk_size);
}

}  // namespace rudnn
