// The tensor-core attention forward (strategy Flash): one fused FlashAttention-2 style kernel
// on mma.sync m16n8k16 (sm_80 and later, Hopper included), assembled from
// cuda/tensor_core/mma_sync.cuh.
//
// A block owns 64 query rows of one (sequence, query head); each of its 4 warps owns 16 of
// them. The KV head is h / (Hq / Hkv): grouped heads read the same K and V (from L2), never a
// copy. Key tiles of kBlockN rows of K and V stream through a two-stage cp.async ring in
// shared memory; per tile a warp forms S = Q K^T (FP32 accumulators), turns it into logits
// in base-2 units (log2 e folded into the scale), updates its rows' running max and sum and
// rescales its output accumulators, then adds P V with P rounded to the operands' dtype and
// taken straight from the S registers as the next A operand. Only tiles that reach a row's
// key range are visited (causal and window tiles outside every row are skipped); the
// per-element range test runs only on tiles that cross a row's bounds.
//
// kRules: the options that need per-element work (softcap, ALiBi, bias and mask arrays)
// take the logit of common.cuh (the definition every strategy shares) per element, the
// arrays read at each element's (batch, head, query, key). Without them (the usual case)
// a logit is one multiply.
//
// Shared rows are padded by 16 bytes (D + 8 elements): the eight row addresses of an
// ldmatrix then fall into eight different bank groups for every head size taken (D / 8 + 1
// is odd), which the XOR swizzle cannot give rows of 12 or 24 chunks (D = 96, 192).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "attention/cuda/common.cuh"
#include "cuda/tensor_core/mma_sync.cuh"
#include "cuda/types.cuh"

namespace rudnn::attn::cuda::flash {

constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
constexpr int kBlockM = kWarps * 16;  // query rows per block
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

template <int D, int DV, bool kRules>
struct Config {
  static_assert(D % 32 == 0 && DV % 32 == 0 && DV <= D);
  // Wide heads take half the keys per tile: the output accumulators (DV / 2 floats per
  // thread) and the two K/V stages must leave room for two blocks per multiprocessor. At
  // D = 256 the per-element rules need a quarter (32 keys spilled registers).
  static constexpr int kBlockN = (D > 128 || DV > 128) ? (kRules && D >= 256 ? 16 : 32) : 64;
  // Q's fragments stay in registers up to D = 128 (D / 4 registers); wider Q is read from
  // shared memory at each tile.
  static constexpr bool kQInRegisters = D <= 128;
  static constexpr int kLdQ = D + 8, kLdK = D + 8, kLdV = DV + 8, kLdO = DV + 8;
  static constexpr int kQElems = kBlockM * kLdQ;
  static constexpr int kKElems = kBlockN * kLdK;
  static constexpr int kVElems = kBlockN * kLdV;
  // The output tile is staged where Q was (DV <= D).
  static_assert(kBlockM * kLdO <= kQElems);
  static constexpr size_t kSharedBytes =
      2 * static_cast<size_t>(kQElems + 2 * kKElems + 2 * kVElems);
};

// Launch arguments (by value).
struct FlashForwardArgs {
  AttentionSizes sizes;
  BshdIn q, k, v;
  BshdOut out;
  float* lse = nullptr;
  RowStats lse_layout;
  ScoreRules rules;
  int group = 1;         // Hq / Hkv
  int64_t m_blocks = 0;  // query tiles per (sequence, head): ceil(Lq / 64)
  float scale_log2 = 0;  // scale · log2 e
  // Whether rows may be copied 16 bytes at a time (base and strides 16-byte aligned); else
  // element by element.
  bool vec_q = false, vec_k = false, vec_v = false, vec_out = false;
};

// Rows [0, rows) of a tile of kCols elements into shared memory (row stride kLd), from
// global rows `row_stride` elements apart starting at `src`; rows from `valid` on are zeros.
// `fallback` is an address inside the tensor, given to the zero-filling copies.
template <class T, int kCols, int kLd, int kRows>
__device__ __forceinline__ void load_tile(T* dst, const T* src, int64_t row_stride, int valid,
                                          bool vec, const void* fallback) {
  const int tid = static_cast<int>(threadIdx.x);
  if (vec) {
    constexpr int kChunks = kCols / 8;
#pragma unroll
    for (int c = tid; c < kRows * kChunks; c += kThreads) {
      const int r = c / kChunks, ch = c % kChunks;
      const bool ok = r < valid;
      const void* from = ok ? static_cast<const void*>(src + r * row_stride + ch * 8) : fallback;
      rudnn::cuda::tc::cp_async_16(dst + r * kLd + ch * 8, from, ok ? 16u : 0u);
    }
  } else {
    for (int e = tid; e < kRows * kCols; e += kThreads) {
      const int r = e / kCols, col = e % kCols;
      dst[r * kLd + col] = r < valid ? src[r * row_stride + col] : rudnn::cuda::from_float<T>(0.0f);
    }
  }
}

template <class T, int D, int DV, bool kRules>
__global__ void __launch_bounds__(kThreads, 2) flash_forward_kernel(const FlashForwardArgs a) {
  using C = Config<D, DV, kRules>;
  constexpr int kBlockN = C::kBlockN;
  constexpr int kNGroups = kBlockN / 8;  // 8-key column groups of S
  constexpr int kOGroups = DV / 8;       // 8-feature column groups of O
  namespace tc = rudnn::cuda::tc;

  extern __shared__ uint4 shared4[];
  T* const q_s = reinterpret_cast<T*>(shared4);
  T* const k_s = q_s + C::kQElems;      // [2][kBlockN][kLdK]
  T* const v_s = k_s + 2 * C::kKElems;  // [2][kBlockN][kLdV]

  const int tid = static_cast<int>(threadIdx.x);
  const int warp = tid / 32, lane = tid % 32, g = lane / 4, t4 = lane % 4;
  const AttentionSizes& sz = a.sizes;
  const ScoreRules& rules = a.rules;

  // Which tile: (sequence, head, query tile), the query tile fastest so that the tiles of one
  // head run together and share its K and V in L2; the most expensive (last, under causal)
  // tiles of a head first.
  int64_t index = blockIdx.x;
  const int m_block = static_cast<int>(a.m_blocks - 1 - index % a.m_blocks);
  index /= a.m_blocks;
  const int h = static_cast<int>(index % sz.heads_q);
  const int64_t b = index / sz.heads_q;
  const SeqRows seq = sequence_rows(sz, b);
  const int i0 = m_block * kBlockM;
  if (i0 >= seq.len_q) return;
  const int hk = h / a.group;
  const int rows_here = min(kBlockM, seq.len_q - i0);

  // The tile's keys: the union of its rows' ranges (both ends grow with the row).
  const KeyRange first = key_range(rules, i0, seq.len_q, seq.len_k);
  const KeyRange last = key_range(rules, i0 + rows_here - 1, seq.len_q, seq.len_k);
  const int key_begin = first.lo, key_end = last.hi;
  const int t_first = key_begin / kBlockN;
  const int n_tiles = key_end > key_begin ? (key_end + kBlockN - 1) / kBlockN - t_first : 0;

  // This thread's two rows (g and g + 8 of the warp's 16), as query indices.
  int qi[2];
  KeyRange range[2];
  [[maybe_unused]] RowRules rr[2];
#pragma unroll
  for (int hr = 0; hr < 2; ++hr) {
    qi[hr] = i0 + warp * 16 + g + 8 * hr;
    const bool real = qi[hr] < seq.len_q;
    range[hr] = real ? key_range(rules, qi[hr], seq.len_q, seq.len_k) : KeyRange{0, 0};
    if constexpr (kRules) rr[hr] = row_rules(rules, h, qi[hr], seq.len_q, seq.len_k);
  }

  const T* const q_rows = static_cast<const T*>(a.q.data) + seq.view_batch * a.q.batch_stride +
                          (seq.q_begin + i0) * a.q.seq_stride +
                          static_cast<int64_t>(h) * a.q.head_stride;
  const T* const k_rows = static_cast<const T*>(a.k.data) + seq.view_batch * a.k.batch_stride +
                          seq.k_begin * a.k.seq_stride + static_cast<int64_t>(hk) * a.k.head_stride;
  const T* const v_rows = static_cast<const T*>(a.v.data) + seq.view_batch * a.v.batch_stride +
                          seq.k_begin * a.v.seq_stride + static_cast<int64_t>(hk) * a.v.head_stride;

  auto load_kv = [&](int tile, int stage) {
    const int n0 = tile * kBlockN;
    const int valid = min(kBlockN, seq.len_k - n0);
    load_tile<T, D, C::kLdK, kBlockN>(k_s + stage * C::kKElems, k_rows + n0 * a.k.seq_stride,
                                      a.k.seq_stride, valid, a.vec_k, a.k.data);
    load_tile<T, DV, C::kLdV, kBlockN>(v_s + stage * C::kVElems, v_rows + n0 * a.v.seq_stride,
                                       a.v.seq_stride, valid, a.vec_v, a.v.data);
  };

  load_tile<T, D, C::kLdQ, kBlockM>(q_s, q_rows, a.q.seq_stride, rows_here, a.vec_q, a.q.data);
  if (n_tiles > 0) load_kv(t_first, 0);
  tc::cp_async_commit();

  // Running state of the thread's two rows: max (base-2 units), partial sum over its
  // columns (the four threads of a row are summed at the end), output accumulators.
  float m[2] = {kNegInf, kNegInf}, l[2] = {0.0f, 0.0f};
  float o[kOGroups][4];
#pragma unroll
  for (int j = 0; j < kOGroups; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) o[j][e] = 0.0f;

  // ldmatrix row addresses of this lane: A (Q) and non-transposed B (K) matrices, and the
  // transposed B (V) matrices (docs/tensor_cores.md, "Fragment layouts").
  const int a_row = warp * 16 + (lane % 8) + 8 * ((lane / 8) % 2), a_col = 8 * (lane / 16);
  const int kb_row = (lane % 8) + 8 * (lane / 16), kb_col = 8 * ((lane / 8) % 2);
  const int vb_row = (lane % 8) + 8 * ((lane / 8) % 2), vb_col = 8 * (lane / 16);

  uint32_t qf[C::kQInRegisters ? D / 16 : 1][4];

  for (int it = 0; it < n_tiles; ++it) {
    const int stage = it & 1;
    const int n0 = (t_first + it) * kBlockN;
    // The next tile's copies go into the other stage (freed by the barrier that ended the
    // previous iteration) while this one is computed.
    if (it + 1 < n_tiles) load_kv(t_first + it + 1, stage ^ 1);
    tc::cp_async_commit();
    tc::cp_async_wait<1>();
    __syncthreads();

    if constexpr (C::kQInRegisters) {
      if (it == 0) {
#pragma unroll
        for (int kk = 0; kk < D / 16; ++kk)
          tc::ldmatrix<4, false>(qf[kk], q_s + a_row * C::kLdQ + kk * 16 + a_col);
      }
    }

    // S = Q K^T for the warp's 16 rows and the tile's keys.
    const T* const k_st = k_s + stage * C::kKElems;
    float s[kNGroups][4];
#pragma unroll
    for (int j = 0; j < kNGroups; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) s[j][e] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      uint32_t af[4];
      if constexpr (C::kQInRegisters) {
#pragma unroll
        for (int e = 0; e < 4; ++e) af[e] = qf[kk][e];
      } else {
        tc::ldmatrix<4, false>(af, q_s + a_row * C::kLdQ + kk * 16 + a_col);
      }
#pragma unroll
      for (int nb = 0; nb < kBlockN / 16; ++nb) {
        uint32_t bf[4];
        tc::ldmatrix<4, false>(bf, k_st + (nb * 16 + kb_row) * C::kLdK + kk * 16 + kb_col);
        const uint32_t b0[2] = {bf[0], bf[1]}, b1[2] = {bf[2], bf[3]};
        tc::mma_16816<T>(s[2 * nb], af, b0);
        tc::mma_16816<T>(s[2 * nb + 1], af, b1);
      }
    }

    // Logits in base-2 units; keys outside a row's range (causal, window, past Lk) -inf.
    const bool edge = n0 + kBlockN > first.hi || n0 < last.lo;
#pragma unroll
    for (int j = 0; j < kNGroups; ++j) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int hr = e / 2;
        const int key = n0 + 8 * j + 2 * t4 + (e % 2);
        const bool in = key >= range[hr].lo && key < range[hr].hi;
        if constexpr (kRules) {
          s[j][e] =
              in ? logit(rules, rr[hr], b, capped_product(rules, s[j][e]), key) * kLog2e : kNegInf;
        } else {
          s[j][e] = (edge && !in) ? kNegInf : s[j][e] * a.scale_log2;
        }
      }
    }

    // Online softmax: the tile's row maxima over the four threads of each row, the rescale,
    // the probabilities.
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
      float mx = kNegInf;
#pragma unroll
      for (int j = 0; j < kNGroups; ++j) mx = fmaxf(mx, fmaxf(s[j][2 * hr], s[j][2 * hr + 1]));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      const float m_new = fmaxf(m[hr], mx);
      // A row with no key yet subtracts 0, so that -inf - -inf never makes a NaN.
      const float m_use = m_new == kNegInf ? 0.0f : m_new;
      const float alpha = exp2f(m[hr] - m_use);
      m[hr] = m_new;
      float sum = 0.0f;
#pragma unroll
      for (int j = 0; j < kNGroups; ++j) {
#pragma unroll
        for (int e = 2 * hr; e < 2 * hr + 2; ++e) {
          s[j][e] = exp2f(s[j][e] - m_use);
          sum += s[j][e];
        }
      }
      l[hr] = l[hr] * alpha + sum;
#pragma unroll
      for (int j = 0; j < kOGroups; ++j) {
        o[j][2 * hr] *= alpha;
        o[j][2 * hr + 1] *= alpha;
      }
    }

    // O += P V: P's accumulator layout is the A fragment of the next product (16 keys per
    // k-step: groups 2kk and 2kk + 1).
    const T* const v_st = v_s + stage * C::kVElems;
#pragma unroll
    for (int kk = 0; kk < kBlockN / 16; ++kk) {
      const uint32_t pa[4] = {rudnn::cuda::pack_pair<T>(s[2 * kk][0], s[2 * kk][1]),
                              rudnn::cuda::pack_pair<T>(s[2 * kk][2], s[2 * kk][3]),
                              rudnn::cuda::pack_pair<T>(s[2 * kk + 1][0], s[2 * kk + 1][1]),
                              rudnn::cuda::pack_pair<T>(s[2 * kk + 1][2], s[2 * kk + 1][3])};
#pragma unroll
      for (int nb = 0; nb < DV / 16; ++nb) {
        uint32_t bf[4];
        tc::ldmatrix<4, true>(bf, v_st + (kk * 16 + vb_row) * C::kLdV + nb * 16 + vb_col);
        const uint32_t b0[2] = {bf[0], bf[1]}, b1[2] = {bf[2], bf[3]};
        tc::mma_16816<T>(o[2 * nb], pa, b0);
        tc::mma_16816<T>(o[2 * nb + 1], pa, b1);
      }
    }
    __syncthreads();
  }
  tc::cp_async_wait<0>();
  __syncthreads();

  // Finish the rows: the sums over the row's four threads, the sink, the logsumexp.
  const bool has_sink = rules.sinks != nullptr;
  const float sink2 = has_sink ? sink_of(rules, h) * kLog2e : kNegInf;
  float factor[2];
#pragma unroll
  for (int hr = 0; hr < 2; ++hr) {
    float sum = l[hr];
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    sum += __shfl_xor_sync(0xffffffffu, sum, 2);
    float lse2;
    if (has_sink) {
      const float top = fmaxf(m[hr], sink2);
      const float keep = m[hr] == kNegInf ? 0.0f : exp2f(m[hr] - top);
      const float total = sum * keep + exp2f(sink2 - top);
      factor[hr] = keep / total;
      lse2 = top + log2f(total);
    } else if (sum > 0.0f) {
      factor[hr] = 1.0f / sum;
      lse2 = m[hr] + log2f(sum);
    } else if (sum != sum) {
      factor[hr] = sum;
      lse2 = sum;
    } else {
      // No key: zeros and -inf.
      factor[hr] = 0.0f;
      lse2 = kNegInf;
    }
    if (t4 == 0 && a.lse && qi[hr] < seq.len_q) {
      a.lse[b * a.lse_layout.stride_b + static_cast<int64_t>(h) * a.lse_layout.stride_h +
            seq.q_begin + qi[hr]] = lse2 * kLn2;
    }
  }

  // The output tile through shared memory (where Q was), then 16-byte rows to global memory.
  T* const o_s = q_s;
#pragma unroll
  for (int j = 0; j < kOGroups; ++j) {
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
      const int r = warp * 16 + g + 8 * hr, col = 8 * j + 2 * t4;
      *reinterpret_cast<uint32_t*>(o_s + r * C::kLdO + col) =
          rudnn::cuda::pack_pair<T>(o[j][2 * hr] * factor[hr], o[j][2 * hr + 1] * factor[hr]);
    }
  }
  __syncthreads();
  T* const out_rows = static_cast<T*>(a.out.data) + seq.view_batch * a.out.batch_stride +
                      (seq.q_begin + i0) * a.out.seq_stride +
                      static_cast<int64_t>(h) * a.out.head_stride;
  if (a.vec_out) {
    constexpr int kChunks = DV / 8;
#pragma unroll
    for (int c = tid; c < kBlockM * kChunks; c += kThreads) {
      const int r = c / kChunks, ch = c % kChunks;
      if (r < rows_here) {
        *reinterpret_cast<uint4*>(out_rows + r * a.out.seq_stride + ch * 8) =
            *reinterpret_cast<const uint4*>(o_s + r * C::kLdO + ch * 8);
      }
    }
  } else {
    for (int e = tid; e < rows_here * DV; e += kThreads) {
      const int r = e / DV, col = e % DV;
      out_rows[r * a.out.seq_stride + col] = o_s[r * C::kLdO + col];
    }
  }
}

}  // namespace rudnn::attn::cuda::flash
