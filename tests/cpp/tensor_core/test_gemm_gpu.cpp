// The tensor-core GEMM on the GPU against a float64 host product: dense (every layout, bf16
// and f16 on the mma.sync and wgmma paths, f32 on CUDA cores), the epilogue (alpha, beta, C,
// bias), outputs poisoned with NaN beforehand (an element left unwritten fails), and grouped
// GEMM with empty, tiny, huge and skewed groups whose offsets live on the device.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "test_gemm_common.h"

namespace rudnn::test {
namespace {

using gemm::GroupedDim;
using gemm::Layout;
using gemm::Path;
using gemm_support::Matrix;
using gemm_support::random_matrix;

bool hopper_device() { return gemm::hopper_available(Device::cuda(0)); }

double gemm_tolerance(DType dtype, bool tf32 = false) {
  // The result is rounded to its dtype once; FP32 accumulation adds little beside it. TF32
  // rounds the f32 operands to 10-bit mantissas (about 5e-4 each).
  if (tf32) return 5e-3;
  return dtype == DType::bf16 ? 1e-2 : dtype == DType::f16 ? 2e-3 : 1e-5;
}

struct EpilogueCase {
  float alpha = 1.0f, beta = 0.0f;
  bool bias = false;
  bool tf32 = false;       // MathMode::Tf32 (f32 operands)
  int hopper_block_n = 0;  // Tuning::hopper_block_n (0: the entry's choice)
};

// D = alpha A.B + beta C + bias through gemm(), compared with the float64 product.
void check_dense(Rng& rng, DType dtype, Path path, int64_t m, int64_t n, int64_t k, Layout la,
                 Layout lb, EpilogueCase e = {}) {
  SCOPED_TRACE(::testing::Message()
               << "M=" << m << " N=" << n << " K=" << k << " A "
               << (la == Layout::RowMajor ? "row" : "col") << " B "
               << (lb == Layout::RowMajor ? "row" : "col") << " alpha=" << e.alpha << " beta="
               << e.beta << " bias=" << e.bias << " tf32=" << e.tf32 << " BN=" << e.hopper_block_n);
  const Device dev = Device::cuda(0);
  const Stream stream = current_stream(dev);
  const Matrix a = random_matrix(rng, m, k, la, dtype);
  const Matrix b = random_matrix(rng, k, n, lb, dtype);
  const Matrix c = random_matrix(rng, m, n, Layout::RowMajor, dtype);
  const Matrix bias = random_matrix(rng, 1, n, Layout::RowMajor, dtype);
  const Tensor d = poisoned({m, n}, dtype, dev);

  gemm::GemmParams p;
  p.dtype = dtype;
  p.m = m;
  p.n = n;
  p.k = k;
  p.a = a.operand();
  p.b = b.operand();
  p.d = d.data();
  p.ldd = n;
  p.epilogue.alpha = e.alpha;
  p.epilogue.beta = e.beta;
  p.epilogue.c = c.device.data();
  p.epilogue.ldc = n;
  p.epilogue.bias = e.bias ? bias.device.data() : nullptr;
  p.path = path;
  p.math = e.tf32 ? gemm::MathMode::Tf32 : gemm::MathMode::Default;
  p.tuning.hopper_block_n = e.hopper_block_n;
  gemm::gemm(p, stream);
  stream.synchronize();

  std::vector<double> expected(static_cast<size_t>(m * n));
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double s = 0;
      for (int64_t kk = 0; kk < k; ++kk) s += a.at(i, kk) * b.at(kk, j);
      double v = e.alpha * s;
      if (e.beta != 0.0f) v += e.beta * c.values[i * n + j];
      if (e.bias) v += bias.values[j];
      expected[i * n + j] = v;
    }
  EXPECT_TRUE(
      all_close(d.to_host(), host_tensor(expected, {m, n}, dtype), gemm_tolerance(dtype, e.tf32)));
}

const int64_t kSizes[] = {1, 7, 63, 65, 1000};

// Every (M, N, K) from kSizes with at most one of them 1000 (the host reference stays fast).
template <class Fn>
void for_each_shape(Fn fn) {
  for (int64_t m : kSizes)
    for (int64_t n : kSizes)
      for (int64_t k : kSizes) {
        if ((m == 1000) + (n == 1000) + (k == 1000) > 1) continue;
        fn(m, n, k);
      }
}

class GemmMmaSyncGpu : public ::testing::TestWithParam<DType> {};

TEST_P(GemmMmaSyncGpu, EveryLayoutAndShape) {
  RUDNN_REQUIRE_CUDA();
  RUDNN_SEEDED_RNG(rng);
  for (Layout la : {Layout::RowMajor, Layout::ColMajor})
    for (Layout lb : {Layout::RowMajor, Layout::ColMajor})
      for_each_shape([&](int64_t m, int64_t n, int64_t k) {
        check_dense(rng, GetParam(), Path::MmaSync, m, n, k, la, lb);
      });
}

TEST_P(GemmMmaSyncGpu, Epilogue) {
  RUDNN_REQUIRE_CUDA();
  RUDNN_SEEDED_RNG(rng);
  for (EpilogueCase e : {EpilogueCase{0.5f, 0.0f, true}, EpilogueCase{1.0f, 1.0f, false},
                         EpilogueCase{-2.0f, 0.25f, true}})
    for (Layout la : {Layout::RowMajor, Layout::ColMajor})
      check_dense(rng, GetParam(), Path::MmaSync, 65, 130, 72, la, Layout::ColMajor, e);
}

TEST_P(GemmMmaSyncGpu, Large) {
  RUDNN_REQUIRE_CUDA();
  RUDNN_SEEDED_RNG(rng);
  check_dense(rng, GetParam(), Path::MmaSync, 1536, 1280, 1024, Layout::RowMajor, Layout::ColMajor);
}

// K = 0: D is the epilogue of zeros.
TEST_P(GemmMmaSyncGpu, EmptyK) {
  RUDNN_REQUIRE_CUDA();
  RUDNN_SEEDED_RNG(rng);
  check_dense(rng, GetParam(), Path::Auto, 33, 17, 0, Layout::RowMajor, Layout::RowMajor,
              {1.0f, 0.5f, true});
}

INSTANTIATE_TEST_SUITE_P(Dtypes, GemmMmaSyncGpu, ::testing::Values(DType::bf16, DType::f16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

// The wgmma path takes A row-major, B column-major and K a multiple of 8.
class GemmHopperGpu : public ::testing::TestWithParam<DType> {};

// Every layout the wgmma path was built for, every tile width built for it.
template <class Fn>
void for_each_hopper_layout(DType dtype, Fn fn) {
  for (Layout la : {Layout::RowMajor, Layout::ColMajor})
    for (Layout lb : {Layout::RowMajor, Layout::ColMajor}) {
      const int widths = gemm::hopper_block_ns(dtype, la, lb);
      for (int bit = 0; bit < 3; ++bit)
        if (widths & (1 << bit)) fn(la, lb, bit == 0 ? 128 : bit == 1 ? 192 : 256);
    }
}

TEST_P(GemmHopperGpu, Shapes) {
  RUDNN_REQUIRE_CUDA();
  if (!hopper_device()) GTEST_SKIP() << "the wgmma path needs an sm_90 device and an sm_90a build";
  RUDNN_SEEDED_RNG(rng);
  // K and the leading dimensions multiples of 8 (TMA); M, N anything.
  const int64_t sizes8[] = {8, 64, 72, 1000};
  for_each_hopper_layout(GetParam(), [&](Layout la, Layout lb, int bn) {
    for (int64_t m : {int64_t{1}, int64_t{63}, int64_t{65}, int64_t{1000}})
      for (int64_t n : {int64_t{7}, int64_t{64}, int64_t{65}, int64_t{1000}})
        for (int64_t k : sizes8) {
          if ((m == 1000) + (n == 1000) + (k == 1000) > 1) continue;
          // A column-major needs M (its ld) a multiple of 8, B row-major N likewise.
          if (la == Layout::ColMajor && m % 8 != 0) continue;
          if (lb == Layout::RowMajor && n % 8 != 0) continue;
          check_dense(rng, GetParam(), Path::Hopper, m, n, k, la, lb,
                      {1.0f, 0.0f, false, false, bn});
        }
  });
}

TEST_P(GemmHopperGpu, EpilogueAndLarge) {
  RUDNN_REQUIRE_CUDA();
  if (!hopper_device()) GTEST_SKIP() << "the wgmma path needs an sm_90 device and an sm_90a build";
  RUDNN_SEEDED_RNG(rng);
  check_dense(rng, GetParam(), Path::Hopper, 200, 300, 136, Layout::RowMajor, Layout::ColMajor,
              {0.5f, 0.0f, true});
  check_dense(rng, GetParam(), Path::Hopper, 200, 300, 136, Layout::RowMajor, Layout::ColMajor,
              {-1.5f, 1.0f, true});
  for_each_hopper_layout(GetParam(), [&](Layout la, Layout lb, int bn) {
    check_dense(rng, GetParam(), Path::Hopper, 1536, 1280, 1024, la, lb,
                {1.0f, 0.0f, false, false, bn});
  });
}

INSTANTIATE_TEST_SUITE_P(Dtypes, GemmHopperGpu, ::testing::Values(DType::bf16, DType::f16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

TEST(GemmSimtGpu, F32EveryLayout) {
  RUDNN_REQUIRE_CUDA();
  RUDNN_SEEDED_RNG(rng);
  for (Layout la : {Layout::RowMajor, Layout::ColMajor})
    for (Layout lb : {Layout::RowMajor, Layout::ColMajor})
      for (int64_t s : {1, 7, 63, 65})
        check_dense(rng, DType::f32, Path::Auto, s, 65, 1000, la, lb);
  check_dense(rng, DType::f32, Path::Simt, 1000, 63, 65, Layout::ColMajor, Layout::RowMajor,
              {0.5f, 2.0f, true});
}

// ---- Grouped GEMM ------------------------------------------------------------------------

// Grouped by M: group g is rows [o_g, o_g+1) of A and D, times its own B_g.
void check_grouped_m(Rng& rng, DType dtype, Path path, const std::vector<int32_t>& sizes, int64_t n,
                     int64_t k, Layout lb, EpilogueCase e = {}) {
  SCOPED_TRACE(::testing::Message() << "grouped M, " << sizes.size() << " groups, N=" << n << " K="
                                    << k << " B " << (lb == Layout::RowMajor ? "row" : "col"));
  const Device dev = Device::cuda(0);
  const Stream stream = current_stream(dev);
  const int64_t groups = static_cast<int64_t>(sizes.size());
  std::vector<int32_t> offsets(1, 0);
  for (int32_t s : sizes) offsets.push_back(offsets.back() + s);
  const int64_t rows = offsets.back();
  const Tensor offsets_device = Tensor::from_host(offsets, {groups + 1}, dev);
  const Matrix a = random_matrix(rng, rows, k, Layout::RowMajor, dtype);
  // B: groups matrices K x N, stored contiguously ([G, N, K] column-major or [G, K, N] row-major).
  const Matrix b = random_matrix(rng, k * groups, n, Layout::RowMajor, dtype);  // storage only
  const Matrix c = random_matrix(rng, rows, n, Layout::RowMajor, dtype);
  const Matrix bias = random_matrix(rng, 1, n, Layout::RowMajor, dtype);
  const Tensor d = poisoned({rows, n}, dtype, dev);
  const int64_t ldb = lb == Layout::RowMajor ? n : k;
  auto b_at = [&](int64_t g, int64_t kk, int64_t j) {
    return b.values[g * k * n + (lb == Layout::RowMajor ? kk * n + j : j * k + kk)];
  };

  gemm::GroupedGemmParams p;
  p.dtype = dtype;
  p.grouped = GroupedDim::M;
  p.groups = groups;
  p.offsets = offsets_device.data_as<int32_t>();
  p.m = rows;
  p.n = n;
  p.k = k;
  p.a = a.operand();
  p.b = gemm::Operand{b.device.data(), lb, ldb};
  p.b_group_stride = k * n;
  p.d = d.data();
  p.ldd = n;
  p.epilogue.alpha = e.alpha;
  p.epilogue.beta = e.beta;
  p.epilogue.c = c.device.data();
  p.epilogue.ldc = n;
  p.epilogue.bias = e.bias ? bias.device.data() : nullptr;
  p.path = path;
  gemm::grouped_gemm(p, stream);
  stream.synchronize();

  std::vector<double> expected(static_cast<size_t>(rows * n));
  for (int64_t g = 0; g < groups; ++g)
    for (int64_t i = offsets[g]; i < offsets[g + 1]; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double s = 0;
        for (int64_t kk = 0; kk < k; ++kk) s += a.at(i, kk) * b_at(g, kk, j);
        double v = e.alpha * s;
        if (e.beta != 0.0f) v += e.beta * c.values[i * n + j];
        if (e.bias) v += bias.values[j];
        expected[i * n + j] = v;
      }
  EXPECT_TRUE(
      all_close(d.to_host(), host_tensor(expected, {rows, n}, dtype), gemm_tolerance(dtype)));
}

// Grouped by K: D_g (M x N) = A[:, rows of g] . B[rows of g, :] (weight gradient form).
void check_grouped_k(Rng& rng, DType dtype, Path path, const std::vector<int32_t>& sizes, int64_t m,
                     int64_t n, Layout la, Layout lb, EpilogueCase e = {}) {
  SCOPED_TRACE(::testing::Message() << "grouped K, " << sizes.size() << " groups, M=" << m << " N="
                                    << n << " A " << (la == Layout::RowMajor ? "row" : "col")
                                    << " B " << (lb == Layout::RowMajor ? "row" : "col"));
  const Device dev = Device::cuda(0);
  const Stream stream = current_stream(dev);
  const int64_t groups = static_cast<int64_t>(sizes.size());
  std::vector<int32_t> offsets(1, 0);
  for (int32_t s : sizes) offsets.push_back(offsets.back() + s);
  const int64_t rows = offsets.back();
  const Tensor offsets_device = Tensor::from_host(offsets, {groups + 1}, dev);
  const Matrix a = random_matrix(rng, m, rows, la, dtype);
  const Matrix b = random_matrix(rng, rows, n, lb, dtype);
  const Matrix c = random_matrix(rng, groups * m, n, Layout::RowMajor, dtype);
  const Matrix bias = random_matrix(rng, 1, n, Layout::RowMajor, dtype);
  const Tensor d = poisoned({groups * m, n}, dtype, dev);

  gemm::GroupedGemmParams p;
  p.dtype = dtype;
  p.grouped = GroupedDim::K;
  p.groups = groups;
  p.offsets = offsets_device.data_as<int32_t>();
  p.m = m;
  p.n = n;
  p.k = rows;
  p.a = a.operand();
  p.b = b.operand();
  p.d = d.data();
  p.ldd = n;
  p.d_group_stride = m * n;
  p.c_group_stride = m * n;
  p.epilogue.alpha = e.alpha;
  p.epilogue.beta = e.beta;
  p.epilogue.c = c.device.data();
  p.epilogue.ldc = n;
  p.epilogue.bias = e.bias ? bias.device.data() : nullptr;
  p.path = path;
  gemm::grouped_gemm(p, stream);
  stream.synchronize();

  std::vector<double> expected(static_cast<size_t>(groups * m * n));
  for (int64_t g = 0; g < groups; ++g)
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double s = 0;
        for (int64_t r = offsets[g]; r < offsets[g + 1]; ++r) s += a.at(i, r) * b.at(r, j);
        double v = e.alpha * s;
        if (e.beta != 0.0f) v += e.beta * c.values[(g * m + i) * n + j];
        if (e.bias) v += bias.values[j];
        expected[(g * m + i) * n + j] = v;
      }
  EXPECT_TRUE(
      all_close(d.to_host(), host_tensor(expected, {groups * m, n}, dtype), gemm_tolerance(dtype)));
}

// Empty, tiny, huge and skewed groups.
const std::vector<std::vector<int32_t>> kGroupSizes = {
    {5},
    {0, 1, 3, 0, 1000, 17, 0},
    {0, 0, 0, 0},
    {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 700},
    {129, 0, 255, 64, 0, 1},
};

class GroupedGemmGpu : public ::testing::TestWithParam<DType> {};

TEST_P(GroupedGemmGpu, ByMMmaSync) {
  RUDNN_REQUIRE_CUDA();
  RUDNN_SEEDED_RNG(rng);
  for (const auto& sizes : kGroupSizes)
    for (Layout lb : {Layout::RowMajor, Layout::ColMajor}) {
      check_grouped_m(rng, GetParam(), Path::MmaSync, sizes, 72, 136, lb);
      check_grouped_m(rng, GetParam(), Path::MmaSync, sizes, 65, 63, lb, {0.5f, 1.0f, true});
    }
}

TEST_P(GroupedGemmGpu, ByMHopper) {
  RUDNN_REQUIRE_CUDA();
  if (!hopper_device()) GTEST_SKIP() << "the wgmma path needs an sm_90 device";
  RUDNN_SEEDED_RNG(rng);
  for (const auto& sizes : kGroupSizes) {
    check_grouped_m(rng, GetParam(), Path::Hopper, sizes, 72, 136, Layout::ColMajor);
    check_grouped_m(rng, GetParam(), Path::Hopper, sizes, 300, 64, Layout::ColMajor,
                    {0.5f, 1.0f, true});
  }
  // 64 groups, every row in one of them.
  std::vector<int32_t> skewed(64, 0);
  skewed[37] = 2048;
  check_grouped_m(rng, GetParam(), Path::Hopper, skewed, 256, 128, Layout::ColMajor);
}

TEST_P(GroupedGemmGpu, ByK) {
  RUDNN_REQUIRE_CUDA();
  RUDNN_SEEDED_RNG(rng);
  for (const auto& sizes : kGroupSizes)
    for (Layout la : {Layout::RowMajor, Layout::ColMajor})
      for (Layout lb : {Layout::RowMajor, Layout::ColMajor}) {
        check_grouped_k(rng, GetParam(), Path::Auto, sizes, 40, 72, la, lb);
        check_grouped_k(rng, GetParam(), Path::Auto, sizes, 65, 7, la, lb, {2.0f, 0.5f, true});
      }
}

// Group starts that are not 16-byte aligned along a contiguous dimension, while the bases
// and leading dimensions are (totals a multiple of 8): the mma.sync path must not issue
// 16-byte cp.async copies from them.
TEST_P(GroupedGemmGpu, UnalignedGroupStartsMmaSync) {
  RUDNN_REQUIRE_CUDA();
  RUDNN_SEEDED_RNG(rng);
  for (const std::vector<int32_t>& sizes :
       {std::vector<int32_t>{3, 13}, std::vector<int32_t>{1, 0, 6, 17, 8}})
    for (Layout la : {Layout::RowMajor, Layout::ColMajor})
      for (Layout lb : {Layout::RowMajor, Layout::ColMajor})
        check_grouped_k(rng, GetParam(), Path::MmaSync, sizes, 40, 72, la, lb);
}

TEST(GroupedGemmF32Gpu, ByMAndByK) {
  RUDNN_REQUIRE_CUDA();
  RUDNN_SEEDED_RNG(rng);
  for (const auto& sizes : kGroupSizes) {
    check_grouped_m(rng, DType::f32, Path::Auto, sizes, 33, 70, Layout::ColMajor,
                    {1.0f, 0.5f, true});
    check_grouped_k(rng, DType::f32, Path::Auto, sizes, 31, 9, Layout::ColMajor, Layout::RowMajor);
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, GroupedGemmGpu, ::testing::Values(DType::bf16, DType::f16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

}  // namespace
}  // namespace rudnn::test
