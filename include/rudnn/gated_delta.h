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
// Variable-length packed sequences (the *_varlen forms, as engines batch prefill): the
// inputs have batch 1 and their T axis packs N sequences, sequence n being steps
// [cu_seqlens[n], cu_seqlens[n+1]) with its own state n; cu_seqlens is [N + 1] I32 on the
// inputs' device. Each sequence's results equal the dense form's on that sequence alone (bit
// for bit on the GPU). On the host the offsets are checked (0 first, non-decreasing, T
// last); on a device they are never read by the host (no synchronisation), so bad offsets
// there are the caller's error: the kernel clamps each range into [0, T] (wrong results,
// never an access out of bounds).
//
// Backward (gated_delta_backward, gated_delta_rule_backward): the gradients of every input
// and of the initial state given those of y and of the final state, optionally varlen.
// Definition: the float64 reference walking the steps backwards over recomputed states. On
// a CUDA device, one kernel per (sequence, value head, slab of 32 state rows) holding dS in
// FP32 registers: a forward pass stores FP32 checkpoints of the state every 32 steps, each
// chunk is recomputed from its checkpoint and walked backwards; a second kernel sums the
// per-slab partials of dq, dk, dg and dbeta in a fixed order (deterministic, no atomics).
// Memory (device workspace, F32): 2 x slabs x T x Hv x Dk (+ 2 x slabs x T x Hv) for the
// partials, the checkpoints (about a state per 32 steps per sequence), and 32 states per
// block for the recomputed chunk; slabs = ceil(Dv / 32).
//
// Every op has an _into form writing preallocated outputs: each of the result's shape and
// dtype, contiguous, on the inputs' device, overlapping no input and no other output.
//
// Chunked prefill (chunk_gated_delta_rule, spec 000's form; chunk_gated_delta and
// chunk_gated_delta_slots, spec 003's): the WY / UT-transform
// algorithm over chunks of chunk_size steps, the same results as the recurrence up to rounding
// (see chunk_gated_delta_rule's declaration below). Its backward, spec 000's form:
// chunk_gated_delta_rule_backward (the chunked algorithm's on a CUDA device; see its
// declaration).
//
// Slot ids on the device (gated_delta_slots*) cannot raise an error without a host
// synchronisation: a sequence whose id is outside the pool or named by another sequence too
// leaves the pool untouched and gets NaN outputs (never an out-of-bounds access, never two
// sequences racing on one state). Device cu_seqlens are clamped into [0, T] and made
// non-decreasing, so bad offsets cannot address outside the inputs either.
//
// NOT IMPLEMENTED YET (later work of issue 14): a chunked backward for spec 003's form (its
// gradients are the recurrence's: gated_delta_backward) and GPU Dk > 256.
//
// Errors (rudnn::Error, message "op: argument ...; expected ..."): a chunk_size that is not
// positive or whose workspace exceeds the shared-memory limit (chunk_gated_delta*), an
// undefined operand, a non-floating dtype (F64 only on the CPU), operands on different devices, a shape that does not
// match the rules above, q/k/v of different dtypes, Hv not a multiple of Hk, a non-finite
// query_scale, log_decay or initial_state not F32 (spec 000's form), slot ids not integers, out of
// range or repeated (checked on the host when slots live there); cu_seqlens not I32, not
// [N + 1] (N the leading dim of the state, pool slot list or initial_state), with inputs of
// B != 1, or (on the host) not starting at 0, decreasing, or not ending at T; upstream
// gradients not floating or not of their forward result's shape.
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
// gated_delta into preallocated outputs (y_out [B,T,Hv,Dv] in q's dtype, state_out in the
// state's shape and dtype; both contiguous, overlapping no input and not each other).
void gated_delta_into(const Tensor& y_out, const Tensor& state_out, const Tensor& q,
                      const Tensor& k, const Tensor& v, const Tensor& g, const Tensor& beta,
                      const Tensor& state, const Stream& stream = {});

// gated_delta returning every step's state (T times the state's bytes); y equals
// gated_delta's.
GatedDeltaResult gated_delta_steps(const Tensor& q, const Tensor& k, const Tensor& v,
                                   const Tensor& g, const Tensor& beta, const Tensor& state,
                                   const Stream& stream = {});
void gated_delta_steps_into(const Tensor& y_out, const Tensor& states_out, const Tensor& q,
                            const Tensor& k, const Tensor& v, const Tensor& g, const Tensor& beta,
                            const Tensor& state, const Stream& stream = {});

// gated_delta over states kept in a pool: sequence b starts from pool[slots[b]] and its final
// state is written back there, in place. pool [S,Hv,Dv,Dk] (floating), slots [B] (i32 or
// i64, distinct, in [0, S)). Returns y [B,T,Hv,Dv]; each sequence's y and state equal
// gated_delta's on its state alone. Pool entries not named by slots are untouched.
Tensor gated_delta_slots(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g,
                         const Tensor& beta, const Tensor& pool, const Tensor& slots,
                         const Stream& stream = {});
void gated_delta_slots_into(const Tensor& y_out, const Tensor& q, const Tensor& k,
                            const Tensor& v, const Tensor& g, const Tensor& beta,
                            const Tensor& pool, const Tensor& slots, const Stream& stream = {});

// Spec 003's chunked prefill: chunk_gated_delta_rule's WY / UT-transform algorithm (see its
// declaration below) over gated_delta's operands, equal to gated_delta up to rounding. q, k
// [B,T,Hk,Dk], v [B,T,Hv,Dv], g and beta [B,T,Hv], state [B,Hv,Dv,Dk] (any floating dtype,
// F64 on the CPU too); decay = g itself (g = 0, a reset, is exact: decays are multiplied, never
// logged), scale 1, value head h reads key head h / (Hv / Hk). Returns y [B,T,Hv,Dv] in q's
// dtype and the final state in the state's shape and dtype; `state` is never written.
// chunk_size: the rule and errors of chunk_gated_delta_rule (positive, 4 x (chunk_size^2 +
// chunk_size) bytes within the host limit of 227 KiB), checked after the shapes.
// Precision: the algorithm in float64 on the CPU (results differ from gated_delta's at the
// 1e-15 level), y and the state rounded once. Memory: y and the final state, plus float64
// host copies of the operands and per-chunk work arrays (O(chunk_size^2 + chunk_size x (Dk +
// Dv))).
// Errors: gated_delta's (shapes, dtypes, Hv not a multiple of Hk, outputs) and chunk_size's.
// On a CUDA device: chunk_gated_delta_rule's kernels, limits and precision, reading spec 003's
// operands through their strides (no transposed copies); the decay of a chunk's steps is
// formed from log |g| with its zero and negative gates counted apart, so that g = 0 (a reset)
// and g < 0 are exact there too (the float32 rounding of log |g| aside); the state is read and
// written in its own dtype, held in FP32.
GatedDeltaResult chunk_gated_delta(const Tensor& q, const Tensor& k, const Tensor& v,
                                   const Tensor& g, const Tensor& beta, const Tensor& state,
                                   int64_t chunk_size, const Stream& stream = {});
// Into preallocated outputs, as gated_delta_into.
void chunk_gated_delta_into(const Tensor& y_out, const Tensor& state_out, const Tensor& q,
                            const Tensor& k, const Tensor& v, const Tensor& g, const Tensor& beta,
                            const Tensor& state, int64_t chunk_size, const Stream& stream = {});

// chunk_gated_delta over states kept in a pool, as gated_delta_slots: sequence b starts from
// pool[slots[b]] and its final state is written back there, in place; pool [S,Hv,Dv,Dk]
// (floating, contiguous), slots [B] (i32 or i64, distinct, in [0, S)); entries not named are
// untouched. Returns y [B,T,Hv,Dv]; each sequence's results equal chunk_gated_delta's on its
// state alone (on a GPU bit for bit: the same kernels, the states read from and written to
// the pool). Errors: gated_delta_slots' and chunk_size's, all raised before the pool or y is
// written; on a GPU also chunk_gated_delta's Unsupported cases. Device slot ids as
// gated_delta_slots': a sequence whose id is outside the pool or named twice leaves the pool
// untouched and gets NaN outputs.
Tensor chunk_gated_delta_slots(const Tensor& q, const Tensor& k, const Tensor& v,
                               const Tensor& g, const Tensor& beta, const Tensor& pool,
                               const Tensor& slots, int64_t chunk_size, const Stream& stream = {});
void chunk_gated_delta_slots_into(const Tensor& y_out, const Tensor& q, const Tensor& k,
                                  const Tensor& v, const Tensor& g, const Tensor& beta,
                                  const Tensor& pool, const Tensor& slots, int64_t chunk_size,
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
void gated_delta_rule_into(const Tensor& output_out, const Tensor& final_state_out,
                           const GatedDeltaInput& input, const Stream& stream = {});

// Spec 000's chunk_gated_delta_rule: the chunked prefill, equal to gated_delta_rule up to
// rounding. Each sequence is cut into chunks of chunk_size steps (its last chunk padded with
// steps that change nothing and are excluded from the output). Per chunk, with G the running
// sum of log_decay inside it: A = strictly lower (beta_i k_i.k_j exp(G_i - G_j)),
// T = (I + A)^-1 by forward substitution, W = T (beta exp(G) K), U = T (beta V); then, chunk
// after chunk, carrying the FP32 state S [K, V]: V' = U - W S, O = scale ((Q exp(G)) S +
// (Q K^T, lower, exp(G_i - G_j)) V'), S = exp(G_last) S + (K exp(G_last - G))^T V'.
// Shapes and dtypes as gated_delta_rule: output [B,H,T,V] in the query's dtype, final_state
// [B,H,K,V] F32; the initial state is never written. A log_decay of -inf (a zero decay, a
// reset) is exact: the kernels count such steps apart from the running sums of logs.
// chunk_size: positive, and the chunk's triangular FP32 workspace, 4 x (chunk_size^2 +
// chunk_size) bytes (A and T share one chunk_size^2 block; G takes the rest), within the
// per-block shared-memory limit: on a CUDA device its opt-in limit
// (cudaDevAttrMaxSharedMemoryPerBlockOptin), on the CPU 227 KiB (Hopper's, so that a size
// accepted on the host is accepted there). Otherwise rudnn::Error (InvalidArgument) naming
// the limit.
// Precision: on the CPU the algorithm in float64 (not the step-by-step definition: rounding
// differs from gated_delta_rule's at the 1e-15 level), output rounded once. On a CUDA device
// three kernels (fla's split): a parallel one per (chunk, head) building A in FP32 from
// tensor-core products (16-bit inputs: mma.sync m16n8k16 with ldmatrix fragments, FP32
// accumulation), solving T in FP32 (16 x 16 diagonal blocks, then block rows) and writing W,
// U and the masked, decayed Q K^T in q's dtype; a sequential one per (sequence, head, 32
// value columns) holding the FP32 state in registers as the accumulator of its update
// product, which per chunk writes the chunk's entry state S_c and V' = U - W S_c (both
// rounded to q's dtype, as fla) and loads the next chunk's operands by cp.async meanwhile;
// then a parallel one per (chunk, head, value block) forming O from Q S_c and (Q K^T) V'.
// The state and V' are rounded to q's dtype only as product operands; the state itself stays
// FP32 throughout. F32 inputs run the same kernels with FP32 CUDA-core products (no rounding
// of intermediates). Expected error against the float64 recurrence: about 1e-2 relative
// (bf16), 3e-3 (f16), 1e-5 (f32). Indexing is 64-bit (T x H x K past 2^31 is tested).
// GPU limits (ErrorCode::Unsupported): chunk_size <= 128; K and V <= 256; the kernels'
// shared memory (the largest: about 2 x chunk x (K + 8) x itemsize + 4 x chunk^2 + ...)
// within the device's limit (e.g. K = 256 needs chunk_size <= 64 in bf16, F32 too).
// Memory (device workspace, allocated by each call on its stream, so a call is not for CUDA
// graph capture): per (chunk, head) W [c, K], U (then V') [c, V], Q K^T [c, c] and the entry
// state S_c [K, V] in q's dtype and G [c] F32, c = chunk_size rounded up to 16, K and V to 16:
// at c = 64, K = V = 128 in bf16 72 KB a chunk and head, about 1.1 KB per token and head.
GatedDeltaOutput chunk_gated_delta_rule(const GatedDeltaInput& input, int64_t chunk_size,
                                        const Stream& stream = {});
void chunk_gated_delta_rule_into(const Tensor& output_out, const Tensor& final_state_out,
                                 const GatedDeltaInput& input, int64_t chunk_size,
                                 const Stream& stream = {});

// ---- Variable-length packed sequences (see the top of this file) -------------------------------

// gated_delta over N packed sequences: q, k [1,T,Hk,Dk], v [1,T,Hv,Dv], g, beta [1,T,Hv],
// state [N,Hv,Dv,Dk], cu_seqlens [N+1] I32. Returns y [1,T,Hv,Dv] and the final states
// [N,Hv,Dv,Dk]. Memory: y and the final states.
GatedDeltaResult gated_delta_varlen(const Tensor& q, const Tensor& k, const Tensor& v,
                                    const Tensor& g, const Tensor& beta, const Tensor& state,
                                    const Tensor& cu_seqlens, const Stream& stream = {});
void gated_delta_varlen_into(const Tensor& y_out, const Tensor& state_out, const Tensor& q,
                             const Tensor& k, const Tensor& v, const Tensor& g,
                             const Tensor& beta, const Tensor& state, const Tensor& cu_seqlens,
                             const Stream& stream = {});

// gated_delta_steps over N packed sequences (operands, state and cu_seqlens as
// gated_delta_varlen): returns y [1,T,Hv,Dv] in q's dtype and every step's state
// [1,T,Hv,Dv,Dk] in the state's dtype, token t's state at index t; each sequence's slice equals
// gated_delta_steps on that sequence alone, bit for bit, and its last token's state equals
// gated_delta_varlen's final state (an empty sequence writes nothing). Precision: float64
// accumulation on the CPU; on a CUDA device gated_delta's kernel, each step's FP32 state
// stored as it is reached (bit-equal to gated_delta_steps per sequence). Memory: y and T times
// one state per head. Errors: as gated_delta_varlen. Device offsets are clamped, as
// gated_delta_varlen's: with bad ones, steps no sequence covers are left unwritten.
GatedDeltaResult gated_delta_steps_varlen(const Tensor& q, const Tensor& k, const Tensor& v,
                                          const Tensor& g, const Tensor& beta, const Tensor& state,
                                          const Tensor& cu_seqlens, const Stream& stream = {});
void gated_delta_steps_varlen_into(const Tensor& y_out, const Tensor& states_out,
                                   const Tensor& q, const Tensor& k, const Tensor& v,
                                   const Tensor& g, const Tensor& beta, const Tensor& state,
                                   const Tensor& cu_seqlens, const Stream& stream = {});

// gated_delta_slots over N packed sequences: sequence n starts from pool[slots[n]] and its
// final state is written back there; slots [N]. Returns y [1,T,Hv,Dv].
Tensor gated_delta_slots_varlen(const Tensor& q, const Tensor& k, const Tensor& v,
                                const Tensor& g, const Tensor& beta, const Tensor& pool,
                                const Tensor& slots, const Tensor& cu_seqlens,
                                const Stream& stream = {});
void gated_delta_slots_varlen_into(const Tensor& y_out, const Tensor& q, const Tensor& k,
                                   const Tensor& v, const Tensor& g, const Tensor& beta,
                                   const Tensor& pool, const Tensor& slots,
                                   const Tensor& cu_seqlens, const Stream& stream = {});

// chunk_gated_delta over N packed sequences (layouts as gated_delta_varlen; cu_seqlens [N+1]
// I32, its values checked when it is on the host): each sequence is chunked on its own (no chunk spans two), its
// results equal a separate chunk_gated_delta call on it. Returns y [1,T,Hv,Dv] and the final
// states [N,Hv,Dv,Dk]. On a GPU the offsets stay on the device (clamped as gated_delta_varlen's)
// and each sequence's results equal a separate GPU call's bit for bit.
GatedDeltaResult chunk_gated_delta_varlen(const Tensor& q, const Tensor& k, const Tensor& v,
                                          const Tensor& g, const Tensor& beta, const Tensor& state,
                                          const Tensor& cu_seqlens, int64_t chunk_size,
                                          const Stream& stream = {});
void chunk_gated_delta_varlen_into(const Tensor& y_out, const Tensor& state_out, const Tensor& q,
                                   const Tensor& k, const Tensor& v, const Tensor& g,
                                   const Tensor& beta, const Tensor& state,
                                   const Tensor& cu_seqlens, int64_t chunk_size,
                                   const Stream& stream = {});

// chunk_gated_delta_slots over N packed sequences: sequence n starts from pool[slots[n]] and
// its final state is written back there; slots [N]. Returns y [1,T,Hv,Dv]. Rules as above.
Tensor chunk_gated_delta_slots_varlen(const Tensor& q, const Tensor& k, const Tensor& v,
                                      const Tensor& g, const Tensor& beta, const Tensor& pool,
                                      const Tensor& slots, const Tensor& cu_seqlens,
                                      int64_t chunk_size, const Stream& stream = {});
void chunk_gated_delta_slots_varlen_into(const Tensor& y_out, const Tensor& q, const Tensor& k,
                                         const Tensor& v, const Tensor& g, const Tensor& beta,
                                         const Tensor& pool, const Tensor& slots,
                                         const Tensor& cu_seqlens, int64_t chunk_size,
                                         const Stream& stream = {});

// gated_delta_rule over N packed sequences: query, key [1,H,T,K], value [1,H,T,V], beta,
// log_decay [1,H,T], initial_state [N,H,K,V] F32. Returns output [1,H,T,V] and final_state
// [N,H,K,V] F32.
GatedDeltaOutput gated_delta_rule_varlen(const GatedDeltaInput& input, const Tensor& cu_seqlens,
                                         const Stream& stream = {});
void gated_delta_rule_varlen_into(const Tensor& output_out, const Tensor& final_state_out,
                                  const GatedDeltaInput& input, const Tensor& cu_seqlens,
                                  const Stream& stream = {});

// chunk_gated_delta_rule over N packed sequences (layouts as gated_delta_rule_varlen); each
// sequence is chunked on its own (no chunk spans two sequences), and its results equal a
// separate chunk_gated_delta_rule call on it (up to rounding).
GatedDeltaOutput chunk_gated_delta_rule_varlen(const GatedDeltaInput& input,
                                               const Tensor& cu_seqlens, int64_t chunk_size,
                                               const Stream& stream = {});
void chunk_gated_delta_rule_varlen_into(const Tensor& output_out, const Tensor& final_state_out,
                                        const GatedDeltaInput& input, const Tensor& cu_seqlens,
                                        int64_t chunk_size, const Stream& stream = {});

// ---- Backward ----------------------------------------------------------------------------------

// Gradients of spec 003's form, each in its input's shape and dtype.
struct GatedDeltaGrads {
  Tensor dq, dk, dv, dg, dbeta, dstate;
};

// The backward of gated_delta (cu_seqlens undefined) or gated_delta_varlen: dy in y's shape,
// dstate (the final state's gradient, optional: undefined is zero) in the state's shape,
// both any floating dtype; the other arguments are the forward's. dq and dk sum over the
// value heads that share a key head. Precision: float64 on the CPU, rounded once to each
// output's dtype; on the GPU FP32 (see the top of this file).
GatedDeltaGrads gated_delta_backward(const Tensor& dy, const Tensor& dstate, const Tensor& q,
                                     const Tensor& k, const Tensor& v, const Tensor& g,
                                     const Tensor& beta, const Tensor& state,
                                     const Tensor& cu_seqlens = {}, const Stream& stream = {});
// Into preallocated gradients (every field defined, in its input's shape and dtype).
void gated_delta_backward_into(const GatedDeltaGrads& out, const Tensor& dy, const Tensor& dstate,
                               const Tensor& q, const Tensor& k, const Tensor& v,
                               const Tensor& g, const Tensor& beta, const Tensor& state,
                               const Tensor& cu_seqlens = {}, const Stream& stream = {});

// Gradients of spec 000's form: dquery, dkey, dvalue, dbeta in their inputs' dtypes,
// dlog_decay and dinitial_state F32.
struct GatedDeltaInputGrads {
  Tensor dquery, dkey, dvalue, dbeta, dlog_decay, dinitial_state;
};

// The backward of gated_delta_rule (cu_seqlens undefined) or gated_delta_rule_varlen:
// doutput in output's shape, dfinal_state (optional) [B,H,K,V] (or [N,H,K,V]). As
// gated_delta_backward otherwise.
GatedDeltaInputGrads gated_delta_rule_backward(const Tensor& doutput, const Tensor& dfinal_state,
                                               const GatedDeltaInput& input,
                                               const Tensor& cu_seqlens = {},
                                               const Stream& stream = {});

void gated_delta_rule_backward_into(const GatedDeltaInputGrads& out, const Tensor& doutput,
                                    const Tensor& dfinal_state, const GatedDeltaInput& input,
                                    const Tensor& cu_seqlens = {}, const Stream& stream = {});

// The backward of chunk_gated_delta_rule (cu_seqlens undefined) or
// chunk_gated_delta_rule_varlen: gated_delta_rule_backward's arguments, gradients and errors,
// plus chunk_size's rule and errors (chunk_gated_delta_rule's). The gradients are the
// recurrence's up to rounding; on the CPU exactly gated_delta_rule_backward's (the float64
// reference).
// On a CUDA device, the chunked algorithm's backward (src/gated_delta/cuda/chunked_backward.cuh):
// the chunked forward pass again, a sequential pass per (sequence, head, 32 or 64 value
// columns) walking the chunks in reverse with dS in FP32 registers, and two parallel kernels per
// (chunk, head); products on tensor cores with FP32 accumulation for f16/bf16 (their operands
// rounded to q's dtype: the states, dS and dV' per chunk), FP32 for the WY transform's
// gradient; deterministic (fixed-order sums, no atomics). Memory (device workspace, bytes, per
// chunk and head, Cp = chunk_size rounded up to 16, Kp, Vp = K, V rounded up to 16, s = q's
// item size): the forward's (Cp (Kp + Vp + 2 Cp) s + Kp Vp s) plus Kp Vp s + Cp Vp s +
// Cp Kp s + 4 (2 Cp Kp + 2 Cp^2 + Cp + 16); e.g. about 0.25 MB per 64-step chunk and head at
// K = V = 128 in bf16. Where the kernels do not take the problem (chunk_size > 128, K or V >
// 256, shared memory past the device's limit: e.g. F32 at K = V = 128, or chunk_size 128) the
// recurrence's backward kernels run instead (gated_delta_rule_backward's, same results up to
// rounding).
GatedDeltaInputGrads chunk_gated_delta_rule_backward(const Tensor& doutput,
                                                     const Tensor& dfinal_state,
                                                     const GatedDeltaInput& input,
                                                     int64_t chunk_size,
                                                     const Tensor& cu_seqlens = {},
                                                     const Stream& stream = {});
void chunk_gated_delta_rule_backward_into(const GatedDeltaInputGrads& out, const Tensor& doutput,
                                          const Tensor& dfinal_state,
                                          const GatedDeltaInput& input, int64_t chunk_size,
                                          const Tensor& cu_seqlens = {},
                                          const Stream& stream = {});

}  // namespace rudnn
