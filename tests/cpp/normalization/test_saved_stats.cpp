// LayerNorm with saved statistics: layer_norm_with_stats (y, mean, rstd) and
// layer_norm_backward from them. On the CPU: the statistics are the rows' mean and rstd, the
// backward from them equals the recomputing one, and the given values (not x's) are the ones
// used; every argument rule. On the GPU: against the reference for every tile (register,
// loop, scalar), deterministic, strided statistics. The contract rows (graph capture,
// overlaps, zero rows, > 2^31 elements) are in test_contract.cpp.
#include <algorithm>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "support/test_support.h"

namespace rudnn::test {
namespace {

constexpr Device kGpu = Device::cuda(0);
constexpr float kEps = 1e-5f;

DType stats_dtype(DType x) { return x == DType::f64 ? DType::f64 : DType::f32; }

// float64 mean and rstd of each row (the last axis) of x.
std::pair<std::vector<double>, std::vector<double>> row_stats(const Tensor& x, double eps) {
  const std::vector<double> v = to_doubles(x);
  const int64_t h = x.shape().back(), rows = x.numel() / h;
  std::vector<double> mean(static_cast<size_t>(rows)), rstd(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) {
    double m = 0, var = 0;
    for (int64_t c = 0; c < h; ++c) m += v[r * h + c];
    m /= static_cast<double>(h);
    for (int64_t c = 0; c < h; ++c) var += (v[r * h + c] - m) * (v[r * h + c] - m);
    mean[r] = m;
    rstd[r] = 1 / std::sqrt(var / static_cast<double>(h) + eps);
  }
  return {mean, rstd};
}

TEST(LayerNormStatsReference, StatsAreTheRowsMeanAndRstd) {
  RUDNN_SEEDED_RNG(rng);
  for (DType dt : {DType::f32, DType::bf16, DType::f64}) {
    SCOPED_TRACE(dtype_name(dt));
    const Tensor x = random_tensor(rng, {5, 3, 37}, dt, 2.0f, 3.0f);
    const Tensor gamma = random_tensor(rng, {37}, DType::f32), beta = random_tensor(rng, {37}, dt);
    const LayerNormWithStats r = layer_norm_with_stats(x, gamma, beta, kEps);
    EXPECT_TRUE(bit_equal(r.y, layer_norm(x, gamma, beta, kEps)));
    ASSERT_EQ(r.stats.mean.shape(), (Shape{5, 3}));
    ASSERT_EQ(r.stats.rstd.shape(), (Shape{5, 3}));
    EXPECT_EQ(r.stats.mean.dtype(), stats_dtype(dt));
    EXPECT_EQ(r.stats.rstd.dtype(), stats_dtype(dt));
    const auto [mean, rstd] = row_stats(x, kEps);
    const double tol = dt == DType::f64 ? 1e-12 : 1e-6;
    EXPECT_TRUE(all_close(r.stats.mean, host_tensor(mean, {5, 3}, stats_dtype(dt)), tol));
    EXPECT_TRUE(all_close(r.stats.rstd, host_tensor(rstd, {5, 3}, stats_dtype(dt)), tol));
  }
}

TEST(LayerNormStatsReference, BackwardFromSavedStatsEqualsTheRecomputingOne) {
  RUDNN_SEEDED_RNG(rng);
  for (DType dt : {DType::f32, DType::f16, DType::bf16, DType::f64}) {
    SCOPED_TRACE(dtype_name(dt));
    const Tensor x = random_tensor(rng, {6, 40}, dt, 0.5f, 2.0f),
                 dy = random_tensor(rng, {6, 40}, dt);
    const Tensor gamma = random_tensor(rng, {40}, dt), beta = random_tensor(rng, {40}, DType::f32);
    const LayerNormStats stats = layer_norm_with_stats(x, gamma, beta, kEps).stats;
    const LayerNormGrads saved = layer_norm_backward(dy, x, stats, gamma, beta);
    const LayerNormGrads recomputed = layer_norm_backward(dy, x, gamma, beta, kEps);
    if (dt == DType::f64) {  // the same float64 statistics either way
      EXPECT_TRUE(bit_equal(saved.dx, recomputed.dx));
      EXPECT_TRUE(bit_equal(saved.dgamma, recomputed.dgamma));
      EXPECT_TRUE(bit_equal(saved.dbeta, recomputed.dbeta));
    } else {  // the statistics went through FP32
      EXPECT_TRUE(all_close(saved.dx, recomputed.dx, tolerance(dt)));
      EXPECT_TRUE(all_close(saved.dgamma, recomputed.dgamma, tolerance(dt)));
      EXPECT_TRUE(bit_equal(saved.dbeta, recomputed.dbeta));  // sum of dy: no statistics
    }
    // Statistics in another layout (a stepped view) are read as their values.
    const Tensor wide = Tensor::zeros({6, 2}, stats_dtype(dt));
    wide.slice(1, 0, 1).copy_from(stats.mean.view({6, 1}));
    wide.slice(1, 1, 2).copy_from(stats.rstd.view({6, 1}));
    const LayerNormStats strided{wide.as_strided({6}, {2}, 0), wide.as_strided({6}, {2}, 1)};
    ASSERT_FALSE(strided.mean.is_contiguous());
    const LayerNormGrads from_view = layer_norm_backward(dy, x, strided, gamma, beta);
    EXPECT_TRUE(bit_equal(from_view.dx, saved.dx));
    EXPECT_TRUE(bit_equal(from_view.dgamma, saved.dgamma));
  }
}

// Statistics that are not x's: the result is the formula applied to them, so the given
// values are what the backward reads (with mean 0 and rstd 1, x̂ = x).
TEST(LayerNormStatsReference, BackwardReadsTheGivenStats) {
  RUDNN_SEEDED_RNG(rng);
  const int64_t rows = 3, h = 9;
  const Tensor x = random_tensor(rng, {rows, h}, DType::f64, 1.0f),
               dy = random_tensor(rng, {rows, h}, DType::f64);
  const Tensor gamma = random_tensor(rng, {h}, DType::f64);
  const std::vector<double> mean_v = {0.0, 0.25, -1.0}, rstd_v = {1.0, 2.0, 0.5};
  const LayerNormStats stats{host_tensor(mean_v, {rows}, DType::f64),
                             host_tensor(rstd_v, {rows}, DType::f64)};
  const LayerNormGrads g = layer_norm_backward(dy, x, stats, gamma, {});
  const auto xv = to_doubles(x), dv = to_doubles(dy), gv = to_doubles(gamma);
  std::vector<double> dx(static_cast<size_t>(rows * h)), dgamma(static_cast<size_t>(h), 0.0);
  for (int64_t r = 0; r < rows; ++r) {
    double mean_gdy = 0, mean_gdy_xhat = 0;
    for (int64_t c = 0; c < h; ++c) {
      const double xhat = (xv[r * h + c] - mean_v[r]) * rstd_v[r];
      mean_gdy += gv[c] * dv[r * h + c] / h;
      mean_gdy_xhat += gv[c] * dv[r * h + c] * xhat / h;
      dgamma[c] += dv[r * h + c] * xhat;
    }
    for (int64_t c = 0; c < h; ++c) {
      const double xhat = (xv[r * h + c] - mean_v[r]) * rstd_v[r];
      dx[r * h + c] = rstd_v[r] * (gv[c] * dv[r * h + c] - mean_gdy - xhat * mean_gdy_xhat);
    }
  }
  EXPECT_TRUE(all_close(g.dx, host_tensor(dx, {rows, h}, DType::f64), 1e-12));
  EXPECT_TRUE(all_close(g.dgamma, host_tensor(dgamma, {h}, DType::f64), 1e-12));
  EXPECT_FALSE(g.dbeta.defined());
}

TEST(LayerNormStatsReference, IntoFormsAndZeroRows) {
  RUDNN_SEEDED_RNG(rng);
  const Tensor x = random_tensor(rng, {4, 16}, DType::bf16),
               dy = random_tensor(rng, {4, 16}, DType::bf16);
  const Tensor gamma = random_tensor(rng, {16}, DType::f32),
               beta = random_tensor(rng, {16}, DType::f32);
  const LayerNormWithStats r = layer_norm_with_stats(x, gamma, beta, kEps);
  const Tensor y = poisoned({4, 16}, DType::bf16, Device::cpu());
  const Tensor mean = poisoned({4}, DType::f32, Device::cpu()),
               rstd = poisoned({4}, DType::f32, Device::cpu());
  layer_norm_with_stats_into(y, mean, rstd, x, gamma, beta, kEps);
  EXPECT_TRUE(bit_equal(y, r.y));
  EXPECT_TRUE(bit_equal(mean, r.stats.mean));
  EXPECT_TRUE(bit_equal(rstd, r.stats.rstd));
  const LayerNormGrads g = layer_norm_backward(dy, x, r.stats, gamma, beta);
  const Tensor dx = poisoned({4, 16}, DType::bf16, Device::cpu());
  const Tensor dgamma = poisoned({16}, DType::f32, Device::cpu()),
               dbeta = poisoned({16}, DType::f32, Device::cpu());
  layer_norm_backward_into(dx, dgamma, dbeta, dy, x, r.stats, gamma, beta);
  EXPECT_TRUE(bit_equal(dx, g.dx));
  EXPECT_TRUE(bit_equal(dgamma, g.dgamma));
  EXPECT_TRUE(bit_equal(dbeta, g.dbeta));

  const Tensor empty = Tensor::empty({0, 16}, DType::bf16);
  const LayerNormWithStats e = layer_norm_with_stats(empty, gamma, beta, kEps);
  EXPECT_EQ(e.stats.mean.shape(), (Shape{0}));
  const LayerNormGrads ge = layer_norm_backward(empty, empty, e.stats, gamma, beta);
  for (double v : to_doubles(ge.dgamma)) ASSERT_EQ(v, 0.0);
  for (double v : to_doubles(ge.dbeta)) ASSERT_EQ(v, 0.0);
  // 1-d x: one row, 0-d statistics.
  const LayerNormWithStats one = layer_norm_with_stats(x.slice(0, 0, 1).view({16}), {}, {}, kEps);
  EXPECT_EQ(one.stats.rstd.shape(), Shape{});
}

TEST(LayerNormStatsErrors, ForwardStatisticsOutputs) {
  const Tensor x = Tensor::full({4, 8}, 0.5, DType::bf16);
  const Tensor y = Tensor::empty({4, 8}, DType::bf16);
  const Tensor mean = Tensor::empty({4}, DType::f32), rstd = Tensor::empty({4}, DType::f32);
  EXPECT_TRUE(throws_error([&] { layer_norm_with_stats(x, {}, {}, 0.0f); },
                           ErrorCode::InvalidArgument, {"layer_norm_with_stats", "eps"}));
  EXPECT_TRUE(throws_error(
      [&] {
        layer_norm_with_stats_into(y, Tensor::empty({4}, DType::bf16), rstd, x, {}, {}, kEps);
      },
      ErrorCode::DTypeMismatch, {"layer_norm_with_stats", "mean_out", "bf16"}));
  EXPECT_TRUE(throws_error(
      [&] {
        layer_norm_with_stats_into(y, mean, Tensor::empty({4, 1}, DType::f32), x, {}, {}, kEps);
      },
      ErrorCode::ShapeMismatch, {"layer_norm_with_stats", "rstd_out", "[4, 1]"}));
  EXPECT_TRUE(throws_error(
      [&] {
        layer_norm_with_stats_into(y, Tensor::empty({8}, DType::f32).slice(0, 0, 8, 2), rstd, x, {},
                                   {}, kEps);
      },
      ErrorCode::InvalidArgument, {"layer_norm_with_stats", "mean_out", "contiguous"}));
  EXPECT_TRUE(throws_error([&] { layer_norm_with_stats_into(y, mean, mean, x, {}, {}, kEps); },
                           ErrorCode::InvalidArgument,
                           {"layer_norm_with_stats", "rstd_out overlaps mean_out"}));
  EXPECT_TRUE(throws_error([&] { layer_norm_with_stats_into(y, Tensor(), rstd, x, {}, {}, kEps); },
                           ErrorCode::InvalidArgument, {"layer_norm_with_stats", "mean_out"}));
  // An output over gamma (both F32 here).
  const Tensor xf = Tensor::full({4, 8}, 0.5, DType::f32);
  const Tensor buffer = Tensor::zeros({12}, DType::f32);
  EXPECT_TRUE(throws_error(
      [&] {
        layer_norm_with_stats_into(Tensor::empty({4, 8}, DType::f32), buffer.slice(0, 0, 4), rstd,
                                   xf, buffer.slice(0, 2, 10), {}, kEps);
      },
      ErrorCode::InvalidArgument, {"layer_norm_with_stats", "mean_out overlaps gamma"}));
}

TEST(LayerNormStatsErrors, BackwardStatistics) {
  const Tensor x = Tensor::full({4, 8}, 0.5, DType::bf16);
  const Tensor mean = Tensor::zeros({4}, DType::f32), rstd = Tensor::full({4}, 1.0, DType::f32);
  EXPECT_TRUE(throws_error(
      [&] {
        layer_norm_backward(x, x, LayerNormStats{Tensor(), rstd}, {}, {});
      },
      ErrorCode::InvalidArgument, {"layer_norm_backward", "mean", "undefined"}));
  EXPECT_TRUE(throws_error(
      [&] {
        layer_norm_backward(x, x, {mean, Tensor::full({4}, 1.0, DType::bf16)}, {}, {});
      },
      ErrorCode::DTypeMismatch, {"layer_norm_backward", "rstd", "bf16"}));
  EXPECT_TRUE(throws_error(
      [&] {
        layer_norm_backward(x, x, {Tensor::zeros({4}, DType::f64), rstd}, {}, {});
      },
      ErrorCode::DTypeMismatch, {"layer_norm_backward", "mean", "f64"}));
  EXPECT_TRUE(throws_error(
      [&] {
        layer_norm_backward(x, x, {mean, Tensor::full({8}, 1.0, DType::f32)}, {}, {});
      },
      ErrorCode::ShapeMismatch, {"layer_norm_backward", "rstd", "x.shape[:-1]"}));
  EXPECT_TRUE(throws_error(
      [&] {
        layer_norm_backward(x, x, {mean.view({4, 1}), rstd}, {}, {});
      },
      ErrorCode::ShapeMismatch, {"layer_norm_backward", "mean", "[4, 1]"}));
  // The rules of the recomputing form still hold.
  EXPECT_TRUE(throws_error(
      [&] {
        layer_norm_backward(x, x, {mean, rstd}, Tensor::full({3}, 1.0, DType::f32), {});
      },
      ErrorCode::ShapeMismatch, {"layer_norm_backward", "gamma"}));
  // An output written over the statistics.
  const Tensor xf = Tensor::full({4, 8}, 0.5, DType::f32);
  const Tensor buffer = Tensor::zeros({36}, DType::f32);
  const Tensor dx = buffer.slice(0, 0, 32).view({4, 8});
  EXPECT_TRUE(throws_error(
      [&] {
        layer_norm_backward_into(dx, {}, {}, xf, xf, {buffer.slice(0, 28, 32), rstd}, {}, {});
      },
      ErrorCode::InvalidArgument, {"layer_norm_backward", "dx_out overlaps mean"}));
  const Tensor dgamma = buffer.slice(0, 28, 36);
  EXPECT_TRUE(throws_error(
      [&] {
        layer_norm_backward_into(Tensor::empty({4, 8}, DType::f32), dgamma, {}, xf, xf,
                                 {mean, buffer.slice(0, 32, 36)},
                                 Tensor::full({8}, 1.0, DType::f32), {});
      },
      ErrorCode::InvalidArgument, {"layer_norm_backward", "dgamma_out overlaps rstd"}));
}

// ---- GPU ------------------------------------------------------------------------------------

Tensor on_gpu(const Tensor& t) { return t.defined() ? t.to(kGpu) : Tensor(); }

// Row lengths over every tile of the forward and backward kernels: warp tiles, block tiles,
// the backward's loop tile past 4096 vectors and the forward's past 4096 too, and lengths
// that are no multiple of a 16-byte vector (the scalar loop).
const int64_t kLengths[] = {1, 3, 8, 100, 256, 1024, 2048, 4096, 8192, 8200, 16384, 32776, 65536};
const DType kFloatTypes[] = {DType::f32, DType::f16, DType::bf16};

// ‖rstd · gamma · dy‖ over all rows and ‖Σ_rows |dy · x̂|‖, ‖Σ_rows |dy|‖ over the columns:
// the sizes of the terms that dx, dgamma, dbeta are cancellations of (their FP32 rounding is
// relative to these).
std::vector<double> gradient_floors(const Tensor& dy, const Tensor& x, const Tensor& gamma) {
  const auto d = to_doubles(dy), v = to_doubles(x);
  const auto g = gamma.defined() ? to_doubles(gamma) : std::vector<double>();
  const int64_t h = x.shape().back(), rows = x.numel() / h;
  const auto [mean, rstd] = row_stats(x, kEps);
  std::vector<double> cg(static_cast<size_t>(h), 0.0), cb(static_cast<size_t>(h), 0.0);
  double dx = 0;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < h; ++c) {
      const double term = rstd[r] * (g.empty() ? 1.0 : g[c]) * d[r * h + c];
      dx += term * term;
      cg[c] += std::abs(d[r * h + c] * (v[r * h + c] - mean[r]) * rstd[r]);
      cb[c] += std::abs(d[r * h + c]);
    }
  }
  double sg = 0, sb = 0;
  for (int64_t c = 0; c < h; ++c) {
    sg += cg[c] * cg[c];
    sb += cb[c] * cb[c];
  }
  return {std::sqrt(dx), std::sqrt(sg), std::sqrt(sb)};
}

TEST(LayerNormStatsGpu, ForwardMatchesTheReference) {
  RUDNN_REQUIRE_CUDA();
  RUDNN_SEEDED_RNG(rng);
  for (DType dt : kFloatTypes) {
    for (int64_t h : kLengths) {
      const Shape shape{rng.integer(1, std::max<int64_t>(1, std::min<int64_t>(67, (1 << 20) / h))),
                        h};
      SCOPED_TRACE(std::string("layer_norm_with_stats ") + dtype_name(dt) + " " + shape_str(shape));
      const Tensor x = random_tensor(rng, shape, dt, rng.uniform(-2, 2));
      const Tensor gamma = random_tensor(rng, {h}, dt), beta = random_tensor(rng, {h}, DType::f32);
      const Tensor xg = on_gpu(x), gg = on_gpu(gamma), bg = on_gpu(beta);
      const LayerNormWithStats got = layer_norm_with_stats(xg, gg, bg, kEps);
      const LayerNormWithStats ref = layer_norm_with_stats(x, gamma, beta, kEps);
      EXPECT_TRUE(bit_equal(got.y, layer_norm(xg, gg, bg, kEps))) << "y differs from layer_norm's";
      EXPECT_TRUE(all_close(got.y, ref.y));
      EXPECT_TRUE(all_close(got.stats.mean, ref.stats.mean, 1e-5)) << "mean";
      EXPECT_TRUE(all_close(got.stats.rstd, ref.stats.rstd, 1e-5)) << "rstd";
    }
  }
}

TEST(LayerNormStatsGpu, BackwardFromSavedStatsMatchesTheReference) {
  RUDNN_REQUIRE_CUDA();
  RUDNN_SEEDED_RNG(rng);
  for (DType dt : kFloatTypes) {
    for (int64_t h : kLengths) {
      const Shape shape{rng.integer(1, std::max<int64_t>(1, std::min<int64_t>(67, (1 << 20) / h))),
                        h};
      const int form = static_cast<int>(rng.integer(0, 2));  // gamma and beta: none, F32, dt
      const Tensor gamma = form == 0   ? Tensor()
                           : form == 1 ? random_tensor(rng, {h}, DType::f32)
                                       : random_tensor(rng, {h}, dt);
      const Tensor beta = gamma.defined() ? random_tensor(rng, {h}, gamma.dtype()) : Tensor();
      SCOPED_TRACE(std::string("layer_norm_backward (saved stats) ") + dtype_name(dt) + " " +
                   shape_str(shape) + " params " +
                   (gamma.defined() ? dtype_name(gamma.dtype()) : "none"));
      const Tensor x = random_tensor(rng, shape, dt, rng.uniform(-2, 2)),
                   dy = random_tensor(rng, shape, dt);
      const Tensor xg = on_gpu(x), dyg = on_gpu(dy), gg = on_gpu(gamma), bg = on_gpu(beta);
      const LayerNormStats stats = layer_norm_with_stats(xg, gg, bg, kEps).stats;
      const std::vector<unsigned char> mean_before = bytes_of(stats.mean), x_before = bytes_of(xg);
      const LayerNormGrads got = layer_norm_backward(dyg, xg, stats, gg, bg);
      EXPECT_EQ(bytes_of(stats.mean), mean_before) << "mean was modified";
      EXPECT_EQ(bytes_of(xg), x_before) << "x was modified";
      // The reference from the same FP32 statistics.
      const LayerNormStats host_stats{stats.mean.to_host(), stats.rstd.to_host()};
      const LayerNormGrads ref = layer_norm_backward(dy, x, host_stats, gamma, beta);
      const std::vector<double> floors = gradient_floors(dy, x, gamma);
      EXPECT_TRUE(all_close(got.dx, ref.dx, tolerance(dt), floors[0])) << "dx";
      if (gamma.defined()) {
        EXPECT_TRUE(all_close(got.dgamma, ref.dgamma, tolerance(gamma.dtype()), floors[1]))
            << "dgamma";
        EXPECT_TRUE(all_close(got.dbeta, ref.dbeta, tolerance(gamma.dtype()), floors[2]))
            << "dbeta";
      } else {
        EXPECT_FALSE(got.dgamma.defined());
        EXPECT_FALSE(got.dbeta.defined());
      }
      // And within the tolerance of the recomputing form on the device.
      const LayerNormGrads recomputed = layer_norm_backward(dyg, xg, gg, bg, kEps);
      EXPECT_TRUE(all_close(got.dx, recomputed.dx, tolerance(dt), floors[0])) << "dx vs recomputed";
    }
  }
}

TEST(LayerNormStatsGpu, SavedStatsBackwardIsDeterministic) {
  RUDNN_REQUIRE_CUDA();
  RUDNN_SEEDED_RNG(rng);
  for (int64_t h : {1024, 8192, 65536}) {
    SCOPED_TRACE(h);
    const Tensor x = on_gpu(random_tensor(rng, {300, h}, DType::bf16));
    const Tensor dy = on_gpu(random_tensor(rng, {300, h}, DType::bf16));
    const Tensor g = on_gpu(random_tensor(rng, {h}, DType::f32));
    const LayerNormStats s = layer_norm_with_stats(x, g, g, kEps).stats;
    const LayerNormGrads a = layer_norm_backward(dy, x, s, g, g),
                         b = layer_norm_backward(dy, x, s, g, g);
    EXPECT_TRUE(bit_equal(a.dgamma, b.dgamma));
    EXPECT_TRUE(bit_equal(a.dbeta, b.dbeta));
    EXPECT_TRUE(bit_equal(a.dx, b.dx));
  }
}

TEST(LayerNormStatsGpu, StridedStatsAndUnalignedRows) {
  RUDNN_REQUIRE_CUDA();
  RUDNN_SEEDED_RNG(rng);
  for (DType dt : kFloatTypes) {
    SCOPED_TRACE(dtype_name(dt));
    // Rows that start one element into a buffer: the scalar loop kernels.
    const Tensor base = on_gpu(random_tensor(rng, {12, 1025}, dt));
    const Tensor x = base.slice(1, 1, 1025), dy = on_gpu(random_tensor(rng, {12, 1024}, dt));
    const Tensor g = on_gpu(random_tensor(rng, {1024}, DType::f32));
    const LayerNormWithStats f = layer_norm_with_stats(x, g, g, kEps);
    EXPECT_TRUE(all_close(f.y, layer_norm(x.to_host(), g.to_host(), g.to_host(), kEps)));
    const Tensor wide = Tensor::zeros({12, 2}, DType::f32, kGpu);
    wide.slice(1, 0, 1).copy_from(f.stats.mean.view({12, 1}));
    wide.slice(1, 1, 2).copy_from(f.stats.rstd.view({12, 1}));
    const LayerNormStats strided{wide.as_strided({12}, {2}, 0), wide.as_strided({12}, {2}, 1)};
    const LayerNormGrads got = layer_norm_backward(dy, x, strided, g, g);
    const LayerNormGrads ref = layer_norm_backward(dy.to_host(), x.to_host(),
                                                   {f.stats.mean.to_host(), f.stats.rstd.to_host()},
                                                   g.to_host(), g.to_host());
    const std::vector<double> floors = gradient_floors(dy.to_host(), x.to_host(), g.to_host());
    EXPECT_TRUE(all_close(got.dx, ref.dx, tolerance(dt), floors[0]));
    EXPECT_TRUE(all_close(got.dgamma, ref.dgamma, tolerance(DType::f32), floors[1]));
    EXPECT_TRUE(all_close(got.dbeta, ref.dbeta, tolerance(DType::f32), floors[2]));
  }
}

}  // namespace
}  // namespace rudnn::test
