// Every argument rule of the attention family, one by one: a bad argument is a rudnn::Error
// with the rule's code, naming the op, the argument and the rule, from the forward and the
// backward in both forms (and from plan_attention where the rule is about shapes or
// options); a refused _into call leaves its outputs as they were. Device and stream
// mismatches need a GPU and live in test_gpu.cpp. Also here: the plan's choices and its
// cap rules, which are pure functions checked on the CPU device and without one.
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "support/test_support.h"

namespace rudnn::test {
namespace {

// A valid call's arguments: q [2, 4, 3, 8], k [2, 2, 5, 8], v [2, 2, 5, 6], f32 on the CPU.
struct Call {
  Tensor q = Tensor::full({2, 4, 3, 8}, 0.5, DType::f32);
  Tensor k = Tensor::full({2, 2, 5, 8}, 0.25, DType::f32);
  Tensor v = Tensor::full({2, 2, 5, 6}, 1.0, DType::f32);
  AttentionOptions options;
  AttentionStrategy strategy = AttentionStrategy::Auto;
  // Outputs for the _into forms, and the backward's extra inputs, of the valid shapes.
  Tensor out = Tensor::full({2, 4, 3, 6}, 3.0, DType::f32);
  Tensor lse = Tensor::full({2, 4, 3}, 3.0, DType::f32);
  Tensor dout = Tensor::full({2, 4, 3, 6}, 1.0, DType::f32);
};

std::string failure(const std::function<void()>& fn, ErrorCode code, const std::string& op,
                    const std::vector<std::string>& fragments) {
  try {
    fn();
  } catch (const Error& e) {
    const std::string m = e.what();
    std::string why;
    if (e.code() != code) why += std::string(" code ") + error_code_name(e.code());
    if (m.rfind(op + ": ", 0) != 0) why += " does not start with \"" + op + ": \"";
    for (const auto& f : fragments)
      if (m.find(f) == std::string::npos) why += " lacks [" + f + "]";
    return why.empty() ? "" : why + " in \"" + m + "\"";
  } catch (const std::exception& e) {
    return std::string("non-rudnn exception ") + e.what();
  }
  return "no error";
}

enum Forms : unsigned { kForward = 1, kBackward = 2, kPlan = 4, kAll = 7 };

// Runs every form in `forms` on `c`, expecting `code` and the fragments.
void expect_error(const Call& c, ErrorCode code, const std::vector<std::string>& fragments,
                  unsigned forms = kAll) {
  const Tensor lse_out = Tensor::full(c.lse.shape(), 3.0, DType::f32);
  const Tensor out = c.out.defined() ? Tensor::full(c.out.shape(), 3.0, c.out.dtype()) : Tensor();
  const auto out_before = out.defined() ? bytes_of(out) : std::vector<unsigned char>();
  if (forms & kForward) {
    EXPECT_EQ(failure([&] { attention(c.q, c.k, c.v, c.options, c.strategy); }, code, "attention",
                      fragments),
              "")
        << "attention";
    EXPECT_EQ(failure([&] { attention_into(out, lse_out, c.q, c.k, c.v, c.options, c.strategy); },
                      code, "attention", fragments),
              "")
        << "attention_into";
    if (out.defined()) EXPECT_EQ(bytes_of(out), out_before) << "out written before the error";
  }
  if (forms & kBackward) {
    AttentionGrads g;
    g.dq = c.q.defined() ? Tensor::full(c.q.shape(), 3.0, c.q.dtype()) : Tensor();
    g.dk = c.k.defined() ? Tensor::full(c.k.shape(), 3.0, c.k.dtype()) : Tensor();
    g.dv = c.v.defined() ? Tensor::full(c.v.shape(), 3.0, c.v.dtype()) : Tensor();
    if (c.options.sinks.defined())
      g.dsinks = Tensor::full(c.options.sinks.shape(), 3.0, DType::f32);
    if (c.options.bias.defined() && c.options.bias_requires_grad)
      g.dbias = Tensor::full(c.options.bias.shape(), 3.0, DType::f32);
    const auto dq_before = g.dq.defined() ? bytes_of(g.dq) : std::vector<unsigned char>();
    EXPECT_EQ(
        failure(
            [&] { attention_backward(c.dout, c.q, c.k, c.v, c.out, c.lse, c.options, c.strategy); },
            code, "attention_backward", fragments),
        "")
        << "attention_backward";
    EXPECT_EQ(failure(
                  [&] {
                    attention_backward_into(g, c.dout, c.q, c.k, c.v, c.out, c.lse, c.options,
                                            c.strategy);
                  },
                  code, "attention_backward", fragments),
              "")
        << "attention_backward_into";
    if (g.dq.defined()) EXPECT_EQ(bytes_of(g.dq), dq_before) << "dq written before the error";
  }
  if (forms & kPlan) {
    const DType dt = c.q.defined() ? c.q.dtype() : DType::f32;
    // Option tensors made here live on the CPU: on a CUDA device the plan would (rightly)
    // report their device first, so the shape rules are asked of the CPU plan only then.
    const bool host_option_tensors = c.options.mask.defined() || c.options.bias.defined() ||
                                     c.options.sinks.defined() || c.options.alibi_slopes.defined();
    for (Device device : {Device::cpu(), Device::cuda(0)}) {
      if (device.is_cuda() && (!cuda_available() || host_option_tensors)) continue;
      EXPECT_EQ(failure(
                    [&] {
                      plan_attention(c.q.shape(), c.k.shape(), c.v.shape(), dt, c.options,
                                     c.strategy, device);
                    },
                    code, "plan_attention", fragments),
                "")
          << "plan_attention on " << device.str();
    }
  }
}

TEST(AttentionErrors, TheValidCallRuns) {
  const Call c;
  AttentionOptions o = c.options;
  o.set_return_lse();
  const AttentionResult r = attention(c.q, c.k, c.v, o);
  EXPECT_NO_THROW(attention_backward(c.dout, c.q, c.k, c.v, r.out, r.lse, o));
  EXPECT_NO_THROW(plan_attention(c.q.shape(), c.k.shape(), c.v.shape(), DType::f32, o,
                                 AttentionStrategy::Auto, Device::cpu()));
}

TEST(AttentionErrors, UndefinedOperands) {
  Call c;
  c.q = Tensor();
  expect_error(c, ErrorCode::InvalidArgument, {"q is an undefined tensor"}, kForward | kBackward);
  c = Call();
  c.k = Tensor();
  expect_error(c, ErrorCode::InvalidArgument, {"k is an undefined tensor"}, kForward | kBackward);
  c = Call();
  c.v = Tensor();
  expect_error(c, ErrorCode::InvalidArgument, {"v is an undefined tensor"}, kForward | kBackward);
  c = Call();
  c.dout = Tensor();
  expect_error(c, ErrorCode::InvalidArgument, {"dout is an undefined tensor"}, kBackward);
  c = Call();
  c.lse = Tensor();
  expect_error(c, ErrorCode::InvalidArgument, {"lse is an undefined tensor"}, kBackward);
}

TEST(AttentionErrors, Dtypes) {
  Call c;
  c.q = Tensor::full(c.q.shape(), 1.0, DType::i32);
  expect_error(c, ErrorCode::DTypeMismatch, {"q has dtype i32", "f32, f16 or bf16"},
               kForward | kBackward);
  c = Call();
  c.k = Tensor::full(c.k.shape(), 1.0, DType::bf16);
  expect_error(c, ErrorCode::DTypeMismatch, {"k has dtype bf16", "q has f32", "must match"},
               kForward | kBackward);
  c = Call();
  c.v = Tensor::full(c.v.shape(), 1.0, DType::f16);
  expect_error(c, ErrorCode::DTypeMismatch, {"v has dtype f16", "must match"},
               kForward | kBackward);
  c = Call();
  c.dout = Tensor::full(c.dout.shape(), 1.0, DType::bf16);
  expect_error(c, ErrorCode::DTypeMismatch, {"dout has dtype bf16", "must match"}, kBackward);
  c = Call();
  c.lse = Tensor::full(c.lse.shape(), 1.0, DType::bf16);
  expect_error(c, ErrorCode::DTypeMismatch, {"lse has dtype bf16", "expected f32"}, kBackward);
  // An _into output of the wrong dtype.
  c = Call();
  EXPECT_EQ(failure(
                [&] {
                  attention_into(Tensor::full(c.out.shape(), 0.0, DType::bf16), Tensor(), c.q, c.k,
                                 c.v);
                },
                ErrorCode::DTypeMismatch, "attention", {"out has dtype bf16", "expected f32"}),
            "");
  EXPECT_EQ(failure(
                [&] {
                  attention_into(c.out, Tensor::full(c.lse.shape(), 0.0, DType::f16), c.q, c.k,
                                 c.v);
                },
                ErrorCode::DTypeMismatch, "attention", {"lse_out has dtype f16", "expected f32"}),
            "");
}

TEST(AttentionErrors, Shapes) {
  Call c;
  c.q = Tensor::full({2, 4, 8}, 0.5, DType::f32);
  expect_error(c, ErrorCode::ShapeMismatch, {"q has shape [2, 4, 8]", "expected [B, H, L, D]"});
  c = Call();
  c.k = Tensor::full({2, 2, 5, 7}, 0.5, DType::f32);
  expect_error(c, ErrorCode::ShapeMismatch, {"k has shape [2, 2, 5, 7]", "q's B and D"});
  c = Call();
  c.k = Tensor::full({3, 2, 5, 8}, 0.5, DType::f32);
  expect_error(c, ErrorCode::ShapeMismatch, {"k has shape [3, 2, 5, 8]", "q's B and D"});
  c = Call();
  c.v = Tensor::full({2, 2, 4, 6}, 0.5, DType::f32);
  expect_error(c, ErrorCode::ShapeMismatch, {"v has shape [2, 2, 4, 6]", "k's B, Hkv and Lk"});
  c = Call();
  c.v = Tensor::full({2, 1, 5, 6}, 0.5, DType::f32);
  expect_error(c, ErrorCode::ShapeMismatch, {"v has shape [2, 1, 5, 6]", "k's B, Hkv and Lk"});
  // The engine layout reads the same tensors as [B, L, H, D].
  c = Call();
  c.options.set_layout(AttentionLayout::bshd);
  expect_error(c, ErrorCode::ShapeMismatch, {"q has 3 heads, k and v 5"}, kForward | kPlan);
  // Empty head sizes.
  c = Call();
  c.q = Tensor::full({2, 4, 3, 0}, 0.5, DType::f32);
  c.k = Tensor::full({2, 2, 5, 0}, 0.5, DType::f32);
  expect_error(c, ErrorCode::InvalidArgument, {"head sizes must be >= 1", "D = 0"});
  // dout, out and lse of the wrong shapes.
  c = Call();
  c.dout = Tensor::full({2, 4, 3, 5}, 0.5, DType::f32);
  expect_error(c, ErrorCode::ShapeMismatch, {"dout has shape [2, 4, 3, 5]", "[2, 4, 3, 6]"},
               kBackward);
  c = Call();
  c.out = Tensor::full({2, 4, 3, 8}, 0.5, DType::f32);
  expect_error(c, ErrorCode::ShapeMismatch, {"out has shape [2, 4, 3, 8]", "[2, 4, 3, 6]"},
               kBackward);
  c = Call();
  c.lse = Tensor::full({2, 4}, 0.5, DType::f32);
  expect_error(c, ErrorCode::ShapeMismatch, {"lse has shape [2, 4]", "[B, Hq, Lq] = [2, 4, 3]"},
               kBackward);
  // An _into output of the wrong shape.
  c = Call();
  EXPECT_EQ(
      failure(
          [&] {
            attention_into(Tensor::full({2, 4, 3, 8}, 0.0, DType::f32), Tensor(), c.q, c.k, c.v);
          },
          ErrorCode::ShapeMismatch, "attention", {"out has shape [2, 4, 3, 8]", "[2, 4, 3, 6]"}),
      "");
}

TEST(AttentionErrors, HeadsMustGroup) {
  Call c;
  c.q = Tensor::full({2, 3, 3, 8}, 0.5, DType::f32);
  c.out = Tensor::full({2, 3, 3, 6}, 0.5, DType::f32);
  c.dout = c.out;
  c.lse = Tensor::full({2, 3, 3}, 0.5, DType::f32);
  expect_error(c, ErrorCode::ShapeMismatch,
               {"q has 3 heads, k and v 2", "Hq must be a multiple of Hkv"});
  c.k = Tensor::full({2, 0, 5, 8}, 0.5, DType::f32);
  c.v = Tensor::full({2, 0, 5, 6}, 0.5, DType::f32);
  expect_error(c, ErrorCode::ShapeMismatch, {"q has 3 heads, k and v 0"});
}

TEST(AttentionErrors, Scalars) {
  for (float s : {std::numeric_limits<float>::infinity(), std::nanf("")}) {
    Call c;
    c.options.set_scale(s);
    expect_error(c, ErrorCode::InvalidArgument, {"scale must be finite"});
  }
  // Finite, but infinite once log2(e) is folded in (what the tensor-core kernels do).
  for (float s : {3e38f, -3e38f}) {
    Call c;
    c.options.set_scale(s);
    expect_error(c, ErrorCode::InvalidArgument, {"scale must be finite", "log2(e)"});
  }
  Call near;
  near.options.set_scale(2e38f);
  EXPECT_NO_THROW(attention(near.q, near.k, near.v, near.options));
  for (float cap : {0.0f, -1.0f, std::numeric_limits<float>::infinity()}) {
    Call c;
    c.options.set_softcap(cap);
    expect_error(c, ErrorCode::InvalidArgument, {"softcap must be finite and > 0"});
  }
  Call c;
  c.options.set_window(4);
  expect_error(c, ErrorCode::InvalidArgument, {"sliding window needs the causal mask"});
  c.options.set_causal().set_window(0);
  expect_error(c, ErrorCode::InvalidArgument, {"window must be >= 1", "got 0"});
}

TEST(AttentionErrors, MasksAndBiases) {
  Call c;
  c.options.set_mask(Tensor::zeros({3, 4}, DType::boolean));
  expect_error(c, ErrorCode::ShapeMismatch,
               {"mask has shape [3, 4]", "does not broadcast to [B, Hq, Lq, Lk] = [2, 4, 3, 5]"});
  c = Call();
  c.options.set_mask(Tensor::zeros({1, 1, 1, 1, 5}, DType::boolean));
  expect_error(c, ErrorCode::ShapeMismatch,
               {"mask has shape [1, 1, 1, 1, 5]", "does not broadcast"});
  c = Call();
  c.options.set_mask(Tensor::zeros({3, 5}, DType::i32));
  expect_error(c, ErrorCode::DTypeMismatch, {"mask has dtype i32", "boolean or an additive"});
  c = Call();
  c.q = Tensor::full(c.q.shape(), 0.5, DType::bf16);
  c.k = Tensor::full(c.k.shape(), 0.5, DType::bf16);
  c.v = Tensor::full(c.v.shape(), 0.5, DType::bf16);
  c.out = Tensor::full(c.out.shape(), 0.5, DType::bf16);
  c.dout = c.out;
  c.options.set_mask(Tensor::zeros({3, 5}, DType::f16));
  expect_error(c, ErrorCode::DTypeMismatch, {"mask has dtype f16", "f32 or q's dtype bf16"});
  c = Call();
  c.options.set_bias(Tensor::zeros({4, 1, 4}, DType::f32));
  expect_error(c, ErrorCode::ShapeMismatch, {"bias has shape [4, 1, 4]", "does not broadcast"});
  c = Call();
  c.options.set_bias(Tensor::zeros({4, 1, 5}, DType::boolean));
  expect_error(c, ErrorCode::DTypeMismatch, {"bias has dtype bool"});
}

TEST(AttentionErrors, PerHeadVectors) {
  Call c;
  c.options.set_sinks(Tensor::zeros({2}, DType::f32));
  expect_error(c, ErrorCode::ShapeMismatch, {"sinks has shape [2]", "expected [Hq] = [4]"});
  c = Call();
  c.options.set_sinks(Tensor::zeros({4}, DType::i32));
  expect_error(c, ErrorCode::DTypeMismatch, {"sinks has dtype i32"});
  c = Call();
  c.options.set_alibi_slopes(Tensor::zeros({1, 4}, DType::f32));
  expect_error(c, ErrorCode::ShapeMismatch, {"alibi_slopes has shape [1, 4]", "[Hq] = [4]"});
  c = Call();
  c.options.set_alibi_slopes(Tensor::zeros({4}, DType::u8));
  expect_error(c, ErrorCode::DTypeMismatch, {"alibi_slopes has dtype u8"});
}

// A varlen call: sequences of (2, 3) and (1, 2) packed queries/keys.
Call varlen_call(std::vector<int32_t> cu_q = {0, 2, 3}, std::vector<int32_t> cu_k = {0, 3, 5}) {
  Call c;
  c.q = Tensor::full({3, 4, 8}, 0.5, DType::f32);
  c.k = Tensor::full({5, 2, 8}, 0.25, DType::f32);
  c.v = Tensor::full({5, 2, 6}, 1.0, DType::f32);
  c.out = Tensor::full({3, 4, 6}, 1.0, DType::f32);
  c.dout = c.out;
  c.lse = Tensor::full({4, 3}, 0.0, DType::f32);
  c.options.set_varlen(Tensor::from_host(cu_q, {static_cast<int64_t>(cu_q.size())}),
                       Tensor::from_host(cu_k, {static_cast<int64_t>(cu_k.size())}), 2, 3);
  return c;
}

TEST(AttentionErrors, Varlen) {
  {
    Call c = varlen_call();
    AttentionOptions o = c.options;
    o.set_return_lse();
    const AttentionResult r = attention(c.q, c.k, c.v, o);
    EXPECT_NO_THROW(attention_backward(c.dout, c.q, c.k, c.v, r.out, r.lse, o));
  }
  Call c = varlen_call();
  c.options.cu_seqlens_k = Tensor();
  expect_error(c, ErrorCode::InvalidArgument, {"cu_seqlens_k is undefined"}, kForward | kBackward);
  c = varlen_call();
  c.options.cu_seqlens_q = Tensor::zeros({3}, DType::i64);
  expect_error(c, ErrorCode::DTypeMismatch, {"cu_seqlens_q has dtype i64", "expected i32"},
               kForward | kBackward);
  c = varlen_call();
  c.options.cu_seqlens_k = Tensor::zeros({2, 2}, DType::i32);
  expect_error(c, ErrorCode::ShapeMismatch, {"cu_seqlens_k has shape [2, 2]", "[B + 1]"},
               kForward | kBackward);
  c = varlen_call({0, 2, 3}, {0, 3, 4, 5});
  expect_error(c, ErrorCode::ShapeMismatch, {"cu_seqlens_k has shape [4]", "must match"},
               kForward | kBackward);
  c = varlen_call({0, 2, 1, 3}, {0, 3, 4, 5});
  c.options.max_seqlen_q = 3;
  expect_error(c, ErrorCode::InvalidArgument, {"cu_seqlens_q is not monotone", "entry 2 = 1"},
               kForward | kBackward);
  c = varlen_call({0, 3, 3}, {0, 3, 5});
  expect_error(c, ErrorCode::InvalidArgument, {"length 3 > max_seqlen_q = 2"},
               kForward | kBackward);
  c = varlen_call({0, 2, 3}, {0, 3, 6});
  expect_error(c, ErrorCode::InvalidArgument, {"cu_seqlens_k ends at 6", "5 packed rows"},
               kForward | kBackward);
  c = varlen_call({-1, 2, 3}, {0, 3, 5});
  expect_error(c, ErrorCode::InvalidArgument, {"cu_seqlens_q[0] = -1"}, kForward | kBackward);
  c = varlen_call();
  c.options.max_seqlen_k = -1;
  expect_error(c, ErrorCode::InvalidArgument, {"max_seqlen_q and max_seqlen_k must be >= 0"});
  c = varlen_call();
  c.q = Tensor::full({2, 3, 4, 8}, 0.5, DType::f32);
  expect_error(c, ErrorCode::ShapeMismatch, {"q has shape [2, 3, 4, 8]", "[total, H, D] (varlen)"});
  // A mask broadcasts to [B, Hq, max_seqlen_q, max_seqlen_k].
  c = varlen_call();
  c.options.set_mask(Tensor::zeros({2, 1, 3, 3}, DType::boolean));
  expect_error(c, ErrorCode::ShapeMismatch, {"mask has shape [2, 1, 3, 3]", "[2, 4, 2, 3]"});
  // Composed needs the lengths on the host.
  c = varlen_call();
  c.strategy = AttentionStrategy::Composed;
  expect_error(c, ErrorCode::Unsupported, {"Composed needs each sequence's length on the host"},
               kForward | kPlan);
}

TEST(AttentionErrors, Strategies) {
  // Flash: f16 / bf16 only, its head sizes only (the backward fewer), no bias gradient in
  // the backward; the rules hold on the CPU too (where the reference then runs).
  Call c;
  c.strategy = AttentionStrategy::Flash;
  expect_error(c, ErrorCode::Unsupported, {"strategy Flash", "takes f16 and bf16, got f32"});
  for (DType dt : {DType::f16, DType::bf16}) {
    c = Call();
    c.strategy = AttentionStrategy::Flash;
    c.q = Tensor::full(c.q.shape(), 0.5, dt);
    c.k = Tensor::full(c.k.shape(), 0.25, dt);
    c.v = Tensor::full(c.v.shape(), 1.0, dt);
    c.out = Tensor::full(c.out.shape(), 3.0, dt);
    c.dout = Tensor::full(c.dout.shape(), 1.0, dt);
    expect_error(c, ErrorCode::Unsupported, {"strategy Flash", "head sizes", "D = 8, Dv = 6"});
    const Tensor q = Tensor::full({1, 4, 3, 192}, 0.5, dt),
                 k = Tensor::full({1, 2, 5, 192}, 0.5, dt);
    const Tensor v = Tensor::full({1, 2, 5, 128}, 1.0, dt);
    EXPECT_NO_THROW(attention(q, k, v, {}, AttentionStrategy::Flash)) << dtype_name(dt);
    EXPECT_EQ(failure([&] { attention(q, k, k.slice(3, 0, 96), {}, AttentionStrategy::Flash); },
                      ErrorCode::Unsupported, "attention", {"D = 192, Dv = 96"}),
              "");
    // The backward takes the forward's head sizes ((192, 128) here), and no bias gradient.
    AttentionOptions o;
    o.set_return_lse();
    const AttentionResult r = attention(q, k, v, o);
    EXPECT_NO_THROW(
        attention_backward(r.out, q, k, v, r.out, r.lse, o, AttentionStrategy::Flash));
    const Tensor v96 = k.slice(3, 0, 96);
    const AttentionResult r96 = attention(q, k, v96, o);
    EXPECT_EQ(
        failure(
            [&] {
              attention_backward(r96.out, q, k, v96, r96.out, r96.lse, o, AttentionStrategy::Flash);
            },
            ErrorCode::Unsupported, "attention_backward",
            {"strategy Flash", "backward takes head sizes", "D = 192, Dv = 96"}),
        "");
    const Tensor q64 = Tensor::full({1, 4, 3, 64}, 0.5, dt),
                 k64 = Tensor::full({1, 2, 5, 64}, 0.5, dt);
    o.set_bias(Tensor::zeros({4, 3, 5}, DType::f32), true);
    const AttentionResult r64 = attention(q64, k64, k64, o);
    EXPECT_EQ(
        failure(
            [&] {
              attention_backward(r64.out, q64, k64, k64, r64.out, r64.lse, o,
                                 AttentionStrategy::Flash);
            },
            ErrorCode::Unsupported, "attention_backward", {"strategy Flash", "bias gradient"}),
        "");
    o.bias_requires_grad = false;
    EXPECT_NO_THROW(
        attention_backward(r64.out, q64, k64, k64, r64.out, r64.lse, o, AttentionStrategy::Flash));
  }
  c = Call();
  // SplitKv takes at most 8 queries.
  c = Call();
  c.q = Tensor::full({1, 2, 9, 8}, 0.5, DType::f32);
  c.k = Tensor::full({1, 2, 5, 8}, 0.5, DType::f32);
  c.v = Tensor::full({1, 2, 5, 6}, 0.5, DType::f32);
  c.out = Tensor::full({1, 2, 9, 6}, 0.5, DType::f32);
  c.strategy = AttentionStrategy::SplitKv;
  expect_error(c, ErrorCode::Unsupported, {"SplitKv takes at most 8 queries", "Lq = 9"},
               kForward | kPlan);
  c = Call();
  c.strategy = AttentionStrategy::SplitKv;
  expect_error(c, ErrorCode::Unsupported, {"SplitKv is a forward kernel"}, kBackward);
  // Head sizes beyond the CUDA-core kernels.
  c = Call();
  c.q = Tensor::zeros({1, 1, 2, 1025}, DType::f32);
  c.k = Tensor::zeros({1, 1, 3, 1025}, DType::f32);
  c.v = Tensor::zeros({1, 1, 3, 4}, DType::f32);
  c.out = Tensor::zeros({1, 1, 2, 4}, DType::f32);
  c.dout = c.out;
  c.lse = Tensor::zeros({1, 1, 2}, DType::f32);
  c.strategy = AttentionStrategy::FlashScalar;
  expect_error(c, ErrorCode::Unsupported, {"FlashScalar takes head sizes up to 1024", "D = 1025"},
               kForward | kPlan);
  expect_error(c, ErrorCode::Unsupported, {"up to 1024", "D = 1025"}, kBackward);
  // ... which Composed takes.
  c.strategy = AttentionStrategy::Composed;
  EXPECT_NO_THROW(attention(c.q, c.k, c.v, c.options, c.strategy));
}

TEST(AttentionErrors, ScoreCap) {
  Call c;
  c.options.set_max_score_bytes(0);
  expect_error(c, ErrorCode::InvalidArgument, {"max_score_bytes is 0"});
  // One query row of FP32 scores over Lk = 5 keys is 8 * 4 = 32 bytes (rounded up to 8 keys).
  c = Call();
  c.options.set_max_score_bytes(31);
  c.strategy = AttentionStrategy::Composed;
  expect_error(c, ErrorCode::InvalidArgument,
               {"max_score_bytes = 31", "smallest admissible cap for Composed is 32 bytes"},
               kForward | kPlan);
  // No kernel without score memory takes D = 1025: the error names the cap.
  c = Call();
  c.q = Tensor::zeros({1, 1, 9, 1025}, DType::f32);
  c.k = Tensor::zeros({1, 1, 3, 1025}, DType::f32);
  c.v = Tensor::zeros({1, 1, 3, 4}, DType::f32);
  c.out = Tensor::zeros({1, 1, 9, 4}, DType::f32);
  c.options.set_max_score_bytes(16);
  expect_error(c, ErrorCode::InvalidArgument,
               {"max_score_bytes = 16", "D = 1025", "smallest admissible cap is 32 bytes"},
               kForward | kPlan);
  // The bias gradient's dS under the cap.
  c = Call();
  c.options.set_bias(Tensor::zeros({1, 4, 3, 5}, DType::f32), true).set_max_score_bytes(100);
  expect_error(c, ErrorCode::InvalidArgument, {"bias gradient", "480 bytes"}, kBackward);
}

TEST(AttentionErrors, BackwardOutputsMatchTheOptions) {
  Call c;
  AttentionOptions o = c.options;
  o.set_return_lse();
  const AttentionResult r = attention(c.q, c.k, c.v, o);
  AttentionGrads g{Tensor::zeros(c.q.shape(), DType::f32),
                   Tensor::zeros(c.k.shape(), DType::f32),
                   Tensor::zeros(c.v.shape(), DType::f32),
                   Tensor::zeros({4}, DType::f32),
                   {}};
  EXPECT_EQ(failure([&] { attention_backward_into(g, c.dout, c.q, c.k, c.v, r.out, r.lse, o); },
                    ErrorCode::InvalidArgument, "attention_backward",
                    {"dsinks_out must be defined exactly when sinks are"}),
            "");
  g.dsinks = Tensor();
  g.dbias = Tensor::zeros({4, 3, 5}, DType::f32);
  EXPECT_EQ(failure([&] { attention_backward_into(g, c.dout, c.q, c.k, c.v, r.out, r.lse, o); },
                    ErrorCode::InvalidArgument, "attention_backward",
                    {"dbias_out must be defined exactly when a bias"}),
            "");
  g.dbias = Tensor();
  g.dk = Tensor::zeros({2, 2, 5, 6}, DType::f32);
  EXPECT_EQ(failure([&] { attention_backward_into(g, c.dout, c.q, c.k, c.v, r.out, r.lse, o); },
                    ErrorCode::ShapeMismatch, "attention_backward",
                    {"dk_out has shape [2, 2, 5, 6]", "expected [2, 2, 5, 8]"}),
            "");
}

TEST(AttentionErrors, OverlappingOutputs) {
  const Call c;
  const Tensor buffer = Tensor::zeros({1000}, DType::f32);
  const Tensor out = buffer.slice(0, 0, 144).view({2, 4, 3, 6});
  const Tensor lse = buffer.slice(0, 100, 124).view({2, 4, 3});
  EXPECT_EQ(failure([&] { attention_into(out, lse, c.q, c.k, c.v); }, ErrorCode::InvalidArgument,
                    "attention", {"lse_out overlaps out"}),
            "");
  EXPECT_EQ(failure([&] { attention_into(c.q.slice(3, 0, 6), Tensor(), c.q, c.k, c.v); },
                    ErrorCode::InvalidArgument, "attention", {"overlaps q"}),
            "");
}

// ---- The plan -----------------------------------------------------------------------------------

TEST(AttentionPlan, IsAPureFunctionOfItsArguments) {
  const AttentionOptions o = AttentionOptions{}.set_causal().set_max_score_bytes(512 << 20);
  const Shape q{1, 16, 1024, 256}, k{1, 2, 33792, 256};
  const AttentionPlan a =
      plan_attention(q, k, k, DType::bf16, o, AttentionStrategy::Auto, Device::cpu());
  const AttentionPlan b =
      plan_attention(q, k, k, DType::bf16, o, AttentionStrategy::Auto, Device::cpu());
  EXPECT_EQ(a.kernel, AttentionKernel::Reference);
  EXPECT_EQ(a.kernel, b.kernel);
  EXPECT_EQ(a.scratch_bytes, 0u);
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device: the GPU plan is checked on one";
  const AttentionPlan g = plan_attention(q, k, k, DType::bf16, o);
  EXPECT_LE(g.max_intermediate_bytes, size_t{512} << 20);
  EXPECT_TRUE(g.kernel == AttentionKernel::Flash || g.kernel == AttentionKernel::Composed ||
              g.kernel == AttentionKernel::FlashScalar);
  const AttentionPlan h = plan_attention(q, k, k, DType::bf16, o);
  EXPECT_EQ(g.kernel, h.kernel);
  EXPECT_EQ(g.block_rows, h.block_rows);
  EXPECT_EQ(g.scratch_bytes, h.scratch_bytes);
}

TEST(AttentionPlan, GpuChoicesAndCapRules) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device: GPU plans need its facts";
  // 16-bit prefill of Flash's head sizes runs Flash (no scratch, any cap honoured); other
  // head sizes Composed; F32 FlashScalar; decode SplitKv.
  for (int64_t d : {int64_t{64}, int64_t{96}, int64_t{128}, int64_t{192}, int64_t{256}}) {
    for (DType dt : {DType::f16, DType::bf16}) {
      const AttentionPlan f = plan_attention({2, 8, 1000, d}, {2, 2, 1000, d}, {2, 2, 1000, d}, dt,
                                             AttentionOptions{}.set_max_score_bytes(1));
      EXPECT_EQ(f.kernel, AttentionKernel::Flash) << "D = " << d;
      EXPECT_EQ(f.scratch_bytes, 0u);
      EXPECT_EQ(f.max_intermediate_bytes, 0u);
      EXPECT_FALSE(f.capped);
    }
  }
  EXPECT_EQ(
      plan_attention({1, 4, 100, 192}, {1, 2, 100, 192}, {1, 2, 100, 128}, DType::bf16).kernel,
      AttentionKernel::Flash);
  EXPECT_EQ(plan_attention({1, 4, 100, 64}, {1, 2, 100, 64}, {1, 2, 100, 64}, DType::f32).kernel,
            AttentionKernel::FlashScalar);
  const Shape q{2, 8, 1000, 40}, k{2, 2, 1000, 40};
  EXPECT_EQ(plan_attention(q, k, k, DType::bf16).kernel, AttentionKernel::Composed);
  EXPECT_EQ(plan_attention(q, k, k, DType::f32).kernel, AttentionKernel::FlashScalar);
  const AttentionPlan decode = plan_attention({2, 8, 4, 64}, {2, 2, 5000, 64}, {2, 2, 5000, 64},
                                              DType::bf16, AttentionOptions{}.set_causal());
  EXPECT_EQ(decode.kernel, AttentionKernel::SplitKv);
  EXPECT_EQ(decode.split_keys % 128, 0);
  EXPECT_EQ(decode.splits, (5000 + decode.split_keys - 1) / decode.split_keys);
  EXPECT_EQ(decode.passes, decode.splits > 1 ? 2 : 1);
  EXPECT_EQ(decode.dispatches, 1);
  EXPECT_EQ(decode.max_intermediate_bytes, 0u);
  // The cap does not touch decode.
  const AttentionPlan tiny = plan_attention({2, 8, 4, 64}, {2, 2, 5000, 64}, {2, 2, 5000, 64},
                                            DType::bf16, AttentionOptions{}.set_max_score_bytes(1));
  EXPECT_EQ(tiny.kernel, AttentionKernel::SplitKv);
  EXPECT_FALSE(tiny.capped);
  // Uncapped Composed: one block of every row, scores [B*Hq*Lq, 1000] FP32 and bf16 probs.
  const AttentionPlan full = plan_attention(q, k, k, DType::bf16);
  EXPECT_EQ(full.block_rows, 1000);
  EXPECT_EQ(full.block_heads, 16);
  EXPECT_EQ(full.max_intermediate_bytes, size_t{16} * 1000 * 1000 * 4);
  EXPECT_EQ(full.scratch_bytes, size_t{16} * 1000 * 1000 * 6);
  EXPECT_FALSE(full.capped);
  // A cap of 100 rows of all heads: blocks of every row of one head.
  const size_t row = 16 * 1000 * 4;
  const AttentionPlan blocked =
      plan_attention(q, k, k, DType::bf16, AttentionOptions{}.set_max_score_bytes(100 * row));
  EXPECT_EQ(blocked.kernel, AttentionKernel::Composed);
  EXPECT_EQ(blocked.block_rows, 1000);
  EXPECT_EQ(blocked.block_heads, 1);
  EXPECT_TRUE(blocked.capped);
  EXPECT_LE(blocked.max_intermediate_bytes, 100 * row);
  // Below a usable block (8 rows of one head), Auto takes FlashScalar (no score memory).
  const size_t head_row = 1000 * 4;
  const AttentionPlan small =
      plan_attention(q, k, k, DType::bf16, AttentionOptions{}.set_max_score_bytes(8 * head_row));
  EXPECT_EQ(small.kernel, AttentionKernel::FlashScalar);
  EXPECT_TRUE(small.capped);
  EXPECT_EQ(small.scratch_bytes, 0u);
  // Composed asked for explicitly keeps its (small) blocks.
  const AttentionPlan forced =
      plan_attention(q, k, k, DType::bf16, AttentionOptions{}.set_max_score_bytes(8 * head_row),
                     AttentionStrategy::Composed);
  EXPECT_EQ(forced.kernel, AttentionKernel::Composed);
  EXPECT_EQ(forced.block_rows, 8);
  EXPECT_EQ(forced.block_heads, 1);
  EXPECT_EQ(forced.max_intermediate_bytes, 8 * head_row);
  // Varlen never runs Composed under Auto.
  AttentionOptions v;
  v.set_varlen(Tensor::zeros({3}, DType::i32, Device::cuda(0)),
               Tensor::zeros({3}, DType::i32, Device::cuda(0)), 500, 500);
  EXPECT_EQ(plan_attention({1000, 8, 40}, {1000, 2, 40}, {1000, 2, 40}, DType::bf16, v).kernel,
            AttentionKernel::FlashScalar);
  EXPECT_EQ(plan_attention({1000, 8, 64}, {1000, 2, 64}, {1000, 2, 64}, DType::bf16, v).kernel,
            AttentionKernel::Flash);
}

}  // namespace
}  // namespace rudnn::test
