// The CUDA kernels against the float64 CPU reference: max, average, adaptive and LP pooling,
// 1-D/2-D/3-D, padding, stride, dilation, ceil_mode, count_include_pad, divisor_override,
// NCHW and channels-last, the strip kernels' shapes (and the misaligned and odd-sized ones
// they leave to the general kernel), each float dtype, fresh random inputs (the seed is
// printed on failure), outputs poisoned before the op, inputs checked unchanged. Skipped
// without a GPU.
#include <cmath>
#include <limits>
#include <sstream>
#include <string>

#include "layouts.h"
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
// x on the GPU in NCHW order or channels-last.
Tensor on_gpu(const Tensor& x, bool cl) { return cl ? channels_last(x.to(kGpu)) : x.to(kGpu); }
Tensor poisoned_in(const Shape& shape, DType dt, bool cl) {
  return cl ? channels_last(poisoned(shape, dt, kGpu)) : poisoned(shape, dt, kGpu);
}

std::string options_str(const PoolOptions& o) {
  std::ostringstream s;
  auto list = [&](const char* name, const std::vector<int64_t>& v) {
    s << " " << name << " [";
    for (int64_t e : v) s << e << ",";
    s << "]";
  };
  list("kernel", o.kernel);
  list("stride", o.stride);
  list("padding", o.padding);
  list("dilation", o.dilation);
  s << " ceil_mode " << o.ceil_mode;
  return s.str();
}

void check_max(Rng& rng, DType dt, const Shape& shape, const PoolOptions& o, bool cl = false) {
  SCOPED_TRACE(::testing::Message() << "max " << dtype_name(dt) << " input " << shape_str(shape)
                                    << options_str(o) << (cl ? " channels-last" : " NCHW"));
  const Tensor x = random_tensor(rng, shape, dt);
  const MaxPoolResult expected = max_pool(x, o);
  const Tensor dout = random_tensor(rng, expected.out.shape(), dt);
  const Tensor expected_dx = max_pool_backward(dout, expected.indices, x, o);

  const Tensor d_x = on_gpu(x, cl), d_dout = on_gpu(dout, cl), d_idx = on_gpu(expected.indices, cl);
  const Tensor out = poisoned_in(expected.out.shape(), dt, cl);
  const Tensor idx = poisoned_in(expected.out.shape(), DType::i64, cl);
  max_pool_into(out, idx, d_x, o);
  EXPECT_TRUE(bit_equal(out.to_host(), expected.out));
  EXPECT_TRUE(bit_equal(idx.to_host(), expected.indices));
  const Tensor dx = poisoned_in(shape, dt, cl);
  max_pool_backward_into(dx, d_dout, d_idx, d_x, o);
  EXPECT_TRUE(all_close(dx.to_host(), expected_dx));
  EXPECT_TRUE(bit_equal(d_x.to_host(), x));
  EXPECT_TRUE(bit_equal(d_dout.to_host(), dout));
  EXPECT_TRUE(bit_equal(d_idx.to_host(), expected.indices));
}

void check_avg(Rng& rng, DType dt, const Shape& shape, const PoolOptions& o, bool cl = false) {
  SCOPED_TRACE(::testing::Message()
               << "avg " << dtype_name(dt) << " input " << shape_str(shape) << options_str(o)
               << " count_include_pad " << o.count_include_pad << " divisor_override "
               << o.divisor_override << (cl ? " channels-last" : " NCHW"));
  const Tensor x = random_tensor(rng, shape, dt);
  const Tensor expected = avg_pool(x, o);
  const Tensor dout = random_tensor(rng, expected.shape(), dt);
  const Tensor expected_dx = avg_pool_backward(dout, x, o);

  const Tensor d_x = on_gpu(x, cl), d_dout = on_gpu(dout, cl);
  const Tensor out = poisoned_in(expected.shape(), dt, cl);
  avg_pool_into(out, d_x, o);
  EXPECT_TRUE(all_close(out.to_host(), expected));
  const Tensor dx = poisoned_in(shape, dt, cl);
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
  check_max(rng, DType::f32, {2, 64, 64, 64}, opts({3, 3}, {2, 2}, {1, 1}), true);
  check_avg(rng, DType::f32, {2, 64, 64, 64}, opts({2, 2}), true);
  check_max(rng, DType::bf16, {2, 8, 128, 128}, opts({3, 3}, {2, 2}, {1, 1}));
}

void check_adaptive(Rng& rng, DType dt, const Shape& shape, const std::vector<int64_t>& size,
                    bool cl) {
  ::testing::Message m;
  m << "adaptive " << dtype_name(dt) << " input " << shape_str(shape) << " output_size [";
  for (int64_t e : size) m << e << ",";
  SCOPED_TRACE(m << "]" << (cl ? " channels-last" : " NCHW"));
  const Tensor x = random_tensor(rng, shape, dt);
  const MaxPoolResult em = adaptive_max_pool(x, size);
  const Tensor ea = adaptive_avg_pool(x, size);
  const Tensor dout = random_tensor(rng, em.out.shape(), dt);
  const Tensor edm = adaptive_max_pool_backward(dout, em.indices, x, size);
  const Tensor eda = adaptive_avg_pool_backward(dout, x, size);

  const Tensor d_x = on_gpu(x, cl), d_dout = on_gpu(dout, cl), d_idx = on_gpu(em.indices, cl);
  const Tensor out = poisoned_in(em.out.shape(), dt, cl);
  const Tensor idx = poisoned_in(em.out.shape(), DType::i64, cl);
  adaptive_max_pool_into(out, idx, d_x, size);
  EXPECT_TRUE(bit_equal(out.to_host(), em.out));
  EXPECT_TRUE(bit_equal(idx.to_host(), em.indices));
  const Tensor avg = poisoned_in(em.out.shape(), dt, cl);
  adaptive_avg_pool_into(avg, d_x, size);
  EXPECT_TRUE(all_close(avg.to_host(), ea));
  const Tensor dxm = poisoned_in(shape, dt, cl), dxa = poisoned_in(shape, dt, cl);
  adaptive_max_pool_backward_into(dxm, d_dout, d_idx, d_x, size);
  EXPECT_TRUE(all_close(dxm.to_host(), edm));
  adaptive_avg_pool_backward_into(dxa, d_dout, d_x, size);
  EXPECT_TRUE(all_close(dxa.to_host(), eda));
  EXPECT_TRUE(bit_equal(d_x.to_host(), x));
  EXPECT_TRUE(bit_equal(d_dout.to_host(), dout));
  EXPECT_TRUE(bit_equal(d_idx.to_host(), em.indices));
}

// mean: positive inputs keep x^p defined for a non-integer p.
void check_lp(Rng& rng, DType dt, const Shape& shape, double p, const PoolOptions& o, bool cl,
              float mean) {
  SCOPED_TRACE(::testing::Message() << "lp p " << p << " " << dtype_name(dt) << " input "
                                    << shape_str(shape) << options_str(o)
                                    << (cl ? " channels-last" : " NCHW") << " input mean " << mean);
  const Tensor x = random_tensor(rng, shape, dt, mean);
  const Tensor expected = lp_pool(x, p, o);
  const Tensor dout = random_tensor(rng, expected.shape(), dt);
  const Tensor expected_dx = lp_pool_backward(dout, x, expected, p, o);

  const Tensor d_x = on_gpu(x, cl), d_dout = on_gpu(dout, cl), d_y = on_gpu(expected, cl);
  const Tensor out = poisoned_in(expected.shape(), dt, cl);
  lp_pool_into(out, d_x, p, o);
  EXPECT_TRUE(all_close(out.to_host(), expected));
  const Tensor dx = poisoned_in(shape, dt, cl);
  lp_pool_backward_into(dx, d_dout, d_x, d_y, p, o);
  EXPECT_TRUE(all_close(dx.to_host(), expected_dx));
  EXPECT_TRUE(bit_equal(d_x.to_host(), x));
  EXPECT_TRUE(bit_equal(d_y.to_host(), expected));
}

TEST(PoolingGpu, AdaptiveMatchesReference) {
  RUDNN_REQUIRE_CUDA();
  RUDNN_SEEDED_RNG(rng);
  for (DType dt : {DType::f32, DType::f16, DType::bf16}) {
    for (bool cl : {false, true}) {
      check_adaptive(rng, dt, {2, 3, 17}, {5}, cl);
      check_adaptive(rng, dt, {2, 3, 4}, {7}, cl);
      check_adaptive(rng, dt, {2, 5, 13, 15}, {4, 6}, cl);
      check_adaptive(rng, dt, {2, 5, 13, 15}, {1, 1}, cl);  // global pooling
      check_adaptive(rng, dt, {1, 4, 3, 5}, {5, 8}, cl);
      check_adaptive(rng, dt, {2, 2, 5, 7, 6}, {2, 3, 4}, cl);
      // Global pooling of large planes: the block-per-plane reduction (NCHW).
      check_adaptive(rng, dt, {2, 3, 40, 50}, {1, 1}, cl);
      check_adaptive(rng, dt, {3, 2, 1000}, {1}, cl);
    }
  }
}

TEST(PoolingGpu, LpMatchesReference) {
  RUDNN_REQUIRE_CUDA();
  RUDNN_SEEDED_RNG(rng);
  for (DType dt : {DType::f32, DType::f16, DType::bf16}) {
    for (bool cl : {false, true}) {
      check_lp(rng, dt, {2, 3, 17}, 2.0, opts({3}, {2}), cl, 0.0f);
      check_lp(rng, dt, {2, 3, 19}, 3.0, opts({3}, {2}, {}, {}, true), cl, 2.0f);
      check_lp(rng, dt, {2, 5, 13, 15}, 2.0, opts({3, 3}, {2, 2}, {}, {}, true), cl, 0.0f);
      check_lp(rng, dt, {2, 5, 12, 10}, 1.5, opts({2, 2}), cl, 2.0f);
      check_lp(rng, dt, {2, 4, 8, 6}, 1.0, opts({2, 3}, {1, 2}), cl, 0.0f);
      check_lp(rng, dt, {1, 2, 5, 7, 6}, 2.0, opts({2, 3, 2}, {2, 1, 2}), cl, 0.0f);
    }
  }
}

TEST(PoolingGpu, ChannelsLastMatchesReference) {
  RUDNN_REQUIRE_CUDA();
  RUDNN_SEEDED_RNG(rng);
  for (DType dt : {DType::f32, DType::f16, DType::bf16}) {
    check_max(rng, dt, {2, 3, 17}, opts({3}, {2}, {1}), true);
    check_max(rng, dt, {2, 5, 13, 15}, opts({3, 3}, {2, 2}, {1, 1}), true);
    check_max(rng, dt, {1, 4, 12, 9}, opts({2, 3}, {1, 2}, {1, 0}, {2, 1}, true), true);
    check_max(rng, dt, {2, 2, 5, 7, 6}, opts({2, 3, 2}, {2, 1, 2}, {1, 1, 0}, {1, 2, 1}), true);
    PoolOptions o = opts({3, 3}, {2, 2}, {1, 1}, {}, true);
    o.count_include_pad = false;
    check_avg(rng, dt, {2, 3, 14, 11}, o, true);
    check_avg(rng, dt, {2, 64, 16, 16}, opts({2, 2}), true);
    check_avg(rng, dt, {1, 2, 5, 7, 5}, opts({2, 3, 2}, {1, 2, 2}, {1, 1, 0}), true);
  }
}

// The channels-last pack kernel (16 bytes of channels per thread: C a multiple of 4 for F32,
// of 8 for F16/BF16) over 1-D, 2-D and 3-D windows with padding, stride, dilation, ceil_mode,
// count_include_pad and divisor_override; C = 12 (a whole number of packs for F32 only) and
// a misaligned input (the general kernel).
TEST(PoolingGpu, ChannelsLastPackKernelMatchesReference) {
  RUDNN_REQUIRE_CUDA();
  RUDNN_SEEDED_RNG(rng);
  for (DType dt : {DType::f32, DType::f16, DType::bf16}) {
    for (int64_t C : {8, 16, 12, 64}) {
      check_max(rng, dt, {2, C, 13, 15}, opts({3, 3}, {2, 2}, {1, 1}), true);
      check_max(rng, dt, {2, C, 13, 15}, opts({3, 3}, {2, 2}, {1, 1}, {}, true), true);
      check_max(rng, dt, {1, C, 12, 9}, opts({2, 3}, {1, 2}, {1, 0}, {2, 1}, true), true);
      check_max(rng, dt, {2, C, 10, 16}, opts({2, 2}), true);
      check_max(rng, dt, {2, C, 17}, opts({3}, {2}, {1}), true);
      check_max(rng, dt, {1, C, 5, 7, 6}, opts({2, 3, 2}, {2, 1, 2}, {1, 1, 0}, {1, 2, 1}), true);
      for (bool include_pad : {true, false}) {
        for (int64_t divisor : {0, 3}) {
          PoolOptions o = opts({3, 3}, {2, 2}, {1, 1}, {}, true);
          o.count_include_pad = include_pad;
          o.divisor_override = divisor;
          check_avg(rng, dt, {2, C, 14, 11}, o, true);
        }
      }
      check_avg(rng, dt, {2, C, 16, 10}, opts({2, 2}), true);
      check_avg(rng, dt, {2, C, 23}, opts({4}, {3}, {2}), true);
      check_avg(rng, dt, {1, C, 5, 7, 5}, opts({2, 3, 2}, {1, 2, 2}, {1, 1, 0}, {}, true), true);
    }
  }
  // Channels-last storage one element past a 16-byte boundary.
  const Shape shape{2, 8, 10, 12};
  const Tensor x = random_tensor(rng, shape, DType::f32);
  const Tensor buffer = Tensor::zeros({2 * 8 * 10 * 12 + 1}, DType::f32, kGpu);
  const Tensor d_x = buffer.as_strided(shape, {10 * 12 * 8, 1, 12 * 8, 8}, 1);
  d_x.copy_from(x);
  const PoolOptions mo = opts({3, 3}, {2, 2}, {1, 1});
  const MaxPoolResult expected = max_pool(x, mo);
  const MaxPoolResult got = max_pool(d_x, mo);
  EXPECT_TRUE(bit_equal(got.out.to_host(), expected.out));
  EXPECT_TRUE(bit_equal(got.indices.to_host(), expected.indices));
  EXPECT_TRUE(all_close(avg_pool(d_x, opts({2, 2})).to_host(), avg_pool(x, opts({2, 2}))));
}

// Ties and NaNs in channels-last: each channel of the pack keeps torch's index.
TEST(PoolingGpu, ChannelsLastTiesAndNansMatchReference) {
  RUDNN_REQUIRE_CUDA();
  RUDNN_SEEDED_RNG(rng);
  const Shape shape{2, 16, 11, 14};
  std::vector<double> v(2 * 16 * 11 * 14);
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  for (double& e : v) {
    const int64_t r = rng.integer(0, 9);
    e = r == 0 ? nan : r == 1 ? -inf : static_cast<double>(r % 3);
  }
  for (DType dt : {DType::f32, DType::f16, DType::bf16}) {
    SCOPED_TRACE(dtype_name(dt));
    const Tensor x = host_tensor(v, shape, dt);
    for (const PoolOptions& o : {opts({3, 3}, {2, 2}, {1, 1}), opts({2, 2}),
                                 opts({3, 3}, {1, 1}, {1, 1}, {2, 2})}) {
      SCOPED_TRACE(options_str(o));
      const MaxPoolResult expected = max_pool(x, o);
      const MaxPoolResult got = max_pool(channels_last(x.to(kGpu)), o);
      EXPECT_TRUE(bit_equal(got.indices.to_host(), expected.indices));
      EXPECT_TRUE(all_close(got.out.to_host(), expected.out));
    }
  }
}

// The strip kernels' shapes: 2-D, W a multiple of 8, Wo = W / 2, including odd H, several
// row groups, ceil_mode rows, one strip per row, divisor_override; and the shapes they leave
// to the general kernel (W not a multiple of 8, ceil_mode columns).
TEST(PoolingGpu, StripShapesMatchReference) {
  RUDNN_REQUIRE_CUDA();
  RUDNN_SEEDED_RNG(rng);
  for (DType dt : {DType::f32, DType::f16, DType::bf16}) {
    for (const Shape& shape : {Shape{2, 3, 16, 16}, Shape{1, 2, 9, 24}, Shape{2, 2, 34, 8},
                               Shape{1, 3, 1, 64}, Shape{1, 2, 21, 40}, Shape{1, 2, 16, 12}}) {
      check_max(rng, dt, shape, opts({3, 3}, {2, 2}, {1, 1}));
      check_max(rng, dt, shape, opts({3, 3}, {2, 2}, {1, 1}, {}, true));
      if (shape[2] >= 2) {
        check_max(rng, dt, shape, opts({2, 2}));
        check_max(rng, dt, shape, opts({2, 2}, {}, {}, {}, true));
        check_avg(rng, dt, shape, opts({2, 2}));
        PoolOptions o = opts({2, 2}, {}, {}, {}, true);
        o.divisor_override = 3;
        check_avg(rng, dt, shape, o);
      }
    }
  }
}

// Ties and NaNs everywhere: the strip kernels' row-then-column reduction must pick torch's
// index (the last NaN in scan order, else the first maximum).
TEST(PoolingGpu, StripTiesAndNansMatchReference) {
  RUDNN_REQUIRE_CUDA();
  RUDNN_SEEDED_RNG(rng);
  const Shape shape{2, 3, 18, 32};
  std::vector<double> v(2 * 3 * 18 * 32);
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  for (double& e : v) {
    const int64_t r = rng.integer(0, 9);
    e = r == 0 ? nan : r == 1 ? -inf : static_cast<double>(r % 3);
  }
  for (DType dt : {DType::f32, DType::f16, DType::bf16}) {
    SCOPED_TRACE(dtype_name(dt));
    const Tensor x = host_tensor(v, shape, dt);
    for (const PoolOptions& o : {opts({3, 3}, {2, 2}, {1, 1}), opts({2, 2})}) {
      SCOPED_TRACE(options_str(o));
      const MaxPoolResult expected = max_pool(x, o);
      const MaxPoolResult got = max_pool(x.to(kGpu), o);
      EXPECT_TRUE(bit_equal(got.indices.to_host(), expected.indices));
      EXPECT_TRUE(all_close(got.out.to_host(), expected.out));
    }
  }
}

// The global reduction's (value, index) tree must pick torch's index too.
TEST(PoolingGpu, GlobalTiesAndNansMatchReference) {
  RUDNN_REQUIRE_CUDA();
  RUDNN_SEEDED_RNG(rng);
  const Shape shape{2, 3, 33, 31};
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  for (int64_t nan_odds : {0, 200, 5}) {
    std::vector<double> v(2 * 3 * 33 * 31);
    for (double& e : v) {
      const int64_t r = rng.integer(0, 9);
      e = nan_odds != 0 && rng.integer(0, nan_odds) == 0 ? nan
          : r == 1                                        ? -inf
                                                          : static_cast<double>(r % 3);
    }
    for (DType dt : {DType::f32, DType::bf16}) {
      SCOPED_TRACE(::testing::Message() << dtype_name(dt) << " nan odds 1/" << nan_odds);
      const Tensor x = host_tensor(v, shape, dt);
      const MaxPoolResult expected = adaptive_max_pool(x, {1, 1});
      const MaxPoolResult got = adaptive_max_pool(x.to(kGpu), {1, 1});
      EXPECT_TRUE(bit_equal(got.indices.to_host(), expected.indices));
      EXPECT_TRUE(all_close(got.out.to_host(), expected.out));
    }
  }
  // All -inf: index 0, as torch's scan from -inf keeps its first tap.
  const Tensor all_inf = host_tensor(std::vector<double>(300, -inf), {1, 1, 300}, DType::f32);
  EXPECT_EQ(adaptive_max_pool(all_inf.to(kGpu), {1}).indices.to_host().to_vector<int64_t>(),
            (std::vector<int64_t>{0}));
}

// A contiguous input at an address not 16-byte aligned goes to the general kernel.
TEST(PoolingGpu, MisalignedInputMatchesReference) {
  RUDNN_REQUIRE_CUDA();
  RUDNN_SEEDED_RNG(rng);
  const Shape shape{2, 3, 16, 32};
  const Tensor x = random_tensor(rng, shape, DType::f32);
  const Tensor buffer = Tensor::zeros({2 * 3 * 16 * 32 + 1}, DType::f32, kGpu);
  const Tensor d_x = buffer.as_strided(shape, {3 * 16 * 32, 16 * 32, 32, 1}, 1);
  d_x.copy_from(x);
  ASSERT_TRUE(d_x.is_contiguous());
  const PoolOptions mo = opts({3, 3}, {2, 2}, {1, 1});
  const MaxPoolResult expected = max_pool(x, mo);
  const MaxPoolResult got = max_pool(d_x, mo);
  EXPECT_TRUE(bit_equal(got.out.to_host(), expected.out));
  EXPECT_TRUE(bit_equal(got.indices.to_host(), expected.indices));
  EXPECT_TRUE(all_close(avg_pool(d_x, opts({2, 2})).to_host(), avg_pool(x, opts({2, 2}))));
}

}  // namespace
}  // namespace rudnn::test
