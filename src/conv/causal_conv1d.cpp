// Causal depthwise conv1d entry points: shapes, the carried state, varlen, then the backends.
#include <vector>

#include "common/op_call.h"
#include "common/views.h"
#include "conv/problem.h"
#include "conv/reference.h"
#include "rudnn/conv.h"
#if RUDNN_WITH_CUDA
#include "conv/cuda/launch.h"
#endif

namespace rudnn {

namespace {

using common::OpCall;
using common::run_backend;
using conv_detail::CausalShape;
using detail::cat;
using detail::fail;

void require_same(const OpCall& call, const char* name, const Tensor& t, DType dtype,
                  const Shape& shape, const char* what) {
  common::require_float(call, name, t);
  if (t.dtype() != dtype) {
    fail(ErrorCode::DTypeMismatch, cat(call.op, ": ", name, " has dtype ", dtype_name(t.dtype()),
                                       "; expected x's dtype ", dtype_name(dtype)));
  }
  common::require_shape(call, name, t, shape, what);
}

// Shapes of x, weight, bias, the state (name given) and cu_seqlens. On the CPU the contents
// of cu_seqlens are checked too (the host can read them without a synchronisation).
CausalShape causal_shape(const OpCall& call, const Tensor& x, const Tensor& weight,
                         const Tensor& bias, const char* state_name, const Tensor& state,
                         const Tensor& cu_seqlens, bool silu) {
  common::require_float(call, "x", x);
  if (x.dim() != 3 || x.shape()[2] < 1) {
    fail(ErrorCode::ShapeMismatch, cat(call.op, ": x has shape ", shape_str(x.shape()),
                                       "; expected 3-d [B, L, C] with C >= 1"));
  }
  CausalShape s;
  s.dtype = x.dtype();
  s.batch = x.shape()[0];
  s.length = x.shape()[1];
  s.channels = x.shape()[2];
  s.silu = silu;
  common::require_float(call, "weight", weight);
  if (weight.dim() != 2 || weight.shape()[0] != s.channels || weight.shape()[1] < 1) {
    fail(ErrorCode::ShapeMismatch, cat(call.op, ": weight has shape ", shape_str(weight.shape()),
                                       "; expected [C, W] with C = ", s.channels, " and W >= 1"));
  }
  require_same(call, "weight", weight, s.dtype, weight.shape(), "[C, W]");
  s.width = weight.shape()[1];
  if (bias.defined()) require_same(call, "bias", bias, s.dtype, {s.channels}, "[C]");
  s.seqs = s.batch;
  if (cu_seqlens.defined()) {
    common::require_dtype(call, "cu_seqlens", cu_seqlens, {DType::i32});
    if (cu_seqlens.dim() != 1 || cu_seqlens.shape()[0] < 2) {
      fail(ErrorCode::ShapeMismatch,
           cat(call.op, ": cu_seqlens has shape ", shape_str(cu_seqlens.shape()),
               "; expected [S + 1] with S >= 1 sequences"));
    }
    if (s.batch != 1) {
      fail(ErrorCode::ShapeMismatch, cat(call.op, ": x has shape ", shape_str(x.shape()),
                                         " with cu_seqlens; expected batch 1 (packed [1, L, C])"));
    }
    s.seqs = cu_seqlens.shape()[0] - 1;
    if (call.device.is_cpu()) {
      const std::vector<int32_t> cu = cu_seqlens.contiguous().to_vector<int32_t>();
      bool ok = cu.front() == 0 && cu.back() == s.length;
      for (size_t i = 1; i < cu.size(); ++i) ok = ok && cu[i] >= cu[i - 1];
      if (!ok) {
        fail(ErrorCode::InvalidArgument,
             cat(call.op, ": cu_seqlens is not non-decreasing from 0 to L = ", s.length,
                 "; expected sequence offsets into x"));
      }
    }
  }
  if (state.defined()) {
    require_same(call, state_name, state, s.dtype, {s.seqs, s.channels, s.width - 1},
                 "[B (or S with cu_seqlens), C, W - 1]");
  }
  return s;
}

void forward_impl(OpCall& call, const Tensor& out, const Tensor& x, const Tensor& weight,
                  const Tensor& bias, const Tensor& state, const Tensor& cu_seqlens, bool silu) {
  conv_detail::CausalForward p;
  p.s = causal_shape(call, x, weight, bias, "conv_state", state, cu_seqlens, silu);
  p.out = common::dense_out(call, "out", out, x.shape(), p.s.dtype);
  common::require_no_overlap(call, "out", out,
                             {{"x", &x},
                              {"weight", &weight},
                              {"bias", &bias},
                              {"conv_state", &state},
                              {"cu_seqlens", &cu_seqlens}});
  if (state.defined()) {
    if (!state.is_contiguous()) {
      fail(ErrorCode::InvalidArgument, cat(call.op, ": conv_state has strides ",
                                           shape_str(state.strides()),
                                           "; expected contiguous (it is updated in place)"));
    }
    common::require_no_overlap(call, "conv_state", state,
                               {{"x", &x}, {"weight", &weight}, {"bias", &bias},
                                {"cu_seqlens", &cu_seqlens}});
  }
  if (x.numel() == 0) return;
  p.x = common::dense_in(call, x);
  p.weight = common::dense_in(call, weight);
  if (bias.defined()) p.bias = common::dense_in(call, bias);
  if (cu_seqlens.defined()) {
    p.cu_seqlens = static_cast<const int32_t*>(common::dense_in(call, cu_seqlens));
  }
  if (state.defined()) p.state = state.data();
  run_backend(call, p, RUDNN_BACKENDS(conv_detail, causal_forward));
}

void backward_impl(OpCall& call, const Tensor& dx, const Tensor& dweight, const Tensor& dbias,
                   const Tensor& dstate, const Tensor& dout, const Tensor& x, const Tensor& weight,
                   const Tensor& bias, const Tensor& initial_state, const Tensor& cu_seqlens,
                   bool silu) {
  conv_detail::CausalBackward p;
  p.s = causal_shape(call, x, weight, bias, "initial_state", initial_state, cu_seqlens, silu);
  require_same(call, "dout", dout, p.s.dtype, x.shape(), "x's shape [B, L, C]");
  p.dx = common::dense_out(call, "dx_out", dx, x.shape(), p.s.dtype);
  p.dweight = common::dense_out(call, "dweight_out", dweight, weight.shape(), p.s.dtype);
  if (bias.defined() != dbias.defined()) {
    fail(ErrorCode::InvalidArgument,
         cat(call.op, ": dbias_out is ", dbias.defined() ? "defined" : "undefined", " and bias ",
             bias.defined() ? "defined" : "undefined", "; expected both or neither"));
  }
  if (initial_state.defined() != dstate.defined()) {
    fail(ErrorCode::InvalidArgument,
         cat(call.op, ": dinitial_state_out is ", dstate.defined() ? "defined" : "undefined",
             " and initial_state ", initial_state.defined() ? "defined" : "undefined",
             "; expected both or neither"));
  }
  if (dbias.defined()) p.dbias = common::dense_out(call, "dbias_out", dbias, bias.shape(), p.s.dtype);
  if (dstate.defined()) {
    p.dinitial_state = common::dense_out(call, "dinitial_state_out", dstate,
                                         initial_state.shape(), p.s.dtype);
  }
  const std::initializer_list<std::pair<const char*, const Tensor*>> inputs = {
      {"dout", &dout},     {"x", &x}, {"weight", &weight}, {"bias", &bias},
      {"initial_state", &initial_state}, {"cu_seqlens", &cu_seqlens}};
  common::require_no_overlap(call, "dx_out", dx, inputs);
  common::require_no_overlap(call, "dweight_out", dweight, inputs);
  common::require_no_overlap(call, "dx_out", dx, {{"dweight_out", &dweight}, {"dbias_out", &dbias},
                                                  {"dinitial_state_out", &dstate}});
  common::require_no_overlap(call, "dweight_out", dweight,
                             {{"dbias_out", &dbias}, {"dinitial_state_out", &dstate}});
  if (dbias.defined()) {
    common::require_no_overlap(call, "dbias_out", dbias, inputs);
    common::require_no_overlap(call, "dbias_out", dbias, {{"dinitial_state_out", &dstate}});
  }
  if (dstate.defined()) common::require_no_overlap(call, "dinitial_state_out", dstate, inputs);
  p.dout = common::dense_in(call, dout);
  p.x = common::dense_in(call, x);
  p.weight = common::dense_in(call, weight);
  if (bias.defined()) p.bias = common::dense_in(call, bias);
  if (initial_state.defined()) p.initial_state = common::dense_in(call, initial_state);
  if (cu_seqlens.defined()) {
    p.cu_seqlens = static_cast<const int32_t*>(common::dense_in(call, cu_seqlens));
  }
  run_backend(call, p, RUDNN_BACKENDS(conv_detail, causal_backward));
}

}  // namespace

Tensor causal_conv1d(const Tensor& x, const Tensor& weight, const Tensor& bias,
                     const Tensor& conv_state, const Tensor& cu_seqlens, bool silu,
                     const Stream& stream) {
  OpCall call("causal_conv1d", "x", x, stream);
  causal_shape(call, x, weight, bias, "conv_state", conv_state, cu_seqlens, silu);
  Tensor out = call.empty(x.shape(), x.dtype());
  forward_impl(call, out, x, weight, bias, conv_state, cu_seqlens, silu);
  return out;
}

void causal_conv1d_into(const Tensor& out, const Tensor& x, const Tensor& weight,
                        const Tensor& bias, const Tensor& conv_state, const Tensor& cu_seqlens,
                        bool silu, const Stream& stream) {
  OpCall call("causal_conv1d", "x", x, stream);
  forward_impl(call, out, x, weight, bias, conv_state, cu_seqlens, silu);
}

CausalConv1dGrads causal_conv1d_backward(const Tensor& dout, const Tensor& x, const Tensor& weight,
                                         const Tensor& bias, const Tensor& initial_state,
                                         const Tensor& cu_seqlens, bool silu,
                                         const Stream& stream) {
  OpCall call("causal_conv1d_backward", "x", x, stream);
  causal_shape(call, x, weight, bias, "initial_state", initial_state, cu_seqlens, silu);
  CausalConv1dGrads g;
  g.dx = call.empty(x.shape(), x.dtype());
  g.dweight = call.empty(weight.shape(), x.dtype());
  if (bias.defined()) g.dbias = call.empty(bias.shape(), x.dtype());
  if (initial_state.defined()) g.dinitial_state = call.empty(initial_state.shape(), x.dtype());
  backward_impl(call, g.dx, g.dweight, g.dbias, g.dinitial_state, dout, x, weight, bias,
                initial_state, cu_seqlens, silu);
  return g;
}

void causal_conv1d_backward_into(const Tensor& dx_out, const Tensor& dweight_out,
                                 const Tensor& dbias_out, const Tensor& dinitial_state_out,
                                 const Tensor& dout, const Tensor& x, const Tensor& weight,
                                 const Tensor& bias, const Tensor& initial_state,
                                 const Tensor& cu_seqlens, bool silu, const Stream& stream) {
  OpCall call("causal_conv1d_backward", "x", x, stream);
  backward_impl(call, dx_out, dweight_out, dbias_out, dinitial_state_out, dout, x, weight, bias,
                initial_state, cu_seqlens, silu);
}

}  // namespace rudnn
