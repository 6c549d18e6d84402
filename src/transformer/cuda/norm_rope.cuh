// norm_rope in one pass: rms_norm of each row, then its rotation, written once. Two kernels:
// the paired kernel below (rows of 8, 16 or 32 vectors with both halves of a pair in one
// lane: the head sizes models use) and the lane-group kernel described here, which takes
// every other row shape.
//
// Bit for bit rms_norm -> rope composed (transformer.h says so):
// - The row sits in a group of G lanes of a warp as rms_norm's warp tile holds it: lane l of
//   the group keeps vectors (i * G + l) of W elements. For rows of at most 32 vectors rms_norm
//   uses one vector a lane over a whole warp (RegisterTile<32, 1, W>) and G is the smallest of
//   8, 16, 32 that covers the row; the lanes past the row hold 0 in either. The warp's
//   butterfly over offsets 16 .. G then adds exact zeros to each of the group's lanes (a lane
//   at distance >= G holds a sum of lanes past the row), so the butterfly over offsets
//   G/2 .. 1 inside the group leaves the same bits as rms_norm's. Longer rows take the whole
//   warp with V = 2 or 4 vectors a lane, rms_norm's own layout.
// - Each lane sums its squares in rms_row_rstd's order (cuda/rms_row.cuh), scales with
//   rms_scaled and rounds to the dtype as rms_norm stores it.
// - The rotation uses rope's frequency, angle and rotation functions (rope.cuh), whose
//   roundings are explicit.
//
// Streaming: a warp's task is one (b, t) and U rows of its heads per group (32 / G groups).
// Each lane copies its own vectors of the warp's next two tasks into the warp's ring in
// shared memory with cp.async (a lane reads back only what it copied: no barrier), so two
// tasks' rows are in flight while it works on one. The grid is persistent (the frequencies
// are formed once per block, while the first copies are in flight), and a warp takes the
// tasks of one (b, t) in turn when there are rows enough, forming their angles once (each
// task formed them again before: four times per (b, t) for 32 heads of 128 features).
// Halves pairs (j, j + dims/2) lie in other lanes of the group (or, for long rows, in
// another vector of the same lane) and are exchanged by shuffles; interleaved pairs
// (2j, 2j + 1) lie in one vector.
#pragma once

#include <cstdint>
#include <type_traits>

#include "cuda/rms_row.cuh"
#include "cuda/tensor_core/mma_sync.cuh"
#include "transformer/cuda/rope.cuh"
#include "transformer/cuda/tuning.h"

namespace rudnn::transformer::cuda {

constexpr int kNormRopeThreads = 256;
constexpr int kNormRopeWarps = kNormRopeThreads / 32;

// Rows a group loads before using the first (U), and the blocks per SM that
// __launch_bounds__ asks registers for (the kernel is bound by the bytes in flight per SM).
// V = 1 at 64 registers: 32 warps an SM with 4 rows each; the halves kernel spills ~48
// bytes there (its partner exchange), which L1 serves, rather than drop to 24 warps at 80.
// The weight is reloaded per row (an L1 hit) for the same reason.
template <int V>
constexpr int kNormRopeRows = V == 1 ? 4 : (V == 2 ? 2 : 1);
template <int V>
constexpr int kNormRopeMinBlocks = V == 1 ? 4 : (V == 2 ? 2 : 1);

// Warp tasks whose rows are in flight: a warp copies its lanes' vectors of its next two
// tasks into its slice of a shared-memory ring with cp.async while it works on one, so the
// bytes in flight do not depend on the registers (round 40: the rows held in registers,
// 32 warps an SM, reached 55 % of copy for halves pairs, 70 % for interleaved ones).
constexpr int kNormRopeRing = 3;

// Bytes of a warp's ring: kNormRopeRing tasks of U rows x V 16-byte vectors per lane.
template <int V>
constexpr size_t kNormRopeRingBytes = size_t{kNormRopeRing} * kNormRopeRows<V> * V * 32 * 16;

// Heads of one (b, t) that one warp task covers.
template <int G, int V>
constexpr int64_t kNormRopeHeadsPerTask = kNormRopeRows<V> * (32 / G);

template <class T, int G, int V, bool kTrad>
__global__ void __launch_bounds__(kNormRopeThreads, kNormRopeMinBlocks<V>)
    norm_rope_kernel(const NormRope q, const int64_t chunks, const int64_t chunks_per_unit) {
  constexpr int W = 16 / sizeof(T);
  constexpr int U = kNormRopeRows<V>;
  constexpr int kGroups = 32 / G;
  constexpr int P = kTrad ? W / 2 : W;  // angles per vector
  using Packed = Pack<T, W>;
  static_assert(V == 1 || G == 32, "several vectors a lane only over a whole warp");
  // The warps' rings ([warp][slot][u][i][lane] 16-byte vectors), then w_j = scale · θ_j for
  // j < dims / 2.
  extern __shared__ uint4 norm_rope_shared[];
  double* const frequency = reinterpret_cast<double*>(
      norm_rope_shared + kNormRopeWarps * kNormRopeRing * U * V * 32);

  const Rope& p = q.rope;
  const int lane = static_cast<int>(threadIdx.x) & 31, warp = static_cast<int>(threadIdx.x) >> 5;
  const int gl = lane % G, group = lane / G, group_base = lane - gl;
  const int cols = static_cast<int>(p.x.shape.dim);
  const int dims = static_cast<int>(p.dims), half = dims / 2;
  const int h = half / W;  // halves: vectors between a pair's two elements
  const float inv_cols = 1.0f / static_cast<float>(cols);  // as rms_norm's tile forms it

  auto column = [&](int i) { return (i * G + gl) * W; };
  auto valid = [&](int i) { return column(i) < cols; };

  auto load_weight = [&](int i, float (&g)[W]) {
    if (q.weight != nullptr && valid(i)) {
      ::rudnn::cuda::load_param<T, W>(q.weight, q.weight_f32, column(i), g);
    } else {
#pragma unroll
      for (int k = 0; k < W; ++k) g[k] = 1.0f;
    }
  };

  const int64_t seq = p.x.shape.seq, heads = p.x.shape.heads;
  const int64_t subs = (chunks + chunks_per_unit - 1) / chunks_per_unit;  // units a (b, t)
  const int64_t units = p.x.shape.batch * seq * subs;
  const T* const xs = static_cast<const T*>(p.x.data);
  T* const ys = static_cast<T*>(p.y.data);

  // A warp walks units u = its index + k * (warps of the grid); unit u is the chunks
  // [c, c_end) of (b, t) = row u / subs, each chunk a task of kNormRopeHeadsPerTask heads.
  // The chunks of a unit share their angles, formed once (a (b, t) in one unit when rows
  // are plenty: launch_norm_rope_shape picks chunks_per_unit). A cursor keeps the offset of
  // its (b, t) row in x (the copies) or y (the stores) rather than b and t: registers are
  // the limit at 64 a thread.
  struct Cursor {
    int64_t u, offset;
    int c, c_end;
  };
  struct RowStrides {
    int64_t batch, seq;
  };
  const int64_t unit_step = static_cast<int64_t>(gridDim.x) * kNormRopeWarps;
  // 32-bit quotients where they fit (every realistic shape): a 64-bit division is a
  // subroutine of some 70 instructions.
  const bool narrow = (units >> 32) == 0;
  auto div = [&](int64_t a, int64_t d) -> int64_t {
    return narrow ? static_cast<int64_t>(static_cast<uint32_t>(a) / static_cast<uint32_t>(d))
                  : a / d;
  };
  // (b, t) of unit u (u < units).
  auto row_of = [&](int64_t u, int64_t& b, int64_t& t) {
    const int64_t r = div(u, subs);
    b = div(r, seq);
    t = r - b * seq;
    return r;
  };
  auto enter = [&](Cursor& k, int64_t u, const RowStrides& strides) {
    k.u = u;
    if (u >= units) return;
    int64_t b, t;
    const int64_t r = row_of(u, b, t);
    k.offset = b * strides.batch + t * strides.seq;
    k.c = static_cast<int>((u - r * subs) * chunks_per_unit);
    k.c_end = static_cast<int>(k.c + chunks_per_unit < chunks ? k.c + chunks_per_unit : chunks);
  };
  const RowStrides x_strides{p.x.batch_stride, p.x.seq_stride};
  const RowStrides y_strides{p.y.batch_stride, p.y.seq_stride};
  auto advance = [&](Cursor& k, const RowStrides& strides) {
    if (++k.c == k.c_end) enter(k, k.u + unit_step, strides);
  };

  // Row u of a task's group is head m0 + u * kGroups + group (neighbouring groups take
  // neighbouring heads). Rows past the heads, and vectors past the row, are copied as zeros:
  // they compute on zeros and are not stored.
  uint4* const ring = norm_rope_shared + warp * (kNormRopeRing * U * V * 32) + lane;
  auto slot_vec = [&](int slot, int u, int i) -> uint4& { return ring[((slot * U + u) * V + i) * 32]; };
  // Copies this lane's vectors of the task at `k` into `slot` (nothing past the last unit)
  // and closes the group: one group per task, so that every lane counts the same groups in
  // flight.
  auto fetch = [&](const Cursor& k, int slot) {
    if (k.u < units) {
      const int64_t m0 = static_cast<int64_t>(k.c) * kNormRopeHeadsPerTask<G, V>;
      const T* const x = xs + k.offset;
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int64_t m = m0 + u * kGroups + group;
#pragma unroll
        for (int i = 0; i < V; ++i) {
          const bool live = m < heads && valid(i);
          ::rudnn::cuda::tc::cp_async_16(&slot_vec(slot, u, i),
                                         live ? x + m * p.x.head_stride + column(i) : xs,
                                         live ? 16u : 0u);
        }
      }
    }
    ::rudnn::cuda::tc::cp_async_commit();
  };

  Cursor cur{}, ahead{};
  enter(cur, static_cast<int64_t>(blockIdx.x) * kNormRopeWarps + warp, y_strides);
  enter(ahead, cur.u, x_strides);
  // The first tasks' copies go out before the frequency table is formed: they overlap it.
#pragma unroll
  for (int k = 0; k < kNormRopeRing - 1; ++k) {
    fetch(ahead, k);
    if (ahead.u < units) advance(ahead, x_strides);
  }

  {
    const double log2_base = log2(p.base);
    for (int j = static_cast<int>(threadIdx.x); j < half; j += kNormRopeThreads)
      frequency[j] = rope_frequency(p, j, log2_base);
  }
  __syncthreads();

  float c[V][P], s[V][P];
  int64_t angles_of = -1;  // the unit whose angles c and s hold
  // The loop bound is uniform over the warp: every shuffle below has all 32 lanes.
  for (int slot = 0; cur.u < units;
       advance(cur, y_strides), slot = slot + 1 == kNormRopeRing ? 0 : slot + 1) {
    // The slot read for the previous task is free: the task kNormRopeRing - 1 ahead goes
    // there, issued before the wait so that it does not queue behind it.
    fetch(ahead, slot == 0 ? kNormRopeRing - 1 : slot - 1);
    if (ahead.u < units) advance(ahead, x_strides);
    ::rudnn::cuda::tc::cp_async_wait<kNormRopeRing - 1>();  // this task's group has landed
    const int64_t m0 = static_cast<int64_t>(cur.c) * kNormRopeHeadsPerTask<G, V>;
    T* const y = ys + cur.offset;

    // The angles of this lane's elements: interleaved, pair col/2 + k of vector element 2k;
    // halves, pair j0 + k of element k (a vector lies wholly in [0, half), [half, dims) or
    // [dims, D): half is a multiple of W). Elements past dims keep (1, 0), unused.
    if (angles_of != cur.u) {
      angles_of = cur.u;
      int64_t b, t;
      row_of(cur.u, b, t);
      const double pos = token_position(p, b, t);
#pragma unroll
      for (int i = 0; i < V; ++i) {
        const int col = column(i);
#pragma unroll
        for (int k = 0; k < P; ++k) {
          c[i][k] = 1.0f;
          s[i][k] = 0.0f;
        }
        if (!valid(i) || col >= dims) continue;
        const int j0 = kTrad ? col / 2 : (col < half ? col : col - half);
#pragma unroll
        for (int k = 0; k < P; ++k) {
          if (!kTrad || col + 2 * k < dims) rope_sincos(pos, frequency[j0 + k], s[i][k], c[i][k]);
        }
      }
    }

#pragma unroll
    for (int u = 0; u < U; ++u) {
      Packed in[V];
#pragma unroll
      for (int i = 0; i < V; ++i) in[i] = __builtin_bit_cast(Packed, slot_vec(slot, u, i));
      auto v = [&](int i, int k) { return ::rudnn::cuda::pack_element(in[i], k); };
      // rms_row_rstd's sum over the group's lanes (see the top of the file).
      float ss = 0.0f;
#pragma unroll
      for (int i = 0; i < V; ++i) {
        if (!valid(i)) continue;
#pragma unroll
        for (int k = 0; k < W; ++k) ss += v(i, k) * v(i, k);
      }
#pragma unroll
      for (int offset = G / 2; offset > 0; offset >>= 1)
        ss += __shfl_xor_sync(::rudnn::cuda::kFullMask, ss, offset);
      const float rstd = rsqrtf(ss * inv_cols + q.eps);

      // rms_norm's output as stored in the dtype, read back: what rope reads.
      float n[V][W];
#pragma unroll
      for (int i = 0; i < V; ++i) {
        float g[W];
        load_weight(i, g);
#pragma unroll
        for (int k = 0; k < W; ++k)
          n[i][k] = ::rudnn::cuda::round_to<T>(::rudnn::cuda::rms_scaled(v(i, k), rstd, g[k]));
      }

      float out[V][W];
      if constexpr (kTrad) {
#pragma unroll
        for (int i = 0; i < V; ++i) {
#pragma unroll
          for (int k = 0; k < P; ++k) {
            if (column(i) + 2 * k < dims) {
              const RotatedPair rp = rope_rotate(n[i][2 * k], n[i][2 * k + 1], c[i][k], s[i][k]);
              out[i][2 * k] = rp.a;
              out[i][2 * k + 1] = rp.e;
            } else {
              out[i][2 * k] = n[i][2 * k];
              out[i][2 * k + 1] = n[i][2 * k + 1];
            }
          }
        }
      } else {
#pragma unroll
        for (int i = 0; i < V; ++i) {
          const int vec = i * G + gl, col = column(i);
          // The partner vector pv: vec + h in the first half, vec - h in the second, none
          // (this lane's own, unused) past dims. It lives in lane pv % G of the group, as
          // its vector pv / G.
          const int role = !valid(i) || col >= dims ? 0 : (col < half ? 1 : 2);
          const int pv = role == 1 ? vec + h : (role == 2 ? vec - h : vec);
          const int src_lane = group_base + pv % G, src_vec = pv / G;
          float partner[W];
          if (V > 1 && h % G == 0) {
            // In this lane (every feature rotated on a row of 2 or 4 vectors a lane).
#pragma unroll
            for (int k = 0; k < W; ++k) partner[k] = n[0][k];
#pragma unroll
            for (int r = 1; r < V; ++r) {
              if (r == src_vec) {
#pragma unroll
                for (int k = 0; k < W; ++k) partner[k] = n[r][k];
              }
            }
          } else {
#pragma unroll
            for (int k = 0; k < W; ++k) {
              partner[k] = 0.0f;
#pragma unroll
              for (int r = 0; r < V; ++r) {
                const float got = __shfl_sync(::rudnn::cuda::kFullMask, n[r][k], src_lane);
                if (r == src_vec) partner[k] = got;
              }
            }
          }
#pragma unroll
          for (int k = 0; k < W; ++k) {
            out[i][k] = role == 0 ? n[i][k]
                        : role == 1 ? rope_rotate(n[i][k], partner[k], c[i][k], s[i][k]).a
                                    : rope_rotate(partner[k], n[i][k], c[i][k], s[i][k]).e;
          }
        }
      }

      const int64_t m = m0 + u * kGroups + group;
      if (m < heads) {
#pragma unroll
        for (int i = 0; i < V; ++i) {
          if (valid(i))
            ::rudnn::cuda::store_pack<T, W>(y + m * p.y.head_stride + column(i), out[i]);
        }
      }
    }
  }
  ::rudnn::cuda::tc::cp_async_wait<0>();  // the groups past the last task are empty
}

// The largest frequency table (D <= 1024: dims / 2 <= 512), which the occupancy query
// assumes so that one query per device serves every call.
constexpr size_t kNormRopeTableBytes = sizeof(double) * 512;

template <class T, int G, int V, bool kTrad>
void launch_norm_rope_shape(const NormRope& q, const LaunchContext& ctx) {
  const auto kernel = norm_rope_kernel<T, G, V, kTrad>;
  const Rope& p = q.rope;
  constexpr int64_t kPerTask = kNormRopeHeadsPerTask<G, V>;
  const int64_t chunks = (p.x.shape.heads + kPerTask - 1) / kPerTask;
  constexpr size_t kRings = kNormRopeWarps * kNormRopeRingBytes<V>;
  static ::rudnn::cuda::PerDevice<int> shared_allowed, occupancy;
  shared_allowed.get(ctx.device, [&] {  // above the default 48 KB: opt in, once per device
    detail::check_cuda(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                            static_cast<int>(kRings + kNormRopeTableBytes)),
                       "cudaFuncSetAttribute");
    return 1;
  });
  const int64_t resident = ::rudnn::cuda::resident_blocks(
      kernel, kNormRopeThreads, ctx.device, occupancy, kRings + kNormRopeTableBytes);
  // A warp takes every chunk of a (b, t) in turn, so that its angles are formed once, while
  // the (b, t) rows alone keep at least half of the resident warps busy; with fewer rows
  // (decode) the chunks are split over more warps, down to one task a warp.
  const int64_t rows = p.x.shape.batch * p.x.shape.seq;
  const int64_t busy = resident * kNormRopeWarps / 2;
  int64_t subs = rows > 0 ? (busy + rows - 1) / rows : 1;
  subs = subs < 1 ? 1 : (subs > chunks ? chunks : subs);
  const int64_t chunks_per_unit = chunks > 0 ? (chunks + subs - 1) / subs : 1;
  const int64_t units = rows * ((chunks + chunks_per_unit - 1) / chunks_per_unit);
  int64_t blocks = (units + kNormRopeWarps - 1) / kNormRopeWarps;
  if (blocks > resident) blocks = resident;
  const size_t shared = kRings + sizeof(double) * static_cast<size_t>(p.dims / 2);
  kernel<<<static_cast<unsigned>(blocks), kNormRopeThreads, shared, ctx.stream>>>(
      q, chunks, chunks_per_unit);
}

// ---- Rows of 2L vectors with both halves of each pair in one lane ----------------------------
//
// For rows of NV = 8, 16 or 32 vectors (16-bit types: D = 64, 128, 256; F32: D = 32, 64, 128)
// a row takes L = NV / 2 lanes, lane l holding vectors l and l + L. That is rms_norm's sum
// with its first useful butterfly step done inside the lane: rms_norm's lane v holds vector v
// (lanes past the row hold 0), and its butterfly adds exact zeros at offsets >= NV, then at
// offset L gives lane l s_l + s_{l+L}, which is this lane's s_lo + s_hi (addition commutes);
// offsets L/2 .. 1 then run inside the L lanes as in rms_norm. With every feature rotated,
// halves pairs (j, j + D/2) are elements k of vectors l and l + L: one lane's, no exchange.
// Interleaved pairs lie in one vector for any dims.
//
// A thread keeps one (b, t) row of positions for all the heads of its chunk: its angles
// (W sines and cosines) and weights are formed once and reused over the heads, which it takes
// in batches of kNormRopePairHeads. Neighbouring row slots of a block take neighbouring t, so
// a warp's stores of one head are one contiguous run of 32 / L rows (in a new tensor or a
// cache). Two ways to have rows in flight (KernelTuning::norm_rope_pair_ring):
// - ring: each thread copies its vectors of the batches two ahead (crossing into its next
//   row) into its own slots of a shared-memory ring with cp.async, and reads back only what
//   it copied (no barrier); a batch's compute then waits for nothing but its own copies,
//   issued two batches earlier.
// - registers: a batch's vectors are loaded into registers before the first is used
//   (optionally asking L2 for the next batch first, KernelTuning::norm_rope_pair_prefetch).
constexpr int kNormRopePairHeads = 4;
constexpr int kNormRopePairRing = 3;  // batches a thread's ring holds: two ahead, one in use

// Bytes of the ring for one block.
constexpr size_t kNormRopePairRingBytes =
    size_t{kNormRopePairRing} * kNormRopePairHeads * 2 * kNormRopeThreads * 16;

// round_to<T> of each value, two at a time for 16-bit types (one packed conversion a pair,
// the same round-to-nearest-even bits as rms_norm's packed store).
template <class T, int W>
__device__ __forceinline__ void round_each(float (&v)[W]) {
  if constexpr (sizeof(T) == 2 && W % 2 == 0) {
#pragma unroll
    for (int k = 0; k < W; k += 2) {
      const auto pair =
          __builtin_bit_cast(Pack<T, 2>, ::rudnn::cuda::pack_pair<T>(v[k], v[k + 1]));
      v[k] = ::rudnn::cuda::pack_element(pair, 0);
      v[k + 1] = ::rudnn::cuda::pack_element(pair, 1);
    }
  } else {
#pragma unroll
    for (int k = 0; k < W; ++k) v[k] = ::rudnn::cuda::round_to<T>(v[k]);
  }
}

template <class T, int L, bool kTrad, bool kRing>
__global__ void __launch_bounds__(kNormRopeThreads, 2)
    norm_rope_pair_kernel(const NormRope q, const int64_t heads_per_chunk, const bool prefetch,
                          const bool streamed) {
  constexpr int W = 16 / sizeof(T);
  constexpr int kSlots = kNormRopeThreads / L;  // rows (b, t) of a block at a time
  constexpr int U = kNormRopePairHeads;
  using Packed = Pack<T, W>;
  // The ring ([slot][u][lo, hi][thread] 16-byte vectors, with kRing), then w_j = scale · θ_j
  // for j < dims / 2.
  extern __shared__ uint4 norm_rope_pair_shared[];
  double* const frequency = reinterpret_cast<double*>(
      norm_rope_pair_shared + (kRing ? kNormRopePairRingBytes / 16 : 0));

  const Rope& p = q.rope;
  const int gl = static_cast<int>(threadIdx.x) % L;
  const int slot = static_cast<int>(threadIdx.x) / L;
  const int lane = static_cast<int>(threadIdx.x) & 31;
  // Shuffles stay within the row's L lanes: the other rows of the warp may have left the
  // loop (past the last row).
  const unsigned group_mask = ((1u << L) - 1u) << (lane - gl);
  const int dims = static_cast<int>(p.dims), half = dims / 2;
  const float inv_cols = 1.0f / static_cast<float>(p.x.shape.dim);  // as rms_norm forms it
  const int col_lo = gl * W, col_hi = (gl + L) * W;

  const int64_t seq = p.x.shape.seq, heads = p.x.shape.heads;
  const int64_t rows = p.x.shape.batch * seq;
  const int64_t m0 = static_cast<int64_t>(blockIdx.y) * heads_per_chunk;
  const int64_t m1 = m0 + heads_per_chunk < heads ? m0 + heads_per_chunk : heads;
  const int64_t xh = p.x.head_stride, yh = p.y.head_stride;
  const int64_t row_step = static_cast<int64_t>(gridDim.x) * kSlots;
  const bool narrow = rows <= INT32_MAX;  // a 32-bit division where it fits
  auto position_of = [&](int64_t r, int64_t& b, int64_t& t) {
    b = narrow ? static_cast<int64_t>(static_cast<uint32_t>(r) / static_cast<uint32_t>(seq))
               : r / seq;
    t = r - b * seq;
  };
  // This lane's first vector of row r's head 0 in x.
  auto x_of = [&](int64_t r) {
    int64_t b, t;
    position_of(r, b, t);
    return static_cast<const T*>(p.x.data) + b * p.x.batch_stride + t * p.x.seq_stride + col_lo;
  };
  // Asks L2 for this lane's vectors of heads [m, m + U) of the row at x (no registers held).
  auto prefetch_heads = [&](const T* x, int64_t m) {
#pragma unroll
    for (int u = 0; u < U; ++u) {
      if (m + u < m1) {
        const T* const v = x + (m + u) * xh;
        asm volatile("prefetch.global.L2 [%0];" ::"l"(v));
        asm volatile("prefetch.global.L2 [%0];" ::"l"(v + L * W));
      }
    }
  };
  const int64_t first = static_cast<int64_t>(blockIdx.x) * kSlots + slot;

  // The ring's fetch cursor: the next batch to copy is heads [fetch_m, fetch_m + U) of row
  // fetch_r (at fetch_x), past the last row when fetch_r >= rows.
  uint4* const ring = norm_rope_pair_shared + threadIdx.x;
  auto ring_vec = [&](int s, int u, int h) -> uint4& {
    return ring[((s * U + u) * 2 + h) * kNormRopeThreads];
  };
  int64_t fetch_r = first, fetch_m = m0;
  const T* fetch_x = nullptr;
  // x and y are touched once: with `streamed` the copies mark x's lines evict-first in L2 and
  // the stores are streaming ones (KernelTuning::norm_rope_pair_streamed).
  const uint64_t read_once = streamed ? ::rudnn::cuda::tc::l2_evict_first_policy() : 0;
  auto copy_16 = [&](uint4& dst, const T* src) {
    if (streamed) {
      ::rudnn::cuda::tc::cp_async_16_hinted(&dst, src, 16u, read_once);
    } else {
      ::rudnn::cuda::tc::cp_async_16(&dst, src, 16u);
    }
  };
  // Copies the batch at the cursor into ring slot `s` and closes the group (an empty group
  // past the last row: every thread counts the same groups), then advances the cursor.
  auto fetch = [&](int s) {
    if (fetch_r < rows) {
#pragma unroll
      for (int u = 0; u < U; ++u) {
        if (fetch_m + u < m1) {
          const T* const v = fetch_x + (fetch_m + u) * xh;
          copy_16(ring_vec(s, u, 0), v);
          copy_16(ring_vec(s, u, 1), v + L * W);
        }
      }
      fetch_m += U;
      if (fetch_m >= m1) {
        fetch_m = m0;
        fetch_r += row_step;
        if (fetch_r < rows) fetch_x = x_of(fetch_r);
      }
    }
    ::rudnn::cuda::tc::cp_async_commit();
  };

  // The first batches are asked for before the frequency table is formed, which they overlap.
  if constexpr (kRing) {
    if (fetch_r < rows) fetch_x = x_of(fetch_r);
#pragma unroll
    for (int k = 0; k < kNormRopePairRing - 1; ++k) fetch(k);
  } else {
    if (prefetch && first < rows) prefetch_heads(x_of(first), m0);
  }

  // The weights' loads go out before the table is formed, which hides their latency.
  float g_lo[W], g_hi[W];
  if (q.weight != nullptr) {
    ::rudnn::cuda::load_param<T, W>(q.weight, q.weight_f32, col_lo, g_lo);
    ::rudnn::cuda::load_param<T, W>(q.weight, q.weight_f32, col_hi, g_hi);
  } else {
#pragma unroll
    for (int k = 0; k < W; ++k) g_lo[k] = g_hi[k] = 1.0f;
  }
  {
    const double log2_base = log2(p.base);
    for (int j = static_cast<int>(threadIdx.x); j < half; j += kNormRopeThreads)
      frequency[j] = rope_frequency(p, j, log2_base);
  }
  __syncthreads();

  // Pair k of this lane: halves, (element k of lo, element k of hi), pair index col_lo + k;
  // interleaved, k < W/2 the pair (2k, 2k+1) of lo, else (2k', 2k'+1) of hi (k' = k - W/2).
  auto pair_index = [&](int k) {
    if constexpr (kTrad) return k < W / 2 ? col_lo / 2 + k : col_hi / 2 + (k - W / 2);
    return col_lo + k;
  };

  float c[W], s[W];
  // One head of the row: its two vectors normalised, rotated and stored at y.
  auto row_head = [&](const Packed& lo, const Packed& hi, T* const y) {
    float a[W], e[W];
#pragma unroll
    for (int k = 0; k < W; ++k) {
      a[k] = ::rudnn::cuda::pack_element(lo, k);
      e[k] = ::rudnn::cuda::pack_element(hi, k);
    }
    // rms_row_rstd's order: each vector's squares in element order, then the butterfly.
    float ss_lo = 0.0f, ss_hi = 0.0f;
#pragma unroll
    for (int k = 0; k < W; ++k) ss_lo += a[k] * a[k];
#pragma unroll
    for (int k = 0; k < W; ++k) ss_hi += e[k] * e[k];
    float ss = ss_lo + ss_hi;
#pragma unroll
    for (int offset = L / 2; offset > 0; offset >>= 1)
      ss += __shfl_xor_sync(group_mask, ss, offset);
    const float rstd = rsqrtf(ss * inv_cols + q.eps);
    // rms_norm's output as stored in the dtype and read back by rope.
#pragma unroll
    for (int k = 0; k < W; ++k) {
      a[k] = ::rudnn::cuda::rms_scaled(a[k], rstd, g_lo[k]);
      e[k] = ::rudnn::cuda::rms_scaled(e[k], rstd, g_hi[k]);
    }
    round_each<T>(a);
    round_each<T>(e);
    float out_lo[W], out_hi[W];
    if constexpr (kTrad) {
#pragma unroll
      for (int k = 0; k < W / 2; ++k) {
        const bool rot_lo = pair_index(k) < half, rot_hi = pair_index(W / 2 + k) < half;
        const RotatedPair pl = rope_rotate(a[2 * k], a[2 * k + 1], c[k], s[k]);
        const RotatedPair ph = rope_rotate(e[2 * k], e[2 * k + 1], c[W / 2 + k], s[W / 2 + k]);
        out_lo[2 * k] = rot_lo ? pl.a : a[2 * k];
        out_lo[2 * k + 1] = rot_lo ? pl.e : a[2 * k + 1];
        out_hi[2 * k] = rot_hi ? ph.a : e[2 * k];
        out_hi[2 * k + 1] = rot_hi ? ph.e : e[2 * k + 1];
      }
    } else {
#pragma unroll
      for (int k = 0; k < W; ++k) {
        const RotatedPair pr = rope_rotate(a[k], e[k], c[k], s[k]);
        out_lo[k] = pr.a;
        out_hi[k] = pr.e;
      }
    }
    if (streamed) {
      ::rudnn::cuda::store_pack_streaming<T, W>(y, out_lo);
      ::rudnn::cuda::store_pack_streaming<T, W>(y + L * W, out_hi);
    } else {
      ::rudnn::cuda::store_pack<T, W>(y, out_lo);
      ::rudnn::cuda::store_pack<T, W>(y + L * W, out_hi);
    }
  };

  int ring_slot = 0;
  for (int64_t r = first; r < rows; r += row_step) {
    int64_t b, t;
    position_of(r, b, t);
    const double pos = token_position(p, b, t);
#pragma unroll
    for (int k = 0; k < W; ++k) {
      c[k] = 1.0f;
      s[k] = 0.0f;
      if (pair_index(k) < half) rope_sincos(pos, frequency[pair_index(k)], s[k], c[k]);
    }
    T* const y = static_cast<T*>(p.y.data) + b * p.y.batch_stride + t * p.y.seq_stride + col_lo;

    if constexpr (kRing) {
      for (int64_t m = m0; m < m1; m += U) {
        // The slot read for the previous batch is free: the batch two ahead goes there,
        // issued before the wait so that it does not queue behind it.
        fetch(ring_slot == 0 ? kNormRopePairRing - 1 : ring_slot - 1);
        ::rudnn::cuda::tc::cp_async_wait<kNormRopePairRing - 1>();  // this batch has landed
#pragma unroll
        for (int u = 0; u < U; ++u) {
          if (m + u >= m1) break;  // uniform over the row's lanes
          row_head(__builtin_bit_cast(Packed, ring_vec(ring_slot, u, 0)),
                   __builtin_bit_cast(Packed, ring_vec(ring_slot, u, 1)), y + (m + u) * yh);
        }
        ring_slot = ring_slot + 1 == kNormRopePairRing ? 0 : ring_slot + 1;
      }
    } else {
      const T* const x = static_cast<const T*>(p.x.data) + b * p.x.batch_stride +
                         t * p.x.seq_stride + col_lo;
      // The row after this one (its first batch is prefetched with this row's last).
      const T* const x_next = prefetch && r + row_step < rows ? x_of(r + row_step) : nullptr;
      for (int64_t m = m0; m < m1; m += U) {
        Packed lo[U], hi[U];
#pragma unroll
        for (int u = 0; u < U; ++u) {
          if (m + u < m1) {
            lo[u] = *reinterpret_cast<const Packed*>(x + (m + u) * xh);
            hi[u] = *reinterpret_cast<const Packed*>(x + (m + u) * xh + L * W);
          }
        }
        if (prefetch) {
          if (m + U < m1) {
            prefetch_heads(x, m + U);
          } else if (x_next != nullptr) {
            prefetch_heads(x_next, m0);
          }
        }
#pragma unroll
        for (int u = 0; u < U; ++u) {
          if (m + u >= m1) break;  // uniform over the row's lanes
          row_head(lo[u], hi[u], y + (m + u) * yh);
        }
      }
    }
  }
  if constexpr (kRing) ::rudnn::cuda::tc::cp_async_wait<0>();  // the groups past the end are empty
}

// Whether the paired kernel computes this problem: rows of 8, 16 or 32 vectors, and for
// halves pairs every feature rotated (a pair's halves then lie L vectors apart).
inline bool norm_rope_pairs_fit(const NormRope& q, int width) {
  const int64_t d = q.rope.x.shape.dim, nv = d / width;
  if (d % width != 0 || (nv != 8 && nv != 16 && nv != 32)) return false;
  return q.rope.traditional || q.rope.dims == d;
}

template <class T, int L, bool kTrad, bool kRing>
void launch_norm_rope_pairs(const NormRope& q, const LaunchContext& ctx) {
  constexpr int W = 16 / sizeof(T);
  constexpr int kSlots = kNormRopeThreads / L;
  const auto kernel = norm_rope_pair_kernel<T, L, kTrad, kRing>;
  const Rope& p = q.rope;
  constexpr size_t kRingBytes = kRing ? kNormRopePairRingBytes : 0;
  // The table's largest size for these rows (D / 2 pairs), so that one query serves all.
  constexpr size_t kMostShared = kRingBytes + sizeof(double) * L * W;
  static ::rudnn::cuda::PerDevice<int> shared_allowed, occupancy;
  if constexpr (kMostShared > 48 * 1024) {
    shared_allowed.get(ctx.device, [&] {  // above the default 48 KB: opt in, once per device
      detail::check_cuda(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                              static_cast<int>(kMostShared)),
                         "cudaFuncSetAttribute");
      return 1;
    });
  }
  const int64_t resident = ::rudnn::cuda::resident_blocks(kernel, kNormRopeThreads, ctx.device,
                                                          occupancy, kMostShared);
  const int64_t rows = p.x.shape.batch * p.x.shape.seq, heads = p.x.shape.heads;
  const int64_t row_blocks = (rows + kSlots - 1) / kSlots;
  // Heads split over grid.y only when the rows alone leave resident blocks idle (decode),
  // down to one batch of kNormRopePairHeads heads a chunk.
  int64_t chunks = row_blocks < resident ? (resident + row_blocks - 1) / row_blocks : 1;
  const int64_t most = (heads + kNormRopePairHeads - 1) / kNormRopePairHeads;
  chunks = chunks > most ? most : chunks;
  chunks = chunks < 1 ? 1 : (chunks > 65535 ? 65535 : chunks);
  const int64_t per_chunk = (heads + chunks - 1) / chunks;
  chunks = (heads + per_chunk - 1) / per_chunk;
  // Persistent: the resident blocks stride over the blocks of rows (each forms its table
  // once, and a thread's ring streams on across rows); else one block per block of rows.
  int64_t blocks = (resident + chunks - 1) / chunks;
  if (!kernel_tuning().norm_rope_pair_persistent || blocks > row_blocks) blocks = row_blocks;
  blocks = blocks < 1 ? 1 : (blocks > INT32_MAX ? INT32_MAX : blocks);
  const size_t shared = kRingBytes + sizeof(double) * static_cast<size_t>(p.dims / 2);
  kernel<<<dim3(static_cast<unsigned>(blocks), static_cast<unsigned>(chunks)), kNormRopeThreads,
           shared, ctx.stream>>>(q, per_chunk, kernel_tuning().norm_rope_pair_prefetch,
                                 kernel_tuning().norm_rope_pair_streamed);
}

// Picks the kernel and its shape from the row's vectors (rms_norm's warp tiles: row_tile.cuh
// choose_tile) and the pair layout: the paired kernel where it fits, else the lane groups.
template <class T>
void launch_norm_rope(const NormRope& q, const LaunchContext& ctx) {
  constexpr int W = 16 / sizeof(T);
  const int64_t vectors = q.rope.x.shape.dim / W;
  const bool trad = q.rope.traditional;
  auto go = [&](auto g_tag, auto v_tag) {
    constexpr int G = decltype(g_tag)::value, V = decltype(v_tag)::value;
    trad ? launch_norm_rope_shape<T, G, V, true>(q, ctx)
         : launch_norm_rope_shape<T, G, V, false>(q, ctx);
  };
  if (kernel_tuning().norm_rope_pairs && norm_rope_pairs_fit(q, W)) {
    const bool ring = kernel_tuning().norm_rope_pair_ring;
    auto pairs = [&](auto l_tag) {
      constexpr int L = decltype(l_tag)::value;
      if (ring) {
        trad ? launch_norm_rope_pairs<T, L, true, true>(q, ctx)
             : launch_norm_rope_pairs<T, L, false, true>(q, ctx);
      } else {
        trad ? launch_norm_rope_pairs<T, L, true, false>(q, ctx)
             : launch_norm_rope_pairs<T, L, false, false>(q, ctx);
      }
    };
    if (vectors == 8) {
      pairs(std::integral_constant<int, 4>{});
    } else if (vectors == 16) {
      pairs(std::integral_constant<int, 8>{});
    } else {
      pairs(std::integral_constant<int, 16>{});
    }
    detail::check_launch("norm_rope");
    return;
  }
  using One = std::integral_constant<int, 1>;
  if (vectors <= 8) {
    go(std::integral_constant<int, 8>{}, One{});
  } else if (vectors <= 16) {
    go(std::integral_constant<int, 16>{}, One{});
  } else if (vectors <= 32) {
    go(std::integral_constant<int, 32>{}, One{});
  } else if (vectors <= 64) {
    go(std::integral_constant<int, 32>{}, std::integral_constant<int, 2>{});
  } else {
    go(std::integral_constant<int, 32>{}, std::integral_constant<int, 4>{});
  }
  detail::check_launch("norm_rope");
}

}  // namespace rudnn::transformer::cuda
