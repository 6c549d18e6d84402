// CPU reference of the attention family: the definition of the forward and backward passes
// (rudnn/attention.h), in plain float64 loops over one query row at a time. It is what CPU
// tensors run, and the oracle the GPU tests compare with; it shares no code with the CUDA
// kernels.
#pragma once

#include "attention/problem.h"

namespace rudnn::attn::reference {

void attention_forward(const AttentionForward& p);
void attention_backward(const AttentionBackward& p);

}  // namespace rudnn::attn::reference
