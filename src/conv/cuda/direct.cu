// Direct convolution on CUDA cores: any rank, groups, dilation, padding and layout (operands
// addressed through their strides). Forward and data backward: one thread per output element,
// consecutive threads along the output's innermost memory axis; the data gradient is a gather
// over the outputs covering each input element, so every element is one thread's fixed-order
// sum. Weight and bias gradients: one warp per element, the lanes splitting batch x space and
// folding with a fixed butterfly: deterministic, no atomics, no workspace. FP32 accumulation,
// 64-bit offsets.
#include <cuda_runtime.h>

#include "conv/cuda/common.cuh"
#include "conv/cuda/launch.h"
#include "core/cuda_check.h"
#include "cuda/launch.cuh"
#include "cuda/reduce.cuh"
#include "cuda/types.cuh"

namespace rudnn::conv_detail::cuda {

using rudnn::cuda::from_float;
using rudnn::cuda::to_float;

namespace {

template <class T>
__global__ void __launch_bounds__(kThreads)
    forward_kernel(Forward p, const T* __restrict__ input, const T* __restrict__ weight,
                   const T* __restrict__ bias, const T* __restrict__ residual, T* __restrict__ out) {
  const ConvShape& s = p.s;
  const bool channels_fastest = p.out_st.c == 1 && s.out_channels > 1;
  const int64_t total = s.batch * s.out_channels * s.out_space();
  for (int64_t flat = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; flat < total;
       flat += int64_t{gridDim.x} * blockDim.x) {
    int64_t n, k, o[3];
    split5(flat, s.out_channels, s.out, channels_fastest, n, k, o);
    const int64_t g = k / s.group_out(), c0 = g * s.group_in();
    float acc = 0.0f;
    for (int64_t tz = 0; tz < s.kernel[0]; ++tz) {
      const int64_t iz = o[0] * s.stride[0] - s.pad[0] + tz * s.dilation[0];
      if (iz < 0 || iz >= s.in[0]) continue;
      for (int64_t ty = 0; ty < s.kernel[1]; ++ty) {
        const int64_t iy = o[1] * s.stride[1] - s.pad[1] + ty * s.dilation[1];
        if (iy < 0 || iy >= s.in[1]) continue;
        for (int64_t tx = 0; tx < s.kernel[2]; ++tx) {
          const int64_t ix = o[2] * s.stride[2] - s.pad[2] + tx * s.dilation[2];
          if (ix < 0 || ix >= s.in[2]) continue;
          const T* in = input + at(p.input_st, n, c0, iz, iy, ix);
          const T* w = weight + at(p.weight_st, k, 0, tz, ty, tx);
          for (int64_t c = 0; c < s.group_in(); ++c) {
            acc += to_float(in[c * p.input_st.c]) * to_float(w[c * p.weight_st.c]);
          }
        }
      }
    }
    if (bias != nullptr) acc += to_float(bias[k]);
    if (residual != nullptr) acc += to_float(residual[at(p.residual_st, n, k, o[0], o[1], o[2])]);
    out[at(p.out_st, n, k, o[0], o[1], o[2])] = from_float<T>(activate(p.activation, acc));
  }
}

template <class T>
__global__ void __launch_bounds__(kThreads)
    data_kernel(DataBackward p, const T* __restrict__ dout, const T* __restrict__ weight,
                T* __restrict__ dinput) {
  const ConvShape& s = p.s;
  const bool channels_fastest = p.dinput_st.c == 1 && s.in_channels > 1;
  const int64_t total = s.batch * s.in_channels * s.in_space();
  for (int64_t flat = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; flat < total;
       flat += int64_t{gridDim.x} * blockDim.x) {
    int64_t n, ci, i[3];
    split5(flat, s.in_channels, s.in, channels_fastest, n, ci, i);
    const int64_t g = ci / s.group_in(), c = ci % s.group_in(), k0 = g * s.group_out();
    float acc = 0.0f;
    for (int64_t tz = 0; tz < s.kernel[0]; ++tz) {
      const int64_t nz = i[0] + s.pad[0] - tz * s.dilation[0];
      if (nz < 0 || nz % s.stride[0] != 0 || nz / s.stride[0] >= s.out[0]) continue;
      for (int64_t ty = 0; ty < s.kernel[1]; ++ty) {
        const int64_t ny = i[1] + s.pad[1] - ty * s.dilation[1];
        if (ny < 0 || ny % s.stride[1] != 0 || ny / s.stride[1] >= s.out[1]) continue;
        for (int64_t tx = 0; tx < s.kernel[2]; ++tx) {
          const int64_t nx = i[2] + s.pad[2] - tx * s.dilation[2];
          if (nx < 0 || nx % s.stride[2] != 0 || nx / s.stride[2] >= s.out[2]) continue;
          const T* d = dout + at(p.dout_st, n, k0, nz / s.stride[0], ny / s.stride[1],
                                 nx / s.stride[2]);
          const T* w = weight + at(p.weight_st, k0, c, tz, ty, tx);
          for (int64_t k = 0; k < s.group_out(); ++k) {
            acc += to_float(d[k * p.dout_st.c]) * to_float(w[k * p.weight_st.n]);
          }
        }
      }
    }
    dinput[at(p.dinput_st, n, ci, i[0], i[1], i[2])] = from_float<T>(acc);
  }
}

using rudnn::cuda::warp_sum;

// Warps [0, weights) take the weight elements (logical [K, C/groups, kz, ky, kx] order), the
// next K warps (when dbias) the bias elements.
template <class T>
__global__ void __launch_bounds__(kThreads)
    weight_kernel(WeightBackward p, const T* __restrict__ dout, const T* __restrict__ input,
                  T* __restrict__ dweight, T* __restrict__ dbias) {
  const ConvShape& s = p.s;
  const int lane = threadIdx.x % 32;
  const int64_t weights = s.out_channels * s.group_in() * s.taps();
  const int64_t warps = weights + (dbias != nullptr ? s.out_channels : 0);
  const int64_t positions = s.batch * s.out_space();
  for (int64_t warp = (blockIdx.x * int64_t{blockDim.x} + threadIdx.x) / 32; warp < warps;
       warp += int64_t{gridDim.x} * blockDim.x / 32) {
    float acc = 0.0f;
    if (warp >= weights) {
      const int64_t k = warp - weights;
      for (int64_t r = lane; r < positions; r += 32) {
        const int64_t n = r / s.out_space(), o = r % s.out_space();
        const int64_t ox = o % s.out[2], oy = o / s.out[2] % s.out[1], oz = o / s.out[2] / s.out[1];
        acc += to_float(dout[at(p.dout_st, n, k, oz, oy, ox)]);
      }
      acc = warp_sum(acc);
      if (lane == 0) dbias[k] = from_float<T>(acc);
      continue;
    }
    int64_t w = warp;
    const int64_t tx = w % s.kernel[2];
    w /= s.kernel[2];
    const int64_t ty = w % s.kernel[1];
    w /= s.kernel[1];
    const int64_t tz = w % s.kernel[0];
    w /= s.kernel[0];
    const int64_t c = w % s.group_in(), k = w / s.group_in();
    const int64_t ci = k / s.group_out() * s.group_in() + c;
    for (int64_t r = lane; r < positions; r += 32) {
      const int64_t n = r / s.out_space(), o = r % s.out_space();
      const int64_t ox = o % s.out[2], oy = o / s.out[2] % s.out[1], oz = o / s.out[2] / s.out[1];
      const int64_t iz = oz * s.stride[0] - s.pad[0] + tz * s.dilation[0];
      const int64_t iy = oy * s.stride[1] - s.pad[1] + ty * s.dilation[1];
      const int64_t ix = ox * s.stride[2] - s.pad[2] + tx * s.dilation[2];
      if (iz < 0 || iz >= s.in[0] || iy < 0 || iy >= s.in[1] || ix < 0 || ix >= s.in[2]) continue;
      acc += to_float(dout[at(p.dout_st, n, k, oz, oy, ox)]) *
             to_float(input[at(p.input_st, n, ci, iz, iy, ix)]);
    }
    acc = warp_sum(acc);
    if (lane == 0) dweight[at(p.dweight_st, k, c, tz, ty, tx)] = from_float<T>(acc);
  }
}

}  // namespace

void forward(const Forward& p, const Stream& stream) {
  if (p.depthwise_kernel) {
    depthwise_forward(p, stream);
    return;
  }
  if (p.implicit_gemm_kernel) {
    implicit_gemm_forward(p, stream);
    return;
  }
  const rudnn::cuda::LaunchContext ctx(stream);
  rudnn::cuda::with_float_type(p.s.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const int64_t total = p.s.batch * p.s.out_channels * p.s.out_space();
    forward_kernel<T><<<blocks_for(total), kThreads, 0, ctx.stream>>>(
        p, static_cast<const T*>(p.input), static_cast<const T*>(p.weight),
        static_cast<const T*>(p.bias), static_cast<const T*>(p.residual), static_cast<T*>(p.out));
  });
  detail::check_launch("conv_forward direct");
}

void data_backward(const DataBackward& p, const Stream& stream) {
  const rudnn::cuda::LaunchContext ctx(stream);
  rudnn::cuda::with_float_type(p.s.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const int64_t total = p.s.batch * p.s.in_channels * p.s.in_space();
    data_kernel<T><<<blocks_for(total), kThreads, 0, ctx.stream>>>(
        p, static_cast<const T*>(p.dout), static_cast<const T*>(p.weight),
        static_cast<T*>(p.dinput));
  });
  detail::check_launch("conv_data_backward direct");
}

void weight_backward(const WeightBackward& p, const Stream& stream) {
  const rudnn::cuda::LaunchContext ctx(stream);
  rudnn::cuda::with_float_type(p.s.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const int64_t warps = p.s.out_channels * p.s.group_in() * p.s.taps() +
                          (p.dbias != nullptr ? p.s.out_channels : 0);
    weight_kernel<T><<<blocks_for(warps * 32), kThreads, 0, ctx.stream>>>(
        p, static_cast<const T*>(p.dout), static_cast<const T*>(p.input),
        static_cast<T*>(p.dweight), static_cast<T*>(p.dbias));
  });
  detail::check_launch("conv_weight_backward direct");
}

}  // namespace rudnn::conv_detail::cuda
