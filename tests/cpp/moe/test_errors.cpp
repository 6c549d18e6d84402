// Every argument rule of the MoE family: bad input is a rudnn::Error that names the op, the
// argument and the rule. Device mismatches need a GPU and live in test_gpu.cpp.
#include "support/test_support.h"

namespace rudnn::test {
namespace {

using moe::GroupedStrategy;
using moe::GroupRoutingOptions;
using moe::RoutingOptions;

const Tensor kLogits = Tensor::full({3, 8}, 0.5, DType::f32);

GroupRoutingOptions good_groups() {
  GroupRoutingOptions o;
  o.top_k = 2;
  o.groups = 4;
  o.selected_groups = 2;
  return o;
}

TEST(MoeErrors, RouteLogits) {
  EXPECT_TRUE(throws_error(
      [] {
        moe::route(Tensor{}, {1, false});
      },
      ErrorCode::InvalidArgument, {"route: logits is an undefined tensor"}));
  EXPECT_TRUE(throws_error(
      [] {
        moe::route(Tensor::zeros({3, 8}, DType::i32), {1, false});
      },
      ErrorCode::DTypeMismatch, {"route: logits has dtype i32"}));
  EXPECT_TRUE(throws_error(
      [] {
        moe::route(Tensor::zeros({2, 3, 8}, DType::f32), {1, false});
      },
      ErrorCode::ShapeMismatch, {"route: logits has shape [2, 3, 8]", "[T, E]"}));
  EXPECT_TRUE(throws_error(
      [] {
        moe::route(Tensor::zeros({3, 0}, DType::f32), {1, false});
      },
      ErrorCode::InvalidArgument, {"route: logits", "E >= 1"}));
}

TEST(MoeErrors, RouteTopK) {
  EXPECT_TRUE(throws_error(
      [] {
        moe::route(kLogits, {0, false});
      },
      ErrorCode::InvalidArgument, {"route: top_k is 0", "1 <= top_k <= 8"}));
  EXPECT_TRUE(throws_error(
      [] {
        moe::route(kLogits, {9, false});
      },
      ErrorCode::InvalidArgument, {"route: top_k is 9", "1 <= top_k <= 8"}));
}

void expect_group_error(const GroupRoutingOptions& o, std::initializer_list<std::string> frags,
                        const Tensor& logits = kLogits, const Tensor& bias = {},
                        ErrorCode code = ErrorCode::InvalidArgument) {
  EXPECT_TRUE(throws_error([&] { moe::route_sigmoid_grouped(logits, bias, o); }, code, frags));
}

TEST(MoeErrors, SigmoidGroupedLimits) {
  auto o = good_groups();
  expect_group_error(o, {"route_sigmoid_grouped: logits has E = 1025", "E <= 1024"},
                     Tensor::zeros({1, 1025}, DType::f32));
  expect_group_error(o, {"route_sigmoid_grouped: logits has dtype u8"},
                     Tensor::zeros({1, 8}, DType::u8), {}, ErrorCode::DTypeMismatch);
  o.groups = 0;
  expect_group_error(o, {"route_sigmoid_grouped: groups is 0", "1 <= groups <= 128"});
  o.groups = 129;
  expect_group_error(o, {"groups is 129", "1 <= groups <= 128"},
                     Tensor::zeros({1, 129 * 2}, DType::f32));
  o = good_groups();
  o.groups = 3;
  expect_group_error(o, {"groups is 3", "divisor of E = 8"});
  o = good_groups();
  o.selected_groups = 0;
  expect_group_error(o, {"selected_groups is 0", "1 <= selected_groups <= 4"});
  o.selected_groups = 5;
  expect_group_error(o, {"selected_groups is 5", "1 <= selected_groups <= 4"});
  o = good_groups();
  o.top_k = 0;
  expect_group_error(o, {"top_k is 0", "1 <= top_k <= 64"});
  o.top_k = 65;
  expect_group_error(o, {"top_k is 65", "1 <= top_k <= 64"}, Tensor::zeros({1, 128}, DType::f32));
  o = good_groups();
  o.top_k = 5;  // 2 groups of 2 experts hold 4
  expect_group_error(o, {"top_k is 5", "selected_groups * E / groups = 4"});
  o = good_groups();
  o.groups = 8;
  o.group_top_two = true;
  expect_group_error(o, {"group_top_two needs at least 2 experts per group"});
  for (float bad : {0.0f, -1.0f, std::numeric_limits<float>::infinity(),
                    std::numeric_limits<float>::quiet_NaN()}) {
    o = good_groups();
    o.scale = bad;
    expect_group_error(o, {"route_sigmoid_grouped: scale"});
  }
}

TEST(MoeErrors, SigmoidGroupedBias) {
  expect_group_error(good_groups(), {"route_sigmoid_grouped: bias has dtype bf16", "expected f32"},
                     kLogits, Tensor::zeros({8}, DType::bf16), ErrorCode::DTypeMismatch);
  expect_group_error(good_groups(), {"route_sigmoid_grouped: bias has shape [7]", "[E] = [8]"},
                     kLogits, Tensor::zeros({7}, DType::f32), ErrorCode::ShapeMismatch);
}

TEST(MoeErrors, Dispatch) {
  const auto plan = moe::route(kLogits, {2, true});
  EXPECT_TRUE(throws_error([&] { plan.dispatch(Tensor{}); }, ErrorCode::InvalidArgument,
                           {"dispatch: input is an undefined tensor"}));
  EXPECT_TRUE(throws_error(
      [&] {
        plan.dispatch(Tensor::zeros({3, 4}, DType::i64));
      },
      ErrorCode::DTypeMismatch, {"dispatch: input has dtype i64"}));
  EXPECT_TRUE(throws_error(
      [&] {
        plan.dispatch(Tensor::zeros({4, 4}, DType::f32));
      },
      ErrorCode::ShapeMismatch, {"dispatch: input has shape [4, 4]", "T = 3"}));
  EXPECT_TRUE(throws_error(
      [&] {
        plan.dispatch(Tensor::zeros({3, 0}, DType::f32));
      },
      ErrorCode::ShapeMismatch, {"dispatch: input has shape [3, 0]", "H >= 1"}));
  EXPECT_TRUE(throws_error(
      [&] {
        moe::RoutingPlan{}.dispatch(Tensor::zeros({3, 4}, DType::f32));
      },
      ErrorCode::InvalidArgument, {"dispatch: the routing plan is empty"}));
}

TEST(MoeErrors, Combine) {
  const auto d = moe::route(kLogits, {2, true}).dispatch(Tensor::zeros({3, 4}, DType::f32));
  EXPECT_TRUE(throws_error([&] { d.combine(Tensor{}); }, ErrorCode::InvalidArgument,
                           {"combine: expert_out is an undefined tensor"}));
  EXPECT_TRUE(throws_error(
      [&] {
        d.combine(Tensor::zeros({6, 4}, DType::i32));
      },
      ErrorCode::DTypeMismatch, {"combine: expert_out has dtype i32"}));
  EXPECT_TRUE(throws_error(
      [&] {
        d.combine(Tensor::zeros({5, 4}, DType::f32));
      },
      ErrorCode::ShapeMismatch, {"combine: expert_out has shape [5, 4]", "T * top_k = 6"}));
  EXPECT_TRUE(throws_error(
      [&] {
        moe::DispatchedTokens{}.combine(Tensor::zeros({6, 4}, DType::f32));
      },
      ErrorCode::InvalidArgument, {"combine: the dispatched tokens are empty"}));
}

TEST(MoeErrors, ExpertWeights) {
  const Tensor g = Tensor::zeros({8, 6, 4}, DType::f32), d = Tensor::zeros({8, 4, 6}, DType::f32);
  EXPECT_TRUE(throws_error([&] { moe::SwiGluExperts(Tensor{}, g, d); }, ErrorCode::InvalidArgument,
                           {"SwiGluExperts: gate is an undefined tensor"}));
  EXPECT_TRUE(throws_error(
      [&] {
        moe::SwiGluExperts(Tensor::zeros({8, 6}, DType::f32), g, d);
      },
      ErrorCode::ShapeMismatch, {"SwiGluExperts: gate has shape [8, 6]", "[E, I, H]"}));
  EXPECT_TRUE(throws_error(
      [&] {
        moe::SwiGluExperts(g, Tensor::zeros({8, 6, 5}, DType::f32), d);
      },
      ErrorCode::ShapeMismatch, {"SwiGluExperts: up"}));
  EXPECT_TRUE(throws_error(
      [&] {
        moe::SwiGluExperts(g, Tensor::zeros({8, 6, 4}, DType::bf16), d);
      },
      ErrorCode::DTypeMismatch, {"SwiGluExperts: up"}));
  EXPECT_TRUE(throws_error(
      [&] {
        moe::SwiGluExperts(g, g, Tensor::zeros({8, 4, 6}, DType::f16));
      },
      ErrorCode::DTypeMismatch, {"SwiGluExperts: down has dtype f16"}));
  EXPECT_TRUE(throws_error(
      [&] {
        moe::SwiGluExperts(g, g, Tensor::zeros({8, 6, 4}, DType::f32));
      },
      ErrorCode::ShapeMismatch,
      {"SwiGluExperts: down has shape [8, 6, 4]", "[E, H, I] = [8, 4, 6]"}));
  EXPECT_TRUE(throws_error([&] { moe::SwiGluExperts(g, g, Tensor{}); }, ErrorCode::InvalidArgument,
                           {"SwiGluExperts: down is an undefined tensor"}));
}

TEST(MoeErrors, ForwardDispatched) {
  const moe::SwiGluExperts experts(Tensor::zeros({8, 6, 4}, DType::f32),
                                   Tensor::zeros({8, 6, 4}, DType::f32),
                                   Tensor::zeros({8, 4, 6}, DType::f32));
  const auto plan = moe::route(kLogits, {2, true});
  EXPECT_TRUE(throws_error(
      [&] {
        experts.forward_dispatched(plan.dispatch(Tensor::zeros({3, 4}, DType::bf16)));
      },
      ErrorCode::DTypeMismatch, {"forward_dispatched: tokens has dtype bf16"}));
  EXPECT_TRUE(throws_error(
      [&] {
        experts.forward_dispatched(plan.dispatch(Tensor::zeros({3, 5}, DType::f32)));
      },
      ErrorCode::ShapeMismatch, {"forward_dispatched: tokens have H = 5", "H = 4"}));
  const auto plan4 = moe::route(Tensor::zeros({3, 4}, DType::f32), {2, true});
  EXPECT_TRUE(throws_error(
      [&] {
        experts.forward_dispatched(plan4.dispatch(Tensor::zeros({3, 4}, DType::f32)));
      },
      ErrorCode::ShapeMismatch, {"forward_dispatched: tokens were routed over E = 4", "E = 8"}));
  EXPECT_TRUE(throws_error([&] { experts.forward_dispatched(moe::DispatchedTokens{}); },
                           ErrorCode::InvalidArgument,
                           {"forward_dispatched: tokens is an undefined tensor"}));
  // TensorCore needs 16-bit experts on a CUDA device.
  EXPECT_TRUE(throws_error(
      [&] {
        experts.forward_dispatched_with_strategy(plan.dispatch(Tensor::zeros({3, 4}, DType::f32)),
                                                 GroupedStrategy::TensorCore);
      },
      ErrorCode::Unsupported, {"forward_dispatched: strategy TensorCore needs f16 or bf16"}));
}

TEST(MoeErrors, WholeForward) {
  const moe::SwiGluExperts experts(Tensor::zeros({8, 6, 4}, DType::f32),
                                   Tensor::zeros({8, 6, 4}, DType::f32),
                                   Tensor::zeros({8, 4, 6}, DType::f32));
  const Tensor x = Tensor::zeros({3, 4}, DType::f32);
  EXPECT_TRUE(throws_error(
      [&] {
        experts.forward(Tensor::zeros({3, 5}, DType::f32), kLogits, {2, true});
      },
      ErrorCode::ShapeMismatch, {"forward: input has shape [3, 5]", "H = 4"}));
  EXPECT_TRUE(throws_error(
      [&] {
        experts.forward(x, Tensor::zeros({3, 4}, DType::f32), {2, true});
      },
      ErrorCode::ShapeMismatch, {"forward: logits has shape [3, 4]", "[T, E] = [3, 8]"}));
  EXPECT_TRUE(throws_error(
      [&] {
        experts.forward(Tensor::zeros({3, 4}, DType::f16), kLogits, {2, true});
      },
      ErrorCode::DTypeMismatch, {"forward: input has dtype f16"}));
  EXPECT_TRUE(throws_error(
      [&] {
        experts.forward(x, kLogits, {9, true});
      },
      ErrorCode::InvalidArgument, {"route: top_k is 9"}));
  auto o = good_groups();
  o.groups = 3;
  EXPECT_TRUE(throws_error(
      [&] { experts.forward_sigmoid_grouped(x, kLogits, {}, o, GroupedStrategy::Scalar); },
      ErrorCode::InvalidArgument, {"route_sigmoid_grouped: groups is 3"}));
}

}  // namespace
}  // namespace rudnn::test
