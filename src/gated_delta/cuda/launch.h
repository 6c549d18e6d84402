#pragma once

#include "gated_delta/problem.h"
#include "rudnn/stream.h"

namespace rudnn::gdn::cuda {

// The recurrence, one kernel; key_dim <= kMaxKeyDim (validated by the entry points).
constexpr int64_t kMaxKeyDim = 256;
void recurrence(const Recurrence& p, const Stream& stream);

}  // namespace rudnn::gdn::cuda
