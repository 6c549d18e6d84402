// Validated problems of the grid_sample family: sizes, options and raw dense pointers.
#pragma once

#include <cstdint>

#include "rudnn/dtype.h"

namespace rudnn::grid_sample_detail {

// input [N, C, D, H, W] (2-D problems have D = 1 and Do = 1), grid [N, Do, Ho, Wo, dims],
// out [N, C, Do, Ho, Wo]; all dense, all of `dtype`.
struct SampleShape {
  DType dtype = DType::f32;
  int dims = 2;  // 2 or 3: grid entries per location
  int64_t n = 0, c = 0;
  int64_t in_d = 1, in_h = 1, in_w = 1;
  int64_t out_d = 1, out_h = 1, out_w = 1;
  int mode = 0, padding = 0;
  bool align_corners = false;

  constexpr int64_t in_spatial() const { return in_d * in_h * in_w; }
  constexpr int64_t out_spatial() const { return out_d * out_h * out_w; }
  constexpr int64_t locations() const { return n * out_spatial(); }
};

struct SampleForward {
  SampleShape s;
  const void* input = nullptr;
  const void* grid = nullptr;
  void* out = nullptr;
};

// Either gradient may be absent (null): dinput only when `dinput` is set, and so on.
struct SampleBackward {
  SampleShape s;
  const void* dout = nullptr;
  const void* input = nullptr;
  const void* grid = nullptr;
  void* dinput = nullptr;
  void* dgrid = nullptr;
  // FP32 accumulator of dinput for F16/BF16 (n * c * in_spatial floats), null for F32 and
  // for the deterministic input gradient.
  float* dinput_accumulator = nullptr;
  // The input gradient without atomics (GPU; the CPU is deterministic anyway), through
  // `scratch` (cuda::deterministic_scratch_bytes(s) bytes).
  bool deterministic = false;
  void* scratch = nullptr;
};

// theta [N, dims, dims + 1]; grid [N, D, H, W, dims] (D = 1 for 2-D).
struct AffineShape {
  DType dtype = DType::f32;
  int dims = 2;
  int64_t n = 0, d = 1, h = 1, w = 1;
  bool align_corners = false;
};

struct AffineForward {
  AffineShape s;
  const void* theta = nullptr;
  void* grid = nullptr;
};

struct AffineBackward {
  AffineShape s;
  const void* dgrid = nullptr;
  void* dtheta = nullptr;
};

// The base coordinate of pixel i of an axis of `steps` pixels (torch's linspace from -1).
inline double base_coordinate(int64_t i, int64_t steps, bool align_corners) {
  if (steps <= 1) return 0.0;
  const double c = -1.0 + 2.0 * static_cast<double>(i) / static_cast<double>(steps - 1);
  return align_corners ? c : c * static_cast<double>(steps - 1) / static_cast<double>(steps);
}

}  // namespace rudnn::grid_sample_detail
