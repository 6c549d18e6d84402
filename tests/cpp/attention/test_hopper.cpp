// The Hopper forward (Flash on sm_90a: wgmma + TMA, AttentionPlan::flash_wgmma) against the
// float64 CPU reference, and on long sequences against FlashScalar on the GPU: head sizes
// 64 / 128 / 256, lengths 1, 7, 63, 65, 128, 1000, 4096 (no multiple of the 128-row and
// 128- or 64-key tiles among them), Lq != Lk both ways under causal (bottom-right: rows with
// no key give zeros and lse -inf), GQA 1 / 4 / 8, both layouts and strided views (views TMA
// cannot read go through a dense copy), f16 and bf16, the logsumexp; every allocation
// poisoned (NaN bytes), inputs checked bit-unchanged. On a GPU other than sm_90 the plan
// tests check that the Hopper kernel is never chosen and the numeric tests still run (the
// mma.sync Flash). Without a CUDA device every test is skipped.
#include <cmath>
#include <string>
#include <vector>

#include "support/poison.h"
#include "support/test_support.h"

namespace rudnn::test {
namespace {

constexpr Device kGpu = Device::cuda(0);

struct Case {
  int64_t b, hq, hkv, lq, lk, d;
  bool causal;
  bool bshd;
  DType dtype;
};

std::string describe(const Case& c) {
  return "B" + std::to_string(c.b) + " Hq" + std::to_string(c.hq) + " Hkv" +
         std::to_string(c.hkv) + " Lq" + std::to_string(c.lq) + " Lk" + std::to_string(c.lk) +
         " D" + std::to_string(c.d) + (c.causal ? " causal" : " full") +
         (c.bshd ? " bshd " : " bhsd ") + dtype_name(c.dtype);
}

Shape shape_of(const Case& c, int64_t heads, int64_t len) {
  return c.bshd ? Shape{c.b, len, heads, c.d} : Shape{c.b, heads, len, c.d};
}

AttentionOptions options_of(const Case& c) {
  AttentionOptions o = AttentionOptions{}.set_causal(c.causal).set_return_lse();
  if (c.bshd) o.set_layout(AttentionLayout::bshd);
  return o;
}

// Fails when the plan for these device tensors is not the Hopper kernel on an sm_90 device
// (else the test would silently exercise the mma.sync kernel).
void expect_hopper_plan(const Tensor& q, const Tensor& k, const Tensor& v,
                        const AttentionOptions& o, AttentionStrategy st) {
  const AttentionPlan plan = plan_attention(q.shape(), k.shape(), v.shape(), q.dtype(), o, st);
  EXPECT_EQ(plan.kernel, AttentionKernel::Flash);
  EXPECT_EQ(plan.flash_wgmma, device_is_sm90()) << "the plan's choice of the Hopper kernel";
}

// Flash (and Auto) on the GPU against the CPU reference: out and lse, inputs unchanged.
void expect_matches_reference(const Case& c, const Tensor& q, const Tensor& k, const Tensor& v) {
  const AttentionOptions o = options_of(c);
  const AttentionResult ref = attention(q, k, v, o);
  const Tensor gq = q.to(kGpu), gk = k.to(kGpu), gv = v.to(kGpu);
  const auto bq = bytes_of(gq), bk = bytes_of(gk), bv = bytes_of(gv);
  for (AttentionStrategy st : {AttentionStrategy::Flash, AttentionStrategy::Auto}) {
    if (st == AttentionStrategy::Auto && c.lq <= 8) continue;  // Auto runs SplitKv there
    SCOPED_TRACE(attention_strategy_name(st));
    expect_hopper_plan(gq, gk, gv, o, st);
    AttentionResult got;
    ASSERT_NO_THROW(got = attention(gq, gk, gv, o, st));
    EXPECT_TRUE(all_close(got.out, ref.out)) << "out";
    EXPECT_TRUE(all_close(got.lse, ref.lse, 1e-5)) << "lse";
  }
  EXPECT_EQ(bytes_of(gq), bq) << "q was modified";
  EXPECT_EQ(bytes_of(gk), bk) << "k was modified";
  EXPECT_EQ(bytes_of(gv), bv) << "v was modified";
}

TEST(AttentionHopper, PlanChoosesTheKernelOnlyForPlainOptions) {
  RUDNN_REQUIRE_CUDA();
  RUDNN_SEEDED_RNG(rng);
  const bool hopper = device_is_sm90();
  const Shape q{2, 8, 300, 128}, k{2, 2, 300, 128};
  for (DType dt : {DType::bf16, DType::f16}) {
    SCOPED_TRACE(dtype_name(dt));
    for (AttentionStrategy st : {AttentionStrategy::Auto, AttentionStrategy::Flash}) {
      SCOPED_TRACE(attention_strategy_name(st));
      for (bool causal : {false, true}) {
        const AttentionPlan p = plan_attention(q, k, k, dt, AttentionOptions{}.set_causal(causal)
                                                                 .set_scale(0.2f), st);
        EXPECT_EQ(p.kernel, AttentionKernel::Flash);
        EXPECT_EQ(p.flash_wgmma, hopper) << (causal ? "causal" : "full");
        EXPECT_EQ(p.scratch_bytes, 0u);
      }
      for (int64_t d : {64, 256}) {
        const Shape qd{1, 4, 200, d}, kd{1, 4, 200, d};
        EXPECT_EQ(plan_attention(qd, kd, kd, dt, {}, st).flash_wgmma, hopper) << "D" << d;
      }
      // Head sizes and options the Hopper kernel does not take keep the mma.sync kernel.
      const Shape q96{1, 4, 200, 96}, q192{1, 4, 200, 192}, v128{1, 4, 200, 128};
      EXPECT_FALSE(plan_attention(q96, q96, q96, dt, {}, st).flash_wgmma) << "D96";
      EXPECT_FALSE(plan_attention(q192, q192, v128, dt, {}, st).flash_wgmma) << "D192 Dv128";
      const std::vector<std::pair<std::string, AttentionOptions>> rich = {
          {"mask", AttentionOptions{}.set_mask(Tensor::empty({300, 300}, DType::boolean, kGpu))},
          {"bias", AttentionOptions{}.set_bias(Tensor::empty({300, 300}, dt, kGpu))},
          {"sinks", AttentionOptions{}.set_sinks(Tensor::empty({8}, DType::f32, kGpu))},
          {"window", AttentionOptions{}.set_causal().set_window(64)},
          {"softcap", AttentionOptions{}.set_softcap(30.0f)},
          {"alibi", AttentionOptions{}.set_alibi_slopes(Tensor::empty({8}, DType::f32, kGpu))}};
      for (const auto& [label, o] : rich) {
        const AttentionPlan p = plan_attention(q, k, k, dt, o, st);
        EXPECT_EQ(p.kernel, AttentionKernel::Flash) << label;
        EXPECT_FALSE(p.flash_wgmma) << label;
      }
    }
    // Varlen keeps the mma.sync kernel.
    const std::vector<int32_t> cu{0, 100, 300};
    const AttentionOptions vo = AttentionOptions{}.set_varlen(
        Tensor::from_host(cu, {3}).to(kGpu), Tensor::from_host(cu, {3}).to(kGpu), 200, 200);
    const AttentionPlan pv = plan_attention({300, 8, 128}, {300, 2, 128}, {300, 2, 128}, dt, vo,
                                            AttentionStrategy::Flash);
    EXPECT_FALSE(pv.flash_wgmma) << "varlen";
    // The CPU runs the reference; the backward reports its own Hopper kernel (D = Dv = 128,
    // test_hopper_backward.cpp), not for the forward's D = 64.
    EXPECT_FALSE(plan_attention(q, k, k, dt, {}, AttentionStrategy::Auto, Device::cpu())
                     .flash_wgmma);
    EXPECT_EQ(plan_attention_backward(q, k, k, dt, {}, AttentionStrategy::Flash).flash_wgmma,
              hopper);
    const Shape q64{1, 4, 200, 64};
    EXPECT_FALSE(
        plan_attention_backward(q64, q64, q64, dt, {}, AttentionStrategy::Flash).flash_wgmma)
        << "backward D64";
  }
  (void)rng;
}

// The grid against the float64 reference.
TEST(AttentionHopper, ForwardMatchesTheReference) {
  RUDNN_REQUIRE_CUDA();
  RUDNN_SEEDED_RNG(rng);
  struct Len {
    int64_t lq, lk;
  };
  const std::vector<Len> lens = {{1, 1},     {7, 7},   {63, 65},  {65, 63},  {128, 128},
                                 {1000, 1000}, {7, 1000}, {1000, 7}, {128, 1}, {1, 1000},
                                 {200, 129}};
  const std::pair<int64_t, int64_t> heads[] = {{2, 2}, {4, 1}, {8, 1}};  // GQA 1, 4, 8
  int n = 0;
  for (int64_t d : {64, 128, 256}) {
    for (const Len& len : lens) {
      for (bool causal : {false, true}) {
        for (DType dt : {DType::bf16, DType::f16}) {
          const auto [hq, hkv] = heads[n % 3];
          const bool bshd = (n / 3) % 2 == 1;
          ++n;
          // The reference's time: the 1000 x 1000 cases take one batch, 2 query heads, 1 KV head.
          const bool big = len.lq * len.lk >= 1000000;
          const Case c{big ? 1 : 2, big ? 2 : hq, big ? 1 : hkv, len.lq, len.lk, d, causal, bshd,
                       dt};
          SCOPED_TRACE(describe(c));
          const Tensor q = random_tensor(rng, shape_of(c, c.hq, c.lq), dt);
          const Tensor k = random_tensor(rng, shape_of(c, c.hkv, c.lk), dt);
          const Tensor v = random_tensor(rng, shape_of(c, c.hkv, c.lk), dt);
          expect_matches_reference(c, q, k, v);
        }
      }
    }
  }
}

// Logits over a wide range (q scaled up: the online rescaling across tiles matters), and an
// explicit scale.
TEST(AttentionHopper, LargeLogitsAndExplicitScale) {
  RUDNN_REQUIRE_CUDA();
  RUDNN_SEEDED_RNG(rng);
  for (int64_t d : {64, 128, 256}) {
    for (DType dt : {DType::bf16, DType::f16}) {
      for (bool causal : {false, true}) {
        const Case c{1, 4, 2, 300, 517, d, causal, false, dt};
        SCOPED_TRACE(describe(c) + " q ~ N(0, 8)");
        const Tensor q = random_tensor(rng, shape_of(c, c.hq, c.lq), dt, 0.0f, 8.0f);
        const Tensor k = random_tensor(rng, shape_of(c, c.hkv, c.lk), dt);
        const Tensor v = random_tensor(rng, shape_of(c, c.hkv, c.lk), dt, 3.0f, 2.0f);
        expect_matches_reference(c, q, k, v);
        const AttentionOptions o = options_of(c).set_scale(0.9f);
        const AttentionResult ref = attention(q, k, v, o);
        const AttentionResult got =
            attention(q.to(kGpu), k.to(kGpu), v.to(kGpu), o, AttentionStrategy::Flash);
        EXPECT_TRUE(all_close(got.out, ref.out)) << "scale 0.9 out";
        EXPECT_TRUE(all_close(got.lse, ref.lse, 1e-5)) << "scale 0.9 lse";
      }
    }
  }
}

// Long sequences (4096, and Lq != Lk under causal) against FlashScalar on the GPU (the CPU
// reference would take minutes): FP32 accumulation both, so they agree to the output's
// rounding.
TEST(AttentionHopper, LongSequencesMatchFlashScalar) {
  RUDNN_REQUIRE_CUDA();
  RUDNN_SEEDED_RNG(rng);
  const std::vector<Case> cases = {
      {1, 8, 1, 4096, 4096, 128, true, false, DType::bf16},
      {1, 8, 1, 4096, 4096, 128, false, true, DType::bf16},
      {1, 4, 4, 4096, 4096, 64, true, true, DType::f16},
      {1, 4, 1, 4096, 4096, 256, true, false, DType::bf16},
      {2, 4, 1, 1000, 4096, 128, true, false, DType::f16},
      {1, 8, 2, 4096, 1000, 128, true, true, DType::bf16},
      {1, 8, 8, 4096, 4096, 256, false, false, DType::f16},
      // Causal block order in sections of heads that share L2: 4 MiB of K/V per head makes
      // sections of a few heads on an H200 (50 MiB L2), the last one narrower.
      {1, 8, 8, 4096, 4096, 256, true, true, DType::bf16},
      {3, 5, 5, 2100, 3000, 128, true, false, DType::f16}};
  for (const Case& c : cases) {
    SCOPED_TRACE(describe(c));
    const Tensor q = random_tensor(rng, shape_of(c, c.hq, c.lq), c.dtype).to(kGpu);
    const Tensor k = random_tensor(rng, shape_of(c, c.hkv, c.lk), c.dtype).to(kGpu);
    const Tensor v = random_tensor(rng, shape_of(c, c.hkv, c.lk), c.dtype).to(kGpu);
    const AttentionOptions o = options_of(c);
    expect_hopper_plan(q, k, v, o, AttentionStrategy::Flash);
    const AttentionResult want = attention(q, k, v, o, AttentionStrategy::FlashScalar);
    const AttentionResult got = attention(q, k, v, o, AttentionStrategy::Flash);
    EXPECT_TRUE(all_close(got.out, want.out)) << "out";
    EXPECT_TRUE(all_close(got.lse, want.lse, 1e-5)) << "lse";
  }
}

// Strided views: a BSHD storage read as BHSD (head axis innermost of the middle two), head
// slices of a wider tensor, views TMA cannot read (rows one element into wider rows: a dense
// copy first), and an output TMA-unfriendly view (element stores), an output poisoned
// through attention_into.
TEST(AttentionHopper, StridedViewsAndOutputs) {
  RUDNN_REQUIRE_CUDA();
  RUDNN_SEEDED_RNG(rng);
  for (DType dt : {DType::bf16, DType::f16}) {
    for (int64_t d : {64, 128}) {
      for (bool causal : {false, true}) {
        const std::string label =
            std::string(dtype_name(dt)) + " D" + std::to_string(d) + (causal ? " causal" : "");
        const AttentionOptions o = AttentionOptions{}.set_causal(causal).set_return_lse();
        {
          SCOPED_TRACE(label + " bshd storage as bhsd views");
          const Tensor q = random_tensor(rng, {2, 150, 8, d}, dt).transpose(1, 2);
          const Tensor k = random_tensor(rng, {2, 170, 2, d}, dt).transpose(1, 2);
          const Tensor v = random_tensor(rng, {2, 170, 2, d}, dt).transpose(1, 2);
          const Case c{2, 8, 2, 150, 170, d, causal, false, dt};
          expect_matches_reference(c, q, k, v);
        }
        {
          SCOPED_TRACE(label + " head slices of wider tensors");
          const Tensor q = random_tensor(rng, {1, 12, 90, d}, dt).slice(1, 2, 10);
          const Tensor k = random_tensor(rng, {1, 5, 110, d}, dt).slice(1, 1, 3);
          const Tensor v = random_tensor(rng, {1, 5, 110, d}, dt).slice(1, 3, 5);
          const Case c{1, 8, 2, 90, 110, d, causal, false, dt};
          expect_matches_reference(c, q, k, v);
        }
        {
          SCOPED_TRACE(label + " rows one element into wider rows (copied for TMA)");
          const Tensor q = random_tensor(rng, {1, 4, 70, d + 1}, dt).slice(3, 1, d + 1);
          const Tensor k = random_tensor(rng, {1, 2, 90, d + 1}, dt).slice(3, 1, d + 1);
          const Tensor v = random_tensor(rng, {1, 2, 90, d + 1}, dt).slice(3, 1, d + 1);
          const Case c{1, 4, 2, 70, 90, d, causal, false, dt};
          expect_matches_reference(c, q, k, v);
          const AttentionResult ref = attention(q, k, v, o);
          const Tensor wide = poisoned({1, 4, 70, d + 1}, dt, kGpu);
          const Tensor out = wide.slice(3, 1, d + 1);
          const Tensor lse = poisoned({1, 4, 70}, DType::f32, kGpu);
          attention_into(out, lse, q.to(kGpu), k.to(kGpu), v.to(kGpu), o,
                         AttentionStrategy::Flash);
          EXPECT_TRUE(all_close(out.contiguous(), ref.out)) << "unaligned out";
          EXPECT_TRUE(all_close(lse, ref.lse, 1e-5)) << "lse into";
          // The column before each row was not written (still the poison).
          const std::vector<double> first = to_doubles(wide.slice(3, 0, 1).contiguous());
          for (double x : first) EXPECT_TRUE(std::isnan(x)) << "wrote outside out's view";
        }
        {
          SCOPED_TRACE(label + " poisoned aligned out, Lq > Lk causal (rows with no key)");
          const Tensor q = random_tensor(rng, {1, 4, 300, d}, dt);
          const Tensor k = random_tensor(rng, {1, 4, 100, d}, dt);
          const AttentionResult ref = attention(q, k, k, o);
          const Tensor out = poisoned({1, 4, 300, d}, dt, kGpu);
          const Tensor lse = poisoned({1, 4, 300}, DType::f32, kGpu);
          attention_into(out, lse, q.to(kGpu), k.to(kGpu), k.to(kGpu), o,
                         AttentionStrategy::Flash);
          EXPECT_TRUE(all_close(out, ref.out)) << "out into";
          EXPECT_TRUE(all_close(lse, ref.lse, 1e-5)) << "lse into";
        }
      }
    }
  }
}

// No keys at all (Lk = 0): zeros and lse -inf, causal or not, as the reference gives. The
// launcher writes them with a plain kernel (no tensor-core launch without keys); every
// element of a poisoned out (aligned, and a strided view whose neighbours must stay poison)
// and of the lse must be written, on every repetition.
TEST(AttentionHopper, NoKeys) {
  RUDNN_REQUIRE_CUDA();
  RUDNN_SEEDED_RNG(rng);
  for (int64_t d : {64, 128, 256}) {
    for (bool causal : {false, true}) {
      for (DType dt : {DType::bf16, DType::f16}) {
        const Case c{2, 4, 2, 130, 0, d, causal, d == 128, dt};
        SCOPED_TRACE(describe(c));
        const Tensor q = random_tensor(rng, shape_of(c, c.hq, c.lq), c.dtype);
        const Tensor k = random_tensor(rng, shape_of(c, c.hkv, c.lk), c.dtype);
        expect_matches_reference(c, q, k, k);
        const AttentionOptions o = options_of(c);
        const Tensor gq = q.to(kGpu), gk = k.to(kGpu);
        const size_t numel = static_cast<size_t>(2 * 4 * 130 * d);
        for (int rep = 0; rep < 3; ++rep) {
          SCOPED_TRACE("attention_into, repetition " + std::to_string(rep));
          const Shape os = shape_of(c, c.hq, c.lq);
          const Shape wide_shape{os[0], os[1], os[2], d + 8};
          const Tensor wide = poisoned(wide_shape, dt, kGpu);
          const Tensor out = wide.slice(3, 0, d);
          const Tensor lse = poisoned({2, 4, 130}, DType::f32, kGpu);
          ASSERT_NO_THROW(attention_into(out, lse, gq, gk, gk, o, AttentionStrategy::Flash));
          const std::vector<double> got = to_doubles(out.contiguous());
          ASSERT_EQ(got.size(), numel);
          size_t bad = 0;
          for (size_t e = 0; e < got.size(); ++e) bad += got[e] != 0.0 ? 1 : 0;
          EXPECT_EQ(bad, 0u) << "elements of out that are not zero";
          for (double x : to_doubles(lse)) {
            ASSERT_TRUE(std::isinf(x) && x < 0) << "lse " << x;
          }
          for (double x : to_doubles(wide.slice(3, d, d + 8).contiguous())) {
            ASSERT_TRUE(std::isnan(x)) << "wrote outside out's view";
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace rudnn::test
