// Tensor Memory Accelerator and bulk copies (sm_90), device side.
//
// A tensor map (CUtensorMap, encoded on the host by tensor_map.h and passed to the kernel as a
// `const __grid_constant__ CUtensorMap` parameter) describes a global tensor of rank 1..5,
// dims[0] contiguous, the others at byte strides that are multiples of 16, and a box of
// box[i] elements per dimension. One thread issues a copy of the box whose first element
// sits at integer coordinates (innermost first: a row-major [rows, cols] matrix takes
// {col, row}; negative coordinates are allowed). The innermost coordinate times the element
// size must be a multiple of 16 bytes (0, +-16, ...): the hardware raises an illegal
// instruction (not an error code) for a box that starts elsewhere along the contiguous axis,
// so callers whose starts come from data (group offsets) must align them or not use TMA.
//
// Loads (global -> shared). The box lands in shared memory dense, innermost dimension
// fastest: element (i0, .., i4) of the box at byte ((((i4 * b3 + i3) * b2 + i2) * b1 + i1) *
// b0 + i0) * elem_bytes, then permuted by the map's swizzle (tensor_core/wgmma.cuh:
// swizzle_offset) when there is one: the swizzle's span (32, 64 or 128 bytes) must be at
// least b0 * elem_bytes, and the destination aligned to 128 bytes (to the swizzle's repeat,
// 8 * span bytes, when swizzled). Elements outside the tensor are written as zeros and still
// counted. The copy counts its bytes (the whole box) down on an mbarrier of the destination
// block, which the waiting side armed with mbarrier_arrive_expect_bytes (pipeline.cuh).
//
// Multicast loads write the same box to the same shared-memory offset in every block of the
// cluster named in a 16-bit mask (bit r: rank r), and count the bytes down on the barrier at
// the same offset in each of those blocks: every receiving block arms its own barrier.
//
// Stores (shared -> global) read a dense (or swizzled) box and write only its elements that
// fall inside the tensor. Our stores start at non-negative coordinates (a box may run past
// the end): with a box starting before the tensor among its cases, the store test still
// faulted on the H200 after the inner starts were aligned (RESULTS.md, round 28), and no
// caller needs one. They complete in bulk groups: commit, then wait for the group
// (wait_read: until the shared memory may be reused; wait: until the writes are done). The
// shared writes that produced the box must be ordered before the store by
// fence_proxy_async_shared (pipeline.cuh) and a barrier of the writing threads.
//
// Bulk copies (bulk_copy_load) move a contiguous run of bytes (a multiple of 16, both ends
// 16-byte aligned) with the same mbarrier completion, no tensor map.
//
// Architectures: sm_90 and later; the bodies compile to nothing below (tensor_core/arch.cuh).
#pragma once

#include <cuda.h>  // CUtensorMap: the type only (nothing links libcuda)

#include <cstdint>

#include "cuda/tensor_core/arch.cuh"
#include "cuda/tensor_core/pipeline.cuh"

namespace rudnn::cuda::tc {

__device__ __forceinline__ uint64_t map_address(const CUtensorMap* map) {
  return reinterpret_cast<uint64_t>(map);
}

// Fetches the tensor map into the descriptor cache ahead of the first copy.
__device__ __forceinline__ void tma_prefetch_map(const CUtensorMap* map) {
#if RUDNN_TC_SM90
  asm volatile("prefetch.tensormap [%0];" ::"l"(map_address(map)) : "memory");
#endif
}

// Box at `coords` (1 to 5 of them, innermost first) into `smem_dst`, counted on `bar`.
template <class... Coords>
__device__ __forceinline__ void tma_load(void* smem_dst, const CUtensorMap* map, uint64_t* bar,
                                         Coords... coords) {
  constexpr int kRank = sizeof...(Coords);
  static_assert(kRank >= 1 && kRank <= 5, "TMA tensors have 1 to 5 dimensions");
#if RUDNN_TC_SM90
  const int32_t c[5] = {static_cast<int32_t>(coords)...};
  const uint32_t dst = shared_address(smem_dst), b = shared_address(bar);
  const uint64_t m = map_address(map);
  if constexpr (kRank == 1) {
    asm volatile(
        "cp.async.bulk.tensor.1d.shared::cluster.global.mbarrier::complete_tx::bytes"
        " [%0], [%1, {%3}], [%2];" ::"r"(dst),
        "l"(m), "r"(b), "r"(c[0])
        : "memory");
  } else if constexpr (kRank == 2) {
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
        " [%0], [%1, {%3, %4}], [%2];" ::"r"(dst),
        "l"(m), "r"(b), "r"(c[0]), "r"(c[1])
        : "memory");
  } else if constexpr (kRank == 3) {
    asm volatile(
        "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes"
        " [%0], [%1, {%3, %4, %5}], [%2];" ::"r"(dst),
        "l"(m), "r"(b), "r"(c[0]), "r"(c[1]), "r"(c[2])
        : "memory");
  } else if constexpr (kRank == 4) {
    asm volatile(
        "cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes"
        " [%0], [%1, {%3, %4, %5, %6}], [%2];" ::"r"(dst),
        "l"(m), "r"(b), "r"(c[0]), "r"(c[1]), "r"(c[2]), "r"(c[3])
        : "memory");
  } else {
    asm volatile(
        "cp.async.bulk.tensor.5d.shared::cluster.global.mbarrier::complete_tx::bytes"
        " [%0], [%1, {%3, %4, %5, %6, %7}], [%2];" ::"r"(dst),
        "l"(m), "r"(b), "r"(c[0]), "r"(c[1]), "r"(c[2]), "r"(c[3]), "r"(c[4])
        : "memory");
  }
#endif
}

// The same box into `smem_dst` of every block of the cluster in `cta_mask`, each counting the
// bytes on its own barrier at `bar`'s offset.
template <class... Coords>
__device__ __forceinline__ void tma_load_multicast(void* smem_dst, const CUtensorMap* map,
                                                   uint64_t* bar, uint16_t cta_mask,
                                                   Coords... coords) {
  constexpr int kRank = sizeof...(Coords);
  static_assert(kRank >= 1 && kRank <= 5, "TMA tensors have 1 to 5 dimensions");
#if RUDNN_TC_SM90
  const int32_t c[5] = {static_cast<int32_t>(coords)...};
  const uint32_t dst = shared_address(smem_dst), b = shared_address(bar);
  const uint64_t m = map_address(map);
  if constexpr (kRank == 1) {
    asm volatile(
        "cp.async.bulk.tensor.1d.shared::cluster.global.mbarrier::complete_tx::bytes"
        ".multicast::cluster [%0], [%1, {%4}], [%2], %3;" ::"r"(dst),
        "l"(m), "r"(b), "h"(cta_mask), "r"(c[0])
        : "memory");
  } else if constexpr (kRank == 2) {
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
        ".multicast::cluster [%0], [%1, {%4, %5}], [%2], %3;" ::"r"(dst),
        "l"(m), "r"(b), "h"(cta_mask), "r"(c[0]), "r"(c[1])
        : "memory");
  } else if constexpr (kRank == 3) {
    asm volatile(
        "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes"
        ".multicast::cluster [%0], [%1, {%4, %5, %6}], [%2], %3;" ::"r"(dst),
        "l"(m), "r"(b), "h"(cta_mask), "r"(c[0]), "r"(c[1]), "r"(c[2])
        : "memory");
  } else if constexpr (kRank == 4) {
    asm volatile(
        "cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes"
        ".multicast::cluster [%0], [%1, {%4, %5, %6, %7}], [%2], %3;" ::"r"(dst),
        "l"(m), "r"(b), "h"(cta_mask), "r"(c[0]), "r"(c[1]), "r"(c[2]), "r"(c[3])
        : "memory");
  } else {
    asm volatile(
        "cp.async.bulk.tensor.5d.shared::cluster.global.mbarrier::complete_tx::bytes"
        ".multicast::cluster [%0], [%1, {%4, %5, %6, %7, %8}], [%2], %3;" ::"r"(dst),
        "l"(m), "r"(b), "h"(cta_mask), "r"(c[0]), "r"(c[1]), "r"(c[2]), "r"(c[3]), "r"(c[4])
        : "memory");
  }
#endif
}

// Box in `smem_src` to the tensor at `coords` (elements outside the tensor are not written).
// Joins the thread's current bulk group: tma_store_commit, then a wait.
template <class... Coords>
__device__ __forceinline__ void tma_store(const CUtensorMap* map, const void* smem_src,
                                          Coords... coords) {
  constexpr int kRank = sizeof...(Coords);
  static_assert(kRank >= 1 && kRank <= 5, "TMA tensors have 1 to 5 dimensions");
#if RUDNN_TC_SM90
  const int32_t c[5] = {static_cast<int32_t>(coords)...};
  const uint32_t src = shared_address(smem_src);
  const uint64_t m = map_address(map);
  if constexpr (kRank == 1) {
    asm volatile("cp.async.bulk.tensor.1d.global.shared::cta.bulk_group [%0, {%2}], [%1];" ::"l"(m),
                 "r"(src), "r"(c[0])
                 : "memory");
  } else if constexpr (kRank == 2) {
    asm volatile(
        "cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%2, %3}], [%1];" ::"l"(m),
        "r"(src), "r"(c[0]), "r"(c[1])
        : "memory");
  } else if constexpr (kRank == 3) {
    asm volatile(
        "cp.async.bulk.tensor.3d.global.shared::cta.bulk_group [%0, {%2, %3, %4}], [%1];" ::"l"(m),
        "r"(src), "r"(c[0]), "r"(c[1]), "r"(c[2])
        : "memory");
  } else if constexpr (kRank == 4) {
    asm volatile(
        "cp.async.bulk.tensor.4d.global.shared::cta.bulk_group [%0, {%2, %3, %4, %5}], [%1];" ::"l"(
            m),
        "r"(src), "r"(c[0]), "r"(c[1]), "r"(c[2]), "r"(c[3])
        : "memory");
  } else {
    asm volatile(
        "cp.async.bulk.tensor.5d.global.shared::cta.bulk_group [%0, {%2, %3, %4, %5, %6}], [%1];" ::
            "l"(m),
        "r"(src), "r"(c[0]), "r"(c[1]), "r"(c[2]), "r"(c[3]), "r"(c[4])
        : "memory");
  }
#endif
}

// Closes this thread's bulk group of stores.
__device__ __forceinline__ void tma_store_commit() {
#if RUDNN_TC_SM90
  asm volatile("cp.async.bulk.commit_group;" ::: "memory");
#endif
}
// Waits until at most kPending of this thread's committed groups are unfinished (their global
// writes done and visible).
template <int kPending = 0>
__device__ __forceinline__ void tma_store_wait() {
#if RUDNN_TC_SM90
  asm volatile("cp.async.bulk.wait_group %0;" ::"n"(kPending) : "memory");
#endif
}
// Waits until at most kPending groups still read their shared-memory source (the source may
// be overwritten; the global writes may still be in flight).
template <int kPending = 0>
__device__ __forceinline__ void tma_store_wait_read() {
#if RUDNN_TC_SM90
  asm volatile("cp.async.bulk.wait_group.read %0;" ::"n"(kPending) : "memory");
#endif
}

// `bytes` contiguous bytes (a multiple of 16; both addresses 16-byte aligned) from global
// memory into this block's shared memory, counted on `bar`.
__device__ __forceinline__ void bulk_copy_load(void* smem_dst, const void* src, uint32_t bytes,
                                               uint64_t* bar) {
#if RUDNN_TC_SM90
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::
          "r"(shared_address(smem_dst)),
      "l"(src), "r"(bytes), "r"(shared_address(bar))
      : "memory");
#endif
}

}  // namespace rudnn::cuda::tc
