// Hopper's bulk-copy engine (cp.async.bulk, "TMA" without a tensor map) and the shared-memory
// barriers it completes, as thin wrappers over PTX. Callers must run on sm_90 or newer: the
// bodies compile to nothing below that, and host code checks the kernel's compiled
// architecture (built_for_hopper in row_tile.cuh) before choosing a path that uses them.
//
// The pattern: one thread arms an mbarrier with the bytes it expects and starts a copy that
// counts those bytes down as they land; any thread waits on the barrier's phase parity and
// then reads the shared memory with ordinary loads. A buffer is refilled only after every
// reader has passed a block barrier (ordering the reads before the engine's writes).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace rudnn::cuda {

__device__ __forceinline__ uint32_t shared_address(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// Sets up `bar` to complete a phase after `arrivals` arrivals (and all expected bytes).
__device__ __forceinline__ void mbarrier_init(uint64_t* bar, uint32_t arrivals) {
#if __CUDA_ARCH__ >= 900
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(shared_address(bar)), "r"(arrivals) : "memory");
#endif
}

// Makes initialised barriers visible to the bulk-copy engine and to the rest of the cluster.
__device__ __forceinline__ void fence_barrier_init() {
#if __CUDA_ARCH__ >= 900
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
#endif
}

// Orders this thread's earlier shared-memory accesses before later bulk-copy (async proxy)
// accesses to the same memory.
__device__ __forceinline__ void fence_proxy_async_shared() {
#if __CUDA_ARCH__ >= 900
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
#endif
}

// One arrival that also tells the barrier to wait for `bytes` more bytes to land.
__device__ __forceinline__ void mbarrier_arrive_expect_bytes(uint64_t* bar, uint32_t bytes) {
#if __CUDA_ARCH__ >= 900
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(shared_address(bar)), "r"(bytes)
               : "memory");
#endif
}

// One arrival with no bytes: completes a phase armed for one arrival without a copy.
__device__ __forceinline__ void mbarrier_arrive(uint64_t* bar) {
#if __CUDA_ARCH__ >= 900
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(shared_address(bar)) : "memory");
#endif
}

// Blocks until the phase with the given parity (0 for the first, 1 for the second, ...) of
// `bar` has completed.
__device__ __forceinline__ void mbarrier_wait(uint64_t* bar, uint32_t parity) {
#if __CUDA_ARCH__ >= 900
  const uint32_t addr = shared_address(bar);
  uint32_t done = 0;
  do {
    asm volatile(
        "{\n"
        ".reg .pred p;\n"
        "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
        "selp.u32 %0, 1, 0, p;\n"
        "}\n"
        : "=r"(done)
        : "r"(addr), "r"(parity)
        : "memory");
  } while (!done);
#endif
}

// Starts copying `bytes` (a multiple of 16; both addresses 16-byte aligned) from global
// memory to this block's shared memory; `bar` is counted down by the bytes as they land.
__device__ __forceinline__ void bulk_copy_to_shared(void* dst, const void* src, uint32_t bytes, uint64_t* bar) {
#if __CUDA_ARCH__ >= 900
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                   shared_address(dst)),
               "l"(src), "r"(bytes), "r"(shared_address(bar))
               : "memory");
#endif
}

// The address of `local` (this block's shared memory) in block `rank` of the cluster.
__device__ __forceinline__ uint32_t peer_shared_address(const void* local, uint32_t rank) {
  uint32_t remote = 0;
#if __CUDA_ARCH__ >= 900
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(shared_address(local)), "r"(rank));
#endif
  return remote;
}

// Stores two floats into another block's shared memory (addresses from peer_shared_address)
// and counts their 8 bytes down on that block's mbarrier: the receiver learns of the data by
// waiting on its own barrier, with no cluster-wide barrier and no memory fence.
__device__ __forceinline__ void store_to_peer(uint32_t remote, float2 v, uint32_t remote_bar) {
#if __CUDA_ARCH__ >= 900
  asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.v2.f32 [%0], {%1, %2}, [%3];" ::"r"(remote),
               "f"(v.x), "f"(v.y), "r"(remote_bar)
               : "memory");
#endif
}

}  // namespace rudnn::cuda
