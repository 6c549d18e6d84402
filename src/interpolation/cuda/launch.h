// The CUDA backend of the interpolation family. Problems are validated (problem.h); these
// launch on `stream` (a CUDA stream of the operands' device) and never synchronise.
#pragma once

#include "interpolation/problem.h"
#include "rudnn/stream.h"

namespace rudnn::interpolation_detail::cuda {

void forward(const Forward& p, const Stream& stream);
void backward(const Backward& p, const Stream& stream);

}  // namespace rudnn::interpolation_detail::cuda
