#include "paged_attention/reference.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "common/host_values.h"

namespace rudnn::paged::reference {

using common::load_value;
using common::store_value;

void forward(const PagedForward& p) {
  const Schedule& s = p.sched;
  const int64_t group = p.heads_q / p.heads_kv;
  std::vector<double> logits, acc(static_cast<size_t>(p.dim_v));
  for (int64_t g = 0; g < p.queries; ++g) {
    const int64_t seq = sequence_of(s, g);
    const int64_t len = sequence_keys(s, seq);
    const int64_t keys = std::min(visible_keys(s, g, len, p.causal), len);
    const int64_t q_at = query_offset(s, g, p.q.batch_stride, p.q.seq_stride);
    const int64_t qp_at = query_offset(s, g, p.qp.batch_stride, p.qp.seq_stride);
    const int64_t out_at = query_offset(s, g, p.out.batch_stride, p.out.seq_stride);
    for (int64_t h = 0; h < p.heads_q; ++h) {
      const int64_t hk = h / group;
      logits.assign(static_cast<size_t>(keys), 0.0);
      double top = -std::numeric_limits<double>::infinity();
      for (int64_t j = 0; j < keys; ++j) {
        const int64_t page = page_of(s, seq, j / s.page_size), row = j % s.page_size;
        const int64_t k_at = page * p.k.page_stride + row * p.k.row_stride + hk * p.k.head_stride;
        double dot = 0.0;
        for (int64_t d = 0; d < p.dim_qk; ++d) {
          dot += load_value(p.dtype, p.q.data, q_at + h * p.q.head_stride + d) *
                 load_value(p.dtype, p.k.data, k_at + d);
        }
        if (p.dim_pos > 0) {
          const int64_t kp_at = page * p.kp.page_stride + row * p.kp.row_stride;
          for (int64_t d = 0; d < p.dim_pos; ++d) {
            dot += load_value(p.dtype, p.qp.data, qp_at + h * p.qp.head_stride + d) *
                   load_value(p.dtype, p.kp.data, kp_at + d);
          }
        }
        logits[static_cast<size_t>(j)] = dot * static_cast<double>(p.scale);
        top = std::max(top, logits[static_cast<size_t>(j)]);
      }
      std::fill(acc.begin(), acc.end(), 0.0);
      double sum = 0.0;
      for (int64_t j = 0; j < keys; ++j) {
        const double w = std::exp(logits[static_cast<size_t>(j)] - top);
        sum += w;
        const int64_t page = page_of(s, seq, j / s.page_size), row = j % s.page_size;
        const int64_t v_at = page * p.v.page_stride + row * p.v.row_stride + hk * p.v.head_stride;
        for (int64_t d = 0; d < p.dim_v; ++d) {
          acc[static_cast<size_t>(d)] += w * load_value(p.dtype, p.v.data, v_at + d);
        }
      }
      // A query that sees no key gives zeros (the block form's clamped lengths).
      const double inv = sum > 0.0 ? 1.0 / sum : 0.0;
      for (int64_t d = 0; d < p.dim_v; ++d) {
        store_value(p.dtype, p.out.data, out_at + h * p.out.head_stride + d,
                    acc[static_cast<size_t>(d)] * inv);
      }
    }
  }
}

void backward(const PagedBackward& b) {
  const PagedForward& p = b.fwd;
  const Schedule& s = p.sched;
  const bool mla = p.dim_pos > 0;
  const int64_t group = p.heads_q / p.heads_kv;
  const int64_t rows = s.pages * s.page_size;
  const double scale = static_cast<double>(p.scale);
  // Omitted outputs skip their accumulation (and its buffer); the scores' gradient is
  // needed by every output but dv.
  const bool want_k = b.dk.data != nullptr, want_kp = b.dkp.data != nullptr;
  const bool want_v = mla ? want_k : b.dv.data != nullptr;
  const bool want_ds = b.dq.data != nullptr || b.dqp.data != nullptr || want_k || want_kp;
  // History accumulators over every physical row (rounded once at the end). MLA's latent
  // takes the key and the value contributions in one buffer.
  std::vector<double> dk(want_k ? static_cast<size_t>(rows * p.heads_kv * p.dim_qk) : 0, 0.0);
  std::vector<double> dv_own(!mla && want_v ? static_cast<size_t>(rows * p.heads_kv * p.dim_v) : 0,
                             0.0);
  std::vector<double>& dv = mla ? dk : dv_own;
  std::vector<double> dkp(want_kp ? static_cast<size_t>(rows * p.dim_pos) : 0, 0.0);
  std::vector<double> x, dp, qrow, qprow, grow, dq(static_cast<size_t>(p.dim_qk)),
      dqp(static_cast<size_t>(p.dim_pos));
  std::vector<int64_t> at;  // physical row (page * page_size + row) of each visible key
  for (int64_t g = 0; g < p.queries; ++g) {
    const int64_t seq = sequence_of(s, g);
    const int64_t len = sequence_keys(s, seq);
    const int64_t keys = std::min(visible_keys(s, g, len, p.causal), len);
    at.resize(static_cast<size_t>(keys));
    for (int64_t j = 0; j < keys; ++j) {
      at[static_cast<size_t>(j)] = page_of(s, seq, j / s.page_size) * s.page_size + j % s.page_size;
    }
    const int64_t q_at = query_offset(s, g, p.q.batch_stride, p.q.seq_stride);
    const int64_t qp_at = query_offset(s, g, p.qp.batch_stride, p.qp.seq_stride);
    const int64_t go_at = query_offset(s, g, b.dout.batch_stride, b.dout.seq_stride);
    for (int64_t h = 0; h < p.heads_q; ++h) {
      const int64_t hk = h / group;
      auto row_of = [&](const CacheView& c, int64_t j) {
        const int64_t r = at[static_cast<size_t>(j)];
        return (r / s.page_size) * c.page_stride + (r % s.page_size) * c.row_stride +
               hk * c.head_stride;
      };
      auto acc_of = [&](int64_t j, int64_t dim) {
        return static_cast<size_t>((at[static_cast<size_t>(j)] * p.heads_kv + hk) * dim);
      };
      qrow.resize(static_cast<size_t>(p.dim_qk));
      for (int64_t d = 0; d < p.dim_qk; ++d)
        qrow[static_cast<size_t>(d)] =
            load_value(p.dtype, p.q.data, q_at + h * p.q.head_stride + d);
      qprow.resize(static_cast<size_t>(p.dim_pos));
      for (int64_t d = 0; d < p.dim_pos; ++d)
        qprow[static_cast<size_t>(d)] =
            load_value(p.dtype, p.qp.data, qp_at + h * p.qp.head_stride + d);
      grow.resize(static_cast<size_t>(p.dim_v));
      for (int64_t d = 0; d < p.dim_v; ++d)
        grow[static_cast<size_t>(d)] =
            load_value(p.dtype, b.dout.data, go_at + h * b.dout.head_stride + d);
      // Probabilities, recomputed (the forward keeps no score matrix).
      x.assign(static_cast<size_t>(keys), 0.0);
      double top = -std::numeric_limits<double>::infinity();
      for (int64_t j = 0; j < keys; ++j) {
        const int64_t k_at = row_of(p.k, j);
        double dot = 0.0;
        for (int64_t d = 0; d < p.dim_qk; ++d)
          dot += qrow[static_cast<size_t>(d)] * load_value(p.dtype, p.k.data, k_at + d);
        if (mla) {
          const int64_t r = at[static_cast<size_t>(j)];
          const int64_t kp_at =
              (r / s.page_size) * p.kp.page_stride + (r % s.page_size) * p.kp.row_stride;
          for (int64_t d = 0; d < p.dim_pos; ++d)
            dot += qprow[static_cast<size_t>(d)] * load_value(p.dtype, p.kp.data, kp_at + d);
        }
        x[static_cast<size_t>(j)] = dot * scale;
        top = std::max(top, x[static_cast<size_t>(j)]);
      }
      double sum = 0.0;
      for (int64_t j = 0; j < keys; ++j) {
        x[static_cast<size_t>(j)] = std::exp(x[static_cast<size_t>(j)] - top);
        sum += x[static_cast<size_t>(j)];
      }
      for (int64_t j = 0; j < keys; ++j) x[static_cast<size_t>(j)] /= sum;  // keys > 0 here
      // dP_j = dout · v_j; delta = Σ_j P_j dP_j; dS_j = P_j (dP_j - delta).
      dp.assign(static_cast<size_t>(keys), 0.0);
      double delta = 0.0;
      for (int64_t j = 0; j < keys; ++j) {
        const int64_t v_at = row_of(p.v, j);
        const double pj = x[static_cast<size_t>(j)];
        const size_t a = acc_of(j, p.dim_v);
        double dot = 0.0;
        for (int64_t d = 0; d < p.dim_v; ++d) {
          dot += grow[static_cast<size_t>(d)] * load_value(p.dtype, p.v.data, v_at + d);
          if (want_v) dv[a + static_cast<size_t>(d)] += pj * grow[static_cast<size_t>(d)];
        }
        dp[static_cast<size_t>(j)] = dot;
        delta += pj * dot;
      }
      std::fill(dq.begin(), dq.end(), 0.0);
      std::fill(dqp.begin(), dqp.end(), 0.0);
      for (int64_t j = 0; want_ds && j < keys; ++j) {
        const double ds = scale * x[static_cast<size_t>(j)] * (dp[static_cast<size_t>(j)] - delta);
        const int64_t k_at = row_of(p.k, j);
        const size_t a = acc_of(j, p.dim_qk);
        for (int64_t d = 0; d < p.dim_qk; ++d) {
          dq[static_cast<size_t>(d)] += ds * load_value(p.dtype, p.k.data, k_at + d);
          if (want_k) dk[a + static_cast<size_t>(d)] += ds * qrow[static_cast<size_t>(d)];
        }
        if (mla) {
          const int64_t r = at[static_cast<size_t>(j)];
          const int64_t kp_at =
              (r / s.page_size) * p.kp.page_stride + (r % s.page_size) * p.kp.row_stride;
          for (int64_t d = 0; d < p.dim_pos; ++d) {
            dqp[static_cast<size_t>(d)] += ds * load_value(p.dtype, p.kp.data, kp_at + d);
            if (want_kp)
              dkp[static_cast<size_t>(r * p.dim_pos + d)] += ds * qprow[static_cast<size_t>(d)];
          }
        }
      }
      if (b.dq.data) {
        const int64_t o =
            query_offset(s, g, b.dq.batch_stride, b.dq.seq_stride) + h * b.dq.head_stride;
        for (int64_t d = 0; d < p.dim_qk; ++d)
          store_value(p.dtype, b.dq.data, o + d, dq[static_cast<size_t>(d)]);
      }
      if (b.dqp.data) {
        const int64_t o =
            query_offset(s, g, b.dqp.batch_stride, b.dqp.seq_stride) + h * b.dqp.head_stride;
        for (int64_t d = 0; d < p.dim_pos; ++d)
          store_value(p.dtype, b.dqp.data, o + d, dqp[static_cast<size_t>(d)]);
      }
    }
  }
  // Every physical row is written: rows no query reads keep their zero accumulators.
  auto store_cache = [&](const CacheOut& c, const std::vector<double>& acc, int64_t heads,
                         int64_t dim) {
    if (!c.data) return;
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t hk = 0; hk < heads; ++hk) {
        const int64_t o = (r / s.page_size) * c.page_stride + (r % s.page_size) * c.row_stride +
                          hk * c.head_stride;
        const size_t a = static_cast<size_t>((r * heads + hk) * dim);
        for (int64_t d = 0; d < dim; ++d)
          store_value(p.dtype, c.data, o + d, acc[a + static_cast<size_t>(d)]);
      }
    }
  };
  store_cache(b.dk, dk, p.heads_kv, p.dim_qk);
  if (!mla) store_cache(b.dv, dv, p.heads_kv, p.dim_v);
  store_cache(b.dkp, dkp, 1, p.dim_pos);
}

void write(const PagedWrite& p) {
  const int64_t capacity = p.pages * p.page_size;
  for (int64_t t = 0; t < p.tokens; ++t) {
    const int64_t slot = load_index(p.slots, p.slots_dtype == DType::i64, t);
    if (slot < 0 || slot >= capacity) continue;
    const int64_t page = slot / p.page_size, row = slot % p.page_size;
    for (int64_t h = 0; h < p.heads; ++h) {
      const int64_t dst = page * p.page_stride + row * p.row_stride + h * p.head_stride;
      const int64_t src = (t * p.heads + h) * p.dim;
      for (int64_t d = 0; d < p.dim; ++d) {
        store_value(p.dtype, p.cache, dst + d, load_value(p.dtype, p.src, src + d));
      }
    }
  }
}

}  // namespace rudnn::paged::reference
