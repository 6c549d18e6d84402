// Pieces of a warp-specialised producer/consumer pipeline (sm_90): mbarrier operations beyond
// those of cuda/cluster.cuh, register reallocation between warpgroups (setmaxnreg, sm_90a),
// named barriers, cluster rank and barrier, the proxy fence, and the stage/phase counter of a
// ring of shared-memory stages.
//
// mbarrier (a 64-bit word in shared memory, 8-byte aligned). A phase completes when its
// pending-arrival count reaches 0 *and* its transaction count (bytes announced with
// expect-tx, counted down by TMA / bulk copies as they land) is 0; the barrier then flips to
// the next phase with the arrival count reset to the init value. Waiters name the phase by
// its parity: wait(parity 0) returns once the first phase (and every second one after it) has
// completed. Phases are not counted beyond parity, so a waiter must never fall two phases
// behind (the ring below guarantees it).
//
// The ring (what every tensor-core kernel of the library uses): kStages stages, each with a
// `full` barrier (init 1: the producer's arrive_expect_bytes, plus the copy engine's bytes)
// and an `empty` barrier (init = the number of consumer arrivals, e.g. one per consumer warp).
//
//     producer, for each k-block:                   consumer, for each k-block:
//       wait(empty[s], phase ^ 1)                       wait(full[s], phase)
//       arrive_expect_bytes(full[s], bytes)             ... read stage s (MMAs) ...
//       TMA loads into stage s, on full[s]              arrive(empty[s]) once the reads are done
//       advance (s, phase)                              advance (s, phase)
//
// The producer's first pass waits on parity 1 of barriers that have never completed a phase:
// a wait on the parity *before* the current phase returns at once, so a fresh ring starts with
// every stage free.
//
// Architectures: mbarrier, cluster and fence operations sm_90+; setmaxnreg sm_90a only. Bodies
// compile to nothing elsewhere (tensor_core/arch.cuh); hosts check before launching.
#pragma once

#include <cstdint>

#include "cuda/cluster.cuh"
#include "cuda/tensor_core/arch.cuh"

namespace rudnn::cuda::tc {

using rudnn::cuda::fence_barrier_init;            // after init, before other threads/TMA use them
using rudnn::cuda::mbarrier_arrive_expect_bytes;  // one arrival + announce bytes
using rudnn::cuda::mbarrier_init;                 // (bar, arrivals per phase)
using rudnn::cuda::mbarrier_wait;                 // spin until the phase of that parity completed
using rudnn::cuda::peer_shared_address;
using rudnn::cuda::shared_address;

// One arrival on `bar` (this block's shared memory), release semantics at CTA scope: the
// thread's earlier shared/global writes are visible to whoever waits on the phase.
__device__ __forceinline__ void mbarrier_arrive(uint64_t* bar) {
#if RUDNN_TC_SM90
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(shared_address(bar)) : "memory");
#endif
}

// One arrival on the barrier at the same shared-memory offset as `bar` in block `cta_rank` of
// this cluster (the own rank included), with the instruction's default semantics (release at
// CTA scope), as CUTLASS's cluster barriers arrive. What it announces in the GEMM is that
// this block's wgmma reads of a stage are complete (their wait has returned), which needs
// no cluster-scope fence.
__device__ __forceinline__ void mbarrier_arrive_cluster(uint64_t* bar, uint32_t cta_rank) {
#if RUDNN_TC_SM90
  asm volatile("mbarrier.arrive.shared::cluster.b64 _, [%0];" ::"r"(
                   peer_shared_address(bar, cta_rank))
               : "memory");
#endif
}

// Announces `bytes` more bytes for the current phase without arriving (a second producer of
// the same phase, or a peer's multicast into this block).
__device__ __forceinline__ void mbarrier_expect_bytes(uint64_t* bar, uint32_t bytes) {
#if RUDNN_TC_SM90
  asm volatile("mbarrier.expect_tx.shared::cta.b64 [%0], %1;" ::"r"(shared_address(bar)), "r"(bytes)
               : "memory");
#endif
}

// Whether the phase of this parity has completed, without waiting.
__device__ __forceinline__ bool mbarrier_test_wait(uint64_t* bar, uint32_t parity) {
  uint32_t done = 0;
#if RUDNN_TC_SM90
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "mbarrier.test_wait.parity.shared::cta.b64 p, [%1], %2;\n"
      "selp.u32 %0, 1, 0, p;\n"
      "}\n"
      : "=r"(done)
      : "r"(shared_address(bar)), "r"(parity)
      : "memory");
#endif
  return done != 0;
}

// One potentially blocking probe: waits up to a hardware time limit for the phase of this
// parity, then says whether it completed (mbarrier_wait loops on it).
__device__ __forceinline__ bool mbarrier_try_wait(uint64_t* bar, uint32_t parity) {
  uint32_t done = 0;
#if RUDNN_TC_SM90
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
      "selp.u32 %0, 1, 0, p;\n"
      "}\n"
      : "=r"(done)
      : "r"(shared_address(bar)), "r"(parity)
      : "memory");
#endif
  return done != 0;
}

// Orders this thread's generic-proxy shared-memory accesses (ordinary stores) before later
// async-proxy accesses (TMA stores reading shared memory, wgmma reading its operands, TMA
// loads overwriting a stage): each writing thread fences, then the threads synchronise.
__device__ __forceinline__ void fence_proxy_async_shared() {
#if RUDNN_TC_SM90
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
#endif
}

// Named barriers 1..15 (0 is __syncthreads): `threads` (a multiple of 32) threads of the block
// synchronise, the others go on. Every participating warp executes it with the same values.
__device__ __forceinline__ void named_barrier_sync(uint32_t id, uint32_t threads) {
  asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(threads) : "memory");
}
__device__ __forceinline__ void named_barrier_arrive(uint32_t id, uint32_t threads) {
  asm volatile("bar.arrive %0, %1;" ::"r"(id), "r"(threads) : "memory");
}

// This block's rank in its cluster (0 without clusters).
__device__ __forceinline__ uint32_t cluster_ctarank() {
  uint32_t rank = 0;
#if RUDNN_TC_SM90
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(rank));
#endif
  return rank;
}
// Cluster-wide barrier, split: every thread of every block of the cluster arrives (release),
// then waits (acquire). Without clusters it behaves as a block barrier.
__device__ __forceinline__ void cluster_arrive() {
#if RUDNN_TC_SM90
  asm volatile("barrier.cluster.arrive.release.aligned;" ::: "memory");
#endif
}
__device__ __forceinline__ void cluster_wait() {
#if RUDNN_TC_SM90
  asm volatile("barrier.cluster.wait.acquire.aligned;" ::: "memory");
#endif
}
__device__ __forceinline__ void cluster_sync() {
  cluster_arrive();
  cluster_wait();
}

// Warpgroup register budgets (sm_90a): a producer warpgroup that only issues copies gives
// registers back (release) so that the consumers' accumulators fit (claim). kRegisters is a
// multiple of 8 in [24, 256]; every warp of the warpgroup executes the same call; the kernel
// must be compiled with a register limit (__launch_bounds__), which is the budget each thread
// starts with. A claim blocks until enough registers have been released in the SM.
template <uint32_t kRegisters>
__device__ __forceinline__ void warpgroup_release_registers() {
  static_assert(kRegisters % 8 == 0 && kRegisters >= 24 && kRegisters <= 256);
#if RUDNN_TC_SM90A
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(kRegisters));
#endif
}
template <uint32_t kRegisters>
__device__ __forceinline__ void warpgroup_claim_registers() {
  static_assert(kRegisters % 8 == 0 && kRegisters >= 24 && kRegisters <= 256);
#if RUDNN_TC_SM90A
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(kRegisters));
#endif
}

// Position in a ring of kStages stages: the stage and the parity of the current pass over the
// ring (flips each time the stage wraps to 0). Producer and consumers each keep their own and
// advance it once per k-block, in the same order, so they agree on (stage, phase).
template <int kStages>
struct RingPosition {
  int stage = 0;
  uint32_t phase = 0;
  __device__ __forceinline__ void advance() {
    if (++stage == kStages) {
      stage = 0;
      phase ^= 1u;
    }
  }
};

}  // namespace rudnn::cuda::tc
