// Launch choices of this family's CUDA kernels that the benchmark harness may override, so
// that variants can be timed side by side in one run (rudnn_bench --variants). Not part of
// the public API. The defaults are the variants bench/RESULTS.md measured fastest; a choice
// a device cannot run (a cluster below sm_90, a row too long for a cluster) falls back to
// the portable kernels whatever is set here.
//
// Not synchronised: set it before launching from several threads.
#pragma once

namespace rudnn::norm::cuda {

struct KernelTuning {
  // Log-sum-exp of rows that fill a block register tile: one warp per row streaming the row
  // into an online reduction (true), or the block register tile (false).
  bool logsumexp_warp_rows = true;
  // Cross-entropy gradient of long rows (vocabularies): each row split across the blocks of
  // a thread-block cluster and held in their registers, read from memory once
  // (cross_entropy.cu); false: the two-pass loop, which reads each row twice (the second
  // time from L2 when it can). `cluster_size` (2, 4 or 8) and
  // `cluster_threads` (256 or 512) force a shape when it holds the row; 0 picks the smallest
  // that does.
  bool cluster_cross_entropy = true;
  int cluster_size = 0;
  int cluster_threads = 0;
  // LayerNorm backward of rows of 129 .. 1024 aligned 16-byte vectors: the streamed kernel
  // (each thread's x and dy vectors of the next rows copied ahead into shared memory with
  // cp.async, norm_backward.cu), or the register tile (false).
  bool streamed_layer_norm_backward = true;
  // Print each warp-row or cluster launch's shape to stderr (the benchmark's --variants sets
  // it).
  bool trace = false;
};

KernelTuning& kernel_tuning();

}  // namespace rudnn::norm::cuda
