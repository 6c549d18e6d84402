// Validated problems of the convolution family: sizes, options, element strides and raw
// pointers (no Tensor).
#pragma once

#include <cstdint>

#include "rudnn/dtype.h"

namespace rudnn::conv_detail {

// Element strides of an activation [batch, channel, z, y, x] or of a weight [k, c, z, y, x]
// (`n` is k's stride there). Any strides: NCHW, channels-last and views are the same code.
struct Strides {
  int64_t n = 0, c = 0, sp[3] = {0, 0, 0};
};

// Every problem is 3-D: a 1-D or 2-D one has its missing leading spatial axes of size 1 with
// kernel 1, stride 1, padding 0, dilation 1 (and stride 0 in memory).
struct ConvShape {
  DType dtype = DType::f32;
  int dims = 2;
  int64_t batch = 0, in_channels = 0, out_channels = 0, groups = 1;
  int64_t in[3] = {1, 1, 1};
  int64_t out[3] = {1, 1, 1};
  int64_t kernel[3] = {1, 1, 1};
  int64_t stride[3] = {1, 1, 1};
  int64_t pad[3] = {0, 0, 0};  // before each axis; what is after only shaped `out`
  int64_t dilation[3] = {1, 1, 1};

  constexpr int64_t group_in() const { return in_channels / groups; }
  constexpr int64_t group_out() const { return out_channels / groups; }
  constexpr int64_t taps() const { return kernel[0] * kernel[1] * kernel[2]; }
  constexpr int64_t out_space() const { return out[0] * out[1] * out[2]; }
  constexpr int64_t in_space() const { return in[0] * in[1] * in[2]; }
};

enum class Activation { None, Relu, Silu, Gelu };

struct Forward {
  ConvShape s;
  Strides input_st, weight_st, out_st, residual_st;
  const void* input = nullptr;
  const void* weight = nullptr;
  const void* bias = nullptr;      // [K] dense, or null
  const void* residual = nullptr;  // the output's shape, or null
  Activation activation = Activation::None;
  bool depthwise_kernel = false;     // the plan chose the Depthwise kernel
  bool implicit_gemm_kernel = false; // the plan chose the ImplicitGemm kernel
  bool hopper_kernel = false;        // ... on sm_90a: the Hopper GEMM kernel (hopper_conv.cu)
  void* out = nullptr;
};

struct DataBackward {
  ConvShape s;
  Strides dout_st, weight_st, dinput_st;
  const void* dout = nullptr;
  const void* weight = nullptr;
  void* dinput = nullptr;
};

// The data gradient as forward convolutions of dout (what ImplicitGemm's data gradient runs
// on its forward kernel). Along one axis, input position i = r + q·stride (phase r in
// [0, stride)) receives
//   dinput[i] = sum over taps t with (i + pad − t·dilation) divisible by stride of
//               dout[(i + pad − t·dilation) / stride] · weight[t],
// and those taps are equally spaced: read from the last one backwards (the weight flipped),
// phase r is a stride-1 convolution over dout with `taps` taps, dilation `dilation`, after
// `skip` leading dout positions, with `pad` zeros before. A phase with no tap (or nothing of
// dout left) gives zeros. K and C exchange roles: dout's K channels are the phase
// convolution's input channels. Stride 1 has one phase, the whole flipped weight.
struct DataPhaseAxis {
  int64_t outputs = 0;    // the phase's input positions q = 0 .. outputs − 1
  int64_t taps = 0;       // kernel taps of the phase (0: zeros)
  int64_t first_tap = 0;  // the weight tap read by the phase's tap 0 ...
  int64_t tap_step = 0;   // ... and the step to the next (negative: flipped)
  int64_t skip = 0;       // dout positions before the phase convolution's input
  int64_t pad = 0;        // zeros before it (>= 0)
  int64_t dilation = 1;   // over dout
};
inline DataPhaseAxis data_phase_axis(int64_t in, int64_t out, int64_t kernel, int64_t stride,
                                     int64_t pad, int64_t dilation, int64_t r) {
  DataPhaseAxis ax;
  ax.outputs = in > r ? (in - r + stride - 1) / stride : 0;
  int64_t last = -1, step = 0;
  for (int64_t t = 0; t < kernel; ++t) {
    if ((r + pad - t * dilation) % stride != 0) continue;
    if (last >= 0) step = t - last;
    last = t;
    ++ax.taps;
  }
  if (ax.taps == 0) return ax;
  ax.first_tap = last;
  ax.tap_step = ax.taps > 1 ? -step : -1;
  ax.dilation = ax.taps > 1 ? step * dilation / stride : 1;
  // Phase tap j reads dout[q + c + j · dilation], c the last tap's offset (exact division).
  const int64_t c = (r + pad - last * dilation) / stride;
  ax.skip = c > 0 ? c : 0;
  ax.pad = c < 0 ? -c : 0;
  if (ax.skip >= out) ax.taps = 0;  // every read falls past dout's end: zeros
  return ax;
}

// The phase convolution of phase axes `ax` (one per axis [z, y, x]) of problem s, as a
// forward problem's shape: input dout (K channels) less the skipped positions, output the
// phase's input positions (C channels), stride 1.
inline ConvShape data_phase_shape(const ConvShape& s, const DataPhaseAxis ax[3]) {
  ConvShape f = s;
  f.in_channels = s.out_channels;
  f.out_channels = s.in_channels;
  for (int a = 0; a < 3; ++a) {
    f.in[a] = s.out[a] - ax[a].skip;
    f.out[a] = ax[a].outputs;
    f.kernel[a] = ax[a].taps;
    f.stride[a] = 1;
    f.pad[a] = ax[a].pad;
    f.dilation[a] = ax[a].dilation;
  }
  return f;
}

struct WeightBackward {
  ConvShape s;
  Strides dout_st, input_st, dweight_st;
  const void* dout = nullptr;
  const void* input = nullptr;
  void* dweight = nullptr;
  void* dbias = nullptr;  // [K] dense, or null
};

// Causal depthwise conv1d over dense x [B, L, C] (varlen: B = 1 and `seqs` sequences split by
// cu_seqlens), weight [C, W], state [seqs, C, W-1].
struct CausalShape {
  DType dtype = DType::f32;
  int64_t batch = 0, length = 0, channels = 0, width = 1;
  int64_t seqs = 0;  // B, or S with cu_seqlens
  bool silu = false;
};

struct CausalForward {
  CausalShape s;
  const void* x = nullptr;
  const void* weight = nullptr;
  const void* bias = nullptr;
  const int32_t* cu_seqlens = nullptr;
  void* state = nullptr;  // read, then updated in place; or null
  void* out = nullptr;
};

struct CausalBackward {
  CausalShape s;
  const void* dout = nullptr;
  const void* x = nullptr;
  const void* weight = nullptr;
  const void* bias = nullptr;
  const void* initial_state = nullptr;
  const int32_t* cu_seqlens = nullptr;
  void* dx = nullptr;
  void* dweight = nullptr;
  void* dbias = nullptr;           // or null
  void* dinitial_state = nullptr;  // or null
};

}  // namespace rudnn::conv_detail
