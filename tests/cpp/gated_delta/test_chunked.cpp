// chunk_gated_delta_rule (the chunked WY / UT-transform prefill, spec 000's form): equal to
// the float64 step-by-step recurrence for chunk sizes 1 .. 128 and T not a multiple of them,
// segments chained through final_state equal to one call, varlen equal to separate calls,
// inputs and the initial state unchanged, and every argument rule; its backward
// (chunk_gated_delta_rule_backward) against the float64 reference backward. The GPU tests
// (skipped without a GPU) hold the tensor-core kernels to the same references.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "gated_delta/reference.h"
#include "rudnn/gated_delta.h"
#include "support/test_support.h"

#if RUDNN_GDN_TUNING
#include "gated_delta/cuda/tuning.h"
#endif

namespace rudnn::test {
namespace {

namespace ref = gdn::reference;

const Device kGpu = Device::cuda(0);

// Keys L2-normalised per step as Gated DeltaNet does (the recurrence stays bounded);
// log_decay in [decay_lo, 0].
GatedDeltaInput random_input(Rng& rng, int64_t B, int64_t H, int64_t T, int64_t K, int64_t V,
                             DType dt, float decay_lo = -0.5f) {
  GatedDeltaInput in;
  in.query = random_tensor(rng, {B, H, T, K}, dt);
  std::vector<double> k = to_doubles(random_tensor(rng, {B, H, T, K}, DType::f64));
  for (size_t r = 0; r < k.size() / size_t(K); ++r) {
    double n = 0;
    for (int64_t d = 0; d < K; ++d) n += k[r * K + d] * k[r * K + d];
    for (int64_t d = 0; d < K; ++d) k[r * K + d] /= std::sqrt(n) + 1e-6;
  }
  in.key = host_tensor(k, {B, H, T, K}, dt);
  in.value = random_tensor(rng, {B, H, T, V}, dt);
  std::vector<double> beta(size_t(B * H * T)), log_decay(size_t(B * H * T));
  for (auto& x : beta) x = rng.uniform(0.0f, 1.0f);
  for (auto& x : log_decay) x = rng.uniform(decay_lo, 0.0f);
  in.beta = host_tensor(beta, {B, H, T}, dt);
  in.log_decay = host_tensor(log_decay, {B, H, T}, DType::f32);
  in.initial_state = random_tensor(rng, {B, H, K, V}, DType::f32, 0.0f, 0.1f);
  in.query_scale = float(1.0 / std::sqrt(double(K)));
  return in;
}

GatedDeltaInput on(const GatedDeltaInput& in, Device device) {
  GatedDeltaInput out = in;
  for (Tensor* t :
       {&out.query, &out.key, &out.value, &out.beta, &out.log_decay, &out.initial_state}) {
    *t = t->to(device);
  }
  return out;
}

// The float64 recurrence (the definition) on a host input: output rounded to `dt`, F32 state.
GatedDeltaOutput reference(const GatedDeltaInput& in, const std::vector<int32_t>& cu = {}) {
  const Shape& s = in.query.shape();
  ref::Dims d{s[0], s[2], s[1], s[1], s[3], in.value.shape()[3]};
  ref::SeqLens seqs(cu.begin(), cu.end());
  if (!cu.empty()) d.batch = int64_t(cu.size()) - 1;
  std::vector<double> state = to_doubles(in.initial_state), y;
  ref::gated_delta_bhtd(d, to_doubles(in.query), to_doubles(in.key), to_doubles(in.value),
                        to_doubles(in.beta), to_doubles(in.log_decay), in.query_scale, state, y,
                        seqs);
  return {host_tensor(y, {s[0], s[1], s[2], d.value_dim}, in.query.dtype()),
          host_tensor(state, in.initial_state.shape(), DType::f32)};
}

// Steps [t0, t1) of a [B, H, T, ...] operand, dense.
Tensor steps(const Tensor& x, int64_t t0, int64_t t1) { return x.slice(2, t0, t1).contiguous(); }
GatedDeltaInput segment(const GatedDeltaInput& in, int64_t t0, int64_t t1, const Tensor& state) {
  GatedDeltaInput s = in;
  s.query = steps(in.query, t0, t1);
  s.key = steps(in.key, t0, t1);
  s.value = steps(in.value, t0, t1);
  s.beta = steps(in.beta, t0, t1);
  s.log_decay = steps(in.log_decay, t0, t1);
  s.initial_state = state;
  return s;
}

// The tolerance of the GPU kernels against the float64 recurrence (relative L2): their
// products round the state and V' to the input dtype (see the header).
double gpu_tolerance(DType dt) {
  return dt == DType::f32 ? 1e-4 : dt == DType::f16 ? 5e-3 : 2e-2;
}

// ---- CPU --------------------------------------------------------------------------------------

TEST(GatedDeltaChunked, MatchesTheRecurrenceForEveryChunkSize) {
  RUDNN_SEEDED_RNG(rng);
  for (DType dt : {DType::f64, DType::f32, DType::f16, DType::bf16}) {
    for (int64_t T : {1, 37, 130}) {
      const GatedDeltaInput in = random_input(rng, 2, 2, T, 8, 5, dt);
      const GatedDeltaOutput want = reference(in);
      for (int64_t chunk : {1, 3, 16, 32, 64, 128}) {
        SCOPED_TRACE(::testing::Message() << dtype_name(dt) << " T " << T << " chunk " << chunk);
        const GatedDeltaOutput got = chunk_gated_delta_rule(in, chunk);
        ASSERT_EQ(got.output.shape(), (Shape{2, 2, T, 5}));
        EXPECT_EQ(got.output.dtype(), dt);
        EXPECT_EQ(got.final_state.dtype(), DType::f32);
        const double tol = dt == DType::f64 ? 1e-12 : tolerance(dt);
        EXPECT_TRUE(all_close(got.output, want.output, tol));
        EXPECT_TRUE(all_close(got.final_state, want.final_state, 1e-5));
      }
    }
  }
}

TEST(GatedDeltaChunked, StrongDecayAndZeroLengthAndOddDims) {
  RUDNN_SEEDED_RNG(rng);
  // exp(G) underflows to 0 within a chunk at -8 per step: no NaN, still the recurrence.
  const GatedDeltaInput strong = random_input(rng, 1, 3, 70, 7, 3, DType::f64, -8.0f);
  const GatedDeltaOutput want = reference(strong);
  for (int64_t chunk : {16, 64}) {
    const GatedDeltaOutput got = chunk_gated_delta_rule(strong, chunk);
    EXPECT_TRUE(all_close(got.output, want.output, 1e-10));
    EXPECT_TRUE(all_close(got.final_state, want.final_state, 1e-6));
  }
  // T = 0: no output rows, the final state is the initial state.
  const GatedDeltaInput empty = random_input(rng, 2, 1, 0, 4, 3, DType::f32);
  const GatedDeltaOutput e = chunk_gated_delta_rule(empty, 16);
  EXPECT_EQ(e.output.shape(), (Shape{2, 1, 0, 3}));
  EXPECT_TRUE(bit_equal(e.final_state, empty.initial_state));
}

TEST(GatedDeltaChunked, NonContiguousInputs) {
  RUDNN_SEEDED_RNG(rng);
  const GatedDeltaInput in = random_input(rng, 2, 3, 20, 6, 4, DType::f32);
  GatedDeltaInput strided = in;
  // The same values through transposed storage: [B, T, H, D] permuted back to [B, H, T, D].
  strided.query = in.query.transpose(1, 2).contiguous().transpose(1, 2);
  strided.value = in.value.transpose(1, 2).contiguous().transpose(1, 2);
  ASSERT_FALSE(strided.query.is_contiguous());
  const GatedDeltaOutput a = chunk_gated_delta_rule(in, 8), b = chunk_gated_delta_rule(strided, 8);
  EXPECT_TRUE(bit_equal(a.output, b.output));
  EXPECT_TRUE(bit_equal(a.final_state, b.final_state));
}

TEST(GatedDeltaChunked, SegmentsChainedThroughFinalStateEqualOneCall) {
  RUDNN_SEEDED_RNG(rng);
  const int64_t T = 100;
  const GatedDeltaInput in = random_input(rng, 2, 2, T, 8, 6, DType::f64);
  const GatedDeltaOutput whole = chunk_gated_delta_rule(in, 16);
  const GatedDeltaOutput first = chunk_gated_delta_rule(segment(in, 0, 37, in.initial_state), 16);
  const GatedDeltaOutput second =
      chunk_gated_delta_rule(segment(in, 37, T, first.final_state), 16);
  // The first segment is the same computation; the second starts from an F32 final_state.
  EXPECT_TRUE(all_close(first.output, steps(whole.output, 0, 37), 1e-12));
  EXPECT_TRUE(all_close(second.output, steps(whole.output, 37, T), 1e-6));
  EXPECT_TRUE(all_close(second.final_state, whole.final_state, 1e-6));
}

// Sequences packed along T of batch 1: each equals a separate call on it alone.
void expect_varlen_equals_separate_calls(Device device, DType dt, int64_t K, int64_t V,
                                         const std::vector<int32_t>& lens, int64_t chunk,
                                         Rng& rng) {
  std::vector<int32_t> cu{0};
  for (int32_t n : lens) cu.push_back(cu.back() + n);
  const int64_t T = cu.back(), N = int64_t(lens.size()), H = 2;
  GatedDeltaInput host = random_input(rng, 1, H, T, K, V, dt);
  host.initial_state = random_tensor(rng, {N, H, K, V}, DType::f32, 0.0f, 0.1f);
  const Tensor cu_t = Tensor::from_host(cu, {N + 1}).to(device);
  const GatedDeltaOutput r = chunk_gated_delta_rule_varlen(on(host, device), cu_t, chunk);
  const Tensor y = r.output.to_host(), state = r.final_state.to_host();
  ASSERT_EQ(y.shape(), (Shape{1, H, T, V}));
  ASSERT_EQ(state.shape(), (Shape{N, H, K, V}));
  for (int64_t n = 0; n < N; ++n) {
    SCOPED_TRACE(::testing::Message() << "sequence " << n << " of length " << lens[size_t(n)]);
    const Tensor s0 = host.initial_state.slice(0, n, n + 1).contiguous();
    const GatedDeltaOutput alone =
        chunk_gated_delta_rule(on(segment(host, cu[size_t(n)], cu[size_t(n + 1)], s0), device),
                               chunk);
    EXPECT_TRUE(bit_equal(steps(y, cu[size_t(n)], cu[size_t(n + 1)]), alone.output.to_host()));
    EXPECT_TRUE(
        bit_equal(state.slice(0, n, n + 1).contiguous(), alone.final_state.to_host()));
  }
  // And the whole against the float64 recurrence.
  const GatedDeltaOutput want = reference(host, cu);
  const double tol = device.is_cpu() ? tolerance(dt) : gpu_tolerance(dt);
  EXPECT_TRUE(all_close(y, want.output, tol));
  EXPECT_TRUE(all_close(state, want.final_state, device.is_cpu() ? 1e-5 : gpu_tolerance(dt)));
}

TEST(GatedDeltaChunked, VarlenEqualsSeparateCalls) {
  RUDNN_SEEDED_RNG(rng);
  for (DType dt : {DType::f32, DType::bf16}) {
    SCOPED_TRACE(dtype_name(dt));
    expect_varlen_equals_separate_calls(Device::cpu(), dt, 8, 5, {5, 0, 40, 17, 1}, 16, rng);
  }
}

TEST(GatedDeltaChunked, InputsAndInitialStateUnchanged) {
  RUDNN_SEEDED_RNG(rng);
  const GatedDeltaInput in = random_input(rng, 1, 2, 33, 8, 4, DType::bf16);
  const auto q = bytes_of(in.query), k = bytes_of(in.key), v = bytes_of(in.value),
             beta = bytes_of(in.beta), ld = bytes_of(in.log_decay),
             s = bytes_of(in.initial_state);
  chunk_gated_delta_rule(in, 16);
  EXPECT_EQ(bytes_of(in.query), q);
  EXPECT_EQ(bytes_of(in.key), k);
  EXPECT_EQ(bytes_of(in.value), v);
  EXPECT_EQ(bytes_of(in.beta), beta);
  EXPECT_EQ(bytes_of(in.log_decay), ld);
  EXPECT_EQ(bytes_of(in.initial_state), s);
}

TEST(GatedDeltaChunked, IntoWritesPreallocatedOutputs) {
  RUDNN_SEEDED_RNG(rng);
  const GatedDeltaInput in = random_input(rng, 2, 2, 21, 8, 4, DType::f16);
  const GatedDeltaOutput want = chunk_gated_delta_rule(in, 8);
  const Tensor out = poisoned({2, 2, 21, 4}, DType::f16, Device::cpu());
  const Tensor fs = poisoned({2, 2, 8, 4}, DType::f32, Device::cpu());
  chunk_gated_delta_rule_into(out, fs, in, 8);
  EXPECT_TRUE(bit_equal(out, want.output));
  EXPECT_TRUE(bit_equal(fs, want.final_state));
}

Tensor as_dtype(const Tensor& t, DType dt) { return host_tensor(to_doubles(t), t.shape(), dt); }

// ---- Errors -----------------------------------------------------------------------------------

TEST(GatedDeltaChunkedErrors, ChunkSizeRules) {
  RUDNN_SEEDED_RNG(rng);
  const GatedDeltaInput in = random_input(rng, 1, 1, 3, 4, 2, DType::f32);
  for (int64_t bad : {int64_t(0), int64_t(-3)}) {
    EXPECT_TRUE(throws_error([&] { chunk_gated_delta_rule(in, bad); }, ErrorCode::InvalidArgument,
                             {"chunk_gated_delta_rule: chunk_size = " + std::to_string(bad),
                              "expected a positive chunk size"}));
  }
  // 4 (c^2 + c) against the host's 227 KiB: 240 fits (231360 bytes), 241 does not.
  EXPECT_NO_THROW(chunk_gated_delta_rule(in, 240));
  EXPECT_TRUE(throws_error([&] { chunk_gated_delta_rule(in, 241); }, ErrorCode::InvalidArgument,
                           {"chunk_gated_delta_rule: chunk_size = 241", "233288",
                            "per-block shared-memory limit of 232448 bytes"}));
  EXPECT_TRUE(throws_error(
      [&] { chunk_gated_delta_rule(in, std::numeric_limits<int64_t>::max()); },
      ErrorCode::InvalidArgument, {"chunk_size", "per-block shared-memory limit"}));
  const Tensor cu = Tensor::from_host(std::vector<int32_t>{0, 3}, {2});
  EXPECT_TRUE(throws_error([&] { chunk_gated_delta_rule_varlen(in, cu, 0); },
                           ErrorCode::InvalidArgument,
                           {"chunk_gated_delta_rule_varlen: chunk_size = 0"}));
}

TEST(GatedDeltaChunkedErrors, NothingIsWrittenOnBadInput) {
  RUDNN_SEEDED_RNG(rng);
  const GatedDeltaInput in = random_input(rng, 1, 1, 3, 4, 2, DType::f32);
  const Tensor out = poisoned({1, 1, 3, 2}, DType::f32, Device::cpu());
  const Tensor fs = poisoned({1, 1, 4, 2}, DType::f32, Device::cpu());
  const auto before = bytes_of(out), fs_before = bytes_of(fs);
  EXPECT_THROW(chunk_gated_delta_rule_into(out, fs, in, 0), Error);
  EXPECT_EQ(bytes_of(out), before);
  EXPECT_EQ(bytes_of(fs), fs_before);
}

TEST(GatedDeltaChunkedErrors, InputRules) {
  RUDNN_SEEDED_RNG(rng);
  const GatedDeltaInput good = random_input(rng, 2, 2, 3, 4, 2, DType::f32);
  auto expect = [&](GatedDeltaInput in, ErrorCode code, std::initializer_list<std::string> frag) {
    EXPECT_TRUE(throws_error([&] { chunk_gated_delta_rule(in, 16); }, code, frag));
  };
  GatedDeltaInput in = good;
  in.query = Tensor();
  expect(in, ErrorCode::InvalidArgument, {"chunk_gated_delta_rule", "query", "undefined"});
  in = good;
  in.log_decay = as_dtype(good.log_decay, DType::bf16);
  expect(in, ErrorCode::DTypeMismatch, {"chunk_gated_delta_rule", "log_decay"});
  in = good;
  in.initial_state = as_dtype(good.initial_state, DType::f16);
  expect(in, ErrorCode::DTypeMismatch, {"chunk_gated_delta_rule", "initial_state"});
  in = good;
  in.key = as_dtype(good.key, DType::bf16);
  expect(in, ErrorCode::DTypeMismatch, {"chunk_gated_delta_rule", "key", "query's dtype"});
  in = good;
  in.value = Tensor::zeros({2, 2, 4, 2}, DType::f32);
  expect(in, ErrorCode::ShapeMismatch, {"chunk_gated_delta_rule", "value", "T = 3"});
  in = good;
  in.beta = Tensor::zeros({2, 2, 4}, DType::f32);
  expect(in, ErrorCode::ShapeMismatch, {"chunk_gated_delta_rule", "beta", "[B, H, T]"});
  in = good;
  in.initial_state = Tensor::zeros({2, 2, 2, 4}, DType::f32);
  expect(in, ErrorCode::ShapeMismatch, {"chunk_gated_delta_rule", "initial_state"});
  in = good;
  in.query_scale = std::numeric_limits<float>::infinity();
  expect(in, ErrorCode::InvalidArgument, {"chunk_gated_delta_rule", "query_scale"});
  in = good;
  in.query_scale = std::nanf("");
  expect(in, ErrorCode::InvalidArgument, {"chunk_gated_delta_rule", "query_scale"});
}

TEST(GatedDeltaChunkedErrors, OutputAndVarlenRules) {
  RUDNN_SEEDED_RNG(rng);
  const GatedDeltaInput in = random_input(rng, 1, 2, 6, 4, 2, DType::f32);
  const Tensor fs = Tensor::zeros({1, 2, 4, 2}, DType::f32);
  EXPECT_TRUE(throws_error(
      [&] { chunk_gated_delta_rule_into(Tensor::zeros({1, 2, 5, 2}, DType::f32), fs, in, 4); },
      ErrorCode::ShapeMismatch, {"chunk_gated_delta_rule", "output_out"}));
  EXPECT_TRUE(throws_error(
      [&] {
        chunk_gated_delta_rule_into(Tensor::zeros({1, 2, 6, 2}, DType::f32),
                                    Tensor::zeros({1, 2, 4, 2}, DType::bf16), in, 4);
      },
      ErrorCode::DTypeMismatch, {"chunk_gated_delta_rule", "final_state_out"}));
  // The output may not alias an input.
  EXPECT_THROW(chunk_gated_delta_rule_into(in.query.slice(3, 0, 2), fs, in, 4), Error);

  GatedDeltaInput packed = in;
  packed.initial_state = Tensor::zeros({2, 2, 4, 2}, DType::f32);
  auto cu = [](std::vector<int32_t> v) { return Tensor::from_host(v, {int64_t(v.size())}); };
  EXPECT_NO_THROW(chunk_gated_delta_rule_varlen(packed, cu({0, 2, 6}), 4));
  EXPECT_TRUE(throws_error([&] { chunk_gated_delta_rule_varlen(packed, cu({0, 4, 2}), 4); },
                           ErrorCode::InvalidArgument,
                           {"chunk_gated_delta_rule_varlen", "cu_seqlens[2] = 2", "non-decreasing"}));
  EXPECT_TRUE(throws_error([&] { chunk_gated_delta_rule_varlen(packed, cu({1, 2, 6}), 4); },
                           ErrorCode::InvalidArgument, {"cu_seqlens[0] = 1"}));
  EXPECT_TRUE(throws_error([&] { chunk_gated_delta_rule_varlen(packed, cu({0, 2, 5}), 4); },
                           ErrorCode::InvalidArgument, {"cu_seqlens[2] = 5", "T = 6"}));
  EXPECT_TRUE(throws_error([&] { chunk_gated_delta_rule_varlen(packed, cu({0, 6}), 4); },
                           ErrorCode::ShapeMismatch, {"cu_seqlens", "[N + 1]"}));
  EXPECT_TRUE(throws_error(
      [&] {
        chunk_gated_delta_rule_varlen(packed, Tensor::from_host(std::vector<int64_t>{0, 2, 6}, {3}),
                                      4);
      },
      ErrorCode::DTypeMismatch, {"cu_seqlens"}));
  EXPECT_TRUE(throws_error([&] { chunk_gated_delta_rule_varlen(packed, Tensor(), 4); },
                           ErrorCode::InvalidArgument, {"cu_seqlens", "undefined"}));
  const GatedDeltaInput two = random_input(rng, 2, 2, 6, 4, 2, DType::f32);
  EXPECT_TRUE(throws_error([&] { chunk_gated_delta_rule_varlen(two, cu({0, 2, 6}), 4); },
                           ErrorCode::ShapeMismatch, {"B = 2", "expected B = 1"}));
}

// ---- GPU (skipped without one) ----------------------------------------------------------------

struct GpuCase {
  int64_t B, H, T, K, V;
};

TEST(GatedDeltaChunkedGpu, MatchesTheRecurrence) {
  RUDNN_REQUIRE_CUDA();
  RUDNN_SEEDED_RNG(rng);
  PoisonScope poison(true);
  for (const GpuCase c : {GpuCase{2, 2, 200, 128, 128}, GpuCase{1, 3, 77, 40, 24},
                          GpuCase{1, 1, 1, 64, 64}, GpuCase{2, 1, 0, 32, 16},
                          GpuCase{1, 2, 130, 256, 72}}) {
    for (DType dt : {DType::bf16, DType::f16, DType::f32}) {
      const GatedDeltaInput host = random_input(rng, c.B, c.H, c.T, c.K, c.V, dt);
      const GatedDeltaOutput want = reference(host);
      const GatedDeltaInput dev = on(host, kGpu);
      for (int64_t chunk : {16, 32, 64, 128, 50}) {
        SCOPED_TRACE(::testing::Message() << dtype_name(dt) << " B" << c.B << " H" << c.H << " T"
                                          << c.T << " K" << c.K << " V" << c.V << " chunk "
                                          << chunk);
        GatedDeltaOutput got;
        try {
          got = chunk_gated_delta_rule(dev, chunk);
        } catch (const Error& e) {
          // Only the documented shared-memory limit may refuse a case (K = 256 at large chunks).
          EXPECT_EQ(e.code(), ErrorCode::Unsupported) << e.what();
          EXPECT_TRUE(c.K == 256 && chunk >= 64) << e.what();
          continue;
        }
        EXPECT_TRUE(all_close(got.output.to_host(), want.output, gpu_tolerance(dt)));
        EXPECT_TRUE(all_close(got.final_state.to_host(), want.final_state, gpu_tolerance(dt)));
      }
      EXPECT_TRUE(bit_equal(dev.query.to_host(), host.query));
      EXPECT_TRUE(bit_equal(dev.key.to_host(), host.key));
      EXPECT_TRUE(bit_equal(dev.value.to_host(), host.value));
      EXPECT_TRUE(bit_equal(dev.beta.to_host(), host.beta));
      EXPECT_TRUE(bit_equal(dev.log_decay.to_host(), host.log_decay));
      EXPECT_TRUE(bit_equal(dev.initial_state.to_host(), host.initial_state));
    }
  }
}

TEST(GatedDeltaChunkedGpu, LongSequenceAndStrongDecay) {
  RUDNN_REQUIRE_CUDA();
  RUDNN_SEEDED_RNG(rng);
  for (float decay_lo : {-0.1f, -8.0f}) {
    SCOPED_TRACE(::testing::Message() << "log_decay in [" << decay_lo << ", 0]");
    const GatedDeltaInput host = random_input(rng, 1, 2, 4100, 128, 128, DType::bf16, decay_lo);
    const GatedDeltaOutput want = reference(host);
    const GatedDeltaOutput got = chunk_gated_delta_rule(on(host, kGpu), 64);
    EXPECT_TRUE(all_close(got.output.to_host(), want.output, gpu_tolerance(DType::bf16)));
    EXPECT_TRUE(
        all_close(got.final_state.to_host(), want.final_state, gpu_tolerance(DType::bf16)));
  }
}

// A log decay of -inf is a zero decay (a reset): the chunk's running sums of logs would give
// -inf - (-inf) = NaN, so the kernels count such steps apart (ChunkDecay); the results equal
// the recurrence's, with the resets at a chunk's first, inner and last steps and the first
// step of the sequence.
TEST(GatedDeltaChunkedGpu, MinusInfinityLogDecayResets) {
  RUDNN_REQUIRE_CUDA();
  RUDNN_SEEDED_RNG(rng);
  for (DType dt : {DType::f32, DType::bf16}) {
    GatedDeltaInput host = random_input(rng, 2, 2, 150, 64, 32, dt);
    std::vector<double> ld = to_doubles(host.log_decay);
    for (size_t i = 0; i < ld.size(); i += 23) ld[i] = -std::numeric_limits<double>::infinity();
    for (size_t i : {size_t(0), size_t(15), size_t(16), size_t(63), size_t(64), size_t(151)})
      ld[i] = -std::numeric_limits<double>::infinity();
    host.log_decay = host_tensor(ld, host.log_decay.shape(), DType::f32);
    const GatedDeltaOutput want = reference(host);
    for (int64_t chunk : {16, 64}) {
      SCOPED_TRACE(::testing::Message() << dtype_name(dt) << " chunk " << chunk);
      const GatedDeltaOutput got = chunk_gated_delta_rule(on(host, kGpu), chunk);
      EXPECT_TRUE(all_close(got.output.to_host(), want.output, gpu_tolerance(dt)));
      EXPECT_TRUE(all_close(got.final_state.to_host(), want.final_state, gpu_tolerance(dt)));
    }
  }
}

// The state pass keeps two chunks' operands in flight (three stages) when its grid has no
// more blocks than the device has SMs, else one (two stages): B2 H40 V100 gives 320 blocks of
// 32 value columns (more than any GPU's SM count), B1 H2 a handful, so each is checked on every
// device; V = 100 leaves a partial last slab in both.
TEST(GatedDeltaChunkedGpu, BothStageCounts) {
  RUDNN_REQUIRE_CUDA();
  RUDNN_SEEDED_RNG(rng);
  PoisonScope poison(true);
  for (const GpuCase c : {GpuCase{2, 40, 150, 128, 100}, GpuCase{1, 2, 150, 128, 100}}) {
    for (DType dt : {DType::bf16, DType::f32}) {
      const GatedDeltaInput host = random_input(rng, c.B, c.H, c.T, c.K, c.V, dt);
      const GatedDeltaOutput want = reference(host);
      const GatedDeltaInput dev = on(host, kGpu);
      for (int64_t chunk : {64, 32}) {
        SCOPED_TRACE(::testing::Message() << dtype_name(dt) << " B" << c.B << " H" << c.H << " T"
                                          << c.T << " K" << c.K << " V" << c.V << " chunk "
                                          << chunk);
        const GatedDeltaOutput got = chunk_gated_delta_rule(dev, chunk);
        EXPECT_TRUE(all_close(got.output.to_host(), want.output, gpu_tolerance(dt)));
        EXPECT_TRUE(all_close(got.final_state.to_host(), want.final_state, gpu_tolerance(dt)));
      }
    }
  }
}

// Many (chunk, head) units for the prepare grid (752; varlen ~2000 with empty slots at the
// end, which the prepare blocks skip).
TEST(GatedDeltaChunkedGpu, ManyUnitsPerPrepareBlock) {
  RUDNN_REQUIRE_CUDA();
  RUDNN_SEEDED_RNG(rng);
  PoisonScope poison(true);
  for (DType dt : {DType::bf16, DType::f32}) {
    SCOPED_TRACE(::testing::Message() << dtype_name(dt) << " B1 H8 T3000 K128 V64 chunk 32");
    const GatedDeltaInput host = random_input(rng, 1, 8, 3000, 128, 64, dt);
    const GatedDeltaOutput want = reference(host);
    const GatedDeltaOutput got = chunk_gated_delta_rule(on(host, kGpu), 32);
    EXPECT_TRUE(all_close(got.output.to_host(), want.output, gpu_tolerance(dt)));
    EXPECT_TRUE(all_close(got.final_state.to_host(), want.final_state, gpu_tolerance(dt)));
  }
  SCOPED_TRACE("varlen bf16 K128 V40 chunk 16, lengths 9000 1 0 7000 17");
  expect_varlen_equals_separate_calls(kGpu, DType::bf16, 128, 40, {9000, 1, 0, 7000, 17}, 16, rng);
}

TEST(GatedDeltaChunkedGpu, SegmentsChainedThroughFinalState) {
  RUDNN_REQUIRE_CUDA();
  RUDNN_SEEDED_RNG(rng);
  for (DType dt : {DType::bf16, DType::f32}) {
    SCOPED_TRACE(dtype_name(dt));
    const int64_t T = 300;
    const GatedDeltaInput dev = on(random_input(rng, 2, 2, T, 128, 64, dt), kGpu);
    const GatedDeltaOutput whole = chunk_gated_delta_rule(dev, 64);
    const GatedDeltaOutput first = chunk_gated_delta_rule(segment(dev, 0, 100, dev.initial_state), 64);
    const GatedDeltaOutput second =
        chunk_gated_delta_rule(segment(dev, 100, T, first.final_state), 64);
    const double tol = gpu_tolerance(dt);
    EXPECT_TRUE(all_close(first.output.to_host(), steps(whole.output, 0, 100).to_host(), tol));
    EXPECT_TRUE(all_close(second.output.to_host(), steps(whole.output, 100, T).to_host(), tol));
    EXPECT_TRUE(all_close(second.final_state.to_host(), whole.final_state.to_host(), tol));
  }
}

TEST(GatedDeltaChunkedGpu, VarlenEqualsSeparateCalls) {
  RUDNN_REQUIRE_CUDA();
  RUDNN_SEEDED_RNG(rng);
  for (DType dt : {DType::bf16, DType::f32}) {
    for (int64_t chunk : {64, 16}) {
      SCOPED_TRACE(::testing::Message() << dtype_name(dt) << " chunk " << chunk);
      expect_varlen_equals_separate_calls(kGpu, dt, 128, 40, {1, 0, 130, 64, 17}, chunk, rng);
    }
  }
}

// More than 2^31 elements in q, k, v and the output: [1, 1, T, 128] with T = 2^24 + 256,
// built on the device from a periodic block. log_decay in [-10, -4] makes every output
// depend only on the last few dozen steps (the state decays by e^-4 or more a step), so a
// window around element 2^31 (step 2^24) is checked against the float64 recurrence over that
// window and 128 steps before it, from a zero state.
TEST(GatedDeltaChunkedGpu, BeyondTwoToThe31Elements) {
  RUDNN_REQUIRE_CUDA();
  RUDNN_SEEDED_RNG(rng);
  constexpr int64_t kPeriod = 4096, D = 128, kCross = int64_t{1} << 24, T = kCross + 256;
  const GatedDeltaInput block = random_input(rng, 1, 1, kPeriod, D, D, DType::bf16, -6.0f);
  std::vector<double> ld = to_doubles(block.log_decay);
  for (double& x : ld) x -= 4.0;  // [-10, -4]
  GatedDeltaInput host = block;
  host.log_decay = host_tensor(ld, {1, 1, kPeriod}, DType::f32);
  GatedDeltaInput dev;
  GatedDeltaOutput got;
  try {
    auto tile = [&](const Tensor& b) {
      Shape shape = b.shape();
      shape[2] = T;
      const Tensor big = Tensor::empty(shape, b.dtype(), kGpu);
      big.slice(2, 0, kPeriod).copy_from(b.to(kGpu));
      for (int64_t done = kPeriod; done < T; done *= 2) {
        const int64_t n = std::min(done, T - done);
        big.slice(2, done, done + n).copy_from(big.slice(2, 0, n));
      }
      return big;
    };
    dev.query = tile(host.query);
    dev.key = tile(host.key);
    dev.value = tile(host.value);
    dev.beta = tile(host.beta);
    dev.log_decay = tile(host.log_decay);
    dev.initial_state = host.initial_state.to(kGpu);
    dev.query_scale = host.query_scale;
    got = chunk_gated_delta_rule(dev, 64);
  } catch (const Error& e) {
    if (e.code() == ErrorCode::OutOfMemory) GTEST_SKIP() << "device memory ran out: " << e.what();
    throw;
  }
  ASSERT_GT(dev.query.numel(), int64_t{1} << 31);
  for (int64_t t0 : {kCross - 64, T - 128}) {
    SCOPED_TRACE(::testing::Message() << "steps [" << t0 << ", " << t0 + 64 << ")");
    // Steps [t0 - 128, t0 + 64) of the periodic input, from a zero state.
    const int64_t w0 = t0 - 128, w1 = t0 + 64;
    std::vector<double> q, k, v, beta, lg;
    const auto hq = to_doubles(host.query), hk = to_doubles(host.key), hv = to_doubles(host.value),
               hb = to_doubles(host.beta);
    for (int64_t t = w0; t < w1; ++t) {
      const int64_t p = t % kPeriod;
      q.insert(q.end(), hq.begin() + p * D, hq.begin() + (p + 1) * D);
      k.insert(k.end(), hk.begin() + p * D, hk.begin() + (p + 1) * D);
      v.insert(v.end(), hv.begin() + p * D, hv.begin() + (p + 1) * D);
      beta.push_back(hb[size_t(p)]);
      lg.push_back(ld[size_t(p)]);
    }
    std::vector<double> state(size_t(D * D), 0.0), y;
    ref::gated_delta_bhtd({1, w1 - w0, 1, 1, D, D}, q, k, v, beta, lg, host.query_scale, state, y);
    const std::vector<double> want(y.begin() + 128 * D, y.end());
    EXPECT_TRUE(all_close(steps(got.output, t0, w1).to_host(),
                          host_tensor(want, {1, 1, 64, D}, DType::bf16),
                          gpu_tolerance(DType::bf16)));
  }
}

TEST(GatedDeltaChunkedGpu, IntoAndUnsupportedCases) {
  RUDNN_REQUIRE_CUDA();
  RUDNN_SEEDED_RNG(rng);
  const GatedDeltaInput dev = on(random_input(rng, 1, 2, 70, 64, 32, DType::bf16), kGpu);
  const GatedDeltaOutput want = chunk_gated_delta_rule(dev, 32);
  const Tensor out = poisoned({1, 2, 70, 32}, DType::bf16, kGpu);
  const Tensor fs = poisoned({1, 2, 64, 32}, DType::f32, kGpu);
  chunk_gated_delta_rule_into(out, fs, dev, 32);
  EXPECT_TRUE(bit_equal(out.to_host(), want.output.to_host()));
  EXPECT_TRUE(bit_equal(fs.to_host(), want.final_state.to_host()));

  EXPECT_TRUE(throws_error([&] { chunk_gated_delta_rule(dev, 129); }, ErrorCode::Unsupported,
                           {"chunk_gated_delta_rule: chunk_size = 129", "chunk_size <= 128"}));
  EXPECT_TRUE(throws_error([&] { chunk_gated_delta_rule(dev, 100000); },
                           ErrorCode::InvalidArgument,
                           {"chunk_size = 100000", "per-block shared-memory limit",
                            "the device's opt-in limit"}));
  const GatedDeltaInput wide = on(random_input(rng, 1, 1, 4, 300, 8, DType::bf16), kGpu);
  EXPECT_TRUE(throws_error([&] { chunk_gated_delta_rule(wide, 16); }, ErrorCode::Unsupported,
                           {"K = 300", "K, V <= 256"}));
  const GatedDeltaInput big = on(random_input(rng, 1, 1, 4, 256, 256, DType::f32), kGpu);
  EXPECT_TRUE(throws_error([&] { chunk_gated_delta_rule(big, 128); }, ErrorCode::Unsupported,
                           {"bytes of shared memory", "opt-in limit"}));
  // The entry point checks devices: a host cu_seqlens with device inputs is refused.
  GatedDeltaInput packed = dev;
  packed.initial_state = dev.initial_state;
  EXPECT_THROW(chunk_gated_delta_rule_varlen(packed, Tensor::from_host(std::vector<int32_t>{0, 70},
                                                                       {2}),
                                             16),
               Error);
}

// ---- Backward ---------------------------------------------------------------------------------

// The float64 reference backward on a host input (the definition of both backward ops).
ref::Grads reference_grads(const GatedDeltaInput& in, const Tensor& dout, const Tensor& dfinal,
                           const std::vector<int32_t>& cu = {}) {
  const Shape& s = in.query.shape();
  ref::Dims d{s[0], s[2], s[1], s[1], s[3], in.value.shape()[3]};
  if (!cu.empty()) d.batch = int64_t(cu.size()) - 1;
  return ref::gated_delta_bhtd_backward(
      d, to_doubles(in.query), to_doubles(in.key), to_doubles(in.value), to_doubles(in.beta),
      to_doubles(in.log_decay), in.query_scale, to_doubles(in.initial_state), to_doubles(dout),
      dfinal.defined() ? to_doubles(dfinal) : std::vector<double>{},
      ref::SeqLens(cu.begin(), cu.end()));
}

// Every gradient against the reference's, relative L2 within tol.
void expect_grads_close(const GatedDeltaInputGrads& got, const ref::Grads& want,
                        const GatedDeltaInput& in, double tol) {
  auto close = [&](const char* name, const Tensor& t, const std::vector<double>& w,
                   const Tensor& like, DType dt) {
    SCOPED_TRACE(name);
    ASSERT_EQ(t.shape(), like.shape());
    ASSERT_EQ(t.dtype(), dt);
    EXPECT_TRUE(all_close(t.to_host(), host_tensor(w, like.shape(), dt), tol));
  };
  close("dquery", got.dquery, want.dq, in.query, in.query.dtype());
  close("dkey", got.dkey, want.dk, in.key, in.key.dtype());
  close("dvalue", got.dvalue, want.dv, in.value, in.value.dtype());
  close("dbeta", got.dbeta, want.dbeta, in.beta, in.beta.dtype());
  close("dlog_decay", got.dlog_decay, want.dgate, in.log_decay, DType::f32);
  close("dinitial_state", got.dinitial_state, want.dstate, in.initial_state, DType::f32);
}

void expect_grads_bit_equal(const GatedDeltaInputGrads& a, const GatedDeltaInputGrads& b) {
  EXPECT_TRUE(bit_equal(a.dquery.to_host(), b.dquery.to_host()));
  EXPECT_TRUE(bit_equal(a.dkey.to_host(), b.dkey.to_host()));
  EXPECT_TRUE(bit_equal(a.dvalue.to_host(), b.dvalue.to_host()));
  EXPECT_TRUE(bit_equal(a.dbeta.to_host(), b.dbeta.to_host()));
  EXPECT_TRUE(bit_equal(a.dlog_decay.to_host(), b.dlog_decay.to_host()));
  EXPECT_TRUE(bit_equal(a.dinitial_state.to_host(), b.dinitial_state.to_host()));
}

// On the CPU the chunked form's gradients are the reference's: gated_delta_rule_backward's,
// bit for bit, for any chunk size, dense and varlen.
TEST(GatedDeltaChunkedBackward, CpuIsTheReferenceBackward) {
  RUDNN_SEEDED_RNG(rng);
  for (DType dt : {DType::f32, DType::bf16}) {
    const GatedDeltaInput in = random_input(rng, 2, 2, 37, 8, 5, dt);
    const Tensor dout = random_tensor(rng, {2, 2, 37, 5}, dt);
    const Tensor dfinal = random_tensor(rng, {2, 2, 8, 5}, DType::f32, 0.0f, 0.1f);
    const GatedDeltaInputGrads want = gated_delta_rule_backward(dout, dfinal, in);
    for (int64_t chunk : {1, 16, 64}) {
      SCOPED_TRACE(::testing::Message() << dtype_name(dt) << " chunk " << chunk);
      expect_grads_bit_equal(chunk_gated_delta_rule_backward(dout, dfinal, in, chunk), want);
    }
    const std::vector<int32_t> cu{0, 5, 5, 37};
    GatedDeltaInput packed = segment(in, 0, 37, random_tensor(rng, {3, 2, 8, 5}, DType::f32));
    packed.query = packed.query.slice(0, 0, 1).contiguous();
    packed.key = packed.key.slice(0, 0, 1).contiguous();
    packed.value = packed.value.slice(0, 0, 1).contiguous();
    packed.beta = packed.beta.slice(0, 0, 1).contiguous();
    packed.log_decay = packed.log_decay.slice(0, 0, 1).contiguous();
    const Tensor cu_t = Tensor::from_host(cu, {4});
    const Tensor dpacked = dout.slice(0, 0, 1).contiguous();
    expect_grads_bit_equal(chunk_gated_delta_rule_backward(dpacked, Tensor(), packed, 16, cu_t),
                           gated_delta_rule_backward(dpacked, Tensor(), packed, cu_t));
  }
}

TEST(GatedDeltaChunkedBackwardErrors, ChunkSizeAndArgumentRules) {
  RUDNN_SEEDED_RNG(rng);
  const GatedDeltaInput in = random_input(rng, 1, 2, 3, 4, 2, DType::f32);
  const Tensor dout = random_tensor(rng, {1, 2, 3, 2}, DType::f32);
  for (int64_t bad : {int64_t(0), int64_t(-1)}) {
    EXPECT_TRUE(throws_error([&] { chunk_gated_delta_rule_backward(dout, Tensor(), in, bad); },
                             ErrorCode::InvalidArgument,
                             {"chunk_gated_delta_rule_backward: chunk_size = " +
                                  std::to_string(bad),
                              "expected a positive chunk size"}));
  }
  EXPECT_TRUE(throws_error([&] { chunk_gated_delta_rule_backward(dout, Tensor(), in, 241); },
                           ErrorCode::InvalidArgument,
                           {"chunk_gated_delta_rule_backward: chunk_size = 241",
                            "per-block shared-memory limit"}));
  const Tensor bad_dout = random_tensor(rng, {1, 2, 4, 2}, DType::f32);
  EXPECT_TRUE(throws_error([&] { chunk_gated_delta_rule_backward(bad_dout, Tensor(), in, 16); },
                           ErrorCode::ShapeMismatch,
                           {"chunk_gated_delta_rule_backward", "doutput"}));
  const Tensor bad_dfinal = random_tensor(rng, {1, 2, 4, 3}, DType::f32);
  EXPECT_TRUE(throws_error([&] { chunk_gated_delta_rule_backward(dout, bad_dfinal, in, 16); },
                           ErrorCode::ShapeMismatch,
                           {"chunk_gated_delta_rule_backward", "dfinal_state"}));
  GatedDeltaInput bad = in;
  bad.log_decay = as_dtype(bad.log_decay, DType::f16);
  EXPECT_TRUE(throws_error([&] { chunk_gated_delta_rule_backward(dout, Tensor(), bad, 16); },
                           ErrorCode::DTypeMismatch,
                           {"chunk_gated_delta_rule_backward", "log_decay"}));
  // Nothing is written on bad input.
  GatedDeltaInputGrads out{poisoned({1, 2, 3, 4}, DType::f32, Device::cpu()),
                           poisoned({1, 2, 3, 4}, DType::f32, Device::cpu()),
                           poisoned({1, 2, 3, 2}, DType::f32, Device::cpu()),
                           poisoned({1, 2, 3}, DType::f32, Device::cpu()),
                           poisoned({1, 2, 3}, DType::f32, Device::cpu()),
                           poisoned({1, 2, 4, 2}, DType::f32, Device::cpu())};
  const auto before = bytes_of(out.dquery), ds_before = bytes_of(out.dinitial_state);
  EXPECT_THROW(chunk_gated_delta_rule_backward_into(out, dout, Tensor(), in, 0), Error);
  EXPECT_EQ(bytes_of(out.dquery), before);
  EXPECT_EQ(bytes_of(out.dinitial_state), ds_before);
}

// The GPU kernels against the float64 reference backward: chunk sizes 16 .. 64 and T not a
// multiple of them, padded K and V (20, 70), with and without the final state's gradient;
// the F32 case at K = V = 128 and chunk 128 (past the kernels' shared memory) run the
// recurrence's backward, which the same check holds. The one-step sequence runs in F32 only:
// there dlog_decay and dbeta are each one sum of a few terms that cancel, so the 16-bit
// rounding of the products' operands is a relative error of several percent (measured
// 3.7 % / 7.4 % in bf16, round 70), not a bound the tolerance can state.
TEST(GatedDeltaChunkedBackwardGpu, MatchesTheReference) {
  RUDNN_REQUIRE_CUDA();
  RUDNN_SEEDED_RNG(rng);
  PoisonScope poison(true);
  struct Case {
    int64_t B, H, T, K, V, chunk;
  };
  for (const Case c : {Case{2, 2, 150, 128, 128, 64}, Case{1, 3, 77, 20, 70, 16},
                       Case{2, 1, 200, 64, 32, 32}, Case{1, 2, 64, 128, 128, 64},
                       Case{1, 1, 1, 32, 32, 64}, Case{1, 2, 90, 64, 64, 128},
                       Case{1, 2, 0, 32, 32, 16}}) {
    for (DType dt : {DType::bf16, DType::f16, DType::f32}) {
      if (c.T == 1 && dt != DType::f32) continue;
      for (bool with_dfinal : {true, false}) {
        SCOPED_TRACE(::testing::Message()
                     << dtype_name(dt) << " B" << c.B << " H" << c.H << " T" << c.T << " K"
                     << c.K << " V" << c.V << " chunk " << c.chunk
                     << (with_dfinal ? " dfinal" : ""));
        const GatedDeltaInput host = random_input(rng, c.B, c.H, c.T, c.K, c.V, dt);
        const Tensor dout = random_tensor(rng, {c.B, c.H, c.T, c.V}, dt);
        const Tensor dfinal =
            with_dfinal ? random_tensor(rng, {c.B, c.H, c.K, c.V}, DType::f32, 0.0f, 0.1f)
                        : Tensor();
        const GatedDeltaInput dev = on(host, kGpu);
        const GatedDeltaInputGrads got = chunk_gated_delta_rule_backward(
            dout.to(kGpu), with_dfinal ? dfinal.to(kGpu) : Tensor(), dev, c.chunk);
        expect_grads_close(got, reference_grads(host, dout, dfinal), host, gpu_tolerance(dt));
        EXPECT_TRUE(bit_equal(dev.query.to_host(), host.query));
        EXPECT_TRUE(bit_equal(dev.key.to_host(), host.key));
        EXPECT_TRUE(bit_equal(dev.log_decay.to_host(), host.log_decay));
        EXPECT_TRUE(bit_equal(dev.initial_state.to_host(), host.initial_state));
      }
    }
  }
}

// More (sequence, head, 32-column) blocks than any GPU has multiprocessors (640): the reverse
// pass runs 64 value columns a block, here with a partial last slab (V = 100).
TEST(GatedDeltaChunkedBackwardGpu, ManyHeadsTakeTheWideReversePass) {
  RUDNN_REQUIRE_CUDA();
  RUDNN_SEEDED_RNG(rng);
  const int64_t B = 4, H = 40, T = 70, K = 64, V = 100;
  for (DType dt : {DType::bf16, DType::f32}) {
    SCOPED_TRACE(::testing::Message() << dtype_name(dt));
    const GatedDeltaInput host = random_input(rng, B, H, T, K, V, dt);
    const Tensor dout = random_tensor(rng, {B, H, T, V}, dt);
    const Tensor dfinal = random_tensor(rng, {B, H, K, V}, DType::f32, 0.0f, 0.1f);
    const GatedDeltaInputGrads got =
        chunk_gated_delta_rule_backward(dout.to(kGpu), dfinal.to(kGpu), on(host, kGpu), 32);
    expect_grads_close(got, reference_grads(host, dout, dfinal), host, gpu_tolerance(dt));
  }
}

#if RUDNN_GDN_TUNING
// Every launch choice of gated_delta/cuda/tuning.h gives the default's bits: the stages and the
// state and reverse passes' widths change what is in flight, not the sums.
TEST(GatedDeltaChunkedBackwardGpu, LaunchChoicesGiveTheSameBits) {
  RUDNN_REQUIRE_CUDA();
  RUDNN_SEEDED_RNG(rng);
  struct Restore {
    gdn::cuda::ChunkedTuning saved = gdn::cuda::chunked_tuning();
    ~Restore() { gdn::cuda::chunked_tuning() = saved; }
  } restore;
  const int64_t B = 2, H = 3, T = 150, K = 64, V = 96;
  const GatedDeltaInput host = random_input(rng, B, H, T, K, V, DType::bf16);
  const GatedDeltaInput dev = on(host, kGpu);
  const Tensor dout = random_tensor(rng, {B, H, T, V}, DType::bf16).to(kGpu);
  const Tensor dfinal = random_tensor(rng, {B, H, K, V}, DType::f32, 0.0f, 0.1f).to(kGpu);
  const GatedDeltaOutput y0 = chunk_gated_delta_rule(dev, 32);
  const GatedDeltaInputGrads g0 = chunk_gated_delta_rule_backward(dout, dfinal, dev, 32);
  for (int stages : {1, 2, 3})
    for (int cols : {32, 64}) {
      SCOPED_TRACE(::testing::Message() << stages << " stages, " << cols << " columns");
      gdn::cuda::ChunkedTuning& t = gdn::cuda::chunked_tuning();
      t = {};
      t.state_stages = stages;
      t.state_pass_cols = cols;
      t.reverse_pass_cols = cols;
      const GatedDeltaOutput y = chunk_gated_delta_rule(dev, 32);
      EXPECT_TRUE(bit_equal(y.output.to_host(), y0.output.to_host()));
      EXPECT_TRUE(bit_equal(y.final_state.to_host(), y0.final_state.to_host()));
      expect_grads_bit_equal(chunk_gated_delta_rule_backward(dout, dfinal, dev, 32), g0);
    }
}
#endif

// A long sequence (the reverse pass over 65 chunks), strong decay (exp(G) underflowing within a
// chunk), zero decays (log decay -inf: resets, the gradient through them 0) and an upstream
// gradient in another dtype than q's.
TEST(GatedDeltaChunkedBackwardGpu, LongSequenceStrongDecayAndResets) {
  RUDNN_REQUIRE_CUDA();
  RUDNN_SEEDED_RNG(rng);
  for (float decay_lo : {-0.1f, -8.0f}) {
    SCOPED_TRACE(::testing::Message() << "log_decay in [" << decay_lo << ", 0]");
    GatedDeltaInput host = random_input(rng, 1, 2, 4100, 128, 128, DType::bf16, decay_lo);
    const Tensor dout = random_tensor(rng, {1, 2, 4100, 128}, DType::f32);
    const GatedDeltaInputGrads got =
        chunk_gated_delta_rule_backward(dout.to(kGpu), Tensor(), on(host, kGpu), 64);
    expect_grads_close(got, reference_grads(host, dout, Tensor()), host,
                       gpu_tolerance(DType::bf16));
  }
  for (DType dt : {DType::f32, DType::bf16}) {
    SCOPED_TRACE(::testing::Message() << dtype_name(dt) << " with resets");
    GatedDeltaInput host = random_input(rng, 2, 2, 150, 64, 32, dt);
    std::vector<double> ld = to_doubles(host.log_decay);
    for (size_t i = 0; i < ld.size(); i += 23) ld[i] = -std::numeric_limits<double>::infinity();
    for (size_t i : {size_t(0), size_t(15), size_t(16), size_t(63), size_t(64), size_t(151)})
      ld[i] = -std::numeric_limits<double>::infinity();
    host.log_decay = host_tensor(ld, host.log_decay.shape(), DType::f32);
    const Tensor dout = random_tensor(rng, {2, 2, 150, 32}, dt);
    const Tensor dfinal = random_tensor(rng, {2, 2, 64, 32}, DType::f32, 0.0f, 0.1f);
    for (int64_t chunk : {16, 64}) {
      SCOPED_TRACE(::testing::Message() << "chunk " << chunk);
      const GatedDeltaInputGrads got = chunk_gated_delta_rule_backward(
          dout.to(kGpu), dfinal.to(kGpu), on(host, kGpu), chunk);
      expect_grads_close(got, reference_grads(host, dout, dfinal), host, gpu_tolerance(dt));
    }
  }
}

// Identical bits run to run; each packed sequence's gradients equal a separate call's, bit
// for bit (the same per-chunk work); _into writes preallocated gradients.
TEST(GatedDeltaChunkedBackwardGpu, DeterministicVarlenAndInto) {
  RUDNN_REQUIRE_CUDA();
  RUDNN_SEEDED_RNG(rng);
  const std::vector<int32_t> cu{0, 100, 100, 101, 230};
  const int64_t N = 4, T = 230, H = 2, K = 64, V = 48;
  GatedDeltaInput host = random_input(rng, 1, H, T, K, V, DType::bf16);
  host.initial_state = random_tensor(rng, {N, H, K, V}, DType::f32, 0.0f, 0.1f);
  const Tensor dout = random_tensor(rng, {1, H, T, V}, DType::bf16);
  const Tensor dfinal = random_tensor(rng, {N, H, K, V}, DType::f32, 0.0f, 0.1f);
  const GatedDeltaInput dev = on(host, kGpu);
  const Tensor cu_t = Tensor::from_host(cu, {N + 1}).to(kGpu);
  auto run = [&] {
    return chunk_gated_delta_rule_backward(dout.to(kGpu), dfinal.to(kGpu), dev, 32, cu_t);
  };
  const GatedDeltaInputGrads one = run(), two = run();
  expect_grads_bit_equal(one, two);
  expect_grads_close(one, reference_grads(host, dout, dfinal, cu), host,
                     gpu_tolerance(DType::bf16));
  for (int64_t n = 0; n < N; ++n) {
    SCOPED_TRACE(::testing::Message() << "sequence " << n);
    GatedDeltaInput alone = segment(dev, cu[n], cu[n + 1],
                                    host.initial_state.slice(0, n, n + 1).contiguous().to(kGpu));
    const GatedDeltaInputGrads g = chunk_gated_delta_rule_backward(
        steps(dout, cu[n], cu[n + 1]).to(kGpu),
        dfinal.slice(0, n, n + 1).contiguous().to(kGpu), alone, 32);
    auto part = [&](const Tensor& x) { return steps(x.to_host(), cu[n], cu[n + 1]); };
    EXPECT_TRUE(bit_equal(part(one.dquery), g.dquery.to_host()));
    EXPECT_TRUE(bit_equal(part(one.dkey), g.dkey.to_host()));
    EXPECT_TRUE(bit_equal(part(one.dvalue), g.dvalue.to_host()));
    EXPECT_TRUE(bit_equal(part(one.dbeta), g.dbeta.to_host()));
    EXPECT_TRUE(bit_equal(part(one.dlog_decay), g.dlog_decay.to_host()));
    EXPECT_TRUE(bit_equal(one.dinitial_state.to_host().slice(0, n, n + 1).contiguous(),
                          g.dinitial_state.to_host()));
  }
  const GatedDeltaInputGrads into{poisoned({1, H, T, K}, DType::bf16, kGpu),
                                  poisoned({1, H, T, K}, DType::bf16, kGpu),
                                  poisoned({1, H, T, V}, DType::bf16, kGpu),
                                  poisoned({1, H, T}, DType::bf16, kGpu),
                                  poisoned({1, H, T}, DType::f32, kGpu),
                                  poisoned({N, H, K, V}, DType::f32, kGpu)};
  chunk_gated_delta_rule_backward_into(into, dout.to(kGpu), dfinal.to(kGpu), dev, 32, cu_t);
  expect_grads_bit_equal(into, one);
}

}  // namespace
}  // namespace rudnn::test
