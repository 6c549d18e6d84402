// What the transformer family's kernels share: loads and stores of N elements that are one
// packed access when vectorised and N scalar ones otherwise, the alignment test that picks
// between them, and the 2-d block shape (units of a row across x, rows across y).
#pragma once

#include <cstdint>
#include <type_traits>
#include <utility>

#include "cuda/launch.cuh"
#include "cuda/vec.cuh"

namespace rudnn::transformer::cuda {

using ::rudnn::cuda::LaunchContext;
using ::rudnn::cuda::Pack;
using ::rudnn::cuda::with_float_type;

template <class T, int N, bool kVec>
__device__ __forceinline__ void load_n(const T* p, float (&out)[N]) {
  if constexpr (kVec) {
    ::rudnn::cuda::load_pack<T, N>(p, out);
  } else {
#pragma unroll
    for (int k = 0; k < N; ++k) out[k] = ::rudnn::cuda::to_float(p[k]);
  }
}

template <class T, int N, bool kVec>
__device__ __forceinline__ void store_n(T* p, const float (&in)[N]) {
  if constexpr (kVec) {
    ::rudnn::cuda::store_pack<T, N>(p, in);
  } else {
#pragma unroll
    for (int k = 0; k < N; ++k) p[k] = ::rudnn::cuda::from_float<T>(in[k]);
  }
}

// Whether every pointer and stride lets accesses of `elements` elements of `size` bytes
// be aligned (a stride of an axis of size 1 is never used and does not count).
struct Alignment {
  int64_t elements = 1;
  size_t size = 1;
  bool ok = true;
  void pointer(const void* p) {
    ok = ok && reinterpret_cast<uintptr_t>(p) % (elements * size) == 0;
  }
  void stride(int64_t s, int64_t extent) { ok = ok && (extent <= 1 || s % elements == 0); }
  void count(int64_t n) { ok = ok && n % elements == 0; }
};

// A block of 256 threads as (x: units of a row, y: rows): x the smallest power of two that
// covers `units` (at most 256).
inline dim3 row_block(int64_t units) {
  unsigned x = 1;
  while (x < 256 && x < units) x *= 2;
  return dim3(x, 256 / x);
}

// Blocks for `rows` rows of a block shape, at most `most` (the kernels stride over rows).
inline unsigned row_blocks(int64_t rows, dim3 block, int64_t most) {
  const int64_t wanted = (rows + block.y - 1) / block.y;
  return static_cast<unsigned>(wanted < most ? (wanted < 1 ? 1 : wanted) : most);
}

}  // namespace rudnn::transformer::cuda
