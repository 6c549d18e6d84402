// Validated attention problems: what the backends (the CPU reference and the CUDA kernels)
// receive. Every pointer is valid for its described extent, every dtype is supported,
// outputs overlap no input; the plan is the one plan_attention reports for these arguments.
// Backends neither re-validate nor throw for user errors.
#pragma once

#include <cstdint>

#include "common/views.h"
#include "rudnn/attention.h"
#include "rudnn/dtype.h"

namespace rudnn::attn {

using common::BshdIn;
using common::BshdOut;

// A tensor read at (b, h, i, j) of [B, Hq, Lq, Lk] through strides (0 on broadcast axes):
// masks and biases, in any layout.
struct Broadcast4 {
  const void* data = nullptr;  // null: absent
  DType dtype = DType::f32;    // boolean (mask), or a float dtype (additive)
  int64_t stride_b = 0, stride_h = 0, stride_i = 0, stride_j = 0;
};

// Everything that turns scale · q·k into a softmax logit (see rudnn/attention.h).
struct ScoreRules {
  float scale = 1.0f;
  bool causal = false;
  int64_t window = 0;           // 0: none (needs causal)
  float softcap = 0.0f;         // 0: none
  Broadcast4 mask;              // boolean or additive
  Broadcast4 bias;              // additive
  const void* sinks = nullptr;  // [Hq], sinks_dtype; null: none
  DType sinks_dtype = DType::f32;
  const void* alibi = nullptr;  // [Hq], alibi_dtype; null: none
  DType alibi_dtype = DType::f32;
};

// The sizes. For varlen, batch is the number of sequences and len_q / len_k the host
// maxima; the views are then [total, heads, dim] (batch 1) and cu_q / cu_k give each
// sequence's rows.
struct AttentionSizes {
  int64_t batch = 0, heads_q = 0, heads_kv = 0, len_q = 0, len_k = 0, dim_qk = 0, dim_v = 0;
  bool varlen = false;
  const int32_t* cu_q = nullptr;  // [batch + 1], on the operands' device
  const int32_t* cu_k = nullptr;
  int64_t total_q = 0, total_k = 0;  // varlen: the packed rows
};

// Per-row statistics [B, Hq, Lq] (padded) or [Hq, total_q] (varlen), dense: element of
// (b, h, global row r) at b * stride_b + h * stride_h + r, where r = i (padded) or
// cu_q[b] + i (varlen, stride_b = 0).
struct RowStats {
  int64_t stride_b = 0, stride_h = 0;
};

struct AttentionForward {
  DType dtype = DType::f32;  // q, k, v, out
  AttentionSizes sizes;
  BshdIn q, k, v;
  BshdOut out;
  void* lse = nullptr;  // F32 (F64 for F64 problems); null: not wanted
  RowStats lse_layout;
  ScoreRules rules;
  AttentionPlan plan;
  void* scratch = nullptr;  // plan.scratch_bytes on the device (null when 0, and on the CPU)
};

struct AttentionBackward {
  DType dtype = DType::f32;
  AttentionSizes sizes;
  BshdIn q, k, v, out, dout;
  const void* lse = nullptr;  // F32 (F64 for F64 problems)
  RowStats lse_layout;
  BshdOut dq, dk, dv;
  void* dsinks = nullptr;  // [Hq], rules.sinks_dtype; null unless sinks
  // The bias's gradient: a contiguous tensor of the bias's own shape, in dbias_dtype, whose
  // element for (b, h, i, j) sits at the broadcast strides (0 on broadcast axes) in
  // dbias_strides; null unless wanted.
  void* dbias = nullptr;
  DType dbias_dtype = DType::f32;
  int64_t dbias_numel = 0;
  Broadcast4 dbias_strides;  // data unused; the strides of the output as a broadcast view
  ScoreRules rules;
  bool deterministic = false;
  AttentionPlan plan;
  void* scratch = nullptr;  // plan.scratch_bytes on the device (null when 0, and on the CPU)
};

}  // namespace rudnn::attn
