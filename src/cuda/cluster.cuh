// Thread-block clusters (sm_90+): shared-memory barriers (mbarrier) and stores into a peer
// block's shared memory that count down on the peer's barrier, as thin wrappers over PTX.
// Callers must run on sm_90 or newer: the bodies compile to nothing below that, and host code
// checks the kernel's compiled architecture (built_for_hopper in cuda/launch.cuh) before
// choosing a path that uses them.
//
// The pattern: a block arms its own mbarrier with the bytes it expects; peers send those
// bytes with store_to_peer, each store counting its bytes down on the barrier; the block
// waits on the barrier's phase parity and then reads the data with ordinary loads. No
// cluster-wide barrier or memory fence per exchange.
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
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(shared_address(bar)), "r"(arrivals)
               : "memory");
#endif
}

// Makes initialised barriers visible to the rest of the cluster.
__device__ __forceinline__ void fence_barrier_init() {
#if __CUDA_ARCH__ >= 900
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
#endif
}

// One arrival that also tells the barrier to wait for `bytes` more bytes to land.
__device__ __forceinline__ void mbarrier_arrive_expect_bytes(uint64_t* bar, uint32_t bytes) {
#if __CUDA_ARCH__ >= 900
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(shared_address(bar)),
               "r"(bytes)
               : "memory");
#endif
}

// Blocks until the phase with the given parity (0 for the first, 1 for the second, ...) of
// the barrier at shared-memory address `addr` has completed. Hot loops convert a barrier's
// address once and call this form (each generic-to-shared conversion reads the shared
// window's base again).
__device__ __forceinline__ void mbarrier_wait(uint32_t addr, uint32_t parity) {
#if __CUDA_ARCH__ >= 900
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
// The same for the barrier `bar`.
__device__ __forceinline__ void mbarrier_wait(uint64_t* bar, uint32_t parity) {
  mbarrier_wait(shared_address(bar), parity);
}

// The address of `local` (this block's shared memory) in block `rank` of the cluster.
__device__ __forceinline__ uint32_t peer_shared_address(const void* local, uint32_t rank) {
  uint32_t remote = 0;
#if __CUDA_ARCH__ >= 900
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;"
               : "=r"(remote)
               : "r"(shared_address(local)), "r"(rank));
#endif
  return remote;
}

// Stores two floats into another block's shared memory (addresses from peer_shared_address)
// and counts their 8 bytes down on that block's mbarrier: the receiver learns of the data by
// waiting on its own barrier, with no cluster-wide barrier and no memory fence.
__device__ __forceinline__ void store_to_peer(uint32_t remote, float2 v, uint32_t remote_bar) {
#if __CUDA_ARCH__ >= 900
  asm volatile(
      "st.async.shared::cluster.mbarrier::complete_tx::bytes.v2.f32 [%0], {%1, %2}, [%3];" ::"r"(
          remote),
      "f"(v.x), "f"(v.y), "r"(remote_bar)
      : "memory");
#endif
}

}  // namespace rudnn::cuda
