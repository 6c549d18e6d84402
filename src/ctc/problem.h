// The validated CTC problem the backends run: dense host views, every length and label
// already checked (ctc.cpp), so the reference never re-validates.
#pragma once

#include <cstdint>

#include "rudnn/ctc.h"
#include "rudnn/dtype.h"

namespace rudnn::ctc {

struct CtcProblem {
  int64_t steps = 0, batch = 0, classes = 0;  // T, N, C
  bool padded = false;                        // padded [N, S] targets, else concatenated [L]
  int64_t padded_stride = 0;                  // S for padded targets
  int64_t blank = 0;
  CtcReduction reduction = CtcReduction::mean;
  bool zero_infinity = false;
  const double* log_probs = nullptr;  // [T, N, C] dense
  const void* targets = nullptr;      // dense, target_dtype
  DType target_dtype = DType::i64;
  const void* input_lengths = nullptr;  // [N] dense
  DType input_length_dtype = DType::i64;
  const void* target_lengths = nullptr;  // [N] dense
  DType target_length_dtype = DType::i64;
  double* loss = nullptr;             // [N] or 0-d; null for backward
  const double* grad_loss = nullptr;  // [N] or 0-d; backward only
  double* grad = nullptr;             // [T, N, C] dense; null for forward
};

// Element i of an I32 or I64 array.
inline int64_t index_at(const void* data, DType dtype, int64_t i) {
  return dtype == DType::i32 ? static_cast<const int32_t*>(data)[i]
                             : static_cast<const int64_t*>(data)[i];
}

namespace reference {
// The float64 definition of the op: the loss (p.loss set) and/or the gradient (p.grad set).
void ctc_loss(const CtcProblem& p);
}  // namespace reference

}  // namespace rudnn::ctc
