// CPU reference of the transformer family: the definition of each op in plain loops,
// computed in float64 and rounded once to the dtype. It is what CPU tensors run and the
// oracle the GPU tests compare with; it shares no code with the CUDA kernels.
#pragma once

#include "transformer/problem.h"

namespace rudnn::transformer::reference {

void rope(const Rope& p);
void glu_forward(const GluForward& p);
void glu_backward(const GluBackward& p);

}  // namespace rudnn::transformer::reference
