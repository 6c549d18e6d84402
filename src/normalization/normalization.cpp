// Normalization family entry points: every argument is validated here, once, then
// normalised into a problem struct (problem.h) for the CPU reference or the CUDA kernels.
#include "rudnn/normalization.h"

#include <cmath>
#include <initializer_list>
#include <vector>

#include "core/check.h"
#include "core/strided.h"
#include "normalization/problem.h"
#include "normalization/reference.h"
#if RUDNN_WITH_CUDA
#include "normalization/cuda/launch.h"
#endif

namespace rudnn {

namespace {

using detail::cat;
using detail::fail;
using norm::ParamIn;
using norm::ParamOut;
using norm::RowsIn;
using norm::RowsOut;

// One call's device, stream, and the temporaries (dense copies of odd layouts) that must
// live until its work is queued; their storage is freed stream-ordered after the kernels.
struct Call {
  const char* op;
  Device device;
  Stream stream;
  std::vector<Tensor> temporaries;

  Call(const char* op_name, const Tensor& first, const Stream& s)
      : op(op_name), device(first.device()), stream(resolve_stream(s, first.device(), op_name)) {}
};

// ---- Input checks -------------------------------------------------------------------------

void require_defined(const Call& call, const char* name, const Tensor& t) {
  if (!t.defined()) fail(ErrorCode::InvalidArgument, cat(call.op, ": ", name, " is an undefined tensor"));
}

bool is_float_dtype(DType d) { return d == DType::f32 || d == DType::f16 || d == DType::bf16; }

void require_device(const Call& call, const char* name, const Tensor& t) {
  if (t.device() != call.device) {
    fail(ErrorCode::DeviceMismatch, cat(call.op, ": ", name, " is on ", t.device().str(), ", the operands on ",
                                        call.device.str()));
  }
}

// The row input of an op: F32/F16/BF16, at least 1-d, a non-empty last axis.
void require_row_input(const Call& call, const char* name, const Tensor& t) {
  require_defined(call, name, t);
  if (!is_float_dtype(t.dtype())) {
    fail(ErrorCode::DTypeMismatch, cat(call.op, ": ", name, " has dtype ", dtype_name(t.dtype()),
                                       "; expected f32, f16 or bf16"));
  }
  if (t.dim() == 0) fail(ErrorCode::ShapeMismatch, cat(call.op, ": ", name, " is 0-d; expected at least one axis"));
  if (t.shape().back() == 0) {
    fail(ErrorCode::InvalidArgument, cat(call.op, ": ", name, " has an empty last axis (shape ",
                                         shape_str(t.shape()), "); expected H >= 1"));
  }
  require_device(call, name, t);
}

// A second operand that must match the first in shape and dtype (dy vs x, residual vs x).
void require_like(const Call& call, const char* name, const Tensor& t, const char* ref_name, const Tensor& ref) {
  require_defined(call, name, t);
  if (t.dtype() != ref.dtype()) {
    fail(ErrorCode::DTypeMismatch, cat(call.op, ": ", name, " has dtype ", dtype_name(t.dtype()), ", ", ref_name,
                                       " has ", dtype_name(ref.dtype()), "; they must match"));
  }
  if (t.shape() != ref.shape()) {
    fail(ErrorCode::ShapeMismatch, cat(call.op, ": ", name, " has shape ", shape_str(t.shape()), ", ", ref_name,
                                       " has ", shape_str(ref.shape()), "; they must match"));
  }
  require_device(call, name, t);
}

void require_eps(const Call& call, float eps) {
  if (!(std::isfinite(eps) && eps > 0.0f)) {
    fail(ErrorCode::InvalidArgument, cat(call.op, ": eps must be finite and > 0, got ", eps));
  }
}

// Rows of an input, read in place when the layout allows, else from a dense copy.
RowsIn rows_in(Call& call, const Tensor& t) {
  auto layout = detail::row_layout(t);
  if (!layout) {
    call.temporaries.push_back(t.contiguous(call.stream));
    layout = detail::row_layout(call.temporaries.back());
    return RowsIn{call.temporaries.back().data(), layout->row_stride};
  }
  return RowsIn{t.data(), layout->row_stride};
}

// An optional affine parameter [H] in F32 or x's dtype.
void check_param(const Call& call, const char* name, const Tensor& p, int64_t cols, DType x_dtype) {
  if (!p.defined()) return;
  if (p.dtype() != DType::f32 && p.dtype() != x_dtype) {
    fail(ErrorCode::DTypeMismatch, cat(call.op, ": ", name, " has dtype ", dtype_name(p.dtype()),
                                       "; expected f32 or x's dtype ", dtype_name(x_dtype)));
  }
  if (p.dim() != 1 || p.shape()[0] != cols) {
    fail(ErrorCode::ShapeMismatch, cat(call.op, ": ", name, " has shape ", shape_str(p.shape()), ", expected [H] = [",
                                       cols, "]"));
  }
  require_device(call, name, p);
}

ParamIn param_in(Call& call, const char* name, const Tensor& p, int64_t cols, DType x_dtype) {
  check_param(call, name, p, cols, x_dtype);
  if (!p.defined()) return ParamIn{};
  if (!p.is_contiguous()) {
    call.temporaries.push_back(p.contiguous(call.stream));
    return ParamIn{call.temporaries.back().data(), p.dtype() == DType::f32};
  }
  return ParamIn{p.data(), p.dtype() == DType::f32};
}

// An integer target per row: shape `rows_shape`, made dense when it is not.
const void* targets_in(Call& call, const Tensor& targets, const Shape& rows_shape) {
  require_defined(call, "targets", targets);
  if (!is_integral(targets.dtype())) {
    fail(ErrorCode::DTypeMismatch, cat(call.op, ": targets has dtype ", dtype_name(targets.dtype()),
                                       "; expected an integer dtype (i32, i64, u32, u8)"));
  }
  if (targets.shape() != rows_shape) {
    fail(ErrorCode::ShapeMismatch, cat(call.op, ": targets has shape ", shape_str(targets.shape()),
                                       ", expected logits.shape[:-1] = ", shape_str(rows_shape)));
  }
  require_device(call, "targets", targets);
  if (targets.is_contiguous()) return targets.data();
  call.temporaries.push_back(targets.contiguous(call.stream));
  return call.temporaries.back().data();
}

// ---- Output checks (the _into forms) -----------------------------------------------------------

void require_no_overlap(const Call& call, const char* name, const Tensor& out,
                        std::initializer_list<std::pair<const char*, const Tensor*>> others) {
  for (const auto& [other_name, other] : others) {
    if (detail::may_overlap(out, *other)) {
      fail(ErrorCode::InvalidArgument, cat(call.op, ": ", name, " overlaps ", other_name,
                                           "; outputs must not alias inputs or each other"));
    }
  }
}

void require_out(const Call& call, const char* name, const Tensor& out, const Shape& shape, DType dtype) {
  if (!out.defined()) fail(ErrorCode::InvalidArgument, cat(call.op, ": ", name, " is an undefined tensor"));
  if (out.dtype() != dtype) {
    fail(ErrorCode::DTypeMismatch, cat(call.op, ": ", name, " has dtype ", dtype_name(out.dtype()), ", expected ",
                                       dtype_name(dtype)));
  }
  if (out.shape() != shape) {
    fail(ErrorCode::ShapeMismatch, cat(call.op, ": ", name, " has shape ", shape_str(out.shape()), ", expected ",
                                       shape_str(shape)));
  }
  require_device(call, name, out);
}

// A row output: dense last axis, one row stride, rows that do not overlap each other.
RowsOut rows_out(const Call& call, const char* name, const Tensor& out, const Shape& shape, DType dtype) {
  require_out(call, name, out, shape, dtype);
  const auto layout = detail::row_layout(out);
  if (!layout || (layout->rows > 1 && layout->row_stride < layout->cols)) {
    fail(ErrorCode::InvalidArgument, cat(call.op, ": ", name, " has strides ", shape_str(out.strides()),
                                         "; an output needs a dense last axis and one row stride"));
  }
  return RowsOut{out.data(), layout->row_stride};
}

// A dense output (per-row results, parameter gradients).
void* dense_out(const Call& call, const char* name, const Tensor& out, const Shape& shape, DType dtype) {
  require_out(call, name, out, shape, dtype);
  if (!out.is_contiguous()) {
    fail(ErrorCode::InvalidArgument, cat(call.op, ": ", name, " must be contiguous, has strides ",
                                         shape_str(out.strides())));
  }
  return out.data();
}

Shape leading_shape(const Tensor& t) { return Shape(t.shape().begin(), t.shape().end() - 1); }

// ---- Dispatch -------------------------------------------------------------------------------

template <class Problem, class CpuFn, class CudaFn>
void run(const Call& call, const Problem& problem, CpuFn cpu, [[maybe_unused]] CudaFn cuda) {
  if (call.device.is_cpu()) {
    cpu(problem);
    return;
  }
#if RUDNN_WITH_CUDA
  cuda(problem, call.stream);
#else
  fail(ErrorCode::Unsupported, cat(call.op, ": ruDNN was built without CUDA"));
#endif
}

#if RUDNN_WITH_CUDA
#define RUDNN_NORM_BACKENDS(fn) norm::reference::fn, norm::cuda::fn
#else
#define RUDNN_NORM_BACKENDS(fn) norm::reference::fn, nullptr
#endif

Tensor empty_like_rows(const Call& call, const Tensor& x) {
  return Tensor::empty(x.shape(), x.dtype(), call.device, call.stream);
}

// ---- Forward norms ------------------------------------------------------------------------------

void norm_forward_impl(Call& call, norm::NormKind kind, const Tensor& y_out, const Tensor* sum_out, const Tensor& x,
                       const Tensor* residual, const Tensor& gamma, const Tensor& beta, float eps) {
  require_row_input(call, "x", x);
  if (residual) require_like(call, "residual", *residual, "x", x);
  require_eps(call, eps);
  norm::NormForward p;
  p.kind = kind;
  p.cols = x.shape().back();
  p.rows = x.numel() / p.cols;
  p.dtype = x.dtype();
  p.eps = eps;
  p.gamma = param_in(call, "gamma", gamma, p.cols, x.dtype());
  p.beta = param_in(call, "beta", beta, p.cols, x.dtype());
  p.y = rows_out(call, sum_out ? "normed_out" : "out", y_out, x.shape(), x.dtype());
  require_no_overlap(call, sum_out ? "normed_out" : "out", y_out, {{"x", &x}, {"gamma", &gamma}, {"beta", &beta}});
  if (residual) {
    p.sum = rows_out(call, "sum_out", *sum_out, x.shape(), x.dtype());
    require_no_overlap(call, "normed_out", y_out, {{"residual", residual}, {"sum_out", sum_out}});
    require_no_overlap(call, "sum_out", *sum_out, {{"x", &x}, {"residual", residual}, {"gamma", &gamma}});
    p.residual = rows_in(call, *residual);
  }
  p.x = rows_in(call, x);
  if (p.rows == 0) return;
  run(call, p, RUDNN_NORM_BACKENDS(norm_forward));
}

}  // namespace

void layer_norm_into(const Tensor& out, const Tensor& x, const Tensor& gamma, const Tensor& beta, float eps,
                     const Stream& stream) {
  Call call("layer_norm", x, stream);
  norm_forward_impl(call, norm::NormKind::layer, out, nullptr, x, nullptr, gamma, beta, eps);
}

Tensor layer_norm(const Tensor& x, const Tensor& gamma, const Tensor& beta, float eps, const Stream& stream) {
  Call call("layer_norm", x, stream);
  require_row_input(call, "x", x);
  Tensor y = empty_like_rows(call, x);
  norm_forward_impl(call, norm::NormKind::layer, y, nullptr, x, nullptr, gamma, beta, eps);
  return y;
}

void rms_norm_into(const Tensor& out, const Tensor& x, const Tensor& gamma, float eps, const Stream& stream) {
  Call call("rms_norm", x, stream);
  norm_forward_impl(call, norm::NormKind::rms, out, nullptr, x, nullptr, gamma, Tensor(), eps);
}

Tensor rms_norm(const Tensor& x, const Tensor& gamma, float eps, const Stream& stream) {
  Call call("rms_norm", x, stream);
  require_row_input(call, "x", x);
  Tensor y = empty_like_rows(call, x);
  norm_forward_impl(call, norm::NormKind::rms, y, nullptr, x, nullptr, gamma, Tensor(), eps);
  return y;
}

void add_rms_norm_into(const Tensor& sum_out, const Tensor& normed_out, const Tensor& x, const Tensor& residual,
                       const Tensor& gamma, float eps, const Stream& stream) {
  Call call("add_rms_norm", x, stream);
  norm_forward_impl(call, norm::NormKind::add_rms, normed_out, &sum_out, x, &residual, gamma, Tensor(), eps);
}

AddRmsNormResult add_rms_norm(const Tensor& x, const Tensor& residual, const Tensor& gamma, float eps,
                              const Stream& stream) {
  Call call("add_rms_norm", x, stream);
  require_row_input(call, "x", x);
  AddRmsNormResult r{empty_like_rows(call, x), empty_like_rows(call, x)};
  norm_forward_impl(call, norm::NormKind::add_rms, r.normed, &r.sum, x, &residual, gamma, Tensor(), eps);
  return r;
}

// ---- Softmax and log-sum-exp ------------------------------------------------------------------

namespace {

void softmax_impl(Call& call, const Tensor& out, const Tensor& x) {
  require_row_input(call, "x", x);
  norm::SoftmaxForward p;
  p.cols = x.shape().back();
  p.rows = x.numel() / p.cols;
  p.dtype = x.dtype();
  p.y = rows_out(call, "out", out, x.shape(), x.dtype());
  require_no_overlap(call, "out", out, {{"x", &x}});
  p.x = rows_in(call, x);
  if (p.rows == 0) return;
  run(call, p, RUDNN_NORM_BACKENDS(softmax_forward));
}

void logsumexp_impl(Call& call, const Tensor& out, const Tensor& x) {
  require_row_input(call, "x", x);
  norm::SoftmaxForward p;
  p.cols = x.shape().back();
  p.rows = x.numel() / p.cols;
  p.dtype = x.dtype();
  p.lse = dense_out(call, "out", out, leading_shape(x), x.dtype());
  require_no_overlap(call, "out", out, {{"x", &x}});
  p.x = rows_in(call, x);
  if (p.rows == 0) return;
  run(call, p, RUDNN_NORM_BACKENDS(softmax_forward));
}

}  // namespace

void softmax_last_axis_into(const Tensor& out, const Tensor& x, const Stream& stream) {
  Call call("softmax_last_axis", x, stream);
  softmax_impl(call, out, x);
}

Tensor softmax_last_axis(const Tensor& x, const Stream& stream) {
  Call call("softmax_last_axis", x, stream);
  require_row_input(call, "x", x);
  Tensor y = empty_like_rows(call, x);
  softmax_impl(call, y, x);
  return y;
}

void logsumexp_into(const Tensor& out, const Tensor& x, const Stream& stream) {
  Call call("logsumexp", x, stream);
  logsumexp_impl(call, out, x);
}

Tensor logsumexp(const Tensor& x, const Stream& stream) {
  Call call("logsumexp", x, stream);
  require_row_input(call, "x", x);
  Tensor out = Tensor::empty(leading_shape(x), x.dtype(), call.device, call.stream);
  logsumexp_impl(call, out, x);
  return out;
}

// ---- Cross entropy ----------------------------------------------------------------------------

namespace {

// Checks and fills what every cross-entropy form shares; the caller sets the outputs.
norm::CrossEntropy cross_entropy_problem(Call& call, const Tensor& logits, const Tensor& targets,
                                         const CrossEntropyOptions& options) {
  require_row_input(call, "logits", logits);
  norm::CrossEntropy p;
  p.cols = logits.shape().back();
  p.rows = logits.numel() / p.cols;
  p.dtype = logits.dtype();
  p.targets = targets_in(call, targets, leading_shape(logits));
  p.target_dtype = targets.dtype();
  p.has_ignore_index = options.ignore_index.has_value();
  p.ignore_index = options.ignore_index.value_or(0);
  return p;
}

void run_cross_entropy(Call& call, norm::CrossEntropy& p, const Tensor& logits) {
  p.logits = rows_in(call, logits);
  if (p.rows == 0) return;
  run(call, p, RUDNN_NORM_BACKENDS(cross_entropy));
}

void cross_entropy_impl(Call& call, const Tensor& loss_out, const Tensor& logits, const Tensor& targets,
                        const CrossEntropyOptions& options) {
  norm::CrossEntropy p = cross_entropy_problem(call, logits, targets, options);
  p.loss = static_cast<float*>(dense_out(call, "loss_out", loss_out, leading_shape(logits), DType::f32));
  require_no_overlap(call, "loss_out", loss_out, {{"logits", &logits}, {"targets", &targets}});
  run_cross_entropy(call, p, logits);
}

// The per-row upstream gradient: F32 of the targets' shape on the operands' device, made
// dense when it is not.
const float* dloss_in(Call& call, const Tensor& dloss, const Tensor& targets) {
  require_defined(call, "dloss", dloss);
  if (dloss.dtype() != DType::f32) {
    fail(ErrorCode::DTypeMismatch, cat(call.op, ": dloss has dtype ", dtype_name(dloss.dtype()), "; expected f32"));
  }
  if (dloss.shape() != targets.shape()) {
    fail(ErrorCode::ShapeMismatch, cat(call.op, ": dloss has shape ", shape_str(dloss.shape()),
                                       ", expected the targets' shape ", shape_str(targets.shape())));
  }
  require_device(call, "dloss", dloss);
  if (dloss.is_contiguous()) return static_cast<const float*>(dloss.data());
  call.temporaries.push_back(dloss.contiguous(call.stream));
  return static_cast<const float*>(call.temporaries.back().data());
}

void cross_entropy_backward_impl(Call& call, const Tensor& dlogits_out, const Tensor& logits, const Tensor& targets,
                                 const Tensor& dloss, const CrossEntropyOptions& options) {
  norm::CrossEntropy p = cross_entropy_problem(call, logits, targets, options);
  p.dloss = dloss_in(call, dloss, targets);
  p.dlogits = rows_out(call, "dlogits_out", dlogits_out, logits.shape(), logits.dtype());
  require_no_overlap(call, "dlogits_out", dlogits_out,
                     {{"logits", &logits}, {"targets", &targets}, {"dloss", &dloss}});
  run_cross_entropy(call, p, logits);
}

// grad_scale is used when dloss is undefined.
void cross_entropy_with_grad_impl(Call& call, const Tensor& loss_out, const Tensor& dlogits_out,
                                  const Tensor& logits, const Tensor& targets, float grad_scale, const Tensor& dloss,
                                  const CrossEntropyOptions& options) {
  norm::CrossEntropy p = cross_entropy_problem(call, logits, targets, options);
  if (dloss.defined()) {
    p.dloss = dloss_in(call, dloss, targets);
  } else if (!std::isfinite(grad_scale)) {
    fail(ErrorCode::InvalidArgument, cat(call.op, ": grad_scale must be finite, got ", grad_scale));
  }
  p.grad_scale = grad_scale;
  p.loss = static_cast<float*>(dense_out(call, "loss_out", loss_out, leading_shape(logits), DType::f32));
  p.dlogits = rows_out(call, "dlogits_out", dlogits_out, logits.shape(), logits.dtype());
  require_no_overlap(call, "loss_out", loss_out,
                     {{"logits", &logits}, {"targets", &targets}, {"dlogits_out", &dlogits_out}, {"dloss", &dloss}});
  require_no_overlap(call, "dlogits_out", dlogits_out, {{"logits", &logits}, {"targets", &targets}, {"dloss", &dloss}});
  run_cross_entropy(call, p, logits);
}

}  // namespace

void cross_entropy_into(const Tensor& loss_out, const Tensor& logits, const Tensor& targets,
                        const CrossEntropyOptions& options, const Stream& stream) {
  Call call("cross_entropy", logits, stream);
  cross_entropy_impl(call, loss_out, logits, targets, options);
}

Tensor cross_entropy(const Tensor& logits, const Tensor& targets, const CrossEntropyOptions& options,
                     const Stream& stream) {
  Call call("cross_entropy", logits, stream);
  require_row_input(call, "logits", logits);
  Tensor loss = Tensor::empty(leading_shape(logits), DType::f32, call.device, call.stream);
  cross_entropy_impl(call, loss, logits, targets, options);
  return loss;
}

void cross_entropy_backward_into(const Tensor& dlogits_out, const Tensor& logits, const Tensor& targets,
                                 const Tensor& dloss, const CrossEntropyOptions& options, const Stream& stream) {
  Call call("cross_entropy_backward", logits, stream);
  cross_entropy_backward_impl(call, dlogits_out, logits, targets, dloss, options);
}

Tensor cross_entropy_backward(const Tensor& logits, const Tensor& targets, const Tensor& dloss,
                              const CrossEntropyOptions& options, const Stream& stream) {
  Call call("cross_entropy_backward", logits, stream);
  require_row_input(call, "logits", logits);
  Tensor dlogits = empty_like_rows(call, logits);
  cross_entropy_backward_impl(call, dlogits, logits, targets, dloss, options);
  return dlogits;
}

void cross_entropy_with_grad_into(const Tensor& loss_out, const Tensor& dlogits_out, const Tensor& logits,
                                  const Tensor& targets, float grad_scale, const CrossEntropyOptions& options,
                                  const Stream& stream) {
  Call call("cross_entropy_with_grad", logits, stream);
  cross_entropy_with_grad_impl(call, loss_out, dlogits_out, logits, targets, grad_scale, Tensor(), options);
}

CrossEntropyWithGrad cross_entropy_with_grad(const Tensor& logits, const Tensor& targets, float grad_scale,
                                             const CrossEntropyOptions& options, const Stream& stream) {
  Call call("cross_entropy_with_grad", logits, stream);
  require_row_input(call, "logits", logits);
  CrossEntropyWithGrad r{Tensor::empty(leading_shape(logits), DType::f32, call.device, call.stream),
                         empty_like_rows(call, logits)};
  cross_entropy_with_grad_impl(call, r.loss, r.dlogits, logits, targets, grad_scale, Tensor(), options);
  return r;
}

void cross_entropy_with_grad_into(const Tensor& loss_out, const Tensor& dlogits_out, const Tensor& logits,
                                  const Tensor& targets, const Tensor& dloss, const CrossEntropyOptions& options,
                                  const Stream& stream) {
  Call call("cross_entropy_with_grad", logits, stream);
  require_defined(call, "dloss", dloss);
  cross_entropy_with_grad_impl(call, loss_out, dlogits_out, logits, targets, 1.0f, dloss, options);
}

CrossEntropyWithGrad cross_entropy_with_grad(const Tensor& logits, const Tensor& targets, const Tensor& dloss,
                                             const CrossEntropyOptions& options, const Stream& stream) {
  Call call("cross_entropy_with_grad", logits, stream);
  require_row_input(call, "logits", logits);
  require_defined(call, "dloss", dloss);
  CrossEntropyWithGrad r{Tensor::empty(leading_shape(logits), DType::f32, call.device, call.stream),
                         empty_like_rows(call, logits)};
  cross_entropy_with_grad_impl(call, r.loss, r.dlogits, logits, targets, 1.0f, dloss, options);
  return r;
}

void scale_unless_one(const Tensor& x, const Tensor& scale, const Stream& stream) {
  Call call("scale_unless_one", x, stream);
  require_row_input(call, "x", x);
  require_defined(call, "scale", scale);
  if (scale.dtype() != DType::f32 || scale.numel() != 1) {
    fail(ErrorCode::InvalidArgument, cat(call.op, ": scale is ", scale.str(), "; expected one f32 element"));
  }
  require_device(call, "scale", scale);
  require_no_overlap(call, "x", x, {{"scale", &scale}});
  norm::ScaleRows p;
  p.cols = x.shape().back();
  p.rows = x.numel() / p.cols;
  p.dtype = x.dtype();
  p.x = rows_out(call, "x", x, x.shape(), x.dtype());  // scaled in place: a dense last axis, one row stride
  p.scale = static_cast<const float*>(scale.data());
  if (p.rows == 0) return;
  run(call, p, RUDNN_NORM_BACKENDS(scale_unless_one));
}

// ---- Backward norms and softmax -----------------------------------------------------------------

namespace {

void norm_backward_impl(Call& call, norm::NormKind kind, const Tensor& dx_out, const Tensor& dgamma_out,
                        const Tensor& dbeta_out, const Tensor& dy, const Tensor& x, const Tensor& gamma,
                        const Tensor& beta, float eps) {
  require_row_input(call, "x", x);
  require_like(call, "dy", dy, "x", x);
  require_eps(call, eps);
  norm::NormBackward p;
  p.kind = kind;
  p.cols = x.shape().back();
  p.rows = x.numel() / p.cols;
  p.dtype = x.dtype();
  p.eps = eps;
  p.gamma = param_in(call, "gamma", gamma, p.cols, x.dtype());
  check_param(call, "beta", beta, p.cols, x.dtype());  // only its shape and dtype matter here
  p.dx = rows_out(call, "dx_out", dx_out, x.shape(), x.dtype());
  require_no_overlap(call, "dx_out", dx_out, {{"x", &x}, {"dy", &dy}, {"gamma", &gamma}});
  auto param_grad = [&](const char* name, const Tensor& out, const Tensor& param, const char* param_name) {
    if (param.defined() != out.defined()) {
      fail(ErrorCode::InvalidArgument, cat(call.op, ": ", name, " must be given exactly when ", param_name, " is"));
    }
    if (!param.defined()) return ParamOut{};
    void* data = dense_out(call, name, out, param.shape(), param.dtype());
    require_no_overlap(call, name, out, {{"x", &x}, {"dy", &dy}, {"gamma", &gamma}, {"dx_out", &dx_out}});
    return ParamOut{data, param.dtype() == DType::f32};
  };
  p.dgamma = param_grad("dgamma_out", dgamma_out, gamma, "gamma");
  p.dbeta = param_grad("dbeta_out", dbeta_out, beta, "beta");
  if (p.dgamma.data && p.dbeta.data) require_no_overlap(call, "dbeta_out", dbeta_out, {{"dgamma_out", &dgamma_out}});
  p.x = rows_in(call, x);
  p.dy = rows_in(call, dy);
  run(call, p, RUDNN_NORM_BACKENDS(norm_backward));  // also with 0 rows: the gradients are zero
}

Tensor param_grad_like(const Call& call, const Tensor& param) {
  return param.defined() ? Tensor::empty(param.shape(), param.dtype(), call.device, call.stream) : Tensor();
}

}  // namespace

void layer_norm_backward_into(const Tensor& dx_out, const Tensor& dgamma_out, const Tensor& dbeta_out,
                              const Tensor& dy, const Tensor& x, const Tensor& gamma, const Tensor& beta, float eps,
                              const Stream& stream) {
  Call call("layer_norm_backward", x, stream);
  norm_backward_impl(call, norm::NormKind::layer, dx_out, dgamma_out, dbeta_out, dy, x, gamma, beta, eps);
}

LayerNormGrads layer_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& gamma, const Tensor& beta,
                                   float eps, const Stream& stream) {
  Call call("layer_norm_backward", x, stream);
  require_row_input(call, "x", x);
  check_param(call, "gamma", gamma, x.shape().back(), x.dtype());
  check_param(call, "beta", beta, x.shape().back(), x.dtype());
  LayerNormGrads g{empty_like_rows(call, x), param_grad_like(call, gamma), param_grad_like(call, beta)};
  norm_backward_impl(call, norm::NormKind::layer, g.dx, g.dgamma, g.dbeta, dy, x, gamma, beta, eps);
  return g;
}

void rms_norm_backward_into(const Tensor& dx_out, const Tensor& dgamma_out, const Tensor& dy, const Tensor& x,
                            const Tensor& gamma, float eps, const Stream& stream) {
  Call call("rms_norm_backward", x, stream);
  norm_backward_impl(call, norm::NormKind::rms, dx_out, dgamma_out, Tensor(), dy, x, gamma, Tensor(), eps);
}

RmsNormGrads rms_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& gamma, float eps,
                               const Stream& stream) {
  Call call("rms_norm_backward", x, stream);
  require_row_input(call, "x", x);
  check_param(call, "gamma", gamma, x.shape().back(), x.dtype());
  RmsNormGrads g{empty_like_rows(call, x), param_grad_like(call, gamma)};
  norm_backward_impl(call, norm::NormKind::rms, g.dx, g.dgamma, Tensor(), dy, x, gamma, Tensor(), eps);
  return g;
}

namespace {

void softmax_backward_impl(Call& call, const Tensor& dx_out, const Tensor& dy, const Tensor& y) {
  require_row_input(call, "y", y);
  require_like(call, "dy", dy, "y", y);
  norm::SoftmaxBackward p;
  p.cols = y.shape().back();
  p.rows = y.numel() / p.cols;
  p.dtype = y.dtype();
  p.dx = rows_out(call, "dx_out", dx_out, y.shape(), y.dtype());
  require_no_overlap(call, "dx_out", dx_out, {{"dy", &dy}, {"y", &y}});
  p.dy = rows_in(call, dy);
  p.y = rows_in(call, y);
  if (p.rows == 0) return;
  run(call, p, RUDNN_NORM_BACKENDS(softmax_backward));
}

}  // namespace

void softmax_backward_into(const Tensor& dx_out, const Tensor& dy, const Tensor& y, const Stream& stream) {
  Call call("softmax_backward", y, stream);
  softmax_backward_impl(call, dx_out, dy, y);
}

Tensor softmax_backward(const Tensor& dy, const Tensor& y, const Stream& stream) {
  Call call("softmax_backward", y, stream);
  require_row_input(call, "y", y);
  Tensor dx = empty_like_rows(call, y);
  softmax_backward_impl(call, dx, dy, y);
  return dx;
}

}  // namespace rudnn
