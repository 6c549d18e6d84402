// The interop unit of rudnn._rudnn: what every family's bindings share.
//
// - OpArgs turns one op call's Python arguments into C++ ones: tensors through DLPack (or the
//   buffer protocol for host memory), outputs written in place, eps-like floats, ignore_index,
//   the stream. Every refusal is a rudnn::Error that names the op and the argument, so it
//   reaches Python as a rudnn.Error subclass.
// - without_gil / wrap: run an op with the GIL released; return its Tensors to Python.
// - bind_core: the exceptions (rudnn.Error and subclasses), library facts, the Tensor class
//   (DLPack export, buffer protocol) and from_dlpack.
//
// A family's bindings (bind_<family>.cpp) use only this header; see bind_normalization.cpp.
#pragma once

#include <pybind11/pybind11.h>

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <utility>
#include <vector>

#include "rudnn/rudnn.h"

namespace rudnn_py {

namespace py = pybind11;

// torch's current stream on one CUDA device, as the package's Python layer (io.context) passes
// it when a call on torch CUDA tensors names no stream: the op then runs on the stream torch
// queued those tensors' work on, so a torch tensor of that device is exported without stream
// work (DLPack: the consumer orders the work itself). A plain torch.Tensor goes through
// torch.utils.dlpack.to_dlpack (one C call, ~0.3 us on the device's host); subclasses through
// their __dlpack__(stream=-1), whose checks and stream handling run in Python (~2.4 us; with
// an int handle, torch also builds stream objects to compare the two streams). Not public
// API (rudnn._rudnn._TorchCurrentStream).
struct TorchCurrentStream {
  std::uintptr_t handle = 0;  // cudaStream_t
  int device = 0;             // CUDA device index
  py::object tensor_type;     // torch.Tensor
  py::object to_dlpack;       // torch.utils.dlpack.to_dlpack, or None
};

// The Python arguments of one op call, converted on demand. `op` names the op in every error.
class OpArgs {
 public:
  // stream: None/0 (the current stream), an int (a cudaStream_t address), an object with a
  // `cuda_stream` attribute, or a TorchCurrentStream.
  OpArgs(const char* op, py::handle stream);

  // A required input: None is refused ("<op>: <arg> is None; expected a tensor").
  rudnn::Tensor tensor(py::handle obj, const char* arg) const;
  // An optional input (gamma, beta): None gives an undefined Tensor.
  rudnn::Tensor optional_tensor(py::handle obj, const char* arg) const;
  // An output the op writes in place: imported writable and zero-copy, or refused (read-only,
  // negative strides); never copied.
  rudnn::Tensor output(py::handle obj, const char* arg) const;
  // The `out` tuple of a multi-output op, one name per element; None elements give undefined
  // Tensors (an output the op does not produce, e.g. dgamma without gamma).
  std::vector<rudnn::Tensor> outputs(py::handle out, std::initializer_list<const char*> args) const;

  // A Python number for a float32 parameter (eps): bool refused, and a value float32 cannot
  // hold (1e-60, 1e300) refused with the value given rather than its rounding (0, inf).
  float float32(py::handle value, const char* arg) const;
  // An optional integer (ignore_index): None gives nullopt; bool refused.
  std::optional<int64_t> optional_int(py::handle value, const char* arg) const;
  // Whether a grad_scale-like argument is a Python scalar (int, float, bool: float32 then
  // refuses a bool) rather than an array.
  static bool is_scalar(py::handle value);

  // The stream the op runs on: the current one for 0 and for CPU operands (a CPU op runs
  // inline), else the caller's CUDA stream on `first`'s device.
  rudnn::Stream stream_for(const rudnn::Tensor& first) const;

  const char* op() const { return op_; }

 private:
  rudnn::Tensor import(py::handle obj, const char* arg, bool writable) const;

  const char* op_;
  const TorchCurrentStream* torch_;  // the stream argument, when it is one (else null)
  std::uintptr_t stream_;
};

// Runs f with the GIL released (the ops run on the C++ side only) and returns its result.
template <class F>
decltype(auto) without_gil(F&& f) {
  py::gil_scoped_release release;
  return f();
}

// A result Tensor as a Python object (None for an undefined one, e.g. dgamma without gamma).
py::object wrap(rudnn::Tensor t);

template <class... T>
py::tuple wrap_all(T&&... tensors) {
  return py::make_tuple(wrap(std::forward<T>(tensors))...);
}

// Exceptions, library facts, Tensor, from_dlpack.
void bind_core(py::module_& m);

}  // namespace rudnn_py
