// Benchmark harness: see harness.h.
#include "harness.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <cstring>
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
    s << ", memory " << memory_clock_khz / 1000 << " MHz x " << memory_bus_bits
      << " bit (nominal " << static_cast<long>(peak) << " GB/s)";
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
  for (int i = 0; i < runs; ++i) {
    RUDNN_BENCH_CUDA(cudaEventRecord(ev.events[2 * i], stream));
    fn(i % sets);
    RUDNN_BENCH_CUDA(cudaEventRecord(ev.events[2 * i + 1], stream));
  }
  RUDNN_BENCH_CUDA(cudaStreamSynchronize(stream));
  RUDNN_BENCH_CUDA(cudaGetLastError());
  std::vector<float> ms(runs);
  for (int i = 0; i < runs; ++i)
    RUDNN_BENCH_CUDA(cudaEventElapsedTime(&ms[i], ev.events[2 * i], ev.events[2 * i + 1]));
  return summarize(std::move(ms), sets);
}

int rotation_sets(size_t bytes_per_set, size_t l2_bytes, size_t budget_bytes, int min_sets,
                  double factor, int max_sets) {
  if (bytes_per_set == 0) return 1;
  const double need = std::ceil(factor * static_cast<double>(l2_bytes) / static_cast<double>(bytes_per_set));
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
        stream, 1, [&](int) { RUDNN_BENCH_CUDA(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, stream)); },
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
__device__ __forceinline__ float from_float<float>(float v) { return v; }
template <>
__device__ __forceinline__ __half from_float<__half>(float v) { return __float2half_rn(v); }
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }

template <class T>
__global__ void fill_normal_kernel(T* __restrict__ out, int64_t n, uint64_t seed, float mean, float stddev) {
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
__global__ void fill_integers_kernel(T* __restrict__ out, int64_t n, uint64_t seed, int64_t lo, uint64_t range) {
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
      fill_normal_kernel<<<grid, 256, 0, stream>>>(static_cast<float*>(t.data()), n, seed, mean, stddev);
      break;
    case DType::f16:
      fill_normal_kernel<<<grid, 256, 0, stream>>>(static_cast<__half*>(t.data()), n, seed, mean, stddev);
      break;
    case DType::bf16:
      fill_normal_kernel<<<grid, 256, 0, stream>>>(static_cast<__nv_bfloat16*>(t.data()), n, seed, mean, stddev);
      break;
    default:
      throw std::runtime_error(std::string("fill_normal: not a float dtype: ") + dtype_name(t.dtype()));
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
      fill_integers_kernel<<<grid, 256, 0, stream>>>(static_cast<int32_t*>(t.data()), n, seed, lo, range);
      break;
    case DType::i64:
      fill_integers_kernel<<<grid, 256, 0, stream>>>(static_cast<int64_t*>(t.data()), n, seed, lo, range);
      break;
    case DType::u32:
      fill_integers_kernel<<<grid, 256, 0, stream>>>(static_cast<uint32_t*>(t.data()), n, seed, lo, range);
      break;
    case DType::u8:
      fill_integers_kernel<<<grid, 256, 0, stream>>>(static_cast<uint8_t*>(t.data()), n, seed, lo, range);
      break;
    default:
      throw std::runtime_error(std::string("fill_integers: not an integer dtype: ") + dtype_name(t.dtype()));
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
      throw std::runtime_error(std::string("relative_l2_error: not a float dtype: ") + dtype_name(h.dtype()));
  }
  return v;
}

}  // namespace

double relative_l2_error(const Tensor& got, const Tensor& ref) {
  if (got.shape() != ref.shape()) {
    throw std::runtime_error("relative_l2_error: shapes differ: " + shape_str(got.shape()) + " vs " +
                             shape_str(ref.shape()));
  }
  const std::vector<double> a = host_doubles(got), b = host_doubles(ref);
  double diff = 0, norm = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const bool fa = std::isfinite(a[i]), fb = std::isfinite(b[i]);
    if (fa != fb) return std::nan("");
    if (!fa) {
      if (std::isnan(a[i]) != std::isnan(b[i]) || (!std::isnan(a[i]) && a[i] != b[i])) return std::nan("");
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
  std::fprintf(out, "%-36s %-12s %-5s %10s %9s %7s %9s  %s\n", "op", "shape", "dtype", "ms(med)", "GB/s",
               "%copy", "check", "status");
  std::fprintf(out, "%s\n", std::string(104, '-').c_str());
  for (const Row& r : rows_) {
    char check[32];
    if (r.check_error < 0) {
      std::snprintf(check, sizeof check, "%9s", "-");
    } else {
      std::snprintf(check, sizeof check, "%9.2e", r.check_error);
    }
    if (r.timing.runs > 0) {
      std::fprintf(out, "%-36s %-12s %-5s %10.4f %9.1f %7.1f %s  %s\n", r.op.c_str(), r.shape.c_str(),
                   r.dtype.c_str(), r.timing.median_ms, r.gbs, r.pct_copy, check, r.status.c_str());
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
  f << "op,shape,dtype,median_ms,min_ms,max_ms,mean_ms,runs,sets,bytes,gbs,pct_copy,copy_gbs,check_rel_err,status\n";
  char buf[512];
  for (const Row& r : rows_) {
    std::snprintf(buf, sizeof buf, "%.6f,%.6f,%.6f,%.6f,%d,%d,%.0f,%.2f,%.2f,%.2f,%.3e", r.timing.median_ms,
                  r.timing.min_ms, r.timing.max_ms, r.timing.mean_ms, r.timing.runs, r.timing.sets, r.bytes, r.gbs,
                  r.pct_copy, copy_gbs_, r.check_error);
    f << csv_field(r.op) << ',' << csv_field(r.shape) << ',' << csv_field(r.dtype) << ',' << buf << ','
      << csv_field(r.status) << '\n';
  }
  if (!f) throw std::runtime_error("error writing " + path);
}

}  // namespace rudnn::bench
