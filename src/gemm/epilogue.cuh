// Epilogues: what happens to an FP32 accumulator on its way to D. OutputTile applies the
// linear part (alpha, row and column scales, bias, beta * C: each present or not at run time)
// and then an activation functor type, and stores in D's dtype (T or f32). The activation is
// the kernels' template parameter, so a family that fuses its own elementwise step writes a
// functor `float operator()(float) const` and instantiates the kernel with it; the library's
// GEMM entry instantiates RuntimeActivation (one switch per element on a uniform value)
// instead of one kernel per activation.
#pragma once

#include <cstdint>

#include "cuda/types.cuh"
#include "gemm/args.h"
#include "gemm/problem.cuh"

namespace rudnn::gemm::kernels {

struct Identity {
  __device__ __forceinline__ float operator()(float v) const { return v; }
};
struct Relu {
  __device__ __forceinline__ float operator()(float v) const { return v > 0.0f ? v : 0.0f; }
};
struct Silu {
  __device__ __forceinline__ float operator()(float v) const { return v / (1.0f + __expf(-v)); }
};
// The tanh approximation: 0.5 v (1 + tanh(sqrt(2 / pi) (v + 0.044715 v^3))).
struct Gelu {
  __device__ __forceinline__ float operator()(float v) const {
    const float u = 0.7978845608028654f * (v + 0.044715f * v * v * v);
    return 0.5f * v * (1.0f + tanhf(u));
  }
};
// gemm::Activation chosen at run time (0 None, 1 Relu, 2 Silu, 3 Gelu).
struct RuntimeActivation {
  int kind;
  __device__ __forceinline__ float operator()(float v) const {
    switch (kind) {
      case 1:
        return Relu{}(v);
      case 2:
        return Silu{}(v);
      case 3:
        return Gelu{}(v);
      default:
        return v;
    }
  }
};

// `act` applied to every value of a register fragment. RuntimeActivation tests its kind once
// for the whole fragment rather than once per value.
template <class Activation, int kCount>
__device__ __forceinline__ void activate_all(const Activation& act, float (&v)[kCount]) {
#pragma unroll
  for (int i = 0; i < kCount; ++i) v[i] = act(v[i]);
}
template <int kCount>
__device__ __forceinline__ void activate_all(const RuntimeActivation& act, float (&v)[kCount]) {
  switch (act.kind) {
    case 1:
      activate_all(Relu{}, v);
      break;
    case 2:
      activate_all(Silu{}, v);
      break;
    case 3:
      activate_all(Gelu{}, v);
      break;
    default:
      break;
  }
}

// Where a fragment's pair p lies in the group's D: row, and the even column of (col, col + 1).
struct PairAt {
  int64_t row, col;
};

// Row maps: which row of D a row of the GEMM's tile grid is (kernel rows m_tile * 128 + i).
// IdentityRows is the GEMM's. A row a map leaves out comes back as kNoRow (past any m).
constexpr int64_t kNoRow = int64_t{1} << 62;

struct IdentityRows {
  __device__ __forceinline__ int64_t operator()(int64_t row) const { return row; }
  // Whether kernel rows row0 .. row0 + 15 (row0 a multiple of 16) are all rows of D: -1 =
  // they are rows row0 .. row0 + 15, the epilogue checks them against m.
  __device__ __forceinline__ int inside16(int64_t) const { return -1; }
};

// The output tiles of an implicit-GEMM convolution (src/conv/cuda/hopper_conv.cu): a tile of
// 128 rows is a box of tile[0] x tile[1] x tile[2] x tile[3] output pixels along (x, y, z,
// image), x fastest; tiles walk x, then y, z, images. D is the channels-last output, one row
// per pixel: row ((n * out_z + z) * out_y + y) * out_x + x. Tile extents are powers of two
// (ConvRows::inside16 relies on it).
struct ConvTiling {
  int tile[4];   // x, y, z, n per tile; product 128
  int tiles[3];  // tiles along x, y, z
  int out[4];    // out_x, out_y, out_z, batch

  struct Origin {
    int x, y, z, n;
  };
  __device__ __forceinline__ Origin origin(int m_tile) const {
    Origin o;
    o.x = (m_tile % tiles[0]) * tile[0];
    m_tile /= tiles[0];
    o.y = (m_tile % tiles[1]) * tile[1];
    m_tile /= tiles[1];
    o.z = (m_tile % tiles[2]) * tile[2];
    o.n = (m_tile / tiles[2]) * tile[3];
    return o;
  }
};

struct ConvRows {
  ConvTiling t;

  __device__ __forceinline__ int64_t operator()(int64_t row) const {
    const ConvTiling::Origin o = t.origin(static_cast<int>(row / 128));
    int i = static_cast<int>(row % 128);
    const int x = o.x + i % t.tile[0];
    i /= t.tile[0];
    const int y = o.y + i % t.tile[1];
    i /= t.tile[1];
    const int z = o.z + i % t.tile[2];
    const int n = o.n + i / t.tile[2];
    if (x >= t.out[0] || y >= t.out[1] || z >= t.out[2] || n >= t.out[3]) return kNoRow;
    return ((int64_t{n} * t.out[2] + z) * t.out[1] + y) * t.out[0] + x;
  }
  // 16 rows starting on a multiple of 16 span every value of the tile's low 4 index bits:
  // their first has the least and their last the greatest x, y, z and n among them (tile
  // extents are powers of two), so all lie in the output when those two do.
  __device__ __forceinline__ int inside16(int64_t row0) const {
    return (*this)(row0) != kNoRow && (*this)(row0 + 15) != kNoRow ? 1 : 0;
  }
};

// A group's D (and C, bias, scales) as the epilogue writes it: rows and columns of the group.
// T is the operands' element type; D, C and bias are T, or float when args.out_f32.
template <class T, class Activation>
struct OutputTile {
  void* d;
  const void* c;
  const void* bias;
  const float* row_scale;
  const float* col_scale;
  int64_t ldd, ldc;
  int64_t m, n;
  int64_t row_base;  // the group's first row in row_scale
  float alpha, beta;
  bool out_f32, pair_stores;
  Activation act;

  __device__ __forceinline__ OutputTile(const GemmArgs& p, const GroupView& v, Activation a)
      : d(p.out_f32 ? static_cast<void*>(static_cast<float*>(p.d) + v.d_offset)
                    : static_cast<void*>(static_cast<T*>(p.d) + v.d_offset)),
        c(p.c == nullptr ? nullptr
          : p.out_f32    ? static_cast<const void*>(static_cast<const float*>(p.c) + v.c_offset)
                         : static_cast<const void*>(static_cast<const T*>(p.c) + v.c_offset)),
        bias(p.bias),
        row_scale(p.row_scale),
        col_scale(p.col_scale),
        ldd(p.ldd),
        ldc(p.ldc),
        m(v.m),
        n(p.n),
        row_base(v.row0),
        alpha(p.alpha),
        beta(p.beta),
        out_f32(p.out_f32),
        pair_stores(p.pair_stores),
        act(a) {}

  template <class Out>
  __device__ __forceinline__ float load(const void* base, int64_t i) const {
    return cuda::to_float(static_cast<const Out*>(base)[i]);
  }

  template <class Out>
  __device__ __forceinline__ void store(int64_t row, int64_t col, float v0, float v1,
                                        bool second) const {
    const float rs = row_scale ? row_scale[row_base + row] : 1.0f;
    float o0 = alpha * rs * v0, o1 = alpha * rs * v1;
    if (col_scale) {
      o0 *= col_scale[col];
      if (second) o1 *= col_scale[col + 1];
    }
    if (bias) {
      o0 += load<Out>(bias, col);
      if (second) o1 += load<Out>(bias, col + 1);
    }
    if (c) {
      o0 += beta * load<Out>(c, row * ldc + col);
      if (second) o1 += beta * load<Out>(c, row * ldc + col + 1);
    }
    o0 = act(o0);
    o1 = act(o1);
    Out* out = static_cast<Out*>(d) + row * ldd + col;
    if (second && pair_stores) {
      if constexpr (sizeof(Out) == 2) {
        *reinterpret_cast<unsigned*>(out) = cuda::pack_pair<Out>(o0, o1);
      } else {
        *reinterpret_cast<float2*>(out) = make_float2(o0, o1);
      }
    } else {
      out[0] = cuda::from_float<Out>(o0);
      if (second) out[1] = cuda::from_float<Out>(o1);
    }
  }

  // A thread's whole accumulator fragment: pair p = (v[2p], v[2p + 1]) sits at at(p). Each
  // optional step is one pass over the fragment behind one uniform test, so the kernel holds
  // each step's code once. (Testing every step per value, unrolled over a 128-value
  // fragment, made the Hopper kernel ~30k instructions, most of them epilogue: the
  // instruction cache missed throughout, and that cost about as much per tile as 64 k-blocks
  // of MMAs.) Elements outside the group's m x n are skipped.
  template <int kCount, class At>
  __device__ __forceinline__ void store_fragment(float (&v)[kCount], At at) const {
    if (out_f32)
      store_fragment_as<float>(v, at);
    else
      store_fragment_as<T>(v, at);
  }

  template <class Out, int kCount, class At>
  __device__ __forceinline__ void store_fragment_as(float (&v)[kCount], At at) const {
    apply_fragment<Out>(v, at);
    store_pairs<Out>(v, at);
  }

  // The wgmma m64nBN fragment (pair 2j + h at row row + 8h, columns col + 8j + {0, 1}, where
  // row and col are this lane's first; the warp's 16 rows start at row - lane / 4). Where the
  // warp's 16 x BN block lies inside D and rows are 16-byte aligned, the four lanes of each
  // quad swap values so that each lane holds 8 consecutive columns and stores them as one
  // 16-byte vector: a quad writes 64 contiguous bytes of a row instead of four lanes
  // writing 4 bytes each 16 bytes apart. Otherwise the pairs are stored one by one.
  // Each lane's two rows are at(0).row and at(1).row. `rows_inside`: -1, the warp's rows are
  // rows warp_row .. warp_row + 15 of D, inside where warp_row + 16 <= m (the GEMM's); 0 or
  // 1, a row map's answer whether all 16 are rows of D (RowMap::inside16).
  template <int kBlockN, int kCount, class At>
  __device__ __forceinline__ void store_wgmma_fragment(float (&v)[kCount], At at, int64_t row,
                                                       int64_t col, int lane,
                                                       int rows_inside = -1) const {
    static_assert(kCount == kBlockN / 2);
    if (out_f32) {
      store_fragment_as<float>(v, at);
      return;
    }
    apply_fragment<T>(v, at);
    const int q = lane & 3;
    const int64_t warp_row = row - lane / 4, tile_col = col - 2 * q;
    const bool inside = rows_inside < 0 ? warp_row + 16 <= m : rows_inside == 1;
    const bool vectors = inside && pair_stores && tile_col + kBlockN <= n &&
                         ldd % 8 == 0 && reinterpret_cast<uintptr_t>(d) % 16 == 0;
    if (!vectors) {  // warp-uniform: every lane of the warp takes the same branch
      store_pairs<T>(v, at);
      return;
    }
    const int quad_base = lane & ~3;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
#pragma unroll
      for (int j0 = 0; j0 < kBlockN / 8; j0 += 4) {
        unsigned x[4], y[4] = {0, 0, 0, 0};
#pragma unroll
        for (int jj = 0; jj < 4; ++jj)
          x[jj] = cuda::pack_pair<T>(v[4 * (j0 + jj) + 2 * h], v[4 * (j0 + jj) + 2 * h + 1]);
        // Lane q holds columns 8 (j0 + jj) + 2q; it wants 8 (j0 + q) + 2s from lanes s = 0..3.
        // Round i: lane s sends x[(s + i) % 4] to lane (s + i) % 4, which stores it as y[s].
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const int to = (q + i) & 3, from = (q - i) & 3;
          const unsigned send = to == 0 ? x[0] : to == 1 ? x[1] : to == 2 ? x[2] : x[3];
          const unsigned got = __shfl_sync(0xffffffffu, send, quad_base | from);
#pragma unroll
          for (int s = 0; s < 4; ++s) y[s] = from == s ? got : y[s];
        }
        T* out = static_cast<T*>(d) + at(h).row * ldd + tile_col + 8 * (j0 + q);
        *reinterpret_cast<uint4*>(out) = make_uint4(y[0], y[1], y[2], y[3]);
      }
    }
  }

  // The linear part and the activation, in registers.
  template <class Out, int kCount, class At>
  __device__ __forceinline__ void apply_fragment(float (&v)[kCount], At at) const {
    constexpr int kPairs = kCount / 2;
    if (row_scale != nullptr) {
#pragma unroll
      for (int p = 0; p < kPairs; ++p) {
        const PairAt w = at(p);
        const float s = w.row < m ? alpha * row_scale[row_base + w.row] : 0.0f;
        v[2 * p] *= s;
        v[2 * p + 1] *= s;
      }
    } else if (alpha != 1.0f) {
#pragma unroll
      for (int i = 0; i < kCount; ++i) v[i] *= alpha;
    }
    if (col_scale != nullptr) {
#pragma unroll
      for (int p = 0; p < kPairs; ++p) {
        const PairAt w = at(p);
        if (w.col < n) v[2 * p] *= col_scale[w.col];
        if (w.col + 1 < n) v[2 * p + 1] *= col_scale[w.col + 1];
      }
    }
    if (bias != nullptr) {
#pragma unroll
      for (int p = 0; p < kPairs; ++p) {
        const PairAt w = at(p);
        if (w.col < n) v[2 * p] += load<Out>(bias, w.col);
        if (w.col + 1 < n) v[2 * p + 1] += load<Out>(bias, w.col + 1);
      }
    }
    if (c != nullptr) {
#pragma unroll
      for (int p = 0; p < kPairs; ++p) {
        const PairAt w = at(p);
        if (w.row >= m) continue;
        if (w.col < n) v[2 * p] += beta * load<Out>(c, w.row * ldc + w.col);
        if (w.col + 1 < n) v[2 * p + 1] += beta * load<Out>(c, w.row * ldc + w.col + 1);
      }
    }
    activate_all(act, v);
  }

  // Pair by pair, skipping what lies outside the group's m x n.
  template <class Out, int kCount, class At>
  __device__ __forceinline__ void store_pairs(const float (&v)[kCount], At at) const {
    constexpr int kPairs = kCount / 2;
#pragma unroll
    for (int p = 0; p < kPairs; ++p) {
      const PairAt w = at(p);
      if (w.row >= m || w.col >= n) continue;
      Out* out = static_cast<Out*>(d) + w.row * ldd + w.col;
      if (w.col + 1 < n && pair_stores) {
        if constexpr (sizeof(Out) == 2) {
          *reinterpret_cast<unsigned*>(out) = cuda::pack_pair<Out>(v[2 * p], v[2 * p + 1]);
        } else {
          *reinterpret_cast<float2*>(out) = make_float2(v[2 * p], v[2 * p + 1]);
        }
      } else {
        out[0] = cuda::from_float<Out>(v[2 * p]);
        if (w.col + 1 < n) out[1] = cuda::from_float<Out>(v[2 * p + 1]);
      }
    }
  }

  // Accumulators of columns col, col + 1 (col even) of `row` (the group's); elements outside
  // the group's m x n are skipped.
  __device__ __forceinline__ void store_pair(int64_t row, int64_t col, float v0, float v1) const {
    if (row >= m || col >= n) return;
    const bool second = col + 1 < n;
    if (out_f32)
      store<float>(row, col, v0, v1, second);
    else
      store<T>(row, col, v0, v1, second);
  }
};

}  // namespace rudnn::gemm::kernels
