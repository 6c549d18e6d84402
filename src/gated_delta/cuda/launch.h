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

// The chunked prefill (chunked.cuh): a parallel kernel per (chunk, head) writing W, U, the
// masked Q K^T and G to `workspace`, then a sequential one per (sequence, head, column slab).
// Limits the entry points check first: chunk <= kMaxChunk, K and V <= kMaxChunkDim, and
// chunked_shared_bytes within the device's opt-in shared memory.
constexpr int64_t kMaxChunk = 128;
constexpr int64_t kMaxChunkDim = 256;
// The larger of the two kernels' dynamic shared memory.
int64_t chunked_shared_bytes(const Chunked& p);
// The device workspace chunked needs, in bytes.
int64_t chunked_workspace_bytes(const Chunked& p);
void chunked(const Chunked& p, void* workspace, const Stream& stream);

// The chunked backward (chunked_backward.cuh), spec 000's form: the forward pass again, a
// reverse sequential pass for dS and dV', and two parallel kernels per (chunk, head). Its
// largest per-block dynamic shared memory (the entry point runs the recurrence's backward
// where this exceeds the device's opt-in limit) and its device workspace in bytes, for the
// forward problem f.
int64_t chunked_backward_shared_bytes(const Chunked& f);
int64_t chunked_backward_workspace_bytes(const Chunked& f);
void chunked_backward(const ChunkedBackward& p, void* workspace, const Stream& stream);

}  // namespace rudnn::gdn::cuda
