// The paged decode kernel, built for bandwidth: one block per (sequence, KV head, split) of a
// schedule with one query per sequence, all G = Hq / Hkv query heads of the KV head in the
// block (K and V read once for all of them).
//
// A key row of D elements is read by L = D / (16 bytes) lanes, 16 bytes each, so a warp reads
// K = 32 / L keys per step; a warp tile is 8 steps (8 · K keys), and every K and V load of a
// tile is issued before the first is used (16 loads of 16 bytes in flight per lane). Rows
// are gathered through the page table key by key. The q slices each lane needs stay in
// registers, and the block's page ids in shared memory. Per step the L lanes of a key reduce their partial products by shuffles; the
// tile's logits go through a per-warp shared buffer to the online softmax (lane i owns key
// i of the tile), whose probabilities come back the same way for p·v, where each lane
// accumulates the 16-byte slice of features it loaded. The four warps take turns over the
// tiles (tile t to warp t mod 4), the next tile's keys loading while a tile's values are
// used (KernelTuning::decode_pipelined), and merge in warp order at the end; with a split history a
// block covers keys [s·C, (s+1)·C) and writes the FP32 partial records the general path's
// merge kernel (forward.cuh) finishes.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "attention/cuda/common.cuh"
#include "attention/cuda/loads.cuh"
#include "cuda/reduce.cuh"
#include "paged_attention/cuda/forward.cuh"
#include "paged_attention/problem.h"

namespace rudnn::paged::cuda {

constexpr int kDecodeSteps = 8;
// Table entries a block stages in shared memory (a longer range reads the table per key).
constexpr int kDecodePageCache = 1024;

// What block blockIdx.x of a decode grid covers: (work item, KV heads, split); its query (one
// per item), its sequence, its first KV head (it takes `heads` consecutive ones), and its keys
// [base, end). The split varies fastest in blockIdx.x, or (heads_fastest) the KV-head group,
// so that the blocks reading one page's rows of different heads run side by side.
struct DecodeBlock {
  int64_t split, query, seq, base, end;
  int hk;
};
__device__ __forceinline__ DecodeBlock decode_block(const PagedForward& p, int heads = 1,
                                                    bool heads_fastest = false) {
  const Schedule& sched = p.sched;
  const int64_t groups = p.heads_kv / heads;
  int64_t index = blockIdx.x, split, group;
  if (heads_fastest) {
    group = index % groups;
    index /= groups;
    split = index % p.splits;
    index /= p.splits;
  } else {
    split = index % p.splits;
    index /= p.splits;
    group = index % groups;
    index /= groups;
  }
  const Item item = item_of(sched, index);
  const int64_t len = sequence_keys(sched, item.seq);
  const int64_t visible = visible_keys(sched, item.first, len, p.causal);
  const int64_t hi = visible < len ? visible : len;
  const int64_t base = p.splits > 1 ? split * p.split_keys : 0;
  const int64_t end = p.splits > 1 && base + p.split_keys < hi ? base + p.split_keys : hi;
  return {split, item.first, item.seq, base, end, static_cast<int>(group * heads)};
}

// The table entries of a block's keys [base, end) staged in page_s (capacity entries) by
// the block's threads, so that no key load waits on a table load of its own; a longer range
// is not staged (the caller reads the table per key). The caller synchronises the block.
struct StagedPages {
  int first_block;
  bool staged;
};
__device__ __forceinline__ StagedPages stage_pages(const Schedule& sched, const PageTable& table,
                                                   int64_t base, int64_t end, int* page_s,
                                                   int capacity) {
  const int first_block = end > base ? key_slot(sched, base).block : 0;
  const int blocks = end > base ? key_slot(sched, end - 1).block - first_block + 1 : 0;
  const bool staged = blocks <= capacity;
  if (staged) {
    for (int i = threadIdx.x; i < blocks; i += blockDim.x)
      page_s[i] = static_cast<int>(page_in(sched, table, first_block + i));
  }
  return {first_block, staged};
}

// The end of a decode block that covers KV heads hk0 .. hk0 + heads - 1 (heads divides
// kWarps; warp w worked for head hk0 + w % heads): the rows (head, query head of its group)
// are taken by the warps in turn, each merging the states of its head's warps in warp order
// (merge_s: [kWarps][G][D + 2] floats, D unnormalised features, the max, the sum) into the
// output row or (split history) the FP32 record of this split. Shared by the CUDA-core and
// the tensor-core decode kernels.
template <class T, int D, int G>
__device__ __forceinline__ void finish_decode_rows(const PagedForward& p, int64_t g, int hk0,
                                                   int64_t split, const float* merge_flat,
                                                   int warp, int lane, int heads = 1) {
  const auto merge_s = reinterpret_cast<const float(*)[G][D + 2]>(merge_flat);
  const Schedule& sched = p.sched;
  const int turns = kWarps / heads;
  for (int row = warp; row < heads * G; row += kWarps) {
    const int hh = row / G, r = row % G;
    float top = kNegInf;
#pragma unroll
    for (int t = 0; t < kWarps; ++t)
      if (t < turns) top = rudnn::cuda::MaxOp{}(top, merge_s[hh + t * heads][r][D]);
    float f[kWarps], sum = 0.0f;
#pragma unroll
    for (int t = 0; t < kWarps; ++t) {
      f[t] = 0.0f;
      if (t < turns) {
        const float mw = merge_s[hh + t * heads][r][D];
        f[t] = mw == top ? 1.0f : (mw == kNegInf ? 0.0f : __expf(mw - top));
        sum = fmaf(f[t], merge_s[hh + t * heads][r][D + 1], sum);
      }
    }
    const int64_t h = static_cast<int64_t>(hk0) * G + row;
    auto feature = [&](int d) {
      float acc = 0.0f;
#pragma unroll
      for (int t = 0; t < kWarps; ++t)
        if (t < turns) acc = fmaf(f[t], merge_s[hh + t * heads][r][d], acc);
      return acc;
    };
    if (p.partials) {
      float* const rec = p.partials + ((g * p.heads_q + h) * p.splits + split) * p.record;
      for (int d = lane; d < D; d += 32) rec[d] = feature(d);
      if (lane == 0) {
        rec[D] = top;
        rec[D + 1] = sum;
      }
      continue;
    }
    const RowEnd fin = finish_row(top, sum, false, kNegInf);
    T* const orow = static_cast<T*>(p.out.data) +
                    query_offset(sched, g, p.out.batch_stride, p.out.seq_stride) +
                    h * p.out.head_stride;
    for (int d = lane; d < D; d += 32) orow[d] = rudnn::cuda::from_float<T>(feature(d) * fin.factor);
  }
}

// kMinBlocks: the __launch_bounds__ residency asked for (KernelTuning::decode_min_blocks);
// kPipelined: KernelTuning::decode_pipelined.
template <class T, int D, int G, int kMinBlocks, bool kPipelined>
__global__ void __launch_bounds__(kThreads, kMinBlocks) paged_decode_kernel(const ForwardArgs a) {
  constexpr int V = attn::cuda::kVec16<T>;  // elements per 16 bytes
  constexpr int L = D / V;                 // lanes per key row
  constexpr int K = 32 / L;                // keys per step
  constexpr int kTile = kDecodeSteps * K;  // keys per warp tile (<= 32)
  static_assert(D % V == 0 && L <= 32 && 32 % L == 0 && kTile <= 32, "decode tile shape");
  __shared__ float logit_s[kWarps][kTile][G];
  __shared__ float merge_s[kWarps][G][D + 2];
  __shared__ int page_s[kDecodePageCache];

  const PagedForward& p = a.p;
  const Schedule& sched = p.sched;
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const int sub = lane % L, grp = lane / L;

  const DecodeBlock blk = decode_block(p);
  const int64_t split = blk.split, g = blk.query, base = blk.base, end = blk.end;
  const int hk = blk.hk;

  float qf[G][V];
  const T* const q_row = static_cast<const T*>(p.q.data) +
                         query_offset(sched, g, p.q.batch_stride, p.q.seq_stride);
#pragma unroll
  for (int r = 0; r < G; ++r) {
    attn::cuda::load16<T>(q_row + static_cast<int64_t>(hk * G + r) * p.q.head_stride + sub * V,
                          qf[r]);
  }

  float m[G], lsum[G], o[G][V];
#pragma unroll
  for (int r = 0; r < G; ++r) {
    m[r] = kNegInf;
    lsum[r] = 0.0f;
#pragma unroll
    for (int e = 0; e < V; ++e) o[r][e] = 0.0f;
  }

  // The physical pages of the block's keys, staged in shared memory when they fit, so that
  // no key load waits on a table load of its own.
  const PageTable table = page_table(sched, blk.seq);
  const StagedPages pages = stage_pages(sched, table, base, end, page_s, kDecodePageCache);
  const int first_block = pages.first_block;
  const bool staged = pages.staged;
  __syncthreads();

  // One key row's 16-byte slice for each step of the tile at j0 (zeros past the end).
  auto load_tile = [&](const CacheView& cache, int64_t j0, uint4 (&raw)[kDecodeSteps]) {
#pragma unroll
    for (int st = 0; st < kDecodeSteps; ++st) {
      const int64_t j = j0 + st * K + grp;
      if (j < end) {
        const KeySlot at = key_slot(sched, j);
        const int64_t page = staged ? page_s[at.block - first_block] : page_in(sched, table, at.block);
        raw[st] = attn::cuda::load16_raw<T>(static_cast<const T*>(cache.data) +
                                            page * cache.page_stride + at.row * cache.row_stride +
                                            static_cast<int64_t>(hk) * cache.head_stride + sub * V);
      } else {
        raw[st] = make_uint4(0, 0, 0, 0);
      }
    }
  };
  const int64_t stride = static_cast<int64_t>(kWarps) * kTile;
  uint4 kraw[kDecodeSteps], vraw[kDecodeSteps];
  if (kPipelined && base + static_cast<int64_t>(warp) * kTile < end)
    load_tile(p.k, base + static_cast<int64_t>(warp) * kTile, kraw);
  for (int64_t j0 = base + static_cast<int64_t>(warp) * kTile; j0 < end; j0 += stride) {
    // Pipelined: this tile's keys arrived during the last tile's softmax and p·v, its values
    // load during its logits, and the next tile's keys during its softmax and p·v. Burst:
    // every load of the tile first.
    if (!kPipelined) load_tile(p.k, j0, kraw);
    load_tile(p.v, j0, vraw);
    // Logits.
#pragma unroll
    for (int st = 0; st < kDecodeSteps; ++st) {
      float kf[V];
      attn::cuda::convert16<T>(kraw[st], kf);
      float dot[G];
#pragma unroll
      for (int r = 0; r < G; ++r) {
        dot[r] = 0.0f;
#pragma unroll
        for (int e = 0; e < V; ++e) dot[r] = fmaf(qf[r][e], kf[e], dot[r]);
      }
#pragma unroll
      for (int off = L / 2; off > 0; off /= 2)
#pragma unroll
        for (int r = 0; r < G; ++r) dot[r] += __shfl_xor_sync(rudnn::cuda::kFullMask, dot[r], off);
      if (sub == 0) {
        const bool in = j0 + st * K + grp < end;
#pragma unroll
        for (int r = 0; r < G; ++r) logit_s[warp][st * K + grp][r] = in ? dot[r] * p.scale : kNegInf;
      }
    }
    if (kPipelined && j0 + stride < end) load_tile(p.k, j0 + stride, kraw);
    __syncwarp();
    // The online softmax, lane i on key i of the tile.
#pragma unroll
    for (int r = 0; r < G; ++r) {
      const float s = lane < kTile ? logit_s[warp][lane][r] : kNegInf;
      const attn::cuda::SoftmaxStep step = attn::cuda::online_softmax_step(s, m[r], lsum[r]);
      if (step.any) {
#pragma unroll
        for (int e = 0; e < V; ++e) o[r][e] *= step.alpha;
      }
      if (lane < kTile) logit_s[warp][lane][r] = step.p;
    }
    __syncwarp();
    // p·v on the slices this lane loaded.
#pragma unroll
    for (int st = 0; st < kDecodeSteps; ++st) {
      float vf[V];
      attn::cuda::convert16<T>(vraw[st], vf);
      const float* const pk = logit_s[warp][st * K + grp];
#pragma unroll
      for (int r = 0; r < G; ++r) {
        const float w = pk[r];
#pragma unroll
        for (int e = 0; e < V; ++e) o[r][e] = fmaf(w, vf[e], o[r][e]);
      }
    }
    __syncwarp();
  }

  // The warp's state: sums over its lanes, features over the key groups of the warp.
#pragma unroll
  for (int r = 0; r < G; ++r) {
    lsum[r] = rudnn::cuda::warp_reduce(lsum[r], rudnn::cuda::SumOp{});
#pragma unroll
    for (int off = L; off < 32; off *= 2)
#pragma unroll
      for (int e = 0; e < V; ++e) o[r][e] += __shfl_xor_sync(rudnn::cuda::kFullMask, o[r][e], off);
  }
#pragma unroll
  for (int r = 0; r < G; ++r) {
    if (grp == 0) {
#pragma unroll
      for (int e = 0; e < V; ++e) merge_s[warp][r][sub * V + e] = o[r][e];
    }
    if (lane == 0) {
      merge_s[warp][r][D] = m[r];
      merge_s[warp][r][D + 1] = lsum[r];
    }
  }
  __syncthreads();

  finish_decode_rows<T, D, G>(p, g, hk, split, &merge_s[0][0][0], warp, lane);
}

}  // namespace rudnn::paged::cuda
