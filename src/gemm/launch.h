// The GEMM kernels' launchers, explicitly instantiated one (or two) per .cu file so that
// builds stay parallel (hopper_<dtype>_<A major><B major>_n<BN>.cu, mma_sync_<type>_a<layout>.cu,
// simt_f32.cu). Host code; the entry (gemm.cpp) validated the arguments and chose the
// path: these never throw for user errors (CUDA errors only).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "gemm/args.h"
#include "rudnn/device.h"

namespace rudnn::gemm::kernels {

struct LaunchSite {
  cudaStream_t stream;
  Device device;
  int multiprocessors;
};

// Hopper kernel instantiations: T (__nv_bfloat16 or __half), the tile width, and whether A
// and B are K-major (row-major A, column-major B) or MN-major. Exactly the combinations
// listed by hopper_instance below are built (one .cu file each).
template <class T, int kBlockN, bool kAKMajor, bool kBKMajor>
void run_hopper(const GemmArgs& args, const LaunchSite& site);

// Bit set of the Hopper tile widths built (bit 0: 128, bit 1: 192, bit 2: 256).
constexpr int hopper_instances(bool bf16, bool a_k_major, bool b_k_major) {
  if (a_k_major && b_k_major) return bf16 ? 0b111 : 0b101;
  if (a_k_major) return bf16 ? 0b101 : 0b001;  // B MN-major: the input gradient dX = dY . W
  if (b_k_major) return 0b001;                 // A MN-major
  return bf16 ? 0b101 : 0b001;                 // both MN-major: the weight gradient
}
constexpr int block_n_bit(int block_n) { return block_n == 128 ? 1 : block_n == 192 ? 2 : 4; }

// Ping-pong Hopper kernels (hopper_pingpong.cuh): one tile of kBlockM x kBlockN per consumer
// warpgroup. The tiles built, as a bit set, per dtype and layouts: the
// forward layout (row-major A, column-major B: dense and the MoE experts) only so far; the
// other layouts run the cooperative kernel.
template <class T, int kBlockM, int kBlockN, bool kAKMajor, bool kBKMajor>
void run_hopper_pingpong(const GemmArgs& args, const LaunchSite& site);

// Bit i: gemm::kHopperPingpongTiles[i] (gemm.h).
constexpr int pingpong_instances(bool bf16, bool a_k_major, bool b_k_major) {
  if (!(a_k_major && b_k_major)) return 0;
  return bf16 ? 0b111 : 0b011;
}

// Whether the Hopper kernels can run on `device` (compute capability 9.0, built for sm_90a).
bool hopper_kernel_usable(Device device);

// T: __nv_bfloat16, __half, or float (TF32 tensor cores).
template <class T, bool kARowMajor, bool kBRowMajor>
void run_mma_sync(const GemmArgs& args, bool a_vector, bool b_vector, const LaunchSite& site);

void run_simt(const GemmArgs& args, const LaunchSite& site);

// Upper bound of the output tiles of `args` for a block_m x block_n tile (grouped M counts
// every group's partial tile: the group sizes live on the device).
inline int64_t tiles_upper_bound(const GemmArgs& args, int block_m, int block_n) {
  const int64_t n_tiles = (args.n + block_n - 1) / block_n;
  const int64_t m_tiles = (args.m + block_m - 1) / block_m;
  if (args.offsets == nullptr) return m_tiles * n_tiles;
  if (args.grouped_k) return args.groups * m_tiles * n_tiles;
  return (m_tiles + args.groups) * n_tiles;
}

// A persistent grid: no more blocks than there can be tiles, at most blocks_per_sm per SM.
inline int persistent_grid(const GemmArgs& args, int block_m, int block_n, int blocks_per_sm,
                           const LaunchSite& site) {
  const int64_t tiles = tiles_upper_bound(args, block_m, block_n);
  const int64_t most = int64_t{blocks_per_sm} * site.multiprocessors;
  return static_cast<int>(tiles < 1 ? 1 : (tiles < most ? tiles : most));
}

}  // namespace rudnn::gemm::kernels
