#include "ctc/cuda/ctc.cuh"

namespace rudnn::ctc::cuda {
template void ctc_loss_typed<__nv_bfloat16>(const CtcProblem&, const rudnn::cuda::LaunchContext&);
template void ctc_loss_backward_typed<__nv_bfloat16>(const CtcProblem&,
                                                     const rudnn::cuda::LaunchContext&);
}  // namespace rudnn::ctc::cuda
