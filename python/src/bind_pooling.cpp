// The pooling family (rudnn/pooling.h): max_pool, avg_pool, adaptive_max_pool,
// adaptive_avg_pool and lp_pool (1-D, 2-D, 3-D by the input's rank) with their backward
// passes, the _into forms through `out=`. Options follow torch's
// spelling: kernel_size, stride, padding and dilation are an int (every spatial axis) or one
// int per spatial axis; stride None means the kernel size. The documented Python functions
// are in python/rudnn/pooling.py.
#include <string>
#include <vector>

#include "arg_rules.h"
#include "bind_families.h"
#include "interop.h"

namespace rudnn_py {

namespace {

using rudnn::Tensor;

// shaped: the tensor whose rank fixes the spatial rank (the input, or the forward's input
// for the backward passes). divisor_override None is 0 (none) for the op; an explicit 0 is
// refused as torch refuses it.
rudnn::PoolOptions pool_options(const OpArgs& a, const Tensor& shaped, py::handle kernel_size,
                                py::handle stride, py::handle padding, py::handle dilation,
                                py::handle ceil_mode, py::handle count_include_pad,
                                py::handle divisor_override) {
  const int64_t rank = shaped.dim() - 2;
  rudnn::PoolOptions o;
  if (kernel_size.is_none()) rules::refuse(a, "kernel_size", "is None; expected an int or ints");
  o.kernel = rules::int_list(a, kernel_size, "kernel_size", rank);
  o.stride = rules::int_list(a, stride, "stride", rank);
  o.padding = rules::int_list(a, padding, "padding", rank);
  if (!dilation.is_none()) o.dilation = rules::int_list(a, dilation, "dilation", rank);
  o.ceil_mode = rules::flag(a, ceil_mode, "ceil_mode");
  if (!count_include_pad.is_none())
    o.count_include_pad = rules::flag(a, count_include_pad, "count_include_pad");
  if (!divisor_override.is_none()) {
    o.divisor_override = rules::integer(a, divisor_override, "divisor_override");
    if (o.divisor_override == 0) rules::refuse(a, "divisor_override", "is 0; expected None or > 0");
  }
  return o;
}

py::object max_pool(py::object input, py::object kernel_size, py::object stride,
                    py::object padding, py::object dilation, py::object ceil_mode,
                    py::object stream, py::object out) {
  const OpArgs a("max_pool", stream);
  Tensor x = a.tensor(input, "input");
  const rudnn::PoolOptions o = pool_options(a, x, kernel_size, stride, padding, dilation,
                                            ceil_mode, py::none(), py::none());
  const rudnn::Stream s = a.stream_for(x);
  if (out.is_none()) {
    rudnn::MaxPoolResult r = without_gil([&] { return rudnn::max_pool(x, o, s); });
    return wrap_all(std::move(r.out), std::move(r.indices));
  }
  auto t = a.outputs(out, {"out[0] (out)", "out[1] (indices)"});
  without_gil([&] { rudnn::max_pool_into(t[0], t[1], x, o, s); });
  return out;
}

py::object max_pool_backward(py::object dout, py::object indices, py::object input,
                             py::object kernel_size, py::object stride, py::object padding,
                             py::object dilation, py::object ceil_mode, py::object stream,
                             py::object out) {
  const OpArgs a("max_pool_backward", stream);
  Tensor td = a.tensor(dout, "dout");
  Tensor ti = a.tensor(indices, "indices");
  Tensor x = a.tensor(input, "input");
  const rudnn::PoolOptions o = pool_options(a, x, kernel_size, stride, padding, dilation,
                                            ceil_mode, py::none(), py::none());
  const rudnn::Stream s = a.stream_for(td);
  if (out.is_none())
    return wrap(without_gil([&] { return rudnn::max_pool_backward(td, ti, x, o, s); }));
  Tensor to = a.output(out, "out");
  without_gil([&] { rudnn::max_pool_backward_into(to, td, ti, x, o, s); });
  return out;
}

py::object avg_pool(py::object input, py::object kernel_size, py::object stride,
                    py::object padding, py::object ceil_mode, py::object count_include_pad,
                    py::object divisor_override, py::object stream, py::object out) {
  const OpArgs a("avg_pool", stream);
  Tensor x = a.tensor(input, "input");
  const rudnn::PoolOptions o = pool_options(a, x, kernel_size, stride, padding, py::none(),
                                            ceil_mode, count_include_pad, divisor_override);
  const rudnn::Stream s = a.stream_for(x);
  if (out.is_none()) return wrap(without_gil([&] { return rudnn::avg_pool(x, o, s); }));
  Tensor to = a.output(out, "out");
  without_gil([&] { rudnn::avg_pool_into(to, x, o, s); });
  return out;
}

py::object avg_pool_backward(py::object dout, py::object input, py::object kernel_size,
                             py::object stride, py::object padding, py::object ceil_mode,
                             py::object count_include_pad, py::object divisor_override,
                             py::object stream, py::object out) {
  const OpArgs a("avg_pool_backward", stream);
  Tensor td = a.tensor(dout, "dout");
  Tensor x = a.tensor(input, "input");
  const rudnn::PoolOptions o = pool_options(a, x, kernel_size, stride, padding, py::none(),
                                            ceil_mode, count_include_pad, divisor_override);
  const rudnn::Stream s = a.stream_for(td);
  if (out.is_none())
    return wrap(without_gil([&] { return rudnn::avg_pool_backward(td, x, o, s); }));
  Tensor to = a.output(out, "out");
  without_gil([&] { rudnn::avg_pool_backward_into(to, td, x, o, s); });
  return out;
}

// output_size: an int (every spatial axis) or one int per spatial axis.
std::vector<int64_t> output_size_of(const OpArgs& a, const Tensor& shaped, py::handle value) {
  if (value.is_none()) rules::refuse(a, "output_size", "is None; expected an int or ints");
  return rules::int_list(a, value, "output_size", shaped.dim() - 2);
}

py::object adaptive_max_pool(py::object input, py::object output_size, py::object stream,
                             py::object out) {
  const OpArgs a("adaptive_max_pool", stream);
  Tensor x = a.tensor(input, "input");
  const std::vector<int64_t> size = output_size_of(a, x, output_size);
  const rudnn::Stream s = a.stream_for(x);
  if (out.is_none()) {
    rudnn::MaxPoolResult r = without_gil([&] { return rudnn::adaptive_max_pool(x, size, s); });
    return wrap_all(std::move(r.out), std::move(r.indices));
  }
  auto t = a.outputs(out, {"out[0] (out)", "out[1] (indices)"});
  without_gil([&] { rudnn::adaptive_max_pool_into(t[0], t[1], x, size, s); });
  return out;
}

py::object adaptive_max_pool_backward(py::object dout, py::object indices, py::object input,
                                      py::object output_size, py::object stream,
                                      py::object out) {
  const OpArgs a("adaptive_max_pool_backward", stream);
  Tensor td = a.tensor(dout, "dout");
  Tensor ti = a.tensor(indices, "indices");
  Tensor x = a.tensor(input, "input");
  const std::vector<int64_t> size = output_size_of(a, x, output_size);
  const rudnn::Stream s = a.stream_for(td);
  if (out.is_none()) {
    return wrap(
        without_gil([&] { return rudnn::adaptive_max_pool_backward(td, ti, x, size, s); }));
  }
  Tensor to = a.output(out, "out");
  without_gil([&] { rudnn::adaptive_max_pool_backward_into(to, td, ti, x, size, s); });
  return out;
}

py::object adaptive_avg_pool(py::object input, py::object output_size, py::object stream,
                             py::object out) {
  const OpArgs a("adaptive_avg_pool", stream);
  Tensor x = a.tensor(input, "input");
  const std::vector<int64_t> size = output_size_of(a, x, output_size);
  const rudnn::Stream s = a.stream_for(x);
  if (out.is_none()) return wrap(without_gil([&] { return rudnn::adaptive_avg_pool(x, size, s); }));
  Tensor to = a.output(out, "out");
  without_gil([&] { rudnn::adaptive_avg_pool_into(to, x, size, s); });
  return out;
}

py::object adaptive_avg_pool_backward(py::object dout, py::object input, py::object output_size,
                                      py::object stream, py::object out) {
  const OpArgs a("adaptive_avg_pool_backward", stream);
  Tensor td = a.tensor(dout, "dout");
  Tensor x = a.tensor(input, "input");
  const std::vector<int64_t> size = output_size_of(a, x, output_size);
  const rudnn::Stream s = a.stream_for(td);
  if (out.is_none())
    return wrap(without_gil([&] { return rudnn::adaptive_avg_pool_backward(td, x, size, s); }));
  Tensor to = a.output(out, "out");
  without_gil([&] { rudnn::adaptive_avg_pool_backward_into(to, td, x, size, s); });
  return out;
}

py::object lp_pool(py::object input, py::object norm_type, py::object kernel_size,
                   py::object stride, py::object ceil_mode, py::object stream, py::object out) {
  const OpArgs a("lp_pool", stream);
  Tensor x = a.tensor(input, "input");
  const double p = rules::number(a, norm_type, "norm_type");
  const rudnn::PoolOptions o = pool_options(a, x, kernel_size, stride, py::none(), py::none(),
                                            ceil_mode, py::none(), py::none());
  const rudnn::Stream s = a.stream_for(x);
  if (out.is_none()) return wrap(without_gil([&] { return rudnn::lp_pool(x, p, o, s); }));
  Tensor to = a.output(out, "out");
  without_gil([&] { rudnn::lp_pool_into(to, x, p, o, s); });
  return out;
}

// forward_out: the forward's result (the gradient is written in terms of it).
py::object lp_pool_backward(py::object dout, py::object input, py::object forward_out,
                            py::object norm_type, py::object kernel_size, py::object stride,
                            py::object ceil_mode, py::object stream, py::object out) {
  const OpArgs a("lp_pool_backward", stream);
  Tensor td = a.tensor(dout, "dout");
  Tensor x = a.tensor(input, "input");
  Tensor fo = a.tensor(forward_out, "forward_out");
  const double p = rules::number(a, norm_type, "norm_type");
  const rudnn::PoolOptions o = pool_options(a, x, kernel_size, stride, py::none(), py::none(),
                                            ceil_mode, py::none(), py::none());
  const rudnn::Stream s = a.stream_for(td);
  if (out.is_none())
    return wrap(without_gil([&] { return rudnn::lp_pool_backward(td, x, fo, p, o, s); }));
  Tensor to = a.output(out, "out");
  without_gil([&] { rudnn::lp_pool_backward_into(to, td, x, fo, p, o, s); });
  return out;
}

}  // namespace

void bind_pooling(py::module_& m) {
  // Defaults live in python/rudnn/pooling.py, which always passes every argument.
  const auto none = py::none();
  m.def("max_pool", &max_pool, py::arg("input"), py::arg("kernel_size"), py::arg("stride") = none,
        py::arg("padding") = 0, py::arg("dilation") = 1, py::arg("ceil_mode") = false,
        py::kw_only(), py::arg("stream") = none, py::arg("out") = none);
  m.def("max_pool_backward", &max_pool_backward, py::arg("dout"), py::arg("indices"),
        py::arg("input"), py::arg("kernel_size"), py::arg("stride") = none,
        py::arg("padding") = 0, py::arg("dilation") = 1, py::arg("ceil_mode") = false,
        py::kw_only(), py::arg("stream") = none, py::arg("out") = none);
  m.def("avg_pool", &avg_pool, py::arg("input"), py::arg("kernel_size"), py::arg("stride") = none,
        py::arg("padding") = 0, py::arg("ceil_mode") = false, py::arg("count_include_pad") = true,
        py::arg("divisor_override") = none, py::kw_only(), py::arg("stream") = none,
        py::arg("out") = none);
  m.def("avg_pool_backward", &avg_pool_backward, py::arg("dout"), py::arg("input"),
        py::arg("kernel_size"), py::arg("stride") = none, py::arg("padding") = 0,
        py::arg("ceil_mode") = false, py::arg("count_include_pad") = true,
        py::arg("divisor_override") = none, py::kw_only(), py::arg("stream") = none,
        py::arg("out") = none);
  m.def("adaptive_max_pool", &adaptive_max_pool, py::arg("input"), py::arg("output_size"),
        py::kw_only(), py::arg("stream") = none, py::arg("out") = none);
  m.def("adaptive_max_pool_backward", &adaptive_max_pool_backward, py::arg("dout"),
        py::arg("indices"), py::arg("input"), py::arg("output_size"), py::kw_only(),
        py::arg("stream") = none, py::arg("out") = none);
  m.def("adaptive_avg_pool", &adaptive_avg_pool, py::arg("input"), py::arg("output_size"),
        py::kw_only(), py::arg("stream") = none, py::arg("out") = none);
  m.def("adaptive_avg_pool_backward", &adaptive_avg_pool_backward, py::arg("dout"),
        py::arg("input"), py::arg("output_size"), py::kw_only(), py::arg("stream") = none,
        py::arg("out") = none);
  m.def("lp_pool", &lp_pool, py::arg("input"), py::arg("norm_type"), py::arg("kernel_size"),
        py::arg("stride") = none, py::arg("ceil_mode") = false, py::kw_only(),
        py::arg("stream") = none, py::arg("out") = none);
  m.def("lp_pool_backward", &lp_pool_backward, py::arg("dout"), py::arg("input"),
        py::arg("forward_out"), py::arg("norm_type"), py::arg("kernel_size"),
        py::arg("stride") = none, py::arg("ceil_mode") = false, py::kw_only(),
        py::arg("stream") = none, py::arg("out") = none);
}

}  // namespace rudnn_py
