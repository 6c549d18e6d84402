// Device helpers shared by the convolution kernels: strided addressing, flat-index splits in
// the memory order of an operand, the epilogue's activations, launch sizes.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "conv/problem.h"

namespace rudnn::conv_detail::cuda {

constexpr int kThreads = 256;

inline unsigned blocks_for(int64_t items, int threads = kThreads) {
  const int64_t blocks = (items + threads - 1) / threads;
  return static_cast<unsigned>(std::clamp<int64_t>(blocks, 1, int64_t{1} << 30));
}

__device__ __forceinline__ int64_t at(const Strides& st, int64_t n, int64_t c, int64_t z,
                                      int64_t y, int64_t x) {
  return n * st.n + c * st.c + z * st.sp[0] + y * st.sp[1] + x * st.sp[2];
}

// Splits a flat position over [n, c, z, y, x] extents; channels_fastest orders it
// [n, z, y, x, c] instead, so that consecutive threads meet consecutive addresses of a
// channels-last operand as they do of an NCHW one.
__device__ __forceinline__ void split5(int64_t flat, int64_t channels, const int64_t sp[3],
                                       bool channels_fastest, int64_t& n, int64_t& c,
                                       int64_t pos[3]) {
  if (channels_fastest) {
    c = flat % channels;
    flat /= channels;
  }
  pos[2] = flat % sp[2];
  flat /= sp[2];
  pos[1] = flat % sp[1];
  flat /= sp[1];
  pos[0] = flat % sp[0];
  flat /= sp[0];
  if (!channels_fastest) {
    c = flat % channels;
    flat /= channels;
  }
  n = flat;
}

__device__ __forceinline__ float activate(Activation a, float v) {
  switch (a) {
    case Activation::Relu:
      return v > 0.0f ? v : 0.0f;
    case Activation::Silu:
      return v / (1.0f + expf(-v));
    case Activation::Gelu:
      return 0.5f * v * (1.0f + erff(v * 0.70710678118654752f));
    default:
      return v;
  }
}

}  // namespace rudnn::conv_detail::cuda
