// The CUDA backend of the grid_sample family. Problems are validated (problem.h); these
// launch on `stream` (a CUDA stream of the operands' device) and never synchronise.
#pragma once

#include <cstdint>

#include "grid_sample/problem.h"
#include "rudnn/stream.h"

namespace rudnn::grid_sample_detail::cuda {

void sample_forward(const SampleForward& p, const Stream& stream);
void sample_backward(const SampleBackward& p, const Stream& stream);
void affine_forward(const AffineForward& p, const Stream& stream);
void affine_backward(const AffineBackward& p, const Stream& stream);

// Device scratch of the deterministic input gradient (SampleBackward::scratch).
int64_t deterministic_scratch_bytes(const SampleShape& s);

}  // namespace rudnn::grid_sample_detail::cuda
