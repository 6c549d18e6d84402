// Element access for the CPU references: floating tensors of any dtype read as double and
// written from double. 16-bit and F32 values go through FP32 (what the kernels round from),
// F64 values are exact. One set for every family's reference.
#pragma once

#include <cstdint>
#include <type_traits>

#include "rudnn/dtype.h"

namespace rudnn::common {

// Element i of a T array as double.
template <class T>
double load_value(const void* base, int64_t i) {
  if constexpr (std::is_same_v<T, double>) {
    return static_cast<const double*>(base)[i];
  } else {
    return static_cast<double>(static_cast<float>(static_cast<const T*>(base)[i]));
  }
}

// v stored as element i of a T array (rounded through FP32 unless T is double).
template <class T>
void store_value(void* base, int64_t i, double v) {
  if constexpr (std::is_same_v<T, double>) {
    static_cast<double*>(base)[i] = v;
  } else if constexpr (std::is_same_v<T, float>) {
    static_cast<float*>(base)[i] = static_cast<float>(v);
  } else {
    static_cast<T*>(base)[i] = T(static_cast<float>(v));
  }
}

// f(T{}) for the element type of a floating dtype (f32, f16, bf16, f64); other dtypes call
// nothing (the entry points validated them away).
template <class F>
void with_host_float_type(DType dtype, F&& f) {
  switch (dtype) {
    case DType::f32:
      return f(float{});
    case DType::f16:
      return f(half{});
    case DType::bf16:
      return f(bfloat16{});
    case DType::f64:
      return f(double{});
    default:
      return;
  }
}

// The same, with the dtype known only at run time (one switch per element: for references
// that mix dtypes within a loop).
inline double load_value(DType dtype, const void* base, int64_t i) {
  double v = 0;
  with_host_float_type(dtype, [&](auto tag) { v = load_value<decltype(tag)>(base, i); });
  return v;
}
inline void store_value(DType dtype, void* base, int64_t i, double v) {
  with_host_float_type(dtype, [&](auto tag) { store_value<decltype(tag)>(base, i, v); });
}

}  // namespace rudnn::common
