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
