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
  // Antialias only: the most taps an output reads, 2 * ceil(support) + 1 with the FP32
  // support of the kernels (torch's interp_size), and the stride of the kernels' weight table.
  int64_t aa_taps = 0;
};

// Every problem is seen as 3-D: input [planes, D, H, W], output [planes, Do, Ho, Wo], planes =
// N * C; axes 0 .. 2 - dims are identity axes of size 1.
struct InterpShape {
  DType dtype = DType::f32;
  Rule rule = kNearest;
  int dims = 2;  // spatial rank: 1, 2 or 3
  bool align_corners = false;
  // torch's antialias (rule kLinear or kCubic, dims 2): every output reads a window of the
  // input weighted by the filter stretched by the scale when downsampling (taps.h, aa_*).
  bool antialias = false;
  int64_t planes = 0;
  Axis axis[3];

  constexpr Rule rule_of(int a) const { return a < 3 - dims ? kIdentity : rule; }
  constexpr int64_t in_plane() const { return axis[0].in * axis[1].in * axis[2].in; }
  constexpr int64_t out_plane() const { return axis[0].out * axis[1].out * axis[2].out; }
};

// Device bytes of the antialias weight tables (the GPU's workspace): per output of each of the
// two axes its window start and length (int32) and aa_taps FP32 weights.
constexpr int64_t aa_workspace_bytes(const InterpShape& s) {
  int64_t bytes = 0;
  for (int a = 1; a < 3; ++a) bytes += s.axis[a].out * (2 + s.axis[a].aa_taps) * 4;
  return bytes;
}

struct Forward {
  InterpShape s;
  const void* input = nullptr;
  void* out = nullptr;
  void* workspace = nullptr;  // GPU antialias only: aa_workspace_bytes(s)
};

struct Backward {
  InterpShape s;
  const void* dout = nullptr;
  void* dinput = nullptr;
  void* workspace = nullptr;  // GPU antialias only: aa_workspace_bytes(s)
  bool deterministic = true;  // false: the GPU may scatter with atomics (F32, tap rules)
};

}  // namespace rudnn::interpolation_detail
