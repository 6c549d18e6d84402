// DLPack exchange: to_dlpack / from_dlpack with the unversioned DLManagedTensor.
//
// Imports use hand-built DLManagedTensors whose deleter counts its calls, so that every
// path (success, each kind of rejection) is seen to run the deleter exactly once.
#include <dlpack/dlpack.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "support/test_support.h"

namespace rudnn {
namespace {

using test::bytes_of;
using test::Rng;
using test::throws_error;

// Debian's DLPack 0.6 header predates kDLBool (added in 0.8); producers send code 6.
constexpr uint8_t kDLBoolCode = 6;

// A producer's tensor: owns its buffer, shape and strides, and counts deleter calls.
struct Producer {
  std::vector<unsigned char> buffer;
  std::vector<int64_t> shape, strides;
  int* deletes = nullptr;
  DLManagedTensor managed{};
};

// Builds a DLManagedTensor over `bytes` (copied into the producer). `strides` empty means
// NULL strides (contiguous).
DLManagedTensor* produce(const std::vector<unsigned char>& bytes, std::vector<int64_t> shape,
                         std::vector<int64_t> strides, DLDataType dtype, int* deletes,
                         DLDevice device = DLDevice{kDLCPU, 0}, uint64_t byte_offset = 0) {
  auto* p = new Producer();
  p->buffer = bytes;
  p->shape = std::move(shape);
  p->strides = std::move(strides);
  p->deletes = deletes;
  DLTensor& t = p->managed.dl_tensor;
  t.data = p->buffer.empty() ? nullptr : p->buffer.data();
  t.device = device;
  t.ndim = static_cast<int32_t>(p->shape.size());
  t.dtype = dtype;
  t.shape = p->shape.empty() ? nullptr : p->shape.data();
  t.strides = p->strides.empty() ? nullptr : p->strides.data();
  t.byte_offset = byte_offset;
  p->managed.manager_ctx = p;
  p->managed.deleter = [](DLManagedTensor* self) {
    auto* producer = static_cast<Producer*>(self->manager_ctx);
    ++*producer->deletes;
    delete producer;
  };
  return &p->managed;
}

std::vector<unsigned char> random_bytes(Rng& rng, size_t count, bool boolean = false) {
  std::vector<unsigned char> bytes(count);
  for (auto& b : bytes) b = static_cast<unsigned char>(rng.integer(0, boolean ? 1 : 255));
  return bytes;
}

struct DTypeCase {
  DLDataType dl;
  DType dtype;
};
const DTypeCase kDTypeCases[] = {
    {{kDLFloat, 32, 1}, DType::f32},       {{kDLFloat, 16, 1}, DType::f16},
    {{kDLBfloat, 16, 1}, DType::bf16},     {{kDLFloat, 64, 1}, DType::f64},
    {{kDLInt, 32, 1}, DType::i32},         {{kDLInt, 64, 1}, DType::i64},
    {{kDLUInt, 32, 1}, DType::u32},        {{kDLUInt, 8, 1}, DType::u8},
    {{kDLBoolCode, 8, 1}, DType::boolean},
};

// ---- Export --------------------------------------------------------------------------------

TEST(ToDlpack, ContiguousCpuTensorOfEveryDType) {
  RUDNN_SEEDED_RNG(rng);
  for (const DTypeCase& c : kDTypeCases) {
    SCOPED_TRACE(dtype_name(c.dtype));
    const auto bytes = random_bytes(rng, 24 * dtype_size(c.dtype), c.dtype == DType::boolean);
    const Tensor t = Tensor::from_host(bytes.data(), {2, 3, 4}, c.dtype);
    DLManagedTensor* m = to_dlpack(t);
    ASSERT_NE(m, nullptr);
    ASSERT_NE(m->deleter, nullptr);
    const DLTensor& d = m->dl_tensor;
    EXPECT_EQ(d.device.device_type, kDLCPU);
    EXPECT_EQ(d.device.device_id, 0);
    EXPECT_EQ(d.dtype.code, c.dl.code);
    EXPECT_EQ(d.dtype.bits, c.dl.bits);
    EXPECT_EQ(d.dtype.lanes, 1);
    ASSERT_EQ(d.ndim, 3);
    EXPECT_EQ(std::vector<int64_t>(d.shape, d.shape + 3), (std::vector<int64_t>{2, 3, 4}));
    ASSERT_NE(d.strides, nullptr);
    EXPECT_EQ(std::vector<int64_t>(d.strides, d.strides + 3), (std::vector<int64_t>{12, 4, 1}));
    EXPECT_EQ(d.data, t.data());  // no copy
    EXPECT_EQ(d.byte_offset, 0u);
    EXPECT_EQ(
        std::memcmp(static_cast<const char*>(d.data) + d.byte_offset, bytes.data(), bytes.size()),
        0);
    m->deleter(m);
  }
}

TEST(ToDlpack, StridedViewsExportTheirLayout) {
  const Tensor base = Tensor::zeros({6, 8}, DType::f32);
  struct Case {
    Tensor view;
    std::vector<int64_t> shape, strides;
    int64_t first;  // storage element of the view's element [0, 0]
  };
  const Case cases[] = {
      {base.transpose(0, 1), {8, 6}, {1, 8}, 0},
      {base.slice(0, 2, 5), {3, 8}, {8, 1}, 16},
      {base.slice(1, 1, 8, 3), {6, 3}, {8, 3}, 1},
      {base.slice(0, 1, 6, 2).transpose(0, 1).slice(0, 4, 8), {4, 3}, {1, 16}, 12},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(shape_str(c.view.shape()) + " strides " + shape_str(c.view.strides()));
    DLManagedTensor* m = to_dlpack(c.view);
    const DLTensor& d = m->dl_tensor;
    ASSERT_EQ(d.ndim, 2);
    EXPECT_EQ(std::vector<int64_t>(d.shape, d.shape + 2), c.shape);
    EXPECT_EQ(std::vector<int64_t>(d.strides, d.strides + 2), c.strides);
    // The view's offset is carried by the data pointer (byte_offset 0).
    EXPECT_EQ(
        static_cast<const char*>(d.data) + d.byte_offset,
        static_cast<const char*>(base.data()) + c.first * static_cast<int64_t>(sizeof(float)));
    m->deleter(m);
  }
}

TEST(ToDlpack, ZeroDimensionalTensor) {
  const Tensor t = Tensor::full({}, 7.0, DType::i64);
  DLManagedTensor* m = to_dlpack(t);
  EXPECT_EQ(m->dl_tensor.ndim, 0);
  EXPECT_EQ(*static_cast<const int64_t*>(m->dl_tensor.data), 7);
  m->deleter(m);
  EXPECT_TRUE(throws_error([] { to_dlpack(Tensor()); }, ErrorCode::InvalidArgument, {"undefined"}));
}

TEST(ToDlpack, TheExportKeepsStorageAliveAndReleasesItOnce) {
  RUDNN_SEEDED_RNG(rng);
  std::vector<float> buffer(32);
  for (float& x : buffer) x = rng.normal();
  const std::vector<float> original = buffer;
  int releases = 0;
  DLManagedTensor* m = nullptr;
  {
    const Tensor t = Tensor::from_blob(buffer.data(), buffer.size() * sizeof(float), {4, 8}, {8, 1},
                                       0, DType::f32, Device::cpu(), [&releases] { ++releases; });
    m = to_dlpack(t.slice(1, 2, 6));
  }
  EXPECT_EQ(releases, 0);  // the Tensor handles are gone; the export holds the storage
  const auto* data = static_cast<const float*>(m->dl_tensor.data);
  EXPECT_EQ(data[0], original[2]);
  EXPECT_EQ(data[m->dl_tensor.strides[0]], original[10]);
  m->deleter(m);
  EXPECT_EQ(releases, 1);

  // The same with allocator-owned storage: the bytes are returned only by the deleter.
  const size_t in_use = allocator_stats(Device::cpu()).bytes_in_use;
  DLManagedTensor* owned = to_dlpack(Tensor::empty({1000}, DType::f64));
  EXPECT_EQ(allocator_stats(Device::cpu()).bytes_in_use, in_use + 8000);
  owned->deleter(owned);
  EXPECT_EQ(allocator_stats(Device::cpu()).bytes_in_use, in_use);
}

// ---- Import ----------------------------------------------------------------------------------

TEST(FromDlpack, EveryDTypeContiguousWithNullStrides) {
  RUDNN_SEEDED_RNG(rng);
  for (const DTypeCase& c : kDTypeCases) {
    SCOPED_TRACE(dtype_name(c.dtype));
    int deletes = 0;
    const auto bytes = random_bytes(rng, 15 * dtype_size(c.dtype), c.dtype == DType::boolean);
    DLManagedTensor* m = produce(bytes, {3, 5}, {}, c.dl, &deletes);
    const void* producer_data = m->dl_tensor.data;
    {
      const Tensor t = from_dlpack(m);
      EXPECT_EQ(t.dtype(), c.dtype);
      EXPECT_EQ(t.device(), Device::cpu());
      EXPECT_EQ(t.shape(), (Shape{3, 5}));
      EXPECT_EQ(t.strides(), (Shape{5, 1}));  // NULL strides mean row-major
      EXPECT_TRUE(t.is_contiguous());
      EXPECT_EQ(t.data(), producer_data);  // no copy
      EXPECT_EQ(bytes_of(t), bytes);
      EXPECT_TRUE(t.allocation_stream().is_default());
      EXPECT_EQ(deletes, 0);
    }
    EXPECT_EQ(deletes, 1);
  }
}

TEST(FromDlpack, ExplicitStridesByteOffsetAndViewsKeepItAlive) {
  RUDNN_SEEDED_RNG(rng);
  int deletes = 0;
  // 40 int32 values; the tensor is a transposed 3x4 view starting at element 6.
  std::vector<int32_t> values(40);
  for (auto& v : values) v = static_cast<int32_t>(rng.integer(-100000, 100000));
  std::vector<unsigned char> bytes(values.size() * 4);
  std::memcpy(bytes.data(), values.data(), bytes.size());
  DLManagedTensor* m =
      produce(bytes, {3, 4}, {1, 5}, {kDLInt, 32, 1}, &deletes, {kDLCPU, 0}, 6 * sizeof(int32_t));
  const auto* base = static_cast<const unsigned char*>(m->dl_tensor.data);
  Tensor t = from_dlpack(m);
  EXPECT_EQ(t.strides(), (Shape{1, 5}));
  EXPECT_FALSE(t.is_contiguous());
  EXPECT_EQ(t.data(), base + 6 * sizeof(int32_t));
  const std::vector<int32_t> got = t.to_vector<int32_t>();
  for (int r = 0; r < 3; ++r)
    for (int c = 0; c < 4; ++c) ASSERT_EQ(got[r * 4 + c], values[6 + r + 5 * c]) << r << "," << c;
  // The view's extent bounds the storage: no view may reach past element 6 + 2 + 15.
  EXPECT_EQ(t.storage_bytes(), (2 + 15 + 1) * sizeof(int32_t));
  EXPECT_TRUE(throws_error([&] { t.as_strided({19}, {1}, 0); }, ErrorCode::InvalidArgument,
                           {"past its storage"}));
  // A view outlives the imported handle; the deleter waits for it.
  Tensor view = t.slice(1, 1, 3);
  t = Tensor();
  EXPECT_EQ(deletes, 0);
  EXPECT_EQ(view.to_vector<int32_t>()[0], values[6 + 5]);
  Tensor last = view;
  view = Tensor();
  EXPECT_EQ(deletes, 0);
  last = Tensor();
  EXPECT_EQ(deletes, 1);
}

TEST(FromDlpack, CudaHostMemoryIsTheCpu) {
  RUDNN_SEEDED_RNG(rng);
  int deletes = 0;
  const auto bytes = random_bytes(rng, 8 * 4);
  {
    const Tensor t =
        from_dlpack(produce(bytes, {8}, {1}, {kDLFloat, 32, 1}, &deletes, {kDLCUDAHost, 0}));
    EXPECT_EQ(t.device(), Device::cpu());
    EXPECT_EQ(bytes_of(t), bytes);
  }
  EXPECT_EQ(deletes, 1);
}

TEST(FromDlpack, ZeroDimensionalAndEmptyTensors) {
  int deletes = 0;
  {
    const std::vector<unsigned char> one = {0, 0, 0x20, 0x40};  // 2.5f little-endian
    const Tensor scalar = from_dlpack(produce(one, {}, {}, {kDLFloat, 32, 1}, &deletes));
    EXPECT_EQ(scalar.dim(), 0);
    EXPECT_EQ(scalar.to_vector<float>(), std::vector<float>{2.5f});
    const Tensor empty = from_dlpack(produce({}, {0, 4}, {}, {kDLFloat, 32, 1}, &deletes));
    EXPECT_EQ(empty.numel(), 0);
    EXPECT_EQ(empty.shape(), (Shape{0, 4}));
  }
  EXPECT_EQ(deletes, 2);
}

TEST(FromDlpack, NullDeleterIsAllowed) {
  std::vector<float> data = {1, 2, 3};
  std::vector<int64_t> shape = {3};
  DLManagedTensor m{};
  m.dl_tensor.data = data.data();
  m.dl_tensor.device = {kDLCPU, 0};
  m.dl_tensor.ndim = 1;
  m.dl_tensor.dtype = {kDLFloat, 32, 1};
  m.dl_tensor.shape = shape.data();
  EXPECT_EQ(from_dlpack(&m).to_vector<float>(), data);
  EXPECT_TRUE(throws_error([] { from_dlpack(nullptr); }, ErrorCode::InvalidArgument, {"null"}));
}

// A rejected import runs the producer's deleter exactly once before the error surfaces.
void expect_rejected(DLManagedTensor* m, const int& deletes, ErrorCode code,
                     std::initializer_list<std::string> fragments) {
  ASSERT_EQ(deletes, 0);
  EXPECT_TRUE(throws_error([&] { from_dlpack(m); }, code, fragments));
  EXPECT_EQ(deletes, 1);
}

TEST(FromDlpack, RejectionsRunTheDeleterOnce) {
  const std::vector<unsigned char> bytes(64);
  {
    int deletes = 0;
    SCOPED_TRACE("complex64");
    expect_rejected(produce(bytes, {4}, {}, {kDLComplex, 64, 1}, &deletes), deletes,
                    ErrorCode::Unsupported, {"from_dlpack", "code 5"});
  }
  {
    int deletes = 0;
    SCOPED_TRACE("2 lanes");
    expect_rejected(produce(bytes, {4}, {}, {kDLFloat, 32, 2}, &deletes), deletes,
                    ErrorCode::Unsupported, {"lanes"});
  }
  {
    int deletes = 0;
    SCOPED_TRACE("float8");
    expect_rejected(produce(bytes, {4}, {}, {kDLFloat, 8, 1}, &deletes), deletes,
                    ErrorCode::Unsupported, {"8 bits"});
  }
  {
    int deletes = 0;
    SCOPED_TRACE("int16");
    expect_rejected(produce(bytes, {4}, {}, {kDLInt, 16, 1}, &deletes), deletes,
                    ErrorCode::Unsupported, {});
  }
  {
    int deletes = 0;
    SCOPED_TRACE("OpenCL device");
    expect_rejected(produce(bytes, {4}, {}, {kDLFloat, 32, 1}, &deletes, {kDLOpenCL, 0}), deletes,
                    ErrorCode::Unsupported, {"device type 4"});
  }
  {
    int deletes = 0;
    SCOPED_TRACE("ROCm device");
    expect_rejected(produce(bytes, {4}, {}, {kDLFloat, 32, 1}, &deletes, {kDLROCM, 0}), deletes,
                    ErrorCode::Unsupported, {"device type"});
  }
  {
    int deletes = 0;
    SCOPED_TRACE("negative stride");
    expect_rejected(produce(bytes, {2, 2}, {-2, 1}, {kDLFloat, 32, 1}, &deletes), deletes,
                    ErrorCode::Unsupported, {"negative strides"});
  }
  {
    int deletes = 0;
    SCOPED_TRACE("negative dimension");
    expect_rejected(produce(bytes, {2, -1}, {}, {kDLFloat, 32, 1}, &deletes), deletes,
                    ErrorCode::InvalidArgument, {"negative"});
  }
}

TEST(FromDlpackCpuOnly, CudaMemoryWithoutAGpuIsUnsupported) {
  if (cuda_available())
    GTEST_SKIP() << "a CUDA device is present: this checks the no-GPU behaviour";
  const std::vector<unsigned char> bytes(16);
  for (const DLDeviceType type : {kDLCUDA, kDLCUDAManaged}) {
    int deletes = 0;
    SCOPED_TRACE(static_cast<int>(type));
    expect_rejected(produce(bytes, {4}, {}, {kDLFloat, 32, 1}, &deletes, {type, 0}), deletes,
                    ErrorCode::Unsupported, {"cuda:0"});
  }
}

// ---- Round trip ---------------------------------------------------------------------------

TEST(DlpackRoundTrip, SharesMemoryWithoutCopying) {
  RUDNN_SEEDED_RNG(rng);
  const Tensor base = test::random_tensor(rng, {5, 9}, DType::bf16);
  const Tensor view = base.transpose(0, 1).slice(0, 2, 9, 3);
  const size_t in_use = allocator_stats(Device::cpu()).bytes_in_use;
  const Tensor back = from_dlpack(to_dlpack(view));
  EXPECT_EQ(allocator_stats(Device::cpu()).bytes_in_use, in_use);  // nothing allocated
  EXPECT_EQ(back.dtype(), view.dtype());
  EXPECT_EQ(back.shape(), view.shape());
  EXPECT_EQ(back.strides(), view.strides());
  EXPECT_EQ(back.data(), view.data());
  EXPECT_TRUE(test::bit_equal(back, view));
  // A write through one is seen through the other.
  back.data_as<bfloat16>()[0] = bfloat16(42.0f);
  EXPECT_EQ(static_cast<float>(view.data_as<bfloat16>()[0]), 42.0f);

  // The import keeps the original storage alive after every other handle is gone.
  int releases = 0;
  std::vector<double> buffer(10, 3.0);
  Tensor imported;
  {
    const Tensor t = Tensor::from_blob(buffer.data(), 80, {10}, {1}, 0, DType::f64, Device::cpu(),
                                       [&releases] { ++releases; });
    imported = from_dlpack(to_dlpack(t));
  }
  EXPECT_EQ(releases, 0);
  EXPECT_EQ(imported.to_vector<double>(), buffer);
  imported = Tensor();
  EXPECT_EQ(releases, 1);
}

// ---- CUDA -------------------------------------------------------------------------------------

TEST(DlpackGpu, CudaTensorsExportAsKDLCUDAAndImportBack) {
  RUDNN_REQUIRE_CUDA();
  RUDNN_SEEDED_RNG(rng);
  const int last = cuda_device_count() - 1;
  for (const int index : {0, last}) {
    SCOPED_TRACE("cuda:" + std::to_string(index));
    const Device gpu = Device::cuda(index);
    const Tensor host = test::random_tensor(rng, {6, 7}, DType::f32);
    const Tensor d = host.to(gpu);
    const Tensor view = d.slice(1, 1, 7, 2);
    DLManagedTensor* m = to_dlpack(view);
    EXPECT_EQ(m->dl_tensor.device.device_type, kDLCUDA);
    EXPECT_EQ(m->dl_tensor.device.device_id, index);
    EXPECT_EQ(m->dl_tensor.data, view.data());
    EXPECT_EQ(std::vector<int64_t>(m->dl_tensor.strides, m->dl_tensor.strides + 2),
              (std::vector<int64_t>{7, 2}));
    const Tensor back = from_dlpack(m);
    EXPECT_EQ(back.device(), gpu);
    EXPECT_EQ(back.data(), view.data());
    EXPECT_TRUE(test::bit_equal(back, host.slice(1, 1, 7, 2)));
  }
}

TEST(DlpackGpu, ImportOfAMissingDeviceRunsTheDeleter) {
  RUDNN_REQUIRE_CUDA();
  int deletes = 0;
  const std::vector<unsigned char> bytes(16);
  // The pointer is never dereferenced: the import fails on the device index first.
  expect_rejected(
      produce(bytes, {4}, {}, {kDLFloat, 32, 1}, &deletes, {kDLCUDA, cuda_device_count()}), deletes,
      ErrorCode::InvalidArgument, {"does not exist"});
}

}  // namespace
}  // namespace rudnn
