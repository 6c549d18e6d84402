// The public entry points on the CPU: spec 003's worked example, both forms against the
// float64 reference, every-step states, the state pool, chaining, and inputs unchanged.
// The GPU recurrence against the reference, its own one-step calls, the steps and the pool
// forms (skipped without a GPU).
#include <cmath>
#include <string>
#include <vector>

#include "gated_delta/reference.h"
#include "rudnn/gated_delta.h"
#include "support/test_support.h"

namespace rudnn::test {
namespace {

namespace ref = gdn::reference;

struct Bthd {
  Tensor q, k, v, g, beta, state;
};

// Keys are L2-normalised as Gated DeltaNet does, so that the recurrence stays bounded.
Bthd random_bthd(Rng& rng, int64_t B, int64_t T, int64_t Hk, int64_t Hv, int64_t Dk, int64_t Dv,
                 DType dt, DType state_dt) {
  Bthd in;
  in.q = random_tensor(rng, {B, T, Hk, Dk}, dt, 0.0f, 1.0f / std::sqrt(float(Dk)));
  std::vector<double> k = to_doubles(random_tensor(rng, {B, T, Hk, Dk}, DType::f64));
  for (size_t r = 0; r < k.size() / Dk; ++r) {
    double n = 0;
    for (int64_t d = 0; d < Dk; ++d) n += k[r * Dk + d] * k[r * Dk + d];
    for (int64_t d = 0; d < Dk; ++d) k[r * Dk + d] /= std::sqrt(n) + 1e-6;
  }
  in.k = host_tensor(k, {B, T, Hk, Dk}, dt);
  in.v = random_tensor(rng, {B, T, Hv, Dv}, dt);
  std::vector<double> g(B * T * Hv), beta(B * T * Hv);
  for (auto& x : g) x = rng.uniform(0.8f, 1.0f);
  for (auto& x : beta) x = rng.uniform(0.0f, 1.0f);
  in.g = host_tensor(g, {B, T, Hv}, dt);
  in.beta = host_tensor(beta, {B, T, Hv}, dt);
  in.state = random_tensor(rng, {B, Hv, Dv, Dk}, state_dt, 0.0f, 0.1f);
  return in;
}

TEST(GatedDeltaApi, SpecWorkedExampleIsExact) {
  const Tensor q = Tensor::full({1, 2, 1, 32}, 0.25, DType::f32);
  const Tensor k = Tensor::full({1, 2, 1, 32}, 0.125, DType::f32);
  const Tensor v = Tensor::full({1, 2, 1, 4}, 1.0, DType::f32);
  const Tensor g = Tensor::full({1, 2, 1}, 1.0, DType::f32);
  const Tensor beta = Tensor::full({1, 2, 1}, 0.5, DType::f32);
  const Tensor state = Tensor::zeros({1, 1, 4, 32}, DType::f32);
  const GatedDeltaResult r = gated_delta(q, k, v, g, beta, state);
  EXPECT_EQ(r.y.to_vector<float>(),
            (std::vector<float>{0.5f, 0.5f, 0.5f, 0.5f, 0.875f, 0.875f, 0.875f, 0.875f}));
  EXPECT_EQ(r.state.shape(), (Shape{1, 1, 4, 32}));
  EXPECT_EQ(r.state.dtype(), DType::f32);
}

TEST(GatedDeltaApi, MatchesReferenceInEveryDtype) {
  RUDNN_SEEDED_RNG(rng);
  for (DType dt : {DType::f32, DType::f16, DType::bf16}) {
    SCOPED_TRACE(dtype_name(dt));
    const int64_t B = 2, T = 5, Hk = 2, Hv = 4, Dk = 8, Dv = 6;
    const Bthd in = random_bthd(rng, B, T, Hk, Hv, Dk, Dv, dt, DType::f32);
    const auto before = bytes_of(in.state);
    const auto q_before = bytes_of(in.q);
    const GatedDeltaResult r = gated_delta(in.q, in.k, in.v, in.g, in.beta, in.state);
    EXPECT_EQ(bytes_of(in.state), before);
    EXPECT_EQ(bytes_of(in.q), q_before);
    std::vector<double> s = to_doubles(in.state), y;
    ref::gated_delta_bthd({B, T, Hk, Hv, Dk, Dv}, to_doubles(in.q), to_doubles(in.k),
                          to_doubles(in.v), to_doubles(in.g), to_doubles(in.beta), s, y);
    EXPECT_EQ(r.y.dtype(), dt);
    EXPECT_TRUE(all_close(r.y, host_tensor(y, {B, T, Hv, Dv}, dt)));
    EXPECT_TRUE(all_close(r.state, host_tensor(s, {B, Hv, Dv, Dk}, DType::f32)));
  }
}

TEST(GatedDeltaApi, StepsAgreeWithFinalStateAndOutputs) {
  RUDNN_SEEDED_RNG(rng);
  const int64_t B = 2, T = 4, Hk = 1, Hv = 2, Dk = 4, Dv = 3;
  const Bthd in = random_bthd(rng, B, T, Hk, Hv, Dk, Dv, DType::bf16, DType::f32);
  const GatedDeltaResult once = gated_delta(in.q, in.k, in.v, in.g, in.beta, in.state);
  const GatedDeltaResult steps = gated_delta_steps(in.q, in.k, in.v, in.g, in.beta, in.state);
  EXPECT_TRUE(bit_equal(steps.y, once.y));
  ASSERT_EQ(steps.state.shape(), (Shape{B, T, Hv, Dv, Dk}));
  for (int64_t b = 0; b < B; ++b) {
    const Tensor last = steps.state.slice(0, b, b + 1).slice(1, T - 1, T).view({1, Hv, Dv, Dk});
    EXPECT_TRUE(bit_equal(last.contiguous(), once.state.slice(0, b, b + 1).contiguous()));
  }
}

// Decoding step by step through the returned state equals one call over all steps, within
// the rounding of the intermediate state to F32.
TEST(GatedDeltaApi, ChainedStepsEqualOneCall) {
  RUDNN_SEEDED_RNG(rng);
  const int64_t B = 1, T = 6, Hk = 2, Hv = 2, Dk = 4, Dv = 4;
  const Bthd in = random_bthd(rng, B, T, Hk, Hv, Dk, Dv, DType::f32, DType::f32);
  const GatedDeltaResult whole = gated_delta(in.q, in.k, in.v, in.g, in.beta, in.state);
  Tensor state = in.state;
  for (int64_t t = 0; t < T; ++t) {
    auto step = [&](const Tensor& x) { return x.slice(1, t, t + 1).contiguous(); };
    const GatedDeltaResult r =
        gated_delta(step(in.q), step(in.k), step(in.v), step(in.g), step(in.beta), state);
    EXPECT_TRUE(all_close(r.y, whole.y.slice(1, t, t + 1).contiguous(), 1e-6));
    state = r.state;
  }
  EXPECT_TRUE(all_close(state, whole.state, 1e-6));
}

TEST(GatedDeltaApi, SlotsUpdateThePoolInPlace) {
  RUDNN_SEEDED_RNG(rng);
  const int64_t B = 3, T = 2, Hk = 1, Hv = 2, Dk = 4, Dv = 3, S = 5;
  const Bthd in = random_bthd(rng, B, T, Hk, Hv, Dk, Dv, DType::f16, DType::f32);
  const Tensor pool = random_tensor(rng, {S, Hv, Dv, Dk}, DType::f32, 0.0f, 0.1f);
  // A deep copy (contiguous() of a dense tensor would share its storage).
  const Tensor pool_before = host_tensor(to_doubles(pool), pool.shape(), DType::f32);
  const std::vector<int64_t> ids{4, 0, 2};
  const Tensor slots = Tensor::from_host(ids, {B});
  const Tensor y = gated_delta_slots(in.q, in.k, in.v, in.g, in.beta, pool, slots);
  for (int64_t b = 0; b < B; ++b) {
    auto seq = [&](const Tensor& x) { return x.slice(0, b, b + 1).contiguous(); };
    const int64_t id = ids[b];
    const GatedDeltaResult alone = gated_delta(seq(in.q), seq(in.k), seq(in.v), seq(in.g),
                                               seq(in.beta), pool_before.slice(0, id, id + 1));
    EXPECT_TRUE(bit_equal(seq(y), alone.y));
    EXPECT_TRUE(bit_equal(pool.slice(0, id, id + 1).contiguous(), alone.state));
  }
  for (int64_t untouched : {1, 3}) {
    EXPECT_TRUE(bit_equal(pool.slice(0, untouched, untouched + 1).contiguous(),
                          pool_before.slice(0, untouched, untouched + 1).contiguous()));
  }
}

TEST(GatedDeltaApi, RuleMatchesReference) {
  RUDNN_SEEDED_RNG(rng);
  for (DType dt : {DType::f32, DType::f16, DType::bf16}) {
    SCOPED_TRACE(dtype_name(dt));
    const int64_t B = 2, H = 3, T = 4, K = 8, V = 4;
    GatedDeltaInput in;
    in.query = random_tensor(rng, {B, H, T, K}, dt);
    in.key = random_tensor(rng, {B, H, T, K}, dt, 0.0f, 0.3f);
    in.value = random_tensor(rng, {B, H, T, V}, dt);
    std::vector<double> beta(B * H * T), log_decay(B * H * T);
    for (auto& x : beta) x = rng.uniform(0.0f, 1.0f);
    for (auto& x : log_decay) x = rng.uniform(-0.5f, 0.0f);
    in.beta = host_tensor(beta, {B, H, T}, dt);
    in.log_decay = host_tensor(log_decay, {B, H, T}, DType::f32);
    in.initial_state = random_tensor(rng, {B, H, K, V}, DType::f32, 0.0f, 0.1f);
    in.query_scale = 0.35f;
    const auto state_before = bytes_of(in.initial_state);
    const GatedDeltaOutput out = gated_delta_rule(in);
    EXPECT_EQ(bytes_of(in.initial_state), state_before);
    std::vector<double> s = to_doubles(in.initial_state), y;
    ref::gated_delta_bhtd({B, T, H, H, K, V}, to_doubles(in.query), to_doubles(in.key),
                          to_doubles(in.value), to_doubles(in.beta), to_doubles(in.log_decay),
                          in.query_scale, s, y);
    EXPECT_TRUE(all_close(out.output, host_tensor(y, {B, H, T, V}, dt)));
    EXPECT_EQ(out.final_state.dtype(), DType::f32);
    EXPECT_TRUE(all_close(out.final_state, host_tensor(s, {B, H, K, V}, DType::f32)));
  }
}

// ---- The GPU recurrence (skipped without a GPU) -------------------------------------------

const Device kGpu = Device::cuda(0);

Bthd to_gpu(const Bthd& in) {
  return {in.q.to(kGpu), in.k.to(kGpu),    in.v.to(kGpu),
          in.g.to(kGpu), in.beta.to(kGpu), in.state.to(kGpu)};
}

struct Case {
  int64_t B, T, Hk, Hv, Dk, Dv;
};

TEST(GatedDeltaGpu, MatchesReferenceAndLeavesInputsUnchanged) {
  RUDNN_REQUIRE_CUDA();
  RUDNN_SEEDED_RNG(rng);
  PoisonScope poison(true);
  for (const Case c :
       {Case{2, 5, 2, 4, 128, 128}, Case{3, 1, 1, 3, 32, 20}, Case{1, 7, 2, 2, 20, 17},
        Case{2, 3, 1, 2, 256, 8}, Case{1, 2, 1, 1, 70, 5}}) {
    for (DType dt : {DType::f32, DType::f16, DType::bf16}) {
      for (DType state_dt : {DType::f32, dt}) {
        SCOPED_TRACE(::testing::Message()
                     << dtype_name(dt) << " state " << dtype_name(state_dt) << " B" << c.B << " T"
                     << c.T << " Hk" << c.Hk << " Hv" << c.Hv << " Dk" << c.Dk << " Dv" << c.Dv);
        const Bthd host = random_bthd(rng, c.B, c.T, c.Hk, c.Hv, c.Dk, c.Dv, dt, state_dt);
        const Bthd dev = to_gpu(host);
        const GatedDeltaResult r = gated_delta(dev.q, dev.k, dev.v, dev.g, dev.beta, dev.state);
        std::vector<double> s = to_doubles(host.state), y;
        ref::gated_delta_bthd({c.B, c.T, c.Hk, c.Hv, c.Dk, c.Dv}, to_doubles(host.q),
                              to_doubles(host.k), to_doubles(host.v), to_doubles(host.g),
                              to_doubles(host.beta), s, y);
        EXPECT_TRUE(all_close(r.y.to_host(), host_tensor(y, {c.B, c.T, c.Hv, c.Dv}, dt)));
        EXPECT_TRUE(
            all_close(r.state.to_host(), host_tensor(s, {c.B, c.Hv, c.Dv, c.Dk}, state_dt)));
        EXPECT_TRUE(bit_equal(dev.q.to_host(), host.q));
        EXPECT_TRUE(bit_equal(dev.k.to_host(), host.k));
        EXPECT_TRUE(bit_equal(dev.v.to_host(), host.v));
        EXPECT_TRUE(bit_equal(dev.g.to_host(), host.g));
        EXPECT_TRUE(bit_equal(dev.beta.to_host(), host.beta));
        EXPECT_TRUE(bit_equal(dev.state.to_host(), host.state));
      }
    }
  }
}

TEST(GatedDeltaGpu, BitEqualToItsOwnOneStepCalls) {
  RUDNN_REQUIRE_CUDA();
  RUDNN_SEEDED_RNG(rng);
  for (DType dt : {DType::f32, DType::bf16}) {
    SCOPED_TRACE(dtype_name(dt));
    const int64_t B = 2, T = 6, Hk = 2, Hv = 4, Dk = 128, Dv = 40;
    const Bthd dev = to_gpu(random_bthd(rng, B, T, Hk, Hv, Dk, Dv, dt, DType::f32));
    const GatedDeltaResult whole = gated_delta(dev.q, dev.k, dev.v, dev.g, dev.beta, dev.state);
    Tensor state = dev.state;
    for (int64_t t = 0; t < T; ++t) {
      auto step = [&](const Tensor& x) { return x.slice(1, t, t + 1).contiguous(); };
      const GatedDeltaResult r =
          gated_delta(step(dev.q), step(dev.k), step(dev.v), step(dev.g), step(dev.beta), state);
      EXPECT_TRUE(bit_equal(r.y.to_host(), whole.y.slice(1, t, t + 1).contiguous().to_host()));
      state = r.state;
    }
    EXPECT_TRUE(bit_equal(state.to_host(), whole.state.to_host()));
  }
}

TEST(GatedDeltaGpu, StepsEqualGatedDeltaBitForBit) {
  RUDNN_REQUIRE_CUDA();
  RUDNN_SEEDED_RNG(rng);
  const int64_t B = 2, T = 5, Hk = 1, Hv = 2, Dk = 64, Dv = 24;
  const Bthd dev = to_gpu(random_bthd(rng, B, T, Hk, Hv, Dk, Dv, DType::bf16, DType::f32));
  const GatedDeltaResult once = gated_delta(dev.q, dev.k, dev.v, dev.g, dev.beta, dev.state);
  const GatedDeltaResult steps = gated_delta_steps(dev.q, dev.k, dev.v, dev.g, dev.beta, dev.state);
  EXPECT_TRUE(bit_equal(steps.y.to_host(), once.y.to_host()));
  ASSERT_EQ(steps.state.shape(), (Shape{B, T, Hv, Dv, Dk}));
  const Tensor host_steps = steps.state.to_host();
  for (int64_t t = 0; t < T; ++t) {
    // Step t's state is the final state of the first t + 1 steps.
    auto prefix = [&](const Tensor& x) { return x.slice(1, 0, t + 1).contiguous(); };
    const GatedDeltaResult r = gated_delta(prefix(dev.q), prefix(dev.k), prefix(dev.v),
                                           prefix(dev.g), prefix(dev.beta), dev.state);
    EXPECT_TRUE(bit_equal(host_steps.slice(1, t, t + 1).contiguous().view({B, Hv, Dv, Dk}),
                          r.state.to_host()));
  }
}

TEST(GatedDeltaGpu, SlotsEqualGatedDeltaOnEachState) {
  RUDNN_REQUIRE_CUDA();
  RUDNN_SEEDED_RNG(rng);
  const int64_t B = 3, T = 2, Hk = 2, Hv = 4, Dk = 128, Dv = 32, S = 6;
  const Bthd dev = to_gpu(random_bthd(rng, B, T, Hk, Hv, Dk, Dv, DType::bf16, DType::f32));
  const Tensor pool_host = random_tensor(rng, {S, Hv, Dv, Dk}, DType::f32, 0.0f, 0.1f);
  const Tensor pool = pool_host.to(kGpu);
  const std::vector<int32_t> ids{5, 0, 3};
  const Tensor y = gated_delta_slots(dev.q, dev.k, dev.v, dev.g, dev.beta, pool,
                                     Tensor::from_host(ids, {B}).to(kGpu));
  const Tensor pool_after = pool.to_host();
  for (int64_t b = 0; b < B; ++b) {
    auto seq = [&](const Tensor& x) { return x.slice(0, b, b + 1).contiguous(); };
    const int64_t id = ids[b];
    const GatedDeltaResult alone =
        gated_delta(seq(dev.q), seq(dev.k), seq(dev.v), seq(dev.g), seq(dev.beta),
                    pool_host.slice(0, id, id + 1).contiguous().to(kGpu));
    EXPECT_TRUE(bit_equal(seq(y).to_host(), alone.y.to_host()));
    EXPECT_TRUE(bit_equal(pool_after.slice(0, id, id + 1).contiguous(), alone.state.to_host()));
  }
  for (int64_t untouched : {1, 2, 4}) {
    EXPECT_TRUE(bit_equal(pool_after.slice(0, untouched, untouched + 1).contiguous(),
                          pool_host.slice(0, untouched, untouched + 1).contiguous()));
  }
}

// Device ids cannot throw without a synchronisation: an id outside the pool or shared by two
// sequences makes those sequences no-ops on the pool with NaN outputs; the others run as usual.
TEST(GatedDeltaGpu, UnusableDeviceSlotIdsLeaveThePoolAndGiveNaN) {
  RUDNN_REQUIRE_CUDA();
  RUDNN_SEEDED_RNG(rng);
  const int64_t B = 5, T = 3, Hk = 1, Hv = 2, Dk = 128, Dv = 20, S = 4;
  for (DType slot_dtype : {DType::i32, DType::i64}) {
    SCOPED_TRACE(dtype_name(slot_dtype));
    const Bthd dev = to_gpu(random_bthd(rng, B, T, Hk, Hv, Dk, Dv, DType::bf16, DType::f32));
    const Tensor pool_host = random_tensor(rng, {S, Hv, Dv, Dk}, DType::f32, 0.0f, 0.1f);
    const Tensor pool = pool_host.to(kGpu);
    // -1 and 4 are outside the pool; 2 is named twice; 0 is the only usable id.
    const std::vector<double> ids{2, -1, 0, 4, 2};
    // Zeros, not poison: the NaNs must come from the op.
    const Tensor y = host_tensor(std::vector<double>(size_t(B * T * Hv * Dv), 0.0),
                                 {B, T, Hv, Dv}, DType::bf16)
                         .to(kGpu);
    gated_delta_slots_into(y, dev.q, dev.k, dev.v, dev.g, dev.beta, pool,
                           host_tensor(ids, {B}, slot_dtype).to(kGpu));
    const Tensor pool_after = pool.to_host();
    const Tensor y_host = y.to_host();
    for (int64_t b = 0; b < B; ++b) {
      SCOPED_TRACE("sequence " + std::to_string(b));
      auto seq = [&](const Tensor& x) { return x.slice(0, b, b + 1).contiguous(); };
      if (b != 2) {
        for (double x : to_doubles(seq(y_host))) ASSERT_TRUE(std::isnan(x));
        continue;
      }
      const GatedDeltaResult alone =
          gated_delta(seq(dev.q), seq(dev.k), seq(dev.v), seq(dev.g), seq(dev.beta),
                      pool_host.slice(0, 0, 1).contiguous().to(kGpu));
      EXPECT_TRUE(bit_equal(seq(y_host), alone.y.to_host()));
      EXPECT_TRUE(bit_equal(pool_after.slice(0, 0, 1).contiguous(), alone.state.to_host()));
    }
    for (int64_t untouched : {1, 2, 3}) {
      EXPECT_TRUE(bit_equal(pool_after.slice(0, untouched, untouched + 1).contiguous(),
                            pool_host.slice(0, untouched, untouched + 1).contiguous()));
    }
  }
}

TEST(GatedDeltaGpu, RuleMatchesReference) {
  RUDNN_REQUIRE_CUDA();
  RUDNN_SEEDED_RNG(rng);
  PoisonScope poison(true);
  for (DType dt : {DType::f32, DType::f16, DType::bf16}) {
    SCOPED_TRACE(dtype_name(dt));
    const int64_t B = 2, H = 3, T = 5, K = 128, V = 96;
    GatedDeltaInput in;
    in.query = random_tensor(rng, {B, H, T, K}, dt);
    in.key = random_tensor(rng, {B, H, T, K}, dt, 0.0f, 0.08f);
    in.value = random_tensor(rng, {B, H, T, V}, dt);
    std::vector<double> beta(B * H * T), log_decay(B * H * T);
    for (auto& x : beta) x = rng.uniform(0.0f, 1.0f);
    for (auto& x : log_decay) x = rng.uniform(-0.5f, 0.0f);
    in.beta = host_tensor(beta, {B, H, T}, dt);
    in.log_decay = host_tensor(log_decay, {B, H, T}, DType::f32);
    in.initial_state = random_tensor(rng, {B, H, K, V}, DType::f32, 0.0f, 0.1f);
    in.query_scale = 0.088f;
    GatedDeltaInput dev = in;
    for (Tensor* t :
         {&dev.query, &dev.key, &dev.value, &dev.beta, &dev.log_decay, &dev.initial_state}) {
      *t = t->to(kGpu);
    }
    const GatedDeltaOutput out = gated_delta_rule(dev);
    std::vector<double> s = to_doubles(in.initial_state), y;
    ref::gated_delta_bhtd({B, T, H, H, K, V}, to_doubles(in.query), to_doubles(in.key),
                          to_doubles(in.value), to_doubles(in.beta), to_doubles(in.log_decay),
                          in.query_scale, s, y);
    EXPECT_TRUE(all_close(out.output.to_host(), host_tensor(y, {B, H, T, V}, dt)));
    EXPECT_TRUE(all_close(out.final_state.to_host(), host_tensor(s, {B, H, K, V}, DType::f32)));
    EXPECT_TRUE(bit_equal(dev.initial_state.to_host(), in.initial_state));
    EXPECT_TRUE(bit_equal(dev.query.to_host(), in.query));
  }
}

// Dk = 128 and 256 move an F32 state in 16-byte accesses when it is 16-byte aligned, in
// scalar ones otherwise: the results must not depend on which.
TEST(GatedDeltaGpu, MisalignedStateGivesTheSameBits) {
  RUDNN_REQUIRE_CUDA();
  RUDNN_SEEDED_RNG(rng);
  for (int64_t Dk : {128, 256}) {
    SCOPED_TRACE(::testing::Message() << "bf16 B2 T3 Hk1 Hv2 Dk" << Dk << " Dv20");
    const int64_t B = 2, T = 3, Hk = 1, Hv = 2, Dv = 20;
    const Bthd dev = to_gpu(random_bthd(rng, B, T, Hk, Hv, Dk, Dv, DType::bf16, DType::f32));
    const int64_t n = B * Hv * Dv * Dk;
    // The state one float into a larger buffer: contiguous, 4-byte but not 16-byte aligned.
    const Tensor buffer = Tensor::zeros({n + 1}, DType::f32, kGpu);
    const Tensor shifted = buffer.slice(0, 1, n + 1).view({B, Hv, Dv, Dk});
    shifted.copy_from(dev.state);
    const GatedDeltaResult aligned = gated_delta(dev.q, dev.k, dev.v, dev.g, dev.beta, dev.state);
    const GatedDeltaResult unaligned =
        gated_delta(dev.q, dev.k, dev.v, dev.g, dev.beta, shifted);
    EXPECT_TRUE(bit_equal(aligned.y.to_host(), unaligned.y.to_host()));
    EXPECT_TRUE(bit_equal(aligned.state.to_host(), unaligned.state.to_host()));
    // And into a misaligned output.
    const Tensor out_buffer = Tensor::zeros({n + 1}, DType::f32, kGpu);
    const Tensor out = out_buffer.slice(0, 1, n + 1).view({B, Hv, Dv, Dk});
    const Tensor y = Tensor::empty({B, T, Hv, Dv}, DType::bf16, kGpu);
    gated_delta_into(y, out, dev.q, dev.k, dev.v, dev.g, dev.beta, dev.state);
    EXPECT_TRUE(bit_equal(out.to_host(), aligned.state.to_host()));
  }
}

TEST(GatedDeltaGpu, KeyDimBeyondTheKernelIsRefused) {
  RUDNN_REQUIRE_CUDA();
  const Tensor q = Tensor::zeros({1, 1, 1, 288}, DType::f32, kGpu);
  const Tensor v = Tensor::zeros({1, 1, 1, 4}, DType::f32, kGpu);
  const Tensor g = Tensor::zeros({1, 1, 1}, DType::f32, kGpu);
  const Tensor s = Tensor::zeros({1, 1, 4, 288}, DType::f32, kGpu);
  EXPECT_TRUE(throws_error([&] { gated_delta(q, q, v, g, g, s); }, ErrorCode::Unsupported,
                           {"gated_delta", "Dk = 288", "Dk <= 256"}));
}

}  // namespace
}  // namespace rudnn::test
