// Routing weights are read in whichever float dtype they were made (the logits' dtype from
// route, F32 from a training plan): a branch uniform over the grid.
#pragma once

#include <cstdint>

#include "cuda/types.cuh"
#include "rudnn/dtype.h"

namespace rudnn::moe::cuda {

__device__ __forceinline__ float load_weight(DType dtype, const void* weights, int64_t i) {
  switch (dtype) {
    case DType::f32:
      return static_cast<const float*>(weights)[i];
    case DType::f16:
      return __half2float(static_cast<const __half*>(weights)[i]);
    default:
      return __bfloat162float(static_cast<const __nv_bfloat16*>(weights)[i]);
  }
}

}  // namespace rudnn::moe::cuda
