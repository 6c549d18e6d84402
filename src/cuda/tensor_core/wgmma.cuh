// Hopper warpgroup MMA (wgmma.mma_async, sm_90a), bf16 or f16 operands, FP32 accumulation:
//
//   D[64 x N] = A[64 x 16] * B[16 x N] (+ D)      one instruction, issued by a warpgroup
//                                                (4 consecutive warps, 128 threads)
//
// for N in {16, 32, 64, 96, 128, 192, 256}. B always comes from shared memory through a
// matrix descriptor; A from shared memory (ss) or from registers (rs).
//
// ---- Shared-memory operands -------------------------------------------------------------------
// An operand tile is MN x K 16-bit elements (A: M x K, B: N x K; B[k][n] is element (n, k)),
// stored "K-major" (K contiguous: row-major A, column-major B) or "MN-major" (MN contiguous:
// column-major A, row-major B; the instruction's transpose bit). OperandTile below places
// element (mn, k) in one of the canonical layouts, all made of 16-byte chunks:
//
//   swizzled, span S = 32, 64 or 128 bytes (E = S / 2 elements):
//     K-major:  slabs of E k-columns; slab j = [MN rows][S bytes], row r holding k in
//               [jE, jE + E); slabs one after another (slab stride MN * S bytes).
//     MN-major: slabs of E mn-columns; slab j = [K rows][S bytes], row k holding mn in
//               [jE, jE + E); slab stride K * S bytes.
//     then, within every 8 * S-byte block (aligned: the tile base is 8 * S-aligned, 1024 for
//     128-byte swizzle), 16-byte chunk c of row r is stored at chunk c ^ (r % (S / 16)) ...
//     precisely: byte offset o -> o ^ (((o >> 7) & (S / 16 - 1)) << 4) (swizzle_offset), the
//     same permutation TMA applies with CU_TENSOR_MAP_SWIZZLE_{32,64,128}B.
//
//       128-byte swizzle, K-major, 8 rows x 8 chunks (each chunk 8 k-values of one row):
//         row 0:  0 1 2 3 4 5 6 7        row 4:  4 5 6 7 0 1 2 3
//         row 1:  1 0 3 2 5 4 7 6        row 5:  5 4 7 6 1 0 3 2
//         row 2:  2 3 0 1 6 7 4 5        row 6:  6 7 4 5 2 3 0 1
//         row 3:  3 2 1 0 7 6 5 4        row 7:  7 6 5 4 3 2 1 0
//       (entry = the logical chunk stored at that position)
//
//   no swizzle (span 0): "core matrices" of 8 rows x 16 bytes stored as 128 contiguous bytes;
//     K-major: core (mn / 8, k / 8) at (mn / 8) * SBO + (k / 8) * 128, row mn % 8 inside;
//     MN-major: core (mn / 8, k / 8) at (mn / 8) * SBO + (k / 8) * 128, row k % 8 inside.
//
// The descriptor (64 bits): start address >> 4 (bits 0-13), leading byte offset >> 4 (LBO,
// 16-29), stride byte offset >> 4 (SBO, 32-45), base offset 0 (49-51: every tile starts on
// its swizzle repeat), layout (62-63: 1 = 128B, 2 = 64B, 3 = 32B swizzle, 0 = none). For the
// layouts above:
//               K-major                          MN-major
//   swizzled    LBO unused (16), SBO = 8 * S     LBO = slab stride K * S, SBO = 8 * S
//   none        LBO = 128 (next 8 k),            LBO = 128 (next 8 k),
//               SBO = (K / 8) * 128 (next 8 mn)  SBO = (K / 8) * 128 (next 8 mn)
// The operand of one instruction starts at OperandTile::start(mn0, k0): a 64-row A slice or
// the whole N of B, and the k-step k0 = 16 j: within a swizzled K-major row that is +32 j
// bytes (the hardware applies the swizzle to the address bits, so a start inside the repeat
// is fine); MN-major +16 j rows.
//
// ---- Registers --------------------------------------------------------------------------------
// Warp w (0..3) of the warpgroup owns rows 16w .. 16w + 15; lane l, g = l / 4, t = l % 4.
//
//   D (FP32, N / 2 registers):  d[4j + 2h + c] = D[16w + g + 8h][8j + 2t + c]
//                                   j < N / 8, h, c in {0, 1}
//          cols 8j .. 8j+7
//     row g     [t0 t0 t1 t1 t2 t2 t3 t3]    h = 0: d[4j], d[4j+1] of lanes 4g .. 4g+3
//     row g+8   [t0 t0 t1 t1 t2 t2 t3 t3]    h = 1: d[4j+2], d[4j+3]
//
//   A from registers (rs, 4 x 32-bit, two 16-bit values each, low half first), the same as
//   mma.sync's m16n8k16 A fragment per warp:
//     a[0] = A[16w + g][2t, 2t+1]       a[1] = A[16w + g + 8][2t, 2t+1]
//     a[2] = A[16w + g][2t+8, 2t+9]     a[3] = A[16w + g + 8][2t+8, 2t+9]
//   so the accumulator of one m64n16 slice (columns 16s .. 16s+15) packed pairwise is the A
//   fragment of a following product (accumulator_to_a: P = softmax(S) into P * V).
//
// ---- Ordering ---------------------------------------------------------------------------------
//   wgmma_fence()       before the first wgmma of a batch, whenever the accumulators or A
//                       registers were touched by other instructions (every warp of the
//                       warpgroup executes it)
//   wgmma_commit()      closes the batch issued since the previous commit into a group
//   wgmma_wait<n>()     waits until at most n groups are pending: then their accumulators may
//                       be read and their shared-memory operands overwritten
//   fence_operand(acc)  keeps the compiler from moving reads/writes of the accumulators across
//                       the asynchronous instructions (call before wgmma_fence and after a wait)
// Shared-memory operands written by ordinary stores need fence_proxy_async_shared()
// (pipeline.cuh) and a barrier of the writers before the wgmma that reads them; TMA-written
// operands need only the mbarrier wait.
//
// Architectures: sm_90a only (the instructions are not in sm_90 or later generations); the
// bodies compile to nothing elsewhere (tensor_core/arch.cuh).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "cuda/tensor_core/arch.cuh"
#include "cuda/tensor_core/pipeline.cuh"

namespace rudnn::cuda::tc {

enum class Major : int { K = 0, MN = 1 };

// The physical byte offset of logical byte offset `o` in a tile aligned to the swizzle's
// repeat (8 * span bytes); span 0, 32, 64 or 128.
__host__ __device__ constexpr uint32_t swizzle_offset(uint32_t o, int span) {
  const uint32_t mask = span == 128 ? 7u : span == 64 ? 3u : span == 32 ? 1u : 0u;
  return o ^ (((o >> 7) & mask) << 4);
}

// A canonical operand tile of mn_extent x k_extent 16-bit elements (see above). Extents:
// swizzled K-major: mn a multiple of 8, k of span / 2; swizzled MN-major: mn a multiple of
// span / 2, k of 8; unswizzled: both multiples of 8 (k of 16 for a whole instruction).
struct OperandTile {
  Major major = Major::K;
  int span = 128;  // 0 (no swizzle), 32, 64, 128
  int mn_extent = 64;
  int k_extent = 64;

  __host__ __device__ constexpr uint32_t bytes() const {
    return static_cast<uint32_t>(mn_extent) * static_cast<uint32_t>(k_extent) * 2u;
  }
  // Byte offset of element (mn, k) before the swizzle.
  __host__ __device__ constexpr uint32_t logical_offset(int mn, int k) const {
    const uint32_t umn = static_cast<uint32_t>(mn), uk = static_cast<uint32_t>(k);
    if (span == 0) {
      const uint32_t inner =
          major == Major::K ? (umn % 8) * 16 + (uk % 8) * 2 : (uk % 8) * 16 + (umn % 8) * 2;
      return (umn / 8) * sbo() + (uk / 8) * 128 + inner;
    }
    const uint32_t s = static_cast<uint32_t>(span), e = s / 2;
    if (major == Major::K)
      return (uk / e) * static_cast<uint32_t>(mn_extent) * s + umn * s + (uk % e) * 2;
    return (umn / e) * static_cast<uint32_t>(k_extent) * s + uk * s + (umn % e) * 2;
  }
  // Byte offset of element (mn, k): where a thread (or TMA) stores it.
  __host__ __device__ constexpr uint32_t offset(int mn, int k) const {
    return swizzle_offset(logical_offset(mn, k), span);
  }
  __host__ __device__ constexpr uint32_t lbo() const {
    if (span == 0) return 128;
    return major == Major::K ? 16u : static_cast<uint32_t>(k_extent) * static_cast<uint32_t>(span);
  }
  __host__ __device__ constexpr uint32_t sbo() const {
    if (span == 0) return static_cast<uint32_t>(k_extent / 8) * 128u;
    return 8u * static_cast<uint32_t>(span);
  }
  // Byte offset where the operand of an instruction starting at element (mn0, k0) begins:
  // mn0 a multiple of 8 (MN-major swizzled: of span / 2), k0 a multiple of 16.
  __host__ __device__ constexpr uint32_t start(int mn0, int k0) const {
    return logical_offset(mn0, k0);
  }
};

// Layout-type field of the descriptor for a swizzle span.
__host__ __device__ constexpr uint64_t descriptor_layout(int span) {
  return span == 128 ? 1u : span == 64 ? 2u : span == 32 ? 3u : 0u;
}

// A descriptor from its fields (byte values; start a shared-memory address).
__host__ __device__ constexpr uint64_t make_descriptor(uint32_t start, uint32_t lbo, uint32_t sbo,
                                                       int span) {
  return uint64_t{(start & 0x3FFFFu) >> 4} | (uint64_t{(lbo & 0x3FFFFu) >> 4} << 16) |
         (uint64_t{(sbo & 0x3FFFFu) >> 4} << 32) | (descriptor_layout(span) << 62);
}

// The descriptor of the operand starting at (mn0, k0) of `tile` stored at `tile_base`.
__device__ __forceinline__ uint64_t operand_descriptor(const void* tile_base,
                                                       const OperandTile& tile, int mn0, int k0) {
  return make_descriptor(shared_address(tile_base) + tile.start(mn0, k0), tile.lbo(), tile.sbo(),
                         tile.span);
}

// The same descriptor moved `bytes` (a multiple of 16) further in shared memory: stepping
// through k in the hot loop without recomputing the fields (no carry out of the 14-bit
// address field while the address stays below 256 KB).
__host__ __device__ constexpr uint64_t advance_descriptor(uint64_t desc, uint32_t bytes) {
  return desc + (bytes >> 4);
}

__device__ __forceinline__ void wgmma_fence() {
#if RUDNN_TC_SM90A
  asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
#endif
}
__device__ __forceinline__ void wgmma_commit() {
#if RUDNN_TC_SM90A
  asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
#endif
}
template <int kPending>
__device__ __forceinline__ void wgmma_wait() {
  static_assert(kPending >= 0 && kPending <= 7);
#if RUDNN_TC_SM90A
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(kPending) : "memory");
#endif
}
template <int kCount>
__device__ __forceinline__ void fence_operand(float (&acc)[kCount]) {
#pragma unroll
  for (int i = 0; i < kCount; ++i) asm volatile("" : "+f"(acc[i])::"memory");
}
template <int kCount>
__device__ __forceinline__ void fence_operand(uint32_t (&regs)[kCount]) {
#pragma unroll
  for (int i = 0; i < kCount; ++i) asm volatile("" : "+r"(regs[i])::"memory");
}

// Two FP32 values as one register of two 16-bit T (first in the low half).
template <class T>
__device__ __forceinline__ uint32_t pack_16bit(float lo, float hi) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&v);
  } else {
    const __half2 v = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&v);
  }
}

// Columns 16s .. 16s + 15 of an m64nN accumulator (d[8s .. 8s + 7]) as the A fragment of an
// rs wgmma (rounded to T).
template <class T, int kCount>
__device__ __forceinline__ void accumulator_to_a(uint32_t (&a)[4], const float (&d)[kCount],
                                                 int s) {
#pragma unroll
  for (int r = 0; r < 4; ++r) a[r] = pack_16bit<T>(d[8 * s + 2 * r], d[8 * s + 2 * r + 1]);
}

// clang-format off
// Per N: the accumulator operands, their %-list, and the operand numbers after them.
#define RUDNN_WGMMA_D_16 "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7])
#define RUDNN_WGMMA_R_16 "%0, %1, %2, %3, %4, %5, %6, %7"
#define RUDNN_WGMMA_I0_16 "8"
#define RUDNN_WGMMA_I1_16 "9"
#define RUDNN_WGMMA_I2_16 "10"
#define RUDNN_WGMMA_I3_16 "11"
#define RUDNN_WGMMA_I4_16 "12"
#define RUDNN_WGMMA_I5_16 "13"
#define RUDNN_WGMMA_I6_16 "14"
#define RUDNN_WGMMA_D_32 "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
#define RUDNN_WGMMA_R_32 "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15"
#define RUDNN_WGMMA_I0_32 "16"
#define RUDNN_WGMMA_I1_32 "17"
#define RUDNN_WGMMA_I2_32 "18"
#define RUDNN_WGMMA_I3_32 "19"
#define RUDNN_WGMMA_I4_32 "20"
#define RUDNN_WGMMA_I5_32 "21"
#define RUDNN_WGMMA_I6_32 "22"
#define RUDNN_WGMMA_D_64 "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
#define RUDNN_WGMMA_R_64 "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
#define RUDNN_WGMMA_I0_64 "32"
#define RUDNN_WGMMA_I1_64 "33"
#define RUDNN_WGMMA_I2_64 "34"
#define RUDNN_WGMMA_I3_64 "35"
#define RUDNN_WGMMA_I4_64 "36"
#define RUDNN_WGMMA_I5_64 "37"
#define RUDNN_WGMMA_I6_64 "38"
#define RUDNN_WGMMA_D_96 "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47])
#define RUDNN_WGMMA_R_96 "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47"
#define RUDNN_WGMMA_I0_96 "48"
#define RUDNN_WGMMA_I1_96 "49"
#define RUDNN_WGMMA_I2_96 "50"
#define RUDNN_WGMMA_I3_96 "51"
#define RUDNN_WGMMA_I4_96 "52"
#define RUDNN_WGMMA_I5_96 "53"
#define RUDNN_WGMMA_I6_96 "54"
#define RUDNN_WGMMA_D_128 "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
#define RUDNN_WGMMA_R_128 "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
#define RUDNN_WGMMA_I0_128 "64"
#define RUDNN_WGMMA_I1_128 "65"
#define RUDNN_WGMMA_I2_128 "66"
#define RUDNN_WGMMA_I3_128 "67"
#define RUDNN_WGMMA_I4_128 "68"
#define RUDNN_WGMMA_I5_128 "69"
#define RUDNN_WGMMA_I6_128 "70"
#define RUDNN_WGMMA_D_192 "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95])
#define RUDNN_WGMMA_R_192 "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95"
#define RUDNN_WGMMA_I0_192 "96"
#define RUDNN_WGMMA_I1_192 "97"
#define RUDNN_WGMMA_I2_192 "98"
#define RUDNN_WGMMA_I3_192 "99"
#define RUDNN_WGMMA_I4_192 "100"
#define RUDNN_WGMMA_I5_192 "101"
#define RUDNN_WGMMA_I6_192 "102"
#define RUDNN_WGMMA_D_256 "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
#define RUDNN_WGMMA_R_256 "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127"
#define RUDNN_WGMMA_I0_256 "128"
#define RUDNN_WGMMA_I1_256 "129"
#define RUDNN_WGMMA_I2_256 "130"
#define RUDNN_WGMMA_I3_256 "131"
#define RUDNN_WGMMA_I4_256 "132"
#define RUDNN_WGMMA_I5_256 "133"
#define RUDNN_WGMMA_I6_256 "134"
// clang-format on

#define RUDNN_WGMMA_SS(NN, AB)                                                              \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %" RUDNN_WGMMA_I2_##NN                     \
               ", 0;\nwgmma.mma_async.sync.aligned.m64n" #NN "k16.f32." AB "." AB           \
               " {" RUDNN_WGMMA_R_##NN "}, %" RUDNN_WGMMA_I0_##NN ", %" RUDNN_WGMMA_I1_##NN \
               ", p, 1, 1, %" RUDNN_WGMMA_I3_##NN ", %" RUDNN_WGMMA_I4_##NN ";\n}\n"        \
               : RUDNN_WGMMA_D_##NN                                                         \
               : "l"(desc_a), "l"(desc_b), "r"(scale_d), "n"(kTransA), "n"(kTransB))

#define RUDNN_WGMMA_RS(NN, AB)                                                                \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %" RUDNN_WGMMA_I5_##NN                       \
               ", 0;\nwgmma.mma_async.sync.aligned.m64n" #NN "k16.f32." AB "." AB             \
               " {" RUDNN_WGMMA_R_##NN "}, {%" RUDNN_WGMMA_I0_##NN ", %" RUDNN_WGMMA_I1_##NN  \
               ", %" RUDNN_WGMMA_I2_##NN ", %" RUDNN_WGMMA_I3_##NN "}, %" RUDNN_WGMMA_I4_##NN \
               ", p, 1, 1, %" RUDNN_WGMMA_I6_##NN ";\n}\n"                                    \
               : RUDNN_WGMMA_D_##NN                                                           \
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(scale_d),       \
                 "n"(kTransB))

#define RUDNN_WGMMA_FOR_EACH_N(X) X(16) X(32) X(64) X(96) X(128) X(192) X(256)
#define RUDNN_WGMMA_SS_BF16(NN) \
  if constexpr (N == NN) {      \
    RUDNN_WGMMA_SS(NN, "bf16"); \
  }
#define RUDNN_WGMMA_SS_F16(NN) \
  if constexpr (N == NN) {     \
    RUDNN_WGMMA_SS(NN, "f16"); \
  }
#define RUDNN_WGMMA_RS_BF16(NN) \
  if constexpr (N == NN) {      \
    RUDNN_WGMMA_RS(NN, "bf16"); \
  }
#define RUDNN_WGMMA_RS_F16(NN) \
  if constexpr (N == NN) {     \
    RUDNN_WGMMA_RS(NN, "f16"); \
  }

// D (+)= A * B, one m64nNk16 step. T is __nv_bfloat16 or __half. scale_d = 0 ignores D's old
// value (the first step of a tile), 1 accumulates. kMajorA / kMajorB: how the shared-memory
// operands are stored (the transpose bits).
template <class T, int N>
struct Wgmma {
  static_assert(std::is_same_v<T, __nv_bfloat16> || std::is_same_v<T, __half>,
                "wgmma here takes bf16 or f16 operands");
  static_assert(N == 16 || N == 32 || N == 64 || N == 96 || N == 128 || N == 192 || N == 256,
                "wgmma N sizes provided: 16, 32, 64, 96, 128, 192, 256");
  static constexpr int kAccumulators = N / 2;

  // A and B from shared memory.
  template <Major kMajorA, Major kMajorB>
  __device__ __forceinline__ static void ss(float (&d)[N / 2], uint64_t desc_a, uint64_t desc_b,
                                            uint32_t scale_d) {
#if RUDNN_TC_SM90A
    constexpr int kTransA = kMajorA == Major::MN ? 1 : 0;
    constexpr int kTransB = kMajorB == Major::MN ? 1 : 0;
    if constexpr (std::is_same_v<T, __nv_bfloat16>) {
      RUDNN_WGMMA_FOR_EACH_N(RUDNN_WGMMA_SS_BF16)
    } else {
      RUDNN_WGMMA_FOR_EACH_N(RUDNN_WGMMA_SS_F16)
    }
#endif
  }

  // A from registers (the fragment above), B from shared memory.
  template <Major kMajorB>
  __device__ __forceinline__ static void rs(float (&d)[N / 2], const uint32_t (&a)[4],
                                            uint64_t desc_b, uint32_t scale_d) {
#if RUDNN_TC_SM90A
    constexpr int kTransB = kMajorB == Major::MN ? 1 : 0;
    if constexpr (std::is_same_v<T, __nv_bfloat16>) {
      RUDNN_WGMMA_FOR_EACH_N(RUDNN_WGMMA_RS_BF16)
    } else {
      RUDNN_WGMMA_FOR_EACH_N(RUDNN_WGMMA_RS_F16)
    }
#endif
  }
};

#undef RUDNN_WGMMA_SS_BF16
#undef RUDNN_WGMMA_SS_F16
#undef RUDNN_WGMMA_RS_BF16
#undef RUDNN_WGMMA_RS_F16
#undef RUDNN_WGMMA_FOR_EACH_N
#undef RUDNN_WGMMA_SS
#undef RUDNN_WGMMA_RS

}  // namespace rudnn::cuda::tc
