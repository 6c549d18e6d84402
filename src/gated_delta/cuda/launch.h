#pragma once

#include "gated_delta/problem.h"
#include "rudnn/stream.h"

namespace rudnn::gdn::cuda {

// The recurrence, one kernel; key_dim <= kMaxKeyDim (validated by the entry points).
constexpr int64_t kMaxKeyDim = 256;
void recurrence(const Recurrence& p, const Stream& stream);

// The backward of the recurrence (deterministic: no atomics): per (sequence, value head,
// slab of rows) a block walks the steps backwards, chunk by chunk, from FP32 checkpoints of
// the state written on a first forward pass; dq, dk, dgate and dbeta are summed over slabs
// (and value heads sharing a key head) by a second kernel in a fixed order.
void recurrence_backward(const RecurrenceBackward& p, const Stream& stream);
// The FP32 workspace recurrence_backward needs (checkpoints, per-chunk states, partials).
int64_t backward_workspace_floats(const Recurrence& f);

}  // namespace rudnn::gdn::cuda
