// The MoE family on the CPU (the reference backend): routing on rows computed by hand (ties,
// NaN / +inf / all -inf rows, renormalisation, groups, the correction bias), the stable
// dispatch and its mapping, the weighted combine, and the SwiGLU experts against a direct
// evaluation. These run everywhere, CI included.
#include <cmath>
#include <limits>

#include "support/test_support.h"

namespace rudnn::test {
namespace {

using moe::GroupRoutingOptions;
using moe::RoutingOptions;

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

std::vector<uint32_t> indices_of(const moe::RoutingPlan& plan) {
  return plan.expert_indices().to_vector<uint32_t>();
}

void expect_near_all(const std::vector<double>& got, const std::vector<double>& want, double tol) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(want[i])) {
      EXPECT_TRUE(std::isnan(got[i])) << "element " << i << " is " << got[i] << ", expected NaN";
    } else {
      EXPECT_NEAR(got[i], want[i], tol) << "element " << i;
    }
  }
}

std::vector<double> softmax(const std::vector<double>& x) {
  double m = -kInf, s = 0;
  for (double v : x) m = std::max(m, v);
  std::vector<double> p;
  for (double v : x) s += std::exp(v - m);
  for (double v : x) p.push_back(std::exp(v - m) / s);
  return p;
}

TEST(MoeReference, RouteSelectsTheLargestProbabilitiesInOrder) {
  const std::vector<double> row = {0.5, 2.0, -1.0, 1.5, 0.0};
  for (DType dtype : {DType::f64, DType::f32}) {
    const Tensor logits = host_tensor(row, {1, 5}, dtype);
    const auto plan = moe::route(logits, RoutingOptions{3, false});
    EXPECT_EQ(plan.expert_indices().dtype(), DType::u32);
    EXPECT_EQ(plan.weights().dtype(), dtype);
    EXPECT_EQ(plan.expert_indices().shape(), (Shape{1, 3}));
    EXPECT_EQ(indices_of(plan), (std::vector<uint32_t>{1, 3, 0}));
    const auto p = softmax(row);
    expect_near_all(to_doubles(plan.weights()), {p[1], p[3], p[0]}, 1e-7);
    const auto renorm = moe::route(logits, RoutingOptions{3, true});
    const double s = p[1] + p[3] + p[0];
    expect_near_all(to_doubles(renorm.weights()), {p[1] / s, p[3] / s, p[0] / s}, 1e-7);
  }
}

TEST(MoeReference, RouteTiesGoToTheLowerExpertId) {
  // Experts 1, 2 and 4 tie; -0 and +0 tie too.
  const Tensor logits = host_tensor({0.0, 1.0, 1.0, -2.0, 1.0, -0.0, 0.0}, {1, 7}, DType::f32);
  EXPECT_EQ(indices_of(moe::route(logits, RoutingOptions{7, false})),
            (std::vector<uint32_t>{1, 2, 4, 0, 5, 6, 3}));
}

TEST(MoeReference, RouteRowsWithoutProbabilitiesKeepNaNWeights) {
  // Rows: a NaN, a +inf, only -inf, and a finite row with one -inf (probability 0).
  const Tensor logits = host_tensor({1.0, kNaN, 0.0, 2.0,         //
                                     1.0, kInf, 0.0, 2.0,         //
                                     -kInf, -kInf, -kInf, -kInf,  //
                                     1.0, -kInf, 0.0, 2.0},
                                    {4, 4}, DType::f32);
  for (bool renormalize : {false, true}) {
    const auto plan = moe::route(logits, RoutingOptions{4, renormalize});
    const auto w = to_doubles(plan.weights());
    for (int i = 0; i < 12; ++i) EXPECT_TRUE(std::isnan(w[i])) << "weight " << i;
    const auto p = softmax({1.0, -kInf, 0.0, 2.0});
    const double s = renormalize ? p[0] + p[1] + p[2] + p[3] : 1.0;
    expect_near_all({w[12], w[13], w[14], w[15]}, {p[3] / s, p[0] / s, p[2] / s, 0.0}, 1e-7);
    // The indices are still distinct experts: NaN first, then +inf, ties to the lower id.
    const auto idx = indices_of(plan);
    EXPECT_EQ(std::vector<uint32_t>(idx.begin(), idx.begin() + 4),
              (std::vector<uint32_t>{1, 3, 0, 2}));
    EXPECT_EQ(std::vector<uint32_t>(idx.begin() + 4, idx.begin() + 8),
              (std::vector<uint32_t>{1, 3, 0, 2}));
    EXPECT_EQ(std::vector<uint32_t>(idx.begin() + 8, idx.begin() + 12),
              (std::vector<uint32_t>{0, 1, 2, 3}));
  }
}

TEST(MoeReference, RouteWeightsAreCastToTheLogitsDtype) {
  const Tensor logits = host_tensor({0.1, 0.2, 0.3}, {1, 3}, DType::bf16);
  const auto plan = moe::route(logits, RoutingOptions{2, true});
  EXPECT_EQ(plan.weights().dtype(), DType::bf16);
  const auto w = to_doubles(plan.weights());
  for (double v : w)
    EXPECT_EQ(static_cast<double>(static_cast<float>(bfloat16(static_cast<float>(v)))), v);
}

double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

TEST(MoeReference, SigmoidGroupedPicksGroupsThenExperts) {
  // 8 experts in 4 groups of 2; choose 2 groups, then 3 experts among their 4.
  const std::vector<double> row = {0.1, 0.2, 3.0, -1.0, 0.5, 0.6, 2.0, 1.9};
  const Tensor logits = host_tensor(row, {1, 8}, DType::f32);
  GroupRoutingOptions o;
  o.top_k = 3;
  o.groups = 4;
  o.selected_groups = 2;
  // Group max: g0 0.2, g1 3.0, g2 0.6, g3 2.0 -> groups 1 and 3 -> experts 2, 6, 7.
  auto plan = moe::route_sigmoid_grouped(logits, {}, o);
  EXPECT_EQ(indices_of(plan), (std::vector<uint32_t>{2, 6, 7}));
  expect_near_all(to_doubles(plan.weights()), {sigmoid(3.0), sigmoid(2.0), sigmoid(1.9)}, 1e-7);
  // Top-two sums: g1 3.0 + -1.0 is below g3 2.0 + 1.9 and g2 0.5 + 0.6 is below g1: same
  // groups here; with g1's second expert lower still, g2 wins over g1.
  o.group_top_two = true;
  const Tensor low = host_tensor({0.1, 0.2, 3.0, -9.0, 0.5, 0.6, 2.0, 1.9}, {1, 8}, DType::f32);
  // sigmoid sums: g0 1.075, g1 0.953, g2 1.268, g3 1.751 -> groups 3 and 2.
  plan = moe::route_sigmoid_grouped(low, {}, o);
  EXPECT_EQ(indices_of(plan), (std::vector<uint32_t>{6, 7, 5}));
  // Renormalised and scaled.
  o.renormalize = true;
  o.scale = 2.5f;
  plan = moe::route_sigmoid_grouped(low, {}, o);
  const double s = sigmoid(2.0) + sigmoid(1.9) + sigmoid(0.6);
  expect_near_all(to_doubles(plan.weights()),
                  {2.5 * sigmoid(2.0) / s, 2.5 * sigmoid(1.9) / s, 2.5 * sigmoid(0.6) / s}, 1e-6);
}

TEST(MoeReference, SigmoidGroupedBiasAffectsSelectionOnly) {
  const std::vector<double> row = {1.0, 0.0, -1.0, 0.5};
  const Tensor logits = host_tensor(row, {1, 4}, DType::f32);
  GroupRoutingOptions o;
  o.top_k = 2;
  o.groups = 1;
  o.selected_groups = 1;
  EXPECT_EQ(indices_of(moe::route_sigmoid_grouped(logits, {}, o)), (std::vector<uint32_t>{0, 3}));
  // A bias lifting expert 2 changes the choice; its weight is still sigmoid(-1).
  const Tensor bias = host_tensor({0.0, 0.0, 1.0, 0.0}, {4}, DType::f32);
  const auto plan = moe::route_sigmoid_grouped(logits, bias, o);
  EXPECT_EQ(indices_of(plan), (std::vector<uint32_t>{2, 0}));
  expect_near_all(to_doubles(plan.weights()), {sigmoid(-1.0), sigmoid(1.0)}, 1e-7);
}

TEST(MoeReference, SigmoidGroupedTiesGoToLowerIds) {
  // All equal: groups 0 and 1 of 3, experts in id order.
  const Tensor logits = host_tensor(std::vector<double>(12, 0.25), {1, 12}, DType::f32);
  GroupRoutingOptions o;
  o.top_k = 4;
  o.groups = 4;
  o.selected_groups = 2;
  EXPECT_EQ(indices_of(moe::route_sigmoid_grouped(logits, {}, o)),
            (std::vector<uint32_t>{0, 1, 2, 3}));
}

TEST(MoeReference, DispatchIsAStableSortByExpert) {
  // 4 tokens, top-2 over 3 experts.
  const Tensor logits = host_tensor({3, 2, 1,  //
                                     1, 3, 2,  //
                                     3, 1, 2,  //
                                     2, 3, 1},
                                    {4, 3}, DType::f32);
  const auto plan = moe::route(logits, RoutingOptions{2, false});
  EXPECT_EQ(indices_of(plan), (std::vector<uint32_t>{0, 1, 1, 2, 0, 2, 1, 0}));
  const Tensor input = host_tensor({10, 11, 20, 21, 30, 31, 40, 41}, {4, 2}, DType::f32);
  const auto d = plan.dispatch(input);
  // Expert 0: tokens 0, 2, 3; expert 1: 0, 1, 3; expert 2: 1, 2.
  EXPECT_EQ(d.offsets().to_vector<int32_t>(), (std::vector<int32_t>{0, 3, 6, 8}));
  EXPECT_EQ(d.token_of_row().to_vector<int32_t>(), (std::vector<int32_t>{0, 2, 3, 0, 1, 3, 1, 2}));
  EXPECT_EQ(d.row_of_slot().to_vector<int32_t>(), (std::vector<int32_t>{0, 3, 4, 6, 1, 7, 5, 2}));
  EXPECT_EQ(to_doubles(d.rows()),
            (std::vector<double>{10, 11, 30, 31, 40, 41, 10, 11, 20, 21, 40, 41, 20, 21, 30, 31}));
  // Combine of the dispatched rows themselves: each token times the sum of its weights.
  const auto w = to_doubles(plan.weights());
  const auto out = to_doubles(d.combine(d.rows()));
  const auto x = to_doubles(input);
  std::vector<double> want;
  for (int t = 0; t < 4; ++t)
    for (int h = 0; h < 2; ++h) want.push_back((w[2 * t] + w[2 * t + 1]) * x[2 * t + h]);
  expect_near_all(out, want, 1e-5);
}

TEST(MoeReference, ExpertsMatchADirectEvaluation) {
  RUDNN_SEEDED_RNG(rng);
  const int64_t T = 5, E = 3, H = 4, I = 6, k = 2;
  const Tensor input = random_tensor(rng, {T, H}, DType::f64);
  const Tensor logits = random_tensor(rng, {T, E}, DType::f64);
  const Tensor gate = random_tensor(rng, {E, I, H}, DType::f64);
  const Tensor up = random_tensor(rng, {E, I, H}, DType::f64);
  const Tensor down = random_tensor(rng, {E, H, I}, DType::f64);
  const moe::SwiGluExperts experts(gate, up, down);
  const Tensor out = experts.forward(input, logits, RoutingOptions{k, true});
  const auto plan = moe::route(logits, RoutingOptions{k, true});
  const auto idx = indices_of(plan);
  const auto w = to_doubles(plan.weights());
  const auto x = to_doubles(input), g = to_doubles(gate), u = to_doubles(up), dn = to_doubles(down);
  std::vector<double> want(T * H, 0.0);
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t j = 0; j < k; ++j) {
      const int64_t e = idx[t * k + j];
      std::vector<double> act(I);
      for (int64_t i = 0; i < I; ++i) {
        double gv = 0, uv = 0;
        for (int64_t h = 0; h < H; ++h) {
          gv += g[(e * I + i) * H + h] * x[t * H + h];
          uv += u[(e * I + i) * H + h] * x[t * H + h];
        }
        act[i] = gv * sigmoid(gv) * uv;
      }
      for (int64_t h = 0; h < H; ++h) {
        double y = 0;
        for (int64_t i = 0; i < I; ++i) y += dn[(e * H + h) * I + i] * act[i];
        want[t * H + h] += w[t * k + j] * y;
      }
    }
  }
  expect_near_all(to_doubles(out), want, 1e-10);
}

TEST(MoeReference, ZeroTokens) {
  const Tensor logits = Tensor::empty({0, 4}, DType::f32);
  const auto plan = moe::route(logits, RoutingOptions{2, true});
  EXPECT_EQ(plan.expert_indices().shape(), (Shape{0, 2}));
  const auto d = plan.dispatch(Tensor::empty({0, 8}, DType::f32));
  EXPECT_EQ(d.offsets().to_vector<int32_t>(), (std::vector<int32_t>{0, 0, 0, 0, 0}));
  EXPECT_EQ(d.combine(d.rows()).shape(), (Shape{0, 8}));
}

TEST(MoeReference, InputsUnchanged) {
  RUDNN_SEEDED_RNG(rng);
  const Tensor logits = random_tensor(rng, {6, 8}, DType::f32);
  const Tensor input = random_tensor(rng, {6, 4}, DType::f32);
  const auto l0 = bytes_of(logits), i0 = bytes_of(input);
  const auto plan = moe::route(logits, RoutingOptions{3, true});
  const auto d = plan.dispatch(input);
  (void)d.combine(d.rows());
  EXPECT_EQ(bytes_of(logits), l0);
  EXPECT_EQ(bytes_of(input), i0);
}

}  // namespace
}  // namespace rudnn::test
