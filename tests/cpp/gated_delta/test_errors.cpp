// Every argument rule of the gated delta family: bad input is a rudnn::Error naming the op,
// the argument and the rule. Device mismatches need a GPU and are skipped without one.
#include <cmath>
#include <limits>

#include "rudnn/gated_delta.h"
#include "support/test_support.h"

namespace rudnn::test {
namespace {

// B2 T3 Hk2 Hv4 Dk8 Dv4.
Tensor zeros(const Shape& s, DType dt = DType::f32) { return Tensor::zeros(s, dt); }
const Tensor kQ = zeros({2, 3, 2, 8});
const Tensor kV = zeros({2, 3, 4, 4});
const Tensor kG = zeros({2, 3, 4});
const Tensor kS = zeros({2, 4, 4, 8});

TEST(GatedDeltaErrors, ValidCallsPass) {
  EXPECT_NO_THROW(gated_delta(kQ, kQ, kV, kG, kG, kS));
  EXPECT_NO_THROW(gated_delta_steps(kQ, kQ, kV, kG, kG, kS));
  Tensor pool = zeros({3, 4, 4, 8});
  EXPECT_NO_THROW(gated_delta_slots(kQ, kQ, kV, kG, kG, pool,
                                    Tensor::from_host(std::vector<int32_t>{2, 0}, {2})));
}

TEST(GatedDeltaErrors, UndefinedOperands) {
  EXPECT_TRUE(throws_error([&] { gated_delta(Tensor(), kQ, kV, kG, kG, kS); },
                           ErrorCode::InvalidArgument, {"gated_delta: q is an undefined tensor"}));
  EXPECT_TRUE(throws_error([&] { gated_delta(kQ, kQ, kV, kG, Tensor(), kS); },
                           ErrorCode::InvalidArgument, {"gated_delta", "beta", "undefined"}));
  EXPECT_TRUE(throws_error([&] { gated_delta_steps(kQ, kQ, kV, kG, kG, Tensor()); },
                           ErrorCode::InvalidArgument,
                           {"gated_delta_steps", "state", "undefined"}));
}

TEST(GatedDeltaErrors, Dtypes) {
  const Tensor qi = zeros({2, 3, 2, 8}, DType::i32);
  EXPECT_TRUE(throws_error([&] { gated_delta(qi, qi, kV, kG, kG, kS); }, ErrorCode::DTypeMismatch,
                           {"gated_delta", "q", "i32"}));
  EXPECT_TRUE(throws_error(
      [&] {
        gated_delta(kQ, zeros({2, 3, 2, 8}, DType::bf16), kV, kG, kG, kS);
      },
      ErrorCode::DTypeMismatch, {"gated_delta", "k", "q's dtype f32"}));
  EXPECT_TRUE(throws_error(
      [&] {
        gated_delta(kQ, kQ, zeros({2, 3, 4, 4}, DType::f16), kG, kG, kS);
      },
      ErrorCode::DTypeMismatch, {"gated_delta", "v", "q's dtype"}));
  EXPECT_TRUE(throws_error(
      [&] {
        gated_delta(kQ, kQ, kV, zeros({2, 3, 4}, DType::u8), kG, kS);
      },
      ErrorCode::DTypeMismatch, {"gated_delta", "g"}));
  EXPECT_TRUE(throws_error(
      [&] {
        gated_delta(kQ, kQ, kV, kG, kG, zeros({2, 4, 4, 8}, DType::i64));
      },
      ErrorCode::DTypeMismatch, {"gated_delta", "state"}));
}

TEST(GatedDeltaErrors, Shapes) {
  EXPECT_TRUE(throws_error(
      [&] {
        gated_delta(zeros({3, 2, 8}), kQ, kV, kG, kG, kS);
      },
      ErrorCode::ShapeMismatch, {"gated_delta", "q", "[B, T, Hk, Dk]"}));
  EXPECT_TRUE(throws_error(
      [&] {
        gated_delta(kQ, zeros({2, 3, 2, 4}), kV, kG, kG, kS);
      },
      ErrorCode::ShapeMismatch, {"gated_delta", "k"}));
  EXPECT_TRUE(throws_error(
      [&] {
        gated_delta(kQ, kQ, zeros({2, 2, 4, 4}), kG, kG, kS);
      },
      ErrorCode::ShapeMismatch, {"gated_delta", "v", "T = 3"}));
  EXPECT_TRUE(throws_error(
      [&] {
        gated_delta(kQ, kQ, zeros({3, 4}), kG, kG, kS);
      },
      ErrorCode::ShapeMismatch, {"gated_delta", "v", "[B, T, Hv, Dv]"}));
  EXPECT_TRUE(throws_error(
      [&] {
        gated_delta(kQ, kQ, kV, zeros({2, 3, 2}), kG, kS);
      },
      ErrorCode::ShapeMismatch, {"gated_delta", "g"}));
  EXPECT_TRUE(throws_error(
      [&] {
        gated_delta(kQ, kQ, kV, kG, zeros({2, 4, 3}), kS);
      },
      ErrorCode::ShapeMismatch, {"gated_delta", "beta"}));
  EXPECT_TRUE(throws_error(
      [&] {
        gated_delta(kQ, kQ, kV, kG, kG, zeros({2, 4, 8, 4}));
      },
      ErrorCode::ShapeMismatch, {"gated_delta", "state", "[B, Hv, Dv, Dk]"}));
  EXPECT_TRUE(throws_error(
      [&] {
        gated_delta_steps(zeros({2, 3, 0, 8}), zeros({2, 3, 0, 8}), kV, kG, kG, kS);
      },
      ErrorCode::InvalidArgument, {"gated_delta_steps", "q", "Hk >= 1"}));
  EXPECT_TRUE(throws_error(
      [&] {
        gated_delta(kQ, kQ, zeros({2, 3, 4, 0}), kG, kG, zeros({2, 4, 0, 8}));
      },
      ErrorCode::InvalidArgument, {"gated_delta", "v", "Dv >= 1"}));
}

TEST(GatedDeltaErrors, ValueHeadsMustBeAMultipleOfKeyHeads) {
  EXPECT_TRUE(throws_error(
      [&] {
        gated_delta(kQ, kQ, zeros({2, 3, 3, 4}), zeros({2, 3, 3}), zeros({2, 3, 3}),
                    zeros({2, 3, 4, 8}));
      },
      ErrorCode::InvalidArgument, {"gated_delta", "Hv = 3", "multiple of q's Hk = 2"}));
}

TEST(GatedDeltaErrors, SlotRules) {
  const Tensor pool = zeros({3, 4, 4, 8});
  auto ids = [](std::vector<int64_t> v) { return Tensor::from_host(v, {int64_t(v.size())}); };
  EXPECT_TRUE(throws_error(
      [&] {
        gated_delta_slots(kQ, kQ, kV, kG, kG, pool, ids({0, 3}));
      },
      ErrorCode::InvalidArgument, {"gated_delta_slots", "slots[1] = 3", "[0, 3)"}));
  EXPECT_TRUE(throws_error(
      [&] {
        gated_delta_slots(kQ, kQ, kV, kG, kG, pool, ids({-1, 0}));
      },
      ErrorCode::InvalidArgument, {"gated_delta_slots", "slots[0] = -1"}));
  EXPECT_TRUE(throws_error(
      [&] {
        gated_delta_slots(kQ, kQ, kV, kG, kG, pool, ids({1, 1}));
      },
      ErrorCode::InvalidArgument, {"gated_delta_slots", "repeated"}));
  EXPECT_TRUE(throws_error(
      [&] {
        gated_delta_slots(kQ, kQ, kV, kG, kG, pool, ids({0, 1, 2}));
      },
      ErrorCode::ShapeMismatch, {"gated_delta_slots", "slots", "[B]"}));
  EXPECT_TRUE(throws_error([&] { gated_delta_slots(kQ, kQ, kV, kG, kG, pool, zeros({2})); },
                           ErrorCode::DTypeMismatch, {"gated_delta_slots", "slots"}));
  EXPECT_TRUE(throws_error(
      [&] {
        gated_delta_slots(kQ, kQ, kV, kG, kG, zeros({3, 4, 8, 4}), ids({0, 1}));
      },
      ErrorCode::ShapeMismatch, {"gated_delta_slots", "pool", "[slots, Hv, Dv, Dk]"}));
  EXPECT_TRUE(throws_error(
      [&] {
        gated_delta_slots(kQ, kQ, kV, kG, kG, zeros({4, 8}), ids({0, 1}));
      },
      ErrorCode::ShapeMismatch, {"gated_delta_slots", "pool"}));
  const Tensor strided = zeros({6, 4, 4, 8}).slice(0, 0, 6, 2);
  EXPECT_TRUE(throws_error(
      [&] {
        gated_delta_slots(kQ, kQ, kV, kG, kG, strided, ids({0, 1}));
      },
      ErrorCode::InvalidArgument, {"gated_delta_slots", "pool", "contiguous"}));
  // v aliases the pool's first elements: the in-place update would overwrite an input.
  const Tensor aliased_v = pool.view({3 * 4 * 4 * 8}).slice(0, 0, 96).view({2, 3, 4, 4});
  EXPECT_TRUE(throws_error(
      [&] {
        gated_delta_slots(kQ, kQ, aliased_v, kG, kG, pool, ids({0, 1}));
      },
      ErrorCode::InvalidArgument, {"gated_delta_slots", "pool"}));
}

GatedDeltaInput rule_input() {
  GatedDeltaInput in;
  in.query = in.key = zeros({2, 3, 4, 8}, DType::bf16);  // B2 H3 T4 K8
  in.value = zeros({2, 3, 4, 6}, DType::bf16);
  in.beta = zeros({2, 3, 4}, DType::bf16);
  in.log_decay = zeros({2, 3, 4});
  in.initial_state = zeros({2, 3, 8, 6});
  in.query_scale = 0.125f;
  return in;
}

TEST(GatedDeltaErrors, RuleRules) {
  EXPECT_NO_THROW(gated_delta_rule(rule_input()));
  auto with = [](auto edit) {
    GatedDeltaInput in = rule_input();
    edit(in);
    return in;
  };
  auto expect = [](const GatedDeltaInput& in, ErrorCode code,
                   std::initializer_list<std::string> fragments) {
    EXPECT_TRUE(throws_error([&] { gated_delta_rule(in); }, code, fragments));
  };
  expect(with([](auto& in) { in.query = Tensor(); }), ErrorCode::InvalidArgument,
         {"gated_delta_rule: query is an undefined tensor"});
  expect(with([](auto& in) {
           in.log_decay = zeros({2, 3, 4}, DType::bf16);
         }),
         ErrorCode::DTypeMismatch, {"gated_delta_rule", "log_decay", "f32"});
  expect(with([](auto& in) {
           in.initial_state = zeros({2, 3, 8, 6}, DType::bf16);
         }),
         ErrorCode::DTypeMismatch, {"gated_delta_rule", "initial_state", "f32"});
  expect(with([](auto& in) {
           in.beta = zeros({2, 3, 4});
         }),
         ErrorCode::DTypeMismatch, {"gated_delta_rule", "beta", "query's dtype bf16"});
  expect(with([](auto& in) {
           in.key = zeros({2, 3, 4, 8}, DType::f16);
         }),
         ErrorCode::DTypeMismatch, {"gated_delta_rule", "key"});
  expect(with([](auto& in) {
           in.value = zeros({2, 3, 4, 6});
         }),
         ErrorCode::DTypeMismatch, {"gated_delta_rule", "value"});
  expect(with([](auto& in) {
           in.query = zeros({3, 4, 8}, DType::bf16);
         }),
         ErrorCode::ShapeMismatch, {"gated_delta_rule", "query", "[B, H, T, K]"});
  expect(with([](auto& in) {
           in.key = zeros({2, 3, 5, 8}, DType::bf16);
         }),
         ErrorCode::ShapeMismatch, {"gated_delta_rule", "key"});
  expect(with([](auto& in) {
           in.value = zeros({2, 2, 4, 6}, DType::bf16);
         }),
         ErrorCode::ShapeMismatch, {"gated_delta_rule", "value", "H = 3"});
  expect(with([](auto& in) {
           in.beta = zeros({2, 4, 3}, DType::bf16);
         }),
         ErrorCode::ShapeMismatch, {"gated_delta_rule", "beta", "[B, H, T]"});
  expect(with([](auto& in) {
           in.log_decay = zeros({2, 3, 5});
         }),
         ErrorCode::ShapeMismatch, {"gated_delta_rule", "log_decay"});
  expect(with([](auto& in) {
           in.initial_state = zeros({2, 3, 6, 8});
         }),
         ErrorCode::ShapeMismatch, {"gated_delta_rule", "initial_state", "[B, H, K, V]"});
  for (float bad :
       {std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN()}) {
    expect(with([&](auto& in) { in.query_scale = bad; }), ErrorCode::InvalidArgument,
           {"gated_delta_rule", "query_scale"});
  }
}

TEST(GatedDeltaErrors, DeviceMismatch) {
  RUDNN_REQUIRE_CUDA();
  const Tensor gpu_state = Tensor::zeros({2, 4, 4, 8}, DType::f32, Device::cuda(0));
  EXPECT_TRUE(throws_error([&] { gated_delta(kQ, kQ, kV, kG, kG, gpu_state); },
                           ErrorCode::DeviceMismatch, {"gated_delta", "state"}));
  GatedDeltaInput in = rule_input();
  in.log_decay = in.log_decay.to(Device::cuda(0));
  EXPECT_TRUE(throws_error([&] { gated_delta_rule(in); }, ErrorCode::DeviceMismatch,
                           {"gated_delta_rule", "log_decay"}));
}

}  // namespace
}  // namespace rudnn::test
