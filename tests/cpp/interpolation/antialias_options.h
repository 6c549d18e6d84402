// Antialiased InterpolateOptions for the antialias tests (test_antialias.cpp on the CPU,
// test_antialias_gpu.cpp on the device): by output size or by scale factor.
#pragma once

#include <optional>
#include <utility>
#include <vector>

#include "rudnn/interpolation.h"

namespace rudnn::test {

inline InterpolateOptions aa_size(InterpolateMode mode, std::vector<int64_t> size,
                                  std::optional<bool> align_corners = std::nullopt) {
  InterpolateOptions o;
  o.mode = mode;
  o.size = std::move(size);
  o.align_corners = align_corners;
  o.antialias = true;
  return o;
}

inline InterpolateOptions aa_scale(InterpolateMode mode, std::vector<double> scale,
                                   bool recompute = false,
                                   std::optional<bool> align_corners = std::nullopt) {
  InterpolateOptions o;
  o.mode = mode;
  o.scale_factor = std::move(scale);
  o.recompute_scale_factor = recompute;
  o.align_corners = align_corners;
  o.antialias = true;
  return o;
}

}  // namespace rudnn::test
