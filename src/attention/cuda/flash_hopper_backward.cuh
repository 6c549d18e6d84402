// The Hopper attention backward (strategy Flash on sm_90a with plain options, the plan's
// flash_wgmma): FlashAttention-3's structure on wgmma fed by TMA, built from the tensor-core
// layer (cuda/tensor_core/) and the forward's pieces (flash_hopper.cuh: load_rows, the
// maps of flash_hopper_launch.cuh).
//
// A block owns one key tile (kBlockN = 128 keys) of one (batch, KV head) and walks, for each
// query head of the KV head's group in turn, the query tiles (kBlockM = 64 rows) whose rows
// see some of its keys (causal: from the first row that reaches the tile's first key on;
// those tiles form a prefix-closed set over key tiles, which the deterministic mode relies
// on). Three warpgroups:
//   producer   (warpgroup 0, registers given back): one thread loads K and V once, then Q
//              and dO of each query tile into a ring of kStages stages (one full and one
//              empty barrier per stage).
//   consumers  (warpgroups 1 and 2, 64 keys each), per query tile, in the transposed form
//              that keeps every per-key product in registers:
//                S^T = K Q^T, dP^T = V dO^T                (ss wgmma, FP32)
//                P^T = exp2(S^T · scale log2 e − lse log2 e) (0 outside a row's keys),
//                dS^T = P^T ∘ (dP^T − D_i)                   (D_i = rowsum(dO ∘ O), from the
//                                                             row_stats kernel)
//                dV += P^T dO, dK += dS^T Q                 (rs wgmma: the accumulators
//                                                             rounded to T are A fragments)
//                dS^T rounded to T into shared memory (both consumers' halves), then
//                dQ_tile[:, 64c .. 64c + 63] = dS K[:, 64c ..]  (ss wgmma over the 128 keys,
//                                                             issued before dV and dK)
//              The dQ partial goes through shared memory into an FP32 workspace (one bulk
//              reduction cp.reduce.async.bulk .add.f32 of 16 KB per consumer and step, issued
//              by one thread while dV and dK run; dq_half_offset gives the layout). A small
//              kernel (dq_convert_kernel) scales it and rounds into dq. dK (scaled) and dV
//              leave from registers at the end.
//   statistics (warp 1 of the producer warpgroup): the query tile's lse (base 2) and D_i into
//              the stage's slot of shared memory, one more arrival on the stage's full barrier.
// Deterministic mode: before its reduction for a query tile, consumer c of key tile n waits
// until the tile's counter (one per (batch, query head, query tile, consumer)) equals n,
// and raises it once the reduction has landed, so that every dQ element receives its partial
// sums in key-tile order (FlashAttention-3's scheme). Key tile n - 1 of a pair is an earlier
// block of the grid (see the block order), hence already resident or finished: the wait
// cannot deadlock.
//
// Rows beyond Lq are zero-filled by TMA and get lse = +inf (P = 0); keys beyond Lk are
// masked on the last tile; rows with no key (causal, Lq > Lk) have lse = -inf and are
// treated alike, so their dq stays 0.
//
// Architectures: sm_90a only (the body compiles to a trap elsewhere; the plan asks
// flash_hopper_built before choosing it).
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "attention/cuda/common.cuh"
#include "attention/cuda/flash_hopper.cuh"
#include "cuda/tensor_core/arch.cuh"
#include "cuda/tensor_core/pipeline.cuh"
#include "cuda/tensor_core/tma.cuh"
#include "cuda/tensor_core/wgmma.cuh"

namespace rudnn::attn::cuda::hopper {

template <int D>
struct BackwardTraits {
  static_assert(D == 128);
  static constexpr int kBlockM = 64;   // query rows per step
  static constexpr int kBlockN = 128;  // keys per block: 64 per consumer warpgroup
  static constexpr int kConsumers = 2;
  static constexpr int kThreads = 128 * (1 + kConsumers);
  static constexpr int kSlabs = D / 64;
  static constexpr int kStages = 2;
  static constexpr int kKBytes = kBlockN * D * 2;
  static constexpr int kQBytes = kBlockM * D * 2;
  static constexpr int kStageBytes = 2 * kQBytes;       // Q and dO
  static constexpr int kDsBytes = kBlockM * kBlockN * 2;  // dS of one query tile
  // dQ leaves through shared memory and bulk reductions (true) or by FP32 vector atomics from
  // the registers (false).
  static constexpr bool kBulkDq = true;
  static constexpr int kDqHalfBytes = kBlockM * 64 * 4;  // one consumer's dQ partial
  static constexpr int kFixedBytes = 1024 + 64 * 8;
  static constexpr int kStatBytes = 2 * kBlockM * 4;  // a step's lse (base 2) and D_i
  static constexpr int kSharedBytes = kFixedBytes + 2 * kKBytes + kStages * kStageBytes +
                                      2 * kDsBytes + (kBulkDq ? 2 * kDqHalfBytes : 0) +
                                      kStages * kStatBytes;
  static constexpr uint32_t kProducerRegisters = 24;
  static constexpr uint32_t kConsumerRegisters = 240;
  static_assert(kSharedBytes <= 227 * 1024);
};

struct HopperBackwardArgs {
  int64_t batch = 0;
  int heads_q = 0, heads_kv = 0, group = 1;
  int len_q = 0, len_k = 0;
  int n_blocks = 0;  // key tiles: ceil(Lk / 128)
  int section_pairs = 1;  // block order (see the kernel), >= 1
  int m_blocks = 0;  // query tiles: ceil(Lq / 64)
  bool causal = false;
  bool deterministic = false;
  float scale_log2 = 0;
  bool q_head_inner = false, k_head_inner = false, v_head_inner = false, do_head_inner = false;
  const float* lse = nullptr;      // natural log, [B, Hq, Lq] at (stats_b, stats_h, 1)
  const float* row_dot = nullptr;  // D_i, laid out as lse
  int64_t stats_b = 0, stats_h = 0;
  float* dq_accum = nullptr;  // [B, Hq, m_blocks, 2, 64, 64] (dq_half_offset), zeroed
  int* semaphores = nullptr;  // [B, Hq, m_blocks, 2], zeroed
  float dk_scale = 1.0f;      // the softmax scale
  void* dk = nullptr;
  int64_t dk_batch_stride = 0, dk_seq_stride = 0, dk_head_stride = 0;
  void* dv = nullptr;
  int64_t dv_batch_stride = 0, dv_seq_stride = 0, dv_head_stride = 0;
  bool pair_dk = false, pair_dv = false;  // 4-byte aligned pairs: 32-bit stores
};

// The dQ workspace holds each query tile as two contiguous halves (features 0..63, 64..127:
// one consumer's partial each) of 64 rows x 64 FP32, the 8-float groups of row r permuted by
// r % 8, so that the consumers' float2 stores into a shared half (same layout) are free of
// bank conflicts and a half is one contiguous bulk reduction.
__host__ __device__ __forceinline__ int dq_half_offset(int row, int col) {
  return row * 64 + ((((col >> 3) ^ (row & 7)) << 3) | (col & 7));
}

// Adds `bytes` (a multiple of 16) of FP32 from shared memory into global memory, element by
// element, as one bulk operation of this thread's bulk group (tma_store_commit / _wait).
__device__ __forceinline__ void bulk_reduce_add_f32(float* dst, const float* src, uint32_t bytes) {
#if RUDNN_TC_SM90
  asm volatile(
      "cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%0], [%1], %2;" ::"l"(dst),
      "r"(tc::shared_address(src)), "r"(bytes)
      : "memory");
#endif
}

// Orders generic-proxy accesses of global memory against async-proxy ones (the bulk
// reductions) of this thread.
__device__ __forceinline__ void fence_proxy_async_global() {
#if RUDNN_TC_SM90
  asm volatile("fence.proxy.async.global;" ::: "memory");
#endif
}

__device__ __forceinline__ int spin_acquire(const int* p) {
  int v;
  asm volatile("ld.acquire.gpu.global.b32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

template <class T, int D>
__global__ void __launch_bounds__(BackwardTraits<D>::kThreads, 1)
    flash_hopper_backward_kernel(const __grid_constant__ CUtensorMap map_q,
                                 const __grid_constant__ CUtensorMap map_k,
                                 const __grid_constant__ CUtensorMap map_v,
                                 const __grid_constant__ CUtensorMap map_do,
                                 const HopperBackwardArgs a) {
#if RUDNN_TC_SM90A
  using Tr = BackwardTraits<D>;
  constexpr int BM = Tr::kBlockM, BN = Tr::kBlockN, S = Tr::kStages;
  // K and V as the A operands of S^T and dP^T (keys x D, K-major) and K as the B operand of
  // dQ (keys reduced, features contiguous: MN-major); Q and dO as the B operands of S^T and
  // dP^T (K-major) and of dK and dV (MN-major); dS as the A operand of dQ (queries
  // contiguous per key: MN-major). One buffer each, read in both majors.
  constexpr tc::OperandTile k_a{tc::Major::K, 128, BN, D};
  constexpr tc::OperandTile k_b{tc::Major::MN, 128, D, BN};
  constexpr tc::OperandTile q_k{tc::Major::K, 128, BM, D};
  constexpr tc::OperandTile q_mn{tc::Major::MN, 128, D, BM};
  constexpr tc::OperandTile ds_a{tc::Major::MN, 128, BM, BN};

  extern __shared__ uint8_t shared_raw[];
  uint8_t* shared = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(shared_raw) + 1023) &
                                               ~uintptr_t{1023});
  uint8_t* const k_s = shared;
  uint8_t* const v_s = k_s + Tr::kKBytes;
  uint8_t* const q_s = v_s + Tr::kKBytes;        // S x kQBytes
  uint8_t* const do_s = q_s + S * Tr::kQBytes;   // S x kQBytes
  uint8_t* const ds_s = do_s + S * Tr::kQBytes;  // 2 x kDsBytes
  uint8_t* const dq_s = ds_s + 2 * Tr::kDsBytes;  // kBulkDq: 2 x kDqHalfBytes
  float* const stat_s =  // S x [lse2[64], D_i[64]]
      reinterpret_cast<float*>(dq_s + (Tr::kBulkDq ? 2 * Tr::kDqHalfBytes : 0));
  uint64_t* const kv_full = reinterpret_cast<uint64_t*>(stat_s + S * 2 * BM);
  uint64_t* const full = kv_full + 1;
  uint64_t* const empty = full + S;

  // Block order: (batch, KV head) pairs in sections of `section_pairs` (as many as keep their
  // Q, dO, K and V in L2 together), within a section key tile slowest, so that under causal
  // the longest blocks (first key tiles) start first and the short ones fill the tail. Key
  // tile n - 1 of a pair always precedes key tile n (the deterministic mode's wait).
  int n_block;
  int64_t pair;  // b * Hkv + hk
  {
    const int64_t pairs = a.batch * a.heads_kv;
    const int64_t section_blocks = static_cast<int64_t>(a.section_pairs) * a.n_blocks;
    const int64_t section = blockIdx.x / section_blocks;
    const int64_t r = blockIdx.x % section_blocks;
    const int64_t first = section * a.section_pairs;
    const int64_t width = min(static_cast<int64_t>(a.section_pairs), pairs - first);
    n_block = static_cast<int>(r / width);
    pair = first + r % width;
  }
  const int hk = static_cast<int>(pair % a.heads_kv);
  const int b = static_cast<int>(pair / a.heads_kv);
  const int n0 = n_block * BN;

  const int64_t shift = static_cast<int64_t>(a.len_k) - a.len_q;
  // Causal: row i sees keys [0, i + shift]; the first row that sees key n0 is n0 - shift.
  int m_first = 0;
  if (a.causal) {
    const int64_t first_row = n0 - shift;
    m_first = first_row <= 0 ? 0 : static_cast<int>(first_row / BM);
  }
  const int m_count = a.m_blocks > m_first ? a.m_blocks - m_first : 0;
  const int steps = m_count * a.group;

  if (threadIdx.x == 0) {
    tc::mbarrier_init(kv_full, 1);
    for (int s = 0; s < S; ++s) {
      // The TMA thread's arrival (with the bytes) and the statistics warp's.
      tc::mbarrier_init(&full[s], 2);
      tc::mbarrier_init(&empty[s], Tr::kConsumers * 4);
    }
    tc::fence_barrier_init();
  }
  __syncthreads();

  const int warpgroup = static_cast<int>(threadIdx.x) / 128;
  if (warpgroup == 0) {
    tc::warpgroup_release_registers<Tr::kProducerRegisters>();
    if (threadIdx.x == 0 && steps > 0) {
      tc::tma_prefetch_map(&map_q);
      tc::tma_prefetch_map(&map_k);
      tc::tma_prefetch_map(&map_v);
      tc::tma_prefetch_map(&map_do);
      tc::mbarrier_arrive_expect_bytes(kv_full, 2 * Tr::kKBytes);
      load_rows<Tr::kSlabs>(k_s, &map_k, kv_full, BN, n0, hk, b, a.k_head_inner);
      load_rows<Tr::kSlabs>(v_s, &map_v, kv_full, BN, n0, hk, b, a.v_head_inner);
      tc::RingPosition<S> ring;
      for (int step = 0; step < steps; ++step) {
        const int h = hk * a.group + step / m_count;
        const int m_block = m_first + step % m_count;
        tc::mbarrier_wait(&empty[ring.stage], ring.phase ^ 1u);
        uint64_t* const bar = &full[ring.stage];
        tc::mbarrier_arrive_expect_bytes(bar, Tr::kStageBytes);
        load_rows<Tr::kSlabs>(q_s + ring.stage * Tr::kQBytes, &map_q, bar, BM, m_block * BM, h, b,
                              a.q_head_inner);
        load_rows<Tr::kSlabs>(do_s + ring.stage * Tr::kQBytes, &map_do, bar, BM, m_block * BM, h,
                              b, a.do_head_inner);
        ring.advance();
      }
    } else if (threadIdx.x / 32 == 1 && steps > 0) {
      // The statistics warp: per step the rows' logsumexp in base 2 (+inf for rows beyond Lq
      // and rows with no key, so that their P is 0) and D_i (0 beyond Lq) into the stage's
      // slot, then one arrival on its full barrier (which publishes the stores).
      const int lane = static_cast<int>(threadIdx.x) % 32;
      tc::RingPosition<S> ring;
      for (int step = 0; step < steps; ++step) {
        const int h = hk * a.group + step / m_count;
        const int i0 = (m_first + step % m_count) * BM;
        const int64_t base =
            static_cast<int64_t>(b) * a.stats_b + static_cast<int64_t>(h) * a.stats_h + i0;
        tc::mbarrier_wait(&empty[ring.stage], ring.phase ^ 1u);
        float* const slot = stat_s + ring.stage * 2 * BM;
#pragma unroll
        for (int r = lane; r < BM; r += 32) {
          float l = __builtin_huge_valf(), d = 0.0f;
          if (i0 + r < a.len_q) {
            const float raw = a.lse[base + r];
            l = raw == kNegInf ? __builtin_huge_valf() : raw * kLog2e;
            d = a.row_dot[base + r];
          }
          slot[r] = l;
          slot[BM + r] = d;
        }
        __syncwarp();
        if (lane == 0) tc::mbarrier_arrive(&full[ring.stage]);
        ring.advance();
      }
    }
  } else {
    tc::warpgroup_claim_registers<Tr::kConsumerRegisters>();
    const int consumer = warpgroup - 1;
    const int ctid = static_cast<int>(threadIdx.x) - 128 * warpgroup;
    const int warp = ctid / 32, lane = ctid % 32, g = lane / 4, t4 = lane % 4;

    // This thread's two keys (accumulator rows g and g + 8 of its warp), tile-local.
    int key_local[2], key[2];
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
      key_local[hr] = consumer * 64 + warp * 16 + g + 8 * hr;
      key[hr] = n0 + key_local[hr];
    }

    float dv[D / 2], dk[D / 2];
#pragma unroll
    for (int i = 0; i < D / 2; ++i) {
      dv[i] = 0.0f;
      dk[i] = 0.0f;
    }

    const uint32_t smem = tc::shared_address(shared);
    const uint32_t smem_k = smem, smem_v = smem + Tr::kKBytes;
    const uint32_t smem_q = smem_v + Tr::kKBytes, smem_do = smem_q + S * Tr::kQBytes;
    const uint32_t smem_ds = smem_do + S * Tr::kQBytes;
    const uint64_t desc_k_a =
        tc::make_descriptor(smem_k + k_a.start(consumer * 64, 0), k_a.lbo(), k_a.sbo(), 128);
    const uint64_t desc_v_a =
        tc::make_descriptor(smem_v + k_a.start(consumer * 64, 0), k_a.lbo(), k_a.sbo(), 128);
    const uint64_t desc_k_b =
        tc::make_descriptor(smem_k + k_b.start(consumer * 64, 0), k_b.lbo(), k_b.sbo(), 128);
    const uint64_t desc_q_k0 = tc::make_descriptor(smem_q, q_k.lbo(), q_k.sbo(), 128);
    const uint64_t desc_do_k0 = tc::make_descriptor(smem_do, q_k.lbo(), q_k.sbo(), 128);
    const uint64_t desc_q_mn0 = tc::make_descriptor(smem_q, q_mn.lbo(), q_mn.sbo(), 128);
    const uint64_t desc_do_mn0 = tc::make_descriptor(smem_do, q_mn.lbo(), q_mn.sbo(), 128);
    const uint64_t desc_ds0 = tc::make_descriptor(smem_ds, ds_a.lbo(), ds_a.sbo(), 128);

    auto reach = [&](int64_t i) -> int64_t {
      if (!a.causal) return a.len_k;
      const int64_t hi = i + shift + 1;
      return hi < 0 ? 0 : (hi > a.len_k ? a.len_k : hi);
    };

    if (steps > 0) tc::mbarrier_wait(kv_full, 0);
    tc::RingPosition<S> ring;
    for (int step = 0; step < steps; ++step) {
      const int h = hk * a.group + step / m_count;
      const int m_block = m_first + step % m_count;
      const int i0 = m_block * BM;
      const int stage = ring.stage;
      const uint32_t stage_off = static_cast<uint32_t>(stage * Tr::kQBytes);

      tc::mbarrier_wait(&full[stage], ring.phase);
      float s[BM / 2], dp[BM / 2];
      tc::fence_operand(dv);
      tc::fence_operand(dk);
      tc::wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk) {
        tc::Wgmma<T, BM>::template ss<tc::Major::K, tc::Major::K>(
            s, tc::advance_descriptor(desc_k_a, k_a.start(0, 16 * kk)),
            tc::advance_descriptor(desc_q_k0, stage_off + q_k.start(0, 16 * kk)),
            kk > 0 ? 1u : 0u);
      }
      tc::wgmma_commit();
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk) {
        tc::Wgmma<T, BM>::template ss<tc::Major::K, tc::Major::K>(
            dp, tc::advance_descriptor(desc_v_a, k_a.start(0, 16 * kk)),
            tc::advance_descriptor(desc_do_k0, stage_off + q_k.start(0, 16 * kk)),
            kk > 0 ? 1u : 0u);
      }
      tc::wgmma_commit();

      // Whether some element of this (key tile, query tile) pair lies outside its row's keys.
      const bool edge = n0 + BN > a.len_k || (a.causal && reach(i0) < n0 + BN);

      // The rows' statistics (the stage's slot, written by the statistics warp) for this
      // thread's 16 query columns 8j + 2 t4 + c, read when needed.
      const float* const lse2 = stat_s + stage * 2 * BM;
      const float* const rdot = lse2 + BM;
      tc::wgmma_wait<1>();
      tc::fence_operand(s);
#pragma unroll
      for (int j = 0; j < BM / 8; ++j) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          float p = exp2f(s[4 * j + e] * a.scale_log2 - lse2[8 * j + 2 * t4 + (e & 1)]);
          if (edge) {
            const int64_t row = i0 + 8 * j + 2 * t4 + (e & 1);
            if (key[e >> 1] >= reach(row)) p = 0.0f;
          }
          s[4 * j + e] = p;
        }
      }
      tc::wgmma_wait<0>();
      tc::fence_operand(dp);
#pragma unroll
      for (int j = 0; j < BM / 8; ++j) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          dp[4 * j + e] = s[4 * j + e] * (dp[4 * j + e] - rdot[8 * j + 2 * t4 + (e & 1)]);
        }
      }

      // P^T and dS^T rounded to T: A fragments of dV and dK, 16 queries per k-step.
      uint32_t pa[BM / 16][4], dsa[BM / 16][4];
#pragma unroll
      for (int kk = 0; kk < BM / 16; ++kk) {
        tc::accumulator_to_a<T>(pa[kk], s, kk);
        tc::accumulator_to_a<T>(dsa[kk], dp, kk);
      }
      // dS^T into the shared dS tile of this step's parity (element (query, key), queries
      // contiguous): the pairs of a fragment register are two adjacent queries of one key.
      uint8_t* const ds_tile = ds_s + (step & 1) * Tr::kDsBytes;
#pragma unroll
      for (int kk = 0; kk < BM / 16; ++kk) {
#pragma unroll
        for (int r = 0; r < 4; ++r) {
          const int query = 16 * kk + 2 * t4 + 8 * (r >> 1);
          const int kl = key_local[r & 1];
          *reinterpret_cast<uint32_t*>(ds_tile + ds_a.offset(query, kl)) = dsa[kk][r];
        }
      }
      tc::fence_proxy_async_shared();

      // Both consumers' dS halves written (and fenced to the async proxy): dQ = dS K first,
      // then dV and dK, so that dQ's partial leaves while dV and dK run.
      tc::named_barrier_sync(1, 256);
      float dq[D / 4];
      tc::fence_operand(dv);
      tc::fence_operand(dk);
      tc::wgmma_fence();
      const uint64_t desc_ds =
          tc::advance_descriptor(desc_ds0, static_cast<uint32_t>((step & 1) * Tr::kDsBytes));
#pragma unroll
      for (int kk = 0; kk < BN / 16; ++kk) {
        tc::Wgmma<T, D / 2>::template ss<tc::Major::MN, tc::Major::MN>(
            dq, tc::advance_descriptor(desc_ds, ds_a.start(0, 16 * kk)),
            tc::advance_descriptor(desc_k_b, k_b.start(0, 16 * kk)), kk > 0 ? 1u : 0u);
      }
      tc::wgmma_commit();
#pragma unroll
      for (int kk = 0; kk < BM / 16; ++kk) {
        tc::Wgmma<T, D>::template rs<tc::Major::MN>(
            dv, pa[kk], tc::advance_descriptor(desc_do_mn0, stage_off + q_mn.start(0, 16 * kk)),
            1u);
      }
#pragma unroll
      for (int kk = 0; kk < BM / 16; ++kk) {
        tc::Wgmma<T, D>::template rs<tc::Major::MN>(
            dk, dsa[kk], tc::advance_descriptor(desc_q_mn0, stage_off + q_mn.start(0, 16 * kk)),
            1u);
      }
      tc::wgmma_commit();
      tc::wgmma_wait<1>();  // dQ done (groups complete in order); dV and dK may still run
      tc::fence_operand(dq);

      // dQ partial: rows 16 warp + g (+ 8) of the query tile, this consumer's 64 features,
      // into the tile's half in the workspace (dq_half_offset).
      const int64_t tile = (static_cast<int64_t>(b) * a.heads_q + h) * a.m_blocks + m_block;
      float* const ws_half = a.dq_accum + (tile * 2 + consumer) * (BM * 64);
      int* const sem = a.semaphores + tile * 2 + consumer;
      if constexpr (Tr::kBulkDq) {
        // Into this consumer's shared tile (once the previous step's reduction has read it),
        // then one thread adds it to the workspace with a bulk reduction, off the others' path.
        if (ctid == 0) tc::tma_store_wait_read<0>();
        tc::named_barrier_sync(2 + consumer, 128);
        float* const dq_tile = reinterpret_cast<float*>(dq_s + consumer * Tr::kDqHalfBytes);
#pragma unroll
        for (int j = 0; j < D / 16; ++j) {
#pragma unroll
          for (int hr = 0; hr < 2; ++hr) {
            const int row = warp * 16 + g + 8 * hr;
            *reinterpret_cast<float2*>(dq_tile + dq_half_offset(row, 8 * j + 2 * t4)) =
                make_float2(dq[4 * j + 2 * hr], dq[4 * j + 2 * hr + 1]);
          }
        }
        tc::fence_proxy_async_shared();
        tc::named_barrier_sync(2 + consumer, 128);
        if (ctid == 0) {
          if (a.deterministic) {
            while (spin_acquire(sem) != n_block) {
            }
            fence_proxy_async_global();
          }
          bulk_reduce_add_f32(ws_half, dq_tile, Tr::kDqHalfBytes);
          tc::tma_store_commit();
          if (a.deterministic) {
            // The sums must have landed before the next key tile may add its own.
            tc::tma_store_wait<0>();
            fence_proxy_async_global();
            __threadfence();
            atomicAdd(sem, 1);
          }
        }
      } else {
        if (a.deterministic) {
          if (ctid == 0) {
            while (spin_acquire(sem) != n_block) {
            }
          }
          tc::named_barrier_sync(2 + consumer, 128);
        }
#pragma unroll
        for (int j = 0; j < D / 16; ++j) {
#pragma unroll
          for (int hr = 0; hr < 2; ++hr) {
            const int row = warp * 16 + g + 8 * hr;
            atomicAdd(reinterpret_cast<float2*>(ws_half + dq_half_offset(row, 8 * j + 2 * t4)),
                      make_float2(dq[4 * j + 2 * hr], dq[4 * j + 2 * hr + 1]));
          }
        }
        if (a.deterministic) {
          tc::named_barrier_sync(2 + consumer, 128);
          if (ctid == 0) {
            __threadfence();
            atomicAdd(sem, 1);
          }
        }
      }
      // dV and dK done: their A fragments may go, Q and dO of the stage are no longer read.
      tc::wgmma_wait<0>();
      tc::fence_operand(dv);
      tc::fence_operand(dk);
#pragma unroll
      for (int kk = 0; kk < BM / 16; ++kk) {
        tc::fence_operand(pa[kk]);
        tc::fence_operand(dsa[kk]);
      }
      if (lane == 0) tc::mbarrier_arrive(&empty[stage]);
      ring.advance();
    }

    // Outstanding bulk reductions read shared memory: finish before the block exits.
    if (Tr::kBulkDq && ctid == 0) tc::tma_store_wait<0>();

    // dK (times the softmax scale) and dV, rows of keys below Lk.
    auto store = [&](const float (&acc)[D / 2], void* base, int64_t bs, int64_t ss, int64_t hs,
                     bool pairs, float factor) {
#pragma unroll
      for (int hr = 0; hr < 2; ++hr) {
        if (key[hr] >= a.len_k) continue;
        T* const row = static_cast<T*>(base) + b * bs + static_cast<int64_t>(key[hr]) * ss +
                       static_cast<int64_t>(hk) * hs;
#pragma unroll
        for (int j = 0; j < D / 8; ++j) {
          const int col = 8 * j + 2 * t4;
          const float x0 = acc[4 * j + 2 * hr] * factor, x1 = acc[4 * j + 2 * hr + 1] * factor;
          if (pairs) {
            *reinterpret_cast<uint32_t*>(row + col) = tc::pack_16bit<T>(x0, x1);
          } else {
            row[col] = from_float<T>(x0);
            row[col + 1] = from_float<T>(x1);
          }
        }
      }
    };
    store(dk, a.dk, a.dk_batch_stride, a.dk_seq_stride, a.dk_head_stride, a.pair_dk, a.dk_scale);
    store(dv, a.dv, a.dv_batch_stride, a.dv_seq_stride, a.dv_head_stride, a.pair_dv, 1.0f);
  }
#elif defined(__CUDA_ARCH__)
  __trap();  // built without sm_90a: the plan never chooses this (flash_hopper_built)
#endif
}

// dq = workspace · scale rounded to T, through dq's strides: one thread per 8 features.
template <class T, int D>
__global__ void __launch_bounds__(256)
    dq_convert_kernel(const float* __restrict__ ws, void* dq, int64_t batch, int heads_q,
                      int len_q, int m_blocks, int64_t bs, int64_t ss, int64_t hs, float scale,
                      bool vec) {
  static_assert(D == 128, "the workspace holds two 64-feature halves per row");
  const int64_t chunks = batch * heads_q * static_cast<int64_t>(len_q) * (D / 8);
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < chunks;
       e += stride) {
    const int ch = static_cast<int>(e % (D / 8));
    const int64_t row_id = e / (D / 8);
    const int i = static_cast<int>(row_id % len_q);
    const int64_t bh = row_id / len_q;
    const int h = static_cast<int>(bh % heads_q);
    const int64_t b = bh / heads_q;
    const int m = i / 64, r = i % 64, half = ch / 8;
    const float* src =
        ws + ((bh * m_blocks + m) * 2 + half) * (64 * 64) + dq_half_offset(r, (ch % 8) * 8);
    const float4 lo = *reinterpret_cast<const float4*>(src);
    const float4 hi = *reinterpret_cast<const float4*>(src + 4);
    T* const dst = static_cast<T*>(dq) + b * bs + static_cast<int64_t>(i) * ss +
                   static_cast<int64_t>(h) * hs + ch * 8;
    if (vec) {
      uint4 v;
      v.x = rudnn::cuda::tc::pack_16bit<T>(lo.x * scale, lo.y * scale);
      v.y = rudnn::cuda::tc::pack_16bit<T>(lo.z * scale, lo.w * scale);
      v.z = rudnn::cuda::tc::pack_16bit<T>(hi.x * scale, hi.y * scale);
      v.w = rudnn::cuda::tc::pack_16bit<T>(hi.z * scale, hi.w * scale);
      *reinterpret_cast<uint4*>(dst) = v;
    } else {
      const float x[8] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
#pragma unroll
      for (int c = 0; c < 8; ++c) dst[c] = from_float<T>(x[c] * scale);
    }
  }
}

}  // namespace rudnn::attn::cuda::hopper
