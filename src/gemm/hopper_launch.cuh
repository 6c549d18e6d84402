// run_hopper / run_hopper_pingpong: the tensor maps of A and B, the shared-memory opt-in, the
// persistent grid. Included by the hopper_<dtype>_<majors>_n<BN>.cu (cooperative) and
// hopper_pp_<dtype>_<majors>_m<BM>n<BN>.cu (ping-pong) files, each instantiating one kernel.
#pragma once

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "core/cuda_check.h"
#include "cuda/device_info.h"
#include "cuda/tensor_core/tensor_map.h"
#include "gemm/hopper_gemm.cuh"
#include "gemm/hopper_pingpong.cuh"
#include "gemm/launch.h"

namespace rudnn::gemm::kernels {

// The 3-D map of B: {contiguous, other, group}; the group stride only matters with groups.
// With clusters of two along M each block loads half of a K-major B tile: the box is
// block_n / cluster rows (MN-major B is loaded in 64-wide slabs either way).
inline cuda::tc::TensorMapSpec hopper_b_map(const GemmArgs& args, CUtensorMapDataType type,
                                            bool k_major, uint32_t block_n, int cluster) {
  cuda::tc::TensorMapSpec s;
  s.type = type;
  s.rank = 3;
  s.base = args.b;
  s.swizzle = CU_TENSOR_MAP_SWIZZLE_128B;
  const bool grouped_m = args.offsets != nullptr && !args.grouped_k;
  const uint64_t inner = k_major ? args.k : args.n, outer = k_major ? args.n : args.k;
  const uint64_t ld = static_cast<uint64_t>(k_major ? args.b_n : args.b_k);
  s.dims[0] = inner;
  s.dims[1] = outer;
  s.dims[2] = grouped_m ? static_cast<uint64_t>(args.groups) : 1;
  s.strides[0] = ld * 2;
  s.strides[1] =
      grouped_m ? static_cast<uint64_t>(args.b_group_stride) * 2 : (ld * 2 * outer + 15) / 16 * 16;
  s.box[0] = 64;
  s.box[1] = k_major ? block_n / static_cast<uint32_t>(cluster) : 64;
  s.box[2] = 1;
  return s;
}

// The 2-D map of A: m x k; K-major (row-major) as {k, m} with boxes of 64 k x block_m rows,
// MN-major (column-major) as {m, k} with boxes of 64 m x 64 k (block_m / 64 per tile).
inline cuda::tc::TensorMapSpec hopper_a_map(const GemmArgs& args, CUtensorMapDataType type,
                                            bool k_major, uint32_t block_m) {
  cuda::tc::TensorMapSpec a;
  a.type = type;
  a.rank = 2;
  a.base = args.a;
  a.swizzle = CU_TENSOR_MAP_SWIZZLE_128B;
  a.dims[0] = static_cast<uint64_t>(k_major ? args.k : args.m);
  a.dims[1] = static_cast<uint64_t>(k_major ? args.m : args.k);
  a.strides[0] = static_cast<uint64_t>(k_major ? args.a_m : args.a_k) * 2;
  a.box[0] = 64;
  a.box[1] = k_major ? block_m : 64;
  return a;
}

// The 2-D map of a dense D (row-major m x n, T) for the TMA-store epilogue: boxes of 64
// columns (128 bytes, swizzled as the staging) x 64 rows, one consumer's slab.
inline cuda::tc::TensorMapSpec hopper_d_map(const GemmArgs& args, CUtensorMapDataType type) {
  cuda::tc::TensorMapSpec d;
  d.type = type;
  d.rank = 2;
  d.base = args.d;
  d.swizzle = CU_TENSOR_MAP_SWIZZLE_128B;
  d.dims[0] = static_cast<uint64_t>(args.n);
  d.dims[1] = static_cast<uint64_t>(args.m);
  d.strides[0] = static_cast<uint64_t>(args.ldd) * 2;
  d.box[0] = 64;
  d.box[1] = 64;
  return d;
}

template <class T>
CUtensorMapDataType hopper_map_type() {
  return std::is_same_v<T, __half> ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16
                                   : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
}

// The launch configuration of a persistent Hopper GEMM kernel (cooperative or ping-pong):
// one block per SM, after the one-time shared-memory opt-in; with args.cluster_m = 2,
// clusters of two blocks along M (both in one GPC). When the device cannot co-schedule such
// pairs at this kernel's size (cudaOccupancyMaxActiveClusters answers 0) it asks for single
// blocks instead (args.cluster_m = 1, which the kernel and B's map follow). `configured` and
// `pairs` cache the per-device answers of one kernel instantiation.
template <class Kernel>
struct PersistentLaunch {
  Kernel kernel;
  cudaLaunchAttribute cluster_attribute{};
  cudaLaunchConfig_t config{};
  int resident_pairs = 0;  // clusters of two resident at once (args.cluster_m = 2)

  PersistentLaunch(Kernel k, int threads, int shared_bytes, GemmArgs& args,
                   cuda::PerDevice<signed char>& configured, cuda::PerDevice<int>& pairs,
                   const char* name, const LaunchSite& site)
      : kernel(k) {
    configured.get(site.device, [&]() -> signed char {
      detail::check_cuda(
          cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, shared_bytes),
          detail::cat("cudaFuncSetAttribute(", name, ")").c_str());
      return 1;
    });
    cluster_attribute.id = cudaLaunchAttributeClusterDimension;
    cluster_attribute.val.clusterDim.x = 2;
    cluster_attribute.val.clusterDim.y = 1;
    cluster_attribute.val.clusterDim.z = 1;
    config.blockDim = dim3(threads);
    config.dynamicSmemBytes = shared_bytes;
    config.stream = site.stream;
    config.attrs = &cluster_attribute;
    config.numAttrs = 1;
    if (args.cluster_m != 2) {
      args.cluster_m = 1;
      return;
    }
    resident_pairs = pairs.get(site.device, [&] {
      cudaLaunchConfig_t query = config;
      query.gridDim = dim3(2);
      int clusters = 0;
      if (cudaOccupancyMaxActiveClusters(&clusters, kernel, &query) != cudaSuccess) {
        (void)cudaGetLastError();
        clusters = 0;
      }
      return clusters + 1;  // PerDevice keeps 0 for "not asked yet"
    }) - 1;
    if (resident_pairs < 1) args.cluster_m = 1;
  }

  // `splits` units per tile of block_m x block_n (split K), at most one block per SM (split
  // K's hand-over between splits needs every block resident; so does a cluster's peer).
  template <class... Maps>
  void launch(const GemmArgs& args, int block_m, int block_n, int splits, const char* name,
              const LaunchSite& site, const Maps&... maps) {
    const RuntimeActivation act{args.activation};
    if (args.cluster_m == 2) {
      const int64_t units =
          int64_t{persistent_grid(args, block_m * 2, block_n, 1,
                                  LaunchSite{site.stream, site.device, resident_pairs})} *
          splits;
      config.gridDim = dim3(static_cast<unsigned>(std::min<int64_t>(units, resident_pairs) * 2));
      detail::check_cuda(cudaLaunchKernelEx(&config, kernel, maps..., args, act), name);
      return;
    }
    const int grid = static_cast<int>(std::min<int64_t>(
        int64_t{persistent_grid(args, block_m, block_n, 1, site)} * splits, site.multiprocessors));
    kernel<<<grid, config.blockDim, config.dynamicSmemBytes, site.stream>>>(maps..., args, act);
    detail::check_launch(name);
  }
};

template <class T, int kBlockN, bool kAKMajor, bool kBKMajor>
void run_hopper(const GemmArgs& args_in, const LaunchSite& site) {
  using Traits = HopperTraits<T, kBlockN, kAKMajor, kBKMajor>;
  static cuda::PerDevice<signed char> configured;
  static cuda::PerDevice<int> pairs;
  GemmArgs args = args_in;
  PersistentLaunch launch(hopper_gemm_kernel<T, Traits, RuntimeActivation>, Traits::kThreads,
                          Traits::kSharedBytes, args, configured, pairs, "hopper_gemm_kernel",
                          site);
  const CUtensorMapDataType type = hopper_map_type<T>();
  const CUtensorMap map_a =
      cuda::tc::encode_tensor_map(hopper_a_map(args, type, kAKMajor, Traits::kBlockM));
  const CUtensorMap map_b = cuda::tc::encode_tensor_map(
      hopper_b_map(args, type, kBKMajor, Traits::kBlockN, args.cluster_m));
  // Without the TMA-store epilogue the kernel never reads map_d: A's map stands in.
  const CUtensorMap map_d =
      args.tma_store ? cuda::tc::encode_tensor_map(hopper_d_map(args, type)) : map_a;
  launch.launch(args, Traits::kBlockM, Traits::kBlockN, 1, "hopper_gemm_kernel", site, map_a,
                map_b, map_d, TiledALoader{}, IdentityRows{});
}

// The ping-pong kernel (hopper_pingpong.cuh): one block per SM, optionally in pairs along M
// (not with split K: gemm.cpp refuses the combination).
template <class T, int kBlockM, int kBlockN, bool kAKMajor, bool kBKMajor>
void run_hopper_pingpong(const GemmArgs& args_in, const LaunchSite& site) {
  using Traits = PingpongTraits<T, kBlockM, kBlockN, kAKMajor, kBKMajor>;
  static cuda::PerDevice<signed char> configured;
  static cuda::PerDevice<int> pairs;
  GemmArgs args = args_in;
  if (args.splits > 1) args.cluster_m = 1;
  PersistentLaunch launch(hopper_pingpong_kernel<T, Traits, RuntimeActivation>, Traits::kThreads,
                          Traits::kSharedBytes, args, configured, pairs, "hopper_pingpong_kernel",
                          site);
  const CUtensorMapDataType type = hopper_map_type<T>();
  const CUtensorMap map_a =
      cuda::tc::encode_tensor_map(hopper_a_map(args, type, kAKMajor, Traits::kBlockM));
  const CUtensorMap map_b = cuda::tc::encode_tensor_map(
      hopper_b_map(args, type, kBKMajor, Traits::kBlockN, args.cluster_m));
  launch.launch(args, Traits::kBlockM, Traits::kBlockN, args.splits > 1 ? args.splits : 1,
                "hopper_pingpong_kernel", site, map_a, map_b);
}

}  // namespace rudnn::gemm::kernels
