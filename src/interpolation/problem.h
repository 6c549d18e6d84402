// Validated problems of the interpolation family: sizes, per-axis scales and raw dense pointers.
#pragma once

#include <cstdint>

#include "rudnn/dtype.h"

namespace rudnn::interpolation_detail {

// How one spatial axis maps outputs to inputs. kIdentity is the rule of the leading axes a 1-D
// or 2-D problem does not have (in = out = 1).
enum Rule : int { kIdentity = 0, kNearest, kNearestExact, kLinear, kCubic, kArea };

struct Axis {
  int64_t in = 1, out = 1;
  float ratio = 0.0f;    // torch's FP32 scale (area_pixel_compute_scale / compute_scales_value)
  double ratio64 = 0.0;  // the same formula in float64 (the reference's linear and cubic weights)
};

// Every problem is seen as 3-D: input [planes, D, H, W], output [planes, Do, Ho, Wo], planes =
// N * C; axes 0 .. 2 - dims are identity axes of size 1.
struct InterpShape {
  DType dtype = DType::f32;
  Rule rule = kNearest;
  int dims = 2;  // spatial rank: 1, 2 or 3
  bool align_corners = false;
  int64_t planes = 0;
  Axis axis[3];

  constexpr Rule rule_of(int a) const { return a < 3 - dims ? kIdentity : rule; }
  constexpr int64_t in_plane() const { return axis[0].in * axis[1].in * axis[2].in; }
  constexpr int64_t out_plane() const { return axis[0].out * axis[1].out * axis[2].out; }
};

struct Forward {
  InterpShape s;
  const void* input = nullptr;
  void* out = nullptr;
};

struct Backward {
  InterpShape s;
  const void* dout = nullptr;
  void* dinput = nullptr;
  bool deterministic = true;  // false: the GPU may scatter with atomics (F32, tap rules)
};

}  // namespace rudnn::interpolation_detail
