// DType metadata, and the host-side 16-bit float types rudnn::half and rudnn::bfloat16.
//
// The conversions are checked against an independent reference written in double
// precision (decode with ldexp, round with nearbyint), exhaustively over every 16-bit
// pattern where that is possible and on many random floats elsewhere.
#include <gtest/gtest.h>

#include <algorithm>
#include <cfenv>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "support/test_support.h"

namespace rudnn {
namespace {

using test::Rng;

constexpr DType kAllDTypes[] = {DType::f32, DType::f16, DType::bf16, DType::f64,    DType::i32,
                                DType::i64, DType::u32, DType::u8,   DType::boolean};

// ---- Independent references ------------------------------------------------------------------

// A binary floating-point format as the reference sees it.
struct Format {
  int fraction_bits;  // explicit mantissa bits
  int exponent_bits;
  int bias;
  const char* name;
};
constexpr Format kHalf{10, 5, 15, "half"};
constexpr Format kBf16{7, 8, 127, "bfloat16"};

// The value of 16-bit pattern `bits` in `f`, computed from the definition.
double reference_decode(uint16_t bits, const Format& f) {
  const int sign = bits >> 15;
  const int exponent = (bits >> f.fraction_bits) & ((1 << f.exponent_bits) - 1);
  const int fraction = bits & ((1 << f.fraction_bits) - 1);
  double magnitude;
  if (exponent == (1 << f.exponent_bits) - 1) {
    magnitude = fraction ? std::numeric_limits<double>::quiet_NaN()
                         : std::numeric_limits<double>::infinity();
  } else if (exponent == 0) {  // subnormal: fraction * 2^(1 - bias - fraction_bits)
    magnitude = std::ldexp(fraction, 1 - f.bias - f.fraction_bits);
  } else {
    magnitude = std::ldexp((1 << f.fraction_bits) + fraction, exponent - f.bias - f.fraction_bits);
  }
  return sign ? -magnitude : magnitude;
}

double largest_finite(const Format& f) {
  const int max_exponent = (1 << f.exponent_bits) - 2 - f.bias;
  return std::ldexp((2 << f.fraction_bits) - 1, max_exponent - f.fraction_bits);
}

// x rounded to `f`, to nearest with ties to even, with gradual underflow and overflow to
// infinity, in double: x / quantum is exact (a power-of-two scaling), nearbyint rounds it
// to an integer ties-to-even in the default rounding mode.
double reference_round(double x, const Format& f) {
  if (std::isnan(x) || std::isinf(x) || x == 0.0) return x;
  int e = 0;
  std::frexp(std::fabs(x), &e);  // |x| = m * 2^e, m in [0.5, 1): leading bit at 2^(e-1)
  const int min_normal_exponent = 1 - f.bias;
  const int exponent = std::max(e - 1, min_normal_exponent);
  const double quantum = std::ldexp(1.0, exponent - f.fraction_bits);
  double r = std::nearbyint(std::fabs(x) / quantum) * quantum;
  if (r > largest_finite(f)) r = std::numeric_limits<double>::infinity();
  return std::copysign(r, x);  // a result of 0 keeps the sign of x
}

float f32(uint32_t bits) { return detail::bits_float(bits); }

// Same value (NaN matches NaN) and same sign bit, so that -0 and +0 differ.
::testing::AssertionResult same_value(double got, double expected) {
  if (std::isnan(got) && std::isnan(expected)) return ::testing::AssertionSuccess();
  if (got == expected && std::signbit(got) == std::signbit(expected))
    return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << got << " vs expected " << expected;
}

uint16_t to_half(float f) { return half(f).bits; }
uint16_t to_bf16(float f) { return bfloat16(f).bits; }
float from_half(uint16_t b) { return static_cast<float>(half::from_bits(b)); }
float from_bf16(uint16_t b) { return static_cast<float>(bfloat16::from_bits(b)); }

// ---- DType metadata ----------------------------------------------------------------------------

TEST(DType, SizeNameAndCategoryOfEveryDType) {
  struct Expected {
    DType dtype;
    size_t size;
    const char* name;
    bool floating, integral;
  };
  const Expected table[] = {
      {DType::f32, 4, "f32", true, false},       {DType::f16, 2, "f16", true, false},
      {DType::bf16, 2, "bf16", true, false},     {DType::f64, 8, "f64", true, false},
      {DType::i32, 4, "i32", false, true},       {DType::i64, 8, "i64", false, true},
      {DType::u32, 4, "u32", false, true},       {DType::u8, 1, "u8", false, true},
      {DType::boolean, 1, "bool", false, false},
  };
  ASSERT_EQ(std::size(table), std::size(kAllDTypes));
  for (const Expected& e : table) {
    SCOPED_TRACE(e.name);
    EXPECT_EQ(dtype_size(e.dtype), e.size);
    EXPECT_STREQ(dtype_name(e.dtype), e.name);
    EXPECT_EQ(is_floating_point(e.dtype), e.floating);
    EXPECT_EQ(is_integral(e.dtype), e.integral);
  }
}

TEST(DType, DTypeOfMatchesTheCxxType) {
  static_assert(dtype_of<float>() == DType::f32 && dtype_of<half>() == DType::f16 &&
                dtype_of<bfloat16>() == DType::bf16 && dtype_of<double>() == DType::f64 &&
                dtype_of<int32_t>() == DType::i32 && dtype_of<int64_t>() == DType::i64 &&
                dtype_of<uint32_t>() == DType::u32 && dtype_of<uint8_t>() == DType::u8 &&
                dtype_of<bool>() == DType::boolean);
  // The element size of each dtype is the size of its C++ type (host buffers are copied as is).
  EXPECT_EQ(dtype_size(dtype_of<float>()), sizeof(float));
  EXPECT_EQ(dtype_size(dtype_of<half>()), sizeof(half));
  EXPECT_EQ(dtype_size(dtype_of<bfloat16>()), sizeof(bfloat16));
  EXPECT_EQ(dtype_size(dtype_of<double>()), sizeof(double));
  EXPECT_EQ(dtype_size(dtype_of<int32_t>()), sizeof(int32_t));
  EXPECT_EQ(dtype_size(dtype_of<int64_t>()), sizeof(int64_t));
  EXPECT_EQ(dtype_size(dtype_of<uint32_t>()), sizeof(uint32_t));
  EXPECT_EQ(dtype_size(dtype_of<uint8_t>()), sizeof(uint8_t));
  EXPECT_EQ(dtype_size(dtype_of<bool>()), sizeof(bool));
  EXPECT_EQ(half().bits, 0u);
  EXPECT_EQ(bfloat16().bits, 0u);
}

// ---- Exhaustive: every 16-bit pattern ------------------------------------------------------

TEST(Half, DecodeOfEveryBitPatternMatchesReference) {
  ASSERT_EQ(std::fegetround(), FE_TONEAREST);
  int nans = 0;
  for (uint32_t b = 0; b <= 0xffff; ++b) {
    const double expected = reference_decode(static_cast<uint16_t>(b), kHalf);
    nans += std::isnan(expected);
    ASSERT_TRUE(same_value(from_half(static_cast<uint16_t>(b)), expected))
        << "half bits 0x" << std::hex << b;
    if (std::isnan(expected)) {
      ASSERT_EQ(std::signbit(from_half(static_cast<uint16_t>(b))), b >= 0x8000);
    }
  }
  EXPECT_EQ(nans, 2 * 1023);
}

TEST(Half, EveryBitPatternRoundTripsThroughFloat) {
  for (uint32_t b = 0; b <= 0xffff; ++b) {
    const auto h = static_cast<uint16_t>(b);
    const uint16_t back = to_half(from_half(h));
    if (std::isnan(reference_decode(h, kHalf))) {
      // NaN stays NaN (the payload may be quietened) and keeps its sign.
      ASSERT_TRUE((back & 0x7c00u) == 0x7c00u && (back & 0x03ffu) != 0)
          << std::hex << b << " -> " << back;
      ASSERT_EQ(back & 0x8000u, h & 0x8000u) << std::hex << b;
    } else {
      ASSERT_EQ(back, h) << "half bits 0x" << std::hex << b;
    }
  }
}

TEST(BFloat16, DecodeOfEveryBitPatternMatchesReference) {
  int nans = 0;
  for (uint32_t b = 0; b <= 0xffff; ++b) {
    const double expected = reference_decode(static_cast<uint16_t>(b), kBf16);
    nans += std::isnan(expected);
    ASSERT_TRUE(same_value(from_bf16(static_cast<uint16_t>(b)), expected))
        << "bf16 bits 0x" << std::hex << b;
    // bfloat16 is the top half of a float, bit for bit.
    ASSERT_EQ(detail::float_bits(from_bf16(static_cast<uint16_t>(b))), b << 16);
  }
  EXPECT_EQ(nans, 2 * 127);
}

TEST(BFloat16, EveryBitPatternRoundTripsThroughFloat) {
  for (uint32_t b = 0; b <= 0xffff; ++b) {
    const auto h = static_cast<uint16_t>(b);
    const uint16_t back = to_bf16(from_bf16(h));
    if (std::isnan(reference_decode(h, kBf16))) {
      ASSERT_TRUE((back & 0x7f80u) == 0x7f80u && (back & 0x007fu) != 0)
          << std::hex << b << " -> " << back;
      ASSERT_EQ(back & 0x8000u, h & 0x8000u) << std::hex << b;
    } else {
      ASSERT_EQ(back, h) << "bf16 bits 0x" << std::hex << b;
    }
  }
}

// ---- Ties: the exact midpoint of every pair of adjacent finite values -----------------------

// For each adjacent pair (lo, lo+1) of finite non-negative patterns, the midpoint (exact in
// float: it needs one bit more than the 16-bit format) must round to whichever pattern is
// even, and the floats just below and above it to lo and lo+1. Both signs.
template <class Encode, class Decode>
void check_all_ties(uint16_t last_lo, Encode encode, Decode decode, const char* name) {
  SCOPED_TRACE(name);
  int checked = 0;
  for (uint32_t lo = 0; lo <= last_lo; ++lo) {
    const double a = decode(static_cast<uint16_t>(lo)), b = decode(static_cast<uint16_t>(lo + 1));
    const double mid_d = (a + b) / 2;
    const float mid = static_cast<float>(mid_d);
    ASSERT_EQ(static_cast<double>(mid), mid_d)
        << "midpoint not exact in float at 0x" << std::hex << lo;
    const uint16_t even = (lo % 2 == 0) ? static_cast<uint16_t>(lo) : static_cast<uint16_t>(lo + 1);
    for (const uint16_t sign : {uint16_t{0}, uint16_t{0x8000}}) {
      const float s = sign ? -1.0f : 1.0f;
      ASSERT_EQ(encode(s * mid), even | sign) << "tie above 0x" << std::hex << lo;
      ASSERT_EQ(encode(s * std::nextafter(mid, 0.0f)), lo | sign)
          << "just below tie above 0x" << std::hex << lo;
      ASSERT_EQ(encode(s * std::nextafter(mid, INFINITY)), (lo + 1) | sign)
          << "just above tie above 0x" << std::hex << lo;
    }
    ++checked;
  }
  EXPECT_EQ(checked, last_lo + 1);
}

TEST(Half, TiesRoundToEven) {
  // Named cases first, for readable failures: 1 + 2^-11 lies halfway between 1 (even
  // mantissa 0) and 1 + 2^-10 (odd), 1 + 3 * 2^-11 between odd 1 + 2^-10 and even 1 + 2^-9.
  EXPECT_EQ(to_half(1.0f + 0x1p-11f), 0x3c00);
  EXPECT_EQ(to_half(1.0f + 3 * 0x1p-11f), 0x3c02);
  EXPECT_EQ(to_half(2049.0f), to_half(2048.0f));  // spacing 2 above 2048
  EXPECT_EQ(to_half(2051.0f), to_half(2052.0f));
  EXPECT_EQ(to_half(-2049.0f), 0x8000 | to_half(2048.0f));
  // Every tie between finite halves, subnormal and normal (0x7bff is the largest finite).
  check_all_ties(
      0x7bfe, to_half, [](uint16_t b) { return reference_decode(b, kHalf); }, "half");
}

TEST(BFloat16, TiesRoundToEven) {
  EXPECT_EQ(to_bf16(1.0f + 0x1p-8f), 0x3f80);
  EXPECT_EQ(to_bf16(1.0f + 3 * 0x1p-8f), 0x3f82);
  EXPECT_EQ(to_bf16(257.0f), 0x4380);  // 256 and 258 are neighbours; 256 has the even mantissa
  EXPECT_EQ(to_bf16(259.0f), 0x4382);
  check_all_ties(
      0x7f7e, to_bf16, [](uint16_t b) { return reference_decode(b, kBf16); }, "bfloat16");
  // The tie between the largest finite (odd mantissa 0x7f) and infinity rounds to infinity.
  const float max_tie =
      static_cast<float>((reference_decode(0x7f7f, kBf16) + std::ldexp(1.0, 128)) / 2);
  EXPECT_EQ(to_bf16(max_tie), 0x7f80);
  EXPECT_EQ(to_bf16(std::nextafter(max_tie, 0.0f)), 0x7f7f);
}

// ---- Overflow, underflow, special values --------------------------------------------------

TEST(Half, OverflowsToInfinityPastTheLargestFinite) {
  EXPECT_EQ(to_half(65504.0f), 0x7bff);  // largest finite half
  EXPECT_EQ(from_half(0x7bff), 65504.0f);
  EXPECT_EQ(to_half(65519.0f), 0x7bff);
  EXPECT_EQ(to_half(std::nextafter(65520.0f, 0.0f)), 0x7bff);  // just below the tie
  EXPECT_EQ(to_half(65520.0f), 0x7c00);  // the tie with 2^16 rounds to even, i.e. to infinity
  EXPECT_EQ(to_half(-65520.0f), 0xfc00);
  EXPECT_EQ(to_half(-65504.0f), 0xfbff);
  EXPECT_EQ(to_half(1e6f), 0x7c00);
  EXPECT_EQ(to_half(std::numeric_limits<float>::max()), 0x7c00);
  EXPECT_EQ(to_half(-std::numeric_limits<float>::max()), 0xfc00);
}

TEST(BFloat16, OverflowsToInfinityPastTheLargestFinite) {
  const float bf16_max = static_cast<float>(largest_finite(kBf16));
  EXPECT_EQ(to_bf16(bf16_max), 0x7f7f);
  EXPECT_EQ(to_bf16(-bf16_max), 0xff7f);
  // FLT_MAX is above the halfway point between bf16's largest finite and 2^128.
  EXPECT_EQ(to_bf16(std::numeric_limits<float>::max()), 0x7f80);
  EXPECT_EQ(to_bf16(-std::numeric_limits<float>::max()), 0xff80);
}

TEST(Half, Subnormals) {
  EXPECT_EQ(to_half(0x1p-24f), 0x0001);  // smallest subnormal
  EXPECT_EQ(from_half(0x0001), 0x1p-24f);
  EXPECT_EQ(to_half(-0x1p-24f), 0x8001);
  // Half of the smallest subnormal is a tie between 0 (even) and 2^-24: it flushes to 0.
  EXPECT_EQ(to_half(0x1p-25f), 0x0000);
  EXPECT_EQ(to_half(std::nextafter(0x1p-25f, 1.0f)), 0x0001);
  EXPECT_EQ(to_half(0x1p-26f), 0x0000);
  EXPECT_EQ(to_half(std::numeric_limits<float>::denorm_min()), 0x0000);
  EXPECT_EQ(to_half(-0x1p-26f), 0x8000);     // underflow keeps the sign: -0
  EXPECT_EQ(to_half(3 * 0x1p-25f), 0x0002);  // tie between 1 and 2 units: 2 is even
  // Largest subnormal 1023 * 2^-24, smallest normal 2^-14, and the tie between them.
  EXPECT_EQ(to_half(1023 * 0x1p-24f), 0x03ff);
  EXPECT_EQ(from_half(0x03ff), 1023 * 0x1p-24f);
  EXPECT_EQ(to_half(0x1p-14f), 0x0400);
  EXPECT_EQ(from_half(0x0400), 0x1p-14f);
  EXPECT_EQ(to_half(1023.5f * 0x1p-24f), 0x0400);
  EXPECT_EQ(to_half(1022.5f * 0x1p-24f), 0x03fe);
}

TEST(BFloat16, Subnormals) {
  // bfloat16 subnormals are float subnormals with the low 16 bits dropped.
  EXPECT_EQ(to_bf16(0x1p-133f), 0x0001);
  EXPECT_EQ(to_bf16(0x1p-134f), 0x0000);  // tie with 0
  EXPECT_EQ(to_bf16(3 * 0x1p-134f), 0x0002);
  EXPECT_EQ(to_bf16(-0x1p-135f), 0x8000);
  EXPECT_EQ(to_bf16(0x1p-126f), 0x0080);  // smallest normal
  EXPECT_EQ(from_bf16(0x007f), 127 * 0x1p-133f);
}

TEST(Half, SignedZeroInfinityAndNaN) {
  EXPECT_EQ(to_half(0.0f), 0x0000);
  EXPECT_EQ(to_half(-0.0f), 0x8000);
  EXPECT_TRUE(std::signbit(from_half(0x8000)) && from_half(0x8000) == 0.0f);
  EXPECT_FALSE(std::signbit(from_half(0x0000)));
  EXPECT_EQ(to_half(INFINITY), 0x7c00);
  EXPECT_EQ(to_half(-INFINITY), 0xfc00);
  EXPECT_EQ(from_half(0x7c00), INFINITY);
  EXPECT_EQ(from_half(0xfc00), -INFINITY);
  EXPECT_TRUE(std::isnan(from_half(to_half(NAN))));
  // A NaN whose payload lies only in the bits dropped by the conversion must not become inf.
  const uint16_t low_payload = to_half(f32(0x7f800001u));
  EXPECT_TRUE(std::isnan(from_half(low_payload))) << std::hex << low_payload;
  const uint16_t negative_nan = to_half(f32(0xffc00000u));
  EXPECT_TRUE(std::isnan(from_half(negative_nan)));
  EXPECT_EQ(negative_nan & 0x8000, 0x8000);
}

TEST(BFloat16, SignedZeroInfinityAndNaN) {
  EXPECT_EQ(to_bf16(0.0f), 0x0000);
  EXPECT_EQ(to_bf16(-0.0f), 0x8000);
  EXPECT_TRUE(std::signbit(from_bf16(0x8000)));
  EXPECT_EQ(to_bf16(INFINITY), 0x7f80);
  EXPECT_EQ(to_bf16(-INFINITY), 0xff80);
  EXPECT_TRUE(std::isnan(from_bf16(to_bf16(NAN))));
  // Truncating 0x7f800001 to its top half would give infinity; it must stay NaN.
  EXPECT_TRUE(std::isnan(from_bf16(to_bf16(f32(0x7f800001u)))));
  EXPECT_TRUE(
      std::isnan(from_bf16(to_bf16(f32(0x7fffffffu)))));  // rounding must not carry into the sign
  const uint16_t negative_nan = to_bf16(f32(0xff800001u));
  EXPECT_TRUE(std::isnan(from_bf16(negative_nan)));
  EXPECT_EQ(negative_nan & 0x8000, 0x8000);
}

// ---- Random floats against the double-precision reference ---------------------------------

// Checks float -> 16-bit against reference_round. `encode`/`decode` are the conversions
// under test; the decode is itself validated exhaustively above.
template <class Encode, class Decode>
void check_against_reference(const std::vector<float>& inputs, const Format& format, Encode encode,
                             Decode decode) {
  for (const float x : inputs) {
    const double expected = reference_round(x, format);
    const uint16_t bits = encode(x);
    ASSERT_TRUE(same_value(decode(bits), expected))
        << format.name << "(" << std::hexfloat << x << ") = bits 0x" << std::hex << bits;
  }
}

TEST(Half, RandomFloatsMatchDoublePrecisionReference) {
  RUDNN_SEEDED_RNG(rng);
  std::vector<float> inputs;
  constexpr int kEach = 1 << 18;
  for (int i = 0; i < kEach; ++i) {
    // Any float bit pattern: mostly far outside half's range (overflow, flush to zero).
    inputs.push_back(f32(static_cast<uint32_t>(rng.engine()())));
    // Binary exponents around half's range [-26, 16] with random sign and mantissa:
    // subnormal, normal and overflowing results.
    const auto mantissa = static_cast<uint32_t>(rng.integer(0, (1 << 23) - 1));
    const auto exponent = static_cast<uint32_t>(rng.integer(127 - 26, 127 + 16));
    const auto sign = static_cast<uint32_t>(rng.integer(0, 1)) << 31;
    inputs.push_back(f32(sign | (exponent << 23) | mantissa));
    // Uniform in half's subnormal range (0, 2^-14).
    inputs.push_back(rng.uniform(0.0f, 0x1p-14f) * (rng.integer(0, 1) ? 1.0f : -1.0f));
  }
  int subnormal_results = 0;
  for (const float x : inputs)
    subnormal_results += std::fabs(x) < 0x1p-14f && std::fabs(x) >= 0x1p-25f;
  EXPECT_GT(subnormal_results, kEach / 2);  // the subnormal range really is exercised
  check_against_reference(inputs, kHalf, to_half, from_half);
}

TEST(BFloat16, RandomFloatsMatchDoublePrecisionReference) {
  RUDNN_SEEDED_RNG(rng);
  std::vector<float> inputs;
  constexpr int kEach = 1 << 18;
  for (int i = 0; i < kEach; ++i) {
    inputs.push_back(f32(static_cast<uint32_t>(rng.engine()())));
    // Float subnormals (exponent field 0), which are bfloat16 subnormals after rounding.
    const auto sign = static_cast<uint32_t>(rng.integer(0, 1)) << 31;
    inputs.push_back(f32(sign | static_cast<uint32_t>(rng.integer(1, (1 << 23) - 1))));
    // Near the top of the range, where rounding can overflow.
    inputs.push_back(
        f32(sign | (254u << 23) | static_cast<uint32_t>(rng.integer(0, (1 << 23) - 1))));
  }
  check_against_reference(inputs, kBf16, to_bf16, from_bf16);
}

}  // namespace
}  // namespace rudnn
