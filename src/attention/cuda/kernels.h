// The attention family's kernel launchers, called by the entry points (attention.cu) for the
// kernel family the plan names. Each takes a validated problem and the stream, and runs
// exactly what problem.plan describes (scratch included).
#pragma once

#include "attention/problem.h"
#include "rudnn/stream.h"

namespace rudnn::attn::cuda {

// FlashScalar and SplitKv (both passes), instantiated per dtype in scalar_forward_*.cu.
template <class T>
void scalar_forward(const AttentionForward& p, const Stream& stream);

// Flash, the tensor-core forward, for one (D, Dv) pair of attn::flash_takes_heads, both
// 16-bit dtypes instantiated in flash_forward_d<D>[_<Dv>].cu.
template <class T, int D, int DV>
void flash_forward(const AttentionForward& p, const Stream& stream);

// Flash on sm_90a (the plan's flash_wgmma): the wgmma + TMA forward for D = Dv in {64, 128,
// 256} with plain options (scale, causal), padded batches; both 16-bit dtypes instantiated
// in flash_hopper_d<D>.cu.
template <class T, int D>
void flash_hopper_forward(const AttentionForward& p, const Stream& stream);

// Flash's backward for D = Dv in {64, 96, 128, 192, 256} and (D, Dv) = (192, 128)
// (attn::flash_backward_takes_heads), both 16-bit dtypes instantiated in
// flash_backward_d<D>.cu (the pair in flash_backward_d192.cu).
template <class T, int D, int DV>
void flash_backward(const AttentionBackward& p, const Stream& stream);

// Flash's backward on sm_90a (the backward plan's flash_wgmma): the wgmma + TMA kernel for
// D = Dv = 128 (attn::flash_hopper_backward_takes_heads) with plain options, padded batches;
// called by flash_backward after the row kernel wrote D_i (row_dot); both 16-bit dtypes
// instantiated in flash_hopper_backward_d<D>.cu.
template <class T, int D>
void flash_hopper_backward(const AttentionBackward& p, const float* row_dot,
                           const Stream& stream);

// Composed (composed.cu).
void composed_forward(const AttentionForward& p, const Stream& stream);

// The FlashScalar backward, instantiated per dtype in scalar_backward_*.cu.
template <class T>
void scalar_backward(const AttentionBackward& p, const Stream& stream);

}  // namespace rudnn::attn::cuda
