// The backward of the chunked gated delta rule on the GPU, spec 000's form (log decay; the
// heads of q, k and v one count). Per chunk, with the forward's quantities (chunked.cuh):
//   G the running log decay, e = exp(G), D_ij = exp(G_i - G_j), r = exp(G_last - G);
//   A = strictly lower(beta K K^T * D), T = (I + A)^-1, W = T (beta e K), U = T (beta V);
//   V' = U - W S_c;  P = scale * lower(Q K^T * D);  O = scale e Q S_c + P V';
//   S_next = exp(G_last) S_c + K^T (r V').
// Given dO and dS_next, the chain rule gives, in this order:
//   1. the forward again (prepare keeps T; the state pass writes S_c and V'), no output;
//   2. dstate_kernel, sequential over a sequence's chunks in reverse, per (sequence, head,
//      32 or 64 value columns) with dS in FP32 registers: it writes dS_next and
//        dV' = P^T dO + r K dS_next,   then   dS_c = exp(G_last) dS_next + (scale e Q)^T dO - W^T dV';
//      the last dS_c is d(initial state);
//   3. grad_v_kernel, per (chunk, head), the products that sum over V:
//        dQ_inter = scale e dO S_c^T, dK_state = r V' dS_next^T, dW = -dV' S_c^T,
//        dP = lower(dO V'^T), dT_v = dV' V^T, dV = beta T^T dV' and its share of dbeta;
//   4. grad_qk_kernel, per (chunk, head), the rest, over the chunk's rows and K:
//        dT = dT_v beta + dW (beta e K)^T (strictly lower), dA = -T^T dT T^T (strictly lower),
//        dQ = dQ_inter + (scale dP * D) K,
//        dK = dK_state + (scale dP * D)^T Q + beta (dA * D) K + (dA * D)^T (beta K) + beta e T^T dW,
//        dbeta and dG from the row and column sums of the elementwise products, and
//        dlog_decay_t = sum over the chunk's rows i >= t of dG_i.
// Products run on mma.sync with FP32 accumulation for 16-bit inputs, their operands in q's
// dtype (grad_qk_kernel's FP32 intermediates rounded to it, as fla does), FP32 FMAs in the
// same lane layout for F32; the row and column sums of elementwise products are FP32 over
// FP32 intermediates. Every sum runs in a fixed order
// (no atomics): identical bits run to run. The algebra is checked against the float64
// reference backward by the GPU tests (rudnn_gated_delta_tests, *ChunkedBackward*).
#pragma once

#include "cuda/reduce.cuh"
#include "gated_delta/cuda/chunked.cuh"

namespace rudnn::gdn::cuda::chunk {

constexpr int kBackThreads = 256;

// The backward's workspace after the forward pass's (Geometry::ws_bytes), per unit (chunk
// slot, head): dS_next [Kp][Vp] and dV' [Cp][Vp] in q's dtype; FP32 [Cp][Kp] dQ_inter and
// dK_state; dW [Cp][Kp] in q's dtype (grad_qk_kernel's product operand); FP32 [Cp][Cp] dP and
// dT_v; FP32 [Cp] dbeta's share from V; and FP32 sum(dS_next * S_c) (16 floats a unit, for
// alignment).
struct BackwardGeometry {
  int64_t ds, dv, xq, xk, xw, dp, dt, rows, sums, bytes;
  __host__ __device__ BackwardGeometry(const Geometry& geo, int64_t units) {
    Carve wk(256);
    wk.at = round_up(geo.ws_bytes, 256);
    ds = wk.take(units * geo.Kp * geo.Vp * geo.item);
    dv = wk.take(units * geo.Cp * geo.Vp * geo.item);
    xq = wk.take(units * geo.Cp * geo.Kp * 4);
    xk = wk.take(units * geo.Cp * geo.Kp * 4);
    xw = wk.take(units * geo.Cp * geo.Kp * geo.item);
    dp = wk.take(units * geo.Cp * geo.Cp * 4);
    dt = wk.take(units * geo.Cp * geo.Cp * 4);
    rows = wk.take(units * geo.Cp * 4);
    sums = wk.take(units * 16 * 4);
    bytes = wk.at;
  }
};

// dstate_kernel's shared memory for `cols` value columns a block: dS_next [Kp][ldv], -dV' and
// scale e dO [Cp][ldv], then per operand stage Q, K, W [Cp][ldk], P [Cp][ldc], dO [Cp][ldv]
// and the chunk's decay factors.
struct DStateLayout {
  int64_t ldv, ds, nv, sdy, single, q, k, w, p, dy, f, stage;
  __host__ __device__ int64_t bytes(int stages) const { return single + stages * stage; }
};
__host__ __device__ inline DStateLayout dstate_layout(const Geometry& geo, int64_t cols) {
  DStateLayout l{};
  l.ldv = cols + geo.pad;
  Carve single(16);
  l.ds = single.take(geo.Kp * l.ldv * geo.item);
  l.nv = single.take(geo.Cp * l.ldv * geo.item);
  l.sdy = single.take(geo.Cp * l.ldv * geo.item);
  l.single = single.at;
  Carve stage(16);
  l.q = stage.take(geo.Cp * geo.ldk * geo.item);
  l.k = stage.take(geo.Cp * geo.ldk * geo.item);
  l.w = stage.take(geo.Cp * geo.ldk * geo.item);
  l.p = stage.take(geo.Cp * geo.ldc * geo.item);
  l.dy = stage.take(geo.Cp * l.ldv * geo.item);
  l.f = stage.take(geo.fstride * 4);
  l.stage = stage.at;
  return l;
}

// grad_v_kernel's shared memory: dO, V', dV' [Cp][ldx]; a region that holds first V [Cp][ldx]
// and T [Cp][ldc] (the [Cp][Cp] products and dV), then a piece of kGradVRows rows of S_c and of
// dS_next [..][ldx] at a time (the [Cp][Kp] products); the factors, beta and the row partials
// of dbeta [Cp][Vp / 16] (FP32). Pieces rather than all of S_c and dS_next so that two blocks
// fit an SM for 16-bit inputs at K = V = 128, chunk 64 (about 90 KB).
constexpr int kGradVRows = 64;
struct GradVLayout {
  int64_t ldx, rows, dy, vp, dv, v, t, s, ds, f, b, part, bytes;
};
__host__ __device__ inline GradVLayout grad_v_layout(const Geometry& geo) {
  GradVLayout l{};
  l.ldx = geo.Vp + geo.pad;
  l.rows = geo.Kp < kGradVRows ? geo.Kp : kGradVRows;
  Carve sm(16);
  l.dy = sm.take(geo.Cp * l.ldx * geo.item);
  l.vp = sm.take(geo.Cp * l.ldx * geo.item);
  l.dv = sm.take(geo.Cp * l.ldx * geo.item);
  Carve first(16), second(16);  // the region's two uses
  first.at = second.at = sm.at;
  l.v = first.take(geo.Cp * l.ldx * geo.item);
  l.t = first.take(geo.Cp * geo.ldc * geo.item);
  l.s = second.take(l.rows * l.ldx * geo.item);
  l.ds = second.take(l.rows * l.ldx * geo.item);
  sm.at = first.at > second.at ? first.at : second.at;
  l.f = sm.take(geo.fstride * 4);
  l.b = sm.take(geo.Cp * 4);
  l.part = sm.take(geo.Cp * (geo.Vp / 16) * 4);
  l.bytes = sm.at;
  return l;
}

// grad_qk_kernel's shared memory, every matrix in q's dtype (product operands): Q, K, dW
// [Cp][ldk]; T, P, then dT (later S, see the kernel) and M (later scale dP * D) [Cp][ldc];
// FP32 beta, G, the decay codes, the per-row sums and the tiles' row and column partials. The
// FP32 intermediates live in registers (the tile epilogues) or are read from the workspace
// where a tile needs them, so that two blocks fit an SM for 16-bit inputs at K = 128, chunk 64
// (about 102 KB).
struct GradQKLayout {
  int64_t q, k, w, t, p, dt, m, b, g, z, rows, part, tri, bytes;
  static constexpr int kRowSums = 2;  // dG, k . dK_state
  static constexpr int kParts = 3;    // q . dQ_inter, k . dK_state, k . T^T dW (over K)
  static constexpr int kTriSums = 4;  // rows and columns of the A and P terms (over the chunk)
};
__host__ __device__ inline GradQKLayout grad_qk_layout(const Geometry& geo) {
  GradQKLayout l{};
  const int64_t Cp = geo.Cp;
  Carve sm(16);
  l.q = sm.take(Cp * geo.ldk * geo.item);
  l.k = sm.take(Cp * geo.ldk * geo.item);
  l.w = sm.take(Cp * geo.ldk * geo.item);
  l.t = sm.take(Cp * geo.ldc * geo.item);
  l.p = sm.take(Cp * geo.ldc * geo.item);
  l.dt = sm.take(Cp * geo.ldc * geo.item);
  l.m = sm.take(Cp * geo.ldc * geo.item);
  l.b = sm.take(Cp * 4);
  l.g = sm.take(Cp * 4);
  l.z = sm.take(Cp * 4);
  l.rows = sm.take(GradQKLayout::kRowSums * Cp * 4);
  l.part = sm.take(GradQKLayout::kParts * Cp * (geo.Kp / 16) * 4);
  l.tri = sm.take(GradQKLayout::kTriSums * Cp * (Cp / 16) * 4);
  l.bytes = sm.at;
  return l;
}

// For one warp's 16 x 16 tile at (m0, n0) with values v[jt][e] in the accumulator layout of two
// 16 x 8 tiles: stores the sum of each of its rows over its 16 columns at
// row_part[row * parts + n0 / 16], and of each column of c over its 16 rows at
// col_part[col * parts + m0 / 16]. Every lane of the warp calls it (shuffles in a fixed
// order); the caller sums a row's or a column's parts in order: deterministic sums.
__device__ __forceinline__ void tile_sums(const float (&r)[2][4], const float (&c)[2][4], int m0,
                                          int n0, float* row_part, float* col_part, int parts) {
  const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  float lo = r[0][0] + r[0][1] + r[1][0] + r[1][1], hi = r[0][2] + r[0][3] + r[1][2] + r[1][3];
#pragma unroll
  for (int d = 1; d < 4; d *= 2) {
    lo += __shfl_xor_sync(0xffffffffu, lo, d);
    hi += __shfl_xor_sync(0xffffffffu, hi, d);
  }
  if (t == 0) {
    row_part[(m0 + g) * parts + n0 / 16] = lo;
    row_part[(m0 + g + 8) * parts + n0 / 16] = hi;
  }
#pragma unroll
  for (int jt = 0; jt < 2; ++jt)
#pragma unroll
    for (int x = 0; x < 2; ++x) {
      float s = c[jt][x] + c[jt][2 + x];  // rows g and g + 8
#pragma unroll
      for (int d = 4; d < 32; d *= 2) s += __shfl_xor_sync(0xffffffffu, s, d);
      if (g == 0) col_part[(n0 + 8 * jt + 2 * t + x) * parts + m0 / 16] = s;
    }
}

// For one warp's 16 x 16 tile at (m0, n0) (two 16 x 8 tiles): sums f(jt, e, row, col) (the
// contribution of the lane's pair at (row, col), (row, col + 1)) over the tile's 16 columns
// for each of its rows, and stores row's sum at part[row * parts + n0 / 16]. Every lane of the
// warp calls it (shuffles); the caller sums a row's parts in order: a deterministic row sum.
template <class F>
__device__ __forceinline__ void row_partials(int m0, int n0, float* part, int parts, F&& f) {
  float lo = 0.0f, hi = 0.0f;  // rows g and g + 8
  for_pairs<2>(m0, n0, [&](int jt, int e, int i, int c) {
    const float x = f(jt, e, i, c);
    if (e == 0)
      lo += x;
    else
      hi += x;
  });
#pragma unroll
  for (int d = 1; d < 4; d *= 2) {
    lo += __shfl_xor_sync(0xffffffffu, lo, d);
    hi += __shfl_xor_sync(0xffffffffu, hi, d);
  }
  if (threadIdx.x % 4 == 0) {
    const int g = (threadIdx.x % 32) / 4;
    part[(m0 + g) * parts + n0 / 16] = lo;
    part[(m0 + g + 8) * parts + n0 / 16] = hi;
  }
}

// The pairs of an FP32 [rows][ld] matrix at this lane's accumulator places in the 16 x 16 tile
// at (m0, n0) (as for_pairs<2> visits them), loaded early so that they land during a product.
__device__ __forceinline__ void load_tile_pairs(float (&x)[2][4], const float* src, int ld, int m0,
                                                int n0) {
  for_pairs<2>(m0, n0, [&](int jt, int e, int i, int c) {
    const float2 v = __ldg(reinterpret_cast<const float2*>(src + i * ld + c));
    x[jt][e] = v.x;
    x[jt][e + 1] = v.y;
  });
}

// Copies a rows x cols tile of dO (the upstream gradient, any floating dtype, at `at` with
// rows `ld` apart) into shared memory in q's dtype, zeros past rows_valid / cols_valid; by
// cp.async when `async` (dO in q's dtype, aligned: the caller's check).
template <class T>
__device__ __forceinline__ void copy_dy_tile(T* dst, int ld_dst, const ChunkedBackward& b,
                                             int64_t at, int ld, int rows, int rows_valid,
                                             int cols, int cols_valid, bool async) {
  if (async) {
    copy_tile<T>(dst, ld_dst, static_cast<const T*>(b.dy) + at, ld, rows, rows_valid, cols,
                 cols_valid, true);
    return;
  }
  for_grid(rows, cols, [&](int r, int c) {
    dst[r * ld_dst + c] = from_float<T>(r < rows_valid && c < cols_valid
                                            ? load_any(b.dy, at + int64_t(r) * ld + c, b.dy_dtype)
                                            : 0.0f);
  });
}

// Step 2: the reverse pass. One block per (sequence, head, slab of kCols value columns); warp
// w keeps rows [16 (w + 8 j), +16) of the FP32 dS slab in registers, as the forward's state
// pass keeps S. Per chunk, last first: dS_next to shared memory and the workspace; dV' =
// P^T dO + r K dS_next to the workspace and (negated) to shared memory; then dS =
// exp(G_last) dS + (scale e Q)^T dO - W^T dV'. Two barriers a chunk; the next chunk's operands
// land meanwhile.
template <class T, int kCols>
__global__ void __launch_bounds__(kBackThreads, 1)
    dstate_kernel(const ChunkedBackward b, unsigned char* ws, int stages, bool async_dy) {
  extern __shared__ __align__(16) unsigned char smem[];
  const Chunked& p = b.f;
  const Geometry geo(p);
  const BackwardGeometry bg(geo, geo.slots * p.value_heads);
  const DStateLayout lay = dstate_layout(geo, kCols);
  const int64_t H = p.value_heads, Dk = p.key_dim, Dv = p.value_dim;
  const int Cp = int(geo.Cp), Kp = int(geo.Kp);
  const SlabBlock blk = slab_block(p, geo, ws, kCols);
  const int64_t h = blk.h, v0 = blk.v0, slot0 = blk.slot0, count = blk.count;
  const Range r = blk.r;
  const int cw = int(min(int64_t(kCols), geo.Vp - v0));  // the slab's columns inside Vp
  const int dyc = int(min(int64_t(kCols), Dv - v0));     // ... inside V
  const int ldk = int(geo.ldk), ldc = int(geo.ldc), lds = int(lay.ldv), vp = int(geo.Vp);

  T* dSs = reinterpret_cast<T*>(smem + lay.ds);  // dS_next, [Kp][lds]
  T* nV = reinterpret_cast<T*>(smem + lay.nv);   // -dV', [Cp][lds]
  T* sdO = reinterpret_cast<T*>(smem + lay.sdy);  // scale e dO, [Cp][lds]
  auto stage = [&](int64_t i) {
    const int64_t at = stages == 2 ? i % 2 : 0;
    return smem + lay.single + at * lay.stage;
  };
  auto chunk_of = [&](int64_t i) { return count - 1 - i; };  // the i-th chunk walked
  auto rows_of = [&](int64_t ci) { return int(min(geo.C, r.last - (r.first + ci * geo.C))); };
  auto unit_of = [&](int64_t ci) { return (slot0 + ci) * H + h; };
  // The sequence's first step of q / k and dO, and the walks of the tiles whose width is not
  // a constant, made once (see GridWalk): the loop would otherwise divide every chunk.
  const int64_t qk_first = qk_at(p, r.entry, h, r.first), dy_first = v_at(p, r.entry, h, r.first);
  const TileWalk<T> qk_how(Kp, p.async_qk), w_how(Kp, true), p_how(Cp, true);
  const GridWalk slab_pieces(kCols / (16 / int(sizeof(T))));  // a row of dO or of the slab
  // One cp.async group per call (empty past the last chunk walked).
  auto issue = [&](int64_t i) {
    if (i < count) {
      const int64_t ci = chunk_of(i), u = unit_of(ci), dt = ci * geo.C;
      const int rows = rows_of(ci);
      unsigned char* s = stage(i);
      const int64_t qk = qk_first + dt * p.qk_t;
      copy_tile<T>(reinterpret_cast<T*>(s + lay.q), ldk, static_cast<const T*>(p.q) + qk,
                   int(p.qk_t), Cp, rows, qk_how, int(Dk));
      copy_tile<T>(reinterpret_cast<T*>(s + lay.k), ldk, static_cast<const T*>(p.k) + qk,
                   int(p.qk_t), Cp, rows, qk_how, int(Dk));
      copy_tile<T>(reinterpret_cast<T*>(s + lay.w), ldk,
                   reinterpret_cast<const T*>(ws + geo.ws_w) + u * geo.Cp * geo.Kp, Kp, Cp, Cp,
                   w_how, Kp);
      copy_tile<T>(reinterpret_cast<T*>(s + lay.p), ldc,
                   reinterpret_cast<const T*>(ws + geo.ws_a) + u * geo.Cp * geo.Cp, Cp, Cp, Cp,
                   p_how, Cp);
      copy_dy_tile<T>(reinterpret_cast<T*>(s + lay.dy), lds, b, dy_first + dt * p.v_t + v0,
                      int(p.v_t), Cp, rows, kCols, dyc, async_dy);
      copy_row(reinterpret_cast<float*>(s + lay.f),
               reinterpret_cast<const float*>(ws + geo.ws_g) + u * geo.fstride, int(geo.fstride));
    }
    rudnn::cuda::tc::cp_async_commit();
  };

  static_assert(kBackThreads == 256, "the dS slab's layout (for_slab) assumes 8 warps");
  constexpr int kWarps = kBackThreads / 32;
  constexpr int kRowTiles = kSlabRowTiles;
  const int warp = threadIdx.x / 32;
  StateSlab<kCols> dS;
  load_slab<kCols>(dS, p, blk, b.dfinal, b.dfinal_dtype);

  if (stages == 2) issue(0);
  for (int64_t i = 0; i < count; ++i) {
    const int64_t ci = chunk_of(i), unit = unit_of(ci);
    // dS_next in q's dtype to shared memory for K dS_next (and from there to the workspace for
    // grad_v_kernel, after the barrier).
    stage_slab<T, kCols>(dS, dSs, lds, Kp);
    if (stages == 1) {
      __syncthreads();  // the previous chunk's reads of the one stage are done
      issue(i);
    }
    rudnn::cuda::tc::cp_async_wait<0>();
    __syncthreads();
    if (stages == 2) issue(i + 1);  // into the stage the previous chunk used
    write_slab(dSs, lds, reinterpret_cast<T*>(ws + bg.ds) + unit * geo.Kp * geo.Vp + v0, vp, cw,
               Kp, slab_pieces);
    const unsigned char* s = stage(i);
    const T* Q = reinterpret_cast<const T*>(s + lay.q);
    const T* K = reinterpret_cast<const T*>(s + lay.k);
    const T* W = reinterpret_cast<const T*>(s + lay.w);
    const T* P = reinterpret_cast<const T*>(s + lay.p);
    const T* dO = reinterpret_cast<const T*>(s + lay.dy);
    const float* F = reinterpret_cast<const float*>(s + lay.f);  // scale e, r, exp(G_last)

    // dO's rows times scale e, for (scale e Q)^T dO = Q^T (scale e dO): the narrower operand
    // (kCols against K columns), into its own buffer (dV' reads dO as it is). Read only after
    // the next barrier.
    scale_rows(dO, lds, sdO, lds, Cp, slab_pieces,
               [&](int row) { return make_float2(F[row], 1.0f); });
    // dV' = P^T dO + r K dS_next, to the workspace and, negated, to shared memory.
    T* dVg = reinterpret_cast<T*>(ws + bg.dv) + unit * geo.Cp * geo.Vp + v0;
    constexpr int kVN = kCols >= 32 ? 2 : 1;
    for_tiles<kVN>(Cp, kCols, [&](int m0, int n0) {
      float pd[kVN][4] = {}, ks[kVN][4] = {};
      tile_mma<T>(pd, Op<T, false>{P, ldc}, Op<T, false>{dO, lds}, m0, n0, Cp);
      tile_mma<T>(ks, Op<T, true>{K, ldk}, Op<T, false>{dSs, lds}, m0, n0, Kp);
      for_pairs<kVN>(m0, n0, [&](int jt, int e, int row, int c) {
        const float rr = F[Cp + row];  // 0 past the chunk's rows
        const float x0 = pd[jt][e] + rr * ks[jt][e], x1 = pd[jt][e + 1] + rr * ks[jt][e + 1];
        if (c < cw) store_pair(dVg + row * vp + c, x0, x1);
        store_pair(nV + row * lds + c, -x0, -x1);
      });
    });
    __syncthreads();

    // dS = exp(G_last) dS + Q^T (scale e dO) - W^T dV'.
    const float decay = F[2 * Cp];
#pragma unroll
    for (int j = 0; j < kRowTiles; ++j) {
      const int m0 = 16 * (warp + kWarps * j);
      if (m0 >= Kp) continue;
#pragma unroll
      for (int jt = 0; jt < kCols / 8; ++jt)
#pragma unroll
        for (int e = 0; e < 4; ++e) dS[j][jt][e] *= decay;
      tile_mma<T>(dS[j], Op<T, false>{Q, ldk}, Op<T, false>{sdO, lds}, m0, 0, Cp);
      tile_mma<T>(dS[j], Op<T, false>{W, ldk}, Op<T, false>{nV, lds}, m0, 0, Cp);
    }
  }
  rudnn::cuda::tc::cp_async_wait<0>();
  store_slab<kCols>(dS, p, blk, b.dstate, DType::f32);
}

// Step 3, one block per unit (chunk slot, head): the products that sum over V. Two blocks an SM
// for 16-bit inputs (K = V = 128, chunk 64), so that one block's loads overlap the other's
// products.
template <class T>
__global__ void __launch_bounds__(kBackThreads, sizeof(T) == 4 ? 1 : 2)
    grad_v_kernel(const ChunkedBackward b, unsigned char* ws, bool async_dy) {
  extern __shared__ __align__(16) unsigned char smem[];
  const Chunked& p = b.f;
  const Geometry geo(p);
  const int64_t H = p.value_heads, Dv = p.value_dim, units = geo.slots * H;
  const BackwardGeometry bg(geo, units);
  const GradVLayout lay = grad_v_layout(geo);
  const int64_t unit = blockIdx.x, h = unit % H;
  const Place pl = locate(p, geo, ws, unit / H);
  if (pl.rows <= 0) return;
  const int L = pl.rows, Cp = int(geo.Cp), Kp = int(geo.Kp), Vp = int(geo.Vp);
  const int ldx = int(lay.ldx), ldc = int(geo.ldc), parts = Vp / 16, piece = int(lay.rows);

  T* dO = reinterpret_cast<T*>(smem + lay.dy);
  T* Vq = reinterpret_cast<T*>(smem + lay.vp);  // V'
  T* dVq = reinterpret_cast<T*>(smem + lay.dv);
  T* Vs = reinterpret_cast<T*>(smem + lay.v);
  T* Ts = reinterpret_cast<T*>(smem + lay.t);
  T* Sc = reinterpret_cast<T*>(smem + lay.s);    // rows [k0, k0 + piece) of S_c
  T* dSn = reinterpret_cast<T*>(smem + lay.ds);  // and of dS_next
  float* F = reinterpret_cast<float*>(smem + lay.f);
  float* Bs = reinterpret_cast<float*>(smem + lay.b);
  float* part = reinterpret_cast<float*>(smem + lay.part);
  const int64_t vat = v_at(p, pl.range.entry, h, pl.t0);
  copy_dy_tile<T>(dO, ldx, b, vat, int(p.v_t), Cp, L, Vp, int(Dv), async_dy);
  copy_tile<T>(Vs, ldx, static_cast<const T*>(p.v) + vat, int(p.v_t), Cp, L, Vp, int(Dv),
               p.async_v);
  copy_tile<T>(Vq, ldx, reinterpret_cast<const T*>(ws + geo.ws_u) + unit * geo.Cp * geo.Vp, Vp,
               Cp, Cp, Vp, Vp, true);
  copy_tile<T>(dVq, ldx, reinterpret_cast<const T*>(ws + bg.dv) + unit * geo.Cp * geo.Vp, Vp, Cp,
               Cp, Vp, Vp, true);
  copy_tile<T>(Ts, ldc, reinterpret_cast<const T*>(ws + geo.ws_t) + unit * geo.Cp * geo.Cp, Cp,
               Cp, Cp, Cp, Cp, true);
  copy_tile<float>(F, int(geo.fstride),
                   reinterpret_cast<const float*>(ws + geo.ws_g) + unit * geo.fstride,
                   int(geo.fstride), 1, 1, int(geo.fstride), int(geo.fstride), true);
  rudnn::cuda::tc::cp_async_commit();
  const int64_t gate0 = g_at(p, pl.range.entry, h, pl.t0);
  for (int i = threadIdx.x; i < Cp; i += blockDim.x)
    Bs[i] = i < L ? load_any(p.beta, gate0 + i * p.g_t, p.beta_dtype) : 0.0f;
  rudnn::cuda::tc::cp_async_wait<0>();
  __syncthreads();

  // [Cp][Cp]: dP = dO V'^T (j <= i), dT_v = dV' V^T (j < i).
  float* dp = reinterpret_cast<float*>(ws + bg.dp) + unit * geo.Cp * geo.Cp;
  float* dt = reinterpret_cast<float*>(ws + bg.dt) + unit * geo.Cp * geo.Cp;
  for_tiles<2>(Cp, Cp, [&](int m0, int n0) {
    float op[2][4] = {}, ot[2][4] = {};
    if (n0 <= m0 + 15) {
      tile_mma<T>(op, Op<T, true>{dO, ldx}, Op<T, true>{Vq, ldx}, m0, n0, Vp);
      tile_mma<T>(ot, Op<T, true>{dVq, ldx}, Op<T, true>{Vs, ldx}, m0, n0, Vp);
    }
    for_pairs<2>(m0, n0, [&](int jt, int e, int i, int c) {
      store_pair(dp + i * Cp + c, c <= i ? op[jt][e] : 0.0f, c + 1 <= i ? op[jt][e + 1] : 0.0f);
      store_pair(dt + i * Cp + c, c < i ? ot[jt][e] : 0.0f, c + 1 < i ? ot[jt][e + 1] : 0.0f);
    });
  });
  // [Cp][Vp]: dV = beta T^T dV' (to the output), and dbeta's share sum_v (T^T dV') V.
  T* dv = static_cast<T*>(b.dv) + vat;
  for_tiles<2>(Cp, Vp, [&](int m0, int n0) {
    float acc[2][4] = {};
    tile_mma<T>(acc, Op<T, false>{Ts, ldc}, Op<T, false>{dVq, ldx}, m0, n0, Cp);
    for_pairs<2>(m0, n0, [&](int jt, int e, int i, int c) {
      if (i >= L) return;
#pragma unroll
      for (int x = 0; x < 2; ++x)
        if (c + x < Dv) dv[int64_t(i) * p.v_t + c + x] = from_float<T>(Bs[i] * acc[jt][e + x]);
    });
    row_partials(m0, n0, part, parts, [&](int jt, int e, int i, int c) {
      return acc[jt][e] * to_float(Vs[i * ldx + c]) + acc[jt][e + 1] * to_float(Vs[i * ldx + c + 1]);
    });
  });

  // [Cp][Kp], a piece of S_c's and dS_next's rows (columns of the results) at a time over V and
  // T's place: dQ_inter = scale e dO S_c^T, dW = -dV' S_c^T (one pass: S_c's fragments shared),
  // dK_state = r V' dS_next^T; and sum(dS_next * S_c).
  float* xq = reinterpret_cast<float*>(ws + bg.xq) + unit * geo.Cp * geo.Kp;
  float* xk = reinterpret_cast<float*>(ws + bg.xk) + unit * geo.Cp * geo.Kp;
  T* xw = reinterpret_cast<T*>(ws + bg.xw) + unit * geo.Cp * geo.Kp;
  const T* sg = reinterpret_cast<const T*>(ws + geo.ws_s) + unit * geo.Kp * geo.Vp;
  const T* dsg = reinterpret_cast<const T*>(ws + bg.ds) + unit * geo.Kp * geo.Vp;
  float own = 0.0f;
  const TileWalk<T> vp_how(Vp, true);  // the pieces' copies and sum, one walk
  for (int k0 = 0; k0 < Kp; k0 += piece) {
    const int rows = Kp - k0 < piece ? Kp - k0 : piece;
    __syncthreads();  // the region's previous readers are done
    copy_tile<T>(Sc, ldx, sg + int64_t(k0) * Vp, Vp, rows, rows, vp_how, Vp);
    copy_tile<T>(dSn, ldx, dsg + int64_t(k0) * Vp, Vp, rows, rows, vp_how, Vp);
    rudnn::cuda::tc::cp_async_commit();
    rudnn::cuda::tc::cp_async_wait<0>();
    __syncthreads();
    for_tiles<2>(Cp, rows, [&](int m0, int n0) {
      float oq[2][4] = {}, ow[2][4] = {}, ok[2][4] = {};
      const Op<T, true> s{Sc, ldx};
      tile_mma_two<T, false>(oq, ow, Op<T, true>{dO, ldx}, s, Op<T, true>{dVq, ldx}, s, m0, n0,
                             Vp);
      tile_mma<T>(ok, Op<T, true>{Vq, ldx}, Op<T, true>{dSn, ldx}, m0, n0, Vp);
      for_pairs<2>(m0, n0, [&](int jt, int e, int i, int c) {
        const float fq = F[i], fk = F[Cp + i];
        const int at = i * Kp + k0 + c;
        store_pair(xq + at, fq * oq[jt][e], fq * oq[jt][e + 1]);
        store_pair(xk + at, fk * ok[jt][e], fk * ok[jt][e + 1]);
        store_pair(xw + at, -ow[jt][e], -ow[jt][e + 1]);
      });
    });
    // By 16-byte pieces: two shared loads a piece, not two an element (round 73's
    // SourceCounters: the element walk took a fifth of the kernel's instructions).
    for_grid(rows, vp_how.walk, [&](int kk, int p16) {
      constexpr int per = 16 / int(sizeof(T));
      const int at = kk * ldx + p16 * per;
      const uint4 dsr = *reinterpret_cast<const uint4*>(dSn + at);
      const uint4 scr = *reinterpret_cast<const uint4*>(Sc + at);
      const T* ds = reinterpret_cast<const T*>(&dsr);
      const T* sc = reinterpret_cast<const T*>(&scr);
#pragma unroll
      for (int j = 0; j < per; ++j) own += to_float(ds[j]) * to_float(sc[j]);
    });
  }
  // sum(dS_next * S_c), for the last row's dG: per thread, per warp, then warp 0 in order.
  own = rudnn::cuda::warp_sum(own);
  __syncthreads();  // the row partials are complete
  float* wsum = F;  // the factors are no longer read
  if (threadIdx.x % 32 == 0) wsum[threadIdx.x / 32] = own;
  float* rows = reinterpret_cast<float*>(ws + bg.rows) + unit * geo.Cp;
  for (int i = threadIdx.x; i < Cp; i += blockDim.x) {
    float sum = 0.0f;
    for (int q = 0; q < parts; ++q) sum += part[i * parts + q];
    rows[i] = sum;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    float sum = 0.0f;
    for (int w = 0; w < int(blockDim.x) / 32; ++w) sum += wsum[w];
    reinterpret_cast<float*>(ws + bg.sums)[unit * 16] = sum;
  }
}

// Step 4, one block per unit: the products over the chunk's rows and K, and the per-step sums.
// Two blocks an SM for 16-bit inputs (K = 128, chunk 64), so that one block's loads overlap the
// other's products.
template <class T>
__global__ void __launch_bounds__(kBackThreads, sizeof(T) == 4 ? 1 : 2)
    grad_qk_kernel(const ChunkedBackward b, unsigned char* ws) {
  extern __shared__ __align__(16) unsigned char smem[];
  const Chunked& p = b.f;
  const Geometry geo(p);
  const int64_t H = p.value_heads, Dk = p.key_dim, units = geo.slots * H;
  const BackwardGeometry bg(geo, units);
  const GradQKLayout lay = grad_qk_layout(geo);
  const int64_t unit = blockIdx.x, h = unit % H;
  const Place pl = locate(p, geo, ws, unit / H);
  if (pl.rows <= 0) return;
  const int L = pl.rows, Cp = int(geo.Cp), Kp = int(geo.Kp);
  const int ldk = int(geo.ldk), ldc = int(geo.ldc);
  constexpr int kParts = GradQKLayout::kParts;
  const int parts = Kp / 16, tparts = Cp / 16;

  T* Qs = reinterpret_cast<T*>(smem + lay.q);
  T* Ks = reinterpret_cast<T*>(smem + lay.k);
  T* dWs = reinterpret_cast<T*>(smem + lay.w);
  T* Ts = reinterpret_cast<T*>(smem + lay.t);
  T* Ps = reinterpret_cast<T*>(smem + lay.p);
  T* dTs = reinterpret_cast<T*>(smem + lay.dt);  // dT, then S
  T* Ms = reinterpret_cast<T*>(smem + lay.m);    // M = T^T dT, then scale dP * D
  float* Bs = reinterpret_cast<float*>(smem + lay.b);
  float* Gs = reinterpret_cast<float*>(smem + lay.g);
  int* Zs = reinterpret_cast<int*>(smem + lay.z);
  float* dg = reinterpret_cast<float*>(smem + lay.rows);
  float* zrow = dg + Cp;
  float* part = reinterpret_cast<float*>(smem + lay.part);  // [Cp][kParts][parts]
  float* tri = reinterpret_cast<float*>(smem + lay.tri);    // 4 x [Cp][tparts]
  float *row_a = tri, *col_a = tri + Cp * tparts, *row_p = tri + 2 * Cp * tparts,
        *col_p = tri + 3 * Cp * tparts;
  const ChunkDecay decay{Gs, Zs};
  auto put = [&](T* m, int i, int j, float x) { m[i * ldc + j] = from_float<T>(x); };

  const int64_t qk = qk_at(p, pl.range.entry, h, pl.t0);
  copy_tile<T>(Qs, ldk, static_cast<const T*>(p.q) + qk, int(p.qk_t), Cp, L, Kp, int(Dk),
               p.async_qk);
  copy_tile<T>(Ks, ldk, static_cast<const T*>(p.k) + qk, int(p.qk_t), Cp, L, Kp, int(Dk),
               p.async_qk);
  copy_tile<T>(Ts, ldc, reinterpret_cast<const T*>(ws + geo.ws_t) + unit * geo.Cp * geo.Cp, Cp,
               Cp, Cp, Cp, Cp, true);
  copy_tile<T>(Ps, ldc, reinterpret_cast<const T*>(ws + geo.ws_a) + unit * geo.Cp * geo.Cp, Cp,
               Cp, Cp, Cp, Cp, true);
  copy_tile<T>(dWs, ldk, reinterpret_cast<const T*>(ws + bg.xw) + unit * geo.Cp * geo.Kp, Kp, Cp,
               Cp, Kp, Kp, true);
  rudnn::cuda::tc::cp_async_commit();
  const float* xq = reinterpret_cast<const float*>(ws + bg.xq) + unit * geo.Cp * geo.Kp;
  const float* xk = reinterpret_cast<const float*>(ws + bg.xk) + unit * geo.Cp * geo.Kp;
  const float* dpg = reinterpret_cast<const float*>(ws + bg.dp) + unit * geo.Cp * geo.Cp;
  const float* dtg = reinterpret_cast<const float*>(ws + bg.dt) + unit * geo.Cp * geo.Cp;
  const int64_t gate0 = g_at(p, pl.range.entry, h, pl.t0);
  chunk_decay_and_beta(p, gate0, L, Cp, Bs, Gs, Zs);
  rudnn::cuda::tc::cp_async_wait<0>();
  __syncthreads();

  // dT = dT_v beta_j + beta_j e_j (dW K^T), strictly lower (only that part reaches dA).
  for_tiles<2>(Cp, Cp, [&](int m0, int n0) {
    float acc[2][4] = {}, tv[2][4] = {};
    if (n0 <= m0 + 15) {  // not wholly above the diagonal
      load_tile_pairs(tv, dtg, Cp, m0, n0);  // in flight during the product
      tile_mma<T>(acc, Op<T, true>{dWs, ldk}, Op<T, true>{Ks, ldk}, m0, n0, Kp);
    }
    for_pairs<2>(m0, n0, [&](int jt, int e, int i, int j) {
#pragma unroll
      for (int y = 0; y < 2; ++y) {
        const int c = j + y;
        put(dTs, i, c,
            c < i ? Bs[c] * (tv[jt][e + y] + decay.through(c) * acc[jt][e + y]) : 0.0f);
      }
    });
  });
  __syncthreads();
  // M = T^T dT.
  for_tiles<2>(Cp, Cp, [&](int m0, int n0) {
    float acc[2][4] = {};
    tile_mma<T>(acc, Op<T, false>{Ts, ldc}, Op<T, false>{dTs, ldc}, m0, n0, Cp);
    for_pairs<2>(m0, n0, [&](int jt, int e, int i, int j) {
      put(Ms, i, j, acc[jt][e]);
      put(Ms, i, j + 1, acc[jt][e + 1]);
    });
  });
  __syncthreads();
  // dA * D = -(M T^T) * D, strictly lower, and the A terms' sums against K K^T (dbeta_i gets
  // the row sum, dG_i beta_i times it, dG_j minus the beta-weighted column sum). Over dT's
  // place, S: beta_i (dA * D)_ij at (i, j) and at (j, i), so that dK's (dA * D)^T (beta K) +
  // beta (dA * D) K is the one product S K (dA * D being strictly lower, each place of S holds
  // one of the two terms).
  for_tiles<2>(Cp, Cp, [&](int m0, int n0) {
    float acc[2][4] = {}, kk[2][4] = {}, rv[2][4], cv[2][4];
    if (n0 <= m0 + 15) {
      tile_mma<T>(acc, Op<T, true>{Ms, ldc}, Op<T, true>{Ts, ldc}, m0, n0, Cp);
      tile_mma<T>(kk, Op<T, true>{Ks, ldk}, Op<T, true>{Ks, ldk}, m0, n0, Kp);
    }
    for_pairs<2>(m0, n0, [&](int jt, int e, int i, int j) {
#pragma unroll
      for (int y = 0; y < 2; ++y) {
        const int c = j + y;
        const float a = c < i ? -acc[jt][e + y] * decay.between(i, c) : 0.0f;
        rv[jt][e + y] = a * kk[jt][e + y];
        cv[jt][e + y] = Bs[i] * rv[jt][e + y];
        if (c < i) {
          put(dTs, i, c, Bs[i] * a);
          put(dTs, c, i, Bs[i] * a);
        } else if (c == i) {
          put(dTs, i, c, 0.0f);
        }
      }
    });
    tile_sums(rv, cv, m0, n0, row_a, col_a, tparts);
  });
  __syncthreads();
  // scale dP * D (lower, diagonal included) over M's place, and the P terms' sums: dG_i gets
  // the row sum of dP * P, dG_j minus the column sum.
  for_tiles<2>(Cp, Cp, [&](int m0, int n0) {
    float d[2][4] = {}, rv[2][4];
    if (n0 <= m0 + 15) load_tile_pairs(d, dpg, Cp, m0, n0);
    for_pairs<2>(m0, n0, [&](int jt, int e, int i, int j) {
#pragma unroll
      for (int y = 0; y < 2; ++y) {
        const int c = j + y;
        const float v = c <= i ? d[jt][e + y] : 0.0f;
        rv[jt][e + y] = v * to_float(Ps[i * ldc + c]);
        put(Ms, i, c, c <= i ? p.scale * v * decay.between(i, c) : 0.0f);
      }
    });
    tile_sums(rv, rv, m0, n0, row_p, col_p, tparts);
  });
  __syncthreads();

  // dQ and dK are written two elements a store where their rows allow it (4-byte aligned
  // starts, an even row stride), else one.
  T* dq = static_cast<T*>(b.dq) + qk;
  T* dk = static_cast<T*>(b.dk) + qk;
  const bool pairs = sizeof(T) == 2 && p.qk_t % 2 == 0 &&
                     (reinterpret_cast<uintptr_t>(dq) | reinterpret_cast<uintptr_t>(dk)) % 4 == 0;
  auto put_row = [&](T* row, int c, float x0, float x1) {
    if (pairs && c + 1 < Dk) {
      store_pair(row + c, x0, x1);
    } else {
      if (c < Dk) row[c] = from_float<T>(x0);
      if (c + 1 < Dk) row[c + 1] = from_float<T>(x1);
    }
  };
  // dQ = dQ_inter + (scale dP * D) K, and the rows' q . dQ_inter.
  for_tiles<2>(Cp, Kp, [&](int m0, int n0) {
    float acc[2][4] = {}, x[2][4];
    load_tile_pairs(x, xq, Kp, m0, n0);  // in flight during the product
    tile_mma<T>(acc, Op<T, true>{Ms, ldc}, Op<T, false>{Ks, ldk}, m0, n0, Cp);
    for_pairs<2>(m0, n0, [&](int jt, int e, int i, int c) {
      if (i >= L) return;
      put_row(dq + int64_t(i) * p.qk_t, c, acc[jt][e] + x[jt][e],
              acc[jt][e + 1] + x[jt][e + 1]);
    });
    row_partials(m0, n0, part, kParts * parts, [&](int jt, int e, int i, int c) {
      return to_float(Qs[i * ldk + c]) * x[jt][e] + to_float(Qs[i * ldk + c + 1]) * x[jt][e + 1];
    });
  });
  // dK = dK_state + (scale dP * D)^T Q + S K + beta e T^T dW, and the rows' k . dK_state and
  // k . T^T dW.
  for_tiles<2>(Cp, Kp, [&](int m0, int n0) {
    float plain[2][4] = {}, wy[2][4] = {}, x[2][4];
    load_tile_pairs(x, xk, Kp, m0, n0);  // in flight during the products
    tile_mma<T>(plain, Op<T, false>{Ms, ldc}, Op<T, false>{Qs, ldk}, m0, n0, Cp);
    tile_mma<T>(plain, Op<T, true>{dTs, ldc}, Op<T, false>{Ks, ldk}, m0, n0, Cp);
    tile_mma<T>(wy, Op<T, false>{Ts, ldc}, Op<T, false>{dWs, ldk}, m0, n0, Cp);
    for_pairs<2>(m0, n0, [&](int jt, int e, int i, int c) {
      if (i >= L) return;
      const float be = Bs[i] * decay.through(i);
      put_row(dk + int64_t(i) * p.qk_t, c, x[jt][e] + plain[jt][e] + be * wy[jt][e],
              x[jt][e + 1] + plain[jt][e + 1] + be * wy[jt][e + 1]);
    });
    row_partials(m0, n0, part + parts, kParts * parts, [&](int jt, int e, int i, int c) {
      return to_float(Ks[i * ldk + c]) * x[jt][e] + to_float(Ks[i * ldk + c + 1]) * x[jt][e + 1];
    });
    row_partials(m0, n0, part + 2 * parts, kParts * parts, [&](int jt, int e, int i, int c) {
      return to_float(Ks[i * ldk + c]) * wy[jt][e] + to_float(Ks[i * ldk + c + 1]) * wy[jt][e + 1];
    });
  });
  __syncthreads();

  // Per row i < L: dbeta and dG (q . dQ_inter, the A and P terms, beta e (k . T^T dW), minus
  // k . dK_state); the last row also gets sum_j k_j . dK_state_j and exp(G_last) sum(dS_next
  // S_c). Then dlog_decay_t = sum_{t <= i < L} dG_i.
  const float* vrows = reinterpret_cast<const float*>(ws + bg.rows) + unit * geo.Cp;
  for (int i = threadIdx.x; i < L; i += blockDim.x) {
    float qx = 0.0f, kz = 0.0f, kb = 0.0f, ra = 0.0f, ca = 0.0f, rp = 0.0f, cp = 0.0f;
    const float* pr = part + i * kParts * parts;
    for (int q = 0; q < parts; ++q) {
      qx += pr[q];
      kz += pr[parts + q];
      kb += pr[2 * parts + q];
    }
    for (int q = 0; q < tparts; ++q) {
      ra += row_a[i * tparts + q];
      ca += col_a[i * tparts + q];
      rp += row_p[i * tparts + q];
      cp += col_p[i * tparts + q];
    }
    const float e = decay.through(i), bi = Bs[i];
    store_any(b.dbeta, gate0 + i * p.g_t, b.dbeta_dtype, vrows[i] + e * kb + ra);
    dg[i] = bi * e * kb + bi * ra - ca + rp - cp + qx - kz;
    zrow[i] = kz;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    float z = 0.0f;
    for (int i = 0; i < L; ++i) z += zrow[i];
    const float ss = reinterpret_cast<const float*>(ws + bg.sums)[unit * 16];
    dg[L - 1] += z + decay.through(L - 1) * ss;
    float run = 0.0f;
    for (int i = L - 1; i >= 0; --i) {
      run += dg[i];
      static_cast<float*>(b.dlog_decay)[gate0 + i * p.g_t] = run;
    }
  }
}

template <class T>
void launch_backward(const ChunkedBackward& problem, void* workspace, const Stream& stream) {
  ChunkedBackward b = problem;
  b.f.keep_wy = true;
  b.f.y = nullptr;
  b.f.state_out = nullptr;
  launch<T>(b.f, workspace, stream);  // the forward pass: W, V', P, T, S_c in the workspace
  b.f = with_copy_flags(b.f);
  rudnn::cuda::LaunchContext ctx(stream);
  const Geometry geo(b.f);
  const int64_t units = geo.slots * b.f.value_heads;
  const rudnn::cuda::DeviceInfo& info = rudnn::cuda::device_info(ctx.device);
  const int64_t limit = int64_t(info.shared_bytes_per_block_optin);
  auto* ws = static_cast<unsigned char*>(workspace);
  const bool async_dy = b.dy_dtype == b.f.dtype && b.f.async_v &&
                        reinterpret_cast<uintptr_t>(b.dy) % 16 == 0;

  // The reverse pass: kSlab value columns a block, or twice that where kSlab-wide blocks would
  // need more than one wave (one block an SM: two operand stages take ~150 KB at K = 128,
  // chunk 64). A block's time is its chain of chunks, so a second wave doubles the pass; wider
  // blocks also copy Q, K, W and P half as often.
  const int64_t heads = b.f.batch * b.f.value_heads;
  auto grid_of = [&](int cols) { return heads * ((b.f.value_dim + cols - 1) / cols); };
  if (grid_of(kSlab) == 0) return;
  auto reverse_pass = [&](auto* kernel, int cols) {
    const DStateLayout lay = dstate_layout(geo, cols);
    const int stages = lay.bytes(2) <= limit ? 2 : 1;
    detail::check_cuda(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                            int(lay.bytes(stages))),
                       "chunk_gated_delta_rule_backward state shared memory");
    kernel<<<unsigned(grid_of(cols)), kBackThreads, size_t(lay.bytes(stages)), ctx.stream>>>(
        b, ws, stages, async_dy);
    detail::check_cuda(cudaGetLastError(), "chunk_gated_delta_rule_backward state launch");
  };
  const DStateLayout wide_lay = dstate_layout(geo, 2 * kSlab);
  if (wide_slabs(chunked_tuning().reverse_pass_cols, grid_of(kSlab),
                 int64_t(info.multiprocessors), limit,
                 [&](int stages) { return wide_lay.bytes(stages); }))
    reverse_pass(dstate_kernel<T, 2 * kSlab>, 2 * kSlab);
  else
    reverse_pass(dstate_kernel<T, kSlab>, kSlab);
  if (units == 0) return;
  const int64_t v_bytes = grad_v_layout(geo).bytes, qk_bytes = grad_qk_layout(geo).bytes;
  detail::check_cuda(cudaFuncSetAttribute(grad_v_kernel<T>,
                                          cudaFuncAttributeMaxDynamicSharedMemorySize,
                                          int(v_bytes)),
                     "chunk_gated_delta_rule_backward grad_v shared memory");
  grad_v_kernel<T><<<unsigned(units), kBackThreads, size_t(v_bytes), ctx.stream>>>(b, ws,
                                                                                   async_dy);
  detail::check_cuda(cudaGetLastError(), "chunk_gated_delta_rule_backward grad_v launch");
  detail::check_cuda(cudaFuncSetAttribute(grad_qk_kernel<T>,
                                          cudaFuncAttributeMaxDynamicSharedMemorySize,
                                          int(qk_bytes)),
                     "chunk_gated_delta_rule_backward grad_qk shared memory");
  grad_qk_kernel<T><<<unsigned(units), kBackThreads, size_t(qk_bytes), ctx.stream>>>(b, ws);
  detail::check_cuda(cudaGetLastError(), "chunk_gated_delta_rule_backward grad_qk launch");
}

}  // namespace rudnn::gdn::cuda::chunk
