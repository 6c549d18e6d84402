// Conversions of the non-tensor arguments that the pooling, grid_sample, gated_delta, ctc and
// attention bindings share: bools, ints, int lists (torch's "an int or one per spatial axis"),
// shapes and option names. Every refusal is a rudnn::Error (InvalidArgument) naming the op
// and the argument, so that it reaches Python as rudnn.InvalidArgument (a ValueError), as
// the ops' own checks do. OpArgs (interop.h) converts the tensors, floats and optional ints.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "interop.h"

namespace rudnn_py::rules {

[[noreturn]] inline void refuse(const OpArgs& a, const std::string& arg, const std::string& rule) {
  throw rudnn::Error(rudnn::ErrorCode::InvalidArgument,
                     std::string(a.op()) + ": " + arg + " " + rule);
}

inline std::string type_name(py::handle obj) {
  return py::str(py::type::handle_of(obj).attr("__qualname__"));
}

inline std::string repr_of(py::handle obj) { return py::repr(obj).cast<std::string>(); }

// A Python (or numpy) bool; an int or anything else is refused rather than read as truth
// (ceil_mode=1 is more likely a misplaced argument than a wish).
inline bool flag(const OpArgs& a, py::handle value, const char* arg) {
  const std::string name = Py_TYPE(value.ptr())->tp_name;
  if (PyBool_Check(value.ptr()) || name == "numpy.bool_" || name == "numpy.bool") {
    return PyObject_IsTrue(value.ptr()) == 1;
  }
  refuse(a, arg, "must be a bool, got " + type_name(value));
}

// An int (not a bool); None gives `fallback`, or is refused when there is none.
inline int64_t integer(const OpArgs& a, py::handle value, const char* arg,
                       std::optional<int64_t> fallback = std::nullopt) {
  const std::optional<int64_t> v = a.optional_int(value, arg);
  if (v) return *v;
  if (!fallback) refuse(a, arg, "is None; expected an int");
  return *fallback;
}

// A Python number as a double (norm_type): bool refused, NaN and infinities passed to the op.
inline double number(const OpArgs& a, py::handle value, const char* arg) {
  const std::string name = Py_TYPE(value.ptr())->tp_name;
  if (PyBool_Check(value.ptr()) || name == "numpy.bool_" || name == "numpy.bool") {
    refuse(a, arg, "must be a number, got " + type_name(value));
  }
  // PyNumber_Check first: PyNumber_Float would also parse a string ("2").
  PyObject* as_float = PyNumber_Check(value.ptr()) ? PyNumber_Float(value.ptr()) : nullptr;
  if (as_float == nullptr) {
    PyErr_Clear();
    refuse(a, arg, "must be a number, got " + type_name(value));
  }
  const double v = PyFloat_AS_DOUBLE(as_float);
  Py_DECREF(as_float);
  return v;
}

// torch's spatial-option spelling: None (an empty list: the op's default), one int for every
// spatial axis, or a sequence of ints (its length is the op's to check).
inline std::vector<int64_t> int_list(const OpArgs& a, py::handle value, const char* arg,
                                     int64_t rank) {
  if (value.is_none()) return {};
  if (PyIndex_Check(value.ptr())) {
    return std::vector<int64_t>(static_cast<size_t>(rank > 0 ? rank : 0), integer(a, value, arg));
  }
  if (!py::isinstance<py::sequence>(value) || py::isinstance<py::str>(value)) {
    refuse(a, arg, "must be an int or a sequence of ints, got " + type_name(value));
  }
  std::vector<int64_t> out;
  const std::string item_name = std::string(arg) + " element";
  for (py::handle item : py::reinterpret_borrow<py::sequence>(value)) {
    out.push_back(integer(a, item, item_name.c_str()));
  }
  return out;
}

// A shape (affine_grid's size): a sequence of ints, e.g. a tuple or torch.Size.
inline rudnn::Shape shape(const OpArgs& a, py::handle value, const char* arg) {
  if (value.is_none() || PyIndex_Check(value.ptr()) || py::isinstance<py::str>(value) ||
      !py::isinstance<py::sequence>(value)) {
    refuse(a, arg, "must be a sequence of ints, got " + type_name(value));
  }
  return int_list(a, value, arg, 0);
}

// One of a fixed set of option names (mode="bilinear", reduction="mean"), as its enum.
template <class E>
E choice(const OpArgs& a, py::handle value, const char* arg,
         std::initializer_list<std::pair<const char*, E>> names) {
  std::string allowed;
  if (py::isinstance<py::str>(value)) {
    const std::string s = value.cast<std::string>();
    for (const auto& [name, e] : names) {
      if (s == name) return e;
    }
  }
  for (const auto& [name, e] : names) {
    allowed += (allowed.empty() ? "'" : ", '") + std::string(name) + "'";
  }
  refuse(a, arg, "must be one of " + allowed + ", got " + repr_of(value));
}

}  // namespace rudnn_py::rules
