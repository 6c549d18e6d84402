// The CUDA kernels against the float64 CPU reference: Direct forward (with every epilogue),
// data and weight gradients, Depthwise forward, causal conv1d forward (state, decode,
// varlen) and backward, over odd sizes, 1x1, 7x7 stride 2, groups, dilation, strides,
// asymmetric padding, three layouts and every dtype. Fresh random inputs (the seed is
// printed on failure), outputs poisoned before the op, inputs checked unchanged, gradients
// checked bit-identical run to run. Skipped without a GPU.
#include <sstream>

#include "conv_test_util.h"

#if RUDNN_CONV_TUNING
#include "conv/cuda/dw_tuning.h"
#endif

namespace rudnn::test {
namespace {

using conv::opts;
const Device kGpu = Device::cuda(0);
const DType kDtypes[] = {DType::f32, DType::f16, DType::bf16};

enum class Layout { Nchw, ChannelsLastView, Nhwc };
const char* layout_name(Layout l) {
  return l == Layout::Nchw ? "nchw" : l == Layout::Nhwc ? "nhwc shapes" : "channels-last view";
}

template <int N>
struct Case {
  Shape input, weight;  // NCHW-style
  ConvOptions<N> o;
};

template <int N>
std::string describe(const Case<N>& c, DType dt, Layout layout, ConvStrategy strategy) {
  std::ostringstream s;
  s << N << "-D " << dtype_name(dt) << " " << layout_name(layout) << " input "
    << shape_str(c.input) << " weight " << shape_str(c.weight) << " stride [";
  for (int a = 0; a < N; ++a) s << c.o.stride[a] << (a + 1 < N ? ", " : "]");
  s << " padding [";
  for (int a = 0; a < N; ++a) s << c.o.padding[a] << (a + 1 < N ? ", " : "]");
  s << " padding_end [";
  for (int a = 0; a < N; ++a) s << c.o.padding_end[a] << (a + 1 < N ? ", " : "]");
  s << " dilation [";
  for (int a = 0; a < N; ++a) s << c.o.dilation[a] << (a + 1 < N ? ", " : "]");
  s << " groups " << c.o.groups << " strategy "
    << (strategy == ConvStrategy::Direct ? "Direct" : "Auto");
  return s.str();
}

// One case in one layout: forward (bias, residual, activation), data and weight gradients,
// all against the reference computed from the same rounded values.
template <int N>
void check_case(Rng& rng, DType dt, const Case<N>& c, Layout layout,
                ConvStrategy strategy = ConvStrategy::Auto,
                ConvActivation activation = ConvActivation::None, bool residual = false) {
  SCOPED_TRACE(describe(c, dt, layout, strategy) + " activation " +
               std::to_string(static_cast<int>(activation)) + " residual " +
               std::to_string(residual));
  const Tensor x = random_tensor(rng, c.input, dt), w = random_tensor(rng, c.weight, dt);
  const int64_t K = c.weight[0];
  const Tensor b = random_tensor(rng, {K}, dt);
  ConvEpilogue e;
  e.activation = activation;
  const Tensor y_shape_probe = conv_forward<N>(Tensor::zeros(c.input, DType::f64),
                                               Tensor::zeros(c.weight, DType::f64), {}, c.o);
  const Shape ys = y_shape_probe.shape();
  if (residual) e.residual = random_tensor(rng, ys, dt);
  const Tensor expected = conv_forward<N>(x, w, b, c.o, ConvStrategy::Auto, e);
  const Tensor dy = random_tensor(rng, ys, dt);
  const Tensor expected_dx = conv_data_backward<N>(dy, w, c.input, c.o);
  const ConvWeightGrads expected_g = conv_weight_backward<N>(dy, x, c.weight, c.o, true);

  const bool nhwc = layout == Layout::Nhwc;
  auto up = [&](const Tensor& t) {
    if (layout == Layout::Nchw) return t.to(kGpu);
    if (layout == Layout::ChannelsLastView) return conv::channels_last_view(t, kGpu);
    return conv::to_nhwc(t).to(kGpu);
  };
  auto down = [&](const Tensor& t) {
    return nhwc ? conv::from_nhwc(t.to_host()) : t.to_host().contiguous();
  };
  const Tensor d_x = up(x), d_dy = up(dy);
  const Tensor d_w = nhwc ? conv::to_nhwc(w).to(kGpu) : w.to(kGpu);
  const Tensor d_b = b.to(kGpu);
  ConvEpilogue d_e;
  d_e.activation = activation;
  if (residual) d_e.residual = up(e.residual);

  const Tensor y = poisoned(d_dy.shape(), dt, kGpu);
  if (nhwc) {
    conv_forward_nhwc_into<N>(y, d_x, d_w, d_b, c.o, strategy, d_e);
  } else {
    conv_forward_into<N>(y, d_x, d_w, d_b, c.o, strategy, d_e);
  }
  EXPECT_TRUE(all_close(down(y), expected)) << "forward";
  if (layout == Layout::ChannelsLastView) {
    // The functional form keeps channels-last.
    const Tensor f = conv_forward<N>(d_x, d_w, d_b, c.o, strategy, d_e);
    EXPECT_EQ(f.strides()[1], 1);
    EXPECT_TRUE(all_close(down(f), expected)) << "forward, functional";
  }

  const Tensor dx = poisoned(d_x.shape(), dt, kGpu);
  if (nhwc) {
    conv_data_backward_nhwc_into<N>(dx, d_dy, d_w, c.o, strategy);
  } else {
    conv_data_backward_into<N>(dx, d_dy, d_w, c.o, strategy);
  }
  EXPECT_TRUE(all_close(down(dx), expected_dx)) << "data gradient";

  const Tensor dw = poisoned(d_w.shape(), dt, kGpu), db = poisoned({K}, dt, kGpu);
  const Tensor dw2 = poisoned(d_w.shape(), dt, kGpu), db2 = poisoned({K}, dt, kGpu);
  if (nhwc) {
    conv_weight_backward_nhwc_into<N>(dw, db, d_dy, d_x, c.o, strategy);
    conv_weight_backward_nhwc_into<N>(dw2, db2, d_dy, d_x, c.o, strategy);
  } else {
    conv_weight_backward_into<N>(dw, db, d_dy, d_x, c.o, strategy);
    conv_weight_backward_into<N>(dw2, db2, d_dy, d_x, c.o, strategy);
  }
  const Tensor dw_host = nhwc ? conv::from_nhwc(dw.to_host()) : dw.to_host();
  EXPECT_TRUE(all_close(dw_host, expected_g.dweight)) << "weight gradient";
  EXPECT_TRUE(all_close(db.to_host(), expected_g.dbias)) << "bias gradient";
  EXPECT_TRUE(bit_equal(dw.to_host(), dw2.to_host())) << "weight gradient run to run";
  EXPECT_TRUE(bit_equal(db.to_host(), db2.to_host())) << "bias gradient run to run";

  EXPECT_TRUE(all_close(down(d_x), x, 0.0)) << "input changed";
  EXPECT_TRUE(all_close(down(d_dy), dy, 0.0)) << "dout changed";
}

template <int N>
Case<N> make(Shape input, Shape weight, ConvOptions<N> o) {
  return {std::move(input), std::move(weight), o};
}

TEST(ConvGpu, Conv2dMatchesReference) {
  RUDNN_REQUIRE_CUDA();
  RUDNN_SEEDED_RNG(rng);
  ConvOptions<2> asym = opts<2>({1, 2}, {0, 2}, {1, 1});
  asym.padding_end = {1, 0};
  const std::vector<Case<2>> cases = {
      make<2>({2, 3, 13, 11}, {5, 3, 3, 3}, opts<2>({1, 1}, {1, 1}, {1, 1})),
      make<2>({1, 8, 9, 7}, {16, 8, 1, 1}, opts<2>({1, 1}, {0, 0}, {1, 1})),         // 1x1
      make<2>({2, 3, 23, 21}, {8, 3, 7, 7}, opts<2>({2, 2}, {3, 3}, {1, 1})),         // 7x7 s2
      make<2>({2, 6, 10, 9}, {9, 2, 3, 3}, opts<2>({1, 1}, {2, 2}, {2, 2}, 3)),       // groups, dilation
      make<2>({1, 4, 11, 12}, {6, 4, 2, 3}, asym),                                    // asymmetric
      make<2>({3, 5, 6, 5}, {7, 5, 3, 2}, opts<2>({3, 2}, {1, 0}, {1, 2})),           // strides
  };
  for (DType dt : kDtypes)
    for (const auto& c : cases)
      for (Layout l : {Layout::Nchw, Layout::ChannelsLastView, Layout::Nhwc}) check_case<2>(rng, dt, c, l);
}

TEST(ConvGpu, Conv1dAndConv3dMatchReference) {
  RUDNN_REQUIRE_CUDA();
  RUDNN_SEEDED_RNG(rng);
  const std::vector<Case<1>> c1 = {
      make<1>({3, 4, 31}, {6, 2, 5}, opts<1>({2}, {2}, {1}, 2)),
      make<1>({2, 3, 17}, {4, 3, 3}, opts<1>({1}, {0}, {3})),
  };
  const std::vector<Case<3>> c3 = {
      make<3>({2, 3, 5, 7, 6}, {4, 3, 3, 3, 3}, opts<3>({1, 1, 1}, {1, 1, 1}, {1, 1, 1})),
      make<3>({1, 4, 6, 5, 7}, {6, 2, 2, 3, 1}, opts<3>({2, 1, 2}, {0, 1, 0}, {1, 2, 1}, 2)),
  };
  for (DType dt : kDtypes) {
    for (const auto& c : c1)
      for (Layout l : {Layout::Nchw, Layout::Nhwc}) check_case<1>(rng, dt, c, l);
    for (const auto& c : c3)
      for (Layout l : {Layout::Nchw, Layout::ChannelsLastView, Layout::Nhwc}) check_case<3>(rng, dt, c, l);
  }
}

TEST(ConvGpu, EpilogueMatchesReference) {
  RUDNN_REQUIRE_CUDA();
  RUDNN_SEEDED_RNG(rng);
  const Case<2> c = make<2>({2, 4, 9, 8}, {6, 4, 3, 3}, opts<2>({1, 1}, {1, 1}, {1, 1}));
  for (DType dt : kDtypes)
    for (ConvActivation a : {ConvActivation::None, ConvActivation::Relu, ConvActivation::Silu,
                             ConvActivation::Gelu})
      for (bool residual : {false, true})
        check_case<2>(rng, dt, c, Layout::Nhwc, ConvStrategy::Direct, a, residual);
}

TEST(ConvGpu, DepthwiseMatchesReference) {
  RUDNN_REQUIRE_CUDA();
  RUDNN_SEEDED_RNG(rng);
  ConvOptions<2> asym = opts<2>({1, 1}, {1, 0}, {1, 1}, 8);
  asym.padding_end = {0, 2};
  const std::vector<Case<2>> c2 = {
      make<2>({2, 8, 13, 11}, {8, 1, 3, 3}, opts<2>({1, 1}, {1, 1}, {1, 1}, 8)),
      make<2>({1, 8, 20, 19}, {16, 1, 5, 5}, opts<2>({2, 2}, {2, 2}, {1, 1}, 8)),   // multiplier 2
      make<2>({2, 40, 15, 14}, {40, 1, 7, 7}, opts<2>({2, 2}, {3, 3}, {1, 1}, 40)),  // 7x7 s2
      make<2>({1, 8, 9, 10}, {8, 1, 3, 2}, opts<2>({1, 1}, {2, 1}, {2, 3}, 8)),      // dilation
      make<2>({1, 8, 6, 7}, {8, 1, 2, 4}, asym),
  };
  const std::vector<Case<1>> c1 = {
      make<1>({2, 33, 40}, {33, 1, 9}, opts<1>({1}, {4}, {1}, 33)),
      make<1>({1, 4, 18}, {12, 1, 3}, opts<1>({3}, {0}, {2}, 4)),
  };
  for (DType dt : kDtypes) {
    for (const auto& c : c2) {
      EXPECT_EQ(plan_conv<2>(ConvDirection::Forward, c.input, c.weight, dt, kGpu, c.o).kernel,
                ConvKernel::Depthwise);
      for (Layout l : {Layout::Nchw, Layout::ChannelsLastView, Layout::Nhwc}) {
        check_case<2>(rng, dt, c, l);
        check_case<2>(rng, dt, c, l, ConvStrategy::Auto, ConvActivation::Silu, true);
      }
    }
    for (const auto& c : c1)
      for (Layout l : {Layout::Nchw, Layout::Nhwc}) check_case<1>(rng, dt, c, l);
  }
}

// The rows kernel (channels-last, C a multiple of the pack, kernel widths 1-5 and 7 at
// column stride 1, 3/5/7 at stride 2): output widths that are not a multiple of its tile,
// channel slices (C > 32 packs, and a 7x7 whose filters split the slice for shared memory),
// padding on every side, row stride and dilation, 1-D; next to it the shapes it declines
// (column dilation, width 6, odd C) through the packed and scalar kernels.
TEST(ConvGpu, DepthwiseRowsKernelMatchesReference) {
  RUDNN_REQUIRE_CUDA();
  RUDNN_SEEDED_RNG(rng);
  ConvOptions<2> asym = opts<2>({1, 1}, {0, 2}, {1, 1}, 64);
  asym.padding_end = {2, 0};
  const std::vector<Case<2>> c2 = {
      make<2>({2, 64, 17, 18}, {64, 1, 3, 3}, opts<2>({1, 1}, {1, 1}, {1, 1}, 64)),
      make<2>({1, 520, 9, 10}, {520, 1, 5, 5}, opts<2>({1, 1}, {2, 2}, {1, 1}, 520)),
      make<2>({1, 264, 8, 9}, {264, 1, 7, 7}, opts<2>({1, 1}, {3, 3}, {1, 1}, 264)),
      make<2>({2, 48, 15, 17}, {48, 1, 3, 3}, opts<2>({2, 2}, {1, 1}, {1, 1}, 48)),
      make<2>({1, 32, 19, 23}, {32, 1, 5, 5}, opts<2>({1, 2}, {2, 2}, {2, 1}, 32)),
      make<2>({1, 16, 9, 29}, {16, 1, 7, 7}, opts<2>({1, 2}, {3, 3}, {1, 1}, 16)),
      make<2>({1, 24, 6, 7}, {24, 1, 2, 1}, opts<2>({1, 1}, {0, 0}, {1, 1}, 24)),
      make<2>({1, 16, 7, 9}, {16, 1, 3, 2}, opts<2>({1, 1}, {1, 0}, {1, 1}, 16)),
      make<2>({1, 64, 6, 11}, {64, 1, 3, 4}, asym),
      make<2>({1, 16, 8, 8}, {16, 1, 3, 3}, opts<2>({1, 1}, {1, 1}, {1, 2}, 16)),  // packed
      make<2>({1, 16, 8, 12}, {16, 1, 3, 6}, opts<2>({1, 1}, {1, 2}, {1, 1}, 16)),  // packed
      make<2>({1, 12, 8, 9}, {12, 1, 3, 3}, opts<2>({1, 1}, {1, 1}, {1, 1}, 12)),  // 16-bit: scalar
  };
  const std::vector<Case<1>> c1 = {
      make<1>({2, 64, 37}, {64, 1, 3}, opts<1>({1}, {1}, {1}, 64)),
      make<1>({1, 48, 30}, {48, 1, 5}, opts<1>({2}, {2}, {1}, 48)),
      make<1>({3, 16, 5}, {16, 1, 4}, opts<1>({1}, {3}, {1}, 16)),
  };
  for (DType dt : kDtypes) {
    for (const auto& c : c2) {
      for (Layout l : {Layout::ChannelsLastView, Layout::Nhwc}) check_case<2>(rng, dt, c, l);
      check_case<2>(rng, dt, c, Layout::Nhwc, ConvStrategy::Auto, ConvActivation::Gelu, true);
    }
    for (const auto& c : c1) {
      check_case<1>(rng, dt, c, Layout::Nhwc);
      check_case<1>(rng, dt, c, Layout::Nhwc, ConvStrategy::Auto, ConvActivation::Relu, true);
    }
  }
}

// The column kernel (channels-last, C a multiple of 16 bytes, 3x3 with the same stride 1 or 2
// on both axes, no dilation; 8-byte packs; its stride-1 cases now run the tile kernel):
// output heights that are not a multiple of its run of 8 rows (and shorter than one run), odd
// widths, channel slices (C > 32 packs, a partial last slice, C = 24 in 16-bit types: 6
// packs, so that a block's threads do not divide evenly), padding 0, 1, 2 and asymmetric,
// inputs smaller than the filter; next to it the 3x3 shapes it declines
// (mixed strides, dilation, C not a multiple of 8) through the other kernels.
TEST(ConvGpu, DepthwiseColumnKernelMatchesReference) {
  RUDNN_REQUIRE_CUDA();
  RUDNN_SEEDED_RNG(rng);
  ConvOptions<2> asym = opts<2>({1, 1}, {0, 2}, {1, 1}, 32);
  asym.padding_end = {2, 0};
  ConvOptions<2> asym2 = opts<2>({2, 2}, {2, 0}, {1, 1}, 16);
  asym2.padding_end = {0, 1};
  const std::vector<Case<2>> c2 = {
      make<2>({2, 256, 13, 11}, {256, 1, 3, 3}, opts<2>({1, 1}, {1, 1}, {1, 1}, 256)),
      make<2>({1, 520, 9, 10}, {520, 1, 3, 3}, opts<2>({1, 1}, {1, 1}, {1, 1}, 520)),
      make<2>({3, 24, 17, 5}, {24, 1, 3, 3}, opts<2>({1, 1}, {0, 0}, {1, 1}, 24)),
      make<2>({1, 16, 5, 6}, {16, 1, 3, 3}, opts<2>({1, 1}, {2, 2}, {1, 1}, 16)),
      make<2>({1, 32, 2, 2}, {32, 1, 3, 3}, opts<2>({1, 1}, {1, 1}, {1, 1}, 32)),
      make<2>({1, 32, 10, 9}, {32, 1, 3, 3}, asym),
      make<2>({2, 48, 19, 15}, {48, 1, 3, 3}, opts<2>({2, 2}, {1, 1}, {1, 1}, 48)),
      make<2>({1, 64, 34, 33}, {64, 1, 3, 3}, opts<2>({2, 2}, {0, 0}, {1, 1}, 64)),
      make<2>({1, 16, 12, 11}, {16, 1, 3, 3}, asym2),
      make<2>({1, 16, 9, 10}, {16, 1, 3, 3}, opts<2>({1, 2}, {1, 1}, {1, 1}, 16)),  // rows
      make<2>({1, 16, 9, 10}, {16, 1, 3, 3}, opts<2>({2, 1}, {1, 1}, {1, 1}, 16)),  // rows
      make<2>({1, 16, 9, 10}, {16, 1, 3, 3}, opts<2>({1, 1}, {2, 2}, {2, 2}, 16)),  // packed
      make<2>({1, 20, 9, 10}, {20, 1, 3, 3}, opts<2>({1, 1}, {1, 1}, {1, 1}, 20)),  // 16-bit: scalar
  };
  for (DType dt : kDtypes) {
    for (const auto& c : c2) {
      for (Layout l : {Layout::ChannelsLastView, Layout::Nhwc}) check_case<2>(rng, dt, c, l);
      check_case<2>(rng, dt, c, Layout::Nhwc, ConvStrategy::Auto, ConvActivation::Silu, true);
    }
  }
}

// The tile kernel (channels-last, C a multiple of 16 bytes, 3x3 at stride 1, no dilation; a
// block is 128 bytes of channels x up to 16 (16-bit) or 32 (f32) output columns x a run of
// rows): widths that split into uneven column tiles (37, 70), a partial last channel slice
// (C = 72), a single pack (C = 8), padding 0, 2 and asymmetric, an input smaller than the
// filter, enough images and rows (58) that the launch splits the height into several runs
// with a short last one, every layout; next to it the 3x3 shapes it declines (stride 2,
// mixed strides, dilation, C not a multiple of 16 bytes) through the other kernels.
TEST(ConvGpu, DepthwiseTileKernelMatchesReference) {
  RUDNN_REQUIRE_CUDA();
  RUDNN_SEEDED_RNG(rng);
  ConvOptions<2> asym = opts<2>({1, 1}, {0, 2}, {1, 1}, 64);
  asym.padding_end = {2, 1};
  const std::vector<Case<2>> c2 = {
      make<2>({2, 64, 9, 37}, {64, 1, 3, 3}, opts<2>({1, 1}, {1, 1}, {1, 1}, 64)),
      make<2>({1, 72, 6, 70}, {72, 1, 3, 3}, opts<2>({1, 1}, {1, 1}, {1, 1}, 72)),
      make<2>({1, 8, 5, 5}, {8, 1, 3, 3}, opts<2>({1, 1}, {0, 0}, {1, 1}, 8)),
      make<2>({1, 24, 7, 9}, {24, 1, 3, 3}, opts<2>({1, 1}, {2, 2}, {1, 1}, 24)),
      make<2>({1, 64, 10, 17}, {64, 1, 3, 3}, asym),
      make<2>({1, 32, 1, 2}, {32, 1, 3, 3}, opts<2>({1, 1}, {1, 1}, {1, 1}, 32)),
      make<2>({8, 64, 58, 20}, {64, 1, 3, 3}, opts<2>({1, 1}, {1, 1}, {1, 1}, 64)),
      make<2>({1, 64, 11, 13}, {64, 1, 3, 3}, opts<2>({2, 2}, {1, 1}, {1, 1}, 64)),  // column
      make<2>({1, 64, 11, 13}, {64, 1, 3, 3}, opts<2>({1, 2}, {1, 1}, {1, 1}, 64)),  // rows
      make<2>({1, 64, 11, 13}, {64, 1, 3, 3}, opts<2>({1, 1}, {2, 2}, {2, 2}, 64)),  // packed
      make<2>({1, 12, 8, 9}, {12, 1, 3, 3}, opts<2>({1, 1}, {1, 1}, {1, 1}, 12)),  // f32: tile
  };
  for (DType dt : kDtypes) {
    for (const auto& c : c2) {
      for (Layout l : {Layout::Nchw, Layout::ChannelsLastView, Layout::Nhwc}) {
        check_case<2>(rng, dt, c, l);
      }
      check_case<2>(rng, dt, c, Layout::Nhwc, ConvStrategy::Auto, ConvActivation::Silu, true);
      check_case<2>(rng, dt, c, Layout::ChannelsLastView, ConvStrategy::Auto,
                    ConvActivation::Relu, false);
    }
  }
}

// The column kernel's filter and bias loads: a dense aligned [K, 3, 3] filter is read as
// packs; a strided filter view, a dense one at an unaligned offset and an unaligned bias are
// read element by element. Each against the reference on the same values.
TEST(ConvGpu, DepthwiseColumnKernelFilterViews) {
  RUDNN_REQUIRE_CUDA();
  RUDNN_SEEDED_RNG(rng);
  const ConvOptions<2> o = opts<2>({1, 1}, {1, 1}, {1, 1}, 32);
  for (DType dt : kDtypes) {
    const Tensor x = random_tensor(rng, {2, 32, 10, 9}, dt);
    const Tensor wide = random_tensor(rng, {33, 1, 3, 4}, dt);  // a view [1:, :, :, :3]
    const Tensor dense = random_tensor(rng, {33, 1, 3, 3}, dt);  // a view [1:]: 9 elements in
    const Tensor b = random_tensor(rng, {33}, dt);              // a view [1:]: 1 element in
    const Tensor d_x = conv::channels_last_view(x, kGpu);
    const Tensor d_wide = wide.to(kGpu), d_dense = dense.to(kGpu), d_b = b.to(kGpu);
    struct Variant {
      const char* name;
      Tensor host_w, gpu_w;
    };
    const Variant variants[] = {
        {"strided filter view", wide.slice(0, 1, 33).slice(3, 0, 3),
         d_wide.slice(0, 1, 33).slice(3, 0, 3)},
        {"dense filter at an unaligned offset", dense.slice(0, 1, 33), d_dense.slice(0, 1, 33)},
        {"dense aligned filter", dense.slice(0, 0, 32), d_dense.slice(0, 0, 32)},
    };
    for (const Variant& v : variants) {
      SCOPED_TRACE(std::string(v.name) + " " + dtype_name(dt) + ", bias at offset 1");
      const Tensor expected =
          conv_forward<2>(x, v.host_w.contiguous(), b.slice(0, 1, 33).contiguous(), o);
      const Tensor y = conv_forward<2>(d_x, v.gpu_w, d_b.slice(0, 1, 33), o);
      EXPECT_TRUE(all_close(y.to_host().contiguous(), expected));
    }
  }
}

// Large values: the FP32 accumulation of the tile kernel holds where 16-bit sums would not.
TEST(ConvGpu, DepthwiseColumnKernelLargeValues) {
  RUDNN_REQUIRE_CUDA();
  RUDNN_SEEDED_RNG(rng);
  const Case<2> c = make<2>({1, 64, 11, 12}, {64, 1, 3, 3}, opts<2>({1, 1}, {1, 1}, {1, 1}, 64));
  for (DType dt : {DType::f16, DType::bf16}) {
    SCOPED_TRACE(std::string("large values ") + dtype_name(dt));
    std::vector<double> big = to_doubles(random_tensor(rng, c.input, DType::f32));
    for (double& v : big) v = v * 300.0 + 1000.0;
    const Tensor x = host_tensor(big, c.input, dt);
    const Tensor w = random_tensor(rng, c.weight, dt);
    const Tensor expected = conv_forward<2>(x, w, {}, c.o);
    const Tensor got =
        conv_forward_nhwc<2>(conv::to_nhwc(x).to(kGpu), conv::to_nhwc(w).to(kGpu), {}, c.o);
    EXPECT_TRUE(all_close(conv::from_nhwc(got.to_host()), expected));
  }
}

// Enough output rows that a block of the rows kernel walks several groups of them (its grid
// holds a few waves of blocks: 132 SMs x 2 x 4 of 8-row groups at C = 256 bf16).
TEST(ConvGpu, DepthwiseRowsKernelWalksSeveralGroups) {
  RUDNN_REQUIRE_CUDA();
  RUDNN_SEEDED_RNG(rng);
  const Case<2> c = make<2>({6, 256, 56, 56}, {256, 1, 3, 3}, opts<2>({1, 1}, {1, 1}, {1, 1}, 256));
  check_case<2>(rng, DType::bf16, c, Layout::Nhwc);
}

#if RUDNN_CONV_TUNING
// The channels-last 3x3 stride-1 kernels (conv/cuda/dw_tuning.h): the stream kernel with 7
// and with 4 output columns a thread (loading 2 and 3 rows ahead), and the tile kernel, each
// against the reference, with
// the stream kernel's runs of output rows chosen by the launch and forced to 5 and 1 rows
// (several runs with a short last one, a run of one row). Widths that are not a multiple of
// the strip (37, 17, 9), one and two columns, an input smaller than the filter, padding 0, 2
// and asymmetric, channels of one 16-byte pack and not a multiple of 64 (72), several
// images, the bench's channel count (256) with a short last run; with and without the
// residual and activation epilogue, the dense and the channels-last-view strides.
TEST(ConvGpu, DepthwiseStreamKernelMatchesReference) {
  RUDNN_REQUIRE_CUDA();
  RUDNN_SEEDED_RNG(rng);
  namespace cc = rudnn::conv_detail::cuda;
  struct Restore {
    cc::DwTuning saved = cc::dw_tuning();
    ~Restore() { cc::dw_tuning() = saved; }
  } restore;
  ConvOptions<2> asym = opts<2>({1, 1}, {0, 2}, {1, 1}, 64);
  asym.padding_end = {2, 1};
  const std::vector<Case<2>> cases = {
      make<2>({2, 64, 9, 37}, {64, 1, 3, 3}, opts<2>({1, 1}, {1, 1}, {1, 1}, 64)),
      make<2>({1, 72, 6, 14}, {72, 1, 3, 3}, opts<2>({1, 1}, {1, 1}, {1, 1}, 72)),
      make<2>({1, 8, 5, 5}, {8, 1, 3, 3}, opts<2>({1, 1}, {0, 0}, {1, 1}, 8)),
      make<2>({1, 24, 7, 9}, {24, 1, 3, 3}, opts<2>({1, 1}, {2, 2}, {1, 1}, 24)),
      make<2>({1, 64, 10, 17}, {64, 1, 3, 3}, asym),
      make<2>({1, 32, 1, 2}, {32, 1, 3, 3}, opts<2>({1, 1}, {1, 1}, {1, 1}, 32)),
      make<2>({1, 16, 12, 1}, {16, 1, 3, 3}, opts<2>({1, 1}, {1, 1}, {1, 1}, 16)),
      make<2>({3, 16, 41, 15}, {16, 1, 3, 3}, opts<2>({1, 1}, {1, 1}, {1, 1}, 16)),
      make<2>({2, 256, 23, 28}, {256, 1, 3, 3}, opts<2>({1, 1}, {1, 1}, {1, 1}, 256)),
  };
  const char* kernels[] = {"stream, 7 columns", "stream, 4 columns", "tile",
                           "stream, 4 columns, 3 rows ahead"};
  for (int kernel = 0; kernel < 4; ++kernel) {
    for (int run : {0, 5, 1}) {
      if (kernel == 2 && run != 0) continue;
      SCOPED_TRACE(::testing::Message() << "kernel " << kernels[kernel] << ", rows per run "
                                        << (run == 0 ? std::string("auto") : std::to_string(run)));
      cc::dw_tuning() = restore.saved;
      cc::dw_tuning().depthwise_3x3 = kernel;
      cc::dw_tuning().stream_run = run;
      for (DType dt : kDtypes) {
        for (const auto& c : cases) {
          check_case<2>(rng, dt, c, Layout::Nhwc);
          check_case<2>(rng, dt, c, Layout::ChannelsLastView, ConvStrategy::Auto,
                        ConvActivation::Silu, true);
        }
      }
    }
  }
}
#endif

TEST(ConvGpu, StrategiesOnTheGpu) {
  RUDNN_REQUIRE_CUDA();
  const Tensor x = Tensor::zeros({1, 4, 8, 8}, DType::bf16, kGpu);
  const Tensor w = Tensor::zeros({4, 4, 3, 3}, DType::bf16, kGpu);
  EXPECT_TRUE(throws_error([&] { conv_forward<2>(x, w, {}, ConvOptions<2>{}, ConvStrategy::ImplicitGemm); },
                           ErrorCode::Unsupported, {"conv_forward: strategy ImplicitGemm", "channels-last"}));
  EXPECT_TRUE(throws_error([&] { conv_data_backward<2>(Tensor::zeros({1, 4, 6, 6}, DType::bf16, kGpu), w, {1, 4, 8, 8}, ConvOptions<2>{}, ConvStrategy::ImplicitGemm); },
                           ErrorCode::Unsupported, {"conv_data_backward: strategy ImplicitGemm", "dout with 4 channels"}));
  RUDNN_SEEDED_RNG(rng);
  // Grouped under ImplicitGemm runs Direct (documented), and matches the reference.
  check_case<2>(rng, DType::bf16, make<2>({1, 4, 7, 6}, {4, 2, 3, 3}, opts<2>({1, 1}, {1, 1}, {1, 1}, 2)),
                Layout::Nhwc, ConvStrategy::Direct);
  const Tensor xg = random_tensor(rng, {1, 4, 7, 6}, DType::bf16), wg = random_tensor(rng, {4, 2, 3, 3}, DType::bf16);
  const ConvOptions<2> g = opts<2>({1, 1}, {1, 1}, {1, 1}, 2);
  EXPECT_TRUE(all_close(conv_forward<2>(xg.to(kGpu), wg.to(kGpu), {}, g, ConvStrategy::ImplicitGemm).to_host(),
                        conv_forward<2>(xg, wg, {}, g)));
}

// The ImplicitGemm forward (tensor cores) in _nhwc shapes and as channels-last views, with
// the epilogue, against the reference; the plan must report the kernel.
template <int N>
void check_gemm_forward(Rng& rng, DType dt, const Case<N>& c, ConvActivation activation,
                        bool residual) {
  SCOPED_TRACE(describe(c, dt, Layout::Nhwc, ConvStrategy::Auto) + " ImplicitGemm activation " +
               std::to_string(static_cast<int>(activation)) + " residual " +
               std::to_string(residual));
  const Tensor x = random_tensor(rng, c.input, dt), w = random_tensor(rng, c.weight, dt);
  const Tensor b = random_tensor(rng, {c.weight[0]}, dt);
  ConvEpilogue e;
  e.activation = activation;
  const Shape ys = conv_forward<N>(Tensor::zeros(c.input, DType::f64),
                                   Tensor::zeros(c.weight, DType::f64), {}, c.o)
                       .shape();
  if (residual) e.residual = random_tensor(rng, ys, dt);
  const Tensor expected = conv_forward<N>(x, w, b, c.o, ConvStrategy::Auto, e);
  const Tensor xn = conv::to_nhwc(x).to(kGpu), wn = conv::to_nhwc(w).to(kGpu), bd = b.to(kGpu);
  EXPECT_EQ(plan_conv<N>(ConvDirection::Forward, xn.shape(), wn.shape(), dt, kGpu, c.o,
                         ConvStrategy::ImplicitGemm, ConvLayout::Nhwc)
                .kernel,
            ConvKernel::ImplicitGemm);
  ConvEpilogue d_e;
  d_e.activation = activation;
  if (residual) d_e.residual = conv::to_nhwc(e.residual).to(kGpu);
  const Tensor y = poisoned(conv::to_nhwc(expected).shape(), dt, kGpu);
  conv_forward_nhwc_into<N>(y, xn, wn, bd, c.o, ConvStrategy::ImplicitGemm, d_e);
  EXPECT_TRUE(all_close(conv::from_nhwc(y.to_host()), expected)) << "nhwc";
  EXPECT_TRUE(bit_equal(xn.to_host(), conv::to_nhwc(x))) << "input changed";
  if (N >= 2) {
    ConvEpilogue v_e;
    v_e.activation = activation;
    if (residual) v_e.residual = conv::channels_last_view(e.residual, kGpu);
    const Tensor yv = conv_forward<N>(conv::channels_last_view(x, kGpu),
                                      conv::channels_last_view(w, kGpu), bd, c.o,
                                      ConvStrategy::ImplicitGemm, v_e);
    EXPECT_TRUE(all_close(yv.to_host().contiguous(), expected)) << "channels-last views";
  }
}

// ImplicitGemm's data gradient (per stride phase, the forward kernel over dout with the
// phase's flipped taps) in _nhwc shapes and from channels-last views against the reference;
// the plan reports the kernel and the flipped weight's workspace; dout and weight stay
// unchanged.
template <int N>
void check_gemm_data_gradient(Rng& rng, DType dt, const Case<N>& c) {
  SCOPED_TRACE(describe(c, dt, Layout::Nhwc, ConvStrategy::ImplicitGemm) + " data gradient");
  const Tensor w = random_tensor(rng, c.weight, dt);
  const Shape ys = conv_forward<N>(Tensor::zeros(c.input, DType::f64),
                                   Tensor::zeros(c.weight, DType::f64), {}, c.o)
                       .shape();
  const Tensor dy = random_tensor(rng, ys, dt);
  const Tensor expected = conv_data_backward<N>(dy, w, c.input, c.o);
  const Tensor dyn = conv::to_nhwc(dy).to(kGpu), wn = conv::to_nhwc(w).to(kGpu);
  const Shape xs = conv::to_nhwc(Tensor::zeros(c.input, DType::f64)).shape();
  const ConvPlan plan = plan_conv<N>(ConvDirection::DataBackward, xs, wn.shape(), dt, kGpu, c.o,
                                     ConvStrategy::ImplicitGemm, ConvLayout::Nhwc);
  EXPECT_EQ(plan.kernel, ConvKernel::ImplicitGemm);
  EXPECT_EQ(plan.workspace_bytes, static_cast<size_t>(shape_numel(c.weight)) * 2);
  const Tensor dx = poisoned(xs, dt, kGpu);
  conv_data_backward_nhwc_into<N>(dx, dyn, wn, c.o, ConvStrategy::ImplicitGemm);
  EXPECT_TRUE(all_close(conv::from_nhwc(dx.to_host()), expected)) << "nhwc";
  EXPECT_TRUE(bit_equal(dyn.to_host(), conv::to_nhwc(dy))) << "dout changed";
  EXPECT_TRUE(bit_equal(wn.to_host(), conv::to_nhwc(w))) << "weight changed";
  if (N >= 2) {
    const Tensor dxv = conv_data_backward<N>(conv::channels_last_view(dy, kGpu),
                                             conv::channels_last_view(w, kGpu), c.input, c.o,
                                             ConvStrategy::ImplicitGemm);
    EXPECT_TRUE(all_close(dxv.to_host().contiguous(), expected)) << "channels-last views";
  }
}

TEST(ConvGpu, ImplicitGemmDataGradientMatchesReference) {
  RUDNN_REQUIRE_CUDA();
  RUDNN_SEEDED_RNG(rng);
  ConvOptions<2> asym = opts<2>({1, 1}, {0, 2}, {1, 1});
  asym.padding_end = {2, 1};
  const std::vector<Case<2>> c2 = {
      make<2>({2, 16, 13, 11}, {24, 16, 3, 3}, opts<2>({1, 1}, {1, 1}, {1, 1})),
      make<2>({1, 64, 9, 10}, {136, 64, 1, 1}, opts<2>({1, 1}, {0, 0}, {1, 1})),   // 1x1, K > 128
      make<2>({1, 40, 12, 10}, {16, 40, 3, 3}, opts<2>({1, 1}, {2, 2}, {2, 2})),    // dilation
      make<2>({1, 24, 9, 8}, {16, 24, 3, 4}, asym),                                 // asymmetric
      make<2>({2, 32, 20, 20}, {136, 32, 3, 3}, opts<2>({1, 1}, {1, 1}, {1, 1})),   // M, K > tile
      make<2>({1, 12, 7, 9}, {8, 12, 3, 3}, opts<2>({1, 1}, {1, 1}, {1, 1})),       // C % 8 != 0
      make<2>({2, 16, 15, 14}, {24, 16, 3, 3}, opts<2>({2, 2}, {1, 1}, {1, 1})),    // stride 2
      make<2>({1, 32, 16, 17}, {40, 32, 1, 1}, opts<2>({2, 2}, {0, 0}, {1, 1})),    // 1x1 s2
      make<2>({1, 16, 23, 21}, {16, 16, 7, 7}, opts<2>({2, 3}, {3, 4}, {1, 2})),    // 7x7 s2, s3
      make<2>({1, 8, 9, 9}, {8, 8, 3, 3}, opts<2>({1, 1}, {4, 3}, {1, 1})),         // pad > reach
  };
  for (DType dt : {DType::bf16, DType::f16}) {
    for (const auto& c : c2) check_gemm_data_gradient<2>(rng, dt, c);
    check_gemm_data_gradient<1>(rng, dt, make<1>({2, 32, 37}, {48, 32, 5}, opts<1>({1}, {2}, {1})));
    check_gemm_data_gradient<1>(rng, dt, make<1>({2, 16, 30}, {16, 16, 4}, opts<1>({3}, {1}, {2})));
    check_gemm_data_gradient<3>(rng, dt, make<3>({1, 16, 5, 7, 6}, {24, 16, 3, 3, 3},
                                                 opts<3>({1, 1, 1}, {1, 1, 1}, {1, 1, 1})));
  }
}

TEST(ConvGpu, ImplicitGemmForwardMatchesReference) {
  RUDNN_REQUIRE_CUDA();
  RUDNN_SEEDED_RNG(rng);
  ConvOptions<2> asym = opts<2>({1, 2}, {0, 2}, {1, 1});
  asym.padding_end = {2, 1};
  const std::vector<Case<2>> c2 = {
      make<2>({2, 16, 13, 11}, {24, 16, 3, 3}, opts<2>({1, 1}, {1, 1}, {1, 1})),
      make<2>({1, 64, 9, 10}, {130, 64, 1, 1}, opts<2>({1, 1}, {0, 0}, {1, 1})),   // 1x1, K > 128
      make<2>({2, 8, 23, 21}, {16, 8, 7, 7}, opts<2>({2, 2}, {3, 3}, {1, 1})),      // 7x7 s2
      make<2>({1, 40, 12, 10}, {8, 40, 3, 3}, opts<2>({1, 1}, {2, 2}, {2, 2})),     // dilation
      make<2>({1, 24, 9, 8}, {10, 24, 3, 4}, asym),                                 // asymmetric
      make<2>({3, 24, 5, 6}, {200, 24, 3, 2}, opts<2>({2, 1}, {1, 0}, {1, 1})),     // strides
      make<2>({2, 32, 20, 20}, {136, 32, 3, 3}, opts<2>({1, 1}, {1, 1}, {1, 1})),   // M, K > tile
  };
  for (DType dt : {DType::bf16, DType::f16}) {
    for (const auto& c : c2) check_gemm_forward<2>(rng, dt, c, ConvActivation::None, false);
    check_gemm_forward<2>(rng, dt, c2[0], ConvActivation::Relu, true);
    check_gemm_forward<2>(rng, dt, c2[6], ConvActivation::Gelu, false);
    check_gemm_forward<1>(rng, dt, make<1>({2, 32, 37}, {48, 32, 5}, opts<1>({2}, {2}, {1})),
                          ConvActivation::Silu, false);
    check_gemm_forward<3>(rng, dt, make<3>({1, 16, 5, 7, 6}, {20, 16, 3, 3, 3},
                                           opts<3>({1, 1, 1}, {1, 1, 1}, {1, 1, 1})),
                          ConvActivation::None, true);
  }
}

// Autotune: the first forward of a class measures ImplicitGemm and Direct (an entry with
// both times) and gives the reference's result; a second call of the class (smaller spatial
// sizes in the same power-of-two range) measures nothing and gives the named choice's bits;
// plan_conv reports the choice; the data gradient is measured as its own class.
TEST(ConvGpu, AutotuneMeasuresOncePerClass) {
  RUDNN_REQUIRE_CUDA_AUTOTUNE();
  RUDNN_SEEDED_RNG(rng);
  const DType dt = DType::bf16;
  const ConvOptions<2> o = opts<2>({1, 1}, {1, 1}, {1, 1});
  const Tensor x = random_tensor(rng, {2, 32, 20, 20}, dt);
  const Tensor w = random_tensor(rng, {48, 32, 3, 3}, dt);
  const Tensor expected = conv_forward<2>(x, w, Tensor(), o);
  const Tensor xn = conv::to_nhwc(x).to(kGpu), wn = conv::to_nhwc(w).to(kGpu);
  const Tensor y = poisoned(conv::to_nhwc(expected).shape(), dt, kGpu);
  conv_forward_nhwc_into<2>(y, xn, wn, Tensor(), o, ConvStrategy::Autotune);
  EXPECT_TRUE(all_close(conv::from_nhwc(y.to_host()), expected));
  auto entries = autotune_entries();
  ASSERT_EQ(entries.size(), 1u);
  EXPECT_NE(entries[0].key.find("conv_forward | "), std::string::npos) << entries[0].key;
  EXPECT_EQ(entries[0].measurements, 1);
  EXPECT_EQ(entries[0].timings.size(), 2u) << "ImplicitGemm and Direct";
  const ConvStrategy chosen = entries[0].choice == "ImplicitGemm" ? ConvStrategy::ImplicitGemm
                                                                  : ConvStrategy::Direct;
  EXPECT_TRUE(entries[0].choice == "ImplicitGemm" || entries[0].choice == "Direct")
      << entries[0].choice;

  const Tensor x2 = random_tensor(rng, {2, 17, 18, 32}, dt).to(kGpu);
  const Tensor tuned = conv_forward_nhwc<2>(x2, wn, Tensor(), o, ConvStrategy::Autotune);
  const Tensor named = conv_forward_nhwc<2>(x2, wn, Tensor(), o, chosen);
  EXPECT_TRUE(bit_equal(tuned, named));
  entries = autotune_entries();
  ASSERT_EQ(entries.size(), 1u);
  EXPECT_EQ(entries[0].measurements, 1) << "the class was measured again";
  const auto kernel_of = [&](ConvStrategy st) {
    return plan_conv<2>(ConvDirection::Forward, x2.shape(), wn.shape(), dt, kGpu, o, st,
                        ConvLayout::Nhwc)
        .kernel;
  };
  EXPECT_EQ(kernel_of(ConvStrategy::Autotune), kernel_of(chosen));

  // The data gradient is its own class, measured among ImplicitGemm and Direct.
  const Tensor dy = random_tensor(rng, tuned.shape(), dt);
  const Tensor dyg = dy.to(kGpu);
  const Tensor dx = conv_data_backward_nhwc<2>(dyg, wn, x2.shape(), o, ConvStrategy::Autotune);
  EXPECT_TRUE(all_close(dx.to_host(), conv_data_backward_nhwc<2>(dy, wn.to_host(), x2.shape(), o)));
  entries = autotune_entries();
  ASSERT_EQ(entries.size(), 2u);
  const AutotuneEntry& d = entries[0];  // sorted by key: conv_data_backward, conv_forward
  EXPECT_EQ(d.key.find("conv_data_backward | "), 0u) << d.key;
  EXPECT_EQ(d.timings.size(), 2u) << "ImplicitGemm and Direct";
  const ConvStrategy data_choice =
      d.choice == "ImplicitGemm" ? ConvStrategy::ImplicitGemm : ConvStrategy::Direct;
  EXPECT_TRUE(bit_equal(conv_data_backward_nhwc<2>(dyg, wn, x2.shape(), o, ConvStrategy::Autotune),
                        conv_data_backward_nhwc<2>(dyg, wn, x2.shape(), o, data_choice)));
  autotune_clear();
}

// Every convolution kernel once on small shapes, for compute-sanitizer (well under 30 s):
// Direct forward, data and weight gradients (each check_case), the depthwise scalar, packed,
// rows, tile and column kernels, the ImplicitGemm forward in 1-D, 2-D and 3-D.
TEST(ConvGpu, MemcheckEveryKernel) {
  RUDNN_REQUIRE_CUDA();
  RUDNN_SEEDED_RNG(rng);
  const DType dt = DType::bf16;
  check_case<2>(rng, dt, make<2>({1, 4, 7, 6}, {6, 2, 3, 3}, opts<2>({1, 2}, {1, 0}, {1, 1}, 2)),
                Layout::Nchw);
  check_case<3>(rng, DType::f32,
                make<3>({1, 3, 4, 5, 4}, {4, 3, 3, 3, 3}, opts<3>({1, 1, 1}, {1, 1, 1}, {1, 1, 1})),
                Layout::Nhwc);
  const std::vector<Case<2>> depthwise = {
      make<2>({1, 12, 6, 7}, {12, 1, 3, 3}, opts<2>({1, 1}, {1, 1}, {1, 1}, 12)),    // scalar
      make<2>({1, 16, 8, 12}, {16, 1, 3, 6}, opts<2>({1, 1}, {1, 2}, {1, 1}, 16)),  // packed
      make<2>({1, 16, 9, 11}, {16, 1, 5, 5}, opts<2>({1, 2}, {2, 2}, {1, 1}, 16)),  // rows
      make<2>({1, 40, 11, 9}, {40, 1, 3, 3}, opts<2>({1, 1}, {1, 1}, {1, 1}, 40)),  // tile
      make<2>({2, 72, 9, 37}, {72, 1, 3, 3}, opts<2>({1, 1}, {0, 2}, {1, 1}, 72)),  // tile
      make<2>({1, 16, 10, 9}, {16, 1, 3, 3}, opts<2>({2, 2}, {0, 0}, {1, 1}, 16)),  // column s2
  };
  for (const auto& c : depthwise) {
    check_case<2>(rng, dt, c, Layout::Nhwc, ConvStrategy::Auto, ConvActivation::Silu, true);
  }
  check_gemm_forward<2>(rng, dt, make<2>({1, 16, 7, 6}, {24, 16, 3, 3}, opts<2>({1, 1}, {1, 1}, {1, 1})),
                        ConvActivation::Relu, true);
  check_gemm_forward<1>(rng, dt, make<1>({1, 16, 9}, {8, 16, 3}, opts<1>({1}, {1}, {1})),
                        ConvActivation::None, false);
  check_gemm_forward<3>(rng, dt, make<3>({1, 8, 3, 4, 5}, {8, 8, 3, 3, 3},
                                         opts<3>({1, 1, 1}, {1, 1, 1}, {1, 1, 1})),
                        ConvActivation::None, false);
}

// ---- Causal conv1d -------------------------------------------------------------------------

void check_causal(Rng& rng, DType dt, int64_t B, int64_t L, int64_t C, int64_t W, bool with_bias,
                  bool with_state, bool silu, const std::vector<int32_t>& cu = {}) {
  SCOPED_TRACE(::testing::Message() << "causal_conv1d " << dtype_name(dt) << " B " << B << " L " << L
                                    << " C " << C << " W " << W << " bias " << with_bias << " state "
                                    << with_state << " silu " << silu << " varlen sequences "
                                    << (cu.empty() ? 0 : cu.size() - 1));
  const int64_t seqs = cu.empty() ? B : static_cast<int64_t>(cu.size()) - 1;
  const Tensor x = random_tensor(rng, {B, L, C}, dt), w = random_tensor(rng, {C, W}, dt);
  const Tensor b = with_bias ? random_tensor(rng, {C}, dt) : Tensor{};
  const Tensor s0 = with_state ? random_tensor(rng, {seqs, C, W - 1}, dt) : Tensor{};
  const Tensor cu_host = cu.empty() ? Tensor{} : Tensor::from_host(cu, {static_cast<int64_t>(cu.size())});
  const Tensor state_ref = with_state ? s0.to(Device::cpu()) : Tensor{};
  const Tensor expected = causal_conv1d(x, w, b, state_ref, cu_host, silu);
  const Tensor dy = random_tensor(rng, {B, L, C}, dt);
  const CausalConv1dGrads eg = causal_conv1d_backward(dy, x, w, b, s0, cu_host, silu);

  const Tensor d_x = x.to(kGpu), d_w = w.to(kGpu), d_dy = dy.to(kGpu);
  const Tensor d_b = with_bias ? b.to(kGpu) : Tensor{};
  const Tensor d_cu = cu.empty() ? Tensor{} : cu_host.to(kGpu);
  const Tensor d_state = with_state ? s0.to(kGpu) : Tensor{};
  const Tensor d_s0 = with_state ? s0.to(kGpu) : Tensor{};
  const Tensor out = poisoned({B, L, C}, dt, kGpu);
  causal_conv1d_into(out, d_x, d_w, d_b, d_state, d_cu, silu);
  EXPECT_TRUE(all_close(out.to_host(), expected)) << "forward";
  if (with_state) {
    EXPECT_TRUE(bit_equal(d_state.to_host(), state_ref)) << "state update";
  }

  auto run_backward = [&] {
    CausalConv1dGrads g;
    g.dx = poisoned({B, L, C}, dt, kGpu);
    g.dweight = poisoned({C, W}, dt, kGpu);
    if (with_bias) g.dbias = poisoned({C}, dt, kGpu);
    if (with_state) g.dinitial_state = poisoned({seqs, C, W - 1}, dt, kGpu);
    causal_conv1d_backward_into(g.dx, g.dweight, g.dbias, g.dinitial_state, d_dy, d_x, d_w, d_b,
                                d_s0, d_cu, silu);
    return g;
  };
  const CausalConv1dGrads g = run_backward(), g2 = run_backward();
  EXPECT_TRUE(all_close(g.dx.to_host(), eg.dx)) << "dx";
  EXPECT_TRUE(all_close(g.dweight.to_host(), eg.dweight)) << "dweight";
  EXPECT_TRUE(bit_equal(g.dweight.to_host(), g2.dweight.to_host())) << "dweight run to run";
  if (with_bias) {
    EXPECT_TRUE(all_close(g.dbias.to_host(), eg.dbias)) << "dbias";
    EXPECT_TRUE(bit_equal(g.dbias.to_host(), g2.dbias.to_host())) << "dbias run to run";
  }
  if (with_state) {
    EXPECT_TRUE(all_close(g.dinitial_state.to_host(), eg.dinitial_state)) << "dstate";
  }
  EXPECT_TRUE(bit_equal(d_x.to_host(), x));
  EXPECT_TRUE(bit_equal(d_dy.to_host(), dy));
  if (with_state) {
    EXPECT_TRUE(bit_equal(d_s0.to_host(), s0));
  }
}

TEST(CausalConv1dGpu, MatchesReference) {
  RUDNN_REQUIRE_CUDA();
  RUDNN_SEEDED_RNG(rng);
  for (DType dt : kDtypes)
    for (int64_t W : {1, 2, 3, 4, 5, 8, 11})
      for (int mode = 0; mode < 4; ++mode) {
        const bool bias = mode & 1, state = mode & 2;
        check_causal(rng, dt, 2, 37, 70, W, bias, state && W > 1, mode == 3);
      }
}

TEST(CausalConv1dGpu, DecodeAndShortSequences) {
  RUDNN_REQUIRE_CUDA();
  RUDNN_SEEDED_RNG(rng);
  for (DType dt : kDtypes)
    for (int64_t W : {2, 4, 8, 9}) {
      check_causal(rng, dt, 3, 1, 33, W, true, true, true);   // decode
      check_causal(rng, dt, 2, 2, 16, W, false, true, false);  // L < W - 1
    }
}

TEST(CausalConv1dGpu, Varlen) {
  RUDNN_REQUIRE_CUDA();
  RUDNN_SEEDED_RNG(rng);
  for (DType dt : kDtypes)
    for (int64_t W : {1, 3, 4, 10}) {
      check_causal(rng, dt, 1, 30, 40, W, true, W > 1, true, {0, 7, 7, 8, 30});
      check_causal(rng, dt, 1, 19, 5, W, false, false, false, {0, 19});
    }
}

// The packed kernels (W <= 8, C a multiple of the pack: forward 8 bf16/f16 or 4 f32 up to
// W = 4, half that beyond; backward 2 or 1 elements):
// several runs (16 positions) per batch row with a short last one, exactly one run, the state
// and the zero padding starting the window, C of several pack slices and of one pack, and
// the scalar forward next to them for C that does not split (36 and 70 in 16-bit types).
TEST(CausalConv1dGpu, PackedKernelsMatchReference) {
  RUDNN_REQUIRE_CUDA();
  RUDNN_SEEDED_RNG(rng);
  for (DType dt : kDtypes)
    for (int64_t W : {1, 2, 3, 4, 5, 6, 8})
      for (int mode = 0; mode < 4; ++mode) {
        const bool bias = mode & 1, state = (mode & 2) && W > 1, silu = mode != 0;
        check_causal(rng, dt, 3, 100, 64, W, bias, state, silu);
        check_causal(rng, dt, 1, 37, 288, W, bias, state, silu);
        check_causal(rng, dt, 2, 16, 8, W, bias, state, silu);
        check_causal(rng, dt, 2, 21, 36, W, bias, state, silu);
        check_causal(rng, dt, 1, 33, 70, W, bias, state, silu);
      }
}

#if RUDNN_CONV_TUNING
// The packed forward's alternatives at W = 4 (conv/cuda/dw_tuning.h): runs of 8 and 32
// positions, runs of 32 with 8-byte packs, BF16's SiLU in the logistic form (the default is
// the tanh form), each against the reference: several runs per
// row with a short last one, a row shorter than one run, the state starting the window,
// varlen boundaries cutting runs, C of one pack and of several slices.
TEST(CausalConv1dGpu, PackedForwardChoicesMatchReference) {
  RUDNN_REQUIRE_CUDA();
  RUDNN_SEEDED_RNG(rng);
  namespace cc = rudnn::conv_detail::cuda;
  struct Restore {
    cc::DwTuning saved = cc::dw_tuning();
    ~Restore() { cc::dw_tuning() = saved; }
  } restore;
  for (int choice = 0; choice < 5; ++choice) {
    SCOPED_TRACE(::testing::Message() << "DwTuning::causal_forward " << choice);
    cc::dw_tuning() = restore.saved;
    cc::dw_tuning().causal_forward = choice;
    for (DType dt : kDtypes) {
      check_causal(rng, dt, 3, 100, 64, 4, true, true, true);
      check_causal(rng, dt, 1, 37, 288, 4, false, false, true);
      check_causal(rng, dt, 2, 5, 8, 4, true, true, false);
      check_causal(rng, dt, 1, 90, 64, 4, true, true, true, {0, 5, 5, 40, 41, 90});
    }
  }
}
#endif

// Varlen sequences whose boundaries cut the packed kernels' runs (and runs inside one
// sequence next to them), empty sequences, a one-position sequence, with and without state.
TEST(CausalConv1dGpu, PackedVarlen) {
  RUDNN_REQUIRE_CUDA();
  RUDNN_SEEDED_RNG(rng);
  for (DType dt : kDtypes)
    for (int64_t W : {2, 4, 7}) {
      check_causal(rng, dt, 1, 90, 64, W, true, true, true, {0, 5, 5, 40, 41, 90});
      check_causal(rng, dt, 1, 90, 16, W, false, false, true, {0, 32, 48, 90});
      check_causal(rng, dt, 1, 70, 8, W, true, false, false, {0, 3, 70});
    }
}

// More rows than the backward's fixed grid holds: each thread walks several runs, and the
// partial rows are summed in order (checked bit-identical run to run in check_causal).
TEST(CausalConv1dGpu, PackedBackwardManyRows) {
  RUDNN_REQUIRE_CUDA();
  RUDNN_SEEDED_RNG(rng);
  check_causal(rng, DType::bf16, 1, 300000, 64, 4, true, true, true);
  check_causal(rng, DType::f32, 2, 70000, 64, 3, true, false, false);
}

// Every causal conv1d kernel once on small shapes, for compute-sanitizer (well under 30 s):
// packed forward and backward (W 4 and 6, full and short runs, state), their varlen paths,
// and the scalar forward, backward, state update and initial-state gradient (C = 5, W = 10).
TEST(CausalConv1dGpu, MemcheckEveryKernel) {
  RUDNN_REQUIRE_CUDA();
  RUDNN_SEEDED_RNG(rng);
  check_causal(rng, DType::bf16, 2, 37, 16, 4, true, true, true);
  check_causal(rng, DType::f16, 1, 20, 8, 6, false, true, false);
  check_causal(rng, DType::bf16, 1, 40, 16, 4, true, true, true, {0, 5, 5, 21, 40});
  check_causal(rng, DType::f32, 2, 13, 5, 10, true, true, true);
  check_causal(rng, DType::bf16, 1, 12, 5, 3, true, false, true, {0, 4, 12});
}

}  // namespace
}  // namespace rudnn::test
