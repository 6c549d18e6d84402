// FP32 GEMM on CUDA cores (f32 operands without the TF32 opt-in): exact FP32 products, the
// same scheduler, group addressing and epilogue as the tensor-core kernels, and a plain
// shared-memory tiling that takes any strides: 64 x 64 tiles, k-blocks of 16, 256 threads of
// 4 x 4 outputs each. Loads walk the operand's contiguous dimension across consecutive
// threads (whichever it is), so both layouts read coalesced.
#pragma once

#include <cstdint>

#include "cuda/tensor_core/tile_scheduler.cuh"
#include "gemm/epilogue.cuh"
#include "gemm/problem.cuh"

namespace rudnn::gemm::kernels {

struct SimtTraits {
  static constexpr int kBlockM = 64, kBlockN = 64, kBlockK = 16;
  static constexpr int kThreads = 256;
  static constexpr int kMaxGroups = 1024;
  static constexpr int kSharedBytes = kMaxGroups * 4;  // dynamic: the scheduler's table
  static constexpr int kBandM = 8;
};

template <class Activation>
__global__ void __launch_bounds__(SimtTraits::kThreads)
    simt_gemm_kernel(const GemmArgs args, const Activation act) {
  using Tr = SimtTraits;
  constexpr int BM = Tr::kBlockM, BN = Tr::kBlockN, BK = Tr::kBlockK;
  __shared__ float as[BK][BM + 4];
  __shared__ float bs[BK][BN + 4];
  extern __shared__ int scheduler_table[];
  cuda::tc::PersistentTileScheduler<Tr::kMaxGroups> scheduler;
  scheduler.build(
      args.groups, [&](int g) { return tiles_of_group<BM, BN>(args, g); }, scheduler_table);

  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
  const int n_tiles = static_cast<int>(ceil_div(args.n, BN));
  const bool a_k_contiguous = args.a_k == 1, b_k_contiguous = args.b_k == 1;
  for (int tile = blockIdx.x; tile < scheduler.total_tiles; tile += gridDim.x) {
    const int g = scheduler.group_of(tile);
    const GroupView view = group_view(args, g);
    const cuda::tc::TileCoord at = cuda::tc::banded_coord<Tr::kBandM>(
        g, tile - scheduler.group_start(g), static_cast<int>(ceil_div(view.m, BM)), n_tiles);
    const int64_t m0 = int64_t{at.m_tile} * BM, n0 = int64_t{at.n_tile} * BN;
    const float* a = static_cast<const float*>(args.a) + view.a_offset;
    const float* b = static_cast<const float*>(args.b) + view.b_offset;
    float acc[4][4] = {};
    for (int64_t k0 = 0; k0 < view.k; k0 += BK) {
      for (int i = threadIdx.x; i < BK * BM; i += Tr::kThreads) {
        // Consecutive threads along the operand's contiguous dimension.
        const int kk = a_k_contiguous ? i % BK : i / BM, mm = a_k_contiguous ? i / BK : i % BM;
        const int64_t m = m0 + mm, k = k0 + kk;
        as[kk][mm] = (m < view.m && k < view.k) ? a[m * args.a_m + k * args.a_k] : 0.0f;
        const int kb = b_k_contiguous ? i % BK : i / BN, nn = b_k_contiguous ? i / BK : i % BN;
        const int64_t n = n0 + nn, kn = k0 + kb;
        bs[kb][nn] = (n < args.n && kn < view.k) ? b[kn * args.b_k + n * args.b_n] : 0.0f;
      }
      __syncthreads();
#pragma unroll
      for (int kk = 0; kk < BK; ++kk) {
        float av[4], bv[4];
#pragma unroll
        for (int i = 0; i < 4; ++i) av[i] = as[kk][ty * 4 + i];
#pragma unroll
        for (int j = 0; j < 4; ++j) bv[j] = bs[kk][tx * 4 + j];
#pragma unroll
        for (int i = 0; i < 4; ++i)
#pragma unroll
          for (int j = 0; j < 4; ++j) acc[i][j] = fmaf(av[i], bv[j], acc[i][j]);
      }
      __syncthreads();
    }
    const OutputTile<float, Activation> out(args, view, act);
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
      for (int j = 0; j < 4; j += 2)
        out.store_pair(m0 + ty * 4 + i, n0 + tx * 4 + j, acc[i][j], acc[i][j + 1]);
  }
}

}  // namespace rudnn::gemm::kernels
