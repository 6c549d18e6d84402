#include "interpolation/reference.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "common/host_values.h"
#include "interpolation/taps.h"

namespace rudnn::interpolation_detail::reference {

namespace {

using common::load_value;
using common::store_value;
using common::with_host_float_type;

// The taps (input index, weight) of every output along one axis, weights in float64.
using AxisTaps = std::vector<std::vector<std::pair<int64_t, double>>>;

AxisTaps axis_table(const InterpShape& s, int a) {
  const Axis& ax = s.axis[a];
  const Rule rule = s.rule_of(a);
  AxisTaps table(static_cast<size_t>(ax.out));
  for (int64_t o = 0; o < ax.out; ++o) {
    auto& taps = table[static_cast<size_t>(o)];
    if (s.antialias && rule != kIdentity) {
      // torch's weights in float64; a window whose weights sum to 0 stays unnormalised.
      const bool cubic = rule == kCubic;
      const AaWindow<double> w =
          aa_window<double>(cubic, ax, o, aa_max_taps<double>(cubic, ax.ratio64));
      double total = 0.0;
      for (int64_t k = 0; k < w.count; ++k) total += w.weight(k);
      const double norm = total != 0.0 ? 1.0 / total : 1.0;
      for (int64_t k = 0; k < w.count; ++k) taps.emplace_back(w.start + k, w.weight(k) * norm);
      continue;
    }
    if (rule == kArea) {
      int64_t start, end;
      area_window(ax, o, start, end);
      for (int64_t i = start; i < end; ++i) taps.emplace_back(i, 1.0 / static_cast<double>(end - start));
      continue;
    }
    int64_t index[4];
    double weight[4];
    const int n = axis_taps<double>(rule, ax, s.align_corners, o, index, weight);
    for (int k = 0; k < n; ++k) taps.emplace_back(index[k], weight[k]);
  }
  return table;
}

// f(o, i, w): every (output, input, weight) triple of a plane, outputs in order.
template <class F>
void for_each_term(const InterpShape& s, F&& f) {
  const AxisTaps tz = axis_table(s, 0), ty = axis_table(s, 1), tx = axis_table(s, 2);
  const Axis* ax = s.axis;
  int64_t o = 0;
  for (int64_t z = 0; z < ax[0].out; ++z)
    for (int64_t y = 0; y < ax[1].out; ++y)
      for (int64_t x = 0; x < ax[2].out; ++x, ++o)
        for (const auto& [iz, wz] : tz[z])
          for (const auto& [iy, wy] : ty[y])
            for (const auto& [ix, wx] : tx[x]) f(o, (iz * ax[1].in + iy) * ax[2].in + ix, wz * wy * wx);
}

}  // namespace

void forward(const Forward& p) {
  const InterpShape& s = p.s;
  with_host_float_type(s.dtype, [&](auto tag) {
    using T = decltype(tag);
    std::vector<double> sums(static_cast<size_t>(s.out_plane()));
    for (int64_t plane = 0; plane < s.planes; ++plane) {
      const int64_t in_base = plane * s.in_plane(), out_base = plane * s.out_plane();
      std::fill(sums.begin(), sums.end(), 0.0);
      for_each_term(s, [&](int64_t o, int64_t i, double w) {
        sums[static_cast<size_t>(o)] += w * load_value<T>(p.input, in_base + i);
      });
      for (int64_t o = 0; o < s.out_plane(); ++o)
        store_value<T>(p.out, out_base + o, sums[static_cast<size_t>(o)]);
    }
  });
}

void backward(const Backward& p) {
  const InterpShape& s = p.s;
  with_host_float_type(s.dtype, [&](auto tag) {
    using T = decltype(tag);
    std::vector<double> sums(static_cast<size_t>(s.in_plane()));
    for (int64_t plane = 0; plane < s.planes; ++plane) {
      const int64_t in_base = plane * s.in_plane(), out_base = plane * s.out_plane();
      std::fill(sums.begin(), sums.end(), 0.0);
      for_each_term(s, [&](int64_t o, int64_t i, double w) {
        sums[static_cast<size_t>(i)] += w * load_value<T>(p.dout, out_base + o);
      });
      for (int64_t i = 0; i < s.in_plane(); ++i)
        store_value<T>(p.dinput, in_base + i, sums[static_cast<size_t>(i)]);
    }
  });
}

}  // namespace rudnn::interpolation_detail::reference
