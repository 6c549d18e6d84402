// The CUDA backend of the MoE family: one entry per problem. Problems are validated
// (problem.h); these only launch, ordered on `stream`, with no host synchronisation.
#pragma once

#include "moe/problem.h"
#include "rudnn/stream.h"

namespace rudnn::moe::cuda {

void route_softmax(const RouteSoftmax& p, const Stream& stream);
void route_sigmoid_grouped(const RouteSigmoidGrouped& p, const Stream& stream);
void dispatch(const Dispatch& p, const Stream& stream);
// Dispatch's last step alone: rows[r] = input[token_of_row[r]] for a mapping already made
// (a second operand dispatched the same way).
void gather_rows(const Dispatch& p, const Stream& stream);
void combine(const Combine& p, const Stream& stream);
void experts_forward(const ExpertsForward& p, const Stream& stream);
void decode_forward(const DecodeForward& p, const Stream& stream);
void expert_projection(const ExpertProjection& p, const Stream& stream);
void experts_backward(const ExpertsBackward& p, const Stream& stream);
void combine_backward(const CombineBackward& p, const Stream& stream);
void selected_router(const SelectedRouter& p, const Stream& stream);
void native_swiglu(const NativeSwiGlu& p, const Stream& stream);

// The pieces of experts_forward, per path (experts_scalar*.cu, experts_tensor_core.cu).
// act [rows, inter] in p.dtype is the activation scratch.
template <class T>
void experts_scalar(const ExpertsForward& p, void* act, const Stream& stream);
template <class T>
void experts_decode(const ExpertsForward& p, void* act, const Stream& stream);

// The backward's scratch (experts.cu allocates it).
struct BackwardScratch {
  void* dact = nullptr;       // [rows, inter]
  void* dgate_pre = nullptr;  // [rows, inter]
  void* dup_pre = nullptr;    // [rows, inter]
  float* dx_f32 = nullptr;    // [rows, hidden]
};
template <class T>
void experts_scalar_backward(const ExpertsBackward& p, const BackwardScratch& s,
                             const Stream& stream);
void experts_tensor_core_backward(const ExpertsBackward& p, const BackwardScratch& s,
                                  const Stream& stream);
// dgate_pre, dup_pre from gate_pre, up_pre and dact (native_swiglu_backward's kernel), and
// dx = dx_f32 rounded to the dtype (training.cu).
void swiglu_backward_rows(const ExpertsBackward& p, const BackwardScratch& s, const Stream& stream);
void convert_rows(const ExpertsBackward& p, const BackwardScratch& s, const Stream& stream);
void experts_tensor_core(const ExpertsForward& p, void* gate_pre, void* up_pre, void* act,
                         const Stream& stream);

}  // namespace rudnn::moe::cuda
