// Element types, and host-side 16-bit floating-point types.
//
// rudnn::half and rudnn::bfloat16 are plain 16-bit storage types with the same bit layout
// as CUDA's __half and __nv_bfloat16, so host buffers of them can be copied to and from the
// device as is. Conversions from float round to nearest, ties to even; NaN stays NaN.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>

namespace rudnn {

enum class DType : uint8_t {
  f32,
  f16,
  bf16,
  f64,  // host reference and tests; no op takes it on the GPU
  i32,
  i64,
  u32,
  u8,
  boolean,
};

// Bytes per element.
size_t dtype_size(DType dtype) noexcept;
// "f32", "bf16", ...
const char* dtype_name(DType dtype) noexcept;
bool is_floating_point(DType dtype) noexcept;
bool is_integral(DType dtype) noexcept;  // i32, i64, u32, u8 (not boolean)

namespace detail {

inline uint32_t float_bits(float f) noexcept {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}
inline float bits_float(uint32_t u) noexcept {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

// IEEE binary16 from binary32, round to nearest even, with subnormals and overflow to inf.
inline uint16_t float_to_half_bits(float f) noexcept {
  const uint32_t x = float_bits(f);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t abs = x & 0x7fffffffu;
  if (abs >= 0x7f800000u) {  // inf or NaN
    return static_cast<uint16_t>(sign | 0x7c00u | (abs > 0x7f800000u ? 0x0200u : 0u));
  }
  if (abs >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // rounds past 65504
  if (abs < 0x38800000u) {  // result is subnormal (or zero) in half
    // Scale into the subnormal range by adding 0.5 (2^-1) and reading the low bits: the FPU
    // does the round-to-nearest-even for us.
    const float shifted = bits_float(abs) + 0.5f;
    return static_cast<uint16_t>(sign | (float_bits(shifted) - 0x3f000000u));
  }
  const uint32_t mant_odd = (abs >> 13) & 1u;
  const uint32_t rounded = abs + 0xc8000fffu + mant_odd;  // rebias exponent (-112 << 23) and round
  return static_cast<uint16_t>(sign | (rounded >> 13));
}

inline float half_bits_to_float(uint16_t h) noexcept {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t mant = h & 0x3ffu;
  if (exp == 0x1f) return bits_float(sign | 0x7f800000u | (mant << 13));  // inf / NaN
  if (exp == 0) {
    // Zero or subnormal: mant * 2^-24, exact in float.
    const float v = static_cast<float>(mant) * 5.9604644775390625e-8f;
    return sign ? -v : v;
  }
  return bits_float(sign | ((exp + 112u) << 23) | (mant << 13));
}

inline uint16_t float_to_bfloat16_bits(float f) noexcept {
  const uint32_t x = float_bits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u)
    return static_cast<uint16_t>((x >> 16) | 0x0040u);  // quiet NaN
  const uint32_t lsb = (x >> 16) & 1u;
  return static_cast<uint16_t>((x + 0x7fffu + lsb) >> 16);
}

inline float bfloat16_bits_to_float(uint16_t b) noexcept {
  return bits_float(static_cast<uint32_t>(b) << 16);
}

}  // namespace detail

struct half {
  uint16_t bits = 0;
  half() = default;
  explicit half(float f) noexcept : bits(detail::float_to_half_bits(f)) {}
  static half from_bits(uint16_t b) noexcept {
    half h;
    h.bits = b;
    return h;
  }
  explicit operator float() const noexcept { return detail::half_bits_to_float(bits); }
};

struct bfloat16 {
  uint16_t bits = 0;
  bfloat16() = default;
  explicit bfloat16(float f) noexcept : bits(detail::float_to_bfloat16_bits(f)) {}
  static bfloat16 from_bits(uint16_t b) noexcept {
    bfloat16 h;
    h.bits = b;
    return h;
  }
  explicit operator float() const noexcept { return detail::bfloat16_bits_to_float(bits); }
};

static_assert(sizeof(half) == 2 && sizeof(bfloat16) == 2);

// The DType of a C++ element type: dtype_of<float>() == DType::f32.
template <class T>
constexpr DType dtype_of();
template <>
constexpr DType dtype_of<float>() {
  return DType::f32;
}
template <>
constexpr DType dtype_of<half>() {
  return DType::f16;
}
template <>
constexpr DType dtype_of<bfloat16>() {
  return DType::bf16;
}
template <>
constexpr DType dtype_of<double>() {
  return DType::f64;
}
template <>
constexpr DType dtype_of<int32_t>() {
  return DType::i32;
}
template <>
constexpr DType dtype_of<int64_t>() {
  return DType::i64;
}
template <>
constexpr DType dtype_of<uint32_t>() {
  return DType::u32;
}
template <>
constexpr DType dtype_of<uint8_t>() {
  return DType::u8;
}
template <>
constexpr DType dtype_of<bool>() {
  return DType::boolean;
}

}  // namespace rudnn
