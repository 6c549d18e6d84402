#include "transformer/cuda/tuning.h"

namespace rudnn::transformer::cuda {

KernelTuning& kernel_tuning() {
  static KernelTuning tuning;
  return tuning;
}

}  // namespace rudnn::transformer::cuda
