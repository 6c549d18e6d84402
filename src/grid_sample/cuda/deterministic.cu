// The deterministic input gradient's sort and segments (see sample.cuh): one CUB radix sort of
// (cell, entry) pairs, stable, so equal cells keep their entries in increasing order, and the
// first and last position of each cell's run in the sorted keys.
#include <cub/device/device_radix_sort.cuh>

#include "grid_sample/cuda/sample.cuh"

namespace rudnn::grid_sample_detail::cuda {

namespace {

int taps_per_location_of(const SampleShape& s) {
  const int per_axis = s.mode == kBicubic ? 4 : (s.mode == kNearest ? 1 : 2);
  return s.dims == 3 ? per_axis * per_axis * per_axis : per_axis * per_axis;
}

size_t sort_temp_bytes(int64_t entries, int end_bit) {
  size_t bytes = 0;
  detail::check_cuda(cub::DeviceRadixSort::SortPairs(
                         nullptr, bytes, static_cast<const uint64_t*>(nullptr),
                         static_cast<uint64_t*>(nullptr), static_cast<const uint64_t*>(nullptr),
                         static_cast<uint64_t*>(nullptr), entries, 0, end_bit),
                     "cub::DeviceRadixSort::SortPairs (size query)");
  return bytes;
}

__global__ void __launch_bounds__(kThreads)
    segments_kernel(const uint64_t* __restrict__ keys, int64_t entries, uint64_t sentinel,
                    int64_t* __restrict__ begin, int64_t* __restrict__ end) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kThreads;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; i < entries;
       i += stride) {
    const uint64_t k = keys[i];
    if (k == sentinel) continue;
    if (i == 0 || keys[i - 1] != k) begin[k] = i;
    if (i == entries - 1 || keys[i + 1] != k) end[k] = i + 1;
  }
}

}  // namespace

DeterministicLayout deterministic_layout(const SampleShape& s) {
  DeterministicLayout l;
  l.entries = s.locations() * taps_per_location_of(s);
  l.cells = s.n * s.in_spatial();
  while (l.end_bit < 64 && (static_cast<uint64_t>(l.cells) >> l.end_bit) != 0) ++l.end_bit;
  int64_t at = 0;
  auto take = [&](int64_t bytes) {
    const int64_t start = at;
    at += (bytes + 255) / 256 * 256;
    return start;
  };
  l.keys_in = take(l.entries * 8);
  l.keys_out = take(l.entries * 8);
  l.ids_in = take(l.entries * 8);
  l.ids_out = take(l.entries * 8);
  l.weights = take(l.entries * 4);
  l.begin = take(l.cells * 8);
  l.end = take(l.cells * 8);
  l.sort_temp_bytes = l.entries > 0 ? sort_temp_bytes(l.entries, l.end_bit) : 0;
  l.sort_temp = take(static_cast<int64_t>(l.sort_temp_bytes));
  l.bytes = at;
  return l;
}

int64_t deterministic_scratch_bytes(const SampleShape& s) { return deterministic_layout(s).bytes; }

void sort_contributions(const DeterministicLayout& l, char* scratch, cudaStream_t stream) {
  size_t temp_bytes = l.sort_temp_bytes;
  detail::check_cuda(
      cub::DeviceRadixSort::SortPairs(
          scratch + l.sort_temp, temp_bytes, reinterpret_cast<const uint64_t*>(scratch + l.keys_in),
          reinterpret_cast<uint64_t*>(scratch + l.keys_out),
          reinterpret_cast<const uint64_t*>(scratch + l.ids_in),
          reinterpret_cast<uint64_t*>(scratch + l.ids_out), l.entries, 0, l.end_bit, stream),
      "cub::DeviceRadixSort::SortPairs");
}

void mark_segments(const DeterministicLayout& l, char* scratch, cudaStream_t stream) {
  detail::check_cuda(cudaMemsetAsync(scratch + l.begin, 0, l.cells * 8, stream), "cudaMemsetAsync");
  detail::check_cuda(cudaMemsetAsync(scratch + l.end, 0, l.cells * 8, stream), "cudaMemsetAsync");
  if (l.entries == 0) return;
  const int64_t blocks = std::min<int64_t>(blocks_for(l.entries), 1 << 16);
  segments_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(
      reinterpret_cast<const uint64_t*>(scratch + l.keys_out), l.entries,
      static_cast<uint64_t>(l.cells), reinterpret_cast<int64_t*>(scratch + l.begin),
      reinterpret_cast<int64_t*>(scratch + l.end));
  detail::check_launch("grid_sample backward (deterministic: segments)");
}

}  // namespace rudnn::grid_sample_detail::cuda
