// CTC loss: argument rules and dispatch. On the CPU the lengths and labels are read here and
// every one is checked before the reference runs; on the GPU they stay on the device (reading
// them would synchronise the host), and the kernels check them per sample (ctc/cuda).
#include "rudnn/ctc.h"

#include <algorithm>
#include <cstdint>

#include "common/op_call.h"
#include "common/views.h"
#include "core/check.h"
#include "ctc/problem.h"
#if RUDNN_WITH_CUDA
#include "ctc/cuda/launch.h"
#endif

namespace rudnn {

namespace {

using common::OpCall;
using detail::cat;
using detail::fail;

Shape loss_shape(const CtcLossOptions& o, int64_t batch) {
  return o.reduction == CtcReduction::none ? Shape{batch} : Shape{};
}

void require_lengths(const OpCall& call, const char* name, const Tensor& t, int64_t batch) {
  common::require_dtype(call, name, t, {DType::i32, DType::i64});
  common::require_shape(call, name, t, {batch}, "[N], N the batch of log_probs");
}

// The shape and option rules, from log_probs' shape [T, N, C] and the other operands'
// shapes and dtypes: the problem's sizes (no data pointers yet).
ctc::CtcProblem shape_rules(const OpCall& call, const Shape& log_probs, const Tensor& targets,
                            const Tensor& input_lengths, const Tensor& target_lengths,
                            const CtcLossOptions& o) {
  if (log_probs.size() != 3)
    fail(ErrorCode::ShapeMismatch,
         cat(call.op, ": log_probs has shape ", shape_str(log_probs), "; expected [T, N, C]"));
  ctc::CtcProblem p;
  p.steps = log_probs[0];
  p.batch = log_probs[1];
  p.classes = log_probs[2];
  if (o.blank < 0 || o.blank >= p.classes)
    fail(ErrorCode::InvalidArgument,
         cat(call.op, ": blank is ", o.blank, "; expected 0 <= blank < C = ", p.classes));
  common::require_defined(call, "targets", targets);
  if (targets.dtype() != DType::i32 && targets.dtype() != DType::i64) {
    common::require_dtype(call, "targets", targets, {DType::i32, DType::i64});
  }
  require_lengths(call, "input_lengths", input_lengths, p.batch);
  require_lengths(call, "target_lengths", target_lengths, p.batch);
  if (targets.dim() == 2) {
    if (targets.size(0) != p.batch)
      fail(ErrorCode::ShapeMismatch,
           cat(call.op, ": targets has shape ", shape_str(targets.shape()),
               "; expected padded [N, S] with N = ", p.batch, " or concatenated [L]"));
    p.padded = true;
    p.padded_stride = targets.size(1);
  } else if (targets.dim() != 1) {
    fail(ErrorCode::ShapeMismatch, cat(call.op, ": targets has shape ", shape_str(targets.shape()),
                                       "; expected padded [N, S] or concatenated [L]"));
  }
  p.target_count = targets.numel();
  p.blank = o.blank;
  p.reduction = o.reduction;
  p.zero_infinity = o.zero_infinity;
  return p;
}

// The value rules, over dense host copies of the lengths and (when `targets` is not null) of
// the labels: every length within T and S (or the concatenated total), every label in range
// and not blank.
void value_rules(const OpCall& call, const ctc::CtcProblem& p, const void* input_lengths,
                 DType input_length_dtype, const void* target_lengths, DType target_length_dtype,
                 const void* targets, DType target_dtype) {
  int64_t concat_total = 0;
  for (int64_t n = 0; n < p.batch; ++n) {
    const int64_t in_len = ctc::index_at(input_lengths, input_length_dtype, n);
    const int64_t tg_len = ctc::index_at(target_lengths, target_length_dtype, n);
    if (in_len < 0 || in_len > p.steps)
      fail(ErrorCode::InvalidArgument, cat(call.op, ": input_lengths[", n, "] is ", in_len,
                                           "; expected 0 <= length <= T = ", p.steps));
    if (tg_len < 0)
      fail(ErrorCode::InvalidArgument,
           cat(call.op, ": target_lengths[", n, "] is ", tg_len, "; expected a length >= 0"));
    if (p.padded) {
      if (tg_len > p.padded_stride)
        fail(ErrorCode::InvalidArgument, cat(call.op, ": target_lengths[", n, "] is ", tg_len,
                                             "; expected a length <= S = ", p.padded_stride));
    } else {
      concat_total += tg_len;
      if (concat_total > p.target_count)
        fail(ErrorCode::ShapeMismatch, cat(call.op, ": targets has ", p.target_count,
                                           " concatenated labels; expected at least "
                                           "sum(target_lengths), already more by sample ",
                                           n));
    }
    if (targets == nullptr) continue;
    const int64_t first = p.padded ? n * p.padded_stride : concat_total - tg_len;
    for (int64_t i = 0; i < tg_len; ++i) {
      const int64_t label = ctc::index_at(targets, target_dtype, first + i);
      if (label < 0 || label >= p.classes || label == p.blank)
        fail(ErrorCode::InvalidArgument,
             cat(call.op, ": targets holds label ", label, " for sample ", n,
                 "; expected 0 <= label < C = ", p.classes, " and label != blank = ", p.blank));
    }
  }
}

ctc::CtcProblem ctc_problem(OpCall& call, const Tensor& log_probs, const Tensor& targets,
                            const Tensor& input_lengths, const Tensor& target_lengths,
                            const CtcLossOptions& o) {
  common::require_float(call, "log_probs", log_probs);
  common::require_device(call, "targets", targets);
  common::require_device(call, "input_lengths", input_lengths);
  common::require_device(call, "target_lengths", target_lengths);
  ctc::CtcProblem p =
      shape_rules(call, log_probs.shape(), targets, input_lengths, target_lengths, o);
  p.dtype = log_probs.dtype();
  p.log_probs = common::dense_in(call, log_probs);
  p.targets = common::dense_in(call, targets);
  p.target_dtype = targets.dtype();
  p.input_lengths = common::dense_in(call, input_lengths);
  p.input_length_dtype = input_lengths.dtype();
  p.target_lengths = common::dense_in(call, target_lengths);
  p.target_length_dtype = target_lengths.dtype();

  if (!call.device.is_cpu()) {
    p.max_target = std::min(p.padded ? p.padded_stride : p.target_count, p.steps);
    if (p.classes > INT32_MAX)
      fail(ErrorCode::Unsupported, cat(call.op, ": log_probs has ", p.classes,
                                       " classes; expected at most 2^31 - 1 on the GPU"));
#if RUDNN_WITH_CUDA
    const int64_t longest = ctc::cuda::longest_target(call.device);
    if (p.max_target > longest)
      fail(ErrorCode::Unsupported,
           cat(call.op, ": targets allow ", p.max_target,
               " labels per sample (min(S or L, T)); expected at most ", longest,
               " on this GPU (the recursion keeps its rows in shared memory)"));
#endif
    return p;
  }
  // Values: visible on the host, so checked here and never in the reference.
  value_rules(call, p, p.input_lengths, p.input_length_dtype, p.target_lengths,
              p.target_length_dtype, p.targets, p.target_dtype);
  return p;
}

void loss_impl(OpCall& call, const Tensor& loss_out, const Tensor& log_probs, const Tensor& targets,
               const Tensor& input_lengths, const Tensor& target_lengths, const CtcLossOptions& o) {
  ctc::CtcProblem p = ctc_problem(call, log_probs, targets, input_lengths, target_lengths, o);
  p.loss = common::dense_out(call, "loss_out", loss_out, loss_shape(o, p.batch), log_probs.dtype());
  common::require_no_overlap(call, "loss_out", loss_out,
                             {{"log_probs", &log_probs},
                              {"targets", &targets},
                              {"input_lengths", &input_lengths},
                              {"target_lengths", &target_lengths}});
  if (!call.device.is_cpu())
    p.scratch = call.keep(call.empty({ctc::scratch_layout(p, false).bytes}, DType::u8)).data();
  common::run_backend(call, p, RUDNN_BACKENDS(ctc, ctc_loss));
}

void backward_impl(OpCall& call, const Tensor& grad_out, const Tensor& log_probs,
                   const Tensor& targets, const Tensor& input_lengths, const Tensor& target_lengths,
                   const Tensor& grad_loss, const CtcLossOptions& o) {
  ctc::CtcProblem p = ctc_problem(call, log_probs, targets, input_lengths, target_lengths, o);
  common::require_dtype(call, "grad_loss", grad_loss, {log_probs.dtype()});
  common::require_shape(
      call, "grad_loss", grad_loss, loss_shape(o, p.batch),
      o.reduction == CtcReduction::none ? "[N] (reduction none)" : "0-d (reduction mean or sum)");
  p.grad_loss = common::dense_in(call, grad_loss);
  p.grad = common::dense_out(call, "grad_out", grad_out, log_probs.shape(), log_probs.dtype());
  common::require_no_overlap(call, "grad_out", grad_out,
                             {{"log_probs", &log_probs},
                              {"targets", &targets},
                              {"input_lengths", &input_lengths},
                              {"target_lengths", &target_lengths},
                              {"grad_loss", &grad_loss}});
  if (grad_out.numel() == 0) return;
  if (!call.device.is_cpu())
    p.scratch = call.keep(call.empty({ctc::scratch_layout(p, true).bytes}, DType::u8)).data();
  common::run_backend(call, p, RUDNN_BACKENDS(ctc, ctc_loss_backward));
}

}  // namespace

void ctc_loss_into(const Tensor& loss_out, const Tensor& log_probs, const Tensor& targets,
                   const Tensor& input_lengths, const Tensor& target_lengths,
                   const CtcLossOptions& options, const Stream& stream) {
  OpCall call("ctc_loss", "log_probs", log_probs, stream);
  loss_impl(call, loss_out, log_probs, targets, input_lengths, target_lengths, options);
}

Tensor ctc_loss(const Tensor& log_probs, const Tensor& targets, const Tensor& input_lengths,
                const Tensor& target_lengths, const CtcLossOptions& options, const Stream& stream) {
  OpCall call("ctc_loss", "log_probs", log_probs, stream);
  ctc_problem(call, log_probs, targets, input_lengths, target_lengths, options);
  Tensor loss = call.empty(loss_shape(options, log_probs.size(1)), log_probs.dtype());
  loss_impl(call, loss, log_probs, targets, input_lengths, target_lengths, options);
  return loss;
}

void ctc_loss_backward_into(const Tensor& grad_out, const Tensor& log_probs, const Tensor& targets,
                            const Tensor& input_lengths, const Tensor& target_lengths,
                            const Tensor& grad_loss, const CtcLossOptions& options,
                            const Stream& stream) {
  OpCall call("ctc_loss_backward", "log_probs", log_probs, stream);
  backward_impl(call, grad_out, log_probs, targets, input_lengths, target_lengths, grad_loss,
                options);
}

void ctc_loss_check(const Shape& log_probs, const Tensor& targets, const Tensor& input_lengths,
                    const Tensor& target_lengths, const CtcLossOptions& options) {
  OpCall call("ctc_loss_check", "input_lengths", input_lengths, Stream{});
  if (!call.device.is_cpu())
    fail(ErrorCode::DeviceMismatch,
         cat(call.op, ": input_lengths is on ", call.device.str(),
             "; expected host (CPU) lengths: device values are the kernels' to check"));
  const ctc::CtcProblem p =
      shape_rules(call, log_probs, targets, input_lengths, target_lengths, options);
  const Tensor in = input_lengths.contiguous(), tg = target_lengths.contiguous();
  const bool host_targets = targets.device().is_cpu();
  const Tensor labels = host_targets ? targets.contiguous() : Tensor();
  value_rules(call, p, in.data(), in.dtype(), tg.data(), tg.dtype(),
              host_targets ? labels.data() : nullptr, targets.dtype());
}

Tensor ctc_loss_backward(const Tensor& log_probs, const Tensor& targets,
                         const Tensor& input_lengths, const Tensor& target_lengths,
                         const Tensor& grad_loss, const CtcLossOptions& options,
                         const Stream& stream) {
  OpCall call("ctc_loss_backward", "log_probs", log_probs, stream);
  ctc_problem(call, log_probs, targets, input_lengths, target_lengths, options);
  Tensor grad = call.empty(log_probs.shape(), log_probs.dtype());
  backward_impl(call, grad, log_probs, targets, input_lengths, target_lengths, grad_loss, options);
  return grad;
}

}  // namespace rudnn
