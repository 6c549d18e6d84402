// The CUDA backend of the convolution family. Problems are validated (problem.h); these launch
// on `stream` (a CUDA stream of the operands' device) and never synchronise.
#pragma once

#include "conv/problem.h"
#include "rudnn/device.h"
#include "rudnn/stream.h"

namespace rudnn::conv_detail::cuda {

void forward(const Forward& p, const Stream& stream);  // the kernel the plan chose
void data_backward(const DataBackward& p, const Stream& stream);
void weight_backward(const WeightBackward& p, const Stream& stream);
void causal_forward(const CausalForward& p, const Stream& stream);
void causal_backward(const CausalBackward& p, const Stream& stream);

// The Depthwise (depthwise.cu) and ImplicitGemm (implicit_gemm.cu: bf16/f16, channels-last
// input and weight with C % 8 == 0, groups 1) forward kernels, called by forward().
void depthwise_forward(const Forward& p, const Stream& stream);
void implicit_gemm_forward(const Forward& p, const Stream& stream);
// The ImplicitGemm forward on sm_90a (hopper_conv.cu; p.hopper_kernel, which the plan sets
// only where hopper_conv_fits holds): the GEMM's TMA + wgmma kernel.
void hopper_implicit_gemm_forward(const Forward& p, const Stream& stream);
// Whether the ImplicitGemm forward of p (validated, pointers and strides set) can run the
// Hopper kernel on `device` (a CUDA device): built for sm_90a and a compute capability 9.0
// device (gemm's hopper_kernel_usable), bf16/f16, groups 1, C % 8 == 0, strides <= 8 (TMA's
// traversal step), channels-last input with 16-byte aligned base and pixel strides, a dense
// KRSC weight, dense channels-last output and residual, sizes inside int32 coordinates.
bool hopper_conv_fits(const Forward& p, Device device);

}  // namespace rudnn::conv_detail::cuda
