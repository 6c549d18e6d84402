// The tensor-core MLA kernel: paged MLA with R = 512, P = 64 in F16/BF16 on mma.sync.
//
// All H query heads of a query share one latent cache row per key (MQA with Dqk = R + P =
// 576, Dv = R = 512), so a tile of keys is a GEMM: S[rows x keys] = Q[rows x 576] K^T, then
// O[rows x 512] += P V with V = the latent columns of the same shared-memory tile.
//
// A block owns 64 query rows ((query, head) pairs of one work item, query-major) and one key
// partition; its eight warps form four pairs, pair i owning rows 16 i .. 16 i + 15 (warps i
// and i + 4: on Hopper, warp i of each of the two warpgroups). Per tile of 64 keys (gathered
// row by row through the page table with 16-byte cp.async, double buffered), Q and the tile
// in wgmma's canonical K-major layout with the 128-byte swizzle (slabs of 64 features x 64
// rows, wgmma.cuh), which keeps ldmatrix conflict-free too:
//   - warp (i, half) computes S for its 16 rows and keys 32 half .. 32 half + 31 (Q resident
//     in shared memory, K rows as the B operand), in FP32 (kWgmma: warpgroup `half`, m64n32);
//   - the pair exchanges its row maxima (shared memory, a named barrier), so both warps hold
//     the same running max; each rounds its probabilities to 16 bits into a shared P tile
//     and keeps the FP32 row sums of its own keys (added in half order at the end);
//   - warp (i, half) accumulates O for its rows and value columns 256 half .. 256 half + 255
//     over all 64 keys (ldmatrix.trans of the latent columns; kWgmma: m64n256 with the same
//     tile read MN-major as V, FlashMLA's reuse), 128 FP32 registers a lane.
// kWgmma (sm_90a) issues the products as warpgroup MMAs; otherwise mma.sync (sm_80+).
// A split history writes the FP32 records of the general kernel ([rows, splits, record]:
// unnormalised output, max, sum), merged by paged_merge_kernel.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "attention/cuda/common.cuh"
#include "cuda/tensor_core/mma_sync.cuh"
#include "cuda/tensor_core/pipeline.cuh"
#include "cuda/tensor_core/wgmma.cuh"
#include "paged_attention/cuda/mla_tc.h"
#include "paged_attention/problem.h"

namespace rudnn::paged::cuda::mla {

constexpr int kRank = 512, kPos = 64, kDim = kRank + kPos;
constexpr int kChunks = kDim / 8;  // 16-byte chunks of a Q or K row
constexpr int kRows = static_cast<int>(kMlaRows), kKeys = static_cast<int>(kMlaKeys);
constexpr int kWarps = 8, kThreads = kWarps * 32;
constexpr int kTileElems = kRows * kDim;  // one Q or K tile (kRows == kKeys)
static_assert(kRows == kKeys, "Q and K tiles share a layout");
// Q, two K tiles, the P tile (16-bit), the pairs' row maxima and row sums (FP32), the
// warps' key bounds, and the slack to align the tiles to the 1024-byte swizzle repeat.
constexpr int kTileBytes = kTileElems * 2;
constexpr int kPBytes = kRows * kKeys * 2;
constexpr size_t kSharedBytes =
    3 * kTileBytes + kPBytes + 2 * 2 * kRows * 4 + kWarps * 8 + 1024;

struct Args {
  PagedForward p;
  int64_t row_tiles = 1;
};

// Byte offset of 16-byte chunk c (features 8 c .. 8 c + 7) of row r of a Q, K or P tile: the
// canonical K-major 128-byte-swizzled layout of wgmma (OperandTile{K, 128, 64, features}):
// slab c / 8 of [64 rows][128 bytes], the chunk XOR-ed with r mod 8, so that eight rows at
// one logical chunk also fall on distinct bank groups for ldmatrix.
__device__ __forceinline__ uint32_t chunk_at(int row, int chunk) {
  return static_cast<uint32_t>((chunk >> 3) * (kRows * 128) + row * 128 + (((chunk ^ row) & 7) << 4));
}

template <class T>
__device__ __forceinline__ uint32_t pack2(float lo, float hi) {
  T a, b;
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    a = __float2bfloat16_rn(lo);
    b = __float2bfloat16_rn(hi);
  } else {
    a = __float2half_rn(lo);
    b = __float2half_rn(hi);
  }
  uint16_t ua, ub;
  memcpy(&ua, &a, 2);
  memcpy(&ub, &b, 2);
  return static_cast<uint32_t>(ua) | (static_cast<uint32_t>(ub) << 16);
}

template <class T, bool kWgmma>
__global__ void __launch_bounds__(kThreads, 1) paged_mla_tc_kernel(const Args a) {
  using rudnn::cuda::tc::cp_async_16;
  using rudnn::cuda::tc::ldmatrix;
  using rudnn::cuda::tc::mma_16816;
  extern __shared__ __align__(128) unsigned char mla_shared[];
  const PagedForward& p = a.p;
  const Schedule& sched = p.sched;
  const int tid = static_cast<int>(threadIdx.x), warp = tid / 32, lane = tid % 32;
  const int pair = warp & 3, half = warp >> 2;
  const int group = lane >> 2, quad = lane & 3;

  int64_t index = blockIdx.x;
  const int64_t split = index % p.splits;
  index /= p.splits;
  const int64_t tile = index % a.row_tiles;
  const Item item = item_of(sched, index / a.row_tiles);
  const int64_t heads = p.heads_q;
  const int64_t rows_total = static_cast<int64_t>(item.count) * heads;
  const int64_t row0 = tile * kRows;
  if (row0 >= rows_total) return;
  const int64_t len = sequence_keys(sched, item.seq);
  const PageTable table = page_table(sched, item.seq);

  unsigned char* const aligned =
      mla_shared + ((1024u - rudnn::cuda::tc::shared_address(mla_shared) % 1024u) % 1024u);
  unsigned char* const q_s = aligned;
  unsigned char* const k_s = q_s + kTileBytes;  // two tiles
  unsigned char* const p_s = k_s + 2 * kTileBytes;
  float* const max_s = reinterpret_cast<float*>(p_s + kPBytes);  // [half][row]
  float* const sum_s = max_s + 2 * kRows;                        // [half][row]
  int64_t* const end_s = reinterpret_cast<int64_t*>(sum_s + 2 * kRows);

  // Keys row r sees: [0, hi).
  auto row_hi = [&](int r) -> int64_t {
    const int64_t rho = row0 + r;
    if (rho >= rows_total) return 0;
    const int64_t n = visible_keys(sched, item.first + rho / heads, len, p.causal);
    return n < len ? n : len;
  };

  // Q: thread t loads row t / 4, chunks t % 4, t % 4 + 4, ... (zeros past the rows).
  const int load_row = tid >> 2, load_sub = tid & 3;
  {
    const int64_t rho = row0 + load_row;
    const bool valid = rho < rows_total;
    const T* qrow = static_cast<const T*>(p.q.data);
    const T* qprow = static_cast<const T*>(p.qp.data);
    if (valid) {
      const int64_t g = item.first + rho / heads, h = rho % heads;
      qrow += query_offset(sched, g, p.q.batch_stride, p.q.seq_stride) + h * p.q.head_stride;
      qprow += query_offset(sched, g, p.qp.batch_stride, p.qp.seq_stride) + h * p.qp.head_stride;
    }
#pragma unroll
    for (int i = 0; i < kChunks / 4; ++i) {
      const int c = load_sub + 4 * i;
      const T* src = c < kRank / 8 ? qrow + c * 8 : qprow + (c - kRank / 8) * 8;
      cp_async_16(q_s + chunk_at(load_row, c), src, valid ? 16u : 0u);
    }
  }

  // The block's key range: the most any of its rows sees, cut to its partition.
  int64_t key_end;
  {
    int64_t hi = row_hi(load_row);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
      const int64_t other = __shfl_xor_sync(0xffffffffu, hi, o);
      hi = other > hi ? other : hi;
    }
    if (lane == 0) end_s[warp] = hi;
    __syncthreads();
    key_end = 0;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) key_end = end_s[w] > key_end ? end_s[w] : key_end;
  }
  const int64_t base = p.splits > 1 ? split * p.split_keys : 0;
  if (p.splits > 1 && base + p.split_keys < key_end) key_end = base + p.split_keys;
  const int64_t tiles = key_end > base ? (key_end - base + kKeys - 1) / kKeys : 0;

  // Rows g and g + 8 of this warp's 16: the keys each sees within the block's range.
  const int r_lo = pair * 16 + group, r_hi = r_lo + 8;
  const int64_t lim_lo = row_hi(r_lo) < key_end ? row_hi(r_lo) : key_end;
  const int64_t lim_hi = row_hi(r_hi) < key_end ? row_hi(r_hi) : key_end;

  // One key tile: thread t gathers key t / 4's latent and positional rows (zeros past the
  // range, so that masked keys add 0 · 0 to O).
  auto load_tile = [&](int64_t j0, unsigned char* dst_tile) {
    const int64_t j = j0 + load_row;
    const bool valid = j < key_end;
    const T* lrow = static_cast<const T*>(p.k.data);
    const T* prow = static_cast<const T*>(p.kp.data);
    if (valid) {
      const KeySlot at = key_slot(sched, j);
      const int64_t page = page_in(sched, table, at.block);
      lrow += page * p.k.page_stride + at.row * p.k.row_stride;
      prow += page * p.kp.page_stride + at.row * p.kp.row_stride;
    }
#pragma unroll
    for (int i = 0; i < kChunks / 4; ++i) {
      const int c = load_sub + 4 * i;
      const T* src = c < kRank / 8 ? lrow + c * 8 : prow + (c - kRank / 8) * 8;
      cp_async_16(dst_tile + chunk_at(load_row, c), src, valid ? 16u : 0u);
    }
  };

  if (tiles > 0) load_tile(base, k_s);
  rudnn::cuda::tc::cp_async_commit();

  // O: element e of column block n (mma.sync's C fragment) is wgmma's accumulator 4 n + e.
  std::conditional_t<kWgmma, float[128], float[32][4]> o;
  auto ov = [&](int n, int e) -> float& {
    if constexpr (kWgmma) {
      return o[4 * n + e];
    } else {
      return o[n][e];
    }
  };
#pragma unroll
  for (int n = 0; n < 32; ++n)
#pragma unroll
    for (int e = 0; e < 4; ++e) ov(n, e) = 0.0f;
  float m_lo = attn::cuda::kNegInf, m_hi = attn::cuda::kNegInf, l_lo = 0.0f, l_hi = 0.0f;
  const float kNegInf = attn::cuda::kNegInf;

  // wgmma operands (kWgmma): Q and the K tile K-major (S), the P tile K-major and the K tile
  // read MN-major as V[keys][features] (O); a warpgroup's B starts at its keys / columns.
  namespace tc = rudnn::cuda::tc;
  constexpr tc::OperandTile q_tile{tc::Major::K, 128, kRows, kDim};
  constexpr tc::OperandTile k_tile{tc::Major::K, 128, kKeys, kDim};
  constexpr tc::OperandTile p_tile{tc::Major::K, 128, kRows, kKeys};
  constexpr tc::OperandTile v_tile{tc::Major::MN, 128, kRank, kKeys};

  for (int64_t t = 0; t < tiles; ++t) {
    tc::cp_async_wait<0>();
    if constexpr (kWgmma) tc::fence_proxy_async_shared();  // cp.async data read by wgmma
    __syncthreads();  // tile t landed for all; every warp is done with tile t - 1
    if (t + 1 < tiles) load_tile(base + (t + 1) * kKeys, k_s + ((t + 1) & 1) * kTileBytes);
    tc::cp_async_commit();
    unsigned char* const kt = k_s + (t & 1) * kTileBytes;
    const int64_t j0 = base + t * kKeys;

    // S for rows 16 pair .., keys 32 half .. 32 half + 31.
    float s[4][4];
#pragma unroll
    for (int n = 0; n < 4; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) s[n][e] = 0.0f;
    if constexpr (kWgmma) {
      float d[16];
#pragma unroll
      for (int i = 0; i < 16; ++i) d[i] = 0.0f;
      const uint32_t q_addr = tc::shared_address(q_s), k_addr = tc::shared_address(kt);
      tc::wgmma_fence();
#pragma unroll
      for (int ks = 0; ks < kDim / 16; ++ks) {
        const uint64_t da = tc::make_descriptor(q_addr + q_tile.start(0, 16 * ks), q_tile.lbo(),
                                                q_tile.sbo(), 128);
        const uint64_t db = tc::make_descriptor(k_addr + k_tile.start(32 * half, 16 * ks),
                                                k_tile.lbo(), k_tile.sbo(), 128);
        tc::Wgmma<T, 32>::template ss<tc::Major::K, tc::Major::K>(d, da, db, ks > 0 ? 1u : 0u);
      }
      tc::wgmma_commit();
      tc::wgmma_wait<0>();
      tc::fence_operand(d);
#pragma unroll
      for (int n = 0; n < 4; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) s[n][e] = d[4 * n + e];
    } else {
      const int a_row = pair * 16 + (lane & 15);
      const int b_key0 = half * 32 + (lane & 7) + ((lane >> 4) << 3);
      const int b_key1 = b_key0 + 16;
#pragma unroll 4
      for (int ks = 0; ks < kDim / 16; ++ks) {
        uint32_t af[4], bf0[4], bf1[4];
        ldmatrix<4, false>(af, q_s + chunk_at(a_row, 2 * ks + (lane >> 4)));
        const int bc = 2 * ks + ((lane >> 3) & 1);
        ldmatrix<4, false>(bf0, kt + chunk_at(b_key0, bc));
        ldmatrix<4, false>(bf1, kt + chunk_at(b_key1, bc));
        mma_16816<T>(s[0], af, {bf0[0], bf0[1]});
        mma_16816<T>(s[1], af, {bf0[2], bf0[3]});
        mma_16816<T>(s[2], af, {bf1[0], bf1[1]});
        mma_16816<T>(s[3], af, {bf1[2], bf1[3]});
      }
    }

    // Scale and mask; the pair's row maxima.
    float mx_lo = kNegInf, mx_hi = kNegInf;
#pragma unroll
    for (int n = 0; n < 4; ++n)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int64_t j = j0 + half * 32 + n * 8 + quad * 2 + e;
        s[n][e] = j < lim_lo ? s[n][e] * p.scale : kNegInf;
        s[n][2 + e] = j < lim_hi ? s[n][2 + e] * p.scale : kNegInf;
        mx_lo = fmaxf(mx_lo, s[n][e]);
        mx_hi = fmaxf(mx_hi, s[n][2 + e]);
      }
#pragma unroll
    for (int x = 1; x <= 2; x <<= 1) {
      mx_lo = fmaxf(mx_lo, __shfl_xor_sync(0xffffffffu, mx_lo, x));
      mx_hi = fmaxf(mx_hi, __shfl_xor_sync(0xffffffffu, mx_hi, x));
    }
    if (quad == 0) {
      max_s[half * kRows + r_lo] = mx_lo;
      max_s[half * kRows + r_hi] = mx_hi;
    }
    tc::named_barrier_sync(1 + pair, 64);
    mx_lo = fmaxf(mx_lo, max_s[(1 - half) * kRows + r_lo]);
    mx_hi = fmaxf(mx_hi, max_s[(1 - half) * kRows + r_hi]);

    // The online-softmax step (both warps of the pair take the same one per row).
    const float new_lo = fmaxf(m_lo, mx_lo), new_hi = fmaxf(m_hi, mx_hi);
    const float alpha_lo = new_lo == kNegInf || m_lo == new_lo ? 1.0f : __expf(m_lo - new_lo);
    const float alpha_hi = new_hi == kNegInf || m_hi == new_hi ? 1.0f : __expf(m_hi - new_hi);
    m_lo = new_lo;
    m_hi = new_hi;
    float sum_lo = 0.0f, sum_hi = 0.0f;
#pragma unroll
    for (int n = 0; n < 4; ++n) {
      float pr[4];
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        pr[e] = s[n][e] == kNegInf ? 0.0f : __expf(s[n][e] - new_lo);
        pr[2 + e] = s[n][2 + e] == kNegInf ? 0.0f : __expf(s[n][2 + e] - new_hi);
      }
      sum_lo += pr[0] + pr[1];
      sum_hi += pr[2] + pr[3];
      const int chunk = half * 4 + n;
      *reinterpret_cast<uint32_t*>(p_s + chunk_at(r_lo, chunk) + quad * 4) = pack2<T>(pr[0], pr[1]);
      *reinterpret_cast<uint32_t*>(p_s + chunk_at(r_hi, chunk) + quad * 4) = pack2<T>(pr[2], pr[3]);
    }
    l_lo = l_lo * alpha_lo + sum_lo;
    l_hi = l_hi * alpha_hi + sum_hi;
#pragma unroll
    for (int n = 0; n < 32; ++n) {
      ov(n, 0) *= alpha_lo;
      ov(n, 1) *= alpha_lo;
      ov(n, 2) *= alpha_hi;
      ov(n, 3) *= alpha_hi;
    }

    // O[rows, 256 half ..] += P[rows, 64 keys] V[64 keys, 256 half ..].
    if constexpr (kWgmma) {
      // The warpgroup's product reads every row of P (both warpgroups' keys): all warps.
      tc::fence_proxy_async_shared();
      __syncthreads();
      auto& d = o;
      const uint32_t p_addr = tc::shared_address(p_s), v_addr = tc::shared_address(kt);
      tc::fence_operand(d);
      tc::wgmma_fence();
#pragma unroll
      for (int ks = 0; ks < kKeys / 16; ++ks) {
        const uint64_t da = tc::make_descriptor(p_addr + p_tile.start(0, 16 * ks), p_tile.lbo(),
                                                p_tile.sbo(), 128);
        const uint64_t db = tc::make_descriptor(v_addr + v_tile.start(256 * half, 16 * ks),
                                                v_tile.lbo(), v_tile.sbo(), 128);
        tc::Wgmma<T, 256>::template ss<tc::Major::K, tc::Major::MN>(d, da, db, 1u);
      }
      tc::wgmma_commit();
      tc::wgmma_wait<0>();
      tc::fence_operand(d);
    } else {
      tc::named_barrier_sync(1 + pair, 64);
      const int a_row = pair * 16 + (lane & 15);
      const int v_mat = lane >> 3;
#pragma unroll
      for (int ks = 0; ks < kKeys / 16; ++ks) {
        uint32_t af[4];
        ldmatrix<4, false>(af, p_s + chunk_at(a_row, 2 * ks + (lane >> 4)));
        const int v_key = ks * 16 + (lane & 7) + ((v_mat & 1) << 3);
#pragma unroll
        for (int n2 = 0; n2 < 16; ++n2) {
          uint32_t bf[4];
          const int chunk = half * 32 + n2 * 2 + (v_mat >> 1);
          ldmatrix<4, true>(bf, kt + chunk_at(v_key, chunk));
          mma_16816<T>(o[2 * n2], af, {bf[0], bf[1]});
          mma_16816<T>(o[2 * n2 + 1], af, {bf[2], bf[3]});
        }
      }
    }
  }
  tc::cp_async_wait<0>();

  // Row sums: the quad's lanes, then the pair's halves in half order.
#pragma unroll
  for (int x = 1; x <= 2; x <<= 1) {
    l_lo += __shfl_xor_sync(0xffffffffu, l_lo, x);
    l_hi += __shfl_xor_sync(0xffffffffu, l_hi, x);
  }
  if (quad == 0) {
    sum_s[half * kRows + r_lo] = l_lo;
    sum_s[half * kRows + r_hi] = l_hi;
  }
  tc::named_barrier_sync(1 + pair, 64);
  l_lo = sum_s[r_lo] + sum_s[kRows + r_lo];
  l_hi = sum_s[r_hi] + sum_s[kRows + r_hi];

#pragma unroll
  for (int which = 0; which < 2; ++which) {
    const int r = which == 0 ? r_lo : r_hi;
    const int64_t rho = row0 + r;
    if (rho >= rows_total) continue;
    const int64_t g = item.first + rho / heads, h = rho % heads;
    const float m = which == 0 ? m_lo : m_hi, l = which == 0 ? l_lo : l_hi;
    if (p.partials) {
      float* const rec = p.partials + ((g * p.heads_q + h) * p.splits + split) * p.record;
#pragma unroll
      for (int n = 0; n < 32; ++n) {
        const int d = half * 256 + n * 8 + quad * 2;
        *reinterpret_cast<float2*>(rec + d) = make_float2(ov(n, 2 * which), ov(n, 2 * which + 1));
      }
      if (half == 0 && quad == 0) {
        rec[kRank] = m;
        rec[kRank + 1] = l;
      }
      continue;
    }
    const float factor = attn::cuda::finish_row(m, l, false, kNegInf).factor;
    T* const orow = static_cast<T*>(p.out.data) +
                    query_offset(sched, g, p.out.batch_stride, p.out.seq_stride) +
                    h * p.out.head_stride;
#pragma unroll
    for (int n = 0; n < 32; ++n) {
      const int d = half * 256 + n * 8 + quad * 2;
      *reinterpret_cast<uint32_t*>(orow + d) =
          pack2<T>(ov(n, 2 * which) * factor, ov(n, 2 * which + 1) * factor);
    }
  }
}

}  // namespace rudnn::paged::cuda::mla
