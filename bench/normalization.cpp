// rudnn_bench: times every normalization-family op on the GPU at the anchor shapes of
// ANCHORS.md (bf16 [16384, 8192]; cross entropy bf16 [8192, 128256]) and prints one row per
// op: median ms, GB/s (bytes read + written once, as ANCHORS.md counts them) and that as a
// share of the device-to-device copy bandwidth measured in the same run.
//
// Before timing, each op's result on the first and last rows is compared with ruDNN's CPU
// reference run on the same rows (relative L2 error; a row over tolerance is FAILED).
//
//   rudnn_bench [--quick] [--csv FILE] [--runs N] [--warmup N] [--sets N] [--filter TEXT]
//               [--no-check] [--device N] [--rows R] [--cols H] [--ce-rows R] [--ce-classes C]
//               [--variants]
//
// --variants times, after the default table, the ops whose kernels have launch choices
// (normalization/cuda/tuning.h) once per alternative choice, in the same process: rows named
// "op [variant]", so that the defaults are justified by a side-by-side measurement.
#include <cuda_runtime.h>
#include <rudnn/rudnn.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <functional>
#include <string>
#include <vector>

#include "harness.h"
#include "normalization/cuda/tuning.h"

namespace {

using namespace rudnn;
using rudnn::bench::Row;
using rudnn::bench::Table;
using rudnn::bench::Timing;
using rudnn::bench::TimingOptions;

struct Options {
  bool quick = false;
  bool check = true;
  bool variants = false;
  std::string csv;
  std::string filter;
  int runs = -1, warmup = -1, min_sets = 2;
  int device = 0;
  int64_t rows = 16384, cols = 8192;          // the normalization anchor shape
  int64_t ce_rows = 8192, ce_classes = 128256;  // the cross-entropy anchor shape
  int64_t check_rows = 4;                     // rows checked at each end
  size_t copy_bytes = size_t(1) << 30;
};

[[noreturn]] void usage(int code) {
  std::printf(
      "usage: rudnn_bench [options]\n"
      "  --quick          fewer repetitions (warm-up 3, 20 timed runs)\n"
      "  --csv FILE       also write the rows as CSV\n"
      "  --runs N         timed runs per op (default 100)\n"
      "  --warmup N       warm-up runs per op (default 10, and at least 25 ms)\n"
      "  --sets N         at least N input sets to rotate among (default 2)\n"
      "  --filter TEXT    only ops whose name contains TEXT\n"
      "  --no-check       skip the comparison with the CPU reference\n"
      "  --device N       CUDA device (default 0)\n"
      "  --rows R --cols H             normalization shape (default 16384 8192)\n"
      "  --ce-rows R --ce-classes C    cross-entropy shape (default 8192 128256)\n"
      "  --variants       also time the ops with launch choices once per alternative choice\n");
  std::exit(code);
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "rudnn_bench: %s needs a value\n", a.c_str());
        usage(2);
      }
      return argv[++i];
    };
    if (a == "--quick") o.quick = true;
    else if (a == "--variants") o.variants = true;
    else if (a == "--no-check") o.check = false;
    else if (a == "--csv") o.csv = next();
    else if (a == "--filter") o.filter = next();
    else if (a == "--runs") o.runs = std::atoi(next().c_str());
    else if (a == "--warmup") o.warmup = std::atoi(next().c_str());
    else if (a == "--sets") o.min_sets = std::max(1, std::atoi(next().c_str()));
    else if (a == "--device") o.device = std::atoi(next().c_str());
    else if (a == "--rows") o.rows = std::atoll(next().c_str());
    else if (a == "--cols") o.cols = std::atoll(next().c_str());
    else if (a == "--ce-rows") o.ce_rows = std::atoll(next().c_str());
    else if (a == "--ce-classes") o.ce_classes = std::atoll(next().c_str());
    else if (a == "-h" || a == "--help") usage(0);
    else {
      std::fprintf(stderr, "rudnn_bench: unknown argument %s\n", a.c_str());
      usage(2);
    }
  }
  if (o.rows < 1 || o.cols < 1 || o.ce_rows < 1 || o.ce_classes < 1) {
    std::fprintf(stderr, "rudnn_bench: shapes must be positive\n");
    usage(2);
  }
  return o;
}

// Everything a case needs.
struct Bench {
  Options opt;
  bench::DeviceInfo info;
  cudaStream_t cs = nullptr;
  Stream stream;
  Device dev;
  TimingOptions timing;
  Table table;

  // While timing a variant: its label (appended to op names) and the ops it concerns.
  std::string variant;
  std::vector<std::string> variant_ops;

  bool wanted(const std::string& op) const {
    if (!variant.empty() && std::find(variant_ops.begin(), variant_ops.end(), op) == variant_ops.end()) return false;
    return opt.filter.empty() || op.find(opt.filter) != std::string::npos;
  }

  void sync() const { RUDNN_BENCH_CUDA(cudaStreamSynchronize(cs)); }

  // Rotation count for a group whose one set (inputs + outputs) takes `bytes_per_set`.
  int sets_for(size_t bytes_per_set) const {
    size_t free_b = 0, total_b = 0;
    RUDNN_BENCH_CUDA(cudaMemGetInfo(&free_b, &total_b));
    return bench::rotation_sets(bytes_per_set, info.l2_bytes, static_cast<size_t>(0.7 * free_b), opt.min_sets);
  }

  // Runs `fn(0)` once, checks it (`check` returns the relative error, `tol` its bound), then
  // times `fn(set)` over `sets` sets; appends the row and echoes it on stderr.
  void run(const std::string& op, const Shape& shape, DType dtype, double bytes, int sets,
           const std::function<void(int)>& fn, const std::function<double()>& check, double tol) {
    if (!wanted(op)) return;
    Row row;
    row.op = variant.empty() ? op : op + " [" + variant + "]";
    row.shape = bench::shape_string(shape);
    row.dtype = dtype_name(dtype);
    row.bytes = bytes;
    try {
      fn(0);
      sync();
      if (opt.check && check) {
        row.check_error = check();
        if (!(row.check_error <= tol)) {
          char buf[96];
          std::snprintf(buf, sizeof buf, "FAILED (rel err %.3e > %.0e)", row.check_error, tol);
          row.status = buf;
        }
      }
      row.timing = bench::time_on_stream(cs, sets, fn, timing);
    } catch (const std::exception& e) {
      (void)cudaStreamSynchronize(cs);
      (void)cudaGetLastError();
      std::string what = e.what();
      if (what.size() > 160) what = what.substr(0, 160) + "...";
      row.status = "ERROR (" + what + ")";
    }
    const Row& r = table.add(row);
    std::fprintf(stderr, "  %-36s %10.4f ms %9.1f GB/s %6.1f%%  %s\n", r.op.c_str(), r.timing.median_ms, r.gbs,
                 r.pct_copy, r.status.c_str());
  }

  Tensor empty(const Shape& shape, DType dtype) const { return Tensor::empty(shape, dtype, dev, stream); }
  Tensor normal(const Shape& shape, DType dtype, uint64_t seed, float mean = 0.0f, float sd = 1.0f) const {
    Tensor t = empty(shape, dtype);
    bench::fill_normal(t, seed, mean, sd, cs);
    return t;
  }
  std::vector<Tensor> empties(int sets, const Shape& shape, DType dtype) const {
    std::vector<Tensor> v;
    for (int i = 0; i < sets; ++i) v.push_back(empty(shape, dtype));
    return v;
  }
  std::vector<Tensor> normals(int sets, const Shape& shape, DType dtype, uint64_t seed) const {
    std::vector<Tensor> v;
    for (int i = 0; i < sets; ++i) v.push_back(normal(shape, dtype, seed * 1000003u + static_cast<uint64_t>(i)));
    return v;
  }

  // Rows [r0, r1) of a device tensor (leading axis), on the host.
  static Tensor rows_host(const Tensor& t, int64_t r0, int64_t r1) { return t.slice(0, r0, r1).to_host(); }

  // max over the two end slices of `f(r0, r1)`, the error of rows [r0, r1).
  double ends(int64_t rows, const std::function<double(int64_t, int64_t)>& f) const {
    const int64_t k = std::min(opt.check_rows, rows);
    double e = f(0, k);
    if (rows > k) {
      const double e2 = f(rows - k, rows);
      e = (std::isnan(e) || std::isnan(e2)) ? std::nan("") : std::max(e, e2);
    }
    return e;
  }
};

double worst(double a, double b) { return (std::isnan(a) || std::isnan(b)) ? std::nan("") : std::max(a, b); }

double tol_for(DType dtype) { return dtype == DType::f32 ? 1e-4 : 1e-2; }

// ---- bf16 [rows, cols]: the norms, softmax, logsumexp and their backward passes --------------
void bench_norms(Bench& b) {
  const int64_t R = b.opt.rows, H = b.opt.cols;
  const Shape shape{R, H};
  const DType bf = DType::bf16;
  const double X = static_cast<double>(R) * H * 2;  // bytes of one bf16 [R, H] tensor
  // One set: x, residual, dy (bf16), x in f32, and up to two bf16 outputs (the f32 softmax's
  // output is the size of two).
  const int sets = b.sets_for(static_cast<size_t>(X) * 9);
  std::fprintf(stderr, "norms: %s bf16, rotating %d input sets\n", bench::shape_string(shape).c_str(), sets);

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
    b.run("rms_norm", shape, bf, 2 * X, sets, [&](int s) { rms_norm_into(y[s], x[s], gamma, rms_eps, b.stream); },
          [&] {
            return b.ends(R, [&](int64_t r0, int64_t r1) {
              return bench::relative_l2_error(Bench::rows_host(y[0], r0, r1),
                                              rms_norm(Bench::rows_host(x[0], r0, r1), gamma_h, rms_eps));
            });
          },
          tol_for(bf));
  }
  {  // layer_norm with gamma and beta
    const auto y = b.empties(sets, shape, bf);
    b.run("layer_norm (gamma+beta)", shape, bf, 2 * X, sets,
          [&](int s) { layer_norm_into(y[s], x[s], gamma, beta, ln_eps, b.stream); },
          [&] {
            return b.ends(R, [&](int64_t r0, int64_t r1) {
              return bench::relative_l2_error(Bench::rows_host(y[0], r0, r1),
                                              layer_norm(Bench::rows_host(x[0], r0, r1), gamma_h, beta_h, ln_eps));
            });
          },
          tol_for(bf));
  }
  {  // add_rms_norm: reads x and residual, writes sum and normed
    const auto sum = b.empties(sets, shape, bf);
    const auto normed = b.empties(sets, shape, bf);
    b.run("add_rms_norm", shape, bf, 4 * X, sets,
          [&](int s) { add_rms_norm_into(sum[s], normed[s], x[s], res[s], gamma, rms_eps, b.stream); },
          [&] {
            return b.ends(R, [&](int64_t r0, int64_t r1) {
              const AddRmsNormResult ref =
                  add_rms_norm(Bench::rows_host(x[0], r0, r1), Bench::rows_host(res[0], r0, r1), gamma_h, rms_eps);
              return worst(bench::relative_l2_error(Bench::rows_host(sum[0], r0, r1), ref.sum),
                           bench::relative_l2_error(Bench::rows_host(normed[0], r0, r1), ref.normed));
            });
          },
          tol_for(bf));
  }
  std::vector<Tensor> soft;  // softmax outputs, the input of softmax_backward below
  {
    soft = b.empties(sets, shape, bf);
    b.run("softmax_last_axis", shape, bf, 2 * X, sets,
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
    b.run("softmax_last_axis", shape, DType::f32, 4 * X, sets,
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
    b.run("logsumexp", shape, bf, X + 2.0 * R, sets, [&](int s) { logsumexp_into(lse[s], x[s], b.stream); },
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
        const RmsNormGrads ref = rms_norm_backward(Bench::rows_host(dy[0], r0, r1), Bench::rows_host(x[0], r0, r1),
                                                   gamma_h, rms_eps);
        return bench::relative_l2_error(Bench::rows_host(dx[0], r0, r1), ref.dx);
      });
    };
    b.run("rms_norm_backward", shape, bf, 3 * X, sets,
          [&](int s) { rms_norm_backward_into(dx[s], dgamma[s], dy[s], x[s], gamma, rms_eps, b.stream); }, check_dx,
          tol_for(bf));
    b.run("rms_norm fwd+bwd", shape, bf, 5 * X, sets,
          [&](int s) {
            rms_norm_into(y[s], x[s], gamma, rms_eps, b.stream);
            rms_norm_backward_into(dx[s], dgamma[s], dy[s], x[s], gamma, rms_eps, b.stream);
          },
          [&] {
            const double ey = b.ends(R, [&](int64_t r0, int64_t r1) {
              return bench::relative_l2_error(Bench::rows_host(y[0], r0, r1),
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
    b.run("layer_norm_backward (gamma+beta)", shape, bf, 3 * X, sets,
          [&](int s) {
            layer_norm_backward_into(dx[s], dgamma[s], dbeta[s], dy[s], x[s], gamma, beta, ln_eps, b.stream);
          },
          [&] {
            return b.ends(R, [&](int64_t r0, int64_t r1) {
              const LayerNormGrads ref = layer_norm_backward(Bench::rows_host(dy[0], r0, r1),
                                                             Bench::rows_host(x[0], r0, r1), gamma_h, beta_h, ln_eps);
              return bench::relative_l2_error(Bench::rows_host(dx[0], r0, r1), ref.dx);
            });
          },
          tol_for(bf));
  }
  {  // softmax backward from the softmax output: dy, y read; dx written
    const auto dx = b.empties(sets, shape, bf);
    // y must hold softmax(x) in every set, whatever the filter ran above.
    for (int s = 0; s < sets; ++s) softmax_last_axis_into(soft[s], x[s], b.stream);
    b.run("softmax_backward", shape, bf, 3 * X, sets,
          [&](int s) { softmax_backward_into(dx[s], dy[s], soft[s], b.stream); },
          [&] {
            return b.ends(R, [&](int64_t r0, int64_t r1) {
              return bench::relative_l2_error(
                  Bench::rows_host(dx[0], r0, r1),
                  softmax_backward(Bench::rows_host(dy[0], r0, r1), Bench::rows_host(soft[0], r0, r1)));
            });
          },
          tol_for(bf));
  }
  b.sync();
}

// ---- cross entropy, bf16 [rows, classes] ----------------------------------------------------
void bench_cross_entropy(Bench& b) {
  const int64_t R = b.opt.ce_rows, C = b.opt.ce_classes;
  const Shape shape{R, C};
  const DType bf = DType::bf16;
  const double L = static_cast<double>(R) * C * 2;  // bytes of the logits
  const int sets = b.sets_for(static_cast<size_t>(2 * L));  // logits + dlogits
  std::fprintf(stderr, "cross entropy: %s bf16, rotating %d input sets\n", bench::shape_string(shape).c_str(), sets);

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
      return bench::relative_l2_error(
          Bench::rows_host(loss[0], r0, r1),
          cross_entropy(Bench::rows_host(logits[0], r0, r1), Bench::rows_host(targets[0], r0, r1), ce));
    });
  };
  auto check_grad = [&] {
    return b.ends(R, [&](int64_t r0, int64_t r1) {
      return bench::relative_l2_error(
          Bench::rows_host(dlogits[0], r0, r1),
          cross_entropy_backward(Bench::rows_host(logits[0], r0, r1), Bench::rows_host(targets[0], r0, r1),
                                 dloss_h.slice(0, r0, r1), ce));
    });
  };

  // Forward: the logits read once (ANCHORS.md counts only those).
  b.run("cross_entropy", shape, bf, L, sets,
        [&](int s) { cross_entropy_into(loss[s], logits[s], targets[s], ce, b.stream); }, check_loss,
        tol_for(DType::f32));
  // Backward alone: logits read, dlogits written.
  b.run("cross_entropy_backward", shape, bf, 2 * L, sets,
        [&](int s) { cross_entropy_backward_into(dlogits[s], logits[s], targets[s], dloss, ce, b.stream); },
        check_grad, tol_for(bf));
  // Forward then backward, two calls: logits read twice, dlogits written (as anchors2.py's
  // torch fwd+bwd is counted).
  b.run("cross_entropy + cross_entropy_backward", shape, bf, 3 * L, sets,
        [&](int s) {
          cross_entropy_into(loss[s], logits[s], targets[s], ce, b.stream);
          cross_entropy_backward_into(dlogits[s], logits[s], targets[s], dloss, ce, b.stream);
        },
        [&] { return worst(check_loss(), check_grad()); }, tol_for(bf));
  // One pass writing the gradient: logits read once, dlogits written (Liger's count).
  b.run("cross_entropy_with_grad", shape, bf, 2 * L, sets,
        [&](int s) { cross_entropy_with_grad_into(loss[s], dlogits[s], logits[s], targets[s], scale, ce, b.stream); },
        [&] { return worst(check_loss(), check_grad()); }, tol_for(bf));
  b.sync();
}

// The alternatives to the default launch choices, each timed on the ops it changes.
void run_variants(Bench& b) {
  using rudnn::norm::cuda::KernelTuning;
  using rudnn::norm::cuda::kernel_tuning;
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

}  // namespace

int main(int argc, char** argv) {
  Bench b;
  b.opt = parse(argc, argv);
  if (b.opt.quick) {
    b.timing.warmup_runs = 3;
    b.timing.warmup_ms = 5;
    b.timing.runs = 20;
  }
  if (b.opt.runs > 0) b.timing.runs = b.opt.runs;
  if (b.opt.warmup >= 0) {
    b.timing.warmup_runs = b.opt.warmup;
    b.timing.warmup_ms = 0;
  }

  try {
    if (!cuda_available()) {
      std::fprintf(stderr, "rudnn_bench: no usable CUDA device (ruDNN built with CUDA: %s)\n",
                   built_with_cuda() ? "yes" : "no");
      return 2;
    }
    RUDNN_BENCH_CUDA(cudaSetDevice(b.opt.device));
    b.info = bench::query_device(b.opt.device);
    b.dev = Device::cuda(b.opt.device);
    RUDNN_BENCH_CUDA(cudaStreamCreateWithFlags(&b.cs, cudaStreamNonBlocking));
    b.stream = Stream::borrow(b.dev, b.cs);

    std::printf("ruDNN %s benchmark, normalization family\n", rudnn::version());
    std::printf("device: %s\n", b.info.str().c_str());
    std::printf("timing: CUDA events per run, median of %d runs after >= %d warm-up runs (%.0f ms); inputs rotated\n",
                b.timing.runs, b.timing.warmup_runs, b.timing.warmup_ms);
    std::fflush(stdout);

    const bench::CopyBandwidth copy0 = bench::measure_copy_bandwidth(b.cs, b.opt.copy_bytes, b.timing);
    std::fprintf(stderr, "copy d2d %zu MiB: %.4f ms, %.1f GB/s\n", b.opt.copy_bytes >> 20, copy0.timing.median_ms,
                 copy0.gbs);
    b.table.set_copy_gbs(copy0.gbs);

    bench_norms(b);
    release_cached_memory(b.dev);
    bench_cross_entropy(b);
    release_cached_memory(b.dev);
    if (b.opt.variants) run_variants(b);

    // The copy again at the end: the ceiling is the better of the two, and the pair shows
    // whether the card's state drifted during the run.
    const bench::CopyBandwidth copy1 = bench::measure_copy_bandwidth(b.cs, b.opt.copy_bytes, b.timing);
    const double ceiling = std::max(copy0.gbs, copy1.gbs);
    Table out;
    out.set_copy_gbs(ceiling);
    Row copy_row;
    copy_row.op = "copy d2d (cudaMemcpyAsync, ceiling)";
    copy_row.shape = std::to_string(b.opt.copy_bytes >> 20) + "MiB";
    copy_row.dtype = "u8";
    copy_row.bytes = 2.0 * static_cast<double>(b.opt.copy_bytes);
    copy_row.timing = copy0.gbs >= copy1.gbs ? copy0.timing : copy1.timing;
    out.add(copy_row);
    for (Row r : b.table.rows()) out.add(r);

    std::printf("copy bandwidth: %.1f GB/s at start, %.1f GB/s at end (ceiling: %.1f GB/s)\n", copy0.gbs, copy1.gbs,
                ceiling);
    std::printf("GB/s = bytes read + written once (ANCHORS.md); %%copy = GB/s over the ceiling; check = relative L2 "
                "error of the first/last %lld rows against the CPU reference\n\n",
                static_cast<long long>(b.opt.check_rows));
    out.print(stdout);
    if (!b.opt.csv.empty()) {
      out.write_csv(b.opt.csv);
      std::printf("\nwrote %s\n", b.opt.csv.c_str());
    }
    cudaStreamDestroy(b.cs);
    return out.all_ok() ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rudnn_bench: %s\n", e.what());
    return 3;
  }
}
