// Tensor: factories, shape helpers, properties, views, copies; host and (gated) CUDA.
//
// Strided results are checked against a naive reference that walks the view's multi-index
// over a byte image of the whole storage, so that a copy is seen to write exactly the
// elements of its destination view and nothing else.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "support/test_support.h"

namespace rudnn {
namespace {

using test::bit_equal;
using test::bytes_of;
using test::PoisonScope;
using test::Rng;
using test::throws_error;
using test::to_doubles;

constexpr DType kAllDTypes[] = {DType::f32, DType::f16, DType::bf16, DType::f64,    DType::i32,
                                DType::i64, DType::u32, DType::u8,   DType::boolean};

// ---- Naive strided reference ------------------------------------------------------------------

// Storage element indices of a view's elements, in row-major order of the view.
std::vector<int64_t> element_indices(const Shape& shape, const Shape& strides, int64_t offset) {
  std::vector<int64_t> out;
  const int64_t n = shape_numel(shape);
  for (int64_t linear = 0; linear < n; ++linear) {
    int64_t rest = linear, index = offset;
    for (size_t d = shape.size(); d-- > 0;) {
      index += (rest % shape[d]) * strides[d];
      rest /= shape[d];
    }
    out.push_back(index);
  }
  return out;
}
std::vector<int64_t> element_indices(const Tensor& t) {
  return element_indices(t.shape(), t.strides(), t.offset());
}

// Every byte of `t`'s storage (any device), read back to the host.
std::vector<unsigned char> storage_image(const Tensor& t) {
  const auto n = static_cast<int64_t>(t.storage_bytes() / t.itemsize());
  if (n == 0) return {};
  return bytes_of(t.as_strided({n}, {1}, 0));
}

// The logical bytes of view `t` computed from a storage image.
std::vector<unsigned char> gather(const std::vector<unsigned char>& image, const Tensor& t) {
  std::vector<unsigned char> out;
  for (const int64_t i : element_indices(t)) {
    const auto* p = image.data() + i * static_cast<int64_t>(t.itemsize());
    out.insert(out.end(), p, p + t.itemsize());
  }
  return out;
}

// Random bytes for `count` elements of `dtype` (bool elements are 0 or 1).
std::vector<unsigned char> random_bytes(Rng& rng, int64_t count, DType dtype) {
  std::vector<unsigned char> bytes(static_cast<size_t>(count) * dtype_size(dtype));
  for (auto& b : bytes)
    b = static_cast<unsigned char>(rng.integer(0, dtype == DType::boolean ? 1 : 255));
  return bytes;
}

Tensor random_tensor_bytes(Rng& rng, const Shape& shape, DType dtype,
                           Device device = Device::cpu()) {
  const auto bytes = random_bytes(rng, shape_numel(shape), dtype);
  return Tensor::from_host(bytes.data(), shape, dtype, device);
}

// 0, 1, 2, ... as f32.
Tensor iota(const Shape& shape) {
  std::vector<float> v(static_cast<size_t>(shape_numel(shape)));
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i);
  return Tensor::from_host(v, shape);
}

// Ways to carve a view of a given 3-d shape out of a larger random tensor.
enum class Layout { contiguous, transposed, sliced, stepped, stepped_transposed };
constexpr Layout kAllLayouts[] = {Layout::contiguous, Layout::transposed, Layout::sliced,
                                  Layout::stepped, Layout::stepped_transposed};
const char* layout_name(Layout l) {
  switch (l) {
    case Layout::contiguous:
      return "contiguous";
    case Layout::transposed:
      return "transposed";
    case Layout::sliced:
      return "sliced";
    case Layout::stepped:
      return "stepped";
    case Layout::stepped_transposed:
      return "stepped+transposed";
  }
  return "?";
}

// A view of shape {a, b, c} with layout `layout`, of a base tensor of random bytes on `device`.
Tensor make_view(Rng& rng, const Shape& s, DType dtype, Device device, Layout layout) {
  const int64_t a = s[0], b = s[1], c = s[2];
  switch (layout) {
    case Layout::contiguous:
      return random_tensor_bytes(rng, {a, b, c}, dtype, device);
    case Layout::transposed:
      return random_tensor_bytes(rng, {c, b, a}, dtype, device).transpose(0, 2);
    case Layout::sliced:  // nonzero offset, gaps between rows
      return random_tensor_bytes(rng, {a + 3, b, c + 2}, dtype, device)
          .slice(0, 1, 1 + a)
          .slice(2, 2, 2 + c);
    case Layout::stepped:
      return random_tensor_bytes(rng, {a, 2 * b + 1, 3 * c}, dtype, device)
          .slice(1, 1, 1 + 2 * b, 2)
          .slice(2, 0, 3 * c, 3);
    case Layout::stepped_transposed:
      return random_tensor_bytes(rng, {2 * b, a, c}, dtype, device)
          .slice(0, 0, 2 * b, 2)
          .transpose(0, 1);
  }
  return {};
}

// dst.copy_from(src) writes exactly the elements of dst's view, with src's logical values,
// and leaves the rest of dst's storage untouched.
void check_copy(const Tensor& dst, const Tensor& src, const Stream& stream = {}) {
  ASSERT_EQ(dst.shape(), src.shape());
  const auto src_image = storage_image(src);
  auto expected = storage_image(dst);
  const auto values = gather(src_image, src);
  const auto item = static_cast<int64_t>(dst.itemsize());
  const auto indices = element_indices(dst);
  for (size_t k = 0; k < indices.size(); ++k) {
    std::memcpy(expected.data() + indices[k] * item, values.data() + static_cast<int64_t>(k) * item,
                static_cast<size_t>(item));
  }
  dst.copy_from(src, stream);
  const auto got = storage_image(dst);
  ASSERT_EQ(got.size(), expected.size());
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_EQ(got[i], expected[i])
        << "storage byte " << i << " (element " << i / static_cast<size_t>(item) << ") of "
        << dst.str() << " strides " << shape_str(dst.strides());
  }
}

// x rounded to nearest-even in a binary format with `fraction_bits` mantissa bits, smallest
// normal exponent `min_exponent` and largest finite `max_finite` (overflow to infinity).
double round_to_format(double x, int fraction_bits, int min_exponent, double max_finite) {
  if (!std::isfinite(x) || x == 0.0) return x;
  int e = 0;
  std::frexp(std::fabs(x), &e);
  const double quantum = std::ldexp(1.0, std::max(e - 1, min_exponent) - fraction_bits);
  double r = std::nearbyint(std::fabs(x) / quantum) * quantum;
  if (r > max_finite) r = INFINITY;
  return std::copysign(r, x);
}

// ---- Shape helpers ---------------------------------------------------------------------------

TEST(Shape, NumelOfValidShapes) {
  EXPECT_EQ(shape_numel({}), 1);  // a 0-d tensor has one element
  EXPECT_EQ(shape_numel({0}), 0);
  EXPECT_EQ(shape_numel({7}), 7);
  EXPECT_EQ(shape_numel({2, 3, 4}), 24);
  EXPECT_EQ(shape_numel({5, 0, 7}), 0);
  EXPECT_EQ(shape_numel({int64_t{1} << 31, int64_t{1} << 31}), int64_t{1} << 62);
  EXPECT_EQ(shape_numel({std::numeric_limits<int64_t>::max()}),
            std::numeric_limits<int64_t>::max());
}

TEST(Shape, NumelRejectsNegativeDimensionsAndOverflow) {
  EXPECT_TRUE(
      throws_error([] { shape_numel({-1}); }, ErrorCode::InvalidArgument, {"[-1]", "negative"}));
  EXPECT_TRUE(throws_error(
      [] {
        shape_numel({2, -3, 4});
      },
      ErrorCode::InvalidArgument, {"[2, -3, 4]"}));
  EXPECT_TRUE(throws_error(
      [] {
        shape_numel({int64_t{1} << 32, int64_t{1} << 32});
      },
      ErrorCode::InvalidArgument, {}));
  EXPECT_TRUE(throws_error(
      [] {
        shape_numel({std::numeric_limits<int64_t>::max(), 2});
      },
      ErrorCode::InvalidArgument, {}));
  // Factories validate the same way.
  EXPECT_TRUE(throws_error(
      [] {
        Tensor::empty({3, -2}, DType::f32);
      },
      ErrorCode::InvalidArgument, {"negative"}));
  EXPECT_TRUE(throws_error(
      [] {
        Tensor::zeros({int64_t{1} << 40, int64_t{1} << 40}, DType::f32);
      },
      ErrorCode::InvalidArgument, {}));
  // numel fits int64 but the byte count does not.
  EXPECT_TRUE(throws_error([] { Tensor::empty({int64_t{1} << 62}, DType::f64); },
                           ErrorCode::InvalidArgument, {}));
}

TEST(Shape, StrAndContiguousStrides) {
  EXPECT_EQ(shape_str({}), "[]");
  EXPECT_EQ(shape_str({2, 3, 4}), "[2, 3, 4]");
  EXPECT_EQ(contiguous_strides({}), Shape{});
  EXPECT_EQ(contiguous_strides({5}), (Shape{1}));
  EXPECT_EQ(contiguous_strides({2, 3, 4}), (Shape{12, 4, 1}));
  EXPECT_EQ(contiguous_strides({2, 1, 3}), (Shape{3, 3, 1}));
}

// ---- Factories ----------------------------------------------------------------------------

TEST(TensorFactory, EmptyHasTheRequestedLayout) {
  for (const DType dtype : kAllDTypes) {
    SCOPED_TRACE(dtype_name(dtype));
    const Tensor t = Tensor::empty({2, 3, 4}, dtype);
    EXPECT_TRUE(t.defined());
    EXPECT_EQ(t.shape(), (Shape{2, 3, 4}));
    EXPECT_EQ(t.strides(), (Shape{12, 4, 1}));
    EXPECT_EQ(t.offset(), 0);
    EXPECT_EQ(t.dim(), 3);
    EXPECT_EQ(t.numel(), 24);
    EXPECT_EQ(t.dtype(), dtype);
    EXPECT_EQ(t.itemsize(), dtype_size(dtype));
    EXPECT_EQ(t.device(), Device::cpu());
    EXPECT_TRUE(t.is_contiguous());
    EXPECT_EQ(t.storage_bytes(), 24 * dtype_size(dtype));
    EXPECT_EQ(t.storage_data(), t.data());
    EXPECT_EQ(reinterpret_cast<uintptr_t>(t.data()) % 64, 0u);  // host memory is 64-byte aligned
    EXPECT_TRUE(t.allocation_stream().is_default());
    EXPECT_EQ(t.str(), std::string("Tensor(") + dtype_name(dtype) + ", [2, 3, 4], cpu)");
  }
  // Distinct tensors never share storage.
  const Tensor a = Tensor::empty({4}, DType::f32), b = Tensor::empty({4}, DType::f32);
  EXPECT_NE(a.data(), b.data());
  // storage_handles counts the handles of one storage, views included.
  EXPECT_EQ(a.storage_handles(), 1);
  EXPECT_EQ(Tensor{}.storage_handles(), 0);
  {
    const Tensor view = a.slice(0, 1, 3);
    EXPECT_EQ(a.storage_handles(), 2);
    EXPECT_EQ(view.storage_handles(), 2);
  }
  EXPECT_EQ(a.storage_handles(), 1);
}

TEST(TensorFactory, ZerosAndFullWriteEveryElement) {
  PoisonScope poison(true);  // an element the factory skips would read as 0xFF
  for (const DType dtype : kAllDTypes) {
    SCOPED_TRACE(dtype_name(dtype));
    const Tensor z = Tensor::zeros({3, 5, 7}, dtype);
    for (const unsigned char byte : bytes_of(z)) ASSERT_EQ(byte, 0);
    const Tensor f = Tensor::full({3, 5, 7}, 3.0, dtype);
    for (const double v : to_doubles(f)) ASSERT_EQ(v, dtype == DType::boolean ? 1.0 : 3.0);
  }
  EXPECT_EQ(Tensor::zeros({0, 4}, DType::f32).numel(), 0);
  EXPECT_EQ(Tensor::full({0}, 1.0, DType::f64).numel(), 0);
}

TEST(TensorFactory, FullConvertsTheValueToTheDType) {
  RUDNN_SEEDED_RNG(rng);
  const double v = rng.normal(0.0f, 100.0f);
  EXPECT_EQ(Tensor::full({3}, v, DType::f64).to_vector<double>(), std::vector<double>(3, v));
  EXPECT_EQ(Tensor::full({2}, v, DType::f32).to_vector<float>(),
            std::vector<float>(2, static_cast<float>(v)));
  EXPECT_EQ(Tensor::full({2}, 0.1, DType::f16).to_vector<half>()[1].bits, half(0.1f).bits);
  EXPECT_EQ(Tensor::full({2}, 0.1, DType::bf16).to_vector<bfloat16>()[1].bits, bfloat16(0.1f).bits);
  EXPECT_EQ(Tensor::full({2}, -7, DType::i32).to_vector<int32_t>(), (std::vector<int32_t>{-7, -7}));
  EXPECT_EQ(Tensor::full({2}, -5e12, DType::i64).to_vector<int64_t>(),
            (std::vector<int64_t>{-5000000000000, -5000000000000}));
  EXPECT_EQ(Tensor::full({2}, 4e9, DType::u32).to_vector<uint32_t>(),
            (std::vector<uint32_t>{4000000000u, 4000000000u}));
  EXPECT_EQ(Tensor::full({2}, 200, DType::u8).to_vector<uint8_t>(),
            (std::vector<uint8_t>{200, 200}));
  EXPECT_EQ(Tensor::full({2}, 0.5, DType::boolean).to_vector<bool>(),
            (std::vector<bool>{true, true}));
  EXPECT_EQ(Tensor::full({2}, 0.0, DType::boolean).to_vector<bool>(),
            (std::vector<bool>{false, false}));
  // Non-finite and out-of-range values.
  EXPECT_TRUE(std::isnan(to_doubles(Tensor::full({2}, NAN, DType::f16))[0]));
  EXPECT_EQ(to_doubles(Tensor::full({2}, -INFINITY, DType::bf16))[1], -INFINITY);
  EXPECT_EQ(to_doubles(Tensor::full({2}, 1e6, DType::f16))[0], INFINITY);
}

TEST(TensorFactory, FullRoundsADoubleOnceToF16AndBf16) {
  // 1 + 2^-11 + 2^-40 lies just above the f16 tie between 1 and 1 + 2^-10, so rounds up.
  // Going through float first would round it to the tie 1 + 2^-11 (the 2^-40 is below
  // float's precision), which then rounds to even, down to 1: double rounding.
  EXPECT_EQ(Tensor::full({1}, 1.0 + 0x1p-11 + 0x1p-40, DType::f16).to_vector<half>()[0].bits,
            0x3c01);
  EXPECT_EQ(Tensor::full({1}, 1.0 + 0x1p-11 - 0x1p-40, DType::f16).to_vector<half>()[0].bits,
            0x3c00);
  EXPECT_EQ(Tensor::full({1}, -(1.0 + 0x1p-8 + 0x1p-40), DType::bf16).to_vector<bfloat16>()[0].bits,
            0xbf81);
  EXPECT_EQ(Tensor::full({1}, 1.0 + 0x1p-8 - 0x1p-40, DType::bf16).to_vector<bfloat16>()[0].bits,
            0x3f80);
  // Just above the f16 overflow tie 65520, and a subnormal just above the tie 2^-25.
  EXPECT_EQ(Tensor::full({1}, 65520.0 - 0x1p-30, DType::f16).to_vector<half>()[0].bits, 0x7bff);
  EXPECT_EQ(Tensor::full({1}, 0x1p-25 + 0x1p-60, DType::f16).to_vector<half>()[0].bits, 0x0001);
  // Exact ties still round to even.
  EXPECT_EQ(Tensor::full({1}, 1.0 + 0x1p-11, DType::f16).to_vector<half>()[0].bits, 0x3c00);
  EXPECT_EQ(Tensor::full({1}, 1.0 + 3 * 0x1p-11, DType::f16).to_vector<half>()[0].bits, 0x3c02);
  EXPECT_EQ(Tensor::full({1}, 65520.0, DType::f16).to_vector<half>()[0].bits, 0x7c00);

  // Random doubles with bits below float's precision, against a double-precision reference.
  RUDNN_SEEDED_RNG(rng);
  for (int i = 0; i < 20000; ++i) {
    const double x = std::ldexp(rng.uniform(1.0f, 2.0f) + rng.uniform(0.0f, 0x1p-20f) +
                                    0x1p-45 * rng.integer(0, 1 << 20),
                                static_cast<int>(rng.integer(-30, 16))) *
                     (rng.integer(0, 1) ? 1 : -1);
    const float got16 = static_cast<float>(Tensor::full({1}, x, DType::f16).to_vector<half>()[0]);
    const float gotbf =
        static_cast<float>(Tensor::full({1}, x, DType::bf16).to_vector<bfloat16>()[0]);
    ASSERT_EQ(got16, round_to_format(x, 10, -14, 65504.0)) << std::hexfloat << x;
    ASSERT_EQ(gotbf, round_to_format(x, 7, -126, 0x1.fep127)) << std::hexfloat << x;
  }
}

TEST(TensorFactory, FromHostCopiesTheData) {
  RUDNN_SEEDED_RNG(rng);
  std::vector<float> data(60);
  for (float& x : data) x = rng.normal();
  const Tensor t = Tensor::from_host(data, {3, 4, 5});
  EXPECT_EQ(t.shape(), (Shape{3, 4, 5}));
  EXPECT_NE(t.data(), static_cast<const void*>(data.data()));
  EXPECT_EQ(t.to_vector<float>(), data);
  const std::vector<float> original = data;
  data[0] += 1.0f;  // the tensor holds its own copy
  EXPECT_EQ(t.to_vector<float>(), original);
  // The untyped form, for every dtype.
  for (const DType dtype : kAllDTypes) {
    SCOPED_TRACE(dtype_name(dtype));
    const auto bytes = random_bytes(rng, 12, dtype);
    const Tensor u = Tensor::from_host(bytes.data(), {4, 3}, dtype);
    EXPECT_EQ(bytes_of(u), bytes);
  }
}

TEST(TensorFactory, FromHostRejectsBadArguments) {
  EXPECT_TRUE(throws_error(
      [] {
        Tensor::from_host(std::vector<float>(5), {2, 3});
      },
      ErrorCode::ShapeMismatch, {"5 elements", "[2, 3]"}));
  EXPECT_TRUE(throws_error([] { Tensor::from_host(nullptr, {2}, DType::f32); },
                           ErrorCode::InvalidArgument, {"null"}));
  EXPECT_EQ(Tensor::from_host(nullptr, {0, 3}, DType::f32).numel(), 0);  // nothing to read
}

TEST(TensorFactory, FromBlobWrapsWithoutCopyingAndReleasesOnce) {
  RUDNN_SEEDED_RNG(rng);
  std::vector<int32_t> buffer(20);
  for (auto& x : buffer) x = static_cast<int32_t>(rng.integer(-1000, 1000));
  int releases = 0;
  const size_t in_use = allocator_stats(Device::cpu()).bytes_in_use;
  {
    // A 3x4 view at offset 2 with row stride 5 into a 20-element buffer.
    Tensor t = Tensor::from_blob(buffer.data(), buffer.size() * sizeof(int32_t), {3, 4}, {5, 1}, 2,
                                 DType::i32, Device::cpu(), [&releases] { ++releases; });
    EXPECT_EQ(allocator_stats(Device::cpu()).bytes_in_use, in_use);  // nothing allocated
    EXPECT_EQ(t.data(), static_cast<void*>(buffer.data() + 2));
    EXPECT_EQ(t.storage_data(), static_cast<void*>(buffer.data()));
    EXPECT_EQ(t.storage_bytes(), buffer.size() * sizeof(int32_t));
    EXPECT_FALSE(t.is_contiguous());
    EXPECT_TRUE(t.allocation_stream().is_default());
    std::vector<int32_t> expected;
    for (int r = 0; r < 3; ++r)
      for (int c = 0; c < 4; ++c) expected.push_back(buffer[2 + 5 * r + c]);
    EXPECT_EQ(t.to_vector<int32_t>(), expected);
    // Writes through the tensor land in the caller's buffer.
    t.data_as<int32_t>()[0] = 12345;
    EXPECT_EQ(buffer[2], 12345);

    const Tensor view = t.slice(0, 1, 3);
    t = Tensor();  // the view still holds the storage
    EXPECT_EQ(releases, 0);
    Tensor copy = view;
    EXPECT_EQ(releases, 0);
  }
  EXPECT_EQ(releases, 1);
  // Without a release callback, and for an empty blob.
  EXPECT_NO_THROW(Tensor::from_blob(buffer.data(), 80, {20}, {1}, 0, DType::i32, Device::cpu()));
  EXPECT_EQ(Tensor::from_blob(nullptr, 0, {0}, {1}, 0, DType::f32, Device::cpu()).numel(), 0);
}

TEST(TensorFactory, FromBlobChecksBounds) {
  std::vector<float> buffer(12);
  const size_t bytes = buffer.size() * sizeof(float);
  EXPECT_TRUE(throws_error(
      [&] { Tensor::from_blob(buffer.data(), bytes, {13}, {1}, 0, DType::f32, Device::cpu()); },
      ErrorCode::InvalidArgument, {"past its storage"}));
  EXPECT_TRUE(throws_error(
      [&] {
        Tensor::from_blob(buffer.data(), bytes, {3, 4}, {4, 1}, 1, DType::f32, Device::cpu());
      },
      ErrorCode::InvalidArgument, {"past its storage"}));
  // The same 48 bytes hold only 6 doubles.
  EXPECT_TRUE(throws_error(
      [&] { Tensor::from_blob(buffer.data(), bytes, {7}, {1}, 0, DType::f64, Device::cpu()); },
      ErrorCode::InvalidArgument, {"past its storage"}));
  EXPECT_NO_THROW(Tensor::from_blob(buffer.data(), bytes, {6}, {1}, 0, DType::f64, Device::cpu()));
  EXPECT_TRUE(
      throws_error([] { Tensor::from_blob(nullptr, 16, {4}, {1}, 0, DType::f32, Device::cpu()); },
                   ErrorCode::InvalidArgument, {"null"}));
}

// ---- Properties -----------------------------------------------------------------------------

TEST(TensorProperties, SizeWithNegativeDimensions) {
  const Tensor t = Tensor::empty({2, 3, 4}, DType::u8);
  EXPECT_EQ(t.size(0), 2);
  EXPECT_EQ(t.size(2), 4);
  EXPECT_EQ(t.size(-1), 4);
  EXPECT_EQ(t.size(-2), 3);
  EXPECT_EQ(t.size(-3), 2);
  EXPECT_TRUE(throws_error([&] { t.size(3); }, ErrorCode::InvalidArgument, {"3"}));
  EXPECT_TRUE(throws_error([&] { t.size(-4); }, ErrorCode::InvalidArgument, {"-4"}));
}

TEST(TensorProperties, IsContiguous) {
  const Tensor t = Tensor::empty({4, 6}, DType::f32);
  EXPECT_TRUE(t.is_contiguous());
  EXPECT_FALSE(t.transpose(0, 1).is_contiguous());
  EXPECT_TRUE(t.slice(0, 1, 3).is_contiguous());  // leading rows: dense at an offset
  EXPECT_FALSE(t.slice(1, 0, 3).is_contiguous());
  EXPECT_FALSE(t.slice(0, 0, 4, 2).is_contiguous());
  // Size-1 dimensions constrain nothing, whatever their stride.
  EXPECT_TRUE(t.as_strided({2, 1, 3}, {3, 100, 1}, 0).is_contiguous());
  EXPECT_TRUE(t.as_strided({1, 6}, {0, 1}, 0).is_contiguous());
  EXPECT_FALSE(t.slice(1, 2, 3).is_contiguous());  // one column: [4, 1] with row stride 6
}

TEST(TensorProperties, FactoryTensorsAreContiguousForEveryShape) {
  // Including shapes with a zero dimension, whose contiguous strides treat the 0 as 1.
  for (const Shape& shape : {Shape{}, Shape{0}, Shape{5}, Shape{1, 1}, Shape{0, 5}, Shape{5, 0},
                             Shape{2, 0, 3}, Shape{3, 1, 0, 2}}) {
    SCOPED_TRACE(shape_str(shape));
    const Tensor t = Tensor::empty(shape, DType::f32);
    EXPECT_TRUE(t.is_contiguous()) << "strides " << shape_str(t.strides());
    // And so they take views and are returned as is by contiguous().
    EXPECT_EQ(t.view({-1}).numel(), t.numel());
    EXPECT_EQ(t.contiguous().data(), t.data());
  }
}

TEST(TensorProperties, UndefinedTensor) {
  const Tensor t;
  EXPECT_FALSE(t.defined());
  EXPECT_EQ(t.str(), "Tensor(undefined)");
  EXPECT_EQ(t.storage_data(), nullptr);
  EXPECT_EQ(t.storage_bytes(), 0u);
  EXPECT_EQ(t.device(), Device::cpu());
  EXPECT_TRUE(throws_error([&] { t.data(); }, ErrorCode::InvalidArgument, {"undefined"}));
  EXPECT_TRUE(throws_error([&] { t.view({1}); }, ErrorCode::InvalidArgument, {"undefined"}));
  EXPECT_TRUE(throws_error([&] { t.to_host(); }, ErrorCode::InvalidArgument, {"undefined"}));
  EXPECT_TRUE(throws_error([&] { Tensor::empty({1}, DType::f32).copy_from(t); },
                           ErrorCode::InvalidArgument, {"undefined"}));
}

TEST(TensorProperties, ZeroDimensionalTensor) {
  RUDNN_SEEDED_RNG(rng);
  const double value = rng.normal();
  const Tensor t = Tensor::full({}, value, DType::f64);
  EXPECT_EQ(t.dim(), 0);
  EXPECT_EQ(t.numel(), 1);
  EXPECT_EQ(t.shape(), Shape{});
  EXPECT_EQ(t.strides(), Shape{});
  EXPECT_TRUE(t.is_contiguous());
  EXPECT_EQ(t.storage_bytes(), sizeof(double));
  EXPECT_EQ(t.to_vector<double>(), std::vector<double>{value});
  EXPECT_EQ(t.str(), "Tensor(f64, [], cpu)");
  EXPECT_TRUE(throws_error([&] { t.size(0); }, ErrorCode::InvalidArgument, {}));
  EXPECT_TRUE(throws_error([&] { t.transpose(0, 0); }, ErrorCode::InvalidArgument, {}));
  EXPECT_TRUE(throws_error([&] { t.slice(0, 0, 1); }, ErrorCode::InvalidArgument, {}));
  EXPECT_EQ(t.view({1, 1}).to_vector<double>(), std::vector<double>{value});
  EXPECT_EQ(Tensor::from_host(std::vector<float>{2.5f}, {}).view({}).to_vector<float>(),
            std::vector<float>{2.5f});
  // A 0-d view selects one element of a larger storage.
  const Tensor e = iota({6}).as_strided({}, {}, 4);
  EXPECT_EQ(e.to_vector<float>(), std::vector<float>{4.0f});
  Tensor dst = Tensor::zeros({}, DType::f32);
  dst.copy_from(e);
  EXPECT_EQ(dst.to_vector<float>(), std::vector<float>{4.0f});
  EXPECT_TRUE(throws_error([&] { iota({6}).as_strided({}, {}, 6); }, ErrorCode::InvalidArgument,
                           {"past its storage"}));
}

TEST(TensorProperties, DataAsChecksTheDType) {
  const Tensor t = Tensor::zeros({3}, DType::f32);
  EXPECT_EQ(t.data_as<float>(), t.data());
  EXPECT_TRUE(
      throws_error([&] { t.data_as<int32_t>(); }, ErrorCode::DTypeMismatch, {"f32", "i32"}));
  EXPECT_TRUE(throws_error([&] { t.data_as<double>(); }, ErrorCode::DTypeMismatch, {"f64"}));
  const Tensor b = Tensor::zeros({3}, DType::bf16);
  EXPECT_NO_THROW(b.data_as<bfloat16>());
  EXPECT_TRUE(throws_error([&] { b.data_as<half>(); }, ErrorCode::DTypeMismatch, {"bf16", "f16"}));
}

// ---- Views ---------------------------------------------------------------------------------

TEST(TensorView, AsStridedSharesStorageAndChecksBounds) {
  const Tensor base = iota({12});
  const Tensor t = base.as_strided({3, 2}, {1, 3}, 0);
  EXPECT_EQ(t.to_vector<float>(), (std::vector<float>{0, 3, 1, 4, 2, 5}));
  EXPECT_EQ(t.storage_data(), base.storage_data());
  EXPECT_EQ(base.as_strided({2, 3}, {3, 1}, 6).to_vector<float>(),
            (std::vector<float>{6, 7, 8, 9, 10, 11}));
  EXPECT_EQ(base.as_strided({4, 3}, {0, 1}, 9).to_vector<float>(),  // stride 0 repeats a row
            (std::vector<float>{9, 10, 11, 9, 10, 11, 9, 10, 11, 9, 10, 11}));
  // The last element reachable is offset + sum((size - 1) * stride); it must be < 12.
  EXPECT_NO_THROW(base.as_strided({3, 3}, {4, 1}, 1));  // reaches 1 + 8 + 2 = 11
  EXPECT_TRUE(throws_error(
      [&] {
        base.as_strided({3, 3}, {4, 1}, 2);
      },
      ErrorCode::InvalidArgument, {"past its storage", "48 bytes"}));
  EXPECT_TRUE(throws_error(
      [&] {
        base.as_strided({2, 3}, {3, 1}, 7);
      },
      ErrorCode::InvalidArgument, {"past its storage"}));
  EXPECT_TRUE(throws_error([&] { base.as_strided({13}, {1}, 0); }, ErrorCode::InvalidArgument,
                           {"past its storage"}));
  EXPECT_TRUE(throws_error([&] { base.as_strided({2}, {-1}, 5); }, ErrorCode::InvalidArgument,
                           {"negative stride"}));
  EXPECT_TRUE(throws_error([&] { base.as_strided({2}, {1}, -1); }, ErrorCode::InvalidArgument,
                           {"negative offset"}));
  EXPECT_TRUE(throws_error(
      [&] {
        base.as_strided({2, 2}, {1}, 0);
      },
      ErrorCode::InvalidArgument, {"rank"}));
  EXPECT_TRUE(throws_error([&] { base.as_strided({3}, {std::numeric_limits<int64_t>::max()}, 0); },
                           ErrorCode::InvalidArgument, {}));
  // Bounds are checked against the storage, not the view it is taken of.
  EXPECT_NO_THROW(base.slice(0, 0, 2).as_strided({12}, {1}, 0));
  // A view writes through to the base: t[0][1] is storage element 3.
  t.data_as<float>()[3] = -1.0f;
  EXPECT_EQ(t.to_vector<float>()[1], -1.0f);
  EXPECT_EQ(base.to_vector<float>()[3], -1.0f);
}

TEST(TensorView, ViewReshapesContiguousTensors) {
  const Tensor t = iota({2, 3, 4});
  const Tensor v = t.view({4, -1});
  EXPECT_EQ(v.shape(), (Shape{4, 6}));
  EXPECT_EQ(v.strides(), (Shape{6, 1}));
  EXPECT_EQ(v.data(), t.data());
  EXPECT_EQ(v.to_vector<float>(), t.to_vector<float>());
  EXPECT_EQ(t.view({-1}).shape(), Shape{24});
  EXPECT_EQ(t.view({2, -1, 3}).shape(), (Shape{2, 4, 3}));
  EXPECT_EQ(t.view({24, 1, 1}).shape(), (Shape{24, 1, 1}));
  // A view of a dense slice keeps its offset.
  const Tensor row = t.slice(0, 1, 2).view({12});
  EXPECT_EQ(row.offset(), 12);
  EXPECT_EQ(row.to_vector<float>()[0], 12.0f);
  // Errors.
  EXPECT_TRUE(throws_error(
      [&] {
        t.view({-1, -1});
      },
      ErrorCode::InvalidArgument, {"more than one -1"}));
  EXPECT_TRUE(throws_error(
      [&] {
        t.view({5, -1});
      },
      ErrorCode::ShapeMismatch, {"[2, 3, 4]", "[5, -1]"}));
  EXPECT_TRUE(throws_error(
      [&] {
        t.view({5, 5});
      },
      ErrorCode::ShapeMismatch, {"24 elements", "[5, 5]"}));
  EXPECT_TRUE(throws_error([&] { t.view({0, -1}); }, ErrorCode::ShapeMismatch, {}));
  EXPECT_TRUE(throws_error([&] { t.view({-2, -12}); }, ErrorCode::InvalidArgument, {"negative"}));
  EXPECT_TRUE(throws_error([&] { t.transpose(0, 2).view({24}); }, ErrorCode::InvalidArgument,
                           {"contiguous"}));
  EXPECT_TRUE(throws_error([&] { t.slice(2, 0, 4, 2).view({12}); }, ErrorCode::InvalidArgument,
                           {"contiguous"}));
}

// Python's range(start, stop, step) over a dimension of `size` after Python's clamping.
std::vector<int64_t> python_slice(int64_t size, int64_t start, int64_t stop, int64_t step) {
  auto norm = [size](int64_t i) {
    return std::min(std::max(i < 0 ? i + size : i, int64_t{0}), size);
  };
  std::vector<int64_t> out;
  for (int64_t i = norm(start); i < norm(stop); i += step) out.push_back(i);
  return out;
}

TEST(TensorView, SliceFollowsPythonSemantics) {
  const Tensor t = iota({10});
  auto values = [](const Tensor& s) { return s.to_vector<float>(); };
  EXPECT_EQ(values(t.slice(0, 2, 5)), (std::vector<float>{2, 3, 4}));
  EXPECT_EQ(values(t.slice(0, -3, 100)), (std::vector<float>{7, 8, 9}));
  EXPECT_EQ(values(t.slice(0, -100, 2)), (std::vector<float>{0, 1}));
  EXPECT_EQ(values(t.slice(0, 1, 10, 3)), (std::vector<float>{1, 4, 7}));
  EXPECT_EQ(values(t.slice(-1, 0, -1, 4)), (std::vector<float>{0, 4, 8}));
  EXPECT_EQ(t.slice(0, 5, 2).numel(), 0);
  EXPECT_EQ(t.slice(0, 10, 20).numel(), 0);
  EXPECT_EQ(t.slice(0, 0, 10).data(), t.data());

  RUDNN_SEEDED_RNG(rng);
  const Tensor m = iota({4, 9});
  const std::vector<float> all = m.to_vector<float>();
  for (int trial = 0; trial < 500; ++trial) {
    const int64_t dim = rng.integer(-2, 1);
    const int64_t size = m.size(dim);
    const int64_t start = rng.integer(-12, 12), stop = rng.integer(-12, 12),
                  step = rng.integer(1, 4);
    SCOPED_TRACE(::testing::Message()
                 << "slice(" << dim << ", " << start << ", " << stop << ", " << step << ")");
    const Tensor s = m.slice(dim, start, stop, step);
    const std::vector<int64_t> picked = python_slice(size, start, stop, step);
    std::vector<float> expected;
    const bool rows = (dim == 0 || dim == -2);
    for (int64_t r = 0; r < 4; ++r)
      for (int64_t c = 0; c < 9; ++c) {
        const int64_t along = rows ? r : c;
        if (std::find(picked.begin(), picked.end(), along) != picked.end())
          expected.push_back(all[r * 9 + c]);
      }
    ASSERT_EQ(s.size(dim), static_cast<int64_t>(picked.size()));
    ASSERT_EQ(values(s), expected);
  }
  // Slices of slices compose.
  EXPECT_EQ(values(t.slice(0, 1, 10, 2).slice(0, 1, 4, 2)), (std::vector<float>{3, 7}));
  EXPECT_TRUE(throws_error([&] { t.slice(0, 0, 5, 0); }, ErrorCode::InvalidArgument, {"step"}));
  EXPECT_TRUE(throws_error([&] { t.slice(0, 5, 0, -1); }, ErrorCode::InvalidArgument, {"step"}));
  EXPECT_TRUE(throws_error([&] { t.slice(1, 0, 1); }, ErrorCode::InvalidArgument, {"dimension 1"}));
  EXPECT_TRUE(
      throws_error([&] { t.slice(-2, 0, 1); }, ErrorCode::InvalidArgument, {"dimension -2"}));
}

TEST(TensorView, Transpose) {
  const Tensor t = iota({2, 3, 4});
  const Tensor tr = t.transpose(0, 2);
  EXPECT_EQ(tr.shape(), (Shape{4, 3, 2}));
  EXPECT_EQ(tr.strides(), (Shape{1, 4, 12}));
  EXPECT_EQ(tr.data(), t.data());
  const std::vector<float> v = tr.to_vector<float>();
  for (int64_t i = 0; i < 4; ++i)
    for (int64_t j = 0; j < 3; ++j)
      for (int64_t k = 0; k < 2; ++k)
        ASSERT_EQ(v[(i * 3 + j) * 2 + k], static_cast<float>(k * 12 + j * 4 + i));
  EXPECT_EQ(t.transpose(-1, 0).shape(), (Shape{4, 3, 2}));
  EXPECT_EQ(t.transpose(1, 1).strides(), t.strides());
  EXPECT_EQ(tr.transpose(2, 0).to_vector<float>(), t.to_vector<float>());
  EXPECT_TRUE(
      throws_error([&] { t.transpose(0, 3); }, ErrorCode::InvalidArgument, {"out of range"}));
  EXPECT_TRUE(
      throws_error([&] { t.transpose(-4, 0); }, ErrorCode::InvalidArgument, {"out of range"}));
}

// ---- Host copies ----------------------------------------------------------------------------

TEST(TensorCopy, ContiguousReturnsSelfOrADenseCopy) {
  RUDNN_SEEDED_RNG(rng);
  const Tensor t = random_tensor_bytes(rng, {5, 7}, DType::f32);
  EXPECT_EQ(t.contiguous().data(), t.data());  // no copy
  const Tensor tr = t.transpose(0, 1);
  const Tensor c = tr.contiguous();
  EXPECT_TRUE(c.is_contiguous());
  EXPECT_EQ(c.shape(), (Shape{7, 5}));
  EXPECT_NE(c.storage_data(), t.storage_data());
  EXPECT_EQ(bytes_of(c), gather(storage_image(t), tr));
  const Tensor stepped = t.slice(1, 1, 7, 3);
  EXPECT_EQ(bytes_of(stepped.contiguous()), gather(storage_image(t), stepped));
}

TEST(TensorCopy, ToAndToHostAlwaysCopyOnTheHost) {
  RUDNN_SEEDED_RNG(rng);
  for (const DType dtype : kAllDTypes) {
    SCOPED_TRACE(dtype_name(dtype));
    const Tensor t = random_tensor_bytes(rng, {4, 6}, dtype);
    const Tensor a = t.to(Device::cpu());
    const Tensor b = t.to_host();
    EXPECT_NE(a.storage_data(), t.storage_data());
    EXPECT_NE(b.storage_data(), t.storage_data());
    EXPECT_TRUE(bit_equal(a, t));
    EXPECT_TRUE(bit_equal(b, t));
    const Tensor view = t.transpose(0, 1).slice(0, 1, 6, 2);
    const Tensor h = view.to_host();
    EXPECT_TRUE(h.is_contiguous());
    EXPECT_EQ(h.shape(), view.shape());
    EXPECT_EQ(bytes_of(h), gather(storage_image(t), view));
  }
}

TEST(TensorCopy, CopyFromBetweenStridedHostViews) {
  RUDNN_SEEDED_RNG(rng);
  const Shape shape{rng.integer(1, 5), rng.integer(1, 6), rng.integer(1, 7)};
  SCOPED_TRACE("shape " + shape_str(shape));
  for (const DType dtype : {DType::u8, DType::f16, DType::f32, DType::f64})
    for (const Layout dst_layout : kAllLayouts)
      for (const Layout src_layout : kAllLayouts) {
        SCOPED_TRACE(::testing::Message() << dtype_name(dtype) << " dst " << layout_name(dst_layout)
                                          << " src " << layout_name(src_layout));
        const Tensor dst = make_view(rng, shape, dtype, Device::cpu(), dst_layout);
        const Tensor src = make_view(rng, shape, dtype, Device::cpu(), src_layout);
        check_copy(dst, src);
      }
}

TEST(TensorCopy, CopyFromRejectsMismatchesAndLeavesTheDestination) {
  RUDNN_SEEDED_RNG(rng);
  const Tensor dst = random_tensor_bytes(rng, {3, 4}, DType::f32);
  const auto before = bytes_of(dst);
  EXPECT_TRUE(throws_error(
      [&] {
        dst.copy_from(Tensor::zeros({4, 3}, DType::f32));
      },
      ErrorCode::ShapeMismatch, {"[4, 3]", "[3, 4]"}));
  EXPECT_TRUE(throws_error([&] { dst.copy_from(Tensor::zeros({12}, DType::f32)); },
                           ErrorCode::ShapeMismatch, {}));
  EXPECT_TRUE(throws_error(
      [&] {
        dst.copy_from(Tensor::zeros({3, 4}, DType::i32));
      },
      ErrorCode::DTypeMismatch, {"i32", "f32"}));
  EXPECT_TRUE(throws_error(
      [&] {
        dst.copy_from(Tensor::zeros({3, 4}, DType::f16));
      },
      ErrorCode::DTypeMismatch, {}));
  EXPECT_EQ(bytes_of(dst), before);
  // Zero elements: nothing to do, not an error.
  EXPECT_NO_THROW(Tensor::empty({0, 4}, DType::f32).copy_from(Tensor::empty({0, 4}, DType::f32)));
}

TEST(TensorCopy, ToVectorReadsRowMajorLogicalOrder) {
  RUDNN_SEEDED_RNG(rng);
  std::vector<int64_t> data(30);
  for (auto& x : data)
    x = rng.integer(std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max());
  const Tensor t = Tensor::from_host(data, {5, 6});
  EXPECT_EQ(t.to_vector<int64_t>(), data);
  const std::vector<int64_t> tv = t.transpose(0, 1).to_vector<int64_t>();
  for (int64_t i = 0; i < 6; ++i)
    for (int64_t j = 0; j < 5; ++j) ASSERT_EQ(tv[i * 5 + j], data[j * 6 + i]);
  EXPECT_TRUE(
      throws_error([&] { t.to_vector<int32_t>(); }, ErrorCode::DTypeMismatch, {"i64", "i32"}));
}

TEST(TensorCpuOnly, CudaTensorsWithoutAGpuAreUnsupported) {
  if (cuda_available())
    GTEST_SKIP() << "a CUDA device is present: this checks the no-GPU behaviour";
  EXPECT_TRUE(throws_error([] { Tensor::empty({2}, DType::f32, Device::cuda(0)); },
                           ErrorCode::Unsupported, {"Tensor::empty", "cuda:0"}));
  EXPECT_TRUE(throws_error([] { Tensor::zeros({2}, DType::f32, Device::cuda(0)); },
                           ErrorCode::Unsupported, {}));
  EXPECT_TRUE(throws_error([] { Tensor::zeros({2}, DType::f32).to(Device::cuda(0)); },
                           ErrorCode::Unsupported, {}));
  float x = 0;
  EXPECT_TRUE(
      throws_error([&] { Tensor::from_blob(&x, 4, {1}, {1}, 0, DType::f32, Device::cuda(0)); },
                   ErrorCode::Unsupported, {}));
}

// ---- CUDA ---------------------------------------------------------------------------------

TEST(TensorGpu, HostDeviceHostRoundTripOfEveryDType) {
  RUDNN_REQUIRE_CUDA();
  RUDNN_SEEDED_RNG(rng);
  const Device gpu = Device::cuda(0);
  for (const DType dtype : kAllDTypes) {
    SCOPED_TRACE(dtype_name(dtype));
    const Shape shape{rng.integer(1, 64), rng.integer(1, 300)};
    const auto bytes = random_bytes(rng, shape_numel(shape), dtype);
    const Tensor d = Tensor::from_host(bytes.data(), shape, dtype, gpu);
    EXPECT_EQ(d.device(), gpu);
    EXPECT_TRUE(d.is_contiguous());
    EXPECT_EQ(d.str(),
              std::string("Tensor(") + dtype_name(dtype) + ", " + shape_str(shape) + ", cuda:0)");
    EXPECT_EQ(d.allocation_stream(), current_stream(gpu));
    const Tensor h = d.to_host();
    EXPECT_EQ(h.device(), Device::cpu());
    EXPECT_EQ(bytes_of(h), bytes);
    // Through to() both ways, and device -> device.
    const Tensor host = Tensor::from_host(bytes.data(), shape, dtype);
    const Tensor d2 = host.to(gpu);
    const Tensor d3 = d2.to(gpu);
    EXPECT_NE(d3.storage_data(), d2.storage_data());
    EXPECT_TRUE(bit_equal(d3.to(Device::cpu()), host));
  }
}

TEST(TensorGpu, CopyFromInAllFourDirectionsWithStridedViews) {
  RUDNN_REQUIRE_CUDA();
  RUDNN_SEEDED_RNG(rng);
  const Device devices[] = {Device::cpu(), Device::cuda(0)};
  const Shape shape{rng.integer(1, 5), rng.integer(1, 6), rng.integer(1, 7)};
  SCOPED_TRACE("shape " + shape_str(shape));
  for (const DType dtype : {DType::u8, DType::f16, DType::f32, DType::f64})
    for (const Device dst_dev : devices)
      for (const Device src_dev : devices)
        for (const Layout dst_layout : kAllLayouts)
          for (const Layout src_layout : kAllLayouts) {
            SCOPED_TRACE(::testing::Message() << dtype_name(dtype) << " dst " << dst_dev.str()
                                              << " " << layout_name(dst_layout) << " <- src "
                                              << src_dev.str() << " " << layout_name(src_layout));
            const Tensor dst = make_view(rng, shape, dtype, dst_dev, dst_layout);
            const Tensor src = make_view(rng, shape, dtype, src_dev, src_layout);
            check_copy(dst, src);
          }
}

TEST(TensorGpu, StridedDeviceViewsContiguousAndToHost) {
  RUDNN_REQUIRE_CUDA();
  RUDNN_SEEDED_RNG(rng);
  const Device gpu = Device::cuda(0);
  for (const DType dtype : {DType::bf16, DType::i32, DType::i64, DType::boolean}) {
    SCOPED_TRACE(dtype_name(dtype));
    const Tensor base = random_tensor_bytes(rng, {6, 9, 5}, dtype, gpu);
    const auto image = storage_image(base);
    for (const Tensor& view :
         {base.transpose(0, 2), base.slice(1, 2, 8), base.slice(2, 1, 5, 2).transpose(0, 1),
          base.slice(0, -2, 6).slice(1, 0, 9, 4)}) {
      const Tensor dense = view.contiguous();
      EXPECT_EQ(dense.device(), gpu);
      EXPECT_TRUE(dense.is_contiguous());
      EXPECT_EQ(bytes_of(dense), gather(image, view));  // bytes_of reads back through to_host
      EXPECT_EQ(bytes_of(view), gather(image, view));   // to_host of the strided view itself
      EXPECT_EQ(bytes_of(view.to(gpu)), gather(image, view));
    }
  }
}

TEST(TensorGpu, CopiesOnACreatedStream) {
  RUDNN_REQUIRE_CUDA();
  RUDNN_SEEDED_RNG(rng);
  const Device gpu = Device::cuda(0);
  const Stream s = Stream::create(gpu);
  const auto bytes = random_bytes(rng, 4096, DType::f32);
  const Tensor d = Tensor::from_host(bytes.data(), {64, 64}, DType::f32, gpu, s);
  EXPECT_EQ(d.allocation_stream(), s);
  const Tensor dst = Tensor::empty({64, 64}, DType::f32, gpu, s);
  dst.copy_from(d.transpose(0, 1), s);
  const Tensor back = dst.transpose(0, 1).to_host(s);
  EXPECT_EQ(bytes_of(back), bytes);
  const std::vector<float> v =
      d.to_vector<float>(s);  // compared as bytes: random bits include NaNs
  EXPECT_EQ(std::memcmp(v.data(), bytes.data(), bytes.size()), 0);
}

TEST(TensorGpu, FullAndZerosOnDevice) {
  RUDNN_REQUIRE_CUDA();
  RUDNN_SEEDED_RNG(rng);
  PoisonScope poison(true);  // unwritten device elements would read as 0xFF
  const Device gpu = Device::cuda(0);
  const double value = rng.integer(1, 100) + 0.25;
  for (const DType dtype : kAllDTypes) {
    SCOPED_TRACE(dtype_name(dtype));
    const Shape shape{rng.integer(1, 40), rng.integer(1, 700)};
    const Tensor z = Tensor::zeros(shape, dtype, gpu);
    EXPECT_EQ(z.device(), gpu);
    for (const unsigned char byte : bytes_of(z)) ASSERT_EQ(byte, 0);
    // The device fill writes the same bits as the host fill.
    EXPECT_TRUE(
        bit_equal(Tensor::full(shape, value, dtype, gpu), Tensor::full(shape, value, dtype)));
    if (dtype != DType::u32 &&
        dtype != DType::u8) {  // a negative value is out of range for unsigned dtypes
      EXPECT_TRUE(
          bit_equal(Tensor::full(shape, -value, dtype, gpu), Tensor::full(shape, -value, dtype)));
    }
  }
}

TEST(TensorGpu, EmptyOnANonExistentDeviceIsInvalidArgument) {
  RUDNN_REQUIRE_CUDA();
  const int n = cuda_device_count();
  const std::string missing = "cuda:" + std::to_string(n);
  EXPECT_TRUE(throws_error([&] { Tensor::empty({4}, DType::f32, Device::cuda(n)); },
                           ErrorCode::InvalidArgument, {"Tensor::empty", missing}));
  EXPECT_TRUE(throws_error([] { Tensor::empty({4}, DType::f32, Device::cuda(-1)); },
                           ErrorCode::InvalidArgument, {"cuda:-1"}));
  EXPECT_TRUE(throws_error([&] { Tensor::zeros({4}, DType::f32).to(Device::cuda(n)); },
                           ErrorCode::InvalidArgument, {missing}));
}

}  // namespace
}  // namespace rudnn
