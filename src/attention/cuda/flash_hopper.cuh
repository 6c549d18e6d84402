// The Hopper attention forward (strategy Flash on sm_90a with plain options): one fused
// kernel on wgmma fed by TMA, FlashAttention-3's structure assembled from the tensor-core
// layer (cuda/tensor_core/: wgmma.cuh, tma.cuh, pipeline.cuh).
//
// A block owns 128 query rows of one (sequence, query head) and has three warpgroups:
//   producer   (warpgroup 0, registers given back): one thread loads the Q tile once and
//              then K and V tiles of kBlockN keys into a ring of kStages stages, K one tile
//              ahead of V; K and V each have their own full and empty barriers, so that
//              S = Q K^T of a tile can start while its V is still landing and a K slot is
//              refilled as soon as its S is computed.
//   consumers  (warpgroups 1 and 2, 64 query rows each): per tile S = Q K^T by wgmma from
//              shared memory (FP32), the online softmax on the accumulator fragment (logits
//              in base-2 units: log2 e folded into the scale, row max and sum over the four
//              threads of a row by shuffles), O *= alpha, then O += P V by wgmma with P taken
//              from the S registers as the A operand (accumulator_to_a). The P V of tile
//              t - 1 is issued right after S of tile t and runs while the softmax of tile t
//              does (FlashAttention-3's intra-warpgroup overlap; Traits::kOverlap = false
//              runs them in turn). The two consumers issue their GEMMs in turns (named
//              barriers), so that one's softmax overlaps the other's wgmma (ping-pong).
// Causal grids start with the longest query tiles of a section of heads whose K/V share L2
// (HopperForwardArgs::section_heads). Lk = 0 never reaches the kernel: the launcher writes
// zeros and lse = -inf (no_keys_kernel), stream-ordered.
// The KV head is h / (Hq / Hkv): the query heads of a group load the same K/V tiles through
// the map (sharing them in L2), never a copy. Tiles beyond a tile's last row's causal reach
// are never loaded; only tiles that cross a row's bound are masked per element.
//
// Operands sit in shared memory in the 128-byte-swizzled canonical layout that TMA writes
// (OperandTile, wgmma.cuh): a tile of R rows x D features is D / 64 slabs of [R][128 bytes].
// Q and K are K-major operands (S = Q K^T reduces over D); V is the MN-major B operand of
// P V (reduced over keys, its features contiguous). The tensor maps are 4-d over the
// views' strides ([D, seq, head, batch], the two middle axes ordered by stride), so that a
// box past the sequence's end is zero-filled rather than running into the next head, and
// both layouts (BHSD, BSHD) and any strides that are multiples of 16 bytes are read in place.
//
// Epilogue: O / l rounded once into the consumer's own rows of the Q tile (in the same
// swizzled layout: no bank conflicts), then 16-byte rows to global memory; the logsumexp per
// row. A row with no key (causal with Lq > Lk) gives zeros and -inf.
//
// Architectures: sm_90a only (the body compiles to a trap elsewhere; the plan asks
// flash_hopper_built before choosing it).
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "attention/cuda/common.cuh"
#include "cuda/tensor_core/arch.cuh"
#include "cuda/tensor_core/pipeline.cuh"
#include "cuda/tensor_core/tma.cuh"
#include "cuda/tensor_core/wgmma.cuh"

namespace rudnn::attn::cuda::hopper {

namespace tc = rudnn::cuda::tc;

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

template <int D>
struct Traits {
  static_assert(D == 64 || D == 128 || D == 256);
  static constexpr int kBlockM = 128;  // query rows per block: 64 per consumer warpgroup
  // Keys per tile: the S accumulators (kBlockN / 2) beside O's (D / 2) must fit the
  // consumers' 240 registers; at D = 256 that leaves 64 keys.
  static constexpr int kBlockN = D <= 128 ? 128 : 64;
  static constexpr int kConsumers = 2;
  static constexpr int kThreads = 128 * (1 + kConsumers);
  static constexpr int kSlabs = D / 64;  // 128-byte swizzle spans per row
  static constexpr int kQBytes = kBlockM * D * 2;
  static constexpr int kKBytes = kBlockN * D * 2;
  static constexpr int kVBytes = kBlockN * D * 2;
  static constexpr int kStageBytes = kKBytes + kVBytes;
  static constexpr int kFixedBytes = 1024 + 64 * 8;  // alignment slack, barriers
  static constexpr int kStagesFit = (227 * 1024 - kFixedBytes - kQBytes) / kStageBytes;
  static constexpr int kStages = kStagesFit > 4 ? 4 : kStagesFit;
  static constexpr int kSharedBytes = kFixedBytes + kQBytes + kStages * kStageBytes;
  // FlashAttention-3's intra-warpgroup overlap (P V of one tile beside the softmax of the
  // next) holds one tile's P fragments beside the next one's S: at D = 256 (64-key tiles)
  // O's 128 registers + 32 + 16 still fit the consumers' 240 without spills (ptxas -v).
  // false: the tiles run one after another.
  static constexpr bool kOverlap = true;
  static constexpr uint32_t kProducerRegisters = 24;
  static constexpr uint32_t kConsumerRegisters = 240;
  static_assert(kStages >= 2, "too few pipeline stages fit");
};

// Launch arguments (by value, beside the three tensor maps).
struct HopperForwardArgs {
  int64_t batch = 0;
  int heads_q = 0, group = 1;  // group = Hq / Hkv
  int len_q = 0, len_k = 0;
  int m_blocks = 0;  // ceil(Lq / 128)
  // Causal block order: (batch, head) pairs in sections of `section_heads` (as many as keep
  // their K/V in L2 together), within a section the longest query tiles (last rows) of every
  // pair first, so that the short tiles fill the tail. 0: query tile fastest, last first.
  int section_heads = 0;
  bool causal = false;
  float scale_log2 = 0;  // scale · log2 e
  // Whether the middle map axes are [head, seq] (BSHD-like strides) rather than [seq, head].
  bool q_head_inner = false, k_head_inner = false, v_head_inner = false;
  void* out = nullptr;
  int64_t out_batch_stride = 0, out_seq_stride = 0, out_head_stride = 0;
  bool vec_out = false;  // out's base and strides allow 16-byte stores
  float* lse = nullptr;  // [B, Hq, Lq] at (stride_b, stride_h, 1); null: not wanted
  int64_t lse_stride_b = 0, lse_stride_h = 0;
};

// Loads rows [row0, row0 + rows) of head `head`, batch `batch` of a map into a tile of
// kSlabs slabs of [rows][128 bytes], counted on `bar`.
template <int kSlabs>
__device__ __forceinline__ void load_rows(uint8_t* dst, const CUtensorMap* map, uint64_t* bar,
                                          int rows, int row0, int head, int batch,
                                          bool head_inner) {
#pragma unroll
  for (int j = 0; j < kSlabs; ++j) {
    if (head_inner) {
      tc::tma_load(dst + j * rows * 128, map, bar, 64 * j, head, row0, batch);
    } else {
      tc::tma_load(dst + j * rows * 128, map, bar, 64 * j, row0, head, batch);
    }
  }
}

// Lk = 0: every row has no key, so out is zeros and the logsumexp -inf; elements of out in
// [batch][seq][head][dim] order over its strides.
template <class T>
__global__ void __launch_bounds__(256) no_keys_kernel(const HopperForwardArgs a, int dim) {
  const int64_t rows = a.batch * a.len_q * a.heads_q;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * 256;
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * 256 + threadIdx.x; e < rows * dim;
       e += stride) {
    const int64_t row = e / dim, col = e % dim;
    const int64_t h = row % a.heads_q, i = (row / a.heads_q) % a.len_q,
                  b = row / (static_cast<int64_t>(a.heads_q) * a.len_q);
    static_cast<T*>(a.out)[b * a.out_batch_stride + i * a.out_seq_stride +
                           h * a.out_head_stride + col] = from_float<T>(0.0f);
    if (col == 0 && a.lse != nullptr) a.lse[b * a.lse_stride_b + h * a.lse_stride_h + i] = kNegInf;
  }
}

template <class T, int D>
__global__ void __launch_bounds__(Traits<D>::kThreads, 1)
    flash_hopper_kernel(const __grid_constant__ CUtensorMap map_q,
                        const __grid_constant__ CUtensorMap map_k,
                        const __grid_constant__ CUtensorMap map_v, const HopperForwardArgs a) {
#if RUDNN_TC_SM90A
  using Tr = Traits<D>;
  constexpr int BM = Tr::kBlockM, BN = Tr::kBlockN, S = Tr::kStages;
  constexpr tc::OperandTile q_tile{tc::Major::K, 128, BM, D};
  constexpr tc::OperandTile k_tile{tc::Major::K, 128, BN, D};
  constexpr tc::OperandTile v_tile{tc::Major::MN, 128, D, BN};

  extern __shared__ uint8_t shared_raw[];
  uint8_t* shared = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(shared_raw) + 1023) &
                                               ~uintptr_t{1023});
  uint8_t* const q_s = shared;
  uint8_t* const k_s = q_s + Tr::kQBytes;           // S x kKBytes
  uint8_t* const v_s = k_s + S * Tr::kKBytes;       // S x kVBytes
  uint64_t* const q_full = reinterpret_cast<uint64_t*>(v_s + S * Tr::kVBytes);
  uint64_t* const full_k = q_full + 1;
  uint64_t* const full_v = full_k + S;
  uint64_t* const empty_k = full_v + S;
  uint64_t* const empty_v = empty_k + S;

  int m_block;
  int64_t pair;  // b * Hq + h
  if (a.section_heads > 0) {
    const int64_t pairs = a.batch * a.heads_q;
    const int64_t section_blocks = static_cast<int64_t>(a.section_heads) * a.m_blocks;
    const int64_t section = blockIdx.x / section_blocks;
    const int64_t r = blockIdx.x % section_blocks;
    const int64_t first = section * a.section_heads;
    const int64_t width = min(static_cast<int64_t>(a.section_heads), pairs - first);
    m_block = a.m_blocks - 1 - static_cast<int>(r / width);
    pair = first + r % width;
  } else {
    m_block = a.m_blocks - 1 - static_cast<int>(blockIdx.x % a.m_blocks);
    pair = blockIdx.x / a.m_blocks;
  }
  const int h = static_cast<int>(pair % a.heads_q);
  const int b = static_cast<int>(pair / a.heads_q);
  const int hk = h / a.group;
  const int i0 = m_block * BM;
  const int rows_here = min(BM, a.len_q - i0);

  // Keys of the tile: [0, key_end), key_end the last row's reach; the first row's reach
  // bounds the tiles that need no per-element mask.
  const int64_t shift = static_cast<int64_t>(a.len_k) - a.len_q;
  auto reach = [&](int i) -> int {
    if (!a.causal) return a.len_k;
    const int64_t hi = static_cast<int64_t>(i) + shift + 1;
    return static_cast<int>(hi < 0 ? 0 : (hi > a.len_k ? a.len_k : hi));
  };
  const int key_end = reach(i0 + rows_here - 1);
  const int n_tiles = (key_end + BN - 1) / BN;

  if (threadIdx.x == 0) {
    tc::mbarrier_init(q_full, 1);
    for (int s = 0; s < S; ++s) {
      tc::mbarrier_init(&full_k[s], 1);
      tc::mbarrier_init(&full_v[s], 1);
      // One arrival per consumer warp.
      tc::mbarrier_init(&empty_k[s], Tr::kConsumers * 4);
      tc::mbarrier_init(&empty_v[s], Tr::kConsumers * 4);
    }
    tc::fence_barrier_init();
  }
  __syncthreads();

  const int warpgroup = static_cast<int>(threadIdx.x) / 128;
  if (warpgroup == 0) {
    // ---- Producer ----
    tc::warpgroup_release_registers<Tr::kProducerRegisters>();
    if (threadIdx.x == 0 && n_tiles > 0) {
      tc::tma_prefetch_map(&map_q);
      tc::tma_prefetch_map(&map_k);
      tc::tma_prefetch_map(&map_v);
      tc::mbarrier_arrive_expect_bytes(q_full, Tr::kQBytes);
      load_rows<Tr::kSlabs>(q_s, &map_q, q_full, BM, i0, h, b, a.q_head_inner);
      // K runs one tile ahead of V: K_{t+1} lands while the consumers still need V_t (their
      // S = Q K^T of a tile is issued before the P V of the previous one), and a K slot is
      // freed as soon as its S is computed.
      tc::RingPosition<S> kr, vr;
      auto load_k = [&](int t) {
        tc::mbarrier_wait(&empty_k[kr.stage], kr.phase ^ 1u);
        uint64_t* const bar = &full_k[kr.stage];
        tc::mbarrier_arrive_expect_bytes(bar, Tr::kKBytes);
        load_rows<Tr::kSlabs>(k_s + kr.stage * Tr::kKBytes, &map_k, bar, BN, t * BN, hk, b,
                              a.k_head_inner);
        kr.advance();
      };
      load_k(0);
      for (int t = 0; t < n_tiles; ++t) {
        if (t + 1 < n_tiles) load_k(t + 1);
        tc::mbarrier_wait(&empty_v[vr.stage], vr.phase ^ 1u);
        uint64_t* const bar = &full_v[vr.stage];
        tc::mbarrier_arrive_expect_bytes(bar, Tr::kVBytes);
        load_rows<Tr::kSlabs>(v_s + vr.stage * Tr::kVBytes, &map_v, bar, BN, t * BN, hk, b,
                              a.v_head_inner);
        vr.advance();
      }
    }
  } else {
    // ---- Consumers ----
    tc::warpgroup_claim_registers<Tr::kConsumerRegisters>();
    const int consumer = warpgroup - 1;
    const int ctid = static_cast<int>(threadIdx.x) - 128 * warpgroup;
    const int warp = ctid / 32, lane = ctid % 32, g = lane / 4, t4 = lane % 4;

    // This thread's two rows (g and g + 8 of the warp's 16), tile-local and as queries.
    int local[2], qi[2], hi[2];
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
      local[hr] = consumer * 64 + warp * 16 + g + 8 * hr;
      qi[hr] = i0 + local[hr];
      hi[hr] = qi[hr] < a.len_q ? reach(qi[hr]) : 0;
    }
    // Tiles from this key on cross some row's bound (causal diagonal, Lk's end).
    const int mask_from = reach(i0) < a.len_k ? reach(i0) : a.len_k;

    float o[D / 2];
#pragma unroll
    for (int i = 0; i < D / 2; ++i) o[i] = 0.0f;
    float m[2] = {kNegInf, kNegInf}, l[2] = {0.0f, 0.0f};

    const uint32_t smem = tc::shared_address(shared);
    const uint64_t desc_q = tc::make_descriptor(smem + q_tile.start(consumer * 64, 0),
                                                q_tile.lbo(), q_tile.sbo(), 128);
    const uint64_t desc_k0 =
        tc::make_descriptor(smem + Tr::kQBytes, k_tile.lbo(), k_tile.sbo(), 128);
    const uint64_t desc_v0 = tc::make_descriptor(smem + Tr::kQBytes + S * Tr::kKBytes,
                                                 v_tile.lbo(), v_tile.sbo(), 128);

    // S = Q K^T of the tile in ring stage `stage` for the consumer's 64 rows (issued and
    // committed, not waited for; its K has landed: take_turn).
    auto issue_s = [&](float (&sc)[BN / 2], int stage) {
      const uint64_t desc_k =
          tc::advance_descriptor(desc_k0, static_cast<uint32_t>(stage * Tr::kKBytes));
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk) {
        tc::Wgmma<T, BN>::template ss<tc::Major::K, tc::Major::K>(
            sc, tc::advance_descriptor(desc_q, q_tile.start(0, 16 * kk)),
            tc::advance_descriptor(desc_k, k_tile.start(0, 16 * kk)), kk > 0 ? 1u : 0u);
      }
      tc::wgmma_commit();
    };
    // O += P V of the tile in `stage` (issued and committed).
    auto issue_pv = [&](const uint32_t (&pa)[BN / 16][4], int stage, uint32_t phase) {
      tc::mbarrier_wait(&full_v[stage], phase);
      const uint64_t desc_v =
          tc::advance_descriptor(desc_v0, static_cast<uint32_t>(stage * Tr::kVBytes));
#pragma unroll
      for (int kk = 0; kk < BN / 16; ++kk) {
        tc::Wgmma<T, D>::template rs<tc::Major::MN>(
            o, pa[kk], tc::advance_descriptor(desc_v, v_tile.start(0, 16 * kk)), 1u);
      }
      tc::wgmma_commit();
    };
    // The tile's logits in base-2 units (keys outside a row's range -inf, tested only on
    // tiles that cross a row's bound), the new row maxima, the probabilities in place, the
    // running sums; returns the factor O must be rescaled by (alpha) per row.
    auto softmax = [&](float (&sc)[BN / 2], int t, float (&alpha)[2]) {
      const int n0 = t * BN;
      const bool edge = n0 + BN > mask_from;
#pragma unroll
      for (int j = 0; j < BN / 8; ++j) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int key = n0 + 8 * j + 2 * t4 + (e & 1);
          const float v = sc[4 * j + e] * a.scale_log2;
          sc[4 * j + e] = (edge && key >= hi[e >> 1]) ? kNegInf : v;
        }
      }
#pragma unroll
      for (int hr = 0; hr < 2; ++hr) {
        float mx = kNegInf;
#pragma unroll
        for (int j = 0; j < BN / 8; ++j)
          mx = fmaxf(mx, fmaxf(sc[4 * j + 2 * hr], sc[4 * j + 2 * hr + 1]));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        const float m_new = fmaxf(m[hr], mx);
        // A row with no key yet subtracts 0, so that -inf - -inf never makes a NaN.
        const float m_use = m_new == kNegInf ? 0.0f : m_new;
        alpha[hr] = exp2f(m[hr] - m_use);
        m[hr] = m_new;
        float sum = 0.0f;
#pragma unroll
        for (int j = 0; j < BN / 8; ++j) {
#pragma unroll
          for (int c = 0; c < 2; ++c) {
            float& p = sc[4 * j + 2 * hr + c];
            p = exp2f(p - m_use);
            sum += p;
          }
        }
        l[hr] = l[hr] * alpha[hr] + sum;
      }
    };
    auto rescale_o = [&](const float (&alpha)[2]) {
#pragma unroll
      for (int j = 0; j < D / 8; ++j) {
        o[4 * j] *= alpha[0];
        o[4 * j + 1] *= alpha[0];
        o[4 * j + 2] *= alpha[1];
        o[4 * j + 3] *= alpha[1];
      }
    };
    // P rounded to T as the A fragments of P V, 16 keys per k-step.
    auto to_a = [&](uint32_t (&pa)[BN / 16][4], const float (&sc)[BN / 2]) {
#pragma unroll
      for (int kk = 0; kk < BN / 16; ++kk) tc::accumulator_to_a<T>(pa[kk], sc, kk);
    };
    // A stage's K (or V) tile has been read by this warp: one arrival towards freeing it.
    auto release = [&](uint64_t* bar) {
      if (lane == 0) tc::mbarrier_arrive(bar);
    };

    // FlashAttention-3's inter-warpgroup ping-pong: the two consumers take turns to issue
    // their GEMMs (named barrier kTurn + c is consumer c's turn, 256 threads: its own sync
    // and the other consumer's arrival), so that one's softmax runs on the other units while
    // the other's wgmma run on the tensor cores. Consumer 0 opens its first turn itself and
    // takes consumer 1's last hand-over after its loop, so that both barriers end balanced
    // (skipping that arrival instead would need a branch between wgmma issue and wait, which
    // serialises the wgmma). Every consumer walks the same n_tiles tiles, hence the same
    // number of turns.
    constexpr uint32_t kTurn = 3;  // 1 and 2 are the epilogue's
    if (n_tiles > 0 && consumer == 0) tc::named_barrier_arrive(kTurn, 256);
    // The tile's K is awaited before the turn (as FlashAttention-3 does), so that a consumer
    // never holds the turn while its operand is still landing.
    auto take_turn = [&](const tc::RingPosition<S>& at) {
      tc::mbarrier_wait(&full_k[at.stage], at.phase);
      tc::named_barrier_sync(kTurn + consumer, 256);
    };
    auto pass_turn = [&]() { tc::named_barrier_arrive(kTurn + 1 - consumer, 256); };

    if (n_tiles > 0) tc::mbarrier_wait(q_full, 0);
    tc::RingPosition<S> ring;
    float sc[BN / 2];
    uint32_t pa[BN / 16][4];
    float alpha[2];
    // One helper each for the two loops below. After the S wgmma of the tile in `stage`
    // completed: its accumulators are readable, its K slot may be refilled; after its P V:
    // O is readable, the V slot free. Before issuing: the accumulators' registers settled.
    auto s_landed = [&](int stage) {
      tc::fence_operand(sc);
      release(&empty_k[stage]);
    };
    auto pv_landed = [&](int stage) {
      tc::fence_operand(o);
      release(&empty_v[stage]);
    };
    auto fence_accumulators = [&]() {
      tc::fence_operand(sc);
      tc::fence_operand(o);
      tc::wgmma_fence();
    };
    if constexpr (Tr::kOverlap) {
      // FlashAttention-3's intra-warpgroup overlap: the P V of tile t - 1 runs on the tensor
      // cores while the softmax of tile t runs on the other units.
      if (n_tiles > 0) {
        take_turn(ring);
        fence_accumulators();
        issue_s(sc, ring.stage);
        pass_turn();
        tc::wgmma_wait<0>();
        s_landed(ring.stage);
        softmax(sc, 0, alpha);
        to_a(pa, sc);
      }
      for (int t = 1; t < n_tiles; ++t) {
        const tc::RingPosition<S> prev = ring;
        ring.advance();
        take_turn(ring);
        fence_accumulators();
        issue_s(sc, ring.stage);
        issue_pv(pa, prev.stage, prev.phase);
        pass_turn();
        tc::wgmma_wait<1>();  // S of tile t is ready; P V of tile t - 1 may still run
        s_landed(ring.stage);
        softmax(sc, t, alpha);
        tc::wgmma_wait<0>();
        pv_landed(prev.stage);
        rescale_o(alpha);
        to_a(pa, sc);
      }
      if (n_tiles > 0) {
        fence_accumulators();
        issue_pv(pa, ring.stage, ring.phase);
        tc::wgmma_wait<0>();
        pv_landed(ring.stage);
      }
    } else {
      for (int t = 0; t < n_tiles; ++t) {
        take_turn(ring);
        fence_accumulators();
        issue_s(sc, ring.stage);
        pass_turn();
        tc::wgmma_wait<0>();
        s_landed(ring.stage);
        softmax(sc, t, alpha);
        rescale_o(alpha);
        to_a(pa, sc);
        fence_accumulators();
        issue_pv(pa, ring.stage, ring.phase);
        tc::wgmma_wait<0>();
        pv_landed(ring.stage);
        ring.advance();
      }
    }

    if (n_tiles > 0 && consumer == 0) tc::named_barrier_sync(kTurn, 256);

    // Finish the rows: the sums over the row's four threads, the logsumexp.
    float factor[2];
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
      float sum = l[hr];
      sum += __shfl_xor_sync(0xffffffffu, sum, 1);
      sum += __shfl_xor_sync(0xffffffffu, sum, 2);
      float lse2;
      if (sum > 0.0f) {
        factor[hr] = 1.0f / sum;
        lse2 = m[hr] + log2f(sum);
      } else if (sum != sum) {
        factor[hr] = sum;
        lse2 = sum;
      } else {
        factor[hr] = 0.0f;  // no key: zeros and -inf
        lse2 = kNegInf;
      }
      if (t4 == 0 && a.lse != nullptr && qi[hr] < a.len_q) {
        a.lse[b * a.lse_stride_b + static_cast<int64_t>(h) * a.lse_stride_h + qi[hr]] =
            lse2 * kLn2;
      }
    }

    // O into this consumer's rows of the Q tile (its own QK^T reads of them are complete;
    // the other consumer's rows are other bytes), then rows to global memory.
#pragma unroll
    for (int j = 0; j < D / 8; ++j) {
#pragma unroll
      for (int hr = 0; hr < 2; ++hr) {
        *reinterpret_cast<uint32_t*>(q_s + q_tile.offset(local[hr], 8 * j + 2 * t4)) =
            tc::pack_16bit<T>(o[4 * j + 2 * hr] * factor[hr], o[4 * j + 2 * hr + 1] * factor[hr]);
      }
    }
    tc::named_barrier_sync(1 + consumer, 128);
    T* const out_rows = static_cast<T*>(a.out) + b * a.out_batch_stride +
                        static_cast<int64_t>(i0) * a.out_seq_stride +
                        static_cast<int64_t>(h) * a.out_head_stride;
    const int row_lo = consumer * 64;
    if (a.vec_out) {
      constexpr int kChunks = D / 8;
      for (int c = ctid; c < 64 * kChunks; c += 128) {
        const int r = row_lo + c / kChunks, ch = c % kChunks;
        if (r < rows_here) {
          *reinterpret_cast<uint4*>(out_rows + r * a.out_seq_stride + ch * 8) =
              *reinterpret_cast<const uint4*>(q_s + q_tile.offset(r, 8 * ch));
        }
      }
    } else {
      for (int e = ctid; e < 64 * D; e += 128) {
        const int r = row_lo + e / D, col = e % D;
        if (r < rows_here) {
          out_rows[r * a.out_seq_stride + col] =
              *reinterpret_cast<const T*>(q_s + q_tile.offset(r, col));
        }
      }
    }
  }
#elif defined(__CUDA_ARCH__)
  __trap();  // built without sm_90a: the plan never chooses this (flash_hopper_built)
#endif
}

}  // namespace rudnn::attn::cuda::hopper
