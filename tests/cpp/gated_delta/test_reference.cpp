// The float64 reference recurrence: spec 003's worked example exactly, the two input forms
// against each other, chaining, every-step states and key-head sharing.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "gated_delta/reference.h"

namespace ref = rudnn::gdn::reference;

namespace {

std::vector<double> random_vector(std::mt19937_64& rng, std::size_t n, double lo, double hi) {
  std::uniform_real_distribution<double> dist(lo, hi);
  std::vector<double> out(n);
  for (auto& x : out) x = dist(rng);
  return out;
}

}  // namespace

TEST(GatedDeltaReference, SpecWorkedExampleIsExact) {
  const ref::Dims dims{1, 2, 1, 1, 32, 4};
  const std::vector<double> q(64, 0.25), k(64, 0.125), v(8, 1.0), gate(2, 1.0), beta(2, 0.5);
  std::vector<double> state(4 * 32, 0.0), y;
  ref::gated_delta_bthd(dims, q, k, v, gate, beta, state, y);
  const std::vector<double> expected{0.5, 0.5, 0.5, 0.5, 0.875, 0.875, 0.875, 0.875};
  EXPECT_EQ(y, expected);
  // S = 0.5 v k^T + 0.375 v k^T = 0.875 * 0.125 everywhere.
  for (double s : state) EXPECT_EQ(s, 0.875 * 0.125);
}

TEST(GatedDeltaReference, ChainedSegmentsEqualOneCallAndStepsEndInFinalState) {
  const std::uint64_t seed = 1234;
  std::mt19937_64 rng(seed);
  const ref::Dims dims{2, 5, 1, 2, 3, 4};  // two value heads share one key head
  const std::size_t bt = 2 * 5;
  auto q = random_vector(rng, bt * 1 * 3, -1, 1), k = random_vector(rng, bt * 1 * 3, -0.5, 0.5);
  auto v = random_vector(rng, bt * 2 * 4, -1, 1), gate = random_vector(rng, bt * 2, 0.5, 1.0);
  auto beta = random_vector(rng, bt * 2, 0.0, 1.0);
  const auto initial = random_vector(rng, 2 * 2 * 4 * 3, -1, 1);

  std::vector<double> state = initial, y, steps;
  ref::gated_delta_bthd(dims, q, k, v, gate, beta, state, y, &steps);
  const std::size_t state_size = 12;
  for (std::int64_t b = 0; b < 2; ++b)
    for (std::int64_t h = 0; h < 2; ++h)
      for (std::size_t i = 0; i < state_size; ++i)
        EXPECT_EQ(steps[((b * 5 + 4) * 2 + h) * state_size + i],
                  state[(b * 2 + h) * state_size + i]);

  // T calls of one step reproduce the one T-step call bit for bit.
  std::vector<double> chained = initial;
  for (std::int64_t t = 0; t < 5; ++t) {
    const ref::Dims one{2, 1, 1, 2, 3, 4};
    std::vector<double> qs, ks, vs, gs, bs, ys;
    for (std::int64_t b = 0; b < 2; ++b) {
      const std::int64_t row = b * 5 + t;
      qs.insert(qs.end(), q.begin() + row * 3, q.begin() + row * 3 + 3);
      ks.insert(ks.end(), k.begin() + row * 3, k.begin() + row * 3 + 3);
      vs.insert(vs.end(), v.begin() + row * 8, v.begin() + row * 8 + 8);
      gs.insert(gs.end(), gate.begin() + row * 2, gate.begin() + row * 2 + 2);
      bs.insert(bs.end(), beta.begin() + row * 2, beta.begin() + row * 2 + 2);
    }
    ref::gated_delta_bthd(one, qs, ks, vs, gs, bs, chained, ys);
    for (std::int64_t b = 0; b < 2; ++b)
      for (std::int64_t i = 0; i < 8; ++i)
        EXPECT_EQ(ys[b * 8 + i], y[(b * 5 + t) * 8 + i]) << "seed " << seed << " t " << t;
  }
  EXPECT_EQ(chained, state) << "seed " << seed;
}

TEST(GatedDeltaReference, SpecZeroFormEqualsSpecThreeFormAfterPermutation) {
  const std::uint64_t seed = 99;
  std::mt19937_64 rng(seed);
  const std::int64_t B = 2, H = 3, T = 4, K = 5, V = 3;
  const double scale = 0.37;
  auto q = random_vector(rng, B * H * T * K, -1, 1),
       k = random_vector(rng, B * H * T * K, -0.5, 0.5);
  auto v = random_vector(rng, B * H * T * V, -1, 1), beta = random_vector(rng, B * H * T, 0, 1);
  auto log_decay = random_vector(rng, B * H * T, -1, 0);
  auto state_kv = random_vector(rng, B * H * K * V, -1, 1);

  // Permute [B,H,T,*] -> [B,T,H,*], fold the scale into q, exp the decay, transpose the state.
  std::vector<double> q3(q.size()), k3(k.size()), v3(v.size()), g3(beta.size()), b3(beta.size());
  std::vector<double> state_vk(state_kv.size());
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t h = 0; h < H; ++h) {
      for (std::int64_t t = 0; t < T; ++t) {
        const std::int64_t src = (b * H + h) * T + t, dst = (b * T + t) * H + h;
        for (std::int64_t c = 0; c < K; ++c) {
          q3[dst * K + c] = scale * q[src * K + c];
          k3[dst * K + c] = k[src * K + c];
        }
        for (std::int64_t c = 0; c < V; ++c) v3[dst * V + c] = v[src * V + c];
        g3[dst] = std::exp(log_decay[src]);
        b3[dst] = beta[src];
      }
      for (std::int64_t c = 0; c < K; ++c)
        for (std::int64_t r = 0; r < V; ++r)
          state_vk[((b * H + h) * V + r) * K + c] = state_kv[((b * H + h) * K + c) * V + r];
    }
  std::vector<double> y0, y3;
  ref::gated_delta_bhtd({B, T, H, H, K, V}, q, k, v, beta, log_decay, scale, state_kv, y0);
  ref::gated_delta_bthd({B, T, H, H, K, V}, q3, k3, v3, g3, b3, state_vk, y3);
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t h = 0; h < H; ++h)
      for (std::int64_t t = 0; t < T; ++t)
        for (std::int64_t c = 0; c < V; ++c)
          EXPECT_NEAR(y0[((b * H + h) * T + t) * V + c], y3[((b * T + t) * H + h) * V + c], 1e-12)
              << "seed " << seed;
  for (std::int64_t bh = 0; bh < B * H; ++bh)
    for (std::int64_t c = 0; c < K; ++c)
      for (std::int64_t r = 0; r < V; ++r)
        EXPECT_NEAR(state_kv[(bh * K + c) * V + r], state_vk[(bh * V + r) * K + c], 1e-12)
            << "seed " << seed;
}

// Worked by hand: Dk = Dv = 1, two value heads on one key head with different gates.
// Head 0: S = 0.5 * 2 = 1; S += 1 * (3 - 1 * 1) * 1 = 3; y = 3 * 2 = 6.
// Head 1: S = 0.25 * 4 = 1; S += 0.5 * (5 - 1) * 1 = 3; y = 6; both read q = 2, k = 1.
TEST(GatedDeltaReference, GateAndKeyHeadSharingByHand) {
  const ref::Dims dims{1, 1, 1, 2, 1, 1};
  const std::vector<double> q{2.0}, k{1.0}, v{3.0, 5.0}, gate{0.5, 0.25}, beta{1.0, 0.5};
  std::vector<double> state{2.0, 4.0}, y;
  ref::gated_delta_bthd(dims, q, k, v, gate, beta, state, y);
  EXPECT_EQ(y, (std::vector<double>{6.0, 6.0}));
  EXPECT_EQ(state, (std::vector<double>{3.0, 3.0}));
}
