#include "conv/reference.h"

#include <cmath>
#include <vector>

#include "common/host_values.h"

namespace rudnn::conv_detail::reference {

namespace {

using common::load_value;
using common::store_value;
using common::with_host_float_type;

int64_t offset(const Strides& st, int64_t n, int64_t c, int64_t z, int64_t y, int64_t x) {
  return n * st.n + c * st.c + z * st.sp[0] + y * st.sp[1] + x * st.sp[2];
}

double activate(Activation a, double v) {
  switch (a) {
    case Activation::Relu:
      return v > 0 ? v : 0.0;
    case Activation::Silu:
      return v / (1.0 + std::exp(-v));
    case Activation::Gelu:
      return 0.5 * v * (1.0 + std::erf(v / std::sqrt(2.0)));
    default:
      return v;
  }
}

// The input position a tap reads for an output position on axis a, or -1 in the padding.
int64_t tap_position(const ConvShape& s, int a, int64_t o, int64_t t) {
  const int64_t i = o * s.stride[a] - s.pad[a] + t * s.dilation[a];
  return i >= 0 && i < s.in[a] ? i : -1;
}

}  // namespace

void forward(const Forward& p) {
  const ConvShape& s = p.s;
  with_host_float_type(s.dtype, [&](auto tag) {
    using T = decltype(tag);
    for (int64_t n = 0; n < s.batch; ++n)
      for (int64_t k = 0; k < s.out_channels; ++k) {
        const int64_t g = k / s.group_out();
        for (int64_t oz = 0; oz < s.out[0]; ++oz)
          for (int64_t oy = 0; oy < s.out[1]; ++oy)
            for (int64_t ox = 0; ox < s.out[2]; ++ox) {
              double acc = 0.0;
              for (int64_t c = 0; c < s.group_in(); ++c)
                for (int64_t tz = 0; tz < s.kernel[0]; ++tz) {
                  const int64_t iz = tap_position(s, 0, oz, tz);
                  if (iz < 0) continue;
                  for (int64_t ty = 0; ty < s.kernel[1]; ++ty) {
                    const int64_t iy = tap_position(s, 1, oy, ty);
                    if (iy < 0) continue;
                    for (int64_t tx = 0; tx < s.kernel[2]; ++tx) {
                      const int64_t ix = tap_position(s, 2, ox, tx);
                      if (ix < 0) continue;
                      acc += load_value<T>(p.input,
                                           offset(p.input_st, n, g * s.group_in() + c, iz, iy, ix)) *
                             load_value<T>(p.weight, offset(p.weight_st, k, c, tz, ty, tx));
                    }
                  }
                }
              if (p.bias != nullptr) acc += load_value<T>(p.bias, k);
              if (p.residual != nullptr) {
                acc += load_value<T>(p.residual, offset(p.residual_st, n, k, oz, oy, ox));
              }
              store_value<T>(p.out, offset(p.out_st, n, k, oz, oy, ox), activate(p.activation, acc));
            }
      }
  });
}

namespace {

// The output position whose tap t reads input position i on axis a, or -1 (none: the tap
// falls between strides or outside the output).
int64_t output_of_tap(const ConvShape& s, int a, int64_t i, int64_t t) {
  const int64_t num = i + s.pad[a] - t * s.dilation[a];
  if (num < 0 || num % s.stride[a] != 0 || num / s.stride[a] >= s.out[a]) return -1;
  return num / s.stride[a];
}

}  // namespace

void data_backward(const DataBackward& p) {
  const ConvShape& s = p.s;
  with_host_float_type(s.dtype, [&](auto tag) {
    using T = decltype(tag);
    for (int64_t n = 0; n < s.batch; ++n)
      for (int64_t ci = 0; ci < s.in_channels; ++ci) {
        const int64_t g = ci / s.group_in(), c = ci % s.group_in();
        for (int64_t iz = 0; iz < s.in[0]; ++iz)
          for (int64_t iy = 0; iy < s.in[1]; ++iy)
            for (int64_t ix = 0; ix < s.in[2]; ++ix) {
              double acc = 0.0;
              for (int64_t tz = 0; tz < s.kernel[0]; ++tz) {
                const int64_t oz = output_of_tap(s, 0, iz, tz);
                if (oz < 0) continue;
                for (int64_t ty = 0; ty < s.kernel[1]; ++ty) {
                  const int64_t oy = output_of_tap(s, 1, iy, ty);
                  if (oy < 0) continue;
                  for (int64_t tx = 0; tx < s.kernel[2]; ++tx) {
                    const int64_t ox = output_of_tap(s, 2, ix, tx);
                    if (ox < 0) continue;
                    for (int64_t k = g * s.group_out(); k < (g + 1) * s.group_out(); ++k) {
                      acc += load_value<T>(p.dout, offset(p.dout_st, n, k, oz, oy, ox)) *
                             load_value<T>(p.weight, offset(p.weight_st, k, c, tz, ty, tx));
                    }
                  }
                }
              }
              store_value<T>(p.dinput, offset(p.dinput_st, n, ci, iz, iy, ix), acc);
            }
      }
  });
}

void weight_backward(const WeightBackward& p) {
  const ConvShape& s = p.s;
  with_host_float_type(s.dtype, [&](auto tag) {
    using T = decltype(tag);
    for (int64_t k = 0; k < s.out_channels; ++k) {
      const int64_t g = k / s.group_out();
      double bias_acc = 0.0;
      for (int64_t n = 0; n < s.batch; ++n)
        for (int64_t oz = 0; oz < s.out[0]; ++oz)
          for (int64_t oy = 0; oy < s.out[1]; ++oy)
            for (int64_t ox = 0; ox < s.out[2]; ++ox)
              bias_acc += load_value<T>(p.dout, offset(p.dout_st, n, k, oz, oy, ox));
      if (p.dbias != nullptr) store_value<T>(p.dbias, k, bias_acc);
      for (int64_t c = 0; c < s.group_in(); ++c)
        for (int64_t tz = 0; tz < s.kernel[0]; ++tz)
          for (int64_t ty = 0; ty < s.kernel[1]; ++ty)
            for (int64_t tx = 0; tx < s.kernel[2]; ++tx) {
              double acc = 0.0;
              for (int64_t n = 0; n < s.batch; ++n)
                for (int64_t oz = 0; oz < s.out[0]; ++oz) {
                  const int64_t iz = tap_position(s, 0, oz, tz);
                  if (iz < 0) continue;
                  for (int64_t oy = 0; oy < s.out[1]; ++oy) {
                    const int64_t iy = tap_position(s, 1, oy, ty);
                    if (iy < 0) continue;
                    for (int64_t ox = 0; ox < s.out[2]; ++ox) {
                      const int64_t ix = tap_position(s, 2, ox, tx);
                      if (ix < 0) continue;
                      acc += load_value<T>(p.dout, offset(p.dout_st, n, k, oz, oy, ox)) *
                             load_value<T>(p.input,
                                           offset(p.input_st, n, g * s.group_in() + c, iz, iy, ix));
                    }
                  }
                }
              store_value<T>(p.dweight, offset(p.dweight_st, k, c, tz, ty, tx), acc);
            }
    }
  });
}

namespace {

// One sequence of a causal problem: its batch row, its [start, end) in x and its state row.
struct Sequence {
  int64_t b, start, end, q;
};

template <class F>
void for_each_sequence(const CausalShape& s, const int32_t* cu_seqlens, F&& f) {
  for (int64_t q = 0; q < s.seqs; ++q) {
    if (cu_seqlens != nullptr) {
      f(Sequence{0, cu_seqlens[q], cu_seqlens[q + 1], q});
    } else {
      f(Sequence{q, 0, s.length, q});
    }
  }
}

// x extended to the left by the state (or zeros): position t of channel c, t >= start-(W-1).
template <class T>
double extended(const CausalShape& s, const void* x, const void* state, const Sequence& q,
                int64_t c, int64_t t) {
  if (t >= q.start) return load_value<T>(x, (q.b * s.length + t) * s.channels + c);
  if (state == nullptr) return 0.0;
  return load_value<T>(state, (q.q * s.channels + c) * (s.width - 1) + (s.width - 1) + t - q.start);
}

template <class T>
double pre_activation(const CausalShape& s, const void* x, const void* weight, const void* bias,
                      const void* state, const Sequence& q, int64_t c, int64_t t) {
  double acc = bias != nullptr ? load_value<T>(bias, c) : 0.0;
  for (int64_t w = 0; w < s.width; ++w) {
    acc += load_value<T>(weight, c * s.width + w) *
           extended<T>(s, x, state, q, c, t - (s.width - 1) + w);
  }
  return acc;
}

}  // namespace

void causal_forward(const CausalForward& p) {
  const CausalShape& s = p.s;
  with_host_float_type(s.dtype, [&](auto tag) {
    using T = decltype(tag);
    for_each_sequence(s, p.cu_seqlens, [&](const Sequence& q) {
      for (int64_t c = 0; c < s.channels; ++c) {
        for (int64_t t = q.start; t < q.end; ++t) {
          const double pre = pre_activation<T>(s, p.x, p.weight, p.bias, p.state, q, c, t);
          store_value<T>(p.out, (q.b * s.length + t) * s.channels + c,
                         s.silu ? pre / (1.0 + std::exp(-pre)) : pre);
        }
        if (p.state == nullptr) continue;
        // The new state reads the old one when the sequence is shorter than W - 1.
        std::vector<double> next(s.width - 1);
        for (int64_t j = 0; j < s.width - 1; ++j) {
          next[j] = extended<T>(s, p.x, p.state, q, c, q.end - (s.width - 1) + j);
        }
        for (int64_t j = 0; j < s.width - 1; ++j) {
          store_value<T>(p.state, (q.q * s.channels + c) * (s.width - 1) + j, next[j]);
        }
      }
    });
  });
}

void causal_backward(const CausalBackward& p) {
  const CausalShape& s = p.s;
  with_host_float_type(s.dtype, [&](auto tag) {
    using T = decltype(tag);
    std::vector<double> dweight(s.channels * s.width, 0.0), dbias(s.channels, 0.0);
    for_each_sequence(s, p.cu_seqlens, [&](const Sequence& q) {
      for (int64_t c = 0; c < s.channels; ++c) {
        // dpre over the sequence, then every extended position gathers its outputs.
        std::vector<double> dpre(q.end - q.start);
        for (int64_t t = q.start; t < q.end; ++t) {
          double d = load_value<T>(p.dout, (q.b * s.length + t) * s.channels + c);
          if (s.silu) {
            const double pre =
                pre_activation<T>(s, p.x, p.weight, p.bias, p.initial_state, q, c, t);
            const double sig = 1.0 / (1.0 + std::exp(-pre));
            d *= sig * (1.0 + pre * (1.0 - sig));
          }
          dpre[t - q.start] = d;
          dbias[c] += d;
          for (int64_t w = 0; w < s.width; ++w) {
            dweight[c * s.width + w] +=
                d * extended<T>(s, p.x, p.initial_state, q, c, t - (s.width - 1) + w);
          }
        }
        for (int64_t pos = q.start - (s.width - 1); pos < q.end; ++pos) {
          double acc = 0.0;
          for (int64_t w = 0; w < s.width; ++w) {
            const int64_t u = pos + (s.width - 1) - w;
            if (u >= q.start && u < q.end) {
              acc += dpre[u - q.start] * load_value<T>(p.weight, c * s.width + w);
            }
          }
          if (pos >= q.start) {
            store_value<T>(p.dx, (q.b * s.length + pos) * s.channels + c, acc);
          } else if (p.dinitial_state != nullptr) {
            store_value<T>(p.dinitial_state,
                           (q.q * s.channels + c) * (s.width - 1) + (s.width - 1) + pos - q.start,
                           acc);
          }
        }
      }
    });
    for (int64_t i = 0; i < s.channels * s.width; ++i) store_value<T>(p.dweight, i, dweight[i]);
    if (p.dbias != nullptr) {
      for (int64_t c = 0; c < s.channels; ++c) store_value<T>(p.dbias, c, dbias[c]);
    }
  });
}

}  // namespace rudnn::conv_detail::reference
