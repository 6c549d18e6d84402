// Launch choices of the depthwise and causal conv1d kernels that the benchmark harness
// (rudnn_bench --variants) and the GPU tests may override, so that alternatives are timed
// side by side in one run and each stays tested. Not part of the public API. Not
// synchronised: set it before launching from several threads.
#pragma once

namespace rudnn::conv_detail::cuda {

struct DwTuning {
  // Channels-last 3x3 stride-1 depthwise: 0 the stream kernel (a thread walks a run of rows
  // of 7 output columns x 2 channels in registers, loading 2 input rows ahead), 1 the same
  // with 4 columns, 2 the tile kernel (input rows staged in a shared-memory ring by
  // cp.async), 3 the stream kernel with 4 columns loading 3 rows ahead. The tile kernel is
  // the default: [32,256,56,56] bf16 37.5 % of copy against 26.4 % for the stream kernel,
  // whose loads stall on L1TEX with too few bytes in flight (DRAM 17 %; round 2 at 20:08).
  int depthwise_3x3 = 2;
  // Output rows per stream-kernel thread: 0 chosen from the grid (the fewest waves), else
  // this many.
  int stream_run = 0;
  // Causal conv1d forward at W = 4, packed kernel: 0 runs of 16 positions a thread (16-byte
  // packs), 1 runs of 8, 2 runs of 32, 3 runs of 32 with 8-byte packs, 4 runs of 16 with
  // BF16's SiLU in the logistic form (exponential and reciprocal) instead of the tanh form.
  // 3 is the default: [8,1024,4096] bf16 k4 SiLU 75.0 % of copy (0: 69.3, 2: 73.8, 1: 60.1,
  // 4: 64.1; round 2 at 20:08). Other widths take runs of 16 with the widest pack.
  int causal_forward = 3;
};

DwTuning& dw_tuning();

}  // namespace rudnn::conv_detail::cuda
