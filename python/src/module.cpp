// rudnn._rudnn: the pybind11 binding of ruDNN.
//
// - Tensor: a rudnn::Tensor handle that speaks DLPack (__dlpack__ / __dlpack_device__) and,
//   on the CPU, the buffer protocol. Not constructible from Python: ops return it.
// - from_dlpack(obj): zero-copy import of any DLPack producer (torch, numpy, cupy, jax, a
//   rudnn Tensor), with a buffer-protocol fallback for read-only host arrays.
// - One function per op of rudnn/normalization.h (the _into forms through `out=`). Every
//   op takes DLPack-capable inputs and `stream` (a cudaStream_t address as an int, an
//   object with a `cuda_stream` attribute, or None/0 for the current stream), releases the
//   GIL while the op runs, and returns rudnn Tensors (or the `out` objects it was given).
// - rudnn.Error and its subclasses: every rudnn::Error becomes one of them, carrying the
//   C++ message; each subclass also derives from the matching builtin exception.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <dlpack/dlpack.h>

#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "rudnn/rudnn.h"

namespace py = pybind11;

namespace {

using rudnn::Device;
using rudnn::DType;
using rudnn::ErrorCode;
using rudnn::Tensor;

constexpr const char* kCapsuleName = "dltensor";
constexpr const char* kUsedCapsuleName = "used_dltensor";
constexpr const char* kVersionedCapsuleName = "dltensor_versioned";

// DLPack device codes (DLPack 0.6 names kDLCUDAManaged 13; spelled out for older headers).
constexpr int kDevCPU = 1;
constexpr int kDevCUDA = 2;
constexpr int kDevCUDAHost = 3;
constexpr int kDevCUDAManaged = 13;

// The DLPack stream value of CUDA's legacy default stream (also the handle cudaStreamLegacy).
constexpr std::uintptr_t kLegacyStream = 1;

// Saves and restores the Python error indicator around code that may run while an
// exception is being raised (deleters, capsule destructors). Own spelling: pybind11's
// error_scope uses PyErr_Fetch, deprecated from Python 3.12.
class ErrorScope {
 public:
#if PY_VERSION_HEX >= 0x030C0000
  ErrorScope() : exc_(PyErr_GetRaisedException()) {}
  ~ErrorScope() { PyErr_SetRaisedException(exc_); }

 private:
  PyObject* exc_;
#else
  ErrorScope() { PyErr_Fetch(&type_, &value_, &trace_); }
  ~ErrorScope() { PyErr_Restore(type_, value_, trace_); }

 private:
  PyObject *type_, *value_, *trace_;
#endif
 public:
  ErrorScope(const ErrorScope&) = delete;
  ErrorScope& operator=(const ErrorScope&) = delete;
};

// ---- Exceptions -----------------------------------------------------------------------------

constexpr int kNumCodes = 7;
PyObject* g_error = nullptr;                 // rudnn.Error
PyObject* g_code_error[kNumCodes] = {};      // indexed by ErrorCode

PyObject* exception_for(ErrorCode code) {
  const int i = static_cast<int>(code);
  if (i >= 0 && i < kNumCodes && g_code_error[i] != nullptr) return g_code_error[i];
  return g_error;
}

[[noreturn]] void raise_rudnn(ErrorCode code, const std::string& message) { throw rudnn::Error(code, message); }

[[noreturn]] void raise_python(PyObject* type, const std::string& message) {
  PyErr_SetString(type, message.c_str());
  throw py::error_already_set();
}

std::string type_name(py::handle obj) { return py::str(py::type::handle_of(obj).attr("__qualname__")); }

// ---- Dtype names (numpy / torch spelling) ----------------------------------------------------

const char* dtype_py_name(DType d) {
  switch (d) {
    case DType::f32: return "float32";
    case DType::f16: return "float16";
    case DType::bf16: return "bfloat16";
    case DType::f64: return "float64";
    case DType::i32: return "int32";
    case DType::i64: return "int64";
    case DType::u32: return "uint32";
    case DType::u8: return "uint8";
    case DType::boolean: return "bool";
  }
  return "unknown";
}

// Buffer-protocol format of a dtype (empty: none, e.g. bfloat16).
std::string dtype_buffer_format(DType d) {
  switch (d) {
    case DType::f32: return "f";
    case DType::f16: return "e";
    case DType::f64: return "d";
    case DType::i32: return "i";
    case DType::i64: return "q";
    case DType::u32: return "I";
    case DType::u8: return "B";
    case DType::boolean: return "?";
    case DType::bf16: return "";
  }
  return "";
}

// The dtype of a buffer-protocol format and item size (nullopt: not one ruDNN has).
std::optional<DType> dtype_from_buffer_format(const char* format, Py_ssize_t itemsize) {
  std::string f = format ? format : "B";
  if (!f.empty() && (f[0] == '@' || f[0] == '=' || f[0] == '<' || f[0] == '!' || f[0] == '>')) {
    const char order = f[0];
    f.erase(0, 1);
    // Only native (little-endian on every platform ruDNN targets) byte order.
    if (order == '>' || order == '!') return std::nullopt;
  }
  if (f.size() != 1) return std::nullopt;
  const char c = f[0];
  switch (c) {
    case 'f': return itemsize == 4 ? std::optional(DType::f32) : std::nullopt;
    case 'd': return itemsize == 8 ? std::optional(DType::f64) : std::nullopt;
    case 'e': return itemsize == 2 ? std::optional(DType::f16) : std::nullopt;
    case '?': return itemsize == 1 ? std::optional(DType::boolean) : std::nullopt;
    case 'b': case 'h': case 'i': case 'l': case 'q': case 'n':
      if (itemsize == 4) return DType::i32;
      if (itemsize == 8) return DType::i64;
      return std::nullopt;
    case 'B': case 'H': case 'I': case 'L': case 'Q': case 'N':
      if (itemsize == 1) return DType::u8;
      if (itemsize == 4) return DType::u32;
      return std::nullopt;
    default: return std::nullopt;
  }
}

// ---- Streams --------------------------------------------------------------------------------

// A Python stream argument as a handle value: None -> 0 (current stream), an int (a
// cudaStream_t address; 1 and 2 are CUDA's legacy and per-thread default streams), or an
// object with an integer `cuda_stream` attribute (torch.cuda.Stream, ...).
std::uintptr_t parse_stream(py::handle s, const char* op) {
  if (s.is_none()) return 0;
  py::handle value = s;
  py::object attr;
  if (!PyLong_Check(s.ptr()) && py::hasattr(s, "cuda_stream")) {
    attr = s.attr("cuda_stream");
    value = attr;
  }
  if (!PyLong_Check(value.ptr()) || PyBool_Check(value.ptr())) {
    raise_python(PyExc_TypeError, std::string(op) + ": stream must be None, an int (a cudaStream_t address) or an "
                                                    "object with a cuda_stream attribute, got " + type_name(s));
  }
  const long long v = value.cast<long long>();
  if (v < 0) raise_python(PyExc_ValueError, std::string(op) + ": stream must be >= 0, got " + std::to_string(v));
  return static_cast<std::uintptr_t>(v);
}

// The rudnn::Stream an op on `first`'s device runs on: the current stream for 0 and for CPU
// operands (a CPU op runs inline, `stream` does not apply), else the caller's CUDA stream.
rudnn::Stream op_stream(std::uintptr_t stream, const Tensor& first) {
  if (stream == 0 || !first.defined() || first.device().is_cpu()) return {};
  return rudnn::Stream::borrow(first.device(), reinterpret_cast<rudnn::cuda_stream_t>(stream));
}

// ---- DLPack import --------------------------------------------------------------------------

// The DLManagedTensor handed to rudnn::from_dlpack: a copy of the producer's DLTensor whose
// deleter takes the GIL before it calls the producer's deleter (numpy's drops a Python
// reference), since the last ruDNN handle may go on any thread.
struct ImportedDLPack {
  DLManagedTensor managed{};
  DLManagedTensor* original = nullptr;
};

void imported_dlpack_deleter(DLManagedTensor* self) {
  auto* wrapper = static_cast<ImportedDLPack*>(self->manager_ctx);
  DLManagedTensor* original = wrapper->original;
  delete wrapper;
  if (original == nullptr || original->deleter == nullptr) return;
  if (!Py_IsInitialized()) return;  // interpreter gone: leak rather than crash
  const PyGILState_STATE state = PyGILState_Ensure();
  {
    ErrorScope keep_error;  // may run while an exception is being raised
    original->deleter(original);
  }
  PyGILState_Release(state);
}

// Adds "<op>: <arg>: " in front of a rudnn::Error raised while importing an argument.
template <class F>
Tensor with_arg_context(const char* op, const char* arg, F&& f) {
  try {
    return f();
  } catch (const rudnn::Error& e) {
    throw rudnn::Error(e.code(), std::string(op) + ": " + arg + ": " + e.what());
  }
}

Tensor import_capsule(py::handle capsule, const char* op, const char* arg) {
  PyObject* c = capsule.ptr();
  if (!PyCapsule_CheckExact(c)) {
    raise_python(PyExc_TypeError, std::string(op) + ": " + arg + ": __dlpack__ returned " + type_name(capsule) +
                                      ", expected a PyCapsule");
  }
  if (PyCapsule_IsValid(c, kVersionedCapsuleName)) {
    raise_python(PyExc_BufferError, std::string(op) + ": " + arg +
                                        ": __dlpack__ returned a versioned DLPack capsule, which ruDNN does not take");
  }
  if (!PyCapsule_IsValid(c, kCapsuleName)) {
    raise_python(PyExc_ValueError, std::string(op) + ": " + arg +
                                       ": __dlpack__ returned a capsule that is not a 'dltensor' (already consumed?)");
  }
  auto* managed = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(c, kCapsuleName));
  if (managed == nullptr) throw py::error_already_set();
  auto wrapper = std::make_unique<ImportedDLPack>();
  wrapper->managed.dl_tensor = managed->dl_tensor;
  wrapper->managed.manager_ctx = wrapper.get();
  wrapper->managed.deleter = imported_dlpack_deleter;
  wrapper->original = managed;
  // The capsule gives up ownership first: from_dlpack owns the tensor from here on, and
  // runs its deleter itself should it throw.
  if (PyCapsule_SetName(c, kUsedCapsuleName) != 0) throw py::error_already_set();
  DLManagedTensor* handed = &wrapper.release()->managed;
  return with_arg_context(op, arg, [&] { return rudnn::from_dlpack(handed); });
}

// Host memory through the buffer protocol (read-only numpy arrays, memoryviews, ...).
Tensor import_buffer(py::handle obj, const char* op, const char* arg, bool writable) {
  struct BufferHolder {
    Py_buffer view{};
    bool held = false;
    ~BufferHolder() {
      if (!held || !Py_IsInitialized()) return;
      const PyGILState_STATE state = PyGILState_Ensure();
      {
        ErrorScope keep_error;
        PyBuffer_Release(&view);
      }
      PyGILState_Release(state);
    }
  };
  auto holder = std::make_shared<BufferHolder>();
  const int flags = PyBUF_STRIDES | PyBUF_FORMAT | (writable ? PyBUF_WRITABLE : 0);
  if (PyObject_GetBuffer(obj.ptr(), &holder->view, flags) != 0) throw py::error_already_set();
  holder->held = true;
  const Py_buffer& v = holder->view;
  const auto dtype = dtype_from_buffer_format(v.format, v.itemsize);
  const std::string where = std::string(op) + ": " + arg + ": ";
  if (!dtype) {
    raise_rudnn(ErrorCode::Unsupported, where + "buffer format '" + (v.format ? v.format : "B") + "' (itemsize " +
                                            std::to_string(v.itemsize) + ") is not a ruDNN dtype");
  }
  rudnn::Shape shape(v.shape, v.shape + v.ndim), strides(static_cast<size_t>(v.ndim));
  int64_t last = 0;
  bool empty = false;
  for (int i = 0; i < v.ndim; ++i) {
    if (v.strides[i] < 0 || v.strides[i] % v.itemsize != 0) {
      raise_rudnn(ErrorCode::Unsupported, where + "negative or unaligned strides are not supported");
    }
    strides[static_cast<size_t>(i)] = v.strides[i] / v.itemsize;
    if (shape[static_cast<size_t>(i)] == 0) empty = true;
    last += (shape[static_cast<size_t>(i)] - 1) * strides[static_cast<size_t>(i)];
  }
  const size_t bytes = empty ? 0 : static_cast<size_t>(last + 1) * static_cast<size_t>(v.itemsize);
  void* data = v.buf;
  return with_arg_context(op, arg, [&] {
    return Tensor::from_blob(data, bytes, shape, strides, 0, *dtype, Device::cpu(), [holder] {});
  });
}

// Imports one operand. None gives an undefined Tensor ("none"); a rudnn Tensor is taken as
// is; otherwise obj.__dlpack__(stream=...) with the consumer stream for CUDA producers and
// None for host ones, then the buffer protocol for host objects DLPack refuses (read-only
// numpy arrays) or that have no __dlpack__.
Tensor import_array(py::handle obj, const char* op, const char* arg, std::uintptr_t stream, bool writable = false) {
  if (obj.is_none()) return {};
  if (py::isinstance<Tensor>(obj)) return obj.cast<Tensor>();
  if (py::hasattr(obj, "__dlpack__")) {
    py::object consumer_stream = py::none();
    if (py::hasattr(obj, "__dlpack_device__")) {
      py::tuple device = obj.attr("__dlpack_device__")();
      const int type = device[0].cast<int>();
      if (type == kDevCUDA || type == kDevCUDAManaged) {
        consumer_stream = py::int_(stream != 0 ? stream : kLegacyStream);
      }
    }
    py::object capsule;
    try {
      capsule = obj.attr("__dlpack__")(py::arg("stream") = consumer_stream);
    } catch (py::error_already_set& e) {
      // numpy refuses to export read-only arrays through unversioned DLPack; ruDNN only
      // reads its inputs, so it takes those through the buffer protocol instead.
      if (!writable && e.matches(PyExc_BufferError) && consumer_stream.is_none() && PyObject_CheckBuffer(obj.ptr())) {
        return import_buffer(obj, op, arg, false);
      }
      throw;
    }
    return import_capsule(capsule, op, arg);
  }
  if (PyObject_CheckBuffer(obj.ptr())) return import_buffer(obj, op, arg, writable);
  raise_python(PyExc_TypeError, std::string(op) + ": " + arg +
                                    " must be an array supporting DLPack (__dlpack__) or the buffer protocol, got " +
                                    type_name(obj));
}

// ---- DLPack export --------------------------------------------------------------------------

void dlpack_capsule_destructor(PyObject* capsule) {
  // A consumer renamed it "used_dltensor" and owns the tensor now.
  if (!PyCapsule_IsValid(capsule, kCapsuleName)) return;
  ErrorScope keep_error;
  auto* managed = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(capsule, kCapsuleName));
  if (managed != nullptr && managed->deleter != nullptr) managed->deleter(managed);
}

std::pair<int, int> dlpack_device(const Tensor& t) {
  const Device d = t.device();
  return d.is_cpu() ? std::pair{kDevCPU, 0} : std::pair{kDevCUDA, d.index};
}

// Tensor.__dlpack__(stream=None, *, max_version=None, dl_device=None, copy=None).
// Returns an unversioned "dltensor" capsule (the protocol allows that whatever
// max_version asks). For a CUDA tensor the data is made ready for the consumer's stream:
// when the stream the tensor was produced on is a different one, the consumer's stream is
// made to wait for it (an event; the host does not wait).
py::object tensor_dlpack(const Tensor& t, py::object stream, py::kwargs kwargs) {
  auto kwarg = [&](const char* name) -> py::object {
    if (kwargs.contains(name)) return kwargs[name];
    return py::none();
  };
  const auto [dev_type, dev_id] = dlpack_device(t);
  py::object dl_device = kwarg("dl_device");
  if (!dl_device.is_none()) {
    py::tuple want = py::tuple(dl_device);
    const int want_type = want[0].cast<int>(), want_id = want[1].cast<int>();
    const bool same = (want_type == dev_type || (dev_type == kDevCPU && want_type == kDevCUDAHost)) &&
                      (dev_type == kDevCPU || want_id == dev_id);
    if (!same) {
      raise_python(PyExc_BufferError, "Tensor.__dlpack__: cannot export a tensor on " + t.device().str() +
                                          " to DLPack device (" + std::to_string(want_type) + ", " +
                                          std::to_string(want_id) + ")");
    }
  }
  py::object copy = kwarg("copy");
  const bool want_copy = !copy.is_none() && copy.cast<bool>();

  Tensor out = t;
  if (t.device().is_cuda()) {
    long long consumer = static_cast<long long>(kLegacyStream);  // None: the legacy default stream
    if (!stream.is_none()) {
      if (!PyLong_Check(stream.ptr())) raise_python(PyExc_TypeError, "Tensor.__dlpack__: stream must be an int or None");
      consumer = stream.cast<long long>();
    }
    rudnn::Stream producer = t.allocation_stream();
    py::gil_scoped_release release;
    if (want_copy) {
      if (producer.is_default()) producer = rudnn::current_stream(t.device());
      out = t.to(t.device(), producer);
    }
    if (consumer != -1 && !producer.is_default()) {
      auto handle = reinterpret_cast<std::uintptr_t>(producer.handle());
      if (handle == 0) handle = kLegacyStream;
      if (static_cast<long long>(handle) != consumer) {
        // The consumer's stream waits for the producer's (an event: no host wait).
        rudnn::Stream::borrow(t.device(), reinterpret_cast<rudnn::cuda_stream_t>(static_cast<std::uintptr_t>(consumer)))
            .wait(producer);
      }
    }
  } else if (want_copy) {
    out = t.to(t.device());
  }
  DLManagedTensor* managed = rudnn::to_dlpack(out);
  PyObject* capsule = PyCapsule_New(managed, kCapsuleName, dlpack_capsule_destructor);
  if (capsule == nullptr) {
    managed->deleter(managed);
    throw py::error_already_set();
  }
  return py::reinterpret_steal<py::object>(capsule);
}

// ---- Op helpers -----------------------------------------------------------------------------

// Runs f with the GIL released (the ops run on the C++ side only) and returns its result.
template <class F>
decltype(auto) without_gil(F&& f) {
  py::gil_scoped_release release;
  return f();
}

py::object wrap(Tensor t) {
  if (!t.defined()) return py::none();
  return py::cast(std::move(t));
}

// Python floats are doubles; a finite value beyond float's range becomes +-inf explicitly
// (which the op then rejects as not finite) rather than through an undefined conversion.
float to_float(double v) {
  if (std::isfinite(v) && std::fabs(v) > static_cast<double>(FLT_MAX)) {
    return v > 0 ? std::numeric_limits<float>::infinity() : -std::numeric_limits<float>::infinity();
  }
  return static_cast<float>(v);
}

rudnn::CrossEntropyOptions ce_options(std::optional<int64_t> ignore_index) {
  rudnn::CrossEntropyOptions o;
  o.ignore_index = ignore_index;
  return o;
}

// The `out` tuple of a multi-output op.
std::vector<py::object> out_tuple(py::handle out, const char* op, size_t n) {
  if (!py::isinstance<py::tuple>(out) && !py::isinstance<py::list>(out)) {
    raise_python(PyExc_TypeError, std::string(op) + ": out must be a tuple of " + std::to_string(n) + " arrays");
  }
  py::sequence seq = py::reinterpret_borrow<py::sequence>(out);
  if (seq.size() != n) {
    raise_python(PyExc_ValueError, std::string(op) + ": out must be a tuple of " + std::to_string(n) +
                                       " arrays, got " + std::to_string(seq.size()));
  }
  std::vector<py::object> items;
  for (size_t i = 0; i < n; ++i) items.push_back(seq[i]);
  return items;
}

Tensor import_out(py::handle obj, const char* op, const char* arg, std::uintptr_t stream) {
  return import_array(obj, op, arg, stream, /*writable=*/true);
}

}  // namespace

PYBIND11_MODULE(_rudnn, m) {
  m.doc() = "ruDNN native binding (use the `rudnn` package rather than this module directly).";

  // ---- Exceptions.
  {
    g_error = PyErr_NewExceptionWithDoc("rudnn.Error", "Base class of every error ruDNN raises.", PyExc_Exception,
                                        nullptr);
    if (g_error == nullptr) throw py::error_already_set();
    PyObject_SetAttrString(g_error, "code", Py_None);
    m.attr("Error") = py::handle(g_error);
    struct Spec {
      ErrorCode code;
      const char* name;
      PyObject* builtin;
      const char* doc;
    };
    const Spec specs[] = {
        {ErrorCode::InvalidArgument, "InvalidArgument", PyExc_ValueError,
         "A value outside its domain (eps <= 0, an empty axis, a bad option)."},
        {ErrorCode::ShapeMismatch, "ShapeMismatch", PyExc_ValueError,
         "A shape that contradicts another operand or the op's rule."},
        {ErrorCode::DTypeMismatch, "DTypeMismatch", PyExc_TypeError,
         "A dtype the op does not take, or operands whose dtypes must agree but differ."},
        {ErrorCode::DeviceMismatch, "DeviceMismatch", PyExc_ValueError, "Operands (or a stream) on different devices."},
        {ErrorCode::Unsupported, "Unsupported", PyExc_NotImplementedError,
         "Valid in principle but not provided (e.g. a CUDA tensor in a CPU-only build)."},
        {ErrorCode::OutOfMemory, "OutOfMemory", PyExc_MemoryError, "An allocation failed."},
        {ErrorCode::Cuda, "CudaError", PyExc_RuntimeError, "The CUDA runtime reported an error."},
    };
    for (const Spec& s : specs) {
      const std::string qualified = std::string("rudnn.") + s.name;
      PyObject* bases = PyTuple_Pack(2, g_error, s.builtin);
      if (bases == nullptr) throw py::error_already_set();
      PyObject* cls = PyErr_NewExceptionWithDoc(qualified.c_str(), s.doc, bases, nullptr);
      Py_DECREF(bases);
      if (cls == nullptr) throw py::error_already_set();
      py::str code_name(rudnn::error_code_name(s.code));
      PyObject_SetAttrString(cls, "code", code_name.ptr());
      g_code_error[static_cast<int>(s.code)] = cls;  // module-lifetime reference
      m.attr(s.name) = py::handle(cls);
    }
    py::register_exception_translator([](std::exception_ptr p) {
      try {
        if (p) std::rethrow_exception(p);
      } catch (const rudnn::Error& e) {
        PyErr_SetString(exception_for(e.code()), e.what());
      }
    });
  }

  // ---- Library facts.
  m.def("version", [] { return std::string(rudnn::version()); }, "The ruDNN library version, 'major.minor.patch'.");
  m.def("cuda_device_count", &rudnn::cuda_device_count,
        "CUDA devices visible to this process (0 in a CPU-only build or without a usable driver).");
  m.def("built_with_cuda", &rudnn::built_with_cuda, "Whether this build of ruDNN has the CUDA backend.");

  // ---- Tensor.
  py::class_<Tensor>(m, "Tensor", py::buffer_protocol(), R"doc(
A ruDNN tensor: a strided view of CPU or CUDA memory, returned by ruDNN's ops.

It is DLPack-capable (``torch.from_dlpack(t)``, ``numpy.from_dlpack(t)``, ``cupy.from_dlpack(t)``
share its memory without copying) and, on the CPU, supports the buffer protocol
(``numpy.asarray(t)``, ``memoryview(t)``; not for bfloat16). Not constructible directly.
)doc")
      .def_property_readonly("shape", [](const Tensor& t) { return py::tuple(py::cast(t.shape())); },
                             "The shape, a tuple of ints.")
      .def_property_readonly("strides", [](const Tensor& t) { return py::tuple(py::cast(t.strides())); },
                             "The strides in elements (not bytes), a tuple of ints.")
      .def_property_readonly("dtype", [](const Tensor& t) { return dtype_py_name(t.dtype()); },
                             "The element type: 'float32', 'float16', 'bfloat16', 'float64', 'int32', 'int64', "
                             "'uint32', 'uint8' or 'bool'.")
      .def_property_readonly("device", [](const Tensor& t) { return t.device().str(); }, "'cpu' or 'cuda:<index>'.")
      .def_property_readonly("ndim", &Tensor::dim)
      .def_property_readonly("size", &Tensor::numel, "The number of elements.")
      .def_property_readonly("itemsize", &Tensor::itemsize)
      .def_property_readonly("data_ptr", [](const Tensor& t) { return reinterpret_cast<std::uintptr_t>(t.data()); },
                             "The address of element [0, ..., 0].")
      .def("is_contiguous", &Tensor::is_contiguous)
      .def("__len__", [](const Tensor& t) {
        if (t.dim() == 0) raise_python(PyExc_TypeError, "len() of a 0-d tensor");
        return t.shape()[0];
      })
      .def("__repr__", [](const Tensor& t) { return "rudnn." + t.str(); })
      .def("__dlpack__", &tensor_dlpack, py::arg("stream") = py::none(),
           "DLPack export (stream: the consumer's stream for CUDA tensors, None for CPU ones).")
      .def("__dlpack_device__", [](const Tensor& t) { return py::make_tuple(dlpack_device(t).first, dlpack_device(t).second); })
      .def_buffer([](const Tensor& t) -> py::buffer_info {
        if (!t.device().is_cpu()) {
          raise_python(PyExc_BufferError, "rudnn.Tensor: the buffer protocol needs a CPU tensor, this one is on " +
                                              t.device().str() + " (use DLPack)");
        }
        const std::string format = dtype_buffer_format(t.dtype());
        if (format.empty()) {
          raise_python(PyExc_BufferError, std::string("rudnn.Tensor: ") + dtype_py_name(t.dtype()) +
                                              " has no buffer-protocol format (use DLPack)");
        }
        std::vector<py::ssize_t> shape(t.shape().begin(), t.shape().end()), strides;
        for (int64_t s : t.strides()) strides.push_back(static_cast<py::ssize_t>(s * static_cast<int64_t>(t.itemsize())));
        return py::buffer_info(t.data(), static_cast<py::ssize_t>(t.itemsize()), format, t.dim(), shape, strides);
      });

  m.def(
      "from_dlpack",
      [](py::object obj, py::object stream) {
        const std::uintptr_t s = parse_stream(stream, "from_dlpack");
        return import_array(obj, "from_dlpack", "obj", s);
      },
      py::arg("obj"), py::kw_only(), py::arg("stream") = py::none(),
      "Zero-copy import of a DLPack-capable array (or a host buffer) as a rudnn Tensor. For a CUDA "
      "producer, `stream` is the stream the data will be used on (default: the legacy default stream).");

  // ---- Forward ops.
  m.def(
      "layer_norm",
      [](py::object x, py::object gamma, py::object beta, double eps, py::object stream, py::object out) -> py::object {
        const char* op = "layer_norm";
        const auto sv = parse_stream(stream, op);
        Tensor tx = import_array(x, op, "x", sv), tg = import_array(gamma, op, "gamma", sv),
               tb = import_array(beta, op, "beta", sv);
        const rudnn::Stream s = op_stream(sv, tx);
        if (out.is_none()) {
          Tensor y = without_gil([&] { return rudnn::layer_norm(tx, tg, tb, to_float(eps), s); });
          return wrap(std::move(y));
        }
        Tensor to = import_out(out, op, "out", sv);
        without_gil([&] { rudnn::layer_norm_into(to, tx, tg, tb, to_float(eps), s); });
        return out;
      },
      py::arg("x"), py::arg("gamma") = py::none(), py::arg("beta") = py::none(), py::arg("eps") = 1e-5, py::kw_only(),
      py::arg("stream") = py::none(), py::arg("out") = py::none());

  m.def(
      "rms_norm",
      [](py::object x, py::object gamma, double eps, py::object stream, py::object out) -> py::object {
        const char* op = "rms_norm";
        const auto sv = parse_stream(stream, op);
        Tensor tx = import_array(x, op, "x", sv), tg = import_array(gamma, op, "gamma", sv);
        const rudnn::Stream s = op_stream(sv, tx);
        if (out.is_none()) {
          Tensor y = without_gil([&] { return rudnn::rms_norm(tx, tg, to_float(eps), s); });
          return wrap(std::move(y));
        }
        Tensor to = import_out(out, op, "out", sv);
        without_gil([&] { rudnn::rms_norm_into(to, tx, tg, to_float(eps), s); });
        return out;
      },
      py::arg("x"), py::arg("gamma") = py::none(), py::arg("eps") = 1e-6, py::kw_only(), py::arg("stream") = py::none(),
      py::arg("out") = py::none());

  m.def(
      "add_rms_norm",
      [](py::object x, py::object residual, py::object gamma, double eps, py::object stream,
         py::object out) -> py::object {
        const char* op = "add_rms_norm";
        const auto sv = parse_stream(stream, op);
        Tensor tx = import_array(x, op, "x", sv), tr = import_array(residual, op, "residual", sv),
               tg = import_array(gamma, op, "gamma", sv);
        const rudnn::Stream s = op_stream(sv, tx);
        if (out.is_none()) {
          rudnn::AddRmsNormResult r = without_gil([&] { return rudnn::add_rms_norm(tx, tr, tg, to_float(eps), s); });
          return py::make_tuple(wrap(std::move(r.sum)), wrap(std::move(r.normed)));
        }
        auto outs = out_tuple(out, op, 2);
        Tensor ts = import_out(outs[0], op, "out[0] (sum)", sv), tn = import_out(outs[1], op, "out[1] (normed)", sv);
        without_gil([&] { rudnn::add_rms_norm_into(ts, tn, tx, tr, tg, to_float(eps), s); });
        return out;
      },
      py::arg("x"), py::arg("residual"), py::arg("gamma") = py::none(), py::arg("eps") = 1e-6, py::kw_only(),
      py::arg("stream") = py::none(), py::arg("out") = py::none());

  auto softmax_fn = [](py::object x, py::object stream, py::object out) -> py::object {
    const char* op = "softmax_last_axis";
    const auto sv = parse_stream(stream, op);
    Tensor tx = import_array(x, op, "x", sv);
    const rudnn::Stream s = op_stream(sv, tx);
    if (out.is_none()) {
      Tensor y = without_gil([&] { return rudnn::softmax_last_axis(tx, s); });
      return wrap(std::move(y));
    }
    Tensor to = import_out(out, op, "out", sv);
    without_gil([&] { rudnn::softmax_last_axis_into(to, tx, s); });
    return out;
  };
  m.def("softmax_last_axis", softmax_fn, py::arg("x"), py::kw_only(), py::arg("stream") = py::none(),
        py::arg("out") = py::none());

  m.def(
      "logsumexp",
      [](py::object x, py::object stream, py::object out) -> py::object {
        const char* op = "logsumexp";
        const auto sv = parse_stream(stream, op);
        Tensor tx = import_array(x, op, "x", sv);
        const rudnn::Stream s = op_stream(sv, tx);
        if (out.is_none()) {
          Tensor y = without_gil([&] { return rudnn::logsumexp(tx, s); });
          return wrap(std::move(y));
        }
        Tensor to = import_out(out, op, "out", sv);
        without_gil([&] { rudnn::logsumexp_into(to, tx, s); });
        return out;
      },
      py::arg("x"), py::kw_only(), py::arg("stream") = py::none(), py::arg("out") = py::none());

  m.def(
      "cross_entropy",
      [](py::object logits, py::object targets, std::optional<int64_t> ignore_index, py::object stream,
         py::object out) -> py::object {
        const char* op = "cross_entropy";
        const auto sv = parse_stream(stream, op);
        Tensor tl = import_array(logits, op, "logits", sv), tt = import_array(targets, op, "targets", sv);
        const rudnn::Stream s = op_stream(sv, tl);
        const auto opts = ce_options(ignore_index);
        if (out.is_none()) {
          Tensor loss = without_gil([&] { return rudnn::cross_entropy(tl, tt, opts, s); });
          return wrap(std::move(loss));
        }
        Tensor to = import_out(out, op, "out", sv);
        without_gil([&] { rudnn::cross_entropy_into(to, tl, tt, opts, s); });
        return out;
      },
      py::arg("logits"), py::arg("targets"), py::arg("ignore_index") = py::none(), py::kw_only(),
      py::arg("stream") = py::none(), py::arg("out") = py::none());

  // ---- Backward ops.
  m.def(
      "layer_norm_backward",
      [](py::object dy, py::object x, py::object gamma, py::object beta, double eps, py::object stream,
         py::object out) -> py::object {
        const char* op = "layer_norm_backward";
        const auto sv = parse_stream(stream, op);
        Tensor tdy = import_array(dy, op, "dy", sv), tx = import_array(x, op, "x", sv),
               tg = import_array(gamma, op, "gamma", sv), tb = import_array(beta, op, "beta", sv);
        const rudnn::Stream s = op_stream(sv, tdy);
        if (out.is_none()) {
          rudnn::LayerNormGrads g = without_gil([&] { return rudnn::layer_norm_backward(tdy, tx, tg, tb, to_float(eps), s); });
          return py::make_tuple(wrap(std::move(g.dx)), wrap(std::move(g.dgamma)), wrap(std::move(g.dbeta)));
        }
        auto outs = out_tuple(out, op, 3);
        Tensor odx = import_out(outs[0], op, "out[0] (dx)", sv), odg = import_out(outs[1], op, "out[1] (dgamma)", sv),
               odb = import_out(outs[2], op, "out[2] (dbeta)", sv);
        without_gil([&] { rudnn::layer_norm_backward_into(odx, odg, odb, tdy, tx, tg, tb, to_float(eps), s); });
        return out;
      },
      py::arg("dy"), py::arg("x"), py::arg("gamma") = py::none(), py::arg("beta") = py::none(), py::arg("eps") = 1e-5,
      py::kw_only(), py::arg("stream") = py::none(), py::arg("out") = py::none());

  m.def(
      "rms_norm_backward",
      [](py::object dy, py::object x, py::object gamma, double eps, py::object stream, py::object out) -> py::object {
        const char* op = "rms_norm_backward";
        const auto sv = parse_stream(stream, op);
        Tensor tdy = import_array(dy, op, "dy", sv), tx = import_array(x, op, "x", sv),
               tg = import_array(gamma, op, "gamma", sv);
        const rudnn::Stream s = op_stream(sv, tdy);
        if (out.is_none()) {
          rudnn::RmsNormGrads g = without_gil([&] { return rudnn::rms_norm_backward(tdy, tx, tg, to_float(eps), s); });
          return py::make_tuple(wrap(std::move(g.dx)), wrap(std::move(g.dgamma)));
        }
        auto outs = out_tuple(out, op, 2);
        Tensor odx = import_out(outs[0], op, "out[0] (dx)", sv), odg = import_out(outs[1], op, "out[1] (dgamma)", sv);
        without_gil([&] { rudnn::rms_norm_backward_into(odx, odg, tdy, tx, tg, to_float(eps), s); });
        return out;
      },
      py::arg("dy"), py::arg("x"), py::arg("gamma") = py::none(), py::arg("eps") = 1e-6, py::kw_only(),
      py::arg("stream") = py::none(), py::arg("out") = py::none());

  m.def(
      "softmax_backward",
      [](py::object dy, py::object y, py::object stream, py::object out) -> py::object {
        const char* op = "softmax_backward";
        const auto sv = parse_stream(stream, op);
        Tensor tdy = import_array(dy, op, "dy", sv), ty = import_array(y, op, "y", sv);
        const rudnn::Stream s = op_stream(sv, tdy);
        if (out.is_none()) {
          Tensor dx = without_gil([&] { return rudnn::softmax_backward(tdy, ty, s); });
          return wrap(std::move(dx));
        }
        Tensor to = import_out(out, op, "out", sv);
        without_gil([&] { rudnn::softmax_backward_into(to, tdy, ty, s); });
        return out;
      },
      py::arg("dy"), py::arg("y"), py::kw_only(), py::arg("stream") = py::none(), py::arg("out") = py::none());

  m.def(
      "cross_entropy_backward",
      [](py::object logits, py::object targets, py::object dloss, std::optional<int64_t> ignore_index,
         py::object stream, py::object out) -> py::object {
        const char* op = "cross_entropy_backward";
        const auto sv = parse_stream(stream, op);
        Tensor tl = import_array(logits, op, "logits", sv), tt = import_array(targets, op, "targets", sv),
               td = import_array(dloss, op, "dloss", sv);
        const rudnn::Stream s = op_stream(sv, tl);
        const auto opts = ce_options(ignore_index);
        if (out.is_none()) {
          Tensor dl = without_gil([&] { return rudnn::cross_entropy_backward(tl, tt, td, opts, s); });
          return wrap(std::move(dl));
        }
        Tensor to = import_out(out, op, "out", sv);
        without_gil([&] { rudnn::cross_entropy_backward_into(to, tl, tt, td, opts, s); });
        return out;
      },
      py::arg("logits"), py::arg("targets"), py::arg("dloss"), py::arg("ignore_index") = py::none(), py::kw_only(),
      py::arg("stream") = py::none(), py::arg("out") = py::none());

  // grad_scale: a float (the same upstream gradient on every row) or an F32 array of the
  // targets' shape (one per row).
  m.def(
      "cross_entropy_with_grad",
      [](py::object logits, py::object targets, py::object grad_scale, std::optional<int64_t> ignore_index,
         py::object stream, py::object out) -> py::object {
        const char* op = "cross_entropy_with_grad";
        const auto sv = parse_stream(stream, op);
        Tensor tl = import_array(logits, op, "logits", sv), tt = import_array(targets, op, "targets", sv);
        const bool per_row = !py::isinstance<py::float_>(grad_scale) && !py::isinstance<py::int_>(grad_scale);
        Tensor td = per_row ? import_array(grad_scale, op, "grad_scale", sv) : Tensor();
        const float scale = per_row ? 1.0f : to_float(grad_scale.cast<double>());
        const rudnn::Stream s = op_stream(sv, tl);
        const auto opts = ce_options(ignore_index);
        if (out.is_none()) {
          rudnn::CrossEntropyWithGrad r = without_gil([&] {
            return per_row ? rudnn::cross_entropy_with_grad(tl, tt, td, opts, s)
                           : rudnn::cross_entropy_with_grad(tl, tt, scale, opts, s);
          });
          return py::make_tuple(wrap(std::move(r.loss)), wrap(std::move(r.dlogits)));
        }
        auto outs = out_tuple(out, op, 2);
        Tensor ol = import_out(outs[0], op, "out[0] (loss)", sv), od = import_out(outs[1], op, "out[1] (dlogits)", sv);
        without_gil([&] {
          if (per_row) {
            rudnn::cross_entropy_with_grad_into(ol, od, tl, tt, td, opts, s);
          } else {
            rudnn::cross_entropy_with_grad_into(ol, od, tl, tt, scale, opts, s);
          }
        });
        return out;
      },
      py::arg("logits"), py::arg("targets"), py::arg("grad_scale") = 1.0, py::arg("ignore_index") = py::none(),
      py::kw_only(), py::arg("stream") = py::none(), py::arg("out") = py::none());

  m.def(
      "scale_unless_one",
      [](py::object x, py::object scale, py::object stream) {
        const char* op = "scale_unless_one";
        const auto sv = parse_stream(stream, op);
        Tensor tx = import_out(x, op, "x", sv), ts = import_array(scale, op, "scale", sv);
        const rudnn::Stream s = op_stream(sv, tx);
        without_gil([&] { rudnn::scale_unless_one(tx, ts, s); });
        return x;
      },
      py::arg("x"), py::arg("scale"), py::kw_only(), py::arg("stream") = py::none());

}
