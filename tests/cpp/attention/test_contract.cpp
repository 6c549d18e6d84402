// The attention family's rows of the op contract (tests/support/op_contract.h): the forward
// (out and lse, with sinks) and the backward (dq, dk, dv).
//
// The suite's rows are the batch axis B. A batch entry of `cols` elements becomes:
//   cols > 4096 and a multiple of 8 (8192, the > 2^31 case): decode shapes, q [B, 2, 2, 8]
//     and k, v [B, 1, cols / 8, 8] (SplitKv; the keys pass 2^31 elements);
//   else q [B, 2, L, 16] and k, v [B, 1, L, 16] with L = max(1, cols / 32) (200: FlashScalar
//     over 6 keys; 40000: 1250 keys, Composed in 16-bit, FlashScalar in F32).
// The masks are causal, so that the causal ranges and a sink are exercised too.
// The rows labelled *_flash_heads take head size 64 instead, q [B, 2, L, 64] and k, v
// [B, 1, L, 64] with L = max(9, cols / 64): Auto runs Flash there in 16-bit (FlashScalar in
// F32), forward and backward (without the > 2^31 case).
#include <algorithm>
#include <vector>

#include "support/op_contract.h"

namespace rudnn::test {
namespace {

using contract::Args;
using contract::Operand;
using contract::OpRow;

Operand input(const char* name) { return {name}; }
Operand output(const char* name) { return {name}; }
Operand optional_input(const char* name) { return {name, DType::i32, Shape{}, true}; }
Operand optional_output(const char* name) { return {name, DType::i32, Shape{}, true}; }

struct Entry {
  int64_t hq, hkv, lq, lk, d;
};
Entry entry_shape(int64_t cols, bool flash_heads) {
  if (flash_heads) {
    const int64_t l = std::max<int64_t>(9, cols / 64);
    return {2, 1, l, l, 64};
  }
  if (cols > 4096 && cols % 8 == 0) return {2, 1, 2, cols / 8, 8};
  const int64_t l = std::max<int64_t>(1, cols / 32);
  return {2, 1, l, l, 16};
}

// q, k, v (and sinks) of one call.
struct Qkv {
  Tensor q, k, v, sinks;
};
Qkv random_qkv(Rng& rng, DType dt, int64_t b, int64_t cols, bool flash_heads) {
  const Entry e = entry_shape(cols, flash_heads);
  return {random_tensor(rng, {b, e.hq, e.lq, e.d}, dt),
          random_tensor(rng, {b, e.hkv, e.lk, e.d}, dt),
          random_tensor(rng, {b, e.hkv, e.lk, e.d}, dt), random_tensor(rng, {e.hq}, DType::f32)};
}

AttentionOptions options_with(const Tensor& sinks) {
  return AttentionOptions{}.set_causal().set_sinks(sinks);
}

const std::vector<OpRow>& attention_rows() {
  static const std::vector<OpRow> rows = [] {
    std::vector<OpRow> r;
    for (const bool flash : {false, true}) {
      r.push_back({
          .name = "attention",
          .label = flash ? "attention_flash_heads" : "",
          .inputs = {input("q"), input("k"), input("v"), optional_input("sinks")},
          .outputs = {output("out"), optional_output("lse_out")},
          .make =
              [flash](Rng& rng, DType dt, int64_t b, int64_t cols) {
                const Qkv t = random_qkv(rng, dt, b, cols, flash);
                const Entry e = entry_shape(cols, flash);
                return Args{{t.q, t.k, t.v, t.sinks},
                            {Tensor::empty({b, e.hq, e.lq, e.d}, dt),
                             Tensor::empty({b, e.hq, e.lq}, DType::f32)}};
              },
          .functional =
              [](const Args& a, const Stream& s) {
                AttentionOptions o = options_with(a.inputs[3]);
                o.set_return_lse();
                const AttentionResult r =
                    attention(a.inputs[0], a.inputs[1], a.inputs[2], o, AttentionStrategy::Auto, s);
                return std::vector<Tensor>{r.out, r.lse};
              },
          .into =
              [](const Args& a, const Stream& s) {
                attention_into(a.outputs[0], a.outputs[1], a.inputs[0], a.inputs[1], a.inputs[2],
                               options_with(a.inputs[3]), AttentionStrategy::Auto, s);
              },
          .takes_big = !flash,
          .big_cols = 8192,
      });
      r.push_back({
          .name = "attention_backward",
          .label = flash ? "attention_backward_flash_heads" : "",
          .inputs = {input("dout"), input("q"), input("k"), input("v"), input("out"), input("lse")},
          .outputs = {output("dq_out"), output("dk_out"), output("dv_out")},
          .make =
              [flash](Rng& rng, DType dt, int64_t b, int64_t cols) {
                const Qkv t = random_qkv(rng, dt, b, cols, flash);
                AttentionOptions o = AttentionOptions{}.set_causal().set_return_lse();
                const AttentionResult f = attention(t.q, t.k, t.v, o);
                return Args{{random_tensor(rng, f.out.shape(), dt), t.q, t.k, t.v, f.out, f.lse},
                            {Tensor::empty(t.q.shape(), dt), Tensor::empty(t.k.shape(), dt),
                             Tensor::empty(t.v.shape(), dt)}};
              },
          .functional =
              [](const Args& a, const Stream& s) {
                const AttentionGrads g = attention_backward(
                    a.inputs[0], a.inputs[1], a.inputs[2], a.inputs[3], a.inputs[4], a.inputs[5],
                    AttentionOptions{}.set_causal(), AttentionStrategy::Auto, s);
                return std::vector<Tensor>{g.dq, g.dk, g.dv};
              },
          .into =
              [](const Args& a, const Stream& s) {
                AttentionGrads g;
                g.dq = a.outputs[0];
                g.dk = a.outputs[1];
                g.dv = a.outputs[2];
                attention_backward_into(g, a.inputs[0], a.inputs[1], a.inputs[2], a.inputs[3],
                                        a.inputs[4], a.inputs[5], AttentionOptions{}.set_causal(),
                                        AttentionStrategy::Auto, s);
              },
          // The backward's dk of the > 2^31 case sums over every query row of each entry: its
          // reference rows are the same per period; the case is left to the forward.
          .takes_big = false,
      });
    }
    return r;
  }();
  return rows;
}

RUDNN_OP_CONTRACT_SUITE(AttentionContract, attention_rows);

}  // namespace
}  // namespace rudnn::test
