// Dense and grouped GEMM on tensor cores: internal to the library (the tests, the benchmark
// and the families call it; no public header). Raw device pointers and a CUDA Stream; the
// entry points validate every argument they can see (not the contents of device memory) and
// throw rudnn::Error, never crash for a bad argument. CUDA builds only.
//
// Operands. A is M x K, B is K x N (per group), D and C are M x N, all of one floating dtype
// for A and B (f32, f16, bf16) and one output dtype for D, C and bias (the same, or f32).
// Layout of A and B: RowMajor means element (r, c) of the matrix as written (A: r < M, c < K;
// B: r < K, c < N) at data[r * ld + c]; ColMajor at data[c * ld + r]. So a torch Linear weight
// W [N, K] (row-major) is B = W^T as ColMajor with ld = K. D and C are row-major (ldd, ldc).
//
// Epilogue, per element, FP32:
//   D[m][n] = act(alpha * row_scale[m] * col_scale[n] * (A.B)[m][n] + bias[n] + beta * C[m][n])
// each factor or term present only when given (row_scale / col_scale: f32 vectors; bias: out
// dtype [N]; C read only when beta != 0; C may be D itself, same ld, for D += A.B).
//
// Precision: products in FP32 accumulators; bf16/f16 inputs are exact in them. f32 inputs
// run on CUDA cores in FP32 (MathMode::Default) or, opt-in, on tensor cores rounded to TF32
// (MathMode::Tf32: about 1e-3 relative error, as torch's allow_tf32).
//
// Paths (the entry picks the fastest usable; `path` forces one, for tests and benchmarks):
//   Hopper   sm_90a: persistent, warp-specialised (a TMA producer warpgroup, two wgmma
//            consumer warpgroups, setmaxnreg), 128 x BN x 64 tiles, BN 128/192/256, every
//            layout of A and B, optionally clusters of two blocks multicasting B; or, opt-in
//            (Tuning), the ping-pong schedule (one tile per consumer warpgroup) with optional
//            deterministic split K, forward layout only. Needs bf16/f16, a
//            device of compute capability 9.0, the library built for sm_90a, leading dimensions
//            (and grouped-M B's group stride) multiples of 8 elements and 16-byte aligned A and B
//            (TMA's rules), K >= 1, and a grouped axis that is not contiguous in memory (TMA boxes
//            start on 16 bytes along the contiguous axis; group starts are device data): grouped
//            M with a row-major A, grouped K with a column-major A and a row-major B (the MoE
//            layouts); other grouped layouts run MmaSync.
//   MmaSync  sm_80+: mma.sync m16n8k16 (bf16/f16) or m16n8k8 (TF32) fed by ldmatrix / shared
//            loads, 3-stage cp.async pipeline, 128 x 128 tiles, persistent, every layout, any
//            sizes and strides (unaligned operands are loaded element-wise).
//   Simt     FP32 on CUDA cores (f32 without TF32).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>

#include "rudnn/device.h"
#include "rudnn/dtype.h"
#include "rudnn/stream.h"

namespace rudnn::gemm {

enum class Layout { RowMajor, ColMajor };
enum class Activation { None, Relu, Silu, Gelu };  // Gelu: the tanh approximation
enum class MathMode { Default, Tf32 };
enum class Path { Auto, Hopper, MmaSync, Simt };

const char* path_name(Path path);

struct Operand {
  const void* data = nullptr;
  Layout layout = Layout::RowMajor;
  int64_t ld = 0;  // leading dimension, elements
};

struct Epilogue {
  float alpha = 1.0f;
  float beta = 0.0f;
  const void* c = nullptr;  // out dtype, row-major (ldc); read only when beta != 0
  int64_t ldc = 0;
  const void* bias = nullptr;        // [N], out dtype
  const float* row_scale = nullptr;  // one per row of D (grouped M: of all groups' rows)
  const float* col_scale = nullptr;  // [N]
  Activation activation = Activation::None;
  std::optional<DType> out_dtype;  // D, C, bias: the operands' dtype (unset) or f32
};

// The Hopper kernel's schedule of its two consumer warpgroups.
//   Cooperative  both share one 128 x BN tile (64 rows each) and run its epilogue together,
//                the tensor cores idle meanwhile.
//   Pingpong     each owns a BM x BN tile (hopper_pingpong_tiles) and their mainloops take
//                turns, so that one's epilogue runs under the other's MMAs.
enum class HopperSchedule { Auto, Cooperative, Pingpong };

// Launch choices a caller may force (tests, benchmarks); 0 / Auto = the entry's choice.
struct Tuning {
  // Cooperative: 128, 192 or 256, among those built for the layouts (hopper_block_ns);
  // Pingpong: the tile's N (hopper_pingpong_tiles).
  int hopper_block_n = 0;
  // Hopper: 1 = one block per 128 x BN tile; 2 = clusters of two blocks along M, each loading
  // half of the pair's common B tile and multicasting it to both (B crosses L2 once per pair).
  // Either schedule; not with split K.
  int hopper_cluster = 0;
  HopperSchedule hopper_schedule = HopperSchedule::Auto;
  // Pingpong: 64 or 128 rows per tile (implies the ping-pong schedule under Auto).
  int hopper_block_m = 0;
  // Split K, dense GEMM on the ping-pong schedule (implies it under Auto): 1 = none, 2 .. 16
  // splits of each tile's k-blocks (at most one per k-block: more are clamped), summed in a
  // fixed order (deterministic). Memory: a stream-ordered workspace of tiles x (BM x BN x 4 +
  // 8) bytes for the call (gemm_workspace_bytes), freed on the stream after the kernel.
  int hopper_splits = 0;
  // Cooperative schedule: store D from registers even where the TMA-store epilogue applies
  // (dense, D in the operands' dtype, 16-byte aligned rows, N a multiple of 8), for
  // comparisons.
  bool hopper_direct_store = false;
};

// D[M, N] = epilogue(A[M, K] . B[K, N]). M, N, K >= 0 and < 2^31; K = 0 gives the epilogue of
// zeros. D must not overlap A, B, bias or the scales, nor C unless C is D with ldc = ldd (not
// checked: internal API). Memory: none, except with split K (Tuning::hopper_splits): the
// workspace given, or one allocated for the call.
// Errors: DTypeMismatch (dtype not f32/f16/bf16, out dtype neither dtype nor f32),
// InvalidArgument (negative or too large sizes, leading dimensions below the contiguous
// extent, null or misaligned pointers for a non-empty product, TF32 with 16-bit operands, a
// forced path or tile these arguments cannot take, inconsistent tuning (tile rows or split K
// with the cooperative schedule, clusters with split K), a misaligned or too small
// workspace, a default or CPU stream); OutOfMemory when a split-K call allocates its
// workspace and cannot.
struct GemmParams {
  DType dtype = DType::bf16;
  int64_t m = 0, n = 0, k = 0;
  Operand a, b;
  void* d = nullptr;
  int64_t ldd = 0;
  Epilogue epilogue;
  MathMode math = MathMode::Default;
  Path path = Path::Auto;
  Tuning tuning;
  // Device memory for a split-K call (gemm_workspace_bytes; 16-byte aligned, not shared with
  // work running concurrently). Null: such a call allocates its own on the stream, which a
  // CUDA graph capture cannot record; a call that needs none ignores it.
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
};
void gemm(const GemmParams& p, const Stream& stream);

// The device workspace gemm(p, stream) allocates when the stream is on `device` (0 when the
// call splits no K: every call but Hopper split-K ones). Validates like check_gemm.
size_t gemm_workspace_bytes(const GemmParams& p, Device device);

// Grouped GEMM: G groups sharing N, one persistent launch over all groups' tiles. The group
// boundaries are offsets[0 .. G] (int32, in device memory, non-decreasing, offsets[0] >= 0,
// offsets[G] <= the extent the buffers hold): only the kernel reads them, so a call never
// synchronises with the host and can be captured in a CUDA graph; an empty group owns no tile
// (grouped M) or only its output's epilogue (grouped K). Offsets outside [0, extent] are
// clamped into it (no access outside the buffers), but such a call's results are undefined.
//
//   GroupedDim::M  (MoE forward and input gradient): group g is rows [offsets[g],
//     offsets[g+1]) of A (m x k) and of D (m x n); its B is b.data + g * b_group_stride (k x n
//     in b's layout).
//       forward, weights W [E, N, K] (row-major): B = ColMajor, ld = K, group stride N * K;
//       input gradient dX = dY . W_g, same W: B = RowMajor (k = N, n = K), ld = K, stride N * K.
//   GroupedDim::K  (weight gradient: a reduction over each group's rows): group g multiplies
//     A's columns and B's rows [offsets[g], offsets[g+1]) (K_g of them; k = the rows held)
//     into its own D_g = d + g * d_group_stride (m x n), C_g = c + g * c_group_stride.
//       dW_g [N, K] = dY_g^T . X_g with dY [T, N], X [T, K] row-major: A = dY as ColMajor
//       (m = N, ld = N), B = X RowMajor (n = K, ld = K), D = dW [E, N, K] (ldd = K, group
//       stride N * K). An empty group gives D_g = epilogue of zeros.
// Errors: as gemm, plus InvalidArgument for groups outside [1, kMaxGroups], a null offsets,
// a negative group stride, or grouped-K outputs that overlap (d_group_stride < m * ldd).
enum class GroupedDim { M, K };
struct GroupedGemmParams {
  DType dtype = DType::bf16;
  GroupedDim grouped = GroupedDim::M;
  int64_t groups = 0;
  const int32_t* offsets = nullptr;  // device, groups + 1 entries
  int64_t m = 0;  // GroupedDim::M: rows A and D hold; GroupedDim::K: M of each group
  int64_t n = 0;
  int64_t k = 0;  // GroupedDim::M: K of each group; GroupedDim::K: rows of B (columns of A) held
  Operand a, b;
  int64_t b_group_stride = 0;  // GroupedDim::M, elements
  void* d = nullptr;
  int64_t ldd = 0;
  int64_t d_group_stride = 0;  // GroupedDim::K, elements
  int64_t c_group_stride = 0;  // GroupedDim::K, elements
  Epilogue epilogue;
  MathMode math = MathMode::Default;
  Path path = Path::Auto;
  Tuning tuning;
};
void grouped_gemm(const GroupedGemmParams& p, const Stream& stream);

constexpr int64_t kMaxGroups = 1024;

// The argument checks of gemm / grouped_gemm alone: no device, no stream (what the entries
// run first).
void check_gemm(const GemmParams& p);
void check_grouped_gemm(const GroupedGemmParams& p);

// Whether the Hopper path can run on `device` (compute capability 9.0 and the library built
// for sm_90a).
bool hopper_available(Device device);

// The Hopper tile widths built for a dtype (bf16/f16) and the layouts of A and B, as a bit
// set: bit 0 = 128, bit 1 = 192, bit 2 = 256 (0: no Hopper kernel for them).
int hopper_block_ns(DType dtype, Layout a, Layout b);

// The ping-pong tiles built for a dtype and the layouts of A and B, as a bit set over
// kHopperPingpongTiles (0: no ping-pong kernel for them; those layouts run Cooperative).
struct HopperTile {
  int block_m, block_n;
};
inline constexpr HopperTile kHopperPingpongTiles[] = {{128, 128}, {64, 256}, {64, 192}};
int hopper_pingpong_tiles(DType dtype, Layout a, Layout b);

}  // namespace rudnn::gemm
