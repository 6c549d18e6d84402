// CUDA entry points of the attention family: one per problem. Each runs the kernels of
// problem.plan (attention/plan.h) on `stream` and never throws for user errors (the entry
// points in attention.cpp validated them).
#pragma once

#include "attention/problem.h"
#include "rudnn/stream.h"

namespace rudnn::attn::cuda {

void attention_forward(const AttentionForward& p, const Stream& stream);
// Whether the Flash kernels hold mma.sync code for `device` (an image for sm_80 or later was
// built and is what the device runs): below that they compile to nothing, so the plan asks
// the code, not only the device (flash_forward_d64.cu).
bool flash_kernels_built(Device device);
// Whether the Hopper forward (flash_hopper.cuh) holds sm_90a code that `device` runs
// (flash_hopper_d128.cu).
bool flash_hopper_built(Device device);
void attention_backward(const AttentionBackward& p, const Stream& stream);

}  // namespace rudnn::attn::cuda
