// GEMM launch variants and epilogue options against a float64 host product (the shape and
// layout sweeps are in test_gemm_gpu.cpp):
//   - every ping-pong Hopper kernel built (Tuning::hopper_schedule, one tile per consumer
//     warpgroup), single and in clusters of two, on odd shapes, K tails, and enough tiles that
//     each block alternates several between its consumers; the entry's choices and refusals
//     of that schedule;
//   - the cooperative kernel's TMA-store epilogue (D staged in shared memory) and the cases
//     that fall back to register stores;
//   - every Hopper kernel built (dtype x layouts x tile width) with and without clusters of two
//     (Tuning::hopper_cluster: B multicast to a pair of blocks), on shapes with an odd number
//     of M tiles (a pair's second block past M), grouped by M with empty and odd groups, and
//     grouped by K with group boundaries inside a k-block (the k-tail zeroed in shared memory);
//   - the epilogue's options on every path: f32 output for 16-bit operands, activations,
//     row and column scales, bias, C read in place from D (D += A.B);
//   - operands whose leading dimension exceeds the extent, the padding filled with NaN (never
//     read), and D's padding columns (ldd > N) left untouched;
//   - a grouped GEMM captured in a CUDA graph (capture mode global: no allocation, no host
//     synchronisation) and replayed with new group offsets written to the device between
//     replays (the offsets are read by the kernel, not baked into the launch).
// Fresh random inputs each run (RUDNN_TEST_SEED replays one; the seed is printed on failure).
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <iterator>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "gemm/gemm.h"
#include "support/test_support.h"

namespace rudnn::test {
namespace {

using gemm::Activation;
using gemm::GroupedDim;
using gemm::Layout;
using gemm::Path;

constexpr Device kGpu = Device::cuda(0);
const double kNaN = std::numeric_limits<double>::quiet_NaN();

bool hopper() { return gemm::hopper_available(kGpu); }

// A rows x cols matrix in `layout` with ld = the contiguous extent rounded up to 8, plus
// `pad` more, the padding NaN; `logical` holds the values as the device has them.
struct Matrix {
  int64_t rows = 0, cols = 0, ld = 0;
  Layout layout = Layout::RowMajor;
  std::vector<double> logical;
  Tensor device;
  double at(int64_t r, int64_t c) const { return logical[r * cols + c]; }
  gemm::Operand operand() const { return gemm::Operand{device.data(), layout, ld}; }
};

Matrix make_matrix(Rng& rng, int64_t rows, int64_t cols, Layout layout, DType dtype, int64_t pad) {
  Matrix m;
  m.rows = rows;
  m.cols = cols;
  m.layout = layout;
  const int64_t contiguous = layout == Layout::RowMajor ? cols : rows;
  const int64_t outer = layout == Layout::RowMajor ? rows : cols;
  m.ld = (std::max<int64_t>(contiguous, 1) + 7) / 8 * 8 + pad;
  std::vector<double> storage(static_cast<size_t>(std::max<int64_t>(outer, 1) * m.ld), kNaN);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)
      storage[layout == Layout::RowMajor ? r * m.ld + c : c * m.ld + r] = rng.normal();
  const Tensor host = host_tensor(storage, {std::max<int64_t>(outer, 1), m.ld}, dtype);
  const std::vector<double> rounded = to_doubles(host);
  m.logical.resize(static_cast<size_t>(rows * cols));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)
      m.logical[r * cols + c] = rounded[layout == Layout::RowMajor ? r * m.ld + c : c * m.ld + r];
  m.device = host.to(kGpu);
  current_stream(kGpu).synchronize();
  return m;
}

Tensor device_vector(const std::vector<double>& v, DType dtype) {
  const Tensor t = host_tensor(v, {static_cast<int64_t>(v.size())}, dtype).to(kGpu);
  current_stream(kGpu).synchronize();
  return t;
}

double activate(Activation a, double v) {
  switch (a) {
    case Activation::Relu:
      return v > 0 ? v : 0;
    case Activation::Silu:
      return v / (1 + std::exp(-v));
    case Activation::Gelu:
      return 0.5 * v * (1 + std::tanh(0.7978845608028654 * (v + 0.044715 * v * v * v)));
    default:
      return v;
  }
}

double tolerance_for(DType out) { return out == DType::f32 ? 2e-5 : tolerance(out); }

// Checks D (device, rows x ldd, out dtype) against expected (rows x n) and that the padding
// columns n .. ldd-1 are still NaN.
void expect_output(const Tensor& d, const std::vector<double>& expected, int64_t rows, int64_t n,
                   int64_t ldd, DType out) {
  const std::vector<double> got = to_doubles(d);
  std::vector<double> inside(static_cast<size_t>(rows * n));
  int64_t touched = 0;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < n; ++c) inside[r * n + c] = got[r * ldd + c];
    for (int64_t c = n; c < ldd; ++c) touched += std::isnan(got[r * ldd + c]) ? 0 : 1;
  }
  EXPECT_EQ(touched, 0) << "D's padding columns were written";
  EXPECT_TRUE(all_close(host_tensor(inside, {rows, n}, out), host_tensor(expected, {rows, n}, out),
                        tolerance_for(out)));
}

struct Options {
  Path path = Path::Auto;
  int block_n = 0, cluster = 0;
  gemm::HopperSchedule schedule = gemm::HopperSchedule::Auto;
  int block_m = 0, splits = 0;
  float alpha = 1.0f, beta = 0.0f;
  bool bias = false, row_scale = false, col_scale = false, in_place = false;
  Activation activation = Activation::None;
  bool f32_out = false;
  gemm::MathMode math = gemm::MathMode::Default;
  // D's rows 16-byte aligned (ldd a multiple of 8, still padded), which the cooperative
  // kernel's TMA-store epilogue needs; else ldd = n + 3. direct_store: Tuning's opt-out.
  bool aligned_ldd = false, direct_store = false;
};

std::string describe(const Options& o) {
  return (::testing::Message() << "path " << gemm::path_name(o.path) << " schedule "
                               << static_cast<int>(o.schedule) << " (0 auto, 1 cooperative, "
                               << "2 ping-pong) BM " << o.block_m << " BN " << o.block_n
                               << " splits " << o.splits << " cluster " << o.cluster << " alpha "
                               << o.alpha << " beta " << o.beta << " bias " << o.bias << " scales "
                               << o.row_scale << o.col_scale << " in-place " << o.in_place
                               << " act " << static_cast<int>(o.activation) << " f32 out "
                               << o.f32_out << " aligned ldd " << o.aligned_ldd
                               << " direct store " << o.direct_store)
      .GetString();
}

// The epilogue's inputs and the expected output of one (grouped) product.
struct EpilogueInputs {
  Tensor c, bias, row_scale, col_scale;
  std::vector<double> c_h, bias_h, rs_h, cs_h;
};

EpilogueInputs epilogue_inputs(Rng& rng, const Options& o, int64_t rows, int64_t n, int64_t ldc,
                               DType out) {
  EpilogueInputs e;
  std::vector<double> c(static_cast<size_t>(rows * ldc), kNaN), bias(n), rs(rows), cs(n);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < n; ++j) c[r * ldc + j] = rng.normal();
  for (auto& v : bias) v = rng.normal();
  for (auto& v : rs) v = rng.uniform(0.5f, 2.0f);
  for (auto& v : cs) v = rng.uniform(0.5f, 2.0f);
  e.c = host_tensor(c, {rows, ldc}, out).to(kGpu);
  e.c_h = to_doubles(host_tensor(c, {rows, ldc}, out));
  if (o.bias) {
    e.bias = device_vector(bias, out);
    e.bias_h = to_doubles(host_tensor(bias, {n}, out));
  }
  if (o.row_scale) {
    e.row_scale = device_vector(rs, DType::f32);
    e.rs_h = to_doubles(host_tensor(rs, {rows}, DType::f32));
  }
  if (o.col_scale) {
    e.col_scale = device_vector(cs, DType::f32);
    e.cs_h = to_doubles(host_tensor(cs, {n}, DType::f32));
  }
  current_stream(kGpu).synchronize();
  return e;
}

double epilogue_value(const Options& o, const EpilogueInputs& e, double acc, int64_t row,
                      int64_t c_row, int64_t col, int64_t ldc) {
  double v = o.alpha * acc;
  if (o.row_scale) v *= e.rs_h[row];
  if (o.col_scale) v *= e.cs_h[col];
  if (o.bias) v += e.bias_h[col];
  if (o.beta != 0.0f) v += o.beta * e.c_h[c_row * ldc + col];
  return activate(o.activation, v);
}

gemm::Epilogue epilogue_of(const Options& o, const EpilogueInputs& e, const Tensor& d, int64_t ldd,
                           DType out) {
  gemm::Epilogue ep;
  ep.alpha = o.alpha;
  ep.beta = o.beta;
  ep.c = o.in_place ? d.data() : e.c.data();
  ep.ldc = ldd;
  ep.bias = o.bias ? e.bias.data() : nullptr;
  ep.row_scale = o.row_scale ? static_cast<const float*>(e.row_scale.data()) : nullptr;
  ep.col_scale = o.col_scale ? static_cast<const float*>(e.col_scale.data()) : nullptr;
  ep.activation = o.activation;
  if (o.f32_out || out == DType::f32) ep.out_dtype = DType::f32;
  return ep;
}

// D: poisoned, or C's values when C is D (in place); ldd = n + 3 (padding columns).
Tensor output_buffer(const Options& o, const EpilogueInputs& e, int64_t rows, int64_t ldd,
                     DType out) {
  if (o.in_place) {
    const Tensor d = Tensor::empty({rows, ldd}, out, kGpu);
    d.copy_from(e.c);
    // The padding columns back to NaN: C's padding is NaN already.
    current_stream(kGpu).synchronize();
    return d;
  }
  return poisoned({rows, ldd}, out, kGpu);
}

void check_dense(Rng& rng, DType dtype, int64_t m, int64_t n, int64_t k, Layout la, Layout lb,
                 const Options& o) {
  SCOPED_TRACE(::testing::Message()
               << dtype_name(dtype) << " M=" << m << " N=" << n << " K=" << k << " A "
               << (la == Layout::RowMajor ? "row" : "col") << " B "
               << (lb == Layout::RowMajor ? "row" : "col") << " " << describe(o));
  const DType out = o.f32_out ? DType::f32 : dtype;
  const Matrix a = make_matrix(rng, m, k, la, dtype, 8);
  const Matrix b = make_matrix(rng, k, n, lb, dtype, 8);
  const int64_t ldd = o.aligned_ldd ? (n + 7) / 8 * 8 + 8 : n + 3;
  const EpilogueInputs e = epilogue_inputs(rng, o, m, n, ldd, out);
  const Tensor d = output_buffer(o, e, m, ldd, out);
  gemm::GemmParams p;
  p.dtype = dtype;
  p.m = m;
  p.n = n;
  p.k = k;
  p.a = a.operand();
  p.b = b.operand();
  p.d = d.data();
  p.ldd = ldd;
  p.epilogue = epilogue_of(o, e, d, ldd, out);
  p.math = o.math;
  p.path = o.path;
  p.tuning.hopper_block_n = o.block_n;
  p.tuning.hopper_cluster = o.cluster;
  p.tuning.hopper_schedule = o.schedule;
  p.tuning.hopper_block_m = o.block_m;
  p.tuning.hopper_splits = o.splits;
  p.tuning.hopper_direct_store = o.direct_store;
  const Stream stream = current_stream(kGpu);
  ASSERT_NO_THROW(gemm::gemm(p, stream));
  ASSERT_NO_THROW(stream.synchronize());  // a kernel fault reported with the case's trace
  std::vector<double> expected(static_cast<size_t>(m * n));
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double s = 0;
      for (int64_t kk = 0; kk < k; ++kk) s += a.at(i, kk) * b.at(kk, j);
      expected[i * n + j] = epilogue_value(o, e, s, i, i, j, ldd);
    }
  expect_output(d, expected, m, n, ldd, out);
}

// Grouped by M: rows [off_g, off_g+1) of A and D times B_g (B: [G] matrices k x n in lb).
void check_grouped_m(Rng& rng, DType dtype, const std::vector<int32_t>& sizes, int64_t n, int64_t k,
                     Layout lb, const Options& o) {
  SCOPED_TRACE(::testing::Message()
               << dtype_name(dtype) << " grouped M, " << sizes.size() << " groups, N=" << n << " K="
               << k << " B " << (lb == Layout::RowMajor ? "row" : "col") << " " << describe(o));
  const DType out = o.f32_out ? DType::f32 : dtype;
  const int64_t groups = static_cast<int64_t>(sizes.size());
  std::vector<int32_t> offsets(1, 0);
  for (int32_t s : sizes) offsets.push_back(offsets.back() + s);
  const int64_t rows = offsets.back() + 5;  // 5 rows past the last group: never written
  const Tensor offsets_device = Tensor::from_host(offsets, {groups + 1}, kGpu);
  const Matrix a = make_matrix(rng, rows, k, Layout::RowMajor, dtype, 8);
  // The G matrices stacked: one (k x n) matrix per group, group stride = one matrix.
  const Matrix b = make_matrix(rng, lb == Layout::RowMajor ? k * groups : k,
                               lb == Layout::RowMajor ? n : n * groups, lb, dtype, 8);
  const int64_t b_stride = lb == Layout::RowMajor ? k * b.ld : n * b.ld;
  auto b_at = [&](int64_t g, int64_t kk, int64_t j) {
    return lb == Layout::RowMajor ? b.at(g * k + kk, j) : b.at(kk, g * n + j);
  };
  const int64_t ldd = n + 3;
  const EpilogueInputs e = epilogue_inputs(rng, o, rows, n, ldd, out);
  const Tensor d = output_buffer(o, e, rows, ldd, out);
  const std::vector<double> before = to_doubles(d);
  gemm::GroupedGemmParams p;
  p.dtype = dtype;
  p.grouped = GroupedDim::M;
  p.groups = groups;
  p.offsets = offsets_device.data_as<int32_t>();
  p.m = rows;
  p.n = n;
  p.k = k;
  p.a = a.operand();
  p.b = gemm::Operand{b.device.data(), lb, b.ld};
  p.b_group_stride = b_stride;
  p.d = d.data();
  p.ldd = ldd;
  p.epilogue = epilogue_of(o, e, d, ldd, out);
  p.path = o.path;
  p.tuning.hopper_block_n = o.block_n;
  p.tuning.hopper_cluster = o.cluster;
  p.tuning.hopper_schedule = o.schedule;
  p.tuning.hopper_block_m = o.block_m;
  const Stream stream = current_stream(kGpu);
  ASSERT_NO_THROW(gemm::grouped_gemm(p, stream));
  ASSERT_NO_THROW(stream.synchronize());  // a kernel fault reported with the case's trace
  std::vector<double> expected(static_cast<size_t>(offsets.back() * n));
  for (int64_t g = 0; g < groups; ++g)
    for (int64_t i = offsets[g]; i < offsets[g + 1]; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double s = 0;
        for (int64_t kk = 0; kk < k; ++kk) s += a.at(i, kk) * b_at(g, kk, j);
        expected[i * n + j] = epilogue_value(o, e, s, i, i, j, ldd);
      }
  const Tensor got = d.to_host();
  expect_output(got.slice(0, 0, offsets.back()), expected, offsets.back(), n, ldd, out);
  const std::vector<double> after = to_doubles(got);
  for (int64_t i = offsets.back() * ldd; i < rows * ldd; ++i) {
    ASSERT_TRUE(std::isnan(after[i]) == std::isnan(before[i]) &&
                (std::isnan(after[i]) || after[i] == before[i]))
        << "row " << i / ldd << " past the last group was written";
  }
}

// Grouped by K: D_g (m x n) = A[:, K rows of g] . B[K rows of g, :].
void check_grouped_k(Rng& rng, DType dtype, const std::vector<int32_t>& sizes, int64_t m, int64_t n,
                     Layout la, Layout lb, const Options& o) {
  SCOPED_TRACE(::testing::Message()
               << dtype_name(dtype) << " grouped K, " << sizes.size() << " groups, M=" << m
               << " N=" << n << " A " << (la == Layout::RowMajor ? "row" : "col") << " B "
               << (lb == Layout::RowMajor ? "row" : "col") << " " << describe(o));
  const DType out = o.f32_out ? DType::f32 : dtype;
  const int64_t groups = static_cast<int64_t>(sizes.size());
  std::vector<int32_t> offsets(1, 0);
  for (int32_t s : sizes) offsets.push_back(offsets.back() + s);
  const int64_t k = offsets.back() + 3;  // rows past the last group: never part of a product
  const Tensor offsets_device = Tensor::from_host(offsets, {groups + 1}, kGpu);
  const Matrix a = make_matrix(rng, m, k, la, dtype, 8);
  const Matrix b = make_matrix(rng, k, n, lb, dtype, 8);
  const int64_t ldd = n + 3;
  const EpilogueInputs e = epilogue_inputs(rng, o, groups * m, n, ldd, out);
  const Tensor d = output_buffer(o, e, groups * m, ldd, out);
  gemm::GroupedGemmParams p;
  p.dtype = dtype;
  p.grouped = GroupedDim::K;
  p.groups = groups;
  p.offsets = offsets_device.data_as<int32_t>();
  p.m = m;
  p.n = n;
  p.k = k;
  p.a = a.operand();
  p.b = b.operand();
  p.d = d.data();
  p.ldd = ldd;
  p.d_group_stride = m * ldd;
  p.c_group_stride = m * ldd;
  p.epilogue = epilogue_of(o, e, d, ldd, out);
  p.path = o.path;
  p.tuning.hopper_block_n = o.block_n;
  p.tuning.hopper_cluster = o.cluster;
  p.tuning.hopper_schedule = o.schedule;
  p.tuning.hopper_block_m = o.block_m;
  const Stream stream = current_stream(kGpu);
  ASSERT_NO_THROW(gemm::grouped_gemm(p, stream));
  ASSERT_NO_THROW(stream.synchronize());  // a kernel fault reported with the case's trace
  std::vector<double> expected(static_cast<size_t>(groups * m * n));
  for (int64_t g = 0; g < groups; ++g)
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double s = 0;
        for (int64_t r = offsets[g]; r < offsets[g + 1]; ++r) s += a.at(i, r) * b.at(r, j);
        // Row scales index the rows of each group's D (m of them).
        expected[(g * m + i) * n + j] = epilogue_value(o, e, s, i, g * m + i, j, ldd);
      }
  expect_output(d, expected, groups * m, n, ldd, out);
}

// Every Hopper kernel built, with and without clusters.
template <class Fn>
void for_each_hopper_kernel(DType dtype, Fn fn) {
  for (Layout la : {Layout::RowMajor, Layout::ColMajor})
    for (Layout lb : {Layout::RowMajor, Layout::ColMajor}) {
      const int widths = gemm::hopper_block_ns(dtype, la, lb);
      for (int bn : {128, 192, 256}) {
        const int bit = bn == 128 ? 1 : bn == 192 ? 2 : 4;
        if (!(widths & bit)) continue;
        for (int cluster : {1, 2}) fn(la, lb, bn, cluster);
      }
    }
}

// Options that pin one Hopper kernel (a for_each_hopper_kernel BN and cluster size).
Options hopper_kernel(int block_n, int cluster,
                      gemm::HopperSchedule schedule = gemm::HopperSchedule::Auto) {
  Options o;
  o.path = Path::Hopper;
  o.schedule = schedule;
  o.block_n = block_n;
  o.cluster = cluster;
  return o;
}

class GemmVariantsGpu : public ::testing::TestWithParam<DType> {};

TEST_P(GemmVariantsGpu, HopperKernelsWithAndWithoutClusters) {
  RUDNN_REQUIRE_CUDA();
  if (!hopper()) GTEST_SKIP() << "the wgmma path needs a 9.0 device and an sm_90a build";
  RUDNN_SEEDED_RNG(rng);
  const DType dtype = GetParam();
  for_each_hopper_kernel(dtype, [&](Layout la, Layout lb, int bn, int cluster) {
    const Options o = hopper_kernel(bn, cluster);
    // 3 M tiles (a pair's second block past M), N not a multiple of BN, K not of 64.
    check_dense(rng, dtype, 300, 333, 200, la, lb, o);
    check_dense(rng, dtype, 1, 17, 8, la, lb, o);
    if (la == Layout::RowMajor)
      check_grouped_m(rng, dtype, {0, 129, 1, 0, 300, 256}, 200, 136, lb, o);
    // Group boundaries inside k-blocks, an empty group, one longer than a k-block. (Grouped K
    // with K contiguous in A or B is refused:
    // GemmVariantsGpu.HopperRefusesGroupStartsOnAContiguousAxis.)
    if (la == Layout::ColMajor && lb == Layout::RowMajor)
      check_grouped_k(rng, dtype, {5, 0, 70, 64, 131}, 136, 200, la, lb, o);
  });
}

// The cooperative kernel's TMA-store epilogue (D staged through shared memory, 64-column slabs
// stored by TMA while the next tile's mainloop starts), which dense calls take when D's rows
// are 16-byte aligned, N is a multiple of 8 and D is in the operands' dtype: every kernel
// built, single and in pairs, on shapes with M tails and N tails within a tile (TMA clips the
// boxes; the padding columns must stay NaN), blocks owning several tiles (the staging
// reused), every epilogue option, in place; and the cases that fall back to register stores
// with aligned rows (N not a multiple of 8: a TMA store would write the padding up to the
// next multiple of 8; f32 D; the opt-out).
TEST_P(GemmVariantsGpu, CooperativeTmaStoreEpilogue) {
  RUDNN_REQUIRE_CUDA();
  if (!hopper()) GTEST_SKIP() << "the wgmma path needs a 9.0 device and an sm_90a build";
  RUDNN_SEEDED_RNG(rng);
  const DType dtype = GetParam();
  for_each_hopper_kernel(dtype, [&](Layout la, Layout lb, int bn, int cluster) {
    Options o = hopper_kernel(bn, cluster, gemm::HopperSchedule::Cooperative);
    o.aligned_ldd = true;
    check_dense(rng, dtype, 300, 336, 200, la, lb, o);
    check_dense(rng, dtype, 1, 24, 8, la, lb, o);
    check_dense(rng, dtype, 64, 64, 64, la, lb, o);
    check_dense(rng, dtype, 2100, 1032, 130, la, lb, o);  // ~17 x 5-9 tiles: several a block
    check_dense(rng, dtype, 300, 333, 200, la, lb, o);    // N % 8 != 0: register stores
    check_dense(rng, dtype, 1, 17, 8, la, lb, o);
    check_dense(rng, dtype, 2100, 1030, 130, la, lb, o);
    o.alpha = 0.75f;
    o.row_scale = o.col_scale = o.bias = true;
    o.activation = Activation::Silu;
    o.beta = -0.5f;
    check_dense(rng, dtype, 333, 200, 150, la, lb, o);
    check_dense(rng, dtype, 333, 203, 150, la, lb, o);
    o.in_place = true;
    o.beta = 1.0f;
    check_dense(rng, dtype, 200, 520, 70, la, lb, o);
    o = hopper_kernel(bn, cluster);
    o.aligned_ldd = true;
    o.f32_out = true;
    check_dense(rng, dtype, 300, 336, 200, la, lb, o);
    o.f32_out = false;
    o.direct_store = true;
    check_dense(rng, dtype, 300, 336, 200, la, lb, o);
  });
}

// Every ping-pong tile built (one tile per consumer warpgroup, their mainloops taking turns):
// shapes that are not multiples of the tile, K tails, a single row, K over many k-blocks, and
// enough tiles that blocks own several (both consumers, odd counts, the ring skipping the
// other consumer's k-blocks); grouped by M with empty and one-row groups (tiles of different
// groups alternate between the consumers). Each with single blocks and in clusters of two
// (B multicast to a pair of vertically adjacent tiles: odd tile-row counts leave the second
// block of a pair past M or past its group's rows), with the epilogue options on one shape.
TEST_P(GemmVariantsGpu, PingpongKernelsEveryTile) {
  RUDNN_REQUIRE_CUDA();
  if (!hopper()) GTEST_SKIP() << "the wgmma path needs a 9.0 device and an sm_90a build";
  RUDNN_SEEDED_RNG(rng);
  const DType dtype = GetParam();
  const int tiles = gemm::hopper_pingpong_tiles(dtype, Layout::RowMajor, Layout::ColMajor);
  ASSERT_NE(tiles, 0);
  for (int i = 0; i < static_cast<int>(std::size(gemm::kHopperPingpongTiles)); ++i) {
    if (!(tiles & (1 << i))) continue;
    for (int cluster : {1, 2}) {
      Options o;
      o.path = Path::Hopper;
      o.schedule = gemm::HopperSchedule::Pingpong;
      o.block_m = gemm::kHopperPingpongTiles[i].block_m;
      o.block_n = gemm::kHopperPingpongTiles[i].block_n;
      o.cluster = cluster;
      check_dense(rng, dtype, 300, 333, 200, Layout::RowMajor, Layout::ColMajor, o);
      check_dense(rng, dtype, 1, 17, 8, Layout::RowMajor, Layout::ColMajor, o);
      check_dense(rng, dtype, 130, 260, 1000, Layout::RowMajor, Layout::ColMajor, o);
      check_dense(rng, dtype, 4100, 1030, 130, Layout::RowMajor, Layout::ColMajor, o);
      check_dense(rng, dtype, 1000, 704, 259, Layout::RowMajor, Layout::ColMajor, o);
      check_grouped_m(rng, dtype, {0, 129, 1, 0, 300, 256}, 200, 136, Layout::ColMajor, o);
      check_grouped_m(rng, dtype, std::vector<int32_t>(40, 65), 520, 72, Layout::ColMajor, o);
      o.alpha = 0.75f;
      o.row_scale = o.col_scale = o.bias = true;
      o.activation = Activation::Gelu;
      o.beta = -0.5f;
      check_dense(rng, dtype, 333, 200, 150, Layout::RowMajor, Layout::ColMajor, o);
    }
  }
}

// Split K on every ping-pong tile: 2, 3 and 5 splits over 16 k-blocks with a K tail, more
// splits than k-blocks (clamped), a single k-block, enough tiles that blocks own several
// (split 0 and later splits of other tiles in one block), and every epilogue option on the
// last split. One plan for many runs: the semaphores carry each call's id.
TEST_P(GemmVariantsGpu, PingpongSplitK) {
  RUDNN_REQUIRE_CUDA();
  if (!hopper()) GTEST_SKIP() << "the wgmma path needs a 9.0 device and an sm_90a build";
  RUDNN_SEEDED_RNG(rng);
  const DType dtype = GetParam();
  const int tiles = gemm::hopper_pingpong_tiles(dtype, Layout::RowMajor, Layout::ColMajor);
  for (int i = 0; i < static_cast<int>(std::size(gemm::kHopperPingpongTiles)); ++i) {
    if (!(tiles & (1 << i))) continue;
    Options o;
    o.path = Path::Hopper;
    o.block_m = gemm::kHopperPingpongTiles[i].block_m;
    o.block_n = gemm::kHopperPingpongTiles[i].block_n;
    for (int splits : {2, 3, 5}) {
      o.splits = splits;
      check_dense(rng, dtype, 300, 333, 1000, Layout::RowMajor, Layout::ColMajor, o);
    }
    o.splits = 16;
    check_dense(rng, dtype, 130, 260, 200, Layout::RowMajor, Layout::ColMajor, o);  // 4 blocks
    o.splits = 2;
    check_dense(rng, dtype, 1, 17, 8, Layout::RowMajor, Layout::ColMajor, o);
    check_dense(rng, dtype, 2100, 1030, 330, Layout::RowMajor, Layout::ColMajor, o);
    o.splits = 3;
    o.alpha = 0.75f;
    o.row_scale = o.col_scale = o.bias = true;
    o.activation = Activation::Gelu;
    o.beta = -0.5f;
    check_dense(rng, dtype, 200, 300, 700, Layout::RowMajor, Layout::ColMajor, o);
    o = Options{};
    o.path = Path::Hopper;
    o.block_m = gemm::kHopperPingpongTiles[i].block_m;
    o.block_n = gemm::kHopperPingpongTiles[i].block_n;
    o.splits = 4;
    o.in_place = true;
    o.beta = 1.0f;
    o.f32_out = true;
    check_dense(rng, dtype, 200, 300, 700, Layout::RowMajor, Layout::ColMajor, o);
  }
}

// Split K is deterministic (the partial sums are added in split order): the same call twice
// gives the same bits. The workspace the call reports, given by the caller, is used (a too
// small one is refused before anything runs), and a call captured in a CUDA graph with it
// gives the product on every replay (the same call id each time).
TEST_P(GemmVariantsGpu, PingpongSplitKDeterministicWorkspaceAndGraph) {
  RUDNN_REQUIRE_CUDA();
  if (!hopper()) GTEST_SKIP() << "the wgmma path needs a 9.0 device and an sm_90a build";
  RUDNN_SEEDED_RNG(rng);
  const DType dtype = GetParam();
  const int64_t m = 512, n = 768, k = 2000;
  const Matrix a = make_matrix(rng, m, k, Layout::RowMajor, dtype, 0);
  const Matrix b = make_matrix(rng, k, n, Layout::ColMajor, dtype, 0);
  std::vector<double> expected(static_cast<size_t>(m * n));
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double s = 0;
      for (int64_t kk = 0; kk < k; ++kk) s += a.at(i, kk) * b.at(kk, j);
      expected[i * n + j] = s;
    }
  const Stream stream = Stream::create(kGpu);
  auto cs = reinterpret_cast<cudaStream_t>(stream.handle());
  gemm::GemmParams p;
  p.dtype = dtype;
  p.m = m;
  p.n = n;
  p.k = k;
  p.a = a.operand();
  p.b = b.operand();
  p.ldd = n;
  p.path = Path::Hopper;
  p.tuning.hopper_splits = 4;
  p.tuning.hopper_block_m = 64;
  const Tensor d1 = poisoned({m, n}, dtype, kGpu), d2 = poisoned({m, n}, dtype, kGpu);
  p.d = d1.data();
  size_t bytes = 0;
  ASSERT_NO_THROW(bytes = gemm::gemm_workspace_bytes(p, kGpu));
  // 64-row tiles of 256 or 192 columns (the entry's pick): FP32 tiles plus 8-byte flags.
  const int64_t tiles_256 = (m / 64) * ((n + 255) / 256), tiles_192 = (m / 64) * (n / 192);
  EXPECT_TRUE(bytes == static_cast<size_t>((tiles_256 * 8 + 15) / 16 * 16 + tiles_256 * 65536) ||
              bytes == static_cast<size_t>((tiles_192 * 8 + 15) / 16 * 16 + tiles_192 * 49152))
      << bytes;
  gemm::GemmParams none = p;
  none.tuning.hopper_splits = 1;
  EXPECT_EQ(gemm::gemm_workspace_bytes(none, kGpu), 0u);

  current_stream(kGpu).synchronize();
  ASSERT_NO_THROW(gemm::gemm(p, stream));
  p.d = d2.data();
  ASSERT_NO_THROW(gemm::gemm(p, stream));
  stream.synchronize();
  EXPECT_TRUE(all_close(d1.to_host(), host_tensor(expected, {m, n}, dtype)));
  EXPECT_EQ(to_doubles(d1), to_doubles(d2)) << "two runs of one split-K call differ";

  const Tensor workspace = Tensor::empty({static_cast<int64_t>(bytes / 4 + 4)}, DType::f32, kGpu);
  p.workspace = workspace.data();
  p.workspace_bytes = bytes - 16;
  const Tensor d3 = poisoned({m, n}, dtype, kGpu);
  p.d = d3.data();
  EXPECT_TRUE(throws_error([&] { gemm::gemm(p, stream); }, ErrorCode::InvalidArgument,
                           {"workspace_bytes"}));
  p.workspace_bytes = bytes;
  current_stream(kGpu).synchronize();
  cudaGraph_t graph = nullptr;
  ASSERT_EQ(cudaStreamBeginCapture(cs, cudaStreamCaptureModeGlobal), cudaSuccess);
  ASSERT_NO_THROW(gemm::gemm(p, stream));
  ASSERT_EQ(cudaStreamEndCapture(cs, &graph), cudaSuccess);
  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  for (int replay = 0; replay < 3; ++replay) {
    ASSERT_EQ(cudaMemsetAsync(d3.data(), 0xFF, static_cast<size_t>(m * n) * 2, cs), cudaSuccess);
    ASSERT_EQ(cudaGraphLaunch(exec, cs), cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(cs), cudaSuccess);
    EXPECT_EQ(to_doubles(d3), to_doubles(d1)) << "replay " << replay;
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
}

// The ping-pong schedule's choices: Auto with only tile rows forced, and a forced schedule
// without a forced tile (the entry picks one), give the reference; a tile or layout without a
// ping-pong kernel is refused on Path::Hopper.
TEST_P(GemmVariantsGpu, PingpongChoicesAndRefusals) {
  RUDNN_REQUIRE_CUDA();
  if (!hopper()) GTEST_SKIP() << "the wgmma path needs a 9.0 device and an sm_90a build";
  RUDNN_SEEDED_RNG(rng);
  const DType dtype = GetParam();
  Options o;
  o.path = Path::Hopper;
  o.block_m = 64;  // Auto schedule: ping-pong
  check_dense(rng, dtype, 200, 300, 100, Layout::RowMajor, Layout::ColMajor, o);
  o.block_m = 0;
  o.schedule = gemm::HopperSchedule::Pingpong;
  check_dense(rng, dtype, 1030, 2050, 260, Layout::RowMajor, Layout::ColMajor, o);
  o.schedule = gemm::HopperSchedule::Cooperative;
  check_dense(rng, dtype, 200, 300, 100, Layout::RowMajor, Layout::ColMajor, o);

  const Tensor a = Tensor::zeros({64, 64}, dtype, kGpu), b = Tensor::zeros({64, 64}, dtype, kGpu);
  const Tensor d = Tensor::zeros({64, 64}, dtype, kGpu);
  gemm::GemmParams p;
  p.dtype = dtype;
  p.m = p.n = p.k = 64;
  p.a = {a.data(), Layout::RowMajor, 64};
  p.b = {b.data(), Layout::ColMajor, 64};
  p.d = d.data();
  p.ldd = 64;
  p.path = Path::Hopper;
  p.tuning.hopper_schedule = gemm::HopperSchedule::Pingpong;
  p.tuning.hopper_block_m = 128;
  p.tuning.hopper_block_n = 256;  // 128 x 256 would not fit the consumers' registers
  EXPECT_TRUE(throws_error([&] { gemm::gemm(p, current_stream(kGpu)); }, ErrorCode::InvalidArgument,
                           {"no ping-pong kernel of that tile"}));
  p.tuning.hopper_block_m = 0;
  p.tuning.hopper_block_n = 0;
  p.a = {a.data(), Layout::ColMajor, 64};  // no ping-pong kernel for a column-major A
  EXPECT_TRUE(throws_error([&] { gemm::gemm(p, current_stream(kGpu)); }, ErrorCode::InvalidArgument,
                           {"no ping-pong kernel"}));
}

// Group starts are TMA box starts along the contiguous axis in these layouts, where TMA needs
// 16-byte alignment that device-side offsets cannot promise: a forced Hopper path is refused,
// Auto takes MmaSync (checked against the reference in GroupedGemmGpu).
TEST_P(GemmVariantsGpu, HopperRefusesGroupStartsOnAContiguousAxis) {
  RUDNN_REQUIRE_CUDA();
  if (!hopper()) GTEST_SKIP() << "the wgmma path needs a 9.0 device and an sm_90a build";
  const DType dtype = GetParam();
  const Tensor offsets = Tensor::from_host(std::vector<int32_t>{0, 5, 16}, {3}, kGpu);
  const Tensor a = Tensor::zeros({64, 64}, dtype, kGpu), b = Tensor::zeros({64, 64}, dtype, kGpu);
  const Tensor d = Tensor::zeros({2 * 64, 64}, dtype, kGpu);
  for (const auto& [grouped, la, lb] :
       {std::tuple{GroupedDim::M, Layout::ColMajor, Layout::RowMajor},
        std::tuple{GroupedDim::K, Layout::RowMajor, Layout::RowMajor},
        std::tuple{GroupedDim::K, Layout::ColMajor, Layout::ColMajor}}) {
    gemm::GroupedGemmParams p;
    p.dtype = dtype;
    p.grouped = grouped;
    p.groups = 2;
    p.offsets = offsets.data_as<int32_t>();
    p.m = grouped == GroupedDim::M ? 16 : 64;
    p.n = 64;
    p.k = grouped == GroupedDim::K ? 16 : 64;
    p.a = {a.data(), la, 64};
    p.b = {b.data(), lb, 64};
    p.b_group_stride = grouped == GroupedDim::M ? 64 * 64 : 0;
    p.d = d.data();
    p.ldd = 64;
    p.d_group_stride = grouped == GroupedDim::K ? 64 * 64 : 0;
    p.path = Path::Hopper;
    EXPECT_TRUE(throws_error([&] { gemm::grouped_gemm(p, current_stream(kGpu)); },
                             ErrorCode::InvalidArgument, {"group starts would be TMA box starts"}));
  }
}

TEST_P(GemmVariantsGpu, EpilogueOptionsOnEveryPath) {
  RUDNN_REQUIRE_CUDA();
  RUDNN_SEEDED_RNG(rng);
  const DType dtype = GetParam();
  std::vector<std::pair<Path, gemm::HopperSchedule>> paths = {
      {Path::MmaSync, gemm::HopperSchedule::Auto}};
  if (hopper()) {
    paths.emplace_back(Path::Hopper, gemm::HopperSchedule::Cooperative);
    paths.emplace_back(Path::Hopper, gemm::HopperSchedule::Pingpong);
  }
  std::vector<Options> options;
  for (const auto& [path, schedule] : paths) {
    Options o;
    o.path = path;
    o.schedule = schedule;
    o.f32_out = true;
    options.push_back(o);  // f32 output
    o.f32_out = false;
    o.alpha = 0.75f;
    o.row_scale = o.col_scale = o.bias = true;
    o.activation = Activation::Silu;
    options.push_back(o);
    o.activation = Activation::Gelu;
    o.beta = -0.5f;
    options.push_back(o);
    o = Options{};
    o.path = path;
    o.schedule = schedule;
    o.activation = Activation::Relu;
    o.beta = 1.0f;
    o.in_place = true;  // D += A.B
    o.f32_out = true;
    options.push_back(o);
  }
  for (const Options& o : options) {
    check_dense(rng, dtype, 130, 96, 72, Layout::RowMajor, Layout::ColMajor, o);
    check_grouped_m(rng, dtype, {3, 0, 140}, 72, 64, Layout::ColMajor, o);
    // Ping-pong kernels exist for the forward layout only (hopper_pingpong_tiles).
    if (o.schedule != gemm::HopperSchedule::Pingpong)
      check_grouped_k(rng, dtype, {33, 0, 64}, 40, 72, Layout::ColMajor, Layout::RowMajor, o);
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, GemmVariantsGpu, ::testing::Values(DType::bf16, DType::f16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

TEST(GemmVariantsF32Gpu, SimtAndTf32WithEpilogue) {
  RUDNN_REQUIRE_CUDA();
  RUDNN_SEEDED_RNG(rng);
  for (gemm::MathMode math : {gemm::MathMode::Default, gemm::MathMode::Tf32}) {
    Options o;
    o.math = math;
    o.alpha = 1.5f;
    o.bias = o.row_scale = true;
    o.activation = Activation::Relu;
    const bool tf32 = math == gemm::MathMode::Tf32;
    // TF32 inputs carry 10 mantissa bits: compare against TF32-rounded expectations loosely.
    for (Layout la : {Layout::RowMajor, Layout::ColMajor})
      for (Layout lb : {Layout::RowMajor, Layout::ColMajor}) {
        if (!tf32) {
          check_dense(rng, DType::f32, 67, 45, 129, la, lb, o);
          continue;
        }
        // Own check: TF32 error is about 1e-3 relative.
        SCOPED_TRACE("tf32");
        const Matrix a = make_matrix(rng, 67, 129, la, DType::f32, 8);
        const Matrix b = make_matrix(rng, 129, 45, lb, DType::f32, 8);
        const Tensor d = poisoned({67, 45}, DType::f32, kGpu);
        gemm::GemmParams p;
        p.dtype = DType::f32;
        p.m = 67;
        p.n = 45;
        p.k = 129;
        p.a = a.operand();
        p.b = b.operand();
        p.d = d.data();
        p.ldd = 45;
        p.math = math;
        const Stream stream = current_stream(kGpu);
        ASSERT_NO_THROW(gemm::gemm(p, stream));
        stream.synchronize();
        std::vector<double> expected(67 * 45);
        for (int64_t i = 0; i < 67; ++i)
          for (int64_t j = 0; j < 45; ++j) {
            double s = 0;
            for (int64_t kk = 0; kk < 129; ++kk) s += a.at(i, kk) * b.at(kk, j);
            expected[i * 45 + j] = s;
          }
        EXPECT_TRUE(all_close(d.to_host(), host_tensor(expected, {67, 45}, DType::f32), 3e-3));
      }
  }
}

// ---- CUDA graphs
// ---------------------------------------------------------------------------------

TEST(GroupedGemmGraphGpu, CapturedOnceReplayedWithNewOffsets) {
  RUDNN_REQUIRE_CUDA();
  RUDNN_SEEDED_RNG(rng);
  const DType dtype = DType::bf16;
  const int64_t groups = 8, n = 136, k = 200, rows = 600;
  const Matrix a = make_matrix(rng, rows, k, Layout::RowMajor, dtype, 0);
  const Matrix b = make_matrix(rng, n * groups, k, Layout::RowMajor, dtype, 0);  // W [G, N, K]
  const Tensor offsets_device = Tensor::zeros({groups + 1}, DType::i32, kGpu);
  const Tensor d = Tensor::empty({rows, n}, dtype, kGpu);
  const Stream stream = Stream::create(kGpu);
  auto cs = reinterpret_cast<cudaStream_t>(stream.handle());
  current_stream(kGpu).synchronize();

  std::vector<std::pair<Path, int>> launches = {{Path::Auto, 0}, {Path::MmaSync, 0}};
  if (hopper()) launches.push_back({Path::Hopper, 2});
  for (const auto& [path, cluster] : launches) {
    SCOPED_TRACE(::testing::Message() << gemm::path_name(path) << " cluster " << cluster);
    gemm::GroupedGemmParams p;
    p.dtype = dtype;
    p.grouped = GroupedDim::M;
    p.groups = groups;
    p.offsets = offsets_device.data_as<int32_t>();
    p.m = rows;
    p.n = n;
    p.k = k;
    p.a = a.operand();
    p.b = gemm::Operand{b.device.data(), Layout::ColMajor, b.ld};  // B_g = W_g^T
    p.b_group_stride = n * b.ld;
    p.d = d.data();
    p.ldd = n;
    p.path = path;
    p.tuning.hopper_cluster = cluster;
    gemm::grouped_gemm(p, stream);  // first call outside the capture: one-time setup
    stream.synchronize();

    cudaGraph_t graph = nullptr;
    ASSERT_EQ(cudaStreamBeginCapture(cs, cudaStreamCaptureModeGlobal), cudaSuccess);
    ASSERT_NO_THROW(gemm::grouped_gemm(p, stream));
    ASSERT_EQ(cudaStreamEndCapture(cs, &graph), cudaSuccess);
    cudaGraphExec_t exec = nullptr;
    ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);

    for (int replay = 0; replay < 3; ++replay) {
      // New routing: sizes summing to at most `rows`, some empty.
      std::vector<int32_t> offsets(1, 0);
      for (int64_t g = 0; g < groups; ++g) {
        const int32_t size = rng.integer(0, 2) == 0 ? 0 : static_cast<int32_t>(rng.integer(1, 140));
        offsets.push_back(std::min<int32_t>(offsets.back() + size, static_cast<int32_t>(rows)));
      }
      ASSERT_EQ(cudaMemcpyAsync(offsets_device.data(), offsets.data(), offsets.size() * 4,
                                cudaMemcpyHostToDevice, cs),
                cudaSuccess);
      ASSERT_EQ(cudaMemsetAsync(d.data(), 0xFF, static_cast<size_t>(rows * n) * 2, cs),
                cudaSuccess);
      ASSERT_EQ(cudaGraphLaunch(exec, cs), cudaSuccess);
      ASSERT_EQ(cudaStreamSynchronize(cs), cudaSuccess);
      const int64_t used = offsets.back();
      std::vector<double> expected(static_cast<size_t>(used * n));
      for (int64_t g = 0; g < groups; ++g)
        for (int64_t i = offsets[g]; i < offsets[g + 1]; ++i)
          for (int64_t j = 0; j < n; ++j) {
            double s = 0;
            for (int64_t kk = 0; kk < k; ++kk) s += a.at(i, kk) * b.at(g * n + j, kk);
            expected[i * n + j] = s;
          }
      if (used > 0)
        EXPECT_TRUE(
            all_close(d.slice(0, 0, used).to_host(), host_tensor(expected, {used, n}, dtype)))
            << "replay " << replay;
    }
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
  }
}

}  // namespace
}  // namespace rudnn::test
