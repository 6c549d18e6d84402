#include "gated_delta/reference.h"

#include <cmath>
#include <cstddef>

namespace rudnn::gdn::reference {
namespace {

using Index = std::int64_t;

// One step of one value head on a row-major [Dv, Dk] state, in float64. The inputs are read
// through element strides so that both layouts share the one definition of the recurrence.
struct StepOperands {
  const double* q;
  const double* k;
  const double* v;
  Index q_stride, k_stride, v_stride;  // between consecutive d (1 in both layouts)
  double gate, beta, query_scale;
};

void step(Index key_dim, Index value_dim, const StepOperands& in, double* state, double* y) {
  for (Index i = 0; i < value_dim * key_dim; ++i) state[i] *= in.gate;
  for (Index r = 0; r < value_dim; ++r) {
    double* row = state + r * key_dim;
    double projected = 0.0;  // (S k)_r
    for (Index c = 0; c < key_dim; ++c) projected += row[c] * in.k[c * in.k_stride];
    const double delta = in.beta * (in.v[r * in.v_stride] - projected);
    for (Index c = 0; c < key_dim; ++c) row[c] += delta * in.k[c * in.k_stride];
    double out = 0.0;
    for (Index c = 0; c < key_dim; ++c) out += row[c] * in.q[c * in.q_stride];
    y[r] = in.query_scale * out;
  }
}

}  // namespace

void gated_delta_bthd(const Dims& d, const std::vector<double>& q, const std::vector<double>& k,
                      const std::vector<double>& v, const std::vector<double>& gate,
                      const std::vector<double>& beta, std::vector<double>& state,
                      std::vector<double>& y, std::vector<double>* every_step) {
  const Index group = d.value_heads / d.key_heads;
  const Index state_size = d.value_dim * d.key_dim;
  y.assign(static_cast<std::size_t>(d.batch * d.steps * d.value_heads * d.value_dim), 0.0);
  if (every_step)
    every_step->assign(static_cast<std::size_t>(d.batch * d.steps * d.value_heads * state_size),
                       0.0);
  for (Index b = 0; b < d.batch; ++b)
    for (Index h = 0; h < d.value_heads; ++h) {
      double* s = state.data() + (b * d.value_heads + h) * state_size;
      for (Index t = 0; t < d.steps; ++t) {
        const Index bt = b * d.steps + t;
        const Index key_row = (bt * d.key_heads + h / group) * d.key_dim;
        const Index head = bt * d.value_heads + h;
        const StepOperands in{q.data() + key_row,
                              k.data() + key_row,
                              v.data() + head * d.value_dim,
                              1,
                              1,
                              1,
                              gate[head],
                              beta[head],
                              1.0};
        step(d.key_dim, d.value_dim, in, s, y.data() + head * d.value_dim);
        if (every_step)
          for (Index i = 0; i < state_size; ++i) (*every_step)[head * state_size + i] = s[i];
      }
    }
}

void gated_delta_bhtd(const Dims& d, const std::vector<double>& q, const std::vector<double>& k,
                      const std::vector<double>& v, const std::vector<double>& beta,
                      const std::vector<double>& log_decay, double query_scale,
                      std::vector<double>& state, std::vector<double>& y) {
  const Index heads = d.value_heads;
  const Index state_size = d.value_dim * d.key_dim;
  y.assign(static_cast<std::size_t>(d.batch * heads * d.steps * d.value_dim), 0.0);
  std::vector<double> s(static_cast<std::size_t>(state_size));
  for (Index bh = 0; bh < d.batch * heads; ++bh) {
    // [K,V] storage -> row-major [V,K] working state, and back at the end.
    double* stored = state.data() + bh * state_size;
    for (Index c = 0; c < d.key_dim; ++c)
      for (Index r = 0; r < d.value_dim; ++r) s[r * d.key_dim + c] = stored[c * d.value_dim + r];
    for (Index t = 0; t < d.steps; ++t) {
      const Index row = bh * d.steps + t;
      const StepOperands in{q.data() + row * d.key_dim,
                            k.data() + row * d.key_dim,
                            v.data() + row * d.value_dim,
                            1,
                            1,
                            1,
                            std::exp(log_decay[row]),
                            beta[row],
                            query_scale};
      step(d.key_dim, d.value_dim, in, s.data(), y.data() + row * d.value_dim);
    }
    for (Index c = 0; c < d.key_dim; ++c)
      for (Index r = 0; r < d.value_dim; ++r) stored[c * d.value_dim + r] = s[r * d.key_dim + c];
  }
}

}  // namespace rudnn::gdn::reference
