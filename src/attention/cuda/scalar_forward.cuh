// The CUDA-core attention forward: FlashScalar (prefill) and SplitKv (decode) are one kernel
// with an online softmax, in two arrangements of its warps.
//
// A block owns `rows_per_block` query rows of one (batch, KV head): the rows of the Hq / Hkv
// query heads that share that KV head, position-major (row ρ is query ρ / group of head
// hk · group + ρ % group), so that K and V are read once for all of them. Keys come in tiles
// of 32, one key per lane for the products q·k (each lane reads its key's row; the block's
// q rows sit in shared memory as FP32 and are read as broadcasts), then the lanes split the
// value features for p·v (each lane accumulates 4 of every 128 features of every row).
//
//   prefill (FlashScalar)  each warp owns kRows rows and walks every key tile of the block's
//                          range; rows finish where they are.
//   decode (SplitKv)       the block's kRows rows are shared by all warps, which take turns
//                          over the key tiles (tile t to warp t mod 4), then merge their
//                          states in warp order. With partitions, block s covers the keys
//                          [s·C, (s+1)·C) and writes FP32 partial records (unnormalised
//                          output, max, sum) that a second kernel merges in partition order.
//
// Everything a row's result depends on is a function of that row alone (its keys, the fixed
// tiles from the partition start, the warp of each tile, the merge order), and masked keys
// change nothing (p = 0, the running max unchanged): this is what makes the serial rule
// hold bit for bit.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "attention/cuda/common.cuh"
#include "attention/cuda/loads.cuh"
#include "attention/cuda/merge.cuh"
#include "cuda/reduce.cuh"

namespace rudnn::attn::cuda {

constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
constexpr int kKeys = 32;

// Launch arguments (by value).
struct ScalarForwardArgs {
  AttentionSizes sizes;
  BshdIn q, k, v;
  BshdOut out;
  float* lse = nullptr;
  RowStats lse_layout;
  ScoreRules rules;
  int group = 1;           // Hq / Hkv
  int rows_per_block = 0;  // kRows (decode) or kWarps * kRows (prefill)
  int64_t row_groups = 0;  // blocks along the rows of one (batch, KV head)
  bool decode = false;     // warps share the rows and take turns over the key tiles
  int split_keys = 0;      // > 0: block s covers keys [s * split_keys, (s + 1) * split_keys)
  int splits = 1;
  float* partials = nullptr;  // non-null: write partial records (the first of two passes)
  int record = 0;             // floats per partial record
  bool vec_k = false;         // 16-byte loads of k rows
  bool vec_v = false;         // 4-element loads of v rows
  bool vec_out = false;       // 4-element stores of out rows
  bool vec_tiles = false;     // tensor-core kernel: K and V rows 16-byte aligned (cp.async)
  int q_stride = 0;           // floats per q row in shared memory
};

// Shared memory of a launch: q rows, the per-warp probabilities of a tile, and (decode) the
// warps' states for the final merge.
inline size_t scalar_forward_shared_bytes(int rows_per_block, int q_stride, int chunks, int rows,
                                          bool decode) {
  size_t floats = static_cast<size_t>(rows_per_block) * q_stride + kWarps * kKeys * 4;
  if (decode) floats += static_cast<size_t>(kWarps) * rows * (chunks * 128 + 4);
  return floats * sizeof(float);
}

// What block blockIdx.x of a launch covers: (batch, KV head, row group, partition), the
// partition fastest; its rows [row0, row0 + block_rows) of the group · Lq rows of its (batch,
// KV head) (block_rows <= 0: none, the sequence is shorter), and its keys [key_begin,
// key_end): the union of its rows' ranges within its partition, which starts at `base`.
// Shared by the CUDA-core and the tensor-core kernels, so that both cut the work alike.
struct RowBlock {
  SeqRows seq;
  int64_t b;
  int split, hk, row0, block_rows, base, key_begin, key_end;
};
__device__ __forceinline__ RowBlock row_block(const ScalarForwardArgs& a) {
  const AttentionSizes& sz = a.sizes;
  RowBlock blk;
  int64_t index = blockIdx.x;
  blk.split = static_cast<int>(index % a.splits);
  index /= a.splits;
  const int64_t row_group = index % a.row_groups;
  index /= a.row_groups;
  blk.hk = static_cast<int>(index % sz.heads_kv);
  blk.b = index / sz.heads_kv;
  blk.seq = sequence_rows(sz, blk.b);
  blk.row0 = static_cast<int>(row_group) * a.rows_per_block;
  blk.block_rows = min(a.rows_per_block, a.group * blk.seq.len_q - blk.row0);
  blk.base = a.split_keys > 0 ? blk.split * a.split_keys : 0;
  blk.key_begin = blk.key_end = blk.base;
  if (blk.block_rows <= 0) return blk;
  const KeyRange first = key_range(a.rules, blk.row0 / a.group, blk.seq.len_q, blk.seq.len_k);
  const KeyRange last = key_range(a.rules, (blk.row0 + blk.block_rows - 1) / a.group,
                                  blk.seq.len_q, blk.seq.len_k);
  blk.key_begin = max(first.lo, blk.base);
  blk.key_end = a.split_keys > 0 ? min(last.hi, blk.base + a.split_keys) : last.hi;
  return blk;
}

// The end of row (query i, head h) of sequence b in a block that holds its merged state (max
// m, sum l, this lane's features o: c · 128 + 4 · lane + e): the FP32 partial record of
// partition `split` (two passes), else the output row and its logsumexp. Shared by the
// CUDA-core and the tensor-core (split_kv_tc.cuh) kernels, so that both finish alike.
template <class T, int kChunks>
__device__ __forceinline__ void finish_or_hand_over_row(const ScalarForwardArgs& a,
                                                        const SeqRows& seq, int64_t b, int split,
                                                        int i, int h, float m, float l,
                                                        const float (&o)[kChunks][4], int lane) {
  const AttentionSizes& sz = a.sizes;
  const int dim_v = static_cast<int>(sz.dim_v);
  if (a.partials) {
    const int64_t row_id = (b * sz.heads_q + h) * sz.len_q + i;
    store_partial_record<kChunks>(a.partials + (row_id * a.splits + split) * a.record, o, m, l,
                                  dim_v, lane);
    return;
  }
  const RowEnd end = finish_row(m, l, a.rules.sinks != nullptr, sink_of(a.rules, h));
  T* const orow = static_cast<T*>(a.out.data) + seq.view_batch * a.out.batch_stride +
                  (seq.q_begin + i) * a.out.seq_stride +
                  static_cast<int64_t>(h) * a.out.head_stride;
#pragma unroll
  for (int c = 0; c < kChunks; ++c) {
    const int d = c * 128 + lane * 4;
    if (d >= dim_v) continue;
    float y[4];
#pragma unroll
    for (int e = 0; e < 4; ++e) y[e] = o[c][e] * end.factor;
    if (a.vec_out && d + 4 <= dim_v) {
      store4<T>(orow + d, y);
    } else {
      store_upto4<T>(orow + d, dim_v - d, y);
    }
  }
  if (lane == 0 && a.lse) {
    a.lse[b * a.lse_layout.stride_b + static_cast<int64_t>(h) * a.lse_layout.stride_h +
          seq.q_begin + i] = end.lse;
  }
}

template <class T, int kChunks, int kRows>
__global__ void __launch_bounds__(kThreads, 3) scalar_forward_kernel(const ScalarForwardArgs a) {
  extern __shared__ float4 shared4[];
  float* const shared = reinterpret_cast<float*>(shared4);
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const AttentionSizes& sz = a.sizes;
  const ScoreRules& rules = a.rules;

  const RowBlock blk = row_block(a);
  if (blk.block_rows <= 0) return;
  const SeqRows& seq = blk.seq;
  const int64_t b = blk.b;
  const int split = blk.split, hk = blk.hk, row0 = blk.row0, block_rows = blk.block_rows;
  const int base = blk.base, key_begin = blk.key_begin, key_end = blk.key_end;
  const int dim = static_cast<int>(sz.dim_qk), dim_v = static_cast<int>(sz.dim_v);

  float* const q_s = shared;
  float* const p_s = q_s + a.rows_per_block * a.q_stride;  // [warp][key][4]
  float* const merge_s = p_s + kWarps * kKeys * 4;         // decode: [warp][row][state]

  // The block's q rows as FP32.
  const T* const q_base = static_cast<const T*>(a.q.data) + seq.view_batch * a.q.batch_stride;
  for (int e = threadIdx.x; e < block_rows * dim; e += kThreads) {
    const int r = e / dim, d = e % dim, rho = row0 + r;
    const int64_t at = (seq.q_begin + rho / a.group) * a.q.seq_stride +
                       static_cast<int64_t>(hk * a.group + rho % a.group) * a.q.head_stride + d;
    q_s[r * a.q_stride + d] = to_float(q_base[at]);
  }
  __syncthreads();

  // This warp's rows.
  const int local0 = a.decode ? 0 : warp * kRows;
  KeyRange range[kRows];
  RowRules row[kRows];
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    const int local = local0 + r;
    const int rho = row0 + min(local, block_rows - 1);
    const int i = rho / a.group, h = hk * a.group + rho % a.group;
    range[r] = local < block_rows ? key_range(rules, i, seq.len_q, seq.len_k) : KeyRange{0, 0};
    row[r] = row_rules(rules, h, i, seq.len_q, seq.len_k);
  }

  float m[kRows], l[kRows], o[kRows][kChunks][4];
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    m[r] = kNegInf;
    l[r] = 0.0f;
#pragma unroll
    for (int c = 0; c < kChunks; ++c)
#pragma unroll
      for (int e = 0; e < 4; ++e) o[r][c][e] = 0.0f;
  }

  const T* const k_head = static_cast<const T*>(a.k.data) + seq.view_batch * a.k.batch_stride +
                          seq.k_begin * a.k.seq_stride + hk * a.k.head_stride;
  const T* const v_head = static_cast<const T*>(a.v.data) + seq.view_batch * a.v.batch_stride +
                          seq.k_begin * a.v.seq_stride + hk * a.v.head_stride;
  float* const my_p = p_s + warp * kKeys * 4;

  if (key_begin < key_end) {
    const int tile_first = (key_begin - base) / kKeys;
    const int step = a.decode ? kWarps : 1;
    // Decode: tile t belongs to warp t mod kWarps, counted from the partition start.
    int t = tile_first;
    if (a.decode) t += ((warp - tile_first) % kWarps + kWarps) % kWarps;
    for (; base + t * kKeys < key_end; t += step) {
      const int j0 = base + t * kKeys, j = j0 + lane;
      float acc[kRows];
#pragma unroll
      for (int r = 0; r < kRows; ++r) acc[r] = 0.0f;
      if (j < key_end) {
        dot_rows<T, kRows>(k_head + static_cast<int64_t>(j) * a.k.seq_stride, a.vec_k, dim,
                           q_s + local0 * a.q_stride, a.q_stride, acc);
      }
      // Logits and the online softmax, row by row.
      float s[kRows], p[kRows];
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
        const bool in = j < key_end && j >= range[r].lo && j < range[r].hi;
        s[r] = in ? logit(rules, row[r], b, capped_product(rules, acc[r]), j) : kNegInf;
      }
      if (!online_softmax_rows(s, m, l, o, p)) continue;
#pragma unroll
      for (int r = 0; r < kRows; ++r) my_p[lane * 4 + r] = p[r];
      __syncwarp();
      const int count = min(kKeys, key_end - j0);
      accumulate_rows<T, kChunks, kRows>(
          [&](int jj) { return v_head + static_cast<int64_t>(j0 + jj) * a.v.seq_stride; }, count,
          my_p, a.vec_v, dim_v, lane, o);
      __syncwarp();
    }
  }
#pragma unroll
  for (int r = 0; r < kRows; ++r) l[r] = rudnn::cuda::warp_reduce(l[r], rudnn::cuda::SumOp{});

  // Decode: merge the warps' states of each row, in warp order, on warp r mod kWarps.
  if (a.decode) {
    constexpr int kState = kChunks * 128 + 4;
#pragma unroll
    for (int r = 0; r < kRows; ++r)
      store_warp_state<kChunks>(merge_s + (warp * kRows + r) * kState, o[r], m[r], l[r], lane);
    __syncthreads();
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      if (r % kWarps != warp) continue;
      float top, sum, acc[kChunks][4];
      merge_warp_states<kChunks>(merge_s + r * kState, kRows * kState, kWarps, lane, top, sum,
                                 acc);
      m[r] = top;
      l[r] = sum;
#pragma unroll
      for (int c = 0; c < kChunks; ++c)
#pragma unroll
        for (int e = 0; e < 4; ++e) o[r][c][e] = acc[c][e];
    }
  }

  // Finish (or hand over) the rows this warp holds.
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    const int local = local0 + r;
    if (local >= block_rows) continue;
    if (a.decode && r % kWarps != warp) continue;
    finish_or_hand_over_row<T, kChunks>(a, seq, b, split, row[r].i, row[r].h, m[r], l[r], o[r],
                                        lane);
  }
}

// The second pass of SplitKv: each row's partial records, over the partitions its keys
// touch, merged in partition order and finished (one warp per row).
struct SplitMergeArgs {
  AttentionSizes sizes;
  BshdOut out;
  float* lse = nullptr;
  RowStats lse_layout;
  ScoreRules rules;
  const float* partials = nullptr;
  int record = 0, splits = 1, split_keys = 0;
  bool vec_out = false;
};

template <class T>
__global__ void __launch_bounds__(kThreads) split_merge_kernel(const SplitMergeArgs a) {
  const AttentionSizes& sz = a.sizes;
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const int64_t row_id = static_cast<int64_t>(blockIdx.x) * kWarps + threadIdx.x / 32;
  if (row_id >= sz.batch * sz.heads_q * sz.len_q) return;
  const int i = static_cast<int>(row_id % sz.len_q);
  const int h = static_cast<int>((row_id / sz.len_q) % sz.heads_q);
  const int64_t b = row_id / (sz.len_q * sz.heads_q);
  const SeqRows seq = sequence_rows(sz, b);
  if (i >= seq.len_q) return;
  const KeyRange range = key_range(a.rules, i, seq.len_q, seq.len_k);
  const int s_first = range.lo / a.split_keys;
  const int s_last = range.hi > range.lo ? (range.hi - 1) / a.split_keys : s_first - 1;
  const int dim_v = static_cast<int>(sz.dim_v);
  const RecordMerge merge{a.partials + row_id * a.splits * a.record, a.record, dim_v, s_first,
                          s_last};
  float top, sum;
  merge.stats(top, sum);
  const RowEnd end = finish_row(top, sum, a.rules.sinks != nullptr, sink_of(a.rules, h));
  T* const orow = static_cast<T*>(a.out.data) + seq.view_batch * a.out.batch_stride +
                  (seq.q_begin + i) * a.out.seq_stride +
                  static_cast<int64_t>(h) * a.out.head_stride;
  for (int d = lane * 4; d < dim_v; d += 128) {
    float acc[4];
    merge.features(d, top, acc);
    float y[4];
#pragma unroll
    for (int e = 0; e < 4; ++e) y[e] = acc[e] * end.factor;
    if (a.vec_out && d + 4 <= dim_v) {
      store4<T>(orow + d, y);
    } else {
      store_upto4<T>(orow + d, dim_v - d, y);
    }
  }
  if (lane == 0 && a.lse) {
    a.lse[b * a.lse_layout.stride_b + static_cast<int64_t>(h) * a.lse_layout.stride_h +
          seq.q_begin + i] = end.lse;
  }
}

}  // namespace rudnn::attn::cuda
