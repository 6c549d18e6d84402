// The CUDA-core paged forward: attention and MLA over a paged cache, one kernel for every
// schedule (prefill chunks, decode steps, the block-table form).
//
// A block owns up to kRows query rows of one work item (a run of consecutive queries of one
// sequence) and one KV head: the rows are (query, head) pairs, query-major, over the Hq / Hkv
// query heads that share the KV head, so that K and V are read once for all of them. The four
// warps take turns over 32-key tiles (tile t to warp t mod 4); per tile each lane computes
// the products of one key (its row gathered through the sequence's page table, 16 bytes per
// load where aligned) against the block's q rows in shared memory (FP32, read as
// broadcasts), the online softmax runs per row, and the lanes split the value features for
// p·v. The warps' states are merged in warp order at the end. With a split history, block s
// covers keys [s·C, (s+1)·C) and writes FP32 partial records (unnormalised output, max,
// sum) that paged_merge_kernel merges in partition order.
//
// The tile loop, the online-softmax step, the row products and the row end are dense
// attention's (attention/cuda/loads.cuh and common.cuh), so both families round alike.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "attention/cuda/common.cuh"
#include "attention/cuda/loads.cuh"
#include "attention/cuda/merge.cuh"
#include "cuda/reduce.cuh"
#include "paged_attention/problem.h"

namespace rudnn::paged::cuda {

using attn::cuda::accumulate_rows;
using attn::cuda::dot_rows;
using attn::cuda::finish_row;
using attn::cuda::kNegInf;
using attn::cuda::RowEnd;
using attn::cuda::store4;
using attn::cuda::store_upto4;

constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
constexpr int kKeys = 32;

struct ForwardArgs {
  PagedForward p;
  int group = 1;           // Hq / Hkv
  int64_t row_tiles = 1;   // blocks along the rows of one (item, KV head)
  int q_stride = 0;        // floats per q row in shared memory
  int qp_offset = 0;       // MLA: where the positional part of a q row starts
  bool vec_k = false, vec_kp = false, vec_v = false, vec_out = false;
  // Tensor-core decode kernel (decode_tc.cuh): where its staged table entries start in shared
  // memory (bytes), and how many fit.
  int pipeline_bytes = 0, page_cache = 0;
  // Tensor-core decode kernel: KV heads per block (1, 2 or 4, dividing Hkv), and whether the
  // grid takes the KV-head groups fastest (decode_block).
  int decode_heads = 1;
  bool heads_fastest = false;
};

inline size_t forward_shared_bytes(int rows, int q_stride, int chunks) {
  const size_t floats = static_cast<size_t>(rows) * q_stride + kWarps * kKeys * 4 +
                        static_cast<size_t>(kWarps) * rows * (chunks * 128 + 4);
  return floats * sizeof(float);
}

// KV head hk's row of key j in `cache`, through the sequence's table.
template <class T>
__device__ __forceinline__ const T* key_row(const Schedule& s, const PageTable& table,
                                            const CacheView& cache, int hk, int64_t j) {
  const KeySlot at = key_slot(s, j);
  const int64_t page = page_in(s, table, at.block);
  return static_cast<const T*>(cache.data) + page * cache.page_stride + at.row * cache.row_stride +
         static_cast<int64_t>(hk) * cache.head_stride;
}

template <class T, int kChunks, int kRows>
__global__ void __launch_bounds__(kThreads) paged_forward_kernel(const ForwardArgs a) {
  extern __shared__ float4 shared4[];
  float* const shared = reinterpret_cast<float*>(shared4);
  const PagedForward& p = a.p;
  const Schedule& sched = p.sched;
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;

  // Which block: (item, KV head, row tile, partition), the partition fastest.
  int64_t index = blockIdx.x;
  const int64_t split = index % p.splits;
  index /= p.splits;
  const int64_t tile = index % a.row_tiles;
  index /= a.row_tiles;
  const int hk = static_cast<int>(index % p.heads_kv);
  const int64_t item_index = index / p.heads_kv;
  const Item item = item_of(sched, item_index);
  const int rows_total = item.count * a.group;
  const int row0 = static_cast<int>(tile) * kRows;
  if (row0 >= rows_total) return;
  const int block_rows = min(kRows, rows_total - row0);
  const int64_t len = sequence_keys(sched, item.seq);
  const PageTable table = page_table(sched, item.seq);
  const int dim = static_cast<int>(p.dim_qk), dim_pos = static_cast<int>(p.dim_pos);
  const int dim_v = static_cast<int>(p.dim_v);

  float* const q_s = shared;
  float* const p_s = q_s + kRows * a.q_stride;      // [warp][key][4]
  float* const merge_s = p_s + kWarps * kKeys * 4;  // [warp][row][state]

  // The block's q rows as FP32 (rows past the block's end as zeros: their products are
  // computed and never used).
  for (int e = threadIdx.x; e < kRows * a.q_stride; e += kThreads) {
    const int r = e / a.q_stride, d = e % a.q_stride;
    float x = 0.0f;
    if (r < block_rows) {
      const int rho = row0 + r;
      const int64_t g = item.first + rho / a.group;
      const int64_t h = hk * a.group + rho % a.group;
      if (d < dim) {
        const int64_t at = query_offset(sched, g, p.q.batch_stride, p.q.seq_stride) +
                           h * p.q.head_stride + d;
        x = attn::cuda::to_float(static_cast<const T*>(p.q.data)[at]);
      } else if (dim_pos > 0 && d >= a.qp_offset && d < a.qp_offset + dim_pos) {
        const int64_t at = query_offset(sched, g, p.qp.batch_stride, p.qp.seq_stride) +
                           h * p.qp.head_stride + (d - a.qp_offset);
        x = attn::cuda::to_float(static_cast<const T*>(p.qp.data)[at]);
      }
    }
    q_s[e] = x;
  }
  __syncthreads();

  int64_t hi[kRows];  // row r sees keys [0, hi[r])
  int64_t key_end = 0;
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    hi[r] = 0;
    if (r < block_rows) {
      const int64_t g = item.first + (row0 + r) / a.group;
      const int64_t n = visible_keys(sched, g, len, p.causal);
      hi[r] = n < len ? n : len;
    }
    key_end = hi[r] > key_end ? hi[r] : key_end;
  }
  const int64_t base = p.splits > 1 ? split * p.split_keys : 0;
  if (p.splits > 1 && base + p.split_keys < key_end) key_end = base + p.split_keys;

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
  float* const my_p = p_s + warp * kKeys * 4;

  for (int64_t j0 = base + static_cast<int64_t>(warp) * kKeys; j0 < key_end;
       j0 += kWarps * kKeys) {
    const int64_t j = j0 + lane;
    float acc[kRows];
#pragma unroll
    for (int r = 0; r < kRows; ++r) acc[r] = 0.0f;
    if (j < key_end) {
      dot_rows<T, kRows>(key_row<T>(sched, table, p.k, hk, j), a.vec_k, dim, q_s, a.q_stride,
                         acc);
      if (dim_pos > 0) {
        dot_rows<T, kRows>(key_row<T>(sched, table, p.kp, 0, j), a.vec_kp, dim_pos,
                           q_s + a.qp_offset, a.q_stride, acc);
      }
    }
    float s[kRows], pr[kRows];
#pragma unroll
    for (int r = 0; r < kRows; ++r) s[r] = j < key_end && j < hi[r] ? acc[r] * p.scale : kNegInf;
    if (!attn::cuda::online_softmax_rows(s, m, l, o, pr)) continue;
#pragma unroll
    for (int r = 0; r < kRows; ++r) my_p[lane * 4 + r] = pr[r];
    __syncwarp();
    const int64_t left = key_end - j0;
    const int count = left < kKeys ? static_cast<int>(left) : kKeys;
    accumulate_rows<T, kChunks, kRows>(
        [&](int jj) { return key_row<T>(sched, table, p.v, hk, j0 + jj); }, count, my_p,
        a.vec_v, dim_v, lane, o);
    __syncwarp();
  }
#pragma unroll
  for (int r = 0; r < kRows; ++r) l[r] = rudnn::cuda::warp_reduce(l[r], rudnn::cuda::SumOp{});

  // Merge the warps' states of each row in warp order, on warp r mod kWarps.
  constexpr int kState = kChunks * 128 + 4;
#pragma unroll
  for (int r = 0; r < kRows; ++r)
    attn::cuda::store_warp_state<kChunks>(merge_s + (warp * kRows + r) * kState, o[r], m[r], l[r],
                                          lane);
  __syncthreads();
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    if (r % kWarps != warp || r >= block_rows) continue;
    float top, sum, acc[kChunks][4];
    attn::cuda::merge_warp_states<kChunks>(merge_s + r * kState, kRows * kState, kWarps, lane, top,
                                           sum, acc);
    const int rho = row0 + r;
    const int64_t g = item.first + rho / a.group;
    const int64_t h = hk * a.group + rho % a.group;
    if (p.partials) {
      attn::cuda::store_partial_record<kChunks>(
          p.partials + ((g * p.heads_q + h) * p.splits + split) * p.record, acc, top, sum, dim_v,
          lane);
      continue;
    }
    const RowEnd end = finish_row(top, sum, false, kNegInf);
    T* const orow = static_cast<T*>(p.out.data) +
                    query_offset(sched, g, p.out.batch_stride, p.out.seq_stride) +
                    h * p.out.head_stride;
#pragma unroll
    for (int c = 0; c < kChunks; ++c) {
      const int d = c * 128 + lane * 4;
      if (d >= dim_v) continue;
      float y[4];
#pragma unroll
      for (int e = 0; e < 4; ++e) y[e] = acc[c][e] * end.factor;
      if (a.vec_out && d + 4 <= dim_v) {
        store4<T>(orow + d, y);
      } else {
        store_upto4<T>(orow + d, dim_v - d, y);
      }
    }
  }
}

// The merge of a split history: each row's partial records over the partitions its keys
// touch, in partition order, finished like an unsplit row (one warp per row).
template <class T>
__global__ void __launch_bounds__(kThreads) paged_merge_kernel(const ForwardArgs a) {
  const PagedForward& p = a.p;
  const Schedule& sched = p.sched;
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const int64_t row_id = static_cast<int64_t>(blockIdx.x) * kWarps + threadIdx.x / 32;
  if (row_id >= p.queries * p.heads_q) return;
  const int64_t g = row_id / p.heads_q, h = row_id % p.heads_q;
  const int64_t seq = sequence_of(sched, g);
  const int64_t len = sequence_keys(sched, seq);
  const int64_t n = visible_keys(sched, g, len, p.causal);
  const int64_t hi = n < len ? n : len;
  const int64_t s_last = hi > 0 ? (hi - 1) / p.split_keys : -1;
  const int dim_v = static_cast<int>(p.dim_v);
  const attn::cuda::RecordMerge merge{p.partials + row_id * p.splits * p.record, p.record, dim_v,
                                      0, s_last};
  float top, sum;
  merge.stats(top, sum);
  const RowEnd end = finish_row(top, sum, false, kNegInf);
  T* const orow = static_cast<T*>(p.out.data) +
                  query_offset(sched, g, p.out.batch_stride, p.out.seq_stride) +
                  h * p.out.head_stride;
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
}

// Launches the forward (and the merge) for one dtype.
template <class T>
void forward_typed(const PagedForward& p, const Stream& stream);

}  // namespace rudnn::paged::cuda
