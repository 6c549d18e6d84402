// The paged family on the CPU (the float64 reference): against dense attention over the same
// keys stored contiguously, known values, MLA against attention over concatenated keys, the
// block-table form against the plan form (clamping included), cache writes, plan facts.
#include <cmath>
#include <cstring>
#include <vector>

#include "paged_util.h"
#include "support/test_support.h"

namespace rudnn::test {
namespace {

using paged_util::random_schedule;
using paged_util::Schedule;
using paged_util::ScheduleOptions;

constexpr double kF64Tol = 1e-12;

TEST(PagedCpu, EqualsDenseAttentionOverGatheredKeys) {
  RUDNN_SEEDED_RNG(rng);
  struct Case {
    int64_t page_size, hq, hkv, d, dv;
    bool causal, shared, shuffle;
  };
  const Case cases[] = {
      {1, 4, 2, 8, 8, true, false, false},   {16, 8, 2, 16, 12, true, true, true},
      {64, 3, 3, 5, 7, false, false, true},  {256, 4, 1, 8, 8, true, false, false},
      {16, 4, 4, 32, 32, false, true, false}, {7, 6, 2, 4, 9, true, false, true},
  };
  for (const Case& c : cases) {
    ScheduleOptions o;
    o.max_len = c.page_size == 256 ? 300 : 70;
    o.shared_prefix = c.shared;
    o.shuffle_queries = c.shuffle;
    const Schedule s = random_schedule(rng, c.page_size, o);
    SCOPED_TRACE(s.str() + ", Hq " + std::to_string(c.hq) + " Hkv " + std::to_string(c.hkv) +
                 " D " + std::to_string(c.d) + " Dv " + std::to_string(c.dv) +
                 (c.causal ? " causal" : " full"));
    Tensor q = random_tensor(rng, {s.queries(), c.hq, c.d}, DType::f64);
    Tensor k = random_tensor(rng, {s.pages, c.page_size, c.hkv, c.d}, DType::f64);
    Tensor v = random_tensor(rng, {s.pages, c.page_size, c.hkv, c.dv}, DType::f64);
    const float scale = 0.37f;
    const auto plan = paged::DevicePlan::upload(s.host(), q);
    Tensor got = plan.attention(q, k, v, scale, c.causal);
    Tensor want = paged_util::dense_equivalent(s, q, k, v, scale, c.causal, Device::cpu());
    EXPECT_TRUE(all_close(got, want, kF64Tol));
  }
}

TEST(PagedCpu, KnownValues) {
  // One sequence of two keys in page 1 (page 0 unused); query 0 at position 0 sees key 0
  // only (causal), query 1 sees both; equal keys give the mean of the values.
  const paged::HostPlan host(2, 2, {{1}}, {2}, {0, 0}, {0, 1});
  Tensor q = host_tensor({1, 2, 3, 4}, {2, 1, 2}, DType::f64);
  Tensor k = host_tensor({9, 9, 9, 9, 0.5, 0.5, 0.5, 0.5}, {2, 2, 1, 2}, DType::f64);
  Tensor v = host_tensor({7, 7, 7, 7, 1, 10, 3, 20}, {2, 2, 1, 2}, DType::f64);
  const auto plan = paged::DevicePlan::upload(host, q);
  Tensor out = plan.attention(q, k, v, 1.0f, true);
  EXPECT_TRUE(all_close(out, host_tensor({1, 10, 2, 15}, {2, 1, 2}, DType::f64), kF64Tol));
  Tensor full = plan.attention(q, k, v, 1.0f, false);
  EXPECT_TRUE(all_close(full, host_tensor({2, 15, 2, 15}, {2, 1, 2}, DType::f64), kF64Tol));
}

// MLA is attention with keys [latent | kp], queries [q | qp] and values latent.
TEST(PagedCpu, MlaEqualsAttentionOverConcatenatedKeys) {
  RUDNN_SEEDED_RNG(rng);
  ScheduleOptions o;
  o.shuffle_queries = true;
  const Schedule s = random_schedule(rng, 16, o);
  SCOPED_TRACE(s.str());
  const int64_t heads = 5, rank = 12, pos = 4;
  Tensor q = random_tensor(rng, {s.queries(), heads, rank}, DType::f64);
  Tensor qp = random_tensor(rng, {s.queries(), heads, pos}, DType::f64);
  Tensor latent = random_tensor(rng, {s.pages, 16, 1, rank}, DType::f64);
  Tensor kp = random_tensor(rng, {s.pages, 16, 1, pos}, DType::f64);
  Tensor qcat = Tensor::empty({s.queries(), heads, rank + pos}, DType::f64);
  qcat.slice(2, 0, rank).copy_from(q);
  qcat.slice(2, rank, rank + pos).copy_from(qp);
  Tensor kcat = Tensor::empty({s.pages, 16, 1, rank + pos}, DType::f64);
  kcat.slice(3, 0, rank).copy_from(latent);
  kcat.slice(3, rank, rank + pos).copy_from(kp);
  const auto plan = paged::DevicePlan::upload(s.host(), q);
  for (bool causal : {true, false}) {
    Tensor got = plan.mla(q, qp, latent, kp, 0.2f, causal);
    Tensor want = plan.attention(qcat, kcat, latent, 0.2f, causal);
    EXPECT_TRUE(all_close(got, want, kF64Tol)) << (causal ? "causal" : "full");
  }
}

// A block-table cache [blocks, H, block_size, D] from a plan cache [pages, page_size, H, D].
Tensor to_block_layout(const Tensor& cache) { return cache.transpose(1, 2).contiguous(); }

// Queries of the block form: the last L positions of each sequence, as [B, Hq, L, D], and
// the equivalent plan-form schedule (every sequence at least L long).
TEST(PagedCpu, BlockTableFormMatchesThePlanForm) {
  RUDNN_SEEDED_RNG(rng);
  const int64_t batch = 3, len_q = 3, heads_q = 4, heads_kv = 2, dim = 8, dim_v = 6;
  for (int64_t page_size : {1, 4, 16}) {
    SCOPED_TRACE("block_size " + std::to_string(page_size));
    ScheduleOptions o;
    o.sequences = batch;
    o.empty_share = 0.0;
    o.max_len = 40;
    Schedule s = random_schedule(rng, page_size, o);
    for (auto& len : s.lengths) len = std::max<int64_t>(len, len_q);
    for (size_t b = 0; b < s.tables.size(); ++b) {
      while (static_cast<int64_t>(s.tables[b].size()) * page_size < s.lengths[b])
        s.tables[b].push_back(s.tables[b].empty() ? 0 : s.tables[b].back());
    }
    s.seq_ids.clear();
    s.positions.clear();
    for (int64_t b = 0; b < batch; ++b)
      for (int64_t l = 0; l < len_q; ++l) {
        s.seq_ids.push_back(b);
        s.positions.push_back(s.lengths[static_cast<size_t>(b)] - len_q + l);
      }
    int64_t max_blocks = 0;
    for (const auto& t : s.tables) max_blocks = std::max<int64_t>(max_blocks, t.size());
    std::vector<int32_t> table(static_cast<size_t>(batch * max_blocks), 0), lens;
    for (int64_t b = 0; b < batch; ++b) {
      for (size_t k = 0; k < s.tables[static_cast<size_t>(b)].size(); ++k)
        table[static_cast<size_t>(b * max_blocks) + k] =
            static_cast<int32_t>(s.tables[static_cast<size_t>(b)][k]);
      lens.push_back(static_cast<int32_t>(s.lengths[static_cast<size_t>(b)]));
    }
    Tensor q_flat = random_tensor(rng, {batch * len_q, heads_q, dim}, DType::f64);
    Tensor k = random_tensor(rng, {s.pages, page_size, heads_kv, dim}, DType::f64);
    Tensor v = random_tensor(rng, {s.pages, page_size, heads_kv, dim_v}, DType::f64);
    const auto plan = paged::DevicePlan::upload(s.host(), q_flat);
    Tensor want = plan.attention(q_flat, k, v, 0.5f, true);
    Tensor q4 = q_flat.view({batch, len_q, heads_q, dim}).transpose(1, 2);
    Tensor got = paged::paged_attention(q4, to_block_layout(k), to_block_layout(v),
                                        Tensor::from_host(table, {batch, max_blocks}),
                                        Tensor::from_host(lens, {batch}), 0.5f);
    ASSERT_EQ(got.shape(), (Shape{batch, heads_q, len_q, dim_v}));
    EXPECT_TRUE(all_close(got.transpose(1, 2).contiguous().view({batch * len_q, heads_q, dim_v}),
                          want, kF64Tol));
  }
}

// Out-of-range block ids read the clamped block; lengths past the capacity are the capacity;
// lengths below L leave the early queries without keys (zeros).
TEST(PagedCpu, BlockTableFormClampsIdsAndLengths) {
  RUDNN_SEEDED_RNG(rng);
  const int64_t blocks = 4, bs = 2, heads = 1, dim = 3, len_q = 2;
  Tensor k = random_tensor(rng, {blocks, heads, bs, dim}, DType::f64);
  Tensor v = random_tensor(rng, {blocks, heads, bs, dim}, DType::f64);
  Tensor q = random_tensor(rng, {3, heads, len_q, dim}, DType::f64);
  // Sequence 0: ids {-5, 99} -> {0, 3}, length 100 -> 4. Sequence 1: ids {2, 1}, length 1
  // (query 0 sees nothing). Sequence 2: length -3 -> 0 (both queries see nothing).
  Tensor tables = Tensor::from_host(std::vector<int64_t>{-5, 99, 2, 1, 0, 0}, {3, 2});
  Tensor lengths = Tensor::from_host(std::vector<int64_t>{100, 1, -3}, {3});
  Tensor got = paged::paged_attention(q, k, v, tables, lengths, 1.0f);
  // The same through a valid block table.
  Tensor tables_ok = Tensor::from_host(std::vector<int32_t>{0, 3, 2, 1, 0, 0}, {3, 2});
  Tensor lengths_ok = Tensor::from_host(std::vector<int32_t>{4, 1, 0}, {3});
  Tensor want = paged::paged_attention(q, k, v, tables_ok, lengths_ok, 1.0f);
  EXPECT_TRUE(bit_equal(got, want));
  std::vector<double> out = to_doubles(got);
  // Row (b = 1, l = 0) and both rows of b = 2 are zeros; (b = 1, l = 1) sees key 0 only,
  // block 2 row 0: its value row.
  for (int64_t d = 0; d < dim; ++d) {
    EXPECT_EQ(out[static_cast<size_t>((1 * len_q + 0) * dim + d)], 0.0);
    EXPECT_EQ(out[static_cast<size_t>((2 * len_q + 0) * dim + d)], 0.0);
    EXPECT_EQ(out[static_cast<size_t>((2 * len_q + 1) * dim + d)], 0.0);
    const double v_row = to_doubles(v)[static_cast<size_t>((2 * bs + 0) * dim + d)];
    EXPECT_NEAR(out[static_cast<size_t>((1 * len_q + 1) * dim + d)], v_row, 1e-12);
  }
}

// append copies a cache whose storage another handle shares (issue 13: a shared allocation
// is copied before mutation): the other handle keeps the old contents, the result has the
// writes; a cache held alone is written in place.
TEST(PagedCpu, AppendCopiesASharedCacheBeforeWriting) {
  RUDNN_SEEDED_RNG(rng);
  const Schedule s = random_schedule(rng, 4, ScheduleOptions{});
  SCOPED_TRACE(s.str());
  if (s.queries() == 0) GTEST_SKIP() << "the schedule drew no query";
  const int64_t heads = 2, dim = 5;
  Tensor kc = random_tensor(rng, {s.pages, 4, heads, dim}, DType::f32);
  Tensor vc = random_tensor(rng, {s.pages, 4, heads, dim}, DType::f32);
  Tensor k = random_tensor(rng, {s.queries(), heads, dim}, DType::f32);
  Tensor v = random_tensor(rng, {s.queries(), heads, dim}, DType::f32);
  const Tensor kc_view = kc.slice(0, 0, 1);  // a second handle on kc's storage
  const std::vector<double> kc_before = to_doubles(kc), vc_before = to_doubles(vc);
  const auto plan = paged::DevicePlan::upload(s.host(), k);
  const auto kept = plan.append(k, v, kc, vc);
  EXPECT_NE(kept.key_cache.data(), kc.data()) << "a shared key cache was written in place";
  EXPECT_EQ(to_doubles(kc), kc_before) << "the shared key cache changed";
  EXPECT_EQ(kept.value_cache.data(), vc.data()) << "a cache held alone was copied";
  EXPECT_NE(to_doubles(vc), vc_before) << "the value cache held alone was not written";
  // The copy holds the writes: the same bits as appending into an unshared clone.
  Tensor clone = kc.to(Device::cpu());
  plan.append(k, v, clone, Tensor::zeros(vc.shape(), DType::f32));
  EXPECT_EQ(to_doubles(kept.key_cache), to_doubles(clone));
}

TEST(PagedCpu, AppendWritesEachQuerysSlot) {
  RUDNN_SEEDED_RNG(rng);
  ScheduleOptions o;
  o.shuffle_queries = true;
  const Schedule s = random_schedule(rng, 4, o);
  SCOPED_TRACE(s.str());
  const int64_t heads = 2, dim = 5, dim_v = 3;
  Tensor kc = random_tensor(rng, {s.pages, 4, heads, dim}, DType::f32);
  Tensor vc = random_tensor(rng, {s.pages, 4, heads, dim_v}, DType::f32);
  Tensor k = random_tensor(rng, {s.queries(), heads, dim}, DType::f32);
  Tensor v = random_tensor(rng, {s.queries(), heads, dim_v}, DType::f32);
  Tensor kc0 = kc.contiguous().to(Device::cpu());
  const auto plan = paged::DevicePlan::upload(s.host(), k);
  const auto kept = plan.append(k, v, kc, vc);
  EXPECT_EQ(kept.key_cache.data(), kc.data());
  std::vector<double> kcv = to_doubles(kc), kc0v = to_doubles(kc0), kv = to_doubles(k);
  std::vector<double> vcv = to_doubles(vc), vv = to_doubles(v);
  std::vector<bool> written(static_cast<size_t>(s.pages * 4), false);
  for (int64_t i = 0; i < s.queries(); ++i) {
    const size_t seq = static_cast<size_t>(s.seq_ids[static_cast<size_t>(i)]);
    const int64_t pos = s.positions[static_cast<size_t>(i)];
    const int64_t slot = s.tables[seq][static_cast<size_t>(pos / 4)] * 4 + pos % 4;
    written[static_cast<size_t>(slot)] = true;
    for (int64_t e = 0; e < heads * dim; ++e)
      EXPECT_EQ(kcv[static_cast<size_t>(slot * heads * dim + e)], kv[static_cast<size_t>(i * heads * dim + e)]);
    for (int64_t e = 0; e < heads * dim_v; ++e)
      EXPECT_EQ(vcv[static_cast<size_t>(slot * heads * dim_v + e)], vv[static_cast<size_t>(i * heads * dim_v + e)]);
  }
  for (int64_t slot = 0; slot < s.pages * 4; ++slot) {
    if (written[static_cast<size_t>(slot)]) continue;
    for (int64_t e = 0; e < heads * dim; ++e)
      EXPECT_EQ(kcv[static_cast<size_t>(slot * heads * dim + e)], kc0v[static_cast<size_t>(slot * heads * dim + e)]);
  }
}

TEST(PagedCpu, PagedWriteSkipsOutOfRangeSlots) {
  RUDNN_SEEDED_RNG(rng);
  const int64_t blocks = 3, heads = 2, bs = 4, dim = 3;
  Tensor cache = random_tensor(rng, {blocks, heads, bs, dim}, DType::bf16);
  Tensor before = cache.contiguous().to(Device::cpu());
  Tensor fresh = random_tensor(rng, {4, heads, dim}, DType::bf16);
  Tensor slots = Tensor::from_host(std::vector<int32_t>{5, -1, 12, 0}, {4});
  Tensor out = paged::paged_write(cache, fresh, slots);
  EXPECT_TRUE(bit_equal(cache, before));  // the functional form leaves its input alone
  std::vector<double> o = to_doubles(out), b = to_doubles(before), f = to_doubles(fresh);
  auto at = [&](int64_t blk, int64_t h, int64_t row, int64_t d) {
    return static_cast<size_t>(((blk * heads + h) * bs + row) * dim + d);
  };
  for (int64_t blk = 0; blk < blocks; ++blk)
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t row = 0; row < bs; ++row)
        for (int64_t d = 0; d < dim; ++d) {
          const int64_t slot = blk * bs + row;
          double want = b[at(blk, h, row, d)];
          if (slot == 5) want = f[static_cast<size_t>((0 * heads + h) * dim + d)];
          if (slot == 0) want = f[static_cast<size_t>((3 * heads + h) * dim + d)];
          EXPECT_EQ(o[at(blk, h, row, d)], want);
        }
  paged::paged_write_(cache, fresh, slots);
  EXPECT_TRUE(bit_equal(cache, out));
}

TEST(PagedCpu, PlanFacts) {
  // Sequence 1 shares page 0 with sequence 0 (a shared prefix); its query at position 1
  // writes the slot sequence 0's query at position 1 writes.
  const paged::HostPlan host(2, 3, {{0, 1}, {0, 2}}, {4, 3}, {0, 0, 1, 1}, {1, 3, 1, 2});
  EXPECT_EQ(host.max_keys(true), 4);
  EXPECT_EQ(host.max_keys(false), 4);
  EXPECT_TRUE(host.duplicate_slots());
  EXPECT_EQ(host.items(), 2);
  EXPECT_EQ(host.max_item_queries(), 2);
  const paged::HostPlan other(2, 3, {{0, 1}, {2}}, {4, 1}, {1, 0}, {0, 2});
  EXPECT_FALSE(other.duplicate_slots());
  EXPECT_EQ(other.max_keys(true), 3);
  EXPECT_EQ(other.max_keys(false), 4);
  Tensor q = Tensor::zeros({2, 1, 1}, DType::f32);
  const auto plan = paged::DevicePlan::upload(other, q);
  // 3 per query, lengths 2, offsets 3, tables 3, items 2 x 3.
  EXPECT_EQ(plan.bytes(), (3 * 2 + 2 + 3 + 3 + 6) * sizeof(int32_t));
  // Long runs are cut into items of kItemQueries.
  std::vector<int64_t> ids(20, 0), pos(20);
  for (int64_t i = 0; i < 20; ++i) pos[static_cast<size_t>(i)] = i;
  const paged::HostPlan runs(32, 1, {{0}}, {20}, ids, pos);
  EXPECT_EQ(runs.items(), 3);
  EXPECT_EQ(runs.max_item_queries(), paged::kItemQueries);
}

TEST(PagedCpu, EmptyScheduleGivesEmptyOutput) {
  const paged::HostPlan host(4, 2, {{}, {1}}, {0, 3}, {}, {});
  Tensor q = Tensor::zeros({0, 2, 4}, DType::f32);
  Tensor k = Tensor::zeros({2, 4, 1, 4}, DType::f32);
  const auto plan = paged::DevicePlan::upload(host, q);
  Tensor out = plan.attention(q, k, k, 1.0f, true);
  EXPECT_EQ(out.shape(), (Shape{0, 2, 4}));
}

}  // namespace
}  // namespace rudnn::test
