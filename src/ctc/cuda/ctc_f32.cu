#include "ctc/cuda/ctc.cuh"

namespace rudnn::ctc::cuda {
template void ctc_loss_typed<float>(const CtcProblem&, const rudnn::cuda::LaunchContext&);
template void ctc_loss_backward_typed<float>(const CtcProblem&, const rudnn::cuda::LaunchContext&);
}  // namespace rudnn::ctc::cuda
