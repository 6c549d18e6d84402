// Validated, normalised problems of the normalization family: what the backends (the CPU
// reference and the CUDA kernels) receive. Every pointer is valid for the described extent,
// every dtype is supported, outputs overlap no input. Backends neither re-validate nor throw
// for user errors.
#pragma once

#include <cstdint>

#include "common/views.h"
#include "rudnn/dtype.h"

namespace rudnn::norm {

// Every problem is rows x cols of its dtype (F32, F16, BF16, or F64 on the CPU), filled by
// the entry points from common::row_shape. The fields are spelled out in each struct rather
// than inherited: the kernels take these structs by value, and the layout they were tuned
// with stays put.
using common::RowsIn;
using common::RowsOut;

// An optional [cols] vector (gamma, beta, their gradients) in F32 or the problem's dtype.
struct ParamIn {
  const void* data = nullptr;  // null: absent
  bool is_f32 = true;
};
struct ParamOut {
  void* data = nullptr;  // null: not requested
  bool is_f32 = true;
};

enum class NormKind { layer, rms, add_rms };

struct NormForward {
  NormKind kind = NormKind::rms;
  int64_t rows = 0, cols = 0;
  DType dtype = DType::f32;
  RowsIn x;
  RowsIn residual;      // add_rms only
  ParamIn gamma, beta;  // beta: layer only
  RowsOut y;
  RowsOut sum;  // add_rms only: x + residual rounded to dtype
  float eps = 1e-5f;
  // layer only, optional: each row's mean and rstd = 1 / sqrt(var + eps), [rows] dense, F32
  // (F64 for F64 rows); null: not requested.
  void* mean = nullptr;
  void* rstd = nullptr;
};

struct NormBackward {
  NormKind kind = NormKind::rms;  // layer or rms
  int64_t rows = 0, cols = 0;
  DType dtype = DType::f32;
  RowsIn dy, x;
  ParamIn gamma;
  RowsOut dx;
  ParamOut dgamma, dbeta;  // dbeta: layer only
  float eps = 1e-5f;       // unused when the statistics are given
  // layer only, optional: the forward's saved mean and rstd per row ([rows] dense, F32, F64
  // for F64 rows), read instead of recomputed; null: recomputed from x with eps.
  const void* mean = nullptr;
  const void* rstd = nullptr;
};

struct SoftmaxForward {
  int64_t rows = 0, cols = 0;
  DType dtype = DType::f32;
  RowsIn x;
  RowsOut y;            // softmax: the probabilities
  void* lse = nullptr;  // logsumexp: [rows] dense, in dtype (exactly one of y / lse is set)
};

struct SoftmaxBackward {
  int64_t rows = 0, cols = 0;
  DType dtype = DType::f32;
  RowsIn dy, y;
  RowsOut dx;
};

// Cross entropy forward and/or backward over one pass of the logits.
struct CrossEntropy {
  int64_t rows = 0, cols = 0;
  DType dtype = DType::f32;  // logits and dlogits
  RowsIn logits;
  const void* targets = nullptr;  // [rows] dense
  DType target_dtype = DType::i64;
  bool has_ignore_index = false;
  int64_t ignore_index = 0;
  void* loss = nullptr;  // [rows] dense, F32 (F64 for F64 logits); null: backward only
  RowsOut dlogits;       // data may be null (forward only)
  const void* dloss =
      nullptr;  // [rows] dense, loss's dtype; null: every row's gradient is grad_scale
  float grad_scale = 1.0f;
};

// x *= *scale in place, skipped when *scale == 1 (read where x lives).
struct ScaleRows {
  int64_t rows = 0, cols = 0;
  DType dtype = DType::f32;
  RowsOut x;
  const float* scale = nullptr;
};

}  // namespace rudnn::norm
