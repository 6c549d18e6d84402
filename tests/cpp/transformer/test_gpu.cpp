// The transformer family on the GPU against the CPU reference: fresh random inputs every run
// (RUDNN_TEST_SEED replays one), outputs poisoned before the op (every allocation is NaN
// bytes here), per-dtype tolerances, inputs checked bit-unchanged, odd sizes and strided or
// misaligned views (the scalar kernels), CUDA-graph capture of the _into forms, tensors of
// more than 2^31 elements, and the device rules. Without a CUDA device every test here is
// reported as skipped.
#include <algorithm>
#include <cmath>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#if RUDNN_TEST_CUDA
#include <cuda_runtime_api.h>
#endif

#include "support/poison.h"
#include "support/test_support.h"

#if RUDNN_TRANSFORMER_TUNING
#include "transformer/cuda/tuning.h"
#endif

namespace rudnn::test {
namespace {

constexpr Device kGpu = Device::cuda(0);
const DType kFloatTypes[] = {DType::f32, DType::f16, DType::bf16};

Tensor on_gpu(const Tensor& t) { return t.defined() ? t.to(kGpu) : Tensor(); }

// The options with their tensors moved to the GPU.
RopeOptions on_gpu(const RopeOptions& o) {
  RopeOptions g = o;
  g.freqs = on_gpu(o.freqs);
  g.offsets = on_gpu(o.offsets);
  g.positions = on_gpu(o.positions);
  return g;
}

// got (device) against expected (host): all_close at the dtype's tolerance.
void expect_close(const Tensor& got, const Tensor& expected, const std::string& what) {
  ASSERT_TRUE(got.defined()) << what;
  EXPECT_EQ(got.device(), kGpu) << what;
  EXPECT_TRUE(all_close(got, expected, tolerance(expected.dtype()))) << what;
}

// Random rope options for x [B, ..., T, D]: dims, layout, base or freqs, and each position
// source.
RopeOptions random_rope_options(Rng& rng, int64_t b, int64_t t, int64_t d) {
  RopeOptions o;
  o.dims = 2 * rng.integer(1, d / 2);
  if (rng.integer(0, 2) == 0) o.dims = d - d % 2;  // the common case: every feature rotated
  o.traditional = rng.integer(0, 1) == 1;
  if (rng.integer(0, 1)) {
    o.base = rng.integer(0, 1) ? 10000.0f : 500000.0f;
  } else {
    std::vector<double> f(static_cast<size_t>(o.dims / 2));
    for (size_t j = 0; j < f.size(); ++j)
      f[j] = std::pow(10000.0, 2.0 * j / o.dims) * rng.uniform(0.5f, 2.0f);
    o.freqs = host_tensor(f, {o.dims / 2}, DType::f32);
  }
  o.scale = rng.integer(0, 1) ? 1.0f : rng.uniform(0.1f, 2.0f);
  const DType it = rng.integer(0, 1) ? DType::i32 : DType::i64;
  switch (rng.integer(0, 3)) {
    case 0:
      o.offset = rng.integer(0, 1) ? 0 : rng.integer(0, 200000);
      break;
    case 1:
      o.offsets = random_integers(rng, {b}, it, 0, 100000);
      break;
    case 2:
      o.positions = random_integers(rng, {t}, it, 0, 100000);
      break;
    default:
      o.positions = random_integers(rng, {b, t}, it, 0, 100000);
      break;
  }
  return o;
}

std::string describe(const std::string& op, DType dt, const Shape& shape, const RopeOptions& o) {
  return op + " " + dtype_name(dt) + " " + shape_str(shape) + " dims " + std::to_string(o.dims) +
         (o.traditional ? " interleaved" : " halves") + (o.base ? " base" : " freqs") +
         (o.offsets.defined()     ? " offsets"
          : o.positions.defined() ? " positions" + shape_str(o.positions.shape())
                                  : " offset " + std::to_string(o.offset));
}

// rope and rope_backward of host x on the GPU against the reference; x's bytes unchanged.
void expect_rope_matches(const Tensor& host_x, const Tensor& device_x, const RopeOptions& o,
                         const std::string& label) {
  SCOPED_TRACE(label);
  const RopeOptions g = on_gpu(o);
  const auto before = bytes_of(device_x);
  expect_close(rope(device_x, g), rope(host_x, o), "rope");
  expect_close(rope_backward(device_x, g), rope_backward(host_x, o), "rope_backward");
  EXPECT_EQ(bytes_of(device_x), before) << "x was modified";
}

TEST(TransformerGpu, RopeMatchesTheReference) {
  RUDNN_REQUIRE_CUDA();
  RUDNN_SEEDED_RNG(rng);
  const int64_t head_sizes[] = {2, 6, 8, 16, 24, 64, 80, 96, 128, 130, 192, 256, 512};
  for (DType dt : kFloatTypes) {
    for (int64_t d : head_sizes) {
      // [B, H, T, D] with odd counts, and sometimes 3-d or 5-d.
      const int64_t b = rng.integer(1, 3), h = rng.integer(1, 5), t = rng.integer(1, 37);
      Shape shape{b, h, t, d};
      switch (rng.integer(0, 3)) {
        case 0:
          shape = {b, t, d};
          break;
        case 1:
          shape = {b, h, 2, t, d};
          break;
        default:
          break;
      }
      const Tensor x = random_tensor(rng, shape, dt);
      const RopeOptions o = random_rope_options(rng, b, t, d);
      expect_rope_matches(x, on_gpu(x), o, describe("rope", dt, shape, o));
    }
  }
}

TEST(TransformerGpu, RopeOfEveryPositionSourceAndLayout) {
  RUDNN_REQUIRE_CUDA();
  RUDNN_SEEDED_RNG(rng);
  for (DType dt : kFloatTypes) {
    for (bool traditional : {false, true}) {
      const int64_t b = 3, h = 4, t = 33, d = 128;
      RopeOptions o;
      o.dims = 96;  // a tail of 32 copied features
      o.traditional = traditional;
      o.base = 10000.0f;
      o.offset = 7;
      RopeOptions per_batch = o, ids = o, shared = o;
      per_batch.offset = 0;
      per_batch.offsets = random_integers(rng, {b}, DType::i32, 0, 4000);
      ids.offset = 0;
      ids.positions = random_integers(rng, {b, t}, DType::i64, 0, 1 << 20);
      shared.offset = 0;
      shared.positions = random_integers(rng, {t}, DType::i32, 0, 50);
      // Rows of 2D + 8 elements: [B, T, H, D] read as [B, H, T, D] (in place, aligned), a
      // slice that starts one element in (misaligned: the scalar kernel), and a strided
      // last axis (copied first).
      const Tensor dev = on_gpu(random_tensor(rng, {b, t, h, 2 * d + 8}, dt));
      const Tensor views[] = {dev.slice(3, 0, d).transpose(1, 2),
                              dev.slice(3, 1, d + 1).transpose(1, 2),
                              dev.slice(3, 0, 2 * d, 2).transpose(1, 2)};
      for (const Tensor& v : views) {
        for (const RopeOptions* opt : {&o, &per_batch, &ids, &shared}) {
          expect_rope_matches(
              v.to_host(), v, *opt,
              describe("rope view strides " + shape_str(v.strides()), dt, v.shape(), *opt));
        }
      }
    }
  }
}

TEST(TransformerGpu, RopeIntoStridedOutputs) {
  RUDNN_REQUIRE_CUDA();
  RUDNN_SEEDED_RNG(rng);
  // The packed layout: tokens [total, H, D], positions [total], the result written into a
  // [total, H, D] buffer through its transposed view; the columns past D untouched.
  const Tensor tokens = on_gpu(random_tensor(rng, {50, 8, 64}, DType::bf16));
  RopeOptions o;
  o.dims = 64;
  o.base = 10000.0f;
  o.positions = random_integers(rng, {50}, DType::i32, 0, 3000);
  const Tensor buffer = poisoned({50, 8, 72}, DType::bf16, kGpu);
  rope_into(buffer.slice(2, 0, 64).transpose(0, 1), tokens.transpose(0, 1), on_gpu(o));
  EXPECT_TRUE(
      all_close(buffer.slice(2, 0, 64).transpose(0, 1), rope(tokens.to_host().transpose(0, 1), o)));
  for (double v : to_doubles(buffer.slice(2, 64, 72))) ASSERT_TRUE(std::isnan(v));
  // Zero sizes launch nothing.
  EXPECT_EQ(
      rope(Tensor::empty({0, 4, 64}, DType::bf16, kGpu), RopeOptions{}.set_dims(64).set_base(1e4f))
          .numel(),
      0);
}

TEST(TransformerGpu, NormRopeIsBitForBitTheComposition) {
  RUDNN_REQUIRE_CUDA();
  RUDNN_SEEDED_RNG(rng);
  for (DType dt : kFloatTypes) {
    for (int64_t d : {64, 128, 256}) {
      // q as the transposed projection [B, L, H, D] -> [B, H, L, D]; a key cache of 300.
      const Tensor x = on_gpu(random_tensor(rng, {2, 17, 4, d}, dt)).transpose(1, 2);
      const Tensor w = on_gpu(random_tensor(rng, {d}, rng.integer(0, 1) ? DType::f32 : dt));
      RopeOptions o;
      o.dims = d;
      o.base = 1000000.0f;
      o.offset = rng.integer(0, 283);
      const Tensor composed = rope(rms_norm(x, w, 1e-6f), o);
      EXPECT_TRUE(bit_equal(norm_rope(x, RopeNorm{w, 1e-6f}, o), composed))
          << dtype_name(dt) << " D=" << d;
      const Tensor cache = on_gpu(random_tensor(rng, {2, 4, 300, d}, dt));
      const Tensor kept = cache.to_host();
      EXPECT_EQ(norm_rope(x, RopeNorm{w, 1e-6f}, o, cache).data(), cache.data());
      EXPECT_TRUE(bit_equal(cache.slice(2, o.offset, o.offset + 17), composed));
      EXPECT_TRUE(bit_equal(cache.slice(2, 0, o.offset), kept.slice(2, 0, o.offset)));
      EXPECT_TRUE(bit_equal(cache.slice(2, o.offset + 17, 300), kept.slice(2, o.offset + 17, 300)));
      // Against the reference too.
      EXPECT_TRUE(all_close(composed, rope(rms_norm(x.to_host(), w.to_host(), 1e-6f), o)));
      // One head of one sequence: the cache slice takes the norm and is rotated in place.
      const Tensor x1 = x.slice(0, 1, 2).slice(1, 2, 3);
      const Tensor cache1 = on_gpu(random_tensor(rng, {1, 1, 300, d}, dt));
      (void)norm_rope(x1, RopeNorm{w, 1e-6f}, o, cache1);
      EXPECT_TRUE(
          bit_equal(cache1.slice(2, o.offset, o.offset + 17), rope(rms_norm(x1, w, 1e-6f), o)));
      // An _into output in place, and one through the temporary (a slice of a wider axis).
      const Tensor out = poisoned({2, 4, 17, d}, dt, kGpu),
                   wide = poisoned({2, 4, 17, d + 8}, dt, kGpu);
      norm_rope_into(out, x, RopeNorm{w, 1e-6f}, o);
      norm_rope_into(wide.slice(3, 0, d), x, RopeNorm{w, 1e-6f}, o);
      EXPECT_TRUE(bit_equal(out, composed));
      EXPECT_TRUE(bit_equal(wide.slice(3, 0, d), composed));
    }
  }
}

// Every case of the fused norm_rope kernel and of the composition it falls back to, side by
// side with rms_norm -> rope composed on the device: head sizes within the fused limits (8 ..
// 1024 F16/BF16, .. 512 F32) and past them, both pair layouts, partial rotation with halves
// pairs that are or are not whole vectors apart, base or freqs, each weight form, x read in
// place through 3-, 4- and 5-d views, a misaligned view (the composition's scalar path), a
// decode shape whose heads are split over the grid, and a cache of several heads.
TEST(TransformerGpu, NormRopeMatchesTheCompositionInEveryLayout) {
  RUDNN_REQUIRE_CUDA();
  RUDNN_SEEDED_RNG(rng);
  const float eps = 1e-6f;
  for (DType dt : kFloatTypes) {
    for (int64_t d : {8, 24, 64, 96, 128, 200, 256, 512, 1024, 1032, 2048}) {
      for (bool trad : {false, true}) {
        RopeOptions o;
        o.traditional = trad;
        o.dims = rng.integer(0, 1) ? d : 2 * rng.integer(1, d / 2);
        if (rng.integer(0, 1)) {
          o.base = 10000.0f;
        } else {
          std::vector<double> f(static_cast<size_t>(o.dims / 2));
          for (size_t j = 0; j < f.size(); ++j)
            f[j] = std::pow(10000.0, 2.0 * static_cast<double>(j) / static_cast<double>(o.dims)) *
                   rng.uniform(0.5f, 2.0f);
          o.freqs = on_gpu(host_tensor(f, {o.dims / 2}, DType::f32));
        }
        o.offset = rng.integer(0, 1000);
        const int weight_form = static_cast<int>(rng.integer(0, 2));  // none, F32, dt
        const Tensor w = weight_form == 0
                             ? Tensor()
                             : on_gpu(random_tensor(rng, {d}, weight_form == 1 ? DType::f32 : dt));
        const std::optional<RopeNorm> norm = RopeNorm{w, eps};
        const int64_t b = 2, l = rng.integer(1, 9), h = 3;
        SCOPED_TRACE(std::string(dtype_name(dt)) + " D=" + std::to_string(d) +
                     " dims=" + std::to_string(o.dims) + (trad ? " interleaved" : " halves") +
                     (o.freqs.defined() ? " freqs" : " base") +
                     " offset=" + std::to_string(o.offset) + " weight " +
                     (w.defined() ? dtype_name(w.dtype()) : "none") + " L=" + std::to_string(l));
        const std::pair<const char*, Tensor> inputs[] = {
            {"contiguous [B, H, L, D]", on_gpu(random_tensor(rng, {b, h, l, d}, dt, 0.0f, 3.0f))},
            {"transposed [B, L, H, D]",
             on_gpu(random_tensor(rng, {b, l, h, d}, dt)).transpose(1, 2)},
            {"3-d [B, L, D]", on_gpu(random_tensor(rng, {b, l, d}, dt))},
            {"5-d [B, 2, H, L, D]", on_gpu(random_tensor(rng, {b, 2, h, l, d}, dt))},
            {"decode [1, 40, 1, D]", on_gpu(random_tensor(rng, {1, 40, 1, d}, dt))},
            {"misaligned [B, H, L, D + 1][..., 1:]",
             on_gpu(random_tensor(rng, {b, h, l, d + 1}, dt)).slice(3, 1, d + 1)},
        };
        for (const auto& [what, x] : inputs) {
          SCOPED_TRACE(what);
          const std::vector<unsigned char> x_before = bytes_of(x);
          const Tensor composed = rope(rms_norm(x, w, eps), o);
          EXPECT_TRUE(bit_equal(norm_rope(x, norm, o), composed)) << "functional";
          const Tensor out = poisoned(x.shape(), dt, kGpu);
          norm_rope_into(out, x, norm, o);
          EXPECT_TRUE(bit_equal(out, composed)) << "_into";
          if (x.dim() == 4) {
            const int64_t c = o.offset + x.shape()[2] + 5;
            const Tensor cache = on_gpu(random_tensor(rng, {x.shape()[0], x.shape()[1], c, d}, dt));
            const Tensor kept = cache.to_host();
            (void)norm_rope(x, norm, o, cache);
            const int64_t end = o.offset + x.shape()[2];
            EXPECT_TRUE(bit_equal(cache.slice(2, o.offset, end), composed)) << "cache";
            EXPECT_TRUE(bit_equal(cache.slice(2, 0, o.offset), kept.slice(2, 0, o.offset)));
            EXPECT_TRUE(bit_equal(cache.slice(2, end, c), kept.slice(2, end, c)));
          }
          EXPECT_EQ(bytes_of(x), x_before) << "x was modified";
        }
        // The composition itself against the reference (contiguous x).
        RopeOptions host_o = o;
        host_o.freqs = o.freqs.defined() ? o.freqs.to_host() : Tensor();
        const Tensor x = inputs[0].second;
        EXPECT_TRUE(all_close(
            norm_rope(x, norm, o),
            rope(rms_norm(x.to_host(), w.defined() ? w.to_host() : Tensor(), eps), host_o)));
      }
    }
  }
}

// The fused kernel on prefill-sized inputs: more (b, t) rows than the persistent grid has
// warps (so every warp strides), heads split into several warp tasks per (b, t) (16) or
// filling part of one (3), every group shape of the kernel (D = 64, 128, 256: 8, 16 and 32
// lanes a row for 16-bit types, 16, 32 and 2 vectors a lane over 32 for F32), both pair
// layouts, full and half rotation, and the cache write; bit for bit the composition.
TEST(TransformerGpu, NormRopeOnLongSequencesIsTheComposition) {
  RUDNN_REQUIRE_CUDA();
  RUDNN_SEEDED_RNG(rng);
  const float eps = 1e-6f;
  for (DType dt : kFloatTypes) {
    for (int64_t d : {64, 128, 256}) {
      for (bool trad : {false, true}) {
        for (int64_t h : {16, 3}) {
          RopeOptions o;
          o.traditional = trad;
          o.dims = rng.integer(0, 1) ? d : d / 2;
          o.base = 1000000.0f;
          o.offset = rng.integer(0, 300);
          const int64_t b = 2, l = 2048 + rng.integer(0, 40);
          const Tensor w = on_gpu(random_tensor(rng, {d}, rng.integer(0, 1) ? DType::f32 : dt));
          SCOPED_TRACE(std::string(dtype_name(dt)) + " D=" + std::to_string(d) +
                       " dims=" + std::to_string(o.dims) + (trad ? " interleaved" : " halves") +
                       " H=" + std::to_string(h) + " L=" + std::to_string(l) +
                       " offset=" + std::to_string(o.offset) + " weight " + dtype_name(w.dtype()));
          // q as the transposed projection [B, L, H, D], read in place.
          const Tensor x = on_gpu(random_tensor(rng, {b, l, h, d}, dt)).transpose(1, 2);
          const Tensor composed = rope(rms_norm(x, w, eps), o);
          EXPECT_TRUE(bit_equal(norm_rope(x, RopeNorm{w, eps}, o), composed)) << "new tensor";
          const int64_t c = o.offset + l + 3;
          const Tensor cache = Tensor::zeros({b, h, c, d}, dt, kGpu);
          EXPECT_EQ(norm_rope(x, RopeNorm{w, eps}, o, cache).data(), cache.data());
          EXPECT_TRUE(bit_equal(cache.slice(2, o.offset, o.offset + l), composed)) << "cache";
          const Tensor zeros = Tensor::zeros({b, h, c, d}, dt);
          EXPECT_TRUE(bit_equal(cache.slice(2, 0, o.offset), zeros.slice(2, 0, o.offset)));
          EXPECT_TRUE(bit_equal(cache.slice(2, o.offset + l, c), zeros.slice(2, o.offset + l, c)));
        }
      }
    }
  }
}

// The fused kernel walks the head-chunks of a (b, t) in one warp when rows are plenty and
// splits them over several warps when they are few: 40 heads are 5 chunks of 8 (D = 128
// at 16 bits) or 10 of 4 (D = 256), and the row counts below take each chunk of a (b, t) in
// its own warp (1, 7), two to five in a warp, some units shorter (300 .. 1500 rows on an
// H200's resident grid), and all in one (2500). Bit for bit the composition, cache too.
TEST(TransformerGpu, NormRopeSplitsTheHeadsOfARowOverWarps) {
  RUDNN_REQUIRE_CUDA();
  RUDNN_SEEDED_RNG(rng);
  const float eps = 1e-6f;
  for (DType dt : {DType::bf16, DType::f32}) {
    for (int64_t d : {128, 256}) {
      for (int64_t l : {1, 7, 300, 700, 1500, 2500}) {
        const bool trad = rng.integer(0, 1) == 1;
        RopeOptions o;
        o.traditional = trad;
        o.dims = d;
        o.base = 1000000.0f;
        o.offset = rng.integer(0, 50);
        const int64_t h = 40;
        const Tensor w = on_gpu(random_tensor(rng, {d}, dt));
        SCOPED_TRACE(std::string(dtype_name(dt)) + " D=" + std::to_string(d) + " H=40 L=" +
                     std::to_string(l) + (trad ? " interleaved" : " halves") +
                     " offset=" + std::to_string(o.offset));
        const Tensor x = on_gpu(random_tensor(rng, {1, l, h, d}, dt)).transpose(1, 2);
        const Tensor composed = rope(rms_norm(x, w, eps), o);
        EXPECT_TRUE(bit_equal(norm_rope(x, RopeNorm{w, eps}, o), composed)) << "new tensor";
        const int64_t c = o.offset + l + 2;
        const Tensor cache = Tensor::zeros({1, h, c, d}, dt, kGpu);
        EXPECT_EQ(norm_rope(x, RopeNorm{w, eps}, o, cache).data(), cache.data());
        EXPECT_TRUE(bit_equal(cache.slice(2, o.offset, o.offset + l), composed)) << "cache";
        const Tensor zeros = Tensor::zeros({1, h, c, d}, dt);
        EXPECT_TRUE(bit_equal(cache.slice(2, 0, o.offset), zeros.slice(2, 0, o.offset)));
        EXPECT_TRUE(bit_equal(cache.slice(2, o.offset + l, c), zeros.slice(2, o.offset + l, c)));
      }
    }
  }
}

// The kernel that keeps both halves of a row in each lane (rows of 8, 16 and 32 vectors: D =
// 64, 128, 256 at 16 bits, 32, 64, 128 for F32; halves pairs with every feature rotated,
// interleaved pairs with any dims): more (b, t) rows than its resident grid holds (every
// block strides), a head count that is not a multiple of the heads loaded at once (5), one
// head, a decode shape whose heads are split over the grid, each weight form, large
// positions, into a new tensor and into a cache; bit for bit the composition. The defaults
// and each alternative of norm_rope_choices() (transformer/cuda/tuning.h: what the benchmark
// times) run on the same inputs: rows in flight in a cp.async ring or in registers (with or
// without the L2 prefetch), a persistent grid or a block per block of rows, streamed
// (evict-first) or plain accesses, and the lane-group kernel that the other row shapes take.
TEST(TransformerGpu, NormRopeWithBothHalvesInALaneIsTheComposition) {
  RUDNN_REQUIRE_CUDA();
  RUDNN_SEEDED_RNG(rng);
  const float eps = 1e-6f;
#if RUDNN_TRANSFORMER_TUNING
  using transformer::cuda::kernel_tuning;
  // The defaults, then every alternative the benchmark times.
  std::vector<transformer::cuda::NormRopeChoice> choices = {
      {"default (pairs, cp.async ring, persistent, streamed)",
       [](transformer::cuda::KernelTuning&) {}}};
  const transformer::cuda::NormRopeChoices others = transformer::cuda::norm_rope_choices();
  choices.insert(choices.end(), others.begin, others.end);
  struct Restore {
    transformer::cuda::KernelTuning saved = kernel_tuning();
    ~Restore() { kernel_tuning() = saved; }
  } restore;
  auto choose = [&](const transformer::cuda::NormRopeChoice& choice) {
    kernel_tuning() = restore.saved;
    choice.set(kernel_tuning());
    return std::string(choice.label);
  };
#else
  const char* const choices[] = {"default"};
  auto choose = [](const char* label) { return std::string(label); };
#endif
  for (DType dt : kFloatTypes) {
    const int64_t w = dt == DType::f32 ? 4 : 8;
    for (int64_t d : {8 * w, 16 * w, 32 * w}) {
      for (bool trad : {false, true}) {
        for (int shape_kind = 0; shape_kind < 3; ++shape_kind) {
          RopeOptions o;
          o.traditional = trad;
          o.dims = trad && rng.integer(0, 1) ? 2 * rng.integer(1, d / 2) : d;
          o.base = 1000000.0f;
          o.offset = rng.integer(0, 1) ? rng.integer(0, 300) : rng.integer(100000, 200000);
          const int weight_form = static_cast<int>(rng.integer(0, 2));  // none, F32, dt
          const Tensor wt =
              weight_form == 0
                  ? Tensor()
                  : on_gpu(random_tensor(rng, {d}, weight_form == 1 ? DType::f32 : dt));
          // Long prefill (rows past the resident grid), one head, decode of 40 heads.
          const int64_t b = shape_kind == 2 ? 3 : (shape_kind == 0 ? 3 : 2);
          const int64_t h = shape_kind == 0 ? 5 : (shape_kind == 1 ? 1 : 40);
          const int64_t l = shape_kind == 0 ? 6000 + rng.integer(0, 99)
                                            : (shape_kind == 1 ? rng.integer(1, 300) : 1);
          SCOPED_TRACE(std::string(dtype_name(dt)) + " D=" + std::to_string(d) +
                       " dims=" + std::to_string(o.dims) + (trad ? " interleaved" : " halves") +
                       " B=" + std::to_string(b) + " H=" + std::to_string(h) +
                       " L=" + std::to_string(l) + " offset=" + std::to_string(o.offset) +
                       " weight " + (wt.defined() ? dtype_name(wt.dtype()) : "none"));
          const std::optional<RopeNorm> norm = RopeNorm{wt, eps};
          // x as the transposed projection [B, L, H, D], read in place.
          const Tensor x =
              on_gpu(random_tensor(rng, {b, l, h, d}, dt, 0.0f, 3.0f)).transpose(1, 2);
          const std::vector<unsigned char> x_before = bytes_of(x);
          const Tensor composed = rope(rms_norm(x, wt, eps), o);
          // Into a cache, at positions small enough for a cache of them.
          RopeOptions oc = o;
          oc.offset = o.offset % 300;
          const Tensor composed_c =
              oc.offset == o.offset ? composed : rope(rms_norm(x, wt, eps), oc);
          const int64_t c = oc.offset + l + 3, end = oc.offset + l;
          const Tensor kept = random_tensor(rng, {b, h, c, d}, dt);
          for (const auto& choice : choices) {
            SCOPED_TRACE("kernel: " + choose(choice));
            const Tensor out = poisoned({b, h, l, d}, dt, kGpu);
            norm_rope_into(out, x, norm, o);
            EXPECT_TRUE(bit_equal(out, composed)) << "new tensor";
            const Tensor cache = on_gpu(kept);
            EXPECT_EQ(norm_rope(x, norm, oc, cache).data(), cache.data());
            EXPECT_TRUE(bit_equal(cache.slice(2, oc.offset, end), composed_c)) << "cache";
            EXPECT_TRUE(bit_equal(cache.slice(2, 0, oc.offset), kept.slice(2, 0, oc.offset)));
            EXPECT_TRUE(bit_equal(cache.slice(2, end, c), kept.slice(2, end, c)));
          }
          EXPECT_EQ(bytes_of(x), x_before) << "x was modified";
          if (shape_kind != 0) {  // and the composition against the CPU reference
            EXPECT_TRUE(all_close(
                composed,
                rope(rms_norm(x.to_host(), wt.defined() ? wt.to_host() : Tensor(), eps), o)));
          }
        }
      }
    }
  }
}

// ---- Gated activations ------------------------------------------------------------------------

const int64_t kWidths[] = {1,   2,   3,   7,    8,    16,   33,   64,   100,
                           128, 255, 256, 1000, 1024, 2048, 4100, 8192, 11008};

std::string describe_glu(const char* op, DType dt, const Shape& shape, int kind) {
  static const char* const kKinds[] = {"swiglu", "geglu", "geglu tanh"};
  return std::string(op) + " " + kKinds[kind] + " " + dtype_name(dt) + " " + shape_str(shape);
}

Tensor glu_fwd(int kind, const Tensor& g, const Tensor& u) {
  if (kind == 0) return swiglu(g, u);
  return geglu(g, u, kind == 1 ? GeluApproximate::none : GeluApproximate::tanh);
}
Tensor glu_fwd_one(int kind, const Tensor& x) {
  if (kind == 0) return swiglu(x);
  return geglu(x, kind == 1 ? GeluApproximate::none : GeluApproximate::tanh);
}
GluGrads glu_bwd(int kind, const Tensor& dy, const Tensor& g, const Tensor& u) {
  if (kind == 0) return swiglu_backward(dy, g, u);
  return geglu_backward(dy, g, u, kind == 1 ? GeluApproximate::none : GeluApproximate::tanh);
}
Tensor glu_bwd_one(int kind, const Tensor& dy, const Tensor& x) {
  if (kind == 0) return swiglu_backward(dy, x);
  return geglu_backward(dy, x, kind == 1 ? GeluApproximate::none : GeluApproximate::tanh);
}

TEST(TransformerGpu, GatedActivationsMatchTheReference) {
  RUDNN_REQUIRE_CUDA();
  RUDNN_SEEDED_RNG(rng);
  for (DType dt : kFloatTypes) {
    for (int64_t i : kWidths) {
      const int64_t rows =
          rng.integer(1, std::max<int64_t>(1, std::min<int64_t>(67, (int64_t{1} << 19) / i)));
      const int kind = static_cast<int>(rng.integer(0, 2));
      const Shape half{rows, i}, full{rows, 2 * i};
      SCOPED_TRACE(describe_glu("glu", dt, full, kind));
      const Tensor hx = random_tensor(rng, full, dt, 0, 3), hdy = random_tensor(rng, half, dt);
      const Tensor x = on_gpu(hx), dy = on_gpu(hdy);
      const auto xb = bytes_of(x), dyb = bytes_of(dy);
      // One tensor.
      expect_close(glu_fwd_one(kind, x), glu_fwd_one(kind, hx), "forward, one tensor");
      expect_close(glu_bwd_one(kind, dy, x), glu_bwd_one(kind, hdy, hx), "backward, one tensor");
      // Two tensors: the halves as separate contiguous tensors.
      const Tensor hg = hx.slice(1, 0, i).contiguous(), hu = hx.slice(1, i, 2 * i).contiguous();
      const Tensor g = on_gpu(hg), u = on_gpu(hu);
      expect_close(glu_fwd(kind, g, u), glu_fwd(kind, hg, hu), "forward, two tensors");
      const GluGrads got = glu_bwd(kind, dy, g, u), want = glu_bwd(kind, hdy, hg, hu);
      expect_close(got.dgate, want.dgate, "dgate");
      expect_close(got.dup, want.dup, "dup");
      EXPECT_EQ(bytes_of(x), xb);
      EXPECT_EQ(bytes_of(dy), dyb);
    }
  }
}

TEST(TransformerGpu, GatedActivationsOfStridedAndMisalignedViews) {
  RUDNN_REQUIRE_CUDA();
  RUDNN_SEEDED_RNG(rng);
  for (DType dt : kFloatTypes) {
    const Tensor base = on_gpu(random_tensor(rng, {30, 520}, dt));
    const Tensor dyb = on_gpu(random_tensor(rng, {30, 520}, dt));
    // Stepped rows (in place), a slice one element in (scalar kernel), a transposed block
    // (copied), a strided last axis (copied).
    const Tensor views[] = {base.slice(0, 1, 30, 3).slice(1, 0, 512), base.slice(1, 1, 513),
                            base.slice(1, 0, 30).transpose(0, 1), base.slice(1, 0, 512, 2)};
    for (const Tensor& v : views) {
      SCOPED_TRACE(shape_str(v.shape()) + " strides " + shape_str(v.strides()));
      const int64_t rows = v.shape()[0], i = v.shape()[1] / 2;
      const Tensor dy = dyb.slice(0, 0, rows).slice(1, 0, i);
      const Tensor hv = v.to_host(), hdy = dy.to_host();
      for (int kind = 0; kind < 3; ++kind) {
        expect_close(glu_fwd_one(kind, v), glu_fwd_one(kind, hv), "forward");
        expect_close(glu_bwd_one(kind, dy, v), glu_bwd_one(kind, hdy, hv), "backward");
        const GluGrads got = glu_bwd(kind, dy, v.slice(1, 0, i), v.slice(1, i, 2 * i));
        const GluGrads want = glu_bwd(kind, hdy, hv.slice(1, 0, i), hv.slice(1, i, 2 * i));
        expect_close(got.dgate, want.dgate, "dgate");
        expect_close(got.dup, want.dup, "dup");
      }
    }
    // Into stepped output rows: the rows between stay untouched.
    const Tensor x = on_gpu(random_tensor(rng, {4, 64}, dt));
    const Tensor out = poisoned({8, 32}, dt, kGpu);
    swiglu_into(out.slice(0, 0, 8, 2), x);
    EXPECT_TRUE(all_close(out.slice(0, 0, 8, 2), swiglu(x.to_host())));
    for (double v : to_doubles(out.slice(0, 1, 8, 2))) ASSERT_TRUE(std::isnan(v));
  }
}

TEST(TransformerGpu, DeviceRules) {
  RUDNN_REQUIRE_CUDA();
  const Tensor x = Tensor::full({2, 4, 8}, 1.0, DType::f32, kGpu);
  RopeOptions o;
  o.dims = 8;
  o.base = 10000.0f;
  RopeOptions host_offsets = o;
  host_offsets.offsets = Tensor::zeros({2}, DType::i64);
  EXPECT_TRUE(throws_error([&] { rope(x, host_offsets); }, ErrorCode::DeviceMismatch,
                           {"rope", "offsets is on cpu", "cuda:0"}));
  RopeOptions host_freqs;
  host_freqs.dims = 8;
  host_freqs.freqs = Tensor::full({4}, 1.0, DType::f32);
  EXPECT_TRUE(throws_error([&] { rope_backward(x, host_freqs); }, ErrorCode::DeviceMismatch,
                           {"rope_backward", "freqs is on cpu"}));
  RopeOptions host_positions = o;
  host_positions.positions = Tensor::zeros({4}, DType::i32);
  EXPECT_TRUE(throws_error([&] { rope(x, host_positions); }, ErrorCode::DeviceMismatch,
                           {"rope", "positions is on cpu"}));
  EXPECT_TRUE(throws_error(
      [&] {
        rope_into(Tensor::empty({2, 4, 8}, DType::f32), x, o);
      },
      ErrorCode::DeviceMismatch, {"rope", "out is on cpu"}));
  EXPECT_TRUE(throws_error(
      [&] {
        rope(Tensor::full({2, 4, 8}, 1.0, DType::f64, kGpu), o);
      },
      ErrorCode::DTypeMismatch, {"rope", "f64 runs on the CPU only"}));
  EXPECT_TRUE(throws_error([&] { swiglu(x, x.to_host()); }, ErrorCode::DeviceMismatch,
                           {"swiglu", "up is on cpu"}));
  EXPECT_TRUE(throws_error([&] { geglu_backward(x.to_host().slice(2, 0, 4), x); },
                           ErrorCode::DeviceMismatch, {"geglu_backward", "dy is on cpu"}));
  EXPECT_TRUE(throws_error(
      [&] {
        swiglu_backward_into(Tensor::empty({2, 4, 8}, DType::f32), x, x, x, x);
      },
      ErrorCode::DeviceMismatch, {"swiglu_backward", "dgate_out is on cpu"}));
}

TEST(TransformerGpu, RunsOnTheGivenStream) {
  RUDNN_REQUIRE_CUDA();
  RUDNN_SEEDED_RNG(rng);
  const Stream stream = Stream::create(kGpu);
  const Tensor hx = random_tensor(rng, {2, 8, 64, 128}, DType::bf16);
  const Tensor x = hx.to(kGpu, stream);
  RopeOptions o;
  o.dims = 128;
  o.base = 10000.0f;
  const Tensor y = rope(x, o, stream);
  EXPECT_EQ(y.allocation_stream(), stream);
  EXPECT_TRUE(all_close(y.to_host(stream), rope(hx, o)));
  const Tensor s = swiglu(x, stream);
  EXPECT_EQ(s.allocation_stream(), stream);
  EXPECT_TRUE(all_close(s.to_host(stream), swiglu(hx)));
}

#if RUDNN_TEST_CUDA

void check_cuda(cudaError_t e, const char* what) {
  ASSERT_EQ(e, cudaSuccess) << what << ": " << cudaGetErrorString(e);
}

// Captures `run` (work on `stream` only) into a CUDA graph, replays it, refreshes the inputs
// in place and replays again; `check` compares with the reference each time. A hidden
// allocation or host synchronisation inside `run` breaks the capture and fails the test.
void expect_graph_replay(const std::function<void(const Stream&)>& run,
                         const std::function<void()>& refresh_inputs,
                         const std::function<void()>& check) {
  const Stream stream = Stream::create(kGpu);
  const auto native = reinterpret_cast<cudaStream_t>(stream.handle());
  run(stream);  // warm-up outside the capture
  stream.synchronize();
  cudaGraph_t graph = nullptr;
  check_cuda(cudaStreamBeginCapture(native, cudaStreamCaptureModeThreadLocal),
             "cudaStreamBeginCapture");
  run(stream);
  check_cuda(cudaStreamEndCapture(native, &graph), "cudaStreamEndCapture");
  cudaGraphExec_t exec = nullptr;
  check_cuda(cudaGraphInstantiate(&exec, graph, 0), "cudaGraphInstantiate");
  for (int replay = 0; replay < 2; ++replay) {
    if (replay) refresh_inputs();
    check_cuda(cudaGraphLaunch(exec, native), "cudaGraphLaunch");
    check_cuda(cudaStreamSynchronize(native), "cudaStreamSynchronize");
    check();
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
}

TEST(TransformerGpu, EveryIntoFormCapturesIntoACudaGraph) {
  RUDNN_REQUIRE_CUDA();
  RUDNN_SEEDED_RNG(rng);
  const DType dt = DType::bf16;
  const Shape qs{2, 8, 40, 128}, gs{37, 2 * 1000};
  Tensor hq = random_tensor(rng, qs, dt), hx = random_tensor(rng, gs, dt),
         hdy = random_tensor(rng, {37, 1000}, dt);
  Tensor hoffsets = random_integers(rng, {2}, DType::i64, 0, 5000);
  const Tensor q = on_gpu(hq), x = on_gpu(hx), dy = on_gpu(hdy), offsets = on_gpu(hoffsets);
  current_stream(kGpu).synchronize();  // uploaded on the default stream, used on another
  RopeOptions host_o;
  host_o.dims = 128;
  host_o.base = 500000.0f;
  host_o.offsets = hoffsets;
  RopeOptions o = host_o;
  o.offsets = offsets;
  const Tensor qw = on_gpu(random_tensor(rng, {128}, DType::f32));
  const Tensor nq = poisoned(qs, dt, kGpu);
  const Tensor rq = poisoned(qs, dt, kGpu), rdq = poisoned(qs, dt, kGpu),
               sy = poisoned({37, 1000}, dt, kGpu), gy = poisoned({37, 1000}, dt, kGpu),
               sdx = poisoned(gs, dt, kGpu), gdg = poisoned({37, 1000}, dt, kGpu),
               gdu = poisoned({37, 1000}, dt, kGpu);
  auto run = [&](const Stream& s) {
    rope_into(rq, q, o, s);
    rope_backward_into(rdq, q, o, s);
    RopeOptions at = o;  // norm_rope takes a scalar offset
    at.offsets = Tensor();
    at.offset = 11;
    norm_rope_into(nq, q, RopeNorm{qw, 1e-6f}, at, s);  // contiguous out: no temporary
    swiglu_into(sy, x, s);
    geglu_into(gy, x.slice(1, 0, 1000), x.slice(1, 1000, 2000), GeluApproximate::tanh, s);
    swiglu_backward_into(sdx, dy, x, s);
    geglu_backward_into(gdg, gdu, dy, x.slice(1, 0, 1000), x.slice(1, 1000, 2000),
                        GeluApproximate::none, s);
  };
  auto refresh = [&] {
    hq = random_tensor(rng, qs, dt);
    hx = random_tensor(rng, gs, dt);
    hdy = random_tensor(rng, {37, 1000}, dt);
    hoffsets = random_integers(rng, {2}, DType::i64, 0, 5000);
    q.copy_from(hq);
    x.copy_from(hx);
    dy.copy_from(hdy);
    offsets.copy_from(hoffsets);
    host_o.offsets = hoffsets;
    current_stream(kGpu).synchronize();
  };
  auto check = [&] {
    EXPECT_TRUE(all_close(rq, rope(hq, host_o)));
    EXPECT_TRUE(all_close(rdq, rope_backward(hq, host_o)));
    RopeOptions at = host_o;
    at.offsets = Tensor();
    at.offset = 11;
    EXPECT_TRUE(all_close(nq, rope(rms_norm(hq, qw.to_host(), 1e-6f), at)));
    EXPECT_TRUE(all_close(sy, swiglu(hx)));
    EXPECT_TRUE(
        all_close(gy, geglu(hx.slice(1, 0, 1000), hx.slice(1, 1000, 2000), GeluApproximate::tanh)));
    EXPECT_TRUE(all_close(sdx, swiglu_backward(hdy, hx)));
    const GluGrads g = geglu_backward(hdy, hx.slice(1, 0, 1000), hx.slice(1, 1000, 2000));
    EXPECT_TRUE(all_close(gdg, g.dgate));
    EXPECT_TRUE(all_close(gdu, g.dup));
  };
  expect_graph_replay(run, refresh, check);
}

#endif  // RUDNN_TEST_CUDA

// Tensors of more than 2^31 elements: addresses past element 2^31 need 64-bit offsets. The
// inputs repeat a random block of rows (built on the device by doubling copies), so the
// reference needs only that block.
Tensor tile_rows(const Tensor& block, int64_t rows) {
  Shape shape = block.shape();
  const int64_t period = shape[0];
  shape[0] = rows;
  Tensor big = Tensor::empty(shape, block.dtype(), kGpu);
  big.slice(0, 0, std::min(period, rows))
      .copy_from(block.to(kGpu).slice(0, 0, std::min(period, rows)));
  for (int64_t have = period; have < rows; have *= 2) {
    const int64_t n = std::min(have, rows - have);
    big.slice(0, have, have + n).copy_from(big.slice(0, 0, n));
  }
  return big;
}

TEST(TransformerGpu, TensorsBeyondTwoToThe31Elements) {
  RUDNN_REQUIRE_CUDA();
  RUDNN_SEEDED_RNG(rng);
  constexpr int64_t kPeriod = 64;
  {  // rope: x [1, T, 128] bf16 with T = 2^24 + 1, positions [T] repeating with the rows.
    const int64_t d = 128, t = (int64_t{1} << 31) / d + 1;
    const Tensor block = random_tensor(rng, {kPeriod, d}, DType::bf16);
    const Tensor pos_block = random_integers(rng, {kPeriod}, DType::i32, 0, 8000);
    const Tensor x = tile_rows(block, t).view({1, t, d});
    const Tensor positions = tile_rows(pos_block, t);
    ASSERT_GT(x.numel(), int64_t{1} << 31);
    for (bool traditional : {false, true}) {
      RopeOptions o;
      o.dims = d;
      o.base = 10000.0f;
      o.traditional = traditional;
      o.positions = positions;
      const Tensor y = rope(x, o);
      RopeOptions ref = o;
      ref.positions = pos_block;
      const Tensor want = rope(block.view({1, kPeriod, d}), ref);
      for (int64_t row : {int64_t{0}, int64_t{1} << 24, t - 1, t - 2}) {
        SCOPED_TRACE("row " + std::to_string(row));
        EXPECT_TRUE(
            all_close(y.slice(1, row, row + 1), want.slice(1, row % kPeriod, row % kPeriod + 1)));
      }
    }
  }
  {  // swiglu: x [131073, 16384] bf16, its output [131073, 8192].
    const int64_t i = 8192, rows = (int64_t{1} << 31) / (2 * i) + 1;
    const Tensor block = random_tensor(rng, {kPeriod, 2 * i}, DType::bf16);
    const Tensor dy_block = random_tensor(rng, {kPeriod, i}, DType::bf16);
    const Tensor x = tile_rows(block, rows), dy = tile_rows(dy_block, rows);
    ASSERT_GT(x.numel(), int64_t{1} << 31);
    const Tensor y = swiglu(x);
    const Tensor want = swiglu(block), want_dx = swiglu_backward(dy_block, block);
    const Tensor dx = swiglu_backward(dy, x);
    for (int64_t row : {int64_t{0}, rows / 2, rows - 1}) {
      SCOPED_TRACE("row " + std::to_string(row));
      EXPECT_TRUE(
          all_close(y.slice(0, row, row + 1), want.slice(0, row % kPeriod, row % kPeriod + 1)));
      EXPECT_TRUE(
          all_close(dx.slice(0, row, row + 1), want_dx.slice(0, row % kPeriod, row % kPeriod + 1)));
    }
  }
}

}  // namespace
}  // namespace rudnn::test
