// The MoE family on the GPU against the CPU reference: fresh random inputs every run
// (RUDNN_TEST_SEED replays one), outputs poisoned before the op (every allocation is NaN
// bytes here), routing indices and the dispatch mapping compared exactly, values at per-dtype
// tolerances, inputs checked bit-unchanged, two runs bit-equal, a CUDA-graph capture of the
// whole forward, and the device rules. Without a CUDA device every test here is skipped.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <set>

#if RUDNN_TEST_CUDA
#include <cuda_runtime_api.h>
#endif

#include "support/poison.h"
#include "support/test_support.h"

namespace rudnn::test {
namespace {

using moe::GroupedStrategy;
using moe::GroupRoutingOptions;
using moe::RoutingOptions;

constexpr Device kGpu = Device::cuda(0);
const DType kFloatTypes[] = {DType::f32, DType::f16, DType::bf16};

Tensor on_gpu(const Tensor& t) { return t.defined() ? t.to(kGpu) : Tensor(); }

void expect_same_plan(const moe::RoutingPlan& got, const moe::RoutingPlan& want) {
  ASSERT_EQ(got.expert_indices().device(), kGpu);
  EXPECT_EQ(got.expert_indices().to_vector<uint32_t>(),
            want.expert_indices().to_vector<uint32_t>());
  EXPECT_TRUE(all_close(got.weights(), want.weights(), tolerance(want.weights().dtype())));
}

TEST(MoeGpu, RouteMatchesTheReference) {
  RUDNN_REQUIRE_CUDA();
  RUDNN_SEEDED_RNG(rng);
  for (DType dt : kFloatTypes) {
    for (int64_t e : {1, 7, 64, 160, 1500}) {
      const int64_t t = rng.integer(1, 300), k = rng.integer(1, std::min<int64_t>(e, 40));
      const bool renormalize = rng.integer(0, 1) == 1;
      SCOPED_TRACE(::testing::Message() << dtype_name(dt) << " T " << t << " E " << e << " k " << k
                                        << " renormalize " << renormalize);
      Tensor logits = random_tensor(rng, {t, e}, dt, 0.0f, 2.0f);
      const Tensor g = on_gpu(logits);
      const auto before = bytes_of(g);
      expect_same_plan(moe::route(g, {k, renormalize}), moe::route(logits, {k, renormalize}));
      EXPECT_EQ(bytes_of(g), before);
    }
  }
}

TEST(MoeGpu, RouteSpecialRowsAndTies) {
  RUDNN_REQUIRE_CUDA();
  const double inf = std::numeric_limits<double>::infinity(), nan = std::nan("");
  const Tensor logits = host_tensor({1.0,  nan,  0.0,  2.0,  1.0,  1.0,   //
                                     1.0,  inf,  0.0,  2.0,  2.0,  -0.0,  //
                                     -inf, -inf, -inf, -inf, -inf, -inf,  //
                                     1.0,  -inf, 0.0,  1.0,  0.0,  -0.0},
                                    {4, 6}, DType::f32);
  for (DType dt : kFloatTypes) {
    const Tensor l = host_tensor(to_doubles(logits), {4, 6}, dt);
    for (bool renormalize : {false, true}) {
      expect_same_plan(moe::route(on_gpu(l), {6, renormalize}), moe::route(l, {6, renormalize}));
    }
  }
}

TEST(MoeGpu, SigmoidGroupedMatchesTheReference) {
  RUDNN_REQUIRE_CUDA();
  RUDNN_SEEDED_RNG(rng);
  struct Config {
    int64_t e, groups;
  };
  for (DType dt : kFloatTypes) {
    for (Config c :
         {Config{8, 1}, Config{64, 8}, Config{256, 8}, Config{1024, 128}, Config{96, 32}}) {
      GroupRoutingOptions o;
      o.groups = c.groups;
      o.selected_groups = rng.integer(1, c.groups);
      const int64_t per_group = c.e / c.groups;
      o.top_k = rng.integer(1, std::min<int64_t>(64, o.selected_groups * per_group));
      o.group_top_two = per_group >= 2 && rng.integer(0, 1) == 1;
      o.renormalize = rng.integer(0, 1) == 1;
      o.scale = rng.uniform(0.5f, 3.0f);
      const int64_t t = rng.integer(1, 200);
      SCOPED_TRACE(::testing::Message()
                   << dtype_name(dt) << " T " << t << " E " << c.e << " groups " << c.groups
                   << " selected " << o.selected_groups << " k " << o.top_k << " top_two "
                   << o.group_top_two);
      const Tensor logits = random_tensor(rng, {t, c.e}, dt, 0.0f, 2.0f);
      for (bool with_bias : {false, true}) {
        const Tensor bias =
            with_bias ? random_tensor(rng, {c.e}, DType::f32, 0.0f, 0.5f) : Tensor{};
        expect_same_plan(moe::route_sigmoid_grouped(on_gpu(logits), on_gpu(bias), o),
                         moe::route_sigmoid_grouped(logits, bias, o));
      }
    }
  }
}

TEST(MoeGpu, DispatchAndCombineMatchTheReferenceExactly) {
  RUDNN_REQUIRE_CUDA();
  RUDNN_SEEDED_RNG(rng);
  struct Config {
    int64_t t, e, k, h;
  };
  // Chunks of 4096 slots: the larger cases cross several (up to 4096 slots, one kernel does
  // the count, scan and placement); odd H takes the narrow copies.
  for (Config c : {Config{1, 4, 1, 8}, Config{37, 5, 2, 3}, Config{3000, 64, 8, 64},
                   Config{700, 300, 6, 33}, Config{5000, 2, 2, 16}, Config{512, 1024, 8, 16}}) {
    for (DType dt : kFloatTypes) {
      SCOPED_TRACE(::testing::Message() << dtype_name(dt) << " T " << c.t << " E " << c.e << " k "
                                        << c.k << " H " << c.h);
      // Skewed logits so that a few experts take most tokens.
      Tensor logits = random_tensor(rng, {c.t, c.e}, DType::bf16, 0.0f, 3.0f);
      const Tensor input = random_tensor(rng, {c.t, c.h}, dt);
      const auto want = moe::route(logits, {c.k, true}).dispatch(input);
      const auto gplan = moe::route(on_gpu(logits), {c.k, true});
      const Tensor ginput = on_gpu(input);
      const auto got = gplan.dispatch(ginput);
      EXPECT_TRUE(bit_equal(got.offsets(), want.offsets()));
      EXPECT_TRUE(bit_equal(got.token_of_row(), want.token_of_row()));
      EXPECT_TRUE(bit_equal(got.row_of_slot(), want.row_of_slot()));
      EXPECT_TRUE(bit_equal(got.rows(), want.rows()));
      // Combine of random expert outputs, twice: bit-equal runs.
      const Tensor expert_out = random_tensor(rng, {c.t * c.k, c.h}, dt);
      const Tensor gout = on_gpu(expert_out);
      const Tensor combined = got.combine(gout);
      // The reference combines with the reference plan's weights; the GPU's may differ by an
      // ulp of the weights' dtype (the logits', bf16 here: round 29 saw one such token at f32).
      EXPECT_TRUE(all_close(combined, want.combine(expert_out),
                            std::max(tolerance(dt), tolerance(logits.dtype()))));
      EXPECT_TRUE(bit_equal(combined, got.combine(gout)));
      const auto again = gplan.dispatch(ginput);
      EXPECT_TRUE(bit_equal(again.rows(), got.rows()));
    }
  }
}

TEST(MoeGpu, ExpertsMatchTheReferenceOnEveryStrategy) {
  RUDNN_REQUIRE_CUDA();
  RUDNN_SEEDED_RNG(rng);
  struct Config {
    int64_t t, e, k, h, i;
  };
  for (Config c : {Config{1, 4, 2, 16, 24}, Config{50, 8, 2, 64, 96}, Config{130, 16, 4, 40, 72},
                   Config{64, 5, 3, 33, 17}}) {
    for (DType dt : kFloatTypes) {
      for (GroupedStrategy s :
           {GroupedStrategy::Scalar, GroupedStrategy::TensorCore, GroupedStrategy::Auto}) {
        if (s == GroupedStrategy::TensorCore && dt == DType::f32)
          continue;  // Unsupported: tested below
        SCOPED_TRACE(::testing::Message()
                     << dtype_name(dt) << " strategy " << static_cast<int>(s) << " T " << c.t
                     << " E " << c.e << " k " << c.k << " H " << c.h << " I " << c.i);
        const float ws = 1.0f / std::sqrt(static_cast<float>(c.h));
        const Tensor input = random_tensor(rng, {c.t, c.h}, dt);
        const Tensor logits = random_tensor(rng, {c.t, c.e}, DType::f32);
        const Tensor gate = random_tensor(rng, {c.e, c.i, c.h}, dt, 0.0f, ws);
        const Tensor up = random_tensor(rng, {c.e, c.i, c.h}, dt, 0.0f, ws);
        const Tensor down = random_tensor(rng, {c.e, c.h, c.i}, dt, 0.0f, ws);
        const moe::SwiGluExperts host_experts(gate, up, down);
        const moe::SwiGluExperts experts(on_gpu(gate), on_gpu(up), on_gpu(down));
        const Tensor gin = on_gpu(input), glog = on_gpu(logits);
        const auto before = bytes_of(gin);
        const Tensor got = experts.forward_with_strategy(gin, glog, {c.k, true}, s);
        const Tensor want = host_experts.forward(input, logits, {c.k, true});
        EXPECT_TRUE(all_close(got, want, 2 * tolerance(dt)));
        EXPECT_TRUE(bit_equal(got, experts.forward_with_strategy(gin, glog, {c.k, true}, s)));
        EXPECT_EQ(bytes_of(gin), before);
        // The sigmoid-grouped whole forward too.
        GroupRoutingOptions o;
        o.top_k = c.k;
        o.groups = 1;
        o.selected_groups = 1;
        o.renormalize = true;
        const Tensor bias = random_tensor(rng, {c.e}, DType::f32, 0.0f, 0.1f);
        EXPECT_TRUE(all_close(
            experts.forward_sigmoid_grouped(gin, glog, on_gpu(bias), o, s),
            host_experts.forward_sigmoid_grouped(input, logits, bias, o, GroupedStrategy::Scalar),
            2 * tolerance(dt)));
      }
    }
  }
}

TEST(MoeGpu, TensorCoreRefusesF32) {
  RUDNN_REQUIRE_CUDA();
  const Tensor w = Tensor::zeros({2, 4, 8}, DType::f32, kGpu),
               d = Tensor::zeros({2, 8, 4}, DType::f32, kGpu);
  const moe::SwiGluExperts experts(w, w, d);
  const auto tokens = moe::route(Tensor::zeros({3, 2}, DType::f32, kGpu), {1, false})
                          .dispatch(Tensor::zeros({3, 8}, DType::f32, kGpu));
  EXPECT_TRUE(throws_error(
      [&] { experts.forward_dispatched_with_strategy(tokens, GroupedStrategy::TensorCore); },
      ErrorCode::Unsupported, {"forward_dispatched: strategy TensorCore needs f16 or bf16"}));
  // Auto takes the scalar path for f32: a result, no error.
  EXPECT_EQ(experts.forward_dispatched_with_strategy(tokens, GroupedStrategy::Auto).shape(),
            (Shape{3, 8}));
}

TEST(MoeGpu, DeviceRules) {
  RUDNN_REQUIRE_CUDA();
  const Tensor logits = Tensor::zeros({3, 8}, DType::f32, kGpu);
  GroupRoutingOptions o;
  o.top_k = 2;
  EXPECT_TRUE(
      throws_error([&] { moe::route_sigmoid_grouped(logits, Tensor::zeros({8}, DType::f32), o); },
                   ErrorCode::DeviceMismatch, {"route_sigmoid_grouped: bias is on cpu"}));
  const auto plan = moe::route(logits, {2, false});
  EXPECT_TRUE(throws_error(
      [&] {
        plan.dispatch(Tensor::zeros({3, 4}, DType::f32));
      },
      ErrorCode::DeviceMismatch, {"dispatch: the routing plan is on cuda:0"}));
  const auto d = plan.dispatch(Tensor::zeros({3, 4}, DType::f32, kGpu));
  EXPECT_TRUE(throws_error(
      [&] {
        d.combine(Tensor::zeros({6, 4}, DType::f32));
      },
      ErrorCode::DeviceMismatch, {"combine: the dispatch is on cuda:0"}));
  const moe::SwiGluExperts host_experts(Tensor::zeros({8, 6, 4}, DType::f32),
                                        Tensor::zeros({8, 6, 4}, DType::f32),
                                        Tensor::zeros({8, 4, 6}, DType::f32));
  EXPECT_TRUE(throws_error([&] { host_experts.forward_dispatched(d); }, ErrorCode::DeviceMismatch,
                           {"forward_dispatched: gate is on cpu"}));
  EXPECT_TRUE(throws_error(
      [&] {
        moe::SwiGluExperts(Tensor::zeros({8, 6, 4}, DType::f32, kGpu),
                           Tensor::zeros({8, 6, 4}, DType::f32),
                           Tensor::zeros({8, 4, 6}, DType::f32, kGpu));
      },
      ErrorCode::DeviceMismatch, {"SwiGluExperts: up is on cpu"}));
}

TEST(MoeGpu, TrainingPiecesMatchTheReference) {
  RUDNN_REQUIRE_CUDA();
  RUDNN_SEEDED_RNG(rng);
  for (DType dt : kFloatTypes) {
    SCOPED_TRACE(dtype_name(dt));
    const int64_t t = rng.integer(1, 300), e = rng.integer(2, 130), h = rng.integer(1, 300);
    const int64_t k = rng.integer(1, std::min<int64_t>(e, 12));
    const Tensor logits = random_tensor(rng, {t, e}, dt);
    const Tensor input = random_tensor(rng, {t, h}, dt);
    const auto hd = moe::route(logits, {k, true}).dispatch(input);
    const auto gd = moe::route(on_gpu(logits), {k, true}).dispatch(on_gpu(input));
    const Tensor eo = random_tensor(rng, {t * k, h}, dt), grad = random_tensor(rng, {t, h}, dt);
    for (auto s : {moe::CombineGradientStrategy::Serial, moe::CombineGradientStrategy::Plane}) {
      const auto want = hd.combine_backward_with_strategy(eo, grad, s);
      const auto got = gd.combine_backward_with_strategy(on_gpu(eo), on_gpu(grad), s);
      EXPECT_TRUE(all_close(got.dexpert, want.dexpert, tolerance(dt)));
      EXPECT_TRUE(all_close(got.dweights, want.dweights, tolerance(dt)));
      const auto again = gd.combine_backward_with_strategy(on_gpu(eo), on_gpu(grad), s);
      EXPECT_TRUE(bit_equal(again.dweights, got.dweights));
    }
    EXPECT_TRUE(
        all_close(gd.dispatch_backward(on_gpu(eo)), hd.dispatch_backward(eo), tolerance(dt)));

    // Selected weights with repeated and (in some rows) invalid indices, every index dtype.
    for (DType it : {DType::u32, DType::i32, DType::i64}) {
      // Random indices repeat experts within rows (gather semantics).
      const Tensor indices = random_integers(rng, {t, k}, it, 0, e - 1);
      const Tensor bad_row = random_integers(rng, {1, k}, it, e, e + 3);
      for (auto scoring : {moe::RouterScoring::Softmax, moe::RouterScoring::Sigmoid}) {
        moe::RouterWeightOptions o;
        o.scoring = scoring;
        o.renormalize = rng.integer(0, 1) == 1;
        o.scale = rng.uniform(0.5f, 2.0f);
        const Tensor gw = random_tensor(rng, {t, k}, DType::f32);
        EXPECT_TRUE(all_close(moe::selected_router_weights(on_gpu(logits), on_gpu(indices), o),
                              moe::selected_router_weights(logits, indices, o),
                              tolerance(DType::f32) * 10));
        // The gradient cancels to (nearly) zero where the renormalised weights cannot move
        // (k = 1, or a row of one repeated expert): errors are measured against gw's size.
        double gw_norm = 0;
        for (double v : to_doubles(gw)) gw_norm += v * v;
        EXPECT_TRUE(
            all_close(moe::selected_router_backward(on_gpu(logits), on_gpu(indices), on_gpu(gw), o),
                      moe::selected_router_backward(logits, indices, gw, o), tolerance(dt) * 10,
                      std::sqrt(gw_norm)));
        // A row of out-of-range indices: NaN in the GPU result where the reference has it.
        const Tensor one = logits.slice(0, 0, 1).contiguous();
        EXPECT_TRUE(all_close(moe::selected_router_weights(on_gpu(one), on_gpu(bad_row), o),
                              moe::selected_router_weights(one, bad_row, o)));
      }
    }
    // Native SwiGLU and its selected gradients.
    const Tensor g = random_tensor(rng, {t, h}, dt, 0, 2), u = random_tensor(rng, {t, h}, dt);
    EXPECT_TRUE(all_close(moe::native_swiglu(on_gpu(g), on_gpu(u)), moe::native_swiglu(g, u),
                          tolerance(dt)));
    const auto want = moe::native_swiglu_backward(g, u, grad);
    const auto got = moe::native_swiglu_backward(on_gpu(g), on_gpu(u), on_gpu(grad));
    EXPECT_TRUE(all_close(got.gate, want.gate, tolerance(dt)));
    EXPECT_TRUE(all_close(got.up, want.up, tolerance(dt)));
    EXPECT_FALSE(moe::native_swiglu_backward(on_gpu(g), on_gpu(u), on_gpu(grad), {false, true})
                     .gate.defined());
  }
}

TEST(MoeGpu, ExpertTrainingMatchesTheReferenceOnEveryStrategy) {
  RUDNN_REQUIRE_CUDA();
  RUDNN_SEEDED_RNG(rng);
  struct Config {
    int64_t t, e, k, h, i;
  };
  for (Config c : {Config{40, 6, 2, 64, 96}, Config{3, 8, 2, 16, 24}, Config{70, 5, 3, 33, 17}}) {
    for (DType dt : kFloatTypes) {
      for (GroupedStrategy s :
           {GroupedStrategy::Scalar, GroupedStrategy::TensorCore, GroupedStrategy::Auto}) {
        if (s == GroupedStrategy::TensorCore && dt == DType::f32) continue;
        SCOPED_TRACE(::testing::Message()
                     << dtype_name(dt) << " strategy " << static_cast<int>(s) << " T " << c.t
                     << " E " << c.e << " H " << c.h << " I " << c.i);
        const float ws = 1.0f / std::sqrt(static_cast<float>(c.h));
        const Tensor input = random_tensor(rng, {c.t, c.h}, dt);
        const Tensor logits = random_tensor(rng, {c.t, c.e}, DType::f32);
        const Tensor gate = random_tensor(rng, {c.e, c.i, c.h}, dt, 0.0f, ws);
        const Tensor up = random_tensor(rng, {c.e, c.i, c.h}, dt, 0.0f, ws);
        const Tensor down = random_tensor(rng, {c.e, c.h, c.i}, dt, 0.0f, ws);
        const Tensor dy = random_tensor(rng, {c.t * c.k, c.h}, dt);
        const auto htokens = moe::route(logits, {c.k, true}).dispatch(input);
        const auto hf = moe::SwiGluExperts(gate, up, down).forward_dispatched_training(htokens);
        const auto want = hf.cache.backward(dy);
        const auto gtokens = moe::route(on_gpu(logits), {c.k, true}).dispatch(on_gpu(input));
        const moe::SwiGluExperts experts(on_gpu(gate), on_gpu(up), on_gpu(down));
        const auto gf = experts.forward_dispatched_training(gtokens, s);
        EXPECT_TRUE(all_close(gf.output, hf.output, 2 * tolerance(dt)));
        // Training runs inference's arithmetic: the same bits.
        EXPECT_TRUE(bit_equal(gf.output, experts.forward_dispatched_with_strategy(gtokens, s)));
        const Tensor gdy = on_gpu(dy);
        const auto got = gf.cache.backward_with_strategy(gdy, s);
        // Weight gradients are F32 but sums of dtype-rounded activations: the dtype's tolerance.
        EXPECT_TRUE(all_close(got.dinput, want.dinput, 2 * tolerance(dt)));
        EXPECT_TRUE(all_close(got.dgate, want.dgate, 2 * tolerance(dt)));
        EXPECT_TRUE(all_close(got.dup, want.dup, 2 * tolerance(dt)));
        EXPECT_TRUE(all_close(got.ddown, want.ddown, 2 * tolerance(dt)));
        const auto again = gf.cache.backward_with_strategy(gdy, s);
        EXPECT_TRUE(bit_equal(again.dgate, got.dgate));
        EXPECT_TRUE(bit_equal(again.dinput, got.dinput));
        const auto only = gf.cache.backward_selected(gdy, {false, true, false, false}, s);
        EXPECT_FALSE(only.dinput.defined() || only.dup.defined() || only.ddown.defined());
        EXPECT_TRUE(bit_equal(only.dgate, got.dgate));
      }
    }
  }
}

// Auto's decode path (T * k <= 512 rows: the streaming matrix-vector kernels), packed and
// unpacked rows, against the reference, and bit-equal from run to run.
TEST(MoeGpu, DecodePathMatchesTheReference) {
  RUDNN_REQUIRE_CUDA();
  RUDNN_SEEDED_RNG(rng);
  for (DType dt : kFloatTypes) {
    for (int64_t t : {1, 16, 64}) {
      for (int64_t h : {256, 36}) {
        const int64_t e = 64, k = 8, i = h == 256 ? 128 : 20;
        SCOPED_TRACE(::testing::Message() << dtype_name(dt) << " T " << t << " H " << h);
        const float ws = 1.0f / std::sqrt(static_cast<float>(h));
        const Tensor input = random_tensor(rng, {t, h}, dt);
        const Tensor logits = random_tensor(rng, {t, e}, DType::bf16);
        const Tensor gate = random_tensor(rng, {e, i, h}, dt, 0.0f, ws);
        const Tensor up = random_tensor(rng, {e, i, h}, dt, 0.0f, ws);
        const Tensor down = random_tensor(rng, {e, h, i}, dt, 0.0f, ws);
        const moe::SwiGluExperts experts(on_gpu(gate), on_gpu(up), on_gpu(down));
        const Tensor gin = on_gpu(input), glog = on_gpu(logits);
        const Tensor got =
            experts.forward_with_strategy(gin, glog, {k, true}, GroupedStrategy::Auto);
        const Tensor want = moe::SwiGluExperts(gate, up, down).forward(input, logits, {k, true});
        EXPECT_TRUE(all_close(got, want, 2 * tolerance(dt)));
        EXPECT_TRUE(bit_equal(
            got, experts.forward_with_strategy(gin, glog, {k, true}, GroupedStrategy::Auto)));
        // The training forward of the same rows: the same bits, and its cache's backward.
        const auto tokens = moe::route(glog, {k, true}).dispatch(gin);
        const auto tf = experts.forward_dispatched_training(tokens, GroupedStrategy::Auto);
        EXPECT_TRUE(bit_equal(
            tf.output, experts.forward_dispatched_with_strategy(tokens, GroupedStrategy::Auto)));
      }
    }
  }
}

// The decode kernels over the shapes that stress them: one expert slot per selected expert
// (T = 1 at top-1 .. top-8), more routed slots than experts (slots = E), rows per expert past
// one pass of eight, E up to 4096 (the dispatched kernels' scan of the offsets takes one step
// per 256 experts; decode.cu's bitmask of selected experts ends at kDecodeMaxExperts), H and
// I off every tile (packed and 1-element loads), T on both sides of kDecodeFusedTokens (the
// combine folded into the down projection, or not; F16/BF16 past 64 rows take the tensor
// cores instead, F32 keeps the decode kernels up to 512). Auto's forward (decode.cu, no
// dispatch) must equal route -> dispatch -> forward_dispatched(Auto) -> combine bit for bit.
TEST(MoeGpu, DecodeKernelsMatchTheReferenceOnEveryShape) {
  RUDNN_REQUIRE_CUDA();
  RUDNN_SEEDED_RNG(rng);
  struct Case {
    int64_t t, e, k, h, i;
  };
  // Also: T = 4 and 5 (kDecodeFusedTokens = 4: the last fused batch and the first not),
  // top-5..7, E = 4096 (the decode kernels' bitmask is full) and 4097 (the dispatched path),
  // T * k = 512 (kDecodeRows) at top-1 (an expert's rows over several passes of eight).
  const Case cases[] = {{1, 8, 1, 72, 40},      {1, 64, 8, 264, 136},  {2, 256, 8, 136, 72},
                        {3, 257, 2, 1032, 24},  {5, 16, 4, 100, 52},   {16, 64, 8, 264, 136},
                        {17, 8, 2, 264, 136},   {64, 8, 8, 40, 24},    {64, 32, 8, 72, 200},
                        {9, 12, 3, 37, 13},     {4, 64, 8, 264, 136},  {4, 24, 5, 48, 40},
                        {6, 9, 6, 24, 16},      {7, 40, 7, 48, 40},    {2, 4096, 3, 16, 8},
                        {2, 4097, 3, 16, 8},    {512, 16, 1, 24, 16},  {1, 32, 32, 24, 16}};
  for (DType dt : kFloatTypes) {
    for (const Case& c : cases) {
      SCOPED_TRACE(::testing::Message() << dtype_name(dt) << " T " << c.t << " E " << c.e
                                        << " top-" << c.k << " H " << c.h << " I " << c.i);
      const float ws = 1.0f / std::sqrt(static_cast<float>(std::min(c.h, c.i)));
      const Tensor input = random_tensor(rng, {c.t, c.h}, dt);
      const Tensor logits = random_tensor(rng, {c.t, c.e}, DType::f32);
      const Tensor gate = random_tensor(rng, {c.e, c.i, c.h}, dt, 0.0f, ws);
      const Tensor up = random_tensor(rng, {c.e, c.i, c.h}, dt, 0.0f, ws);
      const Tensor down = random_tensor(rng, {c.e, c.h, c.i}, dt, 0.0f, ws);
      const moe::SwiGluExperts experts(on_gpu(gate), on_gpu(up), on_gpu(down));
      const Tensor gin = on_gpu(input), glog = on_gpu(logits);
      const RoutingOptions ro{c.k, true};
      const Tensor got = experts.forward_with_strategy(gin, glog, ro, GroupedStrategy::Auto);
      const Tensor want = moe::SwiGluExperts(gate, up, down).forward(input, logits, ro);
      EXPECT_TRUE(all_close(got, want, 2 * tolerance(dt)));
      EXPECT_TRUE(
          bit_equal(got, experts.forward_with_strategy(gin, glog, ro, GroupedStrategy::Auto)));
      const auto tokens = moe::route(glog, ro).dispatch(gin);
      const Tensor unfused = tokens.combine(
          experts.forward_dispatched_with_strategy(tokens, GroupedStrategy::Auto));
      EXPECT_TRUE(bit_equal(got, unfused));
      EXPECT_TRUE(bit_equal(gin, on_gpu(input)));
    }
  }
}

// The decode path reads the input in place when its rows are 16-byte aligned; an offset
// view that is not takes the dispatched path. Both give the same bits, and match the
// reference.
TEST(MoeGpu, DecodeOfAnOffsetInputViewMatchesItsCopy) {
  RUDNN_REQUIRE_CUDA();
  RUDNN_SEEDED_RNG(rng);
  const int64_t e = 16, k = 4, i = 40;
  for (DType dt : kFloatTypes) {
    for (int64_t h : {48, 37}) {
      for (int64_t t : {1, 3, 9}) {
        SCOPED_TRACE(::testing::Message() << dtype_name(dt) << " T " << t << " H " << h
                                          << " (input rows 1.. of a [T + 1, H] tensor)");
        const float ws = 1.0f / std::sqrt(static_cast<float>(h));
        const Tensor whole = random_tensor(rng, {t + 1, h}, dt);
        const Tensor logits = random_tensor(rng, {t, e}, DType::f32);
        const Tensor gate = random_tensor(rng, {e, i, h}, dt, 0.0f, ws);
        const Tensor up = random_tensor(rng, {e, i, h}, dt, 0.0f, ws);
        const Tensor down = random_tensor(rng, {e, h, i}, dt, 0.0f, ws);
        const moe::SwiGluExperts experts(on_gpu(gate), on_gpu(up), on_gpu(down));
        const Tensor view = on_gpu(whole).slice(0, 1, t + 1), glog = on_gpu(logits);
        const Tensor got = experts.forward_with_strategy(view, glog, {k, true},
                                                         GroupedStrategy::Auto);
        // A fresh (aligned) copy of the same rows.
        const Tensor copy = experts.forward_with_strategy(on_gpu(whole.slice(0, 1, t + 1)), glog,
                                                          {k, true}, GroupedStrategy::Auto);
        EXPECT_TRUE(bit_equal(got, copy));
        EXPECT_TRUE(all_close(got,
                              moe::SwiGluExperts(gate, up, down)
                                  .forward(whole.slice(0, 1, t + 1).contiguous(), logits,
                                           {k, true}),
                              2 * tolerance(dt)));
      }
    }
  }
}

// [e, n, k] weights whose rows are windows of one random pool at random offsets: distinct
// for every expert and row, without drawing e * n * k normals (the bench's shape has 553 M).
Tensor windowed_weights(Rng& rng, int64_t e, int64_t n, int64_t k, DType dt, float sd) {
  const int64_t pool = int64_t{1} << 20;
  const Tensor source = random_tensor(rng, {pool + k}, dt, 0.0f, sd);
  const Tensor w = Tensor::empty({e, n, k}, dt);
  const size_t item = dtype_size(dt), row_bytes = static_cast<size_t>(k) * item;
  auto* dst = static_cast<unsigned char*>(w.data());
  const auto* src = static_cast<const unsigned char*>(source.data());
  for (int64_t r = 0; r < e * n; ++r) {
    const int64_t at = rng.integer(0, pool - 1);
    std::memcpy(dst + static_cast<size_t>(r) * row_bytes, src + static_cast<size_t>(at) * item,
                row_bytes);
  }
  return w;
}

// The bench's decode cases exactly (E 64, top-8, H 2048, I 1408, bf16 input and logits,
// T 1/4/16/64): Auto (decode.cu's kernels at T 1 and 4, the tensor-core GEMMs at T 16 and
// 64: auto_decode in moe.cpp), the unfused pipeline
// route -> dispatch -> forward_dispatched(Auto) -> combine, and the Scalar strategy (the
// bench's check), each against the float64 reference on a sample of tokens (the first, the
// last and one between: routing is per token, so a token's reference needs only its row).
TEST(MoeGpu, DecodeAtTheBenchShapeMatchesTheReference) {
  RUDNN_REQUIRE_CUDA();
  RUDNN_SEEDED_RNG(rng);
  const DType dt = DType::bf16;
  const int64_t e = 64, k = 8, h = 2048, i = 1408;
  const Tensor gate = windowed_weights(rng, e, i, h, dt, 0.02f);
  const Tensor up = windowed_weights(rng, e, i, h, dt, 0.02f);
  const Tensor down = windowed_weights(rng, e, h, i, dt, 0.02f);
  const moe::SwiGluExperts experts(on_gpu(gate), on_gpu(up), on_gpu(down));
  const moe::SwiGluExperts reference(gate, up, down);
  const RoutingOptions ro{k, true};
  for (int64_t t : {1, 4, 16, 64}) {
    SCOPED_TRACE(::testing::Message() << "bf16 T " << t << " E " << e << " top-" << k << " H "
                                      << h << " I " << i);
    const Tensor input = random_tensor(rng, {t, h}, dt);
    const Tensor logits = random_tensor(rng, {t, e}, dt);
    const Tensor gin = on_gpu(input), glog = on_gpu(logits);
    const Tensor fused = experts.forward_with_strategy(gin, glog, ro, GroupedStrategy::Auto);
    const auto tokens = moe::route(glog, ro).dispatch(gin);
    const Tensor unfused = tokens.combine(
        experts.forward_dispatched_with_strategy(tokens, GroupedStrategy::Auto));
    const Tensor scalar = experts.forward_with_strategy(gin, glog, ro, GroupedStrategy::Scalar);
    for (int64_t s : std::set<int64_t>{0, t / 2, t - 1}) {
      SCOPED_TRACE(::testing::Message() << "token " << s);
      const Tensor want = reference.forward(input.slice(0, s, s + 1).contiguous(),
                                            logits.slice(0, s, s + 1).contiguous(), ro);
      EXPECT_TRUE(all_close(fused.slice(0, s, s + 1), want, 2 * tolerance(dt))) << "Auto";
      EXPECT_TRUE(all_close(unfused.slice(0, s, s + 1), want, 2 * tolerance(dt))) << "unfused";
      EXPECT_TRUE(all_close(scalar.slice(0, s, s + 1), want, 2 * tolerance(dt))) << "Scalar";
    }
    EXPECT_TRUE(bit_equal(fused, experts.forward_with_strategy(gin, glog, ro,
                                                               GroupedStrategy::Auto)));
    EXPECT_TRUE(bit_equal(fused, unfused));
  }
}

#if RUDNN_TEST_CUDA
void check_cuda(cudaError_t status, const char* what) {
  ASSERT_EQ(status, cudaSuccess) << what << ": " << cudaGetErrorString(status);
}

TEST(MoeGpu, WholeForwardCapturesIntoACudaGraph) {
  RUDNN_REQUIRE_CUDA();
  RUDNN_SEEDED_RNG(rng);
  const DType dt = DType::bf16;
  const int64_t t = 200, e = 16, k = 4, h = 64, i = 96;
  const Tensor input = on_gpu(random_tensor(rng, {t, h}, dt));
  const Tensor logits = on_gpu(random_tensor(rng, {t, e}, DType::f32));
  const moe::SwiGluExperts experts(on_gpu(random_tensor(rng, {e, i, h}, dt, 0.0f, 0.125f)),
                                   on_gpu(random_tensor(rng, {e, i, h}, dt, 0.0f, 0.125f)),
                                   on_gpu(random_tensor(rng, {e, h, i}, dt, 0.0f, 0.125f)));
  for (GroupedStrategy s : {GroupedStrategy::Scalar, GroupedStrategy::TensorCore}) {
    SCOPED_TRACE(s == GroupedStrategy::Scalar ? "Scalar" : "TensorCore");
    const Stream stream = Stream::create(kGpu);
    current_stream(kGpu).synchronize();
    const auto native = reinterpret_cast<cudaStream_t>(stream.handle());
    const Tensor eager = experts.forward_with_strategy(input, logits, {k, true}, s, stream);
    stream.synchronize();
    cudaGraph_t graph = nullptr;
    check_cuda(cudaStreamBeginCapture(native, cudaStreamCaptureModeThreadLocal), "begin capture");
    Tensor captured = experts.forward_with_strategy(input, logits, {k, true}, s, stream);
    check_cuda(cudaStreamEndCapture(native, &graph), "end capture");
    cudaGraphExec_t exec = nullptr;
    check_cuda(cudaGraphInstantiate(&exec, graph, 0), "instantiate");
    check_cuda(cudaGraphLaunch(exec, native), "launch");
    check_cuda(cudaStreamSynchronize(native), "synchronize");
    EXPECT_TRUE(bit_equal(captured, eager));
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
  }
}
// Auto's decode path (fused combine at T = 3, unfused at T = 40) captured and replayed.
TEST(MoeGpu, DecodeForwardCapturesIntoACudaGraph) {
  RUDNN_REQUIRE_CUDA();
  RUDNN_SEEDED_RNG(rng);
  const DType dt = DType::bf16;
  const int64_t e = 24, k = 6, h = 264, i = 72;
  const moe::SwiGluExperts experts(on_gpu(random_tensor(rng, {e, i, h}, dt, 0.0f, 0.0625f)),
                                   on_gpu(random_tensor(rng, {e, i, h}, dt, 0.0f, 0.0625f)),
                                   on_gpu(random_tensor(rng, {e, h, i}, dt, 0.0f, 0.125f)));
  for (int64_t t : {3, 40}) {
    SCOPED_TRACE(::testing::Message() << "T " << t);
    const Tensor input = on_gpu(random_tensor(rng, {t, h}, dt));
    const Tensor logits = on_gpu(random_tensor(rng, {t, e}, DType::f32));
    const Stream stream = Stream::create(kGpu);
    current_stream(kGpu).synchronize();
    const auto native = reinterpret_cast<cudaStream_t>(stream.handle());
    const auto run = [&] {
      return experts.forward_with_strategy(input, logits, {k, true}, GroupedStrategy::Auto,
                                           stream);
    };
    const Tensor eager = run();
    stream.synchronize();
    cudaGraph_t graph = nullptr;
    check_cuda(cudaStreamBeginCapture(native, cudaStreamCaptureModeThreadLocal), "begin capture");
    Tensor captured = run();
    check_cuda(cudaStreamEndCapture(native, &graph), "end capture");
    cudaGraphExec_t exec = nullptr;
    check_cuda(cudaGraphInstantiate(&exec, graph, 0), "instantiate");
    check_cuda(cudaGraphLaunch(exec, native), "launch");
    check_cuda(cudaStreamSynchronize(native), "synchronize");
    EXPECT_TRUE(bit_equal(captured, eager));
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
  }
}

// One training step: route, training weights, dispatch, experts, combine and every backward,
// captured on one stream and replayed; it matches the eager step bit for bit.
TEST(MoeGpu, TrainingStepCapturesIntoACudaGraph) {
  RUDNN_REQUIRE_CUDA();
  RUDNN_SEEDED_RNG(rng);
  const DType dt = DType::bf16;
  const int64_t t = 300, e = 16, k = 4, h = 64, i = 96;
  const Tensor input = on_gpu(random_tensor(rng, {t, h}, dt));
  const Tensor logits = on_gpu(random_tensor(rng, {t, e}, dt));
  const Tensor grad = on_gpu(random_tensor(rng, {t, h}, dt));
  const moe::SwiGluExperts experts(on_gpu(random_tensor(rng, {e, i, h}, dt, 0.0f, 0.125f)),
                                   on_gpu(random_tensor(rng, {e, i, h}, dt, 0.0f, 0.125f)),
                                   on_gpu(random_tensor(rng, {e, h, i}, dt, 0.0f, 0.125f)));
  moe::RouterWeightOptions wo;
  wo.renormalize = true;
  struct Step {
    Tensor out, dinput, dlogits, dgate;
  };
  const auto step = [&](const Stream& stream, GroupedStrategy s) {
    const auto plan = moe::route(logits, {k, true}, stream);
    const auto training = plan.into_training(logits, wo, stream);
    const auto tokens = training.routing().dispatch(input, stream);
    const auto fwd = experts.forward_dispatched_training(tokens, s, stream);
    Step r;
    r.out = tokens.combine(fwd.output, stream);
    const auto cg = tokens.combine_backward(fwd.output, grad, stream);
    const auto eg = fwd.cache.backward_with_strategy(cg.dexpert, s, stream);
    r.dinput = tokens.dispatch_backward(eg.dinput, stream);
    r.dlogits = training.backward(cg.dweights, stream);
    r.dgate = eg.dgate;
    return r;
  };
  for (GroupedStrategy s : {GroupedStrategy::Scalar, GroupedStrategy::TensorCore}) {
    const Stream stream = Stream::create(kGpu);
    current_stream(kGpu).synchronize();
    const auto native = reinterpret_cast<cudaStream_t>(stream.handle());
    const Step eager = step(stream, s);
    stream.synchronize();
    cudaGraph_t graph = nullptr;
    check_cuda(cudaStreamBeginCapture(native, cudaStreamCaptureModeThreadLocal), "begin capture");
    const Step captured = step(stream, s);
    check_cuda(cudaStreamEndCapture(native, &graph), "end capture");
    cudaGraphExec_t exec = nullptr;
    check_cuda(cudaGraphInstantiate(&exec, graph, 0), "instantiate");
    check_cuda(cudaGraphLaunch(exec, native), "launch");
    check_cuda(cudaStreamSynchronize(native), "synchronize");
    EXPECT_TRUE(bit_equal(captured.out, eager.out));
    EXPECT_TRUE(bit_equal(captured.dinput, eager.dinput));
    EXPECT_TRUE(bit_equal(captured.dlogits, eager.dlogits));
    EXPECT_TRUE(bit_equal(captured.dgate, eager.dgate));
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
  }
}
#endif

}  // namespace
}  // namespace rudnn::test
