// The gated delta family's rows of the op contract (tests/support/op_contract.h). The rows are
// sequences: B = rows (spec 003: q, k [B,3,1,32], v [B,3,2,Dv], g, beta [B,3,2], state
// [B,2,Dv,32] F32; spec 000: query, key [B,2,3,32], value [B,2,3,Dv], initial_state
// [B,2,32,Dv]), Dv = min(cols, 48) as the state's rows. The varlen rows pack `rows`
// sequences of 1, 2, 3, 1, 2, 3, ... steps into batch 1. No row takes the > 2^31 check: a
// row's state is a few thousand elements, far from the kernels' 64-bit paths (the pool
// kernels index with int64 throughout).
#include <cmath>

#include "support/op_contract.h"

namespace rudnn::test {
namespace {

using contract::Args;
using contract::Operand;
using contract::OpRow;

constexpr int64_t kT = 3, kHk = 1, kHv = 2, kDk = 32;

int64_t value_dim(int64_t cols) { return std::max<int64_t>(1, std::min<int64_t>(cols, 48)); }

Tensor uniform_tensor(Rng& rng, const Shape& shape, DType dt, float lo, float hi) {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  std::vector<double> x(static_cast<size_t>(n));
  for (auto& e : x) e = rng.uniform(lo, hi);
  return host_tensor(x, shape, dt);
}

// q, k, v, g, beta, state for `entries` batch entries of `steps` steps and `states` states.
std::vector<Tensor> bthd_inputs(Rng& rng, DType dt, int64_t entries, int64_t steps,
                                int64_t states, int64_t dv) {
  const float key_scale = 1.0f / std::sqrt(float(kDk));
  return {random_tensor(rng, {entries, steps, kHk, kDk}, dt, 0.0f, key_scale),
          random_tensor(rng, {entries, steps, kHk, kDk}, dt, 0.0f, key_scale),
          random_tensor(rng, {entries, steps, kHv, dv}, dt),
          uniform_tensor(rng, {entries, steps, kHv}, dt, 0.8f, 1.0f),
          uniform_tensor(rng, {entries, steps, kHv}, dt, 0.0f, 1.0f),
          random_tensor(rng, {states, kHv, dv, kDk}, DType::f32, 0.0f, 0.1f)};
}

// query, key, value, beta, log_decay, initial_state.
std::vector<Tensor> rule_inputs(Rng& rng, DType dt, int64_t entries, int64_t steps,
                                int64_t states, int64_t dv) {
  return {random_tensor(rng, {entries, kHv, steps, kDk}, dt),
          random_tensor(rng, {entries, kHv, steps, kDk}, dt, 0.0f, 0.15f),
          random_tensor(rng, {entries, kHv, steps, dv}, dt),
          uniform_tensor(rng, {entries, kHv, steps}, dt, 0.0f, 1.0f),
          uniform_tensor(rng, {entries, kHv, steps}, DType::f32, -0.3f, 0.0f),
          random_tensor(rng, {states, kHv, kDk, dv}, DType::f32, 0.0f, 0.1f)};
}

GatedDeltaInput rule_of(const std::vector<Tensor>& in, size_t first = 0) {
  GatedDeltaInput r;
  r.query = in[first];
  r.key = in[first + 1];
  r.value = in[first + 2];
  r.beta = in[first + 3];
  r.log_decay = in[first + 4];
  r.initial_state = in[first + 5];
  r.query_scale = 0.18f;
  return r;
}

// Offsets of `n` packed sequences of 1, 2, 3, 1, ... steps.
Tensor packed_offsets(int64_t n) {
  std::vector<int32_t> cu{0};
  for (int64_t i = 0; i < n; ++i) cu.push_back(cu.back() + int32_t(i % 3) + 1);
  return Tensor::from_host(cu, {n + 1});
}
int64_t packed_steps(int64_t n) { return packed_offsets(n).to_vector<int32_t>().back(); }

std::vector<Operand> bthd_operands() { return {{"q"}, {"k"}, {"v"}, {"g"}, {"beta"}, {"state"}}; }
std::vector<Operand> rule_operands() {
  return {{"query"}, {"key"}, {"value"}, {"beta"}, {"log_decay"}, {"initial_state"}};
}
const Operand kOffsets{"cu_seqlens", DType::f32};

std::vector<Operand> with_offsets(std::vector<Operand> a) {
  a.push_back(kOffsets);
  return a;
}
// An upstream gradient and an optional final-state gradient before the forward's operands.
std::vector<Operand> with_gradients(const char* dy, const char* dfinal, std::vector<Operand> a) {
  a.insert(a.begin(), {Operand{dy}, Operand{dfinal, DType::i32, Shape{}, true}});
  return a;
}

std::vector<OpRow> make_rows() {
  std::vector<OpRow> rows;
  rows.push_back({
      .name = "gated_delta",
      .inputs = bthd_operands(),
      .outputs = {{"y_out"}, {"state_out"}},
      .make =
          [](Rng& rng, DType dt, int64_t r, int64_t cols) {
            const int64_t dv = value_dim(cols);
            return Args{bthd_inputs(rng, dt, r, kT, r, dv),
                        {Tensor::empty({r, kT, kHv, dv}, dt),
                         Tensor::empty({r, kHv, dv, kDk}, DType::f32)}};
          },
      .functional =
          [](const Args& a, const Stream& s) {
            const auto& i = a.inputs;
            const GatedDeltaResult r = gated_delta(i[0], i[1], i[2], i[3], i[4], i[5], s);
            return std::vector<Tensor>{r.y, r.state};
          },
      .into =
          [](const Args& a, const Stream& s) {
            const auto& i = a.inputs;
            gated_delta_into(a.outputs[0], a.outputs[1], i[0], i[1], i[2], i[3], i[4], i[5], s);
          },
      .takes_big = false,
  });
  rows.push_back({
      .name = "gated_delta_steps",
      .inputs = bthd_operands(),
      .outputs = {{"y_out"}, {"states_out"}},
      .make =
          [](Rng& rng, DType dt, int64_t r, int64_t cols) {
            const int64_t dv = value_dim(cols);
            return Args{bthd_inputs(rng, dt, r, kT, r, dv),
                        {Tensor::empty({r, kT, kHv, dv}, dt),
                         Tensor::empty({r, kT, kHv, dv, kDk}, DType::f32)}};
          },
      .functional =
          [](const Args& a, const Stream& s) {
            const auto& i = a.inputs;
            const GatedDeltaResult r = gated_delta_steps(i[0], i[1], i[2], i[3], i[4], i[5], s);
            return std::vector<Tensor>{r.y, r.state};
          },
      .into =
          [](const Args& a, const Stream& s) {
            const auto& i = a.inputs;
            gated_delta_steps_into(a.outputs[0], a.outputs[1], i[0], i[1], i[2], i[3], i[4], i[5],
                                   s);
          },
      .takes_big = false,
  });
  // In place (the pool): the _into form only, as the contract takes in-place ops. The pool
  // has 2 * rows slots (rows = 0: an empty pool), sequence b in slot 2 * rows - 1 - 2b.
  auto slot_ids = [](int64_t r) {
    std::vector<int64_t> ids;
    for (int64_t b = 0; b < r; ++b) ids.push_back(2 * r - 1 - 2 * b);
    return Tensor::from_host(ids, {r});
  };
  rows.push_back({
      .name = "gated_delta_slots",
      .inputs = {{"q"}, {"k"}, {"v"}, {"g"}, {"beta"}, {"slots", DType::f32}},
      .outputs = {{"y_out"}, {"pool"}},
      .make =
          [slot_ids](Rng& rng, DType dt, int64_t r, int64_t cols) {
            const int64_t dv = value_dim(cols);
            std::vector<Tensor> in = bthd_inputs(rng, dt, r, kT, 2 * r, dv);
            const Tensor pool = in[5];
            in[5] = slot_ids(r);
            return Args{in, {Tensor::empty({r, kT, kHv, dv}, dt), pool}};
          },
      .into =
          [](const Args& a, const Stream& s) {
            const auto& i = a.inputs;
            gated_delta_slots_into(a.outputs[0], i[0], i[1], i[2], i[3], i[4], a.outputs[1], i[5],
                                   s);
          },
      .in_place = true,
      .takes_big = false,
  });
  rows.push_back({
      .name = "gated_delta_rule",
      .inputs = rule_operands(),
      .outputs = {{"output_out"}, {"final_state_out"}},
      .make =
          [](Rng& rng, DType dt, int64_t r, int64_t cols) {
            const int64_t dv = value_dim(cols);
            return Args{rule_inputs(rng, dt, r, kT, r, dv),
                        {Tensor::empty({r, kHv, kT, dv}, dt),
                         Tensor::empty({r, kHv, kDk, dv}, DType::f32)}};
          },
      .functional =
          [](const Args& a, const Stream& s) {
            const GatedDeltaOutput o = gated_delta_rule(rule_of(a.inputs), s);
            return std::vector<Tensor>{o.output, o.final_state};
          },
      .into =
          [](const Args& a, const Stream& s) {
            gated_delta_rule_into(a.outputs[0], a.outputs[1], rule_of(a.inputs), s);
          },
      .takes_big = false,
  });
  rows.push_back({
      .name = "gated_delta_varlen",
      .inputs = with_offsets(bthd_operands()),
      .outputs = {{"y_out"}, {"state_out"}},
      .make =
          [](Rng& rng, DType dt, int64_t r, int64_t cols) {
            const int64_t dv = value_dim(cols), t = packed_steps(r);
            std::vector<Tensor> in = bthd_inputs(rng, dt, 1, t, r, dv);
            in.push_back(packed_offsets(r));
            return Args{in, {Tensor::empty({1, t, kHv, dv}, dt),
                             Tensor::empty({r, kHv, dv, kDk}, DType::f32)}};
          },
      .functional =
          [](const Args& a, const Stream& s) {
            const auto& i = a.inputs;
            const GatedDeltaResult r =
                gated_delta_varlen(i[0], i[1], i[2], i[3], i[4], i[5], i[6], s);
            return std::vector<Tensor>{r.y, r.state};
          },
      .into =
          [](const Args& a, const Stream& s) {
            const auto& i = a.inputs;
            gated_delta_varlen_into(a.outputs[0], a.outputs[1], i[0], i[1], i[2], i[3], i[4],
                                    i[5], i[6], s);
          },
      .takes_big = false,
  });
  rows.push_back({
      .name = "gated_delta_steps_varlen",
      .inputs = with_offsets(bthd_operands()),
      .outputs = {{"y_out"}, {"states_out"}},
      .make =
          [](Rng& rng, DType dt, int64_t r, int64_t cols) {
            const int64_t dv = value_dim(cols), t = packed_steps(r);
            std::vector<Tensor> in = bthd_inputs(rng, dt, 1, t, r, dv);
            in.push_back(packed_offsets(r));
            return Args{in, {Tensor::empty({1, t, kHv, dv}, dt),
                             Tensor::empty({1, t, kHv, dv, kDk}, DType::f32)}};
          },
      .functional =
          [](const Args& a, const Stream& s) {
            const auto& i = a.inputs;
            const GatedDeltaResult r =
                gated_delta_steps_varlen(i[0], i[1], i[2], i[3], i[4], i[5], i[6], s);
            return std::vector<Tensor>{r.y, r.state};
          },
      .into =
          [](const Args& a, const Stream& s) {
            const auto& i = a.inputs;
            gated_delta_steps_varlen_into(a.outputs[0], a.outputs[1], i[0], i[1], i[2], i[3],
                                          i[4], i[5], i[6], s);
          },
      .takes_big = false,
        });
  rows.push_back({
      .name = "gated_delta_slots_varlen",
      .inputs = {{"q"}, {"k"}, {"v"}, {"g"}, {"beta"}, {"slots", DType::f32}, kOffsets},
      .outputs = {{"y_out"}, {"pool"}},
      .make =
          [slot_ids](Rng& rng, DType dt, int64_t r, int64_t cols) {
            const int64_t dv = value_dim(cols), t = packed_steps(r);
            std::vector<Tensor> in = bthd_inputs(rng, dt, 1, t, 2 * r, dv);
            const Tensor pool = in[5];
            in[5] = slot_ids(r);
            in.push_back(packed_offsets(r));
            return Args{in, {Tensor::empty({1, t, kHv, dv}, dt), pool}};
          },
      .into =
          [](const Args& a, const Stream& s) {
            const auto& i = a.inputs;
            gated_delta_slots_varlen_into(a.outputs[0], i[0], i[1], i[2], i[3], i[4],
                                          a.outputs[1], i[5], i[6], s);
          },
      .in_place = true,
      .takes_big = false,
  });
  rows.push_back({
      .name = "gated_delta_rule_varlen",
      .inputs = with_offsets(rule_operands()),
      .outputs = {{"output_out"}, {"final_state_out"}},
      .make =
          [](Rng& rng, DType dt, int64_t r, int64_t cols) {
            const int64_t dv = value_dim(cols), t = packed_steps(r);
            std::vector<Tensor> in = rule_inputs(rng, dt, 1, t, r, dv);
            in.push_back(packed_offsets(r));
            return Args{in, {Tensor::empty({1, kHv, t, dv}, dt),
                             Tensor::empty({r, kHv, kDk, dv}, DType::f32)}};
          },
      .functional =
          [](const Args& a, const Stream& s) {
            const GatedDeltaOutput o = gated_delta_rule_varlen(rule_of(a.inputs), a.inputs[6], s);
            return std::vector<Tensor>{o.output, o.final_state};
          },
      .into =
          [](const Args& a, const Stream& s) {
            gated_delta_rule_varlen_into(a.outputs[0], a.outputs[1], rule_of(a.inputs),
                                         a.inputs[6], s);
          },
      .takes_big = false,
  });
  // The chunked prefill at chunk size 2: T = 3 spans a full and a padded chunk. Neither row
  // takes the > 2^31 case: it grows the batch at a few hundred elements a row, which at a
  // workspace of about 3 KB per (chunk, head) would need over 100 GB;
  // GatedDeltaChunkedGpu.BeyondTwoToThe31Elements passes 2^31 along T instead.
  const char* const kChunkWorkspace =
      "it allocates its workspace (W, U, Q K^T, the chunks' entry states) on the stream";
  // The contract compares the F32 final state at F32's tolerance (1e-5), but on the GPU the
  // chunked form rounds V' and the state to q's dtype as product operands (see the header):
  // about 1e-3 of the update for 16-bit inputs. Those rows therefore take beta = 0 (no
  // update: the final state is the decayed initial state, rounding-free; the output still
  // reads the rounded state, within the dtype's tolerance). Accuracy with updates is checked
  // against the recurrence by GatedDeltaChunkedGpu.*.
  auto chunk_inputs = [](Rng& rng, DType dt, int64_t entries, int64_t steps, int64_t states,
                         int64_t dv) {
    std::vector<Tensor> in = rule_inputs(rng, dt, entries, steps, states, dv);
    if (dt == DType::f16 || dt == DType::bf16) in[3] = Tensor::zeros(in[3].shape(), dt);
    return in;
  };
  rows.push_back({
      .name = "chunk_gated_delta_rule",
      .inputs = rule_operands(),
      .outputs = {{"output_out"}, {"final_state_out"}},
      .make =
          [chunk_inputs](Rng& rng, DType dt, int64_t r, int64_t cols) {
            const int64_t dv = value_dim(cols);
            return Args{chunk_inputs(rng, dt, r, kT, r, dv),
                        {Tensor::empty({r, kHv, kT, dv}, dt),
                         Tensor::empty({r, kHv, kDk, dv}, DType::f32)}};
          },
      .functional =
          [](const Args& a, const Stream& s) {
            const GatedDeltaOutput o = chunk_gated_delta_rule(rule_of(a.inputs), 2, s);
            return std::vector<Tensor>{o.output, o.final_state};
          },
      .into =
          [](const Args& a, const Stream& s) {
            chunk_gated_delta_rule_into(a.outputs[0], a.outputs[1], rule_of(a.inputs), 2, s);
          },
      .takes_big = false,
      .not_capturable_because = kChunkWorkspace,
  });
  rows.push_back({
      .name = "chunk_gated_delta_rule_varlen",
      .inputs = with_offsets(rule_operands()),
      .outputs = {{"output_out"}, {"final_state_out"}},
      .make =
          [chunk_inputs](Rng& rng, DType dt, int64_t r, int64_t cols) {
            const int64_t dv = value_dim(cols), t = packed_steps(r);
            std::vector<Tensor> in = chunk_inputs(rng, dt, 1, t, r, dv);
            in.push_back(packed_offsets(r));
            return Args{in, {Tensor::empty({1, kHv, t, dv}, dt),
                             Tensor::empty({r, kHv, kDk, dv}, DType::f32)}};
          },
      .functional =
          [](const Args& a, const Stream& s) {
            const GatedDeltaOutput o =
                chunk_gated_delta_rule_varlen(rule_of(a.inputs), a.inputs[6], 2, s);
            return std::vector<Tensor>{o.output, o.final_state};
          },
      .into =
          [](const Args& a, const Stream& s) {
            chunk_gated_delta_rule_varlen_into(a.outputs[0], a.outputs[1], rule_of(a.inputs),
                                               a.inputs[6], 2, s);
          },
      .takes_big = false,
      .not_capturable_because = kChunkWorkspace,
  });
  // Spec 003's chunked forms at chunk size 2 (T = 3: a full and a padded chunk); beta = 0 for
  // 16-bit inputs as above.
  auto chunk_bthd_inputs = [](Rng& rng, DType dt, int64_t entries, int64_t steps,
                              int64_t states, int64_t dv) {
    std::vector<Tensor> in = bthd_inputs(rng, dt, entries, steps, states, dv);
    if (dt == DType::f16 || dt == DType::bf16) in[4] = Tensor::zeros(in[4].shape(), dt);
    return in;
  };
  rows.push_back({
      .name = "chunk_gated_delta",
      .inputs = bthd_operands(),
      .outputs = {{"y_out"}, {"state_out"}},
      .make =
          [chunk_bthd_inputs](Rng& rng, DType dt, int64_t r, int64_t cols) {
            const int64_t dv = value_dim(cols);
            return Args{chunk_bthd_inputs(rng, dt, r, kT, r, dv),
                        {Tensor::empty({r, kT, kHv, dv}, dt),
                         Tensor::empty({r, kHv, dv, kDk}, DType::f32)}};
          },
      .functional =
          [](const Args& a, const Stream& s) {
            const auto& i = a.inputs;
            const GatedDeltaResult r = chunk_gated_delta(i[0], i[1], i[2], i[3], i[4], i[5], 2, s);
            return std::vector<Tensor>{r.y, r.state};
          },
      .into =
          [](const Args& a, const Stream& s) {
            const auto& i = a.inputs;
            chunk_gated_delta_into(a.outputs[0], a.outputs[1], i[0], i[1], i[2], i[3], i[4], i[5],
                                   2, s);
          },
      .takes_big = false,
      .not_capturable_because = kChunkWorkspace,
  });
  // In place (the pool), as gated_delta_slots.
  rows.push_back({
      .name = "chunk_gated_delta_slots",
      .inputs = {{"q"}, {"k"}, {"v"}, {"g"}, {"beta"}, {"slots", DType::f32}},
      .outputs = {{"y_out"}, {"pool"}},
      .make =
          [slot_ids, chunk_bthd_inputs](Rng& rng, DType dt, int64_t r, int64_t cols) {
            const int64_t dv = value_dim(cols);
            std::vector<Tensor> in = chunk_bthd_inputs(rng, dt, r, kT, 2 * r, dv);
            const Tensor pool = in[5];
            in[5] = slot_ids(r);
            return Args{in, {Tensor::empty({r, kT, kHv, dv}, dt), pool}};
          },
      .into =
          [](const Args& a, const Stream& s) {
            const auto& i = a.inputs;
            chunk_gated_delta_slots_into(a.outputs[0], i[0], i[1], i[2], i[3], i[4], a.outputs[1],
                                         i[5], 2, s);
          },
      .in_place = true,
      .takes_big = false,
      .not_capturable_because = kChunkWorkspace,
  });
  rows.push_back({
      .name = "chunk_gated_delta_varlen",
      .inputs = with_offsets(bthd_operands()),
      .outputs = {{"y_out"}, {"state_out"}},
      .make =
          [chunk_bthd_inputs](Rng& rng, DType dt, int64_t r, int64_t cols) {
            const int64_t dv = value_dim(cols), t = packed_steps(r);
            std::vector<Tensor> in = chunk_bthd_inputs(rng, dt, 1, t, r, dv);
            in.push_back(packed_offsets(r));
            return Args{
                in,
                {Tensor::empty({1, t, kHv, dv}, dt), Tensor::empty({r, kHv, dv, kDk}, DType::f32)}};
          },
      .functional =
          [](const Args& a, const Stream& s) {
            const auto& i = a.inputs;
            const GatedDeltaResult r =
                chunk_gated_delta_varlen(i[0], i[1], i[2], i[3], i[4], i[5], i[6], 2, s);
            return std::vector<Tensor>{r.y, r.state};
          },
      .into =
          [](const Args& a, const Stream& s) {
            const auto& i = a.inputs;
            chunk_gated_delta_varlen_into(a.outputs[0], a.outputs[1], i[0], i[1], i[2], i[3], i[4],
                                          i[5], i[6], 2, s);
          },
      .takes_big = false,
      .not_capturable_because = kChunkWorkspace,
  });
  rows.push_back({
      .name = "chunk_gated_delta_slots_varlen",
      .inputs = {{"q"}, {"k"}, {"v"}, {"g"}, {"beta"}, {"slots", DType::f32}, kOffsets},
      .outputs = {{"y_out"}, {"pool"}},
      .make =
          [slot_ids, chunk_bthd_inputs](Rng& rng, DType dt, int64_t r, int64_t cols) {
            const int64_t dv = value_dim(cols), t = packed_steps(r);
            std::vector<Tensor> in = chunk_bthd_inputs(rng, dt, 1, t, 2 * r, dv);
            const Tensor pool = in[5];
            in[5] = slot_ids(r);
            in.push_back(packed_offsets(r));
            return Args{in, {Tensor::empty({1, t, kHv, dv}, dt), pool}};
          },
      .into =
          [](const Args& a, const Stream& s) {
            const auto& i = a.inputs;
            chunk_gated_delta_slots_varlen_into(a.outputs[0], i[0], i[1], i[2], i[3], i[4],
                                                a.outputs[1], i[5], i[6], 2, s);
          },
      .in_place = true,
      .takes_big = false,
      .not_capturable_because = kChunkWorkspace,
  });
  const char* const kWorkspace =
      "it allocates its FP32 workspace (checkpoints, partial sums) on the stream";
  rows.push_back({
      .name = "gated_delta_backward",
      .inputs = with_gradients("dy", "dstate", bthd_operands()),
      .outputs = {{"dq_out"}, {"dk_out"}, {"dv_out"}, {"dg_out"}, {"dbeta_out"}, {"dstate_out"}},
      .make =
          [](Rng& rng, DType dt, int64_t r, int64_t cols) {
            const int64_t dv = value_dim(cols);
            const std::vector<Tensor> f = bthd_inputs(rng, dt, r, kT, r, dv);
            std::vector<Tensor> in{random_tensor(rng, {r, kT, kHv, dv}, dt),
                                   random_tensor(rng, {r, kHv, dv, kDk}, DType::f32, 0.0f, 0.1f)};
            in.insert(in.end(), f.begin(), f.end());
            std::vector<Tensor> out;
            for (const Tensor& t : f) out.push_back(Tensor::empty(t.shape(), t.dtype()));
            return Args{in, out};
          },
      .functional =
          [](const Args& a, const Stream& s) {
            const auto& i = a.inputs;
            const GatedDeltaGrads g =
                gated_delta_backward(i[0], i[1], i[2], i[3], i[4], i[5], i[6], i[7], {}, s);
            return std::vector<Tensor>{g.dq, g.dk, g.dv, g.dg, g.dbeta, g.dstate};
          },
      .into =
          [](const Args& a, const Stream& s) {
            const auto& i = a.inputs;
            const auto& o = a.outputs;
            gated_delta_backward_into({o[0], o[1], o[2], o[3], o[4], o[5]}, i[0], i[1], i[2], i[3],
                                      i[4], i[5], i[6], i[7], {}, s);
          },
      .takes_big = false,
      .not_capturable_because = kWorkspace,
  });
  // gated_delta_rule_backward (chunk 0) and chunk_gated_delta_rule_backward (chunk 2: on the
  // GPU the chunked backward kernels).
  auto rule_backward_row = [&](const char* name, int64_t chunk) {
    return OpRow{
        .name = name,
        .inputs = with_gradients("doutput", "dfinal_state", rule_operands()),
        .outputs = {{"dquery_out"},
                    {"dkey_out"},
                    {"dvalue_out"},
                    {"dbeta_out"},
                    {"dlog_decay_out"},
                    {"dinitial_state_out"}},
        .make =
            [](Rng& rng, DType dt, int64_t r, int64_t cols) {
              const int64_t dv = value_dim(cols);
              const std::vector<Tensor> f = rule_inputs(rng, dt, r, kT, r, dv);
              std::vector<Tensor> in{
                  random_tensor(rng, {r, kHv, kT, dv}, dt),
                  random_tensor(rng, {r, kHv, kDk, dv}, DType::f32, 0.0f, 0.1f)};
              in.insert(in.end(), f.begin(), f.end());
              std::vector<Tensor> out;
              for (const Tensor& t : f) out.push_back(Tensor::empty(t.shape(), t.dtype()));
              return Args{in, out};
            },
        .functional =
            [chunk](const Args& a, const Stream& s) {
              const GatedDeltaInput in = rule_of(a.inputs, 2);
              const GatedDeltaInputGrads g =
                  chunk > 0
                      ? chunk_gated_delta_rule_backward(a.inputs[0], a.inputs[1], in, chunk, {}, s)
                      : gated_delta_rule_backward(a.inputs[0], a.inputs[1], in, {}, s);
              return std::vector<Tensor>{g.dquery,     g.dkey,       g.dvalue,
                                         g.dbeta,      g.dlog_decay, g.dinitial_state};
            },
        .into =
            [chunk](const Args& a, const Stream& s) {
              const auto& o = a.outputs;
              const GatedDeltaInputGrads g{o[0], o[1], o[2], o[3], o[4], o[5]};
              const GatedDeltaInput in = rule_of(a.inputs, 2);
              if (chunk > 0)
                chunk_gated_delta_rule_backward_into(g, a.inputs[0], a.inputs[1], in, chunk, {},
                                                     s);
              else
                gated_delta_rule_backward_into(g, a.inputs[0], a.inputs[1], in, {}, s);
            },
        .takes_big = false,
        .not_capturable_because = kWorkspace,
        // The chunked kernels round the states, dS and dV' to a 16-bit q's dtype (see the
        // header): dlog_decay and dinitial_state carry that rounding.
        .f32_outputs_at_input_precision = chunk > 0,
    };
  };
  rows.push_back(rule_backward_row("gated_delta_rule_backward", 0));
  rows.push_back(rule_backward_row("chunk_gated_delta_rule_backward", 2));
  return rows;
}

const std::vector<OpRow>& gated_delta_rows() {
  static const std::vector<OpRow> rows = make_rows();
  return rows;
}

RUDNN_OP_CONTRACT_SUITE(GatedDeltaContract, gated_delta_rows);

}  // namespace
}  // namespace rudnn::test
