// Streams (default / CPU / created / borrowed, current stream, StreamGuard, resolve_stream)
// and the allocator (statistics, poisoning, the CUDA pool).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "support/test_support.h"

#if RUDNN_TEST_CUDA
#include <cuda_runtime_api.h>
#endif

namespace rudnn {
namespace {

using test::PoisonScope;
using test::throws_error;
using test::to_doubles;

// Every element of a floating-point tensor is NaN.
::testing::AssertionResult all_nan(const Tensor& t) {
  const std::vector<double> v = to_doubles(t);
  if (v.empty()) return ::testing::AssertionFailure() << "no elements";
  for (size_t i = 0; i < v.size(); ++i) {
    if (!std::isnan(v[i]))
      return ::testing::AssertionFailure() << "element " << i << " is " << v[i];
  }
  return ::testing::AssertionSuccess();
}

// ---- Streams without a GPU -------------------------------------------------------------------

TEST(Stream, DefaultStream) {
  const Stream s;
  EXPECT_TRUE(s.is_default());
  EXPECT_EQ(s.handle(), nullptr);
  EXPECT_TRUE(throws_error([&] { s.device(); }, ErrorCode::InvalidArgument, {"default Stream"}));
  EXPECT_NO_THROW(s.synchronize());
  EXPECT_TRUE(s == Stream());
  EXPECT_FALSE(s == Stream::cpu());
}

TEST(Stream, CpuStream) {
  const Stream s = Stream::cpu();
  EXPECT_FALSE(s.is_default());
  EXPECT_EQ(s.device(), Device::cpu());
  EXPECT_EQ(s.handle(), nullptr);
  EXPECT_NO_THROW(s.synchronize());
  EXPECT_TRUE(s == Stream::cpu());
  EXPECT_TRUE(Stream::create(Device::cpu()) == s);  // creating a "CPU stream" gives the CPU stream
  EXPECT_TRUE(current_stream(Device::cpu()) == s);
  const Stream copy = s;
  EXPECT_TRUE(copy == s);
}

TEST(Stream, StreamGuardOnTheCpuAndOnTheDefaultStream) {
  {
    StreamGuard guard(Stream::cpu());
    EXPECT_TRUE(current_stream(Device::cpu()) == Stream::cpu());
  }
  EXPECT_TRUE(current_stream(Device::cpu()) == Stream::cpu());
  // The default Stream names no device, so there is nothing to make current.
  EXPECT_TRUE(throws_error([] { StreamGuard guard{Stream()}; }, ErrorCode::InvalidArgument,
                           {"default Stream"}));
}

TEST(Stream, ResolveStream) {
  EXPECT_TRUE(resolve_stream(Stream(), Device::cpu(), "op") == Stream::cpu());
  EXPECT_TRUE(resolve_stream(Stream::cpu(), Device::cpu(), "op") == Stream::cpu());
  // A stream of another device is rejected, naming the op and both devices.
  EXPECT_TRUE(throws_error([] { resolve_stream(Stream::cpu(), Device::cuda(0), "my_op"); },
                           ErrorCode::DeviceMismatch, {"my_op", "cpu", "cuda:0"}));
  // Factories resolve their stream argument the same way.
  EXPECT_NO_THROW(Tensor::empty({2}, DType::f32, Device::cpu(), Stream::cpu()));
}

TEST(Stream, BorrowOfACpuDeviceIsInvalidArgument) {
  EXPECT_TRUE(throws_error([] { Stream::borrow(Device::cpu(), nullptr); },
                           ErrorCode::InvalidArgument,
                           {"Stream::borrow", "cpu", "not a CUDA device"}));
}

TEST(StreamCpuOnly, CudaStreamsWithoutAGpuAreUnsupported) {
  if (cuda_available())
    GTEST_SKIP() << "a CUDA device is present: this checks the no-GPU behaviour";
  EXPECT_TRUE(throws_error([] { Stream::create(Device::cuda(0)); }, ErrorCode::Unsupported,
                           {"Stream::create"}));
  EXPECT_TRUE(throws_error([] { Stream::borrow(Device::cuda(0), nullptr); }, ErrorCode::Unsupported,
                           {"Stream::borrow"}));
  EXPECT_TRUE(throws_error([] { current_stream(Device::cuda(0)); }, ErrorCode::Unsupported,
                           {"current_stream"}));
  EXPECT_TRUE(throws_error([] { resolve_stream(Stream(), Device::cuda(0), "op"); },
                           ErrorCode::Unsupported, {}));
}

// ---- Allocator on the host ---------------------------------------------------------------------

TEST(Allocator, HostBytesInUseRiseAndFallWithTensors) {
  const Device cpu = Device::cpu();
  const AllocatorStats start = allocator_stats(cpu);
  {
    const Tensor a = Tensor::empty({1000}, DType::f32);
    AllocatorStats s = allocator_stats(cpu);
    EXPECT_EQ(s.bytes_in_use, start.bytes_in_use + 4000);
    EXPECT_EQ(s.allocations, start.allocations + 1);
    EXPECT_EQ(s.bytes_reserved, s.bytes_in_use);  // the host keeps no cache
    {
      const Tensor b = Tensor::zeros({3, 7}, DType::f64);
      EXPECT_EQ(allocator_stats(cpu).bytes_in_use, start.bytes_in_use + 4000 + 168);
      // Views and handle copies allocate nothing; contiguous() of a dense tensor neither.
      const Tensor view = b.transpose(0, 1).slice(0, 1, 5);
      const Tensor same = a.contiguous();
      const Tensor copy = a;
      EXPECT_EQ(allocator_stats(cpu).bytes_in_use, start.bytes_in_use + 4168);
      EXPECT_EQ(allocator_stats(cpu).allocations, start.allocations + 2);
      // A dense copy of the view allocates exactly its own bytes.
      const Tensor dense = view.contiguous();
      EXPECT_EQ(allocator_stats(cpu).bytes_in_use, start.bytes_in_use + 4168 + 4 * 3 * 8);
    }
    EXPECT_EQ(allocator_stats(cpu).bytes_in_use, start.bytes_in_use + 4000);
  }
  EXPECT_EQ(allocator_stats(cpu).bytes_in_use, start.bytes_in_use);
  // A zero-element tensor holds no memory.
  const Tensor nothing = Tensor::empty({0, 16}, DType::f32);
  EXPECT_EQ(allocator_stats(cpu).bytes_in_use, start.bytes_in_use);
}

TEST(Allocator, HostPeakAndResetPeak) {
  const Device cpu = Device::cpu();
  reset_peak_memory_stats(cpu);
  const size_t base = allocator_stats(cpu).bytes_in_use;
  EXPECT_EQ(allocator_stats(cpu).peak_bytes_in_use, base);
  {
    const Tensor big = Tensor::empty({1 << 20}, DType::u8);
    { const Tensor bigger = Tensor::empty({1 << 21}, DType::u8); }
    const AllocatorStats s = allocator_stats(cpu);
    EXPECT_EQ(s.bytes_in_use, base + (1 << 20));
    EXPECT_EQ(s.peak_bytes_in_use, base + (1 << 20) + (1 << 21));  // both were alive at once
    reset_peak_memory_stats(cpu);
    EXPECT_EQ(allocator_stats(cpu).peak_bytes_in_use,
              base + (1 << 20));  // the peak restarts at what is in use
  }
  EXPECT_EQ(allocator_stats(cpu).bytes_in_use, base);
  EXPECT_EQ(allocator_stats(cpu).peak_bytes_in_use, base + (1 << 20));
  reset_peak_memory_stats(cpu);
  EXPECT_EQ(allocator_stats(cpu).peak_bytes_in_use, base);
  EXPECT_NO_THROW(release_cached_memory(cpu));  // nothing cached on the host
}

TEST(Allocator, PoisoningIsOffByDefaultUnlessTheEnvironmentSaysSo) {
  const char* env = std::getenv("RUDNN_POISON_ALLOCATIONS");
  const bool from_env = env != nullptr && std::strcmp(env, "1") == 0;
  EXPECT_EQ(poison_allocations(), from_env);
  {
    PoisonScope scope(!from_env);
    EXPECT_EQ(poison_allocations(), !from_env);
  }
  EXPECT_EQ(poison_allocations(), from_env);
}

TEST(Allocator, PoisonedHostAllocationsReadAsNaN) {
  PoisonScope scope(true);
  EXPECT_TRUE(poison_allocations());
  for (const DType dtype : {DType::f32, DType::f16, DType::bf16, DType::f64}) {
    SCOPED_TRACE(dtype_name(dtype));
    EXPECT_TRUE(all_nan(Tensor::empty({5, 13}, dtype)));
    // Copies allocate too: the dense copy of a view starts poisoned, then is overwritten.
    const Tensor z = Tensor::zeros({4, 6}, dtype);
    const Tensor dense = z.transpose(0, 1).contiguous();
    for (const double v : to_doubles(dense)) ASSERT_EQ(v, 0.0);
  }
  // Integer tensors read all bits set.
  for (const int32_t v : Tensor::empty({9}, DType::i32).to_vector<int32_t>()) EXPECT_EQ(v, -1);
  for (const uint8_t v : Tensor::empty({9}, DType::u8).to_vector<uint8_t>()) EXPECT_EQ(v, 0xff);
  // Wrapped memory is the caller's and is never poisoned.
  float x = 1.5f;
  EXPECT_EQ(
      Tensor::from_blob(&x, sizeof x, {1}, {1}, 0, DType::f32, Device::cpu()).to_vector<float>()[0],
      1.5f);
}

TEST(AllocatorCpuOnly, DeviceStatisticsWithoutAGpuAreUnsupported) {
  if (cuda_available())
    GTEST_SKIP() << "a CUDA device is present: this checks the no-GPU behaviour";
  EXPECT_TRUE(throws_error([] { allocator_stats(Device::cuda(0)); }, ErrorCode::Unsupported,
                           {"allocator_stats"}));
  EXPECT_TRUE(
      throws_error([] { reset_peak_memory_stats(Device::cuda(0)); }, ErrorCode::Unsupported, {}));
  EXPECT_TRUE(
      throws_error([] { release_cached_memory(Device::cuda(0)); }, ErrorCode::Unsupported, {}));
}

// ---- CUDA streams ---------------------------------------------------------------------------

TEST(StreamGpu, CreateAndBorrow) {
  RUDNN_REQUIRE_CUDA();
  const Device gpu = Device::cuda(0);
  const Stream a = Stream::create(gpu), b = Stream::create(gpu);
  EXPECT_FALSE(a.is_default());
  EXPECT_EQ(a.device(), gpu);
  EXPECT_NE(a.handle(), nullptr);
  EXPECT_NE(a.handle(), b.handle());
  EXPECT_FALSE(a == b);
  EXPECT_TRUE(a == Stream(a));
  EXPECT_NO_THROW(a.synchronize());
  // A borrowed handle is the same stream as its owner (same device and handle).
  const Stream borrowed = Stream::borrow(gpu, a.handle());
  EXPECT_TRUE(borrowed == a);
  EXPECT_EQ(borrowed.device(), gpu);
  // Borrowing nullptr names the legacy default stream, the current stream without guards.
  const Stream legacy = Stream::borrow(gpu, nullptr);
  EXPECT_EQ(legacy.handle(), nullptr);
  EXPECT_FALSE(legacy.is_default());
  EXPECT_TRUE(current_stream(gpu) == legacy);
  EXPECT_FALSE(legacy == Stream::cpu());
  EXPECT_TRUE(resolve_stream(Stream(), gpu, "op") == legacy);
  EXPECT_TRUE(resolve_stream(a, gpu, "op") == a);
  const int n = cuda_device_count();
  EXPECT_TRUE(throws_error([&] { Stream::create(Device::cuda(n)); }, ErrorCode::InvalidArgument,
                           {"Stream::create"}));
  EXPECT_TRUE(throws_error([&] { Stream::borrow(Device::cuda(n), nullptr); },
                           ErrorCode::InvalidArgument, {}));
}

#if RUDNN_TEST_CUDA
TEST(StreamGpu, BorrowedCallerStreamOrdersWork) {
  RUDNN_REQUIRE_CUDA();
  RUDNN_SEEDED_RNG(rng);
  cudaStream_t raw = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&raw, cudaStreamNonBlocking), cudaSuccess);
  {
    const Stream s = Stream::borrow(Device::cuda(0), raw);  // cudaStream_t converts implicitly
    EXPECT_EQ(s.handle(), raw);
    const Tensor host = test::random_tensor(rng, {128, 33}, DType::f32);
    const Tensor d = host.to(Device::cuda(0), s);
    EXPECT_TRUE(d.allocation_stream() == s);
    EXPECT_TRUE(test::bit_equal(d.to_host(s), host));
    s.synchronize();
  }
  // The tensor was freed on `raw`: let that finish before the caller destroys it.
  ASSERT_EQ(cudaStreamSynchronize(raw), cudaSuccess);
  ASSERT_EQ(cudaStreamDestroy(raw), cudaSuccess);
}
#endif

TEST(StreamGpu, StreamGuardNestingRestoresThePreviousStream) {
  RUDNN_REQUIRE_CUDA();
  const Device gpu = Device::cuda(0);
  const Stream legacy = current_stream(gpu);
  const Stream outer = Stream::create(gpu), inner = Stream::create(gpu);
  {
    StreamGuard g1(outer);
    EXPECT_TRUE(current_stream(gpu) == outer);
    EXPECT_TRUE(resolve_stream(Stream(), gpu, "op") == outer);
    {
      StreamGuard g2(inner);
      EXPECT_TRUE(current_stream(gpu) == inner);
      // A factory on the default stream allocates on the current one.
      EXPECT_TRUE(Tensor::empty({8}, DType::f32, gpu).allocation_stream() == inner);
      {
        StreamGuard g3(outer);  // re-entering a stream already in the stack
        EXPECT_TRUE(current_stream(gpu) == outer);
      }
      EXPECT_TRUE(current_stream(gpu) == inner);
    }
    EXPECT_TRUE(current_stream(gpu) == outer);
    // The CPU's current stream is untouched by CUDA guards.
    EXPECT_TRUE(current_stream(Device::cpu()) == Stream::cpu());
  }
  EXPECT_TRUE(current_stream(gpu) == legacy);
}

TEST(StreamGpu, ResolveStreamRejectsStreamsOfOtherDevices) {
  RUDNN_REQUIRE_CUDA();
  const Stream s = Stream::create(Device::cuda(0));
  // CPU operands with a CUDA stream.
  EXPECT_TRUE(throws_error([&] { resolve_stream(s, Device::cpu(), "layer_norm"); },
                           ErrorCode::DeviceMismatch, {"layer_norm", "cuda:0", "cpu"}));
  EXPECT_TRUE(throws_error([&] { Tensor::empty({4}, DType::f32, Device::cpu(), s); },
                           ErrorCode::DeviceMismatch, {"Tensor::empty"}));
  EXPECT_TRUE(throws_error([&] { Tensor::empty({4}, DType::f32, Device::cuda(0), Stream::cpu()); },
                           ErrorCode::DeviceMismatch, {"Tensor::empty"}));
}

TEST(StreamGpu, ResolveStreamRejectsAStreamOfAnotherGpu) {
  RUDNN_REQUIRE_CUDA();
  if (cuda_device_count() < 2) GTEST_SKIP() << "needs two CUDA devices";
  const Stream s = Stream::create(Device::cuda(1));
  EXPECT_TRUE(throws_error([&] { resolve_stream(s, Device::cuda(0), "softmax"); },
                           ErrorCode::DeviceMismatch, {"softmax", "cuda:1", "cuda:0"}));
}

// ---- CUDA allocator ---------------------------------------------------------------------------

TEST(AllocatorGpu, StreamOrderedAllocationOnACreatedStream) {
  RUDNN_REQUIRE_CUDA();
  RUDNN_SEEDED_RNG(rng);
  const Device gpu = Device::cuda(0);
  const Stream s = Stream::create(gpu);
  const AllocatorStats start = allocator_stats(gpu);
  {
    const Tensor t = Tensor::empty({1 << 20}, DType::f32, gpu, s);
    EXPECT_TRUE(t.allocation_stream() == s);
    const AllocatorStats during = allocator_stats(gpu);
    EXPECT_EQ(during.bytes_in_use, start.bytes_in_use + (4u << 20));
    EXPECT_EQ(during.allocations, start.allocations + 1);
    EXPECT_GE(during.bytes_reserved, during.bytes_in_use);
    EXPECT_GE(during.peak_bytes_in_use, during.bytes_in_use);
    // Work ordered on the same stream sees the allocation.
    const Tensor host = test::random_tensor(rng, {1 << 20}, DType::f32);
    t.copy_from(host, s);
    EXPECT_TRUE(test::bit_equal(t.to_host(s), host));
  }
  EXPECT_EQ(allocator_stats(gpu).bytes_in_use, start.bytes_in_use);
  s.synchronize();
}

TEST(AllocatorGpu, ReleaseCachedMemoryReturnsFreedBlocks) {
  RUDNN_REQUIRE_CUDA();
  const Device gpu = Device::cuda(0);
  const size_t big = size_t{256} << 20;
  {
    const Tensor t = Tensor::empty({static_cast<int64_t>(big)}, DType::u8, gpu);
    EXPECT_GE(allocator_stats(gpu).bytes_reserved, allocator_stats(gpu).bytes_in_use);
  }
  current_stream(gpu).synchronize();
  // Freed blocks stay cached in the pool...
  const AllocatorStats cached = allocator_stats(gpu);
  EXPECT_GE(cached.bytes_reserved, cached.bytes_in_use + big);
  // ...until released.
  release_cached_memory(gpu);
  const AllocatorStats released = allocator_stats(gpu);
  EXPECT_LT(released.bytes_reserved, cached.bytes_reserved);
  EXPECT_GE(released.bytes_reserved, released.bytes_in_use);
  // The pool still serves allocations afterwards.
  const Tensor again = Tensor::full({1024}, 2.0, DType::f32, gpu);
  EXPECT_EQ(again.to_vector<float>(), std::vector<float>(1024, 2.0f));
  EXPECT_GE(allocator_stats(gpu).bytes_reserved, allocator_stats(gpu).bytes_in_use);
}

TEST(AllocatorGpu, DevicePeakAndReset) {
  RUDNN_REQUIRE_CUDA();
  const Device gpu = Device::cuda(0);
  reset_peak_memory_stats(gpu);
  const size_t base = allocator_stats(gpu).bytes_in_use;
  EXPECT_EQ(allocator_stats(gpu).peak_bytes_in_use, base);
  { const Tensor t = Tensor::empty({1 << 16}, DType::f64, gpu); }
  EXPECT_EQ(allocator_stats(gpu).bytes_in_use, base);
  EXPECT_EQ(allocator_stats(gpu).peak_bytes_in_use, base + (size_t{8} << 16));
  reset_peak_memory_stats(gpu);
  EXPECT_EQ(allocator_stats(gpu).peak_bytes_in_use, base);
}

TEST(AllocatorGpu, PoisonedDeviceAllocationsReadAsNaN) {
  RUDNN_REQUIRE_CUDA();
  PoisonScope scope(true);
  const Device gpu = Device::cuda(0);
  const Stream s = Stream::create(gpu);
  for (const DType dtype : {DType::f32, DType::f16, DType::bf16}) {
    SCOPED_TRACE(dtype_name(dtype));
    EXPECT_TRUE(all_nan(Tensor::empty({17, 129}, dtype, gpu)));
    // On a created stream too (the fill is ordered on the allocating stream).
    const Tensor t = Tensor::empty({3000}, dtype, gpu, s);
    EXPECT_TRUE(all_nan(t.to_host(s)));
  }
  s.synchronize();
}

}  // namespace
}  // namespace rudnn

namespace rudnn {
namespace {

TEST(StreamWait, CpuStreamsHaveNothingToWaitFor) {
  EXPECT_NO_THROW(Stream::cpu().wait(Stream::cpu()));
  EXPECT_TRUE(test::throws_error([] { Stream().wait(Stream::cpu()); }, ErrorCode::InvalidArgument,
                                 {"default Stream"}));
}

TEST(StreamWaitGpu, OrdersAConsumerStreamAfterAProducerStream) {
  RUDNN_REQUIRE_CUDA();
  RUDNN_SEEDED_RNG(rng);
  const Device gpu = Device::cuda(0);
  const Stream producer = Stream::create(gpu), consumer = Stream::create(gpu);
  // A long op on the producer (hundreds of microseconds), then a copy of its result on the
  // consumer: without the wait the copy would read the output before it is written.
  const Tensor host = test::random_tensor(rng, {8192, 8192}, DType::f32);
  const Tensor x = host.to(gpu, producer);
  producer.synchronize();
  const Tensor out = test::poisoned({8192, 8192}, DType::f32, gpu);
  for (int i = 0; i < 4; ++i) softmax_last_axis_into(out, x, producer);
  consumer.wait(producer);
  const Tensor copy = Tensor::empty({8192, 8192}, DType::f32, gpu, consumer);
  copy.copy_from(out, consumer);
  consumer.synchronize();
  EXPECT_TRUE(test::bit_equal(copy, out));
  EXPECT_TRUE(test::throws_error([&] { consumer.wait(Stream::cpu()); }, ErrorCode::DeviceMismatch,
                                 {"Stream::wait", "cuda:0", "cpu"}));
}

}  // namespace
}  // namespace rudnn
