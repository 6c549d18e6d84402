// Device pieces every attention kernel shares: where a sequence's rows are, how a product
// q·k becomes a softmax logit (scale, softcap, ALiBi, bias, masks, causal and window
// ranges), and the end of a row's online softmax (the sink and the logsumexp). The CUDA-core
// kernels (FlashScalar, SplitKv, their backward) and Composed's row kernels use the same
// functions, so that every strategy applies the options alike.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "attention/problem.h"
#include "cuda/reduce.cuh"
#include "cuda/types.cuh"

namespace rudnn::attn::cuda {

using rudnn::cuda::from_float;
using rudnn::cuda::to_float;

constexpr float kNegInf = -__builtin_huge_valf();

__host__ __device__ __forceinline__ int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }
__host__ __device__ __forceinline__ int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }

// One element of a tensor of `dtype` as FP32 (masks and biases in any float dtype or
// boolean; per-head vectors).
__device__ __forceinline__ float load_as_float(const void* data, DType dtype, int64_t index) {
  switch (dtype) {
    case DType::f16:
      return __half2float(static_cast<const __half*>(data)[index]);
    case DType::bf16:
      return __bfloat162float(static_cast<const __nv_bfloat16*>(data)[index]);
    case DType::boolean:
      return static_cast<const unsigned char*>(data)[index] != 0 ? 1.0f : 0.0f;
    default:
      return static_cast<const float*>(data)[index];
  }
}

__device__ __forceinline__ void store_from_float(void* data, DType dtype, int64_t index, float v) {
  switch (dtype) {
    case DType::f16:
      static_cast<__half*>(data)[index] = __float2half_rn(v);
      break;
    case DType::bf16:
      static_cast<__nv_bfloat16*>(data)[index] = __float2bfloat16_rn(v);
      break;
    default:
      static_cast<float*>(data)[index] = v;
      break;
  }
}

// The rows of sequence b: padded batches index their batch entry, varlen the packed rows
// given by cu_seqlens (clamped into the tensors, so that offsets the host never checked
// cannot address memory outside them; such a call's results are undefined).
struct SeqRows {
  int64_t view_batch;  // the batch index of the views (0 for varlen)
  int64_t q_begin, k_begin;
  int len_q, len_k;
};

__device__ __forceinline__ SeqRows sequence_rows(const AttentionSizes& s, int64_t b) {
  SeqRows r;
  if (!s.varlen) {
    r.view_batch = b;
    r.q_begin = 0;
    r.k_begin = 0;
    r.len_q = static_cast<int>(s.len_q);
    r.len_k = static_cast<int>(s.len_k);
    return r;
  }
  r.view_batch = 0;
  const int64_t q0 = min64(max64(s.cu_q[b], 0), s.total_q);
  const int64_t q1 = min64(max64(s.cu_q[b + 1], q0), s.total_q);
  const int64_t k0 = min64(max64(s.cu_k[b], 0), s.total_k);
  const int64_t k1 = min64(max64(s.cu_k[b + 1], k0), s.total_k);
  r.q_begin = q0;
  r.k_begin = k0;
  r.len_q = static_cast<int>(min64(q1 - q0, s.len_q));
  r.len_k = static_cast<int>(min64(k1 - k0, s.len_k));
  return r;
}

// The keys query i may see before the masks: [lo, hi) within the sequence.
struct KeyRange {
  int lo, hi;
};
__device__ __forceinline__ KeyRange key_range(const ScoreRules& r, int i, int len_q, int len_k) {
  const int64_t pos = static_cast<int64_t>(i) + len_k - len_q;  // the query's position
  int64_t hi = len_k, lo = 0;
  if (r.causal) hi = min64(hi, pos + 1);
  if (r.window > 0) lo = max64(lo, pos - r.window + 1);
  if (hi < lo) hi = lo;
  return {static_cast<int>(max64(lo, 0)), static_cast<int>(max64(hi, 0))};
}

// Per-row constants of the logit transform (mask and bias offsets are formed where used:
// kernels hold several rows, and registers are what bounds them).
struct RowRules {
  float slope;  // ALiBi (0 without)
  int h, i;
  int pos;  // i + Lk - Lq
};
__device__ __forceinline__ RowRules row_rules(const ScoreRules& r, int h, int i, int len_q,
                                              int len_k) {
  RowRules rr;
  rr.slope = r.alibi ? load_as_float(r.alibi, r.alibi_dtype, h) : 0.0f;
  rr.h = h;
  rr.i = i;
  rr.pos = i + len_k - len_q;
  return rr;
}

// softcap(x) = cap · tanh(x / cap), or x without a softcap.
__device__ __forceinline__ float soft_capped(const ScoreRules& r, float x) {
  return r.softcap > 0.0f ? r.softcap * tanhf(x / r.softcap) : x;
}

// The capped product x = softcap(scale · dot) of a key that is in range.
__device__ __forceinline__ float capped_product(const ScoreRules& r, float dot) {
  return soft_capped(r, dot * r.scale);
}

// The logit of key j (in range) of batch b's row from its capped product: ALiBi, bias,
// mask.
__device__ __forceinline__ float logit(const ScoreRules& r, const RowRules& rr, int64_t b, float x,
                                       int j) {
  float s = x;
  if (r.alibi) s -= rr.slope * fabsf(static_cast<float>(rr.pos - j));
  if (r.bias.data) {
    const int64_t at =
        b * r.bias.stride_b + rr.h * r.bias.stride_h + rr.i * r.bias.stride_i + j * r.bias.stride_j;
    s += load_as_float(r.bias.data, r.bias.dtype, at);
  }
  if (r.mask.data) {
    const int64_t at =
        b * r.mask.stride_b + rr.h * r.mask.stride_h + rr.i * r.mask.stride_i + j * r.mask.stride_j;
    const float m = load_as_float(r.mask.data, r.mask.dtype, at);
    if (r.mask.dtype == DType::boolean) {
      if (m == 0.0f) s = kNegInf;
    } else {
      s += m;
    }
  }
  return s;
}

// The end of a row's softmax from its running max m, sum l (of exp(s - m)) and the sink:
// out = o · factor, and the row's logsumexp. A row with no key and no sink (l = 0) gives
// zeros and −inf. Every kernel finishes a row through this one function (so that a row
// merged from one partition equals, bit for bit, the row finished in place).
struct RowEnd {
  float factor, lse;
};
__device__ __forceinline__ RowEnd finish_row(float m, float l, bool has_sink, float sink) {
  if (has_sink) {
    const float top = rudnn::cuda::MaxOp{}(m, sink);
    const float keep = m == kNegInf ? 0.0f : __expf(m - top);
    const float total = l * keep + __expf(sink - top);
    return {keep / total, top + logf(total)};
  }
  if (!(l > 0.0f)) {
    if (l != l || m != m) return {__builtin_nanf(""), __builtin_nanf("")};
    return {0.0f, kNegInf};
  }
  return {1.0f / l, m + logf(l)};
}

__device__ __forceinline__ float sink_of(const ScoreRules& r, int h) {
  return r.sinks ? load_as_float(r.sinks, r.sinks_dtype, h) : kNegInf;
}

}  // namespace rudnn::attn::cuda
