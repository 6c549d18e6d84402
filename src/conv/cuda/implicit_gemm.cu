// Implicit-GEMM forward convolution on tensor cores (mma.sync m16n8k16, bf16/f16, FP32
// accumulation), for channels-last input and weight, groups 1, C % 8 == 0, any rank.
//
// GEMM view: rows m = output pixels (n, z, y, x), columns = filters k, reduction = taps x C.
// A tile row is one output pixel's C-slice under one tap, read straight from the input with
// 16-byte cp.async (zero-filled where the tap falls in the padding or past C): no im2col
// buffer exists. B rows are filters, C-contiguous. CTA tile 128 x 128 x 32 (one tap, 32
// channels per step), 8 warps of 64 x 32, three cp.async stages; shared rows of 64 bytes
// with chunk c of row r at c ^ ((r / 2) % 4), so the eight rows of each ldmatrix hit eight
// different 16-byte bank groups. The epilogue (bias, residual, activation) runs on the FP32
// accumulators before the one rounding.
#include <cuda_runtime.h>

#include "conv/cuda/common.cuh"
#include "conv/cuda/launch.h"
#include "core/cuda_check.h"
#include "cuda/launch.cuh"
#include "cuda/tensor_core/mma_sync.cuh"
#include "cuda/types.cuh"

namespace rudnn::conv_detail::cuda {

using rudnn::cuda::from_float;
using rudnn::cuda::to_float;
namespace tc = rudnn::cuda::tc;

namespace {

constexpr int kBm = 128, kBn = 128, kBk = 32, kStages = 3;
constexpr int kGemmThreads = 256;
constexpr int kTileElems = kBm * kBk;  // per operand per stage (kBm == kBn)

// Element offset of (row, 16-byte chunk) in a swizzled [128][32] tile of 16-bit elements.
__device__ __forceinline__ int swizzled(int row, int chunk) {
  return row * kBk + ((chunk ^ ((row >> 1) & 3)) * 8);
}

template <class T>
__global__ void __launch_bounds__(kGemmThreads)
    implicit_gemm_kernel(Forward p, const T* __restrict__ input, const T* __restrict__ weight,
                         const T* __restrict__ bias, const T* __restrict__ residual,
                         T* __restrict__ out) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  T* smem_a = reinterpret_cast<T*>(smem_raw);
  T* smem_b = smem_a + kStages * kTileElems;
  const ConvShape& s = p.s;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int64_t M = s.batch * s.out_space(), K = s.out_channels, C = s.in_channels;
  const int64_t m0 = blockIdx.x * int64_t{kBm}, n0 = blockIdx.y * int64_t{kBn};

  // This thread's two load rows (tid / 4 and tid / 4 + 64) and its chunk of each.
  const int chunk = tid % 4;
  int64_t a_n[2], a_start[2][3];
  bool a_valid[2];
  const T* b_row[2];
  bool b_valid[2];
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int64_t m = m0 + tid / 4 + 64 * i;
    a_valid[i] = m < M;
    const int64_t mm = a_valid[i] ? m : 0;
    const int64_t ox = mm % s.out[2], oy = mm / s.out[2] % s.out[1];
    const int64_t oz = mm / s.out[2] / s.out[1] % s.out[0];
    a_n[i] = mm / s.out_space();
    a_start[i][0] = oz * s.stride[0] - s.pad[0];
    a_start[i][1] = oy * s.stride[1] - s.pad[1];
    a_start[i][2] = ox * s.stride[2] - s.pad[2];
    const int64_t k = n0 + tid / 4 + 64 * i;
    b_valid[i] = k < K;
    b_row[i] = weight + (b_valid[i] ? k : 0) * p.weight_st.n;
  }

  const int64_t c_steps = (C + kBk - 1) / kBk;
  const int64_t steps = s.taps() * c_steps;

  auto load_stage = [&](int64_t step, int slot) {
    if (step >= steps) return;
    const int64_t tap = step / c_steps, c0 = (step % c_steps) * kBk + chunk * 8;
    const int64_t tx = tap % s.kernel[2], ty = tap / s.kernel[2] % s.kernel[1];
    const int64_t tz = tap / s.kernel[2] / s.kernel[1];
    const bool c_ok = c0 < C;  // C % 8 == 0: a chunk is all in or all out
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int row = tid / 4 + 64 * i;
      const int64_t iz = a_start[i][0] + tz * s.dilation[0];
      const int64_t iy = a_start[i][1] + ty * s.dilation[1];
      const int64_t ix = a_start[i][2] + tx * s.dilation[2];
      const bool ok = a_valid[i] && c_ok && iz >= 0 && iz < s.in[0] && iy >= 0 && iy < s.in[1] &&
                      ix >= 0 && ix < s.in[2];
      const T* src = ok ? input + at(p.input_st, a_n[i], c0, iz, iy, ix) : input;
      tc::cp_async_16(smem_a + slot * kTileElems + swizzled(row, chunk), src, ok ? 16 : 0);
      const bool bok = b_valid[i] && c_ok;
      const T* bsrc = bok ? b_row[i] + tz * p.weight_st.sp[0] + ty * p.weight_st.sp[1] +
                                tx * p.weight_st.sp[2] + c0
                          : weight;
      tc::cp_async_16(smem_b + slot * kTileElems + swizzled(row, chunk), bsrc, bok ? 16 : 0);
    }
  };

  float acc[4][4][4] = {};
  const int warp_m = warp % 2, warp_n = warp / 2;

#pragma unroll
  for (int st = 0; st < kStages - 1; ++st) {
    load_stage(st, st);
    tc::cp_async_commit();
  }
  for (int64_t step = 0; step < steps; ++step) {
    tc::cp_async_wait<kStages - 2>();
    __syncthreads();
    load_stage(step + kStages - 1, static_cast<int>((step + kStages - 1) % kStages));
    tc::cp_async_commit();
    const int slot = static_cast<int>(step % kStages);
    const T* a_tile = smem_a + slot * kTileElems;
    const T* b_tile = smem_b + slot * kTileElems;
#pragma unroll
    for (int kk = 0; kk < kBk; kk += 16) {
      uint32_t a[4][4], b[4][2];
#pragma unroll
      for (int mi = 0; mi < 4; ++mi) {
        const int q = lane / 8;
        const int row = warp_m * 64 + mi * 16 + 8 * (q % 2) + lane % 8;
        tc::ldmatrix<4, false>(a[mi], a_tile + swizzled(row, kk / 8 + q / 2));
      }
#pragma unroll
      for (int nj = 0; nj < 4; nj += 2) {
        const int q = lane / 8;
        const int row = warp_n * 32 + nj * 8 + 8 * (q / 2) + lane % 8;
        uint32_t r[4];
        tc::ldmatrix<4, false>(r, b_tile + swizzled(row, kk / 8 + q % 2));
        b[nj][0] = r[0];
        b[nj][1] = r[1];
        b[nj + 1][0] = r[2];
        b[nj + 1][1] = r[3];
      }
#pragma unroll
      for (int mi = 0; mi < 4; ++mi)
#pragma unroll
        for (int ni = 0; ni < 4; ++ni) tc::mma_16816<T>(acc[mi][ni], a[mi], b[ni]);
    }
  }
  tc::cp_async_wait<0>();

  const int g = lane / 4, t = lane % 4;
#pragma unroll
  for (int mi = 0; mi < 4; ++mi)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int64_t m = m0 + warp_m * 64 + mi * 16 + g + 8 * h;
      if (m >= M) continue;
      const int64_t ox = m % s.out[2], oy = m / s.out[2] % s.out[1];
      const int64_t oz = m / s.out[2] / s.out[1] % s.out[0], n = m / s.out_space();
#pragma unroll
      for (int ni = 0; ni < 4; ++ni)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int64_t k = n0 + warp_n * 32 + ni * 8 + 2 * t + e;
          if (k >= K) continue;
          float v = acc[mi][ni][2 * h + e];
          if (bias != nullptr) v += to_float(bias[k]);
          if (residual != nullptr) v += to_float(residual[at(p.residual_st, n, k, oz, oy, ox)]);
          out[at(p.out_st, n, k, oz, oy, ox)] = from_float<T>(activate(p.activation, v));
        }
    }
}

template <class T>
void launch(const Forward& p, cudaStream_t stream) {
  const size_t shared = 2 * kStages * kTileElems * sizeof(T);
  const int64_t M = p.s.batch * p.s.out_space();
  const dim3 grid(static_cast<unsigned>((M + kBm - 1) / kBm),
                  static_cast<unsigned>((p.s.out_channels + kBn - 1) / kBn));
  implicit_gemm_kernel<T><<<grid, kGemmThreads, shared, stream>>>(
      p, static_cast<const T*>(p.input), static_cast<const T*>(p.weight),
      static_cast<const T*>(p.bias), static_cast<const T*>(p.residual), static_cast<T*>(p.out));
}

}  // namespace

void implicit_gemm_forward(const Forward& p, const Stream& stream) {
  if (p.hopper_kernel) {
    hopper_implicit_gemm_forward(p, stream);
    return;
  }
  const rudnn::cuda::LaunchContext ctx(stream);
  if (p.s.dtype == DType::bf16) {
    launch<__nv_bfloat16>(p, ctx.stream);
  } else {
    launch<__half>(p, ctx.stream);
  }
  detail::check_launch("conv_forward implicit gemm");
}

}  // namespace rudnn::conv_detail::cuda
