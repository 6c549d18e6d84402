#pragma once

namespace rudnn::gdn::cuda {

// Launch choices of the chunked kernels that the benchmark harness (rudnn_bench --variants)
// and the GPU tests may override, so that the alternatives are timed side by side in one run
// and each stays tested. Not part of the public API. Not synchronised: set it before
// launching from several threads.
struct ChunkedTuning {
  // The forward's state pass (and the backward's forward pass): operand stages, 1 to 3; 0: 3
  // when the blocks are one an SM anyway, else 2 (fewer where they do not fit).
  int state_stages = 0;
  // The state pass's value columns a block, 32 or 64 (one block an SM); 0: 32, or 64 where
  // 32-column blocks would outnumber the SMs.
  int state_pass_cols = 0;
  // The backward's reverse pass: value columns a block, 32 or 64; 0: 32, or 64 where 32-column
  // blocks would need more than one wave.
  int reverse_pass_cols = 0;
};
ChunkedTuning& chunked_tuning();

}  // namespace rudnn::gdn::cuda
