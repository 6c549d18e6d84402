// The antialias kernels against the float64 CPU reference: bilinear and bicubic, each float
// dtype, downscaling by 1/2, 1/3 and 0.37, upscaling, odd sizes, size-1 axes, windows longer
// than the register cache (general kernel), align_corners both ways, size or scale (given
// and recomputed), channels-last inputs; fresh random inputs (seed printed on failure),
// outputs poisoned before the op, inputs unchanged, the backward gather identical bits run to
// run (deterministic = false gathers too). Skipped without a GPU.
#include <string>

#include "options.h"
#include "support/test_support.h"

namespace rudnn::test {
namespace {

using Mode = InterpolateMode;
const Device kGpu = Device::cuda(0);

std::string describe(DType dt, const Shape& in, const InterpolateOptions& o) {
  std::string s = std::string(o.mode == Mode::bicubic ? "bicubic" : "bilinear") + " antialias " +
                  dtype_name(dt) + " input " + shape_str(in) + " size";
  for (int64_t v : o.size) s += " " + std::to_string(v);
  s += " scale_factor";
  for (double v : o.scale_factor) s += " " + std::to_string(v);
  s += std::string(" recompute ") + (o.recompute_scale_factor ? "1" : "0") + " align_corners " +
       (o.align_corners ? (*o.align_corners ? "true" : "false") : "unset");
  return s;
}

// x: the host input (any strides); its device copy keeps the same strides when channels_last.
void check(Rng& rng, DType dt, const Shape& in, const InterpolateOptions& o,
           bool channels_last = false) {
  SCOPED_TRACE(describe(dt, in, o) + (channels_last ? " channels_last" : ""));
  const Tensor x = random_tensor(rng, in, dt);
  const Tensor expected = interpolate(x, o);
  const Tensor dout = random_tensor(rng, expected.shape(), dt);
  const Tensor expected_dx = interpolate_backward(dout, in, o);

  Tensor d_x = x.to(kGpu);
  if (channels_last) {
    const int64_t N = in[0], C = in[1], H = in[2], W = in[3];
    const Tensor nhwc = Tensor::zeros({N, H, W, C}, dt, kGpu);
    d_x = nhwc.as_strided(in, {H * W * C, 1, W * C, C}, 0);
    d_x.copy_from(x.to(kGpu));
    ASSERT_FALSE(d_x.is_contiguous());
  }
  const Tensor d_dout = dout.to(kGpu);
  const Tensor out = poisoned(expected.shape(), dt, kGpu);
  interpolate_into(out, d_x, o);
  EXPECT_TRUE(all_close(out.to_host(), expected));
  EXPECT_TRUE(bit_equal(interpolate(d_x, o).to_host(), out.to_host()));

  const Tensor dx = poisoned(in, dt, kGpu);
  interpolate_backward_into(dx, d_dout, in, o);
  EXPECT_TRUE(all_close(dx.to_host(), expected_dx));
  EXPECT_TRUE(bit_equal(interpolate_backward(d_dout, in, o).to_host(), dx.to_host()))
      << "the gather is not deterministic";
  InterpolateOptions fast = o;
  fast.deterministic = false;
  EXPECT_TRUE(bit_equal(interpolate_backward(d_dout, in, fast).to_host(), dx.to_host()))
      << "deterministic = false should run the same gather";
  EXPECT_TRUE(bit_equal(d_x.to_host(), x));
  EXPECT_TRUE(bit_equal(d_dout.to_host(), dout));
}

const DType kDtypes[] = {DType::f32, DType::f16, DType::bf16};

TEST(InterpolationAntialiasGpu, MatchesReference) {
  RUDNN_REQUIRE_CUDA();
  RUDNN_SEEDED_RNG(rng);
  for (DType dt : kDtypes) {
    for (Mode m : {Mode::bilinear, Mode::bicubic}) {
      for (std::optional<bool> ac : {std::optional<bool>{}, std::optional<bool>{true}}) {
        check(rng, dt, {2, 3, 32, 34}, aa_scale(m, {0.5}, false, ac));
        check(rng, dt, {2, 3, 33, 31}, aa_scale(m, {1.0 / 3.0}, false, ac));
        check(rng, dt, {1, 4, 37, 45}, aa_scale(m, {0.37}, false, ac));
        check(rng, dt, {1, 4, 37, 45}, aa_scale(m, {0.37, 0.61}, true, ac));
        check(rng, dt, {2, 2, 9, 13}, aa_scale(m, {1.7, 2.0}, false, ac));
        check(rng, dt, {1, 3, 17, 11}, aa_size(m, {6, 29}, ac));
        check(rng, dt, {1, 2, 1, 19}, aa_size(m, {4, 5}, ac));
        check(rng, dt, {1, 2, 15, 1}, aa_size(m, {1, 1}, ac));
        check(rng, dt, {1, 2, 200, 150}, aa_size(m, {3, 7}, ac));        // long windows
        check(rng, dt, {1, 2, 12, 40}, aa_size(m, {12, 9}, ac));         // one axis a copy
        check(rng, dt, {1, 2, 10, 10}, aa_scale(m, {1.05}, false, ac));  // same size: a copy
      }
      check(rng, dt, {2, 3, 20, 24}, aa_scale(m, {0.5}), true);
      check(rng, dt, {2, 5, 19, 23}, aa_scale(m, {0.37, 1.5}), true);
    }
  }
}

TEST(InterpolationAntialiasGpu, LargeValuesAndEmptyBatch) {
  RUDNN_REQUIRE_CUDA();
  RUDNN_SEEDED_RNG(rng);
  for (DType dt : kDtypes) {
    SCOPED_TRACE(::testing::Message() << "large values " << dtype_name(dt));
    const Tensor x = random_tensor(rng, {2, 3, 24, 20}, dt, 0.0f, dt == DType::f16 ? 1e4f : 1e30f);
    for (Mode m : {Mode::bilinear, Mode::bicubic}) {
      const InterpolateOptions o = aa_scale(m, {0.5});
      EXPECT_TRUE(all_close(interpolate(x.to(kGpu), o).to_host(), interpolate(x, o)));
    }
  }
  const Tensor empty = Tensor::empty({0, 3, 8, 8}, DType::f32, kGpu);
  EXPECT_EQ(interpolate(empty, aa_scale(Mode::bilinear, {0.5})).shape(), (Shape{0, 3, 4, 4}));
  EXPECT_EQ(interpolate_backward(Tensor::empty({0, 3, 4, 4}, DType::f32, kGpu), {0, 3, 8, 8},
                                 aa_scale(Mode::bicubic, {0.5}))
                .shape(),
            (Shape{0, 3, 8, 8}));
}

TEST(InterpolationAntialiasGpu, BenchShape) {
  RUDNN_REQUIRE_CUDA();
  RUDNN_SEEDED_RNG(rng);
  check(rng, DType::f32, {2, 8, 128, 128}, aa_scale(Mode::bilinear, {0.5}));
  check(rng, DType::bf16, {2, 8, 128, 128}, aa_scale(Mode::bicubic, {0.5}));
}

}  // namespace
}  // namespace rudnn::test
