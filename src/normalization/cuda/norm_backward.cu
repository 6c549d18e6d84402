// LayerNorm and RMSNorm backward.
//
// Register tiles (rows that fit in registers): a persistent grid of P row slots; each slot
// walks its rows, writes dx, and keeps its columns' dgamma/dbeta sums in shared memory (each
// thread its own slice: registers would hold x, dy and both sums, 188 registers for
// LayerNorm at 8192 columns, one block per SM); at the end every slot writes one FP32 partial
// row, and reduce_partials sums the P partials per column in slot order. Bytes: x and dy
// read once, dx written once, plus P * H * 4 per parameter gradient.
//
// Loop tiles (long or unaligned rows): the row kernel makes three passes over x and dy
// (statistics, the two row sums, dx) and records each row's mean and rstd; a column kernel
// then forms dgamma/dbeta partials over chunks of rows, summed by reduce_partials.
//
// LayerNorm's saved statistics (p.mean, p.rstd), when given, replace the row's Welford
// reduction in the tile kernel and the statistics pass of the loop kernel.
//
// Streamed LayerNorm (rows of 129 .. 1024 16-byte vectors, the default where it applies:
// tuning.h streamed_layer_norm_backward): the tile kernel's rows are loaded, waited for,
// reduced behind block barriers and written before the next load starts; with two 256-thread
// blocks an SM (116 registers, 64 KB of column sums each) most of the time no load is in
// flight (51-55 % of the copy bandwidth, RESULTS.md rounds 24 and 37). In the streamed kernel
// each thread owns one vector of the row and copies its own x and dy vectors of the block's
// next rows into a ring of shared-memory slots with cp.async, so two steps of rows are in
// flight while the block works on one, however long its reductions take. A thread reads back
// only what it copied, so the ring needs no barrier (cp.async.wait_group orders a thread's own
// copies). A step is two rows whose sums go through one block reduction behind one barrier
// (a reduce-scatter: round 40 measured one Welford and one pair reduction per row, every
// warp folding every word, at 45.7 % of copy, the saved-statistics form at 66.5 %; round 42's
// two rows a step with a second barrier for the fold, 75.2 % and 78.4 %). Its W columns'
// dgamma/dbeta sums stay in registers; each block writes one partial row at the end, summed
// by reduce_partials as the tile kernel's.
//
// Both orders are fixed by the grid, so the gradients are deterministic run to run on one
// device.
#include <type_traits>
#include <utility>

#include "cuda/tensor_core/mma_sync.cuh"
#include "normalization/cuda/launch.h"
#include "normalization/cuda/row_tile.cuh"
#include "normalization/cuda/tuning.h"
#include "rudnn/tensor.h"

namespace rudnn::norm::cuda {

namespace {

using rudnn::cuda::group_reduce;
using rudnn::cuda::SumOp;
using rudnn::cuda::WelfordState;

// Per-column FP32 sums that a thread keeps over its rows, in dynamic shared memory: sum k of
// the thread's vector i, element j, is word ((k * V + i) * W + j) * threads + thread, read
// and written as float4s (threads side by side: no bank conflicts) when W allows.
template <class Tile, int kSums>
struct ColumnSums {
  static constexpr int V = Tile::kVecs, W = Tile::kWidth, kThreads = Tile::kBlockThreads;
  static constexpr int kChunk = W % 4 == 0 ? 4 : 1;  // floats per access
  static constexpr size_t kBytes = sizeof(float) * kSums * V * W * kThreads;
  float* base;

  __device__ explicit ColumnSums(float* shared) : base(shared) {
#pragma unroll
    for (int k = 0; k < kSums; ++k)
#pragma unroll
      for (int i = 0; i < V; ++i)
#pragma unroll
        for (int j = 0; j < W; j += kChunk) chunk(k, i, j) = Chunk{};
  }

  using Chunk = std::conditional_t<kChunk == 4, float4, float>;
  __device__ Chunk& chunk(int k, int i, int j) const {
    return reinterpret_cast<Chunk*>(
        base)[((k * V + i) * (W / kChunk) + j / kChunk) * kThreads + threadIdx.x];
  }
  // sum k, vector i += a * b (or += a with b absent), element by element.
  __device__ void add(int k, int i, const float (&a)[W], const float (&b)[W]) const {
#pragma unroll
    for (int j = 0; j < W; j += kChunk) {
      Chunk& c = chunk(k, i, j);
      if constexpr (kChunk == 4) {
        float4 v = c;
        v.x += a[j] * b[j];
        v.y += a[j + 1] * b[j + 1];
        v.z += a[j + 2] * b[j + 2];
        v.w += a[j + 3] * b[j + 3];
        c = v;
      } else {
        c += a[j] * b[j];
      }
    }
  }
  __device__ void add(int k, int i, const float (&a)[W]) const {
#pragma unroll
    for (int j = 0; j < W; j += kChunk) {
      Chunk& c = chunk(k, i, j);
      if constexpr (kChunk == 4) {
        float4 v = c;
        v.x += a[j];
        v.y += a[j + 1];
        v.z += a[j + 2];
        v.w += a[j + 3];
        c = v;
      } else {
        c += a[j];
      }
    }
  }
  __device__ void get(int k, int i, float (&out)[W]) const {
#pragma unroll
    for (int j = 0; j < W; j += kChunk) {
      if constexpr (kChunk == 4) {
        const float4 v = chunk(k, i, j);
        out[j] = v.x, out[j + 1] = v.y, out[j + 2] = v.z, out[j + 3] = v.w;
      } else {
        out[j] = chunk(k, i, j);
      }
    }
  }
};

template <NormKind kKind>
constexpr int kParamSums = kKind == NormKind::layer ? 2 : 1;  // dgamma (and dbeta)

// kSaved (LayerNorm only): each row's mean and rstd are read from p.mean / p.rstd instead
// of reduced from x, which leaves one block reduction per row instead of two.
template <class T, class Tile, NormKind kKind, bool kSaved = false>
__global__ void __launch_bounds__(Tile::kBlockThreads)
    norm_backward_tile(NormBackward p, float* __restrict__ dgamma_part,
                       float* __restrict__ dbeta_part) {
  constexpr int V = Tile::kVecs, W = Tile::kWidth;
  __shared__ float2 scratch2[32];
  __shared__ rudnn::cuda::WelfordState welford_scratch[32];
  extern __shared__ float4 column_sums_shared[];
  const RowThread<Tile> t;
  const int cols = static_cast<int>(p.cols);
  const float inv_cols = 1.0f / static_cast<float>(cols);
  // Sum 0: dgamma's terms dy * xhat; sum 1 (LayerNorm): dbeta's, dy.
  const ColumnSums<Tile, kParamSums<kKind>> sums_of(reinterpret_cast<float*>(column_sums_shared));

  for (int64_t row = t.first_row(); row < p.rows; row += t.row_step()) {
    float x[V][W], dy[V][W];
    load_row(t, static_cast<const T*>(p.x.data) + row * p.x.stride, cols, x);
    load_row(t, static_cast<const T*>(p.dy.data) + row * p.dy.stride, cols, dy);

    if constexpr (kKind == NormKind::rms) {
      // One reduction: sum x^2 and sum g*dy*x; mean(g*dy*xhat) = rstd * sum(g*dy*x) / H.
      float2 sums = make_float2(0.0f, 0.0f);
#pragma unroll
      for (int i = 0; i < V; ++i) {
        const int c = t.column(i);
        if (c >= cols) continue;
        float g[W];
        load_param_or<T, W>(p.gamma, c, 1.0f, g);
#pragma unroll
        for (int j = 0; j < W; ++j) {
          sums.x += x[i][j] * x[i][j];
          sums.y += g[j] * dy[i][j] * x[i][j];
        }
      }
      sums = group_reduce<Tile::kThreadsPerRow>(sums, rudnn::cuda::PairSumOp{}, scratch2);
      const float rstd = rsqrtf(sums.x * inv_cols + p.eps);
      const float mean_gdy_xhat = rstd * sums.y * inv_cols;
#pragma unroll
      for (int i = 0; i < V; ++i) {
        const int c = t.column(i);
        if (c >= cols) continue;
        float g[W];
        load_param_or<T, W>(p.gamma, c, 1.0f, g);  // again: an L1 hit, cheaper than registers
        float xhat[W];
#pragma unroll
        for (int j = 0; j < W; ++j) xhat[j] = x[i][j] * rstd;
        sums_of.add(0, i, dy[i], xhat);
#pragma unroll
        for (int j = 0; j < W; ++j) dy[i][j] = rstd * (g[j] * dy[i][j] - xhat[j] * mean_gdy_xhat);
      }
    } else {
      // Mean and variance in one (Chan) reduction, then the two row sums in another. (Plain
      // sums about the exact mean instead of Chan's merge measured slower: RESULTS.md.)
      float mean, rstd;
      if constexpr (kSaved) {
        mean = static_cast<const float*>(p.mean)[row];
        rstd = static_cast<const float*>(p.rstd)[row];
      } else {
        const WelfordState w = group_reduce<Tile::kThreadsPerRow>(
            rudnn::cuda::local_welford(flat(x), valid_count(t, cols)), rudnn::cuda::WelfordMerge{},
            welford_scratch);
        mean = w.mean;
        rstd = rsqrtf(w.m2 * inv_cols + p.eps);
      }
      // x becomes xhat, dy becomes gamma * dy; the parameter sums take dy * xhat and dy first.
      float2 sums = make_float2(0.0f, 0.0f);  // (sum g*dy, sum g*dy*xhat)
#pragma unroll
      for (int i = 0; i < V; ++i) {
        const int c = t.column(i);
        if (c >= cols) continue;
        float g[W];
        load_param_or<T, W>(p.gamma, c, 1.0f, g);
#pragma unroll
        for (int j = 0; j < W; ++j) x[i][j] = (x[i][j] - mean) * rstd;
        sums_of.add(0, i, dy[i], x[i]);
        sums_of.add(1, i, dy[i]);
#pragma unroll
        for (int j = 0; j < W; ++j) {
          dy[i][j] *= g[j];
          sums.x += dy[i][j];
          sums.y += dy[i][j] * x[i][j];
        }
      }
      sums = group_reduce<Tile::kThreadsPerRow>(sums, rudnn::cuda::PairSumOp{}, scratch2);
      const float mean_gdy = sums.x * inv_cols, mean_gdy_xhat = sums.y * inv_cols;
#pragma unroll
      for (int i = 0; i < V; ++i)
#pragma unroll
        for (int j = 0; j < W; ++j)
          dy[i][j] = rstd * (dy[i][j] - mean_gdy - x[i][j] * mean_gdy_xhat);
    }
    store_row(t, static_cast<T*>(p.dx.data) + row * p.dx.stride, cols, dy);
  }

  // One partial row per row slot (slots that saw no rows write zeros).
  const int64_t slot_row = static_cast<int64_t>(blockIdx.x) * Tile::kRowsPerBlock + t.slot;
#pragma unroll
  for (int i = 0; i < V; ++i) {
    const int c = t.column(i);
    if (c >= cols) continue;
    float sum[W];
    if (dgamma_part) {
      sums_of.get(0, i, sum);
      rudnn::cuda::store_pack<float, W>(dgamma_part + slot_row * cols + c, sum);
    }
    if constexpr (kKind == NormKind::layer) {
      if (dbeta_part) {
        sums_of.get(1, i, sum);
        rudnn::cuda::store_pack<float, W>(dbeta_part + slot_row * cols + c, sum);
      }
    }
  }
}

// ---- Streamed LayerNorm backward (see the top of the file) ------------------------------------

constexpr int kStreamRows = 2;   // rows a block reduces together: one block reduction per step
constexpr int kStreamSteps = 3;  // ring slots, in steps: two steps in flight while one is used

// Dynamic shared memory of a block: kStreamSteps x kStreamRows slots of x's and dy's
// vectors, 16 bytes each.
template <int kThreads>
constexpr size_t kStreamShared = size_t{kStreamSteps} * kStreamRows * 2 * kThreads * 16;

// Sums M words over a warp as a reduce-scatter: at each of the first log2(M) levels a lane
// keeps half of its words and sends the other half to its partner, so the warp spends
// M - 1 + (5 - log2 M) shuffles instead of the butterfly's 5 M. Returns, to every lane, the
// warp's sum of word lane / (32 / M). Fixed order: deterministic.
template <int M>
struct WarpScatterSum {
  __device__ __forceinline__ static float run(const float (&v)[M], int lane, int offset) {
    const bool upper = (lane & offset) != 0;
    float kept[M / 2];
#pragma unroll
    for (int i = 0; i < M / 2; ++i) {
      const float send = upper ? v[i] : v[i + M / 2];
      const float keep = upper ? v[i + M / 2] : v[i];
      kept[i] = keep + __shfl_xor_sync(rudnn::cuda::kFullMask, send, offset);
    }
    return WarpScatterSum<M / 2>::run(kept, lane, offset >> 1);
  }
};
template <>
struct WarpScatterSum<1> {
  __device__ __forceinline__ static float run(const float (&v)[1], int, int offset) {
    float s = v[0];
    for (; offset > 0; offset >>= 1) s += __shfl_xor_sync(rudnn::cuda::kFullMask, s, offset);
    return s;
  }
};

// Sums N words (a power of two) over the block; every thread gets the N sums back in v.
// Each warp reduce-scatters its words and stores them to scratch[word][warp]; after one
// barrier every warp folds all of them itself: lane l adds the kWarps * N / 32 stores of
// word l / (32 / N) that it owns, its 32 / N lanes of that word sum theirs, and N shuffles
// hand each word to every lane (the fold of round 42, by warps 0 .. N-1 behind a second
// barrier, cost one more barrier a step). `scratch`: two buffers of N * (kWarps + 32 / N)
// floats (the padding puts the lanes' loads in distinct banks); `parity` alternates between
// consecutive calls, so a call's stores never meet the previous call's loads (a thread
// stores to a buffer again only after the next call's barrier, which every thread passes
// after its loads of this one). Fixed order: deterministic.
template <int kThreads, int N>
struct BlockSums {
  static constexpr int kWarps = kThreads / 32;
  static constexpr int kLanesPerWord = 32 / N;
  static constexpr int kPerLane = kWarps / kLanesPerWord;  // stores a lane adds
  static constexpr int kStride = kWarps + kLanesPerWord;   // floats between words
  static constexpr int kFloats = 2 * N * kStride;
  static_assert(N <= 32 && (N & (N - 1)) == 0 && kPerLane >= 1,
                "N a power of two, kWarps * N >= 32");

  __device__ __forceinline__ static void run(float (&v)[N], float* scratch, int parity) {
    const int lane = static_cast<int>(threadIdx.x) & 31, warp = static_cast<int>(threadIdx.x) >> 5;
    float* const buf = scratch + parity * (N * kStride);
    const float s = WarpScatterSum<N>::run(v, lane, 16);
    if (lane % kLanesPerWord == 0) buf[(lane / kLanesPerWord) * kStride + warp] = s;
    __syncthreads();
    const int word = lane / kLanesPerWord, part = lane % kLanesPerWord;
    float t = 0.0f;
#pragma unroll
    for (int k = 0; k < kPerLane; ++k) t += buf[word * kStride + k * kLanesPerWord + part];
#pragma unroll
    for (int offset = kLanesPerWord / 2; offset > 0; offset >>= 1)
      t += __shfl_xor_sync(rudnn::cuda::kFullMask, t, offset);
#pragma unroll
    for (int i = 0; i < N; ++i) v[i] = __shfl_sync(rudnn::cuda::kFullMask, t, i * kLanesPerWord);
  }
};

// kThreads threads a row, thread t owning vector t (W columns); 1024 threads' worth of
// blocks an SM (64 registers a thread). A step is kStreamRows consecutive rows of the block,
// reduced together. Per row, kSaved: (sum g*dy, sum g*dy*xhat) from the saved statistics;
// otherwise the four sums about the row's first element K (d = x - K): sum d, sum d^2,
// sum g*dy, sum g*dy*d, from which mean = K + sum d / H, var = sum d^2 / H - (sum d / H)^2
// and sum g*dy*xhat = rstd (sum g*dy*d - (sum d / H) sum g*dy). The shift keeps a constant
// row exact (every d is 0) and an offset row free of cancellation, as the forward's mean.
template <class T, int kThreads, bool kSaved>
__global__ void __launch_bounds__(kThreads, 1024 / kThreads)
    layer_norm_backward_stream(NormBackward p, float* __restrict__ dgamma_part,
                               float* __restrict__ dbeta_part) {
  namespace tc = rudnn::cuda::tc;
  constexpr int W = 16 / sizeof(T);
  constexpr int R = kStreamRows, S = kStreamSteps;
  constexpr int N = (kSaved ? 2 : 4) * R;  // words reduced per step
  using Packed = rudnn::cuda::Pack<T, W>;
  extern __shared__ uint4 ring[];  // [S][R][2][kThreads]: step slot, row, x (0) or dy (1), thread
  using Sums = BlockSums<kThreads, N>;
  __shared__ float sums_scratch[Sums::kFloats];

  const int tid = static_cast<int>(threadIdx.x);
  const int cols = static_cast<int>(p.cols);
  const int col = tid * W;
  const bool active = col < cols;
  const float inv_cols = 1.0f / static_cast<float>(cols);
  // The block's rows: a contiguous range, the ranges differing by at most one row (strided
  // steps of R rows left some blocks a whole step more than others: 63 against 62.06 on
  // average at 16384 rows over 132 blocks).
  const int64_t first = p.rows * blockIdx.x / gridDim.x;
  const int64_t end = p.rows * (blockIdx.x + 1) / gridDim.x;
  constexpr int64_t stride = R;
  const T* const xs = static_cast<const T*>(p.x.data);
  const T* const dys = static_cast<const T*>(p.dy.data);
  auto vec = [&](int slot, int r, int which) -> uint4& {
    return ring[((slot * R + r) * 2 + which) * kThreads + tid];
  };

  // Copies this thread's vectors of the step's rows into `slot` (none past the last row or
  // the row's end) and closes the group: one group per step, empty or not, so that every
  // thread counts the same groups in flight.
  auto fetch = [&](int64_t row0, int slot) {
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const int64_t row = row0 + r;
      if (active && row < end) {
        tc::cp_async_16(&vec(slot, r, 0), xs + row * p.x.stride + col, 16);
        tc::cp_async_16(&vec(slot, r, 1), dys + row * p.dy.stride + col, 16);
      }
    }
    tc::cp_async_commit();
  };
  // This thread's x and dy of row r of the step in `slot` (zeros outside the row or past
  // the last row).
  auto read = [&](int slot, int r, bool live, float (&x)[W], float (&dy)[W]) {
    const Packed xp = __builtin_bit_cast(Packed, vec(slot, r, 0));
    const Packed dp = __builtin_bit_cast(Packed, vec(slot, r, 1));
#pragma unroll
    for (int j = 0; j < W; ++j) {
      x[j] = live ? rudnn::cuda::pack_element(xp, j) : 0.0f;
      dy[j] = live ? rudnn::cuda::pack_element(dp, j) : 0.0f;
    }
  };

#pragma unroll
  for (int s = 0; s < S - 1; ++s) fetch(first + s * stride, s);

  // Per row of the next step, loaded a step ahead: the saved (mean, rstd), or (K, unused).
  float next_a[R], next_b[R];
  auto load_next = [&](int64_t row0) {
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const int64_t row = row0 + r;
      next_a[r] = next_b[r] = 0.0f;
      if (row >= end) continue;
      if constexpr (kSaved) {
        next_a[r] = static_cast<const float*>(p.mean)[row];
        next_b[r] = static_cast<const float*>(p.rstd)[row];
      } else {
        next_a[r] = to_float(xs[row * p.x.stride]);
      }
    }
  };
  load_next(first);

  float dgamma[W], dbeta[W];
#pragma unroll
  for (int j = 0; j < W; ++j) dgamma[j] = dbeta[j] = 0.0f;

  // The loop bound is the same for every thread of the block (BlockSums' barrier).
  int parity = 0;
  for (int64_t row0 = first, slot = 0; row0 < end;
       row0 += stride, slot = slot + 1 == S ? 0 : slot + 1, parity ^= 1) {
    // The slots this thread read in the previous step are free: the step S - 1 ahead goes
    // there, issued before the wait so that it does not queue behind it.
    fetch(row0 + (S - 1) * stride, static_cast<int>(slot == 0 ? S - 1 : slot - 1));
    tc::cp_async_wait<S - 1>();  // this step's group has landed
    float a[R], b[R];
#pragma unroll
    for (int r = 0; r < R; ++r) a[r] = next_a[r], b[r] = next_b[r];
    load_next(row0 + stride);

    float g[W];
    if (active) {
      load_param_or<T, W>(p.gamma, col, 1.0f, g);
    } else {
#pragma unroll
      for (int j = 0; j < W; ++j) g[j] = 0.0f;
    }

    float sums[N];
#pragma unroll
    for (int r = 0; r < R; ++r) {
      float x[W], dy[W];
      read(static_cast<int>(slot), r, active && row0 + r < end, x, dy);
      if constexpr (kSaved) {
        float gdy = 0.0f, gdy_xhat = 0.0f;
#pragma unroll
        for (int j = 0; j < W; ++j) {
          const float xhat = (x[j] - a[r]) * b[r];
          const float v = g[j] * dy[j];
          gdy += v;
          gdy_xhat += v * xhat;
        }
        sums[2 * r] = gdy;
        sums[2 * r + 1] = gdy_xhat;
      } else {
        float sd = 0.0f, sdd = 0.0f, gdy = 0.0f, gdy_d = 0.0f;
#pragma unroll
        for (int j = 0; j < W; ++j) {
          const float d = active ? x[j] - a[r] : 0.0f;
          const float v = g[j] * dy[j];
          sd += d;
          sdd += d * d;
          gdy += v;
          gdy_d += v * d;
        }
        sums[4 * r] = sd;
        sums[4 * r + 1] = sdd;
        sums[4 * r + 2] = gdy;
        sums[4 * r + 3] = gdy_d;
      }
    }
    Sums::run(sums, sums_scratch, parity);

#pragma unroll
    for (int r = 0; r < R; ++r) {
      const int64_t row = row0 + r;
      float mean, rstd, mean_gdy, mean_gdy_xhat;
      if constexpr (kSaved) {
        mean = a[r];
        rstd = b[r];
        mean_gdy = sums[2 * r] * inv_cols;
        mean_gdy_xhat = sums[2 * r + 1] * inv_cols;
      } else {
        const float dm = sums[4 * r] * inv_cols;
        const float var = fmaxf(sums[4 * r + 1] * inv_cols - dm * dm, 0.0f);
        rstd = rsqrtf(var + p.eps);
        mean = a[r] + dm;
        mean_gdy = sums[4 * r + 2] * inv_cols;
        mean_gdy_xhat = rstd * (sums[4 * r + 3] - dm * sums[4 * r + 2]) * inv_cols;
      }
      if (!active || row >= end) continue;
      float x[W], dy[W];
      read(static_cast<int>(slot), r, true, x, dy);
#pragma unroll
      for (int j = 0; j < W; ++j) {
        const float xhat = (x[j] - mean) * rstd;
        dgamma[j] += dy[j] * xhat;
        dbeta[j] += dy[j];
        dy[j] = rstd * (g[j] * dy[j] - mean_gdy - xhat * mean_gdy_xhat);
      }
      rudnn::cuda::store_pack<T, W>(static_cast<T*>(p.dx.data) + row * p.dx.stride + col, dy);
    }
  }
  tc::cp_async_wait<0>();  // the groups past the last step are empty

  if (!active) return;
  const int64_t part = static_cast<int64_t>(blockIdx.x) * cols + col;
  if (dgamma_part) rudnn::cuda::store_pack<float, W>(dgamma_part + part, dgamma);
  if (dbeta_part) rudnn::cuda::store_pack<float, W>(dbeta_part + part, dbeta);
}

// row_mean / row_rstd: where to record each row's statistics for the column kernel (null:
// not needed, or LayerNorm's saved statistics, which are read from p instead).
template <class T, int W, NormKind kKind>
__global__ void __launch_bounds__(kLoopThreads)
    norm_backward_loop(NormBackward p, float* __restrict__ row_mean, float* __restrict__ row_rstd) {
  __shared__ float scratch[32];
  __shared__ float2 scratch2[32];
  __shared__ rudnn::cuda::WelfordState welford_scratch[32];
  const float inv_cols = 1.0f / static_cast<float>(p.cols);

  for (int64_t row = blockIdx.x; row < p.rows; row += gridDim.x) {
    const T* x = static_cast<const T*>(p.x.data) + row * p.x.stride;
    const T* dy = static_cast<const T*>(p.dy.data) + row * p.dy.stride;

    // Pass 1: mean and rstd (LayerNorm's given ones read instead; the branch is uniform).
    float mean = 0.0f, rstd;
    if (kKind == NormKind::layer && p.mean != nullptr) {
      mean = static_cast<const float*>(p.mean)[row];
      rstd = static_cast<const float*>(p.rstd)[row];
    } else {
      WelfordState w{0.0f, 0.0f, 0.0f};
      float ss = 0.0f;
      for_each_vector<W>(x, p.cols, [&](int64_t, const float(&v)[W]) {
        if constexpr (kKind == NormKind::layer) {
          float m = 0.0f, m2 = 0.0f;
#pragma unroll
          for (int j = 0; j < W; ++j) m += v[j];
          m *= 1.0f / W;
#pragma unroll
          for (int j = 0; j < W; ++j) m2 += (v[j] - m) * (v[j] - m);
          w = rudnn::cuda::WelfordMerge{}(w, WelfordState{static_cast<float>(W), m, m2});
        } else {
#pragma unroll
          for (int j = 0; j < W; ++j) ss += v[j] * v[j];
        }
      });
      float var;
      if constexpr (kKind == NormKind::layer) {
        w = group_reduce<kLoopThreads>(w, rudnn::cuda::WelfordMerge{}, welford_scratch);
        mean = w.mean;
        var = w.m2 * inv_cols;
      } else {
        var = group_reduce<kLoopThreads>(ss, SumOp{}, scratch) * inv_cols;
      }
      rstd = rsqrtf(var + p.eps);
      if (row_mean != nullptr && threadIdx.x == 0) {
        row_mean[row] = mean;
        row_rstd[row] = rstd;
      }
    }

    // Pass 2: sum of gamma*dy and of gamma*dy*xhat.
    float2 sums = make_float2(0.0f, 0.0f);
    for_each_vector2<W>(x, dy, p.cols, [&](int64_t c, const float(&xv)[W], const float(&dyv)[W]) {
      float g[W];
      load_param_or<T, W>(p.gamma, c, 1.0f, g);
#pragma unroll
      for (int j = 0; j < W; ++j) {
        const float gdy = g[j] * dyv[j];
        sums.x += gdy;
        sums.y += gdy * (xv[j] - mean) * rstd;
      }
    });
    sums = group_reduce<kLoopThreads>(sums, rudnn::cuda::PairSumOp{}, scratch2);
    const float mean_gdy = kKind == NormKind::layer ? sums.x * inv_cols : 0.0f;
    const float mean_gdy_xhat = sums.y * inv_cols;

    // Pass 3: dx.
    T* dx = static_cast<T*>(p.dx.data) + row * p.dx.stride;
    for_each_vector2<W>(x, dy, p.cols, [&](int64_t c, const float(&xv)[W], const float(&dyv)[W]) {
      float g[W], out[W];
      load_param_or<T, W>(p.gamma, c, 1.0f, g);
#pragma unroll
      for (int j = 0; j < W; ++j) {
        const float xhat = (xv[j] - mean) * rstd;
        out[j] = rstd * (g[j] * dyv[j] - mean_gdy - xhat * mean_gdy_xhat);
      }
      rudnn::cuda::store_pack<T, W>(dx + c, out);
    });
  }
}

constexpr int kColumnThreads = 256;
constexpr int kColumnChunkRows = 64;

// Parameter-gradient partials over chunks of rows, one thread per column:
// part[chunk][c] = sum over the chunk's rows of dy * xhat (dgamma) and of dy (dbeta).
template <class T>
__global__ void __launch_bounds__(kColumnThreads)
    param_grad_columns(NormBackward p, const float* __restrict__ row_mean,
                       const float* __restrict__ row_rstd, float* __restrict__ dgamma_part,
                       float* __restrict__ dbeta_part) {
  const int64_t c = static_cast<int64_t>(blockIdx.x) * kColumnThreads + threadIdx.x;
  if (c >= p.cols) return;
  const int64_t begin = static_cast<int64_t>(blockIdx.y) * kColumnChunkRows;
  const int64_t end = begin + kColumnChunkRows < p.rows ? begin + kColumnChunkRows : p.rows;
  float dg = 0.0f, db = 0.0f;
  for (int64_t r = begin; r < end; ++r) {
    const float x = to_float(static_cast<const T*>(p.x.data)[r * p.x.stride + c]);
    const float dy = to_float(static_cast<const T*>(p.dy.data)[r * p.dy.stride + c]);
    dg += dy * (x - row_mean[r]) * row_rstd[r];
    db += dy;
  }
  if (dgamma_part) dgamma_part[static_cast<int64_t>(blockIdx.y) * p.cols + c] = dg;
  if (dbeta_part) dbeta_part[static_cast<int64_t>(blockIdx.y) * p.cols + c] = db;
}

// out[c] = sum over k < parts of part[k][c], in order of k within each of kReduceSlices
// interleaved slices, slices then added in order: a fixed order for a given `parts`. Both
// parameter gradients in one launch (blockIdx.y picks one of `count`): after the streamed
// kernel the reductions are a few percent of the op, and a second launch adds its own ramp.
// 32 slices: each thread sums parts / 32 rows (8 slices left ~17 dependent loads a thread).
constexpr int kReduceColumns = 32, kReduceSlices = 32;

struct ReduceJobs {
  const float* part[2] = {nullptr, nullptr};
  ParamOut out[2];
  int count = 0;
};

template <class T>
__global__ void __launch_bounds__(kReduceColumns* kReduceSlices)
    reduce_partials(const ReduceJobs jobs, int64_t parts, int64_t cols) {
  __shared__ float sums[kReduceSlices][kReduceColumns + 1];
  const float* __restrict__ part = jobs.part[blockIdx.y];
  const ParamOut out = jobs.out[blockIdx.y];
  const int64_t c = static_cast<int64_t>(blockIdx.x) * kReduceColumns + threadIdx.x;
  float acc = 0.0f;
  if (c < cols) {
    for (int64_t k = threadIdx.y; k < parts; k += kReduceSlices) acc += part[k * cols + c];
  }
  sums[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y != 0 || c >= cols) return;
  float total = 0.0f;
#pragma unroll
  for (int s = 0; s < kReduceSlices; ++s) total += sums[s][threadIdx.x];
  if (out.is_f32) {
    static_cast<float*>(out.data)[c] = total;
  } else {
    static_cast<T*>(out.data)[c] = from_float<T>(total);
  }
}

template <class T>
void launch_reduce(const ReduceJobs& jobs, int64_t parts, int64_t cols, cudaStream_t stream) {
  if (jobs.count == 0) return;
  const dim3 block(kReduceColumns, kReduceSlices);
  const dim3 grid(static_cast<unsigned>((cols + kReduceColumns - 1) / kReduceColumns),
                  static_cast<unsigned>(jobs.count));
  reduce_partials<T><<<grid, block, 0, stream>>>(jobs, parts, cols);
  check_launch("reduce_partials");
}

// FP32 partial sums of the parameter gradients, [2, parts, H] (dgamma's, then dbeta's; only
// the requested ones are written), and their fixed-order reduction into the outputs.
struct Partials {
  Tensor storage;
  float* dgamma = nullptr;
  float* dbeta = nullptr;
  int64_t parts = 0;

  Partials(const NormBackward& p, int64_t count, const Stream& stream) : parts(count) {
    if ((p.dgamma.data == nullptr && p.dbeta.data == nullptr) || parts == 0) return;
    storage = Tensor::empty({2, parts, p.cols}, DType::f32, stream.device(), stream);
    float* base = static_cast<float*>(storage.data());
    if (p.dgamma.data) dgamma = base;
    if (p.dbeta.data) dbeta = base + parts * p.cols;
  }

  // With no parts (no rows) this writes zeros: a sum over nothing.
  template <class T>
  void reduce(const NormBackward& p, cudaStream_t stream) const {
    ReduceJobs jobs;
    for (const auto& [part, out] : {std::pair{dgamma, p.dgamma}, std::pair{dbeta, p.dbeta}}) {
      if (out.data == nullptr) continue;
      jobs.part[jobs.count] = part;
      jobs.out[jobs.count++] = out;
    }
    launch_reduce<T>(jobs, parts, p.cols, stream);
  }
};

// The register-tile kernel on a persistent grid of resident blocks, then the reduction of
// its per-slot partials.
template <class T, class Tile, NormKind kKind, bool kSaved>
void launch_tile(const NormBackward& p, const LaunchContext& ctx) {
  auto kernel = norm_backward_tile<T, Tile, kKind, kSaved>;
  constexpr size_t shared = ColumnSums<Tile, kParamSums<kKind>>::kBytes;
  static PerDevice<int> shared_allowed, occupancy;
  if constexpr (shared > 48 * 1024) {  // above the default limit: opt in, once per device
    shared_allowed.get(ctx.device, [&] {
      detail::check_cuda(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                              static_cast<int>(shared)),
                         "cudaFuncSetAttribute");
      return 1;
    });
  }
  const int64_t row_blocks = row_grid(p.rows, Tile::kRowsPerBlock);
  int64_t blocks = resident_blocks(kernel, Tile::kBlockThreads, ctx.device, occupancy, shared);
  if (blocks > row_blocks) blocks = row_blocks;
  const Partials part(p, blocks * Tile::kRowsPerBlock, ctx.rudnn_stream);
  if (blocks > 0) {
    kernel<<<static_cast<unsigned>(blocks), Tile::kBlockThreads, shared, ctx.stream>>>(
        p, part.dgamma, part.dbeta);
    check_launch("norm_backward_tile");
  }
  part.reduce<T>(p, ctx.stream);
}

// The streamed kernel on a persistent grid of resident blocks, then the reduction of its
// per-block partials.
template <class T, int kThreads, bool kSaved>
void launch_stream(const NormBackward& p, const LaunchContext& ctx) {
  const auto kernel = layer_norm_backward_stream<T, kThreads, kSaved>;
  constexpr size_t shared = kStreamShared<kThreads>;
  static PerDevice<int> shared_allowed, occupancy;
  // Opt in whatever the size, once per device: the default limit of 48 KB counts the static
  // scratch too, so a ring of exactly 48 KB (256 threads) fails to launch without it.
  shared_allowed.get(ctx.device, [&] {
    detail::check_cuda(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                            static_cast<int>(shared)),
                       "cudaFuncSetAttribute");
    return 1;
  });
  int64_t blocks = resident_blocks(kernel, kThreads, ctx.device, occupancy, shared);
  // At most two blocks an SM (two partial rows: normalization.h's bound on the scratch); the
  // ring, not the count of resident threads, keeps the loads in flight.
  const int64_t most = 2 * static_cast<int64_t>(device_info(ctx.device).multiprocessors);
  if (blocks > most) blocks = most;
  if (blocks > p.rows) blocks = p.rows;
  const Partials part(p, blocks, ctx.rudnn_stream);
  if (blocks > 0) {
    kernel<<<static_cast<unsigned>(blocks), kThreads, shared, ctx.stream>>>(p, part.dgamma,
                                                                           part.dbeta);
    check_launch("layer_norm_backward_stream");
  }
  part.reduce<T>(p, ctx.stream);
}

// Runs the streamed LayerNorm backward when it applies (the tuning allows it; rows of 129 ..
// 1024 aligned 16-byte vectors; cp.async in the device code: sm_80 and up, checked as
// Hopper's, the only architecture built for it) and returns whether it did.
template <class T>
bool try_stream(const NormBackward& p, const Alignment& a, const LaunchContext& ctx) {
  constexpr int W = 16 / sizeof(T);
  if (!kernel_tuning().streamed_layer_norm_backward || !a.ok || p.cols % W != 0) return false;
  const int64_t vectors = p.cols / W;
  if (vectors <= 128 || vectors > 1024) return false;
  static PerDevice<signed char> hopper;
  if (!built_for_hopper(layer_norm_backward_stream<T, 1024, false>, ctx.device, hopper))
    return false;
  auto go = [&](auto threads) {
    constexpr int kThreads = decltype(threads)::value;
    if (p.mean != nullptr) {
      launch_stream<T, kThreads, true>(p, ctx);
    } else {
      launch_stream<T, kThreads, false>(p, ctx);
    }
  };
  if (vectors <= 256) {
    go(std::integral_constant<int, 256>{});
  } else if (vectors <= 512) {
    go(std::integral_constant<int, 512>{});
  } else {
    go(std::integral_constant<int, 1024>{});
  }
  return true;
}

template <class T, NormKind kKind>
void launch(const NormBackward& p, const LaunchContext& ctx) {
  const bool want_params = p.dgamma.data != nullptr || p.dbeta.data != nullptr;
  Alignment a;
  require_rows_aligned(a, p.x.data, p.x.stride, sizeof(T));
  require_rows_aligned(a, p.dy.data, p.dy.stride, sizeof(T));
  require_rows_aligned(a, p.dx.data, p.dx.stride, sizeof(T));
  a.pointer(p.gamma.data);
  if constexpr (kKind == NormKind::layer) {
    if (try_stream<T>(p, a, ctx)) return;
  }
  // Up to 512 threads: x and dy stay in registers (the sums are in shared memory), at most
  // 128 registers a thread; a 1024-thread tile would need 64, and LayerNorm's two sums
  // 256 KB of shared memory.
  with_tile<T, TileId::block512>(p.cols, a, [&](auto tile) {
    using Tile = decltype(tile);
    if constexpr (Tile::kLoop) {
      // Means and rstds per row for the column kernel: the saved ones, or recorded by the
      // row kernel into `stats` ([2, rows]).
      Tensor stats;
      float *row_mean = nullptr, *row_rstd = nullptr;
      if (want_params && p.rows > 0 && p.mean == nullptr) {
        stats = Tensor::empty({2, p.rows}, DType::f32, ctx.device, ctx.rudnn_stream);
        row_mean = static_cast<float*>(stats.data());
        row_rstd = row_mean + p.rows;
      }
      if (p.rows > 0) {
        norm_backward_loop<T, Tile::kWidth, kKind>
            <<<row_grid(p.rows, 1), kLoopThreads, 0, ctx.stream>>>(p, row_mean, row_rstd);
        check_launch("norm_backward_loop");
      }
      const float* column_mean = p.mean ? static_cast<const float*>(p.mean) : row_mean;
      const float* column_rstd = p.rstd ? static_cast<const float*>(p.rstd) : row_rstd;
      if (!want_params) return;
      const Partials part(p, (p.rows + kColumnChunkRows - 1) / kColumnChunkRows, ctx.rudnn_stream);
      if (part.parts > 0) {
        const dim3 grid(static_cast<unsigned>((p.cols + kColumnThreads - 1) / kColumnThreads),
                        static_cast<unsigned>(part.parts));
        param_grad_columns<T><<<grid, kColumnThreads, 0, ctx.stream>>>(p, column_mean, column_rstd,
                                                                       part.dgamma, part.dbeta);
        check_launch("param_grad_columns");
      }
      part.reduce<T>(p, ctx.stream);
    } else {
      if constexpr (kKind == NormKind::layer) {
        if (p.mean != nullptr) return launch_tile<T, Tile, kKind, true>(p, ctx);
      }
      launch_tile<T, Tile, kKind, false>(p, ctx);
    }
  });
}

}  // namespace

void norm_backward(const NormBackward& p, const Stream& stream) {
  const LaunchContext ctx(stream);
  with_float_type(p.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if (p.kind == NormKind::layer) {
      launch<T, NormKind::layer>(p, ctx);
    } else {
      launch<T, NormKind::rms>(p, ctx);
    }
  });
}

}  // namespace rudnn::norm::cuda
