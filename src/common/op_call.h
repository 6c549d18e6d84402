// The shared front half of every op: one call's context, its argument checks, and the
// dispatch of a validated problem to a backend.
//
// A family's public function builds an OpCall, checks every argument through the require_*
// functions below (or its own rules, written the same way), fills its plain problem struct
// and hands it to run_backend. Backends never re-validate and never throw for user errors.
// Every message starts with the op's name and names the argument and the rule it broke.
#pragma once

#include <initializer_list>
#include <utility>
#include <vector>

#include "core/check.h"
#include "rudnn/stream.h"
#include "rudnn/tensor.h"

namespace rudnn::common {

// One call's op name, device and resolved stream, and the temporaries (dense copies of odd
// layouts) that must live until its work is queued; their storage is freed stream-ordered
// after the kernels that read them.
struct OpCall {
  const char* op;
  Device device;
  Stream stream;
  std::vector<Tensor> temporaries;

  // `first` (named `first_name`) decides the device: every other operand must be on it.
  OpCall(const char* op_name, const char* first_name, const Tensor& first, const Stream& s);

  // Keeps `t` alive until the call's work is queued and returns a reference to it.
  const Tensor& keep(Tensor t) {
    temporaries.push_back(std::move(t));
    return temporaries.back();
  }

  // An uninitialised tensor on the call's device and stream.
  Tensor empty(const Shape& shape, DType dtype) const {
    return Tensor::empty(shape, dtype, device, stream);
  }
};

// ---- Input checks -------------------------------------------------------------------------

bool is_float_dtype(DType d);  // f32, f16, bf16: the dtypes the GPU kernels take

void require_defined(const OpCall& call, const char* name, const Tensor& t);
void require_device(const OpCall& call, const char* name, const Tensor& t);
// A defined tensor on the call's device whose dtype is one of `allowed`.
void require_dtype(const OpCall& call, const char* name, const Tensor& t,
                   std::initializer_list<DType> allowed);
// F32/F16/BF16 (and F64 on the CPU, where the reference computes in float64), on the call's
// device.
void require_float(const OpCall& call, const char* name, const Tensor& t);
void require_shape(const OpCall& call, const char* name, const Tensor& t, const Shape& expected,
                   const char* expected_what);
// A second operand that must match `ref` in shape and dtype (dy vs x, residual vs x).
void require_like(const OpCall& call, const char* name, const Tensor& t, const char* ref_name,
                  const Tensor& ref);
// A scalar option that must be finite and > 0 (eps, scale, softcap); the message shows the
// value in its own precision.
void require_finite_positive(const OpCall& call, const char* name, float value);
void require_finite_positive(const OpCall& call, const char* name, double value);
void require_finite(const OpCall& call, const char* name, float value);
void require_finite(const OpCall& call, const char* name, double value);

// ---- Output checks (the _into forms) --------------------------------------------------------

// A defined output of the given shape and dtype on the call's device.
void require_out(const OpCall& call, const char* name, const Tensor& out, const Shape& shape,
                 DType dtype);
// `out` must share no memory with any of `others` (undefined ones are skipped). Checked on
// address ranges, so two views of one allocation imported separately are caught too.
void require_no_overlap(const OpCall& call, const char* name, const Tensor& out,
                        std::initializer_list<std::pair<const char*, const Tensor*>> others);

// ---- Dispatch ------------------------------------------------------------------------------

// Runs a validated problem where the call's operands live: `cpu(problem)` on the host,
// `cuda(problem, stream)` on a CUDA device. Use RUDNN_BACKENDS to name the pair.
template <class Problem, class Cpu, class Cuda>
void run_backend(const OpCall& call, const Problem& problem, Cpu cpu, [[maybe_unused]] Cuda cuda) {
  if (call.device.is_cpu()) {
    cpu(problem);
    return;
  }
#if RUDNN_WITH_CUDA
  cuda(problem, call.stream);
#else
  detail::fail(ErrorCode::Unsupported, detail::cat(call.op, ": ruDNN was built without CUDA"));
#endif
}

}  // namespace rudnn::common

// The backend pair of a family's function `fn`: `family::reference::fn` and, in CUDA builds,
// `family::cuda::fn`.
#if RUDNN_WITH_CUDA
#define RUDNN_BACKENDS(family, fn) ::rudnn::family::reference::fn, ::rudnn::family::cuda::fn
#else
#define RUDNN_BACKENDS(family, fn) ::rudnn::family::reference::fn, nullptr
#endif
