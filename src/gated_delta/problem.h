// The validated recurrence problem the CUDA backend receives: both input forms reduce to it
// through strides (spec 000's [B,H,T,D] and transposed [K,V] state, spec 003's [B,T,H,D]).
#pragma once

#include <cstdint>

#include "rudnn/dtype.h"

namespace rudnn::gdn {

struct Recurrence {
  int64_t batch = 0, steps = 0, key_heads = 0, value_heads = 0, key_dim = 0, value_dim = 0;
  DType dtype = DType::f32;  // q, k, v and y
  // Element (b, t, h, d) of q/k at q + b*qk_b + t*qk_t + h*qk_h + d; likewise v and y.
  const void *q = nullptr, *k = nullptr, *v = nullptr;
  int64_t qk_b = 0, qk_t = 0, qk_h = 0, v_b = 0, v_t = 0, v_h = 0;
  void* y = nullptr;  // same strides as v
  // gate and beta (b, t, h) at + b*g_b + t*g_t + h*g_h.
  const void *gate = nullptr, *beta = nullptr;
  DType gate_dtype = DType::f32, beta_dtype = DType::f32;
  int64_t g_b = 0, g_t = 0, g_h = 0;
  bool log_gate = false;  // spec 000: decay = exp(log_decay)
  float scale = 1.0f;     // applied to q
  // States, dense per (sequence, value head): [Dv, Dk], or [Dk, Dv] when transposed.
  const void* state_in = nullptr;
  void* state_out = nullptr;  // the final state (may equal state_in: the pool), or null
  DType state_dtype = DType::f32;
  bool state_transposed = false;
  void* every_step = nullptr;   // [B,T,Hv,Dv,Dk] in state_dtype, or null
  const void* slots = nullptr;  // [B] on the device: sequence b's state is slot slots[b]
  DType slot_dtype = DType::i64;
  int64_t pool_slots = 0;  // with slots: the pool's slot count (ids outside it are unusable)
  // [batch + 1] I32 on the device, or null: the inputs are one packed entry (b = 0) and
  // sequence b is its steps [cu_seqlens[b], cu_seqlens[b+1]), clamped into [0, steps].
  const int32_t* cu_seqlens = nullptr;
  bool vector_state = false;  // set by the launch: the state buffers are 16-byte aligned
};

}  // namespace rudnn::gdn

namespace rudnn::gdn {

// The backward of the recurrence: the forward's operands (`f`; its y, state_out, every_step
// and slots unused) and the upstream gradients, with the outputs in the forward inputs'
// layouts: dq, dk as q (f.dtype), dv as v, dgate and dbeta as gate/beta (their own dtypes;
// with f.log_gate dgate is d/dlog_decay), dstate as the state (transposed when f is).
struct RecurrenceBackward {
  Recurrence f;
  const void* dy = nullptr;  // y's layout (v's strides)
  DType dy_dtype = DType::f32;
  const void* dfinal = nullptr;  // the final state's gradient, the state's layout, or null
  DType dfinal_dtype = DType::f32;
  void *dq = nullptr, *dk = nullptr, *dv = nullptr, *dgate = nullptr, *dbeta = nullptr,
       *dstate = nullptr;
  DType dgate_dtype = DType::f32, dbeta_dtype = DType::f32, dstate_dtype = DType::f32;
  float* workspace = nullptr;  // backward_workspace_floats(f) floats on the device
};

}  // namespace rudnn::gdn

namespace rudnn::gdn {

// The validated chunked problem: a recurrence problem (both forms, through its strides: spec
// 000's [B,H,T,D] operands, log decay and [K,V] F32 state, spec 003's [B,T,H,D] operands, the
// gate itself and a [V,K] state of any floating dtype) cut into chunks. batch counts the
// sequences (N with cu_seqlens), value_heads the heads the kernels run; y takes v's strides;
// every_step is not used; with slots (chunk_gated_delta_slots*) state_in and state_out are the
// pool, as in the recurrence.
struct Chunked : Recurrence {
  int64_t chunk = 0;
  // Set by the launch: rows of q and k (async_qk), of v (async_v) are whole 16-byte chunks,
  // 16-byte aligned, so that they can be copied with cp.async.
  bool async_qk = false, async_v = false;
  // The backward's forward pass: prepare also keeps T = (I + A)^-1 in the workspace.
  bool keep_wy = false;
};

// The backward of the chunked form, spec 000's (log decay, one head count): the forward's
// problem `f` (its y and state_out unused) and the upstream gradients: dy dense in output's
// layout (v's strides), any floating dtype; dfinal (or null: zero) in the state's layout.
// Outputs in the forward inputs' layouts: dq, dk as q, dv as v (f.dtype), dbeta as beta (its
// dtype), dlog_decay and dstate F32.
struct ChunkedBackward {
  Chunked f;
  const void* dy = nullptr;
  DType dy_dtype = DType::f32;
  const void* dfinal = nullptr;
  DType dfinal_dtype = DType::f32;
  void *dq = nullptr, *dk = nullptr, *dv = nullptr, *dbeta = nullptr, *dlog_decay = nullptr,
       *dstate = nullptr;
  DType dbeta_dtype = DType::f32;
};

}  // namespace rudnn::gdn
