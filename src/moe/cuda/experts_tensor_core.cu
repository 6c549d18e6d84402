// The TensorCore expert strategy: three grouped GEMMs of the library's tensor-core GEMM
// (gemm/gemm.h) over the device offsets, no host synchronisation:
//   gate_pre = round(X . gate_e^T), up_pre = round(X . up_e^T)   (two grouped GEMMs)
//   act      = native_swiglu(gate_pre, up_pre)                  (a small elementwise kernel)
//   Y        = act . down_e^T
// Fusing gate and up into one GEMM with the SwiGLU in its epilogue needs the two weights
// interleaved in one [E, 2I, H] tensor (a copy of the weights) or a two-B epilogue, which
// the GEMM does not have yet; the separate kernel costs one pass over 3 [T*k, I] arrays.
#include <algorithm>
#include <cstdint>

#include "core/cuda_check.h"
#include "cuda/launch.cuh"
#include "cuda/vec.cuh"
#include "gemm/gemm.h"
#include "moe/cuda/launch.h"

namespace rudnn::moe::cuda {

void experts_tensor_core(const ExpertsForward& p, void* gate_pre, void* up_pre, void* act,
                         const Stream& stream) {
  gemm::GroupedGemmParams g;
  g.dtype = p.dtype;
  g.grouped = gemm::GroupedDim::M;
  g.groups = p.experts;
  g.offsets = p.offsets;
  g.m = p.rows;
  g.n = p.inter;
  g.k = p.hidden;
  g.a = {p.x, gemm::Layout::RowMajor, p.hidden};
  g.b = {p.gate, gemm::Layout::ColMajor, p.hidden};
  g.b_group_stride = p.inter * p.hidden;
  g.ldd = p.inter;
  // The projections as stored (training keeps them; inference passes scratch), then native
  // SwiGLU of the stored values: the activation training differentiates, in either mode.
  g.d = gate_pre;
  gemm::grouped_gemm(g, stream);
  g.b.data = p.up;
  g.d = up_pre;
  gemm::grouped_gemm(g, stream);
  NativeSwiGlu q;
  q.count = p.rows * p.inter;
  q.dtype = p.dtype;
  q.gate = gate_pre;
  q.up = up_pre;
  q.out = act;
  native_swiglu(q, stream);

  gemm::GroupedGemmParams d;
  d.dtype = p.dtype;
  d.grouped = gemm::GroupedDim::M;
  d.groups = p.experts;
  d.offsets = p.offsets;
  d.m = p.rows;
  d.n = p.hidden;
  d.k = p.inter;
  d.a = {act, gemm::Layout::RowMajor, p.inter};
  d.b = {p.down, gemm::Layout::ColMajor, p.inter};
  d.b_group_stride = p.hidden * p.inter;
  d.d = p.y;
  d.ldd = p.hidden;
  gemm::grouped_gemm(d, stream);
}

// The backward as grouped GEMMs: grouped M for dact and dx, grouped K for the weights.
void experts_tensor_core_backward(const ExpertsBackward& p, const BackwardScratch& s,
                                  const Stream& stream) {
  const auto grouped_k = [&](const void* a, int64_t m, const void* b, int64_t n, float* d) {
    gemm::GroupedGemmParams g;  // D_e [m, n] = A_e^T . B_e over expert e's rows
    g.dtype = p.dtype;
    g.grouped = gemm::GroupedDim::K;
    g.groups = p.experts;
    g.offsets = p.offsets;
    g.m = m;
    g.n = n;
    g.k = p.rows;
    g.a = {a, gemm::Layout::ColMajor, m};
    g.b = {b, gemm::Layout::RowMajor, n};
    g.d = d;
    g.ldd = n;
    g.d_group_stride = m * n;
    g.epilogue.out_dtype = DType::f32;
    gemm::grouped_gemm(g, stream);
  };
  if (p.ddown) grouped_k(p.dy, p.hidden, p.act, p.inter, p.ddown);
  if (!(p.dx || p.dgate || p.dup)) return;
  gemm::GroupedGemmParams g;  // dact = dy . down_e ([hidden, inter] row-major as B)
  g.dtype = p.dtype;
  g.grouped = gemm::GroupedDim::M;
  g.groups = p.experts;
  g.offsets = p.offsets;
  g.m = p.rows;
  g.n = p.inter;
  g.k = p.hidden;
  g.a = {p.dy, gemm::Layout::RowMajor, p.hidden};
  g.b = {p.down, gemm::Layout::RowMajor, p.inter};
  g.b_group_stride = p.hidden * p.inter;
  g.d = s.dact;
  g.ldd = p.inter;
  gemm::grouped_gemm(g, stream);
  swiglu_backward_rows(p, s, stream);
  if (p.dx) {
    g.n = p.hidden;  // dx = dgate_pre . gate_e + dup_pre . up_e, in F32, then rounded
    g.k = p.inter;
    g.a = {s.dgate_pre, gemm::Layout::RowMajor, p.inter};
    g.b = {p.gate, gemm::Layout::RowMajor, p.hidden};
    g.b_group_stride = p.inter * p.hidden;
    g.d = s.dx_f32;
    g.ldd = p.hidden;
    g.epilogue.out_dtype = DType::f32;
    gemm::grouped_gemm(g, stream);
    g.a.data = s.dup_pre;
    g.b.data = p.up;
    g.epilogue.beta = 1.0f;
    g.epilogue.c = s.dx_f32;
    g.epilogue.ldc = p.hidden;
    gemm::grouped_gemm(g, stream);
    convert_rows(p, s, stream);
  }
  if (p.dgate) grouped_k(s.dgate_pre, p.inter, p.x, p.hidden, p.dgate);
  if (p.dup) grouped_k(s.dup_pre, p.inter, p.x, p.hidden, p.dup);
}

}  // namespace rudnn::moe::cuda
