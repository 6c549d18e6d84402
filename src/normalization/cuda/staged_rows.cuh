// Rows of one operand brought into shared memory ahead of their use by the bulk-copy engine
// (sm_90+), for the persistent versions of the register-tile kernels.
//
// Why: a register-tile block loads its row, then stalls in block barriers for its
// reductions; while it does, none of its bytes are in flight, and a read-bound kernel (log-
// sum-exp, LayerNorm with its two reductions) leaves memory bandwidth unused. Here the block
// owns rows first, first + step, ... (the k-th is first + k * step) and buffer k % kStages
// holds the k-th row: while one row is reduced, the copies of the next ones are in flight,
// however long the reductions take.
//
// Protocol, per block: begin() (every thread); then for k = 0, 1, ... while has(k):
// wait(k) gives the row in shared memory; each thread copies its part into registers; after
// the next block barrier (no thread reads the buffer any more) every thread calls refill(k),
// which starts the copy of row k + kStages into the same buffer. Every copy started is
// waited for, so no copy is in flight when the block exits.
//
// A row for which `needed(row)` (a Filter) is false is not copied: its barrier phase completes
// at once and wait(k) returns a buffer of stale bytes (the caller knows not to read it). A
// row_bytes of 0 copies nothing either.
//
// Dynamic shared memory: kHeaderBytes for the barriers, then kStages buffers of
// buffer_bytes(row_bytes). Rows must be 16-byte aligned with row_bytes a multiple of 16
// (the vectorised-tile condition).
#pragma once

#include <cstdint>

#include "cuda/bulk_copy.cuh"
#include "normalization/cuda/row_tile.cuh"
#include "normalization/problem.h"

namespace rudnn::norm::cuda {

extern __shared__ __align__(128) unsigned char staged_shared[];

// Every row is needed.
struct AllRows {
  __device__ bool operator()(int64_t) const { return true; }
};

template <int kStages, class Filter = AllRows>
class StagedRows {
 public:
  static constexpr uint32_t kHeaderBytes = 128;
  static_assert(kStages >= 2 && kStages * sizeof(uint64_t) <= kHeaderBytes);

  static __host__ __device__ constexpr uint32_t buffer_bytes(uint32_t row_bytes) { return (row_bytes + 127u) / 128u * 128u; }
  static __host__ __device__ constexpr uint32_t shared_bytes(uint32_t row_bytes) {
    return kHeaderBytes + kStages * buffer_bytes(row_bytes);
  }

  __device__ StagedRows(const void* base, int64_t stride_bytes, uint32_t row_bytes, int64_t rows, int64_t first,
                        int64_t step, Filter needed = Filter{})
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
    // The buffer was last read through ordinary loads; order those before the engine's writes.
    if (row_bytes_ == 0 || !needed_(row(k))) {
      rudnn::cuda::mbarrier_arrive(&full_[s]);
      return;
    }
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

// The loop of a staged register-tile kernel (block tiles: the refill needs a block barrier):
// walks this block's rows of `in` ([rows, cols] of T) and calls
// row(index, row_in_shared_memory, on_loaded) for each, where the row function calls
// on_loaded() once every thread holds its part of the row.
template <class T, int kStages, class RowFn>
__device__ __forceinline__ void for_each_staged_row(const RowsIn& in, int64_t rows, int64_t cols, RowFn&& row) {
  StagedRows<kStages> x(in.data, in.stride * static_cast<int64_t>(sizeof(T)),
                        static_cast<uint32_t>(cols * static_cast<int64_t>(sizeof(T))), rows, blockIdx.x, gridDim.x);
  x.begin();
  for (int64_t k = 0; x.has(k); ++k) row(x.row(k), x.template wait<T>(k), [&] { x.refill(k); });
}

// Launches kKernel(p), a staged kernel of Tile with kStages row buffers, on a persistent grid
// of the blocks resident at once (counted at the tile's longest row, so that one occupancy
// query serves every row length), with shared memory for rows of `row_bytes`. Returns false,
// launching nothing, when the kernel was not compiled for sm_90+.
template <auto kKernel, class Tile, int kStages, class Problem>
bool launch_staged_rows(const char* name, const Problem& p, uint32_t row_bytes, const Stream& stream) {
  const Device device = stream.device();
  static signed char hopper[64];
  if (!built_for_hopper(kKernel, device, hopper)) return false;
  using Ring = StagedRows<kStages>;
  static int occupancy[64];
  const int64_t resident =
      resident_blocks(kKernel, Tile::kBlockThreads, device, occupancy, Ring::shared_bytes(Tile::kMaxRowBytes));
  const unsigned grid = static_cast<unsigned>(p.rows < resident ? p.rows : resident);
  const uint32_t shared = Ring::shared_bytes(row_bytes);
  trace_launch(name, grid, Tile::kBlockThreads, shared, resident);
  kKernel<<<grid, Tile::kBlockThreads, shared, reinterpret_cast<cudaStream_t>(stream.handle())>>>(p);
  return true;
}

}  // namespace rudnn::norm::cuda
