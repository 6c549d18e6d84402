// Transformer family entry points: validation once, into the problems of problem.h. The
// shared checks (common/op_call.h) and views (common/views.h) do the plumbing; this file
// keeps the family's own rules (rope's dims, frequencies and positions; the gate/up split).
#include "rudnn/transformer.h"

#include "rudnn/normalization.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numbers>
#include <vector>

#include "common/op_call.h"
#include "common/views.h"
#include "core/strided.h"
#include "transformer/problem.h"
#include "transformer/reference.h"
#if RUDNN_WITH_CUDA
#include "transformer/cuda/launch.h"
#endif

namespace rudnn {

namespace {

using common::OpCall;
using common::require_defined;
using common::require_device;
using common::require_no_overlap;
using common::run_backend;
using detail::cat;
using detail::fail;

// =========================================================================================
// RoPE
// =========================================================================================

// x seen as [B, M, T, D] (M: the axes between B and T, collapsed): the 4-d view of the
// same memory, or nothing when the middle axes do not collapse to one stride.
std::optional<Tensor> as_bmtd(const Tensor& t) {
  const Shape& n = t.shape();
  const Shape& s = t.strides();
  const int64_t r = t.dim();
  int64_t m = 1, m_stride = 1;
  bool have = false;
  // Middle axes 1 .. r-3, innermost first: each must step over the ones inside it.
  for (int64_t a = r - 3; a >= 1; --a) {
    if (n[a] == 1) continue;
    if (!have) {
      m_stride = s[a];
      have = true;
    } else if (s[a] != m_stride * m) {
      return std::nullopt;
    }
    m *= n[a];
  }
  for (int64_t a = 1; a <= r - 3; ++a) {
    if (n[a] == 0) m = 0;
  }
  return t.as_strided({n[0], m, n[r - 2], n[r - 1]}, {s[0], m_stride, s[r - 2], s[r - 1]},
                      t.offset());
}

void require_rope_input(const OpCall& call, const char* name, const Tensor& t) {
  common::require_float(call, name, t);
  if (t.dim() < 3) {
    fail(ErrorCode::ShapeMismatch, cat(call.op, ": ", name, " has shape ", shape_str(t.shape()),
                                       "; expected at least 3 axes [B, ..., T, D]"));
  }
}

// Every option of rope against x (or dy) of shape [B, ..., T, D], into `p`.
void rope_options(OpCall& call, const Tensor& x, const RopeOptions& o, transformer::Rope& p) {
  const int64_t b = x.shape()[0], t = x.shape()[x.dim() - 2], d = x.shape().back();
  if (o.dims < 2 || o.dims % 2 != 0 || o.dims > d) {
    fail(ErrorCode::InvalidArgument,
         cat(call.op, ": dims is ", o.dims, "; expected an even number in [2, D] with D = ", d));
  }
  const bool has_base = o.base.has_value(), has_freqs = o.freqs.defined();
  if (has_base == has_freqs) {
    fail(ErrorCode::InvalidArgument,
         cat(call.op, ": base and freqs are ", has_base ? "both" : "neither",
             " given; expected exactly one of them"));
  }
  if (has_base) {
    common::require_finite_positive(call, "base", *o.base);
    p.base = *o.base;
  } else {
    common::require_dtype(call, "freqs", o.freqs, {DType::f32});
    common::require_shape(call, "freqs", o.freqs, {o.dims / 2}, "[dims / 2]");
  }
  common::require_finite(call, "scale", o.scale);
  p.scale = o.scale;
  if (o.offset < 0)
    fail(ErrorCode::InvalidArgument, cat(call.op, ": offset is ", o.offset, "; expected >= 0"));
  const int given = (o.offset != 0) + o.offsets.defined() + o.positions.defined();
  if (given > 1) {
    fail(
        ErrorCode::InvalidArgument,
        cat(call.op, ": ", o.positions.defined() ? "positions" : "offsets", " given together with ",
            o.offsets.defined() && o.positions.defined() ? "offsets" : "a non-zero offset",
            "; expected one of offset, offsets and positions"));
  }
  p.dims = o.dims;
  p.traditional = o.traditional;
  p.offset = o.offset;
  p.source = transformer::PositionSource::offset;
  if (o.offsets.defined()) {
    common::require_dtype(call, "offsets", o.offsets, {DType::i32, DType::i64});
    common::require_shape(call, "offsets", o.offsets, {b}, "[B]");
    p.source = transformer::PositionSource::offsets;
    p.position_dtype = o.offsets.dtype();
  }
  if (o.positions.defined()) {
    common::require_dtype(call, "positions", o.positions, {DType::i32, DType::i64});
    if (o.positions.shape() == Shape{t}) {
      p.source = transformer::PositionSource::positions_t;
    } else if (o.positions.shape() == Shape{b, t}) {
      p.source = transformer::PositionSource::positions_bt;
    } else {
      fail(ErrorCode::ShapeMismatch,
           cat(call.op, ": positions has shape ", shape_str(o.positions.shape()),
               ", expected [T] = [", t, "] or [B, T] = [", b, ", ", t, "]"));
    }
    p.position_dtype = o.positions.dtype();
  }
}

// An output of x's shape seen as [B, M, T, D]: a dense last axis, middle axes that collapse,
// rows that do not overlap.
common::BshdOut rope_out(const OpCall& call, const char* name, const Tensor& out) {
  const std::optional<Tensor> out4 = as_bmtd(out);
  if (!out4) {
    fail(ErrorCode::InvalidArgument,
         cat(call.op, ": ", name, " has strides ", shape_str(out.strides()),
             "; an output needs its axes between B and T to collapse to one stride"));
  }
  return common::bshd_out(call, name, *out4, common::Axes4::bhsd);
}

// `in_place`: out is x itself (norm_rope's second step; never from the public rope
// functions): each pair is read before it is written, by the same thread.
void rope_impl(OpCall& call, const Tensor& out, const Tensor& x, const RopeOptions& o, bool inverse,
               const char* x_name, const char* out_name, bool in_place = false) {
  require_rope_input(call, x_name, x);
  transformer::Rope p;
  p.dtype = x.dtype();
  p.inverse = inverse;
  rope_options(call, x, o, p);
  common::require_out(call, out_name, out, x.shape(), x.dtype());
  const Tensor none;
  require_no_overlap(call, out_name, out,
                     {{x_name, in_place ? &none : &x},
                      {"freqs", &o.freqs},
                      {"offsets", &o.offsets},
                      {"positions", &o.positions}});
  p.y = rope_out(call, out_name, out);
  if (x.numel() == 0) return;
  std::optional<Tensor> x4 = as_bmtd(x);
  if (!x4) x4 = as_bmtd(call.keep(x.contiguous(call.stream)));
  p.x = common::bshd_in(call, x_name, *x4, common::Axes4::bhsd);
  if (o.freqs.defined()) p.freqs = static_cast<const float*>(common::dense_in(call, o.freqs));
  if (o.offsets.defined()) p.positions = common::dense_in(call, o.offsets);
  if (o.positions.defined()) p.positions = common::dense_in(call, o.positions);
  run_backend(call, p, RUDNN_BACKENDS(transformer, rope));
}

}  // namespace

void rope_into(const Tensor& out, const Tensor& x, const RopeOptions& options,
               const Stream& stream) {
  OpCall call("rope", "x", x, stream);
  rope_impl(call, out, x, options, false, "x", "out");
}

Tensor rope(const Tensor& x, const RopeOptions& options, const Stream& stream) {
  OpCall call("rope", "x", x, stream);
  require_rope_input(call, "x", x);
  const Tensor y = call.empty(x.shape(), x.dtype());
  rope_impl(call, y, x, options, false, "x", "out");
  return y;
}

void rope_backward_into(const Tensor& dx_out, const Tensor& dy, const RopeOptions& options,
                        const Stream& stream) {
  OpCall call("rope_backward", "dy", dy, stream);
  rope_impl(call, dx_out, dy, options, true, "dy", "dx_out");
}

Tensor rope_backward(const Tensor& dy, const RopeOptions& options, const Stream& stream) {
  OpCall call("rope_backward", "dy", dy, stream);
  require_rope_input(call, "dy", dy);
  const Tensor dx = call.empty(dy.shape(), dy.dtype());
  rope_impl(call, dx, dy, options, true, "dy", "dx_out");
  return dx;
}

// ---- Norm + RoPE + cache write ------------------------------------------------------------------

namespace {

// The norm's weight and eps under norm_rope's name (rms_norm's own rules).
void check_rope_norm(const OpCall& call, const Tensor& x, const std::optional<RopeNorm>& norm) {
  if (!norm) return;
  common::require_finite_positive(call, "eps", norm->eps);
  const Tensor& w = norm->weight;
  if (!w.defined()) return;
  if (w.dtype() != DType::f32 && w.dtype() != x.dtype()) {
    fail(ErrorCode::DTypeMismatch, cat(call.op, ": weight has dtype ", dtype_name(w.dtype()),
                                       "; expected f32 or x's dtype ", dtype_name(x.dtype())));
  }
  common::require_shape(call, "weight", w, {x.shape().back()}, "[D]");
  require_device(call, "weight", w);
}

void check_rope_rotation(const OpCall& call, const RopeOptions& o) {
  if (o.offsets.defined() || o.positions.defined()) {
    fail(ErrorCode::InvalidArgument,
         cat(call.op, ": rotation has ", o.offsets.defined() ? "offsets" : "positions",
             "; expected a scalar offset (positions offset .. offset + L)"));
  }
}

#if RUDNN_WITH_CUDA
// The fused kernel (problem.h NormRope) where its bits are the composition's: a CUDA device,
// D a multiple of the 16-byte vector W with at most 128 vectors (rms_norm's warp tiles),
// halves pairs a multiple of W apart (interleaved pairs always lie in one vector), every
// pointer and stride of x (as read), dest and the weight aligned to W elements. Returns
// whether it ran; when not, nothing was launched.
bool norm_rope_fused(OpCall& call, const Tensor& dest, const char* dest_name, const Tensor& x,
                     const RopeNorm& norm, const RopeOptions& o) {
  if (!call.device.is_cuda() || !transformer::cuda::norm_rope_available(call.device)) return false;
  const int64_t w = 16 / static_cast<int64_t>(x.itemsize()), d = x.shape().back();
  if (d % w != 0 || d / w > 128) return false;
  if (!o.traditional && (o.dims / 2) % w != 0) return false;  // halves whole vectors apart
  transformer::NormRope q;
  q.rope.dtype = x.dtype();
  rope_options(call, x, o, q.rope);
  q.rope.y = rope_out(call, dest_name, dest);
  auto aligned = [&](const auto& view) {
    const auto& n = view.shape;
    return reinterpret_cast<uintptr_t>(view.data) % 16 == 0 &&
           (n.batch <= 1 || view.batch_stride % w == 0) &&
           (n.seq <= 1 || view.seq_stride % w == 0) && (n.heads <= 1 || view.head_stride % w == 0);
  };
  if (!aligned(q.rope.y)) return false;
  if (norm.weight.defined()) {
    if (norm.weight.is_contiguous() && reinterpret_cast<uintptr_t>(norm.weight.data()) % 16 != 0)
      return false;
    q.weight = common::dense_in(call, norm.weight);
    q.weight_f32 = norm.weight.dtype() == DType::f32;
  }
  std::optional<Tensor> x4 = as_bmtd(x);
  if (!x4) x4 = as_bmtd(call.keep(x.contiguous(call.stream)));
  q.rope.x = common::bshd_in(call, "x", *x4, common::Axes4::bhsd);
  if (!aligned(q.rope.x)) return false;
  if (o.freqs.defined()) q.rope.freqs = static_cast<const float*>(common::dense_in(call, o.freqs));
  q.eps = norm.eps;
  transformer::cuda::norm_rope(q, call.stream);
  return true;
}
#endif

// rms_norm (when asked for) of x, then its rotation written into `dest`.
void norm_rope_run(OpCall& call, const Tensor& dest, const char* dest_name, const Tensor& x,
                   const std::optional<RopeNorm>& norm, const RopeOptions& o) {
  rope_out(call, dest_name, dest);  // refused before the norm runs
  if (!norm || x.numel() == 0) {
    rope_impl(call, dest, x, o, false, "x", dest_name);
    return;
  }
#if RUDNN_WITH_CUDA
  if (norm_rope_fused(call, dest, dest_name, x, *norm, o)) return;
#endif
  // A destination laid out as a new tensor would be (dense rows, 16-byte aligned: the
  // norm's kernels choose their tile by alignment, and the bits must be those of rms_norm
  // into a new tensor) takes the norm and is rotated in place, with no temporary.
  // Otherwise (a cache slice of several heads, say) the norm goes into a temporary.
  const auto rows = detail::row_layout(dest);
  if (rows && rows->row_stride == rows->cols &&
      reinterpret_cast<uintptr_t>(dest.data()) % 16 == 0) {
    rms_norm_into(dest, x, norm->weight, norm->eps, call.stream);
    rope_impl(call, dest, dest, o, false, "x", dest_name, true);
    return;
  }
  const Tensor& normed = call.keep(rms_norm(x, norm->weight, norm->eps, call.stream));
  rope_impl(call, dest, normed, o, false, "x", dest_name);
}

}  // namespace

Tensor norm_rope(const Tensor& x, const std::optional<RopeNorm>& norm, const RopeOptions& rotation,
                 const Tensor& cache, const Stream& stream) {
  OpCall call("norm_rope", "x", x, stream);
  require_rope_input(call, "x", x);
  check_rope_rotation(call, rotation);
  {
    transformer::Rope probe;
    rope_options(call, x, rotation, probe);
  }
  check_rope_norm(call, x, norm);
  if (!cache.defined()) {
    const Tensor y = call.empty(x.shape(), x.dtype());
    norm_rope_run(call, y, "out", x, norm, rotation);
    return y;
  }
  if (x.dim() != 4) {
    fail(ErrorCode::ShapeMismatch, cat(call.op, ": x has shape ", shape_str(x.shape()),
                                       "; with a cache x must be [B, H, L, D]"));
  }
  if (cache.dtype() != x.dtype()) {
    fail(ErrorCode::DTypeMismatch, cat(call.op, ": cache has dtype ", dtype_name(cache.dtype()),
                                       ", x has ", dtype_name(x.dtype()), "; they must match"));
  }
  const Shape& n = x.shape();
  if (cache.dim() != 4 || cache.shape()[0] != n[0] || cache.shape()[1] != n[1] ||
      cache.shape()[3] != n[3]) {
    fail(ErrorCode::ShapeMismatch,
         cat(call.op, ": cache has shape ", shape_str(cache.shape()), ", expected [B, H, C, D] = [",
             n[0], ", ", n[1], ", C, ", n[3], "]"));
  }
  if (cache.shape()[2] < rotation.offset + n[2]) {
    fail(ErrorCode::ShapeMismatch,
         cat(call.op, ": cache holds C = ", cache.shape()[2],
             " positions; offset + L = ", rotation.offset + n[2], " are needed"));
  }
  require_device(call, "cache", cache);
  const Tensor* weight = norm ? &norm->weight : nullptr;
  const Tensor none;
  require_no_overlap(call, "cache", cache, {{"x", &x}, {"weight", weight ? weight : &none}});
  norm_rope_run(call, cache.slice(2, rotation.offset, rotation.offset + n[2]), "cache", x, norm,
                rotation);
  return cache;
}

void norm_rope_into(const Tensor& out, const Tensor& x, const std::optional<RopeNorm>& norm,
                    const RopeOptions& rotation, const Stream& stream) {
  OpCall call("norm_rope", "x", x, stream);
  require_rope_input(call, "x", x);
  check_rope_rotation(call, rotation);
  {
    transformer::Rope probe;
    rope_options(call, x, rotation, probe);
  }
  check_rope_norm(call, x, norm);
  common::require_out(call, "out", out, x.shape(), x.dtype());
  const Tensor* weight = norm ? &norm->weight : nullptr;
  const Tensor none;
  require_no_overlap(call, "out", out, {{"x", &x}, {"weight", weight ? weight : &none}});
  norm_rope_run(call, out, "out", x, norm, rotation);
}

// ---- Frequency scaling helpers ------------------------------------------------------------------

namespace {

void require_freq_basics(const char* op, int64_t dims, float base) {
  if (dims < 2 || dims % 2 != 0) {
    fail(ErrorCode::InvalidArgument, cat(op, ": dims is ", dims, "; expected an even number >= 2"));
  }
  if (!(std::isfinite(base) && base > 1.0f)) {
    fail(ErrorCode::InvalidArgument, cat(op, ": base must be finite and > 1, got ", base));
  }
}

void require_factor(const char* op, const char* name, float v) {
  if (!(std::isfinite(v) && v > 0.0f))
    fail(ErrorCode::InvalidArgument, cat(op, ": ", name, " must be finite and > 0, got ", v));
}

Tensor freqs_tensor(const std::vector<double>& inv_freq, Device device, const Stream& stream) {
  std::vector<float> f(inv_freq.size());
  for (size_t j = 0; j < f.size(); ++j) f[j] = static_cast<float>(1.0 / inv_freq[j]);
  const Tensor host = Tensor::from_host(f, {static_cast<int64_t>(f.size())});
  return device.is_cpu() ? host : host.to(device, stream);
}

std::vector<double> base_inv_freq(int64_t dims, double base) {
  std::vector<double> w(static_cast<size_t>(dims / 2));
  for (int64_t j = 0; j < dims / 2; ++j)
    w[j] = std::pow(base, -2.0 * static_cast<double>(j) / static_cast<double>(dims));
  return w;
}

}  // namespace

Tensor rope_llama3_freqs(int64_t dims, float base, const Llama3RopeScaling& s, Device device,
                         const Stream& stream) {
  const char* op = "rope_llama3_freqs";
  require_freq_basics(op, dims, base);
  require_factor(op, "factor", s.factor);
  require_factor(op, "low_freq_factor", s.low_freq_factor);
  require_factor(op, "high_freq_factor", s.high_freq_factor);
  if (!(s.high_freq_factor > s.low_freq_factor)) {
    fail(ErrorCode::InvalidArgument,
         cat(op, ": high_freq_factor (", s.high_freq_factor, ") must exceed low_freq_factor (",
             s.low_freq_factor, ")"));
  }
  if (s.original_max_position < 1) {
    fail(ErrorCode::InvalidArgument,
         cat(op, ": original_max_position is ", s.original_max_position, "; expected >= 1"));
  }
  const double l = static_cast<double>(s.original_max_position);
  const double lo = s.low_freq_factor, hi = s.high_freq_factor, factor = s.factor;
  const double wl_hi = l / hi, wl_lo = l / lo;
  std::vector<double> w = base_inv_freq(dims, base);
  for (double& v : w) {
    const double wavelength = 2.0 * std::numbers::pi / v;
    if (wavelength < wl_hi) continue;
    if (wavelength > wl_lo) {
      v /= factor;
    } else {
      const double smooth = (l / wavelength - lo) / (hi - lo);
      v = (1.0 - smooth) * v / factor + smooth * v;
    }
  }
  return freqs_tensor(w, device, stream);
}

YarnFreqs rope_yarn_freqs(int64_t dims, float base, const YarnRopeScaling& s, Device device,
                          const Stream& stream) {
  const char* op = "rope_yarn_freqs";
  require_freq_basics(op, dims, base);
  require_factor(op, "factor", s.factor);
  require_factor(op, "beta_fast", s.beta_fast);
  require_factor(op, "beta_slow", s.beta_slow);
  if (!(s.beta_fast > s.beta_slow)) {
    fail(ErrorCode::InvalidArgument,
         cat(op, ": beta_fast (", s.beta_fast, ") must exceed beta_slow (", s.beta_slow, ")"));
  }
  if (s.original_max_position < 1) {
    fail(ErrorCode::InvalidArgument,
         cat(op, ": original_max_position is ", s.original_max_position, "; expected >= 1"));
  }
  for (float v : {s.mscale, s.mscale_all_dim, s.attention_factor}) {
    if (!std::isfinite(v))
      fail(ErrorCode::InvalidArgument,
           cat(op, ": mscale, mscale_all_dim and attention_factor must be finite"));
  }
  const double d = static_cast<double>(dims), b = base,
               l = static_cast<double>(s.original_max_position);
  const auto correction_dim = [&](double rotations) {
    return d * std::log(l / (rotations * 2.0 * std::numbers::pi)) / (2.0 * std::log(b));
  };
  double lo = correction_dim(s.beta_fast), hi = correction_dim(s.beta_slow);
  if (s.truncate) {
    lo = std::floor(lo);
    hi = std::ceil(hi);
  }
  lo = std::max(lo, 0.0);
  hi = std::min(hi, d - 1.0);
  if (lo == hi) hi += 0.001;
  std::vector<double> w = base_inv_freq(dims, base);
  for (int64_t j = 0; j < dims / 2; ++j) {
    const double ramp = std::clamp((static_cast<double>(j) - lo) / (hi - lo), 0.0, 1.0);
    const double extrapolation = 1.0 - ramp;
    w[j] = w[j] / s.factor * (1.0 - extrapolation) + w[j] * extrapolation;
  }
  const auto m = [](double scale, double k) {
    return scale <= 1.0 ? 1.0 : 0.1 * k * std::log(scale) + 1.0;
  };
  double attention = 0;
  if (s.attention_factor > 0) {
    attention = s.attention_factor;
  } else if (s.mscale != 0 && s.mscale_all_dim != 0) {
    attention = m(s.factor, s.mscale) / m(s.factor, s.mscale_all_dim);
  } else {
    attention = m(s.factor, 1.0);
  }
  return YarnFreqs{freqs_tensor(w, device, stream), static_cast<float>(attention)};
}

// =========================================================================================
// Gated activations
// =========================================================================================

namespace {

using transformer::GluKind;

GluKind geglu_kind(GeluApproximate a) {
  return a == GeluApproximate::tanh ? GluKind::geglu_tanh : GluKind::geglu_erf;
}

void require_glu_input(const OpCall& call, const char* name, const Tensor& t) {
  common::require_float(call, name, t);
  if (t.dim() == 0)
    fail(ErrorCode::ShapeMismatch, cat(call.op, ": ", name, " is 0-d; expected at least one axis"));
}

// The one-tensor form's x [..., 2I]: its gate and up halves.
struct Halves {
  Tensor gate, up;
  Shape half_shape;
};
Halves split_halves(const OpCall& call, const Tensor& x) {
  require_glu_input(call, "x", x);
  const int64_t two_i = x.shape().back();
  if (two_i % 2 != 0) {
    fail(ErrorCode::InvalidArgument,
         cat(call.op, ": x has shape ", shape_str(x.shape()),
             "; its last axis holds gate and up halves and must be even"));
  }
  Halves h;
  h.gate = x.slice(-1, 0, two_i / 2);
  h.up = x.slice(-1, two_i / 2, two_i);
  h.half_shape = h.gate.shape();
  return h;
}

// A second operand of `ref`'s dtype with the given shape (dy of the one-tensor form).
void require_dtype_of(const OpCall& call, const char* name, const Tensor& t, const char* ref_name,
                      const Tensor& ref) {
  require_defined(call, name, t);
  if (t.dtype() != ref.dtype()) {
    fail(ErrorCode::DTypeMismatch,
         cat(call.op, ": ", name, " has dtype ", dtype_name(t.dtype()), ", ", ref_name, " has ",
             dtype_name(ref.dtype()), "; they must match"));
  }
  require_device(call, name, t);
}

template <class Problem>
Problem glu_shape(const Tensor& gate) {
  Problem p;
  p.cols = gate.shape().back();
  p.rows = p.cols == 0 ? 0 : gate.numel() / p.cols;
  p.dtype = gate.dtype();
  return p;
}

// Forward over validated gate/up (x: the one-tensor input, else undefined; its halves are
// gate and up).
void glu_forward_impl(OpCall& call, GluKind kind, const Tensor& out, const Tensor& gate,
                      const Tensor& up, const Tensor& x) {
  auto p = glu_shape<transformer::GluForward>(gate);
  p.kind = kind;
  p.y = common::rows_out(call, "out", out, gate.shape(), gate.dtype());
  if (x.defined()) {
    require_no_overlap(call, "out", out, {{"x", &x}});
  } else {
    require_no_overlap(call, "out", out, {{"gate", &gate}, {"up", &up}});
  }
  if (p.rows == 0) return;
  p.gate = common::rows_in(call, gate);
  p.up = common::rows_in(call, up);
  run_backend(call, p, RUDNN_BACKENDS(transformer, glu_forward));
}

void glu_two(OpCall& call, GluKind kind, const Tensor& out, const Tensor& gate, const Tensor& up) {
  require_glu_input(call, "gate", gate);
  common::require_like(call, "up", up, "gate", gate);
  glu_forward_impl(call, kind, out, gate, up, Tensor());
}

void glu_one(OpCall& call, GluKind kind, const Tensor& out, const Tensor& x) {
  const Halves h = split_halves(call, x);
  glu_forward_impl(call, kind, out, h.gate, h.up, x);
}

Tensor glu_two_new(OpCall& call, GluKind kind, const Tensor& gate, const Tensor& up) {
  require_glu_input(call, "gate", gate);
  const Tensor y = call.empty(gate.shape(), gate.dtype());
  glu_two(call, kind, y, gate, up);
  return y;
}

Tensor glu_one_new(OpCall& call, GluKind kind, const Tensor& x) {
  const Halves h = split_halves(call, x);
  const Tensor y = call.empty(h.half_shape, x.dtype());
  glu_one(call, kind, y, x);
  return y;
}

void glu_backward_run(OpCall& call, GluKind kind, const Tensor& dy, const Tensor& gate,
                      const Tensor& up, const Tensor& dgate, const Tensor& dup,
                      const char* dgate_name, const char* dup_name) {
  auto p = glu_shape<transformer::GluBackward>(gate);
  p.kind = kind;
  p.dgate = common::rows_out(call, dgate_name, dgate, gate.shape(), gate.dtype());
  p.dup = common::rows_out(call, dup_name, dup, gate.shape(), gate.dtype());
  if (p.rows == 0) return;
  p.dy = common::rows_in(call, dy);
  p.gate = common::rows_in(call, gate);
  p.up = common::rows_in(call, up);
  run_backend(call, p, RUDNN_BACKENDS(transformer, glu_backward));
}

void glu_backward_two(OpCall& call, GluKind kind, const Tensor& dgate_out, const Tensor& dup_out,
                      const Tensor& dy, const Tensor& gate, const Tensor& up) {
  require_glu_input(call, "gate", gate);
  common::require_like(call, "up", up, "gate", gate);
  common::require_like(call, "dy", dy, "gate", gate);
  common::require_out(call, "dgate_out", dgate_out, gate.shape(), gate.dtype());
  common::require_out(call, "dup_out", dup_out, gate.shape(), gate.dtype());
  require_no_overlap(call, "dgate_out", dgate_out,
                     {{"dy", &dy}, {"gate", &gate}, {"up", &up}, {"dup_out", &dup_out}});
  require_no_overlap(call, "dup_out", dup_out, {{"dy", &dy}, {"gate", &gate}, {"up", &up}});
  glu_backward_run(call, kind, dy, gate, up, dgate_out, dup_out, "dgate_out", "dup_out");
}

void glu_backward_one(OpCall& call, GluKind kind, const Tensor& dx_out, const Tensor& dy,
                      const Tensor& x) {
  const Halves h = split_halves(call, x);
  require_dtype_of(call, "dy", dy, "x", x);
  common::require_shape(call, "dy", dy, h.half_shape, "x.shape[:-1] + [I]");
  common::require_out(call, "dx_out", dx_out, x.shape(), x.dtype());
  require_no_overlap(call, "dx_out", dx_out, {{"dy", &dy}, {"x", &x}});
  const int64_t i = h.half_shape.back();
  glu_backward_run(call, kind, dy, h.gate, h.up, dx_out.slice(-1, 0, i), dx_out.slice(-1, i, 2 * i),
                   "dx_out", "dx_out");
}

}  // namespace

Tensor swiglu(const Tensor& gate, const Tensor& up, const Stream& stream) {
  OpCall call("swiglu", "gate", gate, stream);
  return glu_two_new(call, GluKind::swiglu, gate, up);
}
Tensor swiglu(const Tensor& x, const Stream& stream) {
  OpCall call("swiglu", "x", x, stream);
  return glu_one_new(call, GluKind::swiglu, x);
}
void swiglu_into(const Tensor& out, const Tensor& gate, const Tensor& up, const Stream& stream) {
  OpCall call("swiglu", "gate", gate, stream);
  glu_two(call, GluKind::swiglu, out, gate, up);
}
void swiglu_into(const Tensor& out, const Tensor& x, const Stream& stream) {
  OpCall call("swiglu", "x", x, stream);
  glu_one(call, GluKind::swiglu, out, x);
}

Tensor geglu(const Tensor& gate, const Tensor& up, GeluApproximate approximate,
             const Stream& stream) {
  OpCall call("geglu", "gate", gate, stream);
  return glu_two_new(call, geglu_kind(approximate), gate, up);
}
Tensor geglu(const Tensor& x, GeluApproximate approximate, const Stream& stream) {
  OpCall call("geglu", "x", x, stream);
  return glu_one_new(call, geglu_kind(approximate), x);
}
void geglu_into(const Tensor& out, const Tensor& gate, const Tensor& up,
                GeluApproximate approximate, const Stream& stream) {
  OpCall call("geglu", "gate", gate, stream);
  glu_two(call, geglu_kind(approximate), out, gate, up);
}
void geglu_into(const Tensor& out, const Tensor& x, GeluApproximate approximate,
                const Stream& stream) {
  OpCall call("geglu", "x", x, stream);
  glu_one(call, geglu_kind(approximate), out, x);
}

namespace {

GluGrads glu_backward_two_new(OpCall& call, GluKind kind, const Tensor& dy, const Tensor& gate,
                              const Tensor& up) {
  require_glu_input(call, "gate", gate);
  GluGrads g{call.empty(gate.shape(), gate.dtype()), call.empty(gate.shape(), gate.dtype())};
  glu_backward_two(call, kind, g.dgate, g.dup, dy, gate, up);
  return g;
}

Tensor glu_backward_one_new(OpCall& call, GluKind kind, const Tensor& dy, const Tensor& x) {
  require_glu_input(call, "x", x);
  const Tensor dx = call.empty(x.shape(), x.dtype());
  glu_backward_one(call, kind, dx, dy, x);
  return dx;
}

}  // namespace

GluGrads swiglu_backward(const Tensor& dy, const Tensor& gate, const Tensor& up,
                         const Stream& stream) {
  OpCall call("swiglu_backward", "gate", gate, stream);
  return glu_backward_two_new(call, GluKind::swiglu, dy, gate, up);
}
Tensor swiglu_backward(const Tensor& dy, const Tensor& x, const Stream& stream) {
  OpCall call("swiglu_backward", "x", x, stream);
  return glu_backward_one_new(call, GluKind::swiglu, dy, x);
}
void swiglu_backward_into(const Tensor& dgate_out, const Tensor& dup_out, const Tensor& dy,
                          const Tensor& gate, const Tensor& up, const Stream& stream) {
  OpCall call("swiglu_backward", "gate", gate, stream);
  glu_backward_two(call, GluKind::swiglu, dgate_out, dup_out, dy, gate, up);
}
void swiglu_backward_into(const Tensor& dx_out, const Tensor& dy, const Tensor& x,
                          const Stream& stream) {
  OpCall call("swiglu_backward", "x", x, stream);
  glu_backward_one(call, GluKind::swiglu, dx_out, dy, x);
}

GluGrads geglu_backward(const Tensor& dy, const Tensor& gate, const Tensor& up,
                        GeluApproximate approximate, const Stream& stream) {
  OpCall call("geglu_backward", "gate", gate, stream);
  return glu_backward_two_new(call, geglu_kind(approximate), dy, gate, up);
}
Tensor geglu_backward(const Tensor& dy, const Tensor& x, GeluApproximate approximate,
                      const Stream& stream) {
  OpCall call("geglu_backward", "x", x, stream);
  return glu_backward_one_new(call, geglu_kind(approximate), dy, x);
}
void geglu_backward_into(const Tensor& dgate_out, const Tensor& dup_out, const Tensor& dy,
                         const Tensor& gate, const Tensor& up, GeluApproximate approximate,
                         const Stream& stream) {
  OpCall call("geglu_backward", "gate", gate, stream);
  glu_backward_two(call, geglu_kind(approximate), dgate_out, dup_out, dy, gate, up);
}
void geglu_backward_into(const Tensor& dx_out, const Tensor& dy, const Tensor& x,
                         GeluApproximate approximate, const Stream& stream) {
  OpCall call("geglu_backward", "x", x, stream);
  glu_backward_one(call, geglu_kind(approximate), dx_out, dy, x);
}

}  // namespace rudnn
