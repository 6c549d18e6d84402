// The mixture-of-experts family (rudnn/moe.h): routing (softmax top-k, group-limited sigmoid),
// dispatch, SwiGLU experts, combine and their backward passes, the router-training weights,
// native SwiGLU, the expert projections and the one-call moe_forward / moe_backward. The plan
// and state types of the header are opaque Python classes of this module (RoutingPlan,
// DispatchedTokens, RouterTrainingPlan, SwiGluExperts, ExpertTrainingCache,
// ExpertProjectionState, MoeState) whose tensors come back as rudnn.Tensor; python/rudnn/moe.py
// wraps them so that results take the caller's array type, and documents every function.
// Option names are lower-case spellings of the header's enums ("softmax", "sigmoid_grouped",
// "scalar", "tensor_core", "auto", "serial", "plane").
#include <pybind11/stl.h>

#include <string>

#include "arg_rules.h"
#include "bind_families.h"
#include "interop.h"

namespace rudnn_py {

namespace {

namespace moe = rudnn::moe;
using rudnn::Tensor;

moe::GroupedStrategy grouped_strategy(const OpArgs& a, py::handle value, const char* arg) {
  return rules::choice<moe::GroupedStrategy>(a, value, arg,
                                             {{"scalar", moe::GroupedStrategy::Scalar},
                                              {"tensor_core", moe::GroupedStrategy::TensorCore},
                                              {"auto", moe::GroupedStrategy::Auto}});
}

moe::CombineGradientStrategy combine_strategy(const OpArgs& a, py::handle value, const char* arg) {
  return rules::choice<moe::CombineGradientStrategy>(
      a, value, arg,
      {{"serial", moe::CombineGradientStrategy::Serial},
       {"plane", moe::CombineGradientStrategy::Plane}});
}

moe::RoutingOptions routing_options(const OpArgs& a, py::handle top_k, py::handle renormalize) {
  moe::RoutingOptions o;
  o.top_k = rules::integer(a, top_k, "top_k");
  o.renormalize = rules::flag(a, renormalize, "renormalize");
  return o;
}

moe::GroupRoutingOptions group_options(const OpArgs& a, py::handle top_k, py::handle groups,
                                       py::handle selected_groups, py::handle group_top_two,
                                       py::handle renormalize, py::handle scale) {
  moe::GroupRoutingOptions o;
  o.top_k = rules::integer(a, top_k, "top_k");
  o.groups = rules::integer(a, groups, "groups");
  o.selected_groups = rules::integer(a, selected_groups, "selected_groups");
  o.group_top_two = rules::flag(a, group_top_two, "group_top_two");
  o.renormalize = rules::flag(a, renormalize, "renormalize");
  o.scale = a.float32(scale, "scale");
  return o;
}

moe::RouterWeightOptions weight_options(const OpArgs& a, py::handle scoring,
                                        py::handle renormalize, py::handle scale) {
  moe::RouterWeightOptions o;
  o.scoring = rules::choice<moe::RouterScoring>(
      a, scoring, "scoring",
      {{"softmax", moe::RouterScoring::Softmax}, {"sigmoid", moe::RouterScoring::Sigmoid}});
  o.renormalize = rules::flag(a, renormalize, "renormalize");
  o.scale = a.float32(scale, "scale");
  return o;
}

// A pair of caller buffers (indices_out, weights_out), both required.
std::vector<Tensor> route_outputs(const OpArgs& a, py::handle out) {
  std::vector<Tensor> t = a.outputs(out, {"out[0] (indices)", "out[1] (weights)"});
  if (!t[0].defined() || !t[1].defined()) {
    rules::refuse(a, "out", "must hold two arrays (indices, weights); got a None element");
  }
  return t;
}

py::object route(py::object logits, py::object top_k, py::object renormalize, py::object stream,
                 py::object out) {
  const OpArgs a("route", stream);
  Tensor l = a.tensor(logits, "logits");
  const moe::RoutingOptions o = routing_options(a, top_k, renormalize);
  const rudnn::Stream s = a.stream_for(l);
  if (out.is_none()) {
    return py::cast(without_gil([&] { return moe::route(l, o, s); }));
  }
  auto t = route_outputs(a, out);
  without_gil([&] { moe::route_into(t[0], t[1], l, o, s); });
  return out;
}

py::object route_sigmoid_grouped(py::object logits, py::object bias, py::object top_k,
                                 py::object groups, py::object selected_groups,
                                 py::object group_top_two, py::object renormalize,
                                 py::object scale, py::object stream, py::object out) {
  const OpArgs a("route_sigmoid_grouped", stream);
  Tensor l = a.tensor(logits, "logits");
  Tensor b = a.optional_tensor(bias, "bias");
  const moe::GroupRoutingOptions o =
      group_options(a, top_k, groups, selected_groups, group_top_two, renormalize, scale);
  const rudnn::Stream s = a.stream_for(l);
  if (out.is_none()) {
    return py::cast(without_gil([&] { return moe::route_sigmoid_grouped(l, b, o, s); }));
  }
  auto t = route_outputs(a, out);
  without_gil([&] { moe::route_sigmoid_grouped_into(t[0], t[1], l, b, o, s); });
  return out;
}

py::object selected_router_weights(py::object logits, py::object indices, py::object scoring,
                                   py::object renormalize, py::object scale, py::object stream,
                                   py::object out) {
  const OpArgs a("selected_router_weights", stream);
  Tensor l = a.tensor(logits, "logits");
  Tensor i = a.tensor(indices, "indices");
  const moe::RouterWeightOptions o = weight_options(a, scoring, renormalize, scale);
  const rudnn::Stream s = a.stream_for(l);
  if (out.is_none()) {
    return wrap(without_gil([&] { return moe::selected_router_weights(l, i, o, s); }));
  }
  Tensor to = a.output(out, "out");
  without_gil([&] { moe::selected_router_weights_into(to, l, i, o, s); });
  return out;
}

py::object selected_router_backward(py::object logits, py::object indices,
                                    py::object grad_weights, py::object scoring,
                                    py::object renormalize, py::object scale, py::object stream,
                                    py::object out) {
  const OpArgs a("selected_router_backward", stream);
  Tensor l = a.tensor(logits, "logits");
  Tensor i = a.tensor(indices, "indices");
  Tensor g = a.tensor(grad_weights, "grad_weights");
  const moe::RouterWeightOptions o = weight_options(a, scoring, renormalize, scale);
  const rudnn::Stream s = a.stream_for(l);
  if (out.is_none()) {
    return wrap(without_gil([&] { return moe::selected_router_backward(l, i, g, o, s); }));
  }
  Tensor to = a.output(out, "out");
  without_gil([&] { moe::selected_router_backward_into(to, l, i, g, o, s); });
  return out;
}

py::object native_swiglu(py::object gate, py::object up, py::object stream, py::object out) {
  const OpArgs a("native_swiglu", stream);
  Tensor g = a.tensor(gate, "gate");
  Tensor u = a.tensor(up, "up");
  const rudnn::Stream s = a.stream_for(g);
  if (out.is_none()) return wrap(without_gil([&] { return moe::native_swiglu(g, u, s); }));
  Tensor to = a.output(out, "out");
  without_gil([&] { moe::native_swiglu_into(to, g, u, s); });
  return out;
}

// out: (dgate, dup), a None element not requested.
py::object native_swiglu_backward(py::object gate, py::object up, py::object grad,
                                  py::object gate_grad, py::object up_grad, py::object stream,
                                  py::object out) {
  const OpArgs a("native_swiglu_backward", stream);
  Tensor g = a.tensor(gate, "gate");
  Tensor u = a.tensor(up, "up");
  Tensor d = a.tensor(grad, "grad");
  moe::NativeSwiGluSelection sel;
  sel.gate = rules::flag(a, gate_grad, "gate_grad");
  sel.up = rules::flag(a, up_grad, "up_grad");
  const rudnn::Stream s = a.stream_for(g);
  if (out.is_none()) {
    moe::NativeSwiGluGradients r =
        without_gil([&] { return moe::native_swiglu_backward(g, u, d, sel, s); });
    return wrap_all(std::move(r.gate), std::move(r.up));
  }
  auto t = a.outputs(out, {"out[0] (dgate)", "out[1] (dup)"});
  without_gil([&] { moe::native_swiglu_backward_into(t[0], t[1], g, u, d, s); });
  return out;
}

py::tuple expert_projection_forward(py::object input, py::object global_ids, py::object weights,
                                    py::object expert_start, py::object forward,
                                    py::object backward, py::object stream) {
  const OpArgs a("expert_projection_forward", stream);
  Tensor x = a.tensor(input, "input");
  Tensor ids = a.tensor(global_ids, "global_ids");
  Tensor w = a.tensor(weights, "weights");
  moe::ExpertProjectionOptions o;
  o.expert_start = rules::integer(a, expert_start, "expert_start");
  o.forward = grouped_strategy(a, forward, "forward");
  o.backward = grouped_strategy(a, backward, "backward");
  const rudnn::Stream s = a.stream_for(x);
  moe::ExpertProjectionForward r =
      without_gil([&] { return moe::expert_projection_forward(x, ids, w, o, s); });
  return py::make_tuple(wrap(std::move(r.output)), py::cast(std::move(r.state)));
}

py::tuple expert_projection_backward(const moe::ExpertProjectionState& state, py::object grad,
                                     py::object input_grad, py::object weights_grad,
                                     py::object stream) {
  const OpArgs a("expert_projection_backward", stream);
  Tensor g = a.tensor(grad, "grad");
  moe::ExpertProjectionSelection sel;
  sel.input = rules::flag(a, input_grad, "input_grad");
  sel.weights = rules::flag(a, weights_grad, "weights_grad");
  const rudnn::Stream s = a.stream_for(g);
  moe::ExpertProjectionGradients r =
      without_gil([&] { return moe::expert_projection_backward(state, g, sel, s); });
  return wrap_all(std::move(r.input), std::move(r.weights));
}

// The keyword options of moe_forward / moe_inference, as MoeOptions. Python (rudnn/moe.py)
// resolves every default, so each is required here.
moe::MoeOptions moe_options(const OpArgs& a, const py::dict& kw) {
  auto get = [&](const char* k) -> py::object {
    if (!kw.contains(k)) rules::refuse(a, k, "is missing");
    return kw[k];
  };
  moe::MoeOptions o;
  o.selection.kind = rules::choice<moe::MoeSelection::Kind>(
      a, get("routing"), "routing",
      {{"softmax", moe::MoeSelection::Kind::Softmax},
       {"sigmoid_grouped", moe::MoeSelection::Kind::SigmoidGrouped}});
  if (o.selection.kind == moe::MoeSelection::Kind::Softmax) {
    o.selection.softmax = routing_options(a, get("top_k"), get("renormalize"));
  } else {
    o.selection.grouped = group_options(a, get("top_k"), get("groups"), get("selected_groups"),
                                        get("group_top_two"), get("renormalize"),
                                        get("route_scale"));
  }
  o.weights = weight_options(a, get("scoring"), get("weight_renormalize"), get("weight_scale"));
  o.forward = grouped_strategy(a, get("forward"), "forward");
  o.backward = grouped_strategy(a, get("backward"), "backward");
  o.combine_backward = combine_strategy(a, get("combine_backward"), "combine_backward");
  const char* known[] = {"routing", "top_k", "renormalize", "groups", "selected_groups",
                         "group_top_two", "route_scale", "scoring", "weight_renormalize",
                         "weight_scale", "forward", "backward", "combine_backward"};
  for (auto [key, value] : kw) {
    const std::string k = py::str(key);
    bool found = false;
    for (const char* n : known) found = found || k == n;
    if (!found) rules::refuse(a, "option '" + k + "'", "is not an option of " + std::string(a.op()));
  }
  return o;
}

struct MoeOperands {
  Tensor input, logits, bias, gate, up, down;
};

MoeOperands moe_operands(const OpArgs& a, py::handle input, py::handle logits, py::handle bias,
                         py::handle gate, py::handle up, py::handle down) {
  return {a.tensor(input, "input"), a.tensor(logits, "logits"), a.optional_tensor(bias, "bias"),
          a.tensor(gate, "gate"),   a.tensor(up, "up"),         a.tensor(down, "down")};
}

// grads: the names of the gradients a backward will ask for ("input", "logits", "gate",
// "up", "down"); None: all five.
moe::MoeGradientSelection gradient_selection(const OpArgs& a, py::handle grads) {
  moe::MoeGradientSelection sel;
  if (grads.is_none()) return sel;
  sel = {false, false, false, false, false};
  if (py::isinstance<py::str>(grads) || !py::isinstance<py::iterable>(grads)) {
    rules::refuse(a, "grads", "must be None or a collection of 'input', 'logits', 'gate', 'up', "
                              "'down', got " + rules::type_name(grads));
  }
  for (py::handle g : py::reinterpret_borrow<py::iterable>(grads)) {
    bool* flag = rules::choice<bool*>(a, g, "grads element",
                                      {{"input", &sel.input},
                                       {"logits", &sel.logits},
                                       {"gate", &sel.gate},
                                       {"up", &sel.up},
                                       {"down", &sel.down}});
    *flag = true;
  }
  return sel;
}

py::tuple moe_forward(py::object input, py::object logits, py::object gate, py::object up,
                      py::object down, py::object bias, py::object grads, py::object stream,
                      py::kwargs kw) {
  const OpArgs a("moe_forward", stream);
  const MoeOperands t = moe_operands(a, input, logits, bias, gate, up, down);
  const moe::MoeOptions o = moe_options(a, kw);
  const bool all = grads.is_none();
  const moe::MoeGradientSelection sel = gradient_selection(a, grads);
  const rudnn::Stream s = a.stream_for(t.input);
  moe::MoeForward r = without_gil([&] {
    return all ? moe::moe_forward(t.input, t.logits, t.bias, t.gate, t.up, t.down, o, s)
               : moe::moe_forward_selected(t.input, t.logits, t.bias, t.gate, t.up, t.down, o,
                                           sel, s);
  });
  return py::make_tuple(wrap(std::move(r.output)), py::cast(std::move(r.state)));
}

py::object moe_inference(py::object input, py::object logits, py::object gate, py::object up,
                         py::object down, py::object bias, py::object stream, py::kwargs kw) {
  const OpArgs a("moe_inference", stream);
  const MoeOperands t = moe_operands(a, input, logits, bias, gate, up, down);
  const moe::MoeOptions o = moe_options(a, kw);
  const rudnn::Stream s = a.stream_for(t.input);
  return wrap(without_gil(
      [&] { return moe::moe_inference(t.input, t.logits, t.bias, t.gate, t.up, t.down, o, s); }));
}

py::tuple moe_backward(const moe::MoeState& state, py::object grad_output, py::object grads,
                       py::object stream) {
  const OpArgs a("moe_backward", stream);
  Tensor g = a.tensor(grad_output, "grad_output");
  const bool all = grads.is_none();
  const moe::MoeGradientSelection sel = gradient_selection(a, grads);
  const rudnn::Stream s = a.stream_for(g);
  moe::MoeGradients r = without_gil([&] {
    return all ? moe::moe_backward(state, g, s) : moe::moe_backward_selected(state, g, sel, s);
  });
  return wrap_all(std::move(r.input), std::move(r.logits), std::move(r.gate), std::move(r.up),
                  std::move(r.down));
}

void bind_classes(py::module_& m) {
  const auto none = py::none();
  py::class_<moe::RoutingPlan>(m, "RoutingPlan",
                               "The selection of one batch (rudnn.moe.RoutingPlan wraps it).")
      .def_property_readonly("expert_indices",
                             [](const moe::RoutingPlan& p) { return wrap(p.expert_indices()); })
      .def_property_readonly("weights", [](const moe::RoutingPlan& p) { return wrap(p.weights()); })
      .def_property_readonly("experts", &moe::RoutingPlan::experts)
      .def_property_readonly("tokens", &moe::RoutingPlan::tokens)
      .def_property_readonly("top_k", &moe::RoutingPlan::top_k)
      .def(
          "dispatch",
          [](const moe::RoutingPlan& p, py::object input, py::object stream) {
            const OpArgs a("dispatch", stream);
            Tensor x = a.tensor(input, "input");
            const rudnn::Stream s = a.stream_for(x);
            return without_gil([&] { return p.dispatch(x, s); });
          },
          py::arg("input"), py::kw_only(), py::arg("stream") = none)
      .def(
          "into_training",
          [](const moe::RoutingPlan& p, py::object logits, py::object scoring,
             py::object renormalize, py::object scale, py::object stream) {
            const OpArgs a("into_training", stream);
            Tensor l = a.tensor(logits, "logits");
            const moe::RouterWeightOptions o = weight_options(a, scoring, renormalize, scale);
            const rudnn::Stream s = a.stream_for(l);
            return without_gil([&] { return p.into_training(l, o, s); });
          },
          py::arg("logits"), py::arg("scoring") = "softmax", py::arg("renormalize") = false,
          py::arg("scale") = 1.0, py::kw_only(), py::arg("stream") = none);

  py::class_<moe::DispatchedTokens>(m, "DispatchedTokens",
                                    "Tokens grouped by expert (rudnn.moe.DispatchedTokens).")
      .def_property_readonly("rows", [](const moe::DispatchedTokens& d) { return wrap(d.rows()); })
      .def_property_readonly("offsets",
                             [](const moe::DispatchedTokens& d) { return wrap(d.offsets()); })
      .def_property_readonly("token_of_row",
                             [](const moe::DispatchedTokens& d) { return wrap(d.token_of_row()); })
      .def_property_readonly("row_of_slot",
                             [](const moe::DispatchedTokens& d) { return wrap(d.row_of_slot()); })
      .def_property_readonly("weights",
                             [](const moe::DispatchedTokens& d) { return wrap(d.weights()); })
      .def_property_readonly("expert_indices", [](const moe::DispatchedTokens& d) {
        return wrap(d.expert_indices());
      })
      .def_property_readonly("tokens", &moe::DispatchedTokens::tokens)
      .def_property_readonly("top_k", &moe::DispatchedTokens::top_k)
      .def_property_readonly("experts", &moe::DispatchedTokens::experts)
      .def_property_readonly("hidden", &moe::DispatchedTokens::hidden)
      .def(
          "combine",
          [](const moe::DispatchedTokens& d, py::object expert_out, py::object stream) {
            const OpArgs a("combine", stream);
            Tensor e = a.tensor(expert_out, "expert_out");
            const rudnn::Stream s = a.stream_for(e);
            return wrap(without_gil([&] { return d.combine(e, s); }));
          },
          py::arg("expert_out"), py::kw_only(), py::arg("stream") = none)
      .def(
          "combine_backward",
          [](const moe::DispatchedTokens& d, py::object expert_out, py::object grad_output,
             py::object strategy, py::object stream) {
            const OpArgs a("combine_backward", stream);
            Tensor e = a.tensor(expert_out, "expert_out");
            Tensor g = a.tensor(grad_output, "grad_output");
            const moe::CombineGradientStrategy st = combine_strategy(a, strategy, "strategy");
            const rudnn::Stream s = a.stream_for(e);
            moe::CombineGradients r = without_gil(
                [&] { return d.combine_backward_with_strategy(e, g, st, s); });
            return wrap_all(std::move(r.dexpert), std::move(r.dweights));
          },
          py::arg("expert_out"), py::arg("grad_output"), py::kw_only(),
          py::arg("strategy") = "serial", py::arg("stream") = none)
      .def(
          "dispatch_backward",
          [](const moe::DispatchedTokens& d, py::object drows, py::object stream) {
            const OpArgs a("dispatch_backward", stream);
            Tensor r = a.tensor(drows, "drows");
            const rudnn::Stream s = a.stream_for(r);
            return wrap(without_gil([&] { return d.dispatch_backward(r, s); }));
          },
          py::arg("drows"), py::kw_only(), py::arg("stream") = none);

  py::class_<moe::RouterTrainingPlan>(
      m, "RouterTrainingPlan", "A selection with recomputed weights (rudnn.moe.RouterTrainingPlan).")
      .def_property_readonly("routing", &moe::RouterTrainingPlan::routing)
      .def(
          "backward",
          [](const moe::RouterTrainingPlan& p, py::object grad_weights, py::object stream) {
            const OpArgs a("selected_router_backward", stream);
            Tensor g = a.tensor(grad_weights, "grad_weights");
            const rudnn::Stream s = a.stream_for(g);
            return wrap(without_gil([&] { return p.backward(g, s); }));
          },
          py::arg("grad_weights"), py::kw_only(), py::arg("stream") = none);

  py::class_<moe::ExpertTrainingCache>(
      m, "ExpertTrainingCache", "What the expert backward needs (rudnn.moe.ExpertTrainingCache).")
      .def(
          "backward",
          [](const moe::ExpertTrainingCache& c, py::object dexpert, py::object strategy,
             py::object input, py::object gate, py::object up, py::object down,
             py::object stream) {
            const OpArgs a("ExpertTrainingCache::backward", stream);
            Tensor d = a.tensor(dexpert, "dexpert");
            const moe::GroupedStrategy st = grouped_strategy(a, strategy, "strategy");
            moe::ExpertGradientSelection sel;
            sel.input = rules::flag(a, input, "input");
            sel.gate = rules::flag(a, gate, "gate");
            sel.up = rules::flag(a, up, "up");
            sel.down = rules::flag(a, down, "down");
            const rudnn::Stream s = a.stream_for(d);
            moe::ExpertGradients g =
                without_gil([&] { return c.backward_selected(d, sel, st, s); });
            return wrap_all(std::move(g.dinput), std::move(g.dgate), std::move(g.dup),
                            std::move(g.ddown));
          },
          py::arg("dexpert"), py::kw_only(), py::arg("strategy") = "scalar",
          py::arg("input") = true, py::arg("gate") = true, py::arg("up") = true,
          py::arg("down") = true, py::arg("stream") = none);

  py::class_<moe::SwiGluExperts>(m, "SwiGluExperts", "SwiGLU experts (rudnn.moe.SwiGluExperts).")
      .def(py::init([](py::object gate, py::object up, py::object down) {
             const OpArgs a("SwiGluExperts", py::none());
             Tensor g = a.tensor(gate, "gate");
             Tensor u = a.tensor(up, "up");
             Tensor d = a.tensor(down, "down");
             return moe::SwiGluExperts(g, u, d);
           }),
           py::arg("gate"), py::arg("up"), py::arg("down"))
      .def_property_readonly("experts", &moe::SwiGluExperts::experts)
      .def_property_readonly("inter", &moe::SwiGluExperts::inter)
      .def_property_readonly("hidden", &moe::SwiGluExperts::hidden)
      .def_property_readonly("gate", [](const moe::SwiGluExperts& e) { return wrap(e.gate()); })
      .def_property_readonly("up", [](const moe::SwiGluExperts& e) { return wrap(e.up()); })
      .def_property_readonly("down", [](const moe::SwiGluExperts& e) { return wrap(e.down()); })
      .def(
          "forward_dispatched",
          [](const moe::SwiGluExperts& e, const moe::DispatchedTokens& tokens, py::object strategy,
             py::object stream) {
            const OpArgs a("forward_dispatched", stream);
            const moe::GroupedStrategy st = grouped_strategy(a, strategy, "strategy");
            const rudnn::Stream s = a.stream_for(tokens.rows());
            return wrap(
                without_gil([&] { return e.forward_dispatched_with_strategy(tokens, st, s); }));
          },
          py::arg("tokens"), py::kw_only(), py::arg("strategy") = "auto", py::arg("stream") = none)
      .def(
          "forward_dispatched_training",
          [](const moe::SwiGluExperts& e, const moe::DispatchedTokens& tokens, py::object strategy,
             py::object stream) {
            const OpArgs a("forward_dispatched_training", stream);
            const moe::GroupedStrategy st = grouped_strategy(a, strategy, "strategy");
            const rudnn::Stream s = a.stream_for(tokens.rows());
            moe::ExpertTrainingForward r =
                without_gil([&] { return e.forward_dispatched_training(tokens, st, s); });
            return py::make_tuple(wrap(std::move(r.output)), py::cast(std::move(r.cache)));
          },
          py::arg("tokens"), py::kw_only(), py::arg("strategy") = "scalar",
          py::arg("stream") = none);

  py::class_<moe::ExpertProjectionState>(
      m, "ExpertProjectionState",
      "What expert_projection_backward needs (rudnn.moe.ExpertProjectionState).");

  py::class_<moe::MoeState>(m, "MoeState", "What moe_backward needs (rudnn.moe.MoeState).")
      .def_property_readonly("has_expert_caches", &moe::MoeState::has_expert_caches)
      .def("route_indices", [](const moe::MoeState& s) { return wrap(moe::moe_route_indices(s)); });
}

}  // namespace

void bind_moe(py::module_& m) {
  const auto none = py::none();
  bind_classes(m);
  m.def("moe_route", &route, py::arg("logits"), py::arg("top_k") = 1,
        py::arg("renormalize") = false, py::kw_only(), py::arg("stream") = none,
        py::arg("out") = none);
  m.def("moe_route_sigmoid_grouped", &route_sigmoid_grouped, py::arg("logits"),
        py::arg("bias") = none, py::arg("top_k") = 1, py::arg("groups") = 1,
        py::arg("selected_groups") = 1, py::arg("group_top_two") = false,
        py::arg("renormalize") = false, py::arg("scale") = 1.0, py::kw_only(),
        py::arg("stream") = none, py::arg("out") = none);
  m.def("moe_selected_router_weights", &selected_router_weights, py::arg("logits"),
        py::arg("indices"), py::arg("scoring") = "softmax", py::arg("renormalize") = false,
        py::arg("scale") = 1.0, py::kw_only(), py::arg("stream") = none, py::arg("out") = none);
  m.def("moe_selected_router_backward", &selected_router_backward, py::arg("logits"),
        py::arg("indices"), py::arg("grad_weights"), py::arg("scoring") = "softmax",
        py::arg("renormalize") = false, py::arg("scale") = 1.0, py::kw_only(),
        py::arg("stream") = none, py::arg("out") = none);
  m.def("moe_native_swiglu", &native_swiglu, py::arg("gate"), py::arg("up"), py::kw_only(),
        py::arg("stream") = none, py::arg("out") = none);
  m.def("moe_native_swiglu_backward", &native_swiglu_backward, py::arg("gate"), py::arg("up"),
        py::arg("grad"), py::kw_only(), py::arg("gate_grad") = true, py::arg("up_grad") = true,
        py::arg("stream") = none, py::arg("out") = none);
  m.def("moe_expert_projection_forward", &expert_projection_forward, py::arg("input"),
        py::arg("global_ids"), py::arg("weights"), py::kw_only(), py::arg("expert_start") = 0,
        py::arg("forward") = "scalar", py::arg("backward") = "scalar", py::arg("stream") = none);
  m.def("moe_expert_projection_backward", &expert_projection_backward, py::arg("state"),
        py::arg("grad"), py::kw_only(), py::arg("input_grad") = true,
        py::arg("weights_grad") = true, py::arg("stream") = none);
  m.def("moe_forward", &moe_forward, py::arg("input"), py::arg("logits"), py::arg("gate"),
        py::arg("up"), py::arg("down"), py::kw_only(), py::arg("bias") = none,
        py::arg("grads") = none, py::arg("stream") = none);
  m.def("moe_inference", &moe_inference, py::arg("input"), py::arg("logits"), py::arg("gate"),
        py::arg("up"), py::arg("down"), py::kw_only(), py::arg("bias") = none,
        py::arg("stream") = none);
  m.def("moe_backward", &moe_backward, py::arg("state"), py::arg("grad_output"), py::kw_only(),
        py::arg("grads") = none, py::arg("stream") = none);
}

}  // namespace rudnn_py
