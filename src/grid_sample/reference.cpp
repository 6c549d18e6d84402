#include "grid_sample/reference.h"

#include <vector>

#include "common/host_values.h"
#include "grid_sample/taps.h"

namespace rudnn::grid_sample_detail::reference {

namespace {

using common::load_value;
using common::store_value;
using common::with_host_float_type;

// The taps of one output location on each axis: [0] = x (W), [1] = y (H), [2] = z (D).
template <class T>
void location_taps(const SampleShape& s, const void* grid, int64_t location, Taps<double> taps[3]) {
  const int64_t g = location * s.dims;
  taps[0] = axis_taps(load_value<T>(grid, g), s.in_w, s.mode, s.padding, s.align_corners);
  taps[1] = axis_taps(load_value<T>(grid, g + 1), s.in_h, s.mode, s.padding, s.align_corners);
  if (s.dims == 3) {
    taps[2] = axis_taps(load_value<T>(grid, g + 2), s.in_d, s.mode, s.padding, s.align_corners);
  } else {
    taps[2].count = 1;
    taps[2].index[0] = 0;
    taps[2].weight[0] = 1.0;
    taps[2].dweight[0] = 0.0;
  }
}

// Calls f(offset within a channel plane, weight, dweight/dx, dweight/dy, dweight/dz) for
// every tap inside the input.
template <class F>
void for_each_tap(const SampleShape& s, const Taps<double> taps[3], F&& f) {
  for (int k = 0; k < taps[2].count; ++k) {
    if (taps[2].index[k] < 0) continue;
    for (int j = 0; j < taps[1].count; ++j) {
      if (taps[1].index[j] < 0) continue;
      for (int i = 0; i < taps[0].count; ++i) {
        if (taps[0].index[i] < 0) continue;
        const int64_t offset =
            (taps[2].index[k] * s.in_h + taps[1].index[j]) * s.in_w + taps[0].index[i];
        const double wx = taps[0].weight[i], wy = taps[1].weight[j], wz = taps[2].weight[k];
        f(offset, wx * wy * wz, taps[0].dweight[i] * wy * wz, wx * taps[1].dweight[j] * wz,
          wx * wy * taps[2].dweight[k]);
      }
    }
  }
}

template <class T>
void forward_typed(const SampleForward& p) {
  const SampleShape& s = p.s;
  for (int64_t b = 0; b < s.n; ++b) {
    for (int64_t o = 0; o < s.out_spatial(); ++o) {
      Taps<double> taps[3];
      location_taps<T>(s, p.grid, b * s.out_spatial() + o, taps);
      for (int64_t ch = 0; ch < s.c; ++ch) {
        const int64_t plane = (b * s.c + ch) * s.in_spatial();
        double acc = 0.0;
        for_each_tap(s, taps, [&](int64_t offset, double w, double, double, double) {
          acc += w * load_value<T>(p.input, plane + offset);
        });
        store_value<T>(p.out, (b * s.c + ch) * s.out_spatial() + o, acc);
      }
    }
  }
}

template <class T>
void backward_typed(const SampleBackward& p) {
  const SampleShape& s = p.s;
  std::vector<double> dinput(p.dinput ? static_cast<size_t>(s.n * s.c * s.in_spatial()) : 0, 0.0);
  for (int64_t b = 0; b < s.n; ++b) {
    for (int64_t o = 0; o < s.out_spatial(); ++o) {
      const int64_t location = b * s.out_spatial() + o;
      Taps<double> taps[3];
      location_taps<T>(s, p.grid, location, taps);
      double dgrid[3] = {0.0, 0.0, 0.0};
      for (int64_t ch = 0; ch < s.c; ++ch) {
        const int64_t plane = (b * s.c + ch) * s.in_spatial();
        const double g = load_value<T>(p.dout, (b * s.c + ch) * s.out_spatial() + o);
        for_each_tap(s, taps, [&](int64_t offset, double w, double dx, double dy, double dz) {
          if (p.dinput) dinput[static_cast<size_t>(plane + offset)] += w * g;
          if (p.dgrid) {
            const double v = load_value<T>(p.input, plane + offset);
            dgrid[0] += v * dx * g;
            dgrid[1] += v * dy * g;
            dgrid[2] += v * dz * g;
          }
        });
      }
      if (p.dgrid) {
        for (int a = 0; a < s.dims; ++a) store_value<T>(p.dgrid, location * s.dims + a, dgrid[a]);
      }
    }
  }
  for (size_t i = 0; i < dinput.size(); ++i)
    store_value<T>(p.dinput, static_cast<int64_t>(i), dinput[i]);
}

// The base point [x, y, (z,) 1] of grid location (d, h, w).
void base_point(const AffineShape& s, int64_t d, int64_t h, int64_t w, double point[4]) {
  point[0] = base_coordinate(w, s.w, s.align_corners);
  point[1] = base_coordinate(h, s.h, s.align_corners);
  if (s.dims == 3) {
    point[2] = base_coordinate(d, s.d, s.align_corners);
    point[3] = 1.0;
  } else {
    point[2] = 1.0;
  }
}

template <class T>
void affine_forward_typed(const AffineForward& p) {
  const AffineShape& s = p.s;
  const int cols = s.dims + 1;
  for (int64_t b = 0; b < s.n; ++b) {
    for (int64_t d = 0; d < s.d; ++d) {
      for (int64_t h = 0; h < s.h; ++h) {
        for (int64_t w = 0; w < s.w; ++w) {
          double point[4];
          base_point(s, d, h, w, point);
          const int64_t out = (((b * s.d + d) * s.h + h) * s.w + w) * s.dims;
          for (int r = 0; r < s.dims; ++r) {
            double acc = 0.0;
            for (int k = 0; k < cols; ++k) {
              acc += load_value<T>(p.theta, (b * s.dims + r) * cols + k) * point[k];
            }
            store_value<T>(p.grid, out + r, acc);
          }
        }
      }
    }
  }
}

template <class T>
void affine_backward_typed(const AffineBackward& p) {
  const AffineShape& s = p.s;
  const int cols = s.dims + 1;
  for (int64_t b = 0; b < s.n; ++b) {
    double acc[3][4] = {};
    for (int64_t d = 0; d < s.d; ++d) {
      for (int64_t h = 0; h < s.h; ++h) {
        for (int64_t w = 0; w < s.w; ++w) {
          double point[4];
          base_point(s, d, h, w, point);
          const int64_t at = (((b * s.d + d) * s.h + h) * s.w + w) * s.dims;
          for (int r = 0; r < s.dims; ++r) {
            const double g = load_value<T>(p.dgrid, at + r);
            for (int k = 0; k < cols; ++k) acc[r][k] += g * point[k];
          }
        }
      }
    }
    for (int r = 0; r < s.dims; ++r) {
      for (int k = 0; k < cols; ++k)
        store_value<T>(p.dtheta, (b * s.dims + r) * cols + k, acc[r][k]);
    }
  }
}

}  // namespace

void sample_forward(const SampleForward& p) {
  with_host_float_type(p.s.dtype, [&](auto tag) { forward_typed<decltype(tag)>(p); });
}
void sample_backward(const SampleBackward& p) {
  with_host_float_type(p.s.dtype, [&](auto tag) { backward_typed<decltype(tag)>(p); });
}
void affine_forward(const AffineForward& p) {
  with_host_float_type(p.s.dtype, [&](auto tag) { affine_forward_typed<decltype(tag)>(p); });
}
void affine_backward(const AffineBackward& p) {
  with_host_float_type(p.s.dtype, [&](auto tag) { affine_backward_typed<decltype(tag)>(p); });
}

}  // namespace rudnn::grid_sample_detail::reference
