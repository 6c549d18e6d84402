// What every family's CUDA entry point starts with, and the launch-time facts it asks about
// kernels. Host code (nvcc only: it names the device types).
//
//   void my_op(const MyProblem& p, const Stream& stream) {
//     const LaunchContext ctx(stream);
//     with_float_type(p.dtype, [&](auto tag) {
//       using T = typename decltype(tag)::type;
//       my_kernel<T><<<grid, block, 0, ctx.stream>>>(p);
//     });
//     check_launch("my_op");
//   }
#pragma once

#include <cuda_runtime.h>

#include "core/cuda_api.h"
#include "core/cuda_check.h"
#include "cuda/device_info.h"
#include "cuda/types.cuh"
#include "rudnn/dtype.h"
#include "rudnn/stream.h"

namespace rudnn::cuda {

// The operands' device made current for the launches (restored on exit), and the stream.
struct LaunchContext {
  explicit LaunchContext(const Stream& s)
      : guard(s.device().index),
        device(s.device()),
        stream(reinterpret_cast<cudaStream_t>(s.handle())),
        rudnn_stream(s) {}

  detail::cuda::DeviceGuard guard;
  Device device;
  cudaStream_t stream;
  const Stream& rudnn_stream;  // what temporaries of the launch are allocated on (Tensor::empty)
};

template <class T>
struct TypeTag {
  using type = T;
};

// Calls f(TypeTag<T>{}) with T the device type of a floating dtype (float, __half,
// __nv_bfloat16). Other dtypes never reach a CUDA backend: the entry points refuse them.
template <class F>
void with_float_type(DType dtype, F&& f) {
  switch (dtype) {
    case DType::f32:
      return f(TypeTag<float>{});
    case DType::f16:
      return f(TypeTag<__half>{});
    case DType::bf16:
      return f(TypeTag<__nv_bfloat16>{});
    default:
      return;
  }
}

// Grid of a persistent kernel: as many blocks of `block_threads` as are resident on the
// device at once. `occupancy` belongs to one kernel, so the query runs once per device.
template <class Kernel>
int resident_blocks(Kernel kernel, int block_threads, Device device, PerDevice<int>& occupancy,
                    size_t dynamic_shared = 0) {
  const int per_sm = occupancy.get(device, [&] {
    int blocks = 0;
    detail::check_cuda(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kernel, block_threads,
                                                                     dynamic_shared),
                       "cudaOccupancyMaxActiveBlocksPerMultiprocessor");
    return blocks < 1 ? 1 : blocks;
  });
  return per_sm * device_info(device).multiprocessors;
}

// Whether `kernel` was compiled (to PTX and SASS) for sm_90 or newer, i.e. whether its
// Hopper instructions (bulk copies, clusters, wgmma) exist in the code the device runs: they
// compile to nothing below that, so a path that needs them checks the code, not the device.
// `known` belongs to one kernel: one query per kernel and device.
template <class Kernel>
bool built_for_hopper(Kernel kernel, Device device, PerDevice<signed char>& known) {
  return known.get(device, [&]() -> signed char {
    cudaFuncAttributes attributes{};
    detail::check_cuda(cudaFuncGetAttributes(&attributes, kernel), "cudaFuncGetAttributes");
    return attributes.ptxVersion >= 90 && attributes.binaryVersion >= 90 ? 1 : -1;
  }) > 0;
}

}  // namespace rudnn::cuda
