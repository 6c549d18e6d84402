// Launch choices of this family's CUDA kernels that the benchmark harness may override, so
// that variants can be timed side by side in one run (rudnn_bench --variants). Not part of
// the public API. The defaults are the variants bench/RESULTS.md measured fastest; a choice
// a device cannot run (staging below sm_90, a row too long for a cluster) falls back to the
// portable kernels whatever is set here.
//
// Not synchronised: set it before launching from several threads.
#pragma once

namespace rudnn::norm::cuda {

// How rows that fit a block register tile are read.
enum class RowKernel {
  tile,    // the register tile: each block loads its row, reduces, moves on
  staged,  // persistent register tile, rows staged through shared memory by the bulk-copy
           // engine ahead of use (staged_rows.cuh; sm_90+)
  warp,    // one warp per row streaming it into an online reduction (logsumexp only)
};

struct KernelTuning {
  RowKernel norm = RowKernel::tile;        // layer_norm, rms_norm
  RowKernel logsumexp = RowKernel::warp;
  int row_stages = 2;                      // row buffers per block of the staged kernels (2 or 3)
  // Cross-entropy gradient of long rows (vocabularies): each row split across the blocks of
  // a thread-block cluster and held in their shared memory, read from memory once
  // (cross_entropy.cu), with `cluster_stages` buffers per block (2 or 3). `cluster_size` 0
  // picks the smallest cluster whose blocks hold the row. Off: on the H200 it measured about
  // 3x slower than the two-pass loop (bench/RESULTS.md), for a reason not yet found.
  bool cluster_cross_entropy = false;
  int cluster_stages = 3;
  int cluster_size = 0;
  // Print each staged, warp-row or cluster launch's shape to stderr (the benchmark's
  // --variants sets it).
  bool trace = false;
};

KernelTuning& kernel_tuning();

}  // namespace rudnn::norm::cuda
