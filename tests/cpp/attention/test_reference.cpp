// The attention family's CPU reference: known values worked by hand, the options against
// equivalent formulations (window = a boolean mask, ALiBi = a bias, an additive mask = a
// bias, GQA = replicated heads, the engine layout = the transposed view, varlen = one call
// per sequence), the edge rows (fully masked, no keys), and the backward against central
// finite differences in float64 for every option.
#include <cmath>
#include <limits>
#include <vector>

#include "support/test_support.h"

namespace rudnn::test {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

Tensor f64(const std::vector<double>& values, const Shape& shape) {
  return host_tensor(values, shape, DType::f64);
}

// A boolean host tensor (nonzero: true).
Tensor bool_tensor(const std::vector<double>& values, const Shape& shape) {
  std::vector<uint8_t> bytes;
  for (double v : values) bytes.push_back(v != 0.0 ? 1 : 0);
  return Tensor::from_host(bytes.data(), shape, DType::boolean);
}

double at(const Tensor& t, int64_t index) { return to_doubles(t)[static_cast<size_t>(index)]; }

TEST(AttentionReference, TwoKeysByHand) {
  // s = [0, log 3]: p = [1/4, 3/4], out = 4/4 + 3 * 8/4 = 7, lse = log 4.
  const Tensor q = f64({1.0}, {1, 1, 1, 1});
  const Tensor k = f64({0.0, std::log(3.0)}, {1, 1, 2, 1});
  const Tensor v = f64({4.0, 8.0}, {1, 1, 2, 1});
  const AttentionResult r = attention(q, k, v, AttentionOptions{}.set_scale(1.0f).set_return_lse());
  EXPECT_NEAR(at(r.out, 0), 7.0, 1e-6);
  EXPECT_NEAR(at(r.lse, 0), std::log(4.0), 1e-6);

  // A sink of logit log 4 joins the denominator: 1 + 3 + 4 = 8, out = 4/8 + 3 * 8/8.
  const Tensor sinks = f64({std::log(4.0)}, {1});
  const AttentionResult s =
      attention(q, k, v, AttentionOptions{}.set_scale(1.0f).set_sinks(sinks).set_return_lse());
  EXPECT_NEAR(at(s.out, 0), 3.5, 1e-6);
  EXPECT_NEAR(at(s.lse, 0), std::log(8.0), 1e-6);
}

TEST(AttentionReference, OnesAverageToOnes) {
  const Tensor q = Tensor::full({1, 4, 3, 64}, 1.0, DType::f32);
  const Tensor kv = Tensor::full({1, 2, 5, 64}, 1.0, DType::f32);
  const Tensor out = attention(q, kv, kv, AttentionOptions{}.set_causal().set_scale(0.125f)).out;
  EXPECT_EQ(out.shape(), (Shape{1, 4, 3, 64}));
  for (double x : to_doubles(out)) EXPECT_NEAR(x, 1.0, 1e-6);
}

TEST(AttentionReference, SoftcapByHand) {
  // x = 2 · 3 = 6 capped at 4: 4 tanh(1.5); against key 2's 0: p = e^x / (e^x + 1).
  const Tensor q = f64({2.0}, {1, 1, 1, 1});
  const Tensor k = f64({3.0, 0.0}, {1, 1, 2, 1});
  const Tensor v = f64({1.0, 0.0}, {1, 1, 2, 1});
  const Tensor out = attention(q, k, v, AttentionOptions{}.set_scale(1.0f).set_softcap(4.0f)).out;
  const double x = 4.0 * std::tanh(1.5);
  EXPECT_NEAR(at(out, 0), std::exp(x) / (std::exp(x) + 1.0), 1e-9);
}

TEST(AttentionReference, FullyMaskedRowsAreZerosWithLseMinusInfinity) {
  RUDNN_SEEDED_RNG(rng);
  // Causal with Lq > Lk: query i sees keys 0 ..= i - 2, so queries 0 and 1 see none.
  const Tensor q = random_tensor(rng, {1, 2, 4, 8}, DType::f64);
  const Tensor kv = random_tensor(rng, {1, 2, 2, 8}, DType::f64);
  const AttentionResult r = attention(q, kv, kv, AttentionOptions{}.set_causal().set_return_lse());
  const auto out = to_doubles(r.out), lse = to_doubles(r.lse);
  for (int h = 0; h < 2; ++h) {
    for (int i = 0; i < 4; ++i) {
      const double l = lse[h * 4 + i];
      if (i < 2) {
        EXPECT_EQ(l, -kInf);
        for (int d = 0; d < 8; ++d) EXPECT_EQ(out[(h * 4 + i) * 8 + d], 0.0);
      } else {
        EXPECT_TRUE(std::isfinite(l));
      }
    }
  }
  // A boolean mask that is all false, and no keys at all.
  const Tensor none = Tensor::zeros({1, 1, 1, 2}, DType::boolean);
  const AttentionResult m =
      attention(q, kv, kv, AttentionOptions{}.set_mask(none).set_return_lse());
  for (double x : to_doubles(m.out)) EXPECT_EQ(x, 0.0);
  for (double x : to_doubles(m.lse)) EXPECT_EQ(x, -kInf);
  const Tensor empty = Tensor::zeros({1, 2, 0, 8}, DType::f64);
  const AttentionResult e = attention(q, empty, empty, AttentionOptions{}.set_return_lse());
  for (double x : to_doubles(e.out)) EXPECT_EQ(x, 0.0);
  for (double x : to_doubles(e.lse)) EXPECT_EQ(x, -kInf);
  // With a sink, the row's lse is the sink.
  const Tensor sinks = f64({0.5, -1.0}, {2});
  const AttentionResult s =
      attention(q, empty, empty, AttentionOptions{}.set_sinks(sinks).set_return_lse());
  for (double x : to_doubles(s.out)) EXPECT_EQ(x, 0.0);
  const auto sl = to_doubles(s.lse);
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(sl[i], 0.5);
    EXPECT_EQ(sl[4 + i], -1.0);
  }
}

// A boolean [Lq, Lk] mask of what causal + window lets query i see.
Tensor window_mask(int64_t lq, int64_t lk, int64_t window) {
  std::vector<double> m(static_cast<size_t>(lq * lk));
  for (int64_t i = 0; i < lq; ++i) {
    for (int64_t j = 0; j < lk; ++j) {
      const int64_t pos = i + lk - lq;
      m[i * lk + j] = (j <= pos && j > pos - window) ? 1.0 : 0.0;
    }
  }
  return bool_tensor(m, {lq, lk});
}

TEST(AttentionReference, WindowEqualsItsBooleanMask) {
  RUDNN_SEEDED_RNG(rng);
  const Tensor q = random_tensor(rng, {2, 2, 5, 4}, DType::f64);
  const Tensor k = random_tensor(rng, {2, 2, 9, 4}, DType::f64);
  const Tensor v = random_tensor(rng, {2, 2, 9, 3}, DType::f64);
  const Tensor a = attention(q, k, v, AttentionOptions{}.set_causal().set_window(3)).out;
  const Tensor b = attention(q, k, v, AttentionOptions{}.set_mask(window_mask(5, 9, 3))).out;
  EXPECT_TRUE(all_close(a, b, 1e-12));
}

TEST(AttentionReference, AlibiEqualsItsBias) {
  RUDNN_SEEDED_RNG(rng);
  const int64_t hq = 4, lq = 3, lk = 6;
  const Tensor q = random_tensor(rng, {1, hq, lq, 4}, DType::f64);
  const Tensor k = random_tensor(rng, {1, 2, lk, 4}, DType::f64);
  const Tensor v = random_tensor(rng, {1, 2, lk, 4}, DType::f64);
  std::vector<double> slopes{0.5, 0.25, 0.125, 0.0625}, bias;
  for (int64_t h = 0; h < hq; ++h)
    for (int64_t i = 0; i < lq; ++i)
      for (int64_t j = 0; j < lk; ++j)
        bias.push_back(-slopes[h] * std::abs(static_cast<double>(i + lk - lq - j)));
  const Tensor a = attention(q, k, v, AttentionOptions{}.set_alibi_slopes(f64(slopes, {hq}))).out;
  const Tensor b = attention(q, k, v, AttentionOptions{}.set_bias(f64(bias, {hq, lq, lk}))).out;
  EXPECT_TRUE(all_close(a, b, 1e-12));
  // An additive float mask is the same as a bias.
  const Tensor c = attention(q, k, v, AttentionOptions{}.set_mask(f64(bias, {hq, lq, lk}))).out;
  EXPECT_TRUE(all_close(c, b, 1e-12));
}

TEST(AttentionReference, GroupedQueryHeadsEqualReplicatedKeys) {
  RUDNN_SEEDED_RNG(rng);
  const Tensor q = random_tensor(rng, {2, 6, 4, 5}, DType::f64);
  const Tensor k = random_tensor(rng, {2, 2, 7, 5}, DType::f64);
  const Tensor v = random_tensor(rng, {2, 2, 7, 3}, DType::f64);
  // Head h reads KV head h / 3.
  std::vector<double> kr, vr;
  const auto kd = to_doubles(k), vd = to_doubles(v);
  for (int b = 0; b < 2; ++b)
    for (int h = 0; h < 6; ++h) {
      const int hk = h / 3;
      for (int j = 0; j < 7; ++j) {
        for (int d = 0; d < 5; ++d) kr.push_back(kd[((b * 2 + hk) * 7 + j) * 5 + d]);
        for (int d = 0; d < 3; ++d) vr.push_back(vd[((b * 2 + hk) * 7 + j) * 3 + d]);
      }
    }
  const AttentionOptions o = AttentionOptions{}.set_causal();
  EXPECT_TRUE(all_close(attention(q, k, v, o).out,
                        attention(q, f64(kr, {2, 6, 7, 5}), f64(vr, {2, 6, 7, 3}), o).out, 1e-12));
}

TEST(AttentionReference, EngineLayoutEqualsTransposedView) {
  RUDNN_SEEDED_RNG(rng);
  // [B, L, H, D] buffers: as the bshd layout, and as their [B, H, L, D] views.
  const Tensor q = random_tensor(rng, {2, 5, 4, 6}, DType::f64);
  const Tensor k = random_tensor(rng, {2, 7, 2, 6}, DType::f64);
  const Tensor v = random_tensor(rng, {2, 7, 2, 3}, DType::f64);
  const AttentionResult a =
      attention(q, k, v, AttentionOptions{}.set_causal().set_layout(AttentionLayout::bshd));
  const AttentionResult b = attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                      AttentionOptions{}.set_causal());
  EXPECT_EQ(a.out.shape(), (Shape{2, 5, 4, 3}));
  EXPECT_TRUE(all_close(a.out.transpose(1, 2).contiguous(), b.out, 0.0));
}

TEST(AttentionReference, VarlenEqualsOneCallPerSequence) {
  RUDNN_SEEDED_RNG(rng);
  // Sequences of (Lq, Lk) = (3, 5), (0, 2), (1, 1), (4, 4).
  const std::vector<int32_t> cu_q{0, 3, 3, 4, 8}, cu_k{0, 5, 7, 8, 12};
  const int64_t hq = 4, hkv = 2, d = 5, dv = 3;
  const Tensor q = random_tensor(rng, {8, hq, d}, DType::f64);
  const Tensor k = random_tensor(rng, {12, hkv, d}, DType::f64);
  const Tensor v = random_tensor(rng, {12, hkv, dv}, DType::f64);
  const Tensor sinks = random_tensor(rng, {hq}, DType::f64);
  const Tensor cq = Tensor::from_host(cu_q, {5}), ck = Tensor::from_host(cu_k, {5});
  const AttentionOptions base = AttentionOptions{}.set_causal().set_window(3).set_sinks(sinks);
  AttentionOptions o = base;
  o.set_varlen(cq, ck, 4, 5).set_return_lse();
  const AttentionResult r = attention(q, k, v, o);
  EXPECT_EQ(r.out.shape(), (Shape{8, hq, dv}));
  EXPECT_EQ(r.lse.shape(), (Shape{hq, 8}));
  for (int b = 0; b < 4; ++b) {
    SCOPED_TRACE("sequence " + std::to_string(b));
    const Tensor qs = q.slice(0, cu_q[b], cu_q[b + 1]).contiguous();
    const Tensor ks = k.slice(0, cu_k[b], cu_k[b + 1]).contiguous();
    const Tensor vs = v.slice(0, cu_k[b], cu_k[b + 1]).contiguous();
    const int64_t lq = qs.size(0), lk = ks.size(0);
    AttentionOptions po = base;
    po.set_layout(AttentionLayout::bshd).set_return_lse();
    const AttentionResult one =
        attention(qs.view({1, lq, hq, d}), ks.view({1, lk, hkv, d}), vs.view({1, lk, hkv, dv}), po);
    EXPECT_TRUE(all_close(r.out.slice(0, cu_q[b], cu_q[b + 1]).contiguous(),
                          one.out.view({lq, hq, dv}), 0.0));
    EXPECT_TRUE(
        all_close(r.lse.slice(1, cu_q[b], cu_q[b + 1]).contiguous(), one.lse.view({hq, lq}), 0.0));
  }
}

// ---- Backward against finite differences ------------------------------------------------------

struct Case {
  std::string name;
  AttentionOptions options;
};

// sum(out · g) for the loss whose gradient attention_backward gives with dout = g.
double loss(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionOptions& o,
            const std::vector<double>& g) {
  const auto out = to_doubles(attention(q, k, v, o).out);
  double s = 0.0;
  for (size_t i = 0; i < out.size(); ++i) s += out[i] * g[i];
  return s;
}

// Central differences of the loss along every element of `t` (an F64 host tensor, one of
// the arguments or option tensors), compared with `grad`.
void expect_gradient(const char* name, const Tensor& t, const Tensor& grad,
                     const std::function<double()>& f) {
  SCOPED_TRACE(name);
  ASSERT_TRUE(grad.defined());
  ASSERT_EQ(grad.shape(), t.shape());
  const Tensor dense = t;  // contiguous by construction
  const auto analytic = to_doubles(grad);
  const auto numeric = central_differences(dense.data_as<double>(), t.numel(), f);
  for (size_t e = 0; e < numeric.size(); ++e)
    EXPECT_NEAR(analytic[e], numeric[e], 1e-6 * (1.0 + std::abs(numeric[e]))) << "element " << e;
}

TEST(AttentionReference, BackwardMatchesFiniteDifferences) {
  RUDNN_SEEDED_RNG(rng);
  const int64_t b = 2, hq = 4, hkv = 2, lq = 3, lk = 5, d = 4, dv = 3;
  const Tensor sinks = random_tensor(rng, {hq}, DType::f64);
  const Tensor bias = random_tensor(rng, {1, hq, lq, lk}, DType::f64);
  const Tensor slopes = f64({0.3, 0.2, 0.1, 0.05}, {hq});
  std::vector<double> mask_values;
  for (int i = 0; i < lq * lk; ++i) mask_values.push_back((i * 7) % 5 == 0 ? 0.0 : 1.0);
  const Tensor mask = bool_tensor(mask_values, {lq, lk});
  std::vector<Case> cases = {
      {"plain", AttentionOptions{}},
      {"causal", AttentionOptions{}.set_causal()},
      {"causal window 2", AttentionOptions{}.set_causal().set_window(2)},
      {"softcap", AttentionOptions{}.set_softcap(0.7f).set_scale(0.9f)},
      {"sinks", AttentionOptions{}.set_sinks(sinks)},
      {"bias", AttentionOptions{}.set_bias(bias, true)},
      {"alibi", AttentionOptions{}.set_alibi_slopes(slopes)},
      {"boolean mask", AttentionOptions{}.set_mask(mask)},
      {"everything", AttentionOptions{}
                         .set_causal()
                         .set_window(4)
                         .set_softcap(1.5f)
                         .set_sinks(sinks)
                         .set_bias(bias, true)
                         .set_alibi_slopes(slopes)},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const Tensor q = random_tensor(rng, {b, hq, lq, d}, DType::f64);
    const Tensor k = random_tensor(rng, {b, hkv, lk, d}, DType::f64);
    const Tensor v = random_tensor(rng, {b, hkv, lk, dv}, DType::f64);
    AttentionOptions o = c.options;
    o.set_return_lse();
    const AttentionResult fwd = attention(q, k, v, o);
    std::vector<double> g;
    for (int64_t e = 0; e < fwd.out.numel(); ++e) g.push_back(rng.normal());
    const Tensor dout = f64(g, fwd.out.shape());
    const AttentionGrads grads = attention_backward(dout, q, k, v, fwd.out, fwd.lse, o);
    auto f = [&] { return loss(q, k, v, o, g); };
    expect_gradient("dq", q, grads.dq, f);
    expect_gradient("dk", k, grads.dk, f);
    expect_gradient("dv", v, grads.dv, f);
    if (o.sinks.defined()) expect_gradient("dsinks", o.sinks, grads.dsinks, f);
    if (o.bias.defined()) expect_gradient("dbias", o.bias, grads.dbias, f);
  }
}

TEST(AttentionReference, VarlenBackwardEqualsOneCallPerSequence) {
  RUDNN_SEEDED_RNG(rng);
  const std::vector<int32_t> cu_q{0, 2, 2, 5}, cu_k{0, 3, 4, 8};
  const int64_t hq = 2, hkv = 1, d = 3, dv = 2;
  const Tensor q = random_tensor(rng, {5, hq, d}, DType::f64);
  const Tensor k = random_tensor(rng, {9, hkv, d}, DType::f64);  // row 8 is in no sequence
  const Tensor v = random_tensor(rng, {9, hkv, dv}, DType::f64);
  const Tensor dout = random_tensor(rng, {5, hq, dv}, DType::f64);
  AttentionOptions o = AttentionOptions{}.set_causal();
  o.set_varlen(Tensor::from_host(cu_q, {4}), Tensor::from_host(cu_k, {4}), 3, 4).set_return_lse();
  const AttentionResult fwd = attention(q, k, v, o);
  const AttentionGrads g = attention_backward(dout, q, k, v, fwd.out, fwd.lse, o);
  for (double x : to_doubles(g.dk.slice(0, 8, 9))) EXPECT_EQ(x, 0.0);
  for (double x : to_doubles(g.dv.slice(0, 8, 9))) EXPECT_EQ(x, 0.0);
  for (int b = 0; b < 3; ++b) {
    SCOPED_TRACE("sequence " + std::to_string(b));
    auto cut = [](const Tensor& t, int64_t begin, int64_t end, int64_t h, int64_t dim) {
      return t.slice(0, begin, end).contiguous().view({1, end - begin, h, dim});
    };
    AttentionOptions po = AttentionOptions{}.set_causal().set_layout(AttentionLayout::bshd);
    po.set_return_lse();
    const Tensor qs = cut(q, cu_q[b], cu_q[b + 1], hq, d),
                 ks = cut(k, cu_k[b], cu_k[b + 1], hkv, d),
                 vs = cut(v, cu_k[b], cu_k[b + 1], hkv, dv),
                 ds = cut(dout, cu_q[b], cu_q[b + 1], hq, dv);
    const AttentionResult f1 = attention(qs, ks, vs, po);
    const AttentionGrads g1 = attention_backward(ds, qs, ks, vs, f1.out, f1.lse, po);
    EXPECT_TRUE(all_close(cut(g.dq, cu_q[b], cu_q[b + 1], hq, d), g1.dq, 1e-12));
    EXPECT_TRUE(all_close(cut(g.dk, cu_k[b], cu_k[b + 1], hkv, d), g1.dk, 1e-12));
    EXPECT_TRUE(all_close(cut(g.dv, cu_k[b], cu_k[b + 1], hkv, dv), g1.dv, 1e-12));
  }
}

TEST(AttentionReference, LowPrecisionRoundsOnceFromTheFloat64Definition) {
  RUDNN_SEEDED_RNG(rng);
  for (DType dt : {DType::f32, DType::f16, DType::bf16}) {
    SCOPED_TRACE(dtype_name(dt));
    const Tensor q = random_tensor(rng, {1, 2, 3, 8}, dt), k = random_tensor(rng, {1, 2, 4, 8}, dt),
                 v = random_tensor(rng, {1, 2, 4, 8}, dt);
    const AttentionOptions o = AttentionOptions{}.set_causal().set_return_lse();
    const AttentionResult low = attention(q, k, v, o);
    // The same computation in float64 from the widened inputs, rounded through FP32.
    auto widen = [](const Tensor& t) { return host_tensor(to_doubles(t), t.shape(), DType::f64); };
    const AttentionResult ref = attention(widen(q), widen(k), widen(v), o);
    const auto a = to_doubles(low.out), e = to_doubles(ref.out);
    for (size_t i = 0; i < a.size(); ++i) {
      const double rounded = to_doubles(host_tensor({e[i]}, {1}, dt))[0];
      EXPECT_EQ(a[i], rounded) << "element " << i;
    }
    EXPECT_EQ(low.lse.dtype(), DType::f32);
  }
}

}  // namespace
}  // namespace rudnn::test
