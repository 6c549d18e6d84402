// The backward of the recurrence: the float64 reference against central finite differences
// of a random linear loss of y and the final state, in both forms, dense and varlen; the
// public entry points against the reference; varlen gradients equal per-sequence ones.
#include <algorithm>
#include <cmath>
#include <tuple>
#include <functional>
#include <vector>

#include "gated_delta/reference.h"
#include "rudnn/gated_delta.h"
#include "support/test_support.h"

namespace rudnn::test {
namespace {

namespace ref = gdn::reference;
using Vec = std::vector<double>;

Vec uniform(Rng& rng, size_t n, float lo, float hi) {
  Vec out(n);
  for (auto& x : out) x = rng.uniform(lo, hi);
  return out;
}

double dot(const Vec& a, const Vec& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

// Checks grad against central differences of loss() over every element of x.
void expect_matches_finite_differences(const char* name, Vec& x, const Vec& grad,
                                       const std::function<double()>& loss) {
  SCOPED_TRACE(name);
  ASSERT_EQ(x.size(), grad.size());
  const Vec fd = central_differences(x.data(), int64_t(x.size()), loss);
  double worst = 0, scale = 1e-3;
  for (size_t i = 0; i < x.size(); ++i) {
    worst = std::max(worst, std::abs(fd[i] - grad[i]));
    scale = std::max(scale, std::abs(fd[i]));
  }
  EXPECT_LT(worst / scale, 1e-6) << name << ": worst |fd - grad| = " << worst;
}

struct BthdCase {
  ref::Dims d;
  ref::SeqLens cu;  // empty: dense
};

void check_bthd_gradients(Rng& rng, const BthdCase& c) {
  const ref::Dims& d = c.d;
  const int64_t entries = c.cu.empty() ? d.batch : 1;
  const size_t qk = size_t(entries * d.steps * d.key_heads * d.key_dim);
  const size_t vv = size_t(entries * d.steps * d.value_heads * d.value_dim);
  const size_t gg = size_t(entries * d.steps * d.value_heads);
  const size_t ss = size_t(d.batch * d.value_heads * d.value_dim * d.key_dim);
  Vec q = uniform(rng, qk, -1, 1), k = uniform(rng, qk, -0.6f, 0.6f), v = uniform(rng, vv, -1, 1),
      g = uniform(rng, gg, 0.5f, 1.0f), beta = uniform(rng, gg, 0.1f, 1.0f),
      s0 = uniform(rng, ss, -0.5f, 0.5f);
  const Vec wy = uniform(rng, vv, -1, 1), ws = uniform(rng, ss, -1, 1);
  auto loss = [&] {
    Vec s = s0, y;
    ref::gated_delta_bthd(d, q, k, v, g, beta, s, y, nullptr, c.cu);
    return dot(wy, y) + dot(ws, s);
  };
  const ref::Grads gr = ref::gated_delta_bthd_backward(d, q, k, v, g, beta, s0, wy, ws, c.cu);
  expect_matches_finite_differences("dq", q, gr.dq, loss);
  expect_matches_finite_differences("dk", k, gr.dk, loss);
  expect_matches_finite_differences("dv", v, gr.dv, loss);
  expect_matches_finite_differences("dg", g, gr.dgate, loss);
  expect_matches_finite_differences("dbeta", beta, gr.dbeta, loss);
  expect_matches_finite_differences("dstate", s0, gr.dstate, loss);
}

TEST(GatedDeltaBackwardReference, Spec003FormMatchesFiniteDifferences) {
  RUDNN_SEEDED_RNG(rng);
  // Two value heads per key head (dq, dk sum over them), Dk != Dv.
  check_bthd_gradients(rng, {{2, 4, 1, 2, 3, 2}, {}});
  check_bthd_gradients(rng, {{1, 3, 2, 2, 4, 5}, {}});
}

TEST(GatedDeltaBackwardReference, VarlenMatchesFiniteDifferences) {
  RUDNN_SEEDED_RNG(rng);
  check_bthd_gradients(rng, {{3, 6, 1, 2, 3, 2}, {0, 2, 2, 6}});
}

TEST(GatedDeltaBackwardReference, Spec000FormMatchesFiniteDifferences) {
  RUDNN_SEEDED_RNG(rng);
  for (bool varlen : {false, true}) {
    SCOPED_TRACE(varlen ? "varlen" : "dense");
    const int64_t H = 2, T = 4, K = 3, V = 2, N = 2;
    const ref::Dims d{N, T, H, H, K, V};
    const ref::SeqLens cu = varlen ? ref::SeqLens{0, 1, 4} : ref::SeqLens{};
    const int64_t entries = varlen ? 1 : N;
    const size_t qk = size_t(entries * H * T * K), vv = size_t(entries * H * T * V),
                 gg = size_t(entries * H * T), ss = size_t(N * H * K * V);
    Vec q = uniform(rng, qk, -1, 1), k = uniform(rng, qk, -0.6f, 0.6f),
        v = uniform(rng, vv, -1, 1), beta = uniform(rng, gg, 0.1f, 1.0f),
        ld = uniform(rng, gg, -0.7f, 0.0f), s0 = uniform(rng, ss, -0.5f, 0.5f);
    const double scale = 0.7;
    const Vec wy = uniform(rng, vv, -1, 1), ws = uniform(rng, ss, -1, 1);
    auto loss = [&] {
      Vec s = s0, y;
      ref::gated_delta_bhtd(d, q, k, v, beta, ld, scale, s, y, cu);
      return dot(wy, y) + dot(ws, s);
    };
    const ref::Grads gr =
        ref::gated_delta_bhtd_backward(d, q, k, v, beta, ld, scale, s0, wy, ws, cu);
    expect_matches_finite_differences("dquery", q, gr.dq, loss);
    expect_matches_finite_differences("dkey", k, gr.dk, loss);
    expect_matches_finite_differences("dvalue", v, gr.dv, loss);
    expect_matches_finite_differences("dbeta", beta, gr.dbeta, loss);
    expect_matches_finite_differences("dlog_decay", ld, gr.dgate, loss);
    expect_matches_finite_differences("dinitial_state", s0, gr.dstate, loss);
  }
}

// Without an upstream final-state gradient the state's gradient comes from y alone: a zero
// dy then gives zero gradients everywhere.
TEST(GatedDeltaBackwardReference, ZeroUpstreamGivesZeroGradients) {
  RUDNN_SEEDED_RNG(rng);
  const ref::Dims d{1, 3, 1, 1, 2, 2};
  const Vec q = uniform(rng, 6, -1, 1), k = q, v = uniform(rng, 6, -1, 1), g(3, 0.9),
            beta(3, 0.5), s0 = uniform(rng, 4, -1, 1), dy(6, 0.0);
  const ref::Grads gr = ref::gated_delta_bthd_backward(d, q, k, v, g, beta, s0, dy, {});
  for (const Vec* x : {&gr.dq, &gr.dk, &gr.dv, &gr.dgate, &gr.dbeta, &gr.dstate})
    for (double e : *x) EXPECT_EQ(e, 0.0);
}

// ---- The public entry points -------------------------------------------------------------

TEST(GatedDeltaBackwardApi, MatchesReferenceInEveryDtype) {
  RUDNN_SEEDED_RNG(rng);
  const int64_t B = 2, T = 3, Hk = 1, Hv = 2, Dk = 4, Dv = 3;
  for (DType dt : {DType::f32, DType::f16, DType::bf16, DType::f64}) {
    SCOPED_TRACE(dtype_name(dt));
    const Tensor q = random_tensor(rng, {B, T, Hk, Dk}, dt, 0.0f, 0.5f);
    const Tensor k = random_tensor(rng, {B, T, Hk, Dk}, dt, 0.0f, 0.4f);
    const Tensor v = random_tensor(rng, {B, T, Hv, Dv}, dt);
    const Tensor g = host_tensor(uniform(rng, B * T * Hv, 0.7f, 1.0f), {B, T, Hv}, dt);
    const Tensor beta = host_tensor(uniform(rng, B * T * Hv, 0.1f, 1.0f), {B, T, Hv}, dt);
    const Tensor state = random_tensor(rng, {B, Hv, Dv, Dk}, DType::f32, 0.0f, 0.3f);
    const Tensor dy = random_tensor(rng, {B, T, Hv, Dv}, dt);
    const Tensor ds = random_tensor(rng, {B, Hv, Dv, Dk}, DType::f32);
    const auto q_before = bytes_of(q), state_before = bytes_of(state), dy_before = bytes_of(dy);
    const GatedDeltaGrads got = gated_delta_backward(dy, ds, q, k, v, g, beta, state);
    EXPECT_EQ(bytes_of(q), q_before);
    EXPECT_EQ(bytes_of(state), state_before);
    EXPECT_EQ(bytes_of(dy), dy_before);
    const ref::Grads want = ref::gated_delta_bthd_backward(
        {B, T, Hk, Hv, Dk, Dv}, to_doubles(q), to_doubles(k), to_doubles(v), to_doubles(g),
        to_doubles(beta), to_doubles(state), to_doubles(dy), to_doubles(ds));
    EXPECT_TRUE(all_close(got.dq, host_tensor(want.dq, q.shape(), dt)));
    EXPECT_TRUE(all_close(got.dk, host_tensor(want.dk, k.shape(), dt)));
    EXPECT_TRUE(all_close(got.dv, host_tensor(want.dv, v.shape(), dt)));
    EXPECT_TRUE(all_close(got.dg, host_tensor(want.dgate, g.shape(), dt)));
    EXPECT_TRUE(all_close(got.dbeta, host_tensor(want.dbeta, beta.shape(), dt)));
    EXPECT_TRUE(all_close(got.dstate, host_tensor(want.dstate, state.shape(), DType::f32)));
    // No final-state gradient is a zero one.
    const GatedDeltaGrads no_ds = gated_delta_backward(dy, Tensor(), q, k, v, g, beta, state);
    const GatedDeltaGrads zero_ds = gated_delta_backward(
        dy, Tensor::zeros(state.shape(), DType::f32), q, k, v, g, beta, state);
    EXPECT_TRUE(bit_equal(no_ds.dq, zero_ds.dq));
    EXPECT_TRUE(bit_equal(no_ds.dstate, zero_ds.dstate));
  }
}

TEST(GatedDeltaBackwardApi, RuleMatchesReference) {
  RUDNN_SEEDED_RNG(rng);
  const int64_t B = 2, H = 2, T = 3, K = 4, V = 3;
  GatedDeltaInput in;
  in.query = random_tensor(rng, {B, H, T, K}, DType::bf16);
  in.key = random_tensor(rng, {B, H, T, K}, DType::bf16, 0.0f, 0.4f);
  in.value = random_tensor(rng, {B, H, T, V}, DType::bf16);
  in.beta = host_tensor(uniform(rng, B * H * T, 0.1f, 1.0f), {B, H, T}, DType::bf16);
  in.log_decay = host_tensor(uniform(rng, B * H * T, -0.5f, 0.0f), {B, H, T}, DType::f32);
  in.initial_state = random_tensor(rng, {B, H, K, V}, DType::f32, 0.0f, 0.3f);
  in.query_scale = 0.5f;
  const Tensor dout = random_tensor(rng, {B, H, T, V}, DType::bf16);
  const Tensor dfinal = random_tensor(rng, {B, H, K, V}, DType::f32);
  const GatedDeltaInputGrads got = gated_delta_rule_backward(dout, dfinal, in);
  const ref::Grads want = ref::gated_delta_bhtd_backward(
      {B, T, H, H, K, V}, to_doubles(in.query), to_doubles(in.key), to_doubles(in.value),
      to_doubles(in.beta), to_doubles(in.log_decay), in.query_scale, to_doubles(in.initial_state),
      to_doubles(dout), to_doubles(dfinal));
  EXPECT_TRUE(all_close(got.dquery, host_tensor(want.dq, in.query.shape(), DType::bf16)));
  EXPECT_TRUE(all_close(got.dkey, host_tensor(want.dk, in.key.shape(), DType::bf16)));
  EXPECT_TRUE(all_close(got.dvalue, host_tensor(want.dv, in.value.shape(), DType::bf16)));
  EXPECT_TRUE(all_close(got.dbeta, host_tensor(want.dbeta, in.beta.shape(), DType::bf16)));
  EXPECT_EQ(got.dlog_decay.dtype(), DType::f32);
  EXPECT_TRUE(all_close(got.dlog_decay, host_tensor(want.dgate, in.log_decay.shape(), DType::f32)));
  EXPECT_EQ(got.dinitial_state.dtype(), DType::f32);
  EXPECT_TRUE(all_close(got.dinitial_state,
                        host_tensor(want.dstate, in.initial_state.shape(), DType::f32)));
}

TEST(GatedDeltaBackwardApi, VarlenEqualsSeparateCalls) {
  RUDNN_SEEDED_RNG(rng);
  const std::vector<int32_t> cu{0, 2, 2, 5};
  const int64_t T = 5, N = 3, Hk = 1, Hv = 2, Dk = 4, Dv = 3;
  const DType dt = DType::f32;
  const Tensor q = random_tensor(rng, {1, T, Hk, Dk}, dt, 0.0f, 0.5f);
  const Tensor k = random_tensor(rng, {1, T, Hk, Dk}, dt, 0.0f, 0.4f);
  const Tensor v = random_tensor(rng, {1, T, Hv, Dv}, dt);
  const Tensor g = host_tensor(uniform(rng, T * Hv, 0.7f, 1.0f), {1, T, Hv}, dt);
  const Tensor beta = host_tensor(uniform(rng, T * Hv, 0.1f, 1.0f), {1, T, Hv}, dt);
  const Tensor state = random_tensor(rng, {N, Hv, Dv, Dk}, DType::f32, 0.0f, 0.3f);
  const Tensor dy = random_tensor(rng, {1, T, Hv, Dv}, dt);
  const Tensor ds = random_tensor(rng, {N, Hv, Dv, Dk}, DType::f32);
  const GatedDeltaGrads all =
      gated_delta_backward(dy, ds, q, k, v, g, beta, state, Tensor::from_host(cu, {4}));
  for (int64_t n = 0; n < N; ++n) {
    SCOPED_TRACE(::testing::Message() << "sequence " << n);
    auto part = [&](const Tensor& x) { return x.slice(1, cu[n], cu[n + 1]).contiguous(); };
    auto one = [&](const Tensor& x) { return x.slice(0, n, n + 1).contiguous(); };
    const GatedDeltaGrads alone = gated_delta_backward(part(dy), one(ds), part(q), part(k),
                                                       part(v), part(g), part(beta), one(state));
    EXPECT_TRUE(bit_equal(part(all.dq), alone.dq));
    EXPECT_TRUE(bit_equal(part(all.dk), alone.dk));
    EXPECT_TRUE(bit_equal(part(all.dv), alone.dv));
    EXPECT_TRUE(bit_equal(part(all.dg), alone.dg));
    EXPECT_TRUE(bit_equal(part(all.dbeta), alone.dbeta));
    EXPECT_TRUE(bit_equal(one(all.dstate), alone.dstate));
  }
}

TEST(GatedDeltaBackwardApi, ArgumentRules) {
  const Tensor q = Tensor::zeros({2, 3, 1, 4}, DType::f32);
  const Tensor v = Tensor::zeros({2, 3, 2, 3}, DType::f32);
  const Tensor g = Tensor::zeros({2, 3, 2}, DType::f32);
  const Tensor s = Tensor::zeros({2, 2, 3, 4}, DType::f32);
  EXPECT_NO_THROW(gated_delta_backward(v, s, q, q, v, g, g, s));
  EXPECT_TRUE(throws_error([&] { gated_delta_backward(Tensor(), s, q, q, v, g, g, s); },
                           ErrorCode::InvalidArgument, {"gated_delta_backward", "dy", "undefined"}));
  EXPECT_TRUE(throws_error([&] { gated_delta_backward(g, s, q, q, v, g, g, s); },
                           ErrorCode::ShapeMismatch, {"gated_delta_backward", "dy", "[B, T, Hv, Dv]"}));
  EXPECT_TRUE(throws_error(
      [&] { gated_delta_backward(Tensor::zeros({2, 3, 2, 3}, DType::i32), s, q, q, v, g, g, s); },
      ErrorCode::DTypeMismatch, {"gated_delta_backward", "dy"}));
  EXPECT_TRUE(throws_error([&] { gated_delta_backward(v, v, q, q, v, g, g, s); },
                           ErrorCode::ShapeMismatch, {"gated_delta_backward", "dstate"}));
  EXPECT_TRUE(throws_error([&] { gated_delta_backward(v, s, q, q, v, g, g, v); },
                           ErrorCode::ShapeMismatch, {"gated_delta_backward", "state"}));
  EXPECT_TRUE(throws_error(
      [&] {
        gated_delta_backward(v, s, q, q, v, g, g, s,
                             Tensor::from_host(std::vector<int32_t>{0, 3, 3}, {3}));
      },
      ErrorCode::ShapeMismatch, {"gated_delta_backward", "B = 2", "B = 1"}));
  GatedDeltaInput in;
  in.query = in.key = Tensor::zeros({1, 2, 3, 4}, DType::f32);
  in.value = Tensor::zeros({1, 2, 3, 5}, DType::f32);
  in.beta = in.log_decay = Tensor::zeros({1, 2, 3}, DType::f32);
  in.initial_state = Tensor::zeros({1, 2, 4, 5}, DType::f32);
  EXPECT_NO_THROW(gated_delta_rule_backward(in.value, Tensor(), in));
  EXPECT_TRUE(throws_error([&] { gated_delta_rule_backward(in.key, Tensor(), in); },
                           ErrorCode::ShapeMismatch,
                           {"gated_delta_rule_backward", "doutput", "[B, H, T, V]"}));
  EXPECT_TRUE(throws_error([&] { gated_delta_rule_backward(in.value, in.value, in); },
                           ErrorCode::ShapeMismatch,
                           {"gated_delta_rule_backward", "dfinal_state"}));
  in.query_scale = std::nanf("");
  EXPECT_TRUE(throws_error([&] { gated_delta_rule_backward(in.value, Tensor(), in); },
                           ErrorCode::InvalidArgument,
                           {"gated_delta_rule_backward", "query_scale"}));
}

// ---- The GPU backward (skipped without a GPU) ----------------------------------------------

const Device kGpu = Device::cuda(0);

// FP32 state and sums of Dv * Dk products per step, over T steps: 1e-4 for the F32 outputs
// (the dtype's own tolerance for 16-bit ones).
double grad_tolerance(DType dt) { return std::max(tolerance(dt), 1e-4); }

struct GpuCase {
  int64_t B, T, Hk, Hv, Dk, Dv;
};

struct BthdGrads {
  Tensor q, k, v, g, beta, state, dy, ds;
};

BthdGrads random_bthd_grads(Rng& rng, const GpuCase& c, DType dt, DType state_dt) {
  BthdGrads a;
  a.q = random_tensor(rng, {c.B, c.T, c.Hk, c.Dk}, dt, 0.0f, 1.0f / std::sqrt(float(c.Dk)));
  a.k = random_tensor(rng, {c.B, c.T, c.Hk, c.Dk}, dt, 0.0f, 1.0f / std::sqrt(float(c.Dk)));
  a.v = random_tensor(rng, {c.B, c.T, c.Hv, c.Dv}, dt);
  a.g = host_tensor(uniform(rng, size_t(c.B * c.T * c.Hv), 0.8f, 1.0f), {c.B, c.T, c.Hv}, dt);
  a.beta = host_tensor(uniform(rng, size_t(c.B * c.T * c.Hv), 0.1f, 1.0f), {c.B, c.T, c.Hv}, dt);
  a.state = random_tensor(rng, {c.B, c.Hv, c.Dv, c.Dk}, state_dt, 0.0f, 0.1f);
  a.dy = random_tensor(rng, {c.B, c.T, c.Hv, c.Dv}, dt);
  a.ds = random_tensor(rng, {c.B, c.Hv, c.Dv, c.Dk}, DType::f32, 0.0f, 0.1f);
  return a;
}

void expect_grads_close(const GatedDeltaGrads& got, const ref::Grads& want, const BthdGrads& a) {
  auto close = [](const char* name, const Tensor& t, const Vec& w, const Tensor& like) {
    SCOPED_TRACE(name);
    EXPECT_TRUE(all_close(t.to_host(), host_tensor(w, like.shape(), like.dtype()),
                          grad_tolerance(like.dtype())));
  };
  close("dq", got.dq, want.dq, a.q);
  close("dk", got.dk, want.dk, a.k);
  close("dv", got.dv, want.dv, a.v);
  close("dg", got.dg, want.dgate, a.g);
  close("dbeta", got.dbeta, want.dbeta, a.beta);
  close("dstate", got.dstate, want.dstate, a.state);
}

TEST(GatedDeltaBackwardGpu, MatchesReference) {
  RUDNN_REQUIRE_CUDA();
  RUDNN_SEEDED_RNG(rng);
  PoisonScope poison(true);
  // T across chunk boundaries (32), slabs of 32 rows (Dv 40, 70), Dk not a multiple of 32.
  for (const GpuCase c : {GpuCase{2, 5, 2, 4, 128, 40}, GpuCase{1, 70, 1, 2, 64, 32},
                          GpuCase{1, 33, 2, 2, 20, 70}, GpuCase{2, 3, 1, 1, 256, 8},
                          GpuCase{1, 0, 1, 2, 32, 8}}) {
    for (DType dt : {DType::f32, DType::bf16}) {
      for (bool with_ds : {true, false}) {
        SCOPED_TRACE(::testing::Message()
                     << dtype_name(dt) << " B" << c.B << " T" << c.T << " Hk" << c.Hk << " Hv"
                     << c.Hv << " Dk" << c.Dk << " Dv" << c.Dv << (with_ds ? " dstate" : ""));
        const BthdGrads a = random_bthd_grads(rng, c, dt, DType::f32);
        const Tensor ds = with_ds ? a.ds : Tensor();
        const GatedDeltaGrads got = gated_delta_backward(
            a.dy.to(kGpu), with_ds ? ds.to(kGpu) : Tensor(), a.q.to(kGpu), a.k.to(kGpu),
            a.v.to(kGpu), a.g.to(kGpu), a.beta.to(kGpu), a.state.to(kGpu));
        const ref::Grads want = ref::gated_delta_bthd_backward(
            {c.B, c.T, c.Hk, c.Hv, c.Dk, c.Dv}, to_doubles(a.q), to_doubles(a.k),
            to_doubles(a.v), to_doubles(a.g), to_doubles(a.beta), to_doubles(a.state),
            to_doubles(a.dy), with_ds ? to_doubles(ds) : Vec{});
        expect_grads_close(got, want, a);
      }
    }
  }
}

TEST(GatedDeltaBackwardGpu, DeterministicAndVarlenEqualsSeparateCalls) {
  RUDNN_REQUIRE_CUDA();
  RUDNN_SEEDED_RNG(rng);
  const std::vector<int32_t> cu{0, 40, 40, 41, 75};
  const GpuCase c{1, 75, 2, 4, 128, 48};
  const int64_t N = 4;
  BthdGrads a = random_bthd_grads(rng, c, DType::bf16, DType::f32);
  a.state = random_tensor(rng, {N, c.Hv, c.Dv, c.Dk}, DType::f32, 0.0f, 0.1f);
  a.ds = random_tensor(rng, {N, c.Hv, c.Dv, c.Dk}, DType::f32, 0.0f, 0.1f);
  auto run = [&] {
    return gated_delta_backward(a.dy.to(kGpu), a.ds.to(kGpu), a.q.to(kGpu), a.k.to(kGpu),
                                a.v.to(kGpu), a.g.to(kGpu), a.beta.to(kGpu), a.state.to(kGpu),
                                Tensor::from_host(cu, {N + 1}).to(kGpu));
  };
  const GatedDeltaGrads one = run(), two = run();
  for (auto [name, x, y] : {std::tuple{"dq", &one.dq, &two.dq}, std::tuple{"dk", &one.dk, &two.dk},
                            std::tuple{"dg", &one.dg, &two.dg},
                            std::tuple{"dstate", &one.dstate, &two.dstate}}) {
    SCOPED_TRACE(name);
    EXPECT_TRUE(bit_equal(x->to_host(), y->to_host()));
  }
  const ref::Grads want = ref::gated_delta_bthd_backward(
      {N, c.T, c.Hk, c.Hv, c.Dk, c.Dv}, to_doubles(a.q), to_doubles(a.k), to_doubles(a.v),
      to_doubles(a.g), to_doubles(a.beta), to_doubles(a.state), to_doubles(a.dy),
      to_doubles(a.ds), ref::SeqLens(cu.begin(), cu.end()));
  expect_grads_close(one, want, a);
  for (int64_t n = 0; n < N; ++n) {
    SCOPED_TRACE(::testing::Message() << "sequence " << n << " steps [" << cu[n] << ", "
                                      << cu[n + 1] << ")");
    auto part = [&](const Tensor& x) {
      return x.slice(1, cu[n], cu[n + 1]).contiguous().to(kGpu);
    };
    auto own = [&](const Tensor& x) { return x.slice(0, n, n + 1).contiguous(); };
    const GatedDeltaGrads alone =
        gated_delta_backward(part(a.dy), own(a.ds).to(kGpu), part(a.q), part(a.k), part(a.v),
                             part(a.g), part(a.beta), own(a.state).to(kGpu));
    auto host_part = [&](const Tensor& x) {
      return x.to_host().slice(1, cu[n], cu[n + 1]).contiguous();
    };
    EXPECT_TRUE(bit_equal(host_part(one.dq), alone.dq.to_host()));
    EXPECT_TRUE(bit_equal(host_part(one.dk), alone.dk.to_host()));
    EXPECT_TRUE(bit_equal(host_part(one.dv), alone.dv.to_host()));
    EXPECT_TRUE(bit_equal(host_part(one.dg), alone.dg.to_host()));
    EXPECT_TRUE(bit_equal(host_part(one.dbeta), alone.dbeta.to_host()));
    EXPECT_TRUE(bit_equal(own(one.dstate.to_host()), alone.dstate.to_host()));
  }
}

TEST(GatedDeltaBackwardGpu, RuleMatchesReference) {
  RUDNN_REQUIRE_CUDA();
  RUDNN_SEEDED_RNG(rng);
  PoisonScope poison(true);
  for (DType dt : {DType::f32, DType::f16, DType::bf16}) {
    SCOPED_TRACE(::testing::Message() << dtype_name(dt) << " B2 H3 T37 K128 V96");
    const int64_t B = 2, H = 3, T = 37, K = 128, V = 96;
    GatedDeltaInput in;
    in.query = random_tensor(rng, {B, H, T, K}, dt);
    in.key = random_tensor(rng, {B, H, T, K}, dt, 0.0f, 0.08f);
    in.value = random_tensor(rng, {B, H, T, V}, dt);
    in.beta = host_tensor(uniform(rng, B * H * T, 0.1f, 1.0f), {B, H, T}, dt);
    in.log_decay = host_tensor(uniform(rng, B * H * T, -0.3f, 0.0f), {B, H, T}, DType::f32);
    in.initial_state = random_tensor(rng, {B, H, K, V}, DType::f32, 0.0f, 0.1f);
    in.query_scale = 0.088f;
    const Tensor dout = random_tensor(rng, {B, H, T, V}, dt);
    const Tensor dfinal = random_tensor(rng, {B, H, K, V}, DType::f32, 0.0f, 0.1f);
    GatedDeltaInput dev = in;
    for (Tensor* t :
         {&dev.query, &dev.key, &dev.value, &dev.beta, &dev.log_decay, &dev.initial_state}) {
      *t = t->to(kGpu);
    }
    const GatedDeltaInputGrads got =
        gated_delta_rule_backward(dout.to(kGpu), dfinal.to(kGpu), dev);
    const ref::Grads want = ref::gated_delta_bhtd_backward(
        {B, T, H, H, K, V}, to_doubles(in.query), to_doubles(in.key), to_doubles(in.value),
        to_doubles(in.beta), to_doubles(in.log_decay), in.query_scale,
        to_doubles(in.initial_state), to_doubles(dout), to_doubles(dfinal));
    auto close = [&](const char* name, const Tensor& t, const Vec& w, const Tensor& like) {
      SCOPED_TRACE(name);
      EXPECT_TRUE(all_close(t.to_host(), host_tensor(w, like.shape(), t.dtype()),
                            grad_tolerance(t.dtype())));
    };
    close("dquery", got.dquery, want.dq, in.query);
    close("dkey", got.dkey, want.dk, in.key);
    close("dvalue", got.dvalue, want.dv, in.value);
    close("dbeta", got.dbeta, want.dbeta, in.beta);
    close("dlog_decay", got.dlog_decay, want.dgate, in.log_decay);
    close("dinitial_state", got.dinitial_state, want.dstate, in.initial_state);
    EXPECT_TRUE(bit_equal(dev.initial_state.to_host(), in.initial_state));
  }
}

}  // namespace
}  // namespace rudnn::test
