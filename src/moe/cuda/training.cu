// The training pieces: combine's backward, the weights of a fixed selection and their
// logits gradient, and the storage-rounded SwiGLU with its input gradients. Every sum is in
// a fixed order (no atomics).
#include <algorithm>
#include <cstdint>

#include "core/cuda_check.h"
#include "cuda/launch.cuh"
#include "moe/cuda/launch.h"
#include "moe/cuda/routing.cuh"
#include "moe/cuda/weights.cuh"

namespace rudnn::moe::cuda {

using ::rudnn::cuda::from_float;
using ::rudnn::cuda::kNaN;
using ::rudnn::cuda::LaunchContext;
using ::rudnn::cuda::round_to;
using ::rudnn::cuda::to_float;
using ::rudnn::cuda::with_float_type;

namespace {

constexpr int kThreads = 256;

// One block per token: dexpert rows of each slot, and each slot's dot product either folded
// over the block (Plane) or summed in h order by one thread (Serial).
template <class T>
__global__ void __launch_bounds__(kThreads) combine_backward_kernel(CombineBackward p) {
  __shared__ float partial[kThreads];
  const int64_t t = blockIdx.x, k = p.top_k, hidden = p.hidden;
  const T* grad = static_cast<const T*>(p.grad_out) + t * hidden;
  const T* expert_out = static_cast<const T*>(p.expert_out);
  T* dexpert = static_cast<T*>(p.dexpert);
  for (int64_t j = 0; j < k; ++j) {
    const float w = load_weight(p.weight_dtype, p.weights, t * k + j);
    const int64_t row = p.row_of_slot[t * k + j];
    float dot = 0.0f;
    for (int64_t h = threadIdx.x; h < hidden; h += kThreads) {
      const float g = to_float(grad[h]);
      dexpert[row * hidden + h] = from_float<T>(w * g);
      if (p.plane) dot += g * to_float(expert_out[row * hidden + h]);
    }
    if (p.plane) {
      partial[threadIdx.x] = dot;
      __syncthreads();
      for (int half = kThreads / 2; half > 0; half /= 2) {
        if (threadIdx.x < half) partial[threadIdx.x] += partial[threadIdx.x + half];
        __syncthreads();
      }
      if (threadIdx.x == 0) p.dweights[t * k + j] = partial[0];
      __syncthreads();
    }
  }
  if (!p.plane) {
    for (int64_t j = threadIdx.x; j < k; j += kThreads) {
      const int64_t row = p.row_of_slot[t * k + j];
      float dot = 0.0f;
      for (int64_t h = 0; h < hidden; ++h)
        dot += to_float(grad[h]) * to_float(expert_out[row * hidden + h]);
      p.dweights[t * k + j] = dot;
    }
  }
}

constexpr int kWarps = 4, kMaxTopK = 64;

__device__ __forceinline__ int64_t load_index(DType dtype, const void* data, int64_t i) {
  switch (dtype) {
    case DType::u32:
      return static_cast<const uint32_t*>(data)[i];
    case DType::i32:
      return static_cast<const int32_t*>(data)[i];
    default:
      return static_cast<const int64_t*>(data)[i];
  }
}

// One warp per token row: the weights (p.grad_weights null) or the logits gradient.
template <class T>
__global__ void __launch_bounds__(kWarps * 32) selected_router_kernel(SelectedRouter p) {
  __shared__ int32_t ids_all[kWarps][kMaxTopK];
  __shared__ float slot_grad_all[kWarps][kMaxTopK];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int64_t t = static_cast<int64_t>(blockIdx.x) * kWarps + warp;
  if (t >= p.tokens) return;
  int32_t* ids = ids_all[warp];
  float* slot_grad = slot_grad_all[warp];
  const int64_t experts = p.experts;
  const int k = static_cast<int>(p.top_k);
  const T* x = static_cast<const T*>(p.logits) + t * experts;

  bool valid = true;
  for (int j = lane; j < k; j += 32) {
    const int64_t id = load_index(p.index_dtype, p.indices, t * k + j);
    const bool in_range = id >= 0 && id < experts;
    valid &= in_range;
    ids[j] = in_range ? static_cast<int32_t>(id) : 0;  // never read out of bounds
  }
  valid = __all_sync(kFullMask, valid);
  __syncwarp();

  float max = -__builtin_huge_valf(), sum = 0.0f;
  bool has_nan = false;
  if (!p.sigmoid) {
    for (int64_t e = lane; e < experts; e += 32) {
      const float v = to_float(x[e]);
      has_nan |= v != v;
      max = fmaxf(max, v);
    }
    max = warp_max(max);
    has_nan = __any_sync(kFullMask, has_nan);
    for (int64_t e = lane; e < experts; e += 32) sum += expf(to_float(x[e]) - max);
    sum = warp_sum(sum);  // +inf or only -inf make it NaN
  }
  const auto prob = [&](int64_t e) { return has_nan ? kNaN : expf(to_float(x[e]) - max) / sum; };
  const auto score = [&](int j) {
    return !valid ? kNaN : p.sigmoid ? sigmoid(to_float(x[ids[j]])) : prob(ids[j]);
  };

  float q_sum = 0.0f, gq = 0.0f;
  for (int j = lane; j < k; j += 32) {
    const float q = score(j);
    q_sum += q;
    if (p.grad_weights) gq += p.grad_weights[t * k + j] * q;
  }
  q_sum = warp_sum(q_sum);
  const float norm = p.renormalize ? q_sum : 1.0f;
  if (!p.grad_weights) {
    for (int j = lane; j < k; j += 32) p.weights[t * k + j] = p.scale * score(j) / norm;
    return;
  }
  gq = warp_sum(gq);
  float c = 0.0f;
  for (int j = lane; j < k; j += 32) {
    const float q = score(j), g = p.grad_weights[t * k + j];
    const float a = p.renormalize ? p.scale * (g / norm - gq / (norm * norm)) : p.scale * g;
    slot_grad[j] = p.sigmoid ? a * q * (1.0f - q) : a * q;
    c += a * q;
  }
  c = warp_sum(c);
  __syncwarp();
  T* dlogits = static_cast<T*>(p.dlogits) + t * experts;
  for (int64_t e = lane; e < experts; e += 32) {
    float d = 0.0f;
    for (int j = 0; j < k; ++j)
      if (ids[j] == e) d += slot_grad[j];  // repeated indices: each slot adds its share
    const float v = !valid ? kNaN : p.sigmoid ? d : d - prob(e) * c;
    dlogits[e] = from_float<T>(v);
  }
}

template <class T>
__global__ void __launch_bounds__(kThreads) native_swiglu_kernel(NativeSwiGlu p) {
  const T* gate = static_cast<const T*>(p.gate);
  const T* up = static_cast<const T*>(p.up);
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kThreads;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; i < p.count;
       i += stride) {
    const float g = to_float(gate[i]), u = to_float(up[i]);
    const float s = sigmoid(g);
    const float silu_stored = round_to<T>(g * s);
    if (p.out) {
      static_cast<T*>(p.out)[i] = from_float<T>(silu_stored * u);
      continue;
    }
    const float d = to_float(static_cast<const T*>(p.grad)[i]);
    if (p.dup) static_cast<T*>(p.dup)[i] = from_float<T>(d * silu_stored);
    if (p.dgate) static_cast<T*>(p.dgate)[i] = from_float<T>(d * u * s * (1.0f + g * (1.0f - s)));
  }
}

template <class T>
__global__ void __launch_bounds__(kThreads) round_kernel(const float* in, T* out, int64_t count) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kThreads;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; i < count;
       i += stride)
    out[i] = from_float<T>(in[i]);
}

unsigned elementwise_blocks(int64_t count) {
  return static_cast<unsigned>(std::min<int64_t>((count + kThreads - 1) / kThreads, 1 << 20));
}

}  // namespace

void swiglu_backward_rows(const ExpertsBackward& p, const BackwardScratch& s,
                          const Stream& stream) {
  NativeSwiGlu q;
  q.count = p.rows * p.inter;
  q.dtype = p.dtype;
  q.gate = p.gate_pre;
  q.up = p.up_pre;
  q.grad = s.dact;
  q.dgate = s.dgate_pre;
  q.dup = s.dup_pre;
  native_swiglu(q, stream);
}

void convert_rows(const ExpertsBackward& p, const BackwardScratch& s, const Stream& stream) {
  const LaunchContext ctx(stream);
  const int64_t count = p.rows * p.hidden;
  with_float_type(p.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    round_kernel<T><<<elementwise_blocks(count), kThreads, 0, ctx.stream>>>(
        s.dx_f32, static_cast<T*>(p.dx), count);
  });
  detail::check_launch("ExpertTrainingCache::backward");
}

void combine_backward(const CombineBackward& p, const Stream& stream) {
  if (p.tokens == 0) return;
  const LaunchContext ctx(stream);
  with_float_type(p.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    combine_backward_kernel<T><<<static_cast<unsigned>(p.tokens), kThreads, 0, ctx.stream>>>(p);
  });
  detail::check_launch("combine_backward");
}

void selected_router(const SelectedRouter& p, const Stream& stream) {
  if (p.tokens == 0) return;
  const LaunchContext ctx(stream);
  const unsigned blocks = static_cast<unsigned>((p.tokens + kWarps - 1) / kWarps);
  with_float_type(p.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    selected_router_kernel<T><<<blocks, kWarps * 32, 0, ctx.stream>>>(p);
  });
  detail::check_launch(p.grad_weights ? "selected_router_backward" : "selected_router_weights");
}

void native_swiglu(const NativeSwiGlu& p, const Stream& stream) {
  if (p.count == 0) return;
  const LaunchContext ctx(stream);
  const unsigned blocks =
      static_cast<unsigned>(std::min<int64_t>((p.count + kThreads - 1) / kThreads, 1 << 20));
  with_float_type(p.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    native_swiglu_kernel<T><<<blocks, kThreads, 0, ctx.stream>>>(p);
  });
  detail::check_launch(p.out ? "native_swiglu" : "native_swiglu_backward");
}

}  // namespace rudnn::moe::cuda
