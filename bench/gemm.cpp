// The GEMM family's benchmark cases: ruDNN's internal tensor-core GEMM (src/gemm, gemm/gemm.h)
// on its two paths (wgmma + TMA, "hopper"; mma.sync + cp.async, "mma_sync") against cuBLAS
// (cublasGemmEx, FP32 accumulation) in the same process, on the same operands. The table's
// bytes column counts A, B and D once; after the family, a second table prints TFLOP/s and
// the ratio to cuBLAS of every case.
//
// Dense bf16 "TN" (A [M, K] row-major, B [N, K], i.e. column-major K x N, D [M, N] row-major):
// 8192^3, 4096^3, (M, N, K) = (1024, 2816, 2048) and (1024, 2048, 1408) (an MoE expert's up
// and down projections). Grouped (MoE forward, grouped by M): T = 8192 tokens, E = 64
// experts, top-8 (65536 rows), H = 2048, I = 1408, the up projection (N = 2I, K = H) and the
// down projection (N = H, K = I), with balanced (1024 rows each) and skewed (rows ~ 1/(e+1))
// groups; cuBLAS runs one cublasGemmEx per non-empty expert (sizes known on the host).
// The weight gradient of the up projection, grouped by K: dW_g [2I, H] = dY_g^T X_g (dY
// [65536, 2I], X [65536, H] row-major; D [E, 2I, H] bf16), balanced and skewed, against one
// cublasGemmEx per expert. The wgmma path runs with clusters of one and of two blocks
// (Tuning::hopper_cluster: B multicast to the pair) and, for the forward layout, with the
// ping-pong schedule at each of its tiles (Tuning::hopper_schedule), alone and in pairs, so
// that the defaults can be chosen on evidence.
// The check compares ruDNN's D with cuBLAS's (first and last rows, relative L2).
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <rudnn/rudnn.h>

#include <cstdio>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include "gemm/gemm.h"
#include "harness.h"

namespace {

using namespace rudnn;
using rudnn::bench::Bench;

void check_cublas(cublasStatus_t s, const char* what) {
  if (s != CUBLAS_STATUS_SUCCESS)
    throw std::runtime_error(std::string(what) + " failed: cuBLAS status " +
                             std::to_string(static_cast<int>(s)));
}

struct Flops {
  std::string op, shape;
  double flops;
  double median_ms = -1;
};
std::vector<Flops> g_flops;

// Runs the case through the harness and remembers its flops and median for the TFLOP/s table.
void run_case(Bench& b, const std::string& op, const Shape& shape, double bytes, double flops,
              int sets, const std::function<void(int)>& fn, const std::function<double()>& check) {
  const size_t before = b.table.rows().size();
  b.run(op, shape, DType::bf16, bytes, sets, fn, check, 2e-2);
  if (b.table.rows().size() == before) return;  // filtered out
  const auto& row = b.table.rows().back();
  g_flops.push_back({row.op, row.shape, flops, row.status == "ok" ? row.timing.median_ms : -1});
}

// D^T = B^T A^T in cuBLAS's column-major view: D row-major [M, N] is column-major N x M.
void cublas_tn(cublasHandle_t h, int64_t m, int64_t n, int64_t k, const void* a, int64_t lda,
               const void* bm, int64_t ldb, void* d, int64_t ldd) {
  const float one = 1.0f, zero = 0.0f;
  check_cublas(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(n), static_cast<int>(m),
                            static_cast<int>(k), &one, bm, CUDA_R_16BF, static_cast<int>(ldb), a,
                            CUDA_R_16BF, static_cast<int>(lda), &zero, d, CUDA_R_16BF,
                            static_cast<int>(ldd), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
               "cublasGemmEx");
}

double compare_ends(Bench& b, const Tensor& got, const Tensor& ref, int64_t rows) {
  return b.ends(rows, [&](int64_t r0, int64_t r1) {
    return bench::relative_l2_error(Bench::rows_host(got, r0, r1), Bench::rows_host(ref, r0, r1));
  });
}

// A row of ours: the path and the Hopper kernel's tuning (gemm::Tuning; 0 / Auto = the
// entry's choice).
struct HopperCase {
  const char* name;
  gemm::Path path;
  int cluster;
  gemm::HopperSchedule schedule;
  int block_m, block_n;
  int splits = 0;
  bool direct_store = false;
  void tune(gemm::Path& p, gemm::Tuning& t) const {
    p = path;
    t.hopper_cluster = cluster;
    t.hopper_schedule = schedule;
    t.hopper_block_m = block_m;
    t.hopper_block_n = block_n;
    t.hopper_splits = splits;
    t.hopper_direct_store = direct_store;
  }
};
using gemm::HopperSchedule;
// "gemm hopper cluster1/2": the cooperative schedule with its tile picked by the entry (the
// rows of earlier rounds); "gemm hopper auto": the entry's whole choice (first after cuBLAS,
// the rows compared most come next: later rows run on a hotter GPU; "direct store": D stored
// from registers instead of the TMA-store epilogue, for the comparison); the ping-pong rows
// force each tile built, and split K (the split-K rows allocate their workspace per call, as
// a caller without one does).
constexpr HopperCase kDenseCases[] = {
    {"gemm hopper auto", gemm::Path::Hopper, 0, HopperSchedule::Auto, 0, 0},
    {"gemm hopper pingpong 64x256", gemm::Path::Hopper, 0, HopperSchedule::Pingpong, 64, 256},
    {"gemm hopper pingpong 128x128", gemm::Path::Hopper, 0, HopperSchedule::Pingpong, 128, 128},
    {"gemm hopper pingpong 128x128 split2", gemm::Path::Hopper, 0, HopperSchedule::Pingpong, 128,
     128, 2},
    {"gemm hopper pingpong 128x128 split3", gemm::Path::Hopper, 0, HopperSchedule::Pingpong, 128,
     128, 3},
    {"gemm hopper pingpong 64x256 split2", gemm::Path::Hopper, 0, HopperSchedule::Pingpong, 64, 256,
     2},
    {"gemm hopper cluster1", gemm::Path::Hopper, 1, HopperSchedule::Cooperative, 0, 0},
    {"gemm hopper cluster2", gemm::Path::Hopper, 2, HopperSchedule::Cooperative, 0, 0},
    {"gemm hopper cluster1 direct store", gemm::Path::Hopper, 1, HopperSchedule::Cooperative, 0, 0,
     0, true},
    {"gemm hopper coop 128x128", gemm::Path::Hopper, 1, HopperSchedule::Cooperative, 0, 128},
    {"gemm hopper pingpong 64x192", gemm::Path::Hopper, 0, HopperSchedule::Pingpong, 64, 192},
    {"gemm hopper pingpong 128x128 cluster2", gemm::Path::Hopper, 2, HopperSchedule::Pingpong,
     128, 128},
    {"gemm hopper pingpong 64x256 cluster2", gemm::Path::Hopper, 2, HopperSchedule::Pingpong, 64,
     256},
    {"gemm hopper pingpong 64x192 cluster2", gemm::Path::Hopper, 2, HopperSchedule::Pingpong, 64,
     192},
    {"gemm mma_sync", gemm::Path::MmaSync, 0, HopperSchedule::Auto, 0, 0},
};
constexpr HopperCase kGroupedCases[] = {
    {"grouped hopper cluster1 ", gemm::Path::Hopper, 1, HopperSchedule::Cooperative, 0, 0},
    {"grouped hopper cluster2 ", gemm::Path::Hopper, 2, HopperSchedule::Cooperative, 0, 0},
    {"grouped hopper pingpong ", gemm::Path::Hopper, 0, HopperSchedule::Pingpong, 0, 0},
    {"grouped hopper pingpong cluster2 ", gemm::Path::Hopper, 2, HopperSchedule::Pingpong, 0, 0},
    {"grouped mma_sync ", gemm::Path::MmaSync, 0, HopperSchedule::Auto, 0, 0},
};

void bench_dense(Bench& b, cublasHandle_t h, int64_t M, int64_t N, int64_t K) {
  const Shape shape{M, N, K};
  const DType bf = DType::bf16;
  const double bytes = 2.0 * (M * K + N * K + M * N), flops = 2.0 * M * N * K;
  const int sets = b.sets_for(static_cast<size_t>(bytes) + 2 * M * N);
  const auto a = b.normals(sets, {M, K}, bf, 11);
  const auto bw = b.normals(sets, {N, K}, bf, 12);
  const auto d = b.empties(sets, {M, N}, bf);
  const auto ref = b.empties(1, {M, N}, bf);
  b.sync();
  const std::string dims = std::to_string(M) + "x" + std::to_string(N) + "x" + std::to_string(K);

  auto cublas = [&](int s, const Tensor& out) {
    cublas_tn(h, M, N, K, a[s].data(), K, bw[s].data(), K, out.data(), N);
  };
  run_case(
      b, "gemm cublas", shape, bytes, flops, sets, [&](int s) { cublas(s, d[s]); }, nullptr);
  cublas(0, ref[0]);
  b.sync();
  for (const HopperCase& c : kDenseCases) {
    auto fn = [&](int s) {
      gemm::GemmParams p;
      p.dtype = bf;
      p.m = M;
      p.n = N;
      p.k = K;
      p.a = {a[s].data(), gemm::Layout::RowMajor, K};
      p.b = {bw[s].data(), gemm::Layout::ColMajor, K};
      p.d = d[s].data();
      p.ldd = N;
      c.tune(p.path, p.tuning);
      gemm::gemm(p, b.stream);
    };
    run_case(b, c.name, shape, bytes, flops, sets, fn,
             [&] { return compare_ends(b, d[0], ref[0], M); });
  }
  // cuBLAS once more: the clocks drift over a shape's rows (an 8192^3 row draws the most
  // power), and this row, against the first, shows by how much.
  run_case(
      b, "gemm cublas again", shape, bytes, flops, sets, [&](int s) { cublas(s, d[s]); }, nullptr);
  (void)dims;
}

void bench_grouped(Bench& b, cublasHandle_t h, const std::string& label,
                   const std::vector<int32_t>& sizes, int64_t N, int64_t K) {
  const DType bf = DType::bf16;
  const int64_t E = static_cast<int64_t>(sizes.size());
  std::vector<int32_t> offsets(1, 0);
  for (int32_t s : sizes) offsets.push_back(offsets.back() + s);
  const int64_t rows = offsets.back();
  const Shape shape{rows, N, K};
  const double bytes = 2.0 * (rows * K + E * N * K + rows * N), flops = 2.0 * rows * N * K;
  const int sets = b.sets_for(static_cast<size_t>(bytes));
  const auto x = b.normals(sets, {rows, K}, bf, 21);
  const auto w = b.normals(sets, {E, N, K}, bf, 22);
  const auto d = b.empties(sets, {rows, N}, bf);
  const auto ref = b.empties(1, {rows, N}, bf);
  const Tensor offsets_device = Tensor::from_host(offsets, {E + 1}, b.dev, b.stream);
  b.sync();

  auto cublas = [&](int s, const Tensor& out) {
    for (int64_t e = 0; e < E; ++e) {
      if (sizes[e] == 0) continue;
      cublas_tn(h, sizes[e], N, K, static_cast<const char*>(x[s].data()) + 2 * offsets[e] * K, K,
                static_cast<const char*>(w[s].data()) + 2 * e * N * K, K,
                static_cast<char*>(out.data()) + 2 * offsets[e] * N, N);
    }
  };
  run_case(
      b, "grouped cublas loop " + label, shape, bytes, flops, sets, [&](int s) { cublas(s, d[s]); },
      nullptr);
  cublas(0, ref[0]);
  b.sync();
  for (const HopperCase& c : kGroupedCases) {
    auto fn = [&](int s) {
      gemm::GroupedGemmParams p;
      p.dtype = bf;
      p.grouped = gemm::GroupedDim::M;
      p.groups = E;
      p.offsets = offsets_device.data_as<int32_t>();
      p.m = rows;
      p.n = N;
      p.k = K;
      p.a = {x[s].data(), gemm::Layout::RowMajor, K};
      p.b = {w[s].data(), gemm::Layout::ColMajor, K};
      p.b_group_stride = N * K;
      p.d = d[s].data();
      p.ldd = N;
      c.tune(p.path, p.tuning);
      gemm::grouped_gemm(p, b.stream);
    };
    run_case(b, c.name + label, shape, bytes, flops, sets, fn,
             [&] { return compare_ends(b, d[0], ref[0], rows); });
  }
}

// dW_g [M, N] = dY_g^T X_g over each group's rows (grouped by K): dY [rows, M], X [rows, N].
void bench_weight_grad(Bench& b, cublasHandle_t h, const std::string& label,
                       const std::vector<int32_t>& sizes, int64_t M, int64_t N) {
  const DType bf = DType::bf16;
  const int64_t E = static_cast<int64_t>(sizes.size());
  std::vector<int32_t> offsets(1, 0);
  for (int32_t s : sizes) offsets.push_back(offsets.back() + s);
  const int64_t rows = offsets.back();
  const Shape shape{E, M, N};
  const double bytes = 2.0 * (rows * M + rows * N + E * M * N), flops = 2.0 * rows * M * N;
  const int sets = b.sets_for(static_cast<size_t>(bytes));
  const auto dy = b.normals(sets, {rows, M}, bf, 31);
  const auto x = b.normals(sets, {rows, N}, bf, 32);
  const auto d = b.empties(sets, {E * M, N}, bf);
  const auto ref = b.empties(1, {E * M, N}, bf);
  const Tensor offsets_device = Tensor::from_host(offsets, {E + 1}, b.dev, b.stream);
  b.sync();

  // Column-major view: dW_g^T (N x M) = X_g^T (N x T_g, X_g as stored) . dY_g (T_g x M).
  auto cublas = [&](int s, const Tensor& out) {
    const float one = 1.0f, zero = 0.0f;
    for (int64_t e = 0; e < E; ++e) {
      if (sizes[e] == 0) continue;
      check_cublas(
          cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_T, static_cast<int>(N), static_cast<int>(M),
                       sizes[e], &one, static_cast<const char*>(x[s].data()) + 2 * offsets[e] * N,
                       CUDA_R_16BF, static_cast<int>(N),
                       static_cast<const char*>(dy[s].data()) + 2 * offsets[e] * M, CUDA_R_16BF,
                       static_cast<int>(M), &zero, static_cast<char*>(out.data()) + 2 * e * M * N,
                       CUDA_R_16BF, static_cast<int>(N), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
          "cublasGemmEx");
    }
  };
  run_case(
      b, "wgrad cublas loop " + label, shape, bytes, flops, sets, [&](int s) { cublas(s, d[s]); },
      nullptr);
  RUDNN_BENCH_CUDA(cudaMemsetAsync(ref[0].data(), 0, static_cast<size_t>(E * M * N) * 2, b.cs));
  cublas(0, ref[0]);
  b.sync();
  for (const auto& [name, path, cluster] :
       {std::tuple{"wgrad hopper cluster1 ", gemm::Path::Hopper, 1},
        std::tuple{"wgrad hopper cluster2 ", gemm::Path::Hopper, 2},
        std::tuple{"wgrad mma_sync ", gemm::Path::MmaSync, 0}}) {
    auto fn = [&, path = path, cluster = cluster](int s) {
      gemm::GroupedGemmParams p;
      p.dtype = bf;
      p.grouped = gemm::GroupedDim::K;
      p.groups = E;
      p.offsets = offsets_device.data_as<int32_t>();
      p.m = M;
      p.n = N;
      p.k = rows;
      p.a = {dy[s].data(), gemm::Layout::ColMajor, M};  // A(m, t) = dY[t][m]
      p.b = {x[s].data(), gemm::Layout::RowMajor, N};   // B(t, n) = X[t][n]
      p.d = d[s].data();
      p.ldd = N;
      p.d_group_stride = M * N;
      p.path = path;
      p.tuning.hopper_cluster = cluster;
      gemm::grouped_gemm(p, b.stream);
    };
    run_case(b, name + label, shape, bytes, flops, sets, fn,
             [&] { return compare_ends(b, d[0], ref[0], E * M); });
  }
}

void run_family(Bench& b) {
  cublasHandle_t h = nullptr;
  check_cublas(cublasCreate(&h), "cublasCreate");
  check_cublas(cublasSetStream(h, b.cs), "cublasSetStream");
  g_flops.clear();
  try {
    bench_dense(b, h, 8192, 8192, 8192);
    bench_dense(b, h, 4096, 4096, 4096);
    bench_dense(b, h, 1024, 2816, 2048);
    bench_dense(b, h, 1024, 2048, 1408);
    const int64_t T = 8192, E = 64, top = 8, H = 2048, I = 1408;
    const int64_t rows = T * top;
    const std::vector<int32_t> balanced(E, static_cast<int32_t>(rows / E));
    std::vector<int32_t> skewed(E);
    double harmonic = 0;
    for (int64_t e = 0; e < E; ++e) harmonic += 1.0 / (e + 1);
    int64_t given = 0;
    for (int64_t e = 0; e < E; ++e) {
      skewed[e] = static_cast<int32_t>(rows / harmonic / (e + 1));
      given += skewed[e];
    }
    skewed[0] += static_cast<int32_t>(rows - given);
    bench_grouped(b, h, "up balanced", balanced, 2 * I, H);
    bench_grouped(b, h, "up skewed", skewed, 2 * I, H);
    bench_grouped(b, h, "down balanced", balanced, H, I);
    bench_grouped(b, h, "down skewed", skewed, H, I);
    bench_weight_grad(b, h, "up balanced", balanced, 2 * I, H);
    bench_weight_grad(b, h, "up skewed", skewed, 2 * I, H);
  } catch (...) {
    cublasDestroy(h);
    throw;
  }
  cublasDestroy(h);

  // TFLOP/s and the ratio to the cuBLAS row of the same shape printed just before.
  std::printf("\n%-36s %-20s %10s %10s %8s\n", "gemm op", "M x N x K", "ms", "TFLOP/s", "/cuBLAS");
  double cublas_tflops = 0;
  for (const Flops& f : g_flops) {
    const double tflops = f.median_ms > 0 ? f.flops / (f.median_ms * 1e-3) / 1e12 : 0;
    if (f.op.find("cublas") != std::string::npos) cublas_tflops = tflops;
    std::printf("%-36s %-20s %10.4f %10.1f %8.3f\n", f.op.c_str(), f.shape.c_str(), f.median_ms,
                tflops, cublas_tflops > 0 ? tflops / cublas_tflops : 0.0);
  }
}

rudnn::bench::Family make_family() {
  rudnn::bench::Family f;
  f.run = run_family;
  return f;
}

}  // namespace

RUDNN_BENCH_FAMILY(gemm, make_family);
