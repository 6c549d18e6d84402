// The chunked gated delta rule on the GPU (spec 000's form; the algebra is in
// chunked_reference.cpp and the header). Two kernels:
//   prepare (parallel, one block per (chunk, head)): G (the running log decay), A = strictly
//     lower (beta K K^T * exp(G_i - G_j)) in FP32 shared memory, T = (I + A)^-1 solved in
//     place (T^T kept in A's unused upper triangle: one Cp^2 FP32 block holds both), then
//     W = T (beta exp(G) K), U = T (beta V) and the masked, decayed, scaled Q K^T, written to
//     the workspace in q's dtype (FP32 for F32 inputs).
//   scan (sequential over a sequence's chunks, one block per (sequence, head, 32 value
//     columns)): the FP32 state slab lives in shared memory for the whole sequence; per chunk
//     V' = U - W S, O = scale exp(G) (Q S) + (Q K^T) V', S = exp(G_last) S + (K exp(G_last -
//     G))^T V'. Two variants: scan_pipelined (cp.async loads of the next chunk's operands
//     overlapped with this chunk's products; taken when its shared memory fits) and scan (one
//     operand buffer, loads in line; the fallback for large chunks and F32).
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

namespace rudnn::gdn::cuda::chunk {

using rudnn::cuda::from_float;
using rudnn::cuda::to_float;

constexpr int kPrepThreads = 256;
constexpr int kScanThreads = 128;
constexpr int kSlab = 32;  // value columns per scan block

__host__ __device__ constexpr int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

// Sizes, strides and the shared/global layouts, the same on the host and the device. Rows of
// 16-bit tiles are padded by 16 bytes so that the eight rows of a fragment fall in different
// banks.
struct Geometry {
  int64_t C, Cp, Kp, Vp, chunks_per_seq, slots;
  int64_t pad, ldk, ldx, ldc, lda;
  int64_t item;
  // byte offsets
  int64_t prep_ks, prep_xs, prep_a, prep_x, prep_t16, prep_g, prep_b, prep_bytes;
  int64_t scan_s32, scan_st, scan_xs, scan_as, scan_vt, scan_g, scan_bytes;
  int64_t pipe_s32, pipe_st, pipe_w, pipe_u, pipe_q, pipe_k, pipe_as, pipe_vt, pipe_vk, pipe_g,
      pipe_bytes;
  int64_t ldu;
  int64_t ws_w, ws_u, ws_a, ws_g, ws_cf, ws_bytes;

  __host__ __device__ explicit Geometry(const Chunked& p) {
    item = p.dtype == DType::f32 ? 4 : 2;
    C = p.chunk;
    Cp = round_up(C, 16);
    Kp = round_up(p.key_dim, 16);
    Vp = round_up(p.value_dim, 16);
    chunks_per_seq = (p.steps + C - 1) / C;
    slots = p.cu_seqlens == nullptr ? p.sequences * chunks_per_seq : chunks_per_seq + p.sequences;
    pad = 16 / item;
    ldk = Kp + pad;
    ldx = (Kp > Vp ? Kp : Vp) + pad;
    ldc = Cp + pad;
    lda = Cp + 1;
    int64_t at = 0;
    auto take = [&](int64_t bytes) {
      const int64_t here = at;
      at = round_up(at + bytes, 16);
      return here;
    };
    prep_ks = take(Cp * ldk * item);
    prep_xs = take(Cp * ldx * item);
    prep_a = take(Cp * lda * 4);
    prep_x = take(16 * Cp * 4);
    prep_t16 = take(item == 2 ? Cp * ldc * item : 0);
    prep_g = take(Cp * 4);
    prep_b = take(Cp * 4);
    prep_bytes = at;
    at = 0;
    scan_s32 = take(Kp * kSlab * 4);
    scan_st = take(kSlab * ldk * item);
    scan_xs = take(Cp * ldk * item);
    scan_as = take(Cp * ldc * item);
    scan_vt = take(kSlab * ldc * item);
    scan_g = take(Cp * 4);
    scan_bytes = at;
    at = 0;
    pipe_s32 = take(Kp * kSlab * 4);
    pipe_st = take(kSlab * ldk * item);
    pipe_w = take(Cp * ldk * item);
    ldu = kSlab + pad;
    pipe_u = take(Cp * ldu * item);
    pipe_q = take(Cp * ldk * item);
    pipe_k = take(Cp * ldk * item);
    pipe_as = take(Cp * ldc * item);
    pipe_vt = take(kSlab * ldc * item);
    pipe_vk = take(kSlab * ldc * item);
    pipe_g = take(2 * Cp * 4);
    pipe_bytes = at;
    at = 0;
    auto take_ws = [&](int64_t bytes) {
      const int64_t here = at;
      at = round_up(at + bytes, 256);
      return here;
    };
    const int64_t units = slots * p.heads;
    ws_w = take_ws(units * Cp * Kp * item);
    ws_u = take_ws(units * Cp * Vp * item);
    ws_a = take_ws(units * Cp * Cp * item);
    ws_g = take_ws(units * Cp * 4);
    ws_cf = take_ws((p.sequences + 1) * 4);
    ws_bytes = at;
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
    for (int k = 0; k < K; k += 16) {
      uint32_t af[4];
      a.a_frag(af, m0, k);
#pragma unroll
      for (int j = 0; j < kN; ++j) {
        uint32_t bf[2];
        b.b_frag(bf, n0 + 8 * j, k);
        rudnn::cuda::tc::mma_16816<T>(acc[j], af, bf);
      }
    }
  }
}

// The row and column of a lane's accumulator value e (0..3) in the 16 x 8 tile at (m0, n0).
__device__ __forceinline__ int tile_row(int m0, int e) { return m0 + (threadIdx.x % 32) / 4 + 8 * (e / 2); }
__device__ __forceinline__ int tile_col(int n0, int e) { return n0 + 2 * (threadIdx.x % 4) + e % 2; }

// Calls f(m0, n0) for this warp's share of the 16 x (8 kN) tiles of an M x N product (N a
// multiple of 8 kN).
template <int kN, class F>
__device__ __forceinline__ void for_tiles(int M, int N, F&& f) {
  const int warp = threadIdx.x / 32, warps = blockDim.x / 32;
  const int tn = N / (8 * kN), tiles = (M / 16) * tn;
  for (int i = warp; i < tiles; i += warps) f((i / tn) * 16, (i % tn) * 8 * kN);
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
__global__ void __launch_bounds__(kTableThreads) chunk_first_kernel(const Chunked p,
                                                                    int32_t* first_slot) {
  __shared__ int64_t run_start[kTableThreads];
  const Geometry geo(p);
  const int64_t per = (p.sequences + kTableThreads - 1) / kTableThreads;
  const int64_t n0 = threadIdx.x * per, n1 = min(n0 + per, p.sequences);
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

// Copies a rows x cols tile (row-major, `ld_src` apart) into shared memory (`ld_dst` apart),
// zeros past rows_valid / cols_valid. async: 16-byte cp.async with zero fill, joining the
// thread's current group (cols and cols_valid whole 16-byte chunks, both sides 16-byte
// aligned); else plain loads and stores, visible after the next __syncthreads.
template <class T>
__device__ __forceinline__ void copy_tile(T* dst, int ld_dst, const T* src, int64_t ld_src,
                                          int rows, int rows_valid, int cols, int cols_valid,
                                          bool async) {
  if (async) {
    constexpr int per = 16 / int(sizeof(T));
    const int chunks = cols / per;
    for (int i = threadIdx.x; i < rows * chunks; i += blockDim.x) {
      const int r = i / chunks, c = (i % chunks) * per;
      const bool in = r < rows_valid && c < cols_valid;
      rudnn::cuda::tc::cp_async_16(dst + r * ld_dst + c, in ? src + r * ld_src + c : src,
                                   in ? 16u : 0u);
    }
  } else {
    const T zero = from_float<T>(0.0f);
    for (int i = threadIdx.x; i < rows * cols; i += blockDim.x) {
      const int r = i / cols, c = i % cols;
      dst[r * ld_dst + c] = r < rows_valid && c < cols_valid ? src[r * ld_src + c] : zero;
    }
  }
}

// T = (I + A)^-1 as an FP32 operand (the F32 path): T[i][j] (i > j) at a[j * lda + i].
struct TriView {
  const float* a;
  int lda;
  __device__ __forceinline__ float at(int i, int j) const {
    return i == j ? 1.0f : (i > j ? a[j * lda + i] : 0.0f);
  }
};

template <class T>
__global__ void __launch_bounds__(kPrepThreads) prepare_kernel(const Chunked p, unsigned char* ws) {
  extern __shared__ __align__(16) unsigned char smem[];
  const Geometry geo(p);
  const int64_t H = p.heads, Dk = p.key_dim, Dv = p.value_dim;
  const int Cp = int(geo.Cp), Kp = int(geo.Kp), Vp = int(geo.Vp);
  const int64_t slot = blockIdx.x / H, h = blockIdx.x % H;
  int64_t n, local;
  if (p.cu_seqlens == nullptr) {
    n = slot / geo.chunks_per_seq;
    local = slot % geo.chunks_per_seq;
  } else {
    const int32_t* cf = reinterpret_cast<const int32_t*>(ws + geo.ws_cf);
    if (slot >= cf[p.sequences]) return;
    int64_t lo = 0, hi = p.sequences - 1;  // the last n with cf[n] <= slot
    while (lo < hi) {
      const int64_t mid = (lo + hi + 1) / 2;
      if (cf[mid] <= slot) lo = mid; else hi = mid - 1;
    }
    n = lo;
    local = slot - cf[n];
  }
  const Range r = sequence_range(p, n);
  const int64_t t0 = r.first + local * geo.C;
  const int L = int(min(geo.C, r.last - t0));
  if (L <= 0) return;
  const int64_t unit = slot * H + h;

  T* Ks = reinterpret_cast<T*>(smem + geo.prep_ks);
  T* Xs = reinterpret_cast<T*>(smem + geo.prep_xs);
  float* Af = reinterpret_cast<float*>(smem + geo.prep_a);
  float* Xf = reinterpret_cast<float*>(smem + geo.prep_x);
  T* T16 = reinterpret_cast<T*>(smem + geo.prep_t16);
  float* Gs = reinterpret_cast<float*>(smem + geo.prep_g);
  float* Bs = reinterpret_cast<float*>(smem + geo.prep_b);
  const int ldk = int(geo.ldk), ldx = int(geo.ldx), ldc = int(geo.ldc), lda = int(geo.lda);

  const int64_t row0 = (r.entry * H + h) * p.steps + t0;  // this chunk's first (b, h, t) row
  const T* q = static_cast<const T*>(p.q) + row0 * Dk;
  const T* k = static_cast<const T*>(p.k) + row0 * Dk;
  const T* v = static_cast<const T*>(p.v) + row0 * Dv;
  const T* beta = static_cast<const T*>(p.beta) + row0;
  const float* log_decay = p.log_decay + row0;

  copy_tile<T>(Ks, ldk, k, Dk, Cp, L, Kp, int(Dk), p.async_qk);
  copy_tile<T>(Xs, ldx, q, Dk, Cp, L, Kp, int(Dk), p.async_qk);
  rudnn::cuda::tc::cp_async_commit();
  for (int i = threadIdx.x; i < Cp; i += blockDim.x) Bs[i] = i < L ? to_float(beta[i]) : 0.0f;
  if (threadIdx.x < 32) {
    // G, the running sum of log_decay: each lane sums its run of Cp / 32 (<= 4) steps, a warp
    // scan adds the runs before it. Padded rows add 0 (no decay of their own).
    constexpr int kMaxRun = int(kMaxChunk) / 32;
    const int lane = threadIdx.x, run = (Cp + 31) / 32;
    float x[kMaxRun];
    float sum = 0.0f;
#pragma unroll
    for (int j = 0; j < kMaxRun; ++j) {
      const int i = lane * run + j;
      sum += j < run && i < L ? log_decay[i] : 0.0f;
      x[j] = sum;
    }
    float before = sum;
#pragma unroll
    for (int d = 1; d < 32; d *= 2) {
      const float other = __shfl_up_sync(0xffffffffu, before, d);
      if (lane >= d) before += other;
    }
    before -= sum;  // exclusive
#pragma unroll
    for (int j = 0; j < kMaxRun; ++j) {
      const int i = lane * run + j;
      if (j < run && i < Cp) Gs[i] = before + x[j];
    }
  }
  rudnn::cuda::tc::cp_async_wait<0>();
  __syncthreads();

  // A (strictly lower) into Af; Q K^T (lower, diagonal included) straight to the workspace.
  T* Ag = reinterpret_cast<T*>(ws + geo.ws_a) + unit * geo.Cp * geo.Cp;
  for_tiles<2>(Cp, Cp, [&](int m0, int n0) {
    if (n0 > m0 + 15) return;  // wholly above the diagonal
    float acc[2][4] = {};
    tile_mma<T>(acc, Op<T, true>{Ks, ldk}, Op<T, true>{Ks, ldk}, m0, n0, Kp);
#pragma unroll
    for (int jt = 0; jt < 2; ++jt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int i = tile_row(m0, e), j = tile_col(n0 + 8 * jt, e);
        if (j < i) Af[i * lda + j] = Bs[i] * acc[jt][e] * expf(Gs[i] - Gs[j]);
      }
  });
  for_tiles<2>(Cp, Cp, [&](int m0, int n0) {
    float acc[2][4] = {};
    if (n0 <= m0 + 15) tile_mma<T>(acc, Op<T, true>{Xs, ldx}, Op<T, true>{Ks, ldk}, m0, n0, Kp);
#pragma unroll
    for (int jt = 0; jt < 2; ++jt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int i = tile_row(m0, e), j = tile_col(n0 + 8 * jt, e);
        Ag[int64_t(i) * Cp + j] =
            from_float<T>(j <= i ? p.scale * acc[jt][e] * expf(Gs[i] - Gs[j]) : 0.0f);
      }
  });
  __syncthreads();

  // T = (I + A)^-1. T[i][j] (i > j) is stored at Af[j][i]; its diagonal is 1 (implicit).
  // 1) The 16 x 16 diagonal blocks, one thread per column: forward substitution.
  if (threadIdx.x < Cp) {
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
  auto t_at = [&](int i, int j) { return i == j ? 1.0f : (i > j ? Af[j * lda + i] : 0.0f); };
  for (int bi = 1; bi < Cp / 16; ++bi) {
    const int R0 = bi * 16, width = R0;
    for (int e = threadIdx.x; e < 16 * width; e += blockDim.x) {
      const int rr = e / width, c = e % width;
      float s = 0.0f;
      for (int m = c; m < R0; ++m) s += Af[(R0 + rr) * lda + m] * t_at(m, c);
      Xf[rr * Cp + c] = s;
    }
    __syncthreads();
    for (int e = threadIdx.x; e < 16 * width; e += blockDim.x) {
      const int rr = e / width, c = e % width;
      float s = Xf[rr * Cp + c];
      for (int m = 0; m < rr; ++m) s += t_at(R0 + rr, R0 + m) * Xf[m * Cp + c];
      Af[c * lda + R0 + rr] = -s;
    }
    __syncthreads();
  }

  // The right-hand sides: beta exp(G) K in place of K, beta V in place of Q; T in q's dtype.
  copy_tile<T>(Xs, ldx, v, Dv, Cp, L, Vp, int(Dv), p.async_v);
  rudnn::cuda::tc::cp_async_commit();
  for (int i = threadIdx.x; i < Cp * Kp; i += blockDim.x) {
    const int rr = i / Kp, c = i % Kp;
    Ks[rr * ldk + c] = from_float<T>(to_float(Ks[rr * ldk + c]) * Bs[rr] * expf(Gs[rr]));
  }
  rudnn::cuda::tc::cp_async_wait<0>();
  __syncthreads();
  for (int i = threadIdx.x; i < Cp * Vp; i += blockDim.x) {
    const int rr = i / Vp, c = i % Vp;
    Xs[rr * ldx + c] = from_float<T>(to_float(Xs[rr * ldx + c]) * Bs[rr]);
  }
  if constexpr (!std::is_same_v<T, float>) {
    for (int i = threadIdx.x; i < Cp * Cp; i += blockDim.x) {
      const int rr = i / Cp, c = i % Cp;
      T16[rr * ldc + c] = from_float<T>(t_at(rr, c));
    }
  }
  __syncthreads();

  T* Wg = reinterpret_cast<T*>(ws + geo.ws_w) + unit * geo.Cp * geo.Kp;
  T* Ug = reinterpret_cast<T*>(ws + geo.ws_u) + unit * geo.Cp * geo.Vp;
  float* Gg = reinterpret_cast<float*>(ws + geo.ws_g) + unit * geo.Cp;
  // W = T (beta exp(G) K), U = T (beta V).
  auto solve_rhs = [&](const T* rhs, int ld_rhs, int N, T* out) {
    for_tiles<2>(Cp, N, [&](int m0, int n0) {
      float acc[2][4] = {};
      const int K = m0 + 16;  // T is lower triangular
      if constexpr (std::is_same_v<T, float>) {
        tile_mma<T>(acc, TriView{Af, lda}, Op<T, false>{rhs, ld_rhs}, m0, n0, K);
      } else {
        tile_mma<T>(acc, Op<T, true>{T16, ldc}, Op<T, false>{rhs, ld_rhs}, m0, n0, K);
      }
#pragma unroll
      for (int jt = 0; jt < 2; ++jt)
#pragma unroll
        for (int e = 0; e < 4; ++e)
          out[int64_t(tile_row(m0, e)) * N + tile_col(n0 + 8 * jt, e)] =
              from_float<T>(acc[jt][e]);
    });
  };
  solve_rhs(Ks, ldk, Kp, Wg);
  solve_rhs(Xs, ldx, Vp, Ug);
  for (int i = threadIdx.x; i < Cp; i += blockDim.x) Gg[i] = Gs[i];
}

// grid (N * H, ceil(V / kSlab)): sequence n, head h, value columns [v0, v0 + kSlab).
template <class T>
__global__ void __launch_bounds__(kScanThreads) scan_kernel(const Chunked p,
                                                            const unsigned char* ws) {
  extern __shared__ __align__(16) unsigned char smem[];
  const Geometry geo(p);
  const int64_t H = p.heads, Dk = p.key_dim, Dv = p.value_dim;
  const int Cp = int(geo.Cp), Kp = int(geo.Kp);
  const int64_t n = blockIdx.x / H, h = blockIdx.x % H, v0 = int64_t(blockIdx.y) * kSlab;
  const Range r = sequence_range(p, n);
  int64_t slot0 = n * geo.chunks_per_seq, count = (r.last - r.first + geo.C - 1) / geo.C;
  if (p.cu_seqlens != nullptr) {
    const int32_t* cf = reinterpret_cast<const int32_t*>(ws + geo.ws_cf);
    slot0 = cf[n];
    count = cf[n + 1] - cf[n];
  }

  float* S32 = reinterpret_cast<float*>(smem + geo.scan_s32);  // [Kp][kSlab], the state
  T* St = reinterpret_cast<T*>(smem + geo.scan_st);             // [kSlab][ldk], its operand copy
  T* Xs = reinterpret_cast<T*>(smem + geo.scan_xs);             // W, then Q, then K
  T* As = reinterpret_cast<T*>(smem + geo.scan_as);             // Q K^T
  T* Vt = reinterpret_cast<T*>(smem + geo.scan_vt);             // V' transposed, [kSlab][ldc]
  float* Gs = reinterpret_cast<float*>(smem + geo.scan_g);
  const int ldk = int(geo.ldk), ldc = int(geo.ldc);
  const T zero = from_float<T>(0.0f);

  const int64_t state_base = (n * H + h) * Dk * Dv;
  for (int i = threadIdx.x; i < Kp * kSlab; i += blockDim.x) {
    const int kk = i / kSlab, c = i % kSlab;
    const float x = kk < Dk && v0 + c < Dv ? p.state_in[state_base + kk * Dv + v0 + c] : 0.0f;
    S32[i] = x;
    St[c * ldk + kk] = from_float<T>(x);
  }
  __syncthreads();

  const T* q = static_cast<const T*>(p.q);
  const T* k = static_cast<const T*>(p.k);
  T* y = static_cast<T*>(p.y);
  for (int64_t ci = 0; ci < count; ++ci) {
    const int64_t unit = (slot0 + ci) * H + h;
    const int64_t t0 = r.first + ci * geo.C;
    const int L = int(min(geo.C, r.last - t0));
    const int64_t row0 = (r.entry * H + h) * p.steps + t0;
    const T* Wg = reinterpret_cast<const T*>(ws + geo.ws_w) + unit * geo.Cp * geo.Kp;
    const T* Ug = reinterpret_cast<const T*>(ws + geo.ws_u) + unit * geo.Cp * geo.Vp;
    const T* Ag = reinterpret_cast<const T*>(ws + geo.ws_a) + unit * geo.Cp * geo.Cp;
    const float* Gg = reinterpret_cast<const float*>(ws + geo.ws_g) + unit * geo.Cp;

    for (int i = threadIdx.x; i < Cp * Kp; i += blockDim.x)
      Xs[(i / Kp) * ldk + i % Kp] = Wg[i];
    for (int i = threadIdx.x; i < Cp * Cp; i += blockDim.x) {
      const int rr = i / Cp, c = i % Cp;
      As[rr * ldc + c] = c <= rr ? Ag[i] : zero;
    }
    for (int i = threadIdx.x; i < Cp; i += blockDim.x) Gs[i] = Gg[i];
    __syncthreads();

    // V' = U - W S (rows past the chunk and columns past V are zero).
    for_tiles<4>(Cp, kSlab, [&](int m0, int n0) {
      float acc[4][4] = {};
      tile_mma<T>(acc, Op<T, true>{Xs, ldk}, Op<T, true>{St, ldk}, m0, n0, Kp);
#pragma unroll
      for (int jt = 0; jt < 4; ++jt)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int i = tile_row(m0, e), c = tile_col(n0 + 8 * jt, e);
          const bool in = i < L && v0 + c < Dv;
          const float u = in ? to_float(Ug[int64_t(i) * geo.Vp + v0 + c]) : 0.0f;
          Vt[c * ldc + i] = from_float<T>(in ? u - acc[jt][e] : 0.0f);
        }
    });
    __syncthreads();

    for (int i = threadIdx.x; i < Cp * Kp; i += blockDim.x) {
      const int rr = i / Kp, c = i % Kp;
      Xs[rr * ldk + c] = rr < L && c < Dk ? q[(row0 + rr) * Dk + c] : zero;
    }
    __syncthreads();

    // O = scale exp(G) (Q S) + (Q K^T) V' (the scale and decay of Q K^T applied by prepare).
    for_tiles<4>(Cp, kSlab, [&](int m0, int n0) {
      float qs[4][4] = {}, av[4][4] = {};
      tile_mma<T>(qs, Op<T, true>{Xs, ldk}, Op<T, true>{St, ldk}, m0, n0, Kp);
      tile_mma<T>(av, Op<T, true>{As, ldc}, Op<T, true>{Vt, ldc}, m0, n0, m0 + 16);
#pragma unroll
      for (int jt = 0; jt < 4; ++jt)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int i = tile_row(m0, e), c = tile_col(n0 + 8 * jt, e);
          if (i < L && v0 + c < Dv)
            y[(row0 + i) * Dv + v0 + c] =
                from_float<T>(p.scale * expf(Gs[i]) * qs[jt][e] + av[jt][e]);
        }
    });
    __syncthreads();

    const float g_last = Gs[L - 1];
    for (int i = threadIdx.x; i < Cp * Kp; i += blockDim.x) {
      const int rr = i / Kp, c = i % Kp;
      Xs[rr * ldk + c] =
          rr < L && c < Dk
              ? from_float<T>(to_float(k[(row0 + rr) * Dk + c]) * expf(g_last - Gs[rr]))
              : zero;
    }
    __syncthreads();

    // S = exp(G_last) S + (K exp(G_last - G))^T V', in FP32.
    const float decay = expf(g_last);
    for_tiles<4>(Kp, kSlab, [&](int m0, int n0) {
      float acc[4][4] = {};
      tile_mma<T>(acc, Op<T, false>{Xs, ldk}, Op<T, true>{Vt, ldc}, m0, n0, Cp);
#pragma unroll
      for (int jt = 0; jt < 4; ++jt)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int kk = tile_row(m0, e), c = tile_col(n0 + 8 * jt, e);
          const float s = fmaf(decay, S32[kk * kSlab + c], acc[jt][e]);
          S32[kk * kSlab + c] = s;
          St[c * ldk + kk] = from_float<T>(s);
        }
    });
    __syncthreads();
  }

  for (int i = threadIdx.x; i < Kp * kSlab; i += blockDim.x) {
    const int kk = i / kSlab, c = i % kSlab;
    if (kk < Dk && v0 + c < Dv) p.state_out[state_base + kk * Dv + v0 + c] = S32[i];
  }
}

// The scan with its operand loads overlapped with the products (cp.async), two phases a
// chunk:
//   A: V' = U - W S (and V' exp(G_last - G) for the state update) and Q S, kept in registers;
//   B: O = scale exp(G) (Q S) + (Q K^T) V', then S = exp(G_last) S + K^T (V' exp(G_last - G))
//      (S is read in A only, so B needs no barrier between its two products).
// W, U, G and Q of the next chunk are copied during B, Q K^T and K during the next A; each
// phase waits only for the group issued before the other phase. G is double-buffered (B still
// reads this chunk's while the next one lands). Needs about three times the simple scan's
// operand memory; 8 warps, each owning the same output tiles in both products of A.
constexpr int kPipeThreads = 256;
template <class T>
__global__ void __launch_bounds__(kPipeThreads, 2) scan_pipelined_kernel(const Chunked p,
                                                                      const unsigned char* ws) {
  extern __shared__ __align__(16) unsigned char smem[];
  const Geometry geo(p);
  const int64_t H = p.heads, Dk = p.key_dim, Dv = p.value_dim;
  const int Cp = int(geo.Cp), Kp = int(geo.Kp);
  const int64_t n = blockIdx.x / H, h = blockIdx.x % H, v0 = int64_t(blockIdx.y) * kSlab;
  const Range r = sequence_range(p, n);
  int64_t slot0 = n * geo.chunks_per_seq, count = (r.last - r.first + geo.C - 1) / geo.C;
  if (p.cu_seqlens != nullptr) {
    const int32_t* cf = reinterpret_cast<const int32_t*>(ws + geo.ws_cf);
    slot0 = cf[n];
    count = cf[n + 1] - cf[n];
  }

  float* S32 = reinterpret_cast<float*>(smem + geo.pipe_s32);
  T* St = reinterpret_cast<T*>(smem + geo.pipe_st);
  T* Wb = reinterpret_cast<T*>(smem + geo.pipe_w);
  T* Ub = reinterpret_cast<T*>(smem + geo.pipe_u);  // U's columns [v0, v0 + kSlab)
  T* Qb = reinterpret_cast<T*>(smem + geo.pipe_q);
  T* Kb = reinterpret_cast<T*>(smem + geo.pipe_k);
  T* As = reinterpret_cast<T*>(smem + geo.pipe_as);
  T* Vt = reinterpret_cast<T*>(smem + geo.pipe_vt);  // V', [kSlab][ldc]
  T* Vk = reinterpret_cast<T*>(smem + geo.pipe_vk);  // V' exp(G_last - G), [kSlab][ldc]
  float* G2 = reinterpret_cast<float*>(smem + geo.pipe_g);  // two chunks' G
  const int ldk = int(geo.ldk), ldc = int(geo.ldc);

  const int64_t state_base = (n * H + h) * Dk * Dv;
  for (int i = threadIdx.x; i < Kp * kSlab; i += blockDim.x) {
    const int kk = i / kSlab, c = i % kSlab;
    const float x = kk < Dk && v0 + c < Dv ? p.state_in[state_base + kk * Dv + v0 + c] : 0.0f;
    S32[i] = x;
    St[c * ldk + kk] = from_float<T>(x);
  }

  const T* q = static_cast<const T*>(p.q);
  const T* k = static_cast<const T*>(p.k);
  T* y = static_cast<T*>(p.y);
  auto unit_of = [&](int64_t ci) { return (slot0 + ci) * H + h; };
  auto rows_of = [&](int64_t ci) { return int(min(geo.C, r.last - (r.first + ci * geo.C))); };
  auto input_row0 = [&](int64_t ci) { return (r.entry * H + h) * p.steps + r.first + ci * geo.C; };
  // Each issue_* is one cp.async group (empty past the last chunk, so that the count of
  // groups in flight is the same at every wait).
  auto issue_a = [&](int64_t ci) {  // what phase A reads: W, U, G, Q
    if (ci < count) {
      const int64_t u = unit_of(ci);
      copy_tile<T>(Wb, ldk, reinterpret_cast<const T*>(ws + geo.ws_w) + u * geo.Cp * geo.Kp,
                   Kp, Cp, Cp, Kp, Kp, true);
      // U is padded to Vp (a multiple of 16) columns: whole 16-byte chunks up to there.
      copy_tile<T>(Ub, int(geo.ldu),
                   reinterpret_cast<const T*>(ws + geo.ws_u) + u * geo.Cp * geo.Vp + v0, geo.Vp,
                   Cp, Cp, kSlab, int(min(int64_t(kSlab), geo.Vp - v0)), true);
      const float* g = reinterpret_cast<const float*>(ws + geo.ws_g) + u * geo.Cp;
      copy_tile<float>(G2 + (ci % 2) * Cp, Cp, g, Cp, 1, 1, Cp, Cp, true);
      copy_tile<T>(Qb, ldk, q + input_row0(ci) * Dk, Dk, Cp, rows_of(ci), Kp, int(Dk),
                   p.async_qk);
    }
    rudnn::cuda::tc::cp_async_commit();
  };
  auto issue_b = [&](int64_t ci) {  // what phase B reads: Q K^T, K
    if (ci < count) {
      const int64_t u = unit_of(ci);
      copy_tile<T>(As, ldc, reinterpret_cast<const T*>(ws + geo.ws_a) + u * geo.Cp * geo.Cp, Cp,
                   Cp, Cp, Cp, Cp, true);
      copy_tile<T>(Kb, ldk, k + input_row0(ci) * Dk, Dk, Cp, rows_of(ci), Kp, int(Dk),
                   p.async_qk);
    }
    rudnn::cuda::tc::cp_async_commit();
  };
  issue_a(0);
  issue_b(0);

  constexpr int kN = 2;  // 16 x 16 output tiles
  for (int64_t ci = 0; ci < count; ++ci) {
    const int L = rows_of(ci);
    const int64_t row0 = input_row0(ci);
    const float* Gs = G2 + (ci % 2) * Cp;

    // Phase A. The tiles of Cp x kSlab: each warp keeps its Q S tile for phase B (the
    // loop below visits at most kMaxTiles tiles per warp).
    constexpr int kMaxTiles = (int(kMaxChunk) / 16) * (kSlab / (8 * kN)) / (kPipeThreads / 32);
    float qs[kMaxTiles][kN][4] = {};
    rudnn::cuda::tc::cp_async_wait<1>();
    __syncthreads();
    const float g_last = Gs[L - 1];
    {
      int slot = 0;
      for_tiles<kN>(Cp, kSlab, [&](int m0, int n0) {
        float acc[kN][4] = {};
        tile_mma<T>(acc, Op<T, true>{Wb, ldk}, Op<T, true>{St, ldk}, m0, n0, Kp);
#pragma unroll
        for (int s2 = 0; s2 < kMaxTiles; ++s2)
          if (s2 == slot) tile_mma<T>(qs[s2], Op<T, true>{Qb, ldk}, Op<T, true>{St, ldk}, m0, n0, Kp);
        ++slot;
#pragma unroll
        for (int jt = 0; jt < kN; ++jt)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int i = tile_row(m0, e), c = tile_col(n0 + 8 * jt, e);
            const bool in = i < L && v0 + c < Dv;
            const float vn = in ? to_float(Ub[i * geo.ldu + c]) - acc[jt][e] : 0.0f;
            Vt[c * ldc + i] = from_float<T>(vn);
            Vk[c * ldc + i] = from_float<T>(in ? vn * expf(g_last - Gs[i]) : 0.0f);
          }
      });
    }
    __syncthreads();
    issue_a(ci + 1);

    // Phase B.
    rudnn::cuda::tc::cp_async_wait<1>();
    __syncthreads();
    {
      int slot = 0;
      for_tiles<kN>(Cp, kSlab, [&](int m0, int n0) {
        float av[kN][4] = {};
        tile_mma<T>(av, Op<T, true>{As, ldc}, Op<T, true>{Vt, ldc}, m0, n0, m0 + 16);
#pragma unroll
        for (int s2 = 0; s2 < kMaxTiles; ++s2) {
          if (s2 != slot) continue;
#pragma unroll
          for (int jt = 0; jt < kN; ++jt)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
              const int i = tile_row(m0, e), c = tile_col(n0 + 8 * jt, e);
              if (i < L && v0 + c < Dv)
                y[(row0 + i) * Dv + v0 + c] =
                    from_float<T>(p.scale * expf(Gs[i]) * qs[s2][jt][e] + av[jt][e]);
            }
        }
        ++slot;
      });
    }
    const float decay = expf(g_last);
    for_tiles<kN>(Kp, kSlab, [&](int m0, int n0) {
      float acc[kN][4] = {};
      tile_mma<T>(acc, Op<T, false>{Kb, ldk}, Op<T, true>{Vk, ldc}, m0, n0, Cp);
#pragma unroll
      for (int jt = 0; jt < kN; ++jt)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int kk = tile_row(m0, e), c = tile_col(n0 + 8 * jt, e);
          const float s = fmaf(decay, S32[kk * kSlab + c], acc[jt][e]);
          S32[kk * kSlab + c] = s;
          St[c * ldk + kk] = from_float<T>(s);
        }
    });
    __syncthreads();
    issue_b(ci + 1);
  }
  rudnn::cuda::tc::cp_async_wait<0>();

  for (int i = threadIdx.x; i < Kp * kSlab; i += blockDim.x) {
    const int kk = i / kSlab, c = i % kSlab;
    if (kk < Dk && v0 + c < Dv) p.state_out[state_base + kk * Dv + v0 + c] = S32[i];
  }
}

template <class T>
void launch(const Chunked& problem, void* workspace, const Stream& stream) {
  rudnn::cuda::LaunchContext ctx(stream);
  Chunked p = problem;
  const Geometry geo(p);
  auto aligned = [](const void* ptr) { return reinterpret_cast<uintptr_t>(ptr) % 16 == 0; };
  p.async_qk = (p.key_dim * geo.item) % 16 == 0 && aligned(p.q) && aligned(p.k);
  p.async_v = (p.value_dim * geo.item) % 16 == 0 && aligned(p.v);
  auto* ws = static_cast<unsigned char*>(workspace);
  if (p.cu_seqlens != nullptr) {
    chunk_first_kernel<T><<<1, kTableThreads, 0, ctx.stream>>>(p, reinterpret_cast<int32_t*>(ws + geo.ws_cf));
    detail::check_cuda(cudaGetLastError(), "chunk_gated_delta_rule chunk table launch");
  }
  if (geo.slots * p.heads > 0) {
    detail::check_cuda(cudaFuncSetAttribute(prepare_kernel<T>,
                                            cudaFuncAttributeMaxDynamicSharedMemorySize,
                                            int(geo.prep_bytes)),
                       "chunk_gated_delta_rule prepare shared memory");
    prepare_kernel<T><<<unsigned(geo.slots * p.heads), kPrepThreads, size_t(geo.prep_bytes),
                        ctx.stream>>>(p, ws);
    detail::check_cuda(cudaGetLastError(), "chunk_gated_delta_rule prepare launch");
  }
  const dim3 grid(unsigned(p.sequences * p.heads), unsigned((p.value_dim + kSlab - 1) / kSlab));
  const size_t limit = rudnn::cuda::device_info(ctx.device).shared_bytes_per_block_optin;
  if (size_t(geo.pipe_bytes) <= limit) {
    detail::check_cuda(cudaFuncSetAttribute(scan_pipelined_kernel<T>,
                                            cudaFuncAttributeMaxDynamicSharedMemorySize,
                                            int(geo.pipe_bytes)),
                       "chunk_gated_delta_rule scan shared memory");
    scan_pipelined_kernel<T><<<grid, kPipeThreads, size_t(geo.pipe_bytes), ctx.stream>>>(p, ws);
  } else {
    detail::check_cuda(cudaFuncSetAttribute(scan_kernel<T>,
                                            cudaFuncAttributeMaxDynamicSharedMemorySize,
                                            int(geo.scan_bytes)),
                       "chunk_gated_delta_rule scan shared memory");
    scan_kernel<T><<<grid, kScanThreads, size_t(geo.scan_bytes), ctx.stream>>>(p, ws);
  }
  detail::check_cuda(cudaGetLastError(), "chunk_gated_delta_rule scan launch");
}

}  // namespace rudnn::gdn::cuda::chunk
