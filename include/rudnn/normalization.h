// Normalization family: LayerNorm, RMSNorm, residual-add + RMSNorm, softmax, log-sum-exp
// and cross entropy over the last axis, with their backward passes.
//
// Common contract (every function below):
// - Rows. `x` has any leading shape [..., H]; the op runs independently on each of the
//   rows = numel / H rows of length H along the last axis. H >= 1 (an empty last axis is
//   InvalidArgument); zero rows is valid and launches nothing. A 0-d `x` is ShapeMismatch.
// - Dtypes. Inputs are F32, F16 or BF16. Statistics, sums and affine arithmetic run in
//   FP32 on every device; the result is rounded once to its dtype. Other dtypes are
//   DTypeMismatch.
// - Affine parameters (gamma, beta) are [H] vectors in F32 (the model keeps FP32 master
//   weights) or in x's dtype; either way the result has x's dtype. An undefined Tensor
//   (`Tensor{}`, `{}`) means "none": gamma = 1, beta = 0.
// - Layout. Any strides are taken. Rows are read in place when the last axis is dense and
//   the leading axes collapse to one row stride (contiguous tensors, row slices, strided
//   rows); any other layout is first copied to a contiguous buffer on the device (one extra
//   pass, counted in the memory notes). Results are new contiguous tensors.
// - Devices and streams. All tensors share one device (else DeviceMismatch); the op runs
//   on `stream` (default: current_stream of that device; a stream of another device is
//   DeviceMismatch). On the CPU the reference implementation runs inline. No op
//   synchronises the host with the device, and none reads device data back to decide.
// - Memory. Forward ops hold no scratch. Backward ops with gamma/beta hold
//   P * H * 4 bytes of FP32 partial sums per parameter gradient while they run, where
//   P <= 2 * (multiprocessor count) row groups; the partials are reduced in a fixed order
//   (deterministic run to run on one device).
// - Inputs are never modified. The `_into` forms write caller-allocated outputs: each
//   `out` must have the result's shape and dtype, live on the operands' device, have a dense
//   last axis with leading axes collapsing to one row stride, and overlap no input and no
//   other output (else InvalidArgument). They allocate nothing but backward scratch, so
//   they can be captured in a CUDA graph.
// - Errors are rudnn::Error naming the op, the argument and the rule.
#pragma once

#include <cstdint>
#include <optional>

#include "rudnn/stream.h"
#include "rudnn/tensor.h"

namespace rudnn {

// ---------------------------------------------------------------------------------------
// LayerNorm: y = (x - mean) / sqrt(var + eps) * gamma + beta, mean and (biased) variance
// over the last axis in FP32 (two-pass over the row, so large means do not cancel).
// eps must be finite and > 0 (else InvalidArgument).
Tensor layer_norm(const Tensor& x, const Tensor& gamma, const Tensor& beta, float eps,
                  const Stream& stream = {});
void layer_norm_into(const Tensor& out, const Tensor& x, const Tensor& gamma, const Tensor& beta,
                     float eps, const Stream& stream = {});

// LayerNorm that also returns each row's statistics, as torch's native_layer_norm does, for
// a backward pass that reads them (layer_norm_backward with LayerNormStats) instead of
// recomputing them. y is bit for bit layer_norm's. mean and rstd = 1 / sqrt(var + eps) have
// shape x.shape[:-1] (0-d for 1-d x) and dtype F32 (F64 for F64 x on the CPU): the FP32
// values the kernel normalised with. Memory: 8 bytes per row more written; no scratch.
// mean_out / rstd_out must be contiguous, of that shape and dtype (else InvalidArgument,
// ShapeMismatch, DTypeMismatch) and overlap no input and no other output.
struct LayerNormStats {
  Tensor mean, rstd;
};
struct LayerNormWithStats {
  Tensor y;
  LayerNormStats stats;
};
LayerNormWithStats layer_norm_with_stats(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                                         float eps, const Stream& stream = {});
void layer_norm_with_stats_into(const Tensor& out, const Tensor& mean_out, const Tensor& rstd_out,
                                const Tensor& x, const Tensor& gamma, const Tensor& beta, float eps,
                                const Stream& stream = {});

// RMSNorm: y = x / sqrt(mean(x^2) + eps) * gamma. eps as for layer_norm.
Tensor rms_norm(const Tensor& x, const Tensor& gamma, float eps, const Stream& stream = {});
void rms_norm_into(const Tensor& out, const Tensor& x, const Tensor& gamma, float eps,
                   const Stream& stream = {});

// Residual add then RMSNorm, one pass: sum = x + residual (computed in FP32, rounded to x's
// dtype) and normed = rms_norm(sum, gamma, eps), where the statistics read the rounded sum.
// Both results equal the two ops composed (on the GPU, bit for bit with rms_norm applied to
// `sum`). residual must have x's shape and dtype.
struct AddRmsNormResult {
  Tensor sum;     // x + residual, x's dtype and shape
  Tensor normed;  // rms_norm(sum), x's dtype and shape
};
AddRmsNormResult add_rms_norm(const Tensor& x, const Tensor& residual, const Tensor& gamma,
                              float eps, const Stream& stream = {});
void add_rms_norm_into(const Tensor& sum_out, const Tensor& normed_out, const Tensor& x,
                       const Tensor& residual, const Tensor& gamma, float eps,
                       const Stream& stream = {});

// ---------------------------------------------------------------------------------------
// Softmax over the last axis: y = exp(x - max) / sum(exp(x - max)), x's dtype.
// A row whose maximum is not finite (all -inf, any +inf, any NaN) gives a row of NaN, as in
// PyTorch.
Tensor softmax_last_axis(const Tensor& x, const Stream& stream = {});
void softmax_last_axis_into(const Tensor& out, const Tensor& x, const Stream& stream = {});

// log(sum(exp(x))) over the last axis; result shape x.shape[:-1] (0-d for 1-d x), x's dtype.
// All -inf gives -inf, any +inf gives +inf, any NaN gives NaN.
Tensor logsumexp(const Tensor& x, const Stream& stream = {});
void logsumexp_into(const Tensor& out, const Tensor& x, const Stream& stream = {});

// ---------------------------------------------------------------------------------------
// Cross entropy of each row of `logits` [..., C] against an integer class per row.
//
// targets: logits.shape[:-1], any integer dtype (I32, I64, U32, U8). A negative target t
// means class t + C (counting from the end). Per row, in FP32:
//   loss = logsumexp(logits_row) - logits_row[target]
// Rows whose target equals `ignore_index` (when set; compared before the negative wrap)
// have loss 0 and gradient 0. A target still outside [0, C) after the wrap gives a NaN loss
// and a NaN gradient row; it is never used as an index. The result is FP32, shape
// targets.shape (no reduction: reduce it yourself, e.g. mean over rows).
struct CrossEntropyOptions {
  std::optional<int64_t> ignore_index;
  CrossEntropyOptions& set_ignore_index(int64_t index) {
    ignore_index = index;
    return *this;
  }
};
Tensor cross_entropy(const Tensor& logits, const Tensor& targets,
                     const CrossEntropyOptions& options = {}, const Stream& stream = {});
void cross_entropy_into(const Tensor& loss_out, const Tensor& logits, const Tensor& targets,
                        const CrossEntropyOptions& options = {}, const Stream& stream = {});

// ---------------------------------------------------------------------------------------
// Backward passes. Each recomputes the forward statistics from its inputs (nothing needs to
// be saved from the forward call beyond its inputs; LayerNorm also takes them saved), and
// returns gradients in the dtype of the tensor they belong to, accumulated in FP32.

// LayerNorm backward. dy and x: same shape and dtype. gamma/beta as in the forward call;
// only beta's presence, shape and dtype are used (beta's values do not enter the gradient).
// dgamma / dbeta are defined exactly when gamma / beta are.
struct LayerNormGrads {
  Tensor dx, dgamma, dbeta;
};
LayerNormGrads layer_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& gamma,
                                   const Tensor& beta, float eps, const Stream& stream = {});
// dgamma_out / dbeta_out must be defined exactly when gamma / beta are.
void layer_norm_backward_into(const Tensor& dx_out, const Tensor& dgamma_out,
                              const Tensor& dbeta_out, const Tensor& dy, const Tensor& x,
                              const Tensor& gamma, const Tensor& beta, float eps,
                              const Stream& stream = {});
// The same from the forward's saved statistics (layer_norm_with_stats, or torch's
// native_layer_norm): stats.mean and stats.rstd of shape x.shape[:-1], F32 (F64 for F64 x),
// any layout (made dense on the device when they are not), are used as given, and nothing
// is recomputed from x (eps is not needed). On the GPU this is one pass over x and dy: each
// row is read once, dx written once, and the parameter gradients summed in the same
// deterministic order as above, with one block reduction per row instead of two. Errors: as
// above (no eps rule), plus mean or rstd undefined or of another dtype (DTypeMismatch) or
// shape (ShapeMismatch), or an output overlapping them (InvalidArgument). With statistics
// that are not those of x the result is the formula applied to them, not x's gradient.
LayerNormGrads layer_norm_backward(const Tensor& dy, const Tensor& x, const LayerNormStats& stats,
                                   const Tensor& gamma, const Tensor& beta,
                                   const Stream& stream = {});
void layer_norm_backward_into(const Tensor& dx_out, const Tensor& dgamma_out,
                              const Tensor& dbeta_out, const Tensor& dy, const Tensor& x,
                              const LayerNormStats& stats, const Tensor& gamma, const Tensor& beta,
                              const Stream& stream = {});

// RMSNorm backward. dgamma is defined exactly when gamma is.
struct RmsNormGrads {
  Tensor dx, dgamma;
};
RmsNormGrads rms_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& gamma, float eps,
                               const Stream& stream = {});
void rms_norm_backward_into(const Tensor& dx_out, const Tensor& dgamma_out, const Tensor& dy,
                            const Tensor& x, const Tensor& gamma, float eps,
                            const Stream& stream = {});

// Softmax backward from the forward output y: dx = y * (dy - sum(dy * y)). dy and y: same
// shape and dtype.
Tensor softmax_backward(const Tensor& dy, const Tensor& y, const Stream& stream = {});
void softmax_backward_into(const Tensor& dx_out, const Tensor& dy, const Tensor& y,
                           const Stream& stream = {});

// Cross-entropy backward: dlogits = dloss[row] * (softmax(logits_row) - onehot(target)), in
// logits' dtype. dloss: FP32, targets' shape. Ignored rows get 0; out-of-range targets a NaN
// row.
Tensor cross_entropy_backward(const Tensor& logits, const Tensor& targets, const Tensor& dloss,
                              const CrossEntropyOptions& options = {}, const Stream& stream = {});
void cross_entropy_backward_into(const Tensor& dlogits_out, const Tensor& logits,
                                 const Tensor& targets, const Tensor& dloss,
                                 const CrossEntropyOptions& options = {},
                                 const Stream& stream = {});

// Forward and backward in one pass over the logits, for training loops that know the
// loss's upstream gradient ahead of time (e.g. grad_scale = 1 / rows for a mean loss):
// loss as cross_entropy, and dlogits as cross_entropy_backward with dloss = grad_scale on
// every row. grad_scale must be finite (else InvalidArgument).
struct CrossEntropyWithGrad {
  Tensor loss;     // FP32, targets' shape
  Tensor dlogits;  // logits' dtype and shape
};
CrossEntropyWithGrad cross_entropy_with_grad(const Tensor& logits, const Tensor& targets,
                                             float grad_scale,
                                             const CrossEntropyOptions& options = {},
                                             const Stream& stream = {});
void cross_entropy_with_grad_into(const Tensor& loss_out, const Tensor& dlogits_out,
                                  const Tensor& logits, const Tensor& targets, float grad_scale,
                                  const CrossEntropyOptions& options = {},
                                  const Stream& stream = {});
// The same with an upstream gradient per row: dloss, FP32 of the targets' shape, as for
// cross_entropy_backward; for an upstream gradient that lives on the device, such as
// 1 / (number of non-ignored targets) for a mean loss, without a host synchronisation.
CrossEntropyWithGrad cross_entropy_with_grad(const Tensor& logits, const Tensor& targets,
                                             const Tensor& dloss,
                                             const CrossEntropyOptions& options = {},
                                             const Stream& stream = {});
void cross_entropy_with_grad_into(const Tensor& loss_out, const Tensor& dlogits_out,
                                  const Tensor& logits, const Tensor& targets, const Tensor& dloss,
                                  const CrossEntropyOptions& options = {},
                                  const Stream& stream = {});

// x *= s in place, where s is the value of `scale` (one F32 element on x's device), read by
// the device: when s is exactly 1, x is left untouched at the cost of one launch, with no
// pass over x and no host synchronisation. For a gradient computed ahead under an assumed
// upstream gradient of 1 (cross_entropy_with_grad inside an autograd forward) once the true
// upstream gradient is known on the device. x: F32/F16/BF16 with a dense last axis and one
// row stride (else InvalidArgument); products rounded to x's dtype.
void scale_unless_one(const Tensor& x, const Tensor& scale, const Stream& stream = {});

}  // namespace rudnn
