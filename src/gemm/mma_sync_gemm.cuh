// The portable GEMM kernel (sm_80+): persistent, with the same scheduler, group addressing and
// epilogue as the Hopper kernel, and a mainloop of cp.async into kStages shared-memory stages
// feeding mma.sync (tensor_core/mma_sync.cuh):
//   bf16 / f16  m16n8k16, fragments by ldmatrix (K-contiguous tiles) or ldmatrix.trans
//               (M/N-contiguous tiles); k-blocks of 64;
//   f32 (TF32)  m16n8k8 on values rounded with cvt.rna.tf32, fragments by 32-bit shared loads;
//               k-blocks of 32.
// Each operand tile keeps in shared memory the orientation it has in global memory (so every
// copy is 16 contiguous bytes, or element-wise for unaligned operands): the four layout
// combinations differ only in the fragment loads (template parameters).
//
// Tiles 128 x 128, 8 warps as 2 (M) x 4 (N), each warp 64 x 32 = 4 x 4 mma tiles. Shared tiles
// are [rows][cols] with cols the contiguous dimension (128 bytes or more per row) and 16-byte
// chunk c of row r stored at chunk c ^ (r % 8), so that the 8 row addresses of an ldmatrix
// (and the 32-bit fragment loads) fall in different banks.
#pragma once

#include <cstdint>
#include <type_traits>

#include "cuda/tensor_core/mma_sync.cuh"
#include "cuda/tensor_core/tile_scheduler.cuh"
#include "cuda/types.cuh"
#include "gemm/epilogue.cuh"
#include "gemm/problem.cuh"

namespace rudnn::gemm::kernels {

template <class T>
struct MmaSyncTraits {
  static constexpr bool kTf32 = std::is_same_v<T, float>;
  static constexpr int kBlockM = 128, kBlockN = 128;
  static constexpr int kBlockK = kTf32 ? 32 : 64;  // 128-byte rows of K-contiguous tiles
  static constexpr int kMmaK = kTf32 ? 8 : 16;
  static constexpr int kChunk = 16 / static_cast<int>(sizeof(T));  // elements per 16 bytes
  static constexpr int kStages = 3;
  static constexpr int kWarpsM = 2, kWarpsN = 4;  // warp tile 64 x 32
  static constexpr int kThreads = 32 * kWarpsM * kWarpsN;
  static constexpr int kMaxGroups = 1024;
  static constexpr int kTileElements = kBlockM * kBlockK;  // A's and B's tiles (BM = BN)
  static constexpr int kSharedBytes =
      kStages * 2 * kTileElements * static_cast<int>(sizeof(T)) + kMaxGroups * 4;
  static constexpr int kBandM = 8;
};

// Index of element (row, col) in a shared tile of `cols` contiguous T per row (see above).
template <class T>
__device__ __forceinline__ int swizzled(int row, int col, int cols) {
  constexpr int kChunk = 16 / static_cast<int>(sizeof(T));
  return row * cols + ((((col / kChunk) ^ (row & 7)) * kChunk) | (col % kChunk));
}

// Loads a kRows x kCols tile (kCols contiguous in global and shared memory) whose element
// (r, c) is g[r * stride + c]; elements at r >= rows or c >= cols are zeros. `vector`: g and
// stride allow 16-byte copies (asynchronous, joining the caller's cp.async group); otherwise
// element by element through registers.
template <class T, int kRows, int kCols, int kThreads>
__device__ __forceinline__ void load_tile(T* tile, const T* g, int64_t stride, int64_t rows,
                                          int64_t cols, bool vector) {
  constexpr int kChunk = 16 / static_cast<int>(sizeof(T));
  constexpr int kChunksPerRow = kCols / kChunk;
  for (int chunk = threadIdx.x; chunk < kRows * kChunksPerRow; chunk += kThreads) {
    const int r = chunk / kChunksPerRow, c = (chunk % kChunksPerRow) * kChunk;
    T* dst = tile + swizzled<T>(r, c, kCols);
    const int64_t left = r < rows ? cols - c : 0;
    if (vector) {
      const int valid = left <= 0 ? 0 : (left >= kChunk ? kChunk : static_cast<int>(left));
      cuda::tc::cp_async_16(dst, valid > 0 ? g + r * stride + c : g,
                            static_cast<uint32_t>(valid * static_cast<int>(sizeof(T))));
    } else {
#pragma unroll
      for (int e = 0; e < kChunk; ++e)
        dst[e] = e < left ? g[r * stride + c + e] : cuda::from_float<T>(0.0f);
    }
  }
}

// The fragments of one kMmaK-deep step at kk: A's 4 m16 tiles (rows mb0 + 16 i) and B's 4 n8
// tiles (columns nb0 + 8 j) of this warp.
template <class T, bool kARowMajor, bool kBRowMajor>
struct Fragments {
  using Tr = MmaSyncTraits<T>;
  uint32_t a[4][4];
  uint32_t b[4][2];

  __device__ __forceinline__ void load(const T* as, const T* bs, int mb0, int nb0, int kk,
                                       int lane) {
    constexpr int BM = Tr::kBlockM, BN = Tr::kBlockN, BK = Tr::kBlockK;
    if constexpr (!Tr::kTf32) {
      const int q = lane / 8, r8 = lane % 8;
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int mb = mb0 + 16 * i;
        if constexpr (kARowMajor)  // [BM][BK]: matrices (m 0-7 | 8-15) x (k 0-7 | 8-15)
          cuda::tc::ldmatrix<4, false>(
              a[i], as + swizzled<T>(mb + r8 + 8 * (q % 2), kk + 8 * (q / 2), BK));
        else  // [BK][BM]: k rows of m values, transposed
          cuda::tc::ldmatrix<4, true>(
              a[i], as + swizzled<T>(kk + r8 + 8 * (q / 2), mb + 8 * (q % 2), BM));
      }
#pragma unroll
      for (int jp = 0; jp < 2; ++jp) {
        const int nb = nb0 + 16 * jp;
        uint32_t r[4];
        if constexpr (kBRowMajor)  // [BK][BN]: k rows of n values, transposed
          cuda::tc::ldmatrix<4, true>(
              r, bs + swizzled<T>(kk + r8 + 8 * (q % 2), nb + 8 * (q / 2), BN));
        else  // [BN][BK]: n rows of k values
          cuda::tc::ldmatrix<4, false>(
              r, bs + swizzled<T>(nb + r8 + 8 * (q / 2), kk + 8 * (q % 2), BK));
        b[2 * jp][0] = r[0];
        b[2 * jp][1] = r[1];
        b[2 * jp + 1][0] = r[2];
        b[2 * jp + 1][1] = r[3];
      }
    } else {
      const int g = lane / 4, t = lane % 4;
      auto at = [&](int m, int k) {
        const float v = kARowMajor ? as[swizzled<T>(m, k, BK)] : as[swizzled<T>(k, m, BM)];
        return cuda::tc::to_tf32(v);
      };
      auto bt = [&](int k, int n) {
        const float v = kBRowMajor ? bs[swizzled<T>(k, n, BN)] : bs[swizzled<T>(n, k, BK)];
        return cuda::tc::to_tf32(v);
      };
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int m = mb0 + 16 * i + g;
        a[i][0] = at(m, kk + t);
        a[i][1] = at(m + 8, kk + t);
        a[i][2] = at(m, kk + t + 4);
        a[i][3] = at(m + 8, kk + t + 4);
      }
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int n = nb0 + 8 * j + g;
        b[j][0] = bt(kk + t, n);
        b[j][1] = bt(kk + t + 4, n);
      }
    }
  }
};

template <class T, bool kARowMajor, bool kBRowMajor, class Activation>
__global__ void __launch_bounds__(MmaSyncTraits<T>::kThreads)
    mma_sync_gemm_kernel(const GemmArgs args, const Activation act, bool a_vector, bool b_vector) {
#if RUDNN_TC_SM80
  using Tr = MmaSyncTraits<T>;
  constexpr int BM = Tr::kBlockM, BN = Tr::kBlockN, BK = Tr::kBlockK, S = Tr::kStages;
  extern __shared__ __align__(128) uint8_t shared_raw[];
  T* a_tiles = reinterpret_cast<T*>(shared_raw);
  T* b_tiles = a_tiles + S * Tr::kTileElements;
  int* scheduler_table = reinterpret_cast<int*>(b_tiles + S * Tr::kTileElements);

  cuda::tc::PersistentTileScheduler<Tr::kMaxGroups> scheduler;
  scheduler.build(
      args.groups, [&](int g) { return tiles_of_group<BM, BN>(args, g); }, scheduler_table);

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int warp_m = warp / Tr::kWarpsN, warp_n = warp % Tr::kWarpsN;
  const int n_tiles = static_cast<int>(ceil_div(args.n, BN));
  const T* a_base = static_cast<const T*>(args.a);
  const T* b_base = static_cast<const T*>(args.b);

  for (int tile = blockIdx.x; tile < scheduler.total_tiles; tile += gridDim.x) {
    const int g = scheduler.group_of(tile);
    const GroupView view = group_view(args, g);
    const cuda::tc::TileCoord at = cuda::tc::banded_coord<Tr::kBandM>(
        g, tile - scheduler.group_start(g), static_cast<int>(ceil_div(view.m, BM)), n_tiles);
    const int64_t m0 = int64_t{at.m_tile} * BM, n0 = int64_t{at.n_tile} * BN;
    const T* a = a_base + view.a_offset + m0 * args.a_m;
    const T* b = b_base + view.b_offset + n0 * args.b_n;
    const int64_t m_left = view.m - m0, n_left = args.n - n0;
    const int k_blocks = static_cast<int>(ceil_div(view.k, BK));

    auto load_stage = [&](int kb) {
      const int stage = kb % S;
      const int64_t k0 = int64_t{kb} * BK, k_left = view.k - k0;
      T* as = a_tiles + stage * Tr::kTileElements;
      T* bs = b_tiles + stage * Tr::kTileElements;
      if constexpr (kARowMajor)
        load_tile<T, BM, BK, Tr::kThreads>(as, a + k0 * args.a_k, args.a_m, m_left, k_left,
                                           a_vector);
      else
        load_tile<T, BK, BM, Tr::kThreads>(as, a + k0 * args.a_k, args.a_k, k_left, m_left,
                                           a_vector);
      if constexpr (kBRowMajor)
        load_tile<T, BK, BN, Tr::kThreads>(bs, b + k0 * args.b_k, args.b_k, k_left, n_left,
                                           b_vector);
      else
        load_tile<T, BN, BK, Tr::kThreads>(bs, b + k0 * args.b_k, args.b_n, n_left, k_left,
                                           b_vector);
    };

    float acc[4][4][4];
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
      for (int j = 0; j < 4; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.0f;

#pragma unroll
    for (int s = 0; s < S - 1; ++s) {
      if (s < k_blocks) load_stage(s);
      cuda::tc::cp_async_commit();
    }
    for (int kb = 0; kb < k_blocks; ++kb) {
      cuda::tc::cp_async_wait<S - 2>();
      __syncthreads();  // stage kb landed for all; every thread is done with stage kb - 1
      if (kb + S - 1 < k_blocks) load_stage(kb + S - 1);
      cuda::tc::cp_async_commit();
      const T* as = a_tiles + (kb % S) * Tr::kTileElements;
      const T* bs = b_tiles + (kb % S) * Tr::kTileElements;
#pragma unroll
      for (int kk = 0; kk < BK; kk += Tr::kMmaK) {
        Fragments<T, kARowMajor, kBRowMajor> f;
        f.load(as, bs, warp_m * 64, warp_n * 32, kk, lane);
#pragma unroll
        for (int i = 0; i < 4; ++i)
#pragma unroll
          for (int j = 0; j < 4; ++j) {
            if constexpr (Tr::kTf32)
              cuda::tc::mma_1688_tf32(acc[i][j], f.a[i], f.b[j]);
            else
              cuda::tc::mma_16816<T>(acc[i][j], f.a[i], f.b[j]);
          }
      }
    }
    cuda::tc::cp_async_wait<0>();
    __syncthreads();  // the next tile's prologue overwrites the stages

    const OutputTile<T, Activation> out(args, view, act);
    const int64_t row0 = m0 + warp_m * 64 + lane / 4;
    const int64_t col0 = n0 + warp_n * 32 + 2 * (lane % 4);
    // Pair p = 2 (4i + j) + h: row 16i + 8h + lane / 4, columns 8j + 2 (lane % 4) + {0, 1}.
    float v[64];
#pragma unroll
    for (int i = 0; i < 64; ++i) v[i] = acc[i / 16][(i / 4) % 4][i % 4];
    out.store_fragment(v, [&](int p) {
      const int ij = p >> 1;
      return PairAt{row0 + 16 * (ij >> 2) + 8 * (p & 1), col0 + 8 * (ij & 3)};
    });
  }
#elif defined(__CUDA_ARCH__)
  __trap();  // below sm_80: never launched (the library needs sm_80 for its tensor-core paths)
#endif
}

}  // namespace rudnn::gemm::kernels
