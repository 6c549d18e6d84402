// The tensor-core paged decode kernel (F16 / BF16): the decode kernel's work split (one block
// per (sequence, KV head, split), all G = Hq / Hkv query heads of the KV head in the block, so
// that K and V are read once), with the key rows moved by cp.async and the products done by
// mma.sync m16n8k16.
//
// Why: the CUDA-core decode kernel (decode.cuh) is latency-bound; its loads go through
// registers, so a warp can keep only a few of them in flight and spends its issue slots on
// per-key shuffles. Here each warp runs its own cp.async pipeline of kStages tiles of 16 keys
// (K and V rows gathered through the page table, 16 bytes per copy, zeros past the end), so
// (kStages - 1) tiles per warp are in flight while it computes on one, with no block barrier
// in the key loop. Per tile, the G heads (padded to the 16 rows of an mma) give
// S = Q · K^T (Q fragments held in registers for the whole loop, K read by ldmatrix), the
// online softmax runs on the S fragments (each row on the four lanes of a quad), and the
// probabilities, rounded to the input type, are the A fragments of O += P · V (V read by
// ldmatrix.trans). A block may take several consecutive KV heads (ForwardArgs::decode_heads,
// 1, 2 or 4): warp w works for head w mod heads, so that the block's warps read the rows of
// those heads (adjacent in a page) side by side. The warps of one head take turns over its
// tiles (tile t to its (t mod turns)-th warp) and their states are merged in warp order at the
// end (finish_decode_rows, shared with decode.cuh); with a split history the block writes the
// FP32 partial records that paged_merge_kernel (forward.cuh) finishes.
//
// Precision: FP32 products and accumulation; the probabilities enter p·v rounded to the input
// type (as in FlashAttention's tensor-core kernels).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "attention/cuda/decode_tile.cuh"
#include "cuda/tensor_core/mma_sync.cuh"
#include "cuda/types.cuh"
#include "paged_attention/cuda/decode.cuh"

namespace rudnn::paged::cuda {

// Keys per warp tile: one k-step of p·v.
constexpr int kTcKeys = 16;

// Elements per staged key row: 8 more than D, so that the eight rows an ldmatrix reads fall
// in distinct bank groups.
constexpr int tc_row(int dim) { return dim + 8; }

// Shared memory of the tensor-core decode kernel: the warps' pipelines (reused for the warps'
// states at the end), then `page_cache` table entries.
inline size_t decode_tc_pipeline_bytes(int dim, int group, int stages, int esize) {
  const size_t pipeline =
      static_cast<size_t>(kWarps) * stages * 2 * kTcKeys * tc_row(dim) * esize;
  const size_t states = static_cast<size_t>(kWarps) * group * (dim + 2) * sizeof(float);
  const size_t bytes = pipeline > states ? pipeline : states;
  return (bytes + 15) / 16 * 16;
}

// a.pipeline_bytes: decode_tc_pipeline_bytes; a.page_cache: table entries staged after it.
template <class T, int D, int G, int kStages>
__global__ void __launch_bounds__(kThreads) paged_decode_tc_kernel(const ForwardArgs a) {
  using rudnn::cuda::tc::cp_async_16;
  constexpr int kRow = tc_row(D);
  constexpr int kTile = kTcKeys * kRow;  // elements of one staged K (or V) tile
  constexpr int kChunks = D / 8;         // 16-byte pieces of a row
  constexpr int kRowsPerPass = 32 / kChunks;
  constexpr int kPasses = kTcKeys / kRowsPerPass;
  constexpr int kSteps = D / 16;         // k-steps of q·k, n-tile pairs of p·v
  static_assert(sizeof(T) == 2 && D % 16 == 0 && kChunks <= 32 && G <= 8 && kStages >= 2,
                "tensor-core decode shape");
  extern __shared__ float4 shared4[];
  T* const stages = reinterpret_cast<T*>(shared4);
  int* const page_s = reinterpret_cast<int*>(reinterpret_cast<char*>(shared4) + a.pipeline_bytes);

  const PagedForward& p = a.p;
  const Schedule& sched = p.sched;
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const int qg = lane / 4, qt = lane % 4;  // the mma group (row) and thread in the group
  const DecodeBlock blk = decode_block(p, a.decode_heads, a.heads_fastest);
  const int64_t base = blk.base, end = blk.end;
  // This warp's KV head, and its turn among the turns = kWarps / heads warps of that head.
  const int heads = a.decode_heads;
  const int hk = blk.hk + warp % heads, turn = warp / heads, turns = kWarps / heads;

  // Q rows 0 .. G - 1 as A fragments (rows G .. 15 are zeros): a[0] and a[2] of each k-step.
  uint32_t qa[kSteps][4];
  {
    const T* const q_row = static_cast<const T*>(p.q.data) +
                           query_offset(sched, blk.query, p.q.batch_stride, p.q.seq_stride) +
                           static_cast<int64_t>(hk * G + qg) * p.q.head_stride;
#pragma unroll
    for (int kk = 0; kk < kSteps; ++kk) {
      qa[kk][0] = qg < G ? *reinterpret_cast<const uint32_t*>(q_row + 16 * kk + 2 * qt) : 0u;
      qa[kk][2] = qg < G ? *reinterpret_cast<const uint32_t*>(q_row + 16 * kk + 2 * qt + 8) : 0u;
      qa[kk][1] = qa[kk][3] = 0u;
    }
  }

  const PageTable table = page_table(sched, blk.seq);
  const StagedPages pages = stage_pages(sched, table, base, end, page_s, a.page_cache);
  __syncthreads();

  // This warp's tiles: t = turn, turn + turns, ... of the block's 16-key tiles.
  const int64_t tiles = end > base ? (end - base + kTcKeys - 1) / kTcKeys : 0;
  const int count = tiles > turn ? static_cast<int>((tiles - turn + turns - 1) / turns) : 0;
  T* const mine = stages + static_cast<size_t>(warp) * kStages * 2 * kTile;
  const T* const k_data = static_cast<const T*>(p.k.data);
  const T* const v_data = static_cast<const T*>(p.v.data);
  const int64_t k_head = static_cast<int64_t>(hk) * p.k.head_stride;
  const int64_t v_head = static_cast<int64_t>(hk) * p.v.head_stride;
  const int chunk = lane % kChunks;

  // Tile i of this warp into its slot; one commit group per call (empty past the end).
  auto load = [&](int i) {
    if (i < count) {
      const int64_t j0 = base + (static_cast<int64_t>(i) * turns + turn) * kTcKeys;
      T* const ks = mine + (i % kStages) * 2 * kTile;
      T* const vs = ks + kTile;
#pragma unroll
      for (int pass = 0; pass < kPasses; ++pass) {
        const int r = pass * kRowsPerPass + lane / kChunks;
        const int64_t j = j0 + r;
        const T* ksrc = k_data;
        const T* vsrc = v_data;
        uint32_t bytes = 0;
        if (j < end) {
          const KeySlot at = key_slot(sched, j);
          const int64_t page = pages.staged ? page_s[at.block - pages.first_block]
                                            : page_in(sched, table, at.block);
          ksrc = k_data + page * p.k.page_stride + at.row * p.k.row_stride + k_head + chunk * 8;
          vsrc = v_data + page * p.v.page_stride + at.row * p.v.row_stride + v_head + chunk * 8;
          bytes = 16;
        }
        cp_async_16(ks + r * kRow + chunk * 8, ksrc, bytes);
        cp_async_16(vs + r * kRow + chunk * 8, vsrc, bytes);
      }
    }
    rudnn::cuda::tc::cp_async_commit();
  };

  float m = kNegInf, l = 0.0f;  // row qg's running max and this lane's share of its sum
  float o[2 * kSteps][4];
#pragma unroll
  for (int n = 0; n < 2 * kSteps; ++n)
#pragma unroll
    for (int e = 0; e < 4; ++e) o[n][e] = 0.0f;

#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) load(s);
  for (int i = 0; i < count; ++i) {
    // Tile i landed for every lane, and every lane is done with tile i - 1, whose slot the
    // load of tile i + kStages - 1 reuses.
    rudnn::cuda::tc::cp_async_wait<kStages - 2>();
    __syncwarp();
    load(i + kStages - 1);
    const T* const ks = mine + (i % kStages) * 2 * kTile;
    const T* const vs = ks + kTile;

    float s[2][4];
    attn::cuda::tile_scores<T, kSteps>(qa, ks, kRow, lane, s);

    // The online softmax of row qg over the tile: this lane holds keys 2·qt, 2·qt + 1 (s[0])
    // and 8 + 2·qt, 9 + 2·qt (s[1]); key 0 of the tile is in range, so the row max is finite.
    const int64_t j0 = base + (static_cast<int64_t>(i) * turns + turn) * kTcKeys;
    float x[4];
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int key = (e / 2) * 8 + 2 * qt + e % 2;
      x[e] = j0 + key < end ? s[e / 2][e % 2] * p.scale : kNegInf;
    }
    float pr[4];
    const float alpha = attn::cuda::quad_softmax_step(x, m, l, pr);
#pragma unroll
    for (int n = 0; n < 2 * kSteps; ++n) {
      o[n][0] *= alpha;
      o[n][1] *= alpha;
    }

    // O += P · V, P rounded to T (rows G .. 15 zeros).
    const uint32_t pa[4] = {rudnn::cuda::pack_pair<T>(pr[0], pr[1]), 0u,
                            rudnn::cuda::pack_pair<T>(pr[2], pr[3]), 0u};
    attn::cuda::tile_values<T, kSteps>(pa, vs, kRow, lane, o);
  }
  rudnn::cuda::tc::cp_async_wait<0>();

  // The row sums over the quad; then the warps' states, in the pipelines' shared memory once
  // every warp is done with its stages.
  l += __shfl_xor_sync(rudnn::cuda::kFullMask, l, 1);
  l += __shfl_xor_sync(rudnn::cuda::kFullMask, l, 2);
  __syncthreads();
  float* const merge_s = reinterpret_cast<float*>(shared4);
  if (qg < G) {
    float* const row = merge_s + (warp * G + qg) * (D + 2);
#pragma unroll
    for (int n = 0; n < 2 * kSteps; ++n) {
      row[n * 8 + 2 * qt] = o[n][0];
      row[n * 8 + 2 * qt + 1] = o[n][1];
    }
    if (qt == 0) {
      row[D] = m;
      row[D + 1] = l;
    }
  }
  __syncthreads();
  finish_decode_rows<T, D, G>(p, blk.query, blk.hk, blk.split, merge_s, warp, lane, heads);
}

}  // namespace rudnn::paged::cuda
