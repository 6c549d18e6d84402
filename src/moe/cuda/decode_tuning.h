// Launch choices of the decode forward (decode.cu) that the benchmark harness
// (rudnn_bench --variants) and the GPU tests may override, so that the alternatives are timed
// side by side in one run and each stays tested. Not part of the public API. Not
// synchronised: set it before launching from several threads.
#pragma once

#include <cstdint>

namespace rudnn::moe::cuda {

struct DecodeTuning {
  // Batches of at most this many tokens fold the combine into the down projection; -1:
  // kDecodeFusedTokens (problem.h).
  int64_t fused_tokens = -1;
  // Output features per warp of the expert-major kernels; 0: 2 from 32 selected slots up
  // (fewer blocks, each scanning the T * top_k indices once), else 1.
  int features_per_warp = 0;
  // Launch the kernels after routing as programmatic dependents (sm_90); false: plain launches.
  bool dependent_launch = true;
};

DecodeTuning& decode_tuning();

}  // namespace rudnn::moe::cuda
