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

// Calls f(o, start, count) for every output position o (flat in a plane) with its window.
template <class F>
void for_each_output(const PoolShape& s, F&& f) {
  int64_t o = 0;
  for (int64_t z = 0; z < s.out[0]; ++z)
    for (int64_t y = 0; y < s.out[1]; ++y)
      for (int64_t x = 0; x < s.out[2]; ++x, ++o) {
        int64_t start[3], count[3];
        axis_window(s, 0, z, start[0], count[0]);
        axis_window(s, 1, y, start[1], count[1]);
        axis_window(s, 2, x, start[2], count[2]);
        f(o, start, count);
      }
}

// Calls f(i) for every in-bounds tap i (flat in a plane) of the window, in torch's order.
template <class F>
void for_each_tap(const PoolShape& s, const int64_t start[3], const int64_t count[3], F&& f) {
  const int64_t step[3] = {s.adaptive ? 1 : s.dilation[0], s.adaptive ? 1 : s.dilation[1],
                           s.adaptive ? 1 : s.dilation[2]};
  for (int64_t kz = 0; kz < count[0]; ++kz) {
    const int64_t z = start[0] + kz * step[0];
    if (z < 0 || z >= s.in[0]) continue;
    for (int64_t ky = 0; ky < count[1]; ++ky) {
      const int64_t y = start[1] + ky * step[1];
      if (y < 0 || y >= s.in[1]) continue;
      for (int64_t kx = 0; kx < count[2]; ++kx) {
        const int64_t x = start[2] + kx * step[2];
        if (x < 0 || x >= s.in[2]) continue;
        f((z * s.in[1] + y) * s.in[2] + x);
      }
    }
  }
}

// Calls f(o, start, count) for every output o whose window has a tap on input position pos.
template <class F>
void for_each_covering(const PoolShape& s, const int64_t pos[3], F&& f) {
  int64_t lo[3], hi[3];
  for (int a = 0; a < 3; ++a) covering_outputs(s, a, pos[a], lo[a], hi[a]);
  for (int64_t z = lo[0]; z < hi[0]; ++z) {
    if (!covers(s, 0, pos[0], z)) continue;
    for (int64_t y = lo[1]; y < hi[1]; ++y) {
      if (!covers(s, 1, pos[1], y)) continue;
      for (int64_t x = lo[2]; x < hi[2]; ++x) {
        if (!covers(s, 2, pos[2], x)) continue;
        int64_t start[3], count[3];
        axis_window(s, 0, z, start[0], count[0]);
        axis_window(s, 1, y, start[1], count[1]);
        axis_window(s, 2, x, start[2], count[2]);
        f((z * s.out[1] + y) * s.out[2] + x, start, count);
      }
    }
  }
}

// Calls f(plane, i, pos) for every input element of every plane.
template <class F>
void for_each_input(const PoolShape& s, F&& f) {
  for (int64_t plane = 0; plane < s.planes; ++plane) {
    int64_t i = 0;
    for (int64_t z = 0; z < s.in[0]; ++z)
      for (int64_t y = 0; y < s.in[1]; ++y)
        for (int64_t x = 0; x < s.in[2]; ++x, ++i) {
          const int64_t pos[3] = {z, y, x};
          f(plane, i, pos);
        }
  }
}

}  // namespace

void max_forward(const MaxForward& p) {
  const PoolShape& s = p.s;
  with_host_float_type(s.dtype, [&](auto tag) {
    using T = decltype(tag);
    for (int64_t plane = 0; plane < s.planes; ++plane) {
      for_each_output(s, [&](int64_t o, const int64_t start[3], const int64_t count[3]) {
        // torch starts from the first in-bounds tap's index and -inf; NaN always replaces.
        int64_t first[3];
        for (int a = 0; a < 3; ++a) {
          first[a] = start[a];
          while (first[a] < 0) first[a] += s.dilation[a];
        }
        double best = -std::numeric_limits<double>::infinity();
        int64_t best_index = (first[0] * s.in[1] + first[1]) * s.in[2] + first[2];
        for_each_tap(s, start, count, [&](int64_t i) {
          const double v = load_value<T>(p.input, element(s, plane, i, s.in_plane()));
          if (v > best || std::isnan(v)) {
            best = v;
            best_index = i;
          }
        });
        const int64_t at = element(s, plane, o, s.out_plane());
        store_value<T>(p.out, at, best);
        p.indices[at] = best_index;
      });
    }
  });
}

void avg_forward(const AvgForward& p) {
  const PoolShape& s = p.s;
  with_host_float_type(s.dtype, [&](auto tag) {
    using T = decltype(tag);
    for (int64_t plane = 0; plane < s.planes; ++plane) {
      for_each_output(s, [&](int64_t o, const int64_t start[3], const int64_t count[3]) {
        double sum = 0.0;
        for_each_tap(s, start, count, [&](int64_t i) {
          sum += load_value<T>(p.input, element(s, plane, i, s.in_plane()));
        });
        store_value<T>(p.out, element(s, plane, o, s.out_plane()),
                       sum / static_cast<double>(avg_divisor(s, start, count)));
      });
    }
  });
}

void lp_forward(const LpForward& p) {
  const PoolShape& s = p.s;
  const double kernel = static_cast<double>(s.kernel_size());
  with_host_float_type(s.dtype, [&](auto tag) {
    using T = decltype(tag);
    for (int64_t plane = 0; plane < s.planes; ++plane) {
      for_each_output(s, [&](int64_t o, const int64_t start[3], const int64_t count[3]) {
        double sum = 0.0;
        for_each_tap(s, start, count, [&](int64_t i) {
          sum += std::pow(load_value<T>(p.input, element(s, plane, i, s.in_plane())), s.norm);
        });
        // torch: avg_pool(x^p) * K, so a window clipped by ceil_mode is scaled up by K / taps.
        const double scaled = sum / static_cast<double>(avg_divisor(s, start, count)) * kernel;
        store_value<T>(p.out, element(s, plane, o, s.out_plane()), std::pow(scaled, 1.0 / s.norm));
      });
    }
  });
}

void max_backward(const MaxBackward& p) {
  const PoolShape& s = p.s;
  with_host_float_type(s.dtype, [&](auto tag) {
    using T = decltype(tag);
    for_each_input(s, [&](int64_t plane, int64_t i, const int64_t pos[3]) {
      double sum = 0.0;
      for_each_covering(s, pos, [&](int64_t o, const int64_t*, const int64_t*) {
        const int64_t at = element(s, plane, o, s.out_plane());
        if (p.indices[at] == i) sum += load_value<T>(p.dout, at);
      });
      store_value<T>(p.dinput, element(s, plane, i, s.in_plane()), sum);
    });
  });
}

void avg_backward(const AvgBackward& p) {
  const PoolShape& s = p.s;
  with_host_float_type(s.dtype, [&](auto tag) {
    using T = decltype(tag);
    for_each_input(s, [&](int64_t plane, int64_t i, const int64_t pos[3]) {
      double sum = 0.0;
      for_each_covering(s, pos, [&](int64_t o, const int64_t* start, const int64_t* count) {
        sum += load_value<T>(p.dout, element(s, plane, o, s.out_plane())) /
               static_cast<double>(avg_divisor(s, start, count));
      });
      store_value<T>(p.dinput, element(s, plane, i, s.in_plane()), sum);
    });
  });
}

void lp_backward(const LpBackward& p) {
  const PoolShape& s = p.s;
  const double kernel = static_cast<double>(s.kernel_size());
  with_host_float_type(s.dtype, [&](auto tag) {
    using T = decltype(tag);
    for_each_input(s, [&](int64_t plane, int64_t i, const int64_t pos[3]) {
      double sum = 0.0;
      for_each_covering(s, pos, [&](int64_t o, const int64_t* start, const int64_t* count) {
        const int64_t at = element(s, plane, o, s.out_plane());
        const double y = load_value<T>(p.out, at);
        // torch's sign/relu step passes no gradient through a zero window sum.
        if (y == 0.0) return;
        sum += load_value<T>(p.dout, at) * std::pow(y, 1.0 - s.norm) * kernel /
               static_cast<double>(avg_divisor(s, start, count));
      });
      const int64_t at = element(s, plane, i, s.in_plane());
      store_value<T>(p.dinput, at, sum * std::pow(load_value<T>(p.input, at), s.norm - 1.0));
    });
  });
}

}  // namespace rudnn::pooling_detail::reference
