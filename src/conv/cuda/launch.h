// The CUDA backend of the convolution family. Problems are validated (problem.h); these launch
// on `stream` (a CUDA stream of the operands' device) and never synchronise.
#pragma once

#include "conv/problem.h"
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

}  // namespace rudnn::conv_detail::cuda
