// chunk_gated_delta and chunk_gated_delta_slots (the chunked WY / UT-transform prefill in spec
// 003's form: [B,T,H,D] operands, gate g, [B,Hv,Dv,Dk] state, value heads sharing key heads):
// equal to the float64 step-by-step recurrence (gated_delta_bthd) for chunk sizes 16 .. 128,
// T not a multiple of them and Hv / Hk = 1, 2, 4; a gate of exactly 0 (a reset); segments
// chained through the final state equal to one call; the pool and varlen forms equal to
// separate calls;
// inputs unchanged, outputs poisoned first; every argument rule, nothing written on error.
// On a GPU (skipped without one): the chunked kernels through spec 003's strides against the
// recurrence (grouped heads, states of every dtype, zero and negative gates, varlen); the pool
// form is refused there (no CUDA kernel yet).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "gated_delta/reference.h"
#include "rudnn/gated_delta.h"
#include "support/test_support.h"

namespace rudnn::test {
namespace {

namespace ref = gdn::reference;

struct Bthd {
  Tensor q, k, v, g, beta, state;
};

// Keys L2-normalised per step as Gated DeltaNet does (the recurrence stays bounded); the gate
// in [g_lo, 1].
Bthd random_bthd(Rng& rng, int64_t B, int64_t T, int64_t Hk, int64_t Hv, int64_t Dk, int64_t Dv,
                 DType dt, DType state_dt, float g_lo = 0.6f) {
  Bthd in;
  in.q = random_tensor(rng, {B, T, Hk, Dk}, dt, 0.0f, 1.0f / std::sqrt(float(Dk)));
  std::vector<double> k = to_doubles(random_tensor(rng, {B, T, Hk, Dk}, DType::f64));
  for (size_t r = 0; r < k.size() / size_t(Dk); ++r) {
    double n = 0;
    for (int64_t d = 0; d < Dk; ++d) n += k[r * Dk + d] * k[r * Dk + d];
    for (int64_t d = 0; d < Dk; ++d) k[r * Dk + d] /= std::sqrt(n) + 1e-6;
  }
  in.k = host_tensor(k, {B, T, Hk, Dk}, dt);
  in.v = random_tensor(rng, {B, T, Hv, Dv}, dt);
  std::vector<double> g(size_t(B * T * Hv)), beta(size_t(B * T * Hv));
  for (auto& x : g) x = rng.uniform(g_lo, 1.0f);
  for (auto& x : beta) x = rng.uniform(0.0f, 1.0f);
  in.g = host_tensor(g, {B, T, Hv}, dt);
  in.beta = host_tensor(beta, {B, T, Hv}, dt);
  in.state = random_tensor(rng, {B, Hv, Dv, Dk}, state_dt, 0.0f, 0.1f);
  return in;
}

// The float64 recurrence (the definition): y rounded to q's dtype, the state to its own.
GatedDeltaResult reference(const Bthd& in) {
  const Shape& qs = in.q.shape();
  const Shape& vs = in.v.shape();
  const ref::Dims d{qs[0], qs[1], qs[2], vs[2], qs[3], vs[3]};
  std::vector<double> s = to_doubles(in.state), y;
  ref::gated_delta_bthd(d, to_doubles(in.q), to_doubles(in.k), to_doubles(in.v), to_doubles(in.g),
                        to_doubles(in.beta), s, y);
  return {host_tensor(y, vs, in.q.dtype()), host_tensor(s, in.state.shape(), in.state.dtype())};
}

// Steps [t0, t1) of a [B, T, ...] operand, dense.
Tensor steps(const Tensor& x, int64_t t0, int64_t t1) { return x.slice(1, t0, t1).contiguous(); }
Bthd segment(const Bthd& in, int64_t t0, int64_t t1, const Tensor& state) {
  return {steps(in.q, t0, t1), steps(in.k, t0, t1),    steps(in.v, t0, t1),
          steps(in.g, t0, t1), steps(in.beta, t0, t1), state};
}
// Sequence b of a [B, ...] operand, dense.
Tensor seq(const Tensor& x, int64_t b) { return x.slice(0, b, b + 1).contiguous(); }
GatedDeltaResult run_segment(const Bthd& x, int64_t chunk) {
  return chunk_gated_delta(x.q, x.k, x.v, x.g, x.beta, x.state, chunk);
}

struct Snapshot {
  std::vector<std::vector<uint8_t>> bytes;
  explicit Snapshot(const Bthd& in) {
    for (const Tensor* t : {&in.q, &in.k, &in.v, &in.g, &in.beta, &in.state}) {
      bytes.push_back(bytes_of(*t));
    }
  }
  bool operator==(const Snapshot& o) const { return bytes == o.bytes; }
};

// ---- Against the recurrence -------------------------------------------------------------------

TEST(GatedDeltaChunkedBthd, MatchesTheRecurrence) {
  RUDNN_SEEDED_RNG(rng);
  for (DType dt : {DType::f64, DType::f32, DType::bf16}) {
    for (int64_t group : {1, 2, 4}) {
      for (int64_t T : {37, 130}) {
        const int64_t B = 2, Hk = 2, Hv = Hk * group, Dk = 8, Dv = 5;
        const DType sdt = dt == DType::f64 ? DType::f64 : DType::f32;
        const Bthd in = random_bthd(rng, B, T, Hk, Hv, Dk, Dv, dt, sdt);
        const Snapshot before(in);
        const GatedDeltaResult want = reference(in);
        for (int64_t chunk : {16, 32, 64, 128}) {
          SCOPED_TRACE(::testing::Message()
                       << dtype_name(dt) << " Hv/Hk " << group << " T " << T << " chunk " << chunk);
          const Tensor y = poisoned({B, T, Hv, Dv}, dt, Device::cpu());
          const Tensor s = poisoned({B, Hv, Dv, Dk}, sdt, Device::cpu());
          chunk_gated_delta_into(y, s, in.q, in.k, in.v, in.g, in.beta, in.state, chunk);
          const double tol = dt == DType::f64 ? 1e-12 : tolerance(dt);
          EXPECT_TRUE(all_close(y, want.y, tol));
          EXPECT_TRUE(all_close(s, want.state, dt == DType::f64 ? 1e-12 : 1e-5));
          const GatedDeltaResult r =
              chunk_gated_delta(in.q, in.k, in.v, in.g, in.beta, in.state, chunk);
          EXPECT_EQ(r.y.shape(), (Shape{B, T, Hv, Dv}));
          EXPECT_EQ(r.y.dtype(), dt);
          EXPECT_EQ(r.state.dtype(), sdt);
          EXPECT_TRUE(bit_equal(r.y, y));
          EXPECT_TRUE(bit_equal(r.state, s));
        }
        EXPECT_TRUE(Snapshot(in) == before) << "an input or the state was written";
      }
    }
  }
}

// Value head h must read key head h / (Hv / Hk): a mapping error in the chunked path would
// still pass when every key head is equal, so the key heads here differ and Hv / Hk = 4
// with two key heads is checked per value head against the recurrence run on each head
// alone with its own key head.
TEST(GatedDeltaChunkedBthd, ValueHeadsReadTheirOwnKeyHead) {
  RUDNN_SEEDED_RNG(rng);
  const int64_t B = 1, T = 23, Hk = 2, Hv = 8, Dk = 4, Dv = 3;
  const Bthd in = random_bthd(rng, B, T, Hk, Hv, Dk, Dv, DType::f64, DType::f64);
  const GatedDeltaResult r = chunk_gated_delta(in.q, in.k, in.v, in.g, in.beta, in.state, 16);
  for (int64_t h = 0; h < Hv; ++h) {
    SCOPED_TRACE(::testing::Message() << "value head " << h);
    const int64_t kh = h / (Hv / Hk);
    auto head = [](const Tensor& x, int64_t axis, int64_t i) {
      return x.slice(axis, i, i + 1).contiguous();
    };
    const GatedDeltaResult alone =
        gated_delta(head(in.q, 2, kh), head(in.k, 2, kh), head(in.v, 2, h), head(in.g, 2, h),
                    head(in.beta, 2, h), head(in.state, 1, h));
    EXPECT_TRUE(all_close(head(r.y, 2, h), alone.y, 1e-12));
    EXPECT_TRUE(all_close(head(r.state, 1, h), alone.state, 1e-12));
  }
}

// g = 0 resets the state: exact with multiplied decays (logs would give 0 / 0 = NaN).
TEST(GatedDeltaChunkedBthd, ZeroGateAndStrongDecay) {
  RUDNN_SEEDED_RNG(rng);
  const int64_t B = 2, T = 70, Hk = 1, Hv = 2, Dk = 6, Dv = 4;
  Bthd in = random_bthd(rng, B, T, Hk, Hv, Dk, Dv, DType::f64, DType::f64, 0.0f);
  std::vector<double> g = to_doubles(in.g);
  for (size_t i = 0; i < g.size(); i += 7) g[i] = 0.0;
  g[0] = 0.0;  // the very first step: the initial state is discarded
  in.g = host_tensor(g, in.g.shape(), DType::f64);
  const GatedDeltaResult want = reference(in);
  for (int64_t chunk : {16, 64, 128}) {
    SCOPED_TRACE(::testing::Message() << "chunk " << chunk);
    const GatedDeltaResult r = chunk_gated_delta(in.q, in.k, in.v, in.g, in.beta, in.state, chunk);
    EXPECT_TRUE(all_close(r.y, want.y, 1e-10));
    EXPECT_TRUE(all_close(r.state, want.state, 1e-10));
  }
  // T = 0: no rows, the final state is the initial state.
  const Bthd empty = random_bthd(rng, 2, 0, 1, 2, 4, 3, DType::f32, DType::f32);
  const GatedDeltaResult e =
      chunk_gated_delta(empty.q, empty.k, empty.v, empty.g, empty.beta, empty.state, 16);
  EXPECT_EQ(e.y.shape(), (Shape{2, 0, 2, 3}));
  EXPECT_TRUE(bit_equal(e.state, empty.state));
}

TEST(GatedDeltaChunkedBthd, NonContiguousInputs) {
  RUDNN_SEEDED_RNG(rng);
  const Bthd in = random_bthd(rng, 2, 20, 2, 4, 6, 4, DType::f32, DType::f32);
  Bthd strided = in;
  // The same values through transposed storage.
  strided.q = in.q.transpose(1, 2).contiguous().transpose(1, 2);
  strided.v = in.v.transpose(1, 2).contiguous().transpose(1, 2);
  ASSERT_FALSE(strided.q.is_contiguous());
  const GatedDeltaResult a = chunk_gated_delta(in.q, in.k, in.v, in.g, in.beta, in.state, 8);
  const GatedDeltaResult b =
      chunk_gated_delta(strided.q, strided.k, strided.v, strided.g, strided.beta, strided.state, 8);
  EXPECT_TRUE(bit_equal(a.y, b.y));
  EXPECT_TRUE(bit_equal(a.state, b.state));
}

TEST(GatedDeltaChunkedBthd, SegmentsChainedThroughFinalStateEqualOneCall) {
  RUDNN_SEEDED_RNG(rng);
  const int64_t T = 100;
  for (DType sdt : {DType::f64, DType::f32}) {
    SCOPED_TRACE(dtype_name(sdt));
    const Bthd in = random_bthd(rng, 2, T, 2, 4, 8, 6, DType::f64, sdt);
    auto run = [](const Bthd& x, int64_t chunk) {
      return chunk_gated_delta(x.q, x.k, x.v, x.g, x.beta, x.state, chunk);
    };
    const GatedDeltaResult whole = run(in, 32);
    const GatedDeltaResult a = run(segment(in, 0, 37, in.state), 32);
    const GatedDeltaResult b = run(segment(in, 37, 81, a.state), 16);
    const GatedDeltaResult c = run(segment(in, 81, T, b.state), 64);
    // An F32 state rounds at each segment boundary.
    const double tol = sdt == DType::f64 ? 1e-12 : 1e-6;
    EXPECT_TRUE(all_close(a.y, steps(whole.y, 0, 37), 1e-12));
    EXPECT_TRUE(all_close(b.y, steps(whole.y, 37, 81), tol));
    EXPECT_TRUE(all_close(c.y, steps(whole.y, 81, T), tol));
    EXPECT_TRUE(all_close(c.state, whole.state, tol));
  }
}

// ---- The state pool ---------------------------------------------------------------------------

TEST(GatedDeltaChunkedBthd, SlotsUpdateThePoolInPlace) {
  RUDNN_SEEDED_RNG(rng);
  for (DType pool_dt : {DType::f32, DType::f64}) {
    SCOPED_TRACE(dtype_name(pool_dt));
    const int64_t B = 3, T = 45, Hk = 1, Hv = 2, Dk = 4, Dv = 3, S = 5;
    const Bthd in = random_bthd(rng, B, T, Hk, Hv, Dk, Dv, DType::bf16, DType::f32);
    const Snapshot before(in);
    const Tensor pool = random_tensor(rng, {S, Hv, Dv, Dk}, pool_dt, 0.0f, 0.1f);
    // A deep copy (contiguous() of a dense tensor would share its storage).
    const Tensor pool_before = host_tensor(to_doubles(pool), pool.shape(), pool_dt);
    const std::vector<int32_t> ids{4, 0, 2};
    const Tensor slots = Tensor::from_host(ids, {B});
    const Tensor y = poisoned({B, T, Hv, Dv}, DType::bf16, Device::cpu());
    chunk_gated_delta_slots_into(y, in.q, in.k, in.v, in.g, in.beta, pool, slots, 16);
    for (int64_t b = 0; b < B; ++b) {
      SCOPED_TRACE(::testing::Message() << "sequence " << b);
      const int64_t id = ids[size_t(b)];
      const Tensor s0 = pool_before.slice(0, id, id + 1).contiguous();
      const GatedDeltaResult alone = chunk_gated_delta(seq(in.q, b), seq(in.k, b), seq(in.v, b),
                                                       seq(in.g, b), seq(in.beta, b), s0, 16);
      EXPECT_TRUE(bit_equal(seq(y, b), alone.y));
      EXPECT_TRUE(bit_equal(pool.slice(0, id, id + 1).contiguous(), alone.state));
      // And the recurrence on that state.
      const GatedDeltaResult want =
          gated_delta(seq(in.q, b), seq(in.k, b), seq(in.v, b), seq(in.g, b), seq(in.beta, b), s0);
      EXPECT_TRUE(all_close(seq(y, b), want.y, tolerance(DType::bf16)));
      EXPECT_TRUE(all_close(pool.slice(0, id, id + 1).contiguous(), want.state, 1e-5));
    }
    for (int64_t untouched : {1, 3}) {
      EXPECT_TRUE(bit_equal(pool.slice(0, untouched, untouched + 1).contiguous(),
                            pool_before.slice(0, untouched, untouched + 1).contiguous()));
    }
    EXPECT_TRUE(Snapshot(in) == before);
    // The functional form: the same y, and the pool advanced once more from where it is.
    const Tensor pool2 = host_tensor(to_doubles(pool), pool.shape(), pool_dt);
    const Tensor y2 = chunk_gated_delta_slots(in.q, in.k, in.v, in.g, in.beta, pool2, slots, 32);
    EXPECT_EQ(y2.shape(), (Shape{B, T, Hv, Dv}));
    const GatedDeltaResult again =
        chunk_gated_delta(seq(in.q, 0), seq(in.k, 0), seq(in.v, 0), seq(in.g, 0), seq(in.beta, 0),
                          pool.slice(0, 4, 5).contiguous(), 32);
    EXPECT_TRUE(bit_equal(seq(y2, 0), again.y));
    EXPECT_TRUE(bit_equal(pool2.slice(0, 4, 5).contiguous(), again.state));
  }
}

// ---- Variable-length packed sequences ---------------------------------------------------------

// Sequences packed along T of batch 1: each equals a separate chunk_gated_delta call on it
// (bit for bit: the same float64 algorithm on the same chunks), and the whole the recurrence.
TEST(GatedDeltaChunkedBthd, VarlenEqualsSeparateCalls) {
  RUDNN_SEEDED_RNG(rng);
  const std::vector<int32_t> lens{5, 0, 40, 17, 1};
  std::vector<int32_t> cu{0};
  for (int32_t n : lens) cu.push_back(cu.back() + n);
  const int64_t T = cu.back(), N = int64_t(lens.size()), Hk = 2, Hv = 4, Dk = 8, Dv = 5;
  for (DType dt : {DType::f32, DType::bf16}) {
    SCOPED_TRACE(dtype_name(dt));
    Bthd in = random_bthd(rng, 1, T, Hk, Hv, Dk, Dv, dt, DType::f32);
    in.state = random_tensor(rng, {N, Hv, Dv, Dk}, DType::f32, 0.0f, 0.1f);
    const Snapshot before(in);
    const Tensor cu_t = Tensor::from_host(cu, {N + 1});
    const Tensor y = poisoned({1, T, Hv, Dv}, dt, Device::cpu());
    const Tensor st = poisoned({N, Hv, Dv, Dk}, DType::f32, Device::cpu());
    chunk_gated_delta_varlen_into(y, st, in.q, in.k, in.v, in.g, in.beta, in.state, cu_t, 16);
    EXPECT_TRUE(Snapshot(in) == before);
    const GatedDeltaResult r =
        chunk_gated_delta_varlen(in.q, in.k, in.v, in.g, in.beta, in.state, cu_t, 16);
    EXPECT_TRUE(bit_equal(r.y, y));
    EXPECT_TRUE(bit_equal(r.state, st));
    // The pool form over the same sequences, states in reversed slots of a larger pool.
    const Tensor pool = Tensor::zeros({N + 2, Hv, Dv, Dk}, DType::f32);
    std::vector<int64_t> ids;
    for (int64_t n = 0; n < N; ++n) ids.push_back(N - n);
    for (int64_t n = 0; n < N; ++n) {
      pool.slice(0, ids[size_t(n)], ids[size_t(n)] + 1).copy_from(seq(in.state, n));
    }
    const Tensor slots = Tensor::from_host(ids, {N});
    const Tensor yp =
        chunk_gated_delta_slots_varlen(in.q, in.k, in.v, in.g, in.beta, pool, slots, cu_t, 16);
    EXPECT_TRUE(bit_equal(yp, y));
    for (int64_t n = 0; n < N; ++n) {
      SCOPED_TRACE(::testing::Message() << "sequence " << n << " of length " << lens[size_t(n)]);
      const GatedDeltaResult alone =
          run_segment(segment(in, cu[size_t(n)], cu[size_t(n + 1)], seq(in.state, n)), 16);
      EXPECT_TRUE(bit_equal(steps(y, cu[size_t(n)], cu[size_t(n + 1)]), alone.y));
      EXPECT_TRUE(bit_equal(seq(st, n), alone.state));
      EXPECT_TRUE(bit_equal(seq(pool, ids[size_t(n)]), alone.state));
    }
    // And the whole against the float64 recurrence.
    const GatedDeltaResult want =
        gated_delta_varlen(in.q, in.k, in.v, in.g, in.beta, in.state, cu_t);
    EXPECT_TRUE(all_close(y, want.y, tolerance(dt)));
    EXPECT_TRUE(all_close(st, want.state, 1e-5));
  }
}

// ---- Errors -----------------------------------------------------------------------------------

Tensor as_dtype(const Tensor& t, DType dt) { return host_tensor(to_doubles(t), t.shape(), dt); }

TEST(GatedDeltaChunkedBthdErrors, ChunkSizeRules) {
  RUDNN_SEEDED_RNG(rng);
  const Bthd in = random_bthd(rng, 1, 3, 1, 2, 4, 2, DType::f32, DType::f32);
  auto run = [&](int64_t chunk) {
    chunk_gated_delta(in.q, in.k, in.v, in.g, in.beta, in.state, chunk);
  };
  for (int64_t bad : {int64_t(0), int64_t(-3)}) {
    EXPECT_TRUE(throws_error([&] { run(bad); }, ErrorCode::InvalidArgument,
                             {"chunk_gated_delta: chunk_size = " + std::to_string(bad),
                              "expected a positive chunk size"}));
  }
  // 4 (c^2 + c) against the host's 227 KiB: 240 fits (231360 bytes), 241 does not.
  EXPECT_NO_THROW(run(240));
  EXPECT_TRUE(throws_error([&] { run(241); }, ErrorCode::InvalidArgument,
                           {"chunk_gated_delta: chunk_size = 241", "233288",
                            "per-block shared-memory limit of 232448 bytes"}));
  EXPECT_TRUE(throws_error([&] { run(std::numeric_limits<int64_t>::max()); },
                           ErrorCode::InvalidArgument, {"chunk_size", "shared-memory limit"}));
}

TEST(GatedDeltaChunkedBthdErrors, InputRules) {
  RUDNN_SEEDED_RNG(rng);
  const Bthd good = random_bthd(rng, 2, 3, 2, 4, 4, 2, DType::f32, DType::f32);
  auto expect = [&](const Bthd& in, ErrorCode code, std::initializer_list<std::string> frag) {
    EXPECT_TRUE(throws_error(
        [&] { chunk_gated_delta(in.q, in.k, in.v, in.g, in.beta, in.state, 16); }, code, frag));
  };
  Bthd in = good;
  in.q = Tensor();
  expect(in, ErrorCode::InvalidArgument, {"chunk_gated_delta", "q", "undefined"});
  in = good;
  in.k = as_dtype(good.k, DType::bf16);
  expect(in, ErrorCode::DTypeMismatch, {"chunk_gated_delta", "k", "q's dtype"});
  in = good;
  in.v = as_dtype(good.v, DType::f16);
  expect(in, ErrorCode::DTypeMismatch, {"chunk_gated_delta", "v", "q's dtype"});
  in = good;
  in.g = Tensor::zeros({2, 3, 4}, DType::i32);
  expect(in, ErrorCode::DTypeMismatch, {"chunk_gated_delta", "g"});
  in = good;
  in.k = Tensor::zeros({2, 3, 2, 5}, DType::f32);
  expect(in, ErrorCode::ShapeMismatch, {"chunk_gated_delta", "k", "[B, T, Hk, Dk]"});
  in = good;
  in.v = Tensor::zeros({2, 4, 4, 2}, DType::f32);
  expect(in, ErrorCode::ShapeMismatch, {"chunk_gated_delta", "v", "T = 3"});
  // Hv = 3 value heads over Hk = 2 key heads.
  in = good;
  in.v = Tensor::zeros({2, 3, 3, 2}, DType::f32);
  in.g = Tensor::zeros({2, 3, 3}, DType::f32);
  in.beta = Tensor::zeros({2, 3, 3}, DType::f32);
  in.state = Tensor::zeros({2, 3, 2, 4}, DType::f32);
  expect(in, ErrorCode::InvalidArgument,
         {"chunk_gated_delta", "Hv = 3", "a multiple of q's Hk = 2"});
  in = good;
  in.g = Tensor::zeros({2, 3, 2}, DType::f32);
  expect(in, ErrorCode::ShapeMismatch, {"chunk_gated_delta", "g", "[B, T, Hv]"});
  in = good;
  in.beta = Tensor::zeros({2, 3}, DType::f32);
  expect(in, ErrorCode::ShapeMismatch, {"chunk_gated_delta", "beta", "[B, T, Hv]"});
  in = good;
  in.state = Tensor::zeros({2, 4, 4, 2}, DType::f32);  // [B, Hv, Dk, Dv]: spec 000's order
  expect(in, ErrorCode::ShapeMismatch, {"chunk_gated_delta", "state", "[B, Hv, Dv, Dk]"});
  in = good;
  in.state = Tensor::zeros({2, 4, 2, 4}, DType::i32);
  expect(in, ErrorCode::DTypeMismatch, {"chunk_gated_delta", "state"});
  in = good;
  in.q = Tensor::zeros({2, 3, 2}, DType::f32);
  expect(in, ErrorCode::ShapeMismatch, {"chunk_gated_delta", "q", "[B, T, Hk, Dk]"});
}

TEST(GatedDeltaChunkedBthdErrors, OutputRulesAndNothingWritten) {
  RUDNN_SEEDED_RNG(rng);
  const Bthd in = random_bthd(rng, 1, 6, 1, 2, 4, 2, DType::f32, DType::f32);
  const Tensor y = poisoned({1, 6, 2, 2}, DType::f32, Device::cpu());
  const Tensor s = poisoned({1, 2, 2, 4}, DType::f32, Device::cpu());
  const auto y_before = bytes_of(y), s_before = bytes_of(s);
  auto run_into = [&](const Tensor& yo, const Tensor& so, int64_t chunk) {
    chunk_gated_delta_into(yo, so, in.q, in.k, in.v, in.g, in.beta, in.state, chunk);
  };
  EXPECT_TRUE(throws_error(
      [&] {
        run_into(Tensor::zeros({1, 5, 2, 2}, DType::f32), s, 4);
      },
      ErrorCode::ShapeMismatch, {"chunk_gated_delta", "y_out"}));
  EXPECT_TRUE(throws_error(
      [&] {
        run_into(y, Tensor::zeros({1, 2, 2, 4}, DType::bf16), 4);
      },
      ErrorCode::DTypeMismatch, {"chunk_gated_delta", "state_out"}));
  // No output may alias an input or the other output.
  EXPECT_THROW(run_into(in.v, s, 4), Error);
  EXPECT_THROW(run_into(y, in.state, 4), Error);
  EXPECT_THROW(run_into(y, y.view({24}).slice(0, 0, 16).view({1, 2, 2, 4}), 4), Error);
  EXPECT_EQ(bytes_of(y), y_before);
  EXPECT_EQ(bytes_of(s), s_before);
  // A bad chunk size is found before either output is written.
  EXPECT_THROW(run_into(y, s, 0), Error);
  EXPECT_THROW(run_into(y, s, 241), Error);
  EXPECT_EQ(bytes_of(y), y_before);
  EXPECT_EQ(bytes_of(s), s_before);
}

TEST(GatedDeltaChunkedBthdErrors, SlotRulesAndPoolUntouched) {
  RUDNN_SEEDED_RNG(rng);
  const int64_t B = 2, T = 5, S = 3;
  const Bthd in = random_bthd(rng, B, T, 1, 2, 4, 2, DType::f32, DType::f32);
  const Tensor pool = random_tensor(rng, {S, 2, 2, 4}, DType::f32, 0.0f, 0.1f);
  const auto pool_before = bytes_of(pool);
  const Tensor y = poisoned({B, T, 2, 2}, DType::f32, Device::cpu());
  const auto y_before = bytes_of(y);
  auto run = [&](const Tensor& slots, int64_t chunk) {
    chunk_gated_delta_slots_into(y, in.q, in.k, in.v, in.g, in.beta, pool, slots, chunk);
  };
  auto ids = [](std::vector<int64_t> v) { return Tensor::from_host(v, {int64_t(v.size())}); };
  EXPECT_TRUE(throws_error(
      [&] {
        run(ids({0, 3}), 16);
      },
      ErrorCode::InvalidArgument, {"chunk_gated_delta_slots", "slots[1] = 3", "[0, 3)"}));
  EXPECT_TRUE(throws_error(
      [&] {
        run(ids({-1, 0}), 16);
      },
      ErrorCode::InvalidArgument, {"chunk_gated_delta_slots", "slots[0] = -1"}));
  EXPECT_TRUE(throws_error(
      [&] {
        run(ids({2, 2}), 16);
      },
      ErrorCode::InvalidArgument, {"chunk_gated_delta_slots", "repeated"}));
  EXPECT_TRUE(throws_error([&] { run(ids({0}), 16); }, ErrorCode::ShapeMismatch,
                           {"chunk_gated_delta_slots", "slots", "[B]"}));
  EXPECT_TRUE(throws_error(
      [&] {
        run(Tensor::from_host(std::vector<float>{0, 1}, {2}), 16);
      },
      ErrorCode::DTypeMismatch, {"chunk_gated_delta_slots", "slots"}));
  EXPECT_TRUE(throws_error(
      [&] {
        run(ids({0, 1}), 0);
      },
      ErrorCode::InvalidArgument, {"chunk_gated_delta_slots: chunk_size = 0"}));
  EXPECT_TRUE(throws_error(
      [&] {
        run(ids({0, 1}), 241);
      },
      ErrorCode::InvalidArgument, {"chunk_gated_delta_slots: chunk_size = 241"}));
  EXPECT_TRUE(throws_error(
      [&] {
        chunk_gated_delta_slots(in.q, in.k, in.v, in.g, in.beta,
                                Tensor::zeros({S, 2, 4, 2}, DType::f32), ids({0, 1}), 16);
      },
      ErrorCode::ShapeMismatch, {"chunk_gated_delta_slots", "pool", "[slots, Hv, Dv, Dk]"}));
  // The pool is updated in place: it may not alias y.
  EXPECT_THROW(chunk_gated_delta_slots_into(
                   pool.view({S * 2 * 2 * 4}).slice(0, 0, B * T * 4).view({B, T, 2, 2}), in.q, in.k,
                   in.v, in.g, in.beta, pool, ids({0, 1}), 16),
               Error);
  EXPECT_EQ(bytes_of(pool), pool_before);
  EXPECT_EQ(bytes_of(y), y_before);
}

TEST(GatedDeltaChunkedBthdErrors, VarlenRules) {
  RUDNN_SEEDED_RNG(rng);
  Bthd in = random_bthd(rng, 1, 6, 1, 2, 4, 2, DType::f32, DType::f32);
  in.state = Tensor::zeros({2, 2, 2, 4}, DType::f32);
  auto cu = [](std::vector<int32_t> v) { return Tensor::from_host(v, {int64_t(v.size())}); };
  auto run = [&](const Tensor& c, int64_t chunk) {
    chunk_gated_delta_varlen(in.q, in.k, in.v, in.g, in.beta, in.state, c, chunk);
  };
  EXPECT_NO_THROW(run(cu({0, 2, 6}), 4));
  EXPECT_TRUE(throws_error(
      [&] {
        run(cu({0, 4, 2}), 4);
      },
      ErrorCode::InvalidArgument,
      {"chunk_gated_delta_varlen", "cu_seqlens[2] = 2", "non-decreasing"}));
  EXPECT_TRUE(throws_error(
      [&] {
        run(cu({1, 2, 6}), 4);
      },
      ErrorCode::InvalidArgument, {"cu_seqlens[0] = 1"}));
  EXPECT_TRUE(throws_error(
      [&] {
        run(cu({0, 2, 5}), 4);
      },
      ErrorCode::InvalidArgument, {"cu_seqlens[2] = 5", "T = 6"}));
  EXPECT_TRUE(throws_error(
      [&] {
        run(cu({0, 6}), 4);
      },
      ErrorCode::ShapeMismatch, {"cu_seqlens", "[N + 1]"}));
  EXPECT_TRUE(throws_error(
      [&] {
        run(Tensor::from_host(std::vector<int64_t>{0, 2, 6}, {3}), 4);
      },
      ErrorCode::DTypeMismatch, {"cu_seqlens"}));
  EXPECT_TRUE(throws_error([&] { run(Tensor(), 4); }, ErrorCode::InvalidArgument,
                           {"chunk_gated_delta_varlen", "cu_seqlens", "undefined"}));
  EXPECT_TRUE(throws_error(
      [&] {
        run(cu({0, 2, 6}), 0);
      },
      ErrorCode::InvalidArgument, {"chunk_gated_delta_varlen: chunk_size = 0"}));
  const Bthd two = random_bthd(rng, 2, 6, 1, 2, 4, 2, DType::f32, DType::f32);
  EXPECT_TRUE(throws_error(
      [&] {
        chunk_gated_delta_varlen(two.q, two.k, two.v, two.g, two.beta, in.state, cu({0, 2, 6}), 4);
      },
      ErrorCode::ShapeMismatch, {"B = 2", "expected B = 1"}));
  // The pool form: bad offsets or slots leave the pool untouched.
  const Tensor pool = random_tensor(rng, {3, 2, 2, 4}, DType::f32, 0.0f, 0.1f);
  const auto pool_before = bytes_of(pool);
  const Tensor slots = Tensor::from_host(std::vector<int32_t>{2, 0}, {2});
  EXPECT_TRUE(throws_error(
      [&] {
        chunk_gated_delta_slots_varlen(in.q, in.k, in.v, in.g, in.beta, pool, slots, cu({0, 4, 2}),
                                       4);
      },
      ErrorCode::InvalidArgument, {"chunk_gated_delta_slots_varlen", "non-decreasing"}));
  EXPECT_TRUE(throws_error(
      [&] {
        chunk_gated_delta_slots_varlen(in.q, in.k, in.v, in.g, in.beta, pool,
                                       Tensor::from_host(std::vector<int32_t>{1, 1}, {2}),
                                       cu({0, 2, 6}), 4);
      },
      ErrorCode::InvalidArgument, {"chunk_gated_delta_slots_varlen", "repeated"}));
  EXPECT_TRUE(throws_error(
      [&] {
        chunk_gated_delta_slots_varlen(in.q, in.k, in.v, in.g, in.beta, pool, slots, Tensor(), 4);
      },
      ErrorCode::InvalidArgument, {"chunk_gated_delta_slots_varlen", "cu_seqlens", "undefined"}));
  EXPECT_EQ(bytes_of(pool), pool_before);
}

// ---- GPU (skipped without one) ----------------------------------------------------------------

double gpu_tolerance(DType dt) {
  return dt == DType::f32 ? 1e-4 : dt == DType::f16 ? 5e-3 : 2e-2;
}

Bthd on_gpu(const Bthd& h) {
  const Device gpu = Device::cuda(0);
  return {h.q.to(gpu), h.k.to(gpu), h.v.to(gpu), h.g.to(gpu), h.beta.to(gpu), h.state.to(gpu)};
}

// Against the float64 recurrence: Hv / Hk = 1, 2, 4, head dims that are and are not whole
// 16-byte rows, T not a multiple of the chunk, T = 0; states in F32 and in the 16-bit types
// (read and written in their dtype); inputs unchanged, outputs poisoned first.
TEST(GatedDeltaChunkedBthdGpu, MatchesTheRecurrence) {
  RUDNN_REQUIRE_CUDA();
  RUDNN_SEEDED_RNG(rng);
  PoisonScope poison(true);
  struct Case {
    int64_t B, T, Hk, Hv, Dk, Dv;
  };
  for (const Case c : {Case{2, 130, 2, 4, 128, 128}, Case{1, 37, 1, 4, 40, 24},
                       Case{1, 77, 3, 3, 20, 12}, Case{2, 0, 1, 2, 32, 16}}) {
    for (DType dt : {DType::bf16, DType::f16, DType::f32}) {
      for (DType sdt : {DType::f32, dt}) {
        const Bthd host = random_bthd(rng, c.B, c.T, c.Hk, c.Hv, c.Dk, c.Dv, dt, sdt);
        const Snapshot before(host);
        const GatedDeltaResult want = reference(host);
        const Bthd dev = on_gpu(host);
        for (int64_t chunk : {16, 64, 50}) {
          SCOPED_TRACE(::testing::Message()
                       << dtype_name(dt) << " state " << dtype_name(sdt) << " B" << c.B << " T"
                       << c.T << " Hk" << c.Hk << " Hv" << c.Hv << " Dk" << c.Dk << " Dv" << c.Dv
                       << " chunk " << chunk);
          const GatedDeltaResult r = run_segment(dev, chunk);
          ASSERT_EQ(r.y.shape(), want.y.shape());
          ASSERT_EQ(r.state.dtype(), sdt);
          EXPECT_TRUE(all_close(r.y.to_host(), want.y, gpu_tolerance(dt)));
          EXPECT_TRUE(all_close(r.state.to_host(), want.state,
                                std::max(gpu_tolerance(dt), gpu_tolerance(sdt))));
          const Tensor y = poisoned(want.y.shape(), dt, dev.q.device());
          const Tensor s = poisoned(want.state.shape(), sdt, dev.q.device());
          chunk_gated_delta_into(y, s, dev.q, dev.k, dev.v, dev.g, dev.beta, dev.state, chunk);
          EXPECT_TRUE(bit_equal(y.to_host(), r.y.to_host()));
          EXPECT_TRUE(bit_equal(s.to_host(), r.state.to_host()));
        }
        const Bthd back{dev.q.to_host(), dev.k.to_host(),    dev.v.to_host(),
                        dev.g.to_host(), dev.beta.to_host(), dev.state.to_host()};
        EXPECT_TRUE(Snapshot(back) == before) << "an input or the state was written";
      }
    }
  }
}

// The gate itself, not its log: zero gates (resets) and negative ones, which the kernels'
// running sums of log |g| keep apart (ChunkDecay), at a chunk's first, inner and last steps.
TEST(GatedDeltaChunkedBthdGpu, ZeroAndNegativeGates) {
  RUDNN_REQUIRE_CUDA();
  RUDNN_SEEDED_RNG(rng);
  for (DType dt : {DType::f32, DType::bf16}) {
    Bthd host = random_bthd(rng, 2, 100, 1, 2, 64, 32, dt, DType::f32, 0.5f);
    std::vector<double> g = to_doubles(host.g);
    for (size_t i = 0; i < g.size(); i += 11) g[i] = 0.0;
    for (size_t i = 5; i < g.size(); i += 13) g[i] = -g[i];
    for (size_t i : {size_t(0), size_t(31), size_t(32), size_t(127), size_t(128)}) g[i] = 0.0;
    host.g = host_tensor(g, host.g.shape(), dt);
    const GatedDeltaResult want = reference(host);
    for (int64_t chunk : {16, 64}) {
      SCOPED_TRACE(::testing::Message() << dtype_name(dt) << " chunk " << chunk);
      const GatedDeltaResult r = run_segment(on_gpu(host), chunk);
      EXPECT_TRUE(all_close(r.y.to_host(), want.y, gpu_tolerance(dt)));
      EXPECT_TRUE(all_close(r.state.to_host(), want.state, gpu_tolerance(dt)));
    }
  }
}

// Packed sequences (device offsets): each sequence equals a separate GPU call on it, and the
// whole the recurrence; the pool form equals the dense form on the gathered states.
TEST(GatedDeltaChunkedBthdGpu, VarlenAndThePoolForm) {
  RUDNN_REQUIRE_CUDA();
  RUDNN_SEEDED_RNG(rng);
  const Device gpu = Device::cuda(0);
  const std::vector<int32_t> lens{5, 0, 70, 17, 1};
  std::vector<int32_t> cu{0};
  for (int32_t n : lens) cu.push_back(cu.back() + n);
  const int64_t T = cu.back(), N = int64_t(lens.size()), Hk = 2, Hv = 4, Dk = 64, Dv = 48;
  Bthd host = random_bthd(rng, 1, T, Hk, Hv, Dk, Dv, DType::bf16, DType::f32);
  host.state = random_tensor(rng, {N, Hv, Dv, Dk}, DType::f32, 0.0f, 0.1f);
  const Bthd dev = on_gpu(host);
  const Tensor cu_t = Tensor::from_host(cu, {N + 1}).to(gpu);
  const GatedDeltaResult r =
      chunk_gated_delta_varlen(dev.q, dev.k, dev.v, dev.g, dev.beta, dev.state, cu_t, 32);
  const Tensor y = r.y.to_host(), st = r.state.to_host();
  for (int64_t n = 0; n < N; ++n) {
    SCOPED_TRACE(::testing::Message() << "sequence " << n << " of length " << lens[size_t(n)]);
    const GatedDeltaResult alone = run_segment(
        on_gpu(segment(host, cu[size_t(n)], cu[size_t(n + 1)], seq(host.state, n))), 32);
    EXPECT_TRUE(bit_equal(steps(y, cu[size_t(n)], cu[size_t(n + 1)]), alone.y.to_host()));
    EXPECT_TRUE(bit_equal(seq(st, n), alone.state.to_host()));
  }
  const GatedDeltaResult want = gated_delta_varlen(host.q, host.k, host.v, host.g, host.beta,
                                                   host.state, Tensor::from_host(cu, {N + 1}));
  EXPECT_TRUE(all_close(y, want.y, gpu_tolerance(DType::bf16)));
  EXPECT_TRUE(all_close(st, want.state, gpu_tolerance(DType::bf16)));

  // The pool form: the same kernels, the states read from and written to the pool's slots
  // (bit for bit chunk_gated_delta_varlen's on the gathered states); slot 5 is named by no
  // sequence and stays as it was.
  const int64_t S = N + 1, state_elems = Hv * Dv * Dk;
  const Tensor pool_host = random_tensor(rng, {S, Hv, Dv, Dk}, DType::f32, 0.0f, 0.1f);
  const std::vector<double> pool0 = to_doubles(pool_host);
  // The states of `ids` in a pool's values, as a [ids, Hv, Dv, Dk] device tensor of `dt`.
  auto gathered = [&](const std::vector<double>& from, const std::vector<int32_t>& ids,
                      DType dt = DType::f32) {
    std::vector<double> st;
    for (int32_t id : ids)
      st.insert(st.end(), from.begin() + id * state_elems, from.begin() + (id + 1) * state_elems);
    return host_tensor(st, {int64_t(ids.size()), Hv, Dv, Dk}, dt).to(gpu);
  };
  auto entry = [&](const std::vector<double>& x, int64_t i) {
    return std::vector<double>(x.begin() + i * state_elems, x.begin() + (i + 1) * state_elems);
  };
  {
    const std::vector<int32_t> ids{1, 0, 2, 3, 4};
    const Tensor pool = pool_host.to(gpu);
    const Tensor slots = Tensor::from_host(ids, {N}).to(gpu);
    const Tensor y_pool =
        chunk_gated_delta_slots_varlen(dev.q, dev.k, dev.v, dev.g, dev.beta, pool, slots, cu_t, 32);
    const GatedDeltaResult want = chunk_gated_delta_varlen(dev.q, dev.k, dev.v, dev.g, dev.beta,
                                                           gathered(pool0, ids), cu_t, 32);
    EXPECT_TRUE(bit_equal(y_pool.to_host(), want.y.to_host()));
    const std::vector<double> after = to_doubles(pool.to_host());
    const std::vector<double> st = to_doubles(want.state.to_host());
    for (int64_t n = 0; n < N; ++n) EXPECT_EQ(entry(after, ids[size_t(n)]), entry(st, n)) << n;
    EXPECT_EQ(entry(after, 5), entry(pool0, 5));
  }
  // Device ids cannot raise: a repeated id (1, sequences 0 and 1) and one outside the pool (7,
  // sequence 3) give their sequences NaN outputs and leave the pool alone; the others run.
  {
    const std::vector<int32_t> ids{1, 1, 2, 7, 4};
    const Tensor pool = pool_host.to(gpu);
    const Tensor slots = Tensor::from_host(ids, {N}).to(gpu);
    const Tensor y_pool =
        chunk_gated_delta_slots_varlen(dev.q, dev.k, dev.v, dev.g, dev.beta, pool, slots, cu_t, 32);
    const GatedDeltaResult want = chunk_gated_delta_varlen(
        dev.q, dev.k, dev.v, dev.g, dev.beta, gathered(pool0, {0, 0, 2, 0, 4}), cu_t, 32);
    const Tensor y = y_pool.to_host(), yw = want.y.to_host();
    const std::vector<double> after = to_doubles(pool.to_host());
    const std::vector<double> st = to_doubles(want.state.to_host());
    for (int64_t n = 0; n < N; ++n) {
      SCOPED_TRACE(::testing::Message() << "sequence " << n << ", slot " << ids[size_t(n)]);
      const Tensor yn = steps(y, cu[size_t(n)], cu[size_t(n + 1)]);
      if (n == 2 || n == 4) {
        EXPECT_TRUE(bit_equal(yn, steps(yw, cu[size_t(n)], cu[size_t(n + 1)])));
        EXPECT_EQ(entry(after, ids[size_t(n)]), entry(st, n));
      } else {
        for (double x : to_doubles(yn)) EXPECT_TRUE(std::isnan(x));
      }
    }
    for (int64_t id : {0, 1, 3, 5}) EXPECT_EQ(entry(after, id), entry(pool0, id)) << id;
  }
  // The dense pool form, a bf16 pool (spec 003's states may be any floating dtype).
  {
    const Bthd h3 = random_bthd(rng, 3, 45, Hk, Hv, Dk, Dv, DType::bf16, DType::bf16);
    const Bthd d3 = on_gpu(h3);
    const std::vector<int32_t> ids{2, 0, 3};
    const Tensor pool_b = random_tensor(rng, {4, Hv, Dv, Dk}, DType::bf16, 0.0f, 0.1f);
    const std::vector<double> pb = to_doubles(pool_b);
    const Tensor pool = pool_b.to(gpu);
    const Tensor y_pool = chunk_gated_delta_slots(d3.q, d3.k, d3.v, d3.g, d3.beta, pool,
                                                  Tensor::from_host(ids, {3}).to(gpu), 16);
    const GatedDeltaResult want =
        chunk_gated_delta(d3.q, d3.k, d3.v, d3.g, d3.beta, gathered(pb, ids, DType::bf16), 16);
    EXPECT_TRUE(bit_equal(y_pool.to_host(), want.y.to_host()));
    const std::vector<double> after = to_doubles(pool.to_host());
    const std::vector<double> st = to_doubles(want.state.to_host());
    for (int64_t n = 0; n < 3; ++n) EXPECT_EQ(entry(after, ids[size_t(n)]), entry(st, n)) << n;
    EXPECT_EQ(entry(after, 1), entry(pb, 1));
  }
  // The argument rules still come first.
  const Tensor state0 = seq(host.state, 0).to(gpu);
  EXPECT_TRUE(throws_error(
      [&] { chunk_gated_delta(dev.q, dev.k, dev.v, dev.g, dev.beta, state0, 0); },
      ErrorCode::InvalidArgument, {"chunk_gated_delta: chunk_size = 0"}));
}

}  // namespace
}  // namespace rudnn::test
