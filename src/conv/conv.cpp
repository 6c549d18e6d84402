// Convolution family entry points: the family's rules (ranks, groups, window and output
// sizes, strategies) on top of the shared checks, and the strides every backend reads.
#include "rudnn/conv.h"

#include <algorithm>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "common/autotune.h"
#include "common/op_call.h"
#include "common/views.h"
#include "conv/problem.h"
#include "conv/reference.h"
#include "rudnn/autotune.h"
#if RUDNN_WITH_CUDA
#include "conv/cuda/launch.h"
#include "core/cuda_api.h"
#endif

namespace rudnn {

namespace {

using common::OpCall;
using common::run_backend;
using conv_detail::ConvShape;
using conv_detail::Strides;
using detail::cat;
using detail::fail;

const char* layout_shape(ConvLayout layout, int dims, bool weight) {
  static const char* const names[2][2][3] = {
      {{"[N, C, L]", "[N, C, H, W]", "[N, C, D, H, W]"},
       {"[K, C/groups, kL]", "[K, C/groups, kH, kW]", "[K, C/groups, kD, kH, kW]"}},
      {{"[N, L, C]", "[N, H, W, C]", "[N, D, H, W, C]"},
       {"[K, kL, C/groups]", "[K, kH, kW, C/groups]", "[K, kD, kH, kW, C/groups]"}}};
  return names[layout == ConvLayout::Nhwc][weight][dims - 1];
}

// Axis of the channel and of spatial axis a (0-based) in a layout's shapes.
int64_t channel_axis(ConvLayout layout, int dims) { return layout == ConvLayout::Nchw ? 1 : dims + 1; }
int64_t spatial_axis(ConvLayout layout, int a) { return layout == ConvLayout::Nchw ? 2 + a : 1 + a; }

// The validated geometry of a convolution from the input's and the weight's shapes.
template <int N>
ConvShape conv_shape(const char* op, const Shape& input, const Shape& weight, DType dtype,
                     const ConvOptions<N>& o, ConvLayout layout) {
  if (static_cast<int>(input.size()) != N + 2) {
    fail(ErrorCode::ShapeMismatch, cat(op, ": input has shape ", shape_str(input), "; expected ",
                                       N + 2, "-d ", layout_shape(layout, N, false)));
  }
  if (static_cast<int>(weight.size()) != N + 2) {
    fail(ErrorCode::ShapeMismatch, cat(op, ": weight has shape ", shape_str(weight),
                                       "; expected ", N + 2, "-d ", layout_shape(layout, N, true)));
  }
  for (size_t a = 1; a < input.size(); ++a) {
    if (input[a] < 1) {
      fail(ErrorCode::InvalidArgument, cat(op, ": input has shape ", shape_str(input),
                                           "; expected no empty axis but the batch"));
    }
  }
  ConvShape s;
  s.dtype = dtype;
  s.dims = N;
  s.batch = input[0];
  s.in_channels = input[channel_axis(layout, N)];
  s.out_channels = weight[0];
  s.groups = o.groups;
  if (o.groups < 1) {
    fail(ErrorCode::InvalidArgument,
         cat(op, ": options.groups is ", o.groups, "; expected >= 1"));
  }
  if (s.in_channels % o.groups != 0) {
    fail(ErrorCode::InvalidArgument,
         cat(op, ": input has ", s.in_channels, " channels, options.groups is ", o.groups,
             "; expected groups to divide the input channels"));
  }
  if (s.out_channels < 1 || s.out_channels % o.groups != 0) {
    fail(ErrorCode::InvalidArgument,
         cat(op, ": weight has shape ", shape_str(weight), " (K = ", s.out_channels,
             "), options.groups is ", o.groups, "; expected K >= 1 divisible by groups"));
  }
  const int64_t weight_channels = weight[channel_axis(layout, N)];
  if (weight_channels != s.in_channels / o.groups) {
    fail(ErrorCode::ShapeMismatch,
         cat(op, ": weight has shape ", shape_str(weight), "; expected ",
             layout_shape(layout, N, true), " with C/groups = ", s.in_channels / o.groups,
             " (C = ", s.in_channels, ", groups = ", o.groups, ")"));
  }
  for (int a = 0; a < N; ++a) {
    const int b = 3 - N + a;
    s.in[b] = input[spatial_axis(layout, a)];
    s.kernel[b] = weight[spatial_axis(layout, a)];
    s.stride[b] = o.stride[a];
    s.dilation[b] = o.dilation[a];
    s.pad[b] = o.padding[a];
    const int64_t pad_end = o.padding_end[a] == -1 ? o.padding[a] : o.padding_end[a];
    if (s.kernel[b] < 1) {
      fail(ErrorCode::ShapeMismatch, cat(op, ": weight has shape ", shape_str(weight),
                                         "; expected kernel sizes >= 1"));
    }
    if (o.stride[a] < 1 || o.dilation[a] < 1) {
      fail(ErrorCode::InvalidArgument,
           cat(op, ": options.stride is ", o.stride[a], ", options.dilation is ", o.dilation[a],
               " on spatial axis ", a, "; expected both >= 1"));
    }
    if (o.padding[a] < 0 || pad_end < 0) {
      fail(ErrorCode::InvalidArgument,
           cat(op, ": options.padding is ", o.padding[a], ", options.padding_end is ",
               o.padding_end[a], " on spatial axis ", a,
               "; expected padding >= 0 and padding_end >= 0 (or -1: as padding)"));
    }
    const int64_t span = s.in[b] + o.padding[a] + pad_end - s.dilation[b] * (s.kernel[b] - 1) - 1;
    if (span < 0) {
      fail(ErrorCode::InvalidArgument,
           cat(op, ": input size ", s.in[b], " with padding ", o.padding[a], " + ", pad_end,
               " and kernel ", s.kernel[b], " dilation ", s.dilation[b], " on spatial axis ", a,
               " gives output size < 1; expected the dilated kernel to fit the padded input"));
    }
    s.out[b] = span / s.stride[b] + 1;
  }
  return s;
}

// The output's (or dout's) shape in a layout.
Shape out_shape(const ConvShape& s, ConvLayout layout) {
  Shape shape{s.batch};
  if (layout == ConvLayout::Nchw) shape.push_back(s.out_channels);
  for (int b = 3 - s.dims; b < 3; ++b) shape.push_back(s.out[b]);
  if (layout == ConvLayout::Nhwc) shape.push_back(s.out_channels);
  return shape;
}

// Strides of an activation or weight tensor in a layout, as [n, c, z, y, x].
Strides strides_of(const Tensor& t, ConvLayout layout, int dims) {
  Strides st;
  st.n = t.strides()[0];
  st.c = t.strides()[channel_axis(layout, dims)];
  for (int a = 0; a < dims; ++a) st.sp[3 - dims + a] = t.strides()[spatial_axis(layout, a)];
  return st;
}

// Whether a logical [N, C, spatial...] tensor is dense in channels-last memory order.
bool channels_last_dense(const Tensor& t) {
  if (t.dim() < 3) return false;
  Shape order;  // axes from innermost: C, then spatial from last to first, then N
  order.push_back(1);
  for (int64_t a = t.dim() - 1; a >= 2; --a) order.push_back(a);
  order.push_back(0);
  int64_t expected = 1;
  for (int64_t a : order) {
    if (t.shape()[a] != 1 && t.strides()[a] != expected) return false;
    expected *= t.shape()[a];
  }
  return true;
}

// An output of the given shape and dtype whose elements do not overlap: dense in logical
// order, or (NCHW-style shapes) in channels-last order.
void require_conv_out(const OpCall& call, const char* name, const Tensor& out, const Shape& shape,
                      DType dtype, ConvLayout layout) {
  common::require_out(call, name, out, shape, dtype);
  if (out.is_contiguous()) return;
  if (layout == ConvLayout::Nchw && channels_last_dense(out)) return;
  fail(ErrorCode::InvalidArgument,
       cat(call.op, ": ", name, " has strides ", shape_str(out.strides()),
           layout == ConvLayout::Nchw ? "; expected contiguous or channels-last dense"
                                      : "; expected contiguous"));
}

// A functional output in `like`'s memory order: channels-last when `like` is channels-last
// dense (and not also contiguous), else contiguous.
Tensor empty_like_order(const OpCall& call, const Shape& shape, DType dtype, const Tensor& like,
                        ConvLayout layout) {
  if (layout == ConvLayout::Nchw && !like.is_contiguous() && channels_last_dense(like)) {
    Shape memory{shape[0]};
    for (size_t a = 2; a < shape.size(); ++a) memory.push_back(shape[a]);
    memory.push_back(shape[1]);
    Tensor t = call.empty(memory, dtype);
    Shape strides(shape.size());
    int64_t step = 1;
    strides[1] = step;
    step *= shape[1];
    for (size_t a = shape.size() - 1; a >= 2; --a) {
      strides[a] = step;
      step *= shape[a];
    }
    strides[0] = step;
    return t.as_strided(shape, strides, 0);
  }
  return call.empty(shape, dtype);
}

void require_same_dtype(const OpCall& call, const char* name, const Tensor& t, DType dtype) {
  common::require_float(call, name, t);
  if (t.dtype() != dtype) {
    fail(ErrorCode::DTypeMismatch, cat(call.op, ": ", name, " has dtype ", dtype_name(t.dtype()),
                                       "; expected the input's dtype ", dtype_name(dtype)));
  }
}

// Whether an operand (activation or weight) can feed the implicit GEMM's 16-byte copies:
// channel stride 1, every other stride a multiple of 8 elements, a 16-byte aligned base.
bool gemm_operand_fits(const Tensor& t, ConvLayout layout, int dims) {
  const Strides st = strides_of(t, layout, dims);
  bool ok = st.c == 1 && st.n % 8 == 0 && reinterpret_cast<uintptr_t>(t.data()) % 16 == 0;
  for (int a = 0; a < 3; ++a) ok = ok && st.sp[a] % 8 == 0;
  return ok;
}

// Strides of a tensor dense in channels-last order with `channels` channels and the given
// [z, y, x] extents.
Strides dense_channels_last(int64_t channels, const int64_t ext[3]) {
  Strides st;
  st.c = 1;
  st.sp[2] = channels;
  st.sp[1] = channels * ext[2];
  st.sp[0] = st.sp[1] * ext[1];
  st.n = st.sp[0] * ext[0];
  return st;
}

// `gemm_fits`: the operands suit the implicit GEMM's loads (channels-last input and weight,
// aligned; C % 8 == 0 is checked here).
// `hopper`: the ImplicitGemm forward would run the Hopper kernel (hopper_conv_fits).
ConvPlan plan_for(const char* op, const ConvShape& s, Device device, ConvDirection direction,
                  ConvStrategy strategy, bool gemm_fits, bool hopper = false) {
  ConvPlan plan;
  if (strategy == ConvStrategy::Autotune) {
    // The forward's and the data gradient's measured choices are resolved before planning
    // (tuned_strategy); an unmeasured call plans as Auto.
    common::require_autotune_built(op);
    if (direction == ConvDirection::WeightBackward) {
      plan.kernel = device.is_cpu() ? ConvKernel::Reference : ConvKernel::Direct;
      plan.why = device.is_cpu() ? "CPU: the float64 reference, whatever the strategy"
                                 : "Autotune: Direct, the one kernel of the weight gradient";
      return plan;
    }
    strategy = ConvStrategy::Auto;
  }
  const bool grouped = s.groups > 1;
  const bool depthwise = s.groups == s.in_channels && s.dims <= 2;
  bool gemm = false;
  if (strategy == ConvStrategy::ImplicitGemm) {
    if (s.dims == 3 && s.dtype == DType::f32) {
      plan.why = "ImplicitGemm: 3-D F32 convolution runs Direct";
    } else if (grouped) {
      plan.why = "ImplicitGemm: grouped convolution runs Direct";
    } else if (direction == ConvDirection::WeightBackward) {
      fail(ErrorCode::Unsupported,
           cat(op, ": strategy ImplicitGemm: the implicit-GEMM weight gradient kernel is not "
                   "built yet; expected Direct or Auto"));
    } else if (s.dtype != DType::bf16 && s.dtype != DType::f16) {
      fail(ErrorCode::Unsupported,
           cat(op, ": strategy ImplicitGemm: the ", dtype_name(s.dtype),
               " implicit-GEMM kernel (TF32) is not built yet; expected bf16 or f16, or Direct "
               "or Auto"));
    } else if (direction == ConvDirection::Forward && (s.in_channels % 8 != 0 || !gemm_fits)) {
      fail(ErrorCode::Unsupported,
           cat(op, ": strategy ImplicitGemm: input with ", s.in_channels,
               " channels; expected channels-last input and weight (channel stride 1, pixel "
               "strides multiples of 8, 16-byte aligned) with C % 8 == 0, or Direct or Auto"));
    } else if (direction == ConvDirection::DataBackward &&
               (s.out_channels % 8 != 0 || !gemm_fits)) {
      fail(ErrorCode::Unsupported,
           cat(op, ": strategy ImplicitGemm: dout with ", s.out_channels,
               " channels; expected channels-last dout (channel stride 1, pixel strides "
               "multiples of 8, 16-byte aligned) with K % 8 == 0, or Direct or Auto"));
    } else {
      gemm = true;
      plan.why = direction == ConvDirection::Forward
                     ? "ImplicitGemm: tensor cores (mma.sync), no im2col buffer"
                     : "ImplicitGemm: the data gradient as forward convolutions of dout with the "
                       "flipped weight, one per stride phase, tensor cores, no im2col buffer";
      if (direction == ConvDirection::DataBackward) {
        plan.workspace_bytes = static_cast<size_t>(s.taps() * s.in_channels * s.out_channels) *
                               dtype_size(s.dtype);
      }
    }
  } else if (strategy == ConvStrategy::Auto && direction == ConvDirection::Forward && !grouped &&
             (s.dtype == DType::bf16 || s.dtype == DType::f16) && s.in_channels % 8 == 0 &&
             gemm_fits) {
    gemm = true;
    plan.why = "Auto: ImplicitGemm (tensor cores; channels-last BF16/F16, C % 8 == 0)";
  }
  if (device.is_cpu()) {
    plan.kernel = ConvKernel::Reference;
    plan.workspace_bytes = 0;
    plan.why = "CPU: the float64 reference, whatever the strategy";
    return plan;
  }
  if (gemm) {
    plan.kernel = ConvKernel::ImplicitGemm;
    if (hopper) {
      plan.why += " on sm_90a: the Hopper GEMM kernel (TMA boxes of the input, wgmma)";
    }
    return plan;
  }
  if (direction == ConvDirection::Forward && depthwise && strategy != ConvStrategy::ImplicitGemm) {
    plan.kernel = ConvKernel::Depthwise;
    if (plan.why.empty()) plan.why = "depthwise (groups == C, 1-D or 2-D): memory-bound kernel";
    return plan;
  }
  plan.kernel = ConvKernel::Direct;
  if (plan.why.empty()) {
    plan.why = strategy == ConvStrategy::Auto
                   ? "Auto: Direct (no tensor-core kernel takes this case)"
                   : "Direct as requested";
  }
  return plan;
}

const char* direction_op(ConvDirection direction) {
  switch (direction) {
    case ConvDirection::Forward:
      return "conv_forward";
    case ConvDirection::DataBackward:
      return "conv_data_backward";
    case ConvDirection::WeightBackward:
      return "conv_weight_backward";
  }
  return "?";
}

// The shape class of a forward or data gradient (rudnn/autotune.h): channels, kernel,
// stride, padding, dilation and groups exactly; batch and spatial sizes by powers of two.
// `gemm_fits`: the operands the implicit GEMM reads (input and weight, or dout) suit it.
std::string tune_key(ConvDirection direction, Device device, const ConvShape& s,
                     ConvLayout layout, bool gemm_fits) {
  const int first = 3 - s.dims;
  const auto axes = [&](const char* name, const int64_t* v, bool classes) {
    std::string t = cat(' ', name, classes ? "<=" : " ");
    for (int a = first; a < 3; ++a)
      t += cat(a == first ? "" : "x", classes ? common::size_class(v[a]) : v[a]);
    return t;
  };
  return cat(common::key_prefix(direction_op(direction), device), dtype_name(s.dtype), ' ',
             s.dims, "-d ", layout == ConvLayout::Nhwc ? "nhwc" : "nchw",
             gemm_fits ? " gemm-operands" : "", " N<=", common::size_class(s.batch), " C ",
             s.in_channels, " K ", s.out_channels, axes("in", s.in, true),
             axes("kernel", s.kernel, false), axes("stride", s.stride, false),
             axes("pad", s.pad, false), axes("dilation", s.dilation, false), " groups ",
             s.groups);
}

// Autotune's candidates: the strategies whose kernels differ (ImplicitGemm where it takes
// the call; Direct, which is the Depthwise kernel for depthwise forwards), each with the
// kernel it runs. The weight gradient has Direct alone.
std::vector<std::pair<ConvStrategy, ConvKernel>> tuned_candidates(const char* op,
                                                                  const ConvShape& s,
                                                                  Device device,
                                                                  ConvDirection direction,
                                                                  bool gemm_fits) {
  std::vector<std::pair<ConvStrategy, ConvKernel>> out;
  for (ConvStrategy st : {ConvStrategy::ImplicitGemm, ConvStrategy::Direct}) {
    try {
      const ConvKernel k = plan_for(op, s, device, direction, st, gemm_fits).kernel;
      const bool seen = std::any_of(out.begin(), out.end(), [k](const auto& c) {
        return c.second == k;
      });
      if (!seen) out.emplace_back(st, k);
    } catch (const Error&) {
      // ImplicitGemm cannot take the call: not a candidate.
    }
  }
  return out;
}

// The strategy an Autotune call runs; `run(st)` runs the op once with strategy st.
ConvStrategy tuned_strategy(const OpCall& call, ConvDirection direction, const ConvShape& s,
                            ConvLayout layout, bool gemm_fits,
                            const std::function<void(ConvStrategy)>& run) {
  common::require_autotune_built(call.op);
  const bool empty = s.batch == 0 || s.out_space() == 0 || s.in_space() == 0;
  if (call.device.is_cpu() || empty) return ConvStrategy::Auto;
  const auto tuned = tuned_candidates(call.op, s, call.device, direction, gemm_fits);
  std::vector<common::TuneCandidate> candidates;
  for (const auto& [st, kernel] : tuned)
    candidates.push_back({conv_kernel_name(kernel), [&run, st = st] { run(st); }});
  const std::string chosen = common::autotuned_choice(
      call, tune_key(direction, call.device, s, layout, gemm_fits), candidates, "Auto");
  for (const auto& [st, kernel] : tuned) {
    if (chosen == conv_kernel_name(kernel)) return st;
  }
  return ConvStrategy::Auto;
}

// What plan_conv reports for Autotune: the recorded choice for the class when there is one
// that can take it, else Auto's.
ConvStrategy planned_autotune_strategy(ConvDirection direction, const ConvShape& s,
                                       Device device, ConvLayout layout, bool gemm_fits) {
  common::require_autotune_built("plan_conv");
  if (device.is_cpu() || direction == ConvDirection::WeightBackward) return ConvStrategy::Auto;
  const std::string recorded =
      common::autotune_recorded(tune_key(direction, device, s, layout, gemm_fits));
  for (const auto& [st, kernel] : tuned_candidates("plan_conv", s, device, direction, gemm_fits)) {
    if (recorded == conv_kernel_name(kernel)) return st;
  }
  return ConvStrategy::Auto;
}

conv_detail::Activation activation_of(ConvActivation a) {
  switch (a) {
    case ConvActivation::Relu:
      return conv_detail::Activation::Relu;
    case ConvActivation::Silu:
      return conv_detail::Activation::Silu;
    case ConvActivation::Gelu:
      return conv_detail::Activation::Gelu;
    default:
      return conv_detail::Activation::None;
  }
}

template <int N>
ConvShape forward_shape(const OpCall& call, const Tensor& input, const Tensor& weight,
                        const ConvOptions<N>& o, ConvLayout layout) {
  common::require_float(call, "input", input);
  require_same_dtype(call, "weight", weight, input.dtype());
  return conv_shape<N>(call.op, input.shape(), weight.shape(), input.dtype(), o, layout);
}

template <int N>
void forward_impl(OpCall& call, const Tensor& out, const Tensor& input, const Tensor& weight,
                  const Tensor& bias, const ConvOptions<N>& o, ConvStrategy strategy,
                  const ConvEpilogue& epilogue, ConvLayout layout) {
  conv_detail::Forward p;
  p.s = forward_shape<N>(call, input, weight, o, layout);
  const Shape oshape = out_shape(p.s, layout);
  if (bias.defined()) {
    require_same_dtype(call, "bias", bias, input.dtype());
    common::require_shape(call, "bias", bias, {p.s.out_channels}, "[K]");
  }
  if (epilogue.residual.defined()) {
    require_same_dtype(call, "residual", epilogue.residual, input.dtype());
    common::require_shape(call, "residual", epilogue.residual, oshape, "the output's shape");
  }
  const bool gemm_fits =
      gemm_operand_fits(input, layout, N) && gemm_operand_fits(weight, layout, N);
  if (strategy == ConvStrategy::Autotune) {
    strategy = tuned_strategy(call, ConvDirection::Forward, p.s, layout, gemm_fits,
                              [&](ConvStrategy st) {
                                OpCall run(call.op, "input", input, call.stream);
                                forward_impl<N>(run, out, input, weight, bias, o, st, epilogue,
                                                layout);
                              });
  }
  const ConvPlan plan =
      plan_for(call.op, p.s, call.device, ConvDirection::Forward, strategy, gemm_fits);
  require_conv_out(call, "out", out, oshape, input.dtype(), layout);
  common::require_no_overlap(call, "out", out,
                             {{"input", &input},
                              {"weight", &weight},
                              {"bias", &bias},
                              {"residual", &epilogue.residual}});
  if (out.numel() == 0) return;
  p.input = input.data();
  p.input_st = strides_of(input, layout, N);
  p.weight = weight.data();
  p.weight_st = strides_of(weight, layout, N);
  p.out = out.data();
  p.out_st = strides_of(out, layout, N);
  if (bias.defined()) p.bias = common::dense_in(call, bias);
  if (epilogue.residual.defined()) {
    p.residual = epilogue.residual.data();
    p.residual_st = strides_of(epilogue.residual, layout, N);
  }
  p.activation = activation_of(epilogue.activation);
  p.depthwise_kernel = plan.kernel == ConvKernel::Depthwise;
  p.implicit_gemm_kernel = plan.kernel == ConvKernel::ImplicitGemm;
#if RUDNN_WITH_CUDA
  p.hopper_kernel = p.implicit_gemm_kernel && conv_detail::cuda::hopper_conv_fits(p, call.device);
#endif
  run_backend(call, p, RUDNN_BACKENDS(conv_detail, forward));
}

template <int N>
ConvShape data_shape(const OpCall& call, const Tensor& dout, const Tensor& weight,
                     const Shape& input_shape, const ConvOptions<N>& o, ConvLayout layout) {
  common::require_float(call, "dout", dout);
  require_same_dtype(call, "weight", weight, dout.dtype());
  const ConvShape s = conv_shape<N>(call.op, input_shape, weight.shape(), dout.dtype(), o, layout);
  common::require_shape(call, "dout", dout, out_shape(s, layout),
                        "the convolution output's shape");
  return s;
}

#if RUDNN_WITH_CUDA
// ImplicitGemm's data gradient (conv_detail::data_phase_axis): for each stride phase, the
// weight taps of the phase flipped and transposed into a dense [C, taps..., K] part of the
// plan's workspace (the phases' taps partition the kernel: the parts fill it exactly), then
// the forward kernel over dout writing the phase's input positions (a strided view of
// dinput); a phase no tap reaches is zero-filled.
void data_gradient_as_forward(OpCall& call, const conv_detail::DataBackward& p) {
  using conv_detail::DataPhaseAxis;
  const ConvShape& s = p.s;
  const int64_t C = s.in_channels, K = s.out_channels;
  const size_t bytes = dtype_size(s.dtype);
  const cuda_stream_t stream = call.stream.handle();
  const Tensor& workspace = call.keep(call.empty({s.taps() * C * K}, s.dtype));
  Tensor zero;  // one zero element, the source of zero-filled phases (made when one is met)
  const Strides& w = p.weight_st;
  const auto at = [bytes](const void* base, int64_t elements) {
    return static_cast<const char*>(base) + elements * static_cast<int64_t>(bytes);
  };
  int64_t used = 0;  // workspace elements taken by earlier phases
  for (int64_t rz = 0; rz < s.stride[0]; ++rz) {
    for (int64_t ry = 0; ry < s.stride[1]; ++ry) {
      for (int64_t rx = 0; rx < s.stride[2]; ++rx) {
        const int64_t r[3] = {rz, ry, rx};
        DataPhaseAxis ax[3];
        int64_t outputs = 1, taps = 1, out_offset = 0, in_offset = 0, first = 0;
        Strides out_st = p.dinput_st;
        for (int a = 0; a < 3; ++a) {
          ax[a] = conv_detail::data_phase_axis(s.in[a], s.out[a], s.kernel[a], s.stride[a],
                                               s.pad[a], s.dilation[a], r[a]);
          outputs *= ax[a].outputs;
          taps *= ax[a].taps;
          out_offset += r[a] * p.dinput_st.sp[a];
          out_st.sp[a] = p.dinput_st.sp[a] * s.stride[a];
          in_offset += ax[a].skip * p.dout_st.sp[a];
          first += ax[a].first_tap * w.sp[a];
        }
        if (outputs == 0) continue;
        void* out = const_cast<char*>(at(p.dinput, out_offset));
        const int64_t out_shape[5] = {s.batch, ax[0].outputs, ax[1].outputs, ax[2].outputs, C};
        const int64_t out_strides[5] = {out_st.n, out_st.sp[0], out_st.sp[1], out_st.sp[2],
                                        out_st.c};
        if (taps == 0) {
          if (!zero.defined())
            zero = call.keep(Tensor::zeros({1}, s.dtype, call.device, call.stream));
          const int64_t none[5] = {0, 0, 0, 0, 0};
          detail::cuda::strided_copy(out, out_strides, zero.data(), none, out_shape, 5, bytes,
                                     call.device, stream);
          continue;
        }
        // The phase's weight: [C, taps z, y, x, K] from the weight's tap `first_tap` stepping
        // by tap_step (the copy's offsets are signed 64-bit).
        const int64_t phase_taps[3] = {ax[0].taps, ax[1].taps, ax[2].taps};
        const Strides dense = dense_channels_last(K, phase_taps);
        void* phase_weight = const_cast<char*>(at(workspace.data(), used));
        const int64_t w_shape[5] = {C, ax[0].taps, ax[1].taps, ax[2].taps, K};
        const int64_t w_dst[5] = {dense.n, dense.sp[0], dense.sp[1], dense.sp[2], 1};
        const int64_t w_src[5] = {w.c, ax[0].tap_step * w.sp[0], ax[1].tap_step * w.sp[1],
                                  ax[2].tap_step * w.sp[2], w.n};
        detail::cuda::strided_copy(phase_weight, w_dst, at(p.weight, first), w_src, w_shape, 5,
                                   bytes, call.device, stream);
        used += taps * C * K;
        conv_detail::Forward f;
        f.s = conv_detail::data_phase_shape(s, ax);
        f.input = at(p.dout, in_offset);
        f.input_st = p.dout_st;
        f.weight = phase_weight;
        f.weight_st = dense;
        f.out = out;
        f.out_st = out_st;
        f.implicit_gemm_kernel = true;
        f.hopper_kernel = conv_detail::cuda::hopper_conv_fits(f, call.device);
        conv_detail::cuda::forward(f, call.stream);
      }
    }
  }
}
#endif

template <int N>
void data_impl(OpCall& call, const Tensor& dinput, const Tensor& dout, const Tensor& weight,
               const ConvOptions<N>& o, ConvStrategy strategy, ConvLayout layout) {
  common::require_defined(call, "dinput_out", dinput);
  conv_detail::DataBackward p;
  p.s = data_shape<N>(call, dout, weight, dinput.shape(), o, layout);
  const bool gemm_fits = gemm_operand_fits(dout, layout, N);
  if (strategy == ConvStrategy::Autotune) {
    strategy = tuned_strategy(call, ConvDirection::DataBackward, p.s, layout, gemm_fits,
                              [&](ConvStrategy st) {
                                OpCall run(call.op, "dout", dout, call.stream);
                                data_impl<N>(run, dinput, dout, weight, o, st, layout);
                              });
  }
  [[maybe_unused]] const ConvPlan plan =
      plan_for(call.op, p.s, call.device, ConvDirection::DataBackward, strategy, gemm_fits);
  require_conv_out(call, "dinput_out", dinput, dinput.shape(), dout.dtype(), layout);
  common::require_no_overlap(call, "dinput_out", dinput, {{"dout", &dout}, {"weight", &weight}});
  if (dinput.numel() == 0) return;
  p.dout = dout.data();
  p.dout_st = strides_of(dout, layout, N);
  p.weight = weight.data();
  p.weight_st = strides_of(weight, layout, N);
  p.dinput = dinput.data();
  p.dinput_st = strides_of(dinput, layout, N);
#if RUDNN_WITH_CUDA
  if (plan.kernel == ConvKernel::ImplicitGemm) {
    data_gradient_as_forward(call, p);
    return;
  }
#endif
  run_backend(call, p, RUDNN_BACKENDS(conv_detail, data_backward));
}

template <int N>
ConvShape weight_shape_of(const OpCall& call, const Tensor& dout, const Tensor& input,
                          const Shape& weight_shape, const ConvOptions<N>& o, ConvLayout layout) {
  common::require_float(call, "dout", dout);
  require_same_dtype(call, "input", input, dout.dtype());
  const ConvShape s = conv_shape<N>(call.op, input.shape(), weight_shape, dout.dtype(), o, layout);
  common::require_shape(call, "dout", dout, out_shape(s, layout),
                        "the convolution output's shape");
  return s;
}

template <int N>
void weight_impl(OpCall& call, const Tensor& dweight, const Tensor& dbias, const Tensor& dout,
                 const Tensor& input, const ConvOptions<N>& o, ConvStrategy strategy,
                 ConvLayout layout) {
  common::require_defined(call, "dweight_out", dweight);
  conv_detail::WeightBackward p;
  p.s = weight_shape_of<N>(call, dout, input, dweight.shape(), o, layout);
  plan_for(call.op, p.s, call.device, ConvDirection::WeightBackward, strategy, false);
  require_conv_out(call, "dweight_out", dweight, dweight.shape(), dout.dtype(), ConvLayout::Nhwc);
  common::require_no_overlap(call, "dweight_out", dweight,
                             {{"dout", &dout}, {"input", &input}, {"dbias_out", &dbias}});
  if (dbias.defined()) {
    p.dbias = common::dense_out(call, "dbias_out", dbias, {p.s.out_channels}, dout.dtype());
    common::require_no_overlap(call, "dbias_out", dbias, {{"dout", &dout}, {"input", &input}});
  }
  p.dout = dout.data();
  p.dout_st = strides_of(dout, layout, N);
  p.input = input.data();
  p.input_st = strides_of(input, layout, N);
  p.dweight = dweight.data();
  p.dweight_st = strides_of(dweight, layout, N);
  run_backend(call, p, RUDNN_BACKENDS(conv_detail, weight_backward));
}

}  // namespace

namespace {

// Whether the ImplicitGemm forward of s would run the Hopper kernel with every tensor dense
// in channels-last order and allocator-aligned (plan_conv: shapes only).
bool hopper_for_dense(const ConvShape& s, Device device) {
#if RUDNN_WITH_CUDA
  if (!device.is_cuda()) return false;
  conv_detail::Forward p;
  p.s = s;
  p.input_st = dense_channels_last(s.in_channels, s.in);
  p.weight_st = dense_channels_last(s.in_channels, s.kernel);
  p.out_st = dense_channels_last(s.out_channels, s.out);
  return conv_detail::cuda::hopper_conv_fits(p, device);
#else
  (void)s;
  (void)device;
  return false;
#endif
}

}  // namespace

const char* conv_kernel_name(ConvKernel kernel) {
  switch (kernel) {
    case ConvKernel::Reference:
      return "Reference";
    case ConvKernel::Direct:
      return "Direct";
    case ConvKernel::Depthwise:
      return "Depthwise";
    case ConvKernel::ImplicitGemm:
      return "ImplicitGemm";
  }
  return "?";
}

template <int N>
ConvPlan plan_conv(ConvDirection direction, const Shape& input_shape, const Shape& weight_shape,
                   DType dtype, Device device, const ConvOptions<N>& options,
                   ConvStrategy strategy, ConvLayout layout) {
  const bool host_f64 = dtype == DType::f64 && device.is_cpu();
  if (!common::is_float_dtype(dtype) && !host_f64) {
    fail(ErrorCode::DTypeMismatch,
         cat("plan_conv: dtype is ", dtype_name(dtype),
             "; expected f32, f16 or bf16 (f64 on the CPU)"));
  }
  const ConvShape s =
      conv_shape<N>("plan_conv", input_shape, weight_shape, dtype, options, layout);
  // Shapes only: tensors are taken to be contiguous in `layout` (allocator-aligned).
  const bool nhwc = layout == ConvLayout::Nhwc;
  if (strategy == ConvStrategy::Autotune)
    strategy = planned_autotune_strategy(direction, s, device, layout, nhwc);
  return plan_for("plan_conv", s, device, direction, strategy, nhwc,
                  nhwc && direction == ConvDirection::Forward && hopper_for_dense(s, device));
}

template <int N>
Tensor conv_forward(const Tensor& input, const Tensor& weight, const Tensor& bias,
                    const ConvOptions<N>& options, ConvStrategy strategy,
                    const ConvEpilogue& epilogue, const Stream& stream) {
  OpCall call("conv_forward", "input", input, stream);
  const ConvShape s = forward_shape<N>(call, input, weight, options, ConvLayout::Nchw);
  Tensor out = empty_like_order(call, out_shape(s, ConvLayout::Nchw), input.dtype(), input,
                                ConvLayout::Nchw);
  forward_impl<N>(call, out, input, weight, bias, options, strategy, epilogue, ConvLayout::Nchw);
  return out;
}

template <int N>
void conv_forward_into(const Tensor& out, const Tensor& input, const Tensor& weight,
                       const Tensor& bias, const ConvOptions<N>& options, ConvStrategy strategy,
                       const ConvEpilogue& epilogue, const Stream& stream) {
  OpCall call("conv_forward", "input", input, stream);
  forward_impl<N>(call, out, input, weight, bias, options, strategy, epilogue, ConvLayout::Nchw);
}

template <int N>
Tensor conv_forward_nhwc(const Tensor& input, const Tensor& weight, const Tensor& bias,
                         const ConvOptions<N>& options, ConvStrategy strategy,
                         const ConvEpilogue& epilogue, const Stream& stream) {
  OpCall call("conv_forward_nhwc", "input", input, stream);
  const ConvShape s = forward_shape<N>(call, input, weight, options, ConvLayout::Nhwc);
  Tensor out = call.empty(out_shape(s, ConvLayout::Nhwc), input.dtype());
  forward_impl<N>(call, out, input, weight, bias, options, strategy, epilogue, ConvLayout::Nhwc);
  return out;
}

template <int N>
void conv_forward_nhwc_into(const Tensor& out, const Tensor& input, const Tensor& weight,
                            const Tensor& bias, const ConvOptions<N>& options,
                            ConvStrategy strategy, const ConvEpilogue& epilogue,
                            const Stream& stream) {
  OpCall call("conv_forward_nhwc", "input", input, stream);
  forward_impl<N>(call, out, input, weight, bias, options, strategy, epilogue, ConvLayout::Nhwc);
}

template <int N>
Tensor conv_data_backward(const Tensor& dout, const Tensor& weight, const Shape& input_shape,
                          const ConvOptions<N>& options, ConvStrategy strategy,
                          const Stream& stream) {
  OpCall call("conv_data_backward", "dout", dout, stream);
  data_shape<N>(call, dout, weight, input_shape, options, ConvLayout::Nchw);
  Tensor dinput = empty_like_order(call, input_shape, dout.dtype(), dout, ConvLayout::Nchw);
  data_impl<N>(call, dinput, dout, weight, options, strategy, ConvLayout::Nchw);
  return dinput;
}

template <int N>
void conv_data_backward_into(const Tensor& dinput_out, const Tensor& dout, const Tensor& weight,
                             const ConvOptions<N>& options, ConvStrategy strategy,
                             const Stream& stream) {
  OpCall call("conv_data_backward", "dout", dout, stream);
  data_impl<N>(call, dinput_out, dout, weight, options, strategy, ConvLayout::Nchw);
}

template <int N>
Tensor conv_data_backward_nhwc(const Tensor& dout, const Tensor& weight, const Shape& input_shape,
                               const ConvOptions<N>& options, ConvStrategy strategy,
                               const Stream& stream) {
  OpCall call("conv_data_backward_nhwc", "dout", dout, stream);
  data_shape<N>(call, dout, weight, input_shape, options, ConvLayout::Nhwc);
  Tensor dinput = call.empty(input_shape, dout.dtype());
  data_impl<N>(call, dinput, dout, weight, options, strategy, ConvLayout::Nhwc);
  return dinput;
}

template <int N>
void conv_data_backward_nhwc_into(const Tensor& dinput_out, const Tensor& dout,
                                  const Tensor& weight, const ConvOptions<N>& options,
                                  ConvStrategy strategy, const Stream& stream) {
  OpCall call("conv_data_backward_nhwc", "dout", dout, stream);
  data_impl<N>(call, dinput_out, dout, weight, options, strategy, ConvLayout::Nhwc);
}

template <int N>
ConvWeightGrads conv_weight_backward(const Tensor& dout, const Tensor& input,
                                     const Shape& weight_shape, const ConvOptions<N>& options,
                                     bool with_bias, ConvStrategy strategy,
                                     const Stream& stream) {
  OpCall call("conv_weight_backward", "dout", dout, stream);
  const ConvShape s = weight_shape_of<N>(call, dout, input, weight_shape, options, ConvLayout::Nchw);
  ConvWeightGrads g;
  g.dweight = call.empty(weight_shape, dout.dtype());
  if (with_bias) g.dbias = call.empty({s.out_channels}, dout.dtype());
  weight_impl<N>(call, g.dweight, g.dbias, dout, input, options, strategy, ConvLayout::Nchw);
  return g;
}

template <int N>
void conv_weight_backward_into(const Tensor& dweight_out, const Tensor& dbias_out,
                               const Tensor& dout, const Tensor& input,
                               const ConvOptions<N>& options, ConvStrategy strategy,
                               const Stream& stream) {
  OpCall call("conv_weight_backward", "dout", dout, stream);
  weight_impl<N>(call, dweight_out, dbias_out, dout, input, options, strategy, ConvLayout::Nchw);
}

template <int N>
ConvWeightGrads conv_weight_backward_nhwc(const Tensor& dout, const Tensor& input,
                                          const Shape& weight_shape, const ConvOptions<N>& options,
                                          bool with_bias, ConvStrategy strategy,
                                          const Stream& stream) {
  OpCall call("conv_weight_backward_nhwc", "dout", dout, stream);
  const ConvShape s = weight_shape_of<N>(call, dout, input, weight_shape, options, ConvLayout::Nhwc);
  ConvWeightGrads g;
  g.dweight = call.empty(weight_shape, dout.dtype());
  if (with_bias) g.dbias = call.empty({s.out_channels}, dout.dtype());
  weight_impl<N>(call, g.dweight, g.dbias, dout, input, options, strategy, ConvLayout::Nhwc);
  return g;
}

template <int N>
void conv_weight_backward_nhwc_into(const Tensor& dweight_out, const Tensor& dbias_out,
                                    const Tensor& dout, const Tensor& input,
                                    const ConvOptions<N>& options, ConvStrategy strategy,
                                    const Stream& stream) {
  OpCall call("conv_weight_backward_nhwc", "dout", dout, stream);
  weight_impl<N>(call, dweight_out, dbias_out, dout, input, options, strategy, ConvLayout::Nhwc);
}

#define RUDNN_CONV_INSTANTIATE(N)                                                                \
  template ConvPlan plan_conv<N>(ConvDirection, const Shape&, const Shape&, DType, Device,       \
                                 const ConvOptions<N>&, ConvStrategy, ConvLayout);               \
  template Tensor conv_forward<N>(const Tensor&, const Tensor&, const Tensor&,                   \
                                  const ConvOptions<N>&, ConvStrategy, const ConvEpilogue&,      \
                                  const Stream&);                                                \
  template void conv_forward_into<N>(const Tensor&, const Tensor&, const Tensor&, const Tensor&, \
                                     const ConvOptions<N>&, ConvStrategy, const ConvEpilogue&,   \
                                     const Stream&);                                             \
  template Tensor conv_forward_nhwc<N>(const Tensor&, const Tensor&, const Tensor&,              \
                                       const ConvOptions<N>&, ConvStrategy, const ConvEpilogue&, \
                                       const Stream&);                                           \
  template void conv_forward_nhwc_into<N>(const Tensor&, const Tensor&, const Tensor&,           \
                                          const Tensor&, const ConvOptions<N>&, ConvStrategy,    \
                                          const ConvEpilogue&, const Stream&);                   \
  template Tensor conv_data_backward<N>(const Tensor&, const Tensor&, const Shape&,              \
                                        const ConvOptions<N>&, ConvStrategy, const Stream&);     \
  template void conv_data_backward_into<N>(const Tensor&, const Tensor&, const Tensor&,          \
                                           const ConvOptions<N>&, ConvStrategy, const Stream&);  \
  template Tensor conv_data_backward_nhwc<N>(const Tensor&, const Tensor&, const Shape&,         \
                                             const ConvOptions<N>&, ConvStrategy,               \
                                             const Stream&);                                     \
  template void conv_data_backward_nhwc_into<N>(const Tensor&, const Tensor&, const Tensor&,     \
                                                const ConvOptions<N>&, ConvStrategy,            \
                                                const Stream&);                                  \
  template ConvWeightGrads conv_weight_backward<N>(const Tensor&, const Tensor&, const Shape&,   \
                                                   const ConvOptions<N>&, bool, ConvStrategy,    \
                                                   const Stream&);                               \
  template void conv_weight_backward_into<N>(const Tensor&, const Tensor&, const Tensor&,        \
                                             const Tensor&, const ConvOptions<N>&,              \
                                             ConvStrategy, const Stream&);                       \
  template ConvWeightGrads conv_weight_backward_nhwc<N>(const Tensor&, const Tensor&,            \
                                                        const Shape&, const ConvOptions<N>&,     \
                                                        bool, ConvStrategy, const Stream&);      \
  template void conv_weight_backward_nhwc_into<N>(const Tensor&, const Tensor&, const Tensor&,   \
                                                  const Tensor&, const ConvOptions<N>&,         \
                                                  ConvStrategy, const Stream&);
RUDNN_CONV_INSTANTIATE(1)
RUDNN_CONV_INSTANTIATE(2)
RUDNN_CONV_INSTANTIATE(3)
#undef RUDNN_CONV_INSTANTIATE

}  // namespace rudnn
