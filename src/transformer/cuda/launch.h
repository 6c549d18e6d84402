// The CUDA backend of the transformer family: one entry per problem kind. Problems are
// validated (problem.h); these pick a vector width and launch, ordered on `stream`.
#pragma once

#include "rudnn/stream.h"
#include "transformer/problem.h"

namespace rudnn::transformer::cuda {

void rope(const Rope& p, const Stream& stream);
void norm_rope(const NormRope& p, const Stream& stream);
void glu_forward(const GluForward& p, const Stream& stream);
void glu_backward(const GluBackward& p, const Stream& stream);

}  // namespace rudnn::transformer::cuda
