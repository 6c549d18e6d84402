// Host-side CUDA error checking (CUDA builds only).
#pragma once

#include <cuda_runtime_api.h>

#include "core/check.h"

namespace rudnn::detail {

inline void check_cuda(cudaError_t status, const char* what) {
  if (status == cudaSuccess) return;
  const ErrorCode code =
      status == cudaErrorMemoryAllocation ? ErrorCode::OutOfMemory : ErrorCode::Cuda;
  fail(code,
       cat(what, ": CUDA error ", cudaGetErrorName(status), " (", cudaGetErrorString(status), ")"));
}

// After a kernel launch: reports launch-configuration errors without synchronising.
inline void check_launch(const char* kernel) { check_cuda(cudaGetLastError(), kernel); }

}  // namespace rudnn::detail
