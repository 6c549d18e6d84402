// Shared pieces of the paged-attention tests: random schedules (mixed prefill and decode,
// empty sequences, shared-prefix pages, scattered pages), caches filled from per-sequence
// dense keys, and the dense attention call over the same keys stored contiguously.
#pragma once

#include <algorithm>
#include <cstring>
#include <numeric>
#include <string>
#include <vector>

#include "support/test_support.h"

namespace rudnn::test::paged_util {

struct Schedule {
  int64_t page_size = 16, pages = 0;
  std::vector<std::vector<int64_t>> tables;
  std::vector<int64_t> lengths, seq_ids, positions;

  paged::HostPlan host() const {
    return paged::HostPlan(page_size, pages, tables, lengths, seq_ids, positions);
  }
  int64_t queries() const { return static_cast<int64_t>(positions.size()); }
  std::string str() const {
    std::string s = "page_size " + std::to_string(page_size) + ", pages " + std::to_string(pages) +
                    ", lengths [";
    for (int64_t l : lengths) s += std::to_string(l) + " ";
    s += "], queries " + std::to_string(queries()) + " (seq:pos";
    for (size_t i = 0; i < positions.size() && i < 64; ++i)
      s += " " + std::to_string(seq_ids[i]) + ":" + std::to_string(positions[i]);
    return s + ")";
  }
};

struct ScheduleOptions {
  int64_t sequences = 4;
  int64_t max_len = 100;
  int64_t max_chunk = 12;        // prefill chunk length at most
  double decode_share = 0.5;     // sequences with one query at their end
  double empty_share = 0.15;     // sequences of length 0 (no queries)
  bool shared_prefix = false;    // sequence 1 reuses sequence 0's first page
  bool shuffle_queries = false;  // queries in a random order (sequences interleaved)
  int64_t spare_pages = 3;       // pages no sequence uses
};

// Pages are a random permutation (so that sequence order and page order differ); each
// sequence's table may hold one page more than its keys need (unused capacity).
inline Schedule random_schedule(Rng& rng, int64_t page_size, const ScheduleOptions& o) {
  Schedule s;
  s.page_size = page_size;
  std::vector<int64_t> lens(static_cast<size_t>(o.sequences));
  int64_t needed = 0;
  for (auto& len : lens) {
    len = rng.uniform(0.0f, 1.0f) < o.empty_share ? 0 : rng.integer(1, o.max_len);
    needed += (len + page_size - 1) / page_size + 1;
  }
  s.pages = needed + o.spare_pages;
  std::vector<int64_t> perm(static_cast<size_t>(s.pages));
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng.engine());
  size_t next = 0;
  for (size_t i = 0; i < lens.size(); ++i) {
    const int64_t n = (lens[i] + page_size - 1) / page_size + rng.integer(0, 1);
    std::vector<int64_t> table;
    for (int64_t k = 0; k < n; ++k) table.push_back(perm[next++]);
    s.tables.push_back(table);
    s.lengths.push_back(lens[i]);
  }
  if (o.shared_prefix && lens.size() >= 2 && !s.tables[0].empty() && !s.tables[1].empty()) {
    s.tables[1][0] = s.tables[0][0];
  }
  for (int64_t seq = 0; seq < o.sequences; ++seq) {
    const int64_t len = s.lengths[static_cast<size_t>(seq)];
    if (len == 0) continue;
    const bool decode = rng.uniform(0.0f, 1.0f) < o.decode_share;
    const int64_t chunk = decode ? 1 : rng.integer(1, std::min(len, o.max_chunk));
    for (int64_t p = len - chunk; p < len; ++p) {
      s.seq_ids.push_back(seq);
      s.positions.push_back(p);
    }
  }
  if (o.shuffle_queries) {
    std::vector<size_t> order(s.positions.size());
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), rng.engine());
    std::vector<int64_t> ids, pos;
    for (size_t i : order) {
      ids.push_back(s.seq_ids[i]);
      pos.push_back(s.positions[i]);
    }
    s.seq_ids = ids;
    s.positions = pos;
  }
  return s;
}

// The keys of sequence seq as a dense [1, H, len, D] tensor (host) read out of a host cache
// [pages, page_size, H, D] through the table.
inline Tensor gather_dense(const Schedule& s, const Tensor& cache, int64_t seq, int64_t len) {
  const int64_t heads = cache.size(2), dim = cache.size(3);
  Tensor host = cache.to_host();
  Tensor dense = Tensor::empty({1, heads, len, dim}, cache.dtype());
  const size_t es = cache.itemsize();
  const auto* src = static_cast<const unsigned char*>(host.data());
  auto* dst = static_cast<unsigned char*>(dense.data());
  for (int64_t j = 0; j < len; ++j) {
    const int64_t page = s.tables[static_cast<size_t>(seq)][static_cast<size_t>(j / s.page_size)];
    const int64_t row = j % s.page_size;
    for (int64_t h = 0; h < heads; ++h) {
      std::memcpy(dst + static_cast<size_t>(((h * len) + j) * dim) * es,
                  src + static_cast<size_t>(((page * s.page_size + row) * heads + h) * dim) * es,
                  static_cast<size_t>(dim) * es);
    }
  }
  return dense;
}

// The paged call's definition through dense attention: for each query, rudnn::attention
// over its visible keys stored contiguously ([1, Hq, 1, D] against [1, Hkv, n, D]), on
// `device`. Returns [queries, Hq, Dv] on the host.
inline Tensor dense_equivalent(const Schedule& s, const Tensor& q, const Tensor& k_cache,
                               const Tensor& v_cache, float scale, bool causal, Device device) {
  const int64_t queries = q.size(0), heads_q = q.size(1), dim = q.size(2);
  const int64_t dim_v = v_cache.size(3);
  Tensor qh = q.to_host();
  Tensor out = Tensor::zeros({queries, heads_q, dim_v}, q.dtype());
  std::vector<Tensor> k_dense, v_dense;
  for (size_t seq = 0; seq < s.lengths.size(); ++seq) {
    k_dense.push_back(gather_dense(s, k_cache, static_cast<int64_t>(seq), s.lengths[seq]));
    v_dense.push_back(gather_dense(s, v_cache, static_cast<int64_t>(seq), s.lengths[seq]));
  }
  const size_t es = q.itemsize();
  for (int64_t i = 0; i < queries; ++i) {
    const size_t seq = static_cast<size_t>(s.seq_ids[static_cast<size_t>(i)]);
    const int64_t n = causal ? s.positions[static_cast<size_t>(i)] + 1 : s.lengths[seq];
    Tensor qi = Tensor::empty({1, heads_q, 1, dim}, q.dtype());
    std::memcpy(qi.data(), static_cast<const unsigned char*>(qh.data()) + i * heads_q * dim * es,
                static_cast<size_t>(heads_q * dim) * es);
    Tensor ki = k_dense[seq].slice(2, 0, n).contiguous();
    Tensor vi = v_dense[seq].slice(2, 0, n).contiguous();
    AttentionOptions opts;
    opts.set_scale(scale);
    Tensor oi = attention(qi.to(device), ki.to(device), vi.to(device), opts).out.to_host();
    std::memcpy(static_cast<unsigned char*>(out.data()) + i * heads_q * dim_v * es, oi.data(),
                static_cast<size_t>(heads_q * dim_v) * es);
  }
  return out;
}

}  // namespace rudnn::test::paged_util
