// CTC loss (connectionist temporal classification) and its gradient with respect to the
// log-probabilities, with PyTorch's semantics (torch.nn.functional.ctc_loss).
//
// Operands:
// - log_probs [T, N, C]: log-probabilities over C classes for N samples of T steps, F32, F16
//   or BF16 (and F64 on the CPU); any strides (odd layouts are first copied to a dense buffer
//   on the device). The op does not check that each row is normalised (as torch).
// - targets: padded [N, S] (sample n's labels are targets[n, 0:target_lengths[n]]) or
//   concatenated [L] with sum(target_lengths) <= L (sample n's labels follow those of samples
//   0..n-1), I32 or I64. Labels must lie in [0, C) and differ from `blank`.
// - input_lengths [N], target_lengths [N]: I32 or I64 (each its own). 0 <= input_lengths[n]
//   <= T; 0 <= target_lengths[n], and <= S for padded targets.
// - Every operand on one device (else DeviceMismatch). N = 0 is valid. T = 0 is valid (every
//   input length is then 0).
//
// Where the lengths and labels are checked. On the CPU every one is read before anything is
// written, and a bad one is a rudnn::Error (InvalidArgument / ShapeMismatch below). On the GPU
// they stay on the device (reading them on the host would synchronise it): the kernels check
// them per sample, and a sample with a length out of range, concatenated targets too short for
// it, or a label out of range or equal to blank gets a NaN loss (so a NaN mean or sum) and a
// NaN gradient at every step; no out-of-bounds read happens. Divergence: torch raises there
// (it reads lengths on the host); a caller holding them on the host can run the same host
// checks first with ctc_loss_check (the Python functions do so for host lengths).
//
// Options: blank in [0, C) (else InvalidArgument); reduction none (loss [N]), sum (0-d) or
// mean (0-d: each loss divided by max(target_length, 1), then averaged over N; N = 0 gives
// NaN, as torch); zero_infinity replaces infinite losses (a target that cannot be aligned in
// its input length) and their gradients by 0.
//
// Precision: on the CPU the alpha/beta recursions run in float64 in log space (whatever the
// dtype; results rounded once). On the GPU they run in FP32 in log space, each row shifted by
// its maximum every 8 steps with the shifts summed in FP64, so that the gradient's
// alpha + beta - lp + nll does not cancel T * |log p|-sized FP32 numbers. The loss of a
// T-step sample then carries about T FP32 roundings of per-step terms (relative error ~1e-6
// at T = 1000), as torch's FP32 kernels. Repeated labels follow CTC: the skip transition from
// label s-2 to s is taken only when l[s] != l[s-2].
// GPU method: the log-probabilities of each sample's blank and labels gathered first into a
// dense [N, T, S' + 1] FP32 buffer (in base 2); then one block per sample for alpha and one
// for beta, concurrently (the forward runs alpha over the first half of the steps and beta
// over the rest and joins their rows at the middle: half the serial steps; the backward runs
// both over every step), the 2S+1 states across its threads, the gathered values read in
// blocks of up to 32 steps, the next block loaded while the current one is used; the
// recursions run in base 2 (the hardware's exp2/log2). The backward's pass over
// every class (g * exp(lp), which needs no recursion) runs in the same launch as the
// recursions, on the multiprocessors they leave free; a second pass, one block per (t, n)
// row, then overwrites the target's classes from alpha + beta. The mean and sum are taken in
// a fixed order and no result depends on an atomic: results are identical run to run.
// Memory: CPU: O(T * (2 * S_max + 1)) float64 per sample on the host. GPU: the forward keeps
// 56 bytes and two rows of 2S' + 1 floats per sample, and N * T * (S' + 1) * 4 bytes (rounded
// up to 16 per step) of gathered log-probabilities (26 MB at T 1000, N 32, S 200); the
// backward keeps the 40 bytes per sample and the gathered values, and also
// N * T * (2 * S' + 1) * 8 bytes of alpha and beta rows (S' = min(S or L, T): 103 MB there),
// N * T * 16 bytes of row shifts and N * S' * 4 bytes of label chains, allocated on the
// stream. The recursion's shared memory caps S' at about 8,300 on an H100/H200 (longer:
// Unsupported).
#pragma once

#include <cstdint>

#include "rudnn/stream.h"
#include "rudnn/tensor.h"

namespace rudnn {

enum class CtcReduction { none, mean, sum };

struct CtcLossOptions {
  int64_t blank = 0;
  CtcReduction reduction = CtcReduction::mean;
  bool zero_infinity = false;
};

// The negative log-likelihood of each target under the CTC alignment model, reduced as
// options.reduction says. Result: [N] for none, 0-d for mean and sum, log_probs' dtype.
// Errors: InvalidArgument (undefined operand, blank out of range, a length negative or
// longer than T or S, a label out of range or equal to blank), ShapeMismatch (ranks, N or
// S disagreeing, concatenated targets shorter than sum(target_lengths)), DTypeMismatch,
// DeviceMismatch, Unsupported (GPU: S' beyond the shared-memory cap, or C >= 2^31). On the
// GPU, lengths and labels are checked on the device instead (see the top of this file;
// ctc_loss_check below runs the host checks where the caller has the values on the host).
Tensor ctc_loss(const Tensor& log_probs, const Tensor& targets, const Tensor& input_lengths,
                const Tensor& target_lengths, const CtcLossOptions& options = {},
                const Stream& stream = {});
// The argument rules of ctc_loss for log-probabilities of shape `log_probs` [T, N, C]
// (wherever they live) and targets and lengths whose values are on the host, checked as the
// CPU path checks them, with the same errors: for a caller whose log-probabilities are on a
// GPU (where ctc_loss cannot read lengths and labels without synchronising) but whose
// lengths are host data, as torch's usually are, so that a bad length or label is a
// rudnn::Error rather than a NaN loss. input_lengths, target_lengths: CPU I32/I64 [N] (else
// DeviceMismatch). targets: a CPU tensor (every label of every sample checked), or a tensor
// on any device (its shape and dtype only: no device read). Reads, writes nothing.
void ctc_loss_check(const Shape& log_probs, const Tensor& targets, const Tensor& input_lengths,
                    const Tensor& target_lengths, const CtcLossOptions& options = {});
// As ctc_loss, into `loss_out` (contiguous, the result's shape and dtype, overlapping no
// input; else InvalidArgument / ShapeMismatch / DTypeMismatch).
void ctc_loss_into(const Tensor& loss_out, const Tensor& log_probs, const Tensor& targets,
                   const Tensor& input_lengths, const Tensor& target_lengths,
                   const CtcLossOptions& options = {}, const Stream& stream = {});

// The gradient of the reduced loss with respect to log_probs, [T, N, C] in log_probs' dtype,
// given the upstream gradient grad_loss (the loss's shape and dtype: [N] for none, 0-d
// otherwise). The loss is recomputed (nothing is saved from the forward).
//
// Divergence from the textbook derivative, same as torch: the gradient is the one of the loss
// with respect to the unnormalised inputs z of log_probs = log_softmax(z),
//   grad[t, n, c] = g_n * (exp(lp[t, n, c]) - exp(log_alpha + log_beta - lp[t, n, c] + nll_n))
// (log_alpha + log_beta summed in log space over the states labelled c), where g_n is the
// upstream gradient times the reduction's factor (1 for sum and none, 1 / (N * max(target
// length, 1)) for mean). For normalised log_probs this equals the derivative through
// log_softmax, which is what torch's autograd produces. Steps t >= input_lengths[n] get 0.
// An infinite loss gives NaN gradients for its sample unless zero_infinity is set (then 0).
Tensor ctc_loss_backward(const Tensor& log_probs, const Tensor& targets,
                         const Tensor& input_lengths, const Tensor& target_lengths,
                         const Tensor& grad_loss, const CtcLossOptions& options = {},
                         const Stream& stream = {});
// As ctc_loss_backward, into `grad_out` ([T, N, C], log_probs' dtype, contiguous,
// overlapping no input).
void ctc_loss_backward_into(const Tensor& grad_out, const Tensor& log_probs, const Tensor& targets,
                            const Tensor& input_lengths, const Tensor& target_lengths,
                            const Tensor& grad_loss, const CtcLossOptions& options = {},
                            const Stream& stream = {});

}  // namespace rudnn
