// Autotune: strategies chosen by measurement (AttentionStrategy::Autotune,
// ConvStrategy::Autotune), and the process-wide record of what was chosen.
//
// What it does. The first call of a shape class on a device runs, on the call's stream, each
// strategy that can take the call (one untimed run, then one timed run; a candidate more
// than 4x slower than the best so far stops there, the others run 3 more timed runs whose
// mean is their time), records the fastest under the class's key and then runs it for the
// call's result. Later calls of the class run the recorded strategy without measuring.
// Every candidate writes the call's own outputs, so the result is the recorded strategy's,
// exactly as if it had been asked for by name.
//
// Shape classes. A key names the op and direction, the device (name, compute capability,
// multiprocessor count), the dtype and layout, every option that changes which kernels can
// run (masks, bias, causal, window, cap...), the head sizes or channel counts exactly, and
// the batch and sequence or spatial sizes rounded up to a power of two: calls that differ
// only inside one power-of-two range share one measurement.
//
// Costs and limits, which is why Auto, not Autotune, is the default strategy:
// - The first call of a class blocks the calling thread until its measurements finish
//   (timing events are waited for), and queues several runs of the op.
// - A call made while its stream is capturing a CUDA graph measures nothing: it runs the
//   recorded choice when there is one, else Auto's choice, and records nothing. Make one
//   call outside the capture first to capture the tuned kernel.
// - Decode attention (Lq or max_seqlen_q <= 8) is not measured: it runs Auto's SplitKv
//   choice, which keeps the serial rule (attention.h) that a per-shape choice would break.
// - On the CPU every strategy runs the float64 reference: nothing is measured.
// - Measured times vary from run to run; two processes may choose differently where two
//   candidates are close. Give them one file (autotune_set_file) to share one choice.
//
// Thread safety: every function here and every Autotune call may run on any thread. Two
// threads that miss the same key at once may both measure; the first to finish is kept.
#pragma once

#include <string>
#include <vector>

namespace rudnn {

// Whether this build has the Autotune strategies (CMake option RUDNN_AUTOTUNE, on by
// default). Without it an Autotune request is ErrorCode::Unsupported.
bool autotune_built() noexcept;

struct AutotuneTiming {
  std::string candidate;  // a strategy name, e.g. "Flash"
  double milliseconds;    // mean of its timed runs (or its one timed run when it stopped early)
};

struct AutotuneEntry {
  std::string key;     // the shape class (see above)
  std::string choice;  // the strategy that runs, e.g. "Composed"
  // The times this process measured for the key (empty for an entry read from a file).
  std::vector<AutotuneTiming> timings;
  // How many times this process measured the key (0 for an entry read from a file).
  int measurements = 0;
};

// Every recorded choice, sorted by key.
std::vector<AutotuneEntry> autotune_entries();

// Forgets every recorded choice in memory (a file set by autotune_set_file is kept as it is
// and stays attached: later measurements still append to it).
void autotune_clear();

// Attaches a cache file: its choices are read now (taking precedence over none: a key
// already recorded in memory keeps its choice) and every later measurement is appended to
// it, one line per key: "<key>\t<choice>\t<candidate>=<ms> ...". A later line for a key
// overrides an earlier one. The file is created when missing. An empty path detaches the
// file (nothing more is written). Until this function is called, the environment variable
// RUDNN_AUTOTUNE_FILE, when set and not empty, names the file: it is attached at the first
// Autotune call or call of this header (which reports its errors, once; the record then
// goes on without a file). A choice whose strategy is unknown to this build, or that cannot
// take a call, is measured again for that call.
// Errors: InvalidArgument naming the path when the file cannot be read or created, and
// naming the line when a line is not "<key>\t<choice>[\t...]"; nothing is read from such a
// file and the file attached before, if any, stays attached.
void autotune_set_file(const std::string& path);

// The attached file's path ("" when none).
std::string autotune_file();

}  // namespace rudnn
