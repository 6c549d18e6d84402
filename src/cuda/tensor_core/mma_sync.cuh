// The portable tensor-core path (sm_80 and later, Hopper included): warp-level mma.sync,
// ldmatrix and cp.async. What a non-Hopper GPU runs, and what Hopper runs for the cases the
// wgmma kernels do not take.
//
// ---- mma.sync ---------------------------------------------------------------------------------
// One warp computes D[16 x 8] = A[16 x K] * B[K x 8] + C, FP32 accumulation. Lane l, g = l / 4
// (the group), t = l % 4 (the thread in the group).
//
//   m16n8k16, bf16 or f16 (mma_16816): registers of two 16-bit values, low half first
//     A (4 regs)  a[0] = A[g][2t, 2t+1]       a[1] = A[g+8][2t, 2t+1]
//                 a[2] = A[g][2t+8, 2t+9]     a[3] = A[g+8][2t+8, 2t+9]
//     B (2 regs)  b[0] = B[2t, 2t+1][g]       b[1] = B[2t+8, 2t+9][g]       (down a column)
//     C/D (FP32)  d[0], d[1] = D[g][2t, 2t+1]     d[2], d[3] = D[g+8][2t, 2t+1]
//
//                  k: 0 1 | 2 3 | 4 5 | 6 7 | 8 9 ...           n: 0  1  2 ... 7
//     A row g      t0  a0 | t1 a0 | t2 a0 | t3 a0 | t0 a2 ...   D row g   t0 t0 t1 t1 .. t3 t3
//     A row g+8    t0  a1 | ...                 | t0 a3 ...     D row g+8 (d[2], d[3])
//
//   m16n8k8, tf32 (mma_1688_tf32): one FP32 bit pattern per register (rounded to TF32 with
//   to_tf32 first; the unit ignores the low 13 mantissa bits otherwise)
//     A  a[0] = A[g][t]   a[1] = A[g+8][t]   a[2] = A[g][t+4]   a[3] = A[g+8][t+4]
//     B  b[0] = B[t][g]   b[1] = B[t+4][g]
//     C/D as above.
//
// ---- ldmatrix ---------------------------------------------------------------------------------
// ldmatrix .x1/.x2/.x4 loads 1, 2 or 4 matrices of 8 x 8 16-bit elements from shared memory:
// lane l gives the address of row l % 8 of matrix l / 8 (16 contiguous bytes, 16-byte
// aligned; lanes beyond the matrices loaded give nothing), and receives in register i the
// elements (row l / 4, columns 2 (l % 4), 2 (l % 4) + 1) of matrix i, or with .trans the
// elements (rows 2 (l % 4), 2 (l % 4) + 1; column l / 4), i.e. of its transpose. So:
//   - an A fragment (m16n8k16) is one .x4 from K-contiguous rows (matrices: rows 0-7 / 8-15 x
//     k 0-7 / 8-15 in the order a[0..3]); from M-contiguous storage (k rows of m values) it is
//     one .x4.trans;
//   - two B fragments (n 0-7 and 8-15) are one .x4 from N rows of K-contiguous values, or one
//     .x4.trans from K rows of N-contiguous values.
// For 32-bit (tf32) elements, an 8 x 8 b16 matrix is 8 rows x 4 FP32: the non-transposed load
// of K-contiguous rows gives a tf32 A or B fragment register the same way; M/N-contiguous
// tf32 operands are read with plain 32-bit shared loads instead (no transposing load exists).
//
// ---- cp.async ---------------------------------------------------------------------------------
// cp_async_16 copies 16 bytes global -> shared without a register round trip (.cg: cached in
// L2 only); the first `valid_bytes` (0..16) come from global memory, the rest are written as
// zeros (tails and out-of-range rows need no branches). Copies issued by a thread join its
// current group; cp_async_commit closes the group; cp_async_wait<n> waits until at most n of
// the thread's groups are in flight. A multi-stage pipeline over S shared-memory stages:
//
//     prologue: for s < S-1: load stage s; commit
//     for kb:   wait<S-2>; __syncthreads()   (stage kb landed for every thread, and every
//               thread is done with stage kb-1)
//               load stage kb+S-1 into slot (kb-1) % S; commit (an empty group past the end)
//               compute on slot kb % S
//
// Architectures: sm_80 and later; the bodies compile to nothing below (tensor_core/arch.cuh).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "cuda/cluster.cuh"  // shared_address
#include "cuda/tensor_core/arch.cuh"

namespace rudnn::cuda::tc {

// d += A * B, m16n8k16, T = __nv_bfloat16 or __half.
template <class T>
__device__ __forceinline__ void mma_16816(float (&d)[4], const uint32_t (&a)[4],
                                          const uint32_t (&b)[2]) {
  static_assert(std::is_same_v<T, __nv_bfloat16> || std::is_same_v<T, __half>);
#if RUDNN_TC_SM80
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
        "{%8, %9}, {%0, %1, %2, %3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
        "{%8, %9}, {%0, %1, %2, %3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  }
#endif
}

// d += A * B, m16n8k8 with TF32 inputs (FP32 bit patterns, see to_tf32).
__device__ __forceinline__ void mma_1688_tf32(float (&d)[4], const uint32_t (&a)[4],
                                              const uint32_t (&b)[2]) {
#if RUDNN_TC_SM80
  asm volatile(
      "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#endif
}

// FP32 rounded to TF32 (10 mantissa bits, to nearest, ties away from zero), as bits.
__device__ __forceinline__ uint32_t to_tf32(float v) {
  uint32_t r = __float_as_uint(v);
#if RUDNN_TC_SM80
  asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(v));
#endif
  return r;
}

// ldmatrix of 1, 2 or 4 8x8 16-bit matrices (kTranspose: .trans); `row_address` is this
// lane's row (see above).
template <int kCount, bool kTranspose>
__device__ __forceinline__ void ldmatrix(uint32_t (&r)[kCount], const void* row_address) {
  static_assert(kCount == 1 || kCount == 2 || kCount == 4);
#if RUDNN_TC_SM80
  const uint32_t addr = shared_address(row_address);
  if constexpr (kCount == 4 && kTranspose)
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
  else if constexpr (kCount == 4)
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
  else if constexpr (kCount == 2 && kTranspose)
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0, %1}, [%2];"
                 : "=r"(r[0]), "=r"(r[1])
                 : "r"(addr));
  else if constexpr (kCount == 2)
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0, %1}, [%2];"
                 : "=r"(r[0]), "=r"(r[1])
                 : "r"(addr));
  else if constexpr (kTranspose)
    asm volatile("ldmatrix.sync.aligned.m8n8.x1.trans.shared.b16 {%0}, [%1];"
                 : "=r"(r[0])
                 : "r"(addr));
  else
    asm volatile("ldmatrix.sync.aligned.m8n8.x1.shared.b16 {%0}, [%1];" : "=r"(r[0]) : "r"(addr));
#else
#pragma unroll
  for (int i = 0; i < kCount; ++i) r[i] = 0;
#endif
}

// 16 bytes global -> shared, the first `valid_bytes` (0..16) from `src`, the rest zeros.
// Both addresses 16-byte aligned; `src` is not read when valid_bytes is 0 (but must still be
// a valid global address: pass the operand's base).
__device__ __forceinline__ void cp_async_16(void* smem_dst, const void* src, uint32_t valid_bytes) {
#if RUDNN_TC_SM80
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(shared_address(smem_dst)),
               "l"(src), "r"(valid_bytes)
               : "memory");
#endif
}
// An L2 cache policy that marks lines as evict-first (for data a kernel reads once), for
// cp_async_16_hinted.
__device__ __forceinline__ uint64_t l2_evict_first_policy() {
  uint64_t policy = 0;
#if RUDNN_TC_SM80
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(policy));
#endif
  return policy;
}
// cp_async_16 with an L2 cache policy (l2_evict_first_policy) for the lines it reads.
__device__ __forceinline__ void cp_async_16_hinted(void* smem_dst, const void* src,
                                                   uint32_t valid_bytes, uint64_t policy) {
#if RUDNN_TC_SM80
  asm volatile("cp.async.cg.shared.global.L2::cache_hint [%0], [%1], 16, %2, %3;" ::"r"(
                   shared_address(smem_dst)),
               "l"(src), "r"(valid_bytes), "l"(policy)
               : "memory");
#endif
}
__device__ __forceinline__ void cp_async_commit() {
#if RUDNN_TC_SM80
  asm volatile("cp.async.commit_group;" ::: "memory");
#endif
}
// Waits until at most kPending of this thread's committed groups are still in flight.
template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
#if RUDNN_TC_SM80
  asm volatile("cp.async.wait_group %0;" ::"n"(kPending) : "memory");
#endif
}

}  // namespace rudnn::cuda::tc
