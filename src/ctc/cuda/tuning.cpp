#include "ctc/cuda/tuning.h"

namespace rudnn::ctc::cuda {

KernelTuning& kernel_tuning() {
  static KernelTuning tuning;
  return tuning;
}

}  // namespace rudnn::ctc::cuda
