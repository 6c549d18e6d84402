#include "transformer/reference.h"

#include <cmath>
#include <numbers>

namespace rudnn::transformer::reference {

namespace {

template <class T>
double to_double(T v) {
  return static_cast<double>(static_cast<float>(v));
}
template <>
double to_double<float>(float v) {
  return v;
}
template <>
double to_double<double>(double v) {
  return v;
}

// The value stored as T: FP32 first (what every device computes in), then T.
template <class T>
T from_double(double v) {
  return T(static_cast<float>(v));
}
template <>
float from_double<float>(double v) {
  return static_cast<float>(v);
}
template <>
double from_double<double>(double v) {
  return v;
}

// Calls f(T{}) with T the host type of a floating dtype.
template <class F>
void with_float_type(DType dtype, F&& f) {
  switch (dtype) {
    case DType::f32:
      f(float{});
      break;
    case DType::f16:
      f(half{});
      break;
    case DType::bf16:
      f(bfloat16{});
      break;
    case DType::f64:
      f(double{});
      break;
    default:
      break;  // validated away
  }
}

// ---- RoPE ---------------------------------------------------------------------------------------

int64_t read_index(const void* p, DType dtype, int64_t i) {
  return dtype == DType::i32 ? static_cast<const int32_t*>(p)[i]
                             : static_cast<const int64_t*>(p)[i];
}

double position(const Rope& p, int64_t b, int64_t t) {
  switch (p.source) {
    case PositionSource::offset:
      return static_cast<double>(p.offset + t);
    case PositionSource::offsets:
      return static_cast<double>(read_index(p.positions, p.position_dtype, b) + t);
    case PositionSource::positions_t:
      return static_cast<double>(read_index(p.positions, p.position_dtype, t));
    case PositionSource::positions_bt:
      return static_cast<double>(read_index(p.positions, p.position_dtype, b * p.x.shape.seq + t));
  }
  return 0;
}

template <class T>
void rope_typed(const Rope& p) {
  const auto& s = p.x.shape;
  const int64_t half = p.dims / 2;
  for (int64_t b = 0; b < s.batch; ++b) {
    for (int64_t t = 0; t < s.seq; ++t) {
      const double pos = position(p, b, t);
      for (int64_t m = 0; m < s.heads; ++m) {
        const T* x = static_cast<const T*>(p.x.data) + b * p.x.batch_stride + t * p.x.seq_stride +
                     m * p.x.head_stride;
        T* y = static_cast<T*>(p.y.data) + b * p.y.batch_stride + t * p.y.seq_stride +
               m * p.y.head_stride;
        for (int64_t j = 0; j < half; ++j) {
          const double theta =
              p.freqs
                  ? 1.0 / static_cast<double>(p.freqs[j])
                  : std::pow(p.base, -2.0 * static_cast<double>(j) / static_cast<double>(p.dims));
          const double angle = pos * p.scale * theta;
          const double c = std::cos(angle), sn = p.inverse ? -std::sin(angle) : std::sin(angle);
          const int64_t ia = p.traditional ? 2 * j : j, ib = p.traditional ? 2 * j + 1 : j + half;
          const double a = to_double(x[ia]), bb = to_double(x[ib]);
          y[ia] = from_double<T>(a * c - bb * sn);
          y[ib] = from_double<T>(a * sn + bb * c);
        }
        for (int64_t d = p.dims; d < s.dim; ++d) y[d] = x[d];
      }
    }
  }
}

// ---- Gated activations
// ---------------------------------------------------------------------------

constexpr double kSqrtHalf = 0.70710678118654752440;
constexpr double kInvSqrt2Pi = 0.39894228040143267794;
constexpr double kTanhK0 = 0.79788456080286535588;  // sqrt(2 / pi)
constexpr double kTanhK1 = 0.044715;

// act(g) and act'(g).
struct Act {
  double value, slope;
};
Act activation(GluKind kind, double g) {
  switch (kind) {
    case GluKind::swiglu: {
      const double sig = 1.0 / (1.0 + std::exp(-g));
      return {g / (1.0 + std::exp(-g)), sig * (1.0 + g * (1.0 - sig))};
    }
    case GluKind::geglu_erf: {
      const double cdf = 0.5 * (1.0 + std::erf(g * kSqrtHalf));
      return {g * cdf, cdf + g * kInvSqrt2Pi * std::exp(-0.5 * g * g)};
    }
    case GluKind::geglu_tanh: {
      const double th = std::tanh(kTanhK0 * (g + kTanhK1 * g * g * g));
      return {0.5 * g * (1.0 + th), 0.5 * (1.0 + th) + 0.5 * g * (1.0 - th * th) * kTanhK0 *
                                                           (1.0 + 3.0 * kTanhK1 * g * g)};
    }
  }
  return {0, 0};
}

template <class T>
const T* row_in(const RowsIn& r, int64_t row) {
  return static_cast<const T*>(r.data) + row * r.stride;
}
template <class T>
T* row_out(const RowsOut& r, int64_t row) {
  return static_cast<T*>(r.data) + row * r.stride;
}

template <class T>
void glu_forward_typed(const GluForward& p) {
  for (int64_t r = 0; r < p.rows; ++r) {
    const T* g = row_in<T>(p.gate, r);
    const T* u = row_in<T>(p.up, r);
    T* y = row_out<T>(p.y, r);
    for (int64_t c = 0; c < p.cols; ++c)
      y[c] = from_double<T>(activation(p.kind, to_double(g[c])).value * to_double(u[c]));
  }
}

template <class T>
void glu_backward_typed(const GluBackward& p) {
  for (int64_t r = 0; r < p.rows; ++r) {
    const T* dy = row_in<T>(p.dy, r);
    const T* g = row_in<T>(p.gate, r);
    const T* u = row_in<T>(p.up, r);
    T* dg = row_out<T>(p.dgate, r);
    T* du = row_out<T>(p.dup, r);
    for (int64_t c = 0; c < p.cols; ++c) {
      const Act a = activation(p.kind, to_double(g[c]));
      const double d = to_double(dy[c]);
      dg[c] = from_double<T>(d * to_double(u[c]) * a.slope);
      du[c] = from_double<T>(d * a.value);
    }
  }
}

}  // namespace

void rope(const Rope& p) {
  with_float_type(p.dtype, [&](auto tag) { rope_typed<decltype(tag)>(p); });
}

void glu_forward(const GluForward& p) {
  with_float_type(p.dtype, [&](auto tag) { glu_forward_typed<decltype(tag)>(p); });
}

void glu_backward(const GluBackward& p) {
  with_float_type(p.dtype, [&](auto tag) { glu_backward_typed<decltype(tag)>(p); });
}

}  // namespace rudnn::transformer::reference
