// The transformer family's rows of the op contract (tests/support/op_contract.h): rope and
// rope_backward (every position source, halves and interleaved pairs, base and freqs),
// norm_rope (a new result, and a cache written in place with and without the norm), and
// swiglu / geglu forward and backward in both forms (gate and up as two tensors; one
// [..., 2I] tensor holding the two halves).
//
// The suite's rows are the leading axis. For rope and norm_rope that is the batch axis B of
// x [B, H, T, D], one batch entry holding `cols` elements (entry_shape); for the gated
// activations it is the rows of gate [rows, I] with I = cols (the one-tensor form: x
// [rows, 2I]).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>
#include <vector>

#include "support/op_contract.h"

namespace rudnn::test {
namespace {

using contract::Args;
using contract::Operand;
using contract::OpRow;

Operand input(const char* name) { return {name}; }
Operand output(const char* name) { return {name}; }
// A float parameter that may be absent (norm_rope's weight).
Operand optional_parameter(const char* name) { return {name, DType::i32, Shape{}, true}; }
// Integer position tensors (offsets, positions): a float dtype is refused; absent is valid
// (the positions are then offset + t).
Operand position_operand(const char* name) { return {name, DType::f32, Shape{}, true}; }
// An output that is also the op's state (norm_rope's cache): absent is valid (the op then
// returns a new tensor instead).
Operand optional_output(const char* name) { return {name, DType::i32, Shape{}, true}; }

constexpr float kEps = 1e-6f;
constexpr int64_t kMaxPosition = 100000;

// One batch entry of `cols` elements as [H, T, D]: D = 128 (the vector kernels) when 256
// divides cols (8192 -> [2, 32, 128]), else D = 10 (the scalar kernels: 200 -> [2, 10, 10],
// 40000 -> [2, 2000, 10]); other counts fall back to D = 2.
struct Entry {
  int64_t h, t, d;
};
Entry entry_shape(int64_t cols) {
  if (cols % 256 == 0) return {2, cols / 256, 128};
  if (cols % 20 == 0) return {2, cols / 20, 10};
  return {1, std::max<int64_t>(cols / 2, 1), 2};
}

// Rotated features that leave a tail passed through and still fit the vector kernels at
// D = 128 (64 of 128), at least 2.
int64_t partial_dims(int64_t d) { return std::max<int64_t>(2, 2 * (d / 4)); }

// Rotated features of the freqs rows: a count the 16-bit vector kernels do not divide (the
// scalar kernel there), and never dims / 2 = 64, which the > 2^31 check would take for a
// row count and tile.
int64_t freqs_dims(int64_t d) { return std::max<int64_t>(2, d - 4); }

// D of a call: x's last axis, or the first output's when x is the argument a bad call broke
// (only one argument is broken at a time).
int64_t head_dim(const Args& a) {
  for (const Tensor* t : {&a.inputs[0], &a.outputs[0]}) {
    if (t->defined() && t->dim() >= 3) return t->shape().back();
  }
  return 2;
}

// freqs[j] = 1 / θ_j for θ_j near base^(-2j/dims), each scaled by a random factor in [0.5, 2].
Tensor random_freqs(Rng& rng, int64_t dims) {
  std::vector<double> f(static_cast<size_t>(dims / 2));
  for (size_t j = 0; j < f.size(); ++j)
    f[j] = std::pow(10000.0, 2.0 * static_cast<double>(j) / dims) * rng.uniform(0.5f, 2.0f);
  return host_tensor(f, {dims / 2}, DType::f32);
}

Tensor empty_like_shape(const Tensor& t) { return Tensor::empty(t.shape(), t.dtype()); }

// ---- rope, rope_backward ---------------------------------------------------------------------

// Halves, base 10000, every feature rotated, one position id per token ([B, T], i32).
RopeOptions rope_with_positions(const Args& a) {
  return RopeOptions{}.set_dims(head_dim(a)).set_base(10000.0f).set_positions(a.inputs[1]);
}

// Interleaved pairs, freqs, a tail passed through, one first position per batch entry
// ([B], i64), positions scaled by 0.5.
RopeOptions rope_with_offsets(const Args& a) {
  return RopeOptions{}
      .set_dims(partial_dims(head_dim(a)))
      .set_traditional(true)
      .set_freqs(a.inputs[1])
      .set_offsets(a.inputs[2])
      .set_scale(0.5f);
}

// Halves, base 500000, a tail passed through, position ids shared by the batch ([T], i64).
RopeOptions rope_with_shared_positions(const Args& a) {
  return RopeOptions{}
      .set_dims(partial_dims(head_dim(a)))
      .set_base(500000.0f)
      .set_positions(a.inputs[1]);
}

// Interleaved pairs, freqs, a tail of 4 features passed through, a scalar first position.
RopeOptions rope_with_offset(const Args& a) {
  return RopeOptions{}
      .set_dims(freqs_dims(head_dim(a)))
      .set_traditional(true)
      .set_freqs(a.inputs[1])
      .set_offset(12345);
}

void add_rope_rows(std::vector<OpRow>& rows) {
  rows.push_back({
      .name = "rope",
      .label = "rope_positions",
      .inputs = {input("x"), position_operand("positions")},
      .outputs = {output("out")},
      .make =
          [](Rng& rng, DType dt, int64_t r, int64_t cols) {
            const Entry e = entry_shape(cols);
            const Tensor x = random_tensor(rng, {r, e.h, e.t, e.d}, dt);
            return Args{{x, random_integers(rng, {r, e.t}, DType::i32, 0, kMaxPosition)},
                        {empty_like_shape(x)}};
          },
      .functional =
          [](const Args& a, const Stream& s) {
            return std::vector<Tensor>{rope(a.inputs[0], rope_with_positions(a), s)};
          },
      .into =
          [](const Args& a, const Stream& s) {
            rope_into(a.outputs[0], a.inputs[0], rope_with_positions(a), s);
          },
  });

  rows.push_back({
      .name = "rope",
      .label = "rope_interleaved_offsets",
      .inputs = {input("x"), input("freqs"), position_operand("offsets")},
      .outputs = {output("out")},
      .make =
          [](Rng& rng, DType dt, int64_t r, int64_t cols) {
            const Entry e = entry_shape(cols);
            const Tensor x = random_tensor(rng, {r, e.h, e.t, e.d}, dt);
            return Args{{x, random_freqs(rng, partial_dims(e.d)),
                         random_integers(rng, {r}, DType::i64, 0, kMaxPosition)},
                        {empty_like_shape(x)}};
          },
      .functional =
          [](const Args& a, const Stream& s) {
            return std::vector<Tensor>{rope(a.inputs[0], rope_with_offsets(a), s)};
          },
      .into =
          [](const Args& a, const Stream& s) {
            rope_into(a.outputs[0], a.inputs[0], rope_with_offsets(a), s);
          },
  });

  rows.push_back({
      .name = "rope_backward",
      .label = "rope_backward_shared_positions",
      .inputs = {input("dy"), position_operand("positions")},
      .outputs = {output("dx_out")},
      .make =
          [](Rng& rng, DType dt, int64_t r, int64_t cols) {
            const Entry e = entry_shape(cols);
            const Tensor dy = random_tensor(rng, {r, e.h, e.t, e.d}, dt);
            return Args{{dy, random_integers(rng, {e.t}, DType::i64, 0, kMaxPosition)},
                        {empty_like_shape(dy)}};
          },
      .functional =
          [](const Args& a, const Stream& s) {
            return std::vector<Tensor>{
                rope_backward(a.inputs[0], rope_with_shared_positions(a), s)};
          },
      .into =
          [](const Args& a, const Stream& s) {
            rope_backward_into(a.outputs[0], a.inputs[0], rope_with_shared_positions(a), s);
          },
  });

  rows.push_back({
      .name = "rope_backward",
      .label = "rope_backward_interleaved_offset",
      .inputs = {input("dy"), input("freqs")},
      .outputs = {output("dx_out")},
      .make =
          [](Rng& rng, DType dt, int64_t r, int64_t cols) {
            const Entry e = entry_shape(cols);
            const Tensor dy = random_tensor(rng, {r, e.h, e.t, e.d}, dt);
            return Args{{dy, random_freqs(rng, freqs_dims(e.d))}, {empty_like_shape(dy)}};
          },
      .functional =
          [](const Args& a, const Stream& s) {
            return std::vector<Tensor>{rope_backward(a.inputs[0], rope_with_offset(a), s)};
          },
      .into =
          [](const Args& a, const Stream& s) {
            rope_backward_into(a.outputs[0], a.inputs[0], rope_with_offset(a), s);
          },
  });
}

// ---- norm_rope ---------------------------------------------------------------------------------

// The rotation norm_rope applies: halves, base 10000, every feature, positions from 1.
constexpr int64_t kCacheOffset = 1;
RopeOptions norm_rope_rotation(const Args& a) {
  return RopeOptions{}.set_dims(head_dim(a)).set_base(10000.0f).set_offset(kCacheOffset);
}

// With a cache [B, H, C, D]: x [B, H, L, D] with L = C - 2, written at positions 1 .. C - 2,
// so that the cache's first and last positions must come through untouched.
Args cache_args(Rng& rng, DType dt, int64_t r, int64_t cols, bool with_weight) {
  const Entry e = entry_shape(cols);
  const int64_t c = std::max<int64_t>(e.t, 3), l = c - 2;
  std::vector<Tensor> inputs{random_tensor(rng, {r, e.h, l, e.d}, dt)};
  if (with_weight) inputs.push_back(random_tensor(rng, {e.d}, dt, 1.0f, 0.5f));
  return Args{inputs, {random_tensor(rng, {r, e.h, c, e.d}, dt)}};
}

void add_norm_rope_rows(std::vector<OpRow>& rows) {
  rows.push_back({
      .name = "norm_rope",
      .inputs = {input("x"), optional_parameter("weight")},
      .outputs = {output("out")},
      .make =
          [](Rng& rng, DType dt, int64_t r, int64_t cols) {
            const Entry e = entry_shape(cols);
            const Tensor x = random_tensor(rng, {r, e.h, e.t, e.d}, dt);
            return Args{{x, random_tensor(rng, {e.d}, DType::f32, 1.0f, 0.5f)},
                        {empty_like_shape(x)}};
          },
      .functional =
          [](const Args& a, const Stream& s) {
            return std::vector<Tensor>{
                norm_rope(a.inputs[0], RopeNorm{a.inputs[1], kEps}, norm_rope_rotation(a), {}, s)};
          },
      .into =
          [](const Args& a, const Stream& s) {
            norm_rope_into(a.outputs[0], a.inputs[0], RopeNorm{a.inputs[1], kEps},
                           norm_rope_rotation(a), s);
          },
  });

  // The cache is updated in place: an output holding values the op must keep.
  rows.push_back({
      .name = "norm_rope",
      .label = "norm_rope_cache",
      .inputs = {input("x"), optional_parameter("weight")},
      .outputs = {optional_output("cache")},
      .make = [](Rng& rng, DType dt, int64_t r,
                 int64_t cols) { return cache_args(rng, dt, r, cols, true); },
      .into =
          [](const Args& a, const Stream& s) {
            norm_rope(a.inputs[0], RopeNorm{a.inputs[1], kEps}, norm_rope_rotation(a), a.outputs[0],
                      s);
          },
      .in_place = true,
      .not_capturable_because =
          "the norm of a cache slice of several heads goes through a temporary allocated on "
          "the stream (rudnn/transformer.h, norm_rope)",
  });

  rows.push_back({
      .name = "norm_rope",
      .label = "norm_rope_cache_no_norm",
      .inputs = {input("x")},
      .outputs = {optional_output("cache")},
      .make = [](Rng& rng, DType dt, int64_t r,
                 int64_t cols) { return cache_args(rng, dt, r, cols, false); },
      .into =
          [](const Args& a, const Stream& s) {
            norm_rope(a.inputs[0], std::nullopt, norm_rope_rotation(a), a.outputs[0], s);
          },
      .in_place = true,
  });
}

// ---- swiglu, geglu -----------------------------------------------------------------------------

// Forward, two tensors: gate, up [rows, cols] -> out [rows, cols].
OpRow glu_forward_two(const char* name, GeluApproximate approximate, bool swi) {
  return {
      .name = name,
      .inputs = {input("gate"), input("up")},
      .outputs = {output("out")},
      .make =
          [](Rng& rng, DType dt, int64_t r, int64_t c) {
            return Args{
                {random_tensor(rng, {r, c}, dt, 0.0f, 2.0f), random_tensor(rng, {r, c}, dt)},
                {Tensor::empty({r, c}, dt)}};
          },
      .functional =
          [=](const Args& a, const Stream& s) {
            return std::vector<Tensor>{swi ? swiglu(a.inputs[0], a.inputs[1], s)
                                           : geglu(a.inputs[0], a.inputs[1], approximate, s)};
          },
      .into =
          [=](const Args& a, const Stream& s) {
            if (swi) {
              swiglu_into(a.outputs[0], a.inputs[0], a.inputs[1], s);
            } else {
              geglu_into(a.outputs[0], a.inputs[0], a.inputs[1], approximate, s);
            }
          },
  };
}

// Forward, one tensor of halves: x [rows, 2 cols] -> out [rows, cols].
OpRow glu_forward_halves(const char* name, const char* label, GeluApproximate approximate,
                         bool swi) {
  return {
      .name = name,
      .label = label,
      .inputs = {input("x")},
      .outputs = {output("out")},
      .make =
          [](Rng& rng, DType dt, int64_t r, int64_t c) {
            return Args{{random_tensor(rng, {r, 2 * c}, dt, 0.0f, 2.0f)},
                        {Tensor::empty({r, c}, dt)}};
          },
      .functional =
          [=](const Args& a, const Stream& s) {
            return std::vector<Tensor>{swi ? swiglu(a.inputs[0], s)
                                           : geglu(a.inputs[0], approximate, s)};
          },
      .into =
          [=](const Args& a, const Stream& s) {
            if (swi) {
              swiglu_into(a.outputs[0], a.inputs[0], s);
            } else {
              geglu_into(a.outputs[0], a.inputs[0], approximate, s);
            }
          },
  };
}

// Backward, two tensors: dy, gate, up [rows, cols] -> dgate, dup [rows, cols].
OpRow glu_backward_two(const char* name, const char* label, GeluApproximate approximate, bool swi) {
  return {
      .name = name,
      .label = label,
      .inputs = {input("dy"), input("gate"), input("up")},
      .outputs = {output("dgate_out"), output("dup_out")},
      .make =
          [](Rng& rng, DType dt, int64_t r, int64_t c) {
            return Args{{random_tensor(rng, {r, c}, dt), random_tensor(rng, {r, c}, dt, 0.0f, 2.0f),
                         random_tensor(rng, {r, c}, dt)},
                        {Tensor::empty({r, c}, dt), Tensor::empty({r, c}, dt)}};
          },
      .functional =
          [=](const Args& a, const Stream& s) {
            const GluGrads g =
                swi ? swiglu_backward(a.inputs[0], a.inputs[1], a.inputs[2], s)
                    : geglu_backward(a.inputs[0], a.inputs[1], a.inputs[2], approximate, s);
            return std::vector<Tensor>{g.dgate, g.dup};
          },
      .into =
          [=](const Args& a, const Stream& s) {
            if (swi) {
              swiglu_backward_into(a.outputs[0], a.outputs[1], a.inputs[0], a.inputs[1],
                                   a.inputs[2], s);
            } else {
              geglu_backward_into(a.outputs[0], a.outputs[1], a.inputs[0], a.inputs[1], a.inputs[2],
                                  approximate, s);
            }
          },
  };
}

// Backward, one tensor of halves: dy [rows, cols], x [rows, 2 cols] -> dx [rows, 2 cols].
OpRow glu_backward_halves(const char* name, const char* label, GeluApproximate approximate,
                          bool swi) {
  return {
      .name = name,
      .label = label,
      .inputs = {input("dy"), input("x")},
      .outputs = {output("dx_out")},
      .make =
          [](Rng& rng, DType dt, int64_t r, int64_t c) {
            return Args{
                {random_tensor(rng, {r, c}, dt), random_tensor(rng, {r, 2 * c}, dt, 0.0f, 2.0f)},
                {Tensor::empty({r, 2 * c}, dt)}};
          },
      .functional =
          [=](const Args& a, const Stream& s) {
            return std::vector<Tensor>{
                swi ? swiglu_backward(a.inputs[0], a.inputs[1], s)
                    : geglu_backward(a.inputs[0], a.inputs[1], approximate, s)};
          },
      .into =
          [=](const Args& a, const Stream& s) {
            if (swi) {
              swiglu_backward_into(a.outputs[0], a.inputs[0], a.inputs[1], s);
            } else {
              geglu_backward_into(a.outputs[0], a.inputs[0], a.inputs[1], approximate, s);
            }
          },
  };
}

void add_glu_rows(std::vector<OpRow>& rows) {
  constexpr auto erf = GeluApproximate::none, tanh = GeluApproximate::tanh;
  rows.push_back(glu_forward_two("swiglu", erf, true));
  rows.push_back(glu_forward_halves("swiglu", "swiglu_halves", erf, true));
  OpRow geglu_erf = glu_forward_two("geglu", erf, false);
  geglu_erf.label = "geglu_erf";
  rows.push_back(std::move(geglu_erf));
  rows.push_back(glu_forward_halves("geglu", "geglu_tanh_halves", tanh, false));
  rows.push_back(glu_backward_two("swiglu_backward", "swiglu_backward", erf, true));
  rows.push_back(glu_backward_halves("swiglu_backward", "swiglu_backward_halves", erf, true));
  rows.push_back(glu_backward_two("geglu_backward", "geglu_backward_tanh", tanh, false));
  rows.push_back(glu_backward_halves("geglu_backward", "geglu_backward_erf_halves", erf, false));
}

std::vector<OpRow> make_rows() {
  std::vector<OpRow> rows;
  add_rope_rows(rows);
  add_norm_rope_rows(rows);
  add_glu_rows(rows);
  return rows;
}

const std::vector<OpRow>& transformer_rows() {
  static const std::vector<OpRow> rows = make_rows();
  return rows;
}

RUDNN_OP_CONTRACT_SUITE(TransformerContract, transformer_rows);

}  // namespace
}  // namespace rudnn::test
