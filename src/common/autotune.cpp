#include "common/autotune.h"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <map>
#include <mutex>

#include "core/cuda_api.h"
#include "rudnn/autotune.h"

namespace rudnn {

using detail::cat;
using detail::fail;

namespace {

// Each candidate runs once untimed (module loading, allocator warm-up), then once timed; one
// more than kPruneFactor times slower than the best so far stops there, the others run
// kTimedRuns more timed runs.
constexpr double kPruneFactor = 4.0;
constexpr int kTimedRuns = 3;

struct Record {
  std::string choice;
  std::vector<AutotuneTiming> timings;
  int measurements = 0;
};

// The process-wide record. Never destroyed: an op may run from a static destructor.
struct Store {
  std::mutex mutex;
  std::map<std::string, Record> records;
  std::string file;
  bool environment_read = false;  // RUDNN_AUTOTUNE_FILE consulted (or a file set explicitly)
};

Store& store() {
  static Store* s = new Store();
  return *s;
}

std::string errno_text() { return std::strerror(errno); }

// Reads "<key>\t<choice>[\t...]" lines into `out` (later lines win). Throws before anything
// is returned when a line does not parse.
std::map<std::string, std::string> read_file(const char* what, const std::string& path,
                                             std::FILE* f) {
  std::map<std::string, std::string> out;
  std::string line;
  int number = 0;
  const auto take = [&] {
    ++number;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty()) return;
    const size_t tab = line.find('\t');
    const size_t end = tab == std::string::npos ? tab : line.find('\t', tab + 1);
    const std::string choice =
        tab == std::string::npos ? std::string() : line.substr(tab + 1, end - tab - 1);
    if (tab == 0 || tab == std::string::npos || choice.empty()) {
      fail(ErrorCode::InvalidArgument,
           cat(what, ": ", path, ": line ", number,
               " is not \"<key>\\t<choice>[\\t...]\""));
    }
    out[line.substr(0, tab)] = choice;
  };
  char buffer[1024];
  while (std::fgets(buffer, sizeof buffer, f) != nullptr) {
    line += buffer;
    if (line.back() != '\n') continue;  // a line longer than the buffer: keep reading
    line.pop_back();
    take();
    line.clear();
  }
  if (!line.empty()) take();
  return out;
}

// Attaches `path` to the store (the caller holds its lock); `what` names the source in
// errors (autotune_set_file or RUDNN_AUTOTUNE_FILE).
void attach(Store& s, const std::string& path, const char* what) {
  s.environment_read = true;
  if (path.empty()) {
    s.file.clear();
    return;
  }
  std::map<std::string, std::string> loaded;
  if (std::FILE* f = std::fopen(path.c_str(), "r")) {
    try {
      loaded = read_file(what, path, f);
    } catch (...) {
      std::fclose(f);
      throw;
    }
    std::fclose(f);
  } else if (errno != ENOENT) {
    fail(ErrorCode::InvalidArgument,
         cat(what, ": cannot read ", path, ": ", errno_text()));
  }
  std::FILE* append = std::fopen(path.c_str(), "a");
  if (append == nullptr) {
    fail(ErrorCode::InvalidArgument,
         cat(what, ": cannot open ", path, " for appending: ", errno_text()));
  }
  std::fclose(append);
  for (auto& [key, choice] : loaded) s.records.try_emplace(key, Record{choice, {}, 0});
  s.file = path;
}

// RUDNN_AUTOTUNE_FILE, at the first use of the record (the caller holds the lock). Read
// once: an error in it is reported by that first use, and the record goes on without it.
void attach_environment_file(Store& s) {
  if (s.environment_read) return;
  s.environment_read = true;
  const char* path = std::getenv("RUDNN_AUTOTUNE_FILE");
  if (path != nullptr && *path != '\0') attach(s, path, "RUDNN_AUTOTUNE_FILE");
}

void append_line(const std::string& path, const std::string& key, const Record& r) {
  std::string line = cat(key, '\t', r.choice);
  for (size_t i = 0; i < r.timings.size(); ++i)
    line += cat(i == 0 ? '\t' : ' ', r.timings[i].candidate, '=', r.timings[i].milliseconds);
  line += '\n';
  std::FILE* f = std::fopen(path.c_str(), "a");
  const bool written = f != nullptr && std::fputs(line.c_str(), f) >= 0;
  const bool closed = f != nullptr && std::fclose(f) == 0;
  if (!written || !closed) {
    fail(ErrorCode::InvalidArgument,
         cat("autotune: cannot append the choice for \"", key, "\" to ", path, ": ",
             errno_text(), " (the choice is kept in memory)"));
  }
}

}  // namespace

bool autotune_built() noexcept { return RUDNN_WITH_AUTOTUNE != 0; }

std::vector<AutotuneEntry> autotune_entries() {
  Store& s = store();
  std::lock_guard<std::mutex> lock(s.mutex);
  attach_environment_file(s);
  std::vector<AutotuneEntry> out;
  out.reserve(s.records.size());
  for (const auto& [key, r] : s.records) out.push_back({key, r.choice, r.timings, r.measurements});
  return out;
}

void autotune_clear() {
  Store& s = store();
  std::lock_guard<std::mutex> lock(s.mutex);
  attach_environment_file(s);
  s.records.clear();
}

void autotune_set_file(const std::string& path) {
  Store& s = store();
  std::lock_guard<std::mutex> lock(s.mutex);
  attach(s, path, "autotune_set_file");
}

std::string autotune_file() {
  Store& s = store();
  std::lock_guard<std::mutex> lock(s.mutex);
  attach_environment_file(s);
  return s.file;
}

namespace common {

void require_autotune_built(const char* op) {
  if (!autotune_built()) {
    fail(ErrorCode::Unsupported, cat(op,
                                     ": strategy Autotune: ruDNN was built without it "
                                     "(RUDNN_AUTOTUNE=OFF); use Auto or name a strategy"));
  }
}

int64_t size_class(int64_t n) {
  int64_t c = 1;
  while (c < n) c *= 2;
  return n <= 1 ? n : c;
}

std::string autotune_recorded(const std::string& key) {
  Store& s = store();
  std::lock_guard<std::mutex> lock(s.mutex);
  attach_environment_file(s);
  const auto found = s.records.find(key);
  return found == s.records.end() ? std::string() : found->second.choice;
}

std::string key_prefix(const char* op, Device device) {
  return cat(op, " | ", detail::cuda::device_description(device), " | ");
}

std::string autotuned_choice(const OpCall& call, const std::string& key,
                             const std::vector<TuneCandidate>& candidates,
                             const std::string& untuned) {
  const Device device = call.device;
  const cuda_stream_t stream = call.stream.handle();
  return autotuned_choice(
      key, candidates, untuned, [&] { return detail::cuda::stream_capturing(device, stream); },
      [&](const std::function<void()>& run, int repeats) {
        return detail::cuda::time_on_stream_ms(device, stream, run, repeats);
      });
}

std::string autotuned_choice(const std::string& key, const std::vector<TuneCandidate>& candidates,
                             const std::string& untuned, const std::function<bool()>& capturing,
                             const TuneTimer& time) {
  const auto known = [&](const std::string& label) {
    for (const TuneCandidate& c : candidates) {
      if (c.label == label) return true;
    }
    return false;
  };
  if (candidates.size() == 1) return candidates.front().label;
  const std::string recorded = autotune_recorded(key);
  if (known(recorded)) return recorded;
  // Asked on a miss only: a recorded class makes no CUDA call here.
  if (capturing()) return untuned;

  std::vector<AutotuneTiming> timings;
  const std::string* best = nullptr;
  double best_ms = 0.0;
  std::exception_ptr last_error;
  for (const TuneCandidate& c : candidates) {
    try {
      c.run();
      double ms = time(c.run, 1);
      if (best == nullptr || ms <= kPruneFactor * best_ms) ms = time(c.run, kTimedRuns);
      timings.push_back({c.label, ms});
      if (best == nullptr || ms < best_ms) {
        best = &c.label;
        best_ms = ms;
      }
    } catch (const Error& e) {
      // A candidate that needs more memory than is free is left out; any other error is
      // the call's.
      if (e.code() != ErrorCode::OutOfMemory) throw;
      last_error = std::current_exception();
    }
  }
  if (best == nullptr) std::rethrow_exception(last_error);

  Store& s = store();
  std::lock_guard<std::mutex> lock(s.mutex);
  Record& r = s.records[key];
  ++r.measurements;
  // Another thread may have recorded a choice meanwhile: the first one recorded is kept.
  if (r.choice.empty() || !known(r.choice)) {
    r.choice = *best;
    r.timings = std::move(timings);
    if (!s.file.empty()) append_line(s.file, key, r);
  }
  return r.choice;
}

}  // namespace common

}  // namespace rudnn
