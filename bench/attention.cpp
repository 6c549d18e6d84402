// The attention family's benchmark cases (issue 11 / ANCHORS.md), bf16, for every strategy
// built:
//   forward B4 H16 L4096 D128, causal and not: Flash (tensor cores), Composed, FlashScalar;
//   forward + backward, causal: Flash and FlashScalar;
//   the Hopper forward (Flash on sm_90): B4 H16 L4096 D128 causal and not, B2 H16 L8192 D64
//   causal, B4 H8 L4096 D256 causal ("attention hopper ..."), and the Hopper backward alone
//   B4 H16 L4096 D128 causal;
//   decode B64 Hq32 Hkv8 S4096 D128 (one query per sequence): SplitKv.
// --variants times SplitKv's alternatives of attention/cuda/tuning.h on the decode row.
// The harness's bytes column counts what a case must move at least (prefill: q, k, v and
// out once, and for the backward dout, dq, dk, dv too; decode: K and V), so its GB/s is a
// bandwidth. The prefill rows' compute rate is printed after the family in a second table,
// TFLOP/s as ANCHORS.md counts it: 4·B·H·Lq·Lk·D, halved when causal, ×3.5 for forward +
// backward.
//
// Check: the last 16 queries of batch 0's first query head (and for decode batch 0's first
// KV head's query heads) against the CPU reference.
//
// Shape options: --attn-batch --attn-heads --attn-len --attn-dim (prefill), --attn-decode-batch
// --attn-decode-heads --attn-decode-kv-heads --attn-decode-len (decode).
#include <cuda_runtime.h>
#include <rudnn/rudnn.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "attention/cuda/tuning.h"
#include "harness.h"

namespace {

using namespace rudnn;
using rudnn::bench::Bench;

struct Flops {
  std::string op, shape;
  double flops;
  double median_ms = -1;
};
std::vector<Flops> g_flops;

// Runs the case through the harness and remembers its FLOPs and median for the TFLOP/s table.
void run_case(Bench& b, const std::string& op, const Shape& shape, double bytes, double flops,
              int sets, const std::function<void(int)>& fn, const std::function<double()>& check) {
  const size_t before = b.table.rows().size();
  b.run(op, shape, DType::bf16, bytes, sets, fn, check, 2e-2);
  if (b.table.rows().size() == before) return;  // filtered out
  const auto& row = b.table.rows().back();
  g_flops.push_back({row.op, row.shape, flops, row.status == "ok" ? row.timing.median_ms : -1});
}

// The GPU's last 16 query rows of batch 0 against the reference on the same rows.
double check_tail(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                  const AttentionOptions& o, int64_t heads) {
  const int64_t lq = q.size(2), rows = std::min<int64_t>(16, lq);
  auto host = [](const Tensor& t) { return t.to_host().contiguous(); };
  const Tensor qh = host(q.slice(0, 0, 1).slice(1, 0, heads).slice(2, lq - rows, lq));
  const Tensor kh = host(k.slice(0, 0, 1).slice(1, 0, 1));
  const Tensor vh = host(v.slice(0, 0, 1).slice(1, 0, 1));
  const Tensor ref = attention(qh, kh, vh, o).out;
  return bench::relative_l2_error(
      host(out.slice(0, 0, 1).slice(1, 0, heads).slice(2, lq - rows, lq)), ref);
}

void bench_prefill(Bench& b) {
  const int64_t B = b.size("attn-batch"), H = b.size("attn-heads"), L = b.size("attn-len"),
                D = b.size("attn-dim");
  const DType bf = DType::bf16;
  const Shape shape{B, H, L, D};
  const double bytes_one = double(B) * H * L * D * 2;
  const int sets = b.sets_for(size_t(bytes_one * 5));
  const std::vector<Tensor> q = b.normals(sets, shape, bf, 1), k = b.normals(sets, shape, bf, 2),
                            v = b.normals(sets, shape, bf, 3), dout = b.normals(sets, shape, bf, 4);
  const std::vector<Tensor> out = b.empties(sets, shape, bf);
  std::vector<Tensor> lse;
  for (int s = 0; s < sets; ++s) lse.push_back(b.empty({B, H, L}, DType::f32));
  b.sync();
  const double flops = 4.0 * B * H * L * L * D;

  for (bool causal : {true, false}) {
    const AttentionOptions o = AttentionOptions{}.set_causal(causal);
    const double f = causal ? flops / 2 : flops;
    for (AttentionStrategy st :
         {AttentionStrategy::Flash, AttentionStrategy::Composed, AttentionStrategy::FlashScalar}) {
      const std::string op =
          std::string("attention fwd ") + (causal ? "causal " : "") + attention_strategy_name(st);
      if (!b.wanted(op)) continue;
      run_case(
          b, op, shape, bytes_one * 4, f, sets,
          [&](int s) { attention_into(out[s], lse[s], q[s], k[s], v[s], o, st, b.stream); },
          [&] {
            b.sync();
            return check_tail(q[0], k[0], v[0], out[0], o, 1);
          });
    }
  }

  for (AttentionStrategy st : {AttentionStrategy::Flash, AttentionStrategy::FlashScalar}) {
    const std::string op = std::string("attention fwd+bwd causal ") + attention_strategy_name(st);
    if (!b.wanted(op)) continue;
    const AttentionOptions o = AttentionOptions{}.set_causal();
    std::vector<AttentionGrads> grads(static_cast<size_t>(sets));
    for (int s = 0; s < sets; ++s)
      grads[size_t(s)] = {b.empty(shape, bf), b.empty(shape, bf), b.empty(shape, bf), {}, {}};
    run_case(
        b, op, shape, bytes_one * 8, flops / 2 * 3.5, sets,
        [&](int s) {
          attention_into(out[s], lse[s], q[s], k[s], v[s], o, st, b.stream);
          attention_backward_into(grads[size_t(s)], dout[s], q[s], k[s], v[s], out[s], lse[s], o,
                                  st, b.stream);
        },
        [&] {
          b.sync();
          return check_tail(q[0], k[0], v[0], out[0], o, 1);
        });
  }
}

// The backward of the Hopper case B4 H16 L4096 D128 causal alone ("attention hopper bwd
// causal D128 [wgmma]" where the plan runs the wgmma backward), counted as 2.5 forwards (five
// products against two). Check: dq of the last 16 rows of batch 0's head 0 and dv of its
// last 16 keys (under causal only those rows see those keys) against the reference backward
// of those rows.
void bench_hopper_backward(Bench& b) {
  const int64_t B = 4, H = 16, L = 4096, D = 128;
  const DType bf = DType::bf16;
  const Shape shape{B, H, L, D};
  const AttentionOptions o = AttentionOptions{}.set_causal();
  const AttentionPlan plan =
      plan_attention_backward(shape, shape, shape, bf, o, AttentionStrategy::Flash, b.dev);
  const std::string op = std::string("attention hopper bwd causal D128") +
                         (plan.flash_wgmma ? " [wgmma]" : " [mma.sync]");
  if (!b.wanted(op)) return;
  const double bytes_one = double(B) * H * L * D * 2;
  const int sets = b.sets_for(size_t(bytes_one * 8));
  const std::vector<Tensor> q = b.normals(sets, shape, bf, 21), k = b.normals(sets, shape, bf, 22),
                            v = b.normals(sets, shape, bf, 23), dout = b.normals(sets, shape, bf, 24);
  const std::vector<Tensor> out = b.empties(sets, shape, bf);
  std::vector<Tensor> lse;
  std::vector<AttentionGrads> grads(static_cast<size_t>(sets));
  for (int s = 0; s < sets; ++s) {
    lse.push_back(b.empty({B, H, L}, DType::f32));
    grads[size_t(s)] = {b.empty(shape, bf), b.empty(shape, bf), b.empty(shape, bf), {}, {}};
    attention_into(out[s], lse[s], q[s], k[s], v[s], o, AttentionStrategy::Flash, b.stream);
  }
  b.sync();
  const double flops = 4.0 * B * H * L * L * D / 2 * 2.5;
  run_case(
      b, op, shape, bytes_one * 8, flops, sets,
      [&](int s) {
        attention_backward_into(grads[size_t(s)], dout[s], q[s], k[s], v[s], out[s], lse[s], o,
                                AttentionStrategy::Flash, b.stream);
      },
      [&] {
        b.sync();
        const int64_t rows = 16;
        auto host = [](const Tensor& t) { return t.to_host().contiguous(); };
        auto tail = [&](const Tensor& t) {
          return host(t.slice(0, 0, 1).slice(1, 0, 1).slice(2, L - rows, L));
        };
        const Tensor qh = tail(q[0]), douth = tail(dout[0]);
        const Tensor kh = host(k[0].slice(0, 0, 1).slice(1, 0, 1));
        const Tensor vh = host(v[0].slice(0, 0, 1).slice(1, 0, 1));
        AttentionOptions lo = o;
        lo.set_return_lse();
        const AttentionResult fwd = attention(qh, kh, vh, lo);
        const AttentionGrads ref = attention_backward(douth, qh, kh, vh, fwd.out, fwd.lse, lo);
        const double e_dq = bench::relative_l2_error(tail(grads[0].dq), ref.dq);
        const double e_dv =
            bench::relative_l2_error(tail(grads[0].dv), ref.dv.slice(2, L - rows, L).contiguous());
        return std::max(e_dq, e_dv);
      });
}

// The Hopper forward's cases (Flash with plain options on sm_90: wgmma + TMA), at fixed
// shapes: B4 H16 L4096 D128 causal and not, B2 H16 L8192 D64 causal, B4 H8 L4096 D256
// causal. The row names the kernel the plan reports ([wgmma] or [mma.sync] elsewhere).
void bench_hopper(Bench& b) {
  struct HopperCase {
    int64_t B, H, L, D;
    bool causal;
  };
  const HopperCase cases[] = {{4, 16, 4096, 128, true},
                              {4, 16, 4096, 128, false},
                              {2, 16, 8192, 64, true},
                              {4, 8, 4096, 256, true}};
  const DType bf = DType::bf16;
  for (const HopperCase& c : cases) {
    const Shape shape{c.B, c.H, c.L, c.D};
    const AttentionOptions o = AttentionOptions{}.set_causal(c.causal);
    const AttentionPlan plan =
        plan_attention(shape, shape, shape, bf, o, AttentionStrategy::Flash, b.dev);
    const std::string op = std::string("attention hopper fwd ") + (c.causal ? "causal " : "") +
                           "D" + std::to_string(c.D) + (plan.flash_wgmma ? " [wgmma]" : " [mma.sync]");
    if (!b.wanted(op)) continue;
    const double bytes_one = double(c.B) * c.H * c.L * c.D * 2;
    const int sets = b.sets_for(size_t(bytes_one * 4));
    const std::vector<Tensor> q = b.normals(sets, shape, bf, 11), k = b.normals(sets, shape, bf, 12),
                              v = b.normals(sets, shape, bf, 13);
    const std::vector<Tensor> out = b.empties(sets, shape, bf);
    std::vector<Tensor> lse;
    for (int s = 0; s < sets; ++s) lse.push_back(b.empty({c.B, c.H, c.L}, DType::f32));
    b.sync();
    const double flops = 4.0 * c.B * c.H * c.L * c.L * c.D / (c.causal ? 2 : 1);
    run_case(
        b, op, shape, bytes_one * 4, flops, sets,
        [&](int s) {
          attention_into(out[s], lse[s], q[s], k[s], v[s], o, AttentionStrategy::Flash, b.stream);
        },
        [&] {
          b.sync();
          return check_tail(q[0], k[0], v[0], out[0], o, 1);
        });
  }
}

void bench_decode(Bench& b) {
  const int64_t B = b.size("attn-decode-batch"), Hq = b.size("attn-decode-heads"),
                Hkv = b.size("attn-decode-kv-heads"), S = b.size("attn-decode-len"), D = 128;
  const DType bf = DType::bf16;
  const Shape kv_shape{B, Hkv, S, D};
  const double kv_bytes = double(B) * Hkv * S * D * 2 * 2;
  const int sets = b.sets_for(size_t(kv_bytes));
  const std::vector<Tensor> q = b.normals(sets, {B, Hq, 1, D}, bf, 5),
                            k = b.normals(sets, kv_shape, bf, 6),
                            v = b.normals(sets, kv_shape, bf, 7);
  const std::vector<Tensor> out = b.empties(sets, {B, Hq, 1, D}, bf);
  b.sync();
  const std::string op = "attention decode SplitKv [GB/s of K+V]";
  if (!b.wanted(op)) return;
  const AttentionOptions o = AttentionOptions{}.set_causal();
  b.run(
      op, kv_shape, bf, kv_bytes, sets,
      [&](int s) {
        attention_into(out[s], Tensor(), q[s], k[s], v[s], o, AttentionStrategy::SplitKv, b.stream);
      },
      [&] {
        b.sync();
        return check_tail(q[0], k[0], v[0], out[0], o, Hq / Hkv);
      },
      2e-2);
}

// The alternatives of attention/cuda/tuning.h, each timed against the default in one run.
void run_variants(Bench& b) {
  using rudnn::attn::cuda::kernel_tuning;
  using rudnn::attn::cuda::KernelTuning;
  const KernelTuning defaults = kernel_tuning();
  struct Variant {
    std::string label;
    void (*set)(KernelTuning&);
  };
  const Variant variants[] = {
      {"CUDA-core SplitKv", [](KernelTuning& t) { t.split_kv_tensor_cores = false; }},
      {"partitions of 256 keys", [](KernelTuning& t) { t.split_kv_keys = 256; }},
      {"partitions of 512 keys", [](KernelTuning& t) { t.split_kv_keys = 512; }},
      {"partitions of 2048 keys", [](KernelTuning& t) { t.split_kv_keys = 2048; }},
      {"partitions of 4096 keys", [](KernelTuning& t) { t.split_kv_keys = 4096; }},
  };
  for (const Variant& v : variants) {
    kernel_tuning() = defaults;
    v.set(kernel_tuning());
    b.variant = v.label;
    b.variant_ops = {"attention decode SplitKv [GB/s of K+V]"};
    bench_decode(b);
  }
  kernel_tuning() = defaults;
  b.variant.clear();
  b.variant_ops.clear();
}

bench::Family make_family() {
  bench::Family f;
  f.sizes = {{"attn-batch", 4, "attention prefill: batch B"},
             {"attn-heads", 16, "attention prefill: heads H"},
             {"attn-len", 4096, "attention prefill: length L"},
             {"attn-dim", 128, "attention prefill: head size D"},
             {"attn-decode-batch", 64, "attention decode: batch B"},
             {"attn-decode-heads", 32, "attention decode: query heads Hq"},
             {"attn-decode-kv-heads", 8, "attention decode: KV heads Hkv"},
             {"attn-decode-len", 4096, "attention decode: cached keys S"}};
  f.run = [](Bench& b) {
    g_flops.clear();
    bench_prefill(b);
    bench_hopper(b);
    bench_hopper_backward(b);
    bench_decode(b);
    if (g_flops.empty()) return;
    std::printf("\n%-36s %-20s %10s %10s\n", "attention op", "B x H x L x D", "ms", "TFLOP/s");
    for (const Flops& f : g_flops) {
      const double tflops = f.median_ms > 0 ? f.flops / (f.median_ms * 1e-3) / 1e12 : 0;
      std::printf("%-36s %-20s %10.4f %10.1f\n", f.op.c_str(), f.shape.c_str(), f.median_ms,
                  tflops);
    }
  };
  f.run_variants = run_variants;
  return f;
}

}  // namespace

RUDNN_BENCH_FAMILY(attention, make_family);
