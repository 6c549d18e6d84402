// Warp-level pieces of the routing kernels: reductions over a warp and the top-k pass.
#pragma once

#include <cstdint>

#include "cuda/types.cuh"
#include "cuda/reduce.cuh"
#include "moe/order_key.h"

namespace rudnn::moe::cuda {

using rudnn::cuda::kFullMask;

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o /= 2) v = fmaxf(v, __shfl_xor_sync(kFullMask, v, o));
  return v;
}
using rudnn::cuda::warp_sum;
__device__ __forceinline__ uint64_t warp_max_key(uint64_t v) {
#pragma unroll
  for (int o = 16; o > 0; o /= 2) {
    const uint64_t other = __shfl_xor_sync(kFullMask, static_cast<unsigned long long>(v), o);
    v = other > v ? other : v;
  }
  return v;
}

__device__ __forceinline__ float sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

}  // namespace rudnn::moe::cuda
