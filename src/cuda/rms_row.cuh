// RMSNorm's per-row arithmetic, shared by every kernel that must produce rms_norm's bits:
// the normalization family's row tiles (rms_norm, add_rms_norm) and the transformer
// family's fused norm_rope, which is documented bit-equal to rms_norm -> rope composed.
// Bit equality needs the same values summed in the same order and the same roundings; one
// function used by both is how that stays true when either kernel changes.
#pragma once

#include "cuda/reduce.cuh"

namespace rudnn::cuda {

// 1 / sqrt(mean(x^2) + eps) of a row shared by kThreadsPerRow threads (a warp, or a block of
// them), each holding V vectors of W values: v(i, j) is element j of this thread's vector i,
// valid(i) whether vector i lies in the row. Each thread sums its squares in (i, j) order;
// group_reduce then folds the threads in its fixed tree. `scratch`: group_reduce's (unused
// for a warp). inv_cols = 1.0f / cols, as the caller forms it.
template <int kThreadsPerRow, int V, int W, class Value, class Valid>
__device__ __forceinline__ float rms_row_rstd(const Value& v, const Valid& valid, float inv_cols,
                                              float eps, float* scratch) {
  float ss = 0.0f;
#pragma unroll
  for (int i = 0; i < V; ++i) {
    if (!valid(i)) continue;
#pragma unroll
    for (int j = 0; j < W; ++j) ss += v(i, j) * v(i, j);
  }
  return rsqrtf(group_reduce<kThreadsPerRow>(ss, SumOp{}, scratch) * inv_cols + eps);
}

// One normalised value before its rounding to the output dtype: x * rstd, then * gamma.
__device__ __forceinline__ float rms_scaled(float x, float rstd, float gamma) {
  return x * rstd * gamma;
}

}  // namespace rudnn::cuda
