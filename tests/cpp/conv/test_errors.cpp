// Every rule of the convolution family's entry points: a rudnn::Error naming the op, the
// argument and the rule, thrown before any output is written.
#include "conv_test_util.h"

namespace rudnn::test {
namespace {

using conv::opts;

Tensor zeros(const Shape& s, DType dt = DType::f32) { return Tensor::zeros(s, dt); }

const ConvOptions<2> k2;

TEST(ConvErrors, RanksAndDtypes) {
  const Tensor x = zeros({1, 4, 8, 8}), w = zeros({4, 4, 3, 3});
  EXPECT_TRUE(throws_error([&] { conv_forward<2>(Tensor{}, w, {}, k2); },
                           ErrorCode::InvalidArgument, {"conv_forward: input", "undefined"}));
  EXPECT_TRUE(throws_error([&] { conv_forward<2>(x, Tensor{}, {}, k2); },
                           ErrorCode::InvalidArgument, {"conv_forward: weight", "undefined"}));
  EXPECT_TRUE(throws_error([&] { conv_forward<2>(zeros({1, 4, 8}), w, {}, k2); },
                           ErrorCode::ShapeMismatch, {"conv_forward: input", "4-d [N, C, H, W]"}));
  EXPECT_TRUE(throws_error([&] { conv_forward<2>(x, zeros({4, 4, 3}), {}, k2); },
                           ErrorCode::ShapeMismatch, {"conv_forward: weight", "[K, C/groups, kH, kW]"}));
  EXPECT_TRUE(throws_error([&] { conv_forward_nhwc<3>(zeros({1, 4, 8, 8}), w, {}, ConvOptions<3>{}); },
                           ErrorCode::ShapeMismatch, {"conv_forward_nhwc: input", "[N, D, H, W, C]"}));
  EXPECT_TRUE(throws_error([&] { conv_forward<2>(zeros({1, 4, 8, 8}, DType::i32), w, {}, k2); },
                           ErrorCode::DTypeMismatch, {"conv_forward: input", "i32"}));
  EXPECT_TRUE(throws_error([&] { conv_forward<2>(x, zeros({4, 4, 3, 3}, DType::bf16), {}, k2); },
                           ErrorCode::DTypeMismatch, {"conv_forward: weight", "bf16", "input's dtype f32"}));
  EXPECT_TRUE(throws_error([&] { conv_forward<2>(x, w, zeros({4}, DType::f16), k2); },
                           ErrorCode::DTypeMismatch, {"conv_forward: bias", "f16"}));
  EXPECT_TRUE(throws_error([&] { conv_forward<2>(x, w, zeros({5}), k2); },
                           ErrorCode::ShapeMismatch, {"conv_forward: bias", "[K]"}));
  EXPECT_TRUE(throws_error([&] { conv_forward<2>(zeros({1, 4, 0, 8}), w, {}, k2); },
                           ErrorCode::InvalidArgument, {"conv_forward: input", "empty axis"}));
  EXPECT_TRUE(throws_error([&] { plan_conv<2>(ConvDirection::Forward, {1, 4, 8, 8}, {4, 4, 3, 3},
                                              DType::i64, Device::cpu(), k2); },
                           ErrorCode::DTypeMismatch, {"plan_conv: dtype is i64"}));
  EXPECT_TRUE(throws_error([&] { plan_conv<2>(ConvDirection::Forward, {1, 4, 8, 8}, {4, 4, 3, 3},
                                              DType::f64, Device::cuda(0), k2); },
                           ErrorCode::DTypeMismatch, {"plan_conv: dtype is f64", "on the CPU"}));
}

TEST(ConvErrors, ChannelsAndGroups) {
  const Tensor x = zeros({1, 6, 8, 8});
  EXPECT_TRUE(throws_error([&] { conv_forward<2>(x, zeros({4, 2, 3, 3}), {}, opts<2>({1, 1}, {0, 0}, {1, 1}, 0)); },
                           ErrorCode::InvalidArgument, {"conv_forward: options.groups is 0", ">= 1"}));
  EXPECT_TRUE(throws_error([&] { conv_forward<2>(x, zeros({4, 2, 3, 3}), {}, opts<2>({1, 1}, {0, 0}, {1, 1}, 4)); },
                           ErrorCode::InvalidArgument, {"conv_forward: input has 6 channels", "groups is 4", "divide"}));
  EXPECT_TRUE(throws_error([&] { conv_forward<2>(x, zeros({4, 2, 3, 3}), {}, opts<2>({1, 1}, {0, 0}, {1, 1}, 3)); },
                           ErrorCode::InvalidArgument, {"conv_forward: weight", "K = 4", "divisible by groups"}));
  EXPECT_TRUE(throws_error([&] { conv_forward<2>(x, zeros({6, 3, 3, 3}), {}, opts<2>({1, 1}, {0, 0}, {1, 1}, 3)); },
                           ErrorCode::ShapeMismatch, {"conv_forward: weight", "C/groups = 2"}));
  EXPECT_TRUE(throws_error([&] { conv_forward<2>(x, zeros({0, 6, 3, 3}), {}, k2); },
                           ErrorCode::InvalidArgument, {"conv_forward: weight", "K = 0"}));
  EXPECT_TRUE(throws_error([&] { conv_forward_nhwc<2>(zeros({1, 8, 8, 6}), zeros({4, 3, 3, 3}), {}, opts<2>({1, 1}, {0, 0}, {1, 1}, 3)); },
                           ErrorCode::InvalidArgument, {"conv_forward_nhwc:", "K = 4"}));
  EXPECT_TRUE(throws_error([&] { conv_forward_nhwc<2>(zeros({1, 8, 8, 6}), zeros({6, 3, 3, 3}), {}, k2); },
                           ErrorCode::ShapeMismatch, {"conv_forward_nhwc: weight", "[K, kH, kW, C/groups]", "C/groups = 6"}));
}

TEST(ConvErrors, StrideDilationPaddingAndOutputSize) {
  const Tensor x = zeros({1, 2, 5, 5}), w = zeros({2, 2, 3, 3});
  EXPECT_TRUE(throws_error([&] { conv_forward<2>(x, w, {}, opts<2>({1, 0}, {0, 0}, {1, 1})); },
                           ErrorCode::InvalidArgument, {"conv_forward: options.stride is 0", "spatial axis 1", ">= 1"}));
  EXPECT_TRUE(throws_error([&] { conv_forward<2>(x, w, {}, opts<2>({1, 1}, {0, 0}, {-1, 1})); },
                           ErrorCode::InvalidArgument, {"conv_forward: options.stride", "dilation is -1"}));
  EXPECT_TRUE(throws_error([&] { conv_forward<2>(x, w, {}, opts<2>({1, 1}, {0, -1}, {1, 1})); },
                           ErrorCode::InvalidArgument, {"conv_forward: options.padding is -1", "padding >= 0"}));
  ConvOptions<2> o;
  o.padding_end = {0, -2};
  EXPECT_TRUE(throws_error([&] { conv_forward<2>(x, w, {}, o); }, ErrorCode::InvalidArgument,
                           {"conv_forward: options.padding", "padding_end is -2"}));
  EXPECT_TRUE(throws_error([&] { conv_forward<2>(x, zeros({2, 2, 6, 3}), {}, k2); },
                           ErrorCode::InvalidArgument, {"conv_forward: input size 5", "kernel 6", "output size < 1"}));
  EXPECT_TRUE(throws_error([&] { conv_forward<2>(x, w, {}, opts<2>({1, 1}, {0, 0}, {3, 1})); },
                           ErrorCode::InvalidArgument, {"conv_forward: input size 5", "dilation 3", "output size < 1"}));
  EXPECT_TRUE(throws_error([&] { conv_forward<2>(x, zeros({2, 2, 0, 3}), {}, k2); },
                           ErrorCode::ShapeMismatch, {"conv_forward: weight", "kernel sizes >= 1"}));
  // The padding fits: 5 + 1 + 0 = 6 for a kernel of 6.
  o = ConvOptions<2>{};
  o.padding = {1, 0};
  o.padding_end = {0, 0};
  EXPECT_EQ(conv_forward<2>(x, zeros({2, 2, 6, 3}), {}, o).shape(), (Shape{1, 2, 1, 3}));
}

TEST(ConvErrors, EpilogueAndOutputs) {
  const Tensor x = zeros({1, 2, 5, 5}), w = zeros({3, 2, 3, 3});
  ConvEpilogue e;
  e.residual = zeros({1, 3, 3, 4});
  EXPECT_TRUE(throws_error([&] { conv_forward<2>(x, w, {}, k2, ConvStrategy::Auto, e); },
                           ErrorCode::ShapeMismatch, {"conv_forward: residual", "output's shape"}));
  e.residual = zeros({1, 3, 3, 3}, DType::f16);
  EXPECT_TRUE(throws_error([&] { conv_forward<2>(x, w, {}, k2, ConvStrategy::Auto, e); },
                           ErrorCode::DTypeMismatch, {"conv_forward: residual", "f16"}));
  const Tensor out = Tensor::full({1, 3, 3, 3}, 7.0, DType::f32);
  const std::vector<double> before = to_doubles(out);
  EXPECT_TRUE(throws_error([&] { conv_forward_into<2>(zeros({1, 3, 3, 4}), x, w, {}, k2); },
                           ErrorCode::ShapeMismatch, {"conv_forward: out", "[1, 3, 3, 3]"}));
  EXPECT_TRUE(throws_error([&] { conv_forward_into<2>(zeros({1, 3, 3, 3}, DType::f16), x, w, {}, k2); },
                           ErrorCode::DTypeMismatch, {"conv_forward: out", "f16"}));
  EXPECT_TRUE(throws_error([&] { conv_forward_into<2>(zeros({1, 3, 3, 6}).slice(3, 0, 6, 2), x, w, {}, k2); },
                           ErrorCode::InvalidArgument, {"conv_forward: out", "contiguous or channels-last"}));
  EXPECT_TRUE(throws_error([&] { conv_forward_nhwc_into<2>(conv::channels_last_view(zeros({1, 3, 3, 3})),
                                                           zeros({1, 5, 5, 2}), zeros({3, 3, 3, 2}), {}, k2); },
                           ErrorCode::InvalidArgument, {"conv_forward_nhwc: out", "expected contiguous"}));
  // An out overlapping the input, and a bad call after which out is untouched.
  const Tensor square = zeros({1, 2, 3, 3});
  EXPECT_TRUE(throws_error([&] { conv_forward_into<2>(square, square, zeros({2, 2, 1, 1}), {}, k2); },
                           ErrorCode::InvalidArgument, {"conv_forward: out", "overlaps input"}));
  e.residual = out;
  EXPECT_TRUE(throws_error([&] { conv_forward_into<2>(out, x, w, {}, k2, ConvStrategy::Auto, e); },
                           ErrorCode::InvalidArgument, {"conv_forward: out", "overlaps residual"}));
  EXPECT_TRUE(throws_error([&] { conv_forward_into<2>(out, x, w, zeros({4}), k2); },
                           ErrorCode::ShapeMismatch, {"conv_forward: bias"}));
  EXPECT_EQ(to_doubles(out), before);
}

TEST(ConvErrors, ImplicitGemmIsNotBuiltYet) {
  const Tensor x = zeros({1, 4, 8, 8}), w = zeros({4, 4, 3, 3});
  EXPECT_TRUE(throws_error([&] { conv_forward<2>(x, w, {}, k2, ConvStrategy::ImplicitGemm); },
                           ErrorCode::Unsupported, {"conv_forward: strategy ImplicitGemm", "not built yet"}));
  EXPECT_TRUE(throws_error([&] { conv_data_backward<2>(zeros({1, 4, 6, 6}), w, {1, 4, 8, 8}, k2, ConvStrategy::ImplicitGemm); },
                           ErrorCode::Unsupported, {"conv_data_backward: strategy ImplicitGemm"}));
  EXPECT_TRUE(throws_error([&] { conv_weight_backward<2>(zeros({1, 4, 6, 6}), x, {4, 4, 3, 3}, k2, false, ConvStrategy::ImplicitGemm); },
                           ErrorCode::Unsupported, {"conv_weight_backward: strategy ImplicitGemm"}));
  EXPECT_TRUE(throws_error([&] { plan_conv<2>(ConvDirection::Forward, {1, 4, 8, 8}, {4, 4, 3, 3}, DType::bf16, Device::cuda(0), k2, ConvStrategy::ImplicitGemm); },
                           ErrorCode::Unsupported, {"plan_conv: strategy ImplicitGemm", "channels-last", "C % 8 == 0"}));
  EXPECT_TRUE(throws_error([&] { plan_conv<2>(ConvDirection::Forward, {1, 8, 8, 12}, {4, 3, 3, 12}, DType::bf16, Device::cuda(0), k2, ConvStrategy::ImplicitGemm, ConvLayout::Nhwc); },
                           ErrorCode::Unsupported, {"plan_conv: strategy ImplicitGemm", "input with 12 channels"}));
  const ConvPlan gemm = plan_conv<2>(ConvDirection::Forward, {1, 8, 8, 16}, {4, 3, 3, 16}, DType::bf16,
                                     Device::cuda(0), k2, ConvStrategy::ImplicitGemm, ConvLayout::Nhwc);
  EXPECT_EQ(gemm.kernel, ConvKernel::ImplicitGemm);
  // The op decides on the operands' strides: contiguous NCHW bf16 is refused, the same values
  // as channels-last views are taken (on the CPU: the reference runs).
  const Tensor xb = zeros({1, 16, 6, 6}, DType::bf16), wb = zeros({8, 16, 3, 3}, DType::bf16);
  EXPECT_TRUE(throws_error([&] { conv_forward<2>(xb, wb, {}, k2, ConvStrategy::ImplicitGemm); },
                           ErrorCode::Unsupported, {"conv_forward: strategy ImplicitGemm", "channels-last"}));
  EXPECT_NO_THROW(conv_forward<2>(conv::channels_last_view(xb), conv::channels_last_view(wb), {}, k2,
                                  ConvStrategy::ImplicitGemm));
  EXPECT_NO_THROW(conv_forward_nhwc<2>(zeros({1, 6, 6, 16}, DType::f16), zeros({8, 3, 3, 16}, DType::f16), {},
                                       k2, ConvStrategy::ImplicitGemm));
  // The documented substitutions run: grouped, and 3-D F32.
  EXPECT_NO_THROW(conv_forward<2>(x, zeros({4, 2, 3, 3}), {}, opts<2>({1, 1}, {0, 0}, {1, 1}, 2), ConvStrategy::ImplicitGemm));
  EXPECT_NO_THROW(conv_forward<3>(zeros({1, 2, 3, 3, 3}), zeros({2, 2, 1, 1, 1}), {}, ConvOptions<3>{}, ConvStrategy::ImplicitGemm));
}

// ImplicitGemm's data gradient: bf16/f16, channels-last dout with K % 8 == 0, any stride,
// padding and dilation; the weight gradient is not built.
TEST(ConvErrors, ImplicitGemmDataGradientRules) {
  const Device gpu = Device::cuda(0);
  const auto plan = [&](const Shape& w, const ConvOptions<2>& o, ConvLayout layout,
                        ConvDirection d = ConvDirection::DataBackward) {
    // [1, 8, 8, 8]: N, C, H, W or N, H, W, C, eight channels either way.
    return plan_conv<2>(d, {1, 8, 8, 8}, w, DType::bf16, gpu, o, ConvStrategy::ImplicitGemm, layout);
  };
  const ConvOptions<2> same = opts<2>({1, 1}, {1, 1}, {1, 1});
  for (const ConvOptions<2>& o : {same, opts<2>({2, 1}, {1, 1}, {1, 1}), opts<2>({1, 1}, {3, 1}, {1, 2})}) {
    const ConvPlan ok = plan({8, 3, 3, 8}, o, ConvLayout::Nhwc);
    EXPECT_EQ(ok.kernel, ConvKernel::ImplicitGemm);
    EXPECT_EQ(ok.workspace_bytes, 9u * 8 * 8 * 2) << "the flipped weight";
    EXPECT_NE(ok.why.find("flipped weight"), std::string::npos) << ok.why;
  }
  EXPECT_TRUE(throws_error([&] { plan({4, 3, 3, 8}, same, ConvLayout::Nhwc); }, ErrorCode::Unsupported,
                           {"plan_conv: strategy ImplicitGemm: dout with 4 channels", "K % 8 == 0"}));
  EXPECT_TRUE(throws_error([&] { plan({8, 8, 3, 3}, same, ConvLayout::Nchw); }, ErrorCode::Unsupported,
                           {"plan_conv: strategy ImplicitGemm: dout with 8 channels", "channels-last dout"}));
  EXPECT_TRUE(throws_error([&] { plan({8, 3, 3, 8}, same, ConvLayout::Nhwc, ConvDirection::WeightBackward); },
                           ErrorCode::Unsupported,
                           {"plan_conv: strategy ImplicitGemm: the implicit-GEMM weight gradient kernel is not built yet"}));
  // Auto keeps the data gradient on Direct.
  EXPECT_EQ(plan_conv<2>(ConvDirection::DataBackward, {1, 8, 8, 8}, {8, 3, 3, 8}, DType::bf16, gpu, same,
                         ConvStrategy::Auto, ConvLayout::Nhwc)
                .kernel,
            ConvKernel::Direct);
}

TEST(ConvErrors, BackwardOperands) {
  const Tensor x = zeros({1, 2, 5, 5}), w = zeros({3, 2, 3, 3}), dy = zeros({1, 3, 3, 3});
  EXPECT_TRUE(throws_error([&] { conv_data_backward<2>(zeros({1, 3, 3, 4}), w, x.shape(), k2); },
                           ErrorCode::ShapeMismatch, {"conv_data_backward: dout", "output's shape"}));
  EXPECT_TRUE(throws_error([&] { conv_data_backward<2>(dy, zeros({3, 2, 3, 3}, DType::f16), x.shape(), k2); },
                           ErrorCode::DTypeMismatch, {"conv_data_backward: weight", "f16"}));
  EXPECT_TRUE(throws_error([&] { conv_data_backward<2>(dy, w, {1, 2, 5}, k2); },
                           ErrorCode::ShapeMismatch, {"conv_data_backward: input has shape [1, 2, 5]"}));
  EXPECT_TRUE(throws_error([&] { conv_data_backward_into<2>(Tensor{}, dy, w, k2); },
                           ErrorCode::InvalidArgument, {"conv_data_backward: dinput_out", "undefined"}));
  EXPECT_TRUE(throws_error([&] { conv_data_backward_into<2>(zeros({1, 2, 5, 5}, DType::bf16), dy, w, k2); },
                           ErrorCode::DTypeMismatch, {"conv_data_backward: dinput_out", "bf16"}));
  EXPECT_TRUE(throws_error([&] { conv_weight_backward<2>(zeros({1, 3, 4, 3}), x, w.shape(), k2, true); },
                           ErrorCode::ShapeMismatch, {"conv_weight_backward: dout"}));
  EXPECT_TRUE(throws_error([&] { conv_weight_backward<2>(dy, zeros({1, 2, 5, 5}, DType::f16), w.shape(), k2, true); },
                           ErrorCode::DTypeMismatch, {"conv_weight_backward: input", "f16"}));
  EXPECT_TRUE(throws_error([&] { conv_weight_backward<2>(dy, x, {3, 1, 3, 3}, k2, true); },
                           ErrorCode::ShapeMismatch, {"conv_weight_backward: weight", "C/groups = 2"}));
  EXPECT_TRUE(throws_error([&] { conv_weight_backward_into<2>(zeros({3, 2, 3, 3}), zeros({4}), dy, x, k2); },
                           ErrorCode::ShapeMismatch, {"conv_weight_backward: dbias_out", "[3]"}));
  const Tensor dw = zeros({3, 2, 3, 3});
  EXPECT_TRUE(throws_error([&] { conv_weight_backward_into<2>(dw, dw.view({54}).slice(0, 0, 3), dy, x, k2); },
                           ErrorCode::InvalidArgument, {"conv_weight_backward: dweight_out", "overlaps dbias_out"}));
  EXPECT_TRUE(throws_error([&] { conv_weight_backward_into<2>(dw.transpose(2, 3), Tensor{}, dy, x, k2); },
                           ErrorCode::InvalidArgument, {"conv_weight_backward: dweight_out", "contiguous"}));
}

TEST(ConvErrors, DeviceMismatch) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device: device mismatch needs two devices";
  const Tensor x = zeros({1, 2, 5, 5}), w = zeros({3, 2, 3, 3});
  EXPECT_TRUE(throws_error([&] { conv_forward<2>(x, w.to(Device::cuda(0)), {}, k2); },
                           ErrorCode::DeviceMismatch, {"conv_forward: weight"}));
  EXPECT_TRUE(throws_error([&] { conv_forward<2>(Tensor::zeros({1, 2, 5, 5}, DType::f64, Device::cuda(0)), w, {}, k2); },
                           ErrorCode::DTypeMismatch, {"conv_forward: input", "f64"}));
  EXPECT_TRUE(throws_error([&] { causal_conv1d(zeros({1, 4, 2}).to(Device::cuda(0)), zeros({2, 4}), {}, {}, {}, false); },
                           ErrorCode::DeviceMismatch, {"causal_conv1d: weight"}));
}

TEST(CausalConv1dErrors, Shapes) {
  const Tensor x = zeros({2, 5, 3}), w = zeros({3, 4});
  EXPECT_TRUE(throws_error([&] { causal_conv1d(zeros({5, 3}), w, {}, {}, {}, false); },
                           ErrorCode::ShapeMismatch, {"causal_conv1d: x", "[B, L, C]"}));
  EXPECT_TRUE(throws_error([&] { causal_conv1d(x, zeros({4, 4}), {}, {}, {}, false); },
                           ErrorCode::ShapeMismatch, {"causal_conv1d: weight", "C = 3", "W >= 1"}));
  EXPECT_TRUE(throws_error([&] { causal_conv1d(x, zeros({3, 0}), {}, {}, {}, false); },
                           ErrorCode::ShapeMismatch, {"causal_conv1d: weight", "W >= 1"}));
  EXPECT_TRUE(throws_error([&] { causal_conv1d(x, zeros({3, 4}, DType::f16), {}, {}, {}, false); },
                           ErrorCode::DTypeMismatch, {"causal_conv1d: weight", "f16"}));
  EXPECT_TRUE(throws_error([&] { causal_conv1d(x, w, zeros({4}), {}, {}, false); },
                           ErrorCode::ShapeMismatch, {"causal_conv1d: bias", "[C]"}));
  EXPECT_TRUE(throws_error([&] { causal_conv1d(x, w, {}, zeros({2, 3, 4}), {}, false); },
                           ErrorCode::ShapeMismatch, {"causal_conv1d: conv_state", "W - 1"}));
  EXPECT_TRUE(throws_error([&] { causal_conv1d(x, w, {}, zeros({2, 6, 3}).slice(1, 0, 6, 2), {}, false); },
                           ErrorCode::InvalidArgument, {"causal_conv1d: conv_state", "contiguous", "in place"}));
  EXPECT_TRUE(throws_error([&] { causal_conv1d(x, w, {}, {}, zeros({3}, DType::i32), false); },
                           ErrorCode::ShapeMismatch, {"causal_conv1d: x", "batch 1"}));
  const Tensor packed = zeros({1, 5, 3});
  EXPECT_TRUE(throws_error([&] { causal_conv1d(packed, w, {}, {}, zeros({3}, DType::i64), false); },
                           ErrorCode::DTypeMismatch, {"causal_conv1d: cu_seqlens", "i64"}));
  EXPECT_TRUE(throws_error([&] { causal_conv1d(packed, w, {}, {}, zeros({1}, DType::i32), false); },
                           ErrorCode::ShapeMismatch, {"causal_conv1d: cu_seqlens", "S >= 1"}));
  const Tensor bad_cu = Tensor::from_host(std::vector<int32_t>{0, 3, 2, 5}, {4});
  EXPECT_TRUE(throws_error([&] { causal_conv1d(packed, w, {}, {}, bad_cu, false); },
                           ErrorCode::InvalidArgument, {"causal_conv1d: cu_seqlens", "non-decreasing from 0 to L = 5"}));
  const Tensor short_cu = Tensor::from_host(std::vector<int32_t>{0, 3, 4}, {3});
  EXPECT_TRUE(throws_error([&] { causal_conv1d(packed, w, {}, {}, short_cu, false); },
                           ErrorCode::InvalidArgument, {"causal_conv1d: cu_seqlens"}));
  const Tensor cu = Tensor::from_host(std::vector<int32_t>{0, 3, 5}, {3});
  EXPECT_TRUE(throws_error([&] { causal_conv1d(packed, w, {}, zeros({1, 3, 3}), cu, false); },
                           ErrorCode::ShapeMismatch, {"causal_conv1d: conv_state", "S with cu_seqlens"}));
  EXPECT_NO_THROW(causal_conv1d(packed, w, {}, zeros({2, 3, 3}), cu, false));
}

TEST(CausalConv1dErrors, OutputsAndBackward) {
  const Tensor x = zeros({2, 5, 3}), w = zeros({3, 4}), b = zeros({3});
  const Tensor state = zeros({2, 3, 3});
  EXPECT_TRUE(throws_error([&] { causal_conv1d_into(zeros({2, 5, 4}), x, w, {}, {}, {}, false); },
                           ErrorCode::ShapeMismatch, {"causal_conv1d: out"}));
  EXPECT_TRUE(throws_error([&] { causal_conv1d_into(x, x, w, {}, {}, {}, false); },
                           ErrorCode::InvalidArgument, {"causal_conv1d: out", "overlaps x"}));
  EXPECT_TRUE(throws_error([&] { causal_conv1d_into(zeros({2, 5, 3}), x, w, {}, x.view({30}).slice(0, 0, 18).view({2, 3, 3}), {}, false); },
                           ErrorCode::InvalidArgument, {"causal_conv1d: conv_state", "overlaps x"}));
  const Tensor dy = zeros({2, 5, 3});
  EXPECT_TRUE(throws_error([&] { causal_conv1d_backward(zeros({2, 4, 3}), x, w, b, state, {}, true); },
                           ErrorCode::ShapeMismatch, {"causal_conv1d_backward: dout"}));
  EXPECT_TRUE(throws_error([&] { causal_conv1d_backward(dy, x, w, b, zeros({2, 3, 2}), {}, true); },
                           ErrorCode::ShapeMismatch, {"causal_conv1d_backward: initial_state"}));
  EXPECT_TRUE(throws_error([&] { causal_conv1d_backward_into(zeros({2, 5, 3}), zeros({3, 4}), Tensor{}, Tensor{}, dy, x, w, b, {}, {}, false); },
                           ErrorCode::InvalidArgument, {"causal_conv1d_backward: dbias_out is undefined", "both or neither"}));
  EXPECT_TRUE(throws_error([&] { causal_conv1d_backward_into(zeros({2, 5, 3}), zeros({3, 4}), Tensor{}, zeros({2, 3, 3}), dy, x, w, {}, {}, {}, false); },
                           ErrorCode::InvalidArgument, {"causal_conv1d_backward: dinitial_state_out is defined"}));
  const Tensor dx = zeros({2, 5, 3});
  EXPECT_TRUE(throws_error([&] { causal_conv1d_backward_into(dx, zeros({3, 4}), Tensor{}, Tensor{}, dx, x, w, {}, {}, {}, false); },
                           ErrorCode::InvalidArgument, {"causal_conv1d_backward: dx_out", "overlaps dout"}));
  EXPECT_TRUE(throws_error([&] { causal_conv1d_backward_into(dx, zeros({3, 5}), Tensor{}, Tensor{}, dy, x, w, {}, {}, {}, false); },
                           ErrorCode::ShapeMismatch, {"causal_conv1d_backward: dweight_out"}));
}

}  // namespace
}  // namespace rudnn::test
