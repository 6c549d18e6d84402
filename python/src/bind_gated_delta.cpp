// The gated delta family (rudnn/gated_delta.h): gated_delta, gated_delta_steps and
// gated_delta_slots (spec 003's layout) with their chunked prefill chunk_gated_delta /
// chunk_gated_delta_slots, gated_delta_rule (spec 000's; with `chunk_size` the
// chunked prefill chunk_gated_delta_rule), each dense or, with `cu_seqlens`, over packed
// variable-length sequences (the *_varlen C++ functions), and the
// backward passes gated_delta_backward / gated_delta_rule_backward (with `chunk_size`,
// chunk_gated_delta_rule_backward). The _into forms are
// reached through `out=`; gated_delta_slots writes its state pool in place (imported
// writable: a read-only pool is refused, never copied). The documented Python functions are
// in python/rudnn/gated_delta.py.
#include <optional>
#include <utility>
#include <vector>

#include "arg_rules.h"
#include "bind_families.h"
#include "interop.h"

namespace rudnn_py {

namespace {

using rudnn::Tensor;

struct Operands {
  Tensor q, k, v, g, beta;
};

Operands operands(const OpArgs& a, py::handle q, py::handle k, py::handle v, py::handle g,
                  py::handle beta) {
  return {a.tensor(q, "q"), a.tensor(k, "k"), a.tensor(v, "v"), a.tensor(g, "g"),
          a.tensor(beta, "beta")};
}

rudnn::GatedDeltaInput rule_input(const OpArgs& a, py::handle query, py::handle key,
                                  py::handle value, py::handle beta, py::handle log_decay,
                                  py::handle initial_state, py::handle query_scale) {
  rudnn::GatedDeltaInput in;
  in.query = a.tensor(query, "query");
  in.key = a.tensor(key, "key");
  in.value = a.tensor(value, "value");
  in.beta = a.tensor(beta, "beta");
  in.log_decay = a.tensor(log_decay, "log_decay");
  in.initial_state = a.tensor(initial_state, "initial_state");
  in.query_scale = a.float32(query_scale, "query_scale");
  return in;
}

py::object gated_delta(py::object q, py::object k, py::object v, py::object g, py::object beta,
                       py::object state, py::object cu_seqlens, py::object stream,
                       py::object out) {
  const OpArgs a("gated_delta", stream);
  const Operands t = operands(a, q, k, v, g, beta);
  Tensor st = a.tensor(state, "state");
  Tensor cu = a.optional_tensor(cu_seqlens, "cu_seqlens");
  const rudnn::Stream s = a.stream_for(t.q);
  const bool varlen = cu.defined();
  if (out.is_none()) {
    rudnn::GatedDeltaResult r = without_gil([&] {
      return varlen ? rudnn::gated_delta_varlen(t.q, t.k, t.v, t.g, t.beta, st, cu, s)
                    : rudnn::gated_delta(t.q, t.k, t.v, t.g, t.beta, st, s);
    });
    return wrap_all(std::move(r.y), std::move(r.state));
  }
  auto o = a.outputs(out, {"out[0] (y)", "out[1] (state)"});
  without_gil([&] {
    if (varlen) {
      rudnn::gated_delta_varlen_into(o[0], o[1], t.q, t.k, t.v, t.g, t.beta, st, cu, s);
    } else {
      rudnn::gated_delta_into(o[0], o[1], t.q, t.k, t.v, t.g, t.beta, st, s);
    }
  });
  return out;
}

py::object gated_delta_steps(py::object q, py::object k, py::object v, py::object g,
                             py::object beta, py::object state, py::object cu_seqlens,
                             py::object stream, py::object out) {
  const OpArgs a("gated_delta_steps", stream);
  const Operands t = operands(a, q, k, v, g, beta);
  Tensor st = a.tensor(state, "state");
  Tensor cu = a.optional_tensor(cu_seqlens, "cu_seqlens");
  const rudnn::Stream s = a.stream_for(t.q);
  const bool varlen = cu.defined();
  if (out.is_none()) {
    rudnn::GatedDeltaResult r = without_gil([&] {
      return varlen ? rudnn::gated_delta_steps_varlen(t.q, t.k, t.v, t.g, t.beta, st, cu, s)
                    : rudnn::gated_delta_steps(t.q, t.k, t.v, t.g, t.beta, st, s);
    });
    return wrap_all(std::move(r.y), std::move(r.state));
  }
  auto o = a.outputs(out, {"out[0] (y)", "out[1] (states)"});
  without_gil([&] {
    if (varlen) {
      rudnn::gated_delta_steps_varlen_into(o[0], o[1], t.q, t.k, t.v, t.g, t.beta, st, cu, s);
    } else {
      rudnn::gated_delta_steps_into(o[0], o[1], t.q, t.k, t.v, t.g, t.beta, st, s);
    }
  });
  return out;
}

py::object gated_delta_slots(py::object q, py::object k, py::object v, py::object g,
                             py::object beta, py::object pool, py::object slots,
                             py::object cu_seqlens, py::object stream, py::object out) {
  const OpArgs a("gated_delta_slots", stream);
  const Operands t = operands(a, q, k, v, g, beta);
  Tensor tp = a.output(pool, "pool");
  Tensor ts = a.tensor(slots, "slots");
  Tensor cu = a.optional_tensor(cu_seqlens, "cu_seqlens");
  const rudnn::Stream s = a.stream_for(t.q);
  const bool varlen = cu.defined();
  if (out.is_none()) {
    return wrap(without_gil([&] {
      return varlen ? rudnn::gated_delta_slots_varlen(t.q, t.k, t.v, t.g, t.beta, tp, ts, cu, s)
                    : rudnn::gated_delta_slots(t.q, t.k, t.v, t.g, t.beta, tp, ts, s);
    }));
  }
  Tensor y = a.output(out, "out");
  without_gil([&] {
    if (varlen) {
      rudnn::gated_delta_slots_varlen_into(y, t.q, t.k, t.v, t.g, t.beta, tp, ts, cu, s);
    } else {
      rudnn::gated_delta_slots_into(y, t.q, t.k, t.v, t.g, t.beta, tp, ts, s);
    }
  });
  return out;
}

// Spec 003's chunked prefill (chunk_gated_delta / chunk_gated_delta_varlen): gated_delta's
// operands plus chunk_size, whose rule the C++ op checks after the shapes.
py::object chunk_gated_delta(py::object q, py::object k, py::object v, py::object g,
                             py::object beta, py::object state, py::object chunk_size,
                             py::object cu_seqlens, py::object stream, py::object out) {
  const OpArgs a("chunk_gated_delta", stream);
  const Operands t = operands(a, q, k, v, g, beta);
  Tensor st = a.tensor(state, "state");
  const int64_t chunk = rules::integer(a, chunk_size, "chunk_size");
  Tensor cu = a.optional_tensor(cu_seqlens, "cu_seqlens");
  const rudnn::Stream s = a.stream_for(t.q);
  const bool varlen = cu.defined();
  if (out.is_none()) {
    rudnn::GatedDeltaResult r = without_gil([&] {
      return varlen
                 ? rudnn::chunk_gated_delta_varlen(t.q, t.k, t.v, t.g, t.beta, st, cu, chunk, s)
                 : rudnn::chunk_gated_delta(t.q, t.k, t.v, t.g, t.beta, st, chunk, s);
    });
    return wrap_all(std::move(r.y), std::move(r.state));
  }
  auto o = a.outputs(out, {"out[0] (y)", "out[1] (state)"});
  without_gil([&] {
    if (varlen) {
      rudnn::chunk_gated_delta_varlen_into(o[0], o[1], t.q, t.k, t.v, t.g, t.beta, st, cu, chunk,
                                           s);
    } else {
      rudnn::chunk_gated_delta_into(o[0], o[1], t.q, t.k, t.v, t.g, t.beta, st, chunk, s);
    }
  });
  return out;
}

py::object chunk_gated_delta_slots(py::object q, py::object k, py::object v, py::object g,
                                   py::object beta, py::object pool, py::object slots,
                                   py::object chunk_size, py::object cu_seqlens,
                                   py::object stream, py::object out) {
  const OpArgs a("chunk_gated_delta_slots", stream);
  const Operands t = operands(a, q, k, v, g, beta);
  Tensor tp = a.output(pool, "pool");
  Tensor ts = a.tensor(slots, "slots");
  const int64_t chunk = rules::integer(a, chunk_size, "chunk_size");
  Tensor cu = a.optional_tensor(cu_seqlens, "cu_seqlens");
  const rudnn::Stream s = a.stream_for(t.q);
  const bool varlen = cu.defined();
  if (out.is_none()) {
    return wrap(without_gil([&] {
      return varlen ? rudnn::chunk_gated_delta_slots_varlen(t.q, t.k, t.v, t.g, t.beta, tp, ts,
                                                            cu, chunk, s)
                    : rudnn::chunk_gated_delta_slots(t.q, t.k, t.v, t.g, t.beta, tp, ts, chunk, s);
    }));
  }
  Tensor y = a.output(out, "out");
  without_gil([&] {
    if (varlen) {
      rudnn::chunk_gated_delta_slots_varlen_into(y, t.q, t.k, t.v, t.g, t.beta, tp, ts, cu, chunk,
                                                 s);
    } else {
      rudnn::chunk_gated_delta_slots_into(y, t.q, t.k, t.v, t.g, t.beta, tp, ts, chunk, s);
    }
  });
  return out;
}

py::object gated_delta_rule(py::object query, py::object key, py::object value, py::object beta,
                            py::object log_decay, py::object initial_state,
                            py::object query_scale, py::object cu_seqlens, py::object chunk_size,
                            py::object stream, py::object out) {
  const OpArgs a("gated_delta_rule", stream);
  const rudnn::GatedDeltaInput in =
      rule_input(a, query, key, value, beta, log_decay, initial_state, query_scale);
  Tensor cu = a.optional_tensor(cu_seqlens, "cu_seqlens");
  // None: the recurrence; an integer: the chunked prefill (its C++ entry points check it).
  const std::optional<int64_t> chunk = a.optional_int(chunk_size, "chunk_size");
  const rudnn::Stream s = a.stream_for(in.query);
  const bool varlen = cu.defined();
  if (out.is_none()) {
    rudnn::GatedDeltaOutput r = without_gil([&] {
      if (chunk) {
        return varlen ? rudnn::chunk_gated_delta_rule_varlen(in, cu, *chunk, s)
                      : rudnn::chunk_gated_delta_rule(in, *chunk, s);
      }
      return varlen ? rudnn::gated_delta_rule_varlen(in, cu, s) : rudnn::gated_delta_rule(in, s);
    });
    return wrap_all(std::move(r.output), std::move(r.final_state));
  }
  auto o = a.outputs(out, {"out[0] (output)", "out[1] (final_state)"});
  without_gil([&] {
    if (chunk && varlen) {
      rudnn::chunk_gated_delta_rule_varlen_into(o[0], o[1], in, cu, *chunk, s);
    } else if (chunk) {
      rudnn::chunk_gated_delta_rule_into(o[0], o[1], in, *chunk, s);
    } else if (varlen) {
      rudnn::gated_delta_rule_varlen_into(o[0], o[1], in, cu, s);
    } else {
      rudnn::gated_delta_rule_into(o[0], o[1], in, s);
    }
  });
  return out;
}

// out: six arrays (None for a gradient not wanted is the C++ op's to accept or refuse).
py::object gated_delta_backward(py::object dy, py::object dstate, py::object q, py::object k,
                                py::object v, py::object g, py::object beta, py::object state,
                                py::object cu_seqlens, py::object stream, py::object out) {
  const OpArgs a("gated_delta_backward", stream);
  Tensor tdy = a.tensor(dy, "dy");
  Tensor tds = a.optional_tensor(dstate, "dstate");
  const Operands t = operands(a, q, k, v, g, beta);
  Tensor st = a.tensor(state, "state");
  Tensor cu = a.optional_tensor(cu_seqlens, "cu_seqlens");
  const rudnn::Stream s = a.stream_for(t.q);
  if (out.is_none()) {
    rudnn::GatedDeltaGrads r = without_gil([&] {
      return rudnn::gated_delta_backward(tdy, tds, t.q, t.k, t.v, t.g, t.beta, st, cu, s);
    });
    return wrap_all(std::move(r.dq), std::move(r.dk), std::move(r.dv), std::move(r.dg),
                    std::move(r.dbeta), std::move(r.dstate));
  }
  auto o = a.outputs(out, {"out[0] (dq)", "out[1] (dk)", "out[2] (dv)", "out[3] (dg)",
                           "out[4] (dbeta)", "out[5] (dstate)"});
  const rudnn::GatedDeltaGrads grads{o[0], o[1], o[2], o[3], o[4], o[5]};
  without_gil([&] {
    rudnn::gated_delta_backward_into(grads, tdy, tds, t.q, t.k, t.v, t.g, t.beta, st, cu, s);
  });
  return out;
}

py::object gated_delta_rule_backward(py::object doutput, py::object dfinal_state,
                                     py::object query, py::object key, py::object value,
                                     py::object beta, py::object log_decay,
                                     py::object initial_state, py::object query_scale,
                                     py::object cu_seqlens, py::object chunk_size,
                                     py::object stream, py::object out) {
  const OpArgs a("gated_delta_rule_backward", stream);
  Tensor tdo = a.tensor(doutput, "doutput");
  Tensor tdf = a.optional_tensor(dfinal_state, "dfinal_state");
  const rudnn::GatedDeltaInput in =
      rule_input(a, query, key, value, beta, log_decay, initial_state, query_scale);
  Tensor cu = a.optional_tensor(cu_seqlens, "cu_seqlens");
  // None: the recurrence's backward; an integer: the chunked form's (as gated_delta_rule).
  const std::optional<int64_t> chunk = a.optional_int(chunk_size, "chunk_size");
  const rudnn::Stream s = a.stream_for(in.query);
  if (out.is_none()) {
    rudnn::GatedDeltaInputGrads r = without_gil([&] {
      return chunk ? rudnn::chunk_gated_delta_rule_backward(tdo, tdf, in, *chunk, cu, s)
                   : rudnn::gated_delta_rule_backward(tdo, tdf, in, cu, s);
    });
    return wrap_all(std::move(r.dquery), std::move(r.dkey), std::move(r.dvalue),
                    std::move(r.dbeta), std::move(r.dlog_decay), std::move(r.dinitial_state));
  }
  auto o = a.outputs(out, {"out[0] (dquery)", "out[1] (dkey)", "out[2] (dvalue)",
                           "out[3] (dbeta)", "out[4] (dlog_decay)", "out[5] (dinitial_state)"});
  const rudnn::GatedDeltaInputGrads grads{o[0], o[1], o[2], o[3], o[4], o[5]};
  without_gil([&] {
    if (chunk)
      rudnn::chunk_gated_delta_rule_backward_into(grads, tdo, tdf, in, *chunk, cu, s);
    else
      rudnn::gated_delta_rule_backward_into(grads, tdo, tdf, in, cu, s);
  });
  return out;
}

}  // namespace

void bind_gated_delta(py::module_& m) {
  const auto none = py::none();
  m.def("gated_delta", &gated_delta, py::arg("q"), py::arg("k"), py::arg("v"), py::arg("g"),
        py::arg("beta"), py::arg("state"), py::kw_only(), py::arg("cu_seqlens") = none,
        py::arg("stream") = none, py::arg("out") = none);
  m.def("gated_delta_steps", &gated_delta_steps, py::arg("q"), py::arg("k"), py::arg("v"),
        py::arg("g"), py::arg("beta"), py::arg("state"), py::kw_only(),
        py::arg("cu_seqlens") = none, py::arg("stream") = none, py::arg("out") = none);
  m.def("gated_delta_slots", &gated_delta_slots, py::arg("q"), py::arg("k"), py::arg("v"),
        py::arg("g"), py::arg("beta"), py::arg("pool"), py::arg("slots"), py::kw_only(),
        py::arg("cu_seqlens") = none, py::arg("stream") = none, py::arg("out") = none);
  m.def("chunk_gated_delta", &chunk_gated_delta, py::arg("q"), py::arg("k"), py::arg("v"),
        py::arg("g"), py::arg("beta"), py::arg("state"), py::arg("chunk_size") = 64,
        py::kw_only(), py::arg("cu_seqlens") = none, py::arg("stream") = none,
        py::arg("out") = none);
  m.def("chunk_gated_delta_slots", &chunk_gated_delta_slots, py::arg("q"), py::arg("k"),
        py::arg("v"), py::arg("g"), py::arg("beta"), py::arg("pool"), py::arg("slots"),
        py::arg("chunk_size") = 64, py::kw_only(), py::arg("cu_seqlens") = none,
        py::arg("stream") = none, py::arg("out") = none);
  m.def("gated_delta_rule", &gated_delta_rule, py::arg("query"), py::arg("key"), py::arg("value"),
        py::arg("beta"), py::arg("log_decay"), py::arg("initial_state"),
        py::arg("query_scale") = 1.0, py::kw_only(), py::arg("cu_seqlens") = none,
        py::arg("chunk_size") = none, py::arg("stream") = none, py::arg("out") = none);
  m.def("gated_delta_backward", &gated_delta_backward, py::arg("dy"), py::arg("dstate"),
        py::arg("q"), py::arg("k"), py::arg("v"), py::arg("g"), py::arg("beta"), py::arg("state"),
        py::kw_only(), py::arg("cu_seqlens") = none, py::arg("stream") = none,
        py::arg("out") = none);
  m.def("gated_delta_rule_backward", &gated_delta_rule_backward, py::arg("doutput"),
        py::arg("dfinal_state"), py::arg("query"), py::arg("key"), py::arg("value"),
        py::arg("beta"), py::arg("log_decay"), py::arg("initial_state"),
        py::arg("query_scale") = 1.0, py::kw_only(), py::arg("cu_seqlens") = none,
        py::arg("chunk_size") = none, py::arg("stream") = none, py::arg("out") = none);
}

}  // namespace rudnn_py
