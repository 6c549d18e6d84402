// CPU reference of the normalization family: the definition of each op, in plain loops with
// float64 statistics. It is what CPU tensors run, and the oracle the GPU tests compare with.
// It shares no code with the CUDA kernels.
#pragma once

#include "normalization/problem.h"

namespace rudnn::norm::reference {

void norm_forward(const NormForward& p);
void norm_backward(const NormBackward& p);
void softmax_forward(const SoftmaxForward& p);
void softmax_backward(const SoftmaxBackward& p);
void cross_entropy(const CrossEntropy& p);
void scale_unless_one(const ScaleRows& p);

}  // namespace rudnn::norm::reference
