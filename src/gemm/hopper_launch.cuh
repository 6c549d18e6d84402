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

template <class T>
CUtensorMapDataType hopper_map_type() {
  return std::is_same_v<T, __half> ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16
                                   : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
}

template <class T, int kBlockN, bool kAKMajor, bool kBKMajor>
void run_hopper(const GemmArgs& args_in, const LaunchSite& site) {
  using Traits = HopperTraits<T, kBlockN, kAKMajor, kBKMajor>;
  auto kernel = hopper_gemm_kernel<T, Traits, RuntimeActivation>;
  static cuda::PerDevice<signed char> configured;  // the shared-memory opt-in, once per device
  configured.get(site.device, [&]() -> signed char {
    detail::check_cuda(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                            Traits::kSharedBytes),
                       "cudaFuncSetAttribute(hopper_gemm_kernel)");
    return 1;
  });

  // Pairs of blocks need both in one GPC: how many such clusters are resident at once (0: the
  // device cannot co-schedule them; then no clusters).
  cudaLaunchAttribute cluster_attribute{};
  cluster_attribute.id = cudaLaunchAttributeClusterDimension;
  cluster_attribute.val.clusterDim.x = 2;
  cluster_attribute.val.clusterDim.y = 1;
  cluster_attribute.val.clusterDim.z = 1;
  cudaLaunchConfig_t config{};
  config.blockDim = dim3(Traits::kThreads);
  config.dynamicSmemBytes = Traits::kSharedBytes;
  config.stream = site.stream;
  config.attrs = &cluster_attribute;
  config.numAttrs = 1;
  GemmArgs args = args_in;
  if (args.cluster_m != 2) args.cluster_m = 1;
  if (args.cluster_m > 1) {
    static cuda::PerDevice<int> pairs;  // resident clusters of two, plus one (0: unknown)
    const int resident = pairs.get(site.device, [&] {
      cudaLaunchConfig_t query = config;
      query.gridDim = dim3(2);
      int clusters = 0;
      if (cudaOccupancyMaxActiveClusters(&clusters, kernel, &query) != cudaSuccess) {
        (void)cudaGetLastError();
        clusters = 0;
      }
      return clusters + 1;
    }) - 1;
    if (resident < 1) args.cluster_m = 1;
    config.gridDim = dim3(static_cast<unsigned>(
        persistent_grid(args, Traits::kBlockM * 2, Traits::kBlockN, 1,
                        LaunchSite{site.stream, site.device, resident > 0 ? resident : 1}) *
        2));
  }

  const CUtensorMapDataType type = hopper_map_type<T>();
  const CUtensorMap map_a =
      cuda::tc::encode_tensor_map(hopper_a_map(args, type, kAKMajor, Traits::kBlockM));
  const CUtensorMap map_b = cuda::tc::encode_tensor_map(
      hopper_b_map(args, type, kBKMajor, Traits::kBlockN, args.cluster_m));
  const RuntimeActivation act{args.activation};

  if (args.cluster_m > 1) {
    detail::check_cuda(cudaLaunchKernelEx(&config, kernel, map_a, map_b, args, act),
                       "hopper_gemm_kernel (clusters of 2)");
    return;
  }
  const int grid = persistent_grid(args, Traits::kBlockM, Traits::kBlockN, 1, site);
  kernel<<<grid, Traits::kThreads, Traits::kSharedBytes, site.stream>>>(map_a, map_b, args, act);
  detail::check_launch("hopper_gemm_kernel");
}

// The ping-pong kernel (hopper_pingpong.cuh): one block per SM, no clusters.
template <class T, int kBlockM, int kBlockN, bool kAKMajor, bool kBKMajor>
void run_hopper_pingpong(const GemmArgs& args_in, const LaunchSite& site) {
  using Traits = PingpongTraits<T, kBlockM, kBlockN, kAKMajor, kBKMajor>;
  auto kernel = hopper_pingpong_kernel<T, Traits, RuntimeActivation>;
  static cuda::PerDevice<signed char> configured;  // the shared-memory opt-in, once per device
  configured.get(site.device, [&]() -> signed char {
    detail::check_cuda(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                            Traits::kSharedBytes),
                       "cudaFuncSetAttribute(hopper_pingpong_kernel)");
    return 1;
  });
  GemmArgs args = args_in;
  args.cluster_m = 1;
  const CUtensorMapDataType type = hopper_map_type<T>();
  const CUtensorMap map_a =
      cuda::tc::encode_tensor_map(hopper_a_map(args, type, kAKMajor, Traits::kBlockM));
  const CUtensorMap map_b =
      cuda::tc::encode_tensor_map(hopper_b_map(args, type, kBKMajor, Traits::kBlockN, 1));
  const RuntimeActivation act{args.activation};
  // Split K: (tile, split) units, still at most one block per SM (the hand-over between splits
  // needs every block resident).
  const int splits = args.splits > 1 ? args.splits : 1;
  const int grid = static_cast<int>(std::min<int64_t>(
      int64_t{persistent_grid(args, Traits::kBlockM, Traits::kBlockN, 1, site)} * splits,
      site.multiprocessors));
  kernel<<<grid, Traits::kThreads, Traits::kSharedBytes, site.stream>>>(map_a, map_b, args, act);
  detail::check_launch("hopper_pingpong_kernel");
}

}  // namespace rudnn::gemm::kernels
