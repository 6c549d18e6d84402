// The attention family on the GPU against the CPU reference: every strategy over a grid of
// batches, heads, GQA ratios, Lq != Lk, lengths that are no multiple of the tiles (1, 7, 63,
// 65, 1000), every option and dtype, both layouts, varlen with empty and length-1
// sequences; fresh random inputs (the seed is printed on failure), every allocation
// poisoned (NaN bytes), inputs checked bit-unchanged. Then the serial rule bit for bit, the
// backward against the reference, deterministic backward bit-equality, and the plan's
// scratch against what the op allocates. Without a CUDA device every test is skipped.
#include <algorithm>
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "support/poison.h"
#include "support/test_support.h"

#if RUDNN_ATTENTION_TUNING
#include "attention/cuda/tuning.h"
#endif
#if RUDNN_TEST_CUDA
#include <cuda_runtime_api.h>
#endif

namespace rudnn::test {
namespace {

constexpr Device kGpu = Device::cuda(0);

Tensor on(const Tensor& t, Device device) { return t.defined() ? t.to(device) : Tensor(); }

// The options' tensors moved to `device`.
AttentionOptions options_on(AttentionOptions o, Device device) {
  o.mask = on(o.mask, device);
  o.bias = on(o.bias, device);
  o.sinks = on(o.sinks, device);
  o.alibi_slopes = on(o.alibi_slopes, device);
  o.cu_seqlens_q = on(o.cu_seqlens_q, device);
  o.cu_seqlens_k = on(o.cu_seqlens_k, device);
  return o;
}

Tensor bool_tensor(Rng& rng, const Shape& shape, double p_true) {
  std::vector<uint8_t> bytes(static_cast<size_t>(shape_numel(shape)));
  for (auto& b : bytes) b = rng.uniform(0.0f, 1.0f) < p_true ? 1 : 0;
  return Tensor::from_host(bytes.data(), shape, DType::boolean);
}

struct Sizes {
  int64_t b, hq, hkv, lq, lk, d, dv;
};

std::string describe(const Sizes& s) {
  return "B" + std::to_string(s.b) + " Hq" + std::to_string(s.hq) + " Hkv" + std::to_string(s.hkv) +
         " Lq" + std::to_string(s.lq) + " Lk" + std::to_string(s.lk) + " D" + std::to_string(s.d) +
         " Dv" + std::to_string(s.dv);
}

// The option sets of the grid (their tensors made for the sizes, in `dtype` where they may
// take it).
std::vector<std::pair<std::string, AttentionOptions>> option_sets(Rng& rng, const Sizes& s,
                                                                  DType dtype) {
  std::vector<std::pair<std::string, AttentionOptions>> sets;
  sets.push_back({"none", AttentionOptions{}});
  sets.push_back({"causal", AttentionOptions{}.set_causal()});
  sets.push_back(
      {"causal window 37 sinks", AttentionOptions{}.set_causal().set_window(37).set_sinks(
                                     random_tensor(rng, {s.hq}, DType::f32))});
  sets.push_back(
      {"softcap alibi scale", AttentionOptions{}.set_softcap(5.0f).set_scale(0.3f).set_alibi_slopes(
                                  random_tensor(rng, {s.hq}, DType::f32, 0.05f, 0.02f))});
  sets.push_back({"bool mask [B,1,Lq,Lk] + bias [Hq,1,Lk]",
                  AttentionOptions{}
                      .set_mask(bool_tensor(rng, {s.b, 1, s.lq, s.lk}, 0.7))
                      .set_bias(random_tensor(rng, {s.hq, 1, s.lk}, dtype))});
  sets.push_back({"additive mask [Lq,Lk] causal", AttentionOptions{}.set_causal().set_mask(
                                                      random_tensor(rng, {s.lq, s.lk}, dtype))});
  return sets;
}

// Runs the forward on the CPU (the reference) and the GPU with `strategy`, comparing out and
// lse, and checks the GPU inputs are unchanged.
void expect_forward_matches(const Tensor& q, const Tensor& k, const Tensor& v,
                            const AttentionOptions& options, AttentionStrategy strategy) {
  AttentionOptions o = options;
  o.set_return_lse();
  const AttentionResult ref = attention(q, k, v, o);
  const Tensor gq = q.to(kGpu), gk = k.to(kGpu), gv = v.to(kGpu);
  const AttentionOptions go = options_on(o, kGpu);
  const auto before = bytes_of(gq);
  const auto before_k = bytes_of(gk);
  AttentionResult got;
  ASSERT_NO_THROW(got = attention(gq, gk, gv, go, strategy));
  EXPECT_TRUE(all_close(got.out, ref.out)) << "out";
  EXPECT_TRUE(all_close(got.lse, ref.lse, 1e-5)) << "lse";
  EXPECT_EQ(bytes_of(gq), before) << "q was modified";
  EXPECT_EQ(bytes_of(gk), before_k) << "k was modified";
}

// Flash's head sizes (attention/plan.h's flash_takes_heads).
bool flash_heads(int64_t d, int64_t dv) {
  if (d == 192 && dv == 128) return true;
  return d == dv && (d == 64 || d == 96 || d == 128 || d == 192 || d == 256);
}

std::vector<AttentionStrategy> strategies_for(const Sizes& s, bool varlen, DType dtype) {
  std::vector<AttentionStrategy> v{AttentionStrategy::Auto, AttentionStrategy::FlashScalar};
  if (!varlen) v.push_back(AttentionStrategy::Composed);
  if (s.lq <= 8) v.push_back(AttentionStrategy::SplitKv);
  if (dtype != DType::f32 && flash_heads(s.d, s.dv)) v.push_back(AttentionStrategy::Flash);
  return v;
}

const char* name(AttentionStrategy s) { return attention_strategy_name(s); }

TEST(AttentionGpu, ForwardMatchesTheReference) {
  RUDNN_REQUIRE_CUDA();
  RUDNN_SEEDED_RNG(rng);
  const std::vector<Sizes> grid = {
      {1, 1, 1, 1, 1, 64, 64},      {2, 4, 2, 7, 7, 64, 64},      {1, 8, 2, 63, 65, 128, 128},
      {2, 4, 4, 65, 63, 96, 96},    {1, 4, 1, 1, 1000, 128, 128}, {1, 2, 2, 8, 1000, 256, 256},
      {1, 6, 3, 3, 300, 192, 128},  {1, 2, 1, 100, 37, 40, 24},   {1, 2, 2, 33, 33, 512, 512},
      {1, 2, 1, 5, 70, 1024, 1000}, {1, 2, 2, 1000, 1000, 64, 64}};
  for (const Sizes& s : grid) {
    for (DType dt : {DType::f32, DType::f16, DType::bf16}) {
      const Tensor q = random_tensor(rng, {s.b, s.hq, s.lq, s.d}, dt);
      const Tensor k = random_tensor(rng, {s.b, s.hkv, s.lk, s.d}, dt);
      const Tensor v = random_tensor(rng, {s.b, s.hkv, s.lk, s.dv}, dt);
      for (const auto& [label, options] : option_sets(rng, s, dt)) {
        for (AttentionStrategy st : strategies_for(s, false, dt)) {
          // The largest shapes run two option sets only (the CPU reference's time).
          if (s.lq * s.lk >= 1000000 && label != "none" && label != "causal window 37 sinks")
            continue;
          SCOPED_TRACE(describe(s) + " " + dtype_name(dt) + " " + label + " " + name(st));
          expect_forward_matches(q, k, v, options, st);
        }
      }
    }
  }
}

TEST(AttentionGpu, EngineLayoutAndStridedViews) {
  RUDNN_REQUIRE_CUDA();
  RUDNN_SEEDED_RNG(rng);
  for (DType dt : {DType::f32, DType::bf16}) {
    // [B, L, H, D] buffers, as bshd and as their transposed [B, H, L, D] views; v a slice of
    // a wider buffer (rows not dense: the kernels read it in place).
    const Tensor q = random_tensor(rng, {2, 70, 8, 64}, dt);
    const Tensor k = random_tensor(rng, {2, 90, 2, 64}, dt);
    const Tensor wide = random_tensor(rng, {2, 90, 2, 80}, dt);
    const Tensor v = wide.slice(3, 8, 72);
    for (AttentionStrategy st : strategies_for({2, 8, 2, 70, 90, 64, 64}, false, dt)) {
      SCOPED_TRACE(std::string(dtype_name(dt)) + " " + name(st));
      expect_forward_matches(q, k, v,
                             AttentionOptions{}.set_causal().set_layout(AttentionLayout::bshd), st);
      expect_forward_matches(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                             AttentionOptions{}.set_causal(), st);
    }
  }
}

TEST(AttentionGpu, VarlenMatchesTheReference) {
  RUDNN_REQUIRE_CUDA();
  RUDNN_SEEDED_RNG(rng);
  // Sequences of (Lq, Lk): (0, 5), (1, 1), (65, 200), (7, 7), (1, 0), (130, 130).
  const std::vector<int32_t> lq{0, 1, 65, 7, 1, 130}, lk{5, 1, 200, 7, 0, 130};
  std::vector<int32_t> cu_q{0}, cu_k{0};
  for (size_t b = 0; b < lq.size(); ++b) {
    cu_q.push_back(cu_q.back() + lq[b]);
    cu_k.push_back(cu_k.back() + lk[b]);
  }
  const int64_t hq = 4, hkv = 2, n = static_cast<int64_t>(lq.size()) + 1;
  for (DType dt : {DType::f32, DType::bf16}) {
    for (int64_t d : {int64_t{64}, int64_t{100}}) {
      const Tensor q = random_tensor(rng, {cu_q.back(), hq, d}, dt);
      const Tensor k = random_tensor(rng, {cu_k.back(), hkv, d}, dt);
      const Tensor v = random_tensor(rng, {cu_k.back(), hkv, d}, dt);
      for (bool causal : {false, true}) {
        AttentionOptions o =
            AttentionOptions{}.set_causal(causal).set_sinks(random_tensor(rng, {hq}, DType::f32));
        o.set_varlen(Tensor::from_host(cu_q, {n}), Tensor::from_host(cu_k, {n}), 130, 200);
        for (AttentionStrategy st : {AttentionStrategy::Auto, AttentionStrategy::FlashScalar}) {
          SCOPED_TRACE(std::string(dtype_name(dt)) + " D" + std::to_string(d) +
                       (causal ? " causal " : " ") + name(st));
          expect_forward_matches(q, k, v, o, st);
        }
      }
      // Decode-sized varlen: at most 8 queries per sequence, SplitKv.
      const std::vector<int32_t> dq_cu{0, 1, 1, 9, 12}, dk_cu{0, 600, 601, 1609, 1612};
      const Tensor q8 = random_tensor(rng, {12, hq, d}, dt);
      const Tensor k8 = random_tensor(rng, {1612, hkv, d}, dt);
      const Tensor v8 = random_tensor(rng, {1612, hkv, d}, dt);
      AttentionOptions o8 = AttentionOptions{}.set_causal();
      o8.set_varlen(Tensor::from_host(dq_cu, {5}), Tensor::from_host(dk_cu, {5}), 8, 1008);
      SCOPED_TRACE(std::string(dtype_name(dt)) + " decode varlen");
      expect_forward_matches(q8, k8, v8, o8, AttentionStrategy::SplitKv);
    }
  }
}

#if RUDNN_ATTENTION_TUNING
// Sets SplitKv's kernel and partition size for a scope (attention/cuda/tuning.h).
struct SplitKvChoice {
  attn::cuda::KernelTuning saved = attn::cuda::kernel_tuning();
  SplitKvChoice(bool tensor_cores, int64_t keys = 0) {
    attn::cuda::kernel_tuning().split_kv_tensor_cores = tensor_cores;
    attn::cuda::kernel_tuning().split_kv_keys = keys;
  }
  ~SplitKvChoice() { attn::cuda::kernel_tuning() = saved; }
};

// SplitKv's two kernels, tensor cores and CUDA cores, over what the tensor-core one takes
// (f16 / bf16, D = Dv in {64, 128, 256}): row groups of 16 (GQA ratios 1 to 64, up to 8
// queries), one and many partitions (partitions of 128 keys force the merge pass at short
// lengths), lengths that are no multiple of the 16-key tiles, every option set, both
// layouts, rows that are not 16-byte aligned (the element-wise copies), varlen; and the
// plan's report of the kernel.
TEST(AttentionGpu, SplitKvTensorCoresAndCudaCores) {
  RUDNN_REQUIRE_CUDA();
  RUDNN_SEEDED_RNG(rng);
  const bool sm80 = device_compute_major() >= 8;
  const std::vector<Sizes> grid = {{1, 4, 1, 1, 1, 64, 64},       {2, 8, 2, 3, 77, 128, 128},
                                   {1, 64, 1, 1, 300, 128, 128},  {2, 32, 2, 3, 129, 64, 64},
                                   {1, 4, 4, 8, 1000, 256, 256},  {3, 6, 3, 5, 2049, 128, 128}};
  for (bool tensor_cores : {true, false}) {
    for (int64_t keys : {int64_t{0}, int64_t{128}}) {
      const SplitKvChoice choice(tensor_cores, keys);
      for (const Sizes& s : grid) {
        for (DType dt : {DType::f16, DType::bf16}) {
          const Tensor q = random_tensor(rng, {s.b, s.hq, s.lq, s.d}, dt);
          const Tensor k = random_tensor(rng, {s.b, s.hkv, s.lk, s.d}, dt);
          const Tensor v = random_tensor(rng, {s.b, s.hkv, s.lk, s.dv}, dt);
          const AttentionPlan plan = plan_attention(q.shape(), k.shape(), v.shape(), dt, {},
                                                    AttentionStrategy::SplitKv, kGpu);
          EXPECT_EQ(plan.split_tensor_cores, tensor_cores && sm80) << describe(s);
          if (keys > 0) EXPECT_EQ(plan.split_keys, keys);
          for (const auto& [label, options] : option_sets(rng, s, dt)) {
            SCOPED_TRACE(describe(s) + " " + dtype_name(dt) + " " + label +
                         (tensor_cores ? " tensor cores" : " CUDA cores") + " keys " +
                         std::to_string(keys));
            expect_forward_matches(q, k, v, options, AttentionStrategy::SplitKv);
          }
        }
      }
      for (DType dt : {DType::f16, DType::bf16}) {
        SCOPED_TRACE(std::string(dtype_name(dt)) + (tensor_cores ? " tensor cores" : " CUDA cores") +
                     " keys " + std::to_string(keys));
        // Engine layout [B, L, H, D]; k and v slices of wider rows at an offset of one element
        // (not 16-byte aligned) and of eight (aligned).
        const Tensor q = random_tensor(rng, {2, 4, 8, 128}, dt);
        const Tensor wide_k = random_tensor(rng, {2, 700, 2, 137}, dt);
        const Tensor wide_v = random_tensor(rng, {2, 700, 2, 144}, dt);
        const AttentionOptions bshd =
            AttentionOptions{}.set_causal().set_layout(AttentionLayout::bshd);
        expect_forward_matches(q, wide_k.slice(3, 1, 129), wide_v.slice(3, 8, 136), bshd,
                               AttentionStrategy::SplitKv);
        expect_forward_matches(q, wide_k.slice(3, 8, 136), wide_v.slice(3, 8, 136), bshd,
                               AttentionStrategy::SplitKv);
        // Varlen decode: (Lq, Lk) = (1, 600), (0, 1), (8, 1008), (3, 3).
        const std::vector<int32_t> cu_q{0, 1, 1, 9, 12}, cu_k{0, 600, 601, 1609, 1612};
        AttentionOptions o = AttentionOptions{}.set_causal().set_sinks(
            random_tensor(rng, {8}, DType::f32));
        o.set_varlen(Tensor::from_host(cu_q, {5}), Tensor::from_host(cu_k, {5}), 8, 1008);
        expect_forward_matches(random_tensor(rng, {12, 8, 64}, dt),
                               random_tensor(rng, {1612, 2, 64}, dt),
                               random_tensor(rng, {1612, 2, 64}, dt), o, AttentionStrategy::SplitKv);
      }
    }
  }
}
#endif

// The serial rule: with 2..8 queries, row i equals the one-query call over keys 0 ..= i + Lk - Lq.
void expect_serial_rule(Rng& rng) {
  for (DType dt : {DType::bf16, DType::f32}) {
    for (int64_t lk : {int64_t{260}, int64_t{5000}}) {
      for (int64_t lq = 2; lq <= 8; ++lq) {
        const int64_t b = 2, hq = 8, hkv = 2, d = 128;
        const Tensor q = random_tensor(rng, {b, hq, lq, d}, dt).to(kGpu);
        const Tensor k = random_tensor(rng, {b, hkv, lk, d}, dt).to(kGpu);
        const Tensor v = random_tensor(rng, {b, hkv, lk, d}, dt).to(kGpu);
        const Tensor sinks = random_tensor(rng, {hq}, DType::f32).to(kGpu);
        for (int variant = 0; variant < 2; ++variant) {
          AttentionOptions o = AttentionOptions{}.set_causal().set_return_lse();
          if (variant == 1) o.set_window(700).set_sinks(sinks);
          SCOPED_TRACE(std::string(dtype_name(dt)) + " Lq" + std::to_string(lq) + " Lk" +
                       std::to_string(lk) + (variant ? " window sinks" : ""));
          const AttentionResult all = attention(q, k, v, o);
          for (int64_t i = 0; i < lq; ++i) {
            const int64_t prefix = i + lk - lq + 1;
            const AttentionResult one =
                attention(q.slice(2, i, i + 1), k.slice(2, 0, prefix), v.slice(2, 0, prefix), o);
            EXPECT_TRUE(bit_equal(all.out.slice(2, i, i + 1).contiguous(), one.out)) << "row " << i;
            EXPECT_TRUE(bit_equal(all.lse.slice(2, i, i + 1).contiguous(), one.lse)) << "row " << i;
          }
        }
      }
    }
  }
}

// SplitKv's tensor-core kernel (bf16) and its CUDA-core one (f32, and bf16 through the
// tuning switch).
TEST(AttentionGpu, SerialRuleBitForBit) {
  RUDNN_REQUIRE_CUDA();
  RUDNN_SEEDED_RNG(rng);
  expect_serial_rule(rng);
#if RUDNN_ATTENTION_TUNING
  const SplitKvChoice cuda_cores(false);
  SCOPED_TRACE("CUDA cores");
  expect_serial_rule(rng);
#endif
}

// The backward of a forward computed by the reference (its out and lse rounded as stored).
void expect_backward_matches(const Tensor& q, const Tensor& k, const Tensor& v,
                             const AttentionOptions& options, Rng& rng,
                             AttentionStrategy strategy = AttentionStrategy::Auto) {
  AttentionOptions o = options;
  o.set_return_lse();
  const AttentionResult fwd = attention(q, k, v, o);
  const Tensor dout = random_tensor(rng, fwd.out.shape(), q.dtype());
  const AttentionGrads ref = attention_backward(dout, q, k, v, fwd.out, fwd.lse, o);
  const AttentionOptions go = options_on(o, kGpu);
  AttentionGrads got;
  ASSERT_NO_THROW(got = attention_backward(dout.to(kGpu), q.to(kGpu), k.to(kGpu), v.to(kGpu),
                                           fwd.out.to(kGpu), fwd.lse.to(kGpu), go, strategy));
  // f32 gradients: P = exp(s - lse) carries the scores' f32 rounding (|s| reaches ~10 here),
  // about 1e-5 relative per element, before the sums over keys and queries.
  const double tol = q.dtype() == DType::f32 ? 1e-4 : tolerance(q.dtype());
  EXPECT_TRUE(all_close(got.dq, ref.dq, tol)) << "dq";
  EXPECT_TRUE(all_close(got.dk, ref.dk, tol)) << "dk";
  EXPECT_TRUE(all_close(got.dv, ref.dv, tol)) << "dv";
  if (ref.dsinks.defined()) EXPECT_TRUE(all_close(got.dsinks, ref.dsinks, 1e-4)) << "dsinks";
  if (ref.dbias.defined()) EXPECT_TRUE(all_close(got.dbias, ref.dbias, 1e-4)) << "dbias";
  // Deterministic mode: two runs give the same bits (every mode is deterministic today).
  AttentionOptions det = go;
  det.set_deterministic();
  const AttentionGrads a = attention_backward(dout.to(kGpu), q.to(kGpu), k.to(kGpu), v.to(kGpu),
                                              fwd.out.to(kGpu), fwd.lse.to(kGpu), det, strategy);
  const AttentionGrads b = attention_backward(dout.to(kGpu), q.to(kGpu), k.to(kGpu), v.to(kGpu),
                                              fwd.out.to(kGpu), fwd.lse.to(kGpu), det, strategy);
  EXPECT_TRUE(bit_equal(a.dq, b.dq));
  EXPECT_TRUE(bit_equal(a.dk, b.dk));
  EXPECT_TRUE(bit_equal(a.dv, b.dv));
  if (a.dsinks.defined()) EXPECT_TRUE(bit_equal(a.dsinks, b.dsinks));
}

TEST(AttentionGpu, BackwardMatchesTheReference) {
  RUDNN_REQUIRE_CUDA();
  RUDNN_SEEDED_RNG(rng);
  const std::vector<Sizes> grid = {{1, 1, 1, 1, 1, 64, 64},       {2, 4, 2, 7, 65, 64, 64},
                                   {1, 4, 1, 63, 63, 128, 96},    {1, 2, 2, 65, 7, 40, 24},
                                   {1, 2, 1, 100, 130, 256, 256}, {1, 2, 1, 20, 30, 1024, 512}};
  for (const Sizes& s : grid) {
    for (DType dt : {DType::f32, DType::bf16}) {
      const Tensor q = random_tensor(rng, {s.b, s.hq, s.lq, s.d}, dt);
      const Tensor k = random_tensor(rng, {s.b, s.hkv, s.lk, s.d}, dt);
      const Tensor v = random_tensor(rng, {s.b, s.hkv, s.lk, s.dv}, dt);
      for (auto [label, options] : option_sets(rng, s, dt)) {
        if (options.bias.defined()) options.bias_requires_grad = true;
        SCOPED_TRACE(describe(s) + " " + dtype_name(dt) + " " + label);
        expect_backward_matches(q, k, v, options, rng);
      }
    }
  }
}

TEST(AttentionGpu, VarlenBackwardMatchesTheReference) {
  RUDNN_REQUIRE_CUDA();
  RUDNN_SEEDED_RNG(rng);
  const std::vector<int32_t> cu_q{0, 0, 1, 66, 73}, cu_k{0, 5, 6, 206, 213};
  for (DType dt : {DType::f32, DType::bf16}) {
    const Tensor q = random_tensor(rng, {73, 4, 64}, dt);
    const Tensor k = random_tensor(rng, {220, 2, 64}, dt);  // rows 213.. are in no sequence
    const Tensor v = random_tensor(rng, {220, 2, 48}, dt);
    AttentionOptions o =
        AttentionOptions{}.set_causal().set_sinks(random_tensor(rng, {4}, DType::f32));
    o.set_varlen(Tensor::from_host(cu_q, {5}), Tensor::from_host(cu_k, {5}), 65, 200);
    SCOPED_TRACE(dtype_name(dt));
    expect_backward_matches(q, k, v, o, rng);
  }
}

TEST(AttentionGpu, PlanScratchIsWhatTheOpAllocates) {
  RUDNN_REQUIRE_CUDA();
  RUDNN_SEEDED_RNG(rng);
  struct Case {
    Sizes s;
    AttentionOptions o;
    AttentionStrategy st;
  };
  const std::vector<Case> cases = {
      {{2, 8, 2, 4, 3000, 128, 128}, AttentionOptions{}.set_causal(), AttentionStrategy::SplitKv},
      {{2, 8, 2, 300, 300, 64, 64}, AttentionOptions{}, AttentionStrategy::Composed},
      {{2, 8, 2, 300, 300, 64, 64},
       AttentionOptions{}.set_max_score_bytes(300 * 304 * 4 * 3),
       AttentionStrategy::Composed},
      {{2, 8, 2, 300, 300, 64, 64}, AttentionOptions{}, AttentionStrategy::FlashScalar}};
  for (const Case& c : cases) {
    const Sizes& s = c.s;
    SCOPED_TRACE(describe(s) + " " + name(c.st));
    const Tensor q = random_tensor(rng, {s.b, s.hq, s.lq, s.d}, DType::bf16).to(kGpu);
    const Tensor k = random_tensor(rng, {s.b, s.hkv, s.lk, s.d}, DType::bf16).to(kGpu);
    const Tensor v = random_tensor(rng, {s.b, s.hkv, s.lk, s.dv}, DType::bf16).to(kGpu);
    const Tensor out = Tensor::empty({s.b, s.hq, s.lq, s.dv}, DType::bf16, kGpu);
    const Tensor lse = Tensor::empty({s.b, s.hq, s.lq}, DType::f32, kGpu);
    const AttentionPlan plan =
        plan_attention(q.shape(), k.shape(), v.shape(), DType::bf16, c.o, c.st, kGpu);
    current_stream(kGpu).synchronize();
    const size_t before = allocator_stats(kGpu).bytes_in_use;
    reset_peak_memory_stats(kGpu);
    attention_into(out, lse, q, k, v, c.o, c.st);
    current_stream(kGpu).synchronize();
    EXPECT_EQ(allocator_stats(kGpu).peak_bytes_in_use - before, plan.scratch_bytes);
    EXPECT_LE(plan.max_intermediate_bytes,
              c.o.max_score_bytes.value_or(plan.max_intermediate_bytes));
  }
}

// ---- Flash (the tensor-core forward) ------------------------------------------------------------

constexpr std::pair<int64_t, int64_t> kFlashHeads[] = {{64, 64},   {96, 96},   {128, 128},
                                                       {192, 192}, {192, 128}, {256, 256}};

// Every head size and 16-bit dtype, every option set, over shapes whose lengths are no
// multiple of the tiles (64 query rows, 32 or 64 keys), GQA ratios 1, 3 and 4, Lq > Lk under
// causal (rows with no key: zeros, lse -inf), one query, and q scaled up so that the
// logits span a wide range (the online rescaling matters).
TEST(AttentionGpu, FlashForwardEveryHeadSizeAndOption) {
  RUDNN_REQUIRE_CUDA();
  RUDNN_SEEDED_RNG(rng);
  for (const auto& [d, dv] : kFlashHeads) {
    const std::vector<Sizes> grid = {{2, 6, 2, 130, 200, d, dv},
                                     {1, 4, 4, 200, 77, d, dv},
                                     {1, 4, 1, 1, 65, d, dv},
                                     {1, 2, 2, 63, 1, d, dv}};
    for (const Sizes& s : grid) {
      for (DType dt : {DType::f16, DType::bf16}) {
        const Tensor q = random_tensor(rng, {s.b, s.hq, s.lq, s.d}, dt);
        const Tensor k = random_tensor(rng, {s.b, s.hkv, s.lk, s.d}, dt);
        const Tensor v = random_tensor(rng, {s.b, s.hkv, s.lk, s.dv}, dt);
        for (const auto& [label, options] : option_sets(rng, s, dt)) {
          SCOPED_TRACE(describe(s) + " " + dtype_name(dt) + " " + label + " Flash");
          expect_forward_matches(q, k, v, options, AttentionStrategy::Flash);
        }
        SCOPED_TRACE(describe(s) + " " + dtype_name(dt) + " q x 8, causal, Flash");
        expect_forward_matches(random_tensor(rng, q.shape(), dt, 0.0f, 8.0f), k, v,
                               AttentionOptions{}.set_causal(), AttentionStrategy::Flash);
      }
    }
  }
}

// The engine layout [B, L, H, D] (and its transposed view), and rows that are not 16-byte
// aligned (q, k, v, out slices starting one element into wider rows): the element-by-element
// copies instead of cp.async.
TEST(AttentionGpu, FlashLayoutsAndUnalignedRows) {
  RUDNN_REQUIRE_CUDA();
  RUDNN_SEEDED_RNG(rng);
  for (DType dt : {DType::f16, DType::bf16}) {
    for (const auto& [d, dv] : {std::pair<int64_t, int64_t>{128, 128}, {192, 128}}) {
      const Tensor q = random_tensor(rng, {2, 100, 8, d}, dt);
      const Tensor k = random_tensor(rng, {2, 150, 2, d}, dt);
      const Tensor v = random_tensor(rng, {2, 150, 2, dv}, dt);
      for (bool causal : {false, true}) {
        SCOPED_TRACE(std::string(dtype_name(dt)) + " D" + std::to_string(d) + " Dv" +
                     std::to_string(dv) + (causal ? " causal" : ""));
        const AttentionOptions o = AttentionOptions{}.set_causal(causal);
        expect_forward_matches(q, k, v, AttentionOptions(o).set_layout(AttentionLayout::bshd),
                               AttentionStrategy::Flash);
        expect_forward_matches(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), o,
                               AttentionStrategy::Flash);
      }
      // Unaligned rows: views one element into rows of D + 1 (Dv + 1) elements.
      const Tensor qw = random_tensor(rng, {1, 4, 70, d + 1}, dt);
      const Tensor kw = random_tensor(rng, {1, 2, 90, d + 1}, dt);
      const Tensor vw = random_tensor(rng, {1, 2, 90, dv + 1}, dt);
      const Tensor qs = qw.slice(3, 1, d + 1), ks = kw.slice(3, 1, d + 1),
                   vs = vw.slice(3, 1, dv + 1);
      SCOPED_TRACE(std::string(dtype_name(dt)) + " unaligned D" + std::to_string(d));
      expect_forward_matches(qs, ks, vs, AttentionOptions{}.set_causal(), AttentionStrategy::Flash);
      const AttentionResult ref = attention(qs, ks, vs, AttentionOptions{}.set_causal());
      const Tensor wide_out = Tensor::empty({1, 4, 70, dv + 1}, dt, kGpu);
      const Tensor out = wide_out.slice(3, 1, dv + 1);
      attention_into(out, Tensor(), qs.to(kGpu), ks.to(kGpu), vs.to(kGpu),
                     AttentionOptions{}.set_causal(), AttentionStrategy::Flash);
      EXPECT_TRUE(all_close(out.contiguous(), ref.out)) << "unaligned out";
    }
  }
}

// Varlen with empty and length-1 sequences (and key rows beyond every sequence), every
// option that applies per sequence.
TEST(AttentionGpu, FlashVarlen) {
  RUDNN_REQUIRE_CUDA();
  RUDNN_SEEDED_RNG(rng);
  const std::vector<int32_t> lq{0, 1, 65, 7, 1, 130, 64}, lk{5, 1, 200, 7, 0, 130, 0};
  std::vector<int32_t> cu_q{0}, cu_k{0};
  for (size_t b = 0; b < lq.size(); ++b) {
    cu_q.push_back(cu_q.back() + lq[b]);
    cu_k.push_back(cu_k.back() + lk[b]);
  }
  const int64_t hq = 6, hkv = 2, n = static_cast<int64_t>(lq.size()) + 1;
  for (DType dt : {DType::f16, DType::bf16}) {
    for (const auto& [d, dv] : {std::pair<int64_t, int64_t>{64, 64}, {192, 128}, {256, 256}}) {
      const Tensor q = random_tensor(rng, {cu_q.back(), hq, d}, dt);
      const Tensor k = random_tensor(rng, {cu_k.back() + 3, hkv, d}, dt);
      const Tensor v = random_tensor(rng, {cu_k.back() + 3, hkv, dv}, dt);
      const Sizes s{n - 1, hq, hkv, 130, 200, d, dv};
      for (auto [label, o] : option_sets(rng, s, dt)) {
        o.set_varlen(Tensor::from_host(cu_q, {n}), Tensor::from_host(cu_k, {n}), 130, 200);
        SCOPED_TRACE(std::string(dtype_name(dt)) + " D" + std::to_string(d) + " " + label);
        expect_forward_matches(q, k, v, o, AttentionStrategy::Flash);
      }
    }
  }
}

// Flash holds no scratch: the op allocates nothing beyond its outputs; and Auto runs it.
TEST(AttentionGpu, FlashPlanAndScratch) {
  RUDNN_REQUIRE_CUDA();
  RUDNN_SEEDED_RNG(rng);
  const Tensor q = random_tensor(rng, {2, 8, 300, 128}, DType::bf16).to(kGpu);
  const Tensor k = random_tensor(rng, {2, 2, 300, 128}, DType::bf16).to(kGpu);
  const Tensor out = Tensor::empty({2, 8, 300, 128}, DType::bf16, kGpu);
  const Tensor lse = Tensor::empty({2, 8, 300}, DType::f32, kGpu);
  const AttentionPlan plan = plan_attention(q.shape(), k.shape(), k.shape(), DType::bf16);
  EXPECT_EQ(plan.kernel, AttentionKernel::Flash);
  EXPECT_EQ(plan.scratch_bytes, 0u);
  current_stream(kGpu).synchronize();
  const size_t before = allocator_stats(kGpu).bytes_in_use;
  reset_peak_memory_stats(kGpu);
  attention_into(out, lse, q, k, k, AttentionOptions{}.set_causal());
  current_stream(kGpu).synchronize();
  EXPECT_EQ(allocator_stats(kGpu).peak_bytes_in_use - before, 0u);
}

// A query row of NaN gives NaN in that row (out and lse) and nowhere else.
TEST(AttentionGpu, FlashNaNStaysInItsRow) {
  RUDNN_REQUIRE_CUDA();
  RUDNN_SEEDED_RNG(rng);
  const Tensor q = random_tensor(rng, {1, 2, 70, 64}, DType::bf16);
  const Tensor k = random_tensor(rng, {1, 2, 70, 64}, DType::bf16);
  q.slice(2, 5, 6).copy_from(Tensor::full({1, 2, 1, 64}, std::nan(""), DType::bf16));
  AttentionOptions o = AttentionOptions{}.set_causal().set_return_lse();
  const AttentionResult ref = attention(q, k, k, o);
  const AttentionResult got =
      attention(q.to(kGpu), k.to(kGpu), k.to(kGpu), options_on(o, kGpu), AttentionStrategy::Flash);
  EXPECT_TRUE(all_close(got.out, ref.out));
  EXPECT_TRUE(all_close(got.lse, ref.lse, 1e-5));
}

// Flash's backward (D = Dv in {64, 96, 128, 192, 256}, (192, 128)) against the reference,
// every option set (the bias without its gradient, which Flash does not compute), lengths 1,
// 7, 63, 65, 130, GQA ratios 1, 2, 3, Lq != Lk both ways; two deterministic runs bit-equal.
// Flash's backward instances above 128 run by name (and under Autotune); Auto keeps
// FlashScalar there until the two are measured against each other.
TEST(AttentionGpu, FlashBackwardLargeHeadsArePlannedByName) {
  RUDNN_REQUIRE_CUDA();
  for (const auto& [d, dv] : {std::pair<int64_t, int64_t>{192, 192}, {192, 128}, {256, 256}}) {
    const Shape q{1, 4, 100, d}, k{1, 2, 100, d}, v{1, 2, 100, dv};
    SCOPED_TRACE("D " + std::to_string(d) + " Dv " + std::to_string(dv));
    const auto kernel = [&](AttentionStrategy s) {
      return plan_attention_backward(q, k, v, DType::bf16, {}, s, kGpu).kernel;
    };
    EXPECT_EQ(kernel(AttentionStrategy::Auto), AttentionKernel::FlashScalar);
    EXPECT_EQ(kernel(AttentionStrategy::Flash), AttentionKernel::Flash);
  }
}

TEST(AttentionGpu, FlashBackwardMatchesTheReference) {
  RUDNN_REQUIRE_CUDA();
  RUDNN_SEEDED_RNG(rng);
  const std::pair<int64_t, int64_t> heads[] = {{64, 64},   {96, 96},   {128, 128},
                                                {192, 192}, {192, 128}, {256, 256}};
  for (const auto& [d, dv] : heads) {
    const std::vector<Sizes> grid = {{1, 1, 1, 1, 1, d, dv},
                                     {2, 4, 2, 7, 65, d, dv},
                                     {1, 6, 2, 130, 63, d, dv},
                                     {1, 2, 2, 65, 130, d, dv}};
    for (const Sizes& s : grid) {
      for (DType dt : {DType::f16, DType::bf16}) {
        const Tensor q = random_tensor(rng, {s.b, s.hq, s.lq, s.d}, dt);
        const Tensor k = random_tensor(rng, {s.b, s.hkv, s.lk, s.d}, dt);
        const Tensor v = random_tensor(rng, {s.b, s.hkv, s.lk, s.dv}, dt);
        for (const auto& [label, options] : option_sets(rng, s, dt)) {
          SCOPED_TRACE(describe(s) + " " + dtype_name(dt) + " " + label + " Flash backward");
          expect_backward_matches(q, k, v, options, rng, AttentionStrategy::Flash);
        }
      }
    }
  }
}

TEST(AttentionGpu, FlashBackwardVarlenAndLayouts) {
  RUDNN_REQUIRE_CUDA();
  RUDNN_SEEDED_RNG(rng);
  const std::vector<int32_t> cu_q{0, 0, 1, 66, 73, 203}, cu_k{0, 5, 6, 206, 213, 213};
  for (DType dt : {DType::f16, DType::bf16}) {
    const Tensor q = random_tensor(rng, {203, 4, 64}, dt);
    const Tensor k = random_tensor(rng, {220, 2, 64}, dt);  // rows 213.. are in no sequence
    const Tensor v = random_tensor(rng, {220, 2, 64}, dt);
    for (bool causal : {false, true}) {
      AttentionOptions o =
          AttentionOptions{}.set_causal(causal).set_sinks(random_tensor(rng, {4}, DType::f32));
      o.set_varlen(Tensor::from_host(cu_q, {6}), Tensor::from_host(cu_k, {6}), 130, 200);
      SCOPED_TRACE(std::string(dtype_name(dt)) + " varlen" + (causal ? " causal" : ""));
      expect_backward_matches(q, k, v, o, rng, AttentionStrategy::Flash);
    }
    const Tensor qb = random_tensor(rng, {2, 100, 6, 128}, dt);
    const Tensor kb = random_tensor(rng, {2, 90, 2, 128}, dt);
    SCOPED_TRACE(std::string(dtype_name(dt)) + " bshd");
    expect_backward_matches(qb, kb, kb,
                            AttentionOptions{}.set_causal().set_layout(AttentionLayout::bshd), rng,
                            AttentionStrategy::Flash);
  }
}

// The strategy an Autotune entry names.
AttentionStrategy strategy_named(const std::string& choice) {
  for (AttentionStrategy s : {AttentionStrategy::Flash, AttentionStrategy::Composed,
                              AttentionStrategy::FlashScalar}) {
    if (choice == name(s)) return s;
  }
  ADD_FAILURE() << "Autotune chose " << choice;
  return AttentionStrategy::Auto;
}

// Autotune: the first call of a class measures every strategy that takes it (an entry with
// their times) and gives the reference's result; a second call of the class (other lengths
// in the same power-of-two range) measures nothing and gives the named choice's bits;
// plan_attention reports the choice; the backward is measured as its own class; decode
// shapes are not measured (the serial rule) and give Auto's bits.
TEST(AttentionGpu, AutotuneMeasuresOncePerClass) {
  RUDNN_REQUIRE_CUDA_AUTOTUNE();
  RUDNN_SEEDED_RNG(rng);
  const DType dt = DType::bf16;
  const AttentionOptions o = AttentionOptions{}.set_causal().set_return_lse();
  const Tensor q = random_tensor(rng, {2, 4, 300, 64}, dt);
  const Tensor k = random_tensor(rng, {2, 2, 300, 64}, dt);
  const Tensor v = random_tensor(rng, {2, 2, 300, 64}, dt);
  expect_forward_matches(q, k, v, o, AttentionStrategy::Autotune);
  auto entries = autotune_entries();
  ASSERT_EQ(entries.size(), 1u);
  EXPECT_NE(entries[0].key.find("attention | "), std::string::npos) << entries[0].key;
  EXPECT_EQ(entries[0].measurements, 1);
  EXPECT_EQ(entries[0].timings.size(), 3u) << "Flash, Composed and FlashScalar take the call";
  const AttentionStrategy chosen = strategy_named(entries[0].choice);

  const Tensor q2 = random_tensor(rng, {2, 4, 290, 64}, dt).to(kGpu);
  const Tensor k2 = random_tensor(rng, {2, 2, 500, 64}, dt).to(kGpu);
  const Tensor v2 = random_tensor(rng, {2, 2, 500, 64}, dt).to(kGpu);
  const AttentionResult tuned = attention(q2, k2, v2, o, AttentionStrategy::Autotune);
  const AttentionResult named = attention(q2, k2, v2, o, chosen);
  EXPECT_TRUE(bit_equal(tuned.out, named.out));
  EXPECT_TRUE(bit_equal(tuned.lse, named.lse));
  entries = autotune_entries();
  ASSERT_EQ(entries.size(), 1u);
  EXPECT_EQ(entries[0].measurements, 1) << "the class was measured again";
  const auto kernel_of = [&](AttentionStrategy s) {
    return plan_attention(q2.shape(), k2.shape(), v2.shape(), dt, o, s, kGpu).kernel;
  };
  EXPECT_EQ(kernel_of(AttentionStrategy::Autotune), kernel_of(chosen));

  expect_backward_matches(q, k, v, o, rng, AttentionStrategy::Autotune);
  bool backward_measured = false;
  for (const AutotuneEntry& e : autotune_entries()) {
    if (e.key.find("attention_backward | ") == std::string::npos) continue;
    backward_measured = true;
    EXPECT_EQ(e.timings.size(), 2u) << "Flash and FlashScalar take the backward";
    strategy_named(e.choice);
  }
  EXPECT_TRUE(backward_measured);

  autotune_clear();
  const Tensor qd = random_tensor(rng, {2, 4, 4, 64}, dt).to(kGpu);
  const AttentionResult decode = attention(qd, k2, v2, o, AttentionStrategy::Autotune);
  EXPECT_TRUE(bit_equal(decode.out, attention(qd, k2, v2, o).out));
  EXPECT_TRUE(autotune_entries().empty()) << "a decode shape was measured";
}

#if RUDNN_TEST_CUDA
// Under CUDA-graph capture an unmeasured class measures nothing, records nothing and runs
// Auto's choice, which the replay reproduces bit for bit.
TEST(AttentionGpu, AutotuneUnderCaptureRunsAutoUntilMeasured) {
  RUDNN_REQUIRE_CUDA_AUTOTUNE();
  RUDNN_SEEDED_RNG(rng);
  const DType dt = DType::f16;
  const Tensor q = random_tensor(rng, {1, 2, 100, 128}, dt).to(kGpu);
  const Tensor k = random_tensor(rng, {1, 2, 150, 128}, dt).to(kGpu);
  const Tensor v = random_tensor(rng, {1, 2, 150, 128}, dt).to(kGpu);
  const AttentionOptions o;
  const Stream stream = Stream::create(kGpu);
  const Tensor automatic = attention(q, k, v, o, AttentionStrategy::Auto, stream).out;
  const Tensor out = poisoned(automatic.shape(), dt, kGpu);
  stream.synchronize();
  const auto native = reinterpret_cast<cudaStream_t>(stream.handle());
  cudaGraph_t graph = nullptr;
  ASSERT_EQ(cudaStreamBeginCapture(native, cudaStreamCaptureModeGlobal), cudaSuccess);
  std::string thrown;
  try {
    attention_into(out, Tensor(), q, k, v, o, AttentionStrategy::Autotune, stream);
  } catch (const std::exception& e) {
    thrown = e.what();
  }
  ASSERT_EQ(cudaStreamEndCapture(native, &graph), cudaSuccess);
  ASSERT_EQ(thrown, "");
  EXPECT_TRUE(autotune_entries().empty());
  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  ASSERT_EQ(cudaGraphLaunch(exec, native), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(native), cudaSuccess);
  EXPECT_TRUE(bit_equal(out, automatic));
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
}
#endif  // RUDNN_TEST_CUDA

TEST(AttentionGpu, OperandsOnAnotherDevice) {
  RUDNN_REQUIRE_CUDA();
  const Tensor q = Tensor::zeros({1, 2, 3, 8}, DType::f32, kGpu);
  const Tensor k = Tensor::zeros({1, 2, 3, 8}, DType::f32);
  EXPECT_TRUE(throws_error([&] { attention(q, k, q); }, ErrorCode::DeviceMismatch,
                           {"attention: k is on cpu", "cuda:0"}));
  EXPECT_TRUE(throws_error(
      [&] { attention(q, q, q, AttentionOptions{}.set_sinks(Tensor::zeros({2}, DType::f32))); },
      ErrorCode::DeviceMismatch, {"attention: sinks is on cpu"}));
  EXPECT_TRUE(throws_error([&] { attention(q, q, q, {}, AttentionStrategy::Auto, Stream::cpu()); },
                           ErrorCode::DeviceMismatch, {"attention"}));
}

}  // namespace
}  // namespace rudnn::test
