#include "pooling/reference.h"

#include <cmath>
#include <limits>

#include "common/host_values.h"
#include "pooling/windows.h"
#include "rudnn/dtype.h"

namespace rudnn::pooling_detail::reference {

namespace {

using common::load_value;
using common::store_value;
using common::with_host_float_type;

// Calls f(o, start) for every output position o (flat in a plane) with its window starts.
template <class F>
void for_each_output(const PoolShape& s, F&& f) {
  int64_t o = 0;
  for (int64_t z = 0; z < s.out[0]; ++z)
    for (int64_t y = 0; y < s.out[1]; ++y)
      for (int64_t x = 0; x < s.out[2]; ++x, ++o) {
        const int64_t start[3] = {z * s.stride[0] - s.padding[0], y * s.stride[1] - s.padding[1],
                                  x * s.stride[2] - s.padding[2]};
        f(o, start);
      }
}

}  // namespace

void max_forward(const MaxForward& p) {
  const PoolShape& s = p.s;
  with_host_float_type(s.dtype, [&](auto tag) {
    using T = decltype(tag);
    for (int64_t plane = 0; plane < s.planes; ++plane) {
      const int64_t in_base = plane * s.in_plane(), out_base = plane * s.out_plane();
      for_each_output(s, [&](int64_t o, const int64_t start[3]) {
        // torch starts from the first in-bounds tap's index and -inf; NaN always replaces.
        int64_t first[3];
        for (int a = 0; a < 3; ++a) {
          first[a] = start[a];
          while (first[a] < 0) first[a] += s.dilation[a];
        }
        double best = -std::numeric_limits<double>::infinity();
        int64_t best_index = (first[0] * s.in[1] + first[1]) * s.in[2] + first[2];
        for (int64_t kz = 0; kz < s.kernel[0]; ++kz) {
          const int64_t z = start[0] + kz * s.dilation[0];
          if (z < 0 || z >= s.in[0]) continue;
          for (int64_t ky = 0; ky < s.kernel[1]; ++ky) {
            const int64_t y = start[1] + ky * s.dilation[1];
            if (y < 0 || y >= s.in[1]) continue;
            for (int64_t kx = 0; kx < s.kernel[2]; ++kx) {
              const int64_t x = start[2] + kx * s.dilation[2];
              if (x < 0 || x >= s.in[2]) continue;
              const int64_t i = (z * s.in[1] + y) * s.in[2] + x;
              const double v = load_value<T>(p.input, in_base + i);
              if (v > best || std::isnan(v)) {
                best = v;
                best_index = i;
              }
            }
          }
        }
        store_value<T>(p.out, out_base + o, best);
        p.indices[out_base + o] = best_index;
      });
    }
  });
}

void avg_forward(const AvgForward& p) {
  const PoolShape& s = p.s;
  with_host_float_type(s.dtype, [&](auto tag) {
    using T = decltype(tag);
    for (int64_t plane = 0; plane < s.planes; ++plane) {
      const int64_t in_base = plane * s.in_plane(), out_base = plane * s.out_plane();
      for_each_output(s, [&](int64_t o, const int64_t start[3]) {
        double sum = 0.0;
        for (int64_t kz = 0; kz < s.kernel[0]; ++kz) {
          const int64_t z = start[0] + kz;
          if (z < 0 || z >= s.in[0]) continue;
          for (int64_t ky = 0; ky < s.kernel[1]; ++ky) {
            const int64_t y = start[1] + ky;
            if (y < 0 || y >= s.in[1]) continue;
            for (int64_t kx = 0; kx < s.kernel[2]; ++kx) {
              const int64_t x = start[2] + kx;
              if (x < 0 || x >= s.in[2]) continue;
              sum += load_value<T>(p.input, in_base + (z * s.in[1] + y) * s.in[2] + x);
            }
          }
        }
        store_value<T>(p.out, out_base + o, sum / static_cast<double>(avg_divisor(s, start)));
      });
    }
  });
}

namespace {

// Calls f(o, start) for every output o whose window covers input position (z, y, x).
template <class F>
void for_each_covering(const PoolShape& s, const int64_t pos[3], F&& f) {
  int64_t lo[3], hi[3];
  for (int a = 0; a < 3; ++a) covering_outputs(s, a, pos[a], lo[a], hi[a]);
  for (int64_t z = lo[0]; z < hi[0]; ++z) {
    if ((pos[0] + s.padding[0] - z * s.stride[0]) % s.dilation[0] != 0) continue;
    for (int64_t y = lo[1]; y < hi[1]; ++y) {
      if ((pos[1] + s.padding[1] - y * s.stride[1]) % s.dilation[1] != 0) continue;
      for (int64_t x = lo[2]; x < hi[2]; ++x) {
        if ((pos[2] + s.padding[2] - x * s.stride[2]) % s.dilation[2] != 0) continue;
        const int64_t start[3] = {z * s.stride[0] - s.padding[0], y * s.stride[1] - s.padding[1],
                                  x * s.stride[2] - s.padding[2]};
        f((z * s.out[1] + y) * s.out[2] + x, start);
      }
    }
  }
}

template <class F>
void for_each_input(const PoolShape& s, F&& f) {
  int64_t i = 0;
  for (int64_t z = 0; z < s.in[0]; ++z)
    for (int64_t y = 0; y < s.in[1]; ++y)
      for (int64_t x = 0; x < s.in[2]; ++x, ++i) {
        const int64_t pos[3] = {z, y, x};
        f(i, pos);
      }
}

}  // namespace

void max_backward(const MaxBackward& p) {
  const PoolShape& s = p.s;
  with_host_float_type(s.dtype, [&](auto tag) {
    using T = decltype(tag);
    for (int64_t plane = 0; plane < s.planes; ++plane) {
      const int64_t in_base = plane * s.in_plane(), out_base = plane * s.out_plane();
      for_each_input(s, [&](int64_t i, const int64_t pos[3]) {
        double sum = 0.0;
        for_each_covering(s, pos, [&](int64_t o, const int64_t*) {
          if (p.indices[out_base + o] == i) sum += load_value<T>(p.dout, out_base + o);
        });
        store_value<T>(p.dinput, in_base + i, sum);
      });
    }
  });
}

void avg_backward(const AvgBackward& p) {
  const PoolShape& s = p.s;
  with_host_float_type(s.dtype, [&](auto tag) {
    using T = decltype(tag);
    for (int64_t plane = 0; plane < s.planes; ++plane) {
      const int64_t in_base = plane * s.in_plane(), out_base = plane * s.out_plane();
      for_each_input(s, [&](int64_t i, const int64_t pos[3]) {
        double sum = 0.0;
        for_each_covering(s, pos, [&](int64_t o, const int64_t* start) {
          sum += load_value<T>(p.dout, out_base + o) / static_cast<double>(avg_divisor(s, start));
        });
        store_value<T>(p.dinput, in_base + i, sum);
      });
    }
  });
}

}  // namespace rudnn::pooling_detail::reference
