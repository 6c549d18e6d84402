// The tensor-core attention backward (strategy Flash), FlashAttention-2's recomputation on
// mma.sync m16n8k16, in two kernels that use no atomics (every gradient element is written
// once, by one thread, after a fixed-order sum: both modes are deterministic):
//
//   dq   a block owns 64 query rows of one (sequence, query head), a warp 16 of them, and
//        walks the key tiles as the forward does (cp.async double buffer of K and V):
//        S = Q K^T, dP = dO V^T, P = exp2(S' - lse'), dS = P (dP - D) (times the softcap's
//        derivative), dq += dS K with dS rounded to the operands' dtype.
//   dk, dv  a block owns 64 keys of one (sequence, KV head), a warp 16 of them, and walks
//        tiles of 32 query rows of every query head sharing the KV head (so that GQA sums
//        in registers, in head order): S^T = K Q^T, dP^T = V dO^T, then dv += P^T dO and
//        dk += dS^T Q.
//
// D_i = dO_i · O_i (and the rows' dsinks terms) come first from the CUDA-core backward's
// row_stats kernel, and dsinks after from its fixed-order sum (scalar_backward.cuh).
// The per-element rules (softcap, ALiBi, mask and bias arrays) run through common.cuh's
// logit as in the forward (kRules).
#pragma once

#include "attention/cuda/flash_forward.cuh"
#include "attention/plan.h"

namespace rudnn::attn::cuda::flash {

struct FlashBackwardArgs {
  AttentionSizes sizes;
  BshdIn q, k, v, dout;
  BshdOut dq, dk, dv;
  const float* lse = nullptr;
  const float* row_dot = nullptr;  // D_i, laid out as lse
  RowStats stats;
  ScoreRules rules;
  int group = 1;
  int64_t q_blocks = 0;  // dq: 64-row query tiles per (sequence, head)
  int64_t k_blocks = 0;  // dk/dv: 64-key tiles per (sequence, KV head)
  float scale_log2 = 0;
  bool vec_q = false, vec_k = false, vec_v = false, vec_dout = false;
  bool vec_dq = false, vec_dk = false, vec_dv = false;
};

template <int D, int DV>
struct BackwardConfig {
  static_assert(D % 32 == 0 && DV % 32 == 0 && D <= 256 && DV <= 256);
  static constexpr int kKeys = 64;     // dq: keys per tile; dk/dv: keys per block
  static constexpr int kQueries = 32;  // dk/dv: query rows per tile
  static constexpr int kLdQ = D + 8, kLdK = D + 8, kLdV = DV + 8, kLdO = DV + 8;
  static constexpr size_t kDqShared = 2 * static_cast<size_t>(kBlockM * kLdQ + kBlockM * kLdO +
                                                              2 * kKeys * kLdK + 2 * kKeys * kLdV);
  static constexpr size_t kDkvShared =
      2 * static_cast<size_t>(kKeys * kLdK + kKeys * kLdV + 2 * kQueries * kLdQ +
                              2 * kQueries * kLdO) +
      4 * sizeof(float) * kQueries;
  // The plan refuses devices without this much (attention/plan.h).
  static_assert((kDqShared > kDkvShared ? kDqShared : kDkvShared) ==
                flash_backward_shared_bytes(D, DV));
};

__device__ __forceinline__ int64_t stat_at(const RowStats& st, int64_t b, int h, int64_t row) {
  return b * st.stride_b + static_cast<int64_t>(h) * st.stride_h + row;
}

// A row's lse in base-2 units, +inf for a row with no key (lse -inf) so that every p of it
// is exp2(finite or -inf - inf) = 0.
__device__ __forceinline__ float lse_base2(float lse) {
  return lse == kNegInf ? __builtin_huge_valf() : lse * kLog2e;
}

// p and dx (dS times the softcap's derivative) of one score in range, from q·k, dO·v minus
// D_i, and the row's base-2 lse.
template <bool kRules>
__device__ __forceinline__ void score_grad(const ScoreRules& rules, const RowRules& rr, int64_t b,
                                           float dot, int key, float lse2, float dp_minus_d,
                                           float scale_log2, float& p, float& dx) {
  if constexpr (kRules) {
    const float x = capped_product(rules, dot);
    const float s = logit(rules, rr, b, x, key);
    p = exp2f(s * kLog2e - lse2);
    dx = p * dp_minus_d;
    if (rules.softcap > 0.0f) {
      const float t = x / rules.softcap;
      dx *= 1.0f - t * t;
    }
  } else {
    p = exp2f(dot * scale_log2 - lse2);
    dx = p * dp_minus_d;
  }
}

// Stages a warp's accumulator tile [16 rows][kCols] (FP32, mma layout) in shared memory as T
// at rows row0.., scaled.
template <class T, int kCols>
__device__ __forceinline__ void stage_accumulators(T* dst, int ld, int row0,
                                                   const float (&acc)[kCols / 8][4], float scale) {
  const int lane = static_cast<int>(threadIdx.x) % 32, g = lane / 4, t4 = lane % 4;
#pragma unroll
  for (int j = 0; j < kCols / 8; ++j) {
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
      *reinterpret_cast<uint32_t*>(dst + (row0 + g + 8 * hr) * ld + 8 * j + 2 * t4) =
          rudnn::cuda::pack_pair<T>(acc[j][2 * hr] * scale, acc[j][2 * hr + 1] * scale);
    }
  }
}

// Rows [0, rows) of a staged tile to global rows `row_stride` apart.
template <class T, int kCols, int kTileRows>
__device__ __forceinline__ void store_tile(T* dst, int64_t row_stride, const T* src, int ld,
                                           int rows, bool vec) {
  const int tid = static_cast<int>(threadIdx.x);
  if (vec) {
    constexpr int kChunks = kCols / 8;
#pragma unroll
    for (int c = tid; c < kTileRows * kChunks; c += kThreads) {
      const int r = c / kChunks, ch = c % kChunks;
      if (r < rows) {
        *reinterpret_cast<uint4*>(dst + r * row_stride + ch * 8) =
            *reinterpret_cast<const uint4*>(src + r * ld + ch * 8);
      }
    }
  } else {
    for (int e = tid; e < rows * kCols; e += kThreads) {
      const int r = e / kCols, col = e % kCols;
      dst[r * row_stride + col] = src[r * ld + col];
    }
  }
}

template <class T, int D, int DV, bool kRules>
__global__ void __launch_bounds__(kThreads, 2) flash_dq_kernel(const FlashBackwardArgs a) {
  using C = BackwardConfig<D, DV>;
  constexpr int kBlockN = C::kKeys;
  constexpr int kNGroups = kBlockN / 8;
  namespace tc = rudnn::cuda::tc;

  extern __shared__ uint4 shared4[];
  T* const q_s = reinterpret_cast<T*>(shared4);  // [64][kLdQ]
  T* const g_s = q_s + kBlockM * C::kLdQ;        // dO [64][kLdO]
  T* const k_s = g_s + kBlockM * C::kLdO;        // [2][kBlockN][kLdK]
  T* const v_s = k_s + 2 * kBlockN * C::kLdK;    // [2][kBlockN][kLdV]

  const int tid = static_cast<int>(threadIdx.x);
  const int warp = tid / 32, lane = tid % 32, g = lane / 4, t4 = lane % 4;
  const AttentionSizes& sz = a.sizes;
  const ScoreRules& rules = a.rules;

  int64_t index = blockIdx.x;
  const int m_block = static_cast<int>(a.q_blocks - 1 - index % a.q_blocks);
  index /= a.q_blocks;
  const int h = static_cast<int>(index % sz.heads_q);
  const int64_t b = index / sz.heads_q;
  const SeqRows seq = sequence_rows(sz, b);
  const int i0 = m_block * kBlockM;
  if (i0 >= seq.len_q) return;
  const int hk = h / a.group;
  const int rows_here = min(kBlockM, seq.len_q - i0);

  const KeyRange first = key_range(rules, i0, seq.len_q, seq.len_k);
  const KeyRange last = key_range(rules, i0 + rows_here - 1, seq.len_q, seq.len_k);
  const int t_first = first.lo / kBlockN;
  const int n_tiles = last.hi > first.lo ? (last.hi + kBlockN - 1) / kBlockN - t_first : 0;

  int qi[2];
  KeyRange range[2];
  [[maybe_unused]] RowRules rr[2];
  float lse2[2], row_dot[2];
#pragma unroll
  for (int hr = 0; hr < 2; ++hr) {
    qi[hr] = i0 + warp * 16 + g + 8 * hr;
    const bool real = qi[hr] < seq.len_q;
    range[hr] = real ? key_range(rules, qi[hr], seq.len_q, seq.len_k) : KeyRange{0, 0};
    const int64_t at = stat_at(a.stats, b, h, seq.q_begin + (real ? qi[hr] : i0));
    lse2[hr] = real ? lse_base2(a.lse[at]) : __builtin_huge_valf();
    row_dot[hr] = real ? a.row_dot[at] : 0.0f;
    if constexpr (kRules) rr[hr] = row_rules(rules, h, qi[hr], seq.len_q, seq.len_k);
  }

  auto row_ptr = [&](const BshdIn& view, int64_t row, int head) {
    return static_cast<const T*>(view.data) + seq.view_batch * view.batch_stride +
           row * view.seq_stride + static_cast<int64_t>(head) * view.head_stride;
  };
  const T* const k_rows = row_ptr(a.k, seq.k_begin, hk);
  const T* const v_rows = row_ptr(a.v, seq.k_begin, hk);
  auto load_kv = [&](int tile, int stage) {
    const int n0 = tile * kBlockN;
    const int valid = min(kBlockN, seq.len_k - n0);
    load_tile<T, D, C::kLdK, kBlockN>(k_s + stage * kBlockN * C::kLdK, k_rows + n0 * a.k.seq_stride,
                                      a.k.seq_stride, valid, a.vec_k, a.k.data);
    load_tile<T, DV, C::kLdV, kBlockN>(v_s + stage * kBlockN * C::kLdV,
                                       v_rows + n0 * a.v.seq_stride, a.v.seq_stride, valid, a.vec_v,
                                       a.v.data);
  };
  load_tile<T, D, C::kLdQ, kBlockM>(q_s, row_ptr(a.q, seq.q_begin + i0, h), a.q.seq_stride,
                                    rows_here, a.vec_q, a.q.data);
  load_tile<T, DV, C::kLdO, kBlockM>(g_s, row_ptr(a.dout, seq.q_begin + i0, h), a.dout.seq_stride,
                                     rows_here, a.vec_dout, a.dout.data);
  if (n_tiles > 0) load_kv(t_first, 0);
  tc::cp_async_commit();

  float dq[D / 8][4];
#pragma unroll
  for (int j = 0; j < D / 8; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) dq[j][e] = 0.0f;

  const int a_row = warp * 16 + (lane % 8) + 8 * ((lane / 8) % 2), a_col = 8 * (lane / 16);
  const int kb_row = (lane % 8) + 8 * (lane / 16), kb_col = 8 * ((lane / 8) % 2);
  const int vb_row = (lane % 8) + 8 * ((lane / 8) % 2), vb_col = 8 * (lane / 16);

  for (int it = 0; it < n_tiles; ++it) {
    const int stage = it & 1;
    const int n0 = (t_first + it) * kBlockN;
    if (it + 1 < n_tiles) load_kv(t_first + it + 1, stage ^ 1);
    tc::cp_async_commit();
    tc::cp_async_wait<1>();
    __syncthreads();

    const T* const k_st = k_s + stage * kBlockN * C::kLdK;
    const T* const v_st = v_s + stage * kBlockN * C::kLdV;
    float s[kNGroups][4], dp[kNGroups][4];
#pragma unroll
    for (int j = 0; j < kNGroups; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) s[j][e] = dp[j][e] = 0.0f;
        // S = Q K^T and dP = dO V^T.
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      uint32_t af[4];
      tc::ldmatrix<4, false>(af, q_s + a_row * C::kLdQ + kk * 16 + a_col);
#pragma unroll
      for (int nb = 0; nb < kBlockN / 16; ++nb) {
        uint32_t bf[4];
        tc::ldmatrix<4, false>(bf, k_st + (nb * 16 + kb_row) * C::kLdK + kk * 16 + kb_col);
        const uint32_t b0[2] = {bf[0], bf[1]}, b1[2] = {bf[2], bf[3]};
        tc::mma_16816<T>(s[2 * nb], af, b0);
        tc::mma_16816<T>(s[2 * nb + 1], af, b1);
      }
    }
#pragma unroll
    for (int kk = 0; kk < DV / 16; ++kk) {
      uint32_t af[4];
      tc::ldmatrix<4, false>(af, g_s + a_row * C::kLdO + kk * 16 + a_col);
#pragma unroll
      for (int nb = 0; nb < kBlockN / 16; ++nb) {
        uint32_t bf[4];
        tc::ldmatrix<4, false>(bf, v_st + (nb * 16 + kb_row) * C::kLdV + kk * 16 + kb_col);
        const uint32_t b0[2] = {bf[0], bf[1]}, b1[2] = {bf[2], bf[3]};
        tc::mma_16816<T>(dp[2 * nb], af, b0);
        tc::mma_16816<T>(dp[2 * nb + 1], af, b1);
      }
    }
    // dS (times the softcap's derivative) over S's registers.
#pragma unroll
    for (int j = 0; j < kNGroups; ++j) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int hr = e / 2;
        const int key = n0 + 8 * j + 2 * t4 + (e % 2);
        float p = 0.0f, dx = 0.0f;
        if (key >= range[hr].lo && key < range[hr].hi) {
          score_grad<kRules>(rules, rr[hr], b, s[j][e], key, lse2[hr], dp[j][e] - row_dot[hr],
                             a.scale_log2, p, dx);
        }
        s[j][e] = dx;
      }
    }
    // dq += dS K.
#pragma unroll
    for (int kk = 0; kk < kBlockN / 16; ++kk) {
      const uint32_t pa[4] = {rudnn::cuda::pack_pair<T>(s[2 * kk][0], s[2 * kk][1]),
                              rudnn::cuda::pack_pair<T>(s[2 * kk][2], s[2 * kk][3]),
                              rudnn::cuda::pack_pair<T>(s[2 * kk + 1][0], s[2 * kk + 1][1]),
                              rudnn::cuda::pack_pair<T>(s[2 * kk + 1][2], s[2 * kk + 1][3])};
#pragma unroll
      for (int nb = 0; nb < D / 16; ++nb) {
        uint32_t bf[4];
        tc::ldmatrix<4, true>(bf, k_st + (kk * 16 + vb_row) * C::kLdK + nb * 16 + vb_col);
        const uint32_t b0[2] = {bf[0], bf[1]}, b1[2] = {bf[2], bf[3]};
        tc::mma_16816<T>(dq[2 * nb], pa, b0);
        tc::mma_16816<T>(dq[2 * nb + 1], pa, b1);
      }
    }
    __syncthreads();
  }
  tc::cp_async_wait<0>();
  __syncthreads();

  stage_accumulators<T, D>(q_s, C::kLdQ, warp * 16, dq, rules.scale);
  __syncthreads();
  T* const dq_rows = static_cast<T*>(a.dq.data) + seq.view_batch * a.dq.batch_stride +
                     (seq.q_begin + i0) * a.dq.seq_stride +
                     static_cast<int64_t>(h) * a.dq.head_stride;
  store_tile<T, D, kBlockM>(dq_rows, a.dq.seq_stride, q_s, C::kLdQ, rows_here, a.vec_dq);
}

template <class T, int D, int DV, bool kRules>
__global__ void __launch_bounds__(kThreads, 2) flash_dkv_kernel(const FlashBackwardArgs a) {
  using C = BackwardConfig<D, DV>;
  constexpr int kKeys = C::kKeys, kQueries = C::kQueries;
  constexpr int kQGroups = kQueries / 8;
  namespace tc = rudnn::cuda::tc;

  extern __shared__ uint4 shared4[];
  T* const k_s = reinterpret_cast<T*>(shared4);  // [64][kLdK]
  T* const v_s = k_s + kKeys * C::kLdK;          // [64][kLdV]
  T* const q_s = v_s + kKeys * C::kLdV;          // [2][kQueries][kLdQ]
  T* const g_s = q_s + 2 * kQueries * C::kLdQ;   // dO [2][kQueries][kLdO]
  float* const lse_s = reinterpret_cast<float*>(g_s + 2 * kQueries * C::kLdO);  // [2][kQueries]
  float* const dot_s = lse_s + 2 * kQueries;                                    // [2][kQueries]

  const int tid = static_cast<int>(threadIdx.x);
  const int warp = tid / 32, lane = tid % 32, g = lane / 4, t4 = lane % 4;
  const AttentionSizes& sz = a.sizes;
  const ScoreRules& rules = a.rules;

  int64_t index = blockIdx.x;
  const int n_block = static_cast<int>(index % a.k_blocks);
  index /= a.k_blocks;
  const int hk = static_cast<int>(index % sz.heads_kv);
  const int64_t b = index / sz.heads_kv;
  const SeqRows seq = sequence_rows(sz, b);
  const int key0 = n_block * kKeys;
  if (key0 >= seq.len_k) return;
  const int keys_here = min(kKeys, seq.len_k - key0);

  // The query rows that may see one of the block's keys.
  const int offset = seq.len_k - seq.len_q;
  const int last_key = key0 + keys_here - 1;
  int64_t i_begin = 0, i_end = seq.len_q;
  if (rules.causal) i_begin = min64(max64(0, static_cast<int64_t>(key0) - offset), seq.len_q);
  if (rules.window > 0)
    i_end = min64(i_end, static_cast<int64_t>(last_key) - offset + rules.window);
  i_end = max64(i_end, i_begin);
  const int q_tiles = static_cast<int>((i_end - i_begin + kQueries - 1) / kQueries);
  const int steps = a.group * q_tiles;

  auto row_ptr = [&](const BshdIn& view, int64_t row, int head) {
    return static_cast<const T*>(view.data) + seq.view_batch * view.batch_stride +
           row * view.seq_stride + static_cast<int64_t>(head) * view.head_stride;
  };
  load_tile<T, D, C::kLdK, kKeys>(k_s, row_ptr(a.k, seq.k_begin + key0, hk), a.k.seq_stride,
                                  keys_here, a.vec_k, a.k.data);
  load_tile<T, DV, C::kLdV, kKeys>(v_s, row_ptr(a.v, seq.k_begin + key0, hk), a.v.seq_stride,
                                   keys_here, a.vec_v, a.v.data);
  // Step st: query head hk * group + st / q_tiles, rows i_begin + 32 (st % q_tiles) ...
  auto load_step = [&](int st, int stage) {
    const int h = hk * a.group + st / q_tiles;
    const int i0 = static_cast<int>(i_begin) + (st % q_tiles) * kQueries;
    const int valid = static_cast<int>(min64(kQueries, i_end - i0));
    load_tile<T, D, C::kLdQ, kQueries>(q_s + stage * kQueries * C::kLdQ,
                                       row_ptr(a.q, seq.q_begin + i0, h), a.q.seq_stride, valid,
                                       a.vec_q, a.q.data);
    load_tile<T, DV, C::kLdO, kQueries>(g_s + stage * kQueries * C::kLdO,
                                        row_ptr(a.dout, seq.q_begin + i0, h), a.dout.seq_stride,
                                        valid, a.vec_dout, a.dout.data);
    if (tid < kQueries) {
      float l2 = __builtin_huge_valf(), dd = 0.0f;
      if (tid < valid) {
        const int64_t at = stat_at(a.stats, b, h, seq.q_begin + i0 + tid);
        l2 = lse_base2(a.lse[at]);
        dd = a.row_dot[at];
      }
      lse_s[stage * kQueries + tid] = l2;
      dot_s[stage * kQueries + tid] = dd;
    }
  };
  if (steps > 0) load_step(0, 0);
  tc::cp_async_commit();

  float dk[D / 8][4], dv[DV / 8][4];
#pragma unroll
  for (int j = 0; j < D / 8; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) dk[j][e] = 0.0f;
#pragma unroll
  for (int j = 0; j < DV / 8; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) dv[j][e] = 0.0f;

  int kj[2];
#pragma unroll
  for (int hr = 0; hr < 2; ++hr) kj[hr] = key0 + warp * 16 + g + 8 * hr;

  const int a_row = warp * 16 + (lane % 8) + 8 * ((lane / 8) % 2), a_col = 8 * (lane / 16);
  const int kb_row = (lane % 8) + 8 * (lane / 16), kb_col = 8 * ((lane / 8) % 2);
  const int vb_row = (lane % 8) + 8 * ((lane / 8) % 2), vb_col = 8 * (lane / 16);

  for (int st = 0; st < steps; ++st) {
    const int stage = st & 1;
    if (st + 1 < steps) load_step(st + 1, stage ^ 1);
    tc::cp_async_commit();
    tc::cp_async_wait<1>();
    __syncthreads();
    const int h = hk * a.group + st / q_tiles;
    const int i0 = static_cast<int>(i_begin) + (st % q_tiles) * kQueries;
    const T* const q_st = q_s + stage * kQueries * C::kLdQ;
    const T* const g_st = g_s + stage * kQueries * C::kLdO;

    // S^T = K Q^T and dP^T = V dO^T for the warp's 16 keys and the tile's queries.
    float s[kQGroups][4], dp[kQGroups][4];
#pragma unroll
    for (int j = 0; j < kQGroups; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) s[j][e] = dp[j][e] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      uint32_t af[4];
      tc::ldmatrix<4, false>(af, k_s + a_row * C::kLdK + kk * 16 + a_col);
#pragma unroll
      for (int nb = 0; nb < kQueries / 16; ++nb) {
        uint32_t bf[4];
        tc::ldmatrix<4, false>(bf, q_st + (nb * 16 + kb_row) * C::kLdQ + kk * 16 + kb_col);
        const uint32_t b0[2] = {bf[0], bf[1]}, b1[2] = {bf[2], bf[3]};
        tc::mma_16816<T>(s[2 * nb], af, b0);
        tc::mma_16816<T>(s[2 * nb + 1], af, b1);
      }
    }
#pragma unroll
    for (int kk = 0; kk < DV / 16; ++kk) {
      uint32_t af[4];
      tc::ldmatrix<4, false>(af, v_s + a_row * C::kLdV + kk * 16 + a_col);
#pragma unroll
      for (int nb = 0; nb < kQueries / 16; ++nb) {
        uint32_t bf[4];
        tc::ldmatrix<4, false>(bf, g_st + (nb * 16 + kb_row) * C::kLdO + kk * 16 + kb_col);
        const uint32_t b0[2] = {bf[0], bf[1]}, b1[2] = {bf[2], bf[3]};
        tc::mma_16816<T>(dp[2 * nb], af, b0);
        tc::mma_16816<T>(dp[2 * nb + 1], af, b1);
      }
    }
    // P^T into s, dS^T into dp. Element (j, e): key kj[e / 2], query column 8j + 2t + e % 2.
    [[maybe_unused]] const float slope =
        kRules && rules.alibi ? load_as_float(rules.alibi, rules.alibi_dtype, h) : 0.0f;
#pragma unroll
    for (int j = 0; j < kQGroups; ++j) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int key = kj[e / 2];
        const int col = 8 * j + 2 * t4 + (e % 2);
        const int i = i0 + col;
        const int64_t pos = static_cast<int64_t>(i) + offset;
        bool in = i < i_end && key < seq.len_k;
        if (rules.causal) in = in && key <= pos;
        if (rules.window > 0) in = in && key > pos - rules.window;
        float p = 0.0f, dx = 0.0f;
        if (in) {
          RowRules rr;
          rr.slope = slope;
          rr.h = h;
          rr.i = i;
          rr.pos = static_cast<int>(pos);
          score_grad<kRules>(rules, rr, b, s[j][e], key, lse_s[stage * kQueries + col],
                             dp[j][e] - dot_s[stage * kQueries + col], a.scale_log2, p, dx);
        }
        s[j][e] = p;
        dp[j][e] = dx;
      }
    }
    // dv += P^T dO, dk += dS^T Q (the queries are the k dimension).
#pragma unroll
    for (int kk = 0; kk < kQueries / 16; ++kk) {
      const uint32_t pa[4] = {rudnn::cuda::pack_pair<T>(s[2 * kk][0], s[2 * kk][1]),
                              rudnn::cuda::pack_pair<T>(s[2 * kk][2], s[2 * kk][3]),
                              rudnn::cuda::pack_pair<T>(s[2 * kk + 1][0], s[2 * kk + 1][1]),
                              rudnn::cuda::pack_pair<T>(s[2 * kk + 1][2], s[2 * kk + 1][3])};
      const uint32_t da[4] = {rudnn::cuda::pack_pair<T>(dp[2 * kk][0], dp[2 * kk][1]),
                              rudnn::cuda::pack_pair<T>(dp[2 * kk][2], dp[2 * kk][3]),
                              rudnn::cuda::pack_pair<T>(dp[2 * kk + 1][0], dp[2 * kk + 1][1]),
                              rudnn::cuda::pack_pair<T>(dp[2 * kk + 1][2], dp[2 * kk + 1][3])};
#pragma unroll
      for (int nb = 0; nb < DV / 16; ++nb) {
        uint32_t bf[4];
        tc::ldmatrix<4, true>(bf, g_st + (kk * 16 + vb_row) * C::kLdO + nb * 16 + vb_col);
        const uint32_t b0[2] = {bf[0], bf[1]}, b1[2] = {bf[2], bf[3]};
        tc::mma_16816<T>(dv[2 * nb], pa, b0);
        tc::mma_16816<T>(dv[2 * nb + 1], pa, b1);
      }
#pragma unroll
      for (int nb = 0; nb < D / 16; ++nb) {
        uint32_t bf[4];
        tc::ldmatrix<4, true>(bf, q_st + (kk * 16 + vb_row) * C::kLdQ + nb * 16 + vb_col);
        const uint32_t b0[2] = {bf[0], bf[1]}, b1[2] = {bf[2], bf[3]};
        tc::mma_16816<T>(dk[2 * nb], da, b0);
        tc::mma_16816<T>(dk[2 * nb + 1], da, b1);
      }
    }
    __syncthreads();
  }
  tc::cp_async_wait<0>();
  __syncthreads();

  stage_accumulators<T, D>(k_s, C::kLdK, warp * 16, dk, rules.scale);
  stage_accumulators<T, DV>(v_s, C::kLdV, warp * 16, dv, 1.0f);
  __syncthreads();
  auto out_ptr = [&](const BshdOut& view) {
    return static_cast<T*>(view.data) + seq.view_batch * view.batch_stride +
           (seq.k_begin + key0) * view.seq_stride + static_cast<int64_t>(hk) * view.head_stride;
  };
  store_tile<T, D, kKeys>(out_ptr(a.dk), a.dk.seq_stride, k_s, C::kLdK, keys_here, a.vec_dk);
  store_tile<T, DV, kKeys>(out_ptr(a.dv), a.dv.seq_stride, v_s, C::kLdV, keys_here, a.vec_dv);
}

}  // namespace rudnn::attn::cuda::flash
