// The attention family (rudnn/attention.h): attention (forward, with the logsumexp on
// request), attention_backward, and plan_attention / plan_attention_backward, in both
// layouts and the varlen (packed) form. The options of AttentionOptions travel as keyword
// arguments of the same names (scale, is_causal, mask, bias, bias_requires_grad, sinks,
// window, softcap, alibi_slopes, max_score_bytes, layout, return_lse, deterministic,
// cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k); an unknown one is refused. The
// strategy is a name of AttentionStrategy ("auto", "flash_scalar", "FlashScalar", ...),
// matched against attention_strategy_name, so a strategy added to the enum is taken
// without a change here. The documented Python functions are in python/rudnn/attention.py.
#include <pybind11/stl.h>

#include <algorithm>
#include <cctype>
#include <string>

#include "arg_rules.h"
#include "bind_families.h"
#include "interop.h"

namespace rudnn_py {

namespace {

using rudnn::AttentionStrategy;
using rudnn::Tensor;

// "FlashScalar", "flash_scalar", "flashscalar" are one name.
std::string folded(std::string s) {
  s.erase(std::remove(s.begin(), s.end(), '_'), s.end());
  std::transform(s.begin(), s.end(), s.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

AttentionStrategy strategy_of(const OpArgs& a, py::handle value) {
  std::string names;
  for (int i = 0;; ++i) {
    const auto e = static_cast<AttentionStrategy>(i);
    const std::string name = rudnn::attention_strategy_name(e);
    if (name == "?") break;
    if (py::isinstance<py::str>(value) && folded(value.cast<std::string>()) == folded(name))
      return e;
    names += (names.empty() ? "'" : ", '") + name + "'";
  }
  rules::refuse(a, "strategy", "must be one of " + names + ", got " + rules::repr_of(value));
}

// What the call reads from its keyword options. `forward` admits return_lse, `backward`
// deterministic and bias_requires_grad (plan_attention takes the union: it plans either).
struct Allowed {
  bool forward, backward;
};

rudnn::AttentionOptions attention_options(const OpArgs& a, const py::dict& kw, Allowed allowed) {
  rudnn::AttentionOptions o;
  for (auto [key_obj, value] : kw) {
    const std::string key = py::str(key_obj);
    const char* k = key.c_str();
    if (key == "scale") {
      if (!value.is_none()) o.scale = a.float32(value, k);
    } else if (key == "is_causal") {
      o.is_causal = rules::flag(a, value, k);
    } else if (key == "mask") {
      o.mask = a.optional_tensor(value, k);
    } else if (key == "bias") {
      o.bias = a.optional_tensor(value, k);
    } else if (key == "sinks") {
      o.sinks = a.optional_tensor(value, k);
    } else if (key == "alibi_slopes") {
      o.alibi_slopes = a.optional_tensor(value, k);
    } else if (key == "window") {
      if (!value.is_none()) o.window = rules::integer(a, value, k);
    } else if (key == "softcap") {
      if (!value.is_none()) o.softcap = a.float32(value, k);
    } else if (key == "max_score_bytes") {
      if (!value.is_none()) {
        const int64_t bytes = rules::integer(a, value, k);
        if (bytes < 0) rules::refuse(a, k, "is " + std::to_string(bytes) + "; expected > 0");
        o.max_score_bytes = static_cast<size_t>(bytes);
      }
    } else if (key == "layout") {
      o.layout = rules::choice<rudnn::AttentionLayout>(
          a, value, k,
          {{"bhsd", rudnn::AttentionLayout::bhsd}, {"bshd", rudnn::AttentionLayout::bshd}});
    } else if (key == "cu_seqlens_q") {
      o.cu_seqlens_q = a.optional_tensor(value, k);
    } else if (key == "cu_seqlens_k") {
      o.cu_seqlens_k = a.optional_tensor(value, k);
    } else if (key == "max_seqlen_q") {
      o.max_seqlen_q = rules::integer(a, value, k, 0);
    } else if (key == "max_seqlen_k") {
      o.max_seqlen_k = rules::integer(a, value, k, 0);
    } else if (key == "return_lse" && allowed.forward) {
      o.return_lse = rules::flag(a, value, k);
    } else if (key == "deterministic" && allowed.backward) {
      o.deterministic = rules::flag(a, value, k);
    } else if (key == "bias_requires_grad" && allowed.backward) {
      o.bias_requires_grad = rules::flag(a, value, k);
    } else {
      rules::refuse(a, "option '" + key + "'", "is not an option of " + std::string(a.op()));
    }
  }
  return o;
}

// out: None (allocate), one array (out only), or (out, lse) when return_lse.
py::object attention(py::object q, py::object k, py::object v, py::object strategy,
                     py::object stream, py::object out, py::kwargs kw) {
  const OpArgs a("attention", stream);
  Tensor tq = a.tensor(q, "q");
  Tensor tk = a.tensor(k, "k");
  Tensor tv = a.tensor(v, "v");
  const rudnn::AttentionOptions o = attention_options(a, kw, {true, false});
  const AttentionStrategy st = strategy_of(a, strategy);
  const rudnn::Stream s = a.stream_for(tq);
  if (out.is_none()) {
    rudnn::AttentionResult r = without_gil([&] { return rudnn::attention(tq, tk, tv, o, st, s); });
    if (!o.return_lse) return wrap(std::move(r.out));
    return wrap_all(std::move(r.out), std::move(r.lse));
  }
  if (o.return_lse) {
    auto t = a.outputs(out, {"out[0] (out)", "out[1] (lse)"});
    without_gil([&] { rudnn::attention_into(t[0], t[1], tq, tk, tv, o, st, s); });
  } else {
    Tensor to = a.output(out, "out");
    without_gil([&] { rudnn::attention_into(to, Tensor(), tq, tk, tv, o, st, s); });
  }
  return out;
}

// grads_out: None, or (dq, dk, dv) or (dq, dk, dv, dsinks, dbias) with None for an absent
// gradient. Returns (dq, dk, dv, dsinks, dbias), None where not computed.
py::object attention_backward(py::object dout, py::object q, py::object k, py::object v,
                              py::object out, py::object lse, py::object strategy,
                              py::object stream, py::object grads_out, py::kwargs kw) {
  const OpArgs a("attention_backward", stream);
  Tensor td = a.tensor(dout, "dout");
  Tensor tq = a.tensor(q, "q");
  Tensor tk = a.tensor(k, "k");
  Tensor tv = a.tensor(v, "v");
  Tensor to = a.tensor(out, "out");
  Tensor tl = a.tensor(lse, "lse");
  const rudnn::AttentionOptions o = attention_options(a, kw, {false, true});
  const AttentionStrategy st = strategy_of(a, strategy);
  const rudnn::Stream s = a.stream_for(tq);
  if (grads_out.is_none()) {
    rudnn::AttentionGrads g = without_gil(
        [&] { return rudnn::attention_backward(td, tq, tk, tv, to, tl, o, st, s); });
    return wrap_all(std::move(g.dq), std::move(g.dk), std::move(g.dv), std::move(g.dsinks),
                    std::move(g.dbias));
  }
  const bool three = (py::isinstance<py::tuple>(grads_out) || py::isinstance<py::list>(grads_out)) &&
                     py::len(grads_out) == 3;
  std::vector<Tensor> t =
      three ? a.outputs(grads_out, {"grads_out[0] (dq)", "grads_out[1] (dk)", "grads_out[2] (dv)"})
            : a.outputs(grads_out, {"grads_out[0] (dq)", "grads_out[1] (dk)", "grads_out[2] (dv)",
                                    "grads_out[3] (dsinks)", "grads_out[4] (dbias)"});
  t.resize(5);
  const rudnn::AttentionGrads g{t[0], t[1], t[2], t[3], t[4]};
  without_gil([&] { rudnn::attention_backward_into(g, td, tq, tk, tv, to, tl, o, st, s); });
  return grads_out;
}

rudnn::DType dtype_of(const OpArgs& a, py::handle value) {
  std::string name = py::hasattr(value, "__name__") ? py::str(value.attr("__name__"))
                                                    : py::str(value);
  if (name.rfind("torch.", 0) == 0) name.erase(0, 6);
  static const std::pair<const char*, rudnn::DType> kNames[] = {
      {"float32", rudnn::DType::f32}, {"float16", rudnn::DType::f16},
      {"bfloat16", rudnn::DType::bf16}, {"float64", rudnn::DType::f64}};
  for (const auto& [n, d] : kNames) {
    if (name == n) return d;
  }
  rules::refuse(a, "dtype",
                "must be 'float32', 'float16', 'bfloat16' or 'float64', got " + rules::repr_of(value));
}

rudnn::Device device_of(const OpArgs& a, py::handle value) {
  if (value.is_none()) return rudnn::Device::cuda(0);
  if (PyIndex_Check(value.ptr()) && !PyBool_Check(value.ptr()))
    return rudnn::Device::cuda(static_cast<int>(rules::integer(a, value, "device")));
  const std::string s = py::str(value);
  if (s == "cpu") return rudnn::Device::cpu();
  if (s == "cuda") return rudnn::Device::cuda(0);
  if (s.rfind("cuda:", 0) == 0 && s.size() > 5 && s.size() < 9 &&
      std::all_of(s.begin() + 5, s.end(), [](unsigned char c) { return std::isdigit(c); })) {
    return rudnn::Device::cuda(std::stoi(s.substr(5)));
  }
  rules::refuse(a, "device", "must be 'cpu', 'cuda', 'cuda:<index>' or an int, got " +
                                 rules::repr_of(value));
}

py::dict plan_dict(const rudnn::AttentionPlan& p) {
  py::dict d;
  d["kernel"] = rudnn::attention_kernel_name(p.kernel);
  d["block_rows"] = p.block_rows;
  d["block_heads"] = p.block_heads;
  d["splits"] = p.splits;
  d["split_keys"] = p.split_keys;
  d["passes"] = p.passes;
  d["dispatches"] = p.dispatches;
  d["scratch_bytes"] = p.scratch_bytes;
  d["max_intermediate_bytes"] = p.max_intermediate_bytes;
  d["capped"] = p.capped;
  d["flash_wgmma"] = p.flash_wgmma;
  d["split_tensor_cores"] = p.split_tensor_cores;
  return d;
}

py::dict plan(bool backward, py::object q_shape, py::object k_shape, py::object v_shape,
              py::object dtype, py::object strategy, py::object device, py::kwargs kw) {
  const OpArgs a(backward ? "plan_attention_backward" : "plan_attention", py::none());
  const rudnn::Shape q = rules::shape(a, q_shape, "q_shape");
  const rudnn::Shape k = rules::shape(a, k_shape, "k_shape");
  const rudnn::Shape v = rules::shape(a, v_shape, "v_shape");
  const rudnn::DType dt = dtype_of(a, dtype);
  const rudnn::AttentionOptions o = attention_options(a, kw, {true, true});
  const AttentionStrategy st = strategy_of(a, strategy);
  const rudnn::Device dev = device_of(a, device);
  const rudnn::AttentionPlan p = backward ? rudnn::plan_attention_backward(q, k, v, dt, o, st, dev)
                                          : rudnn::plan_attention(q, k, v, dt, o, st, dev);
  return plan_dict(p);
}

}  // namespace

void bind_attention(py::module_& m) {
  const auto none = py::none();
  m.def("attention", &attention, py::arg("q"), py::arg("k"), py::arg("v"), py::kw_only(),
        py::arg("strategy") = "auto", py::arg("stream") = none, py::arg("out") = none);
  m.def("attention_backward", &attention_backward, py::arg("dout"), py::arg("q"), py::arg("k"),
        py::arg("v"), py::arg("out"), py::arg("lse"), py::kw_only(), py::arg("strategy") = "auto",
        py::arg("stream") = none, py::arg("grads_out") = none);
  m.def(
      "plan_attention",
      [](py::object q, py::object k, py::object v, py::object dtype, py::object strategy,
         py::object device, py::kwargs kw) { return plan(false, q, k, v, dtype, strategy, device, kw); },
      py::arg("q_shape"), py::arg("k_shape"), py::arg("v_shape"), py::arg("dtype"), py::kw_only(),
      py::arg("strategy") = "auto", py::arg("device") = none);
  m.def(
      "plan_attention_backward",
      [](py::object q, py::object k, py::object v, py::object dtype, py::object strategy,
         py::object device, py::kwargs kw) { return plan(true, q, k, v, dtype, strategy, device, kw); },
      py::arg("q_shape"), py::arg("k_shape"), py::arg("v_shape"), py::arg("dtype"), py::kw_only(),
      py::arg("strategy") = "auto", py::arg("device") = none);
}

}  // namespace rudnn_py
