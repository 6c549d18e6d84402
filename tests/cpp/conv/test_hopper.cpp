// The Hopper implicit-GEMM forward (src/conv/cuda/hopper_conv.cu: the GEMM's TMA + wgmma
// kernel with the convolution's A loader and row map) against the float64 reference: 3x3
// pad 1 at strides 1 and 2, 1x1 (the pointwise GEMM form and strided), 5x5, dilation 2, 3-D
// 3x3x3, widths and heights off the tile, N = 1, C = 8 .. 256 (C % 64 != 0 included), K =
// 64 / 96 / 256, both 16-bit dtypes, the fused epilogue; and the cases that must fall back
// to the mma.sync kernel still right. Skipped without a compute capability 9.0 device.
#include <sstream>

#include "conv_test_util.h"

namespace rudnn::test {
namespace {

using conv::opts;
const Device kGpu = Device::cuda(0);

#define RUDNN_REQUIRE_HOPPER()                                                        \
  do {                                                                                \
    RUDNN_REQUIRE_CUDA();                                                             \
    if (!device_is_sm90()) GTEST_SKIP() << "not a compute capability 9.0 device";      \
  } while (0)

template <int N>
struct Case {
  Shape input, weight;  // NCHW-style
  ConvOptions<N> o;
};

template <int N>
std::string describe(const Case<N>& c, DType dt, ConvActivation a, bool bias, bool residual) {
  std::ostringstream s;
  s << N << "-D " << dtype_name(dt) << " input " << shape_str(c.input) << " weight "
    << shape_str(c.weight) << " stride [";
  for (int i = 0; i < N; ++i) s << c.o.stride[i] << (i + 1 < N ? ", " : "]");
  s << " padding [";
  for (int i = 0; i < N; ++i) s << c.o.padding[i] << (i + 1 < N ? ", " : "]");
  s << " dilation [";
  for (int i = 0; i < N; ++i) s << c.o.dilation[i] << (i + 1 < N ? ", " : "]");
  s << " activation " << static_cast<int>(a) << " bias " << bias << " residual " << residual;
  return s.str();
}

// conv_forward_nhwc_into on the GPU against the reference of the same rounded values; the
// plan must report the Hopper kernel when `hopper` (else the mma.sync one).
template <int N>
void check(Rng& rng, DType dt, const Case<N>& c, ConvActivation activation = ConvActivation::None,
           bool with_bias = false, bool residual = false, bool hopper = true) {
  SCOPED_TRACE(describe(c, dt, activation, with_bias, residual));
  const Tensor x = random_tensor(rng, c.input, dt), w = random_tensor(rng, c.weight, dt);
  const Tensor b = with_bias ? random_tensor(rng, {c.weight[0]}, dt) : Tensor{};
  ConvEpilogue e;
  e.activation = activation;
  const Shape ys = conv_forward<N>(Tensor::zeros(c.input, DType::f64),
                                   Tensor::zeros(c.weight, DType::f64), {}, c.o)
                       .shape();
  if (residual) e.residual = random_tensor(rng, ys, dt);
  const Tensor expected = conv_forward<N>(x, w, b, c.o, ConvStrategy::Auto, e);
  const Tensor xn = conv::to_nhwc(x).to(kGpu), wn = conv::to_nhwc(w).to(kGpu);
  const Tensor bd = with_bias ? b.to(kGpu) : Tensor{};
  const ConvPlan plan = plan_conv<N>(ConvDirection::Forward, xn.shape(), wn.shape(), dt, kGpu,
                                     c.o, ConvStrategy::Auto, ConvLayout::Nhwc);
  EXPECT_EQ(plan.kernel, ConvKernel::ImplicitGemm) << plan.why;
  EXPECT_EQ(plan.why.find("Hopper") != std::string::npos, hopper) << plan.why;
  ConvEpilogue d_e;
  d_e.activation = activation;
  if (residual) d_e.residual = conv::to_nhwc(e.residual).to(kGpu);
  const Tensor y = poisoned(conv::to_nhwc(expected).shape(), dt, kGpu);
  conv_forward_nhwc_into<N>(y, xn, wn, bd, c.o, ConvStrategy::Auto, d_e);
  EXPECT_TRUE(all_close(conv::from_nhwc(y.to_host()), expected)) << "nhwc";
  EXPECT_TRUE(bit_equal(xn.to_host(), conv::to_nhwc(x))) << "input changed";
  EXPECT_TRUE(bit_equal(wn.to_host(), conv::to_nhwc(w))) << "weight changed";
  // The functional form over channels-last views (its output is channels-last dense).
  if (N >= 2) {
    ConvEpilogue v_e;
    v_e.activation = activation;
    if (residual) v_e.residual = conv::channels_last_view(e.residual, kGpu);
    const Tensor yv = conv_forward<N>(conv::channels_last_view(x, kGpu),
                                      conv::channels_last_view(w, kGpu), bd, c.o,
                                      ConvStrategy::ImplicitGemm, v_e);
    EXPECT_TRUE(all_close(yv.to_host().contiguous(), expected)) << "channels-last views";
  }
}

template <int N>
Case<N> make(Shape input, Shape weight, ConvOptions<N> o) {
  return {std::move(input), std::move(weight), o};
}

const Case<2> k3x3 = make<2>({2, 64, 13, 11}, {64, 64, 3, 3}, opts<2>({1, 1}, {1, 1}, {1, 1}));

TEST(HopperConvGpu, PlanReportsTheHopperKernel) {
  RUDNN_REQUIRE_HOPPER();
  // The anchor: conv2d bf16 NHWC N32 C256 56x56 K256 3x3.
  const ConvPlan plan =
      plan_conv<2>(ConvDirection::Forward, {32, 56, 56, 256}, {256, 3, 3, 256}, DType::bf16, kGpu,
                   opts<2>({1, 1}, {1, 1}, {1, 1}), ConvStrategy::Auto, ConvLayout::Nhwc);
  EXPECT_EQ(plan.kernel, ConvKernel::ImplicitGemm);
  EXPECT_NE(plan.why.find("Hopper"), std::string::npos) << plan.why;
  // NCHW shapes are taken to be NCHW-contiguous: not the implicit GEMM at all.
  EXPECT_NE(plan_conv<2>(ConvDirection::Forward, {32, 256, 56, 56}, {256, 256, 3, 3}, DType::bf16,
                         kGpu, opts<2>({1, 1}, {1, 1}, {1, 1}))
                .kernel,
            ConvKernel::ImplicitGemm);
}

TEST(HopperConvGpu, Conv2dMatchesReference) {
  RUDNN_REQUIRE_HOPPER();
  RUDNN_SEEDED_RNG(rng);
  const std::vector<Case<2>> cases = {
      k3x3,
      make<2>({1, 128, 15, 17}, {96, 128, 3, 3}, opts<2>({2, 2}, {1, 1}, {1, 1})),   // s2, K 96
      make<2>({2, 256, 9, 10}, {256, 256, 1, 1}, opts<2>({1, 1}, {0, 0}, {1, 1})),   // 1x1 GEMM
      make<2>({2, 64, 14, 13}, {128, 64, 1, 1}, opts<2>({2, 2}, {0, 0}, {1, 1})),    // 1x1 s2
      make<2>({1, 64, 12, 9}, {64, 64, 5, 5}, opts<2>({1, 1}, {2, 2}, {1, 1})),      // 5x5
      make<2>({1, 64, 11, 16}, {96, 64, 3, 3}, opts<2>({1, 1}, {2, 2}, {2, 2})),     // dilation 2
      make<2>({1, 64, 5, 56}, {64, 64, 3, 3}, opts<2>({1, 1}, {1, 1}, {1, 1})),      // W 56
      make<2>({3, 128, 7, 7}, {128, 128, 3, 3}, opts<2>({1, 1}, {1, 1}, {1, 1})),    // 7x7 images
      make<2>({2, 40, 9, 8}, {64, 40, 3, 3}, opts<2>({1, 1}, {1, 1}, {1, 1})),       // C % 64
      make<2>({1, 8, 6, 7}, {64, 8, 3, 3}, opts<2>({1, 1}, {0, 0}, {1, 1})),         // C 8
      make<2>({1, 64, 19, 9}, {256, 64, 3, 2}, opts<2>({2, 1}, {1, 0}, {1, 1})),     // mixed
  };
  for (DType dt : {DType::bf16, DType::f16}) {
    for (const auto& c : cases) check<2>(rng, dt, c);
  }
}

TEST(HopperConvGpu, EpilogueMatchesReference) {
  RUDNN_REQUIRE_HOPPER();
  RUDNN_SEEDED_RNG(rng);
  const Case<2> pointwise =
      make<2>({2, 64, 7, 9}, {96, 64, 1, 1}, opts<2>({1, 1}, {0, 0}, {1, 1}));
  for (DType dt : {DType::bf16, DType::f16}) {
    check<2>(rng, dt, k3x3, ConvActivation::Relu, true, true);
    check<2>(rng, dt, k3x3, ConvActivation::Gelu, true, false);
    check<2>(rng, dt, k3x3, ConvActivation::Silu, false, true);
    check<2>(rng, dt, pointwise, ConvActivation::Relu, true, true);
  }
}

TEST(HopperConvGpu, Conv1dAndConv3dMatchReference) {
  RUDNN_REQUIRE_HOPPER();
  RUDNN_SEEDED_RNG(rng);
  for (DType dt : {DType::bf16, DType::f16}) {
    check<1>(rng, dt, make<1>({2, 64, 37}, {96, 64, 5}, opts<1>({2}, {2}, {1})),
             ConvActivation::Silu, true, false);
    check<3>(rng, dt, make<3>({2, 64, 4, 6, 5}, {64, 64, 3, 3, 3},
                              opts<3>({1, 1, 1}, {1, 1, 1}, {1, 1, 1})),
             ConvActivation::None, true, true);
    check<3>(rng, dt, make<3>({1, 32, 5, 9, 8}, {256, 32, 3, 3, 3},
                              opts<3>({2, 2, 2}, {1, 1, 1}, {1, 1, 1})));
  }
}

// What the Hopper kernel does not take runs the mma.sync kernel, and is right: an NCHW
// output under a channels-last input, a stride above TMA's traversal limit of 8.
TEST(HopperConvGpu, FallbacksMatchReference) {
  RUDNN_REQUIRE_HOPPER();
  RUDNN_SEEDED_RNG(rng);
  const DType dt = DType::bf16;
  {
    SCOPED_TRACE("NCHW output of a channels-last input");
    const Tensor x = random_tensor(rng, k3x3.input, dt), w = random_tensor(rng, k3x3.weight, dt);
    const Tensor expected = conv_forward<2>(x, w, {}, k3x3.o);
    const Tensor y = poisoned(expected.shape(), dt, kGpu);
    conv_forward_into<2>(y, conv::channels_last_view(x, kGpu), conv::channels_last_view(w, kGpu),
                         {}, k3x3.o, ConvStrategy::ImplicitGemm);
    EXPECT_TRUE(all_close(y.to_host(), expected));
  }
  check<2>(rng, dt, make<2>({1, 64, 30, 29}, {64, 64, 3, 3}, opts<2>({9, 9}, {1, 1}, {1, 1})),
           ConvActivation::None, true, false, /*hopper=*/false);
}

}  // namespace
}  // namespace rudnn::test
