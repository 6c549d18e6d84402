// Causal depthwise conv1d over x [B, L, C] (channels-last): consecutive threads on consecutive
// channels, so every load of a time step is coalesced.
//
// Forward: each thread walks kSteps consecutive time steps of one channel with the window in
// registers (W <= 8: one new load per step; wider windows load their taps per step). The
// carried state is updated by a second launch, after every read of the old state (it is
// updated in place). Varlen: a position's sequence is found by binary search in cu_seqlens,
// on the device (the host never reads it).
//
// Backward: dx (and the initial state's gradient) is a gather of dpre over the window; the
// weight and bias gradients are per-channel FP32 sums: a block holds 32 channels x 8 lanes
// of time, each lane a strided share of the positions, folded in a fixed order through
// shared memory: deterministic, no atomics.
#include <cuda_runtime.h>

#include "conv/cuda/common.cuh"
#include "conv/cuda/launch.h"
#include "core/cuda_check.h"
#include "cuda/launch.cuh"
#include "cuda/types.cuh"

namespace rudnn::conv_detail::cuda {

using rudnn::cuda::from_float;
using rudnn::cuda::to_float;

namespace {

constexpr int kSteps = 8;    // time steps per forward thread
constexpr int kMaxWindow = 8;  // widest window held in registers

struct Seq {
  int64_t b, start, end, q;
};

// The sequence holding position t of batch row b.
__device__ __forceinline__ Seq sequence_of(const CausalShape& s, const int32_t* cu, int64_t b,
                                           int64_t t) {
  if (cu == nullptr) return {b, 0, s.length, b};
  // The last q with cu[q] <= t (empty sequences before t are skipped).
  int64_t lo = 0, hi = s.seqs;  // invariant: cu[lo] <= t < cu[hi]
  while (hi - lo > 1) {
    const int64_t mid = (lo + hi) / 2;
    if (cu[mid] <= t) {
      lo = mid;
    } else {
      hi = mid;
    }
  }
  return {0, cu[lo], cu[lo + 1], lo};
}

// Position t >= start - (W-1) of the extended sequence: x, or the carried state left of start.
template <class T>
__device__ __forceinline__ float extended(const CausalShape& s, const T* x, const T* state,
                                          const Seq& q, int64_t c, int64_t t) {
  if (t >= q.start) return to_float(x[(q.b * s.length + t) * s.channels + c]);
  if (state == nullptr) return 0.0f;
  return to_float(state[(q.q * s.channels + c) * (s.width - 1) + (s.width - 1) + t - q.start]);
}

__device__ __forceinline__ float silu(float v) { return v / (1.0f + expf(-v)); }

template <class T>
__device__ __forceinline__ float pre_activation(const CausalShape& s, const T* x, const T* weight,
                                                const T* bias, const T* state, const Seq& q,
                                                int64_t c, int64_t t) {
  float acc = bias != nullptr ? to_float(bias[c]) : 0.0f;
  for (int64_t w = 0; w < s.width; ++w) {
    acc += to_float(weight[c * s.width + w]) * extended(s, x, state, q, c, t - (s.width - 1) + w);
  }
  return acc;
}

// kW: the window width held in registers (1..8), or 0 for any width (taps loaded per step).
template <class T, int kW>
__global__ void __launch_bounds__(kThreads)
    forward_kernel(CausalForward p, const T* __restrict__ x, const T* __restrict__ weight,
                   const T* __restrict__ bias, const T* state, T* __restrict__ out) {
  const CausalShape& s = p.s;
  const int64_t chunks = (s.length + kSteps - 1) / kSteps;
  const int64_t total = s.batch * chunks * s.channels;
  for (int64_t flat = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; flat < total;
       flat += int64_t{gridDim.x} * blockDim.x) {
    const int64_t c = flat % s.channels, chunk = flat / s.channels % chunks;
    const int64_t b = flat / s.channels / chunks;
    const int64_t t0 = chunk * kSteps, t1 = min(t0 + kSteps, s.length);
    const float b_c = bias != nullptr ? to_float(bias[c]) : 0.0f;
    if constexpr (kW == 0) {
      for (int64_t t = t0; t < t1; ++t) {
        const Seq q = sequence_of(s, p.cu_seqlens, b, t);
        const float pre = pre_activation(s, x, weight, bias, state, q, c, t);
        out[(b * s.length + t) * s.channels + c] = from_float<T>(s.silu ? silu(pre) : pre);
      }
    } else {
      float w[kW], win[kW];
#pragma unroll
      for (int i = 0; i < kW; ++i) w[i] = to_float(weight[c * kW + i]);
      Seq q = sequence_of(s, p.cu_seqlens, b, t0);
      // win[kW-1] is position t; win[i] position t - (kW-1) + i. Filled for t0 (or for the
      // start of the next sequence when one begins inside the chunk).
      int64_t filled_for = t0 - 2;
      for (int64_t t = t0; t < t1; ++t) {
        if (t >= q.end) q = sequence_of(s, p.cu_seqlens, b, t);
        if (filled_for != t - 1 || t == q.start) {
#pragma unroll
          for (int i = 0; i < kW - 1; ++i) win[i] = extended(s, x, state, q, c, t - (kW - 1) + i);
        } else {
#pragma unroll
          for (int i = 0; i < kW - 1; ++i) win[i] = win[i + 1];
        }
        win[kW - 1] = to_float(x[(b * s.length + t) * s.channels + c]);
        filled_for = t;
        float acc = b_c;
#pragma unroll
        for (int i = 0; i < kW; ++i) acc += w[i] * win[i];
        out[(b * s.length + t) * s.channels + c] = from_float<T>(s.silu ? silu(acc) : acc);
      }
    }
  }
}

// One thread per (sequence, channel): the state becomes the last W-1 extended positions.
// Position end-(W-1)+j of the old extended sequence reads state index j + len >= j, so an
// ascending j reads every old entry before it is overwritten.
template <class T>
__global__ void __launch_bounds__(kThreads)
    state_kernel(CausalShape s, const int32_t* __restrict__ cu, const T* __restrict__ x, T* state) {
  const int64_t total = s.seqs * s.channels;
  for (int64_t flat = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; flat < total;
       flat += int64_t{gridDim.x} * blockDim.x) {
    const int64_t c = flat % s.channels, qi = flat / s.channels;
    const Seq q = cu == nullptr ? Seq{qi, 0, s.length, qi} : Seq{0, cu[qi], cu[qi + 1], qi};
    for (int64_t j = 0; j < s.width - 1; ++j) {
      const float v = extended(s, x, static_cast<const T*>(state), q, c, q.end - (s.width - 1) + j);
      state[(qi * s.channels + c) * (s.width - 1) + j] = from_float<T>(v);
    }
  }
}

template <class T>
__device__ __forceinline__ float dpre_at(const CausalBackward& p, const T* dout, const T* x,
                                         const T* weight, const T* bias, const T* state,
                                         const Seq& q, int64_t c, int64_t t) {
  const CausalShape& s = p.s;
  float d = to_float(dout[(q.b * s.length + t) * s.channels + c]);
  if (s.silu) {
    const float pre = pre_activation(s, x, weight, bias, state, q, c, t);
    const float sig = 1.0f / (1.0f + expf(-pre));
    d *= sig * (1.0f + pre * (1.0f - sig));
  }
  return d;
}

// The gradient of extended position pos: sum over the outputs whose window covers it.
template <class T>
__device__ __forceinline__ float dextended(const CausalBackward& p, const T* dout, const T* x,
                                           const T* weight, const T* bias, const T* state,
                                           const Seq& q, int64_t c, int64_t pos) {
  const CausalShape& s = p.s;
  float acc = 0.0f;
  for (int64_t w = 0; w < s.width; ++w) {
    const int64_t u = pos + (s.width - 1) - w;
    if (u < q.start || u >= q.end) continue;
    acc += dpre_at(p, dout, x, weight, bias, state, q, c, u) * to_float(weight[c * s.width + w]);
  }
  return acc;
}

template <class T>
__global__ void __launch_bounds__(kThreads)
    dx_kernel(CausalBackward p, const T* __restrict__ dout, const T* __restrict__ x,
              const T* __restrict__ weight, const T* __restrict__ bias,
              const T* __restrict__ state, T* __restrict__ dx) {
  const CausalShape& s = p.s;
  const int64_t total = s.batch * s.length * s.channels;
  for (int64_t flat = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; flat < total;
       flat += int64_t{gridDim.x} * blockDim.x) {
    const int64_t c = flat % s.channels, bt = flat / s.channels;
    const int64_t b = bt / s.length, t = bt % s.length;
    const Seq q = sequence_of(s, p.cu_seqlens, b, t);
    dx[flat] = from_float<T>(dextended(p, dout, x, weight, bias, state, q, c, t));
  }
}

template <class T>
__global__ void __launch_bounds__(kThreads)
    dstate_kernel(CausalBackward p, const T* __restrict__ dout, const T* __restrict__ x,
                  const T* __restrict__ weight, const T* __restrict__ bias,
                  const T* __restrict__ state, T* __restrict__ dstate) {
  const CausalShape& s = p.s;
  const int64_t total = s.seqs * s.channels * (s.width - 1);
  for (int64_t flat = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; flat < total;
       flat += int64_t{gridDim.x} * blockDim.x) {
    const int64_t j = flat % (s.width - 1), c = flat / (s.width - 1) % s.channels;
    const int64_t qi = flat / (s.width - 1) / s.channels;
    const Seq q = p.cu_seqlens == nullptr ? Seq{qi, 0, s.length, qi}
                                          : Seq{0, p.cu_seqlens[qi], p.cu_seqlens[qi + 1], qi};
    dstate[flat] =
        from_float<T>(dextended(p, dout, x, weight, bias, state, q, c, q.start - (s.width - 1) + j));
  }
}

constexpr int kParamChannels = 32, kParamLanes = kThreads / kParamChannels;

// Block (channel tile, tap tile of kMaxWindow taps): sums over every (b, t) position of dpre
// times the tap's input (and dpre alone for the bias, in tap tile 0).
template <class T>
__global__ void __launch_bounds__(kThreads)
    param_kernel(CausalBackward p, const T* __restrict__ dout, const T* __restrict__ x,
                 const T* __restrict__ weight, const T* __restrict__ bias,
                 const T* __restrict__ state, T* __restrict__ dweight, T* __restrict__ dbias) {
  const CausalShape& s = p.s;
  __shared__ float partial[kParamLanes][kMaxWindow + 1][kParamChannels];
  const int lane_c = threadIdx.x % kParamChannels, lane_t = threadIdx.x / kParamChannels;
  const int64_t c = blockIdx.x * int64_t{kParamChannels} + lane_c;
  const int64_t w0 = blockIdx.y * int64_t{kMaxWindow};
  const int taps = static_cast<int>(min(int64_t{kMaxWindow}, s.width - w0));
  float acc[kMaxWindow + 1] = {};
  if (c < s.channels) {
    const int64_t positions = s.batch * s.length;
    for (int64_t r = lane_t; r < positions; r += kParamLanes) {
      const int64_t b = r / s.length, t = r % s.length;
      const Seq q = sequence_of(s, p.cu_seqlens, b, t);
      const float d = dpre_at(p, dout, x, weight, bias, state, q, c, t);
      acc[kMaxWindow] += d;
#pragma unroll
      for (int i = 0; i < kMaxWindow; ++i) {
        if (i < taps) acc[i] += d * extended(s, x, state, q, c, t - (s.width - 1) + w0 + i);
      }
    }
  }
#pragma unroll
  for (int i = 0; i <= kMaxWindow; ++i) partial[lane_t][i][lane_c] = acc[i];
  __syncthreads();
  if (lane_t != 0 || c >= s.channels) return;
  for (int i = 0; i <= kMaxWindow; ++i) {
    float sum = 0.0f;
    for (int l = 0; l < kParamLanes; ++l) sum += partial[l][i][lane_c];
    if (i < taps) dweight[c * s.width + w0 + i] = from_float<T>(sum);
    if (i == kMaxWindow && dbias != nullptr && blockIdx.y == 0) dbias[c] = from_float<T>(sum);
  }
}

}  // namespace

void causal_forward(const CausalForward& p, const Stream& stream) {
  const rudnn::cuda::LaunchContext ctx(stream);
  const CausalShape& s = p.s;
  rudnn::cuda::with_float_type(s.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const int64_t total = s.batch * ((s.length + kSteps - 1) / kSteps) * s.channels;
    auto launch = [&](auto kernel) {
      kernel<<<blocks_for(total), kThreads, 0, ctx.stream>>>(
          p, static_cast<const T*>(p.x), static_cast<const T*>(p.weight),
          static_cast<const T*>(p.bias), static_cast<const T*>(p.state), static_cast<T*>(p.out));
    };
    switch (s.width) {
      case 1: launch(forward_kernel<T, 1>); break;
      case 2: launch(forward_kernel<T, 2>); break;
      case 3: launch(forward_kernel<T, 3>); break;
      case 4: launch(forward_kernel<T, 4>); break;
      case 5: launch(forward_kernel<T, 5>); break;
      case 6: launch(forward_kernel<T, 6>); break;
      case 7: launch(forward_kernel<T, 7>); break;
      case 8: launch(forward_kernel<T, 8>); break;
      default: launch(forward_kernel<T, 0>); break;
    }
    detail::check_launch("causal_conv1d forward");
    if (p.state != nullptr && s.width > 1 && s.seqs > 0) {
      state_kernel<T><<<blocks_for(s.seqs * s.channels), kThreads, 0, ctx.stream>>>(
          s, p.cu_seqlens, static_cast<const T*>(p.x), static_cast<T*>(p.state));
      detail::check_launch("causal_conv1d state update");
    }
  });
}

void causal_backward(const CausalBackward& p, const Stream& stream) {
  const rudnn::cuda::LaunchContext ctx(stream);
  const CausalShape& s = p.s;
  rudnn::cuda::with_float_type(s.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* dout = static_cast<const T*>(p.dout);
    const T* x = static_cast<const T*>(p.x);
    const T* weight = static_cast<const T*>(p.weight);
    const T* bias = static_cast<const T*>(p.bias);
    const T* state = static_cast<const T*>(p.initial_state);
    const int64_t elements = s.batch * s.length * s.channels;
    if (elements > 0) {
      dx_kernel<T><<<blocks_for(elements), kThreads, 0, ctx.stream>>>(p, dout, x, weight, bias,
                                                                      state, static_cast<T*>(p.dx));
      detail::check_launch("causal_conv1d_backward dx");
    }
    const int64_t state_elements = s.seqs * s.channels * (s.width - 1);
    if (p.dinitial_state != nullptr && state_elements > 0) {
      dstate_kernel<T><<<blocks_for(state_elements), kThreads, 0, ctx.stream>>>(
          p, dout, x, weight, bias, state, static_cast<T*>(p.dinitial_state));
      detail::check_launch("causal_conv1d_backward dinitial_state");
    }
    const dim3 grid(static_cast<unsigned>((s.channels + kParamChannels - 1) / kParamChannels),
                    static_cast<unsigned>((s.width + kMaxWindow - 1) / kMaxWindow));
    param_kernel<T><<<grid, kThreads, 0, ctx.stream>>>(p, dout, x, weight, bias, state,
                                                      static_cast<T*>(p.dweight),
                                                      static_cast<T*>(p.dbias));
    detail::check_launch("causal_conv1d_backward dweight");
  });
}

}  // namespace rudnn::conv_detail::cuda
