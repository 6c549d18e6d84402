// Tiny kernels testing the sm_90 primitives: mbarrier phases, expect-tx and cluster arrivals
// (tensor_core/pipeline.cuh), TMA loads of 1-5 D boxes, swizzled loads, stores and multicast
// (tma.cuh, tensor_map.h), and a warp-specialised ring with setmaxnreg. See
// primitive_kernels.h. Cluster kernels are launched with a cluster attribute at run time, so
// this file compiles for any architecture list.
#include <cuda.h>

#include <cstring>
#include <stdexcept>

#include "cuda/tensor_core/pipeline.cuh"
#include "cuda/tensor_core/tensor_map.h"
#include "cuda/tensor_core/tma.cuh"
#include "primitive_kernels.h"
#include "primitive_util.cuh"

namespace rudnn::test::tc {
namespace ctc = rudnn::cuda::tc;
namespace {

struct Coords {
  int v[5];
};

__device__ __forceinline__ uint8_t* align_up(uint8_t* p, uintptr_t alignment) {
  return reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(p) + alignment - 1) &
                                    ~(alignment - 1));
}

__global__ void mbarrier_phases_kernel(int rounds, int* received, int* test_wait) {
  __shared__ uint64_t full, empty;
  __shared__ int slot;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (threadIdx.x == 0) {
    ctc::mbarrier_init(&full, 32);
    ctc::mbarrier_init(&empty, 32);
    ctc::fence_barrier_init();
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    test_wait[0] = ctc::mbarrier_test_wait(&full, 0);  // the current phase: not complete
    test_wait[1] = ctc::mbarrier_test_wait(&full, 1);  // "the phase before": complete
  }
  __syncthreads();
  for (int r = 0; r < rounds; ++r) {
    if (warp == 1) {  // producer
      if (r > 0) ctc::mbarrier_wait(&empty, static_cast<uint32_t>(r - 1) & 1u);
      if (lane == 0) slot = 1000 + r;
      __syncwarp();
      ctc::mbarrier_arrive(&full);
    } else {  // consumer
      ctc::mbarrier_wait(&full, static_cast<uint32_t>(r) & 1u);
      if (lane == 0) received[r] = slot;
      if (r == 0 && lane == 0) {
        // Phase 0 done; phase 1 cannot complete before this warp arrives on `empty`.
        test_wait[2] = ctc::mbarrier_test_wait(&full, 0);
        test_wait[3] = ctc::mbarrier_test_wait(&full, 1);
      }
      __syncwarp();
      ctc::mbarrier_arrive(&empty);
    }
  }
}

__global__ void bulk_copies_kernel(const uint8_t* first, uint32_t n1, const uint8_t* second,
                                   uint32_t n2, uint8_t* out) {
  __shared__ __align__(128) uint8_t buf[4096];
  __shared__ uint64_t bar;
  if (threadIdx.x == 0) {
    ctc::mbarrier_init(&bar, 1);
    ctc::fence_barrier_init();
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    ctc::mbarrier_expect_bytes(&bar, n1);  // announced, no arrival: the phase stays open
    ctc::bulk_copy_load(buf, first, n1, &bar);
    ctc::mbarrier_arrive_expect_bytes(&bar, n2);
    ctc::bulk_copy_load(buf + n1, second, n2, &bar);
  }
  ctc::mbarrier_wait(&bar, 0);
  for (uint32_t i = threadIdx.x; i < n1 + n2; i += blockDim.x) out[i] = buf[i];
}

__global__ void cluster_arrivals_kernel(int* out) {
  __shared__ uint64_t bar;
  const uint32_t rank = ctc::cluster_ctarank();
  if (threadIdx.x == 0) {
    ctc::mbarrier_init(&bar, 2);
    ctc::fence_barrier_init();
  }
  ctc::cluster_sync();  // every block's barrier is initialised before any peer arrives
  if (threadIdx.x == 0) {
    ctc::mbarrier_arrive_cluster(&bar, rank ^ 1u);
    ctc::mbarrier_arrive_cluster(&bar, rank);
  }
  ctc::mbarrier_wait(&bar, 0);
  if (threadIdx.x == 0) {
    out[2 * blockIdx.x] = static_cast<int>(rank);
    out[2 * blockIdx.x + 1] = 1;
  }
  ctc::cluster_sync();  // no block leaves while a peer may still arrive on its barrier
}

template <int kRank>
__global__ void tma_load_kernel(const __grid_constant__ CUtensorMap map, Coords c, int box_elems,
                                float* out) {
  extern __shared__ uint8_t smem_raw[];
  __shared__ uint64_t bar;
  float* box = reinterpret_cast<float*>(align_up(smem_raw, 128));
  if (threadIdx.x == 0) {
    ctc::mbarrier_init(&bar, 1);
    ctc::fence_barrier_init();
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    ctc::tma_prefetch_map(&map);
    ctc::mbarrier_arrive_expect_bytes(&bar, static_cast<uint32_t>(box_elems) * 4u);
    if constexpr (kRank == 1) ctc::tma_load(box, &map, &bar, c.v[0]);
    if constexpr (kRank == 2) ctc::tma_load(box, &map, &bar, c.v[0], c.v[1]);
    if constexpr (kRank == 3) ctc::tma_load(box, &map, &bar, c.v[0], c.v[1], c.v[2]);
    if constexpr (kRank == 4) ctc::tma_load(box, &map, &bar, c.v[0], c.v[1], c.v[2], c.v[3]);
    if constexpr (kRank == 5)
      ctc::tma_load(box, &map, &bar, c.v[0], c.v[1], c.v[2], c.v[3], c.v[4]);
  }
  ctc::mbarrier_wait(&bar, 0);
  for (int i = threadIdx.x; i < box_elems; i += blockDim.x) out[i] = box[i];
}

__global__ void tma_swizzled_kernel(const __grid_constant__ CUtensorMap map, int words,
                                    uint16_t* out) {
  extern __shared__ uint8_t smem_raw[];
  __shared__ uint64_t bar;
  uint16_t* box = reinterpret_cast<uint16_t*>(align_up(smem_raw, 1024));
  if (threadIdx.x == 0) {
    ctc::mbarrier_init(&bar, 1);
    ctc::fence_barrier_init();
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    ctc::mbarrier_arrive_expect_bytes(&bar, static_cast<uint32_t>(words) * 2u);
    ctc::tma_load(box, &map, &bar, 0, 0);
  }
  ctc::mbarrier_wait(&bar, 0);
  for (int i = threadIdx.x; i < words; i += blockDim.x) out[i] = box[i];
}

template <int kRank>
__global__ void tma_store_kernel(const __grid_constant__ CUtensorMap map, Coords c,
                                 const float* values, int box_elems) {
  extern __shared__ uint8_t smem_raw[];
  float* box = reinterpret_cast<float*>(align_up(smem_raw, 128));
  for (int i = threadIdx.x; i < box_elems; i += blockDim.x) box[i] = values[i];
  ctc::fence_proxy_async_shared();  // the generic writes, before the async proxy reads them
  __syncthreads();
  if (threadIdx.x == 0) {
    if constexpr (kRank == 2) ctc::tma_store(&map, box, c.v[0], c.v[1]);
    if constexpr (kRank == 3) ctc::tma_store(&map, box, c.v[0], c.v[1], c.v[2]);
    ctc::tma_store_commit();
    ctc::tma_store_wait_read<0>();
    ctc::tma_store_wait<0>();
  }
}

__global__ void tma_multicast_kernel(const __grid_constant__ CUtensorMap map, int c0, int c1,
                                     float* out) {
  __shared__ __align__(128) float box[16 * 32];
  __shared__ uint64_t bar;
  const uint32_t rank = ctc::cluster_ctarank();
  if (threadIdx.x == 0) {
    ctc::mbarrier_init(&bar, 1);
    ctc::fence_barrier_init();
  }
  ctc::cluster_sync();
  if (threadIdx.x == 0) {
    ctc::mbarrier_arrive_expect_bytes(&bar, 16 * 32 * 4);  // both halves land here
    ctc::tma_load_multicast(box + rank * 8 * 32, &map, &bar, uint16_t{0b11}, c0,
                            c1 + 8 * static_cast<int>(rank));
  }
  ctc::mbarrier_wait(&bar, 0);
  for (int i = threadIdx.x; i < 16 * 32; i += blockDim.x) out[rank * 16 * 32 + i] = box[i];
  ctc::cluster_sync();
}

// 1 producer + 2 consumer warpgroups over a 3-stage ring of 16 x 64 f32 blocks.
__global__ void __launch_bounds__(384, 1)
    ring_kernel(const __grid_constant__ CUtensorMap map, int blocks, float* partial) {
  constexpr int S = 3;
  __shared__ __align__(128) float stage[S][16 * 64];
  __shared__ uint64_t full[S], empty[S];
  if (threadIdx.x == 0) {
    for (int s = 0; s < S; ++s) {
      ctc::mbarrier_init(&full[s], 1);
      ctc::mbarrier_init(&empty[s], 8);  // one arrival per consumer warp
    }
    ctc::fence_barrier_init();
  }
  __syncthreads();
  if (threadIdx.x < 128) {
    ctc::warpgroup_release_registers<40>();
    if (threadIdx.x == 0) {
      ctc::RingPosition<S> ring;
      for (int kb = 0; kb < blocks; ++kb) {
        ctc::mbarrier_wait(&empty[ring.stage], ring.phase ^ 1u);
        ctc::mbarrier_arrive_expect_bytes(&full[ring.stage], 16 * 64 * 4);
        ctc::tma_load(stage[ring.stage], &map, &full[ring.stage], 0, kb * 16);
        ring.advance();
      }
    }
    return;
  }
  ctc::warpgroup_claim_registers<232>();
  const int ct = threadIdx.x - 128, lane = threadIdx.x % 32;
  const int col = ct % 64, part = ct / 64;  // 4 parts of 4 rows each
  float sum = 0.0f;
  ctc::RingPosition<S> ring;
  for (int kb = 0; kb < blocks; ++kb) {
    ctc::mbarrier_wait(&full[ring.stage], ring.phase);
#pragma unroll
    for (int r = 0; r < 4; ++r) sum += stage[ring.stage][(part * 4 + r) * 64 + col];
    __syncwarp();
    if (lane == 0) ctc::mbarrier_arrive(&empty[ring.stage]);
    ring.advance();
  }
  partial[ct] = sum;
}

void launch_cluster_of_two(const void* kernel, int threads, void** args, const char* name) {
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(2);
  config.blockDim = dim3(threads);
  cudaLaunchAttribute attribute{};
  attribute.id = cudaLaunchAttributeClusterDimension;
  attribute.val.clusterDim.x = 2;
  attribute.val.clusterDim.y = 1;
  attribute.val.clusterDim.z = 1;
  config.attrs = &attribute;
  config.numAttrs = 1;
  check(cudaLaunchKernelExC(&config, kernel, args), name);
  finish(name);
}

// A dense f32 map over `dims` with a `box` (no swizzle).
CUtensorMap f32_map(const float* base, const std::vector<int64_t>& dims,
                    const std::vector<int>& box) {
  cuda::tc::TensorMapSpec s;
  s.type = CU_TENSOR_MAP_DATA_TYPE_FLOAT32;
  s.rank = static_cast<int>(dims.size());
  s.base = base;
  uint64_t stride = 4;
  for (int i = 0; i < s.rank; ++i) {
    s.dims[i] = static_cast<cuuint64_t>(dims[i]);
    s.box[i] = static_cast<cuuint32_t>(box[i]);
    if (i > 0) s.strides[i - 1] = stride;
    stride *= static_cast<uint64_t>(dims[i]);
  }
  return cuda::tc::encode_tensor_map(s);
}

Coords coords_of(const std::vector<int>& c) {
  Coords out{};
  for (size_t i = 0; i < c.size() && i < 5; ++i) out.v[i] = c[i];
  return out;
}

int product(const std::vector<int>& v) {
  int p = 1;
  for (int x : v) p *= x;
  return p;
}

}  // namespace

MbarrierPhases mbarrier_phases(int rounds) {
  DeviceBuffer<int> received(rounds), tw(4);
  mbarrier_phases_kernel<<<1, 64>>>(rounds, received.get(), tw.get());
  finish("mbarrier_phases_kernel");
  MbarrierPhases out;
  out.received = received.to_host();
  const auto t = tw.to_host();
  for (int i = 0; i < 4; ++i) out.test_wait[i] = t[i];
  return out;
}

std::vector<uint8_t> mbarrier_bulk_copies(const std::vector<uint8_t>& first,
                                          const std::vector<uint8_t>& second) {
  if (first.size() + second.size() > 4096 || first.size() % 16 || second.size() % 16)
    throw std::invalid_argument(
        "mbarrier_bulk_copies: sizes must be multiples of 16, <= 4096 in all");
  DeviceBuffer<uint8_t> d1(first), d2(second), out(first.size() + second.size());
  bulk_copies_kernel<<<1, 128>>>(d1.get(), static_cast<uint32_t>(first.size()), d2.get(),
                                 static_cast<uint32_t>(second.size()), out.get());
  finish("bulk_copies_kernel");
  return out.to_host();
}

std::vector<int> mbarrier_cluster_arrivals() {
  DeviceBuffer<int> out(4);
  int* p = out.get();
  void* args[] = {&p};
  launch_cluster_of_two(reinterpret_cast<const void*>(&cluster_arrivals_kernel), 64, args,
                        "cluster_arrivals_kernel");
  return out.to_host();
}

std::vector<float> tma_load_box(const std::vector<float>& x, const std::vector<int64_t>& dims,
                                const std::vector<int>& box, const std::vector<int>& coords) {
  DeviceBuffer<float> dx(x);
  const int elems = product(box);
  DeviceBuffer<float> out(elems);
  const CUtensorMap map = f32_map(dx.get(), dims, box);
  const Coords c = coords_of(coords);
  const size_t smem = static_cast<size_t>(elems) * 4 + 128;
  switch (dims.size()) {
    case 1:
      tma_load_kernel<1><<<1, 128, smem>>>(map, c, elems, out.get());
      break;
    case 2:
      tma_load_kernel<2><<<1, 128, smem>>>(map, c, elems, out.get());
      break;
    case 3:
      tma_load_kernel<3><<<1, 128, smem>>>(map, c, elems, out.get());
      break;
    case 4:
      tma_load_kernel<4><<<1, 128, smem>>>(map, c, elems, out.get());
      break;
    default:
      tma_load_kernel<5><<<1, 128, smem>>>(map, c, elems, out.get());
      break;
  }
  finish("tma_load_kernel");
  return out.to_host();
}

std::vector<uint16_t> tma_load_swizzled(const std::vector<uint16_t>& x, int rows, int span) {
  DeviceBuffer<uint16_t> dx(x);
  const int cols = span / 2, words = rows * cols;
  DeviceBuffer<uint16_t> out(words);
  cuda::tc::TensorMapSpec s;
  s.type = CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
  s.rank = 2;
  s.base = dx.get();
  s.dims[0] = static_cast<cuuint64_t>(cols);
  s.dims[1] = static_cast<cuuint64_t>(rows);
  s.strides[0] = static_cast<cuuint64_t>(span);
  s.box[0] = static_cast<cuuint32_t>(cols);
  s.box[1] = static_cast<cuuint32_t>(rows);
  s.swizzle = cuda::tc::swizzle_mode(span);
  const CUtensorMap map = cuda::tc::encode_tensor_map(s);
  tma_swizzled_kernel<<<1, 128, static_cast<size_t>(words) * 2 + 1024>>>(map, words, out.get());
  finish("tma_swizzled_kernel");
  return out.to_host();
}

std::vector<float> tma_store_box(const std::vector<float>& initial,
                                 const std::vector<int64_t>& dims, const std::vector<int>& box,
                                 const std::vector<int>& coords,
                                 const std::vector<float>& box_values) {
  DeviceBuffer<float> dx(initial), dv(box_values);
  const CUtensorMap map = f32_map(dx.get(), dims, box);
  const Coords c = coords_of(coords);
  const int elems = product(box);
  const size_t smem = static_cast<size_t>(elems) * 4 + 128;
  if (dims.size() == 2)
    tma_store_kernel<2><<<1, 128, smem>>>(map, c, dv.get(), elems);
  else if (dims.size() == 3)
    tma_store_kernel<3><<<1, 128, smem>>>(map, c, dv.get(), elems);
  else
    throw std::invalid_argument("tma_store_box: rank 2 or 3");
  finish("tma_store_kernel");
  return dx.to_host();
}

std::vector<float> tma_multicast(const std::vector<float>& x, int rows, int cols, int c0, int c1) {
  DeviceBuffer<float> dx(x), out(2 * 16 * 32);
  CUtensorMap map = f32_map(dx.get(), {cols, rows}, {32, 8});
  float* o = out.get();
  void* args[] = {&map, &c0, &c1, &o};
  launch_cluster_of_two(reinterpret_cast<const void*>(&tma_multicast_kernel), 128, args,
                        "tma_multicast_kernel");
  return out.to_host();
}

std::vector<float> ring_column_sums(const std::vector<float>& x, int blocks) {
  DeviceBuffer<float> dx(x), partial(256);
  const CUtensorMap map = f32_map(dx.get(), {64, int64_t{blocks} * 16}, {64, 16});
  ring_kernel<<<1, 384>>>(map, blocks, partial.get());
  finish("ring_kernel");
  const auto p = partial.to_host();
  std::vector<float> sums(64, 0.0f);
  for (int t = 0; t < 256; ++t) sums[t % 64] += p[t];
  return sums;
}

}  // namespace rudnn::test::tc
