// Depthwise forward (groups == C, 1-D or 2-D, any kernel size, any channel multiplier): a
// memory-bound kernel. Five kernels, the first that applies (plus the stream kernel, an
// alternative to the tile kernel that conv/cuda/dw_tuning.h selects; measured slower):
//  * tile: channels-last operands with one filter per channel, C a multiple of a 16-byte
//    pack, aligned rows, a 3x3 filter at stride 1 without dilation (the common depthwise
//    shape): input rows staged in shared memory by cp.async (see the kernel).
//  * column: the same operands with a 3x3 filter at stride 2 on both axes, no dilation (it
//    also handles stride 1, which the tile kernel takes first). A thread owns an 8-byte pack
//    of V channels of one output column and a run of kColumnRun output rows; its whole
//    filter (9 x V FP32, loaded from global memory as packs when dense) and bias stay in
//    registers. It walks down the input rows its run covers, loading each row's 3 packs once
//    (kAhead - 1 rows ahead of their arithmetic), converting each element once, and adding
//    it into every output row it reaches (3 partial sums live at stride 1); an output row is
//    stored as soon as its last kernel row is in. Per output pack: 3 (1 + 2 / kColumnRun)
//    loads, 9 V FMA. The warps of a block are neighbouring output columns of the same rows,
//    so the columns they share come from L1 and DRAM sees each input about once (2 read +
//    2 written bytes per output element for 16-bit types). Rows and columns outside the
//    input load zeros, tested once per row and once per column, never per element.
//  * rows: channels-last operands with one filter per channel, C a multiple of a 16-byte
//    pack, aligned rows, no column dilation, and a kernel width of 1-5 or 7 with column
//    stride 1 or of 3, 5 or 7 with column stride 2 (the common depthwise shapes; other widths
//    take the packed kernel). A thread owns one pack of channels (16-byte loads and stores)
//    and kRowTile consecutive outputs of one output row; for each kernel row it loads the
//    (kRowTile-1)*stride + KW input packs that its windows cover once into registers and
//    slides the kernel over them, and it issues the loads of several kernel rows together
//    (kRowPacks packs) so that many are in flight. The threads of a block are consecutive
//    output rows of the same columns, so the rows they share are served by L1, and DRAM
//    sees each input about once (expected bytes per output element: 2 read + 2 written for
//    16-bit types; L1 serves KH*(1 + (KW-1)/kRowTile) loads per output). The filters and
//    bias of the block's channel slice are staged in shared memory as [tap][channel] FP32,
//    once per block: a block walks several groups of output rows.
//  * packed: the same operands otherwise: a thread computes one pack of channels of one
//    output pixel.
//  * scalar: anything else; one thread per output element along the output's innermost
//    memory axis.
// Each clips the tap rows (and the last two the tap columns) to the input once per output,
// so the window loop has no bounds test; the rows kernel loads zeros for padded columns.
#include <cuda_runtime.h>

#include <algorithm>
#include <type_traits>
#include <utility>

#include "conv/cuda/common.cuh"
#include "conv/cuda/dw_tuning.h"
#include "conv/cuda/launch.h"
#include "core/cuda_check.h"
#include "cuda/device_info.h"
#include "cuda/launch.cuh"
#include "cuda/tensor_core/mma_sync.cuh"
#include "cuda/types.cuh"
#include "cuda/vec.cuh"

namespace rudnn::conv_detail::cuda {

using rudnn::cuda::from_float;
using rudnn::cuda::to_float;

DwTuning& dw_tuning() {
  static DwTuning tuning;
  return tuning;
}

namespace {

// Taps [lo, hi) of one axis whose input positions fall inside [0, size).
__device__ __forceinline__ void tap_range(int64_t o, int64_t stride, int64_t pad, int64_t dil,
                                          int64_t kernel, int64_t size, int64_t& lo,
                                          int64_t& hi) {
  const int64_t start = o * stride - pad;
  lo = start >= 0 ? 0 : (-start + dil - 1) / dil;
  const int64_t last = size - 1 - start;  // the largest t * dil allowed
  hi = last < 0 ? 0 : min(kernel, last / dil + 1);
  if (hi < lo) hi = lo;
}

template <class T, class Index>
__global__ void __launch_bounds__(kThreads)
    depthwise_kernel(Forward p, const T* __restrict__ input, const T* __restrict__ weight,
                     const T* __restrict__ bias, const T* __restrict__ residual,
                     T* __restrict__ out) {
  const ConvShape& s = p.s;
  const bool channels_fastest = p.out_st.c == 1 && s.out_channels > 1;
  const int64_t total = s.batch * s.out_channels * s.out_space();
  const int64_t multiplier = s.group_out();
  for (int64_t flat = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; flat < total;
       flat += int64_t{gridDim.x} * blockDim.x) {
    int64_t n, k, o[3];
    split5(flat, s.out_channels, s.out, channels_fastest, n, k, o);
    int64_t ylo, yhi, xlo, xhi;
    tap_range(o[1], s.stride[1], s.pad[1], s.dilation[1], s.kernel[1], s.in[1], ylo, yhi);
    tap_range(o[2], s.stride[2], s.pad[2], s.dilation[2], s.kernel[2], s.in[2], xlo, xhi);
    const T* in = input + at(p.input_st, n, k / multiplier, o[0], o[1] * s.stride[1] - s.pad[1],
                             o[2] * s.stride[2] - s.pad[2]);
    const T* w = weight + k * p.weight_st.n;
    const Index in_y = static_cast<Index>(s.dilation[1] * p.input_st.sp[1]);
    const Index in_x = static_cast<Index>(s.dilation[2] * p.input_st.sp[2]);
    const Index w_y = static_cast<Index>(p.weight_st.sp[1]), w_x = static_cast<Index>(p.weight_st.sp[2]);
    float acc = 0.0f;
    for (Index ty = static_cast<Index>(ylo); ty < static_cast<Index>(yhi); ++ty) {
      for (Index tx = static_cast<Index>(xlo); tx < static_cast<Index>(xhi); ++tx) {
        acc += to_float(in[ty * in_y + tx * in_x]) * to_float(w[ty * w_y + tx * w_x]);
      }
    }
    if (bias != nullptr) acc += to_float(bias[k]);
    if (residual != nullptr) acc += to_float(residual[at(p.residual_st, n, k, o[0], o[1], o[2])]);
    out[at(p.out_st, n, k, o[0], o[1], o[2])] = from_float<T>(activate(p.activation, acc));
  }
}

// Channels-last, multiplier 1: thread = one pack of V channels of one output pixel.
template <class T, int V>
__global__ void __launch_bounds__(kThreads)
    depthwise_packed_kernel(Forward p, const T* __restrict__ input, const T* __restrict__ weight,
                            const T* __restrict__ bias, const T* __restrict__ residual,
                            T* __restrict__ out) {
  extern __shared__ float filters[];  // [taps][C], then bias [C]
  const ConvShape& s = p.s;
  const int64_t C = s.out_channels, taps = s.kernel[1] * s.kernel[2];
  for (int64_t i = threadIdx.x; i < taps * C; i += blockDim.x) {
    const int64_t k = i % C, t = i / C;
    filters[i] = to_float(weight[k * p.weight_st.n + t / s.kernel[2] * p.weight_st.sp[1] +
                                 t % s.kernel[2] * p.weight_st.sp[2]]);
  }
  for (int64_t k = threadIdx.x; k < C; k += blockDim.x) {
    filters[taps * C + k] = bias != nullptr ? to_float(bias[k]) : 0.0f;
  }
  __syncthreads();
  const int64_t packs = C / V;
  const int64_t total = s.batch * s.out_space() * packs;
  for (int64_t flat = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; flat < total;
       flat += int64_t{gridDim.x} * blockDim.x) {
    const int64_t c0 = flat % packs * V, pixel = flat / packs;
    const int64_t ox = pixel % s.out[2], oy = pixel / s.out[2] % s.out[1];
    const int64_t n = pixel / s.out[2] / s.out[1];
    int64_t ylo, yhi, xlo, xhi;
    tap_range(oy, s.stride[1], s.pad[1], s.dilation[1], s.kernel[1], s.in[1], ylo, yhi);
    tap_range(ox, s.stride[2], s.pad[2], s.dilation[2], s.kernel[2], s.in[2], xlo, xhi);
    float acc[V];
#pragma unroll
    for (int j = 0; j < V; ++j) acc[j] = filters[taps * C + c0 + j];
    for (int64_t ty = ylo; ty < yhi; ++ty) {
      const int64_t iy = oy * s.stride[1] - s.pad[1] + ty * s.dilation[1];
      for (int64_t tx = xlo; tx < xhi; ++tx) {
        const int64_t ix = ox * s.stride[2] - s.pad[2] + tx * s.dilation[2];
        float v[V];
        rudnn::cuda::load_pack<T, V>(input + at(p.input_st, n, c0, 0, iy, ix), v);
        const float* f = filters + (ty * s.kernel[2] + tx) * C + c0;
#pragma unroll
        for (int j = 0; j < V; ++j) acc[j] += v[j] * f[j];
      }
    }
    if (residual != nullptr) {
      float r[V];
      rudnn::cuda::load_pack<T, V>(residual + at(p.residual_st, n, c0, 0, oy, ox), r);
#pragma unroll
      for (int j = 0; j < V; ++j) acc[j] += r[j];
    }
#pragma unroll
    for (int j = 0; j < V; ++j) acc[j] = activate(p.activation, acc[j]);
    rudnn::cuda::store_pack<T, V>(out + at(p.out_st, n, c0, 0, oy, ox), acc);
  }
}

// The rows kernel (see the top). Launch: blockDim kThreads, grid (strip blocks, channel
// slices); shared memory (taps + 1) * slice_packs * V floats.
constexpr int kRowTile = 2;  // outputs per thread along the output row
constexpr int kRowPacks = 12;  // input packs a thread loads at once (kernel rows x span)

struct RowsLaunch {
  int slice_packs = 0;  // packs of channels per block (the last slice may have fewer)
  int strips_per_block = 0;
  int64_t strips = 0;   // batch * out rows * column tiles
  int64_t column_tiles = 0;
  int64_t groups = 0;   // groups of strips_per_block strips; a block walks several
};

template <class T, int V, int KW, int SX>
__global__ void __launch_bounds__(kThreads, 2)
    depthwise_rows_kernel(Forward p, RowsLaunch r, const T* __restrict__ input,
                          const T* __restrict__ weight, const T* __restrict__ bias,
                          const T* __restrict__ residual, T* __restrict__ out) {
  using Pack = rudnn::cuda::Pack<T, V>;
  constexpr int kSpan = (kRowTile - 1) * SX + KW;  // input packs one kernel row covers
  // Kernel rows whose inputs are loaded together: their loads are all in flight at once.
  constexpr int kRows = kRowPacks / kSpan > 1 ? kRowPacks / kSpan : 1;
  extern __shared__ float filters[];  // [taps][slice channels], then bias [slice channels]
  const ConvShape& s = p.s;
  const int KH = static_cast<int>(s.kernel[1]);
  const int slice = r.slice_packs * V;  // channels of a full slice
  const int64_t C = s.out_channels, packs = C / V;
  const int64_t c_base = int64_t{blockIdx.y} * slice;
  const int filter_count = KH * KW * slice;
#pragma unroll 4
  for (int i = threadIdx.x; i < filter_count; i += blockDim.x) {
    const int cc = i % slice, t = i / slice;
    const int64_t k = c_base + cc;
    filters[i] = k < C ? to_float(weight[k * p.weight_st.n + t / KW * p.weight_st.sp[1] +
                                         t % KW * p.weight_st.sp[2]])
                       : 0.0f;
  }
  for (int cc = threadIdx.x; cc < slice; cc += blockDim.x) {
    const int64_t k = c_base + cc;
    filters[filter_count + cc] = bias != nullptr && k < C ? to_float(bias[k]) : 0.0f;
  }
  __syncthreads();
  const int lane_pack = static_cast<int>(threadIdx.x % r.slice_packs);
  const int local_strip = static_cast<int>(threadIdx.x / r.slice_packs);
  const int64_t pack = int64_t{blockIdx.y} * r.slice_packs + lane_pack;
  if (local_strip >= r.strips_per_block || pack >= packs) return;
  const int64_t c0 = pack * V;
  const int lc = lane_pack * V;  // the pack's first channel within the slice
  for (int64_t group = blockIdx.x; group < r.groups; group += gridDim.x) {
    const int64_t strip = group * r.strips_per_block + local_strip;
    if (strip >= r.strips) break;
    // Output rows fastest, so that a block's threads share input rows. 32-bit arithmetic:
    // the launch checked that strips and row coordinates fit.
    const uint32_t strip32 = static_cast<uint32_t>(strip);
    const uint32_t out_rows = static_cast<uint32_t>(s.out[1]);
    const uint32_t tiles = static_cast<uint32_t>(r.column_tiles);
    const int oy = static_cast<int>(strip32 % out_rows);
    const int64_t tile = strip32 / out_rows % tiles, n = strip32 / out_rows / tiles;
    const int64_t ox0 = tile * kRowTile;
    // Kernel rows [ylo, yhi) whose input rows exist.
    const int dil = static_cast<int>(s.dilation[1]);
    const int start = oy * static_cast<int>(s.stride[1]) - static_cast<int>(s.pad[1]);
    const int last = static_cast<int>(s.in[1]) - 1 - start;  // the largest ty * dil allowed
    const int ylo = start >= 0 ? 0 : (-start + dil - 1) / dil;
    const int yhi = max(ylo, last < 0 ? 0 : min(KH, last / dil + 1));
    const int64_t ix0 = ox0 * SX - s.pad[2];
    float acc[kRowTile][V];
#pragma unroll
    for (int o = 0; o < kRowTile; ++o)
#pragma unroll
      for (int j = 0; j < V; ++j) acc[o][j] = filters[filter_count + lc + j];
    const T* base = input + n * p.input_st.n + c0 +
                    (oy * s.stride[1] - s.pad[1]) * p.input_st.sp[1];
    const int64_t row_step = s.dilation[1] * p.input_st.sp[1];
    for (int ty0 = ylo; ty0 < yhi; ty0 += kRows) {
      Pack raw[kRows][kSpan];
#pragma unroll
      for (int rr = 0; rr < kRows; ++rr) {
        const T* row = base + (ty0 + rr) * row_step;
#pragma unroll
        for (int j = 0; j < kSpan; ++j) {
          const int64_t ix = ix0 + j;
          raw[rr][j] = ty0 + rr < yhi && ix >= 0 && ix < s.in[2]
                           ? *reinterpret_cast<const Pack*>(row + ix * p.input_st.sp[2])
                           : rudnn::cuda::filled_pack<T, V>(0.0f);
        }
      }
#pragma unroll
      for (int rr = 0; rr < kRows; ++rr) {
        if (ty0 + rr >= yhi) break;
        const float* f = filters + (ty0 + rr) * KW * slice + lc;
#pragma unroll
        for (int tx = 0; tx < KW; ++tx) {
          float w[V];
#pragma unroll
          for (int j = 0; j < V; ++j) w[j] = f[tx * slice + j];
#pragma unroll
          for (int o = 0; o < kRowTile; ++o)
#pragma unroll
            for (int j = 0; j < V; ++j)
              acc[o][j] += rudnn::cuda::pack_element<T, V>(raw[rr][o * SX + tx], j) * w[j];
        }
      }
    }
#pragma unroll
    for (int o = 0; o < kRowTile; ++o) {
      const int64_t ox = ox0 + o;
      if (ox >= s.out[2]) break;
      if (residual != nullptr) {
        float res[V];
        rudnn::cuda::load_pack<T, V>(residual + at(p.residual_st, n, c0, 0, oy, ox), res);
#pragma unroll
        for (int j = 0; j < V; ++j) acc[o][j] += res[j];
      }
#pragma unroll
      for (int j = 0; j < V; ++j) acc[o][j] = activate(p.activation, acc[o][j]);
      rudnn::cuda::store_pack<T, V>(out + at(p.out_st, n, c0, 0, oy, ox), acc[o]);
    }
  }
}

// The column kernel (see the top): a K x K filter (K = 3), the same stride S (1 or 2) on both
// axes, no dilation. Launch: blockDim kColumnThreads, grid (strip groups, channel slices),
// no shared memory.
constexpr int kColumnRun = 8;  // output rows per thread
constexpr int kAhead = 3;      // input rows a thread has in flight
// Blocks of 128: at the 96 registers the row prefetch takes (stride 1), five fit an SM (20
// warps); blocks of 256 would fit two (16 warps). The bound asks for four, so that ptxas
// never caps the registers below what the stride-2 kernel needs.
constexpr int kColumnThreads = 128;

struct ColumnLaunch {
  int slice_packs = 0;  // packs of channels per block (the last slice may have fewer)
  int strips_per_block = 0;
  int runs = 0;         // runs of kColumnRun output rows per output column
  int64_t strips = 0;   // batch * runs * out columns (< 2^31, checked at launch)
  bool dense_weight = false;  // weight [K, 3, 3] contiguous, aligned to a pack
  bool aligned_bias = false;  // bias aligned to a pack
};

template <class T, int V, int K, int S>
__global__ void __launch_bounds__(kColumnThreads, 4)
    depthwise_column_kernel(Forward p, ColumnLaunch c, const T* __restrict__ input,
                            const T* __restrict__ weight, const T* __restrict__ bias,
                            const T* __restrict__ residual, T* __restrict__ out) {
  using Pack = rudnn::cuda::Pack<T, V>;
  constexpr int kTaps = K * K;
  constexpr int kInRows = (kColumnRun - 1) * S + K;  // input rows one run covers
  const ConvShape& s = p.s;
  const int64_t packs = s.out_channels / V;
  const int lane_pack = static_cast<int>(threadIdx.x % c.slice_packs);
  const int local_strip = static_cast<int>(threadIdx.x / c.slice_packs);
  const int64_t pack = int64_t{blockIdx.y} * c.slice_packs + lane_pack;
  if (local_strip >= c.strips_per_block || pack >= packs) return;
  const int64_t c0 = pack * V;
  // The whole filter of this pack lives in registers: each input element is converted once
  // and feeds every tap of the K output rows it reaches. It is loaded straight from global
  // memory (no shared-memory staging and barrier before the first input load): a dense
  // [K, 3, 3] filter gives the pack's 9 V weights as 9 consecutive packs, all in flight at
  // once. (A block that walked several strips to load the filter once would keep it live
  // across a loop: ptxas then spills ~200 bytes.)
  float w[kTaps][V], b[V];
  if (c.dense_weight) {
    const Pack* wp = reinterpret_cast<const Pack*>(weight + c0 * kTaps);
#pragma unroll
    for (int q = 0; q < kTaps; ++q) {
      const Pack v = wp[q];
#pragma unroll
      for (int i = 0; i < V; ++i) {
        const int e = q * V + i;  // element e of the run: channel e / kTaps, tap e % kTaps
        w[e % kTaps][e / kTaps] = rudnn::cuda::pack_element<T, V>(v, i);
      }
    }
  } else {
#pragma unroll
    for (int t = 0; t < kTaps; ++t)
#pragma unroll
      for (int j = 0; j < V; ++j)
        w[t][j] = to_float(weight[(c0 + j) * p.weight_st.n + t / K * p.weight_st.sp[1] +
                                  t % K * p.weight_st.sp[2]]);
  }
  if (bias == nullptr) {
#pragma unroll
    for (int j = 0; j < V; ++j) b[j] = 0.0f;
  } else if (c.aligned_bias) {
    rudnn::cuda::load_pack<T, V>(bias + c0, b);
  } else {
#pragma unroll
    for (int j = 0; j < V; ++j) b[j] = to_float(bias[c0 + j]);
  }
  const int in_rows = static_cast<int>(s.in[1]), in_cols = static_cast<int>(s.in[2]);
  const int64_t strip = int64_t{blockIdx.x} * c.strips_per_block + local_strip;
  if (strip >= c.strips) return;
  // Output columns fastest: the warps of a block take neighbouring columns, so the input
  // columns they share come from L1. 32-bit: the launch checked that strips fit.
  const uint32_t strip32 = static_cast<uint32_t>(strip);
  const uint32_t out_cols = static_cast<uint32_t>(s.out[2]);
  const int ox = static_cast<int>(strip32 % out_cols);
  const uint32_t rest = strip32 / out_cols;
  const int oy0 = static_cast<int>(rest % static_cast<uint32_t>(c.runs)) * kColumnRun;
  const int64_t n = rest / static_cast<uint32_t>(c.runs);
  const int iy0 = oy0 * S - static_cast<int>(s.pad[1]);
  const int ix0 = ox * S - static_cast<int>(s.pad[2]);
  bool col_ok[K];
#pragma unroll
  for (int kx = 0; kx < K; ++kx) col_ok[kx] = ix0 + kx >= 0 && ix0 + kx < in_cols;
  const T* plane = input + n * p.input_st.n + c0;
  const int64_t row_st = p.input_st.sp[1], col_st = p.input_st.sp[2];
  // Zero from bits (see filled_pack): element stores would keep the packs in local memory.
  const Pack zero = __builtin_bit_cast(Pack, rudnn::cuda::Pack<uint32_t, sizeof(Pack) / 4>{});
  float acc[kColumnRun][V];
#pragma unroll
  for (int o = 0; o < kColumnRun; ++o)
#pragma unroll
    for (int j = 0; j < V; ++j) acc[o][j] = b[j];
  // Rows are loaded kAhead - 1 rows before their arithmetic, so that each thread keeps
  // kAhead rows of loads in flight (the compiler alone issues about one).
  Pack rows[kInRows][K];
  auto load_row = [&](int r) {
    const int iy = iy0 + r;
    const bool row_ok = iy >= 0 && iy < in_rows;
    const T* row = plane + iy * row_st;
#pragma unroll
    for (int kx = 0; kx < K; ++kx) {
      rows[r][kx] = row_ok && col_ok[kx]
                        ? *reinterpret_cast<const Pack*>(row + (ix0 + kx) * col_st)
                        : zero;
    }
  };
#pragma unroll
  for (int r = 0; r + 1 < kAhead && r < kInRows; ++r) load_row(r);
#pragma unroll
  for (int r = 0; r < kInRows; ++r) {
    if (r + kAhead - 1 < kInRows) load_row(r + kAhead - 1);
    const Pack (&raw)[K] = rows[r];
    // Input row r meets output row o through kernel row ky = r - o * S.
#pragma unroll
    for (int ky = 0; ky < K; ++ky) {
      if ((r - ky) % S != 0) continue;
      const int o = (r - ky) / S;
      if (o < 0 || o >= kColumnRun) continue;
#pragma unroll
      for (int kx = 0; kx < K; ++kx)
#pragma unroll
        for (int j = 0; j < V; ++j)
          acc[o][j] += rudnn::cuda::pack_element<T, V>(raw[kx], j) * w[ky * K + kx][j];
    }
    // Output row o is complete once its last kernel row (K - 1) has been added.
    if ((r - (K - 1)) % S == 0 && r >= K - 1) {
      const int o = (r - (K - 1)) / S;
      const int oy = oy0 + o;
      if (o < kColumnRun && oy < s.out[1]) {
        if (residual != nullptr) {
          float res[V];
          rudnn::cuda::load_pack<T, V>(residual + at(p.residual_st, n, c0, 0, oy, ox), res);
#pragma unroll
          for (int j = 0; j < V; ++j) acc[o][j] += res[j];
        }
#pragma unroll
        for (int j = 0; j < V; ++j) acc[o][j] = activate(p.activation, acc[o][j]);
        rudnn::cuda::store_pack<T, V>(out + at(p.out_st, n, c0, 0, oy, ox), acc[o]);
      }
    }
  }
}

// The tile kernel (see the top): 3x3, stride 1, no dilation. A block owns 128 bytes of
// channels (kTileChunks 16-byte chunks) of up to tile_cols<T>() output columns and a run of
// output rows; it streams the input rows of the run (2 columns wider) through a ring of
// kTileStages shared-memory row buffers with cp.async, kTileStages - 1 rows ahead of the
// arithmetic, so that each SM keeps ~40 KB of loads in flight whatever its warps are doing.
// A thread owns a pack of V channels of one output column; its 9 x V FP32 filter sits in
// registers (V = 4: with 8 channels the filter leaves too few registers and ptxas spills) and
// each input row it reads (3 packs from shared memory) is added into the three output rows it
// reaches, the oldest of which is then complete and stored. DRAM sees each input byte about
// once (the rows between runs and the two columns between tiles again, mostly from L2).
constexpr int kTileChunks = 8;  // 16-byte chunks of channels per block and pixel
constexpr int kTileStages = 8;  // input rows in the ring
constexpr int kTileThreads = 256;
constexpr int kTileV = 4;       // channels per thread

template <class T>
constexpr int tile_slice() {  // channels per block
  return kTileChunks * 16 / static_cast<int>(sizeof(T));
}
template <class T>
constexpr int tile_cols() {  // output columns per block, at most
  return kTileThreads / (tile_slice<T>() / kTileV);
}

struct TileLaunch {
  int cols = 0;        // output columns per block (<= tile_cols<T>())
  int col_tiles = 0;   // per output row
  int run = 0;         // output rows per block
  int runs = 0;        // per image
  int slices = 0;      // of tile_slice<T>() channels
};

template <class T, int V>
__global__ void __launch_bounds__(kTileThreads, sizeof(T) == 2 ? 3 : 2)
    depthwise_tile_kernel(Forward p, TileLaunch t, const T* __restrict__ input,
                          const T* __restrict__ weight, const T* __restrict__ bias,
                          const T* __restrict__ residual, T* __restrict__ out) {
  using Pack = rudnn::cuda::Pack<T, V>;
  using Chunk = rudnn::cuda::Pack<T, 16 / sizeof(T)>;
  constexpr int kSlice = tile_slice<T>(), kChunk = 16 / sizeof(T), kLanes = kSlice / V;
  extern __shared__ __align__(16) unsigned char tile_smem[];
  T* ring = reinterpret_cast<T*>(tile_smem);  // [stage][column][kSlice]
  const ConvShape& s = p.s;
  const int stage_chunks = (t.cols + 2) * kTileChunks;
  const int64_t C = s.out_channels;
  // Block -> (slice, image, run, column tile); column tiles fastest after the slice, so that
  // the blocks that share the columns between tiles run together and those re-reads hit L2.
  const int slice = static_cast<int>(blockIdx.x % static_cast<unsigned>(t.slices));
  unsigned rest = blockIdx.x / static_cast<unsigned>(t.slices);
  const int col_tile = static_cast<int>(rest % static_cast<unsigned>(t.col_tiles));
  rest /= static_cast<unsigned>(t.col_tiles);
  const int run = static_cast<int>(rest % static_cast<unsigned>(t.runs));
  const int64_t n = rest / static_cast<unsigned>(t.runs);
  const int ox0 = col_tile * t.cols, oy0 = run * t.run;
  const int out_rows = static_cast<int>(s.out[1]), out_cols = static_cast<int>(s.out[2]);
  const int rows = min(t.run, out_rows - oy0) + 2;  // input rows of this run
  const int iy0 = oy0 - static_cast<int>(s.pad[1]), ix0 = ox0 - static_cast<int>(s.pad[2]);
  const int in_h = static_cast<int>(s.in[1]), in_w = static_cast<int>(s.in[2]);
  const int64_t ch0 = int64_t{slice} * kSlice;
  const T* plane = input + n * p.input_st.n + ch0;
  const int64_t row_st = p.input_st.sp[1], col_st = p.input_st.sp[2];

  // Row r of the run into its ring stage; positions outside the input (and channels past C)
  // are zero-filled by the copy itself, so that the arithmetic never tests bounds.
  auto load_row = [&](int r) {
    if (r < rows) {
      const int iy = iy0 + r;
      const bool row_ok = iy >= 0 && iy < in_h;
      Chunk* stage = reinterpret_cast<Chunk*>(ring) + (r % kTileStages) * stage_chunks;
      for (int i = threadIdx.x; i < stage_chunks; i += blockDim.x) {
        const int col = i / kTileChunks, q = i % kTileChunks;
        const int ix = ix0 + col;
        const bool ok = row_ok && ix >= 0 && ix < in_w && ch0 + q * kChunk < C;
        const T* src = ok ? plane + int64_t{iy} * row_st + int64_t{ix} * col_st + q * kChunk
                          : input;
        rudnn::cuda::tc::cp_async_16(stage + i, src, ok ? 16u : 0u);
      }
    }
    rudnn::cuda::tc::cp_async_commit();  // empty groups keep the wait count uniform
  };
#pragma unroll
  for (int r = 0; r < kTileStages - 1; ++r) load_row(r);

  const int lane = static_cast<int>(threadIdx.x % kLanes);
  const int col = static_cast<int>(threadIdx.x / kLanes);
  const int64_t c0 = ch0 + lane * V;
  const int ox = ox0 + col;
  const bool active = c0 < C && col < t.cols && ox < out_cols;
  // Filter and bias while the first rows are in flight; idle threads read channel 0.
  const int64_t wc = active ? c0 : 0;
  float w[9][V], b[V];
#pragma unroll
  for (int tap = 0; tap < 9; ++tap)
#pragma unroll
    for (int j = 0; j < V; ++j)
      w[tap][j] = to_float(weight[(wc + j) * p.weight_st.n + tap / 3 * p.weight_st.sp[1] +
                                  tap % 3 * p.weight_st.sp[2]]);
#pragma unroll
  for (int j = 0; j < V; ++j) b[j] = bias != nullptr ? to_float(bias[wc + j]) : 0.0f;

  // The thread's output column (and residual column): a row is one more multiply-add.
  T* out_col = out + n * p.out_st.n + c0 + int64_t{ox} * p.out_st.sp[2];
  const T* res_col = residual != nullptr
                         ? residual + n * p.residual_st.n + c0 + int64_t{ox} * p.residual_st.sp[2]
                         : nullptr;
  // As row r arrives: a0 is output row r - 1, a1 output row r, done output row r - 2.
  float a0[V], a1[V];
#pragma unroll
  for (int j = 0; j < V; ++j) a0[j] = a1[j] = b[j];
  for (int r = 0; r < rows; ++r) {
    rudnn::cuda::tc::cp_async_wait<kTileStages - 2>();
    __syncthreads();  // row r is in; every thread is past row r - 1, whose stage is reloaded
    load_row(r + kTileStages - 1);
    float done[V];
#pragma unroll
    for (int j = 0; j < V; ++j) {
      done[j] = a0[j];
      a0[j] = a1[j];
      a1[j] = b[j];
    }
    const T* src = ring + ((r % kTileStages) * (t.cols + 2) + col) * kSlice + lane * V;
#pragma unroll
    for (int kx = 0; kx < 3; ++kx) {
      const Pack v = *reinterpret_cast<const Pack*>(src + kx * kSlice);
#pragma unroll
      for (int j = 0; j < V; ++j) {
        const float x = rudnn::cuda::pack_element<T, V>(v, j);
        done[j] += x * w[6 + kx][j];
        a0[j] += x * w[3 + kx][j];
        a1[j] += x * w[kx][j];
      }
    }
    const int oy = oy0 + r - 2;
    if (r >= 2 && active) {
      if (res_col != nullptr) {
        float res[V];
        rudnn::cuda::load_pack<T, V>(res_col + int64_t{oy} * p.residual_st.sp[1], res);
#pragma unroll
        for (int j = 0; j < V; ++j) done[j] += res[j];
      }
#pragma unroll
      for (int j = 0; j < V; ++j) done[j] = activate(p.activation, done[j]);
      rudnn::cuda::store_pack<T, V>(out_col + int64_t{oy} * p.out_st.sp[1], done);
    }
  }
  rudnn::cuda::tc::cp_async_wait<0>();
}

// The stream kernel (see the top): 3x3, stride 1, no dilation, channels-last, one filter per
// channel. A thread owns 2 channels (a 4-byte pair in 16-bit types) of TC consecutive output
// columns and walks a run of output rows: per input row it loads the TC + 2 pairs its
// windows cover (2 rows ahead of their arithmetic, straight into registers: no shared
// memory, no barrier), converts each element once and adds it into the three output rows it
// reaches; the oldest is then complete and stored. Consecutive threads take consecutive
// pairs of one pixel, so a warp's loads and stores are 128 contiguous bytes (two segments
// where it wraps into the next strip). The columns two strips share are read twice, the
// second time mostly from L1 (the strips of a pixel row are neighbouring threads); DRAM sees
// each input byte about once. Blocks are small (kStreamThreads) so that the last wave is
// spread evenly over the multiprocessors.
constexpr int kStreamThreads = 64;

struct StreamLaunch {
  uint32_t threads = 0;  // pairs * strips * runs * batch (< 2^31, checked at launch)
  int pairs = 0;         // channel pairs (C / 2)
  int strips = 0;        // strips of TC output columns per output row
  int runs = 0;          // runs of `run` output rows per image
  int run = 0;
};

template <class T, int TC, int D>
__global__ void __launch_bounds__(kStreamThreads, sizeof(T) == 2 ? 8 : 6)
    depthwise_stream_kernel(Forward p, StreamLaunch L, const T* __restrict__ input,
                            const T* __restrict__ weight, const T* __restrict__ bias,
                            const T* __restrict__ residual, T* __restrict__ out) {
  using Pair = rudnn::cuda::Pack<T, 2>;
  constexpr int kIn = TC + 2;  // input columns a strip's windows cover
  const uint32_t flat = blockIdx.x * uint32_t{kStreamThreads} + threadIdx.x;
  if (flat >= L.threads) return;
  uint32_t rest = flat;
  const int pair = static_cast<int>(rest % static_cast<uint32_t>(L.pairs));
  rest /= static_cast<uint32_t>(L.pairs);
  const int strip = static_cast<int>(rest % static_cast<uint32_t>(L.strips));
  rest /= static_cast<uint32_t>(L.strips);
  const int run = static_cast<int>(rest % static_cast<uint32_t>(L.runs));
  const int64_t n = rest / static_cast<uint32_t>(L.runs);
  const ConvShape& s = p.s;
  const int64_t c0 = 2 * int64_t{pair};
  const int ox0 = strip * TC, oy0 = run * L.run;
  const int out_cols = static_cast<int>(s.out[2]);
  const int rows = min(L.run, static_cast<int>(s.out[1]) - oy0) + 2;  // input rows of the run
  const int iy0 = oy0 - static_cast<int>(s.pad[1]), ix0 = ox0 - static_cast<int>(s.pad[2]);
  const int in_h = static_cast<int>(s.in[1]), in_w = static_cast<int>(s.in[2]);
  const int64_t row_st = p.input_st.sp[1], col_st = p.input_st.sp[2];
  // Offset of (row 0, column ix0): negative where the window starts in the padding; only
  // offsets of columns inside the input are ever dereferenced.
  const int64_t base = n * p.input_st.n + c0 + int64_t{ix0} * col_st;
  unsigned col_ok = 0;  // bit j: input column ix0 + j exists
#pragma unroll
  for (int j = 0; j < kIn; ++j) col_ok |= (ix0 + j >= 0 && ix0 + j < in_w ? 1u : 0u) << j;
  const Pair zero = __builtin_bit_cast(Pair, rudnn::cuda::Pack<uint32_t, sizeof(Pair) / 4>{});

  Pair raw[D + 1][kIn];  // input rows r to r + D (by r % (D + 1))
  auto load_row = [&](int r, Pair (&dst)[kIn]) {
    const int iy = iy0 + r;
    const bool row_ok = r < rows && iy >= 0 && iy < in_h;
    const int64_t row = base + int64_t{iy} * row_st;
#pragma unroll
    for (int j = 0; j < kIn; ++j) {
      dst[j] = row_ok && (col_ok >> j & 1u)
                   ? *reinterpret_cast<const Pair*>(input + row + int64_t{j} * col_st)
                   : zero;
    }
  };
#pragma unroll
  for (int r = 0; r < D; ++r) load_row(r, raw[r]);
  // Filter and bias while the first rows are in flight.
  float w[9][2], b[2];
#pragma unroll
  for (int t = 0; t < 9; ++t)
#pragma unroll
    for (int j = 0; j < 2; ++j)
      w[t][j] = to_float(weight[(c0 + j) * p.weight_st.n + t / 3 * p.weight_st.sp[1] +
                                t % 3 * p.weight_st.sp[2]]);
#pragma unroll
  for (int j = 0; j < 2; ++j) b[j] = bias != nullptr ? to_float(bias[c0 + j]) : 0.0f;

  const int store_cols = min(TC, out_cols - ox0);
  T* out_base = out + n * p.out_st.n + c0 + int64_t{ox0} * p.out_st.sp[2];
  const T* res_base = residual != nullptr ? residual + n * p.residual_st.n + c0 +
                                                int64_t{ox0} * p.residual_st.sp[2]
                                          : nullptr;
  // acc[o % 3]: output row o of the run (input row r reaches output rows r - 2, r - 1, r;
  // the rows before the run's first are summed and never stored).
  float acc[3][TC][2] = {};
  // Input row r, with q = r % kUnroll known at compile time so that every index is static:
  // its accumulators by r % 3, its input by r % (D + 1); row r + D is loaded into the slot
  // of row r - 1.
  constexpr int kUnroll = (D + 1) % 3 == 0 ? D + 1 : 3 * (D + 1);
  auto step = [&](auto q_tag, int r) {
    constexpr int q = decltype(q_tag)::value;
    constexpr int k = q % 3, k1 = (q + 2) % 3, k2 = (q + 1) % 3;  // output rows r, r-1, r-2
    constexpr int in = q % (D + 1), ahead = (q + D) % (D + 1);
    if (r >= rows) return;
    load_row(r + D, raw[ahead]);
#pragma unroll
    for (int c = 0; c < TC; ++c)
#pragma unroll
      for (int j = 0; j < 2; ++j) acc[k][c][j] = b[j];
#pragma unroll
    for (int x = 0; x < kIn; ++x) {
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        const float v = rudnn::cuda::pack_element<T, 2>(raw[in][x], j);
#pragma unroll
        for (int kx = 0; kx < 3; ++kx) {
          const int c = x - kx;
          if (c < 0 || c >= TC) continue;
          acc[k][c][j] += v * w[kx][j];
          acc[k1][c][j] += v * w[3 + kx][j];
          acc[k2][c][j] += v * w[6 + kx][j];
        }
      }
    }
    if (r < 2) return;
    const int64_t oy = oy0 + r - 2;
    T* o = out_base + oy * p.out_st.sp[1];
    const T* res = res_base != nullptr ? res_base + oy * p.residual_st.sp[1] : nullptr;
#pragma unroll
    for (int c = 0; c < TC; ++c) {
      if (c >= store_cols) break;
      float v[2] = {acc[k2][c][0], acc[k2][c][1]};
      if (res != nullptr) {
        float rv[2];
        rudnn::cuda::load_pack<T, 2>(res + c * p.residual_st.sp[2], rv);
        v[0] += rv[0];
        v[1] += rv[1];
      }
      if (p.activation != Activation::None) {
        v[0] = activate(p.activation, v[0]);
        v[1] = activate(p.activation, v[1]);
      }
      rudnn::cuda::store_pack<T, 2>(o + c * p.out_st.sp[2], v);
    }
  };
  for (int r = 0; r < rows; r += kUnroll) {
    [&]<int... Q>(std::integer_sequence<int, Q...>) {
      (step(std::integral_constant<int, Q>{}, r + Q), ...);
    }(std::make_integer_sequence<int, kUnroll>{});
  }
}

// Whether a channels-last operand's pixels start on pack boundaries: channel stride 1 and
// every other stride a multiple of the pack, from an aligned base.
bool packed_rows(const Strides& st, const void* data, int v, size_t bytes) {
  return st.c == 1 && st.n % v == 0 && st.sp[1] % v == 0 && st.sp[2] % v == 0 &&
         reinterpret_cast<uintptr_t>(data) % bytes == 0;
}


// The column kernel for this problem, when it applies (see the top); false otherwise. Its
// packs are 8 bytes (V16 / 2 elements, V16 the 16-byte pack the caller checked): with 16-byte
// packs the 9 x 8 FP32 filter leaves no registers to keep input rows in flight.
template <class T, int V16>
bool launch_column(const Forward& p, cudaStream_t stream) {
  constexpr int V = V16 / 2;
  const ConvShape& s = p.s;
  if (s.kernel[1] != 3 || s.kernel[2] != 3 || s.dilation[1] != 1 || s.dilation[2] != 1 ||
      s.stride[1] != s.stride[2] || (s.stride[1] != 1 && s.stride[1] != 2)) {
    return false;
  }
  const int64_t packs = s.out_channels / V;
  ColumnLaunch c;
  c.slice_packs = static_cast<int>(std::min<int64_t>(packs, 32));
  c.strips_per_block = kColumnThreads / c.slice_packs;
  const int64_t runs = (s.out[1] + kColumnRun - 1) / kColumnRun;
  c.strips = s.batch * runs * s.out[2];
  // The kernel's row and column arithmetic is 32-bit.
  constexpr int64_t kLimit = int64_t{1} << 30;
  if (c.strips >= kLimit || s.in[1] >= kLimit || s.in[2] >= kLimit ||
      s.out[1] * s.stride[1] >= kLimit || s.out[2] * s.stride[2] >= kLimit ||
      s.pad[1] >= kLimit || s.pad[2] >= kLimit) {
    return false;
  }
  c.runs = static_cast<int>(runs);
  constexpr size_t kPackBytes = V * sizeof(T);
  c.dense_weight = p.weight_st.n == 9 && p.weight_st.sp[1] == 3 && p.weight_st.sp[2] == 1 &&
                   reinterpret_cast<uintptr_t>(p.weight) % kPackBytes == 0;
  c.aligned_bias = reinterpret_cast<uintptr_t>(p.bias) % kPackBytes == 0;
  const int64_t slices = (packs + c.slice_packs - 1) / c.slice_packs;
  const int64_t blocks = (c.strips + c.strips_per_block - 1) / c.strips_per_block;
  if (slices >= 65536 || blocks >= kLimit) return false;
  auto launch = [&](auto kernel) {
    kernel<<<dim3(static_cast<unsigned>(blocks), static_cast<unsigned>(slices)), kColumnThreads,
             0, stream>>>(p, c, static_cast<const T*>(p.input), static_cast<const T*>(p.weight),
                       static_cast<const T*>(p.bias), static_cast<const T*>(p.residual),
                       static_cast<T*>(p.out));
  };
  if (s.stride[1] == 1) {
    launch(depthwise_column_kernel<T, V, 3, 1>);
  } else {
    launch(depthwise_column_kernel<T, V, 3, 2>);
  }
  return true;
}

// The tile kernel for this problem, when it applies (see the top); false otherwise.
template <class T>
bool launch_tile(const Forward& p, Device device, cudaStream_t stream) {
  const ConvShape& s = p.s;
  if (s.kernel[1] != 3 || s.kernel[2] != 3 || s.dilation[1] != 1 || s.dilation[2] != 1 ||
      s.stride[1] != 1 || s.stride[2] != 1) {
    return false;
  }
  // The kernel's row and column arithmetic is 32-bit.
  constexpr int64_t kLimit = int64_t{1} << 30;
  if (s.in[1] >= kLimit || s.in[2] >= kLimit || s.out[1] >= kLimit || s.out[2] >= kLimit ||
      s.pad[1] >= kLimit || s.pad[2] >= kLimit) {
    return false;
  }
  if (s.batch <= 0 || s.out[1] <= 0 || s.out[2] <= 0 || s.out_channels <= 0) return false;
  constexpr int kMaxCols = tile_cols<T>(), kSlice = tile_slice<T>();
  TileLaunch t;
  t.col_tiles = static_cast<int>((s.out[2] + kMaxCols - 1) / kMaxCols);
  t.cols = static_cast<int>((s.out[2] + t.col_tiles - 1) / t.col_tiles);  // even tiles
  t.slices = static_cast<int>((s.out_channels + kSlice - 1) / kSlice);
  const int threads = t.cols * (kSlice / kTileV);
  const size_t shared = size_t{kTileStages} * (t.cols + 2) * kTileChunks * 16;
  static rudnn::cuda::PerDevice<int> occupancy;
  const int64_t slots = rudnn::cuda::resident_blocks(
      depthwise_tile_kernel<T, kTileV>, kTileThreads, device, occupancy,
      size_t{kTileStages} * (kMaxCols + 2) * kTileChunks * 16);
  // Runs of output rows: long runs re-read fewer rows between runs and fill the ring once;
  // short ones make more blocks. Take the split whose waves take the least time, a block's
  // time being its rows plus a few rows' worth of start-up (filter loads, the ring filling).
  const int64_t base = s.batch * t.col_tiles * t.slices, out_rows = s.out[1];
  int64_t best_run = out_rows;
  double best_cost = 0.0;
  for (int64_t split = 1; split <= std::min<int64_t>(out_rows, 64); ++split) {
    const int64_t run = (out_rows + split - 1) / split;
    const int64_t blocks = base * ((out_rows + run - 1) / run);
    const double cost = static_cast<double>((blocks + slots - 1) / slots) *
                        static_cast<double>(run + 2 + 6);
    if (split == 1 || cost < best_cost) {
      best_cost = cost;
      best_run = run;
    }
  }
  t.run = static_cast<int>(best_run);
  t.runs = static_cast<int>((out_rows + best_run - 1) / best_run);
  const int64_t blocks = base * t.runs;
  if (blocks <= 0 || blocks >= (int64_t{1} << 31) - 1) return false;
  depthwise_tile_kernel<T, kTileV><<<static_cast<unsigned>(blocks), threads, shared, stream>>>(
      p, t, static_cast<const T*>(p.input), static_cast<const T*>(p.weight),
      static_cast<const T*>(p.bias), static_cast<const T*>(p.residual), static_cast<T*>(p.out));
  return true;
}

// The stream kernel for this problem, when it applies (see the top); false otherwise.
template <class T, int TC, int D>
bool launch_stream(const Forward& p, Device device, cudaStream_t stream) {
  const ConvShape& s = p.s;
  if (s.kernel[1] != 3 || s.kernel[2] != 3 || s.dilation[1] != 1 || s.dilation[2] != 1 ||
      s.stride[1] != 1 || s.stride[2] != 1 || s.out_channels % 2 != 0) {
    return false;
  }
  if (s.batch <= 0 || s.out[1] <= 0 || s.out[2] <= 0 || s.out_channels <= 0) return false;
  // The kernel's thread, row and column arithmetic is 32-bit.
  constexpr int64_t kLimit = int64_t{1} << 30;
  if (s.in[1] >= kLimit || s.in[2] >= kLimit || s.out[1] >= kLimit || s.out[2] >= kLimit ||
      s.pad[1] >= kLimit || s.pad[2] >= kLimit || s.out_channels >= kLimit) {
    return false;
  }
  StreamLaunch L;
  L.pairs = static_cast<int>(s.out_channels / 2);
  L.strips = static_cast<int>((s.out[2] + TC - 1) / TC);
  const int64_t per_run = s.batch * L.pairs * L.strips;  // threads of one run of every image
  static rudnn::cuda::PerDevice<int> occupancy;
  const int64_t slots = int64_t{rudnn::cuda::resident_blocks(depthwise_stream_kernel<T, TC, D>,
                                                             kStreamThreads, device, occupancy)} *
                        kStreamThreads;
  // Runs of output rows: long runs load the two rows between runs less often; more runs fill
  // the device. Take the split whose waves take the least time, a thread's time being its
  // input rows plus a few rows' worth of start-up (filter loads, the first rows' latency).
  const int64_t out_rows = s.out[1];
  int64_t best_run = out_rows;
  if (dw_tuning().stream_run > 0) {
    best_run = std::min<int64_t>(out_rows, dw_tuning().stream_run);
  } else {
    double best_cost = 0.0;
    for (int64_t split = 1; split <= std::min<int64_t>(out_rows, 64); ++split) {
      const int64_t run = (out_rows + split - 1) / split;
      const int64_t threads = per_run * ((out_rows + run - 1) / run);
      const double cost = static_cast<double>((threads + slots - 1) / slots) *
                          static_cast<double>(run + 2 + 6);
      if (split == 1 || cost < best_cost) {
        best_cost = cost;
        best_run = run;
      }
    }
  }
  L.run = static_cast<int>(best_run);
  L.runs = static_cast<int>((out_rows + best_run - 1) / best_run);
  const int64_t threads = per_run * L.runs;
  if (threads <= 0 || threads >= (int64_t{1} << 31) - kStreamThreads) return false;
  L.threads = static_cast<uint32_t>(threads);
  const auto blocks = static_cast<unsigned>((threads + kStreamThreads - 1) / kStreamThreads);
  depthwise_stream_kernel<T, TC, D><<<blocks, kStreamThreads, 0, stream>>>(
      p, L, static_cast<const T*>(p.input), static_cast<const T*>(p.weight),
      static_cast<const T*>(p.bias), static_cast<const T*>(p.residual), static_cast<T*>(p.out));
  return true;
}

// The rows kernel for this problem, when it applies (see the top); false otherwise.
template <class T, int V>
bool launch_rows(const Forward& p, Device device, cudaStream_t stream) {
  const ConvShape& s = p.s;
  if (s.dilation[2] != 1 || (s.stride[2] != 1 && s.stride[2] != 2)) return false;
  const int64_t packs = s.out_channels / V, taps = s.kernel[1] * s.kernel[2];
  // A slice of at most 32 packs whose filters fit 48 KiB of shared memory.
  int64_t slice_packs = std::min<int64_t>(packs, 32);
  while (slice_packs > 0 && (taps + 1) * slice_packs * V * int64_t{sizeof(float)} > 48 * 1024) {
    slice_packs /= 2;
  }
  if (slice_packs == 0) return false;
  RowsLaunch r;
  r.slice_packs = static_cast<int>(slice_packs);
  r.strips_per_block = kThreads / r.slice_packs;
  r.column_tiles = (s.out[2] + kRowTile - 1) / kRowTile;
  r.strips = s.batch * s.out[1] * r.column_tiles;
  r.groups = (r.strips + r.strips_per_block - 1) / r.strips_per_block;
  // The kernel's row arithmetic is 32-bit.
  constexpr int64_t kLimit = int64_t{1} << 30;
  if (r.strips >= kLimit || s.in[1] >= kLimit || s.out[1] * s.stride[1] >= kLimit ||
      s.pad[1] >= kLimit || s.kernel[1] * s.dilation[1] >= kLimit) {
    return false;
  }
  const int64_t slices = (packs + slice_packs - 1) / slice_packs;
  if (slices >= 65536) return false;
  // Enough blocks for a few waves; each walks several groups, so that its filters are
  // staged once for many outputs.
  const int64_t resident = int64_t{rudnn::cuda::device_info(device).multiprocessors} * 2;
  const int64_t blocks =
      std::min(r.groups, std::max<int64_t>(1, resident * 4 / slices));
  const size_t shared = static_cast<size_t>((taps + 1) * slice_packs * V) * sizeof(float);
  bool launched = false;
  auto launch = [&](auto kernel) {
    kernel<<<dim3(static_cast<unsigned>(blocks), static_cast<unsigned>(slices)), kThreads, shared,
             stream>>>(p, r, static_cast<const T*>(p.input), static_cast<const T*>(p.weight),
                       static_cast<const T*>(p.bias), static_cast<const T*>(p.residual),
                       static_cast<T*>(p.out));
    launched = true;
  };
  const int64_t kw = s.kernel[2];
  if (s.stride[2] == 1) {
    switch (kw) {
      case 1: launch(depthwise_rows_kernel<T, V, 1, 1>); break;
      case 2: launch(depthwise_rows_kernel<T, V, 2, 1>); break;
      case 3: launch(depthwise_rows_kernel<T, V, 3, 1>); break;
      case 4: launch(depthwise_rows_kernel<T, V, 4, 1>); break;
      case 5: launch(depthwise_rows_kernel<T, V, 5, 1>); break;
      case 7: launch(depthwise_rows_kernel<T, V, 7, 1>); break;
      default: break;
    }
  } else {
    switch (kw) {
      case 3: launch(depthwise_rows_kernel<T, V, 3, 2>); break;
      case 5: launch(depthwise_rows_kernel<T, V, 5, 2>); break;
      case 7: launch(depthwise_rows_kernel<T, V, 7, 2>); break;
      default: break;
    }
  }
  return launched;
}
}  // namespace

void depthwise_forward(const Forward& p, const Stream& stream) {
  const rudnn::cuda::LaunchContext ctx(stream);
  // Offsets within one window fit 32 bits unless a tap's stride times the kernel does not.
  const int64_t span =
      p.s.kernel[1] * p.s.dilation[1] * p.input_st.sp[1] +
      p.s.kernel[2] * p.s.dilation[2] * p.input_st.sp[2] + p.s.kernel[1] * p.weight_st.sp[1] +
      p.s.kernel[2] * p.weight_st.sp[2];
  const bool narrow = span < (int64_t{1} << 31);
  rudnn::cuda::with_float_type(p.s.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    constexpr int V = 16 / sizeof(T);
    const int64_t C = p.s.out_channels, taps = p.s.kernel[1] * p.s.kernel[2];
    const size_t shared = static_cast<size_t>((taps + 1) * C) * sizeof(float);
    const bool packed = p.s.group_out() == 1 && C % V == 0 &&
                        packed_rows(p.input_st, p.input, V, 16) &&
                        packed_rows(p.out_st, p.out, V, 16) &&
                        (p.residual == nullptr || packed_rows(p.residual_st, p.residual, V, 16));
    const int choice = dw_tuning().depthwise_3x3;
    if (packed && choice == 0 && launch_stream<T, 7, 2>(p, ctx.device, ctx.stream)) return;
    if (packed && choice == 1 && launch_stream<T, 4, 2>(p, ctx.device, ctx.stream)) return;
    if (packed && choice == 3 && launch_stream<T, 4, 3>(p, ctx.device, ctx.stream)) return;
    if (packed && launch_tile<T>(p, ctx.device, ctx.stream)) return;
    if (packed && launch_column<T, V>(p, ctx.stream)) return;
    if (packed && launch_rows<T, V>(p, ctx.device, ctx.stream)) return;
    if (packed && shared <= 48 * 1024) {
      const int64_t total = p.s.batch * p.s.out_space() * (C / V);
      depthwise_packed_kernel<T, V><<<blocks_for(total), kThreads, shared, ctx.stream>>>(
          p, static_cast<const T*>(p.input), static_cast<const T*>(p.weight),
          static_cast<const T*>(p.bias), static_cast<const T*>(p.residual),
          static_cast<T*>(p.out));
      return;
    }
    const int64_t total = p.s.batch * p.s.out_channels * p.s.out_space();
    auto args = [&](auto kernel) {
      kernel<<<blocks_for(total), kThreads, 0, ctx.stream>>>(
          p, static_cast<const T*>(p.input), static_cast<const T*>(p.weight),
          static_cast<const T*>(p.bias), static_cast<const T*>(p.residual),
          static_cast<T*>(p.out));
    };
    if (narrow) {
      args(depthwise_kernel<T, int32_t>);
    } else {
      args(depthwise_kernel<T, int64_t>);
    }
  });
  detail::check_launch("conv_forward depthwise");
}

}  // namespace rudnn::conv_detail::cuda
