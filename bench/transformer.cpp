// The transformer family's benchmark cases, one row per case: median ms, GB/s (bytes read +
// written once, as ANCHORS.md counts them) and that as a share of the device-to-device copy
// bandwidth measured in the same run (the harness, bench/harness.h).
//
// - rope of Llama-sized q [8, 32, 4096, 128] and k [8, 8, 4096, 128], bf16, in one run (the
//   anchor of ANCHORS.md, Liger's rope of q and k: 2 · (|q| + |k|) bytes): positions from an
//   offset, position ids [B, T], interleaved pairs, and rope_backward.
// - norm_rope: q's per-head RMSNorm and rotation into a new tensor (halves pairs, and
//   interleaved pairs), and k's into a KV cache [8, 8, 8192, 128] at positions 4096 .. 8191
//   (Qwen 3's q_norm / k_norm), counted as x read and its rotation written once: what the
//   fused kernel moves (rudnn/transformer.h).
// - SwiGLU forward (two tensors, and the halves of one [R, 2I] projection) and backward, and
//   GeGLU forward, at the silu(a)·b anchor [16384, 8192] bf16 (3 tensors moved forward, 5
//   backward).
//
// Before timing, each result is compared with ruDNN's CPU reference: rope and norm_rope on the
// first and last batch entry's first and last positions (all heads), the gated activations on
// their first and last rows (relative L2 error; over tolerance the row is FAILED).
//
// --variants times the norm_rope rows again under each alternative launch choice of
// transformer/cuda/tuning.h (rows named "op [variant]"), in the same process.
//
// Shape options: --rope-batch B --rope-heads H --rope-kv-heads HK --rope-seq T --rope-dim D
// (default 8 32 8 4096 128; the cache holds 2T positions), --glu-rows R --glu-cols I (default
// 16384 8192).
#include <cuda_runtime.h>
#include <rudnn/rudnn.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <initializer_list>
#include <optional>
#include <string>
#include <vector>

#include "harness.h"
#include "transformer/cuda/tuning.h"

namespace {

using namespace rudnn;
using rudnn::bench::Bench;
using rudnn::bench::worst;

double tol_for(DType dtype) { return dtype == DType::f32 ? 1e-4 : 1e-2; }

bool any_wanted(const Bench& b, std::initializer_list<const char*> ops) {
  return std::any_of(ops.begin(), ops.end(), [&](const char* op) { return b.wanted(op); });
}

constexpr int64_t kCheckPositions = 16;  // positions checked at each end of the sequence

// Batch entries 0 and B - 1, positions [0, n) and [T - n, T) of every head: `got` (device,
// [B, H, T, D]) against `reference(x_part, first position)` of the same part of `x`.
double check_rope_ends(const Tensor& got, const Tensor& x,
                       const std::function<Tensor(const Tensor&, int64_t, int64_t)>& reference) {
  const int64_t batch = x.shape()[0], seq = x.shape()[2];
  const int64_t n = std::min(kCheckPositions, seq);
  double e = 0;
  for (int64_t b : {int64_t{0}, batch - 1}) {
    for (int64_t t0 : {int64_t{0}, seq - n}) {
      auto part = [&](const Tensor& t) {
        return t.slice(0, b, b + 1).slice(2, t0, t0 + n).to_host();
      };
      e = worst(e, bench::relative_l2_error(part(got), reference(part(x), b, t0)));
    }
  }
  return e;
}

// ---- rope on q and k ------------------------------------------------------------------------
void bench_rope(Bench& b) {
  if (!any_wanted(b, {"rope q+k", "rope_backward q+k"})) return;
  const int64_t B = b.size("rope-batch"), H = b.size("rope-heads"), HK = b.size("rope-kv-heads"),
                T = b.size("rope-seq"), D = b.size("rope-dim");
  const DType bf = DType::bf16;
  const Shape qs{B, H, T, D}, ks{B, HK, T, D};
  const double Q = static_cast<double>(B) * H * T * D * 2,
               K = static_cast<double>(B) * HK * T * D * 2;
  const int sets = b.sets_for(static_cast<size_t>(2 * (Q + K)));  // inputs and outputs
  std::fprintf(stderr, "rope: q %s, k %s bf16, rotating %d input sets\n",
               bench::shape_string(qs).c_str(), bench::shape_string(ks).c_str(), sets);

  const std::vector<Tensor> q = b.normals(sets, qs, bf, 21), k = b.normals(sets, ks, bf, 22);
  const auto yq = b.empties(sets, qs, bf), yk = b.empties(sets, ks, bf);
  // Position ids as an engine keeps them: [B, T], int32, random in a 128K context.
  const Tensor ids = b.empty({B, T}, DType::i32);
  bench::fill_integers(ids, 23, 0, 131071, b.cs);
  b.sync();
  const Tensor ids_h = ids.to_host();
  const Shape shape{B, H + HK, T, D};  // the table's shape: q and k heads together

  struct Case {
    std::string op;
    RopeOptions options;
    bool backward;
  };
  RopeOptions offset = RopeOptions{}.set_dims(D).set_base(10000.0f);
  RopeOptions by_ids = RopeOptions{}.set_dims(D).set_base(500000.0f).set_positions(ids);
  RopeOptions interleaved = RopeOptions{}.set_dims(D).set_base(10000.0f).set_traditional(true);
  interleaved.offset = 1024;
  const Case cases[] = {
      {"rope q+k (offset)", offset, false},
      {"rope q+k (position ids [B, T])", by_ids, false},
      {"rope q+k (interleaved, offset)", interleaved, false},
      {"rope_backward q+k (offset)", offset, true},
  };
  for (const Case& c : cases) {
    const RopeOptions& o = c.options;
    const bool ids_given = o.positions.defined();
    const double bytes = 2 * (Q + K) + (ids_given ? 2.0 * B * T * 4 : 0.0);
    // The reference for a part of x at batch entry bi, positions t0 .. : the same options with
    // the host's positions of that part.
    auto reference = [&](const Tensor& part, int64_t bi, int64_t t0) {
      RopeOptions h = o;
      if (ids_given) {
        h.positions = ids_h.slice(0, bi, bi + 1).slice(1, t0, t0 + part.shape()[2]).contiguous();
      } else {
        h.offset = o.offset + t0;
      }
      return c.backward ? rope_backward(part, h) : rope(part, h);
    };
    b.run(
        c.op, shape, bf, bytes, sets,
        [&](int s) {
          if (c.backward) {
            rope_backward_into(yq[s], q[s], o, b.stream);
            rope_backward_into(yk[s], k[s], o, b.stream);
          } else {
            rope_into(yq[s], q[s], o, b.stream);
            rope_into(yk[s], k[s], o, b.stream);
          }
        },
        [&] {
          return worst(check_rope_ends(yq[0], q[0], reference),
                       check_rope_ends(yk[0], k[0], reference));
        },
        tol_for(bf));
  }
  b.sync();
}

// ---- norm_rope: q into a new tensor, k into a KV cache ---------------------------------------
// `projected`: q and k as the transposed views of [B, T, H, D] projections (the table's
// rows); false: contiguous [B, H, T, D] tensors (a --variants row, to tell the layout's cost).
void bench_norm_rope(Bench& b, bool projected = true) {
  if (!any_wanted(b, {"norm_rope q (new tensor)", "norm_rope q (interleaved, new tensor)",
                      "norm_rope k -> cache", "norm_rope q + k -> cache (a layer's)"}))
    return;
  const int64_t B = b.size("rope-batch"), H = b.size("rope-heads"), HK = b.size("rope-kv-heads"),
                T = b.size("rope-seq"), D = b.size("rope-dim");
  const DType bf = DType::bf16;
  const float eps = 1e-6f;
  const double Q = static_cast<double>(B) * H * T * D * 2,
               K = static_cast<double>(B) * HK * T * D * 2;
  // q and k as the transposed views of [B, T, H, D] projections (read in place).
  const Shape qp{B, T, H, D}, kp{B, T, HK, D}, cache_shape{B, HK, 2 * T, D};
  const int sets = b.sets_for(static_cast<size_t>(2 * Q + 3 * K));
  std::fprintf(stderr, "norm_rope: q %s, k %s into a cache %s, bf16, rotating %d input sets\n",
               bench::shape_string({B, H, T, D}).c_str(),
               bench::shape_string({B, HK, T, D}).c_str(), bench::shape_string(cache_shape).c_str(),
               sets);
  std::vector<Tensor> q, k;
  for (int s = 0; s < sets; ++s) {
    if (projected) {
      q.push_back(b.normal(qp, bf, 31 + s).transpose(1, 2));
      k.push_back(b.normal(kp, bf, 41 + s).transpose(1, 2));
    } else {
      q.push_back(b.normal({B, H, T, D}, bf, 31 + s));
      k.push_back(b.normal({B, HK, T, D}, bf, 41 + s));
    }
  }
  const auto yq = b.empties(sets, {B, H, T, D}, bf);
  const auto cache = b.normals(sets, cache_shape, bf, 51);
  const Tensor q_norm = b.normal({D}, bf, 52, 1.0f, 0.1f),
               k_norm = b.normal({D}, bf, 53, 1.0f, 0.1f);
  b.sync();
  const Tensor q_norm_h = q_norm.to_host(), k_norm_h = k_norm.to_host();
  const RopeOptions rot = RopeOptions{}.set_dims(D).set_base(1000000.0f);
  RopeOptions at_t = rot;
  at_t.offset = T;  // k's positions T .. 2T - 1 of the cache (a second chunk of a prefill)

  auto reference = [eps](const Tensor& weight_h, const RopeOptions& o) {
    return [eps, weight_h, o](const Tensor& part, int64_t, int64_t t0) {
      RopeOptions h = o;
      h.offset = o.offset + t0;
      return norm_rope(part, RopeNorm{weight_h, eps}, h);
    };
  };
  b.run(
      "norm_rope q (new tensor)", {B, H, T, D}, bf, 2 * Q, sets,
      [&](int s) {
        norm_rope_into(yq[s], q[s], RopeNorm{q_norm, eps}, rot, b.stream);
      },
      [&] { return check_rope_ends(yq[0], q[0], reference(q_norm_h, rot)); }, tol_for(bf));
  const RopeOptions rot_trad = RopeOptions{rot}.set_traditional(true);
  b.run(
      "norm_rope q (interleaved, new tensor)", {B, H, T, D}, bf, 2 * Q, sets,
      [&](int s) {
        norm_rope_into(yq[s], q[s], RopeNorm{q_norm, eps}, rot_trad, b.stream);
      },
      [&] { return check_rope_ends(yq[0], q[0], reference(q_norm_h, rot_trad)); }, tol_for(bf));
  b.run(
      "norm_rope k -> cache", {B, HK, T, D}, bf, 2 * K, sets,
      [&](int s) {
        norm_rope(k[s], RopeNorm{k_norm, eps}, at_t, cache[s], b.stream);
      },
      [&] { return check_rope_ends(cache[0].slice(2, T, 2 * T), k[0], reference(k_norm_h, at_t)); },
      tol_for(bf));
  // A layer's preparation of q and k, as the rope rows time q and k together.
  b.run(
      "norm_rope q + k -> cache (a layer's)", {B, H + HK, T, D}, bf, 2 * (Q + K), sets,
      [&](int s) {
        norm_rope_into(yq[s], q[s], RopeNorm{q_norm, eps}, rot, b.stream);
        norm_rope(k[s], RopeNorm{k_norm, eps}, at_t, cache[s], b.stream);
      },
      nullptr, 0.0);
  // The ceiling at k's size: a device-to-device copy of k's bytes, rotated over the same sets
  // (the 1 GiB copy of "% copy" amortises a launch, its ramp and its drain over 8x the bytes).
  if (!projected || !b.variant.empty()) {
    b.sync();
    return;
  }
  const auto k_copy = b.empties(sets, {B, HK, T, D}, bf);
  b.run(
      "norm_rope ceiling: copy of k's bytes", {B, HK, T, D}, bf, 2 * K, sets,
      [&](int s) {
        RUDNN_BENCH_CUDA(cudaMemcpyAsync(k_copy[s].data(), cache[s].data(),
                                         static_cast<size_t>(K), cudaMemcpyDeviceToDevice,
                                         b.cs));
      },
      nullptr, 0.0);
  // The same bytes to the places norm_rope writes: each (b, h) row of T·D elements into
  // positions T .. 2T - 1 of the cache's rows of 2T·D.
  const size_t row_bytes = static_cast<size_t>(T * D * 2);
  b.run(
      "norm_rope ceiling: copy of k into the cache's positions", {B, HK, T, D}, bf, 2 * K, sets,
      [&](int s) {
        RUDNN_BENCH_CUDA(cudaMemcpy2DAsync(static_cast<char*>(cache[s].data()) + row_bytes,
                                           2 * row_bytes, k_copy[s].data(), row_bytes, row_bytes,
                                           static_cast<size_t>(B * HK), cudaMemcpyDeviceToDevice,
                                           b.cs));
      },
      nullptr, 0.0);
  b.sync();
}

// ---- SwiGLU / GeGLU at the silu(a)·b anchor ----------------------------------------------------
void bench_glu(Bench& b) {
  if (!any_wanted(b, {"swiglu", "geglu"})) return;
  const int64_t R = b.size("glu-rows"), I = b.size("glu-cols");
  const Shape shape{R, I};
  const DType bf = DType::bf16;
  const double N = static_cast<double>(R) * I * 2;  // bytes of one bf16 [R, I] tensor
  // One set: gate, up, dy, the fused [R, 2I] projection, y, dgate, dup.
  const int sets = b.sets_for(static_cast<size_t>(N) * 8);
  std::fprintf(stderr, "gated activations: %s bf16, rotating %d input sets\n",
               bench::shape_string(shape).c_str(), sets);
  const auto gate = b.normals(sets, shape, bf, 61), up = b.normals(sets, shape, bf, 62),
             dy = b.normals(sets, shape, bf, 63), fused = b.normals(sets, {R, 2 * I}, bf, 64);
  const auto y = b.empties(sets, shape, bf), dgate = b.empties(sets, shape, bf),
             dup = b.empties(sets, shape, bf);
  b.sync();
  auto rows = [&](const Tensor& t, int64_t r0, int64_t r1) { return Bench::rows_host(t, r0, r1); };

  b.run(
      "swiglu", shape, bf, 3 * N, sets, [&](int s) { swiglu_into(y[s], gate[s], up[s], b.stream); },
      [&] {
        return b.ends(R, [&](int64_t r0, int64_t r1) {
          return bench::relative_l2_error(rows(y[0], r0, r1),
                                          swiglu(rows(gate[0], r0, r1), rows(up[0], r0, r1)));
        });
      },
      tol_for(bf));
  b.run(
      "swiglu (halves of [R, 2I])", shape, bf, 3 * N, sets,
      [&](int s) { swiglu_into(y[s], fused[s], b.stream); },
      [&] {
        return b.ends(R, [&](int64_t r0, int64_t r1) {
          return bench::relative_l2_error(rows(y[0], r0, r1), swiglu(rows(fused[0], r0, r1)));
        });
      },
      tol_for(bf));
  b.run(
      "swiglu_backward", shape, bf, 5 * N, sets,
      [&](int s) { swiglu_backward_into(dgate[s], dup[s], dy[s], gate[s], up[s], b.stream); },
      [&] {
        return b.ends(R, [&](int64_t r0, int64_t r1) {
          const GluGrads ref =
              swiglu_backward(rows(dy[0], r0, r1), rows(gate[0], r0, r1), rows(up[0], r0, r1));
          return worst(bench::relative_l2_error(rows(dgate[0], r0, r1), ref.dgate),
                       bench::relative_l2_error(rows(dup[0], r0, r1), ref.dup));
        });
      },
      tol_for(bf));
  b.run(
      "swiglu fwd+bwd", shape, bf, 8 * N, sets,
      [&](int s) {
        swiglu_into(y[s], gate[s], up[s], b.stream);
        swiglu_backward_into(dgate[s], dup[s], dy[s], gate[s], up[s], b.stream);
      },
      nullptr, tol_for(bf));
  struct Geglu {
    const char* op;
    GeluApproximate approximate;
  };
  for (const Geglu& g : {Geglu{"geglu (erf)", GeluApproximate::none},
                         Geglu{"geglu (tanh)", GeluApproximate::tanh}}) {
    const GeluApproximate approximate = g.approximate;
    b.run(
        g.op, shape, bf, 3 * N, sets,
        [&, approximate](int s) { geglu_into(y[s], gate[s], up[s], approximate, b.stream); },
        [&, approximate] {
          return b.ends(R, [&](int64_t r0, int64_t r1) {
            return bench::relative_l2_error(
                rows(y[0], r0, r1), geglu(rows(gate[0], r0, r1), rows(up[0], r0, r1), approximate));
          });
        },
        tol_for(bf));
  }
  b.sync();
}

void run_all(Bench& b) {
  bench_rope(b);
  release_cached_memory(b.dev);
  bench_norm_rope(b);
  release_cached_memory(b.dev);
  bench_glu(b);
  release_cached_memory(b.dev);
}

// The alternatives to the default launch choices, each timed on the ops it changes.
void run_variants(Bench& b) {
  using rudnn::transformer::cuda::kernel_tuning;
  using rudnn::transformer::cuda::KernelTuning;
  const KernelTuning defaults = kernel_tuning();
  const std::vector<std::string> norm_rope_ops = {
      "norm_rope q (new tensor)", "norm_rope q (interleaved, new tensor)", "norm_rope k -> cache"};
  const rudnn::transformer::cuda::NormRopeChoices choices =
      rudnn::transformer::cuda::norm_rope_choices();
  for (auto* v = choices.begin; v != choices.end; ++v) {
    kernel_tuning() = defaults;
    v->set(kernel_tuning());
    b.variant = v->label;
    b.variant_ops = norm_rope_ops;
    bench_norm_rope(b);
    release_cached_memory(b.dev);
  }
  kernel_tuning() = defaults;
  b.variant = "x contiguous [B, H, T, D]";
  b.variant_ops = norm_rope_ops;
  bench_norm_rope(b, false);
  release_cached_memory(b.dev);
  b.variant.clear();
  b.variant_ops.clear();
}

rudnn::bench::Family transformer_family() {
  rudnn::bench::Family family;
  family.sizes = {{"rope-batch", 8, "batch of rope's q and k"},
                  {"rope-heads", 32, "query heads of rope's q"},
                  {"rope-kv-heads", 8, "key heads of rope's k"},
                  {"rope-seq", 4096, "positions of rope's q and k (the cache holds twice as many)"},
                  {"rope-dim", 128, "head size of rope's q and k"},
                  {"glu-rows", 16384, "rows of the gated activations' gate and up"},
                  {"glu-cols", 8192, "row length (I) of the gated activations' gate and up"}};
  family.run = run_all;
  family.run_variants = run_variants;
  return family;
}

}  // namespace

RUDNN_BENCH_FAMILY(transformer, transformer_family);
