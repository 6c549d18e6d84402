#include "common/op_call.h"

#include <cmath>

#include "core/strided.h"

namespace rudnn::common {

using detail::cat;
using detail::fail;

namespace {

// The device of an op's first operand, naming it when it is missing.
Device first_device(const char* op, const char* name, const Tensor& first) {
  if (!first.defined())
    fail(ErrorCode::InvalidArgument, cat(op, ": ", name, " is an undefined tensor"));
  return first.device();
}

}  // namespace

OpCall::OpCall(const char* op_name, const char* first_name, const Tensor& first, const Stream& s)
    : op(op_name),
      device(first_device(op_name, first_name, first)),
      stream(resolve_stream(s, device, op_name)) {}

bool is_float_dtype(DType d) { return d == DType::f32 || d == DType::f16 || d == DType::bf16; }

void require_defined(const OpCall& call, const char* name, const Tensor& t) {
  if (!t.defined())
    fail(ErrorCode::InvalidArgument, cat(call.op, ": ", name, " is an undefined tensor"));
}

void require_device(const OpCall& call, const char* name, const Tensor& t) {
  if (t.device() != call.device) {
    fail(ErrorCode::DeviceMismatch, cat(call.op, ": ", name, " is on ", t.device().str(),
                                        ", the operands on ", call.device.str()));
  }
}

void require_dtype(const OpCall& call, const char* name, const Tensor& t,
                   std::initializer_list<DType> allowed) {
  require_defined(call, name, t);
  for (DType d : allowed) {
    if (t.dtype() == d) {
      require_device(call, name, t);
      return;
    }
  }
  std::string expected;
  size_t i = 0;
  for (DType d : allowed) {
    if (i > 0) expected += i + 1 == allowed.size() ? " or " : ", ";
    expected += dtype_name(d);
    ++i;
  }
  fail(ErrorCode::DTypeMismatch,
       cat(call.op, ": ", name, " has dtype ", dtype_name(t.dtype()), "; expected ", expected));
}

void require_float(const OpCall& call, const char* name, const Tensor& t) {
  require_defined(call, name, t);
  const bool host_f64 = t.dtype() == DType::f64 && t.device().is_cpu();
  if (!is_float_dtype(t.dtype()) && !host_f64) {
    fail(ErrorCode::DTypeMismatch,
         cat(call.op, ": ", name, " has dtype ", dtype_name(t.dtype()),
             t.dtype() == DType::f64 ? "; f64 runs on the CPU only, expected f32, f16 or bf16"
                                     : "; expected f32, f16 or bf16 (f64 on the CPU)"));
  }
  require_device(call, name, t);
}

void require_shape(const OpCall& call, const char* name, const Tensor& t, const Shape& expected,
                   const char* expected_what) {
  if (t.shape() != expected) {
    fail(ErrorCode::ShapeMismatch, cat(call.op, ": ", name, " has shape ", shape_str(t.shape()),
                                       ", expected ", expected_what, " = ", shape_str(expected)));
  }
}

void require_like(const OpCall& call, const char* name, const Tensor& t, const char* ref_name,
                  const Tensor& ref) {
  require_defined(call, name, t);
  if (t.dtype() != ref.dtype()) {
    fail(ErrorCode::DTypeMismatch,
         cat(call.op, ": ", name, " has dtype ", dtype_name(t.dtype()), ", ", ref_name, " has ",
             dtype_name(ref.dtype()), "; they must match"));
  }
  if (t.shape() != ref.shape()) {
    fail(ErrorCode::ShapeMismatch,
         cat(call.op, ": ", name, " has shape ", shape_str(t.shape()), ", ", ref_name, " has ",
             shape_str(ref.shape()), "; they must match"));
  }
  require_device(call, name, t);
}

namespace {

template <class T>
void finite_positive(const OpCall& call, const char* name, T value) {
  if (!(std::isfinite(value) && value > T(0))) {
    fail(ErrorCode::InvalidArgument,
         cat(call.op, ": ", name, " must be finite and > 0, got ", value));
  }
}

template <class T>
void finite(const OpCall& call, const char* name, T value) {
  if (!std::isfinite(value))
    fail(ErrorCode::InvalidArgument, cat(call.op, ": ", name, " must be finite, got ", value));
}

}  // namespace

void require_finite_positive(const OpCall& call, const char* name, float value) {
  finite_positive(call, name, value);
}
void require_finite_positive(const OpCall& call, const char* name, double value) {
  finite_positive(call, name, value);
}
void require_finite(const OpCall& call, const char* name, float value) {
  finite(call, name, value);
}
void require_finite(const OpCall& call, const char* name, double value) {
  finite(call, name, value);
}

void require_out(const OpCall& call, const char* name, const Tensor& out, const Shape& shape,
                 DType dtype) {
  require_defined(call, name, out);
  if (out.dtype() != dtype) {
    fail(ErrorCode::DTypeMismatch, cat(call.op, ": ", name, " has dtype ", dtype_name(out.dtype()),
                                       ", expected ", dtype_name(dtype)));
  }
  if (out.shape() != shape) {
    fail(ErrorCode::ShapeMismatch, cat(call.op, ": ", name, " has shape ", shape_str(out.shape()),
                                       ", expected ", shape_str(shape)));
  }
  require_device(call, name, out);
}

void require_no_overlap(const OpCall& call, const char* name, const Tensor& out,
                        std::initializer_list<std::pair<const char*, const Tensor*>> others) {
  for (const auto& [other_name, other] : others) {
    if (detail::may_overlap(out, *other)) {
      fail(ErrorCode::InvalidArgument, cat(call.op, ": ", name, " overlaps ", other_name,
                                           "; outputs must not alias inputs or each other"));
    }
  }
}

}  // namespace rudnn::common
