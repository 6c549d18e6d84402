// The interop unit of rudnn._rudnn (interop.h): DLPack import and export, streams, the
// rudnn.Error hierarchy, the Tensor class, and OpArgs, the argument conversion of every op.
#include "interop.h"

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

namespace rudnn_py {

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
// kDLBool arrived in DLPack 0.8; Debian's 0.6 header lacks the name, producers send it.
constexpr uint8_t kDLBoolCode = 6;

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
PyObject* g_error = nullptr;             // rudnn.Error
PyObject* g_code_error[kNumCodes] = {};  // indexed by ErrorCode

PyObject* exception_for(ErrorCode code) {
  const int i = static_cast<int>(code);
  if (i >= 0 && i < kNumCodes && g_code_error[i] != nullptr) return g_code_error[i];
  return g_error;
}

[[noreturn]] void raise_rudnn(ErrorCode code, const std::string& message) {
  throw rudnn::Error(code, message);
}

[[noreturn]] void raise_python(PyObject* type, const std::string& message) {
  PyErr_SetString(type, message.c_str());
  throw py::error_already_set();
}

std::string type_name(py::handle obj) {
  return py::str(py::type::handle_of(obj).attr("__qualname__"));
}

// "<op>: <arg>" for messages.
std::string where(const char* op, const char* arg) { return std::string(op) + ": " + arg; }

// The Python exception being handled, "<Type>: <message>" (pybind11's what()).
std::string describe(const py::error_already_set& e) { return e.what(); }

// ---- Dtype names (numpy / torch spelling) ----------------------------------------------------

const char* dtype_py_name(DType d) {
  switch (d) {
    case DType::f32:
      return "float32";
    case DType::f16:
      return "float16";
    case DType::bf16:
      return "bfloat16";
    case DType::f64:
      return "float64";
    case DType::i32:
      return "int32";
    case DType::i64:
      return "int64";
    case DType::u32:
      return "uint32";
    case DType::u8:
      return "uint8";
    case DType::boolean:
      return "bool";
  }
  return "unknown";
}

// Buffer-protocol format of a dtype (empty: none, e.g. bfloat16).
std::string dtype_buffer_format(DType d) {
  switch (d) {
    case DType::f32:
      return "f";
    case DType::f16:
      return "e";
    case DType::f64:
      return "d";
    case DType::i32:
      return "i";
    case DType::i64:
      return "q";
    case DType::u32:
      return "I";
    case DType::u8:
      return "B";
    case DType::boolean:
      return "?";
    case DType::bf16:
      return "";
  }
  return "";
}

// The one refusal of a dtype ruDNN does not have, whichever way the array came in; the same
// shape as the ops' own dtype errors ("<op>: <arg> has dtype f64; expected ...").
[[noreturn]] void refuse_dtype(const char* op, const char* arg, const std::string& name) {
  raise_rudnn(ErrorCode::DTypeMismatch,
              where(op, arg) + " has dtype " + name +
                  "; expected one of ruDNN's dtypes (f32, f16, bf16, f64, i32, i64, u32, u8, "
                  "bool)");
}

// ruDNN's spelling of a DLPack dtype: f16, bf16, i8, u64, c64 (complex, total bits), ... .
std::string dlpack_dtype_name(DLDataType t) {
  std::string kind;
  switch (t.code) {
    case kDLInt:
      kind = "i";
      break;
    case kDLUInt:
      kind = "u";
      break;
    case kDLFloat:
      kind = "f";
      break;
    case kDLBfloat:
      kind = "bf";
      break;
    case kDLComplex:
      kind = "c";
      break;
    case kDLBoolCode:
      kind = "bool";
      break;
    default:
      kind = "code" + std::to_string(t.code) + "_";
      break;
  }
  std::string name = kind + std::to_string(t.bits);
  if (t.lanes != 1) name += "x" + std::to_string(t.lanes);
  return name;
}

// Whether rudnn::from_dlpack takes this DLPack dtype (the DLPack form of each DType).
bool is_rudnn_dtype(DLDataType t) {
  if (t.lanes != 1) return false;
  switch (t.code) {
    case kDLFloat:
      return t.bits == 16 || t.bits == 32 || t.bits == 64;
    case kDLBfloat:
      return t.bits == 16;
    case kDLInt:
      return t.bits == 32 || t.bits == 64;
    case kDLUInt:
      return t.bits == 8 || t.bits == 32;
    case kDLBoolCode:
      return t.bits == 8;
    default:
      return false;
  }
}

// ruDNN's spelling of a buffer-protocol element type ('h' -> i16, 'Zf' -> c64, ...).
std::string buffer_dtype_name(const char* format, Py_ssize_t itemsize) {
  std::string f = format ? format : "B";
  if (!f.empty() && std::strchr("@=<>!", f[0]) != nullptr) f.erase(0, 1);
  const std::string bits = std::to_string(8 * itemsize);
  if (f.size() == 1 && std::strchr("bhilqn", f[0]) != nullptr) return "i" + bits;
  if (f.size() == 1 && std::strchr("BHILQN", f[0]) != nullptr) return "u" + bits;
  if (f.size() == 1 && std::strchr("efd", f[0]) != nullptr) return "f" + bits;
  if (f == "?") return "bool";
  if (f.size() == 2 && f[0] == 'Z') return "c" + bits;
  return "of buffer format '" + f + "'";
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
    case 'f':
      return itemsize == 4 ? std::optional(DType::f32) : std::nullopt;
    case 'd':
      return itemsize == 8 ? std::optional(DType::f64) : std::nullopt;
    case 'e':
      return itemsize == 2 ? std::optional(DType::f16) : std::nullopt;
    case '?':
      return itemsize == 1 ? std::optional(DType::boolean) : std::nullopt;
    case 'b':
    case 'h':
    case 'i':
    case 'l':
    case 'q':
    case 'n':
      if (itemsize == 4) return DType::i32;
      if (itemsize == 8) return DType::i64;
      return std::nullopt;
    case 'B':
    case 'H':
    case 'I':
    case 'L':
    case 'Q':
    case 'N':
      if (itemsize == 1) return DType::u8;
      if (itemsize == 4) return DType::u32;
      return std::nullopt;
    default:
      return std::nullopt;
  }
}

// ---- Streams --------------------------------------------------------------------------------

// A Python stream argument as a handle value: None -> 0 (current stream), an int (a
// cudaStream_t address; 1 and 2 are CUDA's legacy and per-thread default streams), or an
// object that carries one: the CUDA stream protocol (`__cuda_stream__()` -> (version,
// handle)), an integer `cuda_stream` attribute (torch.cuda.Stream, numba) or an integer `ptr`
// attribute (cupy.cuda.Stream).
std::uintptr_t parse_stream(py::handle s, const char* op) {
  if (s.is_none()) return 0;
  py::handle value = s;
  py::object attr;
  if (!PyLong_Check(s.ptr())) {
    if (py::hasattr(s, "__cuda_stream__")) {
      py::object pair = s.attr("__cuda_stream__")();
      if (py::isinstance<py::tuple>(pair) && py::len(pair) == 2) attr = pair[py::int_(1)];
    } else if (py::hasattr(s, "cuda_stream")) {
      attr = s.attr("cuda_stream");
    } else if (py::hasattr(s, "ptr")) {
      attr = s.attr("ptr");
    }
    if (attr) value = attr;
  }
  if (!PyLong_Check(value.ptr()) || PyBool_Check(value.ptr())) {
    raise_python(PyExc_TypeError,
                 std::string(op) +
                     ": stream must be None, an int (a cudaStream_t address) or a stream "
                     "object (__cuda_stream__, cuda_stream or ptr), got " +
                     type_name(s));
  }
  const long long v = value.cast<long long>();
  if (v < 0)
    raise_python(PyExc_ValueError,
                 std::string(op) + ": stream must be >= 0, got " + std::to_string(v));
  return static_cast<std::uintptr_t>(v);
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
    raise_rudnn(ErrorCode::InvalidArgument, where(op, arg) + ": __dlpack__ returned " +
                                                type_name(capsule) + ", expected a PyCapsule");
  }
  if (PyCapsule_IsValid(c, kVersionedCapsuleName)) {
    raise_rudnn(ErrorCode::Unsupported,
                where(op, arg) +
                    ": __dlpack__ returned a versioned DLPack capsule, which ruDNN does not take");
  }
  if (!PyCapsule_IsValid(c, kCapsuleName)) {
    raise_rudnn(ErrorCode::InvalidArgument,
                where(op, arg) +
                    ": __dlpack__ returned a capsule that is not a 'dltensor' (already consumed?)");
  }
  auto* managed = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(c, kCapsuleName));
  if (managed == nullptr) throw py::error_already_set();
  // Refused while the capsule still owns the tensor (its destructor frees it).
  if (!is_rudnn_dtype(managed->dl_tensor.dtype))
    refuse_dtype(op, arg, dlpack_dtype_name(managed->dl_tensor.dtype));
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
  if (PyObject_GetBuffer(obj.ptr(), &holder->view, flags) != 0) {
    py::error_already_set e;
    // A read-only array or scalar asked for as an output: refused, never copied.
    if (writable && PyObject_GetBuffer(obj.ptr(), &holder->view, PyBUF_STRIDES) == 0) {
      PyBuffer_Release(&holder->view);
      raise_rudnn(ErrorCode::InvalidArgument,
                  where(op, arg) + " is read-only; an output must be writable");
    }
    PyErr_Clear();  // from the retry
    raise_rudnn(ErrorCode::InvalidArgument,
                where(op, arg) + ": the buffer protocol refused it (" + describe(e) + ")");
  }
  holder->held = true;
  const Py_buffer& v = holder->view;
  const auto dtype = dtype_from_buffer_format(v.format, v.itemsize);
  if (!dtype) refuse_dtype(op, arg, buffer_dtype_name(v.format, v.itemsize));
  rudnn::Shape shape(v.shape, v.shape + v.ndim), strides(static_cast<size_t>(v.ndim));
  int64_t last = 0;
  bool empty = false;
  for (int i = 0; i < v.ndim; ++i) {
    if (v.strides[i] < 0 || v.strides[i] % v.itemsize != 0) {
      raise_rudnn(ErrorCode::Unsupported,
                  where(op, arg) + ": negative or unaligned strides are not supported");
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

// The DLPack device type of a producer: its __dlpack_device__() is (type, id), ints.
int producer_device_type(py::handle obj, const char* op, const char* arg) {
  py::object device;
  try {
    device = obj.attr("__dlpack_device__")();
  } catch (py::error_already_set& e) {
    raise_rudnn(ErrorCode::InvalidArgument,
                where(op, arg) + ": __dlpack_device__() raised " + describe(e));
  }
  if (py::isinstance<py::tuple>(device) && py::len(device) == 2) {
    py::handle type = device[py::int_(0)], id = device[py::int_(1)];
    if (PyLong_Check(type.ptr()) && PyLong_Check(id.ptr())) return type.cast<int>();
  }
  raise_rudnn(ErrorCode::InvalidArgument,
              where(op, arg) + ": __dlpack_device__() returned " +
                  py::repr(device).cast<std::string>() +
                  "; expected a (device_type, device_id) tuple of ints");
}

// A torch tensor exported without stream work when the op runs on torch's current stream of
// its device (`torch`, from io.context): to_dlpack for a plain torch.Tensor, else
// __dlpack__(stream=-1), DLPack's "the consumer orders the work itself" (see interop.h). Null
// when it is not such a tensor (or its export raised: the general path then says why in its
// own words).
py::object torch_capsule_on_current_stream(py::handle obj, const TorchCurrentStream* torch) {
  if (torch == nullptr) return {};
  const auto* tensor_type = reinterpret_cast<PyTypeObject*>(torch->tensor_type.ptr());
  const bool plain = Py_TYPE(obj.ptr()) == tensor_type;
  if (!plain) {
    const int is_torch = PyObject_IsInstance(obj.ptr(), torch->tensor_type.ptr());
    if (is_torch != 1) {
      if (is_torch < 0) PyErr_Clear();  // the general path then asks the object itself
      return {};
    }
  }
  py::object capsule;
  try {
    capsule = plain && !torch->to_dlpack.is_none()
                  ? torch->to_dlpack(obj)
                  : obj.attr("__dlpack__")(py::arg("stream") = -1);
  } catch (py::error_already_set&) {
    return {};
  }
  if (!PyCapsule_IsValid(capsule.ptr(), kCapsuleName)) return {};
  const auto* managed =
      static_cast<const DLManagedTensor*>(PyCapsule_GetPointer(capsule.ptr(), kCapsuleName));
  const DLDevice device = managed->dl_tensor.device;
  // A CUDA tensor of another device: torch's current stream there is another stream, so the
  // general path asks for the synchronisation (the capsule, unconsumed, frees its tensor).
  if ((device.device_type == kDevCUDA || device.device_type == kDevCUDAManaged) &&
      device.device_id != torch->device)
    return {};
  return capsule;
}

// Imports one operand: a rudnn Tensor as is; a torch tensor through
// torch_capsule_on_current_stream where that applies; otherwise obj.__dlpack__(stream=...)
// with the consumer stream for CUDA producers and None for host ones, then the buffer
// protocol for host objects DLPack refuses (numpy will not export read-only arrays) or that
// have no __dlpack__. Outputs (writable) are never copied: they are written in place or
// refused.
Tensor import_array(py::handle obj, const char* op, const char* arg, std::uintptr_t stream,
                    bool writable, const TorchCurrentStream* torch) {
  if (py::isinstance<Tensor>(obj)) return obj.cast<Tensor>();
  if (py::object capsule = torch_capsule_on_current_stream(obj, torch))
    return import_capsule(capsule, op, arg);
  if (py::hasattr(obj, "__dlpack__")) {
    py::object consumer_stream = py::none();
    if (py::hasattr(obj, "__dlpack_device__")) {
      const int type = producer_device_type(obj, op, arg);
      if (type == kDevCUDA || type == kDevCUDAManaged) {
        consumer_stream = py::int_(stream != 0 ? stream : kLegacyStream);
      }
    }
    py::object capsule;
    try {
      capsule = obj.attr("__dlpack__")(py::arg("stream") = consumer_stream);
    } catch (py::error_already_set& e) {
      // Host memory DLPack refuses (a read-only numpy array) is read, or refused as an output,
      // through the buffer protocol.
      if (e.matches(PyExc_BufferError) && consumer_stream.is_none() &&
          PyObject_CheckBuffer(obj.ptr())) {
        return import_buffer(obj, op, arg, writable);
      }
      raise_rudnn(ErrorCode::InvalidArgument,
                  where(op, arg) + ": __dlpack__ raised " + describe(e));
    }
    return import_capsule(capsule, op, arg);
  }
  if (PyObject_CheckBuffer(obj.ptr())) return import_buffer(obj, op, arg, writable);
  raise_rudnn(ErrorCode::DTypeMismatch,
              where(op, arg) +
                  " must be an array supporting DLPack (__dlpack__) or the "
                  "buffer protocol, got " +
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
    const bool same =
        (want_type == dev_type || (dev_type == kDevCPU && want_type == kDevCUDAHost)) &&
        (dev_type == kDevCPU || want_id == dev_id);
    if (!same) {
      raise_python(PyExc_BufferError, "Tensor.__dlpack__: cannot export a tensor on " +
                                          t.device().str() + " to DLPack device (" +
                                          std::to_string(want_type) + ", " +
                                          std::to_string(want_id) + ")");
    }
  }
  py::object copy = kwarg("copy");
  const bool want_copy = !copy.is_none() && copy.cast<bool>();

  Tensor out = t;
  if (t.device().is_cuda()) {
    long long consumer = static_cast<long long>(kLegacyStream);  // None: the legacy default stream
    if (!stream.is_none()) {
      if (!PyLong_Check(stream.ptr()))
        raise_python(PyExc_TypeError, "Tensor.__dlpack__: stream must be an int or None");
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
        rudnn::Stream::borrow(t.device(), reinterpret_cast<rudnn::cuda_stream_t>(
                                              static_cast<std::uintptr_t>(consumer)))
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

}  // namespace

// ---- OpArgs ---------------------------------------------------------------------------------

OpArgs::OpArgs(const char* op, py::handle stream)
    : op_(op),
      torch_(py::isinstance<TorchCurrentStream>(stream) ? &stream.cast<const TorchCurrentStream&>()
                                                         : nullptr),
      stream_(torch_ != nullptr ? torch_->handle : parse_stream(stream, op)) {}

Tensor OpArgs::import(py::handle obj, const char* arg, bool writable) const {
  if (obj.is_none())
    raise_rudnn(ErrorCode::InvalidArgument, where(op_, arg) + " is None; expected a tensor");
  return import_array(obj, op_, arg, stream_, writable, torch_);
}

Tensor OpArgs::tensor(py::handle obj, const char* arg) const {
  return import(obj, arg, /*writable=*/false);
}

Tensor OpArgs::optional_tensor(py::handle obj, const char* arg) const {
  return obj.is_none() ? Tensor() : import(obj, arg, /*writable=*/false);
}

Tensor OpArgs::output(py::handle obj, const char* arg) const {
  return import(obj, arg, /*writable=*/true);
}

std::vector<Tensor> OpArgs::outputs(py::handle out, std::initializer_list<const char*> args) const {
  const std::string expected = "out must be a tuple of " + std::to_string(args.size()) + " arrays";
  if (!py::isinstance<py::tuple>(out) && !py::isinstance<py::list>(out)) {
    raise_rudnn(ErrorCode::InvalidArgument,
                std::string(op_) + ": " + expected + ", got " + type_name(out));
  }
  py::sequence seq = py::reinterpret_borrow<py::sequence>(out);
  if (seq.size() != args.size()) {
    raise_rudnn(ErrorCode::InvalidArgument,
                std::string(op_) + ": " + expected + ", got " + std::to_string(seq.size()));
  }
  std::vector<Tensor> tensors;
  size_t i = 0;
  for (const char* arg : args) {
    py::object item = seq[i++];
    tensors.push_back(item.is_none() ? Tensor() : import(item, arg, /*writable=*/true));
  }
  return tensors;
}

namespace {

// bool is an int to Python, but never a number or an index here (eps=True is a mistake);
// numpy's bool too.
bool is_bool(py::handle value) {
  if (PyBool_Check(value.ptr())) return true;
  const std::string name = Py_TYPE(value.ptr())->tp_name;
  return name == "numpy.bool_" || name == "numpy.bool";
}

}  // namespace

bool OpArgs::is_scalar(py::handle value) {
  return PyFloat_Check(value.ptr()) || PyLong_Check(value.ptr());
}

float OpArgs::float32(py::handle value, const char* arg) const {
  if (is_bool(value)) {
    raise_rudnn(ErrorCode::InvalidArgument,
                where(op_, arg) + " must be a number, got " + type_name(value));
  }
  PyObject* as_float = PyNumber_Float(value.ptr());
  if (as_float == nullptr) {
    py::error_already_set e;
    raise_rudnn(ErrorCode::InvalidArgument,
                where(op_, arg) + " must be a number (" + describe(e) + ")");
  }
  const double given = PyFloat_AS_DOUBLE(as_float);
  Py_DECREF(as_float);
  const float converted = static_cast<float>(given);
  // The op checks the float32 value; a value that float32 cannot hold is refused here,
  // reporting the value given rather than the 0 or inf it would round to.
  const bool out_of_range =
      std::isfinite(given) &&
      (std::fabs(given) > static_cast<double>(FLT_MAX) || (given != 0.0 && converted == 0.0f));
  if (out_of_range) {
    raise_rudnn(ErrorCode::InvalidArgument,
                where(op_, arg) + " = " + py::repr(value).cast<std::string>() +
                    " is outside float32's range (the op computes in float32)");
  }
  return converted;
}

std::optional<int64_t> OpArgs::optional_int(py::handle value, const char* arg) const {
  if (value.is_none()) return std::nullopt;
  if (is_bool(value) || !PyIndex_Check(value.ptr())) {
    raise_rudnn(ErrorCode::InvalidArgument,
                where(op_, arg) + " must be an int or None, got " + type_name(value));
  }
  py::int_ index = py::reinterpret_steal<py::int_>(PyNumber_Index(value.ptr()));
  if (!index) throw py::error_already_set();
  int overflow = 0;
  const long long v = PyLong_AsLongLongAndOverflow(index.ptr(), &overflow);
  if (overflow != 0) {
    raise_rudnn(
        ErrorCode::InvalidArgument,
        where(op_, arg) + " = " + py::repr(value).cast<std::string>() + " does not fit in 64 bits");
  }
  return static_cast<int64_t>(v);
}

rudnn::Stream OpArgs::stream_for(const Tensor& first) const {
  if (stream_ == 0 || !first.defined() || first.device().is_cpu()) return {};
  return rudnn::Stream::borrow(first.device(), reinterpret_cast<rudnn::cuda_stream_t>(stream_));
}

py::object wrap(Tensor t) {
  if (!t.defined()) return py::none();
  return py::cast(std::move(t));
}

// ---- Core bindings --------------------------------------------------------------------------

void bind_core(py::module_& m) {
  // ---- Exceptions.
  {
    g_error = PyErr_NewExceptionWithDoc("rudnn.Error", "Base class of every error ruDNN raises.",
                                        PyExc_Exception, nullptr);
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
        {ErrorCode::DeviceMismatch, "DeviceMismatch", PyExc_ValueError,
         "Operands (or a stream) on different devices."},
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
  m.def(
      "version", [] { return std::string(rudnn::version()); },
      "The ruDNN library version, 'major.minor.patch'.");
  m.def("cuda_device_count", &rudnn::cuda_device_count,
        "CUDA devices visible to this process (0 in a CPU-only build or without a usable driver).");
  m.def("built_with_cuda", &rudnn::built_with_cuda,
        "Whether this build of ruDNN has the CUDA backend.");

  // ---- Autotune's record (rudnn/autotune.h; documented in rudnn/__init__.py).
  m.def("autotune_built", &rudnn::autotune_built);
  m.def("autotune_entries", [] {
    py::list out;
    for (const rudnn::AutotuneEntry& e : rudnn::autotune_entries()) {
      py::dict timings;
      for (const rudnn::AutotuneTiming& t : e.timings)
        timings[py::str(t.candidate)] = t.milliseconds;
      py::dict entry;
      entry["key"] = e.key;
      entry["choice"] = e.choice;
      entry["timings_ms"] = timings;
      entry["measurements"] = e.measurements;
      out.append(entry);
    }
    return out;
  });
  m.def("autotune_clear", &rudnn::autotune_clear);
  m.def("autotune_set_file", &rudnn::autotune_set_file, py::arg("path"));
  m.def("autotune_file", &rudnn::autotune_file);

  // ---- Tensor.
  py::class_<Tensor>(m, "Tensor", py::buffer_protocol(), R"doc(
A ruDNN tensor: a strided view of CPU or CUDA memory, returned by ruDNN's ops.

It is DLPack-capable (``torch.from_dlpack(t)``, ``numpy.from_dlpack(t)``, ``cupy.from_dlpack(t)``
share its memory without copying) and, on the CPU, supports the buffer protocol
(``numpy.asarray(t)``, ``memoryview(t)``; not for bfloat16). Not constructible directly.
)doc")
      .def_property_readonly(
          "shape", [](const Tensor& t) { return py::tuple(py::cast(t.shape())); },
          "The shape, a tuple of ints.")
      .def_property_readonly(
          "strides", [](const Tensor& t) { return py::tuple(py::cast(t.strides())); },
          "The strides in elements (not bytes), a tuple of ints.")
      .def_property_readonly(
          "dtype", [](const Tensor& t) { return dtype_py_name(t.dtype()); },
          "The element type: 'float32', 'float16', 'bfloat16', 'float64', 'int32', 'int64', "
          "'uint32', 'uint8' or 'bool'.")
      .def_property_readonly(
          "device", [](const Tensor& t) { return t.device().str(); }, "'cpu' or 'cuda:<index>'.")
      .def_property_readonly("ndim", &Tensor::dim)
      .def_property_readonly("size", &Tensor::numel, "The number of elements.")
      .def_property_readonly("itemsize", &Tensor::itemsize)
      .def_property_readonly(
          "data_ptr", [](const Tensor& t) { return reinterpret_cast<std::uintptr_t>(t.data()); },
          "The address of element [0, ..., 0].")
      .def("is_contiguous", &Tensor::is_contiguous)
      .def("__len__",
           [](const Tensor& t) {
             if (t.dim() == 0) raise_python(PyExc_TypeError, "len() of a 0-d tensor");
             return t.shape()[0];
           })
      .def("__repr__", [](const Tensor& t) { return "rudnn." + t.str(); })
      .def("__dlpack__", &tensor_dlpack, py::arg("stream") = py::none(),
           "DLPack export (stream: the consumer's stream for CUDA tensors, None for CPU ones).")
      .def("__dlpack_device__",
           [](const Tensor& t) {
             return py::make_tuple(dlpack_device(t).first, dlpack_device(t).second);
           })
      .def_buffer([](const Tensor& t) -> py::buffer_info {
        if (!t.device().is_cpu()) {
          raise_python(PyExc_BufferError,
                       "rudnn.Tensor: the buffer protocol needs a CPU tensor, this one is on " +
                           t.device().str() + " (use DLPack)");
        }
        const std::string format = dtype_buffer_format(t.dtype());
        if (format.empty()) {
          raise_python(PyExc_BufferError, std::string("rudnn.Tensor: ") + dtype_py_name(t.dtype()) +
                                              " has no buffer-protocol format (use DLPack)");
        }
        std::vector<py::ssize_t> shape(t.shape().begin(), t.shape().end()), strides;
        for (int64_t s : t.strides())
          strides.push_back(static_cast<py::ssize_t>(s * static_cast<int64_t>(t.itemsize())));
        return py::buffer_info(t.data(), static_cast<py::ssize_t>(t.itemsize()), format, t.dim(),
                               shape, strides);
      });

  m.def(
      "from_dlpack",
      [](py::object obj, py::object stream) {
        return OpArgs("from_dlpack", stream).tensor(obj, "obj");
      },
      py::arg("obj"), py::kw_only(), py::arg("stream") = py::none(),
      "Zero-copy import of a DLPack-capable array (or a host buffer) as a rudnn Tensor. For a CUDA "
      "producer, `stream` is the stream the data will be used on (default: the legacy default "
      "stream).");

  py::class_<TorchCurrentStream>(m, "_TorchCurrentStream",
                                 "torch's current stream on a CUDA device, as the package's "
                                 "functions pass it (not public API; see interop.h).")
      .def(py::init([](std::uintptr_t handle, int device, py::object tensor_type,
                       py::object to_dlpack) {
             return TorchCurrentStream{handle, device, std::move(tensor_type),
                                       std::move(to_dlpack)};
           }),
           py::arg("handle"), py::arg("device"), py::arg("tensor_type"),
           py::arg("to_dlpack") = py::none())
      .def_readonly("cuda_stream", &TorchCurrentStream::handle)
      .def_readonly("device", &TorchCurrentStream::device);
}

}  // namespace rudnn_py
