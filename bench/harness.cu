// Benchmark harness: see harness.h.
#include "harness.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <fstream>
#include <numeric>
#include <sstream>
#include <stdexcept>

namespace rudnn::bench {

void check_cuda(cudaError_t status, const char* what, const char* file, int line) {
  if (status == cudaSuccess) return;
  std::ostringstream msg;
  msg << what << " failed at " << file << ":" << line << ": " << cudaGetErrorName(status) << " ("
      << cudaGetErrorString(status) << ")";
  throw std::runtime_error(msg.str());
}

// ---- The device -----------------------------------------------------------------------------
DeviceInfo query_device(int index) {
  DeviceInfo d;
  d.index = index;
  cudaDeviceProp prop{};
  RUDNN_BENCH_CUDA(cudaGetDeviceProperties(&prop, index));
  d.name = prop.name;
  d.global_bytes = prop.totalGlobalMem;
  auto attr = [&](cudaDeviceAttr a) {
    int v = 0;
    if (cudaDeviceGetAttribute(&v, a, index) != cudaSuccess) {
      (void)cudaGetLastError();  // an attribute this runtime no longer reports reads 0
      v = 0;
    }
    return v;
  };
  d.cc_major = attr(cudaDevAttrComputeCapabilityMajor);
  d.cc_minor = attr(cudaDevAttrComputeCapabilityMinor);
  d.sm_count = attr(cudaDevAttrMultiProcessorCount);
  d.l2_bytes = static_cast<size_t>(attr(cudaDevAttrL2CacheSize));
  d.memory_clock_khz = attr(cudaDevAttrMemoryClockRate);
  d.memory_bus_bits = attr(cudaDevAttrGlobalMemoryBusWidth);
  RUDNN_BENCH_CUDA(cudaDriverGetVersion(&d.driver_version));
  RUDNN_BENCH_CUDA(cudaRuntimeGetVersion(&d.runtime_version));
  int previous = 0;
  RUDNN_BENCH_CUDA(cudaGetDevice(&previous));
  RUDNN_BENCH_CUDA(cudaSetDevice(index));
  size_t free_b = 0, total_b = 0;
  RUDNN_BENCH_CUDA(cudaMemGetInfo(&free_b, &total_b));
  d.free_bytes = free_b;
  RUDNN_BENCH_CUDA(cudaSetDevice(previous));
  return d;
}

static std::string cuda_version_str(int v) {
  return std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 10);
}

std::string DeviceInfo::str() const {
  std::ostringstream s;
  s << "cuda:" << index << " " << name << ", sm_" << cc_major << cc_minor << ", " << sm_count
    << " SMs, L2 " << (l2_bytes >> 20) << " MiB, " << (global_bytes >> 20) << " MiB memory ("
    << (free_bytes >> 20) << " free), driver CUDA " << cuda_version_str(driver_version)
    << ", runtime " << cuda_version_str(runtime_version);
  if (memory_clock_khz > 0 && memory_bus_bits > 0) {
    // DDR: two transfers per clock. A datasheet-style lead, not a measurement.
    const double peak = 2.0 * memory_clock_khz * 1e3 * (memory_bus_bits / 8.0) / 1e9;
    s << ", memory " << memory_clock_khz / 1000 << " MHz x " << memory_bus_bits << " bit (nominal "
      << static_cast<long>(peak) << " GB/s)";
  }
  return s.str();
}

// ---- Timing ---------------------------------------------------------------------------------
namespace {

struct EventPool {
  std::vector<cudaEvent_t> events;
  explicit EventPool(size_t n) : events(n, nullptr) {
    for (auto& e : events) RUDNN_BENCH_CUDA(cudaEventCreate(&e));
  }
  ~EventPool() {
    for (auto e : events)
      if (e) cudaEventDestroy(e);
  }
  EventPool(const EventPool&) = delete;
  EventPool& operator=(const EventPool&) = delete;
};

Timing summarize(std::vector<float> ms, int sets) {
  Timing t;
  t.runs = static_cast<int>(ms.size());
  t.sets = sets;
  if (ms.empty()) return t;
  std::sort(ms.begin(), ms.end());
  const size_t n = ms.size();
  t.median_ms = n % 2 ? ms[n / 2] : 0.5 * (static_cast<double>(ms[n / 2 - 1]) + ms[n / 2]);
  t.min_ms = ms.front();
  t.max_ms = ms.back();
  t.mean_ms = std::accumulate(ms.begin(), ms.end(), 0.0) / static_cast<double>(n);
  return t;
}

}  // namespace

Timing time_on_stream(cudaStream_t stream, int sets, const std::function<void(int)>& fn,
                      const TimingOptions& opt) {
  if (sets < 1) sets = 1;
  const int runs = std::max(1, opt.runs);

  // One run to estimate the time of a run (and to fail early, before the many).
  float estimate_ms = 0;
  {
    EventPool ev(2);
    RUDNN_BENCH_CUDA(cudaEventRecord(ev.events[0], stream));
    fn(0);
    RUDNN_BENCH_CUDA(cudaEventRecord(ev.events[1], stream));
    RUDNN_BENCH_CUDA(cudaEventSynchronize(ev.events[1]));
    RUDNN_BENCH_CUDA(cudaGetLastError());
    RUDNN_BENCH_CUDA(cudaEventElapsedTime(&estimate_ms, ev.events[0], ev.events[1]));
  }
  int warmup = std::max(0, opt.warmup_runs);
  if (estimate_ms > 0 && opt.warmup_ms > 0) {
    const double by_time = std::ceil(opt.warmup_ms / estimate_ms);
    warmup = std::max(warmup, static_cast<int>(std::min(by_time, 1000.0)));
  }
  for (int i = 0; i < warmup; ++i) fn((i + 1) % sets);
  RUDNN_BENCH_CUDA(cudaStreamSynchronize(stream));
  RUDNN_BENCH_CUDA(cudaGetLastError());

  EventPool ev(2 * static_cast<size_t>(runs));
  const auto enqueue_start = std::chrono::steady_clock::now();
  for (int i = 0; i < runs; ++i) {
    RUDNN_BENCH_CUDA(cudaEventRecord(ev.events[2 * i], stream));
    fn(i % sets);
    RUDNN_BENCH_CUDA(cudaEventRecord(ev.events[2 * i + 1], stream));
  }
  const std::chrono::duration<double, std::milli> enqueue =
      std::chrono::steady_clock::now() - enqueue_start;
  RUDNN_BENCH_CUDA(cudaStreamSynchronize(stream));
  RUDNN_BENCH_CUDA(cudaGetLastError());
  std::vector<float> ms(runs);
  for (int i = 0; i < runs; ++i)
    RUDNN_BENCH_CUDA(cudaEventElapsedTime(&ms[i], ev.events[2 * i], ev.events[2 * i + 1]));
  Timing t = summarize(std::move(ms), sets);
  t.host_ms = enqueue.count() / runs;
  return t;
}

int rotation_sets(size_t bytes_per_set, size_t l2_bytes, size_t budget_bytes, int min_sets,
                  double factor, int max_sets) {
  if (bytes_per_set == 0) return 1;
  const double need =
      std::ceil(factor * static_cast<double>(l2_bytes) / static_cast<double>(bytes_per_set));
  int sets = std::max(min_sets, static_cast<int>(std::min(need, 1e6)));
  sets = std::min(sets, max_sets);
  const size_t fit = budget_bytes / bytes_per_set;
  if (static_cast<size_t>(sets) > fit) sets = static_cast<int>(fit);
  return std::max(sets, 1);
}

CopyBandwidth measure_copy_bandwidth(cudaStream_t stream, size_t bytes, const TimingOptions& opt) {
  CopyBandwidth r;
  r.bytes = bytes;
  void* a = nullptr;
  void* b = nullptr;
  RUDNN_BENCH_CUDA(cudaMallocAsync(&a, bytes, stream));
  RUDNN_BENCH_CUDA(cudaMallocAsync(&b, bytes, stream));
  // Touch both buffers (first-touch mapping is not what is measured).
  RUDNN_BENCH_CUDA(cudaMemsetAsync(a, 0x5a, bytes, stream));
  RUDNN_BENCH_CUDA(cudaMemsetAsync(b, 0, bytes, stream));
  try {
    r.timing = time_on_stream(
        stream, 1,
        [&](int) {
          RUDNN_BENCH_CUDA(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, stream));
        },
        opt);
  } catch (...) {
    cudaFreeAsync(a, stream);
    cudaFreeAsync(b, stream);
    cudaStreamSynchronize(stream);
    throw;
  }
  RUDNN_BENCH_CUDA(cudaFreeAsync(a, stream));
  RUDNN_BENCH_CUDA(cudaFreeAsync(b, stream));
  RUDNN_BENCH_CUDA(cudaStreamSynchronize(stream));
  r.gbs = 2.0 * static_cast<double>(bytes) / (r.timing.median_ms * 1e6);
  return r;
}

// ---- Inputs ---------------------------------------------------------------------------------
namespace {

__device__ __forceinline__ uint64_t mix64(uint64_t z) {  // splitmix64's finalizer
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

template <class T>
__device__ __forceinline__ T from_float(float v);
template <>
__device__ __forceinline__ float from_float<float>(float v) {
  return v;
}
template <>
__device__ __forceinline__ __half from_float<__half>(float v) {
  return __float2half_rn(v);
}
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}

template <class T>
__global__ void fill_normal_kernel(T* __restrict__ out, int64_t n, uint64_t seed, float mean,
                                   float stddev) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step) {
    const uint64_t h = mix64(seed ^ mix64(static_cast<uint64_t>(i)));
    // Box-Muller from two 24-bit uniforms; u1 in (0, 1].
    const float u1 = (static_cast<float>(h >> 40) + 1.0f) * (1.0f / 16777216.0f);
    const float u2 = static_cast<float>((h >> 8) & 0xffffffu) * (1.0f / 16777216.0f);
    const float z = sqrtf(-2.0f * logf(u1)) * cospif(2.0f * u2);
    out[i] = from_float<T>(mean + stddev * z);
  }
}

template <class T>
__global__ void fill_integers_kernel(T* __restrict__ out, int64_t n, uint64_t seed, int64_t lo,
                                     uint64_t range) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step) {
    const uint64_t h = mix64(seed ^ mix64(static_cast<uint64_t>(i)));
    out[i] = static_cast<T>(lo + static_cast<int64_t>(range ? h % range : h));
  }
}

unsigned fill_grid(int64_t n) {
  const int64_t blocks = (n + 255) / 256;
  return static_cast<unsigned>(std::min<int64_t>(std::max<int64_t>(blocks, 1), 65536));
}

void require_device_contiguous(const Tensor& t, const char* what) {
  if (!t.defined() || !t.device().is_cuda() || !t.is_contiguous()) {
    throw std::runtime_error(std::string(what) + ": needs a defined, contiguous CUDA tensor, got " +
                             (t.defined() ? t.str() : std::string("undefined")));
  }
}

}  // namespace

void fill_normal(const Tensor& t, uint64_t seed, float mean, float stddev, cudaStream_t stream) {
  require_device_contiguous(t, "fill_normal");
  const int64_t n = t.numel();
  if (n == 0) return;
  RUDNN_BENCH_CUDA(cudaSetDevice(t.device().index));
  const unsigned grid = fill_grid(n);
  switch (t.dtype()) {
    case DType::f32:
      fill_normal_kernel<<<grid, 256, 0, stream>>>(static_cast<float*>(t.data()), n, seed, mean,
                                                   stddev);
      break;
    case DType::f16:
      fill_normal_kernel<<<grid, 256, 0, stream>>>(static_cast<__half*>(t.data()), n, seed, mean,
                                                   stddev);
      break;
    case DType::bf16:
      fill_normal_kernel<<<grid, 256, 0, stream>>>(static_cast<__nv_bfloat16*>(t.data()), n, seed,
                                                   mean, stddev);
      break;
    default:
      throw std::runtime_error(std::string("fill_normal: not a float dtype: ") +
                               dtype_name(t.dtype()));
  }
  RUDNN_BENCH_CUDA(cudaGetLastError());
}

void fill_integers(const Tensor& t, uint64_t seed, int64_t lo, int64_t hi, cudaStream_t stream) {
  require_device_contiguous(t, "fill_integers");
  if (hi < lo) throw std::runtime_error("fill_integers: hi < lo");
  const int64_t n = t.numel();
  if (n == 0) return;
  RUDNN_BENCH_CUDA(cudaSetDevice(t.device().index));
  const unsigned grid = fill_grid(n);
  const uint64_t range = static_cast<uint64_t>(hi - lo) + 1;  // 0 when the whole 64-bit range
  switch (t.dtype()) {
    case DType::i32:
      fill_integers_kernel<<<grid, 256, 0, stream>>>(static_cast<int32_t*>(t.data()), n, seed, lo,
                                                     range);
      break;
    case DType::i64:
      fill_integers_kernel<<<grid, 256, 0, stream>>>(static_cast<int64_t*>(t.data()), n, seed, lo,
                                                     range);
      break;
    case DType::u32:
      fill_integers_kernel<<<grid, 256, 0, stream>>>(static_cast<uint32_t*>(t.data()), n, seed, lo,
                                                     range);
      break;
    case DType::u8:
      fill_integers_kernel<<<grid, 256, 0, stream>>>(static_cast<uint8_t*>(t.data()), n, seed, lo,
                                                     range);
      break;
    default:
      throw std::runtime_error(std::string("fill_integers: not an integer dtype: ") +
                               dtype_name(t.dtype()));
  }
  RUDNN_BENCH_CUDA(cudaGetLastError());
}

// ---- Checks ---------------------------------------------------------------------------------
namespace {

std::vector<double> host_doubles(const Tensor& t) {
  const Tensor h = t.device().is_cpu() && t.is_contiguous() ? t : t.to_host();
  const int64_t n = h.numel();
  std::vector<double> v(static_cast<size_t>(n));
  switch (h.dtype()) {
    case DType::f32: {
      const float* p = h.data_as<float>();
      for (int64_t i = 0; i < n; ++i) v[i] = p[i];
      break;
    }
    case DType::f64: {
      const double* p = h.data_as<double>();
      for (int64_t i = 0; i < n; ++i) v[i] = p[i];
      break;
    }
    case DType::f16: {
      const rudnn::half* p = h.data_as<rudnn::half>();
      for (int64_t i = 0; i < n; ++i) v[i] = static_cast<float>(p[i]);
      break;
    }
    case DType::bf16: {
      const rudnn::bfloat16* p = h.data_as<rudnn::bfloat16>();
      for (int64_t i = 0; i < n; ++i) v[i] = static_cast<float>(p[i]);
      break;
    }
    default:
      throw std::runtime_error(std::string("relative_l2_error: not a float dtype: ") +
                               dtype_name(h.dtype()));
  }
  return v;
}

}  // namespace

double relative_l2_error(const Tensor& got, const Tensor& ref) {
  if (got.shape() != ref.shape()) {
    throw std::runtime_error("relative_l2_error: shapes differ: " + shape_str(got.shape()) +
                             " vs " + shape_str(ref.shape()));
  }
  const std::vector<double> a = host_doubles(got), b = host_doubles(ref);
  double diff = 0, norm = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const bool fa = std::isfinite(a[i]), fb = std::isfinite(b[i]);
    if (fa != fb) return std::nan("");
    if (!fa) {
      if (std::isnan(a[i]) != std::isnan(b[i]) || (!std::isnan(a[i]) && a[i] != b[i]))
        return std::nan("");
      continue;
    }
    diff += (a[i] - b[i]) * (a[i] - b[i]);
    norm += b[i] * b[i];
  }
  return norm > 0 ? std::sqrt(diff / norm) : std::sqrt(diff);
}

// ---- Results --------------------------------------------------------------------------------
std::string shape_string(const Shape& shape) {
  std::string s;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += "x";
    s += std::to_string(shape[i]);
  }
  return s.empty() ? "scalar" : s;
}

Row& Table::add(Row row) {
  // Runs are enqueued ahead of the device only while the host is the faster of the two.
  if (row.timing.runs > 0 && row.timing.host_ms >= 0.5 * row.timing.median_ms) {
    std::fprintf(stderr,
                 "note: %s: the host takes %.4f ms to enqueue a run of %.4f ms on the device%s\n",
                 row.op.c_str(), row.timing.host_ms, row.timing.median_ms,
                 row.timing.host_ms >= row.timing.median_ms ? " (host-bound figure)" : "");
  }
  if (row.timing.median_ms > 0 && row.bytes > 0) {
    row.gbs = row.bytes / (row.timing.median_ms * 1e6);
    row.pct_copy = copy_gbs_ > 0 ? 100.0 * row.gbs / copy_gbs_ : 0.0;
  }
  rows_.push_back(std::move(row));
  return rows_.back();
}

bool Table::all_ok() const {
  return std::all_of(rows_.begin(), rows_.end(), [](const Row& r) { return r.status == "ok"; });
}

void Table::print(std::FILE* out) const {
  std::fprintf(out, "%-36s %-12s %-5s %10s %9s %7s %9s  %s\n", "op", "shape", "dtype", "ms(med)",
               "GB/s", "%copy", "check", "status");
  std::fprintf(out, "%s\n", std::string(104, '-').c_str());
  for (const Row& r : rows_) {
    char check[32];
    if (r.check_error < 0) {
      std::snprintf(check, sizeof check, "%9s", "-");
    } else {
      std::snprintf(check, sizeof check, "%9.2e", r.check_error);
    }
    if (r.timing.runs > 0) {
      std::fprintf(out, "%-36s %-12s %-5s %10.4f %9.1f %7.1f %s  %s\n", r.op.c_str(),
                   r.shape.c_str(), r.dtype.c_str(), r.timing.median_ms, r.gbs, r.pct_copy, check,
                   r.status.c_str());
    } else {
      std::fprintf(out, "%-36s %-12s %-5s %10s %9s %7s %s  %s\n", r.op.c_str(), r.shape.c_str(),
                   r.dtype.c_str(), "-", "-", "-", check, r.status.c_str());
    }
  }
  std::fflush(out);
}

static std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
  std::string q = "\"";
  for (char c : s) q += c == '"' ? std::string("\"\"") : std::string(1, c);
  return q + "\"";
}

void Table::write_csv(const std::string& path) const {
  std::ofstream f(path);
  if (!f) throw std::runtime_error("cannot write " + path);
  f << "op,shape,dtype,median_ms,min_ms,max_ms,mean_ms,runs,sets,bytes,gbs,pct_copy,copy_gbs,check_"
       "rel_err,status\n";
  char buf[512];
  for (const Row& r : rows_) {
    std::snprintf(buf, sizeof buf, "%.6f,%.6f,%.6f,%.6f,%d,%d,%.0f,%.2f,%.2f,%.2f,%.3e",
                  r.timing.median_ms, r.timing.min_ms, r.timing.max_ms, r.timing.mean_ms,
                  r.timing.runs, r.timing.sets, r.bytes, r.gbs, r.pct_copy, copy_gbs_,
                  r.check_error);
    f << csv_field(r.op) << ',' << csv_field(r.shape) << ',' << csv_field(r.dtype) << ',' << buf
      << ',' << csv_field(r.status) << '\n';
  }
  if (!f) throw std::runtime_error("error writing " + path);
}

// ---- The context every case runs in -----------------------------------------------------------
int64_t Bench::size(const std::string& name) const {
  const auto it = opt.sizes.find(name);
  if (it == opt.sizes.end())
    throw std::runtime_error("no size option --" + name + " was registered");
  return it->second;
}

bool Bench::wanted(const std::string& op) const {
  if (!variant.empty() &&
      std::find(variant_ops.begin(), variant_ops.end(), op) == variant_ops.end())
    return false;
  return opt.filter.empty() || op.find(opt.filter) != std::string::npos;
}

int Bench::sets_for(size_t bytes_per_set) const {
  size_t free_b = 0, total_b = 0;
  RUDNN_BENCH_CUDA(cudaMemGetInfo(&free_b, &total_b));
  return rotation_sets(bytes_per_set, info.l2_bytes, static_cast<size_t>(0.7 * free_b),
                       opt.min_sets);
}

void Bench::run(const std::string& op, const Shape& shape, DType dtype, double bytes, int sets,
                const std::function<void(int)>& fn, const std::function<double()>& check,
                double tol) {
  if (!wanted(op)) return;
  Row row;
  row.op = variant.empty() ? op : op + " [" + variant + "]";
  row.shape = shape_string(shape);
  row.dtype = dtype_name(dtype);
  row.bytes = bytes;
  try {
    fn(0);
    sync();
    if (opt.check && check) {
      row.check_error = check();
      if (!(row.check_error <= tol)) {
        char buf[96];
        std::snprintf(buf, sizeof buf, "FAILED (rel err %.3e > %.0e)", row.check_error, tol);
        row.status = buf;
      }
    }
    row.timing = time_on_stream(cs, sets, fn, timing);
  } catch (const std::exception& e) {
    (void)cudaStreamSynchronize(cs);
    (void)cudaGetLastError();
    std::string what = e.what();
    if (what.size() > 160) what = what.substr(0, 160) + "...";
    row.status = "ERROR (" + what + ")";
  }
  const Row& r = table.add(row);
  std::fprintf(stderr, "  %-36s %10.4f ms %9.1f GB/s %6.1f%%  %s\n", r.op.c_str(),
               r.timing.median_ms, r.gbs, r.pct_copy, r.status.c_str());
}

Tensor Bench::normal(const Shape& shape, DType dtype, uint64_t seed, float mean, float sd) const {
  Tensor t = empty(shape, dtype);
  fill_normal(t, seed, mean, sd, cs);
  return t;
}

std::vector<Tensor> Bench::empties(int sets, const Shape& shape, DType dtype) const {
  std::vector<Tensor> v;
  for (int i = 0; i < sets; ++i) v.push_back(empty(shape, dtype));
  return v;
}

std::vector<Tensor> Bench::normals(int sets, const Shape& shape, DType dtype, uint64_t seed) const {
  std::vector<Tensor> v;
  for (int i = 0; i < sets; ++i)
    v.push_back(normal(shape, dtype, seed * 1000003u + static_cast<uint64_t>(i)));
  return v;
}

double Bench::ends(int64_t rows, const std::function<double(int64_t, int64_t)>& f) const {
  const int64_t k = std::min(opt.check_rows, rows);
  double e = f(0, k);
  if (rows > k) e = worst(e, f(rows - k, rows));
  return e;
}

double worst(double a, double b) {
  return (std::isnan(a) || std::isnan(b)) ? std::nan("") : std::max(a, b);
}

// ---- Families -----------------------------------------------------------------------------------
namespace {

std::vector<Family>& registry() {
  static std::vector<Family> all;  // filled by static registrars, before main
  return all;
}

}  // namespace

bool register_family(const std::string& name, Family family) {
  family.name = name;
  registry().push_back(std::move(family));
  return true;
}

const std::vector<Family>& families() { return registry(); }

}  // namespace rudnn::bench

// ---- main: options, the device, every family, the table
// -------------------------------------------
namespace {

using rudnn::bench::Options;

[[noreturn]] void usage(int code) {
  std::printf(
      "usage: rudnn_bench [options]\n"
      "  --quick          fewer repetitions (warm-up 3, 20 timed runs)\n"
      "  --csv FILE       also write the rows as CSV\n"
      "  --runs N         timed runs per op (default 100)\n"
      "  --warmup N       warm-up runs per op (default 10, and at least 25 ms)\n"
      "  --sets N         at least N input sets to rotate among (default 2)\n"
      "  --filter TEXT    only ops whose name contains TEXT\n"
      "  --no-check       skip the comparison with the CPU reference\n"
      "  --device N       CUDA device (default 0)\n"
      "  --variants       also time the ops with launch choices once per alternative choice\n");
  for (const rudnn::bench::Family& family : rudnn::bench::families()) {
    std::printf("%s:\n", family.name.c_str());
    for (const rudnn::bench::SizeOption& o : family.sizes) {
      const std::string flag = "--" + o.name + " N";
      std::printf("  %-16s %s (default %lld)\n", flag.c_str(), o.help.c_str(),
                  static_cast<long long>(o.value));
    }
  }
  std::exit(code);
}

Options parse(int argc, char** argv) {
  Options o;
  for (const rudnn::bench::Family& family : rudnn::bench::families()) {
    for (const rudnn::bench::SizeOption& s : family.sizes) o.sizes[s.name] = s.value;
  }
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "rudnn_bench: %s needs a value\n", a.c_str());
        usage(2);
      }
      return argv[++i];
    };
    const auto size = a.rfind("--", 0) == 0 ? o.sizes.find(a.substr(2)) : o.sizes.end();
    if (a == "--quick")
      o.quick = true;
    else if (a == "--variants")
      o.variants = true;
    else if (a == "--no-check")
      o.check = false;
    else if (a == "--csv")
      o.csv = next();
    else if (a == "--filter")
      o.filter = next();
    else if (a == "--runs")
      o.runs = std::atoi(next().c_str());
    else if (a == "--warmup")
      o.warmup = std::atoi(next().c_str());
    else if (a == "--sets")
      o.min_sets = std::max(1, std::atoi(next().c_str()));
    else if (a == "--device")
      o.device = std::atoi(next().c_str());
    else if (size != o.sizes.end())
      size->second = std::atoll(next().c_str());
    else if (a == "-h" || a == "--help")
      usage(0);
    else {
      std::fprintf(stderr, "rudnn_bench: unknown argument %s\n", a.c_str());
      usage(2);
    }
  }
  for (const auto& [name, value] : o.sizes) {
    if (value < 1) {
      std::fprintf(stderr, "rudnn_bench: shapes must be positive (--%s %lld)\n", name.c_str(),
                   static_cast<long long>(value));
      usage(2);
    }
  }
  return o;
}

std::string family_names() {
  std::string names;
  for (const rudnn::bench::Family& family : rudnn::bench::families())
    names += (names.empty() ? "" : ", ") + family.name;
  return names + (rudnn::bench::families().size() == 1 ? " family" : " families");
}

}  // namespace

int main(int argc, char** argv) {
  using namespace rudnn;
  using bench::Row;
  using bench::Table;
  bench::Bench b;
  b.opt = parse(argc, argv);
  if (b.opt.quick) {
    b.timing.warmup_runs = 3;
    b.timing.warmup_ms = 5;
    b.timing.runs = 20;
  }
  if (b.opt.runs > 0) b.timing.runs = b.opt.runs;
  if (b.opt.warmup >= 0) {
    b.timing.warmup_runs = b.opt.warmup;
    b.timing.warmup_ms = 0;
  }

  try {
    if (!cuda_available()) {
      std::fprintf(stderr, "rudnn_bench: no usable CUDA device (ruDNN built with CUDA: %s)\n",
                   built_with_cuda() ? "yes" : "no");
      return 2;
    }
    RUDNN_BENCH_CUDA(cudaSetDevice(b.opt.device));
    b.info = bench::query_device(b.opt.device);
    b.dev = Device::cuda(b.opt.device);
    RUDNN_BENCH_CUDA(cudaStreamCreateWithFlags(&b.cs, cudaStreamNonBlocking));
    b.stream = Stream::borrow(b.dev, b.cs);

    std::printf("ruDNN %s benchmark, %s\n", rudnn::version(), family_names().c_str());
    std::printf("device: %s\n", b.info.str().c_str());
    std::printf(
        "timing: CUDA events per run, median of %d runs after >= %d warm-up runs (%.0f ms); inputs "
        "rotated\n",
        b.timing.runs, b.timing.warmup_runs, b.timing.warmup_ms);
    std::fflush(stdout);

    const bench::CopyBandwidth copy0 =
        bench::measure_copy_bandwidth(b.cs, b.opt.copy_bytes, b.timing);
    std::fprintf(stderr, "copy d2d %zu MiB: %.4f ms, %.1f GB/s\n", b.opt.copy_bytes >> 20,
                 copy0.timing.median_ms, copy0.gbs);
    b.table.set_copy_gbs(copy0.gbs);

    for (const bench::Family& family : bench::families()) {
      family.run(b);
      release_cached_memory(b.dev);
    }
    if (b.opt.variants) {
      for (const bench::Family& family : bench::families()) {
        if (family.run_variants) family.run_variants(b);
      }
    }

    // The copy again at the end: the ceiling is the better of the two, and the pair shows
    // whether the card's state drifted during the run.
    const bench::CopyBandwidth copy1 =
        bench::measure_copy_bandwidth(b.cs, b.opt.copy_bytes, b.timing);
    const double ceiling = std::max(copy0.gbs, copy1.gbs);
    Table out;
    out.set_copy_gbs(ceiling);
    Row copy_row;
    copy_row.op = "copy d2d (cudaMemcpyAsync, ceiling)";
    copy_row.shape = std::to_string(b.opt.copy_bytes >> 20) + "MiB";
    copy_row.dtype = "u8";
    copy_row.bytes = 2.0 * static_cast<double>(b.opt.copy_bytes);
    copy_row.timing = copy0.gbs >= copy1.gbs ? copy0.timing : copy1.timing;
    out.add(copy_row);
    for (Row r : b.table.rows()) out.add(r);

    std::printf("copy bandwidth: %.1f GB/s at start, %.1f GB/s at end (ceiling: %.1f GB/s)\n",
                copy0.gbs, copy1.gbs, ceiling);
    std::printf(
        "GB/s = bytes read + written once (ANCHORS.md); %%copy = GB/s over the ceiling; check = "
        "relative L2 "
        "error of the first/last %lld rows against the CPU reference\n\n",
        static_cast<long long>(b.opt.check_rows));
    out.print(stdout);
    if (!b.opt.csv.empty()) {
      out.write_csv(b.opt.csv);
      std::printf("\nwrote %s\n", b.opt.csv.c_str());
    }
    cudaStreamDestroy(b.cs);
    return out.all_ok() ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rudnn_bench: %s\n", e.what());
    return 3;
  }
}
