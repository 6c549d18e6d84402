// CPU reference of the grid_sample family: the definition of each op in float64 (taps.h
// with R = double), what CPU tensors run and the oracle of the GPU tests.
#pragma once

#include "grid_sample/problem.h"

namespace rudnn::grid_sample_detail::reference {

void sample_forward(const SampleForward& p);
void sample_backward(const SampleBackward& p);
void affine_forward(const AffineForward& p);
void affine_backward(const AffineBackward& p);

}  // namespace rudnn::grid_sample_detail::reference
