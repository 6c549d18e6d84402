// The gated delta family's benchmark cases (issue 14 / ANCHORS.md): decode, one token per
// sequence, B256 Hv32 Hk16 K=V=128, bf16 q/k/v, F32 state. The figure that matters is the
// state read + write bandwidth against the copy bandwidth of the same run (the GB/s column
// counts the state twice plus q, k, v, g, beta and y once).
//
// - gated_delta decode: a fresh final state per call.
// - gated_delta_slots decode: the pool [B,Hv,Dv,Dk] updated in place by slot ids.
// - gated_delta prefill / backward: the recurrence (not the chunked form) over T steps,
//   B = --gdn-bwd-batch, T = --gdn-steps, forward, and backward from dy and dstate. Bytes:
//   every operand and result once (the backward's workspace traffic is not counted).
//
// - chunk_gated_delta_rule: the chunked prefill at the shapes (see bench_chunked), and
//   its backward (bench_chunked_backward).
//
// Check: the first and last sequences against the CPU path (the float64 reference).
//
// Shape options: --gdn-batch B --gdn-value-heads Hv --gdn-key-heads Hk --gdn-key-dim K
// --gdn-value-dim V --gdn-bwd-batch --gdn-steps.
#include <cuda_runtime.h>
#include <rudnn/rudnn.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "gated_delta/cuda/tuning.h"
#include "harness.h"

namespace {

using namespace rudnn;
using rudnn::bench::Bench;

struct Dims {
  int64_t b, hv, hk, k, v;
};

Dims dims_of(const Bench& b) {
  return {b.size("gdn-batch"), b.size("gdn-value-heads"), b.size("gdn-key-heads"),
          b.size("gdn-key-dim"), b.size("gdn-value-dim")};
}

struct Inputs {
  Tensor q, k, v, g, beta;
};

Inputs make_inputs(const Bench& b, const Dims& d, uint64_t seed) {
  const DType bf = DType::bf16;
  Inputs in;
  in.q = b.normal({d.b, 1, d.hk, d.k}, bf, seed, 0.0f, 0.09f);
  in.k = b.normal({d.b, 1, d.hk, d.k}, bf, seed + 1, 0.0f, 0.09f);
  in.v = b.normal({d.b, 1, d.hv, d.v}, bf, seed + 2);
  in.g = b.normal({d.b, 1, d.hv}, DType::f32, seed + 3, 0.9f, 0.02f);
  in.beta = b.normal({d.b, 1, d.hv}, bf, seed + 4, 0.5f, 0.1f);
  return in;
}

double bytes_of(const Dims& d) {
  const double state = double(d.b) * d.hv * d.v * d.k * 4;
  const double io = double(d.b) * (2 * d.hk * d.k + 2 * d.hv * d.v) * 2 + double(d.b) * d.hv * 6;
  return 2 * state + io;
}

// Prefill over T steps: q, k, v, y (bf16), g (f32), beta (bf16), state in and out (f32).
double prefill_bytes(const Dims& d, int64_t batch, int64_t steps) {
  const double state = double(batch) * d.hv * d.v * d.k * 4;
  const double tokens = double(batch) * steps;
  return 2 * state + tokens * ((2 * d.hk * d.k + 2 * d.hv * d.v) * 2 + d.hv * 6);
}

// Sequences [b0, b1) through the CPU path vs the GPU's y.
double check_rows(const Inputs& in, const Tensor& state, const Tensor& y, int64_t b0, int64_t b1) {
  auto host = [&](const Tensor& t) { return t.slice(0, b0, b1).to_host().contiguous(); };
  const GatedDeltaResult r =
      gated_delta(host(in.q), host(in.k), host(in.v), host(in.g), host(in.beta), host(state));
  return bench::relative_l2_error(host(y), r.y);
}

void bench_decode(Bench& b) {
  const Dims d = dims_of(b);
  const Shape state_shape{d.b, d.hv, d.v, d.k};
  const size_t set_bytes = size_t(bytes_of(d));
  const int sets = b.sets_for(set_bytes);
  std::vector<Inputs> ins;
  for (int s = 0; s < sets; ++s) ins.push_back(make_inputs(b, d, 10 + 8 * s));
  const std::vector<Tensor> states = b.normals(sets, state_shape, DType::f32, 100);
  const Shape shape{d.b, d.hv, d.v, d.k};

  if (b.wanted("gated_delta decode")) {
    Tensor y0;
    b.run(
        "gated_delta decode", shape, DType::bf16, bytes_of(d), sets,
        [&](int s) {
          const Inputs& in = ins[s];
          GatedDeltaResult r = gated_delta(in.q, in.k, in.v, in.g, in.beta, states[s], b.stream);
          if (s == 0 && !y0.defined()) y0 = r.y;
        },
        [&] {
          b.sync();
          return b.ends(d.b, [&](int64_t r0, int64_t r1) {
            return check_rows(ins[0], states[0], y0, r0, r1);
          });
        },
        2e-2);
  }

  if (b.wanted("gated_delta_slots decode")) {
    std::vector<int64_t> ids(size_t(d.b));
    for (int64_t i = 0; i < d.b; ++i) ids[size_t(i)] = d.b - 1 - i;  // distinct, not the identity
    const Tensor slots = Tensor::from_host(ids, {d.b}).to(b.dev, b.stream);
    // The pools are updated in place on every call: the check runs on the first call alone,
    // against a copy of the pool taken before it.
    const Tensor pool0_before = states[0].to_host(b.stream);
    Tensor y0;
    b.run(
        "gated_delta_slots decode", shape, DType::bf16, bytes_of(d), sets,
        [&](int s) {
          const Inputs& in = ins[s];
          Tensor y = gated_delta_slots(in.q, in.k, in.v, in.g, in.beta, states[s], slots, b.stream);
          if (s == 0 && !y0.defined()) y0 = y;
        },
        [&] {
          b.sync();
          // Sequence i started from slot ids[i] of the pool before the first call.
          double err = 0;
          for (int64_t i : {int64_t(0), d.b - 1}) {
            const int64_t id = ids[size_t(i)];
            auto host = [&](const Tensor& t) {
              return t.slice(0, i, i + 1).to_host().contiguous();
            };
            const Inputs& in = ins[0];
            const GatedDeltaResult r =
                gated_delta(host(in.q), host(in.k), host(in.v), host(in.g), host(in.beta),
                            pool0_before.slice(0, id, id + 1).contiguous());
            err = bench::worst(err, bench::relative_l2_error(host(y0), r.y));
          }
          return err;
        },
        2e-2);
  }
}

void bench_prefill_and_backward(Bench& b, const Dims& d) {
  const int64_t B = b.size("gdn-bwd-batch"), T = b.size("gdn-steps");
  Dims pd = d;
  pd.b = B;
  const DType bf = DType::bf16;
  Inputs in;
  in.q = b.normal({B, T, d.hk, d.k}, bf, 501, 0.0f, 0.09f);
  in.k = b.normal({B, T, d.hk, d.k}, bf, 502, 0.0f, 0.09f);
  in.v = b.normal({B, T, d.hv, d.v}, bf, 503);
  in.g = b.normal({B, T, d.hv}, DType::f32, 504, 0.95f, 0.01f);
  in.beta = b.normal({B, T, d.hv}, bf, 505, 0.5f, 0.1f);
  const Tensor state = b.normal({B, d.hv, d.v, d.k}, DType::f32, 506, 0.0f, 0.05f);
  const Tensor dy = b.normal({B, T, d.hv, d.v}, bf, 507);
  const Tensor dstate = b.normal({B, d.hv, d.v, d.k}, DType::f32, 508, 0.0f, 0.05f);
  const Shape shape{B, T, d.hv, d.k};
  const double fwd_bytes = prefill_bytes(pd, B, T);
  auto host = [](const Tensor& t, int64_t r0, int64_t r1) {
    return t.slice(0, r0, r1).to_host().contiguous();
  };
  if (b.wanted("gated_delta prefill")) {
    Tensor y0;
    b.run(
        "gated_delta prefill", shape, bf, fwd_bytes, 1,
        [&](int) {
          GatedDeltaResult r = gated_delta(in.q, in.k, in.v, in.g, in.beta, state, b.stream);
          if (!y0.defined()) y0 = r.y;
        },
        [&] {
          b.sync();
          return b.ends(B, [&](int64_t r0, int64_t r1) {
            const GatedDeltaResult r =
                gated_delta(host(in.q, r0, r1), host(in.k, r0, r1), host(in.v, r0, r1),
                            host(in.g, r0, r1), host(in.beta, r0, r1), host(state, r0, r1));
            return bench::relative_l2_error(host(y0, r0, r1), r.y);
          });
        },
        2e-2);
  }
  if (b.wanted("gated_delta backward")) {
    GatedDeltaGrads g0;
    b.run(
        "gated_delta backward", shape, bf, 2 * fwd_bytes, 1,
        [&](int) {
          GatedDeltaGrads g = gated_delta_backward(dy, dstate, in.q, in.k, in.v, in.g, in.beta,
                                                   state, {}, b.stream);
          if (!g0.dq.defined()) g0 = g;
        },
        [&] {
          b.sync();
          return b.ends(B, [&](int64_t r0, int64_t r1) {
            const GatedDeltaGrads r = gated_delta_backward(
                host(dy, r0, r1), host(dstate, r0, r1), host(in.q, r0, r1), host(in.k, r0, r1),
                host(in.v, r0, r1), host(in.g, r0, r1), host(in.beta, r0, r1),
                host(state, r0, r1));
            double err = 0;
            err = bench::worst(err, bench::relative_l2_error(host(g0.dq, r0, r1), r.dq));
            err = bench::worst(err, bench::relative_l2_error(host(g0.dk, r0, r1), r.dk));
            err = bench::worst(err, bench::relative_l2_error(host(g0.dv, r0, r1), r.dv));
            err = bench::worst(err, bench::relative_l2_error(host(g0.dstate, r0, r1), r.dstate));
            return err;
          });
        },
        2e-2);
  }
}

// The chunked form's benchmark inputs (spec 000's [B,H,T,D] form, K = V = 128, bf16
// q/k/v/beta, F32 log_decay and state), drawn from seeds seed .. seed + 5, and the bytes of one
// forward: every operand and result once (the workspace's W, U, Q K^T traffic not counted).
constexpr int64_t kChunkedDim = 128, kChunkedChunk = 64;
GatedDeltaInput chunked_input(Bench& b, int64_t B, int64_t H, int64_t T, uint64_t seed) {
  const int64_t K = kChunkedDim, V = kChunkedDim;
  const DType bf = DType::bf16;
  GatedDeltaInput in;
  in.query = b.normal({B, H, T, K}, bf, seed, 0.0f, 0.09f);
  in.key = b.normal({B, H, T, K}, bf, seed + 1, 0.0f, 0.09f);
  in.value = b.normal({B, H, T, V}, bf, seed + 2);
  in.beta = b.normal({B, H, T}, bf, seed + 3, 0.5f, 0.1f);
  in.log_decay = b.normal({B, H, T}, DType::f32, seed + 4, -0.05f, 0.02f);
  in.initial_state = b.normal({B, H, K, V}, DType::f32, seed + 5, 0.0f, 0.05f);
  in.query_scale = 0.088f;
  return in;
}
double chunked_forward_bytes(int64_t B, int64_t H, int64_t T) {
  const int64_t K = kChunkedDim, V = kChunkedDim;
  return double(B) * H * T * ((2 * K + 2 * V) * 2 + 2 + 4) + 2.0 * B * H * K * V * 4;
}
// Batch entry bb, head hh of a [B, H, ...] tensor, still on its device.
Tensor entry_head(const Tensor& t, int64_t bb, int64_t hh) {
  return t.slice(0, bb, bb + 1).slice(1, hh, hh + 1).contiguous();
}
// The same of every operand of a chunked input, copied to the host when `host`.
GatedDeltaInput entry_head(const GatedDeltaInput& in, int64_t bb, int64_t hh, bool host = false) {
  GatedDeltaInput h = in;
  for (Tensor* t : {&h.query, &h.key, &h.value, &h.beta, &h.log_decay, &h.initial_state})
    *t = host ? entry_head(*t, bb, hh).to_host() : entry_head(*t, bb, hh);
  return h;
}

// The chunked prefill (chunk_gated_delta_rule, chunk 64) at the two shapes. Check: the
// first and last (sequence, head) against the CPU recurrence (float64).
void bench_chunked(Bench& b, const std::string& op, int64_t B, int64_t H, int64_t T) {
  if (!b.wanted(op)) return;
  const GatedDeltaInput in = chunked_input(b, B, H, T, 601);
  const int64_t K = kChunkedDim, chunk = kChunkedChunk;
  const DType bf = DType::bf16;
  const double bytes = chunked_forward_bytes(B, H, T);
  Tensor y0;
  b.run(
      op, {B, H, T, K}, bf, bytes, 1,
      [&](int) {
        GatedDeltaOutput r = chunk_gated_delta_rule(in, chunk, b.stream);
        if (!y0.defined()) y0 = r.output;
      },
      [&] {
        b.sync();
        double err = 0;
        for (auto [bb, hh] : {std::pair<int64_t, int64_t>{0, 0}, {B - 1, H - 1}}) {
          const GatedDeltaOutput r = gated_delta_rule(entry_head(in, bb, hh, true));
          err = bench::worst(err,
                             bench::relative_l2_error(entry_head(y0, bb, hh).to_host(), r.output));
        }
        return err;
      },
      2e-2);
}

// chunk_gated_delta_rule_backward at bench_chunked's inputs (chunk 64, bf16, upstream gradients
// of the output and the final state): the forward pass again and the chunked backward. Bytes:
// the forward's inputs and every gradient once. Check: the first and last (sequence, head)
// against the recurrence's backward on the GPU (gated_delta_rule_backward).
void bench_chunked_backward(Bench& b, const std::string& op, int64_t B, int64_t H, int64_t T) {
  if (!b.wanted(op)) return;
  const GatedDeltaInput in = chunked_input(b, B, H, T, 621);
  const int64_t K = kChunkedDim, V = kChunkedDim, chunk = kChunkedChunk;
  const DType bf = DType::bf16;
  const Tensor dout = b.normal({B, H, T, V}, bf, 627);
  const Tensor dfinal = b.normal({B, H, K, V}, DType::f32, 628, 0.0f, 0.05f);
  const double bytes = 2 * chunked_forward_bytes(B, H, T) + double(B) * H * T * V * 2;
  GatedDeltaInputGrads g0;
  b.run(
      op, {B, H, T, K}, bf, bytes, 1,
      [&](int) {
        GatedDeltaInputGrads r = chunk_gated_delta_rule_backward(dout, dfinal, in, chunk, {}, b.stream);
        if (!g0.dquery.defined()) g0 = r;
      },
      [&] {
        b.sync();
        double err = 0;
        for (auto [bb, hh] : {std::pair<int64_t, int64_t>{0, 0}, {B - 1, H - 1}}) {
          auto one = [&](const Tensor& t) { return entry_head(t, bb, hh); };
          const GatedDeltaInputGrads r =
              gated_delta_rule_backward(one(dout), one(dfinal), entry_head(in, bb, hh));
          for (auto [got, want] : {std::pair{&g0.dquery, &r.dquery}, {&g0.dkey, &r.dkey},
                                   {&g0.dvalue, &r.dvalue}, {&g0.dbeta, &r.dbeta},
                                   {&g0.dlog_decay, &r.dlog_decay},
                                   {&g0.dinitial_state, &r.dinitial_state}})
            err = bench::worst(err, bench::relative_l2_error(one(*got).to_host(), want->to_host()));
        }
        return err;
      },
      3e-2);
}

// Spec 003's chunked prefill (chunk_gated_delta: [B,T,H,D] operands read through strides, the
// gate itself, a [B,H,V,K] F32 state), chunk 64, the first shape of bench_chunked: the cost of
// fla's layout against spec 000's. Check as bench_chunked (against gated_delta).
void bench_chunked_bthd(Bench& b, const std::string& op, int64_t B, int64_t H, int64_t T) {
  if (!b.wanted(op)) return;
  const int64_t K = 128, V = 128, chunk = 64;
  const DType bf = DType::bf16;
  const Tensor q = b.normal({B, T, H, K}, bf, 611, 0.0f, 0.09f);
  const Tensor k = b.normal({B, T, H, K}, bf, 612, 0.0f, 0.09f);
  const Tensor v = b.normal({B, T, H, V}, bf, 613);
  const Tensor g = b.normal({B, T, H}, bf, 614, 0.95f, 0.02f);
  const Tensor beta = b.normal({B, T, H}, bf, 615, 0.5f, 0.1f);
  const Tensor state = b.normal({B, H, V, K}, DType::f32, 616, 0.0f, 0.05f);
  const double tokens = double(B) * H * T;
  const double bytes = tokens * ((2 * K + 2 * V) * 2 + 2 + 2) + 2.0 * B * H * K * V * 4;
  Tensor y0;
  b.run(
      op, {B, T, H, K}, bf, bytes, 1,
      [&](int) {
        GatedDeltaResult r = chunk_gated_delta(q, k, v, g, beta, state, chunk, b.stream);
        if (!y0.defined()) y0 = r.y;
      },
      [&] {
        b.sync();
        double err = 0;
        for (auto [bb, hh] : {std::pair<int64_t, int64_t>{0, 0}, {B - 1, H - 1}}) {
          auto one = [&](const Tensor& t, int64_t head_axis) {
            return t.slice(0, bb, bb + 1).slice(head_axis, hh, hh + 1).to_host().contiguous();
          };
          const GatedDeltaResult r =
              gated_delta(one(q, 2), one(k, 2), one(v, 2), one(g, 2), one(beta, 2), one(state, 1));
          err = bench::worst(err, bench::relative_l2_error(one(y0, 2), r.y));
        }
        return err;
      },
      2e-2);
}

void bench_all(Bench& b) {
  bench_decode(b);
  bench_prefill_and_backward(b, dims_of(b));
  bench_chunked(b, "chunk_gated_delta_rule B4 T4096 H16", 4, 16, 4096);
  bench_chunked(b, "chunk_gated_delta_rule B1 T32768 H32", 1, 32, 32768);
  bench_chunked_bthd(b, "chunk_gated_delta (spec 003 layout) B4 T4096 H16", 4, 16, 4096);
  bench_chunked_backward(b, "chunk_gated_delta_rule backward B4 T4096 H16", 4, 16, 4096);
}

// The chunked kernels' launch choices (gdn::cuda::ChunkedTuning), each timed against the
// default in one run.
void run_variants(Bench& b) {
  using gdn::cuda::chunked_tuning;
  using gdn::cuda::ChunkedTuning;
  const ChunkedTuning defaults = chunked_tuning();
  struct Variant {
    std::string label;
    void (*set)(ChunkedTuning&);
  };
  const Variant variants[] = {
      {"state pass 1 stage", [](ChunkedTuning& t) { t.state_stages = 1; }},
      {"state pass 2 stages", [](ChunkedTuning& t) { t.state_stages = 2; }},
      {"state pass 3 stages", [](ChunkedTuning& t) { t.state_stages = 3; }},
      {"state pass 32 columns", [](ChunkedTuning& t) { t.state_pass_cols = 32; }},
      {"state pass 64 columns", [](ChunkedTuning& t) { t.state_pass_cols = 64; }},
      {"reverse pass 32 columns", [](ChunkedTuning& t) { t.reverse_pass_cols = 32; }},
      {"reverse pass 64 columns", [](ChunkedTuning& t) { t.reverse_pass_cols = 64; }},
  };
  for (const Variant& v : variants) {
    chunked_tuning() = defaults;
    v.set(chunked_tuning());
    b.variant = v.label;
    b.variant_ops = {"chunk_gated_delta_rule B4 T4096 H16", "chunk_gated_delta_rule B1 T32768 H32",
                     "chunk_gated_delta_rule backward B4 T4096 H16"};
    bench_chunked(b, "chunk_gated_delta_rule B4 T4096 H16", 4, 16, 4096);
    bench_chunked(b, "chunk_gated_delta_rule B1 T32768 H32", 1, 32, 32768);
    bench_chunked_backward(b, "chunk_gated_delta_rule backward B4 T4096 H16", 4, 16, 4096);
  }
  chunked_tuning() = defaults;
  b.variant.clear();
  b.variant_ops.clear();
}

bench::Family make_family() {
  bench::Family f;
  f.sizes = {{"gdn-batch", 256, "gated delta decode: sequences B"},
             {"gdn-value-heads", 32, "gated delta: value heads Hv"},
             {"gdn-key-heads", 16, "gated delta: key heads Hk (Hv a multiple)"},
             {"gdn-key-dim", 128, "gated delta: key dim K"},
             {"gdn-value-dim", 128, "gated delta: value dim V"},
             {"gdn-bwd-batch", 4, "gated delta prefill/backward: sequences B"},
             {"gdn-steps", 256, "gated delta prefill/backward: steps T"}};
  f.run = bench_all;
  f.run_variants = run_variants;
  return f;
}

}  // namespace

RUDNN_BENCH_FAMILY(gated_delta, make_family);
