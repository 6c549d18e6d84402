// Antialiased bilinear and bicubic on the CPU (the float64 reference): hand values, an
// independent transcription of torch's separable rule (written per axis from the definition,
// not from taps.h), the properties the rule implies (constants preserved, upsampling
// bilinear equals plain bilinear), the backward as the forward's adjoint, channels-last and
// other strided inputs, and every error path the option adds.
#include <cmath>
#include <string>
#include <vector>

#include "options.h"
#include "support/test_support.h"

namespace rudnn::test {
namespace {

using Mode = InterpolateMode;

std::string describe(const Shape& in, const InterpolateOptions& o) {
  std::string s = std::string(o.mode == Mode::bicubic ? "bicubic" : "bilinear") + " input " +
                  shape_str(in) + " size";
  for (int64_t v : o.size) s += " " + std::to_string(v);
  s += " scale_factor";
  for (double v : o.scale_factor) s += " " + std::to_string(v);
  s += std::string(" recompute ") + (o.recompute_scale_factor ? "1" : "0") + " align_corners " +
       (o.align_corners ? (*o.align_corners ? "true" : "false") : "unset");
  return s;
}

// The triangle and Keys' cubic (A = -0.5) as functions of distance.
double tent(double x) { return std::max(0.0, 1.0 - std::fabs(x)); }
double keys_half(double d) {
  const double a = -0.5, x = std::fabs(d);
  if (x < 1) return (a + 2) * x * x * x - (a + 3) * x * x + 1;
  if (x < 2) return a * x * x * x - 5 * a * x * x + 8 * a * x - 4 * a;
  return 0;
}

// The [out, in] matrix of one axis under torch's antialias rule, from its definition.
std::vector<std::vector<double>> axis_matrix(bool cubic, int64_t in, int64_t out, double scale) {
  std::vector<std::vector<double>> m(out, std::vector<double>(in, 0.0));
  if (in == out && scale == 1.0) {
    for (int64_t i = 0; i < in; ++i) m[i][i] = 1.0;
    return m;
  }
  const double support = (cubic ? 2.0 : 1.0) * (scale >= 1.0 ? scale : 1.0);
  const double stretch = scale >= 1.0 ? scale : 1.0;
  for (int64_t o = 0; o < out; ++o) {
    const double center = scale * (o + 0.5);
    const int64_t first =
        std::max<int64_t>(0, static_cast<int64_t>(std::trunc(center - support + 0.5)));
    const int64_t end =
        std::min<int64_t>(in, static_cast<int64_t>(std::trunc(center + support + 0.5)));
    double total = 0.0;
    for (int64_t j = first; j < end; ++j) {
      const double d = (j + 0.5 - center) / stretch;
      m[o][j] = cubic ? keys_half(d) : tent(d);
      total += m[o][j];
    }
    for (int64_t j = first; j < end; ++j) m[o][j] /= total;
  }
  return m;
}

// torch's per-axis scale: align_corners (in - 1) / (out - 1), a given factor 1 / factor,
// else in / out.
double axis_scale(const InterpolateOptions& o, int a, int64_t in, int64_t out) {
  if (o.align_corners.value_or(false)) return out > 1 ? double(in - 1) / double(out - 1) : 0.0;
  if (!o.scale_factor.empty() && !o.recompute_scale_factor) {
    return 1.0 / o.scale_factor[o.scale_factor.size() == 1 ? 0 : a];
  }
  return double(in) / double(out);
}

std::vector<double> transcribed(const std::vector<double>& x, const Shape& in, const Shape& out,
                                const InterpolateOptions& o) {
  const bool cubic = o.mode == Mode::bicubic;
  const int64_t H = in[2], W = in[3], Ho = out[2], Wo = out[3];
  const bool copy = H == Ho && W == Wo;
  const auto my =
      copy ? axis_matrix(cubic, H, Ho, 1.0) : axis_matrix(cubic, H, Ho, axis_scale(o, 0, H, Ho));
  const auto mx =
      copy ? axis_matrix(cubic, W, Wo, 1.0) : axis_matrix(cubic, W, Wo, axis_scale(o, 1, W, Wo));
  std::vector<double> y;
  for (int64_t p = 0; p < in[0] * in[1]; ++p)
    for (int64_t oy = 0; oy < Ho; ++oy)
      for (int64_t ox = 0; ox < Wo; ++ox) {
        double s = 0.0;
        for (int64_t iy = 0; iy < H; ++iy)
          for (int64_t ix = 0; ix < W; ++ix)
            s += my[oy][iy] * mx[ox][ix] * x[(p * H + iy) * W + ix];
        y.push_back(s);
      }
  return y;
}

void expect_near_all(const std::vector<double>& got, const std::vector<double>& expected,
                     double tol) {
  ASSERT_EQ(got.size(), expected.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], expected[i], tol) << "element " << i;
}

TEST(InterpolationAntialias, HandValues) {
  const Tensor x = host_tensor({1, 2, 3, 4}, {1, 1, 1, 4}, DType::f64);
  // Scale 2: support 2, window weights tent((j + 0.5 - center) / 2) = 3/4, 3/4, 1/4 (sum 7/4).
  expect_near_all(to_doubles(interpolate(x, aa_size(Mode::bilinear, {1, 2}))),
                  {3.0 / 1.75, 5.75 / 1.75}, 1e-12);
  // Upsampling bilinear: the plain bilinear result.
  expect_near_all(to_doubles(interpolate(x, aa_size(Mode::bilinear, {1, 8}))),
                  {1, 1.25, 1.75, 2.25, 2.75, 3.25, 3.75, 4}, 1e-12);
  // To one pixel: the tent stretched by 4 centred on the row, weights 5/8 7/8 7/8 5/8 over 3.
  expect_near_all(to_doubles(interpolate(x, aa_size(Mode::bilinear, {1, 1}))), {2.5}, 1e-12);
}

TEST(InterpolationAntialias, MatchesTranscribedRule) {
  RUDNN_SEEDED_RNG(rng);
  struct Case {
    Shape in;
    InterpolateOptions o;
  };
  std::vector<Case> cases;
  for (Mode m : {Mode::bilinear, Mode::bicubic}) {
    for (std::optional<bool> ac :
         {std::optional<bool>{}, std::optional<bool>{false}, std::optional<bool>{true}}) {
      cases.push_back({{2, 3, 16, 18}, aa_scale(m, {0.5}, false, ac)});
      cases.push_back({{1, 2, 18, 17}, aa_scale(m, {1.0 / 3.0}, false, ac)});
      cases.push_back({{1, 2, 27, 30}, aa_scale(m, {0.37}, false, ac)});
      cases.push_back({{1, 2, 27, 30}, aa_scale(m, {0.37, 0.61}, true, ac)});
      cases.push_back({{2, 1, 9, 7}, aa_scale(m, {1.7, 2.0}, false, ac)});
      cases.push_back({{1, 2, 13, 11}, aa_size(m, {5, 23}, ac)});
      cases.push_back({{1, 1, 1, 9}, aa_size(m, {3, 4}, ac)});
      cases.push_back({{1, 1, 7, 1}, aa_size(m, {1, 1}, ac)});
      cases.push_back({{1, 1, 40, 3}, aa_size(m, {3, 3}, ac)});  // 13+ taps, one axis a copy
    }
  }
  for (const Case& c : cases) {
    SCOPED_TRACE(describe(c.in, c.o));
    const Tensor x = random_tensor(rng, c.in, DType::f64);
    const Tensor y = interpolate(x, c.o);
    EXPECT_EQ(y.shape(), interpolate_output_shape(c.in, c.o));
    expect_near_all(to_doubles(y), transcribed(to_doubles(x), c.in, y.shape(), c.o), 1e-12);
  }
}

TEST(InterpolationAntialias, PreservesConstantsAndUpsamplesAsPlainBilinear) {
  RUDNN_SEEDED_RNG(rng);
  const Tensor c =
      host_tensor(std::vector<double>(2 * 3 * 11 * 14, 2.5), {2, 3, 11, 14}, DType::f64);
  for (Mode m : {Mode::bilinear, Mode::bicubic}) {
    for (const auto& size : {std::vector<int64_t>{4, 5}, {3, 29}, {1, 1}, {23, 31}}) {
      SCOPED_TRACE(describe(c.shape(), aa_size(m, size)));
      const std::vector<double> y = to_doubles(interpolate(c, aa_size(m, size)));
      expect_near_all(y, std::vector<double>(y.size(), 2.5), 1e-12);
    }
  }
  const Tensor x = random_tensor(rng, {2, 3, 7, 9}, DType::f64);
  for (const auto& size : {std::vector<int64_t>{14, 18}, {9, 23}, {7, 20}}) {
    InterpolateOptions plain = aa_size(Mode::bilinear, size);
    plain.antialias = false;
    SCOPED_TRACE(describe(x.shape(), plain));
    expect_near_all(to_doubles(interpolate(x, aa_size(Mode::bilinear, size))),
                    to_doubles(interpolate(x, plain)), 1e-12);
  }
}

// <A x, y> = <x, A^T y> in float64, and F32/F16/BF16 inputs against the float64 result.
TEST(InterpolationAntialias, BackwardIsTheAdjointAndDtypesRoundOnce) {
  RUDNN_SEEDED_RNG(rng);
  const Shape in{2, 2, 17, 13};
  for (Mode m : {Mode::bilinear, Mode::bicubic}) {
    for (const InterpolateOptions& o : {aa_scale(m, {0.5}), aa_scale(m, {0.37, 1.0 / 3.0}),
                                        aa_size(m, {30, 5}, true), aa_size(m, {1, 26})}) {
      SCOPED_TRACE(describe(in, o));
      const Tensor x = random_tensor(rng, in, DType::f64);
      const Tensor y = interpolate(x, o);
      const Tensor g = random_tensor(rng, y.shape(), DType::f64);
      const Tensor dx = interpolate_backward(g, in, o);
      const std::vector<double> vx = to_doubles(x), vy = to_doubles(y), vg = to_doubles(g),
                                vdx = to_doubles(dx);
      double lhs = 0.0, rhs = 0.0, scale = 0.0;
      for (size_t i = 0; i < vy.size(); ++i)
        lhs += vy[i] * vg[i], scale += std::fabs(vy[i] * vg[i]);
      for (size_t i = 0; i < vx.size(); ++i) rhs += vx[i] * vdx[i];
      EXPECT_NEAR(lhs, rhs, 1e-12 * std::max(1.0, scale));
      for (DType dt : {DType::f32, DType::f16, DType::bf16}) {
        SCOPED_TRACE(dtype_name(dt));
        const Tensor xt = host_tensor(vx, in, dt), gt = host_tensor(vg, y.shape(), dt);
        const Tensor x64 = host_tensor(to_doubles(xt), in, DType::f64);
        const Tensor g64 = host_tensor(to_doubles(gt), y.shape(), DType::f64);
        EXPECT_TRUE(all_close(interpolate(xt, o),
                              host_tensor(to_doubles(interpolate(x64, o)), y.shape(), dt)));
        EXPECT_TRUE(all_close(interpolate_backward(gt, in, o),
                              host_tensor(to_doubles(interpolate_backward(g64, in, o)), in, dt)));
      }
    }
  }
}

TEST(InterpolationAntialias, ChannelsLastAndStridedInputs) {
  RUDNN_SEEDED_RNG(rng);
  const int64_t N = 2, C = 3, H = 10, W = 12;
  const Tensor nhwc = random_tensor(rng, {N, H, W, C}, DType::f32);
  const Tensor view = nhwc.as_strided({N, C, H, W}, {H * W * C, 1, W * C, C}, 0);
  ASSERT_FALSE(view.is_contiguous());
  const Tensor dense = host_tensor(to_doubles(view), {N, C, H, W}, DType::f32);
  for (Mode m : {Mode::bilinear, Mode::bicubic}) {
    const InterpolateOptions o = aa_scale(m, {0.37, 0.5});
    SCOPED_TRACE(describe(dense.shape(), o));
    EXPECT_TRUE(bit_equal(interpolate(view, o), interpolate(dense, o)));
    const Tensor g = random_tensor(rng, {N, W, 6, C}, DType::f32)
                         .as_strided({N, C, W, 6}, {W * 6 * C, 1, 6 * C, C}, 0);
    ASSERT_EQ(g.shape(), interpolate_output_shape({N, C, H, W}, aa_scale(m, {1.2, 0.5})));
    const Tensor g_dense = host_tensor(to_doubles(g), g.shape(), DType::f32);
    EXPECT_TRUE(bit_equal(interpolate_backward(g, {N, C, H, W}, aa_scale(m, {1.2, 0.5})),
                          interpolate_backward(g_dense, {N, C, H, W}, aa_scale(m, {1.2, 0.5}))));
  }
  // An empty batch gives an empty output.
  EXPECT_EQ(
      interpolate(Tensor::zeros({0, 3, 8, 8}, DType::f32), aa_scale(Mode::bilinear, {0.5})).shape(),
      (Shape{0, 3, 4, 4}));
}

TEST(InterpolationAntialias, Errors) {
  const Tensor x3 = Tensor::zeros({1, 1, 8}, DType::f32),
               x4 = Tensor::zeros({1, 1, 8, 8}, DType::f32),
               x5 = Tensor::zeros({1, 1, 4, 8, 8}, DType::f32);
  const struct {
    Mode mode;
    const Tensor* x;
    const char* name;
  } bad[] = {{Mode::nearest, &x4, "nearest"}, {Mode::nearest_exact, &x4, "nearest_exact"},
             {Mode::linear, &x3, "linear"},   {Mode::trilinear, &x5, "trilinear"},
             {Mode::area, &x4, "area"},       {Mode::nearest, &x3, "nearest"}};
  for (const auto& b : bad) {
    SCOPED_TRACE(b.name);
    InterpolateOptions o = aa_scale(b.mode, {0.5});
    const std::initializer_list<std::string> what = {
        std::string("interpolate: options.antialias is set with mode ") + b.name,
        "expected mode bilinear or bicubic"};
    EXPECT_TRUE(throws_error([&] { interpolate(*b.x, o); }, ErrorCode::InvalidArgument, what));
    EXPECT_TRUE(throws_error([&] { interpolate_output_shape(b.x->shape(), o); },
                             ErrorCode::InvalidArgument, what));
    EXPECT_TRUE(throws_error(
        [&] {
          interpolate_backward(Tensor::zeros(Shape(b.x->shape().size(), 1), DType::f32),
                               b.x->shape(), o);
        },
        ErrorCode::InvalidArgument,
        {std::string("interpolate_backward: options.antialias is set with mode ") + b.name}));
  }
  // The ranks bilinear and bicubic take are unchanged by antialias (torch: 4-d only).
  EXPECT_TRUE(throws_error([&] { interpolate(x3, aa_size(Mode::bilinear, {4})); },
                           ErrorCode::InvalidArgument,
                           {"interpolate: options.mode bilinear takes 4-d input"}));
  EXPECT_TRUE(throws_error(
      [&] {
        interpolate(x5, aa_size(Mode::bicubic, {2, 4, 4}));
      },
      ErrorCode::InvalidArgument, {"interpolate: options.mode bicubic takes 4-d input"}));
  // The other rules still apply with antialias.
  EXPECT_TRUE(throws_error([&] { interpolate(x4, aa_scale(Mode::bilinear, {0.01})); },
                           ErrorCode::InvalidArgument, {"output size 0"}));
  EXPECT_TRUE(throws_error(
      [&] {
        interpolate_backward(Tensor::zeros({1, 1, 4, 5}, DType::f32), {1, 1, 8, 8},
                             aa_scale(Mode::bicubic, {0.5}));
      },
      ErrorCode::ShapeMismatch, {"interpolate_backward: dout"}));
  const Tensor out = Tensor::zeros({1, 1, 4, 4}, DType::f32);
  EXPECT_TRUE(throws_error(
      [&] {
        interpolate_into(out, x4, aa_size(Mode::bilinear, {3, 4}));
      },
      ErrorCode::ShapeMismatch, {"interpolate: out"}));
}

}  // namespace
}  // namespace rudnn::test
