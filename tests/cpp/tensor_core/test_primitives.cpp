// The tensor-core layer's primitives (src/cuda/tensor_core/), each against a host computation:
//   CPU: the operand-tile layouts, swizzles and descriptor fields (wgmma.cuh), the tile
//        scheduler's band rasterization, the tensor-map spec checks (tensor_map.h);
//   GPU (suites *Gpu, skipped without a device, or without the architecture a primitive
//        needs): mma.sync m16n8k16 / m16n8k8 and their fragment layouts, ldmatrix x1/x2/x4
//        (.trans), a cp.async ring with zero fill, mbarrier phases / parity / expect-tx /
//        cluster arrivals, TMA loads of 1-5 D boxes with out-of-range zeros, the 32/64/128-byte
//        swizzles as TMA writes them, TMA stores and multicast, a warp-specialised ring with
//        setmaxnreg, wgmma ss/rs for every N and operand layout, the accumulator reused as an
//        A fragment, and the persistent scheduler's tile walk.
// Fresh random inputs each run (RUDNN_TEST_SEED replays one; the seed is printed on failure).
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "cuda/tensor_core/tensor_map.h"
#include "primitive_kernels.h"
#include "support/test_support.h"

namespace rudnn::test {
namespace {

namespace ptc = rudnn::test::tc;
using detail::bfloat16_bits_to_float;
using detail::float_to_bfloat16_bits;
using detail::float_to_half_bits;
using detail::half_bits_to_float;

// ---- Gating -----------------------------------------------------------------------------------
struct Capability {
  int major = 0, minor = 0;
  ptc::DeviceCode code;
};
const Capability& capability() {
  static const Capability c = [] {
    Capability out;
    if (!cuda_available()) return out;
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, 0) != cudaSuccess) return out;
    out.major = prop.major;
    out.minor = prop.minor;
    out.code = ptc::probe_device_code();
    return out;
  }();
  return c;
}

#define REQUIRE_SM80()                                                              \
  do {                                                                              \
    RUDNN_REQUIRE_CUDA();                                                           \
    if (capability().major < 8 || !capability().code.sm80)                          \
      GTEST_SKIP() << "needs an sm_80+ device and sm_80+ code in this test binary"; \
  } while (0)
#define REQUIRE_SM90()                                                              \
  do {                                                                              \
    RUDNN_REQUIRE_CUDA();                                                           \
    if (capability().major < 9 || !capability().code.sm90)                          \
      GTEST_SKIP() << "needs an sm_90+ device and sm_90+ code in this test binary"; \
  } while (0)
#define REQUIRE_SM90A()                                                                    \
  do {                                                                                     \
    RUDNN_REQUIRE_CUDA();                                                                  \
    if (capability().major != 9 || capability().minor != 0 || !capability().code.sm90a)    \
      GTEST_SKIP() << "needs a compute capability 9.0 device and sm_90a code (RUDNN_CUDA_" \
                      "ARCHS with 90a)";                                                   \
  } while (0)

// ---- Helpers ------------------------------------------------------------------------------------
uint16_t to_bits(float v, bool bf16) {
  return bf16 ? float_to_bfloat16_bits(v) : float_to_half_bits(v);
}
double from_bits(uint16_t b, bool bf16) {
  return bf16 ? bfloat16_bits_to_float(b) : half_bits_to_float(b);
}
std::vector<uint16_t> random_bits(Rng& rng, size_t n, bool bf16) {
  std::vector<uint16_t> v(n);
  for (auto& x : v) x = to_bits(rng.normal(), bf16);
  return v;
}
// Relative L2 error of got against expected.
double rel_error(const std::vector<float>& got, const std::vector<double>& expected) {
  double diff = 0, norm = 0;
  for (size_t i = 0; i < expected.size(); ++i) {
    const double d = static_cast<double>(got[i]) - expected[i];
    diff += d * d;
    norm += expected[i] * expected[i];
  }
  if (!std::isfinite(diff)) return INFINITY;
  return norm > 0 ? std::sqrt(diff / norm) : std::sqrt(diff);
}
// C[m][n] = sum_k A[m][k] B[k][n] with A m x k and B k x n row-major (as doubles).
std::vector<double> matmul(const std::vector<double>& a, const std::vector<double>& b, int m, int n,
                           int k) {
  std::vector<double> c(static_cast<size_t>(m) * n, 0.0);
  for (int i = 0; i < m; ++i)
    for (int kk = 0; kk < k; ++kk)
      for (int j = 0; j < n; ++j) c[i * n + j] += a[i * k + kk] * b[kk * n + j];
  return c;
}
std::vector<double> decode(const std::vector<uint16_t>& v, bool bf16) {
  std::vector<double> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = from_bits(v[i], bf16);
  return out;
}
// FP32 rounded to TF32 as cvt.rna does: to nearest, ties away from zero, 10 mantissa bits.
float tf32_round(float v) {
  uint32_t u;
  std::memcpy(&u, &v, 4);
  if ((u & 0x7f800000u) != 0x7f800000u) u = (u + 0x1000u) & 0xffffe000u;
  float r;
  std::memcpy(&r, &u, 4);
  return r;
}

// ---- CPU: layouts, descriptors, scheduler, tensor maps ---------------------------------------

TEST(TensorCoreLayout, OperandTilesPlaceEveryElementOnceInContiguousChunks) {
  struct Case {
    bool mn_major;
    int span, mn, k;
  };
  std::vector<Case> cases;
  for (bool mn_major : {false, true})
    for (int span : {0, 32, 64, 128})
      for (int mn : {64, 128, 256}) cases.push_back({mn_major, span, mn, 64});
  cases.push_back({false, 32, 64, 16});  // one 16-wide k-slab
  cases.push_back({false, 0, 16, 16});
  for (const Case& c : cases) {
    SCOPED_TRACE(::testing::Message() << (c.mn_major ? "MN" : "K") << "-major span " << c.span
                                      << " " << c.mn << " x " << c.k);
    const uint32_t bytes = static_cast<uint32_t>(c.mn * c.k * 2);
    std::set<uint32_t> seen;
    for (int mn = 0; mn < c.mn; ++mn)
      for (int k = 0; k < c.k; ++k) {
        const uint32_t o = ptc::operand_offset(c.mn_major, c.span, c.mn, c.k, mn, k);
        ASSERT_LT(o, bytes);
        ASSERT_EQ(o % 2, 0u);
        ASSERT_TRUE(seen.insert(o).second) << "element (" << mn << ", " << k << ") overlaps";
        // 8 consecutive elements along the contiguous dimension share one 16-byte chunk, in
        // order (what TMA and ldmatrix move).
        const bool first_of_chunk = c.mn_major ? mn % 8 == 0 : k % 8 == 0;
        if (first_of_chunk) {
          ASSERT_EQ(o % 16, 0u);
          for (int e = 1; e < 8; ++e) {
            const uint32_t oe = c.mn_major
                                    ? ptc::operand_offset(true, c.span, c.mn, c.k, mn + e, k)
                                    : ptc::operand_offset(false, c.span, c.mn, c.k, mn, k + e);
            ASSERT_EQ(oe, o + 2u * e);
          }
        }
      }
    EXPECT_EQ(seen.size(), static_cast<size_t>(c.mn * c.k));
  }
}

TEST(TensorCoreLayout, SwizzlesPermuteChunksAsTheTable) {
  // 128-byte swizzle: chunk c of row r (128-byte rows) stored at chunk c ^ (r % 8).
  for (uint32_t r = 0; r < 16; ++r)
    for (uint32_t c = 0; c < 8; ++c)
      EXPECT_EQ(ptc::swizzle(r * 128 + c * 16 + 6, 128), r * 128 + ((c ^ (r % 8)) * 16) + 6);
  // 64-byte: rows of 64 bytes, chunk c (0..3) at c ^ ((r / 2) % 4).
  for (uint32_t r = 0; r < 16; ++r)
    for (uint32_t c = 0; c < 4; ++c)
      EXPECT_EQ(ptc::swizzle(r * 64 + c * 16, 64), r * 64 + ((c ^ ((r / 2) % 4)) * 16));
  // 32-byte: rows of 32 bytes, chunk c (0..1) at c ^ ((r / 4) % 2).
  for (uint32_t r = 0; r < 16; ++r)
    for (uint32_t c = 0; c < 2; ++c)
      EXPECT_EQ(ptc::swizzle(r * 32 + c * 16, 32), r * 32 + ((c ^ ((r / 4) % 2)) * 16));
  // No swizzle: the identity; every swizzle is an involution.
  for (uint32_t o = 0; o < 4096; o += 2) {
    EXPECT_EQ(ptc::swizzle(o, 0), o);
    for (int span : {32, 64, 128}) EXPECT_EQ(ptc::swizzle(ptc::swizzle(o, span), span), o);
  }
}

TEST(TensorCoreLayout, DescriptorFieldsAndStrides) {
  const uint64_t d = ptc::descriptor(0x2A400, 8192, 1024, 128);
  EXPECT_EQ(d & 0x3FFF, 0x2A400u >> 4);
  EXPECT_EQ((d >> 16) & 0x3FFF, 8192u >> 4);
  EXPECT_EQ((d >> 32) & 0x3FFF, 1024u >> 4);
  EXPECT_EQ((d >> 49) & 0x7, 0u);
  EXPECT_EQ(d >> 62, 1u);
  EXPECT_EQ(ptc::descriptor(0, 16, 512, 64) >> 62, 2u);
  EXPECT_EQ(ptc::descriptor(0, 16, 256, 32) >> 62, 3u);
  EXPECT_EQ(ptc::descriptor(0, 128, 1024, 0) >> 62, 0u);
  // K-major swizzled: LBO unused (16), SBO = 8 rows; MN-major: LBO = slab, SBO = 8 k-rows.
  EXPECT_EQ(ptc::operand_lbo(false, 128, 128, 64), 16u);
  EXPECT_EQ(ptc::operand_sbo(false, 128, 128, 64), 1024u);
  EXPECT_EQ(ptc::operand_sbo(false, 64, 128, 64), 512u);
  EXPECT_EQ(ptc::operand_sbo(false, 32, 128, 64), 256u);
  EXPECT_EQ(ptc::operand_lbo(true, 128, 256, 64), 64u * 128u);
  EXPECT_EQ(ptc::operand_sbo(true, 128, 256, 64), 1024u);
  EXPECT_EQ(ptc::operand_lbo(true, 32, 64, 64), 64u * 32u);
  // No swizzle: LBO = next 8 k (128 bytes), SBO = next 8 mn.
  EXPECT_EQ(ptc::operand_lbo(false, 0, 64, 64), 128u);
  EXPECT_EQ(ptc::operand_sbo(false, 0, 64, 64), 1024u);
  EXPECT_EQ(ptc::operand_lbo(true, 0, 64, 32), 128u);
  EXPECT_EQ(ptc::operand_sbo(true, 0, 64, 32), 512u);
}

TEST(TileScheduler, BandedCoordinatesCoverTheGridOnce) {
  for (int band : {1, 4, 8})
    for (int m_tiles : {1, 3, 8, 9, 17})
      for (int n_tiles : {1, 2, 5}) {
        std::set<std::pair<int, int>> seen;
        for (int local = 0; local < m_tiles * n_tiles; ++local) {
          const auto c = ptc::banded(band, 7, local, m_tiles, n_tiles);
          ASSERT_EQ(c[0], 7);
          ASSERT_GE(c[1], 0);
          ASSERT_LT(c[1], m_tiles);
          ASSERT_GE(c[2], 0);
          ASSERT_LT(c[2], n_tiles);
          ASSERT_TRUE(seen.insert({c[1], c[2]}).second)
              << "band " << band << ": tile " << local << " repeats";
        }
      }
  // Within a band, M runs fastest.
  const auto a = ptc::banded(8, 0, 0, 16, 4), b = ptc::banded(8, 0, 1, 16, 4);
  EXPECT_EQ(a[1] + 1, b[1]);
  EXPECT_EQ(a[2], b[2]);
}

TEST(TensorMap, SpecsAreCheckedBeforeTheDriver) {
  alignas(16) static float buffer[256];
  auto good = [] {
    cuda::tc::TensorMapSpec s;
    s.type = CU_TENSOR_MAP_DATA_TYPE_FLOAT32;
    s.rank = 2;
    s.base = buffer;
    s.dims[0] = 16;
    s.dims[1] = 16;
    s.strides[0] = 64;
    s.box[0] = 8;
    s.box[1] = 4;
    return s;
  };
  auto refused = [&](auto edit, std::initializer_list<std::string> fragments) {
    cuda::tc::TensorMapSpec s = good();
    edit(s);
    return throws_error([&] { (void)cuda::tc::encode_tensor_map(s); }, ErrorCode::InvalidArgument,
                        fragments);
  };
  EXPECT_TRUE(refused([](auto& s) { s.rank = 0; }, {"rank 0"}));
  EXPECT_TRUE(refused([](auto& s) { s.rank = 6; }, {"rank 6"}));
  EXPECT_TRUE(refused([](auto& s) { s.base = nullptr; }, {"16-byte aligned"}));
  EXPECT_TRUE(refused([](auto& s) { s.base = reinterpret_cast<const char*>(buffer) + 4; },
                      {"16-byte aligned"}));
  EXPECT_TRUE(refused([](auto& s) { s.dims[1] = 0; }, {"dims[1]"}));
  EXPECT_TRUE(refused([](auto& s) { s.box[1] = 257; }, {"box[1] = 257"}));
  EXPECT_TRUE(refused([](auto& s) { s.box[0] = 3; }, {"box[0] = 3", "multiple of 16"}));
  EXPECT_TRUE(refused([](auto& s) { s.strides[0] = 40; }, {"stride of dimension 1"}));
  EXPECT_TRUE(refused(
      [](auto& s) {
        s.box[0] = 16;  // 64 bytes
        s.swizzle = CU_TENSOR_MAP_SWIZZLE_32B;
      },
      {"wider than the 32-byte swizzle"}));
  EXPECT_TRUE(throws_error([] { (void)cuda::tc::swizzle_mode(48); }, ErrorCode::InvalidArgument,
                           {"swizzle span 48"}));
  EXPECT_TRUE(throws_error([] { (void)cuda::tc::tensor_map_type(DType::i32); },
                           ErrorCode::InvalidArgument, {"dtype i32"}));
  EXPECT_EQ(cuda::tc::swizzle_span(cuda::tc::swizzle_mode(128)), 128);
  EXPECT_EQ(cuda::tc::tensor_map_element_bytes(cuda::tc::tensor_map_type(DType::bf16)), 2u);
}

// ---- GPU: mma.sync, ldmatrix, cp.async (sm_80+) -------------------------------------------------

TEST(MmaSyncGpu, M16n8k16FragmentLayouts) {
  REQUIRE_SM80();
  RUDNN_SEEDED_RNG(rng);
  for (bool bf16 : {true, false}) {
    SCOPED_TRACE(bf16 ? "bf16" : "f16");
    const auto a = random_bits(rng, 16 * 16, bf16), b = random_bits(rng, 16 * 8, bf16);
    std::vector<float> c(16 * 8);
    for (auto& x : c) x = rng.normal();
    const std::vector<float> d = ptc::mma_16816(bf16, a, b, c);
    std::vector<double> expected = matmul(decode(a, bf16), decode(b, bf16), 16, 8, 16);
    for (size_t i = 0; i < expected.size(); ++i) expected[i] += c[i];
    EXPECT_LT(rel_error(d, expected), 1e-6);
  }
}

TEST(MmaSyncGpu, M16n8k8Tf32) {
  REQUIRE_SM80();
  RUDNN_SEEDED_RNG(rng);
  std::vector<float> a(16 * 8), b(8 * 8), c(16 * 8);
  for (auto& x : a) x = rng.normal();
  for (auto& x : b) x = rng.normal();
  for (auto& x : c) x = rng.normal();
  // cvt.rna.tf32 as the host rounds it.
  const std::vector<uint32_t> bits = ptc::to_tf32_bits(a);
  for (size_t i = 0; i < a.size(); ++i) {
    const float r = tf32_round(a[i]);
    uint32_t u;
    std::memcpy(&u, &r, 4);
    EXPECT_EQ(bits[i], u) << "value " << a[i];
  }
  std::vector<double> ad(a.size()), bd(b.size());
  for (size_t i = 0; i < a.size(); ++i) ad[i] = tf32_round(a[i]);
  for (size_t i = 0; i < b.size(); ++i) bd[i] = tf32_round(b[i]);
  std::vector<double> expected = matmul(ad, bd, 16, 8, 8);
  for (size_t i = 0; i < expected.size(); ++i) expected[i] += c[i];
  EXPECT_LT(rel_error(ptc::mma_1688_tf32(a, b, c), expected), 1e-6);
}

TEST(MmaSyncGpu, LdmatrixGivesEachLaneItsRowsAndColumns) {
  REQUIRE_SM80();
  std::vector<uint16_t> values(32 * 8);  // matrix i = rows 8i..8i+7; value = its own index
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<uint16_t>(i);
  auto at = [&](int matrix, int row, int col) -> uint32_t {
    return values[(matrix * 8 + row) * 8 + col];
  };
  for (int count : {1, 2, 4})
    for (bool trans : {false, true}) {
      SCOPED_TRACE(::testing::Message() << "x" << count << (trans ? ".trans" : ""));
      const std::vector<uint32_t> got = ptc::ldmatrix(count, trans, values);
      for (int lane = 0; lane < 32; ++lane)
        for (int i = 0; i < count; ++i) {
          const int g = lane / 4, t = lane % 4;
          const uint32_t lo = trans ? at(i, 2 * t, g) : at(i, g, 2 * t);
          const uint32_t hi = trans ? at(i, 2 * t + 1, g) : at(i, g, 2 * t + 1);
          EXPECT_EQ(got[lane * 4 + i], lo | (hi << 16)) << "lane " << lane << " register " << i;
        }
    }
}

TEST(MmaSyncGpu, CpAsyncRingZeroFillsPastValidBytes) {
  REQUIRE_SM80();
  RUDNN_SEEDED_RNG(rng);
  const int blocks = 7;  // more k-blocks than the ring's 3 stages
  std::vector<uint8_t> src(static_cast<size_t>(blocks) * 128 * 16);
  for (auto& x : src) x = static_cast<uint8_t>(rng.integer(1, 255));
  std::vector<int> valid(static_cast<size_t>(blocks) * 128);
  for (auto& v : valid)
    v = static_cast<int>(rng.integer(0, 3)) == 0 ? static_cast<int>(rng.integer(0, 16)) : 16;
  const std::vector<uint8_t> got = ptc::cp_async_ring(src, valid);
  for (size_t j = 0; j < valid.size(); ++j)
    for (int e = 0; e < 16; ++e) {
      const uint8_t want = e < valid[j] ? src[j * 16 + e] : 0;
      ASSERT_EQ(got[j * 16 + e], want)
          << "chunk " << j << " byte " << e << " (valid " << valid[j] << ")";
    }
}

// ---- GPU: mbarrier, TMA, pipelines (sm_90) ------------------------------------------------------

TEST(MbarrierGpu, PhasesFlipAndParityWaitsSeeThem) {
  REQUIRE_SM90();
  const ptc::MbarrierPhases r = ptc::mbarrier_phases(9);
  for (int i = 0; i < 9; ++i) EXPECT_EQ(r.received[i], 1000 + i) << "round " << i;
  EXPECT_EQ(r.test_wait[0], 0) << "a fresh barrier's current phase (parity 0) is not complete";
  EXPECT_EQ(r.test_wait[1], 1) << "parity 1 names the phase before: complete";
  EXPECT_EQ(r.test_wait[2], 1) << "phase 0 completed";
  EXPECT_EQ(r.test_wait[3], 0) << "phase 1 is still open";
}

TEST(MbarrierGpu, ExpectTxCountsBulkCopyBytes) {
  REQUIRE_SM90();
  RUDNN_SEEDED_RNG(rng);
  std::vector<uint8_t> first(1024), second(2048);
  for (auto& x : first) x = static_cast<uint8_t>(rng.integer(0, 255));
  for (auto& x : second) x = static_cast<uint8_t>(rng.integer(0, 255));
  const std::vector<uint8_t> got = ptc::mbarrier_bulk_copies(first, second);
  ASSERT_EQ(got.size(), first.size() + second.size());
  EXPECT_TRUE(std::equal(first.begin(), first.end(), got.begin()));
  EXPECT_TRUE(std::equal(second.begin(), second.end(), got.begin() + first.size()));
}

TEST(MbarrierGpu, ArrivalsFromTheClusterPeer) {
  REQUIRE_SM90();
  const std::vector<int> got = ptc::mbarrier_cluster_arrivals();
  EXPECT_EQ(got[1], 1);
  EXPECT_EQ(got[3], 1);
  EXPECT_EQ(std::min(got[0], got[2]), 0);
  EXPECT_EQ(std::max(got[0], got[2]), 1);
}

TEST(TmaGpu, LoadsBoxesOfEveryRankWithZerosOutside) {
  REQUIRE_SM90();
  RUDNN_SEEDED_RNG(rng);
  const std::vector<int64_t> all_dims = {40, 6, 5, 3, 2};
  const std::vector<int> all_box = {8, 4, 3, 2, 2};
  for (int rank = 1; rank <= 5; ++rank) {
    const std::vector<int64_t> dims(all_dims.begin(), all_dims.begin() + rank);
    const std::vector<int> box(all_box.begin(), all_box.begin() + rank);
    int64_t numel = 1;
    for (int64_t d : dims) numel *= d;
    std::vector<float> x(static_cast<size_t>(numel));
    for (auto& v : x) v = static_cast<float>(rng.integer(1, 1000));
    // Inside, straddling the end, before the start, and wholly outside.
    std::vector<std::vector<int>> coord_sets = {
        {0, 0, 0, 0, 0}, {36, 4, 3, 2, 1}, {-4, -2, -1, 0, 0}, {40, 0, 0, 0, 0}};
    for (int trial = 0; trial < 4; ++trial) {
      std::vector<int> c(5);
      for (int i = 0; i < 5; ++i) c[i] = static_cast<int>(rng.integer(-3, all_dims[i] + 1));
      c[0] = c[0] / 4 * 4;  // the innermost start on 16 bytes (tma.cuh)
      coord_sets.push_back(c);
    }
    for (auto coords : coord_sets) {
      coords.resize(rank);
      SCOPED_TRACE(::testing::Message() << "rank " << rank << " at " << coords[0]);
      const std::vector<float> got = ptc::tma_load_box(x, dims, box, coords);
      // Element (i0..i4) of the box, innermost first, dense.
      int box_numel = 1;
      for (int b : box) box_numel *= b;
      for (int e = 0; e < box_numel; ++e) {
        int rest = e;
        int64_t offset = 0, stride = 1;
        bool inside = true;
        for (int d = 0; d < rank; ++d) {
          const int64_t idx = coords[d] + rest % box[d];
          rest /= box[d];
          inside = inside && idx >= 0 && idx < dims[d];
          offset += idx * stride;
          stride *= dims[d];
        }
        const float want = inside ? x[static_cast<size_t>(offset)] : 0.0f;
        ASSERT_EQ(got[e], want) << "box element " << e;
      }
    }
  }
}

TEST(TmaGpu, SwizzledLoadsMatchTheOperandLayout) {
  REQUIRE_SM90();
  RUDNN_SEEDED_RNG(rng);
  const int rows = 16;
  for (int span : {32, 64, 128}) {
    SCOPED_TRACE(::testing::Message() << span << "-byte swizzle");
    const int cols = span / 2;
    const std::vector<uint16_t> x = random_bits(rng, static_cast<size_t>(rows) * cols, true);
    const std::vector<uint16_t> got = ptc::tma_load_swizzled(x, rows, span);
    for (int r = 0; r < rows; ++r)
      for (int c = 0; c < cols; ++c) {
        // What a K-major wgmma operand of 16 rows x (span / 2) k expects at (r, c).
        const uint32_t o = ptc::operand_offset(false, span, rows, cols, r, c);
        ASSERT_EQ(got[o / 2], x[r * cols + c]) << "row " << r << " col " << c;
      }
  }
}

TEST(TmaGpu, StoresWriteOnlyTheBoxInsideTheTensor) {
  REQUIRE_SM90();
  RUDNN_SEEDED_RNG(rng);
  struct Case {
    std::vector<int64_t> dims;
    std::vector<int> box, coords;
  };
  const std::vector<Case> cases = {{{24, 10}, {8, 4}, {4, 3}},
                                   {{24, 10}, {8, 4}, {20, 8}},
                                   {{12, 5, 3}, {4, 2, 2}, {8, 4, 2}},
                                   {{12, 5, 3}, {4, 2, 2}, {0, 1, 0}}};
  for (const Case& c : cases) {
    SCOPED_TRACE(::testing::Message()
                 << "rank " << c.dims.size() << " at " << c.coords[0] << ", " << c.coords[1]);
    int64_t numel = 1;
    for (int64_t d : c.dims) numel *= d;
    const std::vector<float> initial(static_cast<size_t>(numel), -1.0f);
    int box_numel = 1;
    for (int b : c.box) box_numel *= b;
    std::vector<float> values(box_numel);
    for (auto& v : values) v = static_cast<float>(rng.integer(1, 1000));
    const std::vector<float> got = ptc::tma_store_box(initial, c.dims, c.box, c.coords, values);
    std::vector<float> want = initial;
    for (int e = 0; e < box_numel; ++e) {
      int rest = e;
      int64_t offset = 0, stride = 1;
      bool inside = true;
      for (size_t d = 0; d < c.dims.size(); ++d) {
        const int64_t idx = c.coords[d] + rest % c.box[d];
        rest /= c.box[d];
        inside = inside && idx >= 0 && idx < c.dims[d];
        offset += idx * stride;
        stride *= c.dims[d];
      }
      if (inside) want[static_cast<size_t>(offset)] = values[e];
    }
    EXPECT_EQ(got, want);
  }
}

TEST(TmaGpu, MulticastFillsEveryBlockOfTheCluster) {
  REQUIRE_SM90();
  RUDNN_SEEDED_RNG(rng);
  const int rows = 40, cols = 48;
  std::vector<float> x(static_cast<size_t>(rows) * cols);
  for (auto& v : x) v = static_cast<float>(rng.integer(1, 1000));
  const int c0 = 20, c1 = 30;  // the box runs past both ends: zeros there
  const std::vector<float> got = ptc::tma_multicast(x, rows, cols, c0, c1);
  for (int block = 0; block < 2; ++block)
    for (int r = 0; r < 16; ++r)
      for (int c = 0; c < 32; ++c) {
        const int gr = c1 + r, gc = c0 + c;
        const float want = gr < rows && gc < cols ? x[gr * cols + gc] : 0.0f;
        ASSERT_EQ(got[block * 512 + r * 32 + c], want)
            << "block " << block << " (" << r << ", " << c << ")";
      }
}

TEST(PipelineGpu, WarpSpecializedRingWithRegisterReallocation) {
  REQUIRE_SM90A();
  RUDNN_SEEDED_RNG(rng);
  const int blocks = 23;  // several passes over the 3-stage ring: every phase parity is used
  std::vector<float> x(static_cast<size_t>(blocks) * 16 * 64);
  for (auto& v : x) v = static_cast<float>(rng.integer(-100, 100));
  std::vector<float> want(64, 0.0f);
  for (size_t i = 0; i < x.size(); ++i) want[i % 64] += x[i];  // exact: small integers
  EXPECT_EQ(ptc::ring_column_sums(x, blocks), want);
}

// ---- GPU: wgmma (sm_90a) ------------------------------------------------------------------------

TEST(WgmmaGpu, SharedOperandsEveryLayoutSwizzleAndN) {
  REQUIRE_SM90A();
  RUDNN_SEEDED_RNG(rng);
  int runs = 0;
  for (bool bf16 : {true, false})
    for (int n : {16, 32, 64, 96, 128, 192, 256})
      for (bool a_mn : {false, true})
        for (bool b_mn : {false, true}) {
          if (!ptc::wgmma_ss_available(bf16, n, a_mn, b_mn)) continue;
          const auto a = random_bits(rng, 64 * 64, bf16);
          const auto b = random_bits(rng, static_cast<size_t>(64) * n, bf16);
          const std::vector<double> expected = matmul(decode(a, bf16), decode(b, bf16), 64, n, 64);
          for (int a_span : {0, 32, 64, 128})
            for (int b_span : {0, 32, 64, 128}) {
              // An MN-major swizzled tile needs its MN extent a multiple of span / 2.
              if (b_mn && b_span > 0 && n % (b_span / 2) != 0) continue;
              SCOPED_TRACE(::testing::Message()
                           << (bf16 ? "bf16" : "f16") << " N=" << n << " A " << (a_mn ? "MN" : "K")
                           << "-major span " << a_span << ", B " << (b_mn ? "MN" : "K")
                           << "-major span " << b_span);
              const std::vector<float> d = ptc::wgmma_ss(bf16, n, a_mn, a_span, b_mn, b_span, a, b);
              EXPECT_LT(rel_error(d, expected), 1e-5);
              ++runs;
            }
        }
  EXPECT_GT(runs, 300);
}

TEST(WgmmaGpu, RegisterAFragments) {
  REQUIRE_SM90A();
  RUDNN_SEEDED_RNG(rng);
  for (bool bf16 : {true, false})
    for (int n : {64, 128, 192, 256})
      for (bool b_mn : {false, true}) {
        if (!ptc::wgmma_rs_available(bf16, n, b_mn)) continue;
        const auto a = random_bits(rng, 64 * 64, bf16);
        const auto b = random_bits(rng, static_cast<size_t>(64) * n, bf16);
        const std::vector<double> expected = matmul(decode(a, bf16), decode(b, bf16), 64, n, 64);
        for (int b_span : {0, 64, 128}) {
          SCOPED_TRACE(::testing::Message() << (bf16 ? "bf16" : "f16") << " N=" << n << " B "
                                            << (b_mn ? "MN" : "K") << "-major span " << b_span);
          EXPECT_LT(rel_error(ptc::wgmma_rs(bf16, n, b_mn, b_span, a, b), expected), 1e-5);
        }
      }
}

TEST(WgmmaGpu, AccumulatorReusedAsAFragment) {
  REQUIRE_SM90A();
  RUDNN_SEEDED_RNG(rng);
  const auto a = random_bits(rng, 64 * 16, true), b = random_bits(rng, 16 * 16, true),
             v = random_bits(rng, 16 * 64, true);
  std::vector<double> s = matmul(decode(a, true), decode(b, true), 64, 16, 16);
  for (auto& x : s) x = bfloat16_bits_to_float(float_to_bfloat16_bits(static_cast<float>(x)));
  const std::vector<double> expected = matmul(s, decode(v, true), 64, 64, 16);
  EXPECT_LT(rel_error(ptc::wgmma_chain(a, b, v), expected), 1e-3);
}

// ---- GPU: the persistent tile scheduler ---------------------------------------------------------

TEST(TileSchedulerGpu, EveryTileOnceWithItsGroup) {
  RUDNN_REQUIRE_CUDA();
  RUDNN_SEEDED_RNG(rng);
  std::vector<std::vector<int>> group_sets = {
      {5}, {0, 0, 3, 0, 7, 0}, {0}, std::vector<int>(1024, 0)};
  group_sets[3][1023] = 9;
  std::vector<int> skewed(300);
  for (auto& c : skewed) c = rng.integer(0, 3) == 0 ? static_cast<int>(rng.integer(0, 40)) : 0;
  group_sets.push_back(skewed);
  for (const auto& counts : group_sets)
    for (int blocks : {1, 7, 132}) {
      SCOPED_TRACE(::testing::Message() << counts.size() << " groups, " << blocks << " blocks");
      const auto walk = ptc::scheduler_walk(counts, blocks);
      int tile = 0;
      for (size_t g = 0; g < counts.size(); ++g)
        for (int local = 0; local < counts[g]; ++local, ++tile) {
          ASSERT_EQ(walk[tile][0], 1) << "tile " << tile << " visits";
          ASSERT_EQ(walk[tile][1], static_cast<int>(g)) << "tile " << tile << " group";
          ASSERT_EQ(walk[tile][2], local) << "tile " << tile << " local index";
        }
      EXPECT_EQ(static_cast<size_t>(tile), walk.size());
    }
}

}  // namespace
}  // namespace rudnn::test
