// The normalization family's benchmark cases: every op timed at the anchor shapes of
// ANCHORS.md (bf16 [16384, 8192]; cross entropy bf16 [8192, 128256]), one row per op: median
// ms, GB/s (bytes read + written once, as ANCHORS.md counts them) and that as a share of the
// device-to-device copy bandwidth measured in the same run (the harness, bench/harness.h).
//
// Before timing, each op's result on the first and last rows is compared with ruDNN's CPU
// reference run on the same rows (relative L2 error; a row over tolerance is FAILED).
//
// Shape options: --rows R --cols H (the norms; default 16384 8192), --ce-rows R --ce-classes C
// (cross entropy; default 8192 128256). --variants times, after the default table, the ops
// whose kernels have launch choices (normalization/cuda/tuning.h) once per alternative
// choice, in the same process: rows named "op [variant]", so that the defaults are justified
// by a side-by-side measurement.
#include <cuda_runtime.h>
#include <rudnn/rudnn.h>

#include <cmath>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "harness.h"
#include "normalization/cuda/tuning.h"

namespace {

using namespace rudnn;
using rudnn::bench::Bench;
using rudnn::bench::worst;

double tol_for(DType dtype) { return dtype == DType::f32 ? 1e-4 : 1e-2; }

// ---- bf16 [rows, cols]: the norms, softmax, logsumexp and their backward passes --------------
void bench_norms(Bench& b) {
  const int64_t R = b.size("rows"), H = b.size("cols");
  const Shape shape{R, H};
  const DType bf = DType::bf16;
  const double X = static_cast<double>(R) * H * 2;  // bytes of one bf16 [R, H] tensor
  // One set: x, residual, dy (bf16), x in f32, and up to two bf16 outputs (the f32 softmax's
  // output is the size of two).
  const int sets = b.sets_for(static_cast<size_t>(X) * 9);
  std::fprintf(stderr, "norms: %s bf16, rotating %d input sets\n",
               bench::shape_string(shape).c_str(), sets);

  const std::vector<Tensor> x = b.normals(sets, shape, bf, 1);
  const std::vector<Tensor> res = b.normals(sets, shape, bf, 2);
  const std::vector<Tensor> dy = b.normals(sets, shape, bf, 3);
  const Tensor gamma = b.normal({H}, bf, 4, 1.0f, 0.5f);
  const Tensor beta = b.normal({H}, bf, 5, 0.0f, 0.5f);
  b.sync();
  const Tensor gamma_h = gamma.to_host(), beta_h = beta.to_host();
  const float rms_eps = 1e-6f, ln_eps = 1e-5f;

  {  // rms_norm
    const auto y = b.empties(sets, shape, bf);
    b.run(
        "rms_norm", shape, bf, 2 * X, sets,
        [&](int s) { rms_norm_into(y[s], x[s], gamma, rms_eps, b.stream); },
        [&] {
          return b.ends(R, [&](int64_t r0, int64_t r1) {
            return bench::relative_l2_error(
                Bench::rows_host(y[0], r0, r1),
                rms_norm(Bench::rows_host(x[0], r0, r1), gamma_h, rms_eps));
          });
        },
        tol_for(bf));
  }
  {  // layer_norm with gamma and beta
    const auto y = b.empties(sets, shape, bf);
    b.run(
        "layer_norm (gamma+beta)", shape, bf, 2 * X, sets,
        [&](int s) { layer_norm_into(y[s], x[s], gamma, beta, ln_eps, b.stream); },
        [&] {
          return b.ends(R, [&](int64_t r0, int64_t r1) {
            return bench::relative_l2_error(
                Bench::rows_host(y[0], r0, r1),
                layer_norm(Bench::rows_host(x[0], r0, r1), gamma_h, beta_h, ln_eps));
          });
        },
        tol_for(bf));
  }
  {  // add_rms_norm: reads x and residual, writes sum and normed
    const auto sum = b.empties(sets, shape, bf);
    const auto normed = b.empties(sets, shape, bf);
    b.run(
        "add_rms_norm", shape, bf, 4 * X, sets,
        [&](int s) {
          add_rms_norm_into(sum[s], normed[s], x[s], res[s], gamma, rms_eps, b.stream);
        },
        [&] {
          return b.ends(R, [&](int64_t r0, int64_t r1) {
            const AddRmsNormResult ref = add_rms_norm(
                Bench::rows_host(x[0], r0, r1), Bench::rows_host(res[0], r0, r1), gamma_h, rms_eps);
            return worst(bench::relative_l2_error(Bench::rows_host(sum[0], r0, r1), ref.sum),
                         bench::relative_l2_error(Bench::rows_host(normed[0], r0, r1), ref.normed));
          });
        },
        tol_for(bf));
  }
  std::vector<Tensor> soft;  // softmax outputs, the input of softmax_backward below
  {
    soft = b.empties(sets, shape, bf);
    b.run(
        "softmax_last_axis", shape, bf, 2 * X, sets,
        [&](int s) { softmax_last_axis_into(soft[s], x[s], b.stream); },
        [&] {
          return b.ends(R, [&](int64_t r0, int64_t r1) {
            return bench::relative_l2_error(Bench::rows_host(soft[0], r0, r1),
                                            softmax_last_axis(Bench::rows_host(x[0], r0, r1)));
          });
        },
        tol_for(bf));
  }
  {  // softmax in f32: its own f32 inputs
    std::vector<Tensor> xf;
    for (int s = 0; s < sets; ++s) xf.push_back(b.normal(shape, DType::f32, 100 + s));
    const auto y = b.empties(sets, shape, DType::f32);
    b.run(
        "softmax_last_axis", shape, DType::f32, 4 * X, sets,
        [&](int s) { softmax_last_axis_into(y[s], xf[s], b.stream); },
        [&] {
          return b.ends(R, [&](int64_t r0, int64_t r1) {
            return bench::relative_l2_error(Bench::rows_host(y[0], r0, r1),
                                            softmax_last_axis(Bench::rows_host(xf[0], r0, r1)));
          });
        },
        tol_for(DType::f32));
  }
  {  // logsumexp: reads x, writes one value per row
    const auto lse = b.empties(sets, {R}, bf);
    b.run(
        "logsumexp", shape, bf, X + 2.0 * R, sets,
        [&](int s) { logsumexp_into(lse[s], x[s], b.stream); },
        [&] {
          return b.ends(R, [&](int64_t r0, int64_t r1) {
            return bench::relative_l2_error(Bench::rows_host(lse[0], r0, r1),
                                            logsumexp(Bench::rows_host(x[0], r0, r1)));
          });
        },
        tol_for(bf));
  }
  {  // rms_norm backward alone (3 passes: dy, x read; dx written), then forward + backward (5)
    const auto y = b.empties(sets, shape, bf);
    const auto dx = b.empties(sets, shape, bf);
    const auto dgamma = b.empties(sets, {H}, bf);
    auto check_dx = [&] {
      return b.ends(R, [&](int64_t r0, int64_t r1) {
        const RmsNormGrads ref = rms_norm_backward(
            Bench::rows_host(dy[0], r0, r1), Bench::rows_host(x[0], r0, r1), gamma_h, rms_eps);
        return bench::relative_l2_error(Bench::rows_host(dx[0], r0, r1), ref.dx);
      });
    };
    b.run(
        "rms_norm_backward", shape, bf, 3 * X, sets,
        [&](int s) {
          rms_norm_backward_into(dx[s], dgamma[s], dy[s], x[s], gamma, rms_eps, b.stream);
        },
        check_dx, tol_for(bf));
    b.run(
        "rms_norm fwd+bwd", shape, bf, 5 * X, sets,
        [&](int s) {
          rms_norm_into(y[s], x[s], gamma, rms_eps, b.stream);
          rms_norm_backward_into(dx[s], dgamma[s], dy[s], x[s], gamma, rms_eps, b.stream);
        },
        [&] {
          const double ey = b.ends(R, [&](int64_t r0, int64_t r1) {
            return bench::relative_l2_error(
                Bench::rows_host(y[0], r0, r1),
                rms_norm(Bench::rows_host(x[0], r0, r1), gamma_h, rms_eps));
          });
          return worst(ey, check_dx());
        },
        tol_for(bf));
  }
  {  // layer_norm backward with gamma and beta: dy, x read; dx written (dgamma, dbeta are [H])
    const auto dx = b.empties(sets, shape, bf);
    const auto dgamma = b.empties(sets, {H}, bf);
    const auto dbeta = b.empties(sets, {H}, bf);
    b.run(
        "layer_norm_backward (gamma+beta)", shape, bf, 3 * X, sets,
        [&](int s) {
          layer_norm_backward_into(dx[s], dgamma[s], dbeta[s], dy[s], x[s], gamma, beta, ln_eps,
                                   b.stream);
        },
        [&] {
          return b.ends(R, [&](int64_t r0, int64_t r1) {
            const LayerNormGrads ref =
                layer_norm_backward(Bench::rows_host(dy[0], r0, r1), Bench::rows_host(x[0], r0, r1),
                                    gamma_h, beta_h, ln_eps);
            return bench::relative_l2_error(Bench::rows_host(dx[0], r0, r1), ref.dx);
          });
        },
        tol_for(bf));
  }
  if (b.wanted("layer_norm_backward (gamma+beta, saved stats)")) {
    // The same from the forward's saved statistics (mean, rstd: FP32 [R], read once more).
    const auto dx = b.empties(sets, shape, bf);
    const auto dgamma = b.empties(sets, {H}, bf);
    const auto dbeta = b.empties(sets, {H}, bf);
    std::vector<LayerNormStats> stats;
    const Tensor y = b.empty(shape, bf);  // the forward's output, not used
    for (int s = 0; s < sets; ++s) {
      stats.push_back({b.empty({R}, DType::f32), b.empty({R}, DType::f32)});
      layer_norm_with_stats_into(y, stats.back().mean, stats.back().rstd, x[s], gamma, beta, ln_eps,
                                 b.stream);
    }
    b.sync();
    const Tensor mean_h = stats[0].mean.to_host(), rstd_h = stats[0].rstd.to_host();
    b.run(
        "layer_norm_backward (gamma+beta, saved stats)", shape, bf, 3 * X + 8.0 * R, sets,
        [&](int s) {
          layer_norm_backward_into(dx[s], dgamma[s], dbeta[s], dy[s], x[s], stats[s], gamma, beta,
                                   b.stream);
        },
        [&] {
          return b.ends(R, [&](int64_t r0, int64_t r1) {
            const LayerNormGrads ref = layer_norm_backward(
                Bench::rows_host(dy[0], r0, r1), Bench::rows_host(x[0], r0, r1),
                {mean_h.slice(0, r0, r1).contiguous(), rstd_h.slice(0, r0, r1).contiguous()},
                gamma_h, beta_h);
            return bench::relative_l2_error(Bench::rows_host(dx[0], r0, r1), ref.dx);
          });
        },
        tol_for(bf));
  }
  {  // softmax backward from the softmax output: dy, y read; dx written
    const auto dx = b.empties(sets, shape, bf);
    // y must hold softmax(x) in every set, whatever the filter ran above.
    for (int s = 0; s < sets; ++s) softmax_last_axis_into(soft[s], x[s], b.stream);
    b.run(
        "softmax_backward", shape, bf, 3 * X, sets,
        [&](int s) { softmax_backward_into(dx[s], dy[s], soft[s], b.stream); },
        [&] {
          return b.ends(R, [&](int64_t r0, int64_t r1) {
            return bench::relative_l2_error(Bench::rows_host(dx[0], r0, r1),
                                            softmax_backward(Bench::rows_host(dy[0], r0, r1),
                                                             Bench::rows_host(soft[0], r0, r1)));
          });
        },
        tol_for(bf));
  }
  b.sync();
}

// ---- cross entropy, bf16 [rows, classes] ----------------------------------------------------
void bench_cross_entropy(Bench& b) {
  const int64_t R = b.size("ce-rows"), C = b.size("ce-classes");
  const Shape shape{R, C};
  const DType bf = DType::bf16;
  const double L = static_cast<double>(R) * C * 2;          // bytes of the logits
  const int sets = b.sets_for(static_cast<size_t>(2 * L));  // logits + dlogits
  std::fprintf(stderr, "cross entropy: %s bf16, rotating %d input sets\n",
               bench::shape_string(shape).c_str(), sets);

  const std::vector<Tensor> logits = b.normals(sets, shape, bf, 11);
  std::vector<Tensor> targets;
  for (int s = 0; s < sets; ++s) {
    targets.push_back(b.empty({R}, DType::i64));
    bench::fill_integers(targets.back(), 12 + s, 0, C - 1, b.cs);
  }
  const float scale = 1.0f / static_cast<float>(R);  // the upstream gradient of a mean loss
  const Tensor dloss = Tensor::full({R}, scale, DType::f32, b.dev, b.stream);
  const auto loss = b.empties(sets, {R}, DType::f32);
  const auto dlogits = b.empties(sets, shape, bf);
  b.sync();
  const Tensor dloss_h = dloss.to_host();
  const CrossEntropyOptions ce{};

  auto check_loss = [&] {
    return b.ends(R, [&](int64_t r0, int64_t r1) {
      return bench::relative_l2_error(Bench::rows_host(loss[0], r0, r1),
                                      cross_entropy(Bench::rows_host(logits[0], r0, r1),
                                                    Bench::rows_host(targets[0], r0, r1), ce));
    });
  };
  auto check_grad = [&] {
    return b.ends(R, [&](int64_t r0, int64_t r1) {
      return bench::relative_l2_error(Bench::rows_host(dlogits[0], r0, r1),
                                      cross_entropy_backward(Bench::rows_host(logits[0], r0, r1),
                                                             Bench::rows_host(targets[0], r0, r1),
                                                             dloss_h.slice(0, r0, r1), ce));
    });
  };

  // Forward: the logits read once (ANCHORS.md counts only those).
  b.run(
      "cross_entropy", shape, bf, L, sets,
      [&](int s) { cross_entropy_into(loss[s], logits[s], targets[s], ce, b.stream); }, check_loss,
      tol_for(DType::f32));
  // Backward alone: logits read, dlogits written.
  b.run(
      "cross_entropy_backward", shape, bf, 2 * L, sets,
      [&](int s) {
        cross_entropy_backward_into(dlogits[s], logits[s], targets[s], dloss, ce, b.stream);
      },
      check_grad, tol_for(bf));
  // Forward then backward, two calls: logits read twice, dlogits written (as anchors2.py's
  // torch fwd+bwd is counted).
  b.run(
      "cross_entropy + cross_entropy_backward", shape, bf, 3 * L, sets,
      [&](int s) {
        cross_entropy_into(loss[s], logits[s], targets[s], ce, b.stream);
        cross_entropy_backward_into(dlogits[s], logits[s], targets[s], dloss, ce, b.stream);
      },
      [&] { return worst(check_loss(), check_grad()); }, tol_for(bf));
  // One pass writing the gradient: logits read once, dlogits written (Liger's count).
  b.run(
      "cross_entropy_with_grad", shape, bf, 2 * L, sets,
      [&](int s) {
        cross_entropy_with_grad_into(loss[s], dlogits[s], logits[s], targets[s], scale, ce,
                                     b.stream);
      },
      [&] { return worst(check_loss(), check_grad()); }, tol_for(bf));
  b.sync();
}

// The alternatives to the default launch choices, each timed on the ops it changes.
void run_variants(Bench& b) {
  using rudnn::norm::cuda::kernel_tuning;
  using rudnn::norm::cuda::KernelTuning;
  const KernelTuning defaults = kernel_tuning();
  const std::vector<std::string> grads = {"cross_entropy_backward", "cross_entropy_with_grad"};
  struct Variant {
    std::string label;
    std::vector<std::string> ops;
    void (*set)(KernelTuning&);
  };
  const Variant variants[] = {
      {"tile", {"logsumexp"}, [](KernelTuning& t) { t.logsumexp_warp_rows = false; }},
      {"two-pass loop", grads, [](KernelTuning& t) { t.cluster_cross_entropy = false; }},
      {"cluster of 512-thread blocks", grads, [](KernelTuning& t) { t.cluster_threads = 512; }},
      {"register tile",
       {"layer_norm_backward (gamma+beta)", "layer_norm_backward (gamma+beta, saved stats)"},
       [](KernelTuning& t) { t.streamed_layer_norm_backward = false; }},
  };
  for (const Variant& v : variants) {
    kernel_tuning() = defaults;
    kernel_tuning().trace = true;
    v.set(kernel_tuning());
    b.variant = v.label;
    b.variant_ops = v.ops;
    bench_norms(b);
    release_cached_memory(b.dev);
    bench_cross_entropy(b);
    release_cached_memory(b.dev);
  }
  kernel_tuning() = defaults;
  b.variant.clear();
  b.variant_ops.clear();
}

// The default table: the norms, then cross entropy (each group frees its memory after).
void run_all(Bench& b) {
  bench_norms(b);
  release_cached_memory(b.dev);
  bench_cross_entropy(b);
}

rudnn::bench::Family normalization_family() {
  rudnn::bench::Family family;
  family.sizes = {{"rows", 16384, "rows of the norms' input"},
                  {"cols", 8192, "row length of the norms' input"},
                  {"ce-rows", 8192, "rows of the cross-entropy logits"},
                  {"ce-classes", 128256, "classes of the cross-entropy logits"}};
  family.run = run_all;
  family.run_variants = run_variants;
  return family;
}

}  // namespace

RUDNN_BENCH_FAMILY(normalization, normalization_family);
