// CPU reference of the pooling family: the definition of each op in float64, what CPU
// tensors run and the oracle of the GPU tests. Both layouts (problem.h) are addressed in
// place.
#pragma once

#include "pooling/problem.h"

namespace rudnn::pooling_detail::reference {

void max_forward(const MaxForward& p);
void max_backward(const MaxBackward& p);
void avg_forward(const AvgForward& p);
void avg_backward(const AvgBackward& p);
void lp_forward(const LpForward& p);
void lp_backward(const LpBackward& p);

}  // namespace rudnn::pooling_detail::reference
