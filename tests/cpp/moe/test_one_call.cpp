// The one-call contract (moe_forward / moe_inference / moe_backward and their selected
// forms) on the CPU, and on the GPU against the CPU: the forward equals the composed steps,
// inference equals the forward bit for bit, every gradient against finite differences,
// absent gradients undefined, the cache rules and the errors.
#include <cmath>
#include <functional>

#include "support/test_support.h"

namespace rudnn::test {
namespace {

using moe::GroupedStrategy;
using moe::MoeOptions;
using moe::MoeSelection;

constexpr Device kGpu = Device::cuda(0);

struct Problem {
  Tensor input, logits, bias, gate, up, down, grad;
};

Problem make(Rng& rng, DType dt, int64_t t, int64_t e, int64_t h, int64_t i, bool with_bias) {
  const float ws = 1.0f / std::sqrt(static_cast<float>(h));
  Problem p;
  p.input = random_tensor(rng, {t, h}, dt);
  p.logits = random_tensor(rng, {t, e}, dt);
  if (with_bias) p.bias = random_tensor(rng, {e}, DType::f32, 0.0f, 0.1f);
  p.gate = random_tensor(rng, {e, i, h}, dt, 0.0f, ws);
  p.up = random_tensor(rng, {e, i, h}, dt, 0.0f, ws);
  p.down = random_tensor(rng, {e, h, i}, dt, 0.0f, ws);
  p.grad = random_tensor(rng, {t, h}, dt);
  return p;
}

Problem on(const Problem& p, Device d) {
  const auto to = [&](const Tensor& x) { return x.defined() ? x.to(d) : Tensor{}; };
  return {to(p.input), to(p.logits), to(p.bias), to(p.gate), to(p.up), to(p.down), to(p.grad)};
}

MoeOptions softmax_options(int64_t k) {
  MoeOptions o;
  o.selection.softmax = {k, true};
  o.weights.renormalize = true;
  o.weights.scale = 1.5f;
  return o;
}

MoeOptions grouped_options(int64_t k) {
  MoeOptions o;
  o.selection.kind = MoeSelection::Kind::SigmoidGrouped;
  o.selection.grouped.top_k = k;
  o.selection.grouped.groups = 2;
  o.selection.grouped.selected_groups = 1;
  o.weights.scoring = moe::RouterScoring::Sigmoid;
  o.weights.renormalize = true;
  return o;
}

double dot(const std::vector<double>& a, const std::vector<double>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

TEST(MoeOneCall, ForwardIsTheComposedStepsAndInferenceTheSameBits) {
  RUDNN_SEEDED_RNG(rng);
  const Problem p = make(rng, DType::f32, 9, 4, 8, 6, false);
  const MoeOptions o = softmax_options(2);
  const auto f = moe::moe_forward(p.input, p.logits, {}, p.gate, p.up, p.down, o);
  const auto plan = moe::route(p.logits, o.selection.softmax);
  EXPECT_EQ(moe::moe_route_indices(f.state).to_vector<uint32_t>(),
            plan.expert_indices().to_vector<uint32_t>());
  const auto tokens = plan.into_training(p.logits, o.weights).routing().dispatch(p.input);
  const Tensor want =
      tokens.combine(moe::SwiGluExperts(p.gate, p.up, p.down).forward_dispatched(tokens));
  EXPECT_TRUE(bit_equal(f.output, want));
  EXPECT_TRUE(
      bit_equal(moe::moe_inference(p.input, p.logits, {}, p.gate, p.up, p.down, o), f.output));
  EXPECT_TRUE(f.state.has_expert_caches());
}

// Whether moving any one logit by +-step leaves every token's expert choice as it is. The
// top-k choice is a step function of the logits: a central difference across its edge
// measures the jump, not the gradient, so the finite-difference test draws logits away
// from the edges.
bool selection_survives_logit_steps(const Problem& p, const MoeOptions& o, double step) {
  const auto chosen = [&](const Tensor& logits) {
    const auto f = moe::moe_forward(p.input, logits, p.bias, p.gate, p.up, p.down, o);
    return moe::moe_route_indices(f.state).to_vector<uint32_t>();
  };
  const auto base = chosen(p.logits);
  auto x = to_doubles(p.logits);
  for (double& v : x) {
    for (double sign : {-1.0, 1.0}) {
      const double kept = v;
      v += sign * step;
      const bool same = chosen(host_tensor(x, p.logits.shape(), DType::f64)) == base;
      v = kept;
      if (!same) return false;
    }
  }
  return true;
}

TEST(MoeOneCall, GradientsMatchFiniteDifferences) {
  RUDNN_SEEDED_RNG(rng);
  for (bool grouped : {false, true}) {
    SCOPED_TRACE(grouped ? "sigmoid grouped" : "softmax");
    const MoeOptions o = grouped ? grouped_options(2) : softmax_options(2);
    const double logit_step = 1e-3;
    Problem p = make(rng, DType::f64, 5, 4, 3, 4, grouped);
    for (int draw = 0; draw < 100 && !selection_survives_logit_steps(p, o, logit_step); ++draw) {
      p = make(rng, DType::f64, 5, 4, 3, 4, grouped);
    }
    ASSERT_TRUE(selection_survives_logit_steps(p, o, logit_step));
    const auto f = moe::moe_forward(p.input, p.logits, p.bias, p.gate, p.up, p.down, o);
    const auto g = moe::moe_backward(f.state, p.grad);
    const auto gv = to_doubles(p.grad);
    const auto check = [&](const Tensor& grad, const Tensor& at, int which, const char* what) {
      SCOPED_TRACE(what);
      ASSERT_TRUE(grad.defined());
      auto x = to_doubles(at);
      const auto got = to_doubles(grad);
      const auto loss = [&] {
        const Tensor t = host_tensor(x, at.shape(), DType::f64);
        Problem q = p;
        (which == 0   ? q.input
         : which == 1 ? q.logits
         : which == 2 ? q.gate
         : which == 3 ? q.up
                      : q.down) = t;
        return dot(
            gv, to_doubles(moe::moe_inference(q.input, q.logits, q.bias, q.gate, q.up, q.down, o)));
      };
      // The routing weights are F32 (the contract): a logits step of 1e-3 keeps their
      // rounding (~6e-8) small against the difference; the rest is F64 throughout.
      const double step = which == 1 ? logit_step : 1e-6;
      const auto num = central_differences(x.data(), static_cast<int64_t>(x.size()), loss, step);
      for (size_t i = 0; i < x.size(); ++i) EXPECT_NEAR(got[i], num[i], 2e-3) << i;
    };
    check(g.input, p.input, 0, "input");
    check(g.logits, p.logits, 1, "logits");
    check(g.gate, p.gate, 2, "gate");
    check(g.up, p.up, 3, "up");
    check(g.down, p.down, 4, "down");
  }
}

TEST(MoeOneCall, SelectedGradientsAreAbsentNotZero) {
  RUDNN_SEEDED_RNG(rng);
  const Problem p = make(rng, DType::f32, 7, 4, 8, 6, false);
  const MoeOptions o = softmax_options(2);
  const auto f = moe::moe_forward(p.input, p.logits, {}, p.gate, p.up, p.down, o);
  const auto all = moe::moe_backward(f.state, p.grad);
  moe::MoeGradientSelection only_logits{false, true, false, false, false};
  const auto g = moe::moe_backward_selected(f.state, p.grad, only_logits);
  EXPECT_FALSE(g.input.defined() || g.gate.defined() || g.up.defined() || g.down.defined());
  EXPECT_TRUE(bit_equal(g.logits, all.logits));
  moe::MoeGradientSelection only_up{false, false, false, true, false};
  const auto u = moe::moe_backward_selected(f.state, p.grad, only_up);
  EXPECT_FALSE(u.input.defined() || u.logits.defined() || u.gate.defined() || u.down.defined());
  EXPECT_TRUE(bit_equal(u.up, all.up));
  // A forward told that only logits will be differentiated keeps no caches.
  const auto lean =
      moe::moe_forward_selected(p.input, p.logits, {}, p.gate, p.up, p.down, o, only_logits);
  EXPECT_FALSE(lean.state.has_expert_caches());
  EXPECT_TRUE(bit_equal(lean.output, f.output));
  EXPECT_TRUE(
      bit_equal(moe::moe_backward_selected(lean.state, p.grad, only_logits).logits, all.logits));
  EXPECT_TRUE(throws_error(
      [&] { moe::moe_backward(lean.state, p.grad); }, ErrorCode::InvalidArgument,
      {"moe_backward: input or expert-weight gradients were requested", "no expert caches"}));
}

TEST(MoeOneCall, Errors) {
  RUDNN_SEEDED_RNG(rng);
  const Problem p = make(rng, DType::f32, 3, 4, 8, 6, false);
  EXPECT_TRUE(throws_error(
      [&] {
        moe::moe_forward(p.input, p.logits, Tensor::zeros({4}, DType::f32), p.gate, p.up, p.down,
                         softmax_options(2));
      },
      ErrorCode::InvalidArgument, {"moe_forward: bias is given to a softmax selection"}));
  EXPECT_TRUE(throws_error([&] { moe::moe_backward(moe::MoeState{}, p.grad); },
                           ErrorCode::InvalidArgument, {"moe_backward: the state is empty"}));
  EXPECT_TRUE(throws_error([&] { moe::moe_route_indices(moe::MoeState{}); },
                           ErrorCode::InvalidArgument, {"moe_route_indices: the state is empty"}));
  const auto f = moe::moe_forward(p.input, p.logits, {}, p.gate, p.up, p.down, softmax_options(2));
  EXPECT_TRUE(throws_error(
      [&] {
        moe::moe_backward(f.state, Tensor::zeros({3, 7}, DType::f32));
      },
      ErrorCode::ShapeMismatch, {"combine_backward: grad_output has shape [3, 7]"}));
  EXPECT_TRUE(throws_error(
      [&] {
        moe::moe_forward(p.input, p.logits, {}, p.gate, p.up, Tensor::zeros({4, 6, 8}, DType::f32),
                         softmax_options(2));
      },
      ErrorCode::ShapeMismatch, {"SwiGluExperts: down has shape [4, 6, 8]"}));
  EXPECT_TRUE(throws_error(
      [&] { moe::moe_forward(p.input, p.logits, {}, p.gate, p.up, p.down, softmax_options(5)); },
      ErrorCode::InvalidArgument, {"route: top_k is 5"}));
  auto o = softmax_options(2);
  o.weights.scale = -1.0f;
  EXPECT_TRUE(
      throws_error([&] { moe::moe_forward(p.input, p.logits, {}, p.gate, p.up, p.down, o); },
                   ErrorCode::InvalidArgument, {"selected_router_weights: scale"}));
}

// Decode batches (T 1..5, the combine folded into the down projection up to T = 4):
// moe_inference with Auto (decode.cu) equals moe_forward's output (the dispatched kernels)
// bit for bit, and the reference within tolerance.
TEST(MoeOneCallGpu, DecodeInferenceIsTheForwardsBits) {
  RUDNN_REQUIRE_CUDA();
  RUDNN_SEEDED_RNG(rng);
  for (DType dt : {DType::f32, DType::f16, DType::bf16}) {
    for (bool grouped : {false, true}) {
      for (int64_t t : {1, 4, 5}) {
        SCOPED_TRACE(::testing::Message() << dtype_name(dt) << (grouped ? " grouped" : " softmax")
                                          << " T " << t);
        const Problem hp = make(rng, dt, t, 8, 72, 40, grouped);
        const Problem gp = on(hp, kGpu);
        MoeOptions o = grouped ? grouped_options(3) : softmax_options(3);
        o.forward = GroupedStrategy::Auto;
        const auto gf = moe::moe_forward(gp.input, gp.logits, gp.bias, gp.gate, gp.up, gp.down, o);
        const Tensor got =
            moe::moe_inference(gp.input, gp.logits, gp.bias, gp.gate, gp.up, gp.down, o);
        EXPECT_TRUE(bit_equal(got, gf.output));
        EXPECT_TRUE(all_close(
            got, moe::moe_inference(hp.input, hp.logits, hp.bias, hp.gate, hp.up, hp.down, o),
            2 * tolerance(dt)));
      }
    }
  }
}

TEST(MoeOneCallGpu, MatchesTheReference) {
  RUDNN_REQUIRE_CUDA();
  RUDNN_SEEDED_RNG(rng);
  for (DType dt : {DType::f32, DType::bf16}) {
    for (bool grouped : {false, true}) {
      for (GroupedStrategy s : {GroupedStrategy::Scalar, GroupedStrategy::Auto}) {
        SCOPED_TRACE(::testing::Message() << dtype_name(dt) << (grouped ? " grouped" : " softmax")
                                          << " strategy " << static_cast<int>(s));
        const Problem hp = make(rng, dt, 120, 8, 64, 96, grouped);
        const Problem gp = on(hp, kGpu);
        MoeOptions o = grouped ? grouped_options(3) : softmax_options(3);
        o.forward = o.backward = s;
        o.combine_backward = moe::CombineGradientStrategy::Plane;
        const auto hf = moe::moe_forward(hp.input, hp.logits, hp.bias, hp.gate, hp.up, hp.down, o);
        const auto gf = moe::moe_forward(gp.input, gp.logits, gp.bias, gp.gate, gp.up, gp.down, o);
        EXPECT_TRUE(all_close(gf.output, hf.output, 2 * tolerance(dt)));
        // Inference through experts_after_routing (Auto at T * k = 360: decode.cu's kernels
        // for F32, the tensor cores for BF16), the training forward the dispatched kernels:
        // the same bits.
        EXPECT_TRUE(bit_equal(
            moe::moe_inference(gp.input, gp.logits, gp.bias, gp.gate, gp.up, gp.down, o),
            gf.output));
        const auto hg = moe::moe_backward(hf.state, hp.grad),
                   gg = moe::moe_backward(gf.state, gp.grad);
        EXPECT_TRUE(all_close(gg.input, hg.input, 2 * tolerance(dt)));
        EXPECT_TRUE(all_close(gg.logits, hg.logits, 4 * tolerance(dt)));
        EXPECT_TRUE(all_close(gg.gate, hg.gate, 2 * tolerance(dt)));
        EXPECT_TRUE(all_close(gg.up, hg.up, 2 * tolerance(dt)));
        EXPECT_TRUE(all_close(gg.down, hg.down, 2 * tolerance(dt)));
        const auto again = moe::moe_backward(gf.state, gp.grad);
        EXPECT_TRUE(bit_equal(again.logits, gg.logits));
        EXPECT_TRUE(bit_equal(again.gate, gg.gate));
      }
    }
  }
}

}  // namespace
}  // namespace rudnn::test
