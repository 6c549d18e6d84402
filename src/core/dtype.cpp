#include "rudnn/dtype.h"

namespace rudnn {

size_t dtype_size(DType dtype) noexcept {
  switch (dtype) {
    case DType::f32:
      return 4;
    case DType::f16:
      return 2;
    case DType::bf16:
      return 2;
    case DType::f64:
      return 8;
    case DType::i32:
      return 4;
    case DType::i64:
      return 8;
    case DType::u32:
      return 4;
    case DType::u8:
      return 1;
    case DType::boolean:
      return 1;
  }
  return 0;
}

const char* dtype_name(DType dtype) noexcept {
  switch (dtype) {
    case DType::f32:
      return "f32";
    case DType::f16:
      return "f16";
    case DType::bf16:
      return "bf16";
    case DType::f64:
      return "f64";
    case DType::i32:
      return "i32";
    case DType::i64:
      return "i64";
    case DType::u32:
      return "u32";
    case DType::u8:
      return "u8";
    case DType::boolean:
      return "bool";
  }
  return "?";
}

bool is_floating_point(DType dtype) noexcept {
  return dtype == DType::f32 || dtype == DType::f16 || dtype == DType::bf16 || dtype == DType::f64;
}

bool is_integral(DType dtype) noexcept {
  return dtype == DType::i32 || dtype == DType::i64 || dtype == DType::u32 || dtype == DType::u8;
}

}  // namespace rudnn
