// The validated CTC problem the backends run: dense views and sizes. On the CPU every length
// and label has been checked (ctc.cpp) and the reference never re-validates; on the GPU they
// live on the device, so the kernels check them there (an invalid sample gets a NaN loss).
#pragma once

#include <cstdint>

#include "rudnn/ctc.h"
#include "rudnn/dtype.h"

namespace rudnn::ctc {

struct CtcProblem {
  int64_t steps = 0, batch = 0, classes = 0;  // T, N, C
  bool padded = false;                        // padded [N, S] targets, else concatenated [L]
  int64_t padded_stride = 0;                  // S for padded targets
  int64_t target_count = 0;                   // L: every label targets holds (N * S if padded)
  int64_t blank = 0;
  CtcReduction reduction = CtcReduction::mean;
  bool zero_infinity = false;
  DType dtype = DType::f64;         // of log_probs, loss, grad_loss and grad
  const void* log_probs = nullptr;  // [T, N, C] dense
  const void* targets = nullptr;    // dense, target_dtype
  DType target_dtype = DType::i64;
  const void* input_lengths = nullptr;  // [N] dense
  DType input_length_dtype = DType::i64;
  const void* target_lengths = nullptr;  // [N] dense
  DType target_length_dtype = DType::i64;
  void* loss = nullptr;             // [N] or 0-d; null for backward
  const void* grad_loss = nullptr;  // [N] or 0-d; backward only
  void* grad = nullptr;             // [T, N, C] dense; null for forward

  // GPU only. The longest target the recursions run over: min(S (or L), T), since a target
  // longer than its input cannot be aligned at all (its loss is infinite without them).
  int64_t max_target = 0;
  void* scratch = nullptr;  // scratch_bytes(*this) on the device
};

// Element i of an I32 or I64 array.
inline int64_t index_at(const void* data, DType dtype, int64_t i) {
  return dtype == DType::i32 ? static_cast<const int32_t*>(data)[i]
                             : static_cast<const int64_t*>(data)[i];
}

// Floats per step of the gathered log-probabilities (the blank, then each label), rounded up
// to whole 16-byte vectors so that a block of steps is copied with aligned vector loads.
constexpr int64_t gathered_width(int64_t max_target) { return (max_target + 1 + 3) / 4 * 4; }

// Where the GPU scratch of a problem lives: byte offsets into CtcProblem::scratch (each
// 256-byte aligned). The forward needs the per-sample part and the gathered log-probabilities
// of each sample's labels (FP32, base 2, [N, T, gathered_width]); the backward also keeps
// both recursions' rows (alpha and beta, FP32, T * (2 * max_target + 1) per sample), their
// per-step FP64 offsets, the per-sample chains of repeated labels and the counter through
// which the overlapped backward's blocks take rows of the gradient.
struct ScratchLayout {
  int64_t info = 0, nll = 0, gathered = 0;
  int64_t alpha_offset = 0, beta_offset = 0, alpha = 0, beta = 0, chain = 0, counter = 0;
  int64_t meet_offset = 0, meet_rows = 0;  // the forward's (cuda/ctc.cuh Views)
  int64_t bytes = 0;
};

inline ScratchLayout scratch_layout(const CtcProblem& p, bool backward) {
  ScratchLayout l;
  int64_t at = 0;
  auto take = [&](int64_t bytes) {
    const int64_t start = at;
    at += (bytes + 255) / 256 * 256;
    return start;
  };
  const int64_t states = 2 * p.max_target + 1;
  l.info = take(p.batch * 32);
  l.nll = take(p.batch * 8);
  l.gathered = take(p.batch * p.steps * gathered_width(p.max_target) * 4);
  if (backward) {
    l.alpha_offset = take(p.batch * p.steps * 8);
    l.beta_offset = take(p.batch * p.steps * 8);
    l.alpha = take(p.batch * p.steps * states * 4);
    l.beta = take(p.batch * p.steps * states * 4);
    l.chain = take(p.batch * (p.max_target > 0 ? p.max_target : 1) * 4);
    l.counter = take(8);
  } else {
    l.meet_offset = take(p.batch * 2 * 8);
    l.meet_rows = take(p.batch * 2 * states * 4);
  }
  l.bytes = at;
  return l;
}

namespace reference {
// The float64 definition of the op: the loss (p.loss set) and/or the gradient (p.grad set).
void ctc_loss(const CtcProblem& p);
inline void ctc_loss_backward(const CtcProblem& p) { ctc_loss(p); }
}  // namespace reference

}  // namespace rudnn::ctc
