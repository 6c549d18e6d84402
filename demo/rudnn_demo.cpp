// ruDNN demo: runs every normalization op on the GPU when one is present (else on the CPU),
// checks each result, and prints its time and bandwidth.
//
// On the GPU each result is compared with the CPU reference on the same inputs (relative L2
// error, per-dtype tolerance). On the CPU the op *is* the reference, so each result is
// checked against a property that does not use the op's code (softmax rows sum to 1, a
// normalised row has mean square 1, cross entropy equals logsumexp minus the target logit).
//
//   rudnn_demo [--cpu] [--rows N] [--cols H] [--dtype f32|f16|bf16] [--iters K]
//
// A bad argument is a message and exit status 2; memory that cannot be had, status 1.
#include <rudnn/rudnn.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <functional>
#include <new>
#include <random>
#include <string>
#include <vector>

namespace {

using rudnn::DType;
using rudnn::Tensor;

struct Options {
  bool force_cpu = false;
  int64_t rows = 0, cols = 0;  // 0: not given ([8192, 4096] on the GPU, [1024, 1024] on the CPU)
  DType dtype = DType::bf16;
  int iters = 0;  // 0: not given (20 on the GPU, 2 on the CPU)
};

constexpr const char* kUsage =
    "usage: rudnn_demo [--cpu] [--rows N] [--cols H] [--dtype f32|f16|bf16] [--iters K]\n"
    "  N, H, K: positive integers. Exit status: 0 every check passed, 1 a check failed or the\n"
    "  memory could not be had, 2 a bad argument.\n";

// A bad command line: the reason and the usage on stderr, exit status 2.
[[noreturn]] void bad_argument(const std::string& why) {
  std::fprintf(stderr, "rudnn_demo: %s\n%s", why.c_str(), kUsage);
  std::exit(2);
}

// The whole of `text` as an integer in [1, most], else a bad argument naming `flag`.
int64_t positive_integer(const std::string& flag, const char* text, int64_t most) {
  errno = 0;
  char* end = nullptr;
  const long long v = std::strtoll(text, &end, 10);
  if (end == text || *end != '\0' || errno == ERANGE || v < 1 || v > most) {
    bad_argument(flag + " " + text + ": expected an integer from 1 to " + std::to_string(most));
  }
  return v;
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> const char* {
      if (i + 1 >= argc) bad_argument(a + " needs a value");
      return argv[++i];
    };
    // Rows and columns up to 2^40 each: their product is checked against memory in main.
    if (a == "--cpu")
      o.force_cpu = true;
    else if (a == "--rows")
      o.rows = positive_integer(a, next(), int64_t{1} << 40);
    else if (a == "--cols")
      o.cols = positive_integer(a, next(), int64_t{1} << 40);
    else if (a == "--iters")
      o.iters = static_cast<int>(positive_integer(a, next(), 1000000));
    else if (a == "--dtype") {
      const std::string d = next();
      if (d == "f32")
        o.dtype = DType::f32;
      else if (d == "f16")
        o.dtype = DType::f16;
      else if (d == "bf16")
        o.dtype = DType::bf16;
      else
        bad_argument("--dtype " + d + ": expected f32, f16 or bf16");
    } else if (a == "--help" || a == "-h") {
      std::printf("%s", kUsage);
      std::exit(0);
    } else {
      bad_argument("unknown argument " + a);
    }
  }
  return o;
}

// Host memory the system can still give (MemAvailable), or 0 when unknown.
uint64_t available_host_bytes() {
  std::FILE* f = std::fopen("/proc/meminfo", "r");
  if (!f) return 0;
  char line[256];
  unsigned long long kib = 0;
  while (std::fgets(line, sizeof line, f)) {
    if (std::sscanf(line, "MemAvailable: %llu kB", &kib) == 1) break;
  }
  std::fclose(f);
  return static_cast<uint64_t>(kib) * 1024;
}

Tensor random_host(std::mt19937& gen, const rudnn::Shape& shape, DType dtype, float scale = 1.0f) {
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(static_cast<size_t>(rudnn::shape_numel(shape)));
  for (float& x : v) x = dist(gen);
  const Tensor f = Tensor::from_host(v, shape);
  if (dtype == DType::f32) return f;
  // Round to the 16-bit dtype on the host.
  std::vector<uint16_t> bits(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    bits[i] = dtype == DType::f16 ? rudnn::half(v[i]).bits : rudnn::bfloat16(v[i]).bits;
  }
  return Tensor::from_host(bits.data(), shape, dtype);
}

std::vector<double> values(const Tensor& t) {
  const Tensor h = t.to_host();
  std::vector<double> out(static_cast<size_t>(h.numel()));
  for (size_t i = 0; i < out.size(); ++i) {
    switch (h.dtype()) {
      case DType::f32:
        out[i] = static_cast<const float*>(h.data())[i];
        break;
      case DType::f16:
        out[i] = static_cast<float>(static_cast<const rudnn::half*>(h.data())[i]);
        break;
      case DType::bf16:
        out[i] = static_cast<float>(static_cast<const rudnn::bfloat16*>(h.data())[i]);
        break;
      case DType::i64:
        out[i] = static_cast<double>(static_cast<const int64_t*>(h.data())[i]);
        break;
      default:
        out[i] = NAN;
    }
  }
  return out;
}

double relative_error(const Tensor& got, const Tensor& expected) {
  const auto g = values(got), e = values(expected);
  double d2 = 0, e2 = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    d2 += (g[i] - e[i]) * (g[i] - e[i]);
    e2 += e[i] * e[i];
  }
  return std::sqrt(d2 / (e2 > 0 ? e2 : 1));
}

double tolerance(DType d) { return d == DType::f32 ? 1e-5 : d == DType::f16 ? 2e-3 : 1e-2; }

struct Case {
  const char* name;
  double bytes;                               // read + written once
  std::function<Tensor(bool on_device)> run;  // returns the output that is checked
  // Property check on the (host) result, used where the op is itself the reference.
  std::function<double(const Tensor& out)> property_error;
};

int run(const Options& o) {
  const bool gpu = !o.force_cpu && rudnn::cuda_available();
  const rudnn::Device device = gpu ? rudnn::Device::cuda(0) : rudnn::Device::cpu();
  const rudnn::Stream stream = gpu ? rudnn::Stream::create(device) : rudnn::Stream::cpu();
  const int64_t rows = o.rows > 0 ? o.rows : gpu ? 8192 : 1024;
  const int64_t cols = o.cols > 0 ? o.cols : gpu ? 4096 : 1024;
  const int iters = o.iters > 0 ? o.iters : gpu ? 20 : 2;
  const size_t item = rudnn::dtype_size(o.dtype);
  // The host holds about eight row-sized tensors at once (inputs, float staging, reference
  // results); ask before allocating, so that a shape too large is a message, not an OOM kill.
  const long double host_need = static_cast<long double>(rows) * cols * (6 * item + 8);
  const uint64_t host_available = available_host_bytes();
  if (host_available > 0 && host_need > host_available) {
    std::fprintf(
        stderr,
        "rudnn_demo: [%lld, %lld] %s needs about %.3Lg GB of host memory; %.3g GB available\n",
        static_cast<long long>(rows), static_cast<long long>(cols), rudnn::dtype_name(o.dtype),
        host_need / 1e9, static_cast<double>(host_available) / 1e9);
    return 1;
  }
  std::printf("ruDNN %s demo on %s (%s): %s [%lld, %lld], %d timed runs per op\n", rudnn::version(),
              device.str().c_str(), gpu ? "CUDA" : "CPU reference", rudnn::dtype_name(o.dtype),
              static_cast<long long>(rows), static_cast<long long>(cols), iters);

  std::mt19937 gen(std::random_device{}());
  const Tensor hx = random_host(gen, {rows, cols}, o.dtype),
               hr = random_host(gen, {rows, cols}, o.dtype);
  const Tensor hdy = random_host(gen, {rows, cols}, o.dtype);
  const Tensor hg = random_host(gen, {cols}, DType::f32), hb = random_host(gen, {cols}, DType::f32);
  std::vector<int64_t> targets(static_cast<size_t>(rows));
  for (auto& t : targets) t = std::uniform_int_distribution<int64_t>(0, cols - 1)(gen);
  const Tensor ht = Tensor::from_host(targets, {rows});
  auto on = [&](const Tensor& t) { return gpu ? t.to(device, stream) : t; };
  const Tensor x = on(hx), r = on(hr), dy = on(hdy), g = on(hg), b = on(hb), t = on(ht);
  auto pick = [](bool dev, const Tensor& d, const Tensor& h) { return dev ? d : h; };
  const double n = static_cast<double>(rows * cols) * item;

  // Property checks: each returns an error measure to compare with the dtype's tolerance.
  auto unit_mean_square = [&](const Tensor& y) {  // rms_norm without gamma
    const auto v = values(y);
    double worst = 0;
    for (int64_t i = 0; i < rows; ++i) {
      double ms = 0;
      for (int64_t c = 0; c < cols; ++c) ms += v[i * cols + c] * v[i * cols + c];
      worst = std::fmax(worst, std::fabs(ms / cols - 1));
    }
    return worst / 10;  // a row's mean square carries ~10x the elements' relative error
  };
  auto rows_sum_to_one = [&](const Tensor& p) {
    const auto v = values(p);
    double worst = 0;
    for (int64_t i = 0; i < rows; ++i) {
      double s = 0;
      for (int64_t c = 0; c < cols; ++c) s += v[i * cols + c];
      worst = std::fmax(worst, std::fabs(s - 1));
    }
    return worst / 10;
  };
  auto loss_is_lse_minus_target = [&](const Tensor& loss) {
    const auto l = values(loss), lse = values(rudnn::logsumexp(hx)), xv = values(hx);
    double worst = 0;
    for (int64_t i = 0; i < rows; ++i)
      worst = std::fmax(worst, std::fabs(l[i] - (lse[i] - xv[i * cols + targets[i]])) / 10);
    return worst;
  };
  auto finite = [](const Tensor& y) {
    for (double v : values(y)) {
      if (!std::isfinite(v)) return 1.0;
    }
    return 0.0;
  };

  const std::vector<Case> cases = {
      {"layer_norm", 2 * n,
       [&](bool d) {
         return rudnn::layer_norm(pick(d, x, hx), pick(d, g, hg), pick(d, b, hb), 1e-5f,
                                  d ? stream : rudnn::Stream());
       },
       finite},
      {"rms_norm", 2 * n,
       [&](bool d) {
         return rudnn::rms_norm(pick(d, x, hx), {}, 1e-6f, d ? stream : rudnn::Stream());
       },
       unit_mean_square},
      {"add_rms_norm", 4 * n,
       [&](bool d) {
         return rudnn::add_rms_norm(pick(d, x, hx), pick(d, r, hr), pick(d, g, hg), 1e-6f,
                                    d ? stream : rudnn::Stream())
             .normed;
       },
       finite},
      {"softmax_last_axis", 2 * n,
       [&](bool d) {
         return rudnn::softmax_last_axis(pick(d, x, hx), d ? stream : rudnn::Stream());
       },
       rows_sum_to_one},
      {"logsumexp", n,
       [&](bool d) { return rudnn::logsumexp(pick(d, x, hx), d ? stream : rudnn::Stream()); },
       finite},
      {"cross_entropy", n,
       [&](bool d) {
         return rudnn::cross_entropy(pick(d, x, hx), pick(d, t, ht), {},
                                     d ? stream : rudnn::Stream());
       },
       loss_is_lse_minus_target},
      {"cross_entropy_with_grad", 2 * n,
       [&](bool d) {
         return rudnn::cross_entropy_with_grad(pick(d, x, hx), pick(d, t, ht), 1.0f / rows, {},
                                               d ? stream : rudnn::Stream())
             .dlogits;
       },
       finite},
      {"layer_norm_backward", 3 * n,
       [&](bool d) {
         return rudnn::layer_norm_backward(pick(d, dy, hdy), pick(d, x, hx), pick(d, g, hg),
                                           pick(d, b, hb), 1e-5f, d ? stream : rudnn::Stream())
             .dx;
       },
       finite},
      {"rms_norm_backward", 3 * n,
       [&](bool d) {
         return rudnn::rms_norm_backward(pick(d, dy, hdy), pick(d, x, hx), pick(d, g, hg), 1e-6f,
                                         d ? stream : rudnn::Stream())
             .dx;
       },
       finite},
      {"softmax_backward", 3 * n,
       [&](bool d) {
         return rudnn::softmax_backward(pick(d, dy, hdy), pick(d, x, hx),
                                        d ? stream : rudnn::Stream());
       },
       finite},
  };

  int failures = 0;
  std::printf("%-24s %10s %10s %12s  %s\n", "op", "ms", "GB/s", "error", "check");
  for (const Case& c : cases) {
    Tensor out = c.run(gpu);  // warm-up
    stream.synchronize();
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < iters; ++i) out = c.run(gpu);
    stream.synchronize();
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
            .count() /
        iters;
    // The GPU result against the CPU reference; the CPU result against a property.
    const double err = gpu ? relative_error(out, c.run(false)) : c.property_error(out.to_host());
    const bool ok = err <= tolerance(o.dtype) && std::isfinite(err);
    failures += !ok;
    std::printf("%-24s %10.4f %10.1f %12.3g  %s (%s)\n", c.name, ms, c.bytes / ms / 1e6, err,
                ok ? "ok" : "FAILED", gpu ? "vs CPU reference" : "property");
  }
  std::printf("%s: %d of %zu ops failed their check\n", failures ? "FAILED" : "ok", failures,
              cases.size());
  return failures ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  // Memory that cannot be had is a message and status 1, not an abort.
  try {
    return run(o);
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "rudnn_demo: out of host memory (try fewer --rows or --cols)\n");
    return 1;
  } catch (const rudnn::Error& e) {
    std::fprintf(stderr, "rudnn_demo: %s (%s)\n", e.what(), rudnn::error_code_name(e.code()));
    return 1;
  }
}
