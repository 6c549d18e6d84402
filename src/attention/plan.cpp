#include "attention/plan.h"

#include <algorithm>
#include <string>

#include "core/check.h"
#if RUDNN_WITH_CUDA
#include "attention/cuda/launch.h"
#include "attention/cuda/tuning.h"
#include "cuda/device_info.h"
#endif

namespace rudnn::attn {

using detail::cat;
using detail::fail;

namespace {

int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

bool is_16bit(DType d) { return d == DType::f16 || d == DType::bf16; }

// The facts of the device a plan may depend on: its generation and size.
struct DeviceFacts {
  int compute_major = 0;
  int multiprocessors = 0;
  bool flash_built = false;  // the Flash kernels hold sm_80+ code for the device
  bool hopper_built = false;  // the Hopper forward holds sm_90a code the device runs
  bool split_kv_tc = false;   // kernel_tuning().split_kv_tensor_cores
  int64_t split_kv_keys = 0;  // kernel_tuning().split_kv_keys
  size_t shared_optin = 0;    // the most dynamic shared memory a block can opt into
};

DeviceFacts device_facts(const PlanInput& in) {
  if (in.device.is_cpu()) return {};
#if RUDNN_WITH_CUDA
  const auto& info = rudnn::cuda::device_info(in.device);
  return {info.compute_major, info.multiprocessors,
          info.compute_major >= 8 && attn::cuda::flash_kernels_built(in.device),
          info.compute_major == 9 && attn::cuda::flash_hopper_built(in.device),
          attn::cuda::kernel_tuning().split_kv_tensor_cores,
          attn::cuda::kernel_tuning().split_kv_keys,
          info.shared_bytes_per_block_optin};
#else
  fail(ErrorCode::Unsupported, cat(in.op, ": ruDNN was built without CUDA"));
#endif
}

// Why the tensor-core kernel cannot run this call; empty when it can. On the CPU the
// device's generation is not asked (the reference runs), the dtype and head sizes are.
std::string flash_refusal(const PlanInput& in, const DeviceFacts& facts) {
  if (!is_16bit(in.dtype)) {
    return cat("it takes f16 and bf16, got ", dtype_name(in.dtype),
               "; FlashScalar and Composed run f32");
  }
  if (!flash_takes_heads(in.dim_qk, in.dim_v)) {
    return cat(
        "it takes head sizes D = Dv in {64, 96, 128, 192, 256} and (D, Dv) = (192, 128), "
        "got D = ",
        in.dim_qk, ", Dv = ", in.dim_v, "; FlashScalar takes up to ", kMaxScalarHeadDim);
  }
  if (!in.device.is_cpu() && facts.compute_major < 8) {
    return cat("it needs mma.sync (compute capability 8.0 or later), ", in.device.str(), " has ",
               facts.compute_major, ".x");
  }
  if (!in.device.is_cpu() && !facts.flash_built) {
    return cat("this build of ruDNN has no sm_80+ image of its kernels for ", in.device.str(),
               " (RUDNN_CUDA_ARCHS)");
  }
  return {};
}

// Why Flash's backward cannot run this call; empty when it can.
std::string flash_backward_refusal(const PlanInput& in, const DeviceFacts& facts) {
  if (!is_16bit(in.dtype)) {
    return cat("it takes f16 and bf16, got ", dtype_name(in.dtype), "; FlashScalar runs f32");
  }
  if (!flash_backward_takes_heads(in.dim_qk, in.dim_v)) {
    return cat("its backward takes head sizes D = Dv in {64, 96, 128, 192, 256} and (D, Dv) = "
               "(192, 128), got D = ",
               in.dim_qk, ", Dv = ", in.dim_v, "; FlashScalar takes up to ", kMaxScalarHeadDim);
  }
  if (in.bias_grad) {
    return std::string(
        "its backward does not compute a bias gradient; FlashScalar does (bias_requires_grad)");
  }
  if (!in.device.is_cpu() && facts.compute_major < 8) {
    return cat("it needs mma.sync (compute capability 8.0 or later), ", in.device.str(), " has ",
               facts.compute_major, ".x");
  }
  if (!in.device.is_cpu() && !facts.flash_built) {
    return cat("this build of ruDNN has no sm_80+ image of its kernels for ", in.device.str(),
               " (RUDNN_CUDA_ARCHS)");
  }
  const size_t shared = flash_backward_shared_bytes(in.dim_qk, in.dim_v);
  if (!in.device.is_cpu() && shared > facts.shared_optin) {
    return cat("its backward for D = ", in.dim_qk, ", Dv = ", in.dim_v, " needs ", shared,
               " bytes of shared memory per block, ", in.device.str(), " allows ",
               facts.shared_optin, "; FlashScalar takes it");
  }
  return {};
}

// Flash holds no scratch and no score-sized intermediate: every cap is honoured.
AttentionPlan flash_plan() {
  AttentionPlan plan;
  plan.kernel = AttentionKernel::Flash;
  plan.passes = 1;
  plan.dispatches = 1;
  return plan;
}

// The forward's Flash: the Hopper kernel where it takes the call (sm_90 with its sm_90a
// code, plain options, padded batches, its head sizes), else the mma.sync one.
AttentionPlan flash_forward_plan(const PlanInput& in, const DeviceFacts& facts) {
  AttentionPlan plan = flash_plan();
  plan.flash_wgmma = !in.device.is_cpu() && facts.hopper_built && in.plain_rules &&
                     !in.varlen && flash_hopper_takes_heads(in.dim_qk, in.dim_v);
  return plan;
}

bool scalar_takes_heads(const PlanInput& in) {
  return in.dim_qk <= kMaxScalarHeadDim && in.dim_v <= kMaxScalarHeadDim;
}

void require_scalar_heads(const PlanInput& in, const char* strategy) {
  if (!scalar_takes_heads(in)) {
    fail(ErrorCode::Unsupported,
         cat(in.op, ": strategy ", strategy, " takes head sizes up to ", kMaxScalarHeadDim,
             ", got D = ", in.dim_qk, ", Dv = ", in.dim_v, "; Composed takes any"));
  }
}

// Composed's blocking under a byte budget for the FP32 scores; rows 0 when even one query
// row of one head does not fit.
struct Blocking {
  int64_t rows = 0, heads = 0;
};
Blocking composed_blocking(const PlanInput& in, size_t budget) {
  const int64_t heads_all = in.batch * in.heads_q;
  if (in.len_q == 0 || heads_all == 0) return {in.len_q, heads_all};
  const size_t row_bytes = static_cast<size_t>(round_up(std::max<int64_t>(in.len_k, 1), 8)) * 4;
  if (row_bytes > budget) return {0, 0};
  // Up to kComposedRows rows of as many heads as fit: fewer, larger products (each head's
  // products are launches of their own).
  const int64_t rows =
      std::min<int64_t>({in.len_q, kComposedRows, static_cast<int64_t>(budget / row_bytes)});
  const int64_t heads = std::min<int64_t>(
      heads_all, static_cast<int64_t>(budget / (static_cast<size_t>(rows) * row_bytes)));
  return {rows, heads};
}

AttentionPlan composed_plan(const PlanInput& in, const Blocking& blocking, bool capped) {
  AttentionPlan plan;
  plan.kernel = AttentionKernel::Composed;
  plan.block_rows = blocking.rows;
  plan.block_heads = blocking.heads;
  plan.dispatches = 1;
  plan.passes = 1;
  const ComposedLayout layout = composed_layout(plan, in.len_k, in.dtype);
  plan.scratch_bytes = layout.bytes;
  plan.max_intermediate_bytes =
      static_cast<size_t>(plan.block_rows * plan.block_heads) * static_cast<size_t>(layout.ld) * 4;
  plan.capped = capped;
  return plan;
}

// The smallest cap Composed can honour: one query row of FP32 scores.
size_t composed_min_cap(const PlanInput& in) {
  return static_cast<size_t>(round_up(std::max<int64_t>(in.len_k, 1), 8)) * 4;
}

AttentionPlan scalar_plan(const PlanInput& in, bool capped) {
  AttentionPlan plan;
  plan.kernel = AttentionKernel::FlashScalar;
  plan.passes = 1;
  plan.dispatches = 1;
  plan.capped = capped;
  if (in.backward) {
    const int64_t stat_rows =
        in.varlen ? in.heads_q * in.total_q : in.batch * in.heads_q * in.len_q;
    const int64_t scores = in.bias_grad ? in.batch * in.heads_q * in.len_q * in.len_k : 0;
    const BackwardLayout layout = backward_layout(stat_rows, in.has_sinks, scores);
    plan.scratch_bytes = layout.bytes;
    plan.max_intermediate_bytes = layout.has_dscores ? static_cast<size_t>(scores) * 4 : 0;
  }
  return plan;
}

// Flash's backward holds FP32 D_i per query row (and the rows' sink terms with sinks), as
// FlashScalar's does without a bias gradient; on sm_90a with plain options (sinks allowed:
// they live in the logsumexp, and dsinks comes from the row kernel), padded batches,
// D = Dv = 128 and some rows and keys, the Hopper kernel runs (flash_wgmma) and adds its FP32
// dQ workspace.
AttentionPlan flash_backward_plan(const PlanInput& in, const DeviceFacts& facts) {
  AttentionPlan plan = flash_plan();
  const int64_t stat_rows = in.varlen ? in.heads_q * in.total_q : in.batch * in.heads_q * in.len_q;
  plan.flash_wgmma = !in.device.is_cpu() && facts.hopper_built && in.plain_rules_but_sinks &&
                     !in.varlen && flash_hopper_backward_takes_heads(in.dim_qk, in.dim_v) &&
                     in.len_q > 0 && in.len_k > 0 && in.batch * in.heads_q > 0;
  const HopperDqSizes dq = plan.flash_wgmma
                               ? hopper_dq_sizes(in.batch, in.heads_q, in.len_q, in.dim_qk)
                               : HopperDqSizes{};
  plan.scratch_bytes = backward_layout(stat_rows, in.has_sinks, 0, dq).bytes;
  return plan;
}

int64_t decode_split_keys(const PlanInput& in, const DeviceFacts& facts) {
  if (facts.split_kv_keys > 0) return facts.split_kv_keys;
  const int64_t pairs = in.batch * in.heads_kv;
  const int64_t sms = std::max(facts.multiprocessors, 1);
  if (2 * pairs <= sms) return 256;
  if (pairs <= 2 * sms) return 512;
  return 1024;
}

AttentionPlan split_kv_plan(const PlanInput& in, const DeviceFacts& facts) {
  AttentionPlan plan;
  plan.kernel = AttentionKernel::SplitKv;
  plan.split_tensor_cores = !in.device.is_cpu() && facts.split_kv_tc && facts.flash_built &&
                            is_16bit(in.dtype) && split_kv_tc_takes_heads(in.dim_qk, in.dim_v);
  plan.split_keys = decode_split_keys(in, facts);
  plan.splits = std::max<int64_t>(1, (in.len_k + plan.split_keys - 1) / plan.split_keys);
  plan.passes = plan.splits > 1 ? 2 : 1;
  plan.dispatches = 1;
  if (plan.passes == 2) {
    plan.scratch_bytes =
        split_kv_layout(in.batch * in.heads_q * in.len_q, plan.splits, in.dim_v).bytes;
  }
  return plan;
}

void check_cap(const PlanInput& in) {
  if (in.max_score_bytes && *in.max_score_bytes == 0) {
    fail(ErrorCode::InvalidArgument,
         cat(in.op, ": max_score_bytes is 0; expected a positive number of bytes"));
  }
}

AttentionPlan forward_plan(const PlanInput& in, const DeviceFacts& facts) {
  const bool decode = in.len_q <= kMaxDecodeQueries;
  const size_t budget = in.max_score_bytes.value_or(kDefaultComposedBytes);
  switch (in.strategy) {
    case AttentionStrategy::Flash: {
      const std::string why = flash_refusal(in, facts);
      if (!why.empty()) fail(ErrorCode::Unsupported, cat(in.op, ": strategy Flash: ", why));
      return flash_forward_plan(in, facts);
    }
    case AttentionStrategy::FlashScalar:
      require_scalar_heads(in, "FlashScalar");
      return scalar_plan(in, false);
    case AttentionStrategy::SplitKv:
      if (!decode) {
        fail(ErrorCode::Unsupported,
             cat(in.op, ": strategy SplitKv takes at most ", kMaxDecodeQueries,
                 " queries per sequence, got ", in.varlen ? "max_seqlen_q = " : "Lq = ", in.len_q));
      }
      require_scalar_heads(in, "SplitKv");
      return split_kv_plan(in, facts);
    case AttentionStrategy::Composed: {
      if (in.varlen) {
        fail(ErrorCode::Unsupported,
             cat(in.op,
                 ": strategy Composed needs each sequence's length on the host; "
                 "varlen runs FlashScalar, SplitKv or Auto"));
      }
      const Blocking b = composed_blocking(in, budget);
      if (b.rows == 0) {
        fail(ErrorCode::InvalidArgument,
             cat(in.op, ": max_score_bytes = ", budget,
                 " is below one query row's FP32 scores; the smallest admissible cap for "
                 "Composed is ",
                 composed_min_cap(in), " bytes"));
      }
      const Blocking uncapped = composed_blocking(in, kDefaultComposedBytes);
      const bool capped =
          in.max_score_bytes && (b.rows != uncapped.rows || b.heads != uncapped.heads);
      return composed_plan(in, b, capped);
    }
    case AttentionStrategy::Auto:
    case AttentionStrategy::Autotune:  // resolved by attention.cpp before planning
      break;
  }
  // Auto: decode shapes run SplitKv; 16-bit prefill of the head sizes it has runs Flash on
  // sm_80 and later (no score memory: the cap changes nothing); other 16-bit padded prefill
  // runs the tensor-core products (Composed) unless the keys are few or the cap leaves
  // blocks too small to feed them; the rest runs FlashScalar, or Composed for head sizes
  // beyond it.
  if (decode && scalar_takes_heads(in)) return split_kv_plan(in, facts);
  if (!in.device.is_cpu() && flash_refusal(in, facts).empty())
    return flash_forward_plan(in, facts);
  const bool composed_possible = !in.varlen;
  const bool composed_preferred =
      composed_possible && (!scalar_takes_heads(in) || (is_16bit(in.dtype) && in.len_k >= 64));
  if (composed_preferred) {
    const Blocking b = composed_blocking(in, budget);
    const Blocking uncapped = composed_blocking(in, kDefaultComposedBytes);
    const bool usable = b.rows > 0 && (b.rows >= 64 || b.rows == in.len_q);
    if (usable || (b.rows > 0 && !scalar_takes_heads(in))) {
      const bool capped =
          in.max_score_bytes && (b.rows != uncapped.rows || b.heads != uncapped.heads);
      return composed_plan(in, b, capped);
    }
    if (scalar_takes_heads(in)) return scalar_plan(in, in.max_score_bytes.has_value());
    fail(ErrorCode::InvalidArgument,
         cat(in.op, ": max_score_bytes = ", budget,
             " is below one query row's FP32 scores and no kernel without score memory takes "
             "D = ",
             in.dim_qk, ", Dv = ", in.dim_v, "; the smallest admissible cap is ",
             composed_min_cap(in), " bytes"));
  }
  if (scalar_takes_heads(in)) return scalar_plan(in, false);
  fail(ErrorCode::Unsupported,
       cat(in.op, ": no strategy takes D = ", in.dim_qk, ", Dv = ", in.dim_v,
           " for varlen sequences (FlashScalar and SplitKv take up to ", kMaxScalarHeadDim,
           ", Composed needs padded batches)"));
}

AttentionPlan backward_plan(const PlanInput& in, const DeviceFacts& facts) {
  switch (in.strategy) {
    case AttentionStrategy::Flash: {
      const std::string why = flash_backward_refusal(in, facts);
      if (!why.empty()) fail(ErrorCode::Unsupported, cat(in.op, ": strategy Flash: ", why));
      return flash_backward_plan(in, facts);
    }
    case AttentionStrategy::SplitKv:
      fail(ErrorCode::Unsupported,
           cat(in.op,
               ": strategy SplitKv is a forward kernel; the backward runs FlashScalar, "
               "Composed or Auto"));
    case AttentionStrategy::Composed:
      fail(ErrorCode::Unsupported,
           cat(in.op, ": strategy Composed has no backward yet; use FlashScalar or Auto"));
    case AttentionStrategy::Auto:
    case AttentionStrategy::Autotune:  // resolved by attention.cpp before planning
      if (!in.device.is_cpu() && in.dim_qk <= kAutoFlashBackwardMaxHead &&
          flash_backward_refusal(in, facts).empty())
        return flash_backward_plan(in, facts);
      break;
    case AttentionStrategy::FlashScalar:
      break;
  }
  if (!scalar_takes_heads(in)) {
    fail(ErrorCode::Unsupported,
         cat(in.op, ": the backward takes head sizes up to ", kMaxScalarHeadDim,
             ", got D = ", in.dim_qk, ", Dv = ", in.dim_v));
  }
  AttentionPlan plan = scalar_plan(in, false);
  if (in.bias_grad && in.max_score_bytes && plan.max_intermediate_bytes > *in.max_score_bytes) {
    fail(ErrorCode::InvalidArgument,
         cat(in.op, ": the bias gradient needs the FP32 dS of every score (",
             plan.max_intermediate_bytes, " bytes), above max_score_bytes = ", *in.max_score_bytes,
             "; the smallest admissible cap is ", plan.max_intermediate_bytes, " bytes"));
  }
  return plan;
}

}  // namespace

bool flash_takes_heads(int64_t dim_qk, int64_t dim_v) {
  if (dim_qk == 192 && dim_v == 128) return true;
  return dim_qk == dim_v &&
         (dim_qk == 64 || dim_qk == 96 || dim_qk == 128 || dim_qk == 192 || dim_qk == 256);
}

bool flash_hopper_takes_heads(int64_t dim_qk, int64_t dim_v) {
  return dim_qk == dim_v && (dim_qk == 64 || dim_qk == 128 || dim_qk == 256);
}

bool split_kv_tc_takes_heads(int64_t dim_qk, int64_t dim_v) {
  return flash_hopper_takes_heads(dim_qk, dim_v);
}

bool flash_hopper_view_ok(const void* data, int64_t batch, int64_t seq, int64_t heads,
                          int64_t batch_stride, int64_t seq_stride, int64_t head_stride) {
  if (reinterpret_cast<uintptr_t>(data) % 16 != 0) return false;
  const int64_t ext[3] = {batch, seq, heads}, str[3] = {batch_stride, seq_stride, head_stride};
  for (int i = 0; i < 3; ++i) {
    // 16-bit elements: 8 of them make 16 bytes; TMA strides stay below 2^40 bytes.
    if (ext[i] > 1 && (str[i] <= 0 || str[i] % 8 != 0 || str[i] >= (int64_t{1} << 39)))
      return false;
  }
  return true;
}

bool flash_backward_takes_heads(int64_t dim_qk, int64_t dim_v) {
  if (dim_qk == 192 && dim_v == 128) return true;
  return dim_qk == dim_v &&
         (dim_qk == 64 || dim_qk == 96 || dim_qk == 128 || dim_qk == 192 || dim_qk == 256);
}

ComposedLayout composed_layout(const AttentionPlan& plan, int64_t len_k, DType dtype) {
  ComposedLayout layout;
  layout.ld = round_up(std::max<int64_t>(len_k, 1), 8);
  const size_t rows = static_cast<size_t>(plan.block_rows * plan.block_heads);
  if (rows == 0 || len_k == 0) return layout;
  const size_t scores = rows * static_cast<size_t>(layout.ld) * 4;
  layout.scores = 0;
  if (dtype == DType::f32) {
    layout.probs = 0;
    layout.bytes = align_up(scores);
  } else {
    layout.probs = align_up(scores);
    layout.bytes =
        layout.probs + align_up(rows * static_cast<size_t>(layout.ld) * dtype_size(dtype));
  }
  return layout;
}

SplitKvLayout split_kv_layout(int64_t rows, int64_t splits, int64_t dim_v) {
  SplitKvLayout layout;
  layout.record = round_up(dim_v + 2, 4);
  layout.bytes = align_up(static_cast<size_t>(rows) * static_cast<size_t>(splits) *
                          static_cast<size_t>(layout.record) * 4);
  return layout;
}

HopperDqSizes hopper_dq_sizes(int64_t batch, int64_t heads_q, int64_t len_q, int64_t dim) {
  const int64_t tiles = (len_q + kHopperBackwardRows - 1) / kHopperBackwardRows;
  return {batch * heads_q * tiles * kHopperBackwardRows * dim, batch * heads_q * tiles * 2};
}

BackwardLayout backward_layout(int64_t stat_rows, bool sinks, int64_t score_elements,
                               HopperDqSizes dq) {
  BackwardLayout layout;
  size_t at = 0;
  layout.row_dot = at;
  at += align_up(static_cast<size_t>(stat_rows) * 4);
  if (sinks) {
    layout.has_sink_terms = true;
    layout.sink_terms = at;
    at += align_up(static_cast<size_t>(stat_rows) * 4);
  }
  if (score_elements > 0) {
    layout.has_dscores = true;
    layout.dscores = at;
    at += align_up(static_cast<size_t>(score_elements) * 4);
  }
  if (dq.floats > 0) {
    layout.has_dq_accum = true;
    layout.dq_accum = at;
    at += align_up(static_cast<size_t>(dq.floats) * 4);
    layout.dq_counters = at;
    at += align_up(static_cast<size_t>(dq.counters) * 4);
    layout.dq_clear_bytes = at - layout.dq_accum;
  }
  layout.bytes = at;
  return layout;
}

bool flash_hopper_backward_takes_heads(int64_t dim_qk, int64_t dim_v) {
  return dim_qk == 128 && dim_v == 128;
}

AttentionPlan make_plan(const PlanInput& in) {
  check_cap(in);
  const DeviceFacts facts = device_facts(in);
  AttentionPlan plan = in.backward ? backward_plan(in, facts) : forward_plan(in, facts);
  if (in.device.is_cpu()) {
    // The strategy's rules held; the CPU runs its float64 definition and holds no device
    // memory.
    AttentionPlan reference;
    reference.kernel = AttentionKernel::Reference;
    reference.passes = 1;
    reference.dispatches = 1;
    return reference;
  }
  return plan;
}

}  // namespace rudnn::attn
