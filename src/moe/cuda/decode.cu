// The small-batch (decode) forward straight from the routing plan: SwiGluExperts::forward*
// with Auto on a CUDA device and T * top_k <= kDecodeRows (kDecodeRowsWithTensorCores where
// the tensor-core GEMMs serve: problem.h). No dispatch: the projections are
// matrix-vector products bound by reading the selected experts' weights, and the kernels
// read the tokens' rows in place.
//
// - Each block finds its expert itself: the selected experts form a bitmask over E in shared
//   memory (integer atomicOr: order-free), block y takes the y-th set bit (ascending ids), and
//   lists that expert's slots (t, j) in slot order. The grid covers min(T * top_k, E) expert
//   slots: T = 1 at top-8 launches blocks for 8 experts, not E.
// - gate/up: one warp per output feature n of the expert streams the gate and up rows in
//   16-byte packs, U packs a lane in flight, against the expert's token rows (R per pass,
//   from L1/L2); SiLU(gate) * up is formed in place into act [T * top_k, I], row = slot.
// - down, small T (kDecodeFusedTokens): the combine folded in. A block owns token t and a few
//   output features; its warps take the (feature, slot) pairs, each streaming one down row,
//   and the k results are summed in slot order from shared memory. An expert shared by
//   several tokens is streamed once per token (the repeats from L2), hence the T bound.
// - down, larger T: the same expert-major kernel as gate/up into y [T * top_k, H], then a
//   combine kernel summing each token's k rows in slot order.
// - Every dot product is folded over the warp in a fixed order, each lane visiting its
//   elements in increasing order: the results equal route -> dispatch -> forward_dispatched
//   (Auto) -> combine bit for bit, and are bitwise reproducible; no float atomics.
// - The kernels after the first are launched as programmatic dependents (sm_90): each starts
//   while its producer drains, finds its expert and issues its first weight loads, then waits
//   (griddepcontrol.wait) before reading what the producer wrote.
#include <cstdint>

#include "core/cuda_check.h"
#include "cuda/launch.cuh"
#include "cuda/vec.cuh"
#include "moe/cuda/decode_tuning.h"
#include "moe/cuda/dependent_launch.cuh"
#include "moe/cuda/launch.h"
#include "moe/cuda/weights.cuh"
#include "rudnn/tensor.h"

namespace rudnn::moe::cuda {

namespace {

using ::rudnn::cuda::from_float;
using ::rudnn::cuda::Pack;
using ::rudnn::cuda::pack_element;
using ::rudnn::cuda::round_to;

constexpr int kWarps = 8, kThreads = kWarps * 32;
constexpr int kMaskWords = static_cast<int>(kDecodeMaxExperts / 32);
constexpr int kSlotsPerThread = static_cast<int>(kDecodeRows / kThreads);
static_assert(kSlotsPerThread * kThreads == kDecodeRows);

__device__ __forceinline__ float warp_fold(float v) {
#pragma unroll
  for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// The block's expert and its slots. Whole-block call; every thread gets the same answer.
struct ExpertSlots {
  uint32_t mask[kMaskWords];
  int32_t slot[kDecodeRows];  // the expert's slots t * top_k + j, ascending
  int warp_counts[kWarps];
  int64_t expert;
  int count;
};

// The rank-th selected expert (ascending ids) and its slots, or expert -1 when fewer experts
// were selected. Indices are read through L2 (__ldcg): the block may run before its
// producer's completion is awaited, but never before the routing kernel's (see the header).
__device__ void find_expert(const DecodeForward& p, int64_t rank, ExpertSlots& s) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int64_t slots = p.tokens * p.top_k;
  const int words = static_cast<int>((p.experts + 31) / 32);
  for (int w = threadIdx.x; w < words; w += kThreads) s.mask[w] = 0;
  if (threadIdx.x == 0) s.expert = -1;
  __syncthreads();
  // Thread x holds slots x and x + kThreads (slots <= kDecodeRows = 2 * kThreads): one read.
  uint32_t held[kSlotsPerThread];
#pragma unroll
  for (int q = 0; q < kSlotsPerThread; ++q) {
    const int64_t i = threadIdx.x + q * kThreads;
    held[q] = i < slots ? __ldcg(p.indices + i) : 0xffffffffu;
    if (held[q] < p.experts) atomicOr(&s.mask[held[q] / 32], 1u << (held[q] % 32));
  }
  __syncthreads();
  if (warp == 0) {
    // Lane l owns words [l * per_lane, (l + 1) * per_lane): an inclusive scan of their counts.
    const int per_lane = (words + 31) / 32;
    const int first = min(lane * per_lane, words), last = min(first + per_lane, words);
    int mine = 0;
    for (int w = first; w < last; ++w) mine += __popc(s.mask[w]);
    int inclusive = mine;
#pragma unroll
    for (int o = 1; o < 32; o *= 2) {
      const int v = __shfl_up_sync(0xffffffffu, inclusive, o);
      if (lane >= o) inclusive += v;
    }
    int64_t r = rank - (inclusive - mine);
    if (r >= 0 && r < mine) {
      for (int w = first; w < last; ++w) {
        uint32_t m = s.mask[w];
        const int n = __popc(m);
        if (r < n) {
          for (int64_t i = 0; i < r; ++i) m &= m - 1;
          s.expert = static_cast<int64_t>(w) * 32 + (__ffs(static_cast<int>(m)) - 1);
          break;
        }
        r -= n;
      }
    }
  }
  __syncthreads();
  const int64_t expert = s.expert;
  if (expert < 0) return;
  // The expert's slots in slot order: a block-wide ordered compaction, kThreads slots a step.
  int count = 0;
#pragma unroll
  for (int q = 0; q < kSlotsPerThread; ++q) {
    const int64_t i = threadIdx.x + q * kThreads;
    const bool mine = i < slots && held[q] == expert;
    const unsigned ballot = __ballot_sync(0xffffffffu, mine);
    if (lane == 0) s.warp_counts[warp] = __popc(ballot);
    __syncthreads();
    int at = count + __popc(ballot & ((1u << lane) - 1u)), step = 0;
    for (int w = 0; w < kWarps; ++w) {
      if (w < warp) at += s.warp_counts[w];
      step += s.warp_counts[w];
    }
    if (mine) s.slot[at] = static_cast<int32_t>(i);
    count += step;
    __syncthreads();  // warp_counts is rewritten by the next step
  }
  if (threadIdx.x == 0) s.count = count;
  __syncthreads();
}

// Expert-major projection: for the expert of slot blockIdx.y, features n of this block and
// every slot of the expert: with kTwo, act[slot, n] = SwiGLU(<gate_e[n], x>, <up_e[n], x>)
// (x the slot's token row of the input); without, y[slot, n] = <down_e[n], act[slot]>.
// A block covers kWarps * per_warp features; W elements per load, U loads a lane in flight,
// R slots per pass.
template <class T, bool kTwo, int W, int U, int R>
__global__ void __launch_bounds__(kThreads)
    expert_gemv_kernel(DecodeForward p, const T* a, T* c, int per_warp) {
  using P = Pack<T, W>;
  __shared__ ExpertSlots s;
  // gate/up reads the routing kernel's indices: wait first. down's producer is gate/up, which
  // awaited the routing before letting it start: find the expert first.
  if constexpr (kTwo) wait_for_producer();
  find_expert(p, blockIdx.y, s);
  if constexpr (!kTwo) wait_for_producer();
  allow_dependents();
  const int64_t expert = s.expert;
  if (expert < 0) return;
  const int count = s.count;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int64_t n_out = kTwo ? p.inter : p.hidden, k = kTwo ? p.hidden : p.inter;
  const int64_t row_stride = kTwo ? p.top_k : 1;  // input rows are per token, act per slot
  const T* b_all = static_cast<const T*>(kTwo ? p.gate : p.down);
  const T* b2_all = static_cast<const T*>(p.up);
  for (int f = 0; f < per_warp; ++f) {
    const int64_t n = (static_cast<int64_t>(blockIdx.x) * per_warp + f) * kWarps + warp;
    if (n >= n_out) break;
    const T* b = b_all + (expert * n_out + n) * k;
    const T* b2 = kTwo ? b2_all + (expert * n_out + n) * k : nullptr;
    for (int r0 = 0; r0 < count; r0 += R) {
      const T* x[R];
#pragma unroll
      for (int j = 0; j < R; ++j)
        x[j] = a + static_cast<int64_t>(s.slot[min(r0 + j, count - 1)] / row_stride) * k;
      float acc[R] = {}, acc2[kTwo ? R : 1] = {};
      if constexpr (U == 1) {
        // One pack a lane at a time, converted once and dotted against every row: the
        // dispatched kernel's loop (experts_decode.cuh), the fastest measured for several rows.
        for (int64_t h = static_cast<int64_t>(lane) * W; h < k; h += 32 * W) {
          float wv[W], w2[W], xv[W];
          ::rudnn::cuda::load_pack<T, W>(b + h, wv);
          if constexpr (kTwo) ::rudnn::cuda::load_pack<T, W>(b2 + h, w2);
#pragma unroll
          for (int j = 0; j < R; ++j) {
            if (r0 + j < count) {  // a guard, not a break: acc stays in registers
              ::rudnn::cuda::load_pack<T, W>(x[j] + h, xv);
#pragma unroll
              for (int q = 0; q < W; ++q) {
                acc[j] = fmaf(wv[q], xv[q], acc[j]);
                if constexpr (kTwo) acc2[j] = fmaf(w2[q], xv[q], acc2[j]);
              }
            }
          }
        }
      }
      for (int64_t h0 = static_cast<int64_t>(lane) * W; U > 1 && h0 < k; h0 += 32 * W * U) {
        P wp[U], wp2[kTwo ? U : 1];
#pragma unroll
        for (int u = 0; u < U; ++u) {
          const int64_t h = h0 + u * 32 * W;
          if (h < k) {
            wp[u] = *reinterpret_cast<const P*>(b + h);
            if constexpr (kTwo) wp2[u] = *reinterpret_cast<const P*>(b2 + h);
          }
        }
#pragma unroll
        for (int u = 0; u < U; ++u) {
          const int64_t h = h0 + u * 32 * W;
          if (h >= k) break;
#pragma unroll
          for (int j = 0; j < R; ++j) {
            if (r0 + j < count) {  // a guard, not a break: acc stays in registers
              const P xp = *reinterpret_cast<const P*>(x[j] + h);
#pragma unroll
              for (int q = 0; q < W; ++q) {
                const float xv = pack_element(xp, q);
                acc[j] = fmaf(pack_element(wp[u], q), xv, acc[j]);
                if constexpr (kTwo) acc2[j] = fmaf(pack_element(wp2[u], q), xv, acc2[j]);
              }
            }
          }
        }
      }
#pragma unroll
      for (int j = 0; j < R; ++j) {
        if (r0 + j >= count) continue;  // uniform over the warp
        const float v = warp_fold(acc[j]);
        float v2 = 0.0f;
        if constexpr (kTwo) v2 = warp_fold(acc2[j]);
        if (lane != 0) continue;
        const int64_t at = static_cast<int64_t>(s.slot[r0 + j]) * n_out + n;
        if constexpr (kTwo) {
          // As the dispatched decode kernel writes it (experts_decode.cuh): the same bits.
          const float g = round_to<T>(v), up = round_to<T>(v2);
          c[at] = from_float<T>(round_to<T>(g / (1.0f + expf(-g))) * up);
        } else {
          c[at] = from_float<T>(v);
        }
      }
    }
  }
}

// The down projection with the combine folded in, for token blockIdx.x and features
// [blockIdx.y * per_block, + per_block): warp w takes the pairs (feature, slot j) w, w + 8, ...
// and the token's k results per feature are summed in slot order:
// out[t, n] = sum_j w[t, j] * round_T(<down_e(t,j)[n], act[t * k + j]>), the unfused
// combine's arithmetic. The first pair's first loads are issued before waiting for gate/up.
template <class T, int W, int U>
__global__ void __launch_bounds__(kThreads)
    down_combine_kernel(DecodeForward p, const T* act, int per_block) {
  using P = Pack<T, W>;
  __shared__ float ys[kDecodeRows + kWarps];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int64_t t = blockIdx.x, top_k = p.top_k, k = p.inter, hidden = p.hidden;
  const int64_t n0 = static_cast<int64_t>(blockIdx.y) * per_block;
  const int pairs = per_block * static_cast<int>(top_k);
  const T* down = static_cast<const T*>(p.down);
  const auto row_of = [&](int pair) -> const T* {
    const int64_t n = min(n0 + pair / top_k, hidden - 1);
    const int64_t expert = __ldcg(p.indices + t * top_k + pair % top_k);
    return down + (expert * hidden + n) * k;
  };
  P wp[U];
  if (warp < pairs) {
    const T* b = row_of(warp);
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int64_t h = static_cast<int64_t>(lane) * W + u * 32 * W;
      if (h < k) wp[u] = *reinterpret_cast<const P*>(b + h);
    }
  }
  wait_for_producer();
  for (int pair = warp; pair < pairs; pair += kWarps) {
    const T* b = row_of(pair);
    const T* a = act + (t * top_k + pair % top_k) * k;
    float acc = 0.0f;
    for (int64_t h0 = static_cast<int64_t>(lane) * W; h0 < k; h0 += 32 * W * U) {
      if (pair != warp || h0 != static_cast<int64_t>(lane) * W) {
#pragma unroll
        for (int u = 0; u < U; ++u) {
          const int64_t h = h0 + u * 32 * W;
          if (h < k) wp[u] = *reinterpret_cast<const P*>(b + h);
        }
      }
      P xp[U];
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int64_t h = h0 + u * 32 * W;
        if (h < k) xp[u] = *reinterpret_cast<const P*>(a + h);
      }
#pragma unroll
      for (int u = 0; u < U; ++u) {
        if (h0 + u * 32 * W >= k) break;
#pragma unroll
        for (int q = 0; q < W; ++q) acc = fmaf(pack_element(wp[u], q), pack_element(xp[u], q), acc);
      }
    }
    const float y = round_to<T>(warp_fold(acc));
    if (lane == 0) ys[pair] = y;
  }
  __syncthreads();
  const int f = threadIdx.x;
  if (f >= per_block || n0 + f >= hidden) return;
  float total = 0.0f;
  for (int64_t j = 0; j < top_k; ++j) {
    const float w = load_weight(p.weight_dtype, p.weights, t * top_k + j);
    total += w * ys[f * top_k + j];
  }
  static_cast<T*>(p.out)[t * hidden + n0 + f] = from_float<T>(total);
}

// out[t] = sum_j w[t, j] * y[t * k + j] in slot order (dispatch.cu's combine arithmetic).
template <class T>
__global__ void __launch_bounds__(kThreads) combine_kernel(DecodeForward p, const T* y) {
  wait_for_producer();
  const int64_t t = blockIdx.x, k = p.top_k, hidden = p.hidden;
  for (int64_t h = threadIdx.x; h < hidden; h += kThreads) {
    float acc = 0.0f;
    for (int64_t j = 0; j < k; ++j) {
      const float w = load_weight(p.weight_dtype, p.weights, t * k + j);
      acc += w * ::rudnn::cuda::to_float(y[(t * k + j) * hidden + h]);
    }
    static_cast<T*>(p.out)[t * hidden + h] = from_float<T>(acc);
  }
}

constexpr const char* kWhat = "forward (decode)";

inline bool aligned16(const void* ptr) { return reinterpret_cast<uintptr_t>(ptr) % 16 == 0; }

unsigned ceil_div(int64_t a, int64_t b) { return static_cast<unsigned>((a + b - 1) / b); }

// Expert-major launch with R slots per pass (1, 4 or 8 from the most an expert holds) and
// per_warp features a warp, so that larger batches make fewer, longer blocks (each block
// scans the T * top_k indices once).
template <class T, bool kTwo, int W>
void launch_gemv(const DecodeForward& p, const T* a, T* c, int64_t most_rows, cudaStream_t stream) {
  const int64_t slots = p.tokens * p.top_k;
  const int64_t experts = slots < p.experts ? slots : p.experts;
  const int64_t n_out = kTwo ? p.inter : p.hidden;
  const int per_warp = decode_tuning().features_per_warp > 0 ? decode_tuning().features_per_warp
                       : experts >= 32                       ? 2
                                                             : 1;
  const dim3 grid(ceil_div(n_out, kWarps * per_warp), static_cast<unsigned>(experts));
  constexpr int kU = 1;  // several rows: one pack at a time (see expert_gemv_kernel)
  if constexpr (kTwo) {
    if (most_rows <= 1) {  // one row: the whole gate and up rows (H = 2048 bf16) in flight
      launch_dependent(decode_tuning().dependent_launch, expert_gemv_kernel<T, true, W, 8, 1>, grid,
                       kThreads, stream, kWhat, p, a, c, per_warp);
      return;
    }
    if (most_rows <= 4) {  // fewer accumulators: more blocks resident
      launch_dependent(decode_tuning().dependent_launch, expert_gemv_kernel<T, true, W, kU, 4>,
                       grid, kThreads, stream, kWhat, p, a, c, per_warp);
      return;
    }
  }
  launch_dependent(decode_tuning().dependent_launch, expert_gemv_kernel<T, kTwo, W, kU, 8>, grid,
                   kThreads, stream, kWhat, p, a, c, per_warp);
}

template <class T>
void decode_forward_typed(const DecodeForward& p, const Stream& stream) {
  const ::rudnn::cuda::LaunchContext ctx(stream);
  constexpr int kW = 16 / sizeof(T);
  const int64_t slots = p.tokens * p.top_k;
  // Every scratch is freed stream-ordered after the kernels that use it.
  const Tensor act = Tensor::empty({slots, p.inter}, p.dtype, ctx.device, stream);
  T* const act_data = static_cast<T*>(act.data());
  // Larger batches: the down projection's rows, allocated before the first launch so that
  // nothing (a poisoning fill) separates the kernels of the chain.
  const int64_t fused_tokens =
      decode_tuning().fused_tokens >= 0 ? decode_tuning().fused_tokens : kDecodeFusedTokens;
  const bool fused = p.tokens <= fused_tokens;
  const Tensor y = fused ? Tensor{} : Tensor::empty({slots, p.hidden}, p.dtype, ctx.device, stream);
  const T* const input = static_cast<const T*>(p.input);
  // Each token selects an expert once: an expert holds at most T rows.
  const int64_t most_rows = p.tokens;
  // The same packing rule as the dispatched kernels (experts_decode.cuh), whose rows are
  // fresh allocations: packed when the row length allows and the weights are aligned.
  const bool gate_packed = p.hidden % kW == 0 && aligned16(p.gate) && aligned16(p.up);
  const bool down_packed = p.inter % kW == 0 && aligned16(p.down);
  if (gate_packed) {
    launch_gemv<T, true, kW>(p, input, act_data, most_rows, ctx.stream);
  } else {
    launch_gemv<T, true, 1>(p, input, act_data, most_rows, ctx.stream);
  }
  if (fused) {
    // Features per block: k pairs each, about kWarps pairs in all. Six 16-byte loads a lane
    // cover a bf16 row of I = 1408 in one pass, in registers for three blocks an SM.
    const int per_block =
        static_cast<int>(p.top_k >= kWarps ? 1 : (kWarps + p.top_k - 1) / p.top_k);
    const dim3 grid(static_cast<unsigned>(p.tokens), ceil_div(p.hidden, per_block));
    if (down_packed) {
      launch_dependent(decode_tuning().dependent_launch, down_combine_kernel<T, kW, 6>, grid,
                       kThreads, ctx.stream, kWhat, p, static_cast<const T*>(act_data), per_block);
    } else {
      launch_dependent(decode_tuning().dependent_launch, down_combine_kernel<T, 1, 6>, grid,
                       kThreads, ctx.stream, kWhat, p, static_cast<const T*>(act_data), per_block);
    }
  } else {
    T* const y_data = static_cast<T*>(y.data());
    if (down_packed) {
      launch_gemv<T, false, kW>(p, act_data, y_data, most_rows, ctx.stream);
    } else {
      launch_gemv<T, false, 1>(p, act_data, y_data, most_rows, ctx.stream);
    }
    launch_dependent(decode_tuning().dependent_launch, combine_kernel<T>,
                     dim3(static_cast<unsigned>(p.tokens)), kThreads, ctx.stream, kWhat, p,
                     static_cast<const T*>(y_data));
  }
}

}  // namespace

DecodeTuning& decode_tuning() {
  static DecodeTuning tuning;
  return tuning;
}

void decode_forward(const DecodeForward& p, const Stream& stream) {
  if (p.tokens == 0) return;
  ::rudnn::cuda::with_float_type(p.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    decode_forward_typed<T>(p, stream);
  });
}

}  // namespace rudnn::moe::cuda
