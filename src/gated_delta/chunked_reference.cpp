// The chunked (WY / UT-transform) form of the gated delta rule in float64: the CPU backend of
// chunk_gated_delta_rule (spec 000's form) and chunk_gated_delta (spec 003's form), one
// algorithm over either layout. It is an algorithm, not the definition (that is the
// step-by-step recurrence in reference.cpp): the tests hold it to the recurrence, so that the
// algebra the GPU kernels implement is checked on every machine.
//
// Within a chunk of L steps starting from state S0 ([K, V]), with G_i the cumulative log
// decay of its first i + 1 steps:
//   A[i][j] = beta_i (k_i . k_j) exp(G_i - G_j)  for j < i,   T = (I + A)^-1
//   W = T (beta exp(G) K),  U = T (beta V),  V' = U - W S0        (V' row i: the delta of step i)
//   o_i = scale exp(G_i) q_i S0 + sum_{j <= i} scale (q_i . k_j) exp(G_i - G_j) V'_j
//   S = exp(G_L) S0 + sum_j exp(G_L - G_j) k_j V'_j^T
// exp(G_i - G_j) is formed as the product of the decays of steps j+1 .. i (not from logs), so
// that spec 003's gate g = 0 (a full reset) is exact rather than 0 / 0.
#include <algorithm>
#include <cmath>
#include <cstddef>

#include "gated_delta/reference.h"

namespace rudnn::gdn::reference {

namespace {

using Index = std::int64_t;

// Where the operands of one layout live, in elements of the dense double arrays: row
// (b, t, key head) of q/k at b*qk_b + t*qk_t + kh*qk_h (Dk contiguous), row (b, t, value
// head) of v/y at b*v_b + t*v_t + h*v_h (Dv contiguous), gate/beta at b*g_b + t*g_t + h*g_h.
struct Layout {
  Index qk_b, qk_t, qk_h, v_b, v_t, v_h, g_b, g_t, g_h;
  bool log_gate;          // spec 000: decay = exp(gate); spec 003: decay = gate
  bool state_transposed;  // spec 003: each head's state stored [Dv, Dk]; spec 000: [Dk, Dv]
};

void chunked(const Dims& d, const Layout& lay, const std::vector<double>& q,
             const std::vector<double>& k, const std::vector<double>& v,
             const std::vector<double>& beta, const std::vector<double>& gate, double scale,
             Index chunk_size, std::vector<double>& state, std::vector<double>& y,
             const SeqLens& cu_seqlens) {
  const Index H = d.value_heads, T = d.steps, K = d.key_dim, V = d.value_dim;
  const Index group = H / d.key_heads;  // value heads per key head
  const Index entries = cu_seqlens.empty() ? d.batch : 1;
  y.assign(static_cast<std::size_t>(entries * H * T * V), 0.0);
  const Index C = chunk_size;
  // P[i * (L + 1) + j + 1] = decay product of steps j+1 .. i (j = -1: steps 0 .. i).
  std::vector<double> P, A, W, U, S(static_cast<std::size_t>(K * V));
  auto at = [](std::vector<double>& x, Index i) -> double& { return x[std::size_t(i)]; };
  for (Index n = 0; n < d.batch; ++n) {
    const Index b = cu_seqlens.empty() ? n : 0;
    const Index first = cu_seqlens.empty() ? 0 : cu_seqlens[std::size_t(n)];
    const Index last = cu_seqlens.empty() ? T : cu_seqlens[std::size_t(n + 1)];
    for (Index h = 0; h < H; ++h) {
      const Index kh = h / group;
      double* st = state.data() + (n * H + h) * K * V;
      // S is [K, V] here whatever the stored layout.
      for (Index x = 0; x < K; ++x)
        for (Index c = 0; c < V; ++c)
          at(S, x * V + c) = lay.state_transposed ? st[c * K + x] : st[x * V + c];
      for (Index c0 = first; c0 < last; c0 += C) {
        const Index L = std::min(C, last - c0);
        auto qr = [&](Index i) {
          return q.data() + b * lay.qk_b + (c0 + i) * lay.qk_t + kh * lay.qk_h;
        };
        auto kr = [&](Index i) {
          return k.data() + b * lay.qk_b + (c0 + i) * lay.qk_t + kh * lay.qk_h;
        };
        auto vr = [&](Index i) {
          return v.data() + b * lay.v_b + (c0 + i) * lay.v_t + h * lay.v_h;
        };
        auto gi = [&](Index i) {
          return std::size_t(b * lay.g_b + (c0 + i) * lay.g_t + h * lay.g_h);
        };
        auto be = [&](Index i) { return beta[gi(i)]; };
        const Index L1 = L + 1;
        P.assign(std::size_t(L * L1), 0.0);
        for (Index i = 0; i < L; ++i) {
          double r = 1.0;  // product of the decays of steps j+1 .. i
          for (Index j = i; j >= 0; --j) {
            at(P, i * L1 + j + 1) = r;
            r *= lay.log_gate ? std::exp(gate[gi(j)]) : gate[gi(j)];
          }
          at(P, i * L1) = r;
        }
        auto ratio = [&](Index i, Index j) { return at(P, i * L1 + j + 1); };  // exp(G_i - G_j)
        auto cum = [&](Index i) { return at(P, i * L1); };                     // exp(G_i)
        auto dot = [&](const double* a, const double* c) {
          double s = 0.0;
          for (Index x = 0; x < K; ++x) s += a[x] * c[x];
          return s;
        };
        // T = (I + A)^-1 by forward substitution (unit diagonal).
        A.assign(std::size_t(L * L), 0.0);
        for (Index i = 0; i < L; ++i)
          for (Index j = 0; j < i; ++j) at(A, i * L + j) = be(i) * dot(kr(i), kr(j)) * ratio(i, j);
        std::vector<double> Tm(std::size_t(L * L), 0.0);
        for (Index i = 0; i < L; ++i) {
          at(Tm, i * L + i) = 1.0;
          for (Index j = 0; j < i; ++j) {
            double s = 0.0;
            for (Index m = j; m < i; ++m) s += at(A, i * L + m) * at(Tm, m * L + j);
            at(Tm, i * L + j) = -s;
          }
        }
        W.assign(std::size_t(L * K), 0.0);
        U.assign(std::size_t(L * V), 0.0);
        for (Index i = 0; i < L; ++i)
          for (Index j = 0; j <= i; ++j) {
            const double t = at(Tm, i * L + j) * be(j);
            const double e = cum(j);
            for (Index x = 0; x < K; ++x) at(W, i * K + x) += t * e * kr(j)[x];
            for (Index x = 0; x < V; ++x) at(U, i * V + x) += t * vr(j)[x];
          }
        // V' = U - W S0, kept in U.
        for (Index i = 0; i < L; ++i)
          for (Index x = 0; x < K; ++x) {
            const double w = at(W, i * K + x);
            for (Index c = 0; c < V; ++c) at(U, i * V + c) -= w * at(S, x * V + c);
          }
        for (Index i = 0; i < L; ++i) {
          double* out = y.data() + b * lay.v_b + (c0 + i) * lay.v_t + h * lay.v_h;
          const double e = scale * cum(i);
          for (Index x = 0; x < K; ++x) {
            const double a = e * qr(i)[x];
            for (Index c = 0; c < V; ++c) out[c] += a * at(S, x * V + c);
          }
          for (Index j = 0; j <= i; ++j) {
            const double a = scale * dot(qr(i), kr(j)) * ratio(i, j);
            for (Index c = 0; c < V; ++c) out[c] += a * at(U, j * V + c);
          }
        }
        const double gl = cum(L - 1);
        for (double& s : S) s *= gl;
        for (Index j = 0; j < L; ++j) {
          const double e = ratio(L - 1, j);
          for (Index x = 0; x < K; ++x) {
            const double a = e * kr(j)[x];
            for (Index c = 0; c < V; ++c) at(S, x * V + c) += a * at(U, j * V + c);
          }
        }
      }
      for (Index x = 0; x < K; ++x)
        for (Index c = 0; c < V; ++c)
          (lay.state_transposed ? st[c * K + x] : st[x * V + c]) = at(S, x * V + c);
    }
  }
}

}  // namespace

void gated_delta_bhtd_chunked(const Dims& d, const std::vector<double>& q,
                              const std::vector<double>& k, const std::vector<double>& v,
                              const std::vector<double>& beta, const std::vector<double>& log_decay,
                              double query_scale, std::int64_t chunk_size,
                              std::vector<double>& state, std::vector<double>& y,
                              const SeqLens& cu_seqlens) {
  const Index H = d.value_heads, T = d.steps, K = d.key_dim, V = d.value_dim;
  const Layout lay{H * T * K, K, T * K, H * T * V, V, T * V, H * T, 1, T, true, false};
  chunked(d, lay, q, k, v, beta, log_decay, query_scale, chunk_size, state, y, cu_seqlens);
}

void gated_delta_bthd_chunked(const Dims& d, const std::vector<double>& q,
                              const std::vector<double>& k, const std::vector<double>& v,
                              const std::vector<double>& gate, const std::vector<double>& beta,
                              std::int64_t chunk_size, std::vector<double>& state,
                              std::vector<double>& y, const SeqLens& cu_seqlens) {
  const Index Hk = d.key_heads, Hv = d.value_heads, T = d.steps, K = d.key_dim, V = d.value_dim;
  const Layout lay{T * Hk * K, Hk * K, K, T * Hv * V, Hv * V, V, T * Hv, Hv, 1, false, true};
  chunked(d, lay, q, k, v, beta, gate, 1.0, chunk_size, state, y, cu_seqlens);
}

}  // namespace rudnn::gdn::reference
