// Device element types and their conversions to and from FP32.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

namespace rudnn::cuda {

// A quiet NaN, what undefined rows are filled with.
constexpr float kNaN = __builtin_nanf("");

__device__ __forceinline__ float to_float(float v) { return v; }
__device__ __forceinline__ float to_float(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }

template <class T>
__device__ __forceinline__ T from_float(float v);
template <>
__device__ __forceinline__ float from_float<float>(float v) {
  return v;
}
template <>
__device__ __forceinline__ __half from_float<__half>(float v) {
  return __float2half_rn(v);
}
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}

// Two FP32 values rounded to a 16-bit T and packed into one word (a first, in the low half):
// one conversion instruction for the pair.
template <class T>
__device__ __forceinline__ unsigned pack_pair(float a, float b);
template <>
__device__ __forceinline__ unsigned pack_pair<__half>(float a, float b) {
  const __half2 pair = __floats2half2_rn(a, b);
  return *reinterpret_cast<const unsigned*>(&pair);
}
template <>
__device__ __forceinline__ unsigned pack_pair<__nv_bfloat16>(float a, float b) {
  const __nv_bfloat162 pair = __floats2bfloat162_rn(a, b);
  return *reinterpret_cast<const unsigned*>(&pair);
}

// Rounds an FP32 value to T and back: what storing and reloading it as T yields.
template <class T>
__device__ __forceinline__ float round_to(float v) {
  return to_float(from_float<T>(v));
}

}  // namespace rudnn::cuda
