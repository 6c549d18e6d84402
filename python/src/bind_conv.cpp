// The convolution family (rudnn/conv.h): conv_forward (1-D, 2-D, 3-D by the operands' rank,
// with bias and the fused epilogue), conv_data_backward and conv_weight_backward, each in the
// NCHW-style and the channels-last (`layout="nhwc"`) shapes, plan_conv, and the causal
// depthwise conv1d (with its carried state and varlen form) with its backward; the _into
// forms through `out=`. Options take torch's spelling: stride, padding, dilation an int or one
// per spatial axis; padding also "valid" or "same" (torch's rule: stride 1, the extra zero of
// an odd total after the end), padding_end for explicit asymmetric padding. The documented
// Python functions are in python/rudnn/conv.py.
#include <algorithm>
#include <array>
#include <string>
#include <type_traits>
#include <vector>

#include "arg_rules.h"
#include "bind_families.h"
#include "interop.h"

namespace rudnn_py {

namespace {

using rudnn::ConvLayout;
using rudnn::ConvStrategy;
using rudnn::Tensor;

// The option arguments of one convolution call, converted once the rank is known.
struct RawOptions {
  py::handle stride, padding, padding_end, dilation, groups, allow_tf32;
};

rudnn::ConvLayout layout_of(const OpArgs& a, py::handle value) {
  return rules::choice<ConvLayout>(a, value, "layout",
                                   {{"nchw", ConvLayout::Nchw}, {"nhwc", ConvLayout::Nhwc}});
}

ConvStrategy strategy_of(const OpArgs& a, py::handle value) {
  return rules::choice<ConvStrategy>(a, value, "strategy",
                                     {{"auto", ConvStrategy::Auto},
                                      {"direct", ConvStrategy::Direct},
                                      {"implicit_gemm", ConvStrategy::ImplicitGemm},
                                      {"autotune", ConvStrategy::Autotune}});
}

// The spatial rank of a call: the rank of `shaped` less the batch and channel axes.
// ConvOptions<N> fixes N at compile time, so a rank outside 1..3 is refused before any
// option is read, with the op's own error code and wording.
int spatial_rank(const OpArgs& a, int64_t dims, const char* arg) {
  if (dims < 3 || dims > 5) {
    throw rudnn::Error(rudnn::ErrorCode::ShapeMismatch,
                       std::string(a.op()) + ": " + arg + " is " + std::to_string(dims) +
                           "-d; expected 3-, 4- or 5-d (1-, 2- or 3-d convolution)");
  }
  return static_cast<int>(dims - 2);
}

// Runs f(std::integral_constant<int, N>) for the call's spatial rank N.
template <class F>
decltype(auto) with_rank(int rank, F&& f) {
  switch (rank) {
    case 1:
      return f(std::integral_constant<int, 1>{});
    case 2:
      return f(std::integral_constant<int, 2>{});
    default:
      return f(std::integral_constant<int, 3>{});
  }
}

template <int N>
void fill(const OpArgs& a, std::array<int64_t, N>& dst, py::handle value, const char* arg) {
  if (value.is_none()) return;
  const std::vector<int64_t> v = rules::int_list(a, value, arg, N);
  if (static_cast<int>(v.size()) != N) {
    rules::refuse(a, arg,
                  "has " + std::to_string(v.size()) + " entries; expected 1 or " +
                      std::to_string(N) + " (one per spatial axis)");
  }
  std::copy(v.begin(), v.end(), dst.begin());
}

// kernel: the kernel size of each spatial axis (for padding="same").
template <int N>
rudnn::ConvOptions<N> conv_options(const OpArgs& a, const RawOptions& r,
                                   const std::vector<int64_t>& kernel) {
  rudnn::ConvOptions<N> o;
  fill<N>(a, o.stride, r.stride, "stride");
  fill<N>(a, o.dilation, r.dilation, "dilation");
  o.groups = rules::integer(a, r.groups, "groups", 1);
  o.allow_tf32 = rules::flag(a, r.allow_tf32, "allow_tf32");
  if (py::isinstance<py::str>(r.padding)) {
    const std::string p = r.padding.cast<std::string>();
    if (p == "same") {
      for (int i = 0; i < N; ++i) {
        if (o.stride[i] != 1) {
          rules::refuse(a, "padding", "is 'same' with a stride other than 1; torch's rule takes "
                                      "stride 1 only");
        }
        // torch puts the extra zero of an odd total after the end.
        const int64_t total = o.dilation[i] * (kernel[static_cast<size_t>(i)] - 1);
        o.padding[i] = total / 2;
        o.padding_end[i] = total - total / 2;
      }
    } else if (p != "valid") {
      rules::refuse(a, "padding", "must be an int, ints, 'valid' or 'same', got '" + p + "'");
    }
    if (!r.padding_end.is_none()) {
      rules::refuse(a, "padding_end", "must be None when padding is '" + p + "'");
    }
    return o;
  }
  fill<N>(a, o.padding, r.padding, "padding");
  fill<N>(a, o.padding_end, r.padding_end, "padding_end");
  return o;
}

// The kernel sizes of a weight shape in `layout` ([K, C/g, k...] or [K, k..., C/g]); empty
// entries stand in for a malformed shape, which the op refuses with its own message.
std::vector<int64_t> kernel_of(const rudnn::Shape& weight, ConvLayout layout, int rank) {
  std::vector<int64_t> k(static_cast<size_t>(rank), 1);
  if (static_cast<int>(weight.size()) != rank + 2) return k;
  for (int i = 0; i < rank; ++i) {
    k[static_cast<size_t>(i)] = weight[static_cast<size_t>(layout == ConvLayout::Nchw ? 2 + i : 1 + i)];
  }
  return k;
}

rudnn::ConvEpilogue epilogue_of(const OpArgs& a, py::handle activation, py::handle residual) {
  rudnn::ConvEpilogue e;
  e.activation = rules::choice<rudnn::ConvActivation>(a, activation, "activation",
                                                      {{"none", rudnn::ConvActivation::None},
                                                       {"relu", rudnn::ConvActivation::Relu},
                                                       {"silu", rudnn::ConvActivation::Silu},
                                                       {"gelu", rudnn::ConvActivation::Gelu}});
  e.residual = a.optional_tensor(residual, "residual");
  return e;
}

py::object conv_forward(py::object input, py::object weight, py::object bias, py::object stride,
                        py::object padding, py::object dilation, py::object groups,
                        py::object padding_end, py::object activation, py::object residual,
                        py::object layout, py::object strategy, py::object allow_tf32,
                        py::object stream, py::object out) {
  const OpArgs a("conv_forward", stream);
  Tensor x = a.tensor(input, "input");
  Tensor w = a.tensor(weight, "weight");
  Tensor b = a.optional_tensor(bias, "bias");
  const ConvLayout lay = layout_of(a, layout);
  const ConvStrategy st = strategy_of(a, strategy);
  const rudnn::ConvEpilogue ep = epilogue_of(a, activation, residual);
  const int rank = spatial_rank(a, x.dim(), "input");
  const RawOptions raw{stride, padding, padding_end, dilation, groups, allow_tf32};
  const rudnn::Stream s = a.stream_for(x);
  Tensor to = out.is_none() ? Tensor() : a.output(out, "out");
  Tensor r = with_rank(rank, [&](auto n) {
    constexpr int N = decltype(n)::value;
    const rudnn::ConvOptions<N> o = conv_options<N>(a, raw, kernel_of(w.shape(), lay, N));
    return without_gil([&] {
      if (lay == ConvLayout::Nhwc) {
        if (!to.defined()) return rudnn::conv_forward_nhwc<N>(x, w, b, o, st, ep, s);
        rudnn::conv_forward_nhwc_into<N>(to, x, w, b, o, st, ep, s);
      } else {
        if (!to.defined()) return rudnn::conv_forward<N>(x, w, b, o, st, ep, s);
        rudnn::conv_forward_into<N>(to, x, w, b, o, st, ep, s);
      }
      return Tensor();
    });
  });
  return out.is_none() ? wrap(std::move(r)) : out;
}

py::object conv_data_backward(py::object dout, py::object weight, py::object input_size,
                              py::object stride, py::object padding, py::object dilation,
                              py::object groups, py::object padding_end, py::object layout,
                              py::object strategy, py::object stream, py::object out) {
  const OpArgs a("conv_data_backward", stream);
  Tensor td = a.tensor(dout, "dout");
  Tensor w = a.tensor(weight, "weight");
  const rudnn::Shape in_shape = rules::shape(a, input_size, "input_size");
  const ConvLayout lay = layout_of(a, layout);
  const ConvStrategy st = strategy_of(a, strategy);
  const int rank = spatial_rank(a, td.dim(), "dout");
  const RawOptions raw{stride, padding, padding_end, dilation, groups, py::bool_(false)};
  const rudnn::Stream s = a.stream_for(td);
  Tensor to = out.is_none() ? Tensor() : a.output(out, "out");
  Tensor r = with_rank(rank, [&](auto n) {
    constexpr int N = decltype(n)::value;
    const rudnn::ConvOptions<N> o = conv_options<N>(a, raw, kernel_of(w.shape(), lay, N));
    return without_gil([&] {
      if (lay == ConvLayout::Nhwc) {
        if (!to.defined()) return rudnn::conv_data_backward_nhwc<N>(td, w, in_shape, o, st, s);
        rudnn::conv_data_backward_nhwc_into<N>(to, td, w, o, st, s);
      } else {
        if (!to.defined()) return rudnn::conv_data_backward<N>(td, w, in_shape, o, st, s);
        rudnn::conv_data_backward_into<N>(to, td, w, o, st, s);
      }
      return Tensor();
    });
  });
  return out.is_none() ? wrap(std::move(r)) : out;
}

// out: (dweight, dbias); dbias None when there is no bias. Returns (dweight, dbias or None).
py::object conv_weight_backward(py::object dout, py::object input, py::object weight_size,
                                py::object stride, py::object padding, py::object dilation,
                                py::object groups, py::object padding_end, py::object with_bias,
                                py::object layout, py::object strategy, py::object stream,
                                py::object out) {
  const OpArgs a("conv_weight_backward", stream);
  Tensor td = a.tensor(dout, "dout");
  Tensor x = a.tensor(input, "input");
  const rudnn::Shape w_shape = rules::shape(a, weight_size, "weight_size");
  const bool bias_grad = rules::flag(a, with_bias, "with_bias");
  const ConvLayout lay = layout_of(a, layout);
  const ConvStrategy st = strategy_of(a, strategy);
  const int rank = spatial_rank(a, td.dim(), "dout");
  const RawOptions raw{stride, padding, padding_end, dilation, groups, py::bool_(false)};
  const rudnn::Stream s = a.stream_for(td);
  std::vector<Tensor> t;
  if (!out.is_none()) t = a.outputs(out, {"out[0] (dweight)", "out[1] (dbias)"});
  rudnn::ConvWeightGrads g = with_rank(rank, [&](auto n) {
    constexpr int N = decltype(n)::value;
    const rudnn::ConvOptions<N> o = conv_options<N>(a, raw, kernel_of(w_shape, lay, N));
    return without_gil([&] {
      if (lay == ConvLayout::Nhwc) {
        if (t.empty()) return rudnn::conv_weight_backward_nhwc<N>(td, x, w_shape, o, bias_grad, st, s);
        rudnn::conv_weight_backward_nhwc_into<N>(t[0], t[1], td, x, o, st, s);
      } else {
        if (t.empty()) return rudnn::conv_weight_backward<N>(td, x, w_shape, o, bias_grad, st, s);
        rudnn::conv_weight_backward_into<N>(t[0], t[1], td, x, o, st, s);
      }
      return rudnn::ConvWeightGrads{};
    });
  });
  if (!out.is_none()) return out;
  return wrap_all(std::move(g.dweight), std::move(g.dbias));
}

py::dict plan_conv(py::object direction, py::object input_size, py::object weight_size,
                   py::object dtype, py::object stride, py::object padding, py::object dilation,
                   py::object groups, py::object padding_end, py::object layout,
                   py::object strategy, py::object allow_tf32, py::object device) {
  const OpArgs a("plan_conv", py::none());
  const auto dir = rules::choice<rudnn::ConvDirection>(
      a, direction, "direction",
      {{"forward", rudnn::ConvDirection::Forward},
       {"data_backward", rudnn::ConvDirection::DataBackward},
       {"weight_backward", rudnn::ConvDirection::WeightBackward}});
  const rudnn::Shape in_shape = rules::shape(a, input_size, "input_size");
  const rudnn::Shape w_shape = rules::shape(a, weight_size, "weight_size");
  const rudnn::DType dt = rules::float_dtype(a, dtype, "dtype");
  const ConvLayout lay = layout_of(a, layout);
  const ConvStrategy st = strategy_of(a, strategy);
  const rudnn::Device dev = rules::device(a, device, "device");
  const int rank = spatial_rank(a, static_cast<int64_t>(in_shape.size()), "input_size");
  const RawOptions raw{stride, padding, padding_end, dilation, groups, allow_tf32};
  const rudnn::ConvPlan p = with_rank(rank, [&](auto n) {
    constexpr int N = decltype(n)::value;
    const rudnn::ConvOptions<N> o = conv_options<N>(a, raw, kernel_of(w_shape, lay, N));
    return rudnn::plan_conv<N>(dir, in_shape, w_shape, dt, dev, o, st, lay);
  });
  py::dict d;
  d["kernel"] = rudnn::conv_kernel_name(p.kernel);
  d["workspace_bytes"] = p.workspace_bytes;
  d["why"] = p.why;
  return d;
}

// conv_state (optional) is updated in place, so it is imported writable (never copied).
py::object causal_conv1d(py::object x, py::object weight, py::object bias, py::object conv_state,
                         py::object cu_seqlens, py::object silu, py::object stream,
                         py::object out) {
  const OpArgs a("causal_conv1d", stream);
  Tensor tx = a.tensor(x, "x");
  Tensor w = a.tensor(weight, "weight");
  Tensor b = a.optional_tensor(bias, "bias");
  Tensor st = conv_state.is_none() ? Tensor() : a.output(conv_state, "conv_state");
  Tensor cu = a.optional_tensor(cu_seqlens, "cu_seqlens");
  const bool act = rules::flag(a, silu, "silu");
  const rudnn::Stream s = a.stream_for(tx);
  if (out.is_none()) {
    return wrap(without_gil([&] { return rudnn::causal_conv1d(tx, w, b, st, cu, act, s); }));
  }
  Tensor to = a.output(out, "out");
  without_gil([&] { rudnn::causal_conv1d_into(to, tx, w, b, st, cu, act, s); });
  return out;
}

// out: (dx, dweight, dbias, dinitial_state), dbias / dinitial_state None exactly when bias /
// initial_state are. Returns the four, None where not computed.
py::object causal_conv1d_backward(py::object dout, py::object x, py::object weight,
                                  py::object bias, py::object initial_state,
                                  py::object cu_seqlens, py::object silu, py::object stream,
                                  py::object out) {
  const OpArgs a("causal_conv1d_backward", stream);
  Tensor td = a.tensor(dout, "dout");
  Tensor tx = a.tensor(x, "x");
  Tensor w = a.tensor(weight, "weight");
  Tensor b = a.optional_tensor(bias, "bias");
  Tensor st = a.optional_tensor(initial_state, "initial_state");
  Tensor cu = a.optional_tensor(cu_seqlens, "cu_seqlens");
  const bool act = rules::flag(a, silu, "silu");
  const rudnn::Stream s = a.stream_for(tx);
  if (out.is_none()) {
    rudnn::CausalConv1dGrads g = without_gil(
        [&] { return rudnn::causal_conv1d_backward(td, tx, w, b, st, cu, act, s); });
    return wrap_all(std::move(g.dx), std::move(g.dweight), std::move(g.dbias),
                    std::move(g.dinitial_state));
  }
  auto t = a.outputs(out, {"out[0] (dx)", "out[1] (dweight)", "out[2] (dbias)",
                           "out[3] (dinitial_state)"});
  without_gil([&] {
    rudnn::causal_conv1d_backward_into(t[0], t[1], t[2], t[3], td, tx, w, b, st, cu, act, s);
  });
  return out;
}

}  // namespace

void bind_conv(py::module_& m) {
  // Defaults live in python/rudnn/conv.py, which passes every argument.
  const auto none = py::none();
  m.def("conv_forward", &conv_forward, py::arg("input"), py::arg("weight"), py::arg("bias") = none,
        py::arg("stride") = 1, py::arg("padding") = 0, py::arg("dilation") = 1,
        py::arg("groups") = 1, py::kw_only(), py::arg("padding_end") = none,
        py::arg("activation") = "none", py::arg("residual") = none, py::arg("layout") = "nchw",
        py::arg("strategy") = "auto", py::arg("allow_tf32") = false, py::arg("stream") = none,
        py::arg("out") = none);
  m.def("conv_data_backward", &conv_data_backward, py::arg("dout"), py::arg("weight"),
        py::arg("input_size"), py::arg("stride") = 1, py::arg("padding") = 0,
        py::arg("dilation") = 1, py::arg("groups") = 1, py::kw_only(),
        py::arg("padding_end") = none, py::arg("layout") = "nchw", py::arg("strategy") = "auto",
        py::arg("stream") = none, py::arg("out") = none);
  m.def("conv_weight_backward", &conv_weight_backward, py::arg("dout"), py::arg("input"),
        py::arg("weight_size"), py::arg("stride") = 1, py::arg("padding") = 0,
        py::arg("dilation") = 1, py::arg("groups") = 1, py::kw_only(),
        py::arg("padding_end") = none, py::arg("with_bias") = true, py::arg("layout") = "nchw",
        py::arg("strategy") = "auto", py::arg("stream") = none, py::arg("out") = none);
  m.def("plan_conv", &plan_conv, py::arg("direction"), py::arg("input_size"),
        py::arg("weight_size"), py::arg("dtype"), py::kw_only(), py::arg("stride") = 1,
        py::arg("padding") = 0, py::arg("dilation") = 1, py::arg("groups") = 1,
        py::arg("padding_end") = none, py::arg("layout") = "nchw", py::arg("strategy") = "auto",
        py::arg("allow_tf32") = false, py::arg("device") = none);
  m.def("causal_conv1d", &causal_conv1d, py::arg("x"), py::arg("weight"), py::arg("bias") = none,
        py::arg("conv_state") = none, py::arg("cu_seqlens") = none, py::arg("silu") = false,
        py::kw_only(), py::arg("stream") = none, py::arg("out") = none);
  m.def("causal_conv1d_backward", &causal_conv1d_backward, py::arg("dout"), py::arg("x"),
        py::arg("weight"), py::arg("bias") = none, py::arg("initial_state") = none,
        py::arg("cu_seqlens") = none, py::arg("silu") = false, py::kw_only(),
        py::arg("stream") = none, py::arg("out") = none);
}

}  // namespace rudnn_py
