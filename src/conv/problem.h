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

// The data gradient of a stride-1 convolution is the forward convolution of dout with the
// weight flipped along every spatial axis and its K and C axes exchanged:
//   dinput[n, c, i] = sum over k, t of dout[n, k, i + pad - t * dil] * weight[k, c, t]
//                   = sum over k, t' of dout[n, k, i - pad' + t' * dil] * weight[k, c, T - 1 - t']
// with pad' = dil * (T - 1) - pad, over dout's extent (zeros outside), giving the input's
// extent. What ImplicitGemm's data gradient runs: this shape on its forward kernel.
// Applies when every stride is 1, groups == 1 and pad <= dil * (T - 1) on every axis (pad'
// >= 0; the padding after the input follows from the extents and is then >= 0 as well).
inline bool data_as_forward_applies(const ConvShape& s) {
  if (s.groups != 1) return false;
  for (int a = 0; a < 3; ++a) {
    const int64_t reach = s.dilation[a] * (s.kernel[a] - 1);
    if (s.stride[a] != 1 || s.pad[a] > reach) return false;
    // Padding after the input: out = in + pad + pad_end - reach.
    if (s.out[a] - s.in[a] - s.pad[a] + reach > reach) return false;
  }
  return true;
}
inline ConvShape data_as_forward(const ConvShape& s) {
  ConvShape f = s;
  f.in_channels = s.out_channels;
  f.out_channels = s.in_channels;
  for (int a = 0; a < 3; ++a) {
    f.in[a] = s.out[a];
    f.out[a] = s.in[a];
    f.pad[a] = s.dilation[a] * (s.kernel[a] - 1) - s.pad[a];
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
