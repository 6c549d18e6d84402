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
  // Forward norms on register tiles: the threads per SM their register budget is set for
  // (1024, 1280 or 1536; more threads resident means more rows in flight, fewer registers
  // per thread).
  int norm_forward_threads_per_sm = 1024;
  // Cross-entropy gradient of long rows (vocabularies): each row split across the blocks of
  // a thread-block cluster and held in their registers, read from memory once
  // (cross_entropy.cu); false: the two-pass loop. `cluster_size` (2, 4 or 8) and
  // `cluster_threads` (256 or 512) force a shape when it holds the row; 0 picks the smallest
  // that does. `cluster_persistent`: a grid of the clusters resident at once walking the rows,
  // instead of one cluster per row. Off until a GPU round has timed it against the loop
  // (bench/RESULTS.md: written after the last round of 2026-12-03).
  bool cluster_cross_entropy = false;
  int cluster_size = 0;
  int cluster_threads = 0;
  bool cluster_persistent = false;
  // Print each warp-row or cluster launch's shape to stderr (the benchmark's --variants sets
  // it).
  bool trace = false;
};

KernelTuning& kernel_tuning();

}  // namespace rudnn::norm::cuda
