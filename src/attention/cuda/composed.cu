// Composed attention: per block of query rows (plan.block_rows rows of plan.block_heads
// (batch, head) pairs), the scores S = scale · Q Kᵀ in FP32 from the internal GEMM (tensor
// cores for 16-bit, FP32 on CUDA cores for F32), one kernel that turns each score row into
// probabilities (softcap, ALiBi, bias, masks, causal and window ranges, the sink) and writes
// the row's logsumexp, then O = P V from the GEMM. Blocks run one after another on the
// stream and reuse one block's scratch. Keys a block's rows cannot see (causal, window) are
// left out of its products.
#include <algorithm>

#include "attention/cuda/common.cuh"
#include "attention/cuda/kernels.h"
#include "attention/cuda/launch.h"
#include "attention/plan.h"
#include "cuda/launch.cuh"
#include "cuda/reduce.cuh"
#include "gemm/gemm.h"

namespace rudnn::attn::cuda {

namespace {

using rudnn::cuda::LaunchContext;

constexpr int kSoftmaxThreads = 256;

struct SoftmaxArgs {
  AttentionSizes sizes;
  ScoreRules rules;
  float* scores = nullptr;  // [heads * rows, ld], FP32: scale · q·k on entry
  void* probs = nullptr;    // [heads * rows, ld] in the dtype (F32: the scores' own memory)
  int64_t ld = 0;
  int64_t head0 = 0;       // first (batch, head) pair of the block, as b * Hq + h
  int rows = 0;            // rows of the block (per head)
  int i0 = 0;              // its first query
  int key0 = 0, keys = 0;  // the block's keys [key0, key0 + keys)
  float* lse = nullptr;
  RowStats lse_layout;
  BshdOut out;  // written (zeros) only for blocks without keys
};

// One score row per block: logits in place (pass 1, folding the online (max, sum)), then
// the probabilities (pass 2).
template <class T>
__global__ void __launch_bounds__(kSoftmaxThreads) composed_softmax_kernel(const SoftmaxArgs a) {
  __shared__ rudnn::cuda::SoftmaxState scratch[32];
  const int64_t row = blockIdx.x;
  const int head_local = static_cast<int>(row / a.rows), ii = static_cast<int>(row % a.rows);
  const int64_t pair = a.head0 + head_local;
  const int64_t b = pair / a.sizes.heads_q;
  const int h = static_cast<int>(pair % a.sizes.heads_q);
  const int i = a.i0 + ii;
  const int len_q = static_cast<int>(a.sizes.len_q), len_k = static_cast<int>(a.sizes.len_k);
  const ScoreRules& rules = a.rules;
  const KeyRange range = key_range(rules, i, len_q, len_k);
  const RowRules rr = row_rules(rules, h, i, len_q, len_k);
  float* const s_row = a.scores + row * a.ld;

  rudnn::cuda::SoftmaxState state{kNegInf, 0.0f};
  for (int jj = threadIdx.x; jj < a.keys; jj += kSoftmaxThreads) {
    const int j = a.key0 + jj;
    const bool in = j >= range.lo && j < range.hi;
    const float s = in ? logit(rules, rr, b, soft_capped(rules, s_row[jj]), j) : kNegInf;
    s_row[jj] = s;
    float one[1] = {s};
    rudnn::cuda::fold<1>(state, one);
  }
  state = rudnn::cuda::group_reduce<kSoftmaxThreads>(state, rudnn::cuda::SoftmaxMerge{}, scratch);
  const RowEnd end = finish_row(state.max, state.sum, rules.sinks != nullptr, sink_of(rules, h));
  T* const p_row = static_cast<T*>(a.probs) + row * a.ld;
  for (int jj = threadIdx.x; jj < a.keys; jj += kSoftmaxThreads) {
    const float s = s_row[jj];
    const float p = s == kNegInf ? 0.0f : __expf(s - state.max) * end.factor;
    p_row[jj] = from_float<T>(p);
  }
  if (threadIdx.x == 0 && a.lse) {
    a.lse[b * a.lse_layout.stride_b + static_cast<int64_t>(h) * a.lse_layout.stride_h + i] =
        end.lse;
  }
  if (a.keys == 0) {
    // No product will write this row: it is zeros.
    T* const orow = static_cast<T*>(a.out.data) + b * a.out.batch_stride +
                    static_cast<int64_t>(i) * a.out.seq_stride +
                    static_cast<int64_t>(h) * a.out.head_stride;
    for (int d = threadIdx.x; d < a.sizes.dim_v; d += kSoftmaxThreads)
      orow[d] = from_float<T>(0.0f);
  }
}

// A leading dimension the GEMM takes: any value serves a matrix of one row (or column).
int64_t leading(int64_t stride, int64_t extent, int64_t count) {
  return count <= 1 ? std::max(stride, extent) : stride;
}

// The keys rows [i0, i1) can see: the union of their ranges.
KeyRange block_keys(const ScoreRules& rules, int i0, int i1, int len_q, int len_k) {
  auto range = [&](int i) {
    const int64_t pos = static_cast<int64_t>(i) + len_k - len_q;
    int64_t hi = len_k, lo = 0;
    if (rules.causal) hi = std::min<int64_t>(hi, pos + 1);
    if (rules.window > 0) lo = std::max<int64_t>(lo, pos - rules.window + 1);
    return KeyRange{static_cast<int>(std::max<int64_t>(lo, 0)),
                    static_cast<int>(std::max<int64_t>(hi, 0))};
  };
  const KeyRange first = range(i0), last = range(i1 - 1);
  return {first.lo, std::max(first.lo, last.hi)};
}

}  // namespace

void composed_forward(const AttentionForward& p, const Stream& stream) {
  const LaunchContext ctx(stream);
  const AttentionSizes& sz = p.sizes;
  const int64_t pairs = sz.batch * sz.heads_q;
  const int group = static_cast<int>(sz.heads_q / sz.heads_kv);
  const ComposedLayout layout = composed_layout(p.plan, sz.len_k, p.dtype);
  char* const scratch = static_cast<char*>(p.scratch);
  float* const scores = reinterpret_cast<float*>(scratch + layout.scores);
  void* const probs = p.dtype == DType::f32 ? static_cast<void*>(scores)
                                            : static_cast<void*>(scratch + layout.probs);
  const size_t esize = dtype_size(p.dtype);
  auto at = [&](const auto& view, int64_t b, int64_t s, int64_t h) {
    return static_cast<int64_t>(esize) *
           (b * view.batch_stride + s * view.seq_stride + h * view.head_stride);
  };

  for (int64_t head0 = 0; head0 < pairs; head0 += p.plan.block_heads) {
    const int64_t heads = std::min<int64_t>(p.plan.block_heads, pairs - head0);
    for (int64_t i0 = 0; i0 < sz.len_q; i0 += p.plan.block_rows) {
      const int rows = static_cast<int>(std::min<int64_t>(p.plan.block_rows, sz.len_q - i0));
      const KeyRange keys = block_keys(p.rules, static_cast<int>(i0), static_cast<int>(i0) + rows,
                                       static_cast<int>(sz.len_q), static_cast<int>(sz.len_k));
      const int n = keys.hi - keys.lo;
      if (n > 0) {
        for (int64_t e = 0; e < heads; ++e) {
          const int64_t b = (head0 + e) / sz.heads_q, h = (head0 + e) % sz.heads_q, hk = h / group;
          gemm::GemmParams g;
          g.dtype = p.dtype;
          g.m = rows;
          g.n = n;
          g.k = sz.dim_qk;
          g.a = {static_cast<const char*>(p.q.data) + at(p.q, b, i0, h), gemm::Layout::RowMajor,
                 leading(p.q.seq_stride, sz.dim_qk, rows)};
          g.b = {static_cast<const char*>(p.k.data) + at(p.k, b, keys.lo, hk),
                 gemm::Layout::ColMajor, leading(p.k.seq_stride, sz.dim_qk, n)};
          g.d = scores + e * rows * layout.ld;
          g.ldd = layout.ld;
          g.epilogue.alpha = p.rules.scale;
          g.epilogue.out_dtype = DType::f32;
          gemm::gemm(g, stream);
        }
      }
      SoftmaxArgs s;
      s.sizes = sz;
      s.rules = p.rules;
      s.scores = scores;
      s.probs = probs;
      s.ld = layout.ld;
      s.head0 = head0;
      s.rows = rows;
      s.i0 = static_cast<int>(i0);
      s.key0 = keys.lo;
      s.keys = std::max(n, 0);
      s.lse = static_cast<float*>(p.lse);
      s.lse_layout = p.lse_layout;
      s.out = p.out;
      rudnn::cuda::with_float_type(p.dtype, [&](auto tag) {
        using T = typename decltype(tag)::type;
        composed_softmax_kernel<T>
            <<<static_cast<unsigned>(heads * rows), kSoftmaxThreads, 0, ctx.stream>>>(s);
      });
      detail::check_launch("composed_softmax_kernel");
      if (n <= 0) continue;
      for (int64_t e = 0; e < heads; ++e) {
        const int64_t b = (head0 + e) / sz.heads_q, h = (head0 + e) % sz.heads_q, hk = h / group;
        gemm::GemmParams g;
        g.dtype = p.dtype;
        g.m = rows;
        g.n = sz.dim_v;
        g.k = n;
        g.a = {static_cast<const char*>(probs) + static_cast<int64_t>(esize) * e * rows * layout.ld,
               gemm::Layout::RowMajor, layout.ld};
        g.b = {static_cast<const char*>(p.v.data) + at(p.v, b, keys.lo, hk), gemm::Layout::RowMajor,
               leading(p.v.seq_stride, sz.dim_v, n)};
        g.d = static_cast<char*>(p.out.data) + at(p.out, b, i0, h);
        g.ldd = leading(p.out.seq_stride, sz.dim_v, rows);
        gemm::gemm(g, stream);
      }
    }
  }
}

}  // namespace rudnn::attn::cuda
