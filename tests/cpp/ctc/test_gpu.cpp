// The GPU path is not implemented yet: CUDA operands must be refused (Unsupported), never
// copied to the host behind the caller's back, and mixed devices are DeviceMismatch.
#include "rudnn/ctc.h"
#include "support/test_support.h"

namespace rudnn::test {
namespace {

constexpr Device kGpu = Device::cuda(0);

TEST(CtcGpu, CudaOperandsAreUnsupportedForNow) {
  RUDNN_REQUIRE_CUDA();
  const Tensor lp = Tensor::zeros({4, 2, 3}, DType::f32, kGpu);
  const Tensor tg = Tensor::full({2, 1}, 1.0, DType::i64, kGpu);
  const Tensor len = Tensor::full({2}, 1.0, DType::i64, kGpu);
  const Tensor g = Tensor::full({}, 1.0, DType::f32, kGpu);
  EXPECT_TRUE(throws_error([&] { ctc_loss(lp, tg, len, len); }, ErrorCode::Unsupported,
                           {"ctc_loss: ", "not implemented on the GPU"}));
  EXPECT_TRUE(throws_error([&] { ctc_loss_backward(lp, tg, len, len, g); }, ErrorCode::Unsupported,
                           {"ctc_loss_backward: ", "not implemented on the GPU"}));
}

TEST(CtcGpu, MixedDevicesAreRefused) {
  RUDNN_REQUIRE_CUDA();
  const Tensor lp = Tensor::zeros({4, 2, 3}, DType::f64);
  const Tensor tg = Tensor::full({2, 1}, 1.0, DType::i64);
  const Tensor len = Tensor::full({2}, 1.0, DType::i64);
  const Tensor len_gpu = Tensor::full({2}, 1.0, DType::i64, kGpu);
  EXPECT_TRUE(throws_error([&] { ctc_loss(lp, tg, len_gpu, len); }, ErrorCode::DeviceMismatch,
                           {"ctc_loss: ", "input_lengths"}));
  EXPECT_TRUE(throws_error([&] { ctc_loss(lp, tg.to(kGpu), len, len); }, ErrorCode::DeviceMismatch,
                           {"ctc_loss: ", "targets"}));
}

}  // namespace
}  // namespace rudnn::test
