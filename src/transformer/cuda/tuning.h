// Launch choices of the transformer family's CUDA kernels that the benchmark harness
// (rudnn_bench --variants) and the GPU tests may override, so that alternatives can be timed
// side by side in one run and each stays tested. Not part of the public API. Not
// synchronised: set it before launching from several threads.
#pragma once

namespace rudnn::transformer::cuda {

struct KernelTuning {
  // norm_rope of rows of 8, 16 or 32 16-byte vectors (halves pairs with every feature
  // rotated, or interleaved pairs): the kernel that keeps both halves of a row in each lane
  // (true), or the lane-group kernel that takes every other row shape (false).
  bool norm_rope_pairs = true;
  // The paired kernel keeps the rows of its next two batches of heads in flight in a
  // shared-memory ring filled with cp.async (true), or loads each batch into registers when
  // it reaches it (false).
  bool norm_rope_pair_ring = true;
  // Without the ring: the paired kernel asks L2 for each next batch of heads
  // (prefetch.global.L2) before it computes the current one (true), or does not (false).
  bool norm_rope_pair_prefetch = false;
  // The paired kernel reads x and writes y with cache hints for data touched once (the ring's
  // copies with an L2 evict-first policy, streaming stores: true), or plain (false).
  bool norm_rope_pair_streamed = true;
  // The paired kernel's grid: as many blocks as are resident, each striding over rows (true),
  // or one block for each block of rows, scheduled as blocks finish (false).
  bool norm_rope_pair_persistent = true;
};

KernelTuning& kernel_tuning();

// One alternative to the default norm_rope launch: a name and the fields it changes from the
// defaults. norm_rope_choices() lists every alternative once, for the benchmark's --variants
// and the GPU test that runs each of them (so that nothing is timed that is not tested).
struct NormRopeChoice {
  const char* label;
  void (*set)(KernelTuning&);
};
struct NormRopeChoices {
  const NormRopeChoice* begin;
  const NormRopeChoice* end;
};
NormRopeChoices norm_rope_choices();

}  // namespace rudnn::transformer::cuda
