// CPU reference of the MoE family: the definition of each op in plain loops, arithmetic in
// float64 (selection ranks FP32 scores with the kernels' order, order_key.h). It is what CPU
// tensors run and the oracle the GPU tests compare with.
#pragma once

#include "moe/problem.h"

namespace rudnn::moe::reference {

void route_softmax(const RouteSoftmax& p);
void route_sigmoid_grouped(const RouteSigmoidGrouped& p);
void dispatch(const Dispatch& p);
void combine(const Combine& p);
void experts_forward(const ExpertsForward& p);
void expert_projection(const ExpertProjection& p);
void experts_backward(const ExpertsBackward& p);
void combine_backward(const CombineBackward& p);
void selected_router(const SelectedRouter& p);
void native_swiglu(const NativeSwiGlu& p);

}  // namespace rudnn::moe::reference
