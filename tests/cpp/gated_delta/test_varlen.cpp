// Variable-length packed sequences (cu_seqlens): every varlen form equals the dense form on
// each sequence alone (bit for bit, on the CPU and on the GPU), and the GPU matches the
// float64 reference; the offsets' rules; gated_delta_steps_varlen on both.
#include <cmath>
#include <vector>

#include "gated_delta/reference.h"
#include "rudnn/gated_delta.h"
#include "support/test_support.h"

namespace rudnn::test {
namespace {

namespace ref = gdn::reference;

const Device kGpu = Device::cuda(0);

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

Tensor cu_tensor(const std::vector<int32_t>& cu, Device device) {
  return Tensor::from_host(cu, {int64_t(cu.size())}).to(device);
}

// Steps [t0, t1) of a [1, T, ...] operand as a dense [1, t1 - t0, ...] tensor.
Tensor seq(const Tensor& x, int64_t t0, int64_t t1) { return x.slice(1, t0, t1).contiguous(); }
Tensor entry(const Tensor& x, int64_t n) { return x.slice(0, n, n + 1).contiguous(); }

void expect_varlen_equals_separate_calls(Device device, DType dt,
                                         const std::vector<int32_t>& lens, Rng& rng) {
  const int64_t Hk = 2, Hv = 4, Dk = device.is_cpu() ? 8 : 128, Dv = device.is_cpu() ? 6 : 40;
  const Packed host = random_packed(rng, lens, Hk, Hv, Dk, Dv, dt);
  auto on = [&](const Tensor& t) { return t.to(device); };
  const GatedDeltaResult r = gated_delta_varlen(on(host.q), on(host.k), on(host.v), on(host.g),
                                                on(host.beta), on(host.state),
                                                cu_tensor(host.cu, device));
  const Tensor y = r.y.to_host(), state = r.state.to_host();
  ASSERT_EQ(y.shape(), (Shape{1, host.cu.back(), Hv, Dv}));
  ASSERT_EQ(state.shape(), host.state.shape());
  for (size_t n = 0; n < lens.size(); ++n) {
    SCOPED_TRACE(::testing::Message() << "sequence " << n << " of length " << lens[n]);
    const int64_t t0 = host.cu[n], t1 = host.cu[n + 1];
    const GatedDeltaResult alone = gated_delta(
        on(seq(host.q, t0, t1)), on(seq(host.k, t0, t1)), on(seq(host.v, t0, t1)),
        on(seq(host.g, t0, t1)), on(seq(host.beta, t0, t1)), on(entry(host.state, int64_t(n))));
    EXPECT_TRUE(bit_equal(seq(y, t0, t1), alone.y.to_host()));
    EXPECT_TRUE(bit_equal(entry(state, int64_t(n)), alone.state.to_host()));
  }
  // And against the reference over the packed inputs.
  std::vector<double> s = to_doubles(host.state), yr;
  ref::gated_delta_bthd({int64_t(lens.size()), host.cu.back(), Hk, Hv, Dk, Dv},
                        to_doubles(host.q), to_doubles(host.k), to_doubles(host.v),
                        to_doubles(host.g), to_doubles(host.beta), s, yr, nullptr,
                        ref::SeqLens(host.cu.begin(), host.cu.end()));
  EXPECT_TRUE(all_close(y, host_tensor(yr, y.shape(), dt)));
  EXPECT_TRUE(all_close(state, host_tensor(s, state.shape(), DType::f32)));
}

// Lengths with an empty sequence in the middle and one of a single step.
const std::vector<int32_t> kLens{3, 0, 5, 1};

TEST(GatedDeltaVarlen, EqualsSeparateCallsOnTheCpu) {
  RUDNN_SEEDED_RNG(rng);
  for (DType dt : {DType::f32, DType::bf16}) {
    SCOPED_TRACE(dtype_name(dt));
    expect_varlen_equals_separate_calls(Device::cpu(), dt, kLens, rng);
  }
}

TEST(GatedDeltaVarlen, SlotsEqualSeparateCallsOnTheCpu) {
  RUDNN_SEEDED_RNG(rng);
  const int64_t Hk = 1, Hv = 2, Dk = 4, Dv = 3, S = 6;
  const Packed in = random_packed(rng, kLens, Hk, Hv, Dk, Dv, DType::f16);
  const Tensor pool = random_tensor(rng, {S, Hv, Dv, Dk}, DType::f32, 0.0f, 0.1f);
  const Tensor pool_before = host_tensor(to_doubles(pool), pool.shape(), DType::f32);
  const std::vector<int64_t> ids{4, 0, 2, 5};
  const Tensor y = gated_delta_slots_varlen(in.q, in.k, in.v, in.g, in.beta, pool,
                                            Tensor::from_host(ids, {4}), cu_tensor(in.cu, {}));
  for (size_t n = 0; n < ids.size(); ++n) {
    const int64_t t0 = in.cu[n], t1 = in.cu[n + 1], id = ids[n];
    const GatedDeltaResult alone =
        gated_delta(seq(in.q, t0, t1), seq(in.k, t0, t1), seq(in.v, t0, t1), seq(in.g, t0, t1),
                    seq(in.beta, t0, t1), entry(pool_before, id));
    EXPECT_TRUE(bit_equal(seq(y, t0, t1), alone.y));
    EXPECT_TRUE(bit_equal(entry(pool, id), alone.state));
  }
  for (int64_t untouched : {1, 3}) {
    EXPECT_TRUE(bit_equal(entry(pool, untouched), entry(pool_before, untouched)));
  }
}

GatedDeltaInput random_rule_input(Rng& rng, int64_t B, int64_t H, int64_t T, int64_t K,
                                  int64_t V, int64_t states, DType dt) {
  GatedDeltaInput in;
  in.query = random_tensor(rng, {B, H, T, K}, dt);
  in.key = random_tensor(rng, {B, H, T, K}, dt, 0.0f, 1.0f / std::sqrt(float(K)));
  in.value = random_tensor(rng, {B, H, T, V}, dt);
  std::vector<double> beta(size_t(B * H * T)), log_decay(size_t(B * H * T));
  for (auto& x : beta) x = rng.uniform(0.0f, 1.0f);
  for (auto& x : log_decay) x = rng.uniform(-0.5f, 0.0f);
  in.beta = host_tensor(beta, {B, H, T}, dt);
  in.log_decay = host_tensor(log_decay, {B, H, T}, DType::f32);
  in.initial_state = random_tensor(rng, {states, H, K, V}, DType::f32, 0.0f, 0.1f);
  in.query_scale = 0.3f;
  return in;
}

void expect_rule_varlen_equals_separate_calls(Device device, DType dt, Rng& rng) {
  const int64_t H = 3, K = device.is_cpu() ? 8 : 64, V = device.is_cpu() ? 4 : 32;
  std::vector<int32_t> cu{0};
  for (int32_t n : kLens) cu.push_back(cu.back() + n);
  const int64_t T = cu.back(), N = int64_t(kLens.size());
  const GatedDeltaInput host = random_rule_input(rng, 1, H, T, K, V, N, dt);
  GatedDeltaInput dev = host;
  for (Tensor* t : {&dev.query, &dev.key, &dev.value, &dev.beta, &dev.log_decay,
                    &dev.initial_state}) {
    *t = t->to(device);
  }
  const GatedDeltaOutput out = gated_delta_rule_varlen(dev, cu_tensor(cu, device));
  const Tensor y = out.output.to_host(), state = out.final_state.to_host();
  for (int64_t n = 0; n < N; ++n) {
    SCOPED_TRACE(::testing::Message() << "sequence " << n);
    auto part = [&](const Tensor& x) { return x.slice(2, cu[n], cu[n + 1]).contiguous(); };
    GatedDeltaInput alone = dev;
    alone.query = part(host.query).to(device);
    alone.key = part(host.key).to(device);
    alone.value = part(host.value).to(device);
    alone.beta = part(host.beta).to(device);
    alone.log_decay = part(host.log_decay).to(device);
    alone.initial_state = entry(host.initial_state, n).to(device);
    const GatedDeltaOutput r = gated_delta_rule(alone);
    EXPECT_TRUE(bit_equal(y.slice(2, cu[n], cu[n + 1]).contiguous(), r.output.to_host()));
    EXPECT_TRUE(bit_equal(entry(state, n), r.final_state.to_host()));
  }
  std::vector<double> s = to_doubles(host.initial_state), yr;
  ref::gated_delta_bhtd({N, T, H, H, K, V}, to_doubles(host.query), to_doubles(host.key),
                        to_doubles(host.value), to_doubles(host.beta), to_doubles(host.log_decay),
                        host.query_scale, s, yr, ref::SeqLens(cu.begin(), cu.end()));
  EXPECT_TRUE(all_close(y, host_tensor(yr, y.shape(), dt)));
  EXPECT_TRUE(all_close(state, host_tensor(s, state.shape(), DType::f32)));
}

TEST(GatedDeltaVarlen, RuleEqualsSeparateCallsOnTheCpu) {
  RUDNN_SEEDED_RNG(rng);
  expect_rule_varlen_equals_separate_calls(Device::cpu(), DType::bf16, rng);
}

TEST(GatedDeltaVarlen, ZeroSequencesAndZeroSteps) {
  const Tensor q = Tensor::zeros({1, 0, 1, 4}, DType::f32);
  const Tensor v = Tensor::zeros({1, 0, 2, 3}, DType::f32);
  const Tensor g = Tensor::zeros({1, 0, 2}, DType::f32);
  // Two empty sequences: their states come back unchanged.
  const Tensor state = Tensor::full({2, 2, 3, 4}, 0.5, DType::f32);
  const GatedDeltaResult r =
      gated_delta_varlen(q, q, v, g, g, state, cu_tensor({0, 0, 0}, Device::cpu()));
  EXPECT_EQ(r.y.shape(), (Shape{1, 0, 2, 3}));
  EXPECT_TRUE(bit_equal(r.state, state));
  const GatedDeltaResult none = gated_delta_varlen(q, q, v, g, g, Tensor::zeros({0, 2, 3, 4}, DType::f32),
                                                   cu_tensor({0}, Device::cpu()));
  EXPECT_EQ(none.state.shape(), (Shape{0, 2, 3, 4}));
}

TEST(GatedDeltaVarlen, OffsetRules) {
  const Tensor q = Tensor::zeros({1, 5, 1, 4}, DType::f32);
  const Tensor v = Tensor::zeros({1, 5, 2, 3}, DType::f32);
  const Tensor g = Tensor::zeros({1, 5, 2}, DType::f32);
  const Tensor state = Tensor::zeros({2, 2, 3, 4}, DType::f32);
  auto call = [&](const Tensor& cu) { return [&, cu] { gated_delta_varlen(q, q, v, g, g, state, cu); }; };
  const Device cpu = Device::cpu();
  EXPECT_NO_THROW(call(cu_tensor({0, 2, 5}, cpu))());
  EXPECT_TRUE(throws_error(call(cu_tensor({1, 2, 5}, cpu)), ErrorCode::InvalidArgument,
                           {"gated_delta_varlen", "cu_seqlens[0] = 1", "expected 0"}));
  EXPECT_TRUE(throws_error(call(cu_tensor({0, 4, 3}, cpu)), ErrorCode::InvalidArgument,
                           {"gated_delta_varlen", "cu_seqlens[2] = 3", "non-decreasing"}));
  EXPECT_TRUE(throws_error(call(cu_tensor({0, 2, 4}, cpu)), ErrorCode::InvalidArgument,
                           {"gated_delta_varlen", "cu_seqlens[2] = 4", "T = 5"}));
  EXPECT_TRUE(throws_error(call(cu_tensor({0, 5}, cpu)), ErrorCode::ShapeMismatch,
                           {"gated_delta_varlen", "cu_seqlens", "[N + 1]"}));
  EXPECT_TRUE(throws_error(call(Tensor::from_host(std::vector<int64_t>{0, 2, 5}, {3})),
                           ErrorCode::DTypeMismatch, {"gated_delta_varlen", "cu_seqlens", "i32"}));
  EXPECT_TRUE(throws_error(call(Tensor()), ErrorCode::InvalidArgument,
                           {"gated_delta_varlen", "cu_seqlens", "undefined"}));
  const Tensor q2 = Tensor::zeros({2, 5, 1, 4}, DType::f32);
  const Tensor v2 = Tensor::zeros({2, 5, 2, 3}, DType::f32);
  const Tensor g2 = Tensor::zeros({2, 5, 2}, DType::f32);
  EXPECT_TRUE(throws_error(
      [&] { gated_delta_varlen(q2, q2, v2, g2, g2, state, cu_tensor({0, 2, 5}, cpu)); },
      ErrorCode::ShapeMismatch, {"gated_delta_varlen", "B = 2", "B = 1"}));
  EXPECT_TRUE(throws_error(
      [&] {
        gated_delta_slots_varlen(q, q, v, g, g, state, Tensor::from_host(std::vector<int32_t>{1, 0}, {2}),
                                 cu_tensor({0, 6, 5}, cpu));
      },
      ErrorCode::InvalidArgument, {"gated_delta_slots_varlen", "cu_seqlens[2] = 5"}));
  GatedDeltaInput in;
  in.query = in.key = Tensor::zeros({1, 2, 5, 4}, DType::f32);
  in.value = Tensor::zeros({1, 2, 5, 3}, DType::f32);
  in.beta = in.log_decay = Tensor::zeros({1, 2, 5}, DType::f32);
  in.initial_state = Tensor::zeros({2, 2, 4, 3}, DType::f32);
  EXPECT_NO_THROW(gated_delta_rule_varlen(in, cu_tensor({0, 2, 5}, cpu)));
  EXPECT_TRUE(throws_error([&] { gated_delta_rule_varlen(in, cu_tensor({0, 2, 3, 5}, cpu)); },
                           ErrorCode::ShapeMismatch,
                           {"gated_delta_rule_varlen", "cu_seqlens", "[N + 1]"}));
}

// ---- GPU (skipped without one) -------------------------------------------------------------

TEST(GatedDeltaVarlenGpu, EqualsSeparateCallsBitForBitAndMatchesReference) {
  RUDNN_REQUIRE_CUDA();
  RUDNN_SEEDED_RNG(rng);
  PoisonScope poison(true);
  for (DType dt : {DType::f32, DType::f16, DType::bf16}) {
    SCOPED_TRACE(::testing::Message() << dtype_name(dt) << " lens 3,0,5,1 Hk2 Hv4 Dk128 Dv40");
    expect_varlen_equals_separate_calls(kGpu, dt, kLens, rng);
  }
  SCOPED_TRACE("bf16 lens 17,1,40 (prefill-like)");
  expect_varlen_equals_separate_calls(kGpu, DType::bf16, {17, 1, 40}, rng);
}

TEST(GatedDeltaVarlenGpu, SlotsEqualSeparateCallsBitForBit) {
  RUDNN_REQUIRE_CUDA();
  RUDNN_SEEDED_RNG(rng);
  const int64_t Hk = 2, Hv = 4, Dk = 128, Dv = 32, S = 7;
  const Packed in = random_packed(rng, kLens, Hk, Hv, Dk, Dv, DType::bf16);
  const Tensor pool_host = random_tensor(rng, {S, Hv, Dv, Dk}, DType::f32, 0.0f, 0.1f);
  const Tensor pool = pool_host.to(kGpu);
  const std::vector<int32_t> ids{6, 0, 3, 2};
  const Tensor y = gated_delta_slots_varlen(in.q.to(kGpu), in.k.to(kGpu), in.v.to(kGpu),
                                            in.g.to(kGpu), in.beta.to(kGpu), pool,
                                            Tensor::from_host(ids, {4}).to(kGpu),
                                            cu_tensor(in.cu, kGpu))
                       .to_host();
  const Tensor pool_after = pool.to_host();
  for (size_t n = 0; n < ids.size(); ++n) {
    SCOPED_TRACE(::testing::Message() << "sequence " << n << " slot " << ids[n]);
    const int64_t t0 = in.cu[n], t1 = in.cu[n + 1], id = ids[n];
    auto dev = [&](const Tensor& x) { return seq(x, t0, t1).to(kGpu); };
    const GatedDeltaResult alone = gated_delta(dev(in.q), dev(in.k), dev(in.v), dev(in.g),
                                               dev(in.beta), entry(pool_host, id).to(kGpu));
    EXPECT_TRUE(bit_equal(seq(y, t0, t1), alone.y.to_host()));
    EXPECT_TRUE(bit_equal(entry(pool_after, id), alone.state.to_host()));
  }
  for (int64_t untouched : {1, 4, 5}) {
    EXPECT_TRUE(bit_equal(entry(pool_after, untouched), entry(pool_host, untouched)));
  }
}

TEST(GatedDeltaVarlenGpu, RuleEqualsSeparateCallsBitForBit) {
  RUDNN_REQUIRE_CUDA();
  RUDNN_SEEDED_RNG(rng);
  for (DType dt : {DType::f32, DType::bf16}) {
    SCOPED_TRACE(::testing::Message() << dtype_name(dt) << " H3 K64 V32 lens 3,0,5,1");
    expect_rule_varlen_equals_separate_calls(kGpu, dt, rng);
  }
}

// Offsets on the device are not read by the host: bad ones must not fault (the kernel clamps
// them); the results are unspecified, the call completes.
TEST(GatedDeltaVarlenGpu, BadDeviceOffsetsDoNotFault) {
  RUDNN_REQUIRE_CUDA();
  const Tensor q = Tensor::zeros({1, 5, 1, 32}, DType::f32, kGpu);
  const Tensor v = Tensor::zeros({1, 5, 2, 8}, DType::f32, kGpu);
  const Tensor g = Tensor::zeros({1, 5, 2}, DType::f32, kGpu);
  const Tensor state = Tensor::zeros({3, 2, 8, 32}, DType::f32, kGpu);
  const GatedDeltaResult r =
      gated_delta_varlen(q, q, v, g, g, state, cu_tensor({-7, 100, 2, 1 << 30}, kGpu));
  // A fault would surface as an error on the copy back.
  EXPECT_NO_THROW(r.state.to_host());
  EXPECT_NO_THROW(r.y.to_host());
}

// gated_delta_steps_varlen: every step's state of packed sequences equals gated_delta_steps on
// each sequence alone, bit for bit; its last step equals gated_delta_varlen's final state.
void expect_steps_equal_separate_calls(Device device, const std::vector<int32_t>& lens, DType dt,
                                       int64_t Dk, int64_t Dv, Rng& rng) {
  PoisonScope poison(true);
  const int64_t Hk = 1, Hv = 2;
  const Packed host = random_packed(rng, lens, Hk, Hv, Dk, Dv, dt);
  Packed in = host;
  for (Tensor* t : {&in.q, &in.k, &in.v, &in.g, &in.beta, &in.state}) *t = t->to(device);
  const Tensor cu = cu_tensor(in.cu, device);
  const GatedDeltaResult r =
      gated_delta_steps_varlen(in.q, in.k, in.v, in.g, in.beta, in.state, cu);
  const int64_t T = in.cu.back();
  ASSERT_EQ(r.y.shape(), (Shape{1, T, Hv, Dv}));
  ASSERT_EQ(r.state.shape(), (Shape{1, T, Hv, Dv, Dk}));
  EXPECT_EQ(r.y.dtype(), dt);
  EXPECT_EQ(r.state.dtype(), DType::f32);
  const Tensor y = r.y.to_host(), states = r.state.to_host();
  const GatedDeltaResult finals =
      gated_delta_varlen(in.q, in.k, in.v, in.g, in.beta, in.state, cu);
  const Tensor final_states = finals.state.to_host();
  EXPECT_TRUE(bit_equal(y, finals.y.to_host()));
  for (size_t n = 0; n < lens.size(); ++n) {
    SCOPED_TRACE(::testing::Message() << "sequence " << n << " of length " << lens[n]);
    const int64_t t0 = in.cu[n], t1 = in.cu[n + 1];
    if (t1 == t0) continue;
    auto part = [&](const Tensor& x) { return seq(x, t0, t1).to(device); };
    const GatedDeltaResult alone =
        gated_delta_steps(part(host.q), part(host.k), part(host.v), part(host.g),
                          part(host.beta), entry(host.state, int64_t(n)).to(device));
    EXPECT_TRUE(bit_equal(seq(y, t0, t1), alone.y.to_host()));
    EXPECT_TRUE(bit_equal(seq(states, t0, t1), alone.state.to_host()));
    const Tensor last = states.slice(1, t1 - 1, t1).contiguous().view({1, Hv, Dv, Dk});
    EXPECT_TRUE(bit_equal(last, entry(final_states, int64_t(n))));
  }
  // Against the float64 reference's every step.
  std::vector<double> s = to_doubles(host.state), yr, all;
  ref::gated_delta_bthd({int64_t(lens.size()), T, Hk, Hv, Dk, Dv}, to_doubles(host.q),
                        to_doubles(host.k), to_doubles(host.v), to_doubles(host.g),
                        to_doubles(host.beta), s, yr, &all,
                        ref::SeqLens(host.cu.begin(), host.cu.end()));
  EXPECT_TRUE(all_close(y, host_tensor(yr, y.shape(), dt)));
  EXPECT_TRUE(all_close(states, host_tensor(all, states.shape(), DType::f32)));
  // The _into form writes the same bits into poisoned outputs.
  const Tensor y_out = poisoned({1, T, Hv, Dv}, dt, device);
  const Tensor s_out = poisoned({1, T, Hv, Dv, Dk}, DType::f32, device);
  gated_delta_steps_varlen_into(y_out, s_out, in.q, in.k, in.v, in.g, in.beta, in.state, cu);
  EXPECT_TRUE(bit_equal(y_out.to_host(), y));
  EXPECT_TRUE(bit_equal(s_out.to_host(), states));
  EXPECT_TRUE(bit_equal(in.q.to_host(), host.q)) << "q changed";
  EXPECT_TRUE(bit_equal(in.v.to_host(), host.v)) << "v changed";
  EXPECT_TRUE(bit_equal(in.state.to_host(), host.state)) << "state changed";
}

TEST(GatedDeltaStepsVarlen, EqualsSeparateCallsBitForBit) {
  RUDNN_SEEDED_RNG(rng);
  for (DType dt : {DType::f32, DType::bf16, DType::f64}) {
    SCOPED_TRACE(dtype_name(dt));
    expect_steps_equal_separate_calls(Device::cpu(), {3, 0, 5, 1}, dt, 5, 3, rng);
  }
}

TEST(GatedDeltaStepsVarlen, EmptySequences) {
  RUDNN_SEEDED_RNG(rng);
  expect_steps_equal_separate_calls(Device::cpu(), {0, 4, 0, 0, 2, 0}, DType::f32, 5, 3, rng);
  // Every sequence empty: T = 0, nothing to write.
  const Packed in = random_packed(rng, {0, 0}, 1, 2, 4, 3, DType::f32);
  const GatedDeltaResult r =
      gated_delta_steps_varlen(in.q, in.k, in.v, in.g, in.beta, in.state,
                               cu_tensor(in.cu, Device::cpu()));
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
  EXPECT_NO_THROW(call(cu_tensor({0, 2, 5}, Device::cpu()))());
  EXPECT_TRUE(throws_error(call(cu_tensor({1, 2, 5}, Device::cpu())),
                           ErrorCode::InvalidArgument,
                           {op, "cu_seqlens[0] = 1", "expected 0"}));
  EXPECT_TRUE(throws_error(call(cu_tensor({0, 4, 3}, Device::cpu())),
                           ErrorCode::InvalidArgument,
                           {op, "cu_seqlens[2] = 3", "non-decreasing"}));
  EXPECT_TRUE(throws_error(call(cu_tensor({0, 2, 4}, Device::cpu())),
                           ErrorCode::InvalidArgument,
                           {op, "cu_seqlens[2] = 4", "T = 5"}));
  EXPECT_TRUE(throws_error(call(cu_tensor({0, 5}, Device::cpu())),
                           ErrorCode::ShapeMismatch,
                           {op, "cu_seqlens", "[N + 1]"}));
  EXPECT_TRUE(throws_error(call(Tensor::from_host(std::vector<int64_t>{0, 2, 5}, {3})),
                           ErrorCode::DTypeMismatch, {op, "cu_seqlens", "i32"}));
  EXPECT_TRUE(throws_error(call(Tensor()), ErrorCode::InvalidArgument,
                           {op, "cu_seqlens", "undefined"}));
  const Tensor cu = cu_tensor({0, 2, 5}, Device::cpu());
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

TEST(GatedDeltaVarlenGpu, StepsEqualSeparateCallsBitForBit) {
  RUDNN_REQUIRE_CUDA();
  RUDNN_SEEDED_RNG(rng);
  for (DType dt : {DType::f32, DType::f16, DType::bf16}) {
    SCOPED_TRACE(::testing::Message() << dtype_name(dt) << " lens 3,0,5,1 Dk128 Dv40");
    expect_steps_equal_separate_calls(kGpu, {3, 0, 5, 1}, dt, 128, 40, rng);
  }
  SCOPED_TRACE("f32 lens 0,4,0,0,2,0 Dk5 Dv3 (the general kernel, empty sequences)");
  expect_steps_equal_separate_calls(kGpu, {0, 4, 0, 0, 2, 0}, DType::f32, 5, 3, rng);
}

}  // namespace
}  // namespace rudnn::test
