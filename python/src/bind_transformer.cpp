// The transformer family (rudnn/transformer.h): rope, rope_backward, norm_rope, the frequency
// helpers, and swiglu / geglu with their backward passes, the _into forms through `out=`.
// Each op converts its arguments with OpArgs (interop.h), runs the C++ function with the
// GIL released, and returns new rudnn Tensors or the `out` (or `cache`) it was given. The
// gated activations take `up=None` for the one-tensor form (gate and up as the halves of
// the last axis). The Python-level functions, with their documentation, are in
// python/rudnn/transformer.py.
#include <optional>
#include <string>

#include "bind_families.h"
#include "interop.h"

namespace rudnn_py {

namespace {

using rudnn::ErrorCode;
using rudnn::Tensor;

[[noreturn]] void refuse(const OpArgs& a, const char* arg, const std::string& rule) {
  throw rudnn::Error(ErrorCode::InvalidArgument, std::string(a.op()) + ": " + arg + " " + rule);
}

std::string type_name(py::handle obj) {
  return py::str(py::type::handle_of(obj).attr("__qualname__"));
}

// A Python bool (or numpy's); an int or anything else is refused rather than read as truth.
bool flag(const OpArgs& a, py::handle value, const char* arg) {
  const std::string name = Py_TYPE(value.ptr())->tp_name;
  if (PyBool_Check(value.ptr()) || name == "numpy.bool_" || name == "numpy.bool") {
    return PyObject_IsTrue(value.ptr()) == 1;
  }
  refuse(a, arg, "must be a bool, got " + type_name(value));
}

// An int (not bool): `fallback` for None, or an error naming the argument when none is given.
int64_t integer(const OpArgs& a, py::handle value, const char* arg,
                std::optional<int64_t> fallback = std::nullopt) {
  const std::optional<int64_t> v = a.optional_int(value, arg);
  if (v) return *v;
  if (!fallback) refuse(a, arg, "is None; expected an int");
  return *fallback;
}

// rope's options: dims None means every feature (x's last axis); base None means not given
// (freqs then must be).
rudnn::RopeOptions rope_options(const OpArgs& a, const Tensor& x, py::handle dims,
                                py::handle traditional, py::handle base, py::handle freqs,
                                py::handle scale, py::handle offset, py::handle offsets,
                                py::handle positions) {
  rudnn::RopeOptions o;
  o.dims = integer(a, dims, "dims", x.dim() > 0 ? x.shape().back() : 0);
  o.traditional = flag(a, traditional, "traditional");
  if (!base.is_none()) o.base = a.float32(base, "base");
  o.freqs = a.optional_tensor(freqs, "freqs");
  o.scale = a.float32(scale, "scale");
  o.offset = integer(a, offset, "offset", 0);
  o.offsets = a.optional_tensor(offsets, "offsets");
  o.positions = a.optional_tensor(positions, "positions");
  return o;
}

rudnn::GeluApproximate gelu_approximate(const OpArgs& a, py::handle value) {
  if (py::isinstance<py::str>(value)) {
    const std::string s = value.cast<std::string>();
    if (s == "none") return rudnn::GeluApproximate::none;
    if (s == "tanh") return rudnn::GeluApproximate::tanh;
  }
  refuse(a, "approximate", "must be 'none' or 'tanh', got " + py::repr(value).cast<std::string>());
}

// ---- rope -------------------------------------------------------------------------------------

py::object rope(py::object x, py::object dims, py::object traditional, py::object base,
                py::object freqs, py::object scale, py::object offset, py::object offsets,
                py::object positions, py::object stream, py::object out) {
  const OpArgs a("rope", stream);
  Tensor tx = a.tensor(x, "x");
  const rudnn::RopeOptions o =
      rope_options(a, tx, dims, traditional, base, freqs, scale, offset, offsets, positions);
  const rudnn::Stream s = a.stream_for(tx);
  if (out.is_none()) return wrap(without_gil([&] { return rudnn::rope(tx, o, s); }));
  Tensor to = a.output(out, "out");
  without_gil([&] { rudnn::rope_into(to, tx, o, s); });
  return out;
}

py::object rope_backward(py::object dy, py::object dims, py::object traditional, py::object base,
                         py::object freqs, py::object scale, py::object offset, py::object offsets,
                         py::object positions, py::object stream, py::object out) {
  const OpArgs a("rope_backward", stream);
  Tensor tdy = a.tensor(dy, "dy");
  const rudnn::RopeOptions o =
      rope_options(a, tdy, dims, traditional, base, freqs, scale, offset, offsets, positions);
  const rudnn::Stream s = a.stream_for(tdy);
  if (out.is_none()) return wrap(without_gil([&] { return rudnn::rope_backward(tdy, o, s); }));
  Tensor to = a.output(out, "out");
  without_gil([&] { rudnn::rope_backward_into(to, tdy, o, s); });
  return out;
}

// normalize=False: no norm (weight must then be None). cache: written in place and returned.
py::object norm_rope(py::object x, py::object weight, py::object eps, py::object normalize,
                     py::object dims, py::object traditional, py::object base, py::object freqs,
                     py::object scale, py::object offset, py::object cache, py::object stream,
                     py::object out) {
  const OpArgs a("norm_rope", stream);
  Tensor tx = a.tensor(x, "x");
  std::optional<rudnn::RopeNorm> norm;
  if (flag(a, normalize, "normalize")) {
    norm = rudnn::RopeNorm{a.optional_tensor(weight, "weight"), a.float32(eps, "eps")};
  } else if (!weight.is_none()) {
    refuse(a, "weight", "is given with normalize=False; pass weight=None, or normalize=True");
  }
  const rudnn::RopeOptions o =
      rope_options(a, tx, dims, traditional, base, freqs, scale, offset, py::none(), py::none());
  const rudnn::Stream s = a.stream_for(tx);
  if (!cache.is_none()) {
    if (!out.is_none()) refuse(a, "out", "is given with a cache; the cache is the output");
    Tensor tc = a.output(cache, "cache");
    without_gil([&] { rudnn::norm_rope(tx, norm, o, tc, s); });
    return cache;
  }
  if (out.is_none())
    return wrap(without_gil([&] { return rudnn::norm_rope(tx, norm, o, Tensor(), s); }));
  Tensor to = a.output(out, "out");
  without_gil([&] { rudnn::norm_rope_into(to, tx, norm, o, s); });
  return out;
}

// like: an array whose device the frequencies go to (None: the CPU).
rudnn::Device device_of(const OpArgs& a, py::handle like, Tensor& tlike) {
  tlike = a.optional_tensor(like, "like");
  return tlike.defined() ? tlike.device() : rudnn::Device::cpu();
}

py::object rope_llama3_freqs(py::object dims, py::object base, py::object factor,
                             py::object low_freq_factor, py::object high_freq_factor,
                             py::object original_max_position, py::object like, py::object stream) {
  const OpArgs a("rope_llama3_freqs", stream);
  Tensor tlike;
  const rudnn::Device device = device_of(a, like, tlike);
  rudnn::Llama3RopeScaling sc;
  sc.factor = a.float32(factor, "factor");
  sc.low_freq_factor = a.float32(low_freq_factor, "low_freq_factor");
  sc.high_freq_factor = a.float32(high_freq_factor, "high_freq_factor");
  sc.original_max_position = integer(a, original_max_position, "original_max_position");
  const int64_t d = integer(a, dims, "dims");
  const float b = a.float32(base, "base");
  const rudnn::Stream s = a.stream_for(tlike);
  return wrap(without_gil([&] { return rudnn::rope_llama3_freqs(d, b, sc, device, s); }));
}

py::object rope_yarn_freqs(py::object dims, py::object base, py::object factor,
                           py::object original_max_position, py::object beta_fast,
                           py::object beta_slow, py::object mscale, py::object mscale_all_dim,
                           py::object attention_factor, py::object truncate, py::object like,
                           py::object stream) {
  const OpArgs a("rope_yarn_freqs", stream);
  Tensor tlike;
  const rudnn::Device device = device_of(a, like, tlike);
  rudnn::YarnRopeScaling sc;
  sc.factor = a.float32(factor, "factor");
  sc.original_max_position = integer(a, original_max_position, "original_max_position");
  sc.beta_fast = a.float32(beta_fast, "beta_fast");
  sc.beta_slow = a.float32(beta_slow, "beta_slow");
  sc.mscale = a.float32(mscale, "mscale");
  sc.mscale_all_dim = a.float32(mscale_all_dim, "mscale_all_dim");
  sc.attention_factor = a.float32(attention_factor, "attention_factor");
  sc.truncate = flag(a, truncate, "truncate");
  const int64_t d = integer(a, dims, "dims");
  const float b = a.float32(base, "base");
  const rudnn::Stream s = a.stream_for(tlike);
  rudnn::YarnFreqs r = without_gil([&] { return rudnn::rope_yarn_freqs(d, b, sc, device, s); });
  return py::make_tuple(wrap(std::move(r.freqs)), py::float_(r.attention_factor));
}

// ---- swiglu, geglu ----------------------------------------------------------------------------

// Forward of either activation: up None is the one-tensor form (gate holds both halves, and
// is named x in the errors).
template <class Two, class One, class TwoInto, class OneInto>
py::object glu(const char* op, py::object gate, py::object up, py::object stream, py::object out,
               Two two, One one, TwoInto two_into, OneInto one_into) {
  const OpArgs a(op, stream);
  const bool halves = up.is_none();
  Tensor tg = a.tensor(gate, halves ? "x" : "gate");
  Tensor tu = halves ? Tensor() : a.tensor(up, "up");
  const rudnn::Stream s = a.stream_for(tg);
  if (out.is_none()) {
    return wrap(without_gil([&] { return halves ? one(tg, s) : two(tg, tu, s); }));
  }
  Tensor to = a.output(out, "out");
  without_gil([&] { halves ? one_into(to, tg, s) : two_into(to, tg, tu, s); });
  return out;
}

py::object swiglu(py::object gate, py::object up, py::object stream, py::object out) {
  return glu(
      "swiglu", gate, up, stream, out,
      [](const Tensor& g, const Tensor& u, const rudnn::Stream& s) {
        return rudnn::swiglu(g, u, s);
      },
      [](const Tensor& x, const rudnn::Stream& s) { return rudnn::swiglu(x, s); },
      [](const Tensor& o, const Tensor& g, const Tensor& u, const rudnn::Stream& s) {
        rudnn::swiglu_into(o, g, u, s);
      },
      [](const Tensor& o, const Tensor& x, const rudnn::Stream& s) {
        rudnn::swiglu_into(o, x, s);
      });
}

py::object geglu(py::object gate, py::object up, py::object approximate, py::object stream,
                 py::object out) {
  const rudnn::GeluApproximate ap = gelu_approximate(OpArgs("geglu", py::none()), approximate);
  return glu(
      "geglu", gate, up, stream, out,
      [ap](const Tensor& g, const Tensor& u, const rudnn::Stream& s) {
        return rudnn::geglu(g, u, ap, s);
      },
      [ap](const Tensor& x, const rudnn::Stream& s) { return rudnn::geglu(x, ap, s); },
      [ap](const Tensor& o, const Tensor& g, const Tensor& u, const rudnn::Stream& s) {
        rudnn::geglu_into(o, g, u, ap, s);
      },
      [ap](const Tensor& o, const Tensor& x, const rudnn::Stream& s) {
        rudnn::geglu_into(o, x, ap, s);
      });
}

// Backward of either activation: (dgate, dup) for two tensors (out: a pair), dx for the
// one-tensor form (out: one array).
template <class Two, class One, class TwoInto, class OneInto>
py::object glu_backward(const char* op, py::object dy, py::object gate, py::object up,
                        py::object stream, py::object out, Two two, One one, TwoInto two_into,
                        OneInto one_into) {
  const OpArgs a(op, stream);
  const bool halves = up.is_none();
  Tensor tdy = a.tensor(dy, "dy");
  Tensor tg = a.tensor(gate, halves ? "x" : "gate");
  Tensor tu = halves ? Tensor() : a.tensor(up, "up");
  const rudnn::Stream s = a.stream_for(tg);
  if (halves) {
    if (out.is_none()) return wrap(without_gil([&] { return one(tdy, tg, s); }));
    Tensor to = a.output(out, "out");
    without_gil([&] { one_into(to, tdy, tg, s); });
    return out;
  }
  if (out.is_none()) {
    rudnn::GluGrads g = without_gil([&] { return two(tdy, tg, tu, s); });
    return wrap_all(std::move(g.dgate), std::move(g.dup));
  }
  auto o = a.outputs(out, {"out[0] (dgate)", "out[1] (dup)"});
  without_gil([&] { two_into(o[0], o[1], tdy, tg, tu, s); });
  return out;
}

py::object swiglu_backward(py::object dy, py::object gate, py::object up, py::object stream,
                           py::object out) {
  using S = rudnn::Stream;
  return glu_backward(
      "swiglu_backward", dy, gate, up, stream, out,
      [](const Tensor& d, const Tensor& g, const Tensor& u, const S& s) {
        return rudnn::swiglu_backward(d, g, u, s);
      },
      [](const Tensor& d, const Tensor& x, const S& s) { return rudnn::swiglu_backward(d, x, s); },
      [](const Tensor& og, const Tensor& ou, const Tensor& d, const Tensor& g, const Tensor& u,
         const S& s) { rudnn::swiglu_backward_into(og, ou, d, g, u, s); },
      [](const Tensor& o, const Tensor& d, const Tensor& x, const S& s) {
        rudnn::swiglu_backward_into(o, d, x, s);
      });
}

py::object geglu_backward(py::object dy, py::object gate, py::object up, py::object approximate,
                          py::object stream, py::object out) {
  using S = rudnn::Stream;
  const rudnn::GeluApproximate ap =
      gelu_approximate(OpArgs("geglu_backward", py::none()), approximate);
  return glu_backward(
      "geglu_backward", dy, gate, up, stream, out,
      [ap](const Tensor& d, const Tensor& g, const Tensor& u, const S& s) {
        return rudnn::geglu_backward(d, g, u, ap, s);
      },
      [ap](const Tensor& d, const Tensor& x, const S& s) {
        return rudnn::geglu_backward(d, x, ap, s);
      },
      [ap](const Tensor& og, const Tensor& ou, const Tensor& d, const Tensor& g, const Tensor& u,
           const S& s) { rudnn::geglu_backward_into(og, ou, d, g, u, ap, s); },
      [ap](const Tensor& o, const Tensor& d, const Tensor& x, const S& s) {
        rudnn::geglu_backward_into(o, d, x, ap, s);
      });
}

}  // namespace

void bind_transformer(py::module_& m) {
  // Defaults live in python/rudnn/transformer.py, which always passes every argument; the
  // ones here serve direct callers of _rudnn.
  const auto none = py::none();
  m.def("rope", &rope, py::arg("x"), py::arg("dims") = none, py::kw_only(),
        py::arg("traditional") = false, py::arg("base") = none, py::arg("freqs") = none,
        py::arg("scale") = 1.0, py::arg("offset") = 0, py::arg("offsets") = none,
        py::arg("positions") = none, py::arg("stream") = none, py::arg("out") = none);
  m.def("rope_backward", &rope_backward, py::arg("dy"), py::arg("dims") = none, py::kw_only(),
        py::arg("traditional") = false, py::arg("base") = none, py::arg("freqs") = none,
        py::arg("scale") = 1.0, py::arg("offset") = 0, py::arg("offsets") = none,
        py::arg("positions") = none, py::arg("stream") = none, py::arg("out") = none);
  m.def("norm_rope", &norm_rope, py::arg("x"), py::arg("weight") = none, py::arg("eps") = 1e-6,
        py::kw_only(), py::arg("normalize") = true, py::arg("dims") = none,
        py::arg("traditional") = false, py::arg("base") = none, py::arg("freqs") = none,
        py::arg("scale") = 1.0, py::arg("offset") = 0, py::arg("cache") = none,
        py::arg("stream") = none, py::arg("out") = none);
  m.def("rope_llama3_freqs", &rope_llama3_freqs, py::arg("dims"), py::arg("base"),
        py::arg("factor") = 8.0, py::arg("low_freq_factor") = 1.0,
        py::arg("high_freq_factor") = 4.0, py::arg("original_max_position") = 8192, py::kw_only(),
        py::arg("like") = none, py::arg("stream") = none);
  m.def("rope_yarn_freqs", &rope_yarn_freqs, py::arg("dims"), py::arg("base"),
        py::arg("factor") = 1.0, py::arg("original_max_position") = 4096,
        py::arg("beta_fast") = 32.0, py::arg("beta_slow") = 1.0, py::arg("mscale") = 0.0,
        py::arg("mscale_all_dim") = 0.0, py::arg("attention_factor") = 0.0,
        py::arg("truncate") = true, py::kw_only(), py::arg("like") = none,
        py::arg("stream") = none);
  m.def("swiglu", &swiglu, py::arg("gate"), py::arg("up") = none, py::kw_only(),
        py::arg("stream") = none, py::arg("out") = none);
  m.def("geglu", &geglu, py::arg("gate"), py::arg("up") = none, py::arg("approximate") = "none",
        py::kw_only(), py::arg("stream") = none, py::arg("out") = none);
  m.def("swiglu_backward", &swiglu_backward, py::arg("dy"), py::arg("gate"), py::arg("up") = none,
        py::kw_only(), py::arg("stream") = none, py::arg("out") = none);
  m.def("geglu_backward", &geglu_backward, py::arg("dy"), py::arg("gate"), py::arg("up") = none,
        py::arg("approximate") = "none", py::kw_only(), py::arg("stream") = none,
        py::arg("out") = none);
}

}  // namespace rudnn_py
