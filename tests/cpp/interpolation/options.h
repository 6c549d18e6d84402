// InterpolateOptions builders shared by the interpolation tests (CPU reference, GPU and
// antialias files): by output size or by scale factor; the aa_ forms set antialias.
#pragma once

#include <optional>
#include <utility>
#include <vector>

#include "rudnn/interpolation.h"

namespace rudnn::test {

inline InterpolateOptions by_size(InterpolateMode mode, std::vector<int64_t> size,
                                  std::optional<bool> align_corners = std::nullopt) {
  InterpolateOptions o;
  o.mode = mode;
  o.size = std::move(size);
  o.align_corners = align_corners;
  return o;
}

inline InterpolateOptions by_scale(InterpolateMode mode, std::vector<double> scale,
                                   bool recompute = false,
                                   std::optional<bool> align_corners = std::nullopt) {
  InterpolateOptions o;
  o.mode = mode;
  o.scale_factor = std::move(scale);
  o.recompute_scale_factor = recompute;
  o.align_corners = align_corners;
  return o;
}

inline InterpolateOptions aa_size(InterpolateMode mode, std::vector<int64_t> size,
                                  std::optional<bool> align_corners = std::nullopt) {
  InterpolateOptions o = by_size(mode, std::move(size), align_corners);
  o.antialias = true;
  return o;
}

inline InterpolateOptions aa_scale(InterpolateMode mode, std::vector<double> scale,
                                   bool recompute = false,
                                   std::optional<bool> align_corners = std::nullopt) {
  InterpolateOptions o = by_scale(mode, std::move(scale), recompute, align_corners);
  o.antialias = true;
  return o;
}

}  // namespace rudnn::test
