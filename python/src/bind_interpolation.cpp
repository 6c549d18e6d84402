// The interpolation family (rudnn/interpolation.h): interpolate and interpolate_backward in
// every mode, the _into forms through `out=`. Options take torch.nn.functional.interpolate's
// names and spellings: size (an int or one per spatial axis), scale_factor (a number or one per
// spatial axis), mode ("nearest", "nearest-exact" or "nearest_exact", "linear", "bilinear",
// "trilinear", "bicubic", "area"), align_corners (None, or a bool for the linear modes and
// bicubic), recompute_scale_factor (None or a bool) and antialias (a bool; bilinear and bicubic
// only, which the op checks). The documented Python functions are
// in python/rudnn/interpolation.py.
#include <vector>

#include "arg_rules.h"
#include "bind_families.h"
#include "interop.h"

namespace rudnn_py {

namespace {

using rudnn::InterpolateMode;
using rudnn::Tensor;

// A number or a sequence of numbers (scale_factor); None gives an empty list. Each entry is
// checked here only for its type: the op refuses values <= 0, NaN and infinities by name.
std::vector<double> number_list(const OpArgs& a, py::handle value, const char* arg) {
  if (value.is_none()) return {};
  if (py::isinstance<py::str>(value)) {
    rules::refuse(a, arg, "must be a number or a sequence of numbers, got str");
  }
  if (!py::isinstance<py::sequence>(value)) return {rules::number(a, value, arg)};
  std::vector<double> out;
  const std::string item = std::string(arg) + " element";
  for (py::handle v : py::reinterpret_borrow<py::sequence>(value)) {
    out.push_back(rules::number(a, v, item.c_str()));
  }
  return out;
}

// size as the op takes it: an int stands for every spatial axis (one entry, which the op
// broadcasts), a sequence gives its entries.
std::vector<int64_t> size_list(const OpArgs& a, py::handle value) {
  return rules::int_list(a, value, "size", 1);
}

rudnn::InterpolateOptions interpolate_options(const OpArgs& a, py::handle size,
                                              py::handle scale_factor, py::handle mode,
                                              py::handle align_corners,
                                              py::handle recompute_scale_factor,
                                              py::handle antialias) {
  rudnn::InterpolateOptions o;
  o.mode = rules::choice<InterpolateMode>(a, mode, "mode",
                                          {{"nearest", InterpolateMode::nearest},
                                           {"nearest-exact", InterpolateMode::nearest_exact},
                                           {"nearest_exact", InterpolateMode::nearest_exact},
                                           {"linear", InterpolateMode::linear},
                                           {"bilinear", InterpolateMode::bilinear},
                                           {"trilinear", InterpolateMode::trilinear},
                                           {"bicubic", InterpolateMode::bicubic},
                                           {"area", InterpolateMode::area}});
  o.size = size_list(a, size);
  o.scale_factor = number_list(a, scale_factor, "scale_factor");
  if (!align_corners.is_none()) o.align_corners = rules::flag(a, align_corners, "align_corners");
  if (!recompute_scale_factor.is_none()) {
    o.recompute_scale_factor = rules::flag(a, recompute_scale_factor, "recompute_scale_factor");
  }
  o.antialias = rules::flag(a, antialias, "antialias");
  return o;
}

py::object interpolate(py::object input, py::object size, py::object scale_factor,
                       py::object mode, py::object align_corners,
                       py::object recompute_scale_factor, py::object antialias,
                       py::object stream, py::object out) {
  const OpArgs a("interpolate", stream);
  Tensor x = a.tensor(input, "input");
  const rudnn::InterpolateOptions o = interpolate_options(
      a, size, scale_factor, mode, align_corners, recompute_scale_factor, antialias);
  const rudnn::Stream s = a.stream_for(x);
  if (out.is_none()) return wrap(without_gil([&] { return rudnn::interpolate(x, o, s); }));
  Tensor to = a.output(out, "out");
  without_gil([&] { rudnn::interpolate_into(to, x, o, s); });
  return out;
}

py::object interpolate_backward(py::object dout, py::object input_size, py::object size,
                                py::object scale_factor, py::object mode,
                                py::object align_corners, py::object recompute_scale_factor,
                                py::object antialias, py::object deterministic,
                                py::object stream, py::object out) {
  const OpArgs a("interpolate_backward", stream);
  Tensor td = a.tensor(dout, "dout");
  const rudnn::Shape in_shape = rules::shape(a, input_size, "input_size");
  rudnn::InterpolateOptions o = interpolate_options(
      a, size, scale_factor, mode, align_corners, recompute_scale_factor, antialias);
  o.deterministic = rules::flag(a, deterministic, "deterministic");
  const rudnn::Stream s = a.stream_for(td);
  if (out.is_none()) {
    return wrap(without_gil([&] { return rudnn::interpolate_backward(td, in_shape, o, s); }));
  }
  Tensor to = a.output(out, "out");
  without_gil([&] { rudnn::interpolate_backward_into(to, td, in_shape, o, s); });
  return out;
}

// The output shape, for callers that allocate (torch's fake implementations compute it in
// Python; this is the library's own answer, with its errors).
py::tuple interpolate_output_shape(py::object input_size, py::object size,
                                   py::object scale_factor, py::object mode,
                                   py::object align_corners, py::object recompute_scale_factor,
                                   py::object antialias) {
  const OpArgs a("interpolate", py::none());
  const rudnn::Shape in_shape = rules::shape(a, input_size, "input_size");
  const rudnn::InterpolateOptions o = interpolate_options(
      a, size, scale_factor, mode, align_corners, recompute_scale_factor, antialias);
  const rudnn::Shape r = rudnn::interpolate_output_shape(in_shape, o);
  py::tuple t(r.size());
  for (size_t i = 0; i < r.size(); ++i) t[i] = py::int_(r[i]);
  return t;
}

}  // namespace

void bind_interpolation(py::module_& m) {
  const auto none = py::none();
  m.def("interpolate", &interpolate, py::arg("input"), py::arg("size") = none,
        py::arg("scale_factor") = none, py::arg("mode") = "nearest",
        py::arg("align_corners") = none, py::arg("recompute_scale_factor") = none,
        py::arg("antialias") = false, py::kw_only(), py::arg("stream") = none,
        py::arg("out") = none);
  m.def("interpolate_backward", &interpolate_backward, py::arg("dout"), py::arg("input_size"),
        py::arg("size") = none, py::arg("scale_factor") = none, py::arg("mode") = "nearest",
        py::arg("align_corners") = none, py::arg("recompute_scale_factor") = none,
        py::arg("antialias") = false, py::kw_only(), py::arg("deterministic") = true,
        py::arg("stream") = none, py::arg("out") = none);
  m.def("interpolate_output_shape", &interpolate_output_shape, py::arg("input_size"),
        py::arg("size") = none, py::arg("scale_factor") = none, py::arg("mode") = "nearest",
        py::arg("align_corners") = none, py::arg("recompute_scale_factor") = none,
        py::arg("antialias") = false);
}

}  // namespace rudnn_py
