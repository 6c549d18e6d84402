// gated_delta_steps_varlen: every step's state of packed sequences equals gated_delta_steps on
// each sequence alone, bit for bit; its last step equals gated_delta_varlen's final state; the
// offsets', shapes' and dtypes' rules; a GPU tensor is Unsupported after the checks.
#include <cmath>
#include <vector>

#include "rudnn/gated_delta.h"
#include "support/test_support.h"

namespace rudnn::test {
namespace {

struct Packed {
  Tensor q, k, v, g, beta, state;  // batch 1, T = lens' sum; state [N, Hv, Dv, Dk]
  std::vector<int32_t> cu;
};

Packed random_packed(Rng& rng, const std::vector<int32_t>& lens, int64_t Hk, int64_t Hv,
                     int64_t Dk, int64_t Dv, DType dt) {
  Packed p;
  p.cu.push_back(0);
  for (int32_t n : lens) p.cu.push_back(p.cu.back() + n);
  const int64_t T = p.cu.back(), N = int64_t(lens.size());
  p.q = random_tensor(rng, {1, T, Hk, Dk}, dt, 0.0f, 1.0f / std::sqrt(float(Dk)));
  p.k = random_tensor(rng, {1, T, Hk, Dk}, dt, 0.0f, 1.0f / std::sqrt(float(Dk)));
  p.v = random_tensor(rng, {1, T, Hv, Dv}, dt);
  std::vector<double> g(size_t(T * Hv)), beta(size_t(T * Hv));
  for (auto& x : g) x = rng.uniform(0.8f, 1.0f);
  for (auto& x : beta) x = rng.uniform(0.0f, 1.0f);
  p.g = host_tensor(g, {1, T, Hv}, dt);
  p.beta = host_tensor(beta, {1, T, Hv}, dt);
  p.state = random_tensor(rng, {N, Hv, Dv, Dk}, DType::f32, 0.0f, 0.1f);
  return p;
}

Tensor cu_tensor(const std::vector<int32_t>& cu) {
  return Tensor::from_host(cu, {int64_t(cu.size())});
}
Tensor seq(const Tensor& x, int64_t t0, int64_t t1) { return x.slice(1, t0, t1).contiguous(); }
Tensor entry(const Tensor& x, int64_t n) { return x.slice(0, n, n + 1).contiguous(); }
Tensor copy_of(const Tensor& t) { return host_tensor(to_doubles(t), t.shape(), t.dtype()); }

void expect_steps_equal_separate_calls(const std::vector<int32_t>& lens, DType dt, Rng& rng) {
  PoisonScope poison(true);
  const int64_t Hk = 1, Hv = 2, Dk = 5, Dv = 3;
  const Packed in = random_packed(rng, lens, Hk, Hv, Dk, Dv, dt);
  const Tensor q0 = copy_of(in.q), state0 = copy_of(in.state), v0 = copy_of(in.v);
  const Tensor cu = cu_tensor(in.cu);
  const GatedDeltaResult r =
      gated_delta_steps_varlen(in.q, in.k, in.v, in.g, in.beta, in.state, cu);
  const int64_t T = in.cu.back();
  ASSERT_EQ(r.y.shape(), (Shape{1, T, Hv, Dv}));
  ASSERT_EQ(r.state.shape(), (Shape{1, T, Hv, Dv, Dk}));
  EXPECT_EQ(r.y.dtype(), dt);
  EXPECT_EQ(r.state.dtype(), DType::f32);
  const GatedDeltaResult finals =
      gated_delta_varlen(in.q, in.k, in.v, in.g, in.beta, in.state, cu);
  EXPECT_TRUE(bit_equal(r.y, finals.y));
  for (size_t n = 0; n < lens.size(); ++n) {
    SCOPED_TRACE(::testing::Message() << "sequence " << n << " of length " << lens[n]);
    const int64_t t0 = in.cu[n], t1 = in.cu[n + 1];
    if (t1 == t0) continue;
    const GatedDeltaResult alone =
        gated_delta_steps(seq(in.q, t0, t1), seq(in.k, t0, t1), seq(in.v, t0, t1),
                          seq(in.g, t0, t1), seq(in.beta, t0, t1), entry(in.state, int64_t(n)));
    EXPECT_TRUE(bit_equal(seq(r.y, t0, t1), alone.y));
    EXPECT_TRUE(bit_equal(seq(r.state, t0, t1), alone.state));
    const Tensor last = r.state.slice(1, t1 - 1, t1).contiguous().view({1, Hv, Dv, Dk});
    EXPECT_TRUE(bit_equal(last, entry(finals.state, int64_t(n))));
  }
  // The _into form writes the same bits into poisoned outputs.
  const Tensor y_out = poisoned({1, T, Hv, Dv}, dt, Device::cpu());
  const Tensor s_out = poisoned({1, T, Hv, Dv, Dk}, DType::f32, Device::cpu());
  gated_delta_steps_varlen_into(y_out, s_out, in.q, in.k, in.v, in.g, in.beta, in.state, cu);
  EXPECT_TRUE(bit_equal(y_out, r.y));
  EXPECT_TRUE(bit_equal(s_out, r.state));
  EXPECT_TRUE(bit_equal(in.q, q0));
  EXPECT_TRUE(bit_equal(in.v, v0));
  EXPECT_TRUE(bit_equal(in.state, state0));
}

TEST(GatedDeltaStepsVarlen, EqualsSeparateCallsBitForBit) {
  RUDNN_SEEDED_RNG(rng);
  for (DType dt : {DType::f32, DType::bf16, DType::f64}) {
    SCOPED_TRACE(dtype_name(dt));
    expect_steps_equal_separate_calls({3, 0, 5, 1}, dt, rng);
  }
}

TEST(GatedDeltaStepsVarlen, EmptySequences) {
  RUDNN_SEEDED_RNG(rng);
  expect_steps_equal_separate_calls({0, 4, 0, 0, 2, 0}, DType::f32, rng);
  // Every sequence empty: T = 0, nothing to write.
  const Packed in = random_packed(rng, {0, 0}, 1, 2, 4, 3, DType::f32);
  const GatedDeltaResult r =
      gated_delta_steps_varlen(in.q, in.k, in.v, in.g, in.beta, in.state, cu_tensor(in.cu));
  EXPECT_EQ(r.y.shape(), (Shape{1, 0, 2, 3}));
  EXPECT_EQ(r.state.shape(), (Shape{1, 0, 2, 3, 4}));
}

TEST(GatedDeltaStepsVarlen, Errors) {
  const Tensor q = Tensor::zeros({1, 5, 1, 4}, DType::f32);
  const Tensor v = Tensor::zeros({1, 5, 2, 3}, DType::f32);
  const Tensor g = Tensor::zeros({1, 5, 2}, DType::f32);
  const Tensor state = Tensor::zeros({2, 2, 3, 4}, DType::f32);
  auto call = [&](const Tensor& cu) {
    return [&, cu] { gated_delta_steps_varlen(q, q, v, g, g, state, cu); };
  };
  const char* op = "gated_delta_steps_varlen";
  EXPECT_NO_THROW(call(cu_tensor({0, 2, 5}))());
  EXPECT_TRUE(throws_error(call(cu_tensor({1, 2, 5})), ErrorCode::InvalidArgument,
                           {op, "cu_seqlens[0] = 1", "expected 0"}));
  EXPECT_TRUE(throws_error(call(cu_tensor({0, 4, 3})), ErrorCode::InvalidArgument,
                           {op, "cu_seqlens[2] = 3", "non-decreasing"}));
  EXPECT_TRUE(throws_error(call(cu_tensor({0, 2, 4})), ErrorCode::InvalidArgument,
                           {op, "cu_seqlens[2] = 4", "T = 5"}));
  EXPECT_TRUE(throws_error(call(cu_tensor({0, 5})), ErrorCode::ShapeMismatch,
                           {op, "cu_seqlens", "[N + 1]"}));
  EXPECT_TRUE(throws_error(call(Tensor::from_host(std::vector<int64_t>{0, 2, 5}, {3})),
                           ErrorCode::DTypeMismatch, {op, "cu_seqlens", "i32"}));
  EXPECT_TRUE(throws_error(call(Tensor()), ErrorCode::InvalidArgument,
                           {op, "cu_seqlens", "undefined"}));
  const Tensor cu = cu_tensor({0, 2, 5});
  const Tensor q2 = Tensor::zeros({2, 5, 1, 4}, DType::f32);
  const Tensor v2 = Tensor::zeros({2, 5, 2, 3}, DType::f32);
  const Tensor g2 = Tensor::zeros({2, 5, 2}, DType::f32);
  EXPECT_TRUE(throws_error([&] { gated_delta_steps_varlen(q2, q2, v2, g2, g2, state, cu); },
                           ErrorCode::ShapeMismatch, {op, "B = 2", "B = 1"}));
  const Tensor bad_state = Tensor::zeros({2, 2, 3, 5}, DType::f32);
  EXPECT_TRUE(throws_error([&] { gated_delta_steps_varlen(q, q, v, g, g, bad_state, cu); },
                           ErrorCode::ShapeMismatch, {op, "state"}));
  const Tensor v_bf16 = Tensor::zeros({1, 5, 2, 3}, DType::bf16);
  EXPECT_TRUE(throws_error([&] { gated_delta_steps_varlen(q, q, v_bf16, g, g, state, cu); },
                           ErrorCode::DTypeMismatch, {op, "v"}));
  // _into: a wrong output shape or dtype, checked before anything is written.
  const Tensor y_out = Tensor::zeros({1, 5, 2, 3}, DType::f32);
  const Tensor s_bad = Tensor::zeros({2, 5, 2, 3, 4}, DType::f32);
  EXPECT_TRUE(throws_error(
      [&] { gated_delta_steps_varlen_into(y_out, s_bad, q, q, v, g, g, state, cu); },
      ErrorCode::ShapeMismatch, {op, "states_out"}));
  const Tensor s_f16 = Tensor::zeros({1, 5, 2, 3, 4}, DType::f16);
  EXPECT_TRUE(throws_error(
      [&] { gated_delta_steps_varlen_into(y_out, s_f16, q, q, v, g, g, state, cu); },
      ErrorCode::DTypeMismatch, {op, "states_out"}));
}

TEST(GatedDeltaStepsVarlen, GpuIsUnsupportedAfterTheChecks) {
  RUDNN_REQUIRE_CUDA();
  const Device gpu = Device::cuda(0);
  const Tensor q = Tensor::zeros({1, 5, 1, 4}, DType::f32).to(gpu);
  const Tensor v = Tensor::zeros({1, 5, 2, 3}, DType::f32).to(gpu);
  const Tensor g = Tensor::zeros({1, 5, 2}, DType::f32).to(gpu);
  const Tensor state = Tensor::zeros({2, 2, 3, 4}, DType::f32).to(gpu);
  const Tensor cu = cu_tensor({0, 2, 5}).to(gpu);
  EXPECT_TRUE(throws_error([&] { gated_delta_steps_varlen(q, q, v, g, g, state, cu); },
                           ErrorCode::Unsupported, {"gated_delta_steps_varlen", "CPU"}));
}

}  // namespace
}  // namespace rudnn::test
