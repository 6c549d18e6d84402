// The sm_90a GEMM kernel with the ping-pong schedule: the same pieces as the cooperative
// kernel (hopper_gemm.cuh: TMA producer warpgroup, wgmma consumers, persistent scheduler,
// OutputTile epilogue), scheduled so that the tensor cores do not idle through epilogues.
//
//   tiles      each consumer warpgroup owns a whole tile of kBlockM x kBlockN (64 x 192/256 or
//              128 x 128: 96-128 FP32 accumulators a thread, kBlockM / 64 wgmma m64nBN per
//              16-deep k step) instead of half of a 128-row tile. A block's tiles (from the
//              persistent scheduler, in its order) alternate between the two consumers:
//              local tile i belongs to consumer i % 2.
//   producer   one thread loads every tile's k-blocks in tile order into one ring of stages
//              (produce_k_blocks, the cooperative kernel's producer); a stage is read by one
//              consumer only, so its `empty` barrier counts that consumer's 4 warps.
//   order      two named barriers pass a token: consumer c waits on kOrderBarrier + c (bar.sync,
//              256 threads) before issuing its tile's MMAs, and once it has issued the last of
//              them it lets the other go (bar.arrive on the other's id). So the mainloops run
//              one after the other, back to back on the tensor cores, and each consumer's
//              epilogue (and the wait for its last MMAs) overlaps the other's mainloop:
//
//                consumer 0:  [mainloop t0][epi t0]   [mainloop t2][epi t2] ...
//                consumer 1:               [mainloop t1][epi t1]   [mainloop t3] ...
//
//              A consumer skips the other's tiles in the ring by their k-block counts (the
//              same for every tile of a dense problem; per group otherwise). The token is only
//              passed when the block has a next tile, so no barrier is left half-arrived.
//   registers  setmaxnreg: producer 40, consumers 232 (as the cooperative kernel).
//   clusters   optional pairs along M (args.cluster_m = 2): the two blocks of a cluster take
//              vertically adjacent tiles of the same columns, unit for unit, and each producer
//              loads its own A and half of B, multicast into both blocks (produce_k_blocks,
//              shared with the cooperative kernel), so B crosses L2 -> SM once per pair. A
//              stage's `empty` barrier then counts the reading consumer's warps of both blocks.
//              Not with split K (the host refuses the pair).
//
// Grouped K zeroes the group's k-tail as the cooperative kernel does, with the 128 threads of
// the consumer that reads the stage (named barrier kTailBarrier + c).
//
// Split K (args.splits > 1, dense only: for shapes with fewer tiles than SMs): the units of
// work are (tile, split) pairs, split-major; split s of a tile runs k-blocks [s kb / S,
// (s + 1) kb / S). Split 0 stores its FP32 accumulators to the tile's slot of args.partials;
// split s waits for the tile's semaphore to say s (call_id << 32 | s, released by split s - 1),
// adds the slot to its accumulators, and stores the sum back, or, being the last, runs the
// epilogue. The order of the additions is fixed, so results are deterministic. It relies on
// every block of the persistent grid being resident (one per SM), as stream-K schedules do.
#pragma once

#include <cuda.h>

#include <cstdint>

#include "gemm/hopper_gemm.cuh"

namespace rudnn::gemm::kernels {

template <class T, int kBlockM_, int kBlockN_, bool kAKMajor, bool kBKMajor>
struct PingpongTraits {
  static constexpr int kBlockM = kBlockM_;  // rows of one consumer's tile
  static constexpr int kBlockN = kBlockN_;
  static constexpr int kBlockK = 64;  // 128 bytes of 16-bit elements: one swizzle span
  static constexpr tc::Major kMajorA = kAKMajor ? tc::Major::K : tc::Major::MN;
  static constexpr tc::Major kMajorB = kBKMajor ? tc::Major::K : tc::Major::MN;
  static constexpr int kConsumers = 2;
  static constexpr int kThreads = 128 * (1 + kConsumers);
  static constexpr int kFragments = kBlockM / 64;  // m64 slices of a consumer's tile
  static constexpr int kATileBytes = kBlockM * kBlockK * 2;
  static constexpr int kBTileBytes = kBlockN * kBlockK * 2;
  static constexpr int kStageBytes = kATileBytes + kBTileBytes;
  static constexpr int kMaxGroups = 1024;
  static constexpr int kMaxStages = 8;
  static constexpr int kFixedBytes = 1024 + kMaxGroups * 4 + 2 * kMaxStages * 8;
  static constexpr int kStagesFit = (227 * 1024 - kFixedBytes) / kStageBytes;
  static constexpr int kStages = kStagesFit > kMaxStages ? kMaxStages : kStagesFit;
  static constexpr int kSharedBytes = kFixedBytes + kStages * kStageBytes;
  static constexpr uint32_t kProducerRegisters = 40;
  static constexpr uint32_t kConsumerRegisters = 232;
  static constexpr int kBandM = 1024 / kBlockM;  // bands of 1024 rows, as the cooperative kernel
  static constexpr uint32_t kOrderBarrier = 2;   // ids 2, 3: consumer c may issue its MMAs
  static constexpr uint32_t kTailBarrier = 4;    // ids 4, 5: consumer c's own 128 threads
  static_assert(kBlockM == 64 || kBlockM == 128);
  static_assert(kBlockN % 64 == 0 && kBlockN <= 256);
  static_assert(kFragments * kBlockN / 2 <= 128, "accumulators beyond the consumers' registers");
  static_assert(kStages >= 3, "too few pipeline stages fit");
};

// `ring` moved on by n stages.
template <int kStages>
__device__ __forceinline__ void ring_skip(tc::RingPosition<kStages>& ring, int n) {
  const int total = ring.stage + n;
  ring.stage = total % kStages;
  ring.phase ^= static_cast<uint32_t>((total / kStages) & 1);
}

// Split-K hand-over between blocks: a 64-bit flag in global memory, released at GPU scope by
// one thread after its warpgroup's partial sums are stored, acquired by one thread of the
// next split's warpgroup (then a named barrier lets the others read).
__device__ __forceinline__ unsigned long long load_acquire_gpu(const unsigned long long* p) {
  unsigned long long v;
  asm volatile("ld.acquire.gpu.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ void store_release_gpu(unsigned long long* p, unsigned long long v) {
  asm volatile("st.release.gpu.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}

// A unit of work: split `split` of the scheduler's tile `tile`, numbered split-major so that
// every tile's split s - 1 comes before its split s (in this block or an earlier-numbered
// unit of another: the hand-over never waits on work queued behind the waiter).
struct SplitUnit {
  int tile, split;
  // The first k-block of this split among a tile's `k_blocks` (split `splits` = the end).
  __device__ __forceinline__ int k_block(int k_blocks, int s, int splits) const {
    return static_cast<int>(int64_t{k_blocks} * s / splits);
  }
};
__device__ __forceinline__ SplitUnit split_unit(int unit, int tiles) {
  const int split = unit / tiles;
  return SplitUnit{unit - split * tiles, split};
}

template <class T, class Traits, class Activation>
__global__ void __launch_bounds__(Traits::kThreads, 1)
    hopper_pingpong_kernel(const __grid_constant__ CUtensorMap map_a,
                           const __grid_constant__ CUtensorMap map_b, const GemmArgs args,
                           const Activation act) {
#if RUDNN_TC_SM90A
  constexpr int BM = Traits::kBlockM, BN = Traits::kBlockN, BK = Traits::kBlockK;
  constexpr int S = Traits::kStages;
  constexpr int F = Traits::kFragments;
  constexpr tc::OperandTile a_tile{Traits::kMajorA, 128, BM, BK};
  constexpr tc::OperandTile b_tile{Traits::kMajorB, 128, BN, BK};

  extern __shared__ uint8_t shared_raw[];
  uint8_t* shared = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(shared_raw) + 1023) &
                                               ~uintptr_t{1023});
  uint8_t* a_tiles = shared;                            // S x kATileBytes
  uint8_t* b_tiles = shared + S * Traits::kATileBytes;  // S x kBTileBytes
  uint64_t* full = reinterpret_cast<uint64_t*>(shared + S * Traits::kStageBytes);
  uint64_t* empty = full + S;
  int* scheduler_table = reinterpret_cast<int*>(full + 2 * Traits::kMaxStages);

  // Clusters of `cluster` (1 or 2) blocks along M, as in the cooperative kernel: the blocks of
  // a cluster walk the same units with the same consumer alternation, block `rank` taking the
  // rank-th BM-row half of a 2 BM x BN super tile; B is multicast, each block loading half.
  const int cluster = args.cluster_m;
  const uint32_t rank = cluster > 1 ? tc::cluster_ctarank() : 0u;

  if (threadIdx.x == 0) {
    for (int s = 0; s < S; ++s) {
      tc::mbarrier_init(&full[s], 1);
      // The warps of the one consumer reading the stage, in every block of the cluster.
      tc::mbarrier_init(&empty[s], 4u * static_cast<uint32_t>(cluster));
    }
    tc::fence_barrier_init();
    tc::tma_prefetch_map(&map_a);
    tc::tma_prefetch_map(&map_b);
  }
  const int n_tiles = static_cast<int>(ceil_div(args.n, BN));
  tc::PersistentTileScheduler<Traits::kMaxGroups> scheduler;
  scheduler.build(
      args.groups,
      [&](int g) {
        const GroupView v = group_view(args, g);
        return static_cast<int>(ceil_div(v.m, BM * cluster) * n_tiles);
      },
      scheduler_table);  // synchronises the block: the barriers are initialised
  if (cluster > 1) tc::cluster_sync();  // and the peer's

  auto locate = [&](int tile, GroupView& view, int& m_tile, int& n_tile) {
    const int g = scheduler.group_of(tile);
    view = group_view(args, g);
    const int local = tile - scheduler.group_start(g);
    const int super_rows = static_cast<int>(ceil_div(view.m, BM * cluster));
    const tc::TileCoord at =
        cluster > 1 ? tc::banded_coord<Traits::kBandM / 2>(g, local, super_rows, n_tiles)
                    : tc::banded_coord<Traits::kBandM>(g, local, super_rows, n_tiles);
    m_tile = at.m_tile * cluster + static_cast<int>(rank);
    n_tile = at.n_tile;
    return g;
  };
  const int first = static_cast<int>(blockIdx.x) / cluster;
  const int stride = static_cast<int>(gridDim.x) / cluster;
  const int splits = args.splits > 1 ? args.splits : 1;
  const int units = scheduler.total_tiles * splits;
  const int warpgroup = threadIdx.x / 128;

  if (warpgroup == 0) {
    // ---- Producer ----
    tc::warpgroup_release_registers<Traits::kProducerRegisters>();
    if (threadIdx.x == 0) {
      tc::RingPosition<S> ring;
      for (int unit = first; unit < units; unit += stride) {
        int m_tile, n_tile;
        GroupView view;
        const SplitUnit u = split_unit(unit, scheduler.total_tiles);
        const int g = locate(u.tile, view, m_tile, n_tile);
        const int m0 = static_cast<int>(view.row0) + m_tile * BM;
        const int n0 = n_tile * BN;
        const int b_group = (args.offsets != nullptr && !args.grouped_k) ? g : 0;
        const int all_blocks = static_cast<int>(ceil_div(view.k, BK));
        produce_k_blocks<Traits>(ring, &map_a, &map_b, full, empty, a_tiles, b_tiles, m0, n0,
                                 b_group, static_cast<int>(view.k0),
                                 u.k_block(all_blocks, u.split, splits),
                                 u.k_block(all_blocks, u.split + 1, splits), cluster, rank);
      }
    }
  } else {
    // ---- Consumers ----
    tc::warpgroup_claim_registers<Traits::kConsumerRegisters>();
    const int consumer = warpgroup - 1;
    const int consumer_tid = threadIdx.x - 128 * warpgroup;
    const int warp = (threadIdx.x / 32) % 4;
    const int lane = threadIdx.x % 32;
    // A stage is free again once the warps reading it, in every block of the cluster, are done
    // (the peer's half of B was multicast into it).
    auto release = [&](int stage) { release_stage(empty, stage, lane, cluster); };
    float acc[F][BN / 2];
    tc::RingPosition<S> ring;
    const uint32_t smem = (tc::shared_address(shared_raw) + 1023u) & ~1023u;
    const uint32_t full_addr = smem + S * Traits::kStageBytes;
    const uint64_t desc_a0 = tc::make_descriptor(smem, a_tile.lbo(), a_tile.sbo(), 128);
    const uint64_t desc_b0 =
        tc::make_descriptor(smem + S * Traits::kATileBytes, b_tile.lbo(), b_tile.sbo(), 128);

    int local = 0;  // this block's unit count so far: unit `local` is consumer local % 2's
    for (int unit = first; unit < units; unit += stride, ++local) {
      int m_tile, n_tile;
      GroupView view;
      const SplitUnit u = split_unit(unit, scheduler.total_tiles);
      locate(u.tile, view, m_tile, n_tile);
      const int all_blocks = static_cast<int>(ceil_div(view.k, BK));
      const int kb_begin = u.k_block(all_blocks, u.split, splits);
      const int k_blocks = u.k_block(all_blocks, u.split + 1, splits) - kb_begin;
      if ((local & 1) != consumer) {
        ring_skip(ring, k_blocks);  // the other consumer's k-blocks
        continue;
      }
      if (local > 0) tc::named_barrier_sync(Traits::kOrderBarrier + consumer, 256);
      int held_stage = -1;  // the stage whose MMAs may still run
      for (int kb = 0; kb < k_blocks; ++kb) {
        tc::mbarrier_wait(full_addr + 8 * ring.stage, ring.phase);
        const int64_t k_left = view.k - int64_t{kb_begin + kb} * BK;
        if (args.grouped_k && k_left < BK) {
          // The group's last k-block reaches into the next group's rows: zero them in both.
          zero_k_tail<Traits::kMajorA, BM>(a_tiles + ring.stage * Traits::kATileBytes,
                                           static_cast<int>(k_left), consumer_tid, 128);
          zero_k_tail<Traits::kMajorB, BN>(b_tiles + ring.stage * Traits::kBTileBytes,
                                           static_cast<int>(k_left), consumer_tid, 128);
          tc::fence_proxy_async_shared();
          tc::named_barrier_sync(Traits::kTailBarrier + consumer, 128);
        }
        const uint64_t desc_a = tc::advance_descriptor(
            desc_a0, static_cast<uint32_t>(ring.stage * Traits::kATileBytes));
        const uint64_t desc_b = tc::advance_descriptor(
            desc_b0, static_cast<uint32_t>(ring.stage * Traits::kBTileBytes));
#pragma unroll
        for (int f = 0; f < F; ++f) tc::fence_operand(acc[f]);
        tc::wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < BK / 16; ++kk) {
#pragma unroll
          for (int f = 0; f < F; ++f)
            tc::Wgmma<T, BN>::template ss<Traits::kMajorA, Traits::kMajorB>(
                acc[f], tc::advance_descriptor(desc_a, a_tile.start(64 * f, 16 * kk)),
                tc::advance_descriptor(desc_b, b_tile.start(0, 16 * kk)),
                (kb > 0 || kk > 0) ? 1u : 0u);
        }
        tc::wgmma_commit();
#pragma unroll
        for (int f = 0; f < F; ++f) tc::fence_operand(acc[f]);
        tc::wgmma_wait<1>();
        if (held_stage >= 0) release(held_stage);
        held_stage = ring.stage;
        ring.advance();
      }
      // Every MMA of this tile is issued: the block's next tile (the other consumer's) may
      // queue its MMAs behind ours while we finish and store.
      if (unit + stride < units)
        tc::named_barrier_arrive(Traits::kOrderBarrier + (consumer ^ 1), 256);
      tc::wgmma_wait<0>();
#pragma unroll
      for (int f = 0; f < F; ++f) tc::fence_operand(acc[f]);
      if (held_stage >= 0) release(held_stage);
      if (k_blocks == 0) {
#pragma unroll
        for (int f = 0; f < F; ++f)
#pragma unroll
          for (int i = 0; i < BN / 2; ++i) acc[f][i] = 0.0f;
      }

      if (splits > 1) {
        // Split K: the sum of splits 0 .. s - 1 waits in `partials` (this thread's values,
        // float4 by float4, interleaved over the warpgroup's 128 threads so that a warp's
        // accesses are contiguous); add it in split order (deterministic), then hand the sum
        // on, or store D when this is the last split. L2 accesses only (__ldcg / __stcg): the
        // partials were written by other SMs.
        constexpr int kVectors = F * BN / 8;
        float4* slot = reinterpret_cast<float4*>(args.partials) +
                       static_cast<int64_t>(u.tile) * kVectors * 128 + consumer_tid;
        unsigned long long* flag = args.semaphores + u.tile;
        const unsigned long long base = args.call_id << 32;
        if (u.split > 0) {
          if (consumer_tid == 0) {
            while (load_acquire_gpu(flag) != base + static_cast<unsigned long long>(u.split)) {
            }
          }
          tc::named_barrier_sync(Traits::kTailBarrier + consumer, 128);
#pragma unroll
          for (int f = 0; f < F; ++f)
#pragma unroll
            for (int v = 0; v < BN / 8; ++v) {
              const float4 q = __ldcg(slot + (f * (BN / 8) + v) * 128);
              acc[f][4 * v] += q.x;
              acc[f][4 * v + 1] += q.y;
              acc[f][4 * v + 2] += q.z;
              acc[f][4 * v + 3] += q.w;
            }
        }
        const bool last = u.split + 1 == splits;
        if (!last) {
#pragma unroll
          for (int f = 0; f < F; ++f)
#pragma unroll
            for (int v = 0; v < BN / 8; ++v)
              __stcg(slot + (f * (BN / 8) + v) * 128,
                     make_float4(acc[f][4 * v], acc[f][4 * v + 1], acc[f][4 * v + 2],
                                 acc[f][4 * v + 3]));
        }
        tc::named_barrier_sync(Traits::kTailBarrier + consumer, 128);
        if (consumer_tid == 0) {
          // The last split leaves a value no split of this call waits for: a later call with
          // the same id (a replayed graph) starts from it.
          __threadfence();
          store_release_gpu(flag,
                            base + static_cast<unsigned long long>(last ? splits : u.split + 1));
        }
        if (!last) continue;
      }

      const OutputTile<T, Activation> out(args, view, act);
      const int64_t col = int64_t{n_tile} * BN + 2 * (lane % 4);
      // One slice at a time through acc[0] (the next slice moved down after each store), so
      // that the epilogue's code exists once rather than once per slice (instruction cache).
#pragma unroll 1
      for (int f = 0; f < F; ++f) {
        const int64_t row = int64_t{m_tile} * BM + 64 * f + warp * 16 + lane / 4;
        out.template store_wgmma_fragment<BN>(
            acc[0],
            [&](int p) {
              return PairAt{row + 8 * (p & 1), col + 8 * (p >> 1)};
            },
            row, col, lane);
#pragma unroll
        for (int s = 0; s + 1 < F; ++s)
#pragma unroll
          for (int i = 0; i < BN / 2; ++i) acc[s][i] = acc[s + 1][i];
      }
    }
  }
  __syncwarp();
  // No block leaves while a peer may still arrive on its barriers or multicast into it.
  if (cluster > 1) tc::cluster_sync();
#elif defined(__CUDA_ARCH__)
  __trap();  // built without sm_90a: the host never launches this (hopper_kernel_usable)
#endif
}

}  // namespace rudnn::gemm::kernels
