// Benchmark harness of ruDNN: times device work with CUDA events, measures the device's copy
// bandwidth in the same run as the ceiling, fills inputs with random data on the device, and
// prints / writes the result table. It owns rudnn_bench's main and options; each op family
// adds its cases from one file, bench/<family>.cpp, registered with RUDNN_BENCH_FAMILY (see
// the end of this header, and bench/normalization.cpp for the worked example).
//
// Method (as /work/.library/device/METHOD.md and the anchor scripts measure):
// - Each timed run sits between its own pair of CUDA events on the benchmark's stream; the
//   figure is the median over the runs (do_bench's return_mode="median" does the same).
// - Warm-up runs first, so that module load, first-touch of pool memory and the like stay out.
// - The runs cycle over several input (and output) sets whose total size is several times
//   the L2, so that no run finds its operands left in the cache by the run before.
// - GB/s counts the bytes the op must read and write once (ANCHORS.md's rule), over the
//   median time; "% copy" is that over the device-to-device copy bandwidth measured in the
//   same process (bytes read + written by a 1 GiB cudaMemcpyAsync).
#pragma once

#include <cuda_runtime.h>
#include <rudnn/rudnn.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <map>
#include <string>
#include <vector>

namespace rudnn::bench {

// Throws std::runtime_error naming the call when `status` is not cudaSuccess.
void check_cuda(cudaError_t status, const char* what, const char* file, int line);
#define RUDNN_BENCH_CUDA(call) ::rudnn::bench::check_cuda((call), #call, __FILE__, __LINE__)

// ---- The device -----------------------------------------------------------------------------
struct DeviceInfo {
  int index = 0;
  std::string name;
  int cc_major = 0, cc_minor = 0;
  int sm_count = 0;
  size_t l2_bytes = 0;
  size_t global_bytes = 0;
  size_t free_bytes = 0;     // at the time of the query
  int driver_version = 0;    // cudaDriverGetVersion, e.g. 13000
  int runtime_version = 0;   // cudaRuntimeGetVersion of the harness's runtime
  int memory_clock_khz = 0;  // 0 when the runtime does not report it
  int memory_bus_bits = 0;
  std::string str() const;  // one line for the table header
};
DeviceInfo query_device(int index);

// ---- Timing ---------------------------------------------------------------------------------
struct TimingOptions {
  int warmup_runs = 10;     // at least this many untimed runs ...
  double warmup_ms = 25.0;  // ... and at least this much estimated device time of them
  int runs = 100;           // timed runs (each between its own pair of events)
};

struct Timing {
  double median_ms = 0, min_ms = 0, max_ms = 0, mean_ms = 0;
  int runs = 0;
  int sets = 1;
  // Host wall-clock time to enqueue one timed run (the timed loop's enqueues / runs). When it
  // approaches median_ms the device waited for the host and the figure is the host's.
  double host_ms = 0;
};

// Times `fn(set)`, which must enqueue its device work on `stream` (and nothing on other
// streams): one run to estimate, warm-up runs, then opt.runs runs, the i-th using input set
// i % sets. The host enqueues all runs before it waits, so launch gaps between runs do not
// count (gaps inside one run, between its kernels, do).
Timing time_on_stream(cudaStream_t stream, int sets, const std::function<void(int)>& fn,
                      const TimingOptions& opt);

// How many input sets of `bytes_per_set` to rotate among: at least `min_sets`, and enough that
// all of them together exceed `factor` times the L2; at most `max_sets`, and no more than
// fit in `budget_bytes` (but never fewer than 1).
int rotation_sets(size_t bytes_per_set, size_t l2_bytes, size_t budget_bytes, int min_sets = 2,
                  double factor = 4.0, int max_sets = 64);

// Device-to-device copy bandwidth: cudaMemcpyAsync of `bytes` between two buffers, counting
// 2 * bytes (read + write) over the median time.
struct CopyBandwidth {
  size_t bytes = 0;
  Timing timing;
  double gbs = 0;  // 1e9 bytes per second
};
CopyBandwidth measure_copy_bandwidth(cudaStream_t stream, size_t bytes, const TimingOptions& opt);

// ---- Inputs ---------------------------------------------------------------------------------
// Fill a contiguous device tensor on `stream` with pseudo-random values that depend only on
// (seed, element index): normal(mean, stddev) for f32/f16/bf16, uniform integers in [lo, hi]
// for i32/i64/u32/u8.
void fill_normal(const Tensor& t, uint64_t seed, float mean, float stddev, cudaStream_t stream);
void fill_integers(const Tensor& t, uint64_t seed, int64_t lo, int64_t hi, cudaStream_t stream);

// Relative L2 error ‖got − ref‖ / ‖ref‖ over all elements of two host tensors of the same
// shape (any float dtypes), computed in double. NaN when either holds a NaN or infinity where
// the other does not; absolute when ‖ref‖ = 0.
double relative_l2_error(const Tensor& got, const Tensor& ref);

// ---- Results --------------------------------------------------------------------------------
struct Row {
  std::string op, shape, dtype;
  Timing timing;
  double bytes = 0;           // bytes read + written once
  double gbs = 0;             // bytes / median
  double pct_copy = 0;        // gbs over the copy bandwidth of this run, in %
  double check_error = -1;    // relative L2 error against the CPU reference (-1: not checked)
  std::string status = "ok";  // ok | FAILED (...) | ERROR (...)
};

class Table {
 public:
  void set_copy_gbs(double gbs) { copy_gbs_ = gbs; }
  double copy_gbs() const { return copy_gbs_; }
  // Fills gbs and pct_copy from bytes and the median, then appends.
  Row& add(Row row);
  const std::vector<Row>& rows() const { return rows_; }
  void print(std::FILE* out) const;
  void write_csv(const std::string& path) const;  // throws std::runtime_error on I/O failure
  bool all_ok() const;

 private:
  double copy_gbs_ = 0;
  std::vector<Row> rows_;
};

std::string shape_string(const Shape& shape);  // "16384x8192"

// ---- Options ----------------------------------------------------------------------------------
// A positive integer option a family declares for its shapes ("--rows", "--ce-classes").
struct SizeOption {
  std::string name;   // without the dashes: "rows" is given as --rows N
  int64_t value = 0;  // the default until parsed
  std::string help;
};

// rudnn_bench's command line (usage: rudnn_bench --help).
struct Options {
  bool quick = false;
  bool check = true;
  bool variants = false;
  std::string csv;
  std::string filter;
  int runs = -1, warmup = -1, min_sets = 2;
  int device = 0;
  int64_t check_rows = 4;  // rows checked at each end
  size_t copy_bytes = size_t(1) << 30;
  std::map<std::string, int64_t> sizes;  // every family's SizeOption, by name
};

// ---- The context every case runs in -----------------------------------------------------------
struct Bench {
  Options opt;
  DeviceInfo info;
  cudaStream_t cs = nullptr;
  Stream stream;  // cs, borrowed
  Device dev;
  TimingOptions timing;
  Table table;

  // While timing a variant: its label (appended to op names) and the ops it concerns.
  std::string variant;
  std::vector<std::string> variant_ops;

  // A family's shape option (SizeOption::name), as given or its default.
  int64_t size(const std::string& name) const;
  // Whether the op is to run: it passes --filter and, while timing a variant, concerns it.
  bool wanted(const std::string& op) const;
  void sync() const { RUDNN_BENCH_CUDA(cudaStreamSynchronize(cs)); }
  // Rotation count for a group whose one set (inputs + outputs) takes `bytes_per_set`.
  int sets_for(size_t bytes_per_set) const;

  // Runs `fn(0)` once, checks it (`check` returns the relative error, `tol` its bound), then
  // times `fn(set)` over `sets` sets; appends the row and echoes it on stderr. An exception
  // makes the row "ERROR (...)"; a check over `tol` makes it "FAILED (...)".
  void run(const std::string& op, const Shape& shape, DType dtype, double bytes, int sets,
           const std::function<void(int)>& fn, const std::function<double()>& check, double tol);

  // Device tensors on the benchmark's stream: uninitialised, or filled with normal(mean, sd).
  Tensor empty(const Shape& shape, DType dtype) const {
    return Tensor::empty(shape, dtype, dev, stream);
  }
  Tensor normal(const Shape& shape, DType dtype, uint64_t seed, float mean = 0.0f,
                float sd = 1.0f) const;
  std::vector<Tensor> empties(int sets, const Shape& shape, DType dtype) const;
  std::vector<Tensor> normals(int sets, const Shape& shape, DType dtype, uint64_t seed) const;

  // Rows [r0, r1) of a device tensor (leading axis), on the host.
  static Tensor rows_host(const Tensor& t, int64_t r0, int64_t r1) {
    return t.slice(0, r0, r1).to_host();
  }
  // The worse error of f(r0, r1) over the first and the last opt.check_rows rows (NaN wins).
  double ends(int64_t rows, const std::function<double(int64_t, int64_t)>& f) const;
};

// The worse of two errors; NaN when either is.
double worst(double a, double b);

// ---- Families -----------------------------------------------------------------------------------
// One op family's benchmark: its shape options and its cases. rudnn_bench runs every registered
// family's `run` in registration order, then (with --variants) every `run_variants`.
struct Family {
  std::string name;                          // set by RUDNN_BENCH_FAMILY
  std::vector<SizeOption> sizes;             // its shape options (names unique across families)
  std::function<void(Bench&)> run;           // times its default cases
  std::function<void(Bench&)> run_variants;  // times its alternative launch choices; may be empty
};

// Adds a family to rudnn_bench; returns true (for the static registrar).
bool register_family(const std::string& name, Family family);
const std::vector<Family>& families();

}  // namespace rudnn::bench

// In bench/<family>.cpp, at namespace scope: `RUDNN_BENCH_FAMILY(normalization, make_family);`
// where `rudnn::bench::Family make_family()` describes the family.
#define RUDNN_BENCH_FAMILY(family_name, make_family)                               \
  [[maybe_unused]] static const bool rudnn_bench_family_registered_##family_name = \
      ::rudnn::bench::register_family(#family_name, make_family())
