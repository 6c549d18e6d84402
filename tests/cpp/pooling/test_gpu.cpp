// The CUDA kernels against the float64 CPU reference: max and average, 1-D/2-D/3-D, padding,
// stride, dilation, ceil_mode, count_include_pad, divisor_override, each float dtype, fresh
// random inputs (the seed is printed on failure), outputs poisoned before the op, inputs
// checked unchanged. Skipped without a GPU.
#include <cmath>
#include <limits>

#include "support/test_support.h"

namespace rudnn::test {
namespace {

const Device kGpu = Device::cuda(0);

PoolOptions opts(std::vector<int64_t> kernel, std::vector<int64_t> stride = {},
                 std::vector<int64_t> padding = {}, std::vector<int64_t> dilation = {},
                 bool ceil_mode = false) {
  PoolOptions o;
  o.kernel = std::move(kernel);
  o.stride = std::move(stride);
  o.padding = std::move(padding);
  o.dilation = std::move(dilation);
  o.ceil_mode = ceil_mode;
  return o;
}

// Max: values and indices exact (a max of stored values needs no rounding); backward sums
// at most a few dout entries in FP32, compared at the dtype's tolerance.
void check_max(Rng& rng, DType dt, const Shape& shape, const PoolOptions& o) {
  SCOPED_TRACE(::testing::Message() << "max " << dtype_name(dt) << " input " << shape_str(shape));
  const Tensor x = random_tensor(rng, shape, dt);
  const MaxPoolResult expected = max_pool(x, o);
  const Tensor dout = random_tensor(rng, expected.out.shape(), dt);
  const Tensor expected_dx = max_pool_backward(dout, expected.indices, x, o);

  const Tensor d_x = x.to(kGpu), d_dout = dout.to(kGpu), d_idx = expected.indices.to(kGpu);
  const Tensor out = poisoned(expected.out.shape(), dt, kGpu);
  const Tensor idx = poisoned(expected.out.shape(), DType::i64, kGpu);
  max_pool_into(out, idx, d_x, o);
  EXPECT_TRUE(bit_equal(out.to_host(), expected.out));
  EXPECT_TRUE(bit_equal(idx.to_host(), expected.indices));
  const Tensor dx = poisoned(shape, dt, kGpu);
  max_pool_backward_into(dx, d_dout, d_idx, d_x, o);
  EXPECT_TRUE(all_close(dx.to_host(), expected_dx));
  EXPECT_TRUE(bit_equal(d_x.to_host(), x));
  EXPECT_TRUE(bit_equal(d_dout.to_host(), dout));
  EXPECT_TRUE(bit_equal(d_idx.to_host(), expected.indices));
}

void check_avg(Rng& rng, DType dt, const Shape& shape, const PoolOptions& o) {
  SCOPED_TRACE(::testing::Message()
               << "avg " << dtype_name(dt) << " input " << shape_str(shape) << " count_include_pad "
               << o.count_include_pad << " divisor_override " << o.divisor_override);
  const Tensor x = random_tensor(rng, shape, dt);
  const Tensor expected = avg_pool(x, o);
  const Tensor dout = random_tensor(rng, expected.shape(), dt);
  const Tensor expected_dx = avg_pool_backward(dout, x, o);

  const Tensor d_x = x.to(kGpu), d_dout = dout.to(kGpu);
  const Tensor out = poisoned(expected.shape(), dt, kGpu);
  avg_pool_into(out, d_x, o);
  EXPECT_TRUE(all_close(out.to_host(), expected));
  const Tensor dx = poisoned(shape, dt, kGpu);
  avg_pool_backward_into(dx, d_dout, d_x, o);
  EXPECT_TRUE(all_close(dx.to_host(), expected_dx));
  EXPECT_TRUE(bit_equal(d_x.to_host(), x));
  EXPECT_TRUE(bit_equal(d_dout.to_host(), dout));
}

TEST(PoolingGpu, MaxMatchesReference) {
  RUDNN_REQUIRE_CUDA();
  RUDNN_SEEDED_RNG(rng);
  for (DType dt : {DType::f32, DType::f16, DType::bf16}) {
    check_max(rng, dt, {2, 3, 17}, opts({3}, {2}, {1}));
    check_max(rng, dt, {2, 3, 19}, opts({3}, {2}, {1}, {2}, true));
    check_max(rng, dt, {2, 5, 13, 15}, opts({3, 3}, {2, 2}, {1, 1}));
    check_max(rng, dt, {1, 4, 12, 9}, opts({2, 3}, {1, 2}, {1, 0}, {2, 1}, true));
    check_max(rng, dt, {2, 2, 5, 7, 6}, opts({2, 3, 2}, {2, 1, 2}, {1, 1, 0}, {1, 2, 1}));
  }
}

TEST(PoolingGpu, AvgMatchesReference) {
  RUDNN_SEEDED_RNG(rng);
  RUDNN_REQUIRE_CUDA();
  for (DType dt : {DType::f32, DType::f16, DType::bf16}) {
    for (bool include_pad : {true, false}) {
      for (int64_t divisor : {0, 3}) {
        PoolOptions o = opts({3, 3}, {2, 2}, {1, 1}, {}, true);
        o.count_include_pad = include_pad;
        o.divisor_override = divisor;
        check_avg(rng, dt, {2, 3, 14, 11}, o);
        PoolOptions o1 = opts({4}, {3}, {2});
        o1.count_include_pad = include_pad;
        o1.divisor_override = divisor;
        check_avg(rng, dt, {2, 3, 23}, o1);
        PoolOptions o3 = opts({2, 3, 2}, {1, 2, 2}, {1, 1, 0}, {}, true);
        o3.count_include_pad = include_pad;
        o3.divisor_override = divisor;
        check_avg(rng, dt, {1, 2, 5, 7, 5}, o3);
      }
    }
    check_avg(rng, dt, {2, 4, 16, 16}, opts({2, 2}));
  }
}

TEST(PoolingGpu, NanWinsLikeTheReference) {
  RUDNN_REQUIRE_CUDA();
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const Tensor x = host_tensor({1, nan, 3, nan, 2, nan, -1, -2, -3}, {1, 1, 9}, DType::f32);
  const PoolOptions o = opts({3});
  const MaxPoolResult expected = max_pool(x, o);
  const MaxPoolResult got = max_pool(x.to(kGpu), o);
  EXPECT_TRUE(bit_equal(got.indices.to_host(), expected.indices));
  EXPECT_TRUE(all_close(got.out.to_host(), expected.out));
}

TEST(PoolingGpu, BenchShapes) {
  RUDNN_REQUIRE_CUDA();
  RUDNN_SEEDED_RNG(rng);
  check_max(rng, DType::f32, {2, 8, 128, 128}, opts({3, 3}, {2, 2}, {1, 1}));
  check_avg(rng, DType::f32, {2, 8, 128, 128}, opts({2, 2}));
}

}  // namespace
}  // namespace rudnn::test
