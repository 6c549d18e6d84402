// The CUDA kernels against the float64 CPU reference: every mode, padding, align_corners and
// rank, each float dtype, fresh random inputs (the seed is printed on failure), outputs
// poisoned before the op, inputs checked unchanged. Skipped without a GPU.
#include <cmath>

#include "support/test_support.h"

namespace rudnn::test {
namespace {

const Device kGpu = Device::cuda(0);

GridSampleOptions options(GridSampleMode mode, GridSamplePadding padding, bool align_corners) {
  GridSampleOptions o;
  o.mode = mode;
  o.padding = padding;
  o.align_corners = align_corners;
  return o;
}

// Atomically summed and rounded once: the input gradient of the 16-bit types is compared
// at the dtype's tolerance like every other result.
void check_case(Rng& rng, DType dt, const Shape& in_shape, const Shape& grid_shape,
                const GridSampleOptions& o) {
  SCOPED_TRACE(::testing::Message()
               << dtype_name(dt) << " mode " << static_cast<int>(o.mode) << " padding "
               << static_cast<int>(o.padding) << " align_corners " << o.align_corners << " input "
               << shape_str(in_shape) << " grid " << shape_str(grid_shape));
  const Tensor input = random_tensor(rng, in_shape, dt);
  std::vector<double> g(static_cast<size_t>(shape_numel(grid_shape)));
  for (double& v : g) v = rng.uniform(-1.2f, 1.2f);
  const Tensor grid = host_tensor(g, grid_shape, dt);
  const Tensor expected = grid_sample(input, grid, o);
  const Tensor dout = random_tensor(rng, expected.shape(), dt);
  const GridSampleGrads expected_grads = grid_sample_backward(dout, input, grid, o);

  const Tensor d_input = input.to(kGpu), d_grid = grid.to(kGpu), d_dout = dout.to(kGpu);
  const Tensor out = poisoned(expected.shape(), dt, kGpu);
  grid_sample_into(out, d_input, d_grid, o);
  EXPECT_TRUE(all_close(out.to_host(), expected));
  const Tensor dinput = poisoned(input.shape(), dt, kGpu);
  const Tensor dgrid = poisoned(grid.shape(), dt, kGpu);
  grid_sample_backward_into(dinput, dgrid, d_dout, d_input, d_grid, o);
  EXPECT_TRUE(all_close(dinput.to_host(), expected_grads.dinput));
  // The grid gradient sums C products of input and dout: its floor is their scale.
  EXPECT_TRUE(all_close(dgrid.to_host(), expected_grads.dgrid, tolerance(dt), 1e-3));
  EXPECT_TRUE(bit_equal(d_input.to_host(), input));
  EXPECT_TRUE(bit_equal(d_grid.to_host(), grid));
  EXPECT_TRUE(bit_equal(d_dout.to_host(), dout));
}

TEST(GridSampleGpu, MatchesReference) {
  RUDNN_REQUIRE_CUDA();
  RUDNN_SEEDED_RNG(rng);
  for (DType dt : {DType::f32, DType::f16, DType::bf16}) {
    for (auto pad :
         {GridSamplePadding::zeros, GridSamplePadding::border, GridSamplePadding::reflection}) {
      for (bool ac : {false, true}) {
        for (auto mode :
             {GridSampleMode::bilinear, GridSampleMode::nearest, GridSampleMode::bicubic}) {
          check_case(rng, dt, {2, 5, 7, 9}, {2, 6, 11, 2}, options(mode, pad, ac));
        }
        for (auto mode : {GridSampleMode::bilinear, GridSampleMode::nearest}) {
          check_case(rng, dt, {2, 3, 4, 5, 6}, {2, 3, 4, 7, 3}, options(mode, pad, ac));
        }
      }
    }
  }
}

TEST(GridSampleGpu, OneBigAndOddSizes) {
  RUDNN_REQUIRE_CUDA();
  RUDNN_SEEDED_RNG(rng);
  const auto o = options(GridSampleMode::bilinear, GridSamplePadding::zeros, false);
  check_case(rng, DType::f32, {3, 17, 33, 65}, {3, 31, 63, 2}, o);
  check_case(rng, DType::f32, {1, 1, 1, 1}, {1, 3, 2, 2}, o);
  check_case(rng, DType::bf16, {1, 2, 1, 1, 1}, {1, 2, 2, 2, 3}, o);
}

// Taps outside the input are skipped, not weighted by zero: an infinity in the input must
// not reach outputs that sample only outside it.
TEST(GridSampleGpu, OutsideTapsReadNothing) {
  RUDNN_REQUIRE_CUDA();
  const Tensor input = host_tensor({INFINITY, 1, 2, 3}, {1, 1, 2, 2}, DType::f32);
  const Tensor grid = host_tensor({-3, -3, 5, 0, 0, 7}, {1, 1, 3, 2}, DType::f32);
  for (auto mode : {GridSampleMode::bilinear, GridSampleMode::nearest, GridSampleMode::bicubic}) {
    const auto o = options(mode, GridSamplePadding::zeros, false);
    const Tensor d_input = input.to(kGpu), d_grid = grid.to(kGpu);
    EXPECT_EQ(to_doubles(grid_sample(d_input, d_grid, o)), (std::vector<double>{0, 0, 0}));
    const Tensor dout = host_tensor({1, 1, 1}, {1, 1, 1, 3}, DType::f32).to(kGpu);
    EXPECT_EQ(to_doubles(grid_sample_backward(dout, d_input, d_grid, o).dgrid),
              (std::vector<double>(6, 0.0)));
  }
}

TEST(GridSampleGpu, AffineGridMatchesReference) {
  RUDNN_REQUIRE_CUDA();
  RUDNN_SEEDED_RNG(rng);
  for (DType dt : {DType::f32, DType::f16, DType::bf16}) {
    for (bool ac : {false, true}) {
      for (const Shape& size : {Shape{3, 1, 5, 7}, Shape{2, 1, 3, 4, 6}, Shape{2, 1, 300, 301}}) {
        SCOPED_TRACE(::testing::Message() << dtype_name(dt) << " " << shape_str(size) << " " << ac);
        const int64_t dims = static_cast<int64_t>(size.size()) - 2;
        const Tensor theta = random_tensor(rng, {size[0], dims, dims + 1}, dt);
        const Tensor expected = affine_grid(theta, size, ac);
        const Tensor out = poisoned(expected.shape(), dt, kGpu);
        affine_grid_into(out, theta.to(kGpu), size, ac);
        EXPECT_TRUE(all_close(out.to_host(), expected));
        const Tensor dgrid = random_tensor(rng, expected.shape(), dt);
        const Tensor dtheta = poisoned(theta.shape(), dt, kGpu);
        affine_grid_backward_into(dtheta, dgrid.to(kGpu), size, ac);
        EXPECT_TRUE(all_close(dtheta.to_host(), affine_grid_backward(dgrid, size, ac)));
      }
    }
  }
}

}  // namespace
}  // namespace rudnn::test
