// The normalization family (rudnn/normalization.h): one binding per op, the _into forms through
// `out=`. Each op converts its arguments with OpArgs (interop.h), runs the C++ function with
// the GIL released, and returns new rudnn Tensors or the `out` it was given. The Python-level
// functions, with their documentation, are in python/rudnn/normalization.py.
#include "bind_families.h"
#include "interop.h"

namespace rudnn_py {

namespace {

using rudnn::Tensor;

rudnn::CrossEntropyOptions cross_entropy_options(const OpArgs& args, py::handle ignore_index) {
  rudnn::CrossEntropyOptions options;
  options.ignore_index = args.optional_int(ignore_index, "ignore_index");
  return options;
}

py::object layer_norm(py::object x, py::object gamma, py::object beta, py::object eps,
                      py::object stream, py::object out) {
  const OpArgs a("layer_norm", stream);
  Tensor tx = a.tensor(x, "x"), tg = a.optional_tensor(gamma, "gamma"),
         tb = a.optional_tensor(beta, "beta");
  const float e = a.float32(eps, "eps");
  const rudnn::Stream s = a.stream_for(tx);
  if (out.is_none()) return wrap(without_gil([&] { return rudnn::layer_norm(tx, tg, tb, e, s); }));
  Tensor to = a.output(out, "out");
  without_gil([&] { rudnn::layer_norm_into(to, tx, tg, tb, e, s); });
  return out;
}

py::object rms_norm(py::object x, py::object gamma, py::object eps, py::object stream,
                    py::object out) {
  const OpArgs a("rms_norm", stream);
  Tensor tx = a.tensor(x, "x"), tg = a.optional_tensor(gamma, "gamma");
  const float e = a.float32(eps, "eps");
  const rudnn::Stream s = a.stream_for(tx);
  if (out.is_none()) return wrap(without_gil([&] { return rudnn::rms_norm(tx, tg, e, s); }));
  Tensor to = a.output(out, "out");
  without_gil([&] { rudnn::rms_norm_into(to, tx, tg, e, s); });
  return out;
}

py::object add_rms_norm(py::object x, py::object residual, py::object gamma, py::object eps,
                        py::object stream, py::object out) {
  const OpArgs a("add_rms_norm", stream);
  Tensor tx = a.tensor(x, "x"), tr = a.tensor(residual, "residual"),
         tg = a.optional_tensor(gamma, "gamma");
  const float e = a.float32(eps, "eps");
  const rudnn::Stream s = a.stream_for(tx);
  if (out.is_none()) {
    rudnn::AddRmsNormResult r = without_gil([&] { return rudnn::add_rms_norm(tx, tr, tg, e, s); });
    return wrap_all(std::move(r.sum), std::move(r.normed));
  }
  auto o = a.outputs(out, {"out[0] (sum)", "out[1] (normed)"});
  without_gil([&] { rudnn::add_rms_norm_into(o[0], o[1], tx, tr, tg, e, s); });
  return out;
}

py::object softmax_last_axis(py::object x, py::object stream, py::object out) {
  const OpArgs a("softmax_last_axis", stream);
  Tensor tx = a.tensor(x, "x");
  const rudnn::Stream s = a.stream_for(tx);
  if (out.is_none()) return wrap(without_gil([&] { return rudnn::softmax_last_axis(tx, s); }));
  Tensor to = a.output(out, "out");
  without_gil([&] { rudnn::softmax_last_axis_into(to, tx, s); });
  return out;
}

py::object logsumexp(py::object x, py::object stream, py::object out) {
  const OpArgs a("logsumexp", stream);
  Tensor tx = a.tensor(x, "x");
  const rudnn::Stream s = a.stream_for(tx);
  if (out.is_none()) return wrap(without_gil([&] { return rudnn::logsumexp(tx, s); }));
  Tensor to = a.output(out, "out");
  without_gil([&] { rudnn::logsumexp_into(to, tx, s); });
  return out;
}

py::object cross_entropy(py::object logits, py::object targets, py::object ignore_index,
                         py::object stream, py::object out) {
  const OpArgs a("cross_entropy", stream);
  Tensor tl = a.tensor(logits, "logits"), tt = a.tensor(targets, "targets");
  const auto opts = cross_entropy_options(a, ignore_index);
  const rudnn::Stream s = a.stream_for(tl);
  if (out.is_none())
    return wrap(without_gil([&] { return rudnn::cross_entropy(tl, tt, opts, s); }));
  Tensor to = a.output(out, "out");
  without_gil([&] { rudnn::cross_entropy_into(to, tl, tt, opts, s); });
  return out;
}

py::object layer_norm_backward(py::object dy, py::object x, py::object gamma, py::object beta,
                               py::object eps, py::object stream, py::object out) {
  const OpArgs a("layer_norm_backward", stream);
  Tensor tdy = a.tensor(dy, "dy"), tx = a.tensor(x, "x"), tg = a.optional_tensor(gamma, "gamma"),
         tb = a.optional_tensor(beta, "beta");
  const float e = a.float32(eps, "eps");
  const rudnn::Stream s = a.stream_for(tdy);
  if (out.is_none()) {
    rudnn::LayerNormGrads g =
        without_gil([&] { return rudnn::layer_norm_backward(tdy, tx, tg, tb, e, s); });
    return wrap_all(std::move(g.dx), std::move(g.dgamma), std::move(g.dbeta));
  }
  auto o = a.outputs(out, {"out[0] (dx)", "out[1] (dgamma)", "out[2] (dbeta)"});
  without_gil([&] { rudnn::layer_norm_backward_into(o[0], o[1], o[2], tdy, tx, tg, tb, e, s); });
  return out;
}

py::object rms_norm_backward(py::object dy, py::object x, py::object gamma, py::object eps,
                             py::object stream, py::object out) {
  const OpArgs a("rms_norm_backward", stream);
  Tensor tdy = a.tensor(dy, "dy"), tx = a.tensor(x, "x"), tg = a.optional_tensor(gamma, "gamma");
  const float e = a.float32(eps, "eps");
  const rudnn::Stream s = a.stream_for(tdy);
  if (out.is_none()) {
    rudnn::RmsNormGrads g =
        without_gil([&] { return rudnn::rms_norm_backward(tdy, tx, tg, e, s); });
    return wrap_all(std::move(g.dx), std::move(g.dgamma));
  }
  auto o = a.outputs(out, {"out[0] (dx)", "out[1] (dgamma)"});
  without_gil([&] { rudnn::rms_norm_backward_into(o[0], o[1], tdy, tx, tg, e, s); });
  return out;
}

py::object softmax_backward(py::object dy, py::object y, py::object stream, py::object out) {
  const OpArgs a("softmax_backward", stream);
  Tensor tdy = a.tensor(dy, "dy"), ty = a.tensor(y, "y");
  const rudnn::Stream s = a.stream_for(tdy);
  if (out.is_none()) return wrap(without_gil([&] { return rudnn::softmax_backward(tdy, ty, s); }));
  Tensor to = a.output(out, "out");
  without_gil([&] { rudnn::softmax_backward_into(to, tdy, ty, s); });
  return out;
}

py::object cross_entropy_backward(py::object logits, py::object targets, py::object dloss,
                                  py::object ignore_index, py::object stream, py::object out) {
  const OpArgs a("cross_entropy_backward", stream);
  Tensor tl = a.tensor(logits, "logits"), tt = a.tensor(targets, "targets"),
         td = a.tensor(dloss, "dloss");
  const auto opts = cross_entropy_options(a, ignore_index);
  const rudnn::Stream s = a.stream_for(tl);
  if (out.is_none())
    return wrap(without_gil([&] { return rudnn::cross_entropy_backward(tl, tt, td, opts, s); }));
  Tensor to = a.output(out, "out");
  without_gil([&] { rudnn::cross_entropy_backward_into(to, tl, tt, td, opts, s); });
  return out;
}

// grad_scale: a number (the same upstream gradient on every row) or an F32 array of the
// targets' shape (one per row).
py::object cross_entropy_with_grad(py::object logits, py::object targets, py::object grad_scale,
                                   py::object ignore_index, py::object stream, py::object out) {
  const OpArgs a("cross_entropy_with_grad", stream);
  Tensor tl = a.tensor(logits, "logits"), tt = a.tensor(targets, "targets");
  const bool per_row = !OpArgs::is_scalar(grad_scale);
  Tensor td = per_row ? a.tensor(grad_scale, "grad_scale") : Tensor();
  const float scale = per_row ? 1.0f : a.float32(grad_scale, "grad_scale");
  const auto opts = cross_entropy_options(a, ignore_index);
  const rudnn::Stream s = a.stream_for(tl);
  if (out.is_none()) {
    rudnn::CrossEntropyWithGrad r = without_gil([&] {
      return per_row ? rudnn::cross_entropy_with_grad(tl, tt, td, opts, s)
                     : rudnn::cross_entropy_with_grad(tl, tt, scale, opts, s);
    });
    return wrap_all(std::move(r.loss), std::move(r.dlogits));
  }
  auto o = a.outputs(out, {"out[0] (loss)", "out[1] (dlogits)"});
  without_gil([&] {
    if (per_row) {
      rudnn::cross_entropy_with_grad_into(o[0], o[1], tl, tt, td, opts, s);
    } else {
      rudnn::cross_entropy_with_grad_into(o[0], o[1], tl, tt, scale, opts, s);
    }
  });
  return out;
}

py::object scale_unless_one(py::object x, py::object scale, py::object stream) {
  const OpArgs a("scale_unless_one", stream);
  Tensor tx = a.output(x, "x"), ts = a.tensor(scale, "scale");
  const rudnn::Stream s = a.stream_for(tx);
  without_gil([&] { rudnn::scale_unless_one(tx, ts, s); });
  return x;
}

}  // namespace

void bind_normalization(py::module_& m) {
  // Defaults live in python/rudnn/normalization.py, which always passes every argument; the
  // ones here serve direct callers of _rudnn.
  const auto none = py::none();
  m.def("layer_norm", &layer_norm, py::arg("x"), py::arg("gamma") = none, py::arg("beta") = none,
        py::arg("eps") = 1e-5, py::kw_only(), py::arg("stream") = none, py::arg("out") = none);
  m.def("rms_norm", &rms_norm, py::arg("x"), py::arg("gamma") = none, py::arg("eps") = 1e-6,
        py::kw_only(), py::arg("stream") = none, py::arg("out") = none);
  m.def("add_rms_norm", &add_rms_norm, py::arg("x"), py::arg("residual"), py::arg("gamma") = none,
        py::arg("eps") = 1e-6, py::kw_only(), py::arg("stream") = none, py::arg("out") = none);
  m.def("softmax_last_axis", &softmax_last_axis, py::arg("x"), py::kw_only(),
        py::arg("stream") = none, py::arg("out") = none);
  m.def("logsumexp", &logsumexp, py::arg("x"), py::kw_only(), py::arg("stream") = none,
        py::arg("out") = none);
  m.def("cross_entropy", &cross_entropy, py::arg("logits"), py::arg("targets"),
        py::arg("ignore_index") = none, py::kw_only(), py::arg("stream") = none,
        py::arg("out") = none);
  m.def("layer_norm_backward", &layer_norm_backward, py::arg("dy"), py::arg("x"),
        py::arg("gamma") = none, py::arg("beta") = none, py::arg("eps") = 1e-5, py::kw_only(),
        py::arg("stream") = none, py::arg("out") = none);
  m.def("rms_norm_backward", &rms_norm_backward, py::arg("dy"), py::arg("x"),
        py::arg("gamma") = none, py::arg("eps") = 1e-6, py::kw_only(), py::arg("stream") = none,
        py::arg("out") = none);
  m.def("softmax_backward", &softmax_backward, py::arg("dy"), py::arg("y"), py::kw_only(),
        py::arg("stream") = none, py::arg("out") = none);
  m.def("cross_entropy_backward", &cross_entropy_backward, py::arg("logits"), py::arg("targets"),
        py::arg("dloss"), py::arg("ignore_index") = none, py::kw_only(), py::arg("stream") = none,
        py::arg("out") = none);
  m.def("cross_entropy_with_grad", &cross_entropy_with_grad, py::arg("logits"), py::arg("targets"),
        py::arg("grad_scale") = 1.0, py::arg("ignore_index") = none, py::kw_only(),
        py::arg("stream") = none, py::arg("out") = none);
  m.def("scale_unless_one", &scale_unless_one, py::arg("x"), py::arg("scale"), py::kw_only(),
        py::arg("stream") = none);
}

}  // namespace rudnn_py
