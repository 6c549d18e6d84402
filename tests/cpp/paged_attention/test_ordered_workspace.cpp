// The ordered backward's workspace on the CPU (spec 000 §11): defaults and setters, the
// environment switches, compaction page counts and the retained index, the 64 MiB budget,
// reuse rules, and the _ordered_into forms equal bit for bit to the _selected_into forms.
#include <cstdlib>
#include <set>
#include <string>
#include <vector>

#include "paged_util.h"
#include "support/test_support.h"

namespace rudnn::test {
namespace {

using paged_util::random_schedule;
using paged_util::Schedule;
using paged_util::ScheduleOptions;

constexpr const char* kRowsEnv = "RUDA_PAGED_ORDERED_CACHE_ROWS";
constexpr const char* kCompactEnv = "RUDA_PAGED_ORDERED_COMPACT_HISTORY";

// Unsets both switches for a scope and restores what the process had, so that neither the
// caller's environment nor test order changes a result.
class EnvScope {
 public:
  EnvScope() {
    for (int i = 0; i < 2; ++i) {
      const char* v = std::getenv(kNames[i]);
      had_[i] = v != nullptr;
      if (v) saved_[i] = v;
      unsetenv(kNames[i]);
    }
  }
  ~EnvScope() {
    for (int i = 0; i < 2; ++i) {
      if (had_[i])
        setenv(kNames[i], saved_[i].c_str(), 1);
      else
        unsetenv(kNames[i]);
    }
  }

 private:
  static constexpr const char* kNames[2] = {kRowsEnv, kCompactEnv};
  bool had_[2] = {false, false};
  std::string saved_[2];
};

// Page size 3; sequence 0 a prefill chunk, sequence 1 a decode query sharing sequence 0's
// first page, sequence 2 empty, sequence 3 a prefill with unused table capacity (page 3),
// page 5 in no table, and sequence 4 holds keys (page 7) but has no query.
Schedule fixed_schedule() {
  Schedule s;
  s.page_size = 3;
  s.pages = 8;
  s.tables = {{2, 0, 4}, {2, 6}, {}, {1, 3}, {7}};
  s.lengths = {7, 5, 0, 2, 3};
  s.seq_ids = {0, 1, 3, 0, 3, 0};
  s.positions = {4, 4, 0, 5, 1, 6};
  return s;
}

// Independent count of the active pages: inside the lengths of sequences with queries.
std::set<int64_t> active_pages(const Schedule& s) {
  std::set<int64_t> seqs(s.seq_ids.begin(), s.seq_ids.end()), pages;
  for (int64_t seq : seqs) {
    const auto& t = s.tables[static_cast<size_t>(seq)];
    const int64_t len = s.lengths[static_cast<size_t>(seq)];
    for (int64_t k = 0; k * s.page_size < len; ++k) pages.insert(t[static_cast<size_t>(k)]);
  }
  return pages;
}

TEST(PagedOrderedWorkspace, DefaultsAndSetters) {
  EnvScope env;
  const Schedule s = fixed_schedule();
  const Tensor q = Tensor::zeros({6, 2, 4}, DType::f32);
  const auto plan = paged::DevicePlan::upload(s.host(), q);
  paged::OrderedBackwardWorkspace ws(plan, q);
  EXPECT_TRUE(ws.query_pruning());
  EXPECT_FALSE(ws.history_row_cache());
  EXPECT_FALSE(ws.history_compaction());
  EXPECT_FALSE(ws.history_compaction_pages().has_value());
  EXPECT_EQ(ws.bytes(), 0u);
  EXPECT_FALSE(ws.storage().defined());
  EXPECT_EQ(ws.queries(), 6);
  EXPECT_EQ(ws.heads(), 2);
  EXPECT_EQ(ws.device(), Device::cpu());
  EXPECT_TRUE(ws.stream() == plan.stream());
  EXPECT_EQ(ws.pages(), 8);
  EXPECT_EQ(ws.page_size(), 3);
  ws.set_query_pruning(false);
  EXPECT_FALSE(ws.query_pruning());
  ws.set_query_pruning(true);
  EXPECT_TRUE(ws.query_pruning());
  ws.set_history_row_cache(true);
  EXPECT_TRUE(ws.history_row_cache());
  ws.set_history_row_cache(false);
  EXPECT_FALSE(ws.history_row_cache());
  // Compaction: (active, inactive) = ({0, 1, 2, 4, 6}, {3, 5, 7}).
  ws.set_history_compaction(true);
  EXPECT_TRUE(ws.history_compaction());
  ASSERT_TRUE(ws.history_compaction_pages().has_value());
  EXPECT_EQ(*ws.history_compaction_pages(), (std::pair<int64_t, int64_t>{5, 3}));
  EXPECT_EQ(ws.bytes(), 8u * 4u);
  ASSERT_TRUE(ws.storage().defined());
  EXPECT_EQ(ws.storage().dtype(), DType::i32);
  const std::vector<int32_t> index(ws.storage().data_as<int32_t>(),
                                   ws.storage().data_as<int32_t>() + 8);
  EXPECT_EQ(index, (std::vector<int32_t>{0, 1, 2, -1, 3, -1, 4, -1}));
  const void* storage = ws.storage().data();
  // Other options leave compaction as it is; disabling keeps the index, re-enabling reuses it.
  ws.set_query_pruning(false);
  EXPECT_EQ(*ws.history_compaction_pages(), (std::pair<int64_t, int64_t>{5, 3}));
  ws.set_history_compaction(false);
  EXPECT_FALSE(ws.history_compaction());
  EXPECT_FALSE(ws.history_compaction_pages().has_value());
  EXPECT_EQ(ws.bytes(), 8u * 4u) << "disabling retains the index";
  ws.set_history_compaction(true);
  EXPECT_EQ(ws.storage().data(), storage) << "a later enable reuses the index";
  EXPECT_EQ(ws.bytes(), 8u * 4u);
  EXPECT_EQ(*ws.history_compaction_pages(), (std::pair<int64_t, int64_t>{5, 3}));
}

// No queries, no pages: an empty index, every count zero, and the backward writes nothing.
TEST(PagedOrderedWorkspace, EmptyPlan) {
  EnvScope env;
  const Tensor q = Tensor::zeros({0, 2, 4}, DType::f32);
  const auto plan = paged::DevicePlan::upload(paged::HostPlan(4, 0, {{}}, {0}, {}, {}), q);
  paged::OrderedBackwardWorkspace ws(plan, q);
  ws.set_history_compaction(true);
  EXPECT_EQ(*ws.history_compaction_pages(), (std::pair<int64_t, int64_t>{0, 0}));
  EXPECT_EQ(ws.bytes(), 0u);
  const Tensor k = Tensor::zeros({0, 4, 1, 4}, DType::f32);
  Tensor dq = Tensor::zeros({0, 2, 4}, DType::f32), dk = Tensor::zeros({0, 4, 1, 4}, DType::f32);
  EXPECT_NO_THROW(plan.attention_backward_ordered_into(ws, {dq, dk, {}}, q, k, k, q, 1.0f, true));
}

TEST(PagedOrderedWorkspace, CompactionPagesOfRandomSchedules) {
  EnvScope env;
  RUDNN_SEEDED_RNG(rng);
  for (int trial = 0; trial < 20; ++trial) {
    ScheduleOptions o;
    o.sequences = 5;
    o.max_len = 40;
    o.shared_prefix = trial % 2 == 0;
    o.shuffle_queries = trial % 3 == 0;
    const Schedule s = random_schedule(rng, 1 + trial % 5, o);
    SCOPED_TRACE(s.str());
    const Tensor q = Tensor::zeros({s.queries(), 1, 2}, DType::f32);
    const auto plan = paged::DevicePlan::upload(s.host(), q);
    paged::OrderedBackwardWorkspace ws(plan, q);
    ws.set_history_compaction(true);
    const auto active = active_pages(s);
    const auto n = static_cast<int64_t>(active.size());
    EXPECT_EQ(*ws.history_compaction_pages(), (std::pair<int64_t, int64_t>{n, s.pages - n}));
    EXPECT_EQ(ws.bytes(), static_cast<size_t>(s.pages) * 4u);
    const int32_t* index = ws.storage().data_as<int32_t>();
    int32_t next = 0;
    for (int64_t p = 0; p < s.pages; ++p)
      EXPECT_EQ(index[p], active.count(p) ? next++ : -1) << "page " << p;
  }
}

TEST(PagedOrderedWorkspace, EnvironmentSwitches) {
  EnvScope env;
  const Schedule s = fixed_schedule();
  const Tensor q = Tensor::zeros({6, 2, 4}, DType::f32);
  const auto plan = paged::DevicePlan::upload(s.host(), q);
  for (const char* name : {kRowsEnv, kCompactEnv}) {
    const bool rows = std::string(name) == kRowsEnv;
    SCOPED_TRACE(name);
    auto on = [&](const paged::OrderedBackwardWorkspace& w) {
      return rows ? w.history_row_cache() : w.history_compaction();
    };
    setenv(name, "0", 1);
    EXPECT_FALSE(on(paged::OrderedBackwardWorkspace(plan, q)));
    setenv(name, "1", 1);
    paged::OrderedBackwardWorkspace ws(plan, q);
    EXPECT_TRUE(on(ws));
    if (!rows) {
      EXPECT_EQ(*ws.history_compaction_pages(), (std::pair<int64_t, int64_t>{5, 3}));
      EXPECT_EQ(ws.bytes(), 32u);
    } else {
      EXPECT_FALSE(ws.history_compaction());
    }
    EXPECT_TRUE(ws.query_pruning());
    // The other switch stays off; a changed environment leaves the workspace as it is.
    unsetenv(name);
    EXPECT_TRUE(on(ws));
    EXPECT_FALSE(on(paged::OrderedBackwardWorkspace(plan, q)));
    for (const char* bad : {"", "2", "-1", "01", "1 ", " 1", "true", "on", "yes", "TRUE", "0x1"}) {
      setenv(name, bad, 1);
      EXPECT_TRUE(throws_error([&] { paged::OrderedBackwardWorkspace(plan, q); },
                               ErrorCode::InvalidArgument,
                               {"paged_attention::OrderedBackwardWorkspace", name,
                                std::string("is \"") + bad + "\"", "\"0\"", "\"1\""}))
          << "value '" << bad << "'";
    }
    unsetenv(name);
  }
}

TEST(PagedOrderedWorkspace, BudgetErrorLeavesTheModeIntact) {
  EnvScope env;
  // 2^24 + 1 physical pages: an index of 64 MiB + 4 bytes (the caches are never built: the
  // plan only records the count).
  const int64_t over = (int64_t{1} << 24) + 1;
  const Tensor q = Tensor::zeros({1, 1, 2}, DType::f32);
  const auto big = paged::DevicePlan::upload(paged::HostPlan(1, over, {{0}}, {1}, {0}, {0}), q);
  paged::OrderedBackwardWorkspace ws(big, q);
  ws.set_history_row_cache(true);
  EXPECT_TRUE(throws_error([&] { ws.set_history_compaction(true); }, ErrorCode::InvalidArgument,
                           {"paged_attention::OrderedBackwardWorkspace::set_history_compaction",
                            "16777217 physical pages", "64 MiB", "compaction stays off"}));
  EXPECT_FALSE(ws.history_compaction());
  EXPECT_FALSE(ws.history_compaction_pages().has_value());
  EXPECT_EQ(ws.bytes(), 0u);
  EXPECT_FALSE(ws.storage().defined());
  EXPECT_TRUE(ws.history_row_cache());
  EXPECT_TRUE(ws.query_pruning());
  ws.set_history_compaction(false);  // disabling never fails
  EXPECT_FALSE(ws.history_compaction());
  // Through the environment, construction reports the same error.
  setenv(kCompactEnv, "1", 1);
  EXPECT_TRUE(throws_error([&] { paged::OrderedBackwardWorkspace(big, q); },
                           ErrorCode::InvalidArgument, {"16777217 physical pages", "64 MiB"}));
  unsetenv(kCompactEnv);
  // Exactly 64 MiB fits.
  const int64_t fits = int64_t{1} << 24;
  const auto edge = paged::DevicePlan::upload(paged::HostPlan(1, fits, {{0}}, {1}, {0}, {0}), q);
  paged::OrderedBackwardWorkspace ok(edge, q);
  ok.set_history_compaction(true);
  EXPECT_EQ(ok.bytes(), paged::kWorkspaceBudget);
  EXPECT_EQ(*ok.history_compaction_pages(), (std::pair<int64_t, int64_t>{1, fits - 1}));
}

TEST(PagedOrderedWorkspace, ConstructionAndReuseErrors) {
  EnvScope env;
  const Schedule s = fixed_schedule();
  const Tensor q = Tensor::zeros({6, 2, 4}, DType::f32);
  const auto plan = paged::DevicePlan::upload(s.host(), q);
  const char* ctor = "paged_attention::OrderedBackwardWorkspace";
  EXPECT_TRUE(throws_error([&] { paged::OrderedBackwardWorkspace(paged::DevicePlan(), q); },
                           ErrorCode::InvalidArgument, {"undefined"}));
  EXPECT_TRUE(throws_error(
      [&] {
        paged::OrderedBackwardWorkspace(plan, Tensor::zeros({5, 2, 4}, DType::f32));
      },
      ErrorCode::InvalidArgument, {ctor, "[5, 2, 4]", "6 queries"}));
  EXPECT_TRUE(throws_error(
      [&] {
        paged::OrderedBackwardWorkspace(plan, Tensor::zeros({6, 8}, DType::f32));
      },
      ErrorCode::InvalidArgument, {ctor, "[6, 8]"}));

  paged::OrderedBackwardWorkspace ws(plan, q);
  ws.set_history_compaction(true);
  const Tensor k = Tensor::zeros({8, 3, 1, 4}, DType::f32),
               v = Tensor::zeros({8, 3, 1, 4}, DType::f32);
  const char* op = "paged_attention::DevicePlan::attention_backward_ordered_into";
  // Another head count.
  {
    const Tensor q3 = Tensor::zeros({6, 3, 4}, DType::f32),
                 go3 = Tensor::zeros({6, 3, 4}, DType::f32);
    Tensor dq = Tensor::zeros({6, 3, 4}, DType::f32);
    EXPECT_TRUE(throws_error(
        [&] {
          plan.attention_backward_ordered_into(ws, {dq, {}, {}}, q3, k, v, go3, 1.0f, true);
        },
        ErrorCode::InvalidArgument, {op, "workspace", "(queries, heads) = (6, 2)", "(6, 3)"}));
    const Tensor lat = Tensor::zeros({8, 3, 1, 4}, DType::f32),
                 kp = Tensor::zeros({8, 3, 1, 2}, DType::f32);
    EXPECT_TRUE(throws_error(
        [&] {
          plan.mla_backward_ordered_into(ws, {dq, {}, {}, {}}, q3,
                                         Tensor::zeros({6, 3, 2}, DType::f32), lat, kp, go3, 1.0f,
                                         true);
        },
        ErrorCode::InvalidArgument,
        {"paged_attention::DevicePlan::mla_backward_ordered_into", "(queries, heads)"}));
  }
  // Another query count (another plan).
  {
    Schedule s2 = s;
    s2.seq_ids.pop_back();
    s2.positions.pop_back();
    const Tensor q5 = Tensor::zeros({5, 2, 4}, DType::f32),
                 go5 = Tensor::zeros({5, 2, 4}, DType::f32);
    const auto plan5 = paged::DevicePlan::upload(s2.host(), q5);
    EXPECT_TRUE(throws_error(
        [&] {
          plan5.attention_backward_ordered_into(ws, {Tensor::zeros({5, 2, 4}, DType::f32), {}, {}},
                                                q5, k, v, go5, 1.0f, true);
        },
        ErrorCode::InvalidArgument, {op, "(queries, heads) = (6, 2)", "(5, 2)"}));
  }
  // Same counts, other scheduling metadata: positions, lengths, tables, page count.
  {
    std::vector<Schedule> others(4, s);
    others[0].positions[1] = 3;
    others[1].lengths[0] = 8;
    others[2].tables[4] = {5};
    others[3].pages = 9;
    for (const Schedule& o : others) {
      const auto p2 = paged::DevicePlan::upload(o.host(), q);
      const Tensor k2 = Tensor::zeros({o.pages, 3, 1, 4}, DType::f32);
      Tensor dq = poisoned({6, 2, 4}, DType::f32, Device::cpu());
      const auto before = bytes_of(dq);
      EXPECT_TRUE(throws_error(
          [&] {
            p2.attention_backward_ordered_into(ws, {dq, {}, {}}, q, k2, k2,
                                               Tensor::zeros({6, 2, 4}, DType::f32), 1.0f, true);
          },
          ErrorCode::InvalidArgument, {op, "another plan's scheduling metadata"}));
      EXPECT_EQ(bytes_of(dq), before) << "an error wrote an output";
    }
  }
  // The same schedule uploaded again is compatible.
  {
    const auto again = paged::DevicePlan::upload(s.host(), q);
    Tensor dq = Tensor::zeros({6, 2, 4}, DType::f32);
    EXPECT_NO_THROW(again.attention_backward_ordered_into(
        ws, {dq, {}, {}}, q, k, v, Tensor::zeros({6, 2, 4}, DType::f32), 1.0f, true));
  }
  // Outputs must not overlap the workspace's storage (the compaction index: 8 int32).
  {
    const Tensor q1 = Tensor::zeros({6, 1, 1}, DType::f32);
    const auto p1 = paged::DevicePlan::upload(s.host(), q1);
    paged::OrderedBackwardWorkspace w1(p1, q1);
    w1.set_history_compaction(true);
    const Tensor alias = Tensor::from_blob(const_cast<void*>(w1.storage().data()), 32, {6, 1, 1},
                                           {1, 1, 1}, 0, DType::f32, Device::cpu());
    const Tensor k1 = Tensor::zeros({8, 3, 1, 1}, DType::f32);
    EXPECT_TRUE(throws_error(
        [&] {
          p1.attention_backward_ordered_into(w1, {alias, {}, {}}, q1, k1, k1,
                                             Tensor::zeros({6, 1, 1}, DType::f32), 1.0f, true);
        },
        ErrorCode::InvalidArgument, {op, "dq overlaps workspace"}));
    const Tensor kp1 = Tensor::zeros({8, 3, 1, 1}, DType::f32);
    EXPECT_TRUE(throws_error(
        [&] {
          p1.mla_backward_ordered_into(w1, {alias, {}, {}, {}}, q1, q1, k1, kp1,
                                       Tensor::zeros({6, 1, 1}, DType::f32), 1.0f, true);
        },
        ErrorCode::InvalidArgument, {"dq overlaps workspace"}));
    const std::vector<int32_t> index(w1.storage().data_as<int32_t>(),
                                     w1.storage().data_as<int32_t>() + 8);
    EXPECT_EQ(index, (std::vector<int32_t>{0, 1, 2, -1, 3, -1, 4, -1})) << "the index was written";
  }
  // The _selected_into rules still apply (and come with the same op name).
  EXPECT_TRUE(throws_error(
      [&] {
        plan.attention_backward_ordered_into(ws, {q, {}, {}}, q, k, v,
                                             Tensor::zeros({6, 2, 4}, DType::f32), 1.0f, true);
      },
      ErrorCode::InvalidArgument, {op, "dq overlaps q"}));
  EXPECT_TRUE(throws_error(
      [&] {
        plan.attention_backward_ordered_into(ws, {}, q, k, v, Tensor::zeros({6, 2, 4}, DType::f32),
                                             -1.0f, true);
      },
      ErrorCode::InvalidArgument, {op, "scale"}));
}

// Every option combination gives the _selected_into result bit for bit, for every subset of
// outputs; inputs unchanged; outputs poisoned first.
TEST(PagedOrderedWorkspace, EqualsSelectedIntoBitForBit) {
  EnvScope env;
  RUDNN_SEEDED_RNG(rng);
  int trial = 0;
  for (DType dt : {DType::f64, DType::f32, DType::bf16}) {
    for (bool causal : {true, false}) {
      ScheduleOptions o;
      o.sequences = 4;
      o.max_len = 20;
      o.shared_prefix = true;
      o.shuffle_queries = ++trial % 2 == 0;
      const int64_t ps = 1 + trial % 4;
      const Schedule s = trial == 1 ? fixed_schedule() : random_schedule(rng, ps, o);
      const int64_t page = s.page_size;
      SCOPED_TRACE(s.str() + (causal ? " causal " : " full ") + dtype_name(dt));
      const int64_t hq = 4, hkv = 2, d = 5, dv = 3;
      const Tensor q = random_tensor(rng, {s.queries(), hq, d}, dt);
      const Tensor k = random_tensor(rng, {s.pages, page, hkv, d}, dt);
      const Tensor v = random_tensor(rng, {s.pages, page, hkv, dv}, dt);
      const Tensor go = random_tensor(rng, {s.queries(), hq, dv}, dt);
      const auto plan = paged::DevicePlan::upload(s.host(), q);
      const auto in_before = std::vector{bytes_of(q), bytes_of(k), bytes_of(v), bytes_of(go)};
      const float scale = 0.37f;
      paged::AttentionBackward want{poisoned(q.shape(), dt, Device::cpu()),
                                    poisoned(k.shape(), dt, Device::cpu()),
                                    poisoned(v.shape(), dt, Device::cpu())};
      plan.attention_backward_selected_into(want, q, k, v, go, scale, causal);
      paged::OrderedBackwardWorkspace ws(plan, q);
      for (int options = 0; options < 8; ++options) {
        ws.set_query_pruning(options & 1);
        ws.set_history_row_cache(options & 2);
        ws.set_history_compaction(options & 4);
        for (int mask = 1; mask < 8; ++mask) {
          SCOPED_TRACE("options " + std::to_string(options) + " outputs " + std::to_string(mask));
          paged::AttentionBackward got;
          if (mask & 1) got.dq = poisoned(q.shape(), dt, Device::cpu());
          if (mask & 2) got.dk = poisoned(k.shape(), dt, Device::cpu());
          if (mask & 4) got.dv = poisoned(v.shape(), dt, Device::cpu());
          plan.attention_backward_ordered_into(ws, got, q, k, v, go, scale, causal);
          if (mask & 1) EXPECT_TRUE(bit_equal(got.dq, want.dq));
          if (mask & 2) EXPECT_TRUE(bit_equal(got.dk, want.dk));
          if (mask & 4) EXPECT_TRUE(bit_equal(got.dv, want.dv));
        }
      }
      EXPECT_EQ((std::vector{bytes_of(q), bytes_of(k), bytes_of(v), bytes_of(go)}), in_before);

      // MLA on the same schedule.
      const int64_t h = 3, r = 6, p = 2;
      const Tensor mq = random_tensor(rng, {s.queries(), h, r}, dt);
      const Tensor mqp = random_tensor(rng, {s.queries(), h, p}, dt);
      const Tensor lat = random_tensor(rng, {s.pages, page, 1, r}, dt);
      const Tensor kp = random_tensor(rng, {s.pages, page, 1, p}, dt);
      const Tensor mgo = random_tensor(rng, {s.queries(), h, r}, dt);
      const auto m_before =
          std::vector{bytes_of(mq), bytes_of(mqp), bytes_of(lat), bytes_of(kp), bytes_of(mgo)};
      paged::MlaBackward mwant{
          poisoned(mq.shape(), dt, Device::cpu()), poisoned(mqp.shape(), dt, Device::cpu()),
          poisoned(lat.shape(), dt, Device::cpu()), poisoned(kp.shape(), dt, Device::cpu())};
      plan.mla_backward_selected_into(mwant, mq, mqp, lat, kp, mgo, scale, causal);
      paged::OrderedBackwardWorkspace mws(plan, mq);
      for (int options : {0, 7, 4}) {
        mws.set_query_pruning(options & 1);
        mws.set_history_row_cache(options & 2);
        mws.set_history_compaction(options & 4);
        for (int mask = 1; mask < 16; ++mask) {
          SCOPED_TRACE("MLA options " + std::to_string(options) + " outputs " +
                       std::to_string(mask));
          paged::MlaBackward got;
          if (mask & 1) got.dq = poisoned(mq.shape(), dt, Device::cpu());
          if (mask & 2) got.dqp = poisoned(mqp.shape(), dt, Device::cpu());
          if (mask & 4) got.dlatent = poisoned(lat.shape(), dt, Device::cpu());
          if (mask & 8) got.dkp = poisoned(kp.shape(), dt, Device::cpu());
          plan.mla_backward_ordered_into(mws, got, mq, mqp, lat, kp, mgo, scale, causal);
          if (mask & 1) EXPECT_TRUE(bit_equal(got.dq, mwant.dq));
          if (mask & 2) EXPECT_TRUE(bit_equal(got.dqp, mwant.dqp));
          if (mask & 4) EXPECT_TRUE(bit_equal(got.dlatent, mwant.dlatent));
          if (mask & 8) EXPECT_TRUE(bit_equal(got.dkp, mwant.dkp));
        }
      }
      EXPECT_EQ(
          (std::vector{bytes_of(mq), bytes_of(mqp), bytes_of(lat), bytes_of(kp), bytes_of(mgo)}),
          m_before);
    }
  }
}

// Never run in this session (no GPU): no ordered CUDA kernel yet; the checks come first.
TEST(PagedOrderedWorkspaceGpu, RefusedWithoutACudaKernel) {
  RUDNN_REQUIRE_CUDA();
  EnvScope env;
  const Device gpu = Device::cuda(0);
  const Schedule s = fixed_schedule();
  const Tensor q = Tensor::zeros({6, 2, 4}, DType::f32, gpu);
  const Tensor k = Tensor::zeros({8, 3, 1, 4}, DType::f32, gpu);
  const Tensor go = Tensor::zeros({6, 2, 4}, DType::f32, gpu);
  const auto plan = paged::DevicePlan::upload(s.host(), q);
  paged::OrderedBackwardWorkspace ws(plan, q);
  ws.set_history_compaction(true);
  EXPECT_EQ(ws.storage().device(), gpu);
  EXPECT_EQ(*ws.history_compaction_pages(), (std::pair<int64_t, int64_t>{5, 3}));
  Tensor dq = Tensor::zeros({6, 2, 4}, DType::f32, gpu);
  EXPECT_TRUE(throws_error(
      [&] {
        plan.attention_backward_ordered_into(ws, {dq, {}, {}}, q, k, k, go, 1.0f, true);
      },
      ErrorCode::Unsupported,
      {"paged_attention::DevicePlan::attention_backward_ordered_into", "no CUDA kernel yet"}));
  EXPECT_TRUE(throws_error(
      [&] {
        plan.mla_backward_ordered_into(
            ws, {dq, {}, {}, {}}, q, Tensor::zeros({6, 2, 2}, DType::f32, gpu), k,
            Tensor::zeros({8, 3, 1, 2}, DType::f32, gpu), go, 1.0f, true);
      },
      ErrorCode::Unsupported, {"mla_backward_ordered_into", "no CUDA kernel yet"}));
  // A workspace of the host is another device: refused before the Unsupported error.
  const auto host_plan = paged::DevicePlan::upload(s.host(), Tensor::zeros({6, 2, 4}, DType::f32));
  paged::OrderedBackwardWorkspace host_ws(host_plan, Tensor::zeros({6, 2, 4}, DType::f32));
  EXPECT_TRUE(throws_error(
      [&] {
        plan.attention_backward_ordered_into(host_ws, {dq, {}, {}}, q, k, k, go, 1.0f, true);
      },
      ErrorCode::InvalidArgument, {"workspace was made on cpu"}));
}

}  // namespace
}  // namespace rudnn::test
