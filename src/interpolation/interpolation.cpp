// Interpolation family entry points: the family's rules (rank per mode, size or scale, the
// scales torch's kernels use) on top of the shared checks and views.
#include "rudnn/interpolation.h"

#include <cmath>
#include <cstdint>

#include "common/op_call.h"
#include "common/views.h"
#include "interpolation/problem.h"
#include "interpolation/reference.h"
#include "interpolation/taps.h"
#if RUDNN_WITH_CUDA
#include "interpolation/cuda/launch.h"
#endif

namespace rudnn {

namespace {

using common::OpCall;
using common::run_backend;
using detail::cat;
using detail::fail;
using interpolation_detail::Axis;
using interpolation_detail::InterpShape;
using interpolation_detail::Rule;

// Sizes the kernels index with 32-bit integers per axis.
constexpr int64_t kMaxAxis = (int64_t{1} << 31) - 1;

const char* mode_name(InterpolateMode m) {
  switch (m) {
    case InterpolateMode::nearest:
      return "nearest";
    case InterpolateMode::nearest_exact:
      return "nearest_exact";
    case InterpolateMode::linear:
      return "linear";
    case InterpolateMode::bilinear:
      return "bilinear";
    case InterpolateMode::trilinear:
      return "trilinear";
    case InterpolateMode::bicubic:
      return "bicubic";
    case InterpolateMode::area:
      return "area";
  }
  return "?";
}

// The entry of a per-axis list for spatial axis a (a single entry stands for every axis).
template <class V>
V entry(const std::vector<V>& values, int a) {
  return values.size() == 1 ? values[0] : values[a];
}

template <class V>
void require_list_length(const char* op, const char* name, const std::vector<V>& values,
                         int dims) {
  if (values.size() != 1 && static_cast<int>(values.size()) != dims) {
    fail(ErrorCode::InvalidArgument,
         cat(op, ": options.", name, " has ", values.size(), " entries; expected ",
             dims == 1 ? "1" : cat("1 (for every axis) or ", dims, " (one per spatial axis)")));
  }
}

// Every shape and option rule; `shape_name` names the tensor (or shape) whose shape is the
// forward input's.
InterpShape interp_shape(const char* op, const char* shape_name, const Shape& in,
                         const InterpolateOptions& o) {
  if (in.size() < 3 || in.size() > 5) {
    fail(ErrorCode::ShapeMismatch,
         cat(op, ": ", shape_name, " has shape ", shape_str(in),
             "; expected 3-d [N, C, L], 4-d [N, C, H, W] or 5-d [N, C, D, H, W]"));
  }
  for (size_t a = 1; a < in.size(); ++a) {
    if (in[a] < 1) {
      fail(ErrorCode::InvalidArgument, cat(op, ": ", shape_name, " has shape ", shape_str(in),
                                           "; expected no empty axis but the batch"));
    }
  }
  if (in[0] < 0) {
    fail(ErrorCode::InvalidArgument,
         cat(op, ": ", shape_name, " has shape ", shape_str(in), "; expected sizes >= 0"));
  }
  const int dims = static_cast<int>(in.size()) - 2;
  InterpShape s;
  s.dims = dims;
  s.planes = in[0] * in[1];
  const int mode = static_cast<int>(o.mode);
  if (mode < 0 || mode > static_cast<int>(InterpolateMode::area)) {
    fail(ErrorCode::InvalidArgument,
         cat(op, ": options.mode is ", mode,
             "; expected nearest, nearest_exact, linear, bilinear, trilinear, bicubic or area"));
  }
  int needs_dims = 0;  // 0: any
  switch (o.mode) {
    case InterpolateMode::nearest:
      s.rule = interpolation_detail::kNearest;
      break;
    case InterpolateMode::nearest_exact:
      s.rule = interpolation_detail::kNearestExact;
      break;
    case InterpolateMode::linear:
      s.rule = interpolation_detail::kLinear;
      needs_dims = 1;
      break;
    case InterpolateMode::bilinear:
      s.rule = interpolation_detail::kLinear;
      needs_dims = 2;
      break;
    case InterpolateMode::trilinear:
      s.rule = interpolation_detail::kLinear;
      needs_dims = 3;
      break;
    case InterpolateMode::bicubic:
      s.rule = interpolation_detail::kCubic;
      needs_dims = 2;
      break;
    case InterpolateMode::area:
      s.rule = interpolation_detail::kArea;
      break;
  }
  if (needs_dims != 0 && needs_dims != dims) {
    fail(ErrorCode::InvalidArgument,
         cat(op, ": options.mode ", mode_name(o.mode), " takes ", needs_dims + 2, "-d input; ",
             shape_name, " has shape ", shape_str(in)));
  }
  const bool takes_corners =
      s.rule == interpolation_detail::kLinear || s.rule == interpolation_detail::kCubic;
  if (o.align_corners.has_value() && !takes_corners) {
    fail(ErrorCode::InvalidArgument,
         cat(op, ": options.align_corners is set with mode ", mode_name(o.mode),
             "; expected it unset (only linear, bilinear, trilinear and bicubic take it)"));
  }
  s.align_corners = o.align_corners.value_or(false);
  if (o.antialias && o.mode != InterpolateMode::bilinear && o.mode != InterpolateMode::bicubic) {
    fail(ErrorCode::InvalidArgument,
         cat(op, ": options.antialias is set with mode ", mode_name(o.mode),
             "; expected mode bilinear or bicubic (on 4-d input), as torch"));
  }
  s.antialias = o.antialias;

  const bool has_size = !o.size.empty(), has_scale = !o.scale_factor.empty();
  if (has_size == has_scale) {
    fail(ErrorCode::InvalidArgument,
         cat(op, ": options.size and options.scale_factor are ",
             has_size ? "both given" : "both empty", "; expected exactly one of them"));
  }
  if (has_size && o.recompute_scale_factor) {
    fail(ErrorCode::InvalidArgument,
         cat(op, ": options.recompute_scale_factor is set with an explicit options.size; "
                 "expected it only with options.scale_factor"));
  }
  if (has_size) require_list_length(op, "size", o.size, dims);
  if (has_scale) require_list_length(op, "scale_factor", o.scale_factor, dims);

  const bool scale_used = has_scale && !o.recompute_scale_factor;
  bool same_size = true;
  for (int a = 0; a < dims; ++a) {
    Axis& ax = s.axis[3 - dims + a];
    ax.in = in[2 + a];
    if (ax.in > kMaxAxis) {
      fail(ErrorCode::InvalidArgument, cat(op, ": ", shape_name, " has shape ", shape_str(in),
                                           "; expected each spatial size < 2^31"));
    }
    double scale = 0.0;
    if (has_size) {
      ax.out = entry(o.size, a);
      if (ax.out <= 0 || ax.out > kMaxAxis) {
        fail(ErrorCode::InvalidArgument, cat(op, ": options.size is ", ax.out,
                                             " on spatial axis ", a, "; expected 0 < size < 2^31"));
      }
    } else {
      scale = entry(o.scale_factor, a);
      if (!std::isfinite(scale) || scale <= 0.0) {
        fail(ErrorCode::InvalidArgument, cat(op, ": options.scale_factor is ", scale,
                                             " on spatial axis ", a, "; expected finite and > 0"));
      }
      const double size = std::floor(static_cast<double>(ax.in) * scale);
      if (size < 1.0 || size > static_cast<double>(kMaxAxis)) {
        fail(ErrorCode::InvalidArgument,
             cat(op, ": ", shape_name, " has shape ", shape_str(in), " and options.scale_factor ",
                 scale, " on spatial axis ", a, " give output size ", size,
                 "; expected 0 < output size < 2^31"));
      }
      ax.out = static_cast<int64_t>(size);
    }
    same_size = same_size && ax.out == ax.in;
    // torch's area_pixel_compute_scale / compute_scales_value, in FP32 and in float64.
    if (takes_corners && s.align_corners) {
      ax.ratio = ax.out > 1 ? static_cast<float>(ax.in - 1) / static_cast<float>(ax.out - 1) : 0.0f;
      ax.ratio64 = ax.out > 1 ? static_cast<double>(ax.in - 1) / static_cast<double>(ax.out - 1)
                              : 0.0;
    } else if (scale_used) {
      ax.ratio = static_cast<float>(1.0 / scale);
      ax.ratio64 = 1.0 / scale;
    } else {
      ax.ratio = static_cast<float>(ax.in) / static_cast<float>(ax.out);
      ax.ratio64 = static_cast<double>(ax.in) / static_cast<double>(ax.out);
    }
  }
  // torch's linear and cubic kernels copy when no axis changes size, whatever the scale (with
  // antialias its CPU kernels and its CUDA backward do; see the header).
  if (takes_corners && same_size) {
    s.rule = interpolation_detail::kIdentity;
    s.antialias = false;
  }
  if (s.antialias) {
    const bool cubic = s.rule == interpolation_detail::kCubic;
    for (int a = 1; a < 3; ++a) {
      s.axis[a].aa_taps = interpolation_detail::aa_max_taps<float>(cubic, s.axis[a].ratio);
    }
  }
  return s;
}

Shape out_shape(const Shape& in, const InterpShape& s) {
  Shape shape{in[0], in[1]};
  for (int a = 3 - s.dims; a < 3; ++a) shape.push_back(s.axis[a].out);
  return shape;
}

// The GPU's antialias weight tables, freed stream-ordered after the call's kernels (the CPU
// reference builds its own in float64).
void* aa_workspace(OpCall& call, const InterpShape& s) {
  if (!s.antialias || !call.device.is_cuda()) return nullptr;
  return call.keep(call.empty({interpolation_detail::aa_workspace_bytes(s)}, DType::u8)).data();
}

void forward_impl(OpCall& call, const Tensor& out, const Tensor& input,
                  const InterpolateOptions& options) {
  common::require_float(call, "input", input);
  interpolation_detail::Forward p;
  p.s = interp_shape(call.op, "input", input.shape(), options);
  p.s.dtype = input.dtype();
  p.out = common::dense_out(call, "out", out, out_shape(input.shape(), p.s), p.s.dtype);
  common::require_no_overlap(call, "out", out, {{"input", &input}});
  if (out.numel() == 0) return;
  p.input = common::dense_in(call, input);
  p.workspace = aa_workspace(call, p.s);
  run_backend(call, p, RUDNN_BACKENDS(interpolation_detail, forward));
}

void backward_impl(OpCall& call, const Tensor& dinput, const Tensor& dout,
                   const Shape& input_shape, const InterpolateOptions& options) {
  common::require_float(call, "dout", dout);
  interpolation_detail::Backward p;
  p.s = interp_shape(call.op, "input_shape", input_shape, options);
  p.s.dtype = dout.dtype();
  p.deterministic = options.deterministic;
  common::require_shape(call, "dout", dout, out_shape(input_shape, p.s),
                        "the interpolated output's shape [N, C, out...]");
  p.dinput = common::dense_out(call, "dinput_out", dinput, input_shape, p.s.dtype);
  common::require_no_overlap(call, "dinput_out", dinput, {{"dout", &dout}});
  if (dinput.numel() == 0) return;
  p.dout = common::dense_in(call, dout);
  p.workspace = aa_workspace(call, p.s);
  run_backend(call, p, RUDNN_BACKENDS(interpolation_detail, backward));
}

}  // namespace

Shape interpolate_output_shape(const Shape& input_shape, const InterpolateOptions& options) {
  return out_shape(input_shape, interp_shape("interpolate", "input_shape", input_shape, options));
}

Tensor interpolate(const Tensor& input, const InterpolateOptions& options, const Stream& stream) {
  OpCall call("interpolate", "input", input, stream);
  common::require_float(call, "input", input);
  const InterpShape s = interp_shape(call.op, "input", input.shape(), options);
  Tensor out = call.empty(out_shape(input.shape(), s), input.dtype());
  forward_impl(call, out, input, options);
  return out;
}

void interpolate_into(const Tensor& out, const Tensor& input, const InterpolateOptions& options,
                      const Stream& stream) {
  OpCall call("interpolate", "input", input, stream);
  forward_impl(call, out, input, options);
}

Tensor interpolate_backward(const Tensor& dout, const Shape& input_shape,
                            const InterpolateOptions& options, const Stream& stream) {
  OpCall call("interpolate_backward", "dout", dout, stream);
  common::require_float(call, "dout", dout);
  interp_shape(call.op, "input_shape", input_shape, options);
  Tensor dinput = call.empty(input_shape, dout.dtype());
  backward_impl(call, dinput, dout, input_shape, options);
  return dinput;
}

void interpolate_backward_into(const Tensor& dinput_out, const Tensor& dout,
                               const Shape& input_shape, const InterpolateOptions& options,
                               const Stream& stream) {
  OpCall call("interpolate_backward", "dout", dout, stream);
  backward_impl(call, dinput_out, dout, input_shape, options);
}

}  // namespace rudnn
