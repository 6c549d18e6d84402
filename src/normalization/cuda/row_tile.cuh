// How the row kernels of this family map threads onto rows.
//
// Register tiles: kThreadsPerRow threads share a row; thread t holds the vectors
// (i * kThreadsPerRow + t) for i < kVecs, each of kWidth consecutive elements, in FP32
// registers, so a row is read from memory once however many passes the math makes over
// it. Rows up to kThreadsPerRow * kVecs * kWidth elements fit; warp tiles (32 threads) put
// four rows in a block, larger tiles one.
//
// Loop tiles take any row length: a block of kLoopThreads walks its row in strides of
// kLoopThreads * kWidth, re-reading it (from L2 for rows that fit there) for each pass.
//
// Vectorised tiles (kWidth = 16 bytes / element size) need every row pointer 16-byte
// aligned, row strides and H multiples of kWidth, and parameter vectors aligned; anything
// else runs the loop tile with kWidth = 1.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <initializer_list>

#include "core/cuda_api.h"
#include "core/cuda_check.h"
#include "cuda/launch.cuh"
#include "cuda/reduce.cuh"
#include "cuda/types.cuh"
#include "cuda/vec.cuh"
#include "normalization/problem.h"
#include "rudnn/stream.h"

namespace rudnn::norm::cuda {

using rudnn::cuda::built_for_hopper;
using rudnn::cuda::device_info;
using rudnn::cuda::from_float;
using rudnn::cuda::LaunchContext;
using rudnn::cuda::PerDevice;
using rudnn::cuda::resident_blocks;
using rudnn::cuda::to_float;
using rudnn::cuda::with_float_type;
using rudnn::detail::check_cuda;
using rudnn::detail::check_launch;

template <int kThreadsPerRow_, int kVecs_, int kWidth_>
struct RegisterTile {
  static constexpr bool kLoop = false;
  static constexpr int kThreadsPerRow = kThreadsPerRow_;
  static constexpr int kVecs = kVecs_;
  static constexpr int kWidth = kWidth_;
  static constexpr int kRowsPerBlock = kThreadsPerRow >= 128 ? 1 : 128 / kThreadsPerRow;
  static constexpr int kBlockThreads = kThreadsPerRow * kRowsPerBlock;
  // For __launch_bounds__: 1024 threads' worth of these blocks per SM, i.e. at most 64
  // registers per thread. The forward kernels are bound by the bytes in flight per SM, that
  // is by how many rows are resident at once.
  static constexpr int kMinBlocksPerSm = 1024 / kBlockThreads;
};

constexpr int kLoopThreads = 512;

template <int kWidth_>
struct LoopTile {
  static constexpr bool kLoop = true;
  static constexpr int kThreadsPerRow = kLoopThreads;
  static constexpr int kWidth = kWidth_;
  static constexpr int kRowsPerBlock = 1;
  static constexpr int kBlockThreads = kLoopThreads;
  static constexpr int kUnroll = 4;  // vectors loaded back to back before they are used
};

// The register tiles, smallest first; the first that holds H is used.
enum class TileId { warp_x1, warp_x2, warp_x4, block128, block256, block512, block1024, loop };

struct TileChoice {
  TileId id = TileId::loop;
  bool vectorized = false;
};

// 16-byte alignment of every pointer and row stride the kernel touches.
struct Alignment {
  bool ok = true;
  void pointer(const void* p) {
    if (p != nullptr && reinterpret_cast<uintptr_t>(p) % 16 != 0) ok = false;
  }
  void stride(int64_t elements, size_t element_size) {
    if ((elements * static_cast<int64_t>(element_size)) % 16 != 0) ok = false;
  }
};

// The tile for rows of `cols` elements: the smallest register tile that holds a row,
// up to `largest`, else a loop tile.
inline TileChoice choose_tile(int64_t cols, int width, const Alignment& alignment, TileId largest) {
  TileChoice c;
  c.vectorized = alignment.ok && cols % width == 0;
  if (!c.vectorized) return c;  // the scalar loop tile
  const int64_t vectors = cols / width;
  if (vectors <= 32)
    c.id = TileId::warp_x1;
  else if (vectors <= 64)
    c.id = TileId::warp_x2;
  else if (vectors <= 128)
    c.id = TileId::warp_x4;
  else if (vectors <= 512)
    c.id = TileId::block128;
  else if (vectors <= 1024)
    c.id = TileId::block256;
  else if (vectors <= 2048)
    c.id = TileId::block512;
  else if (vectors <= 4096)
    c.id = TileId::block1024;
  else
    c.id = TileId::loop;
  if (c.id > largest) c.id = TileId::loop;
  return c;
}

// Chooses the tile for elements of type T and calls f(Tile{}) with its type. kLargest caps
// the register tiles (kernels that hold more per element, like the backward passes, would
// spill in the biggest ones); tiles above it are not instantiated.
template <class T, TileId kLargest = TileId::block1024, class F>
void with_tile(int64_t cols, const Alignment& alignment, F&& f) {
  constexpr int W = 16 / sizeof(T);
  const TileChoice choice = choose_tile(cols, W, alignment, kLargest);
  if (!choice.vectorized) return f(LoopTile<1>{});
  switch (choice.id) {
    case TileId::warp_x1:
      return f(RegisterTile<32, 1, W>{});
    case TileId::warp_x2:
      return f(RegisterTile<32, 2, W>{});
    case TileId::warp_x4:
      return f(RegisterTile<32, 4, W>{});
    case TileId::block128:
      return f(RegisterTile<128, 4, W>{});
    case TileId::block256:
      if constexpr (kLargest >= TileId::block256) return f(RegisterTile<256, 4, W>{});
      break;
    case TileId::block512:
      if constexpr (kLargest >= TileId::block512) return f(RegisterTile<512, 4, W>{});
      break;
    case TileId::block1024:
      if constexpr (kLargest >= TileId::block1024) return f(RegisterTile<1024, 4, W>{});
      break;
    case TileId::loop:
      break;
  }
  return f(LoopTile<W>{});
}

// Blocks for `rows` rows; the kernels stride over rows beyond the grid.
inline unsigned row_grid(int64_t rows, int rows_per_block) {
  const int64_t blocks = (rows + rows_per_block - 1) / rows_per_block;
  return static_cast<unsigned>(blocks < (1 << 30) ? blocks : (1 << 30));
}

// Thread coordinates of a row kernel: which row slot of the block this thread serves, and
// its index among the row's threads.
template <class Tile>
struct RowThread {
  int lane;
  int slot;

  __device__ RowThread()
      : lane(static_cast<int>(threadIdx.x) % Tile::kThreadsPerRow),
        slot(static_cast<int>(threadIdx.x) / Tile::kThreadsPerRow) {}

  // First row of this thread and the stride to its next one (grid-stride over rows).
  __device__ int64_t first_row() const {
    return static_cast<int64_t>(blockIdx.x) * Tile::kRowsPerBlock + slot;
  }
  __device__ int64_t row_step() const {
    return static_cast<int64_t>(gridDim.x) * Tile::kRowsPerBlock;
  }
  // Column of vector i of this thread (register tiles).
  __device__ int column(int i) const { return (i * Tile::kThreadsPerRow + lane) * Tile::kWidth; }
};

// Loads this thread's vectors of a row into registers; vectors past `cols` read as `fill`.
template <class Tile, class T>
__device__ __forceinline__ void load_row(const RowThread<Tile>& t, const T* row, int cols,
                                         float (&v)[Tile::kVecs][Tile::kWidth], float fill = 0.0f) {
#pragma unroll
  for (int i = 0; i < Tile::kVecs; ++i) {
    const int c = t.column(i);
    if (c < cols) {
      rudnn::cuda::load_pack<T, Tile::kWidth>(row + c, v[i]);
    } else {
#pragma unroll
      for (int j = 0; j < Tile::kWidth; ++j) v[i][j] = fill;
    }
  }
}

// Values of this thread that lie in the row: vectors are a prefix of the thread's array,
// so the first valid_count(...) elements of its flattened [kVecs * kWidth] registers.
template <class Tile>
__device__ __forceinline__ int valid_count(const RowThread<Tile>& t, int cols) {
  int n = 0;
#pragma unroll
  for (int i = 0; i < Tile::kVecs; ++i) n += t.column(i) < cols ? Tile::kWidth : 0;
  return n;
}

// A thread's [kVecs][kWidth] registers seen as one flat array (same storage).
template <int V, int W>
__device__ __forceinline__ float (&flat(float (&v)[V][W]))[V * W] {
  return reinterpret_cast<float(&)[V * W]>(v);
}

// A thread's share of a row kept as loaded, in its storage type, and converted to FP32 each
// time it is read: half the registers of an FP32 copy for 16-bit types. These kernels are
// bound by the bytes in flight per SM, so fewer registers (more resident rows) is speed.
template <class Tile, class T>
struct PackedRow {
  rudnn::cuda::Pack<T, Tile::kWidth> pack[Tile::kVecs];
  __device__ __forceinline__ float operator()(int i, int j) const {
    return rudnn::cuda::pack_element(pack[i], j);
  }
};

// Loads this thread's vectors of a row; vectors past `cols` read as `fill`.
template <class Tile, class T>
__device__ __forceinline__ void load_row_packed(const RowThread<Tile>& t, const T* row, int cols,
                                                PackedRow<Tile, T>& r, float fill = 0.0f) {
#pragma unroll
  for (int i = 0; i < Tile::kVecs; ++i) {
    const int c = t.column(i);
    if (c < cols) {
      r.pack[i] = *reinterpret_cast<const rudnn::cuda::Pack<T, Tile::kWidth>*>(row + c);
    } else {
      r.pack[i] =
          rudnn::cuda::filled_pack<T, Tile::kWidth>(fill);  // register tiles are 16-byte packs
    }
  }
}

template <class Tile, class T>
__device__ __forceinline__ void store_row_packed(const RowThread<Tile>& t, T* row, int cols,
                                                 const PackedRow<Tile, T>& r) {
#pragma unroll
  for (int i = 0; i < Tile::kVecs; ++i) {
    const int c = t.column(i);
    if (c < cols) *reinterpret_cast<rudnn::cuda::Pack<T, Tile::kWidth>*>(row + c) = r.pack[i];
  }
}

template <class Tile, class T>
__device__ __forceinline__ void store_row(const RowThread<Tile>& t, T* row, int cols,
                                          const float (&v)[Tile::kVecs][Tile::kWidth]) {
#pragma unroll
  for (int i = 0; i < Tile::kVecs; ++i) {
    const int c = t.column(i);
    if (c < cols) rudnn::cuda::store_pack<T, Tile::kWidth>(row + c, v[i]);
  }
}

// Loop tiles: calls body(c, pack) for each vector (column c, W packed values in the storage
// type) of a row that this thread owns, loading kUnroll vectors before the first is used so
// that several loads are in flight. `thread` is this thread's index among the kThreads that
// share the row.
template <int W, int kThreads = kLoopThreads, class T, class Body>
__device__ __forceinline__ void for_each_pack(const T* __restrict__ row, int64_t cols, Body&& body,
                                              int thread = static_cast<int>(threadIdx.x)) {
  constexpr int U = LoopTile<W>::kUnroll;
  using Packed = rudnn::cuda::Pack<T, W>;
  const int64_t step = static_cast<int64_t>(kThreads) * W;
  int64_t c = static_cast<int64_t>(thread) * W;
  for (; c + (U - 1) * step < cols; c += U * step) {
    Packed raw[U];
#pragma unroll
    for (int u = 0; u < U; ++u) raw[u] = *reinterpret_cast<const Packed*>(row + c + u * step);
#pragma unroll
    for (int u = 0; u < U; ++u) body(c + u * step, raw[u]);
  }
  for (; c < cols; c += step) body(c, *reinterpret_cast<const Packed*>(row + c));
}

// The same with the values converted to FP32: body(c, v).
template <int W, int kThreads = kLoopThreads, class T, class Body>
__device__ __forceinline__ void for_each_vector(const T* __restrict__ row, int64_t cols,
                                                Body&& body) {
  for_each_pack<W, kThreads>(row, cols, [&](int64_t c, const rudnn::cuda::Pack<T, W>& pack) {
    float v[W];
#pragma unroll
    for (int j = 0; j < W; ++j) v[j] = to_float(pack.v[j]);
    body(c, v);
  });
}

// The same over two rows read side by side (x and residual, x and dy, ...).
template <int W, class T, class Body>
__device__ __forceinline__ void for_each_vector2(const T* __restrict__ row_a,
                                                 const T* __restrict__ row_b, int64_t cols,
                                                 Body&& body) {
  constexpr int U = LoopTile<W>::kUnroll;
  using Packed = rudnn::cuda::Pack<T, W>;
  const int64_t step = static_cast<int64_t>(kLoopThreads) * W;
  int64_t c = static_cast<int64_t>(threadIdx.x) * W;
  for (; c + (U - 1) * step < cols; c += U * step) {
    Packed ra[U], rb[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      ra[u] = *reinterpret_cast<const Packed*>(row_a + c + u * step);
      rb[u] = *reinterpret_cast<const Packed*>(row_b + c + u * step);
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      float a[W], b[W];
#pragma unroll
      for (int j = 0; j < W; ++j) {
        a[j] = to_float(ra[u].v[j]);
        b[j] = to_float(rb[u].v[j]);
      }
      body(c + u * step, a, b);
    }
  }
  for (; c < cols; c += step) {
    float a[W], b[W];
    rudnn::cuda::load_pack<T, W>(row_a + c, a);
    rudnn::cuda::load_pack<T, W>(row_b + c, b);
    body(c, a, b);
  }
}

// One line on stderr per launch of a warp-row or cluster kernel when
// kernel_tuning().trace is set: the benchmark uses it to show the shapes it timed.
void trace_launch(const char* kernel, unsigned grid, int block, size_t shared, int64_t resident,
                  int cluster = 1);

// Loads W affine-parameter values at column c, or `absent` when there is no parameter.
template <class T, int W>
__device__ __forceinline__ void load_param_or(const ParamIn& p, int64_t c, float absent,
                                              float (&out)[W]) {
  if (p.data != nullptr) {
    rudnn::cuda::load_param<T, W>(p.data, p.is_f32, c, out);
  } else {
#pragma unroll
    for (int j = 0; j < W; ++j) out[j] = absent;
  }
}

// How a kernel reads its affine parameters. `any` decides at each load whether a parameter
// is absent, stored as T or as FP32; `storage` and `f32` know at compile time that every
// parameter the op takes is present, stored as T or as FP32. On a register tile the per-load
// decision costs more instructions than the arithmetic it feeds (default values, and loads of
// both widths issued under predicates), so the forward tiles are instantiated per form.
enum class ParamForm { any, storage, f32 };

// The form of a set of parameters: `storage` or `f32` when all are present and stored alike
// (for T = float the two are one form, `storage`), else `any`.
template <class T>
ParamForm param_form(std::initializer_list<ParamIn> params) {
  bool all_f32 = true, all_storage = true;
  for (const ParamIn& p : params) {
    if (p.data == nullptr) return ParamForm::any;
    all_f32 = all_f32 && p.is_f32;
    all_storage = all_storage && (!p.is_f32 || sizeof(T) == 4);
  }
  return all_storage ? ParamForm::storage : all_f32 ? ParamForm::f32 : ParamForm::any;
}

// Loads W parameter values at column c in form kForm; `absent` stands in for a missing
// parameter (form `any` only).
template <ParamForm kForm, class T, int W>
__device__ __forceinline__ void load_param_as(const ParamIn& p, int64_t c, float absent,
                                              float (&out)[W]) {
  if constexpr (kForm == ParamForm::storage) {
    const auto pack =
        *reinterpret_cast<const rudnn::cuda::Pack<T, W>*>(static_cast<const T*>(p.data) + c);
#pragma unroll
    for (int j = 0; j < W; ++j) out[j] = rudnn::cuda::pack_element(pack, j);
  } else if constexpr (kForm == ParamForm::f32) {
    rudnn::cuda::load_param<T, W>(p.data, true, c, out);
  } else {
    load_param_or<T, W>(p, c, absent, out);
  }
}

// Alignment check for a row operand: base pointer and row stride.
inline void require_rows_aligned(Alignment& a, const void* data, int64_t stride,
                                 size_t element_size) {
  a.pointer(data);
  a.stride(stride, element_size);
}

}  // namespace rudnn::norm::cuda
