// Softmax and log-sum-exp over the last axis, and the softmax backward pass. Register tiles
// make one read and one write; loop tiles keep an online (max, sum) per thread, merged
// across the block, then re-read the row for the output.
#include "normalization/cuda/launch.h"
#include "normalization/cuda/row_tile.cuh"
#include "normalization/cuda/tuning.h"

namespace rudnn::norm::cuda {

namespace {

using rudnn::cuda::group_reduce;
using rudnn::cuda::MaxOp;
using rudnn::cuda::SoftmaxState;
using rudnn::cuda::SumOp;

using rudnn::cuda::kNaN;

template <class T, class Tile>
__global__ void __launch_bounds__(Tile::kBlockThreads, Tile::kMinBlocksPerSm)
    softmax_tile(SoftmaxForward p) {
  constexpr int V = Tile::kVecs, W = Tile::kWidth;
  __shared__ float scratch[32];
  const RowThread<Tile> t;
  const int cols = static_cast<int>(p.cols);

  for (int64_t row = t.first_row(); row < p.rows; row += t.row_step()) {
    float v[V][W];
    load_row(t, static_cast<const T*>(p.x.data) + row * p.x.stride, cols, v,
             -__builtin_huge_valf());
    float m = MaxOp::identity();
#pragma unroll
    for (int i = 0; i < V; ++i)
#pragma unroll
      for (int j = 0; j < W; ++j) m = MaxOp{}(m, v[i][j]);
    m = group_reduce<Tile::kThreadsPerRow>(m, MaxOp{}, scratch);
    if (!isfinite(m)) {  // all -inf, or an inf or NaN: the row is undefined (uniform over the row)
#pragma unroll
      for (int i = 0; i < V; ++i)
#pragma unroll
        for (int j = 0; j < W; ++j) v[i][j] = kNaN;
      store_row(t, static_cast<T*>(p.y.data) + row * p.y.stride, cols, v);
      continue;
    }
    float s = 0.0f;
#pragma unroll
    for (int i = 0; i < V; ++i)
#pragma unroll
      for (int j = 0; j < W; ++j) {
        v[i][j] = __expf(v[i][j] - m);  // the -inf fill becomes 0
        s += v[i][j];
      }
    const float inv = 1.0f / group_reduce<Tile::kThreadsPerRow>(s, SumOp{}, scratch);
#pragma unroll
    for (int i = 0; i < V; ++i)
#pragma unroll
      for (int j = 0; j < W; ++j) v[i][j] *= inv;
    store_row(t, static_cast<T*>(p.y.data) + row * p.y.stride, cols, v);
  }
}

// Log-sum-exp on a register tile: the row stays packed in its storage type, and the register
// cap (42) leaves room for 1536 threads per SM. Rows of a whole block take the warp-row
// kernel below by default (it issues fewer instructions and needs no block barrier); this
// one serves the warp tiles. Prefetching the next row and staging rows through shared memory
// both lost (bench/RESULTS.md, tuning log).
template <class T, class Tile>
__global__ void __launch_bounds__(Tile::kBlockThreads, Tile::kMinBlocksPerSm * 3 / 2)
    logsumexp_tile(SoftmaxForward p) {
  constexpr int V = Tile::kVecs, W = Tile::kWidth;
  __shared__ float scratch[32];
  const RowThread<Tile> t;
  const int cols = static_cast<int>(p.cols);
  for (int64_t row = t.first_row(); row < p.rows; row += t.row_step()) {
    PackedRow<Tile, T> x;
    load_row_packed(t, static_cast<const T*>(p.x.data) + row * p.x.stride, cols, x,
                    -__builtin_huge_valf());
    float m = MaxOp::identity();
#pragma unroll
    for (int i = 0; i < V; ++i) m = MaxOp{}(m, rudnn::cuda::pack_max(x.pack[i]));
    m = group_reduce<Tile::kThreadsPerRow>(m, MaxOp{}, scratch);
    float s = 0.0f;
    if (isfinite(m)) {
#pragma unroll
      for (int i = 0; i < V; ++i)
#pragma unroll
        for (int j = 0; j < W; ++j) s += __expf(x(i, j) - m);  // the -inf fill adds 0
    }
    s = group_reduce<Tile::kThreadsPerRow>(s, SumOp{}, scratch);
    if (t.lane == 0) static_cast<T*>(p.lse)[row] = from_float<T>(rudnn::cuda::log_sum_exp({m, s}));
  }
}

// Log-sum-exp with one warp per row: the lanes stream the row with several vectors in flight
// and fold them into an online (max, sum); one warp reduction per row and no block barrier,
// so a warp goes on to its next row without waiting for the others.
constexpr int kWarpRowThreads = 256;

template <class T, int W>
__global__ void __launch_bounds__(kWarpRowThreads, 6) logsumexp_warp(SoftmaxForward p) {
  constexpr int kWarps = kWarpRowThreads / 32;
  const int lane = static_cast<int>(threadIdx.x) & 31;
  const int64_t step = static_cast<int64_t>(gridDim.x) * kWarps;
  for (int64_t row = static_cast<int64_t>(blockIdx.x) * kWarps + threadIdx.x / 32; row < p.rows;
       row += step) {
    const T* x = static_cast<const T*>(p.x.data) + row * p.x.stride;
    SoftmaxState state{MaxOp::identity(), 0.0f};
    for_each_pack<W, 32>(
        x, p.cols, [&](int64_t, const auto& pack) { rudnn::cuda::fold(state, pack); }, lane);
    state = rudnn::cuda::warp_reduce(state, rudnn::cuda::SoftmaxMerge{});
    if (lane == 0) static_cast<T*>(p.lse)[row] = from_float<T>(rudnn::cuda::log_sum_exp(state));
  }
}

template <class T, int W, bool kLse>
__global__ void __launch_bounds__(kLoopThreads) softmax_loop(SoftmaxForward p) {
  __shared__ SoftmaxState scratch[32];
  for (int64_t row = blockIdx.x; row < p.rows; row += gridDim.x) {
    const T* x = static_cast<const T*>(p.x.data) + row * p.x.stride;
    SoftmaxState state{MaxOp::identity(), 0.0f};
    for_each_pack<W>(x, p.cols, [&](int64_t, const auto& pack) { rudnn::cuda::fold(state, pack); });
    state = group_reduce<kLoopThreads>(state, rudnn::cuda::SoftmaxMerge{}, scratch);
    if constexpr (kLse) {
      if (threadIdx.x == 0)
        static_cast<T*>(p.lse)[row] = from_float<T>(rudnn::cuda::log_sum_exp(state));
    } else {
      T* y = static_cast<T*>(p.y.data) + row * p.y.stride;
      const bool finite = isfinite(state.max);
      const float inv = 1.0f / state.sum;
      for_each_vector<W>(x, p.cols, [&](int64_t c, const float(&v)[W]) {
        float out[W];
#pragma unroll
        for (int j = 0; j < W; ++j) out[j] = finite ? __expf(v[j] - state.max) * inv : kNaN;
        rudnn::cuda::store_pack<T, W>(y + c, out);
      });
    }
  }
}

template <class T, class Tile>
__global__ void __launch_bounds__(Tile::kBlockThreads) softmax_backward_tile(SoftmaxBackward p) {
  constexpr int V = Tile::kVecs, W = Tile::kWidth;
  __shared__ float scratch[32];
  const RowThread<Tile> t;
  const int cols = static_cast<int>(p.cols);
  for (int64_t row = t.first_row(); row < p.rows; row += t.row_step()) {
    float dy[V][W], y[V][W];
    load_row(t, static_cast<const T*>(p.dy.data) + row * p.dy.stride, cols, dy);
    load_row(t, static_cast<const T*>(p.y.data) + row * p.y.stride, cols, y);
    float dot = 0.0f;
#pragma unroll
    for (int i = 0; i < V; ++i)
#pragma unroll
      for (int j = 0; j < W; ++j) dot += dy[i][j] * y[i][j];
    dot = group_reduce<Tile::kThreadsPerRow>(dot, SumOp{}, scratch);
#pragma unroll
    for (int i = 0; i < V; ++i)
#pragma unroll
      for (int j = 0; j < W; ++j) dy[i][j] = y[i][j] * (dy[i][j] - dot);
    store_row(t, static_cast<T*>(p.dx.data) + row * p.dx.stride, cols, dy);
  }
}

template <class T, int W>
__global__ void __launch_bounds__(kLoopThreads) softmax_backward_loop(SoftmaxBackward p) {
  __shared__ float scratch[32];
  for (int64_t row = blockIdx.x; row < p.rows; row += gridDim.x) {
    const T* dy = static_cast<const T*>(p.dy.data) + row * p.dy.stride;
    const T* y = static_cast<const T*>(p.y.data) + row * p.y.stride;
    float dot = 0.0f;
    for_each_vector2<W>(dy, y, p.cols, [&](int64_t, const float(&a)[W], const float(&b)[W]) {
#pragma unroll
      for (int j = 0; j < W; ++j) dot += a[j] * b[j];
    });
    dot = group_reduce<kLoopThreads>(dot, SumOp{}, scratch);
    T* dx = static_cast<T*>(p.dx.data) + row * p.dx.stride;
    for_each_vector2<W>(dy, y, p.cols, [&](int64_t c, const float(&a)[W], const float(&b)[W]) {
      float out[W];
#pragma unroll
      for (int j = 0; j < W; ++j) out[j] = b[j] * (a[j] - dot);
      rudnn::cuda::store_pack<T, W>(dx + c, out);
    });
  }
}

template <class T, bool kLse>
void launch_forward(const SoftmaxForward& p, cudaStream_t stream) {
  Alignment a;
  require_rows_aligned(a, p.x.data, p.x.stride, sizeof(T));
  if (!kLse) require_rows_aligned(a, p.y.data, p.y.stride, sizeof(T));
  const KernelTuning& tuning = kernel_tuning();
  with_tile<T>(p.cols, a, [&](auto tile) {
    using Tile = decltype(tile);
    if constexpr (Tile::kLoop) {
      softmax_loop<T, Tile::kWidth, kLse><<<row_grid(p.rows, 1), kLoopThreads, 0, stream>>>(p);
    } else if constexpr (kLse) {
      if constexpr (Tile::kRowsPerBlock == 1) {
        if (tuning.logsumexp_warp_rows) {
          const unsigned grid = row_grid(p.rows, kWarpRowThreads / 32);
          trace_launch("logsumexp_warp", grid, kWarpRowThreads, 0, 0);
          logsumexp_warp<T, Tile::kWidth><<<grid, kWarpRowThreads, 0, stream>>>(p);
          return;
        }
      }
      logsumexp_tile<T, Tile>
          <<<row_grid(p.rows, Tile::kRowsPerBlock), Tile::kBlockThreads, 0, stream>>>(p);
    } else {
      softmax_tile<T, Tile>
          <<<row_grid(p.rows, Tile::kRowsPerBlock), Tile::kBlockThreads, 0, stream>>>(p);
    }
  });
  check_launch(kLse ? "logsumexp" : "softmax");
}

}  // namespace

void softmax_forward(const SoftmaxForward& p, const Stream& stream) {
  const LaunchContext ctx(stream);
  with_float_type(p.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if (p.lse != nullptr) {
      launch_forward<T, true>(p, ctx.stream);
    } else {
      launch_forward<T, false>(p, ctx.stream);
    }
  });
}

void softmax_backward(const SoftmaxBackward& p, const Stream& stream) {
  const LaunchContext ctx(stream);
  with_float_type(p.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    Alignment a;
    require_rows_aligned(a, p.dy.data, p.dy.stride, sizeof(T));
    require_rows_aligned(a, p.y.data, p.y.stride, sizeof(T));
    require_rows_aligned(a, p.dx.data, p.dx.stride, sizeof(T));
    // dy and y both live in registers: the 1024-thread tile would spill.
    with_tile<T, TileId::block512>(p.cols, a, [&](auto tile) {
      using Tile = decltype(tile);
      if constexpr (Tile::kLoop) {
        softmax_backward_loop<T, Tile::kWidth>
            <<<row_grid(p.rows, 1), kLoopThreads, 0, ctx.stream>>>(p);
      } else {
        softmax_backward_tile<T, Tile>
            <<<row_grid(p.rows, Tile::kRowsPerBlock), Tile::kBlockThreads, 0, ctx.stream>>>(p);
      }
    });
    check_launch("softmax_backward");
  });
}

}  // namespace rudnn::norm::cuda
