// Choices of the attention kernels that the benchmark harness (rudnn_bench --variants) and
// the GPU tests may override, so that alternatives can be timed side by side and each one
// stays tested. Not part of the public API. The plan reads them (plan_attention reports what
// runs), so set them before planning; not synchronised.
#pragma once

#include <cstdint>

namespace rudnn::attn::cuda {

struct KernelTuning {
  // SplitKv on tensor cores (split_kv_tc.cuh) where it takes the call (f16 / bf16, D = Dv in
  // {64, 128, 256}, sm_80 and later); false: the CUDA-core kernel (scalar_forward.cuh).
  bool split_kv_tensor_cores = true;
  // Keys per SplitKv partition (a positive multiple of 128); 0: the plan's rule
  // (decode_split_keys in plan.cpp).
  int64_t split_kv_keys = 0;
};

KernelTuning& kernel_tuning();

}  // namespace rudnn::attn::cuda
