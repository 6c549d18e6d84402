// Attention family entry points: validation of the operands and options (the shared checks
// of common/op_call.h, and the family's own rules below, written the same way), the plan
// (attention/plan.h), and the dispatch of one problem to the CPU reference or the CUDA
// backend.
#include "rudnn/attention.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "attention/plan.h"
#include "attention/problem.h"
#include "attention/reference.h"
#include "common/autotune.h"
#include "common/op_call.h"
#include "common/views.h"
#include "rudnn/autotune.h"
#if RUDNN_WITH_CUDA
#include "attention/cuda/launch.h"
#endif

namespace rudnn {

const char* attention_strategy_name(AttentionStrategy strategy) noexcept {
  switch (strategy) {
    case AttentionStrategy::Auto:
      return "Auto";
    case AttentionStrategy::Flash:
      return "Flash";
    case AttentionStrategy::FlashScalar:
      return "FlashScalar";
    case AttentionStrategy::Composed:
      return "Composed";
    case AttentionStrategy::SplitKv:
      return "SplitKv";
    case AttentionStrategy::Autotune:
      return "Autotune";
  }
  return "?";
}

const char* attention_kernel_name(AttentionKernel kernel) noexcept {
  switch (kernel) {
    case AttentionKernel::Reference:
      return "Reference";
    case AttentionKernel::Flash:
      return "Flash";
    case AttentionKernel::FlashScalar:
      return "FlashScalar";
    case AttentionKernel::Composed:
      return "Composed";
    case AttentionKernel::SplitKv:
      return "SplitKv";
  }
  return "?";
}

namespace {

using common::OpCall;
using common::require_defined;
using common::require_device;
using common::require_no_overlap;
using detail::cat;
using detail::fail;

// ---- Shapes -------------------------------------------------------------------------------

// The sizes of a call, from the shapes of q, k, v in the options' layout (or varlen).
struct Dims {
  int64_t batch = 0, heads_q = 0, heads_kv = 0, len_q = 0, len_k = 0, dim_qk = 0, dim_v = 0;
  bool varlen = false;
  int64_t total_q = 0, total_k = 0;
};

const char* layout_text(const AttentionOptions& o, bool varlen) {
  if (varlen) return "[total, H, D] (varlen)";
  return o.layout == AttentionLayout::bshd ? "[B, L, H, D]" : "[B, H, L, D]";
}

// (batch, heads, len, dim) of a 4-d shape in the layout.
struct Bhld {
  int64_t b, h, l, d;
};
Bhld bhld(const Shape& s, AttentionLayout layout) {
  if (layout == AttentionLayout::bshd) return {s[0], s[2], s[1], s[3]};
  return {s[0], s[1], s[2], s[3]};
}

Dims dims_of(const char* op, const Shape& q, const Shape& k, const Shape& v,
             const AttentionOptions& o) {
  const bool varlen = o.cu_seqlens_q.defined() || o.cu_seqlens_k.defined();
  const size_t rank = varlen ? 3 : 4;
  const char* names[3] = {"q", "k", "v"};
  const Shape* shapes[3] = {&q, &k, &v};
  for (int t = 0; t < 3; ++t) {
    if (shapes[t]->size() != rank) {
      fail(ErrorCode::ShapeMismatch, cat(op, ": ", names[t], " has shape ", shape_str(*shapes[t]),
                                         "; expected ", layout_text(o, varlen)));
    }
  }
  Dims d;
  d.varlen = varlen;
  if (varlen) {
    d.total_q = q[0];
    d.heads_q = q[1];
    d.dim_qk = q[2];
    d.total_k = k[0];
    d.heads_kv = k[1];
    if (k[2] != d.dim_qk) {
      fail(ErrorCode::ShapeMismatch, cat(op, ": k has shape ", shape_str(k), ", q has ",
                                         shape_str(q), "; their head sizes D must match"));
    }
    if (v[0] != d.total_k || v[1] != d.heads_kv) {
      fail(ErrorCode::ShapeMismatch,
           cat(op, ": v has shape ", shape_str(v), ", k has ", shape_str(k),
               "; expected [total_k, Hkv, Dv] with k's total_k and Hkv"));
    }
    d.dim_v = v[2];
    d.len_q = o.max_seqlen_q;
    d.len_k = o.max_seqlen_k;
  } else {
    const Bhld qd = bhld(q, o.layout), kd = bhld(k, o.layout), vd = bhld(v, o.layout);
    d.batch = qd.b;
    d.heads_q = qd.h;
    d.len_q = qd.l;
    d.dim_qk = qd.d;
    d.heads_kv = kd.h;
    d.len_k = kd.l;
    d.dim_v = vd.d;
    if (kd.b != qd.b || kd.d != qd.d) {
      fail(ErrorCode::ShapeMismatch,
           cat(op, ": k has shape ", shape_str(k), ", q has ", shape_str(q), "; expected k ",
               layout_text(o, false), " with q's B and D"));
    }
    if (vd.b != kd.b || vd.h != kd.h || vd.l != kd.l) {
      fail(ErrorCode::ShapeMismatch, cat(op, ": v has shape ", shape_str(v), ", k has ",
                                         shape_str(k), "; expected v with k's B, Hkv and Lk"));
    }
  }
  if (d.dim_qk < 1 || d.dim_v < 1) {
    fail(ErrorCode::InvalidArgument,
         cat(op, ": head sizes must be >= 1, got D = ", d.dim_qk, ", Dv = ", d.dim_v));
  }
  constexpr int64_t kMaxLength = (int64_t{1} << 31) - 1;  // the kernels index keys with int
  if (d.len_q > kMaxLength || d.len_k > kMaxLength) {
    fail(ErrorCode::InvalidArgument,
         cat(op, ": sequence lengths must be < 2^31, got Lq = ", d.len_q, ", Lk = ", d.len_k));
  }
  if (d.heads_kv == 0 ? d.heads_q != 0 : d.heads_q % d.heads_kv != 0) {
    fail(ErrorCode::ShapeMismatch, cat(op, ": q has ", d.heads_q, " heads, k and v ", d.heads_kv,
                                       "; Hq must be a multiple of Hkv (grouped-query attention)"));
  }
  return d;
}

// ---- Options ------------------------------------------------------------------------------

void check_scalars(const char* op, const AttentionOptions& o, const Dims& d) {
  if (o.scale && !std::isfinite(*o.scale))
    fail(ErrorCode::InvalidArgument, cat(op, ": scale must be finite, got ", *o.scale));
  // The tensor-core kernels fold log2(e) into the scale: it must stay a finite float.
  if (o.scale && !std::isfinite(*o.scale * 1.4426950408889634f)) {
    fail(ErrorCode::InvalidArgument,
         cat(op, ": scale must be finite with |scale| * log2(e) finite (|scale| below about ",
             "2.36e38), got ", *o.scale));
  }
  if (o.softcap && !(std::isfinite(*o.softcap) && *o.softcap > 0.0f)) {
    fail(ErrorCode::InvalidArgument, cat(op, ": softcap must be finite and > 0, got ", *o.softcap));
  }
  if (o.window) {
    if (!o.is_causal) {
      fail(ErrorCode::InvalidArgument,
           cat(op, ": a sliding window needs the causal mask (set_causal())"));
    }
    if (*o.window < 1)
      fail(ErrorCode::InvalidArgument, cat(op, ": window must be >= 1 keys, got ", *o.window));
  }
  if (o.max_score_bytes && *o.max_score_bytes == 0) {
    fail(ErrorCode::InvalidArgument,
         cat(op, ": max_score_bytes is 0; expected a positive number of bytes"));
  }
  if (d.varlen && (o.max_seqlen_q < 0 || o.max_seqlen_k < 0)) {
    fail(ErrorCode::InvalidArgument, cat(op, ": max_seqlen_q and max_seqlen_k must be >= 0, got ",
                                         o.max_seqlen_q, " and ", o.max_seqlen_k));
  }
}

bool takes_dtype(DType t, DType problem) { return t == DType::f32 || t == problem; }

const char* float_dtypes_text(DType problem) {
  switch (problem) {
    case DType::f16:
      return "f32 or q's dtype f16";
    case DType::bf16:
      return "f32 or q's dtype bf16";
    case DType::f64:
      return "f32 or q's dtype f64";
    default:
      return "f32 (q's dtype)";
  }
}

void check_option_device(const char* op, const char* name, const Tensor& t, Device device) {
  if (t.device() != device) {
    fail(ErrorCode::DeviceMismatch,
         cat(op, ": ", name, " is on ", t.device().str(), ", the operands on ", device.str()));
  }
}

// A mask or bias broadcast to [B, Hq, Lq, Lk]: its strides at the four axes.
attn::Broadcast4 broadcast_view(const char* op, const char* name, const Tensor& t, const Dims& d) {
  const int64_t target[4] = {d.batch, d.heads_q, d.len_q, d.len_k};
  const int64_t rank = t.dim();
  auto refuse = [&] {
    fail(ErrorCode::ShapeMismatch,
         cat(op, ": ", name, " has shape ", shape_str(t.shape()),
             ", which does not broadcast to [B, Hq, Lq, Lk] = ",
             shape_str(Shape(target, target + 4)), d.varlen ? " (varlen: the max lengths)" : ""));
  };
  if (rank > 4) refuse();
  int64_t strides[4] = {0, 0, 0, 0};
  for (int a = 0; a < 4; ++a) {
    const int64_t axis = a - (4 - rank);
    if (axis < 0) continue;
    const int64_t size = t.shape()[axis];
    if (size == 1) continue;
    if (size != target[a]) refuse();
    strides[a] = t.strides()[axis];
  }
  attn::Broadcast4 view;
  view.data = t.numel() == 0 ? nullptr : t.data();
  view.dtype = t.dtype();
  view.stride_b = strides[0];
  view.stride_h = strides[1];
  view.stride_i = strides[2];
  view.stride_j = strides[3];
  return view;
}

// The options' tensors: dtypes, shapes, device. Returns the score rules (data pointers set
// only when `bind` is true: plan_attention reads shapes alone).
attn::ScoreRules check_option_tensors(const char* op, const AttentionOptions& o, const Dims& d,
                                      DType dtype, Device device) {
  attn::ScoreRules r;
  r.scale = o.scale.value_or(static_cast<float>(1.0 / std::sqrt(static_cast<double>(d.dim_qk))));
  r.causal = o.is_causal;
  r.window = o.window.value_or(0);
  r.softcap = o.softcap.value_or(0.0f);
  if (o.mask.defined()) {
    if (o.mask.dtype() != DType::boolean && !takes_dtype(o.mask.dtype(), dtype)) {
      fail(ErrorCode::DTypeMismatch,
           cat(op, ": mask has dtype ", dtype_name(o.mask.dtype()),
               "; expected boolean or an additive ", float_dtypes_text(dtype)));
    }
    check_option_device(op, "mask", o.mask, device);
    r.mask = broadcast_view(op, "mask", o.mask, d);
  }
  if (o.bias.defined()) {
    if (!takes_dtype(o.bias.dtype(), dtype)) {
      fail(ErrorCode::DTypeMismatch, cat(op, ": bias has dtype ", dtype_name(o.bias.dtype()),
                                         "; expected ", float_dtypes_text(dtype)));
    }
    check_option_device(op, "bias", o.bias, device);
    r.bias = broadcast_view(op, "bias", o.bias, d);
  }
  auto per_head = [&](const char* name, const Tensor& t) {
    if (!takes_dtype(t.dtype(), dtype)) {
      fail(ErrorCode::DTypeMismatch, cat(op, ": ", name, " has dtype ", dtype_name(t.dtype()),
                                         "; expected ", float_dtypes_text(dtype)));
    }
    if (t.dim() != 1 || t.shape()[0] != d.heads_q) {
      fail(ErrorCode::ShapeMismatch, cat(op, ": ", name, " has shape ", shape_str(t.shape()),
                                         ", expected [Hq] = [", d.heads_q, "]"));
    }
    check_option_device(op, name, t, device);
  };
  if (o.sinks.defined()) {
    per_head("sinks", o.sinks);
    r.sinks_dtype = o.sinks.dtype();
  }
  if (o.alibi_slopes.defined()) {
    per_head("alibi_slopes", o.alibi_slopes);
    r.alibi_dtype = o.alibi_slopes.dtype();
  }
  return r;
}

// cu_seqlens: I32 [B + 1] on the device, both or neither. On the CPU their values are
// readable and checked; on a GPU they stay there unread.
void check_varlen(const char* op, const AttentionOptions& o, Dims& d, Device device) {
  if (!d.varlen) return;
  const char* names[2] = {"cu_seqlens_q", "cu_seqlens_k"};
  const Tensor* cus[2] = {&o.cu_seqlens_q, &o.cu_seqlens_k};
  for (int t = 0; t < 2; ++t) {
    const Tensor& cu = *cus[t];
    if (!cu.defined()) {
      fail(ErrorCode::InvalidArgument, cat(op, ": ", names[t],
                                           " is undefined; varlen needs both cu_seqlens_q and "
                                           "cu_seqlens_k"));
    }
    if (cu.dtype() != DType::i32) {
      fail(ErrorCode::DTypeMismatch,
           cat(op, ": ", names[t], " has dtype ", dtype_name(cu.dtype()), "; expected i32"));
    }
    if (cu.dim() != 1 || cu.shape()[0] < 1) {
      fail(ErrorCode::ShapeMismatch, cat(op, ": ", names[t], " has shape ", shape_str(cu.shape()),
                                         "; expected [B + 1] with B >= 0"));
    }
    check_option_device(op, names[t], cu, device);
  }
  if (o.cu_seqlens_k.shape()[0] != o.cu_seqlens_q.shape()[0]) {
    fail(ErrorCode::ShapeMismatch,
         cat(op, ": cu_seqlens_k has shape ", shape_str(o.cu_seqlens_k.shape()),
             ", cu_seqlens_q has ", shape_str(o.cu_seqlens_q.shape()), "; they must match"));
  }
  d.batch = o.cu_seqlens_q.shape()[0] - 1;
  if (!device.is_cpu()) return;
  const int64_t totals[2] = {d.total_q, d.total_k};
  const int64_t maxima[2] = {o.max_seqlen_q, o.max_seqlen_k};
  const char* max_names[2] = {"max_seqlen_q", "max_seqlen_k"};
  for (int t = 0; t < 2; ++t) {
    const Tensor host = cus[t]->contiguous();
    const int32_t* cu = host.data_as<int32_t>();
    if (cu[0] < 0) {
      fail(ErrorCode::InvalidArgument, cat(op, ": ", names[t], "[0] = ", cu[0], "; expected >= 0"));
    }
    for (int64_t b = 0; b < d.batch; ++b) {
      const int64_t length = static_cast<int64_t>(cu[b + 1]) - cu[b];
      if (length < 0) {
        fail(ErrorCode::InvalidArgument,
             cat(op, ": ", names[t], " is not monotone: entry ", b + 1, " = ", cu[b + 1],
                 " < entry ", b, " = ", cu[b], "; expected non-decreasing offsets"));
      }
      if (length > maxima[t]) {
        fail(ErrorCode::InvalidArgument, cat(op, ": ", names[t], " gives sequence ", b, " length ",
                                             length, " > ", max_names[t], " = ", maxima[t]));
      }
    }
    if (cu[d.batch] > totals[t]) {
      fail(ErrorCode::InvalidArgument, cat(op, ": ", names[t], " ends at ", cu[d.batch],
                                           ", beyond the ", totals[t], " packed rows"));
    }
  }
}

attn::PlanInput plan_input(const char* op, const Dims& d, DType dtype, const AttentionOptions& o,
                           AttentionStrategy strategy, Device device, bool backward,
                           bool bias_grad) {
  attn::PlanInput in;
  in.op = op;
  in.batch = d.batch;
  in.heads_q = d.heads_q;
  in.heads_kv = d.heads_kv;
  in.len_q = d.len_q;
  in.len_k = d.len_k;
  in.dim_qk = d.dim_qk;
  in.dim_v = d.dim_v;
  in.varlen = d.varlen;
  in.total_q = d.total_q;
  in.dtype = dtype;
  in.max_score_bytes = o.max_score_bytes;
  in.has_sinks = o.sinks.defined();
  in.bias_grad = bias_grad;
  in.strategy = strategy;
  in.device = device;
  in.backward = backward;
  in.plain_rules = !o.mask.defined() && !o.bias.defined() && !o.sinks.defined() && !o.window &&
                   !o.softcap && !o.alibi_slopes.defined();
  in.plain_rules_but_sinks = !o.mask.defined() && !o.bias.defined() && !o.window && !o.softcap &&
                             !o.alibi_slopes.defined();
  return in;
}

// ---- Autotune ------------------------------------------------------------------------------

// The shape class of a call (rudnn/autotune.h): what decides which strategies can take it,
// the head counts and sizes exactly, the batch and the lengths by powers of two.
std::string tune_key(const char* op, Device device, const Dims& d, DType dtype,
                     const AttentionOptions& o, bool backward, bool bias_grad) {
  const char* layout = d.varlen                               ? "varlen"
                       : o.layout == AttentionLayout::bshd ? "bshd"
                                                              : "bhsd";
  const char* mask = !o.mask.defined()                 ? ""
                     : o.mask.dtype() == DType::boolean ? " boolean-mask"
                                                        : " additive-mask";
  const char* bias = !o.bias.defined() ? "" : bias_grad ? " bias-with-grad" : " bias";
  return cat(common::key_prefix(op, device), dtype_name(dtype), ' ', layout,
             " B<=", common::size_class(d.batch), " Hq ", d.heads_q, " Hkv ", d.heads_kv,
             " Lq<=", common::size_class(d.len_q), " Lk<=", common::size_class(d.len_k),
             " D ", d.dim_qk, " Dv ", d.dim_v, o.is_causal ? " causal" : "",
             o.window ? " window" : "", mask, bias, o.sinks.defined() ? " sinks" : "",
             o.softcap ? " softcap" : "", o.alibi_slopes.defined() ? " alibi" : "",
             backward && o.deterministic ? " deterministic" : "",
             o.max_score_bytes ? cat(" max_score_bytes ", *o.max_score_bytes) : std::string());
}

// The strategies Autotune chooses among, in Auto's order of preference.
constexpr AttentionStrategy kTunedStrategies[] = {
    AttentionStrategy::Flash, AttentionStrategy::Composed, AttentionStrategy::FlashScalar};

// The strategies of kTunedStrategies that can take the call.
std::vector<AttentionStrategy> tunable(const char* op, const Dims& d, DType dtype,
                                       const AttentionOptions& o, Device device, bool backward,
                                       bool bias_grad) {
  std::vector<AttentionStrategy> out;
  for (AttentionStrategy s : kTunedStrategies) {
    try {
      attn::make_plan(plan_input(op, d, dtype, o, s, device, backward, bias_grad));
      out.push_back(s);
    } catch (const Error&) {
      // This strategy cannot take the call: not a candidate.
    }
  }
  return out;
}

// Whether Autotune measures such a call: GPU calls with work, not decode (the serial rule).
bool measured_by_autotune(Device device, const Dims& d) {
  const bool empty = d.heads_q == 0 || (d.varlen ? d.total_q == 0 : d.batch * d.len_q == 0);
  return !device.is_cpu() && !empty && d.len_q > attn::kMaxDecodeQueries;
}

// The strategy an Autotune call runs; `run(s)` runs the op once with strategy s.
AttentionStrategy tuned_strategy(const OpCall& call, const Dims& d, DType dtype,
                                 const AttentionOptions& o, bool backward, bool bias_grad,
                                 const std::function<void(AttentionStrategy)>& run) {
  common::require_autotune_built(call.op);
  if (!measured_by_autotune(call.device, d)) return AttentionStrategy::Auto;
  const std::vector<AttentionStrategy> strategies =
      tunable(call.op, d, dtype, o, call.device, backward, bias_grad);
  if (strategies.empty()) return AttentionStrategy::Auto;  // Auto says why nothing runs
  std::vector<common::TuneCandidate> candidates;
  for (AttentionStrategy s : strategies)
    candidates.push_back({attention_strategy_name(s), [&run, s] { run(s); }});
  const std::string chosen = common::autotuned_choice(
      call, tune_key(call.op, call.device, d, dtype, o, backward, bias_grad), candidates,
      attention_strategy_name(AttentionStrategy::Auto));
  for (AttentionStrategy s : strategies) {
    if (chosen == attention_strategy_name(s)) return s;
  }
  return AttentionStrategy::Auto;
}

// What plan_attention reports for Autotune: the recorded choice for the call's class when
// there is one that can take it, else Auto's plan (what an unmeasured call would fall back
// to under capture; an uncaptured first call measures).
AttentionStrategy planned_autotune_strategy(const char* op, const Dims& d, DType dtype,
                                            const AttentionOptions& o, Device device,
                                            bool backward, bool bias_grad) {
  common::require_autotune_built(op);
  if (!measured_by_autotune(device, d)) return AttentionStrategy::Auto;
  const std::string recorded =
      common::autotune_recorded(tune_key(backward ? "attention_backward" : "attention", device, d,
                                         dtype, o, backward, bias_grad));
  for (AttentionStrategy s : tunable(op, d, dtype, o, device, backward, bias_grad)) {
    if (recorded == attention_strategy_name(s)) return s;
  }
  return AttentionStrategy::Auto;
}

// ---- Operands -----------------------------------------------------------------------------

common::Axes4 axes_of(const AttentionOptions& o) {
  return o.layout == AttentionLayout::bshd ? common::Axes4::bshd : common::Axes4::bhsd;
}

// q, k, v: defined, one float dtype, the call's device.
void check_qkv(const OpCall& call, const Tensor& q, const Tensor& k, const Tensor& v) {
  common::require_float(call, "q", q);
  const char* names[2] = {"k", "v"};
  const Tensor* ts[2] = {&k, &v};
  for (int t = 0; t < 2; ++t) {
    require_defined(call, names[t], *ts[t]);
    if (ts[t]->dtype() != q.dtype()) {
      fail(ErrorCode::DTypeMismatch,
           cat(call.op, ": ", names[t], " has dtype ", dtype_name(ts[t]->dtype()), ", q has ",
               dtype_name(q.dtype()), "; they must match"));
    }
    require_device(call, names[t], *ts[t]);
  }
}

// The shape a result of q's layout takes with `dim` features per head.
Shape out_shape(const Dims& d, const AttentionOptions& o, int64_t dim) {
  if (d.varlen) return {d.total_q, d.heads_q, dim};
  if (o.layout == AttentionLayout::bshd) return {d.batch, d.len_q, d.heads_q, dim};
  return {d.batch, d.heads_q, d.len_q, dim};
}

Shape lse_shape(const Dims& d) {
  if (d.varlen) return {d.heads_q, d.total_q};
  return {d.batch, d.heads_q, d.len_q};
}

DType stats_dtype(DType dtype) { return dtype == DType::f64 ? DType::f64 : DType::f32; }

attn::RowStats row_stats(const Dims& d) {
  if (d.varlen) return {0, d.total_q};
  return {d.heads_q * d.len_q, d.len_q};
}

attn::AttentionSizes sizes_of(const Dims& d, const AttentionOptions& o) {
  attn::AttentionSizes s;
  s.batch = d.batch;
  s.heads_q = d.heads_q;
  s.heads_kv = d.heads_kv;
  s.len_q = d.len_q;
  s.len_k = d.len_k;
  s.dim_qk = d.dim_qk;
  s.dim_v = d.dim_v;
  s.varlen = d.varlen;
  s.total_q = d.total_q;
  s.total_k = d.total_k;
  if (d.varlen) {
    s.cu_q = static_cast<const int32_t*>(o.cu_seqlens_q.data());
    s.cu_k = static_cast<const int32_t*>(o.cu_seqlens_k.data());
  }
  return s;
}

// Binds the option tensors' data to the rules (dense copies of the per-head vectors).
void bind_rules(OpCall& call, attn::ScoreRules& r, const AttentionOptions& o) {
  if (o.sinks.defined()) r.sinks = common::dense_in(call, o.sinks);
  if (o.alibi_slopes.defined()) r.alibi = common::dense_in(call, o.alibi_slopes);
}

// The inputs an output must not overlap.
struct Inputs {
  const Tensor *q, *k, *v;
  const AttentionOptions* o;
};
void require_no_overlap_with_inputs(const OpCall& call, const char* name, const Tensor& out,
                                    const Inputs& in) {
  const AttentionOptions& o = *in.o;
  require_no_overlap(call, name, out,
                     {{"q", in.q},
                      {"k", in.k},
                      {"v", in.v},
                      {"mask", &o.mask},
                      {"bias", &o.bias},
                      {"sinks", &o.sinks},
                      {"alibi_slopes", &o.alibi_slopes},
                      {"cu_seqlens_q", &o.cu_seqlens_q},
                      {"cu_seqlens_k", &o.cu_seqlens_k}});
}

// A scratch allocation of the plan's size on the call's stream (none on the CPU).
void* scratch_for(OpCall& call, const AttentionPlan& plan) {
  if (call.device.is_cpu() || plan.scratch_bytes == 0) return nullptr;
  return call.keep(call.empty({static_cast<int64_t>(plan.scratch_bytes)}, DType::u8)).data();
}

// ---- Forward ------------------------------------------------------------------------------

// An input view; for Composed, whose products need rows that do not overlap (a leading
// dimension of at least the head size), a dense copy of one whose rows do (a broadcast view
// with a zero sequence stride, say); for the Hopper Flash, whose TMA maps need 16-byte
// aligned bases and strides, a dense copy of one that has other strides.
common::BshdIn gemm_rows_in(OpCall& call, const char* name, const Tensor& t, common::Axes4 axes,
                            const AttentionPlan& plan) {
  common::BshdIn view = common::bshd_in(call, name, t, axes);
  const bool composed_copy = plan.kernel == AttentionKernel::Composed && view.shape.seq > 1 &&
                             view.seq_stride < view.shape.dim;
  const bool tma_copy =
      plan.kernel == AttentionKernel::Flash && plan.flash_wgmma &&
      !attn::flash_hopper_view_ok(view.data, view.shape.batch, view.shape.seq, view.shape.heads,
                                  view.batch_stride, view.seq_stride, view.head_stride);
  if (composed_copy || tma_copy) {
    // A contiguous tensor at a misaligned offset stays misaligned under contiguous(): TMA
    // gets a fresh allocation.
    const Tensor dense = tma_copy && t.is_contiguous() ? t.to(t.device(), call.stream)
                                                       : t.contiguous(call.stream);
    view = common::bshd_in(call, name, call.keep(dense), axes);
  }
  return view;
}

struct Checked {
  Dims dims;
  attn::ScoreRules rules;
};

Checked check_forward_args(OpCall& call, const Tensor& q, const Tensor& k, const Tensor& v,
                           const AttentionOptions& o) {
  check_qkv(call, q, k, v);
  Checked c;
  c.dims = dims_of(call.op, q.shape(), k.shape(), v.shape(), o);
  check_scalars(call.op, o, c.dims);
  check_varlen(call.op, o, c.dims, call.device);
  c.rules = check_option_tensors(call.op, o, c.dims, q.dtype(), call.device);
  return c;
}

void forward_impl(OpCall& call, const Tensor& out, const Tensor& lse_out, const Tensor& q,
                  const Tensor& k, const Tensor& v, const AttentionOptions& o,
                  AttentionStrategy strategy) {
  Checked c = check_forward_args(call, q, k, v, o);
  const Dims& d = c.dims;
  const DType dtype = q.dtype();
  if (strategy == AttentionStrategy::Autotune) {
    strategy = tuned_strategy(call, d, dtype, o, false, false, [&](AttentionStrategy s) {
      OpCall run(call.op, "q", q, call.stream);
      forward_impl(run, out, lse_out, q, k, v, o, s);
    });
  }
  const AttentionPlan plan =
      attn::make_plan(plan_input(call.op, d, dtype, o, strategy, call.device, false, false));

  const Inputs inputs{&q, &k, &v, &o};
  common::require_out(call, "out", out, out_shape(d, o, d.dim_v), dtype);
  const common::Axes4 axes = d.varlen ? common::Axes4::bshd : axes_of(o);
  attn::AttentionForward p;
  p.out = common::bshd_out(call, "out", out, axes);
  require_no_overlap_with_inputs(call, "out", out, inputs);
  if (lse_out.defined()) {
    p.lse = common::dense_out(call, "lse_out", lse_out, lse_shape(d), stats_dtype(dtype));
    require_no_overlap_with_inputs(call, "lse_out", lse_out, inputs);
    require_no_overlap(call, "lse_out", lse_out, {{"out", &out}});
  }
  p.dtype = dtype;
  p.sizes = sizes_of(d, o);
  p.lse_layout = row_stats(d);
  p.rules = c.rules;
  p.plan = plan;
  p.q = gemm_rows_in(call, "q", q, axes, plan);
  p.k = gemm_rows_in(call, "k", k, axes, plan);
  p.v = gemm_rows_in(call, "v", v, axes, plan);
  bind_rules(call, p.rules, o);
  if (d.heads_q == 0 || (d.varlen ? d.total_q == 0 : d.batch * d.len_q == 0)) return;
  p.scratch = scratch_for(call, plan);
  common::run_backend(call, p, RUDNN_BACKENDS(attn, attention_forward));
}

// ---- Backward -----------------------------------------------------------------------------

// The forward's arguments plus dout, out (the forward's result shape and dtype) and lse.
Checked check_backward_args(OpCall& call, const Tensor& dout, const Tensor& q, const Tensor& k,
                            const Tensor& v, const Tensor& out, const Tensor& lse,
                            const AttentionOptions& o) {
  Checked c = check_forward_args(call, q, k, v, o);
  const DType dtype = q.dtype();
  const Shape o_shape = out_shape(c.dims, o, c.dims.dim_v);
  const char* like_names[2] = {"dout", "out"};
  const Tensor* likes[2] = {&dout, &out};
  for (int t = 0; t < 2; ++t) {
    require_defined(call, like_names[t], *likes[t]);
    if (likes[t]->dtype() != dtype) {
      fail(ErrorCode::DTypeMismatch,
           cat(call.op, ": ", like_names[t], " has dtype ", dtype_name(likes[t]->dtype()),
               ", q has ", dtype_name(dtype), "; they must match"));
    }
    common::require_shape(call, like_names[t], *likes[t], o_shape, "the forward's out shape");
    require_device(call, like_names[t], *likes[t]);
  }
  common::require_dtype(call, "lse", lse, {stats_dtype(dtype)});
  common::require_shape(call, "lse", lse, lse_shape(c.dims),
                        c.dims.varlen ? "[Hq, total_q]" : "[B, Hq, Lq]");
  return c;
}

void backward_impl(OpCall& call, const AttentionGrads& g, const Tensor& dout, const Tensor& q,
                   const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& lse,
                   const AttentionOptions& o, AttentionStrategy strategy) {
  Checked c = check_backward_args(call, dout, q, k, v, out, lse, o);
  const Dims& d = c.dims;
  const DType dtype = q.dtype();
  const bool bias_grad = o.bias.defined() && o.bias_requires_grad;
  if (strategy == AttentionStrategy::Autotune) {
    strategy = tuned_strategy(call, d, dtype, o, true, bias_grad, [&](AttentionStrategy s) {
      OpCall run(call.op, "q", q, call.stream);
      backward_impl(run, g, dout, q, k, v, out, lse, o, s);
    });
  }
  const AttentionPlan plan =
      attn::make_plan(plan_input(call.op, d, dtype, o, strategy, call.device, true, bias_grad));

  const Inputs inputs{&q, &k, &v, &o};
  const common::Axes4 axes = d.varlen ? common::Axes4::bshd : axes_of(o);
  attn::AttentionBackward p;
  const char* grad_names[3] = {"dq_out", "dk_out", "dv_out"};
  const Tensor* grads[3] = {&g.dq, &g.dk, &g.dv};
  const Tensor* shapes_of[3] = {&q, &k, &v};
  common::BshdOut* views[3] = {&p.dq, &p.dk, &p.dv};
  for (int t = 0; t < 3; ++t) {
    common::require_out(call, grad_names[t], *grads[t], shapes_of[t]->shape(), dtype);
    *views[t] = common::bshd_out(call, grad_names[t], *grads[t], axes);
  }
  if (o.sinks.defined() != g.dsinks.defined()) {
    fail(ErrorCode::InvalidArgument,
         cat(call.op, ": dsinks_out must be defined exactly when sinks are (sinks ",
             o.sinks.defined() ? "given" : "absent", ")"));
  }
  if (g.dsinks.defined())
    p.dsinks = common::dense_out(call, "dsinks_out", g.dsinks, o.sinks.shape(), o.sinks.dtype());
  if (bias_grad != g.dbias.defined()) {
    fail(ErrorCode::InvalidArgument,
         cat(call.op,
             ": dbias_out must be defined exactly when a bias with bias_requires_grad "
             "is given (",
             bias_grad ? "it is" : "it is not", ")"));
  }
  if (g.dbias.defined()) {
    p.dbias = common::dense_out(call, "dbias_out", g.dbias, o.bias.shape(), o.bias.dtype());
    p.dbias_dtype = o.bias.dtype();
    p.dbias_numel = g.dbias.numel();
    p.dbias_strides = broadcast_view(call.op, "dbias_out", g.dbias, d);
  }
  const char* all_names[5] = {"dq_out", "dk_out", "dv_out", "dsinks_out", "dbias_out"};
  const Tensor* all[5] = {&g.dq, &g.dk, &g.dv, &g.dsinks, &g.dbias};
  for (int t = 0; t < 5; ++t) {
    if (!all[t]->defined()) continue;
    require_no_overlap_with_inputs(call, all_names[t], *all[t], inputs);
    require_no_overlap(call, all_names[t], *all[t],
                       {{"dout", &dout}, {"out", &out}, {"lse", &lse}});
    for (int u = t + 1; u < 5; ++u) {
      if (all[u]->defined())
        require_no_overlap(call, all_names[t], *all[t], {{all_names[u], all[u]}});
    }
  }
  p.dtype = dtype;
  p.sizes = sizes_of(d, o);
  p.lse_layout = row_stats(d);
  p.rules = c.rules;
  p.deterministic = o.deterministic;
  p.plan = plan;
  // The Hopper backward reads q, k, v and dout by TMA (dense copies of views it cannot map,
  // as the forward's); out only by the row kernel.
  p.q = gemm_rows_in(call, "q", q, axes, plan);
  p.k = gemm_rows_in(call, "k", k, axes, plan);
  p.v = gemm_rows_in(call, "v", v, axes, plan);
  p.out = common::bshd_in(call, "out", out, axes);
  p.dout = gemm_rows_in(call, "dout", dout, axes, plan);
  p.lse = common::dense_in(call, lse);
  bind_rules(call, p.rules, o);
  p.scratch = scratch_for(call, plan);
  common::run_backend(call, p, RUDNN_BACKENDS(attn, attention_backward));
}

}  // namespace

// ---- Public functions ---------------------------------------------------------------------------

AttentionPlan plan_attention(const Shape& q, const Shape& k, const Shape& v, DType dtype,
                             const AttentionOptions& options, AttentionStrategy strategy,
                             Device device) {
  const char* op = "plan_attention";
  if (!common::is_float_dtype(dtype) && !(dtype == DType::f64 && device.is_cpu())) {
    fail(ErrorCode::DTypeMismatch,
         cat(op, ": dtype ", dtype_name(dtype), "; expected f32, f16 or bf16 (f64 on the CPU)"));
  }
  Dims d = dims_of(op, q, k, v, options);
  check_scalars(op, options, d);
  if (d.varlen) {
    // Shapes and dtypes only: the values of cu_seqlens are the call's business.
    const Tensor& cu = options.cu_seqlens_q.defined() ? options.cu_seqlens_q : options.cu_seqlens_k;
    d.batch = cu.dim() == 1 ? cu.shape()[0] - 1 : 0;
  }
  check_option_tensors(op, options, d, dtype, device);
  if (strategy == AttentionStrategy::Autotune)
    strategy = planned_autotune_strategy(op, d, dtype, options, device, false, false);
  return attn::make_plan(plan_input(op, d, dtype, options, strategy, device, false, false));
}

AttentionPlan plan_attention_backward(const Shape& q, const Shape& k, const Shape& v, DType dtype,
                                      const AttentionOptions& options, AttentionStrategy strategy,
                                      Device device) {
  const char* op = "plan_attention_backward";
  if (!common::is_float_dtype(dtype) && !(dtype == DType::f64 && device.is_cpu())) {
    fail(ErrorCode::DTypeMismatch,
         cat(op, ": dtype ", dtype_name(dtype), "; expected f32, f16 or bf16 (f64 on the CPU)"));
  }
  Dims d = dims_of(op, q, k, v, options);
  check_scalars(op, options, d);
  if (d.varlen) {
    const Tensor& cu = options.cu_seqlens_q.defined() ? options.cu_seqlens_q : options.cu_seqlens_k;
    d.batch = cu.dim() == 1 ? cu.shape()[0] - 1 : 0;
  }
  check_option_tensors(op, options, d, dtype, device);
  const bool bias_grad = options.bias.defined() && options.bias_requires_grad;
  if (strategy == AttentionStrategy::Autotune)
    strategy = planned_autotune_strategy(op, d, dtype, options, device, true, bias_grad);
  return attn::make_plan(plan_input(op, d, dtype, options, strategy, device, true, bias_grad));
}

AttentionResult attention(const Tensor& q, const Tensor& k, const Tensor& v,
                          const AttentionOptions& options, AttentionStrategy strategy,
                          const Stream& stream) {
  OpCall call("attention", "q", q, stream);
  const Checked c = check_forward_args(call, q, k, v, options);
  AttentionResult r;
  r.out = call.empty(out_shape(c.dims, options, c.dims.dim_v), q.dtype());
  if (options.return_lse) r.lse = call.empty(lse_shape(c.dims), stats_dtype(q.dtype()));
  forward_impl(call, r.out, r.lse, q, k, v, options, strategy);
  return r;
}

void attention_into(const Tensor& out, const Tensor& lse_out, const Tensor& q, const Tensor& k,
                    const Tensor& v, const AttentionOptions& options, AttentionStrategy strategy,
                    const Stream& stream) {
  OpCall call("attention", "q", q, stream);
  forward_impl(call, out, lse_out, q, k, v, options, strategy);
}

AttentionGrads attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k,
                                  const Tensor& v, const Tensor& out, const Tensor& lse,
                                  const AttentionOptions& options, AttentionStrategy strategy,
                                  const Stream& stream) {
  OpCall call("attention_backward", "q", q, stream);
  check_backward_args(call, dout, q, k, v, out, lse, options);
  AttentionGrads g;
  g.dq = call.empty(q.shape(), q.dtype());
  g.dk = call.empty(k.shape(), q.dtype());
  g.dv = call.empty(v.shape(), q.dtype());
  if (options.sinks.defined()) g.dsinks = call.empty(options.sinks.shape(), options.sinks.dtype());
  if (options.bias.defined() && options.bias_requires_grad)
    g.dbias = call.empty(options.bias.shape(), options.bias.dtype());
  backward_impl(call, g, dout, q, k, v, out, lse, options, strategy);
  return g;
}

void attention_backward_into(const AttentionGrads& grads, const Tensor& dout, const Tensor& q,
                             const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& lse,
                             const AttentionOptions& options, AttentionStrategy strategy,
                             const Stream& stream) {
  OpCall call("attention_backward", "q", q, stream);
  backward_impl(call, grads, dout, q, k, v, out, lse, options, strategy);
}

}  // namespace rudnn
