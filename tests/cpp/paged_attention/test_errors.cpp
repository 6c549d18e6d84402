// Every error of the paged family: a rudnn::Error with the right code, naming the op, the
// argument and the rule, before anything is written.
#include <limits>
#include <vector>

#include "support/test_support.h"

namespace rudnn::test {
namespace {

using paged::HostPlan;

TEST(PagedErrors, HostPlanMetadata) {
  auto plan = [](int64_t ps, int64_t pages, std::vector<std::vector<int64_t>> tables,
                 std::vector<int64_t> lengths, std::vector<int64_t> ids, std::vector<int64_t> pos) {
    return [=] { HostPlan(ps, pages, tables, lengths, ids, pos); };
  };
  const auto bad = ErrorCode::InvalidArgument;
  EXPECT_TRUE(throws_error(plan(0, 1, {{0}}, {1}, {0}, {0}), bad, {"HostPlan", "page_size is 0"}));
  EXPECT_TRUE(throws_error(plan(257, 1, {{0}}, {1}, {0}, {0}), bad, {"page_size is 257", "<= 256"}));
  EXPECT_TRUE(throws_error(plan(4, -1, {}, {}, {}, {}), bad, {"pages is -1"}));
  EXPECT_TRUE(throws_error(plan(256, int64_t{1} << 24, {}, {}, {}, {}), bad, {"2^31"}));
  EXPECT_TRUE(throws_error(plan(4, 2, {{0}, {1}}, {1}, {0}, {0}), bad,
                           {"lengths has 1 entries, tables 2"}));
  EXPECT_TRUE(throws_error(plan(4, 2, {{0}}, {1}, {0, 0}, {0}), bad,
                           {"sequence_ids has 2 entries, positions 1"}));
  EXPECT_TRUE(throws_error(plan(4, 2, {{0, 2}}, {5}, {0}, {0}), bad,
                           {"tables[0][1] is 2", "pages = 2"}));
  EXPECT_TRUE(throws_error(plan(4, 2, {{-1}}, {1}, {0}, {0}), bad, {"tables[0][0] is -1"}));
  EXPECT_TRUE(throws_error(plan(4, 2, {{0}}, {5}, {0}, {0}), bad,
                           {"lengths[0] is 5", "capacity", "= 4"}));
  EXPECT_TRUE(throws_error(plan(4, 2, {{0}}, {-1}, {}, {}), bad, {"lengths[0] is -1"}));
  EXPECT_TRUE(throws_error(plan(4, 2, {{0}}, {3}, {1}, {0}), bad,
                           {"sequence_ids[0] is 1", "sequences = 1"}));
  EXPECT_TRUE(throws_error(plan(4, 2, {{0}}, {3}, {-1}, {0}), bad, {"sequence_ids[0] is -1"}));
  EXPECT_TRUE(throws_error(plan(4, 2, {{0}}, {3}, {0}, {3}), bad,
                           {"positions[0] is 3", "lengths[0] = 3"}));
  EXPECT_TRUE(throws_error(plan(4, 2, {{0}}, {3}, {0}, {-2}), bad, {"positions[0] is -2"}));
  // An empty sequence can have no query.
  EXPECT_TRUE(throws_error(plan(4, 2, {{}}, {0}, {0}, {0}), bad, {"positions[0] is 0"}));
}

struct Fixture {
  HostPlan host{4, 3, {{0, 1}, {2}}, {6, 2}, {0, 0, 1}, {4, 5, 1}};
  Tensor q = Tensor::zeros({3, 4, 8}, DType::f32);
  Tensor k = Tensor::zeros({3, 4, 2, 8}, DType::f32);
  Tensor v = Tensor::zeros({3, 4, 2, 6}, DType::f32);
  paged::DevicePlan plan = paged::DevicePlan::upload(host, q);
};

TEST(PagedErrors, AttentionArguments) {
  Fixture s;
  const auto& plan = s.plan;
  auto call = [&](const Tensor& q, const Tensor& k, const Tensor& v, float scale) {
    return [&plan, q, k, v, scale] { plan.attention(q, k, v, scale, true); };
  };
  const char* op = "paged_attention::DevicePlan::attention";
  EXPECT_TRUE(throws_error([] { paged::DevicePlan().attention({}, {}, {}, 1.0f, true); },
                           ErrorCode::InvalidArgument, {op, "undefined"}));
  EXPECT_TRUE(throws_error(call(Tensor::zeros({2, 4, 8}, DType::f32), s.k, s.v, 1.0f),
                           ErrorCode::ShapeMismatch, {op, "q has 2 queries", "the plan has 3"}));
  EXPECT_TRUE(throws_error(call(s.q, Tensor::zeros({3, 4, 2, 7}, DType::f32), s.v, 1.0f),
                           ErrorCode::ShapeMismatch, {"k_cache has shape [3, 4, 2, 7]"}));
  EXPECT_TRUE(throws_error(call(s.q, Tensor::zeros({2, 4, 2, 8}, DType::f32), s.v, 1.0f),
                           ErrorCode::ShapeMismatch, {"k_cache", "[pages, page_size, Hkv, D]"}));
  EXPECT_TRUE(throws_error(call(s.q, s.k, Tensor::zeros({3, 4, 1, 6}, DType::f32), 1.0f),
                           ErrorCode::ShapeMismatch, {"v_cache"}));
  EXPECT_TRUE(throws_error(call(s.q, Tensor::zeros({3, 4, 3, 8}, DType::f32),
                                Tensor::zeros({3, 4, 3, 6}, DType::f32), 1.0f),
                           ErrorCode::ShapeMismatch, {"Hq = 4 is not a multiple of Hkv = 3"}));
  EXPECT_TRUE(throws_error(call(s.q, s.k, Tensor::zeros({3, 4, 2, 6}, DType::f16), 1.0f),
                           ErrorCode::DTypeMismatch, {"v_cache has dtype f16"}));
  EXPECT_TRUE(throws_error(call(Tensor::zeros({3, 4, 8}, DType::i32), s.k, s.v, 1.0f),
                           ErrorCode::DTypeMismatch, {"q has dtype i32"}));
  EXPECT_TRUE(throws_error(call(Tensor::zeros({3, 32}, DType::f32), s.k, s.v, 1.0f),
                           ErrorCode::ShapeMismatch, {"q", "[queries, Hq, D]"}));
  for (float scale : {0.0f, -1.0f, std::numeric_limits<float>::quiet_NaN(),
                      std::numeric_limits<float>::infinity()}) {
    EXPECT_TRUE(throws_error(call(s.q, s.k, s.v, scale), ErrorCode::InvalidArgument,
                             {"scale must be finite and > 0"}));
  }
  EXPECT_TRUE(throws_error(call(Tensor::zeros({3, 4, 1025}, DType::f32),
                                Tensor::zeros({3, 4, 2, 1025}, DType::f32), s.v, 1.0f),
                           ErrorCode::InvalidArgument, {"D is 1025", "<= 1024"}));
  EXPECT_TRUE(throws_error(call(s.q, s.k, Tensor::zeros({3, 4, 2, 0}, DType::f32), 1.0f),
                           ErrorCode::InvalidArgument, {"Dv is 0"}));
  Tensor wide = Tensor::zeros({3, 4, 16}, DType::f32);
  EXPECT_TRUE(throws_error(call(wide.slice(2, 0, 8), s.k, s.v, 1.0f), ErrorCode::InvalidArgument,
                           {"q must be contiguous"}));
  Tensor kwide = Tensor::zeros({3, 4, 2, 16}, DType::f32);
  EXPECT_TRUE(throws_error(call(s.q, kwide.slice(3, 0, 8), s.v, 1.0f), ErrorCode::InvalidArgument,
                           {"k_cache must be contiguous"}));
  // _into: the output's shape, dtype, layout, and overlap with the inputs.
  auto into = [&](const Tensor& out) {
    return [&plan, &s, out] { plan.attention_into(out, s.q, s.k, s.v, 1.0f, true); };
  };
  const char* into_op = "paged_attention::DevicePlan::attention_into";
  EXPECT_TRUE(throws_error(into(Tensor::zeros({3, 4, 8}, DType::f32)), ErrorCode::ShapeMismatch,
                           {into_op, "out has shape [3, 4, 8]", "[3, 4, 6]"}));
  EXPECT_TRUE(throws_error(into(Tensor::zeros({3, 4, 6}, DType::f16)), ErrorCode::DTypeMismatch,
                           {"out has dtype f16"}));
  EXPECT_TRUE(throws_error(into(Tensor::zeros({3, 4, 12}, DType::f32).slice(2, 0, 6)),
                           ErrorCode::InvalidArgument, {"out must be contiguous"}));
  Tensor alias = s.v.view({-1}).slice(0, 0, 72).view({3, 4, 6});
  EXPECT_TRUE(throws_error(into(alias), ErrorCode::InvalidArgument, {"out overlaps v_cache"}));
}

TEST(PagedErrors, AnErrorWritesNothing) {
  Fixture s;
  Tensor out = Tensor::full({3, 4, 6}, 7.0, DType::f32);
  EXPECT_THROW(s.plan.attention_into(out, s.q, s.k, s.v, -1.0f, true), Error);
  for (double x : to_doubles(out)) ASSERT_EQ(x, 7.0);
}

TEST(PagedErrors, MlaArguments) {
  Fixture s;
  Tensor q = Tensor::zeros({3, 2, 8}, DType::f32), qp = Tensor::zeros({3, 2, 4}, DType::f32);
  Tensor lat = Tensor::zeros({3, 4, 1, 8}, DType::f32), kp = Tensor::zeros({3, 4, 1, 4}, DType::f32);
  const auto& plan = s.plan;
  auto call = [&plan](Tensor q, Tensor qp, Tensor lat, Tensor kp) {
    return [=, &plan] { plan.mla(q, qp, lat, kp, 1.0f, true); };
  };
  const char* op = "paged_attention::DevicePlan::mla";
  EXPECT_NO_THROW(plan.mla(q, qp, lat, kp, 1.0f, true));
  EXPECT_TRUE(throws_error(call(q, Tensor::zeros({3, 3, 4}, DType::f32), lat, kp),
                           ErrorCode::ShapeMismatch, {op, "qp has shape [3, 3, 4]"}));
  EXPECT_TRUE(throws_error(call(q, qp, Tensor::zeros({3, 4, 2, 8}, DType::f32), kp),
                           ErrorCode::ShapeMismatch, {"latent", "[pages, page_size, 1, R]"}));
  EXPECT_TRUE(throws_error(call(q, qp, lat, Tensor::zeros({3, 4, 1, 5}, DType::f32)),
                           ErrorCode::ShapeMismatch, {"kp has shape [3, 4, 1, 5]"}));
  EXPECT_TRUE(throws_error(call(q, Tensor::zeros({3, 2, 257}, DType::f32), lat,
                                Tensor::zeros({3, 4, 1, 257}, DType::f32)),
                           ErrorCode::InvalidArgument, {"P is 257", "<= 256"}));
  EXPECT_TRUE(throws_error(call(q, qp.to(Device::cpu()).contiguous(), lat,
                                Tensor::zeros({3, 4, 1, 4}, DType::f16)),
                           ErrorCode::DTypeMismatch, {"kp has dtype f16"}));
  EXPECT_TRUE(throws_error([&] { plan.mla(q, qp, lat, kp, 0.0f, true); },
                           ErrorCode::InvalidArgument, {op, "scale"}));
  EXPECT_TRUE(throws_error([&] { plan.mla_into(q, q, qp, lat, kp, 1.0f, true); },
                           ErrorCode::InvalidArgument, {"out overlaps q"}));
}

TEST(PagedErrors, SplitWorkspace) {
  Fixture s;
  auto ws = [&](int64_t queries, int64_t heads, int64_t dv, int64_t splits) {
    return [=, &s] { paged::SplitWorkspace(s.q, queries, heads, dv, splits); };
  };
  const char* op = "paged_attention::SplitWorkspace";
  EXPECT_TRUE(throws_error(ws(3, 4, 6, 1), ErrorCode::InvalidArgument, {op, "splits is 1", "2 <="}));
  EXPECT_TRUE(throws_error(ws(3, 4, 6, 33), ErrorCode::InvalidArgument, {"splits is 33", "<= 32"}));
  EXPECT_TRUE(throws_error(ws(3, 0, 6, 2), ErrorCode::InvalidArgument, {"heads = 0"}));
  EXPECT_TRUE(throws_error(ws(-1, 4, 6, 2), ErrorCode::InvalidArgument, {"queries = -1"}));
  EXPECT_TRUE(throws_error(ws(3, 4, 1025, 2), ErrorCode::InvalidArgument, {"value_dim is 1025"}));
  // 4096 queries * 32 heads * 32 splits * 132 floats = 2.2 GB.
  EXPECT_TRUE(throws_error(ws(4096, 32, 128, 32), ErrorCode::InvalidArgument,
                           {"budget is 67108864 bytes"}));
  EXPECT_TRUE(throws_error(ws(int64_t{1} << 62, 1 << 20, 8, 2), ErrorCode::InvalidArgument,
                           {"budget"}));
  paged::SplitWorkspace ok(s.q, 3, 4, 6, 2);
  EXPECT_EQ(ok.bytes(), 3u * 4 * 2 * 8 * sizeof(float));
  EXPECT_NO_THROW(s.plan.attention_with_workspace(ok, s.q, s.k, s.v, 1.0f, true));
  paged::SplitWorkspace other_dv(s.q, 3, 4, 8, 2);
  EXPECT_TRUE(throws_error([&] { s.plan.attention_with_workspace(other_dv, s.q, s.k, s.v, 1.0f, true); },
                           ErrorCode::InvalidArgument,
                           {"attention_with_workspace", "workspace was made for", "(3, 4, 8)",
                            "(3, 4, 6)"}));
  paged::SplitWorkspace other_q(s.q, 2, 4, 6, 2);
  EXPECT_TRUE(throws_error([&] { s.plan.attention_with_workspace(other_q, s.q, s.k, s.v, 1.0f, true); },
                           ErrorCode::InvalidArgument, {"(2, 4, 6)"}));
  Tensor q = Tensor::zeros({3, 2, 8}, DType::f32), qp = Tensor::zeros({3, 2, 4}, DType::f32);
  Tensor lat = Tensor::zeros({3, 4, 1, 8}, DType::f32), kp = Tensor::zeros({3, 4, 1, 4}, DType::f32);
  EXPECT_TRUE(throws_error([&] { s.plan.mla_with_workspace(ok, q, qp, lat, kp, 1.0f, true); },
                           ErrorCode::InvalidArgument, {"mla_with_workspace", "(3, 2, 8)"}));
}

TEST(PagedErrors, Append) {
  Fixture s;
  Tensor k = Tensor::zeros({3, 2, 8}, DType::f32), v = Tensor::zeros({3, 2, 6}, DType::f32);
  const char* op = "paged_attention::DevicePlan::append";
  EXPECT_NO_THROW(s.plan.append(k, v, s.k, s.v));
  EXPECT_TRUE(throws_error([&] { s.plan.append(Tensor::zeros({2, 2, 8}, DType::f32), v, s.k, s.v); },
                           ErrorCode::ShapeMismatch, {op, "k has shape [2, 2, 8]"}));
  EXPECT_TRUE(throws_error([&] { s.plan.append(k, v, s.v, s.k); }, ErrorCode::ShapeMismatch,
                           {"key_cache"}));
  EXPECT_TRUE(throws_error([&] { s.plan.append(k, v.to(Device::cpu()).contiguous(), s.k,
                                               Tensor::zeros({3, 4, 2, 6}, DType::bf16)); },
                           ErrorCode::DTypeMismatch, {"value_cache has dtype bf16"}));
  Tensor kc_wide = Tensor::zeros({3, 4, 2, 16}, DType::f32);
  EXPECT_TRUE(throws_error([&] { s.plan.append(k, v, kc_wide.slice(3, 0, 8), s.v); },
                           ErrorCode::InvalidArgument, {"key_cache must be contiguous"}));
  Tensor k_alias = s.k.view({-1}).slice(0, 0, 48).view({3, 2, 8});
  EXPECT_TRUE(throws_error([&] { s.plan.append(k_alias, v, s.k, s.v); },
                           ErrorCode::InvalidArgument, {"key_cache overlaps k"}));
  // Two queries of one shared page slot.
  const HostPlan shared(2, 2, {{0, 1}, {0}}, {3, 2}, {0, 1}, {1, 1});
  const auto plan = paged::DevicePlan::upload(shared, k);
  Tensor k2 = Tensor::zeros({2, 1, 4}, DType::f32);
  Tensor kc = Tensor::zeros({2, 2, 1, 4}, DType::f32);
  EXPECT_TRUE(throws_error([&] { plan.append(k2, k2, kc, kc.to(Device::cpu()).contiguous()); },
                           ErrorCode::InvalidArgument, {op, "duplicate physical writes"}));
}

TEST(PagedErrors, BlockTableForm) {
  Tensor q = Tensor::zeros({2, 4, 3, 8}, DType::f32);
  Tensor k = Tensor::zeros({5, 2, 4, 8}, DType::f32);
  Tensor t = Tensor::zeros({2, 3}, DType::i32), len = Tensor::zeros({2}, DType::i64);
  auto call = [](Tensor q, Tensor k, Tensor v, Tensor t, Tensor len, float scale) {
    return [=] { paged::paged_attention(q, k, v, t, len, scale); };
  };
  EXPECT_NO_THROW(paged::paged_attention(q, k, k, t, len, 1.0f));
  EXPECT_TRUE(throws_error(call(q, k, k, Tensor::zeros({2, 3}, DType::f32), len, 1.0f),
                           ErrorCode::DTypeMismatch, {"paged_attention", "block_tables has dtype f32"}));
  EXPECT_TRUE(throws_error(call(q, k, k, t, Tensor::zeros({2}, DType::f32), 1.0f),
                           ErrorCode::DTypeMismatch, {"lengths has dtype f32"}));
  EXPECT_TRUE(throws_error(call(q, k, k, Tensor::zeros({3, 3}, DType::i32), len, 1.0f),
                           ErrorCode::ShapeMismatch, {"block_tables has shape [3, 3]"}));
  EXPECT_TRUE(throws_error(call(q, k, k, t, Tensor::zeros({3}, DType::i32), 1.0f),
                           ErrorCode::ShapeMismatch, {"lengths has shape [3]"}));
  EXPECT_TRUE(throws_error(call(q, Tensor::zeros({5, 3, 4, 8}, DType::f32),
                                Tensor::zeros({5, 3, 4, 8}, DType::f32), t, len, 1.0f),
                           ErrorCode::ShapeMismatch, {"Hq = 4 is not a multiple of Hkv = 3"}));
  EXPECT_TRUE(throws_error(call(q, k, Tensor::zeros({5, 2, 3, 8}, DType::f32), t, len, 1.0f),
                           ErrorCode::ShapeMismatch, {"v_cache has shape [5, 2, 3, 8]"}));
  EXPECT_TRUE(throws_error(call(q, Tensor::zeros({0, 2, 4, 8}, DType::f32),
                                Tensor::zeros({0, 2, 4, 8}, DType::f32), t, len, 1.0f),
                           ErrorCode::ShapeMismatch, {"no blocks"}));
  EXPECT_TRUE(throws_error(call(q, Tensor::zeros({1, 2, 257, 8}, DType::f32),
                                Tensor::zeros({1, 2, 257, 8}, DType::f32), t, len, 1.0f),
                           ErrorCode::InvalidArgument, {"block_size is 257"}));
  EXPECT_TRUE(throws_error(call(q, k, k, t, len, std::numeric_limits<float>::infinity()),
                           ErrorCode::InvalidArgument, {"scale"}));
}

TEST(PagedErrors, PagedWrite) {
  Tensor cache = Tensor::zeros({2, 2, 4, 3}, DType::f32);
  Tensor fresh = Tensor::zeros({2, 2, 3}, DType::f32);
  EXPECT_TRUE(throws_error([&] { paged::paged_write(cache, fresh, Tensor::from_host(std::vector<int32_t>{3, 3}, {2})); },
                           ErrorCode::InvalidArgument, {"paged_write", "slots holds 3 twice"}));
  // Duplicates among skipped slots do not count.
  EXPECT_NO_THROW(paged::paged_write(cache, fresh, Tensor::from_host(std::vector<int32_t>{-1, -1}, {2})));
  EXPECT_TRUE(throws_error([&] { paged::paged_write(cache, fresh, Tensor::zeros({2}, DType::f32)); },
                           ErrorCode::DTypeMismatch, {"slots has dtype f32"}));
  EXPECT_TRUE(throws_error([&] { paged::paged_write(cache, Tensor::zeros({2, 1, 3}, DType::f32),
                                                    Tensor::zeros({2}, DType::i64)); },
                           ErrorCode::ShapeMismatch, {"new has shape [2, 1, 3]"}));
  EXPECT_TRUE(throws_error([&] { paged::paged_write(cache, fresh, Tensor::zeros({3}, DType::i64)); },
                           ErrorCode::ShapeMismatch, {"slots has shape [3]"}));
  EXPECT_TRUE(throws_error([&] { paged::paged_write(cache, Tensor::zeros({2, 2, 3}, DType::f16),
                                                    Tensor::zeros({2}, DType::i64)); },
                           ErrorCode::DTypeMismatch, {"new has dtype f16"}));
  Tensor wide = Tensor::zeros({2, 2, 4, 6}, DType::f32);
  const Tensor distinct = Tensor::from_host(std::vector<int64_t>{0, 1}, {2});
  EXPECT_TRUE(throws_error([&] { paged::paged_write_(wide.slice(3, 0, 3), fresh, distinct); },
                           ErrorCode::InvalidArgument, {"paged_write_", "cache must be contiguous"}));
  Tensor alias = cache.view({-1}).slice(0, 0, 12).view({2, 2, 3});
  EXPECT_TRUE(throws_error([&] { paged::paged_write_(cache, alias, distinct); },
                           ErrorCode::InvalidArgument, {"cache overlaps new"}));
}

}  // namespace
}  // namespace rudnn::test
