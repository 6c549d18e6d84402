// Normalization family entry points. The shared checks (common/op_call.h) and views
// (common/views.h) do the plumbing; this file keeps the family's own rules: the row input,
// eps, the affine parameters, the targets and the upstream loss gradient.
#include "rudnn/normalization.h"

#include <cmath>
#include <utility>
#include <vector>

#include "common/op_call.h"
#include "common/views.h"
#include "normalization/problem.h"
#include "normalization/reference.h"
#if RUDNN_WITH_CUDA
#include "normalization/cuda/launch.h"
#endif

namespace rudnn {

namespace {

using common::leading_shape;
using common::OpCall;
using common::require_defined;
using common::require_device;
using common::require_like;
using common::require_no_overlap;
using common::require_out;
using common::rows_in;
using common::rows_out;
using common::run_backend;
using detail::cat;
using detail::fail;
using norm::ParamIn;
using norm::ParamOut;

// ---- The family's rules ---------------------------------------------------------------------

// The row input of an op: F32/F16/BF16 (F64 on the CPU), at least 1-d, a non-empty last axis.
void require_row_input(const OpCall& call, const char* name, const Tensor& t) {
  common::require_float(call, name, t);
  if (t.dim() == 0)
    fail(ErrorCode::ShapeMismatch, cat(call.op, ": ", name, " is 0-d; expected at least one axis"));
  if (t.shape().back() == 0) {
    fail(ErrorCode::InvalidArgument, cat(call.op, ": ", name, " has an empty last axis (shape ",
                                         shape_str(t.shape()), "); expected H >= 1"));
  }
}

void require_eps(const OpCall& call, float eps) {
  common::require_finite_positive(call, "eps", eps);
}

// An optional affine parameter [H] in F32 or x's dtype.
void check_param(const OpCall& call, const char* name, const Tensor& p, int64_t cols,
                 DType x_dtype) {
  if (!p.defined()) return;
  if (p.dtype() != DType::f32 && p.dtype() != x_dtype) {
    fail(ErrorCode::DTypeMismatch, cat(call.op, ": ", name, " has dtype ", dtype_name(p.dtype()),
                                       "; expected f32 or x's dtype ", dtype_name(x_dtype)));
  }
  if (p.dim() != 1 || p.shape()[0] != cols) {
    fail(ErrorCode::ShapeMismatch, cat(call.op, ": ", name, " has shape ", shape_str(p.shape()),
                                       ", expected [H] = [", cols, "]"));
  }
  require_device(call, name, p);
}

ParamIn param_in(OpCall& call, const char* name, const Tensor& p, int64_t cols, DType x_dtype) {
  check_param(call, name, p, cols, x_dtype);
  if (!p.defined()) return ParamIn{};
  return ParamIn{common::dense_in(call, p), p.dtype() == DType::f32};
}

// An integer target per row: shape `rows_shape`, made dense when it is not.
const void* targets_in(OpCall& call, const Tensor& targets, const Shape& rows_shape) {
  require_defined(call, "targets", targets);
  if (!is_integral(targets.dtype())) {
    fail(ErrorCode::DTypeMismatch, cat(call.op, ": targets has dtype ", dtype_name(targets.dtype()),
                                       "; expected an integer dtype (i32, i64, u32, u8)"));
  }
  common::require_shape(call, "targets", targets, rows_shape, "logits.shape[:-1]");
  require_device(call, "targets", targets);
  return common::dense_in(call, targets);
}

// The loss of cross entropy is FP32, or FP64 for FP64 logits (the CPU reference).
DType loss_dtype(DType logits) { return logits == DType::f64 ? DType::f64 : DType::f32; }

// A row problem over `x` (validated as a row input).
template <class Problem>
Problem row_problem(const Tensor& x) {
  const common::RowShape shape = common::row_shape(x);
  Problem p;
  p.rows = shape.rows;
  p.cols = shape.cols;
  p.dtype = shape.dtype;
  return p;
}

Tensor empty_like_rows(const OpCall& call, const Tensor& x) {
  return call.empty(x.shape(), x.dtype());
}

// ---- Forward norms ------------------------------------------------------------------------------

// LayerNorm's per-row statistics (mean, rstd): F32, or F64 for F64 rows (the CPU reference).
DType stat_dtype(DType x) { return x == DType::f64 ? DType::f64 : DType::f32; }

// `stats`: LayerNorm's mean_out and rstd_out, when asked for.
void norm_forward_impl(OpCall& call, norm::NormKind kind, const Tensor& y_out,
                       const Tensor* sum_out, const Tensor& x, const Tensor* residual,
                       const Tensor& gamma, const Tensor& beta, float eps,
                       const LayerNormStats* stats = nullptr) {
  require_row_input(call, "x", x);
  if (residual) require_like(call, "residual", *residual, "x", x);
  require_eps(call, eps);
  auto p = row_problem<norm::NormForward>(x);
  p.kind = kind;
  p.eps = eps;
  p.gamma = param_in(call, "gamma", gamma, p.cols, x.dtype());
  p.beta = param_in(call, "beta", beta, p.cols, x.dtype());
  p.y = rows_out(call, sum_out ? "normed_out" : "out", y_out, x.shape(), x.dtype());
  require_no_overlap(call, sum_out ? "normed_out" : "out", y_out,
                     {{"x", &x}, {"gamma", &gamma}, {"beta", &beta}});
  if (residual) {
    p.sum = rows_out(call, "sum_out", *sum_out, x.shape(), x.dtype());
    require_no_overlap(call, "normed_out", y_out, {{"residual", residual}, {"sum_out", sum_out}});
    require_no_overlap(call, "sum_out", *sum_out,
                       {{"x", &x}, {"residual", residual}, {"gamma", &gamma}});
    p.residual = rows_in(call, *residual);
  }
  if (stats) {
    const Shape rows = leading_shape(x);
    const DType dt = stat_dtype(x.dtype());
    p.mean = dense_out(call, "mean_out", stats->mean, rows, dt);
    p.rstd = dense_out(call, "rstd_out", stats->rstd, rows, dt);
    for (const auto& [name, t] :
         {std::pair{"mean_out", &stats->mean}, std::pair{"rstd_out", &stats->rstd}}) {
      require_no_overlap(call, name, *t, {{"x", &x}, {"gamma", &gamma}, {"beta", &beta}});
    }
    require_no_overlap(call, "rstd_out", stats->rstd, {{"mean_out", &stats->mean}});
    require_no_overlap(call, "out", y_out,
                       {{"mean_out", &stats->mean}, {"rstd_out", &stats->rstd}});
  }
  p.x = rows_in(call, x);
  if (p.rows == 0) return;
  run_backend(call, p, RUDNN_BACKENDS(norm, norm_forward));
}

}  // namespace

void layer_norm_into(const Tensor& out, const Tensor& x, const Tensor& gamma, const Tensor& beta,
                     float eps, const Stream& stream) {
  OpCall call("layer_norm", "x", x, stream);
  norm_forward_impl(call, norm::NormKind::layer, out, nullptr, x, nullptr, gamma, beta, eps);
}

Tensor layer_norm(const Tensor& x, const Tensor& gamma, const Tensor& beta, float eps,
                  const Stream& stream) {
  OpCall call("layer_norm", "x", x, stream);
  require_row_input(call, "x", x);
  Tensor y = empty_like_rows(call, x);
  norm_forward_impl(call, norm::NormKind::layer, y, nullptr, x, nullptr, gamma, beta, eps);
  return y;
}

void layer_norm_with_stats_into(const Tensor& out, const Tensor& mean_out, const Tensor& rstd_out,
                                const Tensor& x, const Tensor& gamma, const Tensor& beta, float eps,
                                const Stream& stream) {
  OpCall call("layer_norm_with_stats", "x", x, stream);
  const LayerNormStats stats{mean_out, rstd_out};
  norm_forward_impl(call, norm::NormKind::layer, out, nullptr, x, nullptr, gamma, beta, eps,
                    &stats);
}

LayerNormWithStats layer_norm_with_stats(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                                         float eps, const Stream& stream) {
  OpCall call("layer_norm_with_stats", "x", x, stream);
  require_row_input(call, "x", x);
  const DType dt = stat_dtype(x.dtype());
  LayerNormWithStats r{empty_like_rows(call, x),
                       {call.empty(leading_shape(x), dt), call.empty(leading_shape(x), dt)}};
  norm_forward_impl(call, norm::NormKind::layer, r.y, nullptr, x, nullptr, gamma, beta, eps,
                    &r.stats);
  return r;
}

void rms_norm_into(const Tensor& out, const Tensor& x, const Tensor& gamma, float eps,
                   const Stream& stream) {
  OpCall call("rms_norm", "x", x, stream);
  norm_forward_impl(call, norm::NormKind::rms, out, nullptr, x, nullptr, gamma, Tensor(), eps);
}

Tensor rms_norm(const Tensor& x, const Tensor& gamma, float eps, const Stream& stream) {
  OpCall call("rms_norm", "x", x, stream);
  require_row_input(call, "x", x);
  Tensor y = empty_like_rows(call, x);
  norm_forward_impl(call, norm::NormKind::rms, y, nullptr, x, nullptr, gamma, Tensor(), eps);
  return y;
}

void add_rms_norm_into(const Tensor& sum_out, const Tensor& normed_out, const Tensor& x,
                       const Tensor& residual, const Tensor& gamma, float eps,
                       const Stream& stream) {
  OpCall call("add_rms_norm", "x", x, stream);
  norm_forward_impl(call, norm::NormKind::add_rms, normed_out, &sum_out, x, &residual, gamma,
                    Tensor(), eps);
}

AddRmsNormResult add_rms_norm(const Tensor& x, const Tensor& residual, const Tensor& gamma,
                              float eps, const Stream& stream) {
  OpCall call("add_rms_norm", "x", x, stream);
  require_row_input(call, "x", x);
  AddRmsNormResult r{empty_like_rows(call, x), empty_like_rows(call, x)};
  norm_forward_impl(call, norm::NormKind::add_rms, r.normed, &r.sum, x, &residual, gamma, Tensor(),
                    eps);
  return r;
}

// ---- Softmax and log-sum-exp ------------------------------------------------------------------

namespace {

void softmax_impl(OpCall& call, const Tensor& out, const Tensor& x) {
  require_row_input(call, "x", x);
  auto p = row_problem<norm::SoftmaxForward>(x);
  p.y = rows_out(call, "out", out, x.shape(), x.dtype());
  require_no_overlap(call, "out", out, {{"x", &x}});
  p.x = rows_in(call, x);
  if (p.rows == 0) return;
  run_backend(call, p, RUDNN_BACKENDS(norm, softmax_forward));
}

void logsumexp_impl(OpCall& call, const Tensor& out, const Tensor& x) {
  require_row_input(call, "x", x);
  auto p = row_problem<norm::SoftmaxForward>(x);
  p.lse = dense_out(call, "out", out, leading_shape(x), x.dtype());
  require_no_overlap(call, "out", out, {{"x", &x}});
  p.x = rows_in(call, x);
  if (p.rows == 0) return;
  run_backend(call, p, RUDNN_BACKENDS(norm, softmax_forward));
}

}  // namespace

void softmax_last_axis_into(const Tensor& out, const Tensor& x, const Stream& stream) {
  OpCall call("softmax_last_axis", "x", x, stream);
  softmax_impl(call, out, x);
}

Tensor softmax_last_axis(const Tensor& x, const Stream& stream) {
  OpCall call("softmax_last_axis", "x", x, stream);
  require_row_input(call, "x", x);
  Tensor y = empty_like_rows(call, x);
  softmax_impl(call, y, x);
  return y;
}

void logsumexp_into(const Tensor& out, const Tensor& x, const Stream& stream) {
  OpCall call("logsumexp", "x", x, stream);
  logsumexp_impl(call, out, x);
}

Tensor logsumexp(const Tensor& x, const Stream& stream) {
  OpCall call("logsumexp", "x", x, stream);
  require_row_input(call, "x", x);
  Tensor out = call.empty(leading_shape(x), x.dtype());
  logsumexp_impl(call, out, x);
  return out;
}

// ---- Cross entropy ----------------------------------------------------------------------------

namespace {

// Checks and fills what every cross-entropy form shares; the caller sets the outputs.
norm::CrossEntropy cross_entropy_problem(OpCall& call, const Tensor& logits, const Tensor& targets,
                                         const CrossEntropyOptions& options) {
  require_row_input(call, "logits", logits);
  auto p = row_problem<norm::CrossEntropy>(logits);
  p.targets = targets_in(call, targets, leading_shape(logits));
  p.target_dtype = targets.dtype();
  p.has_ignore_index = options.ignore_index.has_value();
  p.ignore_index = options.ignore_index.value_or(0);
  return p;
}

void run_cross_entropy(OpCall& call, norm::CrossEntropy& p, const Tensor& logits) {
  p.logits = rows_in(call, logits);
  if (p.rows == 0) return;
  run_backend(call, p, RUDNN_BACKENDS(norm, cross_entropy));
}

void cross_entropy_impl(OpCall& call, const Tensor& loss_out, const Tensor& logits,
                        const Tensor& targets, const CrossEntropyOptions& options) {
  norm::CrossEntropy p = cross_entropy_problem(call, logits, targets, options);
  p.loss = dense_out(call, "loss_out", loss_out, leading_shape(logits), loss_dtype(logits.dtype()));
  require_no_overlap(call, "loss_out", loss_out, {{"logits", &logits}, {"targets", &targets}});
  run_cross_entropy(call, p, logits);
}

// The per-row upstream gradient: the loss's dtype and the targets' shape on the operands'
// device, made dense when it is not.
const void* dloss_in(OpCall& call, const Tensor& dloss, const Tensor& logits,
                     const Tensor& targets) {
  common::require_dtype(call, "dloss", dloss, {loss_dtype(logits.dtype())});
  common::require_shape(call, "dloss", dloss, targets.shape(), "the targets' shape");
  return common::dense_in(call, dloss);
}

void cross_entropy_backward_impl(OpCall& call, const Tensor& dlogits_out, const Tensor& logits,
                                 const Tensor& targets, const Tensor& dloss,
                                 const CrossEntropyOptions& options) {
  norm::CrossEntropy p = cross_entropy_problem(call, logits, targets, options);
  p.dloss = dloss_in(call, dloss, logits, targets);
  p.dlogits = rows_out(call, "dlogits_out", dlogits_out, logits.shape(), logits.dtype());
  require_no_overlap(call, "dlogits_out", dlogits_out,
                     {{"logits", &logits}, {"targets", &targets}, {"dloss", &dloss}});
  run_cross_entropy(call, p, logits);
}

// grad_scale is used when dloss is undefined.
void cross_entropy_with_grad_impl(OpCall& call, const Tensor& loss_out, const Tensor& dlogits_out,
                                  const Tensor& logits, const Tensor& targets, float grad_scale,
                                  const Tensor& dloss, const CrossEntropyOptions& options) {
  norm::CrossEntropy p = cross_entropy_problem(call, logits, targets, options);
  if (dloss.defined()) {
    p.dloss = dloss_in(call, dloss, logits, targets);
  } else if (!std::isfinite(grad_scale)) {
    fail(ErrorCode::InvalidArgument, cat(call.op, ": grad_scale must be finite, got ", grad_scale));
  }
  p.grad_scale = grad_scale;
  p.loss = dense_out(call, "loss_out", loss_out, leading_shape(logits), loss_dtype(logits.dtype()));
  p.dlogits = rows_out(call, "dlogits_out", dlogits_out, logits.shape(), logits.dtype());
  require_no_overlap(call, "loss_out", loss_out,
                     {{"logits", &logits},
                      {"targets", &targets},
                      {"dlogits_out", &dlogits_out},
                      {"dloss", &dloss}});
  require_no_overlap(call, "dlogits_out", dlogits_out,
                     {{"logits", &logits}, {"targets", &targets}, {"dloss", &dloss}});
  run_cross_entropy(call, p, logits);
}

}  // namespace

void cross_entropy_into(const Tensor& loss_out, const Tensor& logits, const Tensor& targets,
                        const CrossEntropyOptions& options, const Stream& stream) {
  OpCall call("cross_entropy", "logits", logits, stream);
  cross_entropy_impl(call, loss_out, logits, targets, options);
}

Tensor cross_entropy(const Tensor& logits, const Tensor& targets,
                     const CrossEntropyOptions& options, const Stream& stream) {
  OpCall call("cross_entropy", "logits", logits, stream);
  require_row_input(call, "logits", logits);
  Tensor loss = call.empty(leading_shape(logits), loss_dtype(logits.dtype()));
  cross_entropy_impl(call, loss, logits, targets, options);
  return loss;
}

void cross_entropy_backward_into(const Tensor& dlogits_out, const Tensor& logits,
                                 const Tensor& targets, const Tensor& dloss,
                                 const CrossEntropyOptions& options, const Stream& stream) {
  OpCall call("cross_entropy_backward", "logits", logits, stream);
  cross_entropy_backward_impl(call, dlogits_out, logits, targets, dloss, options);
}

Tensor cross_entropy_backward(const Tensor& logits, const Tensor& targets, const Tensor& dloss,
                              const CrossEntropyOptions& options, const Stream& stream) {
  OpCall call("cross_entropy_backward", "logits", logits, stream);
  require_row_input(call, "logits", logits);
  Tensor dlogits = empty_like_rows(call, logits);
  cross_entropy_backward_impl(call, dlogits, logits, targets, dloss, options);
  return dlogits;
}

void cross_entropy_with_grad_into(const Tensor& loss_out, const Tensor& dlogits_out,
                                  const Tensor& logits, const Tensor& targets, float grad_scale,
                                  const CrossEntropyOptions& options, const Stream& stream) {
  OpCall call("cross_entropy_with_grad", "logits", logits, stream);
  cross_entropy_with_grad_impl(call, loss_out, dlogits_out, logits, targets, grad_scale, Tensor(),
                               options);
}

CrossEntropyWithGrad cross_entropy_with_grad(const Tensor& logits, const Tensor& targets,
                                             float grad_scale, const CrossEntropyOptions& options,
                                             const Stream& stream) {
  OpCall call("cross_entropy_with_grad", "logits", logits, stream);
  require_row_input(call, "logits", logits);
  CrossEntropyWithGrad r{call.empty(leading_shape(logits), loss_dtype(logits.dtype())),
                         empty_like_rows(call, logits)};
  cross_entropy_with_grad_impl(call, r.loss, r.dlogits, logits, targets, grad_scale, Tensor(),
                               options);
  return r;
}

void cross_entropy_with_grad_into(const Tensor& loss_out, const Tensor& dlogits_out,
                                  const Tensor& logits, const Tensor& targets, const Tensor& dloss,
                                  const CrossEntropyOptions& options, const Stream& stream) {
  OpCall call("cross_entropy_with_grad", "logits", logits, stream);
  require_defined(call, "dloss", dloss);
  cross_entropy_with_grad_impl(call, loss_out, dlogits_out, logits, targets, 1.0f, dloss, options);
}

CrossEntropyWithGrad cross_entropy_with_grad(const Tensor& logits, const Tensor& targets,
                                             const Tensor& dloss,
                                             const CrossEntropyOptions& options,
                                             const Stream& stream) {
  OpCall call("cross_entropy_with_grad", "logits", logits, stream);
  require_row_input(call, "logits", logits);
  require_defined(call, "dloss", dloss);
  CrossEntropyWithGrad r{call.empty(leading_shape(logits), loss_dtype(logits.dtype())),
                         empty_like_rows(call, logits)};
  cross_entropy_with_grad_impl(call, r.loss, r.dlogits, logits, targets, 1.0f, dloss, options);
  return r;
}

void scale_unless_one(const Tensor& x, const Tensor& scale, const Stream& stream) {
  OpCall call("scale_unless_one", "x", x, stream);
  require_row_input(call, "x", x);
  require_defined(call, "scale", scale);
  if (scale.dtype() != DType::f32 || scale.numel() != 1) {
    fail(ErrorCode::InvalidArgument,
         cat(call.op, ": scale is ", scale.str(), "; expected one f32 element"));
  }
  require_device(call, "scale", scale);
  require_no_overlap(call, "x", x, {{"scale", &scale}});
  auto p = row_problem<norm::ScaleRows>(x);
  p.x = rows_out(call, "x", x, x.shape(),
                 x.dtype());  // scaled in place: a dense last axis, one row stride
  p.scale = static_cast<const float*>(scale.data());
  if (p.rows == 0) return;
  run_backend(call, p, RUDNN_BACKENDS(norm, scale_unless_one));
}

// ---- Backward norms and softmax -----------------------------------------------------------------

namespace {

// `stats`: LayerNorm's saved statistics (then eps is not used), or null to recompute them.
void norm_backward_impl(OpCall& call, norm::NormKind kind, const Tensor& dx_out,
                        const Tensor& dgamma_out, const Tensor& dbeta_out, const Tensor& dy,
                        const Tensor& x, const Tensor& gamma, const Tensor& beta, float eps,
                        const LayerNormStats* stats = nullptr) {
  require_row_input(call, "x", x);
  require_like(call, "dy", dy, "x", x);
  if (stats) {
    for (const auto& [name, t] :
         {std::pair{"mean", &stats->mean}, std::pair{"rstd", &stats->rstd}}) {
      common::require_dtype(call, name, *t, {stat_dtype(x.dtype())});
      common::require_shape(call, name, *t, leading_shape(x), "x.shape[:-1]");
    }
  } else {
    require_eps(call, eps);
  }
  auto p = row_problem<norm::NormBackward>(x);
  p.kind = kind;
  p.eps = eps;
  p.gamma = param_in(call, "gamma", gamma, p.cols, x.dtype());
  check_param(call, "beta", beta, p.cols, x.dtype());  // only its shape and dtype matter here
  p.dx = rows_out(call, "dx_out", dx_out, x.shape(), x.dtype());
  // beta is not read, but an output written over it would still change the caller's input.
  require_no_overlap(call, "dx_out", dx_out,
                     {{"x", &x}, {"dy", &dy}, {"gamma", &gamma}, {"beta", &beta}});
  auto param_grad = [&](const char* name, const Tensor& out, const Tensor& param,
                        const char* param_name) {
    if (param.defined() != out.defined()) {
      fail(ErrorCode::InvalidArgument,
           cat(call.op, ": ", name, " must be given exactly when ", param_name, " is"));
    }
    if (!param.defined()) return ParamOut{};
    void* data = dense_out(call, name, out, param.shape(), param.dtype());
    require_no_overlap(
        call, name, out,
        {{"x", &x}, {"dy", &dy}, {"gamma", &gamma}, {"beta", &beta}, {"dx_out", &dx_out}});
    return ParamOut{data, param.dtype() == DType::f32};
  };
  p.dgamma = param_grad("dgamma_out", dgamma_out, gamma, "gamma");
  p.dbeta = param_grad("dbeta_out", dbeta_out, beta, "beta");
  if (p.dgamma.data && p.dbeta.data)
    require_no_overlap(call, "dbeta_out", dbeta_out, {{"dgamma_out", &dgamma_out}});
  if (stats) {
    for (const auto& [name, t] :
         {std::pair{"dx_out", &dx_out}, std::pair{"dgamma_out", &dgamma_out},
          std::pair{"dbeta_out", &dbeta_out}}) {
      if (t->defined())
        require_no_overlap(call, name, *t, {{"mean", &stats->mean}, {"rstd", &stats->rstd}});
    }
    p.mean = common::dense_in(call, stats->mean);
    p.rstd = common::dense_in(call, stats->rstd);
  }
  p.x = rows_in(call, x);
  p.dy = rows_in(call, dy);
  run_backend(call, p,
              RUDNN_BACKENDS(norm, norm_backward));  // also with 0 rows: the gradients are zero
}

Tensor param_grad_like(const OpCall& call, const Tensor& param) {
  return param.defined() ? call.empty(param.shape(), param.dtype()) : Tensor();
}

}  // namespace

void layer_norm_backward_into(const Tensor& dx_out, const Tensor& dgamma_out,
                              const Tensor& dbeta_out, const Tensor& dy, const Tensor& x,
                              const Tensor& gamma, const Tensor& beta, float eps,
                              const Stream& stream) {
  OpCall call("layer_norm_backward", "x", x, stream);
  norm_backward_impl(call, norm::NormKind::layer, dx_out, dgamma_out, dbeta_out, dy, x, gamma, beta,
                     eps);
}

LayerNormGrads layer_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& gamma,
                                   const Tensor& beta, float eps, const Stream& stream) {
  OpCall call("layer_norm_backward", "x", x, stream);
  require_row_input(call, "x", x);
  check_param(call, "gamma", gamma, x.shape().back(), x.dtype());
  check_param(call, "beta", beta, x.shape().back(), x.dtype());
  LayerNormGrads g{empty_like_rows(call, x), param_grad_like(call, gamma),
                   param_grad_like(call, beta)};
  norm_backward_impl(call, norm::NormKind::layer, g.dx, g.dgamma, g.dbeta, dy, x, gamma, beta, eps);
  return g;
}

void layer_norm_backward_into(const Tensor& dx_out, const Tensor& dgamma_out,
                              const Tensor& dbeta_out, const Tensor& dy, const Tensor& x,
                              const LayerNormStats& stats, const Tensor& gamma, const Tensor& beta,
                              const Stream& stream) {
  OpCall call("layer_norm_backward", "x", x, stream);
  norm_backward_impl(call, norm::NormKind::layer, dx_out, dgamma_out, dbeta_out, dy, x, gamma, beta,
                     0.0f, &stats);
}

LayerNormGrads layer_norm_backward(const Tensor& dy, const Tensor& x, const LayerNormStats& stats,
                                   const Tensor& gamma, const Tensor& beta, const Stream& stream) {
  OpCall call("layer_norm_backward", "x", x, stream);
  require_row_input(call, "x", x);
  check_param(call, "gamma", gamma, x.shape().back(), x.dtype());
  check_param(call, "beta", beta, x.shape().back(), x.dtype());
  LayerNormGrads g{empty_like_rows(call, x), param_grad_like(call, gamma),
                   param_grad_like(call, beta)};
  norm_backward_impl(call, norm::NormKind::layer, g.dx, g.dgamma, g.dbeta, dy, x, gamma, beta, 0.0f,
                     &stats);
  return g;
}

void rms_norm_backward_into(const Tensor& dx_out, const Tensor& dgamma_out, const Tensor& dy,
                            const Tensor& x, const Tensor& gamma, float eps, const Stream& stream) {
  OpCall call("rms_norm_backward", "x", x, stream);
  norm_backward_impl(call, norm::NormKind::rms, dx_out, dgamma_out, Tensor(), dy, x, gamma,
                     Tensor(), eps);
}

RmsNormGrads rms_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& gamma, float eps,
                               const Stream& stream) {
  OpCall call("rms_norm_backward", "x", x, stream);
  require_row_input(call, "x", x);
  check_param(call, "gamma", gamma, x.shape().back(), x.dtype());
  RmsNormGrads g{empty_like_rows(call, x), param_grad_like(call, gamma)};
  norm_backward_impl(call, norm::NormKind::rms, g.dx, g.dgamma, Tensor(), dy, x, gamma, Tensor(),
                     eps);
  return g;
}

namespace {

void softmax_backward_impl(OpCall& call, const Tensor& dx_out, const Tensor& dy, const Tensor& y) {
  require_row_input(call, "y", y);
  require_like(call, "dy", dy, "y", y);
  auto p = row_problem<norm::SoftmaxBackward>(y);
  p.dx = rows_out(call, "dx_out", dx_out, y.shape(), y.dtype());
  require_no_overlap(call, "dx_out", dx_out, {{"dy", &dy}, {"y", &y}});
  p.dy = rows_in(call, dy);
  p.y = rows_in(call, y);
  if (p.rows == 0) return;
  run_backend(call, p, RUDNN_BACKENDS(norm, softmax_backward));
}

}  // namespace

void softmax_backward_into(const Tensor& dx_out, const Tensor& dy, const Tensor& y,
                           const Stream& stream) {
  OpCall call("softmax_backward", "y", y, stream);
  softmax_backward_impl(call, dx_out, dy, y);
}

Tensor softmax_backward(const Tensor& dy, const Tensor& y, const Stream& stream) {
  OpCall call("softmax_backward", "y", y, stream);
  require_row_input(call, "y", y);
  Tensor dx = empty_like_rows(call, y);
  softmax_backward_impl(call, dx, dy, y);
  return dx;
}

}  // namespace rudnn
