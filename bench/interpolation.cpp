// The interpolation family's benchmark cases at ANCHORS.md's shape, f32 [32, 64, 128, 128]:
// bilinear x2 upsampling (the bar: >= 85 % of copy), nearest x2, bicubic x2, area
// 1/2, bilinear antialias 1/2, and the bilinear x2 backward (deterministic gather and the
// atomic scatter). GB/s counts the input read and the output written once.
// Shape options: --interp-batch N --interp-channels C --interp-size S (input S x S).
#include <cuda_runtime.h>
#include <rudnn/rudnn.h>

#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "harness.h"

namespace {

using namespace rudnn;
using rudnn::bench::Bench;

InterpolateOptions scaled(InterpolateMode mode, double scale, bool deterministic = true) {
  InterpolateOptions o;
  o.mode = mode;
  o.scale_factor = {scale};
  o.deterministic = deterministic;
  return o;
}

void run_all(Bench& b) {
  const int64_t N = b.size("interp-batch"), C = b.size("interp-channels"),
                S = b.size("interp-size");
  const DType f32 = DType::f32;
  const Shape in_shape{N, C, S, S};
  const double in_bytes = static_cast<double>(N) * C * S * S * 4;
  const int sets = b.sets_for(static_cast<size_t>(5 * in_bytes));
  std::fprintf(stderr, "interpolation: input %s f32, rotating %d sets\n",
               bench::shape_string(in_shape).c_str(), sets);
  const std::vector<Tensor> input = b.normals(sets, in_shape, f32, 31);
  b.sync();

  auto forward_case = [&](const std::string& name, const InterpolateOptions& o, double tol) {
    if (!b.wanted(name)) return;
    const Shape out_shape = interpolate_output_shape(in_shape, o);
    const auto out = b.empties(sets, out_shape, f32);
    const double out_bytes = static_cast<double>(shape_numel(out_shape)) * 4;
    b.run(
        name, in_shape, f32, in_bytes + out_bytes, sets,
        [&](int s) { interpolate_into(out[s], input[s], o, b.stream); },
        [&] {
          return b.ends(N, [&](int64_t r0, int64_t r1) {
            return bench::relative_l2_error(Bench::rows_host(out[0], r0, r1),
                                            interpolate(Bench::rows_host(input[0], r0, r1), o));
          });
        },
        tol);
  };
  forward_case("interpolate bilinear x2", scaled(InterpolateMode::bilinear, 2.0), 1e-6);
  forward_case("interpolate nearest x2", scaled(InterpolateMode::nearest, 2.0), 0.0);
  forward_case("interpolate bicubic x2", scaled(InterpolateMode::bicubic, 2.0), 1e-6);
  forward_case("interpolate area 1/2", scaled(InterpolateMode::area, 0.5), 1e-6);
  InterpolateOptions antialias = scaled(InterpolateMode::bilinear, 0.5);
  antialias.antialias = true;
  forward_case("interpolate bilinear antialias 1/2", antialias, 1e-6);

  // Backward of bilinear x2: dout [N, C, 2S, 2S] read, dinput written.
  for (bool deterministic : {true, false}) {
    const std::string name = deterministic ? "interpolate_backward bilinear x2"
                                           : "interpolate_backward bilinear x2 atomic";
    if (!b.wanted(name)) continue;
    const InterpolateOptions o = scaled(InterpolateMode::bilinear, 2.0, deterministic);
    const Shape out_shape = interpolate_output_shape(in_shape, o);
    const std::vector<Tensor> dout = b.normals(sets, out_shape, f32, 32);
    const auto dinput = b.empties(sets, in_shape, f32);
    b.run(
        name, out_shape, f32, in_bytes * 5, sets,
        [&](int s) { interpolate_backward_into(dinput[s], dout[s], in_shape, o, b.stream); },
        [&] {
          return b.ends(N, [&](int64_t r0, int64_t r1) {
            Shape rows_shape = in_shape;
            rows_shape[0] = r1 - r0;
            return bench::relative_l2_error(
                Bench::rows_host(dinput[0], r0, r1),
                interpolate_backward(Bench::rows_host(dout[0], r0, r1), rows_shape, o));
          });
        },
        1e-6);
  }
}

rudnn::bench::Family interpolation_family() {
  rudnn::bench::Family family;
  family.sizes = {{"interp-batch", 32, "batch of the interpolation input"},
                  {"interp-channels", 64, "channels of the interpolation input"},
                  {"interp-size", 128, "height = width of the interpolation input"}};
  family.run = run_all;
  return family;
}

}  // namespace

RUDNN_BENCH_FAMILY(interpolation, interpolation_family);
