#include "support/test_support.h"

#if RUDNN_TEST_CUDA
#include <cuda_runtime_api.h>
#endif

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>

namespace rudnn::test {

namespace {

uint64_t pick_seed() {
  if (const char* s = std::getenv("RUDNN_TEST_SEED")) return std::strtoull(s, nullptr, 10);
  std::random_device device;
  return (static_cast<uint64_t>(device()) << 32) ^ device();
}

template <class T>
Tensor from_doubles(const std::vector<double>& values, const Shape& shape) {
  std::vector<T> data(values.size());
  for (size_t i = 0; i < values.size(); ++i) {
    if constexpr (std::is_same_v<T, half> || std::is_same_v<T, bfloat16>) {
      data[i] = T(static_cast<float>(values[i]));
    } else {
      data[i] = static_cast<T>(values[i]);
    }
  }
  return Tensor::from_host(data, shape);
}

}  // namespace

Rng::Rng() : seed_(pick_seed()), engine_(seed_) {}

float Rng::normal(float mean, float stddev) {
  return std::normal_distribution<float>(mean, stddev)(engine_);
}
float Rng::uniform(float lo, float hi) {
  return std::uniform_real_distribution<float>(lo, hi)(engine_);
}
int64_t Rng::integer(int64_t lo, int64_t hi) {
  return std::uniform_int_distribution<int64_t>(lo, hi)(engine_);
}

Tensor host_tensor(const std::vector<double>& values, const Shape& shape, DType dtype) {
  switch (dtype) {
    case DType::f32:
      return from_doubles<float>(values, shape);
    case DType::f16:
      return from_doubles<half>(values, shape);
    case DType::bf16:
      return from_doubles<bfloat16>(values, shape);
    case DType::f64:
      return from_doubles<double>(values, shape);
    case DType::i32:
      return from_doubles<int32_t>(values, shape);
    case DType::i64:
      return from_doubles<int64_t>(values, shape);
    case DType::u32:
      return from_doubles<uint32_t>(values, shape);
    case DType::u8:
      return from_doubles<uint8_t>(values, shape);
    case DType::boolean:
      break;
  }
  throw Error(ErrorCode::Unsupported, "host_tensor: unsupported dtype");
}

Tensor random_tensor(Rng& rng, const Shape& shape, DType dtype, float mean, float stddev) {
  std::vector<double> v(static_cast<size_t>(shape_numel(shape)));
  std::normal_distribution<float> dist(mean, stddev);
  for (double& x : v) x = dist(rng.engine());
  return host_tensor(v, shape, dtype);
}

Tensor random_integers(Rng& rng, const Shape& shape, DType dtype, int64_t lo, int64_t hi) {
  std::vector<double> v(static_cast<size_t>(shape_numel(shape)));
  std::uniform_int_distribution<int64_t> dist(lo, hi);
  for (double& x : v) x = static_cast<double>(dist(rng.engine()));
  return host_tensor(v, shape, dtype);
}

std::vector<double> central_differences(double* x, int64_t n, const std::function<double()>& loss,
                                        double h) {
  std::vector<double> out(static_cast<size_t>(n));
  for (int64_t e = 0; e < n; ++e) {
    const double saved = x[e];
    x[e] = saved + h;
    const double up = loss();
    x[e] = saved - h;
    const double down = loss();
    x[e] = saved;
    out[static_cast<size_t>(e)] = (up - down) / (2 * h);
  }
  return out;
}

std::vector<double> to_doubles(const Tensor& t) {
  const Tensor h = t.to_host();
  std::vector<double> out(static_cast<size_t>(h.numel()));
  const void* p = h.data();
  for (size_t i = 0; i < out.size(); ++i) {
    switch (h.dtype()) {
      case DType::f32:
        out[i] = static_cast<const float*>(p)[i];
        break;
      case DType::f16:
        out[i] = static_cast<float>(static_cast<const half*>(p)[i]);
        break;
      case DType::bf16:
        out[i] = static_cast<float>(static_cast<const bfloat16*>(p)[i]);
        break;
      case DType::f64:
        out[i] = static_cast<const double*>(p)[i];
        break;
      case DType::i32:
        out[i] = static_cast<const int32_t*>(p)[i];
        break;
      case DType::i64:
        out[i] = static_cast<double>(static_cast<const int64_t*>(p)[i]);
        break;
      case DType::u32:
        out[i] = static_cast<const uint32_t*>(p)[i];
        break;
      case DType::u8:
        out[i] = static_cast<const uint8_t*>(p)[i];
        break;
      case DType::boolean:
        out[i] = static_cast<const uint8_t*>(p)[i] != 0;
        break;
    }
  }
  return out;
}

std::vector<unsigned char> bytes_of(const Tensor& t) {
  const Tensor h = t.to_host();
  const auto* p = static_cast<const unsigned char*>(h.data());
  return std::vector<unsigned char>(p, p + h.numel() * static_cast<int64_t>(h.itemsize()));
}

double tolerance(DType dtype) {
  switch (dtype) {
    case DType::f32:
      return 1e-5;
    case DType::f16:
      return 2e-3;
    case DType::bf16:
      return 1e-2;
    default:
      return 0.0;
  }
}

::testing::AssertionResult all_close(const Tensor& got, const Tensor& expected, double tol,
                                     double floor) {
  if (got.shape() != expected.shape()) {
    return ::testing::AssertionFailure()
           << "shape " << shape_str(got.shape()) << " vs expected " << shape_str(expected.shape());
  }
  if (got.dtype() != expected.dtype()) {
    return ::testing::AssertionFailure() << "dtype " << dtype_name(got.dtype()) << " vs expected "
                                         << dtype_name(expected.dtype());
  }
  const std::vector<double> g = to_doubles(got), e = to_doubles(expected);
  double diff2 = 0.0, ref2 = 0.0, worst = 0.0;
  size_t worst_at = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    const bool gf = std::isfinite(g[i]), ef = std::isfinite(e[i]);
    if (!ef || !gf) {
      const bool same =
          (std::isnan(e[i]) && std::isnan(g[i])) || (std::isinf(e[i]) && g[i] == e[i]);
      if (!same) {
        return ::testing::AssertionFailure()
               << "element " << i << " is " << g[i] << ", expected " << e[i];
      }
      continue;
    }
    const double d = g[i] - e[i];
    diff2 += d * d;
    ref2 += e[i] * e[i];
    if (std::fabs(d) > worst) {
      worst = std::fabs(d);
      worst_at = i;
    }
  }
  const double denominator = std::max(std::sqrt(ref2), floor);
  const double err = denominator > 0.0 ? std::sqrt(diff2) / denominator : std::sqrt(diff2);
  if (!(err <= tol)) {
    return ::testing::AssertionFailure()
           << "relative L2 error " << err << " > " << tol << " (worst element " << worst_at << ": "
           << g[worst_at] << " vs " << e[worst_at] << ", of " << g.size() << ")";
  }
  return ::testing::AssertionSuccess() << "relative L2 error " << err;
}

::testing::AssertionResult all_close(const Tensor& got, const Tensor& expected) {
  return all_close(got, expected, tolerance(expected.dtype()));
}

::testing::AssertionResult bit_equal(const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape() || a.dtype() != b.dtype()) {
    return ::testing::AssertionFailure() << a.str() << " vs " << b.str();
  }
  const auto x = bytes_of(a), y = bytes_of(b);
  for (size_t i = 0; i < x.size(); ++i) {
    if (x[i] != y[i])
      return ::testing::AssertionFailure()
             << "byte " << i << " differs (element " << i / a.itemsize() << ")";
  }
  return ::testing::AssertionSuccess();
}

::testing::AssertionResult throws_error(const std::function<void()>& fn, ErrorCode code,
                                        std::initializer_list<std::string> fragments) {
  try {
    fn();
  } catch (const Error& e) {
    if (e.code() != code) {
      return ::testing::AssertionFailure()
             << "error code " << error_code_name(e.code()) << ", expected " << error_code_name(code)
             << " (message: " << e.what() << ")";
    }
    for (const std::string& f : fragments) {
      if (std::string(e.what()).find(f) == std::string::npos) {
        return ::testing::AssertionFailure()
               << "message \"" << e.what() << "\" lacks \"" << f << "\"";
      }
    }
    return ::testing::AssertionSuccess() << e.what();
  } catch (const std::exception& e) {
    return ::testing::AssertionFailure() << "threw a non-rudnn exception: " << e.what();
  }
  return ::testing::AssertionFailure() << "did not throw";
}

Tensor poisoned(const Shape& shape, DType dtype, Device device) {
  const Tensor host = Tensor::empty(shape, dtype);
  if (host.numel() > 0)
    std::memset(host.data(), 0xff, static_cast<size_t>(host.numel()) * host.itemsize());
  if (device.is_cpu()) return host;
  const Tensor t = host.to(device);
  // A copy from pageable memory may still be landing when to() returns; tests go on to use
  // the tensor on other streams, so wait for it here.
  current_stream(device).synchronize();
  return t;
}

namespace {
// Device 0's compute capability; false in builds without CUDA and when the query fails.
bool compute_capability(int& major, int& minor) {
#if RUDNN_TEST_CUDA
  if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0) != cudaSuccess ||
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, 0) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  return true;
#else
  (void)major;
  (void)minor;
  return false;
#endif
}
}  // namespace

int device_compute_major() {
  int major = 0, minor = 0;
  return compute_capability(major, minor) ? major : 0;
}

bool device_is_sm90() {
  int major = 0, minor = 0;
  return compute_capability(major, minor) && major == 9 && minor == 0;
}

}  // namespace rudnn::test
