// The GEMM entries: validation (once, here), the choice of path and tile, and the launch.
#include "gemm/gemm.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <cstdint>
#include <iterator>
#include <type_traits>

#include "core/check.h"
#include "cuda/device_info.h"
#include "gemm/launch.h"
#include "rudnn/tensor.h"

namespace rudnn::gemm {
namespace {

using detail::check;
using kernels::GemmArgs;

// The Hopper path's default cluster choice (Tuning::hopper_cluster = 0): clusters of two along
// M when the groups (or the dense problem) hold at least this many rows on average, else one
// block per tile. Above any M for now: since the epilogue stopped thrashing the instruction
// cache, single blocks run 1.5-1.6x faster than pairs on every measured shape (RESULTS.md,
// round 31); pairs stay available through Tuning::hopper_cluster = 2.
constexpr int64_t kClusterMinRows = int64_t{1} << 62;

const char* layout_name(Layout l) { return l == Layout::RowMajor ? "row-major" : "column-major"; }

bool aligned(const void* p, size_t bytes) { return reinterpret_cast<uintptr_t>(p) % bytes == 0; }

DType out_dtype_of(DType dtype, const Epilogue& e) { return e.out_dtype.value_or(dtype); }

// Element strides (row, column) of an operand whose logical matrix is rows x cols.
void strides_of(const Operand& op, int64_t& row_stride, int64_t& col_stride) {
  row_stride = op.layout == Layout::RowMajor ? op.ld : 1;
  col_stride = op.layout == Layout::RowMajor ? 1 : op.ld;
}

void check_pointer(const char* op, const char* name, const void* p, bool needed, DType dtype) {
  check(!needed || p != nullptr, ErrorCode::InvalidArgument, op, ": ", name,
        " is null for a non-empty product");
  check(p == nullptr || aligned(p, dtype_size(dtype)), ErrorCode::InvalidArgument, op, ": ", name,
        " is not aligned to its ", dtype_name(dtype), " elements");
}

// The leading dimension must cover the contiguous extent of each row (or column).
void check_operand(const char* op, const char* name, const Operand& o, int64_t rows, int64_t cols,
                   DType dtype) {
  check_pointer(op, name, o.data, rows > 0 && cols > 0, dtype);
  const int64_t contiguous = o.layout == Layout::RowMajor ? cols : rows;
  const int64_t least = contiguous > 1 ? contiguous : 1;
  check(o.ld >= least, ErrorCode::InvalidArgument, op, ": ", name, " (", layout_name(o.layout),
        ", ", rows, " x ", cols, ") has leading dimension ", o.ld, "; expected >= ", least);
}

// Everything both entries check; `p` seen as grouped (dense: one group, no offsets).
void check_common(const char* op, const GroupedGemmParams& p, bool dense) {
  check(p.dtype == DType::f32 || p.dtype == DType::f16 || p.dtype == DType::bf16,
        ErrorCode::DTypeMismatch, op, ": dtype ", dtype_name(p.dtype),
        "; expected f32, f16 or bf16");
  const DType out = out_dtype_of(p.dtype, p.epilogue);
  check(out == p.dtype || out == DType::f32, ErrorCode::DTypeMismatch, op, ": out dtype ",
        dtype_name(out), "; expected ", dtype_name(p.dtype), " (the operands') or f32");
  check(p.m >= 0 && p.n >= 0 && p.k >= 0, ErrorCode::InvalidArgument, op, ": sizes M = ", p.m,
        ", N = ", p.n, ", K = ", p.k, "; expected >= 0");
  constexpr int64_t kLimit = int64_t{1} << 31;
  check(p.m < kLimit && p.n < kLimit && p.k < kLimit, ErrorCode::InvalidArgument, op,
        ": sizes M = ", p.m, ", N = ", p.n, ", K = ", p.k, "; expected < 2^31");
  check(p.math == MathMode::Default || p.dtype == DType::f32, ErrorCode::InvalidArgument, op,
        ": TF32 math applies to f32 operands only (dtype ", dtype_name(p.dtype), ")");
  switch (p.path) {
    case Path::Auto:
      break;
    case Path::Hopper:
      check(p.dtype != DType::f32, ErrorCode::InvalidArgument, op,
            ": Path::Hopper takes bf16 or f16 operands, not f32");
      break;
    case Path::MmaSync:
      check(p.dtype != DType::f32 || p.math == MathMode::Tf32, ErrorCode::InvalidArgument, op,
            ": Path::MmaSync takes f32 operands with MathMode::Tf32 only");
      break;
    case Path::Simt:
      check(p.dtype == DType::f32 && p.math == MathMode::Default, ErrorCode::InvalidArgument, op,
            ": Path::Simt takes f32 operands without TF32 only");
      break;
  }
  const int bn = p.tuning.hopper_block_n;
  check(bn == 0 || bn == 128 || bn == 192 || bn == 256, ErrorCode::InvalidArgument, op,
        ": tuning.hopper_block_n = ", bn, "; expected 0, 128, 192 or 256");
  const int cl = p.tuning.hopper_cluster;
  check(cl >= 0 && cl <= 2, ErrorCode::InvalidArgument, op, ": tuning.hopper_cluster = ", cl,
        "; expected 0, 1 or 2");
  const HopperSchedule schedule = p.tuning.hopper_schedule;
  check(schedule == HopperSchedule::Auto || schedule == HopperSchedule::Cooperative ||
            schedule == HopperSchedule::Pingpong,
        ErrorCode::InvalidArgument, op, ": tuning.hopper_schedule = ", static_cast<int>(schedule),
        "; expected Auto, Cooperative or Pingpong");
  const int bm = p.tuning.hopper_block_m;
  check(bm == 0 || bm == 64 || bm == 128, ErrorCode::InvalidArgument, op,
        ": tuning.hopper_block_m = ", bm, "; expected 0, 64 or 128");
  check(bm == 0 || schedule != HopperSchedule::Cooperative, ErrorCode::InvalidArgument, op,
        ": tuning.hopper_block_m = ", bm,
        " with the cooperative schedule; expected 0 (its tiles are 128 rows)");
  const int splits = p.tuning.hopper_splits;
  check(splits >= 0 && splits <= 16, ErrorCode::InvalidArgument, op,
        ": tuning.hopper_splits = ", splits, "; expected 0 .. 16");
  check(splits <= 1 || dense, ErrorCode::InvalidArgument, op, ": tuning.hopper_splits = ", splits,
        "; split K applies to the dense GEMM only (expected 0 or 1)");
  check(splits <= 1 || (schedule != HopperSchedule::Cooperative && cl != 2),
        ErrorCode::InvalidArgument, op, ": tuning.hopper_splits = ", splits,
        " with the cooperative schedule or clusters; split K runs on the ping-pong schedule "
        "with single blocks");
  if (!dense) {
    check(p.groups >= 1 && p.groups <= kMaxGroups, ErrorCode::InvalidArgument, op,
          ": groups = ", p.groups, "; expected 1 .. ", kMaxGroups);
    check(p.offsets != nullptr, ErrorCode::InvalidArgument, op, ": offsets is null");
    check(aligned(p.offsets, 4), ErrorCode::InvalidArgument, op,
          ": offsets is not aligned to int32");
  }
  const bool grouped_k = !dense && p.grouped == GroupedDim::K;
  check_operand(op, "A", p.a, p.m, p.k, p.dtype);
  check_operand(op, "B", p.b, p.k, p.n, p.dtype);
  const bool output = p.m > 0 && p.n > 0;
  check_pointer(op, "D", p.d, output, out);
  const int64_t least_ld = p.n > 1 ? p.n : 1;
  check(p.ldd >= least_ld, ErrorCode::InvalidArgument, op, ": ldd = ", p.ldd,
        "; expected >= N = ", least_ld);
  const Epilogue& e = p.epilogue;
  const bool reads_c = e.beta != 0.0f;
  check_pointer(op, "C", reads_c ? e.c : nullptr, reads_c && output, out);
  check(!reads_c || e.ldc >= least_ld, ErrorCode::InvalidArgument, op, ": ldc = ", e.ldc,
        "; expected >= N = ", least_ld, " (beta = ", e.beta, " reads C)");
  check(!(reads_c && e.c == p.d && p.d != nullptr) || e.ldc == p.ldd, ErrorCode::InvalidArgument,
        op, ": C is D with ldc = ", e.ldc, " != ldd = ", p.ldd,
        "; expected the same leading dimension");
  check_pointer(op, "bias", e.bias, false, out);
  check_pointer(op, "row_scale", e.row_scale, false, DType::f32);
  check_pointer(op, "col_scale", e.col_scale, false, DType::f32);
  if (!dense && !grouped_k)
    check(p.b_group_stride >= 0, ErrorCode::InvalidArgument, op,
          ": b_group_stride = ", p.b_group_stride, "; expected >= 0");
  if (grouped_k) {
    check(p.groups == 1 || p.d_group_stride >= p.m * p.ldd, ErrorCode::InvalidArgument, op,
          ": d_group_stride = ", p.d_group_stride,
          " makes the groups' outputs overlap; expected >= M * ldd = ", p.m * p.ldd);
    check(p.c_group_stride >= 0, ErrorCode::InvalidArgument, op,
          ": c_group_stride = ", p.c_group_stride, "; expected >= 0");
  }
  // Tile indices are 32-bit in the kernels: bound the tiles of the smallest tile (64 x 64).
  GemmArgs bound{};
  bound.m = p.m;
  bound.n = p.n;
  bound.groups = dense ? 1 : static_cast<int>(p.groups);
  bound.offsets = dense ? nullptr : p.offsets;
  bound.grouped_k = grouped_k;
  check(kernels::tiles_upper_bound(bound, 64, 64) < (int64_t{1} << 30), ErrorCode::InvalidArgument,
        op, ": the output of M = ", p.m, ", N = ", p.n, dense ? "" : " (per group)",
        " is too large for one launch");
}

GroupedGemmParams as_grouped(const GemmParams& p) {
  GroupedGemmParams g;
  g.dtype = p.dtype;
  g.groups = 1;
  g.m = p.m;
  g.n = p.n;
  g.k = p.k;
  g.a = p.a;
  g.b = p.b;
  g.d = p.d;
  g.ldd = p.ldd;
  g.epilogue = p.epilogue;
  g.math = p.math;
  g.path = p.path;
  g.tuning = p.tuning;
  return g;
}

// Estimated time of a tile width on a persistent grid of `sms` blocks: waves of tiles, each
// tile costing about its width plus a fixed share (A's loads, the epilogue, the pipeline fill).
int pick_block_n(int allowed, int64_t m_tiles, int64_t n, int sms) {
  int best = 0;
  int64_t best_cost = INT64_MAX;
  for (int bn : {256, 192, 128}) {
    if (!(allowed & kernels::block_n_bit(bn))) continue;
    const int64_t tiles = m_tiles * ((n + bn - 1) / bn);
    const int64_t waves = (tiles + sms - 1) / sms;
    const int64_t cost = waves * (bn + 64);
    if (cost < best_cost) {
      best_cost = cost;
      best = bn;
    }
  }
  return best;
}

// The ping-pong tile (index into kHopperPingpongTiles) among `allowed` that matches the forced
// sizes (0: any) at the least estimated time, or -1. The estimate: waves of tiles on `sms`
// SMs (a block's tiles run one after another on the tensor cores, whichever consumer owns
// them), each tile costing its area plus its operand loads (which favour square tiles).
int pick_pingpong_tile(int allowed, int forced_m, int forced_n, int64_t rows, int64_t groups,
                       int64_t n, int sms) {
  int best = -1;
  int64_t best_cost = INT64_MAX;
  for (int i = 0; i < static_cast<int>(std::size(kHopperPingpongTiles)); ++i) {
    const HopperTile t = kHopperPingpongTiles[i];
    if (!(allowed & (1 << i))) continue;
    if ((forced_m != 0 && t.block_m != forced_m) || (forced_n != 0 && t.block_n != forced_n))
      continue;
    const int64_t m_tiles = groups * (((rows + groups - 1) / groups + t.block_m - 1) / t.block_m);
    const int64_t tiles = m_tiles * ((n + t.block_n - 1) / t.block_n);
    const int64_t waves = (tiles + sms - 1) / sms;
    const int64_t cost = waves * (int64_t{t.block_m} * t.block_n + 32 * (t.block_m + t.block_n));
    if (cost < best_cost) {
      best_cost = cost;
      best = i;
    }
  }
  return best;
}

template <class T>
void launch_pingpong(int tile, bool a_k_major, bool b_k_major, const GemmArgs& args,
                     const kernels::LaunchSite& site) {
  if (a_k_major && b_k_major) {
    if (tile == 0) return kernels::run_hopper_pingpong<T, 128, 128, true, true>(args, site);
    if (tile == 1) return kernels::run_hopper_pingpong<T, 64, 256, true, true>(args, site);
    if constexpr (std::is_same_v<T, __nv_bfloat16>) {
      if (tile == 2) return kernels::run_hopper_pingpong<T, 64, 192, true, true>(args, site);
    }
  }
  detail::fail(ErrorCode::InvalidArgument, detail::cat("gemm: no ping-pong Hopper kernel of tile ",
                                                       tile, " for these layouts"));
}

template <class T, bool kAK, bool kBK>
void launch_hopper_layout(int block_n, const GemmArgs& args, const kernels::LaunchSite& site) {
  constexpr int kAllowed = kernels::hopper_instances(std::is_same_v<T, __nv_bfloat16>, kAK, kBK);
  if constexpr ((kAllowed & 4) != 0) {
    if (block_n == 256) return kernels::run_hopper<T, 256, kAK, kBK>(args, site);
  }
  if constexpr ((kAllowed & 2) != 0) {
    if (block_n == 192) return kernels::run_hopper<T, 192, kAK, kBK>(args, site);
  }
  if constexpr ((kAllowed & 1) != 0) {
    if (block_n == 128) return kernels::run_hopper<T, 128, kAK, kBK>(args, site);
  }
  detail::fail(ErrorCode::InvalidArgument,
               detail::cat("gemm: no Hopper kernel of tile width ", block_n, " for these layouts"));
}

template <class T>
void launch_hopper(int block_n, bool a_k_major, bool b_k_major, const GemmArgs& args,
                   const kernels::LaunchSite& site) {
  if (a_k_major && b_k_major) return launch_hopper_layout<T, true, true>(block_n, args, site);
  if (a_k_major) return launch_hopper_layout<T, true, false>(block_n, args, site);
  if (b_k_major) return launch_hopper_layout<T, false, true>(block_n, args, site);
  return launch_hopper_layout<T, false, false>(block_n, args, site);
}

template <class T>
void launch_mma_sync(const GemmArgs& args, Layout a, Layout b, bool a_vector, bool b_vector,
                     const kernels::LaunchSite& site) {
  const bool ar = a == Layout::RowMajor, br = b == Layout::RowMajor;
  if (ar && br)
    kernels::run_mma_sync<T, true, true>(args, a_vector, b_vector, site);
  else if (ar)
    kernels::run_mma_sync<T, true, false>(args, a_vector, b_vector, site);
  else if (br)
    kernels::run_mma_sync<T, false, true>(args, a_vector, b_vector, site);
  else
    kernels::run_mma_sync<T, false, false>(args, a_vector, b_vector, site);
}

// 16-byte copies need the contiguous rows' starts aligned: base and leading dimension.
bool vector_loads(const Operand& o, DType dtype) {
  const int64_t per16 = 16 / static_cast<int64_t>(dtype_size(dtype));
  return aligned(o.data, 16) && o.ld % per16 == 0;
}

// A group's operands start at offsets read on the device, so 16-byte copies also need every
// group start aligned: the group offset must move along a strided dimension (a multiple of
// ld) or by the group stride, never along the contiguous one.
void vector_flags(const GroupedGemmParams& p, bool dense, bool& a_vector, bool& b_vector) {
  a_vector = vector_loads(p.a, p.dtype);
  b_vector = vector_loads(p.b, p.dtype);
  if (dense) return;
  const int64_t per16 = 16 / static_cast<int64_t>(dtype_size(p.dtype));
  if (p.grouped == GroupedDim::K) {
    a_vector = a_vector && p.a.layout == Layout::ColMajor;  // A(m, k0 + k): k strided
    b_vector = b_vector && p.b.layout == Layout::RowMajor;  // B(k0 + k, n): k strided
  } else {
    a_vector = a_vector && p.a.layout == Layout::RowMajor;  // A(m0 + m, k): m strided
    b_vector = b_vector && p.b_group_stride % per16 == 0;
  }
}

// The Hopper kernel's requirements beyond the device (gemm.h), or why not.
const char* hopper_refusal(const GroupedGemmParams& p, bool dense) {
  if (p.dtype == DType::f32) return "f32 operands";
  if (p.k == 0) return "K = 0";
  if (p.a.ld % 8 != 0 || p.b.ld % 8 != 0) return "leading dimensions not multiples of 8";
  if (!aligned(p.a.data, 16) || !aligned(p.b.data, 16)) return "A or B not 16-byte aligned";
  // TMA boxes must start on a 16-byte boundary along an operand's contiguous axis (a box at an
  // unaligned start is an illegal instruction, not an error code). Group starts live on the
  // device, so a grouped axis that is contiguous in memory cannot be checked: those layouts
  // go to MmaSync.
  if (!dense && p.grouped == GroupedDim::M && p.a.layout == Layout::ColMajor)
    return "grouped M with a column-major A (the group starts would be TMA box starts along "
           "A's contiguous axis)";
  if (!dense && p.grouped == GroupedDim::K &&
      (p.a.layout == Layout::RowMajor || p.b.layout == Layout::ColMajor))
    return "grouped K with a row-major A or a column-major B (the group starts would be TMA box "
           "starts along a contiguous axis)";
  if (!dense && p.grouped == GroupedDim::M && p.groups > 1) {
    const int64_t one = p.b.layout == Layout::ColMajor ? p.b.ld * p.n : p.b.ld * p.k;
    if (p.b_group_stride % 8 != 0 || p.b_group_stride < one)
      return "B's group stride not a multiple of 8 at least one B matrix apart";
  }
  return nullptr;
}

// What the Hopper path would run for `p` on `device` (use = false: another path), or, for a
// forced Path::Hopper it cannot take, InvalidArgument with the reason.
struct HopperPlan {
  bool use = false;
  bool pingpong = false;
  int tile = -1;    // ping-pong: index into kHopperPingpongTiles
  int block_n = 0;  // cooperative
  int cluster = 1;
  int splits = 1;
  int64_t tiles = 0;  // ping-pong: output tiles
  size_t workspace_bytes = 0;
};

HopperPlan plan_hopper(const char* op, const GroupedGemmParams& p, bool dense, Device device,
                       int sms) {
  HopperPlan plan;
  if (p.dtype == DType::f32) return plan;
  const bool grouped_k = !dense && p.grouped == GroupedDim::K;
  const bool a_k_major = p.a.layout == Layout::RowMajor;
  const bool b_k_major = p.b.layout == Layout::ColMajor;
  const bool bf16 = p.dtype == DType::bf16;
  const int allowed = kernels::hopper_instances(bf16, a_k_major, b_k_major);
  const char* refusal = hopper_refusal(p, dense);
  if (refusal == nullptr && !kernels::hopper_kernel_usable(device))
    refusal = "the device is not compute capability 9.0 or the library was not built for sm_90a";
  const Tuning& t = p.tuning;
  const int forced_bn = t.hopper_block_n;
  const int forced_bm = t.hopper_block_m;
  // Auto keeps the cooperative schedule unless tile rows or split K are asked for: on the
  // H200 (round of 12:25) ping-pong ran slower on every dense shape measured, 0.73-0.75x of
  // cuBLAS at 8192^3 against 0.80-0.87x, 0.79x against 0.89x at 4096^3, 0.74x either way on
  // the expert shapes. Its tiles (at most 128 accumulators a thread: 128 x 128, 64 x 256) load
  // 1.33-1.67x more bytes per flop than the cooperative 128 x 256 tile; at the same 128 x 128
  // tile it beat the cooperative kernel by 8 % (the epilogue overlap works) but not the
  // wider tile. It won only on the grouped down projection (K = 1408; 524 against 483
  // TFLOP/s), not on the up projection (560 against 645).
  const bool pingpong =
      t.hopper_schedule == HopperSchedule::Pingpong ||
      (t.hopper_schedule == HopperSchedule::Auto && (forced_bm != 0 || t.hopper_splits > 1));
  const int64_t groups = dense ? 1 : p.groups;
  if (refusal == nullptr && pingpong) {
    plan.tile =
        pick_pingpong_tile(kernels::pingpong_instances(bf16, a_k_major, b_k_major), forced_bm,
                           forced_bn, grouped_k ? p.m * groups : p.m, groups, p.n, sms);
    if (plan.tile < 0)
      refusal =
          "no ping-pong kernel of that tile is built for these layouts (hopper_pingpong_tiles)";
  }
  if (refusal == nullptr && !pingpong && forced_bn != 0 &&
      !(allowed & kernels::block_n_bit(forced_bn)))
    refusal = "no kernel of that tile width is built for these layouts (hopper_block_ns)";
  check(p.path != Path::Hopper || refusal == nullptr, ErrorCode::InvalidArgument, op,
        ": Path::Hopper cannot take these arguments: ", refusal ? refusal : "");
  if (refusal != nullptr || p.path == Path::MmaSync) return plan;

  plan.use = true;
  if (pingpong) {
    plan.pingpong = true;
    const HopperTile tile = kHopperPingpongTiles[plan.tile];
    const int64_t k_blocks = (p.k + 63) / 64;
    const int64_t splits = t.hopper_splits > 1 ? t.hopper_splits : 1;
    plan.tiles =
        ((p.m + tile.block_m - 1) / tile.block_m) * ((p.n + tile.block_n - 1) / tile.block_n);
    // At most one split per k-block, and (tile, split) units numbered in 32 bits.
    const int64_t most = std::min<int64_t>(k_blocks, INT32_MAX / std::max<int64_t>(plan.tiles, 1));
    plan.splits = static_cast<int>(std::max<int64_t>(std::min(splits, most), 1));
    plan.cluster = t.hopper_cluster == 2 ? 2 : 1;
    if (plan.splits > 1) {
      plan.workspace_bytes =
          static_cast<size_t>((plan.tiles * 8 + 15) / 16 * 16) +
          static_cast<size_t>(plan.tiles) * static_cast<size_t>(tile.block_m * tile.block_n) * 4;
    }
    return plan;
  }
  int block_n = forced_bn;
  if (block_n == 0) {
    // Balanced groups as the estimate (the sizes live on the device).
    const int64_t m_tiles = grouped_k ? groups * ((p.m + 127) / 128)
                                      : groups * (((p.m + groups - 1) / groups + 127) / 128);
    block_n = pick_block_n(allowed, m_tiles, p.n, sms);
  }
  plan.block_n = block_n;
  // Pairs sharing B pay off when groups are at least two tiles high; a lone tile would make
  // its partner compute rows the epilogue drops.
  const int64_t rows_per_group = grouped_k || dense ? p.m : (p.m + p.groups - 1) / p.groups;
  plan.cluster = t.hopper_cluster != 0               ? t.hopper_cluster
                 : rows_per_group >= kClusterMinRows ? 2
                                                     : 1;
  return plan;
}

// `workspace` / `workspace_bytes`: the caller's (dense GemmParams), or null / 0.
void run(const char* op, const GroupedGemmParams& p, bool dense, const Stream& stream,
         void* given_workspace = nullptr, size_t given_bytes = 0) {
  check_common(op, p, dense);
  check(!stream.is_default(), ErrorCode::InvalidArgument, op,
        ": needs an explicit CUDA stream (the operands are raw device pointers)");
  check(stream.device().is_cuda(), ErrorCode::DeviceMismatch, op,
        ": the stream is not a CUDA stream");
  if (p.m == 0 || p.n == 0) return;

  const bool grouped_k = !dense && p.grouped == GroupedDim::K;
  const Epilogue& e = p.epilogue;
  const DType out = out_dtype_of(p.dtype, e);
  GemmArgs args{};
  args.m = p.m;
  args.n = p.n;
  args.k = p.k;
  args.groups = dense ? 1 : static_cast<int>(p.groups);
  args.offsets = dense ? nullptr : p.offsets;
  args.grouped_k = grouped_k;
  args.a = p.a.data;
  strides_of(p.a, args.a_m, args.a_k);
  args.b = p.b.data;
  strides_of(p.b, args.b_k, args.b_n);
  args.b_group_stride = dense || grouped_k ? 0 : p.b_group_stride;
  args.d = p.d;
  args.ldd = p.ldd;
  args.d_group_stride = grouped_k ? p.d_group_stride : 0;
  const bool reads_c = e.beta != 0.0f;
  args.c = reads_c ? e.c : nullptr;
  args.ldc = reads_c ? e.ldc : 0;
  args.c_group_stride = reads_c && grouped_k ? p.c_group_stride : 0;
  args.bias = e.bias;
  args.row_scale = e.row_scale;
  args.col_scale = e.col_scale;
  args.alpha = e.alpha;
  args.beta = e.beta;
  args.activation = static_cast<int>(e.activation);
  args.out_f32 = out == DType::f32;
  const size_t out_bytes = dtype_size(out);
  args.pair_stores = aligned(p.d, 2 * out_bytes) && p.ldd % 2 == 0 && args.d_group_stride % 2 == 0;
  args.cluster_m = 1;
  args.splits = 1;

  const Device device = stream.device();
  const kernels::LaunchSite site{reinterpret_cast<cudaStream_t>(stream.handle()), device,
                                 cuda::device_info(device).multiprocessors};

  if (p.dtype == DType::f32) {
    if (p.math == MathMode::Tf32) {
      bool a_vector = false, b_vector = false;
      vector_flags(p, dense, a_vector, b_vector);
      launch_mma_sync<float>(args, p.a.layout, p.b.layout, a_vector, b_vector, site);
    } else
      kernels::run_simt(args, site);
    return;
  }

  const bool a_k_major = p.a.layout == Layout::RowMajor;
  const bool b_k_major = p.b.layout == Layout::ColMajor;
  const bool bf16 = p.dtype == DType::bf16;
  const HopperPlan plan = plan_hopper(op, p, dense, device, site.multiprocessors);
  if (plan.use) {
    args.cluster_m = plan.cluster;
    if (plan.pingpong) {
      Tensor allocated;
      if (plan.splits > 1) {
        void* workspace = given_workspace;
        if (workspace != nullptr) {
          check(given_bytes >= plan.workspace_bytes, ErrorCode::InvalidArgument, op,
                ": workspace_bytes = ", given_bytes, "; expected >= ", plan.workspace_bytes,
                " for ", plan.splits, " splits (gemm_workspace_bytes)");
        } else {
          allocated = Tensor::empty({static_cast<int64_t>((plan.workspace_bytes + 3) / 4)},
                                    DType::f32, device, stream);
          workspace = allocated.data();
        }
        // Semaphores first (8 bytes a tile, rounded to 16), then the FP32 partial tiles.
        args.splits = plan.splits;
        args.semaphores = static_cast<unsigned long long*>(workspace);
        args.partials = static_cast<float*>(workspace) + (plan.tiles * 2 + 3) / 4 * 4;
        static std::atomic<unsigned long long> calls{0};
        args.call_id = (calls.fetch_add(1, std::memory_order_relaxed) + 1) & 0xFFFFFFFFull;
      }
      if (bf16)
        launch_pingpong<__nv_bfloat16>(plan.tile, a_k_major, b_k_major, args, site);
      else
        launch_pingpong<__half>(plan.tile, a_k_major, b_k_major, args, site);
      return;  // the workspace is freed in stream order, after the kernel
    }
    // The TMA-store epilogue needs one 2-D map over D: dense, rows 16-byte aligned, D in the
    // operands' dtype (its staging holds 16-bit values), and N a multiple of 8: a TMA store
    // clips a box at the tensor's width in 16-byte units only (on the H200 it wrote D's
    // padding columns up to the next multiple of 8; rows are clipped exactly).
    args.tma_store = dense && !args.out_f32 && aligned(p.d, 16) && p.ldd % 8 == 0 &&
                     p.n % 8 == 0 && !p.tuning.hopper_direct_store;
    if (bf16)
      launch_hopper<__nv_bfloat16>(plan.block_n, a_k_major, b_k_major, args, site);
    else
      launch_hopper<__half>(plan.block_n, a_k_major, b_k_major, args, site);
    return;
  }
  bool a_vector = false, b_vector = false;
  vector_flags(p, dense, a_vector, b_vector);
  if (bf16)
    launch_mma_sync<__nv_bfloat16>(args, p.a.layout, p.b.layout, a_vector, b_vector, site);
  else
    launch_mma_sync<__half>(args, p.a.layout, p.b.layout, a_vector, b_vector, site);
}

}  // namespace

const char* path_name(Path path) {
  switch (path) {
    case Path::Auto:
      return "auto";
    case Path::Hopper:
      return "hopper";
    case Path::MmaSync:
      return "mma.sync";
    case Path::Simt:
      return "simt";
  }
  return "?";
}

void check_gemm(const GemmParams& p) {
  check(aligned(p.workspace, 16), ErrorCode::InvalidArgument,
        "gemm: workspace is not 16-byte aligned");
  check_common("gemm", as_grouped(p), true);
}

void check_grouped_gemm(const GroupedGemmParams& p) { check_common("grouped_gemm", p, false); }

void gemm(const GemmParams& p, const Stream& stream) {
  check(aligned(p.workspace, 16), ErrorCode::InvalidArgument,
        "gemm: workspace is not 16-byte aligned");
  run("gemm", as_grouped(p), true, stream, p.workspace, p.workspace_bytes);
}

size_t gemm_workspace_bytes(const GemmParams& p, Device device) {
  const GroupedGemmParams g = as_grouped(p);
  check_common("gemm", g, true);
  if (!device.is_cuda() || p.m == 0 || p.n == 0) return 0;
  return plan_hopper("gemm", g, true, device, cuda::device_info(device).multiprocessors)
      .workspace_bytes;
}

void grouped_gemm(const GroupedGemmParams& p, const Stream& stream) {
  run("grouped_gemm", p, false, stream);
}

bool hopper_available(Device device) {
  return device.is_cuda() && kernels::hopper_kernel_usable(device);
}

int hopper_pingpong_tiles(DType dtype, Layout a, Layout b) {
  if (dtype != DType::bf16 && dtype != DType::f16) return 0;
  return kernels::pingpong_instances(dtype == DType::bf16, a == Layout::RowMajor,
                                     b == Layout::ColMajor);
}

int hopper_block_ns(DType dtype, Layout a, Layout b) {
  if (dtype != DType::bf16 && dtype != DType::f16) return 0;
  return kernels::hopper_instances(dtype == DType::bf16, a == Layout::RowMajor,
                                   b == Layout::ColMajor);
}

}  // namespace rudnn::gemm
