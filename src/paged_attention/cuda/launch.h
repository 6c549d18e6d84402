// CUDA entry points of the paged family: one per problem, plus the metadata upload. Each
// runs on `stream` and never throws for user errors (paged_attention.cpp validated them).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "paged_attention/problem.h"
#include "rudnn/stream.h"

namespace rudnn::paged::cuda {

// The forward kernel (and, with splits > 1, the merge pass).
void forward(const PagedForward& p, const Stream& stream);
// Cache writes.
void write(const PagedWrite& p, const Stream& stream);

// Copies `count` int32 values from host memory to `dst` (device memory of the stream's
// device) without synchronising: the values are packed into a pinned buffer and copied with
// cudaMemcpyAsync. The returned handle owns the pinned buffer; releasing it waits for that
// copy alone (its event) and frees the buffer.
std::shared_ptr<void> upload_pinned(const int32_t* values, size_t count, void* dst,
                                    const Stream& stream);

}  // namespace rudnn::paged::cuda
