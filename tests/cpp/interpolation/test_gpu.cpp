// The CUDA kernels against the float64 CPU reference: every mode, 1-D/2-D/3-D, each float
// dtype, odd sizes, up- and down-sampling, non-integer scales (given and recomputed),
// align_corners both ways; fresh random inputs (the seed is printed on failure), outputs
// poisoned before the op, inputs checked unchanged. The nearest modes must match bit for bit
// (a copy of the chosen pixel); the others at the dtype's tolerance. The backward gather is
// checked for identical bits run to run, the atomic scatter (F32) against the reference.
// Skipped without a GPU.
#include <string>

#include "options.h"
#include "support/test_support.h"

namespace rudnn::test {
namespace {

using Mode = InterpolateMode;
const Device kGpu = Device::cuda(0);

const char* mode_str(Mode m) {
  switch (m) {
    case Mode::nearest:
      return "nearest";
    case Mode::nearest_exact:
      return "nearest_exact";
    case Mode::linear:
      return "linear";
    case Mode::bilinear:
      return "bilinear";
    case Mode::trilinear:
      return "trilinear";
    case Mode::bicubic:
      return "bicubic";
    case Mode::area:
      return "area";
  }
  return "?";
}

template <class V>
std::string list_str(const std::vector<V>& v) {
  std::string s = "{";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "}";
}

std::string describe(DType dt, const Shape& in, const InterpolateOptions& o) {
  std::string s = std::string(mode_str(o.mode)) + " " + dtype_name(dt) + " input " +
                  shape_str(in) + " size " + list_str(o.size) + " scale_factor " +
                  list_str(o.scale_factor) + " recompute " +
                  (o.recompute_scale_factor ? "true" : "false") + " align_corners " +
                  (o.align_corners ? (*o.align_corners ? "true" : "false") : "unset") +
                  " deterministic " + (o.deterministic ? "true" : "false");
  return s;
}

bool is_nearest(Mode m) { return m == Mode::nearest || m == Mode::nearest_exact; }

void check(Rng& rng, DType dt, const Shape& in, const InterpolateOptions& o) {
  SCOPED_TRACE(describe(dt, in, o));
  const Tensor x = random_tensor(rng, in, dt);
  const Tensor expected = interpolate(x, o);
  const Tensor dout = random_tensor(rng, expected.shape(), dt);
  const Tensor expected_dx = interpolate_backward(dout, in, o);

  const Tensor d_x = x.to(kGpu), d_dout = dout.to(kGpu);
  const Tensor out = poisoned(expected.shape(), dt, kGpu);
  interpolate_into(out, d_x, o);
  if (is_nearest(o.mode)) {
    EXPECT_TRUE(bit_equal(out.to_host(), expected));
  } else {
    EXPECT_TRUE(all_close(out.to_host(), expected));
  }
  EXPECT_TRUE(bit_equal(interpolate(d_x, o).to_host(), out.to_host()));

  const Tensor dx = poisoned(in, dt, kGpu);
  interpolate_backward_into(dx, d_dout, in, o);
  EXPECT_TRUE(all_close(dx.to_host(), expected_dx));
  const Tensor again = interpolate_backward(d_dout, in, o);
  EXPECT_TRUE(bit_equal(again.to_host(), dx.to_host())) << "the gather is not deterministic";
  if (dt == DType::f32) {
    InterpolateOptions fast = o;
    fast.deterministic = false;
    SCOPED_TRACE("atomic backward");
    const Tensor dx_fast = poisoned(in, dt, kGpu);
    interpolate_backward_into(dx_fast, d_dout, in, fast);
    EXPECT_TRUE(all_close(dx_fast.to_host(), expected_dx));
  }
  EXPECT_TRUE(bit_equal(d_x.to_host(), x));
  EXPECT_TRUE(bit_equal(d_dout.to_host(), dout));
}

const DType kDtypes[] = {DType::f32, DType::f16, DType::bf16};

TEST(InterpolationGpu, NearestModesMatchReferenceBitForBit) {
  RUDNN_REQUIRE_CUDA();
  RUDNN_SEEDED_RNG(rng);
  for (DType dt : kDtypes) {
    for (Mode m : {Mode::nearest, Mode::nearest_exact}) {
      check(rng, dt, {2, 3, 17}, by_size(m, {40}));
      check(rng, dt, {2, 3, 37}, by_size(m, {11}));
      check(rng, dt, {2, 3, 13, 9}, by_scale(m, {2.3, 0.7}));
      check(rng, dt, {2, 3, 13, 9}, by_scale(m, {2.3, 0.7}, true));
      check(rng, dt, {1, 4, 16, 16}, by_scale(m, {2.0}));
      check(rng, dt, {2, 2, 5, 7, 6}, by_size(m, {9, 4, 13}));
      check(rng, dt, {1, 2, 10, 10}, by_scale(m, {1.0001}));
    }
  }
}

TEST(InterpolationGpu, LinearModesMatchReference) {
  RUDNN_REQUIRE_CUDA();
  RUDNN_SEEDED_RNG(rng);
  for (DType dt : kDtypes) {
    for (std::optional<bool> align : {std::optional<bool>{}, std::optional<bool>{true}}) {
      check(rng, dt, {2, 3, 17}, by_size(Mode::linear, {40}, align));
      check(rng, dt, {2, 3, 37}, by_size(Mode::linear, {11}, align));
      check(rng, dt, {2, 3, 19}, by_scale(Mode::linear, {1.37}, false, align));
      check(rng, dt, {2, 3, 13, 9}, by_scale(Mode::bilinear, {2.3, 0.7}, false, align));
      check(rng, dt, {2, 3, 13, 9}, by_scale(Mode::bilinear, {2.3, 0.7}, true, align));
      check(rng, dt, {1, 4, 16, 16}, by_scale(Mode::bilinear, {2.0}, false, align));
      check(rng, dt, {2, 3, 31, 29}, by_size(Mode::bilinear, {8, 5}, align));
      check(rng, dt, {2, 2, 5, 7, 6}, by_size(Mode::trilinear, {9, 4, 13}, align));
      check(rng, dt, {1, 2, 4, 6, 8}, by_scale(Mode::trilinear, {0.6, 1.5, 2.0}, false, align));
      check(rng, dt, {1, 2, 1, 1}, by_size(Mode::bilinear, {3, 1}, align));
    }
    check(rng, dt, {1, 2, 10, 10}, by_scale(Mode::bilinear, {1.0001}));  // same size: a copy
  }
}

TEST(InterpolationGpu, BicubicMatchesReference) {
  RUDNN_REQUIRE_CUDA();
  RUDNN_SEEDED_RNG(rng);
  for (DType dt : kDtypes) {
    for (std::optional<bool> align : {std::optional<bool>{}, std::optional<bool>{true}}) {
      check(rng, dt, {2, 3, 13, 9}, by_scale(Mode::bicubic, {2.3, 0.7}, false, align));
      check(rng, dt, {2, 3, 13, 9}, by_scale(Mode::bicubic, {2.3, 0.7}, true, align));
      check(rng, dt, {1, 4, 16, 16}, by_scale(Mode::bicubic, {2.0}, false, align));
      check(rng, dt, {2, 3, 31, 29}, by_size(Mode::bicubic, {8, 5}, align));
      check(rng, dt, {1, 2, 2, 3}, by_size(Mode::bicubic, {7, 12}, align));
    }
  }
}

TEST(InterpolationGpu, AreaMatchesReference) {
  RUDNN_REQUIRE_CUDA();
  RUDNN_SEEDED_RNG(rng);
  for (DType dt : kDtypes) {
    check(rng, dt, {2, 3, 37}, by_size(Mode::area, {11}));
    check(rng, dt, {2, 3, 7}, by_size(Mode::area, {16}));
    check(rng, dt, {2, 3, 13, 9}, by_scale(Mode::area, {0.45, 1.7}));
    check(rng, dt, {1, 4, 32, 32}, by_scale(Mode::area, {0.5}));
    check(rng, dt, {2, 2, 5, 7, 6}, by_size(Mode::area, {2, 4, 5}));
  }
}

TEST(InterpolationGpu, NonContiguousInputAndEmptyBatch) {
  RUDNN_REQUIRE_CUDA();
  RUDNN_SEEDED_RNG(rng);
  const InterpolateOptions o = by_scale(Mode::bilinear, {1.6, 2.2});
  const Tensor base = random_tensor(rng, {2, 3, 6, 5}, DType::f32);
  const Tensor d_t = base.to(kGpu).transpose(2, 3);  // [2, 3, 5, 6], strided on the device
  ASSERT_FALSE(d_t.is_contiguous());
  EXPECT_TRUE(all_close(interpolate(d_t, o).to_host(), interpolate(base.transpose(2, 3).contiguous(), o)));
  const Tensor empty = Tensor::empty({0, 3, 4, 4}, DType::f32, kGpu);
  EXPECT_EQ(interpolate(empty, o).shape(), (Shape{0, 3, 6, 8}));
}

// The exact 2x kernels (bilinear without align_corners, nearest, nearest-exact on 2-D planes;
// area by 1/2). Upsampling: several row groups and a partial last one, H = 1, W of one and of several column strips,
// W not a whole number of strips for F16/BF16 (general kernel), scale or size, and the 2x
// problems they leave to the general kernel (align_corners, 2x on one axis only, a
// misaligned input). check() runs the backward too (the 2x gather for bilinear).
TEST(InterpolationGpu, TwoXUpsamplingMatchesReference) {
  RUDNN_REQUIRE_CUDA();
  RUDNN_SEEDED_RNG(rng);
  const Shape shapes[] = {{2, 3, 16, 16}, {1, 2, 9, 12}, {1, 2, 1, 8},  {2, 3, 17, 6},
                          {1, 2, 5, 2},   {1, 3, 20, 4}, {3, 1, 8, 40}, {1, 1, 2, 10}};
  for (DType dt : kDtypes) {
    for (const Shape& in : shapes) {
      for (Mode m : {Mode::bilinear, Mode::nearest, Mode::nearest_exact}) {
        check(rng, dt, in, by_scale(m, {2.0}));
        check(rng, dt, in, by_size(m, {2 * in[2], 2 * in[3]}));
      }
      check(rng, dt, in, by_scale(Mode::bilinear, {2.0}, true));
      check(rng, dt, in, by_scale(Mode::bilinear, {2.0}, false, true));
      check(rng, dt, in, by_scale(Mode::bilinear, {3.0, 2.0}));
      check(rng, dt, in, by_scale(Mode::nearest, {2.0, 1.0}));
    }
  }
  // Area by exactly 1/2 (2 x 2 windows): 16 bytes of columns per thread, W not a whole number
  // of them for F16/BF16 ({1, 2, 4, 12}), and odd H (general kernel).
  for (DType dt : kDtypes) {
    for (const Shape& in : {Shape{2, 3, 16, 16}, Shape{1, 2, 6, 8}, Shape{1, 2, 4, 12},
                            Shape{3, 1, 10, 40}, Shape{1, 2, 2, 16}}) {
      check(rng, dt, in, by_scale(Mode::area, {0.5}));
      check(rng, dt, in, by_size(Mode::area, {in[2] / 2, in[3] / 2}));
    }
    check(rng, dt, {1, 2, 7, 8}, by_size(Mode::area, {3, 4}));
  }
  // Large magnitudes (near each dtype's range) keep their relative accuracy.
  for (DType dt : kDtypes) {
    SCOPED_TRACE(::testing::Message() << "large values " << dtype_name(dt));
    const Shape in{2, 3, 12, 16};
    const Tensor x = random_tensor(rng, in, dt, 0.0f, dt == DType::f16 ? 1e4f : 1e30f);
    const Tensor d_x = x.to(kGpu);
    const InterpolateOptions o = by_scale(Mode::bilinear, {2.0});
    EXPECT_TRUE(all_close(interpolate(d_x, o).to_host(), interpolate(x, o)));
  }
  // A contiguous input at an address not 8-byte aligned: the general kernel.
  for (DType dt : kDtypes) {
    SCOPED_TRACE(::testing::Message() << "misaligned input " << dtype_name(dt));
    const Shape in{2, 3, 8, 16};
    const Tensor x = random_tensor(rng, in, dt);
    const Tensor buffer = Tensor::zeros({2 * 3 * 8 * 16 + 1}, dt, kGpu);
    const Tensor d_x = buffer.as_strided(in, {3 * 8 * 16, 8 * 16, 16, 1}, 1);
    d_x.copy_from(x);
    ASSERT_TRUE(d_x.is_contiguous());
    for (Mode m : {Mode::bilinear, Mode::nearest}) {
      const InterpolateOptions o = by_scale(m, {2.0});
      EXPECT_TRUE(all_close(interpolate(d_x, o).to_host(), interpolate(x, o)));
    }
    // The backward's dout misaligned the same way.
    const Shape out{2, 3, 16, 32};
    const Tensor dout = random_tensor(rng, out, dt);
    const Tensor dout_buffer = Tensor::zeros({2 * 3 * 16 * 32 + 1}, dt, kGpu);
    const Tensor d_dout = dout_buffer.as_strided(out, {3 * 16 * 32, 16 * 32, 32, 1}, 1);
    d_dout.copy_from(dout);
    const InterpolateOptions o = by_scale(Mode::bilinear, {2.0});
    EXPECT_TRUE(all_close(interpolate_backward(d_dout, in, o).to_host(),
                          interpolate_backward(dout, in, o)));
  }
}

TEST(InterpolationGpu, BenchShape) {
  RUDNN_REQUIRE_CUDA();
  RUDNN_SEEDED_RNG(rng);
  check(rng, DType::f32, {2, 8, 128, 128}, by_scale(Mode::bilinear, {2.0}));
  check(rng, DType::bf16, {2, 8, 128, 128}, by_scale(Mode::bilinear, {2.0}));
  check(rng, DType::f32, {2, 8, 128, 128}, by_scale(Mode::nearest, {2.0}));
  check(rng, DType::f16, {2, 8, 128, 128}, by_scale(Mode::bilinear, {2.0}));
  check(rng, DType::f32, {1, 8, 64, 64}, by_scale(Mode::bicubic, {2.0}));
}

}  // namespace
}  // namespace rudnn::test
