// Persistent tile scheduler: a grid of (about) one block per SM walks every output tile of G
// problems ("groups") that share a tile shape: block b takes tiles b, b + gridDim.x, ... of
// the concatenated tile list (groups in order). Group g owns tiles_of(g) tiles; the counts may
// come from device memory (a grouped GEMM reads its group offsets there), so each block
// prefix-sums them into shared memory once, at its start, and finds a tile's group by binary
// search: no host synchronisation, capturable in a CUDA graph, and an empty group owns no tile
// and costs nothing beyond its table entry.
//
//   shared table (kMaxGroups ints):  tile_end[g] = tiles of groups 0..g (inclusive prefix sum)
//   tile t -> group g = first with tile_end[g] > t, local index t - tile_end[g-1]
//
// Within a group the local index is rasterized in bands of kBandM tile rows, M fastest
// (banded_coord): the blocks working at the same moment share a few B tiles (a group's
// weights) and a band's A rows, which keeps both in L2.
//
//        n_tile:   0   1   2   3 ...
//   m_tile 0..7:   0   8  16  24        band 0 (local indices 0 .. 8 n_tiles - 1)
//   m_tile 8..9:  8n  8n+2 ...          band 1 (the last band may be lower)
//
// Every thread of the block calls build() (it synchronises the block); group_of / group_start
// then read the table. Device code, any architecture.
#pragma once

#include <cstdint>

namespace rudnn::cuda::tc {

struct TileCoord {
  int group;
  int m_tile;
  int n_tile;
};

template <int kMaxGroups>
struct PersistentTileScheduler {
  static constexpr int kSharedInts = kMaxGroups;
  int* tile_end = nullptr;  // shared: inclusive prefix sum of tiles per group
  int groups = 0;
  int total_tiles = 0;

  // `tiles_of(g)` returns the tile count of group g (>= 0; it may read global memory);
  // `shared` holds kMaxGroups ints; group_count <= kMaxGroups (the host checked).
  template <class TilesOf>
  __device__ __forceinline__ void build(int group_count, TilesOf tiles_of, int* shared) {
    tile_end = shared;
    groups = group_count;
    for (int g = threadIdx.x; g < groups; g += blockDim.x) tile_end[g] = tiles_of(g);
    __syncthreads();
    if (threadIdx.x < 32) {
      const int lane = threadIdx.x;
      int carry = 0;
      for (int base = 0; base < groups; base += 32) {
        int v = base + lane < groups ? tile_end[base + lane] : 0;
#pragma unroll
        for (int d = 1; d < 32; d <<= 1) {
          const int up = __shfl_up_sync(0xffffffffu, v, d);
          if (lane >= d) v += up;
        }
        if (base + lane < groups) tile_end[base + lane] = v + carry;
        carry += __shfl_sync(0xffffffffu, v, 31);
      }
    }
    __syncthreads();
    total_tiles = groups > 0 ? tile_end[groups - 1] : 0;
  }

  // The group owning `tile` (0 <= tile < total_tiles): the first g with tile_end[g] > tile.
  __device__ __forceinline__ int group_of(int tile) const {
    int lo = 0, hi = groups - 1;
    while (lo < hi) {
      const int mid = (lo + hi) >> 1;
      if (tile_end[mid] > tile)
        hi = mid;
      else
        lo = mid + 1;
    }
    return lo;
  }
  __device__ __forceinline__ int group_start(int g) const { return g > 0 ? tile_end[g - 1] : 0; }

  // Tile `tile` as (group, m_tile, n_tile), given the group's tile-grid height.
  template <int kBandM, class MTilesOf>
  __device__ __forceinline__ TileCoord coord(int tile, int n_tiles, MTilesOf m_tiles_of) const;
};

// Band rasterization of `local` within an m_tiles x n_tiles grid (see above). A bijection of
// [0, m_tiles * n_tiles) onto the grid.
template <int kBandM>
__host__ __device__ __forceinline__ TileCoord banded_coord(int group, int local, int m_tiles,
                                                           int n_tiles) {
  const int band_tiles = kBandM * n_tiles;  // every band but the last is this full
  const int band = local / band_tiles;
  const int in_band = local - band * band_tiles;
  const int band_m0 = band * kBandM;
  const int band_height = m_tiles - band_m0 < kBandM ? m_tiles - band_m0 : kBandM;
  return TileCoord{group, band_m0 + in_band % band_height, in_band / band_height};
}

template <int kMaxGroups>
template <int kBandM, class MTilesOf>
__device__ __forceinline__ TileCoord
PersistentTileScheduler<kMaxGroups>::coord(int tile, int n_tiles, MTilesOf m_tiles_of) const {
  const int g = group_of(tile);
  return banded_coord<kBandM>(g, tile - group_start(g), m_tiles_of(g), n_tiles);
}

}  // namespace rudnn::cuda::tc
