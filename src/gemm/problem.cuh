// How a kernel finds a group's operands in GemmArgs (args.h). The mainloops differ in how they
// load a tile (TMA, cp.async, plain loads), never in this.
#pragma once

#include <cstdint>

#include "gemm/args.h"

namespace rudnn::gemm::kernels {

__host__ __device__ __forceinline__ int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

__device__ __forceinline__ int64_t clamp_to(int64_t v, int64_t lo, int64_t hi) {
  return v < lo ? lo : (v > hi ? hi : v);
}

// One group's problem: its sizes, where it starts, and the element offsets of its operands
// from the base pointers. Offsets outside the buffers' extent are clamped into it (gemm.h).
struct GroupView {
  int64_t m, k;  // the group's M and K
  int64_t row0;  // grouped M: first row of the group in A and D (TMA coordinate); else 0
  int64_t k0;    // grouped K: first k of the group in A and B (TMA coordinate); else 0
  int64_t a_offset, b_offset, d_offset, c_offset;
};

__device__ __forceinline__ GroupView group_view(const GemmArgs& p, int g) {
  GroupView v{};
  v.m = p.m;
  v.k = p.k;
  if (p.offsets == nullptr) return v;
  if (p.grouped_k) {
    const int64_t begin = clamp_to(p.offsets[g], 0, p.k);
    const int64_t end = clamp_to(p.offsets[g + 1], begin, p.k);
    v.k = end - begin;
    v.k0 = begin;
    v.a_offset = begin * p.a_k;
    v.b_offset = begin * p.b_k;
    v.d_offset = g * p.d_group_stride;
    v.c_offset = g * p.c_group_stride;
  } else {
    const int64_t begin = clamp_to(p.offsets[g], 0, p.m);
    const int64_t end = clamp_to(p.offsets[g + 1], begin, p.m);
    v.m = end - begin;
    v.row0 = begin;
    v.a_offset = begin * p.a_m;
    v.b_offset = g * p.b_group_stride;
    v.d_offset = begin * p.ldd;
    v.c_offset = begin * p.ldc;
  }
  return v;
}

// Output tiles of a group: its M tiles by N tiles (a grouped-K group owns its whole output
// even when K_g = 0: its D_g is the epilogue of zeros; a grouped-M group without rows owns
// none).
template <int kBlockM, int kBlockN>
__device__ __forceinline__ int tiles_of_group(const GemmArgs& p, int g) {
  const GroupView v = group_view(p, g);
  return static_cast<int>(ceil_div(v.m, kBlockM) * ceil_div(p.n, kBlockN));
}

}  // namespace rudnn::gemm::kernels
