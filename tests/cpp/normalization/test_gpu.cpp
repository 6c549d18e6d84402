// The normalization family on the GPU against the CPU reference: fresh random inputs every
// run, outputs poisoned before the op (every allocation is filled with NaN bytes here),
// per-dtype tolerances, inputs checked bit-unchanged, every kernel tile and launch variant,
// and the device/stream rules. CUDA-graph capture and tensors of more than 2^31 elements are
// checked for every op by the contract suite (test_contract.cpp). Without a CUDA device
// every test here is reported as skipped.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>

#if RUDNN_TEST_CUDA
#include <cuda_runtime_api.h>

#include "normalization/cuda/tuning.h"
#endif

#include "support/poison.h"
#include "support/test_support.h"

namespace rudnn::test {
namespace {

constexpr Device kGpu = Device::cuda(0);

// support/poison.h registered its environment: a test that found NaN-free fresh tensors here
// would prove nothing about unwritten elements.
TEST(NormGpu, AllocationsArePoisonedWhileTestsRun) { EXPECT_TRUE(poison_allocations()); }

// An op under test: the same code runs on host tensors (the reference) and device tensors.
using Op = std::function<std::vector<Tensor>(const std::vector<Tensor>& inputs)>;

Tensor on_gpu(const Tensor& t) { return t.defined() ? t.to(kGpu) : Tensor(); }

// Runs `op` on the CPU and on the GPU from the same inputs and compares every output
// (output i against floors[i], see all_close, when given).
void expect_gpu_matches_reference(const Op& op, const std::vector<Tensor>& host_inputs,
                                  const std::string& label,
                                  const std::vector<double>& floors = {}) {
  SCOPED_TRACE(label);
  const std::vector<Tensor> expected = op(host_inputs);
  std::vector<Tensor> inputs;
  std::vector<std::vector<unsigned char>> before;
  for (const Tensor& t : host_inputs) {
    inputs.push_back(on_gpu(t));
    before.push_back(t.defined() ? bytes_of(t) : std::vector<unsigned char>{});
  }
  const std::vector<Tensor> got = op(inputs);
  ASSERT_EQ(got.size(), expected.size());
  for (size_t i = 0; i < got.size(); ++i) {
    if (!expected[i].defined()) {
      EXPECT_FALSE(got[i].defined()) << "output " << i;
      continue;
    }
    ASSERT_TRUE(got[i].defined()) << "output " << i;
    EXPECT_EQ(got[i].device(), kGpu);
    const double floor = i < floors.size() ? floors[i] : 0.0;
    EXPECT_TRUE(all_close(got[i], expected[i], tolerance(expected[i].dtype()), floor))
        << "output " << i;
  }
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (inputs[i].defined())
      EXPECT_EQ(bytes_of(inputs[i]), before[i]) << "input " << i << " was modified";
  }
}

// Row lengths covering every tile (warp tiles, block tiles, loop tiles, scalar paths) and
// their boundaries for 2- and 4-byte elements; up to 65536.
const int64_t kRowLengths[] = {1,     2,     3,     7,     8,     16,   33,   64,   100,
                               128,   255,   256,   257,   384,   512,  768,  1000, 1024,
                               1536,  2048,  3000,  4096,  4100,  5120, 8192, 8200, 12288,
                               16384, 16392, 24576, 32768, 32776, 65536};
const DType kFloatTypes[] = {DType::f32, DType::f16, DType::bf16};

int64_t rows_for(Rng& rng, int64_t h) {
  const int64_t most = std::clamp<int64_t>((int64_t{1} << 20) / h, 1, 67);
  return rng.integer(1, most);
}

// Calls f(dtype, H, shape) for every float dtype and row length, with a random row count.
void for_each_shape(Rng& rng, const std::function<void(DType, int64_t, const Shape&)>& f) {
  for (DType dt : kFloatTypes)
    for (int64_t h : kRowLengths) f(dt, h, Shape{rows_for(rng, h), h});
}

// No parameter, an F32 one, or one in the input dtype.
Tensor random_param(Rng& rng, int64_t h, DType dtype) {
  switch (rng.integer(0, 2)) {
    case 0:
      return Tensor();
    case 1:
      return random_tensor(rng, {h}, DType::f32);
    default:
      return random_tensor(rng, {h}, dtype);
  }
}

// ‖rstd · gamma · dy‖ over all rows: the size of the terms whose difference is dx in a
// norm's backward pass. At H = 1 or 2 dx nearly cancels (y barely depends on x), and its
// FP32 rounding error is relative to these terms, not to dx.
double norm_backward_scale(const Tensor& dy, const Tensor& x, const Tensor& gamma, bool layer,
                           float eps) {
  const auto d = to_doubles(dy), v = to_doubles(x);
  const auto g = gamma.defined() ? to_doubles(gamma) : std::vector<double>();
  const int64_t h = x.shape().back(), rows = x.numel() / h;
  double total = 0;
  for (int64_t r = 0; r < rows; ++r) {
    double mean = 0, var = 0;
    if (layer) {
      for (int64_t c = 0; c < h; ++c) mean += v[r * h + c];
      mean /= static_cast<double>(h);
    }
    for (int64_t c = 0; c < h; ++c) var += (v[r * h + c] - mean) * (v[r * h + c] - mean);
    const double rstd = 1 / std::sqrt(var / static_cast<double>(h) + eps);
    for (int64_t c = 0; c < h; ++c) {
      const double term = rstd * (g.empty() ? 1.0 : g[c]) * d[r * h + c];
      total += term * term;
    }
  }
  return std::sqrt(total);
}

// ‖Σ_rows |dy · x̂|‖ over the columns (with_xhat) or ‖Σ_rows |dy|‖: the size of the terms a
// parameter gradient (dgamma, dbeta) sums over the rows. Random signs make the sum cancel,
// and its FP32 rounding error is relative to these terms, not to the sum.
double param_grad_scale(const Tensor& dy, const Tensor& x, bool layer, float eps, bool with_xhat) {
  const auto d = to_doubles(dy), v = to_doubles(x);
  const int64_t h = x.shape().back(), rows = x.numel() / h;
  std::vector<double> column(static_cast<size_t>(h), 0.0);
  for (int64_t r = 0; r < rows; ++r) {
    double mean = 0, var = 0;
    if (layer) {
      for (int64_t c = 0; c < h; ++c) mean += v[r * h + c];
      mean /= static_cast<double>(h);
    }
    for (int64_t c = 0; c < h; ++c) var += (v[r * h + c] - mean) * (v[r * h + c] - mean);
    const double rstd = 1 / std::sqrt(var / static_cast<double>(h) + eps);
    for (int64_t c = 0; c < h; ++c) {
      const double xhat = with_xhat ? (v[r * h + c] - mean) * rstd : 1.0;
      column[c] += std::abs(d[r * h + c] * xhat);
    }
  }
  double total = 0;
  for (double c : column) total += c * c;
  return std::sqrt(total);
}

std::string describe(const char* op, DType dt, const Shape& shape) {
  return std::string(op) + " " + dtype_name(dt) + " " + shape_str(shape);
}

TEST(NormGpu, LayerNormForward) {
  RUDNN_REQUIRE_CUDA();
  RUDNN_SEEDED_RNG(rng);
  for_each_shape(rng, [&](DType dt, int64_t h, const Shape& shape) {
    // A mean far from zero checks that the variance does not cancel.
    const Tensor x = random_tensor(rng, shape, dt, rng.uniform(-4, 4), rng.uniform(0.5f, 2));
    expect_gpu_matches_reference(
        [](const std::vector<Tensor>& in) {
          return std::vector<Tensor>{layer_norm(in[0], in[1], in[2], 1e-5f)};
        },
        {x, random_param(rng, h, dt), random_param(rng, h, dt)}, describe("layer_norm", dt, shape));
  });
}

// LayerNorm on rows that strain its statistics: a mean 100 standard deviations from 0, a
// first element far from the rest, rows constant but for one element, and constant rows
// (variance 0: the output is beta).
TEST(NormGpu, LayerNormOfOffsetAndConstantRows) {
  RUDNN_REQUIRE_CUDA();
  RUDNN_SEEDED_RNG(rng);
  for (DType dt : kFloatTypes) {
    for (int64_t h : {64, 1000, 4096, 8192, 32768}) {
      const int64_t rows = 10;
      std::vector<double> v = to_doubles(random_tensor(rng, {rows, h}, DType::f32, 100.0f, 1.0f));
      for (int64_t r = 0; r < rows; ++r) {
        double* row = v.data() + r * h;
        switch (r % 5) {
          case 0:
            break;  // mean 100, standard deviation 1
          case 1:
            row[0] += (rng.integer(0, 1) ? 1 : -1) * rng.uniform(5, 50);
            break;
          case 2:  // mean and standard deviation both about 1/4
            std::fill(row, row + h, 0.25);
            row[rng.integer(0, h - 1)] = 0.25 + std::sqrt(static_cast<double>(h)) / 4;
            break;
          case 3:
            std::fill(row, row + h, -3.0);
            break;
          case 4:
            std::fill(row, row + h, 0.0);
            break;
        }
      }
      expect_gpu_matches_reference(
          [](const std::vector<Tensor>& in) {
            return std::vector<Tensor>{layer_norm(in[0], in[1], in[2], 1e-5f)};
          },
          {host_tensor(v, {rows, h}, dt), random_param(rng, h, dt), random_param(rng, h, dt)},
          describe("layer_norm", dt, Shape{rows, h}));
    }
  }
}

TEST(NormGpu, RmsNormForward) {
  RUDNN_REQUIRE_CUDA();
  RUDNN_SEEDED_RNG(rng);
  for_each_shape(rng, [&](DType dt, int64_t h, const Shape& shape) {
    expect_gpu_matches_reference(
        [](const std::vector<Tensor>& in) {
          return std::vector<Tensor>{rms_norm(in[0], in[1], 1e-6f)};
        },
        {random_tensor(rng, shape, dt), random_param(rng, h, dt)}, describe("rms_norm", dt, shape));
  });
}

TEST(NormGpu, AddRmsNormForward) {
  RUDNN_REQUIRE_CUDA();
  RUDNN_SEEDED_RNG(rng);
  for_each_shape(rng, [&](DType dt, int64_t h, const Shape& shape) {
    expect_gpu_matches_reference(
        [](const std::vector<Tensor>& in) {
          const AddRmsNormResult r = add_rms_norm(in[0], in[1], in[2], 1e-6f);
          return std::vector<Tensor>{r.sum, r.normed};
        },
        {random_tensor(rng, shape, dt), random_tensor(rng, shape, dt), random_param(rng, h, dt)},
        describe("add_rms_norm", dt, shape));
  });
}

TEST(NormGpu, AddRmsNormIsBitForBitTheComposition) {
  RUDNN_REQUIRE_CUDA();
  RUDNN_SEEDED_RNG(rng);
  for (DType dt : kFloatTypes) {
    for (int64_t h : {64, 4096, 8192, 65536}) {
      const Tensor x = on_gpu(random_tensor(rng, {5, h}, dt)),
                   r = on_gpu(random_tensor(rng, {5, h}, dt));
      const Tensor g = on_gpu(random_tensor(rng, {h}, DType::f32));
      const AddRmsNormResult fused = add_rms_norm(x, r, g, 1e-6f);
      EXPECT_TRUE(bit_equal(fused.normed, rms_norm(fused.sum, g, 1e-6f)))
          << dtype_name(dt) << " H=" << h;
    }
  }
}

TEST(NormGpu, SoftmaxAndLogSumExp) {
  RUDNN_REQUIRE_CUDA();
  RUDNN_SEEDED_RNG(rng);
  for_each_shape(rng, [&](DType dt, int64_t h, const Shape& shape) {
    expect_gpu_matches_reference(
        [](const std::vector<Tensor>& in) {
          return std::vector<Tensor>{softmax_last_axis(in[0]), logsumexp(in[0])};
        },
        {random_tensor(rng, shape, dt, 0, 3)}, describe("softmax/logsumexp", dt, shape));
  });
}

TEST(NormGpu, CrossEntropyForwardBackwardAndFused) {
  RUDNN_REQUIRE_CUDA();
  RUDNN_SEEDED_RNG(rng);
  for (DType dt : kFloatTypes) {
    for (int64_t c : kRowLengths) {
      const int64_t rows = rows_for(rng, c);
      // Targets across [-C, C) plus out-of-range and ignored ones.
      Tensor targets = random_integers(rng, {rows}, DType::i64, -c, c - 1);
      auto t = to_doubles(targets);
      if (rows > 2) t[0] = static_cast<double>(c);  // out of range
      if (rows > 3) t[1] = -100;                    // ignored
      targets = host_tensor(t, {rows}, rng.integer(0, 1) ? DType::i64 : DType::i32);
      const float scale = rng.uniform(0.1f, 2.0f);
      expect_gpu_matches_reference(
          [scale](const std::vector<Tensor>& in) {
            const CrossEntropyOptions opts = CrossEntropyOptions{}.set_ignore_index(-100);
            const CrossEntropyWithGrad fused = cross_entropy_with_grad(in[0], in[1], scale, opts);
            return std::vector<Tensor>{cross_entropy(in[0], in[1], opts),
                                       cross_entropy_backward(in[0], in[1], in[2], opts),
                                       fused.loss, fused.dlogits};
          },
          {random_tensor(rng, {rows, c}, dt, 0, 2), targets,
           random_tensor(rng, {rows}, DType::f32)},
          describe("cross_entropy", dt, {rows, c}));
    }
  }
}

#if RUDNN_TEST_CUDA
// Vocabulary-sized rows, through the two-pass loop and through the cluster kernel (sm_90; a
// row split over 2, 4 or 8 blocks of 256 or 512 threads, or the loop when even 8 of 512
// cannot hold it: F32 rows of 262144):
// ignored and out-of-range targets among valid ones, a per-row upstream gradient, and more
// rows than there are clusters on the device.
TEST(NormGpu, CrossEntropyGradientOfVocabularyRows) {
  RUDNN_REQUIRE_CUDA();
  RUDNN_SEEDED_RNG(rng);
  struct Restore {
    norm::cuda::KernelTuning saved = norm::cuda::kernel_tuning();
    ~Restore() { norm::cuda::kernel_tuning() = saved; }
  } restore;
  for (const bool cluster : {false, true}) {
    norm::cuda::kernel_tuning().cluster_cross_entropy = cluster;
    SCOPED_TRACE(cluster ? "cluster kernel" : "two-pass loop");
    for (DType dt : kFloatTypes) {
      for (int64_t c : {32776, 40000, 128256, 151936, 262144}) {
        const int64_t rows = rng.integer(20, 70);
        std::vector<double> t = to_doubles(random_integers(rng, {rows}, DType::i64, -c, c - 1));
        for (int64_t r = 0; r < rows; ++r) {
          const int64_t kind = rng.integer(0, 9);
          if (kind == 0) t[r] = -100;                            // ignored
          if (kind == 1) t[r] = rng.integer(0, 1) ? c : -c - 1;  // out of range
          if (kind == 2)
            t[r] = static_cast<double>(rng.integer(0, 1) ? 0 : c - 1);  // the ends of the row
        }
        const Tensor targets = host_tensor(t, {rows}, DType::i64);
        const float scale = rng.uniform(0.1f, 2.0f);
        expect_gpu_matches_reference(
            [scale](const std::vector<Tensor>& in) {
              const CrossEntropyOptions opts = CrossEntropyOptions{}.set_ignore_index(-100);
              const CrossEntropyWithGrad fused = cross_entropy_with_grad(in[0], in[1], scale, opts);
              return std::vector<Tensor>{cross_entropy_backward(in[0], in[1], in[2], opts),
                                         fused.loss, fused.dlogits};
            },
            {random_tensor(rng, {rows, c}, dt, rng.uniform(-3, 3), rng.uniform(0.5f, 3)), targets,
             random_tensor(rng, {rows}, DType::f32)},
            describe("cross_entropy (vocabulary rows)", dt, {rows, c}));
      }
    }
  }
}
#endif  // RUDNN_TEST_CUDA

// The per-row upstream gradient form of the fused op, and scale_unless_one, against the
// reference; a scale of exactly 1 leaves the tensor's bits as they were.
TEST(NormGpu, PerRowUpstreamGradientAndScaleUnlessOne) {
  RUDNN_REQUIRE_CUDA();
  RUDNN_SEEDED_RNG(rng);
  for (DType dt : kFloatTypes) {
    for (int64_t c : {100, 8192, 128256}) {
      const int64_t rows = rng.integer(1, 30);
      const Tensor targets = random_integers(rng, {rows}, DType::i64, -c, c - 1);
      expect_gpu_matches_reference(
          [](const std::vector<Tensor>& in) {
            const CrossEntropyWithGrad r = cross_entropy_with_grad(in[0], in[1], in[2]);
            return std::vector<Tensor>{r.loss, r.dlogits};
          },
          {random_tensor(rng, {rows, c}, dt, 0, 2), targets,
           random_tensor(rng, {rows}, DType::f32)},
          describe("cross_entropy_with_grad (per-row dloss)", dt, {rows, c}));
    }
    for (int64_t c : {1, 7, 8, 4096, 4100}) {
      const Shape shape{rng.integer(1, 50), c};
      const Tensor host = random_tensor(rng, shape, dt);
      const Tensor x = on_gpu(host);
      scale_unless_one(x, on_gpu(Tensor::full({1}, 1.0, DType::f32)));
      EXPECT_TRUE(bit_equal(x.to_host(), host)) << describe("scale_unless_one(1)", dt, shape);
      const float s = rng.uniform(-2, 2);
      scale_unless_one(x, on_gpu(Tensor::full({1}, s, DType::f32)));
      const Tensor expected = Tensor::empty(shape, dt);
      expected.copy_from(host);
      scale_unless_one(expected, Tensor::full({1}, s, DType::f32));
      EXPECT_TRUE(bit_equal(x.to_host(), expected)) << describe("scale_unless_one", dt, shape);
    }
  }
}

TEST(NormGpu, LayerNormBackward) {
  RUDNN_REQUIRE_CUDA();
  RUDNN_SEEDED_RNG(rng);
  for_each_shape(rng, [&](DType dt, int64_t h, const Shape& shape) {
    const Tensor dy = random_tensor(rng, shape, dt),
                 x = random_tensor(rng, shape, dt, rng.uniform(-2, 2));
    const Tensor gamma = random_param(rng, h, dt), beta = random_param(rng, h, dt);
    expect_gpu_matches_reference(
        [](const std::vector<Tensor>& in) {
          const LayerNormGrads g = layer_norm_backward(in[0], in[1], in[2], in[3], 1e-5f);
          return std::vector<Tensor>{g.dx, g.dgamma, g.dbeta};
        },
        {dy, x, gamma, beta}, describe("layer_norm_backward", dt, shape),
        {norm_backward_scale(dy, x, gamma, true, 1e-5f), param_grad_scale(dy, x, true, 1e-5f, true),
         param_grad_scale(dy, x, true, 1e-5f, false)});
  });
}

TEST(NormGpu, RmsNormBackward) {
  RUDNN_REQUIRE_CUDA();
  RUDNN_SEEDED_RNG(rng);
  for_each_shape(rng, [&](DType dt, int64_t h, const Shape& shape) {
    const Tensor dy = random_tensor(rng, shape, dt), x = random_tensor(rng, shape, dt);
    const Tensor gamma = random_param(rng, h, dt);
    expect_gpu_matches_reference(
        [](const std::vector<Tensor>& in) {
          const RmsNormGrads g = rms_norm_backward(in[0], in[1], in[2], 1e-6f);
          return std::vector<Tensor>{g.dx, g.dgamma};
        },
        {dy, x, gamma}, describe("rms_norm_backward", dt, shape),
        {norm_backward_scale(dy, x, gamma, false, 1e-6f),
         param_grad_scale(dy, x, false, 1e-6f, true)});
  });
}

TEST(NormGpu, SoftmaxBackward) {
  RUDNN_REQUIRE_CUDA();
  RUDNN_SEEDED_RNG(rng);
  for_each_shape(rng, [&](DType dt, int64_t h, const Shape& shape) {
    const Tensor y = softmax_last_axis(random_tensor(rng, shape, dt));
    expect_gpu_matches_reference(
        [](const std::vector<Tensor>& in) {
          return std::vector<Tensor>{softmax_backward(in[0], in[1])};
        },
        {random_tensor(rng, shape, dt), y}, describe("softmax_backward", dt, shape));
  });
}

TEST(NormGpu, SpecialValuesFollowTheReference) {
  RUDNN_REQUIRE_CUDA();
  const double inf = std::numeric_limits<double>::infinity(),
               nan = std::numeric_limits<double>::quiet_NaN();
  for (int64_t h : {4, 4096, 40000}) {  // a warp tile, a block tile, a loop tile
    std::vector<double> v(static_cast<size_t>(5 * h), 0.5);
    for (int64_t c = 0; c < h; ++c) v[c] = -inf;  // row 0: all -inf
    v[h + h / 2] = inf;                           // row 1: a +inf
    v[2 * h + 1] = nan;                           // row 2: a NaN
    v[3 * h] = -inf;                              // row 3: one -inf among finite values
    v[4 * h + 2] = 80.0;                          // row 4: a large value
    for (DType dt : kFloatTypes) {
      const Tensor x = host_tensor(v, {5, h}, dt);
      const Tensor t = host_tensor({0, 1, 2, 0, 2}, {5}, DType::i64);
      expect_gpu_matches_reference(
          [](const std::vector<Tensor>& in) {
            return std::vector<Tensor>{softmax_last_axis(in[0]), logsumexp(in[0]),
                                       cross_entropy(in[0], in[1]),
                                       cross_entropy_with_grad(in[0], in[1], 1.0f).dlogits};
          },
          {x, t}, describe("special values", dt, {5, h}));
    }
  }
}

TEST(NormGpu, LayoutsAndShapes) {
  RUDNN_REQUIRE_CUDA();
  RUDNN_SEEDED_RNG(rng);
  for (DType dt : kFloatTypes) {
    const Tensor base = on_gpu(random_tensor(rng, {6, 5, 264}, dt));
    const Tensor g = on_gpu(random_tensor(rng, {264}, DType::f32));
    // 3-d, permuted leading axes (copied), strided rows (in place), an element-offset slice
    // (misaligned: scalar path), a strided last axis (copied).
    const Tensor views[] = {base, base.transpose(0, 1), base.view({30, 264}).slice(0, 1, 30, 3),
                            base.view({30, 264}).slice(1, 1, 264), base.slice(2, 0, 264, 2)};
    for (const Tensor& v : views) {
      SCOPED_TRACE(shape_str(v.shape()) + " strides " + shape_str(v.strides()));
      const Tensor gv = g.slice(0, 0, v.shape().back()).contiguous();
      const Tensor hv = v.to_host(), hg = gv.to_host();
      EXPECT_TRUE(all_close(rms_norm(v, gv, 1e-6f), rms_norm(hv, hg, 1e-6f)));
      EXPECT_TRUE(all_close(layer_norm(v, gv, {}, 1e-6f), layer_norm(hv, hg, {}, 1e-6f)));
      EXPECT_TRUE(all_close(softmax_last_axis(v), softmax_last_axis(hv)));
      EXPECT_TRUE(all_close(rms_norm_backward(v, v, gv, 1e-6f).dgamma,
                            rms_norm_backward(hv, hv, hg, 1e-6f).dgamma));
    }
  }
}

TEST(NormGpu, IntoFormsOnStridedOutputsAndZeroRows) {
  RUDNN_REQUIRE_CUDA();
  RUDNN_SEEDED_RNG(rng);
  const Tensor x = on_gpu(random_tensor(rng, {4, 512}, DType::bf16));
  const Tensor buffer = poisoned({8, 512}, DType::bf16, kGpu);
  rms_norm_into(buffer.slice(0, 0, 8, 2), x, {}, 1e-6f);
  EXPECT_TRUE(all_close(buffer.slice(0, 0, 8, 2), rms_norm(x.to_host(), {}, 1e-6f)));
  for (double v : to_doubles(buffer.slice(0, 1, 8, 2)))
    ASSERT_TRUE(std::isnan(v));  // rows between untouched
  // Zero rows: nothing to do, and a zero parameter gradient.
  const Tensor empty = Tensor::empty({0, 512}, DType::bf16, kGpu);
  EXPECT_EQ(softmax_last_axis(empty).shape(), (Shape{0, 512}));
  const LayerNormGrads g =
      layer_norm_backward(empty, empty, Tensor::full({512}, 1.0, DType::f32, kGpu),
                          Tensor::full({512}, 1.0, DType::f32, kGpu), 1e-5f);
  for (double v : to_doubles(g.dgamma)) ASSERT_EQ(v, 0.0);
  for (double v : to_doubles(g.dbeta)) ASSERT_EQ(v, 0.0);
}

TEST(NormGpu, BackwardIsDeterministic) {
  RUDNN_REQUIRE_CUDA();
  RUDNN_SEEDED_RNG(rng);
  for (int64_t h : {1024, 8192, 65536}) {
    const Tensor x = on_gpu(random_tensor(rng, {300, h}, DType::bf16));
    const Tensor dy = on_gpu(random_tensor(rng, {300, h}, DType::bf16));
    const Tensor g = on_gpu(random_tensor(rng, {h}, DType::f32));
    const LayerNormGrads a = layer_norm_backward(dy, x, g, g, 1e-5f),
                         b = layer_norm_backward(dy, x, g, g, 1e-5f);
    EXPECT_TRUE(bit_equal(a.dgamma, b.dgamma)) << h;
    EXPECT_TRUE(bit_equal(a.dbeta, b.dbeta)) << h;
    EXPECT_TRUE(bit_equal(a.dx, b.dx)) << h;
  }
}

#if RUDNN_TEST_CUDA  // the test sets a CUDA kernel tuning switch
// LayerNorm backward on rows of 129 .. 1024 16-byte vectors: the streamed kernel (the
// default there) and the register tile (tuning.h streamed_layer_norm_backward = false), from
// recomputed and from saved statistics, at the boundaries of the streamed kernel's block
// sizes (256, 512, 1024 threads) and on enough rows (~8M elements) that each block's ring of
// four row slots wraps over.
TEST(NormGpu, LayerNormBackwardStreamedAndTiled) {
  RUDNN_REQUIRE_CUDA();
  RUDNN_SEEDED_RNG(rng);
  using norm::cuda::kernel_tuning;
  struct Restore {
    bool saved = kernel_tuning().streamed_layer_norm_backward;
    ~Restore() { kernel_tuning().streamed_layer_norm_backward = saved; }
  } restore;
  for (bool streamed : {true, false}) {
    kernel_tuning().streamed_layer_norm_backward = streamed;
    for (DType dt : kFloatTypes) {
      const int64_t width = dt == DType::f32 ? 4 : 8;
      for (int64_t vectors : {129, 256, 257, 512, 513, 1000, 1024}) {
        const int64_t h = vectors * width;
        const int64_t most = (int64_t{1} << 23) / h;
        const int64_t rows = streamed ? rng.integer(most * 3 / 4, most) : rows_for(rng, h);
        const Shape shape{rows, h};
        const Tensor dy = random_tensor(rng, shape, dt),
                     x = random_tensor(rng, shape, dt, rng.uniform(-2, 2));
        const Tensor gamma = random_param(rng, h, dt), beta = random_param(rng, h, dt);
        const std::string what = std::string(streamed ? "streamed " : "register tile ");
        const std::vector<double> floors = {norm_backward_scale(dy, x, gamma, true, 1e-5f),
                                            param_grad_scale(dy, x, true, 1e-5f, true),
                                            param_grad_scale(dy, x, true, 1e-5f, false)};
        expect_gpu_matches_reference(
            [](const std::vector<Tensor>& in) {
              const LayerNormGrads g = layer_norm_backward(in[0], in[1], in[2], in[3], 1e-5f);
              return std::vector<Tensor>{g.dx, g.dgamma, g.dbeta};
            },
            {dy, x, gamma, beta}, describe((what + "layer_norm_backward").c_str(), dt, shape),
            floors);
        expect_gpu_matches_reference(
            [](const std::vector<Tensor>& in) {
              const LayerNormStats stats = layer_norm_with_stats(in[1], in[2], in[3], 1e-5f).stats;
              const LayerNormGrads g = layer_norm_backward(in[0], in[1], stats, in[2], in[3]);
              return std::vector<Tensor>{g.dx, g.dgamma, g.dbeta};
            },
            {dy, x, gamma, beta},
            describe((what + "layer_norm_backward (saved stats)").c_str(), dt, shape), floors);
      }
    }
  }
}
#endif  // RUDNN_TEST_CUDA

TEST(NormGpu, RunsOnTheGivenStream) {
  RUDNN_REQUIRE_CUDA();
  RUDNN_SEEDED_RNG(rng);
  const Stream stream = Stream::create(kGpu);
  const Tensor hx = random_tensor(rng, {64, 4096}, DType::bf16);
  const Tensor x = hx.to(kGpu, stream);
  const Tensor y = rms_norm(x, {}, 1e-6f, stream);
  EXPECT_EQ(y.allocation_stream(), stream);
  EXPECT_TRUE(all_close(y.to_host(stream), rms_norm(hx, {}, 1e-6f)));
  // A StreamGuard makes it the default for ops given no stream.
  StreamGuard guard(stream);
  const Tensor z = softmax_last_axis(x);
  EXPECT_EQ(z.allocation_stream(), stream);
  EXPECT_TRUE(all_close(z.to_host(stream), softmax_last_axis(hx)));
}

TEST(NormGpu, DeviceAndStreamRules) {
  RUDNN_REQUIRE_CUDA();
  const Tensor x = Tensor::full({4, 8}, 1.0, DType::f32, kGpu);
  const Tensor host_gamma = Tensor::full({8}, 1.0, DType::f32);
  EXPECT_TRUE(throws_error([&] { rms_norm(x, host_gamma, 1e-6f); }, ErrorCode::DeviceMismatch,
                           {"rms_norm", "gamma is on cpu", "cuda:0"}));
  EXPECT_TRUE(throws_error([&] { add_rms_norm(x, x.to_host(), {}, 1e-6f); },
                           ErrorCode::DeviceMismatch, {"residual"}));
  EXPECT_TRUE(throws_error([&] { cross_entropy(x, Tensor::zeros({4}, DType::i64)); },
                           ErrorCode::DeviceMismatch, {"cross_entropy", "targets"}));
  EXPECT_TRUE(throws_error(
      [&] {
        rms_norm_into(Tensor::empty({4, 8}, DType::f32), x, {}, 1e-6f);
      },
      ErrorCode::DeviceMismatch, {"rms_norm", "out is on cpu"}));
  // A CUDA stream for CPU operands, and a CPU stream for CUDA operands.
  EXPECT_TRUE(throws_error([&] { rms_norm(x.to_host(), {}, 1e-6f, Stream::create(kGpu)); },
                           ErrorCode::DeviceMismatch,
                           {"rms_norm", "stream is on cuda:0", "operands are on cpu"}));
  EXPECT_TRUE(throws_error([&] { softmax_last_axis(x, Stream::cpu()); }, ErrorCode::DeviceMismatch,
                           {"softmax_last_axis", "stream is on cpu"}));
  const int n = cuda_device_count();
  EXPECT_TRUE(throws_error([&] { Tensor::empty({2}, DType::f32, Device::cuda(n)); },
                           ErrorCode::InvalidArgument, {"does not exist"}));
}

#if RUDNN_TEST_CUDA

// Every launch choice the benchmark can select (normalization/cuda/tuning.h) computes the same
// function: each variant against the reference, on rows that reach the block tiles (128 to
// 1024 threads) and the cluster kernel (two to eight blocks a row).
TEST(NormGpu, EveryKernelVariantMatchesTheReference) {
  RUDNN_REQUIRE_CUDA();
  RUDNN_SEEDED_RNG(rng);
  using norm::cuda::kernel_tuning;
  using norm::cuda::KernelTuning;
  struct Restore {
    KernelTuning saved = kernel_tuning();
    ~Restore() { kernel_tuning() = saved; }
  } restore;
  struct Variant {
    const char* name;
    void (*set)(KernelTuning&);
  };
  const Variant variants[] = {
      {"defaults", [](KernelTuning&) {}},
      {"logsumexp on the block tile", [](KernelTuning& t) { t.logsumexp_warp_rows = false; }},
      {"cross-entropy gradient on the two-pass loop",
       [](KernelTuning& t) { t.cluster_cross_entropy = false; }},
      {"cluster (smallest that holds the row)",
       [](KernelTuning& t) { t.cluster_cross_entropy = true; }},
      {"cluster of 8", [](KernelTuning& t) { t.cluster_cross_entropy = true, t.cluster_size = 8; }},
      {"cluster of 512-thread blocks",
       [](KernelTuning& t) { t.cluster_cross_entropy = true, t.cluster_threads = 512; }},
  };
  for (const Variant& v : variants) {
    kernel_tuning() = restore.saved;
    v.set(kernel_tuning());
    SCOPED_TRACE(v.name);
    for (DType dt : kFloatTypes) {
      for (int64_t h : {200, 1032, 4096, 8192, 16392, 32768}) {
        const Shape shape{rng.integer(1, 300), h};
        expect_gpu_matches_reference(
            [](const std::vector<Tensor>& in) {
              const AddRmsNormResult added = add_rms_norm(in[0], in[3], in[1], 1e-6f);
              return std::vector<Tensor>{layer_norm(in[0], in[1], in[2], 1e-5f),
                                         rms_norm(in[0], in[1], 1e-6f), logsumexp(in[0]), added.sum,
                                         added.normed};
            },
            {random_tensor(rng, shape, dt, rng.uniform(-2, 2)), random_param(rng, h, dt),
             random_param(rng, h, dt), random_tensor(rng, shape, dt)},
            describe("norms", dt, shape));
      }
      for (int64_t c : {40000, 128256}) {
        const int64_t rows = rng.integer(1, 40);
        std::vector<double> t = to_doubles(random_integers(rng, {rows}, DType::i64, -c, c - 1));
        if (rows > 1) t[0] = -100;
        const Tensor targets = host_tensor(t, {rows}, DType::i64);
        expect_gpu_matches_reference(
            [](const std::vector<Tensor>& in) {
              const CrossEntropyOptions opts = CrossEntropyOptions{}.set_ignore_index(-100);
              const CrossEntropyWithGrad fused = cross_entropy_with_grad(in[0], in[1], 0.5f, opts);
              return std::vector<Tensor>{cross_entropy_backward(in[0], in[1], in[2], opts),
                                         fused.loss, fused.dlogits};
            },
            {random_tensor(rng, {rows, c}, dt, 0, 2), targets,
             random_tensor(rng, {rows}, DType::f32)},
            describe("cross_entropy", dt, {rows, c}));
      }
    }
  }
}

#endif  // RUDNN_TEST_CUDA

}  // namespace
}  // namespace rudnn::test
