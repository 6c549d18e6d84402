// Routing: one warp per token row. Top-k is k passes of a warp max over order keys, each
// pass taking the best key ranked below the previous pick (order_key.h), so nothing marks
// the experts already taken and any E and k work. The logits of a row stay in L1/L2 between
// passes; a row of E <= 1024 experts is at most 4 KiB.
#include "core/cuda_check.h"
#include "cuda/launch.cuh"
#include "moe/cuda/dependent_launch.cuh"
#include "moe/cuda/launch.h"
#include "moe/cuda/routing.cuh"

namespace rudnn::moe::cuda {

using ::rudnn::cuda::from_float;
using ::rudnn::cuda::kNaN;
using ::rudnn::cuda::LaunchContext;
using ::rudnn::cuda::to_float;
using ::rudnn::cuda::with_float_type;

namespace {

constexpr int kWarps = 4;

template <class T>
__global__ void __launch_bounds__(kWarps * 32) route_softmax_kernel(RouteSoftmax p) {
  // The decode kernels after routing start early and wait for this grid (decode.cu).
  allow_dependents();
  const int lane = threadIdx.x % 32;
  const int64_t t = static_cast<int64_t>(blockIdx.x) * kWarps + threadIdx.x / 32;
  if (t >= p.tokens) return;
  const int64_t experts = p.experts, k = p.top_k;
  const T* x = static_cast<const T*>(p.logits) + t * experts;
  float max = -__builtin_huge_valf();
  bool undefined = false;
  for (int64_t e = lane; e < experts; e += 32) {
    const float v = to_float(x[e]);
    undefined |= v != v || v == __builtin_huge_valf();
    max = fmaxf(max, v);
  }
  max = warp_max(max);
  undefined = __any_sync(kFullMask, undefined) || max == -__builtin_huge_valf();
  float sum = 0.0f;
  if (!undefined)
    for (int64_t e = lane; e < experts; e += 32) sum += expf(to_float(x[e]) - max);
  sum = warp_sum(sum);

  uint32_t* indices = p.indices + t * k;
  T* weights = static_cast<T*>(p.weights) + t * k;
  uint64_t prev = ~uint64_t{0};
  float selected_sum = 0.0f;
  for (int64_t j = 0; j < k; ++j) {
    uint64_t best = kNoKey;
    for (int64_t e = lane; e < experts; e += 32) {
      const uint64_t key = order_key(to_float(x[e]), static_cast<uint32_t>(e));
      if (key < prev && key > best) best = key;
    }
    prev = warp_max_key(best);
    const uint32_t id = key_id(prev);
    const float prob = undefined ? kNaN : expf(to_float(x[id]) - max) / sum;
    selected_sum += prob;
    if (lane == 0) {
      indices[j] = id;
      if (!p.renormalize) weights[j] = from_float<T>(prob);
    }
  }
  if (p.renormalize) {
    __syncwarp();  // lane 0's indices, visible to the warp
    for (int64_t j = lane; j < k; j += 32) {
      const float prob = undefined ? kNaN : expf(to_float(x[indices[j]]) - max) / sum;
      weights[j] = from_float<T>(prob / selected_sum);
    }
  }
}

constexpr int kMaxExperts = 1024, kMaxGroups = 128;

template <class T>
__global__ void __launch_bounds__(kWarps * 32) route_sigmoid_grouped_kernel(RouteSigmoidGrouped p) {
  allow_dependents();  // as in route_softmax_kernel
  __shared__ float corrected_all[kWarps][kMaxExperts];
  __shared__ float group_score_all[kWarps][kMaxGroups];
  __shared__ bool group_selected_all[kWarps][kMaxGroups];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int64_t t = static_cast<int64_t>(blockIdx.x) * kWarps + warp;
  if (t >= p.tokens) return;
  float* corrected = corrected_all[warp];
  float* group_score = group_score_all[warp];
  bool* group_selected = group_selected_all[warp];
  const int experts = static_cast<int>(p.experts), groups = static_cast<int>(p.groups);
  const int per_group = experts / groups, k = static_cast<int>(p.top_k);
  const T* x = static_cast<const T*>(p.logits) + t * p.experts;

  for (int e = lane; e < experts; e += 32)
    corrected[e] = sigmoid(to_float(x[e])) + (p.bias ? p.bias[e] : 0.0f);
  __syncwarp();
  for (int g = lane; g < groups; g += 32) {
    uint64_t first = kNoKey, second = kNoKey;
    for (int i = 0; i < per_group; ++i) {
      const int e = g * per_group + i;
      const uint64_t key = order_key(corrected[e], static_cast<uint32_t>(e));
      if (key > first) {
        second = first;
        first = key;
      } else if (key > second) {
        second = key;
      }
    }
    float score = corrected[key_id(first)];
    if (p.group_top_two) score += corrected[key_id(second)];
    group_score[g] = score;
    group_selected[g] = false;
  }
  __syncwarp();
  uint64_t prev = ~uint64_t{0};
  for (int j = 0; j < p.selected_groups; ++j) {
    uint64_t best = kNoKey;
    for (int g = lane; g < groups; g += 32) {
      const uint64_t key = order_key(group_score[g], static_cast<uint32_t>(g));
      if (key < prev && key > best) best = key;
    }
    prev = warp_max_key(best);
    if (lane == 0) group_selected[key_id(prev)] = true;
  }
  __syncwarp();

  uint32_t* indices = p.indices + t * k;
  T* weights = static_cast<T*>(p.weights) + t * k;
  prev = ~uint64_t{0};
  float selected_sum = 0.0f;
  for (int j = 0; j < k; ++j) {
    uint64_t best = kNoKey;
    for (int e = lane; e < experts; e += 32) {
      if (!group_selected[e / per_group]) continue;
      const uint64_t key = order_key(corrected[e], static_cast<uint32_t>(e));
      if (key < prev && key > best) best = key;
    }
    prev = warp_max_key(best);
    const uint32_t id = key_id(prev);
    const float score = sigmoid(to_float(x[id]));  // the weight: the score before the bias
    selected_sum += score;
    if (lane == 0) {
      indices[j] = id;
      if (!p.renormalize) weights[j] = from_float<T>(score * p.scale);
    }
  }
  if (p.renormalize) {
    __syncwarp();
    for (int j = lane; j < k; j += 32)
      weights[j] = from_float<T>(sigmoid(to_float(x[indices[j]])) / selected_sum * p.scale);
  }
}

unsigned row_blocks(int64_t tokens) {
  return static_cast<unsigned>((tokens + kWarps - 1) / kWarps);
}

}  // namespace

void route_softmax(const RouteSoftmax& p, const Stream& stream) {
  if (p.tokens == 0) return;
  const LaunchContext ctx(stream);
  with_float_type(p.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    route_softmax_kernel<T><<<row_blocks(p.tokens), kWarps * 32, 0, ctx.stream>>>(p);
  });
  detail::check_launch("route");
}

void route_sigmoid_grouped(const RouteSigmoidGrouped& p, const Stream& stream) {
  if (p.tokens == 0) return;
  const LaunchContext ctx(stream);
  with_float_type(p.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    route_sigmoid_grouped_kernel<T><<<row_blocks(p.tokens), kWarps * 32, 0, ctx.stream>>>(p);
  });
  detail::check_launch("route_sigmoid_grouped");
}

}  // namespace rudnn::moe::cuda
