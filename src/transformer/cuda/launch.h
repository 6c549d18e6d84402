// The CUDA backend of the transformer family: one entry per problem kind. Problems are
// validated (problem.h); these pick a vector width and launch, ordered on `stream`.
#pragma once

#include "rudnn/device.h"
#include "rudnn/stream.h"
#include "transformer/problem.h"

namespace rudnn::transformer::cuda {

void rope(const Rope& p, const Stream& stream);
void norm_rope(const NormRope& p, const Stream& stream);
// Whether the fused norm_rope kernel exists in the device code for `device` (it copies rows
// ahead with cp.async, checked as Hopper's: the architecture the library is built for).
bool norm_rope_available(Device device);
void glu_forward(const GluForward& p, const Stream& stream);
void glu_backward(const GluBackward& p, const Stream& stream);

}  // namespace rudnn::transformer::cuda
