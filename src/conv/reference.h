// The float64 CPU reference of the convolution family: the ops' definitions.
#pragma once

#include "conv/problem.h"

namespace rudnn::conv_detail::reference {

void forward(const Forward& p);
void data_backward(const DataBackward& p);
void weight_backward(const WeightBackward& p);
void causal_forward(const CausalForward& p);
void causal_backward(const CausalBackward& p);

}  // namespace rudnn::conv_detail::reference
