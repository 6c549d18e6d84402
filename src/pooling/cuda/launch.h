// The CUDA backend of the pooling family. Problems are validated (problem.h); these launch on
// `stream` (a CUDA stream of the operands' device) and never synchronise.
#pragma once

#include <cuda_runtime.h>

#include "pooling/problem.h"
#include "rudnn/stream.h"

namespace rudnn::pooling_detail::cuda {

void max_forward(const MaxForward& p, const Stream& stream);
void max_backward(const MaxBackward& p, const Stream& stream);
void avg_forward(const AvgForward& p, const Stream& stream);
void avg_backward(const AvgBackward& p, const Stream& stream);
void lp_forward(const LpForward& p, const Stream& stream);
void lp_backward(const LpBackward& p, const Stream& stream);

// The strip kernels of pool_strip.cu: 2-D NCHW windows 2x2 / 3x3 at stride 2, each thread
// producing four adjacent outputs from 16-byte loads. Return false (launching nothing) when
// the problem is not one of theirs; the caller then runs the general kernel.
bool strip_max_forward(const MaxForward& p, cudaStream_t stream);
bool strip_avg_forward(const AvgForward& p, cudaStream_t stream);

// The channels-last kernels of pool_nhwc.cu: fixed windows of any rank, 16 bytes of channels
// per thread. Same contract: false (nothing launched) leaves the problem to the general kernel.
bool nhwc_max_forward(const MaxForward& p, cudaStream_t stream);
bool nhwc_avg_forward(const AvgForward& p, cudaStream_t stream);

}  // namespace rudnn::pooling_detail::cuda
