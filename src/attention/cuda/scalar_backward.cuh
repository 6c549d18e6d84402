// The CUDA-core attention backward (FlashScalar): probabilities recomputed from the saved
// logsumexp, every gradient written by one thread in a fixed order (no atomics: two runs
// give the same bits, in either mode).
//
//   row_stats      D_i = dout_i · out_i per query row (and, with sinks, the row's term
//                  −exp(sink − lse_i) · D_i of dsinks), one warp per row.
//   dq             the forward's arrangement: a block owns rows of one (batch, KV head), a
//                  warp kRows of them, walking the key tiles; per tile each lane (a key)
//                  forms s, p = exp(s − lse), dp = dout · v and ds = p (dp − D); the lanes
//                  then split D to sum dx · k (dx = ds times the softcap's derivative). With a
//                  bias gradient, ds goes to an FP32 score-sized buffer too.
//   dk, dv         the transpose: a block owns 4 · kRows keys of one (batch, KV head), a warp
//                  kRows of them, walking tiles of 32 query rows of every query head that
//                  shares the KV head (one query row per lane for the products); the lanes
//                  then split the features to sum p · dout (dv) and dx · q (dk).
//   dsinks, dbias  fixed-order sums over the rows (one block per head), and over each
//                  bias element's broadcast axes (one thread per element).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "attention/cuda/common.cuh"
#include "attention/cuda/loads.cuh"
#include "attention/cuda/scalar_forward.cuh"
#include "cuda/reduce.cuh"

namespace rudnn::attn::cuda {

struct ScalarBackwardArgs {
  AttentionSizes sizes;
  BshdIn q, k, v, out, dout;
  const float* lse = nullptr;
  RowStats stats;  // lse's layout, and the row_dot / sink_terms buffers'
  BshdOut dq, dk, dv;
  ScoreRules rules;
  float* row_dot = nullptr;     // D_i
  float* sink_terms = nullptr;  // with sinks
  float* dscores = nullptr;     // with a bias gradient: [B, Hq, Lq, Lk] FP32 (max lengths)
  int group = 1;
  int rows_per_block = 0;
  int64_t row_groups = 0;
  bool vec_q = false, vec_k = false, vec_v = false, vec_dout = false;
  bool vec_dq = false, vec_dk = false, vec_dv = false;
  int stride_qk = 0, stride_v = 0;  // floats per shared row of D and Dv features
};

__device__ __forceinline__ int64_t stat_index(const RowStats& st, int64_t b, int h, int64_t row) {
  return b * st.stride_b + static_cast<int64_t>(h) * st.stride_h + row;
}

// D_i and the sink terms, one warp per (b, h, i).
template <class T>
__global__ void __launch_bounds__(kThreads) row_stats_kernel(const ScalarBackwardArgs a) {
  const AttentionSizes& sz = a.sizes;
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const int64_t row_id = static_cast<int64_t>(blockIdx.x) * kWarps + threadIdx.x / 32;
  if (row_id >= sz.batch * sz.heads_q * sz.len_q) return;
  const int i = static_cast<int>(row_id % sz.len_q);
  const int h = static_cast<int>((row_id / sz.len_q) % sz.heads_q);
  const int64_t b = row_id / (sz.len_q * sz.heads_q);
  const SeqRows seq = sequence_rows(sz, b);
  if (i >= seq.len_q) return;
  const int64_t qrow = seq.q_begin + i;
  const T* const o = static_cast<const T*>(a.out.data) + seq.view_batch * a.out.batch_stride +
                     qrow * a.out.seq_stride + static_cast<int64_t>(h) * a.out.head_stride;
  const T* const g = static_cast<const T*>(a.dout.data) + seq.view_batch * a.dout.batch_stride +
                     qrow * a.dout.seq_stride + static_cast<int64_t>(h) * a.dout.head_stride;
  float sum = 0.0f;
  for (int d = lane; d < sz.dim_v; d += 32) sum = fmaf(to_float(o[d]), to_float(g[d]), sum);
  sum = rudnn::cuda::warp_reduce(sum, rudnn::cuda::SumOp{});
  if (lane != 0) return;
  const int64_t at = stat_index(a.stats, b, h, qrow);
  a.row_dot[at] = sum;
  if (a.sink_terms) {
    const float lse = a.lse[at];
    a.sink_terms[at] = lse == kNegInf ? 0.0f : -__expf(sink_of(a.rules, h) - lse) * sum;
  }
}

// dx of one score from its logit s, capped product x, dout·v = dp, the row's lse and D.
struct ScoreGrad {
  float ds, dx;
};
__device__ __forceinline__ ScoreGrad score_grad(const ScoreRules& r, float s, float x, float dp,
                                                float lse, float row_dot) {
  if (s == kNegInf || lse == kNegInf) return {0.0f, 0.0f};
  const float p = __expf(s - lse);
  const float ds = p * (dp - row_dot);
  float dx = ds;
  if (r.softcap > 0.0f) {
    const float t = x / r.softcap;
    dx *= 1.0f - t * t;
  }
  return {ds, dx};
}

// ---- dq -------------------------------------------------------------------------------------

inline size_t dq_shared_bytes(int rows_per_block, int stride_qk, int stride_v) {
  return (static_cast<size_t>(rows_per_block) * (stride_qk + stride_v) + kWarps * kKeys * 4) *
         sizeof(float);
}

template <class T, int kChunks, int kRows>
__global__ void __launch_bounds__(kThreads, 3) dq_kernel(const ScalarBackwardArgs a) {
  extern __shared__ float4 shared4[];
  float* const shared = reinterpret_cast<float*>(shared4);
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const AttentionSizes& sz = a.sizes;
  const ScoreRules& rules = a.rules;
  int64_t index = blockIdx.x;
  const int64_t row_group = index % a.row_groups;
  index /= a.row_groups;
  const int hk = static_cast<int>(index % sz.heads_kv);
  const int64_t b = index / sz.heads_kv;
  const SeqRows seq = sequence_rows(sz, b);
  const int rows_total = a.group * seq.len_q;
  const int row0 = static_cast<int>(row_group) * a.rows_per_block;
  if (row0 >= rows_total) return;
  const int block_rows = min(a.rows_per_block, rows_total - row0);
  const int dim = static_cast<int>(sz.dim_qk), dim_v = static_cast<int>(sz.dim_v);

  float* const q_s = shared;
  float* const g_s = q_s + a.rows_per_block * a.stride_qk;  // dout rows
  float* const w_s = g_s + a.rows_per_block * a.stride_v;   // [warp][key][4]
  auto row_of = [&](const BshdIn& view, int rho) {
    return static_cast<const T*>(view.data) + seq.view_batch * view.batch_stride +
           (seq.q_begin + rho / a.group) * view.seq_stride +
           static_cast<int64_t>(hk * a.group + rho % a.group) * view.head_stride;
  };
  for (int e = threadIdx.x; e < block_rows * dim; e += kThreads)
    q_s[(e / dim) * a.stride_qk + e % dim] = to_float(row_of(a.q, row0 + e / dim)[e % dim]);
  for (int e = threadIdx.x; e < block_rows * dim_v; e += kThreads)
    g_s[(e / dim_v) * a.stride_v + e % dim_v] =
        to_float(row_of(a.dout, row0 + e / dim_v)[e % dim_v]);
  __syncthreads();

  const int local0 = warp * kRows;
  KeyRange range[kRows];
  RowRules row[kRows];
  float lse[kRows], row_dot[kRows];
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    const int local = local0 + r;
    const int rho = row0 + min(local, block_rows - 1);
    const int i = rho / a.group, h = hk * a.group + rho % a.group;
    range[r] = local < block_rows ? key_range(rules, i, seq.len_q, seq.len_k) : KeyRange{0, 0};
    row[r] = row_rules(rules, h, i, seq.len_q, seq.len_k);
    const int64_t at = stat_index(a.stats, b, h, seq.q_begin + i);
    lse[r] = a.lse[at];
    row_dot[r] = a.row_dot[at];
  }
  const KeyRange first = key_range(rules, row0 / a.group, seq.len_q, seq.len_k);
  const KeyRange last = key_range(rules, (row0 + block_rows - 1) / a.group, seq.len_q, seq.len_k);
  const int key_begin = first.lo, key_end = last.hi;

  float acc[kRows][kChunks][4];
#pragma unroll
  for (int r = 0; r < kRows; ++r)
#pragma unroll
    for (int c = 0; c < kChunks; ++c)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[r][c][e] = 0.0f;
  const T* const k_head = static_cast<const T*>(a.k.data) + seq.view_batch * a.k.batch_stride +
                          seq.k_begin * a.k.seq_stride + hk * a.k.head_stride;
  const T* const v_head = static_cast<const T*>(a.v.data) + seq.view_batch * a.v.batch_stride +
                          seq.k_begin * a.v.seq_stride + hk * a.v.head_stride;
  float* const my_w = w_s + warp * kKeys * 4;

  for (int j0 = key_begin / kKeys * kKeys; j0 < key_end; j0 += kKeys) {
    const int j = j0 + lane;
    float qk[kRows], dp[kRows];
#pragma unroll
    for (int r = 0; r < kRows; ++r) qk[r] = dp[r] = 0.0f;
    if (j < key_end) {
      dot_rows<T, kRows>(k_head + static_cast<int64_t>(j) * a.k.seq_stride, a.vec_k, dim,
                         q_s + local0 * a.stride_qk, a.stride_qk, qk);
      dot_rows<T, kRows>(v_head + static_cast<int64_t>(j) * a.v.seq_stride, a.vec_v, dim_v,
                         g_s + local0 * a.stride_v, a.stride_v, dp);
    }
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      const bool in = j < key_end && j >= range[r].lo && j < range[r].hi;
      float dx = 0.0f;
      if (in) {
        const float x = capped_product(rules, qk[r]);
        const float s = logit(rules, row[r], b, x, j);
        const ScoreGrad gr = score_grad(rules, s, x, dp[r], lse[r], row_dot[r]);
        dx = gr.dx;
        if (a.dscores) {
          a.dscores[((b * sz.heads_q + row[r].h) * sz.len_q + row[r].i) * sz.len_k + j] = gr.ds;
        }
      }
      my_w[lane * 4 + r] = dx;
    }
    __syncwarp();
    accumulate_rows<T, kChunks, kRows>(
        [&](int jj) { return k_head + static_cast<int64_t>(j0 + jj) * a.k.seq_stride; },
        min(kKeys, key_end - j0), my_w, a.vec_k && dim % 4 == 0, dim, lane, acc);
    __syncwarp();
  }

#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    const int local = local0 + r;
    if (local >= block_rows) continue;
    const int rho = row0 + local;
    T* const dst = static_cast<T*>(a.dq.data) + seq.view_batch * a.dq.batch_stride +
                   (seq.q_begin + rho / a.group) * a.dq.seq_stride +
                   static_cast<int64_t>(hk * a.group + rho % a.group) * a.dq.head_stride;
#pragma unroll
    for (int c = 0; c < kChunks; ++c) {
      const int d = c * 128 + lane * 4;
      if (d >= dim) continue;
      float y[4];
#pragma unroll
      for (int e = 0; e < 4; ++e) y[e] = acc[r][c][e] * rules.scale;
      if (a.vec_dq && d + 4 <= dim) {
        store4<T>(dst + d, y);
      } else {
        store_upto4<T>(dst + d, dim - d, y);
      }
    }
  }
}

// ---- dk, dv ---------------------------------------------------------------------------------

inline size_t dkv_shared_bytes(int keys_per_block, int stride_qk, int stride_v) {
  return (static_cast<size_t>(keys_per_block) * (stride_qk + stride_v) + 2 * kWarps * kKeys * 4) *
         sizeof(float);
}

template <class T, int kChunks, int kRows>
__global__ void __launch_bounds__(kThreads, 2) dkv_kernel(const ScalarBackwardArgs a) {
  extern __shared__ float4 shared4[];
  float* const shared = reinterpret_cast<float*>(shared4);
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const AttentionSizes& sz = a.sizes;
  const ScoreRules& rules = a.rules;
  constexpr int kKeysPerBlock = kWarps * kRows;
  int64_t index = blockIdx.x;
  const int64_t key_groups = (sz.len_k + kKeysPerBlock - 1) / kKeysPerBlock;
  const int key_group = static_cast<int>(index % key_groups);
  index /= key_groups;
  const int hk = static_cast<int>(index % sz.heads_kv);
  const int64_t b = index / sz.heads_kv;
  const SeqRows seq = sequence_rows(sz, b);
  const int key0 = key_group * kKeysPerBlock;
  if (key0 >= seq.len_k) return;
  const int block_keys = min(kKeysPerBlock, seq.len_k - key0);
  const int dim = static_cast<int>(sz.dim_qk), dim_v = static_cast<int>(sz.dim_v);

  float* const k_s = shared;
  float* const v_s = k_s + kKeysPerBlock * a.stride_qk;
  float* const p_s = v_s + kKeysPerBlock * a.stride_v;  // [warp][query][4]
  float* const x_s = p_s + kWarps * kKeys * 4;
  auto key_row = [&](const BshdIn& view, int j) {
    return static_cast<const T*>(view.data) + seq.view_batch * view.batch_stride +
           (seq.k_begin + j) * view.seq_stride + static_cast<int64_t>(hk) * view.head_stride;
  };
  for (int e = threadIdx.x; e < block_keys * dim; e += kThreads)
    k_s[(e / dim) * a.stride_qk + e % dim] = to_float(key_row(a.k, key0 + e / dim)[e % dim]);
  for (int e = threadIdx.x; e < block_keys * dim_v; e += kThreads)
    v_s[(e / dim_v) * a.stride_v + e % dim_v] = to_float(key_row(a.v, key0 + e / dim_v)[e % dim_v]);
  __syncthreads();

  const int local0 = warp * kRows;
  int key[kRows];
#pragma unroll
  for (int r = 0; r < kRows; ++r) key[r] = local0 + r < block_keys ? key0 + local0 + r : -1;

  // The query rows that may see this block's keys: positions i with some key in range.
  const int offset = seq.len_k - seq.len_q;
  const int last_key = key0 + block_keys - 1;
  int64_t i_begin = 0, i_end = seq.len_q;
  if (rules.causal) i_begin = max64(0, static_cast<int64_t>(key0) - offset);
  if (rules.window > 0)
    i_end = min64(i_end, static_cast<int64_t>(last_key) - offset + rules.window);
  const int rho_begin = static_cast<int>(i_begin) * a.group;
  const int rho_end = static_cast<int>(max64(i_end, i_begin)) * a.group;

  float dk[kRows][kChunks][4], dv[kRows][kChunks][4];
#pragma unroll
  for (int r = 0; r < kRows; ++r)
#pragma unroll
    for (int c = 0; c < kChunks; ++c)
#pragma unroll
      for (int e = 0; e < 4; ++e) dk[r][c][e] = dv[r][c][e] = 0.0f;
  float* const my_p = p_s + warp * kKeys * 4;
  float* const my_x = x_s + warp * kKeys * 4;
  auto query_row = [&](const BshdIn& view, int rho) {
    return static_cast<const T*>(view.data) + seq.view_batch * view.batch_stride +
           (seq.q_begin + rho / a.group) * view.seq_stride +
           static_cast<int64_t>(hk * a.group + rho % a.group) * view.head_stride;
  };

  for (int t0 = rho_begin; t0 < rho_end; t0 += kKeys) {
    const int rho = t0 + lane;
    const bool row_in = rho < rho_end;
    const int i = row_in ? rho / a.group : 0, h = hk * a.group + (row_in ? rho % a.group : 0);
    float qk[kRows], dp[kRows];
#pragma unroll
    for (int r = 0; r < kRows; ++r) qk[r] = dp[r] = 0.0f;
    float lse = kNegInf, row_dot = 0.0f;
    if (row_in) {
      dot_rows<T, kRows>(query_row(a.q, rho), a.vec_q, dim, k_s + local0 * a.stride_qk, a.stride_qk,
                         qk);
      dot_rows<T, kRows>(query_row(a.dout, rho), a.vec_dout, dim_v, v_s + local0 * a.stride_v,
                         a.stride_v, dp);
      const int64_t at = stat_index(a.stats, b, h, seq.q_begin + i);
      lse = a.lse[at];
      row_dot = a.row_dot[at];
    }
    const KeyRange range = row_in ? key_range(rules, i, seq.len_q, seq.len_k) : KeyRange{0, 0};
    const RowRules rr = row_rules(rules, h, i, seq.len_q, seq.len_k);
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      float p = 0.0f, dx = 0.0f;
      if (key[r] >= range.lo && key[r] < range.hi) {
        const float x = capped_product(rules, qk[r]);
        const float s = logit(rules, rr, b, x, key[r]);
        if (s != kNegInf && lse != kNegInf) p = __expf(s - lse);
        dx = score_grad(rules, s, x, dp[r], lse, row_dot).dx;
      }
      my_p[lane * 4 + r] = p;
      my_x[lane * 4 + r] = dx;
    }
    __syncwarp();
    const int count = min(kKeys, rho_end - t0);
    accumulate_rows<T, kChunks, kRows>([&](int u) { return query_row(a.dout, t0 + u); }, count,
                                       my_p, a.vec_dout && dim_v % 4 == 0, dim_v, lane, dv);
    accumulate_rows<T, kChunks, kRows>([&](int u) { return query_row(a.q, t0 + u); }, count, my_x,
                                       a.vec_q && dim % 4 == 0, dim, lane, dk);
    __syncwarp();
  }

#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    if (key[r] < 0) continue;
    T* const dk_row = static_cast<T*>(a.dk.data) + seq.view_batch * a.dk.batch_stride +
                      (seq.k_begin + key[r]) * a.dk.seq_stride +
                      static_cast<int64_t>(hk) * a.dk.head_stride;
    T* const dv_row = static_cast<T*>(a.dv.data) + seq.view_batch * a.dv.batch_stride +
                      (seq.k_begin + key[r]) * a.dv.seq_stride +
                      static_cast<int64_t>(hk) * a.dv.head_stride;
#pragma unroll
    for (int c = 0; c < kChunks; ++c) {
      const int d = c * 128 + lane * 4;
      if (d < dim) {
        float y[4];
#pragma unroll
        for (int e = 0; e < 4; ++e) y[e] = dk[r][c][e] * rules.scale;
        if (a.vec_dk && d + 4 <= dim) {
          store4<T>(dk_row + d, y);
        } else {
          store_upto4<T>(dk_row + d, dim - d, y);
        }
      }
      if (d < dim_v) {
        if (a.vec_dv && d + 4 <= dim_v) {
          store4<T>(dv_row + d, dv[r][c]);
        } else {
          store_upto4<T>(dv_row + d, dim_v - d, dv[r][c]);
        }
      }
    }
  }
}

// ---- dsinks, dbias, zero rows -----------------------------------------------------------------

// The fixed-order sums after the gradient kernels (scalar_backward_sums.cu).
struct SinkSumArgs {
  AttentionSizes sizes;
  RowStats stats;
  const float* sink_terms = nullptr;
  void* dsinks = nullptr;
  DType dtype = DType::f32;
};
// dsinks[h]: the row terms of head h summed sequence by sequence, row by row.
void sum_sink_terms(const SinkSumArgs& a, cudaStream_t stream);

struct BiasSumArgs {
  const float* dscores = nullptr;  // [B, Hq, Lq, Lk]
  int64_t target[4] = {0, 0, 0, 0};
  int64_t strides[4] = {0, 0, 0, 0};  // the output's element strides per axis (0: broadcast)
  int64_t numel = 0;
  void* dbias = nullptr;
  DType dtype = DType::f32;
};
// Each bias element: the FP32 dS over its broadcast axes, b, h, i, j ascending.
void sum_bias_gradient(const BiasSumArgs& a, cudaStream_t stream);

// Zeros every (row, head) of a [total, heads, dim] output (varlen gradients: rows outside
// every sequence are written by nothing else).
template <class T>
__global__ void __launch_bounds__(256) zero_rows_kernel(const BshdOut view) {
  const int64_t total = view.shape.seq * view.shape.heads * view.shape.dim;
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * 256 + threadIdx.x; e < total;
       e += static_cast<int64_t>(gridDim.x) * 256) {
    const int64_t d = e % view.shape.dim, h = (e / view.shape.dim) % view.shape.heads,
                  s = e / (view.shape.dim * view.shape.heads);
    static_cast<T*>(view.data)[s * view.seq_stride + h * view.head_stride + d] =
        from_float<T>(0.0f);
  }
}

}  // namespace rudnn::attn::cuda
