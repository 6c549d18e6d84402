// Convolution: 1-D, 2-D and 3-D cross-correlation (torch's conv{1,2,3}d) forward, data and
// weight backward, with stride, padding (symmetric or per side), dilation and groups
// (depthwise included), an optional fused epilogue, and the causal depthwise conv1d of Mamba
// and linear-attention layers as its own op.
//
// Layouts. The NCHW-style functions take input [N, C, spatial...], weight [K, C/groups,
// kernel...] and give [N, K, out...]; any strides are read in place (no dense copy), so a
// torch channels_last tensor (logical NCHW, NHWC in memory) runs channels-last without a
// conversion pass, and the functional forms give their output in the input's memory order
// (channels-last in, channels-last out, as torch). The `_nhwc` functions take channels-last
// shapes directly: input [N, spatial..., C], weight [K, kernel..., C/groups], output
// [N, out..., K]. `_into` outputs must be dense in either the logical order or, for the
// NCHW-style forms, the channels-last order of their shape.
//
// Dtypes: F32, F16, BF16 on the GPU with FP32 accumulation and one rounding per output;
// F64 and the same three on the CPU, where the float64 reference computes (whatever the
// strategy). Weight, bias and residual share the input's dtype. The weight and bias
// gradients are accumulated in FP32 (or float64 on the CPU) and rounded once; every
// gradient is deterministic (no atomics: each output element is one thread's fixed-order
// sum, or a fixed-order tree of one warp's lanes).
//
// Strategies and the kernels they run (plan_conv reports which one and its workspace):
//   Direct        CUDA cores, every case (any rank, groups, dilation, padding, dtype);
//                 a depthwise case (groups == C, 1-D or 2-D) runs its own memory-bound
//                 Depthwise kernel forward.
//   ImplicitGemm  tensor cores (mma.sync; the Hopper GEMM kernel on sm_90a where it fits),
//                 for BF16/F16. Forward: channels-last input and weight (the _nhwc shapes, or
//                 channels-last views; channel stride 1, other strides multiples of 8, 16-byte
//                 aligned) and C % 8 == 0, any rank, stride, dilation and padding. Data
//                 gradient: channels-last dout (as the forward's input) with K % 8 == 0, any
//                 weight layout, any rank, stride, dilation and padding: per stride phase
//                 (the input positions congruent modulo the stride; one phase at stride 1),
//                 the forward kernel over dout with the phase's kernel taps flipped and K, C
//                 exchanged, copied into a workspace of K · C · taps elements (plan_conv's
//                 workspace_bytes); phases no tap reaches are zero-filled. Cases that run
//                 Direct under this strategy by design (spec 000): 3-D F32 and grouped
//                 convolution. Any other case is ErrorCode::Unsupported naming what is
//                 missing: the weight gradient kernel and the F32 (TF32) kernel are not built
//                 yet; NCHW operands are not converted (no hidden pass).
//   Auto          forward: ImplicitGemm where it applies (BF16/F16, ungrouped, channels-last
//                 operands as above, C % 8 == 0), else Depthwise where that applies, else
//                 Direct; the gradients: Direct.
//   Autotune      forward and data gradient: the faster of ImplicitGemm (where it takes the
//                 call) and Direct (Depthwise for depthwise forwards), measured on the first
//                 call of the shape class on the device and recorded (rudnn/autotune.h says
//                 what a class is, what the first call costs, and how the record is kept in a
//                 file); under CUDA-graph capture an unmeasured class runs Auto's choice; on
//                 the CPU nothing is measured. The weight gradient: Direct, its one kernel.
//                 plan_conv reports the recorded choice, else Auto's. Needs a build with
//                 RUDNN_AUTOTUNE (the default), else Unsupported. Auto stays the default:
//                 Autotune's first call of a class waits for the GPU.
// `allow_tf32` only concerns a future F32 ImplicitGemm; Direct always computes in FP32. Only
// ImplicitGemm's data gradient takes a workspace (its flipped weight); no kernel builds an
// im2col / vol2col buffer.
//
// Memory: outputs, and ImplicitGemm's data-gradient workspace. All work is queued on `stream`;
// nothing synchronises the host.
//
// Errors (rudnn::Error naming op, argument and rule): input or weight of the wrong rank, an
// undefined or non-float tensor, dtypes that differ, operands on different devices, a
// non-batch axis of size 0; groups < 1 or not dividing C and K; weight not [K, C/groups,
// kernel...] (kernel sizes >= 1); stride or dilation < 1; padding < 0; an output size < 1
// (the dilated kernel larger than the padded input); bias not [K]; residual not the output's
// shape; dout not the output's shape; F64 on a GPU; an ImplicitGemm request it cannot take;
// `_into` outputs of the wrong shape, dtype or layout, or overlapping an input.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

#include "rudnn/stream.h"
#include "rudnn/tensor.h"

namespace rudnn {

namespace detail {
template <int N>
constexpr std::array<int64_t, N> filled(int64_t v) {
  std::array<int64_t, N> a{};
  for (auto& x : a) x = v;
  return a;
}
}  // namespace detail

// Options of an N-d convolution (N = 1, 2, 3), one entry per spatial axis.
template <int N>
struct ConvOptions {
  std::array<int64_t, N> stride = detail::filled<N>(1);    // >= 1
  std::array<int64_t, N> padding = detail::filled<N>(0);   // zeros before each axis (>= 0)
  // Zeros after each axis; -1 (the default) means "as padding" (symmetric). Asymmetric
  // padding ("same" for even kernels, TF's padding) sets it.
  std::array<int64_t, N> padding_end = detail::filled<N>(-1);
  std::array<int64_t, N> dilation = detail::filled<N>(1);  // >= 1
  int64_t groups = 1;                           // divides C and K; C for depthwise
  bool allow_tf32 = false;                      // ImplicitGemm only (see the top)
};

enum class ConvStrategy { Auto, Direct, ImplicitGemm, Autotune };

// The kernel a convolution runs: Reference is the float64 CPU code (CPU tensors).
enum class ConvKernel { Reference, Direct, Depthwise, ImplicitGemm };
const char* conv_kernel_name(ConvKernel kernel);

enum class ConvDirection { Forward, DataBackward, WeightBackward };

// Layout of the operands: NCHW-style shapes (any strides) or channels-last shapes.
enum class ConvLayout { Nchw, Nhwc };

struct ConvPlan {
  ConvKernel kernel = ConvKernel::Reference;
  size_t workspace_bytes = 0;
  std::string why;  // one line: why this kernel (e.g. "ImplicitGemm: grouped runs Direct")
};

// What plan_conv decides for these shapes (input and weight in `layout`'s shapes), dtype,
// device and options: the kernel each op with the same arguments runs, and its workspace, for
// tensors contiguous in `layout` (an NCHW-style op given channels-last views may take
// ImplicitGemm where this plans for contiguous NCHW).
// Throws the op's validation errors (named "plan_conv") and ImplicitGemm's Unsupported.
template <int N>
ConvPlan plan_conv(ConvDirection direction, const Shape& input_shape, const Shape& weight_shape,
                   DType dtype, Device device, const ConvOptions<N>& options,
                   ConvStrategy strategy = ConvStrategy::Auto, ConvLayout layout = ConvLayout::Nchw);

// The fused forward epilogue: out = act(conv(input, weight) + bias + residual), evaluated in
// FP32 before the one rounding. Residual (optional) has the output's shape and dtype (any
// strides); it may not be the output itself.
enum class ConvActivation { None, Relu, Silu, Gelu /* erf form, as torch's default */ };
struct ConvEpilogue {
  ConvActivation activation = ConvActivation::None;
  Tensor residual;
};

// Forward. input [N, C, in...], weight [K, C/groups, k...], bias [K] or undefined.
// out[n, k, o] = sum over c in k's group and taps t of input[n, c, o*stride - pad + t*dil] *
// weight[k, c', t] (taps in the padding read 0), then the epilogue.
template <int N>
Tensor conv_forward(const Tensor& input, const Tensor& weight, const Tensor& bias,
                    const ConvOptions<N>& options, ConvStrategy strategy = ConvStrategy::Auto,
                    const ConvEpilogue& epilogue = {}, const Stream& stream = {});
template <int N>
void conv_forward_into(const Tensor& out, const Tensor& input, const Tensor& weight,
                       const Tensor& bias, const ConvOptions<N>& options,
                       ConvStrategy strategy = ConvStrategy::Auto,
                       const ConvEpilogue& epilogue = {}, const Stream& stream = {});
// The same with channels-last shapes: input [N, in..., C], weight [K, k..., C/groups],
// out [N, out..., K].
template <int N>
Tensor conv_forward_nhwc(const Tensor& input, const Tensor& weight, const Tensor& bias,
                         const ConvOptions<N>& options, ConvStrategy strategy = ConvStrategy::Auto,
                         const ConvEpilogue& epilogue = {}, const Stream& stream = {});
template <int N>
void conv_forward_nhwc_into(const Tensor& out, const Tensor& input, const Tensor& weight,
                            const Tensor& bias, const ConvOptions<N>& options,
                            ConvStrategy strategy = ConvStrategy::Auto,
                            const ConvEpilogue& epilogue = {}, const Stream& stream = {});

// Data gradient: dinput [N, C, in...] (= input_shape) from dout [N, K, out...] and the
// weight: the gradient of conv(input, weight) with respect to input (the fused epilogue's
// gradient is the caller's: dout is taken after it). Each element gathers its covering
// outputs in a fixed order.
template <int N>
Tensor conv_data_backward(const Tensor& dout, const Tensor& weight, const Shape& input_shape,
                          const ConvOptions<N>& options, ConvStrategy strategy = ConvStrategy::Auto,
                          const Stream& stream = {});
template <int N>
void conv_data_backward_into(const Tensor& dinput_out, const Tensor& dout, const Tensor& weight,
                             const ConvOptions<N>& options,
                             ConvStrategy strategy = ConvStrategy::Auto, const Stream& stream = {});
template <int N>
Tensor conv_data_backward_nhwc(const Tensor& dout, const Tensor& weight, const Shape& input_shape,
                               const ConvOptions<N>& options,
                               ConvStrategy strategy = ConvStrategy::Auto,
                               const Stream& stream = {});
template <int N>
void conv_data_backward_nhwc_into(const Tensor& dinput_out, const Tensor& dout,
                                  const Tensor& weight, const ConvOptions<N>& options,
                                  ConvStrategy strategy = ConvStrategy::Auto,
                                  const Stream& stream = {});

// Weight (and bias) gradient from dout [N, K, out...] and the input: dweight with
// weight_shape, dbias [K] = the sum of dout over batch and space (only when `with_bias`;
// else undefined). FP32 accumulation (float64 on the CPU), one rounding, deterministic; with
// N = 0 both are zeros.
struct ConvWeightGrads {
  Tensor dweight;
  Tensor dbias;
};
template <int N>
ConvWeightGrads conv_weight_backward(const Tensor& dout, const Tensor& input,
                                     const Shape& weight_shape, const ConvOptions<N>& options,
                                     bool with_bias, ConvStrategy strategy = ConvStrategy::Auto,
                                     const Stream& stream = {});
// dbias_out undefined: no bias gradient.
template <int N>
void conv_weight_backward_into(const Tensor& dweight_out, const Tensor& dbias_out,
                               const Tensor& dout, const Tensor& input,
                               const ConvOptions<N>& options,
                               ConvStrategy strategy = ConvStrategy::Auto,
                               const Stream& stream = {});
template <int N>
ConvWeightGrads conv_weight_backward_nhwc(const Tensor& dout, const Tensor& input,
                                          const Shape& weight_shape, const ConvOptions<N>& options,
                                          bool with_bias,
                                          ConvStrategy strategy = ConvStrategy::Auto,
                                          const Stream& stream = {});
template <int N>
void conv_weight_backward_nhwc_into(const Tensor& dweight_out, const Tensor& dbias_out,
                                    const Tensor& dout, const Tensor& input,
                                    const ConvOptions<N>& options,
                                    ConvStrategy strategy = ConvStrategy::Auto,
                                    const Stream& stream = {});

#define RUDNN_CONV_DECLARE(N)                                                                  \
  extern template ConvPlan plan_conv<N>(ConvDirection, const Shape&, const Shape&, DType,      \
                                        Device, const ConvOptions<N>&, ConvStrategy,           \
                                        ConvLayout);                                           \
  extern template Tensor conv_forward<N>(const Tensor&, const Tensor&, const Tensor&,          \
                                         const ConvOptions<N>&, ConvStrategy,                 \
                                         const ConvEpilogue&, const Stream&);                  \
  extern template void conv_forward_into<N>(const Tensor&, const Tensor&, const Tensor&,      \
                                            const Tensor&, const ConvOptions<N>&,              \
                                            ConvStrategy, const ConvEpilogue&, const Stream&); \
  extern template Tensor conv_forward_nhwc<N>(const Tensor&, const Tensor&, const Tensor&,     \
                                              const ConvOptions<N>&, ConvStrategy,            \
                                              const ConvEpilogue&, const Stream&);             \
  extern template void conv_forward_nhwc_into<N>(                                              \
      const Tensor&, const Tensor&, const Tensor&, const Tensor&, const ConvOptions<N>&,       \
      ConvStrategy, const ConvEpilogue&, const Stream&);                                       \
  extern template Tensor conv_data_backward<N>(const Tensor&, const Tensor&, const Shape&,     \
                                               const ConvOptions<N>&, ConvStrategy,           \
                                               const Stream&);                                 \
  extern template void conv_data_backward_into<N>(const Tensor&, const Tensor&, const Tensor&, \
                                                  const ConvOptions<N>&, ConvStrategy,        \
                                                  const Stream&);                              \
  extern template Tensor conv_data_backward_nhwc<N>(const Tensor&, const Tensor&,              \
                                                    const Shape&, const ConvOptions<N>&,       \
                                                    ConvStrategy, const Stream&);              \
  extern template void conv_data_backward_nhwc_into<N>(const Tensor&, const Tensor&,           \
                                                       const Tensor&, const ConvOptions<N>&,   \
                                                       ConvStrategy, const Stream&);           \
  extern template ConvWeightGrads conv_weight_backward<N>(const Tensor&, const Tensor&,        \
                                                          const Shape&, const ConvOptions<N>&, \
                                                          bool, ConvStrategy, const Stream&);  \
  extern template void conv_weight_backward_into<N>(const Tensor&, const Tensor&,              \
                                                    const Tensor&, const Tensor&,              \
                                                    const ConvOptions<N>&, ConvStrategy,      \
                                                    const Stream&);                            \
  extern template ConvWeightGrads conv_weight_backward_nhwc<N>(                                \
      const Tensor&, const Tensor&, const Shape&, const ConvOptions<N>&, bool, ConvStrategy,   \
      const Stream&);                                                                          \
  extern template void conv_weight_backward_nhwc_into<N>(const Tensor&, const Tensor&,         \
                                                         const Tensor&, const Tensor&,         \
                                                         const ConvOptions<N>&, ConvStrategy,  \
                                                         const Stream&);
RUDNN_CONV_DECLARE(1)
RUDNN_CONV_DECLARE(2)
RUDNN_CONV_DECLARE(3)
#undef RUDNN_CONV_DECLARE

// ---- Causal depthwise conv1d (Mamba, linear attention) ------------------------------------
//
// x [B, L, C] (channels-last; any strides, odd ones read through one dense copy), weight
// [C, W] (W >= 1; the GPU kernel keeps the window in registers up to W = 8 and loops
// beyond), bias [C] or undefined:
//   pre[b, t, c] = bias[c] + sum_{w < W} weight[c, w] * xs[b, t - (W-1) + w, c]
//   out = silu(pre) if `silu`, else pre          (FP32, one rounding; out like x)
// where xs is x extended to the left by the carried state: xs[b, -(W-1) + j, c] =
// conv_state[b, c, j] when conv_state ([B, C, W-1]) is given, else 0.
// When conv_state is given, it is then updated in place to the last W-1 positions of xs
// (decode: call with L = 1 and the state carries over). With W = 1 the state is [B, C, 0].
// Varlen: cu_seqlens (I32 [S+1] on x's device, non-decreasing from 0 to L; not read by the
// host) splits x [1, L, C] into S sequences that never see each other; conv_state is then
// [S, C, W-1], one row per sequence. All of x's dtypes: F32, F16, BF16 (F64 on the CPU); weight,
// bias and state in x's dtype.
// Errors: shapes, dtypes, devices as above; W < 1; cu_seqlens not I32 [S+1] with S >= 1, or
// given with B != 1; _into's out not x's shape/dtype or contiguous, or overlapping an input.
// The contents of cu_seqlens are the caller's promise (checked only by the CPU reference).
Tensor causal_conv1d(const Tensor& x, const Tensor& weight, const Tensor& bias,
                     const Tensor& conv_state, const Tensor& cu_seqlens, bool silu,
                     const Stream& stream = {});
void causal_conv1d_into(const Tensor& out, const Tensor& x, const Tensor& weight,
                        const Tensor& bias, const Tensor& conv_state, const Tensor& cu_seqlens,
                        bool silu, const Stream& stream = {});

// Gradients of causal_conv1d for the same arguments, where `initial_state` is the state the
// forward read (before its in-place update; the caller keeps a copy) or undefined. dx like
// x; dweight [C, W] and dbias [C] (when bias is given) accumulated in FP32, one rounding,
// deterministic (fixed-order per-channel sums, no atomics); dinitial_state [B or S, C, W-1]
// when initial_state is given. Nothing is written to initial_state.
struct CausalConv1dGrads {
  Tensor dx, dweight, dbias, dinitial_state;
};
CausalConv1dGrads causal_conv1d_backward(const Tensor& dout, const Tensor& x, const Tensor& weight,
                                         const Tensor& bias, const Tensor& initial_state,
                                         const Tensor& cu_seqlens, bool silu,
                                         const Stream& stream = {});
// dbias_out / dinitial_state_out: defined exactly when bias / initial_state are.
void causal_conv1d_backward_into(const Tensor& dx_out, const Tensor& dweight_out,
                                 const Tensor& dbias_out, const Tensor& dinitial_state_out,
                                 const Tensor& dout, const Tensor& x, const Tensor& weight,
                                 const Tensor& bias, const Tensor& initial_state,
                                 const Tensor& cu_seqlens, bool silu, const Stream& stream = {});

}  // namespace rudnn
