// The sm_90a GEMM kernel: persistent and warp-specialised, assembled from the tensor-core
// layer (docs/tensor_cores.md walks through it):
//
//   scheduler  PersistentTileScheduler over every group's 128 x BN output tiles (dense = one
//              group), banded rasterization; producer and consumers walk the same sequence.
//   mainloop   warpgroup 0 = producer: after giving registers back (setmaxnreg 40), one
//              thread issues the TMA loads of each 64-deep k-block of A (128 x 64) and B
//              (BN x 64) into a ring of kStages stages (128-byte swizzle, K- or MN-major as
//              the operands lie in memory), counted on the stage's `full` barrier.
//              Warpgroups 1 and 2 = consumers (setmaxnreg 232): each owns 64 rows of the tile
//              and issues 4 wgmma m64nBNk16 per k-block, keeps one k-block in flight
//              (wgmma_wait<1>) and frees the stage before it on its `empty` barrier.
//   epilogue   the consumers apply OutputTile (alpha, scales, bias, beta * C, activation) to
//              their FP32 accumulators in registers; meanwhile the producer is already filling
//              the ring with the next tile's k-blocks. Then, where args.tma_store (dense, D in
//              T, aligned), each consumer writes its 64 rows to a shared staging slab by slab
//              and TMA stores them (store_tile_tma): the last slab's global writes run under
//              the next tile's mainloop. Otherwise D is stored from registers.
//
// Addressing. TMA zero-fills what lies outside a tensor, so tiles past M, N or K need no
// masking on load: A's map covers all rows (grouped M: every group's; a tile that runs into
// the next group's rows computes rows the epilogue then skips), B's map is 3-D with the group
// as outer dimension. Grouped K: a group's last k-block runs into the next group's rows of A
// and B, which are real data; the consumers zero those rows of both tiles in shared memory
// (generic stores, proxy fence, consumer barrier) before the MMAs of that k-block.
#pragma once

#include <cuda.h>

#include <cstdint>

#include "cuda/tensor_core/arch.cuh"
#include "cuda/tensor_core/pipeline.cuh"
#include "cuda/tensor_core/tile_scheduler.cuh"
#include "cuda/tensor_core/tma.cuh"
#include "cuda/tensor_core/wgmma.cuh"
#include "gemm/epilogue.cuh"
#include "gemm/problem.cuh"

namespace rudnn::gemm::kernels {

namespace tc = cuda::tc;

template <class T, int kBlockN_, bool kAKMajor, bool kBKMajor>
struct HopperTraits {
  static constexpr int kBlockM = 128;
  static constexpr int kBlockN = kBlockN_;
  static constexpr int kBlockK = 64;  // 128 bytes of 16-bit elements: one swizzle span
  static constexpr tc::Major kMajorA = kAKMajor ? tc::Major::K : tc::Major::MN;
  static constexpr tc::Major kMajorB = kBKMajor ? tc::Major::K : tc::Major::MN;
  static constexpr int kConsumers = 2;  // warpgroups, 64 rows each
  static constexpr int kThreads = 128 * (1 + kConsumers);
  static constexpr int kATileBytes = kBlockM * kBlockK * 2;
  static constexpr int kBTileBytes = kBlockN * kBlockK * 2;
  static constexpr int kStageBytes = kATileBytes + kBTileBytes;
  static constexpr int kMaxGroups = 1024;
  // The TMA-store epilogue's staging: per consumer, 64 rows x 64 columns of D (one 128-byte
  // swizzle span a row), stored one column slab at a time.
  static constexpr int kEpilogueBytes = kConsumers * 64 * 64 * 2;
  // Alignment slack (the tiles start on 1024 bytes), the staging, the scheduler's table, up to
  // 2 x 8 barriers; as many stages as fit beside them in the 227 KB a block may opt into, at
  // most 6 (the staging costs no stage at any width: 4, 5, 6 stages at BN 256, 192, 128).
  static constexpr int kFixedBytes = 1024 + kEpilogueBytes + kMaxGroups * 4 + 16 * 8;
  static constexpr int kStagesFit = (227 * 1024 - kFixedBytes) / kStageBytes;
  static constexpr int kStages = kStagesFit > 6 ? 6 : kStagesFit;
  static constexpr int kSharedBytes = kFixedBytes + kStages * kStageBytes;
  static constexpr uint32_t kProducerRegisters = 40;
  static constexpr uint32_t kConsumerRegisters = 232;
  static constexpr int kBandM = 8;
  static constexpr uint32_t kConsumerBarrier = 1;  // named barrier of the 256 consumer threads
  static constexpr uint32_t kEpilogueBarrier = 2;  // ids 2, 3: consumer c's 128 threads
  static_assert(kBlockN % 64 == 0 && kBlockN <= 256);
  static_assert(kStages >= 3, "too few pipeline stages fit");
};

// Zeroes the elements with k >= k_valid of a 128-byte-swizzled operand tile of kMN x 64
// (OperandTile{kMajor, 128, kMN, 64}); threads tid = 0 .. nthreads - 1 share the work.
template <tc::Major kMajor, int kMN>
__device__ __forceinline__ void zero_k_tail(uint8_t* tile, int k_valid, int tid, int nthreads) {
  if constexpr (kMajor == tc::Major::K) {
    // Row r (128 bytes) holds k = 0..63 as 8 chunks of 8; logical chunk c sits at c ^ (r % 8).
    for (int i = tid; i < kMN * 8; i += nthreads) {
      const int r = i >> 3, c = i & 7, k_begin = c * 8;
      if (k_begin + 8 <= k_valid) continue;
      uint8_t* chunk = tile + tc::swizzle_offset(static_cast<uint32_t>(r * 128 + c * 16), 128);
      if (k_begin >= k_valid) {
        *reinterpret_cast<uint4*>(chunk) = make_uint4(0, 0, 0, 0);
      } else {
        for (int e = k_valid - k_begin; e < 8; ++e) reinterpret_cast<uint16_t*>(chunk)[e] = 0;
      }
    }
  } else {
    // Slab j (kMN / 64 of them, 8 KB each) holds row k at k * 128 bytes; a whole row is zeroed,
    // so the swizzle within the row does not matter.
    const int rows = 64 - k_valid;
    for (int i = tid; i < (kMN / 64) * rows * 8; i += nthreads) {
      const int slab = i / (rows * 8), rest = i % (rows * 8);
      const int k = k_valid + rest / 8, c = rest % 8;
      *reinterpret_cast<uint4*>(tile + slab * 8192 + k * 128 + c * 16) = make_uint4(0, 0, 0, 0);
    }
  }
}

// The TMA-store epilogue of one consumer's 64 x BN block of a tile: the values (the wgmma
// m64nBN fragment, epilogue already applied) go to D as bf16/f16 through `staging` (64 x 64,
// 128-byte swizzled, 1024-byte aligned) one 64-column slab at a time: wait until the previous
// slab's store has read the staging, write this slab (the swizzle puts a warp's 8 rows of 16
// bytes in distinct banks), fence it for the async proxy, and one thread issues the store of
// the box at (row0, col0 + 64 slab). The last store is left running: the next tile's
// mainloop starts under it. TMA clips what lies past D's m x n. `barrier`: a named barrier
// of the 128 threads.
template <class T, int kBlockN>
__device__ __forceinline__ void store_tile_tma(const float (&v)[kBlockN / 2], uint8_t* staging,
                                               const CUtensorMap* map_d, int row0, int col0,
                                               int tid, uint32_t barrier) {
  const int warp = tid / 32, lane = tid % 32;
#pragma unroll
  for (int slab = 0; slab < kBlockN / 64; ++slab) {
    if (tid == 0) tc::tma_store_wait_read<0>();
    tc::named_barrier_sync(barrier, 128);
#pragma unroll
    for (int jj = 0; jj < 8; ++jj) {
      const int j = slab * 8 + jj;
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const uint32_t r = static_cast<uint32_t>(warp * 16 + lane / 4 + 8 * h);
        const uint32_t c = static_cast<uint32_t>(jj * 8 + 2 * (lane % 4));
        *reinterpret_cast<unsigned*>(staging + tc::swizzle_offset(r * 128 + c * 2, 128)) =
            cuda::pack_pair<T>(v[4 * j + 2 * h], v[4 * j + 2 * h + 1]);
      }
    }
    tc::fence_proxy_async_shared();
    tc::named_barrier_sync(barrier, 128);
    if (tid == 0) {
      tc::tma_store(map_d, staging, col0 + 64 * slab, row0);
      tc::tma_store_commit();
    }
  }
}

// Where k-block kb of a tile lies in B's 3-D map: the k coordinate and the outer (group)
// coordinate.
struct KBlockAt {
  int k, group;
};

// A-operand loaders: how the producer finds k-block kb of A for the tile at rows m0.. and
// the matching coordinates of B. TiledALoader is the GEMM's: A's 2-D map (K- or MN-major),
// k0 = k0_base + 64 kb, B's group as given. (ImplicitConvALoader: the convolution's.)
struct TiledALoader {
  __device__ __forceinline__ KBlockAt k_block(int k0_base, int kb, int b_group) const {
    return {k0_base + kb * 64, b_group};
  }
  template <class Traits>
  __device__ __forceinline__ void load_a(uint8_t* as, const CUtensorMap* map_a, uint64_t* bar,
                                         int m0, int, KBlockAt at) const {
    constexpr int BM = Traits::kBlockM;
    if constexpr (Traits::kMajorA == tc::Major::K) {
      tc::tma_load(as, map_a, bar, at.k, m0);
    } else {
#pragma unroll
      for (int j = 0; j < BM / 64; ++j) tc::tma_load(as + j * 8192, map_a, bar, m0 + 64 * j, at.k);
    }
  }
};

// The implicit-GEMM convolution's A (K-major): the reduction runs over taps (x fastest, as a
// KRSC weight lies) x blocks of 64 channels, so k-block kb is tap kb / c_blocks, channels
// 64 (kb % c_blocks) ... Its A tile is one box of the channels-last input's 5-D map
// {C, X, Y, Z, N} (box 64 x tile[0] stride[0] x ... x tile[3], traversed by the stride: the
// map's element strides), at the tile's first output pixel moved to the tap: x0 stride +
// tx dilation - pad. TMA zero-fills what lies outside the input (negative coordinates
// included), so the padding and the channels past C cost nothing. B is the weight as the
// GEMM's K-major [K, taps x C]: the k-block starts at k = tap C + 64 (kb % c_blocks).
struct ImplicitConvALoader {
  ConvTiling t;
  int stride[3], dilation[3], pad[3];  // x, y, z
  int kernel[2];                       // taps along x, y (z is the rest)
  int c_blocks;                        // ceil(C / 64)
  int channels;                        // C

  __device__ __forceinline__ KBlockAt k_block(int, int kb, int) const {
    return {(kb / c_blocks) * channels + (kb % c_blocks) * 64, 0};
  }
  template <class Traits>
  __device__ __forceinline__ void load_a(uint8_t* as, const CUtensorMap* map_a, uint64_t* bar,
                                         int m0, int kb, KBlockAt) const {
    static_assert(Traits::kMajorA == tc::Major::K && Traits::kBlockM == 128);
    const ConvTiling::Origin o = t.origin(m0 / 128);
    const int tap = kb / c_blocks, c0 = (kb % c_blocks) * 64;
    const int tx = tap % kernel[0], ty = tap / kernel[0] % kernel[1];
    const int tz = tap / (kernel[0] * kernel[1]);
    tc::tma_load(as, map_a, bar, c0, o.x * stride[0] + tx * dilation[0] - pad[0],
                 o.y * stride[1] + ty * dilation[1] - pad[1],
                 o.z * stride[2] + tz * dilation[2] - pad[2], o.n);
  }
};

// A consumer warp's arrival on the `empty` barrier of `stage` once its MMAs reading the stage
// are done: on this block's barrier, or with clusters of two along M on both blocks' (the
// peer multicast its half of B into this stage). Lane 0 arrives for the warp.
__device__ __forceinline__ void release_stage(uint64_t* empty, int stage, int lane, int cluster) {
  if (lane != 0) return;
  if (cluster == 1) {
    tc::mbarrier_arrive(&empty[stage]);
  } else {
    tc::mbarrier_arrive_cluster(&empty[stage], 0);
    tc::mbarrier_arrive_cluster(&empty[stage], 1);
  }
}

// The producer's loads of k-blocks [kb_begin, kb_end) of one output tile (rows m0.., columns
// n0.., B's group b_group, K starting at k0_base) into the ring, shared by the cooperative and
// the ping-pong kernels (the Traits name the same members). Each k-block waits for its stage
// to be free, announces the whole stage's bytes on its `full` barrier and loads this block's A
// tile (through `loader`); B is loaded whole, or, in clusters of two along M, as this block's
// half multicast to both blocks (so the `full` barrier of each block counts both halves). One
// thread calls it.
template <class Traits, class ALoader = TiledALoader>
__device__ __forceinline__ void produce_k_blocks(tc::RingPosition<Traits::kStages>& ring,
                                                 const CUtensorMap* map_a,
                                                 const CUtensorMap* map_b, uint64_t* full,
                                                 uint64_t* empty, uint8_t* a_tiles,
                                                 uint8_t* b_tiles, int m0, int n0, int b_group_in,
                                                 int k0_base, int kb_begin, int kb_end,
                                                 int cluster, uint32_t rank,
                                                 const ALoader& loader = ALoader{}) {
  constexpr int BN = Traits::kBlockN;
  for (int kb = kb_begin; kb < kb_end; ++kb) {
    const KBlockAt at = loader.k_block(k0_base, kb, b_group_in);
    const int k0 = at.k, b_group = at.group;
    uint64_t* bar = &full[ring.stage];
    uint8_t* as = a_tiles + ring.stage * Traits::kATileBytes;
    uint8_t* bs = b_tiles + ring.stage * Traits::kBTileBytes;
    tc::mbarrier_wait(&empty[ring.stage], ring.phase ^ 1u);
    tc::mbarrier_arrive_expect_bytes(bar, Traits::kStageBytes);
    loader.template load_a<Traits>(as, map_a, bar, m0, kb, at);
    if (cluster == 1) {
      if constexpr (Traits::kMajorB == tc::Major::K) {
        tc::tma_load(bs, map_b, bar, k0, n0, b_group);
      } else {
#pragma unroll
        for (int j = 0; j < BN / 64; ++j)
          tc::tma_load(bs + j * 8192, map_b, bar, n0 + 64 * j, k0, b_group);
      }
    } else if constexpr (Traits::kMajorB == tc::Major::K) {
      // Rows [rank * BN / 2, (rank + 1) * BN / 2) of B (the map's box is BN / 2 rows).
      constexpr int kHalf = BN / 2;
      tc::tma_load_multicast(bs + rank * kHalf * 128, map_b, bar, uint16_t{0b11}, k0,
                             n0 + static_cast<int>(rank) * kHalf, b_group);
    } else {
      // Slabs [rank * BN / 128, (rank + 1) * BN / 128) of the BN / 64.
      static_assert(Traits::kMajorB == tc::Major::K || BN % 128 == 0);
#pragma unroll
      for (int i = 0; i < BN / 128; ++i) {
        const int j = static_cast<int>(rank) * (BN / 128) + i;
        tc::tma_load_multicast(bs + j * 8192, map_b, bar, uint16_t{0b11}, n0 + 64 * j, k0,
                               b_group);
      }
    }
    ring.advance();
  }
}

// ALoader: how A's k-blocks are found (TiledALoader: the GEMM's 2-D map); RowMap: which row
// of D each row of the tile grid is (IdentityRows for the GEMM). The convolution runs this
// kernel with ImplicitConvALoader and ConvRows (args.m: its tiles x 128, args.k: its k-blocks
// x 64, no TMA store).
template <class T, class Traits, class Activation, class ALoader = TiledALoader,
          class RowMap = IdentityRows>
__global__ void __launch_bounds__(Traits::kThreads, 1)
    hopper_gemm_kernel(const __grid_constant__ CUtensorMap map_a,
                       const __grid_constant__ CUtensorMap map_b,
                       const __grid_constant__ CUtensorMap map_d, const ALoader a_loader,
                       const RowMap row_map, const GemmArgs args, const Activation act) {
#if RUDNN_TC_SM90A
  constexpr int BM = Traits::kBlockM, BN = Traits::kBlockN, BK = Traits::kBlockK;
  constexpr int S = Traits::kStages;
  constexpr tc::OperandTile a_tile{Traits::kMajorA, 128, BM, BK};
  constexpr tc::OperandTile b_tile{Traits::kMajorB, 128, BN, BK};

  extern __shared__ uint8_t shared_raw[];
  uint8_t* shared = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(shared_raw) + 1023) &
                                               ~uintptr_t{1023});
  uint8_t* a_tiles = shared;                            // S x kATileBytes
  uint8_t* b_tiles = shared + S * Traits::kATileBytes;  // S x kBTileBytes
  uint8_t* staging = shared + S * Traits::kStageBytes;  // kEpilogueBytes
  uint64_t* full =
      reinterpret_cast<uint64_t*>(shared + S * Traits::kStageBytes + Traits::kEpilogueBytes);
  uint64_t* empty = full + S;
  int* scheduler_table = reinterpret_cast<int*>(empty + S);

  // Clusters of `cluster` (1 or 2) blocks along M: the blocks of a cluster take the two
  // 128-row halves of a 256 x BN "super tile" (same group, same N columns), each loads its own
  // A and half of B, multicast into both, so B crosses L2 once per pair.
  const int cluster = args.cluster_m;
  const uint32_t rank = cluster > 1 ? tc::cluster_ctarank() : 0u;
  const int cluster_id = static_cast<int>(blockIdx.x) / cluster;
  const int clusters = static_cast<int>(gridDim.x) / cluster;

  if (threadIdx.x == 0) {
    for (int s = 0; s < S; ++s) {
      tc::mbarrier_init(&full[s], 1);
      // One arrival per consumer warp of every block whose loads write this block's stage.
      tc::mbarrier_init(&empty[s], static_cast<uint32_t>(Traits::kConsumers * 4 * cluster));
    }
    tc::fence_barrier_init();
    tc::tma_prefetch_map(&map_a);
    tc::tma_prefetch_map(&map_b);
    if (args.tma_store) tc::tma_prefetch_map(&map_d);
  }
  const int n_tiles = static_cast<int>(ceil_div(args.n, BN));
  tc::PersistentTileScheduler<Traits::kMaxGroups> scheduler;
  scheduler.build(
      args.groups,
      [&](int g) {
        const GroupView v = group_view(args, g);
        return static_cast<int>(ceil_div(v.m, BM * cluster) * n_tiles);
      },
      scheduler_table);
  if (cluster > 1) tc::cluster_sync();  // the peer's barriers are initialised

  // The group, view and this block's (m_tile, n_tile) of scheduler tile `tile`.
  auto locate = [&](int tile, int& g, GroupView& view, int& m_tile, int& n_tile) {
    g = scheduler.group_of(tile);
    view = group_view(args, g);
    const int local = tile - scheduler.group_start(g);
    const int super_rows = static_cast<int>(ceil_div(view.m, BM * cluster));
    const tc::TileCoord at =
        cluster > 1 ? tc::banded_coord<Traits::kBandM / 2>(g, local, super_rows, n_tiles)
                    : tc::banded_coord<Traits::kBandM>(g, local, super_rows, n_tiles);
    m_tile = at.m_tile * cluster + static_cast<int>(rank);
    n_tile = at.n_tile;
  };
  const int warpgroup = threadIdx.x / 128;

  if (warpgroup == 0) {
    // ---- Producer ----
    tc::warpgroup_release_registers<Traits::kProducerRegisters>();
    if (threadIdx.x == 0) {
      tc::RingPosition<S> ring;
      for (int tile = cluster_id; tile < scheduler.total_tiles; tile += clusters) {
        int g, m_tile, n_tile;
        GroupView view;
        locate(tile, g, view, m_tile, n_tile);
        const int m0 = static_cast<int>(view.row0) + m_tile * BM;
        const int n0 = n_tile * BN;
        const int b_group = (args.offsets != nullptr && !args.grouped_k) ? g : 0;
        produce_k_blocks<Traits>(ring, &map_a, &map_b, full, empty, a_tiles, b_tiles, m0, n0,
                                 b_group, static_cast<int>(view.k0), 0,
                                 static_cast<int>(ceil_div(view.k, BK)), cluster, rank,
                                 a_loader);
      }
    }
  } else {
    // ---- Consumers ----
    tc::warpgroup_claim_registers<Traits::kConsumerRegisters>();
    const int consumer = warpgroup - 1;
    const int consumer_tid = threadIdx.x - 128;
    const int warp = (threadIdx.x / 32) % 4;
    const int lane = threadIdx.x % 32;
    // A stage is free again once every consumer warp of every block reading it is done.
    auto release = [&](int stage) { release_stage(empty, stage, lane, cluster); };
    float acc[BN / 2];
#pragma unroll
    for (int i = 0; i < BN / 2; ++i) acc[i] = 0.0f;
    tc::RingPosition<S> ring;
    // Shared-memory addresses from the array's own (aligned here rather than through the
    // generic pointer, which the compiler would convert back on every k-block): the `full`
    // barriers, and stage 0's descriptors (this consumer's 64 rows of A, all of B); a stage's
    // descriptors are these moved by whole tiles, one add in the k-loop.
    const uint32_t smem = (tc::shared_address(shared_raw) + 1023u) & ~1023u;
    const uint32_t full_addr = smem + S * Traits::kStageBytes + Traits::kEpilogueBytes;
    const uint64_t desc_a0 = tc::make_descriptor(smem + a_tile.start(consumer * 64, 0),
                                                 a_tile.lbo(), a_tile.sbo(), 128);
    const uint64_t desc_b0 = tc::make_descriptor(smem + S * Traits::kATileBytes, b_tile.lbo(),
                                                 b_tile.sbo(), 128);

    for (int tile = cluster_id; tile < scheduler.total_tiles; tile += clusters) {
      int g, m_tile, n_tile;
      GroupView view;
      locate(tile, g, view, m_tile, n_tile);
      const int k_blocks = static_cast<int>(ceil_div(view.k, BK));
      int held_stage = -1;  // the stage whose MMAs may still run
      for (int kb = 0; kb < k_blocks; ++kb) {
        tc::mbarrier_wait(full_addr + 8 * ring.stage, ring.phase);
        uint8_t* as = a_tiles + ring.stage * Traits::kATileBytes;
        uint8_t* bs = b_tiles + ring.stage * Traits::kBTileBytes;
        const int64_t k_left = view.k - int64_t{kb} * BK;
        if (args.grouped_k && k_left < BK) {
          // The group's last k-block reaches into the next group's rows: zero them in both.
          zero_k_tail<Traits::kMajorA, BM>(as, static_cast<int>(k_left), consumer_tid, 256);
          zero_k_tail<Traits::kMajorB, BN>(bs, static_cast<int>(k_left), consumer_tid, 256);
          tc::fence_proxy_async_shared();
          tc::named_barrier_sync(Traits::kConsumerBarrier, 256);
        }
        const uint64_t desc_a =
            tc::advance_descriptor(desc_a0, static_cast<uint32_t>(ring.stage * Traits::kATileBytes));
        const uint64_t desc_b =
            tc::advance_descriptor(desc_b0, static_cast<uint32_t>(ring.stage * Traits::kBTileBytes));
        tc::fence_operand(acc);
        tc::wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < BK / 16; ++kk) {
          tc::Wgmma<T, BN>::template ss<Traits::kMajorA, Traits::kMajorB>(
              acc, tc::advance_descriptor(desc_a, a_tile.start(0, 16 * kk)),
              tc::advance_descriptor(desc_b, b_tile.start(0, 16 * kk)),
              (kb > 0 || kk > 0) ? 1u : 0u);
        }
        tc::wgmma_commit();
        tc::fence_operand(acc);
        // The previous k-block's MMAs are done: its stage goes back to the producer.
        tc::wgmma_wait<1>();
        if (held_stage >= 0) release(held_stage);
        held_stage = ring.stage;
        ring.advance();
      }
      tc::wgmma_wait<0>();
      tc::fence_operand(acc);
      if (held_stage >= 0) release(held_stage);
      if (k_blocks == 0) {
#pragma unroll
        for (int i = 0; i < BN / 2; ++i) acc[i] = 0.0f;
      }

      const OutputTile<T, Activation> out(args, view, act);
      // wgmma's m64nBN fragment: pair 2j + h holds row (lane / 4) + 8h, columns
      // 8j + 2 (lane % 4) + {0, 1} of this warp's 16 rows.
      // Rows of the tile grid, then of D through the row map.
      const int64_t grid_row = int64_t{m_tile} * BM + consumer * 64 + warp * 16 + lane / 4;
      const int64_t rows[2] = {row_map(grid_row), row_map(grid_row + 8)};
      const int64_t row = rows[0];
      const int64_t col = int64_t{n_tile} * BN + 2 * (lane % 4);
      auto at = [&](int p) { return PairAt{rows[p & 1], col + 8 * (p >> 1)}; };
      if (args.tma_store) {
        out.template apply_fragment<T>(acc, at);
        store_tile_tma<T, BN>(acc, staging + consumer * (64 * 64 * 2), &map_d,
                              m_tile * BM + consumer * 64, n_tile * BN, consumer_tid % 128,
                              Traits::kEpilogueBarrier + consumer);
      } else {
        out.template store_wgmma_fragment<BN>(acc, at, row, col, lane,
                                              row_map.inside16(grid_row - lane / 4));
      }
    }
    // D's last stores are written before the block exits.
    if (args.tma_store && consumer_tid % 128 == 0) tc::tma_store_wait<0>();
  }
  __syncwarp();
  // No block leaves while a peer may still arrive on its barriers or multicast into it.
  if (cluster > 1) tc::cluster_sync();
#elif defined(__CUDA_ARCH__)
  __trap();  // built without sm_90a: the host never launches this (hopper_kernel_usable)
#endif
}

}  // namespace rudnn::gemm::kernels
