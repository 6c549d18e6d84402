// Dispatch: a stable counting sort of the T*k (token, slot) pairs by expert, on the device.
//   1. chunk_counts: each block counts its chunk of slots per expert (shared-memory integer
//      counters: exact, so the result does not depend on their order).
//   2. scan: per expert, the chunks' exclusive prefix (chunk_base) and the total; offsets =
//      exclusive prefix of the totals. One block.
//   3. place: each block walks its chunk in slot order, 256 slots at a time, warps in turn,
//      ranking equal experts within a warp with __match_any_sync: slot s lands at
//      offsets[e] + chunk_base[c][e] + (earlier slots of e in the chunk), i.e. token order.
//   4. gather: row r = input[token_of_row[r]], 16-byte copies where the rows allow.
//   With one chunk (T * k <= 4096: every decode batch), passes 1-3 run as one block of one
//   kernel, with no scratch: two launches fewer on the path where launches are the cost.
// And combine: one block per token summing its k rows in slot order, FP32, no atomics.
#include <cstdint>

#include "core/cuda_check.h"
#include "cuda/launch.cuh"
#include "cuda/vec.cuh"
#include "moe/cuda/launch.h"
#include "moe/cuda/weights.cuh"
#include "rudnn/tensor.h"

namespace rudnn::moe::cuda {

using ::rudnn::cuda::LaunchContext;
using ::rudnn::cuda::load_pack;
using ::rudnn::cuda::store_pack;
using ::rudnn::cuda::with_float_type;

namespace {

constexpr int kThreads = 256;
constexpr int64_t kChunk = 4096;  // slots per block in passes 1 and 3

// counter[e] = the slots of chunk `chunk` that chose expert e (shared-memory integer
// counters: exact, so the result does not depend on their order).
__device__ void count_chunk(const Dispatch& p, int32_t* counter, int64_t chunk) {
  const int experts = static_cast<int>(p.experts);
  for (int e = threadIdx.x; e < experts; e += kThreads) counter[e] = 0;
  __syncthreads();
  const int64_t slots = p.tokens * p.top_k;
  const int64_t begin = chunk * kChunk;
  const int64_t end = min(begin + kChunk, slots);
  for (int64_t s = begin + threadIdx.x; s < end; s += kThreads)
    atomicAdd(&counter[p.indices[s]], 1);
}

// offsets = the exclusive prefix of the experts' totals. One warp: lane l owns a contiguous
// run of them.
__device__ void write_offsets(const Dispatch& p, const int32_t* total) {
  const int experts = static_cast<int>(p.experts);
  const int lane = threadIdx.x;
  const int per_lane = (experts + 31) / 32;
  const int first = min(lane * per_lane, experts), last = min(first + per_lane, experts);
  int32_t mine = 0;
  for (int e = first; e < last; ++e) mine += total[e];
  int32_t prefix = mine;  // inclusive scan over lanes
  for (int o = 1; o < 32; o *= 2) {
    const int32_t other = __shfl_up_sync(0xffffffffu, prefix, o);
    if (lane >= o) prefix += other;
  }
  int32_t running = prefix - mine;
  for (int e = first; e < last; ++e) {
    p.offsets[e] = running;
    running += total[e];
  }
  if (lane == 31) p.offsets[experts] = prefix;
}

// Walks chunk `chunk` in slot order, 256 slots at a time, warps in turn; next_row[e] is the
// next free row of expert e (this chunk's first on entry).
__device__ void place_chunk(const Dispatch& p, int32_t* next_row, int64_t chunk) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int64_t slots = p.tokens * p.top_k;
  const int64_t begin = chunk * kChunk, end = min(begin + kChunk, slots);
  for (int64_t tile = begin; tile < end; tile += kThreads) {
    const int64_t s = tile + threadIdx.x;
    const bool valid = s < end;
    const uint32_t e = valid ? p.indices[s] : 0xffffffffu;
    const unsigned peers = __match_any_sync(0xffffffffu, e);
    const int rank = __popc(peers & ((1u << lane) - 1));
    const bool leader = (peers & ((1u << lane) - 1)) == 0;
    int32_t row = 0;
    for (int w = 0; w < kThreads / 32; ++w) {
      if (warp == w) {
        const int32_t base = valid ? next_row[e] : 0;
        __syncwarp();
        if (valid && leader) next_row[e] = base + __popc(peers);
        row = base + rank;
      }
      __syncthreads();
    }
    if (valid) {
      p.row_of_slot[s] = row;
      p.token_of_row[row] = static_cast<int32_t>(s / p.top_k);
    }
  }
}

__global__ void __launch_bounds__(kThreads) chunk_counts_kernel(Dispatch p, int32_t* counts) {
  extern __shared__ int32_t counter[];
  const int experts = static_cast<int>(p.experts);
  count_chunk(p, counter, blockIdx.x);
  __syncthreads();
  for (int e = threadIdx.x; e < experts; e += kThreads)
    counts[static_cast<int64_t>(blockIdx.x) * experts + e] = counter[e];
}

// counts [chunks, E] becomes each chunk's exclusive prefix within its expert; offsets the
// experts' exclusive prefix. One warp scans the totals: lane l owns a contiguous run of them.
__global__ void __launch_bounds__(1024) scan_kernel(Dispatch p, int32_t* counts, int64_t chunks) {
  extern __shared__ int32_t total[];
  const int experts = static_cast<int>(p.experts);
  for (int e = threadIdx.x; e < experts; e += blockDim.x) {
    int32_t running = 0;
    for (int64_t c = 0; c < chunks; ++c) {
      const int32_t n = counts[c * experts + e];
      counts[c * experts + e] = running;
      running += n;
    }
    total[e] = running;
  }
  __syncthreads();
  if (threadIdx.x < 32) write_offsets(p, total);
}

__global__ void __launch_bounds__(kThreads) place_kernel(Dispatch p, const int32_t* chunk_base) {
  extern __shared__ int32_t next_row[];
  const int experts = static_cast<int>(p.experts);
  const int64_t chunk = blockIdx.x;
  for (int e = threadIdx.x; e < experts; e += kThreads)
    next_row[e] = p.offsets[e] + chunk_base[chunk * experts + e];
  __syncthreads();
  place_chunk(p, next_row, chunk);
}

// Passes 1-3 for a single chunk, in one block: the counts stay in shared memory, become the
// offsets, then the next free row of each expert.
__global__ void __launch_bounds__(kThreads) single_chunk_kernel(Dispatch p) {
  extern __shared__ int32_t counter[];
  count_chunk(p, counter, 0);
  __syncthreads();
  if (threadIdx.x < 32) write_offsets(p, counter);
  __syncthreads();  // the offsets are in global memory, visible to the block from here
  const int experts = static_cast<int>(p.experts);
  for (int e = threadIdx.x; e < experts; e += kThreads) counter[e] = p.offsets[e];
  __syncthreads();
  place_chunk(p, counter, 0);
}

// One warp per row, in words of type Word.
template <class Word>
__global__ void __launch_bounds__(kThreads) gather_kernel(Dispatch p, int64_t words_per_row) {
  const int lane = threadIdx.x % 32;
  const int64_t rows = p.tokens * p.top_k;
  const int64_t r = static_cast<int64_t>(blockIdx.x) * (kThreads / 32) + threadIdx.x / 32;
  if (r >= rows) return;
  const Word* src = static_cast<const Word*>(p.input) + p.token_of_row[r] * words_per_row;
  Word* dst = static_cast<Word*>(p.rows) + r * words_per_row;
  for (int64_t i = lane; i < words_per_row; i += 32) dst[i] = src[i];
}

template <class T, int W>
__global__ void __launch_bounds__(kThreads) combine_kernel(Combine p) {
  const int64_t t = blockIdx.x;
  const int64_t k = p.top_k, hidden = p.hidden;
  const T* out_rows = static_cast<const T*>(p.expert_out);
  for (int64_t h = static_cast<int64_t>(threadIdx.x) * W; h < hidden; h += kThreads * W) {
    float acc[W] = {};
    for (int64_t j = 0; j < k; ++j) {
      const float w = p.weights ? load_weight(p.weight_dtype, p.weights, t * k + j) : 1.0f;
      const int64_t row = p.row_of_slot[t * k + j];
      float v[W];
      if constexpr (W == 1) {
        v[0] = ::rudnn::cuda::to_float(out_rows[row * hidden + h]);
      } else {
        load_pack<T, W>(out_rows + row * hidden + h, v);
      }
#pragma unroll
      for (int i = 0; i < W; ++i) acc[i] += w * v[i];
    }
    T* out = static_cast<T*>(p.out) + t * hidden + h;
    if constexpr (W == 1) {
      out[0] = ::rudnn::cuda::from_float<T>(acc[0]);
    } else {
      store_pack<T, W>(out, acc);
    }
  }
}

bool aligned(const void* ptr, int64_t bytes) {
  return reinterpret_cast<uintptr_t>(ptr) % static_cast<uintptr_t>(bytes) == 0;
}

}  // namespace

void dispatch(const Dispatch& p, const Stream& stream) {
  const LaunchContext ctx(stream);
  const int64_t slots = p.tokens * p.top_k;
  const int64_t chunks = (slots + kChunk - 1) / kChunk;
  const size_t counter_bytes = static_cast<size_t>(p.experts) * sizeof(int32_t);
  if (chunks == 1) {
    single_chunk_kernel<<<1, kThreads, counter_bytes, ctx.stream>>>(p);
    gather_rows(p, stream);
    detail::check_launch("dispatch");
    return;
  }
  // Chunk counts, then bases: chunks x E int32, freed stream-ordered after the passes.
  const Tensor scratch =
      Tensor::empty({chunks > 0 ? chunks * p.experts : 1}, DType::i32, ctx.device, stream);
  int32_t* counts = static_cast<int32_t*>(scratch.data());
  if (chunks > 0) {
    chunk_counts_kernel<<<static_cast<unsigned>(chunks), kThreads, counter_bytes, ctx.stream>>>(
        p, counts);
  }
  scan_kernel<<<1, 1024, counter_bytes, ctx.stream>>>(p, counts, chunks);
  if (chunks > 0) {
    place_kernel<<<static_cast<unsigned>(chunks), kThreads, counter_bytes, ctx.stream>>>(p, counts);
    gather_rows(p, stream);
  }
  detail::check_launch("dispatch");
}

void gather_rows(const Dispatch& p, const Stream& stream) {
  const int64_t slots = p.tokens * p.top_k;
  if (slots == 0) return;
  const LaunchContext ctx(stream);
  const int64_t row_bytes = p.hidden * static_cast<int64_t>(dtype_size(p.dtype));
  const unsigned blocks = static_cast<unsigned>((slots + kThreads / 32 - 1) / (kThreads / 32));
  if (row_bytes % 16 == 0 && aligned(p.input, 16) && aligned(p.rows, 16)) {
    gather_kernel<uint4><<<blocks, kThreads, 0, ctx.stream>>>(p, row_bytes / 16);
  } else if (row_bytes % 4 == 0 && aligned(p.input, 4) && aligned(p.rows, 4)) {
    gather_kernel<uint32_t><<<blocks, kThreads, 0, ctx.stream>>>(p, row_bytes / 4);
  } else {
    gather_kernel<uint16_t><<<blocks, kThreads, 0, ctx.stream>>>(p, row_bytes / 2);
  }
  detail::check_launch("dispatch");
}

void combine(const Combine& p, const Stream& stream) {
  if (p.tokens == 0) return;
  const LaunchContext ctx(stream);
  with_float_type(p.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    constexpr int kW = 16 / sizeof(T);
    const bool packed = p.hidden % kW == 0 && aligned(p.expert_out, 16) && aligned(p.out, 16);
    const unsigned blocks = static_cast<unsigned>(p.tokens);
    if (packed) {
      combine_kernel<T, kW><<<blocks, kThreads, 0, ctx.stream>>>(p);
    } else {
      combine_kernel<T, 1><<<blocks, kThreads, 0, ctx.stream>>>(p);
    }
  });
  detail::check_launch("combine");
}

}  // namespace rudnn::moe::cuda
