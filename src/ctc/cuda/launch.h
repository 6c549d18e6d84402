// The CUDA backend of CTC loss. Problems are validated for shapes, dtypes and devices
// (ctc.cpp); lengths and labels are checked here, on the device, per sample. Launches on
// `stream` and never synchronises.
#pragma once

#include <cstdint>

#include "ctc/problem.h"
#include "rudnn/device.h"
#include "rudnn/stream.h"

namespace rudnn::ctc::cuda {

// The longest target (CtcProblem::max_target) the recursion kernels take on `device`.
int64_t longest_target(Device device);

// p.loss from p.log_probs (p.scratch: scratch_layout(p, false).bytes).
void ctc_loss(const CtcProblem& p, const Stream& stream);
// p.grad from p.log_probs and p.grad_loss (p.scratch: scratch_layout(p, true).bytes).
void ctc_loss_backward(const CtcProblem& p, const Stream& stream);

}  // namespace rudnn::ctc::cuda
