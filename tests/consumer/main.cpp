// Runs one op through the installed package and checks its result.
#include <rudnn/rudnn.h>

#include <cmath>
#include <cstdio>

int main() {
  const auto x = rudnn::Tensor::from_host(std::vector<float>{1, 2, 3, 4}, {2, 2});
  const auto y = rudnn::rms_norm(x, {}, 1e-6f).to_vector<float>();
  const double expected = 1.0 / std::sqrt(2.5);  // row [1, 2]: mean square 2.5
  if (std::fabs(y[0] - expected) > 1e-6) {
    std::printf("consumer: rms_norm gave %f, expected %f\n", y[0], expected);
    return 1;
  }
  std::printf("consumer: ruDNN %s works (CUDA devices: %d)\n", rudnn::version(),
              rudnn::cuda_device_count());
  return 0;
}
