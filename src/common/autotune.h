// The measuring half of the Autotune strategies (rudnn/autotune.h): the process-wide record
// of choices per shape-class key, the optional cache file, and the measurement of a call's
// candidates on its stream. A family builds the key and the candidates (one closure per
// strategy that can take the call, each running the op once with that strategy); this file
// decides which one runs.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "common/op_call.h"

namespace rudnn::common {

// One strategy that can take the call: its name (what is recorded) and one run of the op
// with it, writing the call's outputs on the call's stream.
struct TuneCandidate {
  std::string label;
  std::function<void()> run;
};

// The label of the candidate that runs `call` under Autotune. The recorded choice for `key`
// when it names one of `candidates`; else, while call.stream is capturing a CUDA graph,
// `untuned` (Auto's choice; nothing recorded); else the candidates measured on call.stream
// (rudnn/autotune.h says how) and the fastest recorded, in memory and in the attached file.
// A single candidate is returned as it is (nothing measured or recorded). A candidate that
// runs out of device memory is left out of the measurement (when all do, that error
// propagates); any other error propagates at once. `candidates` must not be empty. The
// measured runs leave the last candidate's result in the outputs: the caller runs the
// chosen one afterwards.
std::string autotuned_choice(const OpCall& call, const std::string& key,
                             const std::vector<TuneCandidate>& candidates,
                             const std::string& untuned);

// The mean milliseconds of `repeats` runs of `run`.
using TuneTimer = std::function<double(const std::function<void()>& run, int repeats)>;

// autotuned_choice with the capture query and the timer given (what the tests drive).
std::string autotuned_choice(const std::string& key, const std::vector<TuneCandidate>& candidates,
                             const std::string& untuned, const std::function<bool()>& capturing,
                             const TuneTimer& time);

// Throws Unsupported naming `op` when the build has no Autotune strategies.
void require_autotune_built(const char* op);

// The choice recorded for `key` ("" when none), without measuring anything.
std::string autotune_recorded(const std::string& key);

// The shape class of a size: the smallest power of two >= n (n itself for n <= 1).
int64_t size_class(int64_t n);

// "<op> | <device description> | ": the start of every key for a call on `device`.
std::string key_prefix(const char* op, Device device);

}  // namespace rudnn::common
