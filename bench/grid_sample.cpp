// The grid_sample family's benchmark cases at ANCHORS.md's shape: bilinear, zeros padding,
// f32 input [32, 64, 128, 128] sampled on a [32, 128, 128, 2] grid (a mild rotation and
// zoom per batch entry, made by affine_grid: the access pattern of a spatial transformer).
// The rows named "random grid" sample on a uniform random grid in [-1, 1) instead (what
// shared/anchors/anchors.py times torch on): every tap lands anywhere in its image.
// Forward: GB/s over input + grid + output, against the copy bandwidth of the same run.
// Forward + backward (dinput and dgrid): milliseconds, the anchor's unit; once with the atomic
// input gradient (the default) and once with options.deterministic (sort + gather).
// Shape options: --gs-batch N --gs-channels C --gs-size S (input S x S, grid S x S).
#include <cuda_runtime.h>
#include <rudnn/rudnn.h>

#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "harness.h"

namespace {

using namespace rudnn;
using rudnn::bench::Bench;

Tensor rotation_thetas(int64_t n, Device dev, const Stream& stream) {
  std::vector<float> theta(static_cast<size_t>(n) * 6);
  for (int64_t b = 0; b < n; ++b) {
    const double angle = 0.3 * std::sin(0.7 * static_cast<double>(b)), zoom = 0.9;
    float* t = theta.data() + b * 6;
    t[0] = static_cast<float>(zoom * std::cos(angle));
    t[1] = static_cast<float>(-zoom * std::sin(angle));
    t[2] = 0.05f;
    t[3] = static_cast<float>(zoom * std::sin(angle));
    t[4] = static_cast<float>(zoom * std::cos(angle));
    t[5] = -0.05f;
  }
  return Tensor::from_host(theta, {n, 2, 3}, dev, stream);
}

void run_all(Bench& b) {
  const int64_t N = b.size("gs-batch"), C = b.size("gs-channels"), S = b.size("gs-size");
  const DType f32 = DType::f32;
  const Shape in_shape{N, C, S, S}, grid_shape{N, S, S, 2};
  const double input_bytes = static_cast<double>(N) * C * S * S * 4;
  const double grid_bytes = static_cast<double>(N) * S * S * 2 * 4;
  const int sets = b.sets_for(static_cast<size_t>(4 * input_bytes + 2 * grid_bytes));
  std::fprintf(stderr, "grid_sample: input %s f32, rotating %d sets\n",
               bench::shape_string(in_shape).c_str(), sets);
  const std::vector<Tensor> input = b.normals(sets, in_shape, f32, 11);
  const std::vector<Tensor> dout = b.normals(sets, in_shape, f32, 12);
  const Tensor grid =
      affine_grid(rotation_thetas(N, b.dev, b.stream), {N, C, S, S}, false, b.stream);
  std::vector<float> random_values(static_cast<size_t>(N * S * S * 2));
  std::mt19937 gen(13);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  for (float& v : random_values) v = uniform(gen);
  const Tensor random_grid = Tensor::from_host(random_values, grid_shape, b.dev, b.stream);
  const GridSampleOptions o;  // bilinear, zeros, align_corners = false: torch's defaults
  for (bool random : {false, true}) {
    const std::string suffix = random ? " random grid" : "";
    std::vector<Tensor> grids;
    for (int s = 0; s < sets; ++s)
      grids.push_back((random ? random_grid : grid).to(b.dev, b.stream));
    b.sync();

    const auto check_forward = [&](const Tensor& out) {
      return b.ends(N, [&](int64_t r0, int64_t r1) {
        return bench::relative_l2_error(
            Bench::rows_host(out, r0, r1),
            grid_sample(Bench::rows_host(input[0], r0, r1), Bench::rows_host(grids[0], r0, r1), o));
      });
    };
    if (b.wanted("grid_sample bilinear" + suffix)) {
      const auto out = b.empties(sets, in_shape, f32);
      b.run(
          "grid_sample bilinear" + suffix, in_shape, f32, 2 * input_bytes + grid_bytes, sets,
          [&](int s) { grid_sample_into(out[s], input[s], grids[s], o, b.stream); },
          [&] { return check_forward(out[0]); }, 1e-4);
    }
    for (bool deterministic : {false, true}) {
      const std::string name = (deterministic ? "grid_sample bilinear fwd+bwd deterministic"
                                              : "grid_sample bilinear fwd+bwd") +
                               suffix;
      if (!b.wanted(name)) continue;
      GridSampleOptions ob = o;
      ob.deterministic = deterministic;
      const auto out = b.empties(sets, in_shape, f32);
      const auto dinput = b.empties(sets, in_shape, f32);
      const auto dgrid = b.empties(sets, grid_shape, f32);
      // Bytes: the forward's, then dout, input and grid read, dinput zeroed and scattered, dgrid
      // written.
      const double bytes = (2 * input_bytes + grid_bytes) + (4 * input_bytes + 2 * grid_bytes);
      b.run(
          name, in_shape, f32, bytes, sets,
          [&](int s) {
            grid_sample_into(out[s], input[s], grids[s], ob, b.stream);
            grid_sample_backward_into(dinput[s], dgrid[s], dout[s], input[s], grids[s], ob,
                                      b.stream);
          },
          [&] {
            const double forward = check_forward(out[0]);
            const double backward = b.ends(N, [&](int64_t r0, int64_t r1) {
              const GridSampleGrads g = grid_sample_backward(Bench::rows_host(dout[0], r0, r1),
                                                             Bench::rows_host(input[0], r0, r1),
                                                             Bench::rows_host(grids[0], r0, r1), o);
              const double di =
                  bench::relative_l2_error(Bench::rows_host(dinput[0], r0, r1), g.dinput);
              const double dg =
                  bench::relative_l2_error(Bench::rows_host(dgrid[0], r0, r1), g.dgrid);
              return std::isnan(di) || di > dg ? di : dg;
            });
            return std::isnan(forward) || forward > backward ? forward : backward;
          },
          1e-4);
    }
  }
}

rudnn::bench::Family grid_sample_family() {
  rudnn::bench::Family family;
  family.sizes = {{"gs-batch", 32, "batch of grid_sample's input"},
                  {"gs-channels", 64, "channels of grid_sample's input"},
                  {"gs-size", 128, "height = width of grid_sample's input and grid"}};
  family.run = run_all;
  return family;
}

}  // namespace

RUDNN_BENCH_FAMILY(grid_sample, grid_sample_family);
