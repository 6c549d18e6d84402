// The paged attention family (rudnn/paged_attention.h, namespace rudnn::paged): the host
// schedule (HostPlan), its upload (DevicePlan) with attention, MLA, split workspaces and cache
// appends, the backward (CPU only in C++) with its ordered workspace, and spec 003's
// block-table form (paged_attention, paged_write). The plans are
// opaque classes of rudnn._rudnn; the documented Python layer is python/rudnn/paged.py.
// DevicePlan calls run on the stream the plan was uploaded to, so they take no stream.
#include <utility>
#include <vector>

#include "arg_rules.h"
#include "bind_families.h"
#include "interop.h"

namespace rudnn_py {

namespace {

namespace paged = rudnn::paged;
using rudnn::Tensor;

// A Python sequence of ints (bool refused) as int64s, each named "<arg>[i]" in errors.
std::vector<int64_t> int_list(const OpArgs& a, py::handle seq, const std::string& arg) {
  if (!py::isinstance<py::sequence>(seq) || py::isinstance<py::str>(seq)) {
    rules::refuse(a, arg.c_str(), "is not a sequence of ints, got " + rules::type_name(seq));
  }
  std::vector<int64_t> out;
  size_t i = 0;
  for (py::handle item : seq) {
    const std::string name = arg + "[" + std::to_string(i++) + "]";
    out.push_back(rules::integer(a, item, name.c_str()));
  }
  return out;
}

paged::HostPlan make_host_plan(py::object page_size, py::object pages, py::object tables,
                               py::object lengths, py::object sequence_ids,
                               py::object positions) {
  const OpArgs a("HostPlan", py::none());
  std::vector<std::vector<int64_t>> t;
  if (!py::isinstance<py::sequence>(tables) || py::isinstance<py::str>(tables)) {
    rules::refuse(a, "tables", "is not a sequence of sequences of ints, got " +
                                   rules::type_name(tables));
  }
  size_t s = 0;
  for (py::handle row : tables) t.push_back(int_list(a, row, "tables[" + std::to_string(s++) + "]"));
  return paged::HostPlan(rules::integer(a, page_size, "page_size"),
                         rules::integer(a, pages, "pages"), std::move(t),
                         int_list(a, lengths, "lengths"), int_list(a, sequence_ids, "sequence_ids"),
                         int_list(a, positions, "positions"));
}

paged::DevicePlan upload(const paged::HostPlan& host, py::object q, py::object stream) {
  const OpArgs a("DevicePlan.upload", stream);
  Tensor tq = a.tensor(q, "q");
  const rudnn::Stream s = a.stream_for(tq);
  return without_gil([&] { return paged::DevicePlan::upload(host, tq, s); });
}

// The arguments of a DevicePlan attention call: q, k_cache, v_cache, scale, causal.
struct AttentionArgs {
  Tensor q, k, v;
  float scale;
  bool causal;
};
AttentionArgs attention_args(const OpArgs& a, py::handle q, py::handle k_cache,
                             py::handle v_cache, py::handle scale, py::handle causal) {
  return {a.tensor(q, "q"), a.tensor(k_cache, "k_cache"), a.tensor(v_cache, "v_cache"),
          a.float32(scale, "scale"), rules::flag(a, causal, "causal")};
}

// The arguments of a DevicePlan MLA call: q, qp, latent, kp, scale, causal.
struct MlaArgs {
  Tensor q, qp, latent, kp;
  float scale;
  bool causal;
};
MlaArgs mla_args(const OpArgs& a, py::handle q, py::handle qp, py::handle latent, py::handle kp,
                 py::handle scale, py::handle causal) {
  return {a.tensor(q, "q"),           a.tensor(qp, "qp"),
          a.tensor(latent, "latent"), a.tensor(kp, "kp"),
          a.float32(scale, "scale"),  rules::flag(a, causal, "causal")};
}

py::object attention(const paged::DevicePlan& plan, py::object q, py::object k_cache,
                     py::object v_cache, py::object scale, py::object causal, py::object out) {
  const OpArgs a("DevicePlan.attention", py::none());
  const AttentionArgs t = attention_args(a, q, k_cache, v_cache, scale, causal);
  if (out.is_none()) {
    return wrap(without_gil([&] { return plan.attention(t.q, t.k, t.v, t.scale, t.causal); }));
  }
  Tensor to = a.output(out, "out");
  without_gil([&] { plan.attention_into(to, t.q, t.k, t.v, t.scale, t.causal); });
  return out;
}

py::object mla(const paged::DevicePlan& plan, py::object q, py::object qp, py::object latent,
               py::object kp, py::object scale, py::object causal, py::object out) {
  const OpArgs a("DevicePlan.mla", py::none());
  const MlaArgs t = mla_args(a, q, qp, latent, kp, scale, causal);
  if (out.is_none()) {
    return wrap(
        without_gil([&] { return plan.mla(t.q, t.qp, t.latent, t.kp, t.scale, t.causal); }));
  }
  Tensor to = a.output(out, "out");
  without_gil([&] { plan.mla_into(to, t.q, t.qp, t.latent, t.kp, t.scale, t.causal); });
  return out;
}

py::object attention_with_workspace(const paged::DevicePlan& plan, paged::SplitWorkspace& ws,
                                    py::object q, py::object k_cache, py::object v_cache,
                                    py::object scale, py::object causal) {
  const OpArgs a("DevicePlan.attention_with_workspace", py::none());
  const AttentionArgs t = attention_args(a, q, k_cache, v_cache, scale, causal);
  return wrap(without_gil(
      [&] { return plan.attention_with_workspace(ws, t.q, t.k, t.v, t.scale, t.causal); }));
}

py::object mla_with_workspace(const paged::DevicePlan& plan, paged::SplitWorkspace& ws,
                              py::object q, py::object qp, py::object latent, py::object kp,
                              py::object scale, py::object causal) {
  const OpArgs a("DevicePlan.mla_with_workspace", py::none());
  const MlaArgs t = mla_args(a, q, qp, latent, kp, scale, causal);
  return wrap(without_gil([&] {
    return plan.mla_with_workspace(ws, t.q, t.qp, t.latent, t.kp, t.scale, t.causal);
  }));
}

// Backward (CPU only in C++; GPU tensors raise Unsupported there). Without `out` the
// gradients are new arrays; with `out` (a tuple, None for a gradient not wanted) the
// _selected_into form writes them, and with a `workspace` as well the _ordered_into form.
py::object attention_backward(const paged::DevicePlan& plan, py::object q, py::object k_cache,
                              py::object v_cache, py::object grad_out, py::object scale,
                              py::object causal, py::object out, py::object workspace) {
  const OpArgs a("DevicePlan.attention_backward", py::none());
  const AttentionArgs t = attention_args(a, q, k_cache, v_cache, scale, causal);
  Tensor go = a.tensor(grad_out, "grad_out");
  if (out.is_none()) {
    if (!workspace.is_none()) {
      rules::refuse(a, "workspace", "needs out= (the ordered form writes into given arrays)");
    }
    paged::AttentionBackward r = without_gil(
        [&] { return plan.attention_backward(t.q, t.k, t.v, go, t.scale, t.causal); });
    return wrap_all(std::move(r.dq), std::move(r.dk), std::move(r.dv));
  }
  auto o = a.outputs(out, {"out[0] (dq)", "out[1] (dk)", "out[2] (dv)"});
  const paged::AttentionBackward grads{o[0], o[1], o[2]};
  if (workspace.is_none()) {
    without_gil([&] {
      plan.attention_backward_selected_into(grads, t.q, t.k, t.v, go, t.scale, t.causal);
    });
  } else {
    auto& ws = workspace.cast<paged::OrderedBackwardWorkspace&>();
    without_gil([&] {
      plan.attention_backward_ordered_into(ws, grads, t.q, t.k, t.v, go, t.scale, t.causal);
    });
  }
  return out;
}

py::object mla_backward(const paged::DevicePlan& plan, py::object q, py::object qp,
                        py::object latent, py::object kp, py::object grad_out, py::object scale,
                        py::object causal, py::object out, py::object workspace) {
  const OpArgs a("DevicePlan.mla_backward", py::none());
  const MlaArgs t = mla_args(a, q, qp, latent, kp, scale, causal);
  Tensor go = a.tensor(grad_out, "grad_out");
  if (out.is_none()) {
    if (!workspace.is_none()) {
      rules::refuse(a, "workspace", "needs out= (the ordered form writes into given arrays)");
    }
    paged::MlaBackward r = without_gil(
        [&] { return plan.mla_backward(t.q, t.qp, t.latent, t.kp, go, t.scale, t.causal); });
    return wrap_all(std::move(r.dq), std::move(r.dqp), std::move(r.dlatent), std::move(r.dkp));
  }
  auto o = a.outputs(out, {"out[0] (dq)", "out[1] (dqp)", "out[2] (dlatent)", "out[3] (dkp)"});
  const paged::MlaBackward grads{o[0], o[1], o[2], o[3]};
  if (workspace.is_none()) {
    without_gil([&] {
      plan.mla_backward_selected_into(grads, t.q, t.qp, t.latent, t.kp, go, t.scale, t.causal);
    });
  } else {
    auto& ws = workspace.cast<paged::OrderedBackwardWorkspace&>();
    without_gil([&] {
      plan.mla_backward_ordered_into(ws, grads, t.q, t.qp, t.latent, t.kp, go, t.scale,
                                     t.causal);
    });
  }
  return out;
}

paged::OrderedBackwardWorkspace make_ordered_workspace(const paged::DevicePlan& plan,
                                                       py::object q) {
  const OpArgs a("OrderedBackwardWorkspace", py::none());
  Tensor tq = a.tensor(q, "q");
  return without_gil([&] { return paged::OrderedBackwardWorkspace(plan, tq); });
}

py::tuple append(const paged::DevicePlan& plan, py::object k, py::object v,
                 py::object key_cache, py::object value_cache) {
  const OpArgs a("DevicePlan.append", py::none());
  Tensor tk = a.tensor(k, "k"), tv = a.tensor(v, "v");
  // The caches are written (in place when ruDNN may: see rudnn/paged_attention.h), so they are
  // imported writable, never copied on the way in.
  Tensor kc = a.output(key_cache, "key_cache"), vc = a.output(value_cache, "value_cache");
  paged::AppendResult r = without_gil([&] { return plan.append(tk, tv, kc, vc); });
  return wrap_all(std::move(r.key_cache), std::move(r.value_cache));
}

paged::SplitWorkspace make_workspace(py::object q, py::object queries, py::object heads,
                                     py::object value_dim, py::object splits, py::object stream) {
  const OpArgs a("SplitWorkspace", stream);
  Tensor tq = a.tensor(q, "q");
  const rudnn::Stream s = a.stream_for(tq);
  return paged::SplitWorkspace(tq, rules::integer(a, queries, "queries"),
                               rules::integer(a, heads, "heads"),
                               rules::integer(a, value_dim, "value_dim"),
                               rules::integer(a, splits, "splits"), s);
}

py::object block_table_attention(py::object q, py::object k_cache, py::object v_cache,
                                 py::object block_tables, py::object lengths, py::object scale,
                                 py::object stream, py::object out) {
  const OpArgs a("paged_attention", stream);
  Tensor tq = a.tensor(q, "q"), tk = a.tensor(k_cache, "k_cache"), tv = a.tensor(v_cache, "v_cache"),
         bt = a.tensor(block_tables, "block_tables"), ln = a.tensor(lengths, "lengths");
  const float sc = a.float32(scale, "scale");
  const rudnn::Stream s = a.stream_for(tq);
  if (out.is_none())
    return wrap(without_gil([&] { return paged::paged_attention(tq, tk, tv, bt, ln, sc, s); }));
  Tensor to = a.output(out, "out");
  without_gil([&] { paged::paged_attention_into(to, tq, tk, tv, bt, ln, sc, s); });
  return out;
}

py::object paged_write(py::object cache, py::object new_values, py::object slots,
                       py::object in_place, py::object stream) {
  const OpArgs a("paged_write", stream);
  Tensor nv = a.tensor(new_values, "new"), sl = a.tensor(slots, "slots");
  if (rules::flag(a, in_place, "in_place")) {
    Tensor c = a.output(cache, "cache");
    const rudnn::Stream s = a.stream_for(c);
    without_gil([&] { paged::paged_write_(c, nv, sl, s); });
    return cache;
  }
  Tensor c = a.tensor(cache, "cache");
  const rudnn::Stream s = a.stream_for(c);
  return wrap(without_gil([&] { return paged::paged_write(c, nv, sl, s); }));
}

}  // namespace

void bind_paged(py::module_& m) {
  const auto none = py::none();
  py::class_<paged::HostPlan>(m, "PagedHostPlan", "A validated paged-attention schedule.")
      .def(py::init(&make_host_plan), py::arg("page_size"), py::arg("pages"), py::arg("tables"),
           py::arg("lengths"), py::arg("sequence_ids"), py::arg("positions"))
      .def_property_readonly("page_size", &paged::HostPlan::page_size)
      .def_property_readonly("pages", &paged::HostPlan::pages)
      .def_property_readonly("sequences", &paged::HostPlan::sequences)
      .def_property_readonly("queries", &paged::HostPlan::queries)
      .def_property_readonly("duplicate_slots", &paged::HostPlan::duplicate_slots)
      .def("max_keys", &paged::HostPlan::max_keys, py::arg("causal"));

  py::class_<paged::SplitWorkspace>(m, "PagedSplitWorkspace",
                                    "FP32 partial results of split-history paged calls.")
      .def(py::init(&make_workspace), py::arg("q"), py::arg("queries"), py::arg("heads"),
           py::arg("value_dim"), py::arg("splits"), py::kw_only(), py::arg("stream") = none)
      .def_property_readonly("queries", &paged::SplitWorkspace::queries)
      .def_property_readonly("heads", &paged::SplitWorkspace::heads)
      .def_property_readonly("value_dim", &paged::SplitWorkspace::value_dim)
      .def_property_readonly("splits", &paged::SplitWorkspace::splits)
      .def_property_readonly("bytes", &paged::SplitWorkspace::bytes);

  py::class_<paged::DevicePlan>(m, "PagedDevicePlan", "A paged schedule on a device and stream.")
      .def_static("upload", &upload, py::arg("host"), py::arg("q"), py::kw_only(),
                  py::arg("stream") = none)
      .def_property_readonly("bytes", &paged::DevicePlan::bytes)
      .def("attention", &attention, py::arg("q"), py::arg("k_cache"), py::arg("v_cache"),
           py::arg("scale"), py::arg("causal") = true, py::kw_only(), py::arg("out") = none)
      .def("mla", &mla, py::arg("q"), py::arg("qp"), py::arg("latent"), py::arg("kp"),
           py::arg("scale"), py::arg("causal") = true, py::kw_only(), py::arg("out") = none)
      .def("attention_with_workspace", &attention_with_workspace, py::arg("workspace"),
           py::arg("q"), py::arg("k_cache"), py::arg("v_cache"), py::arg("scale"),
           py::arg("causal") = true)
      .def("mla_with_workspace", &mla_with_workspace, py::arg("workspace"), py::arg("q"),
           py::arg("qp"), py::arg("latent"), py::arg("kp"), py::arg("scale"),
           py::arg("causal") = true)
      .def("attention_backward", &attention_backward, py::arg("q"), py::arg("k_cache"),
           py::arg("v_cache"), py::arg("grad_out"), py::arg("scale"), py::arg("causal") = true,
           py::kw_only(), py::arg("out") = none, py::arg("workspace") = none)
      .def("mla_backward", &mla_backward, py::arg("q"), py::arg("qp"), py::arg("latent"),
           py::arg("kp"), py::arg("grad_out"), py::arg("scale"), py::arg("causal") = true,
           py::kw_only(), py::arg("out") = none, py::arg("workspace") = none)
      .def("append", &append, py::arg("k"), py::arg("v"), py::arg("key_cache"),
           py::arg("value_cache"));

  py::class_<paged::OrderedBackwardWorkspace>(
      m, "PagedOrderedBackwardWorkspace", "State of the atomic-free ordered paged backward.")
      .def(py::init(&make_ordered_workspace), py::arg("plan"), py::arg("q"))
      .def_property("query_pruning", &paged::OrderedBackwardWorkspace::query_pruning,
                    &paged::OrderedBackwardWorkspace::set_query_pruning)
      .def_property("history_row_cache", &paged::OrderedBackwardWorkspace::history_row_cache,
                    &paged::OrderedBackwardWorkspace::set_history_row_cache)
      .def_property("history_compaction", &paged::OrderedBackwardWorkspace::history_compaction,
                    &paged::OrderedBackwardWorkspace::set_history_compaction)
      // (active, inactive) physical pages while compaction is on, else None.
      .def_property_readonly("history_compaction_pages",
                             [](const paged::OrderedBackwardWorkspace& ws) -> py::object {
                               const auto p = ws.history_compaction_pages();
                               if (!p) return py::none();
                               return py::make_tuple(p->first, p->second);
                             })
      .def_property_readonly("queries", &paged::OrderedBackwardWorkspace::queries)
      .def_property_readonly("heads", &paged::OrderedBackwardWorkspace::heads)
      .def_property_readonly("bytes", &paged::OrderedBackwardWorkspace::bytes);

  m.def("paged_attention", &block_table_attention, py::arg("q"), py::arg("k_cache"),
        py::arg("v_cache"), py::arg("block_tables"), py::arg("lengths"), py::arg("scale"),
        py::kw_only(), py::arg("stream") = none, py::arg("out") = none);
  m.def("paged_write", &paged_write, py::arg("cache"), py::arg("new"), py::arg("slots"),
        py::arg("in_place") = false, py::kw_only(), py::arg("stream") = none);
}

}  // namespace rudnn_py
