// Validated problems of the pooling family: sizes, options, layout and raw dense pointers.
#pragma once

#include <cstdint>

#include "rudnn/dtype.h"

namespace rudnn::pooling_detail {

// Every problem is seen as 3-D: input [planes, D, H, W], output [planes, Do, Ho, Wo], planes =
// N * C; a 1-D or 2-D problem has its missing leading spatial axes of size 1 with kernel 1,
// stride 1, padding 0, dilation 1, so flat indices within a plane match torch's for every rank.
//
// Layout: NCHW order (planes outermost) or channels-last (N, spatial..., C with C innermost);
// element `pos` (flat within a plane) of plane n * C + c sits at `element(...)` (windows.h).
//
// Adaptive problems ignore kernel / stride / padding / dilation: output o of an axis pools
// [floor(o * in / out), ceil((o + 1) * in / out)) (torch's rule).
struct PoolShape {
  DType dtype = DType::f32;
  int64_t planes = 0;
  int64_t channels = 1;  // C: what channels-last addressing needs
  bool channels_last = false;
  bool adaptive = false;
  int64_t in[3] = {1, 1, 1};
  int64_t out[3] = {1, 1, 1};
  int64_t kernel[3] = {1, 1, 1};
  int64_t stride[3] = {1, 1, 1};
  int64_t padding[3] = {0, 0, 0};
  int64_t dilation[3] = {1, 1, 1};
  bool count_include_pad = true;
  int64_t divisor_override = 0;  // 0: none
  double norm = 0.0;             // LP pooling's p

  constexpr int64_t in_plane() const { return in[0] * in[1] * in[2]; }
  constexpr int64_t out_plane() const { return out[0] * out[1] * out[2]; }
  constexpr int64_t kernel_size() const { return kernel[0] * kernel[1] * kernel[2]; }
};

struct MaxForward {
  PoolShape s;
  const void* input = nullptr;
  void* out = nullptr;
  int64_t* indices = nullptr;
};

struct MaxBackward {
  PoolShape s;
  const void* dout = nullptr;
  const int64_t* indices = nullptr;
  void* dinput = nullptr;
};

struct AvgForward {
  PoolShape s;
  const void* input = nullptr;
  void* out = nullptr;
};

struct AvgBackward {
  PoolShape s;
  const void* dout = nullptr;
  void* dinput = nullptr;
};

struct LpForward {
  PoolShape s;
  const void* input = nullptr;
  void* out = nullptr;
};

// Needs the forward's input and output: d out / d x = x^(p-1) * out^(1-p) * K / divisor.
struct LpBackward {
  PoolShape s;
  const void* dout = nullptr;
  const void* input = nullptr;
  const void* out = nullptr;
  void* dinput = nullptr;
};

}  // namespace rudnn::pooling_detail
