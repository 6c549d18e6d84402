// The transformer family on the CPU (the reference backend): rope on tiny inputs computed by
// hand (halves and interleaved pairs, base and freqs, offsets, per-batch offsets, position
// ids), its backward as the inverse and the adjoint, the frequency helpers, SwiGLU/GeGLU
// against known values and their backward passes against finite differences, layouts, and
// inputs left unchanged. These run everywhere, CI included.
#include <cmath>
#include <numbers>

#include "support/test_support.h"

namespace rudnn::test {
namespace {

Tensor f64(const std::vector<double>& v, const Shape& shape) {
  return host_tensor(v, shape, DType::f64);
}

RopeOptions base_options(int64_t dims, float base = 10000.0f) {
  RopeOptions o;
  o.dims = dims;
  o.base = base;
  return o;
}

// One row [1, 2, 3, 4] at position p with θ = (1, 0.01) (dims 4, base 10000): the rotation
// of pairs (0, 2), (1, 3) (halves) or (0, 1), (2, 3) (interleaved) by p·θ.
std::vector<double> rotated_row(double p, bool traditional, double scale = 1.0) {
  const double a0 = p * scale * 1.0, a1 = p * scale * 0.01;
  const double c0 = std::cos(a0), s0 = std::sin(a0), c1 = std::cos(a1), s1 = std::sin(a1);
  if (traditional) return {1 * c0 - 2 * s0, 1 * s0 + 2 * c0, 3 * c1 - 4 * s1, 3 * s1 + 4 * c1};
  return {1 * c0 - 3 * s0, 2 * c1 - 4 * s1, 1 * s0 + 3 * c0, 2 * s1 + 4 * c1};
}

void expect_near_all(const std::vector<double>& got, const std::vector<double>& want, double tol) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], tol) << "element " << i;
}

TEST(TransformerReference, RopeByHandHalvesAndInterleaved) {
  // x [B=1, T=3, D=4], every row [1, 2, 3, 4]: positions 0, 1, 2.
  const Tensor x = f64({1, 2, 3, 4, 1, 2, 3, 4, 1, 2, 3, 4}, {1, 3, 4});
  for (bool traditional : {false, true}) {
    SCOPED_TRACE(traditional ? "interleaved" : "halves");
    RopeOptions o = base_options(4);
    o.traditional = traditional;
    const Tensor y = rope(x, o);
    EXPECT_EQ(y.dtype(), DType::f64);
    EXPECT_EQ(y.shape(), x.shape());
    std::vector<double> want;
    for (int t = 0; t < 3; ++t) {
      const auto row = rotated_row(t, traditional);
      want.insert(want.end(), row.begin(), row.end());
    }
    expect_near_all(to_doubles(y), want, 1e-12);
    // Offset 5 and scale 0.5: positions (5 + t) * 0.5.
    o.offset = 5;
    o.scale = 0.5f;
    want.clear();
    for (int t = 0; t < 3; ++t) {
      const auto row = rotated_row(5 + t, traditional, 0.5);
      want.insert(want.end(), row.begin(), row.end());
    }
    expect_near_all(to_doubles(rope(x, o)), want, 1e-12);
  }
  // Position 0 leaves x as it is.
  EXPECT_EQ(to_doubles(rope(x.slice(1, 0, 1), base_options(4))), (std::vector<double>{1, 2, 3, 4}));
}

TEST(TransformerReference, RopeFreqsEqualTheBaseTheyStandFor) {
  // θ_j = 1 / freqs[j]: freqs = (1, 100) is base 10000 at dims 4.
  const Tensor x = f64({1, 2, 3, 4, 1, 2, 3, 4}, {1, 2, 4});
  for (bool traditional : {false, true}) {
    RopeOptions o;
    o.dims = 4;
    o.traditional = traditional;
    o.freqs = host_tensor({1, 100}, {2}, DType::f32);
    o.offset = 3;
    const auto got = to_doubles(rope(x, o));
    std::vector<double> want = rotated_row(3, traditional);
    const auto second = rotated_row(4, traditional);
    want.insert(want.end(), second.begin(), second.end());
    expect_near_all(got, want, 1e-12);
    RopeOptions b = base_options(4);
    b.traditional = traditional;
    b.offset = 3;
    expect_near_all(got, to_doubles(rope(x, b)), 1e-12);
  }
}

TEST(TransformerReference, RopeCopiesFeaturesPastDimsAndSharesPositionsOverHeads) {
  // x [B=2, H=3, T=2, D=6], dims 4: features 4 and 5 are copied; every head of (b, t)
  // rotates the same way.
  RUDNN_SEEDED_RNG(rng);
  const Tensor x = random_tensor(rng, {2, 3, 2, 6}, DType::f64);
  const RopeOptions o = base_options(4);
  const auto y = to_doubles(rope(x, o));
  const auto v = to_doubles(x);
  for (int64_t row = 0; row < 12; ++row) {
    EXPECT_EQ(y[row * 6 + 4], v[row * 6 + 4]);
    EXPECT_EQ(y[row * 6 + 5], v[row * 6 + 5]);
    // The rotated part equals the 3-d op on that one row at its position t = row % 2.
    const Tensor one = f64({v[row * 6], v[row * 6 + 1], v[row * 6 + 2], v[row * 6 + 3]}, {1, 1, 4});
    RopeOptions at = o;
    at.offset = row % 2;
    const auto want = to_doubles(rope(one, at));
    for (int c = 0; c < 4; ++c) EXPECT_NEAR(y[row * 6 + c], want[c], 1e-12) << "row " << row;
  }
}

TEST(TransformerReference, RopePerBatchOffsetsAndPositionIds) {
  RUDNN_SEEDED_RNG(rng);
  const Tensor x = random_tensor(rng, {3, 2, 5, 8}, DType::f64);  // [B, H, T, D]
  RopeOptions o = base_options(8);
  o.traditional = true;
  const std::vector<double> starts = {0, 7, 100};
  for (DType it : {DType::i32, DType::i64}) {
    RopeOptions per_batch = o;
    per_batch.offsets = host_tensor(starts, {3}, it);
    const Tensor y = rope(x, per_batch);
    // positions [B, T] = starts[b] + t, and the scalar offset per batch entry, agree.
    std::vector<double> ids;
    for (int b = 0; b < 3; ++b)
      for (int t = 0; t < 5; ++t) ids.push_back(starts[b] + t);
    RopeOptions by_id = o;
    by_id.positions = host_tensor(ids, {3, 5}, it);
    EXPECT_TRUE(all_close(rope(x, by_id), y, 1e-14));
    for (int b = 0; b < 3; ++b) {
      RopeOptions single = o;
      single.offset = static_cast<int64_t>(starts[b]);
      EXPECT_TRUE(all_close(y.slice(0, b, b + 1), rope(x.slice(0, b, b + 1), single), 1e-14))
          << "batch " << b;
    }
    // positions [T] apply to every batch entry.
    RopeOptions shared = o;
    shared.positions = host_tensor({4, 4, 9, 0, 2}, {5}, it);
    const Tensor ys = rope(x, shared);
    for (int b = 0; b < 3; ++b) {
      const double pos[] = {4, 4, 9, 0, 2};
      for (int t = 0; t < 5; ++t) {
        RopeOptions at = o;
        at.offset = static_cast<int64_t>(pos[t]);
        const Tensor row = x.slice(0, b, b + 1).slice(1, 1, 2).slice(2, t, t + 1);
        EXPECT_TRUE(all_close(ys.slice(0, b, b + 1).slice(1, 1, 2).slice(2, t, t + 1),
                              rope(row, at), 1e-14));
      }
    }
  }
}

TEST(TransformerReference, RopeBackwardIsTheInverseAndTheAdjoint) {
  RUDNN_SEEDED_RNG(rng);
  for (bool traditional : {false, true}) {
    const Tensor x = random_tensor(rng, {2, 3, 7, 10}, DType::f64);
    RopeOptions o = base_options(8, 500000.0f);
    o.traditional = traditional;
    o.offset = 1000;
    o.scale = 0.25f;
    EXPECT_TRUE(all_close(rope_backward(rope(x, o), o), x, 1e-13));
    EXPECT_TRUE(all_close(rope(rope_backward(x, o), o), x, 1e-13));
    // <rope(x), dy> == <x, rope_backward(dy)>.
    const Tensor dy = random_tensor(rng, x.shape(), DType::f64);
    const auto y = to_doubles(rope(x, o)), g = to_doubles(rope_backward(dy, o));
    const auto xv = to_doubles(x), dv = to_doubles(dy);
    double lhs = 0, rhs = 0;
    for (size_t i = 0; i < y.size(); ++i) {
      lhs += y[i] * dv[i];
      rhs += xv[i] * g[i];
    }
    EXPECT_NEAR(lhs, rhs, 1e-10 * (std::fabs(lhs) + 1));
    // Central differences of <rope(x), dy> in a few coordinates.
    for (int k = 0; k < 10; ++k) {
      const int64_t i = rng.integer(0, x.numel() - 1);
      auto plus = xv, minus = xv;
      const double h = 1e-4;
      plus[i] += h;
      minus[i] -= h;
      const auto yp = to_doubles(rope(f64(plus, x.shape()), o)),
                 ym = to_doubles(rope(f64(minus, x.shape()), o));
      double fp = 0, fm = 0;
      for (size_t e = 0; e < yp.size(); ++e) {
        fp += yp[e] * dv[e];
        fm += ym[e] * dv[e];
      }
      EXPECT_NEAR((fp - fm) / (2 * h), g[i], 1e-7) << "element " << i;
    }
  }
}

TEST(TransformerReference, RopeRoundsOnceToTheDtype) {
  RUDNN_SEEDED_RNG(rng);
  for (DType dt : {DType::f32, DType::f16, DType::bf16}) {
    const Tensor x = random_tensor(rng, {2, 4, 16}, dt);
    const RopeOptions o = base_options(12);
    const Tensor y = rope(x, o);
    EXPECT_EQ(y.dtype(), dt);
    // The float64 result of the same (exactly converted) values, rounded to dt.
    const Tensor exact = rope(host_tensor(to_doubles(x), x.shape(), DType::f64), o);
    EXPECT_TRUE(bit_equal(y, host_tensor(to_doubles(exact), x.shape(), dt))) << dtype_name(dt);
  }
}

TEST(TransformerReference, RopeTakesAnyLayoutAndWritesStridedOutputs) {
  RUDNN_SEEDED_RNG(rng);
  // [B, T, H, D] seen as [B, H, T, D] through a transpose (read in place), and a 5-d x whose
  // middle axes do not collapse (copied first).
  const Tensor bthd = random_tensor(rng, {2, 5, 3, 8}, DType::f32);
  const Tensor x = bthd.transpose(1, 2);
  RopeOptions o = base_options(6);
  o.offset = 2;
  const Tensor want = rope(x.contiguous(), o);
  EXPECT_TRUE(bit_equal(rope(x, o), want));
  const Tensor five = random_tensor(rng, {2, 3, 4, 5, 8}, DType::f32).transpose(1, 2);
  EXPECT_TRUE(bit_equal(rope(five, o), rope(five.contiguous(), o)));
  // Output: a [B, T, H, D] buffer written through its transposed view.
  const Tensor out = Tensor::full({2, 5, 3, 8}, -7.0, DType::f32);
  rope_into(out.transpose(1, 2), x, o);
  EXPECT_TRUE(bit_equal(out.transpose(1, 2).contiguous(), want));
  // The packed recipe: tokens [total, H, D] with positions [total].
  const Tensor tokens = random_tensor(rng, {6, 2, 8}, DType::f32);
  const Tensor ids = host_tensor({0, 1, 2, 0, 1, 5}, {6}, DType::i32);
  RopeOptions packed = base_options(8);
  packed.positions = ids;
  const Tensor packed_out = Tensor::empty({6, 2, 8}, DType::f32);
  rope_into(packed_out.transpose(0, 1), tokens.transpose(0, 1), packed);
  const double pos[] = {0, 1, 2, 0, 1, 5};
  for (int i = 0; i < 6; ++i) {
    RopeOptions at = base_options(8);
    at.offset = static_cast<int64_t>(pos[i]);
    EXPECT_TRUE(bit_equal(packed_out.slice(0, i, i + 1),
                          rope(tokens.slice(0, i, i + 1).view({1, 2, 1, 8}), at).view({1, 2, 8})))
        << "token " << i;
  }
}

TEST(TransformerReference, RopeLeavesInputsUnchangedAndTakesZeroSizes) {
  RUDNN_SEEDED_RNG(rng);
  const Tensor x = random_tensor(rng, {2, 3, 4, 8}, DType::bf16);
  const Tensor offsets = host_tensor({3, 1}, {2}, DType::i64);
  RopeOptions o;
  o.dims = 8;
  o.freqs = random_tensor(rng, {4}, DType::f32, 5, 1);
  o.offsets = offsets;
  const auto before = bytes_of(x), fb = bytes_of(o.freqs), ob = bytes_of(offsets);
  (void)rope(x, o);
  (void)rope_backward(x, o);
  EXPECT_EQ(bytes_of(x), before);
  EXPECT_EQ(bytes_of(o.freqs), fb);
  EXPECT_EQ(bytes_of(offsets), ob);
  EXPECT_EQ(rope(Tensor::empty({0, 3, 8}, DType::f32), base_options(8)).shape(), (Shape{0, 3, 8}));
  EXPECT_EQ(rope(Tensor::empty({2, 0, 8}, DType::f32), base_options(8)).numel(), 0);
}

// ---- norm_rope
// ------------------------------------------------------------------------------------

TEST(TransformerReference, NormRopeIsTheComposition) {
  RUDNN_SEEDED_RNG(rng);
  for (DType dt : {DType::f32, DType::bf16, DType::f64}) {
    // A transposed [B, L, H, D] projection, read as [B, H, L, D].
    const Tensor x = random_tensor(rng, {2, 5, 3, 16}, dt).transpose(1, 2);
    const Tensor w = random_tensor(rng, {16}, DType::f32);
    RopeOptions o = base_options(16);
    o.offset = 4;
    const Tensor normed = rms_norm(x, w, 1e-6f);
    EXPECT_TRUE(bit_equal(norm_rope(x, RopeNorm{w, 1e-6f}, o), rope(normed, o))) << dtype_name(dt);
    EXPECT_TRUE(bit_equal(norm_rope(x, std::nullopt, o), rope(x, o))) << dtype_name(dt);
    const Tensor out = Tensor::empty({2, 3, 5, 16}, dt);
    norm_rope_into(out, x, RopeNorm{Tensor(), 1e-5f}, o);
    EXPECT_TRUE(bit_equal(out, rope(rms_norm(x, {}, 1e-5f), o))) << dtype_name(dt);
  }
}

TEST(TransformerReference, NormRopeWritesItsPositionsOfTheCache) {
  RUDNN_SEEDED_RNG(rng);
  const Tensor x = random_tensor(rng, {2, 3, 4, 8}, DType::bf16);  // [B, H, L, D]
  const Tensor w = random_tensor(rng, {8}, DType::bf16);
  const Tensor cache = random_tensor(rng, {2, 3, 10, 8}, DType::bf16);
  const Tensor kept = Tensor::empty(cache.shape(), DType::bf16);
  kept.copy_from(cache);
  RopeOptions o = base_options(8);
  o.traditional = true;
  o.offset = 5;
  const Tensor got = norm_rope(x, RopeNorm{w, 1e-6f}, o, cache);
  EXPECT_EQ(got.data(), cache.data());  // the cache itself, written in place
  EXPECT_TRUE(bit_equal(cache.slice(2, 5, 9).contiguous(), rope(rms_norm(x, w, 1e-6f), o)));
  EXPECT_TRUE(bit_equal(cache.slice(2, 0, 5).contiguous(), kept.slice(2, 0, 5).contiguous()));
  EXPECT_TRUE(bit_equal(cache.slice(2, 9, 10).contiguous(), kept.slice(2, 9, 10).contiguous()));
  // Exactly full: offset + L == C.
  o.offset = 6;
  (void)norm_rope(x, std::nullopt, o, cache);
  EXPECT_TRUE(bit_equal(cache.slice(2, 6, 10).contiguous(), rope(x, o)));
}

// ---- Frequency helpers
// ----------------------------------------------------------------------------

TEST(TransformerReference, Llama3FreqsFollowTheirFormula) {
  const int64_t dims = 128;
  const double base = 500000;
  const Llama3RopeScaling s;  // Llama 3.1: factor 8, low 1, high 4, L 8192
  const auto f = to_doubles(rope_llama3_freqs(dims, static_cast<float>(base), s));
  ASSERT_EQ(f.size(), 64u);
  int kept = 0, scaled = 0, smoothed = 0;
  for (int64_t j = 0; j < 64; ++j) {
    const double w = std::pow(base, -2.0 * j / dims), wavelength = 2 * std::numbers::pi / w;
    double want;
    if (wavelength < 8192.0 / 4) {
      want = 1 / w;
      ++kept;
    } else if (wavelength > 8192.0 / 1) {
      want = 8 / w;
      ++scaled;
    } else {
      const double smooth = (8192 / wavelength - 1) / (4 - 1);
      want = 1 / ((1 - smooth) * w / 8 + smooth * w);
      ++smoothed;
    }
    EXPECT_NEAR(f[j], want, 1e-6 * want) << "j " << j;
  }
  EXPECT_EQ(f[0], 1.0);  // the highest frequency is kept
  EXPECT_GT(kept, 0);
  EXPECT_GT(scaled, 0);
  EXPECT_GT(smoothed, 0);
  // Through rope: freqs of factor 1 everywhere are the plain base.
  const Tensor one = rope_llama3_freqs(8, 10000.0f, Llama3RopeScaling{1.0f, 1.0f, 4.0f, 8192});
  const auto v = to_doubles(one);
  for (int j = 0; j < 4; ++j) EXPECT_NEAR(v[j], std::pow(10000.0, 2.0 * j / 8), 1e-6 * v[j]);
}

TEST(TransformerReference, YarnFreqsRampBetweenExtrapolationAndInterpolation) {
  const int64_t dims = 128;
  const double base = 10000, factor = 4;
  YarnRopeScaling s;
  s.factor = 4.0f;
  s.original_max_position = 4096;
  const YarnFreqs y = rope_yarn_freqs(dims, static_cast<float>(base), s);
  const auto f = to_doubles(y.freqs);
  ASSERT_EQ(f.size(), 64u);
  // Correction range: floor(20.9) = 20 .. ceil(45.03) = 46.
  for (int64_t j = 0; j < 64; ++j) {
    const double w = std::pow(base, -2.0 * j / dims);
    const double ramp = std::clamp((j - 20.0) / (46.0 - 20.0), 0.0, 1.0);
    const double want = 1 / (w / factor * ramp + w * (1 - ramp));
    EXPECT_NEAR(f[j], want, 1e-6 * want) << "j " << j;
  }
  EXPECT_NEAR(y.attention_factor, 0.1 * std::log(4.0) + 1, 1e-6);
  // mscale and mscale_all_dim (DeepSeek): m(4, 1) / m(4, 1) = 1; an explicit factor wins.
  s.mscale = 1.0f;
  s.mscale_all_dim = 1.0f;
  EXPECT_FLOAT_EQ(rope_yarn_freqs(dims, 10000.0f, s).attention_factor, 1.0f);
  s.attention_factor = 0.75f;
  EXPECT_FLOAT_EQ(rope_yarn_freqs(dims, 10000.0f, s).attention_factor, 0.75f);
  // factor 1 changes nothing.
  const auto plain = to_doubles(rope_yarn_freqs(8, 10000.0f, YarnRopeScaling{}).freqs);
  for (int j = 0; j < 4; ++j)
    EXPECT_NEAR(plain[j], std::pow(10000.0, 2.0 * j / 8), 1e-6 * plain[j]);
}

// ---- Gated activations
// ------------------------------------------------------------------------------

double gelu_erf(double g) { return 0.5 * g * (1 + std::erf(g / std::sqrt(2.0))); }
double gelu_tanh(double g) {
  return 0.5 * g * (1 + std::tanh(std::sqrt(2 / std::numbers::pi) * (g + 0.044715 * g * g * g)));
}
double silu(double g) { return g / (1 + std::exp(-g)); }

TEST(TransformerReference, GatedActivationsKnownValues) {
  const std::vector<double> g = {-3, -1, 0, 0.5, 1, 4}, u = {2, -1, 5, 3, 2, 0.25};
  const Tensor gate = f64(g, {2, 3}), up = f64(u, {2, 3});
  const auto s = to_doubles(swiglu(gate, up));
  const auto e = to_doubles(geglu(gate, up));
  const auto t = to_doubles(geglu(gate, up, GeluApproximate::tanh));
  for (size_t i = 0; i < g.size(); ++i) {
    EXPECT_NEAR(s[i], silu(g[i]) * u[i], 1e-15);
    EXPECT_NEAR(e[i], gelu_erf(g[i]) * u[i], 1e-15);
    EXPECT_NEAR(t[i], gelu_tanh(g[i]) * u[i], 1e-15);
  }
  EXPECT_NEAR(s[4], 2 * 0.7310585786300049, 1e-15);  // silu(1) = sigmoid(1)
  EXPECT_NEAR(e[4], 2 * 0.8413447460685429, 1e-15);  // gelu(1) = Φ(1)
}

TEST(TransformerReference, OneTensorFormSplitsGateThenUp) {
  RUDNN_SEEDED_RNG(rng);
  for (DType dt : {DType::f32, DType::f16, DType::bf16, DType::f64}) {
    const Tensor gate = random_tensor(rng, {3, 2, 5}, dt), up = random_tensor(rng, {3, 2, 5}, dt);
    // x = [gate, up] along the last axis.
    Tensor x = Tensor::empty({3, 2, 10}, dt);
    x.slice(-1, 0, 5).copy_from(gate);
    x.slice(-1, 5, 10).copy_from(up);
    EXPECT_TRUE(bit_equal(swiglu(x), swiglu(gate, up)));
    EXPECT_TRUE(bit_equal(geglu(x, GeluApproximate::tanh), geglu(gate, up, GeluApproximate::tanh)));
    const Tensor dy = random_tensor(rng, {3, 2, 5}, dt);
    const Tensor dx = swiglu_backward(dy, x);
    const GluGrads g = swiglu_backward(dy, gate, up);
    EXPECT_EQ(dx.shape(), x.shape());
    EXPECT_TRUE(bit_equal(dx.slice(-1, 0, 5).contiguous(), g.dgate));
    EXPECT_TRUE(bit_equal(dx.slice(-1, 5, 10).contiguous(), g.dup));
    const Tensor dxe = geglu_backward(dy, x);
    const GluGrads ge = geglu_backward(dy, gate, up);
    EXPECT_TRUE(bit_equal(dxe.slice(-1, 0, 5).contiguous(), ge.dgate));
    EXPECT_TRUE(bit_equal(dxe.slice(-1, 5, 10).contiguous(), ge.dup));
  }
}

TEST(TransformerReference, GatedBackwardMatchesFiniteDifferences) {
  RUDNN_SEEDED_RNG(rng);
  const Shape shape{3, 7};
  const Tensor gate = random_tensor(rng, shape, DType::f64, 0, 2),
               up = random_tensor(rng, shape, DType::f64);
  const Tensor dy = random_tensor(rng, shape, DType::f64);
  const auto gv = to_doubles(gate), uv = to_doubles(up), dv = to_doubles(dy);
  struct Case {
    const char* name;
    std::function<Tensor(const Tensor&, const Tensor&)> fwd;
    std::function<GluGrads(const Tensor&, const Tensor&, const Tensor&)> bwd;
  };
  const Case cases[] = {
      {"swiglu", [](const Tensor& g, const Tensor& u) { return swiglu(g, u); },
       [](const Tensor& d, const Tensor& g, const Tensor& u) { return swiglu_backward(d, g, u); }},
      {"geglu", [](const Tensor& g, const Tensor& u) { return geglu(g, u); },
       [](const Tensor& d, const Tensor& g, const Tensor& u) { return geglu_backward(d, g, u); }},
      {"geglu tanh",
       [](const Tensor& g, const Tensor& u) { return geglu(g, u, GeluApproximate::tanh); },
       [](const Tensor& d, const Tensor& g, const Tensor& u) {
         return geglu_backward(d, g, u, GeluApproximate::tanh);
       }},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const GluGrads grads = c.bwd(dy, gate, up);
    const auto dg = to_doubles(grads.dgate), du = to_doubles(grads.dup);
    const auto loss = [&](const std::vector<double>& g, const std::vector<double>& u) {
      const auto y = to_doubles(c.fwd(f64(g, shape), f64(u, shape)));
      double s = 0;
      for (size_t i = 0; i < y.size(); ++i) s += y[i] * dv[i];
      return s;
    };
    const double h = 1e-5;
    for (size_t i = 0; i < gv.size(); ++i) {
      auto gp = gv, gm = gv, up_ = uv, um = uv;
      gp[i] += h;
      gm[i] -= h;
      up_[i] += h;
      um[i] -= h;
      EXPECT_NEAR((loss(gp, uv) - loss(gm, uv)) / (2 * h), dg[i], 1e-7) << "dgate " << i;
      EXPECT_NEAR((loss(gv, up_) - loss(gv, um)) / (2 * h), du[i], 1e-7) << "dup " << i;
    }
  }
}

TEST(TransformerReference, GatedActivationsTakeStridedInputsAndOutputs) {
  RUDNN_SEEDED_RNG(rng);
  const Tensor big = random_tensor(rng, {6, 24}, DType::bf16);
  const Tensor gate = big.slice(0, 0, 6, 2).slice(1, 0, 8);  // stepped rows: read in place
  const Tensor up =
      big.transpose(0, 1).slice(0, 0, 8).slice(1, 0, 3).transpose(0, 1);  // column-major: copied
  ASSERT_EQ(gate.shape(), up.shape());
  const Tensor want = swiglu(gate.contiguous(), up.contiguous());
  EXPECT_TRUE(bit_equal(swiglu(gate, up), want));
  const Tensor out = Tensor::full({3, 20}, 0.0, DType::bf16);
  swiglu_into(out.slice(1, 4, 12), gate, up);
  EXPECT_TRUE(bit_equal(out.slice(1, 4, 12).contiguous(), want));
  EXPECT_EQ(to_doubles(out.slice(1, 0, 4)),
            std::vector<double>(12, 0.0));  // nothing outside written
  // One-tensor form of a strided x, backward into a strided dx.
  const Tensor x = big.slice(1, 4, 20);
  const Tensor dy = random_tensor(rng, {6, 8}, DType::bf16);
  const Tensor dx = Tensor::full({6, 40}, 0.0, DType::bf16);
  geglu_backward_into(dx.slice(1, 8, 24), dy, x, GeluApproximate::tanh);
  EXPECT_TRUE(bit_equal(dx.slice(1, 8, 24).contiguous(),
                        geglu_backward(dy, x.contiguous(), GeluApproximate::tanh)));
}

TEST(TransformerReference, GatedActivationsLeaveInputsAndTakeZeroSizes) {
  RUDNN_SEEDED_RNG(rng);
  const Tensor x = random_tensor(rng, {4, 16}, DType::f16),
               dy = random_tensor(rng, {4, 8}, DType::f16);
  const auto xb = bytes_of(x), db = bytes_of(dy);
  (void)swiglu(x);
  (void)swiglu_backward(dy, x);
  (void)geglu_backward(dy, x.slice(1, 0, 8), x.slice(1, 8, 16));
  EXPECT_EQ(bytes_of(x), xb);
  EXPECT_EQ(bytes_of(dy), db);
  EXPECT_EQ(swiglu(Tensor::empty({0, 6}, DType::f32)).shape(), (Shape{0, 3}));
  EXPECT_EQ(swiglu(Tensor::empty({3, 0}, DType::f32)).shape(), (Shape{3, 0}));
  EXPECT_EQ(
      geglu_backward(Tensor::empty({0, 3}, DType::f32), Tensor::empty({0, 6}, DType::f32)).shape(),
      (Shape{0, 6}));
}

}  // namespace
}  // namespace rudnn::test
