// The grid_sample family's rows of the op contract (tests/support/op_contract.h). The rows
// are batch entries: N = rows; `cols` sets the sampled width.
#include "support/op_contract.h"

namespace rudnn::test {
namespace {

using contract::Args;
using contract::Operand;
using contract::OpRow;

constexpr int64_t kC = 3, kH = 4, kW = 5, kHo = 2, kBigCols = 8192;
const GridSampleOptions kOptions = [] {
  GridSampleOptions o;
  o.padding = GridSamplePadding::border;
  return o;
}();

Operand input(const char* name) { return {name}; }
Operand optional_output(const char* name) { return {name, DType::i32, Shape{}, true}; }

// The shapes of a sampling row. The > 2^31-element case (cols = OpRow::big_cols) samples
// single-channel strips, so that every operand passes 2^31 elements and the case still fits
// in device memory; the other cases sample [kC, kH, kW] images on a [kHo, cols] grid.
struct SampleShapes {
  Shape input, grid, out;
};
SampleShapes sample_shapes(int64_t r, int64_t cols) {
  if (cols >= kBigCols) return {{r, 1, 1, cols}, {r, 1, cols / 2, 2}, {r, 1, 1, cols / 2}};
  return {{r, kC, kH, kW}, {r, kHo, cols, 2}, {r, kC, kHo, cols}};
}

// The batch of an affine row, read from whichever operand still has its valid shape (the
// contract swaps in refused shapes one operand at a time).
int64_t affine_batch(const Args& a, int64_t valid_rank) {
  for (const auto* list : {&a.inputs, &a.outputs}) {
    for (const Tensor& t : *list) {
      if (t.defined() && (t.dim() == valid_rank || t.dim() == 7 - valid_rank)) return t.shape()[0];
    }
  }
  return 1;
}

std::vector<OpRow> make_rows() {
  std::vector<OpRow> rows;
  rows.push_back({
      .name = "grid_sample",
      .inputs = {input("input"), input("grid")},
      .outputs = {input("out")},
      .make =
          [](Rng& rng, DType dt, int64_t r, int64_t cols) {
            const SampleShapes sh = sample_shapes(r, cols);
            return Args{
                {random_tensor(rng, sh.input, dt), random_tensor(rng, sh.grid, dt, 0.0f, 0.7f)},
                {Tensor::empty(sh.out, dt)}};
          },
      .functional =
          [](const Args& a, const Stream& s) {
            return std::vector<Tensor>{grid_sample(a.inputs[0], a.inputs[1], kOptions, s)};
          },
      .into =
          [](const Args& a, const Stream& s) {
            grid_sample_into(a.outputs[0], a.inputs[0], a.inputs[1], kOptions, s);
          },
      .big_cols = kBigCols,
  });
  rows.push_back({
      .name = "grid_sample_backward",
      .inputs = {input("dout"), input("input"), input("grid")},
      .outputs = {optional_output("dinput_out"), optional_output("dgrid_out")},
      .make =
          [](Rng& rng, DType dt, int64_t r, int64_t cols) {
            const SampleShapes sh = sample_shapes(r, cols);
            return Args{{random_tensor(rng, sh.out, dt), random_tensor(rng, sh.input, dt),
                         random_tensor(rng, sh.grid, dt, 0.0f, 0.7f)},
                        {Tensor::empty(sh.input, dt), Tensor::empty(sh.grid, dt)}};
          },
      .functional =
          [](const Args& a, const Stream& s) {
            GridSampleGrads g =
                grid_sample_backward(a.inputs[0], a.inputs[1], a.inputs[2], kOptions, s);
            return std::vector<Tensor>{g.dinput, g.dgrid};
          },
      .into =
          [](const Args& a, const Stream& s) {
            grid_sample_backward_into(a.outputs[0], a.outputs[1], a.inputs[0], a.inputs[1],
                                      a.inputs[2], kOptions, s);
          },
      .big_cols = kBigCols,
  });
  rows.push_back({
      .name = "affine_grid",
      .inputs = {input("theta")},
      .outputs = {input("out")},
      .make =
          [](Rng& rng, DType dt, int64_t r, int64_t) {
            return Args{{random_tensor(rng, {r, 2, 3}, dt)}, {Tensor::empty({r, kH, kW, 2}, dt)}};
          },
      .functional =
          [](const Args& a, const Stream& s) {
            return std::vector<Tensor>{
                affine_grid(a.inputs[0], {affine_batch(a, 3), 1, kH, kW}, false, s)};
          },
      .into =
          [](const Args& a, const Stream& s) {
            affine_grid_into(a.outputs[0], a.inputs[0], {affine_batch(a, 3), 1, kH, kW}, false, s);
          },
      .big_cols = kH * kW * 2,  // the grid has kH * kW * 2 elements per row
  });
  rows.push_back({
      .name = "affine_grid_backward",
      .inputs = {input("dgrid")},
      .outputs = {input("dtheta_out")},
      .make =
          [](Rng& rng, DType dt, int64_t r, int64_t) {
            return Args{{random_tensor(rng, {r, kH, kW, 2}, dt)}, {Tensor::empty({r, 2, 3}, dt)}};
          },
      .functional =
          [](const Args& a, const Stream& s) {
            return std::vector<Tensor>{
                affine_grid_backward(a.inputs[0], {affine_batch(a, 4), 1, kH, kW}, true, s)};
          },
      .into =
          [](const Args& a, const Stream& s) {
            affine_grid_backward_into(a.outputs[0], a.inputs[0], {affine_batch(a, 4), 1, kH, kW},
                                      true, s);
          },
      .big_cols = kH * kW * 2,
  });
  return rows;
}

const std::vector<OpRow>& grid_sample_rows() {
  static const std::vector<OpRow> rows = make_rows();
  return rows;
}

RUDNN_OP_CONTRACT_SUITE(GridSampleContract, grid_sample_rows);

}  // namespace
}  // namespace rudnn::test
