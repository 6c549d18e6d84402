// The convolution family's benchmark cases at the shapes (issue 15, ANCHORS.md):
//   conv2d bf16 NHWC N32 C256 56x56 K256 3x3 pad 1: forward, dgrad, wgrad (TFLOP/s on stderr)
//   conv3d bf16 NDHWC N4 C64 16x56x56 K64 3x3x3 pad 1: forward
//   depthwise 3x3 (and 7x7) bf16 [32, 256, 56, 56] channels-last: forward (GB/s vs copy)
//   causal conv1d W 4 bf16 [8, 1024, 4096] [B, L, C]: forward and backward (GB/s vs copy)
// The forwards run Direct and ImplicitGemm (tensor cores); the data gradient Auto (Direct)
// and ImplicitGemm (the forward kernel over dout, per stride phase); the weight gradient
// Direct (its implicit GEMM is not built yet); depthwise its own kernel. The checks compare
// batch entry 0 and the first 8 output channels (or 64 channels) against the CPU reference.
// Shape options: --conv-batch N --conv-channels C --conv-size S (the conv2d case).
#include <cuda_runtime.h>
#include <rudnn/rudnn.h>

#include <cstdio>
#include <string>
#include <vector>

#include "conv/cuda/dw_tuning.h"
#include "harness.h"

namespace {

using namespace rudnn;
using rudnn::bench::Bench;

constexpr DType kBf16 = DType::bf16;

// Times a case and prints its TFLOP/s (the harness table shows GB/s only).
void run_flops(Bench& b, const std::string& op, const Shape& shape, double bytes, double flops,
               int sets, const std::function<void(int)>& fn, const std::function<double()>& check) {
  const size_t before = b.table.rows().size();
  b.run(op, shape, kBf16, bytes, sets, fn, check, 2e-2);
  if (b.table.rows().size() == before) return;
  const auto& row = b.table.rows().back();
  if (row.status == "ok") {
    std::fprintf(stderr, "conv: %s %.3f ms = %.1f TFLOP/s\n", op.c_str(), row.timing.median_ms,
                 flops / (row.timing.median_ms * 1e-3) / 1e12);
  }
}

// Output channels [0, k) of batch entry 0 of an NHWC result against the reference.
double check_nhwc(const Tensor& got, const Tensor& expected, int64_t k) {
  const int64_t last = got.dim() - 1;
  return bench::relative_l2_error(got.slice(0, 0, 1).slice(last, 0, k).to_host().contiguous(),
                                  expected.contiguous());
}

template <int N>
void bench_conv(Bench& b, const std::string& name, const Shape& in_shape, const Shape& w_shape,
                const ConvOptions<N>& o, bool backward) {
  const int64_t batch = in_shape[0], K = w_shape[0];
  Shape out_shape{batch};
  double taps = 1;
  for (int a = 0; a < N; ++a) {
    const int64_t k = w_shape[1 + a];
    taps *= static_cast<double>(k);
    out_shape.push_back((in_shape[1 + a] + 2 * o.padding[a] - o.dilation[a] * (k - 1) - 1) /
                            o.stride[a] + 1);
  }
  out_shape.push_back(K);
  const double in_elems = static_cast<double>(shape_numel(in_shape));
  const double out_elems = static_cast<double>(shape_numel(out_shape));
  const double w_elems = static_cast<double>(shape_numel(w_shape));
  const double flops = 2.0 * out_elems * taps * static_cast<double>(w_shape.back());
  const double bytes = (in_elems + out_elems + w_elems) * 2;
  const int sets = b.sets_for(static_cast<size_t>(bytes * 2));
  const std::vector<Tensor> x = b.normals(sets, in_shape, kBf16, 31);
  const std::vector<Tensor> w = b.normals(sets, w_shape, kBf16, 32);
  const std::vector<Tensor> dy = b.normals(sets, out_shape, kBf16, 33);
  const std::vector<Tensor> y = b.empties(sets, out_shape, kBf16);
  b.sync();
  const int64_t kc = std::min<int64_t>(K, N == 3 ? 2 : 8);
  const Tensor x0 = x[0].slice(0, 0, 1).to_host(), w0 = w[0].slice(0, 0, kc).to_host();
  for (ConvStrategy strategy : {ConvStrategy::Direct, ConvStrategy::ImplicitGemm}) {
    run_flops(
        b, name + (strategy == ConvStrategy::Direct ? " fwd direct" : " fwd implicit-gemm"),
        in_shape, bytes, flops, sets,
        [&](int s) { conv_forward_nhwc_into<N>(y[s], x[s], w[s], {}, o, strategy, {}, b.stream); },
        [&] { return check_nhwc(y[0], conv_forward_nhwc<N>(x0, w0, {}, o), kc); });
  }
  if (!backward) return;
  const std::vector<Tensor> dx = b.empties(sets, in_shape, kBf16);
  // " dgrad" is Auto's (Direct); " dgrad implicit-gemm" the forward kernel over dout with the
  // flipped weight (one phase at stride 1).
  for (ConvStrategy strategy : {ConvStrategy::Auto, ConvStrategy::ImplicitGemm}) {
    run_flops(
        b, name + (strategy == ConvStrategy::Auto ? " dgrad" : " dgrad implicit-gemm"), in_shape,
        bytes, flops, sets,
        [&](int s) {
          conv_data_backward_nhwc_into<N>(dx[s], dy[s], w[s], o, strategy, b.stream);
        },
        // Input channels [0, kc) of batch entry 0: they need every filter's first kc channels.
        [&] {
          const Tensor dy0 = dy[0].slice(0, 0, 1).to_host();
          const Tensor wk = w[0].slice(N + 1, 0, kc).to_host().contiguous();
          Shape xk = x0.shape();
          xk.back() = kc;
          const Tensor ref = conv_data_backward_nhwc<N>(dy0, wk, xk, o);
          return check_nhwc(dx[0], ref, kc);
        });
  }
  const std::vector<Tensor> dw = b.empties(sets, w_shape, kBf16);
  run_flops(
      b, name + " wgrad", in_shape, bytes, flops, sets,
      [&](int s) {
        conv_weight_backward_nhwc_into<N>(dw[s], {}, dy[s], x[s], o, ConvStrategy::Auto, b.stream);
      },
      // The kernel again on batch entry 0 alone, its first kc filters against the reference.
      [&] {
        const Tensor dy0 = dy[0].slice(0, 0, 1).contiguous(b.stream);
        const Tensor x0d = x[0].slice(0, 0, 1).contiguous(b.stream);
        const Tensor got = conv_weight_backward_nhwc<N>(dy0, x0d, w_shape, o, false,
                                                        ConvStrategy::Auto, b.stream).dweight;
        Shape wk = w_shape;
        wk[0] = kc;
        const Tensor ref = conv_weight_backward_nhwc<N>(
            dy0.slice(N + 1, 0, kc).to_host().contiguous(), x0, wk, o, false).dweight;
        return bench::relative_l2_error(got.slice(0, 0, kc).to_host(), ref);
      });
}

// Whether any of a case's ops passes --filter (its inputs are allocated only then).
bool any_wanted(const Bench& b, const std::string& name, bool backward) {
  for (const char* op :
       {" fwd direct", " fwd implicit-gemm", " dgrad", " dgrad implicit-gemm", " wgrad"}) {
    if ((backward || op[1] == 'f') && b.wanted(name + op)) return true;
  }
  return false;
}

void bench_depthwise(Bench& b);
void bench_causal(Bench& b);

void run_all(Bench& b) {
  const int64_t N = b.size("conv-batch"), C = b.size("conv-channels"), S = b.size("conv-size");
  if (any_wanted(b, "conv2d 3x3", true)) {
    ConvOptions<2> o;
    o.padding = {1, 1};
    bench_conv<2>(b, "conv2d 3x3", {N, S, S, C}, {C, 3, 3, C}, o, true);
  }
  if (any_wanted(b, "conv3d 3x3x3", false)) {
    ConvOptions<3> o;
    o.padding = {1, 1, 1};
    bench_conv<3>(b, "conv3d 3x3x3", {4, 16, 56, 56, 64}, {64, 3, 3, 3, 64}, o, false);
  }
  // ResNet-50 (batch 32) layers of each stage: pointwise and 3x3, the Hopper kernel's tilings
  // (56: 8 x 8 x 2 images, 28: 4 x 4 x 8, 14: 2 x 2 x 32, 7: 8 x 1 x 16; 1x1: plain GEMM rows).
  struct Layer {
    const char* name;
    int64_t size, c, k, r;
  };
  const Layer layers[] = {{"resnet50 1x1 56 C256 K64", 56, 256, 64, 1},
                          {"resnet50 3x3 56 C64 K64", 56, 64, 64, 3},
                          {"resnet50 3x3 28 C128 K128", 28, 128, 128, 3},
                          {"resnet50 3x3 14 C256 K256", 14, 256, 256, 3},
                          {"resnet50 1x1 14 C1024 K256", 14, 1024, 256, 1},
                          {"resnet50 3x3 7 C512 K512", 7, 512, 512, 3}};
  for (const Layer& l : layers) {
    if (!any_wanted(b, l.name, false)) continue;
    ConvOptions<2> o;
    o.padding = {l.r / 2, l.r / 2};
    bench_conv<2>(b, l.name, {32, l.size, l.size, l.c}, {l.k, l.r, l.r, l.c}, o, false);
  }
  bench_depthwise(b);
  bench_causal(b);
}

// Depthwise 3x3 and 7x7, [32, 256, 56, 56] bf16 channels-last.
void bench_depthwise(Bench& b) {
  for (const int64_t k : {3, 7}) {
    const std::string name = "depthwise " + std::to_string(k) + "x" + std::to_string(k);
    if (!b.wanted(name)) continue;
    const Shape shape{32, 56, 56, 256};
    ConvOptions<2> o;
    o.padding = {k / 2, k / 2};
    o.groups = 256;
    const double bytes = static_cast<double>(shape_numel(shape)) * 2 * 2;
    const int sets = b.sets_for(static_cast<size_t>(bytes));
    const std::vector<Tensor> x = b.normals(sets, shape, kBf16, 41);
    const Tensor w = b.normal({256, k, k, 1}, kBf16, 42);
    const std::vector<Tensor> y = b.empties(sets, shape, kBf16);
    b.sync();
    b.run(
        name, shape, kBf16, bytes, sets,
        [&](int s) { conv_forward_nhwc_into<2>(y[s], x[s], w, {}, o, ConvStrategy::Auto, {}, b.stream); },
        [&] {
          return bench::relative_l2_error(
              y[0].slice(0, 0, 1).to_host(),
              conv_forward_nhwc<2>(x[0].slice(0, 0, 1).to_host(), w.to_host(), {}, o));
        },
        2e-2);
  }
}

// Causal conv1d W 4 with SiLU, [8, 1024, 4096] [B, L, C] bf16: forward and backward.
void bench_causal(Bench& b) {
  if (b.wanted("causal_conv1d k4") || b.wanted("causal_conv1d k4 backward")) {
    const Shape shape{8, 1024, 4096};
    const double bytes = static_cast<double>(shape_numel(shape)) * 2 * 2;
    const int sets = b.sets_for(static_cast<size_t>(bytes * 2));
    const std::vector<Tensor> x = b.normals(sets, shape, kBf16, 51);
    const std::vector<Tensor> dy = b.normals(sets, shape, kBf16, 52);
    const Tensor w = b.normal({4096, 4}, kBf16, 53), bias = b.normal({4096}, kBf16, 54);
    const std::vector<Tensor> y = b.empties(sets, shape, kBf16), dx = b.empties(sets, shape, kBf16);
    const Tensor dw = b.empty({4096, 4}, kBf16), db = b.empty({4096}, kBf16);
    b.sync();
    b.run(
        "causal_conv1d k4", shape, kBf16, bytes, sets,
        [&](int s) { causal_conv1d_into(y[s], x[s], w, bias, {}, {}, true, b.stream); },
        [&] {
          return bench::relative_l2_error(
              y[0].slice(0, 0, 1).to_host(),
              causal_conv1d(x[0].slice(0, 0, 1).to_host(), w.to_host(), bias.to_host(), {}, {}, true));
        },
        2e-2);
    b.run(
        "causal_conv1d k4 backward", shape, kBf16, bytes * 1.5, sets,
        [&](int s) {
          causal_conv1d_backward_into(dx[s], dw, db, {}, dy[s], x[s], w, bias, {}, {}, true, b.stream);
        },
        [&] {
          const CausalConv1dGrads g =
              causal_conv1d_backward(dy[0].slice(0, 0, 1).to_host(), x[0].slice(0, 0, 1).to_host(),
                                     w.to_host(), bias.to_host(), {}, {}, true);
          return bench::relative_l2_error(dx[0].slice(0, 0, 1).to_host(), g.dx);
        },
        2e-2);
  }
}

// The depthwise and causal conv1d launch choices of conv/cuda/dw_tuning.h, each timed
// against the default in one run.
void run_variants(Bench& b) {
  using rudnn::conv_detail::cuda::dw_tuning;
  using rudnn::conv_detail::cuda::DwTuning;
  const DwTuning defaults = dw_tuning();
  struct Variant {
    std::string label;
    std::vector<std::string> ops;
    void (*set)(DwTuning&);
  };
  const std::vector<std::string> dw = {"depthwise 3x3"}, causal = {"causal_conv1d k4"};
  const Variant variants[] = {
      {"stream 4 columns", dw, [](DwTuning& t) { t.depthwise_3x3 = 1; }},
      {"stream 7 columns", dw, [](DwTuning& t) { t.depthwise_3x3 = 0; }},
      {"stream 4 columns 3 rows ahead", dw, [](DwTuning& t) { t.depthwise_3x3 = 3; }},
      {"stream runs of 14 rows", dw, [](DwTuning& t) {
         t.depthwise_3x3 = 0;
         t.stream_run = 14;
       }},
      {"stream runs of 56 rows", dw, [](DwTuning& t) {
         t.depthwise_3x3 = 0;
         t.stream_run = 56;
       }},
      {"stream runs of 8 rows", dw, [](DwTuning& t) {
         t.depthwise_3x3 = 0;
         t.stream_run = 8;
       }},
      {"runs of 8", causal, [](DwTuning& t) { t.causal_forward = 1; }},
      {"runs of 32", causal, [](DwTuning& t) { t.causal_forward = 2; }},
      {"runs of 16, 16-byte packs", causal, [](DwTuning& t) { t.causal_forward = 0; }},
      {"logistic SiLU", causal, [](DwTuning& t) { t.causal_forward = 4; }},
  };
  for (const Variant& v : variants) {
    dw_tuning() = defaults;
    v.set(dw_tuning());
    b.variant = v.label;
    b.variant_ops = v.ops;
    bench_depthwise(b);
    bench_causal(b);
  }
  dw_tuning() = defaults;
  b.variant.clear();
  b.variant_ops.clear();
}

rudnn::bench::Family conv_family() {
  rudnn::bench::Family family;
  family.sizes = {{"conv-batch", 32, "batch of the conv2d case"},
                  {"conv-channels", 256, "C = K of the conv2d case"},
                  {"conv-size", 56, "height = width of the conv2d case"}};
  family.run = run_all;
  family.run_variants = run_variants;
  return family;
}

}  // namespace

RUDNN_BENCH_FAMILY(conv, conv_family);
