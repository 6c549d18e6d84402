// The paged backward on the CPU (spec 000 §11): finite differences of the forward for every
// gradient (attention and MLA) over random and hand-built schedules, the dense attention
// backward over the same keys stored contiguously, F32/F16/BF16 inputs against the float64
// reference, the optional outputs of the _selected_into forms, and every error.
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <set>
#include <string>
#include <vector>

#include "paged_util.h"
#include "support/test_support.h"

namespace rudnn::test {
namespace {

using paged_util::random_schedule;
using paged_util::Schedule;
using paged_util::ScheduleOptions;

// Physical rows (page * page_size + row) some query reads (the others get exact zeros).
std::set<int64_t> read_rows(const Schedule& s, bool causal) {
  std::set<int64_t> rows;
  for (int64_t i = 0; i < s.queries(); ++i) {
    const size_t seq = static_cast<size_t>(s.seq_ids[static_cast<size_t>(i)]);
    const int64_t n = causal ? s.positions[static_cast<size_t>(i)] + 1 : s.lengths[seq];
    for (int64_t j = 0; j < n; ++j)
      rows.insert(s.tables[seq][static_cast<size_t>(j / s.page_size)] * s.page_size +
                  j % s.page_size);
  }
  return rows;
}

// Every cache row outside `rows` is exactly zero, and some row inside is not.
::testing::AssertionResult zeros_outside(const Tensor& grad, const std::set<int64_t>& rows) {
  const int64_t per_row = grad.size(2) * grad.size(3);
  const std::vector<double> g = to_doubles(grad);
  bool any_inside = rows.empty();
  for (int64_t r = 0; r < grad.size(0) * grad.size(1); ++r) {
    for (int64_t e = 0; e < per_row; ++e) {
      const double x = g[static_cast<size_t>(r * per_row + e)];
      if (!rows.count(r) && x != 0.0)
        return ::testing::AssertionFailure() << "row " << r << " is read by no query but has " << x;
      if (rows.count(r) && x != 0.0) any_inside = true;
    }
  }
  if (!any_inside) return ::testing::AssertionFailure() << "every read row has a zero gradient";
  return ::testing::AssertionSuccess();
}

// Central differences of loss = Σ grad_out ⊙ forward() with respect to every element of the
// F64 host tensor x (perturbed in place and restored).
Tensor finite_difference(Tensor& x, const Tensor& grad_out,
                         const std::function<Tensor()>& forward) {
  const std::vector<double> go = to_doubles(grad_out);
  auto loss = [&] {
    const std::vector<double> out = to_doubles(forward());
    double sum = 0.0;
    for (size_t i = 0; i < out.size(); ++i) sum += go[i] * out[i];
    return sum;
  };
  return host_tensor(central_differences(x.data_as<double>(), x.numel(), loss), x.shape(),
                     DType::f64);
}

// A schedule that holds every case at once (page size 3): sequence 0 a prefill chunk of
// three queries, sequence 1 a decode query whose first page is sequence 0's (a shared
// prefix), sequence 2 empty, sequence 3 a prefill from position 0; queries interleaved;
// page 5 read by nobody and unused table capacity in sequence 3.
Schedule fixed_schedule() {
  Schedule s;
  s.page_size = 3;
  s.pages = 7;
  s.tables = {{2, 0, 4}, {2, 6}, {}, {1, 3}};
  s.lengths = {7, 5, 0, 2};
  s.seq_ids = {0, 1, 3, 0, 3, 0};
  s.positions = {4, 4, 0, 5, 1, 6};
  return s;
}

// Random schedules for the gradient checks: short histories, no accidental empty sequences
// among the first two (so that the shared prefix exists), one explicit empty sequence.
Schedule small_schedule(Rng& rng, int64_t page_size, bool shuffle) {
  ScheduleOptions o;
  o.sequences = 4;
  o.max_len = 14;
  o.max_chunk = 5;
  o.empty_share = 0.0;
  o.shared_prefix = true;
  o.shuffle_queries = shuffle;
  o.spare_pages = 2;
  Schedule s = random_schedule(rng, page_size, o);
  s.tables.push_back({});
  s.lengths.push_back(0);
  return s;
}

std::vector<unsigned char> all_bytes(std::initializer_list<const Tensor*> ts) {
  std::vector<unsigned char> b;
  for (const Tensor* t : ts) {
    const auto x = bytes_of(*t);
    b.insert(b.end(), x.begin(), x.end());
  }
  return b;
}

constexpr double kFdTol = 1e-6;

TEST(PagedBackward, AttentionMatchesFiniteDifferences) {
  RUDNN_SEEDED_RNG(rng);
  struct Case {
    int64_t page_size, hq, hkv, d, dv;
  };
  const Case cases[] = {{1, 2, 2, 3, 2}, {3, 4, 1, 3, 4}, {16, 4, 1, 2, 3}, {3, 2, 2, 4, 3}};
  int trial = 0;
  for (const Case& c : cases) {
    for (bool causal : {true, false}) {
      for (bool fixed : {false, true}) {
        if (fixed && c.page_size != 3) continue;
        const Schedule s = fixed ? fixed_schedule() : small_schedule(rng, c.page_size, ++trial % 2);
        SCOPED_TRACE(s.str() + ", Hq " + std::to_string(c.hq) + " Hkv " + std::to_string(c.hkv) +
                     (causal ? " causal" : " full"));
        Tensor q = random_tensor(rng, {s.queries(), c.hq, c.d}, DType::f64);
        Tensor k = random_tensor(rng, {s.pages, c.page_size, c.hkv, c.d}, DType::f64);
        Tensor v = random_tensor(rng, {s.pages, c.page_size, c.hkv, c.dv}, DType::f64);
        Tensor go = random_tensor(rng, {s.queries(), c.hq, c.dv}, DType::f64);
        const float scale = 0.61f;
        const auto plan = paged::DevicePlan::upload(s.host(), q);
        const auto before = all_bytes({&q, &k, &v, &go});
        const paged::AttentionBackward g = plan.attention_backward(q, k, v, go, scale, causal);
        EXPECT_EQ(all_bytes({&q, &k, &v, &go}), before) << "an input changed";
        ASSERT_EQ(g.dq.shape(), q.shape());
        ASSERT_EQ(g.dk.shape(), k.shape());
        ASSERT_EQ(g.dv.shape(), v.shape());
        ASSERT_EQ(g.dq.dtype(), DType::f64);
        auto fwd = [&] { return plan.attention(q, k, v, scale, causal); };
        EXPECT_TRUE(all_close(g.dq, finite_difference(q, go, fwd), kFdTol));
        EXPECT_TRUE(all_close(g.dk, finite_difference(k, go, fwd), kFdTol));
        EXPECT_TRUE(all_close(g.dv, finite_difference(v, go, fwd), kFdTol));
        const auto rows = read_rows(s, causal);
        EXPECT_TRUE(zeros_outside(g.dk, rows));
        EXPECT_TRUE(zeros_outside(g.dv, rows));
      }
    }
  }
}

TEST(PagedBackward, MlaMatchesFiniteDifferences) {
  RUDNN_SEEDED_RNG(rng);
  int trial = 0;
  for (int64_t page_size : {1, 3, 16}) {
    for (bool causal : {true, false}) {
      for (bool fixed : {false, true}) {
        if (fixed && page_size != 3) continue;
        const Schedule s = fixed ? fixed_schedule() : small_schedule(rng, page_size, ++trial % 2);
        SCOPED_TRACE(s.str() + (causal ? " causal" : " full"));
        const int64_t heads = 3, rank = 4, pos = 2;
        Tensor q = random_tensor(rng, {s.queries(), heads, rank}, DType::f64);
        Tensor qp = random_tensor(rng, {s.queries(), heads, pos}, DType::f64);
        Tensor latent = random_tensor(rng, {s.pages, page_size, 1, rank}, DType::f64);
        Tensor kp = random_tensor(rng, {s.pages, page_size, 1, pos}, DType::f64);
        Tensor go = random_tensor(rng, {s.queries(), heads, rank}, DType::f64);
        const float scale = 0.45f;
        const auto plan = paged::DevicePlan::upload(s.host(), q);
        const auto before = all_bytes({&q, &qp, &latent, &kp, &go});
        const paged::MlaBackward g = plan.mla_backward(q, qp, latent, kp, go, scale, causal);
        EXPECT_EQ(all_bytes({&q, &qp, &latent, &kp, &go}), before) << "an input changed";
        ASSERT_EQ(g.dq.shape(), q.shape());
        ASSERT_EQ(g.dqp.shape(), qp.shape());
        ASSERT_EQ(g.dlatent.shape(), latent.shape());
        ASSERT_EQ(g.dkp.shape(), kp.shape());
        auto fwd = [&] { return plan.mla(q, qp, latent, kp, scale, causal); };
        EXPECT_TRUE(all_close(g.dq, finite_difference(q, go, fwd), kFdTol));
        EXPECT_TRUE(all_close(g.dqp, finite_difference(qp, go, fwd), kFdTol));
        // The latent is keys and values: its difference quotient holds both contributions.
        EXPECT_TRUE(all_close(g.dlatent, finite_difference(latent, go, fwd), kFdTol));
        EXPECT_TRUE(all_close(g.dkp, finite_difference(kp, go, fwd), kFdTol));
        const auto rows = read_rows(s, causal);
        EXPECT_TRUE(zeros_outside(g.dlatent, rows));
        EXPECT_TRUE(zeros_outside(g.dkp, rows));
      }
    }
  }
}

// The dense attention family's CPU backward, one query at a time over its visible keys
// stored contiguously, scattered back to the pages (summed where pages are shared).
TEST(PagedBackward, EqualsDenseBackwardOverGatheredKeys) {
  RUDNN_SEEDED_RNG(rng);
  struct Case {
    int64_t page_size, hq, hkv, d, dv;
    bool causal;
  };
  const Case cases[] = {{1, 4, 4, 8, 8, true},
                        {3, 8, 2, 6, 5, false},
                        {16, 4, 1, 16, 16, true},
                        {16, 4, 4, 5, 7, false}};
  for (const Case& c : cases) {
    ScheduleOptions o;
    o.max_len = 40;
    o.shared_prefix = true;
    o.shuffle_queries = true;
    const Schedule s = random_schedule(rng, c.page_size, o);
    SCOPED_TRACE(s.str() + (c.causal ? " causal" : " full"));
    Tensor q = random_tensor(rng, {s.queries(), c.hq, c.d}, DType::f64);
    Tensor k = random_tensor(rng, {s.pages, c.page_size, c.hkv, c.d}, DType::f64);
    Tensor v = random_tensor(rng, {s.pages, c.page_size, c.hkv, c.dv}, DType::f64);
    Tensor go = random_tensor(rng, {s.queries(), c.hq, c.dv}, DType::f64);
    const float scale = 0.29f;
    const auto plan = paged::DevicePlan::upload(s.host(), q);
    const paged::AttentionBackward g = plan.attention_backward(q, k, v, go, scale, c.causal);

    Tensor dq = Tensor::zeros(q.shape(), DType::f64);
    Tensor dk = Tensor::zeros(k.shape(), DType::f64);
    Tensor dv = Tensor::zeros(v.shape(), DType::f64);
    const int64_t hq = c.hq, hkv = c.hkv;
    for (int64_t i = 0; i < s.queries(); ++i) {
      const size_t seq = static_cast<size_t>(s.seq_ids[static_cast<size_t>(i)]);
      const int64_t n = c.causal ? s.positions[static_cast<size_t>(i)] + 1 : s.lengths[seq];
      Tensor kd = paged_util::gather_dense(s, k, static_cast<int64_t>(seq), s.lengths[seq])
                      .slice(2, 0, n)
                      .contiguous();
      Tensor vd = paged_util::gather_dense(s, v, static_cast<int64_t>(seq), s.lengths[seq])
                      .slice(2, 0, n)
                      .contiguous();
      Tensor qi = q.slice(0, i, i + 1).contiguous().view({1, hq, 1, c.d});
      Tensor gi = go.slice(0, i, i + 1).contiguous().view({1, hq, 1, c.dv});
      AttentionOptions opts;
      opts.set_scale(scale);
      opts.return_lse = true;
      const AttentionResult fwd = attention(qi, kd, vd, opts);
      const AttentionGrads dg = attention_backward(gi, qi, kd, vd, fwd.out, fwd.lse, opts);
      std::memcpy(dq.data_as<double>() + i * hq * c.d, dg.dq.contiguous().data(),
                  static_cast<size_t>(hq * c.d) * sizeof(double));
      const Tensor dkh = dg.dk.contiguous(), dvh = dg.dv.contiguous();
      for (int64_t j = 0; j < n; ++j) {
        const int64_t page = s.tables[seq][static_cast<size_t>(j / c.page_size)];
        const int64_t row = page * c.page_size + j % c.page_size;
        for (int64_t h = 0; h < hkv; ++h) {
          for (int64_t e = 0; e < c.d; ++e)
            dk.data_as<double>()[(row * hkv + h) * c.d + e] +=
                dkh.data_as<double>()[(h * n + j) * c.d + e];
          for (int64_t e = 0; e < c.dv; ++e)
            dv.data_as<double>()[(row * hkv + h) * c.dv + e] +=
                dvh.data_as<double>()[(h * n + j) * c.dv + e];
        }
      }
    }
    EXPECT_TRUE(all_close(g.dq, dq, 1e-10));
    EXPECT_TRUE(all_close(g.dk, dk, 1e-10));
    EXPECT_TRUE(all_close(g.dv, dv, 1e-10));
  }
}

Tensor widen(const Tensor& t) { return host_tensor(to_doubles(t), t.shape(), DType::f64); }
Tensor narrow(const Tensor& t, DType dtype) { return host_tensor(to_doubles(t), t.shape(), dtype); }

// F32/F16/BF16 inputs are computed in float64 and rounded once: each gradient equals the
// float64 reference on the same (exactly widened) values, rounded to the input dtype.
TEST(PagedBackward, NarrowInputsRoundTheFloat64ReferenceOnce) {
  RUDNN_SEEDED_RNG(rng);
  for (DType dtype : {DType::f32, DType::f16, DType::bf16}) {
    SCOPED_TRACE(dtype_name(dtype));
    ScheduleOptions o;
    o.max_len = 50;
    o.shared_prefix = true;
    const Schedule s = random_schedule(rng, 16, o);
    Tensor q = random_tensor(rng, {s.queries(), 4, 8}, dtype);
    Tensor k = random_tensor(rng, {s.pages, 16, 2, 8}, dtype);
    Tensor v = random_tensor(rng, {s.pages, 16, 2, 6}, dtype);
    Tensor go = random_tensor(rng, {s.queries(), 4, 6}, dtype);
    const auto plan = paged::DevicePlan::upload(s.host(), q);
    const auto g = plan.attention_backward(q, k, v, go, 0.35f, true);
    const auto w = plan.attention_backward(widen(q), widen(k), widen(v), widen(go), 0.35f, true);
    EXPECT_EQ(g.dq.dtype(), dtype);
    EXPECT_TRUE(bit_equal(g.dq, narrow(w.dq, dtype)));
    EXPECT_TRUE(bit_equal(g.dk, narrow(w.dk, dtype)));
    EXPECT_TRUE(bit_equal(g.dv, narrow(w.dv, dtype)));

    Tensor qp = random_tensor(rng, {s.queries(), 4, 3}, dtype);
    Tensor lat = random_tensor(rng, {s.pages, 16, 1, 8}, dtype);
    Tensor kp = random_tensor(rng, {s.pages, 16, 1, 3}, dtype);
    Tensor gm = random_tensor(rng, {s.queries(), 4, 8}, dtype);
    const auto m = plan.mla_backward(q, qp, lat, kp, gm, 0.35f, false);
    const auto mw =
        plan.mla_backward(widen(q), widen(qp), widen(lat), widen(kp), widen(gm), 0.35f, false);
    EXPECT_TRUE(bit_equal(m.dq, narrow(mw.dq, dtype)));
    EXPECT_TRUE(bit_equal(m.dqp, narrow(mw.dqp, dtype)));
    EXPECT_TRUE(bit_equal(m.dlatent, narrow(mw.dlatent, dtype)));
    EXPECT_TRUE(bit_equal(m.dkp, narrow(mw.dkp, dtype)));
  }
}

TEST(PagedBackward, PlanWithoutQueriesGivesZeroHistoryGradients) {
  const paged::HostPlan host(4, 3, {{0, 1}, {}}, {5, 0}, {}, {});
  Tensor q = Tensor::zeros({0, 2, 4}, DType::f32);
  Tensor k = Tensor::full({3, 4, 1, 4}, 1.0, DType::f32);
  Tensor v = Tensor::full({3, 4, 1, 3}, 1.0, DType::f32);
  Tensor go = Tensor::zeros({0, 2, 3}, DType::f32);
  const auto plan = paged::DevicePlan::upload(host, q);
  PoisonScope poison(true);
  const auto g = plan.attention_backward(q, k, v, go, 1.0f, true);
  EXPECT_EQ(g.dq.numel(), 0);
  for (double x : to_doubles(g.dk)) ASSERT_EQ(x, 0.0);
  for (double x : to_doubles(g.dv)) ASSERT_EQ(x, 0.0);
}

// Each subset of outputs, poisoned: the given ones equal the full call bit for bit.
TEST(PagedBackward, SelectedIntoWritesExactlyTheGivenOutputs) {
  RUDNN_SEEDED_RNG(rng);
  ScheduleOptions o;
  o.max_len = 30;
  o.shared_prefix = true;
  const Schedule s = random_schedule(rng, 3, o);
  SCOPED_TRACE(s.str());
  Tensor q = random_tensor(rng, {s.queries(), 4, 5}, DType::f32);
  Tensor k = random_tensor(rng, {s.pages, 3, 2, 5}, DType::f32);
  Tensor v = random_tensor(rng, {s.pages, 3, 2, 4}, DType::f32);
  Tensor go = random_tensor(rng, {s.queries(), 4, 4}, DType::f32);
  const auto plan = paged::DevicePlan::upload(s.host(), q);
  const auto full = plan.attention_backward(q, k, v, go, 0.5f, true);
  for (int mask = 0; mask < 8; ++mask) {
    SCOPED_TRACE("mask " + std::to_string(mask));
    paged::AttentionBackward g;
    if (mask & 1) g.dq = poisoned(q.shape(), DType::f32, Device::cpu());
    if (mask & 2) g.dk = poisoned(k.shape(), DType::f32, Device::cpu());
    if (mask & 4) g.dv = poisoned(v.shape(), DType::f32, Device::cpu());
    const auto before = all_bytes({&q, &k, &v, &go});
    plan.attention_backward_selected_into(g, q, k, v, go, 0.5f, true);
    EXPECT_EQ(all_bytes({&q, &k, &v, &go}), before);
    if (mask & 1) EXPECT_TRUE(bit_equal(g.dq, full.dq));
    if (mask & 2) EXPECT_TRUE(bit_equal(g.dk, full.dk));
    if (mask & 4) EXPECT_TRUE(bit_equal(g.dv, full.dv));
  }
  Tensor qp = random_tensor(rng, {s.queries(), 4, 2}, DType::f32);
  Tensor lat = random_tensor(rng, {s.pages, 3, 1, 5}, DType::f32);
  Tensor kp = random_tensor(rng, {s.pages, 3, 1, 2}, DType::f32);
  Tensor gm = random_tensor(rng, {s.queries(), 4, 5}, DType::f32);
  const auto mfull = plan.mla_backward(q, qp, lat, kp, gm, 0.5f, false);
  for (int mask = 0; mask < 16; ++mask) {
    SCOPED_TRACE("mla mask " + std::to_string(mask));
    paged::MlaBackward g;
    if (mask & 1) g.dq = poisoned(q.shape(), DType::f32, Device::cpu());
    if (mask & 2) g.dqp = poisoned(qp.shape(), DType::f32, Device::cpu());
    if (mask & 4) g.dlatent = poisoned(lat.shape(), DType::f32, Device::cpu());
    if (mask & 8) g.dkp = poisoned(kp.shape(), DType::f32, Device::cpu());
    const auto before = all_bytes({&q, &qp, &lat, &kp, &gm});
    plan.mla_backward_selected_into(g, q, qp, lat, kp, gm, 0.5f, false);
    EXPECT_EQ(all_bytes({&q, &qp, &lat, &kp, &gm}), before);
    if (mask & 1) EXPECT_TRUE(bit_equal(g.dq, mfull.dq));
    if (mask & 2) EXPECT_TRUE(bit_equal(g.dqp, mfull.dqp));
    if (mask & 4) EXPECT_TRUE(bit_equal(g.dlatent, mfull.dlatent));
    if (mask & 8) EXPECT_TRUE(bit_equal(g.dkp, mfull.dkp));
  }
}

// ---- Errors -------------------------------------------------------------------------------

struct Fixture {
  paged::HostPlan host{4, 3, {{0, 1}, {2}}, {6, 2}, {0, 0, 1}, {4, 5, 1}};
  Tensor q = Tensor::zeros({3, 4, 8}, DType::f32);
  Tensor k = Tensor::zeros({3, 4, 2, 8}, DType::f32);
  Tensor v = Tensor::zeros({3, 4, 2, 6}, DType::f32);
  Tensor go = Tensor::zeros({3, 4, 6}, DType::f32);
  Tensor qp = Tensor::zeros({3, 4, 2}, DType::f32);
  Tensor lat = Tensor::zeros({3, 4, 1, 8}, DType::f32);
  Tensor kp = Tensor::zeros({3, 4, 1, 2}, DType::f32);
  Tensor gm = Tensor::zeros({3, 4, 8}, DType::f32);
  paged::DevicePlan plan = paged::DevicePlan::upload(host, q);
};

TEST(PagedBackwardErrors, AttentionArguments) {
  Fixture s;
  const auto& plan = s.plan;
  auto call = [&](const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& go,
                  float scale) {
    return [&plan, q, k, v, go, scale] { plan.attention_backward(q, k, v, go, scale, true); };
  };
  const char* op = "paged_attention::DevicePlan::attention_backward";
  const auto f32 = DType::f32;
  EXPECT_TRUE(
      throws_error([&] { paged::DevicePlan().attention_backward(s.q, s.k, s.v, s.go, 1.0f, true); },
                   ErrorCode::InvalidArgument, {op, "undefined"}));
  EXPECT_TRUE(throws_error(call(Tensor::zeros({2, 4, 8}, f32), s.k, s.v, s.go, 1.0f),
                           ErrorCode::ShapeMismatch, {op, "q has 2 queries", "the plan has 3"}));
  EXPECT_TRUE(throws_error(call(s.q, Tensor::zeros({3, 4, 2, 7}, f32), s.v, s.go, 1.0f),
                           ErrorCode::ShapeMismatch, {op, "k_cache has shape [3, 4, 2, 7]"}));
  EXPECT_TRUE(throws_error(call(s.q, Tensor::zeros({2, 4, 2, 8}, f32), s.v, s.go, 1.0f),
                           ErrorCode::ShapeMismatch, {"k_cache", "[pages, page_size, Hkv, D]"}));
  EXPECT_TRUE(throws_error(call(s.q, s.k, Tensor::zeros({3, 4, 1, 6}, f32), s.go, 1.0f),
                           ErrorCode::ShapeMismatch, {"v_cache"}));
  EXPECT_TRUE(throws_error(
      call(s.q, Tensor::zeros({3, 4, 3, 8}, f32), Tensor::zeros({3, 4, 3, 6}, f32), s.go, 1.0f),
      ErrorCode::ShapeMismatch, {"Hq = 4 is not a multiple of Hkv = 3"}));
  EXPECT_TRUE(throws_error(call(s.q, s.k, s.v, Tensor::zeros({3, 4, 5}, f32), 1.0f),
                           ErrorCode::ShapeMismatch,
                           {op, "grad_out has shape [3, 4, 5]", "[3, 4, 6]"}));
  EXPECT_TRUE(throws_error(call(s.q, s.k, s.v, Tensor::zeros({3, 24}, f32), 1.0f),
                           ErrorCode::ShapeMismatch, {"grad_out", "[queries, Hq, Dv]"}));
  EXPECT_TRUE(throws_error(call(s.q, s.k, s.v, Tensor::zeros({3, 4, 6}, DType::bf16), 1.0f),
                           ErrorCode::DTypeMismatch, {"grad_out has dtype bf16"}));
  EXPECT_TRUE(throws_error(call(s.q, s.k, Tensor::zeros({3, 4, 2, 6}, DType::f16), s.go, 1.0f),
                           ErrorCode::DTypeMismatch, {"v_cache has dtype f16"}));
  EXPECT_TRUE(throws_error(call(Tensor::zeros({3, 4, 8}, DType::i32), s.k, s.v, s.go, 1.0f),
                           ErrorCode::DTypeMismatch, {"q has dtype i32"}));
  EXPECT_TRUE(throws_error(call(s.q, s.k, s.v, Tensor{}, 1.0f), ErrorCode::InvalidArgument,
                           {op, "grad_out"}));
  for (float scale : {0.0f, -1.0f, std::numeric_limits<float>::quiet_NaN(),
                      std::numeric_limits<float>::infinity()}) {
    EXPECT_TRUE(throws_error(call(s.q, s.k, s.v, s.go, scale), ErrorCode::InvalidArgument,
                             {op, "scale must be finite and > 0"}));
  }
  EXPECT_TRUE(throws_error(
      call(Tensor::zeros({3, 4, 1025}, f32), Tensor::zeros({3, 4, 2, 1025}, f32), s.v, s.go, 1.0f),
      ErrorCode::InvalidArgument, {"D is 1025", "<= 1024"}));
  EXPECT_TRUE(throws_error(
      call(s.q, s.k, Tensor::zeros({3, 4, 2, 0}, f32), Tensor::zeros({3, 4, 0}, f32), 1.0f),
      ErrorCode::InvalidArgument, {"Dv is 0"}));
  EXPECT_TRUE(
      throws_error(call(Tensor::zeros({3, 4, 16}, f32).slice(2, 0, 8), s.k, s.v, s.go, 1.0f),
                   ErrorCode::InvalidArgument, {"q must be contiguous"}));
  EXPECT_TRUE(
      throws_error(call(s.q, Tensor::zeros({3, 4, 2, 16}, f32).slice(3, 0, 8), s.v, s.go, 1.0f),
                   ErrorCode::InvalidArgument, {"k_cache must be contiguous"}));
  EXPECT_TRUE(
      throws_error(call(s.q, s.k, Tensor::zeros({3, 4, 2, 12}, f32).slice(3, 0, 6), s.go, 1.0f),
                   ErrorCode::InvalidArgument, {"v_cache must be contiguous"}));
  EXPECT_TRUE(throws_error(call(s.q, s.k, s.v, Tensor::zeros({3, 4, 12}, f32).slice(2, 0, 6), 1.0f),
                           ErrorCode::InvalidArgument, {"grad_out must be contiguous"}));
}

TEST(PagedBackwardErrors, AttentionSelectedOutputs) {
  Fixture s;
  const auto& plan = s.plan;
  const char* op = "paged_attention::DevicePlan::attention_backward_selected_into";
  auto into = [&](Tensor dq, Tensor dk, Tensor dv) {
    return [&plan, &s, dq, dk, dv] {
      plan.attention_backward_selected_into({dq, dk, dv}, s.q, s.k, s.v, s.go, 1.0f, true);
    };
  };
  const auto f32 = DType::f32;
  EXPECT_TRUE(throws_error(into(Tensor::zeros({3, 4, 7}, f32), {}, {}), ErrorCode::ShapeMismatch,
                           {op, "dq has shape [3, 4, 7]", "[3, 4, 8]"}));
  EXPECT_TRUE(throws_error(into({}, Tensor::zeros({3, 4, 2, 6}, f32), {}), ErrorCode::ShapeMismatch,
                           {"dk has shape [3, 4, 2, 6]", "[3, 4, 2, 8]"}));
  EXPECT_TRUE(throws_error(into({}, {}, Tensor::zeros({3, 4, 2, 8}, f32)), ErrorCode::ShapeMismatch,
                           {"dv has shape"}));
  EXPECT_TRUE(throws_error(into({}, {}, Tensor::zeros({3, 4, 2, 6}, DType::f16)),
                           ErrorCode::DTypeMismatch, {"dv has dtype f16"}));
  EXPECT_TRUE(throws_error(into(Tensor::zeros({3, 4, 16}, f32).slice(2, 0, 8), {}, {}),
                           ErrorCode::InvalidArgument, {"dq must be contiguous"}));
  // Aliasing an input.
  EXPECT_TRUE(throws_error(into(s.q, {}, {}), ErrorCode::InvalidArgument, {"dq overlaps q"}));
  EXPECT_TRUE(throws_error(into({}, s.k, {}), ErrorCode::InvalidArgument, {"dk overlaps k_cache"}));
  EXPECT_TRUE(throws_error(into({}, {}, s.v), ErrorCode::InvalidArgument, {"dv overlaps v_cache"}));
  // grad_out aliasing an output, and outputs aliasing each other.
  Tensor buf = Tensor::zeros({192}, f32);
  EXPECT_TRUE(throws_error(
      [&] {
        plan.attention_backward_selected_into({{}, {}, buf.slice(0, 0, 144).view({3, 4, 2, 6})},
                                              s.q, s.k, s.v, buf.slice(0, 0, 72).view({3, 4, 6}),
                                              1.0f, true);
      },
      ErrorCode::InvalidArgument, {op, "dv overlaps grad_out", "must not alias"}));
  EXPECT_TRUE(
      throws_error(into({}, buf.view({3, 4, 2, 8}), buf.slice(0, 0, 144).view({3, 4, 2, 6})),
                   ErrorCode::InvalidArgument, {"dk overlaps dv"}));
  EXPECT_TRUE(throws_error(into(buf.slice(0, 96, 192).view({3, 4, 8}), buf.view({3, 4, 2, 8}), {}),
                           ErrorCode::InvalidArgument, {"dq overlaps dk"}));
  EXPECT_TRUE(throws_error(
      into(buf.slice(0, 96, 192).view({3, 4, 8}), {}, buf.slice(0, 0, 144).view({3, 4, 2, 6})),
      ErrorCode::InvalidArgument, {"dq overlaps dv"}));
}

// An error leaves every given output as it was, including outputs checked before the bad one.
TEST(PagedBackwardErrors, AnErrorWritesNothing) {
  Fixture s;
  Tensor dq = Tensor::full({3, 4, 8}, 7.0, DType::f32);
  Tensor dk = Tensor::full({3, 4, 2, 8}, 7.0, DType::f32);
  Tensor dv = Tensor::full({3, 4, 2, 6}, 7.0, DType::f32);
  EXPECT_THROW(
      s.plan.attention_backward_selected_into({dq, dk, dv}, s.q, s.k, s.v, s.go, -1.0f, true),
      Error);
  EXPECT_THROW(
      s.plan.attention_backward_selected_into({dq, dk, Tensor::zeros({3, 4, 2, 5}, DType::f32)},
                                              s.q, s.k, s.v, s.go, 1.0f, true),
      Error);
  EXPECT_THROW(
      s.plan.attention_backward_selected_into({dq, dk, s.v}, s.q, s.k, s.v, s.go, 1.0f, true),
      Error);
  Tensor dqp = Tensor::full({3, 4, 2}, 7.0, DType::f32);
  Tensor dlat = Tensor::full({3, 4, 1, 8}, 7.0, DType::f32);
  Tensor dkp = Tensor::full({3, 4, 1, 2}, 7.0, DType::f32);
  EXPECT_THROW(s.plan.mla_backward_selected_into({dq, dqp, dlat, s.kp}, s.q, s.qp, s.lat, s.kp,
                                                 s.gm, 1.0f, true),
               Error);
  EXPECT_THROW(s.plan.mla_backward_selected_into({dq, dqp, dlat, dkp}, s.q, s.qp, s.lat, s.kp, s.gm,
                                                 std::numeric_limits<float>::infinity(), true),
               Error);
  for (const Tensor* t : {&dq, &dk, &dv, &dqp, &dlat, &dkp})
    for (double x : to_doubles(*t)) ASSERT_EQ(x, 7.0);
}

TEST(PagedBackwardErrors, MlaArguments) {
  Fixture s;
  const auto& plan = s.plan;
  auto call = [&](const Tensor& q, const Tensor& qp, const Tensor& lat, const Tensor& kp,
                  const Tensor& go, float scale) {
    return
        [&plan, q, qp, lat, kp, go, scale] { plan.mla_backward(q, qp, lat, kp, go, scale, false); };
  };
  const char* op = "paged_attention::DevicePlan::mla_backward";
  const auto f32 = DType::f32;
  EXPECT_TRUE(throws_error(
      [&] { paged::DevicePlan().mla_backward(s.q, s.qp, s.lat, s.kp, s.gm, 1.0f, true); },
      ErrorCode::InvalidArgument, {op, "undefined"}));
  EXPECT_TRUE(throws_error(call(Tensor::zeros({4, 4, 8}, f32), s.qp, s.lat, s.kp, s.gm, 1.0f),
                           ErrorCode::ShapeMismatch, {op, "q has 4 queries", "the plan has 3"}));
  EXPECT_TRUE(throws_error(call(s.q, Tensor::zeros({3, 2, 2}, f32), s.lat, s.kp, s.gm, 1.0f),
                           ErrorCode::ShapeMismatch, {"qp has shape [3, 2, 2]"}));
  EXPECT_TRUE(throws_error(call(s.q, s.qp, Tensor::zeros({3, 4, 2, 8}, f32), s.kp, s.gm, 1.0f),
                           ErrorCode::ShapeMismatch, {"latent", "[pages, page_size, 1, R]"}));
  EXPECT_TRUE(throws_error(call(s.q, s.qp, s.lat, Tensor::zeros({3, 4, 1, 3}, f32), s.gm, 1.0f),
                           ErrorCode::ShapeMismatch, {"kp has shape [3, 4, 1, 3]"}));
  EXPECT_TRUE(throws_error(call(s.q, s.qp, s.lat, s.kp, Tensor::zeros({3, 4, 2}, f32), 1.0f),
                           ErrorCode::ShapeMismatch,
                           {op, "grad_out has shape [3, 4, 2]", "[3, 4, 8]"}));
  EXPECT_TRUE(throws_error(call(s.q, s.qp, s.lat, s.kp, Tensor::zeros({3, 4, 8}, DType::f16), 1.0f),
                           ErrorCode::DTypeMismatch, {"grad_out has dtype f16"}));
  EXPECT_TRUE(
      throws_error(call(s.q, s.qp, s.lat, Tensor::zeros({3, 4, 1, 2}, DType::bf16), s.gm, 1.0f),
                   ErrorCode::DTypeMismatch, {"kp has dtype bf16"}));
  EXPECT_TRUE(throws_error(call(s.q, Tensor::zeros({3, 4, 257}, f32), s.lat,
                                Tensor::zeros({3, 4, 1, 257}, f32), s.gm, 1.0f),
                           ErrorCode::InvalidArgument, {"P is 257", "<= 256"}));
  for (float scale : {0.0f, -2.0f, std::numeric_limits<float>::quiet_NaN()}) {
    EXPECT_TRUE(throws_error(call(s.q, s.qp, s.lat, s.kp, s.gm, scale), ErrorCode::InvalidArgument,
                             {op, "scale must be finite and > 0"}));
  }
  EXPECT_TRUE(
      throws_error(call(s.q, Tensor::zeros({3, 4, 4}, f32).slice(2, 0, 2), s.lat, s.kp, s.gm, 1.0f),
                   ErrorCode::InvalidArgument, {"qp must be contiguous"}));
  EXPECT_TRUE(throws_error(
      call(s.q, s.qp, s.lat, s.kp, Tensor::zeros({3, 4, 16}, f32).slice(2, 0, 8), 1.0f),
      ErrorCode::InvalidArgument, {"grad_out must be contiguous"}));
  // Selected outputs.
  const char* into_op = "paged_attention::DevicePlan::mla_backward_selected_into";
  auto into = [&](Tensor dq, Tensor dqp, Tensor dlat, Tensor dkp) {
    return [&plan, &s, dq, dqp, dlat, dkp] {
      plan.mla_backward_selected_into({dq, dqp, dlat, dkp}, s.q, s.qp, s.lat, s.kp, s.gm, 1.0f,
                                      true);
    };
  };
  EXPECT_TRUE(throws_error(into({}, {}, Tensor::zeros({3, 4, 1, 2}, f32), {}),
                           ErrorCode::ShapeMismatch,
                           {into_op, "dlatent has shape [3, 4, 1, 2]", "[3, 4, 1, 8]"}));
  EXPECT_TRUE(throws_error(into({}, Tensor::zeros({3, 4, 2}, DType::f16), {}, {}),
                           ErrorCode::DTypeMismatch, {"dqp has dtype f16"}));
  EXPECT_TRUE(throws_error(into({}, {}, s.lat, {}), ErrorCode::InvalidArgument,
                           {"dlatent overlaps latent"}));
  EXPECT_TRUE(
      throws_error(into({}, {}, {}, s.kp), ErrorCode::InvalidArgument, {"dkp overlaps kp"}));
  EXPECT_TRUE(
      throws_error(into(s.gm, {}, {}, {}), ErrorCode::InvalidArgument, {"dq overlaps grad_out"}));
  Tensor buf = Tensor::zeros({96}, f32);
  EXPECT_TRUE(throws_error(into(buf.view({3, 4, 8}), buf.slice(0, 0, 24).view({3, 4, 2}), {}, {}),
                           ErrorCode::InvalidArgument, {"dq overlaps dqp"}));
  EXPECT_TRUE(
      throws_error(into({}, {}, buf.view({3, 4, 1, 8}), buf.slice(0, 72, 96).view({3, 4, 1, 2})),
                   ErrorCode::InvalidArgument, {"dlatent overlaps dkp"}));
}

// Never run in this session (no GPU): the backward has no CUDA kernel and must say so.
TEST(PagedBackwardGpu, RefusedWithoutACudaKernel) {
  RUDNN_REQUIRE_CUDA();
  const Device gpu = Device::cuda(0);
  Fixture s;
  Tensor q = s.q.to(gpu), k = s.k.to(gpu), v = s.v.to(gpu), go = s.go.to(gpu);
  const auto plan = paged::DevicePlan::upload(s.host, q);
  EXPECT_TRUE(throws_error(
      [&] { plan.attention_backward(q, k, v, go, 1.0f, true); }, ErrorCode::Unsupported,
      {"paged_attention::DevicePlan::attention_backward", "no CUDA kernel yet"}));
  Tensor dq = Tensor::zeros(q.shape(), DType::f32, gpu);
  EXPECT_TRUE(throws_error(
      [&] {
        plan.attention_backward_selected_into({dq, {}, {}}, q, k, v, go, 1.0f, true);
      },
      ErrorCode::Unsupported, {"no CUDA kernel yet"}));
  Tensor qp = s.qp.to(gpu), lat = s.lat.to(gpu), kp = s.kp.to(gpu), gm = s.gm.to(gpu);
  EXPECT_TRUE(throws_error([&] { plan.mla_backward(q, qp, lat, kp, gm, 1.0f, true); },
                           ErrorCode::Unsupported,
                           {"paged_attention::DevicePlan::mla_backward", "no CUDA kernel yet"}));
  // Bad arguments are still reported as such first.
  EXPECT_TRUE(throws_error([&] { plan.attention_backward(q, k, v, go, -1.0f, true); },
                           ErrorCode::InvalidArgument, {"scale"}));
}

}  // namespace
}  // namespace rudnn::test
