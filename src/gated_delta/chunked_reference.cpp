// The chunked (WY / UT-transform) form of spec 000's gated delta rule in float64: the CPU
// backend of chunk_gated_delta_rule. It is an algorithm, not the definition (that is the
// step-by-step recurrence in reference.cpp): the tests hold it to the recurrence, so that the
// algebra the GPU kernels implement is checked on every machine.
//
// Within a chunk of L steps starting from state S0 ([K, V]), with G_i the cumulative log
// decay of its first i + 1 steps:
//   A[i][j] = beta_i (k_i . k_j) exp(G_i - G_j)  for j < i,   T = (I + A)^-1
//   W = T (beta exp(G) K),  U = T (beta V),  V' = U - W S0        (V' row i: the delta of step i)
//   o_i = scale exp(G_i) q_i S0 + sum_{j <= i} scale (q_i . k_j) exp(G_i - G_j) V'_j
//   S = exp(G_L) S0 + sum_j exp(G_L - G_j) k_j V'_j^T
#include <algorithm>
#include <cmath>
#include <cstddef>

#include "gated_delta/reference.h"

namespace rudnn::gdn::reference {

void gated_delta_bhtd_chunked(const Dims& d, const std::vector<double>& q,
                              const std::vector<double>& k, const std::vector<double>& v,
                              const std::vector<double>& beta,
                              const std::vector<double>& log_decay, double query_scale,
                              std::int64_t chunk_size, std::vector<double>& state,
                              std::vector<double>& y, const SeqLens& cu_seqlens) {
  using Index = std::int64_t;
  const Index H = d.value_heads, T = d.steps, K = d.key_dim, V = d.value_dim;
  const Index entries = cu_seqlens.empty() ? d.batch : 1;
  y.assign(static_cast<std::size_t>(entries * H * T * V), 0.0);
  const Index C = chunk_size;
  std::vector<double> G, A, W, U, S(static_cast<std::size_t>(K * V)), Snext;
  auto at = [](std::vector<double>& x, Index i) -> double& { return x[std::size_t(i)]; };
  for (Index n = 0; n < d.batch; ++n) {
    const Index b = cu_seqlens.empty() ? n : 0;
    const Index first = cu_seqlens.empty() ? 0 : cu_seqlens[std::size_t(n)];
    const Index last = cu_seqlens.empty() ? T : cu_seqlens[std::size_t(n + 1)];
    for (Index h = 0; h < H; ++h) {
      const Index bh = b * H + h;
      const double* st = state.data() + (n * H + h) * K * V;
      S.assign(st, st + K * V);
      for (Index c0 = first; c0 < last; c0 += C) {
        const Index L = std::min(C, last - c0);
        auto qr = [&](Index i) { return q.data() + (bh * T + c0 + i) * K; };
        auto kr = [&](Index i) { return k.data() + (bh * T + c0 + i) * K; };
        auto vr = [&](Index i) { return v.data() + (bh * T + c0 + i) * V; };
        auto be = [&](Index i) { return beta[std::size_t(bh * T + c0 + i)]; };
        G.assign(std::size_t(L), 0.0);
        for (Index i = 0; i < L; ++i)
          at(G, i) = (i ? at(G, i - 1) : 0.0) + log_decay[std::size_t(bh * T + c0 + i)];
        auto dot = [&](const double* a, const double* c) {
          double s = 0.0;
          for (Index x = 0; x < K; ++x) s += a[x] * c[x];
          return s;
        };
        // T = (I + A)^-1 by forward substitution, stored in A (unit diagonal implied).
        A.assign(std::size_t(L * L), 0.0);
        for (Index i = 0; i < L; ++i)
          for (Index j = 0; j < i; ++j)
            at(A, i * L + j) = be(i) * dot(kr(i), kr(j)) * std::exp(at(G, i) - at(G, j));
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
            const double e = std::exp(at(G, j));
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
          double* out = y.data() + (bh * T + c0 + i) * V;
          const double e = query_scale * std::exp(at(G, i));
          for (Index x = 0; x < K; ++x) {
            const double a = e * qr(i)[x];
            for (Index c = 0; c < V; ++c) out[c] += a * at(S, x * V + c);
          }
          for (Index j = 0; j <= i; ++j) {
            const double a =
                query_scale * dot(qr(i), kr(j)) * std::exp(at(G, i) - at(G, j));
            for (Index c = 0; c < V; ++c) out[c] += a * at(U, j * V + c);
          }
        }
        const double gl = at(G, L - 1);
        for (double& s : S) s *= std::exp(gl);
        for (Index j = 0; j < L; ++j) {
          const double e = std::exp(gl - at(G, j));
          for (Index x = 0; x < K; ++x) {
            const double a = e * kr(j)[x];
            for (Index c = 0; c < V; ++c) at(S, x * V + c) += a * at(U, j * V + c);
          }
        }
      }
      std::copy(S.begin(), S.end(), state.begin() + (n * H + h) * K * V);
    }
  }
}

}  // namespace rudnn::gdn::reference
