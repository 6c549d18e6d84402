// Tiny kernels testing wgmma (tensor_core/wgmma.cuh, sm_90a): one warpgroup multiplies a
// 64 x 64 A by a 64 x N B (4 k-steps of 16) with the operands stored by plain threads at
// OperandTile::offset (K- or MN-major, every swizzle span, no swizzle), descriptors from
// operand_descriptor, A from shared memory (ss) or from registers (rs), and writes D from the
// documented accumulator layout. See primitive_kernels.h.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <stdexcept>

#include "cuda/tensor_core/pipeline.cuh"
#include "cuda/tensor_core/wgmma.cuh"
#include "primitive_kernels.h"
#include "primitive_util.cuh"

namespace rudnn::test::tc {
namespace ctc = rudnn::cuda::tc;
namespace {

using ctc::Major;

__device__ __forceinline__ uint8_t* align_1024(uint8_t* p) {
  return reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(p) + 1023) & ~uintptr_t{1023});
}

__device__ __forceinline__ uint32_t pack(uint16_t lo, uint16_t hi) {
  return static_cast<uint32_t>(lo) | (static_cast<uint32_t>(hi) << 16);
}

// Stores element (mn, k) of a logical [k_extent][mn_extent] ... global b[k * mn_extent + mn]
// (or a[mn * k_extent + k] when mn_rows) at tile.offset(mn, k).
__device__ __forceinline__ void fill_tile(uint8_t* tile, const ctc::OperandTile& t,
                                          const uint16_t* g, bool mn_rows) {
  const int count = t.mn_extent * t.k_extent;
  for (int i = threadIdx.x; i < count; i += blockDim.x) {
    int mn, k;
    if (mn_rows) {
      mn = i / t.k_extent;
      k = i % t.k_extent;
    } else {
      k = i / t.mn_extent;
      mn = i % t.mn_extent;
    }
    *reinterpret_cast<uint16_t*>(tile + t.offset(mn, k)) = g[i];
  }
}

// D[64][N] from the accumulator layout.
template <int N>
__device__ __forceinline__ void write_d(const float (&acc)[N / 2], float* d) {
  const int w = threadIdx.x / 32, l = threadIdx.x % 32, g = l / 4, t = l % 4;
#pragma unroll
  for (int j = 0; j < N / 8; ++j) {
    d[(16 * w + g) * N + 8 * j + 2 * t] = acc[4 * j];
    d[(16 * w + g) * N + 8 * j + 2 * t + 1] = acc[4 * j + 1];
    d[(16 * w + g + 8) * N + 8 * j + 2 * t] = acc[4 * j + 2];
    d[(16 * w + g + 8) * N + 8 * j + 2 * t + 1] = acc[4 * j + 3];
  }
}

template <class T, int N, Major kMajorA, Major kMajorB>
__global__ void __launch_bounds__(128)
    wgmma_ss_kernel(const uint16_t* a, const uint16_t* b, int a_span, int b_span, float* d) {
  extern __shared__ uint8_t smem_raw[];
  uint8_t* as = align_1024(smem_raw);
  const ctc::OperandTile at{kMajorA, a_span, 64, 64};
  const ctc::OperandTile bt{kMajorB, b_span, N, 64};
  uint8_t* bs = as + at.bytes();  // 8192: keeps B on every swizzle's repeat
  fill_tile(as, at, a, true);
  fill_tile(bs, bt, b, false);
  ctc::fence_proxy_async_shared();
  __syncthreads();
  float acc[N / 2];
#pragma unroll
  for (int i = 0; i < N / 2; ++i) acc[i] = 0.0f;
  // Descriptors first: registers a wgmma reads must not be written after wgmma_fence.
  uint64_t da[4], db[4];
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    da[j] = ctc::operand_descriptor(as, at, 0, 16 * j);
    db[j] = ctc::operand_descriptor(bs, bt, 0, 16 * j);
  }
  ctc::fence_operand(acc);
  ctc::wgmma_fence();
#pragma unroll
  for (int j = 0; j < 4; ++j)
    ctc::Wgmma<T, N>::template ss<kMajorA, kMajorB>(acc, da[j], db[j], j > 0 ? 1u : 0u);
  ctc::wgmma_commit();
  ctc::wgmma_wait<0>();
  ctc::fence_operand(acc);
  write_d<N>(acc, d);
}

template <class T, int N, Major kMajorB>
__global__ void __launch_bounds__(128)
    wgmma_rs_kernel(const uint16_t* a, const uint16_t* b, int b_span, float* d) {
  extern __shared__ uint8_t smem_raw[];
  uint8_t* bs = align_1024(smem_raw);
  const ctc::OperandTile bt{kMajorB, b_span, N, 64};
  fill_tile(bs, bt, b, false);
  ctc::fence_proxy_async_shared();
  __syncthreads();
  const int w = threadIdx.x / 32, l = threadIdx.x % 32, g = l / 4, t = l % 4;
  const int r0 = 16 * w + g;
  auto A = [&](int r, int k) { return a[r * 64 + k]; };
  uint32_t frag[4][4];
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const int k0 = 16 * j;
    frag[j][0] = pack(A(r0, k0 + 2 * t), A(r0, k0 + 2 * t + 1));
    frag[j][1] = pack(A(r0 + 8, k0 + 2 * t), A(r0 + 8, k0 + 2 * t + 1));
    frag[j][2] = pack(A(r0, k0 + 2 * t + 8), A(r0, k0 + 2 * t + 9));
    frag[j][3] = pack(A(r0 + 8, k0 + 2 * t + 8), A(r0 + 8, k0 + 2 * t + 9));
  }
  float acc[N / 2];
#pragma unroll
  for (int i = 0; i < N / 2; ++i) acc[i] = 0.0f;
  uint64_t db[4];
#pragma unroll
  for (int j = 0; j < 4; ++j) db[j] = ctc::operand_descriptor(bs, bt, 0, 16 * j);
  ctc::fence_operand(acc);
#pragma unroll
  for (int j = 0; j < 4; ++j) ctc::fence_operand(frag[j]);
  ctc::wgmma_fence();
#pragma unroll
  for (int j = 0; j < 4; ++j)
    ctc::Wgmma<T, N>::template rs<kMajorB>(acc, frag[j], db[j], j > 0 ? 1u : 0u);
  ctc::wgmma_commit();
  ctc::wgmma_wait<0>();
  ctc::fence_operand(acc);
  write_d<N>(acc, d);
}

// S = A[64 x 16] . B[16 x 16]; D = bf16(S) . V[16 x 64] with S's accumulator as A fragment.
__global__ void __launch_bounds__(128)
    wgmma_chain_kernel(const uint16_t* a, const uint16_t* b, const uint16_t* v, float* d) {
  extern __shared__ uint8_t smem_raw[];
  uint8_t* as = align_1024(smem_raw);
  const ctc::OperandTile at{Major::K, 32, 64, 16};  // 2 KB
  const ctc::OperandTile bt{Major::K, 32, 16, 16};  // 512 B
  const ctc::OperandTile vt{Major::K, 32, 64, 16};  // V as n x k: 2 KB
  uint8_t* bs = as + 2048;
  uint8_t* vs = as + 4096;
  fill_tile(as, at, a, true);
  fill_tile(bs, bt, b, false);
  fill_tile(vs, vt, v, false);
  ctc::fence_proxy_async_shared();
  __syncthreads();
  float s[8];
#pragma unroll
  for (int i = 0; i < 8; ++i) s[i] = 0.0f;
  const uint64_t da = ctc::operand_descriptor(as, at, 0, 0);
  const uint64_t db = ctc::operand_descriptor(bs, bt, 0, 0);
  const uint64_t dv = ctc::operand_descriptor(vs, vt, 0, 0);
  ctc::fence_operand(s);
  ctc::wgmma_fence();
  ctc::Wgmma<__nv_bfloat16, 16>::ss<Major::K, Major::K>(s, da, db, 0u);
  ctc::wgmma_commit();
  ctc::wgmma_wait<0>();
  ctc::fence_operand(s);
  uint32_t p[4];
  ctc::accumulator_to_a<__nv_bfloat16>(p, s, 0);
  float acc[32];
#pragma unroll
  for (int i = 0; i < 32; ++i) acc[i] = 0.0f;
  ctc::fence_operand(acc);
  ctc::fence_operand(p);
  ctc::wgmma_fence();
  ctc::Wgmma<__nv_bfloat16, 64>::rs<Major::K>(acc, p, dv, 0u);
  ctc::wgmma_commit();
  ctc::wgmma_wait<0>();
  ctc::fence_operand(acc);
  write_d<64>(acc, d);
}

template <class Kernel>
void allow_shared(Kernel kernel, size_t bytes) {
  RUDNN_TC_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                      static_cast<int>(bytes)));
}

// The instantiated combinations: X(bf16?, N, A MN-major?, B MN-major?).
#define RUDNN_TEST_WGMMA_SS(X)                                                                  \
  X(true, 16, false, false)                                                                     \
  X(true, 32, false, false)                                                                     \
  X(true, 96, false, false) X(true, 64, false, false) X(true, 64, false, true)                  \
      X(true, 64, true, false) X(true, 64, true, true) X(true, 128, false, false)               \
          X(true, 128, false, true) X(true, 128, true, false) X(true, 128, true, true)          \
              X(true, 192, false, false) X(true, 192, false, true) X(true, 192, true, false)    \
                  X(true, 192, true, true) X(true, 256, false, false) X(true, 256, false, true) \
                      X(true, 256, true, false) X(true, 256, true, true)                        \
                          X(false, 64, false, false) X(false, 64, false, true)                  \
                              X(false, 64, true, false) X(false, 64, true, true)                \
                                  X(false, 256, false, false) X(false, 256, false, true)        \
                                      X(false, 256, true, false) X(false, 256, true, true)

#define RUDNN_TEST_WGMMA_RS(X)                                                                    \
  X(true, 64, false)                                                                              \
  X(true, 64, true) X(true, 128, false) X(true, 128, true) X(true, 192, false) X(true, 192, true) \
      X(true, 256, false) X(true, 256, true) X(false, 64, false) X(false, 64, true)               \
          X(false, 256, false) X(false, 256, true)

}  // namespace

bool wgmma_ss_available(bool bf16, int n, bool a_mn, bool b_mn) {
#define RUDNN_X(BF, NN, AM, BM) \
  if (bf16 == BF && n == NN && a_mn == AM && b_mn == BM) return true;
  RUDNN_TEST_WGMMA_SS(RUDNN_X)
#undef RUDNN_X
  return false;
}

bool wgmma_rs_available(bool bf16, int n, bool b_mn) {
#define RUDNN_X(BF, NN, BM) \
  if (bf16 == BF && n == NN && b_mn == BM) return true;
  RUDNN_TEST_WGMMA_RS(RUDNN_X)
#undef RUDNN_X
  return false;
}

std::vector<float> wgmma_ss(bool bf16, int n, bool a_mn, int a_span, bool b_mn, int b_span,
                            const std::vector<uint16_t>& a, const std::vector<uint16_t>& b) {
  DeviceBuffer<uint16_t> da(a), db(b);
  DeviceBuffer<float> dd(static_cast<size_t>(64) * n);
  const size_t smem = 1024 + 64 * 64 * 2 + static_cast<size_t>(n) * 64 * 2;
  bool launched = false;
#define RUDNN_X(BF, NN, AM, BM)                                             \
  if (!launched && bf16 == BF && n == NN && a_mn == AM && b_mn == BM) {     \
    using T = std::conditional_t<BF, __nv_bfloat16, __half>;                \
    auto kernel = wgmma_ss_kernel < T, NN, AM ? Major::MN : Major::K,       \
         BM ? Major::MN : Major::K > ;                                      \
    allow_shared(kernel, smem);                                             \
    kernel<<<1, 128, smem>>>(da.get(), db.get(), a_span, b_span, dd.get()); \
    launched = true;                                                        \
  }
  RUDNN_TEST_WGMMA_SS(RUDNN_X)
#undef RUDNN_X
  if (!launched) throw std::invalid_argument("wgmma_ss: combination not instantiated");
  finish("wgmma_ss_kernel");
  return dd.to_host();
}

std::vector<float> wgmma_rs(bool bf16, int n, bool b_mn, int b_span, const std::vector<uint16_t>& a,
                            const std::vector<uint16_t>& b) {
  DeviceBuffer<uint16_t> da(a), db(b);
  DeviceBuffer<float> dd(static_cast<size_t>(64) * n);
  const size_t smem = 1024 + static_cast<size_t>(n) * 64 * 2;
  bool launched = false;
#define RUDNN_X(BF, NN, BM)                                              \
  if (!launched && bf16 == BF && n == NN && b_mn == BM) {                \
    using T = std::conditional_t<BF, __nv_bfloat16, __half>;             \
    auto kernel = wgmma_rs_kernel < T, NN, BM ? Major::MN : Major::K > ; \
    allow_shared(kernel, smem);                                          \
    kernel<<<1, 128, smem>>>(da.get(), db.get(), b_span, dd.get());      \
    launched = true;                                                     \
  }
  RUDNN_TEST_WGMMA_RS(RUDNN_X)
#undef RUDNN_X
  if (!launched) throw std::invalid_argument("wgmma_rs: combination not instantiated");
  finish("wgmma_rs_kernel");
  return dd.to_host();
}

std::vector<float> wgmma_chain(const std::vector<uint16_t>& a, const std::vector<uint16_t>& b,
                               const std::vector<uint16_t>& v) {
  DeviceBuffer<uint16_t> da(a), db(b), dv(v);
  DeviceBuffer<float> dd(64 * 64);
  wgmma_chain_kernel<<<1, 128, 1024 + 8192>>>(da.get(), db.get(), dv.get(), dd.get());
  finish("wgmma_chain_kernel");
  return dd.to_host();
}

}  // namespace rudnn::test::tc
