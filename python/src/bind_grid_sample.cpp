// The grid_sample family (rudnn/grid_sample.h): grid_sample with its backward pass (input
// and grid gradients) and affine_grid with its backward pass, the _into forms through
// `out=`. Options take torch's names and spellings (mode "bilinear" / "nearest" / "bicubic",
// padding_mode "zeros" / "border" / "reflection", align_corners). The documented Python
// functions are in python/rudnn/grid_sample.py.
#include "arg_rules.h"
#include "bind_families.h"
#include "interop.h"

namespace rudnn_py {

namespace {

using rudnn::GridSampleMode;
using rudnn::GridSamplePadding;
using rudnn::Tensor;

rudnn::GridSampleOptions sample_options(const OpArgs& a, py::handle mode, py::handle padding_mode,
                                        py::handle align_corners) {
  rudnn::GridSampleOptions o;
  o.mode = rules::choice<GridSampleMode>(a, mode, "mode",
                                         {{"bilinear", GridSampleMode::bilinear},
                                          {"nearest", GridSampleMode::nearest},
                                          {"bicubic", GridSampleMode::bicubic}});
  o.padding = rules::choice<GridSamplePadding>(a, padding_mode, "padding_mode",
                                               {{"zeros", GridSamplePadding::zeros},
                                                {"border", GridSamplePadding::border},
                                                {"reflection", GridSamplePadding::reflection}});
  o.align_corners = rules::flag(a, align_corners, "align_corners");
  return o;
}

py::object grid_sample(py::object input, py::object grid, py::object mode, py::object padding_mode,
                       py::object align_corners, py::object stream, py::object out) {
  const OpArgs a("grid_sample", stream);
  Tensor x = a.tensor(input, "input");
  Tensor g = a.tensor(grid, "grid");
  const rudnn::GridSampleOptions o = sample_options(a, mode, padding_mode, align_corners);
  const rudnn::Stream s = a.stream_for(x);
  if (out.is_none()) return wrap(without_gil([&] { return rudnn::grid_sample(x, g, o, s); }));
  Tensor to = a.output(out, "out");
  without_gil([&] { rudnn::grid_sample_into(to, x, g, o, s); });
  return out;
}

// out: (dinput, dgrid), either None to skip that gradient.
py::object grid_sample_backward(py::object dout, py::object input, py::object grid,
                                py::object mode, py::object padding_mode,
                                py::object align_corners, py::object deterministic,
                                py::object stream, py::object out) {
  const OpArgs a("grid_sample_backward", stream);
  Tensor td = a.tensor(dout, "dout");
  Tensor x = a.tensor(input, "input");
  Tensor g = a.tensor(grid, "grid");
  rudnn::GridSampleOptions o = sample_options(a, mode, padding_mode, align_corners);
  o.deterministic = rules::flag(a, deterministic, "deterministic");
  const rudnn::Stream s = a.stream_for(td);
  if (out.is_none()) {
    rudnn::GridSampleGrads r =
        without_gil([&] { return rudnn::grid_sample_backward(td, x, g, o, s); });
    return wrap_all(std::move(r.dinput), std::move(r.dgrid));
  }
  auto t = a.outputs(out, {"out[0] (dinput)", "out[1] (dgrid)"});
  without_gil([&] { rudnn::grid_sample_backward_into(t[0], t[1], td, x, g, o, s); });
  return out;
}

py::object affine_grid(py::object theta, py::object size, py::object align_corners,
                       py::object stream, py::object out) {
  const OpArgs a("affine_grid", stream);
  Tensor th = a.tensor(theta, "theta");
  const rudnn::Shape sz = rules::shape(a, size, "size");
  const bool ac = rules::flag(a, align_corners, "align_corners");
  const rudnn::Stream s = a.stream_for(th);
  if (out.is_none()) return wrap(without_gil([&] { return rudnn::affine_grid(th, sz, ac, s); }));
  Tensor to = a.output(out, "out");
  without_gil([&] { rudnn::affine_grid_into(to, th, sz, ac, s); });
  return out;
}

py::object affine_grid_backward(py::object dgrid, py::object size, py::object align_corners,
                                py::object stream, py::object out) {
  const OpArgs a("affine_grid_backward", stream);
  Tensor dg = a.tensor(dgrid, "dgrid");
  const rudnn::Shape sz = rules::shape(a, size, "size");
  const bool ac = rules::flag(a, align_corners, "align_corners");
  const rudnn::Stream s = a.stream_for(dg);
  if (out.is_none())
    return wrap(without_gil([&] { return rudnn::affine_grid_backward(dg, sz, ac, s); }));
  Tensor to = a.output(out, "out");
  without_gil([&] { rudnn::affine_grid_backward_into(to, dg, sz, ac, s); });
  return out;
}

}  // namespace

void bind_grid_sample(py::module_& m) {
  const auto none = py::none();
  m.def("grid_sample", &grid_sample, py::arg("input"), py::arg("grid"),
        py::arg("mode") = "bilinear", py::arg("padding_mode") = "zeros",
        py::arg("align_corners") = false, py::kw_only(), py::arg("stream") = none,
        py::arg("out") = none);
  m.def("grid_sample_backward", &grid_sample_backward, py::arg("dout"), py::arg("input"),
        py::arg("grid"), py::arg("mode") = "bilinear", py::arg("padding_mode") = "zeros",
        py::arg("align_corners") = false, py::kw_only(), py::arg("deterministic") = false,
        py::arg("stream") = none, py::arg("out") = none);
  m.def("affine_grid", &affine_grid, py::arg("theta"), py::arg("size"),
        py::arg("align_corners") = false, py::kw_only(), py::arg("stream") = none,
        py::arg("out") = none);
  m.def("affine_grid_backward", &affine_grid_backward, py::arg("dgrid"), py::arg("size"),
        py::arg("align_corners") = false, py::kw_only(), py::arg("stream") = none,
        py::arg("out") = none);
}

}  // namespace rudnn_py
