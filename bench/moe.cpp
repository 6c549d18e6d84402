// The MoE family's benchmark cases (the shapes of issue 12 / ANCHORS.md): T = 8192 tokens,
// E = 64 experts, top-8, H = 2048, I = 1408, bf16, random (so roughly balanced) logits.
//
// - moe forward: route -> dispatch -> experts -> combine, TensorCore (Auto) strategy.
//   Reported with the TFLOP/s of the three expert GEMMs (2 * T * k * 3 * H * I flops) on
//   stderr; the GB/s column counts the expert weights and the dispatched activations once.
// - moe experts (dispatched): the expert projections alone on dispatched rows (the three
//   grouped GEMMs and the SwiGLU kernel between them).
// - moe decode T=1/4/16/32/64: the whole forward (Auto: decode.cu's kernels, no dispatch,
//   up to T * k = 64 rows; the tensor-core GEMMs beyond); GB/s counts
//   the weights of the distinct selected experts (read back once before timing), the figure
//   the anchor compares. "moe decode dispatched": route -> dispatch -> forward_dispatched
//   (Auto) -> combine, the same bits by a longer way; "moe decode graph": the forward
//   replayed from a CUDA graph (no host launch work). --variants times decode.cu's choices
//   (moe/cuda/decode_tuning.h): the combine folded in at every T or at none, plain launches.
// - moe training: moe_forward + moe_backward (all gradients), TensorCore forward and backward.
//
// Checks: the TensorCore results against the Scalar strategy on the same device (relative L2
// error), since the CPU reference of this size takes minutes.
//
// Shape options: --moe-tokens T --moe-experts E --moe-top-k K --moe-hidden H --moe-inter I.
#include <cuda_runtime.h>
#include <rudnn/rudnn.h>

#include <cstdio>
#include <set>
#include <string>
#include <vector>

#include "harness.h"
#include "moe/cuda/decode_tuning.h"

namespace {

using namespace rudnn;
using rudnn::bench::Bench;

struct Shape5 {
  int64_t t, e, k, h, i;
};

Shape5 shape_of(const Bench& b) {
  return {b.size("moe-tokens"), b.size("moe-experts"), b.size("moe-top-k"), b.size("moe-hidden"),
          b.size("moe-inter")};
}

void report_tflops(const Bench& b, const char* what, double flops) {
  if (b.table.rows().empty()) return;
  const double ms = b.table.rows().back().timing.median_ms;
  if (ms > 0) std::fprintf(stderr, "  %s: %.1f TFLOP/s (expert GEMMs)\n", what, flops / ms * 1e-9);
}

// Both read back on the bench's stream: `ref` is computed there just before, and the bench's
// stream is non-blocking, so a copy on the default stream would race the kernels making it.
double error_vs(const Bench& b, const Tensor& got, const Tensor& ref) {
  return bench::relative_l2_error(got.to_host(b.stream), ref.to_host(b.stream));
}

void bench_forward(Bench& b) {
  const Shape5 s = shape_of(b);
  const DType bf = DType::bf16;
  const Tensor input = b.normal({s.t, s.h}, bf, 1);
  const Tensor logits = b.normal({s.t, s.e}, bf, 2);
  const float ws = 0.02f;
  const moe::SwiGluExperts experts(b.normal({s.e, s.i, s.h}, bf, 3, 0.0f, ws),
                                   b.normal({s.e, s.i, s.h}, bf, 4, 0.0f, ws),
                                   b.normal({s.e, s.h, s.i}, bf, 5, 0.0f, ws));
  const moe::RoutingOptions ro{s.k, true};
  const double flops = 2.0 * s.t * s.k * 3.0 * s.h * s.i;
  const double weight_bytes = 3.0 * s.e * s.h * s.i * 2;
  const double act_bytes = 2.0 * s.t * s.k * (2.0 * s.h + 3.0 * s.i) * 2;
  const Shape shape{s.t, s.e, s.k, s.h, s.i};
  if (b.wanted("moe forward")) {
    Tensor out;
    b.run(
        "moe forward", shape, bf, weight_bytes + act_bytes, 1,
        [&](int) {
          out = experts.forward_with_strategy(input, logits, ro, moe::GroupedStrategy::Auto,
                                              b.stream);
        },
        [&] {
          return error_vs(b, out, experts.forward_with_strategy(
                                   input, logits, ro, moe::GroupedStrategy::Scalar, b.stream));
        },
        2e-2);
    report_tflops(b, "moe forward", flops);
  }
  if (b.wanted("moe experts (dispatched)")) {
    const auto tokens = moe::route(logits, ro, b.stream).dispatch(input, b.stream);
    Tensor out;
    b.run(
        "moe experts (dispatched)", shape, bf, weight_bytes + act_bytes, 1,
        [&](int) {
          out = experts.forward_dispatched_with_strategy(tokens, moe::GroupedStrategy::Auto,
                                                         b.stream);
        },
        [&] {
          return error_vs(b, out, experts.forward_dispatched_with_strategy(
                                   tokens, moe::GroupedStrategy::Scalar, b.stream));
        },
        2e-2);
    report_tflops(b, "moe experts (dispatched)", flops);
  }
  if (b.wanted("moe training")) {
    moe::MoeOptions o;
    o.selection.softmax = ro;
    o.weights.renormalize = true;
    o.forward = o.backward = moe::GroupedStrategy::Auto;
    const Tensor grad = b.normal({s.t, s.h}, bf, 6);
    moe::MoeGradients g;
    b.run(
        "moe training", shape, bf, 3 * (weight_bytes + act_bytes), 1,
        [&](int) {
          const auto f = moe::moe_forward(input, logits, {}, experts.gate(), experts.up(),
                                          experts.down(), o, b.stream);
          g = moe::moe_backward(f.state, grad, b.stream);
        },
        [&] {
          moe::MoeOptions scalar = o;
          scalar.forward = scalar.backward = moe::GroupedStrategy::Scalar;
          const auto f = moe::moe_forward(input, logits, {}, experts.gate(), experts.up(),
                                          experts.down(), scalar, b.stream);
          const auto want = moe::moe_backward(f.state, grad, b.stream);
          return bench::worst(error_vs(b, g.input, want.input), error_vs(b, g.gate, want.gate));
        },
        5e-2);
    report_tflops(b, "moe training (3x forward flops)", 3 * flops);
  }
}

void bench_decode(Bench& b) {
  const Shape5 s = shape_of(b);
  const DType bf = DType::bf16;
  const float ws = 0.02f;
  const moe::SwiGluExperts experts(b.normal({s.e, s.i, s.h}, bf, 13, 0.0f, ws),
                                   b.normal({s.e, s.i, s.h}, bf, 14, 0.0f, ws),
                                   b.normal({s.e, s.h, s.i}, bf, 15, 0.0f, ws));
  for (int64_t t : {1, 4, 16, 32, 64}) {
    const std::string op = "moe decode T=" + std::to_string(t);
    const std::string unfused_op = "moe decode dispatched T=" + std::to_string(t);
    const std::string graph_op = "moe decode graph T=" + std::to_string(t);
    if (!b.wanted(op) && !b.wanted(unfused_op) && !b.wanted(graph_op)) continue;
    const Tensor input = b.normal({t, s.h}, bf, 20 + t);
    const Tensor logits = b.normal({t, s.e}, bf, 40 + t);
    const moe::RoutingOptions ro{s.k, true};
    const auto ids =
        moe::route(logits, ro, b.stream).expert_indices().to_vector<uint32_t>(b.stream);
    const std::set<uint32_t> distinct(ids.begin(), ids.end());
    const double bytes = static_cast<double>(distinct.size()) * 3.0 * s.h * s.i * 2;
    Tensor out;
    const auto check = [&] {
      return error_vs(b, out, experts.forward_with_strategy(input, logits, ro,
                                                         moe::GroupedStrategy::Scalar, b.stream));
    };
    if (b.wanted(op)) {
      b.run(
          op, {t, s.e, s.k, s.h, s.i}, bf, bytes, 1,
          [&](int) {
            out = experts.forward_with_strategy(input, logits, ro, moe::GroupedStrategy::Auto,
                                                b.stream);
          },
          check, 2e-2);
    }
    // The same forward captured once into a CUDA graph and replayed (its output allocated
    // and freed inside the graph): the device time without the host's launch work, which
    // the eager rows include when the host enqueues slower than the device runs.
    if (b.wanted(graph_op)) {
      cudaGraph_t graph = nullptr;
      cudaGraphExec_t exec = nullptr;
      b.run(
          graph_op, {t, s.e, s.k, s.h, s.i}, bf, bytes, 1,
          [&](int) {
            if (exec == nullptr) {  // the first call captures (inside run: errors make a row)
              b.sync();
              RUDNN_BENCH_CUDA(cudaStreamBeginCapture(b.cs, cudaStreamCaptureModeThreadLocal));
              {
                const Tensor captured = experts.forward_with_strategy(
                    input, logits, ro, moe::GroupedStrategy::Auto, b.stream);
              }
              RUDNN_BENCH_CUDA(cudaStreamEndCapture(b.cs, &graph));
              RUDNN_BENCH_CUDA(cudaGraphInstantiate(&exec, graph, 0));
            }
            RUDNN_BENCH_CUDA(cudaGraphLaunch(exec, b.cs));
          },
          nullptr, 0);
      (void)cudaStreamSynchronize(b.cs);
      if (exec) cudaGraphExecDestroy(exec);
      if (graph) cudaGraphDestroy(graph);
    }
    // The same forward through the public pieces (a dispatch and a combine kernel more).
    if (b.wanted(unfused_op)) {
      b.run(
          unfused_op, {t, s.e, s.k, s.h, s.i}, bf, bytes, 1,
          [&](int) {
            const auto tokens = moe::route(logits, ro, b.stream).dispatch(input, b.stream);
            out = tokens.combine(
                experts.forward_dispatched_with_strategy(tokens, moe::GroupedStrategy::Auto,
                                                         b.stream),
                b.stream);
          },
          check, 2e-2);
    }
  }
}

void run_all(Bench& b) {
  bench_forward(b);
  release_cached_memory(b.dev);
  bench_decode(b);
  release_cached_memory(b.dev);
}

// decode.cu's launch choices, each timed against the default in one run.
void run_variants(Bench& b) {
  using moe::cuda::decode_tuning;
  using moe::cuda::DecodeTuning;
  const DecodeTuning defaults = decode_tuning();
  struct Variant {
    std::string label;
    void (*set)(DecodeTuning&);
  };
  const Variant variants[] = {
      {"combine fused at every T", [](DecodeTuning& t) { t.fused_tokens = 1 << 20; }},
      {"combine kernel at every T", [](DecodeTuning& t) { t.fused_tokens = 0; }},
      {"plain launches", [](DecodeTuning& t) { t.dependent_launch = false; }},
      {"1 feature a warp", [](DecodeTuning& t) { t.features_per_warp = 1; }},
      {"4 features a warp", [](DecodeTuning& t) { t.features_per_warp = 4; }},
  };
  for (const Variant& v : variants) {
    decode_tuning() = defaults;
    v.set(decode_tuning());
    b.variant = v.label;
    b.variant_ops = {"moe decode T=1",        "moe decode T=4",        "moe decode T=16",
                     "moe decode T=32",       "moe decode T=64",       "moe decode graph T=1",
                     "moe decode graph T=4",  "moe decode graph T=16", "moe decode graph T=64"};
    bench_decode(b);
  }
  decode_tuning() = defaults;
  b.variant.clear();
  b.variant_ops.clear();
}

rudnn::bench::Family moe_family() {
  rudnn::bench::Family family;
  family.sizes = {{"moe-tokens", 8192, "tokens T of the MoE cases"},
                  {"moe-experts", 64, "experts E"},
                  {"moe-top-k", 8, "experts per token"},
                  {"moe-hidden", 2048, "hidden size H"},
                  {"moe-inter", 1408, "expert intermediate size I"}};
  family.run = run_all;
  family.run_variants = run_variants;
  return family;
}

}  // namespace

RUDNN_BENCH_FAMILY(moe, moe_family);
