// One element of an operand whose dtype is known only at run time (gates, beta and states of
// any floating dtype), read as or written from FP32.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "rudnn/dtype.h"

namespace rudnn::gdn::cuda {

__device__ __forceinline__ float load_any(const void* p, int64_t i, DType dt) {
  switch (dt) {
    case DType::f16:
      return __half2float(static_cast<const __half*>(p)[i]);
    case DType::bf16:
      return __bfloat162float(static_cast<const __nv_bfloat16*>(p)[i]);
    default:
      return static_cast<const float*>(p)[i];
  }
}
__device__ __forceinline__ void store_any(void* p, int64_t i, DType dt, float v) {
  switch (dt) {
    case DType::f16:
      static_cast<__half*>(p)[i] = __float2half_rn(v);
      break;
    case DType::bf16:
      static_cast<__nv_bfloat16*>(p)[i] = __float2bfloat16_rn(v);
      break;
    default:
      static_cast<float*>(p)[i] = v;
      break;
  }
}

}  // namespace rudnn::gdn::cuda
