// Tiny kernels testing the portable primitives (tensor_core/mma_sync.cuh: mma.sync, ldmatrix,
// cp.async; tile_scheduler.cuh), the device-code probe, and host wrappers of the layer's
// layout functions. See primitive_kernels.h.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <numeric>

#include "cuda/tensor_core/arch.cuh"
#include "cuda/tensor_core/mma_sync.cuh"
#include "cuda/tensor_core/tile_scheduler.cuh"
#include "cuda/tensor_core/wgmma.cuh"
#include "primitive_kernels.h"
#include "primitive_util.cuh"

namespace rudnn::test::tc {
namespace ctc = rudnn::cuda::tc;
namespace {

__global__ void probe_kernel(int* out) {
  out[0] = RUDNN_TC_SM80;
  out[1] = RUDNN_TC_SM90;
  out[2] = RUDNN_TC_SM90A;
}

__device__ __forceinline__ uint32_t pack(uint16_t lo, uint16_t hi) {
  return static_cast<uint32_t>(lo) | (static_cast<uint32_t>(hi) << 16);
}

template <class T>
__global__ void mma_16816_kernel(const uint16_t* a, const uint16_t* b, const float* c, float* d) {
  const int l = threadIdx.x, g = l / 4, t = l % 4;
  auto A = [&](int r, int k) { return a[r * 16 + k]; };
  auto B = [&](int k, int n) { return b[k * 8 + n]; };
  const uint32_t af[4] = {
      pack(A(g, 2 * t), A(g, 2 * t + 1)), pack(A(g + 8, 2 * t), A(g + 8, 2 * t + 1)),
      pack(A(g, 2 * t + 8), A(g, 2 * t + 9)), pack(A(g + 8, 2 * t + 8), A(g + 8, 2 * t + 9))};
  const uint32_t bf[2] = {pack(B(2 * t, g), B(2 * t + 1, g)),
                          pack(B(2 * t + 8, g), B(2 * t + 9, g))};
  float acc[4] = {c[g * 8 + 2 * t], c[g * 8 + 2 * t + 1], c[(g + 8) * 8 + 2 * t],
                  c[(g + 8) * 8 + 2 * t + 1]};
  ctc::mma_16816<T>(acc, af, bf);
  d[g * 8 + 2 * t] = acc[0];
  d[g * 8 + 2 * t + 1] = acc[1];
  d[(g + 8) * 8 + 2 * t] = acc[2];
  d[(g + 8) * 8 + 2 * t + 1] = acc[3];
}

__global__ void mma_1688_tf32_kernel(const float* a, const float* b, const float* c, float* d) {
  const int l = threadIdx.x, g = l / 4, t = l % 4;
  auto A = [&](int r, int k) { return ctc::to_tf32(a[r * 8 + k]); };
  auto B = [&](int k, int n) { return ctc::to_tf32(b[k * 8 + n]); };
  const uint32_t af[4] = {A(g, t), A(g + 8, t), A(g, t + 4), A(g + 8, t + 4)};
  const uint32_t bf[2] = {B(t, g), B(t + 4, g)};
  float acc[4] = {c[g * 8 + 2 * t], c[g * 8 + 2 * t + 1], c[(g + 8) * 8 + 2 * t],
                  c[(g + 8) * 8 + 2 * t + 1]};
  ctc::mma_1688_tf32(acc, af, bf);
  d[g * 8 + 2 * t] = acc[0];
  d[g * 8 + 2 * t + 1] = acc[1];
  d[(g + 8) * 8 + 2 * t] = acc[2];
  d[(g + 8) * 8 + 2 * t + 1] = acc[3];
}

__global__ void to_tf32_kernel(const float* v, uint32_t* out, int n) {
  for (int i = threadIdx.x; i < n; i += blockDim.x) out[i] = ctc::to_tf32(v[i]);
}

template <int kCount, bool kTrans>
__global__ void ldmatrix_kernel(const uint16_t* values, uint32_t* out) {
  __shared__ __align__(16) uint16_t s[32 * 8];
  for (int i = threadIdx.x; i < 32 * 8; i += 32) s[i] = values[i];
  __syncwarp();
  const int l = threadIdx.x;
  uint32_t r[kCount];
  ctc::ldmatrix<kCount, kTrans>(r, s + l * 8);  // row l % 8 of matrix l / 8 = row l
#pragma unroll
  for (int i = 0; i < 4; ++i) out[l * 4 + i] = i < kCount ? r[i] : 0u;
}

__global__ void cp_async_ring_kernel(const uint8_t* src, const int* valid, uint8_t* out,
                                     int blocks) {
  constexpr int S = 3;
  __shared__ __align__(16) uint8_t ring[S][128 * 16];
  const int t = threadIdx.x;
  auto load = [&](int kb) {
    const int j = kb * 128 + t;
    const int v = valid[j];
    ctc::cp_async_16(&ring[kb % S][t * 16], v > 0 ? src + j * 16 : src, static_cast<uint32_t>(v));
  };
#pragma unroll
  for (int s = 0; s < S - 1; ++s) {
    if (s < blocks) load(s);
    ctc::cp_async_commit();
  }
  for (int kb = 0; kb < blocks; ++kb) {
    ctc::cp_async_wait<S - 2>();
    __syncthreads();
    if (kb + S - 1 < blocks) load(kb + S - 1);
    ctc::cp_async_commit();
    const int c = (t + 1) % 128;  // another thread's chunk: the barrier must have covered it
    for (int e = 0; e < 16; ++e) out[(kb * 128 + c) * 16 + e] = ring[kb % S][c * 16 + e];
  }
}

__global__ void scheduler_kernel(const int* counts, int groups, int* visits, int* group_out,
                                 int* local_out) {
  extern __shared__ int table[];
  ctc::PersistentTileScheduler<1024> s;
  s.build(
      groups, [&](int g) { return counts[g]; }, table);
  for (int tile = blockIdx.x; tile < s.total_tiles; tile += gridDim.x) {
    if (threadIdx.x == 0) {
      const int g = s.group_of(tile);
      atomicAdd(&visits[tile], 1);
      group_out[tile] = g;
      local_out[tile] = tile - s.group_start(g);
    }
  }
}

}  // namespace

DeviceCode probe_device_code() {
  DeviceBuffer<int> out(3);
  probe_kernel<<<1, 1>>>(out.get());
  finish("probe_kernel");
  const std::vector<int> v = out.to_host();
  return DeviceCode{v[0] != 0, v[1] != 0, v[2] != 0};
}

uint32_t operand_offset(bool mn_major, int span, int mn_extent, int k_extent, int mn, int k) {
  const ctc::OperandTile t{mn_major ? ctc::Major::MN : ctc::Major::K, span, mn_extent, k_extent};
  return t.offset(mn, k);
}
uint32_t operand_lbo(bool mn_major, int span, int mn_extent, int k_extent) {
  return ctc::OperandTile{mn_major ? ctc::Major::MN : ctc::Major::K, span, mn_extent, k_extent}
      .lbo();
}
uint32_t operand_sbo(bool mn_major, int span, int mn_extent, int k_extent) {
  return ctc::OperandTile{mn_major ? ctc::Major::MN : ctc::Major::K, span, mn_extent, k_extent}
      .sbo();
}
uint32_t swizzle(uint32_t offset, int span) { return ctc::swizzle_offset(offset, span); }
uint64_t descriptor(uint32_t start, uint32_t lbo, uint32_t sbo, int span) {
  return ctc::make_descriptor(start, lbo, sbo, span);
}
std::array<int, 3> banded(int band_m, int group, int local, int m_tiles, int n_tiles) {
  ctc::TileCoord c{};
  switch (band_m) {
    case 1:
      c = ctc::banded_coord<1>(group, local, m_tiles, n_tiles);
      break;
    case 4:
      c = ctc::banded_coord<4>(group, local, m_tiles, n_tiles);
      break;
    default:
      c = ctc::banded_coord<8>(group, local, m_tiles, n_tiles);
      break;
  }
  return {c.group, c.m_tile, c.n_tile};
}

std::vector<float> mma_16816(bool bf16, const std::vector<uint16_t>& a,
                             const std::vector<uint16_t>& b, const std::vector<float>& c) {
  DeviceBuffer<uint16_t> da(a), db(b);
  DeviceBuffer<float> dc(c), dd(16 * 8);
  if (bf16)
    mma_16816_kernel<__nv_bfloat16><<<1, 32>>>(da.get(), db.get(), dc.get(), dd.get());
  else
    mma_16816_kernel<__half><<<1, 32>>>(da.get(), db.get(), dc.get(), dd.get());
  finish("mma_16816_kernel");
  return dd.to_host();
}

std::vector<float> mma_1688_tf32(const std::vector<float>& a, const std::vector<float>& b,
                                 const std::vector<float>& c) {
  DeviceBuffer<float> da(a), db(b), dc(c), dd(16 * 8);
  mma_1688_tf32_kernel<<<1, 32>>>(da.get(), db.get(), dc.get(), dd.get());
  finish("mma_1688_tf32_kernel");
  return dd.to_host();
}

std::vector<uint32_t> to_tf32_bits(const std::vector<float>& v) {
  DeviceBuffer<float> dv(v);
  DeviceBuffer<uint32_t> out(v.size());
  to_tf32_kernel<<<1, 128>>>(dv.get(), out.get(), static_cast<int>(v.size()));
  finish("to_tf32_kernel");
  return out.to_host();
}

std::vector<uint32_t> ldmatrix(int count, bool trans, const std::vector<uint16_t>& values) {
  DeviceBuffer<uint16_t> dv(values);
  DeviceBuffer<uint32_t> out(32 * 4);
  if (count == 1 && !trans) ldmatrix_kernel<1, false><<<1, 32>>>(dv.get(), out.get());
  if (count == 1 && trans) ldmatrix_kernel<1, true><<<1, 32>>>(dv.get(), out.get());
  if (count == 2 && !trans) ldmatrix_kernel<2, false><<<1, 32>>>(dv.get(), out.get());
  if (count == 2 && trans) ldmatrix_kernel<2, true><<<1, 32>>>(dv.get(), out.get());
  if (count == 4 && !trans) ldmatrix_kernel<4, false><<<1, 32>>>(dv.get(), out.get());
  if (count == 4 && trans) ldmatrix_kernel<4, true><<<1, 32>>>(dv.get(), out.get());
  finish("ldmatrix_kernel");
  return out.to_host();
}

std::vector<uint8_t> cp_async_ring(const std::vector<uint8_t>& src, const std::vector<int>& valid) {
  const int blocks = static_cast<int>(valid.size() / 128);
  DeviceBuffer<uint8_t> ds(src), out(src.size());
  DeviceBuffer<int> dv(valid);
  RUDNN_TC_CHECK(cudaMemset(out.get(), 0xAB, src.size()));
  cp_async_ring_kernel<<<1, 128>>>(ds.get(), dv.get(), out.get(), blocks);
  finish("cp_async_ring_kernel");
  return out.to_host();
}

std::vector<std::array<int, 3>> scheduler_walk(const std::vector<int>& counts, int blocks) {
  const int total = std::accumulate(counts.begin(), counts.end(), 0);
  DeviceBuffer<int> dc(counts), visits(total), groups(total), locals(total);
  scheduler_kernel<<<blocks, 128, 1024 * sizeof(int)>>>(dc.get(), static_cast<int>(counts.size()),
                                                        visits.get(), groups.get(), locals.get());
  finish("scheduler_kernel");
  const auto v = visits.to_host(), g = groups.to_host(), l = locals.to_host();
  std::vector<std::array<int, 3>> out(total);
  for (int i = 0; i < total; ++i) out[i] = {v[i], g[i], l[i]};
  return out;
}

}  // namespace rudnn::test::tc
