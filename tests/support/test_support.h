// Shared helpers of the C++ test suites: seeded random inputs, comparisons against the
// reference with per-dtype tolerances, error matching, GPU gating.
#pragma once

#include <gtest/gtest.h>
#include <rudnn/rudnn.h>

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <random>
#include <string>
#include <vector>

namespace rudnn::test {

// A fresh seed per test (std::random_device), or RUDNN_TEST_SEED to replay one.
class Rng {
 public:
  Rng();
  uint64_t seed() const { return seed_; }
  float normal(float mean = 0.0f, float stddev = 1.0f);
  float uniform(float lo, float hi);
  int64_t integer(int64_t lo, int64_t hi);  // inclusive bounds
  std::mt19937_64& engine() { return engine_; }

 private:
  uint64_t seed_;
  std::mt19937_64 engine_;
};

// Declares `rng` and attaches its seed to every failure in the enclosing scope.
#define RUDNN_SEEDED_RNG(rng)                                       \
  ::rudnn::test::Rng rng;                                           \
  SCOPED_TRACE(::testing::Message() << "random seed " << rng.seed() \
                                    << " (replay: RUDNN_TEST_SEED=" << rng.seed() << ")")

// Skips the current test, reported as skipped, when no CUDA device is usable.
// Whether device 0 is a compute capability 9.0 part (what the sm_90a kernels need); false in
// builds without CUDA and when the query fails.
bool device_is_sm90();
// Device 0's compute capability major (0 in builds without CUDA and when the query fails).
int device_compute_major();

#define RUDNN_REQUIRE_CUDA()                                                            \
  do {                                                                                  \
    if (!::rudnn::cuda_available()) GTEST_SKIP() << "no CUDA device: GPU test skipped"; \
  } while (0)

// A GPU test of the Autotune strategies: skipped without a CUDA device or without the
// strategies in the build; otherwise it starts with an empty record and no cache file.
#define RUDNN_REQUIRE_CUDA_AUTOTUNE()                                                        \
  do {                                                                                     \
    RUDNN_REQUIRE_CUDA();                                                                  \
    if (!::rudnn::autotune_built()) GTEST_SKIP() << "built without RUDNN_AUTOTUNE: skipped"; \
    ::rudnn::autotune_set_file("");                                                        \
    ::rudnn::autotune_clear();                                                             \
  } while (0)

// Host tensor of N(mean, stddev) values, rounded to `dtype` (a floating dtype).
Tensor random_tensor(Rng& rng, const Shape& shape, DType dtype, float mean = 0.0f,
                     float stddev = 1.0f);
// Host tensor of integers uniform in [lo, hi] in an integer dtype.
Tensor random_integers(Rng& rng, const Shape& shape, DType dtype, int64_t lo, int64_t hi);
// Host tensor from doubles, rounded to `dtype`.
Tensor host_tensor(const std::vector<double>& values, const Shape& shape, DType dtype);

// Every element, in row-major order, as double (reads back device tensors).
std::vector<double> to_doubles(const Tensor& t);
// The logical bytes of a tensor (row-major), for bit-exact comparisons.
std::vector<unsigned char> bytes_of(const Tensor& t);

// Central differences (loss(x + h) - loss(x - h)) / 2h along each of the n doubles at x,
// perturbed in place one at a time and restored bit for bit. The gradient checks of every
// family's float64 reference use this, so that step and restore rules live in one place.
std::vector<double> central_differences(double* x, int64_t n, const std::function<double()>& loss,
                                        double h = 1e-6);

// Relative L2 error allowed against the reference, by result dtype.
double tolerance(DType dtype);

// got vs expected: same shape and dtype, non-finite values in the same places (NaN where
// NaN, infinities of the same sign), and ‖got − expected‖ / ‖expected‖ <= tol over the
// finite ones (absolute when ‖expected‖ = 0).
// `floor` bounds the denominator from below: for results that are a near-total cancellation
// of larger terms (a backward pass at H = 1 or 2), pass the norm of those terms.
::testing::AssertionResult all_close(const Tensor& got, const Tensor& expected, double tol,
                                     double floor = 0.0);
::testing::AssertionResult all_close(const Tensor& got,
                                     const Tensor& expected);  // tolerance(dtype)
::testing::AssertionResult bit_equal(const Tensor& a, const Tensor& b);

// fn throws rudnn::Error with `code` and a message containing every fragment.
::testing::AssertionResult throws_error(const std::function<void()>& fn, ErrorCode code,
                                        std::initializer_list<std::string> fragments);

// A tensor with every byte 0xFF (NaN in each float dtype) on `device`, ready for use on any
// stream (the upload has finished).
Tensor poisoned(const Shape& shape, DType dtype, Device device);

// Sets allocation poisoning for a scope and restores the previous setting, so that a test's
// behaviour depends neither on test order nor on RUDNN_POISON_ALLOCATIONS.
class PoisonScope {
 public:
  explicit PoisonScope(bool on) : saved_(poison_allocations()) { set_poison_allocations(on); }
  ~PoisonScope() { set_poison_allocations(saved_); }
  PoisonScope(const PoisonScope&) = delete;
  PoisonScope& operator=(const PoisonScope&) = delete;

 private:
  bool saved_;
};

}  // namespace rudnn::test
