// Conversions of the non-tensor arguments that the pooling, grid_sample, gated_delta, ctc,
// attention, interpolation, conv and moe bindings share: bools, ints, int lists (torch's "an
// int or one per spatial axis"), shapes, option names, and the dtype and device of the plan
// functions. Every refusal is a rudnn::Error (InvalidArgument) naming the op
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

// A dtype name ("float32", "float16", "bfloat16", "float64"), a torch dtype or a numpy dtype
// (plan functions: the dtype a call would run in).
inline rudnn::DType float_dtype(const OpArgs& a, py::handle value, const char* arg) {
  std::string name = py::hasattr(value, "__name__") ? py::str(value.attr("__name__"))
                                                    : py::str(value);
  if (name.rfind("torch.", 0) == 0) name.erase(0, 6);
  static const std::pair<const char*, rudnn::DType> kNames[] = {
      {"float32", rudnn::DType::f32}, {"float16", rudnn::DType::f16},
      {"bfloat16", rudnn::DType::bf16}, {"float64", rudnn::DType::f64}};
  for (const auto& [n, d] : kNames) {
    if (name == n) return d;
  }
  refuse(a, arg, "must be 'float32', 'float16', 'bfloat16' or 'float64', got " + repr_of(value));
}

// A device: None (CUDA device 0), an int (a CUDA index), "cpu", "cuda" or "cuda:<index>".
inline rudnn::Device device(const OpArgs& a, py::handle value, const char* arg) {
  if (value.is_none()) return rudnn::Device::cuda(0);
  if (PyIndex_Check(value.ptr()) && !PyBool_Check(value.ptr())) {
    return rudnn::Device::cuda(static_cast<int>(integer(a, value, arg)));
  }
  const std::string s = py::str(value);
  if (s == "cpu") return rudnn::Device::cpu();
  if (s == "cuda") return rudnn::Device::cuda(0);
  const bool digits = s.size() > 5 && s.size() < 9 &&
                      s.find_first_not_of("0123456789", 5) == std::string::npos;
  if (s.rfind("cuda:", 0) == 0 && digits) return rudnn::Device::cuda(std::stoi(s.substr(5)));
  refuse(a, arg, "must be 'cpu', 'cuda', 'cuda:<index>' or an int, got " + repr_of(value));
}

}  // namespace rudnn_py::rules
