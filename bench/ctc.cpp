// CTC loss's benchmark cases at ANCHORS.md's shapes, f32: T200 N64 C32 S50 and T1000 N32
// C5000 S200, each forward, and forward + backward (the forward row shows how much of the
// pair is the alpha recursion); milliseconds, the anchors' unit. Inputs: log_probs normal(-log C, 1) (the op does not need normalised rows),
// padded I64 targets of S random labels (repeats included), every input T steps long and every
// target S labels. Forward + backward is ctc_loss then ctc_loss_backward, each taking the
// lengths and labels as they are (nothing carried between them); reduction none with a
// gradient of ones (the reduction changes one tiny kernel, and per-sample results let the
// check run the float64 reference on the first and last samples only).
// GB/s counts log_probs read once and (with the backward) the gradient written once. The
// bwd row is ctc_loss_backward alone.
// --variants times the backward rows with ctc/cuda/tuning.h's choices: the sequential
// backward (recursions, then one gradient pass), and each phase or group of phases alone
// (prepare + gather; + the recursions; the pass over every class alone; all but the rewrite
// of the target's classes). A phase row leaves the gradient wrong: it is timed, not checked.
#include <cuda_runtime.h>
#include <rudnn/rudnn.h>

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "ctc/cuda/tuning.h"
#include "harness.h"

namespace {

using namespace rudnn;
using rudnn::bench::Bench;

struct Shape4 {
  int64_t T, N, C, S;
};

std::string label(const char* what, const Shape4& s) {
  return std::string("ctc_loss T") + std::to_string(s.T) + " N" + std::to_string(s.N) + " C" +
         std::to_string(s.C) + " S" + std::to_string(s.S) + " " + what;
}

void run_case(Bench& b, const Shape4& sh) {
  const DType f32 = DType::f32;
  const Shape lp_shape{sh.T, sh.N, sh.C};
  const double lp_bytes = static_cast<double>(sh.T) * sh.N * sh.C * 4;
  const int sets = b.sets_for(static_cast<size_t>(2 * lp_bytes));
  std::fprintf(stderr, "ctc: log_probs %s f32, rotating %d sets\n",
               bench::shape_string(lp_shape).c_str(), sets);
  std::vector<Tensor> lp;
  for (int s = 0; s < sets; ++s)
    lp.push_back(b.normal(lp_shape, f32, 31 + s, -std::log(static_cast<float>(sh.C)), 1.0f));
  const Tensor targets = b.empty({sh.N, sh.S}, DType::i64);
  bench::fill_integers(targets, 32, 1, sh.C - 1, b.cs);
  const Tensor input_lengths =
      Tensor::full({sh.N}, static_cast<double>(sh.T), DType::i64, b.dev, b.stream);
  const Tensor target_lengths =
      Tensor::full({sh.N}, static_cast<double>(sh.S), DType::i64, b.dev, b.stream);
  const Tensor ones = Tensor::full({sh.N}, 1.0, f32, b.dev, b.stream);
  b.sync();
  const CtcLossOptions o{0, CtcReduction::none, false};
  const auto loss = b.empties(sets, {sh.N}, f32);
  const auto grad = b.empties(sets, lp_shape, f32);

  // The first and last opt.check_rows samples against the float64 reference.
  const auto check = [&](bool with_grad) {
    return b.ends(sh.N, [&](int64_t n0, int64_t n1) {
      const Tensor lp_host = lp[0].slice(1, n0, n1).to_host().contiguous();
      const Tensor tg_host = Bench::rows_host(targets, n0, n1);
      const Tensor il_host = Bench::rows_host(input_lengths, n0, n1);
      const Tensor tl_host = Bench::rows_host(target_lengths, n0, n1);
      const double loss_error = bench::relative_l2_error(
          Bench::rows_host(loss[0], n0, n1), ctc_loss(lp_host, tg_host, il_host, tl_host, o));
      if (!with_grad) return loss_error;
      const Tensor expected =
          ctc_loss_backward(lp_host, tg_host, il_host, tl_host, Bench::rows_host(ones, n0, n1), o);
      const double grad_error =
          bench::relative_l2_error(grad[0].slice(1, n0, n1).to_host().contiguous(), expected);
      return bench::worst(loss_error, grad_error);
    });
  };
  // FP32 log-space recursions over T steps against float64 (see rudnn/ctc.h, Precision).
  const double tol = 1e-4;
  const bool every_phase = ctc::cuda::kernel_tuning().backward_phases == ctc::cuda::kAllPhases;
  const auto check_grad = [&]() { return every_phase ? check(true) : 0.0; };
  if (b.wanted(label("fwd", sh))) {
    b.run(
        label("fwd", sh), lp_shape, f32, lp_bytes, sets,
        [&](int s) {
          ctc_loss_into(loss[s], lp[s], targets, input_lengths, target_lengths, o, b.stream);
        },
        [&] { return check(false); }, tol);
  }
  if (b.wanted(label("fwd+bwd", sh))) {
    b.run(
        label("fwd+bwd", sh), lp_shape, f32, 2 * lp_bytes, sets,
        [&](int s) {
          ctc_loss_into(loss[s], lp[s], targets, input_lengths, target_lengths, o, b.stream);
          ctc_loss_backward_into(grad[s], lp[s], targets, input_lengths, target_lengths, ones, o,
                                 b.stream);
        },
        check_grad, tol);
  }
  if (b.wanted(label("bwd", sh))) {
    b.run(
        label("bwd", sh), lp_shape, f32, 2 * lp_bytes, sets,
        [&](int s) {
          ctc_loss_backward_into(grad[s], lp[s], targets, input_lengths, target_lengths, ones, o,
                                 b.stream);
        },
        [&] {
          ctc_loss_into(loss[0], lp[0], targets, input_lengths, target_lengths, o, b.stream);
          return check_grad();
        },
        tol);
  }
}

void run_all(Bench& b) {
  run_case(b,
           {b.size("ctc-steps"), b.size("ctc-batch"), b.size("ctc-classes"), b.size("ctc-labels")});
  run_case(b, {1000, 32, 5000, 200});
}

// ctc/cuda/tuning.h's alternatives on the backward rows, each against the default in one run.
void run_variants(Bench& b) {
  using ctc::cuda::kernel_tuning;
  using ctc::cuda::KernelTuning;
  const KernelTuning defaults = kernel_tuning();
  struct Variant {
    std::string label;
    bool overlapped;
    int phases;
    bool split_forward = true;
  };
  const Variant variants[] = {
      {"sequential", false, ctc::cuda::kAllPhases},
      {"prepare+gather", true, ctc::cuda::kPhaseGather},
      {"sequential recursions", false, ctc::cuda::kPhaseGather | ctc::cuda::kPhaseRecursions},
      {"stream alone", true, ctc::cuda::kPhaseStream},
      {"overlapped, no fixup", true, ctc::cuda::kAllPhases & ~ctc::cuda::kPhaseFixup},
      {"forward alpha over every step", true, ctc::cuda::kAllPhases, false},
  };
  for (const Variant& v : variants) {
    kernel_tuning() = defaults;
    kernel_tuning().overlapped_backward = v.overlapped;
    kernel_tuning().backward_phases = v.phases;
    kernel_tuning().split_forward = v.split_forward;
    b.variant = v.label;
    b.variant_ops.clear();
    const bool forward = !v.split_forward;  // the forward variant: its rows are fwd, fwd+bwd
    for (const char* what : {forward ? "fwd" : "bwd", "fwd+bwd"}) {
      b.variant_ops.push_back(std::string("ctc_loss T1000 N32 C5000 S200 ") + what);
      b.variant_ops.push_back(label(what, {b.size("ctc-steps"), b.size("ctc-batch"),
                                           b.size("ctc-classes"), b.size("ctc-labels")}));
    }
    run_all(b);
  }
  kernel_tuning() = defaults;
  b.variant.clear();
  b.variant_ops.clear();
}

rudnn::bench::Family ctc_family() {
  rudnn::bench::Family family;
  family.sizes = {{"ctc-steps", 200, "T of the first CTC case"},
                  {"ctc-batch", 64, "N of the first CTC case"},
                  {"ctc-classes", 32, "C of the first CTC case"},
                  {"ctc-labels", 50, "S of the first CTC case"}};
  family.run = run_all;
  family.run_variants = run_variants;
  return family;
}

}  // namespace

RUDNN_BENCH_FAMILY(ctc, ctc_family);
