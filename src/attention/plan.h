// The routing of attention: one function decides, for shapes, dtype, options, strategy and
// device, which kernel family runs and how its scratch is laid out. plan_attention reports
// it, the ops run it, and the CUDA backends read their scratch layout from the helpers
// below, so that the plan's bytes are the bytes the op allocates.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>

#include "rudnn/attention.h"
#include "rudnn/device.h"
#include "rudnn/dtype.h"

namespace rudnn::attn {

// What the plan depends on, validated by the caller (shapes consistent, options legal).
struct PlanInput {
  const char* op = "attention";
  int64_t batch = 0, heads_q = 0, heads_kv = 0, len_q = 0, len_k = 0, dim_qk = 0, dim_v = 0;
  bool varlen = false;
  int64_t total_q = 0;  // varlen: packed query rows
  DType dtype = DType::f32;
  std::optional<size_t> max_score_bytes;
  bool has_sinks = false;
  bool bias_grad = false;  // backward: dbias wanted
  AttentionStrategy strategy = AttentionStrategy::Auto;
  Device device = Device::cpu();
  bool backward = false;
  // No per-element or per-head option beyond scale and causal (mask, bias, sinks, window,
  // softcap, ALiBi): what the Hopper forward takes.
  bool plain_rules = false;
  // The same but sinks allowed (they only enter the logsumexp): what the Hopper backward takes.
  bool plain_rules_but_sinks = false;
};

// Throws rudnn::Error (op-named) when the strategy cannot run the shape or the cap cannot
// be honoured.
AttentionPlan make_plan(const PlanInput& in);

// Whether the tensor-core kernel (Flash) has an instance for these head sizes: D = Dv in
// {64, 96, 128, 192, 256}, or (D, Dv) = (192, 128).
bool flash_takes_heads(int64_t dim_qk, int64_t dim_v);
// Whether the Hopper forward (Flash on sm_90a) has an instance: D = Dv in {64, 128, 256}.
bool flash_hopper_takes_heads(int64_t dim_qk, int64_t dim_v);
// Whether SplitKv on tensor cores (split_kv_tc.cuh) has an instance: D = Dv in {64, 128,
// 256}.
bool split_kv_tc_takes_heads(int64_t dim_qk, int64_t dim_v);
// Whether a [batch, seq, heads, dim] view of 16-bit elements can be read by the Hopper
// forward's TMA maps: base and the strides of axes longer than 1 multiples of 16 bytes and
// nonzero (else the entry point passes a dense copy).
bool flash_hopper_view_ok(const void* data, int64_t batch, int64_t seq, int64_t heads,
                          int64_t batch_stride, int64_t seq_stride, int64_t head_stride);
// Whether Flash's backward has an instance: D = Dv in {64, 96, 128, 192, 256}, or (D, Dv) =
// (192, 128).
bool flash_backward_takes_heads(int64_t dim_qk, int64_t dim_v);
// The dynamic shared memory of the larger of Flash's two backward kernels (the dq kernel's
// 64 query rows of Q and dO plus two stages of 64 keys of K and V; the dk/dv kernel's 64 keys
// of K and V plus two stages of 32 query rows of Q and dO and their row statistics), rows
// padded by 8 elements, 16-bit elements: flash_backward.cuh's BackwardConfig checks it.
constexpr size_t flash_backward_shared_bytes(int64_t dim_qk, int64_t dim_v) {
  const size_t q = static_cast<size_t>(dim_qk + 8), v = static_cast<size_t>(dim_v + 8);
  const size_t dq = 2 * (64 * q + 64 * v + 2 * 64 * q + 2 * 64 * v);
  const size_t dkv = 2 * (64 * q + 64 * v + 2 * 32 * q + 2 * 32 * v) + 4 * sizeof(float) * 32;
  return dq > dkv ? dq : dkv;
}
// Largest head size Auto sends to Flash's backward: above it (the instances spill
// registers) Auto keeps FlashScalar until the two are measured against each other;
// strategy Flash and Autotune take the larger instances.
constexpr int64_t kAutoFlashBackwardMaxHead = 128;

// Largest head size of the CUDA-core kernels (FlashScalar, SplitKv).
constexpr int64_t kMaxScalarHeadDim = 1024;
// Largest query count of the decode kernel.
constexpr int64_t kMaxDecodeQueries = 8;
// Keys per tile of the CUDA-core kernels, and warps per block; SplitKv partitions are
// multiples of their product.
constexpr int64_t kTileKeys = 32;
constexpr int64_t kScalarWarps = 4;
// Query rows per Composed block at most.
constexpr int64_t kComposedRows = 1024;
// The default bound on Composed's FP32 score block when no cap is given.
constexpr size_t kDefaultComposedBytes = size_t{256} << 20;

// Scratch sub-buffers start on this many bytes.
constexpr size_t kScratchAlign = 256;
inline size_t align_up(size_t bytes) {
  return (bytes + kScratchAlign - 1) / kScratchAlign * kScratchAlign;
}

// ---- Scratch layouts (byte offsets into the one allocation) -----------------------------------

// Composed forward: FP32 scores [block_heads * block_rows, ld], then (below F32) the
// probabilities in the dtype with the same ld; F32 writes them over the scores.
struct ComposedLayout {
  int64_t ld = 0;  // Lk rounded up to 8
  size_t scores = 0, probs = 0, bytes = 0;
};
ComposedLayout composed_layout(const AttentionPlan& plan, int64_t len_k, DType dtype);

// SplitKv: per (row of [B, Hq, Lq], partition) one record of `record` floats: the
// unnormalised output [Dv], then the running max and sum.
struct SplitKvLayout {
  int64_t record = 0;  // floats
  size_t bytes = 0;
};
SplitKvLayout split_kv_layout(int64_t rows, int64_t splits, int64_t dim_v);

// The Hopper backward's dQ workspace (flash_hopper_backward.cuh): FP32 [B, Hq, Lq rounded
// up to kHopperBackwardRows, D] that every key tile adds its dQ partial into, and one int32
// counter per (batch, query head, query tile, consumer warpgroup) that orders the additions
// in the deterministic mode; both zeroed by the launcher on the stream.
constexpr int64_t kHopperBackwardRows = 64;
struct HopperDqSizes {
  int64_t floats = 0, counters = 0;
};
HopperDqSizes hopper_dq_sizes(int64_t batch, int64_t heads_q, int64_t len_q, int64_t dim);

// The backward's scratch: D_i = dO_i · O_i per row, the per-row sink terms (with sinks), the
// FP32 dS of every score (FlashScalar with a bias gradient), and the Hopper backward's dQ
// workspace then its counters (adjacent: one memset clears both).
struct BackwardLayout {
  size_t row_dot = 0, sink_terms = 0, dscores = 0, dq_accum = 0, dq_counters = 0, bytes = 0;
  bool has_sink_terms = false, has_dscores = false, has_dq_accum = false;
  size_t dq_clear_bytes = 0;  // from dq_accum through the counters
};
BackwardLayout backward_layout(int64_t stat_rows, bool sinks, int64_t score_elements,
                               HopperDqSizes dq = {});
// Whether the Hopper backward has an instance: D = Dv = 128.
bool flash_hopper_backward_takes_heads(int64_t dim_qk, int64_t dim_v);

}  // namespace rudnn::attn
