// The online-softmax step and the merges of partial softmax states, shared by the CUDA-core
// kernels of attention (FlashScalar / SplitKv) and paged attention: a key tile's step, the
// states of the warps that took turns over one row's key
// tiles (through shared memory, in warp order), and the FP32 partial records of a split
// history (in partition order). One implementation, so that the families round alike.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "attention/cuda/common.cuh"
#include "cuda/reduce.cuh"

namespace rudnn::attn::cuda {

// One key tile's step of a row's online softmax, on a warp whose lanes each hold the logit s
// of one key (−inf where masked): the tile's max over the warp, the new running max m and
// sum l (l this lane's share, rescaled, plus its probability), the rescale factor alpha of
// the accumulators (the caller multiplies them), and this lane's probability p. A tile with
// no key in range changes nothing (any = false, p = 0). Every CUDA-core kernel (FlashScalar,
// SplitKv, the paged kernels) takes this one step, so that they round alike.
struct SoftmaxStep {
  float alpha, p;
  bool any;
};
__device__ __forceinline__ SoftmaxStep online_softmax_step(float s, float& m, float& l) {
  const float tile_max = rudnn::cuda::warp_reduce(s, rudnn::cuda::MaxOp{});
  if (tile_max == kNegInf) return {1.0f, 0.0f, false};
  const float m_new = rudnn::cuda::MaxOp{}(m, tile_max);
  const float alpha = m == m_new ? 1.0f : __expf(m - m_new);
  const float p = s == kNegInf ? 0.0f : __expf(s - m_new);
  l = l * alpha + p;
  m = m_new;
  return {alpha, p, true};
}

// The step above for the kRows rows of a CUDA-core tile loop (FlashScalar / SplitKv and the
// paged general kernel): s[r] is row r's logit of this lane's key (−inf where masked); each
// row's running max m and sum l advance, its accumulators o (kChunks · 4 features a lane) are
// rescaled, and p[r] gets this lane's probability. Returns whether any row had a key in range
// (if none, the tile's p·v can be skipped).
template <int kRows, int kChunks>
__device__ __forceinline__ bool online_softmax_rows(const float (&s)[kRows], float (&m)[kRows],
                                                   float (&l)[kRows],
                                                   float (&o)[kRows][kChunks][4],
                                                   float (&p)[kRows]) {
  bool any = false;
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    const SoftmaxStep step = online_softmax_step(s[r], m[r], l[r]);
    p[r] = step.p;
    if (!step.any) continue;
    any = true;
#pragma unroll
    for (int c = 0; c < kChunks; ++c)
#pragma unroll
      for (int e = 0; e < 4; ++e) o[r][c][e] *= step.alpha;
  }
  return any;
}

// Writes a warp's state of one row at `state` (kChunks · 128 + 4 floats): this lane's four
// features of each 128-feature chunk, and (lane 0) the running max m and sum l.
template <int kChunks>
__device__ __forceinline__ void store_warp_state(float* state, const float (&o)[kChunks][4],
                                                 float m, float l, int lane) {
#pragma unroll
  for (int c = 0; c < kChunks; ++c)
    *reinterpret_cast<float4*>(state + c * 128 + lane * 4) =
        make_float4(o[c][0], o[c][1], o[c][2], o[c][3]);
  if (lane == 0) {
    state[kChunks * 128] = m;
    state[kChunks * 128 + 1] = l;
  }
}

// The states of one row that `warps` warps wrote at row_state + w · warp_stride, merged in
// warp order: the max, the sum, and this lane's features.
template <int kChunks>
__device__ __forceinline__ void merge_warp_states(const float* row_state, int warp_stride,
                                                  int warps, int lane, float& top, float& sum,
                                                  float (&acc)[kChunks][4]) {
  top = kNegInf;
  for (int w = 0; w < warps; ++w)
    top = rudnn::cuda::MaxOp{}(top, row_state[w * warp_stride + kChunks * 128]);
  sum = 0.0f;
#pragma unroll
  for (int c = 0; c < kChunks; ++c)
#pragma unroll
    for (int e = 0; e < 4; ++e) acc[c][e] = 0.0f;
  for (int w = 0; w < warps; ++w) {
    const float* st = row_state + w * warp_stride;
    const float mw = st[kChunks * 128];
    const float f = mw == top ? 1.0f : (mw == kNegInf ? 0.0f : __expf(mw - top));
    sum = fmaf(f, st[kChunks * 128 + 1], sum);
#pragma unroll
    for (int c = 0; c < kChunks; ++c) {
      const float4 ov = *reinterpret_cast<const float4*>(st + c * 128 + lane * 4);
      acc[c][0] = fmaf(f, ov.x, acc[c][0]);
      acc[c][1] = fmaf(f, ov.y, acc[c][1]);
      acc[c][2] = fmaf(f, ov.z, acc[c][2]);
      acc[c][3] = fmaf(f, ov.w, acc[c][3]);
    }
  }
}

// Writes one row's FP32 partial record at `rec` (what RecordMerge reads): this lane's
// unnormalised features o (c · 128 + 4 · lane + e, those below dim_v), then (lane 0) the max
// m and the sum l.
template <int kChunks>
__device__ __forceinline__ void store_partial_record(float* rec, const float (&o)[kChunks][4],
                                                     float m, float l, int dim_v, int lane) {
#pragma unroll
  for (int c = 0; c < kChunks; ++c) {
    const int d = c * 128 + lane * 4;
#pragma unroll
    for (int e = 0; e < 4; ++e)
      if (d + e < dim_v) rec[d + e] = o[c][e];
  }
  if (lane == 0) {
    rec[dim_v] = m;
    rec[dim_v + 1] = l;
  }
}

// Partial records of one row (each `record` floats: Dv unnormalised features, the max, the
// sum) of partitions first .. last, merged in partition order.
struct RecordMerge {
  const float* recs;
  int64_t record;
  int dim_v;
  int64_t first, last;

  __device__ __forceinline__ float weight(int64_t s, float top) const {
    const float ms = recs[s * record + dim_v];
    return ms == top ? 1.0f : (ms == kNegInf ? 0.0f : __expf(ms - top));
  }
  // The merged max and sum.
  __device__ __forceinline__ void stats(float& top, float& sum) const {
    top = kNegInf;
    for (int64_t s = first; s <= last; ++s)
      top = rudnn::cuda::MaxOp{}(top, recs[s * record + dim_v]);
    sum = 0.0f;
    for (int64_t s = first; s <= last; ++s) sum = fmaf(weight(s, top), recs[s * record + dim_v + 1], sum);
  }
  // Features d .. d + 3 (those below dim_v) of the merged output, unnormalised.
  __device__ __forceinline__ void features(int d, float top, float (&acc)[4]) const {
#pragma unroll
    for (int e = 0; e < 4; ++e) acc[e] = 0.0f;
    for (int64_t s = first; s <= last; ++s) {
      const float* rec = recs + s * record;
      const float f = weight(s, top);
#pragma unroll
      for (int e = 0; e < 4; ++e)
        if (d + e < dim_v) acc[e] = fmaf(f, rec[d + e], acc[e]);
    }
  }
};

}  // namespace rudnn::attn::cuda
