// The Hopper implicit-GEMM convolution: THE GEMM kernel (gemm/hopper_gemm.cuh, persistent,
// warp-specialised, TMA + wgmma) run with the convolution's A loader (ImplicitConvALoader:
// one TMA box of the channels-last input per tap and 64 channels) and row map (ConvRows: a
// tile of 128 rows is a box of output pixels), and the convolution's epilogue functor. The
// host side (hopper_conv.cu) builds the maps and the tiling; one .cu file per dtype
// instantiates the kernels (hopper_conv.cu: bf16, hopper_conv_f16.cu: f16).
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include "conv/cuda/common.cuh"
#include "conv/problem.h"
#include "core/cuda_check.h"
#include "cuda/device_info.h"
#include "gemm/hopper_gemm.cuh"
#include "rudnn/device.h"

namespace rudnn::conv_detail::cuda {

namespace gk = rudnn::gemm::kernels;

// The epilogue's activation as the other convolution kernels compute it (GELU: the erf form,
// where the GEMM's is the tanh approximation).
struct ConvActivationFn {
  Activation kind;
  __device__ __forceinline__ float operator()(float v) const { return activate(kind, v); }
};

// The whole fragment behind one test of the kind (found by argument-dependent lookup from the
// GEMM kernel's epilogue), as gemm's RuntimeActivation does: one loop per kind, not a switch
// per value.
template <int kCount>
__device__ __forceinline__ void activate_all(const ConvActivationFn& act, float (&v)[kCount]) {
  if (act.kind == Activation::None) return;
  const Activation kind = act.kind;
#pragma unroll
  for (int i = 0; i < kCount; ++i) v[i] = activate(kind, v[i]);
}

// One launch, prepared on the host.
struct HopperConvCall {
  CUtensorMap map_a, map_b;
  gk::ImplicitConvALoader loader;
  gk::ConvRows rows;
  gk::GemmArgs args;
  Activation activation;
  int64_t tiles;  // M tiles x N tiles
};

template <class T, int kBlockN>
void run_hopper_conv(const HopperConvCall& c, cudaStream_t stream, Device device) {
  using Traits = gk::HopperTraits<T, kBlockN, true, true>;
  auto kernel = gk::hopper_gemm_kernel<T, Traits, ConvActivationFn, gk::ImplicitConvALoader,
                                       gk::ConvRows>;
  static rudnn::cuda::PerDevice<signed char> configured;
  configured.get(device, [&]() -> signed char {
    detail::check_cuda(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                            Traits::kSharedBytes),
                       "cudaFuncSetAttribute(conv hopper_gemm_kernel)");
    return 1;
  });
  const int sms = rudnn::cuda::device_info(device).multiprocessors;
  const int grid = static_cast<int>(c.tiles < sms ? c.tiles : sms);
  // No TMA store: the kernel never reads map_d, A's map stands in.
  kernel<<<grid, Traits::kThreads, Traits::kSharedBytes, stream>>>(
      c.map_a, c.map_b, c.map_a, c.loader, c.rows, c.args, ConvActivationFn{c.activation});
  detail::check_launch("conv_forward hopper implicit gemm");
}

}  // namespace rudnn::conv_detail::cuda
