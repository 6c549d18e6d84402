// The expert forward: the activation scratch, then the chosen path.
#include "core/cuda_check.h"
#include "cuda/launch.cuh"
#include "moe/cuda/launch.h"
#include "rudnn/tensor.h"

namespace rudnn::moe::cuda {

void experts_forward(const ExpertsForward& p, const Stream& stream) {
  if (p.rows == 0) return;
  const ::rudnn::cuda::LaunchContext ctx(stream);
  // Training keeps the projections and the activation in its cache; inference frees its
  // scratch stream-ordered after the kernels.
  const auto scratch = [&](void* kept) {
    return kept ? Tensor{} : Tensor::empty({p.rows, p.inter}, p.dtype, ctx.device, stream);
  };
  const Tensor act_scratch = scratch(p.act);
  void* const act = p.act ? p.act : act_scratch.data();
  if (p.path == ExpertPath::TensorCore) {
    const Tensor gate_scratch = scratch(p.gate_pre), up_scratch = scratch(p.up_pre);
    experts_tensor_core(p, p.gate_pre ? p.gate_pre : gate_scratch.data(),
                        p.up_pre ? p.up_pre : up_scratch.data(), act, stream);
    return;
  }
  ::rudnn::cuda::with_float_type(p.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if (p.path == ExpertPath::Decode) {
      experts_decode<T>(p, act, stream);
    } else {
      experts_scalar<T>(p, act, stream);
    }
  });
}

void experts_backward(const ExpertsBackward& p, const Stream& stream) {
  const ::rudnn::cuda::LaunchContext ctx(stream);
  if (p.rows == 0) {  // no rows: zero weight gradients, nothing else to compute
    const size_t bytes = static_cast<size_t>(p.experts * p.inter * p.hidden) * sizeof(float);
    for (float* d : {p.dgate, p.dup, p.ddown})
      if (d) detail::check_cuda(cudaMemsetAsync(d, 0, bytes, ctx.stream), "cudaMemsetAsync");
    return;
  }
  const bool any_activation_gradient = p.dx || p.dgate || p.dup;
  // Temporaries, freed stream-ordered after the kernels that use them.
  Tensor dact, dgate_pre, dup_pre, dx_f32;
  BackwardScratch s;
  if (any_activation_gradient && p.rows > 0) {
    dact = Tensor::empty({p.rows, p.inter}, p.dtype, ctx.device, stream);
    dgate_pre = Tensor::empty({p.rows, p.inter}, p.dtype, ctx.device, stream);
    dup_pre = Tensor::empty({p.rows, p.inter}, p.dtype, ctx.device, stream);
    s.dact = dact.data();
    s.dgate_pre = dgate_pre.data();
    s.dup_pre = dup_pre.data();
  }
  if (p.dx && p.rows > 0) {
    dx_f32 = Tensor::empty({p.rows, p.hidden}, DType::f32, ctx.device, stream);
    s.dx_f32 = static_cast<float*>(dx_f32.data());
  }
  if (p.path == ExpertPath::TensorCore) {
    experts_tensor_core_backward(p, s, stream);
    return;
  }
  ::rudnn::cuda::with_float_type(p.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    experts_scalar_backward<T>(p, s, stream);
  });
}

}  // namespace rudnn::moe::cuda
