// The CUDA backend of the normalization family: one entry per problem kind. Problems are
// validated (problem.h); these only pick a tile and launch, ordered on `stream` (a CUDA
// stream of the operands' device).
#pragma once

#include "normalization/problem.h"
#include "rudnn/device.h"
#include "rudnn/stream.h"

namespace rudnn::norm::cuda {

void norm_forward(const NormForward& p, const Stream& stream);
void norm_backward(const NormBackward& p, const Stream& stream);
void softmax_forward(const SoftmaxForward& p, const Stream& stream);
void softmax_backward(const SoftmaxBackward& p, const Stream& stream);
void cross_entropy(const CrossEntropy& p, const Stream& stream);
void scale_unless_one(const ScaleRows& p, const Stream& stream);

}  // namespace rudnn::norm::cuda
