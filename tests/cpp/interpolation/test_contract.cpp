// The interpolation family's rows of the op contract (tests/support/op_contract.h). The rows
// are batch entries: input [rows, 2, 4, cols] resized along H only (scale 1 on W), so that
// every row of the output depends on its own row of the input.
#include "support/op_contract.h"

namespace rudnn::test {
namespace {

using contract::Args;
using contract::Operand;
using contract::OpRow;

InterpolateOptions opts(InterpolateMode mode, double h_scale,
                        std::optional<bool> align_corners = std::nullopt) {
  InterpolateOptions o;
  o.mode = mode;
  o.scale_factor = {h_scale, 1.0};
  o.align_corners = align_corners;
  return o;
}

Shape in_shape(int64_t r, int64_t cols) { return {r, 2, 4, cols}; }

OpRow forward_row(const char* label, InterpolateOptions o) {
  return {
      .name = "interpolate",
      .label = label,
      .inputs = {{"input"}},
      .outputs = {{"out"}},
      .make =
          [o](Rng& rng, DType dt, int64_t r, int64_t cols) {
            const Shape shape = in_shape(r, cols);
            return Args{{random_tensor(rng, shape, dt)},
                        {Tensor::empty(interpolate_output_shape(shape, o), dt)}};
          },
      .functional =
          [o](const Args& a, const Stream& s) {
            return std::vector<Tensor>{interpolate(a.inputs[0], o, s)};
          },
      .into = [o](const Args& a,
                  const Stream& s) { interpolate_into(a.outputs[0], a.inputs[0], o, s); },
  };
}

OpRow backward_row(const char* label, InterpolateOptions o) {
  return {
      .name = "interpolate_backward",
      .label = label,
      .inputs = {{"dout"}},
      .outputs = {{"dinput_out"}},
      .make =
          [o](Rng& rng, DType dt, int64_t r, int64_t cols) {
            const Shape shape = in_shape(r, cols);
            return Args{{random_tensor(rng, interpolate_output_shape(shape, o), dt)},
                        {Tensor::empty(shape, dt)}};
          },
      .functional =
          [o](const Args& a, const Stream& s) {
            const Shape& d = a.inputs[0].shape();
            return std::vector<Tensor>{
                interpolate_backward(a.inputs[0], in_shape(d[0], d[3]), o, s)};
          },
      .into =
          [o](const Args& a, const Stream& s) {
            const Shape& d = a.inputs[0].shape();
            interpolate_backward_into(a.outputs[0], a.inputs[0], in_shape(d[0], d[3]), o, s);
          },
  };
}

std::vector<OpRow> make_rows() {
  std::vector<OpRow> rows;
  rows.push_back(forward_row("interpolate_bilinear", opts(InterpolateMode::bilinear, 2.0)));
  rows.push_back(
      forward_row("interpolate_bicubic", opts(InterpolateMode::bicubic, 1.5, true)));
  rows.push_back(
      forward_row("interpolate_nearest_exact", opts(InterpolateMode::nearest_exact, 1.75)));
  rows.push_back(forward_row("interpolate_area", opts(InterpolateMode::area, 0.75)));
  rows.push_back(
      backward_row("interpolate_backward_bilinear", opts(InterpolateMode::bilinear, 2.0)));
  rows.push_back(backward_row("interpolate_backward_area", opts(InterpolateMode::area, 0.75)));
  rows.push_back(
      backward_row("interpolate_backward_nearest", opts(InterpolateMode::nearest, 2.5)));
  return rows;
}

const std::vector<OpRow>& interpolation_rows() {
  static const std::vector<OpRow> rows = make_rows();
  return rows;
}

RUDNN_OP_CONTRACT_SUITE(InterpolationContract, interpolation_rows);

}  // namespace
}  // namespace rudnn::test
