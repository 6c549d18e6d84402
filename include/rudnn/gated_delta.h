// The gated delta rule (Gated DeltaNet's linear-attention recurrence, as in Qwen3-Next /
// Qwen3.5): token-by-token recurrence in two input forms.
//
// For every step t and value head, with S the FP32 state of that head ([Dv, Dk]):
//   S <- decay_t * S;   S <- S + beta_t * (v_t - S k_t) k_t^T;   y_t = S (scale * q_t).
//
// Two forms, taken without copies:
// - spec 003's (fla / mlx-lm layout): q, k [B,T,Hk,Dk], v [B,T,Hv,Dv], gate g and beta
//   [B,T,Hv], state [B,Hv,Dv,Dk]. decay_t = g_t (the gate itself), scale = 1. Value head h
//   reads key head h / (Hv / Hk); Hv must be a multiple of Hk.
// - spec 000's (GatedDeltaInput): query, key [B,H,T,K], value [B,H,T,V], beta [B,H,T] in
//   the query's dtype, log_decay [B,H,T] F32, initial_state [B,H,K,V] F32 (stored transposed
//   relative to spec 003: state[k][v] = S[v][k]), decay_t = exp(log_decay_t), scale =
//   query_scale.
//
// Precision: on the CPU, the float64 reference (src/gated_delta/reference.h; operands F32,
// F16, BF16 or F64), outputs rounded once to their dtype. On a CUDA device, one kernel: the
// state is held in FP32 registers for the whole time loop (read once, written once), inputs
// are widened to FP32, y rounded once to q's dtype. With an F32 state, a call over T steps
// is bit-equal to T one-step calls chained through the returned state. GPU operands: Dk up
// to 256 (larger is ErrorCode::Unsupported), any Dv; inputs of any layout are read through
// a dense copy when not contiguous.
//
// NOT IMPLEMENTED YET (later work of issue 14): the chunked prefill form
// chunk_gated_delta_rule (tensor cores), variable-length packed sequences (cu_seqlens), the
// backward of any form, GPU Dk > 256, and a device-side check of slot ids (on the GPU, ids
// out of range or repeated are the caller's error and not detected).
//
// Errors (rudnn::Error, message "op: argument ...; expected ..."): an undefined operand, a
// non-floating dtype (F64 only on the CPU), operands on different devices, a shape that does not
// match the rules above, q/k/v of different dtypes, Hv not a multiple of Hk, a non-finite
// query_scale, log_decay or initial_state not F32 (spec 000's form), slot ids not integers, out of
// range or repeated (checked on the host when slots live there).
#pragma once

#include "rudnn/stream.h"
#include "rudnn/tensor.h"

namespace rudnn {

// The outputs of spec 003's forms: y [B,T,Hv,Dv] in q's dtype, and the state in the input
// state's dtype (gated_delta: the final state [B,Hv,Dv,Dk]; gated_delta_steps: every step's
// state [B,T,Hv,Dv,Dk], step t at index t, the last equal to gated_delta's final state).
struct GatedDeltaResult {
  Tensor y;
  Tensor state;
};

// Spec 003's gated_delta. `state` is read, never written. Memory: y and the final state.
GatedDeltaResult gated_delta(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g,
                             const Tensor& beta, const Tensor& state, const Stream& stream = {});

// gated_delta returning every step's state (T times the state's bytes); y equals
// gated_delta's.
GatedDeltaResult gated_delta_steps(const Tensor& q, const Tensor& k, const Tensor& v,
                                   const Tensor& g, const Tensor& beta, const Tensor& state,
                                   const Stream& stream = {});

// gated_delta over states kept in a pool: sequence b starts from pool[slots[b]] and its final
// state is written back there, in place. pool [S,Hv,Dv,Dk] (floating), slots [B] (i32 or
// i64, distinct, in [0, S)). Returns y [B,T,Hv,Dv]; each sequence's y and state equal
// gated_delta's on its state alone. Pool entries not named by slots are untouched.
Tensor gated_delta_slots(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g,
                         const Tensor& beta, const Tensor& pool, const Tensor& slots,
                         const Stream& stream = {});

// Spec 000's input (see the top of this file for the layouts and dtypes).
struct GatedDeltaInput {
  Tensor query, key, value, beta, log_decay, initial_state;
  float query_scale = 1.0f;
};
// output [B,H,T,V] in the query's dtype; final_state [B,H,K,V] F32.
struct GatedDeltaOutput {
  Tensor output;
  Tensor final_state;
};

// Spec 000's gated_delta_rule: the token-by-token recurrence (the decode path). The initial
// state is never written.
GatedDeltaOutput gated_delta_rule(const GatedDeltaInput& input, const Stream& stream = {});

}  // namespace rudnn
