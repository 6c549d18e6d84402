// The total order routing selects by, shared by the reference and the kernels so that both
// pick the same experts: a larger value ranks higher, NaN above +inf (as torch.topk), -0
// equal to +0, and equal values rank the lower id higher. A key packs (value, id) into 64
// bits so that "the best candidate ranked below the previous pick" is one unsigned compare:
// top-k is k passes of a max over keys, with no mask of taken experts.
#pragma once

#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define RUDNN_MOE_HD __host__ __device__ __forceinline__
#else
#define RUDNN_MOE_HD inline
#endif

namespace rudnn::moe {

RUDNN_MOE_HD uint32_t rank_bits(float v) {
  if (v != v) return 0xFFFFFFFFu;
  if (v == 0.0f) v = 0.0f;  // -0 ranks as +0
  uint32_t u;
#if defined(__CUDA_ARCH__)
  u = __float_as_uint(v);
#else
  std::memcpy(&u, &v, sizeof u);
#endif
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

RUDNN_MOE_HD uint64_t order_key(float v, uint32_t id) {
  return (static_cast<uint64_t>(rank_bits(v)) << 32) | static_cast<uint32_t>(~id);
}

RUDNN_MOE_HD uint32_t key_id(uint64_t key) { return ~static_cast<uint32_t>(key); }

// Below every real key: what a pass with nothing left to pick yields.
constexpr uint64_t kNoKey = 0;

}  // namespace rudnn::moe
