#include "gated_delta/reference.h"

#include <algorithm>
#include <cmath>
#include <cstddef>

namespace rudnn::gdn::reference {
namespace {

using Index = std::int64_t;
using Vec = std::vector<double>;

// Both input forms as strides: element (b, t, h, d) of q/k at b*qk_b + t*qk_t + h*qk_h + d,
// likewise v (and y, dy), and (b, t, h) of gate/beta at b*g_b + t*g_t + h*g_h. The state of
// (sequence, value head) is one dense [Dv, Dk] block, or [Dk, Dv] when transposed.
struct Form {
  Dims d;
  Index qk_b, qk_t, qk_h, v_b, v_t, v_h, g_b, g_t, g_h;
  bool log_gate;
  double scale;
  bool transposed;
  const SeqLens* cu;  // empty: dense batches

  Index group() const { return d.value_heads / d.key_heads; }
  Index state_size() const { return d.value_dim * d.key_dim; }
  // The batch entry and step range of sequence n.
  Index entry(Index n) const { return cu->empty() ? n : 0; }
  Index first(Index n) const { return cu->empty() ? 0 : (*cu)[static_cast<std::size_t>(n)]; }
  Index last(Index n) const {
    return cu->empty() ? d.steps : (*cu)[static_cast<std::size_t>(n + 1)];
  }
  // Row-major [Dv, Dk] working copy of a stored state, and back.
  void load(const double* stored, double* s) const {
    for (Index r = 0; r < d.value_dim; ++r)
      for (Index c = 0; c < d.key_dim; ++c)
        s[r * d.key_dim + c] =
            transposed ? stored[c * d.value_dim + r] : stored[r * d.key_dim + c];
  }
  void store(const double* s, double* stored) const {
    for (Index r = 0; r < d.value_dim; ++r)
      for (Index c = 0; c < d.key_dim; ++c)
        (transposed ? stored[c * d.value_dim + r] : stored[r * d.key_dim + c]) =
            s[r * d.key_dim + c];
  }
};

Form bthd_form(const Dims& d, const SeqLens& cu) {
  const Index qk_t = d.key_heads * d.key_dim, v_t = d.value_heads * d.value_dim;
  return {d,           d.steps * qk_t, qk_t, d.key_dim, d.steps * v_t, v_t, d.value_dim,
          d.steps * d.value_heads, d.value_heads, 1, false, 1.0, false, &cu};
}

Form bhtd_form(const Dims& d, double scale, const SeqLens& cu) {
  const Index H = d.value_heads;
  return {d,
          H * d.steps * d.key_dim,
          d.key_dim,
          d.steps * d.key_dim,
          H * d.steps * d.value_dim,
          d.value_dim,
          d.steps * d.value_dim,
          H * d.steps,
          1,
          d.steps,
          true,
          scale,
          true,
          &cu};
}

// The operands of one step of one (batch entry, value head).
struct Step {
  const double *q, *k, *v;
  double gate, beta;
  Index v_off, g_off, qk_off;
};

Step step_at(const Form& f, const Vec& q, const Vec& k, const Vec& v, const Vec& gate,
             const Vec& beta, Index b, Index t, Index h) {
  const Index qk_off = b * f.qk_b + t * f.qk_t + (h / f.group()) * f.qk_h;
  const Index v_off = b * f.v_b + t * f.v_t + h * f.v_h;
  const Index g_off = b * f.g_b + t * f.g_t + h * f.g_h;
  const double g = f.log_gate ? std::exp(gate[g_off]) : gate[g_off];
  return {q.data() + qk_off, k.data() + qk_off, v.data() + v_off, g, beta[g_off],
          v_off,             g_off,             qk_off};
}

// One step on a row-major [Dv, Dk] state: S <- g S; S += beta (v - S k) k^T; y = S (scale q).
void forward_step(const Form& f, const Step& in, double* state, double* y) {
  const Index Dk = f.d.key_dim;
  for (Index i = 0; i < f.state_size(); ++i) state[i] *= in.gate;
  for (Index r = 0; r < f.d.value_dim; ++r) {
    double* row = state + r * Dk;
    double projected = 0.0;  // (S k)_r
    for (Index c = 0; c < Dk; ++c) projected += row[c] * in.k[c];
    const double delta = in.beta * (in.v[r] - projected);
    for (Index c = 0; c < Dk; ++c) row[c] += delta * in.k[c];
    double out = 0.0;
    for (Index c = 0; c < Dk; ++c) out += row[c] * in.q[c];
    if (y) y[r] = f.scale * out;
  }
}

void forward(const Form& f, const Vec& q, const Vec& k, const Vec& v, const Vec& gate,
             const Vec& beta, Vec& state, Vec& y, Vec* every_step) {
  const Dims& d = f.d;
  const Index S = f.state_size();
  const Index entries = f.cu->empty() ? d.batch : 1;
  y.assign(static_cast<std::size_t>(entries * d.steps * d.value_heads * d.value_dim), 0.0);
  if (every_step)
    every_step->assign(static_cast<std::size_t>(entries * d.steps * d.value_heads * S), 0.0);
  Vec s(static_cast<std::size_t>(S));
  for (Index n = 0; n < d.batch; ++n)
    for (Index h = 0; h < d.value_heads; ++h) {
      double* stored = state.data() + (n * d.value_heads + h) * S;
      f.load(stored, s.data());
      const Index b = f.entry(n);
      for (Index t = f.first(n); t < f.last(n); ++t) {
        const Step in = step_at(f, q, k, v, gate, beta, b, t, h);
        forward_step(f, in, s.data(), y.data() + in.v_off);
        if (every_step) {
          double* dst = every_step->data() + ((b * d.steps + t) * d.value_heads + h) * S;
          for (Index i = 0; i < S; ++i) dst[i] = s[static_cast<std::size_t>(i)];
        }
      }
      f.store(s.data(), stored);
    }
}

Grads backward(const Form& f, const Vec& q, const Vec& k, const Vec& v, const Vec& gate,
               const Vec& beta, const Vec& state, const Vec& dy, const Vec& dfinal) {
  const Dims& d = f.d;
  const Index Dk = d.key_dim, Dv = d.value_dim, S = f.state_size();
  Grads g;
  g.dq.assign(q.size(), 0.0);
  g.dk.assign(k.size(), 0.0);
  g.dv.assign(v.size(), 0.0);
  g.dgate.assign(gate.size(), 0.0);
  g.dbeta.assign(beta.size(), 0.0);
  g.dstate.assign(state.size(), 0.0);
  Vec ds(static_cast<std::size_t>(S)), dsp(static_cast<std::size_t>(S)),
      u(static_cast<std::size_t>(Dv)), ddelta(static_cast<std::size_t>(Dv));
  for (Index n = 0; n < d.batch; ++n)
    for (Index h = 0; h < d.value_heads; ++h) {
      const Index b = f.entry(n), t0 = f.first(n), t1 = f.last(n);
      // states[i] is the state before step t0 + i (states[t1 - t0]: the final state).
      std::vector<Vec> states(static_cast<std::size_t>(t1 - t0 + 1), Vec(std::size_t(S)));
      f.load(state.data() + (n * d.value_heads + h) * S, states[0].data());
      for (Index t = t0; t < t1; ++t) {
        states[std::size_t(t - t0 + 1)] = states[std::size_t(t - t0)];
        forward_step(f, step_at(f, q, k, v, gate, beta, b, t, h),
                     states[std::size_t(t - t0 + 1)].data(), nullptr);
      }
      if (dfinal.empty())
        std::fill(ds.begin(), ds.end(), 0.0);
      else
        f.load(dfinal.data() + (n * d.value_heads + h) * S, ds.data());
      for (Index t = t1 - 1; t >= t0; --t) {
        const Step in = step_at(f, q, k, v, gate, beta, b, t, h);
        const Vec& prev = states[std::size_t(t - t0)];
        const Vec& now = states[std::size_t(t - t0 + 1)];
        const double* dyt = dy.data() + in.v_off;
        double* dq = g.dq.data() + in.qk_off;
        double* dk = g.dk.data() + in.qk_off;
        // y = S_t (scale q): into dS_t and dq.
        for (Index r = 0; r < Dv; ++r)
          for (Index c = 0; c < Dk; ++c) {
            ds[r * Dk + c] += f.scale * dyt[r] * in.q[c];
            dq[c] += f.scale * now[r * Dk + c] * dyt[r];
          }
        // S_t = S' + delta k^T with S' = g S_{t-1} and delta = beta (v - S' k).
        double dbeta = 0.0;
        for (Index r = 0; r < Dv; ++r) {
          double sk = 0.0, dk_dot = 0.0;
          for (Index c = 0; c < Dk; ++c) {
            sk += in.gate * prev[r * Dk + c] * in.k[c];
            dk_dot += ds[r * Dk + c] * in.k[c];
          }
          u[r] = sk;
          ddelta[r] = dk_dot;
          const double delta = in.beta * (in.v[r] - sk);
          for (Index c = 0; c < Dk; ++c) dk[c] += ds[r * Dk + c] * delta;
          g.dv[in.v_off + r] += in.beta * dk_dot;
          dbeta += dk_dot * (in.v[r] - sk);
        }
        g.dbeta[in.g_off] += dbeta;
        double dgate = 0.0;
        for (Index r = 0; r < Dv; ++r) {
          const double du = -in.beta * ddelta[r];
          for (Index c = 0; c < Dk; ++c) {
            dk[c] += in.gate * prev[r * Dk + c] * du;
            dsp[r * Dk + c] = ds[r * Dk + c] + du * in.k[c];
            dgate += dsp[r * Dk + c] * prev[r * Dk + c];
          }
        }
        // d/dlog_decay = g * d/dg.
        g.dgate[in.g_off] += f.log_gate ? dgate * in.gate : dgate;
        for (Index i = 0; i < S; ++i) ds[i] = in.gate * dsp[i];
      }
      f.store(ds.data(), g.dstate.data() + (n * d.value_heads + h) * S);
    }
  return g;
}

}  // namespace

void gated_delta_bthd(const Dims& d, const Vec& q, const Vec& k, const Vec& v, const Vec& gate,
                      const Vec& beta, Vec& state, Vec& y, Vec* every_step,
                      const SeqLens& cu_seqlens) {
  forward(bthd_form(d, cu_seqlens), q, k, v, gate, beta, state, y, every_step);
}

void gated_delta_bhtd(const Dims& d, const Vec& q, const Vec& k, const Vec& v, const Vec& beta,
                      const Vec& log_decay, double query_scale, Vec& state, Vec& y,
                      const SeqLens& cu_seqlens) {
  forward(bhtd_form(d, query_scale, cu_seqlens), q, k, v, log_decay, beta, state, y, nullptr);
}

Grads gated_delta_bthd_backward(const Dims& d, const Vec& q, const Vec& k, const Vec& v,
                                const Vec& gate, const Vec& beta, const Vec& state,
                                const Vec& dy, const Vec& dfinal, const SeqLens& cu_seqlens) {
  return backward(bthd_form(d, cu_seqlens), q, k, v, gate, beta, state, dy, dfinal);
}

Grads gated_delta_bhtd_backward(const Dims& d, const Vec& q, const Vec& k, const Vec& v,
                                const Vec& beta, const Vec& log_decay, double query_scale,
                                const Vec& state, const Vec& dy, const Vec& dfinal,
                                const SeqLens& cu_seqlens) {
  return backward(bhtd_form(d, query_scale, cu_seqlens), q, k, v, log_decay, beta, state, dy,
                  dfinal);
}

}  // namespace rudnn::gdn::reference
