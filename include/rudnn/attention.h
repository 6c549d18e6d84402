// Attention family: dense scaled dot-product attention, forward and backward, with grouped
// query heads, variable-length packed sequences, the options of spec 003's
// `AttentionOptions` (mask, sinks, sliding window, score cap) extended with an additive
// bias, logit soft-capping and ALiBi, the strategies that run it, and the pure plan function
// that says which one runs and how much memory it holds.
//
// Definition (every strategy, every device). For batch b, query head h, query i, key j,
// with the key/value head hk = h / (Hq / Hkv) and o = Lk - Lq (the queries are the last Lq
// positions; per sequence for varlen):
//   x_ij = scale · (q_bhi · k_bhkj)                    scale default 1 / sqrt(D)
//   x_ij = cap · tanh(x_ij / cap)                      with softcap = cap
//   s_ij = x_ij − slope_h · |i + o − j|                with ALiBi slopes
//          + bias[b,h,i,j] + mask[b,h,i,j]             additive bias, additive float mask
//   s_ij = −inf where the boolean mask is false, where j > i + o (causal), and where
//          j <= i + o − window (sliding window: the `window` keys up to i + o)
//   out_bhi = Σ_j p_ij v_bhkj,  p_ij = exp(s_ij) / (Σ_j exp(s_ij) + exp(sink_h))
//   lse_bhi = log(Σ_j exp(s_ij) + exp(sink_h))         (no sink term without sinks)
// A row whose keys are all masked (or Lk = 0) gives an output row of zeros and lse −inf
// (lse = sink_h with sinks), never NaN. NaN in the inputs propagates.
//
// Common contract:
// - Shapes. q [B, Hq, Lq, D], k [B, Hkv, Lk, D], v [B, Hkv, Lk, Dv] (layout bhsd, the
//   default), or [B, L, H, D] each (layout bshd, as engines keep them; a [B, L, H, D]
//   buffer can equally be passed as its view .transpose(1, 2) in the default layout: no
//   copy either way). Hq must be a multiple of Hkv (grouped-query and multi-query
//   attention: K and V are never replicated). Dv may differ from D (MLA prefill: 192/128).
//   D, Dv >= 1; B, H, L may be 0 (nothing runs; outputs that sum over them are zeros).
//   Varlen (options.set_varlen): q [total_q, Hq, D], k [total_k, Hkv, D], v [total_k, Hkv,
//   Dv] packed sequence after sequence, cu_seqlens_q / cu_seqlens_k I32 [B + 1] on the
//   operands' device giving each sequence's rows (never read on the host: a GPU call does
//   not synchronise), max_seqlen_q / max_seqlen_k host integers bounding the lengths; the
//   causal offset o, the window, masks and biases apply per sequence (a mask or bias then
//   broadcasts to [B, Hq, max_seqlen_q, max_seqlen_k] and is indexed by the positions
//   within the sequence).
// - Outputs. out has q's layout with Dv features: [B, Hq, Lq, Dv] (bhsd), [B, Lq, Hq, Dv]
//   (bshd) or [total_q, Hq, Dv] (varlen), in q's dtype. lse (on request) is F32 (F64 for
//   F64 inputs on the CPU), [B, Hq, Lq], or [Hq, total_q] for varlen, natural log.
// - Dtypes. q, k, v share one dtype: F32, F16 or BF16 (F64 too on the CPU, where the float64
//   reference runs). Products accumulate in FP32 and the softmax runs in FP32 on the GPU;
//   outputs are rounded once to their dtype. Masks: boolean (true attends) or additive in F32
//   or q's dtype; bias and sinks: F32 or q's dtype; ALiBi slopes: F32.
// - Layout. Any strides with a dense last axis are read in place; other inputs are first
//   copied to a dense buffer on the device (one extra pass). Masks and biases are read
//   through their strides (size-1 axes broadcast; any layout, no copy). The `_into`
//   outputs need a dense last axis and rows that do not overlap, and must overlap no input
//   and no other output (else InvalidArgument).
// - Devices and streams. All tensors share one device (else DeviceMismatch); the op runs on
//   `stream` (default: current_stream of that device). Nothing reads device data back to
//   decide and nothing synchronises the host: every choice comes from shapes and options
//   (plan_attention), so a call can be captured in a CUDA graph. On the CPU the float64
//   reference runs inline for every strategy (after the strategy's shape rules are
//   checked, so that a call fails alike on every device).
// - Inputs are never modified.
// - Errors are rudnn::Error naming the op, the argument and the rule: a shape, dtype,
//   device or stream mismatch; Hq not a multiple of Hkv; a window without causal or < 1; a
//   mask, bias, sinks or slopes tensor that does not broadcast / has the wrong shape or
//   dtype; cu_seqlens of the wrong dtype or length, or (CPU tensors, where they can be read)
//   not non-decreasing from 0 or beyond the tensors' rows or the max lengths; a
//   non-finite scale, or one whose product with log2(e) is not (|scale| >= ~2.36e38); a
//   softcap that is not finite and > 0; max_score_bytes = 0, or below one query row's
//   intermediate with no kernel to honour it; a head size or shape the
//   requested strategy cannot take (Unsupported, naming why).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>

#include "rudnn/device.h"
#include "rudnn/dtype.h"
#include "rudnn/stream.h"
#include "rudnn/tensor.h"

namespace rudnn {

// Which axis holds what in q, k, v, out (and their gradients).
enum class AttentionLayout {
  bhsd,  // [B, H, L, D], PyTorch's scaled_dot_product_attention layout
  bshd,  // [B, L, H, D], as engines and FlashAttention keep them
};

// What runs the attention on the GPU.
//   Auto         what plan_attention picks: SplitKv for decode (Lq, or max_seqlen_q, <= 8),
//                else Flash where it can run (f16/bf16, its head sizes, sm_80+), else
//                Composed where it can run (16-bit, padded batches, under the cap), else
//                FlashScalar. Never fails where some strategy can run.
//   Flash        one fused tensor-core kernel (FlashAttention-2 style on mma.sync, sm_80
//                and later): no scores in memory, no scratch, FP32 accumulators and an FP32
//                online softmax, the probabilities rounded to q's dtype for p·v. F16 and
//                BF16; head sizes D = Dv in {64, 96, 128, 192, 256} and (D, Dv) = (192,
//                128); every option, varlen, both layouts; tiles wholly outside the causal
//                or window range are skipped; grouped heads read K and V in place. Mask and
//                bias arrays are read per element (slower than the plain path). Backward
//                for the same head sizes, every option but a bias gradient (above 128 only
//                where the device gives a block the shared memory: 203 KB at 256). A request
//                it cannot run (f32, another head size, a bias gradient, a device before
//                sm_80) is Unsupported, naming why. On sm_90 (a build with sm_90a code),
//                the forward with plain options (scale and causal only: no mask, bias,
//                sinks, window, softcap, ALiBi; padded batches) and D = Dv in {64, 128,
//                256} runs a FlashAttention-3 style kernel instead (wgmma fed by TMA, a
//                producer warpgroup and two consumer warpgroups of 64 query rows; same
//                precision; AttentionPlan::flash_wgmma says so). Its inputs are read by
//                TMA, which needs 16-byte aligned bases and strides: other views are
//                copied densely first.
//   FlashScalar  one fused CUDA-core kernel with an online softmax: no scores in memory,
//                F32/F16/BF16, D and Dv up to 1024, every option, varlen.
//   Composed     matrix products on tensor cores (the internal GEMM; F32 on CUDA cores in
//                FP32) and a masked-softmax kernel, the scores in FP32 in memory and the
//                probabilities rounded to q's dtype before p·v, query rows in blocks under
//                max_score_bytes; any head size; padded batches only (its products need each
//                sequence's length on the host). Forward only for now.
//   SplitKv      flash-decoding for Lq <= 8: the keys split into partitions processed in
//                parallel with FP32 partial results and a merge; the query heads that share
//                a KV head run together, so K and V are read once. D, Dv <= 1024, every
//                option, varlen. Forward only. F16 and BF16 with D = Dv in {64, 128, 256}
//                on sm_80 and later run on tensor cores (mma.sync, K and V streamed through
//                cp.async; FP32 products and softmax, the probabilities rounded to q's
//                dtype for p·v, as in Flash; AttentionPlan::split_tensor_cores says so);
//                the rest on CUDA cores in FP32.
//   Autotune     the fastest of Flash, Composed and FlashScalar that can take the call,
//                measured on the first call of its shape class on the device and recorded
//                (rudnn/autotune.h: what a class is, what the first call costs, the cache
//                file). Decode shapes (Lq <= 8) and CPU calls are not measured: they run
//                Auto's choice. Under CUDA-graph capture an unmeasured class runs Auto's
//                choice. Needs a build with RUDNN_AUTOTUNE (the default), else Unsupported.
//                Auto stays the default: Autotune's first call of a class waits for the GPU.
enum class AttentionStrategy { Auto, Flash, FlashScalar, Composed, SplitKv, Autotune };

// The kernel family a call runs (AttentionPlan::kernel).
enum class AttentionKernel {
  Reference,    // the CPU: float64 loops
  Flash,        // fused tensor-core kernel (mma.sync), no score memory
  FlashScalar,  // fused CUDA-core kernel, no score memory
  Composed,     // GEMMs + masked softmax over blocks of query rows
  SplitKv,      // split-KV decode, one or two passes
};

const char* attention_strategy_name(AttentionStrategy strategy) noexcept;
const char* attention_kernel_name(AttentionKernel kernel) noexcept;

// The options of attention, attention_backward and plan_attention, built with chained
// setters: AttentionOptions{}.set_causal().set_window(4096).set_max_score_bytes(512 << 20).
// This is the one options type of attention: new features extend it.
struct AttentionOptions {
  std::optional<float> scale;  // finite; default 1 / sqrt(D)
  bool is_causal = false;      // query i sees keys 0 ..= i + Lk - Lq (bottom-right aligned)
  // Boolean (true attends) or additive (F32 or q's dtype) mask broadcastable to
  // [B, Hq, Lq, Lk] (numpy rules, at most 4-d); combines with causal and the window.
  Tensor mask;
  // Additive bias (F32 or q's dtype) broadcastable to [B, Hq, Lq, Lk]; its gradient is
  // computed by attention_backward when bias_requires_grad.
  Tensor bias;
  bool bias_requires_grad = false;
  // Attention sinks [Hq] (F32 or q's dtype): one logit per query head that takes part in
  // the softmax and attends to nothing (gpt-oss); learnable (attention_backward's dsinks).
  Tensor sinks;
  // Sliding window: query i sees only the `window` keys up to and including i + Lk - Lq.
  // Needs is_causal; >= 1.
  std::optional<int64_t> window;
  // Logit soft-capping cap · tanh(x / cap) (Gemma 2), applied to scale · q·k before the
  // bias, ALiBi and masks; finite and > 0.
  std::optional<float> softcap;
  // ALiBi slopes [Hq] (F32 or q's dtype): adds −slope_h · |i + Lk − Lq − j| (FlashAttention's
  // form).
  Tensor alibi_slopes;
  // A cap, in bytes (> 0), on every score-sized intermediate (see plan_attention).
  std::optional<size_t> max_score_bytes;
  AttentionLayout layout = AttentionLayout::bhsd;
  // attention(): also return the per-row logsumexp (what the backward needs).
  bool return_lse = false;
  // attention_backward(): a fixed reduction order, two runs bit-equal. The default lets the
  // Hopper Flash backward add dq's partial sums in whatever order they arrive (FP32
  // atomics); the other backwards are deterministic in both modes (see attention_backward).
  bool deterministic = false;
  // Varlen: packed sequences (see the contract above); cu_seqlens defined means varlen.
  Tensor cu_seqlens_q, cu_seqlens_k;
  int64_t max_seqlen_q = 0, max_seqlen_k = 0;

  AttentionOptions& set_scale(float s) {
    scale = s;
    return *this;
  }
  AttentionOptions& set_causal(bool on = true) {
    is_causal = on;
    return *this;
  }
  AttentionOptions& set_mask(const Tensor& m) {
    mask = m;
    return *this;
  }
  AttentionOptions& set_bias(const Tensor& b, bool requires_grad = false) {
    bias = b;
    bias_requires_grad = requires_grad;
    return *this;
  }
  AttentionOptions& set_sinks(const Tensor& s) {
    sinks = s;
    return *this;
  }
  AttentionOptions& set_window(int64_t keys) {
    window = keys;
    return *this;
  }
  AttentionOptions& set_softcap(float cap) {
    softcap = cap;
    return *this;
  }
  AttentionOptions& set_alibi_slopes(const Tensor& slopes) {
    alibi_slopes = slopes;
    return *this;
  }
  AttentionOptions& set_max_score_bytes(size_t bytes) {
    max_score_bytes = bytes;
    return *this;
  }
  AttentionOptions& set_layout(AttentionLayout l) {
    layout = l;
    return *this;
  }
  AttentionOptions& set_return_lse(bool on = true) {
    return_lse = on;
    return *this;
  }
  AttentionOptions& set_deterministic(bool on = true) {
    deterministic = on;
    return *this;
  }
  AttentionOptions& set_varlen(const Tensor& cu_q, const Tensor& cu_k, int64_t max_q,
                               int64_t max_k) {
    cu_seqlens_q = cu_q;
    cu_seqlens_k = cu_k;
    max_seqlen_q = max_q;
    max_seqlen_k = max_k;
    return *this;
  }
};

// How a call runs and the memory it holds.
struct AttentionPlan {
  AttentionKernel kernel = AttentionKernel::Reference;
  // Composed: query rows per block (Lq when unblocked) and (batch, head) pairs per block
  // (B · Hq unless the cap is below one row of all of them); blocks run one after another
  // on the stream, reusing one block's scratch.
  int64_t block_rows = 0;
  int64_t block_heads = 0;
  // SplitKv: key partitions of the largest row (1: one pass) and keys per partition;
  // passes 1 or 2 (2: partial results, then the merge). One dispatch serves every row.
  int64_t splits = 0;
  int64_t split_keys = 0;
  int passes = 0;
  int dispatches = 0;
  // Device bytes allocated beyond the inputs and outputs while the call runs (one
  // allocation, exactly this size), not counting dense copies of inputs whose last axis is
  // not dense (the plan sees shapes only).
  size_t scratch_bytes = 0;
  // The largest single score-sized intermediate (what max_score_bytes bounds).
  size_t max_intermediate_bytes = 0;
  // Whether max_score_bytes changed the choice (a smaller block, or another kernel).
  bool capped = false;
  // Flash only: whether the Hopper kernel (wgmma + TMA, sm_90a) runs rather than the
  // mma.sync one (see AttentionStrategy::Flash); for plan_attention_backward, the Hopper
  // backward (see attention_backward).
  bool flash_wgmma = false;
  // SplitKv only: whether its tensor-core kernel runs (mma.sync; f16 / bf16, D = Dv in {64,
  // 128, 256}, sm_80 and later) rather than the CUDA-core one (see AttentionStrategy::SplitKv).
  bool split_tensor_cores = false;
};

// How attention (or attention_backward) will run on `device` for these shapes (as the
// tensors would have them: q [B, Hq, Lq, D] etc. in options.layout, or the varlen packed
// shapes), dtype, options and strategy, without allocating or launching anything. Tensors
// in `options` are read for their shape, dtype and device only. Errors are those the call
// would report. A pure function of its arguments and the device's compute capability and
// multiprocessor count: the same arguments give the same plan in every call, thread and
// process, whatever memory is free, and the op runs exactly this plan. The one exception is
// Autotune, whose plan is that of the choice recorded for the call's shape class (see
// rudnn/autotune.h) when there is one, else Auto's plan; an uncaptured first call of an
// unrecorded class also allocates, one after another, the scratch of each candidate it
// measures.
//
// Rules (forward): Flash holds no scratch and no score-sized intermediate (any cap is
// honoured, capped = false); Auto takes it for f16/bf16 prefill (Lq > 8) of its head sizes
// on sm_80 and later. Decode shapes (Lq <= 8) run SplitKv under Auto: partitions of
// `split_keys` keys (a multiple of 128 fixed by B · Hkv, the head sizes, the dtype and the
// device, never by Lq or Lk, which is what keeps the serial rule); two passes when the
// longest row spans more than one partition; no score memory, so the cap does not apply.
// Composed holds, per block, the FP32 scores [block_heads · block_rows, Lk'] and, below
// F32, the probabilities in q's dtype (Lk' = Lk rounded up to 8); a block is up to 1024
// query rows of as many (batch, head) pairs as max_score_bytes (default 256 MiB for the
// FP32 scores) allows. Under Auto, a cap that leaves blocks of fewer than 64 rows runs
// FlashScalar instead (capped = true). A cap below one query row's FP32 scores (4 · Lk'
// bytes) runs FlashScalar where it takes the shape (capped = true) and is InvalidArgument
// naming the smallest admissible cap otherwise (a Composed request, or D > 1024).
// FlashScalar and SplitKv (one pass) hold no scratch; SplitKv's two passes hold the FP32
// partial records [B · Hq · Lq, splits, Dv + 2 rounded up to 4].
// Backward: Flash and FlashScalar hold FP32 [rows] for dO·O (and sink terms), FlashScalar
// with bias_requires_grad also the FP32 dS [B, Hq, Lq, Lk] (score-sized, under the cap),
// the Hopper Flash backward (flash_wgmma) also its FP32 dq workspace and counters (see
// attention_backward).
AttentionPlan plan_attention(const Shape& q, const Shape& k, const Shape& v, DType dtype,
                             const AttentionOptions& options = {},
                             AttentionStrategy strategy = AttentionStrategy::Auto,
                             Device device = Device::cuda(0));
AttentionPlan plan_attention_backward(const Shape& q, const Shape& k, const Shape& v, DType dtype,
                                      const AttentionOptions& options = {},
                                      AttentionStrategy strategy = AttentionStrategy::Auto,
                                      Device device = Device::cuda(0));

// ---------------------------------------------------------------------------------------
// Forward.
//
// The serial rule: with 2 to 8 queries and SplitKv (Auto's choice there), each query row's
// output and lse equal, bit for bit, those of the one-query call over its causal key
// prefix (the same options, k and v sliced to keys 0 ..= i + Lk − Lq), because every
// row's partitions and reduction order depend on its own keys only.
//
// Memory: see plan_attention. The functional form allocates out (and lse).
struct AttentionResult {
  Tensor out;
  Tensor lse;  // defined when options.return_lse
};
AttentionResult attention(const Tensor& q, const Tensor& k, const Tensor& v,
                          const AttentionOptions& options = {},
                          AttentionStrategy strategy = AttentionStrategy::Auto,
                          const Stream& stream = {});
// out: the result's shape and dtype (see above); lse_out: undefined (not wanted) or F32 of
// the lse's shape, contiguous. options.return_lse is ignored here.
void attention_into(const Tensor& out, const Tensor& lse_out, const Tensor& q, const Tensor& k,
                    const Tensor& v, const AttentionOptions& options = {},
                    AttentionStrategy strategy = AttentionStrategy::Auto,
                    const Stream& stream = {});

// ---------------------------------------------------------------------------------------
// Backward: gradients of a loss through out = attention(q, k, v, options), given dout (out's
// shape and dtype), the forward's out and lse (as attention returned them), recomputing the
// probabilities p_ij = exp(s_ij − lse_i). With D_i = dout_i · out_i:
//   dv_j = Σ_i p_ij dout_i,   ds_ij = p_ij (dout_i · v_j − D_i),
//   dx_ij = ds_ij · (1 − (x_ij / cap)²) with softcap (x the capped logit), else ds_ij,
//   dq_i = scale Σ_j dx_ij k_j,   dk_j = scale Σ_i dx_ij q_i,
//   dsinks_h = −Σ_{b,i} exp(sink_h − lse_i) D_i,   dbias = ds summed over its broadcast axes.
// dk and dv sum over the query heads sharing a KV head. Gradients are in the dtype of the
// tensor they belong to (dsinks: the sinks' dtype, dbias: the bias's), accumulated in FP32.
// A fully masked row (lse −inf) contributes nothing.
//
// Determinism: FlashScalar and the mma.sync Flash use no atomics in either mode: every
// gradient is written by one thread and reduced in a fixed order (Flash: dq by a pass over
// the key tiles, dk/dv by one over the query tiles of every grouped head, in head order),
// and two runs give the same bits. The Hopper Flash backward (plan.flash_wgmma: sm_90a,
// f16/bf16, D = Dv = 128, padded batches, scale and causal only) reduces dk/dv in the same
// fixed order but adds each key tile's dq partial into an FP32 workspace with atomics:
// by default in arrival order (run-to-run differences in the last bits of dq), with
// options.deterministic in key-tile order (a per-query-tile counter each key tile waits
// for), two runs bit-equal, at some cost in speed.
// Precision: products in FP32 from the inputs' 16-bit values; P and dS are rounded to the
// inputs' dtype before the products that consume them (as in the forward's P · V); dq, dk,
// dv accumulate in FP32 and are rounded once.
// Strategies: Auto (Flash for f16/bf16 with D = Dv in {64, 96, 128} and no bias gradient on
// sm_80+, else FlashScalar; Flash's 192 and 256 instances spill registers and are taken by
// name or by Autotune until measured against FlashScalar), Flash (D = Dv in {64, 96, 128,
// 192, 256} and (D, Dv) = (192, 128)), FlashScalar (D, Dv <= 1024), Autotune, whatever
// strategy ran the forward (the backward needs only out and lse); Composed has no backward yet
// (Unsupported), SplitKv is forward only.
// Memory: FP32 D_i per query row (and the sink terms with sinks); with a bias gradient the
// FP32 dS of every score [B, Hq, Lq, Lk] (under max_score_bytes, else InvalidArgument); the
// Hopper Flash backward also the FP32 dq workspace [B, Hq, Lq rounded up to 64, D] and an
// int32 counter per 64 query rows and half of D (cleared on the stream by the op), and dense
// copies of q, k, v or dout views whose base or strides are not multiples of 16 bytes.
struct AttentionGrads {
  Tensor dq, dk, dv;
  Tensor dsinks;  // defined when options.sinks is
  Tensor dbias;   // defined when options.bias is and options.bias_requires_grad
};
AttentionGrads attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k,
                                  const Tensor& v, const Tensor& out, const Tensor& lse,
                                  const AttentionOptions& options = {},
                                  AttentionStrategy strategy = AttentionStrategy::Auto,
                                  const Stream& stream = {});
// grads: dq, dk, dv of q's, k's and v's shapes and dtype (dense last axis, rows that do
// not overlap); dsinks (sinks' shape and dtype, contiguous) defined exactly when sinks
// are; dbias (bias's shape and dtype, contiguous) defined exactly when a bias with
// bias_requires_grad is given.
void attention_backward_into(const AttentionGrads& grads, const Tensor& dout, const Tensor& q,
                             const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& lse,
                             const AttentionOptions& options = {},
                             AttentionStrategy strategy = AttentionStrategy::Auto,
                             const Stream& stream = {});

}  // namespace rudnn
