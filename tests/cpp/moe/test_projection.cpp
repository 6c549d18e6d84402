// Expert projections (spec 002) on the CPU and on the GPU against the CPU: rows in their
// incoming order, expert_start, foreign ids as NaN rows, gradients against finite
// differences, selected gradients absent, errors.
#include <cmath>
#include <limits>

#include "support/test_support.h"

namespace rudnn::test {
namespace {

using moe::ExpertProjectionOptions;
using moe::GroupedStrategy;

constexpr Device kGpu = Device::cuda(0);

Tensor ids_tensor(const std::vector<uint32_t>& v) {
  return Tensor::from_host(v, {static_cast<int64_t>(v.size())});
}

TEST(MoeProjection, RowsKeepTheirOrderAndForeignIdsAreNaN) {
  // E = 2 local experts with global ids 5 and 6; N = 1, K = 2.
  const Tensor w = host_tensor({1, 0, 0, 1}, {2, 1, 2}, DType::f64);  // e0 picks x0, e1 picks x1
  const Tensor x = host_tensor({1, 2, 3, 4, 5, 6, 7, 8}, {4, 2}, DType::f64);
  ExpertProjectionOptions o;
  o.expert_start = 5;
  const auto f = moe::expert_projection_forward(x, ids_tensor({6, 5, 9, 6}), w, o);
  const auto y = to_doubles(f.output);
  EXPECT_EQ(y[0], 2);
  EXPECT_EQ(y[1], 3);
  EXPECT_TRUE(std::isnan(y[2]));
  EXPECT_EQ(y[3], 8);
  const auto g =
      moe::expert_projection_backward(f.state, host_tensor({1, 1, 1, 1}, {4, 1}, DType::f64));
  const auto dx = to_doubles(g.input);
  EXPECT_EQ(dx[0], 0);
  EXPECT_EQ(dx[1], 1);
  EXPECT_TRUE(std::isnan(dx[4]) && std::isnan(dx[5]));
  // dW_e0 = x1 = (3, 4); dW_e1 = x0 + x3 = (1 + 7, 2 + 8).
  EXPECT_EQ(to_doubles(g.weights), (std::vector<double>{3, 4, 8, 10}));
  EXPECT_EQ(g.weights.dtype(), DType::f32);
}

TEST(MoeProjection, GradientsMatchFiniteDifferencesAndSelection) {
  RUDNN_SEEDED_RNG(rng);
  const int64_t R = 7, E = 3, N = 4, K = 5;
  const Tensor x = random_tensor(rng, {R, K}, DType::f64),
               w = random_tensor(rng, {E, N, K}, DType::f64);
  const Tensor ids = ids_tensor({2, 0, 1, 1, 2, 0, 2});
  const Tensor grad = random_tensor(rng, {R, N}, DType::f64);
  const auto gv = to_doubles(grad);
  const auto loss = [&](const Tensor& xx, const Tensor& ww) {
    const auto y = to_doubles(moe::expert_projection_forward(xx, ids, ww, {}).output);
    double s = 0;
    for (size_t i = 0; i < y.size(); ++i) s += y[i] * gv[i];
    return s;
  };
  const auto f = moe::expert_projection_forward(x, ids, w, {});
  const auto g = moe::expert_projection_backward(f.state, grad);
  for (int which = 0; which < 2; ++which) {
    const Tensor& at = which == 0 ? x : w;
    auto v = to_doubles(at);
    const auto got = to_doubles(which == 0 ? g.input : g.weights);
    const auto num = central_differences(v.data(), static_cast<int64_t>(v.size()), [&] {
      const Tensor t = host_tensor(v, at.shape(), DType::f64);
      return which == 0 ? loss(t, w) : loss(x, t);
    });
    for (size_t i = 0; i < v.size(); ++i)
      EXPECT_NEAR(got[i], num[i], 1e-5) << (which == 0 ? "input " : "weights ") << i;
  }
  const auto only_w = moe::expert_projection_backward(f.state, grad, {false, true});
  EXPECT_FALSE(only_w.input.defined());
  EXPECT_TRUE(bit_equal(only_w.weights, g.weights));
  const auto only_x = moe::expert_projection_backward(f.state, grad, {true, false});
  EXPECT_FALSE(only_x.weights.defined());
  EXPECT_TRUE(bit_equal(only_x.input, g.input));
}

TEST(MoeProjection, Errors) {
  const Tensor x = Tensor::zeros({3, 4}, DType::f32), w = Tensor::zeros({2, 5, 4}, DType::f32);
  const Tensor ids = Tensor::zeros({3}, DType::u32);
  EXPECT_TRUE(throws_error(
      [&] { moe::expert_projection_forward(x, Tensor::zeros({3}, DType::i32), w, {}); },
      ErrorCode::DTypeMismatch, {"expert_projection_forward: global_ids has dtype i32"}));
  EXPECT_TRUE(throws_error(
      [&] { moe::expert_projection_forward(x, Tensor::zeros({4}, DType::u32), w, {}); },
      ErrorCode::ShapeMismatch,
      {"expert_projection_forward: global_ids has shape [4]", "[R] = [3]"}));
  EXPECT_TRUE(throws_error(
      [&] {
        moe::expert_projection_forward(x, ids, Tensor::zeros({2, 5, 3}, DType::f32), {});
      },
      ErrorCode::ShapeMismatch,
      {"expert_projection_forward: weights has shape [2, 5, 3]", "K = 4"}));
  EXPECT_TRUE(throws_error(
      [&] {
        moe::expert_projection_forward(x, ids, Tensor::zeros({2, 5, 4}, DType::bf16), {});
      },
      ErrorCode::DTypeMismatch, {"expert_projection_forward: weights has dtype bf16"}));
  EXPECT_TRUE(throws_error(
      [&] { moe::expert_projection_forward(Tensor::zeros({3}, DType::f32), ids, w, {}); },
      ErrorCode::ShapeMismatch, {"expert_projection_forward: input has shape [3]"}));
  EXPECT_TRUE(throws_error([&] { moe::expert_projection_forward(x, ids, w, {-1}); },
                           ErrorCode::InvalidArgument,
                           {"expert_projection_forward: expert_start is -1"}));
  ExpertProjectionOptions tc;
  tc.forward = GroupedStrategy::TensorCore;
  EXPECT_TRUE(throws_error([&] { moe::expert_projection_forward(x, ids, w, tc); },
                           ErrorCode::Unsupported,
                           {"expert_projection_forward: strategy TensorCore needs f16 or bf16"}));
  const auto f = moe::expert_projection_forward(x, ids, w, {});
  EXPECT_TRUE(throws_error(
      [&] {
        moe::expert_projection_backward(f.state, Tensor::zeros({3, 4}, DType::f32));
      },
      ErrorCode::ShapeMismatch,
      {"expert_projection_backward: grad has shape [3, 4]", "[R, N] = [3, 5]"}));
  EXPECT_TRUE(throws_error(
      [&] {
        moe::expert_projection_backward(f.state, Tensor::zeros({3, 5}, DType::f16));
      },
      ErrorCode::DTypeMismatch, {"expert_projection_backward: grad has dtype f16"}));
  EXPECT_TRUE(throws_error(
      [&] {
        moe::expert_projection_backward(moe::ExpertProjectionState{},
                                        Tensor::zeros({3, 5}, DType::f32));
      },
      ErrorCode::InvalidArgument, {"expert_projection_backward: the state is empty"}));
}

TEST(MoeProjectionGpu, MatchesTheReference) {
  RUDNN_REQUIRE_CUDA();
  RUDNN_SEEDED_RNG(rng);
  for (DType dt : {DType::f32, DType::f16, DType::bf16}) {
    for (GroupedStrategy s :
         {GroupedStrategy::Scalar, GroupedStrategy::TensorCore, GroupedStrategy::Auto}) {
      if (s == GroupedStrategy::TensorCore && dt == DType::f32) continue;
      const int64_t R = rng.integer(1, 2000), E = rng.integer(1, 40), N = rng.integer(1, 200),
                    K = rng.integer(1, 200), start = rng.integer(0, 100);
      SCOPED_TRACE(::testing::Message() << dtype_name(dt) << " strategy " << static_cast<int>(s)
                                        << " R " << R << " E " << E << " N " << N << " K " << K);
      const Tensor x = random_tensor(rng, {R, K}, dt);
      const Tensor w =
          random_tensor(rng, {E, N, K}, dt, 0, 1.0f / std::sqrt(static_cast<float>(K)));
      // Mostly local ids, some foreign (below and above the slice).
      const Tensor ids =
          random_integers(rng, {R}, DType::u32, std::max<int64_t>(0, start - 2), start + E + 1);
      const Tensor grad = random_tensor(rng, {R, N}, dt);
      ExpertProjectionOptions o;
      o.expert_start = start;
      o.forward = o.backward = s;
      ExpertProjectionOptions host = o;  // the CPU reference runs the Scalar strategy only
      host.forward = host.backward = GroupedStrategy::Scalar;
      const auto hf = moe::expert_projection_forward(x, ids, w, host);
      const auto gf = moe::expert_projection_forward(x.to(kGpu), ids.to(kGpu), w.to(kGpu), o);
      EXPECT_TRUE(all_close(gf.output, hf.output, 2 * tolerance(dt)));
      const auto hg = moe::expert_projection_backward(hf.state, grad);
      const auto gg = moe::expert_projection_backward(gf.state, grad.to(kGpu));
      EXPECT_TRUE(all_close(gg.input, hg.input, 2 * tolerance(dt)));
      EXPECT_TRUE(all_close(gg.weights, hg.weights, 2 * tolerance(dt)));
      EXPECT_TRUE(
          bit_equal(moe::expert_projection_backward(gf.state, grad.to(kGpu)).weights, gg.weights));
    }
  }
}

}  // namespace
}  // namespace rudnn::test
