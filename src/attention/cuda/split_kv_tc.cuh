// SplitKv on tensor cores (F16 / BF16, D = Dv in {64, 128, 256}): the CUDA-core decode
// kernel's work split (scalar_forward.cuh: one block per (batch, KV head, row group,
// partition), the rows of the query heads that share the KV head together, so that K and V
// are read once, the warps taking turns over the key tiles and merging in warp order), with
// the key rows moved by cp.async and the products done by mma.sync m16n8k16.
//
// Why: the CUDA-core kernel reads a key row per lane through registers and is latency-bound
// (bench/RESULTS.md, round 67). Here each warp runs its own cp.async ring of kStages tiles of
// 16 keys (rows of K and V, 16 bytes per copy with an L2 evict-first policy, zeros past the
// partition), so that kStages - 1 tiles per warp are in flight while it computes on one,
// with no block barrier in the key loop. A block holds up to 16 rows (the A fragment's rows:
// row ρ of the (batch, KV head) is query ρ / G of head hk · G + ρ mod G, G = Hq / Hkv); per
// tile, S = Q · K^T (Q fragments in registers for the whole loop, K read by ldmatrix), each
// row's logits through the same rules as every other kernel (common.cuh), the online softmax
// on the S fragments (a row on the four lanes of a quad), and the probabilities, rounded to
// the input type, are the A fragments of O += P · V (V read by ldmatrix.trans).
//
// The serial rule holds as in the CUDA-core kernel: the tiles are counted from the
// partition start (tile t to warp t mod 4), a row's products do not depend on the other
// rows of its mma, a tile wholly outside a row's range leaves its state unchanged, and the
// warps' states are merged and finished by the same functions (merge.cuh,
// finish_or_hand_over_row).
//
// Precision: FP32 products, softmax and accumulation; P enters p·v rounded to T (as in
// Flash).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "attention/cuda/decode_tile.cuh"
#include "attention/cuda/scalar_forward.cuh"
#include "cuda/tensor_core/mma_sync.cuh"

namespace rudnn::attn::cuda {

constexpr int kTcTileKeys = 16;  // keys per warp tile: one k-step of p·v
constexpr int kTcRows = 16;      // rows per block: the mma's M

// Tiles each warp keeps staged: at D = 128 one in flight while it computes on another (three
// blocks of 70 KiB fit a multiprocessor: twelve warps, 96 KiB in flight), measured faster
// than two in flight in two blocks of 104 KiB (bench/RESULTS.md, round 68); two in flight at
// D = 64 (three blocks, by registers); one at D = 256.
template <int D>
constexpr int split_kv_tc_stages() {
  return D < 128 ? 3 : 2;
}

// Elements per staged row (decode_tile.cuh).
constexpr int split_kv_tc_ld(int dim) { return dim + 8; }

// The warps' states at the end: [kWarps][kTcRows][chunks · 128 + 4] floats.
constexpr int split_kv_tc_chunks(int dim) { return (dim + 127) / 128; }

// Shared memory of a launch: the warps' rings, reused for their states at the end.
inline size_t split_kv_tc_shared_bytes(int dim, int stages) {
  const size_t rings =
      static_cast<size_t>(kWarps) * stages * 2 * kTcTileKeys * split_kv_tc_ld(dim) * 2;
  const size_t states = static_cast<size_t>(kWarps) * kTcRows *
                        (split_kv_tc_chunks(dim) * 128 + 4) * sizeof(float);
  return rings > states ? rings : states;
}

// Two consecutive 16-bit elements (any alignment) as one mma operand register.
template <class T>
__device__ __forceinline__ uint32_t load_pair_bits(const T* p) {
  const auto* h = reinterpret_cast<const unsigned short*>(p);
  return static_cast<uint32_t>(h[0]) | (static_cast<uint32_t>(h[1]) << 16);
}

// kRules: a mask, bias, softcap or ALiBi is present (each logit through logit()); else the
// logit is scale · q·k within the row's key range.
template <class T, int D, bool kRules>
__global__ void __launch_bounds__(kThreads) split_kv_tc_kernel(const ScalarForwardArgs a) {
  namespace tc = rudnn::cuda::tc;
  constexpr int kStages = split_kv_tc_stages<D>();
  constexpr int kLd = split_kv_tc_ld(D);
  constexpr int kTile = kTcTileKeys * kLd;  // elements of one staged K (or V) tile
  constexpr int kPieces = D / 8;            // 16-byte pieces of a row
  constexpr int kRowsPerPass = 32 / kPieces;
  constexpr int kPasses = kTcTileKeys / kRowsPerPass;
  constexpr int kSteps = D / 16;  // k-steps of q·k, n-tile pairs of p·v
  constexpr int kChunks = split_kv_tc_chunks(D);
  constexpr int kState = kChunks * 128 + 4;
  static_assert(sizeof(T) == 2 && D % 16 == 0 && kPieces <= 32, "split_kv_tc shape");
  extern __shared__ float4 shared4[];
  T* const rings = reinterpret_cast<T*>(shared4);

  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const int qg = lane / 4, qt = lane % 4;  // the mma group (rows qg, qg + 8), thread in it
  const ScoreRules& rules = a.rules;

  const RowBlock blk = row_block(a);
  if (blk.block_rows <= 0) return;
  const SeqRows& seq = blk.seq;
  const int hk = blk.hk, base = blk.base, key_end = blk.key_end;

  // This lane's rows qg (hr = 0) and qg + 8 (hr = 1): their key ranges, rules and Q
  // fragments (a[0], a[2] of row qg; a[1], a[3] of row qg + 8; zeros past the block's rows).
  KeyRange range[2];
  RowRules rr[2];
  uint32_t qa[kSteps][4];
#pragma unroll
  for (int hr = 0; hr < 2; ++hr) {
    const int local = qg + 8 * hr;
    const bool live = local < blk.block_rows;
    const int rho = blk.row0 + min(local, blk.block_rows - 1);
    const int i = rho / a.group, h = hk * a.group + rho % a.group;
    range[hr] = live ? key_range(rules, i, seq.len_q, seq.len_k) : KeyRange{0, 0};
    rr[hr] = row_rules(rules, h, i, seq.len_q, seq.len_k);
    const T* const q_row = static_cast<const T*>(a.q.data) + seq.view_batch * a.q.batch_stride +
                           (seq.q_begin + i) * a.q.seq_stride +
                           static_cast<int64_t>(h) * a.q.head_stride;
#pragma unroll
    for (int kk = 0; kk < kSteps; ++kk) {
      qa[kk][hr] = live ? load_pair_bits(q_row + 16 * kk + 2 * qt) : 0u;
      qa[kk][2 + hr] = live ? load_pair_bits(q_row + 16 * kk + 2 * qt + 8) : 0u;
    }
  }

  // This warp's tiles of the block's keys: t = its turn, + 4, ... counted from the
  // partition start.
  int t_first = 0, count = 0;
  if (blk.key_begin < key_end) {
    const int tiles_begin = (blk.key_begin - base) / kTcTileKeys;
    const int tiles_end = (key_end - base + kTcTileKeys - 1) / kTcTileKeys;
    t_first = tiles_begin + ((warp - tiles_begin) % kWarps + kWarps) % kWarps;
    count = t_first < tiles_end ? (tiles_end - t_first + kWarps - 1) / kWarps : 0;
  }

  T* const mine = rings + static_cast<size_t>(warp) * kStages * 2 * kTile;
  const T* const k_head = static_cast<const T*>(a.k.data) + seq.view_batch * a.k.batch_stride +
                          seq.k_begin * a.k.seq_stride + hk * a.k.head_stride;
  const T* const v_head = static_cast<const T*>(a.v.data) + seq.view_batch * a.v.batch_stride +
                          seq.k_begin * a.v.seq_stride + hk * a.v.head_stride;

  // K and V are read once: their lines leave L2 first.
  const uint64_t read_once = tc::l2_evict_first_policy();
  // Tile n of this warp into its slot, keys from key_end on as zeros; one commit group per
  // call (empty past the warp's tiles). Views whose rows are not 16-byte aligned are copied
  // element by element (synchronously).
  auto load = [&](int n) {
    if (n < count) {
      const int j0 = base + (t_first + n * kWarps) * kTcTileKeys;
      T* const ks = mine + (n % kStages) * 2 * kTile;
      T* const vs = ks + kTile;
      if (a.vec_tiles) {
        const int piece = lane % kPieces;
#pragma unroll
        for (int pass = 0; pass < kPasses; ++pass) {
          const int r = pass * kRowsPerPass + lane / kPieces;
          const int j = j0 + r;
          const bool in = j < key_end;
          const T* const ksrc = in ? k_head + static_cast<int64_t>(j) * a.k.seq_stride + piece * 8
                                   : static_cast<const T*>(a.k.data);
          const T* const vsrc = in ? v_head + static_cast<int64_t>(j) * a.v.seq_stride + piece * 8
                                   : static_cast<const T*>(a.v.data);
          tc::cp_async_16_hinted(ks + r * kLd + piece * 8, ksrc, in ? 16u : 0u, read_once);
          tc::cp_async_16_hinted(vs + r * kLd + piece * 8, vsrc, in ? 16u : 0u, read_once);
        }
      } else {
        for (int e = lane; e < kTcTileKeys * D; e += 32) {
          const int r = e / D, d = e % D, j = j0 + r;
          const bool in = j < key_end;
          ks[r * kLd + d] = in ? k_head[static_cast<int64_t>(j) * a.k.seq_stride + d]
                               : rudnn::cuda::from_float<T>(0.0f);
          vs[r * kLd + d] = in ? v_head[static_cast<int64_t>(j) * a.v.seq_stride + d]
                               : rudnn::cuda::from_float<T>(0.0f);
        }
      }
    }
    tc::cp_async_commit();
  };

  float m[2] = {kNegInf, kNegInf}, l[2] = {0.0f, 0.0f};  // l: this lane's share of the sum
  float o[2 * kSteps][4];
#pragma unroll
  for (int n = 0; n < 2 * kSteps; ++n)
#pragma unroll
    for (int e = 0; e < 4; ++e) o[n][e] = 0.0f;

#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) load(s);
  for (int n = 0; n < count; ++n) {
    // Tile n landed for every lane, and every lane is done with tile n - 1, whose slot the
    // load of tile n + kStages - 1 reuses.
    tc::cp_async_wait<kStages - 2>();
    __syncwarp();
    load(n + kStages - 1);
    const T* const ks = mine + (n % kStages) * 2 * kTile;
    const T* const vs = ks + kTile;

    float s[2][4];
    tile_scores<T, kSteps>(qa, ks, kLd, lane, s);

    // Logits: this lane holds keys 2·qt, 2·qt + 1 (s[0]) and 8 + 2·qt, 9 + 2·qt (s[1]) of
    // rows qg (elements 0, 1) and qg + 8 (elements 2, 3); keys outside a row's range or the
    // block's partition are −inf.
    const int j0 = base + (t_first + n * kWarps) * kTcTileKeys;
    float pr[2][4];
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
      float x[4];
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int key = j0 + (e / 2) * 8 + 2 * qt + e % 2;
        const float dot = s[e / 2][2 * hr + e % 2];
        const bool in = key < key_end && key >= range[hr].lo && key < range[hr].hi;
        if constexpr (kRules) {
          x[e] = in ? logit(rules, rr[hr], blk.b, capped_product(rules, dot), key) : kNegInf;
        } else {
          x[e] = in ? dot * rules.scale : kNegInf;
        }
      }
      // The online softmax of the row over the tile, on the four lanes of its quad.
      const float alpha = quad_softmax_step(x, m[hr], l[hr], pr[hr]);
#pragma unroll
      for (int c = 0; c < 2 * kSteps; ++c) {
        o[c][2 * hr] *= alpha;
        o[c][2 * hr + 1] *= alpha;
      }
    }

    // O += P · V, P rounded to T.
    const uint32_t pa[4] = {rudnn::cuda::pack_pair<T>(pr[0][0], pr[0][1]),
                            rudnn::cuda::pack_pair<T>(pr[1][0], pr[1][1]),
                            rudnn::cuda::pack_pair<T>(pr[0][2], pr[0][3]),
                            rudnn::cuda::pack_pair<T>(pr[1][2], pr[1][3])};
    tile_values<T, kSteps>(pa, vs, kLd, lane, o);
  }
  tc::cp_async_wait<0>();

  // The row sums over the quad; then the warps' states, in the rings' shared memory once
  // every warp is done with its ring, in the layout merge_warp_states reads (feature d at d,
  // zeros from D to the chunk's end, then the max and the sum).
#pragma unroll
  for (int hr = 0; hr < 2; ++hr) {
    l[hr] += __shfl_xor_sync(rudnn::cuda::kFullMask, l[hr], 1);
    l[hr] += __shfl_xor_sync(rudnn::cuda::kFullMask, l[hr], 2);
  }
  __syncthreads();
  float* const states = reinterpret_cast<float*>(shared4);
#pragma unroll
  for (int hr = 0; hr < 2; ++hr) {
    float* const st = states + (warp * kTcRows + qg + 8 * hr) * kState;
#pragma unroll
    for (int c = 0; c < 2 * kSteps; ++c) {
      st[c * 8 + 2 * qt] = o[c][2 * hr];
      st[c * 8 + 2 * qt + 1] = o[c][2 * hr + 1];
    }
    for (int d = D + qt; d < kChunks * 128; d += 4) st[d] = 0.0f;
    if (qt == 0) {
      st[kChunks * 128] = m[hr];
      st[kChunks * 128 + 1] = l[hr];
    }
  }
  __syncthreads();

  // Row r of the block on warp r mod 4: the warps' states merged in warp order, then the
  // record of this partition or the output row.
  for (int r = warp; r < blk.block_rows; r += kWarps) {
    float top, sum, acc[kChunks][4];
    merge_warp_states<kChunks>(states + r * kState, kTcRows * kState, kWarps, lane, top, sum, acc);
    const int rho = blk.row0 + r;
    finish_or_hand_over_row<T, kChunks>(a, seq, blk.b, blk.split, rho / a.group,
                                        hk * a.group + rho % a.group, top, sum, acc, lane);
  }
}

}  // namespace rudnn::attn::cuda
