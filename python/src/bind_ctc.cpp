// The CTC family (rudnn/ctc.h): ctc_loss and ctc_loss_backward, the _into forms through
// `out=`, and ctc_loss_check (the host rules for host lengths). Options take torch's names (blank, reduction "none" / "mean" / "sum",
// zero_infinity). The documented Python functions are in python/rudnn/ctc.py.
#include "arg_rules.h"
#include "bind_families.h"
#include "interop.h"

namespace rudnn_py {

namespace {

using rudnn::CtcReduction;
using rudnn::Tensor;

struct CtcOperands {
  Tensor log_probs, targets, input_lengths, target_lengths;
};

CtcOperands ctc_operands(const OpArgs& a, py::handle log_probs, py::handle targets,
                         py::handle input_lengths, py::handle target_lengths) {
  return {a.tensor(log_probs, "log_probs"), a.tensor(targets, "targets"),
          a.tensor(input_lengths, "input_lengths"), a.tensor(target_lengths, "target_lengths")};
}

rudnn::CtcLossOptions ctc_options(const OpArgs& a, py::handle blank, py::handle reduction,
                                  py::handle zero_infinity) {
  rudnn::CtcLossOptions o;
  o.blank = rules::integer(a, blank, "blank");
  o.reduction = rules::choice<CtcReduction>(
      a, reduction, "reduction",
      {{"none", CtcReduction::none}, {"mean", CtcReduction::mean}, {"sum", CtcReduction::sum}});
  o.zero_infinity = rules::flag(a, zero_infinity, "zero_infinity");
  return o;
}

py::object ctc_loss(py::object log_probs, py::object targets, py::object input_lengths,
                    py::object target_lengths, py::object blank, py::object reduction,
                    py::object zero_infinity, py::object stream, py::object out) {
  const OpArgs a("ctc_loss", stream);
  const CtcOperands t = ctc_operands(a, log_probs, targets, input_lengths, target_lengths);
  const rudnn::CtcLossOptions o = ctc_options(a, blank, reduction, zero_infinity);
  const rudnn::Stream s = a.stream_for(t.log_probs);
  if (out.is_none()) {
    return wrap(without_gil([&] {
      return rudnn::ctc_loss(t.log_probs, t.targets, t.input_lengths, t.target_lengths, o, s);
    }));
  }
  Tensor to = a.output(out, "out");
  without_gil([&] {
    rudnn::ctc_loss_into(to, t.log_probs, t.targets, t.input_lengths, t.target_lengths, o, s);
  });
  return out;
}

py::object ctc_loss_backward(py::object log_probs, py::object targets, py::object input_lengths,
                             py::object target_lengths, py::object grad_loss, py::object blank,
                             py::object reduction, py::object zero_infinity, py::object stream,
                             py::object out) {
  const OpArgs a("ctc_loss_backward", stream);
  const CtcOperands t = ctc_operands(a, log_probs, targets, input_lengths, target_lengths);
  Tensor g = a.tensor(grad_loss, "grad_loss");
  const rudnn::CtcLossOptions o = ctc_options(a, blank, reduction, zero_infinity);
  const rudnn::Stream s = a.stream_for(t.log_probs);
  if (out.is_none()) {
    return wrap(without_gil([&] {
      return rudnn::ctc_loss_backward(t.log_probs, t.targets, t.input_lengths, t.target_lengths,
                                      g, o, s);
    }));
  }
  Tensor to = a.output(out, "out");
  without_gil([&] {
    rudnn::ctc_loss_backward_into(to, t.log_probs, t.targets, t.input_lengths, t.target_lengths,
                                  g, o, s);
  });
  return out;
}

void ctc_loss_check(py::object log_probs_shape, py::object targets, py::object input_lengths,
                    py::object target_lengths, py::object blank) {
  const OpArgs a("ctc_loss_check", py::none());
  const rudnn::Shape shape = rules::shape(a, log_probs_shape, "log_probs_shape");
  const Tensor tg = a.tensor(targets, "targets"), il = a.tensor(input_lengths, "input_lengths"),
               tl = a.tensor(target_lengths, "target_lengths");
  rudnn::CtcLossOptions o;
  o.blank = rules::integer(a, blank, "blank");
  without_gil([&] { rudnn::ctc_loss_check(shape, tg, il, tl, o); });
}

}  // namespace

void bind_ctc(py::module_& m) {
  const auto none = py::none();
  m.def("ctc_loss", &ctc_loss, py::arg("log_probs"), py::arg("targets"), py::arg("input_lengths"),
        py::arg("target_lengths"), py::arg("blank") = 0, py::arg("reduction") = "mean",
        py::arg("zero_infinity") = false, py::kw_only(), py::arg("stream") = none,
        py::arg("out") = none);
  m.def("ctc_loss_backward", &ctc_loss_backward, py::arg("log_probs"), py::arg("targets"),
        py::arg("input_lengths"), py::arg("target_lengths"), py::arg("grad_loss"),
        py::arg("blank") = 0, py::arg("reduction") = "mean", py::arg("zero_infinity") = false,
        py::kw_only(), py::arg("stream") = none, py::arg("out") = none);
  m.def("ctc_loss_check", &ctc_loss_check, py::arg("log_probs_shape"), py::arg("targets"),
        py::arg("input_lengths"), py::arg("target_lengths"), py::arg("blank") = 0);
}

}  // namespace rudnn_py
