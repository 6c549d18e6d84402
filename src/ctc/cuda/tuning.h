// Launch choices of the CTC kernels that the benchmark harness (rudnn_bench --variants) and
// the GPU tests may override, so that the alternatives stay tested and each phase can be
// timed alone. Not part of the public API. Not synchronised: set it before launching from
// several threads.
#pragma once

namespace rudnn::ctc::cuda {

// The backward's phases (bits of KernelTuning::backward_phases). Leaving one out leaves the
// gradient wrong: only the benchmark's phase rows do, to time the others.
constexpr int kPhaseGather = 1;      // the labels' log-probabilities gathered per step
constexpr int kPhaseRecursions = 2;  // alpha and beta, rows stored
constexpr int kPhaseStream = 4;      // overlapped backward: g * exp(lp) over every class
constexpr int kPhaseFixup = 8;       // the target's classes (or the gradient pass, not overlapped)
constexpr int kAllPhases = 15;

struct KernelTuning {
  // The forward: alpha over the first half of each sample's steps and beta over the second,
  // concurrently, joined at the middle (true: half the serial steps), or alpha over every
  // step (false).
  bool split_forward = true;
  // true: one launch runs the two recursions and, beside them on the free multiprocessors,
  // the pass over every class of every row (g * exp(lp), which needs no recursion); a small
  // pass then rewrites the target's classes. false: the recursions, then one gradient pass.
  bool overlapped_backward = true;
  int backward_phases = kAllPhases;
};

KernelTuning& kernel_tuning();

}  // namespace rudnn::ctc::cuda
