// Every argument rule of the transformer family: bad input is a rudnn::Error that names the
// op, the argument and the rule, and an _into form that refuses leaves its outputs as they
// were. Device and stream mismatches need a GPU and live in test_gpu.cpp.
#include <cmath>
#include <limits>

#include "support/test_support.h"

namespace rudnn::test {
namespace {

const Tensor kX = Tensor::full({2, 3, 4, 8}, 0.5, DType::bf16);  // [B, H, T, D]

RopeOptions good() {
  RopeOptions o;
  o.dims = 8;
  o.base = 10000.0f;
  return o;
}

// Runs `fn` against rope, rope_into, rope_backward and rope_backward_into with options `o`,
// expecting `code` and the fragments (the op's name is checked per form).
void expect_rope_error(const RopeOptions& o, ErrorCode code,
                       std::initializer_list<std::string> fragments, const Tensor& x = kX) {
  const Tensor out =
      Tensor::full(x.dim() > 0 ? x.shape() : Shape{1}, 3.0, x.defined() ? x.dtype() : DType::f32);
  const auto out_before = bytes_of(out);
  std::vector<std::string> f(fragments);
  const auto with = [&](const char* op) {
    std::vector<std::string> all = f;
    all.insert(all.begin(), std::string(op) + ":");
    return all;
  };
  const auto check = [&](const std::function<void()>& fn, const char* op) {
    const auto frags = with(op);
    bool ok = true;
    std::string missing;
    try {
      fn();
      ok = false;
      missing = "no error";
    } catch (const Error& e) {
      if (e.code() != code) {
        ok = false;
        missing = std::string("code ") + error_code_name(e.code());
      }
      for (const auto& fr : frags) {
        if (std::string(e.what()).find(fr) == std::string::npos) {
          ok = false;
          missing += " [" + fr + "] not in \"" + e.what() + "\"";
        }
      }
    }
    EXPECT_TRUE(ok) << op << ": " << missing;
  };
  check([&] { rope(x, o); }, "rope");
  check([&] { rope_into(out, x, o); }, "rope");
  check([&] { rope_backward(x, o); }, "rope_backward");
  check([&] { rope_backward_into(out, x, o); }, "rope_backward");
  EXPECT_EQ(bytes_of(out), out_before) << "an output was written before the error";
}

TEST(TransformerErrors, RopeDims) {
  for (int64_t dims : {int64_t{7}, int64_t{10}, int64_t{0}, int64_t{-2}, int64_t{1}}) {
    SCOPED_TRACE(dims);
    RopeOptions o = good();
    o.dims = dims;
    expect_rope_error(o, ErrorCode::InvalidArgument,
                      {"dims is " + std::to_string(dims), "even", "D = 8"});
  }
}

TEST(TransformerErrors, RopeBaseAndFreqs) {
  RopeOptions neither = good();
  neither.base.reset();
  expect_rope_error(neither, ErrorCode::InvalidArgument,
                    {"base and freqs", "neither", "exactly one"});
  RopeOptions both = good();
  both.freqs = Tensor::full({4}, 1.0, DType::f32);
  expect_rope_error(both, ErrorCode::InvalidArgument, {"base and freqs", "both", "exactly one"});
  for (float b : {0.0f, -1.0f, std::numeric_limits<float>::infinity(),
                  std::numeric_limits<float>::quiet_NaN()}) {
    RopeOptions o = good();
    o.base = b;
    expect_rope_error(o, ErrorCode::InvalidArgument, {"base", "finite and > 0"});
  }
  RopeOptions wrong_length = good();
  wrong_length.base.reset();
  wrong_length.freqs = Tensor::full({8}, 1.0, DType::f32);
  expect_rope_error(wrong_length, ErrorCode::ShapeMismatch,
                    {"freqs has shape [8]", "[dims / 2] = [4]"});
  RopeOptions wrong_rank = wrong_length;
  wrong_rank.freqs = Tensor::full({1, 4}, 1.0, DType::f32);
  expect_rope_error(wrong_rank, ErrorCode::ShapeMismatch, {"freqs has shape [1, 4]"});
  RopeOptions wrong_dtype = wrong_length;
  wrong_dtype.freqs = Tensor::full({4}, 1.0, DType::bf16);
  expect_rope_error(wrong_dtype, ErrorCode::DTypeMismatch,
                    {"freqs has dtype bf16", "expected f32"});
}

TEST(TransformerErrors, RopeScaleOffsetsAndPositions) {
  RopeOptions nan_scale = good();
  nan_scale.scale = std::numeric_limits<float>::quiet_NaN();
  expect_rope_error(nan_scale, ErrorCode::InvalidArgument, {"scale must be finite"});
  RopeOptions negative = good();
  negative.offset = -1;
  expect_rope_error(negative, ErrorCode::InvalidArgument, {"offset is -1", ">= 0"});
  RopeOptions short_offsets = good();
  short_offsets.offsets = Tensor::zeros({3}, DType::i32);
  expect_rope_error(short_offsets, ErrorCode::ShapeMismatch,
                    {"offsets has shape [3]", "[B] = [2]"});
  RopeOptions float_offsets = good();
  float_offsets.offsets = Tensor::zeros({2}, DType::f32);
  expect_rope_error(float_offsets, ErrorCode::DTypeMismatch,
                    {"offsets has dtype f32", "i32 or i64"});
  RopeOptions u8_offsets = good();
  u8_offsets.offsets = Tensor::zeros({2}, DType::u8);
  expect_rope_error(u8_offsets, ErrorCode::DTypeMismatch, {"offsets has dtype u8"});
  RopeOptions offset_and_offsets = good();
  offset_and_offsets.offset = 2;
  offset_and_offsets.offsets = Tensor::zeros({2}, DType::i64);
  expect_rope_error(offset_and_offsets, ErrorCode::InvalidArgument,
                    {"offsets given together with a non-zero offset"});
  RopeOptions bad_positions = good();
  bad_positions.positions = Tensor::zeros({2, 3}, DType::i64);
  expect_rope_error(bad_positions, ErrorCode::ShapeMismatch,
                    {"positions has shape [2, 3]", "[T] = [4]", "[B, T] = [2, 4]"});
  RopeOptions float_positions = good();
  float_positions.positions = Tensor::zeros({4}, DType::bf16);
  expect_rope_error(float_positions, ErrorCode::DTypeMismatch, {"positions has dtype bf16"});
  RopeOptions positions_and_offsets = good();
  positions_and_offsets.positions = Tensor::zeros({4}, DType::i32);
  positions_and_offsets.offsets = Tensor::zeros({2}, DType::i32);
  expect_rope_error(positions_and_offsets, ErrorCode::InvalidArgument,
                    {"positions given together with offsets"});
  RopeOptions positions_and_offset = good();
  positions_and_offset.positions = Tensor::zeros({2, 4}, DType::i32);
  positions_and_offset.offset = 1;
  expect_rope_error(positions_and_offset, ErrorCode::InvalidArgument,
                    {"positions given together with a non-zero offset"});
}

TEST(TransformerErrors, RopeInput) {
  expect_rope_error(good(), ErrorCode::ShapeMismatch, {"has shape [4, 8]", "at least 3 axes"},
                    Tensor::full({4, 8}, 1.0, DType::f32));
  expect_rope_error(good(), ErrorCode::DTypeMismatch, {"has dtype i32", "f32, f16 or bf16"},
                    Tensor::zeros({1, 4, 8}, DType::i32));
  EXPECT_TRUE(throws_error([&] { rope(Tensor(), good()); }, ErrorCode::InvalidArgument,
                           {"rope: x is an undefined tensor"}));
  EXPECT_TRUE(throws_error([&] { rope_backward(Tensor(), good()); }, ErrorCode::InvalidArgument,
                           {"rope_backward: dy is an undefined tensor"}));
}

TEST(TransformerErrors, RopeOutputs) {
  const Tensor x = Tensor::full({2, 3, 4, 8}, 0.5, DType::f32);
  EXPECT_TRUE(throws_error(
      [&] {
        rope_into(Tensor::empty({2, 3, 4, 7}, DType::f32), x, good());
      },
      ErrorCode::ShapeMismatch, {"rope", "out has shape [2, 3, 4, 7]", "expected [2, 3, 4, 8]"}));
  EXPECT_TRUE(throws_error(
      [&] {
        rope_into(Tensor::empty({2, 3, 4, 8}, DType::bf16), x, good());
      },
      ErrorCode::DTypeMismatch, {"rope", "out has dtype bf16", "expected f32"}));
  EXPECT_TRUE(throws_error([&] { rope_backward_into(Tensor(), x, good()); },
                           ErrorCode::InvalidArgument,
                           {"rope_backward", "dx_out is an undefined tensor"}));
  EXPECT_TRUE(throws_error([&] { rope_into(x, x, good()); }, ErrorCode::InvalidArgument,
                           {"rope", "out overlaps x", "must not alias"}));
  const Tensor big = Tensor::zeros({2, 3, 4, 16}, DType::f32);
  EXPECT_TRUE(throws_error([&] { rope_into(big.slice(3, 8, 16), big.slice(3, 0, 8), good()); },
                           ErrorCode::InvalidArgument, {"rope", "out overlaps x"}));
  RopeOptions f = good();
  f.base.reset();
  f.freqs = Tensor::full({4}, 1.0, DType::f32);
  const Tensor out_over_freqs = Tensor::zeros({1, 1, 1, 8}, DType::f32);
  RopeOptions g = f;
  g.freqs = out_over_freqs.view({8}).slice(0, 0, 4);
  EXPECT_TRUE(throws_error(
      [&] {
        rope_into(out_over_freqs, Tensor::zeros({1, 1, 1, 8}, DType::f32), g);
      },
      ErrorCode::InvalidArgument, {"rope", "out overlaps freqs"}));
  // A last axis that is not dense, and middle axes that do not collapse.
  const Tensor wide = Tensor::zeros({2, 3, 4, 16}, DType::f32);
  EXPECT_TRUE(throws_error([&] { rope_into(wide.slice(3, 0, 16, 2), x, good()); },
                           ErrorCode::InvalidArgument,
                           {"rope", "out has strides", "dense last axis"}));
  const Tensor five = Tensor::zeros({2, 4, 3, 4, 8}, DType::f32).transpose(1, 2);
  EXPECT_TRUE(throws_error(
      [&] {
        rope_into(five, Tensor::zeros({2, 3, 4, 4, 8}, DType::f32), good());
      },
      ErrorCode::InvalidArgument, {"rope", "out has strides", "collapse to one stride"}));
  // Rows of the output that overlap each other.
  const Tensor overlapping =
      Tensor::zeros({64}, DType::f32).as_strided({2, 1, 4, 8}, {0, 0, 8, 1}, 0);
  EXPECT_TRUE(throws_error(
      [&] {
        rope_into(overlapping, Tensor::zeros({2, 1, 4, 8}, DType::f32), good());
      },
      ErrorCode::InvalidArgument, {"rope", "out has strides"}));
}

TEST(TransformerErrors, FrequencyHelpers) {
  EXPECT_TRUE(throws_error([] { rope_llama3_freqs(7, 500000.0f, {}); }, ErrorCode::InvalidArgument,
                           {"rope_llama3_freqs", "dims is 7"}));
  EXPECT_TRUE(throws_error([] { rope_llama3_freqs(128, 1.0f, {}); }, ErrorCode::InvalidArgument,
                           {"rope_llama3_freqs", "base must be finite and > 1"}));
  EXPECT_TRUE(throws_error(
      [] {
        rope_llama3_freqs(128, 500000.0f, Llama3RopeScaling{0.0f, 1.0f, 4.0f, 8192});
      },
      ErrorCode::InvalidArgument, {"rope_llama3_freqs", "factor must be finite and > 0"}));
  EXPECT_TRUE(throws_error(
      [] {
        rope_llama3_freqs(128, 500000.0f, Llama3RopeScaling{8.0f, 4.0f, 4.0f, 8192});
      },
      ErrorCode::InvalidArgument, {"rope_llama3_freqs", "high_freq_factor", "must exceed"}));
  EXPECT_TRUE(throws_error(
      [] {
        rope_llama3_freqs(128, 500000.0f, Llama3RopeScaling{8.0f, 1.0f, 4.0f, 0});
      },
      ErrorCode::InvalidArgument, {"rope_llama3_freqs", "original_max_position is 0"}));
  YarnRopeScaling y;
  y.beta_fast = 1.0f;
  y.beta_slow = 32.0f;
  EXPECT_TRUE(throws_error([&] { rope_yarn_freqs(128, 10000.0f, y); }, ErrorCode::InvalidArgument,
                           {"rope_yarn_freqs", "beta_fast", "must exceed beta_slow"}));
  EXPECT_TRUE(throws_error([] { rope_yarn_freqs(0, 10000.0f, {}); }, ErrorCode::InvalidArgument,
                           {"rope_yarn_freqs", "dims is 0"}));
  YarnRopeScaling z;
  z.factor = -2.0f;
  EXPECT_TRUE(throws_error([&] { rope_yarn_freqs(64, 10000.0f, z); }, ErrorCode::InvalidArgument,
                           {"rope_yarn_freqs", "factor must be finite and > 0"}));
}

TEST(TransformerErrors, NormRope) {
  const Tensor x = Tensor::full({2, 3, 4, 8}, 0.5, DType::bf16);
  const Tensor w = Tensor::full({8}, 1.0, DType::f32);
  const Tensor cache = Tensor::full({2, 3, 10, 8}, 2.0, DType::bf16);
  const auto cache_before = bytes_of(cache);
  RopeOptions o = good();
  o.offset = 3;
  const auto nr = [&](const RopeOptions& opt, const std::optional<RopeNorm>& norm,
                      const Tensor& c) {
    return [opt, norm, c, &x] { norm_rope(x, norm, opt, c); };
  };
  // The cache: too short, another dtype, another shape, overlapping x.
  o.offset = 7;
  EXPECT_TRUE(throws_error(nr(o, RopeNorm{w, 1e-6f}, cache), ErrorCode::ShapeMismatch,
                           {"norm_rope: cache holds C = 10 positions; offset + L = 11"}));
  o.offset = 3;
  EXPECT_TRUE(throws_error(nr(o, std::nullopt, Tensor::full({2, 3, 10, 8}, 0.0, DType::f16)),
                           ErrorCode::DTypeMismatch,
                           {"norm_rope: cache has dtype f16, x has bf16"}));
  EXPECT_TRUE(throws_error(
      nr(o, std::nullopt, Tensor::full({2, 4, 10, 8}, 0.0, DType::bf16)), ErrorCode::ShapeMismatch,
      {"norm_rope: cache has shape [2, 4, 10, 8], expected [B, H, C, D] = [2, 3, C, 8]"}));
  EXPECT_TRUE(throws_error(nr(o, std::nullopt, Tensor::full({2, 3, 10}, 0.0, DType::bf16)),
                           ErrorCode::ShapeMismatch, {"norm_rope: cache has shape [2, 3, 10]"}));
  EXPECT_TRUE(throws_error([&] { norm_rope(cache.slice(2, 0, 4), std::nullopt, o, cache); },
                           ErrorCode::InvalidArgument, {"norm_rope: cache overlaps x"}));
  EXPECT_TRUE(throws_error(
      [&] {
        norm_rope(Tensor::full({2, 4, 8}, 0.5, DType::bf16), std::nullopt, o, cache);
      },
      ErrorCode::ShapeMismatch,
      {"norm_rope: x has shape [2, 4, 8]; with a cache x must be [B, H, L, D]"}));
  // The norm and the rotation, under norm_rope's name.
  EXPECT_TRUE(throws_error(nr(o, RopeNorm{w, 0.0f}, cache), ErrorCode::InvalidArgument,
                           {"norm_rope: eps must be finite and > 0"}));
  EXPECT_TRUE(throws_error(nr(o, RopeNorm{Tensor::full({4}, 1.0, DType::f32), 1e-6f}, cache),
                           ErrorCode::ShapeMismatch,
                           {"norm_rope: weight has shape [4], expected [D] = [8]"}));
  EXPECT_TRUE(throws_error(nr(o, RopeNorm{Tensor::full({8}, 1.0, DType::f16), 1e-6f}, cache),
                           ErrorCode::DTypeMismatch,
                           {"norm_rope: weight has dtype f16; expected f32 or x's dtype bf16"}));
  RopeOptions per_batch = good();
  per_batch.offsets = Tensor::zeros({2}, DType::i32);
  EXPECT_TRUE(throws_error(nr(per_batch, std::nullopt, cache), ErrorCode::InvalidArgument,
                           {"norm_rope: rotation has offsets; expected a scalar offset"}));
  RopeOptions odd = good();
  odd.dims = 5;
  EXPECT_TRUE(throws_error(nr(odd, std::nullopt, cache), ErrorCode::InvalidArgument,
                           {"norm_rope: dims is 5"}));
  RopeOptions negative = good();
  negative.offset = -2;
  EXPECT_TRUE(throws_error(nr(negative, std::nullopt, cache), ErrorCode::InvalidArgument,
                           {"norm_rope: offset is -2"}));
  EXPECT_EQ(bytes_of(cache), cache_before);
  // The _into form's output.
  const Tensor out = Tensor::full({2, 3, 4, 8}, 2.0, DType::bf16);
  EXPECT_TRUE(throws_error(
      [&] {
        norm_rope_into(out, out, RopeNorm{w, 1e-6f}, good());
      },
      ErrorCode::InvalidArgument, {"norm_rope: out overlaps x"}));
  EXPECT_TRUE(throws_error(
      [&] {
        norm_rope_into(Tensor::zeros({2, 4, 3, 4, 8}, DType::bf16).transpose(1, 2),
                       Tensor::zeros({2, 3, 4, 4, 8}, DType::bf16), RopeNorm{w, 1e-6f}, good());
      },
      ErrorCode::InvalidArgument, {"norm_rope: out has strides", "collapse"}));
  EXPECT_TRUE(throws_error(
      [&] {
        norm_rope_into(Tensor::zeros({2, 3, 4, 8}, DType::f32), x, std::nullopt, good());
      },
      ErrorCode::DTypeMismatch, {"norm_rope: out has dtype f32"}));
}

// ---- Gated activations ------------------------------------------------------------------------

const Tensor kGate = Tensor::full({4, 6}, 0.5, DType::bf16);

TEST(TransformerErrors, GateAndUpMustMatch) {
  const Tensor up_shape = Tensor::full({4, 5}, 0.5, DType::bf16),
               up_dtype = Tensor::full({4, 6}, 0.5, DType::f16);
  EXPECT_TRUE(throws_error([&] { swiglu(kGate, up_shape); }, ErrorCode::ShapeMismatch,
                           {"swiglu: up has shape [4, 5], gate has [4, 6]"}));
  EXPECT_TRUE(throws_error([&] { geglu(kGate, up_dtype); }, ErrorCode::DTypeMismatch,
                           {"geglu: up has dtype f16, gate has bf16"}));
  EXPECT_TRUE(throws_error([&] { swiglu_backward(kGate, kGate, up_shape); },
                           ErrorCode::ShapeMismatch, {"swiglu_backward: up has shape"}));
  EXPECT_TRUE(throws_error([&] { geglu_backward(up_dtype, kGate, kGate); },
                           ErrorCode::DTypeMismatch, {"geglu_backward: dy has dtype f16"}));
  EXPECT_TRUE(throws_error([&] { swiglu_backward(up_shape, kGate, kGate); },
                           ErrorCode::ShapeMismatch, {"swiglu_backward: dy has shape [4, 5]"}));
  EXPECT_TRUE(throws_error([&] { swiglu(kGate, Tensor()); }, ErrorCode::InvalidArgument,
                           {"swiglu: up is an undefined tensor"}));
  EXPECT_TRUE(throws_error([&] { swiglu(Tensor(), kGate); }, ErrorCode::InvalidArgument,
                           {"swiglu: gate is an undefined tensor"}));
}

TEST(TransformerErrors, OneTensorFormNeedsAnEvenLastAxis) {
  const Tensor odd = Tensor::full({4, 7}, 0.5, DType::f32);
  EXPECT_TRUE(throws_error([&] { swiglu(odd); }, ErrorCode::InvalidArgument,
                           {"swiglu: x has shape [4, 7]", "gate and up halves", "even"}));
  EXPECT_TRUE(throws_error([&] { geglu(odd, GeluApproximate::tanh); }, ErrorCode::InvalidArgument,
                           {"geglu: x", "even"}));
  EXPECT_TRUE(throws_error(
      [&] {
        swiglu_backward(Tensor::full({4, 3}, 0.5, DType::f32), odd);
      },
      ErrorCode::InvalidArgument, {"swiglu_backward: x", "even"}));
  const Tensor x = Tensor::full({4, 8}, 0.5, DType::f32);
  EXPECT_TRUE(throws_error(
      [&] {
        swiglu_backward(Tensor::full({4, 8}, 0.5, DType::f32), x);
      },
      ErrorCode::ShapeMismatch,
      {"swiglu_backward: dy has shape [4, 8]", "x.shape[:-1] + [I] = [4, 4]"}));
  EXPECT_TRUE(throws_error(
      [&] {
        geglu_backward(Tensor::full({4, 4}, 0.5, DType::bf16), x);
      },
      ErrorCode::DTypeMismatch, {"geglu_backward: dy has dtype bf16, x has f32"}));
}

TEST(TransformerErrors, GatedInputRules) {
  EXPECT_TRUE(throws_error([&] { swiglu(Tensor::full({}, 1.0, DType::f32)); },
                           ErrorCode::ShapeMismatch, {"swiglu: x is 0-d"}));
  EXPECT_TRUE(throws_error(
      [&] {
        swiglu(Tensor::zeros({2, 4}, DType::i32));
      },
      ErrorCode::DTypeMismatch, {"swiglu: x has dtype i32"}));
  EXPECT_TRUE(throws_error(
      [&] {
        geglu(Tensor::zeros({2, 4}, DType::u8), Tensor::zeros({2, 4}, DType::u8));
      },
      ErrorCode::DTypeMismatch, {"geglu: gate has dtype u8"}));
}

TEST(TransformerErrors, GatedOutputs) {
  const Tensor x = Tensor::full({4, 12}, 0.5, DType::bf16);
  const Tensor out = Tensor::full({4, 6}, 2.0, DType::bf16);
  const auto before = bytes_of(out);
  EXPECT_TRUE(throws_error(
      [&] {
        swiglu_into(Tensor::empty({4, 5}, DType::bf16), x);
      },
      ErrorCode::ShapeMismatch, {"swiglu: out has shape [4, 5], expected [4, 6]"}));
  EXPECT_TRUE(throws_error(
      [&] {
        geglu_into(Tensor::empty({4, 6}, DType::f32), kGate, kGate);
      },
      ErrorCode::DTypeMismatch, {"geglu: out has dtype f32, expected bf16"}));
  EXPECT_TRUE(throws_error([&] { swiglu_into(x.slice(1, 6, 12), x); }, ErrorCode::InvalidArgument,
                           {"swiglu: out overlaps x"}));
  EXPECT_TRUE(throws_error([&] { swiglu_into(kGate, kGate, out); }, ErrorCode::InvalidArgument,
                           {"swiglu: out overlaps gate"}));
  EXPECT_TRUE(throws_error([&] { geglu_into(out, kGate, out); }, ErrorCode::InvalidArgument,
                           {"geglu: out overlaps up"}));
  EXPECT_TRUE(throws_error(
      [&] {
        swiglu_into(Tensor::zeros({6, 4}, DType::bf16).transpose(0, 1), kGate, kGate);
      },
      ErrorCode::InvalidArgument, {"swiglu", "out has strides", "dense last axis"}));
  // Backward outputs.
  const Tensor dy = Tensor::full({4, 6}, 1.0, DType::bf16);
  const Tensor dg = Tensor::full({4, 6}, 2.0, DType::bf16),
               du = Tensor::full({4, 6}, 2.0, DType::bf16);
  EXPECT_TRUE(throws_error([&] { swiglu_backward_into(dg, dg, dy, kGate, kGate); },
                           ErrorCode::InvalidArgument,
                           {"swiglu_backward: dgate_out overlaps dup_out"}));
  EXPECT_TRUE(throws_error([&] { swiglu_backward_into(dg, dy, dy, kGate, kGate); },
                           ErrorCode::InvalidArgument, {"swiglu_backward: dup_out overlaps dy"}));
  EXPECT_TRUE(throws_error(
      [&] {
        geglu_backward_into(dg, Tensor::empty({4, 6}, DType::f32), dy, kGate, kGate);
      },
      ErrorCode::DTypeMismatch, {"geglu_backward: dup_out has dtype f32"}));
  EXPECT_TRUE(throws_error([&] { geglu_backward_into(Tensor(), du, dy, kGate, kGate); },
                           ErrorCode::InvalidArgument,
                           {"geglu_backward: dgate_out is an undefined tensor"}));
  EXPECT_TRUE(throws_error(
      [&] {
        swiglu_backward_into(Tensor::empty({4, 6}, DType::bf16), dy, x);
      },
      ErrorCode::ShapeMismatch, {"swiglu_backward: dx_out has shape [4, 6], expected [4, 12]"}));
  EXPECT_TRUE(throws_error([&] { swiglu_backward_into(x, dy, x); }, ErrorCode::InvalidArgument,
                           {"swiglu_backward: dx_out overlaps x"}));
  EXPECT_EQ(bytes_of(out), before);
  EXPECT_EQ(to_doubles(dg), std::vector<double>(24, 2.0));
  EXPECT_EQ(to_doubles(du), std::vector<double>(24, 2.0));
}

}  // namespace
}  // namespace rudnn::test
