// The MoE training pieces on the CPU: combine's backward against its definition and against
// finite differences, dispatch's backward as a plain sum, the selected router weights (gather
// semantics, invalid indices, renormalisation, scale) and their logits gradient against finite
// differences, and native SwiGLU's storage rounding and its selected gradients.
#include <cmath>
#include <functional>
#include <limits>

#include "support/test_support.h"

namespace rudnn::test {
namespace {

using moe::RouterScoring;
using moe::RouterWeightOptions;

// sum(grad * f(x)) differentiated numerically in every element of x (test_support's
// central differences, F64).
std::vector<double> numeric(const std::function<double(const std::vector<double>&)>& f,
                            std::vector<double> x, double step = 1e-6) {
  return central_differences(
      x.data(), static_cast<int64_t>(x.size()), [&] { return f(x); }, step);
}

double dot(const std::vector<double>& a, const std::vector<double>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

TEST(MoeTraining, CombineBackwardIsTheAdjointOfCombine) {
  RUDNN_SEEDED_RNG(rng);
  const int64_t T = 6, E = 5, k = 3, H = 7;
  const Tensor logits = random_tensor(rng, {T, E}, DType::f64);
  const auto d = moe::route(logits, {k, true}).dispatch(random_tensor(rng, {T, H}, DType::f64));
  const Tensor expert_out = random_tensor(rng, {T * k, H}, DType::f64);
  const Tensor grad = random_tensor(rng, {T, H}, DType::f64);
  for (auto s : {moe::CombineGradientStrategy::Serial, moe::CombineGradientStrategy::Plane}) {
    const auto g = d.combine_backward_with_strategy(expert_out, grad, s);
    EXPECT_EQ(g.dweights.dtype(), DType::f32);
    EXPECT_EQ(g.dexpert.dtype(), DType::f64);
    // <grad, combine(eo)> is linear in eo: its gradient is dexpert exactly.
    const auto go = to_doubles(grad);
    const auto f = [&](const std::vector<double>& eo) {
      return dot(go, to_doubles(d.combine(host_tensor(eo, {T * k, H}, DType::f64))));
    };
    const auto eo = to_doubles(expert_out), dex = to_doubles(g.dexpert);
    const auto num = numeric(f, eo);
    for (size_t i = 0; i < eo.size(); i += 5) EXPECT_NEAR(dex[i], num[i], 1e-6);
    // dweights[t, j] = <grad[t], expert_out[row(t, j)]>.
    const auto rows = d.row_of_slot().to_vector<int32_t>();
    const auto dw = to_doubles(g.dweights);
    for (int64_t t = 0; t < T; ++t)
      for (int64_t j = 0; j < k; ++j) {
        double want = 0;
        for (int64_t h = 0; h < H; ++h) want += go[t * H + h] * eo[rows[t * k + j] * H + h];
        EXPECT_NEAR(dw[t * k + j], want, 1e-5);
      }
  }
}

TEST(MoeTraining, DispatchBackwardSumsRowsWithoutWeights) {
  const Tensor logits = host_tensor({3, 2, 1, 1, 3, 2}, {2, 3}, DType::f32);
  const auto d = moe::route(logits, {2, false}).dispatch(Tensor::zeros({2, 1}, DType::f32));
  // Rows hold 1, 2, 3, 4 in dispatched order; token t gets the sum of its two rows.
  const Tensor drows = host_tensor({1, 2, 3, 4}, {4, 1}, DType::f32);
  const auto rows = d.row_of_slot().to_vector<int32_t>();
  const auto dx = to_doubles(d.dispatch_backward(drows));
  EXPECT_EQ(dx, (std::vector<double>{double(rows[0] + 1 + rows[1] + 1),
                                     double(rows[2] + 1 + rows[3] + 1)}));
}

TEST(MoeTraining, SelectedWeightsGatherAndNormalise) {
  const std::vector<double> row = {0.5, -1.0, 2.0, 0.0};
  const Tensor logits = host_tensor(row, {1, 4}, DType::f64);
  const Tensor indices = Tensor::from_host(std::vector<int64_t>{2, 2, 0}, {1, 3});
  double m = 2.0, s = 0;
  for (double v : row) s += std::exp(v - m);
  const double p2 = std::exp(0.0) / s, p0 = std::exp(0.5 - m) / s;
  RouterWeightOptions o;
  auto w = to_doubles(moe::selected_router_weights(logits, indices, o));
  EXPECT_NEAR(w[0], p2, 1e-7);
  EXPECT_NEAR(w[1], p2, 1e-7);  // a repeated index gathers the same weight
  EXPECT_NEAR(w[2], p0, 1e-7);
  o.renormalize = true;
  o.scale = 2.0f;
  w = to_doubles(moe::selected_router_weights(logits, indices, o));
  EXPECT_NEAR(w[0], 2 * p2 / (2 * p2 + p0), 1e-6);
  EXPECT_NEAR(w[2], 2 * p0 / (2 * p2 + p0), 1e-6);
  o.scoring = RouterScoring::Sigmoid;
  o.renormalize = false;
  o.scale = 1.0f;
  w = to_doubles(moe::selected_router_weights(logits, indices, o));
  EXPECT_NEAR(w[2], 1 / (1 + std::exp(-0.5)), 1e-7);
}

TEST(MoeTraining, InvalidIndicesMakeTheWholeRowNaN) {
  const Tensor logits = host_tensor({0.5, -1.0, 2.0, 0.0, 1, 2, 3, 4}, {2, 4}, DType::f32);
  const Tensor indices = Tensor::from_host(std::vector<int32_t>{1, 4, 0, 3}, {2, 2});
  const Tensor grad = Tensor::full({2, 2}, 1.0, DType::f32);
  for (auto scoring : {RouterScoring::Softmax, RouterScoring::Sigmoid}) {
    RouterWeightOptions o;
    o.scoring = scoring;
    const auto w = to_doubles(moe::selected_router_weights(logits, indices, o));
    EXPECT_TRUE(std::isnan(w[0]) && std::isnan(w[1]));
    EXPECT_FALSE(std::isnan(w[2]) || std::isnan(w[3]));
    const auto dl = to_doubles(moe::selected_router_backward(logits, indices, grad, o));
    for (int e = 0; e < 4; ++e) EXPECT_TRUE(std::isnan(dl[e])) << e;
    for (int e = 4; e < 8; ++e) EXPECT_FALSE(std::isnan(dl[e])) << e;
  }
  // Negative I32 / I64 indices too.
  const Tensor negative = Tensor::from_host(std::vector<int64_t>{-1, 0, 0, 3}, {2, 2});
  const auto w = to_doubles(moe::selected_router_weights(logits, negative, {}));
  EXPECT_TRUE(std::isnan(w[0]) && std::isnan(w[1]));
}

TEST(MoeTraining, SelectedRouterBackwardMatchesFiniteDifferences) {
  RUDNN_SEEDED_RNG(rng);
  const int64_t T = 3, E = 6, k = 3;
  const Tensor logits = random_tensor(rng, {T, E}, DType::f64);
  // Token 0 repeats an expert.
  const Tensor indices =
      Tensor::from_host(std::vector<uint32_t>{1, 1, 4, 0, 5, 2, 3, 4, 5}, {T, k});
  const Tensor grad = random_tensor(rng, {T, k}, DType::f32);
  const auto g = to_doubles(grad);
  for (auto scoring : {RouterScoring::Softmax, RouterScoring::Sigmoid}) {
    for (bool renormalize : {false, true}) {
      RouterWeightOptions o;
      o.scoring = scoring;
      o.renormalize = renormalize;
      o.scale = 1.5f;
      SCOPED_TRACE(::testing::Message() << "sigmoid " << (scoring == RouterScoring::Sigmoid)
                                        << " renormalize " << renormalize);
      const auto f = [&](const std::vector<double>& x) {
        return dot(g, to_doubles(moe::selected_router_weights(host_tensor(x, {T, E}, DType::f64),
                                                              indices, o)));
      };
      const auto x = to_doubles(logits);
      const auto dl = to_doubles(moe::selected_router_backward(logits, indices, grad, o));
      // The weights are F32: differences of step 1e-3 keep their rounding small.
      const auto num = numeric(f, x, 1e-3);
      for (size_t i = 0; i < x.size(); ++i) EXPECT_NEAR(dl[i], num[i], 2e-4) << i;
    }
  }
}

TEST(MoeTraining, RouterTrainingPlanKeepsTheSelection) {
  RUDNN_SEEDED_RNG(rng);
  const Tensor logits = random_tensor(rng, {5, 8}, DType::f32);
  const auto plan = moe::route(logits, {3, true});
  RouterWeightOptions o;
  o.renormalize = true;
  const auto training = plan.into_training(logits, o);
  EXPECT_EQ(training.routing().expert_indices().to_vector<uint32_t>(),
            plan.expert_indices().to_vector<uint32_t>());
  EXPECT_EQ(training.routing().weights().dtype(), DType::f32);
  EXPECT_TRUE(all_close(training.routing().weights(),
                        moe::selected_router_weights(logits, plan.expert_indices(), o), 0.0));
  const Tensor grad = random_tensor(rng, {5, 3}, DType::f32);
  EXPECT_TRUE(bit_equal(training.backward(grad),
                        moe::selected_router_backward(logits, plan.expert_indices(), grad, o)));
}

TEST(MoeTraining, NativeSwiGluRoundsTheSiluBeforeTheProduct) {
  // bf16: g = 1.3 -> SiLU 1.0258... rounds to 1.0234375; times u = 3.
  const Tensor gate = host_tensor({1.3}, {1}, DType::bf16),
               up = host_tensor({3.0}, {1}, DType::bf16);
  const double g = static_cast<float>(bfloat16(1.3f));
  const double silu = g / (1 + std::exp(-g));
  const double stored = static_cast<float>(bfloat16(static_cast<float>(silu)));
  ASSERT_NE(stored, silu);
  const double want = static_cast<float>(bfloat16(static_cast<float>(stored * 3.0)));
  EXPECT_EQ(to_doubles(moe::native_swiglu(gate, up))[0], want);
  const auto grads = moe::native_swiglu_backward(gate, up, host_tensor({1.0}, {1}, DType::bf16));
  EXPECT_EQ(to_doubles(grads.up)[0], stored);  // the rounded SiLU
}

TEST(MoeTraining, NativeSwiGluBackwardMatchesFiniteDifferencesAndSelection) {
  RUDNN_SEEDED_RNG(rng);
  const Tensor gate = random_tensor(rng, {4, 5}, DType::f64, 0, 2),
               up = random_tensor(rng, {4, 5}, DType::f64);
  const Tensor grad = random_tensor(rng, {4, 5}, DType::f64);
  const auto gv = to_doubles(grad), uv = to_doubles(up), xv = to_doubles(gate);
  const auto all = moe::native_swiglu_backward(gate, up, grad);
  const auto fg = [&](const std::vector<double>& x) {
    return dot(gv, to_doubles(moe::native_swiglu(host_tensor(x, {4, 5}, DType::f64), up)));
  };
  const auto fu = [&](const std::vector<double>& u) {
    return dot(gv, to_doubles(moe::native_swiglu(gate, host_tensor(u, {4, 5}, DType::f64))));
  };
  const auto dg = to_doubles(all.gate), du = to_doubles(all.up);
  const auto num_g = numeric(fg, xv), num_u = numeric(fu, uv);
  for (size_t i = 0; i < xv.size(); ++i) {
    EXPECT_NEAR(dg[i], num_g[i], 1e-7);
    EXPECT_NEAR(du[i], num_u[i], 1e-7);
  }
  // Absent means absent: not computed, not allocated.
  const auto only_up = moe::native_swiglu_backward(gate, up, grad, {false, true});
  EXPECT_FALSE(only_up.gate.defined());
  EXPECT_TRUE(bit_equal(only_up.up, all.up));
  const auto only_gate = moe::native_swiglu_backward(gate, up, grad, {true, false});
  EXPECT_FALSE(only_gate.up.defined());
  EXPECT_TRUE(bit_equal(only_gate.gate, all.gate));
  const auto none = moe::native_swiglu_backward(gate, up, grad, {false, false});
  EXPECT_FALSE(none.gate.defined() || none.up.defined());
}

TEST(MoeTraining, ExpertBackwardMatchesFiniteDifferences) {
  RUDNN_SEEDED_RNG(rng);
  const int64_t T = 4, E = 3, k = 2, H = 5, I = 6;
  const Tensor input = random_tensor(rng, {T, H}, DType::f64);
  const Tensor logits = random_tensor(rng, {T, E}, DType::f64);
  const Tensor gate = random_tensor(rng, {E, I, H}, DType::f64),
               up = random_tensor(rng, {E, I, H}, DType::f64),
               down = random_tensor(rng, {E, H, I}, DType::f64);
  const auto plan = moe::route(logits, {k, true});
  const auto tokens = plan.dispatch(input);
  const moe::SwiGluExperts experts(gate, up, down);
  const auto fwd = experts.forward_dispatched_training(tokens);
  EXPECT_TRUE(all_close(fwd.output, experts.forward_dispatched(tokens), 0.0));
  const Tensor dy = random_tensor(rng, {T * k, H}, DType::f64);
  const auto dyv = to_doubles(dy);
  const auto g = fwd.cache.backward(dy);
  EXPECT_EQ(g.dgate.dtype(), DType::f32);
  const auto loss_of = [&](const Tensor& x, const Tensor& gw, const Tensor& uw, const Tensor& dw) {
    return dot(dyv,
               to_doubles(moe::SwiGluExperts(gw, uw, dw).forward_dispatched(plan.dispatch(x))));
  };
  const auto check = [&](const Tensor& grad, const Tensor& at, int which, const char* what) {
    SCOPED_TRACE(what);
    const Shape shape = at.shape();
    const auto f = [&](const std::vector<double>& v) {
      const Tensor t = host_tensor(v, shape, DType::f64);
      return loss_of(which == 0 ? t : input, which == 1 ? t : gate, which == 2 ? t : up,
                     which == 3 ? t : down);
    };
    const auto x = to_doubles(at), got = to_doubles(grad);
    const auto num = numeric(f, x);
    for (size_t i = 0; i < x.size(); ++i) EXPECT_NEAR(got[i], num[i], 1e-5) << i;
  };
  check(tokens.dispatch_backward(g.dinput), input, 0, "input");
  check(g.dgate, gate, 1, "gate");
  check(g.dup, up, 2, "up");
  check(g.ddown, down, 3, "down");
  // Selected gradients only: absent is undefined, present equals the full result.
  const auto only_down =
      fwd.cache.backward_selected(dy, {false, false, false, true}, moe::GroupedStrategy::Scalar);
  EXPECT_FALSE(only_down.dinput.defined() || only_down.dgate.defined() || only_down.dup.defined());
  EXPECT_TRUE(bit_equal(only_down.ddown, g.ddown));
  const auto only_input =
      fwd.cache.backward_selected(dy, {true, false, false, false}, moe::GroupedStrategy::Scalar);
  EXPECT_FALSE(only_input.ddown.defined() || only_input.dgate.defined() ||
               only_input.dup.defined());
  EXPECT_TRUE(bit_equal(only_input.dinput, g.dinput));
}

TEST(MoeTraining, ExpertBackwardErrors) {
  const moe::SwiGluExperts experts(Tensor::zeros({4, 6, 8}, DType::f32),
                                   Tensor::zeros({4, 6, 8}, DType::f32),
                                   Tensor::zeros({4, 8, 6}, DType::f32));
  const auto tokens = moe::route(Tensor::zeros({3, 4}, DType::f32), {2, false})
                          .dispatch(Tensor::zeros({3, 8}, DType::f32));
  const auto fwd = experts.forward_dispatched_training(tokens);
  EXPECT_TRUE(throws_error(
      [&] {
        fwd.cache.backward(Tensor::zeros({6, 7}, DType::f32));
      },
      ErrorCode::ShapeMismatch,
      {"ExpertTrainingCache::backward: dexpert has shape [6, 7]", "[T * top_k, H] = [6, 8]"}));
  EXPECT_TRUE(throws_error(
      [&] {
        fwd.cache.backward(Tensor::zeros({6, 8}, DType::bf16));
      },
      ErrorCode::DTypeMismatch, {"ExpertTrainingCache::backward: dexpert has dtype bf16"}));
  EXPECT_TRUE(throws_error([&] { fwd.cache.backward(Tensor{}); }, ErrorCode::InvalidArgument,
                           {"ExpertTrainingCache::backward: dexpert is an undefined tensor"}));
  EXPECT_TRUE(throws_error(
      [&] {
        moe::ExpertTrainingCache{}.backward(Tensor::zeros({6, 8}, DType::f32));
      },
      ErrorCode::InvalidArgument, {"ExpertTrainingCache::backward: the cache is empty"}));
  EXPECT_TRUE(throws_error(
      [&] {
        fwd.cache.backward_with_strategy(Tensor::zeros({6, 8}, DType::f32),
                                         moe::GroupedStrategy::TensorCore);
      },
      ErrorCode::Unsupported, {"strategy TensorCore needs f16 or bf16"}));
  EXPECT_TRUE(throws_error([&] { experts.forward_dispatched_training(moe::DispatchedTokens{}); },
                           ErrorCode::InvalidArgument,
                           {"forward_dispatched_training: tokens is an undefined tensor"}));
}

TEST(MoeTraining, Errors) {
  const Tensor logits = Tensor::zeros({3, 8}, DType::f32);
  const Tensor idx = Tensor::zeros({3, 2}, DType::u32);
  EXPECT_TRUE(throws_error(
      [&] {
        moe::selected_router_weights(logits, Tensor::zeros({3, 2}, DType::f32), {});
      },
      ErrorCode::DTypeMismatch,
      {"selected_router_weights: indices has dtype f32", "u32, i32 or i64"}));
  EXPECT_TRUE(throws_error(
      [&] {
        moe::selected_router_weights(logits, Tensor::zeros({4, 2}, DType::u32), {});
      },
      ErrorCode::ShapeMismatch, {"selected_router_weights: indices has shape [4, 2]", "T = 3"}));
  EXPECT_TRUE(throws_error(
      [&] {
        moe::selected_router_weights(logits, Tensor::zeros({3, 9}, DType::u32), {});
      },
      ErrorCode::InvalidArgument, {"top_k = 9", "min(E, 64) = 8"}));
  EXPECT_TRUE(throws_error(
      [&] {
        moe::selected_router_weights(Tensor::zeros({3, 80}, DType::f32),
                                     Tensor::zeros({3, 65}, DType::u32), {});
      },
      ErrorCode::InvalidArgument, {"top_k = 65", "min(E, 64) = 64"}));
  EXPECT_TRUE(throws_error([&] { moe::selected_router_weights(logits, Tensor{}, {}); },
                           ErrorCode::InvalidArgument,
                           {"selected_router_weights: indices is an undefined tensor"}));
  RouterWeightOptions bad;
  bad.scale = 0.0f;
  EXPECT_TRUE(throws_error([&] { moe::selected_router_weights(logits, idx, bad); },
                           ErrorCode::InvalidArgument, {"selected_router_weights: scale"}));
  EXPECT_TRUE(throws_error(
      [&] {
        moe::selected_router_backward(logits, idx, Tensor::zeros({3, 2}, DType::bf16), {});
      },
      ErrorCode::DTypeMismatch, {"selected_router_backward: grad_weights has dtype bf16"}));
  EXPECT_TRUE(throws_error(
      [&] {
        moe::selected_router_backward(logits, idx, Tensor::zeros({3, 3}, DType::f32), {});
      },
      ErrorCode::ShapeMismatch, {"selected_router_backward: grad_weights has shape [3, 3]"}));
  EXPECT_TRUE(throws_error(
      [&] {
        moe::selected_router_backward(Tensor::zeros({3, 8}, DType::i32), idx,
                                      Tensor::zeros({3, 2}, DType::f32), {});
      },
      ErrorCode::DTypeMismatch, {"selected_router_backward: logits has dtype i32"}));
  // Combine / dispatch backward.
  const auto d = moe::route(logits, {2, true}).dispatch(Tensor::zeros({3, 4}, DType::f32));
  const Tensor eo = Tensor::zeros({6, 4}, DType::f32);
  EXPECT_TRUE(throws_error(
      [&] {
        d.combine_backward(eo, Tensor::zeros({3, 4}, DType::bf16));
      },
      ErrorCode::DTypeMismatch, {"combine_backward: grad_output has dtype bf16"}));
  EXPECT_TRUE(throws_error(
      [&] {
        d.combine_backward(eo, Tensor::zeros({3, 5}, DType::f32));
      },
      ErrorCode::ShapeMismatch,
      {"combine_backward: grad_output has shape [3, 5]", "[T, H] = [3, 4]"}));
  EXPECT_TRUE(throws_error(
      [&] {
        d.combine_backward(Tensor::zeros({5, 4}, DType::f32), Tensor::zeros({3, 4}, DType::f32));
      },
      ErrorCode::ShapeMismatch, {"combine_backward: expert_out has shape [5, 4]"}));
  EXPECT_TRUE(throws_error([&] { d.combine_backward(eo, Tensor{}); }, ErrorCode::InvalidArgument,
                           {"combine_backward: grad_output is an undefined tensor"}));
  EXPECT_TRUE(throws_error(
      [&] {
        d.dispatch_backward(Tensor::zeros({7, 4}, DType::f32));
      },
      ErrorCode::ShapeMismatch, {"dispatch_backward: drows has shape [7, 4]"}));
  EXPECT_TRUE(throws_error(
      [&] {
        d.dispatch_backward(Tensor::zeros({6, 4}, DType::i32));
      },
      ErrorCode::DTypeMismatch, {"dispatch_backward: drows has dtype i32"}));
  // Native SwiGLU.
  const Tensor g = Tensor::zeros({2, 3}, DType::f32);
  EXPECT_TRUE(throws_error(
      [&] {
        moe::native_swiglu(g, Tensor::zeros({2, 4}, DType::f32));
      },
      ErrorCode::ShapeMismatch, {"native_swiglu: up has shape [2, 4]"}));
  EXPECT_TRUE(throws_error(
      [&] {
        moe::native_swiglu(g, Tensor::zeros({2, 3}, DType::f16));
      },
      ErrorCode::DTypeMismatch, {"native_swiglu: up has dtype f16"}));
  EXPECT_TRUE(throws_error(
      [&] {
        moe::native_swiglu(Tensor::zeros({2, 3}, DType::i64), g);
      },
      ErrorCode::DTypeMismatch, {"native_swiglu: gate has dtype i64"}));
  EXPECT_TRUE(throws_error(
      [&] {
        moe::native_swiglu_backward(g, g, Tensor::zeros({3, 2}, DType::f32));
      },
      ErrorCode::ShapeMismatch, {"native_swiglu_backward: grad has shape [3, 2]"}));
  EXPECT_TRUE(throws_error([&] { moe::native_swiglu_backward(g, g, Tensor{}); },
                           ErrorCode::InvalidArgument,
                           {"native_swiglu_backward: grad is an undefined tensor"}));
  // Training plan of an empty selection.
  EXPECT_TRUE(throws_error([&] { moe::RoutingPlan{}.into_training(logits, {}); },
                           ErrorCode::InvalidArgument,
                           {"into_training: the routing plan is empty"}));
}

}  // namespace
}  // namespace rudnn::test
