// Rows of one operand brought into shared memory ahead of their use by the bulk-copy engine
// (sm_90+). A block owns rows first, first + step, ... (the k-th is first + k * step) and
// buffer k % kStages holds the k-th row: while one row is computed on, the copies of the next
// ones are in flight. Used by the cross-entropy cluster kernel, whose blocks each stage their
// chunk of a row. (Register-tile norms and log-sum-exp staged this way measured slower than
// plain loads: RESULTS.md, rounds 6-9.)
//
// Protocol, per block: begin() (every thread); then for k = 0, 1, ... while has(k):
// wait(k) gives the row in shared memory; after a block barrier that follows the last read
// of it, every thread calls refill(k), which starts the copy of row k + kStages into the same
// buffer. Every copy started is waited for, so no copy is in flight when the block exits.
//
// A row for which `needed(row)` (the Filter) is false is not copied: its barrier phase
// completes at once and its buffer holds stale bytes (the caller knows not to read it). A
// row_bytes of 0 copies nothing either.
//
// Dynamic shared memory: kHeaderBytes for the barriers, then kStages buffers of
// buffer_bytes(row_bytes). Rows must be 16-byte aligned with row_bytes a multiple of 16.
#pragma once

#include <cstdint>

#include "cuda/bulk_copy.cuh"

namespace rudnn::norm::cuda {

extern __shared__ __align__(128) unsigned char staged_shared[];

template <int kStages, class Filter>
class StagedRows {
 public:
  static constexpr uint32_t kHeaderBytes = 128;
  static_assert(kStages >= 2 && kStages * sizeof(uint64_t) <= kHeaderBytes);

  static __host__ __device__ constexpr uint32_t buffer_bytes(uint32_t row_bytes) { return (row_bytes + 127u) / 128u * 128u; }
  static __host__ __device__ constexpr uint32_t shared_bytes(uint32_t row_bytes) {
    return kHeaderBytes + kStages * buffer_bytes(row_bytes);
  }

  __device__ StagedRows(const void* base, int64_t stride_bytes, uint32_t row_bytes, int64_t rows, int64_t first,
                        int64_t step, Filter needed)
      : needed_(needed),
        base_(static_cast<const unsigned char*>(base)),
        stride_bytes_(stride_bytes),
        row_bytes_(row_bytes),
        buffer_bytes_(buffer_bytes(row_bytes)),
        rows_(rows),
        first_(first),
        step_(step),
        full_(reinterpret_cast<uint64_t*>(staged_shared)),
        buffers_(staged_shared + kHeaderBytes) {}

  // Every thread of the block, once: sets up the barriers and starts the first copies.
  __device__ void begin() {
    if (threadIdx.x == 0) {
      for (int s = 0; s < kStages; ++s) rudnn::cuda::mbarrier_init(&full_[s], 1);
      rudnn::cuda::fence_barrier_init();
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      for (int k = 0; k < kStages; ++k) start(k);
    }
  }

  __device__ int64_t row(int64_t k) const { return first_ + k * step_; }
  __device__ bool has(int64_t k) const { return row(k) < rows_; }

  // Waits until the k-th row has landed and returns it.
  template <class T>
  __device__ const T* wait(int64_t k) const {
    const int s = static_cast<int>(k % kStages);
    rudnn::cuda::mbarrier_wait(&full_[s], static_cast<uint32_t>((k / kStages) & 1));
    return reinterpret_cast<const T*>(buffers_ + s * buffer_bytes_);
  }

  // Every thread, after a block barrier that follows its last read of the k-th row: reuses
  // that buffer for row k + kStages.
  __device__ void refill(int64_t k) {
    if (threadIdx.x == 0) start(k + kStages);
  }

 private:
  __device__ void start(int64_t k) {
    if (!has(k)) return;
    const int s = static_cast<int>(k % kStages);
    if (row_bytes_ == 0 || !needed_(row(k))) {
      rudnn::cuda::mbarrier_arrive(&full_[s]);
      return;
    }
    // The buffer was last read through ordinary loads; order those before the engine's writes.
    rudnn::cuda::fence_proxy_async_shared();
    rudnn::cuda::mbarrier_arrive_expect_bytes(&full_[s], row_bytes_);
    rudnn::cuda::bulk_copy_to_shared(buffers_ + s * buffer_bytes_, base_ + row(k) * stride_bytes_, row_bytes_, &full_[s]);
  }

  Filter needed_;
  const unsigned char* base_;
  int64_t stride_bytes_;
  uint32_t row_bytes_, buffer_bytes_;
  int64_t rows_, first_, step_;
  uint64_t* full_;
  unsigned char* buffers_;
};

}  // namespace rudnn::norm::cuda
