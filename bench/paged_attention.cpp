// The paged family's benchmark cases (issue 13), bf16, page size 16, pages scattered over
// the cache by a fixed permutation (so that no sequence's pages are contiguous):
//   decode B64 Hq32 Hkv8 D128, 4096 keys each (one query per sequence): GB/s of K + V;
//   MLA decode H128 R512 P64, B64, 4096 keys (the tensor-core MLA kernel): GB/s of the
//   latent + positional cache, and TFLOP/s (2 · B · H · S · (576 + 512)) printed after it;
//   mixed batch: the decode shape with 4 of the 64 sequences prefilling their last 512
//   positions instead (2108 queries), GB/s of K + V.
// --variants times the launch alternatives of paged_attention/cuda/tuning.h on the decode row.
// Check: sequence 0's query against dense attention over its keys gathered on the host.
//
// Shape options: --paged-batch --paged-heads --paged-kv-heads --paged-len --paged-page
// --paged-mla-heads.
#include <cuda_runtime.h>
#include <rudnn/rudnn.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "harness.h"
#include "paged_attention/cuda/mla_tc.h"
#include "paged_attention/cuda/tuning.h"

namespace {

using namespace rudnn;
using rudnn::bench::Bench;

// B sequences of S keys each, one decode query per sequence at position S - 1, pages
// scattered by a seeded permutation.
paged::HostPlan decode_plan(int64_t batch, int64_t len, int64_t page) {
  const int64_t per_seq = (len + page - 1) / page, pages = batch * per_seq;
  std::vector<int64_t> perm(static_cast<size_t>(pages));
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), std::mt19937_64(13));
  std::vector<std::vector<int64_t>> tables;
  std::vector<int64_t> lengths, ids, positions;
  for (int64_t b = 0; b < batch; ++b) {
    tables.emplace_back(perm.begin() + b * per_seq, perm.begin() + (b + 1) * per_seq);
    lengths.push_back(len);
    ids.push_back(b);
    positions.push_back(len - 1);
  }
  return paged::HostPlan(page, pages, tables, lengths, ids, positions);
}

// Sequence 0's keys [1, H, S, D] on the host, gathered from a [pages, page, H, D] cache.
Tensor gather0(const paged::HostPlan& plan, const std::vector<int64_t>& table0, const Tensor& cache,
               int64_t len) {
  const Tensor host = cache.to_host();
  const int64_t page = plan.page_size(), heads = cache.size(2), dim = cache.size(3);
  Tensor dense = Tensor::empty({1, heads, len, dim}, cache.dtype());
  const size_t es = cache.itemsize();
  for (int64_t j = 0; j < len; ++j)
    for (int64_t h = 0; h < heads; ++h)
      std::memcpy(static_cast<char*>(dense.data()) + ((h * len + j) * dim) * es,
                  static_cast<const char*>(host.data()) +
                      (((table0[size_t(j / page)] * page + j % page) * heads + h) * dim) * es,
                  size_t(dim) * es);
  return dense;
}

std::vector<int64_t> table_of_first(int64_t len, int64_t page, int64_t batch) {
  const int64_t per_seq = (len + page - 1) / page;
  std::vector<int64_t> perm(static_cast<size_t>(batch * per_seq));
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), std::mt19937_64(13));
  return std::vector<int64_t>(perm.begin(), perm.begin() + per_seq);
}

void bench_decode(Bench& b) {
  const int64_t B = b.size("paged-batch"), Hq = b.size("paged-heads"),
                Hkv = b.size("paged-kv-heads"), S = b.size("paged-len"), P = b.size("paged-page");
  const int64_t D = 128;
  const std::string op = "paged decode [GB/s of K+V]";
  if (!b.wanted(op)) return;
  const DType bf = DType::bf16;
  const paged::HostPlan host = decode_plan(B, S, P);
  const Shape cache{host.pages(), P, Hkv, D};
  const double kv_bytes = double(B) * Hkv * S * D * 2 * 2;
  const int sets = b.sets_for(size_t(kv_bytes));
  const std::vector<Tensor> q = b.normals(sets, {B, Hq, D}, bf, 21),
                            k = b.normals(sets, cache, bf, 22), v = b.normals(sets, cache, bf, 23);
  const std::vector<Tensor> out = b.empties(sets, {B, Hq, D}, bf);
  const auto plan = paged::DevicePlan::upload(host, q[0], b.stream);
  b.sync();
  const float scale = 1.0f / std::sqrt(float(D));
  b.run(
      op, {B, Hq, Hkv, S, D}, bf, kv_bytes, sets,
      [&](int s) { plan.attention_into(out[s], q[s], k[s], v[s], scale, true); },
      [&] {
        b.sync();
        const std::vector<int64_t> t0 = table_of_first(S, P, B);
        const Tensor qh = q[0].slice(0, 0, 1).to_host().view({1, 1, Hq, D}).transpose(1, 2);
        const Tensor ref =
            attention(qh.contiguous(), gather0(host, t0, k[0], S), gather0(host, t0, v[0], S),
                      AttentionOptions{}.set_scale(scale))
                .out;
        return bench::relative_l2_error(out[0].slice(0, 0, 1).to_host().view({1, Hq, 1, D}), ref);
      },
      2e-2);
}

// A mixed batch: B sequences of S keys, the first `chunks` of them prefilling their last C
// positions (C queries each), the others decoding one; the check covers the last query.
void bench_mixed(Bench& b) {
  const int64_t B = b.size("paged-batch"), Hq = b.size("paged-heads"),
                Hkv = b.size("paged-kv-heads"), S = b.size("paged-len"), P = b.size("paged-page");
  const int64_t chunks = b.size("paged-mixed-prefills"), C = b.size("paged-mixed-chunk");
  const int64_t D = 128;
  const std::string op = "paged mixed prefill+decode [GB/s of K+V]";
  if (!b.wanted(op)) return;
  const DType bf = DType::bf16;
  std::vector<std::vector<int64_t>> tables;
  std::vector<int64_t> lengths, ids, positions;
  // decode_plan's tables, with the first `chunks` sequences prefilling.
  const int64_t per_seq = (S + P - 1) / P;
  std::vector<int64_t> perm(static_cast<size_t>(B * per_seq));
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), std::mt19937_64(13));
  for (int64_t s = 0; s < B; ++s) {
    tables.emplace_back(perm.begin() + s * per_seq, perm.begin() + (s + 1) * per_seq);
    lengths.push_back(S);
    const int64_t n = s < chunks ? C : 1;
    for (int64_t i = S - n; i < S; ++i) {
      ids.push_back(s);
      positions.push_back(i);
    }
  }
  const paged::HostPlan host(P, B * per_seq, tables, lengths, ids, positions);
  const int64_t Q = host.queries();
  const Shape cache{host.pages(), P, Hkv, D};
  const double kv_bytes = double(B) * Hkv * S * D * 2 * 2;
  const int sets = b.sets_for(size_t(kv_bytes));
  const std::vector<Tensor> q = b.normals(sets, {Q, Hq, D}, bf, 41),
                            k = b.normals(sets, cache, bf, 42), v = b.normals(sets, cache, bf, 43);
  const std::vector<Tensor> out = b.empties(sets, {Q, Hq, D}, bf);
  const auto plan = paged::DevicePlan::upload(host, q[0], b.stream);
  b.sync();
  const float scale = 1.0f / std::sqrt(float(D));
  b.run(
      op, {B, Q, Hq, Hkv, S, D}, bf, kv_bytes, sets,
      [&](int s) { plan.attention_into(out[s], q[s], k[s], v[s], scale, true); },
      [&] {
        b.sync();
        // The last query: the last sequence's decode step over all S keys.
        const std::vector<int64_t>& t = tables.back();
        const Tensor qh = q[0].slice(0, Q - 1, Q).to_host().view({1, 1, Hq, D}).transpose(1, 2);
        const Tensor ref = attention(qh.contiguous(), gather0(host, t, k[0], S),
                                     gather0(host, t, v[0], S), AttentionOptions{}.set_scale(scale))
                               .out;
        return bench::relative_l2_error(out[0].slice(0, Q - 1, Q).to_host().view({1, Hq, 1, D}),
                                        ref);
      },
      2e-2);
}

void bench_mla_as(Bench& b, const std::string& op);

void bench_mla(Bench& b) {
  // The kernel's default form (wgmma on Hopper) and its mma.sync form.
  auto& tuning = rudnn::paged::cuda::mla_tuning();
  const bool saved = tuning.wgmma;
  for (bool wgmma : {true, false}) {
    const std::string op = wgmma ? "paged MLA decode [GB/s of cache]"
                                 : "paged MLA decode, mma.sync [GB/s of cache]";
    if (!b.wanted(op)) continue;
    tuning.wgmma = wgmma;
    bench_mla_as(b, op);
  }
  tuning.wgmma = saved;
}

void bench_mla_as(Bench& b, const std::string& op) {
  const int64_t B = b.size("paged-batch"), H = b.size("paged-mla-heads"), S = b.size("paged-len"),
                P = b.size("paged-page");
  const int64_t R = 512, Pd = 64;
  const DType bf = DType::bf16;
  const paged::HostPlan host = decode_plan(B, S, P);
  const double bytes = double(B) * S * (R + Pd) * 2;
  const int sets = b.sets_for(size_t(bytes));
  const std::vector<Tensor> q = b.normals(sets, {B, H, R}, bf, 31),
                            qp = b.normals(sets, {B, H, Pd}, bf, 32),
                            lat = b.normals(sets, {host.pages(), P, 1, R}, bf, 33),
                            kp = b.normals(sets, {host.pages(), P, 1, Pd}, bf, 34);
  const std::vector<Tensor> out = b.empties(sets, {B, H, R}, bf);
  const auto plan = paged::DevicePlan::upload(host, q[0], b.stream);
  b.sync();
  const float scale = 0.0722f;
  const size_t before = b.table.rows().size();
  b.run(
      op, {B, H, S, R, Pd}, bf, bytes, sets,
      [&](int s) { plan.mla_into(out[s], q[s], qp[s], lat[s], kp[s], scale, true); },
      [&] {
        b.sync();
        // Sequence 0 through attention over [latent | kp] with queries [q | qp].
        const std::vector<int64_t> t0 = table_of_first(S, P, B);
        const Tensor lh = gather0(host, t0, lat[0], S), kh = gather0(host, t0, kp[0], S);
        Tensor kcat = Tensor::empty({1, 1, S, R + Pd}, bf);
        kcat.slice(3, 0, R).copy_from(lh);
        kcat.slice(3, R, R + Pd).copy_from(kh);
        Tensor qcat = Tensor::empty({1, H, 1, R + Pd}, bf);
        qcat.slice(3, 0, R).copy_from(q[0].slice(0, 0, 1).to_host().view({1, H, 1, R}));
        qcat.slice(3, R, R + Pd).copy_from(qp[0].slice(0, 0, 1).to_host().view({1, H, 1, Pd}));
        const Tensor ref = attention(qcat, kcat, lh, AttentionOptions{}.set_scale(scale)).out;
        return bench::relative_l2_error(out[0].slice(0, 0, 1).to_host().view({1, H, 1, R}), ref);
      },
      2e-2);
  if (b.table.rows().size() == before) return;
  const auto& row = b.table.rows().back();
  if (row.status == "ok" && row.timing.median_ms > 0) {
    const double flops = 2.0 * B * H * S * (R + Pd + R);
    std::printf("%s: %.4f ms, %.1f TFLOP/s (2 x B x H x S x (R + P + R))\n", op.c_str(),
                row.timing.median_ms, flops / (row.timing.median_ms * 1e-3) / 1e12);
  }
}

// The alternatives of paged/cuda/tuning.h, each timed against the default in one run.
void run_variants(Bench& b) {
  using rudnn::paged::cuda::kernel_tuning;
  using rudnn::paged::cuda::KernelTuning;
  const KernelTuning defaults = kernel_tuning();
  struct Variant {
    std::string label;
    void (*set)(KernelTuning&);
  };
  const Variant variants[] = {
      {"2 stages", [](KernelTuning& t) { t.decode_stages = 2; }},
      {"4 stages", [](KernelTuning& t) { t.decode_stages = 4; }},
      {"CUDA-core decode", [](KernelTuning& t) { t.decode_tensor_cores = false; }},
      {"CUDA-core min blocks 3",
       [](KernelTuning& t) {
         t.decode_tensor_cores = false;
         t.decode_min_blocks = 3;
       }},
      {"4 blocks/SM",
       [](KernelTuning& t) {
         t.decode_blocks_per_sm = 4;
         t.decode_waves = 0;
       }},
      {"8 blocks/SM",
       [](KernelTuning& t) {
         t.decode_blocks_per_sm = 8;
         t.decode_waves = 0;
       }},
      {"32 blocks/SM",
       [](KernelTuning& t) {
         t.decode_blocks_per_sm = 32;
         t.decode_waves = 0;
       }},
      {"general kernel", [](KernelTuning& t) { t.decode_kernel = false; }},
      {"heads fastest", [](KernelTuning& t) { t.decode_heads_fastest = true; }},
      {"2 heads/block", [](KernelTuning& t) { t.decode_heads_per_block = 2; }},
      {"4 heads/block", [](KernelTuning& t) { t.decode_heads_per_block = 4; }},
      {"4 heads/block, heads fastest",
       [](KernelTuning& t) {
         t.decode_heads_per_block = 4;
         t.decode_heads_fastest = true;
       }},
      {"4 heads/block, 8 blocks/SM",
       [](KernelTuning& t) {
         t.decode_heads_per_block = 4;
         t.decode_blocks_per_sm = 8;
         t.decode_waves = 0;
       }},
      {"4 heads/block, 12 blocks/SM, heads fastest",
       [](KernelTuning& t) {
         t.decode_heads_per_block = 4;
         t.decode_blocks_per_sm = 12;
         t.decode_waves = 0;
         t.decode_heads_fastest = true;
       }},
      {"4 heads/block, 8 blocks/SM, 4 stages",
       [](KernelTuning& t) {
         t.decode_heads_per_block = 4;
         t.decode_blocks_per_sm = 8;
         t.decode_waves = 0;
         t.decode_stages = 4;
       }},
      {"splits by blocks per SM", [](KernelTuning& t) { t.decode_waves = 0; }},
      {"2 waves", [](KernelTuning& t) { t.decode_waves = 2; }},
      {"4 heads/block, 1 wave, heads fastest",
       [](KernelTuning& t) {
         t.decode_heads_per_block = 4;
         t.decode_waves = 1;
         t.decode_heads_fastest = true;
       }},
      {"4 heads/block, 2 waves, heads fastest",
       [](KernelTuning& t) {
         t.decode_heads_per_block = 4;
         t.decode_waves = 2;
         t.decode_heads_fastest = true;
       }},
      {"4 heads/block, 1 wave of 3 blocks/SM, heads fastest",
       [](KernelTuning& t) {
         t.decode_heads_per_block = 4;
         t.decode_waves = 1;
         t.decode_resident = 3;
         t.decode_heads_fastest = true;
       }},
      {"2 heads/block, 8 blocks/SM, heads fastest",
       [](KernelTuning& t) {
         t.decode_heads_per_block = 2;
         t.decode_blocks_per_sm = 8;
         t.decode_waves = 0;
         t.decode_heads_fastest = true;
       }},
  };
  for (const Variant& v : variants) {
    kernel_tuning() = defaults;
    v.set(kernel_tuning());
    b.variant = v.label;
    b.variant_ops = {"paged decode [GB/s of K+V]"};
    bench_decode(b);
  }
  kernel_tuning() = defaults;
  b.variant.clear();
  b.variant_ops.clear();
}

bench::Family make_family() {
  bench::Family f;
  f.sizes = {{"paged-batch", 64, "paged decode: sequences B"},
             {"paged-heads", 32, "paged decode: query heads Hq"},
             {"paged-kv-heads", 8, "paged decode: KV heads Hkv"},
             {"paged-len", 4096, "paged decode: keys per sequence"},
             {"paged-page", 16, "paged: page size"},
             {"paged-mla-heads", 128, "paged MLA decode: heads H"},
             {"paged-mixed-prefills", 4, "paged mixed batch: sequences prefilling a chunk"},
             {"paged-mixed-chunk", 512, "paged mixed batch: queries per prefill chunk"}};
  f.run = [](Bench& b) {
    bench_decode(b);
    bench_mixed(b);
    bench_mla(b);
  };
  f.run_variants = run_variants;
  return f;
}

}  // namespace

RUDNN_BENCH_FAMILY(paged_attention, make_family);
