// Causal depthwise conv1d over x [B, L, C] (channels-last).
//
// Packed kernels (W <= 8, C a multiple of the pack, aligned operands): a thread owns one pack
// of channels (forward 16 bytes up to W = 4, 8 bytes beyond; backward 4 and 2 bytes, as it
// holds four times the state) and a run of consecutive positions of one batch row
// (kForwardRun, kRun; the forward at W = 4 takes the launch choice of conv/cuda/dw_tuning.h,
// by default 8-byte packs and runs of 32); consecutive threads take consecutive packs, so a
// warp's loads of a position are 64-512 contiguous bytes. The forward slides a window of W packs in registers
// along the run: one load of x and one store per position, plus W-1 loads to start the
// window (expected DRAM bytes per output element: 2 read + 2 written for 16-bit types; the
// W-1 halo loads hit L2). The backward recomputes pre and dpre = dout * silu'(pre) for its
// run and the W-1 positions after it (their windows cover its end), gives dx = the
// correlation of dpre with the flipped kernel as it slides, and keeps FP32 dweight/dbias
// sums in registers; a block folds its rows in a fixed order into one partial row, and a
// second kernel sums the partial rows in order (deterministic, no atomics; the number of
// partial rows comes from the shape alone). Expected bytes per element: 2 (x) + 2 (dout)
// read, 2 (dx) written, plus the partials (about 2048 blocks' worth: 4 (W+1) C bytes per
// block row). Runs that a varlen boundary cuts gather each position's window.
//
// Scalar kernels (any other case): consecutive threads on consecutive channels. Forward: each
// thread walks kSteps time steps of one channel with the window in registers (W <= 8) or
// loading its taps per step. Backward: dx (and the initial state's gradient) is a gather of
// dpre over the window; the weight and bias gradients are per-channel FP32 sums: a block
// holds 32 channels x 8 lanes of time, each lane a strided share of the positions, folded
// in a fixed order through shared memory.
//
// Either way the carried state is updated by a second launch, after every read of the old
// state (it is updated in place), and the initial state's gradient by its own small kernel.
// Varlen: a position's sequence is found by binary search in cu_seqlens, on the device (the
// host never reads it).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <type_traits>

#include "conv/cuda/common.cuh"
#include "conv/cuda/dw_tuning.h"
#include "conv/cuda/launch.h"
#include "core/cuda_check.h"
#include "cuda/launch.cuh"
#include "cuda/types.cuh"
#include "cuda/vec.cuh"
#include "rudnn/tensor.h"

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

// ---- Packed kernels: a thread owns V channels (one 16-byte or 8-byte pack) and kRun
// consecutive positions of one batch row; consecutive threads own consecutive packs.

// Positions per packed thread: forward, and backward (which recomputes the kW-1 positions
// after its run). Runs of 16 keep the W-1 halo loads that start a window to a fifth of the
// loads and give each thread 16 independent loads to issue ahead.
constexpr int kForwardRun = 16;
constexpr int kRun = 16;

// The pack widths of the packed kernels, so that a thread's window and weights (and, in the
// backward, its dpre window and weight-gradient sums) stay in registers with room for loads
// in flight: forward 16 bytes up to W = 4, 8 beyond; backward 4 bytes up to W = 4, 2 beyond
// (at least one element): 8-byte packs at W = 4 spill (measured slower on the H200).
template <class T, int kW>
constexpr int forward_pack() {
  return (kW <= 4 ? 16 : 8) / static_cast<int>(sizeof(T));
}
template <class T, int kW>
constexpr int backward_pack() {
  return (kW <= 4 ? 4 : 2) / static_cast<int>(sizeof(T)) > 1
             ? (kW <= 4 ? 4 : 2) / static_cast<int>(sizeof(T))
             : 1;
}

// Extended position t (>= q.start - (W-1)) of channels [c0, c0 + V): x, or the carried state
// (a strided gather: it is [seqs, C, W-1]) left of the sequence's start, or zeros.
template <class T, int V>
__device__ __forceinline__ void extended_pack(const CausalShape& s, const T* x, const T* state,
                                              const Seq& q, int64_t c0, int64_t t,
                                              float (&v)[V]) {
  if (t >= q.start) {
    rudnn::cuda::load_pack<T, V>(x + (q.b * s.length + t) * s.channels + c0, v);
    return;
  }
#pragma unroll
  for (int j = 0; j < V; ++j) {
    v[j] = state == nullptr
               ? 0.0f
               : to_float(state[(q.q * s.channels + c0 + j) * (s.width - 1) + (s.width - 1) + t -
                                q.start]);
  }
}

// The weights [c0, c0 + V) x [0, kW) (contiguous in [C, W]) and their biases: 16-byte loads
// when the rows allow (one round trip of few instructions), else one element at a time.
template <class T, int V, int kW>
__device__ __forceinline__ void load_weights(const T* weight, const T* bias, int64_t c0,
                                             float (&w)[kW][V], float (&bv)[V]) {
  constexpr int kPer = 16 / static_cast<int>(sizeof(T));
  constexpr int kCount = V * kW;  // elements, [channel][tap]
  const T* base = weight + c0 * kW;
  if constexpr (kCount % kPer == 0) {
    if (reinterpret_cast<uintptr_t>(weight) % 16 == 0) {
#pragma unroll
      for (int q = 0; q < kCount / kPer; ++q) {
        float v[kPer];
        rudnn::cuda::load_pack<T, kPer>(base + q * kPer, v);
#pragma unroll
        for (int e = 0; e < kPer; ++e) w[(q * kPer + e) % kW][(q * kPer + e) / kW] = v[e];
      }
    } else {
#pragma unroll
      for (int e = 0; e < kCount; ++e) w[e % kW][e / kW] = to_float(base[e]);
    }
  } else {
#pragma unroll
    for (int e = 0; e < kCount; ++e) w[e % kW][e / kW] = to_float(base[e]);
  }
  if (bias != nullptr && reinterpret_cast<uintptr_t>(bias) % (V * sizeof(T)) == 0) {
    rudnn::cuda::load_pack<T, V>(bias + c0, bv);
  } else {
#pragma unroll
    for (int j = 0; j < V; ++j) bv[j] = bias != nullptr ? to_float(bias[c0 + j]) : 0.0f;
  }
}

// The pre-activation of position t of sequence q (a gather of its window).
template <class T, int V, int kW>
__device__ __forceinline__ void pre_pack(const CausalShape& s, const T* x, const T* state,
                                         const Seq& q, int64_t c0, int64_t t,
                                         const float (&w)[kW][V], const float (&bv)[V],
                                         float (&acc)[V]) {
#pragma unroll
  for (int j = 0; j < V; ++j) acc[j] = bv[j];
#pragma unroll
  for (int i = 0; i < kW; ++i) {
    float v[V];
    extended_pack<T, V>(s, x, state, q, c0, t - (kW - 1) + i, v);
#pragma unroll
    for (int j = 0; j < V; ++j) acc[j] += w[i][j] * v[j];
  }
}

// The logistic function: in 16-bit types the fast exponential and division (a few ulp of
// FP32, far below the output's rounding), which keeps the packed kernels memory-bound.
template <class T>
__device__ __forceinline__ float sigmoid(float v) {
  if constexpr (sizeof(T) == 2) {
    return __fdividef(1.0f, 1.0f + __expf(-v));
  } else {
    return 1.0f / (1.0f + expf(-v));
  }
}

// SiLU of the forward. BF16: v/2 + v/2 tanh(v/2) with the hardware tanh (one MUFU
// operation per element where the logistic form takes two, an exponential and a
// reciprocal: at 16 per multiprocessor per clock these are a large share of the time of a
// streaming kernel); its error (relative, at most about 2^-11) is far below BF16's
// rounding (2^-9). Other types: the logistic form above.
template <class T, bool kTanh>
__device__ __forceinline__ float forward_silu(float v) {
  if constexpr (std::is_same_v<T, __nv_bfloat16> && kTanh) {
    const float h = 0.5f * v;
    float t;
    asm("tanh.approx.f32 %0, %1;" : "=f"(t) : "f"(h));
    return fmaf(h, t, h);
  }
  return v * sigmoid<T>(v);
}

// d out / d pre of SiLU at pre (1 without SiLU), times dout.
template <class T>
__device__ __forceinline__ float dsilu(bool on, float pre, float d) {
  if (!on) return d;
  const float sig = sigmoid<T>(pre);
  return d * sig * (1.0f + pre * (1.0f - sig));
}

// Forward. A run inside one sequence slides a window of kW packs along it: one load per
// position (plus kW-1 to start the window, from x or the state); a run that a varlen
// sequence boundary cuts gathers each position's window.
template <class T, int V, int kW, int R, bool kTanh = true>
__global__ void __launch_bounds__(kThreads, 2)
    forward_packed_kernel(CausalForward p, const T* __restrict__ x, const T* __restrict__ weight,
                          const T* __restrict__ bias, const T* state, T* __restrict__ out) {
  const CausalShape& s = p.s;
  const int64_t packs = s.channels / V, runs = (s.length + R - 1) / R;
  const int64_t flat = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (flat >= s.batch * runs * packs) return;
  const int64_t c0 = flat % packs * V, run = flat / packs % runs, b = flat / packs / runs;
  const int64_t t0 = run * R, t1 = min(t0 + R, s.length);
  float w[kW][V], bv[V];
  load_weights<T, V, kW>(weight, bias, c0, w, bv);
  const Seq first = sequence_of(s, p.cu_seqlens, b, t0);
  T* o = out + b * s.length * s.channels + c0;
  auto finish = [&](float (&acc)[V], int64_t t) {
    if (s.silu) {
#pragma unroll
      for (int j = 0; j < V; ++j) acc[j] = forward_silu<T, kTanh>(acc[j]);
    }
    rudnn::cuda::store_pack<T, V>(o + t * s.channels, acc);
  };
  // `full`: all R positions exist, so the loop has no exit test and its loads can
  // be issued ahead of the arithmetic.
  auto slide = [&](auto full) {
    float win[kW][V];  // win[kW-1] is the newest position
#pragma unroll
    for (int i = 0; i + 1 < kW; ++i) {
      extended_pack<T, V>(s, x, state, first, c0, t0 - (kW - 1) + i, win[i + 1]);
    }
#pragma unroll
    for (int m = 0; m < R; ++m) {
      const int64_t t = t0 + m;
      if (!decltype(full)::value && t >= t1) break;
#pragma unroll
      for (int i = 0; i + 1 < kW; ++i)
#pragma unroll
        for (int j = 0; j < V; ++j) win[i][j] = win[i + 1][j];
      rudnn::cuda::load_pack<T, V>(x + (b * s.length + t) * s.channels + c0, win[kW - 1]);
      float acc[V];
#pragma unroll
      for (int j = 0; j < V; ++j) {
        acc[j] = bv[j];
#pragma unroll
        for (int i = 0; i < kW; ++i) acc[j] += w[i][j] * win[i][j];
      }
      finish(acc, t);
    }
  };
  if (t1 <= first.end) {
    if (t1 - t0 == R) {
      slide(std::true_type{});
    } else {
      slide(std::false_type{});
    }
    return;
  }
  Seq q = first;
  for (int64_t t = t0; t < t1; ++t) {
    if (t >= q.end) q = sequence_of(s, p.cu_seqlens, b, t);
    float acc[V];
    pre_pack<T, V, kW>(s, x, state, q, c0, t, w, bv, acc);
    finish(acc, t);
  }
}

// Launch shape of the packed backward: blocks of (slice_packs, rows_per_block) threads over
// (pack slices, row groups); a row is one run of one batch row, and a thread walks the rows
// threadIdx.y + rows_per_block * (blockIdx.y + gridDim.y * i), a fixed set.
struct BackwardGrid {
  int slice_packs = 0, rows_per_block = 0;
  int64_t rows = 0, runs = 0;
};

// Backward: dx, and FP32 partial sums of dweight and dbias per block row, [gridDim.y][W+1][C]
// (tap-major, the bias last), summed across the block's rows in a fixed order. A run inside
// one sequence slides along it: pre, dpre (recomputed for the kW-1 positions after the run,
// whose windows cover it) and dx = sum_i w[i] * dpre[t + kW-1 - i] each need one load of x
// and of dout per position; a run that a varlen boundary cuts gathers per position.
template <class T, int V, int kW>
__global__ void __launch_bounds__(kThreads, 2)
    backward_packed_kernel(CausalBackward p, BackwardGrid g, const T* __restrict__ dout,
                           const T* __restrict__ x, const T* __restrict__ weight,
                           const T* __restrict__ bias, const T* __restrict__ state,
                           T* __restrict__ dx, float* __restrict__ partial) {
  const CausalShape& s = p.s;
  const int64_t packs = s.channels / V;
  const int64_t pack = int64_t{blockIdx.x} * g.slice_packs + threadIdx.x;
  float dw[kW][V] = {}, db[V] = {};
  if (pack < packs) {
    const int64_t c0 = pack * V;
    float w[kW][V], bv[V];
    load_weights<T, V, kW>(weight, bias, c0, w, bv);
    for (int64_t row = threadIdx.y + int64_t{g.rows_per_block} * blockIdx.y; row < g.rows;
         row += int64_t{g.rows_per_block} * gridDim.y) {
      const int64_t b = row / g.runs, t0 = row % g.runs * kRun;
      const int64_t t1 = min(t0 + kRun, s.length);
      const Seq first = sequence_of(s, p.cu_seqlens, b, t0);
      const int64_t base = b * s.length * s.channels + c0;
      // `full`: the run and the kW-1 positions after it lie in the sequence, so the loop has
      // no tests and its loads can be issued ahead of the arithmetic.
      auto slide = [&](auto full) {
        constexpr bool kFull = decltype(full)::value;
        float xw[kW][V];       // x at u - (kW-1) + i
        float dp[kW][V] = {};  // dpre at u - i
#pragma unroll
        for (int i = 0; i + 1 < kW; ++i) {
          extended_pack<T, V>(s, x, state, first, c0, t0 - (kW - 1) + i, xw[i + 1]);
        }
#pragma unroll
        for (int m = 0; m < kRun + kW - 1; ++m) {
          const int64_t u = t0 + m;
          if (!kFull && u - (kW - 1) >= t1) break;
#pragma unroll
          for (int i = 0; i + 1 < kW; ++i)
#pragma unroll
            for (int j = 0; j < V; ++j) xw[i][j] = xw[i + 1][j];
#pragma unroll
          for (int i = kW - 1; i > 0; --i)
#pragma unroll
            for (int j = 0; j < V; ++j) dp[i][j] = dp[i - 1][j];
          if (kFull || u < first.end) {
            float d[V];
            rudnn::cuda::load_pack<T, V>(x + base + u * s.channels, xw[kW - 1]);
            rudnn::cuda::load_pack<T, V>(dout + base + u * s.channels, d);
#pragma unroll
            for (int j = 0; j < V; ++j) {
              float pre = bv[j];
#pragma unroll
              for (int i = 0; i < kW; ++i) pre += w[i][j] * xw[i][j];
              dp[0][j] = dsilu<T>(s.silu, pre, d[j]);
            }
            if (kFull ? m < kRun : u < t1) {
#pragma unroll
              for (int j = 0; j < V; ++j) {
                db[j] += dp[0][j];
#pragma unroll
                for (int i = 0; i < kW; ++i) dw[i][j] += dp[0][j] * xw[i][j];
              }
            }
          } else {
#pragma unroll
            for (int j = 0; j < V; ++j) dp[0][j] = 0.0f;
          }
          if (m >= kW - 1) {
            float acc[V];
#pragma unroll
            for (int j = 0; j < V; ++j) {
              acc[j] = 0.0f;
#pragma unroll
              for (int i = 0; i < kW; ++i) acc[j] += w[i][j] * dp[i][j];
            }
            rudnn::cuda::store_pack<T, V>(dx + base + (u - (kW - 1)) * s.channels, acc);
          }
        }
      };
      if (t1 <= first.end) {
        if (t0 + kRun + (kW - 1) <= first.end) {
          slide(std::true_type{});
        } else {
          slide(std::false_type{});
        }
        continue;
      }
      Seq q = first;
      for (int64_t t = t0; t < t1; ++t) {
        if (t >= q.end) q = sequence_of(s, p.cu_seqlens, b, t);
        float acc[V] = {};
#pragma unroll
        for (int i = 0; i < kW; ++i) {
          const int64_t u = t + (kW - 1) - i;
          if (u >= q.end) continue;
          float pre[V], d[V];
          pre_pack<T, V, kW>(s, x, state, q, c0, u, w, bv, pre);
          rudnn::cuda::load_pack<T, V>(dout + base + u * s.channels, d);
#pragma unroll
          for (int j = 0; j < V; ++j) {
            const float dpre = dsilu<T>(s.silu, pre[j], d[j]);
            acc[j] += w[i][j] * dpre;
            if (i == kW - 1) {  // u == t: the position's own parameter terms
              db[j] += dpre;
            }
          }
          if (i == kW - 1) {
#pragma unroll
            for (int k = 0; k < kW; ++k) {
              float v[V];
              extended_pack<T, V>(s, x, state, q, c0, t - (kW - 1) + k, v);
#pragma unroll
              for (int j = 0; j < V; ++j) dw[k][j] += dsilu<T>(s.silu, pre[j], d[j]) * v[j];
            }
          }
        }
        rudnn::cuda::store_pack<T, V>(dx + base + t * s.channels, acc);
      }
    }
  }
  // The block's rows summed in threadIdx.y order, one tap (then the bias) at a time.
  __shared__ float sums[kThreads * 8];
  const int width = g.slice_packs * V;  // channels of a full slice
  const int64_t c_base = int64_t{blockIdx.x} * width;
  const int me = threadIdx.y * width + threadIdx.x * V;
  const int tid = threadIdx.y * blockDim.x + threadIdx.x;
#pragma unroll
  for (int k = 0; k <= kW; ++k) {
#pragma unroll
    for (int j = 0; j < V; ++j) sums[me + j] = k < kW ? dw[k][j] : db[j];
    __syncthreads();
    if (tid < width && c_base + tid < s.channels) {
      float total = 0.0f;
      for (int r = 0; r < g.rows_per_block; ++r) total += sums[r * width + tid];
      partial[(int64_t{blockIdx.y} * (kW + 1) + k) * s.channels + c_base + tid] = total;
    }
    __syncthreads();
  }
}

// dweight [C, W] and dbias [C] from the partials, each the sum of its `parts` rows in order.
template <class T>
__global__ void __launch_bounds__(kThreads)
    reduce_partials_kernel(const float* __restrict__ partial, int64_t parts, int64_t channels,
                           int64_t width, T* __restrict__ dweight, T* __restrict__ dbias) {
  const int64_t total = (width + 1) * channels;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t k = i / channels, c = i % channels;
    float sum = 0.0f;
    for (int64_t r = 0; r < parts; ++r) sum += partial[r * total + i];
    if (k < width) {
      dweight[c * width + k] = from_float<T>(sum);
    } else if (dbias != nullptr) {
      dbias[c] = from_float<T>(sum);
    }
  }
}

// Calls f(kernel-width tag) for W in 1..8; false for wider windows.
template <class F>
bool with_window(int64_t width, F&& f) {
  switch (width) {
    case 1: f(std::integral_constant<int, 1>{}); return true;
    case 2: f(std::integral_constant<int, 2>{}); return true;
    case 3: f(std::integral_constant<int, 3>{}); return true;
    case 4: f(std::integral_constant<int, 4>{}); return true;
    case 5: f(std::integral_constant<int, 5>{}); return true;
    case 6: f(std::integral_constant<int, 6>{}); return true;
    case 7: f(std::integral_constant<int, 7>{}); return true;
    case 8: f(std::integral_constant<int, 8>{}); return true;
    default: return false;
  }
}

// Whether C splits into packs of `v` and the pointers hold whole packs.
bool packable(int64_t channels, int v, size_t bytes, std::initializer_list<const void*> ptrs) {
  if (channels % v != 0) return false;
  for (const void* ptr : ptrs) {
    if (reinterpret_cast<uintptr_t>(ptr) % bytes != 0) return false;
  }
  return true;
}

}  // namespace

void causal_forward(const CausalForward& p, const Stream& stream) {
  const rudnn::cuda::LaunchContext ctx(stream);
  const CausalShape& s = p.s;
  rudnn::cuda::with_float_type(s.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    bool packed = false;
    with_window(s.width, [&](auto window) {
      constexpr int kW = decltype(window)::value;
      constexpr int V = forward_pack<T, kW>();
      auto launch = [&](auto kernel, int v, int run) {
        if (!packable(s.channels, v, v * sizeof(T), {p.x, p.out})) return;
        const int64_t total = s.batch * ((s.length + run - 1) / run) * (s.channels / v);
        kernel<<<blocks_for(total), kThreads, 0, ctx.stream>>>(
            p, static_cast<const T*>(p.x), static_cast<const T*>(p.weight),
            static_cast<const T*>(p.bias), static_cast<const T*>(p.state),
            static_cast<T*>(p.out));
        packed = true;
      };
      // The alternatives of dw_tuning() (W = 4 only: each is a kernel per type).
      const int choice = dw_tuning().causal_forward;
      if constexpr (kW == 4) {
        constexpr int V8 = 8 / static_cast<int>(sizeof(T));
        if (choice == 1) launch(forward_packed_kernel<T, V, kW, 8>, V, 8);
        if (choice == 2) launch(forward_packed_kernel<T, V, kW, 32>, V, 32);
        if (choice == 3) launch(forward_packed_kernel<T, V8, kW, 32>, V8, 32);
        if (choice == 4) launch(forward_packed_kernel<T, V, kW, kForwardRun, false>, V, kForwardRun);
        if (packed) return;
      }
      launch(forward_packed_kernel<T, V, kW, kForwardRun>, V, kForwardRun);
    });
    if (!packed) {
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
    bool packed = false;
    if (elements > 0) {
      with_window(s.width, [&](auto window) {
        constexpr int kW = decltype(window)::value;
        constexpr int V = backward_pack<T, kW>();
        if (!packable(s.channels, V, V * sizeof(T), {p.dout, p.x, p.dx})) return;
        BackwardGrid g;
        const int64_t packs = s.channels / V;
        g.slice_packs = static_cast<int>(std::min<int64_t>(packs, 32));
        g.rows_per_block = kThreads / g.slice_packs;
        g.runs = (s.length + kRun - 1) / kRun;
        g.rows = s.batch * g.runs;
        const int64_t slices = (packs + g.slice_packs - 1) / g.slice_packs;
        // About 2048 blocks, whatever the device: the partials (and so the sums' order)
        // depend on the shape alone.
        const int64_t row_blocks = std::min<int64_t>(
            (g.rows + g.rows_per_block - 1) / g.rows_per_block,
            std::max<int64_t>(1, 2048 / slices));
        if (slices >= (int64_t{1} << 31)) return;
        const Tensor partial = Tensor::empty({row_blocks, s.width + 1, s.channels}, DType::f32,
                                             ctx.device, ctx.rudnn_stream);
        float* sums = static_cast<float*>(partial.data());
        backward_packed_kernel<T, V, kW>
            <<<dim3(static_cast<unsigned>(slices), static_cast<unsigned>(row_blocks)),
               dim3(g.slice_packs, g.rows_per_block), 0, ctx.stream>>>(
                p, g, dout, x, weight, bias, state, static_cast<T*>(p.dx), sums);
        detail::check_launch("causal_conv1d_backward dx");
        reduce_partials_kernel<T><<<blocks_for((s.width + 1) * s.channels), kThreads, 0,
                                    ctx.stream>>>(sums, row_blocks, s.channels, s.width,
                                                  static_cast<T*>(p.dweight),
                                                  static_cast<T*>(p.dbias));
        detail::check_launch("causal_conv1d_backward dweight");
        packed = true;
      });
    }
    const int64_t state_elements = s.seqs * s.channels * (s.width - 1);
    if (p.dinitial_state != nullptr && state_elements > 0) {
      dstate_kernel<T><<<blocks_for(state_elements), kThreads, 0, ctx.stream>>>(
          p, dout, x, weight, bias, state, static_cast<T*>(p.dinitial_state));
      detail::check_launch("causal_conv1d_backward dinitial_state");
    }
    if (packed) return;
    if (elements > 0) {
      dx_kernel<T><<<blocks_for(elements), kThreads, 0, ctx.stream>>>(p, dout, x, weight, bias,
                                                                      state, static_cast<T*>(p.dx));
      detail::check_launch("causal_conv1d_backward dx");
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
