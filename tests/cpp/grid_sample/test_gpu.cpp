// The CUDA kernels against the float64 CPU reference: every mode, padding, align_corners and
// rank, each float dtype, fresh random inputs (the seed is printed on failure), outputs
// poisoned before the op, inputs checked unchanged. Skipped without a GPU.
#include <cmath>
#include <vector>

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

// The whole-plane bilinear backward (2-D planes of up to 16384 cells with at least a quarter
// as many outputs): the bench's [128, 128] planes on a random grid (4 blocks add into each
// input plane), and a plane with a partial second block of locations; every padding.
TEST(GridSampleGpu, PlaneBackwardOnRandomGrids) {
  RUDNN_REQUIRE_CUDA();
  RUDNN_SEEDED_RNG(rng);
  for (DType dt : {DType::f32, DType::bf16}) {
    for (auto pad :
         {GridSamplePadding::zeros, GridSamplePadding::border, GridSamplePadding::reflection}) {
      const bool ac = pad == GridSamplePadding::border;
      check_case(rng, dt, {2, 3, 128, 128}, {2, 128, 128, 2},
                 options(GridSampleMode::bilinear, pad, ac));
      check_case(rng, dt, {1, 4, 100, 120}, {1, 70, 90, 2},
                 options(GridSampleMode::bilinear, pad, !ac));
    }
  }
}

// The forward and both gradients for a given (host) grid. offset_dinput: the input gradient
// is written into a view one element into its buffer (not 16-byte aligned: the plane
// backward's flush then adds cell by cell instead of 16-byte vectors).
void check_with_grid(Rng& rng, DType dt, const Shape& in_shape, const Tensor& grid,
                     const GridSampleOptions& o, bool offset_dinput, const char* what) {
  SCOPED_TRACE(::testing::Message()
               << what << ": " << dtype_name(dt) << " padding " << static_cast<int>(o.padding)
               << " align_corners " << o.align_corners << " input " << shape_str(in_shape)
               << " grid " << shape_str(grid.shape()) << " offset dinput " << offset_dinput);
  const Tensor input = random_tensor(rng, in_shape, dt);
  const Tensor expected = grid_sample(input, grid, o);
  const Tensor dout = random_tensor(rng, expected.shape(), dt);
  const GridSampleGrads expected_grads = grid_sample_backward(dout, input, grid, o);
  const Tensor d_input = input.to(kGpu), d_grid = grid.to(kGpu), d_dout = dout.to(kGpu);
  const Tensor out = poisoned(expected.shape(), dt, kGpu);
  grid_sample_into(out, d_input, d_grid, o);
  EXPECT_TRUE(all_close(out.to_host(), expected)) << "forward";
  const int64_t count = shape_numel(in_shape);
  const Tensor dinput = offset_dinput
                            ? poisoned({count + 1}, dt, kGpu).slice(0, 1, count + 1).view(in_shape)
                            : poisoned(in_shape, dt, kGpu);
  const Tensor dgrid = poisoned(grid.shape(), dt, kGpu);
  grid_sample_backward_into(dinput, dgrid, d_dout, d_input, d_grid, o);
  EXPECT_TRUE(all_close(dinput.to_host(), expected_grads.dinput)) << "dinput";
  EXPECT_TRUE(all_close(dgrid.to_host(), expected_grads.dgrid, tolerance(dt), 1e-3)) << "dgrid";
}

// An affine grid (rotation up to 0.6 rad, zoom 0.5 to 1.3, a shift) for [N, Ho, Wo].
Tensor smooth_grid(Rng& rng, int64_t N, int64_t Ho, int64_t Wo, bool ac, DType dt) {
  std::vector<double> theta(static_cast<size_t>(N) * 6);
  for (int64_t b = 0; b < N; ++b) {
    const double angle = rng.uniform(-0.6f, 0.6f), zoom = rng.uniform(0.5f, 1.3f);
    const double t[6] = {zoom * std::cos(angle),   -zoom * std::sin(angle),
                         rng.uniform(-0.3f, 0.3f), zoom * std::sin(angle),
                         zoom * std::cos(angle),   rng.uniform(-0.3f, 0.3f)};
    for (int j = 0; j < 6; ++j) theta[b * 6 + j] = t[j];
  }
  return host_tensor(
      to_doubles(affine_grid(host_tensor(theta, {N, 2, 3}, DType::f64), {N, 1, Ho, Wo}, ac)),
      {N, Ho, Wo, 2}, dt);
}

Tensor uniform_grid(Rng& rng, const Shape& shape, DType dt) {
  std::vector<double> g(static_cast<size_t>(shape_numel(shape)));
  for (double& v : g) v = rng.uniform(-1.2f, 1.2f);
  return host_tensor(g, shape, dt);
}

// The whole-plane kernels stage only the rows a block's taps read (a band of the plane for an
// affine grid, the whole plane for a random one) and the backward flushes the input gradient
// of those rows with 16-byte atomics where the plane is a whole number of vectors and the
// gradient 16-byte aligned, else cell by cell: smooth grids forward and backward (bands of
// rows, some blocks whose taps all fall outside), planes of 99 x 101 cells (odd: cell by
// cell), an input gradient one element into its buffer, every padding.
TEST(GridSampleGpu, PlaneKernelsOnSmoothGridsAndFlushForms) {
  RUDNN_REQUIRE_CUDA();
  RUDNN_SEEDED_RNG(rng);
  for (DType dt : {DType::f32, DType::bf16}) {
    for (auto pad :
         {GridSamplePadding::zeros, GridSamplePadding::border, GridSamplePadding::reflection}) {
      for (bool ac : {false, true}) {
        const auto o = options(GridSampleMode::bilinear, pad, ac);
        check_with_grid(rng, dt, {2, 3, 128, 128}, smooth_grid(rng, 2, 128, 128, ac, dt), o, false,
                        "smooth, [128, 128] planes");
        check_with_grid(rng, dt, {1, 4, 100, 120}, smooth_grid(rng, 1, 70, 90, ac, dt), o, false,
                        "smooth, partial block of locations");
        check_with_grid(rng, dt, {1, 3, 99, 101}, uniform_grid(rng, {1, 60, 80, 2}, dt), o, false,
                        "random, odd plane");
        check_with_grid(rng, dt, {1, 3, 99, 101}, smooth_grid(rng, 1, 60, 80, ac, dt), o, false,
                        "smooth, odd plane");
        check_with_grid(rng, dt, {1, 2, 64, 64}, uniform_grid(rng, {1, 64, 64, 2}, dt), o, true,
                        "random, offset input gradient");
      }
    }
  }
  // A grid that shifts the whole image out of the input for one batch entry (no block of it
  // reads a row) and zooms out for the other.
  const auto zeros = options(GridSampleMode::bilinear, GridSamplePadding::zeros, false);
  std::vector<double> theta = {1.0, 0.0, 3.0, 0.0, 1.0, 0.0, 0.4, 0.0, 0.0, 0.0, 0.4, 0.0};
  const Tensor grid = host_tensor(
      to_doubles(affine_grid(host_tensor(theta, {2, 2, 3}, DType::f64), {2, 1, 64, 64}, false)),
      {2, 64, 64, 2}, DType::f32);
  check_with_grid(rng, DType::f32, {2, 5, 64, 64}, grid, zeros, false, "outside and zoomed out");
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

// The capture test's wide case (W = 40000) and the bench's rotated grid: an FP32 source
// coordinate is 2^-8 pixels coarse near 32768, and one an ulp below an integer floors to the
// other pixel, where the grid gradient jumps. These put the forward 1.3e-3 and the grid
// gradient 6e-2 off the float64 reference (H200, before the coordinates went FP64); the GPU
// must now match at the dtype's own tolerance, grid gradient included.
TEST(GridSampleGpu, WideInputsAndGridGradientFloors) {
  RUDNN_REQUIRE_CUDA();
  RUDNN_SEEDED_RNG(rng);
  for (DType dt : {DType::f32, DType::f16}) {
    for (auto pad : {GridSamplePadding::border, GridSamplePadding::zeros}) {
      for (int64_t w : {int64_t{8192}, int64_t{40000}}) {
        const auto o = options(GridSampleMode::bilinear, pad, false);
        SCOPED_TRACE(::testing::Message()
                     << dtype_name(dt) << " W " << w << " padding " << static_cast<int>(pad));
        const Tensor input = random_tensor(rng, {2, 3, 1, w}, dt);
        const Tensor grid = random_tensor(rng, {2, 1, w / 2, 2}, dt, 0.0f, 0.7f);
        const Tensor expected = grid_sample(input, grid, o);
        const Tensor dout = random_tensor(rng, expected.shape(), dt);
        const GridSampleGrads grads = grid_sample_backward(dout, input, grid, o);
        const Tensor d_input = input.to(kGpu), d_grid = grid.to(kGpu), d_dout = dout.to(kGpu);
        EXPECT_TRUE(all_close(grid_sample(d_input, d_grid, o).to_host(), expected)) << "forward";
        const GridSampleGrads got = grid_sample_backward(d_dout, d_input, d_grid, o);
        EXPECT_TRUE(all_close(got.dinput.to_host(), grads.dinput)) << "dinput";
        EXPECT_TRUE(all_close(got.dgrid.to_host(), grads.dgrid)) << "dgrid";
      }
    }
  }
  // The bench's access pattern: [32, 8, 128, 128] sampled on affine_grid's mildly rotated and
  // zoomed grids (the bench's thetas), where a few locations fall within an FP32 ulp of a
  // pixel boundary.
  const int64_t N = 32, S = 128;
  std::vector<double> theta(static_cast<size_t>(N) * 6);
  for (int64_t b = 0; b < N; ++b) {
    const double angle = 0.3 * std::sin(0.7 * static_cast<double>(b)), zoom = 0.9;
    const double t[6] = {zoom * std::cos(angle), -zoom * std::sin(angle), 0.05,
                         zoom * std::sin(angle), zoom * std::cos(angle),  -0.05};
    for (int k = 0; k < 6; ++k) theta[b * 6 + k] = static_cast<float>(t[k]);
  }
  const Tensor grid = affine_grid(host_tensor(theta, {N, 2, 3}, DType::f32), {N, 8, S, S}, false);
  const Tensor input = random_tensor(rng, {N, 8, S, S}, DType::f32);
  const Tensor dout = random_tensor(rng, {N, 8, S, S}, DType::f32);
  const GridSampleOptions o;
  const GridSampleGrads grads = grid_sample_backward(dout, input, grid, o);
  const GridSampleGrads got = grid_sample_backward(dout.to(kGpu), input.to(kGpu), grid.to(kGpu), o);
  EXPECT_TRUE(all_close(got.dgrid.to_host(), grads.dgrid)) << "rotated grids: dgrid";
  EXPECT_TRUE(all_close(got.dinput.to_host(), grads.dinput)) << "rotated grids: dinput";
}

// options.deterministic: the gathered input gradient matches the reference in every mode,
// padding and rank, and two runs give identical bits (also with many samples per cell: a
// grid squeezed into a corner, and grids of NaN and far-outside coordinates).
TEST(GridSampleGpu, DeterministicInputGradient) {
  RUDNN_REQUIRE_CUDA();
  RUDNN_SEEDED_RNG(rng);
  auto run = [&](const Tensor& dout, const Tensor& input, const Tensor& grid,
                 const GridSampleOptions& o) {
    const Tensor dinput = poisoned(input.shape(), input.dtype(), kGpu);
    const Tensor dgrid = poisoned(grid.shape(), grid.dtype(), kGpu);
    grid_sample_backward_into(dinput, dgrid, dout, input, grid, o);
    return GridSampleGrads{dinput.to_host(), dgrid.to_host()};
  };
  for (DType dt : {DType::f32, DType::f16, DType::bf16}) {
    for (auto mode : {GridSampleMode::bilinear, GridSampleMode::nearest, GridSampleMode::bicubic}) {
      for (auto pad :
           {GridSamplePadding::zeros, GridSamplePadding::border, GridSamplePadding::reflection}) {
        for (int dims : {2, 3}) {
          if (dims == 3 && mode == GridSampleMode::bicubic) continue;
          for (float squeeze : {1.2f, 0.05f}) {
            GridSampleOptions o = options(mode, pad, squeeze < 1.0f);
            o.deterministic = true;
            SCOPED_TRACE(::testing::Message()
                         << dtype_name(dt) << " mode " << static_cast<int>(mode) << " padding "
                         << static_cast<int>(pad) << " dims " << dims << " grid spread "
                         << squeeze);
            const Shape in_shape = dims == 2 ? Shape{3, 10, 9, 11} : Shape{2, 9, 4, 5, 6};
            const Shape grid_shape = dims == 2 ? Shape{3, 13, 17, 2} : Shape{2, 5, 6, 7, 3};
            const Tensor input = random_tensor(rng, in_shape, dt);
            std::vector<double> g(static_cast<size_t>(shape_numel(grid_shape)));
            for (double& v : g) v = rng.uniform(-squeeze, squeeze) - (squeeze < 1.0f ? 0.9 : 0.0);
            if (squeeze > 1.0f) {
              g[0] = NAN;
              g[3] = 1e30;
            }
            const Tensor grid = host_tensor(g, grid_shape, dt);
            const Tensor dout = random_tensor(rng, grid_sample(input, grid, o).shape(), dt);
            const GridSampleGrads expected = grid_sample_backward(dout, input, grid, o);
            const Tensor d_input = input.to(kGpu), d_grid = grid.to(kGpu), d_dout = dout.to(kGpu);
            const GridSampleGrads first = run(d_dout, d_input, d_grid, o);
            const GridSampleGrads second = run(d_dout, d_input, d_grid, o);
            EXPECT_TRUE(all_close(first.dinput, expected.dinput));
            EXPECT_TRUE(all_close(first.dgrid, expected.dgrid, tolerance(dt), 1e-3));
            EXPECT_TRUE(bit_equal(first.dinput, second.dinput));
            EXPECT_TRUE(bit_equal(first.dgrid, second.dgrid));
          }
        }
      }
    }
  }
  // Only the input gradient asked for, and a batch of zero grid locations (dinput all 0).
  GridSampleOptions o;
  o.deterministic = true;
  const Tensor input = random_tensor(rng, {2, 3, 5, 6}, DType::f32).to(kGpu);
  const Tensor dinput = poisoned({2, 3, 5, 6}, DType::f32, kGpu);
  grid_sample_backward_into(dinput, Tensor{}, Tensor::zeros({2, 3, 0, 4}, DType::f32, kGpu), input,
                            Tensor::zeros({2, 0, 4, 2}, DType::f32, kGpu), o);
  for (double v : to_doubles(dinput)) ASSERT_EQ(v, 0.0);
}

// The 2-D forward paths for bilinear and nearest: whole planes in shared memory (planes of up
// to 16384 cells with at least a quarter as many outputs, at most 4096 counted: the last three
// cases, one with a partial block of 4096 locations, one the bench's [128, 128] planes), else
// tiles (outputs at least 8 wide: a block stages the box its
// tile's taps fall in, 8 channels at a time, or gathers directly when the box is over 512
// cells; the first four cases). Smooth grids (rotations and zooms from affine_grid, zoom up to 1.6
// so that some tiles' boxes pass the cap and others do not), partial tiles and channel groups, a
// grid whose left half is random (staged and direct tiles in one launch), tiles entirely outside
// the input, and NaN and huge coordinates inside a smooth grid.
TEST(GridSampleGpu, PlaneAndTiledForwardOnSmoothAndMixedGrids) {
  RUDNN_REQUIRE_CUDA();
  RUDNN_SEEDED_RNG(rng);
  struct Case {
    Shape in, out;  // [N, C, H, W], [Ho, Wo]
  };
  const std::vector<Case> cases = {{{2, 9, 40, 48}, {16, 16}}, {{3, 16, 64, 64}, {37, 21}},
                                   {{1, 1, 30, 20}, {9, 8}},   {{2, 8, 100, 90}, {50, 70}},
                                   {{2, 9, 64, 64}, {64, 64}}, {{1, 3, 128, 128}, {100, 90}},
                                   {{2, 3, 128, 128}, {128, 128}}};
  for (DType dt : {DType::f32, DType::f16, DType::bf16}) {
    for (const Case& k : cases) {
      for (auto mode : {GridSampleMode::bilinear, GridSampleMode::nearest}) {
        for (auto pad :
             {GridSamplePadding::zeros, GridSamplePadding::border, GridSamplePadding::reflection}) {
          for (int variant = 0; variant < 3; ++variant) {
            const bool ac = variant == 1;
            const auto o = options(mode, pad, ac);
            const int64_t N = k.in[0], Ho = k.out[0], Wo = k.out[1];
            std::vector<double> theta(static_cast<size_t>(N) * 6);
            for (int64_t b = 0; b < N; ++b) {
              const double angle = rng.uniform(-0.6f, 0.6f), zoom = rng.uniform(0.3f, 1.6f);
              const double t[6] = {zoom * std::cos(angle),   -zoom * std::sin(angle),
                                   rng.uniform(-0.3f, 0.3f), zoom * std::sin(angle),
                                   zoom * std::cos(angle),   rng.uniform(-0.3f, 0.3f)};
              for (int j = 0; j < 6; ++j) theta[b * 6 + j] = t[j];
            }
            std::vector<double> g = to_doubles(
                affine_grid(host_tensor(theta, {N, 2, 3}, DType::f64), {N, 1, Ho, Wo}, ac));
            if (variant == 2) {
              // Left half random, a far-outside band, NaN and a huge coordinate.
              for (int64_t b = 0; b < N; ++b) {
                for (int64_t y = 0; y < Ho; ++y) {
                  for (int64_t x = 0; x < Wo; ++x) {
                    double* at = g.data() + ((b * Ho + y) * Wo + x) * 2;
                    if (x < Wo / 2) {
                      at[0] = rng.uniform(-1.1f, 1.1f);
                      at[1] = rng.uniform(-1.1f, 1.1f);
                    } else if (y < 3) {
                      at[0] += 5.0;
                    }
                  }
                }
                g[(b * Ho * Wo + Wo - 1) * 2] = NAN;
                g[(b * Ho * Wo + (Ho - 1) * Wo + Wo - 1) * 2 + 1] = 1e30;
              }
            }
            SCOPED_TRACE(::testing::Message()
                         << dtype_name(dt) << " input " << shape_str(k.in) << " out " << Ho << "x"
                         << Wo << " mode " << static_cast<int>(mode) << " padding "
                         << static_cast<int>(pad) << " variant " << variant);
            const Tensor input = random_tensor(rng, k.in, dt);
            const Tensor grid = host_tensor(g, {N, Ho, Wo, 2}, dt);
            const Tensor expected = grid_sample(input, grid, o);
            const Tensor d_input = input.to(kGpu), d_grid = grid.to(kGpu);
            const Tensor out = poisoned(expected.shape(), dt, kGpu);
            grid_sample_into(out, d_input, d_grid, o);
            EXPECT_TRUE(all_close(out.to_host(), expected));
            EXPECT_TRUE(bit_equal(d_input.to_host(), input));
          }
        }
      }
    }
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
