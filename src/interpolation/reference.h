// CPU reference of the interpolation family: the definition of each op in float64, what CPU
// tensors run and the oracle of the GPU tests.
#pragma once

#include "interpolation/problem.h"

namespace rudnn::interpolation_detail::reference {

void forward(const Forward& p);
// The adjoint of forward, as a scatter over the outputs into a float64 buffer (independent
// of the kernels' gather), rounded once per element.
void backward(const Backward& p);

}  // namespace rudnn::interpolation_detail::reference
