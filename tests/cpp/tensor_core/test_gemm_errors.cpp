// The GEMM entries' validation, on the CPU: check_gemm / check_grouped_gemm are the argument
// checks the entries run first (no device, no stream), so every argument error is testable
// without a GPU; gemm() itself refuses a default or CPU stream. Pointers are never
// dereferenced by the checks (only compared with null and checked for alignment).
#include <gtest/gtest.h>

#include "gemm/gemm.h"
#include "support/test_support.h"

namespace rudnn::test {
namespace {

using gemm::GroupedDim;
using gemm::Layout;

alignas(256) char g_dummy[256];

gemm::GemmParams valid_dense() {
  gemm::GemmParams p;
  p.dtype = DType::bf16;
  p.m = 16;
  p.n = 24;
  p.k = 32;
  p.a = {g_dummy, Layout::RowMajor, 32};
  p.b = {g_dummy, Layout::ColMajor, 32};
  p.d = g_dummy;
  p.ldd = 24;
  return p;
}

gemm::GroupedGemmParams valid_grouped() {
  gemm::GroupedGemmParams p;
  p.dtype = DType::bf16;
  p.groups = 4;
  p.offsets = reinterpret_cast<const int32_t*>(g_dummy);
  p.m = 64;
  p.n = 24;
  p.k = 32;
  p.a = {g_dummy, Layout::RowMajor, 32};
  p.b = {g_dummy, Layout::ColMajor, 32};
  p.b_group_stride = 24 * 32;
  p.d = g_dummy;
  p.ldd = 24;
  return p;
}

::testing::AssertionResult dense_fails(const gemm::GemmParams& p, ErrorCode code,
                                       std::initializer_list<std::string> fragments = {}) {
  return throws_error([&] { gemm::check_gemm(p); }, code, fragments);
}
::testing::AssertionResult grouped_fails(const gemm::GroupedGemmParams& p, ErrorCode code,
                                         std::initializer_list<std::string> fragments = {}) {
  return throws_error([&] { gemm::check_grouped_gemm(p); }, code, fragments);
}

TEST(GemmErrors, ValidArgumentsPass) {
  EXPECT_NO_THROW(gemm::check_gemm(valid_dense()));
  EXPECT_NO_THROW(gemm::check_grouped_gemm(valid_grouped()));
  auto p = valid_dense();
  p.k = 0;  // K = 0 needs neither A nor B
  p.a.data = nullptr;
  p.b.data = nullptr;
  EXPECT_NO_THROW(gemm::check_gemm(p));
  p = valid_dense();
  p.dtype = DType::f32;
  p.math = gemm::MathMode::Tf32;  // TF32 is an f32 opt-in
  EXPECT_NO_THROW(gemm::check_gemm(p));
  p = valid_dense();
  p.epilogue.out_dtype = DType::f32;  // 16-bit operands, f32 output
  EXPECT_NO_THROW(gemm::check_gemm(p));
}

// A default Stream names no device (the operands are raw pointers): InvalidArgument; a CPU
// stream: DeviceMismatch.
TEST(GemmErrors, StreamMustBeCuda) {
  EXPECT_TRUE(throws_error([] { gemm::gemm(valid_dense(), Stream::cpu()); },
                           ErrorCode::DeviceMismatch, {"gemm", "CUDA stream"}));
  EXPECT_TRUE(throws_error([] { gemm::gemm(valid_dense(), Stream{}); }, ErrorCode::InvalidArgument,
                           {"gemm", "CUDA stream"}));
  EXPECT_TRUE(throws_error([] { gemm::grouped_gemm(valid_grouped(), Stream::cpu()); },
                           ErrorCode::DeviceMismatch, {"grouped_gemm", "CUDA stream"}));
}

TEST(GemmErrors, DtypeAndSizes) {
  auto p = valid_dense();
  p.dtype = DType::i32;
  EXPECT_TRUE(dense_fails(p, ErrorCode::DTypeMismatch));
  p = valid_dense();
  p.epilogue.out_dtype = DType::f16;  // neither the operands' dtype nor f32
  EXPECT_TRUE(dense_fails(p, ErrorCode::DTypeMismatch));
  p = valid_dense();
  p.m = -1;
  EXPECT_TRUE(dense_fails(p, ErrorCode::InvalidArgument));
  p = valid_dense();
  p.k = int64_t{1} << 31;
  EXPECT_TRUE(dense_fails(p, ErrorCode::InvalidArgument));
  p = valid_dense();
  p.math = gemm::MathMode::Tf32;  // TF32 with 16-bit operands
  EXPECT_TRUE(dense_fails(p, ErrorCode::InvalidArgument));
}

TEST(GemmErrors, LeadingDimensionsAndPointers) {
  auto p = valid_dense();
  p.a.ld = 31;  // row-major A: ld >= K
  EXPECT_TRUE(dense_fails(p, ErrorCode::InvalidArgument));
  p = valid_dense();
  p.a.layout = Layout::ColMajor;
  p.a.ld = 15;  // column-major A: ld >= M
  EXPECT_TRUE(dense_fails(p, ErrorCode::InvalidArgument));
  p.a.ld = 16;
  EXPECT_NO_THROW(gemm::check_gemm(p));
  p = valid_dense();
  p.b.layout = Layout::RowMajor;
  p.b.ld = 23;  // row-major B: ld >= N
  EXPECT_TRUE(dense_fails(p, ErrorCode::InvalidArgument));
  p = valid_dense();
  p.b.data = nullptr;
  EXPECT_TRUE(dense_fails(p, ErrorCode::InvalidArgument));
  p = valid_dense();
  p.a.data = g_dummy + 1;  // a bf16 operand at an odd address
  EXPECT_TRUE(dense_fails(p, ErrorCode::InvalidArgument));
  p = valid_dense();
  p.d = nullptr;
  EXPECT_TRUE(dense_fails(p, ErrorCode::InvalidArgument));
  p = valid_dense();
  p.ldd = 23;
  EXPECT_TRUE(dense_fails(p, ErrorCode::InvalidArgument));
}

TEST(GemmErrors, Epilogue) {
  auto p = valid_dense();
  p.epilogue.beta = 1.0f;  // C needed
  EXPECT_TRUE(dense_fails(p, ErrorCode::InvalidArgument));
  p.epilogue.c = g_dummy;
  p.epilogue.ldc = 8;  // < N
  EXPECT_TRUE(dense_fails(p, ErrorCode::InvalidArgument));
  p.epilogue.ldc = 24;
  EXPECT_NO_THROW(gemm::check_gemm(p));
}

TEST(GemmErrors, ForcedTileOrPath) {
  auto p = valid_dense();
  p.tuning.hopper_block_n = 100;  // not a built tile width
  p.path = gemm::Path::Hopper;
  EXPECT_TRUE(dense_fails(p, ErrorCode::InvalidArgument));
  p = valid_dense();
  p.dtype = DType::f32;
  p.path = gemm::Path::Hopper;  // the wgmma path takes bf16/f16 only
  EXPECT_TRUE(dense_fails(p, ErrorCode::InvalidArgument));
}

// The ping-pong schedule's tuning: tile rows 64 or 128, only with a schedule that has them;
// clusters of two with either schedule. Each rule is checked alone, then the valid
// combinations pass.
TEST(GemmErrors, PingpongTuning) {
  using gemm::HopperSchedule;
  auto p = valid_dense();
  p.tuning.hopper_block_m = 96;
  EXPECT_TRUE(dense_fails(p, ErrorCode::InvalidArgument, {"hopper_block_m = 96", "64 or 128"}));
  p = valid_dense();
  p.tuning.hopper_schedule = HopperSchedule::Cooperative;
  p.tuning.hopper_block_m = 64;
  EXPECT_TRUE(dense_fails(p, ErrorCode::InvalidArgument, {"cooperative"}));
  p = valid_dense();
  p.tuning.hopper_cluster = 3;
  EXPECT_TRUE(dense_fails(p, ErrorCode::InvalidArgument, {"hopper_cluster = 3", "0, 1 or 2"}));
  p = valid_dense();
  p.tuning.hopper_schedule = static_cast<HopperSchedule>(7);
  EXPECT_TRUE(dense_fails(p, ErrorCode::InvalidArgument, {"hopper_schedule = 7"}));
  auto g = valid_grouped();
  g.tuning.hopper_block_m = 32;
  EXPECT_TRUE(grouped_fails(g, ErrorCode::InvalidArgument, {"hopper_block_m = 32"}));

  p = valid_dense();
  p.tuning.hopper_schedule = HopperSchedule::Pingpong;
  p.tuning.hopper_block_m = 64;
  p.tuning.hopper_block_n = 256;
  p.tuning.hopper_cluster = 1;
  EXPECT_NO_THROW(gemm::check_gemm(p));
  p.tuning.hopper_cluster = 2;  // ping-pong in pairs
  EXPECT_NO_THROW(gemm::check_gemm(p));
  p.tuning.hopper_block_m = 128;  // Auto with tile rows: the ping-pong schedule, in pairs
  p.tuning.hopper_block_n = 0;
  p.tuning.hopper_schedule = HopperSchedule::Auto;
  EXPECT_NO_THROW(gemm::check_gemm(p));
  p.tuning.hopper_schedule = HopperSchedule::Cooperative;
  p.tuning.hopper_block_m = 0;
  p.tuning.hopper_cluster = 2;
  EXPECT_NO_THROW(gemm::check_gemm(p));
}

// Split K: 0 .. 16 splits, dense only, on the ping-pong schedule (not with the cooperative
// schedule or clusters); a workspace must be 16-byte aligned.
TEST(GemmErrors, SplitKTuning) {
  using gemm::HopperSchedule;
  auto p = valid_dense();
  p.tuning.hopper_splits = 17;
  EXPECT_TRUE(dense_fails(p, ErrorCode::InvalidArgument, {"hopper_splits = 17", "0 .. 16"}));
  p.tuning.hopper_splits = -1;
  EXPECT_TRUE(dense_fails(p, ErrorCode::InvalidArgument, {"hopper_splits = -1"}));
  p = valid_dense();
  p.tuning.hopper_splits = 2;
  p.tuning.hopper_schedule = HopperSchedule::Cooperative;
  EXPECT_TRUE(dense_fails(p, ErrorCode::InvalidArgument, {"cooperative"}));
  p = valid_dense();
  p.tuning.hopper_splits = 2;
  p.tuning.hopper_cluster = 2;
  EXPECT_TRUE(dense_fails(p, ErrorCode::InvalidArgument, {"hopper_splits = 2", "single blocks"}));
  auto g = valid_grouped();
  g.tuning.hopper_splits = 2;
  EXPECT_TRUE(grouped_fails(g, ErrorCode::InvalidArgument, {"dense GEMM only"}));
  g.tuning.hopper_splits = 1;
  EXPECT_NO_THROW(gemm::check_grouped_gemm(g));
  p = valid_dense();
  p.workspace = g_dummy + 8;
  EXPECT_TRUE(dense_fails(p, ErrorCode::InvalidArgument, {"workspace", "16-byte"}));
  p.workspace = g_dummy;
  p.workspace_bytes = 16;
  p.tuning.hopper_splits = 16;
  p.tuning.hopper_schedule = HopperSchedule::Pingpong;
  EXPECT_NO_THROW(gemm::check_gemm(p));
  // The workspace query validates as check_gemm does; a CPU device runs no split K.
  EXPECT_EQ(gemm::gemm_workspace_bytes(p, Device::cpu()), 0u);
  p.tuning.hopper_splits = 17;
  EXPECT_TRUE(throws_error([&] { (void)gemm::gemm_workspace_bytes(p, Device::cpu()); },
                           ErrorCode::InvalidArgument, {"hopper_splits = 17"}));
}

// What the build offers: the ping-pong tiles only for the forward layout (row-major A,
// column-major B), bf16 with every tile of kHopperPingpongTiles, f16 with the first two.
TEST(GemmErrors, PingpongTilesBuilt) {
  EXPECT_EQ(gemm::hopper_pingpong_tiles(DType::bf16, Layout::RowMajor, Layout::ColMajor), 0b111);
  EXPECT_EQ(gemm::hopper_pingpong_tiles(DType::f16, Layout::RowMajor, Layout::ColMajor), 0b011);
  EXPECT_EQ(gemm::hopper_pingpong_tiles(DType::bf16, Layout::ColMajor, Layout::RowMajor), 0);
  EXPECT_EQ(gemm::hopper_pingpong_tiles(DType::f32, Layout::RowMajor, Layout::ColMajor), 0);
}

TEST(GemmErrors, Grouped) {
  auto p = valid_grouped();
  p.groups = 0;
  EXPECT_TRUE(grouped_fails(p, ErrorCode::InvalidArgument));
  p.groups = gemm::kMaxGroups + 1;
  EXPECT_TRUE(grouped_fails(p, ErrorCode::InvalidArgument));
  p = valid_grouped();
  p.offsets = nullptr;
  EXPECT_TRUE(grouped_fails(p, ErrorCode::InvalidArgument));
  p = valid_grouped();
  p.b_group_stride = -8;
  EXPECT_TRUE(grouped_fails(p, ErrorCode::InvalidArgument));
  p = valid_grouped();
  p.grouped = GroupedDim::K;
  p.m = 16;
  p.a = {g_dummy, Layout::ColMajor, 16};
  p.b = {g_dummy, Layout::RowMajor, 24};
  p.d_group_stride = 16 * 24 - 1;  // the groups' outputs would overlap
  EXPECT_TRUE(grouped_fails(p, ErrorCode::InvalidArgument));
  p.d_group_stride = 16 * 24;
  EXPECT_NO_THROW(gemm::check_grouped_gemm(p));
}

}  // namespace
}  // namespace rudnn::test
