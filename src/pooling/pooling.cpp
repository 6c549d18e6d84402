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

PoolShape pool_shape(const OpCall& call, const Tensor& input, const PoolOptions& o, bool is_max) {
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
  for (int a = 0; a < dims; ++a) s.in[3 - dims + a] = input.shape()[2 + a];
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
    if (!is_max && s.dilation[a] != 1) {
      fail(ErrorCode::InvalidArgument, cat(call.op, ": options.dilation is ", s.dilation[a],
                                           "; expected 1 (average pooling has no dilation)"));
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
  if (!is_max) {
    if (o.divisor_override < 0) {
      fail(ErrorCode::InvalidArgument, cat(call.op, ": options.divisor_override is ",
                                           o.divisor_override, "; expected 0 (none) or > 0"));
    }
    s.count_include_pad = o.count_include_pad;
    s.divisor_override = o.divisor_override;
  }
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

void max_pool_impl(OpCall& call, const Tensor& out, const Tensor& indices, const Tensor& input,
                   const PoolOptions& options) {
  pooling_detail::MaxForward p;
  p.s = pool_shape(call, input, options, true);
  const Shape shape = out_shape(input, p.s);
  p.out = common::dense_out(call, "out", out, shape, p.s.dtype);
  p.indices =
      static_cast<int64_t*>(common::dense_out(call, "indices_out", indices, shape, DType::i64));
  common::require_no_overlap(call, "out", out, {{"input", &input}, {"indices_out", &indices}});
  common::require_no_overlap(call, "indices_out", indices, {{"input", &input}});
  if (out.numel() == 0) return;
  p.input = common::dense_in(call, input);
  run_backend(call, p, RUDNN_BACKENDS(pooling_detail, max_forward));
}

void max_pool_backward_impl(OpCall& call, const Tensor& dinput, const Tensor& dout,
                            const Tensor& indices, const Tensor& input,
                            const PoolOptions& options) {
  pooling_detail::MaxBackward p;
  p.s = pool_shape(call, input, options, true);
  const Shape shape = out_shape(input, p.s);
  require_like_input(call, "dout", dout, input, shape);
  common::require_dtype(call, "indices", indices, {DType::i64});
  common::require_shape(call, "indices", indices, shape,
                        "the pooled output's shape [N, C, out...]");
  p.dinput = common::dense_out(call, "dinput_out", dinput, input.shape(), p.s.dtype);
  common::require_no_overlap(call, "dinput_out", dinput,
                             {{"dout", &dout}, {"indices", &indices}, {"input", &input}});
  if (dinput.numel() == 0) return;
  p.dout = common::dense_in(call, dout);
  p.indices = static_cast<const int64_t*>(common::dense_in(call, indices));
  run_backend(call, p, RUDNN_BACKENDS(pooling_detail, max_backward));
}

void avg_pool_impl(OpCall& call, const Tensor& out, const Tensor& input,
                   const PoolOptions& options) {
  pooling_detail::AvgForward p;
  p.s = pool_shape(call, input, options, false);
  p.out = common::dense_out(call, "out", out, out_shape(input, p.s), p.s.dtype);
  common::require_no_overlap(call, "out", out, {{"input", &input}});
  if (out.numel() == 0) return;
  p.input = common::dense_in(call, input);
  run_backend(call, p, RUDNN_BACKENDS(pooling_detail, avg_forward));
}

void avg_pool_backward_impl(OpCall& call, const Tensor& dinput, const Tensor& dout,
                            const Tensor& input, const PoolOptions& options) {
  pooling_detail::AvgBackward p;
  p.s = pool_shape(call, input, options, false);
  require_like_input(call, "dout", dout, input, out_shape(input, p.s));
  p.dinput = common::dense_out(call, "dinput_out", dinput, input.shape(), p.s.dtype);
  common::require_no_overlap(call, "dinput_out", dinput, {{"dout", &dout}, {"input", &input}});
  if (dinput.numel() == 0) return;
  p.dout = common::dense_in(call, dout);
  run_backend(call, p, RUDNN_BACKENDS(pooling_detail, avg_backward));
}

}  // namespace

MaxPoolResult max_pool(const Tensor& input, const PoolOptions& options, const Stream& stream) {
  OpCall call("max_pool", "input", input, stream);
  const Shape shape = out_shape(input, pool_shape(call, input, options, true));
  MaxPoolResult r{call.empty(shape, input.dtype()), call.empty(shape, DType::i64)};
  max_pool_impl(call, r.out, r.indices, input, options);
  return r;
}

void max_pool_into(const Tensor& out, const Tensor& indices_out, const Tensor& input,
                   const PoolOptions& options, const Stream& stream) {
  OpCall call("max_pool", "input", input, stream);
  max_pool_impl(call, out, indices_out, input, options);
}

Tensor max_pool_backward(const Tensor& dout, const Tensor& indices, const Tensor& input,
                         const PoolOptions& options, const Stream& stream) {
  OpCall call("max_pool_backward", "input", input, stream);
  pool_shape(call, input, options, true);
  Tensor dinput = call.empty(input.shape(), input.dtype());
  max_pool_backward_impl(call, dinput, dout, indices, input, options);
  return dinput;
}

void max_pool_backward_into(const Tensor& dinput_out, const Tensor& dout, const Tensor& indices,
                            const Tensor& input, const PoolOptions& options, const Stream& stream) {
  OpCall call("max_pool_backward", "input", input, stream);
  max_pool_backward_impl(call, dinput_out, dout, indices, input, options);
}

Tensor avg_pool(const Tensor& input, const PoolOptions& options, const Stream& stream) {
  OpCall call("avg_pool", "input", input, stream);
  Tensor out = call.empty(out_shape(input, pool_shape(call, input, options, false)), input.dtype());
  avg_pool_impl(call, out, input, options);
  return out;
}

void avg_pool_into(const Tensor& out, const Tensor& input, const PoolOptions& options,
                   const Stream& stream) {
  OpCall call("avg_pool", "input", input, stream);
  avg_pool_impl(call, out, input, options);
}

Tensor avg_pool_backward(const Tensor& dout, const Tensor& input, const PoolOptions& options,
                         const Stream& stream) {
  OpCall call("avg_pool_backward", "input", input, stream);
  pool_shape(call, input, options, false);
  Tensor dinput = call.empty(input.shape(), input.dtype());
  avg_pool_backward_impl(call, dinput, dout, input, options);
  return dinput;
}

void avg_pool_backward_into(const Tensor& dinput_out, const Tensor& dout, const Tensor& input,
                            const PoolOptions& options, const Stream& stream) {
  OpCall call("avg_pool_backward", "input", input, stream);
  avg_pool_backward_impl(call, dinput_out, dout, input, options);
}

}  // namespace rudnn
