// Mixture-of-experts family: routing (softmax top-k and DeepSeek-V3's group-limited
// sigmoid), dispatch of tokens grouped by expert, SwiGLU experts and the weighted combine.
//
//   logits [T, E] --route--> RoutingPlan {expert_indices U32 [T, k], weights [T, k]}
//   input [T, H]  --plan.dispatch--> DispatchedTokens {rows [T*k, H] grouped by expert}
//   rows --experts.forward_dispatched--> expert_out [T*k, H]
//   expert_out --dispatched.combine--> output [T, H] = sum_j weights[t, j] * expert_out[row(t, j)]
//
// Common contract (every function below):
// - Forms. The functional forms allocate their results; the row-wise ops (route,
//   route_sigmoid_grouped, selected_router_weights/_backward, native_swiglu/_backward) also
//   have `_into` forms writing caller buffers (contiguous, of the result's shape and dtype,
//   overlapping no operand and no other output, else InvalidArgument), which allocate
//   nothing and can be captured in a CUDA graph. Plans, dispatched tokens and the training
//   caches are objects whose tensors the library allocates (stream-ordered, so a capture
//   turns them into graph memory nodes).
// - Dtypes. Logits are F32, F16 or BF16 (F64 too on the CPU, where the float64 reference
//   runs). The token input and the three expert weight tensors share one floating dtype
//   (which may differ from the logits'). Anything else is DTypeMismatch.
// - Devices and streams. All operands share one device (else DeviceMismatch); the work runs
//   on `stream` (default: the current stream of that device). On the CPU the reference
//   runs inline. Nothing here synchronises the host with the device or reads device data
//   back to decide: expert counts and group offsets stay on the device, so a whole forward
//   can be captured in a CUDA graph.
// - Layout. Inputs of any strides are taken; non-contiguous ones are first copied to a
//   dense buffer on the device (one extra pass). Results are new contiguous tensors.
// - Determinism. Dispatch is a stable counting sort (token order within each expert), the
//   combine sums each token's k rows in slot order j = 0..k-1, and no kernel uses
//   floating-point atomics: every output is bitwise identical from run to run on one device.
// - Errors are rudnn::Error whose message names the op, the argument and the rule.
// - Inputs are never modified.
#pragma once

#include <cstdint>
#include <optional>

#include "rudnn/stream.h"
#include "rudnn/tensor.h"

namespace rudnn::moe {

// ---------------------------------------------------------------------------------------
// Routing
// ---------------------------------------------------------------------------------------

struct RoutingOptions {
  int64_t top_k = 1;         // 1 <= top_k <= E
  bool renormalize = false;  // divide the selected probabilities by their sum
};

struct GroupRoutingOptions {
  int64_t top_k = 1;            // 1..64, and at most selected_groups * (E / groups)
  int64_t groups = 1;           // 1..128, dividing E
  int64_t selected_groups = 1;  // 1..groups
  bool group_top_two = false;   // group score: sum of its two largest corrected scores
                                // (needs >= 2 experts per group), else its largest
  bool renormalize = false;     // divide the selected scores by their sum
  float scale = 1.0f;           // finite, > 0; applied last
};

class DispatchedTokens;
class RouterTrainingPlan;
struct RouterWeightOptions;

// The order in which combine_backward reduces each routing-weight gradient.
enum class CombineGradientStrategy { Serial, Plane };

struct CombineGradients {
  Tensor dexpert;   // [T*k, H], expert_out's dtype
  Tensor dweights;  // [T, k], F32
};

// The selection of one batch: which experts each token goes to and with what weight. Made
// only by route / route_sigmoid_grouped, so its indices are valid expert ids by
// construction. Cheap to copy (tensor handles).
class RoutingPlan {
 public:
  // U32 [T, k], on the logits' device; slot j of a token is its j-th best expert.
  const Tensor& expert_indices() const { return indices_; }
  // [T, k] in the logits' dtype.
  const Tensor& weights() const { return weights_; }
  int64_t experts() const { return experts_; }
  int64_t tokens() const { return indices_.defined() ? indices_.size(0) : 0; }
  int64_t top_k() const { return indices_.defined() ? indices_.size(1) : 0; }

  // Rows of input [T, H] (H >= 1, the plan's T, its device) grouped by expert: see
  // DispatchedTokens. Memory: the T*k x H dispatched rows, plus 4 * (3 T k + E + 1) bytes
  // of mapping and, on the GPU, a scratch of 4 * E * ceil(T k / 4096) bytes while it runs.
  // Errors: input undefined, not [T, H] with H >= 1 or of a non-float dtype, on another
  // device; E > 8192 (the dispatch keeps per-expert counters in shared memory).
  DispatchedTokens dispatch(const Tensor& input, const Stream& stream = {}) const;

  // The same selection with its weights recomputed for training (RouterTrainingPlan).
  RouterTrainingPlan into_training(const Tensor& logits, const RouterWeightOptions& options,
                                   const Stream& stream = {}) const;

 private:
  friend struct Internal;
  Tensor indices_, weights_;
  int64_t experts_ = 0;
};

// Softmax top-k routing of logits [T, E]. Softmax runs over all E experts in FP32; the k
// experts of largest probability are selected in descending order; exact ties go to the
// lower expert id. The selection ranks the logits themselves (exact, and the order the FP32
// softmax gives, except that two different logits whose probabilities round to one FP32
// value are not a tie here: the larger logit wins). Weights are the selected probabilities
// (divided by their FP32 sum when renormalize), rounded to the logits' dtype.
// Special rows: a row holding a NaN or +inf, or only -inf, gets NaN weights in every slot
// (never a uniform distribution); its indices are still distinct valid experts, ranked with
// NaN above +inf (as torch.topk), ties to the lower id. Probabilities that underflow are 0.
// Errors: logits undefined, not 2-d with E >= 1, not a float dtype; top_k outside [1, E]
// (InvalidArgument).
RoutingPlan route(const Tensor& logits, const RoutingOptions& options, const Stream& stream = {});
// The plan's tensors written into caller buffers (engines, graph capture): indices_out U32
// [T, k] and weights_out [T, k] in the logits' dtype, contiguous, overlapping no operand
// (else InvalidArgument). Nothing is allocated.
void route_into(const Tensor& indices_out, const Tensor& weights_out, const Tensor& logits,
                const RoutingOptions& options, const Stream& stream = {});

// DeepSeek-V3's group-limited sigmoid routing of logits [T, E] with an optional F32
// correction bias [E]. Per token, in FP32: score s_e = sigmoid(logit_e); corrected
// c_e = s_e + bias_e (bias absent: c = s). Experts form `groups` consecutive equal groups;
// a group's score is its largest c (or, with group_top_two, the sum of its two largest);
// the `selected_groups` best groups are kept (ties to the lower group id) and the top_k
// best experts by c among them are selected (ties to the lower expert id). Weights are the
// selected *uncorrected* scores s, divided by their sum when renormalize, times scale,
// rounded to the logits' dtype: the bias changes which experts are chosen, never a weight.
// NaN ranks above every number (a NaN logit's expert and group are chosen first, its weight
// NaN; renormalised, the whole row NaN).
// Errors: logits as for route plus E in [1, 1024]; bias (when defined) not F32 [E] or on
// another device; groups outside [1, 128] or not dividing E; selected_groups outside
// [1, groups]; top_k outside [1, 64] or above selected_groups * E / groups; group_top_two
// with fewer than 2 experts per group; scale not finite and positive.
RoutingPlan route_sigmoid_grouped(const Tensor& logits, const Tensor& bias,
                                  const GroupRoutingOptions& options, const Stream& stream = {});
// Into caller buffers, as route_into.
void route_sigmoid_grouped_into(const Tensor& indices_out, const Tensor& weights_out,
                                const Tensor& logits, const Tensor& bias,
                                const GroupRoutingOptions& options, const Stream& stream = {});

// ---------------------------------------------------------------------------------------
// Dispatch and combine
// ---------------------------------------------------------------------------------------

// Tokens grouped by expert: the T*k selected (token, slot) pairs, as rows. No token is
// dropped (no capacity limit). Rows of expert e are [offsets[e], offsets[e+1]), in
// ascending token order (a stable sort), so the layout is the same on every run.
class DispatchedTokens {
 public:
  // [T*k, H], the input's dtype: row r is input[token_of_row[r]].
  const Tensor& rows() const { return rows_; }
  // I32 [E + 1]: offsets[0] = 0, offsets[E] = T*k; the form the grouped GEMM takes.
  const Tensor& offsets() const { return offsets_; }
  // I32 [T*k]: the token each row came from.
  const Tensor& token_of_row() const { return token_of_row_; }
  // I32 [T, k]: the row that holds slot (t, j).
  const Tensor& row_of_slot() const { return row_of_slot_; }
  // The routing weights [T, k] (logits' dtype) and indices, as in the plan.
  const Tensor& weights() const { return weights_; }
  const Tensor& expert_indices() const { return indices_; }
  int64_t tokens() const { return tokens_; }
  int64_t top_k() const { return top_k_; }
  int64_t experts() const { return experts_; }
  int64_t hidden() const { return rows_.defined() ? rows_.size(1) : 0; }

  // output[t] = sum_{j = 0..k-1} weights[t, j] * expert_out[row_of_slot[t, j]], summed in
  // FP32 in that order, rounded once to expert_out's dtype. expert_out is [T*k, H'] (any
  // H' >= 1) in a float dtype; the result is [T, H'].
  // Errors: expert_out undefined, of another row count, a non-float dtype, another device.
  Tensor combine(const Tensor& expert_out, const Stream& stream = {}) const;

  // The backward of combine for grad_output [T, H'] (expert_out's dtype and H'):
  //   dexpert[row_of_slot[t, j]] = weights[t, j] * grad_output[t]     (expert_out's dtype)
  //   dweights[t, j] = sum_h grad_output[t, h] * expert_out[row_of_slot[t, j], h]   (F32)
  // Serial (the default) sums each dot product in h order on one thread; Plane splits it
  // over a block of threads and folds the partial sums in a fixed tree. Both are
  // deterministic (no atomics); they differ in rounding only.
  // Errors: as combine, plus grad_output not [T, H'] of expert_out's dtype and device.
  CombineGradients combine_backward(const Tensor& expert_out, const Tensor& grad_output,
                                    const Stream& stream = {}) const;
  CombineGradients combine_backward_with_strategy(const Tensor& expert_out,
                                                  const Tensor& grad_output,
                                                  CombineGradientStrategy strategy,
                                                  const Stream& stream = {}) const;

  // The backward of dispatch: dinput[t] = sum_j drows[row_of_slot[t, j]], summed in FP32 in
  // slot order and rounded to drows' dtype; the routing weights are not applied again (they
  // belong to combine). drows is [T*k, H'] of a float dtype.
  // Errors: drows undefined, of another row count, a non-float dtype, another device.
  Tensor dispatch_backward(const Tensor& drows, const Stream& stream = {}) const;

 private:
  friend struct Internal;
  Tensor rows_, offsets_, token_of_row_, row_of_slot_, weights_, indices_;
  int64_t tokens_ = 0, top_k_ = 0, experts_ = 0;
};

// ---------------------------------------------------------------------------------------
// Router training: continuous weights of a fixed selection and their logits gradient
// ---------------------------------------------------------------------------------------

enum class RouterScoring { Softmax, Sigmoid };

struct RouterWeightOptions {
  RouterScoring scoring = RouterScoring::Softmax;
  bool renormalize = false;  // divide by the sum over the k selected slots
  float scale = 1.0f;        // finite, > 0; applied after the renormalisation
};

// FP32 weights [T, k] of the selection `indices` [T, k] (U32, I32 or I64) over logits
// [T, E]: q_j = softmax(logits[t])[indices[t, j]] (FP32 softmax over all E) or
// sigmoid(logits[t, indices[t, j]]); w_j = scale * q_j / (renormalize ? sum_m q_m : 1).
// Repeated indices gather (each slot counts, in the sum too). A row with any index outside
// [0, E) is NaN in every slot; nothing is read out of bounds and nothing synchronises.
// This differentiates the weights of a fixed selection: not top-k, groups or a bias.
// Errors: logits as for route; indices undefined, not [T, k] with 1 <= k <= min(E, 64), of
// another dtype or device.
Tensor selected_router_weights(const Tensor& logits, const Tensor& indices,
                               const RouterWeightOptions& options, const Stream& stream = {});
void selected_router_weights_into(const Tensor& weights_out, const Tensor& logits,
                                  const Tensor& indices, const RouterWeightOptions& options,
                                  const Stream& stream = {});
// The gradient of sum(grad_weights * selected_router_weights(...)) with respect to logits:
// [T, E] in the logits' dtype (every expert gets one under softmax scoring; only selected ones
// under sigmoid). grad_weights is F32 [T, k]. Rows with an invalid index are NaN.
// Errors: as selected_router_weights, plus grad_weights not F32 [T, k] on the device.
Tensor selected_router_backward(const Tensor& logits, const Tensor& indices,
                                const Tensor& grad_weights, const RouterWeightOptions& options,
                                const Stream& stream = {});
void selected_router_backward_into(const Tensor& dlogits_out, const Tensor& logits,
                                   const Tensor& indices, const Tensor& grad_weights,
                                   const RouterWeightOptions& options, const Stream& stream = {});

// A routing plan's selection with weights recomputed (F32) by selected_router_weights, and the
// logits gradient of those weights. Keeps the logits (do not modify them in between).
class RouterTrainingPlan {
 public:
  RouterTrainingPlan(const RoutingPlan& selection, const Tensor& logits,
                     const RouterWeightOptions& options, const Stream& stream = {});
  // The plan to dispatch with: the selection and the F32 weights.
  const RoutingPlan& routing() const { return routing_; }
  // selected_router_backward(logits, indices, grad_weights, options).
  Tensor backward(const Tensor& grad_weights, const Stream& stream = {}) const;

 private:
  RoutingPlan routing_;
  Tensor logits_;
  RouterWeightOptions options_;
};

// ---------------------------------------------------------------------------------------
// Native SwiGLU: the activation as the experts store it
// ---------------------------------------------------------------------------------------

// out = round(round(SiLU(gate)) * up), elementwise, SiLU(g) = g / (1 + e^-g) in FP32 and
// rounded to the storage dtype before the multiply (which the transformer family's swiglu
// does not do). gate and up: one shape (any), one float dtype and device.
// Errors: gate or up undefined, of a non-float dtype, of different shapes, dtypes or devices.
Tensor native_swiglu(const Tensor& gate, const Tensor& up, const Stream& stream = {});
void native_swiglu_into(const Tensor& out, const Tensor& gate, const Tensor& up,
                        const Stream& stream = {});

struct NativeSwiGluSelection {
  bool gate = true;
  bool up = true;
};
struct NativeSwiGluGradients {
  Tensor gate;  // undefined unless selected
  Tensor up;    // undefined unless selected
};
// The input gradients of native_swiglu for grad (gate's shape and dtype), only those selected
// (an unselected one is neither computed nor allocated: undefined, not zeros):
//   dup = grad * round(SiLU(gate))                       (the stored SiLU, as the forward used)
//   dgate = grad * up * SiLU'(gate), SiLU'(g) = s (1 + g (1 - s)), s = sigmoid(g)
// each in FP32, rounded once to the dtype.
// Errors: as native_swiglu, plus grad not of gate's shape, dtype and device.
NativeSwiGluGradients native_swiglu_backward(const Tensor& gate, const Tensor& up,
                                             const Tensor& grad,
                                             const NativeSwiGluSelection& selection = {},
                                             const Stream& stream = {});
// Into caller buffers; an undefined output is not requested (not computed, not written).
void native_swiglu_backward_into(const Tensor& dgate_out, const Tensor& dup_out, const Tensor& gate,
                                 const Tensor& up, const Tensor& grad, const Stream& stream = {});

// ---------------------------------------------------------------------------------------
// SwiGLU experts
// ---------------------------------------------------------------------------------------

// How the expert projections run.
//   Scalar      FP32-accumulating CUDA-core grouped kernel (every float dtype).
//   TensorCore  the library's grouped tensor-core GEMM (F16/BF16 on compute capability 8.0
//               or newer; otherwise Unsupported): grouped GEMMs for gate and up (two
//               launches: no fused gate+up epilogue yet), native_swiglu's kernel for the
//               activation, a grouped GEMM for down.
//   Auto        forward: decode batches take a streaming matrix-vector path on CUDA cores
//               (each selected expert's weights read once, in 16-byte loads, FP32
//               accumulation, any float dtype): at most 64 dispatched rows (T * k <= 64)
//               where TensorCore is allowed (beyond that its GEMMs stream the weights
//               faster), at most 512 elsewhere; larger batches take TensorCore where the
//               dtype and device allow it, else Scalar. Backward:
//               TensorCore where allowed, else Scalar. Chosen from the shape and the
//               device's capability only; a failed launch is an error, never retried.
enum class GroupedStrategy { Scalar, TensorCore, Auto };

// What the expert backward needs of a training forward (dispatched rows, the stored gate and
// up projections and their activation) and the weights. Cheap to copy (tensor handles).
struct ExpertGradients {
  Tensor dinput;  // [T*k, H], the weights' dtype (dispatched rows: pass to dispatch_backward)
  Tensor dgate;   // [E, I, H], F32
  Tensor dup;     // [E, I, H], F32
  Tensor ddown;   // [E, H, I], F32
};
struct ExpertGradientSelection {
  bool input = true, gate = true, up = true, down = true;
};
class ExpertTrainingCache {
 public:
  // Gradients for dexpert (= d loss / d expert_out, [T*k, H], the weights' dtype), with the
  // Scalar strategy (the default, whatever the forward used) or the one given:
  //   dact = dexpert . down_e (rounded to the dtype); ddown_e = dexpert_e^T . act_e
  //   (F32 outputs; the reference defines them in float64 from x and the weights)
  //   dgate_pre, dup_pre = native_swiglu_backward(gate_pre, up_pre, dact)
  //   dinput = dgate_pre . gate_e + dup_pre . up_e    (FP32 sum, rounded once)
  //   dgate_e = dgate_pre_e^T . x_e, dup_e = dup_pre_e^T . x_e   (FP32)
  // An expert with no rows gets zero weight gradients. Weight gradients are reduced over
  // each expert's rows in a fixed order (no atomics). Memory: 3 [T*k, I] activations and an
  // F32 [T*k, H] accumulator while it runs, besides the results.
  // Errors: dexpert undefined, not [T*k, H] of the weights' dtype on their device; an empty
  // cache; TensorCore as for forward_dispatched_with_strategy.
  ExpertGradients backward(const Tensor& dexpert, const Stream& stream = {}) const;
  ExpertGradients backward_with_strategy(const Tensor& dexpert, GroupedStrategy strategy,
                                         const Stream& stream = {}) const;
  // Only the selected gradients: the others are neither computed nor allocated (undefined).
  ExpertGradients backward_selected(const Tensor& dexpert, const ExpertGradientSelection& which,
                                    GroupedStrategy strategy, const Stream& stream = {}) const;

 private:
  friend struct Internal;
  Tensor rows_, offsets_, gate_pre_, up_pre_, act_;
  Tensor gate_, up_, down_;
};

struct ExpertTrainingForward {
  Tensor output;  // [T*k, H], as forward_dispatched
  ExpertTrainingCache cache;
};

// Bias-free SwiGLU experts: expert e maps a row x [H] to
//   down_e . native_swiglu(round(gate_e . x), round(up_e . x))
// with FP32 accumulation: the two projections are rounded to the weights' dtype (what stored
// activations hold), their activation is native_swiglu's (SiLU rounded before the product,
// the product rounded), the output is rounded once at the end. Inference and training run
// the same arithmetic, so their outputs agree bit for bit on one path. The reference
// computes the formula in float64 without the intermediate roundings.
// gate and up are [E, I, H], down [E, H, I], one float dtype and device (the constructor
// checks; errors name the op "SwiGluExperts"). The object holds the tensors (no copy) and
// is reused across batches.
class SwiGluExperts {
 public:
  SwiGluExperts(const Tensor& gate, const Tensor& up, const Tensor& down);

  int64_t experts() const { return gate_.size(0); }
  int64_t inter() const { return gate_.size(1); }
  int64_t hidden() const { return gate_.size(2); }
  const Tensor& gate() const { return gate_; }
  const Tensor& up() const { return up_; }
  const Tensor& down() const { return down_; }

  // The experts applied to dispatched rows: [T*k, H] in the weights' dtype. Memory: an
  // [T*k, I] activation scratch (TensorCore: three of them) while it runs.
  // Determinism: each expert's rows are reduced in a fixed order; bit-equal run to run.
  // Errors: tokens of another E or H, another dtype or device; TensorCore on F32 or on a
  // device below compute capability 8.0 (Unsupported).
  Tensor forward_dispatched(const DispatchedTokens& tokens, const Stream& stream = {}) const;
  Tensor forward_dispatched_with_strategy(const DispatchedTokens& tokens, GroupedStrategy strategy,
                                          const Stream& stream = {}) const;

  // The forward for training: forward_dispatched's output, with the stored projections
  // and activation kept for the backward. Memory: the output and three [T*k, I] arrays in
  // the cache. Errors: as forward_dispatched_with_strategy.
  ExpertTrainingForward forward_dispatched_training(
      const DispatchedTokens& tokens, GroupedStrategy strategy = GroupedStrategy::Scalar,
      const Stream& stream = {}) const;

  // route -> dispatch -> experts -> combine for input [T, H] and logits [T, E].
  // Auto on a CUDA device with a decode batch (as GroupedStrategy says) and E <= 4096 skips
  // the dispatch: the kernels read the input rows in place (the dispatched path when they
  // are not 16-byte aligned) and stream each selected expert's weights once; up to T = 4
  // the combine is folded into the down projection. The result equals route -> dispatch ->
  // forward_dispatched_with_strategy(Auto) -> combine bit for bit. Memory: [T*k, I] (and
  // above T = 4, [T*k, H]) scratch besides the output.
  Tensor forward(const Tensor& input, const Tensor& logits, const RoutingOptions& options,
                 const Stream& stream = {}) const;
  Tensor forward_with_strategy(const Tensor& input, const Tensor& logits,
                               const RoutingOptions& options, GroupedStrategy strategy,
                               const Stream& stream = {}) const;
  // route_sigmoid_grouped -> dispatch -> experts -> combine.
  Tensor forward_sigmoid_grouped(const Tensor& input, const Tensor& logits, const Tensor& bias,
                                 const GroupRoutingOptions& options, GroupedStrategy strategy,
                                 const Stream& stream = {}) const;

 private:
  Tensor gate_, up_, down_;
};

// ---------------------------------------------------------------------------------------
// Expert projections: trainable per-expert matrices addressed by global expert ids
// ---------------------------------------------------------------------------------------

struct ExpertProjectionOptions {
  int64_t expert_start = 0;  // the global id of weights[0] (>= 0)
  GroupedStrategy forward = GroupedStrategy::Scalar;
  GroupedStrategy backward = GroupedStrategy::Scalar;
};

// What expert_projection_backward needs: the operands of the forward (kept, not copied: do
// not modify them in between) and its options.
class ExpertProjectionState {
 private:
  friend struct Internal;
  Tensor input_, ids_, weights_;
  ExpertProjectionOptions options_;
};

struct ExpertProjectionForward {
  Tensor output;  // [R, N], input's dtype, rows in the incoming order
  ExpertProjectionState state;
};

// output[r] = weights[ids[r] - expert_start] . input[r] for input [R, K], global ids U32 [R]
// and weights [E, N, K] (input's dtype), FP32 accumulation, rows in the order they came (the
// rows are grouped by expert internally: a stable sort, bit-reproducible). A row whose id is
// outside [expert_start, expert_start + E) has no expert here: its output row is NaN (no
// host synchronisation checks the ids; nothing is read out of bounds).
// Memory: the dispatched rows and their projections (R x (K + N)) while it runs.
// Errors: input not [R, K] of a float dtype; ids not U32 [R]; weights not [E, N, K] of
// input's dtype with E, N >= 1; expert_start < 0; operands on different devices; TensorCore as
// for forward_dispatched_with_strategy (Unsupported).
ExpertProjectionForward expert_projection_forward(const Tensor& input, const Tensor& global_ids,
                                                  const Tensor& weights,
                                                  const ExpertProjectionOptions& options,
                                                  const Stream& stream = {});

struct ExpertProjectionSelection {
  bool input = true, weights = true;
};
struct ExpertProjectionGradients {
  Tensor input;    // [R, K], input's dtype (NaN rows for foreign ids); undefined unless selected
  Tensor weights;  // [E, N, K], F32, each expert's rows reduced in order; undefined unless selected
};
// The selected first-order gradients for grad [R, N] (the output's dtype), with the state's
// backward strategy; an unselected one is neither computed nor allocated.
// Errors: an empty state; grad not [R, N] of the output's dtype and device.
ExpertProjectionGradients expert_projection_backward(
    const ExpertProjectionState& state, const Tensor& grad,
    const ExpertProjectionSelection& selection = {}, const Stream& stream = {});

// ---------------------------------------------------------------------------------------
// The one-call contract: selection -> training weights -> dispatch -> experts -> combine,
// and its first-order backward
// ---------------------------------------------------------------------------------------

// The discrete selection: softmax top-k, or group-limited sigmoid with a correction bias.
struct MoeSelection {
  enum class Kind { Softmax, SigmoidGrouped };
  Kind kind = Kind::Softmax;
  RoutingOptions softmax;       // Kind::Softmax
  GroupRoutingOptions grouped;  // Kind::SigmoidGrouped
};

// Every choice of the branch, explicit: nothing is inferred from a model family.
struct MoeOptions {
  MoeSelection selection;
  RouterWeightOptions weights;  // the continuous weights the output uses and differentiates
  GroupedStrategy forward = GroupedStrategy::Scalar;
  GroupedStrategy backward = GroupedStrategy::Scalar;
  CombineGradientStrategy combine_backward = CombineGradientStrategy::Serial;
};

// Which first-order gradients a backward computes (an unrequested one is neither computed
// nor allocated: undefined, never zeros).
struct MoeGradientSelection {
  bool input = true, logits = true, gate = true, up = true, down = true;
  bool experts_or_input() const { return input || gate || up || down; }
};

// The state a forward leaves for its backward: the selection, the training weights' plan
// (which keeps the logits), the dispatched tokens, the expert output, and (unless a
// selected forward omitted them) the experts' activation caches. Cheap to copy.
class MoeState {
 public:
  bool has_expert_caches() const { return has_caches_; }

 private:
  friend struct Internal;
  RoutingPlan selection_;
  std::optional<RouterTrainingPlan> training_;
  DispatchedTokens tokens_;
  Tensor expert_out_;
  ExpertTrainingCache cache_;
  bool has_caches_ = false;
  MoeOptions options_;
};

struct MoeForward {
  Tensor output;  // [T, H], input's dtype
  MoeState state;
};

// All five gradients; logits' in the logits' dtype, input's in the input's, the expert
// weights' F32.
struct MoeGradients {
  Tensor input, logits, gate, up, down;
};

// The routed expert branch for input [T, H], logits [T, E], an optional F32 correction bias
// [E] (SigmoidGrouped only; it changes the selection, never a weight) and the expert weights
// gate, up [E, I, H], down [E, H, I]:
//   selection -> w = selected_router_weights(logits, selection, options.weights)
//   -> dispatch -> experts (options.forward) -> combine with w.
// No token is dropped; nothing synchronises with the host. The state keeps what the
// backward needs (the expert caches: 3 [T*k, I] arrays).
// Errors: those of route / route_sigmoid_grouped, selected_router_weights, dispatch,
// SwiGluExperts and forward_dispatched (each message names that step), and a bias given to a
// softmax selection (InvalidArgument, op "moe_forward").
MoeForward moe_forward(const Tensor& input, const Tensor& logits, const Tensor& bias,
                       const Tensor& gate, const Tensor& up, const Tensor& down,
                       const MoeOptions& options, const Stream& stream = {});
// The same, knowing which gradients will be asked for: with neither input nor an expert
// weight selected, the expert caches are not kept (a later backward asking for them is
// InvalidArgument).
MoeForward moe_forward_selected(const Tensor& input, const Tensor& logits, const Tensor& bias,
                                const Tensor& gate, const Tensor& up, const Tensor& down,
                                const MoeOptions& options, const MoeGradientSelection& selection,
                                const Stream& stream = {});
// The forward's output alone: no state, no caches kept (the same bits as moe_forward's).
Tensor moe_inference(const Tensor& input, const Tensor& logits, const Tensor& bias,
                     const Tensor& gate, const Tensor& up, const Tensor& down,
                     const MoeOptions& options, const Stream& stream = {});
// The selected expert ids of a forward: U32 [T, k], on the device, not read back. This is a
// discrete output: nothing differentiates it.
Tensor moe_route_indices(const MoeState& state);
// First-order gradients for grad_output [T, H] (the output's dtype): the expert backward
// (options.backward), combine's (options.combine_backward), dispatch's (no second routing
// weight) and the router's for the fixed selection (not the top-k or group decisions, not
// the bias). Only first-order derivatives exist; there is no double backward.
// Errors: an empty state; grad_output not [T, H] of the output's dtype (combine_backward's
// messages); a selected gradient needing expert caches the forward did not keep.
MoeGradients moe_backward(const MoeState& state, const Tensor& grad_output,
                          const Stream& stream = {});
MoeGradients moe_backward_selected(const MoeState& state, const Tensor& grad_output,
                                   const MoeGradientSelection& selection,
                                   const Stream& stream = {});

}  // namespace rudnn::moe
