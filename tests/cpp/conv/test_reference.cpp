// The float64 CPU reference against hand values, the adjoint identities that tie forward,
// data and weight gradients together, finite differences, the layouts (NCHW, channels-last
// views, _nhwc shapes) and the causal conv1d's state, decode and varlen rules.
#include <cmath>

#include "conv/problem.h"
#include "conv_test_util.h"

namespace rudnn::test {
namespace {

using conv::opts;
const DType f64 = DType::f64;

TEST(ConvReference, Conv1dHandValues) {
  const Tensor x = host_tensor({1, 2, 3, 4}, {1, 1, 4}, f64);
  const Tensor w = host_tensor({1, 0, -1}, {1, 1, 3}, f64);
  const Tensor out = conv_forward<1>(x, w, {}, opts<1>({1}, {1}, {1}));
  EXPECT_EQ(out.shape(), (Shape{1, 1, 4}));
  EXPECT_EQ(to_doubles(out), (std::vector<double>{-2, -2, -2, 3}));
  // stride 2, dilation 2, no padding: span 6 - 4 - 1 = 1 gives one output, x0 - x4.
  const Tensor x6 = host_tensor({1, 2, 3, 4, 5, 6}, {1, 1, 6}, f64);
  EXPECT_EQ(to_doubles(conv_forward<1>(x6, w, {}, opts<1>({2}, {0}, {2}))),
            (std::vector<double>{-4}));
}

TEST(ConvReference, AsymmetricPaddingAndBias) {
  const Tensor x = host_tensor({1, 2, 3, 4}, {1, 1, 4}, f64);
  const Tensor w = host_tensor({10, 1}, {1, 1, 2}, f64);
  ConvOptions<1> o;
  o.padding_end = {1};  // before 0, after 1: "same" for an even kernel
  const Tensor b = host_tensor({0.5}, {1}, f64);
  EXPECT_EQ(to_doubles(conv_forward<1>(x, w, b, o)),
            (std::vector<double>{12.5, 23.5, 34.5, 40.5}));
  o.padding = {1};
  o.padding_end = {0};
  EXPECT_EQ(to_doubles(conv_forward<1>(x, w, {}, o)), (std::vector<double>{1, 12, 23, 34}));
}

TEST(ConvReference, Conv2dGroupsHandValues) {
  // Two groups of one channel each, K = 4 (two filters per group), 2x2 input, 1x1 and 2x2.
  const Tensor x = host_tensor({1, 2, 3, 4, 10, 20, 30, 40}, {1, 2, 2, 2}, f64);
  const Tensor w = host_tensor({1, 2, 3, 4}, {4, 1, 1, 1}, f64);
  const Tensor out = conv_forward<2>(x, w, {}, opts<2>({1, 1}, {0, 0}, {1, 1}, 2));
  EXPECT_EQ(to_doubles(out), (std::vector<double>{1, 2, 3, 4, 2, 4, 6, 8, 30, 60, 90, 120, 40,
                                                  80, 120, 160}));
  const Tensor w2 = host_tensor({1, 1, 1, 1, 1, 0, 0, -1}, {2, 1, 2, 2}, f64);
  EXPECT_EQ(to_doubles(conv_forward<2>(x, w2, {}, opts<2>({1, 1}, {0, 0}, {1, 1}, 2))),
            (std::vector<double>{10, -30}));
}

TEST(ConvReference, EpilogueActivationsAndResidual) {
  const Tensor x = host_tensor({-1, 0.5, 2}, {1, 1, 3}, f64);
  const Tensor w = host_tensor({1}, {1, 1, 1}, f64);
  const Tensor r = host_tensor({0.25, -1, 1}, {1, 1, 3}, f64);
  ConvEpilogue e;
  e.residual = r;
  e.activation = ConvActivation::Relu;
  EXPECT_EQ(to_doubles(conv_forward<1>(x, w, {}, ConvOptions<1>{}, ConvStrategy::Auto, e)),
            (std::vector<double>{0, 0, 3}));
  e.residual = {};
  e.activation = ConvActivation::Silu;
  std::vector<double> got = to_doubles(conv_forward<1>(x, w, {}, ConvOptions<1>{}, ConvStrategy::Auto, e));
  for (int i = 0; i < 3; ++i) {
    const double v = to_doubles(x)[i];
    EXPECT_NEAR(got[i], v / (1 + std::exp(-v)), 1e-15);
  }
  e.activation = ConvActivation::Gelu;
  got = to_doubles(conv_forward<1>(x, w, {}, ConvOptions<1>{}, ConvStrategy::Auto, e));
  for (int i = 0; i < 3; ++i) {
    const double v = to_doubles(x)[i];
    EXPECT_NEAR(got[i], 0.5 * v * (1 + std::erf(v / std::sqrt(2.0))), 1e-15);
  }
}

TEST(ConvReference, DataAndWeightGradientsHandValues) {
  const Tensor w = host_tensor({1, 0, -1}, {1, 1, 3}, f64);
  const Tensor dy = host_tensor({1, 2, 3, 4}, {1, 1, 4}, f64);
  const ConvOptions<1> o = opts<1>({1}, {1}, {1});
  // dx[i] = sum_t dy[i + 1 - t] w[t]: dy[i+1] - dy[i-1].
  EXPECT_EQ(to_doubles(conv_data_backward<1>(dy, w, {1, 1, 4}, o)),
            (std::vector<double>{2, 2, 2, -3}));
  const Tensor x = host_tensor({1, 2, 3, 4}, {1, 1, 4}, f64);
  const ConvWeightGrads g = conv_weight_backward<1>(dy, x, {1, 1, 3}, o, true);
  // dw[t] = sum_o dy[o] x[o - 1 + t]
  EXPECT_EQ(to_doubles(g.dweight), (std::vector<double>{20, 30, 20}));
  EXPECT_EQ(to_doubles(g.dbias), (std::vector<double>{10}));
}

// A case of the identity checks: shapes in NCHW-style order and options.
template <int N>
struct Case {
  Shape input, weight;
  ConvOptions<N> o;
};

// <conv(x, w), dy> = <x, dgrad(dy, w)> = <w, wgrad(dy, x)>: the three directions are one
// bilinear form, checked over every element at once (a wrong index anywhere breaks it).
template <int N>
void check_adjoint(Rng& rng, const Case<N>& c) {
  SCOPED_TRACE(::testing::Message() << "input " << shape_str(c.input) << " weight "
                                    << shape_str(c.weight) << " groups " << c.o.groups);
  const Tensor x = random_tensor(rng, c.input, f64), w = random_tensor(rng, c.weight, f64);
  const Tensor y = conv_forward<N>(x, w, {}, c.o);
  const Tensor dy = random_tensor(rng, y.shape(), f64);
  const double forward = conv::dot(y, dy);
  const double data = conv::dot(x, conv_data_backward<N>(dy, w, c.input, c.o));
  const ConvWeightGrads g = conv_weight_backward<N>(dy, x, c.weight, c.o, true);
  const double weight = conv::dot(w, g.dweight);
  const double scale = std::sqrt(static_cast<double>(y.numel())) * 10;
  EXPECT_NEAR(data, forward, 1e-10 * scale);
  EXPECT_NEAR(weight, forward, 1e-10 * scale);
  // dbias is the sum of dy over batch and space.
  const std::vector<double> dyv = to_doubles(dy), db = to_doubles(g.dbias);
  const int64_t K = y.shape()[1], space = y.numel() / (y.shape()[0] * K);
  for (int64_t k = 0; k < K; ++k) {
    double sum = 0.0;
    for (int64_t n = 0; n < y.shape()[0]; ++n)
      for (int64_t p = 0; p < space; ++p) sum += dyv[(n * K + k) * space + p];
    EXPECT_NEAR(db[k], sum, 1e-12 * (1 + std::abs(sum)));
  }
}

TEST(ConvReference, AdjointIdentitiesHoldOverTheOptionSpace) {
  RUDNN_SEEDED_RNG(rng);
  check_adjoint<1>(rng, {{2, 4, 11}, {6, 2, 3}, opts<1>({2}, {1}, {2}, 2)});
  check_adjoint<1>(rng, {{1, 3, 9}, {3, 1, 4}, opts<1>({3}, {2}, {1}, 3)});
  check_adjoint<2>(rng, {{2, 3, 9, 8}, {4, 3, 3, 3}, opts<2>({1, 2}, {1, 0}, {1, 2})});
  check_adjoint<2>(rng, {{1, 4, 11, 10}, {4, 1, 7, 7}, opts<2>({2, 2}, {3, 3}, {1, 1}, 4)});
  check_adjoint<2>(rng, {{2, 4, 5, 6}, {8, 2, 1, 1}, opts<2>({1, 1}, {0, 0}, {1, 1}, 2)});
  ConvOptions<2> asym = opts<2>({2, 1}, {0, 2}, {1, 1});
  asym.padding_end = {1, 0};
  check_adjoint<2>(rng, {{1, 2, 7, 6}, {3, 2, 2, 3}, asym});
  check_adjoint<3>(rng, {{1, 2, 5, 6, 4}, {3, 2, 3, 2, 2}, opts<3>({1, 2, 1}, {1, 0, 1}, {1, 1, 2})});
  check_adjoint<3>(rng, {{2, 4, 4, 5, 3}, {4, 2, 2, 3, 1}, opts<3>({2, 1, 1}, {0, 1, 0}, {1, 1, 1}, 2)});
}

// d/dx and d/dw of sum(dy * conv(x, w)) by central differences, element by element.
TEST(ConvReference, GradientsMatchFiniteDifferences) {
  RUDNN_SEEDED_RNG(rng);
  ConvOptions<2> o = opts<2>({2, 1}, {1, 0}, {1, 2}, 2);
  o.padding_end = {0, 1};
  const Shape xs{1, 4, 5, 6}, ws{2, 2, 3, 2};
  const Tensor x = random_tensor(rng, xs, f64), w = random_tensor(rng, ws, f64);
  const Tensor y = conv_forward<2>(x, w, {}, o);
  const Tensor dy = random_tensor(rng, y.shape(), f64);
  const std::vector<double> dx = to_doubles(conv_data_backward<2>(dy, w, xs, o));
  const std::vector<double> dw = to_doubles(conv_weight_backward<2>(dy, x, ws, o, false).dweight);
  const double h = 1e-6;
  auto objective = [&](const Tensor& xt, const Tensor& wt) {
    return conv::dot(conv_forward<2>(xt, wt, {}, o), dy);
  };
  std::vector<double> xv = to_doubles(x), wv = to_doubles(w);
  for (size_t i = 0; i < xv.size(); ++i) {
    std::vector<double> up = xv, down = xv;
    up[i] += h;
    down[i] -= h;
    const double numeric =
        (objective(host_tensor(up, xs, f64), w) - objective(host_tensor(down, xs, f64), w)) / (2 * h);
    EXPECT_NEAR(dx[i], numeric, 1e-6) << "dx element " << i;
  }
  for (size_t i = 0; i < wv.size(); ++i) {
    std::vector<double> up = wv, down = wv;
    up[i] += h;
    down[i] -= h;
    const double numeric =
        (objective(x, host_tensor(up, ws, f64)) - objective(x, host_tensor(down, ws, f64))) / (2 * h);
    EXPECT_NEAR(dw[i], numeric, 1e-6) << "dw element " << i;
  }
}

TEST(ConvReference, ChannelsLastViewsAndNhwcShapesGiveTheSameValues) {
  RUDNN_SEEDED_RNG(rng);
  const ConvOptions<2> o = opts<2>({2, 1}, {1, 1}, {1, 2}, 2);
  const Shape xs{2, 4, 7, 6}, ws{6, 2, 3, 2};
  const Tensor x = random_tensor(rng, xs, f64), w = random_tensor(rng, ws, f64);
  const Tensor b = random_tensor(rng, {6}, f64);
  const Tensor y = conv_forward<2>(x, w, b, o);
  // A channels-last view in gives a channels-last output with the same values.
  const Tensor y_cl = conv_forward<2>(conv::channels_last_view(x), w, b, o);
  EXPECT_FALSE(y_cl.is_contiguous());
  EXPECT_EQ(y_cl.strides()[1], 1);
  EXPECT_TRUE(all_close(y_cl.contiguous(), y, 1e-14));
  // _nhwc shapes.
  const Tensor y_nhwc = conv_forward_nhwc<2>(conv::to_nhwc(x), conv::to_nhwc(w), b, o);
  EXPECT_TRUE(all_close(conv::from_nhwc(y_nhwc), y, 1e-14));
  const Tensor dy = random_tensor(rng, y.shape(), f64);
  const Tensor dx = conv_data_backward<2>(dy, w, xs, o);
  EXPECT_TRUE(all_close(
      conv::from_nhwc(conv_data_backward_nhwc<2>(conv::to_nhwc(dy), conv::to_nhwc(w),
                                                 conv::to_nhwc(x).shape(), o)),
      dx, 1e-14));
  const Tensor dx_cl = conv_data_backward<2>(conv::channels_last_view(dy), w, xs, o);
  EXPECT_EQ(dx_cl.strides()[1], 1);
  EXPECT_TRUE(all_close(dx_cl.contiguous(), dx, 1e-14));
  const ConvWeightGrads g = conv_weight_backward<2>(dy, x, ws, o, true);
  const ConvWeightGrads g_nhwc = conv_weight_backward_nhwc<2>(
      conv::to_nhwc(dy), conv::to_nhwc(x), conv::to_nhwc(w).shape(), o, true);
  EXPECT_TRUE(all_close(conv::from_nhwc(g_nhwc.dweight), g.dweight, 1e-14));
  EXPECT_TRUE(all_close(g_nhwc.dbias, g.dbias, 1e-14));
  // A strided (sliced) input is read in place.
  const Tensor wide = random_tensor(rng, {2, 4, 7, 12}, f64);
  const Tensor sliced = wide.slice(3, 0, 12, 2);
  EXPECT_TRUE(all_close(conv_forward<2>(sliced, w, b, o), conv_forward<2>(sliced.contiguous(), w, b, o),
                        1e-15));
}

TEST(ConvReference, EmptyBatch) {
  const ConvOptions<2> o;
  const Tensor x = Tensor::empty({0, 2, 4, 4}, f64), w = Tensor::full({3, 2, 3, 3}, 1.0, f64);
  EXPECT_EQ(conv_forward<2>(x, w, {}, o).shape(), (Shape{0, 3, 2, 2}));
  const Tensor dy = Tensor::empty({0, 3, 2, 2}, f64);
  EXPECT_EQ(conv_data_backward<2>(dy, w, {0, 2, 4, 4}, o).shape(), (Shape{0, 2, 4, 4}));
  const ConvWeightGrads g = conv_weight_backward<2>(dy, x, {3, 2, 3, 3}, o, true);
  EXPECT_EQ(to_doubles(g.dweight), std::vector<double>(54, 0.0));
  EXPECT_EQ(to_doubles(g.dbias), std::vector<double>(3, 0.0));
}

TEST(ConvReference, PlanReportsTheKernel) {
  const ConvOptions<2> o;
  const Device gpu = Device::cuda(0);
  ConvPlan p = plan_conv<2>(ConvDirection::Forward, {1, 4, 8, 8}, {4, 4, 3, 3}, DType::bf16,
                            Device::cpu(), o);
  EXPECT_EQ(p.kernel, ConvKernel::Reference);
  p = plan_conv<2>(ConvDirection::Forward, {1, 4, 8, 8}, {4, 4, 3, 3}, DType::bf16, gpu, o);
  EXPECT_EQ(p.kernel, ConvKernel::Direct);
  EXPECT_EQ(p.workspace_bytes, 0u);
  ConvOptions<2> dw = o;
  dw.groups = 4;
  p = plan_conv<2>(ConvDirection::Forward, {1, 4, 8, 8}, {8, 1, 5, 5}, DType::bf16, gpu, dw);
  EXPECT_EQ(p.kernel, ConvKernel::Depthwise);
  p = plan_conv<2>(ConvDirection::DataBackward, {1, 4, 8, 8}, {8, 1, 5, 5}, DType::bf16, gpu, dw);
  EXPECT_EQ(p.kernel, ConvKernel::Direct);
  p = plan_conv<2>(ConvDirection::Forward, {1, 4, 8, 8}, {8, 1, 5, 5}, DType::bf16, gpu, dw,
                   ConvStrategy::ImplicitGemm);
  EXPECT_EQ(p.kernel, ConvKernel::Direct);
  EXPECT_NE(p.why.find("grouped"), std::string::npos) << p.why;
  const ConvPlan p3 = plan_conv<3>(ConvDirection::Forward, {1, 4, 4, 4, 4}, {4, 4, 1, 1, 1},
                                   DType::f32, gpu, ConvOptions<3>{}, ConvStrategy::ImplicitGemm);
  EXPECT_EQ(p3.kernel, ConvKernel::Direct);
  EXPECT_NE(p3.why.find("3-D F32"), std::string::npos) << p3.why;
  EXPECT_STREQ(conv_kernel_name(ConvKernel::Depthwise), "Depthwise");
  // Auto takes the implicit GEMM forward for channels-last BF16/F16 with C % 8 == 0; the
  // gradients, F32 and C % 8 != 0 stay Direct.
  const Shape x8{1, 8, 8, 8}, w8{4, 3, 3, 8};
  const auto nhwc = [&](ConvDirection d, DType dt, const Shape& x, const Shape& w) {
    return plan_conv<2>(d, x, w, dt, gpu, o, ConvStrategy::Auto, ConvLayout::Nhwc).kernel;
  };
  EXPECT_EQ(nhwc(ConvDirection::Forward, DType::bf16, x8, w8), ConvKernel::ImplicitGemm);
  EXPECT_EQ(nhwc(ConvDirection::Forward, DType::f16, x8, w8), ConvKernel::ImplicitGemm);
  EXPECT_EQ(nhwc(ConvDirection::Forward, DType::f32, x8, w8), ConvKernel::Direct);
  EXPECT_EQ(nhwc(ConvDirection::Forward, DType::bf16, {1, 8, 8, 12}, {4, 3, 3, 12}),
            ConvKernel::Direct);
  EXPECT_EQ(nhwc(ConvDirection::DataBackward, DType::bf16, x8, w8), ConvKernel::Direct);
  EXPECT_EQ(nhwc(ConvDirection::WeightBackward, DType::bf16, x8, w8), ConvKernel::Direct);
}

// ImplicitGemm's data gradient runs, per stride phase, a stride-1 forward convolution of dout
// (less `skip` leading positions, `pad` zeros before) with the phase's taps of the weight
// read from `first_tap` by `tap_step` and K, C exchanged, writing the phase's input
// positions r + q·stride (conv_detail::data_phase_axis): the identity checked on the float64
// reference by composing those convolutions here.
template <int N>
void expect_data_gradient_is_phased_forwards(Rng& rng, const Shape& xs, const Shape& ws,
                                             const ConvOptions<N>& o) {
  SCOPED_TRACE("input " + shape_str(xs) + " weight " + shape_str(ws));
  const Tensor w = random_tensor(rng, ws, f64);
  const Shape ys = conv_forward<N>(Tensor::zeros(xs, f64), w, {}, o).shape();
  const Tensor dy = random_tensor(rng, ys, f64);
  const auto want = to_doubles(conv_data_backward<N>(dy, w, xs, o));
  const auto wv = to_doubles(w), dyv = to_doubles(dy);
  const int64_t batch = xs[0], C = xs[1], K = ws[0];
  // Extents padded to 3 axes (leading 1s), as the library sees them.
  int64_t in[3] = {1, 1, 1}, out[3] = {1, 1, 1}, ker[3] = {1, 1, 1}, stride[3] = {1, 1, 1};
  int64_t pad[3] = {0, 0, 0}, dil[3] = {1, 1, 1};
  for (int a = 0; a < N; ++a) {
    const int b = 3 - N + a;
    in[b] = xs[2 + a];
    out[b] = ys[2 + a];
    ker[b] = ws[2 + a];
    stride[b] = o.stride[a];
    pad[b] = o.padding[a];
    dil[b] = o.dilation[a];
  }
  std::vector<double> got(want.size(), std::nan(""));
  int64_t taps_used = 0;
  for (int64_t rz = 0; rz < stride[0]; ++rz) {
    for (int64_t ry = 0; ry < stride[1]; ++ry) {
      for (int64_t rx = 0; rx < stride[2]; ++rx) {
        const int64_t r[3] = {rz, ry, rx};
        conv_detail::DataPhaseAxis ax[3];
        for (int b = 0; b < 3; ++b) {
          ax[b] = conv_detail::data_phase_axis(in[b], out[b], ker[b], stride[b], pad[b], dil[b],
                                               r[b]);
          ASSERT_GE(ax[b].pad, 0);
          ASSERT_GE(ax[b].skip, 0);
        }
        const int64_t positions = ax[0].outputs * ax[1].outputs * ax[2].outputs;
        const int64_t taps = ax[0].taps * ax[1].taps * ax[2].taps;
        taps_used += positions ? taps : 0;
        // The phase's result [batch, C, positions...] (zeros when no tap reaches it).
        std::vector<double> phase(static_cast<size_t>(batch * C * positions), 0.0);
        if (taps > 0 && positions > 0) {
          // dout less the skipped positions, the phase's weight [C, K, taps...], its options.
          Shape ds{batch, K}, fs{C, K};
          ConvOptions<N> fo;
          for (int a = 0; a < N; ++a) {
            const int b = 3 - N + a;
            ds.push_back(out[b] - ax[b].skip);
            fs.push_back(ax[b].taps);
            fo.padding[a] = ax[b].pad;
            fo.dilation[a] = ax[b].dilation;
            // As many zeros after dout as the phase's outputs need: the forward reads them.
            fo.padding_end[a] = ax[b].outputs - 1 + ax[b].dilation * (ax[b].taps - 1) -
                                (out[b] - ax[b].skip) + 1 - ax[b].pad;
            if (fo.padding_end[a] < 0) fo.padding_end[a] = 0;
          }
          std::vector<double> dsv(static_cast<size_t>(shape_numel(ds)));
          for (int64_t n = 0; n < batch; ++n)
            for (int64_t k = 0; k < K; ++k)
              for (int64_t z = 0; z < out[0] - ax[0].skip; ++z)
                for (int64_t y = 0; y < out[1] - ax[1].skip; ++y)
                  for (int64_t x = 0; x < out[2] - ax[2].skip; ++x) {
                    const int64_t zz = z + ax[0].skip, yy = y + ax[1].skip, xx = x + ax[2].skip;
                    const int64_t e1 = out[2] - ax[2].skip, e0 = out[1] - ax[1].skip;
                    dsv[(((n * K + k) * (out[0] - ax[0].skip) + z) * e0 + y) * e1 + x] =
                        dyv[(((n * K + k) * out[0] + zz) * out[1] + yy) * out[2] + xx];
                  }
          std::vector<double> fv(static_cast<size_t>(shape_numel(fs)));
          for (int64_t c = 0; c < C; ++c)
            for (int64_t k = 0; k < K; ++k)
              for (int64_t jz = 0; jz < ax[0].taps; ++jz)
                for (int64_t jy = 0; jy < ax[1].taps; ++jy)
                  for (int64_t jx = 0; jx < ax[2].taps; ++jx) {
                    const int64_t tz = ax[0].first_tap + jz * ax[0].tap_step;
                    const int64_t ty = ax[1].first_tap + jy * ax[1].tap_step;
                    const int64_t tx = ax[2].first_tap + jx * ax[2].tap_step;
                    fv[(((c * K + k) * ax[0].taps + jz) * ax[1].taps + jy) * ax[2].taps + jx] =
                        wv[(((k * C + c) * ker[0] + tz) * ker[1] + ty) * ker[2] + tx];
                  }
          const Tensor y = conv_forward<N>(host_tensor(dsv, ds, f64), host_tensor(fv, fs, f64),
                                           {}, fo);
          // The forward may give more positions than the phase has (its padding after):
          // the first `outputs` per axis are the phase's.
          const auto yv = to_doubles(y);
          int64_t ye[3] = {1, 1, 1};
          for (int a = 0; a < N; ++a) ye[3 - N + a] = y.shape()[2 + a];
          for (int b = 0; b < 3; ++b) ASSERT_GE(ye[b], ax[b].outputs);
          for (int64_t nc = 0; nc < batch * C; ++nc)
            for (int64_t z = 0; z < ax[0].outputs; ++z)
              for (int64_t yq = 0; yq < ax[1].outputs; ++yq)
                for (int64_t x = 0; x < ax[2].outputs; ++x)
                  phase[((nc * ax[0].outputs + z) * ax[1].outputs + yq) * ax[2].outputs + x] =
                      yv[((nc * ye[0] + z) * ye[1] + yq) * ye[2] + x];
        }
        // Scatter the phase to positions r + q·stride.
        for (int64_t nc = 0; nc < batch * C; ++nc)
          for (int64_t z = 0; z < ax[0].outputs; ++z)
            for (int64_t yq = 0; yq < ax[1].outputs; ++yq)
              for (int64_t x = 0; x < ax[2].outputs; ++x) {
                const int64_t iz = r[0] + z * stride[0], iy = r[1] + yq * stride[1],
                              ix = r[2] + x * stride[2];
                got[((nc * in[0] + iz) * in[1] + iy) * in[2] + ix] =
                    phase[((nc * ax[0].outputs + z) * ax[1].outputs + yq) * ax[2].outputs + x];
              }
      }
    }
  }
  EXPECT_LE(taps_used, ker[0] * ker[1] * ker[2]) << "the phases' weights overflow the workspace";
  ASSERT_EQ(got.size(), want.size());
  for (size_t e = 0; e < got.size(); ++e) {
    ASSERT_FALSE(std::isnan(got[e])) << "position " << e << " belongs to no phase";
    EXPECT_NEAR(got[e], want[e], 1e-12) << e;
  }
}

TEST(ConvReference, DataGradientIsPhasedForwardConvolutions) {
  RUDNN_SEEDED_RNG(rng);
  ConvOptions<1> d1 = opts<1>({1}, {3}, {2});
  d1.padding_end = {1};
  expect_data_gradient_is_phased_forwards<1>(rng, {2, 3, 11}, {4, 3, 5}, opts<1>({1}, {2}, {1}));
  expect_data_gradient_is_phased_forwards<1>(rng, {2, 3, 13}, {4, 3, 5}, d1);
  // Strides, with dilation sharing a factor with the stride or not, padding beyond the
  // kernel's reach (negative phase padding: skipped dout positions) and kernels shorter
  // than the stride (phases no tap reaches).
  expect_data_gradient_is_phased_forwards<1>(rng, {1, 2, 17}, {3, 2, 3}, opts<1>({2}, {1}, {1}));
  expect_data_gradient_is_phased_forwards<1>(rng, {1, 2, 19}, {3, 2, 4}, opts<1>({3}, {2}, {2}));
  expect_data_gradient_is_phased_forwards<1>(rng, {1, 2, 16}, {3, 2, 3}, opts<1>({2}, {5}, {3}));
  expect_data_gradient_is_phased_forwards<1>(rng, {1, 2, 15}, {2, 2, 1}, opts<1>({4}, {0}, {1}));
  ConvOptions<1> late = opts<1>({2}, {0}, {1});
  late.padding_end = {6};
  expect_data_gradient_is_phased_forwards<1>(rng, {1, 2, 9}, {2, 2, 3}, late);
  ConvOptions<2> d2 = opts<2>({2, 1}, {1, 0}, {1, 2});
  d2.padding_end = {0, 2};
  expect_data_gradient_is_phased_forwards<2>(rng, {1, 3, 7, 6}, {5, 3, 3, 2}, d2);
  expect_data_gradient_is_phased_forwards<2>(rng, {2, 4, 9, 8}, {6, 4, 3, 3},
                                             opts<2>({2, 2}, {1, 1}, {1, 1}));
  expect_data_gradient_is_phased_forwards<2>(rng, {2, 4, 5, 5}, {6, 4, 1, 1},
                                             opts<2>({2, 2}, {0, 0}, {1, 1}));
  expect_data_gradient_is_phased_forwards<3>(rng, {1, 2, 4, 5, 3}, {3, 2, 2, 3, 1},
                                             opts<3>({1, 2, 1}, {1, 1, 0}, {1, 1, 1}));
  // Random options in 2-D.
  for (int draw = 0; draw < 20; ++draw) {
    const auto pick = [&](int lo, int hi) {
      return static_cast<int64_t>(lo + rng.uniform(0.0f, 1.0f) * (hi - lo + 1) * 0.9999f);
    };
    ConvOptions<2> o = opts<2>({pick(1, 3), pick(1, 3)}, {pick(0, 4), pick(0, 4)},
                               {pick(1, 3), pick(1, 3)});
    o.padding_end = {pick(0, 4), pick(0, 4)};
    const int64_t kh = pick(1, 4), kw = pick(1, 4);
    const int64_t h = pick(1, 6) + o.dilation[0] * (kh - 1), w = pick(1, 6) + o.dilation[1] * (kw - 1);
    SCOPED_TRACE("draw " + std::to_string(draw));
    expect_data_gradient_is_phased_forwards<2>(rng, {1, 2, h, w}, {3, 2, kh, kw}, o);
  }
}

// ---- Causal conv1d -------------------------------------------------------------------------

TEST(CausalConv1dReference, HandValuesStateAndSilu) {
  // B = 1, L = 3, C = 2, W = 3: out[t, c] = sum_w weight[c, w] xs[t - 2 + w, c].
  const Tensor x = host_tensor({1, 10, 2, 20, 3, 30}, {1, 3, 2}, f64);
  const Tensor w = host_tensor({1, 2, 3, 0, 0, 1}, {2, 3}, f64);
  EXPECT_EQ(to_doubles(causal_conv1d(x, w, {}, {}, {}, false)),
            (std::vector<double>{3, 10, 2 + 6, 20, 1 + 4 + 9, 30}));
  const Tensor b = host_tensor({0.5, -1}, {2}, f64);
  Tensor state = host_tensor({7, 8, 70, 80}, {1, 2, 2}, f64);
  const std::vector<double> out = to_doubles(causal_conv1d(x, w, b, state, {}, false));
  EXPECT_EQ(out, (std::vector<double>{7 + 16 + 3 + 0.5, 10 - 1, 8 + 2 + 6 + 0.5, 20 - 1,
                                       1 + 4 + 9 + 0.5, 30 - 1}));
  EXPECT_EQ(to_doubles(state), (std::vector<double>{2, 3, 20, 30}));
  const std::vector<double> s = to_doubles(causal_conv1d(x, w, {}, {}, {}, true));
  EXPECT_NEAR(s[0], 3 / (1 + std::exp(-3.0)), 1e-15);
}

TEST(CausalConv1dReference, DecodeStepByStepMatchesTheWholeSequence) {
  RUDNN_SEEDED_RNG(rng);
  for (int64_t width : {1, 2, 4, 7, 10}) {
    SCOPED_TRACE(::testing::Message() << "W " << width);
    const int64_t B = 2, L = 6, C = 3;
    const Tensor x = random_tensor(rng, {B, L, C}, f64), w = random_tensor(rng, {C, width}, f64);
    const Tensor b = random_tensor(rng, {C}, f64);
    const Tensor s0 = random_tensor(rng, {B, C, width - 1}, f64);
    const Tensor whole_state = s0.to(Device::cpu());
    const Tensor whole = causal_conv1d(x, w, b, whole_state, {}, true);
    const Tensor step_state = s0.to(Device::cpu());
    // Prefill 2, then decode one step at a time.
    std::vector<double> steps = to_doubles(causal_conv1d(x.slice(1, 0, 2), w, b, step_state, {}, true));
    std::vector<std::vector<double>> per_step;
    for (int64_t t = 2; t < L; ++t) {
      per_step.push_back(to_doubles(causal_conv1d(x.slice(1, t, t + 1), w, b, step_state, {}, true)));
    }
    const std::vector<double> expected = to_doubles(whole);
    for (int64_t bb = 0; bb < B; ++bb)
      for (int64_t t = 0; t < L; ++t)
        for (int64_t c = 0; c < C; ++c) {
          const double got = t < 2 ? steps[(bb * 2 + t) * C + c] : per_step[t - 2][bb * C + c];
          EXPECT_NEAR(got, expected[(bb * L + t) * C + c], 1e-12) << bb << " " << t << " " << c;
        }
    EXPECT_TRUE(all_close(step_state, whole_state, 1e-15));
  }
}

TEST(CausalConv1dReference, VarlenMatchesSeparateSequences) {
  RUDNN_SEEDED_RNG(rng);
  const int64_t C = 3, W = 4;
  const std::vector<int64_t> lengths{3, 0, 5, 1};
  const Tensor w = random_tensor(rng, {C, W}, f64), b = random_tensor(rng, {C}, f64);
  const Tensor x = random_tensor(rng, {1, 9, C}, f64);
  const Tensor states = random_tensor(rng, {4, C, W - 1}, f64);
  const Tensor cu = Tensor::from_host(std::vector<int32_t>{0, 3, 3, 8, 9}, {5});
  Tensor packed_state = states.to(Device::cpu());
  const std::vector<double> packed = to_doubles(causal_conv1d(x, w, b, packed_state, cu, true));
  const Tensor dout = random_tensor(rng, {1, 9, C}, f64);
  const CausalConv1dGrads g = causal_conv1d_backward(dout, x, w, b, states, cu, true);
  std::vector<double> dw(C * W, 0.0), db(C, 0.0);
  int64_t start = 0;
  for (int64_t q = 0; q < 4; ++q) {
    const int64_t len = lengths[q];
    const Tensor s = states.slice(0, q, q + 1).to(Device::cpu());
    const Tensor s_initial = s.to(Device::cpu());
    if (len > 0) {
      const Tensor xq = x.slice(1, start, start + len);
      const std::vector<double> one = to_doubles(causal_conv1d(xq, w, b, s, {}, true));
      for (int64_t i = 0; i < len * C; ++i) EXPECT_NEAR(packed[start * C + i], one[i], 1e-13);
      const CausalConv1dGrads gq =
          causal_conv1d_backward(dout.slice(1, start, start + len), xq, w, b, s_initial, {}, true);
      const std::vector<double> dxq = to_doubles(gq.dx), dxp = to_doubles(g.dx);
      for (int64_t i = 0; i < len * C; ++i) EXPECT_NEAR(dxp[start * C + i], dxq[i], 1e-13);
      const std::vector<double> dsq = to_doubles(gq.dinitial_state);
      const std::vector<double> dsp = to_doubles(g.dinitial_state);
      for (int64_t i = 0; i < C * (W - 1); ++i) EXPECT_NEAR(dsp[q * C * (W - 1) + i], dsq[i], 1e-13);
      const std::vector<double> dwq = to_doubles(gq.dweight), dbq = to_doubles(gq.dbias);
      for (int64_t i = 0; i < C * W; ++i) dw[i] += dwq[i];
      for (int64_t i = 0; i < C; ++i) db[i] += dbq[i];
    }
    const std::vector<double> sp = to_doubles(packed_state);
    const std::vector<double> sq = to_doubles(s);
    for (int64_t i = 0; i < C * (W - 1); ++i) EXPECT_NEAR(sp[q * C * (W - 1) + i], sq[i], 0.0);
    start += len;
  }
  const std::vector<double> gdw = to_doubles(g.dweight), gdb = to_doubles(g.dbias);
  for (int64_t i = 0; i < C * W; ++i) EXPECT_NEAR(gdw[i], dw[i], 1e-12);
  for (int64_t i = 0; i < C; ++i) EXPECT_NEAR(gdb[i], db[i], 1e-12);
}

TEST(CausalConv1dReference, BackwardMatchesFiniteDifferences) {
  RUDNN_SEEDED_RNG(rng);
  const int64_t B = 2, L = 5, C = 2, W = 4;
  const Tensor x = random_tensor(rng, {B, L, C}, f64), w = random_tensor(rng, {C, W}, f64);
  const Tensor b = random_tensor(rng, {C}, f64), s0 = random_tensor(rng, {B, C, W - 1}, f64);
  const Tensor dout = random_tensor(rng, {B, L, C}, f64);
  const CausalConv1dGrads g = causal_conv1d_backward(dout, x, w, b, s0, {}, true);
  // The objective never updates the caller's state: each evaluation takes a copy.
  auto objective = [&](const Tensor& xt, const Tensor& wt, const Tensor& bt, const Tensor& st) {
    Tensor state = st.to(Device::cpu());
    return conv::dot(causal_conv1d(xt, wt, bt, state, {}, true), dout);
  };
  const double h = 1e-6;
  auto check = [&](const Tensor& value, const Tensor& grad, int which) {
    std::vector<double> v = to_doubles(value);
    const std::vector<double> gv = to_doubles(grad);
    for (size_t i = 0; i < v.size(); ++i) {
      auto at = [&](double delta) {
        std::vector<double> moved = v;
        moved[i] += delta;
        const Tensor t = host_tensor(moved, value.shape(), f64);
        return objective(which == 0 ? t : x, which == 1 ? t : w, which == 2 ? t : b,
                         which == 3 ? t : s0);
      };
      EXPECT_NEAR(gv[i], (at(h) - at(-h)) / (2 * h), 1e-6) << "operand " << which << " element " << i;
    }
  };
  check(x, g.dx, 0);
  check(w, g.dweight, 1);
  check(b, g.dbias, 2);
  check(s0, g.dinitial_state, 3);
}

}  // namespace
}  // namespace rudnn::test
