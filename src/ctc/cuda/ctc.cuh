// CTC loss kernels, instantiated per dtype (ctc_{f32,f16,bf16}.cu), launched by dispatch.cu.
//
// 1. prepare_kernel (one block): each sample's lengths checked, and for concatenated targets
//    the index of its first label (an exclusive scan of the target lengths).
// 2. gather_kernel: the log-probabilities of each sample's blank and labels at each of its
//    steps, [N, T, W] FP32 in base 2 (times log2(e)), written densely. The recursions then
//    read contiguous blocks of steps instead of scattered classes of 20 KB rows, which kept a
//    recursion block waiting on DRAM at each block of steps.
// 3. recursion_kernel: one block per sample and direction (alpha forward in time, beta
//    backward), the 2S+1 states of the blank-extended target across the threads, the steps
//    in a loop with the previous row in shared memory. The backward runs both over every
//    step; the forward (KernelTuning::split_forward) runs alpha over the first ceil(T/2)
//    steps and beta over the rest, concurrently, and meet_kernel joins their last rows: the
//    loss after half of the serial steps. The next block of up to kMaxChunk
//    steps of gathered log-probabilities is loaded into registers while the current one is
//    used from shared memory, so that no step waits for a global load. The recursion runs in
//    base 2 (ex2/lg2 are single instructions). Rows are renormalised every kRenormEvery steps
//    by their maximum, the shifts summed in FP64: the stored rows stay small numbers, so that
//    alpha + beta - lp + nll, which cancels magnitudes of T * |log p|, loses no FP32 bits. The
//    maximum of row k is applied to row k + 1 (log-add is shift-equivariant), so that taking
//    it costs no barrier of its own.
// 4. meet_kernel (split forward): each sample's nll from the two rows, then loss_kernel: the reduction, in a fixed order (deterministic), or grad_kernel: one block
//    per (t, n) row, a coalesced pass over the C classes (g * exp(lp), the gradient of every
//    class the target lacks), then the target's classes (the blank and each distinct label,
//    repeats summed through per-sample chains) overwritten from alpha + beta staged in shared
//    memory.
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "core/cuda_check.h"
#include "ctc/cuda/launch.h"
#include "ctc/cuda/tuning.h"
#include "cuda/launch.cuh"
#include "cuda/reduce.cuh"
#include "cuda/types.cuh"

namespace rudnn::ctc::cuda {

using rudnn::cuda::from_float;
using rudnn::cuda::to_float;

using rudnn::cuda::kFullMask;
constexpr int kPrepareThreads = 1024;
constexpr int kMaxRecursionThreads = 1024;
constexpr int kGatherThreads = 256;
constexpr int kGatherSteps = 16;  // steps per gather block
constexpr int kGradThreads = 128;
constexpr int kLossThreads = 256;
constexpr int kRenormEvery = 8;  // a power of two, at least 2 (block_max is written every
                                 // kRenormEvery steps and read on the step after)
static_assert((kRenormEvery & (kRenormEvery - 1)) == 0 && kRenormEvery >= 2,
              "kRenormEvery is tested with a mask");
constexpr int kMaxChunk = 32;
// 16-byte vectors of the next block of steps each recursion thread holds in registers: the
// block of steps is at most kPrefetch * threads * 4 floats (recursion_shape).
constexpr int kPrefetch = 4;
constexpr float kLog2eF = 1.4426950408889634f;
constexpr double kLog2e = 1.4426950408889634;
constexpr double kLn2 = 0.6931471805599453;
// chain entries: bit 30 marks a label position whose class occurs at no earlier position;
// the low bits hold 1 + the next position of the same class (0: none).
constexpr int32_t kFirstOfClass = 1 << 30;

// Per sample, written by prepare_kernel (labels_bad by the alpha block).
struct SampleInfo {
  int64_t first = 0;  // index of its first label in targets
  int64_t input_length = 0;
  int64_t target_length = 0;
  int32_t lengths_bad = 0;
  int32_t labels_bad = 0;
};
static_assert(sizeof(SampleInfo) == 32, "scratch_layout reserves 32 bytes per sample");

struct Views {
  SampleInfo* info = nullptr;
  double* nll = nullptr;      // per sample; NaN for an invalid one
  float* gathered = nullptr;  // [N, T, gathered_width]: log2-probabilities of blank, labels
  double* alpha_offset = nullptr;
  double* beta_offset = nullptr;  // [N, T]: the shifts taken out of the stored rows
  float* alpha = nullptr;
  float* beta = nullptr;     // [N, T, 2 * max_target + 1], relative to the offsets
  int32_t* chain = nullptr;  // [N, max_target]
  unsigned* counter = nullptr;  // the overlapped backward's next unit of gradient rows
  // The split forward's meeting rows: [N, 2, 2 * max_target + 1] (alpha's last row, then
  // beta's), relative to the offsets [N, 2].
  float* meet_rows = nullptr;
  double* meet_offset = nullptr;
};

inline Views scratch_views(const CtcProblem& p, bool backward) {
  const ScratchLayout l = scratch_layout(p, backward);
  char* base = static_cast<char*>(p.scratch);
  Views v;
  v.info = reinterpret_cast<SampleInfo*>(base + l.info);
  v.nll = reinterpret_cast<double*>(base + l.nll);
  v.gathered = reinterpret_cast<float*>(base + l.gathered);
  if (backward) {
    v.alpha_offset = reinterpret_cast<double*>(base + l.alpha_offset);
    v.beta_offset = reinterpret_cast<double*>(base + l.beta_offset);
    v.alpha = reinterpret_cast<float*>(base + l.alpha);
    v.beta = reinterpret_cast<float*>(base + l.beta);
    v.chain = reinterpret_cast<int32_t*>(base + l.chain);
    v.counter = reinterpret_cast<unsigned*>(base + l.counter);
  } else {
    v.meet_rows = reinterpret_cast<float*>(base + l.meet_rows);
    v.meet_offset = reinterpret_cast<double*>(base + l.meet_offset);
  }
  return v;
}

__device__ __forceinline__ int64_t load_index(const void* data, DType dtype, int64_t i) {
  return dtype == DType::i32 ? static_cast<int64_t>(static_cast<const int32_t*>(data)[i])
                             : static_cast<const int64_t*>(data)[i];
}

// log2(2^a + 2^b + 2^c); -inf when all are -inf, NaN when one is NaN (as the reference's
// log_add, which returns its other operand unchanged when one is -inf).
__device__ __forceinline__ float log2_add3(float a, float b, float c) {
  const float m = fmaxf(a, fmaxf(b, c));
  if (m == -INFINITY) return a + b + c;
  return m + log2f(exp2f(a - m) + exp2f(b - m) + exp2f(c - m));
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(kFullMask, v, o));
  return v;
}
using rudnn::cuda::warp_sum;

static __global__ void __launch_bounds__(kPrepareThreads) prepare_kernel(CtcProblem p, Views v) {
  __shared__ int64_t warp_totals[kPrepareThreads / 32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (v.counter != nullptr && threadIdx.x == 0) *v.counter = 0;
  int64_t carried = 0;  // labels of the samples of earlier chunks
  for (int64_t base = 0; base < p.batch; base += kPrepareThreads) {
    const int64_t n = base + threadIdx.x;
    int64_t in_len = 0, tl = 0;
    if (n < p.batch) {
      in_len = load_index(p.input_lengths, p.input_length_dtype, n);
      tl = load_index(p.target_lengths, p.target_length_dtype, n);
    }
    const int64_t counted = tl > 0 ? tl : 0;
    int64_t scan = counted;
#pragma unroll
    for (int d = 1; d < 32; d <<= 1) {
      const int64_t y = __shfl_up_sync(kFullMask, scan, d);
      if (lane >= d) scan += y;
    }
    if (lane == 31) warp_totals[warp] = scan;
    __syncthreads();
    if (warp == 0) {
      int64_t w = warp_totals[lane];
#pragma unroll
      for (int d = 1; d < 32; d <<= 1) {
        const int64_t y = __shfl_up_sync(kFullMask, w, d);
        if (lane >= d) w += y;
      }
      warp_totals[lane] = w;
    }
    __syncthreads();
    const int64_t before = carried + (warp > 0 ? warp_totals[warp - 1] : 0) + scan - counted;
    if (n < p.batch) {
      SampleInfo s;
      s.first = p.padded ? n * p.padded_stride : before;
      s.input_length = in_len;
      s.target_length = tl;
      bool ok = in_len >= 0 && in_len <= p.steps && tl >= 0;
      ok = ok && (p.padded ? tl <= p.padded_stride : before + tl <= p.target_count);
      s.lengths_bad = ok ? 0 : 1;
      v.info[n] = s;
    }
    carried += warp_totals[kPrepareThreads / 32 - 1];
    __syncthreads();
  }
}

// Sample n's labels with the blank in front (labels[0] = blank, labels[1 + i] = label i), at
// most max_target + 1 of them. A label out of [0, C) reads as the blank here (no read out of
// the row); the alpha block flags its sample.
template <class T>
__global__ void __launch_bounds__(kGatherThreads) gather_kernel(CtcProblem p, Views v) {
  extern __shared__ int32_t gather_labels[];
  const int64_t n = blockIdx.x;
  const SampleInfo info = v.info[n];
  const int64_t tl = info.target_length, Tn = info.input_length;
  // Bad lengths, or a target too long to align: the recursions never read this sample.
  if (info.lengths_bad != 0 || tl > Tn || tl > p.max_target) return;
  if (static_cast<int64_t>(blockIdx.y) * kGatherSteps >= Tn) return;
  for (int64_t i = threadIdx.x; i <= tl; i += blockDim.x) {
    int64_t label = i == 0 ? p.blank : load_index(p.targets, p.target_dtype, info.first + i - 1);
    if (label < 0 || label >= p.classes) label = p.blank;
    gather_labels[i] = static_cast<int32_t>(label);
  }
  __syncthreads();
  const int64_t W = gathered_width(p.max_target), N = p.batch, C = p.classes;
  const int width = static_cast<int>(tl + 1);
  const T* lp = static_cast<const T*>(p.log_probs);
  for (int64_t t0 = static_cast<int64_t>(blockIdx.y) * kGatherSteps; t0 < Tn;
       t0 += static_cast<int64_t>(gridDim.y) * kGatherSteps) {
    const int count = static_cast<int>(Tn - t0 < kGatherSteps ? Tn - t0 : kGatherSteps);
    float* dst = v.gathered + (n * p.steps + t0) * W;
#pragma unroll 4
    for (int i = threadIdx.x; i < count * width; i += blockDim.x) {
      const int j = i / width, u = i - j * width;
      dst[j * W + u] = to_float(lp[((t0 + j) * N + n) * C + gather_labels[u]]) * kLog2eF;
    }
  }
}

// How a recursion block splits its dynamic shared memory.
struct RecursionShape {
  int threads = 0;
  int chunk = 0;  // steps of log-probabilities held at once
  size_t shared = 0;
};

// The negative log-likelihood (natural log) of alpha's last row (log2 values relative to
// `offset`, `states` = 2 * target length + 1): the alignments ending in the last label or the
// blank after it; +inf when none reaches them.
__device__ __forceinline__ double nll_of_last_row(const float* row, int64_t states,
                                                  double offset) {
  const float ll = log2_add3(row[states - 1], states > 1 ? row[states - 2] : -INFINITY, -INFINITY);
  return ll == -INFINITY ? static_cast<double>(INFINITY)
                         : -(static_cast<double>(ll) + offset) * kLn2;
}

// One block per (sample, direction): blockIdx.y 0 runs alpha (and writes the sample's label
// check, and its nll unless `meet`), 1 runs beta (and the chains of repeated labels). kStore:
// keep every row. `meet` (the split forward): alpha runs the first ceil(Tn / 2) steps, beta
// the others, and each leaves its last row and offset in v.meet_rows / v.meet_offset for
// meet_kernel. Everything is in base 2: stored rows and offsets are log2 values.
// Internal linkage, as prepare_kernel: ctc_{f32,f16,bf16}.cu each instantiate it, and one
// kernel registered by three modules under one host stub is left to the runtime to resolve.
template <bool kStore>
__device__ __forceinline__ void recursion_body(const CtcProblem& p, const Views& v, int chunk,
                                               int64_t n, bool beta, bool meet = false) {
  extern __shared__ float4 shared_vectors[];
  __shared__ float block_max[kMaxRecursionThreads / 32];
  const int64_t cap = p.max_target, cap_states = 2 * cap + 1;
  const int W = static_cast<int>(gathered_width(cap));
  float* lp_chunk = reinterpret_cast<float*>(shared_vectors);  // [chunk][W]
  float* row_a = lp_chunk + static_cast<int64_t>(chunk) * W;
  float* row_b = row_a + cap_states;
  int32_t* labels = reinterpret_cast<int32_t*>(row_b + cap_states);  // blank, then each label

  const SampleInfo info = v.info[n];
  bool ok = info.lengths_bad == 0;
  const int64_t tl = ok ? info.target_length : 0, Tn = ok ? info.input_length : 0;
  for (int64_t i = threadIdx.x; i < tl; i += blockDim.x) {
    const int64_t label = load_index(p.targets, p.target_dtype, info.first + i);
    if (label < 0 || label >= p.classes || label == p.blank) {
      ok = false;
    } else if (i < cap) {
      labels[i + 1] = static_cast<int32_t>(label);
    }
  }
  if (threadIdx.x == 0) labels[0] = static_cast<int32_t>(p.blank);
  ok = __syncthreads_and(ok);
  if (!ok) {
    if (!beta && threadIdx.x == 0) {
      v.nll[n] = NAN;
      v.info[n].labels_bad = 1;
    }
    return;
  }
  if (Tn == 0 || tl > Tn) {
    // No steps, or more labels than steps: nothing to align (0 for an empty target in no
    // steps, else impossible).
    if (!beta && threadIdx.x == 0) v.nll[n] = (tl == 0) ? 0.0 : INFINITY;
    return;
  }
  if (kStore && beta) {
    for (int64_t i = threadIdx.x; i < tl; i += blockDim.x) {
      const int32_t c = labels[i + 1];
      int32_t code = kFirstOfClass;
      for (int64_t j = 0; j < i; ++j) {
        if (labels[j + 1] == c) {
          code = 0;
          break;
        }
      }
      for (int64_t j = i + 1; j < tl; ++j) {
        if (labels[j + 1] == c) {
          code |= static_cast<int32_t>(j + 1);
          break;
        }
      }
      v.chain[n * cap + i] = code;
    }
  }

  // The steps this block runs: every one, or its half of a split forward (none for beta
  // when Tn = 1: meet_kernel then ends alpha's row as the whole forward does).
  const int64_t alpha_steps = meet ? (Tn + 1) / 2 : Tn;
  const int64_t run_steps = meet && beta ? Tn - alpha_steps : alpha_steps;
  if (run_steps == 0) return;
  // At most 2 * 16383 + 1 states and kMaxChunk * W floats per block of steps (the entry
  // point caps max_target): 32-bit arithmetic inside the block.
  const int states = static_cast<int>(2 * tl + 1);
  const int tid = threadIdx.x, threads = blockDim.x, warps = threads >> 5;
  const int vectors_per_step = W / 4;
  const float4* gathered = reinterpret_cast<const float4*>(v.gathered + n * p.steps * W);
  float4* chunk_vectors = shared_vectors;
  float4 staged[kPrefetch];
  // Steps k .. k + count - 1 of the recursion are times low .. low + count - 1.
  const auto steps_from = [&](int64_t k) {
    return static_cast<int>(run_steps - k < chunk ? run_steps - k : chunk);
  };
  const auto low_of = [&](int64_t k, int count) { return beta ? Tn - k - count : k; };
  const auto load_block = [&](int64_t k) {
    const int count = steps_from(k);
    const float4* from = gathered + low_of(k, count) * vectors_per_step;
    const int vectors = count * vectors_per_step;
#pragma unroll
    for (int r = 0; r < kPrefetch; ++r) {
      const int q = tid + r * threads;
      if (q < vectors) staged[r] = from[q];
    }
  };
  load_block(0);

  float* prev = row_a;
  float* cur = row_b;
  double offset = 0.0;  // the sum of the shifts taken out so far (the same in every thread)
  int64_t chunk_low = 0, next_chunk = 0;
  float* stored_rows = kStore ? (beta ? v.beta : v.alpha) : nullptr;
  double* stored_offsets = kStore ? (beta ? v.beta_offset : v.alpha_offset) : nullptr;
  for (int64_t k = 0; k < run_steps; ++k) {
    const int64_t t = beta ? Tn - 1 - k : k;
    if (k == next_chunk) {
      // Every thread is past the previous block's last step (its barrier): overwrite it.
      const int count = steps_from(k);
      chunk_low = low_of(k, count);
      const int vectors = count * vectors_per_step;
#pragma unroll
      for (int r = 0; r < kPrefetch; ++r) {
        const int q = tid + r * threads;
        if (q < vectors) chunk_vectors[q] = staged[r];
      }
      next_chunk += chunk;
      if (next_chunk < run_steps) load_block(next_chunk);
      __syncthreads();
    }
    // The shift of this row: the maximum of the previous one, when that was a renormalising
    // step (its warps' maxima are in block_max).
    float shift = 0.0f;
    if (k > 0 && ((k - 1) & (kRenormEvery - 1)) == 0) {
      float m = -INFINITY;
      for (int w = 0; w < warps; ++w) m = fmaxf(m, block_max[w]);
      if (isfinite(m)) {
        shift = m;
        offset += m;
      }
    }
    const float* lpt = lp_chunk + static_cast<int>(t - chunk_low) * W;
    float* stored = kStore ? stored_rows + (n * p.steps + t) * cap_states : nullptr;
    float local_max = -INFINITY;
    for (int s = tid; s < states; s += threads) {
      const int u = (s & 1) ? (s + 1) >> 1 : 0;
      const float x = lpt[u];
      float value;
      if (k == 0) {
        value = (beta ? s >= states - 2 : s <= 1) ? x : -INFINITY;
      } else {
        float l;
        if (!beta) {
          const float b = s >= 1 ? prev[s - 1] : -INFINITY;
          const float c =
              (s >= 3 && (s & 1) && labels[u] != labels[u - 1]) ? prev[s - 2] : -INFINITY;
          l = log2_add3(prev[s], b, c);
        } else {
          const float b = s + 1 < states ? prev[s + 1] : -INFINITY;
          const float c =
              (s + 2 < states && (s & 1) && labels[u] != labels[u + 1]) ? prev[s + 2] : -INFINITY;
          l = log2_add3(prev[s], b, c);
        }
        value = l == -INFINITY ? -INFINITY : (l + x) - shift;
      }
      cur[s] = value;
      local_max = fmaxf(local_max, value);
      if constexpr (kStore) stored[s] = value;
    }
    if ((k & (kRenormEvery - 1)) == 0) {
      const float wm = warp_max(local_max);
      if ((tid & 31) == 0) block_max[tid >> 5] = wm;
    }
    if (kStore && tid == 0) stored_offsets[n * p.steps + t] = offset;
    __syncthreads();
    float* swap = prev;
    prev = cur;
    cur = swap;
  }
  if (meet) {
    const int64_t side = n * 2 + (beta ? 1 : 0);
    float* row = v.meet_rows + side * cap_states;
    for (int s = tid; s < states; s += threads) row[s] = prev[s];
    if (tid == 0) v.meet_offset[side] = offset;
    return;
  }
  if (!beta && threadIdx.x == 0) v.nll[n] = nll_of_last_row(prev, states, offset);
}

template <bool kStore>
static __global__ void __launch_bounds__(kMaxRecursionThreads)
    recursion_kernel(CtcProblem p, Views v, int chunk, bool meet) {
  recursion_body<kStore>(p, v, chunk, blockIdx.x, blockIdx.y == 1, meet);
}

// The reduction's weight of sample n's loss (1 / (N * max(target length, 1)) for mean).
__device__ __forceinline__ double reduction_factor(const CtcProblem& p, int64_t target_length) {
  if (p.reduction != CtcReduction::mean) return 1.0;
  return 1.0 / (static_cast<double>(p.batch) *
                static_cast<double>(target_length > 0 ? target_length : 1));
}

__device__ __forceinline__ bool sample_bad(const SampleInfo& info) {
  return info.lengths_bad != 0 || info.labels_bad != 0;
}

constexpr int kMeetThreads = 256;

// The split forward's join, one block per sample: with alpha's row at step Ta - 1 and beta's
// at Ta (Ta = ceil(Tn / 2), each relative to its offset), the likelihood is
// sum_s A(s) * beta(s), A(s) alpha's transition into state s without the emission (beta's row
// holds it): log2 P = log2 sum_s 2^(A(s) + b(s)) + both offsets, taken about the maximum.
// Samples the recursion already settled (bad lengths or labels, no steps, targets longer than
// the input) keep the nll it wrote.
static __global__ void __launch_bounds__(kMeetThreads) meet_kernel(CtcProblem p, Views v) {
  using rudnn::cuda::group_reduce;
  __shared__ float scratch[32];
  const int64_t n = blockIdx.x;
  const SampleInfo info = v.info[n];
  const int64_t tl = info.target_length, Tn = info.input_length;
  if (sample_bad(info) || Tn == 0 || tl > Tn) return;
  const int64_t cap_states = 2 * p.max_target + 1, states = 2 * tl + 1;
  const float* a = v.meet_rows + n * 2 * cap_states;
  const float* b = a + cap_states;
  const double alpha_offset = v.meet_offset[2 * n];
  if (Tn == 1) {  // beta ran no step: alpha's row is the last one
    if (threadIdx.x == 0) v.nll[n] = nll_of_last_row(a, states, alpha_offset);
    return;
  }
  // Labels are 1-based in the blank-extended target: state s odd is label (s + 1) / 2.
  auto label = [&](int64_t u) { return load_index(p.targets, p.target_dtype, info.first + u - 1); };
  auto joined = [&](int64_t s) {
    const int64_t u = (s + 1) >> 1;
    const float c = (s >= 3 && (s & 1) && label(u) != label(u - 1)) ? a[s - 2] : -INFINITY;
    const float into = log2_add3(a[s], s >= 1 ? a[s - 1] : -INFINITY, c);
    return into == -INFINITY ? -INFINITY : into + b[s];
  };
  float m = rudnn::cuda::MaxOp::identity();
  for (int64_t s = threadIdx.x; s < states; s += kMeetThreads)
    m = rudnn::cuda::MaxOp{}(m, joined(s));
  m = group_reduce<kMeetThreads>(m, rudnn::cuda::MaxOp{}, scratch);
  if (m != m || m == -INFINITY) {  // NaN in a row, or no alignment
    if (threadIdx.x == 0) v.nll[n] = m != m ? static_cast<double>(NAN) : INFINITY;
    return;
  }
  float sum = 0.0f;
  for (int64_t s = threadIdx.x; s < states; s += kMeetThreads) sum += exp2f(joined(s) - m);
  sum = group_reduce<kMeetThreads>(sum, rudnn::cuda::SumOp{}, scratch);
  if (threadIdx.x == 0) {
    const double ll = static_cast<double>(m + log2f(sum)) + alpha_offset + v.meet_offset[2 * n + 1];
    v.nll[n] = -ll * kLn2;
  }
}

template <class T>
__global__ void __launch_bounds__(kLossThreads) loss_kernel(CtcProblem p, Views v) {
  T* loss = static_cast<T*>(p.loss);
  auto value = [&](int64_t n) -> double {
    const SampleInfo info = v.info[n];
    if (sample_bad(info)) return NAN;
    double nll = v.nll[n];
    if (p.zero_infinity && isinf(nll)) nll = 0.0;
    return nll * reduction_factor(p, info.target_length);
  };
  if (p.reduction == CtcReduction::none) {
    for (int64_t n = static_cast<int64_t>(blockIdx.x) * kLossThreads + threadIdx.x; n < p.batch;
         n += static_cast<int64_t>(gridDim.x) * kLossThreads) {
      loss[n] = from_float<T>(static_cast<float>(value(n)));
    }
    return;
  }
  __shared__ double partial[kLossThreads];
  double acc = 0.0;
  for (int64_t n = threadIdx.x; n < p.batch; n += kLossThreads) acc += value(n);
  partial[threadIdx.x] = acc;
  __syncthreads();
  for (int width = kLossThreads / 2; width > 0; width >>= 1) {
    if (threadIdx.x < width) partial[threadIdx.x] += partial[threadIdx.x + width];
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    const double total = (p.reduction == CtcReduction::mean && p.batch == 0) ? NAN : partial[0];
    loss[0] = from_float<T>(static_cast<float>(total));
  }
}

// Log2 of the sum of 2^ab[s] over the states s = state_of(i), i < count, across the block
// (-inf when there are none or all are -inf; NaN when one is NaN). Every thread of the block
// calls it (barriers inside); every thread gets the result.
template <class StateOf>
__device__ __forceinline__ float block_log2_occupancy(const float* ab, int64_t count,
                                                      StateOf state_of, float* scratch) {
  using rudnn::cuda::group_reduce;
  float m = rudnn::cuda::MaxOp::identity();
  for (int64_t i = threadIdx.x; i < count; i += kGradThreads)
    m = rudnn::cuda::MaxOp{}(m, ab[state_of(i)]);
  m = group_reduce<kGradThreads>(m, rudnn::cuda::MaxOp{}, scratch);
  if (m != m || m == -INFINITY) return m;
  float sum = 0.0f;
  for (int64_t i = threadIdx.x; i < count; i += kGradThreads) sum += exp2f(ab[state_of(i)] - m);
  sum = group_reduce<kGradThreads>(sum, rudnn::cuda::SumOp{}, scratch);
  return m + log2f(sum);
}

// One block per (t, n) row (a grid-stride loop over rows). Dynamic shared memory: the row's
// alpha + beta, 2 * max_target + 1 floats.
template <class T>
__global__ void __launch_bounds__(kGradThreads) grad_kernel(CtcProblem p, Views v) {
  extern __shared__ float ab[];
  __shared__ float scratch[32];
  const int64_t rows = p.steps * p.batch, C = p.classes;
  const int64_t cap = p.max_target, cap_states = 2 * cap + 1;
  const T* grad_loss = static_cast<const T*>(p.grad_loss);
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const int64_t t = row / p.batch, n = row - t * p.batch;
    const T* lp = static_cast<const T*>(p.log_probs) + row * C;
    T* out = static_cast<T*>(p.grad) + row * C;
    const SampleInfo info = v.info[n];
    const double nll = v.nll[n];
    if (sample_bad(info) || (p.zero_infinity && isinf(nll)) || t >= info.input_length) {
      const T fill = from_float<T>(sample_bad(info) ? NAN : 0.0f);
      for (int64_t c = threadIdx.x; c < C; c += kGradThreads) out[c] = fill;
      continue;
    }
    const float g = to_float(grad_loss[p.reduction == CtcReduction::none ? n : 0]) *
                    static_cast<float>(reduction_factor(p, info.target_length));
    // A class no state carries: exp(-inf + nll - lp) is 0, unless nll - lp is +inf or NaN.
    const float nll_f = static_cast<float>(nll);
#pragma unroll 8
    for (int64_t c = threadIdx.x; c < C; c += kGradThreads) {
      const float x = to_float(lp[c]);
      out[c] = from_float<T>(g * (expf(x) - (nll_f - x < INFINITY ? 0.0f : NAN)));
    }
    // Finite nll means the recursions ran (and left their rows); otherwise every class is
    // already what the formula gives (NaN).
    if (!isfinite(nll)) continue;
    const int64_t at = (n * p.steps + t) * cap_states;
    const float* a = v.alpha + at;
    const float* b = v.beta + at;
    const int64_t tl = info.target_length, states = 2 * tl + 1;
    for (int64_t s = threadIdx.x; s < states; s += kGradThreads) ab[s] = a[s] + b[s];
    // The rows are log2 values relative to their offsets: the term of a class is
    // exp(occupancy - nll - lp) = 2^(occ2 + shift2 - lp * log2(e)).
    const float shift2 = static_cast<float>(v.alpha_offset[n * p.steps + t] +
                                            v.beta_offset[n * p.steps + t] + nll * kLog2e);
    __syncthreads();  // ab is complete; the pass above is ordered before the overwrites below
    const float blank_occ = block_log2_occupancy(
        ab, tl + 1, [](int64_t i) { return 2 * i; }, scratch);
    if (threadIdx.x == 0) {
      const float x = to_float(lp[p.blank]);
      out[p.blank] = from_float<T>(g * (expf(x) - exp2f(blank_occ + shift2 - x * kLog2eF)));
    }
    for (int64_t i = threadIdx.x; i < tl; i += kGradThreads) {
      const int32_t code = v.chain[n * cap + i];
      if (!(code & kFirstOfClass)) continue;
      float m = rudnn::cuda::MaxOp::identity();
      for (int64_t j = i;;) {
        m = rudnn::cuda::MaxOp{}(m, ab[2 * j + 1]);
        const int32_t next = v.chain[n * cap + j] & (kFirstOfClass - 1);
        if (next == 0) break;
        j = next - 1;
      }
      float occ = m;
      if (m == m && m != -INFINITY) {
        float sum = 0.0f;
        for (int64_t j = i;;) {
          sum += exp2f(ab[2 * j + 1] - m);
          const int32_t next = v.chain[n * cap + j] & (kFirstOfClass - 1);
          if (next == 0) break;
          j = next - 1;
        }
        occ = m + log2f(sum);
      }
      const int64_t c = load_index(p.targets, p.target_dtype, info.first + i);
      const float x = to_float(lp[c]);
      out[c] = from_float<T>(g * (expf(x) - exp2f(occ + shift2 - x * kLog2eF)));
    }
    __syncthreads();  // ab is rewritten for the next row
  }
}

// The overlapped backward (KernelTuning::overlapped_backward). The gradient of a class no
// state of the row carries is g * exp(lp) whatever the recursions give (while the loss is
// finite), so that pass over every class (all of log_probs read, all of grad written: the
// backward's traffic) needs no recursion and runs beside them, in the same launch, on the
// multiprocessors the 2N recursion blocks leave idle. fixup_kernel then rewrites the few
// classes each row's target holds, and the rows of samples whose loss is not finite.
constexpr int kUnitRows = 8;  // rows of [T * N, C] a stream block takes at a time

// Shared memory the stream part of backward_kernel uses (at the start of the dynamic part):
// the unit's ticket, then each row's factor or fill value and which of the two it is.
constexpr size_t kStreamShared = 16 + 8 * kUnitRows;

// Rows of the gradient, kUnitRows at a time from v.counter, until none are left: g * exp(x)
// (NaN where x is -inf or NaN, as exp(occupancy + nll - x) is then NaN) for the steps of a
// sample's input, 0 past them, NaN for a sample whose lengths are invalid.
template <class T, bool kVector>
__device__ __forceinline__ void stream_rows(const CtcProblem& p, const Views& v) {
  extern __shared__ float4 shared_vectors[];
  unsigned* ticket = reinterpret_cast<unsigned*>(shared_vectors);
  float* factor = reinterpret_cast<float*>(shared_vectors) + 4;
  int* fill = reinterpret_cast<int*>(factor + kUnitRows);
  const int64_t rows = p.steps * p.batch, C = p.classes;
  const int64_t units = (rows + kUnitRows - 1) / kUnitRows;
  const T* grad_loss = static_cast<const T*>(p.grad_loss);
  const int tid = threadIdx.x, threads = blockDim.x;
  for (;;) {
    if (tid == 0) *ticket = atomicAdd(v.counter, 1u);
    __syncthreads();
    const int64_t unit = *ticket;
    if (unit >= units) return;  // the same in every thread
    const int64_t r0 = unit * kUnitRows;
    const int nr = static_cast<int>(rows - r0 < kUnitRows ? rows - r0 : kUnitRows);
    if (tid < nr) {
      const int64_t row = r0 + tid, t = row / p.batch, n = row - t * p.batch;
      const SampleInfo info = v.info[n];
      if (info.lengths_bad != 0 || t >= info.input_length) {
        fill[tid] = 1;
        factor[tid] = info.lengths_bad != 0 ? NAN : 0.0f;
      } else {
        fill[tid] = 0;
        factor[tid] = to_float(grad_loss[p.reduction == CtcReduction::none ? n : 0]) *
                      static_cast<float>(reduction_factor(p, info.target_length));
      }
    }
    __syncthreads();
    if constexpr (kVector) {
      // C % 4 == 0 and both tensors 16-byte aligned: no vector straddles two rows.
      const int c4 = static_cast<int>(C / 4);
      const int total = nr * c4;
      const float4* in = reinterpret_cast<const float4*>(p.log_probs) + r0 * c4;
      float4* out = reinterpret_cast<float4*>(p.grad) + r0 * c4;
#pragma unroll 4
      for (int i = tid; i < total; i += threads) {
        const int j = i / c4;
        const float4 x = in[i];
        const float f = factor[j];
        float4 y;
        if (fill[j] != 0) {
          y = make_float4(f, f, f, f);
        } else {
          y.x = f * (expf(x.x) - (-x.x < INFINITY ? 0.0f : NAN));
          y.y = f * (expf(x.y) - (-x.y < INFINITY ? 0.0f : NAN));
          y.z = f * (expf(x.z) - (-x.z < INFINITY ? 0.0f : NAN));
          y.w = f * (expf(x.w) - (-x.w < INFINITY ? 0.0f : NAN));
        }
        out[i] = y;
      }
    } else {
      const int64_t total = nr * C;
      const T* in = static_cast<const T*>(p.log_probs) + r0 * C;
      T* out = static_cast<T*>(p.grad) + r0 * C;
#pragma unroll 4
      for (int64_t i = tid; i < total; i += threads) {
        const int j = static_cast<int>(i / C);
        const float x = to_float(in[i]);
        const float f = factor[j];
        out[i] = from_float<T>(fill[j] != 0 ? f : f * (expf(x) - (-x < INFINITY ? 0.0f : NAN)));
      }
    }
    __syncthreads();  // the ticket and the factors are rewritten for the next unit
  }
}

// Blocks [0, recursion_blocks) run the recursions (alpha of sample b for b < N, beta of
// sample b - N after), the others stream_rows. The recursion blocks come first so that the
// scheduler places them first (it hands out blocks in index order): the stream blocks fill
// the rest of the machine, and take their rows from a counter, so that the ones placed late
// (behind a recursion block) take fewer.
template <class T, bool kVector>
static __global__ void __launch_bounds__(kMaxRecursionThreads)
    backward_kernel(CtcProblem p, Views v, int chunk, int recursion_blocks) {
  const int b = static_cast<int>(blockIdx.x);
  if (b < recursion_blocks) {
    const bool beta = b >= p.batch;
    recursion_body<true>(p, v, chunk, beta ? b - p.batch : b, beta);
  } else {
    stream_rows<T, kVector>(p, v);
  }
}

// After backward_kernel: one block per (t, n) row (a grid-stride loop over rows) rewrites
// the blank and each distinct label of the row's target from alpha + beta, and the whole row
// of a sample whose labels are invalid (NaN) or whose loss is not finite (NaN, or 0 with
// zero_infinity and an infinite loss). The log-probabilities of the target's classes are
// read from the gathered (base-2) copy. Dynamic shared memory: alpha + beta of the row
// (2 * max_target + 1 floats), its gathered values (max_target + 1) and its chains
// (max_target).
template <class T>
__global__ void __launch_bounds__(kGradThreads) fixup_kernel(CtcProblem p, Views v) {
  extern __shared__ float ab[];
  __shared__ float scratch[32];
  const int64_t rows = p.steps * p.batch, C = p.classes;
  const int64_t cap = p.max_target, cap_states = 2 * cap + 1;
  const int64_t W = gathered_width(cap);
  float* xg = ab + cap_states;
  int32_t* chain = reinterpret_cast<int32_t*>(xg + cap + 1);
  const T* grad_loss = static_cast<const T*>(p.grad_loss);
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const int64_t t = row / p.batch, n = row - t * p.batch;
    T* out = static_cast<T*>(p.grad) + row * C;
    const SampleInfo info = v.info[n];
    if (info.lengths_bad != 0) continue;  // stream_rows wrote NaN
    const double nll = v.nll[n];
    if (info.labels_bad != 0 || (t < info.input_length && !isfinite(nll))) {
      const T fill =
          from_float<T>(info.labels_bad == 0 && p.zero_infinity && isinf(nll) ? 0.0f : NAN);
      for (int64_t c = threadIdx.x; c < C; c += kGradThreads) out[c] = fill;
      continue;
    }
    if (t >= info.input_length) continue;  // stream_rows wrote 0
    const float g = to_float(grad_loss[p.reduction == CtcReduction::none ? n : 0]) *
                    static_cast<float>(reduction_factor(p, info.target_length));
    const int64_t at = (n * p.steps + t) * cap_states;
    const float* a = v.alpha + at;
    const float* b = v.beta + at;
    const int64_t tl = info.target_length, states = 2 * tl + 1;
    for (int64_t s = threadIdx.x; s < states; s += kGradThreads) ab[s] = a[s] + b[s];
    const float* gathered_row = v.gathered + (n * p.steps + t) * W;
    for (int64_t u = threadIdx.x; u <= tl; u += kGradThreads) xg[u] = gathered_row[u];
    for (int64_t i = threadIdx.x; i < tl; i += kGradThreads) chain[i] = v.chain[n * cap + i];
    const float shift2 = static_cast<float>(v.alpha_offset[n * p.steps + t] +
                                            v.beta_offset[n * p.steps + t] + nll * kLog2e);
    __syncthreads();
    const float blank_occ = block_log2_occupancy(
        ab, tl + 1, [](int64_t i) { return 2 * i; }, scratch);
    if (threadIdx.x == 0) {
      const float x = xg[0];
      out[p.blank] = from_float<T>(g * (exp2f(x) - exp2f(blank_occ + shift2 - x)));
    }
    for (int64_t i = threadIdx.x; i < tl; i += kGradThreads) {
      if (!(chain[i] & kFirstOfClass)) continue;
      float m = rudnn::cuda::MaxOp::identity();
      for (int64_t j = i;;) {
        m = rudnn::cuda::MaxOp{}(m, ab[2 * j + 1]);
        const int32_t next = chain[j] & (kFirstOfClass - 1);
        if (next == 0) break;
        j = next - 1;
      }
      float occ = m;
      if (m == m && m != -INFINITY) {
        float sum = 0.0f;
        for (int64_t j = i;;) {
          sum += exp2f(ab[2 * j + 1] - m);
          const int32_t next = chain[j] & (kFirstOfClass - 1);
          if (next == 0) break;
          j = next - 1;
        }
        occ = m + log2f(sum);
      }
      const int64_t c = load_index(p.targets, p.target_dtype, info.first + i);
      const float x = xg[i + 1];
      out[c] = from_float<T>(g * (exp2f(x) - exp2f(occ + shift2 - x)));
    }
    __syncthreads();  // the shared row is rewritten for the next row
  }
}

// The recursion's block size, block of steps and shared memory for max_target.
RecursionShape recursion_shape(const CtcProblem& p, Device device);
// Raises a kernel's dynamic shared memory limit to what the device's opt-in maximum leaves
// beside the kernel's static shared memory: asking for the whole opt-in maximum is refused
// as an invalid value (once per device and kernel).
template <class Kernel>
void allow_shared(Kernel kernel, Device device, rudnn::cuda::PerDevice<int>& done) {
  done.get(device, [&] {
    cudaFuncAttributes attributes{};
    detail::check_cuda(cudaFuncGetAttributes(&attributes, kernel), "cudaFuncGetAttributes");
    const size_t optin = rudnn::cuda::device_info(device).shared_bytes_per_block_optin;
    detail::check_cuda(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                            static_cast<int>(optin - attributes.sharedSizeBytes)),
                       "cudaFuncSetAttribute");
    return 1;
  });
}

// The labels' log-probabilities gathered per step (after prepare_kernel).
template <class T>
void launch_gather(const CtcProblem& p, const Views& v,
                   const rudnn::cuda::LaunchContext& ctx) {
  static rudnn::cuda::PerDevice<int> shared_allowed;
  if (p.steps == 0) return;
  const size_t label_bytes = sizeof(int32_t) * static_cast<size_t>(p.max_target + 1);
  allow_shared(gather_kernel<T>, ctx.device, shared_allowed);
  const int64_t step_blocks = (p.steps + kGatherSteps - 1) / kGatherSteps;
  gather_kernel<T><<<dim3(static_cast<unsigned>(p.batch),
                          static_cast<unsigned>(step_blocks < 65535 ? step_blocks : 65535)),
                     kGatherThreads, label_bytes, ctx.stream>>>(p, v);
}

// The launches every direction starts with: lengths checked, labels' log-probabilities
// gathered.
template <class T>
void prepare_and_gather(const CtcProblem& p, const Views& v,
                        const rudnn::cuda::LaunchContext& ctx) {
  prepare_kernel<<<1, kPrepareThreads, 0, ctx.stream>>>(p, v);
  launch_gather<T>(p, v, ctx);
}

template <class T>
void ctc_loss_typed(const CtcProblem& p, const rudnn::cuda::LaunchContext& ctx) {
  static rudnn::cuda::PerDevice<int> shared_allowed;
  const Views v = scratch_views(p, false);
  if (p.batch > 0) {
    prepare_and_gather<T>(p, v, ctx);
    const RecursionShape r = recursion_shape(p, ctx.device);
    const bool split = kernel_tuning().split_forward;
    allow_shared(recursion_kernel<false>, ctx.device, shared_allowed);
    recursion_kernel<false><<<dim3(static_cast<unsigned>(p.batch), split ? 2 : 1), r.threads,
                              r.shared, ctx.stream>>>(p, v, r.chunk, split);
    if (split) meet_kernel<<<static_cast<unsigned>(p.batch), kMeetThreads, 0, ctx.stream>>>(p, v);
  }
  const bool per_sample = p.reduction == CtcReduction::none;
  if (per_sample && p.batch == 0) return;
  const int64_t blocks = per_sample ? (p.batch + kLossThreads - 1) / kLossThreads : 1;
  loss_kernel<T>
      <<<static_cast<unsigned>(blocks < 65536 ? blocks : 65536), kLossThreads, 0, ctx.stream>>>(p,
                                                                                                v);
  detail::check_launch("ctc_loss");
}

// Resident blocks of a kernel per multiprocessor at `threads` and `shared` (a host-side
// computation: no synchronisation).
template <class Kernel>
int resident_blocks(Kernel kernel, int threads, size_t shared) {
  int blocks = 0;
  detail::check_cuda(
      cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kernel, threads, shared),
      "cudaOccupancyMaxActiveBlocksPerMultiprocessor");
  return blocks > 0 ? blocks : 1;
}

template <class T, bool kVector>
void launch_overlapped(const CtcProblem& p, const Views& v, const RecursionShape& r, int phases,
                       const rudnn::cuda::LaunchContext& ctx) {
  static rudnn::cuda::PerDevice<int> shared_allowed;
  const auto kernel = backward_kernel<T, kVector>;
  allow_shared(kernel, ctx.device, shared_allowed);
  const size_t shared = r.shared > kStreamShared ? r.shared : kStreamShared;
  const int recursion_blocks = (phases & kPhaseRecursions) ? static_cast<int>(2 * p.batch) : 0;
  int64_t stream_blocks = 0;
  if (phases & kPhaseStream) {
    const int64_t units = (p.steps * p.batch + kUnitRows - 1) / kUnitRows;
    const int64_t slots = static_cast<int64_t>(resident_blocks(kernel, r.threads, shared)) *
                          rudnn::cuda::device_info(ctx.device).multiprocessors;
    stream_blocks = units < slots ? units : slots;
  }
  const int64_t blocks = recursion_blocks + stream_blocks;
  if (blocks == 0) return;
  kernel<<<static_cast<unsigned>(blocks), r.threads, shared, ctx.stream>>>(p, v, r.chunk,
                                                                          recursion_blocks);
}

template <class T>
void ctc_loss_backward_typed(const CtcProblem& p, const rudnn::cuda::LaunchContext& ctx) {
  static rudnn::cuda::PerDevice<int> shared_allowed, grad_shared_allowed, fixup_shared_allowed;
  const KernelTuning& tuning = kernel_tuning();
  const int phases = tuning.backward_phases;
  const Views v = scratch_views(p, true);
  prepare_kernel<<<1, kPrepareThreads, 0, ctx.stream>>>(p, v);
  if (phases & kPhaseGather) launch_gather<T>(p, v, ctx);
  const RecursionShape r = recursion_shape(p, ctx.device);
  const int64_t rows = p.steps * p.batch;
  const unsigned row_blocks = static_cast<unsigned>(rows < (1 << 24) ? rows : (1 << 24));
  if (tuning.overlapped_backward) {
    const bool vector = std::is_same_v<T, float> && p.classes % 4 == 0 &&
                        p.classes < (int64_t{1} << 28) &&
                        reinterpret_cast<uintptr_t>(p.log_probs) % 16 == 0 &&
                        reinterpret_cast<uintptr_t>(p.grad) % 16 == 0;
    if (vector) {
      launch_overlapped<T, true>(p, v, r, phases, ctx);
    } else {
      launch_overlapped<T, false>(p, v, r, phases, ctx);
    }
    if (phases & kPhaseFixup) {
      const size_t bytes = sizeof(float) * static_cast<size_t>(4 * p.max_target + 2);
      allow_shared(fixup_kernel<T>, ctx.device, fixup_shared_allowed);
      fixup_kernel<T><<<row_blocks, kGradThreads, bytes, ctx.stream>>>(p, v);
    }
  } else {
    if (phases & kPhaseRecursions) {
      allow_shared(recursion_kernel<true>, ctx.device, shared_allowed);
      recursion_kernel<true><<<dim3(static_cast<unsigned>(p.batch), 2), r.threads, r.shared,
                               ctx.stream>>>(p, v, r.chunk, false);
    }
    if (phases & kPhaseFixup) {
      const size_t ab_bytes = sizeof(float) * static_cast<size_t>(2 * p.max_target + 1);
      allow_shared(grad_kernel<T>, ctx.device, grad_shared_allowed);
      grad_kernel<T><<<row_blocks, kGradThreads, ab_bytes, ctx.stream>>>(p, v);
    }
  }
  detail::check_launch("ctc_loss_backward");
}

}  // namespace rudnn::ctc::cuda
