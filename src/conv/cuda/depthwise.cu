// Depthwise forward (groups == C, 1-D or 2-D, any kernel size, any channel multiplier): a
// memory-bound kernel. Channels-last operands with one filter per channel, C a multiple of a
// 16-byte pack and aligned rows take the packed kernel: a thread computes one pack of
// channels of one output pixel (16-byte loads and stores), the filters and bias transposed
// to [tap][C] FP32 in shared memory so that a pack's weights are consecutive too. Anything
// else takes the scalar kernel: one thread per output element along the output's innermost
// memory axis. Both clip the tap ranges to the input once per output, so the window loop has
// no bounds test.
#include <cuda_runtime.h>

#include "conv/cuda/common.cuh"
#include "conv/cuda/launch.h"
#include "core/cuda_check.h"
#include "cuda/launch.cuh"
#include "cuda/types.cuh"
#include "cuda/vec.cuh"

namespace rudnn::conv_detail::cuda {

using rudnn::cuda::from_float;
using rudnn::cuda::to_float;

namespace {

// Taps [lo, hi) of one axis whose input positions fall inside [0, size).
__device__ __forceinline__ void tap_range(int64_t o, int64_t stride, int64_t pad, int64_t dil,
                                          int64_t kernel, int64_t size, int64_t& lo,
                                          int64_t& hi) {
  const int64_t start = o * stride - pad;
  lo = start >= 0 ? 0 : (-start + dil - 1) / dil;
  const int64_t last = size - 1 - start;  // the largest t * dil allowed
  hi = last < 0 ? 0 : min(kernel, last / dil + 1);
  if (hi < lo) hi = lo;
}

template <class T, class Index>
__global__ void __launch_bounds__(kThreads)
    depthwise_kernel(Forward p, const T* __restrict__ input, const T* __restrict__ weight,
                     const T* __restrict__ bias, const T* __restrict__ residual,
                     T* __restrict__ out) {
  const ConvShape& s = p.s;
  const bool channels_fastest = p.out_st.c == 1 && s.out_channels > 1;
  const int64_t total = s.batch * s.out_channels * s.out_space();
  const int64_t multiplier = s.group_out();
  for (int64_t flat = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; flat < total;
       flat += int64_t{gridDim.x} * blockDim.x) {
    int64_t n, k, o[3];
    split5(flat, s.out_channels, s.out, channels_fastest, n, k, o);
    int64_t ylo, yhi, xlo, xhi;
    tap_range(o[1], s.stride[1], s.pad[1], s.dilation[1], s.kernel[1], s.in[1], ylo, yhi);
    tap_range(o[2], s.stride[2], s.pad[2], s.dilation[2], s.kernel[2], s.in[2], xlo, xhi);
    const T* in = input + at(p.input_st, n, k / multiplier, o[0], o[1] * s.stride[1] - s.pad[1],
                             o[2] * s.stride[2] - s.pad[2]);
    const T* w = weight + k * p.weight_st.n;
    const Index in_y = static_cast<Index>(s.dilation[1] * p.input_st.sp[1]);
    const Index in_x = static_cast<Index>(s.dilation[2] * p.input_st.sp[2]);
    const Index w_y = static_cast<Index>(p.weight_st.sp[1]), w_x = static_cast<Index>(p.weight_st.sp[2]);
    float acc = 0.0f;
    for (Index ty = static_cast<Index>(ylo); ty < static_cast<Index>(yhi); ++ty) {
      for (Index tx = static_cast<Index>(xlo); tx < static_cast<Index>(xhi); ++tx) {
        acc += to_float(in[ty * in_y + tx * in_x]) * to_float(w[ty * w_y + tx * w_x]);
      }
    }
    if (bias != nullptr) acc += to_float(bias[k]);
    if (residual != nullptr) acc += to_float(residual[at(p.residual_st, n, k, o[0], o[1], o[2])]);
    out[at(p.out_st, n, k, o[0], o[1], o[2])] = from_float<T>(activate(p.activation, acc));
  }
}

// Channels-last, multiplier 1: thread = one pack of V channels of one output pixel.
template <class T, int V>
__global__ void __launch_bounds__(kThreads)
    depthwise_packed_kernel(Forward p, const T* __restrict__ input, const T* __restrict__ weight,
                            const T* __restrict__ bias, const T* __restrict__ residual,
                            T* __restrict__ out) {
  extern __shared__ float filters[];  // [taps][C], then bias [C]
  const ConvShape& s = p.s;
  const int64_t C = s.out_channels, taps = s.kernel[1] * s.kernel[2];
  for (int64_t i = threadIdx.x; i < taps * C; i += blockDim.x) {
    const int64_t k = i % C, t = i / C;
    filters[i] = to_float(weight[k * p.weight_st.n + t / s.kernel[2] * p.weight_st.sp[1] +
                                 t % s.kernel[2] * p.weight_st.sp[2]]);
  }
  for (int64_t k = threadIdx.x; k < C; k += blockDim.x) {
    filters[taps * C + k] = bias != nullptr ? to_float(bias[k]) : 0.0f;
  }
  __syncthreads();
  const int64_t packs = C / V;
  const int64_t total = s.batch * s.out_space() * packs;
  for (int64_t flat = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; flat < total;
       flat += int64_t{gridDim.x} * blockDim.x) {
    const int64_t c0 = flat % packs * V, pixel = flat / packs;
    const int64_t ox = pixel % s.out[2], oy = pixel / s.out[2] % s.out[1];
    const int64_t n = pixel / s.out[2] / s.out[1];
    int64_t ylo, yhi, xlo, xhi;
    tap_range(oy, s.stride[1], s.pad[1], s.dilation[1], s.kernel[1], s.in[1], ylo, yhi);
    tap_range(ox, s.stride[2], s.pad[2], s.dilation[2], s.kernel[2], s.in[2], xlo, xhi);
    float acc[V];
#pragma unroll
    for (int j = 0; j < V; ++j) acc[j] = filters[taps * C + c0 + j];
    for (int64_t ty = ylo; ty < yhi; ++ty) {
      const int64_t iy = oy * s.stride[1] - s.pad[1] + ty * s.dilation[1];
      for (int64_t tx = xlo; tx < xhi; ++tx) {
        const int64_t ix = ox * s.stride[2] - s.pad[2] + tx * s.dilation[2];
        float v[V];
        rudnn::cuda::load_pack<T, V>(input + at(p.input_st, n, c0, 0, iy, ix), v);
        const float* f = filters + (ty * s.kernel[2] + tx) * C + c0;
#pragma unroll
        for (int j = 0; j < V; ++j) acc[j] += v[j] * f[j];
      }
    }
    if (residual != nullptr) {
      float r[V];
      rudnn::cuda::load_pack<T, V>(residual + at(p.residual_st, n, c0, 0, oy, ox), r);
#pragma unroll
      for (int j = 0; j < V; ++j) acc[j] += r[j];
    }
#pragma unroll
    for (int j = 0; j < V; ++j) acc[j] = activate(p.activation, acc[j]);
    rudnn::cuda::store_pack<T, V>(out + at(p.out_st, n, c0, 0, oy, ox), acc);
  }
}

// Whether a channels-last operand's pixels start on pack boundaries: channel stride 1 and
// every other stride a multiple of the pack, from an aligned base.
bool packed_rows(const Strides& st, const void* data, int v, size_t bytes) {
  return st.c == 1 && st.n % v == 0 && st.sp[1] % v == 0 && st.sp[2] % v == 0 &&
         reinterpret_cast<uintptr_t>(data) % bytes == 0;
}

}  // namespace

void depthwise_forward(const Forward& p, const Stream& stream) {
  const rudnn::cuda::LaunchContext ctx(stream);
  // Offsets within one window fit 32 bits unless a tap's stride times the kernel does not.
  const int64_t span =
      p.s.kernel[1] * p.s.dilation[1] * p.input_st.sp[1] +
      p.s.kernel[2] * p.s.dilation[2] * p.input_st.sp[2] + p.s.kernel[1] * p.weight_st.sp[1] +
      p.s.kernel[2] * p.weight_st.sp[2];
  const bool narrow = span < (int64_t{1} << 31);
  rudnn::cuda::with_float_type(p.s.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    constexpr int V = 16 / sizeof(T);
    const int64_t C = p.s.out_channels, taps = p.s.kernel[1] * p.s.kernel[2];
    const size_t shared = static_cast<size_t>((taps + 1) * C) * sizeof(float);
    if (p.s.group_out() == 1 && C % V == 0 && shared <= 48 * 1024 &&
        packed_rows(p.input_st, p.input, V, 16) && packed_rows(p.out_st, p.out, V, 16) &&
        (p.residual == nullptr || packed_rows(p.residual_st, p.residual, V, 16))) {
      const int64_t total = p.s.batch * p.s.out_space() * (C / V);
      depthwise_packed_kernel<T, V><<<blocks_for(total), kThreads, shared, ctx.stream>>>(
          p, static_cast<const T*>(p.input), static_cast<const T*>(p.weight),
          static_cast<const T*>(p.bias), static_cast<const T*>(p.residual),
          static_cast<T*>(p.out));
      return;
    }
    const int64_t total = p.s.batch * p.s.out_channels * p.s.out_space();
    auto args = [&](auto kernel) {
      kernel<<<blocks_for(total), kThreads, 0, ctx.stream>>>(
          p, static_cast<const T*>(p.input), static_cast<const T*>(p.weight),
          static_cast<const T*>(p.bias), static_cast<const T*>(p.residual),
          static_cast<T*>(p.out));
    };
    if (narrow) {
      args(depthwise_kernel<T, int32_t>);
    } else {
      args(depthwise_kernel<T, int64_t>);
    }
  });
  detail::check_launch("conv_forward depthwise");
}

}  // namespace rudnn::conv_detail::cuda
