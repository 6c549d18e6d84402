// grid_sample kernels: one thread per output location. The thread reads its grid entry
// once, turns it into at most 16 (offset, weight) pairs within a channel plane (taps.h), then
// walks the channels, so the grid and the tap arithmetic are paid once per location and
// consecutive threads write consecutive outputs of each channel.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <type_traits>

#include "core/cuda_check.h"
#include "cuda/launch.cuh"
#include "cuda/types.cuh"
#include "grid_sample/cuda/launch.h"
#include "grid_sample/taps.h"

namespace rudnn::grid_sample_detail::cuda {

using rudnn::cuda::from_float;
using rudnn::cuda::to_float;

constexpr int kThreads = 256;

// The taps of one location: offsets in a channel plane and weights; a tap outside the input
// has weight 0, derivative 0, offset 0 (a harmless read) and its bit clear in `inside`.
template <int kMode, int kDims>
struct LocationTaps {
  static constexpr int kPerAxis = kMode == kBicubic ? 4 : (kMode == kNearest ? 1 : 2);
  static constexpr int kCount = kDims == 3 ? kPerAxis * kPerAxis * kPerAxis : kPerAxis * kPerAxis;
  int64_t offset[kCount];
  float weight[kCount];
  float dx[kCount], dy[kCount], dz[kCount];
  unsigned inside = 0;
};

template <int kMode, int kDims, class T>
__device__ __forceinline__ LocationTaps<kMode, kDims> location_taps(const SampleShape& s,
                                                                    const T* grid, int64_t location,
                                                                    bool with_derivatives) {
  using L = LocationTaps<kMode, kDims>;
  const T* g = grid + location * kDims;
  // The source coordinate is worked out in FP64, as the reference does, and only the weights
  // are rounded to FP32. In FP32 a pixel coordinate near 32768 is only known to 2^-8, which
  // put the forward off the reference by 1e-3 at W = 40000; and a coordinate one FP32 ulp
  // below an integer floors to the other pixel, where the grid gradient jumps (the bilinear
  // slope is v[i0 + 1] - v[i0]): a few such locations put the grid gradient of the
  // [32, 64, 128, 128] bench 3.6e-3 off. In FP64 the floors are the reference's own.
  const auto axis = [&](T coord, int64_t size) {
    return axis_taps(static_cast<double>(to_float(coord)), size, kMode, s.padding, s.align_corners);
  };
  const Taps<double> tx = axis(g[0], s.in_w);
  const Taps<double> ty = axis(g[1], s.in_h);
  Taps<double> tz;
  if constexpr (kDims == 3) {
    tz = axis(g[2], s.in_d);
  } else {
    tz.index[0] = 0;
    tz.weight[0] = 1.0;
    tz.dweight[0] = 0.0;
  }
  L t;
  constexpr int kZ = kDims == 3 ? L::kPerAxis : 1;
#pragma unroll
  for (int k = 0; k < kZ; ++k) {
#pragma unroll
    for (int j = 0; j < L::kPerAxis; ++j) {
#pragma unroll
      for (int i = 0; i < L::kPerAxis; ++i) {
        const int at = (k * L::kPerAxis + j) * L::kPerAxis + i;
        const bool inside = tx.index[i] >= 0 && ty.index[j] >= 0 && tz.index[k] >= 0;
        const float wx = static_cast<float>(tx.weight[i]), wy = static_cast<float>(ty.weight[j]),
                    wz = static_cast<float>(tz.weight[k]);
        t.offset[at] = inside ? (tz.index[k] * s.in_h + ty.index[j]) * s.in_w + tx.index[i] : 0;
        t.weight[at] = inside ? wx * wy * wz : 0.0f;
        if (with_derivatives) {
          t.dx[at] = inside ? static_cast<float>(tx.dweight[i]) * wy * wz : 0.0f;
          t.dy[at] = inside ? wx * static_cast<float>(ty.dweight[j]) * wz : 0.0f;
          t.dz[at] = inside ? wx * wy * static_cast<float>(tz.dweight[k]) : 0.0f;
        }
        if (inside) t.inside |= 1u << at;
      }
    }
  }
  return t;
}

template <class T, int kMode, int kDims>
__global__ void __launch_bounds__(kThreads)
    sample_forward_kernel(SampleShape s, const T* __restrict__ input, const T* __restrict__ grid,
                          T* __restrict__ out) {
  const int64_t location = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (location >= s.locations()) return;
  const int64_t out_spatial = s.out_spatial(), in_spatial = s.in_spatial();
  const int64_t b = location / out_spatial, o = location - b * out_spatial;
  const auto t = location_taps<kMode, kDims>(s, grid, location, false);
  const T* plane = input + b * s.c * in_spatial;
  T* dst = out + b * s.c * out_spatial + o;
  // Unrolled so that several channels' gathers are in flight at once.
#pragma unroll 4
  for (int64_t ch = 0; ch < s.c; ++ch) {
    float acc = 0.0f;
#pragma unroll
    for (int k = 0; k < t.kCount; ++k) {
      // Outside taps are skipped, not weighted by 0: an inf or NaN at offset 0 must not leak.
      if (t.inside & (1u << k)) acc += t.weight[k] * to_float(__ldg(plane + t.offset[k]));
    }
    *dst = from_float<T>(acc);
    plane += in_spatial;
    dst += out_spatial;
  }
}

// ---- Tiled 2-D forward ----------------------------------------------------------------------
// A block owns a kTileW x kTileH tile of output locations of one batch entry. Where the grid
// is smooth (an affine warp, a flow field) the taps of a tile fall in a small box of the
// input: the block copies that box, kStageChannels channels at a time, into shared memory with
// coalesced loads (the next group's loads in flight while the current group is sampled) and
// samples from there. Gathered straight from global memory, the taps of one warp's load
// instruction touch one cache line per input row they cross (a rotated warp crosses several),
// and those line requests bounded the direct kernel at ~63 % of the copy bandwidth. A block
// whose box exceeds kBoxCapacity (a random or strongly zooming grid) gathers directly, as
// sample_forward_kernel does. The weights and their summation order are sample_forward_kernel's:
// both paths give the same bits.
constexpr int kTileW = 16, kTileH = kThreads / kTileW;
constexpr int kBoxCapacity = 512;  // input cells per channel of a staged box
constexpr int kStageChannels = 8;
constexpr int kBoxPerThread = kBoxCapacity / kThreads;
static_assert(kBoxCapacity % kThreads == 0, "each thread stages whole cells");

__device__ __forceinline__ int warp_min_int(int v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = min(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
__device__ __forceinline__ int warp_max_int(int v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = max(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// in_w and in_h below 2^31 (tiled_forward_usable).
template <class T, int kMode>
__global__ void __launch_bounds__(kThreads, 4)
    tiled_forward_kernel(SampleShape s, const T* __restrict__ input, const T* __restrict__ grid,
                         T* __restrict__ out, int64_t tiles_x, int64_t tiles_y) {
  static_assert(kMode == kBilinear || kMode == kNearest, "bicubic runs sample_forward_kernel");
  constexpr int kPer = kMode == kNearest ? 1 : 2;  // taps per axis
  __shared__ float box[2][kStageChannels][kBoxCapacity];
  __shared__ int bounds[4];  // min x, min y, max x, max y of the tile's inside taps
  const int tid = threadIdx.x;
  int64_t tile = blockIdx.x;
  const int64_t b = tile / (tiles_x * tiles_y);
  tile -= b * tiles_x * tiles_y;
  const int64_t oy = (tile / tiles_x) * kTileH + tid / kTileW;
  const int64_t ox = (tile % tiles_x) * kTileW + tid % kTileW;
  const bool valid = ox < s.out_w && oy < s.out_h;
  const int in_w = static_cast<int>(s.in_w);

  // The taps, as location_taps computes them (FP64 coordinates, FP32 weights wx * wy).
  int ix[kPer], iy[kPer];
  float wx[kPer], wy[kPer];
#pragma unroll
  for (int i = 0; i < kPer; ++i) {
    ix[i] = iy[i] = -1;
    wx[i] = wy[i] = 0.0f;
  }
  if (valid) {
    const T* g = grid + ((b * s.out_h + oy) * s.out_w + ox) * 2;
    const Taps<double> tx =
        axis_taps(static_cast<double>(to_float(g[0])), s.in_w, kMode, s.padding, s.align_corners);
    const Taps<double> ty =
        axis_taps(static_cast<double>(to_float(g[1])), s.in_h, kMode, s.padding, s.align_corners);
#pragma unroll
    for (int i = 0; i < kPer; ++i) {
      ix[i] = static_cast<int>(tx.index[i]);
      iy[i] = static_cast<int>(ty.index[i]);
      wx[i] = static_cast<float>(tx.weight[i]);
      wy[i] = static_cast<float>(ty.weight[i]);
    }
  }
  bool any_x = false, any_y = false;
  int lo_x = INT_MAX, lo_y = INT_MAX, hi_x = -1, hi_y = -1;
#pragma unroll
  for (int i = 0; i < kPer; ++i) {
    any_x = any_x || ix[i] >= 0;
    any_y = any_y || iy[i] >= 0;
  }
  // A tap is read only when both of its indices are inside.
#pragma unroll
  for (int i = 0; i < kPer; ++i) {
    if (any_y && ix[i] >= 0) {
      lo_x = min(lo_x, ix[i]);
      hi_x = max(hi_x, ix[i]);
    }
    if (any_x && iy[i] >= 0) {
      lo_y = min(lo_y, iy[i]);
      hi_y = max(hi_y, iy[i]);
    }
  }
  if (tid == 0) {
    bounds[0] = bounds[1] = INT_MAX;
    bounds[2] = bounds[3] = -1;
  }
  __syncthreads();
  lo_x = warp_min_int(lo_x);
  lo_y = warp_min_int(lo_y);
  hi_x = warp_max_int(hi_x);
  hi_y = warp_max_int(hi_y);
  if ((tid & 31) == 0) {
    atomicMin(&bounds[0], lo_x);
    atomicMin(&bounds[1], lo_y);
    atomicMax(&bounds[2], hi_x);
    atomicMax(&bounds[3], hi_y);
  }
  __syncthreads();
  const int box_x = bounds[0], box_y = bounds[1];
  const int box_w = bounds[2] >= box_x ? bounds[2] - box_x + 1 : 0;
  const int box_h = bounds[3] >= box_y ? bounds[3] - box_y + 1 : 0;
  const int64_t area = static_cast<int64_t>(box_w) * box_h;

  const int64_t in_spatial = s.in_spatial(), out_spatial = s.out_spatial();
  const T* planes = input + b * s.c * in_spatial;
  T* dst = out + b * s.c * out_spatial + oy * s.out_w + ox;

  if (area > kBoxCapacity) {
    // Too spread out to stage: gather from global memory (block-uniform branch).
    if (!valid) return;
#pragma unroll 4
    for (int64_t ch = 0; ch < s.c; ++ch) {
      const T* plane = planes + ch * in_spatial;
      float acc = 0.0f;
#pragma unroll
      for (int j = 0; j < kPer; ++j) {
#pragma unroll
        for (int i = 0; i < kPer; ++i) {
          if (ix[i] >= 0 && iy[j] >= 0)
            acc +=
                wx[i] * wy[j] * to_float(__ldg(plane + static_cast<int64_t>(iy[j]) * in_w + ix[i]));
        }
      }
      dst[ch * out_spatial] = from_float<T>(acc);
    }
    return;
  }

  // The cells this thread stages (the same ones in every channel) and its taps in the box.
  int64_t cell[kBoxPerThread];
  bool staging[kBoxPerThread];
#pragma unroll
  for (int r = 0; r < kBoxPerThread; ++r) {
    const int e = tid + r * kThreads;
    staging[r] = e < area;
    const int row = staging[r] ? e / box_w : 0, col = staging[r] ? e - row * box_w : 0;
    cell[r] = static_cast<int64_t>(box_y + row) * in_w + box_x + col;
  }
  int local[kPer][kPer];
  float weight[kPer][kPer];
#pragma unroll
  for (int j = 0; j < kPer; ++j) {
#pragma unroll
    for (int i = 0; i < kPer; ++i) {
      const bool inside = ix[i] >= 0 && iy[j] >= 0;
      local[j][i] = inside ? (iy[j] - box_y) * box_w + (ix[i] - box_x) : -1;
      weight[j][i] = wx[i] * wy[j];
    }
  }
  float staged[kStageChannels][kBoxPerThread];
  const auto load_group = [&](int64_t c0) {
#pragma unroll
    for (int g = 0; g < kStageChannels; ++g) {
      const T* plane = planes + (c0 + g) * in_spatial;
#pragma unroll
      for (int r = 0; r < kBoxPerThread; ++r) {
        staged[g][r] = (staging[r] && c0 + g < s.c) ? to_float(__ldg(plane + cell[r])) : 0.0f;
      }
    }
  };
  load_group(0);
  int stage = 0;
  for (int64_t c0 = 0; c0 < s.c; c0 += kStageChannels) {
    // box[stage] was last read two groups ago, before the previous group's barrier.
#pragma unroll
    for (int g = 0; g < kStageChannels; ++g) {
#pragma unroll
      for (int r = 0; r < kBoxPerThread; ++r) {
        if (staging[r]) box[stage][g][tid + r * kThreads] = staged[g][r];
      }
    }
    __syncthreads();
    if (c0 + kStageChannels < s.c) load_group(c0 + kStageChannels);
    if (valid) {
#pragma unroll
      for (int g = 0; g < kStageChannels; ++g) {
        if (c0 + g >= s.c) break;
        float acc = 0.0f;
#pragma unroll
        for (int j = 0; j < kPer; ++j) {
#pragma unroll
          for (int i = 0; i < kPer; ++i) {
            if (local[j][i] >= 0) acc += weight[j][i] * box[stage][g][local[j][i]];
          }
        }
        dst[(c0 + g) * out_spatial] = from_float<T>(acc);
      }
    }
    stage ^= 1;
  }
}

// Whether tiled_forward_kernel takes the problem: 2-D bilinear or nearest, 32-bit input
// coordinates, and outputs at least half a tile wide (narrower ones would idle most threads).
inline bool tiled_forward_usable(const SampleShape& s) {
  if (s.dims != 2 || s.mode == kBicubic) return false;
  if (s.in_w >= (int64_t{1} << 31) || s.in_h >= (int64_t{1} << 31)) return false;
  if (s.out_w < kTileW / 2) return false;
  const int64_t tiles = s.n * ((s.out_h + kTileH - 1) / kTileH) * ((s.out_w + kTileW - 1) / kTileW);
  return tiles < (int64_t{1} << 31);
}

// ---- Whole-plane 2-D forward ----------------------------------------------------------------
// For planes of at most kPlaneStage * kPlaneThreads cells: a block owns kPlaneChunk output
// locations of one batch entry, works out their taps once (in registers), then walks the
// channels with the whole input plane in shared memory (double-buffered: the next plane's
// coalesced loads are in flight while the current one is sampled). Whatever the grid, every
// tap is a shared-memory read: a random grid, whose taps each cost a 32-byte sector from L2
// in the direct kernel (10 % of the copy bandwidth), costs here the plane's coalesced reload
// by each of the out_spatial / kPlaneChunk blocks of its batch entry.
constexpr int kPlaneThreads = 1024;
constexpr int kPlaneLocations = 4;  // per thread
constexpr int64_t kPlaneChunk = int64_t{kPlaneThreads} * kPlaneLocations;
constexpr int kPlaneStage = 16;  // plane cells each thread stages

// The cells [first, first + count) of a plane that hold every row a block's taps read (the
// rows lo..hi of the block, -1 / -1 for none), widened to whole 16-byte vectors within the
// plane: only those are staged. A random grid's block reads the whole plane; an affine warp's
// reads a band of rows (a third to a half of a [128, 128] plane at the bench's rotations).
struct PlaneSpan {
  int first = 0, count = 0;
};
// Every thread of the block calls it with its own lo / hi (barriers inside).
__device__ __forceinline__ PlaneSpan block_plane_span(int lo, int hi, int in_w, int in_spatial,
                                                      int* shared_rows) {
  if (threadIdx.x == 0) {
    shared_rows[0] = INT_MAX;
    shared_rows[1] = -1;
  }
  __syncthreads();
  lo = warp_min_int(lo);
  hi = warp_max_int(hi);
  if ((threadIdx.x & 31) == 0) {
    atomicMin(&shared_rows[0], lo);
    atomicMax(&shared_rows[1], hi);
  }
  __syncthreads();
  PlaneSpan span;
  if (shared_rows[1] >= 0) {
    span.first = shared_rows[0] * in_w / 4 * 4;
    span.count = min(in_spatial, ((shared_rows[1] + 1) * in_w + 3) / 4 * 4) - span.first;
  }
  return span;
}

// The rows a location's taps read (mask bits j * 2 + i for tap (i, j); first row y0).
__device__ __forceinline__ void widen_rows(int mask, int y0, int& lo, int& hi) {
  if (mask & 3) {
    lo = min(lo, y0);
    hi = max(hi, y0);
  }
  if (mask & 12) {
    lo = min(lo, y0 + 1);
    hi = max(hi, y0 + 1);
  }
}

template <class T, int kMode>
__global__ void __launch_bounds__(kPlaneThreads, 1)
    plane_forward_kernel(SampleShape s, const T* __restrict__ input, const T* __restrict__ grid,
                         T* __restrict__ out, int64_t chunks) {
  static_assert(kMode == kBilinear || kMode == kNearest, "bicubic runs sample_forward_kernel");
  constexpr int kPer = kMode == kNearest ? 1 : 2;
  extern __shared__ float planes[];  // [2][in_spatial]
  const int tid = threadIdx.x;
  const int64_t b = blockIdx.x / chunks, chunk = blockIdx.x - b * chunks;
  const int in_spatial = static_cast<int>(s.in_spatial()), in_w = static_cast<int>(s.in_w);
  const int64_t out_spatial = s.out_spatial();

  // Per location: code = (offset of tap (0, 0) + in_w + 1) << 4 | inside bits (bit j*2+i for
  // tap (i, j)); the per-axis weights, multiplied at use as location_taps multiplies them.
  __shared__ int span_rows[2];
  int code[kPlaneLocations];
  float wx[kPlaneLocations][kPer], wy[kPlaneLocations][kPer];
  int row_lo = INT_MAX, row_hi = -1;
#pragma unroll
  for (int l = 0; l < kPlaneLocations; ++l) {
    code[l] = 0;
    const int64_t o = chunk * kPlaneChunk + l * kPlaneThreads + tid;
    if (o >= out_spatial) continue;
    const T* g = grid + (b * out_spatial + o) * 2;
    const Taps<double> tx =
        axis_taps(static_cast<double>(to_float(g[0])), s.in_w, kMode, s.padding, s.align_corners);
    const Taps<double> ty =
        axis_taps(static_cast<double>(to_float(g[1])), s.in_h, kMode, s.padding, s.align_corners);
    int x0 = -1, y0 = -1;
#pragma unroll
    for (int i = kPer - 1; i >= 0; --i) {
      if (tx.index[i] >= 0) x0 = static_cast<int>(tx.index[i]) - i;
      if (ty.index[i] >= 0) y0 = static_cast<int>(ty.index[i]) - i;
    }
    int mask = 0;
#pragma unroll
    for (int j = 0; j < kPer; ++j) {
#pragma unroll
      for (int i = 0; i < kPer; ++i) {
        if (tx.index[i] >= 0 && ty.index[j] >= 0) mask |= 1 << (j * 2 + i);
      }
      wx[l][j] = static_cast<float>(tx.weight[j]);
      wy[l][j] = static_cast<float>(ty.weight[j]);
    }
    // With any tap inside, x0 >= -1 and y0 >= -1, so the biased offset is >= 0.
    code[l] = mask != 0 ? ((y0 * in_w + x0 + in_w + 1) << 4) | mask : 0;
    widen_rows(mask, y0, row_lo, row_hi);
  }
  const PlaneSpan span = block_plane_span(row_lo, row_hi, in_w, in_spatial, span_rows);

  const T* src = input + b * s.c * static_cast<int64_t>(in_spatial) + span.first;
  float staged[kPlaneStage];
  const auto load_plane = [&](int64_t ch) {
    const T* plane = src + ch * in_spatial;
#pragma unroll
    for (int r = 0; r < kPlaneStage; ++r) {
      const int e = tid + r * kPlaneThreads;
      if (e < span.count) staged[r] = to_float(__ldg(plane + e));
    }
  };
  load_plane(0);
  T* dst = out + b * s.c * out_spatial + chunk * kPlaneChunk + tid;
  for (int64_t ch = 0; ch < s.c; ++ch) {
    // This buffer was last read two channels ago, before the previous channel's barrier.
    float* buf = planes + (ch & 1) * in_spatial;
#pragma unroll
    for (int r = 0; r < kPlaneStage; ++r) {
      const int e = tid + r * kPlaneThreads;
      if (e < span.count) buf[e] = staged[r];
    }
    __syncthreads();
    if (ch + 1 < s.c) load_plane(ch + 1);
#pragma unroll
    for (int l = 0; l < kPlaneLocations; ++l) {
      if (chunk * kPlaneChunk + l * kPlaneThreads + tid >= out_spatial) continue;
      const int base = (code[l] >> 4) - in_w - 1 - span.first;
      float acc = 0.0f;
#pragma unroll
      for (int j = 0; j < kPer; ++j) {
#pragma unroll
        for (int i = 0; i < kPer; ++i) {
          // Outside taps are skipped, not weighted by 0 (an inf must not leak).
          if (code[l] & (1 << (j * 2 + i))) acc += wx[l][i] * wy[l][j] * buf[base + j * in_w + i];
        }
      }
      dst[ch * out_spatial + l * kPlaneThreads] = from_float<T>(acc);
    }
  }
}

// Whether plane_forward_kernel takes the problem: 2-D bilinear or nearest, a plane that fits
// the staging registers, and enough locations per batch entry that reloading the plane per
// block of kPlaneChunk locations costs less than the taps it serves: up to 4 coalesced cells
// (16 bytes at f32) per location, against a sector from L2 for each tap of a scattered grid
// (a [128, 128] plane sampled at 128 x 128 is 4 blocks of 4096 locations per batch entry).
inline bool plane_forward_usable(const SampleShape& s) {
  if (s.dims != 2 || s.mode == kBicubic) return false;
  const int64_t in_spatial = s.in_spatial(), out_spatial = s.out_spatial();
  if (in_spatial > int64_t{kPlaneStage} * kPlaneThreads) return false;
  if (std::min(out_spatial, kPlaneChunk) * 4 < in_spatial) return false;
  return s.n * ((out_spatial + kPlaneChunk - 1) / kPlaneChunk) < (int64_t{1} << 31);
}

// ---- Whole-plane 2-D bilinear backward (atomic input gradient) ------------------------------
// The forward's plane blocks, run backwards: a block owns kPlaneChunk locations of one batch
// entry and walks the channels with the input plane in shared memory (the grid gradient's
// taps) beside an FP32 plane that collects the channel's input gradient with shared-memory
// atomics; that plane is then added to dinput_f32 with coalesced global atomics, once per cell
// per block (out_spatial / kPlaneChunk blocks add into each plane). The per-tap global atomics
// and gathers of sample_backward_kernel, scattered over a random grid's image, become
// coalesced traffic. Each location belongs to one block, which sums its grid gradient over
// every channel: no atomics there. 512 threads of 8 locations, one plane of input (the next
// one is copied in while the current input gradient is flushed).
constexpr int kPlaneBackThreads = 512;

// 4 bytes global -> shared without a register, as cp.async (sm_80 on); a plain copy before.
__device__ __forceinline__ void copy_async_4(float* shared_dst, const float* src) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" ::"r"(
                   static_cast<unsigned>(__cvta_generic_to_shared(shared_dst))),
               "l"(src)
               : "memory");
#else
  *shared_dst = __ldg(src);
#endif
}
__device__ __forceinline__ void copy_async_commit() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.commit_group;" ::: "memory");
#endif
}
__device__ __forceinline__ void copy_async_wait_all() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.wait_all;" ::: "memory");
#endif
}
constexpr int kPlaneBackLocations = static_cast<int>(kPlaneChunk / kPlaneBackThreads);
constexpr int kPlaneBackStage = kPlaneStage * kPlaneThreads / kPlaneBackThreads;

template <class T>
__global__ void __launch_bounds__(kPlaneBackThreads, 1)
    plane_backward_kernel(SampleShape s, const T* __restrict__ dout, const T* __restrict__ input,
                          const T* __restrict__ grid, float* __restrict__ dinput_f32,
                          T* __restrict__ dgrid, int64_t chunks, bool vector_flush) {
  // [in_spatial] input, [in_spatial] dinput, [2][kPlaneChunk] the locations' grid gradient
  // (in shared memory rather than registers, which the taps fill).
  extern __shared__ float plane_backward_shared[];
  const int tid = threadIdx.x;
  const int64_t b = blockIdx.x / chunks, chunk = blockIdx.x - b * chunks;
  const int in_spatial = static_cast<int>(s.in_spatial()), in_w = static_cast<int>(s.in_w);
  const int64_t out_spatial = s.out_spatial();
  float* buf = plane_backward_shared;
  float* dplane = plane_backward_shared + in_spatial;
  float* gxy = plane_backward_shared + 2 * in_spatial;

  // Per location: as plane_forward_kernel's code and weights, and each axis' weight slope
  // (bilinear: -m for tap 0, +m for tap 1; location_taps' dx = dwx * wy, dy = wx * dwy).
  __shared__ int span_rows[2];
  int code[kPlaneBackLocations];
  float wx[kPlaneBackLocations][2], wy[kPlaneBackLocations][2], mx[kPlaneBackLocations],
      my[kPlaneBackLocations];
  int row_lo = INT_MAX, row_hi = -1;
#pragma unroll
  for (int l = 0; l < kPlaneBackLocations; ++l) {
    code[l] = 0;
    wx[l][0] = wx[l][1] = wy[l][0] = wy[l][1] = mx[l] = my[l] = 0.0f;
    const int64_t o = chunk * kPlaneChunk + l * kPlaneBackThreads + tid;
    if (o >= out_spatial) continue;
    const T* g = grid + (b * out_spatial + o) * 2;
    const Taps<double> tx = axis_taps(static_cast<double>(to_float(g[0])), s.in_w, kBilinear,
                                      s.padding, s.align_corners);
    const Taps<double> ty = axis_taps(static_cast<double>(to_float(g[1])), s.in_h, kBilinear,
                                      s.padding, s.align_corners);
    int x0 = -1, y0 = -1;
#pragma unroll
    for (int i = 1; i >= 0; --i) {
      if (tx.index[i] >= 0) x0 = static_cast<int>(tx.index[i]) - i;
      if (ty.index[i] >= 0) y0 = static_cast<int>(ty.index[i]) - i;
    }
    int mask = 0;
#pragma unroll
    for (int j = 0; j < 2; ++j) {
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        if (tx.index[i] >= 0 && ty.index[j] >= 0) mask |= 1 << (j * 2 + i);
      }
      wx[l][j] = static_cast<float>(tx.weight[j]);
      wy[l][j] = static_cast<float>(ty.weight[j]);
    }
    mx[l] = static_cast<float>(tx.dweight[1]);
    my[l] = static_cast<float>(ty.dweight[1]);
    code[l] = mask != 0 ? ((y0 * in_w + x0 + in_w + 1) << 4) | mask : 0;
    widen_rows(mask, y0, row_lo, row_hi);
  }
  // buf and dplane hold the span's cells only (the block's taps touch no others).
  const PlaneSpan span = block_plane_span(row_lo, row_hi, in_w, in_spatial, span_rows);

  const int64_t plane_base = b * s.c * static_cast<int64_t>(in_spatial);
  const T* src = input + plane_base + span.first;
  // Plane ch into buf. F32: asynchronous copies (no registers: the taps of 8 locations hold
  // most of them), completed at the next barrier's wait; 16-bit types: converted through
  // registers 8 cells at a time.
  const auto fill_plane = [&](int64_t ch) {
    const T* plane = src + ch * in_spatial;
    if constexpr (std::is_same_v<T, float>) {
#pragma unroll 4
      for (int e = tid; e < span.count; e += kPlaneBackThreads) copy_async_4(buf + e, plane + e);
      copy_async_commit();
    } else {
#pragma unroll
      for (int r0 = 0; r0 < kPlaneBackStage; r0 += 8) {
        float v[8];
#pragma unroll
        for (int r = 0; r < 8; ++r) {
          const int e = tid + (r0 + r) * kPlaneBackThreads;
          if (e < span.count) v[r] = to_float(__ldg(plane + e));
        }
#pragma unroll
        for (int r = 0; r < 8; ++r) {
          const int e = tid + (r0 + r) * kPlaneBackThreads;
          if (e < span.count) buf[e] = v[r];
        }
      }
    }
  };
  if (dgrid != nullptr && s.c > 0) fill_plane(0);
  for (int e = tid; e < span.count; e += kPlaneBackThreads) dplane[e] = 0.0f;
  const T* go_base = dout + b * s.c * out_spatial + chunk * kPlaneChunk + tid;
#pragma unroll
  for (int l = 0; l < kPlaneBackLocations; ++l) {
    gxy[l * kPlaneBackThreads + tid] = 0.0f;
    gxy[kPlaneChunk + l * kPlaneBackThreads + tid] = 0.0f;
  }
  for (int64_t ch = 0; ch < s.c; ++ch) {
    // buf was filled after the previous channel's second barrier (every read of it done);
    // dplane's flush and zeroing are ordered before this channel's atomics by this barrier.
    if constexpr (std::is_same_v<T, float>) copy_async_wait_all();
    __syncthreads();
#pragma unroll
    for (int l = 0; l < kPlaneBackLocations; ++l) {
      if (chunk * kPlaneChunk + l * kPlaneBackThreads + tid >= out_spatial) continue;
      const float go = to_float(__ldg(go_base + ch * out_spatial + l * kPlaneBackThreads));
      const int base = (code[l] >> 4) - in_w - 1 - span.first;
      float gx = 0.0f, gy = 0.0f;
      if (dgrid != nullptr) {
        gx = gxy[l * kPlaneBackThreads + tid];
        gy = gxy[kPlaneChunk + l * kPlaneBackThreads + tid];
      }
#pragma unroll
      for (int j = 0; j < 2; ++j) {
#pragma unroll
        for (int i = 0; i < 2; ++i) {
          // Outside taps are skipped, not weighted by 0 (an inf must not leak).
          if (!(code[l] & (1 << (j * 2 + i)))) continue;
          const int at = base + j * in_w + i;
          if (dinput_f32 != nullptr && go != 0.0f) atomicAdd(dplane + at, wx[l][i] * wy[l][j] * go);
          if (dgrid != nullptr) {
            const float v = buf[at] * go;
            gx += v * ((i == 0 ? -mx[l] : mx[l]) * wy[l][j]);
            gy += v * (wx[l][i] * (j == 0 ? -my[l] : my[l]));
          }
        }
      }
      if (dgrid != nullptr) {
        gxy[l * kPlaneBackThreads + tid] = gx;
        gxy[kPlaneChunk + l * kPlaneBackThreads + tid] = gy;
      }
    }
    __syncthreads();  // buf is read and the channel's shared atomics are complete
    if (dgrid != nullptr && ch + 1 < s.c) fill_plane(ch + 1);
    if (dinput_f32 != nullptr) {
      float* dst = dinput_f32 + plane_base + ch * in_spatial + span.first;
      bool flushed = false;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
      if (vector_flush) {
        // One 16-byte atomic per 4 cells: the flush is bound by the L2's atomic operations,
        // not its bytes (out_spatial / kPlaneChunk blocks add every cell of each plane).
        float4* dst4 = reinterpret_cast<float4*>(dst);
        float4* dplane4 = reinterpret_cast<float4*>(dplane);
        const float4 zero = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll 4
        for (int e = tid; e < span.count / 4; e += kPlaneBackThreads) {
          const float4 v = dplane4[e];
          if (v.x != 0.0f || v.y != 0.0f || v.z != 0.0f || v.w != 0.0f) atomicAdd(dst4 + e, v);
          dplane4[e] = zero;
        }
        flushed = true;
      }
#endif
      if (!flushed) {
#pragma unroll 4
        for (int e = tid; e < span.count; e += kPlaneBackThreads) {
          const float v = dplane[e];
          if (v != 0.0f) atomicAdd(dst + e, v);  // dinput_f32 starts at 0: adding 0 is a no-op
          dplane[e] = 0.0f;
        }
      }
    }
  }
  if (dgrid != nullptr) {
#pragma unroll
    for (int l = 0; l < kPlaneBackLocations; ++l) {
      const int64_t o = chunk * kPlaneChunk + l * kPlaneBackThreads + tid;
      if (o >= out_spatial) continue;
      T* dst = dgrid + (b * out_spatial + o) * 2;
      dst[0] = from_float<T>(gxy[l * kPlaneBackThreads + tid]);
      dst[1] = from_float<T>(gxy[kPlaneChunk + l * kPlaneBackThreads + tid]);
    }
  }
}

// Whether plane_backward_kernel takes the problem: bilinear, and what plane_forward_usable
// asks (its shared memory: two planes, 2 * 64 KB at most, and 32 KB of grid gradients).
inline size_t plane_backward_shared_bytes(int64_t in_spatial) {
  return sizeof(float) * static_cast<size_t>(2 * in_spatial + 2 * kPlaneChunk);
}
inline bool plane_backward_usable(const SampleShape& s) {
  return s.mode == kBilinear && plane_forward_usable(s);
}

// dgrid per location (no atomics); dinput scattered with FP32 atomics into `dinput_f32`.
template <class T, int kMode, int kDims>
__global__ void __launch_bounds__(kThreads)
    sample_backward_kernel(SampleShape s, const T* __restrict__ dout, const T* __restrict__ input,
                           const T* __restrict__ grid, float* __restrict__ dinput_f32,
                           T* __restrict__ dgrid) {
  const int64_t location = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (location >= s.locations()) return;
  const int64_t out_spatial = s.out_spatial(), in_spatial = s.in_spatial();
  const int64_t b = location / out_spatial, o = location - b * out_spatial;
  const bool want_dgrid = dgrid != nullptr && kMode != kNearest;
  const auto t = location_taps<kMode, kDims>(s, grid, location, want_dgrid);
  const int64_t first_plane = b * s.c * in_spatial;
  const T* g = dout + b * s.c * out_spatial + o;
  float gx = 0.0f, gy = 0.0f, gz = 0.0f;
  for (int64_t ch = 0; ch < s.c; ++ch) {
    const float go = to_float(__ldg(g));
    const int64_t plane = first_plane + ch * in_spatial;
    if (dinput_f32 != nullptr && go != 0.0f) {
#pragma unroll
      for (int k = 0; k < t.kCount; ++k) {
        if (t.inside & (1u << k)) atomicAdd(dinput_f32 + plane + t.offset[k], t.weight[k] * go);
      }
    }
    if (want_dgrid) {
#pragma unroll
      for (int k = 0; k < t.kCount; ++k) {
        if (!(t.inside & (1u << k))) continue;
        const float v = to_float(__ldg(input + plane + t.offset[k])) * go;
        gx += v * t.dx[k];
        gy += v * t.dy[k];
        if constexpr (kDims == 3) gz += v * t.dz[k];
      }
    }
    g += out_spatial;
  }
  if (dgrid != nullptr) {
    T* dst = dgrid + location * kDims;
    dst[0] = from_float<T>(gx);
    dst[1] = from_float<T>(gy);
    if constexpr (kDims == 3) dst[2] = from_float<T>(gz);
  }
}

template <class T>
__global__ void __launch_bounds__(kThreads)
    round_accumulator_kernel(const float* __restrict__ from, T* __restrict__ to, int64_t count) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kThreads;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; i < count;
       i += stride) {
    to[i] = from_float<T>(from[i]);
  }
}

// ---- Deterministic input gradient ---------------------------------------------------------
// Every (location, tap) pair is an entry e = location * kCount + tap: its key is the input
// cell it feeds (batch * in_spatial + offset; outside taps get the sentinel n * in_spatial,
// which sorts last), its value e. A stable radix sort by key (deterministic.cu) groups the
// entries of each cell in increasing e; each cell's segment [begin, end) of the sorted order
// is then summed in that order for every channel: no atomics, the same bits every run.

// Where the pieces live in SampleBackward::scratch (256-byte aligned).
struct DeterministicLayout {
  int64_t entries = 0;  // locations * taps per location
  int64_t cells = 0;    // n * in_spatial: the sentinel key
  int end_bit = 1;      // key bits the sort looks at
  int64_t keys_in = 0, keys_out = 0, ids_in = 0, ids_out = 0, weights = 0, begin = 0, end = 0;
  int64_t sort_temp = 0;
  size_t sort_temp_bytes = 0;
  int64_t bytes = 0;
};
DeterministicLayout deterministic_layout(const SampleShape& s);
// Sorts (keys_in, ids_in) into (keys_out, ids_out) on `stream`.
void sort_contributions(const DeterministicLayout& l, char* scratch, cudaStream_t stream);
// begin/end of each cell's run of keys in keys_out (cells with no entry keep 0 / 0).
void mark_segments(const DeterministicLayout& l, char* scratch, cudaStream_t stream);

template <int kMode, int kDims>
constexpr int taps_per_location() {
  return LocationTaps<kMode, kDims>::kCount;
}

template <class T, int kMode, int kDims>
__global__ void __launch_bounds__(kThreads)
    contributions_kernel(SampleShape s, const T* __restrict__ grid, uint64_t* __restrict__ keys,
                         uint64_t* __restrict__ ids, float* __restrict__ weights) {
  constexpr int kCount = taps_per_location<kMode, kDims>();
  const int64_t location = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (location >= s.locations()) return;
  const int64_t in_spatial = s.in_spatial();
  const int64_t b = location / s.out_spatial();
  const auto t = location_taps<kMode, kDims>(s, grid, location, false);
  const uint64_t sentinel = static_cast<uint64_t>(s.n * in_spatial);
#pragma unroll
  for (int k = 0; k < kCount; ++k) {
    const int64_t e = location * kCount + k;
    keys[e] =
        (t.inside & (1u << k)) ? static_cast<uint64_t>(b * in_spatial + t.offset[k]) : sentinel;
    ids[e] = static_cast<uint64_t>(e);
    weights[e] = t.weight[k];
  }
}

// Each thread owns one input cell and kGatherChannels channels at a time, so that an entry's
// id and weight are read once for those channels; consecutive threads write consecutive cells.
constexpr int kGatherChannels = 8;

template <class T, int kCount>
__global__ void __launch_bounds__(kThreads)
    gather_kernel(SampleShape s, const T* __restrict__ dout, const uint64_t* __restrict__ ids,
                  const float* __restrict__ weights, const int64_t* __restrict__ begin,
                  const int64_t* __restrict__ end, T* __restrict__ dinput) {
  const int64_t in_spatial = s.in_spatial(), out_spatial = s.out_spatial();
  const int64_t cells = s.n * in_spatial;
  for (int64_t at = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; at < cells;
       at += static_cast<int64_t>(gridDim.x) * kThreads) {
    const int64_t b = at / in_spatial, cell = at - b * in_spatial;
    const int64_t lo = begin[at], hi = end[at];
    for (int64_t c0 = static_cast<int64_t>(blockIdx.y) * kGatherChannels; c0 < s.c;
         c0 += static_cast<int64_t>(gridDim.y) * kGatherChannels) {
      const int64_t count = s.c - c0 < kGatherChannels ? s.c - c0 : kGatherChannels;
      const T* src = dout + (b * s.c + c0) * out_spatial;
      const int64_t first_location = b * out_spatial;
      float acc[kGatherChannels];
#pragma unroll
      for (int j = 0; j < kGatherChannels; ++j) acc[j] = 0.0f;
      for (int64_t i = lo; i < hi; ++i) {
        const uint64_t e = ids[i];
        const float w = weights[e];
        const int64_t o = static_cast<int64_t>(e / kCount) - first_location;
#pragma unroll
        for (int j = 0; j < kGatherChannels; ++j) {
          if (j < count) acc[j] += w * to_float(src[j * out_spatial + o]);
        }
      }
      T* dst = dinput + (b * s.c + c0) * in_spatial + cell;
#pragma unroll
      for (int j = 0; j < kGatherChannels; ++j) {
        if (j < count) dst[j * in_spatial] = from_float<T>(acc[j]);
      }
    }
  }
}

inline unsigned blocks_for(int64_t items) {
  return static_cast<unsigned>((items + kThreads - 1) / kThreads);
}

// Calls f(mode constant, dims constant) for the problem's mode and rank.
template <class F>
void with_mode(const SampleShape& s, F&& f) {
  using M = std::integral_constant<int, kBilinear>;
  using N = std::integral_constant<int, kNearest>;
  using B = std::integral_constant<int, kBicubic>;
  using D2 = std::integral_constant<int, 2>;
  using D3 = std::integral_constant<int, 3>;
  if (s.dims == 2) {
    if (s.mode == kBilinear) return f(M{}, D2{});
    if (s.mode == kNearest) return f(N{}, D2{});
    return f(B{}, D2{});
  }
  if (s.mode == kNearest) return f(N{}, D3{});
  return f(M{}, D3{});  // bicubic 3-D is refused by the entry point
}

template <class T>
void sample_forward_typed(const SampleForward& p, cudaStream_t stream) {
  const SampleShape& s = p.s;
  if (s.locations() == 0 || s.c == 0) return;  // nothing to write (and no plane to stage)
  if (plane_forward_usable(s)) {
    const int64_t chunks = (s.out_spatial() + kPlaneChunk - 1) / kPlaneChunk;
    const unsigned blocks = static_cast<unsigned>(s.n * chunks);
    const size_t shared = 2 * sizeof(float) * static_cast<size_t>(s.in_spatial());
    const T* input = static_cast<const T*>(p.input);
    const T* grid = static_cast<const T*>(p.grid);
    T* out = static_cast<T*>(p.out);
    int device = 0;
    detail::check_cuda(cudaGetDevice(&device), "cudaGetDevice");
    // Beyond the default 48 KB of dynamic shared memory: the largest plane's two buffers, set
    // once per device and kernel (the first call is eager, outside any graph capture).
    const auto launch = [&](auto kernel, rudnn::cuda::PerDevice<int>& allowed) {
      allowed.get(Device::cuda(device), [&] {
        detail::check_cuda(
            cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 static_cast<int>(2 * sizeof(float) * kPlaneStage * kPlaneThreads)),
            "cudaFuncSetAttribute");
        return 1;
      });
      kernel<<<blocks, kPlaneThreads, shared, stream>>>(s, input, grid, out, chunks);
    };
    static rudnn::cuda::PerDevice<int> bilinear_allowed, nearest_allowed;
    if (s.mode == kBilinear) {
      launch(plane_forward_kernel<T, kBilinear>, bilinear_allowed);
    } else {
      launch(plane_forward_kernel<T, kNearest>, nearest_allowed);
    }
    detail::check_launch("grid_sample forward");
    return;
  }
  if (tiled_forward_usable(s)) {
    const int64_t tiles_x = (s.out_w + kTileW - 1) / kTileW,
                  tiles_y = (s.out_h + kTileH - 1) / kTileH;
    const unsigned blocks = static_cast<unsigned>(s.n * tiles_x * tiles_y);
    const T* input = static_cast<const T*>(p.input);
    const T* grid = static_cast<const T*>(p.grid);
    T* out = static_cast<T*>(p.out);
    if (s.mode == kBilinear) {
      tiled_forward_kernel<T, kBilinear>
          <<<blocks, kThreads, 0, stream>>>(s, input, grid, out, tiles_x, tiles_y);
    } else {
      tiled_forward_kernel<T, kNearest>
          <<<blocks, kThreads, 0, stream>>>(s, input, grid, out, tiles_x, tiles_y);
    }
    detail::check_launch("grid_sample forward");
    return;
  }
  with_mode(s, [&](auto mode, auto dims) {
    sample_forward_kernel<T, decltype(mode)::value, decltype(dims)::value>
        <<<blocks_for(s.locations()), kThreads, 0, stream>>>(s, static_cast<const T*>(p.input),
                                                             static_cast<const T*>(p.grid),
                                                             static_cast<T*>(p.out));
  });
  detail::check_launch("grid_sample forward");
}

template <class T>
void deterministic_dinput(const SampleBackward& p, cudaStream_t stream) {
  const SampleShape& s = p.s;
  const DeterministicLayout l = deterministic_layout(s);
  char* base = static_cast<char*>(p.scratch);
  auto at = [&](int64_t offset) { return base + offset; };
  with_mode(s, [&](auto mode, auto dims) {
    constexpr int kMode = decltype(mode)::value, kDims = decltype(dims)::value;
    if (l.entries > 0) {
      contributions_kernel<T, kMode, kDims><<<blocks_for(s.locations()), kThreads, 0, stream>>>(
          s, static_cast<const T*>(p.grid), reinterpret_cast<uint64_t*>(at(l.keys_in)),
          reinterpret_cast<uint64_t*>(at(l.ids_in)), reinterpret_cast<float*>(at(l.weights)));
      detail::check_launch("grid_sample backward (deterministic: contributions)");
      sort_contributions(l, base, stream);
    }
    mark_segments(l, base, stream);
    const int64_t cell_blocks = std::min<int64_t>(blocks_for(l.cells), 1 << 20);
    const int64_t channel_blocks =
        std::min<int64_t>((s.c + kGatherChannels - 1) / kGatherChannels, 65535);
    gather_kernel<T, taps_per_location<kMode, kDims>()>
        <<<dim3(static_cast<unsigned>(cell_blocks), static_cast<unsigned>(channel_blocks)),
           kThreads, 0, stream>>>(
            s, static_cast<const T*>(p.dout), reinterpret_cast<const uint64_t*>(at(l.ids_out)),
            reinterpret_cast<const float*>(at(l.weights)),
            reinterpret_cast<const int64_t*>(at(l.begin)),
            reinterpret_cast<const int64_t*>(at(l.end)), static_cast<T*>(p.dinput));
    detail::check_launch("grid_sample backward (deterministic: gather)");
  });
}

template <class T>
void sample_backward_typed(const SampleBackward& p, cudaStream_t stream) {
  const SampleShape& s = p.s;
  const int64_t input_count = s.n * s.c * s.in_spatial();
  if (p.deterministic && p.dinput != nullptr && input_count > 0) {
    deterministic_dinput<T>(p, stream);
    if (p.dgrid == nullptr || s.locations() == 0) return;
    with_mode(s, [&](auto mode, auto dims) {
      sample_backward_kernel<T, decltype(mode)::value, decltype(dims)::value>
          <<<blocks_for(s.locations()), kThreads, 0, stream>>>(
              s, static_cast<const T*>(p.dout), static_cast<const T*>(p.input),
              static_cast<const T*>(p.grid), nullptr, static_cast<T*>(p.dgrid));
    });
    detail::check_launch("grid_sample backward");
    return;
  }
  float* dinput_f32 = nullptr;
  if (p.dinput != nullptr) {
    dinput_f32 =
        p.dinput_accumulator != nullptr ? p.dinput_accumulator : static_cast<float*>(p.dinput);
    detail::check_cuda(cudaMemsetAsync(dinput_f32, 0, input_count * sizeof(float), stream),
                       "cudaMemsetAsync");
  }
  if (s.locations() > 0 && plane_backward_usable(s)) {
    const int64_t chunks = (s.out_spatial() + kPlaneChunk - 1) / kPlaneChunk;
    int device = 0;
    detail::check_cuda(cudaGetDevice(&device), "cudaGetDevice");
    // Beyond the default 48 KB of dynamic shared memory, as the plane forward (once per
    // device, on the first, eager call).
    static rudnn::cuda::PerDevice<int> allowed;
    allowed.get(Device::cuda(device), [&] {
      detail::check_cuda(
          cudaFuncSetAttribute(plane_backward_kernel<T>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                               static_cast<int>(plane_backward_shared_bytes(kPlaneStage * kPlaneThreads))),
          "cudaFuncSetAttribute");
      return 1;
    });
    plane_backward_kernel<T><<<static_cast<unsigned>(s.n * chunks), kPlaneBackThreads,
                               plane_backward_shared_bytes(s.in_spatial()), stream>>>(
        s, static_cast<const T*>(p.dout), static_cast<const T*>(p.input),
        static_cast<const T*>(p.grid), dinput_f32, static_cast<T*>(p.dgrid), chunks,
        s.in_spatial() % 4 == 0 && reinterpret_cast<uintptr_t>(dinput_f32) % 16 == 0);
    detail::check_launch("grid_sample backward");
  } else if (s.locations() > 0) {
    with_mode(s, [&](auto mode, auto dims) {
      sample_backward_kernel<T, decltype(mode)::value, decltype(dims)::value>
          <<<blocks_for(s.locations()), kThreads, 0, stream>>>(
              s, static_cast<const T*>(p.dout), static_cast<const T*>(p.input),
              static_cast<const T*>(p.grid), dinput_f32, static_cast<T*>(p.dgrid));
    });
    detail::check_launch("grid_sample backward");
  }
  if (p.dinput != nullptr && p.dinput_accumulator != nullptr && input_count > 0) {
    const int64_t blocks = std::min<int64_t>(blocks_for(input_count), 65536);
    round_accumulator_kernel<T><<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(
        p.dinput_accumulator, static_cast<T*>(p.dinput), input_count);
    detail::check_launch("grid_sample backward (rounding dinput)");
  }
}

}  // namespace rudnn::grid_sample_detail::cuda
