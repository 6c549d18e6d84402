// The two products of a decode kernel's key tile on tensor cores (mma.sync m16n8k16) and the
// online softmax step between them, shared
// by SplitKv's tensor-core kernel (split_kv_tc.cuh) and the paged one (paged_attention/cuda/
// decode_tc.cuh): a warp holds up to 16 query rows as A fragments and a tile of 16 keys of
// K and V staged in shared memory, rows `ld` elements apart (ld = D + 8, so that the eight
// rows an ldmatrix reads fall in distinct bank groups).
#pragma once

#include <cstdint>

#include "attention/cuda/common.cuh"
#include "cuda/reduce.cuh"
#include "cuda/tensor_core/mma_sync.cuh"

namespace rudnn::attn::cuda {

// S = Q · K^T for the tile: s[0] holds keys 0-7, s[1] keys 8-15, in the accumulator layout
// (this lane: rows lane / 4 and lane / 4 + 8, keys 2 · (lane % 4) and the next). qa: the
// rows' A fragments per k-step of 16 features. ldmatrix .x4: matrix lane / 8 is keys
// (lane / 16) · 8 .. + 7 by features (lane / 8 % 2) · 8 .. + 7 of the k-step.
template <class T, int kSteps>
__device__ __forceinline__ void tile_scores(const uint32_t (&qa)[kSteps][4], const T* k_tile,
                                            int ld, int lane, float (&s)[2][4]) {
  namespace tc = rudnn::cuda::tc;
#pragma unroll
  for (int n = 0; n < 2; ++n)
#pragma unroll
    for (int e = 0; e < 4; ++e) s[n][e] = 0.0f;
  const T* const k_lane = k_tile + ((lane / 16) * 8 + lane % 8) * ld + (lane / 8 % 2) * 8;
#pragma unroll
  for (int kk = 0; kk < kSteps; ++kk) {
    uint32_t b[4];
    tc::ldmatrix<4, false>(b, k_lane + 16 * kk);
    const uint32_t b0[2] = {b[0], b[1]}, b1[2] = {b[2], b[3]};
    tc::mma_16816<T>(s[0], qa[kk], b0);
    tc::mma_16816<T>(s[1], qa[kk], b1);
  }
}

// One tile's step of a row's online softmax on the four lanes of its quad, each holding four
// of the row's 16 logits x (−inf where masked): the row's running max m and this lane's share
// of its sum l advance, p gets this lane's probabilities, and the factor the row's
// accumulators are to be scaled by is returned. A tile with no key in the row's range leaves
// m and l as they were (factor 1, p = 0), which is what keeps the serial rule.
__device__ __forceinline__ float quad_softmax_step(const float (&x)[4], float& m, float& l,
                                                   float (&p)[4]) {
  using rudnn::cuda::MaxOp;
  float top = MaxOp{}(MaxOp{}(x[0], x[1]), MaxOp{}(x[2], x[3]));
  top = MaxOp{}(top, __shfl_xor_sync(rudnn::cuda::kFullMask, top, 1));
  top = MaxOp{}(top, __shfl_xor_sync(rudnn::cuda::kFullMask, top, 2));
  const float m_new = MaxOp{}(m, top);
  const float alpha = m == m_new ? 1.0f : __expf(m - m_new);
#pragma unroll
  for (int e = 0; e < 4; ++e) p[e] = x[e] == kNegInf ? 0.0f : __expf(x[e] - m_new);
  l = l * alpha + ((p[0] + p[1]) + (p[2] + p[3]));
  m = m_new;
  return alpha;
}

// O += P · V for the tile: pa is P's A fragment (the tile's 16 keys, rounded to T), o[n] the
// accumulators of features 8n .. 8n + 7. ldmatrix .x4.trans: matrix lane / 8 is keys
// (lane / 8 % 2) · 8 .. + 7 by features (lane / 16) · 8 .. + 7 of the n-tile pair.
template <class T, int kSteps>
__device__ __forceinline__ void tile_values(const uint32_t (&pa)[4], const T* v_tile, int ld,
                                            int lane, float (&o)[2 * kSteps][4]) {
  namespace tc = rudnn::cuda::tc;
  const T* const v_lane = v_tile + ((lane / 8 % 2) * 8 + lane % 8) * ld + (lane / 16) * 8;
#pragma unroll
  for (int c = 0; c < kSteps; ++c) {
    uint32_t b[4];
    tc::ldmatrix<4, true>(b, v_lane + 16 * c);
    const uint32_t b0[2] = {b[0], b[1]}, b1[2] = {b[2], b[3]};
    tc::mma_16816<T>(o[2 * c], pa, b0);
    tc::mma_16816<T>(o[2 * c + 1], pa, b1);
  }
}

}  // namespace rudnn::attn::cuda
