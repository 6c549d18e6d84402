// The chunked gated delta rule on the GPU (both forms, through Chunked's strides; the algebra
// is in chunked_reference.cpp and the header). Three kernels, fla's split: only the second walks
// a sequence's chunks in order, and it does just the two products the state depends on.
//   prepare (parallel, one block per (chunk, head)): G (the running log decay), A = strictly
//     lower (beta K K^T * exp(G_i - G_j)) in FP32 shared memory, T = (I + A)^-1 solved in
//     place (T^T kept in A's unused upper triangle: one Cp^2 FP32 block holds both), then
//     W = T (beta exp(G) K), U = T (beta V) and the masked, decayed, scaled Q K^T, written to
//     the workspace in q's dtype (FP32 for F32 inputs), with the chunk's decay factors.
//   state (sequential over a sequence's chunks, one block per (sequence, head, 32 or 64 value
//     columns)): the FP32 state slab S lives in registers as the accumulators of the update
//     product; per chunk it writes S_c (rounded to q's dtype) to the workspace, V' = U - W S_c
//     over U's place there, and S = exp(G_last) S + K^T (V' exp(G_last - G)). W, K, U and the
//     factors of the next chunks are copied by cp.async during this chunk's products (three
//     stages when the blocks are one an SM anyway, else two; one when two do not fit).
//   output (parallel, one block per (chunk, head, up to 128 value columns)): O = scale
//     exp(G) (Q S_c) + (Q K^T) V'.
// The products are warp tiles of 16 x 8 (mma.sync m16n8k16 for bf16/f16 with FP32
// accumulation; FP32 FMAs in the same lane layout for F32). Chunks are padded to Cp (a
// multiple of 16) with zero rows (zero k, q, v and beta: they change nothing), K and V to
// multiples of 16 with zero columns.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "core/cuda_check.h"
#include "cuda/launch.cuh"
#include "cuda/tensor_core/mma_sync.cuh"
#include "cuda/types.cuh"
#include "gated_delta/cuda/launch.h"
#include "gated_delta/cuda/scalars.cuh"
#include "gated_delta/cuda/slots.cuh"
#include "gated_delta/cuda/tuning.h"

namespace rudnn::gdn::cuda::chunk {

using rudnn::cuda::from_float;
using rudnn::cuda::to_float;

constexpr int kPrepThreads = 256;
constexpr int kStateThreads = 256;
constexpr int kOutThreads = 256;
// Value columns per state block. (Measured, S9 round B: 16 columns, two blocks an SM for
// B1 H32, were no faster: 3.51 against 3.43 ms, and slower for B4 H16: 0.91 against 0.75.)
constexpr int kSlab = 32;
// Value columns per output block (fewer when they do not fit): 64 rather than all of a
// 128-wide V so that four blocks fit an SM (about 54 KB each at chunk 64, K = 128, 16-bit)
// instead of two; the second block of a chunk reads Q and Q K^T again, from L2.
constexpr int kMaxOutCols = 64;

__host__ __device__ constexpr int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

// The output kernel's shared memory for `vo` value columns a block: Q [Cp][ldk], S_c
// [Kp][vo + pad], Q K^T [Cp][ldc], V' [Cp][vo + pad], G [Cp].
struct OutLayout {
  int64_t ldo, q, s, a, v, g, bytes;
};

// The state kernel's shared memory for `cols` value columns a block: S_c [Kp][ldv] and
// V' exp(G_last - G) [Cp][ldv], then per operand stage W and K [Cp][ldk], U [Cp][ldv], G [Cp].
struct StateLayout {
  int64_t ldv, s, vk, single, w, k, u, g, stage;
  __host__ __device__ int64_t bytes(int stages) const { return single + stages * stage; }
};

// A bump allocator over one buffer (a kernel's shared memory, the workspace): each take
// returns the next free byte offset and moves past `bytes`, rounded up to `align`.
struct Carve {
  int64_t at = 0, align;
  __host__ __device__ explicit Carve(int64_t a) : align(a) {}
  __host__ __device__ int64_t take(int64_t bytes) {
    const int64_t here = at;
    at = round_up(at + bytes, align);
    return here;
  }
};

// Sizes, strides and the shared/global layouts, the same on the host and the device. Rows of
// 16-bit tiles are padded by 16 bytes so that the eight rows of a fragment fall in different
// banks.
struct Geometry {
  int64_t C, Cp, Kp, Vp, chunks_per_seq, slots;
  int64_t pad, ldk, ldx, ldc, lda;
  int64_t item;
  // Per (chunk slot, head) the decay factors prepare computes once for the other two kernels
  // (so that their loops evaluate no exponential): [0, Cp) scale exp(G_i) for the output,
  // [Cp, 2 Cp) exp(G_last - G_i) (0 past the chunk's rows) and [2 Cp] exp(G_last) for the
  // state pass, zeros to the end of a 64-byte multiple. Floats.
  int64_t fstride;
  // byte offsets
  int64_t prep_ks, prep_xs, prep_a, prep_x, prep_t16, prep_g, prep_z, prep_b, prep_bytes;
  int64_t ws_w, ws_u, ws_a, ws_g, ws_s, ws_cf, ws_t, ws_bytes;

  __host__ __device__ explicit Geometry(const Chunked& p) {
    item = p.dtype == DType::f32 ? 4 : 2;
    C = p.chunk;
    Cp = round_up(C, 16);
    Kp = round_up(p.key_dim, 16);
    Vp = round_up(p.value_dim, 16);
    chunks_per_seq = (p.steps + C - 1) / C;
    slots = p.cu_seqlens == nullptr ? p.batch * chunks_per_seq : chunks_per_seq + p.batch;
    pad = 16 / item;
    ldk = Kp + pad;
    ldx = (Kp > Vp ? Kp : Vp) + pad;
    ldc = Cp + pad;
    lda = Cp + 1;
    Carve sm(16);
    prep_ks = sm.take(Cp * ldk * item);
    prep_xs = sm.take(Cp * ldx * item);
    prep_a = sm.take(Cp * lda * 4);
    prep_x = sm.take(16 * Cp * 4);
    prep_t16 = sm.take(item == 2 ? Cp * ldc * item : 0);
    prep_g = sm.take(Cp * 4);
    prep_z = sm.take(Cp * 4);
    prep_b = sm.take(Cp * 4);
    prep_bytes = sm.at;
    Carve wk(256);
    const int64_t units = slots * p.value_heads;
    ws_w = wk.take(units * Cp * Kp * item);
    ws_u = wk.take(units * Cp * Vp * item);
    ws_a = wk.take(units * Cp * Cp * item);
    fstride = 2 * Cp + 16;
    ws_g = wk.take(units * fstride * 4);
    ws_s = wk.take(units * Kp * Vp * item);
    ws_cf = wk.take((p.batch + 1) * 4);
    ws_t = p.keep_wy ? wk.take(units * Cp * Cp * item) : -1;  // T per unit, q's dtype
    ws_bytes = wk.at;
  }

  __host__ __device__ StateLayout state_layout(int64_t cols) const {
    StateLayout l{};
    l.ldv = cols + pad;
    Carve single(16);
    l.s = single.take(Kp * l.ldv * item);
    l.vk = single.take(Cp * l.ldv * item);
    l.single = single.at;
    Carve stage(16);
    l.w = stage.take(Cp * ldk * item);
    l.k = stage.take(Cp * ldk * item);
    l.u = stage.take(Cp * l.ldv * item);
    l.g = stage.take((Cp + 16) * 4);
    l.stage = stage.at;
    return l;
  }

  __host__ __device__ OutLayout out_layout(int64_t vo) const {
    OutLayout o{};
    o.ldo = vo + pad;
    Carve sm(16);
    o.q = sm.take(Cp * ldk * item);
    o.s = sm.take(Kp * o.ldo * item);
    o.a = sm.take(Cp * ldc * item);
    o.v = sm.take(Cp * o.ldo * item);
    o.g = sm.take(Cp * 4);
    o.bytes = sm.at;
    return o;
  }
};

// A product operand viewed as (mn, k): element at p[mn * ld + k] when kMajor, else p[k * ld +
// mn] (16-byte aligned rows, ld a multiple of 8 elements for the 16-bit types). The fragment
// loads are ldmatrix (.trans for the MN-contiguous layout), see docs/tensor_cores.md.
template <class T, bool kMajor>
struct Op {
  const T* p;
  int64_t ld;
  __device__ __forceinline__ float at(int mn, int k) const {
    return to_float(kMajor ? p[mn * ld + k] : p[k * ld + mn]);
  }
  // The m16n8k16 A fragment of rows [m0, m0 + 16) and columns [k, k + 16).
  __device__ __forceinline__ void a_frag(uint32_t (&a)[4], int m0, int k) const {
    const int l = threadIdx.x % 32, q = l / 8, r = l % 8;
    if constexpr (kMajor)
      rudnn::cuda::tc::ldmatrix<4, false>(a, p + (m0 + 8 * (q % 2) + r) * ld + k + 8 * (q / 2));
    else
      rudnn::cuda::tc::ldmatrix<4, true>(a, p + (k + 8 * (q / 2) + r) * ld + m0 + 8 * (q % 2));
  }
  // The B fragment of columns [n0, n0 + 8) and rows [k, k + 16) (lanes 16..31 repeat 0..15's
  // addresses, which ldmatrix.x2 ignores).
  __device__ __forceinline__ void b_frag(uint32_t (&b)[2], int n0, int k) const {
    const int l = threadIdx.x % 32, q = (l / 8) % 2, r = l % 8;
    if constexpr (kMajor)
      rudnn::cuda::tc::ldmatrix<2, false>(b, p + (n0 + r) * ld + k + 8 * q);
    else
      rudnn::cuda::tc::ldmatrix<2, true>(b, p + (k + 8 * q + r) * ld + n0);
  }
  // The B fragments of the kN column tiles [n0 + 8 j, +8), rows [k, k + 16): two tiles a
  // ldmatrix.x4 (half the load instructions of an .x2 each), an odd last one by .x2.
  template <int kN>
  __device__ __forceinline__ void b_frags(uint32_t (&b)[kN][2], int n0, int k) const {
    const int l = threadIdx.x % 32, q = l / 8, r = l % 8;
#pragma unroll
    for (int j = 0; j + 1 < kN; j += 2) {
      uint32_t x[4];
      if constexpr (kMajor)
        rudnn::cuda::tc::ldmatrix<4, false>(
            x, p + (n0 + 8 * j + 8 * (q / 2) + r) * ld + k + 8 * (q % 2));
      else
        rudnn::cuda::tc::ldmatrix<4, true>(
            x, p + (k + 8 * (q % 2) + r) * ld + n0 + 8 * j + 8 * (q / 2));
      b[j][0] = x[0];
      b[j][1] = x[1];
      b[j + 1][0] = x[2];
      b[j + 1][1] = x[3];
    }
    if constexpr (kN % 2 == 1) b_frag(b[kN - 1], n0 + 8 * (kN - 1), k);
  }
};

// acc[j] += A[m0 .. m0+16, 0 .. K) B[0 .. K, n0+8j .. n0+8j+8) for j < kN: this lane's four
// values of each 16 x 8 tile, (g, 2t), (g, 2t+1), (g+8, 2t), (g+8, 2t+1) (g = lane / 4,
// t = lane % 4); the A fragment is loaded once for the kN tiles. K a multiple of 16.
template <class T, int kN, class OA, class OB>
__device__ __forceinline__ void tile_mma(float (&acc)[kN][4], const OA& a, const OB& b, int m0,
                                         int n0, int K) {
  const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  if constexpr (std::is_same_v<T, float>) {
    for (int k = 0; k < K; ++k) {
      const float a0 = a.at(m0 + g, k), a1 = a.at(m0 + g + 8, k);
#pragma unroll
      for (int j = 0; j < kN; ++j) {
        const float b0 = b.at(n0 + 8 * j + 2 * t, k), b1 = b.at(n0 + 8 * j + 2 * t + 1, k);
        acc[j][0] = fmaf(a0, b0, acc[j][0]);
        acc[j][1] = fmaf(a0, b1, acc[j][1]);
        acc[j][2] = fmaf(a1, b0, acc[j][2]);
        acc[j][3] = fmaf(a1, b1, acc[j][3]);
      }
    }
  } else {
#pragma unroll 4
    for (int k = 0; k < K; k += 16) {
      uint32_t af[4], bf[kN][2];
      a.a_frag(af, m0, k);
      b.template b_frags<kN>(bf, n0, k);
#pragma unroll
      for (int j = 0; j < kN; ++j) rudnn::cuda::tc::mma_16816<T>(acc[j], af, bf[j]);
    }
  }
}

// Two products over [0, K) in one pass whose operands share fragments: acc0 += A0 B0 and
// acc1 += A1 B1 where kShareA (A1 is A0: its fragment is loaded once) or else B1 is B0 (its
// fragments loaded once). Fewer ldmatrix than two tile_mma calls: the prepare kernel is bound
// by shared-memory traffic.
template <class T, bool kShareA, int kN, class OA0, class OB0, class OA1, class OB1>
__device__ __forceinline__ void tile_mma_two(float (&acc0)[kN][4], float (&acc1)[kN][4],
                                             const OA0& a0, const OB0& b0, const OA1& a1,
                                             const OB1& b1, int m0, int n0, int K) {
  if constexpr (std::is_same_v<T, float>) {
    tile_mma<T>(acc0, a0, b0, m0, n0, K);
    tile_mma<T>(acc1, a1, b1, m0, n0, K);
  } else {
#pragma unroll 2
    for (int k = 0; k < K; k += 16) {
      uint32_t af0[4], af1[4], bf0[kN][2], bf1[kN][2];
      a0.a_frag(af0, m0, k);
      if constexpr (!kShareA) a1.a_frag(af1, m0, k);
      b0.template b_frags<kN>(bf0, n0, k);
      if constexpr (kShareA) b1.template b_frags<kN>(bf1, n0, k);
#pragma unroll
      for (int j = 0; j < kN; ++j) {
        rudnn::cuda::tc::mma_16816<T>(acc0[j], af0, bf0[j]);
        rudnn::cuda::tc::mma_16816<T>(acc1[j], kShareA ? af0 : af1, kShareA ? bf1[j] : bf0[j]);
      }
    }
  }
}

// The row and column of a lane's accumulator value e (0..3) in the 16 x 8 tile at (m0, n0).
__device__ __forceinline__ int tile_row(int m0, int e) {
  return m0 + (threadIdx.x % 32) / 4 + 8 * (e / 2);
}
__device__ __forceinline__ int tile_col(int n0, int e) {
  return n0 + 2 * (threadIdx.x % 4) + e % 2;
}

// Calls f(jt, e, row, col) for each pair of this lane's accumulator values of kN adjacent
// 16 x 8 tiles from (m0, n0): acc[jt][e] at (row, col) and acc[jt][e + 1] at (row, col + 1),
// e = 0, 2. The one place that knows the m16n8 accumulator layout, for every epilogue.
template <int kN, class F>
__device__ __forceinline__ void for_pairs(int m0, int n0, F&& f) {
#pragma unroll
  for (int jt = 0; jt < kN; ++jt)
#pragma unroll
    for (int e = 0; e < 4; e += 2) f(jt, e, tile_row(m0, e), tile_col(n0 + 8 * jt, e));
}

// Calls f(m0, n0) for this warp's share of the 16 x (8 kN) tiles of an M x N product (N a
// multiple of 8 kN).
template <int kN, class F>
__device__ __forceinline__ void for_tiles(int M, int N, F&& f) {
  const int warp = threadIdx.x / 32, warps = blockDim.x / 32;
  const int tn = N / (8 * kN), tiles = (M / 16) * tn;
  for (int i = warp; i < tiles; i += warps) f((i / tn) * 16, (i % tn) * 8 * kN);
}

// Offsets of element (batch entry, value head h, step t, 0) of q / k (h's key head), of v / y,
// and of the gate / beta.
__device__ __forceinline__ int64_t qk_at(const Chunked& p, int64_t entry, int64_t h, int64_t t) {
  const unsigned key_head = unsigned(h) / (unsigned(p.value_heads) / unsigned(p.key_heads));
  return entry * p.qk_b + t * p.qk_t + int64_t(key_head) * p.qk_h;
}
__device__ __forceinline__ int64_t v_at(const Chunked& p, int64_t entry, int64_t h, int64_t t) {
  return entry * p.v_b + t * p.v_t + h * p.v_h;
}
__device__ __forceinline__ int64_t g_at(const Chunked& p, int64_t entry, int64_t h, int64_t t) {
  return entry * p.g_b + t * p.g_t + h * p.g_h;
}

// The decay between two steps of a chunk, the product of the gates after j up to i, kept exact
// where a gate is zero (spec 000's log decay -inf, a reset) or negative (spec 003's gate), for
// which a running sum of logs alone gives NaN: per step the running sum of log |decay| (g) and
// a code (code) counting the zero decays (in units of kZeroDecay) and the negative ones.
constexpr int kZeroDecay = 256;  // above kMaxChunk, so that negative counts never reach it
struct ChunkDecay {
  const float* g;
  const int* code;
  // prod_{j < m <= i} decay_m (i >= j): exp(g_i - g_j), as the plain form computes it.
  __device__ __forceinline__ float between(int i, int j) const {
    const int d = code[i] - code[j];
    if (d >= kZeroDecay) return 0.0f;
    const float e = expf(g[i] - g[j]);
    return d & 1 ? -e : e;
  }
  // prod_{m <= i} decay_m.
  __device__ __forceinline__ float through(int i) const {
    const int c = code[i];
    if (c >= kZeroDecay) return 0.0f;
    const float e = expf(g[i]);
    return c & 1 ? -e : e;
  }
};

// One step's gate as (log |decay|, code): spec 000's log decay as it is (-inf: a zero decay),
// spec 003's gate through its logarithm and sign.
__device__ __forceinline__ float log_decay_of(float gate, bool log_gate, int& code) {
  if (log_gate) {
    code = gate == -__builtin_huge_valf() ? kZeroDecay : 0;
    return code != 0 ? 0.0f : gate;
  }
  code = gate == 0.0f ? kZeroDecay : (gate < 0.0f ? 1 : 0);
  return gate == 0.0f ? 0.0f : logf(fabsf(gate));
}

// Sequence n's steps [first, last) of batch entry `entry` (cu_seqlens clamped into [0, T]).
struct Range {
  int64_t entry, first, last;
};
__device__ __forceinline__ Range sequence_range(const Chunked& p, int64_t n) {
  if (p.cu_seqlens == nullptr) return {n, 0, p.steps};
  const int64_t first = min(max(int64_t(p.cu_seqlens[n]), int64_t(0)), p.steps);
  const int64_t last = min(max(int64_t(p.cu_seqlens[n + 1]), first), p.steps);
  return {0, first, last};
}

// Varlen: the first chunk slot of each sequence (a prefix sum of their chunk counts, capped
// at the workspace's slots so that bad offsets can never address past it), on the device so
// that the host never reads cu_seqlens. One block: thread i sums a run of sequences, thread 0
// scans the runs' totals, each thread writes its run's prefix.
constexpr int kTableThreads = 256;
template <class T>
__global__ void __launch_bounds__(kTableThreads)
    chunk_first_kernel(const Chunked p, int32_t* first_slot) {
  __shared__ int64_t run_start[kTableThreads];
  const Geometry geo(p);
  const int64_t per = (p.batch + kTableThreads - 1) / kTableThreads;
  const int64_t n0 = threadIdx.x * per, n1 = min(n0 + per, p.batch);
  auto chunks = [&](int64_t n) {
    const Range r = sequence_range(p, n);
    return (r.last - r.first + geo.C - 1) / geo.C;
  };
  int64_t total = 0;
  for (int64_t n = n0; n < n1; ++n) total += chunks(n);
  run_start[threadIdx.x] = total;
  __syncthreads();
  if (threadIdx.x == 0) {
    int64_t acc = 0;
    for (int i = 0; i < kTableThreads; ++i) {
      const int64_t t = run_start[i];
      run_start[i] = acc;
      acc += t;
    }
  }
  __syncthreads();
  int64_t acc = run_start[threadIdx.x];
  if (threadIdx.x == 0) first_slot[0] = 0;
  for (int64_t n = n0; n < n1; ++n) {
    acc += chunks(n);
    first_slot[n + 1] = int32_t(min(acc, geo.slots));
  }
}

// This thread's share of a grid `cols` wide walked row-major by `count` threads from `first`
// (i = threadIdx.x - first, + count, ...; r = i / cols, c = i % cols): its first cell and the
// step between its cells. The divisions happen once, where the walk is made; the sequential
// kernels make theirs before their chunk loop, since a division by a runtime value costs
// about 20 instructions and these copies sit on their critical path (round 73's SourceCounters:
// 830 of dstate's 2,047 instructions a warp per chunk went to its copies).
struct GridWalk {
  int cols, r, c, dr, dc;
  __device__ explicit GridWalk(int cols_, int first = 0, int count = int(blockDim.x))
      : cols(cols_), r(0), c(0), dr(0), dc(0) {
    if (cols <= 0) return;
    const int i = int(threadIdx.x) - first;
    r = i / cols;
    c = i % cols;
    dr = count / cols;
    dc = count % cols;
  }
};

// Calls f(r, c) for each of this thread's cells of `walk` in rows [0, rows).
template <class F>
__device__ __forceinline__ void for_grid(int rows, const GridWalk& walk, F&& f) {
  if (walk.cols <= 0) return;
  int r = walk.r, c = walk.c;
  if (walk.dc == 0) {  // the block's threads cover whole rows: this thread keeps its column
    for (; r < rows; r += walk.dr) f(r, c);
    return;
  }
  while (r < rows) {
    f(r, c);
    r += walk.dr;
    c += walk.dc;
    if (c >= walk.cols) {
      c -= walk.cols;
      ++r;
    }
  }
}
template <class F>
__device__ __forceinline__ void for_grid(int rows, int cols, F&& f) {
  for_grid(rows, GridWalk(cols), f);
}

// How copy_tile walks a tile `cols` elements wide: by 16-byte pieces with cp.async (async),
// else by elements with plain copies. Made once for a loop that copies the same shape every
// iteration.
template <class T>
struct TileWalk {
  bool async;
  GridWalk walk;
  __device__ TileWalk(int cols, bool async_)
      : async(async_), walk(async_ ? cols / (16 / int(sizeof(T))) : cols) {}
};

// Copies a rows x cols tile (row-major, `ld_src` apart; cols as in `how`) into shared memory
// (`ld_dst` apart), zeros past rows_valid / cols_valid. async: 16-byte cp.async with zero
// fill, joining the thread's current group (cols and cols_valid whole 16-byte chunks, both
// sides 16-byte aligned); else plain loads and stores, visible after the next __syncthreads.
// Offsets inside a tile are 32-bit (rows and ld_src at most a few hundred; src carries the
// 64-bit part).
template <class T>
__device__ __forceinline__ void copy_tile(T* dst, int ld_dst, const T* src, int ld_src, int rows,
                                          int rows_valid, const TileWalk<T>& how,
                                          int cols_valid) {
  if (how.async) {
    constexpr int per = 16 / int(sizeof(T));
    for_grid(rows, how.walk, [&](int r, int piece) {
      const int c = piece * per;
      const bool in = r < rows_valid && c < cols_valid;
      rudnn::cuda::tc::cp_async_16(dst + r * ld_dst + c, src + (in ? r * ld_src + c : 0),
                                   in ? 16u : 0u);
    });
  } else {
    const T zero = from_float<T>(0.0f);
    for_grid(rows, how.walk, [&](int r, int c) {
      dst[r * ld_dst + c] = r < rows_valid && c < cols_valid ? src[r * ld_src + c] : zero;
    });
  }
}
template <class T>
__device__ __forceinline__ void copy_tile(T* dst, int ld_dst, const T* src, int ld_src, int rows,
                                          int rows_valid, int cols, int cols_valid, bool async) {
  copy_tile<T>(dst, ld_dst, src, ld_src, rows, rows_valid, TileWalk<T>(cols, async), cols_valid);
}

// One row of `cols` elements (whole 16-byte pieces, both sides 16-byte aligned) into shared
// memory by cp.async, joining the thread's current group: no walk to make.
template <class T>
__device__ __forceinline__ void copy_row(T* dst, const T* src, int cols) {
  constexpr int per = 16 / int(sizeof(T));
  for (int i = int(threadIdx.x); i < cols / per; i += int(blockDim.x))
    rudnn::cuda::tc::cp_async_16(dst + i * per, src + i * per, 16u);
}

// T = (I + A)^-1 as an FP32 operand (the F32 path): T[i][j] (i > j) at a[j * lda + i].
struct TriView {
  const float* a;
  int lda;
  __device__ __forceinline__ float at(int i, int j) const {
    return i == j ? 1.0f : (i > j ? a[j * lda + i] : 0.0f);
  }
};

// Two adjacent values of a row as one store (dst: an even column of a row whose start is
// aligned to two elements), to shared or global memory.
template <class T>
__device__ __forceinline__ void store_pair(T* dst, float a, float b) {
  if constexpr (std::is_same_v<T, float>)
    *reinterpret_cast<float2*>(dst) = make_float2(a, b);
  else if constexpr (std::is_same_v<T, __half>)
    *reinterpret_cast<__half2*>(dst) = __floats2half2_rn(a, b);
  else
    *reinterpret_cast<__nv_bfloat162*>(dst) = __floats2bfloat162_rn(a, b);
}

// Row r of a rows x cols tile in shared memory (`ld_src` apart, rows 16-byte aligned, cols
// whole 16-byte pieces) times b * e, (b, e) = f(r), into dst (`ld_dst` apart; dst may be src):
// x * b * e rounded to T once. `pieces` walks the cols / (16 / sizeof(T)) pieces of a row, a
// 16-byte piece a cell (8 or 4 elements: fewer shared-memory instructions than one element a
// lane).
template <class T, class F>
__device__ __forceinline__ void scale_rows(const T* src, int ld_src, T* dst, int ld_dst, int rows,
                                           const GridWalk& pieces, F&& f) {
  constexpr int per = 16 / int(sizeof(T));
  for_grid(rows, pieces, [&](int r, int piece) {
    uint4 raw = *reinterpret_cast<const uint4*>(src + r * ld_src + piece * per);
    T* v = reinterpret_cast<T*>(&raw);
    const float2 be = f(r);
#pragma unroll
    for (int j = 0; j < per; ++j) v[j] = from_float<T>(to_float(v[j]) * be.x * be.y);
    *reinterpret_cast<uint4*>(dst + r * ld_dst + piece * per) = raw;
  });
}
// In place, over threads `first`, `first` + 1, ... of the block's `count` from `first`.
template <class T, class F>
__device__ __forceinline__ void scale_rows(T* x, int ld, int rows, int cols, int first, int count,
                                           F&& f) {
  scale_rows(x, ld, x, ld, rows, GridWalk(cols / (16 / int(sizeof(T))), first, count), f);
}

// Where chunk slot `slot` lies: its sequence's range, its first step and its row count
// (rows <= 0: a varlen slot past the last sequence's chunks, nothing to do), and the sequence.
struct Place {
  Range range;
  int64_t t0;
  int rows;
  int64_t n;
};
__device__ __forceinline__ Place locate(const Chunked& p, const Geometry& geo,
                                        const unsigned char* ws, int64_t slot) {
  int64_t n, local;
  if (p.cu_seqlens == nullptr) {
    n = slot / geo.chunks_per_seq;
    local = slot % geo.chunks_per_seq;
  } else {
    const int32_t* cf = reinterpret_cast<const int32_t*>(ws + geo.ws_cf);
    if (slot >= cf[p.batch]) return {{0, 0, 0}, 0, 0, 0};
    int64_t lo = 0, hi = p.batch - 1;  // the last n with cf[n] <= slot
    while (lo < hi) {
      const int64_t mid = (lo + hi + 1) / 2;
      if (cf[mid] <= slot)
        lo = mid;
      else
        hi = mid - 1;
    }
    n = lo;
    local = slot - cf[n];
  }
  const Range r = sequence_range(p, n);
  const int64_t t0 = r.first + local * geo.C;
  return {r, t0, int(min(geo.C, r.last - t0)), n};
}

// Each step's beta (Bs) and (log |decay|, code) (ChunkDecay), zero past the chunk's L rows (no
// decay of their own); then G and the codes as running sums in place (Gs, Zs: Cp entries).
// The block's first warp scans; the caller's barrier makes the sums visible.
__device__ __forceinline__ void chunk_decay_and_beta(const Chunked& p, int64_t gate0, int L,
                                                     int Cp, float* Bs, float* Gs, int* Zs) {
  for (int i = threadIdx.x; i < Cp; i += blockDim.x) {
    int code = 0;
    Bs[i] = i < L ? load_any(p.beta, gate0 + i * p.g_t, p.beta_dtype) : 0.0f;
    Gs[i] = i < L ? log_decay_of(load_any(p.gate, gate0 + i * p.g_t, p.gate_dtype),
                                 p.log_gate, code)
                  : 0.0f;
    Zs[i] = code;
  }
  __syncthreads();
  if (threadIdx.x < 32) {  // each lane sums a run of Cp / 32 (<= 4) steps, then a warp scan
    constexpr int kMaxRun = int(kMaxChunk) / 32;
    const int lane = threadIdx.x, run = (Cp + 31) / 32;
    float x[kMaxRun];
    int xc[kMaxRun];
    float sum = 0.0f;
    int csum = 0;
#pragma unroll
    for (int j = 0; j < kMaxRun; ++j) {
      const int i = lane * run + j;
      const bool in = j < run && i < Cp;
      sum += in ? Gs[i] : 0.0f;
      csum += in ? Zs[i] : 0;
      x[j] = sum;
      xc[j] = csum;
    }
    float before = sum;
    int cbefore = csum;
#pragma unroll
    for (int d = 1; d < 32; d *= 2) {
      const float other = __shfl_up_sync(0xffffffffu, before, d);
      const int cother = __shfl_up_sync(0xffffffffu, cbefore, d);
      if (lane >= d) {
        before += other;
        cbefore += cother;
      }
    }
    before -= sum;  // exclusive
    cbefore -= csum;
    __syncwarp();  // every lane has read its run before any is overwritten
#pragma unroll
    for (int j = 0; j < kMaxRun; ++j) {
      const int i = lane * run + j;
      if (j < run && i < Cp) {
        Gs[i] = before + x[j];
        Zs[i] = cbefore + xc[j];
      }
    }
  }
}

// One block per (chunk slot, head) unit, three an SM for 16-bit (their shared memory allows
// it; F32: two, and more registers). At three, 16-bit spills a few bytes at its 80-register
// cap; two blocks an SM without the spill measured slower (round 72). (A persistent form whose
// blocks prefetched their next unit's K and Q measured slower: round 50.)
template <class T>
__global__ void __launch_bounds__(kPrepThreads, sizeof(T) == 4 ? 2 : 3)
    prepare_kernel(const Chunked p, unsigned char* ws) {
  extern __shared__ __align__(16) unsigned char smem[];
  const Geometry geo(p);
  const int64_t H = p.value_heads, Dk = p.key_dim, Dv = p.value_dim;
  const int Cp = int(geo.Cp), Kp = int(geo.Kp), Vp = int(geo.Vp);
  const int64_t units = geo.slots * H;

  float* Af = reinterpret_cast<float*>(smem + geo.prep_a);
  float* Xf = reinterpret_cast<float*>(smem + geo.prep_x);
  T* T16 = reinterpret_cast<T*>(smem + geo.prep_t16);
  float* Gs = reinterpret_cast<float*>(smem + geo.prep_g);
  int* Zs = reinterpret_cast<int*>(smem + geo.prep_z);
  const ChunkDecay decay{Gs, Zs};
  float* Bs = reinterpret_cast<float*>(smem + geo.prep_b);
  const int ldk = int(geo.ldk), ldx = int(geo.ldx), ldc = int(geo.ldc), lda = int(geo.lda);
  T* const Ks = reinterpret_cast<T*>(smem + geo.prep_ks);
  T* const Xs = reinterpret_cast<T*>(smem + geo.prep_xs);
  // K and Q of unit u (at pl) into Ks and Xs, one cp.async group (empty for an empty varlen
  // slot).
  auto issue_kq = [&](const Place& pl, int64_t u) {
    if (pl.rows > 0) {
      const int64_t at = qk_at(p, pl.range.entry, u % H, pl.t0);
      copy_tile<T>(Ks, ldk, static_cast<const T*>(p.k) + at, int(p.qk_t), Cp, pl.rows, Kp,
                   int(Dk), p.async_qk);
      copy_tile<T>(Xs, ldx, static_cast<const T*>(p.q) + at, int(p.qk_t), Cp, pl.rows, Kp,
                   int(Dk), p.async_qk);
    }
    rudnn::cuda::tc::cp_async_commit();
  };

  for (int64_t unit = blockIdx.x; unit < units; unit += gridDim.x) {
    const Place pl = locate(p, geo, ws, unit / H);
    const int L = pl.rows;  // <= 0: an empty varlen slot
    issue_kq(pl, unit);
    const int64_t h = unit % H;
    const T* v = static_cast<const T*>(p.v) + (L > 0 ? v_at(p, pl.range.entry, h, pl.t0) : 0);
    const int64_t gate0 = L > 0 ? g_at(p, pl.range.entry, h, pl.t0) : 0;

    if (L > 0) chunk_decay_and_beta(p, gate0, L, Cp, Bs, Gs, Zs);
    rudnn::cuda::tc::cp_async_wait<0>();
    __syncthreads();
    if (L <= 0) continue;  // (uniform over the block; the barrier below is skipped by all)
    // A (strictly lower) into Af; Q K^T (lower, diagonal included) straight to the workspace.
    // One pass over the tiles: both products share the decay factors exp(G_i - G_j).
    T* Ag = reinterpret_cast<T*>(ws + geo.ws_a) + unit * geo.Cp * geo.Cp;
    for_tiles<2>(Cp, Cp, [&](int m0, int n0) {
      float kk[2][4] = {}, qk[2][4] = {};
      if (n0 <= m0 + 15) {  // not wholly above the diagonal
        const Op<T, true> ko{Ks, ldk};
        tile_mma_two<T, false>(kk, qk, ko, ko, Op<T, true>{Xs, ldx}, ko, m0, n0, Kp);
      }
      for_pairs<2>(m0, n0, [&](int jt, int e, int i, int j) {
        const float d0 = j <= i ? decay.between(i, j) : 0.0f;
        const float d1 = j + 1 <= i ? decay.between(i, j + 1) : 0.0f;
        if (j < i) Af[i * lda + j] = Bs[i] * kk[jt][e] * d0;
        if (j + 1 < i) Af[i * lda + j + 1] = Bs[i] * kk[jt][e + 1] * d1;
        store_pair(Ag + int64_t(i) * Cp + j, j <= i ? p.scale * qk[jt][e] * d0 : 0.0f,
                   j + 1 <= i ? p.scale * qk[jt][e + 1] * d1 : 0.0f);
      });
    });
    __syncthreads();

    // T = (I + A)^-1. T[i][j] (i > j) is stored at Af[j][i]; its diagonal is 1 (implicit).
    // V into Q's place (Q K^T is done), landing while T is solved.
    copy_tile<T>(Xs, ldx, v, int(p.v_t), Cp, L, Vp, int(Dv), p.async_v);
    rudnn::cuda::tc::cp_async_commit();
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, warps = blockDim.x / 32;
    const int solver_warps = (Cp + 31) / 32;  // <= 4 of the 8
    // 1) The 16 x 16 diagonal blocks, one thread per column: forward substitution. The other
    //    warps meanwhile scale K in place to beta exp(G) K.
    if (warp >= solver_warps) {
      scale_rows(Ks, ldk, Cp, Kp, 32 * solver_warps, 32 * (warps - solver_warps),
                 [&](int r) { return make_float2(Bs[r], decay.through(r)); });
    } else if (threadIdx.x < Cp) {
      const int base = threadIdx.x / 16 * 16, c = threadIdx.x % 16;
      float x[16];
#pragma unroll
      for (int rr = 0; rr < 16; ++rr) {
        float s = rr == c ? 1.0f : 0.0f;
#pragma unroll
        for (int m = 0; m < rr; ++m) s -= Af[(base + rr) * lda + base + m] * x[m];
        x[rr] = s;
      }
#pragma unroll
      for (int rr = 0; rr < 16; ++rr)
        if (rr > c) Af[(base + c) * lda + base + rr] = x[rr];
    }
    __syncthreads();
    // 2) Block row bi from the rows above: T_bi,j = -T_bi,bi sum_{m=j}^{bi-1} A_bi,m T_m,j.
    //    Thread (rr, cc) of the 16 x 16 grid (kPrepThreads = 256) computes column cc of every
    //    16-column block bc < bi; each sum's terms in ascending m. The walk goes over the
    //    16-blocks bm of A's row once, loading them into registers for all the bc <= bm that
    //    use them (shared-memory loads are what this kernel is bound by); the loops over a
    //    16-block are unrolled with the triangles as predicates, so that the loads issue
    //    together.
    static_assert(kPrepThreads == 256, "the block-row solve maps one thread per 16 x 16 element");
    constexpr int kBlocks = int(kMaxChunk) / 16;
    auto t_at = [&](int i, int j) { return i == j ? 1.0f : (i > j ? Af[j * lda + i] : 0.0f); };
    const int rr = threadIdx.x / 16, cc = threadIdx.x % 16;
    for (int bi = 1; bi < Cp / 16; ++bi) {
      const int R0 = bi * 16;
      const float* arow = Af + (R0 + rr) * lda;  // A[R0 + rr][m], m < R0
      float x[kBlocks - 1];                      // X[rr][16 bc + cc]
#pragma unroll
      for (int bc = 0; bc < kBlocks - 1; ++bc) x[bc] = 0.0f;
      for (int bm = 0; bm < bi; ++bm) {
        float a[16];
#pragma unroll
        for (int q = 0; q < 16; ++q) a[q] = arow[16 * bm + q];
#pragma unroll
        for (int bc = 0; bc < kBlocks - 1; ++bc) {
          const float* tcol = Af + (16 * bc + cc) * lda + 16 * bm;  // T[16 bm + q][16 bc + cc]
          if (bc == bm) {
#pragma unroll
            for (int q = 0; q < 16; ++q) {  // the unit lower triangle of block (bc, bc)
              if (q == cc) x[bc] += a[q];
              if (q > cc) x[bc] += a[q] * tcol[q];
            }
          } else if (bc < bm) {
#pragma unroll
            for (int q = 0; q < 16; ++q) x[bc] += a[q] * tcol[q];
          }
        }
      }
#pragma unroll
      for (int bc = 0; bc < kBlocks - 1; ++bc)
        if (bc < bi) Xf[rr * Cp + 16 * bc + cc] = x[bc];
      __syncthreads();
      // Times T_bi,bi: T[R0 + rr][R0 + m] (m < rr), loaded once for every bc.
      const float* tdiag = Af + R0 * lda + R0 + rr;
      float td[16];
#pragma unroll
      for (int m = 0; m < 16; ++m) td[m] = m < rr ? tdiag[m * lda] : 0.0f;
      for (int bc = 0; bc < bi; ++bc) {
        const int c = 16 * bc + cc;
        float s = Xf[rr * Cp + c];
#pragma unroll
        for (int m = 0; m < 16; ++m)
          if (m < rr) s += td[m] * Xf[m * Cp + c];
        Af[c * lda + R0 + rr] = -s;
      }
      __syncthreads();
    }

    // The right-hand sides: beta V in place of Q (beta exp(G) K is in place already); T in q's
    // dtype.
    rudnn::cuda::tc::cp_async_wait<0>();
    __syncthreads();
    scale_rows(Xs, ldx, Cp, Vp, 0, int(blockDim.x),
               [&](int r) { return make_float2(Bs[r], 1.0f); });
    // (The backward's forward pass also keeps T, in the workspace.)
    T* Tg = geo.ws_t >= 0 ? reinterpret_cast<T*>(ws + geo.ws_t) + unit * geo.Cp * geo.Cp : nullptr;
    if (!std::is_same_v<T, float> || Tg != nullptr) {
      for (int rr = warp; rr < Cp; rr += warps)
        for (int c = lane; c < Cp; c += 32) {
          const T t = from_float<T>(t_at(rr, c));
          if constexpr (!std::is_same_v<T, float>) T16[rr * ldc + c] = t;
          if (Tg != nullptr) Tg[rr * Cp + c] = t;
        }
    }
    __syncthreads();

    T* Wg = reinterpret_cast<T*>(ws + geo.ws_w) + unit * geo.Cp * geo.Kp;
    T* Ug = reinterpret_cast<T*>(ws + geo.ws_u) + unit * geo.Cp * geo.Vp;
    float* Fg = reinterpret_cast<float*>(ws + geo.ws_g) + unit * geo.fstride;
    // W = T (beta exp(G) K), U = T (beta V); T is lower triangular, so a tile of rows m0..
    // needs columns [0, m0 + 16) of it. Where K and V have one width, both products in one
    // pass over the tiles (T's fragment loaded once for the two).
    auto solve = [&](const auto& tri) {
      auto put = [&](const float (&acc)[2][4], T* out, int N, int m0, int n0) {
        for_pairs<2>(m0, n0, [&](int jt, int e, int i, int c) {
          store_pair(out + int64_t(i) * N + c, acc[jt][e], acc[jt][e + 1]);
        });
      };
      if (Kp == Vp) {
        for_tiles<2>(Cp, Kp, [&](int m0, int n0) {
          float w[2][4] = {}, u[2][4] = {};
          tile_mma_two<T, true>(w, u, tri, Op<T, false>{Ks, ldk}, tri, Op<T, false>{Xs, ldx}, m0,
                                n0, m0 + 16);
          put(w, Wg, Kp, m0, n0);
          put(u, Ug, Vp, m0, n0);
        });
      } else {
        auto one = [&](const T* rhs, int ld_rhs, int N, T* out) {
          for_tiles<2>(Cp, N, [&](int m0, int n0) {
            float acc[2][4] = {};
            tile_mma<T>(acc, tri, Op<T, false>{rhs, ld_rhs}, m0, n0, m0 + 16);
            put(acc, out, N, m0, n0);
          });
        };
        one(Ks, ldk, Kp, Wg);
        one(Xs, ldx, Vp, Ug);
      }
    };
    if constexpr (std::is_same_v<T, float>)
      solve(TriView{Af, lda});
    else
      solve(Op<T, true>{T16, ldc});
    for (int i = threadIdx.x; i < Cp; i += blockDim.x) {
      Fg[i] = p.scale * decay.through(i);
      Fg[Cp + i] = i < L ? decay.between(L - 1, i) : 0.0f;
    }
    if (threadIdx.x < 16) Fg[2 * Cp + threadIdx.x] = threadIdx.x == 0 ? decay.through(L - 1) : 0.0f;
    __syncthreads();  // shared memory is free for the block's next unit
  }
}

// A sequential pass's block: sequence n, head h, value columns [v0, v0 + cols); the sequence's
// steps and its chunk slots [slot0, slot0 + count). Blocks are (sequence, head, slab) in
// order, a head's slabs adjacent.
// A state-pass block's (sequence n, head h, value columns from v0) and its chunks; `state`
// is the sequence's state row (its pool slot in the *_slots forms), `usable` false for a
// pool slot id that slot_usable refuses (the block then leaves the pool alone).
struct SlabBlock {
  Range r;
  int64_t n, h, v0, slot0, count, state;
  bool usable;
};
__device__ __forceinline__ SlabBlock slab_block(const Chunked& p, const Geometry& geo,
                                                const unsigned char* ws, int cols) {
  const int64_t slabs = (p.value_dim + cols - 1) / cols;
  const int64_t nh = blockIdx.x / slabs;
  SlabBlock b;
  b.n = nh / p.value_heads;
  b.h = nh % p.value_heads;
  b.v0 = int64_t(blockIdx.x % slabs) * cols;
  b.r = sequence_range(p, b.n);
  b.slot0 = b.n * geo.chunks_per_seq;
  b.count = (b.r.last - b.r.first + geo.C - 1) / geo.C;
  if (p.cu_seqlens != nullptr) {
    const int32_t* cf = reinterpret_cast<const int32_t*>(ws + geo.ws_cf);
    b.slot0 = cf[b.n];
    b.count = cf[b.n + 1] - cf[b.n];
  }
  b.state = p.slots != nullptr ? slot_at(p, b.n) : b.n;
  b.usable = p.slots == nullptr || slot_usable(p, b.state);  // (every warp of the block calls)
  return b;
}

// The block's FP32 state slab in registers, as the update product's accumulators: warp w holds
// rows [16 (w + 8 j), +16) (kRowTiles of them), kCols columns. Loads it from (zeros where src
// is null or past K and V) or stores it to a state tensor of the problem's state layout.
constexpr int kSlabRowTiles = int(kMaxChunkDim) / 16 / 8;
template <int kCols>
using StateSlab = float[kSlabRowTiles][kCols / 8][4];
template <int kCols, class F>
__device__ __forceinline__ void for_slab(F&& f) {
  const int warp = threadIdx.x / 32;
#pragma unroll
  for (int j = 0; j < kSlabRowTiles; ++j)
    for_pairs<kCols / 8>(16 * (warp + 8 * j), 0, [&](int jt, int e, int kk, int c) {
#pragma unroll
      for (int x = 0; x < 2; ++x) f(j, jt, e + x, kk, c + x);
    });
}
__device__ __forceinline__ int64_t state_index(const Chunked& p, const SlabBlock& b, int64_t kk,
                                               int64_t c) {
  const int64_t Dk = p.key_dim, Dv = p.value_dim, vv = b.v0 + c;
  return (b.state * p.value_heads + b.h) * Dk * Dv +
         (p.state_transposed ? kk * Dv + vv : vv * Dk + kk);
}
template <int kCols>
__device__ __forceinline__ void load_slab(StateSlab<kCols>& S, const Chunked& p,
                                          const SlabBlock& b, const void* src, DType dtype) {
  for_slab<kCols>([&](int j, int jt, int e, int kk, int c) {
    S[j][jt][e] = src != nullptr && kk < p.key_dim && b.v0 + c < p.value_dim
                      ? load_any(src, state_index(p, b, kk, c), dtype)
                      : 0.0f;
  });
}
template <int kCols>
__device__ __forceinline__ void store_slab(const StateSlab<kCols>& S, const Chunked& p,
                                           const SlabBlock& b, void* dst, DType dtype) {
  for_slab<kCols>([&](int j, int jt, int e, int kk, int c) {
    if (kk < p.key_dim && b.v0 + c < p.value_dim)
      store_any(dst, state_index(p, b, kk, c), dtype, S[j][jt][e]);
  });
}

// The slab in q's dtype to shared memory (`lds` apart), for the chunk's products and for
// write_slab.
template <class T, int kCols>
__device__ __forceinline__ void stage_slab(const StateSlab<kCols>& S, T* smem, int lds, int Kp) {
  const int warp = threadIdx.x / 32;
#pragma unroll
  for (int j = 0; j < kSlabRowTiles; ++j) {
    const int m0 = 16 * (warp + 8 * j);
    if (m0 >= Kp) continue;
    for_pairs<kCols / 8>(m0, 0, [&](int jt, int e, int kk, int c) {
      store_pair(smem + kk * lds + c, S[j][jt][e], S[j][jt][e + 1]);
    });
  }
}

// The staged slab (shared memory, `lds` apart) to the workspace (`dst`, `vp` apart, the cw
// columns inside Vp) by 16-byte pieces; `pieces` walks the kCols / (16 / sizeof(T)) pieces of
// a row. Four 16-byte stores a thread (K = 128, 64 columns) instead of stage_slab's sixteen of
// four bytes, after the barrier rather than before it.
template <class T>
__device__ __forceinline__ void write_slab(const T* smem, int lds, T* dst, int vp, int cw, int Kp,
                                           const GridWalk& pieces) {
  constexpr int per = 16 / int(sizeof(T));
  for_grid(Kp, pieces, [&](int kk, int piece) {
    const int c = piece * per;
    if (c < cw)
      *reinterpret_cast<uint4*>(dst + int64_t(kk) * vp + c) =
          *reinterpret_cast<const uint4*>(smem + kk * lds + c);
  });
}

// Whether a sequential pass (the state pass, the backward's reverse pass) takes 2 kSlab value
// columns a block: as `asked` (ChunkedTuning: kSlab or 2 kSlab; 0 for the default), by default
// where kSlab-wide blocks (`narrow_grid` of them) would outnumber the SMs and two operand
// stages of the wide block fit; never where one does not. wide_bytes(stages): the wide block's
// shared memory.
template <class Bytes>
bool wide_slabs(int asked, int64_t narrow_grid, int64_t sms, int64_t limit, Bytes&& wide_bytes) {
  if (wide_bytes(1) > limit) return false;
  if (asked != 0) return asked == 2 * kSlab;
  return narrow_grid > sms && wide_bytes(2) <= limit;
}

// The state pass. One block per (sequence, head, slab of kCols value columns), slabs of a
// head adjacent in the grid so that they read W and K while those are in L2. Warp w keeps
// rows [16 (w + 8 j), +16) of the FP32 state slab in registers (the update product's
// accumulators). Per chunk: S_c in q's dtype to shared memory and (from the registers) the
// workspace; V' = U - W S_c (from the accumulators to U's place in the workspace, read by the
// output kernel); S = exp(G_last) S + K^T (V' exp(G_last - G)). Two barriers a chunk; the
// next chunk's operands land meanwhile.
// (Measured, round B: forming the output here too, as round 42 did, was slower than the
// S_c / V' round trip through memory: 0.90 / 3.50 ms against 0.75 / 3.29 ms.)
// Two blocks an SM at kSlab columns; one at wider slabs (their registers: the slab is
// kCols / 2 floats a thread).
template <class T, int kCols>
__global__ void __launch_bounds__(kStateThreads, kCols > kSlab ? 1 : 2)
    state_kernel(const Chunked p, unsigned char* ws, int stages) {
  extern __shared__ __align__(16) unsigned char smem[];
  const Geometry geo(p);
  const StateLayout lay = geo.state_layout(kCols);
  const int64_t H = p.value_heads, Dk = p.key_dim, Dv = p.value_dim;
  const int Cp = int(geo.Cp), Kp = int(geo.Kp);
  const SlabBlock blk = slab_block(p, geo, ws, kCols);
  // An unusable pool slot: the pool stays as it is, and the output kernel writes NaN.
  if (!blk.usable) return;
  const int64_t h = blk.h, v0 = blk.v0, slot0 = blk.slot0, count = blk.count;
  const Range r = blk.r;
  // The slab's columns inside Vp (the workspace rows' width): a multiple of 16.
  const int cw = int(min(int64_t(kCols), geo.Vp - v0));
  const int ldk = int(geo.ldk), lds = int(lay.ldv);

  T* Ss = reinterpret_cast<T*>(smem + lay.s);   // S_c, [Kp][lds]
  T* Vk = reinterpret_cast<T*>(smem + lay.vk);  // V' exp(G_last - G), [Cp][lds]
  const int64_t stage_bytes = lay.stage;
  // (The modulo by a constant 2 or 3, not a 64-bit division by a runtime value.)
  auto stage = [&](int64_t ci) {
    const int64_t at = stages == 3 ? ci % 3 : stages == 2 ? ci % 2 : 0;
    return smem + lay.single + at * stage_bytes;
  };

  // The sequence's first step of k, and the walk over W's and K's pieces, made once (the
  // chunk loop would otherwise divide by Kp and by the head ratio every chunk; see GridWalk).
  const T* k = static_cast<const T*>(p.k) + qk_at(p, r.entry, h, r.first);
  constexpr int per = 16 / int(sizeof(T));
  const GridWalk wk_pieces(Kp / per), slab_pieces(kCols / per);
  auto rows_of = [&](int64_t ci) { return int(min(geo.C, r.last - (r.first + ci * geo.C))); };
  auto unit_of = [&](int64_t ci) { return (slot0 + ci) * H + h; };
  // One cp.async group per call (empty past the last chunk). W and K share their tile shape,
  // so one walk over the pieces issues both (K by plain loads when it is not 16-byte aligned).
  auto issue = [&](int64_t ci) {
    if (ci < count) {
      unsigned char* b = stage(ci);
      const int64_t u = unit_of(ci);
      const T* wsrc = reinterpret_cast<const T*>(ws + geo.ws_w) + u * geo.Cp * geo.Kp;
      const T* ksrc = k + ci * geo.C * p.qk_t;
      T* wdst = reinterpret_cast<T*>(b + lay.w);
      T* kdst = reinterpret_cast<T*>(b + lay.k);
      const int rows = rows_of(ci), dk = int(Dk), ldq = int(p.qk_t);
      const bool async_k = p.async_qk;
      for_grid(Cp, wk_pieces, [&](int rr, int piece) {
        const int c = piece * per, d = rr * ldk + c;
        rudnn::cuda::tc::cp_async_16(wdst + d, wsrc + rr * Kp + c, 16u);
        if (async_k) {
          const bool in = rr < rows && c < dk;
          rudnn::cuda::tc::cp_async_16(kdst + d, ksrc + (in ? rr * ldq + c : 0), in ? 16u : 0u);
        }
      });
      if (!async_k) copy_tile<T>(kdst, ldk, ksrc, ldq, Cp, rows, Kp, dk, false);
      copy_tile<T>(reinterpret_cast<T*>(b + lay.u), lds,
                   reinterpret_cast<const T*>(ws + geo.ws_u) + u * geo.Cp * geo.Vp + v0,
                   int(geo.Vp), Cp, Cp, TileWalk<T>(kCols, true), cw);
      copy_row(reinterpret_cast<float*>(b + lay.g),
               reinterpret_cast<const float*>(ws + geo.ws_g) + u * geo.fstride + geo.Cp, Cp + 16);
    }
    rudnn::cuda::tc::cp_async_commit();
  };

  static_assert(kStateThreads == 256, "the state slab's layout (for_slab) assumes 8 warps");
  constexpr int kWarps = kStateThreads / 32;
  constexpr int kRowTiles = kSlabRowTiles;
  const int warp = threadIdx.x / 32;
  StateSlab<kCols> S;
  load_slab<kCols>(S, p, blk, p.state_in, p.state_dtype);

  for (int s = 0; s + 1 < stages; ++s) issue(s);
  for (int64_t ci = 0; ci < count; ++ci) {
    const int L = rows_of(ci);
    const int64_t unit = unit_of(ci);
    // S_c in q's dtype to shared memory for W S_c (and from there to the workspace for the
    // output kernel, after the barrier).
    const int vp = int(geo.Vp);
    stage_slab<T, kCols>(S, Ss, lds, Kp);
    if (stages == 1) {
      __syncthreads();  // the previous chunk's reads of the one stage are done
      issue(ci);
    }
    // Groups committed so far: stages - 1 + ci (one per issue); chunk ci's must be complete.
    if (stages == 3)
      rudnn::cuda::tc::cp_async_wait<1>();
    else
      rudnn::cuda::tc::cp_async_wait<0>();
    __syncthreads();
    if (stages > 1) issue(ci + stages - 1);  // into the stage chunk ci - 1 used
    write_slab(Ss, lds, reinterpret_cast<T*>(ws + geo.ws_s) + unit * geo.Kp * geo.Vp + v0, vp, cw,
               Kp, slab_pieces);
    const unsigned char* b = stage(ci);
    const T* W = reinterpret_cast<const T*>(b + lay.w);
    const T* K = reinterpret_cast<const T*>(b + lay.k);
    const T* U = reinterpret_cast<const T*>(b + lay.u);
    const float* F = reinterpret_cast<const float*>(b + lay.g);  // exp(G_last - G), exp(G_last)

    // V' = U - W S_c (zero past the chunk's rows and past V), from the registers to the
    // workspace over U's place (the output kernel reads it) and, times exp(G_last - G), to
    // shared memory for the update. 16 x 16 tiles (the A fragment shared by two) where the
    // slab is wide enough.
    T* Vg = reinterpret_cast<T*>(ws + geo.ws_u) + unit * geo.Cp * geo.Vp + v0;
    constexpr int kVN = kCols >= 32 ? 2 : 1;
    for_tiles<kVN>(Cp, kCols, [&](int m0, int n0) {
      float acc[kVN][4] = {};
      tile_mma<T>(acc, Op<T, true>{W, ldk}, Op<T, false>{Ss, lds}, m0, n0, Kp);
      for_pairs<kVN>(m0, n0, [&](int jt, int e, int i, int c) {
        const bool row_in = i < L;
        const float x0 = row_in && v0 + c < Dv ? to_float(U[i * lds + c]) - acc[jt][e] : 0.0f;
        const float x1 =
            row_in && v0 + c + 1 < Dv ? to_float(U[i * lds + c + 1]) - acc[jt][e + 1] : 0.0f;
        const float d = F[i];  // 0 past the chunk's rows
        if (c < cw) store_pair(Vg + i * vp + c, x0, x1);
        store_pair(Vk + i * lds + c, x0 * d, x1 * d);
      });
    });
    __syncthreads();

    // S = exp(G_last) S + K^T (V' exp(G_last - G)), accumulated in FP32 registers.
    const float decay = F[Cp];
#pragma unroll
    for (int j = 0; j < kRowTiles; ++j) {
      const int m0 = 16 * (warp + kWarps * j);
      if (m0 >= Kp) continue;
#pragma unroll
      for (int jt = 0; jt < kCols / 8; ++jt)
#pragma unroll
        for (int e = 0; e < 4; ++e) S[j][jt][e] *= decay;
      tile_mma<T>(S[j], Op<T, false>{K, ldk}, Op<T, false>{Vk, lds}, m0, 0, Cp);
    }
  }
  rudnn::cuda::tc::cp_async_wait<0>();
  if (p.state_out != nullptr)  // (null: the backward's forward pass)
    store_slab<kCols>(S, p, blk, p.state_out, p.state_dtype);
}

// The output, per (chunk, head, vo value columns), in parallel once every S_c is known:
// O = scale exp(G) (Q S_c) + (Q K^T) V' (prepare applied the scale and decay to Q K^T),
// stored from the accumulators (pairs of adjacent values when vector_y: y 16-byte aligned
// and V x itemsize a multiple of 16; a warp's two 8-column tiles fill 32-byte sectors).
// (No staging of O in shared memory: it would cost the fourth block an SM.)
template <class T>
__global__ void __launch_bounds__(kOutThreads, sizeof(T) == 4 ? 2 : 4)
    output_kernel(const Chunked p, const unsigned char* ws, int vo, bool vector_y) {
  extern __shared__ __align__(16) unsigned char smem[];
  const Geometry geo(p);
  const OutLayout lay = geo.out_layout(vo);
  const int64_t H = p.value_heads, Dk = p.key_dim, Dv = p.value_dim;
  const int Cp = int(geo.Cp), Kp = int(geo.Kp);
  const int64_t vblocks = (geo.Vp + vo - 1) / vo;
  const int64_t uh = blockIdx.x / vblocks, slot = uh / H, h = uh % H;
  const int64_t vo0 = int64_t(blockIdx.x % vblocks) * vo;
  const Place pl = locate(p, geo, ws, slot);
  if (pl.rows <= 0) return;
  const int L = pl.rows;
  const int cols = int(min(int64_t(vo), Dv - vo0));  // this block's columns inside V
  T* y = static_cast<T*>(p.y) + v_at(p, pl.range.entry, h, pl.t0) + vo0;
  // A sequence whose pool slot id is unusable (slot_usable) gets NaN outputs; its state pass
  // wrote nothing.
  if (p.slots != nullptr && !slot_usable(p, slot_at(p, pl.n))) {
    const T nan = from_float<T>(__int_as_float(0x7fc00000));
    for_grid(L, cols, [&](int i, int c) { y[int64_t(i) * p.v_t + c] = nan; });
    return;
  }
  const int cw = int(min(int64_t(vo), geo.Vp - vo0));
  const int64_t unit = slot * H + h;
  const int ldk = int(geo.ldk), ldc = int(geo.ldc), ldo = int(lay.ldo);

  T* Qs = reinterpret_cast<T*>(smem + lay.q);
  T* Ss = reinterpret_cast<T*>(smem + lay.s);
  T* As = reinterpret_cast<T*>(smem + lay.a);
  T* Vs = reinterpret_cast<T*>(smem + lay.v);
  float* G = reinterpret_cast<float*>(smem + lay.g);
  copy_tile<T>(Qs, ldk, static_cast<const T*>(p.q) + qk_at(p, pl.range.entry, h, pl.t0),
               int(p.qk_t), Cp, L, Kp, int(Dk), p.async_qk);
  copy_tile<T>(Ss, ldo, reinterpret_cast<const T*>(ws + geo.ws_s) + unit * geo.Kp * geo.Vp + vo0,
               int(geo.Vp), Kp, Kp, vo, cw, true);
  copy_tile<T>(As, ldc, reinterpret_cast<const T*>(ws + geo.ws_a) + unit * geo.Cp * geo.Cp, Cp, Cp,
               Cp, Cp, Cp, true);
  copy_tile<T>(Vs, ldo, reinterpret_cast<const T*>(ws + geo.ws_u) + unit * geo.Cp * geo.Vp + vo0,
               int(geo.Vp), Cp, Cp, vo, cw, true);
  copy_tile<float>(G, Cp, reinterpret_cast<const float*>(ws + geo.ws_g) + unit * geo.fstride, Cp, 1,
                   1, Cp, Cp, true);
  rudnn::cuda::tc::cp_async_commit();
  rudnn::cuda::tc::cp_async_wait<0>();
  __syncthreads();

  for_tiles<2>(Cp, vo, [&](int m0, int n0) {
    float qs[2][4] = {}, av[2][4] = {};
    tile_mma<T>(qs, Op<T, true>{Qs, ldk}, Op<T, false>{Ss, ldo}, m0, n0, Kp);
    tile_mma<T>(av, Op<T, true>{As, ldc}, Op<T, false>{Vs, ldo}, m0, n0, m0 + 16);
    for_pairs<2>(m0, n0, [&](int jt, int e, int i, int c) {
      if (i >= L || c >= cols) return;
      const float f = G[i];  // scale exp(G_i)
      const float o0 = f * qs[jt][e] + av[jt][e], o1 = f * qs[jt][e + 1] + av[jt][e + 1];
      T* at = y + int64_t(i) * p.v_t + c;
      if (vector_y) {  // cols is even then
        store_pair(at, o0, o1);
      } else {
        at[0] = from_float<T>(o0);
        if (c + 1 < cols) at[1] = from_float<T>(o1);
      }
    });
  });
}

// The widest output block (a multiple of 16 value columns, at most `widest`) whose shared
// memory fits `limit`; 0 when not even 16 columns fit.
inline int output_columns(const Geometry& geo, int64_t limit, int64_t widest) {
  widest = widest / 16 * 16;
  for (int64_t vo = geo.Vp < widest ? geo.Vp : widest; vo >= 16; vo -= 16)
    if (geo.out_layout(vo).bytes <= limit) return int(vo);
  return 0;
}

inline bool aligned16(const void* ptr) { return reinterpret_cast<uintptr_t>(ptr) % 16 == 0; }
// Rows of `elements` items (a dimension or a stride) whose bytes are whole 16-byte pieces.
inline bool whole16(const Geometry& geo, int64_t elements) {
  return (elements * geo.item) % 16 == 0;
}

// The problem with async_qk and async_v set: which operands cp.async may copy.
inline Chunked with_copy_flags(const Chunked& problem) {
  Chunked p = problem;
  const Geometry geo(p);
  auto whole = [&](int64_t elements) { return whole16(geo, elements); };
  p.async_qk = whole(p.key_dim) && whole(p.qk_t) && whole(p.qk_h) && whole(p.qk_b) &&
               aligned16(p.q) && aligned16(p.k);
  p.async_v =
      whole(p.value_dim) && whole(p.v_t) && whole(p.v_h) && whole(p.v_b) && aligned16(p.v);
  return p;
}

// The three kernels (and the varlen chunk table); without y (the backward's forward pass)
// the output kernel is not run.
template <class T>
void launch(const Chunked& problem, void* workspace, const Stream& stream) {
  rudnn::cuda::LaunchContext ctx(stream);
  const Chunked p = with_copy_flags(problem);
  const Geometry geo(p);
  auto* ws = static_cast<unsigned char*>(workspace);
  if (p.cu_seqlens != nullptr) {
    chunk_first_kernel<T>
        <<<1, kTableThreads, 0, ctx.stream>>>(p, reinterpret_cast<int32_t*>(ws + geo.ws_cf));
    detail::check_cuda(cudaGetLastError(), "chunk_gated_delta_rule chunk table launch");
  }
  const rudnn::cuda::DeviceInfo& info = rudnn::cuda::device_info(ctx.device);
  const int64_t units = geo.slots * p.value_heads;
  if (units > 0) {
    auto* kernel = prepare_kernel<T>;
    detail::check_cuda(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                            int(geo.prep_bytes)),
                       "chunk_gated_delta_rule prepare shared memory");
    kernel<<<unsigned(units), kPrepThreads, size_t(geo.prep_bytes), ctx.stream>>>(p, ws);
    detail::check_cuda(cudaGetLastError(), "chunk_gated_delta_rule prepare launch");
  }
  const int64_t limit = int64_t(info.shared_bytes_per_block_optin);
  const int64_t sms = info.multiprocessors;
  const int64_t heads = p.batch * p.value_heads;
  auto grid_of = [&](int cols) { return heads * ((p.value_dim + cols - 1) / cols); };
  if (grid_of(kSlab) == 0) return;  // V = 0: nothing to compute or write
  // Three operand stages (two chunks in flight) when the blocks are one an SM anyway (long
  // sequences, few heads); else two, or one where two do not fit.
  auto state_pass = [&](auto* kernel, int cols) {
    const StateLayout lay = geo.state_layout(cols);
    const int asked = chunked_tuning().state_stages;
    int stages = asked >= 1 && asked <= 3 ? asked : grid_of(cols) <= sms || cols > kSlab ? 3 : 2;
    while (stages > 1 && lay.bytes(stages) > limit) --stages;
    detail::check_cuda(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                            int(lay.bytes(stages))),
                       "chunk_gated_delta_rule state shared memory");
    kernel<<<unsigned(grid_of(cols)), kStateThreads, size_t(lay.bytes(stages)), ctx.stream>>>(
        p, ws, stages);
    detail::check_cuda(cudaGetLastError(), "chunk_gated_delta_rule state launch");
  };
  // 64 value columns a block (one an SM) where 32-column blocks would outnumber the SMs: at
  // two an SM they share its issue slots and the per-chunk latency stays; one wider block
  // halves the blocks (round 72, B4 H16: 0.79 against 0.82 ms forward; B1 H32, 128 blocks of
  // 32 columns on 132 SMs: 4.07 against 3.30 ms, so not there).
  const StateLayout wide_lay = geo.state_layout(2 * kSlab);
  if (wide_slabs(chunked_tuning().state_pass_cols, grid_of(kSlab), sms, limit,
                 [&](int stages) { return wide_lay.bytes(stages); }))
    state_pass(state_kernel<T, 2 * kSlab>, 2 * kSlab);
  else
    state_pass(state_kernel<T, kSlab>, kSlab);
  if (units > 0 && p.y != nullptr) {
    const int vo = output_columns(geo, limit, kMaxOutCols);
    const int64_t bytes = geo.out_layout(vo).bytes;
    detail::check_cuda(
        cudaFuncSetAttribute(output_kernel<T>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             int(bytes)),
        "chunk_gated_delta_rule output shared memory");
    const bool vector_y = whole16(geo, p.value_dim) && whole16(geo, p.v_t) &&
                          whole16(geo, p.v_h) && whole16(geo, p.v_b) && aligned16(p.y);
    output_kernel<T>
        <<<unsigned(units * ((geo.Vp + vo - 1) / vo)), kOutThreads, size_t(bytes), ctx.stream>>>(
            p, ws, vo, vector_y);
    detail::check_cuda(cudaGetLastError(), "chunk_gated_delta_rule output launch");
  }
}

}  // namespace rudnn::gdn::cuda::chunk
