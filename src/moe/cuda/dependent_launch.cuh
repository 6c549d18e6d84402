// Programmatic dependent launch (sm_90) for the decode chain route -> gate/up -> down: a
// kernel launched with launch_dependent may start while the stream's previous kernel is still
// running, once every block of that kernel has called allow_dependents (or exited); it must
// call wait_for_producer before reading what the previous kernel writes. Without the launch
// attribute (or before sm_90) both calls are no-ops and the launches simply serialise.
#pragma once

#include <cuda_runtime.h>

#include <utility>

#include "core/cuda_check.h"

namespace rudnn::moe::cuda {

// Waits until the previous kernel in the stream has completed and its writes are visible.
__device__ __forceinline__ void wait_for_producer() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

// Lets the next kernel (if launched with launch_dependent) start.
__device__ __forceinline__ void allow_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// Launches `kernel` as a programmatic dependent of the stream's previous kernel (dependent
// false: a plain launch, for comparison).
template <class... Params, class... Args>
void launch_dependent(bool dependent, void (*kernel)(Params...), dim3 grid, dim3 block,
                      cudaStream_t stream, const char* what, Args&&... args) {
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = 0;
  config.stream = stream;
  cudaLaunchAttribute attribute{};
  attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute.val.programmaticStreamSerializationAllowed = 1;
  config.attrs = &attribute;
  config.numAttrs = dependent ? 1 : 0;
  detail::check_cuda(cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...), what);
}

}  // namespace rudnn::moe::cuda
