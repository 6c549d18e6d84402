#include "normalization/reference.h"

#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

namespace rudnn::norm::reference {

namespace {

template <class T>
double to_double(T v) {
  return static_cast<double>(static_cast<float>(v));
}
template <>
double to_double<float>(float v) {
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
double to_double<double>(double v) {
  return v;
}
template <>
double from_double<double>(double v) {
  return v;
}

// a + b as the GPU forms it: in FP32, stored as T (in float64 for F64 rows).
template <class T>
T add_stored(T a, T b) {
  return from_double<T>(static_cast<float>(to_double(a)) + static_cast<float>(to_double(b)));
}
template <>
double add_stored<double>(double a, double b) {
  return a + b;
}

// x * s as the GPU forms it: in FP32, stored as T (in float64 for F64 rows).
template <class T>
T scale_stored(T x, float s) {
  return from_double<T>(static_cast<float>(to_double(x)) * s);
}
template <>
double scale_stored<double>(double x, float s) {
  return x * s;
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
      break;  // the CPU only: the reference of gradcheck-style tests
    default:
      break;  // validated away
  }
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
double param(const ParamIn& p, int64_t i, double absent) {
  if (p.data == nullptr) return absent;
  return p.is_f32 ? static_cast<const float*>(p.data)[i]
                  : to_double(static_cast<const T*>(p.data)[i]);
}

template <class T>
void store_param(const ParamOut& p, int64_t i, double v) {
  if (p.is_f32) {
    static_cast<float*>(p.data)[i] = static_cast<float>(v);
  } else {
    static_cast<T*>(p.data)[i] = from_double<T>(v);
  }
}

// LayerNorm's per-row statistics: F64 for F64 rows, else F32.
template <class T>
void store_stat(void* stats, int64_t row, double v) {
  if constexpr (std::is_same_v<T, double>) {
    static_cast<double*>(stats)[row] = v;
  } else {
    static_cast<float*>(stats)[row] = static_cast<float>(v);
  }
}
template <class T>
double load_stat(const void* stats, int64_t row) {
  if constexpr (std::is_same_v<T, double>) {
    return static_cast<const double*>(stats)[row];
  } else {
    return static_cast<const float*>(stats)[row];
  }
}

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// Maximum of a row with NaN propagation.
template <class T>
double row_max(const T* x, int64_t n) {
  double m = -std::numeric_limits<double>::infinity();
  for (int64_t c = 0; c < n; ++c) {
    const double v = to_double(x[c]);
    if (std::isnan(v)) return kNaN;
    if (v > m) m = v;
  }
  return m;
}

// log(sum(exp(x))): all -inf gives -inf, any +inf +inf, any NaN NaN (PyTorch's rules).
template <class T>
double row_logsumexp(const T* x, int64_t n) {
  const double m = row_max(x, n);
  if (!std::isfinite(m)) return m;
  double s = 0.0;
  for (int64_t c = 0; c < n; ++c) s += std::exp(to_double(x[c]) - m);
  return m + std::log(s);
}

// The rows are streamed: no scratch as long as a row (a row may hold 2^31 elements), only
// the statistics, recomputed from the inputs at each pass.
template <class T>
void norm_forward_typed(const NormForward& p) {
  const int64_t n = p.cols;
  const double inv_n = 1.0 / static_cast<double>(n);
  for (int64_t r = 0; r < p.rows; ++r) {
    const T* h = row_in<T>(p.x, r);  // the row the statistics read
    if (p.kind == NormKind::add_rms) {
      const T* res = row_in<T>(p.residual, r);
      T* sum = row_out<T>(p.sum, r);
      // The sum is stored as T first; the statistics read the stored value.
      for (int64_t c = 0; c < n; ++c) sum[c] = add_stored(h[c], res[c]);
      h = sum;
    }
    double mean = 0.0, square_sum = 0.0;
    if (p.kind == NormKind::layer) {
      for (int64_t c = 0; c < n; ++c) mean += to_double(h[c]);
      mean *= inv_n;
    }
    for (int64_t c = 0; c < n; ++c)
      square_sum += (to_double(h[c]) - mean) * (to_double(h[c]) - mean);
    const double rstd = 1.0 / std::sqrt(square_sum * inv_n + p.eps);
    if (p.mean != nullptr) {
      store_stat<T>(p.mean, r, mean);
      store_stat<T>(p.rstd, r, rstd);
    }
    T* y = row_out<T>(p.y, r);
    for (int64_t c = 0; c < n; ++c) {
      double v = (to_double(h[c]) - mean) * rstd * param<T>(p.gamma, c, 1.0);
      if (p.kind == NormKind::layer) v += param<T>(p.beta, c, 0.0);
      y[c] = from_double<T>(v);
    }
  }
}

template <class T>
void norm_backward_typed(const NormBackward& p) {
  const int64_t n = p.cols;
  const double inv_n = 1.0 / static_cast<double>(n);
  // Parameter gradients sum over rows in float64; one row writes them directly.
  const bool accumulate = p.rows > 1;
  std::vector<double> dgamma(accumulate && p.dgamma.data ? n : 0, 0.0);
  std::vector<double> dbeta(accumulate && p.dbeta.data ? n : 0, 0.0);
  if (p.rows == 0) {
    for (int64_t c = 0; c < n; ++c) {
      if (p.dgamma.data) store_param<T>(p.dgamma, c, 0.0);
      if (p.dbeta.data) store_param<T>(p.dbeta, c, 0.0);
    }
  }
  for (int64_t r = 0; r < p.rows; ++r) {
    const T* x = row_in<T>(p.x, r);
    const T* dy = row_in<T>(p.dy, r);
    double mean = 0.0, rstd = 0.0;
    if (p.mean != nullptr) {  // the forward's statistics, as given
      mean = load_stat<T>(p.mean, r);
      rstd = load_stat<T>(p.rstd, r);
    } else {
      if (p.kind == NormKind::layer) {
        for (int64_t c = 0; c < n; ++c) mean += to_double(x[c]);
        mean *= inv_n;
      }
      double var = 0.0;
      for (int64_t c = 0; c < n; ++c) var += (to_double(x[c]) - mean) * (to_double(x[c]) - mean);
      var *= inv_n;
      rstd = 1.0 / std::sqrt(var + p.eps);
    }
    auto xhat = [&](int64_t c) { return (to_double(x[c]) - mean) * rstd; };
    auto gdy = [&](int64_t c) { return param<T>(p.gamma, c, 1.0) * to_double(dy[c]); };
    double mean_gdy = 0.0, mean_gdy_xhat = 0.0;
    for (int64_t c = 0; c < n; ++c) {
      mean_gdy += gdy(c);
      mean_gdy_xhat += gdy(c) * xhat(c);
      if (!dgamma.empty()) dgamma[c] += to_double(dy[c]) * xhat(c);
      if (!dbeta.empty()) dbeta[c] += to_double(dy[c]);
      if (!accumulate && p.dgamma.data) store_param<T>(p.dgamma, c, to_double(dy[c]) * xhat(c));
      if (!accumulate && p.dbeta.data) store_param<T>(p.dbeta, c, to_double(dy[c]));
    }
    mean_gdy *= inv_n;
    mean_gdy_xhat *= inv_n;
    T* dx = row_out<T>(p.dx, r);
    for (int64_t c = 0; c < n; ++c) {
      const double centred = p.kind == NormKind::layer ? gdy(c) - mean_gdy : gdy(c);
      dx[c] = from_double<T>(rstd * (centred - xhat(c) * mean_gdy_xhat));
    }
  }
  for (int64_t c = 0; c < static_cast<int64_t>(dgamma.size()); ++c)
    store_param<T>(p.dgamma, c, dgamma[c]);
  for (int64_t c = 0; c < static_cast<int64_t>(dbeta.size()); ++c)
    store_param<T>(p.dbeta, c, dbeta[c]);
}

template <class T>
void softmax_forward_typed(const SoftmaxForward& p) {
  for (int64_t r = 0; r < p.rows; ++r) {
    const T* x = row_in<T>(p.x, r);
    if (p.lse != nullptr) {
      static_cast<T*>(p.lse)[r] = from_double<T>(row_logsumexp(x, p.cols));
      continue;
    }
    T* y = row_out<T>(p.y, r);
    const double m = row_max(x, p.cols);
    if (!std::isfinite(m)) {  // all -inf, or an inf or NaN: the row is undefined
      for (int64_t c = 0; c < p.cols; ++c) y[c] = from_double<T>(kNaN);
      continue;
    }
    double s = 0.0;
    for (int64_t c = 0; c < p.cols; ++c) s += std::exp(to_double(x[c]) - m);
    for (int64_t c = 0; c < p.cols; ++c) y[c] = from_double<T>(std::exp(to_double(x[c]) - m) / s);
  }
}

template <class T>
void softmax_backward_typed(const SoftmaxBackward& p) {
  for (int64_t r = 0; r < p.rows; ++r) {
    const T* dy = row_in<T>(p.dy, r);
    const T* y = row_in<T>(p.y, r);
    double dot = 0.0;
    for (int64_t c = 0; c < p.cols; ++c) dot += to_double(dy[c]) * to_double(y[c]);
    T* dx = row_out<T>(p.dx, r);
    for (int64_t c = 0; c < p.cols; ++c)
      dx[c] = from_double<T>(to_double(y[c]) * (to_double(dy[c]) - dot));
  }
}

int64_t load_target(const void* targets, DType dtype, int64_t r, bool& in_range) {
  in_range = true;
  switch (dtype) {
    case DType::i32:
      return static_cast<const int32_t*>(targets)[r];
    case DType::i64:
      return static_cast<const int64_t*>(targets)[r];
    case DType::u32:
      return static_cast<const uint32_t*>(targets)[r];
    case DType::u8:
      return static_cast<const uint8_t*>(targets)[r];
    default:
      in_range = false;
      return 0;
  }
}

// The loss and its upstream gradient are F32, or F64 for F64 logits.
template <class T>
void store_loss(const CrossEntropy& p, int64_t r, double v) {
  if (!p.loss) return;
  if constexpr (std::is_same_v<T, double>) {
    static_cast<double*>(p.loss)[r] = v;
  } else {
    static_cast<float*>(p.loss)[r] = static_cast<float>(v);
  }
}

template <class T>
double upstream_gradient(const CrossEntropy& p, int64_t r) {
  if (!p.dloss) return p.grad_scale;
  if constexpr (std::is_same_v<T, double>) return static_cast<const double*>(p.dloss)[r];
  return static_cast<const float*>(p.dloss)[r];
}

template <class T>
void cross_entropy_typed(const CrossEntropy& p) {
  const int64_t n = p.cols;
  for (int64_t r = 0; r < p.rows; ++r) {
    bool known = false;
    const int64_t raw = load_target(p.targets, p.target_dtype, r, known);
    const T* x = row_in<T>(p.logits, r);
    T* dx = p.dlogits.data ? row_out<T>(p.dlogits, r) : nullptr;
    if (p.has_ignore_index && raw == p.ignore_index) {
      store_loss<T>(p, r, 0.0);
      if (dx)
        for (int64_t c = 0; c < n; ++c) dx[c] = from_double<T>(0.0);
      continue;
    }
    const int64_t t = raw < 0 ? raw + n : raw;
    if (!known || t < 0 || t >= n) {  // never used as an index
      store_loss<T>(p, r, kNaN);
      if (dx)
        for (int64_t c = 0; c < n; ++c) dx[c] = from_double<T>(kNaN);
      continue;
    }
    const double lse = row_logsumexp(x, n);
    store_loss<T>(p, r, lse - to_double(x[t]));
    if (dx) {
      const double scale = upstream_gradient<T>(p, r);
      const double m = row_max(x, n);
      double s = 0.0;
      if (std::isfinite(m))
        for (int64_t c = 0; c < n; ++c) s += std::exp(to_double(x[c]) - m);
      for (int64_t c = 0; c < n; ++c) {
        const double prob = std::isfinite(m) ? std::exp(to_double(x[c]) - m) / s : kNaN;
        dx[c] = from_double<T>(scale * (prob - (c == t ? 1.0 : 0.0)));
      }
    }
  }
}

}  // namespace

void norm_forward(const NormForward& p) {
  with_float_type(p.dtype, [&](auto tag) { norm_forward_typed<decltype(tag)>(p); });
}
void norm_backward(const NormBackward& p) {
  with_float_type(p.dtype, [&](auto tag) { norm_backward_typed<decltype(tag)>(p); });
}
void softmax_forward(const SoftmaxForward& p) {
  with_float_type(p.dtype, [&](auto tag) { softmax_forward_typed<decltype(tag)>(p); });
}
void softmax_backward(const SoftmaxBackward& p) {
  with_float_type(p.dtype, [&](auto tag) { softmax_backward_typed<decltype(tag)>(p); });
}
void cross_entropy(const CrossEntropy& p) {
  with_float_type(p.dtype, [&](auto tag) { cross_entropy_typed<decltype(tag)>(p); });
}
void scale_unless_one(const ScaleRows& p) {
  const float s = *p.scale;
  if (s == 1.0f) return;
  with_float_type(p.dtype, [&](auto tag) {
    using T = decltype(tag);
    for (int64_t r = 0; r < p.rows; ++r) {
      T* x = row_out<T>(p.x, r);
      for (int64_t c = 0; c < p.cols; ++c) x[c] = scale_stored(x[c], s);
    }
  });
}

}  // namespace rudnn::norm::reference
