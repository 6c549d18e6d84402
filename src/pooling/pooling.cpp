// Pooling family entry points: the family's rules (rank, window lists, output sizes) on top
// of the shared checks and views.
#include "rudnn/pooling.h"

#include "common/op_call.h"
#include "common/views.h"
#include "pooling/problem.h"
#include "pooling/reference.h"
#if RUDNN_WITH_CUDA
#include "pooling/cuda/launch.h"
#endif

namespace rudnn {

namespace {

using common::OpCall;
using common::run_backend;
using detail::cat;
using detail::fail;
using pooling_detail::PoolShape;

// A per-axis option list: `dims` entries, or empty for `fallback` (null: required).
void axis_list(const OpCall& call, const char* name, const std::vector<int64_t>& values, int dims,
               const int64_t* fallback, int64_t out[3]) {
  if (values.empty() && fallback != nullptr) {
    for (int a = 0; a < dims; ++a) out[3 - dims + a] = fallback[3 - dims + a];
    return;
  }
  if (static_cast<int>(values.size()) != dims) {
    fail(ErrorCode::InvalidArgument,
         cat(call.op, ": options.", name, " has ", values.size(), " entries; expected ", dims,
             " (one per spatial axis)", fallback != nullptr ? " or none" : ""));
  }
  for (int a = 0; a < dims; ++a) out[3 - dims + a] = values[a];
}

// Channels-last dense: C innermost, then the spatial axes in order, then N; axes of size 1
// may carry any stride (torch's rule for what is channels-last).
bool dense_channels_last(const Tensor& t) {
  if (t.dim() < 3) return false;
  int64_t expected = 1;
  auto fits = [&](int64_t axis) {
    const bool ok = t.shape()[axis] == 1 || t.strides()[axis] == expected;
    expected *= t.shape()[axis];
    return ok;
  };
  if (!fits(1)) return false;
  for (int64_t a = t.dim() - 1; a >= 2; --a) {
    if (!fits(a)) return false;
  }
  return fits(0);
}

// A contiguous input runs in NCHW order even when it is channels-last too (C = 1 or one
// spatial position): both orders are the same memory then.
bool runs_channels_last(const Tensor& input) {
  return !input.is_contiguous() && dense_channels_last(input);
}

// An uninitialised tensor of `shape` in the problem's layout.
Tensor empty_in_layout(const OpCall& call, const Shape& shape, DType dtype, bool channels_last) {
  if (!channels_last) return call.empty(shape, dtype);
  Shape stored{shape[0]};
  for (size_t a = 2; a < shape.size(); ++a) stored.push_back(shape[a]);
  stored.push_back(shape[1]);
  const Tensor t = call.empty(stored, dtype);
  Shape strides(shape.size());
  int64_t step = shape[1];
  strides[1] = 1;
  for (size_t a = shape.size() - 1; a >= 2; --a) {
    strides[a] = step;
    step *= shape[a];
  }
  strides[0] = step;
  return t.as_strided(shape, strides, t.offset());
}

// An input operand in the problem's layout: in place when it fits, else one copy into it.
const void* layout_in(OpCall& call, const Tensor& t, bool channels_last) {
  if (!channels_last) return common::dense_in(call, t);
  if (dense_channels_last(t)) return t.data();
  const Tensor copy = empty_in_layout(call, t.shape(), t.dtype(), true);
  copy.copy_from(t, call.stream);
  return call.keep(copy).data();
}

// An _into output: contiguous for an NCHW problem, channels-last dense for a channels-last one.
void* layout_out(const OpCall& call, const char* name, const Tensor& out, const Shape& shape,
                 DType dtype, bool channels_last) {
  if (!channels_last) return common::dense_out(call, name, out, shape, dtype);
  common::require_out(call, name, out, shape, dtype);
  if (!dense_channels_last(out)) {
    fail(ErrorCode::InvalidArgument,
         cat(call.op, ": ", name, " has strides ", shape_str(out.strides()),
             "; expected channels-last dense (the input is channels-last)"));
  }
  return out.data();
}

// The rules every pooling op shares: dtype, rank, no empty axis but the batch, the layout.
PoolShape base_shape(const OpCall& call, const Tensor& input) {
  common::require_float(call, "input", input);
  if (input.dim() < 3 || input.dim() > 5) {
    fail(ErrorCode::ShapeMismatch,
         cat(call.op, ": input has shape ", shape_str(input.shape()),
             "; expected 3-d [N, C, L], 4-d [N, C, H, W] or 5-d [N, C, D, H, W]"));
  }
  for (int64_t a = 1; a < input.dim(); ++a) {
    if (input.shape()[a] < 1) {
      fail(ErrorCode::InvalidArgument, cat(call.op, ": input has shape ", shape_str(input.shape()),
                                           "; expected no empty axis but the batch"));
    }
  }
  const int dims = static_cast<int>(input.dim()) - 2;
  PoolShape s;
  s.dtype = input.dtype();
  s.planes = input.shape()[0] * input.shape()[1];
  s.channels = input.shape()[1];
  s.channels_last = runs_channels_last(input);
  for (int a = 0; a < dims; ++a) s.in[3 - dims + a] = input.shape()[2 + a];
  return s;
}

enum class Kind { max, avg, lp };

PoolShape pool_shape(const OpCall& call, const Tensor& input, const PoolOptions& o, Kind kind) {
  PoolShape s = base_shape(call, input);
  const int dims = static_cast<int>(input.dim()) - 2;
  axis_list(call, "kernel", o.kernel, dims, nullptr, s.kernel);
  axis_list(call, "stride", o.stride, dims, s.kernel, s.stride);
  const int64_t zeros[3] = {0, 0, 0}, ones[3] = {1, 1, 1};
  axis_list(call, "padding", o.padding, dims, zeros, s.padding);
  axis_list(call, "dilation", o.dilation, dims, ones, s.dilation);
  for (int a = 3 - dims; a < 3; ++a) {
    if (s.kernel[a] <= 0 || s.stride[a] <= 0 || s.dilation[a] <= 0) {
      fail(ErrorCode::InvalidArgument,
           cat(call.op, ": options.kernel ", s.kernel[a], ", stride ", s.stride[a], ", dilation ",
               s.dilation[a], " on spatial axis ", a - (3 - dims), "; expected each > 0"));
    }
    if (s.padding[a] < 0 || s.padding[a] > s.kernel[a] / 2) {
      fail(ErrorCode::InvalidArgument,
           cat(call.op, ": options.padding is ", s.padding[a], " on spatial axis ", a - (3 - dims),
               "; expected 0 <= padding <= kernel / 2 = ", s.kernel[a] / 2));
    }
    if (kind == Kind::lp && s.padding[a] != 0) {
      fail(ErrorCode::InvalidArgument, cat(call.op, ": options.padding is ", s.padding[a],
                                           "; expected 0 (LP pooling has no padding)"));
    }
    if (kind != Kind::max && s.dilation[a] != 1) {
      fail(ErrorCode::InvalidArgument,
           cat(call.op, ": options.dilation is ", s.dilation[a], "; expected 1 (",
               kind == Kind::avg ? "average" : "LP", " pooling has no dilation)"));
    }
    const int64_t span = s.in[a] + 2 * s.padding[a] - s.dilation[a] * (s.kernel[a] - 1) - 1;
    int64_t size =
        span < 0 ? 0
                 : (o.ceil_mode ? (span + s.stride[a] - 1) / s.stride[a] : span / s.stride[a]) + 1;
    if (span >= 0 && o.ceil_mode && (size - 1) * s.stride[a] >= s.in[a] + s.padding[a]) --size;
    if (size <= 0) {
      fail(ErrorCode::InvalidArgument,
           cat(call.op, ": input has shape ", shape_str(input.shape()), ", kernel ", s.kernel[a],
               " dilation ", s.dilation[a], " padding ", s.padding[a], " on spatial axis ",
               a - (3 - dims), " give output size ", size,
               "; expected the window to fit the padded input (output size >= 1)"));
    }
    s.out[a] = size;
  }
  if (kind == Kind::avg) {
    if (o.divisor_override < 0) {
      fail(ErrorCode::InvalidArgument, cat(call.op, ": options.divisor_override is ",
                                           o.divisor_override, "; expected 0 (none) or > 0"));
    }
    s.count_include_pad = o.count_include_pad;
    s.divisor_override = o.divisor_override;
  }
  if (kind == Kind::lp && o.divisor_override != 0) {
    fail(ErrorCode::InvalidArgument, cat(call.op, ": options.divisor_override is ",
                                         o.divisor_override, "; expected 0 (LP pooling has none)"));
  }
  return s;
}

PoolShape lp_shape(const OpCall& call, const Tensor& input, double norm_type,
                   const PoolOptions& o) {
  PoolShape s = pool_shape(call, input, o, Kind::lp);
  common::require_finite_positive(call, "norm_type", norm_type);
  s.norm = norm_type;
  return s;
}

PoolShape adaptive_shape(const OpCall& call, const Tensor& input,
                         const std::vector<int64_t>& output_size) {
  PoolShape s = base_shape(call, input);
  const int dims = static_cast<int>(input.dim()) - 2;
  if (static_cast<int>(output_size.size()) != dims) {
    fail(ErrorCode::InvalidArgument,
         cat(call.op, ": output_size has ", output_size.size(), " entries; expected ", dims,
             " (one per spatial axis)"));
  }
  for (int a = 0; a < dims; ++a) {
    if (output_size[a] < 1) {
      fail(ErrorCode::InvalidArgument, cat(call.op, ": output_size[", a, "] is ", output_size[a],
                                           "; expected >= 1"));
    }
    s.out[3 - dims + a] = output_size[a];
  }
  s.adaptive = true;
  return s;
}

Shape out_shape(const Tensor& input, const PoolShape& s) {
  Shape shape{input.shape()[0], input.shape()[1]};
  const int dims = static_cast<int>(input.dim()) - 2;
  for (int a = 3 - dims; a < 3; ++a) shape.push_back(s.out[a]);
  return shape;
}

void require_like_input(const OpCall& call, const char* name, const Tensor& t, const Tensor& input,
                        const Shape& shape) {
  common::require_defined(call, name, t);
  if (t.dtype() != input.dtype()) {
    fail(ErrorCode::DTypeMismatch, cat(call.op, ": ", name, " has dtype ", dtype_name(t.dtype()),
                                       "; expected input's dtype ", dtype_name(input.dtype())));
  }
  common::require_device(call, name, t);
  common::require_shape(call, name, t, shape, "the pooled output's shape [N, C, out...]");
}

void max_impl(OpCall& call, const PoolShape& s, const Tensor& out, const Tensor& indices,
              const Tensor& input) {
  pooling_detail::MaxForward p;
  p.s = s;
  const Shape shape = out_shape(input, s);
  p.out = layout_out(call, "out", out, shape, s.dtype, s.channels_last);
  p.indices = static_cast<int64_t*>(
      layout_out(call, "indices_out", indices, shape, DType::i64, s.channels_last));
  common::require_no_overlap(call, "out", out, {{"input", &input}, {"indices_out", &indices}});
  common::require_no_overlap(call, "indices_out", indices, {{"input", &input}});
  if (out.numel() == 0) return;
  p.input = layout_in(call, input, s.channels_last);
  run_backend(call, p, RUDNN_BACKENDS(pooling_detail, max_forward));
}

void max_backward_impl(OpCall& call, const PoolShape& s, const Tensor& dinput, const Tensor& dout,
                       const Tensor& indices, const Tensor& input) {
  pooling_detail::MaxBackward p;
  p.s = s;
  const Shape shape = out_shape(input, s);
  require_like_input(call, "dout", dout, input, shape);
  common::require_dtype(call, "indices", indices, {DType::i64});
  common::require_shape(call, "indices", indices, shape,
                        "the pooled output's shape [N, C, out...]");
  p.dinput = layout_out(call, "dinput_out", dinput, input.shape(), s.dtype, s.channels_last);
  common::require_no_overlap(call, "dinput_out", dinput,
                             {{"dout", &dout}, {"indices", &indices}, {"input", &input}});
  if (dinput.numel() == 0) return;
  p.dout = layout_in(call, dout, s.channels_last);
  p.indices = static_cast<const int64_t*>(layout_in(call, indices, s.channels_last));
  run_backend(call, p, RUDNN_BACKENDS(pooling_detail, max_backward));
}

void avg_impl(OpCall& call, const PoolShape& s, const Tensor& out, const Tensor& input) {
  pooling_detail::AvgForward p;
  p.s = s;
  p.out = layout_out(call, "out", out, out_shape(input, s), s.dtype, s.channels_last);
  common::require_no_overlap(call, "out", out, {{"input", &input}});
  if (out.numel() == 0) return;
  p.input = layout_in(call, input, s.channels_last);
  run_backend(call, p, RUDNN_BACKENDS(pooling_detail, avg_forward));
}

void avg_backward_impl(OpCall& call, const PoolShape& s, const Tensor& dinput, const Tensor& dout,
                       const Tensor& input) {
  pooling_detail::AvgBackward p;
  p.s = s;
  require_like_input(call, "dout", dout, input, out_shape(input, s));
  p.dinput = layout_out(call, "dinput_out", dinput, input.shape(), s.dtype, s.channels_last);
  common::require_no_overlap(call, "dinput_out", dinput, {{"dout", &dout}, {"input", &input}});
  if (dinput.numel() == 0) return;
  p.dout = layout_in(call, dout, s.channels_last);
  run_backend(call, p, RUDNN_BACKENDS(pooling_detail, avg_backward));
}

void lp_impl(OpCall& call, const PoolShape& s, const Tensor& out, const Tensor& input) {
  pooling_detail::LpForward p;
  p.s = s;
  p.out = layout_out(call, "out", out, out_shape(input, s), s.dtype, s.channels_last);
  common::require_no_overlap(call, "out", out, {{"input", &input}});
  if (out.numel() == 0) return;
  p.input = layout_in(call, input, s.channels_last);
  run_backend(call, p, RUDNN_BACKENDS(pooling_detail, lp_forward));
}

void lp_backward_impl(OpCall& call, const PoolShape& s, const Tensor& dinput, const Tensor& dout,
                      const Tensor& input, const Tensor& out) {
  pooling_detail::LpBackward p;
  p.s = s;
  const Shape shape = out_shape(input, s);
  require_like_input(call, "dout", dout, input, shape);
  require_like_input(call, "out", out, input, shape);
  p.dinput = layout_out(call, "dinput_out", dinput, input.shape(), s.dtype, s.channels_last);
  common::require_no_overlap(call, "dinput_out", dinput,
                             {{"dout", &dout}, {"input", &input}, {"out", &out}});
  if (dinput.numel() == 0) return;
  p.dout = layout_in(call, dout, s.channels_last);
  p.input = layout_in(call, input, s.channels_last);
  p.out = layout_in(call, out, s.channels_last);
  run_backend(call, p, RUDNN_BACKENDS(pooling_detail, lp_backward));
}

}  // namespace

MaxPoolResult max_pool(const Tensor& input, const PoolOptions& options, const Stream& stream) {
  OpCall call("max_pool", "input", input, stream);
  const PoolShape s = pool_shape(call, input, options, Kind::max);
  const Shape shape = out_shape(input, s);
  MaxPoolResult r{empty_in_layout(call, shape, input.dtype(), s.channels_last),
                  empty_in_layout(call, shape, DType::i64, s.channels_last)};
  max_impl(call, s, r.out, r.indices, input);
  return r;
}

void max_pool_into(const Tensor& out, const Tensor& indices_out, const Tensor& input,
                   const PoolOptions& options, const Stream& stream) {
  OpCall call("max_pool", "input", input, stream);
  max_impl(call, pool_shape(call, input, options, Kind::max), out, indices_out, input);
}

Tensor max_pool_backward(const Tensor& dout, const Tensor& indices, const Tensor& input,
                         const PoolOptions& options, const Stream& stream) {
  OpCall call("max_pool_backward", "input", input, stream);
  const PoolShape s = pool_shape(call, input, options, Kind::max);
  Tensor dinput = empty_in_layout(call, input.shape(), input.dtype(), s.channels_last);
  max_backward_impl(call, s, dinput, dout, indices, input);
  return dinput;
}

void max_pool_backward_into(const Tensor& dinput_out, const Tensor& dout, const Tensor& indices,
                            const Tensor& input, const PoolOptions& options, const Stream& stream) {
  OpCall call("max_pool_backward", "input", input, stream);
  max_backward_impl(call, pool_shape(call, input, options, Kind::max), dinput_out, dout, indices,
                    input);
}

Tensor avg_pool(const Tensor& input, const PoolOptions& options, const Stream& stream) {
  OpCall call("avg_pool", "input", input, stream);
  const PoolShape s = pool_shape(call, input, options, Kind::avg);
  Tensor out = empty_in_layout(call, out_shape(input, s), input.dtype(), s.channels_last);
  avg_impl(call, s, out, input);
  return out;
}

void avg_pool_into(const Tensor& out, const Tensor& input, const PoolOptions& options,
                   const Stream& stream) {
  OpCall call("avg_pool", "input", input, stream);
  avg_impl(call, pool_shape(call, input, options, Kind::avg), out, input);
}

Tensor avg_pool_backward(const Tensor& dout, const Tensor& input, const PoolOptions& options,
                         const Stream& stream) {
  OpCall call("avg_pool_backward", "input", input, stream);
  const PoolShape s = pool_shape(call, input, options, Kind::avg);
  Tensor dinput = empty_in_layout(call, input.shape(), input.dtype(), s.channels_last);
  avg_backward_impl(call, s, dinput, dout, input);
  return dinput;
}

void avg_pool_backward_into(const Tensor& dinput_out, const Tensor& dout, const Tensor& input,
                            const PoolOptions& options, const Stream& stream) {
  OpCall call("avg_pool_backward", "input", input, stream);
  avg_backward_impl(call, pool_shape(call, input, options, Kind::avg), dinput_out, dout, input);
}

MaxPoolResult adaptive_max_pool(const Tensor& input, const std::vector<int64_t>& output_size,
                                const Stream& stream) {
  OpCall call("adaptive_max_pool", "input", input, stream);
  const PoolShape s = adaptive_shape(call, input, output_size);
  const Shape shape = out_shape(input, s);
  MaxPoolResult r{empty_in_layout(call, shape, input.dtype(), s.channels_last),
                  empty_in_layout(call, shape, DType::i64, s.channels_last)};
  max_impl(call, s, r.out, r.indices, input);
  return r;
}

void adaptive_max_pool_into(const Tensor& out, const Tensor& indices_out, const Tensor& input,
                            const std::vector<int64_t>& output_size, const Stream& stream) {
  OpCall call("adaptive_max_pool", "input", input, stream);
  max_impl(call, adaptive_shape(call, input, output_size), out, indices_out, input);
}

Tensor adaptive_max_pool_backward(const Tensor& dout, const Tensor& indices, const Tensor& input,
                                  const std::vector<int64_t>& output_size, const Stream& stream) {
  OpCall call("adaptive_max_pool_backward", "input", input, stream);
  const PoolShape s = adaptive_shape(call, input, output_size);
  Tensor dinput = empty_in_layout(call, input.shape(), input.dtype(), s.channels_last);
  max_backward_impl(call, s, dinput, dout, indices, input);
  return dinput;
}

void adaptive_max_pool_backward_into(const Tensor& dinput_out, const Tensor& dout,
                                     const Tensor& indices, const Tensor& input,
                                     const std::vector<int64_t>& output_size,
                                     const Stream& stream) {
  OpCall call("adaptive_max_pool_backward", "input", input, stream);
  max_backward_impl(call, adaptive_shape(call, input, output_size), dinput_out, dout, indices,
                    input);
}

Tensor adaptive_avg_pool(const Tensor& input, const std::vector<int64_t>& output_size,
                         const Stream& stream) {
  OpCall call("adaptive_avg_pool", "input", input, stream);
  const PoolShape s = adaptive_shape(call, input, output_size);
  Tensor out = empty_in_layout(call, out_shape(input, s), input.dtype(), s.channels_last);
  avg_impl(call, s, out, input);
  return out;
}

void adaptive_avg_pool_into(const Tensor& out, const Tensor& input,
                            const std::vector<int64_t>& output_size, const Stream& stream) {
  OpCall call("adaptive_avg_pool", "input", input, stream);
  avg_impl(call, adaptive_shape(call, input, output_size), out, input);
}

Tensor adaptive_avg_pool_backward(const Tensor& dout, const Tensor& input,
                                  const std::vector<int64_t>& output_size, const Stream& stream) {
  OpCall call("adaptive_avg_pool_backward", "input", input, stream);
  const PoolShape s = adaptive_shape(call, input, output_size);
  Tensor dinput = empty_in_layout(call, input.shape(), input.dtype(), s.channels_last);
  avg_backward_impl(call, s, dinput, dout, input);
  return dinput;
}

void adaptive_avg_pool_backward_into(const Tensor& dinput_out, const Tensor& dout,
                                     const Tensor& input, const std::vector<int64_t>& output_size,
                                     const Stream& stream) {
  OpCall call("adaptive_avg_pool_backward", "input", input, stream);
  avg_backward_impl(call, adaptive_shape(call, input, output_size), dinput_out, dout, input);
}

Tensor lp_pool(const Tensor& input, double norm_type, const PoolOptions& options,
               const Stream& stream) {
  OpCall call("lp_pool", "input", input, stream);
  const PoolShape s = lp_shape(call, input, norm_type, options);
  Tensor out = empty_in_layout(call, out_shape(input, s), input.dtype(), s.channels_last);
  lp_impl(call, s, out, input);
  return out;
}

void lp_pool_into(const Tensor& out, const Tensor& input, double norm_type,
                  const PoolOptions& options, const Stream& stream) {
  OpCall call("lp_pool", "input", input, stream);
  lp_impl(call, lp_shape(call, input, norm_type, options), out, input);
}

Tensor lp_pool_backward(const Tensor& dout, const Tensor& input, const Tensor& out,
                        double norm_type, const PoolOptions& options, const Stream& stream) {
  OpCall call("lp_pool_backward", "input", input, stream);
  const PoolShape s = lp_shape(call, input, norm_type, options);
  Tensor dinput = empty_in_layout(call, input.shape(), input.dtype(), s.channels_last);
  lp_backward_impl(call, s, dinput, dout, input, out);
  return dinput;
}

void lp_pool_backward_into(const Tensor& dinput_out, const Tensor& dout, const Tensor& input,
                           const Tensor& out, double norm_type, const PoolOptions& options,
                           const Stream& stream) {
  OpCall call("lp_pool_backward", "input", input, stream);
  lp_backward_impl(call, lp_shape(call, input, norm_type, options), dinput_out, dout, input, out);
}

}  // namespace rudnn
