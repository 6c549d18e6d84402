// Validated problems of the MoE family: what the backends (the float64 CPU reference and the
// CUDA kernels) receive. Every pointer is dense and valid for the described extent, every
// dtype supported, outputs overlap no input. Backends neither re-validate nor throw for
// user errors.
#pragma once

#include <cstdint>

#include "rudnn/dtype.h"

namespace rudnn::moe {

// Softmax top-k over logits [tokens, experts].
struct RouteSoftmax {
  int64_t tokens = 0, experts = 0, top_k = 0;
  bool renormalize = false;
  DType dtype = DType::f32;  // logits and weights
  const void* logits = nullptr;
  uint32_t* indices = nullptr;  // [tokens, top_k]
  void* weights = nullptr;      // [tokens, top_k]
};

// Group-limited sigmoid routing (experts <= 1024, groups <= 128, top_k <= 64).
struct RouteSigmoidGrouped {
  int64_t tokens = 0, experts = 0, top_k = 0, groups = 0, selected_groups = 0;
  bool group_top_two = false, renormalize = false;
  float scale = 1.0f;
  DType dtype = DType::f32;
  const void* logits = nullptr;
  const float* bias = nullptr;  // [experts] or null
  uint32_t* indices = nullptr;
  void* weights = nullptr;
};

// Stable counting sort of the tokens * top_k slots by expert, and the gather of the rows.
struct Dispatch {
  int64_t tokens = 0, top_k = 0, experts = 0, hidden = 0;
  DType dtype = DType::f32;           // input and rows
  const uint32_t* indices = nullptr;  // [tokens, top_k], each < experts
  const void* input = nullptr;        // [tokens, hidden]
  void* rows = nullptr;               // [tokens * top_k, hidden]
  int32_t* offsets = nullptr;         // [experts + 1]
  int32_t* token_of_row = nullptr;    // [tokens * top_k]
  int32_t* row_of_slot = nullptr;     // [tokens, top_k]
};

// out[t] = sum_j weights[t, j] * expert_out[row_of_slot[t, j]].
struct Combine {
  int64_t tokens = 0, top_k = 0, hidden = 0;
  DType dtype = DType::f32;          // expert_out and out
  DType weight_dtype = DType::f32;   // weights
  const void* expert_out = nullptr;  // [tokens * top_k, hidden]
  const void* weights = nullptr;     // [tokens, top_k]; null: every weight 1 (dispatch backward)
  const int32_t* row_of_slot = nullptr;
  void* out = nullptr;  // [tokens, hidden]
};

// Decode: the streaming matrix-vector kernels of at most kDecodeRows rows (experts_decode.cuh).
enum class ExpertPath { Scalar, TensorCore, Decode };
constexpr int64_t kDecodeRows = 512;
// Where the tensor cores serve (F16/BF16 on compute capability >= 8.0, E <= 1024), Auto takes
// the decode kernels only up to this many rows: they compute on CUDA cores, and past about
// 8 rows an expert (T = 16 at top-8 of 64) the grouped tensor-core GEMMs stream the weights
// faster (H200 bf16 E64 top-8 H2048 I1408: T = 16 0.36 ms against 0.48, T = 64 0.38 against
// 1.03; T = 4 0.18 ms on the decode kernels).
constexpr int64_t kDecodeRowsWithTensorCores = 64;

// SwiGLU experts over dispatched rows grouped by offsets.
struct ExpertsForward {
  int64_t rows = 0, experts = 0, hidden = 0, inter = 0;
  DType dtype = DType::f32;
  ExpertPath path = ExpertPath::Scalar;
  const void* x = nullptr;           // [rows, hidden]
  const int32_t* offsets = nullptr;  // [experts + 1]
  const void* gate = nullptr;        // [experts, inter, hidden]
  const void* up = nullptr;          // [experts, inter, hidden]
  const void* down = nullptr;        // [experts, hidden, inter]
  void* y = nullptr;                 // [rows, hidden]
  // Training forward: the stored projections and activation ([rows, inter] each), or null.
  void* gate_pre = nullptr;
  void* up_pre = nullptr;
  void* act = nullptr;
};

// The whole decode forward from a routing plan, without a dispatch (decode.cu): the
// inference forward of Auto on a CUDA device when T * top_k <= kDecodeRows (or
// kDecodeRowsWithTensorCores) and
// E <= kDecodeMaxExperts (a bitmask of E bits per block), the input 16-byte aligned.
// out[t] = sum over j in slot order of weights[t, j] * SwiGLU expert indices[t, j] of input[t].
constexpr int64_t kDecodeMaxExperts = 4096;
// Batches of at most this many tokens fold the combine into the down projection (one kernel
// and the [T * top_k, H] expert output fewer); it streams the down rows token by token, so an
// expert shared by several tokens is read once per token (the repeats from L2).
constexpr int64_t kDecodeFusedTokens = 4;
struct DecodeForward {
  int64_t tokens = 0, top_k = 0, experts = 0, hidden = 0, inter = 0;
  DType dtype = DType::f32;           // input, weights of the experts, out
  DType weight_dtype = DType::f32;    // the routing weights
  const void* input = nullptr;        // [tokens, hidden]
  const uint32_t* indices = nullptr;  // [tokens, top_k], each < experts
  const void* weights = nullptr;      // [tokens, top_k]
  const void* gate = nullptr;         // [experts, inter, hidden]
  const void* up = nullptr;           // [experts, inter, hidden]
  const void* down = nullptr;         // [experts, hidden, inter]
  void* out = nullptr;                // [tokens, hidden]
};

// The expert backward; a null output is not requested.
struct ExpertsBackward {
  int64_t rows = 0, experts = 0, hidden = 0, inter = 0;
  DType dtype = DType::f32;
  ExpertPath path = ExpertPath::Scalar;
  const void* x = nullptr;
  const int32_t* offsets = nullptr;
  const void* gate = nullptr;
  const void* up = nullptr;
  const void* down = nullptr;
  const void* gate_pre = nullptr;  // [rows, inter]
  const void* up_pre = nullptr;
  const void* act = nullptr;
  const void* dy = nullptr;  // [rows, hidden]
  void* dx = nullptr;        // [rows, hidden], dtype
  float* dgate = nullptr;    // [experts, inter, hidden]
  float* dup = nullptr;
  float* ddown = nullptr;  // [experts, hidden, inter]
};

}  // namespace rudnn::moe

namespace rudnn::moe {

// dexpert[row(t, j)] = w[t, j] * grad_out[t]; dweights[t, j] = <grad_out[t], expert_out[row(t,
// j)]>.
struct CombineBackward {
  int64_t tokens = 0, top_k = 0, hidden = 0;
  DType dtype = DType::f32;  // expert_out, grad_out, dexpert
  DType weight_dtype = DType::f32;
  bool plane = false;  // the reduction order of dweights (Plane, else Serial)
  const void* expert_out = nullptr;
  const void* grad_out = nullptr;  // [tokens, hidden]
  const void* weights = nullptr;
  const int32_t* row_of_slot = nullptr;
  void* dexpert = nullptr;    // [tokens * top_k, hidden]
  float* dweights = nullptr;  // [tokens, top_k]
};

// Weights of a given selection, or (grad_weights set) the logits gradient.
struct SelectedRouter {
  int64_t tokens = 0, experts = 0, top_k = 0;
  DType dtype = DType::f32;        // logits, dlogits
  DType index_dtype = DType::u32;  // u32, i32, i64
  bool sigmoid = false, renormalize = false;
  float scale = 1.0f;
  const void* logits = nullptr;
  const void* indices = nullptr;
  float* weights = nullptr;             // forward: [tokens, top_k]
  const float* grad_weights = nullptr;  // backward: [tokens, top_k]
  void* dlogits = nullptr;              // backward: [tokens, experts]
};

// Elementwise native SwiGLU and its selected input gradients.
struct NativeSwiGlu {
  int64_t count = 0;
  DType dtype = DType::f32;
  const void* gate = nullptr;
  const void* up = nullptr;
  const void* grad = nullptr;  // backward only
  void* out = nullptr;         // forward
  void* dgate = nullptr;       // backward, null: not selected
  void* dup = nullptr;         // backward, null: not selected
};

}  // namespace rudnn::moe

namespace rudnn::moe {

// Per-expert projections of rows addressed by global expert ids: forward (y set) or backward
// (dy set). Local expert = id - expert_start; ids outside [0, experts) give NaN rows.
struct ExpertProjection {
  int64_t rows = 0, experts = 0, n = 0, k = 0, expert_start = 0;
  DType dtype = DType::f32;
  ExpertPath path = ExpertPath::Scalar;
  const void* x = nullptr;        // [rows, k]
  const uint32_t* ids = nullptr;  // [rows], global
  const void* weights = nullptr;  // [experts, n, k]
  void* y = nullptr;              // forward: [rows, n]
  const void* dy = nullptr;       // backward: [rows, n]
  void* dx = nullptr;             // backward, or null: [rows, k]
  float* dweights = nullptr;      // backward, or null: [experts, n, k]
};

}  // namespace rudnn::moe
