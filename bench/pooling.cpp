// The pooling family's benchmark cases at ANCHORS.md's shape, f32 [32, 64, 128, 128]:
// max_pool2d 3x3 stride 2 padding 1 (GB/s over input read + output and I64 indices written)
// and avg_pool2d 2x2 (input read + output written), against the copy bandwidth of the same run;
// the same two on a channels-last input, and global average pooling (adaptive to 1 x 1).
// Shape options: --pool-batch N --pool-channels C --pool-size S (input S x S).
#include <cuda_runtime.h>
#include <rudnn/rudnn.h>

#include <cstdio>
#include <vector>

#include "harness.h"

namespace {

using namespace rudnn;
using rudnn::bench::Bench;

// [N, C, S, S] views of channels-last storage [N, S, S, C].
std::vector<Tensor> channels_last(const std::vector<Tensor>& stored) {
  std::vector<Tensor> views;
  for (const Tensor& t : stored) {
    const int64_t N = t.shape()[0], S = t.shape()[1], C = t.shape()[3];
    views.push_back(t.as_strided({N, C, S, S}, {S * S * C, 1, S * C, C}, t.offset()));
  }
  return views;
}

void run_all(Bench& b) {
  const int64_t N = b.size("pool-batch"), C = b.size("pool-channels"), S = b.size("pool-size");
  const DType f32 = DType::f32;
  const Shape in_shape{N, C, S, S};
  const double input_bytes = static_cast<double>(N) * C * S * S * 4;
  const int sets = b.sets_for(static_cast<size_t>(2 * input_bytes));
  std::fprintf(stderr, "pooling: input %s f32, rotating %d sets\n",
               bench::shape_string(in_shape).c_str(), sets);
  const std::vector<Tensor> input = b.normals(sets, in_shape, f32, 21);
  b.sync();

  if (b.wanted("max_pool2d 3x3 s2 p1")) {
    PoolOptions o;
    o.kernel = {3, 3};
    o.stride = {2, 2};
    o.padding = {1, 1};
    const int64_t So = (S + 2 - 3) / 2 + 1;
    const Shape out_shape{N, C, So, So};
    const double out_elems = static_cast<double>(N) * C * So * So;
    const auto out = b.empties(sets, out_shape, f32);
    const auto idx = b.empties(sets, out_shape, DType::i64);
    b.run(
        "max_pool2d 3x3 s2 p1", in_shape, f32, input_bytes + out_elems * (4 + 8), sets,
        [&](int s) { max_pool_into(out[s], idx[s], input[s], o, b.stream); },
        [&] {
          return b.ends(N, [&](int64_t r0, int64_t r1) {
            return bench::relative_l2_error(Bench::rows_host(out[0], r0, r1),
                                            max_pool(Bench::rows_host(input[0], r0, r1), o).out);
          });
        },
        1e-6);
  }
  if (b.wanted("avg_pool2d 2x2")) {
    PoolOptions o;
    o.kernel = {2, 2};
    const Shape out_shape{N, C, S / 2, S / 2};
    const auto out = b.empties(sets, out_shape, f32);
    b.run(
        "avg_pool2d 2x2", in_shape, f32, input_bytes * 1.25, sets,
        [&](int s) { avg_pool_into(out[s], input[s], o, b.stream); },
        [&] {
          return b.ends(N, [&](int64_t r0, int64_t r1) {
            return bench::relative_l2_error(Bench::rows_host(out[0], r0, r1),
                                            avg_pool(Bench::rows_host(input[0], r0, r1), o));
          });
        },
        1e-5);
  }
  if (b.wanted("max_pool2d 3x3 s2 p1 channels-last")) {
    PoolOptions o;
    o.kernel = {3, 3};
    o.stride = {2, 2};
    o.padding = {1, 1};
    const int64_t So = (S + 2 - 3) / 2 + 1;
    const double out_elems = static_cast<double>(N) * C * So * So;
    const auto in_cl = channels_last(b.normals(sets, {N, S, S, C}, f32, 23));
    const auto out = channels_last(b.empties(sets, {N, So, So, C}, f32));
    const auto idx = channels_last(b.empties(sets, {N, So, So, C}, DType::i64));
    b.run(
        "max_pool2d 3x3 s2 p1 channels-last", in_shape, f32, input_bytes + out_elems * (4 + 8),
        sets, [&](int s) { max_pool_into(out[s], idx[s], in_cl[s], o, b.stream); },
        [&] {
          return b.ends(N, [&](int64_t r0, int64_t r1) {
            return bench::relative_l2_error(Bench::rows_host(out[0], r0, r1),
                                            max_pool(Bench::rows_host(in_cl[0], r0, r1), o).out);
          });
        },
        1e-6);
  }
  if (b.wanted("avg_pool2d 2x2 channels-last")) {
    PoolOptions o;
    o.kernel = {2, 2};
    const auto in_cl = channels_last(b.normals(sets, {N, S, S, C}, f32, 25));
    const auto out = channels_last(b.empties(sets, {N, S / 2, S / 2, C}, f32));
    b.run(
        "avg_pool2d 2x2 channels-last", in_shape, f32, input_bytes * 1.25, sets,
        [&](int s) { avg_pool_into(out[s], in_cl[s], o, b.stream); },
        [&] {
          return b.ends(N, [&](int64_t r0, int64_t r1) {
            return bench::relative_l2_error(Bench::rows_host(out[0], r0, r1),
                                            avg_pool(Bench::rows_host(in_cl[0], r0, r1), o));
          });
        },
        1e-5);
  }
  if (b.wanted("adaptive_avg_pool2d 1x1")) {
    const auto out = b.empties(sets, {N, C, 1, 1}, f32);
    b.run(
        "adaptive_avg_pool2d 1x1", in_shape, f32, input_bytes + static_cast<double>(N) * C * 4,
        sets, [&](int s) { adaptive_avg_pool_into(out[s], input[s], {1, 1}, b.stream); },
        [&] {
          return b.ends(N, [&](int64_t r0, int64_t r1) {
            return bench::relative_l2_error(
                Bench::rows_host(out[0], r0, r1),
                adaptive_avg_pool(Bench::rows_host(input[0], r0, r1), {1, 1}));
          });
        },
        1e-5);
  }
}

rudnn::bench::Family pooling_family() {
  rudnn::bench::Family family;
  family.sizes = {{"pool-batch", 32, "batch of the pooling input"},
                  {"pool-channels", 64, "channels of the pooling input"},
                  {"pool-size", 128, "height = width of the pooling input"}};
  family.run = run_all;
  return family;
}

}  // namespace

RUDNN_BENCH_FAMILY(pooling, pooling_family);
