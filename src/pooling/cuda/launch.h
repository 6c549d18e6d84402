// The CUDA backend of the pooling family. Problems are validated (problem.h); these launch on
// `stream` (a CUDA stream of the operands' device) and never synchronise.
#pragma once

#include "pooling/problem.h"
#include "rudnn/stream.h"

namespace rudnn::pooling_detail::cuda {

void max_forward(const MaxForward& p, const Stream& stream);
void max_backward(const MaxBackward& p, const Stream& stream);
void avg_forward(const AvgForward& p, const Stream& stream);
void avg_backward(const AvgBackward& p, const Stream& stream);

}  // namespace rudnn::pooling_detail::cuda
