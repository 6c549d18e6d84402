// The Hopper backward (Flash on sm_90a: wgmma + TMA, the backward plan's flash_wgmma) against
// the float64 CPU reference: D = Dv = 128, causal and not, GQA 1 / 4, Lq != Lk both ways
// (causal: rows with no key), lengths 1, 63, 65, 130, 300 (no multiple of the 64-row and
// 128-key tiles among most), both layouts, strided views (views TMA cannot read go through a
// dense copy, outputs through element stores), f16 and bf16; outputs poisoned before the op
// (the binary poisons every allocation, the scratch included: the dQ workspace must be
// cleared by the op), inputs checked bit-unchanged, two deterministic runs bit-equal, and a
// call with softcap that must run the mma.sync kernels and still be right. On a GPU other
// than sm_90 the plan tests check that the Hopper kernel is never chosen and the numeric
// tests still run (the mma.sync backward). Without a CUDA device every test is skipped.
#include <cmath>
#include <string>
#include <vector>

#include "support/test_support.h"

namespace rudnn::test {
namespace {

constexpr Device kGpu = Device::cuda(0);

struct Case {
  int64_t b, hq, hkv, lq, lk;
  bool causal;
  bool bshd;
  DType dtype;
};

constexpr int64_t kD = 128;

std::string describe(const Case& c) {
  return "B" + std::to_string(c.b) + " Hq" + std::to_string(c.hq) + " Hkv" +
         std::to_string(c.hkv) + " Lq" + std::to_string(c.lq) + " Lk" + std::to_string(c.lk) +
         " D128" + (c.causal ? " causal" : " full") + (c.bshd ? " bshd " : " bhsd ") +
         dtype_name(c.dtype);
}

Shape shape_of(const Case& c, int64_t heads, int64_t len) {
  return c.bshd ? Shape{c.b, len, heads, kD} : Shape{c.b, heads, len, kD};
}

AttentionOptions options_of(const Case& c) {
  AttentionOptions o = AttentionOptions{}.set_causal(c.causal).set_return_lse();
  if (c.bshd) o.set_layout(AttentionLayout::bshd);
  return o;
}

// The backward of the reference forward (out and lse as stored) on the GPU against the
// reference backward: Flash and Auto, into poisoned outputs, inputs unchanged, the default
// and the deterministic mode, two deterministic runs bit-equal; dsinks with sinks. `hopper`:
// whether the plan must be the Hopper kernel on an sm_90 device.
void expect_backward_matches(const Tensor& q, const Tensor& k, const Tensor& v,
                             const AttentionOptions& options, Rng& rng, bool hopper = true) {
  AttentionOptions o = options;
  o.set_return_lse();
  const AttentionResult fwd = attention(q, k, v, o);
  const Tensor dout = random_tensor(rng, fwd.out.shape(), q.dtype());
  const AttentionGrads ref = attention_backward(dout, q, k, v, fwd.out, fwd.lse, o);
  const Tensor gq = q.to(kGpu), gk = k.to(kGpu), gv = v.to(kGpu), gout = fwd.out.to(kGpu),
               glse = fwd.lse.to(kGpu), gdout = dout.to(kGpu);
  const auto bq = bytes_of(gq), bk = bytes_of(gk), bv = bytes_of(gv), bo = bytes_of(gout),
             bl = bytes_of(glse), bd = bytes_of(gdout);
  AttentionOptions og = o;  // the options' tensors on the GPU
  if (og.sinks.defined()) og.sinks = og.sinks.to(kGpu);
  for (AttentionStrategy st : {AttentionStrategy::Flash, AttentionStrategy::Auto}) {
    SCOPED_TRACE(attention_strategy_name(st));
    const AttentionPlan plan =
        plan_attention_backward(q.shape(), k.shape(), v.shape(), q.dtype(), og, st, kGpu);
    EXPECT_EQ(plan.kernel, AttentionKernel::Flash);
    EXPECT_EQ(plan.flash_wgmma, hopper && device_is_sm90())
        << "the plan's choice of the Hopper backward";
    for (bool det : {false, true}) {
      SCOPED_TRACE(det ? "deterministic" : "default mode");
      AttentionOptions go = og;
      go.set_deterministic(det);
      AttentionGrads got;
      got.dq = poisoned(q.shape(), q.dtype(), kGpu);
      got.dk = poisoned(k.shape(), q.dtype(), kGpu);
      got.dv = poisoned(v.shape(), q.dtype(), kGpu);
      if (o.sinks.defined()) got.dsinks = poisoned(o.sinks.shape(), o.sinks.dtype(), kGpu);
      ASSERT_NO_THROW(attention_backward_into(got, gdout, gq, gk, gv, gout, glse, go, st));
      const double tol = tolerance(q.dtype());
      EXPECT_TRUE(all_close(got.dq, ref.dq, tol)) << "dq";
      EXPECT_TRUE(all_close(got.dk, ref.dk, tol)) << "dk";
      EXPECT_TRUE(all_close(got.dv, ref.dv, tol)) << "dv";
      if (o.sinks.defined()) EXPECT_TRUE(all_close(got.dsinks, ref.dsinks, 1e-4)) << "dsinks";
      if (det) {
        const AttentionGrads again = attention_backward(gdout, gq, gk, gv, gout, glse, go, st);
        EXPECT_TRUE(bit_equal(again.dq, got.dq)) << "dq of two deterministic runs";
        EXPECT_TRUE(bit_equal(again.dk, got.dk)) << "dk of two deterministic runs";
        EXPECT_TRUE(bit_equal(again.dv, got.dv)) << "dv of two deterministic runs";
        if (o.sinks.defined())
          EXPECT_TRUE(bit_equal(again.dsinks, got.dsinks)) << "dsinks of two deterministic runs";
      }
    }
  }
  EXPECT_EQ(bytes_of(gq), bq) << "q was modified";
  EXPECT_EQ(bytes_of(gk), bk) << "k was modified";
  EXPECT_EQ(bytes_of(gv), bv) << "v was modified";
  EXPECT_EQ(bytes_of(gout), bo) << "out was modified";
  EXPECT_EQ(bytes_of(glse), bl) << "lse was modified";
  EXPECT_EQ(bytes_of(gdout), bd) << "dout was modified";
}

TEST(AttentionHopperBackward, PlanChoosesTheKernelOnlyWhereItRuns) {
  RUDNN_REQUIRE_CUDA();
  RUDNN_SEEDED_RNG(rng);
  const bool hopper = device_is_sm90();
  const Shape q{2, 8, 300, 128}, k{2, 2, 300, 128};
  for (DType dt : {DType::bf16, DType::f16}) {
    SCOPED_TRACE(dtype_name(dt));
    for (AttentionStrategy st : {AttentionStrategy::Auto, AttentionStrategy::Flash}) {
      SCOPED_TRACE(attention_strategy_name(st));
      for (bool causal : {false, true}) {
        SCOPED_TRACE(causal ? "causal" : "full");
        const AttentionOptions o = AttentionOptions{}.set_causal(causal);
        const AttentionPlan plan = plan_attention_backward(q, k, k, dt, o, st, kGpu);
        EXPECT_EQ(plan.kernel, AttentionKernel::Flash);
        EXPECT_EQ(plan.flash_wgmma, hopper);
        if (hopper) {
          // D_i per row, then the FP32 dQ workspace over rows rounded up to 64 (and its
          // counters).
          const size_t workspace = size_t{2} * 8 * 320 * 128 * 4;
          EXPECT_GE(plan.scratch_bytes, workspace + size_t{2} * 8 * 300 * 4);
        }
      }
      // Sinks only enter the logsumexp: the Hopper kernel takes them.
      EXPECT_EQ(plan_attention_backward(
                    q, k, k, dt,
                    AttentionOptions{}.set_causal().set_sinks(
                        random_tensor(rng, {8}, DType::f32).to(kGpu)),
                    st, kGpu)
                    .flash_wgmma,
                hopper)
          << "sinks";
      // Options the Hopper kernel does not take, and head sizes it has no instance for.
      const AttentionOptions others[] = {
          AttentionOptions{}.set_softcap(5.0f),
          AttentionOptions{}.set_causal().set_window(40),
          AttentionOptions{}.set_alibi_slopes(random_tensor(rng, {8}, DType::f32).to(kGpu)),
      };
      for (const AttentionOptions& o : others) {
        EXPECT_FALSE(plan_attention_backward(q, k, k, dt, o, st, kGpu).flash_wgmma);
      }
      const Shape q64{2, 8, 300, 64}, k64{2, 2, 300, 64};
      EXPECT_FALSE(plan_attention_backward(q64, k64, k64, dt, {}, st, kGpu).flash_wgmma) << "D64";
    }
  }
}

TEST(AttentionHopperBackward, MatchesTheReference) {
  RUDNN_REQUIRE_CUDA();
  RUDNN_SEEDED_RNG(rng);
  const std::vector<Case> shapes = {
      {1, 1, 1, 1, 1, false, false, DType::bf16},   {1, 2, 2, 1, 130, true, false, DType::bf16},
      {2, 4, 1, 63, 65, false, false, DType::bf16}, {1, 4, 1, 130, 63, true, false, DType::bf16},
      {1, 2, 2, 65, 130, true, true, DType::bf16},  {2, 4, 4, 128, 128, true, false, DType::bf16},
      {1, 8, 2, 300, 300, false, true, DType::bf16}, {1, 8, 2, 300, 300, true, false, DType::bf16},
      {1, 2, 1, 300, 100, true, false, DType::bf16}, {1, 2, 1, 100, 300, true, true, DType::bf16},
  };
  for (DType dt : {DType::bf16, DType::f16}) {
    for (Case c : shapes) {
      c.dtype = dt;
      SCOPED_TRACE(describe(c));
      const Tensor q = random_tensor(rng, shape_of(c, c.hq, c.lq), dt);
      const Tensor k = random_tensor(rng, shape_of(c, c.hkv, c.lk), dt);
      const Tensor v = random_tensor(rng, shape_of(c, c.hkv, c.lk), dt);
      expect_backward_matches(q, k, v, options_of(c), rng);
    }
  }
}

// Sinks (gpt-oss): they enter the forward's logsumexp only, so the Hopper kernel runs and the
// row kernel gives dsinks.
TEST(AttentionHopperBackward, Sinks) {
  RUDNN_REQUIRE_CUDA();
  RUDNN_SEEDED_RNG(rng);
  for (DType dt : {DType::bf16, DType::f16}) {
    for (bool causal : {false, true}) {
      const Case c{2, 4, 2, 130, 200, causal, true, dt};
      SCOPED_TRACE(describe(c) + " sinks");
      const Tensor q = random_tensor(rng, shape_of(c, c.hq, c.lq), dt);
      const Tensor k = random_tensor(rng, shape_of(c, c.hkv, c.lk), dt);
      const Tensor v = random_tensor(rng, shape_of(c, c.hkv, c.lk), dt);
      expect_backward_matches(q, k, v,
                              options_of(c).set_sinks(random_tensor(rng, {c.hq}, DType::f32)), rng);
    }
  }
}

// Longer sequences (several key and query tiles per block, the causal diagonal inside them)
// and an explicit scale with larger logits.
TEST(AttentionHopperBackward, LongerSequencesAndScale) {
  RUDNN_REQUIRE_CUDA();
  RUDNN_SEEDED_RNG(rng);
  for (DType dt : {DType::bf16, DType::f16}) {
    for (bool causal : {false, true}) {
      const Case c{1, 4, 2, 1000, 1000, causal, false, dt};
      SCOPED_TRACE(describe(c) + " scale 0.15, inputs stddev 2");
      const Tensor q = random_tensor(rng, shape_of(c, c.hq, c.lq), dt, 0.0f, 2.0f);
      const Tensor k = random_tensor(rng, shape_of(c, c.hkv, c.lk), dt, 0.0f, 2.0f);
      const Tensor v = random_tensor(rng, shape_of(c, c.hkv, c.lk), dt);
      expect_backward_matches(q, k, v, options_of(c).set_scale(0.15f), rng);
    }
  }
}

// Strided views: BSHD storage read as BHSD, head slices of wider tensors, rows one element
// into wider rows (TMA cannot read them: dense copies), and gradients into such views (pair
// and element stores; the columns beside them stay poison).
TEST(AttentionHopperBackward, StridedViews) {
  RUDNN_REQUIRE_CUDA();
  RUDNN_SEEDED_RNG(rng);
  for (DType dt : {DType::bf16, DType::f16}) {
    for (bool causal : {false, true}) {
      const std::string label = std::string(dtype_name(dt)) + (causal ? " causal" : " full");
      const AttentionOptions o = AttentionOptions{}.set_causal(causal);
      {
        SCOPED_TRACE(label + " bshd storage as bhsd views");
        const Tensor q = random_tensor(rng, {2, 150, 8, kD}, dt).transpose(1, 2);
        const Tensor k = random_tensor(rng, {2, 170, 2, kD}, dt).transpose(1, 2);
        const Tensor v = random_tensor(rng, {2, 170, 2, kD}, dt).transpose(1, 2);
        expect_backward_matches(q, k, v, o, rng);
      }
      {
        SCOPED_TRACE(label + " head slices of wider tensors");
        const Tensor q = random_tensor(rng, {1, 12, 90, kD}, dt).slice(1, 2, 10);
        const Tensor k = random_tensor(rng, {1, 5, 110, kD}, dt).slice(1, 1, 3);
        const Tensor v = random_tensor(rng, {1, 5, 110, kD}, dt).slice(1, 3, 5);
        expect_backward_matches(q, k, v, o, rng);
      }
      {
        SCOPED_TRACE(label + " rows one element into wider rows, gradients into such views");
        const Tensor q = random_tensor(rng, {1, 4, 70, kD + 1}, dt).slice(3, 1, kD + 1);
        const Tensor k = random_tensor(rng, {1, 2, 90, kD + 1}, dt).slice(3, 1, kD + 1);
        const Tensor v = random_tensor(rng, {1, 2, 90, kD + 1}, dt).slice(3, 1, kD + 1);
        expect_backward_matches(q, k, v, o, rng);
        AttentionOptions lo = o;
        lo.set_return_lse();
        const AttentionResult fwd = attention(q, k, v, lo);
        const Tensor dout = random_tensor(rng, fwd.out.shape(), dt);
        const AttentionGrads ref = attention_backward(dout, q, k, v, fwd.out, fwd.lse, lo);
        const Tensor wq = poisoned({1, 4, 70, kD + 1}, dt, kGpu);
        const Tensor wk = poisoned({1, 2, 90, kD + 1}, dt, kGpu);
        const Tensor wv = poisoned({1, 2, 90, kD + 1}, dt, kGpu);
        AttentionGrads got;
        got.dq = wq.slice(3, 1, kD + 1);
        got.dk = wk.slice(3, 1, kD + 1);
        got.dv = wv.slice(3, 1, kD + 1);
        ASSERT_NO_THROW(attention_backward_into(got, dout.to(kGpu), q.to(kGpu), k.to(kGpu),
                                                v.to(kGpu), fwd.out.to(kGpu), fwd.lse.to(kGpu),
                                                lo, AttentionStrategy::Flash));
        EXPECT_TRUE(all_close(got.dq.contiguous(), ref.dq)) << "dq into a view";
        EXPECT_TRUE(all_close(got.dk.contiguous(), ref.dk)) << "dk into a view";
        EXPECT_TRUE(all_close(got.dv.contiguous(), ref.dv)) << "dv into a view";
        const Tensor* wides[3] = {&wq, &wk, &wv};
        for (const Tensor* w : wides) {
          for (double x : to_doubles(w->slice(3, 0, 1).contiguous()))
            ASSERT_TRUE(std::isnan(x)) << "wrote outside a gradient's view";
        }
      }
    }
  }
}

// Softcap is not the Hopper kernel's: the plan must pick the mma.sync backward for the same
// shapes, and it must still match the reference.
TEST(AttentionHopperBackward, SoftcapFallsBackAndStaysRight) {
  RUDNN_REQUIRE_CUDA();
  RUDNN_SEEDED_RNG(rng);
  for (DType dt : {DType::bf16, DType::f16}) {
    const Case c{1, 4, 2, 130, 200, true, false, dt};
    SCOPED_TRACE(describe(c) + " softcap 5");
    const Tensor q = random_tensor(rng, shape_of(c, c.hq, c.lq), dt);
    const Tensor k = random_tensor(rng, shape_of(c, c.hkv, c.lk), dt);
    const Tensor v = random_tensor(rng, shape_of(c, c.hkv, c.lk), dt);
    expect_backward_matches(q, k, v, options_of(c).set_softcap(5.0f), rng, false);
  }
}

}  // namespace
}  // namespace rudnn::test
