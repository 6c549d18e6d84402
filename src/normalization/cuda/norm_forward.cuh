// LayerNorm, RMSNorm and residual-add + RMSNorm forward: one read of each input, one write
// of each output, statistics in FP32. The kernels are instantiated once per dtype, each in
// its own file (norm_forward_<dtype>.cu), so that the three compile in parallel; the entry
// point that picks the dtype is in norm_forward.cu.
#pragma once

#include "cuda/rms_row.cuh"
#include "normalization/cuda/launch.h"
#include "normalization/cuda/row_tile.cuh"

namespace rudnn::norm::cuda {

namespace {

using rudnn::cuda::group_reduce;
using rudnn::cuda::round_to;
using rudnn::cuda::SumOp;
using rudnn::cuda::WelfordState;

// kForm: how gamma and beta are read (ParamForm).
template <class T, class Tile, NormKind kKind, ParamForm kForm>
__global__ void __launch_bounds__(Tile::kBlockThreads, Tile::kMinBlocksPerSm)
    norm_forward_tile(NormForward p) {
  constexpr int V = Tile::kVecs, W = Tile::kWidth;
  __shared__ float scratch[32];
  const RowThread<Tile> t;
  const int cols = static_cast<int>(p.cols);
  const float inv_cols = 1.0f / static_cast<float>(cols);

  for (int64_t row = t.first_row(); row < p.rows; row += t.row_step()) {
    PackedRow<Tile, T> packed;  // the row (or, for add_rms, the stored sum) in its storage type
    load_row_packed(t, static_cast<const T*>(p.x.data) + row * p.x.stride, cols, packed);
    // LayerNorm reads each value three times (mean, variance, output): it converts the row
    // to FP32 registers once: the kernel is bound by instruction issue, and three conversions
    // of each value cost more than the registers.
    // The RMS kernels read it twice and keep it packed, in half the registers.
    float converted[V][W];
    if constexpr (kKind == NormKind::layer) {
#pragma unroll
      for (int i = 0; i < V; ++i)
#pragma unroll
        for (int j = 0; j < W; ++j) converted[i][j] = packed(i, j);
    }
    auto v = [&](int i, int j) -> float {
      if constexpr (kKind == NormKind::layer) {
        return converted[i][j];
      } else {
        return packed(i, j);
      }
    };
    if constexpr (kKind == NormKind::add_rms) {
      PackedRow<Tile, T> r;
      load_row_packed(t, static_cast<const T*>(p.residual.data) + row * p.residual.stride, cols, r);
#pragma unroll
      for (int i = 0; i < V; ++i)
#pragma unroll
        for (int j = 0; j < W; ++j)
          packed.pack[i].v[j] = from_float<T>(v(i, j) + r(i, j));  // FP32 sum, stored as T
      store_row_packed(t, static_cast<T*>(p.sum.data) + row * p.sum.stride, cols, packed);
    }

    float mean = 0.0f;
    if constexpr (kKind == NormKind::layer) {
      // The mean as K + mean(x - K), K the row's first element: exact for a constant row
      // (whose variance is then exactly 0 and its output exactly beta), and as accurate as
      // mean(x) elsewhere.
      const float k = to_float(static_cast<const T*>(p.x.data)[row * p.x.stride]);
      float s = 0.0f;
#pragma unroll
      for (int i = 0; i < V; ++i) {
        if (t.column(i) >= cols) continue;
#pragma unroll
        for (int j = 0; j < W; ++j) s += v(i, j) - k;
      }
      mean = k + group_reduce<Tile::kThreadsPerRow>(s, SumOp{}, scratch) / static_cast<float>(cols);
    }
    float rstd;
    if constexpr (kKind == NormKind::layer) {
      // Second pass over the registers: sum of squared deviations, no cancellation.
      float ss = 0.0f;
#pragma unroll
      for (int i = 0; i < V; ++i) {
        if (t.column(i) >= cols) continue;
#pragma unroll
        for (int j = 0; j < W; ++j) ss += (v(i, j) - mean) * (v(i, j) - mean);
      }
      rstd = rsqrtf(group_reduce<Tile::kThreadsPerRow>(ss, SumOp{}, scratch) * inv_cols + p.eps);
    } else {
      // The shared row code (cuda/rms_row.cuh): norm_rope's fused kernel makes these bits too.
      rstd = rudnn::cuda::rms_row_rstd<Tile::kThreadsPerRow, V, W>(
          v, [&](int i) { return t.column(i) < cols; }, inv_cols, p.eps, scratch);
    }
    if constexpr (kKind == NormKind::layer) {
      if (p.mean != nullptr && t.lane == 0) {
        static_cast<float*>(p.mean)[row] = mean;
        static_cast<float*>(p.rstd)[row] = rstd;
      }
    }

    T* y = static_cast<T*>(p.y.data) + row * p.y.stride;
#pragma unroll
    for (int i = 0; i < V; ++i) {
      const int c = t.column(i);
      if (c >= cols) continue;
      float g[W], b[W], out[W];
      load_param_as<kForm, T, W>(p.gamma, c, 1.0f, g);
      if constexpr (kKind == NormKind::layer) load_param_as<kForm, T, W>(p.beta, c, 0.0f, b);
#pragma unroll
      for (int j = 0; j < W; ++j) {
        if constexpr (kKind == NormKind::layer) {
          out[j] = fmaf((v(i, j) - mean) * rstd, g[j], b[j]);
        } else {
          out[j] = rudnn::cuda::rms_scaled(v(i, j), rstd, g[j]);
        }
      }
      rudnn::cuda::store_pack<T, W>(y + c, out);
    }
  }
}

template <class T, int W, NormKind kKind>
__global__ void __launch_bounds__(kLoopThreads) norm_forward_loop(NormForward p) {
  __shared__ float scratch[32];
  __shared__ rudnn::cuda::WelfordState welford_scratch[32];
  const float inv_cols = 1.0f / static_cast<float>(p.cols);

  for (int64_t row = blockIdx.x; row < p.rows; row += gridDim.x) {
    const T* x = static_cast<const T*>(p.x.data) + row * p.x.stride;
    T* sum_row =
        kKind == NormKind::add_rms ? static_cast<T*>(p.sum.data) + row * p.sum.stride : nullptr;

    // Pass 1: statistics (and, for add_rms, the stored sum). LayerNorm's are of x - K, K the
    // row's first element, as in the tile kernel: exact for constant rows.
    WelfordState w{0.0f, 0.0f, 0.0f};
    float ss = 0.0f;
    const float k = kKind == NormKind::layer ? to_float(x[0]) : 0.0f;
    auto accumulate = [&](const float(&v)[W]) {
      if constexpr (kKind == NormKind::layer) {
        float d[W], m = 0.0f, m2 = 0.0f;
#pragma unroll
        for (int j = 0; j < W; ++j) {
          d[j] = v[j] - k;
          m += d[j];
        }
        m *= 1.0f / W;
#pragma unroll
        for (int j = 0; j < W; ++j) m2 += (d[j] - m) * (d[j] - m);
        w = rudnn::cuda::WelfordMerge{}(w, WelfordState{static_cast<float>(W), m, m2});
      } else {
#pragma unroll
        for (int j = 0; j < W; ++j) ss += v[j] * v[j];
      }
    };
    if constexpr (kKind == NormKind::add_rms) {
      const T* res = static_cast<const T*>(p.residual.data) + row * p.residual.stride;
      for_each_vector2<W>(x, res, p.cols, [&](int64_t c, float(&a)[W], const float(&b)[W]) {
#pragma unroll
        for (int j = 0; j < W; ++j) a[j] = round_to<T>(a[j] + b[j]);
        rudnn::cuda::store_pack<T, W>(sum_row + c, a);
        accumulate(a);
      });
    } else {
      for_each_vector<W>(x, p.cols, [&](int64_t, const float(&v)[W]) { accumulate(v); });
    }
    float mean = 0.0f, var;
    if constexpr (kKind == NormKind::layer) {
      w = group_reduce<kLoopThreads>(w, rudnn::cuda::WelfordMerge{}, welford_scratch);
      mean = k + w.mean;
      var = w.m2 * inv_cols;
    } else {
      var = group_reduce<kLoopThreads>(ss, SumOp{}, scratch) * inv_cols;
    }
    const float rstd = rsqrtf(var + p.eps);
    if (kKind == NormKind::layer && p.mean != nullptr && threadIdx.x == 0) {
      static_cast<float*>(p.mean)[row] = mean;
      static_cast<float*>(p.rstd)[row] = rstd;
    }

    // Pass 2: normalise. add_rms re-reads the sum this same thread stored.
    T* y = static_cast<T*>(p.y.data) + row * p.y.stride;
    const T* source = kKind == NormKind::add_rms ? sum_row : x;
    for_each_vector<W>(source, p.cols, [&](int64_t c, const float(&v)[W]) {
      float g[W], b[W], out[W];
      load_param_or<T, W>(p.gamma, c, 1.0f, g);
      if constexpr (kKind == NormKind::layer) load_param_or<T, W>(p.beta, c, 0.0f, b);
#pragma unroll
      for (int j = 0; j < W; ++j) {
        out[j] = (v[j] - mean) * rstd * g[j];
        if constexpr (kKind == NormKind::layer) out[j] += b[j];
      }
      rudnn::cuda::store_pack<T, W>(y + c, out);
    });
  }
}

template <class T, NormKind kKind>
void launch(const NormForward& p, cudaStream_t stream) {
  Alignment a;
  require_rows_aligned(a, p.x.data, p.x.stride, sizeof(T));
  require_rows_aligned(a, p.y.data, p.y.stride, sizeof(T));
  if (kKind == NormKind::add_rms) {
    require_rows_aligned(a, p.residual.data, p.residual.stride, sizeof(T));
    require_rows_aligned(a, p.sum.data, p.sum.stride, sizeof(T));
  }
  a.pointer(p.gamma.data);
  a.pointer(p.beta.data);
  const ParamForm form =
      kKind == NormKind::layer ? param_form<T>({p.gamma, p.beta}) : param_form<T>({p.gamma});
  with_tile<T>(p.cols, a, [&](auto tile) {
    using Tile = decltype(tile);
    if constexpr (Tile::kLoop) {
      norm_forward_loop<T, Tile::kWidth, kKind>
          <<<row_grid(p.rows, 1), kLoopThreads, 0, stream>>>(p);
    } else {
      const unsigned grid = row_grid(p.rows, Tile::kRowsPerBlock);
      switch (form) {
        case ParamForm::storage:
          norm_forward_tile<T, Tile, kKind, ParamForm::storage>
              <<<grid, Tile::kBlockThreads, 0, stream>>>(p);
          break;
        case ParamForm::f32:
          if constexpr (sizeof(T) == 2) {  // FP32 parameters of FP32 rows are the storage form
            norm_forward_tile<T, Tile, kKind, ParamForm::f32>
                <<<grid, Tile::kBlockThreads, 0, stream>>>(p);
            break;
          }
          [[fallthrough]];
        case ParamForm::any:
          norm_forward_tile<T, Tile, kKind, ParamForm::any>
              <<<grid, Tile::kBlockThreads, 0, stream>>>(p);
          break;
      }
    }
  });
  check_launch("norm_forward");
}

}  // namespace

// The forward norms of rows of T (float, __half, __nv_bfloat16), on `stream`.
template <class T>
void norm_forward_typed(const NormForward& p, cudaStream_t stream) {
  switch (p.kind) {
    case NormKind::layer:
      return launch<T, NormKind::layer>(p, stream);
    case NormKind::rms:
      return launch<T, NormKind::rms>(p, stream);
    case NormKind::add_rms:
      return launch<T, NormKind::add_rms>(p, stream);
  }
}

}  // namespace rudnn::norm::cuda
