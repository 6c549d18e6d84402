// The fixed-order sums of the CUDA-core backward: dsinks over the rows of each head, dbias
// over each bias element's broadcast axes.
#include "attention/cuda/scalar_backward.cuh"
#include "core/cuda_check.h"

namespace rudnn::attn::cuda {

namespace {

// dsinks[h]: the row terms of head h summed sequence by sequence, row by row (each thread a
// fixed subset, then a fixed-order block reduction).
__global__ void __launch_bounds__(256) sink_sum_kernel(const SinkSumArgs a) {
  __shared__ float scratch[32];
  const int h = blockIdx.x;
  const AttentionSizes& sz = a.sizes;
  float sum = 0.0f;
  for (int64_t b = 0; b < sz.batch; ++b) {
    const SeqRows seq = sequence_rows(sz, b);
    for (int i = threadIdx.x; i < seq.len_q; i += 256)
      sum += a.sink_terms[stat_index(a.stats, b, h, seq.q_begin + i)];
  }
  sum = rudnn::cuda::group_reduce<256>(sum, rudnn::cuda::SumOp{}, scratch);
  if (threadIdx.x == 0) store_from_float(a.dsinks, a.dtype, h, sum);
}

// One bias element: the FP32 dS over its broadcast axes, b, h, i, j ascending.
__global__ void __launch_bounds__(256) bias_sum_kernel(const BiasSumArgs a) {
  const int64_t e = static_cast<int64_t>(blockIdx.x) * 256 + threadIdx.x;
  if (e >= a.numel) return;
  int64_t first[4], count[4];
#pragma unroll
  for (int x = 0; x < 4; ++x) {
    if (a.strides[x] > 0) {
      first[x] = (e / a.strides[x]) % a.target[x];
      count[x] = 1;
    } else {
      first[x] = 0;
      count[x] = a.target[x];
    }
  }
  float sum = 0.0f;
  for (int64_t b = first[0]; b < first[0] + count[0]; ++b)
    for (int64_t h = first[1]; h < first[1] + count[1]; ++h)
      for (int64_t i = first[2]; i < first[2] + count[2]; ++i) {
        const float* row = a.dscores + ((b * a.target[1] + h) * a.target[2] + i) * a.target[3];
        for (int64_t j = first[3]; j < first[3] + count[3]; ++j) sum += row[j];
      }
  store_from_float(a.dbias, a.dtype, e, sum);
}

}  // namespace

void sum_sink_terms(const SinkSumArgs& a, cudaStream_t stream) {
  sink_sum_kernel<<<static_cast<unsigned>(a.sizes.heads_q), 256, 0, stream>>>(a);
  detail::check_launch("attention sink_sum_kernel");
}

void sum_bias_gradient(const BiasSumArgs& a, cudaStream_t stream) {
  bias_sum_kernel<<<static_cast<unsigned>((a.numel + 255) / 256), 256, 0, stream>>>(a);
  detail::check_launch("attention bias_sum_kernel");
}

}  // namespace rudnn::attn::cuda
